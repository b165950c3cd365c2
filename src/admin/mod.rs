//! The admin listener (SPEC §6): `GET /metrics` (Prometheus text, SPEC §7), `GET /healthz`
//! (process alive), `GET /readyz` (ledger writable and listeners bound), and the operator API
//! `/admin/*` (events, DLQ replay/drop, audit, destination pause/resume; R20) behind a bearer
//! token (`api.rs`, `auth.rs`; shapes in `docs/admin.md`).
//!
//! Off the hot path: one thread `admin` with a `current_thread` tokio runtime and a hyper 1
//! HTTP/1.1 server; each scrape sums the per-core counters and merges the histograms.
//! A connection is bounded like the ingress's: 5 s for a request head, `server.read_timeout`
//! for a body and for an answer the client does not take (`deadline.rs`).

pub mod api;
pub mod auth;
mod deadline;
mod exposition;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::{oneshot, Semaphore};

pub use api::Operator;
pub use exposition::{render_controls, render_metrics, CONTROL_METRIC_NAMES, METRIC_NAMES};

use crate::config::Live;
use crate::metrics::Metrics;
use deadline::WriteDeadline;

/// Admin connections served at once; further accepts wait for a free slot. Generous, so idle
/// connections cannot starve health checks and scrapes for long.
const ADMIN_CONNECTIONS_MAX: usize = 1024;
/// Longest time a client may take to send a request head (slow clients are closed).
const ADMIN_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. out of descriptors), instead of retrying in a loop.
const ADMIN_ACCEPT_PAUSE: Duration = Duration::from_millis(200);

/// What the admin listener reads to answer.
pub struct AdminState {
    /// The configuration in force (source and destination ids label the metrics; reloads
    /// change settings such as `ack_deadline`, never the ids).
    pub config: Arc<Live>,
    /// Every counter and histogram, read at scrape time.
    pub metrics: Arc<Metrics>,
    /// Whether the ledger can durably write right now (for `/readyz`); must not block.
    pub ledger_healthy: Box<dyn Fn() -> bool + Send + Sync>,
    /// Set once every ingress listener is bound (for `/readyz`).
    pub listeners_bound: AtomicBool,
    /// What `/admin/*` acts on; `None` answers those routes 503 (tests of the other routes).
    pub operator: Option<Operator>,
}

/// The running admin listener.
pub struct AdminHandle {
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl AdminHandle {
    /// Stops accepting, drops open admin connections and joins the thread.
    pub fn shutdown(self) {
        // Err: the accept loop already ended.
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::error!(code = "admin_panicked", "The admin thread panicked.");
        }
    }
}

/// Threads the admin runtime may hold for ledger reads and operator actions (tokio's
/// blocking pool, one started with the runtime and kept: [`crate::runtime`]; more reads at
/// once wait for one). tokio's default, 512, let a burst of concurrent reads start a thread
/// each (32 readers: 30 more threads), past the room `serve`'s start-up thread check found.
pub const ADMIN_BLOCKING_THREADS: usize = 4;

/// Serves the admin routes on `listener` (already bound, e.g. to `server.admin_listen`) from a
/// new thread `admin`.
///
/// # Errors
/// The listener cannot be made non-blocking, or the runtime or thread cannot be created.
pub fn spawn(
    listener: std::net::TcpListener,
    state: Arc<AdminState>,
) -> std::io::Result<AdminHandle> {
    listener.set_nonblocking(true)?;
    let runtime = crate::runtime::with_blocking_pool(ADMIN_BLOCKING_THREADS)?;
    let (stop, stopped) = oneshot::channel();
    let thread = std::thread::Builder::new().name("admin".to_owned()).spawn(move || {
        runtime.block_on(accept_loop(listener, state, stopped));
    })?;
    Ok(AdminHandle { stop, thread })
}

/// Accepts until `stopped` fires (or its sender is dropped); one task per connection.
async fn accept_loop(
    listener: std::net::TcpListener,
    state: Arc<AdminState>,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(code = "admin_listener_failed", error = %e, "The admin listener could not be registered.");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(ADMIN_CONNECTIONS_MAX));
    loop {
        let permit = tokio::select! {
            _ = &mut stopped => return,
            permit = Arc::clone(&slots).acquire_owned() => permit,
        };
        let Ok(permit) = permit else { return };
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(stream, Arc::clone(&state), permit));
            }
            Err(e) => {
                tracing::debug!(error = %e, "An admin accept failed.");
                tokio::time::sleep(ADMIN_ACCEPT_PAUSE).await;
            }
        }
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    state: Arc<AdminState>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    // A client that takes no answer bytes for `server.read_timeout` is dropped (deadline.rs).
    let write_timeout = state.config.get().server.read_timeout;
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let state = Arc::clone(&state);
        async move {
            let path = request.uri().path();
            if path.starts_with("/admin/") || path == "/admin" {
                let mut response = api::handle(state, request).await;
                // Lets a client tell hookwall's admin API from anything else answering at the
                // address (`hookwall dlq` refuses answers without it).
                response
                    .headers_mut()
                    .insert(api::ADMIN_API_HEADER, hyper::header::HeaderValue::from_static("1"));
                return Ok::<_, Infallible>(response);
            }
            Ok(route(&state, request.method(), path))
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(ADMIN_HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(WriteDeadline::new(stream, write_timeout)), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "An admin connection ended with an error.");
    }
}

/// The routing table of SPEC §6 besides `/admin/*` (request bodies are never read).
fn route(state: &AdminState, method: &Method, path: &str) -> Response<Full<Bytes>> {
    if !matches!(path, "/healthz" | "/readyz" | "/metrics") {
        return json(StatusCode::NOT_FOUND, r#"{"status":"not_found"}"#.to_owned());
    }
    // HEAD answers as GET (RFC 9110 §9.3.2); hyper sends its head without the body.
    if method != Method::GET && method != Method::HEAD {
        let mut response =
            json(StatusCode::METHOD_NOT_ALLOWED, r#"{"status":"method_not_allowed"}"#.to_owned());
        let allow = "GET, HEAD".parse().expect("static header");
        response.headers_mut().insert(hyper::header::ALLOW, allow);
        return response;
    }
    match path {
        "/healthz" => json(StatusCode::OK, r#"{"status":"ok"}"#.to_owned()),
        "/readyz" => readiness(state),
        _ => metrics(state),
    }
}

/// `/readyz`: 200 when the ledger is writable and the listeners are bound, else 503 naming which.
fn readiness(state: &AdminState) -> Response<Full<Bytes>> {
    let ledger = (state.ledger_healthy)();
    let listeners = state.listeners_bound.load(Ordering::Acquire);
    if ledger && listeners {
        return json(StatusCode::OK, r#"{"status":"ready"}"#.to_owned());
    }
    let body = format!(r#"{{"status":"not_ready","ledger":{ledger},"listeners":{listeners}}}"#);
    json(StatusCode::SERVICE_UNAVAILABLE, body)
}

fn metrics(state: &AdminState) -> Response<Full<Bytes>> {
    let config = state.config.get();
    let mut text = render_metrics(&config, &state.metrics);
    if let Some(operator) = &state.operator {
        text.push_str(&render_controls(&config, &operator.controls));
    }
    respond(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", text)
}

fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    respond(status, "application/json", body)
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let value = hyper::header::HeaderValue::from_static(content_type);
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    response
}
