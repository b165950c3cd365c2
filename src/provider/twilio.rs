//! Twilio, as documented in Twilio's "Webhooks security" and implemented by its SDKs'
//! `RequestValidator` (twilio-python 9.13, `twilio/request_validator.py`): `X-Twilio-Signature`
//! is the base64 HMAC-SHA1, keyed by the account's Auth Token as the console shows it, of the
//! full URL Twilio requested (scheme, host, port if any, path, query) followed, for a form
//! body, by every POST parameter name and value: names sorted, and for a name given several
//! times its distinct values sorted (the SDK's `sorted(set(values))`), decoded as
//! `application/x-www-form-urlencoded`.
//!
//! JSON bodies: the URL carries a `bodySHA256` query parameter, the lowercase hex SHA-256 of the
//! raw body; the signature is over the URL alone and the body is bound by that hash (the SDK's
//! `validate` with a string body). A hash that does not match the body is `signature_invalid`.
//!
//! Port quirk: Twilio's back end is inconsistent about the default port, so the SDK accepts a
//! signature over the URL with its port (`:443`/`:80` added when absent) or without any port;
//! so does hookwall. Which URL is checked is [`crate::signed_url`]'s rule (a proxy that turns
//! https into http or drops the port is handled there and by `public_url`).
//!
//! Shared keys (Twilio's "Sign webhooks with shared keys", Webhooks configuration API): when a
//! Webhook Rule matches the URL, Twilio signs with the Webhook Setting's SharedKey secret instead
//! of the Auth Token, with the algorithm that Setting names (`HMAC_SHA1` or `HMAC_SHA256`), and
//! adds `X-Twilio-Webhooks-Signature-Settings: key=<SharedKey id>,algorithm=<algorithm>`. Only
//! the hash changes: the signed string is the same (twilio-python 9.13 `get_signature_algorithm`
//! and `RequestValidator.compute_signature(…, algorithm)`; twilio-node's "Validating webhook
//! signatures" example). The algorithm is therefore read from that header as the SDK reads it
//! ([`signature_algorithm`]): absent, or without a non-empty `algorithm=`, is HMAC-SHA1; a name
//! other than the two (any case) cannot be verified and is `signature_missing`. The tag must
//! have that algorithm's length (20 or 32 bytes). Every Twilio secret is keyed for both
//! algorithms ([`crate::verify::Key::HmacSha1Sha256`]): list the Auth Token and the SharedKey
//! secret(s) as the source's secrets; the `key=` id is not used to pick one (the SDKs do not
//! either), every active secret is tried.
//!
//! Not signed: a timestamp (freshness cannot be checked, R7). The event id is the
//! `I-Twilio-Idempotency-Token` header Twilio sends with each webhook and repeats on its
//! retries.

use base64::Engine as _;

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme};

/// The signature header (lowercase, as [`Request`] stores names).
pub const SIGNATURE_HEADER: &str = "x-twilio-signature";
/// The header carrying the event id (same value on Twilio's retries).
pub const IDEMPOTENCY_HEADER: &str = "i-twilio-idempotency-token";
/// The header naming a shared key's id and signing algorithm (lowercase), e.g.
/// `key=webhooks_sharedkey_…,algorithm=HMAC_SHA256`; absent for Auth Token signatures.
pub const SIGNATURE_SETTINGS_HEADER: &str = "x-twilio-webhooks-signature-settings";
/// The query parameter holding the body's hex SHA-256 on JSON deliveries.
pub const BODY_HASH_PARAM: &str = "bodySHA256";

/// The HMAC a Twilio signature is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// `HMAC_SHA1` (the Auth Token's, and the default): 20-byte tags.
    HmacSha1,
    /// `HMAC_SHA256` (a SharedKey's option): 32-byte tags.
    HmacSha256,
}

impl Algorithm {
    /// Bytes of this algorithm's tag.
    pub fn tag_bytes(self) -> usize {
        match self {
            Algorithm::HmacSha1 => 20,
            Algorithm::HmacSha256 => 32,
        }
    }

    /// ring's algorithm.
    pub fn ring(self) -> ring::hmac::Algorithm {
        match self {
            Algorithm::HmacSha1 => ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Algorithm::HmacSha256 => ring::hmac::HMAC_SHA256,
        }
    }
}

/// The algorithm `X-Twilio-Webhooks-Signature-Settings` names, read as twilio-python's
/// `get_signature_algorithm` and `validate` do: `None` (no header) or a value without a
/// non-empty `algorithm=` part is HMAC-SHA1; the first such part's value, trimmed and compared
/// without case, must be `HMAC_SHA1` or `HMAC_SHA256`.
///
/// `None` (not verifiable) for any other algorithm name, or a value that is not UTF-8.
pub fn signature_algorithm(settings: Option<&[u8]>) -> Option<Algorithm> {
    let Some(settings) = settings else {
        return Some(Algorithm::HmacSha1);
    };
    let settings = std::str::from_utf8(settings).ok()?;
    let named = settings.split(',').find_map(|part| {
        let (name, value) = part.split_once('=')?;
        (name.trim() == "algorithm" && !value.trim().is_empty()).then(|| value.trim())
    });
    match named {
        None => Some(Algorithm::HmacSha1),
        Some(name) if name.eq_ignore_ascii_case("HMAC_SHA1") => Some(Algorithm::HmacSha1),
        Some(name) if name.eq_ignore_ascii_case("HMAC_SHA256") => Some(Algorithm::HmacSha256),
        Some(_) => None,
    }
}

/// Reads `X-Twilio-Signature` (in the algorithm `X-Twilio-Webhooks-Signature-Settings` names)
/// and builds the signed content for `url` (with and without its port).
///
/// # Errors
/// [`Reject::SignatureMissing`] when the signature header is absent, repeated or not base64 of
/// the algorithm's tag length (20 bytes for HMAC-SHA1, 32 for HMAC-SHA256), when the settings
/// header is repeated or names another algorithm, or when the URL is unknown or not
/// `http(s)://host…`; [`Reject::SignatureInvalid`] when the URL's `bodySHA256` does not match
/// the body (or is given twice).
pub(crate) fn presented<'a>(req: &'a Request, url: &str) -> Result<Presented<'a>, Reject> {
    let header = verify::unique_header(req, SIGNATURE_HEADER).ok_or(Reject::SignatureMissing)?;
    let settings = match req.headers_all(SIGNATURE_SETTINGS_HEADER).count() {
        0 => None,
        1 => verify::unique_header(req, SIGNATURE_SETTINGS_HEADER),
        _ => return Err(Reject::SignatureMissing),
    };
    let algorithm = signature_algorithm(settings).ok_or(Reject::SignatureMissing)?;
    let tag = verify::decode_base64_tag(header, Scheme::Hmac, algorithm.tag_bytes());
    let tag = tag.ok_or(Reject::SignatureMissing)?;
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag));
    let (with_port, without_port) = port_variants(url).ok_or(Reject::SignatureMissing)?;
    let params = match body_hash(url) {
        BodyHash::Given(hex) => {
            let actual = hex::encode(verify::sha256(&req.body));
            if actual != hex {
                return Err(Reject::SignatureInvalid);
            }
            String::new()
        }
        BodyHash::Repeated => return Err(Reject::SignatureInvalid),
        BodyHash::Absent => sorted_params(&req.body),
    };
    let content = |url: String| [url.into_bytes(), params.as_bytes().to_vec()].concat();
    let alternatives = vec![content(with_port), content(without_port)];
    Ok(Presented::alternatives(None, candidates, alternatives))
}

/// The form parameters as Twilio's SDK concatenates them: names sorted, each name followed by
/// each of its distinct values in sorted order (`name value name value …`).
pub(crate) fn sorted_params(body: &[u8]) -> String {
    let mut pairs: Vec<(String, String)> =
        form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    pairs.sort();
    pairs.dedup();
    pairs.into_iter().map(|(k, v)| k + &v).collect()
}

/// What the URL's query says about the body hash.
enum BodyHash {
    Absent,
    Given(String),
    Repeated,
}

/// The `bodySHA256` query parameter of `url` (decoded), if any.
fn body_hash(url: &str) -> BodyHash {
    let Some((_, query)) = url.split_once('?') else {
        return BodyHash::Absent;
    };
    let mut found = form_urlencoded::parse(query.as_bytes()).filter(|(k, _)| k == BODY_HASH_PARAM);
    match (found.next(), found.next()) {
        (None, _) => BodyHash::Absent,
        (Some((_, v)), None) => BodyHash::Given(v.into_owned()),
        (Some(_), Some(_)) => BodyHash::Repeated,
    }
}

/// `url` with its port (the scheme's default added when it has none) and without any port, as
/// the SDK's `add_port`/`remove_port`; `None` when `url` is not `http(s)://authority…`.
pub(crate) fn port_variants(url: &str) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        _ => return None,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    // The host ends at the last ':' that is not inside an IPv6 literal's brackets.
    let host_end = match authority.rfind(':') {
        Some(colon) if !authority[colon..].contains(']') => colon,
        _ => authority.len(),
    };
    let (host, port) = authority.split_at(host_end);
    if host.is_empty() {
        return None;
    }
    let with_port = if port.len() > 1 {
        url.to_owned()
    } else {
        format!("{scheme}://{host}:{default_port}{tail}")
    };
    let without_port = format!("{scheme}://{host}{tail}");
    Some((with_port, without_port))
}

/// The `X-Twilio-Signature` value for `url` and `body` (form parameters, or none when the URL
/// carries `bodySHA256`), keyed by `auth_token` with HMAC-SHA1: the signer of `hookwall
/// loadgen`.
pub fn sign(auth_token: &str, url: &str, body: &[u8]) -> String {
    sign_with(Algorithm::HmacSha1, auth_token, url, body)
}

/// As [`sign`], with `algorithm` (a SharedKey secret's Webhook Setting may name HMAC-SHA256).
pub fn sign_with(algorithm: Algorithm, secret: &str, url: &str, body: &[u8]) -> String {
    let params = match body_hash(url) {
        BodyHash::Absent => sorted_params(body),
        BodyHash::Given(_) | BodyHash::Repeated => String::new(),
    };
    let key = ring::hmac::Key::new(algorithm.ring(), secret.as_bytes());
    let tag = ring::hmac::sign(&key, [url.as_bytes(), params.as_bytes()].concat().as_slice());
    base64::engine::general_purpose::STANDARD.encode(tag)
}

#[cfg(test)]
mod tests {
    use super::{port_variants, signature_algorithm, sorted_params, Algorithm};

    #[test]
    fn algorithm_read_as_the_sdk_reads_it() {
        let a = |v: &str| signature_algorithm(Some(v.as_bytes()));
        assert_eq!(signature_algorithm(None), Some(Algorithm::HmacSha1));
        assert_eq!(
            a("key=webhooks_sharedkey_1,algorithm=HMAC_SHA256"),
            Some(Algorithm::HmacSha256)
        );
        assert_eq!(a(" algorithm = hmac_sha256 , key=k"), Some(Algorithm::HmacSha256));
        assert_eq!(a("key=k,algorithm=HMAC_SHA1"), Some(Algorithm::HmacSha1));
        assert_eq!(a("key=k"), Some(Algorithm::HmacSha1));
        assert_eq!(a(""), Some(Algorithm::HmacSha1));
        assert_eq!(a("algorithm=,algorithm=HMAC_SHA256"), Some(Algorithm::HmacSha256));
        assert_eq!(a("key=k,algorithm=HMAC_SHA512"), None);
        assert_eq!(signature_algorithm(Some(b"algorithm=\xff")), None);
    }

    #[test]
    fn ports_added_and_removed_as_the_sdk_does() {
        let v = port_variants;
        assert_eq!(
            v("https://example.com/sms?x=1"),
            Some(("https://example.com:443/sms?x=1".into(), "https://example.com/sms?x=1".into()))
        );
        assert_eq!(
            v("http://example.com:8080/a"),
            Some(("http://example.com:8080/a".into(), "http://example.com/a".into()))
        );
        assert_eq!(
            v("http://[::1]/a"),
            Some(("http://[::1]:80/a".into(), "http://[::1]/a".into()))
        );
        assert_eq!(v("ftp://example.com/"), None);
        assert_eq!(v("https:///x"), None);
    }

    #[test]
    fn repeated_keys_sorted_and_deduplicated() {
        let body = b"To=%2B1555&Body=hi+there&MediaUrl=b&MediaUrl=a&MediaUrl=b";
        assert_eq!(sorted_params(body), "Bodyhi thereMediaUrlaMediaUrlbTo+1555");
    }
}
