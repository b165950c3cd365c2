//! Zoom, as documented in Zoom's "Using webhooks" (verify webhook events, validate your
//! webhook endpoint): `x-zm-signature: v0=<hex>` is the HMAC-SHA256 of
//! `"v0:{x-zm-request-timestamp}:{body}"` keyed by the app's webhook secret token exactly as
//! the Marketplace shows it (its UTF-8 bytes); the timestamp is integer Unix seconds. Zoom
//! states no replay window, so hookwall's usual 300 s applies.
//!
//! `endpoint.url_validation` is the endpoint check (when the URL is saved, then every 72 hours):
//! once it verified, hookwall answers `{"plainToken": …, "encryptedToken": hex(HMAC-SHA256(
//! secret token, plainToken))}` with the key that verified it, and admits nothing
//! ([`challenge`]).
//!
//! Zoom's payloads carry no event or delivery id (`event`, `event_ts`, `payload`). hookwall
//! identifies a Zoom event by its content: `sha256:<hex of the SHA-256 of the body>` (see
//! `inspect`), so a retry of the same bytes is a duplicate. The event type is the body's
//! `event` (`meeting.started`, …).

use crate::http::Request;
use crate::pipeline::Challenge;
use crate::verify::{Key, Presented, Reject};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-zm-signature";
/// The signed timestamp header (integer Unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-zm-request-timestamp";
/// The body member holding the event type.
pub const EVENT_TYPE_MEMBER: &str = "event";

/// Reads the two headers into the signed timestamp, the single `v0` candidate and the signed
/// content `v0:{timestamp}:{body}` (the timestamp text exactly as received).
///
/// # Errors
/// [`Reject::SignatureMissing`] when either header is absent or repeated, the timestamp is not
/// an integer, or the signature is not `v0=` and 64 hex characters.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    super::slack::presented_v0(req, TIMESTAMP_HEADER, SIGNATURE_HEADER)
}

/// The `endpoint.url_validation` answer of an authenticated request, computed with `key` (the
/// key that verified it): `{"plainToken":…,"encryptedToken":…}` as `application/json`; `None`
/// for events (and for a key that is not an HMAC key, which a Zoom source never has).
pub(crate) fn challenge(req: &Request, key: &Key) -> Option<Challenge> {
    #[derive(serde::Deserialize)]
    struct Validation {
        event: String,
        payload: Payload,
    }
    #[derive(serde::Deserialize)]
    struct Payload {
        #[serde(rename = "plainToken")]
        plain_token: String,
    }
    let marker: &[u8] = b"endpoint.url_validation";
    if !req.body.windows(marker.len()).any(|w| w == marker) {
        return None;
    }
    let validation: Validation = serde_json::from_slice(&req.body).ok()?;
    if validation.event != "endpoint.url_validation" {
        return None;
    }
    let Key::Hmac(key) = key else { return None };
    let encrypted = hex::encode(ring::hmac::sign(key, validation.payload.plain_token.as_bytes()));
    let body = serde_json::json!({
        "plainToken": validation.payload.plain_token,
        "encryptedToken": encrypted,
    });
    Some(Challenge { content_type: "application/json", body: body.to_string().into_bytes() })
}
