//! The PostgreSQL ledger (issue 8): one database shared by several hookwall nodes, so a
//! provider's retry landing on any node is still a duplicate (R16).
//!
//! Same decisions, codes and guarantees as the RocksDB ledger at the same seams: ingress
//! hands [`Admission`]s to [`PgLedger::admit`], the dispatcher reads and settles through
//! [`Inbox`]. Admission: `pool_size - 1` writer threads take admissions from one bounded queue;
//! each drains up to `POSTGRES_COMMIT_BATCH_MAX` and decides them in ONE transaction with ONE multi-row
//! `INSERT … ON CONFLICT DO NOTHING RETURNING` (group commit over the network). The primary
//! key `(tenant, source, event_id)` is the single source of truth: the rows the INSERT did not
//! return already existed (committed, possibly by another node a moment ago: PostgreSQL makes
//! the INSERT wait for a conflicting in-flight transaction), and their stored fingerprint
//! decides duplicate or conflict (quarantined in the same transaction). Replies run after the
//! COMMIT returned; a failed transaction answers its whole batch `Unavailable` (R15).
//!
//! Dispatch: the remaining connection leases due rows with `FOR UPDATE SKIP LOCKED`, moving
//! their `due_ms` to the lease deadline, so rows leased by a node that dies become due again
//! for every node after `ledger.lease`, and are delivered with the same `Idempotency-Key`.
//! Settlements are written by the same connection's thread.
//!
//! Settlements that still held their lease append the attempt to `hookwall_attempts`. The
//! admin API's reads and operator actions run on an admin connection (`admin.rs`); the
//! settlement thread also sweeps what retention expired (`retention.rs`, R25).
//!
//! The gauges `inbox_pending` and `dlq_depth` are this node's view: raised by its admissions,
//! lowered by its settlements (the shared totals are a `SELECT count(*)` away).

mod admin;
mod retention;
pub mod schema;
pub mod tls;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, select, Receiver, Sender};
use postgres::{Client, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::codec::truncate_utf8;
use super::threads::Started;
use super::{
    Admission, Decision, DueEvent, DueSources, Inbox, Outcome, RejectedRecord, Settlement,
};
use crate::limits::{
    ATTEMPT_ERROR_BYTES_MAX, POSTGRES_COMMIT_BATCH_MAX, SETTLE_QUEUE_MAX, SHARD_QUEUE_MAX,
};
use crate::metrics::Metrics;

/// Longest a connection attempt may take before the node counts the database unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Wait before a writer whose connection broke tries to connect again.
const RECONNECT_WAIT: Duration = Duration::from_millis(200);

/// How to open the PostgreSQL ledger.
pub struct PgOptions {
    /// `ledger.url`, parsed, with its TLS connector.
    pub connector: Connector,
    /// `ledger.pool_size` (>= 2): one dispatch connection, the rest admission writers.
    pub pool_size: usize,
    /// `ledger.lease`.
    pub lease: Duration,
    /// `(tenant, source id)` by source index: splits an idempotency key into the identity
    /// columns, and maps a row back to this node's source index.
    pub sources: Vec<(String, String)>,
    /// Notified after a commit that made something due (the dispatcher's wake-up).
    pub notify: Arc<tokio::sync::Notify>,
    /// This node's name in `lease_owner` (diagnostics only; leases are judged by time).
    pub node: String,
    /// Payload and identity retention (R25), swept by every node (`retention.rs`); `None`
    /// keeps everything.
    pub retention: Option<super::Retention>,
}

/// Opening failures.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// Connecting or a start-up statement failed.
    #[error("PostgreSQL: {}", schema::describe(.0))]
    Db(#[from] postgres::Error),
    /// The schema is not the one this binary serves on.
    #[error("{0}")]
    Schema(#[from] schema::SchemaError),
    /// A thread could not be started.
    #[error("cannot start a PostgreSQL ledger thread: {0}")]
    Spawn(std::io::Error),
}

/// `ledger.url` ready to open connections: the driver's configuration (connect timeout
/// [`CONNECT_TIMEOUT`] unless the URL sets one, `application_name = hookwall`) and the TLS
/// connector of its `sslmode` / `sslrootcert` ([`tls`]).
#[derive(Clone)]
pub struct Connector {
    config: postgres::Config,
    tls: MakeRustlsConnect,
}

impl Connector {
    /// Parses `url` and reads its CA file.
    ///
    /// # Errors
    /// The messages of [`tls::Target::parse`] and [`tls::Target::connector`]: they never
    /// contain the URL, which may hold a password.
    pub fn new(url: &str) -> Result<Connector, String> {
        let target = tls::Target::parse(url)?;
        let tls = target.connector()?;
        let mut config = target.config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("hookwall");
        Ok(Connector { config, tls })
    }

    /// This connector for `serve`: each session's statements limited to
    /// [`crate::limits::POSTGRES_STATEMENT_TIMEOUT`] (added to the URL's `options` unless they
    /// set `statement_timeout` themselves) and the socket to
    /// [`crate::limits::POSTGRES_TCP_USER_TIMEOUT`] (unless the URL sets `tcp_user_timeout`).
    #[must_use]
    pub fn serving(mut self) -> Connector {
        let own = self.config.get_options().unwrap_or("").to_owned();
        if !own.contains("statement_timeout") && !own.contains("statement-timeout") {
            let ms = crate::limits::POSTGRES_STATEMENT_TIMEOUT.as_millis();
            let limit = format!("-c statement_timeout={ms}");
            let options = if own.is_empty() { limit } else { format!("{own} {limit}") };
            self.config.options(&options);
        }
        if self.config.get_tcp_user_timeout().is_none() {
            self.config.tcp_user_timeout(crate::limits::POSTGRES_TCP_USER_TIMEOUT);
        }
        self
    }

    /// Where connections go, for messages: `host:port` per configured host (a unix socket
    /// directory as its path), comma-separated. Never the user, password or options.
    pub fn server(&self) -> String {
        let ports = self.config.get_ports();
        let port = |i: usize| ports.get(i).or_else(|| ports.first()).copied().unwrap_or(5432);
        let hosts = self.config.get_hosts().iter().enumerate().map(|(i, host)| match host {
            postgres::config::Host::Tcp(name) => format!("{name}:{}", port(i)),
            postgres::config::Host::Unix(dir) => format!("{}/.s.PGSQL.{}", dir.display(), port(i)),
        });
        let list: Vec<String> = hosts.collect();
        if list.is_empty() {
            "the default server".to_owned()
        } else {
            list.join(", ")
        }
    }

    /// Opens one connection.
    ///
    /// # Errors
    /// The driver's error (unreachable, TLS refused or certificate not trusted,
    /// authentication).
    pub fn connect(&self) -> Result<Client, postgres::Error> {
        self.config.connect(self.tls.clone())
    }
}

/// A dispatch-thread request.
enum Job {
    Settle(Settlement),
    Reject(RejectedRecord),
}

struct Shared {
    opts: PgOptions,
    healthy: AtomicBool,
    stopped: AtomicBool,
    commit_ns: AtomicU64,
    item_ns: AtomicU64,
    writers: usize,
    metrics: Arc<Metrics>,
    rejects_dropped: AtomicU64,
}

struct PgInner {
    shared: Arc<Shared>,
    admit: Sender<Admission>,
    jobs: Sender<Job>,
    stop: Mutex<Vec<Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The dispatcher's lease connection (its scans run on a blocking-pool thread).
    lease: Mutex<Option<Client>>,
    /// The admin API's connection (`admin.rs`), opened on its first request.
    admin: Mutex<Option<Client>>,
}

/// The PostgreSQL ledger handle. Cheap to clone; dropping the last clone stops its threads.
#[derive(Clone)]
pub struct PgLedger {
    inner: Arc<PgInner>,
}

impl PgLedger {
    /// Connects, checks the schema version ([`schema::check`]) and starts `pool_size - 1`
    /// admission writers (`ledger-pg-{n}`) and one settlement thread (`ledger-pg-settle`).
    ///
    /// # Errors
    /// [`PgError::Db`] when the database is unreachable, [`PgError::Schema`] when it is not
    /// migrated to this binary's version, [`PgError::Spawn`] when a thread cannot start (the
    /// threads started before it are then stopped and joined).
    pub fn open(opts: PgOptions, metrics: Arc<Metrics>) -> Result<PgLedger, PgError> {
        let mut lease = opts.connector.connect()?;
        schema::check(&mut lease)?;
        let writers = opts.pool_size.saturating_sub(1).max(1);
        let shared = Arc::new(Shared {
            opts,
            healthy: AtomicBool::new(true),
            stopped: AtomicBool::new(false),
            commit_ns: AtomicU64::new(0),
            item_ns: AtomicU64::new(0),
            writers,
            metrics,
            rejects_dropped: AtomicU64::new(0),
        });
        let (admit_tx, admit_rx) = bounded::<Admission>(SHARD_QUEUE_MAX);
        let (jobs_tx, jobs_rx) = bounded::<Job>(SETTLE_QUEUE_MAX);
        let mut started = Started::default();
        for n in 0..writers {
            let (stop_tx, stop_rx) = bounded::<()>(1);
            let (shared, rx) = (Arc::clone(&shared), admit_rx.clone());
            started
                .spawn(format!("ledger-pg-{n}"), stop_tx, move || {
                    admission_writer(&shared, &rx, &stop_rx);
                })
                .map_err(PgError::Spawn)?;
        }
        let (stop_tx, stop_rx) = bounded::<()>(1);
        let settle_shared = Arc::clone(&shared);
        started
            .spawn("ledger-pg-settle".into(), stop_tx, move || {
                settle_writer(&settle_shared, &jobs_rx, &stop_rx);
            })
            .map_err(PgError::Spawn)?;
        let inner = PgInner {
            shared,
            admit: admit_tx,
            jobs: jobs_tx,
            stop: Mutex::new(started.stops),
            threads: Mutex::new(started.threads),
            lease: Mutex::new(Some(lease)),
            admin: Mutex::new(None),
        };
        Ok(PgLedger { inner: Arc::new(inner) })
    }

    /// Queues `a` for an admission writer without blocking; the writer calls `a.reply` exactly
    /// once, after the COMMIT (R14).
    ///
    /// # Errors
    /// Gives `a` back, its reply NOT called, when the queue (`SHARD_QUEUE_MAX`) is full or the
    /// ledger is shut down: the caller answers 503 `overloaded`.
    #[allow(clippy::result_large_err, reason = "the refused admission goes back by value")]
    pub fn admit(&self, a: Admission) -> Result<(), Admission> {
        if self.inner.shared.stopped.load(Ordering::SeqCst) {
            return Err(a);
        }
        self.inner.admit.try_send(a).map_err(crossbeam_channel::TrySendError::into_inner)
    }

    /// The estimated wait of an admission handed over now (see `Ledger::admission_wait`): the
    /// queue is shared by every writer, so the queue ahead is divided among them.
    pub fn admission_wait(&self) -> Duration {
        let shared = &self.inner.shared;
        let ahead = self.inner.admit.len() / shared.writers;
        super::handle::estimate_wait(
            ahead,
            POSTGRES_COMMIT_BATCH_MAX,
            shared.commit_ns.load(Ordering::Relaxed),
            shared.item_ns.load(Ordering::Relaxed),
        )
    }

    /// The recent time for one commit ([`PgLedger::admission_wait`] with an empty queue).
    pub fn commit_time(&self) -> Duration {
        let shared = &self.inner.shared;
        super::handle::estimate_wait(
            0,
            POSTGRES_COMMIT_BATCH_MAX,
            shared.commit_ns.load(Ordering::Relaxed),
            shared.item_ns.load(Ordering::Relaxed),
        )
    }

    /// An admission was shed on [`PgLedger::admission_wait`]'s word: the learned costs decay
    /// by 1/8 (as the RocksDB ledger's do).
    pub fn shed(&self) {
        let shared = &self.inner.shared;
        for cost in [&shared.commit_ns, &shared.item_ns] {
            let v = cost.load(Ordering::Relaxed);
            cost.store(v - v / 8, Ordering::Relaxed);
        }
    }

    /// Records a refused body, minimised (R23), best effort.
    pub fn reject(&self, r: RejectedRecord) {
        let shared = &self.inner.shared;
        if shared.stopped.load(Ordering::SeqCst)
            || self.inner.jobs.try_send(Job::Reject(r)).is_err()
        {
            shared.rejects_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// False after a failed transaction until a later one succeeds, and after shutdown.
    pub fn healthy(&self) -> bool {
        let shared = &self.inner.shared;
        shared.healthy.load(Ordering::SeqCst) && !shared.stopped.load(Ordering::SeqCst)
    }

    /// Stops accepting, lets each thread finish its current transaction, and joins them.
    /// Items still queued are answered `Unavailable` / `false`. Idempotent.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl PgInner {
    fn shutdown(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        for stop in self.stop.lock().expect("stop list lock is never poisoned").drain(..) {
            let _ = stop.try_send(());
        }
        let threads =
            std::mem::take(&mut *self.threads.lock().expect("thread list lock is never poisoned"));
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me && t.join().is_err() {
                tracing::error!(
                    code = "ledger_writer_panicked",
                    "A PostgreSQL ledger thread ended by panicking."
                );
            }
        }
    }
}

impl Drop for PgInner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Splits `key` (`tenant/source/event id`) of source `index` into its identity columns.
fn identity<'k>(
    sources: &'k [(String, String)],
    index: u32,
    key: &'k str,
) -> Option<(&'k str, &'k str, &'k str)> {
    let (tenant, source) = sources.get(index as usize)?;
    let rest = key.strip_prefix(tenant.as_str())?.strip_prefix('/')?;
    let event_id = rest.strip_prefix(source.as_str())?.strip_prefix('/')?;
    Some((tenant, source, event_id))
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn as_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A connection kept by a thread, reconnected after it broke.
struct Conn {
    connector: Connector,
    client: Option<(Client, Statements)>,
}

/// The statements a thread prepares once per connection.
struct Statements {
    insert: Statement,
    existing: Statement,
    quarantine: Statement,
}

/// The admission INSERT. `order_stamp` (R22) is taken from the database's clock, not the
/// node's: an event whose transaction started after another's committed gets a larger stamp
/// whichever nodes admitted them. `× 2048 + n` keeps a batch's rows in batch order
/// (`POSTGRES_COMMIT_BATCH_MAX` < 2048; µs × 2048 fits an INT8 until about 2112).
const INSERT: &str = "INSERT INTO hookwall_events (tenant, source, event_id, seq, source_index,
        fingerprint, event_type, secret_id, signed_at, received_at_ms, content_type, body,
        state, attempts, due_ms, ordering_value, order_stamp)
    SELECT t, s, e, q, i, f, ty, k, sa, r, ct, b, 'received', 0, $13, o,
        CASE WHEN o IS NULL THEN NULL ELSE
            (extract(epoch FROM statement_timestamp()) * 1000000)::INT8 * 2048 + n END
    FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::INT8[], $5::INT4[], $6::BYTEA[],
        $7::TEXT[], $8::TEXT[], $9::INT8[], $10::INT8[], $11::BYTEA[], $12::BYTEA[],
        $14::TEXT[]) WITH ORDINALITY
        AS x (t, s, e, q, i, f, ty, k, sa, r, ct, b, o, n)
    ON CONFLICT (tenant, source, event_id) DO NOTHING
    RETURNING seq";

const EXISTING: &str = "SELECT ev.tenant, ev.source, ev.event_id, ev.fingerprint
    FROM hookwall_events AS ev
    JOIN unnest($1::TEXT[], $2::TEXT[], $3::TEXT[]) AS x (t, s, e)
        ON ev.tenant = x.t AND ev.source = x.s AND ev.event_id = x.e";

const QUARANTINE: &str = "INSERT INTO hookwall_quarantine (tenant, source, event_id,
        fingerprint, received_at_ms, first_fingerprint)
    SELECT t, s, e, f, $5, ff
    FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BYTEA[], $6::BYTEA[])
        AS x (t, s, e, f, ff)
    ON CONFLICT DO NOTHING";

impl Conn {
    fn get(&mut self) -> Result<&mut (Client, Statements), postgres::Error> {
        if self.client.as_ref().is_some_and(|(c, _)| c.is_closed()) {
            self.client = None;
        }
        if self.client.is_none() {
            let mut c = self.connector.connect()?;
            let statements = Statements {
                insert: c.prepare(INSERT)?,
                existing: c.prepare(EXISTING)?,
                quarantine: c.prepare(QUARANTINE)?,
            };
            self.client = Some((c, statements));
        }
        Ok(self.client.as_mut().expect("connected just above"))
    }
}

/// One admission writer: drain, decide in one transaction, commit, reply.
fn admission_writer(shared: &Shared, rx: &Receiver<Admission>, stop: &Receiver<()>) {
    let mut conn = Conn { connector: shared.opts.connector.clone(), client: None };
    loop {
        let first = select! {
            recv(rx) -> a => match a { Ok(a) => a, Err(_) => return },
            recv(stop) -> _ => break,
        };
        let mut batch = vec![first];
        while batch.len() < POSTGRES_COMMIT_BATCH_MAX {
            match rx.try_recv() {
                Ok(a) => batch.push(a),
                Err(_) => break,
            }
        }
        let started = crate::clock::monotonic();
        let n = batch.len();
        let decisions = match admit_batch(shared, &mut conn, &batch) {
            Ok(d) => {
                shared.healthy.store(true, Ordering::SeqCst);
                d
            }
            Err(e) => {
                shared.healthy.store(false, Ordering::SeqCst);
                tracing::error!(code = "ledger_write_failed", error = %schema::describe(&e), events = n, "PostgreSQL admission transaction failed; its batch is answered unavailable.");
                if conn.client.as_ref().is_none_or(|(c, _)| c.is_closed()) {
                    conn.client = None;
                    std::thread::sleep(RECONNECT_WAIT);
                }
                vec![Decision::Unavailable; n]
            }
        };
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        shared.commit_ns.store(ns, Ordering::Relaxed);
        shared.item_ns.store(ns / u64::try_from(n).unwrap_or(1).max(1), Ordering::Relaxed);
        record_commit(&shared.metrics, ns, n);
        let accepted = decisions.contains(&Decision::Accepted);
        for (a, d) in batch.iter().zip(&decisions) {
            if let Some(g) = shared
                .metrics
                .ledger
                .inbox_pending
                .get(a.source as usize)
                .filter(|_| *d == Decision::Accepted)
            {
                g.fetch_add(1, Ordering::Relaxed);
            }
        }
        // One wake-up per ingress core for the whole batch (see `crate::wake`).
        crate::wake::batched(|| {
            for (a, d) in batch.into_iter().zip(decisions) {
                (a.reply)(d);
            }
        });
        if accepted {
            shared.opts.notify.notify_one();
        }
    }
    // Stopped: whatever is still queued was never decided.
    while let Ok(a) = rx.try_recv() {
        (a.reply)(Decision::Unavailable);
    }
}

fn record_commit(metrics: &Metrics, ns: u64, events: usize) {
    if let Ok(mut h) = metrics.ledger.commit_us.lock() {
        h.saturating_record(ns / 1000);
    }
    if let Ok(mut h) = metrics.ledger.batch_events.lock() {
        h.saturating_record(u64::try_from(events).unwrap_or(u64::MAX));
    }
}

/// Decides `batch` in one transaction; the decisions are in `batch` order.
fn admit_batch(
    shared: &Shared,
    conn: &mut Conn,
    batch: &[Admission],
) -> Result<Vec<Decision>, postgres::Error> {
    let sources = &shared.opts.sources;
    let now_ms = as_i64(crate::clock::now_unix_ms());
    // The first copy of each key in the batch goes into the INSERT; later copies are decided
    // against the binding that wins (a second row for one key in one INSERT is not portable).
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(batch.len());
    let mut decisions = vec![Decision::Unavailable; batch.len()];
    let mut cols = Columns::default();
    let mut seq_of = HashMap::with_capacity(batch.len());
    for (i, a) in batch.iter().enumerate() {
        let Some(id) = identity(sources, a.source, &a.key) else {
            tracing::error!(code = "ledger_key_unsplittable", source = a.source, "An idempotency key does not start with its source's tenant and id; answered unavailable.");
            continue;
        };
        if first.contains_key(a.key.as_str()) {
            continue;
        }
        first.insert(&a.key, i);
        let seq = (rand::random::<u64>() >> 1).max(1);
        seq_of.insert(as_i64(seq), i);
        cols.push(id, as_i64(seq), a);
    }
    let (client, st) = conn.get()?;
    let mut tx = client.transaction()?;
    let inserted = tx.query(
        &st.insert,
        &[
            &cols.tenant,
            &cols.source,
            &cols.event_id,
            &cols.seq,
            &cols.source_index,
            &cols.fingerprint,
            &cols.event_type,
            &cols.secret_id,
            &cols.signed_at,
            &cols.received_at_ms,
            &cols.content_type,
            &cols.body,
            &now_ms,
            &cols.ordering,
        ],
    )?;
    // The winning fingerprint of every key of the batch.
    let mut bound: HashMap<String, [u8; 32]> = HashMap::with_capacity(first.len());
    for row in &inserted {
        if let Some(&i) = seq_of.get(&row.try_get::<_, i64>(0)?) {
            decisions[i] = Decision::Accepted;
            bound.insert(batch[i].key.clone(), batch[i].fingerprint);
        }
    }
    if bound.len() < first.len() {
        let existing = tx.query(&st.existing, &[&cols.tenant, &cols.source, &cols.event_id])?;
        for row in existing {
            let key = format!(
                "{}/{}/{}",
                row.try_get::<_, &str>(0)?,
                row.try_get::<_, &str>(1)?,
                row.try_get::<_, &str>(2)?
            );
            if let Ok(fp) = <[u8; 32]>::try_from(row.try_get::<_, &[u8]>(3)?) {
                bound.entry(key).or_insert(fp);
            }
        }
    }
    let mut q = Columns::default();
    // The fingerprint each quarantined copy was refused against (R11).
    let mut first_bound: Vec<Vec<u8>> = Vec::new();
    for (i, a) in batch.iter().enumerate() {
        if decisions[i] == Decision::Accepted {
            continue;
        }
        let (Some(fp), Some(id)) = (bound.get(&a.key), identity(sources, a.source, &a.key)) else {
            // Not inserted and not found (removed in between): the provider retries.
            continue;
        };
        if *fp == a.fingerprint {
            decisions[i] = Decision::Duplicate;
        } else {
            decisions[i] = Decision::Conflict;
            q.tenant.push(id.0.to_owned());
            q.source.push(id.1.to_owned());
            q.event_id.push(id.2.to_owned());
            q.fingerprint.push(a.fingerprint.to_vec());
            first_bound.push(fp.to_vec());
        }
    }
    if !q.tenant.is_empty() {
        tx.execute(
            &st.quarantine,
            &[&q.tenant, &q.source, &q.event_id, &q.fingerprint, &now_ms, &first_bound],
        )?;
    }
    tx.commit()?;
    Ok(decisions)
}

/// The INSERT's parameter arrays, one element per admitted key.
#[derive(Default)]
struct Columns {
    tenant: Vec<String>,
    source: Vec<String>,
    event_id: Vec<String>,
    seq: Vec<i64>,
    source_index: Vec<i32>,
    fingerprint: Vec<Vec<u8>>,
    event_type: Vec<Option<String>>,
    secret_id: Vec<String>,
    signed_at: Vec<Option<i64>>,
    received_at_ms: Vec<i64>,
    content_type: Vec<Option<Vec<u8>>>,
    body: Vec<Vec<u8>>,
    ordering: Vec<Option<String>>,
}

impl Columns {
    fn push(&mut self, id: (&str, &str, &str), seq: i64, a: &Admission) {
        self.tenant.push(id.0.to_owned());
        self.source.push(id.1.to_owned());
        self.event_id.push(id.2.to_owned());
        self.seq.push(seq);
        self.source_index.push(i32::try_from(a.source).unwrap_or(i32::MAX));
        self.fingerprint.push(a.fingerprint.to_vec());
        self.event_type.push(a.event_type.clone());
        self.secret_id.push(a.secret_id.clone());
        self.signed_at.push(a.signed_at);
        self.received_at_ms.push(as_i64(a.received_at_ms));
        self.content_type.push(a.content_type.clone());
        self.body.push(a.body.clone());
        self.ordering.push(a.ordering.clone());
    }
}

const SETTLE_DELIVERED: &str = "UPDATE hookwall_events SET state = 'delivered', attempts = $2,
    due_ms = NULL, lease_owner = NULL, settled_at_ms = $3 WHERE seq = $1 AND due_ms = $4
    RETURNING source_index, ordering_value IS NOT NULL";
const SETTLE_RETRY: &str = "UPDATE hookwall_events SET state = 'failed', attempts = $2,
    due_ms = $3, lease_owner = NULL, last_error = $5 WHERE seq = $1 AND due_ms = $4";
const SETTLE_DEAD: &str = "UPDATE hookwall_events SET state = 'dead', attempts = $2,
    due_ms = NULL, lease_owner = NULL, settled_at_ms = $3, last_error = $5
    WHERE seq = $1 AND due_ms = $4 RETURNING source_index, ordering_value IS NOT NULL";
/// One settled attempt in the event's history (R20).
const ATTEMPT: &str = "INSERT INTO hookwall_attempts (seq, at_ms, attempt, outcome, error)
    VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";
const REJECT: &str = "INSERT INTO hookwall_rejected (id, source, received_at_ms, reason,
    event_id, body_bytes, fingerprint) VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT DO NOTHING";

/// The settlement thread: drains settlements and rejected records, writes them in one
/// transaction, replies. A settlement guarded by `due_ms = $4` changes nothing when the lease
/// expired and another node leased the event again: that node's attempt settles it (the
/// downstream sees the same `Idempotency-Key` twice, at-least-once, R21).
fn settle_writer(shared: &Shared, rx: &Receiver<Job>, stop: &Receiver<()>) {
    let mut client: Option<Client> = None;
    let every = shared.opts.retention.as_ref().map(retention::sweep_every);
    // Without retention the idle wait only bounds the select; nothing is swept.
    let idle = every.unwrap_or(Duration::from_secs(3600));
    let mut swept_at = crate::clock::monotonic();
    loop {
        let due = every.is_some_and(|e| crate::clock::monotonic().duration_since(swept_at) >= e);
        if due {
            sweep_expired(shared, &mut client);
            swept_at = crate::clock::monotonic();
        }
        let first = select! {
            recv(rx) -> j => match j { Ok(j) => j, Err(_) => return },
            recv(stop) -> _ => break,
            default(idle) => continue,
        };
        let mut batch = vec![first];
        while batch.len() < POSTGRES_COMMIT_BATCH_MAX {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let ok = match settle_batch(shared, &mut client, &batch) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(code = "ledger_write_failed", error = %schema::describe(&e), "PostgreSQL settlement transaction failed; the attempts will be repeated.");
                if client.as_ref().is_none_or(Client::is_closed) {
                    client = None;
                    std::thread::sleep(RECONNECT_WAIT);
                }
                false
            }
        };
        // One wake-up of the dispatcher for the whole transaction (see `crate::wake`).
        crate::wake::batched(|| {
            for job in batch {
                if let Job::Settle(s) = job {
                    (s.reply)(ok);
                }
            }
        });
    }
    while let Ok(job) = rx.try_recv() {
        if let Job::Settle(s) = job {
            (s.reply)(false);
        }
    }
}

/// One retention sweep on the settlement connection (`retention.rs`); a failure is logged and
/// the expired rows wait for the next sweep.
fn sweep_expired(shared: &Shared, client: &mut Option<Client>) {
    if client.as_ref().is_some_and(Client::is_closed) {
        *client = None;
    }
    if client.is_none() {
        match shared.opts.connector.connect() {
            Ok(c) => *client = Some(c),
            Err(e) => {
                tracing::error!(code = "ledger_write_failed", error = %schema::describe(&e), "PostgreSQL retention sweep could not connect; it is retried later.");
                return;
            }
        }
    }
    let c = client.as_mut().expect("connected just above");
    match retention::sweep(shared, c) {
        Ok(0) => {}
        Ok(removed) => tracing::debug!(removed, "Retention removed expired records."),
        Err(e) => {
            tracing::error!(code = "ledger_write_failed", error = %schema::describe(&e), "PostgreSQL retention sweep failed; it is retried later.");
        }
    }
}

fn settle_batch(
    shared: &Shared,
    client: &mut Option<Client>,
    batch: &[Job],
) -> Result<(), postgres::Error> {
    if client.as_ref().is_some_and(Client::is_closed) {
        *client = None;
    }
    if client.is_none() {
        *client = Some(shared.opts.connector.connect()?);
    }
    let c = client.as_mut().expect("connected just above");
    let now_ms = as_i64(crate::clock::now_unix_ms());
    let mut tx = c.transaction()?;
    // (source index, dead) of every event this batch settled: the node's gauges.
    let mut settled = Vec::new();
    // Whether an ordered event left its group (R22): the group's next event may be leased now.
    let mut released = false;
    for job in batch {
        match job {
            Job::Settle(s) => {
                let attempts = i32::try_from(s.attempts).unwrap_or(i32::MAX);
                let (seq, due) = (as_i64(s.seq), as_i64(s.due_ms));
                // A settlement whose lease was lost changes nothing and records no attempt
                // (the node that leased the event again settles it), as on RocksDB.
                let (changed, outcome, at_ms, error) = match &s.outcome {
                    Outcome::Delivered { at_ms } => {
                        let rows =
                            tx.query(SETTLE_DELIVERED, &[&seq, &attempts, &as_i64(*at_ms), &due])?;
                        for r in &rows {
                            released |= r.try_get::<_, bool>(1)?;
                            settled.push((r.try_get::<_, i32>(0)?, false));
                        }
                        (rows.len(), "delivered", as_i64(*at_ms), None)
                    }
                    Outcome::Retry { next_ms, error } => {
                        let next = as_i64(*next_ms);
                        let error = truncate_utf8(error, ATTEMPT_ERROR_BYTES_MAX);
                        let n =
                            tx.execute(SETTLE_RETRY, &[&seq, &attempts, &next, &due, &error])?;
                        (usize::try_from(n).unwrap_or(0), "retry", now_ms, Some(error))
                    }
                    Outcome::Dead { error } => {
                        let error = truncate_utf8(error, ATTEMPT_ERROR_BYTES_MAX);
                        let rows =
                            tx.query(SETTLE_DEAD, &[&seq, &attempts, &now_ms, &due, &error])?;
                        for r in &rows {
                            released |= r.try_get::<_, bool>(1)?;
                            settled.push((r.try_get::<_, i32>(0)?, true));
                        }
                        (rows.len(), "dead", now_ms, Some(error))
                    }
                };
                if changed > 0 {
                    tx.execute(ATTEMPT, &[&seq, &at_ms, &attempts, &outcome, &error])?;
                }
            }
            Job::Reject(r) => {
                let id = as_i64((rand::random::<u64>() >> 1).max(1));
                let source = shared
                    .opts
                    .sources
                    .get(r.source as usize)
                    .map_or_else(String::new, |(_, s)| s.clone());
                let bytes = as_i64(u64::try_from(r.body_bytes).unwrap_or(u64::MAX));
                tx.execute(
                    REJECT,
                    &[
                        &id,
                        &source,
                        &as_i64(r.received_at_ms),
                        &r.reason,
                        &r.event_id,
                        &bytes,
                        &r.fingerprint.as_slice(),
                    ],
                )?;
            }
        }
    }
    tx.commit()?;
    if released {
        shared.opts.notify.notify_one();
    }
    let ledger = &shared.metrics.ledger;
    for (source, dead) in settled {
        let Ok(i) = usize::try_from(source) else { continue };
        if let Some(g) = ledger.inbox_pending.get(i) {
            g.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(g) = ledger.dlq_depth.get(i).filter(|_| dead) {
            g.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// `LEASE` with one more condition on the candidate rows `e` (empty for none): leases due rows,
/// except the seqs in `$5` (this node's attempts in flight). An ordered row (R22) qualifies only
/// as the head of its group: no unsettled row of the group (pending, retrying or leased by any
/// node: `due_ms IS NOT NULL`) has a smaller `(order_stamp, seq)`. A head in flight or waiting
/// for its retry therefore holds its group on every node; delivered or dead-lettered (`due_ms`
/// NULL), it releases it.
macro_rules! lease_sql {
    ($rows:literal) => {
        concat!(
            "UPDATE hookwall_events SET due_ms = $2, lease_owner = $3
    WHERE seq IN (
        SELECT e.seq FROM hookwall_events AS e
        WHERE e.due_ms <= $1 AND e.seq <> ALL($5::INT8[]) ",
            $rows,
            "
            AND (e.ordering_value IS NULL OR NOT EXISTS (
                SELECT 1 FROM hookwall_events AS g
                WHERE g.tenant = e.tenant AND g.source = e.source
                    AND g.ordering_value = e.ordering_value
                    AND g.ordering_value IS NOT NULL AND g.due_ms IS NOT NULL
                    AND (g.order_stamp < e.order_stamp
                        OR (g.order_stamp = e.order_stamp AND g.seq < e.seq))))
        ORDER BY e.due_ms LIMIT $4
        FOR UPDATE SKIP LOCKED)
    RETURNING seq, due_ms, tenant, source, event_id, source_index, attempts, received_at_ms,
        secret_id, signed_at, content_type, body"
        )
    };
}

/// Leases due rows of any source (`lease_sql!`).
const LEASE: &str = lease_sql!("");

/// Leases due rows of the sources `($6[i], $7[i])` (tenant, source id) only: those of one
/// destination that has free attempt slots on this node ([`DueSources::Only`]).
const LEASE_OF_SOURCES: &str = lease_sql!(
    "AND (e.tenant, e.source) IN (SELECT t, s FROM unnest($6::TEXT[], $7::TEXT[]) AS u(t, s))"
);

/// Leases due rows of every source except `($6[i], $7[i])`: those no longer in this node's
/// configuration ([`DueSources::Unconfigured`]).
const LEASE_OF_UNCONFIGURED: &str = lease_sql!(
    "AND (e.tenant, e.source) NOT IN (SELECT t, s FROM unnest($6::TEXT[], $7::TEXT[]) AS u(t, s))"
);

impl PgLedger {
    /// Runs `LEASE` (`sources` None), `LEASE_OF_SOURCES` or `LEASE_OF_UNCONFIGURED` and reads
    /// the leased rows, oldest admission first. A leased row that cannot be read is logged
    /// and left to its lease (read again when it runs out); the others go ahead.
    fn lease(
        &self,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
        sources: Option<DueSources<'_>>,
    ) -> Result<Vec<DueEvent>, String> {
        let shared = &self.inner.shared;
        let configured = &shared.opts.sources;
        let lease_ms = u64::try_from(shared.opts.lease.as_millis()).unwrap_or(u64::MAX);
        let deadline = as_i64(now_ms.saturating_add(lease_ms));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let skip: Vec<i64> = in_flight.iter().map(|&seq| as_i64(seq)).collect();
        let node = &shared.opts.node;
        let rows = self.with_lease(|c| {
            let base: [&(dyn postgres::types::ToSql + Sync); 5] =
                [&as_i64(now_ms), &deadline, node, &limit, &skip];
            let (sql, named): (&str, Vec<&(String, String)>) = match sources {
                None => return c.query(LEASE, &base),
                Some(DueSources::Only(indexes)) => {
                    (LEASE_OF_SOURCES, indexes.iter().filter_map(|&i| configured.get(i)).collect())
                }
                Some(DueSources::Unconfigured) => {
                    (LEASE_OF_UNCONFIGURED, configured.iter().collect())
                }
            };
            let tenants: Vec<&str> = named.iter().map(|(t, _)| t.as_str()).collect();
            let ids: Vec<&str> = named.iter().map(|(_, s)| s.as_str()).collect();
            let mut params = base.to_vec();
            params.push(&tenants);
            params.push(&ids);
            c.query(sql, &params)
        })?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            match due_event(row, configured) {
                Ok(e) => events.push(e),
                // Leased but unreadable (a column changed under the running node): its lease
                // runs out and it is read again then; the others of the scan go ahead.
                Err(e) => tracing::error!(
                    code = "ledger_row_unreadable",
                    error = %schema::describe(&e),
                    "A leased PostgreSQL row could not be read; it is leased again when its lease runs out."
                ),
            }
        }
        events.sort_by_key(|e| (e.received_at_ms, e.seq));
        Ok(events)
    }

    /// Runs `f` on the lease connection, connecting first when needed; a failed statement
    /// drops a broken connection so the next call reconnects.
    fn with_lease<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, String> {
        let mut guard = self.inner.lease.lock().map_err(|_| "lease lock poisoned".to_owned())?;
        if guard.as_ref().is_some_and(Client::is_closed) {
            *guard = None;
        }
        if guard.is_none() {
            *guard =
                Some(self.inner.shared.opts.connector.connect().map_err(|e| schema::describe(&e))?);
        }
        let client = guard.as_mut().expect("connected just above");
        let result = f(client).map_err(|e| schema::describe(&e));
        if result.is_err() && client.is_closed() {
            *guard = None;
        }
        result
    }
}

/// The [`DueEvent`] of one row of `LEASE` (columns in its `RETURNING` order).
///
/// # Errors
/// A column whose type is not the schema's (`postgres::Error` from `try_get`).
fn due_event(
    row: &postgres::Row,
    sources: &[(String, String)],
) -> Result<DueEvent, postgres::Error> {
    let (tenant, source) = (row.try_get::<_, &str>(2)?, row.try_get::<_, &str>(3)?);
    let index = match sources.iter().position(|(t, s)| t == tenant && s == source) {
        Some(i) => u32::try_from(i).unwrap_or(u32::MAX),
        None => u32::try_from(row.try_get::<_, i32>(5)?).unwrap_or(u32::MAX),
    };
    Ok(DueEvent {
        shard: 0,
        seq: as_u64(row.try_get(0)?),
        due_ms: as_u64(row.try_get(1)?),
        key: format!("{tenant}/{source}/{}", row.try_get::<_, &str>(4)?),
        source: index,
        attempts: u32::try_from(row.try_get::<_, i32>(6)?).unwrap_or(0),
        received_at_ms: as_u64(row.try_get(7)?),
        secret_id: row.try_get(8)?,
        signed_at: row.try_get(9)?,
        content_type: row.try_get(10)?,
        body: row.try_get::<_, Option<Vec<u8>>>(11)?.unwrap_or_default(),
        // R22 is decided by the LEASE statement across nodes: only a group's head is ever
        // returned, so the dispatcher need not hold anything back.
        ordering: None,
    })
}

impl Inbox for PgLedger {
    fn shards(&self) -> usize {
        1
    }

    /// Leases up to `limit` due rows of any source (`FOR UPDATE SKIP LOCKED`: rows another
    /// node is leasing right now are skipped, not waited for) by moving their due time to
    /// `now + lease`. `from` is ignored: the partial index on pending rows has no settled head
    /// to skip. Rows in `in_flight` are not leased: an attempt whose retry settlement has
    /// committed but not yet reached the dispatcher is due again after `backoff_min`, and
    /// leasing it then, only to drop it, left it unattempted for a whole lease.
    fn due(
        &self,
        _shard: usize,
        _from: Option<(u64, u64)>,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
    ) -> Result<Vec<DueEvent>, String> {
        self.lease(now_ms, limit, in_flight, None)
    }

    fn leases(&self) -> bool {
        true
    }

    /// [`Inbox::due`] restricted to `sources`: the dispatcher asks per destination for no more
    /// than it can start, so no row of a paused, saturated or failing destination is leased
    /// and then held unattempted for a whole lease, ahead of other destinations' events.
    fn due_of(
        &self,
        _shard: usize,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
        sources: DueSources<'_>,
    ) -> Result<Vec<DueEvent>, String> {
        self.lease(now_ms, limit, in_flight, Some(sources))
    }

    fn next_due_after(&self, _shard: usize, after_ms: u64) -> Option<u64> {
        let row = self
            .with_lease(|c| {
                c.query_one(
                    "SELECT min(due_ms) FROM hookwall_events WHERE due_ms > $1",
                    &[&as_i64(after_ms)],
                )
            })
            .ok()?;
        row.try_get::<_, Option<i64>>(0).ok().flatten().map(as_u64)
    }

    fn settle(&self, settlement: Settlement) -> Result<(), Settlement> {
        if self.inner.shared.stopped.load(Ordering::SeqCst) {
            return Err(settlement);
        }
        self.inner.jobs.try_send(Job::Settle(settlement)).map_err(|e| match e.into_inner() {
            Job::Settle(s) => s,
            Job::Reject(_) => unreachable!("a settlement was sent"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::identity;
    use std::time::Duration;

    /// `serve`'s connections carry the statement and socket limits; what the URL says itself
    /// is kept and wins.
    #[test]
    fn serving_connections_limit_statements_unless_the_url_does() {
        let plain =
            super::Connector::new("postgresql://hw@localhost/hw").expect("a valid URL").serving();
        assert_eq!(plain.config.get_options(), Some("-c statement_timeout=10000"));
        assert_eq!(plain.config.get_tcp_user_timeout(), Some(&Duration::from_secs(10)));
        let url = "postgresql://hw@localhost/hw?options=-c%20search_path%3Dx&tcp_user_timeout=3";
        let own = super::Connector::new(url).expect("a valid URL").serving();
        let options = own.config.get_options();
        assert_eq!(options, Some("-c search_path=x -c statement_timeout=10000"));
        assert_eq!(own.config.get_tcp_user_timeout(), Some(&Duration::from_secs(3)));
        let url = "postgresql://hw@localhost/hw?options=-c%20statement_timeout%3D60000";
        let theirs = super::Connector::new(url).expect("a valid URL").serving();
        assert_eq!(theirs.config.get_options(), Some("-c statement_timeout=60000"));
        let migrate = super::Connector::new("postgresql://hw@localhost/hw").expect("a valid URL");
        assert_eq!(migrate.config.get_options(), None, "hookwall migrate sets no limit");
    }

    #[test]
    fn identity_splits_at_the_configured_tenant_and_source_only() {
        let sources = vec![("acme".to_owned(), "stripe".to_owned())];
        assert_eq!(identity(&sources, 0, "acme/stripe/evt/1"), Some(("acme", "stripe", "evt/1")));
        assert_eq!(identity(&sources, 0, "acme/github/evt"), None);
        assert_eq!(identity(&sources, 1, "acme/stripe/evt"), None);
    }
}
