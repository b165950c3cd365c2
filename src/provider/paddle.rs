//! Paddle Billing, as documented in Paddle's "Verify webhook signatures" and implemented by
//! its Python SDK (`paddle_billing.Notifications.PaddleSignature`): `Paddle-Signature:
//! ts=<unix s>;h1=<hex>[;h1=<hex>…]`, where each `h1` is the hex HMAC-SHA256 of
//! `"{ts}:{body}"` keyed by the notification destination's secret key exactly as the dashboard
//! shows it (`pdl_ntfset_…`, its UTF-8 bytes). Several `h1` appear while a secret is rotated.
//! Unknown keys are ignored (no downgrade to a weaker scheme). The body's `event_id` is the
//! event id and `event_type` its type.

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "paddle-signature";
/// The body member holding the event id (`evt_…`).
pub const EVENT_ID_MEMBER: &str = "event_id";
/// The body member holding the event type (`transaction.completed`, …).
pub const EVENT_TYPE_MEMBER: &str = "event_type";

/// Reads `Paddle-Signature` into the signed timestamp, the `h1` candidates and the signed
/// content `{ts}:{body}` (`ts` as written).
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent or repeated, `ts` is absent,
/// repeated or not an integer, or there is no `h1`.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let mut ts = None;
    let mut candidates = Candidates::new();
    for element in header.split(|&b| b == b';') {
        let Some(eq) = element.iter().position(|&b| b == b'=') else {
            continue;
        };
        match (&element[..eq], &element[eq + 1..]) {
            (b"ts", value) if ts.replace(value).is_some() => return Err(Reject::SignatureMissing),
            (b"h1", value) => candidates.offer(verify::decode_hex_tag(value, Scheme::Hmac, 32)),
            _ => {}
        }
    }
    let ts = ts.ok_or(Reject::SignatureMissing)?;
    let signed_at = verify::parse_unix_seconds(ts).ok_or(Reject::SignatureMissing)?;
    if candidates.is_empty() {
        return Err(Reject::SignatureMissing);
    }
    Ok(Presented::signed(Some(signed_at), candidates, [ts, b":", &req.body, b"", b""]))
}
