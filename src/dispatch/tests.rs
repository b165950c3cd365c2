//! End-to-end dispatcher tests: an in-memory [`Inbox`] and a local HTTP destination on
//! `127.0.0.1:0` that fails on command. Tests wait on channels, never on fixed sleeps.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use tokio::sync::{mpsc, watch, Notify, Semaphore};

use super::*;
use crate::config::{Config, Live};
use crate::ledger::{DueEvent, Outcome, Settlement};
use crate::metrics::{AttemptOutcome, CoreStats, DispatchStats, LedgerStats, Metrics};

/// Longest any test waits for a condition before failing (not a sleep: a bound on a wait).
const WAIT_MAX: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- in-memory inbox

#[derive(Default)]
struct FakeState {
    events: BTreeMap<u64, DueEvent>,
    /// `(due_ms, seq)` schedule entries.
    schedule: BTreeSet<(u64, u64)>,
    /// Seqs a leasing inbox returned and that have not settled since.
    leased: BTreeSet<u64>,
}

/// An [`Inbox`] over a mutexed map: `settle` applies at once, calls `reply(true)`, and reports
/// `(seq, attempts, outcome)` to the test.
struct FakeInbox {
    state: Mutex<FakeState>,
    /// Calls of `due`: one per shard per scan.
    scans: AtomicUsize,
    settled: mpsc::UnboundedSender<(u64, u32, Outcome)>,
    /// Leases what a scan returns, as PostgreSQL does ([`Inbox::leases`]): a returned event
    /// is not returned again until it settles.
    leasing: bool,
}

impl FakeInbox {
    fn new() -> (Arc<FakeInbox>, mpsc::UnboundedReceiver<(u64, u32, Outcome)>) {
        Self::with_leases(false)
    }

    fn with_leases(
        leasing: bool,
    ) -> (Arc<FakeInbox>, mpsc::UnboundedReceiver<(u64, u32, Outcome)>) {
        let (settled, rx) = mpsc::unbounded_channel();
        let scans = AtomicUsize::new(0);
        (Arc::new(FakeInbox { state: Mutex::default(), scans, settled, leasing }), rx)
    }

    /// The seqs leased and not yet settled (a leasing inbox only).
    fn leased(&self) -> BTreeSet<u64> {
        self.state.lock().expect("test lock").leased.clone()
    }

    fn admit(&self, seq: u64, body: &[u8]) {
        self.admit_key(seq, &format!("acme/stripe-billing/evt_{seq}"), body);
    }

    fn admit_key(&self, seq: u64, key: &str, body: &[u8]) {
        self.admit_of(seq, key, 0, body);
    }

    /// Admits an event of the configuration's source `source` (index).
    fn admit_of(&self, seq: u64, key: &str, source: u32, body: &[u8]) {
        let event = DueEvent {
            shard: 0,
            seq,
            due_ms: 0,
            key: key.to_owned(),
            source,
            attempts: 0,
            received_at_ms: crate::clock::now_unix_ms(),
            secret_id: "k13".to_owned(),
            signed_at: Some(crate::clock::now_unix_s() - 2),
            content_type: Some(b"application/json; charset=utf-8".to_vec()),
            body: body.to_vec(),
            ordering: None,
        };
        let mut state = self.state.lock().expect("test lock");
        state.schedule.insert((0, seq));
        state.events.insert(seq, event);
    }
}

impl FakeInbox {
    /// Due events from `from` matching `wanted`; a leasing inbox skips and then marks leased.
    fn scan(
        &self,
        shard: usize,
        from: Option<(u64, u64)>,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
        wanted: impl Fn(&DueEvent) -> bool,
    ) -> Result<Vec<DueEvent>, String> {
        let mut state = self.state.lock().expect("test lock");
        let from = from.unwrap_or((0, 0));
        let due = state.schedule.range(from..).take_while(|(due, _)| *due <= now_ms);
        let due = due.filter(|(_, seq)| shard == 0 && !in_flight.contains(seq));
        let due = due.filter(|(_, seq)| !state.leased.contains(seq) && wanted(&state.events[seq]));
        let events: Vec<DueEvent> = due
            .take(limit)
            .map(|&(due_ms, seq)| DueEvent { due_ms, ..state.events[&seq].clone() })
            .collect();
        if self.leasing {
            state.leased.extend(events.iter().map(|e| e.seq));
        }
        Ok(events)
    }
}

impl Inbox for FakeInbox {
    fn shards(&self) -> usize {
        1
    }

    fn due(
        &self,
        shard: usize,
        from: Option<(u64, u64)>,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
    ) -> Result<Vec<DueEvent>, String> {
        self.scans.fetch_add(1, Ordering::SeqCst);
        self.scan(shard, from, now_ms, limit, in_flight, |_| true)
    }

    fn leases(&self) -> bool {
        self.leasing
    }

    fn due_of(
        &self,
        shard: usize,
        now_ms: u64,
        limit: usize,
        in_flight: &std::collections::HashSet<u64>,
        sources: crate::ledger::DueSources<'_>,
    ) -> Result<Vec<DueEvent>, String> {
        use crate::ledger::DueSources;
        self.scans.fetch_add(1, Ordering::SeqCst);
        self.scan(shard, None, now_ms, limit, in_flight, |e| match sources {
            DueSources::Only(only) => only.contains(&(e.source as usize)),
            DueSources::Unconfigured => e.source == u32::MAX,
        })
    }

    fn next_due_after(&self, _shard: usize, after_ms: u64) -> Option<u64> {
        let state = self.state.lock().expect("test lock");
        state.schedule.range((after_ms.saturating_add(1), 0)..).next().map(|(due, _)| *due)
    }

    fn settle(&self, s: Settlement) -> Result<(), Settlement> {
        {
            let mut state = self.state.lock().expect("test lock");
            assert!(state.schedule.remove(&(s.due_ms, s.seq)), "settled an unknown entry");
            state.leased.remove(&s.seq);
            if let Outcome::Retry { next_ms, .. } = s.outcome {
                state.schedule.insert((next_ms, s.seq));
                state.events.get_mut(&s.seq).expect("known event").attempts = s.attempts;
            }
        }
        let _ = self.settled.send((s.seq, s.attempts, s.outcome));
        (s.reply)(true);
        Ok(())
    }
}

// ---------------------------------------------------------------- local destination

/// One request as the destination saw it.
#[derive(Debug, Clone)]
struct Seen {
    headers: hyper::HeaderMap,
    body: Vec<u8>,
}

/// A destination that answers from a script (then `default_status`), optionally holding every
/// request until `gate` gives a permit, and records requests and peak concurrency.
struct Destination {
    script: Mutex<VecDeque<u16>>,
    default_status: u16,
    gate: Option<Semaphore>,
    seen: Mutex<Vec<Seen>>,
    running: AtomicUsize,
    running_max: AtomicUsize,
    running_now: watch::Sender<usize>,
}

impl Destination {
    fn new(script: &[u16], default_status: u16, gated: bool) -> Arc<Destination> {
        Arc::new(Destination {
            script: Mutex::new(script.iter().copied().collect()),
            default_status,
            gate: gated.then(|| Semaphore::new(0)),
            seen: Mutex::default(),
            running: AtomicUsize::new(0),
            running_max: AtomicUsize::new(0),
            running_now: watch::channel(0).0,
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("test lock").clone()
    }

    async fn handle(
        self: Arc<Self>,
        request: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<Full<Bytes>>, hyper::Error> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.running_max.fetch_max(now, Ordering::SeqCst);
        self.running_now.send_replace(now);
        let headers = request.headers().clone();
        let body = request.into_body().collect().await?.to_bytes().to_vec();
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("gate stays open").forget();
        }
        self.seen.lock().expect("test lock").push(Seen { headers, body });
        let status = self.script.lock().expect("test lock").pop_front();
        let left = self.running.fetch_sub(1, Ordering::SeqCst) - 1;
        self.running_now.send_replace(left);
        let mut response = hyper::Response::new(Full::new(Bytes::from_static(b"{}")));
        *response.status_mut() = hyper::StatusCode::from_u16(status.unwrap_or(self.default_status))
            .expect("scripted statuses are valid");
        Ok(response)
    }
}

/// Serves `dest` on `127.0.0.1:0` in the test's runtime; returns its URL.
async fn serve(dest: Arc<Destination>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let dest = Arc::clone(&dest);
            let service = hyper::service::service_fn(move |r| Arc::clone(&dest).handle(r));
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    format!("http://{addr}/hooks")
}

// ---------------------------------------------------------------- setup

/// One Stripe source forwarding to `url`, loaded through the real config loader; tiny
/// backoffs (1–5 ms) so retries are fast.
fn config(url: &str, attempts_max: u32, concurrency_max: usize) -> Arc<Config> {
    let text = format!(
        r#"
        [server]
        cores = 1
        [[source]]
        id = "stripe-billing"
        tenant = "acme"
        provider = "stripe"
        secrets = [{{ id = "k13", value = "whsec_test" }}]
        destination = "billing-api"
        [[destination]]
        id = "billing-api"
        url = "{url}"
        timeout = "10s"
        attempts_max = {attempts_max}
        backoff_min = "1ms"
        backoff_max = "5ms"
        concurrency_max = {concurrency_max}
        "#
    );
    let config = Config::from_toml_str(&text, std::path::Path::new("test.toml"), &|_| None);
    Arc::new(config.expect("the test config is valid"))
}

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics {
        reloads: Default::default(),
        cores: vec![Arc::new(CoreStats::new(1))],
        ledger: LedgerStats::new(1),
        dispatch: DispatchStats::new(1),
    })
}

/// A running dispatcher over a fake inbox and a scripted destination.
struct Rig {
    inbox: Arc<FakeInbox>,
    settled: mpsc::UnboundedReceiver<(u64, u32, Outcome)>,
    dest: Arc<Destination>,
    metrics: Arc<Metrics>,
    notify: Arc<Notify>,
    handle: DispatchHandle,
}

async fn rig(
    dest: Arc<Destination>,
    attempts_max: u32,
    concurrency_max: usize,
    events: u64,
) -> Rig {
    let url = serve(Arc::clone(&dest)).await;
    let (inbox, settled) = FakeInbox::new();
    for seq in 1..=events {
        inbox.admit(seq, format!("{{\"id\":\"evt_{seq}\",\"raw\":\"\u{e9}\\u00e9\"}} ").as_bytes());
    }
    let (metrics, notify) = (metrics(), Arc::new(Notify::new()));
    let cfg = config(&url, attempts_max, concurrency_max);
    let handle =
        spawn(Arc::new(Live::new(cfg)), inbox.clone(), Arc::clone(&notify), Arc::clone(&metrics))
            .expect("dispatcher starts");
    Rig { inbox, settled, dest, metrics, notify, handle }
}

/// Waits for the next settlement reported by a [`FakeInbox`].
async fn recv(settled: &mut mpsc::UnboundedReceiver<(u64, u32, Outcome)>) -> (u64, u32, Outcome) {
    let next = tokio::time::timeout(WAIT_MAX, settled.recv()).await;
    next.expect("a settlement arrives in time").expect("inbox alive")
}

impl Rig {
    /// Waits for the next settlement.
    async fn next_settled(&mut self) -> (u64, u32, Outcome) {
        recv(&mut self.settled).await
    }

    /// Waits for settlements until `seq` settles terminally; returns its (attempts, outcome)s.
    async fn settle_all(&mut self, seq: u64) -> Vec<(u32, Outcome)> {
        let mut history = Vec::new();
        loop {
            let (s, attempts, outcome) = self.next_settled().await;
            if s != seq {
                continue;
            }
            let terminal = !matches!(outcome, Outcome::Retry { .. });
            history.push((attempts, outcome));
            if terminal {
                return history;
            }
        }
    }

    fn count(&self, outcome: AttemptOutcome) -> u64 {
        self.metrics.dispatch.attempts(0, outcome)
    }
}

fn header<'a>(seen: &'a Seen, name: &str) -> &'a str {
    seen.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("<missing>")
}

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_on_the_third_attempt_with_one_idempotency_key() {
    let mut rig = rig(Destination::new(&[503, 503], 200, false), 5, 4, 1).await;
    let history = rig.settle_all(1).await;
    let attempts: Vec<u32> = history.iter().map(|(a, _)| *a).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert!(matches!(&history[0].1, Outcome::Retry { error, .. } if error == "status 503"));
    assert!(matches!(history[2].1, Outcome::Delivered { .. }));
    let seen = rig.dest.seen();
    assert_eq!(seen.len(), 3);
    let body = rig.inbox.state.lock().expect("test lock").events[&1].body.clone();
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s.body, body, "exact body bytes");
        assert_eq!(header(s, "hookwall-attempt"), (i + 1).to_string());
        assert_eq!(header(s, "idempotency-key"), "acme/stripe-billing/evt_1");
        assert_eq!(header(s, "hookwall-event-id"), "evt_1");
        assert_eq!(header(s, "hookwall-source"), "stripe-billing");
        assert_eq!(header(s, "content-type"), "application/json; charset=utf-8");
        assert!(header(s, "hookwall-received-at").ends_with('Z'));
        let verification = header(s, "hookwall-verification");
        assert!(verification.starts_with("provider=stripe; key_id=k13; skew_s="), "{verification}");
    }
    assert_eq!(rig.count(AttemptOutcome::Retry), 2);
    assert_eq!(rig.count(AttemptOutcome::Delivered), 1);
    let delivered = rig.metrics.dispatch.delivery_latency_us[0].lock().expect("test lock").len();
    assert_eq!(delivered, 1);
    assert!(rig.inbox.state.lock().expect("test lock").schedule.is_empty());
    rig.handle.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_failing_destination_dead_letters_after_attempts_max() {
    let mut rig = rig(Destination::new(&[], 500, false), 3, 4, 1).await;
    let history = rig.settle_all(1).await;
    assert_eq!(history.len(), 3);
    assert_eq!(history[2], (3, Outcome::Dead { error: "status 500 (attempt 3 of 3)".to_owned() }));
    assert_eq!(rig.dest.seen().len(), 3);
    assert_eq!(rig.count(AttemptOutcome::Dead), 1);
    assert_eq!(rig.count(AttemptOutcome::Retry), 2);
    rig.handle.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_answer_dead_letters_after_one_attempt() {
    let mut rig = rig(Destination::new(&[], 400, false), 5, 4, 1).await;
    let history = rig.settle_all(1).await;
    assert_eq!(history, [(1, Outcome::Dead { error: "status 400 (permanent)".to_owned() })]);
    assert_eq!(rig.dest.seen().len(), 1);
    rig.handle.shutdown();
}

/// Routing follows the source named in the idempotency key, never the source index stored
/// with the event (indexes shift when an operator reorders or removes sources): an event of
/// a source no longer configured is dead-lettered, not sent to whichever source now has its
/// old index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_an_unconfigured_source_are_dead_lettered_not_misrouted() {
    let mut rig = rig(Destination::new(&[], 200, false), 5, 4, 0).await;
    rig.inbox.admit_key(7, "acme/removed-source/evt_7", b"{}");
    rig.inbox.admit_key(8, "other-tenant/stripe-billing/evt_8", b"{}");
    rig.notify.notify_one();
    for _ in 0..2 {
        let (seq, attempts, outcome) = rig.next_settled().await;
        assert!(matches!(outcome, Outcome::Dead { .. }), "seq {seq}: {outcome:?}");
        assert_eq!(attempts, 0, "no attempt was made for seq {seq}");
    }
    assert!(rig.dest.seen().is_empty(), "nothing reached the destination");
    rig.handle.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_max_is_respected_and_late_admissions_delivered() {
    let events = 12;
    let mut rig = rig(Destination::new(&[], 200, true), 5, 3, events).await;
    let mut running = rig.dest.running_now.subscribe();
    let full = tokio::time::timeout(WAIT_MAX, running.wait_for(|n| *n == 3)).await;
    full.expect("three attempts in flight in time").expect("destination alive");
    // An admission while the destination is full waits in the ledger, then goes out.
    rig.inbox.admit(events + 1, b"late");
    rig.notify.notify_one();
    rig.dest.gate.as_ref().expect("gated").add_permits(usize::try_from(events).expect("small") + 1);
    let mut delivered = BTreeSet::new();
    while delivered.len() < usize::try_from(events).expect("small") + 1 {
        let (seq, attempts, outcome) = rig.next_settled().await;
        assert!(matches!(outcome, Outcome::Delivered { .. }) && attempts == 1, "{outcome:?}");
        assert!(delivered.insert(seq), "seq {seq} settled twice");
    }
    assert_eq!(rig.dest.running_max.load(Ordering::SeqCst), 3);
    assert_eq!(rig.dest.seen().len(), usize::try_from(events).expect("small") + 1);
    rig.handle.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_retried_then_dead() {
    // Bind and drop a listener: its port refuses connections.
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let (inbox, mut settled) = FakeInbox::new();
    inbox.admit(1, b"{}");
    let cfg = config(&format!("http://{port}/"), 2, 1);
    let handle =
        spawn(Arc::new(Live::new(cfg)), inbox, Arc::new(Notify::new()), metrics()).expect("starts");
    let first = recv(&mut settled).await;
    assert!(matches!(&first.2, Outcome::Retry { error, .. } if error.starts_with("connect: ")));
    let second = recv(&mut settled).await;
    assert!(matches!(&second.2, Outcome::Dead { error } if error.ends_with("(attempt 2 of 2)")));
    handle.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_an_idle_loop_before_its_timer() {
    let mut rig = rig(Destination::new(&[], 200, false), 5, 1, 0).await;
    let notified = crate::clock::monotonic();
    rig.inbox.admit(1, b"{}");
    rig.notify.notify_one();
    let (seq, _, outcome) = rig.next_settled().await;
    assert!(seq == 1 && matches!(outcome, Outcome::Delivered { .. }));
    // The idle timer is 1 s; a woken loop delivers well before it.
    assert!(notified.elapsed() < Duration::from_millis(800), "{:?}", notified.elapsed());
    rig.handle.shutdown();
}

/// Issue 6: a notification per group commit (every few hundred µs at high rates) must not cost a
/// scan each; notifications alone scan at most once per `NOTIFIED_SCAN_GAP`, and the events
/// they announced are all delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_in_quick_succession_share_one_scan_per_gap() {
    let mut rig = rig(Destination::new(&[], 200, false), 5, 64, 0).await;
    // The loop's first scan, at start, before the measured window.
    let started = crate::clock::monotonic();
    while rig.inbox.scans.load(Ordering::SeqCst) == 0 {
        assert!(started.elapsed() < WAIT_MAX, "the dispatcher never scanned");
        tokio::task::yield_now().await;
    }
    let before = rig.inbox.scans.load(Ordering::SeqCst);
    let window = crate::clock::monotonic();
    let mut notifications = 0u64;
    while window.elapsed() < engine::NOTIFIED_SCAN_GAP * 25 {
        notifications += 1;
        rig.notify.notify_one();
        tokio::task::yield_now().await;
    }
    let scans = rig.inbox.scans.load(Ordering::SeqCst) - before;
    let elapsed = window.elapsed();
    let allowed = usize::try_from(elapsed.as_micros() / engine::NOTIFIED_SCAN_GAP.as_micros())
        .expect("small")
        + 2;
    assert!(
        scans <= allowed,
        "{scans} scans for {notifications} notifications in {elapsed:?} (at most {allowed})"
    );
    // What the notifications announce is still delivered.
    for seq in 1..=100 {
        rig.inbox.admit(seq, b"{}");
        rig.notify.notify_one();
    }
    let mut delivered = BTreeSet::new();
    while delivered.len() < 100 {
        let (seq, _, outcome) = rig.next_settled().await;
        assert!(matches!(outcome, Outcome::Delivered { .. }), "{seq}: {outcome:?}");
        delivered.insert(seq);
    }
    rig.handle.shutdown();
}

/// A notification that lands inside the gap (just after a scan started) is not dropped: its
/// scan runs when the gap ends, long before the loop's 1 s idle timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_inside_the_gap_scans_when_the_gap_ends() {
    let mut rig = rig(Destination::new(&[], 200, false), 5, 4, 0).await;
    for seq in 1..=5u64 {
        // Make the loop start a scan, and wait until it has.
        let before = rig.inbox.scans.load(Ordering::SeqCst);
        rig.notify.notify_one();
        let asked = crate::clock::monotonic();
        while rig.inbox.scans.load(Ordering::SeqCst) == before {
            assert!(asked.elapsed() < WAIT_MAX, "the dispatcher never scanned");
            tokio::task::yield_now().await;
        }
        // At once, inside the gap: an event and its notification.
        let notified = crate::clock::monotonic();
        rig.inbox.admit(seq, b"{}");
        rig.notify.notify_one();
        let (settled, _, outcome) = rig.next_settled().await;
        assert!(settled == seq && matches!(outcome, Outcome::Delivered { .. }), "{outcome:?}");
        // The idle timer is 1 s; the gap is 2 ms.
        let took = notified.elapsed();
        assert!(took < Duration::from_millis(800), "event {seq} delivered after {took:?}");
    }
    rig.handle.shutdown();
}

#[test]
fn https_client_builds_with_ring() {
    assert!(attempt::client().is_ok());
}

/// A leasing inbox (PostgreSQL) is asked only for events the dispatcher can start now, per
/// destination: none of a paused destination's, and no more of a running one's than its free
/// attempt slots. Before, one scan leased up to every destination's free slots in due order
/// over all sources: a paused (or saturated, or failing) destination's older backlog took the
/// leases, was not attempted, and held the other destination's events back until those leases
/// ran out (30 s by default), scan after scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leasing_scan_takes_only_what_each_destination_can_start() {
    let dest = Destination::new(&[], 200, true);
    let url = serve(Arc::clone(&dest)).await;
    let source = |id: &str, destination: &str| {
        format!(
            "[[source]]\nid = \"{id}\"\ntenant = \"acme\"\nprovider = \"stripe\"\n\
             secrets = [{{ id = \"k13\", value = \"whsec_test\" }}]\ndestination = \"{destination}\"\n"
        )
    };
    let text = format!(
        "[server]\ncores = 1\n{}{}\
         [[destination]]\nid = \"paused-api\"\nurl = \"{url}\"\npaused = true\n\
         [[destination]]\nid = \"live-api\"\nurl = \"{url}\"\nconcurrency_max = 2\n",
        source("stripe-paused", "paused-api"),
        source("stripe-live", "live-api"),
    );
    let config = Config::from_toml_str(&text, std::path::Path::new("test.toml"), &|_| None);
    let config = Arc::new(config.expect("the test config is valid"));
    let (inbox, mut settled) = FakeInbox::with_leases(true);
    // The paused destination's backlog is older, so it comes first in due order.
    for seq in 1..=20 {
        inbox.admit_of(seq, &format!("acme/stripe-paused/evt_{seq}"), 0, b"{}");
    }
    for seq in 21..=25 {
        inbox.admit_of(seq, &format!("acme/stripe-live/evt_{seq}"), 1, b"{}");
    }
    let (metrics, notify) = (metrics(), Arc::new(Notify::new()));
    let handle = spawn(Arc::new(Live::new(config)), inbox.clone(), Arc::clone(&notify), metrics)
        .expect("dispatcher starts");
    let mut running = dest.running_now.subscribe();
    let full = tokio::time::timeout(WAIT_MAX, running.wait_for(|n| *n == 2)).await;
    full.expect("two attempts in flight in time").expect("destination alive");
    assert_eq!(inbox.leased(), BTreeSet::from([21, 22]), "leased: only what was started");
    dest.gate.as_ref().expect("gated").add_permits(5);
    let mut delivered = BTreeSet::new();
    while delivered.len() < 5 {
        let (seq, _, outcome) = recv(&mut settled).await;
        assert!(matches!(outcome, Outcome::Delivered { .. }), "seq {seq}: {outcome:?}");
        delivered.insert(seq);
    }
    assert_eq!(delivered, (21..=25).collect::<BTreeSet<u64>>());
    assert!(inbox.leased().is_empty(), "the paused destination's events were leased");
    handle.shutdown();
}
