//! Queue-delay load shedding on an ingress core (issue 6, R17): past saturation, excess
//! deliveries are answered `503 overloaded` + `Retry-After` at once instead of queueing.
//!
//! The signal is the *queue delay* of a complete request: how long it waited between arriving
//! at the core (its last bytes reaching the socket, as far as the back end can tell) and the
//! core starting to process it. The deadline rule (`ACK_DEADLINE_SHED_SHARE` of the source's
//! `ack_deadline`) only sees the ledger's queue; a saturated core hides its queue in the
//! kernel — socket buffers and the completion queue — where every request waits for the
//! core's turn, and the deadline rule never fires. The rule here is CoDel's (Nichols and
//! Jacobson, "Controlling Queue Delay", ACM Queue 2012), applied to requests instead of
//! packets: a burst makes a queue that drains, a standing queue does not, so the *minimum*
//! delay over an interval tells them apart. When every request of the last
//! [`QUEUE_DELAY_INTERVAL`] waited longer than [`QUEUE_DELAY_TARGET`], the core is saturated,
//! and the requests that waited longer than the target are shed — before verification, so a
//! shed request costs a parse and a write. Shedding frees the core, the delay falls under the
//! target, and the next interval admits everything again.
//!
//! How each back end estimates arrival: io_uring, a request completed by a batch of
//! completions that was already waiting when the core asked for more arrived at the earliest
//! right after the previous batch was taken (an upper bound: one loop turn); epoll, the
//! lateness of a timer the core sets for itself (how long ready tasks wait for their turn).

//!
//! A core that keeps up with its sockets can still hold a standing queue: between admission
//! and the ledger's decision, in the shard's queue, its commits and the other threads sharing
//! the core. No single stage's wait shows it, and a provider with many connections keeps
//! every one of them busy, so the queue never grows past its connection count. [`Pie`] sheds
//! on the *sojourn* of admissions instead — arrival to the ledger's decision — with the
//! controller of RFC 8033 (PIE): every [`PIE_UPDATE_INTERVAL`] the share of arrivals shed
//! moves by `α·(delay − target) + β·(delay − previous delay)` (delay: the mean sojourn of the
//! interval, less two of the shard's recent commit times — the sojourn with no queue, which
//! shedding cannot shorten; target: [`SOJOURN_TARGET`]), so it settles at the share that keeps the sojourn at
//! the target, whatever the excess. Shed arrivals are refused before verification, like the
//! queue-delay rule's, and only once a queue has stood for RFC 8033's burst allowance
//! ([`PIE_BURST_ALLOWANCE`]), so a short stall costs latency, not 503s. Without RFC 8033's damping of
//! small shares (§4.2, tuned for TCP flows that halve their rate on one drop): a provider does
//! not slow down on a 503, so the share must reach the excess quickly. With §5.5's optional
//! cap: from a share of [`PIE_STEP_CAPPED_FROM`] on, one update adds at most [`PIE_STEP_MAX`],
//! so the long sojourns that end a stall raise the share step by step, not in one jump.

use std::time::{Duration, Instant};

use crate::limits::{
    PIE_ALPHA, PIE_BETA, PIE_BURST_ALLOWANCE, PIE_STEP_CAPPED_FROM, PIE_STEP_MAX,
    PIE_UPDATE_INTERVAL, QUEUE_DELAY_INTERVAL, QUEUE_DELAY_SAMPLES_MIN, QUEUE_DELAY_TARGET,
    SOJOURN_TARGET,
};

/// One core's shedding state (the core's thread only; no locks).
#[derive(Debug)]
pub struct Overload {
    /// Start of the current interval.
    window_start: Instant,
    /// Least queue delay seen in the current interval (`None`: no request yet).
    window_min: Option<Duration>,
    /// Requests seen in the current interval.
    window_count: u32,
    /// The previous interval's verdict: every request in it waited over the target.
    shedding: bool,
}

impl Overload {
    /// Not shedding; the first interval starts at `now`.
    pub fn new(now: Instant) -> Overload {
        Overload { window_start: now, window_min: None, window_count: 0, shedding: false }
    }

    /// Records the queue delay `delay` of a request processed at `now` and says whether to shed
    /// it: only while the core is saturated (the previous interval's minimum was over the
    /// target), and only a request that itself waited over the target.
    pub fn observe(&mut self, delay: Duration, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed >= QUEUE_DELAY_INTERVAL {
            // A window that spans a silent interval (no request processed) is stale: the queue
            // it measured has had time to drain.
            // A standing queue needs requests to stand in: a few slow ones on a quiet core (one
            // long loop turn, whose every request gets its length as an upper-bound wait) are
            // not one.
            let fresh = elapsed < 2 * QUEUE_DELAY_INTERVAL;
            let busy = self.window_count >= QUEUE_DELAY_SAMPLES_MIN;
            self.shedding =
                fresh && busy && self.window_min.is_some_and(|min| min > QUEUE_DELAY_TARGET);
            self.window_start = now;
            self.window_min = None;
            self.window_count = 0;
        }
        self.window_min = Some(self.window_min.map_or(delay, |min| min.min(delay)));
        self.window_count = self.window_count.saturating_add(1);
        self.shedding && delay > QUEUE_DELAY_TARGET
    }

    /// Whether the core is saturated (the previous interval's verdict).
    pub fn shedding(&self) -> bool {
        self.shedding
    }
}

/// One core's sojourn-based shedding state (RFC 8033's controller; the core's thread only).
#[derive(Debug)]
pub struct Pie {
    /// Share of arriving requests shed, `0.0..=1.0`.
    share: f64,
    /// Shed credit: grows by `share` per arrival, and an arrival is shed when it reaches 1, so
    /// exactly that share is shed, evenly spread (no randomness to make tests flaky).
    credit: f64,
    /// When the share is next updated.
    update_at: Instant,
    /// Sum and count of the sojourns recorded since the last update.
    sum: Duration,
    count: u32,
    /// The mean sojourn of the previous update interval (RFC 8033's `qdelay_old`).
    delay_old: Duration,
    /// The last time a sojourn was recorded.
    recorded_at: Instant,
    /// What is left of the burst allowance (RFC 8033 §4.4): nothing is shed until a queue has
    /// stood for [`PIE_BURST_ALLOWANCE`], so a stall shorter than that (a slow fsync, a flush)
    /// costs latency, not 503s.
    burst_left: Duration,
}

impl Pie {
    /// Sheds nothing; the first update is one interval after `now`.
    pub fn new(now: Instant) -> Pie {
        Pie {
            share: 0.0,
            credit: 0.0,
            update_at: now + PIE_UPDATE_INTERVAL,
            sum: Duration::ZERO,
            count: 0,
            delay_old: Duration::ZERO,
            recorded_at: now,
            burst_left: PIE_BURST_ALLOWANCE,
        }
    }

    /// Records the sojourn of an admission decided at `now`: from its arrival (as for
    /// [`Overload::observe`]) to the ledger's decision.
    pub fn record(&mut self, sojourn: Duration, now: Instant) {
        self.update(now);
        self.sum = self.sum.saturating_add(sojourn);
        self.count = self.count.saturating_add(1);
        self.recorded_at = now;
    }

    /// Whether a request arriving at `now` is shed (the current share of arrivals).
    pub fn shed(&mut self, now: Instant) -> bool {
        self.update(now);
        // Only while the queue stands: the last interval's mean sojourn was over the target.
        // (RFC 8033 §4.1 stops dropping under half the target while the probability is under
        // 20 %; a 503 costs a provider a retry, so nothing is shed under the target at all —
        // the share still falls only as fast as the controller lowers it.)
        if !self.shedding() {
            self.credit = 0.0;
            return false;
        }
        self.credit += self.share;
        if self.credit >= 1.0 {
            self.credit -= 1.0;
            return true;
        }
        false
    }

    /// The share of arrivals the controller has set, `0.0..=1.0`.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// Whether that share of arrivals is being shed: the share is set, the last interval's mean
    /// sojourn was over the target, and the burst allowance is spent.
    pub fn shedding(&self) -> bool {
        self.share > 0.0 && self.delay_old > SOJOURN_TARGET && self.burst_left.is_zero()
    }

    /// RFC 8033 §4.2, once per [`PIE_UPDATE_INTERVAL`] that has passed by `now`.
    fn update(&mut self, now: Instant) {
        if now < self.update_at {
            return;
        }
        self.update_at = now + PIE_UPDATE_INTERVAL;
        if self.count == 0 {
            // No admission was decided: either nothing arrives (a quiet core: its old share is
            // stale once a whole interval has been silent) or they all wait (a stall: keep the
            // share until their sojourns are known).
            if now.saturating_duration_since(self.recorded_at) >= QUEUE_DELAY_INTERVAL {
                self.share = 0.0;
                self.delay_old = Duration::ZERO;
                self.burst_left = PIE_BURST_ALLOWANCE;
            }
            return;
        }
        let delay = self.sum / self.count;
        self.sum = Duration::ZERO;
        self.count = 0;
        let secs = |d: Duration| d.as_secs_f64();
        let error = secs(delay) - secs(SOJOURN_TARGET);
        let trend = secs(delay) - secs(self.delay_old);
        let mut step = PIE_ALPHA * error + PIE_BETA * trend;
        // RFC 8033 §5.5 (optional): above 10 %, a rise is capped at 2 % per update.
        if self.share >= PIE_STEP_CAPPED_FROM {
            step = step.min(PIE_STEP_MAX);
        }
        let mut share = self.share + step;
        // RFC 8033 §4.2: with the queue gone for two intervals, the share decays by 2 %.
        let half = SOJOURN_TARGET / 2;
        if delay < half && self.delay_old < half {
            share *= 0.98;
        }
        self.share = share.clamp(0.0, 1.0);
        // RFC 8033 §4.4: the allowance runs down while a queue builds, and is whole again once
        // the queue has been gone for two intervals and nothing is shed.
        self.burst_left = if self.share == 0.0 && delay < half && self.delay_old < half {
            PIE_BURST_ALLOWANCE
        } else {
            self.burst_left.saturating_sub(PIE_UPDATE_INTERVAL)
        };
        self.delay_old = delay;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Feeds one request every `step` for `span`, each with the delay `delay(i)`; returns how
    /// many were shed.
    fn run(
        o: &mut Overload,
        t: &mut Instant,
        span: Duration,
        delay: impl Fn(u32) -> Duration,
    ) -> u32 {
        let step = MS;
        let mut shed = 0;
        let mut i = 0;
        let end = *t + span;
        while *t < end {
            shed += u32::from(o.observe(delay(i), *t));
            *t += step;
            i += 1;
        }
        shed
    }

    #[test]
    fn a_core_under_its_target_never_sheds() {
        let mut t = crate::clock::monotonic();
        let mut o = Overload::new(t);
        let below = QUEUE_DELAY_TARGET - MS;
        assert_eq!(run(&mut o, &mut t, 10 * QUEUE_DELAY_INTERVAL, |_| below), 0);
        assert!(!o.shedding());
    }

    #[test]
    fn a_burst_that_drains_within_the_interval_is_not_shed() {
        // Most requests wait far over the target, but the queue empties once per interval:
        // one request in each interval saw no queue, so there is no standing queue.
        let mut t = crate::clock::monotonic();
        let mut o = Overload::new(t);
        let interval_ms = u32::try_from(QUEUE_DELAY_INTERVAL.as_millis())
            .expect("the interval is a few hundred ms");
        let bursty =
            |i: u32| if i % interval_ms == 7 { Duration::ZERO } else { 10 * QUEUE_DELAY_TARGET };
        assert_eq!(run(&mut o, &mut t, 10 * QUEUE_DELAY_INTERVAL, bursty), 0);
    }

    #[test]
    fn a_standing_queue_sheds_after_one_interval_only_what_waited_too_long() {
        let mut t = crate::clock::monotonic();
        let mut o = Overload::new(t);
        let over = QUEUE_DELAY_TARGET * 2;
        // The first interval only measures.
        assert_eq!(run(&mut o, &mut t, QUEUE_DELAY_INTERVAL - MS, |_| over), 0);
        // From the next interval on, every request over the target is shed...
        assert!(o.observe(over, t + MS));
        assert!(o.shedding());
        // ...and one that waited less is still admitted.
        assert!(!o.observe(QUEUE_DELAY_TARGET, t + 2 * MS));
    }

    #[test]
    fn shedding_stops_one_interval_after_the_queue_is_gone() {
        let mut t = crate::clock::monotonic();
        let mut o = Overload::new(t);
        let over = QUEUE_DELAY_TARGET * 3;
        run(&mut o, &mut t, 2 * QUEUE_DELAY_INTERVAL, |_| over);
        assert!(o.shedding());
        // The queue drains: an interval whose minimum is under the target ends the shedding.
        run(&mut o, &mut t, QUEUE_DELAY_INTERVAL, |_| MS);
        assert!(!o.observe(over, t + QUEUE_DELAY_INTERVAL));
        assert!(!o.shedding());
    }

    #[test]
    fn sparse_slow_requests_are_not_a_standing_queue() {
        // The reviewer's case: two requests 300 ms apart, each with a 60 ms estimated wait, on a
        // core that is mostly idle: the second must not be shed.
        let t0 = crate::clock::monotonic();
        let mut o = Overload::new(t0);
        let slow = QUEUE_DELAY_TARGET + 10 * MS;
        assert!(!o.observe(slow, t0 + QUEUE_DELAY_INTERVAL * 4));
        assert!(!o.observe(slow, t0 + QUEUE_DELAY_INTERVAL * 5 + 50 * MS));
        // Fewer than the minimum count in an interval, all slow: still no verdict.
        let mut t = t0 + QUEUE_DELAY_INTERVAL * 10;
        let mut o = Overload::new(t);
        for _ in 1..QUEUE_DELAY_SAMPLES_MIN {
            assert!(!o.observe(slow, t));
        }
        t += QUEUE_DELAY_INTERVAL;
        assert!(!o.observe(slow, t));
        assert!(!o.shedding());
    }

    /// Drives `pie` for `span`: every millisecond one admission is decided with sojourn
    /// `sojourn` and one request arrives; returns how many arrivals were shed.
    fn drive(pie: &mut Pie, t: &mut Instant, span: Duration, sojourn: Duration) -> u32 {
        let end = *t + span;
        let mut shed = 0;
        while *t < end {
            pie.record(sojourn, *t);
            shed += u32::from(pie.shed(*t));
            *t += MS;
        }
        shed
    }

    #[test]
    fn sojourns_under_the_target_shed_nothing() {
        let mut t = crate::clock::monotonic();
        let mut pie = Pie::new(t);
        assert_eq!(drive(&mut pie, &mut t, Duration::from_secs(5), SOJOURN_TARGET - MS), 0);
        assert_eq!(pie.share(), 0.0);
    }

    #[test]
    fn a_standing_sojourn_sheds_a_growing_share_and_exactly_that_share() {
        let mut t = crate::clock::monotonic();
        let mut pie = Pie::new(t);
        let standing = 3 * SOJOURN_TARGET;
        drive(&mut pie, &mut t, Duration::from_secs(1), standing);
        let after_1s = pie.share();
        assert!(after_1s > 0.2, "share after 1 s of a standing queue: {after_1s}");
        drive(&mut pie, &mut t, Duration::from_secs(1), standing);
        assert!(pie.share() > after_1s, "the share keeps growing while the queue stands");
        // Between two updates the share is fixed: exactly that share of arrivals is shed,
        // evenly spread.
        let share = pie.share();
        let mut shed = 0u32;
        let n = 10;
        for _ in 0..n {
            shed += u32::from(pie.shed(t));
        }
        let expected = share * f64::from(n);
        assert!((f64::from(shed) - expected).abs() <= 1.0, "{shed} shed of {n} at share {share}");
    }

    #[test]
    fn a_stall_shorter_than_the_burst_allowance_sheds_nothing() {
        let mut t = crate::clock::monotonic();
        let mut pie = Pie::new(t);
        let quiet = MS;
        assert_eq!(drive(&mut pie, &mut t, Duration::from_secs(1), quiet), 0);
        let stall = PIE_BURST_ALLOWANCE - 3 * PIE_UPDATE_INTERVAL;
        assert_eq!(drive(&mut pie, &mut t, stall, 5 * SOJOURN_TARGET), 0);
        assert_eq!(drive(&mut pie, &mut t, Duration::from_secs(3), quiet), 0);
        // A queue that stands longer than the allowance is shed, and so is the next stall
        // while the allowance has not come back (the share is still being lowered).
        assert!(drive(&mut pie, &mut t, Duration::from_secs(1), 5 * SOJOURN_TARGET) > 0);
    }

    #[test]
    fn above_a_tenth_the_share_rises_by_at_most_the_step_cap_per_update() {
        let mut t = crate::clock::monotonic();
        let mut pie = Pie::new(t);
        drive(&mut pie, &mut t, Duration::from_secs(1), 3 * SOJOURN_TARGET);
        assert!(pie.share() >= PIE_STEP_CAPPED_FROM, "share {}", pie.share());
        // A stall ends: sojourns jump from 60 ms to 2 s. Uncapped, β alone would add 2.4 to
        // the share in one update; capped, each update adds at most PIE_STEP_MAX.
        for _ in 0..5 {
            let before = pie.share();
            drive(&mut pie, &mut t, PIE_UPDATE_INTERVAL, Duration::from_secs(2));
            let rise = pie.share() - before;
            assert!(rise > 0.0, "the share still rises");
            assert!(rise <= PIE_STEP_MAX + 1e-12, "rose by {rise} in one update");
        }
    }

    #[test]
    fn under_a_tenth_the_share_rises_without_the_step_cap() {
        let mut t = crate::clock::monotonic();
        let mut pie = Pie::new(t);
        // Two update intervals from the start hold exactly one update (the first is one
        // interval after `new`): the share jumps from 0 by far more than the cap.
        drive(&mut pie, &mut t, 2 * PIE_UPDATE_INTERVAL, Duration::from_secs(2));
        assert!(pie.share() > PIE_STEP_CAPPED_FROM + PIE_STEP_MAX, "share {}", pie.share());
    }

    #[test]
    fn shedding_stops_after_the_sojourn_falls_under_the_target() {
        let mut t = crate::clock::monotonic();
        let mut pie = Pie::new(t);
        drive(&mut pie, &mut t, Duration::from_secs(2), 3 * SOJOURN_TARGET);
        assert!(pie.share() > 0.0);
        drive(&mut pie, &mut t, Duration::from_secs(5), MS);
        assert_eq!(pie.share(), 0.0);
        assert_eq!(drive(&mut pie, &mut t, Duration::from_secs(1), MS), 0);
    }

    #[test]
    fn a_quiet_core_forgets_its_share_but_a_stalled_one_keeps_it() {
        let mut t = crate::clock::monotonic();
        let mut pie = Pie::new(t);
        drive(&mut pie, &mut t, Duration::from_secs(2), 3 * SOJOURN_TARGET);
        let share = pie.share();
        assert!(share > 0.0);
        // A stall shorter than an interval (no decision yet): the share stands.
        t += QUEUE_DELAY_INTERVAL / 2;
        pie.shed(t);
        assert!(pie.share() >= share, "{} < {share}", pie.share());
        // Nothing decided for a whole interval: the evidence is stale.
        t += QUEUE_DELAY_INTERVAL;
        assert!(!pie.shed(t));
        assert_eq!(pie.share(), 0.0);
    }

    #[test]
    fn a_silent_interval_clears_the_verdict() {
        let mut t = crate::clock::monotonic();
        let mut o = Overload::new(t);
        run(&mut o, &mut t, 2 * QUEUE_DELAY_INTERVAL, |_| QUEUE_DELAY_TARGET * 2);
        assert!(o.shedding());
        // Nothing is processed for longer than an interval: the old evidence is stale.
        t += 2 * QUEUE_DELAY_INTERVAL;
        assert!(!o.observe(QUEUE_DELAY_TARGET * 2, t));
        assert!(!o.shedding());
    }
}
