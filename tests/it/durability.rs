//! Durability (R14, R16, R18): identities survive a graceful restart; after kill -9 in the
//! middle of traffic, every event that was answered `accepted` is forwarded after the restart
//! and is a duplicate when sent again.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::client::{self, Conn};
use crate::harness::{standard_a, stripe_a, Hookwall, Setup, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};
use crate::sink::{Script, Sink};

on_both_io! {
    /// R16, R25: identities are in the ledger, not in memory: after SIGTERM (clean exit 0) and
    /// a restart on the same ledger, copies of admitted events are duplicates.
    fn sigterm_restart_remembers_identities(io: Io) {
        let dir = tempfile::tempdir().expect("temp dir");
        let sink = Sink::start(Script::always(200));
        let setup = Setup::new(io, dir.path(), &sink.url());
        let (s, w) = (stripe_a(), standard_a());
        let sid = sign::unique_id("evt_restart");
        let sbody = sign::body(Provider::Stripe, &sid, "before restart");
        let wid = sign::unique_id("msg_restart");
        let wbody = sign::body(Provider::Standard, &wid, "before restart");

        let mut hw = Hookwall::start(dir.path(), &setup);
        assert_eq!(hw.deliver(&s, &sid, &sbody).code(), "accepted");
        assert_eq!(hw.deliver(&w, &wid, &wbody).code(), "accepted");
        sink.wait_for_key(&s.key(&sid), 1, FORWARD_TIMEOUT);
        sink.wait_for_key(&w.key(&wid), 1, FORWARD_TIMEOUT);
        let status = hw.stop();
        assert!(status.success(), "SIGTERM exit status {status}; stderr:\n{}", hw.stderr());

        let hw = Hookwall::start(dir.path(), &setup);
        let r = hw.deliver(&s, &sid, &sbody);
        assert_eq!(r.answer(), (200, "duplicate".to_owned()), "stripe after restart: {r}");
        let r = hw.deliver(&w, &wid, &wbody);
        assert_eq!(r.answer(), (200, "duplicate".to_owned()), "standard after restart: {r}");
        let other = sign::body(Provider::Stripe, &sid, "changed after restart");
        let r = hw.deliver(&s, &sid, &other);
        assert_eq!(r.answer(), (409, "conflict".to_owned()), "R11 after restart: {r}");
        let nid = sign::unique_id("evt_after");
        let nbody = sign::body(Provider::Stripe, &nid, "after restart");
        assert_eq!(hw.deliver(&s, &nid, &nbody).code(), "accepted", "new events still admitted");
        sink.wait_for_key(&s.key(&nid), 1, FORWARD_TIMEOUT);
    }
}

/// What the sender threads saw.
#[derive(Default)]
struct Seen {
    /// Event ids answered 200 `accepted`.
    acked: Vec<String>,
    /// Answers other than `accepted` (there should be none).
    unexpected: Vec<String>,
    /// Threads finished.
    done: usize,
}

on_both_io! {
    /// R14, R18: kill -9 while 8 threads post unique events. After a restart on the same ledger
    /// every event answered `accepted` is forwarded (its Idempotency-Key reaches the
    /// destination) and a copy of it is a duplicate. Requests left unanswered by the kill may or
    /// may not have been admitted; only acknowledged ones are checked.
    fn kill9_mid_traffic_loses_no_acknowledged_event(io: Io) {
        const THREADS: usize = 8;
        const EVENTS_PER_THREAD: usize = 100;
        const KILL_AFTER_ACKS: usize = 40;
        let dir = tempfile::tempdir().expect("temp dir");
        let sink = Sink::start(Script::always(200));
        let setup = Setup::new(io, dir.path(), &sink.url());
        let s = stripe_a();
        let run = sign::unique_id("k9");

        let mut hw = Hookwall::start(dir.path(), &setup);
        let seen = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        let senders: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (seen, addr, run) = (Arc::clone(&seen), hw.ingress, run.clone());
                std::thread::spawn(move || {
                    send_until_cut(addr, &run, thread, EVENTS_PER_THREAD, &seen);
                    let (lock, cv) = &*seen;
                    lock.lock().expect("seen lock").done += 1;
                    cv.notify_all();
                })
            })
            .collect();

        // Kill once some acks arrived (bounded wait), from this thread, mid-traffic.
        {
            let (lock, cv) = &*seen;
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut state = lock.lock().expect("seen lock");
            while state.acked.len() < KILL_AFTER_ACKS && state.done < THREADS {
                let now = Instant::now();
                assert!(now < deadline, "only {} acks within 60 s; stderr:\n{}", state.acked.len(), hw.stderr());
                state = cv.wait_timeout(state, deadline - now).expect("seen lock").0;
            }
        }
        hw.kill9();
        for t in senders {
            t.join().expect("sender thread");
        }
        let (acked, unexpected) = {
            let state = seen.0.lock().expect("seen lock");
            (state.acked.clone(), state.unexpected.clone())
        };
        eprintln!("kill -9 after {} acknowledged events", acked.len());
        assert!(unexpected.is_empty(), "answers other than accepted: {unexpected:?}");
        assert!(acked.len() >= KILL_AFTER_ACKS, "acked {}", acked.len());
        assert!(
            acked.len() < THREADS * EVENTS_PER_THREAD,
            "every event was acknowledged before the kill: the kill did not land mid-traffic"
        );

        let hw = Hookwall::start(dir.path(), &setup);
        let keys: Vec<String> = acked.iter().map(|id| s.key(id)).collect();
        sink.wait_until(Duration::from_secs(60), "every acknowledged event forwarded after restart", |recorded| {
            keys.iter().all(|k| recorded.iter().any(|r| r.header("idempotency-key") == k))
        });
        for id in &acked {
            let body = sign::body(Provider::Stripe, id, "kill -9");
            let r = hw.deliver(&s, id, &body);
            assert_eq!(r.answer(), (200, "duplicate".to_owned()), "{id} after restart: {r}");
        }
    }
}

/// One sender: posts its events on a keep-alive connection (a new one if the server closes
/// it) until done or the server is gone; records what came back.
fn send_until_cut(
    addr: std::net::SocketAddr,
    run: &str,
    thread: usize,
    events: usize,
    seen: &(Mutex<Seen>, Condvar),
) {
    let s = stripe_a();
    let Ok(mut conn) = Conn::try_connect(addr) else { return };
    for n in 0..events {
        let id = format!("{run}_{thread}_{n}");
        let body = sign::body(Provider::Stripe, &id, "kill -9");
        let h =
            sign::headers(Provider::Stripe, sign::STRIPE_SECRET, &id, sign::now_unix_s(), &body);
        let request = client::request("POST", &format!("/webhooks/{}", s.id), &h, &body);
        if conn.try_send(&request).is_err() {
            return;
        }
        let Ok(r) = conn.try_read_response() else { return };
        let (lock, cv) = seen;
        let mut state = lock.lock().expect("seen lock");
        if r.answer() == (200, "accepted".to_owned()) {
            state.acked.push(id);
        } else {
            state.unexpected.push(format!("{id}: {r}"));
        }
        cv.notify_all();
        if r.header("connection") == Some("close") {
            drop(state);
            let Ok(c) = Conn::try_connect(addr) else { return };
            conn = c;
        }
    }
}
