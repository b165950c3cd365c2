//! cargo-fuzz target `verify_headers`: see `fuzz/src/targets.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookwall_fuzz::verify_headers(data));
