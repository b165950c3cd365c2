//! The tokio runtimes of the admin API and the dispatcher: current-thread runtimes whose
//! blocking pool is bounded and never empties.
//!
//! tokio's `spawn_blocking` panics (`OS can't spawn worker thread`; with this build's
//! `panic = "abort"`, exit 134) when its pool has no thread and cannot start one. With the
//! default pool (up to 512 threads, each ended after 10 s idle), an admin read or an
//! https:// DNS lookup then aborted hookwall whenever another process of the same user had
//! taken the thread limit's room after `ready` (found by a fresh helper's break test). A pool
//! that always holds a thread queues such work on it instead: tokio starts no thread for it,
//! or, when a start fails for the moment (`EAGAIN`) while the pool has one, leaves the work
//! queued for the threads it has.

use std::time::Duration;

/// How long an idle blocking-pool thread is kept: the runtime's life (tokio's default, 10 s,
/// emptied the pool between bursts).
const KEEP_ALIVE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A current-thread runtime (IO and timers enabled) whose blocking pool holds at most
/// `max_blocking` threads (at least 1), kept until the runtime is dropped, the first of them
/// started before this returns (tokio panics if it cannot be: `serve`'s start-up thread check
/// leaves room for it).
///
/// # Errors
/// The runtime cannot be built (its IO driver needs descriptors).
pub fn with_blocking_pool(max_blocking: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(max_blocking.max(1))
        .thread_keep_alive(KEEP_ALIVE)
        .build()?;
    // tokio starts the thread inside this call (no `block_on`: callers may be inside a
    // runtime, as the dispatcher's tests are); it then waits, idle, for the runtime's work.
    drop(runtime.spawn_blocking(|| ()));
    Ok(runtime)
}
