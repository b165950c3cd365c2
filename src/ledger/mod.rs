//! The ledger: the durable record of every idempotency key, and the inbox of admitted events.
//! The only importer of `rocksdb` and `postgres` (ARCHITECTURE invariant). `postgres/` is the
//! shared PostgreSQL backend (several nodes); [`LedgerHandle`] picks one of the two.
//!
//! One RocksDB, one WAL; per shard `s` the column families `claims/s`, `inbox/s`, `schedule/s`;
//! global `rejected`, `quarantine`, `audit`, `meta`. Each shard has exactly one writer thread
//! that owns its keys (invariant 3): it drains its bounded queue, decides every claim of the
//! drain (two copies of one key in the same drain included), writes one `WriteBatch` with
//! `sync = true` (group commit), and only then replies. Nothing is acknowledged before that
//! write returned (invariant 1, R14). What the writer decides is sans-IO code (`decide.rs`),
//! shared with the deterministic simulator (`tests/sim`).

mod any;
mod codec;
pub mod decide;
mod handle;
pub mod postgres;
mod read;
mod store;
mod threads;
mod writer;

pub use any::LedgerHandle;
pub use codec::{AttemptRecord, AuditRecord, DecodeError, EventState, OrderPlace};
pub use decide::scope_of as ordering_scope;
pub use handle::{Error, Ledger, LedgerOptions, Retention, OPERATION_QUEUE_MAX, REJECT_QUEUE_MAX};
pub use read::{
    EventDetail, EventQuery, EventView, Page, QuarantineView, RejectedView, ATTEMPT_HISTORY_MAX,
    LIST_SCAN_MAX,
};
pub use store::{path_problem, ROCKSDB_THREADS};

/// An operator action on one event (R20), carried out by the shard writer that owns the key
/// (invariant 3), committed with fsync together with its audit record, then answered.
pub struct Operation {
    /// Idempotency key of the event.
    pub key: String,
    /// What to do.
    pub action: OpAction,
    /// Who asks: a token id (never the token itself).
    pub actor: String,
    /// The operator's reason (required for drops by the admin API).
    pub reason: Option<String>,
    /// Called exactly once on the writer thread, after the commit (or its failure).
    pub reply: Box<dyn FnOnce(Result<OpDone, OpRefused>) + Send>,
}

/// An operator action on one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpAction {
    /// Reset attempts to 0 and schedule the event now: allowed from `dead`, `dropped` and
    /// `failed` (R20). The state goes back to `received`.
    Replay,
    /// Settle the event as `dropped`: allowed from `received`, `failed` and `dead` (R20).
    Drop,
}

impl OpAction {
    /// The action's name in the audit log.
    pub fn code(self) -> &'static str {
        match self {
            OpAction::Replay => "replay",
            OpAction::Drop => "drop",
        }
    }
}

/// A carried-out [`Operation`]: the event's state before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpDone {
    /// State before the action.
    pub before: EventState,
    /// State after it.
    pub after: EventState,
}

/// Why an [`Operation`] was not carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpRefused {
    /// No claim for the key (never admitted, or its identity expired: R25).
    NotFound,
    /// The action is not allowed from this state (e.g. replaying a delivered event).
    State(EventState),
    /// The event's payload is no longer retained, so it cannot be replayed.
    PayloadGone,
    /// The ledger could not read or durably write (fail closed), or it is shut down.
    Unavailable,
}

/// What an admission becomes once the shard writer has decided and (for `Accepted`) committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// New key: claim + inbox record + schedule entry committed with fsync.
    Accepted,
    /// Key already admitted with the same fingerprint (possibly in the same drain: the reply
    /// still waits for the first copy's commit).
    Duplicate,
    /// Key already admitted with another fingerprint; a quarantine record was committed and the
    /// first binding left untouched (R11).
    Conflict,
    /// The write failed; nothing is admitted (fail closed, R15).
    Unavailable,
}

/// Called exactly once with the decision, on the shard writer thread, after the commit.
/// Must not block.
pub type Reply = Box<dyn FnOnce(Decision) + Send>;

/// One authenticated, inspected event asking to be admitted.
pub struct Admission {
    /// Idempotency key `tenant/source/event id` (R9).
    pub key: String,
    /// Index of the source in `Config::sources`.
    pub source: u32,
    /// SHA-256 of the raw body (R11).
    pub fingerprint: [u8; 32],
    /// Event type, when known.
    pub event_type: Option<String>,
    /// Id of the key that verified the signature (R3).
    pub secret_id: String,
    /// Signed timestamp in Unix seconds, when the provider signs one.
    pub signed_at: Option<i64>,
    /// When the request was fully read, Unix milliseconds.
    pub received_at_ms: u64,
    /// The request's `Content-Type`, forwarded as is.
    pub content_type: Option<Vec<u8>>,
    /// The exact raw body (forwarded byte for byte).
    pub body: Vec<u8>,
    /// The ordering value at the source's `ordering_key` (R22), when it has one and the body
    /// holds a value there: events with the same value are delivered in admission order.
    pub ordering: Option<String>,
    /// Receives the decision.
    pub reply: Reply,
}

/// A minimised record of a refused body (R23): no body bytes are kept.
#[derive(Debug, Clone)]
pub struct RejectedRecord {
    /// Index of the source.
    pub source: u32,
    /// Unix milliseconds.
    pub received_at_ms: u64,
    /// `SchemaReject::reason()`.
    pub reason: &'static str,
    /// The event id when one was found.
    pub event_id: Option<String>,
    /// Body length in bytes.
    pub body_bytes: usize,
    /// SHA-256 of the body.
    pub fingerprint: [u8; 32],
}

/// An inbox event whose (first or retry) attempt is due.
#[derive(Debug, Clone)]
pub struct DueEvent {
    /// Shard that owns the key.
    pub shard: usize,
    /// Inbox sequence number within the shard.
    pub seq: u64,
    /// The schedule entry's due time, Unix ms (part of its key, needed to settle).
    pub due_ms: u64,
    /// Idempotency key.
    pub key: String,
    /// Index of the source.
    pub source: u32,
    /// Attempts already made.
    pub attempts: u32,
    /// When it was admitted, Unix ms.
    pub received_at_ms: u64,
    /// Key id that verified it.
    pub secret_id: String,
    /// Signed timestamp, Unix s.
    pub signed_at: Option<i64>,
    /// Original `Content-Type`.
    pub content_type: Option<Vec<u8>>,
    /// Exact original body.
    pub body: Vec<u8>,
    /// Its place in its ordering group while unsettled (R22); `None` when unordered.
    pub ordering: Option<OrderPlace>,
}

impl DueEvent {
    /// The due event of schedule entry `(due_ms, seq)` of `shard`, from its inbox `record` and
    /// what its claim says (`attempts` made, `ordering` place): the one construction shared by
    /// the RocksDB reader and the sans-IO decisions the simulator runs.
    pub(crate) fn from_record(
        (shard, seq, due_ms): (usize, u64, u64),
        record: codec::InboxRecord,
        attempts: u32,
        ordering: Option<OrderPlace>,
    ) -> DueEvent {
        DueEvent {
            shard,
            seq,
            due_ms,
            key: record.key,
            source: record.source,
            attempts,
            received_at_ms: record.received_at_ms,
            secret_id: record.secret_id,
            signed_at: record.signed_at,
            content_type: record.content_type,
            body: record.body,
            ordering,
        }
    }
}

/// The result of one attempt, as decided by the dispatcher's classification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx received at `at_ms`.
    Delivered {
        /// Unix ms.
        at_ms: u64,
    },
    /// Retryable failure; try again at `next_ms`.
    Retry {
        /// Unix ms of the next attempt.
        next_ms: u64,
        /// What went wrong (no payload, no secret), at most `ATTEMPT_ERROR_BYTES_MAX` bytes.
        error: String,
    },
    /// Permanent failure or `attempts_max` reached: dead-lettered.
    Dead {
        /// What went wrong.
        error: String,
    },
}

/// A dispatch result for the shard writer to record.
pub struct Settlement {
    /// Shard that owns the key.
    pub shard: usize,
    /// Inbox sequence number.
    pub seq: u64,
    /// Idempotency key of the event (from the [`DueEvent`]), so the writer reads its claim
    /// without reading the inbox record first.
    pub key: String,
    /// The schedule entry's due time being settled.
    pub due_ms: u64,
    /// Attempts made so far, this one included.
    pub attempts: u32,
    /// What happened.
    pub outcome: Outcome,
    /// Called once on the writer thread with whether the settlement was durably written.
    pub reply: Box<dyn FnOnce(bool) + Send>,
}

/// The dispatcher's view of the ledger: due events in, settlements out. [`Ledger`] implements
/// it over RocksDB; tests and the simulator implement it in memory.
pub trait Inbox: Send + Sync + 'static {
    /// Number of shards (each is scanned separately).
    fn shards(&self) -> usize;

    /// Up to `limit` events of `shard` whose schedule entry is due at or before `now_ms`, in
    /// due order, starting at schedule position `from` (`(due_ms, seq)`, inclusive; `None` =
    /// the head) and skipping the `seq`s in `in_flight` (attempts this dispatcher is running,
    /// or whose settlement it has not heard back about). Starting past the head lets the
    /// dispatcher avoid re-reading the settled entries (tombstones) at the head of the schedule
    /// on every scan. A store that leases what it returns (PostgreSQL) must not lease a skipped
    /// event: nobody would attempt it until the lease ran out.
    ///
    /// # Errors
    /// A read failure, as text for the log.
    fn due(
        &self,
        shard: usize,
        from: Option<(u64, u64)>,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
    ) -> Result<Vec<DueEvent>, String>;

    /// The earliest due time in `shard` later than `after_ms` (Unix ms), if any.
    fn next_due_after(&self, shard: usize, after_ms: u64) -> Option<u64>;

    /// Hands a settlement to the shard writer. `Err` gives it back when the settle queue is
    /// full (the caller retries later).
    ///
    /// # Errors
    /// The settlement itself, when the queue is full or the writer stopped.
    fn settle(&self, settlement: Settlement) -> Result<(), Settlement>;

    /// Whether `event` may be attempted now under its source's `ordering_key` (R22): true for
    /// an unordered event, and for an ordered one that is the first unsettled event of its
    /// group (same `tenant/source` and ordering value) in admission order. Events behind the
    /// first wait until it is delivered, dead-lettered or dropped. The default, for stores
    /// that keep no ordering index, is always true (unordered delivery).
    ///
    /// # Errors
    /// A read failure, as text for the log (the caller then holds the event back).
    fn ordering_turn(&self, event: &DueEvent) -> Result<bool, String> {
        let _ = event;
        Ok(true)
    }

    /// Whether the dispatcher may call [`Inbox::due`], [`Inbox::next_due_after`] and
    /// [`Inbox::ordering_turn`] on its own thread: true for an in-process store whose reads
    /// are memtable and cache lookups (microseconds), saving a hand-off to tokio's blocking
    /// pool and back per scan. The default, false, is for stores that wait on a network
    /// round trip or run their own runtime (PostgreSQL).
    fn reads_inline(&self) -> bool {
        false
    }

    /// Whether [`Inbox::due`] leases what it returns (a ledger shared by several nodes,
    /// PostgreSQL): a returned event is then attempted by nobody else until its lease runs
    /// out, so the dispatcher must ask only for events it can start now. It then scans with
    /// [`Inbox::due_of`], once per destination with free attempt slots, instead of once over
    /// every source. The default, false, is for a store whose scan leases nothing (RocksDB):
    /// what the dispatcher cannot start stays due for the next scan.
    fn leases(&self) -> bool {
        false
    }

    /// [`Inbox::due`] from the head, restricted to `sources` (see [`DueSources`]). Called only
    /// when [`Inbox::leases`] is true. The default ignores `sources` and may return events of
    /// any source: right for a store that leases nothing, where the dispatcher skips an event
    /// it cannot start and finds it again in a later scan.
    ///
    /// # Errors
    /// A read failure, as text for the log.
    fn due_of(
        &self,
        shard: usize,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
        sources: DueSources<'_>,
    ) -> Result<Vec<DueEvent>, String> {
        let _ = sources;
        self.due(shard, None, now_ms, limit, in_flight)
    }
}

/// Which sources' events a leasing scan ([`Inbox::due_of`]) may return. Sources are named by
/// their index in the running configuration's `[[source]]` list, which a reload cannot
/// change (adding, removing or reordering a source needs a restart).
#[derive(Clone, Copy, Debug)]
pub enum DueSources<'a> {
    /// Only these configured sources: those of one destination with free attempt slots.
    Only(&'a [usize]),
    /// Only events whose `tenant/source` is not in the configuration (a source removed before
    /// a restart): the dispatcher dead-letters them as unroutable.
    Unconfigured,
}

#[cfg(test)]
mod tests;
