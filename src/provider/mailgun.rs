//! Mailgun (JSON webhooks), as documented in Mailgun's "Securing Webhooks": the signature is
//! inside the JSON body, `{"signature": {"timestamp", "token", "signature"}, "event-data":
//! {…}}`, where `signature` is the hex HMAC-SHA256 of `{timestamp}{token}` (plain
//! concatenation) keyed by the account's HTTP webhook signing key exactly as the control panel
//! shows it (its UTF-8 bytes). `timestamp` is Unix seconds (a JSON string); `token` is a
//! random 50-character string.
//!
//! **The signature does not cover `event-data`.** It proves Mailgun minted that
//! timestamp/token pair, not that the body is Mailgun's; Mailgun's advice is to keep the
//! timestamp fresh and to remember tokens so a pair is used once. hookwall checks the
//! timestamp against `tolerance` (300 s by default) and deduplicates on `event-data.id`; a
//! captured pair replayed with another `event-data.id` inside the tolerance is *not* caught
//! (the verify core keeps no token cache). TLS to hookwall is what protects the body.
//!
//! The event id is `event-data.id` and the event type `event-data.event` (`delivered`, …). A
//! retry signed anew has another `signature` object, so the fingerprint is taken over
//! `event-data` (the intent, SPEC §3), not the whole body.

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The top-level body member holding the event object.
pub const EVENT_MEMBER: &str = "event-data";
/// The event object's id member.
pub const EVENT_ID_MEMBER: &str = "id";
/// The event object's type member.
pub const EVENT_TYPE_MEMBER: &str = "event";

/// Reads the body's `signature` object into the signed timestamp, the single candidate and the
/// signed content `{timestamp}{token}` (texts as sent, borrowed from the body).
///
/// # Errors
/// [`Reject::SignatureMissing`] when the body is not a JSON object with a `signature` object
/// whose `timestamp` (integer Unix seconds as a string), `token` (non-empty) and `signature`
/// (64 hex characters) are strings without escapes.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        signature: Signature<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Signature<'a> {
        timestamp: &'a str,
        token: &'a str,
        signature: &'a str,
    }
    let body: Body<'_> = serde_json::from_slice(&req.body).map_err(|_| Reject::SignatureMissing)?;
    let Signature { timestamp, token, signature } = body.signature;
    let signed_at =
        verify::parse_unix_seconds(timestamp.as_bytes()).ok_or(Reject::SignatureMissing)?;
    if token.is_empty() {
        return Err(Reject::SignatureMissing);
    }
    let tag = verify::decode_hex_tag(signature.as_bytes(), Scheme::Hmac, 32)
        .ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    Ok(Presented::signed(Some(signed_at), candidates, [timestamp.as_bytes(), token.as_bytes()]))
}
