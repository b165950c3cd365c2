//! Svix, as documented in Svix's "Verifying payloads manually": the Standard Webhooks `v1`
//! scheme (Svix wrote that spec) under Svix's own header names — `svix-id`, `svix-timestamp`
//! (integer Unix seconds) and `svix-signature` (space-delimited `v1,<base64>` entries, several
//! while a secret is rotated) — signing `"{svix-id}.{svix-timestamp}.{body}"` with HMAC-SHA256
//! keyed by the base64-decoded endpoint secret after `whsec_`. Parsing is shared with
//! [`super::standard`]. Svix signs only with HMAC, so only `whsec_` secrets are taken.

use crate::verify::Key;

/// The message id header: signed, the same on every retry, the event id (R8).
pub const ID_HEADER: &str = "svix-id";
/// The attempt's timestamp header (integer Unix seconds), signed.
pub const TIMESTAMP_HEADER: &str = "svix-timestamp";
/// The signature list header.
pub const SIGNATURE_HEADER: &str = "svix-signature";

/// The HMAC key of a Svix endpoint secret (`whsec_<base64>`, as the dashboard shows it).
///
/// # Errors
/// A message naming the problem (never the secret).
pub(crate) fn key(secret: &str) -> Result<Key, String> {
    if secret.starts_with("whpk_") || secret.starts_with("whsk_") {
        return Err("Svix signs with HMAC only; configure the endpoint's whsec_ secret".to_owned());
    }
    super::standard::hmac_key(secret, "Svix")
}
