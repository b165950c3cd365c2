//! Twitch EventSub (webhook transport), as documented in Twitch's "Handling webhook events"
//! (verifying the event message): `Twitch-Eventsub-Message-Signature: sha256=<hex>` is the
//! HMAC-SHA256 of `{Message-Id}{Message-Timestamp}{body}` (plain concatenation), keyed by the
//! subscription's secret exactly as it was set (its UTF-8 bytes). The timestamp is RFC 3339 UTC
//! with up to nanoseconds (`2019-11-16T10:11:12.634234626Z`); Twitch tells receivers to reject
//! messages older than 10 minutes (the default `tolerance`).
//!
//! `Twitch-Eventsub-Message-Id` is the event id and is the same when Twitch resends a message;
//! `Twitch-Eventsub-Subscription-Type` is the event type. A message of type
//! `webhook_callback_verification` is the subscription handshake: once it verified, hookwall
//! answers the body's `challenge` as `text/plain` and admits nothing ([`challenge`]).
//! `notification` and `revocation` messages are admitted as events.

use crate::http::Request;
use crate::pipeline::Challenge;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The message id header: signed, the same on resends, the event id (R8).
pub const ID_HEADER: &str = "twitch-eventsub-message-id";
/// The signed RFC 3339 timestamp header.
pub const TIMESTAMP_HEADER: &str = "twitch-eventsub-message-timestamp";
/// The signature header.
pub const SIGNATURE_HEADER: &str = "twitch-eventsub-message-signature";
/// The message type header (`notification`, `webhook_callback_verification`, `revocation`).
pub const MESSAGE_TYPE_HEADER: &str = "twitch-eventsub-message-type";
/// The subscription type header (`channel.follow`, …), the event type. Not signed.
pub const SUBSCRIPTION_TYPE_HEADER: &str = "twitch-eventsub-subscription-type";

/// Reads the three signed headers into the signed timestamp (whole seconds), the single
/// candidate and the signed content `{id}{timestamp}{body}` (header texts as received).
///
/// # Errors
/// [`Reject::SignatureMissing`] when a header is absent or repeated, the id is empty, the
/// timestamp is not RFC 3339 UTC (`…Z`) or before 1970, or the signature is not `sha256=` and
/// 64 hex characters.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let id = verify::unique_header(req, ID_HEADER)
        .filter(|id| !id.is_empty())
        .ok_or(Reject::SignatureMissing)?;
    let t_text = verify::unique_header(req, TIMESTAMP_HEADER).ok_or(Reject::SignatureMissing)?;
    let signed_at = rfc3339_unix_seconds(t_text).ok_or(Reject::SignatureMissing)?;
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let hex = header.strip_prefix(b"sha256=").ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_hex_tag(hex, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    Ok(Presented::signed(Some(signed_at), candidates, [id, t_text, &req.body, b"", b""]))
}

/// Whole Unix seconds of an RFC 3339 UTC timestamp (humantime's parser: `Z` only, up to nine
/// fractional digits); `None` when malformed or before 1970.
fn rfc3339_unix_seconds(text: &[u8]) -> Option<i64> {
    let time = humantime::parse_rfc3339(std::str::from_utf8(text).ok()?).ok()?;
    let since = time.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_secs()).ok()
}

/// The `webhook_callback_verification` handshake of an authenticated request: the body's
/// `challenge`, as `text/plain` (Twitch requires the raw string); `None` for other messages.
pub(crate) fn challenge(req: &Request) -> Option<Challenge> {
    #[derive(serde::Deserialize)]
    struct Handshake {
        challenge: String,
    }
    if verify::unique_header(req, MESSAGE_TYPE_HEADER)? != b"webhook_callback_verification" {
        return None;
    }
    let handshake: Handshake = serde_json::from_slice(&req.body).ok()?;
    Some(Challenge { content_type: "text/plain", body: handshake.challenge.into_bytes() })
}
