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
