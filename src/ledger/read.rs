//! Reads of the ledger: the dispatcher's [`Inbox`] view (due events, next due time,
//! settlements handed to the writer) and the admin views of events, quarantine and rejects.
//! Readers never write; they read from a snapshot where several CFs must agree.

use rocksdb::IteratorMode;

use super::codec::{self, EventState};
use super::handle::{Error, Ledger};
use super::store::{self, CF_QUARANTINE, CF_REJECTED};
use super::{DueEvent, Inbox, Settlement};

/// One event as the admin API shows it: its claim, without the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventView {
    /// Idempotency key.
    pub key: String,
    /// Source index.
    pub source: u32,
    /// Life state.
    pub state: EventState,
    /// Attempts made.
    pub attempts: u32,
    /// Fingerprint of the first admitted copy (R11).
    pub fingerprint: [u8; 32],
    /// Key id that verified it (R3).
    pub secret_id: String,
    /// Admission time, Unix ms.
    pub received_at_ms: u64,
    /// Delivery time, Unix ms.
    pub delivered_at_ms: Option<u64>,
    /// When the next attempt is due, Unix ms (unsettled events).
    pub next_attempt_ms: Option<u64>,
    /// Last attempt error.
    pub last_error: Option<String>,
    /// Inbox sequence number in its shard.
    pub seq: u64,
    /// Shard that owns the key.
    pub shard: usize,
}

/// A quarantined conflicting copy (R11): both fingerprints, no body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineView {
    /// Idempotency key.
    pub key: String,
    /// Source index.
    pub source: u32,
    /// Lower-case hex SHA-256 of the first (kept) binding.
    pub first_fingerprint: String,
    /// Lower-case hex SHA-256 of the refused copy.
    pub new_fingerprint: String,
    /// When the refused copy arrived, Unix ms.
    pub received_at_ms: u64,
}

/// A minimised rejected body (R23): no body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedView {
    /// Source index.
    pub source: u32,
    /// Unix ms.
    pub received_at_ms: u64,
    /// Reason code.
    pub reason: String,
    /// Event id, when one was found.
    pub event_id: Option<String>,
    /// Body length in bytes.
    pub body_bytes: u64,
    /// Lower-case hex SHA-256 of the body.
    pub fingerprint: String,
}

impl Ledger {
    /// The stored claim of `key`, or `None` if the key was never admitted (or its identity
    /// retention ran out: a missing record is not proof of absence, R25).
    ///
    /// # Errors
    /// [`Error::Storage`] on a read failure, [`Error::Corrupt`] when the claim does not decode.
    pub fn event(&self, key: &str) -> Result<Option<EventView>, Error> {
        let shard = self.shard_of(key);
        let db = &self.inner.db;
        let name = store::cf_claims(shard);
        let Some(v) = db.get_pinned_cf(store::cf(db, &name), key)? else {
            return Ok(None);
        };
        let c = codec::decode_claim(&v).map_err(|e| store::corrupt(&name, e))?;
        Ok(Some(EventView {
            key: key.to_owned(),
            source: c.source,
            state: c.state,
            attempts: c.attempts,
            fingerprint: c.fingerprint,
            secret_id: c.secret_id,
            received_at_ms: c.received_at_ms,
            delivered_at_ms: c.delivered_at_ms,
            next_attempt_ms: c.next_attempt_ms,
            last_error: c.last_error,
            seq: c.seq,
            shard,
        }))
    }

    /// Up to `limit` quarantine records, newest first.
    ///
    /// # Errors
    /// [`Error::Storage`] on a read failure, [`Error::Corrupt`] for an undecodable record.
    pub fn quarantined(&self, limit: usize) -> Result<Vec<QuarantineView>, Error> {
        let db = &self.inner.db;
        let mut out = Vec::new();
        for entry in db.iterator_cf(store::cf(db, CF_QUARANTINE), IteratorMode::End).take(limit) {
            let (_, v) = entry?;
            let q = codec::decode_quarantine(&v).map_err(|e| store::corrupt(CF_QUARANTINE, e))?;
            out.push(QuarantineView {
                key: q.key,
                source: q.source,
                first_fingerprint: codec::hex32(&q.first_fingerprint),
                new_fingerprint: codec::hex32(&q.new_fingerprint),
                received_at_ms: q.received_at_ms,
            });
        }
        Ok(out)
    }

    /// Up to `limit` rejected records, newest first.
    ///
    /// # Errors
    /// [`Error::Storage`] on a read failure, [`Error::Corrupt`] for an undecodable record.
    pub fn rejected(&self, limit: usize) -> Result<Vec<RejectedView>, Error> {
        let db = &self.inner.db;
        let mut out = Vec::new();
        for entry in db.iterator_cf(store::cf(db, CF_REJECTED), IteratorMode::End).take(limit) {
            let (_, v) = entry?;
            let r = codec::decode_reject(&v).map_err(|e| store::corrupt(CF_REJECTED, e))?;
            out.push(RejectedView {
                source: r.source,
                received_at_ms: r.received_at_ms,
                reason: r.reason,
                event_id: r.event_id,
                body_bytes: r.body_bytes,
                fingerprint: codec::hex32(&r.fingerprint),
            });
        }
        Ok(out)
    }

    /// The due scan of [`Inbox::due`], with typed errors.
    fn due_events(
        &self,
        shard: usize,
        from: Option<(u64, u64)>,
        now_ms: u64,
        limit: usize,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<DueEvent>, Error> {
        let db = &self.inner.db;
        let (schedule, inbox, claims) =
            (store::cf_schedule(shard), store::cf_inbox(shard), store::cf_claims(shard));
        // One snapshot: the schedule entry, its inbox record and its claim agree.
        let snap = db.snapshot();
        let mut out = Vec::new();
        let mut bounded = rocksdb::ReadOptions::default();
        // Nothing due later than now is read, not even as the entry that ends the loop.
        bounded.set_iterate_upper_bound(codec::schedule_key(now_ms.saturating_add(1), 0));
        if let Some((due_ms, seq)) = from {
            bounded.set_iterate_lower_bound(codec::schedule_key(due_ms, seq));
        }
        bounded.set_snapshot(&snap);
        let iter = db.iterator_cf_opt(store::cf(db, &schedule), bounded, IteratorMode::Start);
        for entry in iter {
            if out.len() >= limit {
                break;
            }
            let (k, _) = entry?;
            let (due_ms, seq) =
                codec::parse_schedule_key(&k).map_err(|e| store::corrupt(&schedule, e))?;
            if due_ms > now_ms {
                break;
            }
            if skip(seq) {
                continue;
            }
            let missing = |what| store::corrupt(&inbox, codec::DecodeError::Short(what));
            let v = snap
                .get_cf(store::cf(db, &inbox), codec::seq_key(seq))?
                .ok_or_else(|| missing("inbox record of a schedule entry"))?;
            let r = codec::decode_inbox(&v).map_err(|e| store::corrupt(&inbox, e))?;
            let c = snap
                .get_cf(store::cf(db, &claims), &r.key)?
                .ok_or_else(|| missing("claim of an inbox record"))?;
            let c = codec::decode_claim(&c).map_err(|e| store::corrupt(&claims, e))?;
            out.push(DueEvent {
                shard,
                seq,
                due_ms,
                key: r.key,
                source: r.source,
                attempts: c.attempts,
                received_at_ms: r.received_at_ms,
                secret_id: r.secret_id,
                signed_at: r.signed_at,
                content_type: r.content_type,
                body: r.body,
            });
        }
        Ok(out)
    }

    /// The first schedule key of `shard`, with typed errors.
    /// The first schedule entry due later than `after_ms`: one seek, no walk over the head.
    fn first_due_after(&self, shard: usize, after_ms: u64) -> Result<Option<u64>, Error> {
        let db = &self.inner.db;
        let name = store::cf_schedule(shard);
        let mut bounded = rocksdb::ReadOptions::default();
        bounded.set_iterate_lower_bound(codec::schedule_key(after_ms.saturating_add(1), 0));
        let mut iter = db.iterator_cf_opt(store::cf(db, &name), bounded, IteratorMode::Start);
        let Some(entry) = iter.next() else {
            return Ok(None);
        };
        let (k, _) = entry?;
        let (due, _) = codec::parse_schedule_key(&k).map_err(|e| store::corrupt(&name, e))?;
        Ok(Some(due))
    }
}

impl Inbox for Ledger {
    fn shards(&self) -> usize {
        Ledger::shards(self)
    }

    fn due(
        &self,
        shard: usize,
        from: Option<(u64, u64)>,
        now_ms: u64,
        limit: usize,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<DueEvent>, String> {
        if shard >= self.inner.shards {
            return Err(format!("no ledger shard {shard}"));
        }
        self.due_events(shard, from, now_ms, limit, skip).map_err(|e| e.to_string())
    }

    fn next_due_after(&self, shard: usize, after_ms: u64) -> Option<u64> {
        if shard >= self.inner.shards {
            return None;
        }
        self.first_due_after(shard, after_ms).unwrap_or_else(|e| {
            tracing::error!(shard, error = %e, "The ledger could not read its schedule.");
            None
        })
    }

    fn settle(&self, settlement: Settlement) -> Result<(), Settlement> {
        self.queue_settlement(settlement)
    }
}
