//! Batch deliveries (SPEC §4): one request carrying several events (SendGrid's JSON array),
//! each admitted under its own identity, possibly in different ledger shards. The connection
//! waits for one decision as for a single event; [`split`] turns that one reply into one reply
//! per event and calls it once, with the joined decision, after every part has answered.
//!
//! The joined decision — what the delivery is answered — is the worst of its parts, in this
//! order:
//! 1. any part `Unavailable` (not durably admitted: the write failed, or the shard's queue was
//!    full) → `Unavailable` (503): the provider retries the whole delivery; the parts that were
//!    admitted are then `duplicate`s and are not forwarded twice.
//! 2. else any part `Conflict` (an event id seen before with other bytes) → `Conflict` (409):
//!    a retry cannot fix it; every other part is durably admitted (or a duplicate) and is
//!    forwarded, the conflicting one is quarantined as for a single delivery.
//! 3. else any part `Accepted` → `Accepted` (200): at least one event is new.
//! 4. else `Duplicate` (200): the whole delivery was seen before.
//!
//! So the delivery is 2xx exactly when every event is admitted or a duplicate.

use std::sync::{Arc, Mutex};

use crate::ledger::{Decision, Reply};

/// Severity of a part's decision: the joined decision is the most severe.
fn rank(decision: Decision) -> u8 {
    match decision {
        Decision::Duplicate => 0,
        Decision::Accepted => 1,
        Decision::Conflict => 2,
        Decision::Unavailable => 3,
    }
}

/// What the parts have said so far.
struct Joined {
    remaining: usize,
    worst: Decision,
    reply: Option<Reply>,
}

/// One part's reply; a part dropped without being called (its admission lost on the way)
/// counts as `Unavailable`, so the delivery is never answered 2xx for an event not admitted.
struct Part {
    joined: Arc<Mutex<Joined>>,
    done: bool,
}

impl Part {
    fn finish(&mut self, decision: Decision) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let reply = {
            let mut joined = self.joined.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if rank(decision) > rank(joined.worst) {
                joined.worst = decision;
            }
            joined.remaining -= 1;
            if joined.remaining > 0 {
                return;
            }
            joined.reply.take().map(|reply| (reply, joined.worst))
        };
        if let Some((reply, decision)) = reply {
            reply(decision);
        }
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        self.finish(Decision::Unavailable);
    }
}

/// `n` replies (n ≥ 1) whose joined decision (module doc) is given to `reply`, exactly once,
/// when the last of them is called or dropped.
pub fn split(reply: Reply, n: usize) -> Vec<Reply> {
    assert!(n > 0, "a batch has at least one event");
    let joined = Arc::new(Mutex::new(Joined {
        remaining: n,
        worst: Decision::Duplicate,
        reply: Some(reply),
    }));
    (0..n)
        .map(|_| {
            let mut part = Part { joined: Arc::clone(&joined), done: false };
            Box::new(move |decision| part.finish(decision)) as Reply
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::split;
    use crate::ledger::Decision::{self, Accepted, Conflict, Duplicate, Unavailable};

    fn joined(decisions: &[Option<Decision>]) -> Vec<Decision> {
        let (tx, rx) = mpsc::channel();
        let parts = split(Box::new(move |d| tx.send(d).expect("receiver alive")), decisions.len());
        for (part, decision) in parts.into_iter().zip(decisions) {
            match decision {
                Some(d) => part(*d),
                None => drop(part),
            }
        }
        rx.try_iter().collect()
    }

    #[test]
    fn the_worst_part_answers_once() {
        assert_eq!(joined(&[Some(Duplicate), Some(Duplicate)]), [Duplicate]);
        assert_eq!(joined(&[Some(Duplicate), Some(Accepted), Some(Duplicate)]), [Accepted]);
        assert_eq!(joined(&[Some(Accepted), Some(Conflict), Some(Duplicate)]), [Conflict]);
        assert_eq!(joined(&[Some(Conflict), Some(Unavailable), Some(Accepted)]), [Unavailable]);
        assert_eq!(joined(&[Some(Accepted), None]), [Unavailable], "a lost part");
        assert_eq!(joined(&[Some(Accepted)]), [Accepted]);
    }

    #[test]
    fn nothing_until_the_last_part() {
        let (tx, rx) = mpsc::channel();
        let mut parts = split(Box::new(move |d| tx.send(d).expect("receiver alive")), 3);
        let last = parts.pop().expect("three parts");
        for part in parts {
            part(Accepted);
        }
        assert!(rx.try_recv().is_err(), "two of three answered: no decision yet");
        std::thread::spawn(move || last(Duplicate)).join().expect("another thread");
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [Accepted]);
    }
}
