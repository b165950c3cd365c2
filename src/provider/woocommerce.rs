//! WooCommerce, as documented in the WooCommerce REST API docs ("Webhooks", delivery/payload):
//! `X-WC-Webhook-Signature` is the base64 HMAC-SHA256 of the raw body, keyed by the webhook's
//! secret exactly as set in the store (its UTF-8 bytes). WooCommerce signs no timestamp, so
//! freshness cannot be checked (R7). The delivery id travels in `X-WC-Webhook-Delivery-ID` and
//! the topic (`order.updated`, …) in `X-WC-Webhook-Topic`; neither is signed.

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-wc-webhook-signature";
/// The delivery id, the id hookwall deduplicates on (R8). Not signed.
pub const DELIVERY_ID_HEADER: &str = "x-wc-webhook-delivery-id";
/// The topic (`order.created`, …), the event type. Not signed.
pub const TOPIC_HEADER: &str = "x-wc-webhook-topic";

/// Reads `X-WC-Webhook-Signature` into its single candidate; the signed content is the body and
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
