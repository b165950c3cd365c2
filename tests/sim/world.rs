//! One simulated world: provider, ingress (real verify and inspect), shard writers (the real
//! decisions over the simulated store), dispatcher (real classification), destination, operator,
//! clock, crashes; and the checker.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookwall::config::{Config, DestinationConfig, SourceConfig};
use hookwall::dispatch::{classify, AttemptResult};
use hookwall::http::Request;
use hookwall::ledger::decide::{self, Col, Input, Rules, Shard, Spans};
use hookwall::ledger::{
    Admission, Decision, EventState, OpAction, OpDone, OpRefused, Operation, Settlement,
};

use crate::rng::Rng;
use crate::store::{Db, View};

/// The source's signing secret (GitHub accepts any text).
const SECRET: &str = "It's a Secret to Everybody";
/// Shards of the simulated ledger.
const SHARDS: usize = 2;
/// Identity retention (R25), simulated ms.
const DEDUPE_MS: u64 = 120_000;
/// Payload retention, simulated ms.
const PAYLOAD_MS: u64 = 30_000;
/// Steps of the faulty phase.
const STEPS: usize = 400;
/// Most steps of the quiet phase (no faults, a healthy destination) before "stuck".
const QUIET_STEPS_MAX: usize = 4000;
/// Simulated start: 2026-01-01T00:00:00Z.
const START_MS: u64 = 1_767_225_600_000;

/// What a seed did (summed over a campaign).
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub sent: u64,
    pub forged: u64,
    pub acked: u64,
    pub conflicts: u64,
    pub unavailable: u64,
    pub delivered: u64,
    pub dead: u64,
    pub dropped: u64,
    pub forwarded: u64,
    pub crashes: u64,
    pub lost_unsynced: u64,
    pub write_faults: u64,
    pub read_faults: u64,
    pub expired: u64,
    pub operations: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.sent += o.sent;
        self.forged += o.forged;
        self.acked += o.acked;
        self.conflicts += o.conflicts;
        self.unavailable += o.unavailable;
        self.delivered += o.delivered;
        self.dead += o.dead;
        self.dropped += o.dropped;
        self.forwarded += o.forwarded;
        self.crashes += o.crashes;
        self.lost_unsynced += o.lost_unsynced;
        self.write_faults += o.write_faults;
        self.read_faults += o.read_faults;
        self.expired += o.expired;
        self.operations += o.operations;
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sent {} (forged {}), acknowledged {}, conflicts {}, unavailable {}; settled: delivered {} dead {} dropped {}; \
             forwarded {}; crashes {} (unsynced batches lost {}), write faults {}, read faults {}, identities expired {}, operator actions {}",
            self.sent, self.forged, self.acked, self.conflicts, self.unavailable, self.delivered, self.dead,
            self.dropped, self.forwarded, self.crashes, self.lost_unsynced, self.write_faults, self.read_faults,
            self.expired, self.operations
        )
    }
}

/// `rand::Rng` over the seeded xorshift (for `classify`'s jitter).
struct Jitter(Rng);

impl rand::RngCore for Jitter {
    fn next_u32(&mut self) -> u32 {
        (self.0.next() >> 32) as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for b in dst {
            *b = self.0.next() as u8;
        }
    }
}

/// One event as the provider knows it.
struct Event {
    id: String,
    /// The body the provider signs.
    body: Vec<u8>,
    /// A second, different body sent under the same id now and then (a conflict, R11).
    conflicting: Vec<u8>,
    /// The provider has had a 2xx for it.
    acked: bool,
}

/// How the destination behaves for a while.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Healthy,
    Flaky,
    Down,
    Hanging,
}

/// An attempt in flight.
struct Attempt {
    shard: usize,
    seq: u64,
    key: String,
    due_ms: u64,
    attempts: u32,
    finish_at: u64,
    result: AttemptResult,
    /// The settlement was handed to the writer; waiting for its answer.
    settling: bool,
}

type Answers<T> = Arc<Mutex<Vec<T>>>;

/// What the checker knows of an acknowledged key.
#[derive(Debug, Clone)]
struct Known {
    /// `received_at_ms` of the claim that was acknowledged.
    received_at_ms: u64,
    /// Seq of that claim.
    seq: u64,
}

pub struct World {
    rng: Rng,
    jitter: Jitter,
    now: u64,
    source: SourceConfig,
    dest: DestinationConfig,
    rules: Arc<Rules>,
    db: RefCell<Db>,
    shards: Vec<Shard>,
    queues: Vec<VecDeque<Input>>,
    events: Vec<Event>,
    mode: Mode,
    in_flight: BTreeMap<(usize, u64), Attempt>,
    /// Answers from the writers: (key, decision, received_at of the copy).
    admit_answers: Answers<(String, Decision)>,
    settle_answers: Answers<((usize, u64), bool)>,
    op_answers: Answers<(String, Result<OpDone, OpRefused>)>,
    /// Bodies sent with a valid signature, per key.
    signed: HashMap<String, BTreeSet<Vec<u8>>>,
    /// Acknowledged keys (accepted or duplicate answered).
    known: BTreeMap<String, Known>,
    /// Keys the destination received, with the body.
    received: HashMap<String, u64>,
    /// Last accept answer per key: when (sim ms) and the claim's received_at.
    last_accept: HashMap<String, u64>,
    stats: Stats,
    /// Test of the checker: after each crash, forget one acknowledged claim.
    pub sabotage_forget_acked: bool,
}

fn load(dest_extra: &str) -> (SourceConfig, DestinationConfig) {
    let text = format!(
        "[ledger]\npath = \"/nonexistent\"\n[[source]]\nid = \"gh\"\ntenant = \"t\"\nprovider = \"github\"\n\
         secrets = [{{ id = \"k\", value = {SECRET:?} }}]\ndestination = \"d\"\n\
         [[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\n{dest_extra}"
    );
    let mut config = Config::from_toml_str(&text, Path::new("sim.toml"), &|_| None)
        .unwrap_or_else(|e| panic!("the simulation's config loads: {e:?}"));
    (config.sources.remove(0), config.destinations.remove(0))
}

fn shard_of(key: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % SHARDS as u64) as usize
}

fn sign(body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
    format!("sha256={}", hex::encode(ring::hmac::sign(&key, body).as_ref()))
}

impl World {
    pub fn new(seed: u64) -> World {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let attempts = 2 + rng.below(4);
        let (source, dest) = load(&format!(
            "timeout = \"10s\"\nattempts_max = {attempts}\nbackoff_min = \"1s\"\nbackoff_max = \"20s\"\n"
        ));
        let rules = Arc::new(Rules {
            source_ids: vec![source.id.clone()],
            retention: Some(Spans {
                payload: Duration::from_millis(PAYLOAD_MS),
                dedupe: Duration::from_millis(DEDUPE_MS),
                // A few events' entries per sweep (1..=4), so one event's entries (payload, identity,
                // and a second pair after a drop and replay) often fall into different sweeps.
                sweep_batch: 1 + rng.below(4),
            }),
            audit_seq: std::sync::atomic::AtomicU64::new(0),
            order_stamp: std::sync::atomic::AtomicU64::new(0),
            // A few slots or none: settlements find their claim in the ring, miss it (taken
            // by another seq's claim), or read the store, all in one run. From the seed, not
            // the world's random stream, so older seeds still replay their runs.
            recent_claims: usize::try_from(seed % 9).expect("below 9"),
        });
        let count = 4 + rng.below(30);
        let events = (0..count)
            .map(|i| Event {
                id: format!("d-{seed}-{i}"),
                body: format!("{{\"n\":{i},\"v\":\"first\"}}").into_bytes(),
                conflicting: format!("{{\"n\":{i},\"v\":\"other\"}}").into_bytes(),
                acked: false,
            })
            .collect();
        let mut db = Db::new(rng.next());
        db.read_fault = [0, 0, 5, 20][rng.below(4)];
        db.write_fault = [0, 0, 10, 50][rng.below(4)];
        let jitter = Jitter(Rng(rng.next() | 1));
        let shards =
            (0..SHARDS).map(|s| Shard::new(s, 0, HashMap::new(), Arc::clone(&rules))).collect();
        World {
            rng,
            jitter,
            now: START_MS,
            source,
            dest,
            rules,
            db: RefCell::new(db),
            shards,
            queues: (0..SHARDS).map(|_| VecDeque::new()).collect(),
            events,
            mode: Mode::Healthy,
            in_flight: BTreeMap::new(),
            admit_answers: Arc::default(),
            settle_answers: Arc::default(),
            op_answers: Arc::default(),
            signed: HashMap::new(),
            known: BTreeMap::new(),
            received: HashMap::new(),
            last_accept: HashMap::new(),
            stats: Stats::default(),
            sabotage_forget_acked: false,
        }
    }

    fn view(&self, shard: usize) -> View<'_> {
        View { db: &self.db, shard, faulty: true }
    }

    fn oracle(&self, shard: usize) -> View<'_> {
        View { db: &self.db, shard, faulty: false }
    }

    fn chance(&mut self, per_mille: usize) -> bool {
        self.rng.below(1000) < per_mille
    }

    /// Runs the faulty phase, then the quiet phase, checking after every step.
    pub fn run(mut self) -> Result<Stats, String> {
        for step in 0..STEPS {
            self.step(true);
            self.check().map_err(|e| format!("step {step}: {e}"))?;
        }
        {
            let mut db = self.db.borrow_mut();
            db.read_fault = 0;
            db.write_fault = 0;
        }
        self.mode = Mode::Healthy;
        for step in 0..QUIET_STEPS_MAX {
            self.step(false);
            self.check().map_err(|e| format!("quiet step {step}: {e}"))?;
            if self.settled() {
                self.final_check()?;
                self.retention_leaves_nothing()?;
                self.stats.read_faults = self.db.borrow().read_faults.get();
                return Ok(self.stats);
            }
        }
        Err(format!("stuck: acknowledged events never settled: {:?}", self.unsettled()))
    }

    fn step(&mut self, faulty: bool) {
        // The clock: mostly small moves, sometimes a long quiet time (retries, retention).
        self.now += match self.rng.below(100) {
            0..=79 => self.rng.below(300) as u64,
            80..=97 => 1_000 + self.rng.below(10_000) as u64,
            _ => 30_000 + self.rng.below(90_000) as u64,
        };
        if faulty && self.chance(30) {
            self.mode = [Mode::Healthy, Mode::Healthy, Mode::Flaky, Mode::Down, Mode::Hanging]
                [self.rng.below(5)];
        }
        let sends = if faulty { self.rng.below(4) } else { 1 };
        for _ in 0..sends {
            self.send(faulty);
        }
        if faulty && self.chance(20) {
            self.operate();
        }
        self.dispatch();
        for s in 0..SHARDS {
            if !self.queues[s].is_empty() || self.chance(100) {
                self.writer_turn(s, faulty);
            }
            if self.chance(150) {
                self.sweep(s);
            }
        }
        if faulty && self.chance(15) {
            self.crash();
        }
    }

    /// The provider sends one copy: a new or unacknowledged event, a redelivery, a conflict
    /// or a forgery. The ingress verifies and inspects it with the product's code.
    fn send(&mut self, faulty: bool) {
        let i = if faulty {
            self.rng.below(self.events.len())
        } else {
            // Quiet phase: the provider retries what it has no 2xx for.
            match self.events.iter().position(|e| !e.acked) {
                Some(i) => i,
                None => return,
            }
        };
        let roll = self.rng.below(100);
        let (body, forged) = match roll {
            0..=5 if faulty => (self.events[i].conflicting.clone(), false),
            6..=13 if faulty => (format!("{{\"n\":{i},\"v\":\"forged\"}}").into_bytes(), true),
            _ => (self.events[i].body.clone(), false),
        };
        let signature = if forged {
            // A forger signs with the wrong secret, or replays another body's signature.
            if self.rng.below(2) == 0 {
                sign(b"something else")
            } else {
                "sha256=00".to_owned()
            }
        } else {
            sign(&body)
        };
        let id = self.events[i].id.clone();
        let req = Request {
            method: "POST".to_owned(),
            target: "/webhooks/gh".to_owned(),
            headers: [
                ("content-type", b"application/json".to_vec()),
                ("x-github-event", b"push".to_vec()),
                ("x-github-delivery", id.clone().into_bytes()),
                ("x-hub-signature-256", signature.into_bytes()),
            ]
            .into_iter()
            .collect(),
            body: body.clone(),
            keep_alive: true,
        };
        self.stats.sent += 1;
        let now_s = i64::try_from(self.now / 1000).expect("time fits");
        let verified = match hookwall::verify::verify(&self.source, &req, now_s) {
            Ok(v) => v,
            Err(_) => {
                self.stats.forged += 1;
                return;
            }
        };
        assert!(!forged, "a forged copy passed verification");
        let inspected =
            hookwall::inspect::inspect(&self.source, &req).expect("the sim's bodies inspect");
        let key = format!("{}/{}/{}", self.source.tenant, self.source.id, inspected.event_id);
        self.signed.entry(key.clone()).or_default().insert(body.clone());
        let answers = Arc::clone(&self.admit_answers);
        let reply_key = key.clone();
        let admission = Admission {
            key: key.clone(),
            source: 0,
            fingerprint: inspected.fingerprint,
            event_type: inspected.event_type,
            secret_id: self.source.secrets[verified.secret_index].id.clone(),
            signed_at: verified.signed_at,
            received_at_ms: self.now,
            content_type: Some(b"application/json".to_vec()),
            body,
            ordering: None,
            reply: Box::new(move |d| answers.lock().expect("no poison").push((reply_key, d))),
        };
        self.queues[shard_of(&key)].push_back(Input::Admit(admission));
    }

    /// An operator replays or drops a known event.
    fn operate(&mut self) {
        if self.known.is_empty() {
            return;
        }
        let n = self.rng.below(self.known.len());
        let key = self.known.keys().nth(n).expect("n < len").clone();
        let action = if self.rng.below(2) == 0 { OpAction::Replay } else { OpAction::Drop };
        let answers = Arc::clone(&self.op_answers);
        let reply_key = key.clone();
        self.stats.operations += 1;
        let op = Operation {
            key: key.clone(),
            action,
            actor: "sim".to_owned(),
            reason: Some("simulated".to_owned()),
            reply: Box::new(move |r| answers.lock().expect("no poison").push((reply_key, r))),
        };
        self.queues[shard_of(&key)].push_back(Input::Operate(op));
    }

    /// The dispatcher: start attempts on due events, finish attempts whose time has come
    /// (classified by the product's `classify`) and hand their settlements to the writers.
    fn dispatch(&mut self) {
        for s in 0..SHARDS {
            let in_flight: BTreeSet<u64> =
                self.in_flight.keys().filter(|(sh, _)| *sh == s).map(|(_, seq)| *seq).collect();
            let due = {
                let view = self.view(s);
                decide::due(&view, s, self.now, 8, &|seq| in_flight.contains(&seq))
            };
            let Ok(due) = due else { continue };
            for ev in due {
                let latency = 5 + self.rng.below(800) as u64;
                let timeout = u64::try_from(self.dest.timeout.as_millis()).expect("fits");
                let roll = self.rng.below(100);
                let (result, got_it, finish_at) = match (self.mode, roll) {
                    (Mode::Healthy, 0..=94) | (Mode::Flaky, 0..=49) => (
                        AttemptResult::Status { code: 200, retry_after: None },
                        true,
                        self.now + latency,
                    ),
                    (Mode::Healthy, _) | (Mode::Flaky, 50..=69) => (
                        AttemptResult::Status { code: 503, retry_after: None },
                        false,
                        self.now + latency,
                    ),
                    (Mode::Flaky, 70..=74) => (
                        AttemptResult::Status { code: 422, retry_after: None },
                        false,
                        self.now + latency,
                    ),
                    (Mode::Flaky, 75..=84) | (Mode::Hanging, _) => {
                        // A timeout: the destination may well have processed it (R21).
                        (AttemptResult::Timeout, roll.is_multiple_of(2), self.now + timeout)
                    }
                    (Mode::Flaky, _) => (
                        AttemptResult::Other("connection reset".to_owned()),
                        roll.is_multiple_of(3),
                        self.now + latency,
                    ),
                    (Mode::Down, _) => {
                        (AttemptResult::Connect("refused".to_owned()), false, self.now + latency)
                    }
                };
                if got_it {
                    // What the destination saw: the key and the exact body, which must be a
                    // body signed with the source's secret, and the key's first binding (R11).
                    let signed = self.signed.get(&ev.key).is_some_and(|b| b.contains(&ev.body));
                    assert!(
                        signed,
                        "forwarded a body that never passed verification under {}",
                        ev.key
                    );
                    let claim = decide::claim(&self.oracle(s), &ev.key)
                        .expect("oracle reads do not fail")
                        .unwrap_or_else(|| panic!("forwarded {} without a claim", ev.key));
                    let digest = ring::digest::digest(&ring::digest::SHA256, &ev.body);
                    assert!(
                        digest.as_ref() == claim.fingerprint,
                        "forwarded a body of {} other than its first binding",
                        ev.key
                    );
                    *self.received.entry(ev.key.clone()).or_insert(0) += 1;
                    self.stats.forwarded += 1;
                }
                let attempt = Attempt {
                    shard: s,
                    seq: ev.seq,
                    key: ev.key.clone(),
                    due_ms: ev.due_ms,
                    attempts: ev.attempts + 1,
                    finish_at,
                    result,
                    settling: false,
                };
                self.in_flight.insert((s, ev.seq), attempt);
            }
        }
        let now = self.now;
        let finished: Vec<(usize, u64)> = self
            .in_flight
            .iter()
            .filter(|(_, a)| !a.settling && a.finish_at <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in finished {
            let a = self.in_flight.get_mut(&k).expect("listed");
            a.settling = true;
            let outcome = classify(&a.result, a.attempts, &self.dest, now, &mut self.jitter);
            let answers = Arc::clone(&self.settle_answers);
            let settlement = Settlement {
                shard: a.shard,
                seq: a.seq,
                key: a.key.clone(),
                due_ms: a.due_ms,
                attempts: a.attempts,
                outcome,
                reply: Box::new(move |ok| answers.lock().expect("no poison").push((k, ok))),
            };
            self.queues[a.shard].push_back(Input::Settle(settlement));
        }
    }

    /// One shard writer turn: a drain of 1..=64 queued items, decided by the product's code,
    /// written as one batch, answered after the write.
    fn writer_turn(&mut self, s: usize, faulty: bool) {
        // Like the real writer, a drain takes what is queued (here: a random part of it).
        let take = (1 + self.rng.below(64)).min(self.queues[s].len());
        let items: Vec<Input> = self.queues[s].drain(..take).collect();
        let now = self.now;
        let mut shard = std::mem::replace(
            &mut self.shards[s],
            Shard::new(s, 0, HashMap::new(), Arc::clone(&self.rules)),
        );
        let view = View { db: &self.db, shard: s, faulty: true };
        let mut d = shard.begin::<Vec<crate::store::Op>>(now);
        for item in items {
            shard.decide(&view, &mut d, item);
        }
        let sync = d.needs_sync();
        let written = match shard.seal(&view, &mut d) {
            None => true,
            Some(batch) => {
                let r = self.db.borrow_mut().write(batch, sync);
                if r.is_err() {
                    self.stats.write_faults += 1;
                }
                r.is_ok()
            }
        };
        if written {
            shard.applied(&mut d);
        }
        self.shards[s] = shard;
        // A crash between the write and the replies: nobody hears the answers.
        if faulty && self.chance(10) {
            drop(d);
            self.crash();
            return;
        }
        d.answer(written);
        self.collect();
    }

    /// A retention sweep of shard `s` (unsynced, as the writer writes it).
    fn sweep(&mut self, s: usize) {
        let now = self.now;
        let view = View { db: &self.db, shard: s, faulty: true };
        let swept = self.shards[s].sweep(&view, now);
        if let Some(decide::Sweep { batch, through, .. }) = swept {
            if self.db.borrow_mut().write(batch, false).is_err() {
                self.stats.write_faults += 1;
            } else {
                self.shards[s].swept(through);
            }
        }
    }

    /// Reads the replies the writers gave.
    fn collect(&mut self) {
        let answers: Vec<_> = std::mem::take(&mut *self.admit_answers.lock().expect("no poison"));
        for (key, decision) in answers {
            match decision {
                Decision::Accepted | Decision::Duplicate => {
                    self.stats.acked += 1;
                    let claim = decide::claim(&self.oracle(shard_of(&key)), &key)
                        .expect("oracle reads do not fail")
                        .unwrap_or_else(|| {
                            panic!("{key} answered {decision:?} without a visible claim")
                        });
                    if decision == Decision::Accepted {
                        if let Some(&prev) = self.last_accept.get(&key) {
                            // The second admission is decided now: the first identity's window
                            // (from its admission, R25) must have closed by then.
                            assert!(
                                self.now >= prev + DEDUPE_MS,
                                "{key} admitted twice inside its dedupe window (first admitted {prev}, again decided at {})",
                                self.now
                            );
                            self.stats.expired += 1;
                        }
                        self.last_accept.insert(key.clone(), claim.received_at_ms);
                        let _ = self.body_of(&key, &claim.fingerprint);
                    }
                    self.known.insert(
                        key.clone(),
                        Known { received_at_ms: claim.received_at_ms, seq: claim.seq },
                    );
                    if let Some(e) =
                        self.events.iter_mut().find(|e| key.ends_with(&format!("/{}", e.id)))
                    {
                        e.acked = true;
                    }
                }
                Decision::Conflict => {
                    // A final answer: the provider stops resending this body.
                    self.stats.conflicts += 1;
                    if let Some(e) =
                        self.events.iter_mut().find(|e| key.ends_with(&format!("/{}", e.id)))
                    {
                        e.acked = true;
                    }
                }
                Decision::Unavailable => self.stats.unavailable += 1,
            }
        }
        let settled: Vec<_> = std::mem::take(&mut *self.settle_answers.lock().expect("no poison"));
        for (k, _ok) in settled {
            // Written or not, the attempt is over: a failed write leaves the schedule entry,
            // and the next scan repeats the attempt with the same key (R21).
            self.in_flight.remove(&k);
        }
        self.op_answers.lock().expect("no poison").clear();
    }

    /// The body whose SHA-256 is `fingerprint` among those signed for `key`.
    fn body_of(&self, key: &str, fingerprint: &[u8; 32]) -> Vec<u8> {
        self.signed
            .get(key)
            .and_then(|bodies| {
                bodies.iter().find(|b| {
                    ring::digest::digest(&ring::digest::SHA256, b).as_ref() == fingerprint
                })
            })
            .cloned()
            .unwrap_or_else(|| panic!("{key} admitted a body that was never signed"))
    }

    /// The process dies: unsynced writes are partly lost, queues and attempts in flight are
    /// gone, the writers recover from what the store holds.
    fn crash(&mut self) {
        self.stats.crashes += 1;
        {
            let mut db = self.db.borrow_mut();
            let unsynced = db.unsynced();
            let keep = self.rng.below(unsynced + 1);
            self.stats.lost_unsynced += (unsynced - keep) as u64;
            db.crash(keep);
        }
        if self.sabotage_forget_acked {
            if let Some(key) = self.known.keys().next().cloned() {
                let view = self.oracle(shard_of(&key));
                let mut batch = Vec::new();
                hookwall::ledger::decide::ShardStore::delete(
                    &view,
                    &mut batch,
                    Col::Claims,
                    key.as_bytes(),
                );
                self.db.borrow_mut().write(batch, true).expect("no faults for sabotage");
            }
        }
        // Dropped unanswered: the senders see a reset connection, the dispatcher restarts.
        for q in &mut self.queues {
            q.clear();
        }
        self.in_flight.clear();
        for s in 0..SHARDS {
            let view = self.oracle(s);
            self.shards[s] = Shard::recover(&view, s, Arc::clone(&self.rules))
                .expect("oracle reads do not fail");
        }
    }

    /// Every step: acknowledged events are in the ledger (or legitimately forgotten after their
    /// dedupe window), and unsettled ones have their schedule entry.
    fn check(&mut self) -> Result<(), String> {
        for (s, shard) in self.shards.iter().enumerate() {
            shard.check_recent_claims(&self.oracle(s))?;
        }
        for (key, k) in &self.known {
            let view = self.oracle(shard_of(key));
            let claim = decide::claim(&view, key).expect("oracle reads do not fail");
            let Some(c) = claim else {
                if self.now < k.received_at_ms + DEDUPE_MS {
                    return Err(format!(
                        "acknowledged {key} (seq {}) is gone from the ledger inside its dedupe window (admitted {}, now {})",
                        k.seq, k.received_at_ms, self.now
                    ));
                }
                continue;
            };
            if matches!(c.state, EventState::Received | EventState::Failed) {
                let due = c
                    .next_attempt_ms
                    .ok_or_else(|| format!("unsettled {key} has no next attempt"))?;
                if !self.db.borrow().has(
                    Col::Schedule,
                    shard_of(key),
                    &decide::schedule_key(due, c.seq),
                ) {
                    return Err(format!("unsettled {key} (seq {}) has no schedule entry: it would never be delivered", c.seq));
                }
                if !self.db.borrow().has(Col::Inbox, shard_of(key), &c.seq.to_be_bytes()) {
                    return Err(format!("unsettled {key} (seq {}) lost its payload", c.seq));
                }
            }
        }
        // Every delivered mark (inbox key `seq ‖ 0xFF × 12`) belongs to a delivered claim of
        // its seq: a mark outlives its claim only by a bug, and a claim whose mark went
        // first reads `received` without a schedule entry (caught above).
        for s in 0..SHARDS {
            let view = self.oracle(s);
            // Every claim of the shard, acknowledged or not (a delivery does not wait for the
            // sender to hear its acknowledgment).
            let mut delivered = BTreeSet::new();
            for key in claim_keys(&view) {
                let c = decide::claim(&view, &key).expect("oracle reads do not fail");
                if let Some(c) = c.filter(|c| c.state == EventState::Delivered) {
                    delivered.insert((s, c.seq));
                }
            }
            let mut orphans = Vec::new();
            let mut each = |k: &[u8], _: &[u8]| {
                let seq =
                    u64::from_be_bytes(k[..8].try_into().expect("inbox keys start with a seq"));
                let is_mark = k.len() == 20 && k[8..].iter().all(|&b| b == 0xFF);
                if is_mark && !delivered.contains(&(s, seq)) {
                    orphans.push(seq);
                }
                std::ops::ControlFlow::Continue(())
            };
            decide::ShardStore::scan(&view, Col::Inbox, &[], &[0xFF; 21], &mut each)
                .expect("oracle reads do not fail");
            if let Some(seq) = orphans.first() {
                return Err(format!("shard {s}: a delivered mark of seq {seq} without a delivered claim of that seq"));
            }
        }
        // And the other way round, which settlements rely on (they read the claim, not the
        // schedule): every schedule entry belongs to an unsettled claim due at its time.
        for s in 0..SHARDS {
            let view = self.oracle(s);
            let entries = decide::due(&view, s, u64::MAX, usize::MAX, &|_| false)
                .expect("oracle reads do not fail");
            for e in entries {
                let c = decide::claim(&view, &e.key)
                    .expect("oracle reads do not fail")
                    .ok_or_else(|| format!("schedule entry of {} has no claim", e.key))?;
                let unsettled = matches!(c.state, EventState::Received | EventState::Failed);
                if !unsettled || c.next_attempt_ms != Some(e.due_ms) {
                    return Err(format!(
                        "schedule entry (due {}, seq {}) of {} disagrees with its claim ({:?}, next attempt {:?})",
                        e.due_ms, e.seq, e.key, c.state, c.next_attempt_ms
                    ));
                }
            }
        }
        Ok(())
    }

    fn unsettled(&self) -> Vec<String> {
        self.known
            .keys()
            .filter(|key| {
                let c = decide::claim(&self.oracle(shard_of(key)), key)
                    .expect("oracle reads do not fail");
                c.is_some_and(|c| matches!(c.state, EventState::Received | EventState::Failed))
            })
            .cloned()
            .collect()
    }

    fn settled(&self) -> bool {
        self.events.iter().all(|e| e.acked)
            && self.unsettled().is_empty()
            && self.in_flight.is_empty()
    }

    /// After the end, once every retention has run out (an identity may expire up to a second
    /// after its window, R25): sweeps remove every delivered or dropped event — claim, payload,
    /// history, delivered mark — and every expiry entry, leaving only dead events (they wait
    /// for an operator). A lost or never-written expiry entry would leave its events forever.
    fn retention_leaves_nothing(&mut self) -> Result<(), String> {
        self.now += DEDUPE_MS + PAYLOAD_MS + 2_000;
        for s in 0..SHARDS {
            let mut sweeps = 0;
            loop {
                let view = View { db: &self.db, shard: s, faulty: false };
                let Some(decide::Sweep { batch, through, .. }) =
                    self.shards[s].sweep(&view, self.now)
                else {
                    break;
                };
                self.db.borrow_mut().write(batch, false).expect("no faults after the end");
                self.shards[s].swept(through);
                sweeps += 1;
                if sweeps > 100_000 {
                    return Err(format!("shard {s}: retention sweeps never end"));
                }
            }
        }
        self.check()?;
        for s in 0..SHARDS {
            let view = self.oracle(s);
            let mut dead = BTreeSet::new();
            for key in claim_keys(&view) {
                let c = decide::claim(&view, &key).expect("oracle reads do not fail");
                match c {
                    Some(c) if c.state == EventState::Dead => {
                        dead.insert(c.seq);
                    }
                    Some(c) => {
                        return Err(format!(
                            "shard {s}: {key} (seq {}, {:?}) outlived every retention",
                            c.seq, c.state
                        ))
                    }
                    None => {}
                }
            }
            let mut rows = Vec::new();
            let mut each_row = |k: &[u8], _: &[u8]| {
                rows.push(u64::from_be_bytes(
                    k[..8].try_into().expect("inbox keys start with a seq"),
                ));
                std::ops::ControlFlow::Continue(())
            };
            decide::ShardStore::scan(&view, Col::Inbox, &[], &[0xFF; 21], &mut each_row)
                .expect("oracle reads do not fail");
            if let Some(seq) = rows.iter().find(|seq| !dead.contains(seq)) {
                return Err(format!("shard {s}: inbox rows of seq {seq} outlived every retention"));
            }
            let prefix = format!("exp/{s}/").into_bytes();
            let mut end = prefix.clone();
            end.push(0xFF);
            let mut entries = 0usize;
            let mut each_entry = |_: &[u8], _: &[u8]| {
                entries += 1;
                std::ops::ControlFlow::Continue(())
            };
            decide::ShardStore::scan(&view, Col::Meta, &prefix, &end, &mut each_entry)
                .expect("oracle reads do not fail");
            if entries > 0 {
                return Err(format!(
                    "shard {s}: {entries} expiry entries outlived every retention"
                ));
            }
        }
        Ok(())
    }

    /// The end: every acknowledged event is delivered (and the destination got it), dead or
    /// dropped, or was forgotten after its window.
    fn final_check(&mut self) -> Result<(), String> {
        for key in self.known.keys() {
            let c =
                decide::claim(&self.oracle(shard_of(key)), key).expect("oracle reads do not fail");
            match c.map(|c| c.state) {
                Some(EventState::Delivered) => {
                    self.stats.delivered += 1;
                    if !self.received.contains_key(key) {
                        return Err(format!("{key} is delivered but the destination never got it"));
                    }
                }
                Some(EventState::Dead) => self.stats.dead += 1,
                Some(EventState::Dropped) => self.stats.dropped += 1,
                Some(state) => return Err(format!("{key} ended {state:?}")),
                None => {}
            }
        }
        Ok(())
    }
}

/// The key of every claim `view`'s shard holds.
fn claim_keys(view: &View<'_>) -> Vec<String> {
    let mut keys = Vec::new();
    let mut each_claim = |k: &[u8], _: &[u8]| {
        keys.push(String::from_utf8(k.to_vec()).expect("claim keys are text"));
        std::ops::ControlFlow::Continue(())
    };
    decide::ShardStore::scan(view, Col::Claims, &[], &[0xFF; 8], &mut each_claim)
        .expect("oracle reads do not fail");
    keys
}
