//! The admin API's reads and operator actions on the PostgreSQL ledger (SPEC §6, R20): the
//! same views, pages, refusals and audit records as the RocksDB ledger (`read.rs`,
//! `decide.rs`), read from and written to the tables every node shares, so an event
//! dead-lettered on one node is listed, inspected and replayed from any other, and a replay is
//! delivered by whichever node leases it next (with the same `Idempotency-Key`: the row, its
//! identity and its body are unchanged).
//!
//! Every call runs on the caller's (blocking) thread over this node's admin connection, opened
//! on first use and reopened after it broke. Lists examine at most [`LIST_SCAN_MAX`] rows per
//! page, as on RocksDB: a filter that matches little returns a short page with a cursor, never
//! a walk over the whole table. Cursors are opaque (hex of the last row's sort key).

use std::sync::atomic::Ordering;

use postgres::types::ToSql;
use postgres::{Client, Row};

use super::{as_i64, as_u64, schema, PgLedger};
use crate::ledger::codec::{AttemptRecord, AuditRecord, EventState};
use crate::ledger::{
    Error, EventDetail, EventQuery, EventView, OpAction, OpDone, OpRefused, Operation, Page,
    QuarantineView, RejectedView, ATTEMPT_HISTORY_MAX, LIST_SCAN_MAX,
};

/// The columns of an [`EventView`], in [`PgLedger::view`]'s order (no body).
const VIEW: &str = "tenant, source, event_id, source_index, state, attempts, fingerprint,
    secret_id, received_at_ms, settled_at_ms, due_ms, last_error, seq";

type Params = Vec<Box<dyn ToSql + Sync>>;

/// One list query: rows of `table` matching `filter` (already bound), in `order` after the
/// cursor, at most [`LIST_SCAN_MAX`] examined, those matching `keep` returned.
struct Listing<'a> {
    /// Selected columns; the sort key's columns first.
    columns: &'a str,
    table: &'a str,
    /// The sort key's columns (the cursor holds their values).
    key: &'a str,
    /// `ORDER BY` clause (each key column with its direction).
    order: &'a str,
    /// `>` (ascending) or `<` (descending): rows strictly after the cursor.
    after: &'a str,
    /// Conditions on the scanned range itself (a source, a key prefix).
    range: Vec<String>,
    /// The page filter applied to the examined rows (e.g. `state = $n`).
    keep: Option<String>,
    params: Params,
}

impl Listing<'_> {
    fn bind(&mut self, value: impl ToSql + Sync + 'static) -> String {
        self.params.push(Box::new(value));
        format!("${}", self.params.len())
    }

    /// Runs the listing after `cursor` (the key values of the last row handed out); calls
    /// `item` on each returned row (key columns first) and builds the page.
    fn run<T>(
        mut self,
        client: &mut Client,
        cursor: Option<Vec<CursorValue>>,
        limit: usize,
        key_len: usize,
        item: impl Fn(&Row) -> Result<T, Error>,
    ) -> Result<Page<T>, Error> {
        let mut conditions = std::mem::take(&mut self.range);
        if let Some(values) = cursor {
            let mut marks = Vec::new();
            for v in values {
                marks.push(match v {
                    CursorValue::Text(t) => self.bind(t),
                    CursorValue::Int(i) => self.bind(i),
                    CursorValue::Bytes(b) => self.bind(b),
                });
            }
            conditions.push(format!("({}) {} ({})", self.key, self.after, marks.join(", ")));
        }
        let filter = if conditions.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conditions.join(" AND "))
        };
        let (columns, table, order) = (self.columns, self.table, self.order);
        let scan = i64::try_from(LIST_SCAN_MAX).unwrap_or(i64::MAX);
        let sql = match self.keep.take() {
            None => {
                let lim = self.bind(i64::try_from(limit).unwrap_or(i64::MAX));
                format!(
                    "SELECT {columns}, TRUE AS hookwall_keep, CAST(0 AS INT8) AS hookwall_n
                    FROM {table} {filter} ORDER BY {order} LIMIT {lim}"
                )
            }
            Some(keep) => {
                // The examined window, numbered: its matching rows, and its last row (where
                // the next page starts when fewer than `limit` rows match).
                let window = self.bind(scan);
                let lim = self.bind(i64::try_from(limit + 1).unwrap_or(i64::MAX));
                format!(
                    "SELECT * FROM (SELECT *, ({keep}) AS hookwall_keep,
                            row_number() OVER (ORDER BY {order}) AS hookwall_n
                        FROM (SELECT {columns} FROM {table} {filter} ORDER BY {order}
                            LIMIT {window}) AS w) AS v
                    WHERE hookwall_keep OR hookwall_n = {window} ORDER BY hookwall_n LIMIT {lim}"
                )
            }
        };
        let params: Vec<&(dyn ToSql + Sync)> = self.params.iter().map(AsRef::as_ref).collect();
        let rows = client.query(&sql, &params).map_err(|e| db(&e))?;
        let mut items = Vec::new();
        for row in &rows {
            let (keep, n): (bool, i64) = (col(row, row.len() - 2)?, col(row, row.len() - 1)?);
            if keep {
                items.push(item(row)?);
            }
            if items.len() >= limit || n == scan {
                return Ok(Page { items, next_cursor: Some(encode_cursor(row, key_len)?) });
            }
        }
        Ok(Page { items, next_cursor: None })
    }
}

/// One value of a cursor's sort key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CursorValue {
    Text(String),
    Int(i64),
    Bytes(Vec<u8>),
}

/// The first `key_len` columns of `row` as a cursor: hex of a JSON array of `{"t": text}`,
/// `{"i": integer}` or `{"b": hex}`.
///
/// # Errors
/// A key column of another type than its kind ([`col`]).
fn encode_cursor(row: &Row, key_len: usize) -> Result<String, Error> {
    let mut values = Vec::with_capacity(key_len);
    for (i, column) in row.columns().iter().enumerate().take(key_len) {
        let ty = column.type_();
        let v = if *ty == postgres::types::Type::INT8 {
            serde_json::json!({ "i": col::<i64>(row, i)? })
        } else if *ty == postgres::types::Type::BYTEA {
            serde_json::json!({ "b": hex::encode(col::<&[u8]>(row, i)?) })
        } else {
            serde_json::json!({ "t": col::<&str>(row, i)? })
        };
        values.push(v);
    }
    Ok(hex::encode(serde_json::Value::Array(values).to_string()))
}

/// A cursor handed out by [`encode_cursor`] for a list whose key has the column kinds `kinds`
/// (`'t'`, `'i'`, `'b'`).
fn decode_cursor(cursor: Option<&str>, kinds: &str) -> Result<Option<Vec<CursorValue>>, Error> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    let bytes = hex::decode(cursor).map_err(|_| Error::Cursor("is not hex"))?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| Error::Cursor("does not decode"))?;
    let items = value.as_array().ok_or(Error::Cursor("does not decode"))?;
    if items.len() != kinds.len() {
        return Err(Error::Cursor("is for another list"));
    }
    let mut out = Vec::with_capacity(items.len());
    for (item, kind) in items.iter().zip(kinds.chars()) {
        let v = match kind {
            't' => item.get("t").and_then(|v| v.as_str()).map(|t| CursorValue::Text(t.to_owned())),
            'i' => item.get("i").and_then(serde_json::Value::as_i64).map(CursorValue::Int),
            _ => item
                .get("b")
                .and_then(|v| v.as_str())
                .and_then(|h| hex::decode(h).ok())
                .map(CursorValue::Bytes),
        };
        out.push(v.ok_or(Error::Cursor("is for another list"))?);
    }
    Ok(Some(out))
}

/// A failed statement as the admin API's read error.
fn db(e: &postgres::Error) -> Error {
    Error::Database(schema::describe(e))
}

/// Column `i` of `row` as `T`. A column of another type (changed under the running node) is
/// an error answered to the operator, not a panic: a panic aborts the whole process (a broken
/// invariant, `cli::abort_on_panic`).
fn col<'r, T: postgres::types::FromSql<'r>>(row: &'r Row, i: usize) -> Result<T, Error> {
    row.try_get(i).map_err(|e| db(&e))
}

/// `tenant/source/event id` split at its first two `/` (tenant and source ids hold none).
fn split_key(key: &str) -> Option<(&str, &str, &str)> {
    let (tenant, rest) = key.split_once('/')?;
    let (source, event_id) = rest.split_once('/')?;
    Some((tenant, source, event_id))
}

/// `LIKE` pattern matching strings that start with `prefix` (`\` escapes `%`, `_` and `\`).
fn like_prefix(prefix: &str) -> String {
    let mut p = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// Range conditions selecting the keys that start with `prefix` (`tenant/source/event…`).
/// `q` qualifies the column names (`""` or `"alias."`).
fn prefix_range(l: &mut Listing<'_>, prefix: Option<&str>, q: &str) {
    let Some(prefix) = prefix.filter(|p| !p.is_empty()) else {
        return;
    };
    let mut parts = prefix.splitn(3, '/');
    let (tenant, source, event) = (parts.next(), parts.next(), parts.next());
    match (tenant, source, event) {
        (Some(t), Some(s), Some(e)) => {
            let (t, s) = (l.bind(t.to_owned()), l.bind(s.to_owned()));
            l.range.push(format!("{q}tenant = {t} AND {q}source = {s}"));
            if !e.is_empty() {
                let e = l.bind(like_prefix(e));
                l.range.push(format!("{q}event_id LIKE {e} ESCAPE '\\'"));
            }
        }
        (Some(t), Some(s), None) => {
            let t = l.bind(t.to_owned());
            l.range.push(format!("{q}tenant = {t}"));
            let s = l.bind(like_prefix(s));
            l.range.push(format!("{q}source LIKE {s} ESCAPE '\\'"));
        }
        _ => {
            let t = l.bind(like_prefix(prefix));
            l.range.push(format!("{q}tenant LIKE {t} ESCAPE '\\'"));
        }
    }
}

fn state_of(code: &str) -> Result<EventState, Error> {
    EventState::from_code(code)
        .ok_or_else(|| Error::Database(format!("hookwall_events: unknown state {code:?}")))
}

impl PgLedger {
    /// Runs `f` on this node's admin connection, connecting first when needed; a broken
    /// connection is dropped so the next call reconnects.
    fn with_admin<T>(&self, f: impl FnOnce(&mut Client) -> Result<T, Error>) -> Result<T, Error> {
        let mut guard = self
            .inner
            .admin
            .lock()
            .map_err(|_| Error::Database("admin connection lock poisoned".to_owned()))?;
        if guard.as_ref().is_some_and(Client::is_closed) {
            *guard = None;
        }
        if guard.is_none() {
            *guard = Some(self.inner.shared.opts.connector.connect().map_err(|e| db(&e))?);
        }
        let client = guard.as_mut().expect("connected just above");
        let result = f(client);
        if client.is_closed() {
            *guard = None;
        }
        result
    }

    /// The source index of (`tenant`, `source`) on this node, else the stored one.
    fn source_index(&self, tenant: &str, source: &str, stored: i32) -> u32 {
        self.inner
            .shared
            .opts
            .sources
            .iter()
            .position(|(t, s)| t == tenant && s == source)
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or_else(|| u32::try_from(stored).unwrap_or(u32::MAX))
    }

    /// An [`EventView`] of a row selected with [`VIEW`]'s columns.
    fn view(&self, row: &Row) -> Result<EventView, Error> {
        let (tenant, source, event_id) =
            (col::<&str>(row, 0)?, col::<&str>(row, 1)?, col::<&str>(row, 2)?);
        let state = state_of(col(row, 4)?)?;
        let settled_at: Option<i64> = col(row, 9)?;
        let due: Option<i64> = col(row, 10)?;
        let fingerprint = <[u8; 32]>::try_from(col::<&[u8]>(row, 6)?).map_err(|_| {
            Error::Database("hookwall_events: a fingerprint is not 32 bytes".to_owned())
        })?;
        Ok(EventView {
            key: format!("{tenant}/{source}/{event_id}"),
            source: self.source_index(tenant, source, col(row, 3)?),
            state,
            attempts: u32::try_from(col::<i32>(row, 5)?).unwrap_or(0),
            fingerprint,
            secret_id: col(row, 7)?,
            received_at_ms: as_u64(col(row, 8)?),
            delivered_at_ms: settled_at.filter(|_| state == EventState::Delivered).map(as_u64),
            next_attempt_ms: due
                .filter(|_| matches!(state, EventState::Received | EventState::Failed))
                .map(as_u64),
            last_error: col(row, 11)?,
            seq: as_u64(col(row, 12)?),
            shard: 0,
        })
    }

    /// See [`crate::ledger::Ledger::list_events`]: up to `limit` events matching `query`, in
    /// `(tenant, source, event id)` order, after `cursor`; at most [`LIST_SCAN_MAX`] rows
    /// examined per call.
    ///
    /// # Errors
    /// [`Error::Cursor`] for a cursor this list did not hand out, [`Error::Database`].
    pub fn list_events(
        &self,
        query: &EventQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<EventView>, Error> {
        let cursor = decode_cursor(cursor, "ttt")?;
        self.with_admin(|client| {
            let mut l = Listing {
                columns: VIEW,
                table: "hookwall_events",
                key: "tenant, source, event_id",
                order: "tenant, source, event_id",
                after: ">",
                range: Vec::new(),
                keep: None,
                params: Vec::new(),
            };
            prefix_range(&mut l, query.key_prefix.as_deref(), "");
            if let Some(state) = query.state {
                let s = l.bind(state.code().to_owned());
                l.keep = Some(format!("state = {s}"));
            }
            l.run(client, cursor, limit, 3, |row| self.view(row))
        })
    }

    /// See [`crate::ledger::Ledger::event_detail`]: the event, its body while retained and its
    /// attempt history (oldest first, at most [`ATTEMPT_HISTORY_MAX`]), read in one
    /// transaction.
    ///
    /// # Errors
    /// [`Error::Database`].
    pub fn event_detail(&self, key: &str) -> Result<Option<EventDetail>, Error> {
        let Some((tenant, source, event_id)) = split_key(key) else {
            return Ok(None);
        };
        self.with_admin(|client| {
            let mut tx = client.transaction().map_err(|e| db(&e))?;
            let sql = format!(
                "SELECT {VIEW}, body, content_type, event_type, signed_at FROM hookwall_events
                WHERE tenant = $1 AND source = $2 AND event_id = $3"
            );
            let Some(row) =
                tx.query_opt(&sql, &[&tenant, &source, &event_id]).map_err(|e| db(&e))?
            else {
                return Ok(None);
            };
            let event = self.view(&row)?;
            let history = tx
                .query(
                    "SELECT attempt, at_ms, outcome, error FROM hookwall_attempts WHERE seq = $1
                    ORDER BY at_ms, attempt LIMIT $2",
                    &[&as_i64(event.seq), &i64::try_from(ATTEMPT_HISTORY_MAX).unwrap_or(0)],
                )
                .map_err(|e| db(&e))?;
            tx.commit().map_err(|e| db(&e))?;
            let attempts = history
                .iter()
                .map(|h| {
                    Ok(AttemptRecord {
                        attempt: u32::try_from(col::<i32>(h, 0)?).unwrap_or(0),
                        at_ms: as_u64(col(h, 1)?),
                        outcome: col(h, 2)?,
                        error: col(h, 3)?,
                    })
                })
                .collect::<Result<_, Error>>()?;
            Ok(Some(EventDetail {
                event,
                payload: col(&row, 13)?,
                content_type: col(&row, 14)?,
                event_type: col(&row, 15)?,
                signed_at: col(&row, 16)?,
                attempts,
            }))
        })
    }

    /// See [`crate::ledger::Ledger::quarantine_page`]: newest first.
    ///
    /// # Errors
    /// [`Error::Cursor`], [`Error::Database`].
    pub fn quarantine_page(
        &self,
        key_prefix: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<QuarantineView>, Error> {
        let cursor = decode_cursor(cursor, "itttb")?;
        self.with_admin(|client| {
            let mut l = Listing {
                columns: "q.received_at_ms, q.tenant, q.source, q.event_id, q.fingerprint,
                    COALESCE(q.first_fingerprint, ev.fingerprint)",
                table: "hookwall_quarantine AS q LEFT JOIN hookwall_events AS ev
                    ON ev.tenant = q.tenant AND ev.source = q.source AND ev.event_id = q.event_id",
                key: "q.received_at_ms, q.tenant, q.source, q.event_id, q.fingerprint",
                // Qualified: both tables have these columns (no `keep` filter, so no outer
                // window names them).
                order: "q.received_at_ms DESC, q.tenant DESC, q.source DESC, q.event_id DESC,
                    q.fingerprint DESC",
                after: "<",
                range: Vec::new(),
                keep: None,
                params: Vec::new(),
            };
            prefix_range(&mut l, key_prefix, "q.");
            l.run(client, cursor, limit, 5, |row| {
                let hex = |b: Option<&[u8]>| b.map(hex::encode).unwrap_or_default();
                Ok(QuarantineView {
                    key: format!(
                        "{}/{}/{}",
                        col::<&str>(row, 1)?,
                        col::<&str>(row, 2)?,
                        col::<&str>(row, 3)?
                    ),
                    source: self.source_index(col(row, 1)?, col(row, 2)?, -1),
                    first_fingerprint: hex(col(row, 5)?),
                    new_fingerprint: hex(Some(col(row, 4)?)),
                    received_at_ms: as_u64(col(row, 0)?),
                })
            })
        })
    }

    /// See [`crate::ledger::Ledger::rejected_page`]: newest first, of source index `source`
    /// (all when `None`).
    ///
    /// # Errors
    /// [`Error::Cursor`], [`Error::Database`].
    pub fn rejected_page(
        &self,
        source: Option<u32>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<RejectedView>, Error> {
        let cursor = decode_cursor(cursor, "ii")?;
        let sources = &self.inner.shared.opts.sources;
        self.with_admin(|client| {
            let mut l = Listing {
                columns: "received_at_ms, id, source, reason, event_id, body_bytes, fingerprint",
                table: "hookwall_rejected",
                key: "received_at_ms, id",
                order: "received_at_ms DESC, id DESC",
                after: "<",
                range: Vec::new(),
                keep: None,
                params: Vec::new(),
            };
            if let Some(index) = source {
                let id = sources.get(index as usize).map_or_else(String::new, |(_, s)| s.clone());
                let s = l.bind(id);
                l.keep = Some(format!("source = {s}"));
            }
            l.run(client, cursor, limit, 2, |row| {
                let id: &str = col(row, 2)?;
                let index = sources
                    .iter()
                    .position(|(_, s)| s == id)
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or(u32::MAX);
                Ok(RejectedView {
                    source: index,
                    received_at_ms: as_u64(col(row, 0)?),
                    reason: col(row, 3)?,
                    event_id: col(row, 4)?,
                    body_bytes: as_u64(col(row, 5)?),
                    fingerprint: hex::encode(col::<&[u8]>(row, 6)?),
                })
            })
        })
    }

    /// See [`crate::ledger::Ledger::audit_page`]: operator actions of every node, newest first.
    ///
    /// # Errors
    /// [`Error::Cursor`], [`Error::Database`].
    pub fn audit_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<AuditRecord>, Error> {
        let cursor = decode_cursor(cursor, "ii")?;
        self.with_admin(|client| {
            let l = Listing {
                columns: "at_ms, id, actor, action, event_key, destination, reason, state_before",
                table: "hookwall_audit",
                key: "at_ms, id",
                order: "at_ms DESC, id DESC",
                after: "<",
                range: Vec::new(),
                keep: None,
                params: Vec::new(),
            };
            l.run(client, cursor, limit, 2, |row| {
                Ok(AuditRecord {
                    at_ms: as_u64(col(row, 0)?),
                    actor: col(row, 2)?,
                    action: col(row, 3)?,
                    key: col(row, 4)?,
                    destination: col(row, 5)?,
                    reason: col(row, 6)?,
                    state_before: col(row, 7)?,
                })
            })
        })
    }

    /// See [`crate::ledger::Ledger::append_audit`]: one committed row in `hookwall_audit`.
    ///
    /// # Errors
    /// [`Error::Database`].
    pub fn append_audit(&self, record: &AuditRecord) -> Result<(), Error> {
        self.with_admin(|client| {
            let mut tx = client.transaction().map_err(|e| db(&e))?;
            insert_audit(&mut tx, record).map_err(|e| db(&e))?;
            tx.commit().map_err(|e| db(&e))
        })
    }

    /// Carries out `op` (R20) in one transaction — the row locked, its state checked as
    /// on RocksDB (`replay` from dead, dropped or failed with the body still retained; `drop`
    /// from received, failed or dead), updated, and the audit record inserted — and calls
    /// `op.reply` once after the COMMIT. A replay makes the event due now for every node
    /// (attempts back to 0); a drop settles it. Blocks: call from a blocking thread.
    pub fn operate(&self, op: Operation) {
        let result = if self.inner.shared.stopped.load(Ordering::SeqCst) {
            Err(OpRefused::Unavailable)
        } else {
            match self.with_admin(|client| operate_tx(client, &op).map_err(|e| db(&e))) {
                Ok(result) => result,
                Err(e) => {
                    tracing::error!(code = "ledger_write_failed", error = %e, "A PostgreSQL operator action failed; nothing changed.");
                    Err(OpRefused::Unavailable)
                }
            }
        };
        if let Ok(done) = &result {
            self.count_operation(&op.key, op.action, *done);
        }
        (op.reply)(result);
    }

    /// This node's gauges after an operator action, and the dispatcher's wake-up on a replay.
    fn count_operation(&self, key: &str, action: OpAction, done: OpDone) {
        let shared = &self.inner.shared;
        let ledger = &shared.metrics.ledger;
        let index = split_key(key)
            .and_then(|(t, s, _)| shared.opts.sources.iter().position(|(a, b)| a == t && b == s));
        if let Some(i) = index {
            let unsettled = matches!(done.before, EventState::Received | EventState::Failed);
            let pending = match action {
                OpAction::Replay if !unsettled => 1,
                OpAction::Drop if unsettled => -1,
                _ => 0,
            };
            // This node's view (`mod.rs`): an event another node admitted or dead-lettered is
            // not in it, so a decrement stops at 0 instead of going negative.
            let lower = |g: &std::sync::atomic::AtomicI64| {
                let _ = g.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(1).max(0))
                });
            };
            if let Some(g) = ledger.inbox_pending.get(i) {
                if pending > 0 {
                    g.fetch_add(pending, Ordering::Relaxed);
                } else if pending < 0 {
                    lower(g);
                }
            }
            if let Some(g) = ledger.dlq_depth.get(i).filter(|_| done.before == EventState::Dead) {
                lower(g);
            }
        }
        if action == OpAction::Replay {
            shared.opts.notify.notify_one();
        }
    }
}

/// Inserts `record` into `hookwall_audit` (a random id: no sequence, R20).
fn insert_audit(
    tx: &mut postgres::Transaction<'_>,
    record: &AuditRecord,
) -> Result<u64, postgres::Error> {
    let id = as_i64((rand::random::<u64>() >> 1).max(1));
    tx.execute(
        "INSERT INTO hookwall_audit (at_ms, id, actor, action, event_key, destination, reason,
            state_before) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &as_i64(record.at_ms),
            &id,
            &record.actor,
            &record.action,
            &record.key,
            &record.destination,
            &record.reason,
            &record.state_before,
        ],
    )
}

/// [`PgLedger::operate`]'s transaction; `Ok(Err(…))` is a refusal (rolled back, nothing
/// written).
fn operate_tx(
    client: &mut Client,
    op: &Operation,
) -> Result<Result<OpDone, OpRefused>, postgres::Error> {
    let Some((tenant, source, event_id)) = split_key(&op.key) else {
        return Ok(Err(OpRefused::NotFound));
    };
    let mut tx = client.transaction()?;
    let row = tx.query_opt(
        "SELECT state, body IS NOT NULL FROM hookwall_events
        WHERE tenant = $1 AND source = $2 AND event_id = $3 FOR UPDATE",
        &[&tenant, &source, &event_id],
    )?;
    let Some(row) = row else {
        return Ok(Err(OpRefused::NotFound));
    };
    let Some(before) = EventState::from_code(row.try_get(0)?) else {
        return Ok(Err(OpRefused::Unavailable));
    };
    let allowed = match op.action {
        OpAction::Replay => {
            matches!(before, EventState::Dead | EventState::Dropped | EventState::Failed)
        }
        OpAction::Drop => {
            matches!(before, EventState::Received | EventState::Failed | EventState::Dead)
        }
    };
    if !allowed {
        return Ok(Err(OpRefused::State(before)));
    }
    if op.action == OpAction::Replay && !row.try_get::<_, bool>(1)? {
        return Ok(Err(OpRefused::PayloadGone));
    }
    let now = crate::clock::now_unix_ms();
    let after = match op.action {
        OpAction::Replay => {
            tx.execute(
                "UPDATE hookwall_events SET state = 'received', attempts = 0, due_ms = $4,
                    lease_owner = NULL, settled_at_ms = NULL
                WHERE tenant = $1 AND source = $2 AND event_id = $3",
                &[&tenant, &source, &event_id, &as_i64(now)],
            )?;
            EventState::Received
        }
        OpAction::Drop => {
            tx.execute(
                "UPDATE hookwall_events SET state = 'dropped', due_ms = NULL, lease_owner = NULL,
                    settled_at_ms = $4
                WHERE tenant = $1 AND source = $2 AND event_id = $3",
                &[&tenant, &source, &event_id, &as_i64(now)],
            )?;
            EventState::Dropped
        }
    };
    let audit = AuditRecord {
        at_ms: now,
        actor: op.actor.clone(),
        action: op.action.code().to_owned(),
        key: Some(op.key.clone()),
        destination: None,
        reason: op.reason.clone(),
        state_before: Some(before.code().to_owned()),
    };
    insert_audit(&mut tx, &audit)?;
    tx.commit()?;
    Ok(Ok(OpDone { before, after }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_two_slashes() {
        assert_eq!(split_key("acme/stripe/evt/1"), Some(("acme", "stripe", "evt/1")));
        assert_eq!(split_key("acme/stripe"), None);
    }

    #[test]
    fn like_prefixes_escape_wildcards() {
        assert_eq!(like_prefix("a%b_c\\"), "a\\%b\\_c\\\\%");
    }

    #[test]
    fn cursors_are_checked_against_their_list() {
        assert!(matches!(decode_cursor(Some("zz"), "ii"), Err(Error::Cursor(_))));
        let c = hex::encode(r#"[{"i":5},{"i":7}]"#);
        assert_eq!(
            decode_cursor(Some(&c), "ii").expect("a cursor of this list"),
            Some(vec![CursorValue::Int(5), CursorValue::Int(7)])
        );
        assert!(matches!(decode_cursor(Some(&c), "ttt"), Err(Error::Cursor(_))));
        assert!(matches!(decode_cursor(Some(&c), "it"), Err(Error::Cursor(_))));
        assert_eq!(decode_cursor(None, "ii").expect("no cursor"), None);
    }
}
