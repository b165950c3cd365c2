//! GitLab, as documented in GitLab's "Webhooks" (custom headers, secret token, delivery
//! headers): GitLab does not sign deliveries; it sends the webhook's secret token as is in
//! `X-Gitlab-Token`. hookwall compares it with the configured token as SHA-256 digests in
//! constant time. There is no signed timestamp (no freshness check, R7) and nothing binds the
//! body to the token, so TLS is what protects integrity on the way.
//!
//! The event id is `Idempotency-Key` (GitLab 17.4+: "the same across retries of one webhook
//! event"), or `X-Gitlab-Event-UUID` where GitLab is older and sends no `Idempotency-Key`; the
//! event type is `X-Gitlab-Event` (`Push Hook`, …). None of them is signed.

use crate::http::Request;
use crate::verify::{self, Presented, Reject};

/// The header carrying the secret token (lowercase).
pub const TOKEN_HEADER: &str = "x-gitlab-token";
/// The event id of GitLab 17.4 and later, stable across retries (R8). Not signed.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// The event UUID of older GitLab, used when `Idempotency-Key` is absent. Not signed.
pub const EVENT_UUID_HEADER: &str = "x-gitlab-event-uuid";
/// The event name (`Push Hook`, `Merge Request Hook`, …), the event type. Not signed.
pub const EVENT_HEADER: &str = "x-gitlab-event";

/// Reads `X-Gitlab-Token` as the presented token.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated or empty.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let token = verify::unique_header(req, TOKEN_HEADER)
        .filter(|t| !t.is_empty())
        .ok_or(Reject::SignatureMissing)?;
    Ok(Presented::token(token))
}
