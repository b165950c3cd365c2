//! Metric storage: per-core counters and HdrHistograms, summed/merged only at scrape time
//! (invariant 4: shards share nothing but bounded channels and counters read at scrape).
//! The closed list of names is in [`crate::admin`]'s exposition; labels come only from config
//! ids and fixed codes (R28).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;

use crate::answer::Answer;

/// Latency histograms record microseconds from 1 µs to 10 minutes, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("static histogram bounds are valid")
}

/// Label of the event-type slot counting every type not in a source's allow-list (and every
/// type of a source without one): event types come from request data, so only the types a
/// source's `event_types` names at start-up become label values (R28).
pub const EVENT_TYPE_OTHER: &str = "_other";

/// Per source: authentic, well-formed events received, by event type (R26). The label set is
/// fixed at start-up from each source's allow-list; a reload that adds a type counts it under
/// [`EVENT_TYPE_OTHER`] until the next restart.
pub struct EventTypeCounts {
    /// Per source: the allow-listed types at start-up, in config order.
    types: Box<[Box<[String]>]>,
    /// Per source: index of its first slot in `counts` (its types, then `_other`).
    offsets: Box<[usize]>,
    counts: Box<[AtomicU64]>,
}

impl EventTypeCounts {
    /// Slots for sources whose allow-lists are `types` (an empty list: only `_other`).
    pub fn new(types: Vec<Vec<String>>) -> EventTypeCounts {
        let mut offsets = Vec::with_capacity(types.len());
        let mut slots = 0;
        for t in &types {
            offsets.push(slots);
            slots += t.len() + 1;
        }
        EventTypeCounts {
            types: types.into_iter().map(Vec::into_boxed_slice).collect(),
            offsets: offsets.into_boxed_slice(),
            counts: (0..slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one event of `event_type` for `source` (a linear scan of its allow-list, which
    /// is short; no allocation).
    pub fn count(&self, source: usize, event_type: Option<&str>) {
        let (Some(types), Some(&offset)) = (self.types.get(source), self.offsets.get(source))
        else {
            return;
        };
        let slot = event_type
            .and_then(|t| types.iter().position(|known| known == t))
            .unwrap_or(types.len());
        if let Some(c) = self.counts.get(offset + slot) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `(type label, count)` for `source`, allow-listed types first, then `_other`.
    pub fn by_type(&self, source: usize) -> Vec<(&str, u64)> {
        let (Some(types), Some(&offset)) = (self.types.get(source), self.offsets.get(source))
        else {
            return Vec::new();
        };
        let labels = types.iter().map(String::as_str).chain([EVENT_TYPE_OTHER]);
        labels
            .enumerate()
            .map(|(i, t)| (t, self.counts[offset + i].load(Ordering::Relaxed)))
            .collect()
    }
}

/// Counters of one ingress core.
pub struct CoreStats {
    sources: usize,
    /// Authentic, well-formed events by source and event type (R26).
    pub events: EventTypeCounts,
    /// `[source][Answer::index]` request counts; requests with no known source count under
    /// the extra last "source" slot.
    requests: Box<[AtomicU64]>,
    /// Per source: ack latency in µs (request fully read → response queued).
    ack_latency_us: Box<[Mutex<Histogram<u64>>]>,
    /// Open connections on this core.
    pub connections_open: AtomicI64,
    /// Connections refused at a connection limit, by [`crate::ingress::gate::Refusal`].
    pub connections_refused: [AtomicU64; crate::ingress::gate::Refusal::ALL.len()],
    /// Per source: deliveries answered 503 `overloaded` by deadline-aware admission.
    shed: Box<[AtomicU64]>,
    /// Per source: answers written later than the source's `ack_deadline` after the request
    /// was fully read.
    deadline_misses: Box<[AtomicU64]>,
}

impl CoreStats {
    /// Counters for `sources` configured sources, none with an event-type allow-list.
    pub fn new(sources: usize) -> CoreStats {
        CoreStats::with_event_types(vec![Vec::new(); sources])
    }

    /// Counters for one source per entry of `event_types` (each source's allow-list, empty
    /// when it has none).
    pub fn with_event_types(event_types: Vec<Vec<String>>) -> CoreStats {
        let sources = event_types.len();
        let slots = (sources + 1) * Answer::ALL.len();
        CoreStats {
            sources,
            events: EventTypeCounts::new(event_types),
            requests: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            ack_latency_us: (0..sources).map(|_| Mutex::new(latency_histogram())).collect(),
            connections_open: AtomicI64::new(0),
            connections_refused: std::array::from_fn(|_| AtomicU64::new(0)),
            shed: (0..sources).map(|_| AtomicU64::new(0)).collect(),
            deadline_misses: (0..sources).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one delivery of `source` shed: by deadline-aware admission, or by queue-delay
    /// shedding on a saturated core (`ingress::overload`).
    pub fn count_shed(&self, source: usize) {
        if let Some(c) = self.shed.get(source) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one answer of `source` written after its `ack_deadline`.
    pub fn count_deadline_miss(&self, source: usize) {
        if let Some(c) = self.deadline_misses.get(source) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `(shed, deadline misses)` counted for `source`.
    pub fn shed_and_misses(&self, source: usize) -> (u64, u64) {
        let load = |v: &[AtomicU64]| v.get(source).map_or(0, |c| c.load(Ordering::Relaxed));
        (load(&self.shed), load(&self.deadline_misses))
    }

    /// Counts one answer for `source` (`None` = unknown source / before routing).
    pub fn count(&self, source: Option<usize>, answer: Answer) {
        let s = source.unwrap_or(self.sources).min(self.sources);
        self.requests[s * Answer::ALL.len() + answer.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Records one ack latency for `source`, in µs.
    pub fn record_ack_us(&self, source: usize, micros: u64) {
        if let Some(h) = self.ack_latency_us.get(source) {
            h.lock().expect("histogram lock is never poisoned").saturating_record(micros.max(1));
        }
    }

    /// Requests counted for (`source`, `answer`); `None` = the unknown-source slot.
    pub fn requests(&self, source: Option<usize>, answer: Answer) -> u64 {
        let s = source.unwrap_or(self.sources).min(self.sources);
        self.requests[s * Answer::ALL.len() + answer.index()].load(Ordering::Relaxed)
    }

    /// Adds this core's ack latency histogram for `source` into `into`.
    pub fn merge_ack_into(&self, source: usize, into: &mut Histogram<u64>) {
        if let Some(h) = self.ack_latency_us.get(source) {
            let h = h.lock().expect("histogram lock is never poisoned");
            into.add(&*h).expect("histograms share bounds");
        }
    }
}

/// Ledger counters, written by the shard writers.
pub struct LedgerStats {
    /// Duration of each synced `WriteBatch` write, µs.
    pub commit_us: Mutex<Histogram<u64>>,
    /// Admissions + settlements per committed batch.
    pub batch_events: Mutex<Histogram<u64>>,
    /// Per source: admitted events not yet settled (gauge).
    pub inbox_pending: Box<[AtomicI64]>,
    /// Per source: dead-lettered events (gauge).
    pub dlq_depth: Box<[AtomicI64]>,
}

impl LedgerStats {
    /// Empty stats for `sources` sources.
    pub fn new(sources: usize) -> LedgerStats {
        LedgerStats {
            commit_us: Mutex::new(latency_histogram()),
            batch_events: Mutex::new(
                Histogram::new_with_bounds(1, 1 << 20, 3)
                    .expect("static histogram bounds are valid"),
            ),
            inbox_pending: (0..sources).map(|_| AtomicI64::new(0)).collect(),
            dlq_depth: (0..sources).map(|_| AtomicI64::new(0)).collect(),
        }
    }
}

/// Outcome label of `hookwall_dispatch_attempts_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// 2xx.
    Delivered,
    /// Retryable failure, retry scheduled.
    Retry,
    /// Dead-lettered.
    Dead,
    /// Not made: no descriptor for the connection (this process's limit, not the
    /// destination's fault); tried again after `backoff_min`, not counted against
    /// `attempts_max` or by the circuit breaker.
    NotAttempted,
}

impl AttemptOutcome {
    /// Every outcome, label order.
    pub const ALL: [AttemptOutcome; 4] = [
        AttemptOutcome::Delivered,
        AttemptOutcome::Retry,
        AttemptOutcome::Dead,
        AttemptOutcome::NotAttempted,
    ];

    /// Metric label.
    pub fn code(self) -> &'static str {
        match self {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::Retry => "retry",
            AttemptOutcome::Dead => "dead",
            AttemptOutcome::NotAttempted => "not_attempted",
        }
    }
}

/// Dispatcher counters.
pub struct DispatchStats {
    destinations: usize,
    /// `[destination][AttemptOutcome]` attempt counts.
    attempts: Box<[AtomicU64]>,
    /// Per destination: accepted → delivered latency, µs.
    pub delivery_latency_us: Box<[Mutex<Histogram<u64>>]>,
}

impl DispatchStats {
    /// Empty stats for `destinations` destinations.
    pub fn new(destinations: usize) -> DispatchStats {
        DispatchStats {
            destinations,
            attempts: (0..destinations * AttemptOutcome::ALL.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            delivery_latency_us: (0..destinations)
                .map(|_| Mutex::new(latency_histogram()))
                .collect(),
        }
    }

    /// Counts one attempt.
    pub fn count(&self, destination: usize, outcome: AttemptOutcome) {
        let i = destination.min(self.destinations.saturating_sub(1)) * AttemptOutcome::ALL.len()
            + AttemptOutcome::ALL.iter().position(|o| *o == outcome).expect("in ALL");
        if let Some(c) = self.attempts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Attempts counted for (`destination`, `outcome`).
    pub fn attempts(&self, destination: usize, outcome: AttemptOutcome) -> u64 {
        let i = destination * AttemptOutcome::ALL.len()
            + AttemptOutcome::ALL.iter().position(|o| *o == outcome).expect("in ALL");
        self.attempts.get(i).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// Outcomes of configuration reloads (SIGHUP).
#[derive(Default)]
pub struct ReloadStats {
    /// Reloads applied.
    pub applied: AtomicU64,
    /// Reloads refused (errors in the file, or changes that need a restart).
    pub rejected: AtomicU64,
    /// Whether the last reload was refused (the file on disk is not what runs).
    pub last_rejected: std::sync::atomic::AtomicBool,
}

/// Every metric of one running hookwall.
pub struct Metrics {
    /// Configuration reloads.
    pub reloads: ReloadStats,
    /// One per ingress core.
    pub cores: Vec<std::sync::Arc<CoreStats>>,
    /// Ledger.
    pub ledger: LedgerStats,
    /// Dispatcher.
    pub dispatch: DispatchStats,
}
