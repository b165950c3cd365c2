//! Intercom, as documented in Intercom's "Webhooks" (signed notifications): `X-Hub-Signature:
//! sha1=<hex>` is the HMAC-SHA1 of the raw body keyed by the app's `client_secret` exactly as
//! the Developer Hub shows it (its UTF-8 bytes). No timestamp is signed (R7). The body is a
//! `notification_event` whose top-level `id` (`notif_…`) is the event id and `topic`
//! (`conversation.user.created`, …) the event type. A retry carries the same notification with
//! other delivery fields (`delivery_attempts`, `first_sent_at`, …), so the fingerprint is taken
//! over `data` (the event's intent, SPEC §3), not the whole body.

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-hub-signature";
/// The body member holding the notification id (`notif_…`).
pub const EVENT_ID_MEMBER: &str = "id";
/// The body member holding the topic, the event type.
pub const EVENT_TYPE_MEMBER: &str = "topic";
/// The body member holding the event's data: the fingerprinted intent.
pub const INTENT_MEMBER: &str = "data";

/// Reads `X-Hub-Signature` into its single candidate; the signed content is the body and there
/// is no signed timestamp.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated, lacks the `sha1=` prefix
/// or is not 40 hex characters after it.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let hex = header.strip_prefix(b"sha1=").ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_hex_tag(hex, Scheme::Hmac, 20).ok_or(Reject::SignatureMissing)?;
    Ok(Presented::body_tag(req, tag))
}
