//! [`LedgerHandle`]: the ledger ingress and `serve` talk to, RocksDB (the default, embedded,
//! fastest) or PostgreSQL (shared by several nodes). A closed enum, not a trait object: the
//! hot path pays one predictable branch and no indirect call.

use std::sync::Arc;
use std::time::Duration;

use super::postgres::PgLedger;
use super::{Admission, Inbox, Ledger, RejectedRecord};

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

    /// The RocksDB ledger, whose reads and operator actions the admin API serves (the
    /// PostgreSQL backend has no admin reads yet: `docs/postgres.md`).
    pub fn rocksdb(&self) -> Option<&Ledger> {
        match self {
            LedgerHandle::RocksDb(l) => Some(l),
            LedgerHandle::Postgres(_) => None,
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
