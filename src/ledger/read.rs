//! Reads of the ledger: the dispatcher's [`Inbox`] view (due events, next due time,
//! settlements handed to the writer) and the admin views of events, quarantine and rejects.
//! Readers never write; they read from a snapshot where several CFs must agree.

use rocksdb::IteratorMode;

use super::codec::{self, AttemptRecord, AuditRecord, EventState};
use super::handle::{Error, Ledger};
use super::store::{self, CF_AUDIT, CF_QUARANTINE, CF_REJECTED};
use super::{DueEvent, Inbox, Settlement};

/// Most records one list request examines (matching or not) before it returns a page, full
/// or not, with a cursor to go on: a filter that matches little never turns one request
/// into a walk over the whole ledger.
pub const LIST_SCAN_MAX: usize = 10_000;

/// Most attempts of one event shown by [`Ledger::event_detail`] (the oldest first); an event
/// replayed many times keeps more on disk.
pub const ATTEMPT_HISTORY_MAX: usize = 256;

/// One page of a list, and where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The matching records, in list order.
    pub items: Vec<T>,
    /// Opaque cursor for the next page; `None` when the list is exhausted. A page may hold
    /// fewer than `limit` items (even none) and still have a next cursor, when
    /// [`LIST_SCAN_MAX`] records were examined.
    pub next_cursor: Option<String>,
}

/// Which events [`Ledger::list_events`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Only events in this state.
    pub state: Option<EventState>,
    /// Only keys starting with this prefix (`tenant/source/` selects one source).
    pub key_prefix: Option<String>,
}

/// An event with what its inbox record holds (the admin API's detail view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDetail {
    /// The claim.
    pub event: EventView,
    /// The exact body, while retained (`None` once payload retention removed it, R25).
    pub payload: Option<Vec<u8>>,
    /// Original `Content-Type`.
    pub content_type: Option<Vec<u8>>,
    /// Event type, when known.
    pub event_type: Option<String>,
    /// Signed timestamp, Unix s.
    pub signed_at: Option<i64>,
    /// Every settled attempt, oldest first (at most [`ATTEMPT_HISTORY_MAX`]), across replays.
    pub attempts: Vec<AttemptRecord>,
}

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
        // One snapshot: the claim and its delivered mark (deleted together) agree.
        let snap = db.snapshot();
        let Some(v) = snap.get_cf(store::cf(db, &name), key)? else {
            return Ok(None);
        };
        let c = codec::decode_claim(&v).map_err(|e| store::corrupt(&name, e))?;
        let c = self.with_delivered_mark(shard, c, &snap)?;
        Ok(Some(view(key.to_owned(), shard, c)))
    }

    /// `claim` settled by its delivered mark, when it may have one and has
    /// (`codec::delivered_mark_key`), read at `snap`: the snapshot the claim was read at, as
    /// an identity expiry deletes both.
    ///
    /// # Errors
    /// [`Error::Storage`], [`Error::Corrupt`] when the mark does not decode.
    fn with_delivered_mark(
        &self,
        shard: usize,
        mut claim: codec::Claim,
        snap: &rocksdb::SnapshotWithThreadMode<'_, rocksdb::DB>,
    ) -> Result<codec::Claim, Error> {
        if !claim.may_be_marked_delivered() {
            return Ok(claim);
        }
        let db = &self.inner.db;
        let inbox = store::cf_inbox(shard);
        let mark = snap.get_cf(store::cf(db, &inbox), codec::delivered_mark_key(claim.seq))?;
        if let Some(v) = mark {
            claim
                .mark_delivered(&codec::decode_attempt(&v).map_err(|e| store::corrupt(&inbox, e))?);
        }
        Ok(claim)
    }

    /// Up to `limit` events matching `query`, in `(shard, key)` order, starting after
    /// `cursor` (from a previous page). Reads with iterator bounds; at most
    /// [`LIST_SCAN_MAX`] claims are examined per call.
    ///
    /// # Errors
    /// [`Error::Cursor`] for a cursor this list did not hand out, [`Error::Storage`],
    /// [`Error::Corrupt`].
    pub fn list_events(
        &self,
        query: &EventQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<EventView>, Error> {
        let (first_shard, mut after) = match cursor {
            None => (0, None),
            Some(c) => {
                let (shard, key) = parse_event_cursor(c)?;
                if shard >= self.inner.shards {
                    return Err(Error::Cursor("names a shard this ledger does not have"));
                }
                (shard, Some(key))
            }
        };
        let db = &self.inner.db;
        let mut items = Vec::new();
        let mut examined = 0usize;
        // One snapshot for the claims and their delivered marks (deleted together).
        let snap = db.snapshot();
        for shard in first_shard..self.inner.shards {
            let name = store::cf_claims(shard);
            let mut opts = rocksdb::ReadOptions::default();
            opts.set_snapshot(&snap);
            let prefix = query.key_prefix.as_deref().unwrap_or("").as_bytes();
            let mut lower = prefix.to_vec();
            if let Some(key) = after.take() {
                // Strictly after the cursor's key.
                let mut start = key;
                start.push(0);
                lower = lower.max(start);
            }
            opts.set_iterate_lower_bound(lower);
            if let Some(upper) = prefix_end(prefix) {
                opts.set_iterate_upper_bound(upper);
            }
            for entry in db.iterator_cf_opt(store::cf(db, &name), opts, IteratorMode::Start) {
                let (k, v) = entry?;
                examined += 1;
                let key = String::from_utf8(k.to_vec())
                    .map_err(|_| store::corrupt(&name, codec::DecodeError::Utf8("key")))?;
                let c = codec::decode_claim(&v).map_err(|e| store::corrupt(&name, e))?;
                let c = self.with_delivered_mark(shard, c, &snap)?;
                if query.state.is_none_or(|s| s == c.state) {
                    items.push(view(key.clone(), shard, c));
                }
                if items.len() >= limit || examined >= LIST_SCAN_MAX {
                    return Ok(Page { items, next_cursor: Some(event_cursor(shard, &key)) });
                }
            }
        }
        Ok(Page { items, next_cursor: None })
    }

    /// `key`'s claim and inbox record (body included while retained), read from one snapshot.
    ///
    /// # Errors
    /// [`Error::Storage`], [`Error::Corrupt`].
    pub fn event_detail(&self, key: &str) -> Result<Option<EventDetail>, Error> {
        let shard = self.shard_of(key);
        let db = &self.inner.db;
        let (claims, inbox) = (store::cf_claims(shard), store::cf_inbox(shard));
        let snap = db.snapshot();
        let Some(v) = snap.get_cf(store::cf(db, &claims), key)? else {
            return Ok(None);
        };
        let c = codec::decode_claim(&v).map_err(|e| store::corrupt(&claims, e))?;
        let c = self.with_delivered_mark(shard, c, &snap)?;
        let seq = c.seq;
        let delivered = match (c.state, c.delivered_at_ms) {
            (EventState::Delivered, Some(at_ms)) => Some(codec::AttemptRecord {
                attempt: c.attempts,
                at_ms,
                outcome: codec::ATTEMPT_DELIVERED.to_owned(),
                error: None,
            }),
            _ => None,
        };
        let mut detail = EventDetail {
            event: view(key.to_owned(), shard, c),
            payload: None,
            content_type: None,
            event_type: None,
            signed_at: None,
            attempts: Vec::new(),
        };
        // The attempt history follows the record in `inbox/s`: `seq ‖ at_ms ‖ attempt` keys.
        let name = &inbox;
        let mut opts = rocksdb::ReadOptions::default();
        opts.set_iterate_lower_bound([&codec::seq_key(seq)[..], &[0]].concat());
        opts.set_iterate_upper_bound(codec::seq_key(seq.saturating_add(1)));
        opts.set_snapshot(&snap);
        let history = db.iterator_cf_opt(store::cf(db, name), opts, IteratorMode::Start);
        // The delivered mark is not history of its own: the delivery it records is added from
        // the claim below, while the payload is retained, as for every delivery.
        let mark = codec::delivered_mark_key(seq);
        let history = history.filter(|e| e.as_ref().map_or(true, |(k, _)| **k != mark));
        for entry in history.take(ATTEMPT_HISTORY_MAX) {
            let (_, v) = entry?;
            detail.attempts.push(codec::decode_attempt(&v).map_err(|e| store::corrupt(name, e))?);
        }
        if let Some(v) = snap.get_cf(store::cf(db, &inbox), codec::seq_key(seq))? {
            let r = codec::decode_inbox(&v).map_err(|e| store::corrupt(&inbox, e))?;
            detail.payload = Some(r.body);
            detail.content_type = r.content_type;
            detail.event_type = r.event_type;
            detail.signed_at = r.signed_at;
            // The delivery itself is in the claim (or its delivered mark, read with it), not
            // in the history (`decide::transition`); ledgers written before that have it in
            // both, not always last (its time is the attempt's end, a failed attempt's is its
            // drain's due time).
            if let Some(last) = delivered {
                let written = detail.attempts.contains(&last);
                if !written && detail.attempts.len() < ATTEMPT_HISTORY_MAX {
                    detail.attempts.push(last);
                }
            }
        }
        Ok(Some(detail))
    }

    /// Up to `limit` quarantine records whose key starts with `key_prefix`, newest first,
    /// starting after `cursor`.
    ///
    /// # Errors
    /// [`Error::Cursor`], [`Error::Storage`], [`Error::Corrupt`].
    pub fn quarantine_page(
        &self,
        key_prefix: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<QuarantineView>, Error> {
        self.newest_first(CF_QUARANTINE, cursor, limit, |v| {
            let q = codec::decode_quarantine(v).map_err(|e| store::corrupt(CF_QUARANTINE, e))?;
            if key_prefix.is_some_and(|p| !q.key.starts_with(p)) {
                return Ok(None);
            }
            Ok(Some(QuarantineView {
                key: q.key,
                source: q.source,
                first_fingerprint: codec::hex32(&q.first_fingerprint),
                new_fingerprint: codec::hex32(&q.new_fingerprint),
                received_at_ms: q.received_at_ms,
            }))
        })
    }

    /// Up to `limit` rejected records of source index `source` (all when `None`), newest
    /// first, starting after `cursor`.
    ///
    /// # Errors
    /// [`Error::Cursor`], [`Error::Storage`], [`Error::Corrupt`].
    pub fn rejected_page(
        &self,
        source: Option<u32>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<RejectedView>, Error> {
        self.newest_first(CF_REJECTED, cursor, limit, |v| {
            let r = codec::decode_reject(v).map_err(|e| store::corrupt(CF_REJECTED, e))?;
            if source.is_some_and(|s| s != r.source) {
                return Ok(None);
            }
            Ok(Some(RejectedView {
                source: r.source,
                received_at_ms: r.received_at_ms,
                reason: r.reason,
                event_id: r.event_id,
                body_bytes: r.body_bytes,
                fingerprint: codec::hex32(&r.fingerprint),
            }))
        })
    }

    /// Up to `limit` audit records (operator actions, R20), newest first, after `cursor`.
    ///
    /// # Errors
    /// [`Error::Cursor`], [`Error::Storage`], [`Error::Corrupt`].
    pub fn audit_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<AuditRecord>, Error> {
        self.newest_first(CF_AUDIT, cursor, limit, |v| {
            codec::decode_audit(v).map(Some).map_err(|e| store::corrupt(CF_AUDIT, e))
        })
    }

    /// A newest-first page of a global, time-keyed column family: iterates backwards from
    /// just before `cursor` (the hex of the last key handed out), keeps what `decode`
    /// returns, and stops at `limit` items or [`LIST_SCAN_MAX`] records.
    fn newest_first<T>(
        &self,
        name: &str,
        cursor: Option<&str>,
        limit: usize,
        decode: impl Fn(&[u8]) -> Result<Option<T>, Error>,
    ) -> Result<Page<T>, Error> {
        let db = &self.inner.db;
        let mut opts = rocksdb::ReadOptions::default();
        let mode = match cursor {
            None => IteratorMode::End,
            Some(c) => {
                let key = hex::decode(c).map_err(|_| Error::Cursor("is not hex"))?;
                // The upper bound is exclusive: iteration starts just before the cursor.
                opts.set_iterate_upper_bound(key);
                IteratorMode::End
            }
        };
        let mut items = Vec::new();
        let mut examined = 0usize;
        for entry in db.iterator_cf_opt(store::cf(db, name), opts, mode) {
            let (k, v) = entry?;
            examined += 1;
            if let Some(item) = decode(&v)? {
                items.push(item);
            }
            if items.len() >= limit || examined >= LIST_SCAN_MAX {
                return Ok(Page { items, next_cursor: Some(hex::encode(&k)) });
            }
        }
        Ok(Page { items, next_cursor: None })
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
        // The inbox records through one iterator on the same snapshot, made at the first due
        // event (an empty scan makes none): the due events of a scan are mostly consecutive
        // seqs, and stepping to the next record costs a fraction of a point read's search from
        // the top of each memtable's skiplist. `ReadOptions` keeps only a pointer to the
        // snapshot: `snap`, declared before both iterators, is dropped after them.
        let mut records: Option<rocksdb::DBRawIterator<'_>> = None;
        for entry in iter {
            if out.len() >= limit {
                break;
            }
            let (k, v) = entry?;
            let (due_ms, seq) =
                codec::parse_schedule_key(&k).map_err(|e| store::corrupt(&schedule, e))?;
            if due_ms > now_ms {
                break;
            }
            if skip(seq) {
                continue;
            }
            let missing = |what| store::corrupt(&inbox, codec::DecodeError::Short(what));
            let want = codec::seq_key(seq);
            let stepped = records.as_mut().is_some_and(|it| step_to(it, &want));
            let records = records.get_or_insert_with(|| {
                let mut at_snapshot = rocksdb::ReadOptions::default();
                at_snapshot.set_snapshot(&snap);
                db.raw_iterator_cf_opt(store::cf(db, &inbox), at_snapshot)
            });
            if !stepped {
                records.seek(want);
            }
            records.status()?;
            let record = match (records.key(), records.value()) {
                (Some(k), Some(v)) if k == want => v,
                _ => return Err(missing("inbox record of a schedule entry")),
            };
            let r = codec::decode_inbox(record).map_err(|e| store::corrupt(&inbox, e))?;
            // The entry's value says what the claim would (written together); entries from
            // before the value existed are empty, and their claim is read.
            let (attempts, ordering) =
                match codec::decode_schedule(&v).map_err(|e| store::corrupt(&schedule, e))? {
                    Some(sv) => (sv.attempts, sv.ordering),
                    None => {
                        let c = snap
                            .get_cf(store::cf(db, &claims), &r.key)?
                            .ok_or_else(|| missing("claim of an inbox record"))?;
                        let c = codec::decode_claim(&c).map_err(|e| store::corrupt(&claims, e))?;
                        (c.attempts, c.ordering)
                    }
                };
            out.push(DueEvent::from_record((shard, seq, due_ms), r, attempts, ordering));
        }
        Ok(out)
    }

    /// Whether `event` is the first of its ordering group in the index (R22): the event the
    /// group may deliver now. Unordered events, and an ordered event whose group has no entry
    /// (released by a concurrent settlement), are always first.
    fn first_in_group(&self, event: &DueEvent) -> Result<bool, Error> {
        let Some(place) = &event.ordering else { return Ok(true) };
        let db = &self.inner.db;
        let group = store::meta_ordering_group(super::decide::scope_of(&event.key), &place.value);
        let mode = IteratorMode::From(&group, rocksdb::Direction::Forward);
        let Some(entry) = db.iterator_cf(store::cf(db, store::CF_META), mode).next() else {
            return Ok(true);
        };
        let (k, _) = entry?;
        if !k.starts_with(&group) || k.len() != group.len() + 18 {
            return Ok(true);
        }
        let first = store::parse_meta_ordering(&k);
        Ok(first.is_none_or(|(_, shard, seq)| (shard, seq) == (event.shard, event.seq)))
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
    fn reads_inline(&self) -> bool {
        true
    }

    fn shards(&self) -> usize {
        Ledger::shards(self)
    }

    fn due(
        &self,
        shard: usize,
        from: Option<(u64, u64)>,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
    ) -> Result<Vec<DueEvent>, String> {
        if shard >= self.inner.shards {
            return Err(format!("no ledger shard {shard}"));
        }
        let skip = |seq| in_flight.contains(&seq);
        self.due_events(shard, from, now_ms, limit, &skip).map_err(|e| e.to_string())
    }

    fn next_due_after(&self, shard: usize, after_ms: u64) -> Option<u64> {
        if shard >= self.inner.shards {
            return None;
        }
        self.first_due_after(shard, after_ms).unwrap_or_else(|e| {
            tracing::error!(code = "ledger_read_failed", shard, error = %e, "The ledger could not read its schedule.");
            None
        })
    }

    fn settle(&self, settlement: Settlement) -> Result<(), Settlement> {
        self.queue_settlement(settlement)
    }

    fn ordering_turn(&self, event: &DueEvent) -> Result<bool, String> {
        self.first_in_group(event).map_err(|e| e.to_string())
    }
}

/// Moves `it` forward to `want` if it lies a few steps ahead (the next event's record, past the
/// attempt history of the one before). Returns whether `it` is now at `want`; when not, the
/// caller seeks.
fn step_to(it: &mut rocksdb::DBRawIterator<'_>, want: &[u8]) -> bool {
    const STEPS_MAX: usize = 8;
    for _ in 0..STEPS_MAX {
        match it.key() {
            Some(k) if k == want => return true,
            Some(k) if k < want => it.next(),
            _ => return false,
        }
    }
    it.key() == Some(want)
}

/// The admin view of a decoded claim.
fn view(key: String, shard: usize, c: codec::Claim) -> EventView {
    EventView {
        key,
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
    }
}

/// The smallest byte string greater than every string starting with `prefix` (`None` for an
/// empty or all-`0xff` prefix: no upper bound).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// An event-list cursor: `{shard}.{hex of the last key}`.
fn event_cursor(shard: usize, key: &str) -> String {
    format!("{shard}.{}", hex::encode(key))
}

fn parse_event_cursor(c: &str) -> Result<(usize, Vec<u8>), Error> {
    let (shard, key) = c.split_once('.').ok_or(Error::Cursor("has no shard part"))?;
    let shard = shard.parse().map_err(|_| Error::Cursor("has a bad shard part"))?;
    let key = hex::decode(key).map_err(|_| Error::Cursor("has a key part that is not hex"))?;
    Ok((shard, key))
}
