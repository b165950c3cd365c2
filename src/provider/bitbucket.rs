//! Bitbucket Cloud, as documented in Atlassian's "Manage webhooks" (secure webhooks) and
//! "Event payloads" (HTTP headers): when the webhook has a secret, `X-Hub-Signature:
//! sha256=<hex>` is the HMAC-SHA256 of the raw body keyed by the secret's UTF-8 bytes (the
//! prefix names the algorithm; only `sha256` is accepted, so a header cannot downgrade us).
//! No timestamp is signed, so freshness cannot be checked (R7). The request id travels in
//! `X-Request-UUID` and the event key (`repo:push`, …) in `X-Event-Key`; neither is signed.

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-hub-signature";
/// The request's UUID, the id hookwall deduplicates on (R8). Not signed.
pub const REQUEST_UUID_HEADER: &str = "x-request-uuid";
/// The event key (`repo:push`, `pullrequest:created`, …), the event type. Not signed.
pub const EVENT_KEY_HEADER: &str = "x-event-key";

/// Reads `X-Hub-Signature` into its single candidate; the signed content is the body and there
/// is no signed timestamp.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated, lacks the `sha256=` prefix
/// or is not 64 hex characters after it.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let hex = header.strip_prefix(b"sha256=").ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_hex_tag(hex, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    Ok(Presented::body_tag(req, tag))
}
