//! Segment's Webhooks destination, as documented in Segment's "Webhooks (Classic)
//! Destination" (authentication): with a shared secret set, every request carries
//! `X-Signature: <hex>`, the HMAC-SHA1 of the raw body keyed by the shared secret as written
//! (its UTF-8 bytes). SHA-1 is what Segment uses; ring's `HMAC_SHA1_FOR_LEGACY_USE_ONLY` is
//! taken only for this provider. No timestamp is signed (R7). The body is a Segment message:
//! `messageId` identifies it (Segment's own deduplication key) and `type` (`track`,
//! `identify`, …) is its type.

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-signature";
/// The body member holding the event id.
pub const EVENT_ID_MEMBER: &str = "messageId";

/// Bytes of an HMAC-SHA1 tag.
const TAG_BYTES: usize = 20;

/// Reads `X-Signature` into its single candidate; the signed content is the body and there is
/// no signed timestamp.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated, or not 40 hex characters.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag =
        verify::decode_hex_tag(header, Scheme::Hmac, TAG_BYTES).ok_or(Reject::SignatureMissing)?;
    Ok(Presented::body_tag(req, tag))
}
