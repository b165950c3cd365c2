//! Discord (interactions endpoint), as documented in Discord's "Receiving and Responding"
//! (security and authorization) and implemented by its `discord-interactions` libraries
//! (`verify_key`): `X-Signature-Ed25519` is the hex Ed25519 signature (64 bytes) of
//! `{X-Signature-Timestamp}{body}` (plain concatenation) by Discord's key; the receiver is
//! given the application's public key as 64 hex characters in the Developer Portal. The
//! timestamp is integer Unix seconds; Discord states no replay window, so hookwall's usual
//! 300 s applies.
//!
//! The interaction's top-level `id` (a snowflake) is the event id; Discord does not retry an
//! interaction. The body's `type` is a number (1 = PING, 2 = APPLICATION_COMMAND, …), so no
//! event type is read. A PING (`"type": 1`) is the endpoint check Discord sends when the URL is
//! saved and at random later; once it verified, hookwall answers `{"type":1}` (PONG) and admits
//! nothing ([`challenge`]).

use crate::http::Request;
use crate::pipeline::Challenge;
use crate::verify::{self, Candidates, Key, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-signature-ed25519";
/// The signed timestamp header (integer Unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-signature-timestamp";
/// The body member holding the interaction id (a snowflake string).
pub const EVENT_ID_MEMBER: &str = "id";

/// Bytes of an Ed25519 signature.
const SIGNATURE_BYTES: usize = 64;

/// Reads the two headers into the signed timestamp, the single Ed25519 candidate and the signed
/// content `{timestamp}{body}` (the timestamp text exactly as received).
///
/// # Errors
/// [`Reject::SignatureMissing`] when either header is absent or repeated, the timestamp is not
/// an integer, or the signature is not 128 hex characters.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let t_text = verify::unique_header(req, TIMESTAMP_HEADER).ok_or(Reject::SignatureMissing)?;
    let signed_at = verify::parse_unix_seconds(t_text).ok_or(Reject::SignatureMissing)?;
    let hex = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_hex_tag(hex, Scheme::Ed25519, SIGNATURE_BYTES)
        .ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    Ok(Presented::signed(Some(signed_at), candidates, [t_text, &req.body]))
}

/// The application's public key as the Developer Portal shows it: 64 hex characters (either
/// case) of a 32-byte Ed25519 public key.
///
/// # Errors
/// A message naming the problem (never the key).
pub(crate) fn key(secret: &str) -> Result<Key, String> {
    let mut public_key = [0; 32];
    hex::decode_to_slice(secret.trim(), &mut public_key).map_err(|_| {
        "Discord public key must be 64 hex characters (the application's public key)".to_owned()
    })?;
    Ok(Key::Ed25519(public_key))
}

/// The PING of an authenticated request (`"type": 1`): answered `{"type":1}` as
/// `application/json` (PONG, per Discord's docs); `None` for every other interaction.
pub(crate) fn challenge(req: &Request) -> Option<Challenge> {
    #[derive(serde::Deserialize)]
    struct Interaction {
        #[serde(rename = "type")]
        kind: serde_json::Value,
    }
    let interaction: Interaction = serde_json::from_slice(&req.body).ok()?;
    if interaction.kind != serde_json::json!(1) {
        return None;
    }
    Some(Challenge { content_type: "application/json", body: br#"{"type":1}"#.to_vec() })
}
