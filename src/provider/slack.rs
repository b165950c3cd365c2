//! Slack (Events API), as documented in Slack's "Verifying requests from Slack" and "Events
//! API": `X-Slack-Signature: v0=<hex>` is the HMAC-SHA256 of `"v0:{X-Slack-Request-Timestamp}:
//! {body}"`, keyed by the app's signing secret exactly as the app settings show it (its UTF-8
//! bytes); the timestamp is integer Unix seconds. Only `v0` exists; any other version is no
//! signature we can check.
//!
//! The event id is the body's top-level `event_id` (`Ev…`), the same on Slack's retries, which
//! also repeat the body (they add `X-Slack-Retry-Num`/`X-Slack-Retry-Reason`). When the Request
//! URL is configured, Slack sends `{"type":"url_verification","challenge":…}`; once that
//! request verified, hookwall answers `{"challenge":…}` and admits nothing ([`challenge`]).

use crate::http::Request;
use crate::pipeline::Challenge;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-slack-signature";
/// The signed timestamp header (integer Unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// The body member holding the event id.
pub const EVENT_ID_MEMBER: &str = "event_id";

/// Reads the two headers into the signed timestamp, the single `v0` candidate and the signed
/// content `v0:{timestamp}:{body}` (the timestamp text exactly as received).
///
/// # Errors
/// [`Reject::SignatureMissing`] when either header is absent or repeated, the timestamp is not
/// an integer, or the signature is not `v0=` and 64 hex characters.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    presented_v0(req, TIMESTAMP_HEADER, SIGNATURE_HEADER)
}

/// The `v0` scheme shared by Slack and Zoom (only the header names differ): `v0=<64 hex>` in
/// `signature_header`, HMAC-SHA256 over `v0:{timestamp}:{body}` with the integer Unix-seconds
/// text of `timestamp_header` exactly as received.
///
/// # Errors
/// As [`presented`].
pub(crate) fn presented_v0<'a>(
    req: &'a Request,
    timestamp_header: &'static str,
    signature_header: &'static str,
) -> Result<Presented<'a>, Reject> {
    let t_text = verify::unique_header(req, timestamp_header).ok_or(Reject::SignatureMissing)?;
    let signed_at = verify::parse_unix_seconds(t_text).ok_or(Reject::SignatureMissing)?;
    let header = verify::unique_header(req, signature_header).ok_or(Reject::SignatureMissing)?;
    let hex = header.strip_prefix(b"v0=").ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_hex_tag(hex, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    Ok(Presented::signed(Some(signed_at), candidates, [b"v0:", t_text, b":", &req.body, b""]))
}

/// The `url_verification` handshake of an authenticated request: `{"challenge":"…"}` as
/// `application/json` (one of the three answers Slack accepts); `None` for anything else,
/// which is then inspected as an event.
pub(crate) fn challenge(req: &Request) -> Option<Challenge> {
    #[derive(serde::Deserialize)]
    struct Handshake {
        #[serde(rename = "type")]
        kind: String,
        challenge: Option<String>,
    }
    // Events (the common case) skip the parse: a handshake names its type in the body.
    let marker: &[u8] = b"url_verification";
    if !req.body.windows(marker.len()).any(|w| w == marker) {
        return None;
    }
    let handshake: Handshake = serde_json::from_slice(&req.body).ok()?;
    if handshake.kind != "url_verification" {
        return None;
    }
    let body = serde_json::json!({ "challenge": handshake.challenge? });
    Some(Challenge { content_type: "application/json", body: body.to_string().into_bytes() })
}
