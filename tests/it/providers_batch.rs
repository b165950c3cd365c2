//! The last batch of issue 3's providers through the running server on both back ends:
//! HubSpot (v3: a signed URL and a batch of events) and Mandrill (a signed URL and a form whose
//! `mandrill_events` is a batch; its URL-check POST answered, nothing admitted) and Adyen (a
//! signature inside each notification item; every item must verify). Each signed
//! delivery is `accepted`, each event forwarded once, alone, as its exact element bytes under
//! its own id; HubSpot's retry,
//! which raises every event's `attemptNumber` and is signed anew, is a `duplicate` (never a 409);
//! a changed body, a wrong key, another URL, a missing signature and stale or future timestamps
//! get the SPEC §3 answers. Signing is `sign.rs`'s, written from the providers' docs.

use crate::client::Response;
use crate::harness::{Fixture, Source, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};
use crate::sink::Script;

fn hubspot_a() -> Source {
    Source {
        id: "hubspot-a",
        tenant: "acme",
        provider: Provider::Hubspot,
        secrets: vec![("k1", sign::HUBSPOT_SECRET)],
        event_types: Vec::new(),
    }
}

#[track_caller]
fn expect(r: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(r.answer(), (status, code.to_owned()), "{what}: got {r}");
}

/// The URL hookwall rebuilds for a direct delivery (the test client sends `Host: 127.0.0.1`).
const HUBSPOT_URL: &str = "http://127.0.0.1/webhooks/hubspot-a";

/// A HubSpot batch of `events` (each the members of one event), one element per line.
fn batch(events: &[Vec<(&'static str, String)>]) -> Vec<u8> {
    let elements: Vec<String> = events.iter().map(|m| sign::hubspot_event(m)).collect();
    format!("[{}]", elements.join(",\n")).into_bytes()
}

/// Posts `body` to `hubspot-a` signed by `secret` over `url` at `t_ms` (Unix ms).
fn post(f: &Fixture, secret: &str, url: &str, t_ms: i64, body: &[u8]) -> Response {
    f.hw.post("hubspot-a", &sign::hubspot_headers(secret, url, t_ms, body), body)
}

on_both_io! {
    /// Issue 3: HubSpot v3 end to end. A batch of two is accepted and forwarded as two
    /// events; HubSpot's retry (every `attemptNumber` raised, a new timestamp and signature)
    /// is a duplicate; forged, re-addressed, unsigned, stale and future deliveries admit
    /// nothing.
    fn hubspot_batches(io: Io) {
        let source = hubspot_a();
        let f = Fixture::with(io, Script::always(200), |setup| setup.sources.push(hubspot_a()));
        let tag = sign::unique_id("hs");
        let members =
            |n: u32, attempt: u32| sign::hubspot_members(&format!("{tag}-{n}"), "lead", attempt);
        let now_ms = sign::now_unix_s() * 1000 + 250;

        let first = batch(&[members(0, 0), members(1, 0)]);
        let r = post(&f, sign::HUBSPOT_SECRET, HUBSPOT_URL, now_ms, &first);
        expect(&r, 200, "accepted", "batch of 2");
        for n in 0..2 {
            let id = sign::hubspot_event_id(&members(n, 0));
            let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
            let element = sign::hubspot_event(&members(n, 0)).into_bytes();
            assert!(fwd[0].body == element, "event {n}: forwarded alone, as its exact bytes");
            assert_eq!(fwd[0].header("hookwall-event-id"), id, "event {n}: its own id");
            assert!(fwd[0].header("hookwall-verification").contains("k1"), "event {n}: key id");
        }

        // HubSpot's retry: attemptNumber 1, signed again a few seconds later.
        let retry = batch(&[members(0, 1), members(1, 1)]);
        let r = post(&f, sign::HUBSPOT_SECRET, HUBSPOT_URL, now_ms + 5_000, &retry);
        expect(&r, 200, "duplicate", "retry with a new attemptNumber");

        // Refused whole: a forged, a re-addressed, an unsigned, a stale and a future batch.
        let fresh = batch(&[members(2, 0)]);
        let forged = post(&f, sign::WRONG_SECRET, HUBSPOT_URL, now_ms, &fresh);
        expect(&forged, 401, "signature_invalid", "wrong key");
        let elsewhere = "http://127.0.0.1/webhooks/other";
        let r = post(&f, sign::HUBSPOT_SECRET, elsewhere, now_ms, &fresh);
        expect(&r, 401, "signature_invalid", "signed for another URL");
        let mut tampered = fresh.clone();
        let at = tampered.iter().rposition(|b| *b == b'l').expect("the l of \"lead\"");
        tampered[at] = b'L';
        let headers = sign::hubspot_headers(sign::HUBSPOT_SECRET, HUBSPOT_URL, now_ms, &fresh);
        let r = f.hw.post("hubspot-a", &headers, &tampered);
        expect(&r, 401, "signature_invalid", "changed body");
        let mut unsigned = headers.clone();
        sign::remove_header(&mut unsigned, "x-hubspot-signature-v3");
        expect(&f.hw.post("hubspot-a", &unsigned, &fresh), 401, "signature_missing", "unsigned");
        let stale = post(&f, sign::HUBSPOT_SECRET, HUBSPOT_URL, now_ms - 700_000, &fresh);
        expect(&stale, 401, "stale", "older than 5 minutes");
        let future = post(&f, sign::HUBSPOT_SECRET, HUBSPOT_URL, now_ms + 700_000, &fresh);
        expect(&future, 401, "stale", "from the future");

        f.flush_with_marker();
        for n in 0..2 {
            let id = sign::hubspot_event_id(&members(n, 0));
            assert_eq!(f.sink.for_key(&source.key(&id)).len(), 1, "event {n}: forwarded once");
        }
        let refused = sign::hubspot_event_id(&members(2, 0));
        assert!(f.sink.for_key(&source.key(&refused)).is_empty(), "refused batches admit nothing");
    }
}

fn mandrill_a() -> Source {
    Source {
        id: "mandrill-a",
        tenant: "acme",
        provider: Provider::Mandrill,
        secrets: vec![("k1", sign::MANDRILL_KEY)],
        event_types: Vec::new(),
    }
}

/// The URL hookwall rebuilds for a direct delivery to `mandrill-a`.
const MANDRILL_URL: &str = "http://127.0.0.1/webhooks/mandrill-a";

/// Posts the form `body` to `mandrill-a` signed by `key` over `url`.
fn post_mandrill(f: &Fixture, key: &str, url: &str, body: &str) -> Response {
    let body = body.as_bytes();
    f.hw.post("mandrill-a", &sign::mandrill_headers(key, url, body), body)
}

on_both_io! {
    /// Issue 3: Mandrill end to end. A batch of two is accepted and forwarded as two events,
    /// each under the SHA-256 of its bytes; Mandrill's retry of the same batch is a duplicate;
    /// its URL-check POST (`[]` signed with `test-webhook`) is answered 200 and admits
    /// nothing; forged, re-addressed and unsigned batches are refused.
    fn mandrill_batches(io: Io) {
        let source = mandrill_a();
        let f = Fixture::with(io, Script::always(200), |setup| setup.sources.push(mandrill_a()));
        let tag = sign::unique_id("md");
        let events: Vec<String> =
            (0..3).map(|n| sign::mandrill_event(&format!("{tag}-{n}"), "Hi")).collect();

        let first = sign::mandrill_form(&events[..2]);
        let r = post_mandrill(&f, sign::MANDRILL_KEY, MANDRILL_URL, &first);
        expect(&r, 200, "accepted", "batch of 2");
        for event in &events[..2] {
            let id = sign::mandrill_event_id(event);
            let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
            assert!(fwd[0].body == event.as_bytes(), "forwarded alone, as its exact bytes");
            assert_eq!(fwd[0].header("hookwall-event-id"), id, "its own id");
        }
        let r = post_mandrill(&f, sign::MANDRILL_KEY, MANDRILL_URL, &first);
        expect(&r, 200, "duplicate", "Mandrill's retry of the batch");

        // The URL check when the webhook is added: answered, never admitted.
        let empty = sign::mandrill_form(&[]);
        let r = post_mandrill(&f, "test-webhook", MANDRILL_URL, &empty);
        expect(&r, 200, "challenge", "URL check");
        let r = post_mandrill(&f, sign::WRONG_SECRET, MANDRILL_URL, &empty);
        expect(&r, 401, "signature_invalid", "URL check with another key");
        // The generic key proves nothing for real events.
        let fresh = sign::mandrill_form(&events[2..]);
        let r = post_mandrill(&f, "test-webhook", MANDRILL_URL, &fresh);
        expect(&r, 401, "signature_invalid", "events signed with the generic key");

        let r = post_mandrill(&f, sign::WRONG_SECRET, MANDRILL_URL, &fresh);
        expect(&r, 401, "signature_invalid", "wrong key");
        let r = post_mandrill(&f, sign::MANDRILL_KEY, "http://127.0.0.1/webhooks/other", &fresh);
        expect(&r, 401, "signature_invalid", "signed for another URL");
        let mut unsigned =
            sign::mandrill_headers(sign::MANDRILL_KEY, MANDRILL_URL, fresh.as_bytes());
        sign::remove_header(&mut unsigned, "x-mandrill-signature");
        let r = f.hw.post("mandrill-a", &unsigned, fresh.as_bytes());
        expect(&r, 401, "signature_missing", "unsigned");

        f.flush_with_marker();
        for event in &events[..2] {
            let id = sign::mandrill_event_id(event);
            assert_eq!(f.sink.for_key(&source.key(&id)).len(), 1, "forwarded once");
        }
        let refused = sign::mandrill_event_id(&events[2]);
        assert!(f.sink.for_key(&source.key(&refused)).is_empty(), "refused batches admit nothing");
    }
}

fn adyen_a() -> Source {
    Source {
        id: "adyen-a",
        tenant: "acme",
        provider: Provider::Adyen,
        secrets: vec![("k1", sign::ADYEN_KEY)],
        event_types: Vec::new(),
    }
}

/// Posts the Adyen delivery of `items` to `adyen-a`.
fn post_adyen(f: &Fixture, items: &[String]) -> Response {
    let headers = vec![("Content-Type".to_owned(), "application/json".to_owned())];
    f.hw.post("adyen-a", &headers, sign::adyen_body(items).as_bytes())
}

on_both_io! {
    /// Issue 3: Adyen end to end. A delivery of two items is accepted and each item forwarded
    /// alone as its exact bytes under `pspReference:eventCode:success`; Adyen's resend is a
    /// duplicate; a later item with another `success` is a new event; a delivery with one
    /// forged or unsigned item, or signed with another key, admits nothing.
    fn adyen_batches(io: Io) {
        let source = adyen_a();
        let f = Fixture::with(io, Script::always(200), |setup| setup.sources.push(adyen_a()));
        let psp = |n: u32| format!("{}{n}", sign::unique_id("psp"));
        let (p0, p1, p2) = (psp(0), psp(1), psp(2));
        let key = sign::ADYEN_KEY;
        let items = [
            sign::adyen_item(key, &p0, "AUTHORISATION", "true", "order-1"),
            sign::adyen_item(key, &p1, "CAPTURE", "true", "order-1"),
        ];
        expect(&post_adyen(&f, &items), 200, "accepted", "two items");
        for (item, id) in items.iter().zip([
            format!("{p0}:AUTHORISATION:true"),
            format!("{p1}:CAPTURE:true"),
        ]) {
            let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
            assert!(fwd[0].body == item.as_bytes(), "{id}: forwarded alone, as its exact bytes");
            assert_eq!(fwd[0].header("hookwall-event-id"), id);
        }
        expect(&post_adyen(&f, &items), 200, "duplicate", "Adyen's resend");
        // The same payment and event code with another outcome is an update: a new event.
        let update = [sign::adyen_item(key, &p0, "AUTHORISATION", "false", "order-1")];
        expect(&post_adyen(&f, &update), 200, "accepted", "success changed");
        f.sink.wait_for_key(&source.key(&format!("{p0}:AUTHORISATION:false")), 1, FORWARD_TIMEOUT);

        // Refused whole: one forged item beside a good one, an unsigned item, another key.
        let good = sign::adyen_item(key, &p2, "AUTHORISATION", "true", "order-2");
        let other_key = "00".repeat(32);
        let forged = sign::adyen_item(&other_key, &p2, "CAPTURE", "true", "order-2");
        let r = post_adyen(&f, &[good.clone(), forged.clone()]);
        expect(&r, 401, "signature_invalid", "one forged item");
        let unsigned = sign::adyen_item_signed_by(None, &p2, "CAPTURE", "true", "order-2");
        let r = post_adyen(&f, &[good.clone(), unsigned]);
        expect(&r, 401, "signature_missing", "one unsigned item");
        expect(&post_adyen(&f, &[forged]), 401, "signature_invalid", "another key");

        f.flush_with_marker();
        for id in [format!("{p0}:AUTHORISATION:true"), format!("{p1}:CAPTURE:true")] {
            assert_eq!(f.sink.for_key(&source.key(&id)).len(), 1, "{id}: forwarded once");
        }
        let refused = format!("{p2}:AUTHORISATION:true");
        let admitted = f.sink.for_key(&source.key(&refused));
        assert!(admitted.is_empty(), "refused deliveries admit nothing");
    }
}
