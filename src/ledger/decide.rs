//! The shard writer's decisions, sans IO: given a shard's stored records (read through
//! [`ShardStore`]), one drain of admissions, settlements, rejects and operator actions, and the
//! drain's time, decide every item and put the records to write into ONE batch. The RocksDB
//! shard writer (`writer.rs`) runs this code over the database; the deterministic simulator
//! (`tests/sim`) runs the very same code over an in-memory store that can crash.
//!
//! Nothing here reads a clock, blocks or writes: reads go through [`ShardStore::get`] and
//! [`ShardStore::scan`], writes are appended to the drain's [`ShardStore::Batch`], and the
//! replies wait in the [`Drain`] until the caller has written the batch and calls
//! [`Drain::answer`] with whether the write succeeded (invariant 1, R14; fail closed, R15).
//!
//! Protocol of one turn: [`Shard::begin`] → [`Shard::decide`] per item → [`Shard::seal`]
//! (`Some(batch)` to write, synced when [`Drain::needs_sync`]) → on success [`Shard::applied`]
//! → [`Drain::answer`]. Retention (R25) is a separate turn: [`Shard::sweep`].

use std::collections::HashMap;
use std::fmt::Display;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::codec::{
    self, AttemptRecord, AuditRecord, Claim, EventState, ExpiryKind, InboxRecord, QuarantineRecord,
    RejectRecord,
};
use super::store;
use super::{
    Admission, Decision, DueEvent, OpAction, OpDone, OpRefused, Operation, Outcome, RejectedRecord,
    Reply, Settlement,
};
use crate::limits::ATTEMPT_ERROR_BYTES_MAX;

/// Most events whose expiry entries one sweep handles (an entry of a group commit's events
/// counts them all and is handled whole, so a sweep may pass this by one entry's events, fewer
/// than `COMMIT_BATCH_MAX`). A full sweep leaves a backlog, swept after every following drain
/// until it is gone: at 4096 per drain this outpaces the two expiries each admission of a drain
/// (at most `COMMIT_BATCH_MAX`) eventually adds.
pub const SWEEP_BATCH_MAX: usize = 4096;

/// A keyspace of the ledger as one shard sees it (ARCHITECTURE "The ledger"): the shard's own
/// `claims/s`, `inbox/s`, `schedule/s`, and the global column families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Col {
    /// `claims/s`: idempotency key → claim.
    Claims,
    /// `inbox/s`: seq → inbox record; seq ‖ time ‖ attempt → attempt record; seq ‖ 0xFF… →
    /// delivered mark (`codec::delivered_mark_key`).
    Inbox,
    /// `schedule/s`: due ms ‖ seq → attempts made and ordering place (`codec::ScheduleValue`).
    Schedule,
    /// `meta`: next seq, DLQ counters, expiry entries.
    Meta,
    /// `audit`: operator actions.
    Audit,
    /// `quarantine`: conflicting copies (R11).
    Quarantine,
    /// `rejected`: minimised schema rejects (R23).
    Rejected,
}

/// The visitor of [`ShardStore::scan`]: called with each key and value; `Break` stops the scan.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// What the decisions read and how they write: one shard's view of the ledger. Implemented
/// over RocksDB by the shard writer and in memory by the simulator.
pub trait ShardStore {
    /// A read failure (decisions answer it `Unavailable`, never guess).
    type Error: Display;
    /// The atomic unit of writing: everything one drain decided.
    type Batch: Default;

    /// Calls `f` with the value stored under `key` in `col`, if any.
    ///
    /// # Errors
    /// A failed read.
    fn get<R>(
        &self,
        col: Col,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, Self::Error>;

    /// Calls `each` with the entries of `col` in `[lower, upper)` in key order until it
    /// returns `Break` or the range ends.
    ///
    /// # Errors
    /// A failed read (the scan stops there).
    fn scan(
        &self,
        col: Col,
        lower: &[u8],
        upper: &[u8],
        each: &mut Visit<'_>,
    ) -> Result<(), Self::Error>;

    /// Adds "put `key` = `value` in `col`" to `batch`.
    fn put(&self, batch: &mut Self::Batch, col: Col, key: &[u8], value: &[u8]);
    /// Adds "delete `key` in `col`" to `batch`.
    fn delete(&self, batch: &mut Self::Batch, col: Col, key: &[u8]);
    /// Adds "delete `[from, to)` in `col`" to `batch`.
    fn delete_range(&self, batch: &mut Self::Batch, col: Col, from: &[u8], to: &[u8]);
    /// Whether `batch` holds nothing.
    fn is_empty(&self, batch: &Self::Batch) -> bool;
}

/// What the decisions of every shard share: read-only configuration and the audit sequence.
pub struct Rules {
    /// Configured source ids by source index (DLQ counters are keyed by id in `meta`).
    pub source_ids: Vec<String>,
    /// Payload and identity retention (R25); `None` keeps everything.
    pub retention: Option<Spans>,
    /// Next audit-record sequence (makes `audit` keys unique across writers and the handle).
    pub audit_seq: AtomicU64,
    /// The last ordering stamp given out (R22): see [`Rules::next_order_stamp`]. Seeded with
    /// the ordering index's highest stamp at open.
    pub order_stamp: AtomicU64,
    /// Slots of each shard's ring of recently written unsettled claims ([`RecentClaims`]);
    /// 0 turns it off. The ledger gives each shard [`RECENT_CLAIMS_MAX`] / shards.
    pub recent_claims: usize,
}

impl Rules {
    /// A fresh audit-key sequence number.
    pub fn next_audit_seq(&self) -> u64 {
        self.audit_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The admission stamp of an ordered event decided at `now_ms` (R22): Unix µs, strictly
    /// above every stamp given out before by any shard of this process (and above the index's
    /// highest at open). An event whose admission was committed and acknowledged before another
    /// was received therefore always has the smaller stamp, whichever shards own the two keys.
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

/// The ordering scope of an idempotency key `tenant/source/event id`: `tenant/source` (R22:
/// ordering groups never span sources or tenants).
pub fn scope_of(key: &str) -> &str {
    let mut slashes = key.match_indices('/').map(|(i, _)| i);
    match (slashes.next(), slashes.next()) {
        (Some(_), Some(second)) => &key[..second],
        _ => key,
    }
}

/// Retention spans (R25): see [`super::Retention`].
#[derive(Debug, Clone, Copy)]
pub struct Spans {
    /// How long after settling a delivered or dropped event keeps its payload.
    pub payload: Duration,
    /// How long after admission a delivered or dropped event keeps its identity (claim), at
    /// least (a clean delivery's, up to a second more: `Shard::schedule_delivered_expiry`).
    pub dedupe: Duration,
    /// Most events whose expiry entries one sweep handles: [`SWEEP_BATCH_MAX`] in the ledger;
    /// the simulator uses a few, so that one event's entries often fall into different sweeps.
    pub sweep_batch: usize,
}

/// One queued item of a drain.
pub enum Input {
    /// An event asking to be admitted.
    Admit(Admission),
    /// A dispatch result.
    Settle(Settlement),
    /// A minimised rejected record.
    Reject(RejectedRecord),
    /// An operator action.
    Operate(Operation),
}

/// A settlement's reply: called with whether it was durably written.
type SettleReply = Box<dyn FnOnce(bool) + Send>;
/// An operation's reply.
type OpReply = Box<dyn FnOnce(Result<OpDone, OpRefused>) + Send>;

/// Slots of the rings of recently written unsettled claims, over all shards of a ledger
/// ([`Rules::recent_claims`]): ~200 bytes each in place (6.3 MiB, allocated at open), plus
/// each held claim's key and key id on the heap (~100 bytes for typical ids; at most ~780 bytes
/// with the longest key and ordering value the limits allow, ~25 MiB in all). At 30 000
/// events/s this covers a delivery lag of one second.
pub const RECENT_CLAIMS_MAX: usize = 32_768;

/// The claims this shard wrote last whose events wait for their first attempt's settlement
/// (received, no error: admitted or replayed), by seq: slot `seq % len`. A settlement reads the claim its admission wrote a moment before; found
/// here, that read — a search of the claims memtable's skiplist from its top, random keys, so
/// a cache miss per level — is not made (issue 6: 14 % of the writer's samples with forwarding,
/// `docs/benchmarks.md` run 31).
///
/// Invariant: a slot holds a claim only while the store holds the same claim for its key. Every
/// claim write of a drain passes through `Drain::claims` and reaches the ring in
/// [`Shard::applied`], after the batch was written (a failed write applies nothing, and leaves
/// the ring as it was): such a claim replaces its slot, any other claim of that seq empties it.
/// The only other claim writes are a sweep's deletes, of settled claims only, which the ring
/// never holds. A settlement takes its claim out of the ring only when it will change it (the
/// seq, key and due time match; if the write then fails, the next settlement reads the store).
/// Entries are moved in, never copied, and the keys are not hashed: a map of the last claims
/// cost as much as the reads it saved (run 23). Empty after a restart. A claim taken from here
/// is not read back, so a stored claim damaged on disk meanwhile is overwritten instead of
/// stopping the writer (the store's checksums catch it on the next read). The simulation
/// checks the invariant after every step ([`Shard::check_recent_claims`]).
struct RecentClaims {
    slots: Vec<Option<(String, Claim)>>,
}

impl RecentClaims {
    fn new(len: usize) -> RecentClaims {
        RecentClaims { slots: (0..len).map(|_| None).collect() }
    }

    fn slot(&mut self, seq: u64) -> Option<&mut Option<(String, Claim)>> {
        let len = u64::try_from(self.slots.len()).ok().filter(|&l| l > 0)?;
        let i = usize::try_from(seq % len).expect("below the slot count, a usize");
        self.slots.get_mut(i)
    }

    /// Takes the claim of `key` with `seq`, if the ring holds it and it is due at `due_ms` (a
    /// settlement of that schedule entry will change it); otherwise leaves the slot as it is.
    fn take(&mut self, key: &str, seq: u64, due_ms: u64) -> Option<Claim> {
        let slot = self.slot(seq)?;
        let settles = |(k, c): &(String, Claim)| {
            c.seq == seq && k == key && c.next_attempt_ms == Some(due_ms)
        };
        if slot.as_ref().is_some_and(settles) {
            return slot.take().map(|(_, c)| c);
        }
        None
    }

    /// Records a claim the store now holds for `key`.
    fn written(&mut self, key: String, claim: Claim) {
        let seq = claim.seq;
        let Some(slot) = self.slot(seq) else { return };
        if claim.state == EventState::Received && claim.last_error.is_none() {
            *slot = Some((key, claim));
        } else if slot.as_ref().is_some_and(|(_, c)| c.seq == seq) {
            *slot = None;
        }
    }
}

/// The decision state one shard writer alone owns: next seq, the due-time floor, DLQ counters.
pub struct Shard {
    shard: usize,
    rules: std::sync::Arc<Rules>,
    next_seq: u64,
    /// Due time given to the last drain's new events (never decreases; see `Drain::due_ms`).
    last_due_ms: u64,
    dlq: HashMap<u32, u64>,
    rejects_written: u32,
    /// `meta` key prefix of this shard's expiry entries.
    expiry_prefix: Vec<u8>,
    /// The last sweep was full: sweep again after the next drain.
    expiry_backlog: bool,
    /// The last expiry entry (key without its prefix) a written sweep handled: every entry
    /// that sorts at or before it is deleted, so the next sweep seeks past it instead of
    /// walking their tombstones (RocksDB keeps a deleted key's tombstone until a compaction
    /// drops it, and a scan from the head steps over each one: the sweep's cost grew with
    /// the events expired since the last compaction, `benches/soak.sh`). `None`: from the head.
    swept_through: Option<[u8; 17]>,
    /// Claims of unsettled events this shard wrote last, for their settlements.
    recent: RecentClaims,
    /// The last written drain's claim overlay, emptied, for the next drain
    /// ([`SPARE_CLAIMS_MAX`]): a new map per drain grew through several rehashes of its
    /// events (1–2 % of the writer's samples, issue 6).
    spare_claims: HashMap<String, Claim>,
}

/// Most entries the claim overlay kept between drains may have room for (a drain of up to
/// `COMMIT_BATCH_MAX` items makes one that large; a larger one is freed after its drain).
const SPARE_CLAIMS_MAX: usize = 1024;

/// What one expiry entry removes ([`Shard::plan_expiry`]), decided before anything is written.
struct ExpiryPlan {
    /// The keys to delete besides the entry itself.
    deletes: Vec<(Col, Vec<u8>)>,
    /// Events it counts against the sweep's limit ([`Spans::sweep_batch`]).
    events: usize,
    /// Events whose records it removes.
    removed: usize,
}

/// What one retention sweep decided ([`Shard::sweep`]): the batch to write (unsynced), how many
/// events' records it removes, and the cursor to adopt with [`Shard::swept`] once written.
pub struct Sweep<B> {
    /// The deletions to write.
    pub batch: B,
    /// Events whose payload or identity the batch removes.
    pub removed: usize,
    /// The last expiry entry the batch deletes (key without its prefix), if any.
    pub through: Option<[u8; 17]>,
}

/// Everything one drain decided: the batch to write, the replies to give after the write,
/// and the changes to adopt if it succeeds.
pub struct Drain<B> {
    /// Due time of this drain's new events: the drain's wall-clock time, never earlier than
    /// the previous drain's. So new schedule entries of a shard always sort after every entry
    /// the dispatcher has already seen due, and it can resume its scan where it left off
    /// instead of walking the settled head of the schedule.
    due_ms: u64,
    batch: B,
    claims: HashMap<String, Claim>,
    next_seq: u64,
    dlq: HashMap<u32, u64>,
    /// Per source: change of the number of unsettled events, applied after the write.
    pub(super) pending_delta: HashMap<u32, i64>,
    /// Per source: change of the number of dead events, applied after the write.
    pub(super) dead_delta: HashMap<u32, i64>,
    admissions: Vec<(Reply, Decision)>,
    settlements: Vec<(SettleReply, bool)>,
    operations: Vec<(OpReply, Result<OpDone, OpRefused>)>,
    /// The earliest expiry entry this drain adds (key without its prefix): if it sorts at or
    /// before the sweep cursor, the next sweep starts from the head again.
    earliest_expiry: Option<[u8; 17]>,
    /// The events this drain delivered cleanly, `(seq, received_at_ms, idempotency key)`: their
    /// expiry entries are written as groups when the drain is sealed
    /// ([`ExpiryKind::DeliveredPayloads`], [`ExpiryKind::DeliveredIdentities`]).
    delivered_cleanly: Vec<(u64, u64, String)>,
    /// Whether an operator replay scheduled an event in this drain: replays are due at
    /// `due_ms + 1`, so they sort after every entry the dispatcher saw due (see `Drain::due_ms`).
    replayed: bool,
    durable_writes: usize,
    /// Admissions and quarantines in this drain: they are acknowledged to a provider, so the
    /// batch must be fsync'd (R14). Settlements alone need not be: a settlement lost in a
    /// crash only repeats an attempt with the same idempotency key (at-least-once, R21).
    acked_writes: usize,
    rejects: usize,
    /// Whether this drain added a schedule entry (the dispatcher is woken after the write).
    pub(super) scheduled: bool,
}

impl<B> Drain<B> {
    /// Admissions, settlements and operations in the drain (rejects have no reply).
    pub fn items(&self) -> usize {
        self.admissions.len() + self.settlements.len() + self.operations.len()
    }

    /// Whether the batch must be written with fsync: it holds something acknowledged to a
    /// provider or an operator (R14).
    pub fn needs_sync(&self) -> bool {
        self.acked_writes > 0
    }

    /// Whether this drain scheduled something (a new event, a retry, a replay).
    pub fn scheduled(&self) -> bool {
        self.scheduled
    }

    /// Calls every reply: decisions stand only if the write succeeded (`written`); otherwise
    /// admissions get `Unavailable`, settlements `false`, operations `Unavailable` (R15).
    pub fn answer(self, written: bool) {
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

impl Shard {
    /// Shard `shard`'s decisions, resuming at `next_seq` with its DLQ counters.
    pub fn new(
        shard: usize,
        next_seq: u64,
        dlq: HashMap<u32, u64>,
        rules: std::sync::Arc<Rules>,
    ) -> Shard {
        Shard {
            shard,
            next_seq,
            last_due_ms: 0,
            dlq,
            rejects_written: 0,
            expiry_prefix: store::meta_expiry_prefix(shard),
            expiry_backlog: false,
            swept_through: None,
            recent: RecentClaims::new(rules.recent_claims),
            spare_claims: HashMap::new(),
            rules,
        }
    }

    /// Shard `shard`'s decisions resumed from what `s` durably holds (its next seq and DLQ
    /// counters in `meta`), as the ledger's start-up reads them (`store::load_next_seq`,
    /// `store::load_dlq`): what the simulator does after a crash.
    ///
    /// # Errors
    /// A failed read. A corrupt counter panics.
    pub fn recover<S: ShardStore>(
        s: &S,
        shard: usize,
        rules: std::sync::Arc<Rules>,
    ) -> Result<Shard, S::Error> {
        let parse = |v: &[u8]| codec::parse_u64(v).expect("meta counters are 8 bytes");
        let next_seq = s.get(Col::Meta, &store::meta_seq(shard), parse)?.unwrap_or(0);
        let mut dlq = HashMap::new();
        for (i, id) in rules.source_ids.iter().enumerate() {
            if let Some(n) = s.get(Col::Meta, &store::meta_dlq(shard, id), parse)? {
                dlq.insert(u32::try_from(i).expect("source count is bounded by config"), n);
            }
        }
        Ok(Shard::new(shard, next_seq, dlq, rules))
    }

    /// The next inbox seq to give out.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether the last sweep left due expiry entries behind (sweep again after the next drain).
    pub fn expiry_backlog(&self) -> bool {
        self.expiry_backlog
    }

    /// A drain at wall-clock `now_ms` (Unix ms; its new events are due at
    /// `max(now_ms, last drain's due time)`).
    pub fn begin<B: Default>(&mut self, now_ms: u64) -> Drain<B> {
        Drain {
            due_ms: now_ms.max(self.last_due_ms),
            batch: B::default(),
            claims: std::mem::take(&mut self.spare_claims),
            next_seq: self.next_seq,
            dlq: HashMap::new(),
            pending_delta: HashMap::new(),
            dead_delta: HashMap::new(),
            admissions: Vec::new(),
            settlements: Vec::new(),
            operations: Vec::new(),
            earliest_expiry: None,
            delivered_cleanly: Vec::new(),
            replayed: false,
            durable_writes: 0,
            acked_writes: 0,
            rejects: 0,
            scheduled: false,
        }
    }

    /// Decides one item against the store plus the drain's own overlay (two copies of one key
    /// in one drain), appending its records to the drain's batch.
    pub fn decide<S: ShardStore>(&mut self, s: &S, d: &mut Drain<S::Batch>, input: Input) {
        match input {
            Input::Admit(a) => self.admit(s, d, a),
            Input::Settle(st) => self.settle(s, d, st),
            Input::Reject(r) => self.reject(s, d, &r),
            Input::Operate(o) => self.operate(s, d, o),
        }
    }

    /// Ends the drain: `None` when it needs no write (its replies stand as decided), else the
    /// batch to write (with fsync when [`Drain::needs_sync`]), the next seq included.
    pub fn seal<S: ShardStore>(&self, s: &S, d: &mut Drain<S::Batch>) -> Option<S::Batch> {
        if d.durable_writes + d.rejects == 0 {
            return None;
        }
        if d.next_seq != self.next_seq {
            s.put(&mut d.batch, Col::Meta, &store::meta_seq(self.shard), &d.next_seq.to_be_bytes());
        }
        self.schedule_delivered_expiry(s, d);
        Some(std::mem::take(&mut d.batch))
    }

    /// After the drain's batch was written: adopt its seq, due-time floor and DLQ counters, and
    /// keep the claims it wrote for their settlements ([`RecentClaims`]; they leave the drain).
    pub fn applied<B>(&mut self, d: &mut Drain<B>) {
        for (key, claim) in d.claims.drain() {
            self.recent.written(key, claim);
        }
        if d.claims.capacity() <= SPARE_CLAIMS_MAX {
            self.spare_claims = std::mem::take(&mut d.claims);
        }
        self.next_seq = d.next_seq;
        self.last_due_ms = d.due_ms + u64::from(d.replayed);
        // An entry behind the cursor (an identity that expires before what was swept, e.g. an
        // event delivered long after its admission) must not be skipped.
        if let (Some(added), Some(through)) = (d.earliest_expiry, self.swept_through) {
            if added <= through {
                self.swept_through = None;
            }
        }
        self.dlq.extend(d.dlq.iter().map(|(&k, &v)| (k, v)));
    }

    /// Checks [`RecentClaims`]' invariant: every claim the ring holds is the one `s` holds for
    /// its key. For the simulation, after every step.
    ///
    /// # Errors
    /// The first slot that differs from the store, or a failed read.
    pub fn check_recent_claims<S: ShardStore>(&self, s: &S) -> Result<(), String> {
        for (key, held) in self.recent.slots.iter().flatten() {
            match read_claim(s, self.shard, key) {
                Ok(Some(stored)) if stored == *held => {}
                Ok(stored) => {
                    return Err(format!(
                        "shard {}: the ring holds {held:?} for {key}, the store {stored:?}",
                        self.shard
                    ))
                }
                Err(e) => return Err(format!("shard {}: read failed: {e}", self.shard)),
            }
        }
        Ok(())
    }

    fn admit<S: ShardStore>(&mut self, s: &S, d: &mut Drain<S::Batch>, a: Admission) {
        let first = match d.claims.get(&a.key) {
            Some(c) => Some(c.fingerprint),
            // The fingerprint is all an admission needs: no look for a delivered mark.
            None => match read_stored_claim(s, self.shard, &a.key) {
                Ok(c) => c.map(|c| c.fingerprint),
                Err(e) => {
                    tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read a claim; the admission is answered unavailable.");
                    d.admissions.push((a.reply, Decision::Unavailable));
                    return;
                }
            },
        };
        match first {
            None => self.accept(s, d, a),
            Some(fp) if fp == a.fingerprint => d.admissions.push((a.reply, Decision::Duplicate)),
            Some(fp) => self.quarantine(s, d, a, fp),
        }
    }

    fn accept<S: ShardStore>(&mut self, s: &S, d: &mut Drain<S::Batch>, a: Admission) {
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
            let stamp = self.rules.next_order_stamp(d.due_ms);
            let k = store::meta_ordering(scope_of(&a.key), &value, stamp, self.shard, seq);
            s.put(&mut d.batch, Col::Meta, &k, a.key.as_bytes());
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
        s.put(&mut d.batch, Col::Claims, record.key.as_bytes(), &codec::encode_claim(&claim));
        s.put(&mut d.batch, Col::Inbox, &codec::seq_key(seq), &codec::encode_inbox(&record));
        s.put(&mut d.batch, Col::Schedule, &sk, &codec::encode_schedule(&claim));
        *d.pending_delta.entry(a.source).or_insert(0) += 1;
        d.scheduled = true;
        d.durable_writes += 1;
        d.acked_writes += 1;
        d.claims.insert(record.key, claim);
        d.admissions.push((a.reply, Decision::Accepted));
    }

    /// Same key, other fingerprint: record both fingerprints, never touch the first (R11).
    fn quarantine<S: ShardStore>(
        &mut self,
        s: &S,
        d: &mut Drain<S::Batch>,
        a: Admission,
        first_fingerprint: [u8; 32],
    ) {
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
        s.put(&mut d.batch, Col::Quarantine, &k, &codec::encode_quarantine(&q));
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

    /// A settlement of schedule entry (`due_ms`, `seq`) of event `key`. The claim says whether
    /// that entry still exists: the claim of an unsettled event (received or failed) names its
    /// one entry's due time (`next_attempt_ms`), both written in the same batch by every
    /// change (admission, retry, replay, settlement, drop), so no read of the schedule is
    /// needed. A failed read is an operating error (the settlement is refused and its attempt
    /// repeated); a claim for another seq, settled, or due at another time means the entry
    /// was already settled or moved by an operator: a no-op, never a second transition.
    fn settle<S: ShardStore>(&mut self, s: &S, d: &mut Drain<S::Batch>, st: Settlement) {
        let in_drain = d.claims.get(&st.key).cloned();
        let from_drain = in_drain.is_some();
        let claim = match in_drain.or_else(|| self.recent.take(&st.key, st.seq, st.due_ms)) {
            Some(c) => Ok(Some(c)),
            None => read_claim(s, self.shard, &st.key),
        };
        match claim {
            Ok(Some(c))
                if c.seq == st.seq
                    && matches!(c.state, EventState::Received | EventState::Failed)
                    && c.next_attempt_ms == Some(st.due_ms) =>
            {
                self.transition(s, d, st, c);
            }
            Ok(_) => {
                if !from_drain {
                    self.remove_stray_entry(s, d, &st);
                }
                d.settlements.push((st.reply, true));
            }
            Err(e) => {
                tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read a settled event's claim; the settlement is refused.");
                d.settlements.push((st.reply, false));
            }
        }
    }

    /// A stale settlement (its claim is settled, moved or gone, as read from the store) whose
    /// schedule entry is still there contradicts the claim: a broken invariant, by a bug or a
    /// damaged ledger. Left alone, the dispatcher would attempt that entry again and again;
    /// the claim is the record of truth, so the entry is removed, loudly. Only this rare path
    /// reads the schedule; a claim changed in this drain is not checked (its entries changed
    /// with it in this drain's batch, which the store does not show yet).
    fn remove_stray_entry<S: ShardStore>(&self, s: &S, d: &mut Drain<S::Batch>, st: &Settlement) {
        let sk = codec::schedule_key(st.due_ms, st.seq);
        match s.get(Col::Schedule, &sk, |_| ()) {
            Ok(Some(())) => {
                tracing::error!(code = "ledger_stray_schedule_entry", shard = self.shard, seq = st.seq, due_ms = st.due_ms, "A schedule entry contradicts its event's claim (settled, moved or gone); the entry is removed so it is not attempted again.");
                s.delete(&mut d.batch, Col::Schedule, &sk);
                d.durable_writes += 1;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read a schedule entry after a stale settlement; it is checked again at the next one.");
            }
        }
    }

    fn transition<S: ShardStore>(
        &mut self,
        s: &S,
        d: &mut Drain<S::Batch>,
        st: Settlement,
        mut claim: Claim,
    ) {
        let key = st.key;
        let sk = codec::schedule_key(st.due_ms, st.seq);
        // A first delivery (the claim as admitted or replayed, without an error) is written as
        // the event's delivered mark, in seq order, not as a rewrite of the claim's random key:
        // 1.5 µs of the writer per forwarded event (docs/benchmarks.md run 33). Every claim
        // read overlays the mark (`read_claim`).
        let marked_at = match st.outcome {
            Outcome::Delivered { at_ms } if claim.may_be_marked_delivered() => Some(at_ms),
            _ => None,
        };
        claim.attempts = st.attempts;
        // A delivery is not written to the history: delivered is terminal (no replay, no
        // drop), so the claim says it all (attempts, delivered_at_ms) and the history view
        // adds it from there. One memtable entry fewer per event, and `inbox/s` is written
        // in seq order only, unless an attempt fails.
        if !matches!(st.outcome, Outcome::Delivered { .. }) {
            self.record_attempt(s, d, st.seq, st.attempts, &st.outcome);
        }
        s.delete(&mut d.batch, Col::Schedule, &sk);
        match st.outcome {
            Outcome::Retry { next_ms, error } => {
                claim.state = EventState::Failed;
                claim.last_error = Some(codec::truncate_utf8(&error, ATTEMPT_ERROR_BYTES_MAX));
                claim.next_attempt_ms = Some(next_ms);
                let next = codec::schedule_key(next_ms, st.seq);
                s.put(&mut d.batch, Col::Schedule, &next, &codec::encode_schedule(&claim));
                d.scheduled = true;
            }
            Outcome::Delivered { at_ms } => {
                claim.state = EventState::Delivered;
                claim.delivered_at_ms = Some(at_ms);
                claim.next_attempt_ms = None;
                self.release_ordering(s, d, &key, &mut claim);
                *d.pending_delta.entry(claim.source).or_insert(0) -= 1;
                self.schedule_expiry(s, d, &key, &claim);
            }
            Outcome::Dead { error } => {
                claim.state = EventState::Dead;
                claim.last_error = Some(codec::truncate_utf8(&error, ATTEMPT_ERROR_BYTES_MAX));
                claim.next_attempt_ms = None;
                self.release_ordering(s, d, &key, &mut claim);
                *d.pending_delta.entry(claim.source).or_insert(0) -= 1;
                self.count_dead(s, d, claim.source);
            }
        }
        match marked_at {
            Some(at_ms) => {
                let mark = codec::encode_delivered_mark(claim.attempts, at_ms);
                s.put(&mut d.batch, Col::Inbox, &codec::delivered_mark_key(claim.seq), &mark);
            }
            None => s.put(&mut d.batch, Col::Claims, key.as_bytes(), &codec::encode_claim(&claim)),
        }
        d.claims.insert(key, claim);
        d.durable_writes += 1;
        d.settlements.push((st.reply, true));
    }

    /// Takes a settled event out of its ordering group (R22), so the group's next event may be
    /// delivered. A replayed event is not put back: it is delivered on its own (src/ordering.rs).
    fn release_ordering<S: ShardStore>(
        &self,
        s: &S,
        d: &mut Drain<S::Batch>,
        key: &str,
        claim: &mut Claim,
    ) {
        if let Some(o) = claim.ordering.take() {
            let k = store::meta_ordering(scope_of(key), &o.value, o.stamp, self.shard, claim.seq);
            s.delete(&mut d.batch, Col::Meta, &k);
        }
    }

    /// An operator action (R20): checks the state, moves the schedule entry and the counters,
    /// writes the claim and its audit record in this drain's (synced) batch.
    fn operate<S: ShardStore>(&mut self, s: &S, d: &mut Drain<S::Batch>, op: Operation) {
        let claim = match d.claims.get(&op.key) {
            Some(c) => Some(c.clone()),
            None => match read_claim(s, self.shard, &op.key) {
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
        if let Err(refused) = self.operable(s, op.action, &claim) {
            d.operations.push((op.reply, Err(refused)));
            return;
        }
        let unsettled = matches!(before, EventState::Received | EventState::Failed);
        if let (true, Some(due)) = (unsettled, claim.next_attempt_ms) {
            let sk = codec::schedule_key(due, claim.seq);
            s.delete(&mut d.batch, Col::Schedule, &sk);
        }
        if before == EventState::Dead {
            self.uncount_dead(s, d, claim.source);
        }
        match op.action {
            OpAction::Replay => {
                let due = d.due_ms + 1;
                claim.state = EventState::Received;
                claim.attempts = 0;
                claim.next_attempt_ms = Some(due);
                let sk = codec::schedule_key(due, claim.seq);
                s.put(&mut d.batch, Col::Schedule, &sk, &codec::encode_schedule(&claim));
                d.scheduled = true;
                d.replayed = true;
                if !unsettled {
                    *d.pending_delta.entry(claim.source).or_insert(0) += 1;
                }
            }
            OpAction::Drop => {
                claim.state = EventState::Dropped;
                claim.next_attempt_ms = None;
                self.release_ordering(s, d, &op.key, &mut claim);
                if unsettled {
                    *d.pending_delta.entry(claim.source).or_insert(0) -= 1;
                }
                self.schedule_expiry(s, d, &op.key, &claim);
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
        let audit_key = codec::audit_key(audit.at_ms, self.rules.next_audit_seq());
        s.put(&mut d.batch, Col::Audit, &audit_key, &codec::encode_audit(&audit));
        s.put(&mut d.batch, Col::Claims, op.key.as_bytes(), &codec::encode_claim(&claim));
        d.claims.insert(op.key, claim);
        d.durable_writes += 1;
        // Answered to an operator: as durable as an admission.
        d.acked_writes += 1;
        d.operations.push((op.reply, Ok(OpDone { before, after })));
    }

    /// Whether `action` may be applied to an event in `claim`'s state (and, for a replay,
    /// whether its payload is still retained).
    fn operable<S: ShardStore>(
        &self,
        s: &S,
        action: OpAction,
        claim: &Claim,
    ) -> Result<(), OpRefused> {
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
            match s.get(Col::Inbox, &codec::seq_key(claim.seq), |_| ()) {
                Ok(Some(())) => {}
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
    fn uncount_dead<S: ShardStore>(&self, s: &S, d: &mut Drain<S::Batch>, source: u32) {
        *d.dead_delta.entry(source).or_insert(0) -= 1;
        let Some(id) = self.rules.source_ids.get(source as usize) else {
            return;
        };
        let now = self.dlq.get(&source).copied().unwrap_or(0);
        let count = d.dlq.entry(source).or_insert(now);
        *count = count.saturating_sub(1);
        let count = *count;
        s.put(&mut d.batch, Col::Meta, &store::meta_dlq(self.shard, id), &count.to_be_bytes());
    }

    /// A delivered or dropped event: its payload expires `payload_retention` after the drain,
    /// its identity `dedupe_retention` after admission (R25). Dead events never expire by
    /// themselves (they wait in the DLQ for an operator).
    ///
    /// A delivered event is terminal (no replay, no drop): when it also never failed an attempt
    /// (no `last_error`, so no attempt history: a delivery is not written to it), nothing will
    /// need its inbox record again, and its payload entry says so: the sweep removes the record
    /// without reading anything (`benches/soak.sh`: the reads were most of the sweep's cost),
    /// and its identity entry says the payload needs no looking for. Such events are collected
    /// in the drain and get one payload entry per drain and one identity entry per second of
    /// receipt ([`Shard::schedule_delivered_expiry`]; ledgers of format 2 hold one
    /// `DeliveredPayload` and one `DeliveredIdentity` entry per event, swept alike). Identity
    /// entries are still checked against the claim: an event dropped, replayed and delivered
    /// has two, and the later must not remove the claim of an admission made after the first
    /// expired it.
    fn schedule_expiry<S: ShardStore>(
        &self,
        s: &S,
        d: &mut Drain<S::Batch>,
        key: &str,
        claim: &Claim,
    ) {
        let Some(r) = &self.rules.retention else {
            return;
        };
        let seq = claim.seq;
        if claim.state == EventState::Delivered && claim.last_error.is_none() {
            d.delivered_cleanly.push((seq, claim.received_at_ms, key.to_owned()));
            return;
        }
        let payload_at = d.due_ms.saturating_add(millis(r.payload));
        let identity_at = claim.received_at_ms.saturating_add(millis(r.dedupe));
        for (at, kind) in [(payload_at, ExpiryKind::Payload), (identity_at, ExpiryKind::Identity)] {
            self.put_expiry(s, d, codec::expiry_key(at, kind, seq), key.as_bytes());
        }
    }

    /// The expiry entries of the events `d` delivered cleanly, written when it is sealed: one
    /// [`ExpiryKind::DeliveredPayloads`] entry for them all (their payloads expire
    /// `payload_retention` after the drain), and one [`ExpiryKind::DeliveredIdentities`] entry
    /// per second they were received in, due `dedupe_retention` after that second's end (R25:
    /// an identity is never forgotten early, and at most a second late). Per event this was
    /// two inserts into the `meta` memtable, in two places of its skiplist, and two entries for
    /// the sweep to read and delete (docs/benchmarks.md, run 34).
    fn schedule_delivered_expiry<S: ShardStore>(&self, s: &S, d: &mut Drain<S::Batch>) {
        let (Some(r), false) = (&self.rules.retention, d.delivered_cleanly.is_empty()) else {
            return;
        };
        let mut events = std::mem::take(&mut d.delivered_cleanly);
        let payload_at = d.due_ms.saturating_add(millis(r.payload));
        let first = events.iter().map(|&(seq, ..)| seq).min().expect("not empty");
        let seqs = codec::encode_expiry_seqs(events.iter().map(|&(seq, ..)| seq));
        self.put_expiry(
            s,
            d,
            codec::expiry_key(payload_at, ExpiryKind::DeliveredPayloads, first),
            &seqs,
        );
        events.sort_unstable_by_key(|&(seq, received_at_ms, _)| (received_at_ms / 1000, seq));
        for second in events.chunk_by(|a, b| a.1 / 1000 == b.1 / 1000) {
            let end_ms = (second[0].1 / 1000).saturating_mul(1000).saturating_add(999);
            let at = end_ms.saturating_add(millis(r.dedupe));
            let members = codec::encode_expiry_members(
                second.iter().map(|(seq, _, key)| (*seq, key.as_str())),
            );
            let entry = codec::expiry_key(at, ExpiryKind::DeliveredIdentities, second[0].0);
            self.put_expiry(s, d, entry, &members);
        }
    }

    /// Writes expiry `entry` (a key without the shard's prefix) with `value`, and keeps the
    /// drain's earliest entry for the sweep cursor ([`Shard::applied`]).
    fn put_expiry<S: ShardStore>(
        &self,
        s: &S,
        d: &mut Drain<S::Batch>,
        entry: [u8; 17],
        value: &[u8],
    ) {
        d.earliest_expiry = Some(d.earliest_expiry.map_or(entry, |e| e.min(entry)));
        let k = [self.expiry_prefix.as_slice(), &entry].concat();
        s.put(&mut d.batch, Col::Meta, &k, value);
    }

    /// Decides what retention expired by `now_ms` (at most [`Spans::sweep_batch`] events, an
    /// entry of a group commit's events whole): the inbox record and attempt history
    /// (payload), or the claim (identity), of events still delivered or dropped with the same
    /// seq — a replayed or re-admitted event is skipped; a clean delivery's payload
    /// (`ExpiryKind::DeliveredPayloads`, or `DeliveredPayload` in a format-2 ledger) is removed
    /// without a read.
    /// The scan starts after the last entry a written sweep handled ([`Shard::swept`]).
    /// Returns the batch to write (unsynced), how many events it removes and the cursor to
    /// adopt once it is written, or `None` when there is nothing to write. Each entry is read
    /// whole before any of its deletes is added: when a read fails, the entries before it are
    /// returned and it and the rest wait for the next timed sweep (not the next drain, so a
    /// read that keeps failing is not retried and logged at the commit rate).
    pub fn sweep<S: ShardStore>(&mut self, s: &S, now_ms: u64) -> Option<Sweep<S::Batch>> {
        let batch_max = self.rules.retention?.sweep_batch;
        let mut batch = S::Batch::default();
        let mut removed = 0usize;
        let end = codec::expiry_key(now_ms.saturating_add(1), ExpiryKind::Payload, 0);
        let upper = [self.expiry_prefix.as_slice(), &end].concat();
        // Right after the cursor: the cursor's key followed by a zero byte.
        let mut lower = self.expiry_prefix.clone();
        if let Some(through) = &self.swept_through {
            lower.extend_from_slice(through);
            lower.push(0);
        }
        let mut handled = 0usize;
        let mut through = None;
        let prefix_len = self.expiry_prefix.len();
        let mut failed = None;
        let scanned = s.scan(Col::Meta, &lower, &upper, &mut |k, value| {
            if handled >= batch_max {
                return ControlFlow::Break(());
            }
            let entry = &k[prefix_len..];
            let (_, kind, seq) =
                codec::parse_expiry_key(entry).unwrap_or_else(|e| self.corrupt_entry(e));
            // Reads first, writes after: an entry whose reads fail adds nothing, and the
            // entries before it are written (each one whole).
            let plan = match self.plan_expiry(s, kind, seq, value) {
                Ok(plan) => plan,
                Err(e) => {
                    failed = Some(e);
                    return ControlFlow::Break(());
                }
            };
            s.delete(&mut batch, Col::Meta, k);
            for (col, key) in &plan.deletes {
                s.delete(&mut batch, *col, key);
            }
            handled += plan.events;
            removed += plan.removed;
            through = Some(entry.try_into().expect("a parsed expiry key is 17 bytes"));
            ControlFlow::Continue(())
        });
        if let Err(e) = scanned {
            failed = Some(format!("its expiry list: {e}"));
        }
        if let Some(e) = failed {
            // Retried at the next timed sweep, not after every drain: a read that keeps failing
            // would otherwise be retried and logged at the commit rate.
            self.expiry_backlog = false;
            tracing::error!(code = "ledger_read_failed", shard = self.shard, error = %e, "The ledger could not read what an expiry entry names; the entries before it are swept, the rest wait for the next timed sweep.");
            return (!s.is_empty(&batch)).then_some(Sweep { batch, removed, through });
        }
        self.expiry_backlog = handled >= batch_max;
        if let (0, Some(spans)) = (self.shard, self.rules.retention) {
            let dedupe_ms = millis(spans.dedupe);
            self.expire_minimised(s, &mut batch, now_ms.saturating_sub(dedupe_ms));
        }
        if s.is_empty(&batch) {
            return None;
        }
        Some(Sweep { batch, removed, through })
    }

    /// An expiry entry that does not decode: a broken invariant (only this shard's writer
    /// writes its entries), so the writer stops rather than guess what it meant to remove.
    fn corrupt_entry(&self, e: codec::DecodeError) -> ! {
        panic!("ledger shard {}: corrupt expiry entry: {e}", self.shard)
    }

    /// What one expiry entry of `kind` (its key's `seq`, its `value`) removes, read but not yet
    /// written: the deletes (besides the entry itself), how many events it counts against the
    /// sweep's limit, and how many it removes. Only events still settled with that seq are
    /// removed ([`settled_claim`]); a clean delivery's payload without a read.
    ///
    /// # Errors
    /// A failed read of a claim or of a payload's rows (the entry is then left for later).
    fn plan_expiry<S: ShardStore>(
        &self,
        s: &S,
        kind: ExpiryKind,
        seq: u64,
        value: &[u8],
    ) -> Result<ExpiryPlan, String> {
        let mut plan = ExpiryPlan { deletes: Vec::new(), events: 1, removed: 0 };
        match kind {
            ExpiryKind::DeliveredPayload => {
                plan.deletes.push((Col::Inbox, codec::seq_key(seq).to_vec()));
                plan.removed = 1;
                return Ok(plan);
            }
            ExpiryKind::DeliveredPayloads => {
                let seqs =
                    codec::decode_expiry_seqs(value).unwrap_or_else(|e| self.corrupt_entry(e));
                plan.events = seqs.len().max(1);
                plan.removed = seqs.len();
                plan.deletes =
                    seqs.iter().map(|&q| (Col::Inbox, codec::seq_key(q).to_vec())).collect();
                return Ok(plan);
            }
            ExpiryKind::DeliveredIdentities => {
                let members =
                    codec::decode_expiry_members(value).unwrap_or_else(|e| self.corrupt_entry(e));
                plan.events = members.len().max(1);
                for (seq, key) in members {
                    if settled_claim(s, self.shard, &key, seq)? {
                        plan.deletes.push((Col::Inbox, codec::delivered_mark_key(seq).to_vec()));
                        plan.deletes.push((Col::Claims, key.into_bytes()));
                        plan.removed += 1;
                    }
                }
                return Ok(plan);
            }
            ExpiryKind::Payload | ExpiryKind::Identity | ExpiryKind::DeliveredIdentity => {}
        }
        let key = String::from_utf8_lossy(value).into_owned();
        if !settled_claim(s, self.shard, &key, seq)? {
            return Ok(plan);
        }
        plan.removed = 1;
        // The event is forgotten: its claim, and whatever payload is left (none when the
        // payload has its own blind entry). The inbox record and its attempt history sort in
        // [seq, seq + 1).
        // A delivered mark goes with its claim, never with the payload: without it the claim
        // would read `received` again, and its identity never expire. (An identity entry's
        // scan below takes it with whatever payload is left.)
        let mark = codec::delivered_mark_key(seq);
        match kind {
            ExpiryKind::Identity => plan.deletes.push((Col::Claims, key.into_bytes())),
            ExpiryKind::DeliveredIdentity => {
                plan.deletes.push((Col::Claims, key.into_bytes()));
                plan.deletes.push((Col::Inbox, mark.to_vec()));
                return Ok(plan);
            }
            _ => {}
        }
        // Point deletes of what is there (the record and its few attempt records), not a range
        // delete: RocksDB keeps every range tombstone of a memtable in one list that it
        // re-fragments on each new one, so one per expired event made the sweep's cost and the
        // ledger's memory grow with the rate (benches/soak.sh: 914 MiB peak after 2 M events).
        let (from, to) = (codec::seq_key(seq), codec::seq_key(seq.saturating_add(1)));
        let payload_only = kind == ExpiryKind::Payload;
        s.scan(Col::Inbox, &from, &to, &mut |k, _| {
            if !(payload_only && k == mark) {
                plan.deletes.push((Col::Inbox, k.to_vec()));
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| e.to_string())?;
        Ok(plan)
    }

    /// After a sweep's batch was written: later sweeps start after its last entry.
    pub fn swept(&mut self, through: Option<[u8; 17]>) {
        if through.is_some() {
            self.swept_through = through;
        }
    }

    /// The quarantine (R11) and rejected (R23) records received before `cutoff_ms` (Unix ms:
    /// now − `dedupe_retention`, the life of the identities they are about) are removed with one
    /// range delete per column family — their keys start with the time, big-endian — and only
    /// when the oldest record is that old, so an idle sweep writes nothing. Done by shard 0
    /// alone (the column families are global); the audit log is kept (operator actions are few,
    /// and kept for accountability).
    fn expire_minimised<S: ShardStore>(&self, s: &S, batch: &mut S::Batch, cutoff_ms: u64) {
        let cutoff = cutoff_ms.to_be_bytes();
        for col in [Col::Quarantine, Col::Rejected] {
            let mut expired = false;
            let read = s.scan(col, &[], &cutoff, &mut |_, _| {
                expired = true;
                ControlFlow::Break(())
            });
            match read {
                Ok(()) if expired => s.delete_range(batch, col, &[0u8; 8], &cutoff),
                Ok(()) => {}
                Err(e) => {
                    tracing::error!(code = "ledger_read_failed", error = %e, "The ledger could not read a minimised record; retention waits for the next sweep.");
                }
            }
        }
    }

    /// Appends one failed attempt to the event's error history (`inbox/s`, R20).
    fn record_attempt<S: ShardStore>(
        &self,
        s: &S,
        d: &mut Drain<S::Batch>,
        seq: u64,
        attempt: u32,
        outcome: &Outcome,
    ) {
        let (code, at_ms, error) = match outcome {
            Outcome::Delivered { at_ms } => (codec::ATTEMPT_DELIVERED, *at_ms, None),
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
        s.put(&mut d.batch, Col::Inbox, &key, &codec::encode_attempt(&record));
    }

    /// DLQ counter +1 for `source`, persisted under its source id (R19, R26).
    fn count_dead<S: ShardStore>(&self, s: &S, d: &mut Drain<S::Batch>, source: u32) {
        *d.dead_delta.entry(source).or_insert(0) += 1;
        let Some(id) = self.rules.source_ids.get(source as usize) else {
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
        let count = *count;
        s.put(&mut d.batch, Col::Meta, &store::meta_dlq(self.shard, id), &count.to_be_bytes());
    }

    /// A minimised rejected record (R23): metadata and fingerprint, never the body.
    fn reject<S: ShardStore>(&mut self, s: &S, d: &mut Drain<S::Batch>, r: &RejectedRecord) {
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
        s.put(&mut d.batch, Col::Rejected, &k, &codec::encode_reject(&record));
        d.rejects += 1;
    }
}

/// A claim as the simulator's invariant checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimView {
    /// Life state.
    pub state: EventState,
    /// Inbox seq.
    pub seq: u64,
    /// Attempts made.
    pub attempts: u32,
    /// SHA-256 of the first admitted body (R11).
    pub fingerprint: [u8; 32],
    /// Admission time, Unix ms.
    pub received_at_ms: u64,
    /// When the next attempt is due (its schedule entry), for unsettled events.
    pub next_attempt_ms: Option<u64>,
}

/// The schedule key of (`due_ms`, `seq`) in [`Col::Schedule`].
pub fn schedule_key(due_ms: u64, seq: u64) -> [u8; 16] {
    codec::schedule_key(due_ms, seq)
}

/// The claim stored under `key`, decoded (`None` when absent).
///
/// # Errors
/// A failed read. A claim that does not decode panics (broken invariant).
pub fn claim<S: ShardStore>(s: &S, key: &str) -> Result<Option<ClaimView>, S::Error> {
    Ok(read_claim(s, 0, key)?.map(|c| ClaimView {
        state: c.state,
        seq: c.seq,
        attempts: c.attempts,
        fingerprint: c.fingerprint,
        received_at_ms: c.received_at_ms,
        next_attempt_ms: c.next_attempt_ms,
    }))
}

/// Whether `key`'s claim (its delivered mark overlaid) is still the settled event `seq` —
/// delivered or dropped — that a retention entry was written for: a replayed or re-admitted
/// event has a new state or seq, and its claim is not the entry's to remove.
fn settled_claim<S: ShardStore>(s: &S, shard: usize, key: &str, seq: u64) -> Result<bool, String> {
    match read_claim(s, shard, key) {
        Ok(Some(c)) => {
            Ok(c.seq == seq && matches!(c.state, EventState::Delivered | EventState::Dropped))
        }
        Ok(None) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// The claim of `key` in shard `shard`'s store as it stands: the stored claim, settled by its
/// delivered mark when it may have one and has (`codec::delivered_mark_key`).
///
/// # Errors
/// A failed read. A claim or mark that does not decode panics (a broken invariant: never
/// overwrite it).
fn read_claim<S: ShardStore>(s: &S, shard: usize, key: &str) -> Result<Option<Claim>, S::Error> {
    let Some(mut claim) = read_stored_claim(s, shard, key)? else {
        return Ok(None);
    };
    if claim.may_be_marked_delivered() {
        let mark_key = codec::delivered_mark_key(claim.seq);
        if let Some(mark) = s.get(Col::Inbox, &mark_key, codec::decode_attempt)? {
            let mark = mark.unwrap_or_else(|e| {
                panic!("ledger shard {shard}: a delivered mark fails to decode ({e})")
            });
            claim.mark_delivered(&mark);
        }
    }
    Ok(Some(claim))
}

/// The claim of `key` as stored, without its delivered mark (enough for its fingerprint).
///
/// # Errors
/// A failed read. A claim that does not decode panics.
fn read_stored_claim<S: ShardStore>(
    s: &S,
    shard: usize,
    key: &str,
) -> Result<Option<Claim>, S::Error> {
    let Some(c) = s.get(Col::Claims, key.as_bytes(), codec::decode_claim)? else {
        return Ok(None);
    };
    match c {
        Ok(c) => Ok(Some(c)),
        Err(e) => panic!(
            "ledger shard {shard}: a stored claim fails to decode ({e}); refusing to overwrite it"
        ),
    }
}

/// Up to `limit` due events of shard `shard` in the store, as `Inbox::due` yields them from
/// the RocksDB ledger (`read.rs`): schedule entries due at or before `now_ms` in due order,
/// skipping `seq`s for which `skip` is true, each joined with its inbox record and claim.
///
/// # Errors
/// A failed read. A schedule entry without its inbox record or claim panics (broken invariant).
pub fn due<S: ShardStore>(
    s: &S,
    shard: usize,
    now_ms: u64,
    limit: usize,
    skip: &dyn Fn(u64) -> bool,
) -> Result<Vec<DueEvent>, S::Error> {
    let mut keys = Vec::new();
    let upper = codec::schedule_key(now_ms.saturating_add(1), 0);
    s.scan(Col::Schedule, &[], &upper, &mut |k, v| {
        if keys.len() >= limit {
            return ControlFlow::Break(());
        }
        let (due_ms, seq) = codec::parse_schedule_key(k).expect("schedule keys parse");
        if !skip(seq) {
            keys.push((due_ms, seq, codec::decode_schedule(v).expect("schedule values decode")));
        }
        ControlFlow::Continue(())
    })?;
    let mut out = Vec::with_capacity(keys.len());
    for (due_ms, seq, value) in keys {
        let r = s
            .get(Col::Inbox, &codec::seq_key(seq), codec::decode_inbox)?
            .expect("a schedule entry has its inbox record")
            .expect("inbox records decode");
        let c = claim(s, &r.key)?.expect("an inbox record has its claim");
        let value = value.expect("the simulator's schedule entries carry their value");
        assert_eq!(value.attempts, c.attempts, "schedule entry {seq} disagrees with its claim");
        // The simulator configures no `ordering_key` (R22 is covered by the ledger's and the
        // real binary's tests), so its events are unordered.
        out.push(DueEvent::from_record((shard, seq, due_ms), r, value.attempts, value.ordering));
    }
    Ok(out)
}

/// `d` in whole milliseconds, saturating (retention spans are configured, not unbounded).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
