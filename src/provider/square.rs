//! Square, as documented in Square's "Validate that the notification is from Square" (Webhooks,
//! step 3) and implemented by its SDK (squareup 46, `square/utils/webhooks_helper.py`,
//! `verify_signature`): `x-square-hmacsha256-signature` is the base64 HMAC-SHA256, keyed by the
//! subscription's signature key exactly as the Developer Console shows it (its UTF-8 bytes), of
//! the notification URL as configured for the subscription followed by the raw body. The URL
//! checked is [`crate::signed_url`]'s (set `public_url` to the subscription's notification URL
//! when a proxy rewrites it). The legacy `x-square-signature` (HMAC-SHA1) is not read.
//!
//! No signed timestamp (freshness cannot be checked, R7). The event id is the body's top-level
//! `event_id`, the same on Square's retries; the type is the body's `type`.

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-square-hmacsha256-signature";
/// The body member holding the event id.
pub const EVENT_ID_MEMBER: &str = "event_id";
/// The body member holding the event type.
pub const EVENT_TYPE_MEMBER: &str = "type";

/// Reads the signature header; the signed content is `url` followed by the body.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated or not base64 of 32 bytes.
pub(crate) fn presented<'a>(req: &'a Request, url: &str) -> Result<Presented<'a>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag =
        verify::decode_base64_tag(header, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    let content = [url.as_bytes(), &req.body].concat();
    Ok(Presented::alternatives(None, candidates, vec![content]))
}
