//! The shard writer: one thread per shard, the only writer of its column families (invariant
//! 3), so "read the claim, then write it" is atomic without a lock (R10).
//!
//! Each turn it blocks for one item, drains more without blocking (up to `COMMIT_BATCH_MAX`),
//! decides every item against the DB plus this drain's own overlay (two copies of one key in
//! one drain), writes ONE `WriteBatch` (synced: group commit), and only after the write
//! returned calls the replies (invariant 1, R14). A failed write answers every admission
//! `Unavailable` (fail closed, R15) and every settlement `false`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{select, Receiver};
use rocksdb::{WriteBatch, WriteOptions};

use super::codec::{
    self, AttemptRecord, AuditRecord, Claim, EventState, ExpiryKind, InboxRecord, QuarantineRecord,
    RejectRecord,
};
use super::store::{self, Db, CF_AUDIT, CF_META, CF_QUARANTINE, CF_REJECTED};
use super::{
    Admission, Decision, OpAction, OpDone, OpRefused, Operation, Outcome, RejectedRecord, Reply,
    Settlement,
};
use crate::clock;
use crate::limits::{ATTEMPT_ERROR_BYTES_MAX, COMMIT_BATCH_MAX};
use crate::metrics::Metrics;

/// State shared by the handle and every shard writer (atomics and read-only config only).
pub(super) struct Shared {
    /// False after a failed write until a later write succeeds.
    pub healthy: AtomicBool,
    /// Set when a writer thread ended by panicking (broken invariant).
    pub writer_died: AtomicBool,
    /// Where the writers record commit figures and gauges.
    pub metrics: Arc<Metrics>,
    /// Woken after a commit that added schedule entries (the dispatcher waits on it).
    pub notify: Arc<tokio::sync::Notify>,
    /// Configured source ids, by source index (DLQ counters are keyed by id in `meta`).
    pub source_ids: Vec<String>,
    /// Rejected records dropped because the reject queue was full.
    pub rejects_dropped: AtomicU64,
    /// Whether batches are written with `sync = true`.
    pub sync: bool,
    /// Per shard: what its recent turns cost, for the admission-wait estimate.
    pub costs: Box<[ShardCost]>,
    /// Next audit-record sequence (makes `audit` keys unique across writers and the handle).
    pub audit_seq: AtomicU64,
    /// Payload and identity retention (R25); `None` keeps everything.
    pub retention: Option<super::Retention>,
    /// The last ordering stamp given out (R22): see [`Shared::next_order_stamp`].
    pub order_stamp: AtomicU64,
}

/// Longest time between two sweeps of a shard writer (also when idle).
const SWEEP_EVERY_MAX: std::time::Duration = std::time::Duration::from_secs(10);
/// Shortest time between two timed sweeps.
const SWEEP_EVERY_MIN: std::time::Duration = std::time::Duration::from_millis(250);

/// How often a shard writer removes what retention expired: a quarter of the shortest non-zero
/// retention, within `SWEEP_EVERY_MIN..=SWEEP_EVERY_MAX` — so an expiry is carried out at most
/// a quarter of its retention late, and day-long production retentions sweep every 10 s (R25).
pub(super) fn sweep_every(r: &super::Retention) -> std::time::Duration {
    let shortest = [r.payload, r.dedupe].into_iter().filter(|d| !d.is_zero()).min();
    shortest.map_or(SWEEP_EVERY_MAX, |d| (d / 4).clamp(SWEEP_EVERY_MIN, SWEEP_EVERY_MAX))
}
/// Most expiry entries one sweep handles. A full sweep leaves a backlog, swept after every
/// following drain until it is gone: at 4096 per drain this outpaces the two entries each
/// admission of a drain (at most `COMMIT_BATCH_MAX`) eventually adds.
const SWEEP_BATCH_MAX: usize = 4096;

impl Shared {
    /// A fresh audit-key sequence number.
    pub fn next_audit_seq(&self) -> u64 {
        self.audit_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The admission stamp of an ordered event decided at `now_ms` (R22): Unix µs, strictly
    /// above every stamp given out before by any shard writer of this process (and above the
    /// index's highest at open). An event whose admission was committed and acknowledged
    /// before another was received therefore always has the smaller stamp, whichever shards
    /// own the two keys.
    pub fn next_order_stamp(&self, now_ms: u64) -> u64 {
        let floor = now_ms.saturating_mul(1000);
        let mut last = self.order_stamp.load(Ordering::Relaxed);
        loop {
            let next = floor.max(last + 1);
            match self.order_stamp.compare_exchange_weak(
                last,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

/// Moving averages (weight 1/8 for each new turn) of one shard writer's turns, in ns: read by
/// [`super::Ledger::admission_wait`] on the ingress cores, learned by the writer, and decayed
/// by [`super::Ledger::shed`] (a lost update between the two only delays a decay).
#[derive(Default)]
pub(super) struct ShardCost {
    /// Duration of one batch write (the fsync included when synced).
    pub commit_ns: AtomicU64,
    /// The rest of a turn (decide, reply) per item.
    pub item_ns: AtomicU64,
}

impl ShardCost {
    fn learn(&self, commit_ns: u64, item_ns: u64) {
        ewma(&self.commit_ns, commit_ns);
        ewma(&self.item_ns, item_ns);
    }

    /// Lowers both averages by 1/8 (see [`super::Ledger::shed`]).
    pub fn decay(&self) {
        for avg in [&self.commit_ns, &self.item_ns] {
            let old = avg.load(Ordering::Relaxed);
            avg.store(old - old / 8, Ordering::Relaxed);
        }
    }
}

/// Folds `sample` into the moving average in `avg` (the first sample is taken as is). Only the
/// shard's own writer stores, so a load-then-store is enough.
fn ewma(avg: &AtomicU64, sample: u64) {
    let old = avg.load(Ordering::Relaxed);
    let new = if old == 0 { sample } else { old - old / 8 + sample / 8 };
    avg.store(new.max(1), Ordering::Relaxed);
}

/// Something queued for a writer that must be answered exactly once, even if it is dropped
/// unprocessed (shutdown, a writer that died): then it fails closed.
pub(super) trait FailClosed {
    /// Answers the item as "not done".
    fn fail(self);
}

impl FailClosed for Admission {
    fn fail(self) {
        (self.reply)(Decision::Unavailable);
    }
}

impl FailClosed for Settlement {
    fn fail(self) {
        (self.reply)(false);
    }
}

impl FailClosed for Operation {
    fn fail(self) {
        (self.reply)(Err(OpRefused::Unavailable));
    }
}

/// A queued item; dropping it unprocessed calls [`FailClosed::fail`].
pub(super) struct Queued<T: FailClosed>(Option<T>);

impl<T: FailClosed> Queued<T> {
    /// Wraps an item for a queue.
    pub fn new(item: T) -> Queued<T> {
        Queued(Some(item))
    }

    /// Takes the item out; the wrapper then drops silently.
    pub fn take(mut self) -> T {
        self.0.take().expect("a queued item is taken once")
    }
}

impl<T: FailClosed> Drop for Queued<T> {
    fn drop(&mut self) {
        if let Some(item) = self.0.take() {
            item.fail();
        }
    }
}

/// The receiving ends of one shard's queues.
pub(super) struct Queues {
    /// Admissions (`SHARD_QUEUE_MAX`).
    pub admit: Receiver<Queued<Admission>>,
    /// Settlements (`SETTLE_QUEUE_MAX`).
    pub settle: Receiver<Queued<Settlement>>,
    /// Rejected records (`REJECT_QUEUE_MAX`).
    pub reject: Receiver<RejectedRecord>,
    /// Operator actions (`OPERATION_QUEUE_MAX`).
    pub operate: Receiver<Queued<Operation>>,
    /// Requests to sweep expired records now; the reply gets the number removed.
    pub sweep: Receiver<crossbeam_channel::Sender<usize>>,
    /// Disconnected by `shutdown`.
    pub stop: Receiver<()>,
    /// Test seam: the writer waits for this to disconnect before its first drain.
    pub gate: Option<Receiver<()>>,
}

enum Item {
    Admit(Queued<Admission>),
    Settle(Queued<Settlement>),
    Reject(RejectedRecord),
    Operate(Queued<Operation>),
    /// Remove what retention expired; reply with the count (a timer's sweep has no reply).
    Sweep(Option<crossbeam_channel::Sender<usize>>),
}

/// One shard's writer and the in-memory state it alone owns.
pub(super) struct Writer {
    shard: usize,
    db: Arc<Db>,
    shared: Arc<Shared>,
    next_seq: u64,
    /// Due time given to the last drain's new events (never decreases; see `Drain::due_ms`).
    last_due_ms: u64,
    dlq: HashMap<u32, u64>,
    rejects_written: u32,
    cf_claims: String,
    cf_inbox: String,
    cf_schedule: String,
    /// `meta` key prefix of this shard's expiry entries.
    expiry_prefix: Vec<u8>,
    /// The last sweep was full: sweep again after the next drain.
    expiry_backlog: bool,
}

/// A settlement's reply: called with whether it was durably written.
type SettleReply = Box<dyn FnOnce(bool) + Send>;
/// An operation's reply.
type OpReply = Box<dyn FnOnce(Result<OpDone, OpRefused>) + Send>;

/// Everything one drain decided, applied to memory and answered only after its write.
struct Drain {
    /// Due time of this drain's new events: the drain's wall-clock time, never earlier than
    /// the previous drain's. So new schedule entries of a shard always sort after every entry
    /// the dispatcher has already seen due, and it can resume its scan where it left off
    /// instead of walking the settled head of the schedule.
    due_ms: u64,
    batch: WriteBatch,
    claims: HashMap<String, Claim>,
    schedule: HashMap<[u8; 16], bool>,
    next_seq: u64,
    dlq: HashMap<u32, u64>,
    pending_delta: HashMap<u32, i64>,
    dead_delta: HashMap<u32, i64>,
    admissions: Vec<(Reply, Decision)>,
    settlements: Vec<(SettleReply, bool)>,
    operations: Vec<(OpReply, Result<OpDone, OpRefused>)>,
    /// Whether an operator replay scheduled an event in this drain: replays are due at
    /// `due_ms + 1`, so they sort after every entry the dispatcher saw due (see `Drain::due_ms`).
    replayed: bool,
    durable_writes: usize,
    /// Admissions and quarantines in this drain: they are acknowledged to a provider, so the
    /// batch must be fsync'd (R14). Settlements alone need not be: a settlement lost in a
    /// crash only repeats an attempt with the same idempotency key (at-least-once, R21).
    acked_writes: usize,
    rejects: usize,
    scheduled: bool,
}

impl Drain {
    fn new(next_seq: u64, due_ms: u64) -> Drain {
        Drain {
            due_ms,
            batch: WriteBatch::default(),
            claims: HashMap::new(),
            schedule: HashMap::new(),
            next_seq,
            dlq: HashMap::new(),
            pending_delta: HashMap::new(),
            dead_delta: HashMap::new(),
            admissions: Vec::new(),
            settlements: Vec::new(),
            operations: Vec::new(),
            replayed: false,
            durable_writes: 0,
            acked_writes: 0,
            rejects: 0,
            scheduled: false,
        }
    }

    fn items(&self) -> usize {
        self.admissions.len() + self.settlements.len() + self.operations.len()
    }

    /// Calls every reply: decisions stand only if the write succeeded.
    fn answer(self, written: bool) {
        for (reply, decision) in self.admissions {
            reply(if written { decision } else { Decision::Unavailable });
        }
        for (reply, ok) in self.settlements {
            reply(written && ok);
        }
        for (reply, result) in self.operations {
            reply(if written { result } else { Err(OpRefused::Unavailable) });
        }
    }
}

/// Marks the ledger unhealthy if the writer thread unwinds (a broken invariant).
struct DeathGuard(Arc<Shared>);

impl Drop for DeathGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.writer_died.store(true, Ordering::SeqCst);
            self.0.healthy.store(false, Ordering::SeqCst);
        }
    }
}

impl Writer {
    /// A writer for `shard`, resuming at `next_seq` with the shard's DLQ counters.
    pub fn new(
        shard: usize,
        db: Arc<Db>,
        shared: Arc<Shared>,
        next_seq: u64,
        dlq: HashMap<u32, u64>,
    ) -> Writer {
        Writer {
            shard,
            db,
            shared,
            next_seq,
            last_due_ms: 0,
            dlq,
            rejects_written: 0,
            cf_claims: store::cf_claims(shard),
            cf_inbox: store::cf_inbox(shard),
            cf_schedule: store::cf_schedule(shard),
            expiry_prefix: store::meta_expiry_prefix(shard),
            expiry_backlog: false,
        }
    }

    /// The thread body: drain, decide, commit, reply, until `stop` disconnects. Items left in
    /// the queues are then dropped, which answers them `Unavailable` / `false`.
    pub fn run(mut self, q: Queues) {
        let _guard = DeathGuard(Arc::clone(&self.shared));
        if let Some(gate) = &q.gate {
            let _ = gate.recv();
        }
        let mut swept_at = clock::monotonic();
        let every = self.shared.retention.as_ref().map(sweep_every);
        let sweeps = every.is_some();
        while let Some(first) = next_item(&q, every) {
            if let Item::Sweep(reply) = first {
                // Alone in its drain: a removed claim never meets this drain's overlay.
                let removed = self.sweep();
                swept_at = clock::monotonic();
                if let Some(reply) = reply {
                    let _ = reply.send(removed);
                }
                continue;
            }
            let items = drain_more(first, &q);
            self.process(items);
            let timer = every.is_some_and(|e| clock::monotonic().duration_since(swept_at) >= e);
            if sweeps && (self.expiry_backlog || timer) {
                self.sweep();
                swept_at = clock::monotonic();
            }
        }
        while q.admit.try_recv().is_ok()
            || q.settle.try_recv().is_ok()
            || q.operate.try_recv().is_ok()
        {}
    }

    fn process(&mut self, items: Vec<Item>) {
        let started = clock::monotonic();
        let count = items.len();
        let due_ms = clock::now_unix_ms().max(self.last_due_ms);
        let mut d = Drain::new(self.next_seq, due_ms);
        for item in items {
            match item {
                Item::Admit(a) => self.admit(&mut d, a.take()),
                Item::Settle(s) => self.settle(&mut d, s.take()),
                Item::Reject(r) => self.reject(&mut d, &r),
                Item::Operate(o) => self.operate(&mut d, o.take()),
                Item::Sweep(_) => unreachable!("sweeps run in their own drain"),
            }
        }
        // Only synced writes teach the estimate: admissions wait for those.
        let synced = d.acked_writes > 0;
        let mut commit_ns = 0;
        let written = d.durable_writes + d.rejects == 0 || {
            let commit_started = clock::monotonic();
            let ok = self.commit(&mut d);
            commit_ns = nanos(clock::monotonic().duration_since(commit_started));
            ok
        };
        if written {
            self.apply(&mut d);
        }
        // Learned before the replies go out: a sender answered now meets the new estimate.
        if synced && commit_ns > 0 {
            let rest_ns =
                nanos(clock::monotonic().duration_since(started)).saturating_sub(commit_ns);
            let per_item = rest_ns / u64::try_from(count.max(1)).unwrap_or(1);
            self.shared.costs[self.shard].learn(commit_ns, per_item);
        }
        d.answer(written);
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        store::cf(&self.db, name)
    }

    /// The stored claim of `key`. A claim that fails to decode is a broken invariant: panic
    /// rather than ever overwrite it.
    fn read_claim(&self, key: &str) -> Result<Option<Claim>, rocksdb::Error> {
        let Some(v) = self.db.get_pinned_cf(self.cf(&self.cf_claims), key)? else {
            return Ok(None);
        };
        match codec::decode_claim(&v) {
            Ok(c) => Ok(Some(c)),
            Err(e) => panic!(
                "ledger shard {}: a stored claim fails to decode ({e}); refusing to overwrite it",
                self.shard
            ),
        }
    }

    fn admit(&mut self, d: &mut Drain, a: Admission) {
        let first = match d.claims.get(&a.key) {
            Some(c) => Some(c.fingerprint),
            None => match self.read_claim(&a.key) {
                Ok(c) => c.map(|c| c.fingerprint),
                Err(e) => {
                    tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read a claim; the admission is answered unavailable.");
                    d.admissions.push((a.reply, Decision::Unavailable));
                    return;
                }
            },
        };
        match first {
            None => self.accept(d, a),
            Some(fp) if fp == a.fingerprint => d.admissions.push((a.reply, Decision::Duplicate)),
            Some(fp) => self.quarantine(d, a, fp),
        }
    }

    fn accept(&mut self, d: &mut Drain, a: Admission) {
        let seq = d.next_seq;
        d.next_seq += 1;
        let claim = Claim {
            state: EventState::Received,
            attempts: 0,
            fingerprint: a.fingerprint,
            seq,
            source: a.source,
            secret_id: a.secret_id.clone(),
            received_at_ms: a.received_at_ms,
            delivered_at_ms: None,
            next_attempt_ms: Some(d.due_ms),
            last_error: None,
            ordering: None,
        };
        let mut claim = claim;
        if let Some(value) = a.ordering {
            let stamp = self.shared.next_order_stamp(d.due_ms);
            let k = store::meta_ordering(scope_of(&a.key), &value, stamp, self.shard, seq);
            d.batch.put_cf(self.cf(CF_META), k, a.key.as_bytes());
            claim.ordering = Some(codec::OrderPlace { value, stamp });
        }
        let record = InboxRecord {
            key: a.key,
            source: a.source,
            received_at_ms: a.received_at_ms,
            secret_id: a.secret_id,
            signed_at: a.signed_at,
            event_type: a.event_type,
            content_type: a.content_type,
            body: a.body,
        };
        let sk = codec::schedule_key(d.due_ms, seq);
        d.batch.put_cf(self.cf(&self.cf_claims), &record.key, codec::encode_claim(&claim));
        d.batch.put_cf(self.cf(&self.cf_inbox), codec::seq_key(seq), codec::encode_inbox(&record));
        d.batch.put_cf(self.cf(&self.cf_schedule), sk, []);
        d.schedule.insert(sk, true);
        *d.pending_delta.entry(a.source).or_insert(0) += 1;
        d.scheduled = true;
        d.durable_writes += 1;
        d.acked_writes += 1;
        d.claims.insert(record.key, claim);
        d.admissions.push((a.reply, Decision::Accepted));
    }

    /// Same key, other fingerprint: record both fingerprints, never touch the first (R11).
    fn quarantine(&mut self, d: &mut Drain, a: Admission, first_fingerprint: [u8; 32]) {
        let q = QuarantineRecord {
            key: a.key,
            source: a.source,
            first_fingerprint,
            new_fingerprint: a.fingerprint,
            received_at_ms: a.received_at_ms,
        };
        let mut k = Vec::with_capacity(26);
        k.extend_from_slice(&q.received_at_ms.to_be_bytes());
        k.extend_from_slice(&u16::try_from(self.shard).expect("SHARDS_MAX fits u16").to_be_bytes());
        k.extend_from_slice(&codec::fnv1a64(q.key.as_bytes()).to_be_bytes());
        k.extend_from_slice(&q.new_fingerprint[..8]);
        d.batch.put_cf(self.cf(CF_QUARANTINE), k, codec::encode_quarantine(&q));
        d.durable_writes += 1;
        d.acked_writes += 1;
        tracing::debug!(
            code = "quarantined",
            shard = self.shard,
            source = q.source,
            "Quarantined a conflicting copy."
        );
        d.admissions.push((a.reply, Decision::Conflict));
    }

    /// Whether schedule entry `sk` exists, seen through this drain's overlay.
    fn scheduled(&self, d: &Drain, sk: &[u8; 16]) -> Result<bool, rocksdb::Error> {
        match d.schedule.get(sk) {
            Some(&present) => Ok(present),
            None => Ok(self.db.get_pinned_cf(self.cf(&self.cf_schedule), sk)?.is_some()),
        }
    }

    fn settle(&mut self, d: &mut Drain, s: Settlement) {
        let sk = codec::schedule_key(s.due_ms, s.seq);
        match self.scheduled(d, &sk) {
            // Already settled (or moved): a no-op, never a second transition.
            Ok(false) => d.settlements.push((s.reply, true)),
            Ok(true) => self.transition(d, s, sk),
            Err(e) => {
                tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read a schedule entry; the settlement is refused.");
                d.settlements.push((s.reply, false));
            }
        }
    }

    /// The key and source of the inbox record behind schedule entry (`due_ms`, `seq`), and its
    /// claim; either missing is a broken invariant.
    fn load_settled(&self, d: &Drain, due_ms: u64, seq: u64) -> (String, Claim) {
        let context = |what: &str| {
            format!("ledger shard {}: schedule entry (due {due_ms}, seq {seq}): {what}", self.shard)
        };
        let head = self
            .db
            .get_pinned_cf(self.cf(&self.cf_inbox), codec::seq_key(seq))
            .unwrap_or_else(|e| panic!("{}", context(&format!("inbox read failed: {e}"))))
            .unwrap_or_else(|| panic!("{}", context("no inbox record")));
        let (key, _) = codec::decode_inbox_head(&head)
            .unwrap_or_else(|e| panic!("{}", context(&format!("inbox record: {e}"))));
        let claim = match d.claims.get(&key) {
            Some(c) => c.clone(),
            None => self
                .read_claim(&key)
                .unwrap_or_else(|e| panic!("{}", context(&format!("claim read failed: {e}"))))
                .unwrap_or_else(|| panic!("{}", context("no claim"))),
        };
        assert_eq!(claim.seq, seq, "{}", context("claim points at another seq"));
        (key, claim)
    }

    fn transition(&mut self, d: &mut Drain, s: Settlement, sk: [u8; 16]) {
        let (key, mut claim) = self.load_settled(d, s.due_ms, s.seq);
        claim.attempts = s.attempts;
        self.record_attempt(d, s.seq, s.attempts, &s.outcome);
        d.batch.delete_cf(self.cf(&self.cf_schedule), sk);
        d.schedule.insert(sk, false);
        match s.outcome {
            Outcome::Retry { next_ms, error } => {
                claim.state = EventState::Failed;
                claim.last_error = Some(codec::truncate_utf8(&error, ATTEMPT_ERROR_BYTES_MAX));
                claim.next_attempt_ms = Some(next_ms);
                let next = codec::schedule_key(next_ms, s.seq);
                d.batch.put_cf(self.cf(&self.cf_schedule), next, []);
                d.schedule.insert(next, true);
                d.scheduled = true;
            }
            Outcome::Delivered { at_ms } => {
                claim.state = EventState::Delivered;
                claim.delivered_at_ms = Some(at_ms);
                claim.next_attempt_ms = None;
                self.release_ordering(d, &key, &mut claim);
                *d.pending_delta.entry(claim.source).or_insert(0) -= 1;
                self.schedule_expiry(d, &key, &claim);
            }
            Outcome::Dead { error } => {
                claim.state = EventState::Dead;
                claim.last_error = Some(codec::truncate_utf8(&error, ATTEMPT_ERROR_BYTES_MAX));
                claim.next_attempt_ms = None;
                self.release_ordering(d, &key, &mut claim);
                *d.pending_delta.entry(claim.source).or_insert(0) -= 1;
                self.count_dead(d, claim.source);
            }
        }
        d.batch.put_cf(self.cf(&self.cf_claims), &key, codec::encode_claim(&claim));
        d.claims.insert(key, claim);
        d.durable_writes += 1;
        d.settlements.push((s.reply, true));
    }

    /// The quarantine (R11) and rejected (R23) records received before `cutoff_ms` (Unix ms:
    /// now − `dedupe_retention`, the life of the identities they are about) are removed with one
    /// range delete per column family — their keys start with the time, big-endian — and only
    /// when the oldest record is that old, so an idle sweep writes nothing. Done by shard 0's
    /// writer alone (the column families are global); the audit log is kept (operator actions
    /// are few, and kept for accountability).
    fn expire_minimised(&self, batch: &mut WriteBatch, cutoff_ms: u64) {
        for name in [CF_QUARANTINE, CF_REJECTED] {
            let cf = self.cf(name);
            let oldest = self.db.iterator_cf(cf, rocksdb::IteratorMode::Start).next();
            let expired = match oldest {
                Some(Ok((k, _))) => k.get(..8).is_some_and(|t| t < &cutoff_ms.to_be_bytes()[..]),
                Some(Err(e)) => {
                    tracing::error!(code = "ledger_read_failed", cf = name, error = %e, "The ledger could not read a minimised record; retention waits for the next sweep.");
                    false
                }
                None => false,
            };
            if expired {
                batch.delete_range_cf(cf, [0u8; 8], cutoff_ms.to_be_bytes());
            }
        }
    }

    /// Takes a settled event out of its ordering group (R22), so the group's next event may be
    /// delivered. A replayed event is not put back: it is delivered on its own (docs/admin.md).
    fn release_ordering(&self, d: &mut Drain, key: &str, claim: &mut Claim) {
        if let Some(o) = claim.ordering.take() {
            let k = store::meta_ordering(scope_of(key), &o.value, o.stamp, self.shard, claim.seq);
            d.batch.delete_cf(self.cf(CF_META), k);
        }
    }

    /// An operator action (R20): checks the state, moves the schedule entry and the counters,
    /// writes the claim and its audit record in this drain's (synced) batch.
    fn operate(&mut self, d: &mut Drain, op: Operation) {
        let claim = match d.claims.get(&op.key) {
            Some(c) => Some(c.clone()),
            None => match self.read_claim(&op.key) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read a claim; the operator action is refused.");
                    d.operations.push((op.reply, Err(OpRefused::Unavailable)));
                    return;
                }
            },
        };
        let Some(mut claim) = claim else {
            d.operations.push((op.reply, Err(OpRefused::NotFound)));
            return;
        };
        let before = claim.state;
        if let Err(refused) = self.operable(op.action, &claim) {
            d.operations.push((op.reply, Err(refused)));
            return;
        }
        let unsettled = matches!(before, EventState::Received | EventState::Failed);
        if let (true, Some(due)) = (unsettled, claim.next_attempt_ms) {
            let sk = codec::schedule_key(due, claim.seq);
            d.batch.delete_cf(self.cf(&self.cf_schedule), sk);
            d.schedule.insert(sk, false);
        }
        if before == EventState::Dead {
            self.uncount_dead(d, claim.source);
        }
        match op.action {
            OpAction::Replay => {
                let due = d.due_ms + 1;
                claim.state = EventState::Received;
                claim.attempts = 0;
                claim.next_attempt_ms = Some(due);
                let sk = codec::schedule_key(due, claim.seq);
                d.batch.put_cf(self.cf(&self.cf_schedule), sk, []);
                d.schedule.insert(sk, true);
                d.scheduled = true;
                d.replayed = true;
                if !unsettled {
                    *d.pending_delta.entry(claim.source).or_insert(0) += 1;
                }
            }
            OpAction::Drop => {
                claim.state = EventState::Dropped;
                claim.next_attempt_ms = None;
                self.release_ordering(d, &op.key, &mut claim);
                if unsettled {
                    *d.pending_delta.entry(claim.source).or_insert(0) -= 1;
                }
                self.schedule_expiry(d, &op.key, &claim);
            }
        }
        let after = claim.state;
        let audit = AuditRecord {
            at_ms: d.due_ms,
            actor: op.actor,
            action: op.action.code().to_owned(),
            key: Some(op.key.clone()),
            destination: None,
            reason: op.reason,
            state_before: Some(before.code().to_owned()),
        };
        let audit_key = codec::audit_key(audit.at_ms, self.shared.next_audit_seq());
        d.batch.put_cf(self.cf(CF_AUDIT), audit_key, codec::encode_audit(&audit));
        d.batch.put_cf(self.cf(&self.cf_claims), &op.key, codec::encode_claim(&claim));
        d.claims.insert(op.key, claim);
        d.durable_writes += 1;
        // Answered to an operator: as durable as an admission.
        d.acked_writes += 1;
        d.operations.push((op.reply, Ok(OpDone { before, after })));
    }

    /// Whether `action` may be applied to an event in `claim`'s state (and, for a replay,
    /// whether its payload is still retained).
    fn operable(&self, action: OpAction, claim: &Claim) -> Result<(), OpRefused> {
        let allowed = match action {
            OpAction::Replay => {
                matches!(claim.state, EventState::Dead | EventState::Dropped | EventState::Failed)
            }
            OpAction::Drop => {
                matches!(claim.state, EventState::Received | EventState::Failed | EventState::Dead)
            }
        };
        if !allowed {
            return Err(OpRefused::State(claim.state));
        }
        if action == OpAction::Replay {
            let inbox = self.db.get_pinned_cf(self.cf(&self.cf_inbox), codec::seq_key(claim.seq));
            match inbox {
                Ok(Some(_)) => {}
                Ok(None) => return Err(OpRefused::PayloadGone),
                Err(e) => {
                    tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read an inbox record; the replay is refused.");
                    return Err(OpRefused::Unavailable);
                }
            }
        }
        Ok(())
    }

    /// DLQ counter −1 for `source` (an operator replayed or dropped a dead event).
    fn uncount_dead(&self, d: &mut Drain, source: u32) {
        *d.dead_delta.entry(source).or_insert(0) -= 1;
        let Some(id) = self.shared.source_ids.get(source as usize) else {
            return;
        };
        let now = self.dlq.get(&source).copied().unwrap_or(0);
        let count = d.dlq.entry(source).or_insert(now);
        *count = count.saturating_sub(1);
        d.batch.put_cf(self.cf(CF_META), store::meta_dlq(self.shard, id), count.to_be_bytes());
    }

    /// A delivered or dropped event: its payload expires `payload_retention` from now, its
    /// identity `dedupe_retention` after admission (R25). Dead events never expire by
    /// themselves (they wait in the DLQ for an operator).
    fn schedule_expiry(&self, d: &mut Drain, key: &str, claim: &Claim) {
        let Some(r) = &self.shared.retention else {
            return;
        };
        let ms = |t: std::time::Duration| u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
        let payload_at = d.due_ms.saturating_add(ms(r.payload));
        let identity_at = claim.received_at_ms.saturating_add(ms(r.dedupe));
        let seq = claim.seq;
        for (at, kind) in [(payload_at, ExpiryKind::Payload), (identity_at, ExpiryKind::Identity)] {
            let k = [self.expiry_prefix.as_slice(), &codec::expiry_key(at, kind, seq)].concat();
            d.batch.put_cf(self.cf(CF_META), k, key);
        }
    }

    /// Removes what retention expired by now (at most `SWEEP_BATCH_MAX` entries): the inbox
    /// record and attempt history (payload), or the claim (identity), of events still
    /// delivered or dropped with the same seq — a replayed or re-admitted event is skipped.
    /// Returns how many records were removed. A failed write leaves the entries for the next
    /// sweep.
    fn sweep(&mut self) -> usize {
        let Some(r) = self.shared.retention.clone() else {
            return 0;
        };
        let now = (r.now_ms)();
        let mut batch = WriteBatch::default();
        let mut removed = 0usize;
        let mut opts = rocksdb::ReadOptions::default();
        let end = codec::expiry_key(now.saturating_add(1), ExpiryKind::Payload, 0);
        opts.set_iterate_lower_bound(self.expiry_prefix.clone());
        opts.set_iterate_upper_bound([self.expiry_prefix.as_slice(), &end].concat());
        let entries = self.db.iterator_cf_opt(self.cf(CF_META), opts, rocksdb::IteratorMode::Start);
        let mut handled = 0usize;
        for entry in entries.take(SWEEP_BATCH_MAX) {
            handled += 1;
            let Ok((k, key)) = entry else {
                tracing::error!(code = "ledger_read_failed", shard = self.shard, "The ledger could not read its expiry list; retention waits for the next sweep.");
                return 0;
            };
            let (_, kind, seq) = codec::parse_expiry_key(&k[self.expiry_prefix.len()..])
                .unwrap_or_else(|e| panic!("ledger shard {}: corrupt expiry key: {e}", self.shard));
            batch.delete_cf(self.cf(CF_META), &k);
            let key = String::from_utf8_lossy(&key).into_owned();
            let settled = match self.read_claim(&key) {
                Ok(Some(c)) => {
                    c.seq == seq && matches!(c.state, EventState::Delivered | EventState::Dropped)
                }
                Ok(None) => false,
                Err(e) => {
                    tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read a claim; retention waits for the next sweep.");
                    return 0;
                }
            };
            if !settled {
                continue;
            }
            match kind {
                // The inbox record and its attempt history sort in [seq, seq + 1).
                ExpiryKind::Payload => {}
                // The event is forgotten: its claim, and whatever payload is left.
                ExpiryKind::Identity => batch.delete_cf(self.cf(&self.cf_claims), &key),
            }
            let (from, to) = (codec::seq_key(seq), codec::seq_key(seq.saturating_add(1)));
            batch.delete_range_cf(self.cf(&self.cf_inbox), from, to);
            removed += 1;
        }
        self.expiry_backlog = handled == SWEEP_BATCH_MAX;
        if self.shard == 0 {
            let cutoff =
                now.saturating_sub(u64::try_from(r.dedupe.as_millis()).unwrap_or(u64::MAX));
            self.expire_minimised(&mut batch, cutoff);
        }
        if batch.is_empty() {
            return 0;
        }
        match self.db.write(batch) {
            Ok(()) => {
                if removed > 0 {
                    tracing::debug!(
                        shard = self.shard,
                        removed,
                        "Retention removed expired records."
                    );
                }
                removed
            }
            Err(e) => {
                tracing::error!(code = "ledger_write_failed", shard = self.shard, error = %e, "The ledger could not write a retention sweep; it is retried later.");
                0
            }
        }
    }

    /// Appends one attempt to the event's error history (`attempts/s`, R20).
    fn record_attempt(&self, d: &mut Drain, seq: u64, attempt: u32, outcome: &Outcome) {
        let (code, at_ms, error) = match outcome {
            Outcome::Delivered { at_ms } => ("delivered", *at_ms, None),
            Outcome::Retry { error, .. } => ("retry", d.due_ms, Some(error)),
            Outcome::Dead { error } => ("dead", d.due_ms, Some(error)),
        };
        let record = AttemptRecord {
            attempt,
            at_ms,
            outcome: code.to_owned(),
            error: error.map(|e| codec::truncate_utf8(e, ATTEMPT_ERROR_BYTES_MAX)),
        };
        let key = codec::attempt_key(seq, at_ms, attempt);
        d.batch.put_cf(self.cf(&self.cf_inbox), key, codec::encode_attempt(&record));
    }

    /// DLQ counter +1 for `source`, persisted under its source id (R19, R26).
    fn count_dead(&self, d: &mut Drain, source: u32) {
        *d.dead_delta.entry(source).or_insert(0) += 1;
        let Some(id) = self.shared.source_ids.get(source as usize) else {
            tracing::warn!(
                code = "dlq_source_unknown",
                shard = self.shard,
                source,
                "A dead event's source is not configured; its DLQ counter is not kept."
            );
            return;
        };
        let now = self.dlq.get(&source).copied().unwrap_or(0);
        let count = d.dlq.entry(source).or_insert(now);
        *count += 1;
        d.batch.put_cf(self.cf(CF_META), store::meta_dlq(self.shard, id), count.to_be_bytes());
    }

    /// A minimised rejected record (R23): metadata and fingerprint, never the body.
    fn reject(&mut self, d: &mut Drain, r: &RejectedRecord) {
        let record = RejectRecord {
            source: r.source,
            received_at_ms: r.received_at_ms,
            reason: r.reason.to_owned(),
            event_id: r.event_id.clone(),
            body_bytes: r.body_bytes as u64,
            fingerprint: r.fingerprint,
        };
        self.rejects_written = self.rejects_written.wrapping_add(1);
        let mut k = Vec::with_capacity(22);
        k.extend_from_slice(&r.received_at_ms.to_be_bytes());
        k.extend_from_slice(&u16::try_from(self.shard).expect("SHARDS_MAX fits u16").to_be_bytes());
        k.extend_from_slice(&r.fingerprint[..8]);
        k.extend_from_slice(&self.rejects_written.to_be_bytes());
        d.batch.put_cf(self.cf(CF_REJECTED), k, codec::encode_reject(&record));
        d.rejects += 1;
    }

    /// Writes the drain's batch (synced when it holds admissions or quarantines). Returns
    /// whether it was written; records commit figures and health.
    fn commit(&self, d: &mut Drain) -> bool {
        if d.next_seq != self.next_seq {
            let meta = self.cf(CF_META);
            d.batch.put_cf(meta, store::meta_seq(self.shard), d.next_seq.to_be_bytes());
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(self.shared.sync && d.acked_writes > 0);
        let batch = std::mem::take(&mut d.batch);
        let started = clock::monotonic();
        let result = self.db.write_opt(batch, &opts);
        let took = clock::monotonic().duration_since(started);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        match result {
            Ok(()) => {
                self.record(micros, d.items());
                self.shared.healthy.store(true, Ordering::SeqCst);
                true
            }
            Err(e) => {
                self.shared.healthy.store(false, Ordering::SeqCst);
                tracing::error!(code = "ledger_write_failed", shard = self.shard, error = %e, items = d.items(), "The ledger could not write a batch; its admissions are answered unavailable.");
                false
            }
        }
    }

    fn record(&self, micros: u64, items: usize) {
        let stats = &self.shared.metrics.ledger;
        stats
            .commit_us
            .lock()
            .expect("histogram lock is never poisoned")
            .saturating_record(micros.max(1));
        if items > 0 {
            let mut h = stats.batch_events.lock().expect("histogram lock is never poisoned");
            h.saturating_record(items as u64);
        }
    }

    /// After a successful write: adopt the drain's seq and counters, move the gauges, wake
    /// the dispatcher if something became due.
    fn apply(&mut self, d: &mut Drain) {
        self.next_seq = d.next_seq;
        self.last_due_ms = d.due_ms + u64::from(d.replayed);
        self.dlq.extend(d.dlq.drain());
        let stats = &self.shared.metrics.ledger;
        for (&source, &delta) in &d.pending_delta {
            if let Some(g) = stats.inbox_pending.get(source as usize) {
                g.fetch_add(delta, Ordering::Relaxed);
            }
        }
        for (&source, &delta) in &d.dead_delta {
            if let Some(g) = stats.dlq_depth.get(source as usize) {
                g.fetch_add(delta, Ordering::Relaxed);
            }
        }
        if d.scheduled {
            self.shared.notify.notify_one();
        }
    }
}

/// Blocks for the next item; `None` once `stop` disconnects (or every queue does).
fn next_item(q: &Queues, sweep_every: Option<std::time::Duration>) -> Option<Item> {
    // Idle writers with retention sweep every `sweep_every`; without it, they just wait.
    let sweeps = sweep_every.is_some();
    let idle = sweep_every.unwrap_or(std::time::Duration::from_secs(3600));
    loop {
        select! {
            recv(q.admit) -> m => return m.ok().map(Item::Admit),
            recv(q.settle) -> m => return m.ok().map(Item::Settle),
            recv(q.reject) -> m => return m.ok().map(Item::Reject),
            recv(q.operate) -> m => return m.ok().map(Item::Operate),
            recv(q.sweep) -> m => return m.ok().map(|reply| Item::Sweep(Some(reply))),
            recv(q.stop) -> _ => return None,
            default(idle) => {
                if sweeps {
                    return Some(Item::Sweep(None));
                }
            }
        }
    }
}

/// Adds whatever is already queued, without blocking, up to `COMMIT_BATCH_MAX` items.
fn drain_more(first: Item, q: &Queues) -> Vec<Item> {
    let mut items = vec![first];
    loop {
        let before = items.len();
        for take in [take_admit, take_settle, take_reject, take_operate] {
            if items.len() == COMMIT_BATCH_MAX {
                return items;
            }
            if let Some(item) = take(q) {
                items.push(item);
            }
        }
        if items.len() == before {
            return items;
        }
    }
}

fn take_admit(q: &Queues) -> Option<Item> {
    q.admit.try_recv().ok().map(Item::Admit)
}

fn take_settle(q: &Queues) -> Option<Item> {
    q.settle.try_recv().ok().map(Item::Settle)
}

fn take_reject(q: &Queues) -> Option<Item> {
    q.reject.try_recv().ok().map(Item::Reject)
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn take_operate(q: &Queues) -> Option<Item> {
    q.operate.try_recv().ok().map(Item::Operate)
}

/// The ordering scope of an idempotency key `tenant/source/event id`: `tenant/source` (R22:
/// ordering groups never span sources or tenants).
pub fn scope_of(key: &str) -> &str {
    let mut slashes = key.match_indices('/').map(|(i, _)| i);
    match (slashes.next(), slashes.next()) {
        (Some(_), Some(second)) => &key[..second],
        _ => key,
    }
}
