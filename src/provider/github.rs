//! GitHub's webhook signature scheme, as documented in GitHub's "Validating webhook deliveries":
//! `X-Hub-Signature-256: sha256=<hex>` is the HMAC-SHA256 of the raw body keyed by the secret's
//! UTF-8 bytes. GitHub signs no timestamp, so freshness cannot be checked (R7), and the legacy
//! SHA-1 `X-Hub-Signature` is never used as a fallback (a source may instead be configured with
//! `legacy_sha1 = true` to verify only it: [`presented_sha1`]). The delivery id and event name travel in
//! unsigned headers (`X-GitHub-Delivery`, `X-GitHub-Event`).

use crate::http::Request;
use crate::verify::{self, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// The delivery's unique id, the event id hookwall deduplicates on (R8). Not signed.
pub const DELIVERY_HEADER: &str = "x-github-delivery";
/// The event name (`push`, `pull_request`, …), the event type. Not signed.
pub const EVENT_HEADER: &str = "x-github-event";

/// Reads `X-Hub-Signature-256` into its single candidate; the signed content is the body and
/// there is no signed timestamp.
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

/// The legacy SHA-1 signature header, read only when the source sets `legacy_sha1 = true`.
pub const LEGACY_SIGNATURE_HEADER: &str = "x-hub-signature";

/// Reads the legacy `X-Hub-Signature: sha1=<hex>` (HMAC-SHA1 of the body; GitHub's
/// "Validating webhook deliveries" keeps it for compatibility) into its single candidate. Used
/// only for a source configured with `legacy_sha1 = true`, whose keys are then HMAC-SHA1 keys:
/// such a source reads no `X-Hub-Signature-256` (one scheme per source, no fallback between
/// them, so a header can never downgrade a SHA-256 source).
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated, lacks the `sha1=` prefix
/// or is not 40 hex characters after it.
pub(crate) fn presented_sha1(req: &Request) -> Result<Presented<'_>, Reject> {
    let header =
        verify::unique_header(req, LEGACY_SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let hex = header.strip_prefix(b"sha1=").ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_hex_tag(hex, Scheme::Hmac, 20).ok_or(Reject::SignatureMissing)?;
    Ok(Presented::body_tag(req, tag))
}
