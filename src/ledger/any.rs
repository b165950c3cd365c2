//! [`LedgerHandle`]: the ledger ingress and `serve` talk to, RocksDB (the default, embedded,
//! fastest) or PostgreSQL (shared by several nodes). A closed enum, not a trait object: the
//! hot path pays one predictable branch and no indirect call. The admin API's reads and
//! operator actions go through it too (the same answers on both backends).

use std::sync::Arc;
use std::time::Duration;

use super::postgres::PgLedger;
use super::{
    Admission, AuditRecord, Error, EventDetail, EventQuery, EventView, Inbox, Ledger, Operation,
    Page, QuarantineView, RejectedRecord, RejectedView,
};

/// The ledger behind ingress: the seam `pipeline → admit` of both backends.
#[derive(Clone)]
pub enum LedgerHandle {
    /// `ledger.backend = "rocksdb"`.
    RocksDb(Ledger),
    /// `ledger.backend = "postgres"`.
    Postgres(PgLedger),
}

impl From<Ledger> for LedgerHandle {
    fn from(ledger: Ledger) -> LedgerHandle {
        LedgerHandle::RocksDb(ledger)
    }
}

impl From<PgLedger> for LedgerHandle {
    fn from(ledger: PgLedger) -> LedgerHandle {
        LedgerHandle::Postgres(ledger)
    }
}

impl LedgerHandle {
    /// See [`Ledger::admit`]: `a.reply` is called exactly once after the commit.
    ///
    /// # Errors
    /// Gives `a` back, its reply NOT called, when the queue is full or the ledger stopped.
    #[allow(clippy::result_large_err, reason = "the refused admission goes back by value")]
    pub fn admit(&self, a: Admission) -> Result<(), Admission> {
        match self {
            LedgerHandle::RocksDb(l) => l.admit(a),
            LedgerHandle::Postgres(l) => l.admit(a),
        }
    }

    /// See [`Ledger::admission_wait`].
    pub fn admission_wait(&self, key: &str) -> Duration {
        match self {
            LedgerHandle::RocksDb(l) => l.admission_wait(key),
            LedgerHandle::Postgres(l) => l.admission_wait(),
        }
    }

    /// See [`Ledger::commit_time`].
    pub fn commit_time(&self, key: &str) -> Duration {
        match self {
            LedgerHandle::RocksDb(l) => l.commit_time(key),
            LedgerHandle::Postgres(l) => l.commit_time(),
        }
    }

    /// See [`Ledger::shed`].
    pub fn shed(&self, key: &str) {
        match self {
            LedgerHandle::RocksDb(l) => l.shed(key),
            LedgerHandle::Postgres(l) => l.shed(),
        }
    }

    /// See [`Ledger::reject`].
    pub fn reject(&self, r: RejectedRecord) {
        match self {
            LedgerHandle::RocksDb(l) => l.reject(r),
            LedgerHandle::Postgres(l) => l.reject(r),
        }
    }

    /// See [`Ledger::healthy`].
    pub fn healthy(&self) -> bool {
        match self {
            LedgerHandle::RocksDb(l) => l.healthy(),
            LedgerHandle::Postgres(l) => l.healthy(),
        }
    }

    /// The dispatcher's view of this ledger.
    pub fn inbox(&self) -> Arc<dyn Inbox> {
        match self {
            LedgerHandle::RocksDb(l) => Arc::new(l.clone()),
            LedgerHandle::Postgres(l) => Arc::new(l.clone()),
        }
    }

    /// The RocksDB ledger, when that is the backend.
    pub fn rocksdb(&self) -> Option<&Ledger> {
        match self {
            LedgerHandle::RocksDb(l) => Some(l),
            LedgerHandle::Postgres(_) => None,
        }
    }

    /// See [`Ledger::list_events`] (PostgreSQL: every node's events, keys in
    /// `(tenant, source, event id)` order).
    ///
    /// # Errors
    /// [`Error::Cursor`] for a cursor this list did not hand out; a read failure.
    pub fn list_events(
        &self,
        query: &EventQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<EventView>, Error> {
        match self {
            LedgerHandle::RocksDb(l) => l.list_events(query, cursor, limit),
            LedgerHandle::Postgres(l) => l.list_events(query, cursor, limit),
        }
    }

    /// See [`Ledger::event_detail`].
    ///
    /// # Errors
    /// A read failure.
    pub fn event_detail(&self, key: &str) -> Result<Option<EventDetail>, Error> {
        match self {
            LedgerHandle::RocksDb(l) => l.event_detail(key),
            LedgerHandle::Postgres(l) => l.event_detail(key),
        }
    }

    /// See [`Ledger::quarantine_page`].
    ///
    /// # Errors
    /// [`Error::Cursor`]; a read failure.
    pub fn quarantine_page(
        &self,
        key_prefix: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<QuarantineView>, Error> {
        match self {
            LedgerHandle::RocksDb(l) => l.quarantine_page(key_prefix, cursor, limit),
            LedgerHandle::Postgres(l) => l.quarantine_page(key_prefix, cursor, limit),
        }
    }

    /// See [`Ledger::rejected_page`].
    ///
    /// # Errors
    /// [`Error::Cursor`]; a read failure.
    pub fn rejected_page(
        &self,
        source: Option<u32>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<RejectedView>, Error> {
        match self {
            LedgerHandle::RocksDb(l) => l.rejected_page(source, cursor, limit),
            LedgerHandle::Postgres(l) => l.rejected_page(source, cursor, limit),
        }
    }

    /// See [`Ledger::audit_page`] (PostgreSQL: the actions of every node).
    ///
    /// # Errors
    /// [`Error::Cursor`]; a read failure.
    pub fn audit_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<AuditRecord>, Error> {
        match self {
            LedgerHandle::RocksDb(l) => l.audit_page(cursor, limit),
            LedgerHandle::Postgres(l) => l.audit_page(cursor, limit),
        }
    }

    /// See [`Ledger::append_audit`]: durably appends an operator action (R20).
    ///
    /// # Errors
    /// A write failure (the action must then not be carried out).
    pub fn append_audit(&self, record: &AuditRecord) -> Result<(), Error> {
        match self {
            LedgerHandle::RocksDb(l) => l.append_audit(record),
            LedgerHandle::Postgres(l) => l.append_audit(record),
        }
    }

    /// See [`Ledger::operate`]: `op.reply` is called exactly once, after the commit that also
    /// holds the audit record. May block on PostgreSQL (the transaction runs on the calling
    /// thread): call from a blocking thread.
    pub fn operate(&self, op: Operation) {
        match self {
            LedgerHandle::RocksDb(l) => l.operate(op),
            LedgerHandle::Postgres(l) => l.operate(op),
        }
    }

    /// See [`Ledger::shutdown`].
    pub fn shutdown(&self) {
        match self {
            LedgerHandle::RocksDb(l) => l.shutdown(),
            LedgerHandle::Postgres(l) => l.shutdown(),
        }
    }
}
