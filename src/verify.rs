//! Verification: authenticity (signature over the raw bytes, constant time, every active key of
//! the source tried, R1–R5) and freshness (signed timestamp inside the replay window, R6–R7).
//! Pure: takes the request, the source and `now`; does no IO and reads no clock.
//!
//! The phases, in order: the provider's file reads its headers into a [`Presented`] (the proof —
//! candidate signatures or a shared token —, the signed timestamp, the pieces of the signed
//! content) or answers `signature_missing`; every active key is tried against the proof
//! (`signature_invalid`); only an authentic delivery has its signed timestamp checked (`stale`).
//!
//! Schemes, by [`Key`]: HMAC (SHA-1, SHA-256 or SHA-512; hex or base64 tags of the algorithm's
//! length) is computed once per key over the content pieces, without copying the body, and
//! compared with each candidate in constant time; Ed25519 signatures are checked with ring over
//! the content joined once into one buffer (ring needs one contiguous message); a shared token
//! (GitLab's `X-Gitlab-Token`) is compared as SHA-256 digests in constant time, so neither its
//! bytes nor its length leak through timing.

use std::time::Duration;

use base64::Engine as _;
use subtle::ConstantTimeEq as _;

use crate::config::{Secret, SourceConfig};
use crate::http::Request;
use crate::limits::SIGNATURES_PER_HEADER_MAX;
use crate::provider;

/// Longest candidate signature in bytes: HMAC-SHA512 tags and Ed25519 signatures are 64, a
/// DER-encoded ECDSA P-256 signature at most 72.
pub(crate) const TAG_BYTES_MAX: usize = 72;

/// Most pieces a provider's signed content is made of (Standard Webhooks: `id`, `.`,
/// `timestamp`, `.`, body — five; the generic `hmac` scheme's template may use up to nine).
pub(crate) const CONTENT_PIECES_MAX: usize = 9;

/// Longest base64 text read for one candidate: 72 bytes take 96 characters with padding.
const TAG_BASE64_CHARS_MAX: usize = 96;

/// A verification key of one source, derived from the secret as the provider's dashboard shows
/// it (see [`provider::key`]). Never printed (R28).
pub enum Key {
    /// A shared MAC key; ring's key carries the algorithm (HMAC-SHA1, -SHA256 or -SHA512).
    Hmac(ring::hmac::Key),
    /// One shared secret keyed for both HMAC-SHA1 and HMAC-SHA256, for a provider whose
    /// request names the algorithm (Twilio: `X-Twilio-Webhooks-Signature-Settings`). The
    /// presented tag's length (20 or 32 bytes, fixed by the provider's file from that header)
    /// picks the key; only that one is computed.
    HmacSha1Sha256 {
        /// The secret as an HMAC-SHA1 key.
        sha1: ring::hmac::Key,
        /// The same secret as an HMAC-SHA256 key.
        sha256: ring::hmac::Key,
    },
    /// An Ed25519 public key (32 bytes, RFC 8032).
    Ed25519([u8; 32]),
    /// SHA-256 of a shared token that the provider sends as is (GitLab).
    Token([u8; 32]),
    /// An ECDSA P-256 public key, the uncompressed point (65 bytes, SEC 1); signatures are
    /// SHA-256 and DER-encoded (SendGrid).
    EcdsaP256([u8; 65]),
}

impl Key {
    /// The scheme's name for messages and the `Hookwall-Verification` header: `hmac`,
    /// `ed25519`, `token` or `ecdsa-p256`.
    pub fn kind(&self) -> &'static str {
        match self {
            Key::Hmac(_) | Key::HmacSha1Sha256 { .. } => "hmac",
            Key::Ed25519(_) => "ed25519",
            Key::Token(_) => "token",
            Key::EcdsaP256(_) => "ecdsa-p256",
        }
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material (R28), not even a public key's.
        write!(f, "Key::{}(..)", self.kind())
    }
}

/// A delivery proven authentic and fresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// Index into `source.secrets` of the key that matched (recorded with the event, R3).
    pub secret_index: usize,
    /// The signed timestamp in Unix seconds, for providers that sign one.
    pub signed_at: Option<i64>,
}

/// Why a delivery is not authentic or not fresh; each maps to a 401 (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// Signature header (or its timestamp/id companions) missing or malformed.
    #[error("the signature header, or its signed timestamp or id, is missing or malformed")]
    SignatureMissing,
    /// No active key of the source produced any of the presented signatures.
    #[error("no active key of the source produced any of the presented signatures")]
    SignatureInvalid,
    /// Authentic, but the signed timestamp is older than `tolerance` or ahead by more than
    /// `future_skew`.
    #[error("the signed timestamp is older than the tolerance or too far ahead of our clock")]
    Stale,
}

impl Reject {
    /// The status code of SPEC §3 (also the metric label): `signature_missing`,
    /// `signature_invalid` or `stale`.
    pub fn code(self) -> &'static str {
        match self {
            Reject::SignatureMissing => "signature_missing",
            Reject::SignatureInvalid => "signature_invalid",
            Reject::Stale => "stale",
        }
    }
}

/// Checks that `req` was signed by an active key of `source` and that its signed timestamp (if
/// the provider signs one) is fresh at `now_unix_s`.
///
/// Keys are tried in config order, skipping those not [`Secret::active_at`] `now_unix_s` (R3);
/// the first that matches any presented signature wins. Freshness is checked only after a
/// match, and only against the signed timestamp (R7): older than `source.tolerance` or ahead by
/// more than `source.future_skew` is stale; exactly at either bound is fresh.
///
/// # Errors
/// [`Reject::SignatureMissing`] when the provider's headers are absent or malformed,
/// [`Reject::SignatureInvalid`] when no active key matches (including when no key is active),
/// [`Reject::Stale`] when an authentic delivery is outside the replay window.
pub fn verify(source: &SourceConfig, req: &Request, now_unix_s: i64) -> Result<Verified, Reject> {
    verify_signed_url(source, req, None, now_unix_s)
}

/// As [`verify`], for a request whose signed URL is known: `url` is what
/// [`crate::signed_url::signed_url`] rebuilt (scheme, authority, path and query as the provider
/// saw them). Only URL-signing providers (Twilio, Square, HubSpot) read it; `None` means the URL
/// is rebuilt from the request alone ([`crate::signed_url::request_url`]).
///
/// # Errors
/// As [`verify`]; a URL-signing provider answers [`Reject::SignatureMissing`] when no URL can be
/// known (no `Host`, no `public_url`).
pub fn verify_signed_url(
    source: &SourceConfig,
    req: &Request,
    url: Option<&str>,
    now_unix_s: i64,
) -> Result<Verified, Reject> {
    let presented = provider::presented(source, req, url)?;
    let secret_index = matching_secret(&source.secrets, &presented, now_unix_s)?;
    check_fresh(presented.signed_at, source, now_unix_s)?;
    Ok(Verified { secret_index, signed_at: presented.signed_at })
}

/// What one delivery's signature headers present, borrowed from the request (no copy of the
/// body is made).
#[derive(Debug)]
pub(crate) struct Presented<'a> {
    /// The signed timestamp in Unix seconds; `None` for providers that sign none (GitHub).
    pub(crate) signed_at: Option<i64>,
    /// What proves authenticity.
    pub(crate) proof: Proof,
    /// The signed content, in order; unused trailing pieces are empty. Unused for tokens.
    pub(crate) content: [&'a [u8]; CONTENT_PIECES_MAX],
    /// Whole signed contents built by the provider's file (URL-signing schemes, whose content
    /// has no fixed number of pieces). When not empty, `content` is unused and a signature
    /// over any one of them matches (Twilio's URL with and without its port). HMAC only.
    pub(crate) alternatives: Vec<Vec<u8>>,
}

impl<'a> Presented<'a> {
    /// Signature candidates over `content` (`N` ≤ [`CONTENT_PIECES_MAX`] pieces, in order),
    /// with an optional signed timestamp.
    pub(crate) fn signed<const N: usize>(
        signed_at: Option<i64>,
        candidates: Candidates,
        content: [&'a [u8]; N],
    ) -> Presented<'a> {
        const { assert!(N <= CONTENT_PIECES_MAX) };
        let mut all: [&'a [u8]; CONTENT_PIECES_MAX] = [b""; CONTENT_PIECES_MAX];
        all[..N].copy_from_slice(&content);
        Presented {
            signed_at,
            proof: Proof::Signatures(candidates),
            content: all,
            alternatives: Vec::new(),
        }
    }

    /// Signature candidates over `content` given as a slice (at most [`CONTENT_PIECES_MAX`]
    /// pieces; the generic `hmac` scheme, whose template length is known only at run time).
    pub(crate) fn signed_pieces(
        signed_at: Option<i64>,
        candidates: Candidates,
        content: &[&'a [u8]],
    ) -> Presented<'a> {
        let mut all: [&'a [u8]; CONTENT_PIECES_MAX] = [b""; CONTENT_PIECES_MAX];
        let n = content.len().min(CONTENT_PIECES_MAX);
        all[..n].copy_from_slice(&content[..n]);
        Presented {
            signed_at,
            proof: Proof::Signatures(candidates),
            content: all,
            alternatives: Vec::new(),
        }
    }

    /// Signature candidates over any one of `alternatives` (each a whole signed content).
    pub(crate) fn alternatives(
        signed_at: Option<i64>,
        candidates: Candidates,
        alternatives: Vec<Vec<u8>>,
    ) -> Presented<'a> {
        let proof = Proof::Signatures(candidates);
        Presented { signed_at, proof, content: [b""; CONTENT_PIECES_MAX], alternatives }
    }

    /// One signature `tag` over the raw body alone, no signed timestamp: the scheme of GitHub,
    /// Bitbucket, Shopify, WooCommerce, Typeform and Segment.
    pub(crate) fn body_tag(req: &'a Request, tag: Tag) -> Presented<'a> {
        let mut candidates = Candidates::new();
        candidates.offer(Some(tag));
        Presented::signed(None, candidates, [&req.body, b"", b"", b"", b""])
    }

    /// A shared token sent as is (no content is signed, no timestamp).
    pub(crate) fn token(token: &[u8]) -> Presented<'a> {
        let content = [b"" as &[u8]; CONTENT_PIECES_MAX];
        Presented {
            signed_at: None,
            proof: Proof::Token(sha256(token)),
            content,
            alternatives: Vec::new(),
        }
    }
}

/// The proof a delivery carries.
// One per request, on the stack for the duration of `verify`: boxing the candidates would
// allocate on the hot path to save stack bytes nobody needs.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Proof {
    /// MACs or signatures over the signed content.
    Signatures(Candidates),
    /// SHA-256 of the presented token.
    Token([u8; 32]),
    /// One HMAC-SHA256 tag per item, each over its own signed content (Adyen's notification
    /// items): a key matches only when it made every item's tag.
    Items(Vec<([u8; 32], Vec<u8>)>),
}

/// Which kind of key a candidate signature can be checked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// An HMAC tag (its length says which algorithm made it).
    Hmac,
    /// An Ed25519 signature (64 bytes).
    Ed25519,
    /// A DER-encoded ECDSA P-256 / SHA-256 signature (8..=72 bytes).
    EcdsaP256,
}

/// One decoded candidate signature.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tag {
    scheme: Scheme,
    len: usize,
    bytes: [u8; TAG_BYTES_MAX],
}

impl Tag {
    /// The tag's bytes.
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The first `SIGNATURES_PER_HEADER_MAX` signatures of the expected schemes found in a header,
/// decoded. Entries that do not decode are counted but can never match.
#[derive(Debug)]
pub(crate) struct Candidates {
    tags: [Tag; SIGNATURES_PER_HEADER_MAX],
    tags_len: usize,
    seen: usize,
}

impl Candidates {
    /// No candidates yet.
    pub(crate) fn new() -> Candidates {
        let empty = Tag { scheme: Scheme::Hmac, len: 0, bytes: [0; TAG_BYTES_MAX] };
        Candidates { tags: [empty; SIGNATURES_PER_HEADER_MAX], tags_len: 0, seen: 0 }
    }

    /// Records one entry of an expected scheme: its decoded tag, or `None` when it is not
    /// well formed. Entries after the first `SIGNATURES_PER_HEADER_MAX` are ignored.
    pub(crate) fn offer(&mut self, tag: Option<Tag>) {
        if self.seen == SIGNATURES_PER_HEADER_MAX {
            return;
        }
        self.seen += 1;
        if let Some(tag) = tag {
            self.tags[self.tags_len] = tag;
            self.tags_len += 1;
        }
    }

    /// Whether no entry of an expected scheme was found (the signature is missing).
    pub(crate) fn is_empty(&self) -> bool {
        self.seen == 0
    }

    fn of(&self, scheme: Scheme) -> impl Iterator<Item = &Tag> {
        self.tags[..self.tags_len].iter().filter(move |t| t.scheme == scheme)
    }

    /// Whether `mac` equals any HMAC candidate; every candidate of that length is compared in
    /// constant time (R2). Tag lengths are public (they follow from the algorithm).
    fn matches_mac(&self, mac: &[u8]) -> bool {
        let mut any = subtle::Choice::from(0);
        for candidate in self.of(Scheme::Hmac).filter(|t| t.len == mac.len()) {
            any |= candidate.as_slice().ct_eq(mac);
        }
        bool::from(any)
    }

    /// Whether any Ed25519 candidate is a valid signature of `message` by `public_key`.
    fn verified_by(&self, public_key: &[u8; 32], message: &[u8]) -> bool {
        let key = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public_key);
        self.of(Scheme::Ed25519).any(|sig| key.verify(message, sig.as_slice()).is_ok())
    }

    /// Whether any ECDSA candidate is a valid P-256/SHA-256 signature of `message` by the
    /// uncompressed point `public_key`.
    fn verified_by_ecdsa(&self, public_key: &[u8; 65], message: &[u8]) -> bool {
        let algorithm = &ring::signature::ECDSA_P256_SHA256_ASN1;
        let key = ring::signature::UnparsedPublicKey::new(algorithm, public_key);
        self.of(Scheme::EcdsaP256).any(|sig| key.verify(message, sig.as_slice()).is_ok())
    }

    /// Whether any HMAC candidate is `len` bytes long.
    fn has_len(&self, len: usize) -> bool {
        self.of(Scheme::Hmac).any(|t| t.len == len)
    }

    /// Whether any candidate is of `scheme`.
    fn has(&self, scheme: Scheme) -> bool {
        self.of(scheme).next().is_some()
    }
}

/// The value of header `name` when it occurs exactly once; `None` when absent or repeated (a
/// repeated signature header is ambiguous, so it counts as malformed).
pub(crate) fn unique_header<'a>(req: &'a Request, name: &'a str) -> Option<&'a [u8]> {
    let mut values = req.headers_all(name);
    match (values.next(), values.next()) {
        (Some(value), None) => Some(value),
        _ => None,
    }
}

/// Parses a signed timestamp written as 1..=19 ASCII digits (integer Unix seconds, no sign, no
/// spaces); `None` when malformed or beyond `i64`.
pub(crate) fn parse_unix_seconds(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Decodes a hex tag (either case) of exactly `bytes` bytes; `None` for any other shape.
pub(crate) fn decode_hex_tag(text: &[u8], scheme: Scheme, bytes: usize) -> Option<Tag> {
    if bytes > TAG_BYTES_MAX || text.len() != 2 * bytes {
        return None;
    }
    let mut tag = Tag { scheme, len: bytes, bytes: [0; TAG_BYTES_MAX] };
    hex::decode_to_slice(text, &mut tag.bytes[..bytes]).ok()?;
    Some(tag)
}

/// Decodes a padded standard-alphabet base64 tag of exactly `bytes` bytes; `None` otherwise.
pub(crate) fn decode_base64_tag(text: &[u8], scheme: Scheme, bytes: usize) -> Option<Tag> {
    if bytes > TAG_BYTES_MAX || text.len() > TAG_BASE64_CHARS_MAX {
        return None;
    }
    let mut decoded = [0; TAG_BASE64_CHARS_MAX];
    let len = base64::engine::general_purpose::STANDARD.decode_slice(text, &mut decoded).ok()?;
    if len != bytes {
        return None;
    }
    let mut tag = Tag { scheme, len, bytes: [0; TAG_BYTES_MAX] };
    tag.bytes[..len].copy_from_slice(&decoded[..len]);
    Some(tag)
}

/// Decodes a padded standard-alphabet base64 DER signature of 8..=72 bytes (ECDSA P-256);
/// `None` otherwise (ring checks the DER structure itself).
pub(crate) fn decode_base64_der(text: &[u8]) -> Option<Tag> {
    if text.len() > TAG_BASE64_CHARS_MAX {
        return None;
    }
    let mut decoded = [0; TAG_BASE64_CHARS_MAX];
    let len = base64::engine::general_purpose::STANDARD.decode_slice(text, &mut decoded).ok()?;
    if !(8..=TAG_BYTES_MAX).contains(&len) {
        return None;
    }
    let mut tag = Tag { scheme: Scheme::EcdsaP256, len, bytes: [0; TAG_BYTES_MAX] };
    tag.bytes[..len].copy_from_slice(&decoded[..len]);
    Some(tag)
}

/// SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Index of the first active secret whose key proves the presented signature or token.
fn matching_secret(
    secrets: &[Secret],
    presented: &Presented<'_>,
    now: i64,
) -> Result<usize, Reject> {
    // The content joined into one buffer, made once and only for public-key schemes.
    let mut message: Option<Vec<u8>> = None;
    for (index, secret) in secrets.iter().enumerate() {
        if !secret.active_at(now) {
            continue;
        }
        let matched = match (&secret.key, &presented.proof) {
            (Key::Hmac(key), Proof::Signatures(candidates)) => {
                hmac_matches(key, candidates, presented)
            }
            (Key::HmacSha1Sha256 { sha1, sha256 }, Proof::Signatures(candidates)) => {
                // Only the key whose tag length a candidate has is computed.
                [sha1, sha256].into_iter().any(|key| {
                    candidates.has_len(key.algorithm().digest_algorithm().output_len())
                        && hmac_matches(key, candidates, presented)
                })
            }
            (Key::Ed25519(public_key), Proof::Signatures(candidates)) => {
                candidates.has(Scheme::Ed25519)
                    && candidates.verified_by(
                        public_key,
                        message.get_or_insert_with(|| presented.content.concat()),
                    )
            }
            (Key::EcdsaP256(public_key), Proof::Signatures(candidates)) => {
                candidates.has(Scheme::EcdsaP256)
                    && candidates.verified_by_ecdsa(
                        public_key,
                        message.get_or_insert_with(|| presented.content.concat()),
                    )
            }
            (Key::Token(digest), Proof::Token(presented)) => bool::from(digest.ct_eq(presented)),
            (Key::Hmac(key), Proof::Items(items)) => {
                key.algorithm() == ring::hmac::HMAC_SHA256
                    && !items.is_empty()
                    && items
                        .iter()
                        .all(|(tag, content)| ring::hmac::verify(key, content, tag).is_ok())
            }
            (Key::Token(_), Proof::Signatures(_) | Proof::Items(_))
            | (Key::Ed25519(_) | Key::EcdsaP256(_) | Key::HmacSha1Sha256 { .. }, Proof::Items(_))
            | (
                Key::Hmac(_) | Key::HmacSha1Sha256 { .. } | Key::Ed25519(_) | Key::EcdsaP256(_),
                Proof::Token(_),
            ) => false,
        };
        if matched {
            return Ok(index);
        }
    }
    Err(Reject::SignatureInvalid)
}

/// Whether `key`'s HMAC of the presented content (its pieces, or any one of its alternatives)
/// equals an HMAC candidate.
fn hmac_matches(key: &ring::hmac::Key, candidates: &Candidates, presented: &Presented<'_>) -> bool {
    if !candidates.has(Scheme::Hmac) {
        return false;
    }
    if presented.alternatives.is_empty() {
        return candidates.matches_mac(sign(key, &presented.content).as_ref());
    }
    presented
        .alternatives
        .iter()
        .any(|content| candidates.matches_mac(sign(key, &[content]).as_ref()))
}

/// HMAC of the signed content, fed piece by piece (the body is never copied).
fn sign(key: &ring::hmac::Key, content: &[&[u8]]) -> ring::hmac::Tag {
    let mut context = ring::hmac::Context::with_key(key);
    for piece in content {
        context.update(piece);
    }
    context.sign()
}

/// Checks the signed timestamp against the source's replay window (R6); no timestamp, no check.
fn check_fresh(signed_at: Option<i64>, source: &SourceConfig, now: i64) -> Result<(), Reject> {
    let Some(signed_at) = signed_at else {
        return Ok(());
    };
    let age_s = now.saturating_sub(signed_at);
    let lead_s = signed_at.saturating_sub(now);
    if age_s > whole_seconds(source.tolerance) || lead_s > whole_seconds(source.future_skew) {
        return Err(Reject::Stale);
    }
    Ok(())
}

/// A duration in whole seconds (sub-second parts dropped), saturating at `i64::MAX`.
fn whole_seconds(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use base64::Engine as _;

    use super::{verify, Reject, Verified};
    use crate::config::{Secret, SourceConfig};
    use crate::http::Request;
    use crate::provider::{key, Provider};

    /// The signed timestamp of the Standard Webhooks spec vector, reused as "now" throughout.
    const NOW: i64 = 1_614_265_330;
    /// `tolerance` of every test source, in seconds.
    const TOLERANCE_S: i64 = 300;
    /// `future_skew` of every test source, in seconds.
    const SKEW_S: i64 = 60;

    const GH_SECRET: &str = "It's a Secret to Everybody";
    const GH_BODY: &[u8] = b"Hello, World!";
    const GH_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SW_TS: &str = "1614265330";
    const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SW_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    const ST_SECRET: &str = "whsec_test_secret";
    const ST_BODY: &[u8] = br#"{"id":"evt_1","type":"invoice.paid"}"#;
    /// HMAC-SHA256(`whsec_test_secret`, `1614265330.` + `ST_BODY`), computed outside Rust
    /// (Python's `hmac` module) as an independent reference.
    const ST_V1: &str = "1c85623cfb52e27f927d9e4eac778cbe54c3d4f90b17edce4689e027779c4380";
    const OTHER_V1: &str = "00000000000000000000000000000000000000000000000000000000000000ff";

    /// A key: (secret as the dashboard shows it, not_before, not_after).
    type Key<'a> = (&'a str, Option<i64>, Option<i64>);

    fn source(provider: Provider, keys: &[Key<'_>]) -> SourceConfig {
        let secrets = keys
            .iter()
            .enumerate()
            .map(|(i, &(secret, not_before, not_after))| Secret {
                id: format!("k{i}"),
                key: key(provider, secret).expect("test secrets are well formed"),
                not_before,
                not_after,
            })
            .collect();
        SourceConfig {
            id: "src".to_owned(),
            tenant: "acme".to_owned(),
            provider,
            tolerance: Duration::from_secs(TOLERANCE_S as u64),
            future_skew: Duration::from_secs(SKEW_S as u64),
            event_types: None,
            secrets,
            destination: 0,
            ack_deadline: Duration::from_secs(10),
            ordering_key: None,
            public_url: None,
            scheme: Default::default(),
        }
    }

    fn request(headers: &[(&str, &str)], body: &[u8]) -> Request {
        Request {
            method: "POST".to_owned(),
            target: "/webhooks/src".to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
                .collect(),
            body: body.to_vec(),
            keep_alive: true,
        }
    }

    /// What `verify` answers.
    type Outcome = Result<Verified, Reject>;

    /// One row of a table: name, headers, body, now, expected outcome.
    type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [u8], i64, Outcome);

    /// A row with one owned header: name, header, body, expected outcome.
    type OneHeaderRow<'a> = (&'a str, [(&'a str, String); 1], &'a [u8], Outcome);

    /// Verifies every row against a source of `provider` holding `keys`.
    fn check(provider: Provider, keys: &[Key<'_>], rows: &[Row<'_>]) {
        let source = source(provider, keys);
        for &(name, headers, body, now, expect) in rows {
            let got = verify(&source, &request(headers, body), now);
            assert_eq!(got, expect, "{provider:?}: `{name}`");
        }
    }

    fn ok(secret_index: usize, signed_at: Option<i64>) -> Outcome {
        Ok(Verified { secret_index, signed_at })
    }

    /// Stripe's `v1` computed here with ring over a concatenated copy (test only).
    fn stripe_v1(secret: &str, t: &str, body: &[u8]) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        let content = [t.as_bytes(), b".", body].concat();
        hex::encode(ring::hmac::sign(&key, &content))
    }

    fn stripe_header(t: i64, v1s: &[&str]) -> String {
        let mut header = format!("t={t}");
        for v1 in v1s {
            header.push_str(",v1=");
            header.push_str(v1);
        }
        header
    }

    const INVALID: Outcome = Err(Reject::SignatureInvalid);
    const MISSING: Outcome = Err(Reject::SignatureMissing);
    const STALE: Outcome = Err(Reject::Stale);

    #[test]
    fn github() {
        let sig = ("x-hub-signature-256", GH_SIG);
        let upper = GH_SIG.to_uppercase().replacen("SHA256=", "sha256=", 1);
        let sha1 = ("x-hub-signature", "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59");
        fn other(value: &str) -> [(&str, &str); 1] {
            [("x-hub-signature-256", value)]
        }
        check(
            Provider::Github,
            &[(GH_SECRET, None, None)],
            &[
                ("documented example", &[sig], GH_BODY, NOW, ok(0, None)),
                ("never stale: far future", &[sig], GH_BODY, i64::MAX, ok(0, None)),
                ("never stale: epoch", &[sig], GH_BODY, 0, ok(0, None)),
                ("upper-case hex", &other(&upper), GH_BODY, NOW, ok(0, None)),
                ("tampered body", &[sig], b"Hello, World?", NOW, INVALID),
                ("missing header", &[], GH_BODY, NOW, MISSING),
                ("no SHA-1 fallback", &[sha1], GH_BODY, NOW, MISSING),
                ("no prefix", &other(&GH_SIG[7..]), GH_BODY, NOW, MISSING),
                ("short hex", &other(&GH_SIG[..70]), GH_BODY, NOW, MISSING),
                ("non-hex", &other("sha256=zz"), GH_BODY, NOW, MISSING),
                ("repeated header", &[sig, sig], GH_BODY, NOW, MISSING),
            ],
        );
        check(
            Provider::Github,
            &[("not it", None, None)],
            &[("wrong secret", &[sig], GH_BODY, NOW, INVALID)],
        );
    }

    #[test]
    fn standard() {
        let id = ("webhook-id", SW_ID);
        let ts = ("webhook-timestamp", SW_TS);
        fn sig(value: &str) -> (&str, &str) {
            ("webhook-signature", value)
        }
        let several = format!("v1a,AAAA v2,xyz v1,bm90IGl0 {SW_SIG}");
        let v1a = "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let fresh = ok(0, Some(NOW));
        let good = [id, ts, sig(SW_SIG)];
        let tampered: &[u8] = br#"{"test": 2432232315}"#;
        let other_id = [("webhook-id", "msg_other"), ts, sig(SW_SIG)];
        let other_ts = [id, ("webhook-timestamp", "1614265331"), sig(SW_SIG)];
        let fraction_ts = [id, ("webhook-timestamp", "1614265330.0"), sig(SW_SIG)];
        let negative_ts = [id, ("webhook-timestamp", "-1"), sig(SW_SIG)];
        check(
            Provider::Standard,
            &[(SW_SECRET, None, None)],
            &[
                ("spec vector", &good, SW_BODY, NOW, fresh),
                ("v1 among others", &[id, ts, sig(&several)], SW_BODY, NOW, fresh),
                ("tampered body", &good, tampered, NOW, INVALID),
                ("id is signed", &other_id, SW_BODY, NOW, INVALID),
                ("timestamp is signed", &other_ts, SW_BODY, NOW, INVALID),
                ("v1 not base64", &[id, ts, sig("v1,***")], SW_BODY, NOW, INVALID),
                ("missing id", &[ts, sig(SW_SIG)], SW_BODY, NOW, MISSING),
                ("missing timestamp", &[id, sig(SW_SIG)], SW_BODY, NOW, MISSING),
                ("missing signature", &[id, ts], SW_BODY, NOW, MISSING),
                ("empty id", &[("webhook-id", ""), ts, sig(SW_SIG)], SW_BODY, NOW, MISSING),
                ("timestamp not integer", &fraction_ts, SW_BODY, NOW, MISSING),
                ("negative timestamp", &negative_ts, SW_BODY, NOW, MISSING),
                ("v1a of the wrong length", &[id, ts, sig(v1a)], SW_BODY, NOW, INVALID),
                ("age = tolerance", &good, SW_BODY, NOW + TOLERANCE_S, fresh),
                ("age = tolerance + 1", &good, SW_BODY, NOW + TOLERANCE_S + 1, STALE),
                ("lead = future_skew", &good, SW_BODY, NOW - SKEW_S, fresh),
                ("lead = future_skew + 1", &good, SW_BODY, NOW - SKEW_S - 1, STALE),
            ],
        );
        check(
            Provider::Standard,
            &[("whsec_AAAAAAAA", None, None)],
            &[("wrong secret", &good, SW_BODY, NOW, INVALID)],
        );
    }

    #[test]
    fn stripe() {
        assert_eq!(stripe_v1(ST_SECRET, "1614265330", ST_BODY), ST_V1, "ring agrees with Python");
        fn sig(value: &str) -> [(&str, &str); 1] {
            [("stripe-signature", value)]
        }
        let good = stripe_header(NOW, &[ST_V1]);
        let second = stripe_header(NOW, &[OTHER_V1, ST_V1]);
        let garbage_first = stripe_header(NOW, &["xyz", ST_V1]);
        let v0_only = format!("t={NOW},v0={ST_V1}");
        let unknown_scheme = format!("t={NOW},v1={OTHER_V1},v9={ST_V1}");
        let no_t = format!("v1={ST_V1}");
        let bad_t = format!("t=16142653x0,v1={ST_V1}");
        let two_t = format!("t={NOW},t={NOW},v1={ST_V1}");
        let no_v1 = format!("t={NOW}");
        let zero_t = format!("t=0{NOW},v1={}", stripe_v1(ST_SECRET, "01614265330", ST_BODY));
        let moved_t = stripe_header(NOW + 1, &[ST_V1]);
        let at = |t: i64| stripe_header(t, &[&stripe_v1(ST_SECRET, &t.to_string(), ST_BODY)]);
        let (old, older) = (at(NOW - TOLERANCE_S), at(NOW - TOLERANCE_S - 1));
        let (ahead, further) = (at(NOW + SKEW_S), at(NOW + SKEW_S + 1));
        let tampered: &[u8] = br#"{"id":"evt_2","type":"invoice.paid"}"#;
        let fresh = ok(0, Some(NOW));
        check(
            Provider::Stripe,
            &[(ST_SECRET, None, None)],
            &[
                ("reference vector", &sig(&good), ST_BODY, NOW, fresh),
                ("only the second v1 matches", &sig(&second), ST_BODY, NOW, fresh),
                ("malformed v1 is just non-matching", &sig(&garbage_first), ST_BODY, NOW, fresh),
                ("t text signed as written", &sig(&zero_t), ST_BODY, NOW, fresh),
                ("tampered body", &sig(&good), tampered, NOW, INVALID),
                ("t is signed", &sig(&moved_t), ST_BODY, NOW, INVALID),
                ("unknown scheme ignored", &sig(&unknown_scheme), ST_BODY, NOW, INVALID),
                ("v0 only: no downgrade", &sig(&v0_only), ST_BODY, NOW, MISSING),
                ("no t", &sig(&no_t), ST_BODY, NOW, MISSING),
                ("t not integer", &sig(&bad_t), ST_BODY, NOW, MISSING),
                ("t repeated", &sig(&two_t), ST_BODY, NOW, MISSING),
                ("no v1", &sig(&no_v1), ST_BODY, NOW, MISSING),
                ("empty header", &sig(""), ST_BODY, NOW, MISSING),
                ("missing header", &[], ST_BODY, NOW, MISSING),
                ("repeated header", &[sig(&good)[0], sig(&good)[0]], ST_BODY, NOW, MISSING),
                ("age = tolerance", &sig(&old), ST_BODY, NOW, ok(0, Some(NOW - TOLERANCE_S))),
                ("age = tolerance + 1", &sig(&older), ST_BODY, NOW, STALE),
                ("lead = future_skew", &sig(&ahead), ST_BODY, NOW, ok(0, Some(NOW + SKEW_S))),
                ("lead = future_skew + 1", &sig(&further), ST_BODY, NOW, STALE),
            ],
        );
        check(
            Provider::Stripe,
            &[("whsec_other", None, None)],
            &[("wrong secret", &sig(&good), ST_BODY, NOW, INVALID)],
        );
    }

    /// Stale is decided only after a signature matched: a forged old request is `invalid`.
    #[test]
    fn freshness_only_after_authenticity() {
        let old = stripe_header(NOW - 10 * TOLERANCE_S, &[OTHER_V1]);
        check(
            Provider::Stripe,
            &[(ST_SECRET, None, None)],
            &[("forged and old", &[("stripe-signature", &old)], ST_BODY, NOW, INVALID)],
        );
    }

    /// Rotation (R3): every active key is tried, the matching index is reported, a key outside
    /// its activity window is never tried; `not_before` is inclusive, `not_after` exclusive.
    #[test]
    fn rotation() {
        let header = stripe_header(NOW, &[ST_V1]);
        let headers = [("stripe-signature", header.as_str())];
        let right = |not_before, not_after| (ST_SECRET, not_before, not_after);
        let wrong = ("whsec_old", None, None);
        let cases: &[(&str, &[Key<'_>], Outcome)] = &[
            ("second key matches", &[wrong, right(None, None)], ok(1, Some(NOW))),
            ("first of two matching", &[right(None, None), right(None, None)], ok(0, Some(NOW))),
            ("retired key not used", &[right(None, Some(NOW - 1))], INVALID),
            ("retired skipped", &[right(None, Some(NOW - 1)), right(None, None)], ok(1, Some(NOW))),
            ("not_after = now: retired", &[right(None, Some(NOW)), wrong], INVALID),
            ("not_after = now + 1: active", &[wrong, right(None, Some(NOW + 1))], ok(1, Some(NOW))),
            ("not_before = now: active", &[right(Some(NOW), None)], ok(0, Some(NOW))),
            ("not_before = now + 1: not yet", &[right(Some(NOW + 1), None)], INVALID),
            ("no key at all", &[], INVALID),
        ];
        for &(name, keys, expect) in cases {
            check(Provider::Stripe, keys, &[(name, &headers, ST_BODY, NOW, expect)]);
        }
    }

    #[test]
    fn codes() {
        assert_eq!(Reject::SignatureMissing.code(), "signature_missing");
        assert_eq!(Reject::SignatureInvalid.code(), "signature_invalid");
        assert_eq!(Reject::Stale.code(), "stale");
    }

    /// More than `SIGNATURES_PER_HEADER_MAX` entries: only the first ones are read.
    #[test]
    fn candidates_are_bounded() {
        let mut v1s = vec![OTHER_V1; crate::limits::SIGNATURES_PER_HEADER_MAX];
        let last_read = stripe_header(NOW, &[&v1s[..], &[ST_V1]].concat()[1..]);
        v1s.push(ST_V1);
        let beyond = stripe_header(NOW, &v1s);
        check(
            Provider::Stripe,
            &[(ST_SECRET, None, None)],
            &[
                (
                    "match is the last entry read",
                    &[("stripe-signature", &last_read)],
                    ST_BODY,
                    NOW,
                    ok(0, Some(NOW)),
                ),
                ("match beyond the bound", &[("stripe-signature", &beyond)], ST_BODY, NOW, INVALID),
            ],
        );
    }

    /// An Ed25519 key pair from a fixed seed (test only) and its `whpk_` public key.
    fn ed25519(seed: u8) -> (ring::signature::Ed25519KeyPair, String) {
        use ring::signature::KeyPair as _;
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&[seed; 32])
            .expect("a 32-byte seed is valid");
        let public = base64::engine::general_purpose::STANDARD.encode(pair.public_key().as_ref());
        (pair, format!("whpk_{public}"))
    }

    /// `v1a,<base64 Ed25519 signature over "{id}.{ts}.{body}">`.
    fn v1a(pair: &ring::signature::Ed25519KeyPair, id: &str, ts: &str, body: &[u8]) -> String {
        let message = [id.as_bytes(), b".", ts.as_bytes(), b".", body].concat();
        let sig = pair.sign(&message);
        format!("v1a,{}", base64::engine::general_purpose::STANDARD.encode(sig.as_ref()))
    }

    /// Standard Webhooks v1a: Ed25519 with a `whpk_` public key; mixed with v1 entries and
    /// with HMAC keys of the same source during a move from symmetric to asymmetric keys.
    #[test]
    fn standard_v1a() {
        let (pair, whpk) = ed25519(7);
        let (_, other_whpk) = ed25519(8);
        let good_sig = v1a(&pair, SW_ID, SW_TS, SW_BODY);
        let id = ("webhook-id", SW_ID);
        let ts = ("webhook-timestamp", SW_TS);
        let sig =
            |value: &str| [id, ts, ("webhook-signature", value)].map(|(n, v)| (n, v.to_owned()));
        let good = sig(&good_sig);
        let mixed = sig(&format!("v1,bm90IGl0 v2,xyz {good_sig}"));
        let only_v1 = sig(SW_SIG);
        let unknown_only = sig("v2,AAAA v1b,AAAA");
        let tampered: &[u8] = br#"{"test": 2432232315}"#;
        let source_of = |keys: &[Key<'_>]| source(Provider::Standard, keys);
        let run = |keys: &[Key<'_>], h: &[(&str, String)], body: &[u8], now: i64| {
            let h: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
            verify(&source_of(keys), &request(&h, body), now)
        };
        let pk = (whpk.as_str(), None, None);
        let fresh = ok(0, Some(NOW));
        assert_eq!(run(&[pk], &good, SW_BODY, NOW), fresh, "valid v1a");
        assert_eq!(run(&[pk], &mixed, SW_BODY, NOW), fresh, "v1a after other entries");
        assert_eq!(run(&[pk], &good, tampered, NOW), INVALID, "tampered body");
        assert_eq!(run(&[(&other_whpk, None, None)], &good, SW_BODY, NOW), INVALID, "other key");
        assert_eq!(run(&[pk], &only_v1, SW_BODY, NOW), INVALID, "a v1 tag is no v1a proof");
        assert_eq!(run(&[pk], &unknown_only, SW_BODY, NOW), MISSING, "unknown versions only");
        assert_eq!(run(&[pk], &good, SW_BODY, NOW + TOLERANCE_S + 1), STALE, "stale");
        assert_eq!(run(&[pk], &good, SW_BODY, NOW - SKEW_S - 1), STALE, "too far ahead");
        assert_eq!(run(&[pk], &good, SW_BODY, NOW - SKEW_S), fresh, "lead = future_skew");
        // Rotation from whsec_ to whpk_: both kinds in one source, each proves its own entry.
        let both = sig(&format!("{SW_SIG} {good_sig}"));
        let hmac_then_pk = [(SW_SECRET, None, None), pk];
        let wrong_hmac_then_pk = [("whsec_AAAAAAAA", None, None), pk];
        assert_eq!(run(&hmac_then_pk, &both, SW_BODY, NOW), ok(0, Some(NOW)), "v1 key first");
        assert_eq!(run(&wrong_hmac_then_pk, &both, SW_BODY, NOW), ok(1, Some(NOW)), "v1a key");
        assert_eq!(run(&[("whsec_AAAAAAAA", None, None)], &good, SW_BODY, NOW), INVALID);
    }

    /// Svix: the Svix docs' example (the same message and secret as the Standard Webhooks
    /// spec) under `svix-*` names; `webhook-*` names are not Svix's.
    #[test]
    fn svix() {
        let good = [("svix-id", SW_ID), ("svix-timestamp", SW_TS), ("svix-signature", SW_SIG)];
        let standard_names =
            [("webhook-id", SW_ID), ("webhook-timestamp", SW_TS), ("webhook-signature", SW_SIG)];
        let rotated_sig = format!("v1,Zm9yZ2VkIHRhZyBmcm9tIGFub3RoZXIga2V5ISEhISE= {SW_SIG}");
        let rotated =
            [("svix-id", SW_ID), ("svix-timestamp", SW_TS), ("svix-signature", &rotated_sig)];
        let fresh = ok(0, Some(NOW));
        check(
            Provider::Svix,
            &[(SW_SECRET, None, None)],
            &[
                ("docs example", &good, SW_BODY, NOW, fresh),
                ("second of two signatures", &rotated, SW_BODY, NOW, fresh),
                ("tampered body", &good, br#"{"test": 2432232315}"#, NOW, INVALID),
                ("webhook-* names", &standard_names, SW_BODY, NOW, MISSING),
                ("age = tolerance + 1", &good, SW_BODY, NOW + TOLERANCE_S + 1, STALE),
                ("lead = future_skew + 1", &good, SW_BODY, NOW - SKEW_S - 1, STALE),
            ],
        );
        check(
            Provider::Svix,
            &[("whsec_AAAAAAAA", None, None)],
            &[("wrong secret", &good, SW_BODY, NOW, INVALID)],
        );
    }

    /// Shopify: base64 HMAC-SHA256 over the body, keyed by the client secret as written.
    #[test]
    fn shopify() {
        const SECRET: &str = "shpss_hookwall_test_secret";
        let body: &[u8] = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
        let tag = ring::hmac::sign(&key, body);
        let b64 = base64::engine::general_purpose::STANDARD.encode(tag.as_ref());
        let hex = hex::encode(tag.as_ref());
        let sig = |v: &str| [("x-shopify-hmac-sha256", v.to_owned())];
        let rows: &[OneHeaderRow<'_>] = &[
            ("valid", sig(&b64), body, ok(0, None)),
            ("tampered body", sig(&b64), b"{}", INVALID),
            ("hex is not Shopify's encoding", sig(&hex), body, MISSING),
            ("unpadded base64", sig(b64.trim_end_matches('=')), body, MISSING),
            ("empty", sig(""), body, MISSING),
        ];
        let shop = source(Provider::Shopify, &[(SECRET, None, None)]);
        for (name, headers, body, expect) in rows {
            let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert_eq!(verify(&shop, &request(&h, body), NOW), *expect, "shopify: {name}");
            assert_eq!(verify(&shop, &request(&h, body), i64::MAX), *expect, "never stale");
        }
        let twice = [("x-shopify-hmac-sha256", b64.as_str()); 2];
        assert_eq!(verify(&shop, &request(&twice, body), NOW), MISSING, "repeated header");
        let other = source(Provider::Shopify, &[("another", None, None)]);
        let one = [("x-shopify-hmac-sha256", b64.as_str())];
        assert_eq!(verify(&other, &request(&one, body), NOW), INVALID, "wrong secret");
    }

    /// GitLab: the token as sent, compared by digest; any other token, none, or two are refused.
    #[test]
    fn gitlab() {
        const TOKEN: &str = "glpat-like hookwall token";
        let body: &[u8] = br#"{"object_kind":"push"}"#;
        let tok = |v: &'static str| [("x-gitlab-token", v)];
        check(
            Provider::Gitlab,
            &[("old token", None, None), (TOKEN, None, None)],
            &[
                ("second key is the token", &tok(TOKEN), body, NOW, ok(1, None)),
                ("never stale", &tok(TOKEN), body, i64::MAX, ok(1, None)),
                ("prefix of the token", &tok("glpat-like"), body, NOW, INVALID),
                ("token plus a byte", &tok("glpat-like hookwall token!"), body, NOW, INVALID),
                ("empty", &tok(""), body, NOW, MISSING),
                ("missing", &[], body, NOW, MISSING),
                ("repeated", &[tok(TOKEN)[0], tok(TOKEN)[0]], body, NOW, MISSING),
            ],
        );
        check(
            Provider::Gitlab,
            &[(TOKEN, None, Some(NOW))],
            &[("retired token", &tok(TOKEN), body, NOW, INVALID)],
        );
    }

    /// The core takes any ring HMAC algorithm: a SHA-512 or SHA-1 key matches only a tag of
    /// its own length and value (no provider of this build uses them yet; the generic `hmac`
    /// and legacy schemes will).
    #[test]
    fn hmac_algorithms_by_tag_length() {
        use super::{decode_hex_tag, matching_secret, Candidates, Key, Presented, Scheme};
        let body: &[u8] = b"{}\r\n";
        for (algorithm, bytes) in [
            (ring::hmac::HMAC_SHA512, 64),
            (ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, 20),
            (ring::hmac::HMAC_SHA256, 32),
        ] {
            let key = ring::hmac::Key::new(algorithm, b"k");
            let good = hex::encode(ring::hmac::sign(&key, body));
            let secret = Secret {
                id: "k".to_owned(),
                key: Key::Hmac(key),
                not_before: None,
                not_after: None,
            };
            let mut candidates = Candidates::new();
            // A same-length wrong tag, a tag of another length, then the right one.
            candidates.offer(decode_hex_tag("00".repeat(bytes).as_bytes(), Scheme::Hmac, bytes));
            candidates.offer(decode_hex_tag(&[b'1'; 64], Scheme::Hmac, 32));
            candidates.offer(decode_hex_tag(good.as_bytes(), Scheme::Hmac, bytes));
            let presented = Presented::signed(None, candidates, [body, b"", b"", b"", b""]);
            assert_eq!(matching_secret(std::slice::from_ref(&secret), &presented, NOW), Ok(0));
            let mut only_wrong = Candidates::new();
            only_wrong.offer(decode_hex_tag("00".repeat(bytes).as_bytes(), Scheme::Hmac, bytes));
            let presented = Presented::signed(None, only_wrong, [body, b"", b"", b"", b""]);
            assert_eq!(matching_secret(&[secret], &presented, NOW), Err(Reject::SignatureInvalid));
        }
    }

    /// Slack: the example of Slack's "Verifying requests from Slack" (a slash-command form
    /// body), and the bounds of the replay window.
    #[test]
    fn slack() {
        const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
        const TS: &str = "1531420618";
        const BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        let t: i64 = TS.parse().expect("digits");
        let ts = ("x-slack-request-timestamp", TS);
        let good = [ts, ("x-slack-signature", SIG)];
        let v1 = [ts, ("x-slack-signature", &SIG.replacen("v0=", "v1=", 1))];
        let later = [("x-slack-request-timestamp", "1531420619"), ("x-slack-signature", SIG)];
        let fresh = ok(0, Some(t));
        check(
            Provider::Slack,
            &[("an older secret", None, None), (SECRET, None, None)],
            &[
                ("documented example", &good, BODY, t, ok(1, Some(t))),
                ("timestamp is signed", &later, BODY, t, INVALID),
                ("tampered body", &good, &BODY[1..], t, INVALID),
                ("no v1 scheme", &v1, BODY, t, MISSING),
                ("no timestamp", &[good[1]], BODY, t, MISSING),
                ("no signature", &[ts], BODY, t, MISSING),
                ("age = tolerance + 1", &good, BODY, t + TOLERANCE_S + 1, STALE),
                ("lead = future_skew + 1", &good, BODY, t - SKEW_S - 1, STALE),
            ],
        );
        check(
            Provider::Slack,
            &[(SECRET, None, None)],
            &[
                ("age = tolerance", &good, BODY, t + TOLERANCE_S, fresh),
                ("lead = future_skew", &good, BODY, t - SKEW_S, fresh),
            ],
        );
    }

    /// Typeform: `sha256=` + base64 HMAC-SHA256 over the body; no timestamp.
    #[test]
    fn typeform() {
        const SECRET: &str = "hookwall typeform secret";
        let body: &[u8] = br#"{"event_id":"01H8","event_type":"form_response"}"#;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
        let tag = ring::hmac::sign(&key, body);
        let good = format!("sha256={}", base64::engine::general_purpose::STANDARD.encode(tag));
        let hex = format!("sha256={}", hex::encode(tag));
        let bare = good.trim_start_matches("sha256=").to_owned();
        let sig = |v: &str| [("typeform-signature", v.to_owned())];
        let source = source(Provider::Typeform, &[("old", None, None), (SECRET, None, None)]);
        let rows: [OneHeaderRow<'_>; 5] = [
            ("valid, second key", sig(&good), body, ok(1, None)),
            ("tampered body", sig(&good), b"{}", INVALID),
            ("hex is not Typeform's encoding", sig(&hex), body, MISSING),
            ("no sha256= prefix", sig(&bare), body, MISSING),
            ("empty", sig(""), body, MISSING),
        ];
        for (name, headers, body, expect) in &rows {
            let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert_eq!(verify(&source, &request(&h, body), NOW), *expect, "typeform: {name}");
            assert_eq!(verify(&source, &request(&h, body), 0), *expect, "never stale: {name}");
        }
    }

    /// Paddle: `ts=…;h1=…[;h1=…]` over `"{ts}:{body}"`; several `h1` while rotating; the
    /// default tolerance is Paddle's 5 s.
    #[test]
    fn paddle() {
        const SECRET: &str = "pdl_ntfset_01hookwall_test_secret";
        let body: &[u8] = br#"{"event_id":"evt_01","event_type":"transaction.completed"}"#;
        let h1 = |secret: &str, ts: &str| {
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
            hex::encode(ring::hmac::sign(&key, &[ts.as_bytes(), b":", body].concat()))
        };
        let t = NOW.to_string();
        let good = format!("ts={t};h1={}", h1(SECRET, &t));
        let rotating = format!("ts={t};h1={};h1={}", h1("pdl_ntfset_old", &t), h1(SECRET, &t));
        let unknown = format!("ts={t};h2={};h1={}", h1(SECRET, &t), h1(SECRET, &t));
        let moved = format!("ts={};h1={}", NOW + 1, h1(SECRET, &t));
        let no_h1 = format!("ts={t};h2={}", h1(SECRET, &t));
        let two_ts = format!("ts={t};ts={t};h1={}", h1(SECRET, &t));
        let sig = |v: &str| [("paddle-signature", v.to_owned())];
        let src = source(Provider::Paddle, &[(SECRET, None, None)]);
        let fresh = ok(0, Some(NOW));
        let rows: [OneHeaderRow<'_>; 8] = [
            ("valid", sig(&good), body, fresh),
            ("second h1 matches", sig(&rotating), body, fresh),
            ("unknown key ignored", sig(&unknown), body, fresh),
            ("ts is signed", sig(&moved), body, INVALID),
            ("tampered body", sig(&good), b"{}", INVALID),
            ("no h1", sig(&no_h1), body, MISSING),
            ("ts repeated", sig(&two_ts), body, MISSING),
            ("empty", sig(""), body, MISSING),
        ];
        for (name, headers, body, expect) in &rows {
            let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert_eq!(verify(&src, &request(&h, body), NOW), *expect, "paddle: {name}");
        }
        assert_eq!(Provider::Paddle.default_tolerance(), Duration::from_secs(5));
    }

    /// Twitch EventSub: `sha256=` hex over `{id}{timestamp}{body}` with an RFC 3339 timestamp;
    /// Twitch's own 10-minute window is the default tolerance.
    #[test]
    fn twitch() {
        const SECRET: &str = "hookwall twitch secret 0123";
        const ID: &str = "e76c6bd4-55c9-4987-8304-da1588d8988b";
        const TS: &str = "2021-02-25T15:02:10.123456789Z"; // = NOW (1614265330) + 0.12 s
        let body: &[u8] = br#"{"subscription":{"type":"channel.follow"},"event":{}}"#;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
        let mac = |id: &str, ts: &str| {
            hex::encode(ring::hmac::sign(&key, &[id.as_bytes(), ts.as_bytes(), body].concat()))
        };
        let good_sig = format!("sha256={}", mac(ID, TS));
        let headers = |id: &'static str, ts: &'static str, sig: &str| {
            [
                ("twitch-eventsub-message-id", id.to_owned()),
                ("twitch-eventsub-message-timestamp", ts.to_owned()),
                ("twitch-eventsub-message-signature", sig.to_owned()),
            ]
        };
        let src = source(Provider::Twitch, &[(SECRET, None, None)]);
        let run = |h: &[(&str, String)], body: &[u8], now: i64| {
            let h: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
            verify(&src, &request(&h, body), now)
        };
        let fresh = ok(0, Some(NOW));
        let good = headers(ID, TS, &good_sig);
        assert_eq!(run(&good, body, NOW), fresh, "valid");
        assert_eq!(run(&good, b"{}", NOW), INVALID, "tampered body");
        assert_eq!(run(&headers("other-id", TS, &good_sig), body, NOW), INVALID, "id is signed");
        let other_ts = "2021-02-25T15:02:10.123456788Z";
        assert_eq!(run(&headers(ID, other_ts, &good_sig), body, NOW), INVALID, "ts is signed");
        let offset = "2021-02-25T16:02:10.123456789+01:00";
        assert_eq!(run(&headers(ID, offset, &good_sig), body, NOW), MISSING, "UTC Z only");
        let unix = "1614265330";
        assert_eq!(run(&headers(ID, unix, &good_sig), body, NOW), MISSING, "not RFC 3339");
        let bare = mac(ID, TS);
        assert_eq!(run(&headers(ID, TS, &bare), body, NOW), MISSING, "no sha256= prefix");
        assert_eq!(run(&headers("", TS, &good_sig), body, NOW), MISSING, "empty id");
        assert_eq!(run(&good, body, NOW + TOLERANCE_S + 1), STALE, "source tolerance");
        assert_eq!(run(&good, body, NOW - SKEW_S - 1), STALE, "too far ahead");
        assert_eq!(Provider::Twitch.default_tolerance(), Duration::from_secs(600));
    }

    /// Segment: hex HMAC-SHA1 over the body (a 20-byte tag; a SHA-256-length tag is refused).
    #[test]
    fn segment() {
        const SECRET: &str = "hookwall segment shared secret";
        let body: &[u8] = br#"{"messageId":"ajs-1","type":"track","event":"Signed Up"}"#;
        let key =
            ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, SECRET.as_bytes());
        let good = hex::encode(ring::hmac::sign(&key, body));
        let sha256 = hex::encode(ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes()),
            body,
        ));
        let sig = |v: &str| [("x-signature", v.to_owned())];
        let src = source(Provider::Segment, &[(SECRET, None, None)]);
        let rows: [OneHeaderRow<'_>; 5] = [
            ("valid", sig(&good), body, ok(0, None)),
            ("upper-case hex", sig(&good.to_uppercase()), body, ok(0, None)),
            ("tampered body", sig(&good), b"{}", INVALID),
            ("a SHA-256 tag", sig(&sha256), body, MISSING),
            ("sha1= prefix is not Segment's", sig(&format!("sha1={good}")), body, MISSING),
        ];
        for (name, headers, body, expect) in &rows {
            let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert_eq!(verify(&src, &request(&h, body), NOW), *expect, "segment: {name}");
        }
        let other = source(Provider::Segment, &[("another", None, None)]);
        let h = [("x-signature", good.as_str())];
        assert_eq!(verify(&other, &request(&h, body), NOW), INVALID, "wrong secret");
    }

    /// PagerDuty: `v1=<hex>` entries, comma-separated, over the body.
    #[test]
    fn pagerduty() {
        const SECRET: &str = "hookwall pagerduty secret";
        let body: &[u8] = br#"{"event":{"id":"01DEN","event_type":"incident.triggered"}}"#;
        let v1 = |secret: &str| {
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
            hex::encode(ring::hmac::sign(&key, body))
        };
        let good = format!("v1={}", v1(SECRET));
        let rotating = format!("v1={}, v1={}", v1("old"), v1(SECRET));
        let other_version = format!("v2={},v1={}", v1(SECRET), v1("old"));
        let sig = |v: &str| [("x-pagerduty-signature", v.to_owned())];
        let src = source(Provider::Pagerduty, &[(SECRET, None, None)]);
        let rows: [OneHeaderRow<'_>; 6] = [
            ("valid", sig(&good), body, ok(0, None)),
            ("second entry matches", sig(&rotating), body, ok(0, None)),
            ("v2 is not read", sig(&other_version), body, INVALID),
            ("tampered body", sig(&good), b"{}", INVALID),
            ("bare hex", sig(&v1(SECRET)), body, MISSING),
            ("empty", sig(""), body, MISSING),
        ];
        for (name, headers, body, expect) in &rows {
            let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert_eq!(verify(&src, &request(&h, body), NOW), *expect, "pagerduty: {name}");
        }
    }

    /// Twilio: the documented example ("Webhooks security": Auth Token `12345`), the port
    /// quirk, `bodySHA256`, and the malformed shapes.
    #[test]
    fn twilio() {
        use super::verify_signed_url;
        const URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
        const BODY: &[u8] = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234\
            &From=%2B12349013030&To=%2B18005551212";
        let src = source(Provider::Twilio, &[("old token", None, None), ("12345", None, None)]);
        let sig = |v: &str| [("x-twilio-signature", v.to_owned())];
        let run = |h: &[(&str, String)], body: &[u8], url: Option<&str>| {
            let h: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
            verify_signed_url(&src, &request(&h, body), url, NOW)
        };
        let good = sig("0/KCTR6DLpKmkAf8muzZqo1nDgQ=");
        assert_eq!(run(&good, BODY, Some(URL)), ok(1, None), "documented example");
        let with_port = "https://mycompany.com:443/myapp.php?foo=1&bar=2";
        assert_eq!(run(&good, BODY, Some(with_port)), ok(1, None), "port quirk");
        let http = "http://mycompany.com/myapp.php?foo=1&bar=2";
        assert_eq!(run(&good, BODY, Some(http)), INVALID, "https became http");
        assert_eq!(run(&good, &BODY[1..], Some(URL)), INVALID, "tampered body");
        let mut reordered = b"To=%2B18005551212&".to_vec();
        reordered.extend_from_slice(&BODY[..BODY.len() - b"&To=%2B18005551212".len()]);
        assert_eq!(run(&good, &reordered, Some(URL)), ok(1, None), "parameters are sorted");
        assert_eq!(run(&good, BODY, None), MISSING, "no Host, no URL");
        assert_eq!(run(&sig(""), BODY, Some(URL)), MISSING, "empty");
        let sha256_sized = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        assert_eq!(run(&sig(&sha256_sized), BODY, Some(URL)), MISSING, "not a SHA-1 tag");
        assert_eq!(run(&[], BODY, Some(URL)), MISSING, "unsigned");

        // JSON: the URL carries the body's hash and only the URL is signed.
        let json: &[u8] = br#"{"MessageSid":"SM1"}"#;
        let hash = hex::encode(super::sha256(json));
        let url = format!("https://h.example/t?bodySHA256={hash}");
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, b"12345");
        let b64 = base64::engine::general_purpose::STANDARD;
        let tag = b64.encode(ring::hmac::sign(&key, url.as_bytes()));
        assert_eq!(run(&sig(&tag), json, Some(&url)), ok(1, None), "bodySHA256");
        assert_eq!(run(&sig(&tag), b"{}", Some(&url)), INVALID, "body does not match its hash");
        let twice = format!("{url}&bodySHA256={hash}");
        let tag2 = b64.encode(ring::hmac::sign(&key, twice.as_bytes()));
        assert_eq!(run(&sig(&tag2), json, Some(&twice)), INVALID, "bodySHA256 given twice");
    }

    /// Square: base64 HMAC-SHA256 over notification URL + body; another URL is another
    /// signature.
    #[test]
    fn square() {
        use super::verify_signed_url;
        const KEY: &str = "sq0wbk-unit-key";
        const URL: &str = "https://example.com/webhooks/square";
        let body: &[u8] = br#"{"type":"payment.updated","event_id":"e1"}"#;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, KEY.as_bytes());
        let b64 = base64::engine::general_purpose::STANDARD;
        let good = b64.encode(ring::hmac::sign(&key, &[URL.as_bytes(), body].concat()));
        let src = source(Provider::Square, &[(KEY, None, None)]);
        let run = |v: &str, body: &[u8], url: &str| {
            let h = [("x-square-hmacsha256-signature", v)];
            verify_signed_url(&src, &request(&h, body), Some(url), i64::MAX)
        };
        assert_eq!(run(&good, body, URL), ok(0, None), "valid, never stale");
        assert_eq!(run(&good, body, "https://example.com:443/webhooks/square"), INVALID, "port");
        assert_eq!(run(&good, b"{}", URL), INVALID, "tampered body");
        assert_eq!(run(&hex::encode([0u8; 32]), body, URL), MISSING, "hex is not Square's");
    }
}
