//! Verification: authenticity (signature over the raw bytes, constant time, every active key of
//! the source tried, R1–R5) and freshness (signed timestamp inside the replay window, R6–R7).
//! Pure: takes the request, the source and `now`; does no IO and reads no clock.
//!
//! The phases, in order: the provider's file reads its headers into a [`Presented`] (candidate
//! tags, signed timestamp, the pieces of the signed content) or answers `signature_missing`;
//! every active key computes its HMAC once over those pieces and compares it with each candidate
//! in constant time (`signature_invalid`); only an authentic delivery has its signed timestamp
//! checked (`stale`). Nothing here allocates in proportion to the body.

use std::time::Duration;

use base64::Engine as _;
use subtle::ConstantTimeEq as _;

use crate::config::{Secret, SourceConfig};
use crate::http::Request;
use crate::limits::SIGNATURES_PER_HEADER_MAX;
use crate::provider::{github, standard, stripe, Provider};

/// Length of an HMAC-SHA256 tag in bytes; every candidate signature must decode to this.
pub(crate) const TAG_BYTES: usize = 32;

/// Most pieces a provider's signed content is made of (Standard Webhooks: `id`, `.`,
/// `timestamp`, `.`, body).
pub(crate) const CONTENT_PIECES_MAX: usize = 5;

/// Longest base64 text read for one candidate tag: 32 bytes take 44 characters with padding.
const TAG_BASE64_CHARS_MAX: usize = 44;

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
    let presented = presented(source.provider, req)?;
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
    /// The presented signatures of the expected scheme.
    pub(crate) candidates: Candidates,
    /// The signed content, in order; unused trailing pieces are empty.
    pub(crate) content: [&'a [u8]; CONTENT_PIECES_MAX],
}

/// The first `SIGNATURES_PER_HEADER_MAX` signatures of the expected scheme found in a header,
/// decoded. Entries that do not decode to a 32-byte tag are counted but can never match.
#[derive(Debug)]
pub(crate) struct Candidates {
    tags: [[u8; TAG_BYTES]; SIGNATURES_PER_HEADER_MAX],
    tags_len: usize,
    seen: usize,
}

impl Candidates {
    /// No candidates yet.
    pub(crate) fn new() -> Candidates {
        Candidates { tags: [[0; TAG_BYTES]; SIGNATURES_PER_HEADER_MAX], tags_len: 0, seen: 0 }
    }

    /// Records one entry of the expected scheme: its decoded tag, or `None` when it is not a
    /// well-formed tag. Entries after the first `SIGNATURES_PER_HEADER_MAX` are ignored.
    pub(crate) fn offer(&mut self, tag: Option<[u8; TAG_BYTES]>) {
        if self.seen == SIGNATURES_PER_HEADER_MAX {
            return;
        }
        self.seen += 1;
        if let Some(tag) = tag {
            self.tags[self.tags_len] = tag;
            self.tags_len += 1;
        }
    }

    /// Whether no entry of the expected scheme was found (the signature is missing).
    pub(crate) fn is_empty(&self) -> bool {
        self.seen == 0
    }

    /// Whether `tag` equals any candidate; every candidate is compared in constant time (R2).
    fn matches(&self, tag: &[u8]) -> bool {
        let mut any = subtle::Choice::from(0);
        for candidate in &self.tags[..self.tags_len] {
            any |= candidate.as_slice().ct_eq(tag);
        }
        bool::from(any)
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

/// Decodes a 64-character hex tag (either case); `None` for any other shape.
pub(crate) fn decode_hex_tag(text: &[u8]) -> Option<[u8; TAG_BYTES]> {
    let mut tag = [0; TAG_BYTES];
    hex::decode_to_slice(text, &mut tag).ok()?;
    Some(tag)
}

/// Decodes a padded standard-alphabet base64 tag; `None` unless it is exactly 32 bytes.
pub(crate) fn decode_base64_tag(text: &[u8]) -> Option<[u8; TAG_BYTES]> {
    if text.len() > TAG_BASE64_CHARS_MAX {
        return None;
    }
    let mut decoded = [0; TAG_BASE64_CHARS_MAX];
    let len = base64::engine::general_purpose::STANDARD.decode_slice(text, &mut decoded).ok()?;
    decoded[..len].try_into().ok()
}

/// Reads the provider's signature headers.
fn presented(provider: Provider, req: &Request) -> Result<Presented<'_>, Reject> {
    match provider {
        Provider::Stripe => stripe::presented(req),
        Provider::Github => github::presented(req),
        Provider::Standard => standard::presented(req),
    }
}

/// Index of the first active secret whose HMAC over the signed content equals a candidate.
fn matching_secret(
    secrets: &[Secret],
    presented: &Presented<'_>,
    now: i64,
) -> Result<usize, Reject> {
    for (index, secret) in secrets.iter().enumerate() {
        if !secret.active_at(now) {
            continue;
        }
        let tag = sign(&secret.key, &presented.content);
        if presented.candidates.matches(tag.as_ref()) {
            return Ok(index);
        }
    }
    Err(Reject::SignatureInvalid)
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

    use super::{verify, Reject, Verified};
    use crate::config::{Secret, SourceConfig};
    use crate::http::Request;
    use crate::provider::{hmac_key, Provider};

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
                key: hmac_key(provider, secret).expect("test secrets are well formed"),
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
                ("only v1a", &[id, ts, sig(v1a)], SW_BODY, NOW, MISSING),
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
}
