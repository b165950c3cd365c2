//! Standard Webhooks, as specified in the Standard Webhooks spec 1.0: headers `webhook-id`,
//! `webhook-timestamp` (integer Unix seconds) and `webhook-signature`, a space-delimited list
//! of `<version>,<base64>` entries over the signed content
//! `"{webhook-id}.{webhook-timestamp}.{body}"`:
//!
//! * `v1`: HMAC-SHA256 (32-byte tag), keyed by the base64-decoded secret after its `whsec_`
//!   prefix (symmetric; the dashboard shows `whsec_…`);
//! * `v1a`: Ed25519 (64-byte signature) by the sender's signing key `whsk_…`, verified with its
//!   public key `whpk_…` (base64 of the 32-byte RFC 8032 key), which is what a receiver is
//!   given.
//!
//! Unknown versions are ignored, so a header cannot downgrade us to a weaker scheme; a header
//! with neither `v1` nor `v1a` entries has no signature we can check. Svix sends the same
//! scheme under `svix-*` header names ([`SVIX_HEADERS`]); the parsing here serves both.

use base64::Engine as _;

use crate::http::Request;
use crate::verify::{self, Candidates, Key, Presented, Reject, Scheme};

/// The message id header: signed, stable across retries, the event id (R8).
pub const ID_HEADER: &str = "webhook-id";
/// The attempt's timestamp header (integer Unix seconds), signed.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// The signature list header.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// The three header names of one flavour of the scheme: id, timestamp, signature list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Headers {
    /// Message id header.
    pub(crate) id: &'static str,
    /// Timestamp header.
    pub(crate) timestamp: &'static str,
    /// Signature list header.
    pub(crate) signature: &'static str,
}

/// Standard Webhooks' own names.
pub(crate) const STANDARD_HEADERS: Headers =
    Headers { id: ID_HEADER, timestamp: TIMESTAMP_HEADER, signature: SIGNATURE_HEADER };

/// Svix's names for the same headers.
pub(crate) const SVIX_HEADERS: Headers = Headers {
    id: super::svix::ID_HEADER,
    timestamp: super::svix::TIMESTAMP_HEADER,
    signature: super::svix::SIGNATURE_HEADER,
};

/// Bytes of a `v1` HMAC-SHA256 tag.
const V1_BYTES: usize = 32;
/// Bytes of a `v1a` Ed25519 signature.
const V1A_BYTES: usize = 64;

/// Reads the three headers into the signed timestamp, the `v1`/`v1a` candidates and the signed
/// content `{id}.{timestamp}.{body}` (header texts exactly as received).
///
/// # Errors
/// [`Reject::SignatureMissing`] when any of the three headers is absent or repeated, the id is
/// empty, the timestamp is not an integer, or there is no `v1` or `v1a` entry.
pub(crate) fn presented<'a>(req: &'a Request, names: &Headers) -> Result<Presented<'a>, Reject> {
    let id = verify::unique_header(req, names.id)
        .filter(|id| !id.is_empty())
        .ok_or(Reject::SignatureMissing)?;
    let t_text = verify::unique_header(req, names.timestamp).ok_or(Reject::SignatureMissing)?;
    let signed_at = verify::parse_unix_seconds(t_text).ok_or(Reject::SignatureMissing)?;
    let header = verify::unique_header(req, names.signature).ok_or(Reject::SignatureMissing)?;
    let candidates = entries(header);
    if candidates.is_empty() {
        return Err(Reject::SignatureMissing);
    }
    Ok(Presented::signed(Some(signed_at), candidates, [id, b".", t_text, b".", &req.body]))
}

/// The `v1,<base64>` and `v1a,<base64>` entries of the signature list, decoded.
fn entries(header: &[u8]) -> Candidates {
    let mut candidates = Candidates::new();
    for entry in header.split(|&b| b == b' ') {
        if let Some(base64) = entry.strip_prefix(b"v1,") {
            candidates.offer(verify::decode_base64_tag(base64, Scheme::Hmac, V1_BYTES));
        } else if let Some(base64) = entry.strip_prefix(b"v1a,") {
            candidates.offer(verify::decode_base64_tag(base64, Scheme::Ed25519, V1A_BYTES));
        }
    }
    candidates
}

/// The key of a Standard Webhooks secret as the dashboard shows it: `whpk_<base64 of 32
/// bytes>` is an Ed25519 public key (`v1a`); `whsec_<base64>` (or bare base64, as the reference
/// libraries accept) is an HMAC-SHA256 key (`v1`). A `whsk_` signing key is refused: the
/// receiver needs only the public key, and should not hold the other.
///
/// # Errors
/// A message naming the problem (never the secret).
pub(crate) fn key(secret: &str) -> Result<Key, String> {
    if secret.starts_with("whsk_") {
        return Err("a whsk_ signing key was given; configure its public key (whpk_…)".to_owned());
    }
    if let Some(b64) = secret.strip_prefix("whpk_") {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| "Standard Webhooks public key is not base64 after whpk_".to_owned())?;
        let public_key: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!("Standard Webhooks public key is {} bytes; Ed25519 keys are 32", b.len())
        })?;
        return Ok(Key::Ed25519(public_key));
    }
    hmac_key(secret, "Standard Webhooks")
}

/// An HMAC-SHA256 key from `whsec_<base64>` or bare base64 (Standard Webhooks and Svix).
///
/// # Errors
/// A message naming the problem (never the secret).
pub(crate) fn hmac_key(secret: &str, who: &str) -> Result<Key, String> {
    whsec_key(secret, who).map(Key::Hmac)
}

/// The ring HMAC-SHA256 key of a `whsec_<base64>` (or bare base64) secret: what Standard
/// Webhooks signs `v1` with — also hookwall's own signature on forwards (SPEC §5).
///
/// # Errors
/// A message naming the problem (never the secret).
pub fn whsec_key(secret: &str, who: &str) -> Result<ring::hmac::Key, String> {
    let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
    let material = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| format!("{who} secret is not base64 after the whsec_ prefix"))?;
    if material.is_empty() {
        return Err("secret decodes to zero bytes".to_owned());
    }
    Ok(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &material))
}
