//! cargo-fuzz target `admin_json`: see `fuzz/src/targets.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookwall_fuzz::admin_json(data));
