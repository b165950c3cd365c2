//! Ledger tests against a real RocksDB in temporary directories. Replies are awaited through
//! channels, never by sleeping; a full queue is made deterministic with the writer gate.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Barrier};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use super::*;
use crate::limits::{ATTEMPT_ERROR_BYTES_MAX, SHARD_QUEUE_MAX};
use crate::metrics::{DispatchStats, LedgerStats, Metrics};

const SOURCES: [&str; 2] = ["src-a", "src-b"];

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics {
        reloads: Default::default(),
        cores: Vec::new(),
        ledger: LedgerStats::new(SOURCES.len()),
        dispatch: DispatchStats::new(1),
    })
}

fn options(dir: &Path, shards: usize) -> LedgerOptions {
    LedgerOptions {
        path: dir.join("ledger"),
        sync: true,
        shards_if_new: shards,
        source_ids: SOURCES.iter().map(|s| (*s).to_owned()).collect(),
        notify: Arc::new(tokio::sync::Notify::new()),
        retention: None,
    }
}

fn open(dir: &Path, shards: usize) -> (Ledger, Arc<Metrics>) {
    let m = metrics();
    (Ledger::open(options(dir, shards), Arc::clone(&m)).expect("ledger opens"), m)
}

/// A ledger whose writers wait until the returned sender is dropped.
fn open_gated(dir: &Path, shards: usize) -> (Ledger, Sender<()>) {
    let (gate_tx, gate_rx) = bounded(0);
    let ledger =
        Ledger::open_gated(options(dir, shards), metrics(), Some(gate_rx)).expect("ledger opens");
    (ledger, gate_tx)
}

/// The body [`admission`] gives `key` admitted with `fp`.
fn body_of(key: &str, fp: u8) -> Vec<u8> {
    format!("{{\"id\":\"{key}\",\"v\":{fp}}}").into_bytes()
}

/// An admission of `key` whose body (and fingerprint) is derived from `fp`.
fn admission(key: &str, fp: u8, source: u32, at_ms: u64) -> (Admission, Receiver<Decision>) {
    let (tx, rx) = bounded(1);
    let a = Admission {
        key: key.to_owned(),
        source,
        fingerprint: [fp; 32],
        event_type: Some("invoice.paid".into()),
        secret_id: "k1".into(),
        signed_at: Some(1_700_000_000),
        received_at_ms: at_ms,
        content_type: Some(b"application/json".to_vec()),
        body: body_of(key, fp),
        ordering: None,
        reply: Box::new(move |d| tx.send(d).expect("test waits for the reply")),
    };
    (a, rx)
}

fn decide(ledger: &Ledger, key: &str, fp: u8, source: u32, at_ms: u64) -> Decision {
    let (a, rx) = admission(key, fp, source, at_ms);
    assert!(ledger.admit(a).is_ok(), "queue has room");
    rx.recv().expect("writer replies")
}

/// The module's one check: admitting `key` with fingerprint byte `fp` decides `expect`.
fn check(ledger: &Ledger, key: &str, fp: u8, expect: Decision) {
    assert_eq!(decide(ledger, key, fp, 0, 100), expect, "admitting {key} with fp {fp}");
}

fn settle(ledger: &Ledger, e: &DueEvent, attempts: u32, outcome: Outcome) -> bool {
    let (tx, rx) = bounded(1);
    let s = Settlement {
        shard: e.shard,
        seq: e.seq,
        key: e.key.clone(),
        due_ms: e.due_ms,
        attempts,
        outcome,
        reply: Box::new(move |ok| tx.send(ok).expect("test waits for the reply")),
    };
    assert!(ledger.settle(s).is_ok(), "settle queue has room");
    rx.recv().expect("writer replies")
}

fn due(ledger: &Ledger, now_ms: u64) -> Vec<DueEvent> {
    (0..ledger.shards())
        .flat_map(|s| ledger.due(s, None, now_ms, 100, &HashSet::new()).expect("due reads"))
        .collect()
}

fn gauges(m: &Metrics) -> (Vec<i64>, Vec<i64>) {
    let load = |g: &[std::sync::atomic::AtomicI64]| {
        g.iter().map(|x| x.load(std::sync::atomic::Ordering::Relaxed)).collect()
    };
    (load(&m.ledger.inbox_pending), load(&m.ledger.dlq_depth))
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[test]
fn accept_then_duplicate_then_conflict_quarantines() {
    let dir = tmp();
    let (ledger, m) = open(dir.path(), 2);
    check(&ledger, "t/s/evt_1", 1, Decision::Accepted);
    check(&ledger, "t/s/evt_1", 1, Decision::Duplicate);
    check(&ledger, "t/s/evt_1", 2, Decision::Conflict);
    let q = ledger.quarantined(10).expect("quarantine reads");
    assert_eq!(q.len(), 1);
    assert_eq!((q[0].key.as_str(), q[0].source), ("t/s/evt_1", 0));
    assert_eq!(q[0].first_fingerprint, "01".repeat(32));
    assert_eq!(q[0].new_fingerprint, "02".repeat(32));
    let e = ledger.event("t/s/evt_1").expect("reads").expect("exists");
    assert_eq!((e.fingerprint, e.state, e.attempts), ([1; 32], EventState::Received, 0));
    assert_eq!(e.shard, ledger.shard_of("t/s/evt_1"));
    assert!(ledger.event("t/s/never").expect("reads").is_none());
    assert_eq!(gauges(&m).0, [1, 0], "only the first copy is pending");
    assert!(ledger.healthy());
}

#[test]
fn concurrent_copies_admit_once() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 4);
    let barrier = Arc::new(Barrier::new(32));
    let threads: Vec<_> = (0..32)
        .map(|_| {
            let (ledger, barrier) = (ledger.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                decide(&ledger, "t/s/race", 7, 0, 100)
            })
        })
        .collect();
    let decisions: Vec<_> = threads.into_iter().map(|t| t.join().expect("no panic")).collect();
    let accepted = decisions.iter().filter(|d| **d == Decision::Accepted).count();
    let duplicate = decisions.iter().filter(|d| **d == Decision::Duplicate).count();
    assert_eq!((accepted, duplicate), (1, 31));
}

#[test]
fn copies_in_one_drain_are_decided_in_order() {
    let dir = tmp();
    let (ledger, gate) = open_gated(dir.path(), 1);
    let copies = [1, 1, 2].map(|fp| {
        let (a, rx) = admission("t/s/twice", fp, 0, 100);
        assert!(ledger.admit(a).is_ok());
        rx
    });
    drop(gate);
    let got: Vec<_> = copies.iter().map(|rx| rx.recv().expect("reply")).collect();
    assert_eq!(got, [Decision::Accepted, Decision::Duplicate, Decision::Conflict]);
    assert_eq!(due(&ledger, crate::clock::now_unix_ms()).len(), 1, "one inbox entry");
}

#[test]
fn reopen_keeps_claims_seqs_and_shard_count() {
    let dir = tmp();
    let first_seq = {
        let (ledger, _) = open(dir.path(), 1);
        check(&ledger, "t/s/a", 1, Decision::Accepted);
        check(&ledger, "t/s/b", 1, Decision::Accepted);
        ledger.event("t/s/b").expect("reads").expect("exists").seq
    };
    let (ledger, _) = open(dir.path(), 3);
    assert_eq!(ledger.shards(), 1, "persisted shard count wins");
    check(&ledger, "t/s/a", 1, Decision::Duplicate);
    check(&ledger, "t/s/c", 1, Decision::Accepted);
    let c = ledger.event("t/s/c").expect("reads").expect("exists");
    assert_eq!(c.seq, first_seq + 1, "seq continues, never reused");
    ledger.shutdown();
    ledger.shutdown();
    assert!(!ledger.healthy());
    let (a, _rx) = admission("t/s/late", 1, 0, 1);
    assert!(ledger.admit(a).is_err(), "no admission after shutdown");
}

/// A writer that cannot be spawned fails the open, and the writers started before it have
/// ended by then (each lingers a while after its body under the seam, so one left running
/// would still be counted out): nothing of the failed open runs on into the process's exit,
/// and the directory opens again at once with the ledger whole. Before, they were detached.
#[test]
fn a_writer_that_cannot_start_fails_the_open_and_leaves_no_writer_running() {
    let dir = tmp();
    {
        let (ledger, _) = open(dir.path(), 4);
        check(&ledger, "t/s/before", 1, Decision::Accepted);
    }
    for started in 0..4 {
        let ended = super::threads::test_seam::fail_after(started);
        let err = Ledger::open(options(dir.path(), 4), metrics()).err().expect("the open fails");
        assert!(
            matches!(&err, Error::Spawn(e) if e.raw_os_error() == Some(11)),
            "{started} writers started: {err}"
        );
        assert_eq!(
            ended.load(std::sync::atomic::Ordering::SeqCst),
            started,
            "writers of the failed open still running when it returned"
        );
        let (ledger, _) = open(dir.path(), 4);
        check(&ledger, "t/s/before", 1, Decision::Duplicate);
        check(&ledger, &format!("t/s/after-{started}"), 1, Decision::Accepted);
    }
}

#[test]
fn invalid_shard_count_is_refused() {
    let dir = tmp();
    let err = Ledger::open(options(dir.path(), 0), metrics()).err().expect("refused");
    assert!(matches!(err, Error::Shards { shards: 0, .. }), "{err}");
}

#[test]
fn due_returns_events_in_order_with_metadata() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    for (key, at) in [("t/s/late", 30), ("t/s/early", 10), ("t/s/mid", 20)] {
        assert_eq!(decide(&ledger, key, 5, 1, at), Decision::Accepted);
    }
    // New events are due at their drain's time (monotonic per shard), in admission order.
    let now = crate::clock::now_unix_ms();
    let got = due(&ledger, now);
    let keys: Vec<_> = got.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["t/s/late", "t/s/early", "t/s/mid"]);
    assert!(got.windows(2).all(|w| (w[0].due_ms, w[0].seq) < (w[1].due_ms, w[1].seq)));
    assert_eq!(ledger.next_due_after(0, 0), Some(got[0].due_ms));
    assert_eq!(ledger.next_due_after(0, now), None, "strictly after");
    let e = &got[1];
    assert_eq!((e.source, e.attempts, e.received_at_ms), (1, 0, 10));
    assert!(e.due_ms <= now);
    assert_eq!((e.secret_id.as_str(), e.signed_at), ("k1", Some(1_700_000_000)));
    assert_eq!(e.content_type.as_deref(), Some(&b"application/json"[..]));
    assert_eq!(e.body, b"{\"id\":\"t/s/early\",\"v\":5}");
    let skip_early = ledger.due(0, None, now, 100, &HashSet::from([e.seq])).expect("reads");
    assert_eq!(skip_early.len(), 2);
    assert_eq!(ledger.due(0, None, now, 1, &HashSet::new()).expect("reads").len(), 1);
    assert!(ledger.due(5, None, 100, 1, &HashSet::new()).is_err(), "no such shard");
    // Resuming from a schedule position skips everything before it.
    let from = Some((got[1].due_ms, got[1].seq));
    let resumed = ledger.due(0, from, now, 100, &HashSet::new()).expect("reads");
    let keys: Vec<_> = resumed.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["t/s/early", "t/s/mid"]);
}

#[test]
fn settlements_move_schedule_and_state() {
    let dir = tmp();
    let (ledger, m) = open(dir.path(), 1);
    for key in ["t/s/retry", "t/s/ok", "t/s/dead"] {
        check(&ledger, key, 1, Decision::Accepted);
    }
    let first = due(&ledger, crate::clock::now_unix_ms());
    assert_eq!(first.len(), 3);
    let long_error = "é".repeat(ATTEMPT_ERROR_BYTES_MAX);
    let next_ms = crate::clock::now_unix_ms() + 3_600_000;
    let retry = Outcome::Retry { next_ms, error: long_error };
    assert!(settle(&ledger, &first[0], 1, retry.clone()));
    assert!(settle(&ledger, &first[1], 1, Outcome::Delivered { at_ms: 150 }));
    assert!(settle(&ledger, &first[2], 1, Outcome::Dead { error: "410 gone".into() }));
    assert!(due(&ledger, next_ms - 1).is_empty(), "retry not due before next_ms");
    let again = due(&ledger, next_ms);
    assert_eq!((again.len(), again[0].due_ms, again[0].attempts), (1, next_ms, 1));

    let r = ledger.event("t/s/retry").expect("reads").expect("exists");
    assert_eq!((r.state, r.next_attempt_ms), (EventState::Failed, Some(next_ms)));
    assert!(r.last_error.as_ref().is_some_and(|e| e.len() <= ATTEMPT_ERROR_BYTES_MAX));
    let ok = ledger.event("t/s/ok").expect("reads").expect("exists");
    assert_eq!((ok.state, ok.delivered_at_ms, ok.attempts), (EventState::Delivered, Some(150), 1));
    let dead = ledger.event("t/s/dead").expect("reads").expect("exists");
    assert_eq!((dead.state, dead.last_error.as_deref()), (EventState::Dead, Some("410 gone")));
    assert_eq!(gauges(&m), (vec![1, 0], vec![1, 0]));

    // A repeated settlement of an already settled entry is a no-op answered true.
    assert!(settle(&ledger, &first[1], 2, Outcome::Dead { error: "late".into() }));
    assert!(settle(&ledger, &first[0], 9, retry));
    let ok = ledger.event("t/s/ok").expect("reads").expect("exists");
    assert_eq!((ok.state, ok.attempts), (EventState::Delivered, 1));
    assert_eq!(ledger.event("t/s/retry").expect("reads").expect("exists").attempts, 1);
    assert_eq!(gauges(&m), (vec![1, 0], vec![1, 0]));
}

#[test]
fn gauges_are_recovered_after_reopen() {
    let dir = tmp();
    let expected = (vec![2, 1], vec![1, 0]);
    {
        let (ledger, m) = open(dir.path(), 2);
        for (i, source) in [0, 0, 0, 0, 1].into_iter().enumerate() {
            assert_eq!(decide(&ledger, &format!("t/s/{i}"), 1, source, 50), Decision::Accepted);
        }
        let mut pending: Vec<_> = due(&ledger, crate::clock::now_unix_ms())
            .into_iter()
            .filter(|e| e.source == 0)
            .collect();
        pending.sort_by_key(|e| e.key.clone());
        assert!(settle(&ledger, &pending[0], 1, Outcome::Delivered { at_ms: 60 }));
        assert!(settle(&ledger, &pending[1], 5, Outcome::Dead { error: "500".into() }));
        assert_eq!(gauges(&m), expected);
    }
    let (_ledger, m) = open(dir.path(), 2);
    assert_eq!(gauges(&m), expected);
}

#[test]
fn rejected_records_are_minimised_and_listed() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    ledger.reject(RejectedRecord {
        source: 1,
        received_at_ms: 77,
        reason: "no_stable_id",
        event_id: None,
        body_bytes: 512,
        fingerprint: [0xab; 32],
    });
    // The reject was queued first, so it is written no later than this admission's batch.
    check(&ledger, "t/s/after", 1, Decision::Accepted);
    let r = ledger.rejected(10).expect("reads");
    assert_eq!(r.len(), 1);
    let view = RejectedView {
        source: 1,
        received_at_ms: 77,
        reason: "no_stable_id".into(),
        event_id: None,
        body_bytes: 512,
        fingerprint: "ab".repeat(32),
    };
    assert_eq!(r[0], view);
    assert_eq!(ledger.rejects_dropped(), 0);
}

#[test]
fn full_queue_refuses_without_replying() {
    let dir = tmp();
    let (ledger, gate) = open_gated(dir.path(), 1);
    let (tx, rx) = unbounded();
    for i in 0..SHARD_QUEUE_MAX {
        let (mut a, _) = admission(&format!("t/s/{i}"), 1, 0, 1);
        let tx = tx.clone();
        a.reply = Box::new(move |d| tx.send(d).expect("test waits"));
        assert!(ledger.admit(a).is_ok(), "slot {i} is free");
    }
    let (extra, extra_rx) = admission("t/s/extra", 1, 0, 1);
    let refused = ledger.admit(extra).expect_err("queue is full");
    assert_eq!(refused.key, "t/s/extra");
    drop(refused);
    assert!(extra_rx.try_recv().is_err(), "a refused admission's reply is not called");
    drop(gate);
    let accepted = (0..SHARD_QUEUE_MAX).filter(|_| rx.recv() == Ok(Decision::Accepted)).count();
    assert_eq!(accepted, SHARD_QUEUE_MAX);
}

/// Unmounts the test tmpfs however the test ends.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let status = std::process::Command::new("umount").arg(&self.0).status();
        assert!(status.is_ok_and(|s| s.success()), "umount {}", self.0.display());
    }
}

fn run(cmd: &str, args: &[&str]) -> bool {
    std::process::Command::new(cmd).args(args).status().is_ok_and(|s| s.success())
}

/// Fills the filesystem holding `dir` until a write fails (ENOSPC).
fn fill(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("filler file");
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&block[..512]).is_ok() {}
    path
}

#[test]
fn failed_write_fails_closed() {
    let dir = tmp();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mount point");
    let mounted = run("mount", &["-t", "tmpfs", "-o", "size=8m", "tmpfs", &mnt.to_string_lossy()]);
    assert!(mounted, "this test mounts a tiny tmpfs to fill the disk: it must run as root");
    let _mount = Mount(mnt.clone());
    let (ledger, _) = open(&mnt, 1);
    check(&ledger, "t/s/before", 1, Decision::Accepted);
    let filler = fill(&mnt);
    let big = |key: &str| {
        let (mut a, rx) = admission(key, 3, 0, 5);
        a.body = vec![b'x'; 256 * 1024];
        assert!(ledger.admit(a).is_ok());
        rx.recv().expect("reply")
    };
    assert_eq!(big("t/s/full"), Decision::Unavailable);
    assert!(!ledger.healthy());
    std::fs::remove_file(filler).expect("free the space");
    // RocksDB keeps a failed WAL write as a background error: the open DB stays read-only
    // even after space is freed, so the ledger keeps failing closed until it is reopened.
    check(&ledger, "t/s/after-free", 4, Decision::Unavailable);
    assert!(!ledger.healthy());
    drop(ledger);
    let (ledger, _) = open(&mnt, 1);
    assert!(ledger.event("t/s/full").expect("reads").is_none(), "nothing was admitted");
    check(&ledger, "t/s/before", 1, Decision::Duplicate);
    check(&ledger, "t/s/full", 3, Decision::Accepted);
    assert!(ledger.healthy());
}

#[test]
fn the_admission_wait_counts_commits_and_items_ahead() {
    use super::handle::estimate_wait;
    use crate::limits::{COMMIT_BATCH_MAX as BATCH, SHARD_QUEUE_MAX};
    use std::time::Duration;
    let full = u64::try_from(SHARD_QUEUE_MAX / BATCH).expect("small") + 1;
    let cases = [
        // (queued ahead, commit ns, per-item ns) → ns
        ((0, 0, 0), 0),
        ((0, 300_000, 20_000), 300_000),
        ((10, 300_000, 20_000), 300_000 + 10 * 20_000),
        ((BATCH - 1, 300_000, 0), 300_000),
        ((BATCH, 300_000, 0), 2 * 300_000),
        ((SHARD_QUEUE_MAX, 1_000_000_000, 0), full * 1_000_000_000),
    ];
    for ((ahead, commit, item), ns) in cases {
        let wait = estimate_wait(ahead, BATCH, commit, item);
        assert_eq!(wait, Duration::from_nanos(ns), "{ahead}");
    }
    // A backend with larger batches (PostgreSQL) needs fewer commits for the same queue.
    let wait = estimate_wait(BATCH, 8 * BATCH, 300_000, 0);
    assert_eq!(wait, Duration::from_nanos(300_000), "one commit takes the whole queue");
}

#[test]
fn the_admission_wait_is_learned_from_synced_commits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ledger, _) = open(dir.path(), 1);
    assert_eq!(ledger.admission_wait("t/s/a").as_nanos(), 0, "nothing learned before a commit");
    assert_eq!(decide(&ledger, "t/s/a", 1, 0, 5), Decision::Accepted);
    let learned = ledger.admission_wait("t/s/b");
    assert!(learned.as_nanos() > 0, "a synced commit was learned");
    for _ in 0..200 {
        ledger.shed("t/s/b");
    }
    assert!(ledger.admission_wait("t/s/b") < learned / 1000, "sheds decay the estimate");
}

/// Carries out `action` on `key` and returns the writer's answer.
fn operate(ledger: &Ledger, key: &str, action: OpAction) -> Result<OpDone, OpRefused> {
    let (tx, rx) = bounded(1);
    ledger.operate(Operation {
        key: key.to_owned(),
        action,
        actor: "0a1b2c3d".into(),
        reason: Some(format!("{} {key}", action.code())),
        reply: Box::new(move |r| tx.send(r).expect("test waits for the reply")),
    });
    rx.recv().expect("writer replies")
}

/// R20: replay and drop move the state, the schedule and the gauges, are refused from states
/// they do not apply to, and each carried-out action leaves one audit record.
#[test]
fn operator_actions_move_state_schedule_gauges_and_audit() {
    let dir = tmp();
    let (ledger, m) = open(dir.path(), 2);
    for key in ["t/s/dead", "t/s/failed", "t/s/ok"] {
        check(&ledger, key, 1, Decision::Accepted);
    }
    let first = due(&ledger, crate::clock::now_unix_ms());
    let by_key = |k: &str| first.iter().find(|e| e.key == k).expect("due").clone();
    let later = crate::clock::now_unix_ms() + 3_600_000;
    assert!(settle(&ledger, &by_key("t/s/dead"), 5, Outcome::Dead { error: "500".into() }));
    let retry = Outcome::Retry { next_ms: later, error: "503".into() };
    assert!(settle(&ledger, &by_key("t/s/failed"), 1, retry));
    assert!(settle(&ledger, &by_key("t/s/ok"), 1, Outcome::Delivered { at_ms: 5 }));
    assert_eq!(gauges(&m), (vec![1, 0], vec![1, 0]));

    use EventState::{Dead, Delivered, Dropped, Failed, Received};
    let refused = |r| Err::<OpDone, OpRefused>(r);
    assert_eq!(operate(&ledger, "t/s/ok", OpAction::Replay), refused(OpRefused::State(Delivered)));
    assert_eq!(operate(&ledger, "t/s/never", OpAction::Drop), refused(OpRefused::NotFound));
    // Replay of a dead event: due now, attempts reset, out of the DLQ.
    let done = operate(&ledger, "t/s/dead", OpAction::Replay);
    assert_eq!(done, Ok(OpDone { before: Dead, after: Received }));
    let replayed = due(&ledger, crate::clock::now_unix_ms() + 1);
    assert_eq!(
        replayed.iter().map(|e| (e.key.as_str(), e.attempts)).collect::<Vec<_>>(),
        [("t/s/dead", 0)]
    );
    assert_eq!(gauges(&m), (vec![2, 0], vec![0, 0]));
    // Drop of a failed event removes its retry entry.
    let done = operate(&ledger, "t/s/failed", OpAction::Drop);
    assert_eq!(done, Ok(OpDone { before: Failed, after: Dropped }));
    assert!(due(&ledger, later).iter().all(|e| e.key != "t/s/failed"), "no retry after a drop");
    assert_eq!(operate(&ledger, "t/s/failed", OpAction::Drop), refused(OpRefused::State(Dropped)));
    assert_eq!(gauges(&m), (vec![1, 0], vec![0, 0]));
    // The dispatcher's settlement of the dropped event's old entry is a no-op.
    let e = ledger.event("t/s/failed").expect("reads").expect("exists");
    assert_eq!((e.state, e.next_attempt_ms), (Dropped, None));

    let audit = ledger.audit_page(None, 10).expect("audit reads");
    let actions: Vec<_> = audit
        .items
        .iter()
        .map(|a| (a.action.as_str(), a.key.as_deref(), a.state_before.as_deref()))
        .collect();
    assert_eq!(
        actions,
        [("drop", Some("t/s/failed"), Some("failed")), ("replay", Some("t/s/dead"), Some("dead"))]
    );
    assert_eq!(audit.items[0].reason.as_deref(), Some("drop t/s/failed"));
    assert_eq!(audit.next_cursor, None);
    let one = ledger.audit_page(None, 1).expect("audit reads");
    let rest = ledger.audit_page(one.next_cursor.as_deref(), 10).expect("audit reads");
    assert_eq!(
        (one.items.len(), rest.items.len(), rest.items[0].action.as_str()),
        (1, 1, "replay")
    );
}

/// The event list pages by cursor over every shard, filters by state and key prefix, and
/// refuses cursors it did not hand out.
#[test]
fn event_list_pages_and_filters() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 3);
    let keys: Vec<String> =
        (0..25).map(|n| format!("t/{}/e{n:02}", if n % 5 == 0 { "b" } else { "a" })).collect();
    for key in &keys {
        check(&ledger, key, 1, Decision::Accepted);
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = ledger.list_events(&EventQuery::default(), cursor.as_deref(), 4).expect("lists");
        assert!(page.items.len() <= 4);
        seen.extend(page.items.into_iter().map(|e| e.key));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    seen.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(seen, want, "every event once");
    let b = EventQuery { state: None, key_prefix: Some("t/b/".into()) };
    let page = ledger.list_events(&b, None, 100).expect("lists");
    assert_eq!(page.items.len(), 5);
    assert!(page.items.iter().all(|e| e.key.starts_with("t/b/")));
    let dead = EventQuery { state: Some(EventState::Dead), key_prefix: None };
    assert!(ledger.list_events(&dead, None, 100).expect("lists").items.is_empty());
    for bad in ["nope", "9.00", "0.zz"] {
        assert!(matches!(ledger.list_events(&b, Some(bad), 10), Err(Error::Cursor(_))), "{bad}");
    }
}

/// The event list walks claims in key order wherever they are: in the active memtable, in
/// table files, and the same key in both (admitted before a flush, settled after it), shown
/// once with its newest state.
#[test]
fn event_list_reads_claims_from_memtables_and_table_files_in_key_order() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 2);
    let key = |n: u32| format!("t/{}/e{n:02}", if n.is_multiple_of(3) { "b" } else { "a" });
    for n in (0..30).step_by(2) {
        check(&ledger, &key(n), 1, Decision::Accepted);
    }
    let db = &ledger.inner.db;
    for shard in 0..2 {
        db.flush_cf(store::cf(db, &store::cf_claims(shard))).expect("flushes");
    }
    for n in (1..30).step_by(2) {
        check(&ledger, &key(n), 1, Decision::Accepted);
    }
    // One claim of the flushed half changes after the flush: its newer version is in the
    // memtable, its older one in a table file; the list shows it once, as delivered.
    let first = due(&ledger, u64::MAX).into_iter().find(|e| e.key == key(0)).expect("e00 is due");
    assert!(settle(&ledger, &first, 1, Outcome::Delivered { at_ms: 5 }));
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = ledger.list_events(&EventQuery::default(), cursor.as_deref(), 7).expect("lists");
        seen.extend(page.items.into_iter().map(|e| (e.shard, e.key, e.state)));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let mut want: Vec<_> = (0..30).map(key).collect();
    want.sort();
    let mut sorted: Vec<String> = seen.iter().map(|(_, k, _)| k.clone()).collect();
    sorted.sort();
    assert_eq!(sorted, want, "every event once");
    for shard in 0..2 {
        let of_shard: Vec<&String> =
            seen.iter().filter(|(s, _, _)| *s == shard).map(|(_, k, _)| k).collect();
        assert!(
            of_shard.windows(2).all(|w| w[0] < w[1]),
            "shard {shard} in key order: {of_shard:?}"
        );
    }
    let states: Vec<EventState> =
        seen.iter().filter(|(_, k, _)| *k == key(0)).map(|(_, _, s)| *s).collect();
    assert_eq!(states, vec![EventState::Delivered]);
    let b = EventQuery { state: None, key_prefix: Some("t/b/".into()) };
    let page = ledger.list_events(&b, None, 100).expect("lists");
    let mut got: Vec<String> = page.items.into_iter().map(|e| e.key).collect();
    got.sort();
    let mut want_b: Vec<String> = (0..30).filter(|n: &u32| n.is_multiple_of(3)).map(key).collect();
    want_b.sort();
    assert_eq!(got, want_b);
    // A prefix that other keys sort after: the list stops at the prefix's end.
    let a = EventQuery { state: None, key_prefix: Some("t/a/".into()) };
    let page = ledger.list_events(&a, None, 100).expect("lists");
    let mut got: Vec<String> = page.items.into_iter().map(|e| e.key).collect();
    got.sort();
    let mut want_a: Vec<String> = (0..30).filter(|n: &u32| !n.is_multiple_of(3)).map(key).collect();
    want_a.sort();
    assert_eq!(got, want_a);
}

/// R25 with a controllable clock: a delivered event's payload goes after `payload_retention`
/// (it can then no longer be replayed), its identity after `dedupe_retention` (a later copy is
/// admitted anew); dead and unsettled events keep both.
#[test]
fn retention_expires_payloads_then_identities_of_settled_events_only() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const DAY_MS: u64 = 86_400_000;
    let dir = tmp();
    let now = Arc::new(AtomicU64::new(crate::clock::now_unix_ms()));
    let start = now.load(Ordering::SeqCst);
    let clock = Arc::clone(&now);
    let mut opts = options(dir.path(), 2);
    opts.retention = Some(Retention {
        payload: std::time::Duration::from_millis(3 * DAY_MS),
        dedupe: std::time::Duration::from_millis(7 * DAY_MS),
        now_ms: Arc::new(move || clock.load(Ordering::SeqCst)),
    });
    let ledger = Ledger::open(opts, metrics()).expect("ledger opens");
    for key in ["t/s/done", "t/s/dead", "t/s/waiting"] {
        assert_eq!(decide(&ledger, key, 1, 0, start), Decision::Accepted);
    }
    let first = due(&ledger, crate::clock::now_unix_ms());
    let by_key = |k: &str| first.iter().find(|e| e.key == k).expect("due").clone();
    let delivered = Outcome::Delivered { at_ms: start };
    assert!(settle(&ledger, &by_key("t/s/done"), 1, delivered));
    assert!(settle(&ledger, &by_key("t/s/dead"), 1, Outcome::Dead { error: "410".into() }));
    let payload = |k: &str| ledger.event_detail(k).expect("reads").and_then(|d| d.payload);
    // "t/s/done" was delivered at its first attempt: a delivered mark, not a rewritten claim.
    // The admin API's reads (one event, the list by state, the detail) all say delivered,
    // and the history holds the delivery once.
    let done = ledger.event("t/s/done").expect("reads").expect("exists");
    let delivered_at = Some(start);
    assert_eq!(
        (done.state, done.attempts, done.delivered_at_ms),
        (EventState::Delivered, 1, delivered_at)
    );
    assert_eq!(done.next_attempt_ms, None);
    let listed = |state| {
        let query = EventQuery { state: Some(state), key_prefix: None };
        let page = ledger.list_events(&query, None, 100).expect("lists");
        page.items.into_iter().map(|e| e.key).collect::<Vec<_>>()
    };
    assert!(listed(EventState::Delivered).contains(&"t/s/done".to_owned()));
    assert!(!listed(EventState::Received).contains(&"t/s/done".to_owned()));
    let history = ledger.event_detail("t/s/done").expect("reads").expect("exists").attempts;
    let outcomes: Vec<(u32, u64, &str)> =
        history.iter().map(|a| (a.attempt, a.at_ms, a.outcome.as_str())).collect();
    assert_eq!(outcomes, [(1, start, "delivered")], "the delivery once");

    now.store(start + DAY_MS, Ordering::SeqCst);
    assert_eq!(ledger.sweep_expired(), 0, "nothing expires after one day");
    assert!(payload("t/s/done").is_some());

    now.store(start + 4 * DAY_MS, Ordering::SeqCst);
    assert_eq!(ledger.sweep_expired(), 1, "the delivered event's payload");
    assert!(payload("t/s/done").is_none(), "payload gone after payload_retention");
    let detail = ledger.event_detail("t/s/done").expect("reads").expect("identity kept");
    assert!(detail.attempts.is_empty(), "attempt history goes with the payload");
    assert!(payload("t/s/dead").is_some() && payload("t/s/waiting").is_some());

    // A conflict (quarantine) and a schema reject, a day after the start.
    assert_eq!(decide(&ledger, "t/s/waiting", 9, 0, start + DAY_MS), Decision::Conflict);
    ledger.reject(RejectedRecord {
        source: 0,
        received_at_ms: start + DAY_MS,
        reason: "no_event_id",
        event_id: None,
        body_bytes: 1,
        fingerprint: [1; 32],
    });
    check(&ledger, "t/s/barrier", 1, Decision::Accepted);
    let minimised = |l: &Ledger| {
        (l.quarantined(10).expect("reads").len(), l.rejected(10).expect("reads").len())
    };
    assert_eq!(minimised(&ledger), (1, 1));

    now.store(start + 8 * DAY_MS, Ordering::SeqCst);
    assert_eq!(ledger.sweep_expired(), 1, "the delivered event's identity");
    assert_eq!(minimised(&ledger), (1, 1), "quarantine and rejects live dedupe_retention too");
    assert!(ledger.event("t/s/done").expect("reads").is_none(), "identity gone");
    check(&ledger, "t/s/done", 2, Decision::Accepted);
    check(&ledger, "t/s/dead", 1, Decision::Duplicate);
    check(&ledger, "t/s/waiting", 1, Decision::Duplicate);
    assert!(payload("t/s/dead").is_some() && payload("t/s/waiting").is_some());
    assert_eq!(ledger.sweep_expired(), 0, "each entry is handled once");
    now.store(start + 9 * DAY_MS, Ordering::SeqCst);
    ledger.sweep_expired();
    assert_eq!(minimised(&ledger), (0, 0), "quarantine and rejects gone after dedupe_retention");
}

/// Schedule entries carry what the dispatcher needs from the claim (attempts made, ordering
/// place); entries written before they did have an empty value, and are read with their
/// claim, so a ledger from an older version forwards its backlog with the right attempt
/// numbers and ordering.
#[test]
fn schedule_entries_without_a_value_are_read_with_their_claim() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    assert_eq!(decide_ordered(&ledger, "t/s/a", 1, Some("cus_1")), Decision::Accepted);
    let first = due_event(&ledger, "t/s/a");
    let next_ms = crate::clock::now_unix_ms() + 3_600_000;
    let retry = Outcome::Retry { next_ms, error: "503".into() };
    assert!(settle(&ledger, &first, 1, retry));
    let from_value = due(&ledger, next_ms);
    assert_eq!((from_value.len(), from_value[0].attempts), (1, 1));
    let place = from_value[0].ordering.clone().expect("an ordered event has its place");
    assert_eq!(place.value, "cus_1");

    // Rewrite the entry as an older version wrote it: key only, empty value.
    let db = &ledger.inner.db;
    let schedule = store::cf(db, &store::cf_schedule(0));
    let sk = codec::schedule_key(next_ms, first.seq);
    assert!(db.get_cf(schedule, sk).expect("reads").is_some_and(|v| !v.is_empty()));
    db.put_cf(schedule, sk, []).expect("raw put");
    let from_claim = due(&ledger, next_ms);
    assert_eq!((from_claim[0].attempts, from_claim[0].ordering.as_ref()), (1, Some(&place)));
}

/// Admits `key`, settles its first attempt as a retry ("503") an hour ahead, and returns that
/// first due event, the retry's due time (Unix ms) and the retry's due event.
fn admitted_then_failed_once(ledger: &Ledger, key: &str) -> (DueEvent, u64, DueEvent) {
    check(ledger, key, 1, Decision::Accepted);
    let first = due_event(ledger, key);
    let next_ms = crate::clock::now_unix_ms() + 3_600_000;
    assert!(settle(ledger, &first, 1, Outcome::Retry { next_ms, error: "503".into() }));
    let again = due(ledger, next_ms).pop().expect("the retry is due");
    (first, next_ms, again)
}

/// R20's history: a failed attempt is written with its settlement; the delivery is not (the
/// claim holds it, and delivered is final) but the history shows it last, once, also in a
/// ledger whose older version wrote it.
#[test]
fn a_delivered_events_history_ends_with_its_delivery_from_the_claim() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    let (first, next_ms, again) = admitted_then_failed_once(&ledger, "t/s/h");
    assert!(settle(&ledger, &again, 2, Outcome::Delivered { at_ms: next_ms + 5 }));

    let history = |ledger: &Ledger| {
        let d = ledger.event_detail("t/s/h").expect("reads").expect("exists");
        d.attempts
            .iter()
            .map(|a| (a.attempt, a.outcome.clone(), a.error.clone()))
            .collect::<Vec<_>>()
    };
    let want = vec![
        (1, "retry".to_owned(), Some("503".to_owned())),
        (2, codec::ATTEMPT_DELIVERED.to_owned(), None),
    ];
    assert_eq!(history(&ledger), want);
    let detail = ledger.event_detail("t/s/h").expect("reads").expect("exists");
    assert_eq!(detail.attempts[1].at_ms, next_ms + 5);

    // Stored after the record: the retry only.
    let db = &ledger.inner.db;
    let inbox = store::cf(db, &store::cf_inbox(0));
    let mut opts = rocksdb::ReadOptions::default();
    opts.set_iterate_lower_bound([&codec::seq_key(first.seq)[..], &[0]].concat());
    opts.set_iterate_upper_bound(codec::seq_key(first.seq + 1));
    assert_eq!(db.iterator_cf_opt(inbox, opts, rocksdb::IteratorMode::Start).count(), 1);

    // As an older version wrote it: the delivery in the history too. Shown once.
    let written = codec::AttemptRecord {
        attempt: 2,
        at_ms: next_ms + 5,
        outcome: codec::ATTEMPT_DELIVERED.to_owned(),
        error: None,
    };
    let key = codec::attempt_key(first.seq, next_ms + 5, 2);
    db.put_cf(inbox, key, codec::encode_attempt(&written)).expect("raw put");
    assert_eq!(history(&ledger), want);
}

/// A schedule entry that contradicts its claim (here: left behind for a delivered event, as a
/// bug or a damaged ledger would) is attempted once more, and that attempt's settlement
/// removes it instead of leaving it to be attempted forever; the claim is not touched.
#[test]
fn a_stray_schedule_entry_is_removed_by_its_settlement() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    check(&ledger, "t/s/x", 1, Decision::Accepted);
    let first = due_event(&ledger, "t/s/x");
    assert!(settle(&ledger, &first, 1, Outcome::Delivered { at_ms: 150 }));
    let db = &ledger.inner.db;
    let schedule = store::cf(db, &store::cf_schedule(0));
    db.put_cf(schedule, codec::schedule_key(first.due_ms, first.seq), []).expect("raw put");

    let stray = due_event(&ledger, "t/s/x");
    assert_eq!((stray.seq, stray.due_ms), (first.seq, first.due_ms));
    assert!(settle(&ledger, &stray, 2, Outcome::Delivered { at_ms: 160 }));
    assert!(due(&ledger, u64::MAX / 2).is_empty(), "the stray entry is still due");
    let e = ledger.event("t/s/x").expect("reads").expect("exists");
    assert_eq!((e.state, e.attempts, e.delivered_at_ms), (EventState::Delivered, 1, Some(150)));
}

/// Admits `key` (fingerprint from `fp`) in ordering group `group` (R22).
fn decide_ordered(ledger: &Ledger, key: &str, fp: u8, group: Option<&str>) -> Decision {
    let (mut a, rx) = admission(key, fp, 0, 100);
    a.ordering = group.map(str::to_owned);
    assert!(ledger.admit(a).is_ok(), "queue has room");
    rx.recv().expect("writer replies")
}

/// Whose turn it is among the due events: key → `ordering_turn`.
fn turns(ledger: &Ledger) -> std::collections::BTreeMap<String, bool> {
    due(ledger, u64::MAX / 2)
        .into_iter()
        .map(|e| {
            let turn = ledger.ordering_turn(&e).expect("ordering index reads");
            (e.key.clone(), turn)
        })
        .collect()
}

fn due_event(ledger: &Ledger, key: &str) -> DueEvent {
    due(ledger, u64::MAX / 2).into_iter().find(|e| e.key == key).expect("event is due")
}

/// R22: over two shards, only the first unsettled event of an ordering group (in admission
/// order) has its turn; a retry keeps it; delivery, dead-lettering and a drop pass the turn
/// on; a replayed event is unordered; groups, tenants and unordered events are independent;
/// admission order survives a reopen.
#[test]
fn ordering_groups_pass_the_turn_in_admission_order() {
    let dir = tmp();
    {
        let (ledger, _) = open(dir.path(), 2);
        for (n, key) in ["t/s/a0", "t/s/a1", "t/s/a2", "t/s/a3"].into_iter().enumerate() {
            let fp = u8::try_from(n).expect("small");
            assert_eq!(decide_ordered(&ledger, key, fp, Some("g")), Decision::Accepted);
        }
        assert_eq!(decide_ordered(&ledger, "t/s/b0", 9, Some("h")), Decision::Accepted);
        assert_eq!(decide_ordered(&ledger, "u/s/c0", 9, Some("g")), Decision::Accepted);
        assert_eq!(decide_ordered(&ledger, "t/s/plain", 9, None), Decision::Accepted);
        // A duplicate copy adds nothing to the group.
        assert_eq!(decide_ordered(&ledger, "t/s/a0", 0, Some("g")), Decision::Duplicate);
        let t = turns(&ledger);
        let expected = [
            ("t/s/a0", true),
            ("t/s/a1", false),
            ("t/s/a2", false),
            ("t/s/a3", false),
            ("t/s/b0", true),
            ("u/s/c0", true),
            ("t/s/plain", true),
        ];
        for (key, turn) in expected {
            assert_eq!(t[key], turn, "{key} in {t:?}");
        }
        let a0 = due_event(&ledger, "t/s/a0");
        let retry = Outcome::Retry { next_ms: 150, error: "503".into() };
        assert!(settle(&ledger, &a0, 1, retry));
        assert!(!turns(&ledger)["t/s/a1"], "a retry keeps its place");
        let a0 = due_event(&ledger, "t/s/a0");
        assert!(settle(&ledger, &a0, 2, Outcome::Delivered { at_ms: 200 }));
        assert!(turns(&ledger)["t/s/a1"], "delivered: the turn passes on");
        assert!(!turns(&ledger)["t/s/a2"]);
        assert!(operate(&ledger, "t/s/a1", OpAction::Drop).is_ok());
        assert!(turns(&ledger)["t/s/a2"], "dropped: the turn passes on");
        let a2 = due_event(&ledger, "t/s/a2");
        assert!(settle(&ledger, &a2, 1, Outcome::Dead { error: "400".into() }));
        assert!(turns(&ledger)["t/s/a3"], "dead-lettered: the turn passes on");
        assert!(operate(&ledger, "t/s/a2", OpAction::Replay).is_ok());
        let t = turns(&ledger);
        assert!(t["t/s/a2"] && t["t/s/a3"], "a replayed event is unordered: {t:?}");
        ledger.shutdown();
    }
    let (ledger, _) = open(dir.path(), 2);
    assert_eq!(decide_ordered(&ledger, "t/s/a4", 4, Some("g")), Decision::Accepted);
    let t = turns(&ledger);
    assert!(t["t/s/a3"] && !t["t/s/a4"], "admission order survives a reopen: {t:?}");
}

/// R25: writers sweep every quarter of the shortest non-zero retention, between 250 ms and
/// 10 s, so short test retentions expire promptly and production ones cost a sweep per 10 s.
#[test]
fn sweep_period_follows_the_shortest_retention() {
    use std::time::Duration as D;
    let r = |payload: u64, dedupe: u64| Retention {
        payload: D::from_millis(payload),
        dedupe: D::from_millis(dedupe),
        now_ms: Arc::new(|| 0),
    };
    let day = 86_400_000;
    assert_eq!(super::writer::sweep_every(&r(3 * day, 7 * day)), D::from_secs(10));
    assert_eq!(super::writer::sweep_every(&r(2000, 6000)), D::from_millis(500));
    assert_eq!(super::writer::sweep_every(&r(0, 4000)), D::from_secs(1), "0 = at settlement");
    assert_eq!(super::writer::sweep_every(&r(100, 200)), D::from_millis(250));
}

/// The attempt history of one event as (attempt, outcome, error) rows.
fn history_rows(ledger: &Ledger, key: &str) -> Vec<(u32, String, Option<String>)> {
    let d = ledger.event_detail(key).expect("reads").expect("exists");
    d.attempts.iter().map(|a| (a.attempt, a.outcome.clone(), a.error.clone())).collect()
}

/// R20's history across a dead-letter and a replay: the dead attempt stays, and the delivery
/// after the replay (attempt 1 again) is shown once, last; a stale settlement of the attempt
/// that was in flight when an operator replayed a failed event is a no-op (no history row,
/// no transition, the replayed entry stays due with 0 attempts and its ordering place).
#[test]
fn history_and_stale_settlements_across_replays() {
    let dir = tmp();
    let (ledger, m) = open(dir.path(), 1);
    check(&ledger, "t/s/d", 1, Decision::Accepted);
    let first = due_event(&ledger, "t/s/d");
    assert!(settle(&ledger, &first, 3, Outcome::Dead { error: "410".into() }));
    assert_eq!(
        operate(&ledger, "t/s/d", OpAction::Replay).map(|d| d.after),
        Ok(EventState::Received)
    );
    let again = due_event(&ledger, "t/s/d");
    assert_eq!(again.attempts, 0);
    // The old entry's settlement, repeated (the dispatcher's answer was lost): a no-op.
    assert!(settle(&ledger, &first, 4, Outcome::Retry { next_ms: 1, error: "x".into() }));
    assert_eq!(due_event(&ledger, "t/s/d").due_ms, again.due_ms);
    assert!(settle(&ledger, &again, 1, Outcome::Delivered { at_ms: again.due_ms + 7 }));
    let want = vec![
        (3, "dead".to_owned(), Some("410".to_owned())),
        (1, codec::ATTEMPT_DELIVERED.to_owned(), None),
    ];
    assert_eq!(history_rows(&ledger, "t/s/d"), want);
    // A second copy of the delivery's settlement is a no-op too.
    assert!(settle(&ledger, &again, 1, Outcome::Dead { error: "late".into() }));
    assert_eq!(history_rows(&ledger, "t/s/d"), want);
    let e = ledger.event("t/s/d").expect("reads").expect("exists");
    assert_eq!((e.state, e.attempts, e.next_attempt_ms), (EventState::Delivered, 1, None));
    assert_eq!(gauges(&m), (vec![0, 0], vec![0, 0]));

    // Failed, its retry in flight, replayed by an operator: the in-flight attempt's
    // settlement (old due time) does not touch the replayed event.
    assert_eq!(decide_ordered(&ledger, "t/s/f", 1, Some("cus_9")), Decision::Accepted);
    let f1 = due_event(&ledger, "t/s/f");
    let soon = crate::clock::now_unix_ms();
    assert!(settle(&ledger, &f1, 1, Outcome::Retry { next_ms: soon, error: "503".into() }));
    let f2 = due_event(&ledger, "t/s/f");
    assert_eq!((f2.due_ms, f2.attempts), (soon, 1));
    assert_eq!(
        operate(&ledger, "t/s/f", OpAction::Replay).map(|d| d.after),
        Ok(EventState::Received)
    );
    assert!(settle(&ledger, &f2, 2, Outcome::Dead { error: "500".into() }));
    let f3 = due_event(&ledger, "t/s/f");
    assert!(f3.due_ms > soon);
    assert_eq!((f3.attempts, f3.ordering.as_ref().map(|o| o.value.as_str())), (0, Some("cus_9")));
    assert_eq!(
        history_rows(&ledger, "t/s/f"),
        vec![(1, "retry".to_owned(), Some("503".to_owned()))]
    );
    let e = ledger.event("t/s/f").expect("reads").expect("exists");
    assert_eq!((e.state, e.attempts), (EventState::Received, 0));
}

/// The due scan reads each inbox record through one iterator that steps forward (issue 6): an
/// event whose retry made it due later sits with its attempt history between the records of
/// events due earlier, and is read back after them; every event gets its own body.
#[test]
fn due_reads_each_record_past_the_attempt_history_of_events_due_later() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    let keys = ["t/s/a", "t/s/b", "t/s/c", "t/s/d", "t/s/e"];
    for (i, key) in (1u8..).zip(keys) {
        check(&ledger, key, i, Decision::Accepted);
    }
    let later = crate::clock::now_unix_ms() + 60_000;
    for key in ["t/s/b", "t/s/c"] {
        let e = due_event(&ledger, key);
        let retry = Outcome::Retry { next_ms: later, error: "503".into() };
        assert!(settle(&ledger, &e, 1, retry), "retry of {key} written");
        assert_eq!(history_rows(&ledger, key).len(), 1, "{key} has an attempt row");
    }
    let got = due(&ledger, u64::MAX / 2);
    let order: Vec<_> = got.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(order, ["t/s/a", "t/s/d", "t/s/e", "t/s/b", "t/s/c"]);
    for (e, fp) in got.iter().zip([1, 4, 5, 2, 3]) {
        assert_eq!(e.body, body_of(&e.key, fp), "{}", e.key);
    }
    assert_eq!((got[3].attempts, got[4].attempts), (1, 1));
    // Skipping some (in flight) still reads the right record for the rest.
    let skipped =
        ledger.due(0, None, u64::MAX / 2, 100, &HashSet::from([got[1].seq])).expect("reads");
    let order: Vec<_> = skipped.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(order, ["t/s/a", "t/s/e", "t/s/b", "t/s/c"]);
    assert_eq!(skipped[1].body, got[2].body);
}

/// The due scan's steps to the next record are bounded (8): an event with 7 attempt rows is
/// passed by stepping, one with 8 or 9 by a seek, and every event still gets its own record.
#[test]
fn due_reads_the_next_record_past_long_attempt_histories() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    let keys: Vec<String> = (0..6).map(|i| format!("t/s/h{i}")).collect();
    for (key, fp) in keys.iter().zip(1u8..) {
        check(&ledger, key, fp, Decision::Accepted);
    }
    let db = &ledger.inner.db;
    let inbox = store::cf(db, &store::cf_inbox(0));
    for (e, rows) in due(&ledger, u64::MAX / 2).iter().zip([7u32, 8, 6, 9, 0, 0]) {
        for attempt in 0..rows {
            db.put_cf(inbox, codec::attempt_key(e.seq, 5, attempt), b"h").expect("raw put");
        }
    }
    let got = due(&ledger, u64::MAX / 2);
    let order: Vec<_> = got.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(order, keys);
    for (e, fp) in got.iter().zip(1..) {
        assert_eq!(e.body, body_of(&e.key, fp), "{}", e.key);
    }
}

/// A schedule entry whose inbox record is missing (a broken invariant) fails its shard's due
/// scan with an error naming the inbox, not an event with another's body.
#[test]
fn a_schedule_entry_without_its_inbox_record_fails_the_due_scan() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    for key in ["t/s/x", "t/s/y", "t/s/z"] {
        check(&ledger, key, 1, Decision::Accepted);
    }
    let y = due_event(&ledger, "t/s/y");
    let db = &ledger.inner.db;
    db.delete_cf(store::cf(db, &store::cf_inbox(0)), codec::seq_key(y.seq)).expect("raw delete");
    let err = ledger.due(0, None, u64::MAX / 2, 100, &HashSet::new()).expect_err("missing record");
    assert!(err.contains("inbox/0"), "{err}");
}

/// A corrupt schedule value (cut, or with trailing bytes) fails the due scan of its shard with
/// a corrupt-record error naming `schedule/{s}`; settlements do not read it.
#[test]
fn a_corrupt_schedule_value_fails_the_due_scan_and_not_the_settlement() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    check(&ledger, "t/s/c", 1, Decision::Accepted);
    let e = due_event(&ledger, "t/s/c");
    let db = &ledger.inner.db;
    let schedule = store::cf(db, &store::cf_schedule(0));
    let sk = codec::schedule_key(e.due_ms, e.seq);
    for bad in [&[0u8, 0, 0][..], &[0, 0, 0, 0, 9][..]] {
        db.put_cf(schedule, sk, bad).expect("raw put");
        let err =
            ledger.due(0, None, u64::MAX / 2, 100, &HashSet::new()).expect_err("corrupt value");
        assert!(err.contains("schedule/0"), "{err}");
    }
    // The settlement reads the claim only: it applies, and removes the corrupt entry.
    assert!(settle(&ledger, &e, 1, Outcome::Delivered { at_ms: e.due_ms }));
    assert!(due(&ledger, u64::MAX / 2).is_empty());
}

/// A ledger written before deliveries left the history has the delivery written; when it does
/// not sort last (its time, the attempt's end by the dispatcher's clock, is before a failed
/// attempt's row, stamped with its drain's due time — a wall clock stepped back, or a due-time
/// floor ahead of it), it is still shown once, where it was.
#[test]
fn a_written_delivery_that_does_not_sort_last_is_shown_once() {
    let dir = tmp();
    let (ledger, _) = open(dir.path(), 1);
    let (first, _, again) = admitted_then_failed_once(&ledger, "t/s/o");
    let retry_at = ledger.event_detail("t/s/o").expect("reads").expect("exists").attempts[0].at_ms;
    let at_ms = retry_at - 10;
    assert!(settle(&ledger, &again, 2, Outcome::Delivered { at_ms }));
    // As an older version wrote it: the delivery in the history too, sorting first.
    let written = codec::AttemptRecord {
        attempt: 2,
        at_ms,
        outcome: codec::ATTEMPT_DELIVERED.to_owned(),
        error: None,
    };
    let db = &ledger.inner.db;
    let inbox = store::cf(db, &store::cf_inbox(0));
    let key = codec::attempt_key(first.seq, at_ms, 2);
    db.put_cf(inbox, key, codec::encode_attempt(&written)).expect("raw put");
    let rows = history_rows(&ledger, "t/s/o");
    let delivered = rows.iter().filter(|r| r.1 == codec::ATTEMPT_DELIVERED).count();
    assert_eq!(delivered, 1, "history {rows:?}");
}

/// A core's event loop as the writer sees it: `wake_now` reports how many replies had
/// arrived by then.
struct CoreLoop {
    replies: Arc<std::sync::Mutex<usize>>,
    woken: Sender<usize>,
}

impl crate::wake::Wake for CoreLoop {
    fn wake_now(&self) {
        let seen = *self.replies.lock().expect("test lock");
        self.woken.send(seen).expect("test waits for wake-ups");
    }
}

#[test]
fn a_commit_wakes_each_waiting_core_once_after_all_its_replies() {
    // Issue 6: woken at the first reply, an ingress core on the writer's CPU preempted it
    // and was woken again by the next (~2 preemptions per commit).
    let dir = tmp();
    let (ledger, gate) = open_gated(dir.path(), 1);
    let replies = Arc::new(std::sync::Mutex::new(0usize));
    let (woken_tx, woken) = unbounded();
    let core = Arc::new(CoreLoop { replies: Arc::clone(&replies), woken: woken_tx });
    let admit_one = |i: usize| {
        let (mut a, rx) = admission(&format!("t/s/wake-{i}"), 1, 0, 100);
        let (replies, core) = (Arc::clone(&replies), Arc::clone(&core));
        a.reply = Box::new(move |_decision| {
            *replies.lock().expect("test lock") += 1;
            crate::wake::wake(&core);
        });
        assert!(ledger.admit(a).is_ok(), "queue has room");
        drop(rx);
    };
    for i in 0..8 {
        admit_one(i);
    }
    drop(gate);
    // A deadline, so a lost wake-up fails the test instead of hanging it.
    let wait = || woken.recv_timeout(std::time::Duration::from_secs(60)).expect("woken in time");
    assert_eq!(wait(), 8, "one wake-up, after every reply of the commit");
    admit_one(8);
    assert_eq!(wait(), 9, "the next wake-up is the next commit's");
}

/// One drain of `inputs` over shard 0 of `db`, decided and written on this thread as the
/// shard writer does (unsynced: these tests are about what is read, not durability).
fn writer_turn(
    logic: &mut decide::Shard,
    store: &super::writer::RocksShard,
    db: &store::Db,
    now_ms: u64,
    inputs: Vec<decide::Input>,
) {
    let mut d = logic.begin::<rocksdb::WriteBatch>(now_ms);
    for input in inputs {
        logic.decide(store, &mut d, input);
    }
    if let Some(batch) = logic.seal(store, &mut d) {
        db.write(batch).expect("batch written");
    }
    logic.applied(&mut d);
    d.answer(true);
}

/// A delivery settlement of the event admitted as inbox `seq` in a drain at `due_ms`.
fn delivered(key: &str, seq: u64, due_ms: u64) -> decide::Input {
    decide::Input::Settle(Settlement {
        shard: 0,
        seq,
        key: key.to_owned(),
        due_ms,
        attempts: 1,
        outcome: Outcome::Delivered { at_ms: due_ms },
        reply: Box::new(|ok| assert!(ok, "settlement decided")),
    })
}

fn admit(key: &str, at_ms: u64) -> decide::Input {
    let (mut a, _) = admission(key, 1, 0, at_ms);
    a.reply = Box::new(|d| assert_eq!(d, Decision::Accepted, "admitted"));
    decide::Input::Admit(a)
}

/// A retention sweep on this thread; the cursor is adopted as the writer adopts it.
fn sweep_now(
    logic: &mut decide::Shard,
    store: &super::writer::RocksShard,
    db: &store::Db,
    now_ms: u64,
) -> usize {
    let Some(decide::Sweep { batch, removed, through }) = logic.sweep(store, now_ms) else {
        return 0;
    };
    db.write(batch).expect("sweep written");
    logic.swept(through);
    removed
}

/// Shard 0 of a fresh one-shard ledger with the given retention (ms), driven on this thread.
fn shard_with_retention(
    dir: &Path,
    payload_ms: u64,
    dedupe_ms: u64,
) -> (Arc<store::Db>, super::writer::RocksShard, decide::Shard) {
    shard_with_sweeps_of(dir, payload_ms, dedupe_ms, decide::SWEEP_BATCH_MAX)
}

/// As [`shard_with_retention`], with sweeps of at most `sweep_batch` events' expiry entries.
fn shard_with_sweeps_of(
    dir: &Path,
    payload_ms: u64,
    dedupe_ms: u64,
    sweep_batch: usize,
) -> (Arc<store::Db>, super::writer::RocksShard, decide::Shard) {
    let (db, _) = store::open(dir, 1).expect("ledger opens");
    let db = Arc::new(db);
    let rules = Arc::new(decide::Rules {
        source_ids: vec!["s".into()],
        retention: Some(decide::Spans {
            payload: std::time::Duration::from_millis(payload_ms),
            dedupe: std::time::Duration::from_millis(dedupe_ms),
            sweep_batch,
        }),
        audit_seq: std::sync::atomic::AtomicU64::new(0),
        order_stamp: std::sync::atomic::AtomicU64::new(0),
        recent_claims: decide::RECENT_CLAIMS_MAX,
    });
    let store = super::writer::RocksShard::new(Arc::clone(&db), 0);
    (db, store, decide::Shard::new(0, 0, std::collections::HashMap::new(), rules))
}

/// Rows of inbox seq `seq` of shard 0 (its record and attempt history: [seq, seq + 1)).
fn inbox_rows(db: &store::Db, seq: u64) -> usize {
    let cf = store::cf(db, &store::cf_inbox(0));
    let mut opts = rocksdb::ReadOptions::default();
    opts.set_iterate_lower_bound(codec::seq_key(seq).to_vec());
    opts.set_iterate_upper_bound(codec::seq_key(seq + 1).to_vec());
    let mark = codec::delivered_mark_key(seq);
    db.iterator_cf_opt(cf, opts, rocksdb::IteratorMode::Start)
        .filter(|e| e.as_ref().map_or(true, |(k, _)| **k != mark))
        .count()
}

/// Whether shard 0 holds the delivered mark of inbox `seq`.
fn has_delivered_mark(db: &store::Db, seq: u64) -> bool {
    let cf = store::cf(db, &store::cf_inbox(0));
    db.get_cf(cf, codec::delivered_mark_key(seq)).expect("reads").is_some()
}

/// The claim of `key` in shard 0 as stored, without its delivered mark.
fn stored_claim(db: &store::Db, key: &str) -> Option<codec::Claim> {
    let cf = store::cf(db, &store::cf_claims(0));
    let v = db.get_cf(cf, key).expect("reads")?;
    Some(codec::decode_claim(&v).expect("decodes"))
}

/// A first delivery is a delivered mark, not a rewritten claim (`codec::delivered_mark_key`,
/// docs/benchmarks.md run 33): the stored claim stays as admitted, every read of it says
/// delivered, and the mark lives exactly as long as the claim. A payload's expiry keeps it —
/// also the scan of every `[seq, seq + 1)` row that expires the payload of an event dropped
/// and replayed before its delivery (which then has both kinds of expiry entries) — and the
/// identity's expiry removes it with the claim. Without that, the claim would read `received`
/// with no schedule entry, and never expire.
#[test]
fn a_delivered_mark_lives_exactly_as_long_as_its_claim() {
    let dir = tmp();
    let (db, store, mut logic) = shard_with_retention(dir.path(), 1_000, 5_000);
    let t0 = 1_700_000_000_000;
    let keys = ["t/s/first", "t/s/replayed"];
    writer_turn(&mut logic, &store, &db, t0, keys.iter().map(|k| admit(k, t0)).collect());
    writer_turn(&mut logic, &store, &db, t0, vec![operated(keys[1], OpAction::Drop)]);
    writer_turn(&mut logic, &store, &db, t0, vec![operated(keys[1], OpAction::Replay)]);
    let settle = vec![delivered(keys[0], 0, t0), delivered(keys[1], 1, t0 + 1)];
    writer_turn(&mut logic, &store, &db, t0 + 1, settle);
    let state =
        |key: &str| decide::claim(&store, key).expect("reads").map(|c| (c.state, c.attempts));
    for (seq, key) in (0..).zip(keys) {
        let stored = stored_claim(&db, key).expect("claim stored");
        assert_eq!(stored.state, EventState::Received, "{key}: the claim is not rewritten");
        assert!(has_delivered_mark(&db, seq), "{key}: delivered mark written");
        assert_eq!(state(key), Some((EventState::Delivered, 1)), "{key} reads delivered");
    }

    sweep_now(&mut logic, &store, &db, t0 + 2_000);
    for (seq, key) in (0..).zip(keys) {
        assert_eq!(inbox_rows(&db, seq), 0, "{key}: payload gone");
        assert!(has_delivered_mark(&db, seq), "{key}: the mark stays with the claim");
        assert_eq!(state(key), Some((EventState::Delivered, 1)), "{key} still delivered");
    }

    sweep_now(&mut logic, &store, &db, t0 + 6_000);
    for (seq, key) in (0..).zip(keys) {
        assert_eq!(state(key), None, "{key}: identity gone");
        assert!(!has_delivered_mark(&db, seq), "{key}: the mark went with the claim");
    }
}

/// The expiry entries of shard 0, `(due_ms, kind, seq)` in key order.
fn expiry_entries(db: &store::Db) -> Vec<(u64, codec::ExpiryKind, u64)> {
    let prefix = store::meta_expiry_prefix(0);
    let mode = rocksdb::IteratorMode::From(&prefix, rocksdb::Direction::Forward);
    db.iterator_cf(store::cf(db, store::CF_META), mode)
        .map(|e| e.expect("reads"))
        .take_while(|(k, _)| k.starts_with(&prefix))
        .map(|(k, _)| codec::parse_expiry_key(&k[prefix.len()..]).expect("an expiry key"))
        .collect()
}

/// R25 with one expiry entry per group commit (ledger format 3, docs/benchmarks.md run 34): the
/// events a commit delivered cleanly share one payload entry, and one identity entry per second
/// they were received in — not two entries each. Their payloads expire together; each identity
/// is remembered for its whole dedupe window, measured from its own receipt, and forgotten at
/// most a second after it closes, with its delivered mark.
#[test]
fn the_events_a_commit_delivered_share_their_expiry_entries() {
    use codec::ExpiryKind::{DeliveredIdentities, DeliveredPayloads};
    let dir = tmp();
    let (db, store, mut logic) = shard_with_retention(dir.path(), 1_000, 5_000);
    let t0 = 1_700_000_000_000; // the start of a second
    let received = [("t/s/a", t0 + 100), ("t/s/b", t0 + 999), ("t/s/c", t0 + 1_000)];
    for (key, at) in received {
        writer_turn(&mut logic, &store, &db, at, vec![admit(key, at)]);
    }
    let settled_at = t0 + 2_000;
    // Each settles the schedule entry its admission wrote (due at its receipt).
    let settle = (0..).zip(received).map(|(seq, (key, at))| delivered(key, seq, at));
    writer_turn(&mut logic, &store, &db, settled_at, settle.collect());
    assert_eq!(
        expiry_entries(&db),
        [
            (settled_at + 1_000, DeliveredPayloads, 0),
            (t0 + 999 + 5_000, DeliveredIdentities, 0),
            (t0 + 1_999 + 5_000, DeliveredIdentities, 2),
        ],
        "one payload entry for the commit, one identity entry per second of receipt"
    );

    assert_eq!(sweep_now(&mut logic, &store, &db, settled_at + 999), 0, "payloads kept");
    assert_eq!(sweep_now(&mut logic, &store, &db, settled_at + 1_000), 3, "payloads expired");
    let state = |key: &str| decide::claim(&store, key).expect("reads").map(|c| c.state);
    for (seq, (key, _)) in (0..).zip(received) {
        assert_eq!(inbox_rows(&db, seq), 0, "{key}: payload gone");
        assert_eq!(state(key), Some(EventState::Delivered), "{key}: identity kept");
    }

    // Not early: each identity is kept until its own window (5 s after receipt) has closed.
    let first_window_end = t0 + 100 + 5_000;
    assert_eq!(sweep_now(&mut logic, &store, &db, first_window_end - 1), 0, "no identity early");
    // Late by at most a second: the first second's two expire at its end plus the window.
    assert_eq!(sweep_now(&mut logic, &store, &db, t0 + 999 + 5_000), 2);
    assert_eq!((state("t/s/a"), state("t/s/b")), (None, None), "the first second's identities");
    assert!(!has_delivered_mark(&db, 0) && !has_delivered_mark(&db, 1), "their marks with them");
    assert_eq!(state("t/s/c"), Some(EventState::Delivered), "the next second's not yet");
    assert_eq!(sweep_now(&mut logic, &store, &db, t0 + 1_999 + 5_000), 1);
    assert_eq!(state("t/s/c"), None, "forgotten within a second of its window's end");
    assert!(!has_delivered_mark(&db, 2), "its mark with it");
    assert_eq!(expiry_entries(&db), [], "every entry swept");
}

/// A ledger written by a format-2 build holds one `DeliveredPayload` and one
/// `DeliveredIdentity` entry per cleanly delivered event; this build sweeps them as that build
/// did (payload blind, identity checked against the claim and taken with its mark).
#[test]
fn a_format_2_ledgers_per_event_expiry_entries_are_swept() {
    use codec::ExpiryKind::{DeliveredIdentity, DeliveredPayload};
    let dir = tmp();
    let (db, store, mut logic) = shard_with_retention(dir.path(), 1_000, 5_000);
    let t0 = 1_700_000_000_000;
    let keys = ["t/s/a", "t/s/b"];
    writer_turn(&mut logic, &store, &db, t0, keys.iter().map(|k| admit(k, t0)).collect());
    let settle = (0..).zip(keys).map(|(seq, key)| delivered(key, seq, t0));
    writer_turn(&mut logic, &store, &db, t0, settle.collect());
    // Replace the groups by what a format-2 build wrote for the same events.
    let (meta, prefix) = (store::cf(&db, store::CF_META), store::meta_expiry_prefix(0));
    for (at, kind, seq) in expiry_entries(&db) {
        let entry = codec::expiry_key(at, kind, seq);
        db.delete_cf(meta, [prefix.as_slice(), &entry].concat()).expect("deletes");
    }
    for (seq, key) in (0..).zip(keys) {
        for (at, kind) in [(t0 + 1_000, DeliveredPayload), (t0 + 5_000, DeliveredIdentity)] {
            let entry = codec::expiry_key(at, kind, seq);
            db.put_cf(meta, [prefix.as_slice(), &entry].concat(), key).expect("writes");
        }
    }
    let state = |key: &str| decide::claim(&store, key).expect("reads").map(|c| c.state);
    assert_eq!(sweep_now(&mut logic, &store, &db, t0 + 1_000), 2, "payloads expired");
    for (seq, key) in (0..).zip(keys) {
        assert_eq!(inbox_rows(&db, seq), 0, "{key}: payload gone");
        assert_eq!(state(key), Some(EventState::Delivered), "{key}: identity kept");
    }
    assert_eq!(sweep_now(&mut logic, &store, &db, t0 + 5_000), 2, "identities expired");
    for (seq, key) in (0..).zip(keys) {
        assert_eq!(state(key), None, "{key}: identity gone");
        assert!(!has_delivered_mark(&db, seq), "{key}: its mark with it");
    }
    assert_eq!(expiry_entries(&db), [], "every entry swept");
}

/// Counts, on this thread, the memtable lookups (point reads) and deleted keys stepped over
/// (scans) of `f`, from RocksDB's per-thread perf context.
fn reads_of<R>(f: impl FnOnce() -> R) -> (R, u64, u64) {
    use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};
    set_perf_stats(PerfStatsLevel::EnableCount);
    let mut ctx = PerfContext::default();
    ctx.reset();
    let r = f();
    let gets = ctx.metric(PerfMetric::GetFromMemtableCount);
    let skipped = ctx.metric(PerfMetric::InternalDeleteSkippedCount);
    set_perf_stats(PerfStatsLevel::Disable);
    (r, gets, skipped)
}

/// R25 at a steady rate: a sweep of delivered events' payloads reads nothing but the expiry
/// list, and only the entries that expired since the last sweep. It used to read every event's
/// claim, open an iterator over its inbox records, and scan the expiry list from its head,
/// stepping over the tombstone of every entry removed since the last compaction: on
/// `benches/soak.sh` the writer spent most of its time there and the event rate fell to a
/// fifth every other million events. Counted by RocksDB's per-thread perf context.
#[test]
fn a_sweep_of_delivered_events_reads_only_the_entries_expired_since_the_last_one() {
    const EVENTS: u64 = 500;
    let dir = tmp();
    let (db, store, mut logic) = shard_with_retention(dir.path(), 1_000, 86_400_000);
    let t0 = 1_700_000_000_000;
    let keys: Vec<String> = (0..EVENTS).map(|i| format!("t/s/e{i}")).collect();
    writer_turn(&mut logic, &store, &db, t0, keys.iter().map(|k| admit(k, t0)).collect());
    let settle = keys.iter().zip(0..).map(|(k, seq)| delivered(k, seq, t0)).collect();
    writer_turn(&mut logic, &store, &db, t0, settle);
    let (removed, gets, _) = reads_of(|| sweep_now(&mut logic, &store, &db, t0 + 2_000));
    assert_eq!(removed, EVENTS as usize, "every payload");
    assert_eq!(gets, 0, "the sweep of delivered events read claims");
    for seq in [0, EVENTS - 1] {
        assert_eq!(inbox_rows(&db, seq), 0, "payload {seq} gone");
    }

    writer_turn(&mut logic, &store, &db, t0 + 2_000, vec![admit("t/s/late", t0 + 2_000)]);
    writer_turn(
        &mut logic,
        &store,
        &db,
        t0 + 2_000,
        vec![delivered("t/s/late", EVENTS, t0 + 2_000)],
    );
    let (removed, _, skipped) = reads_of(|| sweep_now(&mut logic, &store, &db, t0 + 4_000));
    assert_eq!(removed, 1, "the one payload that expired since");
    assert!(skipped < 10, "the sweep stepped over {skipped} entries earlier sweeps deleted");
}

/// An event delivered after a failed attempt has an attempt history (R20): its payload's
/// expiry removes the record and every history row (`inbox/s`, [seq, seq + 1)), and its
/// identity's expiry the claim.
#[test]
fn a_retried_events_history_expires_with_its_payload() {
    let dir = tmp();
    let (db, store, mut logic) = shard_with_retention(dir.path(), 1_000, 5_000);
    let t0 = 1_700_000_000_000;
    writer_turn(&mut logic, &store, &db, t0, vec![admit("t/s/retried", t0)]);
    let retry = decide::Input::Settle(Settlement {
        shard: 0,
        seq: 0,
        key: "t/s/retried".into(),
        due_ms: t0,
        attempts: 1,
        outcome: Outcome::Retry { next_ms: t0 + 100, error: "503".into() },
        reply: Box::new(|ok| assert!(ok, "settlement decided")),
    });
    writer_turn(&mut logic, &store, &db, t0, vec![retry]);
    writer_turn(&mut logic, &store, &db, t0 + 100, vec![delivered("t/s/retried", 0, t0 + 100)]);
    assert_eq!(inbox_rows(&db, 0), 2, "the inbox record and one attempt row");
    assert_eq!(sweep_now(&mut logic, &store, &db, t0 + 2_000), 1, "the payload");
    assert_eq!(inbox_rows(&db, 0), 0, "record and history gone together");
    assert!(decide::claim(&store, "t/s/retried").expect("reads").is_some(), "identity kept");
    assert_eq!(sweep_now(&mut logic, &store, &db, t0 + 6_000), 1, "the identity");
    assert!(decide::claim(&store, "t/s/retried").expect("reads").is_none(), "identity gone");
}

/// The sweep cursor never hides an entry: an event delivered after its identity's expiry time
/// has passed the cursor (it waited in the inbox longer than `dedupe_retention`) is still
/// forgotten by the next sweep (R25).
#[test]
fn an_expiry_entry_behind_the_sweep_cursor_is_still_swept() {
    let dir = tmp();
    let (db, store, mut logic) = shard_with_retention(dir.path(), 1_000, 5_000);
    let t0 = 1_700_000_000_000;
    writer_turn(&mut logic, &store, &db, t0, vec![admit("t/s/slow", t0), admit("t/s/fast", t0)]);
    writer_turn(&mut logic, &store, &db, t0, vec![delivered("t/s/fast", 1, t0)]);
    assert_eq!(sweep_now(&mut logic, &store, &db, t0 + 6_000), 2, "fast's payload and identity");
    // Delivered at t0 + 7 s: its identity expired at t0 + 5 s, before what was swept.
    writer_turn(&mut logic, &store, &db, t0 + 7_000, vec![delivered("t/s/slow", 0, t0)]);
    assert_eq!(sweep_now(&mut logic, &store, &db, t0 + 9_000), 2, "slow's identity and payload");
    let claim = decide::claim(&store, "t/s/slow").expect("reads");
    assert!(claim.is_none(), "the identity behind the cursor was forgotten: {claim:?}");
}

/// An operator action decided on this thread's shard; it must be allowed.
fn operated(key: &str, action: OpAction) -> decide::Input {
    decide::Input::Operate(Operation {
        key: key.to_owned(),
        action,
        actor: "test".into(),
        reason: Some("test".into()),
        reply: Box::new(move |r| assert!(r.is_ok(), "{action:?} allowed: {r:?}")),
    })
}

/// R25 never forgets an identity inside its window, even when one event has two identity
/// expiry entries: dropped by an operator (one entry, at its window's end), replayed and
/// delivered (another, shared with its group commit: up to a second later). If the first is
/// swept, the identity expires and the event is admitted anew, the second — swept later —
/// must not remove the new admission's claim: identity entries are checked against the claim's
/// seq, per event of a shared entry too.
#[test]
fn a_second_identity_entry_never_removes_a_readmitted_claim() {
    const PAYLOAD_MS: u64 = 1_000;
    const DEDUPE_MS: u64 = 10_000;
    let dir = tmp();
    // Three entries per sweep: the event's two payload entries and its first identity entry.
    let (db, store, mut logic) = shard_with_sweeps_of(dir.path(), PAYLOAD_MS, DEDUPE_MS, 3);
    let t0 = 1_700_000_000_000;
    // The event: admitted (seq 0), dropped, replayed, delivered at its first attempt.
    writer_turn(&mut logic, &store, &db, t0, vec![admit("t/s/k", t0)]);
    writer_turn(&mut logic, &store, &db, t0, vec![operated("t/s/k", OpAction::Drop)]);
    writer_turn(&mut logic, &store, &db, t0, vec![operated("t/s/k", OpAction::Replay)]);
    let replayed = decide::claim(&store, "t/s/k").expect("reads").expect("claim").next_attempt_ms;
    let due = replayed.expect("replayed events are due");
    writer_turn(&mut logic, &store, &db, t0, vec![delivered("t/s/k", 0, due)]);

    let expiry = t0 + DEDUPE_MS;
    sweep_now(&mut logic, &store, &db, expiry);
    assert!(decide::claim(&store, "t/s/k").expect("reads").is_none(), "first identity expired");
    writer_turn(&mut logic, &store, &db, expiry + 1, vec![admit("t/s/k", expiry + 1)]);
    // Past the second entry's time (the end of the second of receipt, plus the window).
    let second_entry = t0 / 1_000 * 1_000 + 999 + DEDUPE_MS;
    sweep_now(&mut logic, &store, &db, second_entry);
    assert_eq!(expiry_entries(&db), [], "the second entry was swept");
    let claim = decide::claim(&store, "t/s/k").expect("reads");
    assert!(
        claim.is_some_and(|c| c.seq > 0),
        "the new admission's identity was removed by the old event's second entry"
    );
}
