//! `hookwall loadgen` (SPEC §1): a load generator for webhook receivers — hookwall or any
//! other URL. Each request is a delivery signed exactly as the chosen provider signs one
//! ([`sign`]), with a unique event id, or, with probability `--duplicates`, a re-send of an
//! earlier event of the same connection (same id and bytes, signed afresh, as a provider's
//! retry is).
//!
//! Two modes:
//! - open loop (`--rate N/s`, the default at 1000/s): request `i` is *intended* at
//!   `start + i / rate`; whichever connection is free takes the next request, and its latency
//!   is measured from the intended time, so a stalled server is charged for the requests it
//!   delayed (coordinated-omission correction, as wrk2 does). The actual-send ("service")
//!   latency is reported beside it. Timers tick in milliseconds: a connection wakes up to
//!   1 ms before the intended time and sends then, and a request that leaves early is measured
//!   from its actual send (the timer's rounding does not inflate the latency; it jitters the
//!   arrivals by at most 1 ms). A wake-up that is late anyway counts against the latency.
//! - closed loop (`--max`): every connection sends its next request as soon as the previous
//!   answer arrived; latency from the send.
//!
//! Every connection is opened before the clock starts (as wrk does), so handshakes are not
//! charged to the first requests.
//!
//! A run always stops by itself: at `--duration`, or after `--requests N`, whichever comes
//! first. Exit codes (SPEC §1): 0 the run completed, 1 the target cannot be reached (or answered
//! nothing), 2 bad usage.

mod conn;
pub mod report;
pub mod sign;

use std::net::ToSocketAddrs as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng as _;

use crate::clock;
use crate::limits::{
    LOADGEN_CONNECTIONS_MAX, LOADGEN_DURATION_MAX, LOADGEN_HISTORY_MAX, LOADGEN_RATE_MAX,
    LOADGEN_THREADS_MAX,
};
use crate::provider::Provider;
use conn::Target;
use report::{Shape, Tally};
use sign::Signer;

/// `loadgen`'s arguments (SPEC §1).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The URL to POST to, `http://host[:port]/path` (plain HTTP/1.1; e.g.
    /// `http://127.0.0.1:8080/webhooks/stripe-billing`).
    #[arg(long)]
    pub target: String,
    /// Provider whose signature scheme signs each request: any provider this build verifies
    /// (`docs/providers.md`; an unknown name lists them).
    #[arg(long)]
    pub provider: String,
    /// The source's secret exactly as the provider's dashboard shows it (visible to other
    /// local users in the process list: use test secrets).
    #[arg(long)]
    pub secret: String,
    /// Open loop: requests per second, `N` or `N/s` (default 1000/s).
    #[arg(long, conflicts_with = "max", allow_hyphen_values = true)]
    pub rate: Option<String>,
    /// Closed loop: each connection sends as fast as it is answered.
    #[arg(long)]
    pub max: bool,
    /// How long to send, humantime (`30s`, `2m`); at most 1 h.
    #[arg(long, default_value = "30s")]
    pub duration: String,
    /// Stop after this many requests, even before `--duration`.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Concurrent connections, each with one request in flight.
    #[arg(long, default_value_t = 16, allow_negative_numbers = true)]
    pub connections: usize,
    /// Share of requests that re-send an earlier event (0 ≤ x < 1).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub duplicates: f64,
    /// How long one response may take before the request counts as timed out, humantime.
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// Write the latency distribution here (HdrHistogram percentile text, ms; plottable).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Print the report as one JSON object (latencies in µs) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Worker threads, 1..=1024 (default: the CPUs this process may run on).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// A validated run: every argument checked, nothing resolved or opened yet.
pub struct Plan {
    /// The URL as given.
    pub url: String,
    /// Host and port to resolve.
    pub authority: (String, u16),
    /// `Host` header value.
    pub host_header: String,
    /// Path and query.
    pub path: String,
    /// Provider.
    pub provider: Provider,
    /// Signer for that provider and secret.
    pub signer: Arc<Signer>,
    /// `Some(requests/s)` open loop, `None` closed loop.
    pub rate: Option<f64>,
    /// Sending stops this long after the start.
    pub duration: Duration,
    /// Sending stops after this many requests.
    pub requests_max: Option<u64>,
    /// Connections.
    pub connections: usize,
    /// Duplicate share, `[0, 1)`.
    pub duplicates: f64,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Worker threads.
    pub threads: usize,
}

/// Checks every argument; the message names the flag and what is wrong.
///
/// # Errors
/// A message for the first bad flag (exit 2).
pub fn plan(args: &Args) -> Result<Plan, String> {
    let (url, authority, host_header, path) = parse_target(&args.target)?;
    let Some(provider) = Provider::parse(&args.provider) else {
        let known: Vec<&str> = Provider::ALL.iter().map(|p| p.name()).collect();
        return Err(format!(
            "--provider {:?}: unknown or not supported by this build (supported: {})",
            args.provider,
            known.join(", ")
        ));
    };
    let signer = Signer::new(provider, &args.secret).map_err(|why| format!("--secret: {why}"))?;
    // URL-signing providers sign the URL the server rebuilds from `Host` and the target.
    let signer = Arc::new(signer.with_url(format!("http://{host_header}{path}")));
    let rate = if args.max { None } else { Some(parse_rate(args.rate.as_deref())?) };
    let duration = parse_duration("--duration", &args.duration)?;
    if duration > LOADGEN_DURATION_MAX {
        return Err(format!(
            "--duration {}: longer than the most a run may last ({})",
            args.duration,
            humantime::format_duration(LOADGEN_DURATION_MAX)
        ));
    }
    if args.requests == Some(0) {
        return Err("--requests 0: must be at least 1".to_owned());
    }
    if !(1..=LOADGEN_CONNECTIONS_MAX).contains(&args.connections) {
        return Err(format!(
            "--connections {}: must be 1..={LOADGEN_CONNECTIONS_MAX}",
            args.connections
        ));
    }
    if !(0.0..1.0).contains(&args.duplicates) {
        return Err(format!(
            "--duplicates {}: must be a share in [0, 1), e.g. 0.1 for 10 %",
            args.duplicates
        ));
    }
    let timeout = parse_duration("--timeout", &args.timeout)?;
    let threads = match args.threads {
        Some(n) if !(1..=LOADGEN_THREADS_MAX).contains(&n) => {
            return Err(format!("--threads {n}: must be 1..={LOADGEN_THREADS_MAX}"));
        }
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
    };
    Ok(Plan {
        url,
        authority,
        host_header,
        path,
        provider,
        signer,
        rate,
        duration,
        requests_max: args.requests,
        connections: args.connections,
        duplicates: args.duplicates,
        timeout,
        threads,
    })
}

type TargetParts = (String, (String, u16), String, String);

fn parse_target(text: &str) -> Result<TargetParts, String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("--target {text:?}: {e}"))?;
    // The URL standard reads `http:///x`, `http:/x` and `http:x` as host `x`; a missing host
    // is what was typed.
    if !text.split_once("://").is_some_and(|(_, rest)| !rest.is_empty() && !rest.starts_with('/')) {
        return Err(format!("--target {text:?}: no host (http://host[:port]/path)"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Not echoed: the password is the point of the mistake.
        return Err("--target must not carry credentials (user:password@host): loadgen sends \
                    none from the URL; a Postmark source's Basic credentials go in --secret \
                    user:password"
            .to_owned());
    }
    if url.port() == Some(0) {
        return Err(format!("--target {text:?}: port 0 cannot be connected to"));
    }
    if url.scheme() != "http" {
        return Err(format!(
            "--target {text:?}: scheme {:?} is not supported (plain http:// only)",
            url.scheme()
        ));
    }
    let Some(host) = url.host_str() else {
        return Err(format!("--target {text:?}: no host"));
    };
    let port = url.port().unwrap_or(80);
    let host_header = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let mut path = url.path().to_owned();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    Ok((text.to_owned(), (bare, port), host_header, path))
}

fn parse_rate(text: Option<&str>) -> Result<f64, String> {
    let Some(text) = text else { return Ok(1000.0) };
    let number = text.strip_suffix("/s").unwrap_or(text);
    let rate: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("--rate {text:?}: expected requests per second, `N` or `N/s`"))?;
    if !(rate > 0.0 && rate <= LOADGEN_RATE_MAX) {
        return Err(format!(
            "--rate {text:?}: must be more than 0 and at most {LOADGEN_RATE_MAX}/s"
        ));
    }
    Ok(rate)
}

fn parse_duration(flag: &str, text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("{flag} {text:?}: {e} (expected e.g. 500ms, 30s, 2m)"))?;
    if d.is_zero() {
        return Err(format!("{flag} {text:?}: must be longer than zero"));
    }
    Ok(d)
}

/// Runs `hookwall loadgen` and returns its exit code; the report goes to stdout, errors and
/// the progress line to stderr.
pub fn main(args: &Args) -> ExitCode {
    let plan = match plan(args) {
        Ok(plan) => plan,
        Err(why) => {
            eprintln!("hookwall loadgen: {why}");
            return ExitCode::from(2);
        }
    };
    // Each connection is a descriptor: raise the soft limit as `serve` does, and refuse a
    // count the process could not open (else the excess would fail to connect, unseen).
    let fds = crate::ingress::raise_fd_limit();
    let needed = u64::try_from(plan.connections).unwrap_or(u64::MAX).saturating_add(FDS_SPARE);
    if fds != 0 && needed > fds {
        eprintln!(
            "hookwall loadgen: --connections {}: this process may open only {fds} file descriptors (raise `ulimit -n`)",
            plan.connections
        );
        return ExitCode::from(2);
    }
    // Opened before the run, so a path that cannot be written is bad usage found at once,
    // not after the whole load was sent; but not truncated until the run has finished, so a
    // run that fails leaves an earlier run's distribution as it was.
    let existed = args.out.as_deref().is_some_and(std::path::Path::exists);
    let open = |path: &std::path::Path| {
        std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)
    };
    let out = match args.out.as_deref().map(open).transpose() {
        Ok(out) => out,
        Err(e) => {
            let path = args.out.as_deref().unwrap_or(std::path::Path::new("")).display();
            eprintln!("hookwall loadgen: cannot write --out {path}: {e}");
            return ExitCode::from(2);
        }
    };
    // A run that fails leaves no empty file it created behind either.
    let discard_out = || {
        if let (Some(path), false) = (args.out.as_deref(), existed) {
            let _ = std::fs::remove_file(path);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hookwall loadgen: cannot start the runtime: {e}");
            discard_out();
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(&plan)) {
        Ok((shape, tally)) => finish(args, out, &shape, &tally),
        Err(why) => {
            eprintln!("hookwall loadgen: {why}");
            discard_out();
            ExitCode::from(1)
        }
    }
}

fn finish(args: &Args, out: Option<std::fs::File>, shape: &Shape, tally: &Tally) -> ExitCode {
    if args.json {
        println!("{}", report::json(shape, tally));
    } else {
        print!("{}", report::text(shape, tally));
    }
    if let (Some(mut file), Some(path)) = (out, &args.out) {
        let hgrm = report::hgrm(&tally.corrected_us);
        let written =
            file.set_len(0).and_then(|()| std::io::Write::write_all(&mut file, hgrm.as_bytes()));
        if let Err(e) = written {
            eprintln!("hookwall loadgen: cannot write --out {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if tally.answered_total() == 0 {
        eprintln!("hookwall loadgen: the target answered no request");
        return ExitCode::from(1);
    }
    // Still finished runs (loadgen targets any URL), but almost surely not the ones meant.
    let all =
        |status: u16| tally.by_http.get(&status).copied().unwrap_or(0) == tally.answered_total();
    if all(401) {
        eprintln!(
            "hookwall loadgen: warning: every answer was 401: the target refused the signatures; \
             check --secret and --provider against the source's configuration"
        );
    } else if all(404) {
        eprintln!(
            "hookwall loadgen: warning: every answer was 404: nothing is configured at that path; \
             check --target (hookwall's sources are at /webhooks/<source id>)"
        );
    }
    ExitCode::SUCCESS
}

/// What every connection task shares.
struct Shared {
    plan_rate: Option<f64>,
    start: Instant,
    end: Instant,
    requests_max: Option<u64>,
    /// Next request index to take.
    next: AtomicU64,
    /// Progress counters (read by the progress line).
    sent: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
    /// Makes event ids unique across runs: the process id and the start time.
    run_id: String,
    /// The tallies connections record into: connection `c` into `tallies[c % len]`. A few
    /// per worker thread, not one per connection: each holds three HdrHistograms of about
    /// 140 KiB, and at 2 048 connections one each made 850 MiB, zeroed by the first requests
    /// after the clock had started.
    tallies: Vec<Mutex<Tally>>,
}

/// Tallies per worker thread (see [`Shared::tallies`]): enough that threads seldom wait on
/// one another's lock.
const TALLIES_PER_THREAD: usize = 4;

/// The most tallies, whatever `--threads` says: about 0.5 MiB each once used, so loadgen's
/// memory stays bounded on a machine with many CPUs (or `--threads 1024`).
const TALLIES_MAX: usize = 64;

/// Resolves and probes the target, runs every connection until the plan ends, and merges
/// their tallies.
async fn run(plan: &Plan) -> Result<(Shape, Tally), String> {
    let (host, port) = &plan.authority;
    let addr = (host.as_str(), *port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}:{port} (--target {}): {e}", plan.url))?
        .next()
        .ok_or_else(|| format!("{host}:{port} resolves to no address (--target {})", plan.url))?;
    let target = Arc::new(Target { addr, host: plan.host_header.clone(), path: plan.path.clone() });
    let probe = tokio::time::timeout(plan.timeout, conn::connect(addr))
        .await
        .map_err(|_| format!("cannot connect to {addr} (--target {}): timed out", plan.url))?
        .map_err(|e| format!("cannot connect to {addr} (--target {}): {e}", plan.url))?;
    // Every connection is opened before the clock starts (as wrk does): opening hundreds at
    // the first intended send would charge the handshakes — and the SYN retries of a full listen
    // backlog — to the first requests' latency. One that cannot be opened now connects at its
    // first request, where a failure is counted.
    let mut streams = preconnect(addr, plan.connections.saturating_sub(1), plan.timeout).await;
    streams.push(Some(probe));
    let stripes = plan.threads.saturating_mul(TALLIES_PER_THREAD).clamp(1, TALLIES_MAX);
    let stripes = stripes.min(plan.connections.max(1));
    let tallies: Vec<Mutex<Tally>> = (0..stripes).map(|_| Mutex::new(Tally::new())).collect();
    let start = clock::monotonic();
    let shared = Arc::new(Shared {
        plan_rate: plan.rate,
        start,
        end: start + plan.duration,
        requests_max: plan.requests_max,
        next: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        answered: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        run_id: format!("{}_{}", std::process::id(), clock::now_unix_ms()),
        tallies,
    });
    let progress = progress(plan, &shared);
    let mut tasks = Vec::with_capacity(plan.connections);
    for (c, stream) in streams.into_iter().enumerate() {
        let job = Job {
            connection: c,
            shared: Arc::clone(&shared),
            target: Arc::clone(&target),
            signer: Arc::clone(&plan.signer),
            duplicates: plan.duplicates,
            timeout: plan.timeout,
        };
        tasks.push(tokio::spawn(connection(job, stream)));
    }
    for task in tasks {
        task.await.map_err(|e| format!("a connection task failed: {e}"))?;
    }
    let mut tally = Tally::new();
    for t in &shared.tallies {
        let part = t.lock().map_err(|_| "a connection task panicked".to_owned())?;
        tally.merge(&part);
    }
    let mut elapsed = clock::monotonic().saturating_duration_since(start);
    if let Some(rate) = plan.rate {
        // Open loop: every request intended before the end counts, sent or not, so a stalled
        // target shows as unsent requests instead of a shorter run.
        let intended = (plan.duration.as_secs_f64() * rate).ceil() as u64;
        let intended = plan.requests_max.map_or(intended, |n| intended.min(n));
        tally.unsent = intended.saturating_sub(tally.sent);
        // The run spans the time its intended requests were spread over (the whole duration
        // unless --requests ended it sooner), even when the last one was answered before the
        // end: otherwise 5 requests at 5/s in 1 s read as 6.2/s (0.8 s from first to last).
        let spread = Duration::from_secs_f64(intended as f64 / rate).min(plan.duration);
        elapsed = elapsed.max(spread);
    }
    progress.abort();
    let shape = Shape {
        target: plan.url.clone(),
        provider: plan.provider.name(),
        rate: plan.rate,
        connections: plan.connections,
        duplicates: plan.duplicates,
        elapsed,
    };
    Ok((shape, tally))
}

/// Opens `n` connections to `addr` concurrently, each within `timeout`; `None` for one that
/// could not be opened.
async fn preconnect(
    addr: std::net::SocketAddr,
    n: usize,
    timeout: Duration,
) -> Vec<Option<tokio::net::TcpStream>> {
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..n {
        opening.spawn(async move { tokio::time::timeout(timeout, conn::connect(addr)).await });
    }
    let mut streams = Vec::with_capacity(n + 1);
    while let Some(opened) = opening.join_next().await {
        streams.push(opened.ok().and_then(Result::ok).and_then(Result::ok));
    }
    streams
}

/// One connection's share of the run.
struct Job {
    connection: usize,
    shared: Arc<Shared>,
    target: Arc<Target>,
    signer: Arc<Signer>,
    duplicates: f64,
    timeout: Duration,
}

/// An event this connection sent: re-sent as a duplicate with its id and exact body.
struct Sent {
    id: String,
    body: Vec<u8>,
}

/// Descriptors loadgen needs beyond its connections (runtime, stdio, the probe, `--out`).
const FDS_SPARE: u64 = 64;

/// The resolution of tokio's timer.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// Pause after a failed connect before the next request, so a target that went away is not
/// hammered with connects in a tight loop.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

/// One connection: takes request indices until the plan ends, one request in flight at a
/// time, reconnecting after an error; records into its share of [`Shared::tallies`].
async fn connection(job: Job, mut stream: Option<tokio::net::TcpStream>) {
    let shared = &job.shared;
    let tallies = &shared.tallies;
    // Locked for one update at a time, never across an await.
    let tally = || {
        tallies[job.connection % tallies.len()]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let mut history: Vec<Sent> = Vec::new();
    let mut buf = Vec::with_capacity(4096);
    let mut seq = 0u64;
    // Whether `stream` is a connection opened before the clock and not used yet.
    let mut unused = stream.is_some();
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if shared.requests_max.is_some_and(|n| i >= n) {
            break;
        }
        let intended = match shared.plan_rate {
            Some(rate) => shared.start + Duration::from_secs_f64(i as f64 / rate),
            None => clock::monotonic(),
        };
        if intended >= shared.end {
            break;
        }
        // tokio's timer ticks in whole milliseconds and rounds a deadline up: aim one tick
        // early, so a request leaves up to 1 ms before its intended time instead of after.
        if let Some(wake) = intended.checked_sub(TIMER_TICK) {
            if wake > clock::monotonic() {
                tokio::time::sleep_until(tokio::time::Instant::from_std(wake)).await;
            }
        }
        if clock::monotonic() >= shared.end {
            break;
        }
        let (id, body, duplicate) = next_event(&job, &mut history, &mut seq);
        let headers = job.signer.sign(&id, clock::now_unix_s(), &body);
        let request = conn::request(&job.target, &headers, &body);
        {
            let mut t = tally();
            t.sent += 1;
            t.duplicates_sent += u64::from(duplicate);
        }
        shared.sent.fetch_add(1, Ordering::Relaxed);
        let mut result = exchange(&job, &mut stream, &mut buf, &request).await;
        if unused && matches!(result, Exchanged::Failed { connect: false }) {
            // Opened before the clock started, this connection may have waited longer than
            // the target keeps an idle connection: a new one gets the request instead.
            stream = None;
            result = exchange(&job, &mut stream, &mut buf, &request).await;
        }
        unused = false;
        let done = clock::monotonic();
        match result {
            Exchanged::Answered(response, sent_at) => {
                // From the intended time when the request left late (charged to the server:
                // coordinated-omission correction), from the send when it left early.
                let corrected = micros(done.saturating_duration_since(intended.min(sent_at)));
                let service = micros(done.saturating_duration_since(sent_at));
                // The body's JSON is read before the lock is taken.
                let code = report::status_code(&response.body);
                tally().answered(corrected, service, response.status, code);
                shared.answered.fetch_add(1, Ordering::Relaxed);
                if !response.keep_alive {
                    stream = None;
                }
            }
            Exchanged::TimedOut => {
                tally().timeouts += 1;
                shared.failed.fetch_add(1, Ordering::Relaxed);
                stream = None;
            }
            Exchanged::Failed { connect } => {
                tally().errors += 1;
                shared.failed.fetch_add(1, Ordering::Relaxed);
                stream = None;
                if connect {
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                }
            }
        }
        // Without duplicates nothing is re-sent: no history (at 2 048 connections it held
        // 512 Ki bodies and replaced one at a random, cold place per request).
        if !duplicate && job.duplicates > 0.0 {
            remember(&mut history, Sent { id, body });
        }
    }
}

/// The event of the next request: a re-send of an earlier one with probability
/// `duplicates` (when there is one), else a new one. Returns `(id, body, is_duplicate)`.
fn next_event(job: &Job, history: &mut [Sent], seq: &mut u64) -> (String, Vec<u8>, bool) {
    let mut rng = rand::rng();
    if !history.is_empty() && job.duplicates > 0.0 && rng.random_bool(job.duplicates) {
        let earlier = &history[rng.random_range(0..history.len())];
        return (earlier.id.clone(), earlier.body.clone(), true);
    }
    *seq += 1;
    let id = format!("evt_lg_{}_{}_{}", job.shared.run_id, job.connection, seq);
    let body = job.signer.body(&id);
    (id, body, false)
}

/// Keeps up to [`LOADGEN_HISTORY_MAX`] new events; once full, each new one replaces a random
/// earlier one (the duplicates are re-sends of recent and older events alike).
fn remember(history: &mut Vec<Sent>, sent: Sent) {
    if history.len() < LOADGEN_HISTORY_MAX {
        history.push(sent);
    } else {
        let slot = rand::rng().random_range(0..history.len());
        history[slot] = sent;
    }
}

enum Exchanged {
    /// A whole response, and when the request was written.
    Answered(conn::Response, Instant),
    /// No whole response within `--timeout`.
    TimedOut,
    /// Connect or IO error (`connect`: the connection could not be opened).
    Failed { connect: bool },
}

async fn exchange(
    job: &Job,
    stream: &mut Option<tokio::net::TcpStream>,
    buf: &mut Vec<u8>,
    request: &[u8],
) -> Exchanged {
    if stream.is_none() {
        buf.clear();
        match tokio::time::timeout(job.timeout, conn::connect(job.target.addr)).await {
            Ok(Ok(s)) => *stream = Some(s),
            Ok(Err(_)) | Err(_) => return Exchanged::Failed { connect: true },
        }
    }
    let Some(s) = stream.as_mut() else { return Exchanged::Failed { connect: true } };
    let sent_at = clock::monotonic();
    match tokio::time::timeout(job.timeout, conn::exchange(s, buf, request)).await {
        Ok(Ok(response)) => Exchanged::Answered(response, sent_at),
        Ok(Err(_)) => Exchanged::Failed { connect: false },
        Err(_) => Exchanged::TimedOut,
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The progress line on stderr (drawn only when stderr is a terminal): elapsed of
/// `--duration`, requests sent, answered and failed, refreshed 5 times a second.
fn progress(plan: &Plan, shared: &Arc<Shared>) -> tokio::task::JoinHandle<()> {
    let total_ms = u64::try_from(plan.duration.as_millis()).unwrap_or(u64::MAX);
    let bar = indicatif::ProgressBar::new(total_ms);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {elapsed_precise} {msg}")
            .expect("static progress template is valid"),
    );
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tick.tick().await;
            let elapsed = clock::monotonic().saturating_duration_since(shared.start);
            bar.set_position(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
            bar.set_message(format!(
                "sent {}  answered {}  failed {}",
                shared.sent.load(Ordering::Relaxed),
                shared.answered.load(Ordering::Relaxed),
                shared.failed.load(Ordering::Relaxed),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    /// Parses `loadgen ARGS` through the real CLI and plans it: `Ok(())` or the message.
    fn check(args: &[&str], expect: Result<(), &str>) {
        let mut argv = vec!["hookwall", "loadgen"];
        argv.extend_from_slice(args);
        let cli = crate::cli::Cli::try_parse_from(&argv).expect("clap accepts the shape");
        let crate::cli::Command::Loadgen(a) = cli.command else { panic!("not loadgen") };
        let got = plan(&a).map(|_| ());
        match (got, expect) {
            (Ok(()), Ok(())) => {}
            (Err(msg), Err(needle)) => assert!(msg.contains(needle), "{args:?}: {msg}"),
            (got, expect) => panic!("{args:?}: got {got:?}, expected {expect:?}"),
        }
    }

    const BASE: [&str; 6] = [
        "--target",
        "http://127.0.0.1:8080/webhooks/s",
        "--provider",
        "stripe",
        "--secret",
        "whsec_x",
    ];

    fn with(extra: &[&'static str]) -> Vec<&'static str> {
        let mut v = BASE.to_vec();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn flags_are_checked() {
        check(&BASE, Ok(()));
        check(&with(&["--rate", "500/s", "--duration", "2s", "--duplicates", "0.1"]), Ok(()));
        check(&with(&["--max", "--connections", "64", "--requests", "10"]), Ok(()));
        check(&with(&["--rate", "0"]), Err("--rate \"0\": must be more than 0"));
        check(&with(&["--rate", "fast"]), Err("--rate \"fast\": expected requests per second"));
        check(&with(&["--duplicates", "1"]), Err("--duplicates 1: must be a share in [0, 1)"));
        check(&with(&["--duplicates=-0.1"]), Err("--duplicates -0.1"));
        check(&with(&["--duration", "0s"]), Err("--duration \"0s\": must be longer than zero"));
        check(&with(&["--duration", "2h"]), Err("--duration 2h: longer than the most"));
        check(&with(&["--duration", "soon"]), Err("--duration \"soon\""));
        check(&with(&["--connections", "0"]), Err("--connections 0: must be 1..=4096"));
        check(&with(&["--requests", "0"]), Err("--requests 0"));
        check(&with(&["--threads", "0"]), Err("--threads 0: must be 1..=1024"));
        check(&with(&["--threads", "100000"]), Err("--threads 100000: must be 1..=1024"));
        check(&with(&["--threads", "1024"]), Ok(()));
        let mut bad = BASE.to_vec();
        bad[3] = "quickbooks";
        check(&bad, Err("--provider \"quickbooks\": unknown or not supported by this build (supported: stripe, github"));
        bad = BASE.to_vec();
        bad[1] = "https://127.0.0.1/x";
        check(&bad, Err("scheme \"https\" is not supported"));
        bad[1] = "not a url";
        check(&bad, Err("--target \"not a url\""));
        bad = BASE.to_vec();
        bad[3] = "standard";
        bad[5] = "whsec_***";
        check(&bad, Err("--secret: not base64 after the whsec_ prefix"));
        bad[5] = "whpk_MCowBQYDK2VwAyEA";
        check(&bad, Err("--secret: a whpk_ key is the receiver's public key"));
    }

    #[test]
    fn rate_and_max_conflict_in_clap() {
        let argv = [&["hookwall", "loadgen"][..], &with(&["--rate", "5", "--max"])].concat();
        let err = crate::cli::Cli::try_parse_from(argv).expect_err("conflict");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn the_target_becomes_a_request_line_and_host() {
        let (_, authority, host, path) =
            parse_target("http://localhost:9000/webhooks/a?b=1").expect("valid");
        assert_eq!(
            (authority, host.as_str(), path.as_str()),
            (("localhost".to_owned(), 9000), "localhost:9000", "/webhooks/a?b=1")
        );
        let (_, authority, host, path) = parse_target("http://[::1]/").expect("valid");
        assert_eq!(
            (authority, host.as_str(), path.as_str()),
            (("::1".to_owned(), 80), "[::1]", "/")
        );
    }

    /// A target with credentials is refused without echoing them (a review found them ignored
    /// and the password printed in the report); port 0 is refused as bad usage.
    #[test]
    fn a_target_with_credentials_or_port_0_is_refused() {
        for url in ["http://admin:hunter2@127.0.0.1:8080/x", "http://hunter2@127.0.0.1/x"] {
            let e = parse_target(url).expect_err("credentials are refused");
            assert!(e.contains("must not carry credentials"), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{url}: the credential is echoed: {e}");
        }
        let e = parse_target("http://127.0.0.1:0/x").expect_err("port 0 is refused");
        assert!(e.contains("port 0"), "{e}");
    }
}
