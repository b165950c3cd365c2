//! HubSpot (Webhooks API, signature v3), as documented in HubSpot's "Validating requests"
//! (v3 signatures) and implemented by its Python SDK (hubspot-api-client 12.0.0,
//! `hubspot/utils/signature.py`, `Signature.get_signature(..., "v3", ...)`):
//! `X-HubSpot-Signature-v3` is the base64 HMAC-SHA256, keyed by the app's client secret exactly
//! as shown (its UTF-8 bytes), of the request method, the request URI, the raw body and the
//! `X-HubSpot-Request-Timestamp` header text, concatenated without separators. The URI checked
//! is [`crate::signed_url`]'s (set `public_url` to the target URL when a proxy rewrites it).
//! HubSpot's docs tell receivers to decode a fixed set of percent escapes in the URI before
//! signing (`%3A` `:`, `%2F` `/`, `%3F` `?`, `%40` `@`, `%21` `!`, `%24` `$`, `%27` `'`,
//! `%28` `(`, `%29` `)`, `%2A` `*`, `%2C` `,`, `%3B` `;`) while the SDK signs the URI as given:
//! both forms are tried, so a URI without such escapes has one form.
//!
//! The timestamp is Unix **milliseconds**; the SDK refuses one older than 5 minutes
//! (`MAX_ALLOWED_TIMESTAMP = 300`), hence the default `tolerance` of 300 s. A delivery is a
//! JSON array of events (a batch, [`crate::batch`]); each event's type is its
//! `subscriptionType`. Its identity is content-derived (see [`intent_members`]): HubSpot's
//! docs say `eventId` is not guaranteed to be unique, and `attemptNumber` changes on each retry.

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-hubspot-signature-v3";
/// The signed timestamp header (Unix milliseconds).
pub const TIMESTAMP_HEADER: &str = "x-hubspot-request-timestamp";
/// The member of each event holding HubSpot's event id (a number; not unique, not the identity).
pub const EVENT_ID_MEMBER: &str = "eventId";
/// The member of each event holding its type (`contact.creation`, …).
pub const EVENT_TYPE_MEMBER: &str = "subscriptionType";
/// The member of each event that counts delivery attempts (0 first, then 1, 2…): left out of
/// the event's identity and fingerprint.
pub const ATTEMPT_MEMBER: &str = "attemptNumber";

/// The percent escapes HubSpot's v3 docs decode in the URI before signing, and their text.
const DECODED_ESCAPES: [(&str, &str); 12] = [
    ("%3A", ":"),
    ("%2F", "/"),
    ("%3F", "?"),
    ("%40", "@"),
    ("%21", "!"),
    ("%24", "$"),
    ("%27", "'"),
    ("%28", "("),
    ("%29", ")"),
    ("%2A", "*"),
    ("%2C", ","),
    ("%3B", ";"),
];

/// Reads the two headers into the signed timestamp (whole seconds, rounded down), the
/// signature and the signed content `{method}{uri}{body}{timestamp}`, with `url` as the URI
/// (and its decoded form when that differs, module doc).
///
/// # Errors
/// [`Reject::SignatureMissing`] when either header is absent or repeated, the timestamp is not
/// an integer of at most 19 digits, or the signature is not base64 of 32 bytes.
pub(crate) fn presented<'a>(req: &'a Request, url: &str) -> Result<Presented<'a>, Reject> {
    let t_text = verify::unique_header(req, TIMESTAMP_HEADER).ok_or(Reject::SignatureMissing)?;
    let millis = verify::parse_unix_seconds(t_text).ok_or(Reject::SignatureMissing)?;
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let tag =
        verify::decode_base64_tag(header, Scheme::Hmac, 32).ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    let content = |uri: &str| [req.method.as_bytes(), uri.as_bytes(), &req.body, t_text].concat();
    let mut alternatives = vec![content(url)];
    let decoded = decode_uri(url);
    if decoded != url {
        alternatives.push(content(&decoded));
    }
    Ok(Presented::alternatives(Some(millis.div_euclid(1000)), candidates, alternatives))
}

/// `uri` with HubSpot's listed percent escapes decoded (either hex case).
fn decode_uri(uri: &str) -> String {
    let mut out = String::with_capacity(uri.len());
    let mut rest = uri;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3).unwrap_or(&rest[at..]);
        match DECODED_ESCAPES.iter().find(|(e, _)| e.eq_ignore_ascii_case(escape)) {
            Some((_, text)) => {
                out.push_str(text);
                rest = &rest[at + 3..];
            }
            None => {
                out.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The intent of one HubSpot event, from its element's exact bytes: every member as sent
/// (name, then the value's raw bytes, each preceded by its length as 8 little-endian bytes),
/// in order, except `attemptNumber`. No value is re-serialised. The SHA-256 of this is both the
/// event's fingerprint and, as `sha256:<hex>`, its identity, so HubSpot's retry of an event
/// (same members, a higher `attemptNumber`) is a duplicate.
///
/// # Errors
/// `None` when the element is not a JSON object or names a member twice (ambiguous, R13).
pub fn intent_members(element: &[u8]) -> Option<Vec<u8>> {
    let mut deserializer = serde_json::Deserializer::from_slice(element);
    let members = serde::Deserializer::deserialize_map(&mut deserializer, Members).ok()?;
    deserializer.end().ok()?;
    Some(members)
}

/// Collects an object's members except `attemptNumber`, refusing a repeated name.
struct Members;

impl<'de> serde::de::Visitor<'de> for Members {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object with distinct member names")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Vec<u8>, A::Error> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            let raw: &'de serde_json::value::RawValue = map.next_value()?;
            if !seen.insert(name.clone()) {
                return Err(serde::de::Error::custom("member given twice"));
            }
            if name == ATTEMPT_MEMBER {
                continue;
            }
            for piece in [name.as_bytes(), raw.get().as_bytes()] {
                out.extend_from_slice(&(piece.len() as u64).to_le_bytes());
                out.extend_from_slice(piece);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_uri, intent_members};

    #[test]
    fn decodes_only_the_listed_escapes() {
        assert_eq!(
            decode_uri("https://h.example/a%3Ab%2fc?x=%20%3F"),
            "https://h.example/a:b/c?x=%20?"
        );
        assert_eq!(decode_uri("https://h.example/%"), "https://h.example/%");
        assert_eq!(decode_uri("https://h.example/%2"), "https://h.example/%2");
    }

    #[test]
    fn intent_leaves_out_only_the_attempt_number() {
        let first = br#"{"eventId":1,"attemptNumber":0,"objectId":7}"#;
        let retry = br#"{"eventId":1, "attemptNumber": 3,"objectId":7}"#;
        let changed = br#"{"eventId":1,"attemptNumber":0,"objectId":8}"#;
        assert_eq!(intent_members(first), intent_members(retry));
        assert_ne!(intent_members(first), intent_members(changed));
        assert_eq!(intent_members(br#"{"eventId":1,"eventId":1}"#), None, "repeated member");
        assert_eq!(intent_members(b"[1]"), None, "not an object");
        assert_eq!(intent_members(br#"{"a":1} x"#), None, "trailing bytes");
    }
}
