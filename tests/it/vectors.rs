//! Signature vectors made by the providers' own libraries (`tests/vectors/gen_vectors.py`:
//! stripe-python's `WebhookSignature.generate_signature_header`, standardwebhooks'
//! `Webhook.sign`), plus GitHub's documented example, checked with the library API
//! `hookwall::verify::verify` (R1, R2, R6). CI regenerates the JSON before the tests; the
//! committed copy keeps `cargo test` working offline.

use std::time::Duration;

use hookwall::config::{Secret, SourceConfig};
use hookwall::http::Request;
use hookwall::provider::{hmac_key, Provider};
use hookwall::verify::{verify, Reject};

/// One source of `provider` with the single key `secret` (as the dashboard shows it).
fn source(provider: Provider, secret: &str) -> SourceConfig {
    SourceConfig {
        id: "vectors".to_owned(),
        tenant: "acme".to_owned(),
        provider,
        tolerance: Duration::from_secs(300),
        future_skew: Duration::from_secs(60),
        event_types: None,
        secrets: vec![Secret {
            id: "k".to_owned(),
            key: hmac_key(provider, secret)
                .unwrap_or_else(|e| panic!("secret of {provider:?}: {e}")),
            not_before: None,
            not_after: None,
        }],
        destination: 0,
        ack_deadline: Duration::from_secs(10),
    }
}

/// A request as the framer hands it over (header names lowercased).
fn request(headers: &[(String, String)], body: &[u8]) -> Request {
    Request {
        method: "POST".to_owned(),
        target: "/webhooks/vectors".to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
        keep_alive: true,
    }
}

/// `body` with its first byte changed.
fn flipped(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out[0] ^= 0x01;
    out
}

/// Checks one authentic case: Ok at its timestamp, `SignatureInvalid` with a flipped body
/// byte, and (for timestamped schemes) `Stale` just past the tolerance.
fn check(
    name: &str,
    provider: Provider,
    secret: &str,
    headers: &[(String, String)],
    body: &[u8],
    t: i64,
) {
    let source = source(provider, secret);
    let verified = verify(&source, &request(headers, body), t);
    let verified = verified.unwrap_or_else(|e| panic!("{name}: expected authentic, got {e:?}"));
    assert_eq!(verified.secret_index, 0, "{name}");
    let signed_at = provider.signs_timestamp().then_some(t);
    assert_eq!(verified.signed_at, signed_at, "{name}: signed timestamp");
    assert_eq!(
        verify(&source, &request(headers, &flipped(body)), t),
        Err(Reject::SignatureInvalid),
        "{name}: flipped byte"
    );
    if provider.signs_timestamp() {
        assert_eq!(
            verify(&source, &request(headers, body), t + 301),
            Err(Reject::Stale),
            "{name}: 301 s later"
        );
        assert!(
            verify(&source, &request(headers, body), t + 300).is_ok(),
            "{name}: exactly at the tolerance"
        );
    }
}

/// R1, R2: hookwall accepts what the official libraries sign and nothing with one byte changed.
#[test]
fn official_library_vectors_verify() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/official_vectors.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("vectors are JSON");
    let cases = doc["cases"].as_array().expect("a cases array");
    let mut counts = (0, 0);
    for case in cases {
        let name = format!(
            "{} / {}",
            case["provider"].as_str().unwrap_or("?"),
            case["name"].as_str().unwrap_or("?")
        );
        let provider = match case["provider"].as_str() {
            Some("stripe") => {
                counts.0 += 1;
                Provider::Stripe
            }
            Some("standard") => {
                counts.1 += 1;
                Provider::Standard
            }
            other => panic!("{name}: unknown provider {other:?}"),
        };
        let secret = case["secret"].as_str().expect("secret");
        let body = case["body"].as_str().expect("body").as_bytes();
        let t = case["timestamp"].as_i64().expect("timestamp");
        let headers: Vec<(String, String)> = case["headers"]
            .as_object()
            .expect("headers")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("header text").to_owned()))
            .collect();
        check(&name, provider, secret, &headers, body, t);
    }
    assert!(counts.0 >= 3 && counts.1 >= 3, "several cases per provider, got {counts:?}");

    // GitHub's documented example ("Validating webhook deliveries"): no signed timestamp.
    let headers = [(
        "X-Hub-Signature-256".to_owned(),
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_owned(),
    )];
    check(
        "github / documented example",
        Provider::Github,
        "It's a Secret to Everybody",
        &headers,
        b"Hello, World!",
        1_700_000_000,
    );
}
