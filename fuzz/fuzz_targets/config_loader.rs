//! cargo-fuzz target `config_loader`: see `fuzz/src/targets.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookwall_fuzz::config_loader(data));
