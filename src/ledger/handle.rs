//! The ledger handle: opens the DB, starts one writer thread per shard, routes admissions,
//! settlements and rejected records to the writer that owns them, and stops the writers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use super::codec::{self, DecodeError};
use super::decide::{Rules, Spans};
use super::store::{self, Db};
use super::threads::Started;
use super::writer::{Queued, Queues, ShardCost, Shared, Writer};
use super::{Admission, OpRefused, Operation, RejectedRecord, Settlement};
use crate::limits::{SETTLE_QUEUE_MAX, SHARD_QUEUE_MAX};
use crate::metrics::Metrics;

/// Rejected records that may wait for one shard writer; more are dropped and counted
/// (best effort: a reject is already answered 400 and never blocks admissions).
pub const REJECT_QUEUE_MAX: usize = 1024;
/// Operator actions that may wait for one shard writer; more are refused (the admin API
/// answers 503 and the CLI, which sends one at a time, never gets there).
pub const OPERATION_QUEUE_MAX: usize = 256;

/// How to open the ledger.
pub struct LedgerOptions {
    /// RocksDB directory (created when missing).
    pub path: PathBuf,
    /// Write batches with `sync = true` (fsync before any reply, R14). Only tests and
    /// benchmarks turn it off.
    pub sync: bool,
    /// Shard count of a NEW ledger (`1..=SHARDS_MAX`); an existing ledger keeps its own.
    pub shards_if_new: usize,
    /// Configured source ids by source index: labels the per-source DLQ counters in `meta`.
    pub source_ids: Vec<String>,
    /// Notified after a commit that made something due (the dispatcher's wake-up).
    pub notify: Arc<tokio::sync::Notify>,
    /// Retention of payloads and identities (R25); `None` keeps everything forever.
    pub retention: Option<Retention>,
}

/// How long settled events keep their payload and identity (R25), and the clock retention is
/// judged by (the real one in `serve`; a controllable one in tests).
#[derive(Clone)]
pub struct Retention {
    /// `ledger.payload_retention`: a delivered or dropped event's body and attempt history are
    /// removed this long after it settled.
    pub payload: std::time::Duration,
    /// `ledger.dedupe_retention`: a delivered or dropped event's claim (its identity) is
    /// removed this long after it was admitted (up to a second later for a clean delivery,
    /// whose expiry entry its group commit shares); a copy arriving later is admitted anew.
    pub dedupe: std::time::Duration,
    /// Unix ms now.
    pub now_ms: Arc<dyn Fn() -> u64 + Send + Sync>,
}

/// Ledger failures: opening, storage errors, corrupt records. Operating errors, returned to
/// the caller; broken invariants inside a writer panic instead (STYLE "Errors").
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// RocksDB could not open or create the DB.
    #[error("cannot open the ledger at {path}: {source}")]
    Open {
        /// The directory.
        path: PathBuf,
        /// RocksDB's reason.
        source: rocksdb::Error,
    },
    /// The path is not a ledger directory and must not become one: a file, or a directory
    /// holding files no ledger has (a mistyped `ledger.path` would otherwise start an empty
    /// ledger among them, and admit again what the real one already holds).
    #[error("cannot open the ledger at {path}: {reason}")]
    NotALedger {
        /// The path.
        path: PathBuf,
        /// What is there instead.
        reason: String,
    },
    /// A read or write failed.
    #[error("ledger storage error: {0}")]
    Storage(#[from] rocksdb::Error),
    /// A stored record does not decode.
    #[error("corrupt ledger record in {cf}: {reason}")]
    Corrupt {
        /// Column family.
        cf: String,
        /// What is wrong.
        reason: DecodeError,
    },
    /// A shard count outside `1..=max`.
    #[error("invalid ledger shard count {shards}: must be 1..={max}")]
    Shards {
        /// The count.
        shards: usize,
        /// `SHARDS_MAX`.
        max: usize,
    },
    /// A writer thread could not be started.
    #[error("cannot start a ledger shard writer: {0}")]
    Spawn(std::io::Error),
    /// A statement of the PostgreSQL ledger failed (unreachable, refused): the driver's
    /// error with its causes.
    #[error("ledger database error: {0}")]
    Database(String),
    /// A list cursor that this ledger did not hand out (or for another list).
    #[error("invalid cursor: {0}")]
    Cursor(&'static str),
}

/// The ends of one shard's queues kept by the handle.
struct ShardQueues {
    admit: Sender<Queued<Admission>>,
    settle: Sender<Queued<Settlement>>,
    reject: Sender<RejectedRecord>,
    operate: Sender<Queued<Operation>>,
    sweep: Sender<Sender<usize>>,
}

/// What every clone of a [`Ledger`] shares; dropping it shuts the writers down.
pub(super) struct Inner {
    /// The DB (readers use it directly; only writers write).
    pub(super) db: Arc<Db>,
    /// Persisted shard count.
    pub(super) shards: usize,
    queues: Vec<ShardQueues>,
    stop: Mutex<Vec<Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stopped: AtomicBool,
    shared: Arc<Shared>,
}

/// The durable record of every idempotency key (R10–R16) and the inbox of admitted events.
/// Cheap to clone (an `Arc`); `Send + Sync`. Dropping the last clone shuts the writers down.
#[derive(Clone)]
pub struct Ledger {
    pub(super) inner: Arc<Inner>,
}

impl Ledger {
    /// Opens (or creates) the ledger at `opts.path`, recovers next seqs, DLQ counters and the
    /// `inbox_pending` / `dlq_depth` gauges (into `metrics.ledger`), and starts one writer
    /// thread `ledger-shard-{s}` per shard.
    ///
    /// # Errors
    /// [`Error::Open`], [`Error::Shards`], [`Error::Corrupt`] or [`Error::Storage`] while
    /// recovering, [`Error::Spawn`] when a thread cannot start (the writers started before it
    /// are then stopped and joined: nothing of the failed open keeps running).
    pub fn open(opts: LedgerOptions, metrics: Arc<Metrics>) -> Result<Ledger, Error> {
        Ledger::open_gated(opts, metrics, None)
    }

    /// [`Ledger::open`] whose writers wait, before their first drain, until `gate`
    /// disconnects (test seam for a deterministic full queue).
    pub(super) fn open_gated(
        opts: LedgerOptions,
        metrics: Arc<Metrics>,
        gate: Option<Receiver<()>>,
    ) -> Result<Ledger, Error> {
        let (db, shards) = store::open(&opts.path, opts.shards_if_new)?;
        let db = Arc::new(db);
        let shared = Arc::new(Shared {
            healthy: AtomicBool::new(true),
            writer_died: AtomicBool::new(false),
            metrics,
            notify: opts.notify,
            rules: Arc::new(Rules {
                source_ids: opts.source_ids,
                retention: opts.retention.as_ref().map(|r| Spans {
                    payload: r.payload,
                    dedupe: r.dedupe,
                    sweep_batch: super::decide::SWEEP_BATCH_MAX,
                }),
                audit_seq: AtomicU64::new(0),
                order_stamp: AtomicU64::new(store::load_max_order_stamp(&db)?),
                recent_claims: super::decide::RECENT_CLAIMS_MAX / shards.max(1),
            }),
            rejects_dropped: AtomicU64::new(0),
            sync: opts.sync,
            costs: (0..shards).map(|_| ShardCost::default()).collect(),
            retention: opts.retention,
        });
        let mut writers = Vec::with_capacity(shards);
        let mut pending = vec![0i64; shared.rules.source_ids.len()];
        let mut dead = vec![0i64; shared.rules.source_ids.len()];
        for s in 0..shards {
            let next_seq = store::load_next_seq(&db, s)?;
            let dlq = store::load_dlq(&db, s, &shared.rules.source_ids)?;
            add_counts(&mut dead, dlq.iter().map(|(&k, &v)| (k, i64::try_from(v).unwrap_or(0))));
            add_counts(&mut pending, store::count_pending(&db, s)?);
            writers.push(Writer::new(s, Arc::clone(&db), Arc::clone(&shared), next_seq, dlq));
        }
        set_gauges(&shared.metrics, &pending, &dead);
        Ledger::start(db, shards, shared, writers, gate)
    }

    fn start(
        db: Arc<Db>,
        shards: usize,
        shared: Arc<Shared>,
        writers: Vec<Writer>,
        gate: Option<Receiver<()>>,
    ) -> Result<Ledger, Error> {
        let (mut queues, mut started) = (Vec::new(), Started::default());
        for (s, writer) in writers.into_iter().enumerate() {
            let (admit_tx, admit) = bounded(SHARD_QUEUE_MAX);
            let (settle_tx, settle) = bounded(SETTLE_QUEUE_MAX);
            let (reject_tx, reject) = bounded(REJECT_QUEUE_MAX);
            let (operate_tx, operate) = bounded(OPERATION_QUEUE_MAX);
            let (sweep_tx, sweep) = bounded(1);
            let (stop_tx, stop_rx) = bounded(1);
            let q =
                Queues { admit, settle, reject, operate, sweep, stop: stop_rx, gate: gate.clone() };
            started
                .spawn(format!("ledger-shard-{s}"), stop_tx, move || writer.run(q))
                .map_err(Error::Spawn)?;
            queues.push(ShardQueues {
                admit: admit_tx,
                settle: settle_tx,
                reject: reject_tx,
                operate: operate_tx,
                sweep: sweep_tx,
            });
        }
        let inner = Inner {
            db,
            shards,
            queues,
            stop: Mutex::new(started.stops),
            threads: Mutex::new(started.threads),
            stopped: AtomicBool::new(false),
            shared,
        };
        Ok(Ledger { inner: Arc::new(inner) })
    }

    /// Number of shards (persisted at creation; fixed for the life of the ledger).
    pub fn shards(&self) -> usize {
        self.inner.shards
    }

    /// The shard that owns `key`: FNV-1a 64 of the key's bytes, modulo [`Ledger::shards`].
    /// Stable forever (a persisted ledger relies on it: changing it would admit keys twice).
    pub fn shard_of(&self, key: &str) -> usize {
        (codec::fnv1a64(key.as_bytes()) % self.inner.shards as u64) as usize
    }

    /// Queues `a` for its shard's writer without blocking; the writer calls `a.reply` exactly
    /// once, after the commit (R14).
    ///
    /// # Errors
    /// Gives `a` back, its reply NOT called, when the shard's queue (`SHARD_QUEUE_MAX`) is full
    /// or the ledger is shut down: the caller answers 503 `overloaded`.
    #[allow(clippy::result_large_err, reason = "the refused admission goes back by value")]
    pub fn admit(&self, a: Admission) -> Result<(), Admission> {
        if self.inner.stopped.load(Ordering::SeqCst) {
            return Err(a);
        }
        let shard = self.shard_of(&a.key);
        self.inner.queues[shard].admit.try_send(Queued::new(a)).map_err(|e| e.into_inner().take())
    }

    /// How long an admission of `key` handed over now would wait for its commit, estimated
    /// from the shard's queue and its recent turns: the commits needed to drain what is queued
    /// ahead (`COMMIT_BATCH_MAX` per commit) plus its own, each at the recent commit time, plus
    /// the recent per-item cost of everything ahead. Zero before the shard's first commit.
    /// Read by ingress for deadline-aware admission (R17).
    pub fn admission_wait(&self, key: &str) -> std::time::Duration {
        let shard = self.shard_of(key);
        let ahead = self.inner.queues[shard].admit.len();
        let cost = &self.inner.shared.costs[shard];
        estimate_wait(
            ahead,
            crate::limits::COMMIT_BATCH_MAX,
            cost.commit_ns.load(Ordering::Relaxed),
            cost.item_ns.load(Ordering::Relaxed),
        )
    }

    /// The shard's recent time for one commit (the wait of an admission with nothing queued
    /// ahead, [`Ledger::admission_wait`] with an empty queue). Ingress subtracts two of these
    /// from an admission's sojourn before sojourn shedding: shedding cannot shorten a commit.
    pub fn commit_time(&self, key: &str) -> std::time::Duration {
        let cost = &self.inner.shared.costs[self.shard_of(key)];
        estimate_wait(
            0,
            crate::limits::COMMIT_BATCH_MAX,
            cost.commit_ns.load(Ordering::Relaxed),
            cost.item_ns.load(Ordering::Relaxed),
        )
    }

    /// Tells the ledger that an admission of `key` was shed on [`Ledger::admission_wait`]'s
    /// word: the shard's learned costs decay by 1/8. Only admitted events teach the estimate,
    /// so without this a shard whose estimate went high (a disk stall) would shed every later
    /// delivery forever; with it, a few sheds let one through to measure the disk again. Under
    /// a lasting stall one delivery in k + 1 is admitted as that probe, k = ln(estimate /
    /// budget) / ln(8/7): about 5 when the estimate is twice the budget, 17 at ten times.
    pub fn shed(&self, key: &str) {
        self.inner.shared.costs[self.shard_of(key)].decay();
    }

    /// Records a refused body, minimised (R23), best effort: no fsync is awaited and the record
    /// is dropped (and counted, see [`Ledger::rejects_dropped`]) when the queue is full.
    pub fn reject(&self, r: RejectedRecord) {
        let shard = usize::from(r.fingerprint[0]) % self.inner.shards;
        if self.inner.stopped.load(Ordering::SeqCst)
            || self.inner.queues[shard].reject.try_send(r).is_err()
        {
            self.inner.shared.rejects_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Rejected records dropped because their queue was full or the ledger stopped.
    pub fn rejects_dropped(&self) -> u64 {
        self.inner.shared.rejects_dropped.load(Ordering::Relaxed)
    }

    /// False after a failed write until a later write succeeds, after a writer died on a
    /// broken invariant, and after shutdown (the `/health` answer; R15).
    pub fn healthy(&self) -> bool {
        let shared = &self.inner.shared;
        shared.healthy.load(Ordering::SeqCst)
            && !shared.writer_died.load(Ordering::SeqCst)
            && !self.inner.stopped.load(Ordering::SeqCst)
    }

    /// Hands `settlement` to its shard writer (the `Inbox::settle` implementation).
    pub(super) fn queue_settlement(&self, settlement: Settlement) -> Result<(), Settlement> {
        let Some(q) = self.inner.queues.get(settlement.shard) else {
            return Err(settlement);
        };
        if self.inner.stopped.load(Ordering::SeqCst) {
            return Err(settlement);
        }
        q.settle.try_send(Queued::new(settlement)).map_err(|e| e.into_inner().take())
    }

    /// Hands an operator action to the writer that owns `op.key`; the writer calls `op.reply`
    /// exactly once, after the commit that holds the new claim and its audit record (R20).
    /// When the queue (`OPERATION_QUEUE_MAX`) is full or the ledger is shut down, `op.reply`
    /// is called at once with [`OpRefused::Unavailable`].
    pub fn operate(&self, op: Operation) {
        let shard = self.shard_of(&op.key);
        if self.inner.stopped.load(Ordering::SeqCst) {
            (op.reply)(Err(OpRefused::Unavailable));
            return;
        }
        if let Err(e) = self.inner.queues[shard].operate.try_send(Queued::new(op)) {
            // Dropping the refused item answers it `Unavailable` (`FailClosed`).
            drop(e.into_inner());
        }
    }

    /// Makes every shard writer remove what retention has expired by now (R25) and waits for
    /// them; returns how many records were removed. Writers also do this by themselves every
    /// `sweep_every` (at most 10 s); this is for tests and operators who cannot wait.
    pub fn sweep_expired(&self) -> usize {
        let mut removed = 0;
        for q in &self.inner.queues {
            let (tx, rx) = bounded(1);
            if q.sweep.send(tx).is_ok() {
                removed += rx.recv().unwrap_or(0);
            }
        }
        removed
    }

    /// Appends an operator action that concerns no event (pause, resume) to the audit log
    /// with a synced write (R20). The `audit` column family is global and append-only: its
    /// keys (`at_ms ‖ sequence`) are unique, so no shard writer owns them.
    ///
    /// # Errors
    /// [`Error::Storage`] when the write fails.
    pub fn append_audit(&self, record: &super::AuditRecord) -> Result<(), Error> {
        let db = &self.inner.db;
        let key = codec::audit_key(record.at_ms, self.inner.shared.next_audit_seq());
        let mut batch = rocksdb::WriteBatch::default();
        batch.put_cf(store::cf(db, store::CF_AUDIT), key, codec::encode_audit(record));
        let mut opts = rocksdb::WriteOptions::default();
        opts.set_sync(self.inner.shared.sync);
        db.write_opt(batch, &opts)?;
        Ok(())
    }

    /// Stops accepting, lets each writer finish its current drain, and joins the writer
    /// threads. Items still queued are answered `Unavailable` / `false`. Idempotent.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

/// The wait estimate of [`Ledger::admission_wait`]: `ahead` queued admissions, decided at most
/// `batch_max` per commit (the backend's limit), recent commit time and per-item cost in ns.
pub(super) fn estimate_wait(
    ahead: usize,
    batch_max: usize,
    commit_ns: u64,
    item_ns: u64,
) -> std::time::Duration {
    let ahead = u64::try_from(ahead).unwrap_or(u64::MAX);
    let batch = u64::try_from(batch_max.max(1)).unwrap_or(u64::MAX);
    let commits = ahead / batch + 1;
    let ns = commits.saturating_mul(commit_ns).saturating_add(ahead.saturating_mul(item_ns));
    std::time::Duration::from_nanos(ns)
}

impl Inner {
    fn shutdown(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop.lock().expect("stop list lock is never poisoned").clear();
        let threads =
            std::mem::take(&mut *self.threads.lock().expect("thread list lock is never poisoned"));
        let me = std::thread::current().id();
        for t in threads {
            // A reply that drops the last handle runs on a writer thread: never join oneself.
            if t.thread().id() == me {
                continue;
            }
            if t.join().is_err() {
                tracing::error!(
                    code = "ledger_writer_panicked",
                    "A ledger shard writer ended by panicking."
                );
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn add_counts(into: &mut [i64], counts: impl IntoIterator<Item = (u32, i64)>) {
    for (source, n) in counts {
        if let Some(slot) = into.get_mut(source as usize) {
            *slot += n;
        }
    }
}

fn set_gauges(metrics: &Metrics, pending: &[i64], dead: &[i64]) {
    for (gauge, &n) in metrics.ledger.inbox_pending.iter().zip(pending) {
        gauge.store(n, Ordering::Relaxed);
    }
    for (gauge, &n) in metrics.ledger.dlq_depth.iter().zip(dead) {
        gauge.store(n, Ordering::Relaxed);
    }
}
