//! Standard Webhooks v1 (symmetric), as specified in the Standard Webhooks spec 1.0: headers
//! `webhook-id`, `webhook-timestamp` (integer Unix seconds) and `webhook-signature`, a
//! space-delimited list of `<version>,<base64>` entries. A `v1` entry is the base64 HMAC-SHA256
//! of `"{webhook-id}.{webhook-timestamp}.{body}"`, keyed by the base64-decoded secret after its
//! `whsec_` prefix. Other versions (`v1a` Ed25519, future ones) are ignored here; a header with
//! no `v1` entry has no signature we can check.

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject};

/// The message id header: signed, stable across retries, the event id (R8).
pub const ID_HEADER: &str = "webhook-id";
/// The attempt's timestamp header (integer Unix seconds), signed.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// The signature list header.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// Reads the three headers into the signed timestamp, the `v1` candidates and the signed
/// content `{webhook-id}.{webhook-timestamp}.{body}` (header texts exactly as received).
///
/// # Errors
/// [`Reject::SignatureMissing`] when any of the three headers is absent or repeated, the id is
/// empty, the timestamp is not an integer, or there is no `v1` entry.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let id = verify::unique_header(req, ID_HEADER)
        .filter(|id| !id.is_empty())
        .ok_or(Reject::SignatureMissing)?;
    let t_text = verify::unique_header(req, TIMESTAMP_HEADER).ok_or(Reject::SignatureMissing)?;
    let signed_at = verify::parse_unix_seconds(t_text).ok_or(Reject::SignatureMissing)?;
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let candidates = v1_entries(header);
    if candidates.is_empty() {
        return Err(Reject::SignatureMissing);
    }
    Ok(Presented {
        signed_at: Some(signed_at),
        candidates,
        content: [id, b".", t_text, b".", &req.body],
    })
}

/// The `v1,<base64>` entries of the signature list, decoded.
fn v1_entries(header: &[u8]) -> Candidates {
    let mut candidates = Candidates::new();
    for entry in header.split(|&b| b == b' ') {
        if let Some(base64) = entry.strip_prefix(b"v1,") {
            candidates.offer(verify::decode_base64_tag(base64));
        }
    }
    candidates
}
