//! Deadline-aware admission (R17, issue 6 item 5): a delivery whose estimated commit wait
//! exceeds half its source's `ack_deadline` is answered `503 overloaded` with `Retry-After` at
//! once, and counted in `hookwall_ingress_shed_total{source}`; an answer written after the
//! deadline is counted in `hookwall_ingress_deadline_misses_total{source}`. A source with an
//! absurdly short deadline (1 ns) makes both deterministic: the first delivery (nothing learned
//! yet, estimate zero) is admitted but acked too late; every later one is shed (and that 503,
//! too, comes after 1 ns). One core, so one ledger shard learns from the first commit. A source
//! with the default deadline is untouched.

use crate::harness::{stripe_a, stripe_rot, Fixture};
use crate::metrics::sample;
use crate::sign::{self, Provider};
use crate::sink::Script;

on_both_io! {
    fn a_delivery_that_cannot_be_acked_in_time_is_shed(io: Io) {
        let f = Fixture::with(io, Script::always(200), |setup| {
            setup.cores = 1;
            setup.source_lines.push(("stripe-a", "ack_deadline = \"1ns\"".to_owned()));
        });
        let source = stripe_a();
        let first = sign::unique_id("evt_shed");
        let r = f.hw.deliver(&source, &first, &sign::body(Provider::Stripe, &first, "a"));
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "nothing learned yet: {r}");

        let second = sign::unique_id("evt_shed");
        let r = f.hw.deliver(&source, &second, &sign::body(Provider::Stripe, &second, "b"));
        assert_eq!(r.answer(), (503, "overloaded".to_owned()), "{r}");
        assert_eq!(r.header("retry-after"), Some("1"), "{r}");
        assert_eq!(r.id().as_deref(), Some(second.as_str()), "{r}");

        let other = stripe_rot();
        let third = sign::unique_id("evt_keep");
        let r = f.hw.deliver(&other, &third, &sign::body(Provider::Stripe, &third, "c"));
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "a 10 s deadline is not shed: {r}");

        let text = String::from_utf8_lossy(&f.hw.admin_get("/metrics").body).into_owned();
        let get = |name: &str, id: &str| sample(&text, name, &[("source", id)]);
        assert_eq!(get("hookwall_ingress_shed_total", "stripe-a"), Some(1.0), "{text}");
        assert_eq!(get("hookwall_ingress_deadline_misses_total", "stripe-a"), Some(2.0), "{text}");
        assert_eq!(get("hookwall_ingress_shed_total", "stripe-rot"), Some(0.0), "{text}");
        assert_eq!(get("hookwall_ingress_deadline_misses_total", "stripe-rot"), Some(0.0));
        let labels = [("source", "stripe-a"), ("provider", "stripe"), ("status", "overloaded")];
        assert_eq!(sample(&text, "hookwall_ingress_requests_total", &labels), Some(1.0));
    }
}
