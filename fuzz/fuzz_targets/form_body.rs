//! cargo-fuzz target `form_body`: see `fuzz/src/targets.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookwall_fuzz::form_body(data));
