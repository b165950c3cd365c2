//! The only reader of time. Everything else takes `now` as an argument (STYLE invariant 5), so
//! verification, retry and dead-letter decisions stay deterministic and testable.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Wall-clock time as milliseconds since the Unix epoch.
#[allow(clippy::disallowed_methods)]
pub fn now_unix_ms() -> u64 {
    let since =
        SystemTime::now().duration_since(UNIX_EPOCH).expect("system clock is set after 1970");
    u64::try_from(since.as_millis()).expect("milliseconds since 1970 fit in u64")
}

/// Wall-clock time as whole seconds since the Unix epoch (the unit of signed webhook timestamps).
pub fn now_unix_s() -> i64 {
    i64::try_from(now_unix_ms() / 1000).expect("seconds since 1970 fit in i64")
}

/// A monotonic instant, for latencies and timeouts (never for signed timestamps).
#[allow(clippy::disallowed_methods)]
pub fn monotonic() -> Instant {
    Instant::now()
}
