//! The dispatcher loop on its own thread: scan each shard for due events, start attempts within
//! each destination's `concurrency_max`, classify finished attempts, hand settlements to the
//! shard writers, and keep every event in the in-flight set until its settlement is durably
//! written — otherwise the next scan would see the old schedule entry and attempt it twice.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinSet;

use super::attempt::{self, Target};
use super::classify::{classify, AttemptResult};
use crate::config::Config;
use crate::ledger::{DueEvent, Inbox, Outcome, Settlement};
use crate::limits::DISPATCH_SCAN_MAX;
use crate::metrics::{AttemptOutcome, Metrics};

/// Longest sleep between scans when nothing else wakes the loop (also bounds how late a retry
/// may start when an in-flight entry hides the next due time).
const IDLE_WAIT_MAX: Duration = Duration::from_secs(1);
/// Wait before re-offering settlements a full settle queue gave back.
const SETTLE_RETRY_WAIT: Duration = Duration::from_millis(10);
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
    config: Arc<Config>,
    inbox: Arc<dyn Inbox>,
    notify: Arc<Notify>,
    metrics: Arc<Metrics>,
    client: reqwest::Client,
    /// Events started and not yet durably settled (skipped by scans).
    in_flight: HashSet<Slot>,
    /// Per destination: HTTP attempts running.
    busy: Vec<usize>,
    attempts: JoinSet<Finished>,
    /// Settlements the settle queue gave back; re-offered first on every turn.
    unsettled: VecDeque<Settlement>,
    replies_tx: mpsc::UnboundedSender<(usize, u64, bool)>,
    replies_rx: mpsc::UnboundedReceiver<(usize, u64, bool)>,
    rng: rand::rngs::StdRng,
}

/// What woke the loop.
enum Wake {
    Stop,
    Finished(Finished),
    Reply(usize, u64, bool),
    Other,
}

impl Engine {
    /// A loop with nothing in flight.
    pub(super) fn new(
        config: Arc<Config>,
        inbox: Arc<dyn Inbox>,
        notify: Arc<Notify>,
        metrics: Arc<Metrics>,
        client: reqwest::Client,
    ) -> Engine {
        // Each in-flight slot sends exactly one reply, so the channel holds at most
        // `in_flight.len()` messages: bounded by the set it serves.
        let (replies_tx, replies_rx) = mpsc::unbounded_channel();
        let busy = vec![0; config.destinations.len()];
        Engine {
            config,
            inbox,
            notify,
            metrics,
            client,
            in_flight: HashSet::new(),
            busy,
            attempts: JoinSet::new(),
            unsettled: VecDeque::new(),
            replies_tx,
            replies_rx,
            rng: rand::SeedableRng::from_os_rng(),
        }
    }

    /// Runs until `stop` fires (or its sender is dropped), then lets in-flight attempts finish
    /// or time out and offers their settlements before returning.
    pub(super) async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        loop {
            let notify = Arc::clone(&self.notify);
            let notified = notify.notified();
            tokio::pin!(notified);
            // Registered before the scan: a notify during the scan is not lost.
            notified.as_mut().enable();
            self.offer_settlements();
            let deadline = self.scan_and_start().await;
            let wake = tokio::select! {
                _ = &mut stop => Wake::Stop,
                _ = &mut notified => Wake::Other,
                Some(joined) = self.attempts.join_next(), if !self.attempts.is_empty() => {
                    joined.map_or_else(|e| lost(&e), Wake::Finished)
                }
                Some((shard, seq, ok)) = self.replies_rx.recv() => Wake::Reply(shard, seq, ok),
                () = tokio::time::sleep(deadline) => Wake::Other,
            };
            match wake {
                Wake::Stop => break,
                Wake::Finished(f) => self.finish(f),
                Wake::Reply(shard, seq, ok) => self.settled(shard, seq, ok),
                Wake::Other => {}
            }
            self.drain_ready();
        }
        self.drain_on_stop().await;
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
        while let Ok((shard, seq, ok)) = self.replies_rx.try_recv() {
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
            // Every destination is at `concurrency_max`: a finishing attempt wakes the loop.
            return IDLE_WAIT_MAX;
        }
        let now_ms = crate::clock::now_unix_ms();
        let scan = self.scan(now_ms, free.min(DISPATCH_SCAN_MAX)).await;
        for event in scan.events {
            self.start(event);
        }
        match scan.next_due_ms {
            Some(at) if at > now_ms => Duration::from_millis(at - now_ms).min(IDLE_WAIT_MAX),
            _ => IDLE_WAIT_MAX,
        }
    }

    /// Attempts that could start now, over all destinations: a scan never reads more events
    /// than can be started (reading bodies that would only be dropped is wasted IO).
    fn free_slots(&self) -> usize {
        let config = &self.config.destinations;
        config.iter().zip(&self.busy).map(|(d, busy)| d.concurrency_max.saturating_sub(*busy)).sum()
    }

    /// Reads up to `limit` due events per shard off the tokio thread (the ledger read may
    /// block).
    async fn scan(&self, now_ms: u64, limit: usize) -> Scan {
        let inbox = Arc::clone(&self.inbox);
        let shards = inbox.shards();
        let mut skip: Vec<HashSet<u64>> = vec![HashSet::new(); shards];
        for &(shard, seq) in &self.in_flight {
            if let Some(set) = skip.get_mut(shard) {
                set.insert(seq);
            }
        }
        let read = tokio::task::spawn_blocking(move || scan_shards(&*inbox, now_ms, limit, &skip));
        read.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "The dispatcher's ledger scan panicked.");
            Scan { events: Vec::new(), next_due_ms: None }
        })
    }

    /// Starts one attempt if its destination has a free slot; otherwise the event stays in the
    /// ledger for a later scan.
    fn start(&mut self, event: DueEvent) {
        let slot = (event.shard, event.seq);
        let Some(source) = self.config.sources.get(event.source as usize) else {
            self.unroutable(event);
            return;
        };
        let destination = source.destination;
        let Some(dest) = self.config.destinations.get(destination) else {
            self.unroutable(event);
            return;
        };
        if self.busy[destination] >= dest.concurrency_max || !self.in_flight.insert(slot) {
            return;
        }
        self.busy[destination] += 1;
        let target = Target {
            url: dest.url.clone(),
            timeout: dest.timeout,
            source_id: source.id.clone(),
            provider: source.provider.name(),
        };
        let client = self.client.clone();
        self.attempts.spawn(attempt_task(client, target, event, destination));
    }

    /// An event whose source (or its destination) is no longer configured: dead-lettered so an
    /// operator sees it, rather than rescanned forever.
    fn unroutable(&mut self, event: DueEvent) {
        let error = format!("source index {} is not in the configuration", event.source);
        tracing::warn!(key = %event.key, %error, "Event dead-lettered: it cannot be routed.");
        if !self.in_flight.insert((event.shard, event.seq)) {
            return;
        }
        let outcome = Outcome::Dead { error };
        self.queue_settlement(event.shard, event.seq, event.due_ms, event.attempts, outcome);
    }

    /// Classifies a finished attempt, counts it and queues its settlement.
    fn finish(&mut self, f: Finished) {
        if let Some(busy) = self.busy.get_mut(f.destination) {
            *busy = busy.saturating_sub(1);
        }
        let now_ms = crate::clock::now_unix_ms();
        let dest = &self.config.destinations[f.destination];
        let outcome = classify(&f.result, f.attempts_made, dest, now_ms, &mut self.rng);
        self.record(&f, &outcome, now_ms);
        let (shard, seq) = f.slot;
        self.queue_settlement(shard, seq, f.due_ms, f.attempts_made, outcome);
    }

    /// Metrics and logs of one classified attempt (no body, no URL: R28).
    fn record(&self, f: &Finished, outcome: &Outcome, now_ms: u64) {
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
                stats.count(f.destination, AttemptOutcome::Retry);
                let message = "Attempt failed; retry scheduled.";
                tracing::debug!(key, attempt, destination = dest, %error, next_ms, "{message}");
            }
            Outcome::Dead { error } => {
                stats.count(f.destination, AttemptOutcome::Dead);
                tracing::warn!(key, attempt, destination = dest, %error, "Event dead-lettered.");
            }
        }
    }

    fn queue_settlement(
        &mut self,
        shard: usize,
        seq: u64,
        due_ms: u64,
        attempts: u32,
        outcome: Outcome,
    ) {
        let tx = self.replies_tx.clone();
        let reply = Box::new(move |ok: bool| {
            // The loop may be gone at shutdown; the write itself already happened or not.
            let _ = tx.send((shard, seq, ok));
        });
        self.unsettled.push_back(Settlement { shard, seq, due_ms, attempts, outcome, reply });
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
        if !ok {
            tracing::warn!(
                shard,
                seq,
                "A settlement was not written; the attempt will be repeated."
            );
        }
    }

    /// Shutdown: no new attempts; running ones finish or time out; their settlements are offered
    /// for a bounded time, the rest left to the ledger (repeated after restart, same key).
    async fn drain_on_stop(&mut self) {
        while let Some(joined) = self.attempts.join_next().await {
            match joined {
                Ok(f) => self.finish(f),
                Err(e) => {
                    lost(&e);
                }
            }
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
                left,
                "Dispatcher stopped with unsettled attempts; they will be repeated."
            );
        }
    }
}

/// An attempt task that panicked (a bug): its event stays in the in-flight set and its
/// destination slot stays taken until restart, when the ledger's schedule entry brings it back.
fn lost(e: &tokio::task::JoinError) -> Wake {
    tracing::error!(error = %e, "An attempt task failed; its event waits for a restart.");
    Wake::Other
}

/// The due events of every shard and the earliest due time seen.
struct Scan {
    events: Vec<DueEvent>,
    next_due_ms: Option<u64>,
}

/// Blocking: reads up to `limit` due events per shard, skipping in-flight seqs.
fn scan_shards(inbox: &dyn Inbox, now_ms: u64, limit: usize, skip: &[HashSet<u64>]) -> Scan {
    let mut scan = Scan { events: Vec::new(), next_due_ms: None };
    for (shard, skip) in skip.iter().enumerate() {
        match inbox.due(shard, now_ms, limit, &|seq| skip.contains(&seq)) {
            Ok(events) => scan.events.extend(events),
            Err(error) => {
                tracing::error!(shard, %error, "The dispatcher could not read due events.")
            }
        }
        if let Some(at) = inbox.next_due_ms(shard) {
            // Entries due now belong to in-flight events; only future ones set the timer.
            if at > now_ms {
                scan.next_due_ms = Some(scan.next_due_ms.map_or(at, |t| t.min(at)));
            }
        }
    }
    scan
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
