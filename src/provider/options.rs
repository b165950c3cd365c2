//! Per-source options of a provider's scheme: `[[source]]` keys that only some providers take
//! (`legacy_sha1` for `github`, the `hmac` table for `hmac`, `hmac_signature` for `adyen`). Checked at config load; a key
//! given to a provider that does not take it is a config error.

use super::hmac;

/// A source's scheme options; the default (nothing set) is every provider's documented scheme.
#[derive(Debug, Default, Clone)]
pub struct SchemeOptions {
    /// `github` only, `legacy_sha1 = true`: verify the legacy `X-Hub-Signature: sha1=…`
    /// (HMAC-SHA1) instead of `X-Hub-Signature-256`, for senders that sign only SHA-1. Off by
    /// default; the source's keys are then HMAC-SHA1 keys.
    pub legacy_sha1: bool,
    /// `hmac` only (required there): the generic scheme.
    pub hmac: Option<Box<hmac::Scheme>>,
    /// `adyen` only, `hmac_signature = "header"`: verify the `HmacSignature` header (base64
    /// HMAC-SHA256 of the raw body; Balance Platform and Management API webhooks) instead of
    /// each notification item's `additionalData.hmacSignature` (`"additional_data"`, the
    /// default: standard payments webhooks). One scheme per source, no fallback
    /// ([`super::adyen`] says why).
    pub adyen_hmac_header: bool,
}
