//! The dispatcher: forwards admitted events from the ledger's inbox to their destinations
//! (SPEC §5, R18), with an idempotency key on every attempt (R21), exponential backoff with full
//! jitter, and dead-lettering after `attempts_max` or on a permanent answer (R19).
//!
//! One thread `dispatch` runs a `current_thread` tokio runtime with one HTTP client. Its loop
//! (`engine.rs`) works only through [`Inbox`]: it scans each shard for due events, starts attempts
//! while each destination has fewer than `concurrency_max` in flight (the rest stay in the
//! ledger for a later scan), classifies each finished attempt with the pure [`classify`], and
//! hands the [`Settlement`](crate::ledger::Settlement) to the shard writer. Retry timers are
//! ledger schedule entries, so a restart loses none (R18). An event stays in the in-flight set
//! until its settlement is durably written; a failed write leaves the old schedule entry, and the
//! attempt is repeated with the same `Idempotency-Key` (at-least-once).
//!
//! A paused destination ([`Controls`], `destination.paused`, the admin API) gets no attempts: its
//! events stay due in the ledger until it is resumed. A circuit breaker per destination opens
//! after `breaker_failures_max` consecutive failed attempts: then one probe attempt at a time,
//! at most one per `backoff_min`, until one succeeds and closes it, so a dead downstream does
//! not burn every event's attempts.
//!
//! When a destination has a `signing_secret`, each attempt is signed with Standard Webhooks at
//! attempt time (`attempt::each_signature_header`).
//!
//! A source's `ordering_key` (R22, `crate::ordering`) makes the events of one ordering group go
//! one at a time in admission order: a scan attempts an ordered event only when
//! [`Inbox::ordering_turn`] says it is the first unsettled event of its group; the others wait
//! (the cursor passes them) until the in-flight one settles, which rescans from the head.

mod attempt;
mod classify;
mod engine;
mod h1;
mod nats;
pub use nats::contain_panic as contain_nats_client_panic;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{oneshot, Notify};

use crate::config::Config;

pub use classify::{backoff, classify, destination_failed, AttemptResult};

use crate::config::Live;
use crate::ledger::Inbox;
use crate::metrics::Metrics;

/// Operator switches of the destinations, shared by the dispatcher and the admin API: which
/// destinations are paused (no attempt is started to a paused destination; its events wait
/// in the ledger). Initial state from `destination.paused`; changes last until restart.
pub struct Controls {
    paused: Vec<AtomicBool>,
    /// Per destination: whether its circuit breaker is open (set by the dispatcher only).
    breaker_open: Vec<AtomicBool>,
    /// Bumped by every resume: the dispatcher then rescans from the head of each schedule
    /// (its cursors moved past the events it held back).
    resumes: AtomicU64,
    notify: Arc<Notify>,
}

impl Controls {
    /// One switch per configured destination, set from `destination.paused`; `notify` wakes
    /// the dispatcher after a resume.
    pub fn new(config: &Config, notify: Arc<Notify>) -> Controls {
        Controls {
            paused: config.destinations.iter().map(|d| AtomicBool::new(d.paused)).collect(),
            breaker_open: config.destinations.iter().map(|_| AtomicBool::new(false)).collect(),
            resumes: AtomicU64::new(0),
            notify,
        }
    }

    /// Whether destination index `d` is paused (an unknown index is not).
    pub fn paused(&self, d: usize) -> bool {
        self.paused.get(d).is_some_and(|p| p.load(Ordering::Acquire))
    }

    /// Pauses destination index `d`; returns whether it was running before. Attempts already
    /// in flight finish; no new one starts.
    pub fn pause(&self, d: usize) -> bool {
        self.paused.get(d).is_some_and(|p| !p.swap(true, Ordering::AcqRel))
    }

    /// Resumes destination index `d` and wakes the dispatcher; returns whether it was paused.
    pub fn resume(&self, d: usize) -> bool {
        let was = self.paused.get(d).is_some_and(|p| p.swap(false, Ordering::AcqRel));
        self.resumes.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_one();
        was
    }

    /// Whether destination index `d`'s circuit breaker is open (probing one attempt at a time).
    pub fn breaker_open(&self, d: usize) -> bool {
        self.breaker_open.get(d).is_some_and(|b| b.load(Ordering::Acquire))
    }

    /// Records the breaker state of destination index `d` (the dispatcher's decision).
    fn set_breaker_open(&self, d: usize, open: bool) {
        if let Some(b) = self.breaker_open.get(d) {
            b.store(open, Ordering::Release);
        }
    }

    /// How many resumes happened so far (the dispatcher compares it between scans).
    pub fn resumes(&self) -> u64 {
        self.resumes.load(Ordering::Acquire)
    }
}

/// The running dispatcher. Dropping it without [`DispatchHandle::shutdown`] also stops the loop,
/// but does not wait for the thread.
pub struct DispatchHandle {
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl DispatchHandle {
    /// Signals the loop to stop starting attempts, lets in-flight attempts finish or time out
    /// (at most the longest destination `timeout`), offers their settlements to the ledger, and
    /// joins the thread. Settlements the ledger cannot take are left to it: their attempts are
    /// repeated after restart with the same idempotency key.
    pub fn shutdown(self) {
        // Err: the loop already ended (it only ends on stop, or by panicking).
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::error!(code = "dispatch_panicked", "The dispatcher thread panicked.");
        }
    }
}

/// Threads the dispatcher's runtime may hold for blocking work: the PostgreSQL ledger's scans
/// and the https:// client's DNS lookups (tokio's blocking pool, one started with the runtime
/// and kept: [`crate::runtime`]; more wait for one). tokio's default, 512, would let a burst
/// of new connections start a thread each, past what `serve`'s start-up thread check found.
pub const DISPATCH_BLOCKING_THREADS: usize = 4;

/// Starts the dispatcher thread `dispatch` (SPEC §5). `notify` is signalled by whoever admits
/// events (a scan then runs at once, or at most `NOTIFIED_SCAN_GAP` after the last scan started,
/// instead of at the next timer); `metrics.dispatch` receives
/// the attempt counts and delivery latencies.
///
/// # Errors
/// The tokio runtime, the HTTP client (TLS setup) or the thread could not be created.
pub fn spawn(
    config: Arc<Live>,
    inbox: Arc<dyn Inbox>,
    notify: Arc<Notify>,
    metrics: Arc<Metrics>,
) -> std::io::Result<DispatchHandle> {
    let controls = Arc::new(Controls::new(&config.get(), Arc::clone(&notify)));
    spawn_controlled(config, inbox, notify, metrics, controls)
}

/// [`spawn`] with destination [`Controls`] shared with the admin API (pause/resume).
///
/// # Errors
/// As [`spawn`].
pub fn spawn_controlled(
    config: Arc<Live>,
    inbox: Arc<dyn Inbox>,
    notify: Arc<Notify>,
    metrics: Arc<Metrics>,
    controls: Arc<Controls>,
) -> std::io::Result<DispatchHandle> {
    let runtime = crate::runtime::with_blocking_pool(DISPATCH_BLOCKING_THREADS)?;
    let client = attempt::client()?;
    let (stop, stopped) = oneshot::channel();
    let thread = std::thread::Builder::new().name("dispatch".to_owned()).spawn(move || {
        let engine = engine::Engine::new(config, inbox, notify, metrics, client, controls);
        runtime.block_on(engine.run(stopped));
    })?;
    Ok(DispatchHandle { stop, thread })
}
