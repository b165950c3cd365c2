//! Batched cross-thread wake-ups. A shard writer answers a whole group commit at once; each
//! answer is queued for the ingress core that owns its connection, and that core must be woken
//! (an eventfd write). Woken at the first answer, the core — on the same CPU on a small
//! machine — preempts the writer, finds one decision queued, answers it, sleeps, and is woken
//! again by the next: measured at ~2 preemptions per commit (issue 6). Inside [`batched`], a
//! wake-up is instead made once per target when the batch ends, after every answer is queued,
//! so the core handles the commit's decisions in one completion round.
//!
//! Deferral is per thread and scoped: outside [`batched`] (tests, the PostgreSQL ledger's
//! tasks, any other caller) [`wake`] wakes at once; a batch that unwinds still wakes every
//! target it deferred, so no wake-up is lost.

use std::cell::RefCell;
use std::sync::Arc;

/// Something that can be woken: a core's event loop.
pub trait Wake: Send + Sync {
    /// Wakes the target now (non-blocking; may be called from any thread).
    fn wake_now(&self);
}

thread_local! {
    /// Targets deferred by the current [`batched`] call on this thread; `None` outside one.
    static DEFERRED: RefCell<Option<Vec<Arc<dyn Wake>>>> = const { RefCell::new(None) };
}

/// Wakes `target`: at once, or — inside [`batched`] on this thread — once when the batch ends,
/// however many times it was asked to in the batch.
pub fn wake<T: Wake + 'static>(target: &Arc<T>) {
    // `try_with`: during thread teardown the list may be gone; then the wake-up is immediate.
    let deferred = DEFERRED
        .try_with(|d| match d.borrow_mut().as_mut() {
            Some(list) => {
                if !list.iter().any(|t| std::ptr::addr_eq(Arc::as_ptr(t), Arc::as_ptr(target))) {
                    let target: Arc<dyn Wake> = Arc::clone(target) as Arc<dyn Wake>;
                    list.push(target);
                }
                true
            }
            None => false,
        })
        .unwrap_or(false);
    if !deferred {
        target.wake_now();
    }
}

/// Runs `f` with this thread's wake-ups deferred to its end (see the module doc). Nested calls
/// join the outer batch.
pub fn batched<R>(f: impl FnOnce() -> R) -> R {
    let outer = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_some() {
            return true;
        }
        *d = Some(Vec::new());
        false
    });
    if outer {
        return f();
    }
    // Wakes on drop, so an unwinding `f` still wakes what it deferred.
    struct Flush;
    impl Drop for Flush {
        fn drop(&mut self) {
            let targets = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
            for t in targets {
                t.wake_now();
            }
        }
    }
    let _flush = Flush;
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake_now(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Counter>, Arc<Counter>) {
        let c = Arc::new(Counter::default());
        (Arc::clone(&c), c)
    }

    #[test]
    fn outside_a_batch_every_wake_is_made_at_once() {
        let (c, t) = counter();
        wake(&t);
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
        wake(&t);
        assert_eq!(c.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_batch_wakes_each_target_once_when_it_ends() {
        let (a, ta) = counter();
        let (b, tb) = counter();
        batched(|| {
            for _ in 0..5 {
                wake(&ta);
            }
            wake(&tb);
            batched(|| wake(&tb));
            assert_eq!(a.0.load(Ordering::SeqCst), 0, "deferred until the batch ends");
            assert_eq!(b.0.load(Ordering::SeqCst), 0, "a nested batch joins the outer one");
        });
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        wake(&ta);
        assert_eq!(a.0.load(Ordering::SeqCst), 2, "after the batch, wakes are immediate again");
    }

    #[test]
    fn a_batch_that_unwinds_still_wakes_what_it_deferred() {
        let (c, t) = counter();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            batched(|| {
                wake(&t);
                panic!("a reply panicked");
            })
        }));
        assert!(result.is_err());
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
        wake(&t);
        assert_eq!(c.0.load(Ordering::SeqCst), 2, "the batch ended with the unwind");
    }

    #[test]
    fn batches_are_per_thread() {
        let (c, t) = counter();
        batched(|| {
            let t2 = Arc::clone(&t);
            std::thread::spawn(move || wake(&t2)).join().expect("waker thread");
            assert_eq!(c.0.load(Ordering::SeqCst), 1, "another thread is not in this batch");
        });
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
    }
}
