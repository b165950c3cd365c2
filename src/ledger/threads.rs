//! Starting a ledger's writer threads all or none: a thread that cannot be spawned stops and
//! joins the ones started before it, so a failed open leaves no writer running (and the
//! RocksDB directory unlocked). Before, the started writers were left detached, and the
//! process, whose start had failed, could exit while they still used RocksDB (an exit with
//! writers running crashed: `pthread lock: Invalid argument`, exit 134).

use std::thread::JoinHandle;

use crossbeam_channel::Sender;

/// The writer threads started so far, each with the sender whose disconnection stops it.
#[derive(Default)]
pub(super) struct Started {
    /// One per thread: dropping it tells that thread to finish.
    pub stops: Vec<Sender<()>>,
    /// The threads, in start order.
    pub threads: Vec<JoinHandle<()>>,
}

impl Started {
    /// Spawns `body` as thread `name`; `stop` is the sender whose disconnection makes `body`
    /// return.
    ///
    /// # Errors
    /// The spawn's error (the thread limit, memory for the stack), after every thread started
    /// before has been stopped and joined.
    pub fn spawn(
        &mut self,
        name: String,
        stop: Sender<()>,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        match spawn(name, body) {
            Ok(thread) => {
                self.stops.push(stop);
                self.threads.push(thread);
                Ok(())
            }
            Err(e) => {
                drop(stop);
                self.unwind();
                Err(e)
            }
        }
    }

    /// Stops and joins every thread started (a panicked one is only joined: the failed open
    /// already has its error to report).
    fn unwind(&mut self) {
        self.stops.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(not(test))]
fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(body)
}

#[cfg(test)]
fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    let Some(ended) = test_seam::next_spawn() else {
        return Err(std::io::Error::from_raw_os_error(11));
    };
    let body = move || {
        body();
        if let Some(ended) = ended {
            // Lingers after the body, so that a thread that was not joined is still running
            // when its failed start returns (a widened window, not a wait for an outcome).
            std::thread::sleep(test_seam::LINGER);
            ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    };
    std::thread::Builder::new().name(name).spawn(body)
}

/// Test seam: make a later spawn on this thread fail (the thread limit, `EAGAIN`), and count
/// the threads started before it that have ended.
#[cfg(test)]
pub(super) mod test_seam {
    use std::cell::RefCell;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Duration;

    /// How long a thread started under [`fail_after`] runs on after its body returned.
    pub const LINGER: Duration = Duration::from_millis(50);

    thread_local! {
        /// Spawns still to succeed on this thread before one fails, and the count of those
        /// that have ended; `None`: every spawn succeeds, uncounted.
        static PLAN: RefCell<Option<(usize, Arc<AtomicUsize>)>> = const { RefCell::new(None) };
    }

    /// The spawn after the next `n` on this thread fails with `EAGAIN` (once). Returns the
    /// count of those `n` threads that have ended (each [`LINGER`]s after its body first).
    pub fn fail_after(n: usize) -> Arc<AtomicUsize> {
        let ended = Arc::new(AtomicUsize::new(0));
        PLAN.with(|p| *p.borrow_mut() = Some((n, Arc::clone(&ended))));
        ended
    }

    /// `None` when this spawn is to fail; otherwise `Some(the count to add to when the thread
    /// ends)`, `Some(None)` outside a plan.
    pub(super) fn next_spawn() -> Option<Option<Arc<AtomicUsize>>> {
        PLAN.with(|p| {
            let mut plan = p.borrow_mut();
            match plan.as_mut() {
                None => Some(None),
                Some((0, _)) => {
                    *plan = None;
                    None
                }
                Some((n, ended)) => {
                    *n -= 1;
                    Some(Some(Arc::clone(ended)))
                }
            }
        })
    }
}
