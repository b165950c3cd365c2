//! Operator tooling across nodes on one PostgreSQL ledger (issue 8): the admin API and
//! `hookwall dlq` of any node see and act on the shared tables — an event dead-lettered on node
//! A is listed, inspected and replayed from node B, and delivered once more with the same
//! `Idempotency-Key`; the audit log is the same from both nodes; retention (R25) removes a
//! delivered event's identity (a later copy is accepted anew) and never a pending one.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{self, Response};
use crate::harness::{stripe_a, Hookwall, Io, Setup, FORWARD_TIMEOUT};
use crate::pg::Postgres;
use crate::sign::{self, Provider};
use crate::sink::{Script, Sink};

/// The admin token both nodes are configured with.
const TOKEN: &str = "test-admin-token-0123456789";

/// Room for a loaded 2-core machine in every poll below.
const POLL_TIMEOUT: Duration = Duration::from_secs(60);

/// A node on `pg` in `dir`, forwarding to `sink`, with the admin token; `edit` adjusts the rest.
fn node(dir: &Path, sink: &Sink, pg: &Postgres, edit: impl FnOnce(&mut Setup)) -> Hookwall {
    let mut setup = Setup::new(Io::Epoll, dir, &sink.url());
    setup.postgres = Some(pg.url());
    setup.ledger = dir.join("unused-rocksdb");
    setup.admin_token = Some(TOKEN.to_owned());
    edit(&mut setup);
    Hookwall::start(dir, &setup)
}

fn admin(hw: &Hookwall, method: &str, path: &str, body: &str) -> Response {
    let mut headers = vec![("Authorization".to_owned(), format!("Bearer {TOKEN}"))];
    if !body.is_empty() {
        headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
    }
    client::send_one(hw.admin, method, path, &headers, body.as_bytes())
}

fn event_path(key: &str) -> String {
    format!("/admin/events/{}", key.replace('/', "%2F"))
}

/// Polls `GET /admin/events/{key}` on `hw` until `done(answer)`; returns the answer.
fn poll_event(hw: &Hookwall, key: &str, what: &str, done: impl Fn(&Response) -> bool) -> Response {
    let deadline = Instant::now() + POLL_TIMEOUT;
    loop {
        let r = admin(hw, "GET", &event_path(key), "");
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "{key}: {what} did not happen: {r}");
        std::thread::sleep(Duration::from_millis(50)); // poll interval
    }
}

fn wait_for_state(hw: &Hookwall, key: &str, state: &str) -> Value {
    poll_event(hw, key, &format!("state {state}"), |r| {
        r.status == 200 && r.json()["state"] == state
    })
    .json()
}

/// `hookwall dlq ARGS… --json` against `hw`'s admin API (token file of `dir`).
fn dlq(hw: &Hookwall, dir: &Path, args: &[&str]) -> Output {
    let admin = format!("http://{}", hw.admin);
    let token_file = dir.join("admin-token").display().to_string();
    Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .arg("dlq")
        .args(args)
        .args(["--admin", &admin, "--token-file", &token_file])
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

fn ok_json(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", show(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", show(out)))
}

/// Every forward of `key` so far and the one idempotency key they carried.
fn idempotency_keys(sink: &Sink, key: &str) -> Vec<String> {
    sink.for_key(key).iter().map(|r| r.header("idempotency-key").to_owned()).collect()
}

/// R19, R20, issue 8: an event dead-lettered by node A is listed, inspected (attempt history,
/// matched key id) and replayed by `hookwall dlq` through node B's admin API; it is delivered
/// once more with the same `Idempotency-Key`. Two more dead events are replayed in bulk
/// (`replay --all`) through node A. The audit log reads the same from both nodes.
#[test]
fn dead_on_one_node_is_replayed_from_another_and_audited_on_both() {
    let pg = Postgres::start();
    let sink = Sink::start(Script::always(500));
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = node(d1.path(), &sink, &pg, |s| s.attempts_max = 2);
    let b = node(d2.path(), &sink, &pg, |s| s.attempts_max = 2);
    let source = stripe_a();
    let id = sign::unique_id("evt_pg_dlq");
    let key = source.key(&id);
    let body = sign::body(Provider::Stripe, &id, "dead on A, replayed from B");
    assert_eq!(a.deliver(&source, &id, &body).code(), "accepted");
    sink.wait_for_key(&key, 2, FORWARD_TIMEOUT);
    wait_for_state(&b, &key, "dead");

    let listed = ok_json(&dlq(&b, d2.path(), &["list", "--json"]));
    let items = listed["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!((&items[0]["key"], &items[0]["state"]), (&key.as_str().into(), &"dead".into()));
    assert_eq!(items[0]["attempts"], 2, "{listed}");
    let detail = ok_json(&dlq(&b, d2.path(), &["inspect", &key, "--json"]));
    assert_eq!(detail["secret_id"], "k1", "the matched key id: {detail}");
    assert_eq!(detail["payload"].as_str().map(str::as_bytes), Some(body.as_slice()), "{detail}");
    let outcomes: Vec<(u64, String)> = detail["attempt_history"]
        .as_array()
        .expect("attempt_history")
        .iter()
        .map(|h| (h["attempt"].as_u64().unwrap_or(0), h["outcome"].as_str().unwrap_or("").into()))
        .collect();
    assert_eq!(outcomes, [(1, "retry".to_owned()), (2, "dead".to_owned())], "{detail}");

    sink.answer_from_now(200);
    let out = dlq(&b, d2.path(), &["replay", &key, "--reason", "fixed in INC-7"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let forwards = sink.wait_for_key(&key, 3, FORWARD_TIMEOUT);
    assert_eq!(forwards[2].answered, 200);
    assert_eq!(forwards[2].body, body, "the exact bytes again");
    assert_eq!(forwards[2].header("hookwall-attempt"), "1", "attempts were reset");
    let delivered = wait_for_state(&a, &key, "delivered");
    let history = delivered["attempt_history"].as_array().expect("attempt_history");
    assert_eq!(history.len(), 3, "the history is kept across the replay: {delivered}");

    // Bulk: two more dead events, replayed by `replay --all` through node A.
    sink.answer_from_now(500);
    let more: Vec<String> = (0..2).map(|_| sign::unique_id("evt_pg_bulk")).collect();
    for (n, id) in more.iter().enumerate() {
        let hw = if n == 0 { &a } else { &b };
        assert_eq!(
            hw.deliver(&source, id, &sign::body(Provider::Stripe, id, "b")).code(),
            "accepted"
        );
    }
    for id in &more {
        wait_for_state(&a, &source.key(id), "dead");
    }
    sink.answer_from_now(200);
    let out = ok_json(&dlq(&a, d1.path(), &["replay", "--all", "--reason", "bulk", "--json"]));
    assert_eq!((&out["replayed"], &out["failed"]), (&2.into(), &0.into()), "{out}");
    for id in &more {
        sink.wait_for_key(&source.key(id), 3, FORWARD_TIMEOUT);
        wait_for_state(&b, &source.key(id), "delivered");
    }

    // Delivered once each after its replay (a barrier event forwarded after them first), and
    // every forward of an event carried the same idempotency key.
    let marker = sign::unique_id("evt_pg_marker");
    assert_eq!(
        b.deliver(&source, &marker, &sign::body(Provider::Stripe, &marker, "m")).code(),
        "accepted"
    );
    wait_for_state(&a, &source.key(&marker), "delivered");
    for k in std::iter::once(key.clone()).chain(more.iter().map(|id| source.key(id))) {
        let forwards = sink.for_key(&k);
        let ok = forwards.iter().filter(|r| r.answered == 200).count();
        assert_eq!((forwards.len(), ok), (3, 1), "{k}: 2 failed attempts, 1 delivery");
        let keys = idempotency_keys(&sink, &k);
        assert!(keys.iter().all(|x| *x == keys[0] && !x.is_empty()), "{k}: {keys:?}");
    }

    for hw in [&a, &b] {
        let audit = admin(hw, "GET", "/admin/audit?limit=10", "");
        assert_eq!(audit.status, 200, "{audit}");
        let items = audit.json()["items"].as_array().cloned().expect("items");
        let seen: Vec<(String, String, String)> = items
            .iter()
            .map(|i| {
                let field = |n: &str| i[n].as_str().unwrap_or("").to_owned();
                (field("action"), field("key"), field("reason"))
            })
            .collect();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(
            seen.contains(&("replay".into(), key.clone(), "fixed in INC-7".into())),
            "{seen:?}"
        );
        for id in &more {
            assert!(seen.contains(&("replay".into(), source.key(id), "bulk".into())), "{seen:?}");
        }
        assert!(items.iter().all(|i| i["state_before"] == "dead"), "{items:?}");
        // Paged one at a time, newest first, the same three records.
        let mut cursor = String::new();
        let mut paged = 0;
        loop {
            let path = format!("/admin/audit?limit=1&cursor={cursor}");
            let page = admin(hw, "GET", &path, "").json();
            paged += page["items"].as_array().expect("items").len();
            match page["next_cursor"].as_str() {
                Some(c) => cursor = c.to_owned(),
                None => break,
            }
            assert!(paged <= 3, "paging does not end: {page}");
        }
        assert_eq!(paged, 3);
    }
}

/// R25 on PostgreSQL, with two nodes sweeping the same tables: a delivered event's identity is
/// removed after `dedupe_retention` (a copy is then accepted and forwarded anew), while an
/// older event that is still pending (failed, its retry an hour away) is kept and its copy is
/// still a duplicate.
#[test]
fn retention_expires_a_delivered_identity_and_keeps_a_pending_one() {
    let pg = Postgres::start();
    let sink = Sink::start(Script::always(503));
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let edit = |s: &mut Setup| {
        s.backoff_min = "1h";
        s.backoff_max = "1h";
        s.ledger_extra = "payload_retention = \"1s\"\ndedupe_retention = \"4s\"".to_owned();
    };
    let a = node(d1.path(), &sink, &pg, edit);
    let b = node(d2.path(), &sink, &pg, edit);
    let source = stripe_a();
    let pending = sign::unique_id("evt_pg_pending");
    let pending_body = sign::body(Provider::Stripe, &pending, "pending");
    assert_eq!(a.deliver(&source, &pending, &pending_body).code(), "accepted");
    wait_for_state(&b, &source.key(&pending), "failed");

    sink.answer_from_now(200);
    let done = sign::unique_id("evt_pg_done");
    let done_body = sign::body(Provider::Stripe, &done, "delivered");
    let sent_at = Instant::now();
    assert_eq!(b.deliver(&source, &done, &done_body).code(), "accepted");
    sink.wait_for_key(&source.key(&done), 1, FORWARD_TIMEOUT);
    poll_event(&a, &source.key(&done), "identity removal", |r| r.status == 404);
    assert!(
        sent_at.elapsed() >= Duration::from_secs(4),
        "identity removed {:?} after admission, before dedupe_retention",
        sent_at.elapsed()
    );
    // The pending event was admitted earlier: the sweep that removed `done` passed it over.
    let kept = admin(&b, "GET", &event_path(&source.key(&pending)), "");
    assert_eq!((kept.status, &kept.json()["state"]), (200, &"failed".into()), "{kept}");
    assert_eq!(kept.json()["payload_retained"], true, "a pending event keeps its body: {kept}");
    assert_eq!(a.deliver(&source, &pending, &pending_body).code(), "duplicate");

    let again = a.deliver(&source, &done, &done_body);
    assert_eq!(again.code(), "accepted", "after dedupe_retention a copy is new: {again}");
    sink.wait_for_key(&source.key(&done), 2, FORWARD_TIMEOUT);
}

/// `hookwall migrate` upgrades a database written by schema version 1 (events and a quarantine
/// row without the first binding's fingerprint) in place: the node then serves its rows through
/// the admin API — the quarantined copy against the event's fingerprint, the event with an
/// empty attempt history, a delivered event not replayable (409).
#[test]
fn migrate_upgrades_a_version_1_database_whose_rows_the_admin_api_then_serves() {
    let pg = Postgres::start();
    let mut db = pg.client();
    let v1 = &hookwall::ledger::postgres::schema::MIGRATIONS[0];
    assert_eq!(v1.version, 1);
    db.batch_execute(
        "CREATE TABLE hookwall_schema (version INT NOT NULL PRIMARY KEY, name TEXT NOT NULL,
            applied_at_ms BIGINT NOT NULL)",
    )
    .unwrap();
    for statement in v1.statements {
        db.batch_execute(statement).unwrap();
    }
    db.execute("INSERT INTO hookwall_schema VALUES (1, 'v1', 0)", &[]).unwrap();
    let now = sign::now_unix_s() * 1000;
    let (bound, refused) = (vec![0xaa_u8; 32], vec![0xbb_u8; 32]);
    db.execute(
        "INSERT INTO hookwall_events (tenant, source, event_id, seq, source_index, fingerprint,
            secret_id, received_at_ms, body, state, attempts, settled_at_ms)
        VALUES ('acme', 'stripe-a', 'evt_v1', 42, 0, $1, 'k1', $2, 'x', 'delivered', 1, $2)",
        &[&bound, &now],
    )
    .unwrap();
    db.execute(
        "INSERT INTO hookwall_quarantine (tenant, source, event_id, fingerprint, received_at_ms)
        VALUES ('acme', 'stripe-a', 'evt_v1', $1, $2)",
        &[&refused, &now],
    )
    .unwrap();

    let sink = Sink::start(Script::always(200));
    let dir = tempfile::tempdir().unwrap();
    let hw = node(dir.path(), &sink, &pg, |_| {});
    let version: i32 =
        db.query_one("SELECT max(version) FROM hookwall_schema", &[]).unwrap().get(0);
    assert_eq!(version, hookwall::ledger::postgres::schema::VERSION);
    let listed = admin(&hw, "GET", "/admin/events?state=quarantined", "").json();
    let items = listed["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["key"], "acme/stripe-a/evt_v1");
    assert_eq!(items[0]["first_fingerprint"], hex::encode(&bound), "{listed}");
    assert_eq!(items[0]["new_fingerprint"], hex::encode(&refused), "{listed}");
    let detail = admin(&hw, "GET", &event_path("acme/stripe-a/evt_v1"), "").json();
    assert_eq!((&detail["state"], &detail["secret_id"]), (&"delivered".into(), &"k1".into()));
    assert_eq!(detail["attempt_history"], serde_json::json!([]), "{detail}");
    let replay = admin(
        &hw,
        "POST",
        &format!("{}/replay", event_path("acme/stripe-a/evt_v1")),
        r#"{"reason":"r"}"#,
    );
    assert_eq!(replay.answer(), (409, "wrong_state".to_owned()), "{replay}");
}
