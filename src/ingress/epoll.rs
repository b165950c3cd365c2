//! The epoll back end: a tokio `current_thread` runtime per core on the core's own
//! `SO_REUSEPORT` socket, one local task per connection, driving the same sans-IO
//! [`Conn`] as the io_uring back end. Used where io_uring is unavailable (Docker's default
//! seccomp profile, `kernel.io_uring_disabled`) or when `server.io = "epoll"`.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::conn::{Conn, CoreCtx, Received, Step};
use super::startup::Startup;
use super::AcceptErrors;
use crate::answer::Answer;
use crate::clock;
use crate::ledger::{Decision, Reply};
use crate::limits::RECV_BUFFER_BYTES;

/// How often a waiting read wakes to check `read_timeout`, and the accept loop `stop`.
const TICK: Duration = Duration::from_millis(200);

/// How often the core measures its own lateness (the queue-delay estimate of this back end).
const LAG_PROBE_EVERY: Duration = Duration::from_millis(5);

/// Runs one ingress core on epoll: sets up its runtime and listener, reports to `startup`
/// and, once every core has (`super::startup`), serves until `stop` is set; connections with
/// an admission in flight finish it first.
///
/// # Errors
/// Runtime construction or listener registration failures (also reported to `startup`, so
/// the start fails before `ready`).
pub fn run(
    ctx: CoreCtx,
    listener: std::net::TcpListener,
    stop: &AtomicBool,
    startup: Startup,
) -> io::Result<()> {
    let (runtime, listener) = set_up(listener).inspect_err(|e| startup.failed(e))?;
    if !startup.ready() {
        return Ok(());
    }
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let ctx = Rc::new(ctx);
        let lag = Rc::new(Cell::new(Duration::ZERO));
        let open = Rc::new(Cell::new(0usize));
        let probe = tokio::task::spawn_local(probe_lag(Rc::clone(&lag), Rc::clone(&open)));
        let stopping = Rc::new(Cell::new(false));
        // Signalled when one of this core's connections closes: a descriptor is free again.
        let closed = Rc::new(tokio::sync::Notify::new());
        let mut accept_errors = AcceptErrors::new();
        while !stop.load(Ordering::Acquire) {
            let accepted = tokio::time::timeout(TICK, listener.accept()).await;
            let Ok(accepted) = accepted else { continue };
            match accepted {
                Ok((stream, peer)) => {
                    let peer = Some(peer.ip());
                    spawn_connection(&ctx, &lag, &open, &stopping, &closed, stream, peer);
                }
                Err(e) => {
                    // Out of descriptors or memory: every accept would fail at once. Pause
                    // instead of spinning, until this core closes a connection (at once if it
                    // did since the last pause: the permit is kept) or for a tick (descriptors
                    // freed elsewhere); the backlog keeps the connections meanwhile. As the
                    // io_uring core does.
                    accept_errors.record(&e, clock::monotonic());
                    tokio::select! {
                        () = tokio::time::sleep(TICK) => {}
                        () = closed.notified() => {}
                    }
                }
            }
        }
        // Connections already in the backlog were made before the stop: serve them too
        // (closing the listener would reset them, and they may carry a request).
        stopping.set(true);
        while let Ok(Ok((stream, peer))) =
            tokio::time::timeout(Duration::ZERO, listener.accept()).await
        {
            spawn_connection(&ctx, &lag, &open, &stopping, &closed, stream, Some(peer.ip()));
        }
        drop(listener);
        // Drain: requests in progress are answered (with `Connection: close`), idle
        // connections close at their next tick; bounded like the io_uring core.
        let deadline = clock::monotonic() + Duration::from_secs(5);
        while open.get() > 0 && clock::monotonic() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        probe.abort();
        Ok(())
    })
}

/// A core's runtime (its epoll instance and eventfd) and its listener registered with it.
fn set_up(
    listener: std::net::TcpListener,
) -> io::Result<(tokio::runtime::Runtime, tokio::net::TcpListener)> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    listener.set_nonblocking(true)?;
    let listener = {
        let _entered = runtime.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    Ok((runtime, listener))
}

/// Measures, every [`LAG_PROBE_EVERY`] while connections are open (every [`TICK`] on an
/// idle core, which then need not wake often), how late this core wakes a timer: the time a
/// ready task waits for its turn, which a request that just became readable waits too. Kept
/// in `lag` as the core's queue-delay estimate ([`super::overload`]).
async fn probe_lag(lag: Rc<Cell<Duration>>, open: Rc<Cell<usize>>) {
    loop {
        let every = if open.get() == 0 { TICK } else { LAG_PROBE_EVERY };
        let due = clock::monotonic() + every;
        tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
        // tokio's timer has a 1 ms resolution: lateness under it is not queueing.
        let late = clock::monotonic().saturating_duration_since(due);
        lag.set(late.saturating_sub(Duration::from_millis(1)));
    }
}

/// Starts serving one accepted connection as a local task, counted in `open`; `closed` is
/// notified when its descriptor is closed.
fn spawn_connection(
    ctx: &Rc<CoreCtx>,
    lag: &Rc<Cell<Duration>>,
    open: &Rc<Cell<usize>>,
    stopping: &Rc<Cell<bool>>,
    closed: &Rc<tokio::sync::Notify>,
    stream: TcpStream,
    peer: Option<std::net::IpAddr>,
) {
    let _ = stream.set_nodelay(true);
    let (ctx, open, stopping) = (Rc::clone(ctx), Rc::clone(open), Rc::clone(stopping));
    let closed = Rc::clone(closed);
    let lag = Rc::clone(lag);
    // The limit place is taken at accept time, before the connection counts as open (as the
    // io_uring back end does): connections are judged in accept order, and an open gauge of N
    // means N connections have passed the gate.
    let ticket = match ctx.enter(open.get(), peer) {
        Ok(ticket) => Some(ticket),
        Err(reason) if ctx.refuse(reason) => None,
        // Enough refused connections held already: closed unanswered.
        Err(_) => {
            drop(stream);
            closed.notify_one();
            return;
        }
    };
    open.set(open.get() + 1);
    ctx.stats.connections_open.fetch_add(1, Ordering::Relaxed);
    tokio::task::spawn_local(async move {
        let mut stream = stream;
        serve(&ctx, &lag, &mut stream, &stopping, ticket.is_none(), peer).await;
        discard_unread(&stream);
        drop(stream);
        match ticket {
            Some(ticket) => ctx.gate.leave(ticket),
            None => ctx.refusal_closed(),
        }
        open.set(open.get() - 1);
        ctx.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
        closed.notify_one();
    });
}

/// Serves one connection until it closes.
/// A connection over a limit (`refused`) has its first request answered `503 overloaded`.
async fn serve(
    ctx: &CoreCtx,
    lag: &Cell<Duration>,
    stream: &mut TcpStream,
    stopping: &Cell<bool>,
    refused: bool,
    peer: Option<std::net::IpAddr>,
) {
    let mut conn = Conn::new(ctx, clock::monotonic());
    conn.set_peer(peer);
    if refused {
        conn.refuse(Answer::Overloaded);
    }
    let mut buf = vec![0u8; RECV_BUFFER_BYTES];
    let mut wire = Vec::new();
    // The peer ended its TLS session (`close_notify`) after its last request: answer what
    // arrived, then close instead of reading again.
    let mut peer_done = false;
    loop {
        if stopping.get() || peer_done {
            conn.drain();
        }
        let mut pending: Option<tokio::sync::oneshot::Receiver<Decision>> = None;
        let step = {
            let mut make_reply = || -> Reply {
                let (tx, rx) = tokio::sync::oneshot::channel();
                pending = Some(rx);
                Box::new(move |decision| {
                    let _ = tx.send(decision);
                })
            };
            conn.process(ctx, &mut make_reply)
        };
        if !flush(ctx, stream, &mut conn, &mut wire).await {
            return;
        }
        match step {
            Step::Close => return,
            // Sent: the requests waiting behind the backlog are processed next.
            Step::Backlogged => {}
            Step::Wait => {
                let rx = pending.expect("an admission in flight has a reply channel");
                // A dropped sender means the shard writer stopped: fail closed (R15).
                let decision = rx.await.unwrap_or(Decision::Unavailable);
                conn.on_decision(ctx, decision);
            }
            Step::NeedRead if peer_done => return,
            Step::NeedRead => match read(ctx, lag, stream, &mut conn, &mut buf, stopping).await {
                ReadOutcome::More => {}
                ReadOutcome::Last => peer_done = true,
                ReadOutcome::Close => {
                    let _ = flush(ctx, stream, &mut conn, &mut wire).await;
                    return;
                }
            },
        }
    }
}

/// Most unread bytes [`discard_unread`] reads away before a close (bytes).
const DISCARD_BEFORE_CLOSE_MAX: usize = 1 << 20;

/// Reads away, without waiting, what the peer sent and the connection will not process (a
/// body behind an early answer), at most [`DISCARD_BEFORE_CLOSE_MAX`] bytes: closing a socket
/// with unread data makes the kernel send RST instead of FIN, and a reset can make the peer's
/// TCP stack drop the answer before it was read (RFC 9112 §9.6). The io_uring core gets the
/// same from its multishot receive, which keeps reading until `shutdown(2)` ends it.
fn discard_unread(stream: &TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    let mut discarded = 0;
    while discarded < DISCARD_BEFORE_CLOSE_MAX {
        match stream.try_read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => discarded += n,
        }
    }
}

/// What one [`read`] left the connection to do.
enum ReadOutcome {
    /// Bytes arrived: process them, then read again.
    More,
    /// The last bytes arrived (TLS `close_notify`): process and answer them, then close.
    Last,
    /// Close after one more flush: EOF, an error, a TLS alert, a timeout, or too much input.
    Close,
}

/// Reads once (waking every tick for `read_timeout`).
async fn read(
    ctx: &CoreCtx,
    lag: &Cell<Duration>,
    stream: &mut TcpStream,
    conn: &mut Conn,
    buf: &mut [u8],
    stopping: &Cell<bool>,
) -> ReadOutcome {
    loop {
        match tokio::time::timeout(TICK, stream.read(buf)).await {
            Ok(Ok(0) | Err(_)) => return ReadOutcome::Close,
            Ok(Ok(n)) => {
                // The bytes were readable about one core lag before this task ran.
                let now = clock::monotonic();
                let arrived = now.checked_sub(lag.get()).unwrap_or(now);
                let received = conn.receive(&buf[..n], arrived);
                if conn.unconsumed() > ctx.input_bytes_max() {
                    return ReadOutcome::Close;
                }
                return match received {
                    Received::Ok => ReadOutcome::More,
                    Received::Closed => ReadOutcome::Last,
                    Received::Fatal => ReadOutcome::Close,
                };
            }
            Err(_elapsed) => {
                if conn.on_tick(ctx, clock::monotonic()) {
                    return ReadOutcome::Close;
                }
                if stopping.get() {
                    conn.drain();
                    if conn.idle() {
                        return ReadOutcome::Close;
                    }
                }
            }
        }
    }
}

/// Sends what the connection has to send. False — close — when the write fails or the peer
/// takes none of it for `read_timeout` (its answers would otherwise wait forever, holding the
/// connection's place in the limits).
async fn flush(ctx: &CoreCtx, stream: &mut TcpStream, conn: &mut Conn, wire: &mut Vec<u8>) -> bool {
    if !conn.has_output() {
        return true;
    }
    conn.take_output(wire);
    let mut sent = 0;
    let ok = loop {
        if sent == wire.len() {
            break true;
        }
        match tokio::time::timeout(ctx.read_timeout, stream.write(&wire[sent..])).await {
            Ok(Ok(n)) if n > 0 => sent += n,
            Ok(_) | Err(_) => break false,
        }
    };
    wire.clear();
    ok
}
