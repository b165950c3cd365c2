//! The forwarding client for plain `http://` destinations: a few keep-alive HTTP/1.1
//! connections per destination, each owned by one task on the dispatcher's runtime, each
//! carrying up to `pipeline` requests in flight (RFC 9112 §9.3.2: requests are written back to
//! back, answers come back in request order). `https://` and NATS destinations keep their own
//! clients (`attempt.rs`, `nats.rs`).
//!
//! Why not the general-purpose client here: forwarding is the dispatcher's whole job, and at
//! tens of thousands of events per second its per-request cost (a spawned task, URL parsing,
//! header maps, a pool checkout, one `writev` and one `recv` per request) was the largest share
//! of the server CPU (docs/benchmarks.md). Here a request is one buffer built by
//! `attempt::request_bytes`, a batch of pipelined requests is one `write`, and a `read`
//! usually brings several answers; answers are parsed with `httparse`.
//!
//! Failure rules (at-least-once, R21 — the destination dedupes on `Idempotency-Key`):
//! * a request not answered before its deadline gets [`AttemptResult::Timeout`]; its connection
//!   is closed (the answers behind it cannot be matched any more);
//! * when a connection is lost, requests written on it and not answered are written again once
//!   on a new connection if they may never have reached the destination (pipelined behind
//!   another, or sent on a reused keep-alive connection the server had just closed); otherwise,
//!   or the second time, they get [`AttemptResult::Other`];
//! * after an answer the server ends the connection with (`Connection: close`, HTTP/1.0, a
//!   close-delimited body, RFC 9112 §9.6), or an answer given before its request was fully
//!   written, the requests behind it were never processed: they are queued again without
//!   using their one resend; a server that closes after its *first* answer with requests
//!   pipelined behind is not pipelined to (depth 1) until a connection keeps alive twice;
//! * a connection that cannot be made gives [`AttemptResult::Connect`] to the requests waiting
//!   for it ([`AttemptResult::NoDescriptor`] when this process is out of descriptors);
//! * answers are bounded (64 KiB head, 128 headers, 192 KiB unended) and idle connections
//!   close after 60 s.
//!
//! Writes and reads run in one event loop, so an answer that comes before the request was
//! read (413 to a large body) is taken at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::attempt::{short, RESPONSE_BODY_BYTES_MAX};
use super::classify::AttemptResult;

/// Most bytes of an answer's status line and headers.
const HEAD_BYTES_MAX: usize = 64 * 1024;
/// Most headers in an answer.
const HEADERS_MAX: usize = 128;
/// Most bytes buffered for one answer that has not ended (head, the body bytes kept for
/// framing, chunk-size lines and trailers): past it the answer is refused as malformed, so a
/// destination cannot make the dispatcher buffer without bound.
const ANSWER_BUFFER_MAX: usize = HEAD_BYTES_MAX + RESPONSE_BODY_BYTES_MAX + 64 * 1024;
/// A connection's read or write buffer that grew past this (a large request or answer) is
/// given back once empty instead of being kept for the life of the process.
const BUFFER_KEEP_BYTES: usize = 256 * 1024;
/// Initial capacity of a connection's read buffer (several small answers fit).
const READ_BUFFER_BYTES: usize = 16 * 1024;
/// Most requests a destination may pipeline on one connection (`pipeline`).
pub const PIPELINE_MAX: usize = 64;
/// An idle keep-alive connection is closed after this long (a firewall or NAT that forgets
/// idle flows silently would otherwise turn the next request into a timeout).
const KEEP_ALIVE_IDLE_MAX: Duration = Duration::from_secs(60);

/// Where a plain-HTTP destination's requests go, parsed once from its URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// Host name or address to connect to (IPv6 without brackets).
    host: String,
    /// TCP port (80 when the URL names none).
    port: u16,
    /// `Host` header value: the URL's host, and its port when the URL names one.
    authority: String,
    /// Request target: path and query (the fragment is never sent).
    pub(super) target: String,
}

impl Endpoint {
    /// The endpoint of an `http://` URL; `None` for any other scheme or an unparseable URL
    /// (configuration validation refuses those before this runs).
    pub(super) fn parse(url: &str) -> Option<Endpoint> {
        let u = reqwest::Url::parse(url).ok()?;
        if u.scheme() != "http" {
            return None;
        }
        let host_str = u.host_str()?;
        let port = u.port_or_known_default()?;
        let authority = match u.port() {
            Some(p) => format!("{host_str}:{p}"),
            None => host_str.to_owned(),
        };
        let host = host_str.trim_start_matches('[').trim_end_matches(']').to_owned();
        let mut target = u.path().to_owned();
        if let Some(q) = u.query() {
            target.push('?');
            target.push_str(q);
        }
        Some(Endpoint { host, port, authority, target })
    }

    /// The `Host` header value.
    pub(super) fn authority(&self) -> &str {
        &self.authority
    }
}

/// One request handed to a connection: its bytes, when it must be answered by, and where the
/// result goes.
pub(super) struct Job {
    /// The whole request: head and body (`attempt::request_bytes`).
    pub request: Vec<u8>,
    /// Answer deadline (the destination's `timeout` from the attempt's start).
    pub deadline: Instant,
    /// Receives the attempt's result exactly once.
    pub reply: Reply,
}

/// Where an attempt's result goes, exactly once.
pub(super) enum Reply {
    /// A task waiting for it; dropped unanswered, the task hears of it.
    Task(oneshot::Sender<AttemptResult>),
    /// Straight to the dispatcher loop (`engine::Done`), with no task per attempt; dropped
    /// unanswered, it reports the connection task's end.
    Loop(super::engine::DoneSlot),
}

impl Reply {
    /// Delivers `result`.
    pub(super) fn send(self, result: AttemptResult) {
        match self {
            Reply::Task(tx) => {
                let _ = tx.send(result);
            }
            Reply::Loop(slot) => slot.complete(result),
        }
    }
}

impl From<oneshot::Sender<AttemptResult>> for Reply {
    fn from(tx: oneshot::Sender<AttemptResult>) -> Reply {
        Reply::Task(tx)
    }
}

/// A destination's connections: `ceil(concurrency_max / pipeline)` of them, each a task that
/// ends when this route is dropped and its last request is answered.
pub(super) struct Route {
    links: Vec<Link>,
    /// Requests in flight on one connection (the destination's `pipeline`, 1..=64).
    pipeline: usize,
    /// Connections made so far (shared with the connection tasks).
    connects: Arc<AtomicU64>,
}

/// How many connections the `http://` destinations hold open (or are connecting) together: at
/// most the descriptors kept for them (`ingress::destination_connections_max`, a quarter of the
/// descriptor limit), which `config::fit_connections` fits their `concurrency_max` to. The fit
/// bounds the routes of one configuration; the gate bounds also a reload's replaced routes,
/// whose connections finish their requests beside their successors' (before, up to twice the
/// budget: the process ran out of descriptors, `EMFILE`). Under a large limit nobody waits
/// here; under a fitted one, a successor's connections open as the old ones close, and a
/// request whose deadline passes while waiting gets [`AttemptResult::NoDescriptor`] (not made,
/// not counted).
pub(super) struct Gate {
    /// Connections open or connecting.
    open: AtomicUsize,
    /// The budget (connections).
    limit: usize,
    /// Notified when a connection closes.
    freed: tokio::sync::Notify,
}

/// One connection counted by a [`Gate`], until dropped.
struct Opened(Arc<Gate>);

impl Drop for Opened {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify_waiters();
    }
}

impl Gate {
    /// A gate for at most `limit` connections (at least 1).
    pub(super) fn new(limit: usize) -> Gate {
        Gate { open: AtomicUsize::new(0), limit: limit.max(1), freed: tokio::sync::Notify::new() }
    }

    /// Counts one more connection if the budget allows it now.
    fn try_open(self: &Arc<Self>) -> Option<Opened> {
        let limit = self.limit;
        let counted = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1));
        counted.ok().map(|_| Opened(Arc::clone(self)))
    }

    /// Counts one more connection as soon as the budget allows it, or `None` at `deadline`.
    async fn open(self: &Arc<Self>, deadline: Instant) -> Option<Opened> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check: a close between the two still wakes this wait.
            freed.as_mut().enable();
            if let Some(opened) = self.try_open() {
                return Some(opened);
            }
            tokio::time::timeout_at(deadline, freed).await.ok()?;
        }
    }

    /// Connections open or connecting now.
    #[cfg(test)]
    fn open_now(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

struct Link {
    jobs: mpsc::UnboundedSender<Job>,
    state: Arc<LinkState>,
}

/// What [`Route::send`] and the dispatcher read of one connection task, shared with it.
#[derive(Default)]
struct LinkState {
    /// Requests handed to this link and not yet answered.
    load: AtomicUsize,
    /// Whether its connection is open: a request handed to it needs no new descriptor.
    connected: AtomicBool,
    /// Until when (nanoseconds of [`ticks`]; 0: not) it is passed over by [`Route::send`]
    /// while another link has room: its last connect found no descriptor.
    starved_until: AtomicU64,
}

impl LinkState {
    /// Whether the link is passed over at `now` (read once per send, and only when some link
    /// was starved).
    fn starved(&self, now: &mut Option<u64>) -> bool {
        let until = self.starved_until.load(Ordering::Relaxed);
        until != 0 && *now.get_or_insert_with(|| ticks(crate::clock::monotonic())) < until
    }
}

/// `t` as nanoseconds since the first call (a process-wide monotonic base), for instants kept
/// in atomics.
fn ticks(t: std::time::Instant) -> u64 {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(crate::clock::monotonic);
    u64::try_from(t.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX).max(1)
}

impl Route {
    /// Starts the connection tasks on the current tokio runtime (connections are made on first
    /// use), under a budget of its own, a link starved of descriptors passed over for 1 s.
    /// `concurrency` and `pipeline` are at least 1.
    #[cfg(test)]
    pub(super) fn new(endpoint: Endpoint, concurrency: usize, pipeline: usize) -> Route {
        let gate = Arc::new(Gate::new(usize::MAX));
        Route::gated(endpoint, concurrency, pipeline, &gate, Duration::from_secs(1))
    }

    /// [`Route::new`] with its connections counted by `gate`, the budget all destinations'
    /// routes share; a link whose connect found no descriptor is passed over for `starve_for`
    /// (the destination's `classify::no_descriptor_wait`) while another link has room.
    pub(super) fn gated(
        endpoint: Endpoint,
        concurrency: usize,
        pipeline: usize,
        gate: &Arc<Gate>,
        starve_for: Duration,
    ) -> Route {
        Route::with_idle_max(endpoint, concurrency, pipeline, KEEP_ALIVE_IDLE_MAX, gate, starve_for)
    }

    /// A route with idle connections closed after `idle_max`, counted by `gate`.
    fn with_idle_max(
        endpoint: Endpoint,
        concurrency: usize,
        pipeline: usize,
        idle_max: Duration,
        gate: &Arc<Gate>,
        starve_for: Duration,
    ) -> Route {
        let endpoint = Arc::new(endpoint);
        let pipeline = pipeline.clamp(1, PIPELINE_MAX);
        let count = concurrency.max(1).div_ceil(pipeline);
        let connects = Arc::new(AtomicU64::new(0));
        let links = (0..count)
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                let state = Arc::new(LinkState::default());
                let mut conn = Connection::new(
                    Arc::clone(&endpoint),
                    rx,
                    pipeline,
                    Arc::clone(&state),
                    Arc::clone(gate),
                );
                conn.idle_max = idle_max;
                conn.starve_for = starve_for;
                conn.connects = Arc::clone(&connects);
                tokio::spawn(conn.run());
                Link { jobs: tx, state }
            })
            .collect();
        Route { links, pipeline, connects }
    }

    /// Hands `job` to the least loaded connection among those with room (fewer than
    /// `pipeline` requests) that were not starved of descriptors in the last `starve_for`;
    /// when none is, to the least loaded of all. So while this process is short of
    /// descriptors the destination's open connections carry its requests, instead of links
    /// that would fail at once for want of a descriptor (before, those had load 0 and were
    /// picked first); with descriptors to spare, the choice is the least loaded, as before.
    pub(super) fn send(&self, job: Job) {
        let mut now = None;
        let link = self.links.iter().min_by_key(|l| {
            let load = l.state.load.load(Ordering::Relaxed);
            (load >= self.pipeline || l.state.starved(&mut now), load)
        });
        let Some(link) = link else {
            job.reply.send(AttemptResult::Other("no connection".to_owned()));
            return;
        };
        link.state.load.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = link.jobs.send(job) {
            link.state.load.fetch_sub(1, Ordering::Relaxed);
            e.0.reply.send(AttemptResult::Other("connection task ended".to_owned()));
        }
    }

    /// Requests this route's open connections can carry now without a new descriptor: open
    /// connections × `pipeline`. The dispatcher's cap for the destination while the process
    /// is out of descriptors (`engine::Engine::cap`).
    pub(super) fn open_capacity(&self) -> usize {
        let open = self.links.iter().filter(|l| l.state.connected.load(Ordering::Relaxed));
        open.count().saturating_mul(self.pipeline)
    }

    /// Connections this route has made so far: one more than the dispatcher saw when an
    /// attempt found no descriptor means descriptors are to be had again.
    pub(super) fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }
}

/// When a connect last failed for want of a descriptor was logged (milliseconds of
/// [`crate::clock::now_unix_ms`]; 0: never).
static OUT_OF_DESCRIPTORS_LOGGED_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Logs at warn (`destination_out_of_descriptors`, at most every 10 s) a connect that failed
/// for want of a descriptor (`EMFILE`, `ENFILE`): hookwall's own limit, not the destination's
/// fault: the attempt is not counted ([`AttemptResult::NoDescriptor`],
/// `classify::connect_failed`, for `http://` and `https://` destinations alike).
pub(super) fn warn_if_out_of_descriptors(e: &std::io::Error) {
    if out_of_descriptors_to_log(e, crate::clock::now_unix_ms(), &OUT_OF_DESCRIPTORS_LOGGED_MS) {
        tracing::warn!(code = "destination_out_of_descriptors", error = %e, "A connection to a destination failed for want of a file descriptor; raise the descriptor limit (systemd LimitNOFILE=, ulimit -n) or lower concurrency_max (logged at most every 10 s).");
    }
}

/// Whether connect error `e` at `now_ms` is to be logged: out of descriptors, and none logged
/// in the 10 s before (`last_ms`, updated when it is).
fn out_of_descriptors_to_log(
    e: &std::io::Error,
    now_ms: u64,
    last_ms: &std::sync::atomic::AtomicU64,
) -> bool {
    if !matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        return false;
    }
    let now = now_ms.max(1);
    let last = last_ms.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < 10_000 {
        return false;
    }
    last_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}

/// A request queued or written on the current connection and not yet answered.
struct Sent {
    job: Job,
    /// Whether it may be written again on a new connection if this one is lost unanswered.
    resend_ok: bool,
    /// Where its bytes end in the connection's outgoing stream (`Connection::queued` count).
    end: u64,
}

/// One connection's task state.
struct Connection {
    endpoint: Arc<Endpoint>,
    jobs: mpsc::UnboundedReceiver<Job>,
    /// Requests in flight now: `pipeline`, or 1 after an HTTP/1.0-style close.
    depth: usize,
    /// The destination's `pipeline`.
    pipeline: usize,
    /// What the route reads of this connection (load, open, starved).
    link: Arc<LinkState>,
    /// How long a connect that found no descriptor keeps the link passed over.
    starve_for: Duration,
    /// The route's count of connections made.
    connects: Arc<AtomicU64>,
    stream: Option<TcpStream>,
    /// The destinations' connection budget, and this connection's place in it while `stream`
    /// is open or being connected.
    gate: Arc<Gate>,
    opened: Option<Opened>,
    /// Answers completed on the current connection (0 = fresh).
    served: usize,
    /// Waiting to be written (and whether each may still be resent after a loss).
    unsent: VecDeque<(Job, bool)>,
    sent: VecDeque<Sent>,
    read: Vec<u8>,
    /// Outgoing bytes not yet written; `write[..written]` are already on the wire.
    write: Vec<u8>,
    written: usize,
    /// Bytes queued on the current connection so far (`Sent::end` counts in these), and
    /// bytes written so far.
    queued: u64,
    sent_bytes: u64,
    /// The route was dropped: finish what is queued, then end.
    closing: bool,
    /// Last write or answer on the current connection (for `idle_max`).
    active_at: Instant,
    idle_max: Duration,
    /// How far the answer at the start of `read` has been parsed.
    progress: Progress,
}

/// What losing a connection means for the requests on it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// The server closed or reset the connection, or the answer was unreadable.
    Broken,
    /// The head request timed out; the others are resent.
    Timeout,
}

impl Connection {
    fn new(
        endpoint: Arc<Endpoint>,
        jobs: mpsc::UnboundedReceiver<Job>,
        depth: usize,
        link: Arc<LinkState>,
        gate: Arc<Gate>,
    ) -> Connection {
        Connection {
            endpoint,
            jobs,
            depth,
            pipeline: depth,
            link,
            starve_for: Duration::from_secs(1),
            connects: Arc::default(),
            stream: None,
            gate,
            opened: None,
            served: 0,
            unsent: VecDeque::new(),
            sent: VecDeque::new(),
            // Allocated on first read: a destination with a large `concurrency_max` has as many
            // connection tasks, most never used.
            read: Vec::new(),
            write: Vec::new(),
            written: 0,
            queued: 0,
            sent_bytes: 0,
            closing: false,
            active_at: Instant::from_std(crate::clock::monotonic()),
            idle_max: KEEP_ALIVE_IDLE_MAX,
            progress: Progress::default(),
        }
    }

    fn busy(&self) -> usize {
        self.unsent.len() + self.sent.len()
    }

    fn reply(&self, job: Job, result: AttemptResult) {
        self.link.load.fetch_sub(1, Ordering::Relaxed);
        job.reply.send(result);
    }

    async fn run(mut self) {
        loop {
            // Everything handed to this connection waits here (written `depth` at a time), so
            // every waiting request's deadline is watched.
            while !self.closing {
                match self.jobs.try_recv() {
                    Ok(job) => self.unsent.push_back((job, true)),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => self.closing = true,
                }
            }
            if self.closing && self.busy() == 0 {
                return;
            }
            self.expire_unsent();
            if !self.unsent.is_empty() && self.sent.len() < self.depth {
                self.queue_unsent().await;
                continue;
            }
            let reading = self.stream.is_some();
            let writing = reading && self.written < self.write.len();
            // The head request's deadline; on an idle connection, its idle limit. The head's
            // is the earliest of those written: every job of a route has the destination's one
            // `timeout` (a reload that changes it makes a new route, `engine::RouteEntry`), so
            // deadlines grow in send order, and a resent job goes back in front.
            let deadline = match self.sent.front() {
                Some(s) => {
                    let waiting = self.unsent.iter().map(|(j, _)| j.deadline).min();
                    Some(waiting.map_or(s.job.deadline, |w| w.min(s.job.deadline)))
                }
                None if reading => Some(self.active_at + self.idle_max),
                None => None,
            };
            let can_take = !self.closing;
            tokio::select! {
                job = self.jobs.recv(), if can_take => match job {
                    Some(job) => self.unsent.push_back((job, true)),
                    None => self.closing = true,
                },
                n = read_some(self.stream.as_ref(), &mut self.read), if reading => match n {
                    Ok(Some(0)) => self.lose(Loss::Broken, "connection closed by the destination"),
                    Ok(Some(_)) => self.answers(),
                    Ok(None) => {}
                    Err(e) => self.lose(Loss::Broken, &e.to_string()),
                },
                // Writing never blocks reading: a destination may answer (say 413) before it
                // has read a large request, and stop reading.
                n = write_some(self.stream.as_ref(), &self.write[self.written..]), if writing => {
                    match n {
                        Ok(n) => self.wrote(n),
                        Err(e) => {
                            self.read_pending();
                            if self.stream.is_some() {
                                self.lose(Loss::Broken, &e.to_string());
                            }
                        }
                    }
                }
                () = sleep_until(deadline), if deadline.is_some() => {
                    let now = Instant::from_std(crate::clock::monotonic());
                    if self.sent.front().is_some_and(|s| s.job.deadline > now) {
                        // A queued request's deadline: `expire_unsent` at the loop's top.
                    } else if self.sent.is_empty() {
                        self.drop_stream();
                    } else {
                        self.lose(Loss::Timeout, "connection closed after an attempt timed out");
                    }
                }
            }
        }
    }

    /// Requests whose deadline passed before they could be written time out.
    fn expire_unsent(&mut self) {
        self.expire_unsent_as(|| AttemptResult::Timeout);
    }

    /// This link found no descriptor for a connection: [`Route::send`] passes it over for
    /// `starve_for` while another link has room.
    fn starve(&self) {
        let until = ticks(crate::clock::monotonic() + self.starve_for);
        self.link.starved_until.store(until, Ordering::Relaxed);
    }

    /// Requests whose deadline passed while their connection waited for the descriptor
    /// budget ([`Gate`]) were never attempted: [`AttemptResult::NoDescriptor`].
    fn expire_unsent_for_want_of_a_descriptor(&mut self) {
        let why = "the destinations' descriptor budget was in use";
        self.expire_unsent_as(|| AttemptResult::NoDescriptor(why.to_owned()));
    }

    /// Answers `result()` to every unsent request whose deadline has passed.
    fn expire_unsent_as(&mut self, result: impl Fn() -> AttemptResult) {
        let now = Instant::from_std(crate::clock::monotonic());
        while let Some(i) = self.unsent.iter().position(|(j, _)| j.deadline <= now) {
            if let Some((job, _)) = self.unsent.remove(i) {
                self.reply(job, result());
            }
        }
    }

    /// Connects if needed and queues every unsent request for writing (the loop writes them
    /// while it reads answers).
    async fn queue_unsent(&mut self) {
        let Some(first) = self.unsent.iter().map(|(j, _)| j.deadline).min() else { return };
        if self.stream.is_none() {
            if self.opened.is_none() {
                // Waits only while the budget is in use (a reload's replaced routes).
                let Some(opened) = self.gate.open(first).await else {
                    self.starve();
                    self.expire_unsent_for_want_of_a_descriptor();
                    return;
                };
                self.opened = Some(opened);
            }
            let addr = (self.endpoint.host.as_str(), self.endpoint.port);
            match tokio::time::timeout_at(first, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    self.stream = Some(stream);
                    self.link.connected.store(true, Ordering::Relaxed);
                    self.link.starved_until.store(0, Ordering::Relaxed);
                    self.connects.fetch_add(1, Ordering::Relaxed);
                    self.served = 0;
                    self.read.clear();
                    self.write.clear();
                    (self.written, self.queued, self.sent_bytes) = (0, 0, 0);
                }
                Ok(Err(e)) => {
                    self.opened = None;
                    let result = super::classify::connect_failed(&e, short(&e.to_string()));
                    if !super::classify::counts_as_attempt(&result) {
                        self.starve();
                    }
                    while let Some((job, _)) = self.unsent.pop_front() {
                        self.reply(job, result.clone());
                    }
                    return;
                }
                Err(_) => {
                    self.opened = None;
                    self.expire_unsent();
                    return;
                }
            }
        }
        // A request on a connection that already served answers may meet the server's
        // keep-alive close: it may be resent once. So may one pipelined behind another.
        let reused = self.served > 0 || !self.sent.is_empty();
        let mut behind = false;
        while self.sent.len() < self.depth {
            let Some((job, resend_ok)) = self.unsent.pop_front() else { break };
            self.write.extend_from_slice(&job.request);
            self.queued += job.request.len() as u64;
            let resend_ok = resend_ok && (reused || behind);
            self.sent.push_back(Sent { job, resend_ok, end: self.queued });
            behind = true;
        }
        self.active_at = Instant::from_std(crate::clock::monotonic());
    }

    /// `n` more outgoing bytes are on the wire.
    fn wrote(&mut self, n: usize) {
        self.written += n;
        self.sent_bytes += n as u64;
        if self.written == self.write.len() {
            self.write.clear();
            self.written = 0;
            if self.write.capacity() > BUFFER_KEEP_BYTES {
                self.write = Vec::new();
            }
        }
        self.active_at = Instant::from_std(crate::clock::monotonic());
    }

    /// Completes every whole answer in the read buffer, in request order.
    fn answers(&mut self) {
        loop {
            let answer = match parse_answer(&self.read, &mut self.progress) {
                Ok(Some(a)) => {
                    // Taken (drained, or the connection ends): the next answer starts afresh.
                    self.progress = Progress::default();
                    a
                }
                Ok(None) if self.read.len() > ANSWER_BUFFER_MAX => {
                    self.lose(Loss::Broken, "answer too long (no end within 192 KiB)");
                    return;
                }
                Ok(None) => break,
                Err(why) => {
                    self.lose(Loss::Broken, &why);
                    return;
                }
            };
            if self.sent.is_empty() {
                // An answer nobody asked for: the connection cannot be trusted any more.
                self.lose(Loss::Broken, "unexpected answer from the destination");
                return;
            }
            if (100..200).contains(&answer.code) && answer.code != 101 {
                // Interim answer (100 Continue, 103 Early Hints): the final one follows.
                self.read.drain(..answer.len);
                continue;
            }
            let Some(sent) = self.sent.pop_front() else { return };
            let unsent_tail = self.sent_bytes < sent.end;
            let result =
                AttemptResult::Status { code: answer.code, retry_after: answer.retry_after };
            self.reply(sent.job, result);
            self.served += 1;
            self.active_at = Instant::from_std(crate::clock::monotonic());
            if unsent_tail || answer.announced {
                // The connection ends here: after an announced close the server processes
                // nothing more (RFC 9112 §9.6); after an early answer the rest of the request
                // would be read as a new one. The requests behind were never processed: they
                // go out again on a new connection without using their one resend.
                if answer.announced && self.served == 1 && !self.sent.is_empty() {
                    // Closed after its first answer with requests pipelined behind (an
                    // HTTP/1.0-style server): one request per connection until a connection
                    // keeps alive again. (A close after many answers — nginx's
                    // `keepalive_requests` — is connection rotation, not this.)
                    self.depth = 1;
                }
                self.end_and_requeue();
                return;
            }
            if answer.close {
                // Ended by this side (a body too large to read): the requests behind may have
                // been processed, as on a broken connection.
                self.lose(Loss::Broken, "connection closed after an answer too large to read");
                return;
            }
            if self.served >= 2 && self.depth < self.pipeline {
                self.depth = self.pipeline;
            }
            self.read.drain(..answer.len);
        }
        if self.read.is_empty() && self.read.capacity() > BUFFER_KEEP_BYTES {
            self.read = Vec::with_capacity(READ_BUFFER_BYTES);
        }
    }

    /// Drops the connection after a final answer; the unanswered requests behind it are
    /// queued again, ahead of new ones, with their resend allowance unchanged.
    fn end_and_requeue(&mut self) {
        self.drop_stream();
        while let Some(sent) = self.sent.pop_back() {
            self.unsent.push_front((sent.job, sent.resend_ok));
        }
    }

    /// Closes the connection and forgets its bytes (large buffers are given back).
    fn drop_stream(&mut self) {
        self.stream = None;
        self.link.connected.store(false, Ordering::Relaxed);
        self.opened = None;
        self.progress = Progress::default();
        for buf in [&mut self.read, &mut self.write] {
            buf.clear();
            if buf.capacity() > BUFFER_KEEP_BYTES {
                *buf = Vec::new();
            }
        }
        (self.written, self.queued, self.sent_bytes) = (0, 0, 0);
    }

    /// After a failed write: reads and completes the answers already received (a destination
    /// may answer 413 and close before reading a large request), without waiting.
    fn read_pending(&mut self) {
        let Some(stream) = self.stream.as_ref() else { return };
        // Straight to recv(2): tokio's `try_read_buf` answers WouldBlock until its reactor has
        // seen the socket readable, which it may not have yet.
        loop {
            match recv_now(stream, &mut self.read) {
                Ok(0) | Err(_) => break,
                Ok(_) if self.read.len() > ANSWER_BUFFER_MAX => break,
                Ok(_) => {}
            }
        }
        self.answers();
    }

    /// Drops the connection. The head request gets `why` (a timeout when `loss` is one) unless
    /// it may be resent; requests behind it are resent once.
    fn lose(&mut self, loss: Loss, why: &str) {
        self.drop_stream();
        let mut first = true;
        let mut resend = Vec::new();
        while let Some(sent) = self.sent.pop_front() {
            let head = std::mem::replace(&mut first, false);
            if head && loss == Loss::Timeout {
                self.reply(sent.job, AttemptResult::Timeout);
            } else if sent.resend_ok {
                resend.push((sent.job, false));
            } else {
                self.reply(sent.job, AttemptResult::Other(short(why)));
            }
        }
        for job in resend.into_iter().rev() {
            self.unsent.push_front(job);
        }
    }
}

/// Reads what is available into `buf` once the socket is readable: `Some(0)` at the end of
/// the stream, `None` after a spurious wake-up. An absent stream never completes.
async fn read_some(
    stream: Option<&TcpStream>,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<usize>> {
    let Some(s) = stream else { return std::future::pending().await };
    s.readable().await?;
    buf.reserve(READ_BUFFER_BYTES);
    match s.try_read_buf(buf) {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// One non-blocking `recv(2)` into `buf`'s spare capacity (`READ_BUFFER_BYTES` reserved).
fn recv_now(stream: &TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    buf.reserve(READ_BUFFER_BYTES);
    let spare = buf.spare_capacity_mut();
    // SAFETY: recv writes at most `spare.len()` bytes into the vector's spare capacity; the
    // length is then raised by exactly the count it reports as written.
    let n = unsafe {
        libc::recv(stream.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), libc::MSG_DONTWAIT)
    };
    let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    // SAFETY: see above; `n <= spare.len()`.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Writes what the socket takes of `buf` once it is writable (0 after a spurious wake-up).
/// An absent stream never completes.
async fn write_some(stream: Option<&TcpStream>, buf: &[u8]) -> std::io::Result<usize> {
    let Some(s) = stream else { return std::future::pending().await };
    s.writable().await?;
    match s.try_write(buf) {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One whole answer at the start of a read buffer.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    code: u16,
    retry_after: Option<Duration>,
    /// Bytes of head and body.
    len: usize,
    /// The connection ends after this answer (`Connection: close`, HTTP/1.0, a body delimited
    /// by the close, or a body over `RESPONSE_BODY_BYTES_MAX` that is not read).
    close: bool,
    /// The server ends it (all but the unread body): it processes no request after this one
    /// (RFC 9112 §9.6).
    announced: bool,
}

/// How far the answer at the start of a connection's read buffer has been parsed, kept across
/// reads so that an answer arriving in many small reads (a destination trickling its bytes) is
/// parsed in time linear in its length rather than from its start on every read — which made
/// a slow destination cost the dispatcher, shared by every destination, CPU quadratic in its
/// answer's length (up to `ANSWER_BUFFER_MAX`). Reset once the answer is taken, and with the
/// connection.
#[derive(Debug, Default)]
struct Progress {
    /// Bytes at the start of the buffer searched for the head's end without finding it.
    head_scanned: usize,
    /// Where the status line starts: the first byte that is not CR or LF, once seen.
    head_start: Option<usize>,
    /// The answer's head, once whole.
    head: Option<Head>,
    /// Chunked body: where the next chunk-size or trailer line starts (from the buffer start).
    chunk_at: usize,
    /// Chunked body: bytes from `chunk_at` on searched for the line's end without finding it.
    line_scanned: usize,
    /// Chunked body: bytes of chunk data before `chunk_at`.
    chunk_body: usize,
    /// Chunked body: the size line at `chunk_at` was read; its data starts at `.0`, `.1` bytes.
    chunk_data: Option<(usize, usize)>,
    /// Chunked body: past the last chunk, in the trailer section.
    trailers: bool,
    /// Bytes handed to a search or a parser so far (tests assert it stays linear).
    #[cfg(test)]
    work: usize,
}

impl Progress {
    #[cfg(test)]
    fn examined(&mut self, bytes: usize) {
        self.work += bytes;
    }

    #[cfg(not(test))]
    fn examined(&mut self, _bytes: usize) {}
}

/// What an answer's head says about the answer.
#[derive(Debug, Clone, Copy)]
struct Head {
    /// Bytes of the status line, headers and the empty line.
    len: usize,
    code: u16,
    retry_after: Option<Duration>,
    /// The server ends the connection after this answer (`Connection: close`, HTTP/1.0).
    close: bool,
    /// `Content-Length`.
    length: Option<usize>,
    /// `Transfer-Encoding`: `None` absent, `Some(true)` chunked last (RFC 9112 §6.3).
    coding: Option<bool>,
}

/// Whether `buf[from..]` holds the end of a head: a line feed followed by an empty line
/// (`\n\n` or `\n\r\n`; httparse takes bare line feeds too). Markers starting before `from`
/// must have been searched already.
fn head_end_after(buf: &[u8], from: usize) -> bool {
    (from..buf.len()).any(|i| {
        buf[i] == b'\n'
            && match buf.get(i + 1) {
                Some(b'\n') => true,
                Some(b'\r') => buf.get(i + 2) == Some(&b'\n'),
                _ => false,
            }
    })
}

/// Parses the answer at the start of `buf`, resuming from `p` (what earlier calls on a shorter
/// prefix of the same bytes found): `Ok(None)` while incomplete, an error text for a malformed
/// one. The body is skipped (its framing is followed, its bytes are not kept).
fn parse_answer(buf: &[u8], p: &mut Progress) -> Result<Option<Answer>, String> {
    let head = match p.head {
        Some(head) => head,
        None => {
            // httparse runs on the first look (a reply that is no HTTP at all is refused at
            // once) and then only once an empty line has arrived.
            let from = p.head_scanned.saturating_sub(2);
            let first_look = p.head_scanned == 0;
            if p.head_start.is_none() {
                // Empty lines before the status line (httparse skips them) end no head:
                // counting them made every read of a flood of them parse the buffer again.
                let blank = |b: &u8| matches!(b, b'\r' | b'\n');
                let after = buf[p.head_scanned..].iter().position(|b| !blank(b));
                p.head_start = after.map(|i| p.head_scanned + i);
            }
            p.examined(buf.len() - from);
            let ended = p.head_start.is_some_and(|start| head_end_after(buf, from.max(start)));
            p.head_scanned = buf.len();
            if !ended && !first_look {
                if buf.len() > HEAD_BYTES_MAX {
                    return Err("answer head over 64 KiB".to_owned());
                }
                return Ok(None);
            }
            p.examined(buf.len());
            let Some(head) = parse_head(buf)? else { return Ok(None) };
            p.head = Some(head);
            p.chunk_at = head.len;
            head
        }
    };
    let Head { len, code, retry_after, close, length, coding } = head;
    // `close` from the head: announced by the server. Other reasons below are noted apart.
    let announced = close;
    let done = |len, ends: bool| {
        Ok(Some(Answer { code, retry_after, len, close: ends, announced: announced || ends }))
    };
    // Ends the connection by the client's choice only (the body is not read).
    let unread = |len| Ok(Some(Answer { code, retry_after, len, close: true, announced }));
    if code == 101 {
        // Switching Protocols (never asked for): a final answer, and the end of HTTP here.
        return done(len, true);
    }
    if (100..200).contains(&code) || code == 204 || code == 304 {
        return done(len, close);
    }
    if coding == Some(false) {
        // A coding other than chunked last: the body ends with the connection.
        return done(buf.len(), true);
    }
    if coding == Some(true) {
        return match chunked_end(buf, p)? {
            Chunked::Done(end) => done(end, close),
            Chunked::Partial => Ok(None),
            Chunked::TooLong => unread(buf.len()),
        };
    }
    match length {
        Some(n) if n > RESPONSE_BODY_BYTES_MAX => unread(buf.len()),
        Some(n) if buf.len() >= len + n => done(len + n, close),
        Some(_) => Ok(None),
        // Delimited by the close: the status decides, the body is not waited for.
        None => done(buf.len(), true),
    }
}

/// The head at the start of `buf`: `Ok(None)` while incomplete, an error text for a malformed
/// or oversized one.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n > HEAD_BYTES_MAX => {
            return Err("answer head over 64 KiB".to_owned());
        }
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > HEAD_BYTES_MAX => {
            return Err("answer head over 64 KiB".to_owned());
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed answer: {e}")),
    };
    let code = response.code.unwrap_or(0);
    let mut close = response.version == Some(0);
    let (mut length, mut retry_after) = (None::<usize>, None);
    let mut coding: Option<bool> = None;
    for h in response.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            // 1*DIGIT only: Rust's integer parse would also take a leading `+`.
            let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
            let n: usize = value
                .parse()
                .ok()
                .filter(|_| digits)
                .ok_or_else(|| "malformed Content-Length".to_owned())?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting Content-Length headers".to_owned());
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or("").trim();
            coding = Some(last.eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && response.version == Some(0) {
                    close = false;
                }
            }
        } else if h.name.eq_ignore_ascii_case("retry-after") {
            retry_after = super::attempt::retry_after_text(value);
        }
    }
    Ok(Some(Head { len, code, retry_after, close, length, coding }))
}

enum Chunked {
    /// The whole answer ends here (from the buffer start).
    Done(usize),
    Partial,
    TooLong,
}

/// Where a chunked body (with its trailer section) that starts at `p.chunk_at` ends, resuming
/// from `p`: each line is parsed once its line feed has arrived, each chunk's data is skipped
/// once it is all there.
fn chunked_end(buf: &[u8], p: &mut Progress) -> Result<Chunked, String> {
    loop {
        if let Some((data_at, size)) = p.chunk_data {
            if buf.len() < data_at + size + 2 {
                return Ok(Chunked::Partial);
            }
            if &buf[data_at + size..data_at + size + 2] != b"\r\n" {
                return Err("malformed chunk".to_owned());
            }
            p.chunk_data = None;
            p.chunk_at = data_at + size + 2;
            p.line_scanned = 0;
        }
        // The line at `chunk_at` is parsed once a line feed follows it.
        let from = p.chunk_at + p.line_scanned;
        p.examined(buf.len() - from);
        let Some(lf) = buf[from..].iter().position(|&b| b == b'\n') else {
            p.line_scanned = buf.len() - p.chunk_at;
            return Ok(Chunked::Partial);
        };
        let line_end = from + lf + 1;
        if p.trailers {
            // Trailer lines end with CRLF; an empty one ends the answer.
            if line_end - p.chunk_at >= 2 && buf[line_end - 2] == b'\r' {
                if line_end - p.chunk_at == 2 {
                    return Ok(Chunked::Done(line_end));
                }
                p.chunk_at = line_end;
                p.line_scanned = 0;
            } else {
                p.line_scanned = line_end - p.chunk_at;
            }
            continue;
        }
        if line_end - p.chunk_at < 2 || buf[line_end - 2] != b'\r' {
            // A bare line feed (httparse takes it inside an extension; elsewhere the line is
            // refused once its CRLF comes): the line ends at a later one.
            p.line_scanned = line_end - p.chunk_at;
            continue;
        }
        p.examined(line_end - p.chunk_at);
        let (n, size) = match httparse::parse_chunk_size(&buf[p.chunk_at..]) {
            Ok(httparse::Status::Complete(c)) => c,
            // Unreachable with a CRLF in the line; waiting for more is the safe reading.
            Ok(httparse::Status::Partial) => {
                p.line_scanned = line_end - p.chunk_at;
                continue;
            }
            Err(_) => return Err("malformed chunk size".to_owned()),
        };
        let size = usize::try_from(size).map_err(|_| "chunk too large".to_owned())?;
        p.chunk_body = p.chunk_body.saturating_add(size);
        if p.chunk_body > RESPONSE_BODY_BYTES_MAX {
            return Ok(Chunked::TooLong);
        }
        if size == 0 {
            p.trailers = true;
            p.chunk_at += n;
            p.line_scanned = 0;
            continue;
        }
        p.chunk_data = Some((p.chunk_at + n, size));
    }
}

#[cfg(test)]
mod tests;
