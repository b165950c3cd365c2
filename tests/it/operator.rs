//! Operator tooling (SPEC §1 `dlq`, §6 `/admin/*`, R20): the admin API behind its bearer token,
//! the `hookwall dlq` CLI against the real binary, the audit log, quarantine and rejected
//! lists, destination pause/resume, and a bulk replay. The tests marked
//! `on_rocksdb_and_postgres!` also run on the PostgreSQL ledger (`name::postgres`): the same
//! routes, answers and audit records on both.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{self, Response};
use crate::harness::{stripe_a, Fixture, Io, FORWARD_TIMEOUT};
use crate::metrics::wait_for_sample;
use crate::sign::{self, Provider};
use crate::sink::Script;

/// The admin token the operator fixtures configure.
const TOKEN: &str = "test-admin-token-0123456789";

/// `hookwall dlq ARGS… --admin URL --token-file F` (the fixture's), its output.
fn dlq(f: &Fixture, args: &[&str]) -> Output {
    let admin = format!("http://{}", f.hw.admin);
    let token_file = f.dir.path().join("admin-token");
    let token_file = token_file.display().to_string();
    dlq_raw(&[&["dlq"], args, &["--admin", &admin, "--token-file", &token_file]].concat())
}

/// `hookwall ARGS…` with no config in the environment, its output.
fn dlq_raw(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .args(args)
        .env_remove("HOOKWALL_CONFIG")
        .output()
        .expect("running hookwall dlq")
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", show(out)))
}

/// An admin request with `token` (none: no `Authorization` header).
fn admin(f: &Fixture, method: &str, path: &str, token: Option<&str>, body: &str) -> Response {
    let mut headers = Vec::new();
    if let Some(t) = token {
        headers.push(("Authorization".to_owned(), format!("Bearer {t}")));
    }
    if !body.is_empty() {
        headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
    }
    client::send_one(f.hw.admin, method, path, &headers, body.as_bytes())
}

fn encoded(key: &str) -> String {
    key.replace('/', "%2F")
}

/// Polls `GET /admin/events/{key}` until its state is `state` (bounded); returns the detail.
fn wait_for_state(f: &Fixture, key: &str, state: &str) -> Value {
    let deadline = Instant::now() + FORWARD_TIMEOUT;
    loop {
        let r = admin(f, "GET", &format!("/admin/events/{}", encoded(key)), Some(TOKEN), "");
        let v = r.json();
        if v["state"] == state {
            return v;
        }
        assert!(Instant::now() < deadline, "{key} did not become {state}: {r}");
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }
}

/// A fixture with the admin token configured; `edit` adjusts the rest.
fn fixture(script: Script, edit: impl FnOnce(&mut crate::harness::Setup)) -> Fixture {
    Fixture::with(Io::Auto, script, |setup| {
        setup.admin_token = Some(TOKEN.to_owned());
        edit(setup);
    })
}

/// The token id the audit log names: first 8 hex digits of SHA-256 of the token.
fn token_id() -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, TOKEN.as_bytes());
    hex::encode(&digest.as_ref()[..4])
}

/// R19, R20: dead after `attempts_max` → listed by the CLI → inspected (payload and last error)
/// → replayed by the CLI with a reason → delivered; the replay is in the audit log with the
/// reason and the token id, never the token.
fn dead_event_is_listed_replayed_by_the_cli_and_delivered() {
    let f = fixture(Script::always(500), |s| s.attempts_max = 2);
    let s = stripe_a();
    let id = sign::unique_id("evt_dlq");
    let key = s.key(&id);
    let body = sign::body(Provider::Stripe, &id, "dead then replayed");
    assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    f.sink.wait_for_key(&key, 2, FORWARD_TIMEOUT);
    wait_for_sample(&f.hw, "hookwall_dlq_depth", &[("source", "stripe-a")], 1.0, FORWARD_TIMEOUT);
    wait_for_state(&f, &key, "dead");

    let out = dlq(&f, &["list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let listed = stdout_json(&out);
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["key"], key.as_str());
    assert_eq!(items[0]["state"], "dead");
    assert_eq!(items[0]["attempts"], 2);
    assert_eq!(items[0]["source"], "stripe-a");
    assert!(items[0]["last_error"].as_str().unwrap_or("").contains("500"), "{listed}");
    let table = dlq(&f, &["list"]);
    assert_eq!(table.status.code(), Some(0), "{}", show(&table));
    // A source that is not configured is bad usage (exit 2), not a runtime failure.
    let unknown = dlq(&f, &["list", "--source", "nope"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", show(&unknown));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("nope"), "{}", show(&unknown));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("KEY") && text.contains(&key) && text.contains("1 dead"), "{text}");

    let out = dlq(&f, &["inspect", &key, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let detail = stdout_json(&out);
    assert_eq!(detail["payload"].as_str().map(str::as_bytes), Some(body.as_slice()));
    assert_eq!(detail["secret_id"], "k1");
    assert_eq!(detail["payload_retained"], true);
    let history = detail["attempt_history"].as_array().cloned().expect("attempt_history");
    let outcomes: Vec<(u64, &str)> = history
        .iter()
        .map(|a| (a["attempt"].as_u64().unwrap_or(0), a["outcome"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(outcomes, [(1, "retry"), (2, "dead")], "{detail}");
    assert!(history.iter().all(|a| a["error"].as_str().is_some_and(|e| e.contains("500"))));

    f.sink.answer_from_now(200);
    let out = dlq(&f, &["replay", &key, "--reason", "downstream fixed in INC-42"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("was dead"), "{}", show(&out));
    let fwd = f.sink.wait_for_key(&key, 3, FORWARD_TIMEOUT);
    assert_eq!(fwd[2].answered, 200);
    assert_eq!(fwd[2].body, body, "the replay forwards the exact bytes");
    assert_eq!(fwd[2].header("hookwall-attempt"), "1", "attempts were reset");
    let delivered = wait_for_state(&f, &key, "delivered");
    assert_eq!(delivered["attempts"], 1);
    let history = delivered["attempt_history"].as_array().cloned().expect("attempt_history");
    let last = history.last().expect("attempts recorded");
    assert_eq!(
        (history.len(), &last["attempt"], &last["outcome"]),
        (3, &1.into(), &"delivered".into())
    );
    wait_for_sample(&f.hw, "hookwall_dlq_depth", &[("source", "stripe-a")], 0.0, FORWARD_TIMEOUT);

    let audit = admin(&f, "GET", "/admin/audit", Some(TOKEN), "");
    assert_eq!(audit.status, 200, "{audit}");
    let entries = audit.json()["items"].as_array().cloned().expect("items");
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(entries[0]["action"], "replay");
    assert_eq!(entries[0]["key"], key.as_str());
    assert_eq!(entries[0]["reason"], "downstream fixed in INC-42");
    assert_eq!(entries[0]["state_before"], "dead");
    assert_eq!(entries[0]["actor"], token_id().as_str());
    assert!(!String::from_utf8_lossy(&audit.body).contains(TOKEN), "no token in the audit log");
    assert!(!f.hw.stderr().contains(TOKEN), "no token in the log");
}

on_rocksdb_and_postgres!(dead_event_is_listed_replayed_by_the_cli_and_delivered);

/// SPEC §6: `/admin/*` without a token or with a wrong one is 401 (with a reason); the CLI
/// then exits 1 naming the refusal, exits 1 when the admin API is unreachable, and 2 on bad
/// flags.
fn admin_without_or_with_a_wrong_token_is_401() {
    let f = fixture(Script::always(200), |_| {});
    for path in ["/admin/events", "/admin/audit", "/admin/events/a%2Fb%2Fc"] {
        let none = admin(&f, "GET", path, None, "");
        assert_eq!(none.answer(), (401, "unauthorized".to_owned()), "{path}: {none}");
        assert_eq!(none.header("www-authenticate"), Some("Bearer"), "{none}");
        let wrong = admin(&f, "GET", path, Some("test-admin-token-0123456788"), "");
        assert_eq!(wrong.answer(), (401, "unauthorized".to_owned()), "{path}: {wrong}");
    }
    let wrong =
        admin(&f, "POST", "/admin/events/a%2Fb%2Fc/drop", Some("nope"), r#"{"reason":"x"}"#);
    assert_eq!(wrong.status, 401, "{wrong}");
    let log = f.hw.stderr();
    assert!(log.contains("admin_unauthorized"), "refusals are logged:\n{log}");
    assert!(!log.contains("test-admin-token-0123456788"), "never the presented token:\n{log}");
    let right = admin(&f, "GET", "/admin/events", Some(TOKEN), "");
    assert_eq!(right.status, 200, "{right}");
    assert_eq!(right.json()["items"], serde_json::json!([]));

    let bad_token = f.dir.path().join("wrong-token");
    std::fs::write(&bad_token, "not-the-token\n").expect("writing a token file");
    let admin_url = format!("http://{}", f.hw.admin);
    let bad = bad_token.display().to_string();
    let out = dlq_raw(&["dlq", "list", "--admin", &admin_url, "--token-file", &bad]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the token"), "{}", show(&out));

    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("probe port");
    let dead_url = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let out = dlq_raw(&["dlq", "list", "--admin", &dead_url, "--token-file", &bad]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach the admin API"),
        "{}",
        show(&out)
    );

    for args in [
        &["dlq", "replay", "t/s/e"][..],                // no --reason
        &["dlq", "drop", "t/s/e", "--reason", " "][..], // blank reason
        &["dlq", "replay", "t/s/e", "--all", "--reason", "x"][..], // keys and --all
        &["dlq", "list", "--state", "sleeping"][..],    // unknown state
    ] {
        let out = dlq_raw(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
    }
    // A key that is not tenant/source/event id is bad usage before any request (the admin
    // API here is unreachable: the network would make it exit 1).
    for (command, key) in
        [("inspect", ""), ("inspect", "t/s"), ("drop", "t//e"), ("replay", "/s/e")]
    {
        let reason: &[&str] = if command == "inspect" { &[] } else { &["--reason", "x"] };
        let args = [&["dlq", command, key, "--admin", &dead_url, "--token-file", &bad][..], reason]
            .concat();
        let out = dlq_raw(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("tenant/source/event id"),
            "{}",
            show(&out)
        );
    }
    let out = dlq_raw(&["dlq", "list", "-c", "/nonexistent/hookwall.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/hookwall.toml"),
        "{}",
        show(&out)
    );
}

on_rocksdb_and_postgres!(admin_without_or_with_a_wrong_token_is_401);

/// docs/admin.md "Errors": a key segment that is empty, not UTF-8 once percent-decoded, or a
/// malformed percent-escape (`%zz`, a `%` without two hex digits) is 400 `bad_key` on every
/// route that takes a key; it is not looked up as the literal text (which answered 404).
#[test]
fn a_malformed_key_segment_is_400_bad_key() {
    let f = fixture(Script::always(200), |_| {});
    for segment in ["%ff", "%zz", "acme%2Fstripe-a%2Fevt%2", "evt_1%", "%C3%28", "%%41"] {
        let get = admin(&f, "GET", &format!("/admin/events/{segment}"), Some(TOKEN), "");
        assert_eq!(get.answer(), (400, "bad_key".to_owned()), "GET {segment}: {get}");
        for action in ["replay", "drop"] {
            let path = format!("/admin/events/{segment}/{action}");
            let post = admin(&f, "POST", &path, Some(TOKEN), r#"{"reason":"x"}"#);
            assert_eq!(post.answer(), (400, "bad_key".to_owned()), "POST {path}: {post}");
        }
    }
    // A well-formed key that names no event is still 404.
    let unknown = admin(&f, "GET", "/admin/events/acme%2Fstripe-a%2Fnope%41", Some(TOKEN), "");
    assert_eq!(unknown.answer(), (404, "not_found".to_owned()), "{unknown}");
}

/// R20: a drop needs a reason (400 without), settles the event as dropped (no further attempt),
/// is audited, and a delivered event cannot be replayed (409).
fn drop_needs_a_reason_and_is_audited() {
    let f = fixture(Script::always(503), |s| {
        s.backoff_min = "1h";
        s.backoff_max = "1h";
    });
    let s = stripe_a();
    let id = sign::unique_id("evt_drop");
    let key = s.key(&id);
    let body = sign::body(Provider::Stripe, &id, "dropped while failing");
    assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    f.sink.wait_for_key(&key, 1, FORWARD_TIMEOUT);
    wait_for_state(&f, &key, "failed");
    let path = format!("/admin/events/{}/drop", encoded(&key));
    let no_reason = admin(&f, "POST", &path, Some(TOKEN), "");
    assert_eq!(no_reason.answer(), (400, "reason_required".to_owned()), "{no_reason}");
    let blank = admin(&f, "POST", &path, Some(TOKEN), r#"{"reason":"  "}"#);
    assert_eq!(blank.answer(), (400, "reason_required".to_owned()), "{blank}");
    let not_json = admin(&f, "POST", &path, Some(TOKEN), "reason=spam");
    assert_eq!(not_json.answer(), (400, "bad_body".to_owned()), "{not_json}");
    let not_object = admin(&f, "POST", &path, Some(TOKEN), "[1]");
    assert_eq!(not_object.answer(), (400, "bad_body".to_owned()), "{not_object}");
    let a_list = admin(&f, "POST", &path, Some(TOKEN), r#"["test traffic"]"#);
    assert_eq!(a_list.answer(), (400, "bad_body".to_owned()), "{a_list}");
    // A field the action does not take, or `reason` twice, is refused, not ignored.
    let extra = admin(&f, "POST", &path, Some(TOKEN), r#"{"reason":"x","force":true}"#);
    assert_eq!(extra.answer(), (400, "bad_body".to_owned()), "{extra}");
    assert!(extra.json()["message"].as_str().is_some_and(|m| m.contains("force")), "{extra}");
    let twice = admin(&f, "POST", &path, Some(TOKEN), r#"{"reason":"x","reason":"y"}"#);
    assert_eq!(twice.answer(), (400, "bad_body".to_owned()), "{twice}");
    let misspelt = admin(&f, "POST", &path, Some(TOKEN), r#"{"reasn":"spam"}"#);
    assert_eq!(misspelt.answer(), (400, "bad_body".to_owned()), "{misspelt}");
    let dropped = admin(&f, "POST", &path, Some(TOKEN), r#"{"reason":"test traffic"}"#);
    assert_eq!(dropped.answer(), (200, "dropped".to_owned()), "{dropped}");
    assert_eq!(dropped.json()["state_before"], "failed");
    wait_for_state(&f, &key, "dropped");
    let again = admin(&f, "POST", &path, Some(TOKEN), r#"{"reason":"twice"}"#);
    assert_eq!(again.answer(), (409, "wrong_state".to_owned()), "{again}");
    let unknown = admin(
        &f,
        "POST",
        "/admin/events/acme%2Fstripe-a%2Fnope/drop",
        Some(TOKEN),
        r#"{"reason":"x"}"#,
    );
    assert_eq!(unknown.answer(), (404, "not_found".to_owned()), "{unknown}");
    let get_only = admin(&f, "GET", &path, Some(TOKEN), "");
    assert_eq!(get_only.status, 405, "{get_only}");

    let audit = admin(&f, "GET", "/admin/audit?limit=10", Some(TOKEN), "").json();
    let items = audit["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 1, "only the carried-out action is audited: {audit}");
    assert_eq!(items[0]["action"], "drop");
    assert_eq!(items[0]["reason"], "test traffic");
    assert_eq!(items[0]["state_before"], "failed");

    // A delivered event cannot be replayed.
    f.sink.answer_from_now(200);
    let id2 = sign::unique_id("evt_ok");
    let key2 = s.key(&id2);
    let body2 = sign::body(Provider::Stripe, &id2, "delivered");
    assert_eq!(f.hw.deliver(&s, &id2, &body2).code(), "accepted");
    wait_for_state(&f, &key2, "delivered");
    let path2 = format!("/admin/events/{}/replay", encoded(&key2));
    let replay = admin(&f, "POST", &path2, Some(TOKEN), "");
    assert_eq!(replay.answer(), (400, "reason_required".to_owned()), "SPEC §6: {replay}");
    let replay = admin(&f, "POST", &path2, Some(TOKEN), r#"{"reason":"again"}"#);
    assert_eq!(replay.answer(), (409, "wrong_state".to_owned()), "{replay}");
    assert_eq!(f.sink.for_key(&key).len(), 1, "a dropped event gets no further attempt");
}

on_rocksdb_and_postgres!(drop_needs_a_reason_and_is_audited);

/// R11, R23, item 4: conflicts and schema rejects are listed through the same API and CLI with
/// reason codes and fingerprints, never a body.
fn quarantined_and_rejected_are_listed() {
    let f = fixture(Script::always(200), |_| {});
    let s = stripe_a();
    let id = sign::unique_id("evt_conflict");
    let first = sign::body(Provider::Stripe, &id, "first binding");
    let second = sign::body(Provider::Stripe, &id, "other bytes");
    assert_eq!(f.hw.deliver(&s, &id, &first).code(), "accepted");
    assert_eq!(f.hw.deliver(&s, &id, &second).code(), "conflict");
    let not_json = b"secret-looking-body-that-is-not-json".to_vec();
    let headers =
        sign::headers(Provider::Stripe, s.secrets[0].1, "x", sign::now_unix_s(), &not_json);
    assert_eq!(f.hw.post(s.id, &headers, &not_json).status, 400);

    let out = dlq(&f, &["list", "--state", "quarantined", "--json", "--source", "stripe-a"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let q = stdout_json(&out);
    let items = q["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 1, "{q}");
    assert_eq!(items[0]["key"], s.key(&id).as_str());
    assert_eq!(items[0]["reason"], "conflict");
    assert_ne!(items[0]["first_fingerprint"], items[0]["new_fingerprint"]);

    let deadline = Instant::now() + FORWARD_TIMEOUT;
    let rejected = loop {
        // Rejects are recorded best effort, after the 400: wait until listed.
        let out = dlq(&f, &["list", "--state", "rejected", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        let v = stdout_json(&out);
        if !v["items"].as_array().expect("items").is_empty() || Instant::now() >= deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    };
    let items = rejected["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 1, "{rejected}");
    assert_eq!(items[0]["source"], "stripe-a");
    assert_eq!(items[0]["state"], "rejected");
    assert!(items[0]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{rejected}");
    assert!(!rejected.to_string().contains("secret-looking"), "no body in the list");

    let bad = admin(&f, "GET", "/admin/events?state=sleeping", Some(TOKEN), "");
    assert_eq!(bad.answer(), (400, "bad_query".to_owned()), "{bad}");
    let bad = admin(&f, "GET", "/admin/events?source=nope", Some(TOKEN), "");
    assert_eq!(bad.answer(), (400, "bad_query".to_owned()), "{bad}");
    let bad = admin(&f, "GET", "/admin/events?limit=1001", Some(TOKEN), "");
    assert_eq!(bad.answer(), (400, "bad_query".to_owned()), "{bad}");
    let bad = admin(&f, "GET", "/admin/events?state=dead&state=quarantined", Some(TOKEN), "");
    assert_eq!(bad.answer(), (400, "bad_query".to_owned()), "a repeated parameter: {bad}");
    let bad = admin(&f, "GET", "/admin/events?cursor=zz", Some(TOKEN), "");
    assert_eq!(bad.answer(), (400, "bad_cursor".to_owned()), "{bad}");
    let bad = admin(&f, "GET", "/admin/audit?limit=1&limit=2", Some(TOKEN), "");
    assert_eq!(bad.answer(), (400, "bad_query".to_owned()), "a repeated parameter: {bad}");
}

on_rocksdb_and_postgres!(quarantined_and_rejected_are_listed);

/// Item 5: a destination configured `paused = true` gets no attempt while events are admitted;
/// resume (audited) delivers them.
fn pause_stops_attempts_and_resume_delivers() {
    let f = fixture(Script::always(200), |s| s.paused = true);
    let s = stripe_a();
    let ids: Vec<String> = (0..5).map(|_| sign::unique_id("evt_paused")).collect();
    for id in &ids {
        let body = sign::body(Provider::Stripe, id, "waits");
        assert_eq!(f.hw.deliver(&s, id, &body).code(), "accepted");
    }
    wait_for_sample(
        &f.hw,
        "hookwall_inbox_pending",
        &[("source", "stripe-a")],
        5.0,
        FORWARD_TIMEOUT,
    );
    let listed = admin(&f, "GET", "/admin/destinations", Some(TOKEN), "").json();
    assert_eq!(listed["items"][0]["paused"], true, "{listed}");
    wait_for_sample(
        &f.hw,
        "hookwall_dispatch_paused",
        &[("destination", "sink")],
        1.0,
        FORWARD_TIMEOUT,
    );
    // The one bounded wait for absence: a paused destination gets nothing.
    f.sink.assert_no_more_within(0, Duration::from_millis(500));

    let resumed = admin(
        &f,
        "POST",
        "/admin/destinations/sink/resume",
        Some(TOKEN),
        r#"{"reason":"bench done"}"#,
    );
    assert_eq!(resumed.answer(), (200, "resumed".to_owned()), "{resumed}");
    for id in &ids {
        f.sink.wait_for_key(&s.key(id), 1, FORWARD_TIMEOUT);
    }
    wait_for_sample(
        &f.hw,
        "hookwall_inbox_pending",
        &[("source", "stripe-a")],
        0.0,
        FORWARD_TIMEOUT,
    );

    let paused = admin(&f, "POST", "/admin/destinations/sink/pause", Some(TOKEN), "");
    assert_eq!(paused.answer(), (400, "reason_required".to_owned()), "SPEC §6: {paused}");
    let why = r#"{"reason":"maintenance"}"#;
    let paused = admin(&f, "POST", "/admin/destinations/sink/pause", Some(TOKEN), why);
    assert_eq!(paused.answer(), (200, "paused".to_owned()), "{paused}");
    let before = f.sink.recorded().len();
    let id = sign::unique_id("evt_paused_again");
    assert_eq!(f.hw.deliver(&s, &id, &sign::body(Provider::Stripe, &id, "w")).code(), "accepted");
    wait_for_sample(
        &f.hw,
        "hookwall_inbox_pending",
        &[("source", "stripe-a")],
        1.0,
        FORWARD_TIMEOUT,
    );
    f.sink.assert_no_more_within(before, Duration::from_millis(500));
    let unknown = admin(&f, "POST", "/admin/destinations/nope/pause", Some(TOKEN), why);
    assert_eq!(unknown.status, 404, "{unknown}");

    let audit = admin(&f, "GET", "/admin/audit", Some(TOKEN), "").json();
    let actions: Vec<(&str, &str)> = audit["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|a| (a["action"].as_str().unwrap_or(""), a["destination"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(actions, [("pause", "sink"), ("resume", "sink")], "newest first: {audit}");
}

on_rocksdb_and_postgres!(pause_stops_attempts_and_resume_delivers);

/// An attempt that could not be made because hookwall itself ran out of file descriptors
/// (`EMFILE` on connect) is not the destination's failure: it is retried without counting
/// toward `attempts_max` or the circuit breaker, so the event is delivered once descriptors
/// are back, as attempt 1 (R19, R21). Before, each such connect counted: at `attempts_max = 2`
/// the events were dead-lettered ("connect: Too many open files (attempt 2 of 2)") and the
/// breaker opened on a working destination. `hookwall_dispatch_attempts_total` counts them as
/// `not_attempted`, never as `retry` (before, every one was a retry). The admin API is reached
/// over a connection opened before the limit was lowered. RocksDB only: a PostgreSQL ledger
/// needs descriptors too.
#[test]
fn an_attempt_without_a_descriptor_is_retried_uncounted() {
    let f = fixture(Script::always(200), |s| {
        s.paused = true;
        s.attempts_max = 2;
        s.breaker_failures_max = Some(2);
        s.backoff_min = "20ms";
        s.backoff_max = "20ms";
    });
    let s = stripe_a();
    let ids: Vec<String> = (0..3).map(|_| sign::unique_id("evt_no_descriptor")).collect();
    for id in &ids {
        let body = sign::body(Provider::Stripe, id, "waits for a descriptor");
        assert_eq!(f.hw.deliver(&s, id, &body).code(), "accepted");
    }
    let auth = vec![("Authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let mut held = client::Conn::connect(f.hw.admin);
    let mut call = |method: &str, path: &str, body: &str| {
        held.send(&client::request(method, path, &auth, body.as_bytes()));
        held.read_response()
    };
    assert_eq!(call("GET", "/healthz", "").status, 200);
    let old = f.hw.exhaust_descriptors();
    let resumed = call("POST", "/admin/destinations/sink/resume", r#"{"reason":"no descriptors"}"#);
    assert_eq!(resumed.answer(), (200, "resumed".to_owned()), "{resumed}");
    // Each event is tried (and fails for want of a descriptor) several times over its
    // `attempts_max`: every 20 ms. The metric counts those as not attempted, never as retries
    // (before, each was a `retry`: an outage of the destination, to whoever watched it).
    let counted = |call: &mut dyn FnMut(&str, &str, &str) -> Response, outcome: &str| {
        let text = String::from_utf8_lossy(&call("GET", "/metrics", "").body).into_owned();
        let labels = [("destination", "sink"), ("outcome", outcome)];
        crate::metrics::sample(&text, "hookwall_dispatch_attempts_total", &labels).unwrap_or(0.0)
    };
    let deadline = Instant::now() + FORWARD_TIMEOUT;
    while counted(&mut call, "not_attempted") < 4.0 * ids.len() as f64 {
        assert_eq!(counted(&mut call, "retry"), 0.0, "an attempt not made counted as a retry");
        let log = f.hw.stderr();
        assert!(!log.contains("dead_lettered"), "dead-lettered for want of a descriptor:\n{log}");
        assert!(Instant::now() < deadline, "no retries without descriptors:\n{log}");
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }
    let log = f.hw.stderr();
    assert!(log.contains("destination_out_of_descriptors"), "the cause is logged:\n{log}");
    for id in &ids {
        let r = call("GET", &format!("/admin/events/{}", encoded(&s.key(id))), "");
        let v = r.json();
        assert_eq!(v["state"], "failed", "waiting for the next try, not dead: {r}");
        assert_eq!(v["attempts"], 0, "no attempt was made: {r}");
    }
    let listed = call("GET", "/admin/destinations", "").json();
    assert_eq!(listed["items"][0]["breaker"], "closed", "{listed}");
    f.hw.restore_nofile(old);
    for id in &ids {
        let forwards = f.sink.wait_for_key(&s.key(id), 1, FORWARD_TIMEOUT);
        let attempts: Vec<&str> = forwards.iter().map(|r| r.header("hookwall-attempt")).collect();
        assert_eq!(attempts, ["1"], "delivered at its first attempt");
    }
    assert_eq!(counted(&mut call, "retry"), 0.0, "no attempt failed");
    let log = f.hw.stderr();
    assert!(!log.contains("dead_lettered") && !log.contains("breaker_open"), "{log}");
}

/// While hookwall is out of descriptors, a destination keeps using the connection it has
/// open: its backlog drains through it as fast as the destination answers (R21, issue 6's
/// review). Before, the requests handed to its unconnected links failed for want of a
/// descriptor, and each failure held the whole destination for `backoff_min`: one event per
/// `backoff_min` here (40 events, `backoff_min = 2s`: 80 s), ~170 s for 300 events to a
/// 20 ms sink in the review's reproduction. One connection is opened before the limit is
/// lowered (`concurrency_max = 16`, `pipeline = 1`: 16 links); the 40 events must arrive,
/// each once and as attempt 1, within [`DRAIN_MAX`] while the limit stays lowered.
#[test]
fn a_destination_short_of_descriptors_drains_through_its_open_connection() {
    const EVENTS: usize = 40;
    /// A quarter of the 80 s the drain took before.
    const DRAIN_MAX: Duration = Duration::from_secs(20);
    let f = fixture(Script::always(200).slow(Duration::from_millis(5)), |s| {
        s.backoff_min = "2s";
        s.backoff_max = "2s";
    });
    let s = stripe_a();
    let warm = sign::unique_id("evt_warm");
    let body = sign::body(Provider::Stripe, &warm, "opens the connection");
    assert_eq!(f.hw.deliver(&s, &warm, &body).code(), "accepted");
    f.sink.wait_for_key(&s.key(&warm), 1, FORWARD_TIMEOUT);
    let auth = vec![("Authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let mut held = client::Conn::connect(f.hw.admin);
    let mut call = |method: &str, path: &str, body: &str| {
        held.send(&client::request(method, path, &auth, body.as_bytes()));
        held.read_response()
    };
    let paused = call("POST", "/admin/destinations/sink/pause", r#"{"reason":"backlog"}"#);
    assert_eq!(paused.status, 200, "{paused}");
    let ids: Vec<String> = (0..EVENTS).map(|_| sign::unique_id("evt_short")).collect();
    for id in &ids {
        let body = sign::body(Provider::Stripe, id, "drains through the open connection");
        assert_eq!(f.hw.deliver(&s, id, &body).code(), "accepted");
    }
    let old = f.hw.exhaust_descriptors();
    let resumed = call("POST", "/admin/destinations/sink/resume", r#"{"reason":"drain"}"#);
    assert_eq!(resumed.answer(), (200, "resumed".to_owned()), "{resumed}");
    let keys: Vec<String> = ids.iter().map(|id| s.key(id)).collect();
    let all = f.sink.wait_until(DRAIN_MAX, "the backlog through the open connection", |r| {
        keys.iter().all(|k| r.iter().any(|r| r.header("idempotency-key") == k))
    });
    let log = f.hw.stderr();
    assert!(log.contains("destination_out_of_descriptors"), "starved meanwhile:\n{log}");
    f.hw.restore_nofile(old);
    for key in &keys {
        let forwards: Vec<&str> = all
            .iter()
            .filter(|r| r.header("idempotency-key") == key)
            .map(|r| r.header("hookwall-attempt"))
            .collect();
        assert_eq!(forwards, ["1"], "{key}: delivered once, at its first attempt");
    }
    assert!(!log.contains("dead_lettered") && !log.contains("breaker_open"), "{log}");
}

/// A burst of concurrent admin reads grows hookwall by at most the admin runtime's blocking
/// pool (`ADMIN_BLOCKING_THREADS` = 4 threads, one of them started with the runtime; the
/// start-up thread check leaves room for them). Before, tokio's default pool (up to 512 threads) started a thread per read that
/// found the others busy: a script listing in parallel could take the process past a thread
/// limit (`TasksMax=`), where RocksDB aborts the process when it next needs a thread.
#[test]
fn a_burst_of_admin_reads_adds_at_most_the_admin_pool_of_threads() {
    const READERS: usize = 32;
    const READS: usize = 10;
    use hookwall::admin::ADMIN_BLOCKING_THREADS;
    let f = fixture(Script::always(200), |s| s.paused = true);
    let s = stripe_a();
    for _ in 0..200 {
        let id = sign::unique_id("evt_burst");
        let body = sign::body(Provider::Stripe, &id, "listed by many readers at once");
        assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    }
    let before = f.hw.threads();
    let auth = vec![("Authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let start = std::sync::Barrier::new(READERS);
    std::thread::scope(|scope| {
        for _ in 0..READERS {
            let (auth, start, addr) = (&auth, &start, f.hw.admin);
            scope.spawn(move || {
                let mut conn = client::Conn::connect(addr);
                start.wait();
                for _ in 0..READS {
                    conn.send(&client::request("GET", "/admin/events?limit=1000", auth, b""));
                    let r = conn.read_response();
                    assert_eq!(r.status, 200, "{r}");
                }
            });
        }
    });
    // tokio keeps an idle blocking thread for 10 s: the ones the burst started are still here.
    let after = f.hw.threads();
    assert!(
        after < before + ADMIN_BLOCKING_THREADS,
        "{before} threads before {READERS} concurrent readers, {after} after"
    );
}

/// R20 (issue 4 proof): `dlq replay --all` over 10 000 dead events pages through the list,
/// replays every one (throttled by `--rate`), and each is then delivered exactly once more —
/// with bounded memory: the CLI's peak RSS stays under [`CLI_RSS_MAX_KIB`] and the server's
/// grows by less than [`SERVER_RSS_GROWTH_MAX_KIB`] over the replay and redelivery (nothing
/// loads the whole dead-letter queue).
#[test]
fn bulk_replay_of_many_dead_events() {
    const EVENTS: usize = 10_000;
    const SENDERS: usize = 4;
    let f = fixture(Script::always(400), |s| s.cores = 1);
    let s = stripe_a();
    let prefix = sign::unique_id("evt_bulk");
    let keys: Vec<String> = std::thread::scope(|scope| {
        let senders: Vec<_> = (0..SENDERS)
            .map(|t| {
                let (s, prefix, addr) = (&s, &prefix, f.hw.ingress);
                scope.spawn(move || {
                    let mut conn = client::Conn::connect(addr);
                    let mut keys = Vec::with_capacity(EVENTS / SENDERS);
                    for n in (t..EVENTS).step_by(SENDERS) {
                        let id = format!("{prefix}_{n}");
                        let body = sign::body(Provider::Stripe, &id, "bulk");
                        let headers = sign::headers(
                            Provider::Stripe,
                            s.secrets[0].1,
                            &id,
                            sign::now_unix_s(),
                            &body,
                        );
                        conn.send(&client::request("POST", "/webhooks/stripe-a", &headers, &body));
                        let r = conn.read_response();
                        assert_eq!(r.code(), "accepted", "{r}");
                        keys.push(s.key(&id));
                    }
                    keys
                })
            })
            .collect();
        senders.into_iter().flat_map(|h| h.join().expect("sender")).collect()
    });
    assert_eq!(keys.len(), EVENTS);
    let depth = EVENTS as f64;
    let bound = Duration::from_secs(120);
    wait_for_sample(&f.hw, "hookwall_dlq_depth", &[("source", "stripe-a")], depth, bound);
    let server_before = f.hw.peak_rss_kib();
    f.sink.answer_from_now(200);
    let admin_url = format!("http://{}", f.hw.admin);
    let token_file = f.dir.path().join("admin-token").display().to_string();
    let args = [
        "dlq",
        "replay",
        "--all",
        "--source",
        "stripe-a",
        "--reason",
        "bulk",
        "--rate",
        "5000",
        "--json",
        "--admin",
        &admin_url,
        "--token-file",
        &token_file,
    ];
    let (out, cli_peak_kib) = run_measured(&args);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let summary = stdout_json(&out);
    assert_eq!(summary["replayed"], EVENTS, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    wait_for_sample(&f.hw, "hookwall_dlq_depth", &[("source", "stripe-a")], 0.0, bound);
    let all = f.sink.wait_until(bound, "every replay delivered", |r| {
        r.iter().filter(|r| r.answered == 200).count() >= EVENTS
    });
    let mut delivered = std::collections::HashMap::new();
    for r in all.iter().filter(|r| r.answered == 200) {
        *delivered.entry(r.header("idempotency-key")).or_insert(0) += 1;
    }
    for key in &keys {
        assert_eq!(delivered.get(key.as_str()), Some(&1), "{key} delivered once after the replay");
    }
    let audit = admin(&f, "GET", "/admin/audit?limit=1000", Some(TOKEN), "").json();
    assert_eq!(audit["items"].as_array().map(Vec::len), Some(1000), "one audit record per replay");
    assert!(audit["next_cursor"].is_string(), "more audit records on the next page");
    assert!(
        cli_peak_kib < CLI_RSS_MAX_KIB,
        "hookwall dlq replay --all peaked at {cli_peak_kib} KiB for {EVENTS} events"
    );
    let growth = f.hw.peak_rss_kib().saturating_sub(server_before);
    assert!(
        growth < SERVER_RSS_GROWTH_MAX_KIB,
        "the server's peak RSS grew by {growth} KiB over a replay of {EVENTS} events"
    );
}

/// Peak RSS allowed to `hookwall dlq replay --all` (KiB): a page of 1 000 events at a time.
const CLI_RSS_MAX_KIB: u64 = 64 * 1024;
/// Growth of the server's peak RSS allowed over a bulk replay and redelivery (KiB).
const SERVER_RSS_GROWTH_MAX_KIB: u64 = 48 * 1024;

/// Runs `hookwall ARGS…` to completion; its output and its peak RSS in KiB, the highest
/// `VmHWM` of the child's own address space sampled from `/proc/PID/status` while it runs.
///
/// Not `ru_maxrss` from wait4: Linux folds the RSS of the address space a process had before
/// `exec` into its `ru_maxrss`, and a child spawned from this test binary starts out in the
/// test binary's (vfork) or a copy of it (fork) — so `ru_maxrss` reported the test binary's
/// RSS, hundreds of MiB while other tests run, not the CLI's. Samples are taken only once
/// `/proc/PID/exe` is no longer this test binary, i.e. after `exec` replaced the address space
/// (compared with `/proc/self/exe`, not with `CARGO_BIN_EXE_hookwall`: the kernel's path is
/// the resolved one, which differs from cargo's when the target dir's path holds a symlink).
/// Panics, with the CLI's stderr, if it runs longer than [`CLI_RUN_MAX`].
fn run_measured(args: &[&str]) -> (Output, u64) {
    use std::io::Read as _;
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_hookwall"));
    let mut child = Command::new(bin)
        .args(args)
        .env_remove("HOOKWALL_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running hookwall dlq");
    let pipe = |p: Option<Box<dyn std::io::Read + Send>>| {
        let mut p = p.expect("piped");
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = p.read_to_end(&mut bytes);
            bytes
        })
    };
    let out_reader = pipe(child.stdout.take().map(|p| Box::new(p) as _));
    let err_reader = pipe(child.stderr.take().map(|p| Box::new(p) as _));
    let proc_exe = format!("/proc/{}/exe", child.id());
    let this_test = std::fs::read_link("/proc/self/exe").expect("/proc/self/exe");
    let deadline = Instant::now() + CLI_RUN_MAX;
    let (mut peak, mut samples) = (0u64, 0u32);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err_reader.join().expect("stderr");
            panic!(
                "hookwall {args:?} still ran after {CLI_RUN_MAX:?}; stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        // Read exe first: once it is no longer this test binary, exec has switched the
        // address space, so the VmHWM that follows is the CLI's own.
        let execed = std::fs::read_link(&proc_exe).is_ok_and(|exe| exe != this_test);
        if let Some(kib) = execed.then(|| crate::harness::peak_rss_kib(child.id())).flatten() {
            peak = peak.max(kib);
            samples += 1;
        }
        std::thread::sleep(Duration::from_millis(2)); // sampling interval
    };
    let (stdout, stderr) = (out_reader.join().expect("stdout"), err_reader.join().expect("stderr"));
    let out = Output { status, stdout, stderr };
    assert!(samples > 0, "the CLI's RSS was never sampled while it ran: {}", show(&out));
    (out, peak)
}

/// How long [`run_measured`] lets the CLI run (10 000 replays at `--rate 5000` take about 2 s
/// unloaded; generous for a loaded 2-core CI machine).
const CLI_RUN_MAX: Duration = Duration::from_secs(300);

/// Item 6: after `breaker_failures_max` consecutive failures the breaker opens (metric and
/// admin view) and the destination is probed with one attempt at a time, at most one per
/// `backoff_min`; the first success closes it. With `attempts_max = 5` and probes spaced by
/// 100 ms, no event exhausts its attempts before the destination recovers (without the breaker
/// every event would be dead within a second), and the failed attempts number at most one per
/// event plus the probes.
#[test]
fn breaker_opens_on_failures_and_closes_on_success() {
    const EVENTS: usize = 8;
    let f = fixture(Script::always(503), |s| {
        s.breaker_failures_max = Some(3);
        s.attempts_max = 5;
        s.backoff_min = "100ms";
        s.backoff_max = "1s";
    });
    let s = stripe_a();
    let ids: Vec<String> = (0..EVENTS).map(|_| sign::unique_id("evt_breaker")).collect();
    for id in &ids {
        assert_eq!(f.hw.deliver(&s, id, &sign::body(Provider::Stripe, id, "b")).code(), "accepted");
    }
    let open = [("destination", "sink")];
    wait_for_sample(&f.hw, "hookwall_dispatch_breaker_open", &open, 1.0, FORWARD_TIMEOUT);
    let listed = admin(&f, "GET", "/admin/destinations", Some(TOKEN), "").json();
    assert_eq!(listed["items"][0]["breaker"], "open", "{listed}");
    // Two probes fail, then the destination recovers.
    let probes_from = f.sink.recorded().len();
    f.sink.wait_until(FORWARD_TIMEOUT, "two probes", |r| r.len() >= probes_from + 2);
    f.sink.answer_from_now(200);
    let all = f.sink.wait_until(FORWARD_TIMEOUT, "every event delivered", |r| {
        ids.iter().all(|id| {
            let key = s.key(id);
            r.iter().any(|r| r.header("idempotency-key") == key && r.answered == 200)
        })
    });
    wait_for_sample(&f.hw, "hookwall_dispatch_breaker_open", &open, 0.0, FORWARD_TIMEOUT);
    wait_for_sample(
        &f.hw,
        "hookwall_inbox_pending",
        &[("source", "stripe-a")],
        0.0,
        FORWARD_TIMEOUT,
    );
    let text = wait_for_sample(
        &f.hw,
        "hookwall_dlq_depth",
        &[("source", "stripe-a")],
        0.0,
        FORWARD_TIMEOUT,
    );
    let dead = [("destination", "sink"), ("outcome", "dead")];
    assert_eq!(crate::metrics::sample(&text, "hookwall_dispatch_attempts_total", &dead), Some(0.0));
    let failed = all.iter().filter(|r| r.answered == 503).count();
    // At most one failed attempt per event before the breaker opened, plus the two probes
    // and one more that may have started while the test switched the destination back on.
    assert!(failed <= EVENTS + 3, "{failed} failed attempts: the breaker did not hold them back");
}

/// R20 (issue 4 item 3): every configuration reload is an operator action in the audit log:
/// a refused one with its reason, an applied one with what it put in force; actor `sighup`.
fn config_reloads_are_audited() {
    let mut f = fixture(Script::always(200), |_| {});
    let mut bad = f.hw.setup.clone();
    bad.backoff_min = "soon";
    assert!(!f.hw.reload(&bad), "a bad file is refused");
    let good = f.hw.setup.clone();
    assert!(f.hw.reload(&good), "the good file is applied:\n{}", f.hw.stderr());
    let audit = admin(&f, "GET", "/admin/audit?limit=10", Some(TOKEN), "").json();
    let items = audit["items"].as_array().cloned().expect("items");
    let reasons: Vec<&str> = items
        .iter()
        .filter(|i| i["action"] == "config_reload" && i["actor"] == "sighup")
        .map(|i| i["reason"].as_str().expect("a reason"))
        .collect();
    assert_eq!(reasons.len(), 2, "both reloads are audited: {audit}");
    assert!(
        reasons.iter().any(
            |r| r.starts_with("refused: ") && r.ends_with("error(s) in the file (see the log)")
        ),
        "the refused reload and why: {audit}"
    );
    assert!(
        reasons.iter().any(|r| r.starts_with("applied: 4 sources, 1 destinations")),
        "the applied reload: {audit}"
    );
}

on_rocksdb_and_postgres!(config_reloads_are_audited);

/// Retention of this test (R25): short, so a real run shows expiry within seconds; the shard
/// writers then sweep every quarter of the shorter one (500 ms), so the payload is gone ~2 s
/// before the identity.
const PAYLOAD_RETENTION: Duration = Duration::from_secs(2);
const DEDUPE_RETENTION: Duration = Duration::from_secs(6);

/// Polls `GET /admin/events/{key}` until `done(answer)` (bounded by 40 s, room for a loaded
/// machine); returns the answer.
fn poll_event(f: &Fixture, key: &str, what: &str, done: impl Fn(&Response) -> bool) -> Response {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let r = admin(f, "GET", &format!("/admin/events/{}", encoded(key)), Some(TOKEN), "");
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "{key}: {what} did not happen: {r}");
        std::thread::sleep(Duration::from_millis(100)); // poll interval
    }
}

/// R25 (issue 4 item 6) over the real binary: a delivered event keeps its payload for
/// `payload_retention` and its identity for `dedupe_retention` — copies inside the window are
/// duplicates — and neither is removed early; after `dedupe_retention` the identity is gone
/// and a copy is admitted and forwarded anew. (The ledger's own test drives the same sweep
/// with a controllable clock:
/// `ledger::tests::retention_expires_payloads_then_identities_of_settled_events_only`.)
fn retention_removes_payload_then_identity_never_early() {
    let f = fixture(Script::always(200), |s| {
        s.ledger_extra = format!(
            "payload_retention = \"{}s\"\ndedupe_retention = \"{}s\"",
            PAYLOAD_RETENTION.as_secs(),
            DEDUPE_RETENTION.as_secs()
        );
    });
    let s = stripe_a();
    let id = sign::unique_id("evt_retention");
    let body = sign::body(Provider::Stripe, &id, "kept for a while");
    let key = s.key(&id);
    let sent_at = Instant::now();
    assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    f.sink.wait_for_key(&key, 1, FORWARD_TIMEOUT);
    let detail = wait_for_state(&f, &key, "delivered");
    assert_eq!(detail["payload_retained"], true, "{detail}");
    let r = f.hw.deliver(&s, &id, &body);
    if sent_at.elapsed() < DEDUPE_RETENTION {
        assert_eq!(r.code(), "duplicate", "a copy inside dedupe_retention: {r}");
    }

    let gone = poll_event(&f, &key, "payload removal", |r| r.json()["payload_retained"] == false);
    assert!(
        sent_at.elapsed() >= PAYLOAD_RETENTION,
        "payload removed {:?} after admission, before payload_retention: {gone}",
        sent_at.elapsed()
    );
    assert_eq!(gone.json()["state"], "delivered", "the identity outlives the payload: {gone}");
    assert!(gone.json()["payload"].is_null(), "{gone}");

    poll_event(&f, &key, "identity removal", |r| r.status == 404);
    assert!(
        sent_at.elapsed() >= DEDUPE_RETENTION,
        "identity removed {:?} after admission, before dedupe_retention",
        sent_at.elapsed()
    );
    let again = f.hw.deliver(&s, &id, &body);
    assert_eq!(again.code(), "accepted", "after dedupe_retention a copy is new: {again}");
    f.sink.wait_for_key(&key, 2, FORWARD_TIMEOUT);
}

on_rocksdb_and_postgres!(retention_removes_payload_then_identity_never_early);

/// Review finding (issue 4): `hookwall dlq` pointed at something that is not hookwall's admin
/// API — here the webhook port, which answers JSON of its own — exits 1 and says so, instead
/// of printing an empty table and exiting 0; a config with a TOML error is reported by
/// position without quoting the line (it may hold an inline secret).
#[test]
fn dlq_refuses_a_server_that_is_not_the_admin_api_and_quotes_no_config_line() {
    let f = fixture(Script::always(200), |_| {});
    let token_file = f.dir.path().join("admin-token").display().to_string();
    let wrong = format!("http://{}", f.hw.ingress);
    for args in [
        vec!["dlq", "list", "--admin", &wrong, "--token-file", &token_file],
        vec![
            "dlq",
            "replay",
            "--all",
            "--reason",
            "r",
            "--admin",
            &wrong,
            "--token-file",
            &token_file,
        ],
        vec![
            "dlq",
            "drop",
            "a/b/c",
            "--reason",
            "r",
            "--admin",
            &wrong,
            "--token-file",
            &token_file,
        ],
    ] {
        let out = dlq_raw(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("is not hookwall's admin API"), "{args:?}: {}", show(&out));
    }
    let secret = "whsec_c2VjcmV0LXRoYXQtbXVzdC1ub3QtbGVhaw==";
    let config = f.dir.path().join("broken.toml");
    let text = format!("[[source]]\nsecrets = [{{ id = \"k\", value = \"{secret}\" x }}]\n");
    std::fs::write(&config, text).expect("writing the broken config");
    let out = dlq_raw(&["dlq", "-c", &config.display().to_string(), "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not valid TOML at line 2"), "{}", show(&out));
    assert!(!stderr.contains(secret) && !stderr.contains("whsec_"), "no secret: {}", show(&out));
}

/// `hookwall dlq` never follows a redirect: the admin API gives none, so one means another
/// server at `--admin`, and following it sent the replay and its reason to wherever it pointed
/// (found by an audit of the CLI). `--source` with keys (it filters `--all` only) is refused
/// as bad usage instead of being ignored.
#[test]
fn dlq_follows_no_redirect_and_refuses_source_with_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("writing the token");
    let token_file = token_file.display().to_string();
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let elsewhere_addr = elsewhere.local_addr().expect("addr");
    elsewhere.set_nonblocking(true).expect("nonblocking");
    let redirector = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let admin = format!("http://{}", redirector.local_addr().expect("addr"));
    let answering = std::thread::spawn(move || {
        let (mut s, _) = redirector.accept().expect("dlq connects");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n")
            && std::io::Read::read(&mut s, &mut byte).expect("reads") == 1
        {
            head.push(byte[0]);
        }
        let answer = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{elsewhere_addr}/admin/events/x/replay\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        std::io::Write::write_all(&mut s, answer.as_bytes()).expect("answers");
    });
    let replay = |extra: &[&str]| {
        let to = ["--reason", "r", "--admin", &admin, "--token-file", &token_file];
        dlq_raw(&[&["dlq", "replay", "a/b/c"][..], extra, &to[..]].concat())
    };
    let out = replay(&[]);
    answering.join().expect("the redirector answered");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not hookwall's admin API"), "{}", show(&out));
    assert!(elsewhere.accept().is_err(), "the redirect was followed");

    let out = replay(&["--source", "s"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--source applies to --all only"));
}

/// Review finding: a reload to `breaker_failures_max = 0` (breaker off) left an open breaker
/// open, still pacing the destination to one probe per `backoff_min`. It now closes at once.
#[test]
fn a_reload_that_turns_the_breaker_off_closes_it() {
    let mut f = fixture(Script::always(503), |s| {
        s.breaker_failures_max = Some(2);
        s.attempts_max = 50;
        s.backoff_min = "5s";
        s.backoff_max = "10s";
    });
    let s = stripe_a();
    for _ in 0..3 {
        let id = sign::unique_id("evt_breaker_off");
        assert_eq!(
            f.hw.deliver(&s, &id, &sign::body(Provider::Stripe, &id, "b")).code(),
            "accepted"
        );
    }
    let open = [("destination", "sink")];
    wait_for_sample(&f.hw, "hookwall_dispatch_breaker_open", &open, 1.0, FORWARD_TIMEOUT);
    let mut off = f.hw.setup.clone();
    off.breaker_failures_max = Some(0);
    assert!(f.hw.reload(&off), "reload applied:\n{}", f.hw.stderr());
    wait_for_sample(&f.hw, "hookwall_dispatch_breaker_open", &open, 0.0, FORWARD_TIMEOUT);
}

/// An operator request whose body never fully arrives is answered 408 `timeout` after
/// `server.read_timeout`, as on the ingress, instead of holding its connection and one of the
/// admin listener's slots forever (found by an audit of the admin listener); one that declares
/// more than the limit is answered 413 at once (found by a newcomer's review).
#[test]
fn an_admin_body_that_never_arrives_is_answered_408() {
    let f = fixture(Script::always(200), |s| s.read_timeout = "1s");
    let mut stream = std::net::TcpStream::connect(f.hw.admin).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let head = format!(
        "POST /admin/events/acme%2Fstripe-a%2Fx/drop HTTP/1.1\r\nHost: t\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n{{\"reason\""
    );
    std::io::Write::write_all(&mut stream, head.as_bytes()).expect("write");
    let mut got = Vec::new();
    // Err: a reset after the answer (hyper drops a connection whose body was left unread).
    let _ = std::io::Read::read_to_end(&mut stream, &mut got);
    let (answer, _) = client::parse_response(&got).expect("parse").expect("a whole answer");
    assert_eq!(answer.answer(), (408, "timeout".to_owned()), "{answer}");
    // A declared length over the limit is answered 413 at once, not after the timeout.
    let mut stream = std::net::TcpStream::connect(f.hw.admin).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let head = format!(
        "POST /admin/events/acme%2Fstripe-a%2Fx/drop HTTP/1.1\r\nHost: t\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: 99999999\r\n\r\n"
    );
    std::io::Write::write_all(&mut stream, head.as_bytes()).expect("write");
    let mut got = Vec::new();
    // Err: a reset after the answer (the announced body is never read).
    let _ = std::io::Read::read_to_end(&mut stream, &mut got);
    let (answer, _) = client::parse_response(&got).expect("parse").expect("a whole answer");
    // Before, it waited for the body and was answered 408 at `read_timeout`.
    assert_eq!(answer.answer(), (413, "too_large".to_owned()), "{answer}");
}
