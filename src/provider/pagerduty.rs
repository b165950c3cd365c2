//! PagerDuty Webhooks v3, as documented in PagerDuty's "Verifying Signatures": the
//! `X-PagerDuty-Signature` header is a comma-separated list of `v1=<hex>` entries, each the hex
//! HMAC-SHA256 of the raw body keyed by the webhook subscription's secret exactly as PagerDuty
//! showed it at creation (its UTF-8 bytes); several entries appear while secrets rotate, and
//! other versions are ignored. No timestamp is signed (R7). The body is
//! `{"event": {"id", "event_type", …}}`: `event.id` is the event id and `event.event_type` its
//! type.

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-pagerduty-signature";
/// The top-level body member holding the event object.
pub const EVENT_MEMBER: &str = "event";
/// The event object's id member.
pub const EVENT_ID_MEMBER: &str = "id";
/// The event object's type member (`incident.triggered`, …).
pub const EVENT_TYPE_MEMBER: &str = "event_type";

/// Reads the `v1` entries of `X-PagerDuty-Signature`; the signed content is the body and there
/// is no signed timestamp.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent or repeated, or has no `v1=` entry.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    for entry in header.split(|&b| b == b',') {
        if let Some(hex) = entry.trim_ascii().strip_prefix(b"v1=") {
            candidates.offer(verify::decode_hex_tag(hex, Scheme::Hmac, 32));
        }
    }
    if candidates.is_empty() {
        return Err(Reject::SignatureMissing);
    }
    Ok(Presented::signed(None, candidates, [&req.body, b"", b"", b"", b""]))
}
