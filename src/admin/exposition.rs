//! Prometheus text exposition (format 0.0.4) of every hookwall metric, from one closed list of
//! names (SPEC §7, R26). Written by hand: the per-core counters and HdrHistograms are summed and
//! merged here at scrape time, and no maintained crate encodes a summary from quantiles computed
//! outside it. Labels come only from config ids and fixed codes (R28), and are still escaped.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::answer::Answer;
use crate::config::Config;
use crate::dispatch::Controls;
use crate::ingress::gate::Refusal;
use crate::metrics::{latency_histogram, AttemptOutcome, Metrics};

/// One metric family of the closed list.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const REQUESTS: Family = Family {
    name: "hookwall_ingress_requests_total",
    kind: "counter",
    help: "Webhook deliveries answered, by source, provider and status code (SPEC 3).",
};
const EVENTS: Family = Family {
    name: "hookwall_ingress_events_total",
    kind: "counter",
    help: "Authentic, well-formed events received (before the ledger decides accepted or duplicate), by source and event type; types outside the source's allow-list at start-up count as _other (R26).",
};
const ACK_DEADLINE: Family = Family {
    name: "hookwall_ingress_ack_deadline_seconds",
    kind: "gauge",
    help: "The source's acknowledgment deadline (ack_deadline; default from the provider table), seconds: compare the ack latency with it.",
};
const ACK_LATENCY: Family = Family {
    name: "hookwall_ingress_ack_latency_seconds",
    kind: "summary",
    help: "Request fully read to response written, seconds.",
};
const SHED: Family = Family {
    name: "hookwall_ingress_shed_total",
    kind: "counter",
    help: "Deliveries answered 503 overloaded because their estimated commit wait exceeded half the source's ack deadline, because they waited over 50 ms for a saturated core, or as the share shed while admissions' arrival-to-decision time beyond two commits stands over 20 ms (RFC 8033's controller), by source.",
};
const DEADLINE_MISSES: Family = Family {
    name: "hookwall_ingress_deadline_misses_total",
    kind: "counter",
    help: "Answers written later than the source's ack deadline after the request was read, by source.",
};
const CONNECTIONS: Family = Family {
    name: "hookwall_ingress_connections_open",
    kind: "gauge",
    help: "Open ingress connections over all cores.",
};
const REFUSED: Family = Family {
    name: "hookwall_ingress_connections_refused_total",
    kind: "counter",
    help: "Connections refused at a connection limit (answered 503 overloaded, or closed unanswered while the core holds its most refused connections), by the limit: connections_max, connections_per_core_max or connections_per_ip_max.",
};
const COMMIT: Family = Family {
    name: "hookwall_ledger_commit_seconds",
    kind: "summary",
    help: "Duration of one ledger write batch (a group commit: fsync'd when it holds admissions or operator actions and ledger.sync is on), seconds.",
};
const BATCH: Family = Family {
    name: "hookwall_ledger_commit_batch_events",
    kind: "summary",
    help: "Admissions and settlements per committed ledger write batch.",
};
const ATTEMPTS: Family = Family {
    name: "hookwall_dispatch_attempts_total",
    kind: "counter",
    help: "Attempts to deliver events, by destination and outcome (delivered, retry, dead; not_attempted: no descriptor for the connection, tried again).",
};
const DELIVERY_LATENCY: Family = Family {
    name: "hookwall_dispatch_delivery_latency_seconds",
    kind: "summary",
    help: "Event accepted to delivered, seconds.",
};
const INBOX_PENDING: Family = Family {
    name: "hookwall_inbox_pending",
    kind: "gauge",
    help: "Admitted events not yet settled, by source.",
};
const DLQ_DEPTH: Family =
    Family { name: "hookwall_dlq_depth", kind: "gauge", help: "Dead-lettered events, by source." };
const RELOADS: Family = Family {
    name: "hookwall_config_reloads_total",
    kind: "counter",
    help: "Configuration reloads (SIGHUP), by outcome: applied or rejected.",
};
const RELOAD_OK: Family = Family {
    name: "hookwall_config_last_reload_successful",
    kind: "gauge",
    help: "1 unless the last reload was rejected (then the file on disk is not what runs).",
};

/// Every metric family hookwall exposes, in exposition order: the closed list (STYLE).
pub const METRIC_NAMES: [&str; 16] = [
    REQUESTS.name,
    EVENTS.name,
    ACK_LATENCY.name,
    ACK_DEADLINE.name,
    SHED.name,
    DEADLINE_MISSES.name,
    CONNECTIONS.name,
    REFUSED.name,
    COMMIT.name,
    BATCH.name,
    ATTEMPTS.name,
    DELIVERY_LATENCY.name,
    INBOX_PENDING.name,
    DLQ_DEPTH.name,
    RELOADS.name,
    RELOAD_OK.name,
];

const PAUSED: Family = Family {
    name: "hookwall_dispatch_paused",
    kind: "gauge",
    help: "1 while the destination is paused by an operator or by destination.paused.",
};
const BREAKER_OPEN: Family = Family {
    name: "hookwall_dispatch_breaker_open",
    kind: "gauge",
    help: "1 while the destination's circuit breaker is open (one probe attempt at a time).",
};

/// The destination-switch families, rendered by [`render_controls`] where the dispatcher's
/// [`Controls`] exist (the running appliance).
pub const CONTROL_METRIC_NAMES: [&str; 2] = [PAUSED.name, BREAKER_OPEN.name];

/// Renders the families of [`CONTROL_METRIC_NAMES`]: per destination, whether it is paused and
/// whether its circuit breaker is open (0 or 1).
pub fn render_controls(config: &Config, controls: &Controls) -> String {
    let mut out = Out(String::with_capacity(512));
    let switches: [(&Family, &dyn Fn(usize) -> bool); 2] =
        [(&PAUSED, &|d| controls.paused(d)), (&BREAKER_OPEN, &|d| controls.breaker_open(d))];
    for (family, on) in switches {
        out.family(family);
        for (d, dest) in config.destinations.iter().enumerate() {
            out.sample(family.name, &[("destination", &dest.id)], if on(d) { "1" } else { "0" });
        }
    }
    out.0
}

/// Quantiles reported by every summary (SPEC §7).
const QUANTILES: [(f64, &str); 4] = [(0.5, "0.5"), (0.9, "0.9"), (0.99, "0.99"), (0.999, "0.999")];

/// Label value of the slot counting requests that matched no source.
const UNKNOWN: &str = "_unknown";

/// Renders every metric of [`METRIC_NAMES`] in the Prometheus text format 0.0.4: a `# HELP` and
/// `# TYPE` line per family, then `name{labels} value` samples. Latency summaries are in
/// seconds (recorded in µs); summary quantiles of an empty histogram are `NaN`.
pub fn render_metrics(config: &Config, metrics: &Metrics) -> String {
    let mut out = Out(String::with_capacity(16 * 1024));
    requests(&mut out, config, metrics);
    events(&mut out, config, metrics);
    ack_latency(&mut out, config, metrics);
    ack_deadline(&mut out, config);
    deadlines(&mut out, config, metrics);
    out.family(&CONNECTIONS);
    let open: i64 = metrics.cores.iter().map(|c| c.connections_open.load(relaxed())).sum();
    out.sample(CONNECTIONS.name, &[], &open.to_string());
    out.family(&REFUSED);
    for (i, reason) in Refusal::ALL.iter().enumerate() {
        let total: u64 =
            metrics.cores.iter().map(|c| c.connections_refused[i].load(relaxed())).sum();
        out.sample(REFUSED.name, &[("reason", reason.code())], &total.to_string());
    }
    ledger(&mut out, metrics);
    dispatch(&mut out, config, metrics);
    gauges(&mut out, config, metrics);
    reloads(&mut out, metrics);
    out.0
}

fn events(out: &mut Out, config: &Config, metrics: &Metrics) {
    out.family(&EVENTS);
    for (i, source) in config.sources.iter().enumerate() {
        let Some((first, rest)) = metrics.cores.split_first() else { return };
        let mut totals = first.events.by_type(i);
        for core in rest {
            for (total, (_, n)) in totals.iter_mut().zip(core.events.by_type(i)) {
                total.1 += n;
            }
        }
        for (event_type, total) in totals {
            let labels = [("source", source.id.as_str()), ("event_type", event_type)];
            out.sample(EVENTS.name, &labels, &total.to_string());
        }
    }
}

fn reloads(out: &mut Out, metrics: &Metrics) {
    let r = &metrics.reloads;
    out.family(&RELOADS);
    for (outcome, counter) in [("applied", &r.applied), ("rejected", &r.rejected)] {
        let value = counter.load(relaxed()).to_string();
        out.sample(RELOADS.name, &[("outcome", outcome)], &value);
    }
    out.family(&RELOAD_OK);
    let ok = if r.last_rejected.load(relaxed()) { "0" } else { "1" };
    out.sample(RELOAD_OK.name, &[], ok);
}

fn relaxed() -> std::sync::atomic::Ordering {
    std::sync::atomic::Ordering::Relaxed
}

fn requests(out: &mut Out, config: &Config, metrics: &Metrics) {
    out.family(&REQUESTS);
    let known =
        config.sources.iter().enumerate().map(|(i, s)| (Some(i), s.id.as_str(), s.provider.name()));
    for (slot, source, provider) in known.chain([(None, UNKNOWN, UNKNOWN)]) {
        for answer in Answer::ALL {
            let total: u64 = metrics.cores.iter().map(|c| c.requests(slot, answer)).sum();
            let labels = [("source", source), ("provider", provider), ("status", answer.code())];
            out.sample(REQUESTS.name, &labels, &total.to_string());
        }
    }
}

fn ack_deadline(out: &mut Out, config: &Config) {
    out.family(&ACK_DEADLINE);
    for source in &config.sources {
        let seconds = float(source.ack_deadline.as_secs_f64());
        out.sample(ACK_DEADLINE.name, &[("source", &source.id)], &seconds);
    }
}

fn ack_latency(out: &mut Out, config: &Config, metrics: &Metrics) {
    out.family(&ACK_LATENCY);
    for (i, source) in config.sources.iter().enumerate() {
        let mut merged = latency_histogram();
        for core in &metrics.cores {
            core.merge_ack_into(i, &mut merged);
        }
        out.summary(ACK_LATENCY.name, &[("source", &source.id)], &merged, MICROS);
    }
}

fn deadlines(out: &mut Out, config: &Config, metrics: &Metrics) {
    let totals: Vec<(u64, u64)> = (0..config.sources.len())
        .map(|i| {
            metrics
                .cores
                .iter()
                .map(|c| c.shed_and_misses(i))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
        .collect();
    out.family(&SHED);
    for (source, (shed, _)) in config.sources.iter().zip(&totals) {
        out.sample(SHED.name, &[("source", &source.id)], &shed.to_string());
    }
    out.family(&DEADLINE_MISSES);
    for (source, (_, misses)) in config.sources.iter().zip(&totals) {
        out.sample(DEADLINE_MISSES.name, &[("source", &source.id)], &misses.to_string());
    }
}

fn ledger(out: &mut Out, metrics: &Metrics) {
    out.family(&COMMIT);
    let commit = metrics.ledger.commit_us.lock().expect("histogram lock is never poisoned");
    out.summary(COMMIT.name, &[], &commit, MICROS);
    drop(commit);
    out.family(&BATCH);
    let batch = metrics.ledger.batch_events.lock().expect("histogram lock is never poisoned");
    out.summary(BATCH.name, &[], &batch, 1.0);
}

fn dispatch(out: &mut Out, config: &Config, metrics: &Metrics) {
    out.family(&ATTEMPTS);
    for (i, dest) in config.destinations.iter().enumerate() {
        for outcome in AttemptOutcome::ALL {
            let count = metrics.dispatch.attempts(i, outcome);
            let labels = [("destination", dest.id.as_str()), ("outcome", outcome.code())];
            out.sample(ATTEMPTS.name, &labels, &count.to_string());
        }
    }
    out.family(&DELIVERY_LATENCY);
    for (i, dest) in config.destinations.iter().enumerate() {
        if let Some(h) = metrics.dispatch.delivery_latency_us.get(i) {
            let h = h.lock().expect("histogram lock is never poisoned");
            out.summary(DELIVERY_LATENCY.name, &[("destination", &dest.id)], &h, MICROS);
        }
    }
}

fn gauges(out: &mut Out, config: &Config, metrics: &Metrics) {
    let per_source =
        [(&INBOX_PENDING, &metrics.ledger.inbox_pending), (&DLQ_DEPTH, &metrics.ledger.dlq_depth)];
    for (family, values) in per_source {
        out.family(family);
        for (i, source) in config.sources.iter().enumerate() {
            let value = values.get(i).map_or(0, |v| v.load(relaxed()));
            out.sample(family.name, &[("source", &source.id)], &value.to_string());
        }
    }
}

/// Divisor turning recorded microseconds into seconds.
const MICROS: f64 = 1_000_000.0;

/// The exposition being written (writing to a `String` cannot fail).
struct Out(String);

impl Out {
    fn family(&mut self, f: &Family) {
        let _ = writeln!(self.0, "# HELP {} {}", f.name, escape_help(f.help));
        let _ = writeln!(self.0, "# TYPE {} {}", f.name, f.kind);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: &str) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                let comma = if i == 0 { "" } else { "," };
                let _ = write!(self.0, "{comma}{key}=\"{}\"", escape_label(val));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    /// Quantile samples, `_sum` (mean × count) and `_count` of `h`, values divided by `unit`.
    fn summary(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram<u64>, unit: f64) {
        let count = h.len();
        for (q, q_label) in QUANTILES {
            let mut with_q = labels.to_vec();
            with_q.push(("quantile", q_label));
            let value = if count == 0 { f64::NAN } else { h.value_at_quantile(q) as f64 / unit };
            self.sample(name, &with_q, &float(value));
        }
        let sum = h.mean() * count as f64 / unit;
        self.sample(&format!("{name}_sum"), labels, &float(sum));
        self.sample(&format!("{name}_count"), labels, &count.to_string());
    }
}

/// Prometheus float spelling (`NaN`, `+Inf`, plain decimals otherwise).
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

/// Label values escape `\`, `"` and newline (text format 0.0.4).
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// HELP text escapes `\` and newline.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_the_text_format() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(escape_help("x\\y\nz"), "x\\\\y\\nz");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(0.000_25), "0.00025");
        assert_eq!(float(3.0), "3");
    }
}
