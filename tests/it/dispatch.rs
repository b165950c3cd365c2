//! Forwarding (SPEC §5, R19, R21): retries of 408/429/5xx with backoff up to `attempts_max`,
//! then dead; other 4xx are permanent. Retries carry the same Idempotency-Key and the exact
//! bytes, with `Hookwall-Attempt` counting up. Back end: `auto` (dispatch does not depend on it).

use std::time::Duration;

use crate::harness::{stripe_a, Fixture, Io, FORWARD_TIMEOUT};
use crate::ingress::assert_forward;
use crate::metrics::{sample, wait_for_sample};
use crate::sign::{self, Provider};
use crate::sink::Script;

/// Labels of `hookwall_dispatch_attempts_total` for destination `sink` and `outcome`.
fn attempts(outcome: &str) -> [(&'static str, &str); 2] {
    [("destination", "sink"), ("outcome", outcome)]
}

/// R19, R21: 503 twice, then 200: delivered on attempt 3, every attempt with the same
/// Idempotency-Key and body.
#[test]
fn retries_503_then_delivers_on_attempt_3() {
    let f = Fixture::new(Io::Auto, Script::first_then(&[503, 503], 200));
    let s = stripe_a();
    let id = sign::unique_id("evt_retry");
    let body = sign::body(Provider::Stripe, &id, "retry me");
    assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    let fwd = f.sink.wait_for_key(&s.key(&id), 3, FORWARD_TIMEOUT);
    for (n, attempt) in fwd.iter().enumerate() {
        assert_forward(attempt, &s, &id, &body, u32::try_from(n + 1).expect("small"), "k1");
    }
    assert_eq!(fwd.iter().map(|r| r.answered).collect::<Vec<_>>(), [503, 503, 200]);
    let text = wait_for_sample(
        &f.hw,
        "hookwall_dispatch_attempts_total",
        &attempts("delivered"),
        1.0,
        FORWARD_TIMEOUT,
    );
    assert_eq!(
        sample(&text, "hookwall_dispatch_attempts_total", &attempts("retry")),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "hookwall_dispatch_attempts_total", &attempts("dead")),
        Some(0.0),
        "{text}"
    );
}

/// R19: a destination that always answers 500 gets exactly `attempts_max` attempts; then the
/// event is dead (DLQ) and no further attempt comes.
#[test]
fn always_500_is_dead_after_attempts_max() {
    const ATTEMPTS_MAX: usize = 4;
    let f = Fixture::with(Io::Auto, Script::always(500), |setup| setup.attempts_max = 4);
    let s = stripe_a();
    let id = sign::unique_id("evt_dead");
    let body = sign::body(Provider::Stripe, &id, "never delivered");
    assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    let fwd = f.sink.wait_for_key(&s.key(&id), ATTEMPTS_MAX, FORWARD_TIMEOUT);
    for (n, attempt) in fwd.iter().enumerate() {
        assert_forward(attempt, &s, &id, &body, u32::try_from(n + 1).expect("small"), "k1");
    }
    let text = wait_for_sample(
        &f.hw,
        "hookwall_dispatch_attempts_total",
        &attempts("dead"),
        1.0,
        FORWARD_TIMEOUT,
    );
    assert_eq!(
        sample(&text, "hookwall_dispatch_attempts_total", &attempts("retry")),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "hookwall_dispatch_attempts_total", &attempts("delivered")),
        Some(0.0),
        "{text}"
    );
    wait_for_sample(&f.hw, "hookwall_dlq_depth", &[("source", "stripe-a")], 1.0, FORWARD_TIMEOUT);
    // The one bounded wait for absence: 10 × backoff_max (50 ms).
    f.sink.assert_no_more_within(ATTEMPTS_MAX, Duration::from_millis(500));
}

/// SPEC §5: 400 is permanent: one attempt, then dead, never retried.
#[test]
fn permanent_400_gets_one_attempt() {
    let f = Fixture::new(Io::Auto, Script::always(400));
    let s = stripe_a();
    let id = sign::unique_id("evt_perm");
    let body = sign::body(Provider::Stripe, &id, "bad request downstream");
    assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    let fwd = f.sink.wait_for_key(&s.key(&id), 1, FORWARD_TIMEOUT);
    assert_forward(&fwd[0], &s, &id, &body, 1, "k1");
    // Dead after one attempt: the dispatcher will not try it again by itself.
    let text = wait_for_sample(
        &f.hw,
        "hookwall_dispatch_attempts_total",
        &attempts("dead"),
        1.0,
        FORWARD_TIMEOUT,
    );
    assert_eq!(
        sample(&text, "hookwall_dispatch_attempts_total", &attempts("retry")),
        Some(0.0),
        "{text}"
    );
    assert_eq!(f.sink.for_key(&s.key(&id)).len(), 1, "one attempt only");
}

/// Secret of the signing test: the Standard Webhooks specification's example secret.
const SIGNING_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Verifies a recorded forward with the official `standardwebhooks` Python package; `None`
/// when the package is not installed (`pip install -r tests/vectors/requirements.txt`).
fn python_verifies(fwd: &crate::sink::Recorded) -> Option<Result<(), String>> {
    use base64::Engine as _;
    use std::io::Write as _;
    let script = r#"
import base64, json, sys
try:
    from standardwebhooks.webhooks import Webhook
except ImportError:
    sys.exit(3)
d = json.load(sys.stdin)
Webhook(d["secret"]).verify(base64.b64decode(d["body"]), d["headers"])
"#;
    let headers: serde_json::Map<String, serde_json::Value> =
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .iter()
            .map(|n| ((*n).to_owned(), serde_json::Value::from(fwd.header(n))))
            .collect();
    let input = serde_json::json!({
        "secret": SIGNING_SECRET,
        "body": base64::engine::general_purpose::STANDARD.encode(&fwd.body),
        "headers": headers,
    });
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(input.to_string().as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    match out.status.code() {
        Some(0) => Some(Ok(())),
        Some(3) => None,
        _ => Some(Err(String::from_utf8_lossy(&out.stderr).into_owned())),
    }
}

/// SPEC §5, item 7: with `signing_secret`, each forward carries Standard Webhooks headers —
/// `webhook-id` = the idempotency key, `webhook-timestamp` = the attempt time — and a
/// `webhook-signature` the official `standardwebhooks` library accepts (and recomputed here
/// with ring); a retry is signed afresh.
#[test]
fn destination_verifies_the_standard_webhooks_signature() {
    use base64::Engine as _;
    let f = Fixture::with(Io::Auto, Script::first_then(&[503], 200), |setup| {
        setup.signing_secret = Some(SIGNING_SECRET.to_owned());
    });
    let s = stripe_a();
    let id = sign::unique_id("evt_signed");
    let body = sign::body(Provider::Stripe, &id, "signed forward");
    let before = sign::now_unix_s();
    assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    let fwd = f.sink.wait_for_key(&s.key(&id), 2, FORWARD_TIMEOUT);
    let after = sign::now_unix_s();
    let key = base64::engine::general_purpose::STANDARD
        .decode(SIGNING_SECRET.trim_start_matches("whsec_"))
        .expect("base64 secret");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    for attempt in &fwd {
        assert_eq!(attempt.header("webhook-id"), s.key(&id));
        let ts: i64 = attempt.header("webhook-timestamp").parse().expect("a Unix timestamp");
        assert!((before..=after).contains(&ts), "attempt time {ts} in [{before}, {after}]");
        let signed = format!("{}.{ts}.", s.key(&id));
        let mac = ring::hmac::sign(&key, &[signed.as_bytes(), &attempt.body].concat());
        let expected =
            format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.as_ref()));
        assert_eq!(attempt.header("webhook-signature"), expected);
        match python_verifies(attempt) {
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("standardwebhooks rejected the forward: {e}"),
            None => eprintln!("note: standardwebhooks is not installed; verified with ring only"),
        }
    }
    assert!(!f.hw.stderr().contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "no secret in the log");
}
