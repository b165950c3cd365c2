//! Ingress (SPEC §3) end to end: verification answers, duplicates, conflicts, concurrent
//! copies, and HTTP/1.1 framing, each on both back ends. Every accepted event is also checked
//! at the destination: forwarded once, byte for byte, with the SPEC §5 headers.

use std::sync::{Arc, Barrier};

use crate::client::{self, Conn, Response};
use crate::harness::{
    github_a, standard_a, stripe_a, stripe_rot, Fixture, Io, Source, FORWARD_TIMEOUT,
};
use crate::sign::{self, Provider};
use crate::sink::{Recorded, Script};

/// `(status, code)` of an answer, for comparisons.
fn ans(status: u16, code: &str) -> (u16, String) {
    (status, code.to_owned())
}

/// Asserts that `r` answers `(status, code)`, printing the whole response otherwise.
#[track_caller]
fn expect(r: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(r.answer(), ans(status, code), "{what}: got {r}");
}

/// RFC 9110 §6.6.1: an answer carries a `Date` in IMF-fixdate form, within a few seconds of now.
#[track_caller]
fn assert_dated(r: &Response, what: &str) {
    let date = r.header("date").unwrap_or_else(|| panic!("{what}: no Date header: {r}"));
    let at = httpdate::parse_http_date(date)
        .unwrap_or_else(|e| panic!("{what}: Date {date:?} is not an HTTP date: {e}"));
    let at = at.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    let now = u64::try_from(sign::now_unix_s()).expect("after 1970");
    assert!(now.abs_diff(at) <= 5, "{what}: Date {date:?} is not now ({now})");
}

/// Unix seconds of an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`).
pub fn rfc3339_unix_s(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, s) =
        (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && &rest[3..4] == ":" =>
        {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (rest[1..3].parse::<i64>().ok()? * 3600 + rest[4..6].parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + s - offset_s)
}

/// Asserts that `fwd` is attempt `attempt` of event `id` of `source` carrying exactly `body`,
/// with the forwarding headers of SPEC §5 and the matched key id `key_id` (R21, R3).
#[track_caller]
pub fn assert_forward(
    fwd: &Recorded,
    source: &Source,
    id: &str,
    body: &[u8],
    attempt: u32,
    key_id: &str,
) {
    assert_eq!(fwd.method, "POST", "forward method");
    assert_eq!(fwd.path, "/hooks", "forward path");
    assert!(
        fwd.body == body,
        "forward body differs: {:?} vs {:?}",
        String::from_utf8_lossy(&fwd.body),
        String::from_utf8_lossy(body)
    );
    assert_eq!(fwd.header("content-type"), "application/json", "original Content-Type forwarded");
    assert_eq!(fwd.header_count("idempotency-key"), 1, "one Idempotency-Key");
    assert_eq!(
        fwd.header("idempotency-key"),
        source.key(id),
        "Idempotency-Key = tenant/source/event id"
    );
    assert_eq!(fwd.header("hookwall-source"), source.id, "Hookwall-Source");
    assert_eq!(fwd.header("hookwall-event-id"), id, "Hookwall-Event-Id");
    assert_eq!(fwd.header("hookwall-attempt"), attempt.to_string(), "Hookwall-Attempt");
    let received = fwd.header("hookwall-received-at");
    let at = rfc3339_unix_s(received)
        .unwrap_or_else(|| panic!("Hookwall-Received-At {received:?} is not RFC 3339"));
    assert!(
        (at - sign::now_unix_s()).abs() < 600,
        "Hookwall-Received-At {received:?} is not about now"
    );
    let verification = fwd.header("hookwall-verification");
    let provider = source.provider.name();
    assert!(
        verification.contains(provider),
        "Hookwall-Verification {verification:?} names the provider {provider}"
    );
    assert!(
        verification.contains(key_id),
        "Hookwall-Verification {verification:?} names the matched key {key_id}"
    );
}

/// R12, R14, SPEC §5: a valid delivery is accepted (with its id), forwarded once with the exact
/// bytes and headers; a copy signed at another time is a duplicate and is not forwarded again.
fn accepted_forwarded_then_duplicate(io: Io, source: &Source) {
    let f = Fixture::new(io, Script::always(200));
    let id = sign::unique_id("evt_ok");
    let body = sign::body(source.provider, &id, "first copy");
    let t = sign::now_unix_s() - 10;

    let r = f.hw.deliver_at(source, &id, &body, t);
    expect(&r, 200, "accepted", "first copy");
    assert_dated(&r, "accepted");
    assert_eq!(r.id().as_deref(), Some(id.as_str()), "the answer names the event id");
    let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
    assert_forward(&fwd[0], source, &id, &body, 1, "k1");

    // The provider's retry: same event, new signature timestamp (R7: the id stays the same).
    let r = f.hw.deliver_at(source, &id, &body, t + 5);
    expect(&r, 200, "duplicate", "retry of an admitted event");
    assert_dated(&r, "duplicate");
    assert_eq!(r.id().as_deref(), Some(id.as_str()), "the duplicate answer names the event id");
    let r = f.hw.deliver_at(source, &id, &body, t + 6);
    expect(&r, 200, "duplicate", "second retry");

    f.flush_with_marker();
    assert_eq!(
        f.sink.for_key(&source.key(&id)).len(),
        1,
        "R12: a duplicate causes no second forward"
    );
}

on_both_io_and_postgres! {
    /// R12, R14: Stripe accepted → forwarded once; retry → duplicate.
    fn stripe_accepted_forwarded_once_then_duplicate(io: Io) {
        accepted_forwarded_then_duplicate(io, &stripe_a());
    }
}

on_both_io_and_postgres! {
    /// R12, R14: GitHub accepted → forwarded once; redelivery → duplicate.
    fn github_accepted_forwarded_once_then_duplicate(io: Io) {
        accepted_forwarded_then_duplicate(io, &github_a());
    }
}

on_both_io_and_postgres! {
    /// R12, R14: Standard Webhooks accepted → forwarded once; retry → duplicate.
    fn standard_accepted_forwarded_once_then_duplicate(io: Io) {
        accepted_forwarded_then_duplicate(io, &standard_a());
    }
}

on_both_io! {
    /// Issue 3's known failure class "a re-serialised JSON body": escapes a JSON library would
    /// rewrite (`\/`, `\u0026`, upper-case `\u001B`) and a trailing CRLF verify as sent, are
    /// forwarded byte for byte, and a copy is a duplicate; the same content re-serialised
    /// (escapes decoded) is a different body: its signature, made over the original, fails.
    fn escaped_json_verifies_and_is_forwarded_as_sent(io: Io) {
        let f = Fixture::new(io, Script::always(200));
        let source = stripe_a();
        let id = sign::unique_id("evt_esc");
        let mut body = sign::body(Provider::Stripe, &id, r"a\/b \u0026 c \u001B d");
        body.extend_from_slice(b"\r\n");
        let t = sign::now_unix_s();
        expect(&f.hw.deliver_at(&source, &id, &body, t), 200, "accepted", "escaped body");
        let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
        assert_forward(&fwd[0], &source, &id, &body, 1, "k1");
        expect(&f.hw.deliver_at(&source, &id, &body, t + 1), 200, "duplicate", "its retry");

        let reserialised = String::from_utf8(body.clone()).expect("utf-8")
            .replace(r"\/", "/").replace(r"\u0026", "&").replace("\r\n", "");
        let headers = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, t, &body);
        let r = f.hw.post(source.id, &headers, reserialised.as_bytes());
        expect(&r, 401, "signature_invalid", "re-serialised by a proxy");
    }
}

/// Flips the case of the first ASCII letter of `note` in `body` (the JSON stays valid).
fn tamper(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    let at = out.iter().rposition(|b| b.is_ascii_lowercase()).expect("a letter to flip");
    out[at] = out[at].to_ascii_uppercase();
    out
}

on_both_io_and_postgres! {
    /// R5, R6, SPEC §3: tampered body, wrong secret, missing or malformed header, stale and
    /// future timestamps answer 401 with their code, forward nothing, and do not burn the
    /// identity: a valid copy afterwards is accepted.
    fn rejects_forward_nothing_and_do_not_burn_the_identity(io: Io) {
        let f = Fixture::new(io, Script::always(200));
        let now = sign::now_unix_s();
        let mut tampered_bodies = Vec::new();

        // Stripe.
        let s = stripe_a();
        let id = sign::unique_id("evt_rej");
        let body = sign::body(Provider::Stripe, &id, "genuine");
        let h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, now, &body);
        let bad = tamper(&body);
        tampered_bodies.push(bad.clone());
        let r = f.hw.post(s.id, &h, &bad);
        expect(&r, 401, "signature_invalid", "stripe: tampered body");
        assert_dated(&r, "a 401");
        let wrong = sign::headers(Provider::Stripe, sign::WRONG_SECRET, &id, now, &body);
        expect(&f.hw.post(s.id, &wrong, &body), 401, "signature_invalid", "stripe: wrong secret");
        let mut missing = h.clone();
        sign::remove_header(&mut missing, "Stripe-Signature");
        expect(&f.hw.post(s.id, &missing, &body), 401, "signature_missing", "stripe: missing header");
        let v1 = sign::stripe_v1(sign::STRIPE_SECRET, now, &body);
        for malformed in [format!("t=notanumber,v1={v1}"), format!("v1={v1}"), "garbage".to_owned(), format!("t={now}")] {
            let mut m = h.clone();
            sign::set_header(&mut m, "Stripe-Signature", &malformed);
            expect(&f.hw.post(s.id, &m, &body), 401, "signature_missing", &format!("stripe: malformed {malformed:?}"));
        }
        let stale = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, now - 400, &body);
        expect(&f.hw.post(s.id, &stale, &body), 401, "stale", "stripe: 400 s old (tolerance 300 s)");
        let future = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, now + 180, &body);
        expect(&f.hw.post(s.id, &future, &body), 401, "stale", "stripe: 180 s ahead (future_skew 60 s)");
        let r = f.hw.post(s.id, &h, &body);
        expect(&r, 200, "accepted", "stripe: a valid copy after the rejects");
        assert!(!String::from_utf8_lossy(&r.body).contains(sign::STRIPE_SECRET), "no secret echoed");
        let stripe_key = s.key(&id);

        // GitHub.
        let g = github_a();
        let gid = sign::unique_id("gh_rej");
        let gbody = sign::body(Provider::Github, &gid, "genuine");
        let gh = sign::headers(Provider::Github, sign::GITHUB_SECRET, &gid, now, &gbody);
        let gbad = tamper(&gbody);
        tampered_bodies.push(gbad.clone());
        expect(&f.hw.post(g.id, &gh, &gbad), 401, "signature_invalid", "github: tampered body");
        let gwrong = sign::headers(Provider::Github, sign::WRONG_SECRET, &gid, now, &gbody);
        expect(&f.hw.post(g.id, &gwrong, &gbody), 401, "signature_invalid", "github: wrong secret");
        let mut gmissing = gh.clone();
        sign::remove_header(&mut gmissing, "X-Hub-Signature-256");
        expect(&f.hw.post(g.id, &gmissing, &gbody), 401, "signature_missing", "github: missing header");
        let mut gmal = gh.clone();
        sign::set_header(&mut gmal, "X-Hub-Signature-256", "sha256=zz");
        expect(&f.hw.post(g.id, &gmal, &gbody), 401, "signature_missing", "github: malformed header");
        expect(&f.hw.post(g.id, &gh, &gbody), 200, "accepted", "github: a valid copy after the rejects");
        let github_key = g.key(&gid);

        // Standard Webhooks.
        let w = standard_a();
        let wid = sign::unique_id("msg_rej");
        let wbody = sign::body(Provider::Standard, &wid, "genuine");
        let wh = sign::headers(Provider::Standard, sign::STANDARD_SECRET, &wid, now, &wbody);
        let wbad = tamper(&wbody);
        tampered_bodies.push(wbad.clone());
        expect(&f.hw.post(w.id, &wh, &wbad), 401, "signature_invalid", "standard: tampered body");
        let other = "whsec_dGhpcyBpcyBub3QgdGhlIGtleSB5b3UgYXJlIGxvb2tpbmcgZm9y";
        let wwrong = sign::headers(Provider::Standard, other, &wid, now, &wbody);
        expect(&f.hw.post(w.id, &wwrong, &wbody), 401, "signature_invalid", "standard: wrong secret");
        let mut wmissing = wh.clone();
        sign::remove_header(&mut wmissing, "webhook-signature");
        expect(&f.hw.post(w.id, &wmissing, &wbody), 401, "signature_missing", "standard: missing signature");
        let mut wmal = wh.clone();
        sign::set_header(&mut wmal, "webhook-timestamp", "yesterday");
        expect(&f.hw.post(w.id, &wmal, &wbody), 401, "signature_missing", "standard: malformed timestamp");
        let wstale = sign::headers(Provider::Standard, sign::STANDARD_SECRET, &wid, now - 400, &wbody);
        expect(&f.hw.post(w.id, &wstale, &wbody), 401, "stale", "standard: 400 s old");
        let wfuture = sign::headers(Provider::Standard, sign::STANDARD_SECRET, &wid, now + 180, &wbody);
        expect(&f.hw.post(w.id, &wfuture, &wbody), 401, "stale", "standard: 180 s ahead");
        expect(&f.hw.post(w.id, &wh, &wbody), 200, "accepted", "standard: a valid copy after the rejects");
        let standard_key = w.key(&wid);

        // R5: nothing of the rejects reached the destination; each valid copy exactly once.
        for key in [&stripe_key, &github_key, &standard_key] {
            f.sink.wait_for_key(key, 1, FORWARD_TIMEOUT);
        }
        f.flush_with_marker();
        for (key, expected) in [(&stripe_key, &body), (&github_key, &gbody), (&standard_key, &wbody)] {
            let fwd = f.sink.for_key(key);
            assert_eq!(fwd.len(), 1, "{key}: one forward");
            assert!(&fwd[0].body == expected, "{key}: the genuine body was forwarded");
        }
        for r in f.sink.recorded() {
            assert!(!tampered_bodies.contains(&r.body), "a rejected body was forwarded: {:?}", r.header("idempotency-key"));
        }
    }
}

on_both_io_and_postgres! {
    /// R3: a Stripe header with several `v1` where only one matches is accepted; a source with
    /// two active secrets accepts a delivery signed by either, and records which key matched.
    fn key_rotation_any_active_key_verifies(io: Io) {
        let f = Fixture::new(io, Script::always(200));
        let now = sign::now_unix_s();

        let s = stripe_a();
        let id = sign::unique_id("evt_multi");
        let body = sign::body(Provider::Stripe, &id, "multi");
        let header = format!(
            "t={now},v1={},v0={},v1={},v1=nothex",
            sign::stripe_v1(sign::WRONG_SECRET, now, &body),
            sign::stripe_v1(sign::WRONG_SECRET, now, &body),
            sign::stripe_v1(sign::STRIPE_SECRET, now, &body),
        );
        let h = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("Stripe-Signature".to_owned(), header),
        ];
        expect(&f.hw.post(s.id, &h, &body), 200, "accepted", "several v1, the second matches");
        let none = format!(
            "t={now},v1={},v1={}",
            sign::stripe_v1(sign::WRONG_SECRET, now, &body),
            sign::stripe_v1(sign::STRIPE_OLD_SECRET, now, &body)
        );
        let h_none = vec![("Stripe-Signature".to_owned(), none)];
        let other_body = sign::body(Provider::Stripe, &sign::unique_id("evt_none"), "none");
        expect(&f.hw.post(s.id, &h_none, &other_body), 401, "signature_invalid", "several v1, none matches");

        let rot = stripe_rot();
        let old_id = sign::unique_id("evt_old");
        let old_body = sign::body(Provider::Stripe, &old_id, "old key");
        let h_old = sign::headers(Provider::Stripe, sign::STRIPE_OLD_SECRET, &old_id, now, &old_body);
        expect(&f.hw.post(rot.id, &h_old, &old_body), 200, "accepted", "signed by the older secret");
        let new_id = sign::unique_id("evt_new");
        let new_body = sign::body(Provider::Stripe, &new_id, "new key");
        let h_new = sign::headers(Provider::Stripe, sign::STRIPE_NEW_SECRET, &new_id, now, &new_body);
        expect(&f.hw.post(rot.id, &h_new, &new_body), 200, "accepted", "signed by the newer secret");
        // R4: keys are bound to their source: stripe-a's key does not open stripe-rot.
        let x_id = sign::unique_id("evt_cross");
        let x_body = sign::body(Provider::Stripe, &x_id, "cross");
        let h_x = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &x_id, now, &x_body);
        expect(&f.hw.post(rot.id, &h_x, &x_body), 401, "signature_invalid", "another source's key");

        let fwd = f.sink.wait_for_key(&s.key(&id), 1, FORWARD_TIMEOUT);
        assert_forward(&fwd[0], &s, &id, &body, 1, "k1");
        let fwd = f.sink.wait_for_key(&rot.key(&old_id), 1, FORWARD_TIMEOUT);
        assert_forward(&fwd[0], &rot, &old_id, &old_body, 1, "k-old");
        let fwd = f.sink.wait_for_key(&rot.key(&new_id), 1, FORWARD_TIMEOUT);
        assert_forward(&fwd[0], &rot, &new_id, &new_body, 1, "k-new");
    }
}

on_both_io_and_postgres! {
    /// R10, R12, SPEC §3: 32 concurrent copies of one new event over separate connections:
    /// exactly one `accepted`, 31 `duplicate`, exactly one forward.
    fn concurrent_copies_admit_exactly_once(io: Io) {
        const COPIES: usize = 32;
        let f = Fixture::new(io, Script::always(200));
        let s = stripe_a();
        let id = sign::unique_id("evt_race");
        let body = sign::body(Provider::Stripe, &id, "race");
        let request = client::request(
            "POST",
            "/webhooks/stripe-a",
            &sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, sign::now_unix_s(), &body),
            &body,
        );
        let barrier = Arc::new(Barrier::new(COPIES));
        let threads: Vec<_> = (0..COPIES)
            .map(|_| {
                let (barrier, request, addr) = (Arc::clone(&barrier), request.clone(), f.hw.ingress);
                std::thread::spawn(move || {
                    let mut conn = Conn::connect(addr);
                    barrier.wait();
                    conn.send(&request);
                    conn.read_response()
                })
            })
            .collect();
        let answers: Vec<Response> = threads.into_iter().map(|t| t.join().expect("sender thread")).collect();
        let accepted = answers.iter().filter(|r| r.answer() == ans(200, "accepted")).count();
        let duplicate = answers.iter().filter(|r| r.answer() == ans(200, "duplicate")).count();
        let all: Vec<String> = answers.iter().map(ToString::to_string).collect();
        assert_eq!((accepted, duplicate), (1, COPIES - 1), "answers: {all:#?}");
        assert!(answers.iter().all(|r| r.id().as_deref() == Some(id.as_str())), "every answer names the id");

        let fwd = f.sink.wait_for_key(&s.key(&id), 1, FORWARD_TIMEOUT);
        assert_forward(&fwd[0], &s, &id, &body, 1, "k1");
        f.flush_with_marker();
        assert_eq!(f.sink.for_key(&s.key(&id)).len(), 1, "R10: exactly one forward");
    }
}

on_both_io_and_postgres! {
    /// R11: the same id with a different body is a conflict (409); the first binding is
    /// untouched: one forward, with the first body, and the first body is still a duplicate.
    fn same_id_different_body_is_a_conflict(io: Io) {
        let f = Fixture::new(io, Script::always(200));
        let s = stripe_a();
        let id = sign::unique_id("evt_conflict");
        let first = sign::body(Provider::Stripe, &id, "first binding");
        let second = sign::body(Provider::Stripe, &id, "changed intent");
        expect(&f.hw.deliver(&s, &id, &first), 200, "accepted", "first body");
        let r = f.hw.deliver(&s, &id, &second);
        expect(&r, 409, "conflict", "same id, other body");
        assert_eq!(r.id().as_deref(), Some(id.as_str()), "the conflict names the id");
        expect(&f.hw.deliver(&s, &id, &first), 200, "duplicate", "first body again");
        expect(&f.hw.deliver(&s, &id, &second), 409, "conflict", "other body again");

        f.sink.wait_for_key(&s.key(&id), 1, FORWARD_TIMEOUT);
        f.flush_with_marker();
        let fwd = f.sink.for_key(&s.key(&id));
        assert_eq!(fwd.len(), 1, "one forward for the id");
        assert_forward(&fwd[0], &s, &id, &first, 1, "k1");
    }
}

on_both_io_and_postgres! {
    /// SPEC §3: keep-alive with pipelined requests in one write answered in order; a chunked
    /// body verified over its de-chunked bytes; `Expect: 100-continue` gets `100 Continue`
    /// before the body is sent, then the final answer — all on one connection.
    fn keep_alive_pipelining_chunked_and_expect_continue(io: Io) {
        let f = Fixture::new(io, Script::always(200));
        let s = stripe_a();
        let now = sign::now_unix_s();
        let ids: Vec<String> = (0..4).map(|_| sign::unique_id("evt_pipe")).collect();
        let bodies: Vec<Vec<u8>> = ids.iter().map(|id| sign::body(Provider::Stripe, id, "pipelined")).collect();
        let signed = |i: usize, t: i64| sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &ids[i], t, &bodies[i]);
        let path = "/webhooks/stripe-a";

        let mut conn = Conn::connect(f.hw.ingress);
        let mut burst = Vec::new();
        burst.extend(client::request("POST", path, &signed(0, now), &bodies[0]));
        burst.extend(client::request("POST", path, &signed(1, now), &tamper(&bodies[1])));
        burst.extend(client::request("POST", path, &signed(1, now), &bodies[1]));
        burst.extend(client::request("POST", path, &signed(0, now + 1), &bodies[0]));
        conn.send(&burst);
        let expected = [
            (ans(200, "accepted"), Some(&ids[0])),
            (ans(401, "signature_invalid"), None),
            (ans(200, "accepted"), Some(&ids[1])),
            (ans(200, "duplicate"), Some(&ids[0])),
        ];
        for (n, (answer, id)) in expected.iter().enumerate() {
            let r = conn.read_response();
            assert_eq!(&r.answer(), answer, "pipelined answer {n}: {r}");
            if let Some(id) = id {
                assert_eq!(r.id().as_deref(), Some(id.as_str()), "pipelined answer {n} is for its own request");
            }
            assert_ne!(r.header("connection"), Some("close"), "keep-alive kept after answer {n}");
        }

        // Chunked, on the same connection, sent in several writes.
        let mut h = signed(2, now);
        h.push(("Transfer-Encoding".to_owned(), "chunked".to_owned()));
        conn.send(&client::head("POST", path, &h));
        let chunks = client::chunked(&bodies[2], 7);
        let (a, b) = chunks.split_at(chunks.len() / 2);
        conn.send(a);
        conn.send(b);
        let r = conn.read_response();
        expect(&r, 200, "accepted", "chunked body");
        assert_eq!(r.id().as_deref(), Some(ids[2].as_str()));

        // Expect: 100-continue: the head alone must draw `100 Continue`.
        let mut h = signed(3, now);
        h.push(("Expect".to_owned(), "100-continue".to_owned()));
        h.push(("Content-Length".to_owned(), bodies[3].len().to_string()));
        conn.send(&client::head("POST", path, &h));
        let interim = conn.read_response();
        assert_eq!(interim.status, 100, "interim answer before the body: {interim}");
        conn.send(&bodies[3]);
        let r = conn.read_response();
        expect(&r, 200, "accepted", "body after 100 Continue");
        assert_eq!(r.id().as_deref(), Some(ids[3].as_str()));

        // Expect: 100-continue without a signature header: 401 from the head alone, no
        // invitation to upload the body.
        let mut unsigned = Conn::connect(f.hw.ingress);
        let h = vec![
            ("Expect".to_owned(), "100-continue".to_owned()),
            ("Content-Length".to_owned(), bodies[3].len().to_string()),
        ];
        unsigned.send(&client::head("POST", path, &h));
        let r = unsigned.read_response();
        expect(&r, 401, "signature_missing", "unsigned head with Expect: 100-continue");

        for (id, body) in ids.iter().zip(&bodies) {
            let fwd = f.sink.wait_for_key(&s.key(id), 1, FORWARD_TIMEOUT);
            assert_forward(&fwd[0], &s, id, body, 1, "k1");
        }
        f.flush_with_marker();
        for id in &ids {
            assert_eq!(f.sink.for_key(&s.key(id)).len(), 1, "{id}: one forward");
        }
    }
}

on_both_io! {
    /// With small limits, one read can carry more than the unprocessed-input cap (two
    /// requests' worth): eight pipelined requests, or a body sent in 1-byte chunks, in one
    /// write. Each is a valid request and gets its answer. Before, the cap was checked after
    /// the read and before any of it was processed, so such a read closed the connection with
    /// no answer at all (found by a bad-input review with `body_bytes_max` and
    /// `header_bytes_max` at 1024).
    fn one_read_over_the_input_cap_is_answered_with_small_limits(io: Io) {
        let f = Fixture::with(io, Script::always(200), |setup| {
            setup.body_bytes_max = 1024;
            setup.header_bytes_max = 1024;
        });
        let s = stripe_a();
        let now = sign::now_unix_s();
        let path = "/webhooks/stripe-a";
        let ids: Vec<String> = (0..8).map(|_| sign::unique_id("evt_small")).collect();
        let mut burst = Vec::new();
        for id in &ids {
            let body = sign::body(Provider::Stripe, id, &"p".repeat(500));
            burst.extend(client::request("POST", path, &sign::headers(Provider::Stripe, sign::STRIPE_SECRET, id, now, &body), &body));
        }
        assert!(burst.len() > 2 * (1024 + 1024), "the burst exceeds the cap: {} bytes", burst.len());
        let mut conn = Conn::connect(f.hw.ingress);
        conn.send(&burst);
        for (n, id) in ids.iter().enumerate() {
            let r = conn.read_response();
            expect(&r, 200, "accepted", &format!("pipelined request {n}"));
            assert_eq!(r.id().as_deref(), Some(id.as_str()));
        }

        let id = sign::unique_id("evt_bytewise");
        let body = sign::body(Provider::Stripe, &id, &"b".repeat(700));
        assert!(body.len() <= 1024);
        let mut h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, now, &body);
        h.push(("Transfer-Encoding".to_owned(), "chunked".to_owned()));
        let mut bytes = client::head("POST", path, &h);
        bytes.extend(client::chunked(&body, 1));
        assert!(bytes.len() > 2 * (1024 + 1024), "the request exceeds the cap: {} bytes", bytes.len());
        let mut conn = Conn::connect(f.hw.ingress);
        conn.send(&bytes);
        expect(&conn.read_response(), 200, "accepted", "a body in 1-byte chunks");
        for id in ids.iter().chain([&id]) {
            f.sink.wait_for_key(&s.key(id), 1, FORWARD_TIMEOUT);
        }
    }
}

on_both_io_and_postgres! {
    /// SPEC §3, R13, R23, R24: answers decided before or without admission: 413 from the
    /// declared length before the body is sent, 413 for an over-long chunked body, 415 for a
    /// compressed body, 431, 405,
    /// 404, and 400 `schema_rejected` for a non-JSON body or one without an id. Nothing is
    /// forwarded.
    fn early_answers_and_schema_rejects(io: Io) {
        let f = Fixture::with(io, Script::always(200), |setup| {
            setup.body_bytes_max = 4096;
            setup.header_bytes_max = 2048;
        });
        let now = sign::now_unix_s();
        let path = "/webhooks/stripe-a";

        // 413 from Content-Length alone: only the head is sent.
        let id = sign::unique_id("evt_big");
        let big = sign::body(Provider::Stripe, &id, &"x".repeat(5000));
        let mut h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, now, &big);
        h.push(("Content-Length".to_owned(), big.len().to_string()));
        let mut conn = Conn::connect(f.hw.ingress);
        conn.send(&client::head("POST", path, &h));
        expect(&conn.read_response(), 413, "too_large", "Content-Length over body_bytes_max, body not sent");

        // 413 for a chunked body that grows past the limit.
        let mut h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, now, &big);
        h.push(("Transfer-Encoding".to_owned(), "chunked".to_owned()));
        let mut conn = Conn::connect(f.hw.ingress);
        let mut bytes = client::head("POST", path, &h);
        bytes.extend(client::chunked(&big, 1000));
        conn.send(&bytes);
        expect(&conn.read_response(), 413, "too_large", "chunked body over body_bytes_max");

        // 431: a head over header_bytes_max.
        let small = sign::body(Provider::Stripe, &id, "small");
        let mut h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, now, &small);
        h.push(("X-Padding".to_owned(), "p".repeat(3000)));
        let mut conn = Conn::connect(f.hw.ingress);
        conn.send(&client::request("POST", path, &h, &small));
        expect(&conn.read_response(), 431, "headers_too_large", "head over header_bytes_max");

        // 414: a request line (a long target) over header_bytes_max (RFC 9112 §3).
        let long = format!("{path}?pad={}", "p".repeat(3000));
        let mut conn = Conn::connect(f.hw.ingress);
        conn.send(&client::request("POST", &long, &h, &small));
        expect(&conn.read_response(), 414, "uri_too_long", "request line over header_bytes_max");

        // 505: another major HTTP version, and HTTP/2's prior-knowledge preface (RFC 9110
        // §15.6.6); both before the source or signature is looked at.
        for preface in ["POST /webhooks/stripe-a HTTP/2.0\r\nHost: x\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"] {
            let mut conn = Conn::connect(f.hw.ingress);
            conn.send(preface.as_bytes());
            let r = conn.read_response();
            expect(&r, 505, "version_not_supported", preface);
            assert_eq!(r.header("connection"), Some("close"), "{r}");
        }

        // 415: a declared Content-Encoding (a gzip-compressed body) is refused from the head,
        // even when the bytes carry a valid signature; `identity` is no encoding (issue 3).
        let zid = sign::unique_id("evt_gzip");
        let zbody = sign::body(Provider::Stripe, &zid, "compressed");
        for coding in ["gzip", "GZIP", "identity, gzip", "br"] {
            let mut h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &zid, now, &zbody);
            h.push(("Content-Encoding".to_owned(), coding.to_owned()));
            let r = f.hw.post("stripe-a", &h, &zbody);
            expect(&r, 415, "unsupported_encoding", &format!("Content-Encoding: {coding}"));
            assert_eq!(r.header("connection"), Some("close"), "the body is not read: {r}");
        }
        let mut h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &zid, now, &zbody);
        h.push(("Content-Encoding".to_owned(), "identity".to_owned()));
        expect(&f.hw.post("stripe-a", &h, &zbody), 200, "accepted", "Content-Encoding: identity");
        f.sink.wait_for_key(&stripe_a().key(&zid), 1, FORWARD_TIMEOUT);

        // 405 and 404.
        expect(&client::send_one(f.hw.ingress, "GET", path, &[], b""), 405, "method_not_allowed", "GET");
        let h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, now, &small);
        expect(&f.hw.post("no-such-source", &h, &small), 404, "unknown_source", "unknown source");

        // 400 schema_rejected: authentic but not JSON; authentic JSON without an id (R13).
        let not_json = b"this is not json at all".to_vec();
        let h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, "", now, &not_json);
        expect(&f.hw.post("stripe-a", &h, &not_json), 400, "schema_rejected", "non-JSON body");
        let no_id = br#"{"object":"event","type":"invoice.paid"}"#.to_vec();
        let h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, "", now, &no_id);
        expect(&f.hw.post("stripe-a", &h, &no_id), 400, "schema_rejected", "Stripe body without id");
        let gid = sign::unique_id("gh_noid");
        let gbody = sign::body(Provider::Github, &gid, "no delivery header");
        let mut gh = sign::headers(Provider::Github, sign::GITHUB_SECRET, &gid, now, &gbody);
        sign::remove_header(&mut gh, "X-GitHub-Delivery");
        expect(&f.hw.post("github-a", &gh, &gbody), 400, "schema_rejected", "GitHub without X-GitHub-Delivery");

        // The identity of the 413'd event is not burned either.
        expect(&f.hw.deliver(&stripe_a(), &id, &small), 200, "accepted", "a fitting copy afterwards");
        f.sink.wait_for_key(&stripe_a().key(&id), 1, FORWARD_TIMEOUT);
        f.flush_with_marker();
        assert_eq!(f.sink.recorded().len(), 3, "only the two accepted events and the marker were forwarded");
    }
}

on_both_io_and_postgres! {
    /// An HTTP/1.0 client keeps its connection only when the answer says `Connection:
    /// keep-alive` (RFC 9112 §9.3): two requests on one HTTP/1.0 keep-alive connection.
    fn http10_keep_alive_is_stated_and_kept(io: Io) {
        let f = Fixture::new(io, Script::always(200));
        let source = crate::harness::stripe_a();
        let mut conn = crate::client::Conn::connect(f.hw.ingress);
        for _ in 0..2 {
            let id = sign::unique_id("evt_http10");
            let body = sign::body(Provider::Stripe, &id, "x");
            let headers =
                sign::headers(Provider::Stripe, source.secrets[0].1, &id, sign::now_unix_s(), &body);
            let mut wire = format!("POST /webhooks/{} HTTP/1.0\r\nConnection: keep-alive\r\n", source.id);
            for (name, value) in &headers {
                wire.push_str(&format!("{name}: {value}\r\n"));
            }
            wire.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            let mut bytes = wire.into_bytes();
            bytes.extend_from_slice(&body);
            conn.send(&bytes);
            let r = conn.read_response();
            assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
            assert_eq!(r.header("connection"), Some("keep-alive"), "{r}");
        }
    }
}

on_both_io! {
    /// RFC 9112 §3.2: a `Host` with an invalid value (a space, a path, userinfo) is answered
    /// 400 `bad_request` and the connection closed, with nothing admitted or forwarded; the
    /// same signed delivery with a valid `Host` is then accepted.
    fn an_invalid_host_is_a_400_and_admits_nothing(io: Io) {
        let f = Fixture::new(io, Script::always(200));
        let s = stripe_a();
        let id = sign::unique_id("evt_host");
        let body = sign::body(Provider::Stripe, &id, "bad host");
        let h = sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, sign::now_unix_s(), &body);
        for host in ["a b", "h/x", "user@h", "h:80x"] {
            let valid = client::request("POST", "/webhooks/stripe-a", &h, &body);
            let text = String::from_utf8(valid).expect("an ASCII request");
            let bad = text.replacen("Host: 127.0.0.1", &format!("Host: {host}"), 1);
            let mut conn = Conn::connect(f.hw.ingress);
            conn.send(bad.as_bytes());
            let r = conn.read_response();
            expect(&r, 400, "bad_request", &format!("Host {host:?}"));
            assert_eq!(r.header("connection"), Some("close"), "Host {host:?}: closed after");
        }
        expect(&f.hw.deliver(&s, &id, &body), 200, "accepted", "the same delivery, valid Host");
        f.sink.wait_for_key(&s.key(&id), 1, FORWARD_TIMEOUT);
        f.flush_with_marker();
        assert_eq!(f.sink.for_key(&s.key(&id)).len(), 1, "forwarded once, for the valid copy");
    }
}

on_both_io! {
    /// A request answered and closed before its body was read (an unknown source, here) has
    /// the unread bytes already received discarded before the close, so the sender sees the
    /// answer and an orderly end (FIN), not a reset (RFC 9112 §9.6: a reset can make the
    /// client's TCP stack drop the answer before it was read). The epoll core once closed
    /// with the body unread, which makes the kernel send RST.
    fn a_request_closed_with_its_body_unread_ends_in_fin_not_reset(io: Io) {
        let f = Fixture::new(io, Script::always(200));
        for n in 0..20 {
            let body = vec![b'x'; 60_000];
            let mut s = std::net::TcpStream::connect(f.hw.ingress).expect("connect");
            s.set_read_timeout(Some(client::READ_TIMEOUT)).expect("timeout");
            let head = client::request("POST", "/webhooks/no-such-source", &[], &body);
            std::io::Write::write_all(&mut s, &head).expect("request");
            let mut got = Vec::new();
            let end = std::io::Read::read_to_end(&mut s, &mut got);
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 404"), "try {n}: {text}");
            assert!(end.is_ok(), "try {n}: the connection was reset: {end:?}");
        }
    }
}
