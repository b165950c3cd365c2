//! `hookwall serve`: opens the ledger, binds the listeners, starts the shard writers, the
//! ingress cores, the dispatcher and the admin listener, and stops them in reverse order on
//! SIGTERM/SIGINT.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context as _};

use crate::admin::{self, AdminState};
use crate::config::Config;
use crate::ingress::{self, conn::CoreCtx, Backend};
use crate::ledger::{Ledger, LedgerOptions};
use crate::metrics::{CoreStats, DispatchStats, LedgerStats, Metrics};
use crate::pipeline::Pipeline;
use crate::{dispatch, ledger};

/// Runs the appliance until SIGTERM or SIGINT.
///
/// # Errors
/// Start-up failures (ledger cannot open, address in use, io_uring forced but unusable) and
/// an ingress core that died.
pub fn run(config: Config) -> anyhow::Result<()> {
    let config = Arc::new(config);
    for warning in &config.warnings {
        tracing::warn!(config = %config.path.display(), "{warning}");
    }
    let (backend, why) = ingress::choose(config.server.io).map_err(anyhow::Error::msg)?;
    tracing::info!(io = backend.name(), reason = %why, "ingress back end chosen");

    let cores = config.server.cores;
    let metrics = Arc::new(Metrics {
        cores: (0..cores).map(|_| Arc::new(CoreStats::new(config.sources.len()))).collect(),
        ledger: LedgerStats::new(config.sources.len()),
        dispatch: DispatchStats::new(config.destinations.len()),
    });
    let notify = Arc::new(tokio::sync::Notify::new());
    let ledger = Ledger::open(
        LedgerOptions {
            path: config.ledger.path.clone(),
            sync: config.ledger.sync,
            shards_if_new: cores,
            source_ids: config.sources.iter().map(|s| s.id.clone()).collect(),
            notify: Arc::clone(&notify),
        },
        Arc::clone(&metrics),
    )
    .with_context(|| format!("opening the ledger at {}", config.ledger.path.display()))?;

    let listeners = ingress::bind_listeners(config.server.listen, cores)
        .with_context(|| format!("binding server.listen {}", config.server.listen))?;
    let admin_listener = std::net::TcpListener::bind(config.server.admin_listen)
        .with_context(|| format!("binding server.admin_listen {}", config.server.admin_listen))?;
    let listen = listeners[0].local_addr()?;
    let admin_addr = admin_listener.local_addr()?;

    let health = ledger.clone();
    let admin_state = Arc::new(AdminState {
        config: Arc::clone(&config),
        metrics: Arc::clone(&metrics),
        ledger_healthy: Box::new(move || health.healthy()),
        listeners_bound: AtomicBool::new(false),
    });
    let admin = admin::spawn(admin_listener, Arc::clone(&admin_state)).context("starting admin")?;
    let inbox: Arc<dyn ledger::Inbox> = Arc::new(ledger.clone());
    let dispatcher = dispatch::spawn(Arc::clone(&config), inbox, notify, Arc::clone(&metrics))
        .context("starting the dispatcher")?;

    let stop = Arc::new(AtomicBool::new(false));
    let pipeline = Arc::new(Pipeline::new(Arc::clone(&config)));
    let mut threads = Vec::with_capacity(cores);
    for (core, listener) in listeners.into_iter().enumerate() {
        let ctx =
            CoreCtx::new(Arc::clone(&pipeline), ledger.clone(), Arc::clone(&metrics.cores[core]));
        threads.push(spawn_core(core, backend, ctx, listener, Arc::clone(&stop))?);
    }
    admin_state.listeners_bound.store(true, Ordering::Release);
    tracing::info!(%listen, admin = %admin_addr, cores, io = backend.name(), "hookwall ready");

    let signal = wait_for_stop(&threads);
    tracing::info!(reason = signal, "stopping");
    admin_state.listeners_bound.store(false, Ordering::Release);
    stop.store(true, Ordering::Release);
    let mut failed = false;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "ingress core failed");
                failed = true;
            }
            Err(_) => failed = true,
        }
    }
    dispatcher.shutdown();
    ledger.shutdown();
    admin.shutdown();
    tracing::info!("stopped");
    if failed {
        bail!("an ingress core failed; see the log above");
    }
    Ok(())
}

fn spawn_core(
    core: usize,
    backend: Backend,
    ctx: CoreCtx,
    listener: std::net::TcpListener,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<JoinHandle<std::io::Result<()>>> {
    std::thread::Builder::new()
        .name(format!("ingress-{core}"))
        .spawn(move || match backend {
            Backend::IoUring => ingress::uring::run(ctx, listener, &stop),
            Backend::Epoll => ingress::epoll::run(ctx, listener, &stop),
        })
        .context("spawning an ingress thread")
}

/// Blocks until SIGTERM/SIGINT, or until an ingress core exits on its own (a failure).
fn wait_for_stop(threads: &[JoinHandle<std::io::Result<()>>]) -> &'static str {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a signal-only runtime builds");
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
        let mut check = tokio::time::interval(std::time::Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = term.recv() => return "SIGTERM",
                _ = int.recv() => return "SIGINT",
                _ = check.tick() => {
                    if threads.iter().any(JoinHandle::is_finished) {
                        return "an ingress core exited";
                    }
                }
            }
        }
    })
}
