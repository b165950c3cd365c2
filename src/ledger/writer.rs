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

use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use rocksdb::perf::{self, PerfContext, PerfMetric, PerfStatsLevel};
use rocksdb::{WriteBatch, WriteOptions};

use super::decide::{self, Col, Drain, Input, Rules, ShardStore, Visit};
use super::store::{self, Db, CF_AUDIT, CF_META, CF_QUARANTINE, CF_REJECTED};
use super::{Admission, Decision, OpRefused, Operation, RejectedRecord, Settlement};
use crate::clock;
use crate::limits::COMMIT_BATCH_MAX;
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
    /// What every shard's decisions share: source ids, retention spans, the audit sequence.
    pub rules: Arc<Rules>,
    /// Rejected records dropped because the reject queue was full.
    pub rejects_dropped: AtomicU64,
    /// Whether batches are written with `sync = true`.
    pub sync: bool,
    /// Per shard: what its recent turns cost, for the admission-wait estimate.
    pub costs: Box<[ShardCost]>,
    /// Payload and identity retention (R25); `None` keeps everything.
    pub retention: Option<super::Retention>,
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

impl Shared {
    /// A fresh audit-key sequence number.
    pub fn next_audit_seq(&self) -> u64 {
        self.rules.next_audit_seq()
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

/// One shard's slice of the RocksDB ledger, as the decisions ([`decide::ShardStore`]) see it:
/// reads of the live database, writes into one `WriteBatch`.
pub(super) struct RocksShard {
    db: Arc<Db>,
    cf_claims: String,
    cf_inbox: String,
    cf_schedule: String,
}

impl RocksShard {
    /// Shard `shard` of `db`.
    pub fn new(db: Arc<Db>, shard: usize) -> RocksShard {
        RocksShard {
            db,
            cf_claims: store::cf_claims(shard),
            cf_inbox: store::cf_inbox(shard),
            cf_schedule: store::cf_schedule(shard),
        }
    }

    fn cf(&self, col: Col) -> &rocksdb::ColumnFamily {
        let name = match col {
            Col::Claims => &self.cf_claims,
            Col::Inbox => &self.cf_inbox,
            Col::Schedule => &self.cf_schedule,
            Col::Meta => CF_META,
            Col::Audit => CF_AUDIT,
            Col::Quarantine => CF_QUARANTINE,
            Col::Rejected => CF_REJECTED,
        };
        store::cf(&self.db, name)
    }
}

impl ShardStore for RocksShard {
    type Error = rocksdb::Error;
    type Batch = WriteBatch;

    fn get<R>(
        &self,
        col: Col,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, rocksdb::Error> {
        Ok(self.db.get_pinned_cf(self.cf(col), key)?.map(|v| f(&v)))
    }

    fn scan(
        &self,
        col: Col,
        lower: &[u8],
        upper: &[u8],
        each: &mut Visit<'_>,
    ) -> Result<(), rocksdb::Error> {
        let mut opts = rocksdb::ReadOptions::default();
        opts.set_iterate_lower_bound(lower.to_vec());
        opts.set_iterate_upper_bound(upper.to_vec());
        for entry in self.db.iterator_cf_opt(self.cf(col), opts, rocksdb::IteratorMode::Start) {
            let (k, v) = entry?;
            if each(&k, &v).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn put(&self, batch: &mut WriteBatch, col: Col, key: &[u8], value: &[u8]) {
        batch.put_cf(self.cf(col), key, value);
    }

    fn delete(&self, batch: &mut WriteBatch, col: Col, key: &[u8]) {
        batch.delete_cf(self.cf(col), key);
    }

    fn delete_range(&self, batch: &mut WriteBatch, col: Col, from: &[u8], to: &[u8]) {
        batch.delete_range_cf(self.cf(col), from, to);
    }

    fn is_empty(&self, batch: &WriteBatch) -> bool {
        batch.is_empty()
    }
}

/// One shard's writer: the decisions ([`decide::Shard`]) over its RocksDB slice.
pub(super) struct Writer {
    shard: usize,
    store: RocksShard,
    shared: Arc<Shared>,
    logic: decide::Shard,
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
        let logic = decide::Shard::new(shard, next_seq, dlq, Arc::clone(&shared.rules));
        Writer { shard, store: RocksShard::new(db, shard), shared, logic }
    }

    /// The thread body: drain, decide, commit, reply, until `stop` disconnects. Items left in
    /// the queues are then dropped, which answers them `Unavailable` / `false`.
    pub fn run(mut self, q: Queues) {
        let _guard = DeathGuard(Arc::clone(&self.shared));
        if let Some(gate) = &q.gate {
            let _ = gate.recv();
        }
        // RocksDB's perf context is per thread: made here, on the writer's own thread.
        let mut commits = CommitClock::new();
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
            self.process(items, &mut commits);
            let timer = every.is_some_and(|e| clock::monotonic().duration_since(swept_at) >= e);
            if sweeps && (self.logic.expiry_backlog() || timer) {
                self.sweep();
                swept_at = clock::monotonic();
            }
        }
        while q.admit.try_recv().is_ok()
            || q.settle.try_recv().is_ok()
            || q.operate.try_recv().is_ok()
        {}
    }

    fn process(&mut self, items: Vec<Item>, commits: &mut CommitClock) {
        let started = clock::monotonic();
        let count = items.len();
        let mut d = self.logic.begin(clock::now_unix_ms());
        for item in items {
            let input = match item {
                Item::Admit(a) => Input::Admit(a.take()),
                Item::Settle(s) => Input::Settle(s.take()),
                Item::Reject(r) => Input::Reject(r),
                Item::Operate(o) => Input::Operate(o.take()),
                Item::Sweep(_) => unreachable!("sweeps run in their own drain"),
            };
            self.logic.decide(&self.store, &mut d, input);
        }
        // Only synced writes teach the estimate: admissions wait for those.
        let synced = d.needs_sync();
        let mut commit_ns = 0;
        let written = match self.logic.seal(&self.store, &mut d) {
            None => true,
            Some(batch) => {
                let (ok, took) = self.commit(batch, synced, d.items(), commits);
                commit_ns = nanos(took);
                ok
            }
        };
        if written {
            self.logic.applied(&mut d);
            self.apply(&d);
        }
        // Learned before the replies go out: a sender answered now meets the new estimate.
        if synced && commit_ns > 0 {
            let rest_ns =
                nanos(clock::monotonic().duration_since(started)).saturating_sub(commit_ns);
            let per_item = rest_ns / u64::try_from(count.max(1)).unwrap_or(1);
            self.shared.costs[self.shard].learn(commit_ns, per_item);
        }
        let scheduled = written && d.scheduled;
        // One wake-up per ingress core for the whole commit (see `crate::wake`).
        crate::wake::batched(|| d.answer(written));
        // The dispatcher last: woken earlier, it preempts this thread on a shared core and
        // the acknowledgments wait for its due scan.
        if scheduled {
            self.shared.notify.notify_one();
        }
    }

    /// Removes what retention expired by now (see [`decide::Shard::sweep`]). Returns how many
    /// events' records were removed. A failed write leaves the entries for the next sweep.
    fn sweep(&mut self) -> usize {
        let Some(r) = &self.shared.retention else {
            return 0;
        };
        let now = (r.now_ms)();
        let Some(decide::Sweep { batch, removed, through }) = self.logic.sweep(&self.store, now)
        else {
            return 0;
        };
        match self.store.db.write(batch) {
            Ok(()) => {
                self.logic.swept(through);
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

    /// Writes a drain's batch (synced when it holds admissions, quarantines or operator
    /// actions). Returns whether it was written and how long the write took; records commit
    /// figures and health.
    fn commit(
        &self,
        batch: WriteBatch,
        acked: bool,
        items: usize,
        commits: &mut CommitClock,
    ) -> (bool, Duration) {
        let mut opts = WriteOptions::default();
        let synced = self.shared.sync && acked;
        opts.set_sync(synced);
        let (result, took) = commits.write(&self.store.db, batch, &opts);
        if took >= COMMIT_SLOW {
            commits.slow(self.shard, took, items, synced, clock::monotonic());
        }
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let ok = match result {
            Ok(()) => {
                self.record(micros, items);
                self.shared.healthy.store(true, Ordering::SeqCst);
                true
            }
            Err(e) => {
                self.shared.healthy.store(false, Ordering::SeqCst);
                commits.failed(self.shard, &e, items, clock::monotonic());
                false
            }
        };
        (ok, took)
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

    /// After a successful write: move the gauges (the dispatcher is woken after the replies).
    fn apply<B>(&self, d: &Drain<B>) {
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
    }
}

/// A group commit that takes at least this long is logged (`ledger_commit_slow`) with RocksDB's
/// account of where the time went. A synced commit takes 0.1–1 ms on the project's dev VM
/// (docs/benchmarks.md, (c)); one of 20 ms has alone spent four times issue 6's 5 ms p99
/// acknowledgment budget for every admission in it, and a run of them is how a stalling disk
/// or a RocksDB write stall shows before deadlines are missed.
pub(super) const COMMIT_SLOW: Duration = Duration::from_millis(20);

/// At most one `ledger_commit_slow` line per shard writer per this interval (a failing disk
/// makes every commit slow); each line counts the slow commits not logged since the last.
pub(super) const COMMIT_SLOW_LOG_EVERY: Duration = Duration::from_secs(1);

/// Times a shard writer's batch writes and explains the slow ones, from RocksDB's per-thread
/// perf context. Time counters are switched on only around each write (a few clock reads per
/// commit) and back to RocksDB's default (counts only) after, so the claim reads of `decide`
/// are not timed. Made on the thread that writes: the perf context is that thread's.
pub(super) struct CommitClock {
    ctx: PerfContext,
    /// `ledger_commit_slow` lines.
    slow_log: LogEvery,
    /// `ledger_write_failed` lines: a failed WAL write fails every later one until the ledger
    /// is reopened (the process exits after `server::LEDGER_UNWRITABLE_MAX`), one per drain, and a
    /// line each was one per request at any request rate (review: 42 lines for 31 requests).
    failed_log: LogEvery,
}

/// At most one log line per [`COMMIT_SLOW_LOG_EVERY`] for a condition a failing disk repeats
/// at the commit rate; the occurrences held back are counted into the next line.
#[derive(Debug, Default)]
struct LogEvery {
    /// When the last line was written.
    logged_at: Option<Instant>,
    /// Occurrences since then that were not logged.
    unlogged: u64,
}

impl LogEvery {
    /// `Some(occurrences held back since the last line)` when a line is due at `now` (and it
    /// then counts as written); else `None`, and this occurrence is counted.
    fn due(&mut self, now: Instant) -> Option<u64> {
        if self.logged_at.is_some_and(|at| now.duration_since(at) < COMMIT_SLOW_LOG_EVERY) {
            self.unlogged += 1;
            return None;
        }
        self.logged_at = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// Where one write's time went, in ns, from RocksDB's perf context (`rocksdb::PerfContext`:
/// `write_wal_time`, `write_delay_time`, `write_memtable_time`). The level set around the write
/// (`PerfStatsLevel::EnableTime` of the `rocksdb` crate, which RocksDB 11 reads as "time except
/// for mutexes") does not time the DB mutex; its waits are in `other_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WriteBreakdown {
    /// Appending the batch to the WAL, and the `fdatasync` of a synced write (R14): the disk.
    pub wal_ns: u64,
    /// Held by RocksDB's write controller — a write stall or slowdown because flushes or
    /// compactions are behind (too many memtables or level-0 files).
    pub stall_ns: u64,
    /// Inserting into the memtables.
    pub memtable_ns: u64,
    /// The rest: switching memtables and WAL files, scheduling flushes, waiting for RocksDB's
    /// DB mutex, time this thread was runnable but not running (a busy core) — and, with
    /// several shards, waiting while another shard's writer leads the write group (RocksDB
    /// then writes and syncs the WAL, or waits out a stall, on that writer's thread).
    pub other_ns: u64,
}

impl CommitClock {
    pub(super) fn new() -> CommitClock {
        CommitClock {
            ctx: PerfContext::default(),
            slow_log: LogEvery::default(),
            failed_log: LogEvery::default(),
        }
    }

    /// Writes `batch` with `opts`, timed. Returns RocksDB's result and the wall time it took.
    pub(super) fn write(
        &mut self,
        db: &Db,
        batch: WriteBatch,
        opts: &WriteOptions,
    ) -> (Result<(), rocksdb::Error>, Duration) {
        perf::set_perf_stats(PerfStatsLevel::EnableTime);
        self.ctx.reset();
        let started = clock::monotonic();
        let result = db.write_opt(batch, opts);
        let took = clock::monotonic().duration_since(started);
        perf::set_perf_stats(PerfStatsLevel::EnableCount);
        (result, took)
    }

    /// The breakdown of the last [`CommitClock::write`], which took `took`.
    pub(super) fn breakdown(&self, took: Duration) -> WriteBreakdown {
        let wal_ns = self.ctx.metric(PerfMetric::WriteWalTime);
        let stall_ns = self.ctx.metric(PerfMetric::WriteDelayTime);
        let memtable_ns = self.ctx.metric(PerfMetric::WriteMemtableTime);
        let known = wal_ns.saturating_add(stall_ns).saturating_add(memtable_ns);
        WriteBreakdown {
            wal_ns,
            stall_ns,
            memtable_ns,
            other_ns: nanos(took).saturating_sub(known),
        }
    }

    /// Reports the last write, which took `took` (at least [`COMMIT_SLOW`]), as a
    /// `ledger_commit_slow` warning — unless one was logged less than
    /// [`COMMIT_SLOW_LOG_EVERY`] before `now`, in which case it is counted for the next line.
    /// Returns whether it logged.
    pub(super) fn slow(
        &mut self,
        shard: usize,
        took: Duration,
        items: usize,
        synced: bool,
        now: Instant,
    ) -> bool {
        let Some(unlogged) = self.slow_log.due(now) else {
            return false;
        };
        let b = self.breakdown(took);
        let ms = |ns: u64| (ns / 10_000) as f64 / 100.0;
        tracing::warn!(
            code = "ledger_commit_slow",
            shard,
            took_ms = ms(nanos(took)),
            items,
            synced,
            wal_ms = ms(b.wal_ns),
            stall_ms = ms(b.stall_ns),
            memtable_ms = ms(b.memtable_ns),
            other_ms = ms(b.other_ns),
            unlogged,
            "A ledger group commit was slow; every admission in it waited for it (wal: the disk's write and fdatasync; stall: RocksDB holding writes while flushes or compactions catch up)."
        );
        true
    }

    /// Reports a failed write of `items` as a `ledger_write_failed` error — at most one line
    /// per [`COMMIT_SLOW_LOG_EVERY`], each counting the failures held back since the last.
    /// Returns whether it logged.
    pub(super) fn failed(
        &mut self,
        shard: usize,
        error: &rocksdb::Error,
        items: usize,
        now: Instant,
    ) -> bool {
        let Some(unlogged) = self.failed_log.due(now) else {
            return false;
        };
        tracing::error!(code = "ledger_write_failed", shard, error = %error, items, unlogged, "The ledger could not write a batch; its admissions are answered unavailable (logged at most once a second; unlogged: failures since the last line).");
        true
    }
}

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

#[cfg(test)]
mod tests {
    //! The slow-commit report: RocksDB's breakdown of a real synced write, and its rate limit.

    use super::*;

    fn synced_write(dir: &std::path::Path) -> (CommitClock, Duration) {
        let (db, _) = store::open(dir, 1).expect("open ledger");
        let mut batch = WriteBatch::default();
        let meta = db.cf_handle(CF_META).expect("meta column family");
        batch.put_cf(&meta, b"k", vec![7u8; 64 << 10]);
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        let mut clock = CommitClock::new();
        let (result, took) = clock.write(&db, batch, &opts);
        result.expect("synced write");
        (clock, took)
    }

    /// A synced write's time is found where RocksDB spent it: in the WAL (append and
    /// fdatasync) and the memtable, with the parts adding up to no more than the wall time.
    #[test]
    fn a_synced_write_is_broken_down_into_wal_and_memtable_time() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (clock, took) = synced_write(dir.path());
        let b = clock.breakdown(took);
        assert!(b.wal_ns > 0, "no WAL time for a synced write: {b:?}");
        assert!(b.memtable_ns > 0, "no memtable time: {b:?}");
        let parts = b.wal_ns + b.stall_ns + b.memtable_ns + b.other_ns;
        assert_eq!(parts, nanos(took), "the parts add up to the wall time: {b:?}");
        assert_eq!(b.stall_ns, 0, "no write stall on an empty ledger: {b:?}");
    }

    /// One line per `COMMIT_SLOW_LOG_EVERY` at most; the commits held back are counted into
    /// the next line.
    #[test]
    fn slow_commits_are_logged_at_most_once_per_interval_and_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut clock, took) = synced_write(dir.path());
        let t0 = clock::monotonic();
        assert!(clock.slow(0, took, 3, true, t0), "the first slow commit is logged");
        assert!(!clock.slow(0, took, 3, true, t0 + COMMIT_SLOW_LOG_EVERY / 2));
        assert!(!clock.slow(0, took, 3, true, t0 + COMMIT_SLOW_LOG_EVERY / 2));
        assert_eq!(clock.slow_log.unlogged, 2);
        assert!(
            clock.slow(0, took, 3, true, t0 + COMMIT_SLOW_LOG_EVERY),
            "logged again after the interval"
        );
        assert_eq!(clock.slow_log.unlogged, 0, "the line carried the count");
    }

    /// A failing ledger fails every drain: one `ledger_write_failed` line per
    /// `COMMIT_SLOW_LOG_EVERY` at most, not one per drain (one per request under load), each
    /// counting the failures held back; slow commits keep their own interval.
    #[test]
    fn failed_writes_are_logged_at_most_once_per_interval_and_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut clock, took) = synced_write(dir.path());
        let missing = dir.path().join("missing");
        let Err(error) = rocksdb::DB::open(&rocksdb::Options::default(), missing) else {
            panic!("a DB where there is none");
        };
        let t0 = clock::monotonic();
        assert!(clock.failed(0, &error, 5, t0), "the first failure is logged");
        for _ in 0..1000 {
            assert!(!clock.failed(0, &error, 5, t0 + COMMIT_SLOW_LOG_EVERY / 2));
        }
        assert_eq!(clock.failed_log.unlogged, 1000);
        assert!(clock.slow(0, took, 3, true, t0), "a slow commit is not held back by failures");
        assert!(clock.failed(0, &error, 5, t0 + COMMIT_SLOW_LOG_EVERY), "logged again");
        assert_eq!(clock.failed_log.unlogged, 0, "the line carried the count");
    }
}
