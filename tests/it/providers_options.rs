//! Provider options of issue 3 through the running server on both back ends: Twilio's
//! SharedKey signatures (HMAC-SHA256 named by `X-Twilio-Webhooks-Signature-Settings`) beside
//! Auth Token ones (HMAC-SHA1), Adyen's header HMAC (`hmac_signature = "header"`: Balance
//! Platform / Management API webhooks) and Mandrill's URL-check `HEAD`. Each signed delivery is
//! `accepted` and forwarded once with the matched key id, its resend a `duplicate`; changed,
//! wrongly keyed and unsigned deliveries get the SPEC §3 answers. Signing is `sign.rs`'s,
//! written from the providers' docs.

use crate::client::{self, Response};
use crate::harness::{Fixture, Source, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};
use crate::sink::Script;

#[track_caller]
fn expect(r: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(r.answer(), (status, code.to_owned()), "{what}: got {r}");
}

/// `twilio-sk`: the Auth Token and a SharedKey secret (moving to shared keys).
fn twilio_sk() -> Source {
    Source {
        id: "twilio-sk",
        tenant: "acme",
        provider: Provider::Twilio,
        secrets: vec![("auth", sign::TWILIO_TOKEN), ("shared", sign::TWILIO_SHARED_KEY)],
        event_types: Vec::new(),
    }
}

/// The URL hookwall rebuilds for a direct delivery to `twilio-sk`.
const TWILIO_URL: &str = "http://127.0.0.1/webhooks/twilio-sk";
const SETTINGS: &str = "X-Twilio-Webhooks-Signature-Settings";
const SHA256_SETTINGS: &str = "key=webhooks_sharedkey_0123456789abcdef,algorithm=HMAC_SHA256";

/// A Twilio SMS status callback form for message `sid`.
fn twilio_form(sid: &str) -> Vec<u8> {
    format!("MessageSid={sid}&MessageStatus=delivered&To=%2B15558675310&Body=Hi+%26+bye")
        .into_bytes()
}

/// The headers of a SharedKey (HMAC-SHA256) delivery of `body` as `id`, signed by `secret`.
fn shared_key_headers(secret: &str, id: &str, body: &[u8]) -> Vec<(String, String)> {
    vec![
        ("Content-Type".to_owned(), "application/x-www-form-urlencoded".to_owned()),
        ("X-Twilio-Signature".to_owned(), sign::twilio_signature_sha256(secret, TWILIO_URL, body)),
        (SETTINGS.to_owned(), SHA256_SETTINGS.to_owned()),
        ("I-Twilio-Idempotency-Token".to_owned(), id.to_owned()),
    ]
}

on_both_io! {
    /// Issue 3: Twilio's HMAC-SHA256 option. A SharedKey delivery is accepted (matched key
    /// `shared`) and its resend is a duplicate; an Auth Token (HMAC-SHA1) delivery on the same
    /// source is accepted (key `auth`); a changed body, another secret, a missing or SHA-1
    /// settings header and an unknown algorithm admit nothing.
    fn twilio_shared_key_sha256(io: Io) {
        let source = twilio_sk();
        let f = Fixture::with(io, Script::always(200), |setup| setup.sources.push(twilio_sk()));
        let id = sign::unique_id("idem-sk");
        let body = twilio_form(&sign::unique_id("SM"));
        let headers = shared_key_headers(sign::TWILIO_SHARED_KEY, &id, &body);
        expect(&f.hw.post(source.id, &headers, &body), 200, "accepted", "SharedKey SHA-256");
        let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
        assert!(fwd[0].body == body, "forwarded byte for byte");
        let verification = fwd[0].header("hookwall-verification");
        assert!(verification.contains("shared"), "matched key: {verification:?}");
        expect(&f.hw.post(source.id, &headers, &body), 200, "duplicate", "Twilio's retry");

        let sha1_id = sign::unique_id("idem-at");
        let sha1_body = twilio_form(&sign::unique_id("SM"));
        let sha1 =
            sign::url_headers(Provider::Twilio, sign::TWILIO_TOKEN, TWILIO_URL, &sha1_id, &sha1_body);
        expect(&f.hw.post(source.id, &sha1, &sha1_body), 200, "accepted", "Auth Token SHA-1");
        let fwd = f.sink.wait_for_key(&source.key(&sha1_id), 1, FORWARD_TIMEOUT);
        assert!(fwd[0].header("hookwall-verification").contains("auth"), "matched key auth");

        let refused = sign::unique_id("idem-no");
        let other = twilio_form(&sign::unique_id("SM"));
        let good = shared_key_headers(sign::TWILIO_SHARED_KEY, &refused, &other);
        let changed = [other.as_slice(), b"&X=1"].concat();
        expect(&f.hw.post(source.id, &good, &changed), 401, "signature_invalid", "changed body");
        let wrong = shared_key_headers(sign::WRONG_SECRET, &refused, &other);
        expect(&f.hw.post(source.id, &wrong, &other), 401, "signature_invalid", "another secret");
        let mut no_settings = good.clone();
        sign::remove_header(&mut no_settings, SETTINGS);
        expect(&f.hw.post(source.id, &no_settings, &other), 401, "signature_missing", "SHA-1 read");
        for (value, what) in [
            ("key=webhooks_sharedkey_0123456789abcdef,algorithm=HMAC_SHA1", "named SHA-1"),
            ("key=webhooks_sharedkey_0123456789abcdef,algorithm=HMAC_SHA512", "unknown algorithm"),
        ] {
            let mut h = good.clone();
            sign::set_header(&mut h, SETTINGS, value);
            expect(&f.hw.post(source.id, &h, &other), 401, "signature_missing", what);
        }

        f.flush_with_marker();
        assert_eq!(f.sink.for_key(&source.key(&id)).len(), 1, "forwarded once");
        assert!(f.sink.for_key(&source.key(&refused)).is_empty(), "refused deliveries admit nothing");
    }
}

/// `adyen-h`: Adyen with `hmac_signature = "header"`.
fn adyen_h() -> Source {
    Source {
        id: "adyen-h",
        tenant: "acme",
        provider: Provider::Adyen,
        secrets: vec![("k1", sign::ADYEN_KEY)],
        event_types: Vec::new(),
    }
}

/// A Balance Platform configuration webhook about account holder `holder`.
fn platform_body(holder: &str, status: &str) -> Vec<u8> {
    format!(
        r#"{{"data":{{"balancePlatform":"HookwallIt","accountHolder":{{"id":"{holder}","status":"{status}"}}}},"environment":"test","timestamp":"2026-11-30T04:00:00+01:00","type":"balancePlatform.accountHolder.updated"}}"#
    )
    .into_bytes()
}

/// The headers of a header-HMAC Adyen delivery of `body` signed with the hex `key`.
fn adyen_headers(key: &str, body: &[u8]) -> Vec<(String, String)> {
    vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("HmacSignature".to_owned(), sign::adyen_header_signature(key, body)),
    ]
}

/// The id hookwall gives a header-HMAC Adyen webhook: its content.
fn content_id(body: &[u8]) -> String {
    format!("sha256:{}", hex::encode(ring::digest::digest(&ring::digest::SHA256, body)))
}

on_both_io! {
    /// Issue 3: Adyen's header HMAC. A Balance Platform webhook signed in `HmacSignature` is
    /// accepted and forwarded once under its content id, Adyen's resend is a duplicate, and
    /// the next update of the same account holder is a new event; a changed body, another key,
    /// a missing header, and a payments notification (per-item signatures) sent to this
    /// header-HMAC source admit nothing.
    fn adyen_header_hmac(io: Io) {
        let source = adyen_h();
        let f = Fixture::with(io, Script::always(200), |setup| {
            setup.sources.push(adyen_h());
            setup.source_lines.push(("adyen-h", "hmac_signature = \"header\"".to_owned()));
        });
        let holder = sign::unique_id("AH");
        let body = platform_body(&holder, "active");
        let headers = adyen_headers(sign::ADYEN_KEY, &body);
        let id = content_id(&body);
        let r = f.hw.post(source.id, &headers, &body);
        expect(&r, 200, "accepted", "header HMAC");
        assert_eq!(r.id().as_deref(), Some(id.as_str()), "the content id");
        let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
        assert!(fwd[0].body == body, "forwarded byte for byte");
        assert!(fwd[0].header("hookwall-verification").contains("k1"), "matched key");
        expect(&f.hw.post(source.id, &headers, &body), 200, "duplicate", "Adyen's resend");
        let update = platform_body(&holder, "suspended");
        let r = f.hw.post(source.id, &adyen_headers(sign::ADYEN_KEY, &update), &update);
        expect(&r, 200, "accepted", "the next update of the same resource");

        let refused = platform_body(&sign::unique_id("AH"), "active");
        let good = adyen_headers(sign::ADYEN_KEY, &refused);
        let mut changed = refused.clone();
        changed[10] ^= 0x01;
        expect(&f.hw.post(source.id, &good, &changed), 401, "signature_invalid", "changed body");
        let other_key = "00".repeat(32);
        let wrong = adyen_headers(&other_key, &refused);
        expect(&f.hw.post(source.id, &wrong, &refused), 401, "signature_invalid", "another key");
        let mut unsigned = good.clone();
        sign::remove_header(&mut unsigned, "HmacSignature");
        expect(&f.hw.post(source.id, &unsigned, &refused), 401, "signature_missing", "unsigned");
        let item = sign::adyen_item(sign::ADYEN_KEY, &sign::unique_id("psp"), "CAPTURE", "true", "o");
        let notification = sign::adyen_body(&[item]);
        let json = [("Content-Type".to_owned(), "application/json".to_owned())];
        let r = f.hw.post(source.id, &json, notification.as_bytes());
        expect(&r, 401, "signature_missing", "per-item signatures at a header source");

        f.flush_with_marker();
        assert_eq!(f.sink.for_key(&source.key(&id)).len(), 1, "forwarded once");
        let admitted = f.sink.for_key(&source.key(&content_id(&refused)));
        assert!(admitted.is_empty(), "refused deliveries admit nothing");
    }
}

/// `mandrill-h`: Mandrill, one key.
fn mandrill_h() -> Source {
    Source {
        id: "mandrill-h",
        tenant: "acme",
        provider: Provider::Mandrill,
        secrets: vec![("k1", sign::MANDRILL_KEY)],
        event_types: Vec::new(),
    }
}

on_both_io! {
    /// Issue 3: Mandrill checks a webhook URL with a `HEAD` when the webhook is added: a
    /// mandrill source answers it 200 with no body; any other source still answers a `HEAD`
    /// 405 (and no source 404), head only. Nothing is admitted, and a signed batch still goes through afterwards.
    fn mandrill_head_check(io: Io) {
        let f = Fixture::with(io, Script::always(200), |setup| setup.sources.push(mandrill_h()));
        let mut conn = client::Conn::connect(f.hw.ingress);
        conn.send(&client::head("HEAD", "/webhooks/mandrill-h", &[]));
        let r = conn.read_response();
        assert_eq!(r.status, 200, "HEAD answered: {r}");
        assert_eq!(r.header("content-length"), Some("0"), "{r}");
        assert!(r.body.is_empty(), "no body: {r}");
        // The answer is complete: nothing follows it on the connection (it closes).
        let next = conn.try_read_response();
        assert!(next.is_err(), "nothing after the HEAD answer: {next:?}");

        // Other sources (and no source) answer a HEAD with the answer's head only (RFC 9110
        // §9.3.2), then close: read everything to EOF and find no body.
        for (path, status) in [("/webhooks/stripe-a", "405"), ("/webhooks/nowhere", "404")] {
            use std::io::{Read as _, Write as _};
            let mut stream = std::net::TcpStream::connect(f.hw.ingress).expect("connect");
            stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).expect("timeout");
            stream.write_all(&client::head("HEAD", path, &[])).expect("send");
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).expect("the server closes after answering");
            let text = String::from_utf8(answer).expect("text");
            assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{path}: {text}");
            assert!(text.ends_with("\r\n\r\n"), "{path}: a head without a body: {text:?}");
            if status == "405" {
                assert!(text.contains("Allow: POST\r\n"), "{text}");
            }
        }
        let r = client::send_one(f.hw.ingress, "GET", "/webhooks/mandrill-h", &[], b"");
        expect(&r, 405, "method_not_allowed", "GET to mandrill");

        let source = mandrill_h();
        let event = sign::mandrill_event(&sign::unique_id("md-head"), "Hi");
        let form = sign::mandrill_form(std::slice::from_ref(&event));
        let url = "http://127.0.0.1/webhooks/mandrill-h";
        let headers = sign::mandrill_headers(sign::MANDRILL_KEY, url, form.as_bytes());
        expect(&f.hw.post(source.id, &headers, form.as_bytes()), 200, "accepted", "a batch");
        let id = sign::mandrill_event_id(&event);
        f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
    }
}
