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

/// The last millisecond RFC 3339 can write with a four-digit year: 9999-12-31T23:59:59.999Z.
const RFC3339_MS_MAX: u64 = 253_402_300_799_999;

/// Unix milliseconds `ms` as RFC 3339 (UTC, milliseconds), e.g. `2026-12-02T01:31:14.000Z`.
/// A time past year 9999 — only from a damaged or hand-edited record — is written as
/// 9999-12-31T23:59:59.999Z instead of panicking (humantime's formatter refuses five-digit
/// years, and a panic aborts `serve`).
pub fn rfc3339_ms(ms: u64) -> String {
    rfc3339_ms_display(ms).to_string()
}

/// [`rfc3339_ms`] as a `Display`, to write into a buffer without a `String` of its own.
pub fn rfc3339_ms_display(ms: u64) -> impl std::fmt::Display {
    let at = UNIX_EPOCH + std::time::Duration::from_millis(ms.min(RFC3339_MS_MAX));
    humantime::format_rfc3339_millis(at)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_is_written_for_every_millisecond_value() {
        assert_eq!(super::rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339_ms(1_764_639_074_123), "2025-12-02T01:31:14.123Z");
        assert_eq!(super::rfc3339_ms(super::RFC3339_MS_MAX), "9999-12-31T23:59:59.999Z");
        for past in [super::RFC3339_MS_MAX + 1, 1 << 60, u64::MAX] {
            assert_eq!(super::rfc3339_ms(past), "9999-12-31T23:59:59.999Z", "{past}");
        }
    }
}
