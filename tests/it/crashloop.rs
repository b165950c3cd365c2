//! The crash loop (issue 5, R14, R18, R21): the real binary is killed with SIGKILL at random
//! moments under concurrent load, restarted on the same ledger, again and again. Afterwards the
//! promise is checked against what the senders saw and what the destination received (counted by
//! `Idempotency-Key`):
//!
//! * every event answered `accepted` is delivered (none lost);
//! * no identity is answered `accepted` twice, across all crashes (re-sent copies of
//!   acknowledged events are `duplicate`);
//! * nothing that failed verification is forwarded.
//!
//! CI runs a few cycles per IO back end; `HOOKWALL_CRASH_CYCLES=100` is the long form, and
//! `HOOKWALL_CRASH_SEED=N` replays the kill moments of a run (the seed is printed).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::client::{self, Conn};
use crate::harness::{stripe_a, Hookwall, Io, Setup};
use crate::sign::{self, Provider};
use crate::sink::{Script, Sink};

#[path = "../common/rng.rs"]
mod rng;

use rng::Rng;

/// Sender threads per cycle.
const SENDERS: usize = 8;
/// Most events one sender posts in one cycle (the kill normally comes first).
const EVENTS_PER_SENDER: usize = 400;

/// What the senders of one cycle saw.
#[derive(Default)]
struct Cycle {
    /// Fresh ids answered `accepted`.
    accepted: Vec<String>,
    /// Re-sent copies of earlier acknowledged ids, answered `duplicate`.
    duplicates: usize,
    /// Answers that break the promise (e.g. `accepted` for an id acknowledged before).
    violations: Vec<String>,
    /// Ids sent with a wrong signature (must never be forwarded).
    forged: Vec<String>,
    /// Fresh, validly signed ids sent, answered or not (a request cut by the kill may have
    /// been admitted: forwarding it is correct, acknowledging it was never promised).
    sent: Vec<String>,
    /// Requests answered at all.
    answered: usize,
    /// Sender threads finished.
    done: usize,
}

fn env_number(name: &str) -> Option<u64> {
    // A set but unreadable value is a typo: stop, never silently run the default.
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")))
}

on_both_io! {
    fn sigkill_loop_loses_nothing_and_admits_once(io: Io) {
        crash_loop(io);
    }
}

fn crash_loop(io: Io) {
    let cycles = env_number("HOOKWALL_CRASH_CYCLES").unwrap_or(4);
    let seed = env_number("HOOKWALL_CRASH_SEED").unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        u64::try_from(nanos % u128::from(u64::MAX)).expect("fits") | 1
    });
    eprintln!("crash loop: io {io:?}, {cycles} cycles, HOOKWALL_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let sink = Sink::start(Script::always(200));
    let setup = Setup::new(io, dir.path(), &sink.url());
    let run = sign::unique_id("crash");
    let mut acknowledged: Vec<String> = Vec::new();
    let mut forged: Vec<String> = Vec::new();
    let mut sent: HashSet<String> = HashSet::new();
    let (mut duplicates, mut answered) = (0, 0);

    for cycle in 0..cycles {
        let mut hw = Hookwall::start(dir.path(), &setup);
        // Kill after 1..=300 answers: somewhere between right after start and deep in traffic.
        let kill_after = 1 + rng.below(300);
        let earlier = Arc::new(acknowledged.clone());
        let state = Arc::new((Mutex::new(Cycle::default()), Condvar::new()));
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let (state, earlier) = (Arc::clone(&state), Arc::clone(&earlier));
                let (addr, prefix) = (hw.ingress, format!("{run}_{cycle}_{sender}"));
                std::thread::spawn(move || {
                    send(addr, &prefix, &earlier, &state);
                    let (lock, cv) = &*state;
                    lock.lock().expect("cycle lock").done += 1;
                    cv.notify_all();
                })
            })
            .collect();
        {
            let (lock, cv) = &*state;
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut s = lock.lock().expect("cycle lock");
            while s.answered < kill_after && s.done < SENDERS {
                let now = Instant::now();
                assert!(now < deadline, "cycle {cycle}: only {} answers in 60 s", s.answered);
                s = cv.wait_timeout(s, deadline - now).expect("cycle lock").0;
            }
        }
        hw.kill9();
        for t in senders {
            t.join().expect("sender thread");
        }
        let s = std::mem::take(&mut *state.0.lock().expect("cycle lock"));
        assert!(s.violations.is_empty(), "cycle {cycle} (seed {seed}): {:?}", s.violations);
        eprintln!(
            "cycle {cycle}: killed after {} answers ({} accepted, {} duplicate)",
            s.answered,
            s.accepted.len(),
            s.duplicates
        );
        acknowledged.extend(s.accepted);
        forged.extend(s.forged);
        sent.extend(s.sent);
        duplicates += s.duplicates;
        answered += s.answered;
    }

    // A last start delivers what the crashes left undelivered.
    let hw = Hookwall::start(dir.path(), &setup);
    let source = stripe_a();
    let keys: HashSet<String> = acknowledged.iter().map(|id| source.key(id)).collect();
    let recorded = sink.wait_until(
        Duration::from_secs(120),
        "every acknowledged event delivered after the last restart",
        |recorded| {
            let seen: HashSet<&str> =
                recorded.iter().map(|r| r.header("idempotency-key")).collect();
            keys.iter().all(|k| seen.contains(k.as_str()))
        },
    );
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    for r in &recorded {
        *per_key.entry(r.header("idempotency-key")).or_insert(0) += 1;
    }
    for id in &forged {
        assert!(!per_key.contains_key(source.key(id).as_str()), "forged {id} was forwarded");
    }
    let sent_keys: HashSet<String> = sent.iter().map(|id| source.key(id)).collect();
    let unknown: Vec<&&str> = per_key.keys().filter(|k| !sent_keys.contains(**k)).collect();
    assert!(unknown.is_empty(), "forwarded but never sent validly: {unknown:?}");
    let redelivered: usize = per_key.values().map(|n| n - 1).sum();
    eprintln!(
        "crash loop ({io:?}, seed {seed}): {cycles} SIGKILL cycles, {answered} answers, {} acknowledged, \
         {duplicates} duplicates answered, {} delivered, {redelivered} redelivered (at-least-once, same key), 0 lost",
        acknowledged.len(),
        per_key.len()
    );
    // Copies of acknowledged events are still duplicates after all the crashes.
    for id in acknowledged.iter().step_by(17) {
        let body = sign::body(Provider::Stripe, id, "crash loop");
        let r = hw.deliver(&source, id, &body);
        assert_eq!(r.answer(), (200, "duplicate".to_owned()), "{id} after the loop: {r}");
    }
}

/// One sender: fresh events, and every 5th request a copy of an event acknowledged in an
/// earlier cycle (must be `duplicate`), every 7th a forged one (must be 401), on a keep-alive
/// connection until the server is gone.
fn send(
    addr: std::net::SocketAddr,
    prefix: &str,
    earlier: &[String],
    state: &(Mutex<Cycle>, Condvar),
) {
    let Ok(mut conn) = Conn::try_connect(addr) else { return };
    for n in 0..EVENTS_PER_SENDER {
        let (id, secret, kind) = if n % 7 == 6 {
            (format!("{prefix}_forged_{n}"), sign::WRONG_SECRET, "forged")
        } else if n % 5 == 4 && !earlier.is_empty() {
            (earlier[(n * 31 + prefix.len()) % earlier.len()].clone(), sign::STRIPE_SECRET, "copy")
        } else {
            (format!("{prefix}_{n}"), sign::STRIPE_SECRET, "fresh")
        };
        if kind == "fresh" {
            state.0.lock().expect("cycle lock").sent.push(id.clone());
        }
        let body = sign::body(Provider::Stripe, &id, "crash loop");
        let h = sign::headers(Provider::Stripe, secret, &id, sign::now_unix_s(), &body);
        if conn.try_send(&client::request("POST", "/webhooks/stripe-a", &h, &body)).is_err() {
            return;
        }
        let Ok(r) = conn.try_read_response() else { return };
        let (lock, cv) = state;
        let mut s = lock.lock().expect("cycle lock");
        s.answered += 1;
        match (kind, r.status, r.code().as_str()) {
            ("fresh", 200, "accepted") => s.accepted.push(id),
            ("copy", 200, "duplicate") => s.duplicates += 1,
            ("forged", 401, "signature_invalid") => s.forged.push(id),
            // Fail closed while the ledger is still opening or shutting down is allowed.
            (_, 503, _) => {}
            _ => s.violations.push(format!("{kind} {id}: {r}")),
        }
        cv.notify_all();
        if r.header("connection") == Some("close") {
            drop(s);
            let Ok(c) = Conn::try_connect(addr) else { return };
            conn = c;
        }
    }
}
