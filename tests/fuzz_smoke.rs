//! The seeded fuzz smoke run (issue 5): the bodies of the cargo-fuzz targets in `fuzz/` run on
//! stable inside `cargo test`, over a seed corpus and mutations of it drawn from a seeded PRNG.
//! A failure prints the seed; `HOOKWALL_FUZZ_SEED=N cargo test --release --test fuzz_smoke`
//! replays it. `HOOKWALL_FUZZ_RUNS` sets the mutations per target (default 20 000). The
//! coverage-guided runs use `cargo +nightly fuzz run <target>` (README "More", the fuzzing bullet).

#![allow(clippy::unwrap_used)]

#[path = "../fuzz/src/targets.rs"]
mod targets;

#[path = "common/rng.rs"]
mod rng;

use rng::Rng;

/// A mutation of `input`: byte flips, inserts of interesting bytes, deletions, duplications
/// of a slice, or a splice with another corpus entry.
fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    const INTERESTING: &[&[u8]] = &[
        b"\r\n",
        b"\r\n\r\n",
        b":",
        b",",
        b"=",
        b";",
        b"0",
        b"-1",
        b"18446744073709551616",
        b"chunked",
        b"Content-Length: ",
        b"Transfer-Encoding: ",
        b"\x00",
        b"\xff",
        b"\"",
        b"[",
        b"{",
        b"}",
        b"\\u0000",
        b"v1=",
        b"t=",
        b"sha256=",
        b"whsec_",
    ];
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let at = rng.below(out.len() + 1);
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                out.splice(at..at, piece.iter().copied());
            }
            2 if !out.is_empty() => {
                let at = rng.below(out.len());
                let len = rng.below(out.len() - at + 1);
                out.drain(at..at + len);
            }
            3 if !out.is_empty() => {
                let at = rng.below(out.len());
                let len = rng.below((out.len() - at).min(64) + 1);
                let piece = out[at..at + len].to_vec();
                let to = rng.below(out.len() + 1);
                out.splice(to..to, piece);
            }
            _ => {
                let other = &corpus[rng.below(corpus.len())];
                let cut = rng.below(out.len() + 1);
                let from = rng.below(other.len() + 1);
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
        }
    }
    out
}

/// `name` as a whole number when set; a set but unreadable value stops the run (a typo must not
/// silently become the default).
fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")))
}

fn seed() -> u64 {
    env_number("HOOKWALL_FUZZ_SEED").unwrap_or(0x5eed_f00d)
}

fn runs() -> usize {
    env_number("HOOKWALL_FUZZ_RUNS").map_or(20_000, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// Runs `target` on every corpus entry, then on `runs()` mutations.
fn smoke(name: &str, corpus: &[Vec<u8>], target: fn(&[u8])) {
    let seed = seed();
    eprintln!("{name}: HOOKWALL_FUZZ_SEED={seed}, {} runs", runs());
    let mut rng = Rng(seed | 1);
    for input in corpus {
        target(input);
    }
    for _ in 0..runs() {
        let base = &corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, base, corpus);
        let result = std::panic::catch_unwind(|| target(&input));
        assert!(result.is_ok(), "{name} panicked (seed {seed}) on input {input:?}");
    }
}

fn http_corpus() -> Vec<Vec<u8>> {
    vec![
        b"POST /webhooks/s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
        b"POST /webhooks/s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            .to_vec(),
        b"POST /webhooks/s HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}"
            .to_vec(),
        b"GET / HTTP/1.0\r\n\r\nPOST /a HTTP/1.1\r\nHost: y\r\nContent-Length: 0\r\n\r\n".to_vec(),
        b"POST http://h/webhooks/s HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999\r\n\r\n"
            .to_vec(),
    ]
}

fn verify_corpus() -> Vec<Vec<u8>> {
    let stripe = b"\x00stripe-signature: t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=00\ncontent-type: application/json\n\n{\"id\":\"evt_1\",\"type\":\"invoice.paid\",\"data\":{}}";
    let github = b"\x01x-hub-signature-256: sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17\nx-github-delivery: 72d3162e\nx-github-event: push\n\n{\"zen\":\"x\\u0026\\/\"}";
    let standard = b"\x02webhook-id: msg_1\nwebhook-timestamp: 1767225600\nwebhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1a,xx\n\n{\"type\":\"a\"}";
    let mut corpus =
        vec![stripe.to_vec(), github.to_vec(), standard.to_vec(), b"\x03\n\n".to_vec()];
    // Every loaded provider (the first byte picks it) with its own signature header name and a
    // JSON object and a JSON array body, so mutations start inside each provider's parser
    // rather than at "header missing" (review finding: only a few parsers were reached).
    for (index, source) in targets::sources().iter().enumerate() {
        let pick = u8::try_from(index).expect("fewer than 256 providers");
        let header = hookwall::provider::source_signature_header(source);
        let head = format!(
            "{header}: t=1767225600,v1=00ff,sha256=aa,v0=AAAA\nhost: hooks.example.com\n\
             content-type: application/json\nx-timestamp: 1767225600\nx-id: e1\n"
        );
        for body in
            [r#"{"id":"evt_1","type":"a","data":{"object":{}}}"#, r#"[{"id":"e","eventId":1}]"#]
        {
            let mut entry = vec![pick];
            entry.extend_from_slice(head.as_bytes());
            entry.extend_from_slice(b"\n");
            entry.extend_from_slice(body.as_bytes());
            corpus.push(entry);
        }
    }
    corpus
}

fn config_corpus() -> Vec<Vec<u8>> {
    let dev = include_bytes!("../config/dev.toml").to_vec();
    let minimal = b"[[source]]\nid = \"s\"\ntenant = \"t\"\nprovider = \"stripe\"\nsecrets = [{ id = \"k\", value = \"whsec_x\", not_after = \"2026-12-31T00:00:00Z\" }]\ndestination = \"d\"\n[[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\nbackoff_min = \"1s\"\n".to_vec();
    vec![
        dev,
        minimal,
        b"[server]\nlisten = \"127.0.0.1:0\"\ncores = -1\n[server.tls]\ncert = \"\"\n".to_vec(),
    ]
}

#[test]
fn http_framing_never_panics() {
    smoke("http_framing", &http_corpus(), targets::http_framing);
}

#[test]
fn verify_headers_never_panics() {
    smoke("verify_headers", &verify_corpus(), targets::verify_headers);
}

#[test]
fn config_loader_never_panics() {
    smoke("config_loader", &config_corpus(), targets::config_loader);
}

fn form_corpus() -> Vec<Vec<u8>> {
    vec![
        b"\x00payload=%7B%22zen%22%3A%22x%22%7D".to_vec(),
        b"\x01payload={\"a\":1}&other=2".to_vec(),
        b"\x02payload=%7B%7D&payload=%7B%7D".to_vec(),
        b"\x00a=1&b=%ZZ&payload=+%7B+%7D+".to_vec(),
        b"\x03payload=%7B%7D".to_vec(),
    ]
}

fn admin_json_corpus() -> Vec<Vec<u8>> {
    vec![
        b"{\"reason\": \"duplicate charge\"}".to_vec(),
        b"  \n".to_vec(),
        b"{\"reason\": null, \"x\": [1, 2]}".to_vec(),
        b"{\"reason\": \"  \\u00e9t\\u00e9 \\ud83d\\ude00 \"}".to_vec(),
        b"[\"reason\"]".to_vec(),
        b"{\"reason\": 5}".to_vec(),
    ]
}

#[test]
fn form_body_never_panics() {
    smoke("form_body", &form_corpus(), targets::form_body);
}

#[test]
fn admin_json_never_panics() {
    smoke("admin_json", &admin_json_corpus(), targets::admin_json);
}

/// Review finding: SendGrid and the generic `hmac` loaded with none of the fuzz secrets, so
/// their parsers were never fuzzed. Every provider of the build must have a fuzz source.
#[test]
fn every_provider_has_a_fuzz_source() {
    let loaded: Vec<&str> = targets::sources().iter().map(|s| s.provider.name()).collect();
    for provider in hookwall::provider::Provider::ALL {
        assert!(loaded.contains(&provider.name()), "{} has no fuzz source", provider.name());
    }
}
