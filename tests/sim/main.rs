//! Deterministic simulation of the ledger and dispatch decisions (issue 5, item 1).
//!
//! The shard writers' decision code (`hookwall::ledger::decide`, the very code the RocksDB
//! writer runs), the verify and inspect code of the ingress, and the dispatcher's
//! classification (`hookwall::dispatch::classify`) are driven step by step from one seed: a
//! provider sends events (some forged, some conflicting, copies and retries), a simulated clock
//! moves, a simulated store (`store.rs`) crashes and loses unsynced writes or fails reads and
//! writes, the destination delivers, fails, times out or hangs, an operator replays and drops,
//! and retention sweeps. After every step the checker asserts the promise of issue 5:
//!
//! * no identity is admitted twice inside its dedupe window;
//! * every acknowledged event stays in the ledger and ends delivered, dead or dropped (checked
//!   at the end, after a quiet phase), never lost;
//! * nothing that failed verification is forwarded, and only the first admitted body of a key;
//! * retention never forgets an identity inside its window.
//!
//! `HOOKWALL_SIM_SEED=N` replays seed N; `HOOKWALL_SIM_SEEDS=N` runs seeds `0..N` (default: a
//! short smoke set and the regression seeds). A failure prints its seed.

#[path = "../common/rng.rs"]
mod rng;
mod store;
mod world;

use world::World;

/// Seeds run by default (CI): well under a minute in release.
const SMOKE_SEEDS: u64 = 300;

/// Seeds beyond the smoke set that once found a bug, run by default too. (A change to the
/// simulation's use of its random numbers changes what a seed plays; these are kept while
/// they still reach their case, checked by reintroducing the bug.)
/// * 3111: an event dropped, replayed and delivered has two identity expiry entries; with
///   the second one swept blindly, it removed the claim of the key's next admission inside
///   its dedupe window (found with `HOOKWALL_SIM_SEEDS=5000` and sweeps of 1–4 entries).
const REGRESSION_SEEDS: &[u64] = &[3111];

fn env_u64(name: &str) -> Option<u64> {
    // A set but unreadable value is a typo: stop, never silently run the default seeds.
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")))
}

/// Runs one seed; `Err` holds the seed's failure message.
fn run_seed(seed: u64) -> Result<world::Stats, String> {
    let outcome = std::panic::catch_unwind(|| World::new(seed).run());
    match outcome {
        Ok(Ok(stats)) => Ok(stats),
        Ok(Err(violation)) => Err(violation),
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            Err(format!("panicked: {text}"))
        }
    }
}

#[test]
fn seeded_simulation_keeps_the_promise() {
    let seeds: Vec<u64> = match env_u64("HOOKWALL_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("HOOKWALL_SIM_FIRST").unwrap_or(0);
            let chosen = env_u64("HOOKWALL_SIM_SEEDS");
            let count = chosen.unwrap_or(SMOKE_SEEDS);
            let end = first.checked_add(count).unwrap_or_else(|| {
                panic!("HOOKWALL_SIM_FIRST + HOOKWALL_SIM_SEEDS overflows u64 ({first} + {count})")
            });
            let mut seeds: Vec<u64> = (first..end).collect();
            if chosen.is_none() {
                seeds.extend(REGRESSION_SEEDS.iter().filter(|s| !(first..end).contains(s)));
            }
            seeds
        }
    };
    let mut total = world::Stats::default();
    let mut failures = Vec::new();
    // A seed's panic is reported with its seed below, not as a backtrace per seed.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for &seed in &seeds {
        match run_seed(seed) {
            Ok(stats) => total.add(&stats),
            Err(why) => {
                eprintln!("sim: seed {seed} FAILED: {why}\n  replay: HOOKWALL_SIM_SEED={seed} cargo test --release --test sim");
                failures.push(seed);
                if failures.len() >= 10 {
                    break;
                }
            }
        }
    }
    std::panic::set_hook(hook);
    eprintln!("sim: {} seeds, {total}", seeds.len());
    assert!(failures.is_empty(), "simulation failed for seeds {failures:?}");
    assert!(total.acked > 0 && total.delivered > 0, "the simulation exercised nothing: {total}");
}

/// The checker catches a store that loses a synced write: a deliberately broken store (every
/// crash also drops the last synced batch's effects) must fail some seed. Guards against a
/// checker that cannot fail.
#[test]
fn the_checker_catches_a_lost_acknowledged_event() {
    let mut caught = false;
    for seed in 0..50 {
        let mut w = World::new(seed);
        w.sabotage_forget_acked = true;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || w.run()))
            .map_or(true, |r| r.is_err())
        {
            caught = true;
            break;
        }
    }
    assert!(caught, "forgetting acknowledged claims went unnoticed");
}

/// Regression (found by the simulation, seed 6 of the first run): a failed READ of a settled
/// event's inbox record or claim (now its claim alone) panicked the shard writer ("inbox read failed"), killing the
/// shard until the process was restarted. It is an operating error: the settlement is refused
/// (`false`), nothing is written, and the attempt is repeated later.
#[test]
fn a_read_failure_while_settling_refuses_the_settlement() {
    // No ring of recent claims: the settlement reads its claim from the store.
    let (settled, wrote, still_due) = settle_with_every_read_failing(0);
    assert_eq!(settled, [false], "the settlement is refused");
    assert!(!wrote, "a refused settlement writes nothing");
    assert_eq!(still_due, 1, "the event is still due: its attempt is repeated");
}

/// Issue 6: a settlement finds the claim its admission wrote a moment before in the shard's
/// ring of recent claims (`decide::RecentClaims`) and reads nothing: with every read failing it
/// is still decided and written, and the event is no longer due.
#[test]
fn a_settlement_of_a_recent_admission_reads_no_claim() {
    let (settled, wrote, still_due) = settle_with_every_read_failing(8);
    assert_eq!(settled, [true], "decided from the ring, without a read");
    assert!(wrote, "the delivery is written");
    assert_eq!(still_due, 0, "delivered: nothing left to attempt");
}

/// Admits one event, then settles it as delivered while every store read fails; returns the
/// settlement's answers, whether it wrote a batch, and how many events are due afterwards
/// (read without faults).
fn settle_with_every_read_failing(recent_claims: usize) -> (Vec<bool>, bool, usize) {
    use std::cell::RefCell;
    use std::sync::{Arc, Mutex};

    use hookwall::ledger::decide::{self, Input, Shard};
    use hookwall::ledger::Decision;

    let rules = one_source_rules(None, recent_claims);
    let db = RefCell::new(store::Db::new(7));
    let view = store::View { db: &db, shard: 0, faulty: true };
    let mut shard = Shard::new(0, 0, std::collections::HashMap::new(), rules);
    let decided = Arc::new(Mutex::new(Vec::new()));
    let answers = Arc::clone(&decided);
    let admission =
        admission_at_1000(Box::new(move |d| answers.lock().expect("no poison").push(d)));
    let mut d = shard.begin::<Vec<store::Op>>(1_000);
    shard.decide(&view, &mut d, Input::Admit(admission));
    let batch = shard.seal(&view, &mut d).expect("an admission writes");
    db.borrow_mut().write(batch, true).expect("no fault yet");
    shard.applied(&mut d);
    d.answer(true);
    assert_eq!(*decided.lock().expect("no poison"), [Decision::Accepted]);
    let due = decide::due(&view, 0, 1_000, 8, &|_| false).expect("no fault yet");
    assert_eq!(due.len(), 1);

    // The settlement's one read, its claim, fails.
    db.borrow_mut().read_fault = 1000;
    let settled = Arc::new(Mutex::new(Vec::new()));
    let answers = Arc::clone(&settled);
    let reply = Box::new(move |ok| answers.lock().expect("no poison").push(ok));
    let settlement = delivered_first_attempt(&due[0], 1_001, reply);
    let mut d = shard.begin::<Vec<store::Op>>(1_001);
    shard.decide(&view, &mut d, Input::Settle(settlement));
    let batch = shard.seal(&view, &mut d);
    let wrote = batch.is_some();
    let written = batch.is_none_or(|b| db.borrow_mut().write(b, false).is_ok());
    d.answer(written);
    db.borrow_mut().read_fault = 0;
    let due = decide::due(&view, 0, 1_001, 8, &|_| false).expect("no fault now");
    let answers = settled.lock().expect("no poison").clone();
    (answers, wrote, due.len())
}

/// A sweep whose reads fail at one expiry entry writes the entries before it (each whole) and
/// leaves that one and the rest for the next timed sweep, instead of throwing the whole sweep
/// away (review: a read that kept failing on one key stopped the shard's retention, and was
/// retried and logged after every drain). Here the payload entry needs no read and is swept;
/// the identity entry's claim read fails, so the claim and its entry stay, and a later sweep
/// without the fault removes them.
#[test]
fn a_sweep_writes_the_entries_before_a_failed_read() {
    use std::cell::RefCell;
    use std::ops::ControlFlow;
    use std::time::Duration;

    use hookwall::ledger::decide::{self, Col, Input, Shard, ShardStore, Spans, Sweep};

    /// The store of `view`, with every claim read failing.
    struct ClaimsFail<'a>(store::View<'a>);

    impl ShardStore for ClaimsFail<'_> {
        type Error = store::Fault;
        type Batch = Vec<store::Op>;
        fn get<R>(
            &self,
            col: Col,
            key: &[u8],
            f: impl FnOnce(&[u8]) -> R,
        ) -> Result<Option<R>, store::Fault> {
            if col == Col::Claims {
                return Err(store::Fault);
            }
            self.0.get(col, key, f)
        }
        fn scan(
            &self,
            col: Col,
            lower: &[u8],
            upper: &[u8],
            each: &mut decide::Visit<'_>,
        ) -> Result<(), store::Fault> {
            self.0.scan(col, lower, upper, each)
        }
        fn put(&self, batch: &mut Vec<store::Op>, col: Col, key: &[u8], value: &[u8]) {
            self.0.put(batch, col, key, value);
        }
        fn delete(&self, batch: &mut Vec<store::Op>, col: Col, key: &[u8]) {
            self.0.delete(batch, col, key);
        }
        fn delete_range(&self, batch: &mut Vec<store::Op>, col: Col, from: &[u8], to: &[u8]) {
            self.0.delete_range(batch, col, from, to);
        }
        fn is_empty(&self, batch: &Vec<store::Op>) -> bool {
            self.0.is_empty(batch)
        }
    }

    let spans = Spans {
        payload: Duration::from_millis(1_000),
        dedupe: Duration::from_millis(5_000),
        sweep_batch: 100,
    };
    let rules = one_source_rules(Some(spans), 0);
    let db = RefCell::new(store::Db::new(7));
    let view = store::View { db: &db, shard: 0, faulty: false };
    let mut shard = Shard::new(0, 0, std::collections::HashMap::new(), rules);
    let admission = admission_at_1000(Box::new(|_| {}));
    let mut d = shard.begin::<Vec<store::Op>>(1_000);
    shard.decide(&view, &mut d, Input::Admit(admission));
    db.borrow_mut().write(shard.seal(&view, &mut d).expect("writes"), true).expect("written");
    shard.applied(&mut d);
    d.answer(true);
    let due = decide::due(&view, 0, 1_000, 8, &|_| false).expect("reads");
    let settlement = delivered_first_attempt(&due[0], 1_000, Box::new(|_| {}));
    let mut d = shard.begin::<Vec<store::Op>>(1_000);
    shard.decide(&view, &mut d, Input::Settle(settlement));
    db.borrow_mut().write(shard.seal(&view, &mut d).expect("writes"), false).expect("written");
    shard.applied(&mut d);
    d.answer(true);
    let inbox_rows = || {
        let mut rows = 0;
        let mut count = |_: &[u8], _: &[u8]| {
            rows += 1;
            ControlFlow::Continue(())
        };
        view.scan(Col::Inbox, &[], &[0xFF; 21], &mut count).expect("reads");
        rows
    };
    assert_eq!(inbox_rows(), 2, "the record and its delivered mark");

    // Both entries are due; the identity entry's claim read fails.
    let failing = ClaimsFail(store::View { db: &db, shard: 0, faulty: false });
    let Some(Sweep { batch, removed, through }) = shard.sweep(&failing, 7_000) else {
        panic!("the payload entry before the failed read is swept");
    };
    assert_eq!(removed, 1, "the payload");
    db.borrow_mut().write(batch, false).expect("written");
    shard.swept(through);
    assert!(!shard.expiry_backlog(), "retried at the next timed sweep, not after every drain");
    assert_eq!(inbox_rows(), 1, "the payload is gone, the mark stays with its claim");
    assert!(decide::claim(&view, "t/s/1").expect("reads").is_some(), "the identity stays");

    let Some(Sweep { batch, removed, through }) = shard.sweep(&view, 7_000) else {
        panic!("the identity entry is swept once its read works");
    };
    assert_eq!(removed, 1, "the identity");
    db.borrow_mut().write(batch, false).expect("written");
    shard.swept(through);
    assert_eq!(inbox_rows(), 0, "the mark went with the claim");
    assert!(decide::claim(&view, "t/s/1").expect("reads").is_none(), "the identity is gone");
}

/// The rules of the targeted tests' one shard (source `s`).
fn one_source_rules(
    retention: Option<hookwall::ledger::decide::Spans>,
    recent_claims: usize,
) -> std::sync::Arc<hookwall::ledger::decide::Rules> {
    std::sync::Arc::new(hookwall::ledger::decide::Rules {
        source_ids: vec!["s".to_owned()],
        retention,
        audit_seq: std::sync::atomic::AtomicU64::new(0),
        order_stamp: std::sync::atomic::AtomicU64::new(0),
        recent_claims,
    })
}

/// The admission of `t/s/1` received at 1 000 ms, answered through `reply`.
fn admission_at_1000(
    reply: Box<dyn FnOnce(hookwall::ledger::Decision) + Send>,
) -> hookwall::ledger::Admission {
    hookwall::ledger::Admission {
        key: "t/s/1".to_owned(),
        source: 0,
        fingerprint: [1; 32],
        event_type: None,
        secret_id: "k".to_owned(),
        signed_at: None,
        received_at_ms: 1_000,
        content_type: None,
        body: b"{}".to_vec(),
        ordering: None,
        reply,
    }
}

/// The settlement of `due`'s first attempt, delivered at `at_ms`, answered through `reply`.
fn delivered_first_attempt(
    due: &hookwall::ledger::DueEvent,
    at_ms: u64,
    reply: Box<dyn FnOnce(bool) + Send>,
) -> hookwall::ledger::Settlement {
    hookwall::ledger::Settlement {
        shard: due.shard,
        seq: due.seq,
        key: due.key.clone(),
        due_ms: due.due_ms,
        attempts: 1,
        outcome: hookwall::ledger::Outcome::Delivered { at_ms },
        reply,
    }
}
