//! Coinbase Commerce, as documented in Coinbase Commerce's "Webhooks" (checking signatures):
//! `X-CC-Webhook-Signature` is the hex HMAC-SHA256 of the raw body keyed by the webhook shared
//! secret exactly as the settings page shows it (its UTF-8 bytes). No timestamp is signed (R7).
//! The body is `{"id", "scheduled_for", "event": {"id", "type", …}}`: `event.id` is the event
//! id (the top-level `id` names the delivery) and `event.type` (`charge:confirmed`, …) its
//! type. A retry's body differs outside `event` (`attempt_number`, `scheduled_for`), so the
//! fingerprint is taken over `event` (the intent, SPEC §3), not the whole body.

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-cc-webhook-signature";
/// The top-level body member holding the event object.
pub const EVENT_MEMBER: &str = "event";
/// The event object's id member.
pub const EVENT_ID_MEMBER: &str = "id";
/// The event object's type member.
pub const EVENT_TYPE_MEMBER: &str = "type";

/// Reads `X-CC-Webhook-Signature` into its single candidate; the signed content is the body and
/// there is no signed timestamp.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated or not 64 hex characters.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let hex = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_hex_tag(hex, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    Ok(Presented::body_tag(req, tag))
}
