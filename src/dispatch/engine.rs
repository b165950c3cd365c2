//! The dispatcher loop on its own thread: scan each shard for due events, start attempts within
//! each destination's `concurrency_max`, classify finished attempts, hand settlements to the
//! shard writers, and keep every event in the in-flight set until its settlement is durably
//! written — otherwise the next scan would see the old schedule entry and attempt it twice.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::task::JoinSet;

use super::attempt::{self, Target};
use super::classify::{classify, AttemptResult};
use crate::config::{Config, Live};
use crate::ledger::{DueEvent, DueSources, Inbox, Outcome, Settlement};
use crate::limits::DISPATCH_SCAN_MAX;
use crate::metrics::{AttemptOutcome, Metrics};

/// Longest sleep between scans when nothing else wakes the loop (also bounds how late a retry
/// may start when an in-flight entry hides the next due time).
const IDLE_WAIT_MAX: Duration = Duration::from_secs(1);
/// How often every shard is scanned from the head of its schedule instead of from its
/// cursor: the safety net for entries behind the cursor (an attempt whose settlement could not
/// be written keeps its old entry, which is then retried at the next full scan).
const FULL_SCAN_EVERY: Duration = Duration::from_secs(5);
/// Wait before re-offering settlements a full settle queue gave back.
const SETTLE_RETRY_WAIT: Duration = Duration::from_millis(10);
/// Shortest time from the start of the last scan (of any kind) to a scan asked for by
/// notifications alone (a group commit that scheduled events, an operator action, a settlement
/// that freed an ordering group). At high rates a shard writer commits every few hundred µs,
/// and a scan per commit paid for its schedule iterator, wake-up and sends for a handful of
/// events each; one scan per gap carries them all. Measured on one core at 9 000 events/s: the
/// dispatcher's CPU −20 %, the server's −7 % (issue 6, docs/benchmarks.md run 18). The first
/// notification after a quiet spell scans at once; scans for freed destination slots and due
/// retries are not held. A delivery starts at most ~3 ms later: the gap, plus up to 1 ms
/// because tokio's timer rounds the wait up to whole milliseconds.
pub(super) const NOTIFIED_SCAN_GAP: Duration = Duration::from_millis(2);
/// How long shutdown keeps re-offering settlements before leaving them to recovery.
const SHUTDOWN_SETTLE_WAIT: Duration = Duration::from_secs(2);

/// `(shard, seq)`: an inbox event's identity inside the dispatcher.
type Slot = (usize, u64);

/// The bookkeeping of one started attempt, returned when it finishes.
struct Finished {
    slot: Slot,
    due_ms: u64,
    attempts_made: u32,
    destination: usize,
    key: String,
    received_at_ms: u64,
    result: AttemptResult,
}

/// The loop's state; lives on the dispatcher thread only.
pub(super) struct Engine {
    /// The configuration in force; refreshed from `live` at the top of every turn.
    config: Arc<Config>,
    live: Arc<Live>,
    generation: u64,
    inbox: Arc<dyn Inbox>,
    notify: Arc<Notify>,
    metrics: Arc<Metrics>,
    client: reqwest::Client,
    /// Events started and not yet durably settled (skipped by scans).
    in_flight: HashSet<Slot>,
    /// Per destination: HTTP attempts running.
    busy: Vec<usize>,
    attempts: JoinSet<Finished>,
    /// Attempts on the own `http://` client, reporting to `done` instead of as tasks.
    done: Arc<Done>,
    /// How many of those have not reported yet.
    done_pending: usize,
    /// Settlements the settle queue gave back; re-offered first on every turn.
    unsettled: VecDeque<Settlement>,
    /// Settlement replies from the shard writers (see [`Replies`]).
    replies: Arc<Replies>,
    rng: rand::rngs::StdRng,
    /// Per shard: where the next scan starts (`(due_ms, seq)`, inclusive). New schedule entries
    /// always sort after what a scan has seen due (the shard writer gives new events a
    /// monotonic due time; retries are due in the future), so scans resume here instead of
    /// walking the settled head of the schedule every time.
    cursors: Vec<Option<(u64, u64)>>,
    /// When the cursors were last reset for a scan from the head.
    full_scan_at: std::time::Instant,
    /// When the loop must scan even if nothing wakes it (the next retry, or the idle cap).
    scan_at: std::time::Instant,
    /// Whether the next turn scans: set by notifications and timers.
    scan_wanted: bool,
    /// When the last scan started (`NOTIFIED_SCAN_GAP`); `None` before the first.
    scanned_at: Option<std::time::Instant>,
    /// Whether the last scan may have left due events unread or unstarted (it hit its limit
    /// or a destination was full): then freed slots are worth a scan.
    backlog: bool,
    /// Pause switches of the destinations.
    controls: Arc<super::Controls>,
    /// `controls.resumes()` at the last scan: a change means a destination was resumed, and
    /// the events held back for it lie behind the cursors.
    resumes_seen: u64,
    /// Per destination: the circuit breaker's count and probe time.
    breakers: Vec<Breaker>,
    /// Ordering groups (R22) with a due event held back because an earlier event of the group
    /// is unsettled; when that event settles, the schedule is rescanned from the head.
    ordering_waiters: HashSet<String>,
    /// In-flight ordered events and their groups.
    in_flight_groups: std::collections::HashMap<Slot, String>,
    /// Per destination: the connections of a plain `http://` destination (`super::h1`), made
    /// on its first attempt and replaced when a reload changes its URL, `concurrency_max`,
    /// `pipeline` or `timeout` (the old connections finish their requests, then close; they
    /// count against `gate` until they do).
    routes: Vec<Option<RouteEntry>>,
    /// The connections all `routes` may hold open together: the descriptors kept for the
    /// destinations (`ingress::destination_connections_max`), so a reload's replaced routes,
    /// still answering, and their successors do not run the process out of descriptors.
    gate: Arc<super::h1::Gate>,
}

/// A destination's `super::h1` connections (`None` for https://) and what they were made
/// for: URL, `concurrency_max`, `pipeline`, `timeout`. The timeout is part of it because a
/// connection watches only the deadline of the request at its head (`h1::Connection::run`):
/// that is the earliest only while every request on it was given the same timeout, so a
/// shortened one gets new connections instead of queueing behind a slower deadline.
struct RouteEntry {
    made_for: (String, usize, usize, Duration),
    h1: Option<(Arc<super::h1::Route>, Arc<super::h1::Endpoint>)>,
}

/// One destination's circuit breaker (its open/closed state lives in [`super::Controls`], where
/// the admin API and `/metrics` read it).
#[derive(Debug, Clone, Copy, Default)]
struct Breaker {
    /// Consecutive failed attempts (`destination_failed`).
    failures: u32,
    /// While open: no probe starts before this.
    probe_at: Option<std::time::Instant>,
    /// Set when an attempt found no descriptor for its connection
    /// ([`AttemptResult::NoDescriptor`]), with the route's count of connections made then
    /// (`h1::Route::connects`): while set, the destination starts only what its open
    /// connections carry, and one attempt more (a probe for a descriptor) every `backoff_min`
    /// ([`Engine::cap`]). Cleared by a new connection, or (destinations without a counted
    /// route) by an attempt that was made. Not the breaker: the destination is not at fault.
    short_of_descriptors: Option<u64>,
    /// While short of descriptors: no probe before this.
    descriptor_probe_at: Option<std::time::Instant>,
}

/// What woke the loop.
enum Wake {
    Stop,
    Finished(Finished),
    /// Settlement replies are queued (taken by `drain_ready`).
    Replies,
    Other,
}

/// Settlement replies on their way from the shard writers to the loop: `(shard, seq, written)`.
/// A writer (a RocksDB shard writer, or the PostgreSQL ledger's settlement thread) answers a
/// whole commit inside [`crate::wake::batched`], so the loop is woken once per commit after
/// every reply is queued, not at the first reply: woken at once, the loop — on the writer's
/// CPU on a small machine — preempted the writer and took the replies one at a time
/// (docs/benchmarks.md, run 24). Outside a batch a reply wakes the loop at once.
#[derive(Default)]
struct Replies {
    /// Each in-flight slot gets exactly one reply, so this holds at most `in_flight.len()`
    /// entries (replies arriving after the loop ended are freed with the last settlement).
    queue: std::sync::Mutex<Vec<(usize, u64, bool)>>,
    /// Notified when replies were queued (a permit is kept if the loop is not waiting).
    ready: Notify,
}

impl Replies {
    fn push(self: &Arc<Self>, shard: usize, seq: u64, ok: bool) {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((shard, seq, ok));
        crate::wake::wake(self);
    }

    fn take(&self) -> Vec<(usize, u64, bool)> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl crate::wake::Wake for Replies {
    fn wake_now(&self) {
        self.ready.notify_one();
    }
}

/// Attempts on the own `http://` client report here, straight from their connection task:
/// no task, oneshot channel and `JoinSet` entry per attempt (issue 6: tokio's scheduling was
/// about a fifth of the dispatcher's CPU). Each [`DoneSlot`] adds exactly one entry.
#[derive(Default)]
pub(super) struct Done {
    finished: std::sync::Mutex<Vec<Finished>>,
    /// Notified when an attempt finished (a permit is kept if the loop is not waiting).
    ready: Notify,
}

impl Done {
    fn take(&self) -> Vec<Finished> {
        std::mem::take(
            &mut *self.finished.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// One `http://` attempt's way back to the loop: [`DoneSlot::complete`] with its result, or,
/// dropped unanswered (its connection task ended), an `Other` result — as a task awaiting a
/// dropped oneshot sender would have seen.
pub(super) struct DoneSlot {
    /// `result` is filled in when the attempt ends; `None` once reported.
    finished: Option<Finished>,
    done: Arc<Done>,
}

impl DoneSlot {
    /// Reports the attempt's `result` to the loop.
    pub(super) fn complete(mut self, result: AttemptResult) {
        self.report(result);
    }

    fn report(&mut self, result: AttemptResult) {
        if let Some(mut f) = self.finished.take() {
            f.result = result;
            self.done.finished.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(f);
            self.done.ready.notify_one();
        }
    }
}

impl Drop for DoneSlot {
    fn drop(&mut self) {
        self.report(AttemptResult::Other("connection task ended".to_owned()));
    }
}

impl Engine {
    /// A loop with nothing in flight.
    pub(super) fn new(
        live: Arc<Live>,
        inbox: Arc<dyn Inbox>,
        notify: Arc<Notify>,
        metrics: Arc<Metrics>,
        client: reqwest::Client,
        controls: Arc<super::Controls>,
    ) -> Engine {
        let generation = live.generation();
        let config = live.get();
        let busy = vec![0; config.destinations.len()];
        let busy_len = busy.len();
        let cursors = vec![None; inbox.shards()];
        let now = crate::clock::monotonic();
        Engine {
            config,
            live,
            generation,
            inbox,
            notify,
            metrics,
            client,
            in_flight: HashSet::new(),
            busy,
            attempts: JoinSet::new(),
            done: Arc::new(Done::default()),
            done_pending: 0,
            unsettled: VecDeque::new(),
            replies: Arc::new(Replies::default()),
            rng: rand::SeedableRng::from_os_rng(),
            cursors,
            full_scan_at: now,
            scan_at: now,
            scan_wanted: true,
            scanned_at: None,
            backlog: false,
            resumes_seen: controls.resumes(),
            breakers: vec![Breaker::default(); busy_len],
            controls,
            ordering_waiters: HashSet::new(),
            in_flight_groups: std::collections::HashMap::new(),
            routes: (0..busy_len).map(|_| None).collect(),
            gate: Arc::new(super::h1::Gate::new(crate::ingress::destination_connections_max(
                crate::ingress::descriptor_limit(),
            ))),
        }
    }

    /// Runs until `stop` fires (or its sender is dropped), then lets in-flight attempts finish
    /// or time out and offers their settlements before returning.
    pub(super) async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        loop {
            self.refresh_config();
            let notify = Arc::clone(&self.notify);
            let notified = notify.notified();
            tokio::pin!(notified);
            // Registered before the scan: a notify during the scan is not lost.
            notified.as_mut().enable();
            self.offer_settlements();
            let deadline = self.maybe_scan().await;
            let wake = tokio::select! {
                _ = &mut stop => Wake::Stop,
                _ = &mut notified => Wake::Other,
                Some(joined) = self.attempts.join_next(), if !self.attempts.is_empty() => {
                    joined.map_or_else(|e| lost(&e), Wake::Finished)
                }
                () = self.replies.ready.notified() => Wake::Replies,
                () = self.done.ready.notified(), if self.done_pending > 0 => Wake::Replies,
                () = tokio::time::sleep(deadline) => Wake::Other,
            };
            match wake {
                Wake::Stop => break,
                Wake::Finished(f) => self.finish(f),
                Wake::Replies => {}
                Wake::Other => self.scan_wanted = true,
            }
            self.drain_ready();
        }
        self.drain_on_stop().await;
    }

    /// Takes the reloaded configuration, if a reload happened since the last turn: new
    /// destination URLs, timeouts, attempts and backoff apply to attempts started from now on
    /// (destination ids and order are fixed for the process, so `busy` stays aligned).
    fn refresh_config(&mut self) {
        let generation = self.live.generation();
        if generation != self.generation {
            self.generation = generation;
            self.config = self.live.get();
            // `breaker_failures_max = 0` turns the breaker off: an open one closes now.
            for (d, dest) in self.config.destinations.iter().enumerate() {
                if dest.breaker_failures_max == 0 && self.controls.breaker_open(d) {
                    self.controls.set_breaker_open(d, false);
                    if let Some(b) = self.breakers.get_mut(d) {
                        *b = Breaker::default();
                    }
                    tracing::info!(code = "breaker_closed", destination = %dest.id, "Circuit breaker closed: turned off by a reload.");
                }
            }
        }
    }

    /// Scans when a timer asked for it, when a notification did and the last scan started at
    /// least [`NOTIFIED_SCAN_GAP`] ago, or — while the last scan left due events behind — when
    /// an eighth of the attempts allowed now are free, so a scan is worth its reads (one scan
    /// per batch of finished attempts, not one per attempt). Returns how long to sleep at most.
    async fn maybe_scan(&mut self) -> Duration {
        let now = crate::clock::monotonic();
        // An eighth of the attempts allowed now (`cap`, not `concurrency_max`): a destination
        // held to its open connections or to a breaker's probe, never an eighth free of its
        // `concurrency_max`, would otherwise be scanned only by the 1 s timer (one event per
        // second drained through a starved destination's open connection).
        let total: usize = (0..self.config.destinations.len()).map(|d| self.cap(d, now)).sum();
        let worth = self.backlog && self.free_slots() >= (total / 8).max(1);
        let timer = now >= self.scan_at;
        if self.scan_wanted && !worth && !timer {
            // Asked for by notifications only: at most one such scan per gap.
            let gap_ends = self.scanned_at.map(|at| at + NOTIFIED_SCAN_GAP);
            if let Some(ends) = gap_ends.filter(|&ends| now < ends) {
                return ends.min(self.scan_at).duration_since(now);
            }
        }
        if self.scan_wanted || worth || timer {
            self.scanned_at = Some(now);
            self.scan_wanted = false;
            let wait = self.scan_and_start().await;
            self.scan_at = crate::clock::monotonic() + wait;
            return wait;
        }
        self.scan_at.saturating_duration_since(now)
    }

    /// Handles every finished attempt and reply already waiting, so one wake serves many.
    fn drain_ready(&mut self) {
        while let Some(joined) = self.attempts.try_join_next() {
            match joined {
                Ok(f) => self.finish(f),
                Err(e) => {
                    lost(&e);
                }
            }
        }
        for f in self.done.take() {
            debug_assert!(self.done_pending > 0, "an http:// attempt reported twice");
            self.done_pending = self.done_pending.saturating_sub(1);
            self.finish(f);
        }
        for (shard, seq, ok) in self.replies.take() {
            self.settled(shard, seq, ok);
        }
    }

    /// Scans every shard and starts what fits; returns how long to sleep at most.
    async fn scan_and_start(&mut self) -> Duration {
        if !self.unsettled.is_empty() {
            // Back-pressure: no new attempts while the shard writers cannot take results.
            return SETTLE_RETRY_WAIT;
        }
        let free = self.free_slots();
        if free == 0 {
            // Every destination is at `concurrency_max`: finishing attempts wake the loop, and
            // due events may be waiting. A destination short of descriptors gets its next probe
            // at a known time, which no attempt's end announces.
            self.backlog = true;
            return self.starved_wait().map_or(IDLE_WAIT_MAX, |w| w.min(IDLE_WAIT_MAX));
        }
        let now = crate::clock::monotonic();
        let resumes = self.controls.resumes();
        let full_scan = now.duration_since(self.full_scan_at) >= FULL_SCAN_EVERY
            || resumes != self.resumes_seen;
        if full_scan {
            self.resumes_seen = resumes;
            self.full_scan_at = now;
            self.cursors.iter_mut().for_each(|c| *c = None);
        }
        let now_ms = crate::clock::now_unix_ms();
        let limit = free.min(DISPATCH_SCAN_MAX);
        let scan = self.scan(now_ms, limit, full_scan).await;
        self.backlog = scan.full;
        // Per shard, the next scan resumes at the first event not started (its destination
        // was full), or else at the last event returned.
        let mut resume: Vec<Option<(u64, u64)>> = vec![None; self.cursors.len()];
        let mut held: Vec<bool> = vec![false; self.cursors.len()];
        // Groups with an attempt in flight: their other events wait even when the index says
        // it is their turn — an operator may drop (or replay) the in-flight event, releasing
        // the group while its attempt still runs (R22: one at a time).
        let mut busy_groups: HashSet<String> = self.in_flight_groups.values().cloned().collect();
        for event in scan.events {
            let (shard, key) = (event.shard, (event.due_ms, event.seq));
            let group = event.ordering.as_ref().map(|p| group_of(&event.key, &p.value));
            let group_busy = group.as_ref().is_some_and(|g| busy_groups.contains(g));
            let started = if scan.not_their_turn.contains(&(shard, event.seq)) || group_busy {
                // Held back behind an earlier event of its ordering group (R22). The cursor
                // moves on (other groups keep flowing); the earlier event's settlement
                // brings a rescan from the head.
                if let Some(place) = &event.ordering {
                    self.ordering_waiters.insert(group_of(&event.key, &place.value));
                }
                true
            } else {
                let started = self.start(event);
                if let (true, Some(g)) = (started, group) {
                    busy_groups.insert(g);
                }
                started
            };
            self.backlog |= !started;
            if let (Some(r), Some(h)) = (resume.get_mut(shard), held.get_mut(shard)) {
                if !*h {
                    *r = Some(key);
                    *h = !started;
                }
            }
        }
        for (cursor, r) in self.cursors.iter_mut().zip(resume) {
            if r.is_some() {
                *cursor = r;
            }
        }
        match scan.next_due_ms {
            Some(at) if at > now_ms => Duration::from_millis(at - now_ms).min(IDLE_WAIT_MAX),
            _ => IDLE_WAIT_MAX,
        }
    }

    /// How long until the first destination short of descriptors may start its next probe
    /// (`Breaker::descriptor_probe_at`); `None` when none waits for one.
    fn starved_wait(&self) -> Option<Duration> {
        let now = crate::clock::monotonic();
        let short = self.breakers.iter().filter(|b| b.short_of_descriptors.is_some());
        let until = short.filter_map(|b| b.descriptor_probe_at).filter(|&t| t > now);
        until.min().map(|t| t.duration_since(now))
    }

    /// The `http://` route destination `d` uses now, if any.
    fn h1_route(&self, d: usize) -> Option<&super::h1::Route> {
        let entry = self.routes.get(d).and_then(Option::as_ref)?;
        entry.h1.as_ref().map(|(route, _)| route.as_ref())
    }

    /// Whether destination `d` is short of descriptors: an attempt found none, and its route
    /// has made no connection since (a count that differs — a connection made, or a reload's
    /// new route — ends it; the next attempt without a descriptor starts it again).
    fn short_of_descriptors(&self, d: usize) -> bool {
        let Some(seen) = self.breakers.get(d).and_then(|b| b.short_of_descriptors) else {
            return false;
        };
        self.h1_route(d).is_none_or(|route| route.connects() == seen)
    }

    /// Attempts that could start now, over all running (not paused) destinations: a scan
    /// never reads more events than can be started (reading bodies that would only be dropped
    /// is wasted IO), and with every destination paused nothing is scanned at all.
    fn free_slots(&self) -> usize {
        self.room().iter().sum()
    }

    /// Attempts each destination could start now (index = destination): its [`Engine::cap`]
    /// less its attempts in flight.
    fn room(&self) -> Vec<usize> {
        let now = crate::clock::monotonic();
        let caps = (0..self.config.destinations.len()).map(|d| self.cap(d, now));
        caps.zip(&self.busy).map(|(cap, busy)| cap.saturating_sub(*busy)).collect()
    }

    /// For a leasing inbox ([`Inbox::leases`]): per destination with free attempt slots, its
    /// sources (indexes into the configuration's sources) and how many of their events to
    /// lease, at most `limit` in all.
    fn lease_wants(&self, limit: usize) -> Vec<(Vec<usize>, usize)> {
        let mut left = limit;
        let mut wants = Vec::new();
        for (d, room) in self.room().into_iter().enumerate() {
            let take = room.min(left);
            if take == 0 {
                continue;
            }
            let sources = self.config.sources.iter().enumerate();
            let of_d: Vec<usize> =
                sources.filter(|(_, s)| s.destination == d).map(|(i, _)| i).collect();
            if !of_d.is_empty() {
                left -= take;
                wants.push((of_d, take));
            }
        }
        wants
    }

    /// How many attempts destination `d` may have in flight now: 0 while paused; while its
    /// breaker is open, 1 once the probe time has come (else 0); otherwise `concurrency_max`.
    /// Short of descriptors (an attempt found none, no connection made since), at most what
    /// its open `http://` connections carry ([`super::h1::Route::open_capacity`]; 0 for other
    /// destinations) and one more every `backoff_min`, a probe: the attempts that need no new
    /// descriptor keep flowing and at most one a `backoff_min` fails for want of one (before,
    /// the whole destination waited `backoff_min` and then tried `concurrency_max` new
    /// connections at once: with one connection still working, a backlog drained one event
    /// per `backoff_min`).
    fn cap(&self, d: usize, now: std::time::Instant) -> usize {
        if self.controls.paused(d) {
            return 0;
        }
        let cap = if self.controls.breaker_open(d) {
            let due = self.breakers.get(d).and_then(|b| b.probe_at).is_none_or(|at| now >= at);
            usize::from(due)
        } else {
            self.config.destinations.get(d).map_or(0, |c| c.concurrency_max)
        };
        if self.short_of_descriptors(d) {
            let open = self.h1_route(d).map_or(0, super::h1::Route::open_capacity);
            let probe_at = self.breakers.get(d).and_then(|b| b.descriptor_probe_at);
            let probe = probe_at.is_none_or(|at| now >= at);
            return cap.min(open + usize::from(probe));
        }
        cap
    }

    /// Counts a finished attempt against destination `d`'s breaker: opens it after
    /// `breaker_failures_max` consecutive failures, keeps it open (next probe after
    /// `backoff_min`) while probes fail, closes it on the first success.
    fn breaker(&mut self, d: usize, result: &AttemptResult) {
        let (Some(config), Some(b)) = (self.config.destinations.get(d), self.breakers.get_mut(d))
        else {
            return;
        };
        let open = self.controls.breaker_open(d);
        if !super::destination_failed(result) {
            b.failures = 0;
            b.probe_at = None;
            if open {
                self.controls.set_breaker_open(d, false);
                tracing::info!(code = "breaker_closed", destination = %config.id, "Circuit breaker closed: a probe attempt succeeded.");
            }
            return;
        }
        b.failures = b.failures.saturating_add(1);
        let limit = config.breaker_failures_max;
        if open || (limit > 0 && b.failures >= limit) {
            b.probe_at = Some(crate::clock::monotonic() + config.backoff_min);
            if !open {
                self.controls.set_breaker_open(d, true);
                tracing::warn!(code = "breaker_open", destination = %config.id, failures = b.failures, "Circuit breaker open: probing with one attempt at a time.");
            }
        }
    }

    /// Reads up to `limit` due events per shard: on this thread when the inbox says its
    /// reads are in-process lookups ([`Inbox::reads_inline`], RocksDB), else off it on tokio's
    /// blocking pool (the read may wait on the network).
    ///
    /// A leasing inbox (PostgreSQL) is asked per destination for no more events than that
    /// destination can start now (`lease_wants`), and on a `full_scan` also for events of
    /// sources no longer configured: a leased event nobody starts waits a whole lease.
    async fn scan(&self, now_ms: u64, limit: usize, full_scan: bool) -> Scan {
        let inbox = Arc::clone(&self.inbox);
        let cursors = self.cursors.clone();
        let shards = inbox.shards();
        let mut skip: Vec<HashSet<u64>> = vec![HashSet::new(); shards];
        for &(shard, seq) in &self.in_flight {
            if let Some(set) = skip.get_mut(shard) {
                set.insert(seq);
            }
        }
        let wants = inbox.leases().then(|| self.lease_wants(limit));
        let read_all = move |inbox: &dyn Inbox| match &wants {
            Some(wants) => scan_leased(inbox, wants, full_scan, now_ms, limit, &skip),
            None => scan_shards(inbox, &cursors, now_ms, limit, &skip),
        };
        if inbox.reads_inline() {
            // RocksDB: memtable and block-cache reads, cheaper than two thread hand-offs.
            return read_all(&*inbox);
        }
        let read = tokio::task::spawn_blocking(move || read_all(&*inbox));
        read.await.unwrap_or_else(|e| {
            tracing::error!(code = "dispatch_scan_panicked", error = %e, "The dispatcher's ledger scan panicked.");
            Scan::default()
        })
    }

    /// Starts one attempt if its destination has a free slot; otherwise the event stays in the
    /// ledger for a later scan and this returns false.
    fn start(&mut self, event: DueEvent) -> bool {
        let slot = (event.shard, event.seq);
        let Some(source) = source_of(&self.config, &event.key) else {
            self.unroutable(event);
            return true;
        };
        let destination = source.destination;
        let Some(dest) = self.config.destinations.get(destination) else {
            self.unroutable(event);
            return true;
        };
        if self.controls.paused(destination) {
            // Not held: the cursor moves on, and a resume rescans from the head.
            return true;
        }
        if self.busy[destination] >= self.cap(destination, crate::clock::monotonic()) {
            return false;
        }
        if !self.in_flight.insert(slot) {
            return true;
        }
        self.busy[destination] += 1;
        if let Some(place) = &event.ordering {
            self.in_flight_groups.insert(slot, group_of(&event.key, &place.value));
        }
        let mut target = Target {
            url: dest.url.clone(),
            timeout: dest.timeout,
            source_id: source.id.clone(),
            provider: source.provider.name(),
            signing_key: dest.signing_key.as_ref().map(|k| k.0.clone()),
            nats: dest.nats.clone(),
            route: None,
            endpoint: None,
        };
        if let (None, Some(slot)) = (&dest.nats, self.routes.get_mut(destination)) {
            // Compared in place: no allocation per attempt while the configuration stands.
            let stale = slot.as_ref().is_none_or(|r| {
                r.made_for.0 != dest.url
                    || (r.made_for.1, r.made_for.2, r.made_for.3)
                        != (dest.concurrency_max, dest.pipeline, dest.timeout)
            });
            if stale {
                // `None` inside for an https:// URL, which reqwest serves: parsed once too.
                // The replaced route's connections stay in the budget until they close.
                let gate = &self.gate;
                let h1 = super::h1::Endpoint::parse(&dest.url).map(|endpoint| {
                    let route = super::h1::Route::gated(
                        endpoint.clone(),
                        dest.concurrency_max,
                        dest.pipeline,
                        gate,
                        super::classify::no_descriptor_wait(dest),
                    );
                    (Arc::new(route), Arc::new(endpoint))
                });
                let made_for =
                    (dest.url.clone(), dest.concurrency_max, dest.pipeline, dest.timeout);
                *slot = Some(RouteEntry { made_for, h1 });
            }
            if let Some((route, endpoint)) = slot.as_ref().and_then(|r| r.h1.as_ref()) {
                target.route = Some(Arc::clone(route));
                target.endpoint = Some(Arc::clone(endpoint));
            }
        }
        if attempt::is_h1(&target) {
            // No task: the connection task reports to the loop (`Done`).
            let mut event = event;
            let attempts_made = event.attempts.saturating_add(1);
            let body = std::mem::take(&mut event.body);
            let slot = DoneSlot {
                finished: Some(Finished {
                    slot: (event.shard, event.seq),
                    due_ms: event.due_ms,
                    attempts_made,
                    destination,
                    key: event.key.clone(),
                    received_at_ms: event.received_at_ms,
                    // Replaced by the attempt's result (`DoneSlot::complete`).
                    result: AttemptResult::Other(String::new()),
                }),
                done: Arc::clone(&self.done),
            };
            self.done_pending += 1;
            attempt::send_h1(&target, &event, &body, attempts_made, super::h1::Reply::Loop(slot));
            return true;
        }
        let client = self.client.clone();
        self.attempts.spawn(attempt_task(client, target, event, destination));
        true
    }

    /// An event whose source (or its destination) is no longer configured: dead-lettered so an
    /// operator sees it, rather than rescanned forever.
    fn unroutable(&mut self, event: DueEvent) {
        let error = "its source is no longer in the configuration".to_owned();
        tracing::warn!(code = "dead_unroutable", key = %event.key, %error, "Event dead-lettered: it cannot be routed.");
        if !self.in_flight.insert((event.shard, event.seq)) {
            return;
        }
        let outcome = Outcome::Dead { error };
        self.queue_settlement(
            event.shard,
            event.seq,
            event.key,
            event.due_ms,
            event.attempts,
            outcome,
        );
    }

    /// Classifies a finished attempt, counts it and queues its settlement.
    fn finish(&mut self, f: Finished) {
        if let Some(busy) = self.busy.get_mut(f.destination) {
            *busy = busy.saturating_sub(1);
        }
        let now_ms = crate::clock::now_unix_ms();
        // Not made for want of a descriptor: neither the breaker nor `attempts_max` counts it.
        let counted = super::classify::counts_as_attempt(&f.result);
        let connects = self.h1_route(f.destination).map(super::h1::Route::connects);
        if counted {
            self.breaker(f.destination, &f.result);
            if !self.short_of_descriptors(f.destination) || connects.is_none() {
                if let Some(b) = self.breakers.get_mut(f.destination) {
                    (b.short_of_descriptors, b.descriptor_probe_at) = (None, None);
                }
            }
        } else if let Some(b) = self.breakers.get_mut(f.destination) {
            let wait =
                super::classify::no_descriptor_wait(&self.config.destinations[f.destination]);
            b.short_of_descriptors = Some(connects.unwrap_or(0));
            b.descriptor_probe_at = Some(crate::clock::monotonic() + wait);
        }
        let dest = &self.config.destinations[f.destination];
        let outcome = classify(&f.result, f.attempts_made, dest, now_ms, &mut self.rng);
        self.record(&f, &outcome, counted, now_ms);
        let (shard, seq) = f.slot;
        let attempts = if counted { f.attempts_made } else { f.attempts_made.saturating_sub(1) };
        self.queue_settlement(shard, seq, f.key, f.due_ms, attempts, outcome);
    }

    /// Metrics and logs of one classified attempt (no body, no URL: R28); one that was not
    /// made (`counted` false: no descriptor) is counted as `not_attempted`, not as a retry.
    fn record(&self, f: &Finished, outcome: &Outcome, counted: bool, now_ms: u64) {
        let stats = &self.metrics.dispatch;
        let dest = self.config.destinations[f.destination].id.as_str();
        let (key, attempt) = (f.key.as_str(), f.attempts_made);
        match outcome {
            Outcome::Delivered { .. } => {
                stats.count(f.destination, AttemptOutcome::Delivered);
                let micros = now_ms.saturating_sub(f.received_at_ms).saturating_mul(1000);
                if let Some(h) = stats.delivery_latency_us.get(f.destination) {
                    h.lock()
                        .expect("histogram lock is never poisoned")
                        .saturating_record(micros.max(1));
                }
                tracing::debug!(key, attempt, destination = dest, "Event delivered.");
            }
            Outcome::Retry { next_ms, error } => {
                let counted_as =
                    if counted { AttemptOutcome::Retry } else { AttemptOutcome::NotAttempted };
                stats.count(f.destination, counted_as);
                let message = "Attempt failed; retry scheduled.";
                tracing::debug!(key, attempt, destination = dest, %error, next_ms, "{message}");
            }
            Outcome::Dead { error } => {
                stats.count(f.destination, AttemptOutcome::Dead);
                tracing::warn!(code = "dead_lettered", key, attempt, destination = dest, %error, "Event dead-lettered.");
            }
        }
    }

    fn queue_settlement(
        &mut self,
        shard: usize,
        seq: u64,
        key: String,
        due_ms: u64,
        attempts: u32,
        outcome: Outcome,
    ) {
        let replies = Arc::clone(&self.replies);
        // Called by the shard writer after its commit. If the loop is gone (shutdown), the
        // reply is never read: the write itself already happened or not.
        let reply = Box::new(move |ok: bool| replies.push(shard, seq, ok));
        self.unsettled.push_back(Settlement { shard, seq, key, due_ms, attempts, outcome, reply });
        self.offer_settlements();
    }

    /// Hands queued settlements to the shard writers until one queue is full.
    fn offer_settlements(&mut self) {
        while let Some(settlement) = self.unsettled.pop_front() {
            if let Err(back) = self.inbox.settle(settlement) {
                self.unsettled.push_front(back);
                break;
            }
        }
    }

    /// A settlement's reply: the event leaves the in-flight set. When the write failed the old
    /// schedule entry is still there, so the attempt is repeated with the same idempotency key
    /// (at-least-once, R21).
    fn settled(&mut self, shard: usize, seq: u64, ok: bool) {
        self.in_flight.remove(&(shard, seq));
        if let Some(group) = self.in_flight_groups.remove(&(shard, seq)) {
            if self.ordering_waiters.remove(&group) {
                // Its group's next event may be due and was passed by the cursors.
                self.cursors.iter_mut().for_each(|c| *c = None);
                self.scan_wanted = true;
            }
        }
        if !ok {
            tracing::warn!(
                code = "settlement_not_written",
                shard,
                seq,
                "A settlement was not written; the attempt will be repeated."
            );
        }
    }

    /// Shutdown: no new attempts; running ones finish or time out; their settlements are offered
    /// for a bounded time, the rest left to the ledger (repeated after restart, same key).
    async fn drain_on_stop(&mut self) {
        // Finished attempts are handled as they come, tasks (`https://`, NATS) and `http://`
        // attempts alike; every `http://` attempt reports once: answered, timed out at its
        // deadline, or its connection task ended.
        self.drain_ready();
        while !self.attempts.is_empty() || self.done_pending > 0 {
            tokio::select! {
                Some(joined) = self.attempts.join_next(), if !self.attempts.is_empty() => {
                    match joined {
                        Ok(f) => self.finish(f),
                        Err(e) => {
                            lost(&e);
                        }
                    }
                }
                () = self.done.ready.notified(), if self.done_pending > 0 => {}
            }
            self.drain_ready();
        }
        let started = crate::clock::monotonic();
        self.offer_settlements();
        while !self.unsettled.is_empty()
            && crate::clock::monotonic().duration_since(started) < SHUTDOWN_SETTLE_WAIT
        {
            tokio::time::sleep(SETTLE_RETRY_WAIT).await;
            self.offer_settlements();
        }
        if !self.unsettled.is_empty() {
            let left = self.unsettled.len();
            tracing::warn!(
                code = "dispatch_stopped_unsettled",
                left,
                "Dispatcher stopped with unsettled attempts; they will be repeated."
            );
        }
    }
}

/// An attempt task that panicked (a bug): its event stays in the in-flight set and its
/// destination slot stays taken until restart, when the ledger's schedule entry brings it back.
fn lost(e: &tokio::task::JoinError) -> Wake {
    tracing::error!(code = "attempt_task_failed", error = %e, "An attempt task failed; its event waits for a restart.");
    Wake::Other
}

/// The due events of every shard and the earliest due time seen.
#[derive(Default)]
struct Scan {
    events: Vec<DueEvent>,
    /// Ordered events that are not the first unsettled event of their group (R22), or whose
    /// turn could not be read: not attempted in this scan.
    not_their_turn: HashSet<Slot>,
    /// Some shard returned `limit` events: more may be due.
    full: bool,
    next_due_ms: Option<u64>,
}

impl Scan {
    /// Keeps the earlier of the scan's next due time and `shard`'s first due time after
    /// `now_ms`.
    fn next_due_of(&mut self, inbox: &dyn Inbox, shard: usize, now_ms: u64) {
        if let Some(at) = inbox.next_due_after(shard, now_ms) {
            self.next_due_ms = Some(self.next_due_ms.map_or(at, |t| t.min(at)));
        }
    }
}

/// Blocking: reads up to `limit` due events per shard from its cursor, skipping in-flight
/// seqs, and the earliest due time after `now_ms`.
fn scan_shards(
    inbox: &dyn Inbox,
    cursors: &[Option<(u64, u64)>],
    now_ms: u64,
    limit: usize,
    skip: &[HashSet<u64>],
) -> Scan {
    let mut scan = Scan::default();
    for (shard, skip) in skip.iter().enumerate() {
        let from = cursors.get(shard).copied().flatten();
        match inbox.due(shard, from, now_ms, limit, skip) {
            Ok(events) => {
                scan.full |= events.len() >= limit;
                for event in events.iter().filter(|e| e.ordering.is_some()) {
                    let turn = inbox.ordering_turn(event).unwrap_or_else(|error| {
                        tracing::error!(code = "ledger_read_failed", shard, %error, "The dispatcher could not read an ordering group; the event waits.");
                        false
                    });
                    if !turn {
                        scan.not_their_turn.insert((shard, event.seq));
                    }
                }
                scan.events.extend(events);
            }
            Err(error) => {
                tracing::error!(code = "ledger_read_failed", shard, %error, "The dispatcher could not read due events.")
            }
        }
        scan.next_due_of(inbox, shard, now_ms);
    }
    scan
}

/// Blocking: leases, in every shard, up to each destination's share of due events of its
/// sources (`wants`: sources and count, from [`Engine::lease_wants`]), and on a `full_scan` up
/// to `limit` events of unconfigured sources; and the earliest due time after `now_ms`.
/// Ordering (R22) is decided by the leasing store itself.
fn scan_leased(
    inbox: &dyn Inbox,
    wants: &[(Vec<usize>, usize)],
    full_scan: bool,
    now_ms: u64,
    limit: usize,
    skip: &[HashSet<u64>],
) -> Scan {
    let mut scan = Scan::default();
    for (shard, skip) in skip.iter().enumerate() {
        let asks = wants.iter().map(|(sources, n)| (DueSources::Only(sources), *n));
        let unconfigured = full_scan.then_some((DueSources::Unconfigured, limit));
        for (sources, n) in asks.chain(unconfigured) {
            match inbox.due_of(shard, now_ms, n, skip, sources) {
                Ok(events) => {
                    scan.full |= n > 0 && events.len() >= n;
                    scan.events.extend(events);
                }
                Err(error) => {
                    tracing::error!(code = "ledger_read_failed", shard, %error, "The dispatcher could not read due events.");
                }
            }
        }
        scan.next_due_of(inbox, shard, now_ms);
    }
    scan
}

/// The configured source an idempotency key (`tenant/source/event id`) belongs to, found by
/// its id and tenant — never by the index stored with the event, which changes when an
/// operator reorders or removes sources between restarts.
fn source_of<'c>(config: &'c Config, key: &str) -> Option<&'c crate::config::SourceConfig> {
    let mut parts = key.splitn(3, '/');
    let (tenant, id) = (parts.next()?, parts.next()?);
    config.sources.iter().find(|s| s.id == id && s.tenant == tenant)
}

/// One attempt as a task: send, then report back with the bookkeeping.
async fn attempt_task(
    client: reqwest::Client,
    target: Target,
    mut event: DueEvent,
    destination: usize,
) -> Finished {
    let attempts_made = event.attempts.saturating_add(1);
    let body = std::mem::take(&mut event.body);
    let result = attempt::send(&client, &target, &event, body, attempts_made).await;
    Finished {
        slot: (event.shard, event.seq),
        due_ms: event.due_ms,
        attempts_made,
        destination,
        key: event.key,
        received_at_ms: event.received_at_ms,
        result,
    }
}

/// An ordering group's name in the dispatcher's memory: `tenant/source` and the value (R22).
fn group_of(key: &str, value: &str) -> String {
    format!("{}\0{value}", crate::ledger::ordering_scope(key))
}

#[cfg(test)]
mod tests {
    /// An `https://` or NATS attempt is a spawned task, so its future is moved into a fresh
    /// allocation per attempt: reqwest's and NATS's futures, about 10 KiB together, are boxed
    /// inside it so that the task copies and allocates about a kilobyte (the target and the
    /// event, twice). (`http://` attempts are no tasks: `Done`.)
    #[test]
    fn an_attempt_task_is_small() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let target = super::super::attempt::tests::target();
        let event = super::super::attempt::tests::event(None);
        let task = super::attempt_task(client, target, event, 0);
        let bytes = std::mem::size_of_val(&task);
        assert!(bytes <= 1536, "an attempt task's future is {bytes} bytes");
    }

    /// An `http://` attempt reports to the loop exactly once: with its result, or — its
    /// connection task gone without answering — as a lost connection, like a task whose
    /// oneshot sender was dropped.
    #[test]
    fn a_done_slot_reports_once_answered_or_dropped() {
        use super::{AttemptResult, Done, DoneSlot, Finished};
        let done = std::sync::Arc::new(Done::default());
        let slot = |seq| DoneSlot {
            finished: Some(Finished {
                slot: (0, seq),
                due_ms: 5,
                attempts_made: 1,
                destination: 0,
                key: format!("t/s/{seq}"),
                received_at_ms: 4,
                result: AttemptResult::Other(String::new()),
            }),
            done: std::sync::Arc::clone(&done),
        };
        slot(1).complete(AttemptResult::Status { code: 204, retry_after: None });
        drop(slot(2));
        let reported: Vec<_> = done.take().into_iter().map(|f| (f.slot.1, f.result)).collect();
        assert_eq!(
            reported,
            [
                (1, AttemptResult::Status { code: 204, retry_after: None }),
                (2, AttemptResult::Other("connection task ended".to_owned())),
            ]
        );
        assert!(done.take().is_empty(), "each slot reports once");
    }

    /// Whether the loop would wake now: polls a fresh `notified()` once (taking a permit).
    fn woken(replies: &super::Replies) -> bool {
        use std::future::Future;
        let mut notified = std::pin::pin!(replies.ready.notified());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        notified.as_mut().poll(&mut cx).is_ready()
    }

    /// A shard writer answers a commit inside `wake::batched`: the dispatcher loop is woken
    /// once, after every reply of the commit is queued — woken at the first one, it preempted
    /// the writer and took the replies one at a time (docs/benchmarks.md, run 24). A reply
    /// outside a batch (a settlement dropped unprocessed) wakes it at once.
    #[test]
    fn a_commits_settlement_replies_wake_the_loop_once_after_the_last() {
        let replies = std::sync::Arc::new(super::Replies::default());
        crate::wake::batched(|| {
            replies.push(0, 1, true);
            replies.push(1, 7, false);
            assert!(!woken(&replies), "woken before the commit's last reply");
        });
        assert!(woken(&replies), "not woken after the commit's replies");
        assert!(!woken(&replies), "woken more than once for one commit");
        assert_eq!(replies.take(), [(0, 1, true), (1, 7, false)]);
        assert!(replies.take().is_empty());

        replies.push(0, 2, true);
        assert!(woken(&replies), "a reply outside a batch did not wake the loop");
        assert_eq!(replies.take(), [(0, 2, true)]);
    }
}
