//! Delivery order per `ordering_key` (R22, `src/ordering.rs`): events of one ordering group
//! reach the destination one at a time in admission order — a retry keeps its place, and the
//! order survives a restart — while different groups are delivered in parallel.

use std::time::Duration;

use crate::harness::{stripe_a, Fixture, Hookwall, Io, Setup, Source, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};
use crate::sink::{Recorded, Script, Sink};

/// How long the slow destination takes to answer each forward.
const SLOW: Duration = Duration::from_millis(60);

/// A Stripe event whose `data.object.id` is `group` (the ordering value).
pub(crate) fn event(id: &str, group: &str, n: usize) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","object":"event","type":"customer.updated","data":{{"object":{{"id":"{group}","n":{n}}}}}}}"#
    )
    .into_bytes()
}

/// Sends `count` events to each of `groups` interleaved (g0 #0, g1 #0, g0 #1, …), each
/// answered `accepted` before the next is sent; returns the idempotency keys per group in
/// admission order.
fn admit(hw: &Hookwall, s: &Source, groups: &[&str], count: usize) -> Vec<Vec<String>> {
    let prefix = sign::unique_id("evt_ord");
    let mut keys = vec![Vec::new(); groups.len()];
    for n in 0..count {
        for (g, group) in groups.iter().enumerate() {
            let id = format!("{prefix}_{g}_{n}");
            let r = hw.deliver(s, &id, &event(&id, group, n));
            assert_eq!(r.answer(), (200, "accepted".to_owned()), "{id}: {r}");
            keys[g].push(s.key(&id));
        }
    }
    keys
}

/// Waits until every key got a 2xx; returns everything the sink received.
fn wait_delivered(sink: &Sink, keys: &[Vec<String>]) -> Vec<Recorded> {
    let all: Vec<&String> = keys.iter().flatten().collect();
    sink.wait_until(FORWARD_TIMEOUT * 2, "a 2xx for every ordered event", |r| {
        all.iter()
            .all(|k| r.iter().any(|r| r.header("idempotency-key") == **k && r.answered == 200))
    })
}

/// R22: the group's forwards, in arrival order, name its keys in admission order (a retried
/// key repeats in place), and each arrived only after the previous one was answered.
pub(crate) fn assert_in_order_one_at_a_time(recorded: &[Recorded], keys: &[String]) {
    let ours: Vec<&Recorded> =
        recorded.iter().filter(|r| keys.iter().any(|k| r.header("idempotency-key") == k)).collect();
    let mut order: Vec<&str> = ours.iter().map(|r| r.header("idempotency-key")).collect();
    order.dedup();
    let expected: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(order, expected, "forwards of one ordering group, in arrival order");
    for pair in ours.windows(2) {
        assert!(
            pair[1].arrived_at >= pair[0].answered_at,
            "{} arrived while {} was still being answered",
            pair[1].header("idempotency-key"),
            pair[0].header("idempotency-key")
        );
    }
}

/// R22 (issue 4): with a slow destination whose first answer is a 503, each of two ordering
/// groups is delivered in admission order, one forward at a time — the events behind the
/// retried one wait through its backoff — while the two groups are in flight together.
#[test]
fn same_ordering_key_is_delivered_in_admission_order_groups_in_parallel() {
    let f = Fixture::with(Io::Auto, Script::first_then(&[503], 200).slow(SLOW), |s| {
        s.source_lines.push(("stripe-a", "ordering_key = \"/data/object/id\"".to_owned()));
    });
    let keys = admit(&f.hw, &stripe_a(), &["cus_A", "cus_B"], 6);
    let recorded = wait_delivered(&f.sink, &keys);
    assert_eq!(recorded.iter().filter(|r| r.answered == 503).count(), 1, "one retried forward");
    for group in &keys {
        assert_in_order_one_at_a_time(&recorded, group);
    }
    // Different groups overlap: some forward of A arrived while one of B was being answered.
    let of = |g: usize| -> Vec<&Recorded> {
        recorded
            .iter()
            .filter(|r| keys[g].iter().any(|k| r.header("idempotency-key") == k))
            .collect()
    };
    let overlap = of(0).iter().any(|a| {
        of(1).iter().any(|b| a.arrived_at < b.answered_at && b.arrived_at < a.answered_at)
    });
    assert!(overlap, "the two ordering groups were never in flight together");
}

/// R22, R18: the ordering index is in the ledger: events admitted while the destination is
/// paused, then a restart (SIGTERM) with the destination running, are delivered in admission
/// order; events without a value at the pointer are delivered unordered.
#[test]
fn admission_order_survives_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sink = Sink::start(Script::always(200).slow(SLOW));
    let mut setup = Setup::new(Io::Auto, dir.path(), &sink.url());
    setup.source_lines.push(("stripe-a", "ordering_key = \"/data/object/id\"".to_owned()));
    setup.paused = true;
    let s = stripe_a();
    let mut hw = Hookwall::start(dir.path(), &setup);
    let keys = admit(&hw, &s, &["cus_R"], 5);
    let unordered = sign::unique_id("evt_unordered");
    let body = sign::body(Provider::Stripe, &unordered, "no data.object.id");
    assert_eq!(hw.deliver(&s, &unordered, &body).code(), "accepted");
    let status = hw.stop();
    assert!(status.success(), "SIGTERM exit status {status}; stderr:\n{}", hw.stderr());
    assert!(sink.recorded().is_empty(), "nothing is forwarded while paused");

    setup.paused = false;
    let _hw = Hookwall::start(dir.path(), &setup);
    let recorded = wait_delivered(&sink, &keys);
    assert_in_order_one_at_a_time(&recorded, &keys[0]);
    sink.wait_for_key(&s.key(&unordered), 1, FORWARD_TIMEOUT);
}

/// Review finding (R22): dropping the event of a group while its attempt is still running
/// released the group at once, and the next event was forwarded while the dropped one was
/// still being answered. The next event now waits for the running attempt to finish. The
/// destination is slower (6 s) than the dispatcher's periodic rescan from the head (5 s), so
/// without the rule the second event would be sent during the first one's answer.
#[test]
fn dropping_the_event_in_flight_keeps_one_at_a_time() {
    const TOKEN: &str = "ordering-admin-token-0123456789";
    let slow = Duration::from_secs(6);
    let f = Fixture::with(Io::Auto, Script::always(200).slow(slow), |s| {
        s.source_lines.push(("stripe-a", "ordering_key = \"/data/object/id\"".to_owned()));
        s.admin_token = Some(TOKEN.to_owned());
        s.destination_timeout = "20s";
    });
    let keys = admit(&f.hw, &stripe_a(), &["cus_D"], 2);
    let group = &keys[0];
    f.sink.wait_for_key(&group[0], 1, FORWARD_TIMEOUT);
    let path = format!("/admin/events/{}/drop", group[0].replace('/', "%2F"));
    let headers = [
        ("Authorization".to_owned(), format!("Bearer {TOKEN}")),
        ("Content-Type".to_owned(), "application/json".to_owned()),
    ];
    let r = crate::client::send_one(f.hw.admin, "POST", &path, &headers, br#"{"reason":"test"}"#);
    assert_eq!(r.status, 200, "the drop while the attempt runs: {r}");
    let recorded = f.sink.wait_until(FORWARD_TIMEOUT * 2, "the group's second event", |r| {
        r.iter().any(|r| r.header("idempotency-key") == group[1])
    });
    assert_in_order_one_at_a_time(&recorded, group);
}
