//! Shopify, as documented in Shopify's "Deliver webhooks through HTTPS" (verify the webhook):
//! `X-Shopify-Hmac-Sha256` is the base64 HMAC-SHA256 of the raw body, keyed by the app's client
//! secret exactly as the Partner Dashboard shows it (its UTF-8 bytes). Shopify signs no
//! timestamp (`X-Shopify-Triggered-At` is not signed), so freshness cannot be checked (R7).
//! The event id `X-Shopify-Event-Id` is the same on every retry and across subscriptions
//! ("Ignore duplicate webhooks"); the topic travels in `X-Shopify-Topic`. Neither is signed.

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-shopify-hmac-sha256";
/// The event id, the id hookwall deduplicates on (R8). Not signed.
pub const EVENT_ID_HEADER: &str = "x-shopify-event-id";
/// The delivery's webhook id: used as the event id only when `X-Shopify-Event-Id` is absent
/// (deliveries from before Shopify added it). Also the same on every retry. Not signed.
pub const WEBHOOK_ID_HEADER: &str = "x-shopify-webhook-id";
/// The topic (`orders/create`, …), the event type. Not signed.
pub const TOPIC_HEADER: &str = "x-shopify-topic";

/// Reads `X-Shopify-Hmac-Sha256` into its single candidate; the signed content is the body and
/// there is no signed timestamp.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated, or not the base64 of 32
/// bytes.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag =
        verify::decode_base64_tag(header, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    Ok(Presented::body_tag(req, tag))
}
