//! Postmark, as documented in Postmark's "Webhooks overview" (protecting your webhook): Postmark
//! does not sign webhooks; the webhook URL carries HTTP basic-auth credentials
//! (`https://user:password@host/…`), which Postmark sends as `Authorization: Basic
//! base64(user:password)` (RFC 7617). The source's secret is `user:password` as written in
//! that URL; hookwall compares the decoded credentials with it as SHA-256 digests in constant
//! time. No timestamp is sent and nothing binds the body to the credentials, so TLS is what
//! protects integrity on the way (as for GitLab's token).
//!
//! Postmark's payloads carry no delivery id (`MessageID` names the message, and one message has
//! several events; `ID` exists only on bounces). hookwall identifies a Postmark event by its
//! content: `sha256:<hex of the SHA-256 of the body>` (see `inspect`), so a retry of the same
//! bytes is a duplicate. The event type is the body's `RecordType` (`Bounce`, `Delivery`, …).

use base64::Engine as _;

use crate::http::Request;
use crate::verify::{self, Presented, Reject};

/// The header carrying the credentials (lowercase).
pub const AUTHORIZATION_HEADER: &str = "authorization";
/// The body member holding the event type.
pub const EVENT_TYPE_MEMBER: &str = "RecordType";

/// Longest `Authorization` value read (base64 of generous credentials).
const AUTHORIZATION_BYTES_MAX: usize = 1024;

/// Reads `Authorization: Basic <base64>` and presents the decoded `user:password` as the token.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the header is absent, repeated, longer than 1 KiB, not of
/// the `Basic` scheme (case-insensitive), not base64, or decodes to no `:`.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let header =
        verify::unique_header(req, AUTHORIZATION_HEADER).ok_or(Reject::SignatureMissing)?;
    if header.len() > AUTHORIZATION_BYTES_MAX || header.len() < 6 {
        return Err(Reject::SignatureMissing);
    }
    let (scheme, rest) = header.split_at(6);
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return Err(Reject::SignatureMissing);
    }
    let credentials = base64::engine::general_purpose::STANDARD
        .decode(rest.trim_ascii())
        .map_err(|_| Reject::SignatureMissing)?;
    if !credentials.contains(&b':') {
        return Err(Reject::SignatureMissing);
    }
    Ok(Presented::token(&credentials))
}

/// The key of a `user:password` secret.
///
/// # Errors
/// When the secret has no `:` (it must be the URL's `user:password`).
pub(crate) fn key(secret: &str) -> Result<verify::Key, String> {
    if !secret.contains(':') {
        return Err(
            "Postmark credentials must be written user:password (as in the webhook URL)".to_owned()
        );
    }
    Ok(verify::Key::Token(verify::sha256(secret.as_bytes())))
}
