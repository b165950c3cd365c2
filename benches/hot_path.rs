//! Criterion benches of the per-request hot path (ns/op): HTTP framing, signature
//! verification per provider, and inspection (simd-json id extraction vs serde_json).
//! Run: `cargo bench --bench hot_path`. Compare figures within one run only (shared machines).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use hookwall::config::{Secret, SourceConfig};
use hookwall::http::{Frame, Framer, Limits, Request};
use hookwall::provider::{key, Provider};

const BODY: &[u8] = br#"{"id":"evt_1NqLq2Lkdi","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount_paid":2000,"currency":"usd","customer":"cus_9s6XKzkNRiz8i3","lines":{"data":[{"id":"il_1","amount":2000}]}}}}"#;
const NOW: i64 = 1_700_000_000;

fn source(provider: Provider, secret: &str) -> SourceConfig {
    SourceConfig {
        id: "bench".to_owned(),
        tenant: "t".to_owned(),
        provider,
        tolerance: Duration::from_secs(300),
        future_skew: Duration::from_secs(60),
        event_types: None,
        secrets: vec![Secret {
            id: "k1".to_owned(),
            key: key(provider, secret).expect("bench secret is valid"),
            not_before: None,
            not_after: None,
        }],
        destination: 0,
        ack_deadline: Duration::from_secs(10),
        ordering_key: None,
        public_url: None,
        scheme: Default::default(),
    }
}

fn hex_mac(secret: &[u8], parts: &[&[u8]]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut ctx = ring::hmac::Context::with_key(&key);
    for p in parts {
        ctx.update(p);
    }
    hex::encode(ctx.sign().as_ref())
}

fn request(headers: Vec<(&str, String)>) -> Request {
    Request {
        method: "POST".to_owned(),
        target: "/webhooks/bench".to_owned(),
        headers: headers.into_iter().map(|(n, v)| (n.to_owned(), v.into_bytes())).collect(),
        body: BODY.to_vec(),
        keep_alive: true,
    }
}

fn bench_verify(c: &mut Criterion) {
    let stripe_secret = "whsec_bench_0123456789";
    let t = NOW.to_string();
    let sig = hex_mac(stripe_secret.as_bytes(), &[t.as_bytes(), b".", BODY]);
    let stripe = source(Provider::Stripe, stripe_secret);
    let req = request(vec![("stripe-signature", format!("t={t},v1={sig}"))]);
    c.bench_function("verify/stripe", |b| {
        b.iter(|| hookwall::verify::verify(black_box(&stripe), black_box(&req), NOW))
    });

    let gh_secret = "It's a Secret to Everybody";
    let gh = source(Provider::Github, gh_secret);
    let sig = hex_mac(gh_secret.as_bytes(), &[BODY]);
    let req = request(vec![
        ("x-hub-signature-256", format!("sha256={sig}")),
        ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned()),
    ]);
    c.bench_function("verify/github", |b| {
        b.iter(|| hookwall::verify::verify(black_box(&gh), black_box(&req), NOW))
    });
}

fn bench_inspect(c: &mut Criterion) {
    let stripe = source(Provider::Stripe, "whsec_bench");
    let req = request(Vec::new());
    c.bench_function("inspect/simd_json", |b| {
        b.iter(|| hookwall::inspect::inspect(black_box(&stripe), black_box(&req)))
    });
    c.bench_function("inspect/serde_json_baseline", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(black_box(BODY)).expect("valid");
            black_box(v.get("id").and_then(serde_json::Value::as_str).map(str::len))
        })
    });
}

fn bench_framing(c: &mut Criterion) {
    let wire = format!(
        "POST /webhooks/bench HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nStripe-Signature: t=1,v1=00\r\nContent-Length: {}\r\n\r\n",
        BODY.len()
    );
    let mut bytes = wire.into_bytes();
    bytes.extend_from_slice(BODY);
    let limits = Limits { header_bytes_max: 16_384, body_bytes_max: 1 << 20 };
    c.bench_function("http/frame_one_request", |b| {
        b.iter(|| {
            let mut framer = Framer::new(limits);
            let mut input: &[u8] = black_box(&bytes);
            loop {
                let (used, frame) = framer.advance(input);
                input = &input[used..];
                match frame {
                    Frame::Request(r) => break black_box(r.body.len()),
                    Frame::Head(_) => {}
                    Frame::Incomplete | Frame::Error(_) => unreachable!("bench input is whole"),
                }
            }
        })
    });
}

criterion_group!(benches, bench_verify, bench_inspect, bench_framing);
criterion_main!(benches);
