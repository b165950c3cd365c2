//! What a `hookwall loadgen` run measured: per-connection tallies (HdrHistograms in µs and
//! counts by HTTP status and by hookwall's JSON `status` code, SPEC §3), merged at the end,
//! printed as text or JSON, and written as an HdrHistogram percentile distribution (`.hgrm`,
//! the text format of HdrHistogram's `outputPercentileDistribution`, values in milliseconds)
//! that HdrHistogram's plotter reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::answer::Answer;
use crate::limits::LOADGEN_LATENCY_US_MAX;

/// The label for a response whose body has no `status` code of SPEC §3 (e.g. not hookwall).
pub const OTHER: &str = "other";

/// The counts and latencies of one connection (or, merged, of the run).
pub struct Tally {
    /// Latency from the request's *intended* send time to its whole response, µs (open loop:
    /// corrected for coordinated omission; closed loop: equal to `service_us`).
    pub corrected_us: Histogram<u64>,
    /// Latency from the actual send to the whole response, µs.
    pub service_us: Histogram<u64>,
    /// `corrected_us` of the 2xx answers only (e.g. the p99 of what was not shed with 503).
    pub ok_us: Histogram<u64>,
    /// Responses by HTTP status.
    pub by_http: BTreeMap<u16, u64>,
    /// Responses by the JSON `status` code (SPEC §3), or [`OTHER`].
    pub by_status: BTreeMap<&'static str, u64>,
    /// Requests written (answered or not).
    pub sent: u64,
    /// Of `sent`, re-sends of an earlier event (same id and body, signed afresh).
    pub duplicates_sent: u64,
    /// Requests that got no response: connect, IO or framing errors.
    pub errors: u64,
    /// Requests whose response did not arrive within `--timeout`.
    pub timeouts: u64,
    /// Open loop: requests intended before the run ended but never sent, because their
    /// connection was still waiting on an earlier one (a stalled target): not in `sent`, and
    /// a sign that the latency figures understate the stall.
    pub unsent: u64,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally::new()
    }
}

impl Tally {
    /// An empty tally.
    pub fn new() -> Tally {
        Tally {
            corrected_us: histogram(),
            service_us: histogram(),
            ok_us: histogram(),
            by_http: BTreeMap::new(),
            by_status: BTreeMap::new(),
            sent: 0,
            duplicates_sent: 0,
            errors: 0,
            timeouts: 0,
            unsent: 0,
        }
    }

    /// Counts one response: its latencies (µs), HTTP status and SPEC §3 `status` code (from
    /// [`status_code`] of its body).
    pub fn answered(
        &mut self,
        corrected_us: u64,
        service_us: u64,
        http: u16,
        status: &'static str,
    ) {
        self.corrected_us.saturating_record(corrected_us.max(1));
        self.service_us.saturating_record(service_us.max(1));
        if (200..300).contains(&http) {
            self.ok_us.saturating_record(corrected_us.max(1));
        }
        *self.by_http.entry(http).or_default() += 1;
        *self.by_status.entry(status).or_default() += 1;
    }

    /// Responses counted.
    pub fn answered_total(&self) -> u64 {
        self.by_http.values().sum()
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Tally) {
        self.corrected_us.add(&other.corrected_us).expect("tallies share histogram bounds");
        self.service_us.add(&other.service_us).expect("tallies share histogram bounds");
        self.ok_us.add(&other.ok_us).expect("tallies share histogram bounds");
        for (k, v) in &other.by_http {
            *self.by_http.entry(*k).or_default() += v;
        }
        for (k, v) in &other.by_status {
            *self.by_status.entry(k).or_default() += v;
        }
        self.sent += other.sent;
        self.duplicates_sent += other.duplicates_sent;
        self.errors += other.errors;
        self.timeouts += other.timeouts;
        self.unsent += other.unsent;
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LOADGEN_LATENCY_US_MAX, 3)
        .expect("static histogram bounds are valid")
}

/// The SPEC §3 `status` code of a JSON body `{"status": CODE, …}`, or [`OTHER`].
pub fn status_code(body: &[u8]) -> &'static str {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        status: Option<&'a str>,
    }
    let Ok(Body { status: Some(code) }) = serde_json::from_slice::<Body<'_>>(body) else {
        return OTHER;
    };
    Answer::ALL.iter().map(|a| a.code()).find(|c| *c == code).unwrap_or(OTHER)
}

/// How the run was driven, for the report's first line.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The target URL as given.
    pub target: String,
    /// Provider name.
    pub provider: &'static str,
    /// `Some(requests/s)` open loop; `None` closed loop (`--max`).
    pub rate: Option<f64>,
    /// `--connections`.
    pub connections: usize,
    /// `--duplicates`.
    pub duplicates: f64,
    /// Wall time from the first intended send to the last response.
    pub elapsed: Duration,
}

/// Percentiles reported, as (label, quantile).
const PERCENTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99_9", 0.999)];

fn percentiles(h: &Histogram<u64>) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    for (label, q) in PERCENTILES {
        m.insert(label.to_owned(), h.value_at_quantile(q).into());
    }
    m.insert("max".to_owned(), h.max().into());
    m.insert("mean".to_owned(), serde_json::Value::from((h.mean() * 10.0).round() / 10.0));
    m
}

/// The report as one JSON object (`--json`): shape, counts, throughput and latencies in µs.
pub fn json(shape: &Shape, t: &Tally) -> serde_json::Value {
    let secs = shape.elapsed.as_secs_f64().max(1e-9);
    serde_json::json!({
        "target": shape.target,
        "provider": shape.provider,
        "mode": if shape.rate.is_some() { "open" } else { "closed" },
        "rate_per_s": shape.rate,
        "connections": shape.connections,
        "duplicates_ratio": shape.duplicates,
        "elapsed_s": secs,
        "sent": t.sent,
        "duplicates_sent": t.duplicates_sent,
        "answered": t.answered_total(),
        "errors": t.errors,
        "timeouts": t.timeouts,
        "unsent": t.unsent,
        "answered_per_s": t.answered_total() as f64 / secs,
        "latency_us": percentiles(&t.corrected_us),
        "service_latency_us": percentiles(&t.service_us),
        "latency_2xx_us": percentiles(&t.ok_us),
        "http": t.by_http.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect::<serde_json::Map<_, _>>(),
        "status": t.by_status.iter().map(|(k, v)| ((*k).to_owned(), (*v).into())).collect::<serde_json::Map<_, _>>(),
    })
}

/// The report as text for a person.
pub fn text(shape: &Shape, t: &Tally) -> String {
    let secs = shape.elapsed.as_secs_f64().max(1e-9);
    let mut out = String::new();
    let mode = match shape.rate {
        Some(rate) => format!("open loop at {rate}/s"),
        None => "closed loop (--max)".to_owned(),
    };
    let _ = writeln!(
        out,
        "target    {} ({}), {mode}, {} connections, duplicates {}",
        shape.target, shape.provider, shape.connections, shape.duplicates
    );
    let _ = writeln!(
        out,
        "requests  {} sent ({} duplicates), {} answered, {} errors, {} timeouts, {} intended but unsent in {secs:.2} s = {:.1} answered/s",
        t.sent,
        t.duplicates_sent,
        t.answered_total(),
        t.errors,
        t.timeouts,
        t.unsent,
        t.answered_total() as f64 / secs
    );
    for (label, h) in [("latency  ", &t.corrected_us), ("service  ", &t.service_us)] {
        let mut line = label.to_owned();
        for (name, q) in PERCENTILES {
            let _ = write!(line, " {}={}", name.replace('_', "."), us(h.value_at_quantile(q)));
        }
        let _ = writeln!(out, "{line} max={}", us(h.max()));
    }
    let _ = writeln!(
        out,
        "          (latency: from the intended send time, coordinated-omission corrected; service: from the actual send)"
    );
    let http: Vec<String> = t.by_http.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let _ = writeln!(out, "http      {}", http.join("  "));
    let status: Vec<String> = t.by_status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let _ = writeln!(out, "status    {}", status.join("  "));
    out
}

/// Microseconds as text with a unit (`850µs`, `1.25ms`, `2.100s`).
fn us(v: u64) -> String {
    if v < 1_000 {
        format!("{v}µs")
    } else if v < 1_000_000 {
        format!("{:.2}ms", v as f64 / 1e3)
    } else {
        format!("{:.3}s", v as f64 / 1e6)
    }
}

/// `h` (µs) in the HdrHistogram percentile-distribution text format, values in milliseconds,
/// five ticks per half distance (the layout of HdrHistogram's `outputPercentileDistribution`
/// and of wrk2's `--latency` output).
pub fn hgrm(h: &Histogram<u64>) -> String {
    const SCALE: f64 = 1000.0; // µs → ms
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / SCALE;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(out, "{value:12.3} {q:2.12} {total:10} {:14.2}", 1.0 / (1.0 - q));
            } else {
                let _ = writeln!(out, "{value:12.3} {q:2.12} {total:10}");
            }
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        h.mean() / SCALE,
        h.stdev() / SCALE
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        h.max() as f64 / SCALE,
        h.len()
    );
    let sub_buckets = (2 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two();
    let _ = writeln!(out, "#[Buckets = {:12}, SubBuckets     = {:12}]", h.buckets(), sub_buckets);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_come_from_the_closed_list() {
        let cases: [(&[u8], &str); 6] = [
            (br#"{"status":"accepted","id":"evt_1"}"#, "accepted"),
            (br#"{"status":"duplicate"}"#, "duplicate"),
            (br#"{"status":"overloaded"}"#, "overloaded"),
            (br#"{"status":"made_up"}"#, OTHER),
            (b"<html>nginx</html>", OTHER),
            (b"", OTHER),
        ];
        for (body, expect) in cases {
            assert_eq!(status_code(body), expect, "{:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn tallies_merge() {
        let mut a = Tally::new();
        a.sent = 2;
        a.answered(100, 90, 200, status_code(br#"{"status":"accepted"}"#));
        a.answered(300, 90, 200, status_code(br#"{"status":"duplicate"}"#));
        let mut b = Tally::new();
        b.sent = 1;
        b.errors = 1;
        b.answered(0, 0, 503, status_code(br#"{"status":"overloaded"}"#));
        a.merge(&b);
        assert_eq!((a.sent, a.errors, a.answered_total()), (3, 1, 3));
        assert_eq!(a.by_http.get(&200), Some(&2));
        assert_eq!(a.by_status.get("overloaded"), Some(&1));
        assert_eq!(a.corrected_us.len(), 3);
        assert_eq!(a.ok_us.len(), 2, "the 503 is not in the 2xx histogram");
        assert_eq!(a.corrected_us.min(), 1, "a zero latency is recorded as 1 µs");
    }

    #[test]
    fn hgrm_is_the_percentile_distribution_format() {
        let mut h = histogram();
        for v in 1..=1000u64 {
            h.saturating_record(v * 10);
        }
        let text = hgrm(&h);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("       Value     Percentile TotalCount 1/(1-Percentile)"));
        assert_eq!(lines.next(), Some(""));
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(2)
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(rows.len() > 10, "{text}");
        let mut last_q = -1.0;
        for row in &rows {
            let q: f64 = row[1].parse().expect("percentile");
            assert!(q >= last_q, "percentiles ascend: {text}");
            last_q = q;
        }
        let last = rows.last().expect("rows");
        assert_eq!(last.len(), 3, "the 100% row has no 1/(1-p) column");
        assert_eq!(last[2], "1000", "the last row counts every value");
        assert_eq!(last[0], "10.007", "max in ms at histogram precision");
        assert!(
            text.contains("#[Max     =       10.007, Total count    =         1000]"),
            "{text}"
        );
        assert!(
            text.ends_with("#[Buckets =           16, SubBuckets     =         2048]\n"),
            "{text}"
        );
    }
}
