//! The second batch of issue 3's providers through the running server on both back ends:
//! discord, github with `legacy_sha1 = true`, the generic `hmac` scheme, linear, intercom,
//! postmark, calendly, coinbase, zoom and mailgun. Each signed delivery is `accepted` and
//! forwarded once byte for byte with the matched key id recorded; the provider's retry is a
//! `duplicate`; a changed body, a wrong key and a missing signature get the SPEC §3 answers;
//! for timestamped schemes a stale and a future timestamp are refused. Discord's PING and
//! Zoom's URL validation are answered and never admitted. Signing is `sign.rs`'s, written from
//! the providers' documentation independently of `src/`.

use crate::client::Response;
use crate::harness::{Fixture, Source, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};
use crate::sink::Script;

/// One source per provider, key `k1`.
fn sources() -> Vec<Source> {
    let one = |id: &'static str, provider: Provider, secret: &'static str| Source {
        id,
        tenant: "acme",
        provider,
        secrets: vec![("k1", secret)],
        event_types: Vec::new(),
    };
    vec![
        one("discord-a", Provider::Discord, sign::DISCORD_PUBLIC),
        one("github-sha1", Provider::GithubSha1, sign::GITHUB_SHA1_SECRET),
        one("hmac-a", Provider::Hmac, sign::HMAC_SECRET),
        one("linear-a", Provider::Linear, sign::LINEAR_SECRET),
        one("intercom-a", Provider::Intercom, sign::INTERCOM_SECRET),
        one("postmark-a", Provider::Postmark, sign::POSTMARK_CREDENTIALS),
        one("calendly-a", Provider::Calendly, sign::CALENDLY_SECRET),
        one("coinbase-a", Provider::Coinbase, sign::COINBASE_SECRET),
        one("zoom-a", Provider::Zoom, sign::ZOOM_SECRET),
        one("mailgun-a", Provider::Mailgun, sign::MAILGUN_SECRET),
    ]
}

#[track_caller]
fn expect(r: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(r.answer(), (status, code.to_owned()), "{what}: got {r}");
}

/// A wrong key of the same form as the source's.
fn wrong_key(provider: Provider) -> &'static str {
    match provider {
        // Any other public key: `sign::headers` then signs with another seed.
        Provider::Discord => "0000000000000000000000000000000000000000000000000000000000000000",
        Provider::Postmark => "hookwall:not-the-password",
        _ => sign::WRONG_SECRET,
    }
}

/// Whether the provider's payload has no id, so hookwall derives it from the body.
fn content_id(provider: Provider) -> bool {
    matches!(provider, Provider::Postmark | Provider::Calendly | Provider::Zoom)
}

/// The event id hookwall gives a delivery of `body` sent as event `id`.
fn event_id(provider: Provider, id: &str, body: &[u8]) -> String {
    if content_id(provider) {
        let digest = ring::digest::digest(&ring::digest::SHA256, body);
        format!("sha256:{}", hex::encode(digest.as_ref()))
    } else {
        id.to_owned()
    }
}

/// A delivery of event `id` signed by `secret` at `t`: `(headers, body)`.
fn delivery(
    provider: Provider,
    secret: &str,
    id: &str,
    t: i64,
    note: &str,
) -> (Vec<(String, String)>, Vec<u8>) {
    let body = sign::body_at(provider, secret, id, t, note);
    (sign::headers(provider, secret, id, t, &body), body)
}

/// The whole round for one source on a running fixture.
fn round(f: &Fixture, source: &Source) {
    let what = source.id;
    let provider = source.provider;
    let secret = source.secrets[0].1;
    let id = sign::unique_id("evt_more");
    let t = sign::now_unix_s();
    let (headers, body) = delivery(provider, secret, &id, t, "first copy");
    let key_id = event_id(provider, &id, &body);

    let r = f.hw.post(source.id, &headers, &body);
    expect(&r, 200, "accepted", &format!("{what}: first copy"));
    assert_eq!(r.id().as_deref(), Some(key_id.as_str()), "{what}: the answer names the event id");
    let fwd = f.sink.wait_for_key(&source.key(&key_id), 1, FORWARD_TIMEOUT);
    assert!(fwd[0].body == body, "{what}: forwarded byte for byte");
    let verification = fwd[0].header("hookwall-verification");
    assert!(
        verification.contains(provider.name()) && verification.contains("k1"),
        "{what}: Hookwall-Verification {verification:?} names provider and matched key"
    );

    // The provider's retry, signed again where the scheme signs a time; Coinbase's, Intercom's
    // and Mailgun's differ outside the event (intent fingerprint, SPEC §3).
    let retry = sign::retry_body(provider, secret, &id, (t, t + 5), "first copy");
    assert_eq!(
        retry != body,
        matches!(provider, Provider::Coinbase | Provider::Intercom | Provider::Mailgun),
        "{what}: the retry's bytes"
    );
    let retry_headers = sign::headers(provider, secret, &id, t + 5, &retry);
    let r = f.hw.post(source.id, &retry_headers, &retry);
    expect(&r, 200, "duplicate", &format!("{what}: retry"));

    // A changed body under the first delivery's headers.
    let changed = sign::body_at(provider, secret, &id, t, "second copy");
    let r = f.hw.post(source.id, &headers, &changed);
    match provider {
        // Mailgun's signature covers only timestamp and token: authentic, same event-data.id,
        // other bytes → conflict (SPEC §3), as for GitLab's token.
        Provider::Mailgun => expect(&r, 409, "conflict", &format!("{what}: changed body")),
        // Postmark's credentials bind no body and its id is the content: another event.
        Provider::Postmark => expect(&r, 200, "accepted", &format!("{what}: changed body")),
        _ => expect(&r, 401, "signature_invalid", &format!("{what}: changed body")),
    }

    let other = sign::unique_id("evt_more_wrong");
    let (wrong, wrong_body) = delivery(provider, wrong_key(provider), &other, t, "wrong key");
    expect(
        &f.hw.post(source.id, &wrong, &wrong_body),
        401,
        "signature_invalid",
        &format!("{what}: wrong key"),
    );

    // Unsigned: the signature header removed (Mailgun: the body without its signature).
    let (mut unsigned, signed_body) = delivery(provider, secret, &other, t, "unsigned");
    let unsigned_body = if provider == Provider::Mailgun {
        sign::body(provider, &other, "unsigned")
    } else {
        let name = crate::providers::providers_more_signature_header(provider);
        sign::remove_header(&mut unsigned, name);
        signed_body
    };
    expect(
        &f.hw.post(source.id, &unsigned, &unsigned_body),
        401,
        "signature_missing",
        &format!("{what}: unsigned"),
    );

    let timestamped = [
        Provider::Discord,
        Provider::Hmac,
        Provider::Linear,
        Provider::Calendly,
        Provider::Zoom,
        Provider::Mailgun,
    ];
    if timestamped.contains(&provider) {
        let now = sign::now_unix_s();
        // Past every default tolerance here (Linear 60 s, Calendly 180 s, others 300 s).
        let (h, b) = delivery(provider, secret, &other, now - 700, "stale");
        expect(&f.hw.post(source.id, &h, &b), 401, "stale", &format!("{what}: 700 s old"));
        let (h, b) = delivery(provider, secret, &other, now + 400, "ahead");
        expect(&f.hw.post(source.id, &h, &b), 401, "stale", &format!("{what}: 400 s ahead"));
    }
}

on_both_io! {
    /// Issue 3: discord, github legacy sha1, hmac, linear, intercom, postmark, calendly,
    /// coinbase, zoom and mailgun through the running server.
    fn providers_more_accepted_then_duplicate(io: Io) {
        let sources = sources();
        let f = Fixture::with(io, Script::always(200), |setup| {
            setup.sources.extend(sources.iter().cloned());
            setup.source_lines.push(("github-sha1", "legacy_sha1 = true".to_owned()));
            setup.source_lines.push(("hmac-a", sign::HMAC_TABLE.to_owned()));
        });
        for source in &sources {
            round(&f, source);
        }
        discord_ping(&f);
        zoom_url_validation(&f);

        f.flush_with_marker();
        let recorded = f.sink.recorded();
        for source in &sources {
            let prefix = format!("{}/{}/", source.tenant, source.id);
            let forwards =
                recorded.iter().filter(|r| r.header("idempotency-key").starts_with(&prefix)).count();
            // Postmark's changed body is another event (its id is the content).
            let expected = if source.provider == Provider::Postmark { 2 } else { 1 };
            assert_eq!(forwards, expected, "{}: forwards; duplicates and refusals none", source.id);
        }
    }
}

/// Discord's PING (`"type": 1`): answered `{"type":1}` only once it verified; never admitted.
fn discord_ping(f: &Fixture) {
    let body: &[u8] = br#"{"id":"1172346712233660001","application_id":"1","type":1,"version":1}"#;
    let now = sign::now_unix_s();
    let headers = sign::headers(Provider::Discord, sign::DISCORD_PUBLIC, "ping", now, body);
    let r = f.hw.post("discord-a", &headers, body);
    assert_eq!(r.status, 200, "PING: {r}");
    assert_eq!(r.header("content-type"), Some("application/json"), "PING: {r}");
    assert_eq!(r.json(), serde_json::json!({"type": 1}), "PONG");
    let forged = sign::headers(Provider::Discord, wrong_key(Provider::Discord), "ping", now, body);
    expect(&f.hw.post("discord-a", &forged, body), 401, "signature_invalid", "forged PING");
    let labels = [("source", "discord-a"), ("provider", "discord"), ("status", "challenge")];
    let name = "hookwall_ingress_requests_total";
    crate::metrics::wait_for_sample(&f.hw, name, &labels, 1.0, FORWARD_TIMEOUT);
    assert!(
        f.sink.for_key("acme/discord-a/1172346712233660001").is_empty(),
        "a PING is never forwarded"
    );
}

/// Zoom's `endpoint.url_validation`: `plainToken` and its HMAC-SHA256 by the secret token, hex.
fn zoom_url_validation(f: &Fixture) {
    let body: &[u8] = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    let now = sign::now_unix_s();
    let headers = sign::headers(Provider::Zoom, sign::ZOOM_SECRET, "validation", now, body);
    let r = f.hw.post("zoom-a", &headers, body);
    assert_eq!(r.status, 200, "validation: {r}");
    assert_eq!(r.header("content-type"), Some("application/json"), "validation: {r}");
    let encrypted =
        hex::encode(sign::hmac_sha256(sign::ZOOM_SECRET.as_bytes(), &[b"qgg8vlvZRS6UYooatFL8Aw"]));
    assert_eq!(
        r.json(),
        serde_json::json!({"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": encrypted}),
        "validation answer"
    );
    let forged = sign::headers(Provider::Zoom, sign::WRONG_SECRET, "validation", now, body);
    expect(&f.hw.post("zoom-a", &forged, body), 401, "signature_invalid", "forged validation");
    let labels = [("source", "zoom-a"), ("provider", "zoom"), ("status", "challenge")];
    let name = "hookwall_ingress_requests_total";
    crate::metrics::wait_for_sample(&f.hw, name, &labels, 1.0, FORWARD_TIMEOUT);
    let recorded = f.sink.recorded();
    assert!(
        recorded.iter().all(|r| !r.body.windows(23).any(|w| w == b"endpoint.url_validation")),
        "a validation is never forwarded"
    );
}
