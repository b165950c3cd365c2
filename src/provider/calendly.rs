//! Calendly (API v2 webhook subscriptions), as documented in Calendly's "Webhook signatures":
//! `Calendly-Webhook-Signature: t=<unix s>,v1=<hex>`, where `v1` is the hex HMAC-SHA256 of
//! `"{t}.{body}"` keyed by the subscription's signing key exactly as it was set (its UTF-8
//! bytes). Calendly's examples reject signatures older than 3 minutes: 180 s is the default
//! `tolerance`.
//!
//! Calendly's payload carries no delivery or event id (`event`, `created_at`, `created_by` and
//! a `payload` resource). hookwall therefore identifies a Calendly event by its content:
//! `sha256:<hex of the SHA-256 of the body>` (see `inspect`). A resend of the same bytes is a
//! duplicate; a resend whose bytes differ would be a new event — the honest limit of a payload
//! without an id. The event type is the body's `event` (`invitee.created`, …).

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "calendly-webhook-signature";
/// The body member holding the event type.
pub const EVENT_TYPE_MEMBER: &str = "event";

/// Reads `Calendly-Webhook-Signature` into the signed timestamp, the `v1` candidates and the
/// signed content `{t}.{body}` (`t` as written). Unknown keys are ignored.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent or repeated, `t` is absent, repeated
/// or not an integer, or there is no `v1`.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let mut t = None;
    let mut candidates = Candidates::new();
    for element in header.split(|&b| b == b',') {
        let Some(eq) = element.iter().position(|&b| b == b'=') else {
            continue;
        };
        match (element[..eq].trim_ascii(), &element[eq + 1..]) {
            (b"t", value) if t.replace(value).is_some() => return Err(Reject::SignatureMissing),
            (b"v1", value) => candidates.offer(verify::decode_hex_tag(value, Scheme::Hmac, 32)),
            _ => {}
        }
    }
    let t = t.ok_or(Reject::SignatureMissing)?;
    let signed_at = verify::parse_unix_seconds(t).ok_or(Reject::SignatureMissing)?;
    if candidates.is_empty() {
        return Err(Reject::SignatureMissing);
    }
    Ok(Presented::signed(Some(signed_at), candidates, [t, b".", &req.body]))
}
