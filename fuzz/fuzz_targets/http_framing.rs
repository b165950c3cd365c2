//! cargo-fuzz target `http_framing`: see `fuzz/src/targets.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookwall_fuzz::http_framing(data));
