//! Typeform, as documented in Typeform's "Secure your webhooks": `Typeform-Signature:
//! sha256=<base64>` is the base64 HMAC-SHA256 of the raw body, keyed by the webhook's secret
//! exactly as it was set in Typeform (its UTF-8 bytes). Typeform signs no timestamp, so
//! freshness cannot be checked (R7). The body's `event_id` identifies the event and
//! `event_type` (`form_response`, …) its type (Typeform's "Example webhook payload").

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "typeform-signature";
/// The body member holding the event id.
pub const EVENT_ID_MEMBER: &str = "event_id";
/// The body member holding the event type.
pub const EVENT_TYPE_MEMBER: &str = "event_type";

/// Reads `Typeform-Signature` into its single candidate; the signed content is the body and
/// there is no signed timestamp.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated, lacks the `sha256=` prefix
/// or is not the padded base64 of 32 bytes after it.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let b64 = header.strip_prefix(b"sha256=").ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_base64_tag(b64, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    Ok(Presented::body_tag(req, tag))
}
