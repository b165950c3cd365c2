//! Several hookwall nodes on one PostgreSQL ledger (issue 8): one identity is admitted once
//! whichever node its copies reach, a node killed with SIGKILL loses nothing it acknowledged
//! (another node delivers it after its lease), and the schema is checked at start-up.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::harness::{self, stripe_a, Hookwall, Io, Setup, FORWARD_TIMEOUT};
use crate::pg::Postgres;
use crate::sign::{self, Provider};
use crate::sink::{Recorded, Script, Sink};

fn node(dir: &std::path::Path, sink: &Sink, pg: &Postgres, lease: &'static str) -> Hookwall {
    let mut setup = Setup::new(Io::Epoll, dir, &sink.url());
    setup.postgres = Some(pg.url());
    setup.lease = lease;
    setup.ledger = dir.join("unused-rocksdb");
    Hookwall::start(dir, &setup)
}

/// 64 concurrent copies of one event spread over two nodes: exactly one `accepted`, 63
/// `duplicate`, one forward; a restarted node still answers duplicate.
#[test]
fn two_nodes_admit_64_concurrent_copies_exactly_once() {
    let pg = Postgres::start();
    let sink = Sink::start(Script::always(200));
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = node(d1.path(), &sink, &pg, "30s");
    let mut b = node(d2.path(), &sink, &pg, "30s");
    let source = stripe_a();
    let id = sign::unique_id("evt_cluster");
    let body = sign::body(Provider::Stripe, &id, "cluster");
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                let (hw, source, id, body) =
                    (if i % 2 == 0 { &a } else { &b }, &source, &id, &body);
                s.spawn(move || hw.deliver(source, id, body).answer())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let accepted = answers.iter().filter(|x| **x == (200, "accepted".to_owned())).count();
    let duplicate = answers.iter().filter(|x| **x == (200, "duplicate".to_owned())).count();
    assert_eq!((accepted, duplicate), (1, 63), "answers: {answers:?}");
    sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
    // A second event forwarded afterwards by the same path: the first is not forwarded again
    // meanwhile (both nodes scan the same rows).
    let marker = sign::unique_id("evt_marker");
    let r = a.deliver(&source, &marker, &sign::body(Provider::Stripe, &marker, "m"));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
    sink.wait_for_key(&source.key(&marker), 1, FORWARD_TIMEOUT);
    assert_eq!(sink.for_key(&source.key(&id)).len(), 1, "one forward for 64 copies");
    // Restart one node: still a duplicate on both.
    b.stop();
    let b = node(d2.path(), &sink, &pg, "30s");
    for hw in [&a, &b] {
        assert_eq!(hw.deliver(&source, &id, &body).answer(), (200, "duplicate".to_owned()));
    }
    let other = sign::body(Provider::Stripe, &id, "different body");
    assert_eq!(b.deliver(&source, &id, &other).answer().1, "conflict");
}

/// Node A acknowledges events while its destination hangs, is killed with SIGKILL; node B
/// delivers every event A acknowledged (after A's leases expire), with the same key.
#[test]
fn a_killed_node_s_acknowledged_events_are_delivered_by_another() {
    let pg = Postgres::start();
    // A's destination accepts connections into its backlog and never answers: A leases
    // events, starts attempts, and dies holding them.
    let hang = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hang_url = format!("http://{}/hooks", hang.local_addr().unwrap());
    let sink = Sink::start(Script::always(200));
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut setup = Setup::new(Io::Epoll, d1.path(), &hang_url);
    setup.postgres = Some(pg.url());
    setup.lease = "3s";
    setup.destination_timeout = "2s";
    let mut a = Hookwall::start(d1.path(), &setup);
    let source = stripe_a();
    let mut acked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Under load: 200 events, then the kill while A is mid-attempt on some of them.
    for n in 0..200 {
        let id = sign::unique_id(&format!("evt_kill{n}"));
        let r = a.deliver(&source, &id, &sign::body(Provider::Stripe, &id, "k"));
        if r.answer() == (200, "accepted".to_owned()) {
            acked.push(source.key(&id));
        }
        assert!(Instant::now() < deadline, "admissions too slow");
    }
    assert_eq!(acked.len(), 200, "every event accepted before the kill");
    let mut db = pg.client();
    let mut leased = || -> i64 {
        let row = db
            .query_one("SELECT count(*) FROM hookwall_events WHERE lease_owner IS NOT NULL", &[])
            .unwrap();
        row.get(0)
    };
    let lease_deadline = Instant::now() + FORWARD_TIMEOUT;
    while leased() == 0 {
        assert!(Instant::now() < lease_deadline, "node A leased nothing");
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }
    a.kill9();
    let b = node(d2.path(), &sink, &pg, "3s");
    for key in &acked {
        sink.wait_for_key(key, 1, Duration::from_secs(90));
    }
    let seen: HashSet<String> = acked.iter().cloned().collect();
    assert_eq!(seen.len(), 200);
    drop(b);
}

/// `serve` refuses an unmigrated database with an error naming `hookwall migrate`; after
/// `migrate` it serves, and a second `migrate` is a no-op.
#[test]
fn serve_refuses_an_unmigrated_schema_and_migrate_is_idempotent() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let mut setup = Setup::new(Io::Epoll, dir.path(), "http://127.0.0.1:9/");
    setup.postgres = Some(pg.url());
    let config = dir.path().join("hookwall.toml");
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    std::fs::write(&config, setup.toml(addr, addr)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .args(["serve", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "served on an unmigrated schema: {stderr}");
    assert!(
        stderr.contains("schema is at version 0") && stderr.contains("hookwall migrate"),
        "{stderr}"
    );
    let first = harness::migrate(&config);
    assert!(String::from_utf8_lossy(&first.stdout).contains("migrated from version 0"));
    let second = harness::migrate(&config);
    assert!(String::from_utf8_lossy(&second.stdout).contains("already at version"));
    // A newer schema (as a later hookwall would leave it) is refused too.
    pg.client().execute("INSERT INTO hookwall_schema VALUES (999, 'future', 0)", &[]).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .args(["serve", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("newer than this hookwall"), "{stderr}");
}

/// A column changed under a running node (an operator's mistake: `source_index` made BIGINT)
/// fails each settlement transaction that reads it: the settlement is answered "not written"
/// and logged, the attempt is repeated with the same key once the lease runs out, and after the
/// column is put back the event is settled `delivered` and later events are settled too; an
/// admin read of the event meanwhile is answered 503. Before, reading the changed column was a
/// panic, which aborts the process (a broken invariant): the node crash-looped, delivering its
/// leased events again at every restart.
#[test]
fn a_column_changed_under_a_running_node_fails_settlements_until_it_is_put_back() {
    let pg = Postgres::start();
    let sink = Sink::start(Script::always(200));
    let dir = tempfile::tempdir().unwrap();
    let mut setup = Setup::new(Io::Epoll, dir.path(), &sink.url());
    setup.postgres = Some(pg.url());
    setup.lease = "2s";
    setup.destination_timeout = "1s";
    setup.admin_token = Some("test-admin-token-0123456789".to_owned());
    let hw = Hookwall::start(dir.path(), &setup);
    let mut db = pg.client();
    db.batch_execute("ALTER TABLE hookwall_events ALTER COLUMN source_index TYPE BIGINT").unwrap();
    let source = stripe_a();
    let deliver = |name: &str| {
        let id = sign::unique_id(name);
        let r = hw.deliver(&source, &id, &sign::body(Provider::Stripe, &id, "k"));
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "stderr:\n{}", hw.stderr());
        (id.clone(), source.key(&id))
    };
    let (id, key) = deliver("evt_drift");
    sink.wait_for_key(&key, 1, FORWARD_TIMEOUT);
    let deadline = Instant::now() + FORWARD_TIMEOUT;
    while !hw.stderr().contains("settlement_not_written") {
        assert!(Instant::now() < deadline, "no failed settlement logged; stderr:\n{}", hw.stderr());
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }
    let auth = vec![("Authorization".to_owned(), "Bearer test-admin-token-0123456789".to_owned())];
    let path = format!("/admin/events/{}", key.replace('/', "%2F"));
    let read = crate::client::send_one(hw.admin, "GET", &path, &auth, b"");
    assert_eq!(read.status, 503, "the admin read of a changed column: {read}");
    db.batch_execute("ALTER TABLE hookwall_events ALTER COLUMN source_index TYPE INT").unwrap();
    let mut state = |event_id: &str| -> String {
        db.query_one("SELECT state FROM hookwall_events WHERE event_id = $1", &[&event_id])
            .unwrap()
            .get(0)
    };
    let settled = |state: &mut dyn FnMut(&str) -> String, event_id: &str| {
        let deadline = Instant::now() + FORWARD_TIMEOUT;
        while state(event_id) != "delivered" {
            assert!(Instant::now() < deadline, "{event_id} not settled; stderr:\n{}", hw.stderr());
            std::thread::sleep(Duration::from_millis(20)); // poll interval
        }
    };
    settled(&mut state, &id);
    assert!(sink.for_key(&key).len() >= 2, "the attempt was repeated with the same key");
    let read = crate::client::send_one(hw.admin, "GET", &path, &auth, b"");
    assert_eq!((read.status, read.json()["state"].clone()), (200, "delivered".into()), "{read}");
    let (later, later_key) = deliver("evt_after_drift");
    sink.wait_for_key(&later_key, 1, FORWARD_TIMEOUT);
    settled(&mut state, &later);
    let stderr = hw.stderr();
    assert!(stderr.contains("ledger_write_failed"), "the failed transaction is logged: {stderr}");
    assert!(!stderr.contains("panicked"), "no ledger thread panicked: {stderr}");
}

/// A table locked under a running node (a hand-run `LOCK TABLE`, a migration waiting on a
/// lock): each statement of the node gives up after `POSTGRES_STATEMENT_TIMEOUT` (10 s), so a
/// delivery meanwhile is answered `503 unavailable` instead of waiting for the lock, and
/// SIGTERM stops the node in bounded time while the lock is still held. Before, the delivery
/// had no answer for as long as the lock lasted, and shutdown waited for it too.
#[test]
fn a_locked_table_fails_statements_in_bounded_time() {
    let pg = Postgres::start();
    let sink = Sink::start(Script::always(200));
    let dir = tempfile::tempdir().unwrap();
    let mut setup = Setup::new(Io::Epoll, dir.path(), &sink.url());
    setup.postgres = Some(pg.url());
    let mut hw = Hookwall::start(dir.path(), &setup);
    let source = stripe_a();
    let send = |hw: &Hookwall, name: &str| {
        let id = sign::unique_id(name);
        hw.deliver(&source, &id, &sign::body(Provider::Stripe, &id, "k"))
    };
    assert_eq!(send(&hw, "evt_before_lock").answer(), (200, "accepted".to_owned()));
    let mut locker = pg.client();
    let mut lock = locker.transaction().unwrap();
    lock.batch_execute("LOCK TABLE hookwall_events IN ACCESS EXCLUSIVE MODE").unwrap();
    let started = Instant::now();
    let r = send(&hw, "evt_during_lock");
    assert_eq!(r.answer(), (503, "unavailable".to_owned()), "{r}");
    assert!(started.elapsed() < Duration::from_secs(20), "answered after {:?}", started.elapsed());
    let stopping = Instant::now();
    hw.terminate();
    let status = hw.wait_exit(Duration::from_secs(40));
    assert!(status.success(), "{status:?}");
    assert!(stopping.elapsed() < Duration::from_secs(30), "stopped after {:?}", stopping.elapsed());
    lock.rollback().unwrap();
}

/// Two nodes with `ordering_key` whose events are admitted alternately on either node.
fn ordered_nodes(
    pg: &Postgres,
    sink: &Sink,
    attempts_max: u32,
) -> (tempfile::TempDir, tempfile::TempDir, Hookwall, Hookwall) {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let start = |dir: &std::path::Path| {
        let mut setup = Setup::new(Io::Epoll, dir, &sink.url());
        setup.postgres = Some(pg.url());
        setup.ledger = dir.join("unused-rocksdb");
        setup.source_lines.push(("stripe-a", "ordering_key = \"/data/object/id\"".to_owned()));
        setup.attempts_max = attempts_max;
        setup.backoff_min = "20ms";
        setup.backoff_max = "200ms";
        Hookwall::start(dir, &setup)
    };
    let (a, b) = (start(d1.path()), start(d2.path()));
    (d1, d2, a, b)
}

/// `count` events per group, interleaved (g0 #0, g1 #0, g0 #1, …), the k-th sent to node
/// k mod 2, each `accepted` before the next is sent. Returns the event ids per group.
fn admit_across(nodes: [&Hookwall; 2], groups: &[&str], count: usize) -> Vec<Vec<String>> {
    let (source, prefix) = (stripe_a(), sign::unique_id("evt_pgord"));
    let mut ids = vec![Vec::new(); groups.len()];
    let mut k = 0;
    for n in 0..count {
        for (g, group) in groups.iter().enumerate() {
            let id = format!("{prefix}_{g}_{n}");
            let r = nodes[k % 2].deliver(&source, &id, &crate::ordering::event(&id, group, n));
            assert_eq!(r.answer(), (200, "accepted".to_owned()), "{id}: {r}");
            ids[g].push(id);
            k += 1;
        }
    }
    ids
}

fn answered(recorded: &[Recorded], key: &str, status: u16) -> usize {
    recorded.iter().filter(|r| r.header("idempotency-key") == key && r.answered == status).count()
}

/// R22 across nodes: while a group's head fails (503, retried), neither node forwards the
/// events behind it; a group whose head waits (here: a retry pushed far out) does not hold
/// another group back; once the head is delivered, its group follows in admission order, one
/// forward at a time.
#[test]
fn ordering_groups_hold_across_two_nodes() {
    let pg = Postgres::start();
    let sink = Sink::start(Script::always(503));
    let (_d1, _d2, a, b) = ordered_nodes(&pg, &sink, 100);
    let ids = admit_across([&a, &b], &["cus_A", "cus_B"], 3);
    let source = stripe_a();
    let keys: Vec<Vec<String>> =
        ids.iter().map(|g| g.iter().map(|id| source.key(id)).collect()).collect();
    // Both heads fail and are retried, by either node.
    sink.wait_until(FORWARD_TIMEOUT, "two failed attempts of each head", |r| {
        answered(r, &keys[0][0], 503) >= 2 && answered(r, &keys[1][0], 503) >= 2
    });
    let behind: Vec<&String> = keys.iter().flat_map(|g| &g[1..]).collect();
    let early: Vec<String> = sink
        .recorded()
        .iter()
        .map(|r| r.header("idempotency-key").to_owned())
        .filter(|k| behind.contains(&k))
        .collect();
    assert!(early.is_empty(), "forwarded while their head was failing: {early:?}");
    // Group A's head waits far out (as after a long backoff); the destination recovers.
    let far = i64::MAX / 2;
    let mut db = pg.client();
    let hold = "UPDATE hookwall_events SET due_ms = $1 WHERE event_id = $2";
    assert_eq!(db.execute(hold, &[&far, &ids[0][0]]).unwrap(), 1);
    sink.answer_from_now(200);
    let recorded = sink.wait_until(FORWARD_TIMEOUT * 2, "group B delivered", |r| {
        keys[1].iter().all(|k| answered(r, k, 200) == 1)
    });
    crate::ordering::assert_in_order_one_at_a_time(&recorded, &keys[1]);
    for k in &keys[0][1..] {
        assert!(sink.for_key(k).is_empty(), "{k} forwarded while its group's head waits");
    }
    // The head becomes due again: group A follows, in order.
    assert_eq!(db.execute(hold, &[&0_i64, &ids[0][0]]).unwrap(), 1);
    let recorded = sink.wait_until(FORWARD_TIMEOUT * 2, "group A delivered", |r| {
        keys[0].iter().all(|k| answered(r, k, 200) >= 1)
    });
    crate::ordering::assert_in_order_one_at_a_time(&recorded, &keys[0]);
}

/// R22 across nodes, as on RocksDB: a dead-lettered head releases its group (the next event
/// is delivered, the dead one is not attempted again).
#[test]
fn a_dead_lettered_head_releases_its_group_across_nodes() {
    let pg = Postgres::start();
    let sink = Sink::start(Script::first_then(&[400], 200));
    let (_d1, _d2, a, b) = ordered_nodes(&pg, &sink, 5);
    let ids = admit_across([&a, &b], &["cus_D"], 3);
    let source = stripe_a();
    let keys: Vec<String> = ids[0].iter().map(|id| source.key(id)).collect();
    let recorded = sink.wait_until(FORWARD_TIMEOUT * 2, "the group after its dead head", |r| {
        keys[1..].iter().all(|k| answered(r, k, 200) >= 1)
    });
    assert_eq!(
        recorded.first().map(|r| (r.header("idempotency-key"), r.answered)),
        Some((keys[0].as_str(), 400))
    );
    assert_eq!(sink.for_key(&keys[0]).len(), 1, "the dead-lettered head is not attempted again");
    crate::ordering::assert_in_order_one_at_a_time(&recorded, &keys);
    let row = pg
        .client()
        .query_one("SELECT state FROM hookwall_events WHERE event_id = $1", &[&ids[0][0]])
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "dead");
}

/// A dispatcher scan never leases an event it must skip. The class: a retry settlement commits
/// (the event is due again after `backoff_min`) before its reply reaches the dispatcher, which
/// still counts the attempt in flight; a scan in that gap leased the event, dropped it as in
/// flight, and nobody attempted it until its lease ran out (30 s: CI saw an ordered group's
/// head wait that long). Here: the scan that skips the event leaves its row untouched, and the
/// next scan leases it.
#[test]
fn a_scan_leases_no_event_it_skips() {
    use hookwall::ledger::Inbox as _;
    let pg = Postgres::start();
    let mut db = pg.client();
    let now_ms = u64::try_from(sign::now_unix_s()).expect("after 1970") * 1000;
    hookwall::ledger::postgres::schema::migrate(&mut db, now_ms).expect("migrates");
    let insert = "INSERT INTO hookwall_events (tenant, source, event_id, seq, source_index,
        fingerprint, secret_id, received_at_ms, body, state, attempts, due_ms)
        VALUES ('acme', 'stripe-a', $1, $2, 0, '\\x00', 'k1', 1, '{}', 'received', 1, 0)";
    for (id, seq) in [("evt_in_flight", 7_i64), ("evt_other", 8)] {
        assert_eq!(db.execute(insert, &[&id, &seq]).expect("row inserted"), 1);
    }
    let ledger = open_pg_ledger(&pg, &["stripe-a"]);
    let lease_of = |db: &mut postgres::Client, seq: i64| {
        let row = db
            .query_one("SELECT due_ms, lease_owner FROM hookwall_events WHERE seq = $1", &[&seq])
            .expect("row reads");
        (row.get::<_, Option<i64>>(0), row.get::<_, Option<String>>(1))
    };
    let in_flight = HashSet::from([7_u64]);
    let scanned = ledger.due(0, None, now_ms, 10, &in_flight).expect("scan");
    let seqs: Vec<u64> = scanned.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [8], "only the event not in flight is returned");
    assert_eq!(lease_of(&mut db, 7), (Some(0), None), "the skipped event is not leased");
    assert_eq!(lease_of(&mut db, 8).1.as_deref(), Some("test"), "the returned one is");
    // Its reply has arrived: the next scan leases and returns it.
    let scanned = ledger.due(0, None, now_ms, 10, &HashSet::new()).expect("scan");
    assert_eq!(scanned.iter().map(|e| e.seq).collect::<Vec<_>>(), [7]);
}

/// A scan for one destination's sources leases only their rows; a scan for unconfigured
/// sources only the rows of sources this node no longer has. The class: a scan over every
/// source leased a paused or saturated destination's older rows ahead of another
/// destination's, and nobody attempted them until their lease ran out (the dispatcher's side
/// is `dispatch::tests::a_leasing_scan_takes_only_what_each_destination_can_start`).
#[test]
fn a_scan_of_some_sources_leases_only_their_rows() {
    use hookwall::ledger::{DueSources, Inbox as _};
    let pg = Postgres::start();
    let mut db = pg.client();
    let now_ms = u64::try_from(sign::now_unix_s()).expect("after 1970") * 1000;
    hookwall::ledger::postgres::schema::migrate(&mut db, now_ms).expect("migrates");
    let insert = "INSERT INTO hookwall_events (tenant, source, event_id, seq, source_index,
        fingerprint, secret_id, received_at_ms, body, state, attempts, due_ms)
        VALUES ('acme', $1, $2, $3, 0, '\\x00', 'k1', $3, '{}', 'received', 0, $3)";
    // Oldest first: two of a paused destination's source, one of a removed source, then two
    // of a running destination's source.
    let rows = [("paused", 1_i64), ("paused", 2), ("removed", 3), ("live", 4), ("live", 5)];
    for (source, seq) in rows {
        let id = format!("evt_{seq}");
        assert_eq!(db.execute(insert, &[&source, &id, &seq]).expect("row inserted"), 1);
    }
    let ledger = open_pg_ledger(&pg, &["paused", "live"]);
    assert!(ledger.leases(), "the dispatcher must scan PostgreSQL per destination");
    let leased = |db: &mut postgres::Client| -> Vec<i64> {
        let rows = db
            .query(
                "SELECT seq FROM hookwall_events WHERE lease_owner IS NOT NULL ORDER BY seq",
                &[],
            )
            .expect("rows read");
        rows.iter().map(|r| r.get(0)).collect()
    };
    let none = HashSet::new();
    let seqs = |events: Vec<hookwall::ledger::DueEvent>| -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    };
    // One slot for "live" (index 1): its oldest row, nothing of the older "paused" rows.
    let got = ledger.due_of(0, now_ms, 1, &none, DueSources::Only(&[1])).expect("scan");
    assert_eq!(seqs(got), [4]);
    assert_eq!(leased(&mut db), [4], "only the returned row is leased");
    let got = ledger.due_of(0, now_ms, 10, &none, DueSources::Only(&[1])).expect("scan");
    assert_eq!(seqs(got), [5]);
    let got = ledger.due_of(0, now_ms, 10, &none, DueSources::Unconfigured).expect("scan");
    assert_eq!(seqs(got), [3], "only the removed source's row");
    assert_eq!(leased(&mut db), [3, 4, 5], "the paused destination's rows are not leased");
    let got = ledger.due_of(0, now_ms, 10, &none, DueSources::Only(&[0])).expect("scan");
    assert_eq!(seqs(got), [1, 2]);
}

/// A `PgLedger` over `pg` (schema migrated) for tenant `acme`'s `sources`, in that order,
/// with a 30 s lease and node name `test`: for driving its scans directly.
fn open_pg_ledger(pg: &Postgres, sources: &[&str]) -> hookwall::ledger::postgres::PgLedger {
    use hookwall::ledger::postgres::{Connector, PgLedger, PgOptions};
    let metrics = std::sync::Arc::new(hookwall::metrics::Metrics {
        reloads: Default::default(),
        cores: Vec::new(),
        ledger: hookwall::metrics::LedgerStats::new(sources.len()),
        dispatch: hookwall::metrics::DispatchStats::new(sources.len()),
    });
    let opts = PgOptions {
        connector: Connector::new(&pg.url()).expect("the test URL parses"),
        pool_size: 2,
        lease: Duration::from_secs(30),
        sources: sources.iter().map(|s| ("acme".to_owned(), (*s).to_owned())).collect(),
        notify: std::sync::Arc::new(tokio::sync::Notify::new()),
        node: "test".to_owned(),
        retention: None,
    };
    PgLedger::open(opts, metrics).expect("opens")
}
