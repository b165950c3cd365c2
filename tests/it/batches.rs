//! Batch deliveries (SPEC §4, issue 3) through the running server on both back ends: SendGrid
//! posts a JSON array of events; each event is admitted under its own identity (events of one
//! delivery land in different ledger shards) and forwarded once, alone, as the exact bytes of its
//! element with its own `Idempotency-Key`; the delivery is answered `accepted` only when every
//! event is admitted, `duplicate` when all were seen, `conflict` when one id comes back with
//! other bytes (the others are still admitted). Signing is `sign.rs`'s (SendGrid's ECDSA).

use crate::client::Response;
use crate::harness::{Fixture, Source, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};
use crate::sink::Script;

fn sendgrid_a() -> Source {
    Source {
        id: "sendgrid-a",
        tenant: "acme",
        provider: Provider::Sendgrid,
        secrets: vec![("k1", sign::SENDGRID_PUBLIC)],
        event_types: Vec::new(),
    }
}

/// A batch of `events` (`(id, note)`), as SendGrid lays it out (one element per line).
fn batch(events: &[(&str, &str)]) -> Vec<u8> {
    let elements: Vec<String> =
        events.iter().map(|(id, note)| sign::sendgrid_event(id, note)).collect();
    format!("[\n{}\n]\n", elements.join(",\n")).into_bytes()
}

/// Posts `body` to `sendgrid-a`, signed now by `secret`'s owner.
fn post(f: &Fixture, secret: &str, body: &[u8], t: i64) -> Response {
    let headers = sign::headers(Provider::Sendgrid, secret, "unused", t, body);
    f.hw.post("sendgrid-a", &headers, body)
}

#[track_caller]
fn expect(r: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(r.answer(), (status, code.to_owned()), "{what}: got {r}");
}

on_both_io! {
    /// Issue 3: a batch of 3 is accepted and forwarded as 3 events; the same batch again is a
    /// duplicate; an overlapping batch admits only its new event; a conflicting element makes
    /// the delivery 409 while its other events are admitted; forged, unsigned and stale
    /// batches are refused whole.
    fn batch_events_each_admitted_once(io: Io) {
        let source = sendgrid_a();
        let f = Fixture::with(io, Script::always(200), |setup| setup.sources.push(sendgrid_a()));
        let ids: Vec<String> = (0..5).map(|n| sign::unique_id(&format!("sg_batch{n}"))).collect();
        let id = |n: usize| ids[n].as_str();
        let now = sign::now_unix_s();

        let first = batch(&[(id(0), "a"), (id(1), "b"), (id(2), "c")]);
        expect(&post(&f, sign::SENDGRID_PUBLIC, &first, now), 200, "accepted", "batch of 3");
        for (n, note) in [(0, "a"), (1, "b"), (2, "c")] {
            let fwd = f.sink.wait_for_key(&source.key(id(n)), 1, FORWARD_TIMEOUT);
            let element = sign::sendgrid_event(id(n), note).into_bytes();
            assert!(fwd[0].body == element, "event {n}: forwarded alone, as its exact bytes");
            assert_eq!(fwd[0].header("hookwall-event-id"), id(n), "event {n}: its own id");
            assert!(fwd[0].header("hookwall-verification").contains("k1"), "event {n}: key id");
        }

        // SendGrid's retry of the whole delivery (signed again, a few seconds later).
        expect(&post(&f, sign::SENDGRID_PUBLIC, &first, now + 5), 200, "duplicate", "same batch");

        // Overlapping: one event seen, one new.
        let overlap = batch(&[(id(2), "c"), (id(3), "d")]);
        expect(&post(&f, sign::SENDGRID_PUBLIC, &overlap, now), 200, "accepted", "overlapping");
        f.sink.wait_for_key(&source.key(id(3)), 1, FORWARD_TIMEOUT);

        // A known id with other bytes, next to a new event: 409, the new one still admitted.
        let conflicting = batch(&[(id(4), "e"), (id(0), "changed")]);
        let r = post(&f, sign::SENDGRID_PUBLIC, &conflicting, now);
        expect(&r, 409, "conflict", "conflicting element");
        f.sink.wait_for_key(&source.key(id(4)), 1, FORWARD_TIMEOUT);

        // Refused whole: a forged, an unsigned and a stale batch admit nothing.
        let fresh = sign::unique_id("sg_refused");
        let refused = batch(&[(&fresh, "x"), (id(1), "b")]);
        let forged = post(&f, sign::WRONG_SECRET, &refused, now);
        expect(&forged, 401, "signature_invalid", "forged batch");
        let mut unsigned = sign::headers(Provider::Sendgrid, sign::SENDGRID_PUBLIC, "x", now, &refused);
        sign::remove_header(&mut unsigned, "x-twilio-email-event-webhook-signature");
        expect(&f.hw.post("sendgrid-a", &unsigned, &refused), 401, "signature_missing", "unsigned");
        expect(&post(&f, sign::SENDGRID_PUBLIC, &refused, now - 700), 401, "stale", "stale batch");
        // A body that is no array of events: 400, nothing admitted.
        let not_batch = sign::sendgrid_event(&fresh, "x").into_bytes();
        let r = post(&f, sign::SENDGRID_PUBLIC, &not_batch, now);
        expect(&r, 400, "schema_rejected", "an object, not an array");

        f.flush_with_marker();
        for n in 0..5 {
            assert_eq!(f.sink.for_key(&source.key(id(n))).len(), 1, "event {n}: forwarded once");
        }
        assert!(f.sink.for_key(&source.key(&fresh)).is_empty(), "refused batches admit nothing");
    }
}
