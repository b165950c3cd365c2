//! SendGrid (Twilio SendGrid Event Webhook), as documented in SendGrid's "Getting started with
//! the Event Webhook Security Features" and implemented by its Python library (sendgrid 6.12.5,
//! `sendgrid/helpers/eventwebhook/__init__.py`, `EventWebhook.verify_signature`):
//! `X-Twilio-Email-Event-Webhook-Signature` is the base64 of a DER-encoded ECDSA P-256 /
//! SHA-256 signature over `X-Twilio-Email-Event-Webhook-Timestamp` (its text as sent) followed
//! by the raw body. The verification key is the public key the Mail Settings page shows: base64
//! of a DER SubjectPublicKeyInfo for a P-256 key (the library wraps it in PEM).
//!
//! The signed timestamp is Unix seconds; SendGrid documents no window, so hookwall's default
//! `tolerance` (300 s) applies. A delivery is a JSON array of events, each with its own
//! `sg_event_id` (the id) and `event` (the type): a batch ([`crate::batch`]); each element is
//! admitted and forwarded on its own, as its exact bytes.

use base64::Engine as _;

use crate::http::Request;
use crate::verify::{self, Candidates, Key, Presented, Reject};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-twilio-email-event-webhook-signature";
/// The signed timestamp header (Unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-twilio-email-event-webhook-timestamp";
/// The member of each event holding its id.
pub const EVENT_ID_MEMBER: &str = "sg_event_id";
/// The member of each event holding its type.
pub const EVENT_TYPE_MEMBER: &str = "event";

/// DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1, a 66-byte BIT
/// STRING) before the 65-byte uncompressed point.
const SPKI_P256_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The verification key from the public key as the Mail Settings page shows it (base64 of a
/// P-256 SubjectPublicKeyInfo; PEM armour lines and whitespace are tolerated).
///
/// # Errors
/// What is wrong with the key's form (not base64, not a P-256 SPKI, not an uncompressed
/// point), never the key itself.
pub(crate) fn key(secret: &str) -> Result<Key, String> {
    let b64: String = secret
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .flat_map(str::chars)
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| "not base64 (expected the public key as Mail Settings shows it)".to_owned())?;
    let point = der
        .strip_prefix(&SPKI_P256_PREFIX[..])
        .filter(|p| p.len() == 65 && p[0] == 0x04)
        .ok_or("not a P-256 public key (a DER SubjectPublicKeyInfo of 91 bytes)")?;
    let mut out = [0; 65];
    out.copy_from_slice(point);
    Ok(Key::EcdsaP256(out))
}

/// Reads the two headers into the signed timestamp, the signature and the signed content
/// `{timestamp}{body}`.
///
/// # Errors
/// [`Reject::SignatureMissing`] when either header is absent or repeated, the timestamp is not
/// an integer, or the signature is not base64 of 8..=72 bytes.
pub(crate) fn presented(req: &Request) -> Result<Presented<'_>, Reject> {
    let t_text = verify::unique_header(req, TIMESTAMP_HEADER).ok_or(Reject::SignatureMissing)?;
    let signed_at = verify::parse_unix_seconds(t_text).ok_or(Reject::SignatureMissing)?;
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_base64_der(header).ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    Ok(Presented::signed(Some(signed_at), candidates, [t_text, &req.body, b"", b"", b""]))
}
