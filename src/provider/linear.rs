//! Linear, as documented in Linear's "Webhooks" (securing webhooks) and implemented by its SDK's
//! `LinearWebhooks.verify`: `Linear-Signature` is the hex HMAC-SHA256 of the raw body keyed by
//! the webhook's signing secret exactly as Linear shows it (its UTF-8 bytes). The signed
//! timestamp is the body's top-level `webhookTimestamp` (Unix milliseconds, a JSON number;
//! signed because the body is), and Linear tells receivers to reject deliveries whose timestamp
//! is more than a minute away from their clock: 60 s is the default `tolerance`.
//!
//! `Linear-Delivery` (a UUID per delivery) is the event id and `Linear-Event` (`Issue`,
//! `Comment`, …) the event type; neither is signed.

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "linear-signature";
/// The delivery id header, the event id (R8). Not signed.
pub const DELIVERY_HEADER: &str = "linear-delivery";
/// The entity type header (`Issue`, …), the event type. Not signed.
pub const EVENT_HEADER: &str = "linear-event";
/// The body member holding the signed timestamp (Unix milliseconds).
pub const TIMESTAMP_MEMBER: &str = "webhookTimestamp";

/// Reads `Linear-Signature` into its single candidate and the body's `webhookTimestamp` into
/// the signed timestamp (whole seconds, rounded down); the signed content is the body.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated or not 64 hex characters,
/// or the body is not a JSON object with exactly one non-negative integer `webhookTimestamp`.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let hex = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_hex_tag(hex, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    let millis = body_timestamp_ms(&req.body).ok_or(Reject::SignatureMissing)?;
    let presented = Presented::body_tag(req, tag);
    Ok(Presented { signed_at: Some(millis.div_euclid(1000)), ..presented })
}

/// The top-level `webhookTimestamp` of a JSON object body, in milliseconds.
fn body_timestamp_ms(body: &[u8]) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Stamped {
        #[serde(rename = "webhookTimestamp")]
        webhook_timestamp: u64,
    }
    let stamped: Stamped = serde_json::from_slice(body).ok()?;
    i64::try_from(stamped.webhook_timestamp).ok()
}
