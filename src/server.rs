//! `hookwall serve`: opens the ledger, binds the listeners, starts the shard writers, the
//! ingress cores, the dispatcher and the admin listener, and stops them in reverse order on
//! SIGTERM/SIGINT. SIGHUP reloads the configuration file (see [`crate::config::Live`] for
//! what a reload may change) and the TLS certificate; a bad file is refused with its errors
//! logged, and the running configuration stays.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context as _};

use crate::admin::{self, AdminState};
use crate::config::{self as config_mod, Config, Live};
use crate::config::{DestinationConfig, LedgerBackend};
use crate::ingress::{self, conn::CoreCtx, gate::Gate, Backend};
use crate::ledger::postgres::{PgLedger, PgOptions};
use crate::ledger::{Ledger, LedgerHandle, LedgerOptions};
use crate::metrics::{CoreStats, DispatchStats, LedgerStats, Metrics};
use crate::tls::{self, CertStore};
use crate::{dispatch, ledger};

/// Runs the appliance until SIGTERM or SIGINT.
///
/// # Errors
/// Start-up failures (signal handlers, ledger cannot open, address in use, io_uring forced
/// but unusable, an ingress core that could not set up) and an ingress core that died.
pub fn run(mut config: Config) -> anyhow::Result<()> {
    for warning in &config.warnings {
        tracing::warn!(code = "config_warning", config = %config.path.display(), "{warning}");
    }
    fit_destinations(&mut config, ingress::raise_fd_limit());
    let config = Arc::new(config);
    let (backend, why) = ingress::choose(config.server.io).map_err(anyhow::Error::msg)?;
    tracing::info!(code = "io_backend", io = backend.name(), reason = %why, "ingress back end chosen");

    let cores = config.server.cores;
    // Before anything that starts a thread: RocksDB aborts the process when it cannot create
    // one while the ledger opens, and a start that fails later has more to unwind.
    check_thread_room(threads_at_start(&config) + THREADS_SPARE)?;
    let metrics = Arc::new(Metrics {
        reloads: Default::default(),
        cores: (0..cores)
            .map(|_| Arc::new(CoreStats::with_event_types(event_types(&config))))
            .collect(),
        ledger: LedgerStats::new(config.sources.len()),
        dispatch: DispatchStats::new(config.destinations.len()),
    });
    // Bind first: a taken address fails before anything (the ledger directory) is created.
    let listeners = ingress::bind_listeners(config.server.listen, cores)
        .with_context(|| format!("{}: server.listen", config.path.display()))?;
    let admin_listener = std::net::TcpListener::bind(config.server.admin_listen)
        .map_err(|e| ingress::in_use(config.server.admin_listen, e))
        .with_context(|| format!("{}: server.admin_listen", config.path.display()))?;
    let listen = listeners[0].local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    let notify = Arc::new(tokio::sync::Notify::new());
    // tokio creates its process-wide signal pipe with the first runtime that has IO enabled,
    // and panics (an abort, exit 134) when it cannot: create it now, while descriptors are
    // plenty, so a limit too low for what follows fails the start with an error instead (later
    // runtimes only duplicate the pipe, which fails with an error). No handler is installed.
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("creating tokio's signal pipe")?;
    // Before the ledger: a TLS setup that fails leaves nothing to stop.
    let certs =
        config.server.tls.as_ref().map(|tls| Arc::new(CertStore::new(Arc::clone(&tls.certified))));
    let tls_config = match &certs {
        Some(store) => Some(tls::server_config(Arc::clone(store)).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let ledger = open_ledger(&config, &notify, &metrics)?;

    let live = Arc::new(Live::new(Arc::clone(&config)));
    let health = ledger.clone();
    let controls = Arc::new(dispatch::Controls::new(&config, Arc::clone(&notify)));
    let admin_state = Arc::new(AdminState {
        config: Arc::clone(&live),
        metrics: Arc::clone(&metrics),
        ledger_healthy: Box::new(move || health.healthy()),
        listeners_bound: AtomicBool::new(false),
        operator: Some(admin::Operator { ledger: ledger.clone(), controls: Arc::clone(&controls) }),
    });
    // A start that fails from here on stops what it started (the ledger's writers, the admin
    // thread holding the ledger) before returning: left running, they met the C++ runtime's
    // exit-time destructors (RocksDB's background threads: "pthread lock: Invalid argument",
    // an abort instead of exit 1; seen at nofile 30, where the dispatcher could not start).
    let admin = match admin::spawn(admin_listener, Arc::clone(&admin_state)) {
        Ok(admin) => admin,
        Err(e) => {
            ledger.shutdown();
            return Err(anyhow::Error::from(e).context("starting admin"));
        }
    };
    let abandon = |e: anyhow::Error,
                   dispatcher: Option<dispatch::DispatchHandle>,
                   admin: admin::AdminHandle| {
        if let Some(d) = dispatcher {
            d.shutdown();
        }
        ledger.shutdown();
        admin.shutdown();
        e
    };
    let inbox = ledger.inbox();
    let spawned = dispatch::spawn_controlled(
        Arc::clone(&live),
        inbox,
        notify,
        Arc::clone(&metrics),
        controls,
    );
    let dispatcher = match spawned {
        Ok(d) => d,
        Err(e) => {
            return Err(abandon(
                anyhow::Error::from(e).context("starting the dispatcher"),
                None,
                admin,
            ))
        }
    };

    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::with_capacity(cores);
    // Before the connection cap counts the open descriptors: its runtime holds some.
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            let e = anyhow::Error::from(e).context("installing the signal handlers");
            return Err(abandon(e, Some(dispatcher), admin));
        }
    };
    let outbound = config.destinations.iter().map(DestinationConfig::connections_max).sum();
    let cap = ingress::connections_per_core(cores, outbound);
    warn_if_low(&cap, cap.per_core);
    let connections_max = cap.per_core;
    let total_max = cap.total_max(config.server.connections_max, &cap);
    let per_ip_max = config.server.connections_per_ip_max;
    let gate = Arc::new(Gate::new(total_max, per_ip_max));
    // No core accepts before every core is set up (ingress::startup), so a flood at start
    // cannot take the descriptors another core still needs.
    let (startup_gate, startups) = ingress::startup::gate(cores);
    let mut not_spawned = None;
    for ((core, listener), startup) in listeners.into_iter().enumerate().zip(startups) {
        let stats = Arc::clone(&metrics.cores[core]);
        let ctx = CoreCtx::new(Arc::clone(&live), ledger.clone(), stats, connections_max)
            .with_tls(tls_config.clone())
            .with_gate(Arc::clone(&gate))
            .with_refusing_max(cap.refusing);
        match spawn_core(core, backend, ctx, listener, Arc::clone(&stop), startup) {
            Ok(thread) => threads.push(thread),
            Err(e) => {
                not_spawned = Some(e);
                break;
            }
        }
    }
    // A core that could not be spawned fails the start like one that could not set up: the
    // cores already running are told not to serve (the gate dropped undecided) and are joined
    // below with everything else, before `run` returns (left running, the ledger's threads
    // met the process's exit: "pthread lock: Invalid argument" aborts and segfaults).
    let started = match not_spawned {
        Some(e) => {
            drop(startup_gate);
            Err(format!("{e:#}"))
        }
        None => startup_gate.wait(),
    };
    let signal = if started.is_ok() {
        admin_state.listeners_bound.store(true, Ordering::Release);
        let tls_on = certs.is_some();
        tracing::info!(code = "ready", %listen, admin = %admin_addr, cores, connections_per_core_max = connections_max, refusals_per_core_max = cap.refusing, io = backend.name(), tls = tls_on, connections_max = total_max, connections_per_ip_max = per_ip_max, "hookwall ready");
        notify_systemd(&[sd_notify::NotifyState::Ready]);
        let reloader = Reloader {
            live: &live,
            certs: certs.as_deref(),
            metrics: &metrics,
            ledger: &ledger,
            gate: &gate,
            cap,
        };
        wait_for_stop(&mut signals, &threads, &ledger, &reloader)
    } else {
        "an ingress core could not start"
    };
    tracing::info!(code = "stopping", reason = signal, "stopping");
    notify_systemd(&[sd_notify::NotifyState::Stopping]);
    admin_state.listeners_bound.store(false, Ordering::Release);
    stop.store(true, Ordering::Release);
    let mut failed = false;
    for (core, t) in threads.into_iter().enumerate() {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(code = "ingress_core_failed", core, error = %e, "ingress core failed");
                failed = true;
            }
            Err(_) => failed = true,
        }
    }
    dispatcher.shutdown();
    ledger.shutdown();
    admin.shutdown();
    tracing::info!(code = "stopped", "stopped");
    if let Err(why) = started {
        bail!("{why}");
    }
    if failed {
        bail!("an ingress core failed; see the log above");
    }
    if signal == STOP_LEDGER_STUCK {
        bail!(
            "the ledger could not write for {} s; exiting so the supervisor restarts hookwall \
             and RocksDB reopens once the fault is cleared",
            LEDGER_UNWRITABLE_MAX.as_secs()
        );
    }
    Ok(())
}

/// Each source's event-type allow-list (empty without one): the event-type label values of
/// `hookwall_ingress_events_total`, fixed for the life of the process.
fn event_types(config: &Config) -> Vec<Vec<String>> {
    config.sources.iter().map(|s| s.event_types.clone().unwrap_or_default()).collect()
}

/// Opens the configured ledger: the embedded RocksDB, or the shared PostgreSQL database
/// (whose schema must be at this binary's version: `hookwall migrate`).
fn open_ledger(
    config: &Config,
    notify: &Arc<tokio::sync::Notify>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<LedgerHandle> {
    if let LedgerBackend::Postgres(pg) = &config.ledger.backend {
        let sources = config.sources.iter().map(|s| (s.tenant.clone(), s.id.clone())).collect();
        let node = format!("{}:{}", hostname(), std::process::id());
        let connector = crate::ledger::postgres::Connector::new(&pg.url)
            .map_err(|e| anyhow::anyhow!("{}: ledger.url: {e}", config.path.display()))?
            .serving();
        let server = connector.server();
        let opts = PgOptions {
            connector,
            pool_size: pg.pool_size,
            lease: pg.lease,
            sources,
            notify: Arc::clone(notify),
            node,
            retention: Some(ledger::Retention {
                payload: config.ledger.payload_retention,
                dedupe: config.ledger.dedupe_retention,
                now_ms: Arc::new(crate::clock::now_unix_ms),
            }),
        };
        let ledger = PgLedger::open(opts, Arc::clone(metrics)).map_err(|e| {
            anyhow::anyhow!("{}: ledger.url (server {server}): {e}", config.path.display())
        })?;
        tracing::info!(
            code = "ledger_postgres",
            pool_size = pg.pool_size,
            lease_ms = pg.lease.as_millis(),
            "ledger on PostgreSQL (schema checked)"
        );
        return Ok(ledger.into());
    }
    let ledger = Ledger::open(
        LedgerOptions {
            path: config.ledger.path.clone(),
            sync: config.ledger.sync,
            shards_if_new: config.ledger.shards,
            source_ids: config.sources.iter().map(|s| s.id.clone()).collect(),
            notify: Arc::clone(notify),
            retention: Some(ledger::Retention {
                payload: config.ledger.payload_retention,
                dedupe: config.ledger.dedupe_retention,
                now_ms: Arc::new(crate::clock::now_unix_ms),
            }),
        },
        Arc::clone(metrics),
    )
    .map_err(|e| ledger_open_error(config, &e))?;
    Ok(ledger.into())
}

/// This host's name for `lease_owner` (diagnostics), `unknown` when unreadable.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The ledger-open failure as an operator reads it: which file and field, and the likely
/// cause when RocksDB's lock is held.
fn ledger_open_error(config: &Config, e: &ledger::Error) -> anyhow::Error {
    let text = e.to_string();
    let hint =
        if text.contains("lock") { " (is another hookwall running on this ledger?)" } else { "" };
    anyhow::anyhow!("{}: ledger.path: {text}{hint}", config.path.display())
}

fn spawn_core(
    core: usize,
    backend: Backend,
    ctx: CoreCtx,
    listener: std::net::TcpListener,
    stop: Arc<AtomicBool>,
    startup: ingress::startup::Startup,
) -> anyhow::Result<JoinHandle<std::io::Result<()>>> {
    std::thread::Builder::new()
        .name(format!("ingress-{core}"))
        .spawn(move || match backend {
            Backend::IoUring => ingress::uring::run(ctx, listener, &stop, startup),
            Backend::Epoll => ingress::epoll::run(ctx, listener, &stop, startup),
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "spawning the thread of ingress core {core}: {e}{}",
                thread_limit_hint(&e)
            )
        })
}

/// Threads [`check_thread_room`] asks for beyond [`threads_at_start`]: the check's own threads
/// are released by the kernel a moment after they are joined (on a loaded machine, later than
/// the start's first threads are created: RocksDB then aborted at the exact limit), and
/// threads come after `ready`: the admin and dispatcher runtimes' blocking pools grow to
/// at most [`crate::admin::ADMIN_BLOCKING_THREADS`] +
/// [`crate::dispatch::DISPATCH_BLOCKING_THREADS`] (8, of which 2 are started with them), and
/// io_uring's workers.
const THREADS_SPARE: usize = 8;
const _: () = assert!(
    crate::admin::ADMIN_BLOCKING_THREADS + crate::dispatch::DISPATCH_BLOCKING_THREADS
        <= THREADS_SPARE,
    "the start-up check leaves room for the blocking pools"
);

/// Threads `serve` starts before it reports ready, besides the main thread: the ledger's
/// (RocksDB's [`ledger::ROCKSDB_THREADS`] and one writer per shard, or PostgreSQL's
/// `pool_size` writers), one per ingress core, the admin listener's and the dispatcher's, and
/// the first thread of each of their blocking pools ([`crate::runtime::with_blocking_pool`]).
/// Counted from the configuration; a RocksDB ledger created earlier with more shards than
/// configured has one writer per shard it has.
fn threads_at_start(config: &Config) -> usize {
    let ledger = match &config.ledger.backend {
        LedgerBackend::Postgres(pg) => pg.pool_size,
        LedgerBackend::RocksDb => ledger::ROCKSDB_THREADS + config.ledger.shards,
    };
    ledger + config.server.cores + 2 + 2
}

/// Checks that this process can hold `threads` more threads at once: starts that many idle
/// threads (64 KiB stacks), ends them, and waits until the kernel has released them (at most
/// 1 s), so the threads the start then creates find the room the check found.
///
/// # Errors
/// The limit met, with how many could be started: the user's `RLIMIT_NPROC` (`ulimit -u`;
/// systemd's `LimitNPROC=`), the unit's `TasksMax=` (the cgroup's `pids.max`), or memory for
/// the stacks. Without this check the ledger's RocksDB aborts the process (exit 134) when it
/// cannot create a thread, and a later failure needs the started threads unwound.
fn check_thread_room(threads: usize) -> anyhow::Result<()> {
    let before = threads_now();
    let (release, wait) = crossbeam_channel::bounded::<()>(0);
    let mut started = Vec::with_capacity(threads);
    let mut failure = None;
    for _ in 0..threads {
        let wait = wait.clone();
        let spawned = std::thread::Builder::new()
            .name("thread-check".to_owned())
            .stack_size(64 * 1024)
            .spawn(move || {
                let _ = wait.recv();
            });
        match spawned {
            Ok(t) => started.push(t),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    drop(release);
    let held = started.len();
    for t in started {
        let _ = t.join();
    }
    // A joined thread is still counted against the limits until the kernel reaps it, a
    // moment after `join` returns.
    if let Some(before) = before {
        let deadline = crate::clock::monotonic() + std::time::Duration::from_secs(1);
        while threads_now().is_some_and(|now| now > before) && crate::clock::monotonic() < deadline
        {
            std::thread::yield_now();
        }
    }
    match failure {
        None => Ok(()),
        Some(e) => bail!(
            "hookwall needs {threads} threads besides its main thread and could start only \
             {held}: {e}{}",
            thread_limit_hint(&e)
        ),
    }
}

/// This process's thread count (`Threads:` in `/proc/self/status`), `None` when unreadable.
fn threads_now() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok())
}

/// What to raise when creating a thread failed with `EAGAIN` (empty otherwise).
fn thread_limit_hint(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::WouldBlock {
        " (the thread limit: raise `ulimit -u` / systemd's LimitNPROC= for the service's user, \
         or the unit's TasksMax=)"
    } else {
        ""
    }
}

/// Applies SIGHUP: re-reads the configuration file the process started with.
struct Reloader<'a> {
    live: &'a Live,
    certs: Option<&'a CertStore>,
    metrics: &'a Metrics,
    /// Where each reload, applied or refused, is appended to the audit log (R20).
    ledger: &'a LedgerHandle,
    /// The ingress connection limits, whose total a reload recomputes when it changes the
    /// destinations' connections.
    gate: &'a Gate,
    /// The connection cap chosen at start (the cores hold at most its `per_core` each).
    cap: ingress::ConnectionCap,
}

impl Reloader<'_> {
    /// Loads and validates the file again; when it is valid and changes nothing that needs a
    /// restart, swaps in the new certificate and then the new configuration (cores and the
    /// dispatcher pick it up on their next request or turn). Otherwise logs every reason at
    /// `error` with the code `reload_rejected` and keeps the running configuration.
    ///
    /// Every reload is an operator action: it is appended to the audit log (actor `sighup`,
    /// action `config_reload`, reason `applied: …` or `refused: …` — field names and counts,
    /// never values, R28); a failed audit write is logged and does not undo the reload.
    fn reload(&self) {
        let outcome = self.try_reload();
        let applied = outcome.is_ok();
        let reason = match &outcome {
            Ok(summary) => format!("applied: {summary}"),
            Err(summary) => format!("refused: {summary}"),
        };
        let record = crate::ledger::AuditRecord {
            at_ms: crate::clock::now_unix_ms(),
            actor: "sighup".to_owned(),
            action: "config_reload".to_owned(),
            key: None,
            destination: None,
            reason: Some(reason),
            state_before: None,
        };
        // On a thread of its own: this runs inside the signal loop's runtime, where the
        // PostgreSQL ledger's blocking client must not run.
        let written = std::thread::scope(|s| {
            s.spawn(|| self.ledger.append_audit(&record)).join().unwrap_or_else(|_| {
                Err(crate::ledger::Error::Database("the audit write panicked".to_owned()))
            })
        });
        if let Err(e) = written {
            tracing::error!(code = "audit_write_failed", error = %e, "The configuration reload could not be written to the audit log.");
        }
        let stats = &self.metrics.reloads;
        let counter = if applied { &stats.applied } else { &stats.rejected };
        counter.fetch_add(1, Ordering::Relaxed);
        stats.last_rejected.store(!applied, Ordering::Relaxed);
        // Logged last: once this line is out, the metrics and the audit log show the reload.
        let path = self.live.get().path.clone();
        match outcome {
            Ok(summary) => {
                tracing::info!(code = "reloaded", config = %path.display(), %summary, tls_reloaded = self.certs.is_some(), "configuration reloaded");
            }
            Err(reason) => {
                tracing::error!(code = "reload_rejected", config = %path.display(), %reason, "configuration reload refused; the running configuration stays");
            }
        }
    }

    /// [`Reloader::reload`]'s work: `Ok` with a summary when the new configuration was put in
    /// force, `Err` with the reason (counts and field names only) when it was refused.
    fn try_reload(&self) -> Result<String, String> {
        let old = self.live.get();
        let path = old.path.clone();
        let mut new = match Config::load(&path) {
            Ok(new) => new,
            Err(errors) => {
                for e in &errors.0 {
                    tracing::error!(code = "reload_rejected", config = %path.display(), "{e}");
                }
                return Err(format!("{} error(s) in the file (see the log)", errors.0.len()));
            }
        };
        let why = config_mod::restart_needed(&old, &new);
        if !why.is_empty() {
            for reason in &why {
                tracing::error!(code = "reload_rejected", config = %path.display(), "{reason}; restart hookwall to apply it");
            }
            return Err(format!("needs a restart: {}", why.join("; ")));
        }
        for warning in &new.warnings {
            tracing::warn!(code = "config_warning", config = %path.display(), "{warning}");
        }
        fit_destinations(&mut new, self.cap.limit);
        if let (Some(store), Some(tls)) = (self.certs, &new.server.tls) {
            store.replace(Arc::clone(&tls.certified));
        }
        let (sources, destinations) = (new.sources.len(), new.destinations.len());
        let outbound = new.destinations.iter().map(DestinationConfig::connections_max).sum();
        let total_max = new.server.connections_max;
        self.live.replace(Arc::new(new));
        self.recap(outbound, total_max);
        Ok(format!("{sources} sources, {destinations} destinations"))
    }

    /// Recomputes the ingress connection total for `outbound` dispatcher connections at most
    /// (the reloaded destinations') under `server.connections_max` = `configured`, and puts
    /// it in force when it changed: destination connections added by a reload take their
    /// descriptors from ingress instead of both failing for want of one (`EMFILE`). As at
    /// start, they are counted up to a quarter of the limit (`ingress::connections_per_core`):
    /// past that the two share the descriptors, and the warning below says to raise it.
    fn recap(&self, outbound: usize, configured: usize) {
        let cap = self.cap.with_outbound(outbound);
        let total = cap.total_max(configured, &self.cap);
        let before = self.gate.total_max();
        if total == before {
            return;
        }
        self.gate.set_total_max(total);
        tracing::info!(code = "connection_cap", connections_max = total, connections_max_before = before, kept_back = cap.kept_back, destination_connections_max = outbound, "The reloaded destinations changed the descriptors kept back; the ingress connection total follows.");
        warn_if_low(&cap, cap.per_core_in_force(&self.cap));
    }
}

/// Holds the destinations of `config` to the connections a descriptor `limit` keeps for them
/// ([`config_mod::fit_connections`]), at start and on each reload, and warns
/// (`destination_connections_capped`) for each destination whose `concurrency_max` it lowered,
/// and (`destination_connections_over_limit`) when even one connection each does not fit.
fn fit_destinations(config: &mut Config, limit: u64) {
    let max = ingress::destination_connections_max(limit);
    for fitted in config_mod::fit_connections(&mut config.destinations, max) {
        tracing::warn!(code = "destination_connections_capped", destination = %fitted.id, concurrency_max = fitted.fitted, concurrency_max_configured = fitted.configured, descriptor_limit = limit, destination_connections_max = max, "The descriptor limit keeps a quarter of itself for the destinations' connections, fewer than they may open: concurrency_max is lowered to fit; raise the limit (systemd LimitNOFILE=, ulimit -n).");
    }
    let connections: usize =
        config.destinations.iter().map(DestinationConfig::connections_max).sum();
    if connections > max {
        tracing::warn!(code = "destination_connections_over_limit", destination_connections = connections, destination_connections_max = max, descriptor_limit = limit, "The destinations need one connection each, more than the descriptor limit keeps for them: connects may fail for want of a descriptor; raise the limit (systemd LimitNOFILE=, ulimit -n).");
    }
}

/// Warns (`descriptor_limit_low`) when `cap` leaves few connections per core (`per_core`, the
/// figure in force: a reload keeps the cores' start-up caps and lowers only the total), at
/// start and after a reload that recomputed it.
fn warn_if_low(cap: &ingress::ConnectionCap, per_core: usize) {
    if per_core < crate::limits::CONNECTIONS_PER_CORE_LOW {
        tracing::warn!(code = "descriptor_limit_low", descriptor_limit = cap.limit, kept_back = cap.kept_back, connections_per_core_max = per_core, "The descriptor limit leaves few connections per core (the ledger, listeners, cores and destinations' connections are kept back); raise it (systemd LimitNOFILE=, ulimit -n).");
    }
}

/// Tells systemd (`Type=notify`) about a state change; a no-op without `NOTIFY_SOCKET`.
/// READY is sent once listeners are bound, the ledger is open, the signal handlers are
/// installed and every ingress core is set up (`ingress::startup`);
/// STOPPING when the stop begins; WATCHDOG keep-alives while every ingress core is alive.
fn notify_systemd(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!(code = "sd_notify_failed", error = %e, "could not notify systemd");
    }
}

/// How long the ledger may stay unwritable before hookwall exits (with status 1). RocksDB
/// treats a failed WAL write (disk full, EIO) as fatal until the database is reopened, so
/// staying up would answer `503 unavailable` forever; exiting lets systemd restart hookwall
/// (`Restart=on-failure`), which reopens the ledger once the fault is gone. Meanwhile every
/// request was answered 503 (fail closed, R15), and nothing acknowledged is lost.
const LEDGER_UNWRITABLE_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// SIGTERM, SIGINT and SIGHUP, caught from just before the ingress cores start (a stop or
/// reload that arrives while they set up waits for [`wait_for_stop`]; earlier, while the
/// ledger opens, SIGTERM still ends the process at once), with the small runtime that waits
/// for them. Set up before the cores accept: built later, its descriptors (epoll, eventfd,
/// the signal pipe) could be taken by a connection flood, and the process then aborted right
/// after `ready`.
struct Signals {
    runtime: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// # Errors
    /// The runtime or a handler cannot be created (out of descriptors, most likely).
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let entered = runtime.enter();
        let term = signal(SignalKind::terminate())?;
        let int = signal(SignalKind::interrupt())?;
        let hup = signal(SignalKind::hangup())?;
        drop(entered);
        Ok(Signals { runtime, term, int, hup })
    }
}

/// [`wait_for_stop`]'s answer when the ledger stayed unwritable.
const STOP_LEDGER_STUCK: &str = "the ledger stayed unwritable";

/// Blocks until SIGTERM/SIGINT, until an ingress core exits on its own (a failure), or until
/// the ledger has been unwritable for [`LEDGER_UNWRITABLE_MAX`].
fn wait_for_stop(
    signals: &mut Signals,
    threads: &[JoinHandle<std::io::Result<()>>],
    ledger: &LedgerHandle,
    reloader: &Reloader<'_>,
) -> &'static str {
    let Signals { runtime, term, int, hup } = signals;
    runtime.block_on(async {
        let mut check = tokio::time::interval(std::time::Duration::from_millis(200));
        // Keep-alives at half the watchdog period systemd gave us (`WatchdogSec=`).
        let watchdog = sd_notify::watchdog_enabled().map(|period| period / 2);
        let mut last_keepalive = crate::clock::monotonic();
        let mut unwritable_since = None;
        loop {
            tokio::select! {
                _ = term.recv() => return "SIGTERM",
                _ = int.recv() => return "SIGINT",
                _ = hup.recv() => {
                    notify_systemd(&[sd_notify::NotifyState::Reloading]);
                    reloader.reload();
                    notify_systemd(&[sd_notify::NotifyState::Ready]);
                }
                _ = check.tick() => {
                    if threads.iter().any(JoinHandle::is_finished) {
                        return "an ingress core exited";
                    }
                    let now = crate::clock::monotonic();
                    if watchdog.is_some_and(|every| now.duration_since(last_keepalive) >= every) {
                        last_keepalive = now;
                        notify_systemd(&[sd_notify::NotifyState::Watchdog]);
                    }
                    if ledger.healthy() {
                        unwritable_since = None;
                    } else if now.duration_since(*unwritable_since.get_or_insert(now))
                        >= LEDGER_UNWRITABLE_MAX
                    {
                        tracing::error!(code = "ledger_unwritable", "the ledger has been unwritable for {} s", LEDGER_UNWRITABLE_MAX.as_secs());
                        return STOP_LEDGER_STUCK;
                    }
                }
            }
        }
    })
}
