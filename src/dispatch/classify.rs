//! The retry and dead-letter decision: one exhaustive `match` from an attempt's result to
//! `Delivered | Retry | Dead` (SPEC §5, R19). Pure: it takes `now`, the result, the destination's
//! config and a random source, and does no IO and reads no clock (STYLE invariant 5).

use std::time::Duration;

use crate::config::DestinationConfig;
use crate::ledger::Outcome;
use crate::limits::ATTEMPT_ERROR_BYTES_MAX;

/// What one attempt to POST an event to its destination produced, as seen by the dispatcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// The destination answered with HTTP status `code`. `retry_after` is its `Retry-After`
    /// header when that was a whole number of seconds (HTTP dates are not honoured).
    Status {
        /// HTTP status code.
        code: u16,
        /// `Retry-After` as a duration, when present and parseable.
        retry_after: Option<Duration>,
    },
    /// No complete answer within the destination's `timeout`.
    Timeout,
    /// The connection could not be made (DNS, refused, TLS handshake); short text, no payload.
    Connect(String),
    /// Any other transport failure (connection reset mid-request, malformed answer); short
    /// text, no payload. The outcome is uncertain, so it is retried (R21: the destination
    /// dedupes on the idempotency key).
    Other(String),
    /// The attempt was not made: hookwall had no file descriptor free for its connection
    /// (`EMFILE`, `ENFILE` on connect; short text). That is this process's limit, not the
    /// destination's failure, so it is retried after `backoff_min` without counting toward
    /// `attempts_max` or the circuit breaker: an event is never dead-lettered, nor a working
    /// destination's breaker opened, for want of a descriptor (logged at warn,
    /// `destination_out_of_descriptors`).
    NoDescriptor(String),
}

/// Decides what one attempt means for its event (SPEC §5, R19):
///
/// * 2xx → [`Outcome::Delivered`] at `now_ms`;
/// * 408, 429, 5xx, timeout, connection or other transport error → [`Outcome::Retry`] at
///   `now_ms` + [`backoff`] (at least `Retry-After` when given, still capped by `backoff_max`),
///   unless `attempts_made >= attempts_max`, then [`Outcome::Dead`];
/// * any other status (1xx, 3xx, other 4xx) → [`Outcome::Dead`] at once (permanent);
/// * no descriptor for the connection ([`AttemptResult::NoDescriptor`]) → [`Outcome::Retry`]
///   at `now_ms` + [`no_descriptor_wait`], whatever `attempts_made` (the caller does not count
///   it: [`counts_as_attempt`]).
///
/// `attempts_made` counts this attempt (1-based). Error texts are short (`status 503`,
/// `timeout after 10s`, `connect: …`), never contain payload bytes, and are cut to
/// [`ATTEMPT_ERROR_BYTES_MAX`].
pub fn classify(
    result: &AttemptResult,
    attempts_made: u32,
    dest: &DestinationConfig,
    now_ms: u64,
    rng: &mut impl rand::Rng,
) -> Outcome {
    let (error, retry_after) = match result {
        AttemptResult::NoDescriptor(why) => {
            let next_ms = now_ms.saturating_add(millis(no_descriptor_wait(dest)));
            return Outcome::Retry { next_ms, error: cut(format!("not attempted: {why}")) };
        }
        AttemptResult::Status { code, .. } if (200..300).contains(code) => {
            return Outcome::Delivered { at_ms: now_ms };
        }
        AttemptResult::Status { code, retry_after } if status_is_retryable(*code) => {
            (format!("status {code}"), *retry_after)
        }
        AttemptResult::Status { code, .. } => {
            return Outcome::Dead { error: cut(format!("status {code} (permanent)")) };
        }
        AttemptResult::Timeout => {
            (format!("timeout after {}", humantime::format_duration(dest.timeout)), None)
        }
        AttemptResult::Connect(why) => (format!("connect: {why}"), None),
        AttemptResult::Other(why) => (format!("request: {why}"), None),
    };
    if attempts_made >= dest.attempts_max {
        let error = format!("{error} (attempt {attempts_made} of {})", dest.attempts_max);
        return Outcome::Dead { error: cut(error) };
    }
    let delay = retry_delay(attempts_made, retry_after, dest, rng);
    Outcome::Retry { next_ms: now_ms.saturating_add(millis(delay)), error: cut(error) }
}

/// Exponential backoff with full jitter (SPEC §2 `backoff_min`/`backoff_max`): a uniform draw
/// in `[backoff_min, min(backoff_max, backoff_min × 2^(attempts_made − 1))]`, so the first
/// retry waits exactly `backoff_min` and the window doubles per attempt. `attempts_made` is
/// 1-based (0 is treated as 1). A `backoff_min` above `backoff_max` is clamped to it.
pub fn backoff(attempts_made: u32, dest: &DestinationConfig, rng: &mut impl rand::Rng) -> Duration {
    let low = dest.backoff_min.min(dest.backoff_max);
    let doublings = attempts_made.saturating_sub(1).min(31);
    let high = low.saturating_mul(1u32 << doublings).min(dest.backoff_max);
    let (low_ns, high_ns) = (nanos(low), nanos(high));
    Duration::from_nanos(rng.random_range(low_ns..=high_ns))
}

/// Whether `result` says the destination itself is failing (timeout, connection or transport
/// error, 408, 429, 5xx): what the circuit breaker counts. A 2xx or a permanent answer shows a
/// destination that works, even if it refused this event.
/// [`AttemptResult::NoDescriptor`] says nothing of the destination: false (the breaker
/// ignores it, [`counts_as_attempt`]).
pub fn destination_failed(result: &AttemptResult) -> bool {
    match result {
        AttemptResult::Status { code, .. } => status_is_retryable(*code),
        AttemptResult::Timeout | AttemptResult::Connect(_) | AttemptResult::Other(_) => true,
        AttemptResult::NoDescriptor(_) => false,
    }
}

/// How long a destination waits after an attempt found no descriptor for its connection:
/// `backoff_min` (clamped to `backoff_max`, as [`backoff`] clamps it), neither grown nor jittered,
/// since the wait is for this process's descriptors, not for the destination.
pub fn no_descriptor_wait(dest: &DestinationConfig) -> Duration {
    dest.backoff_min.min(dest.backoff_max)
}

/// Whether `result` is an attempt the destination may have seen: counted toward
/// `attempts_max` (the `Hookwall-Attempt` number and the ledger's attempt count) and by the
/// circuit breaker. False only for [`AttemptResult::NoDescriptor`]: no connection was made.
pub fn counts_as_attempt(result: &AttemptResult) -> bool {
    !matches!(result, AttemptResult::NoDescriptor(_))
}

/// The result of a connect that failed with `e`: [`AttemptResult::NoDescriptor`] when this
/// process is out of file descriptors (`EMFILE`, `ENFILE`; also logged at warn, at most every
/// 10 s, `destination_out_of_descriptors`), else [`AttemptResult::Connect`] with `why`.
pub fn connect_failed(e: &std::io::Error, why: String) -> AttemptResult {
    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        super::h1::warn_if_out_of_descriptors(e);
        AttemptResult::NoDescriptor(why)
    } else {
        AttemptResult::Connect(why)
    }
}

/// 408 Request Timeout, 429 Too Many Requests and every 5xx are worth another attempt.
fn status_is_retryable(code: u16) -> bool {
    matches!(code, 408 | 429 | 500..=599)
}

/// The wait before the next attempt: the backoff draw, raised to `Retry-After`, capped by
/// `backoff_max`.
fn retry_delay(
    attempts_made: u32,
    retry_after: Option<Duration>,
    dest: &DestinationConfig,
    rng: &mut impl rand::Rng,
) -> Duration {
    let drawn = backoff(attempts_made, dest, rng);
    retry_after.map_or(drawn, |asked| drawn.max(asked).min(dest.backoff_max))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Cuts `text` to at most [`ATTEMPT_ERROR_BYTES_MAX`] bytes on a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > ATTEMPT_ERROR_BYTES_MAX {
        let mut end = ATTEMPT_ERROR_BYTES_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn dest() -> DestinationConfig {
        DestinationConfig {
            id: "billing-api".to_owned(),
            url: "http://127.0.0.1:1/".to_owned(),
            timeout: Duration::from_secs(10),
            attempts_max: 5,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(3600),
            concurrency_max: 4,
            pipeline: 1,
            paused: false,
            breaker_failures_max: 10,
            signing_key: None,
            nats: None,
        }
    }

    fn status(code: u16) -> AttemptResult {
        AttemptResult::Status { code, retry_after: None }
    }

    /// The one helper of this module: classifies `result` at attempt `attempt`, at t = 1000 s.
    fn check(result: AttemptResult, attempt: u32, expect: &Expect) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let now = 1_000_000;
        let got = classify(&result, attempt, &dest(), now, &mut rng);
        match (expect, &got) {
            (Expect::Delivered, Outcome::Delivered { at_ms }) => assert_eq!(*at_ms, now),
            (Expect::Retry { min_ms, max_ms, error }, Outcome::Retry { next_ms, error: e }) => {
                assert!((now + min_ms..=now + max_ms).contains(next_ms), "{result:?} → {got:?}");
                assert_eq!(e, error);
            }
            (Expect::Dead(error), Outcome::Dead { error: e }) => assert_eq!(e, error),
            _ => panic!("{result:?} at attempt {attempt}: expected {expect:?}, got {got:?}"),
        }
    }

    #[derive(Debug)]
    enum Expect {
        Delivered,
        Retry { min_ms: u64, max_ms: u64, error: &'static str },
        Dead(&'static str),
    }

    #[test]
    fn classify_table() {
        let retry = |error| Expect::Retry { min_ms: 1000, max_ms: 1000, error };
        let second = |error| Expect::Retry { min_ms: 1000, max_ms: 2000, error };
        let cases = [
            (status(200), 1, Expect::Delivered),
            (status(204), 3, Expect::Delivered),
            (status(299), 5, Expect::Delivered),
            (status(408), 1, retry("status 408")),
            (status(500), 1, retry("status 500")),
            (status(503), 2, second("status 503")),
            (status(599), 1, retry("status 599")),
            (AttemptResult::Timeout, 1, retry("timeout after 10s")),
            (AttemptResult::Connect("refused".into()), 1, retry("connect: refused")),
            (AttemptResult::Other("reset".into()), 1, retry("request: reset")),
            (status(400), 1, Expect::Dead("status 400 (permanent)")),
            (status(404), 1, Expect::Dead("status 404 (permanent)")),
            (status(301), 1, Expect::Dead("status 301 (permanent)")),
            (status(101), 1, Expect::Dead("status 101 (permanent)")),
            (status(503), 5, Expect::Dead("status 503 (attempt 5 of 5)")),
            (status(429), 6, Expect::Dead("status 429 (attempt 6 of 5)")),
            (AttemptResult::Timeout, 5, Expect::Dead("timeout after 10s (attempt 5 of 5)")),
            (
                AttemptResult::Connect("refused".into()),
                5,
                Expect::Dead("connect: refused (attempt 5 of 5)"),
            ),
        ];
        for (result, attempt, expect) in cases {
            check(result, attempt, &expect);
        }
    }

    #[test]
    fn an_attempt_without_a_descriptor_is_retried_after_backoff_min_however_many_were_made() {
        let none = AttemptResult::NoDescriptor("Too many open files (os error 24)".into());
        let error = "not attempted: Too many open files (os error 24)";
        for attempt in [1, 5, 6, u32::MAX] {
            check(none.clone(), attempt, &Expect::Retry { min_ms: 1000, max_ms: 1000, error });
        }
        assert!(!counts_as_attempt(&none) && !destination_failed(&none));
        assert!(counts_as_attempt(&AttemptResult::Connect("refused".into())));
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let enfile = std::io::Error::from_raw_os_error(libc::ENFILE);
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(connect_failed(&emfile, "e".into()), AttemptResult::NoDescriptor("e".into()));
        assert_eq!(connect_failed(&enfile, "e".into()), AttemptResult::NoDescriptor("e".into()));
        assert_eq!(connect_failed(&refused, "r".into()), AttemptResult::Connect("r".into()));
    }

    #[test]
    fn retry_after_raises_the_delay_but_not_past_backoff_max() {
        let after =
            |s| AttemptResult::Status { code: 429, retry_after: Some(Duration::from_secs(s)) };
        let e = "status 429";
        check(after(30), 1, &Expect::Retry { min_ms: 30_000, max_ms: 30_000, error: e });
        check(after(0), 1, &Expect::Retry { min_ms: 1000, max_ms: 1000, error: e });
        check(after(86_400), 1, &Expect::Retry { min_ms: 3_600_000, max_ms: 3_600_000, error: e });
        let unavailable =
            AttemptResult::Status { code: 503, retry_after: Some(Duration::from_secs(7)) };
        check(unavailable, 1, &Expect::Retry { min_ms: 7000, max_ms: 7000, error: "status 503" });
    }

    #[test]
    fn error_text_is_cut_to_the_limit() {
        let long = AttemptResult::Connect("é".repeat(ATTEMPT_ERROR_BYTES_MAX));
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let Outcome::Retry { error, .. } = classify(&long, 1, &dest(), 0, &mut rng) else {
            panic!("connect errors are retried");
        };
        assert!(error.len() <= ATTEMPT_ERROR_BYTES_MAX && error.starts_with("connect: é"));
    }

    #[test]
    fn backoff_stays_within_bounds_over_many_draws() {
        let d = dest();
        for seed in 0..50 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for attempt in 0..=40 {
                let b = backoff(attempt, &d, &mut rng);
                let exp = attempt.saturating_sub(1).min(31);
                let high = d.backoff_min.saturating_mul(1 << exp).min(d.backoff_max);
                assert!(b >= d.backoff_min && b <= high, "attempt {attempt}: {b:?} > {high:?}");
            }
        }
    }

    #[test]
    fn backoff_grows_with_attempts_until_the_cap() {
        let d = dest();
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let mean = |attempt, rng: &mut rand::rngs::StdRng| {
            (0..2000).map(|_| backoff(attempt, &d, rng).as_secs_f64()).sum::<f64>() / 2000.0
        };
        let means: Vec<f64> = (1..=12).map(|a| mean(a, &mut rng)).collect();
        assert!((means[0] - 1.0).abs() < 1e-9, "the first retry waits exactly backoff_min");
        for pair in means.windows(2) {
            assert!(pair[1] > pair[0], "means must grow: {means:?}");
        }
        let capped = mean(40, &mut rng);
        assert!(capped > 1500.0 && capped <= 3600.0, "the cap holds: {capped}");
    }

    #[test]
    fn backoff_min_above_max_is_clamped() {
        let mut d = dest();
        d.backoff_min = Duration::from_secs(10);
        d.backoff_max = Duration::from_secs(2);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        assert_eq!(backoff(4, &d, &mut rng), Duration::from_secs(2));
    }
}
