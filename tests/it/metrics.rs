//! The admin listener (SPEC §6, §7): `/metrics` after traffic, `/healthz`, `/readyz`; and a
//! small reader of the Prometheus text format used by other tests.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::client;
use crate::harness::{stripe_a, Fixture, Hookwall, Io, FORWARD_TIMEOUT};

/// Sends `HEAD path` with `Connection: close` and returns everything answered, as text.
fn head_request(addr: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connecting to the admin listener");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("a read timeout");
    let request = format!("HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("writing HEAD");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reading the answer to its end");
    answer
}
use crate::sign::{self, Provider};
use crate::sink::Script;

/// The value of the sample `name{labels}` (the label set must match exactly, in any order).
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> =
        labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (series_name, got) = match series.split_once('{') {
            Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}')?)?),
            None => (series, BTreeMap::new()),
        };
        (series_name == name && got == want).then(|| value.trim().parse::<f64>().ok()).flatten()
    })
}

/// `a="x",b="y"` → map (values without escapes, as hookwall's labels are config ids and codes).
fn parse_labels(text: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let (value, after) = after.split_once('"')?;
        out.insert(key.trim().to_owned(), value.to_owned());
        rest = after.strip_prefix(',').unwrap_or(after);
    }
    Some(out)
}

/// Polls `/metrics` until the sample `name{labels}` equals `value` (bounded); returns the text.
pub fn wait_for_sample(
    hw: &Hookwall,
    name: &str,
    labels: &[(&str, &str)],
    value: f64,
    timeout: Duration,
) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = String::from_utf8_lossy(&hw.admin_get("/metrics").body).into_owned();
        let got = sample(&text, name, labels);
        if got == Some(value) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{name}{labels:?} is {got:?}, expected {value} within {timeout:?}; metrics:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }
}

/// R26, SPEC §7: after traffic `/metrics` counts answers by source, provider and status and
/// reports the ack latency summary; `/healthz` and `/readyz` answer 200.
#[test]
fn metrics_count_traffic_and_health_endpoints_answer() {
    let f = Fixture::new(Io::Auto, Script::always(200));
    let s = stripe_a();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = sign::unique_id("evt_metrics");
        let body = sign::body(Provider::Stripe, &id, "metrics");
        assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
        ids.push((id, body));
    }
    assert_eq!(f.hw.deliver(&s, &ids[0].0, &ids[0].1).code(), "duplicate");
    let h = sign::headers(
        Provider::Stripe,
        sign::WRONG_SECRET,
        &ids[0].0,
        sign::now_unix_s(),
        &ids[0].1,
    );
    assert_eq!(f.hw.post(s.id, &h, &ids[0].1).code(), "signature_invalid");
    for (id, _) in &ids {
        f.sink.wait_for_key(&s.key(id), 1, FORWARD_TIMEOUT);
    }

    let metrics = f.hw.admin_get("/metrics");
    assert_eq!(metrics.status, 200, "/metrics: {metrics}");
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let requests = |status: &str| {
        sample(
            &text,
            "hookwall_ingress_requests_total",
            &[("source", "stripe-a"), ("provider", "stripe"), ("status", status)],
        )
    };
    assert_eq!(requests("accepted"), Some(3.0), "accepted count; metrics:\n{text}");
    assert_eq!(requests("duplicate"), Some(1.0), "duplicate count; metrics:\n{text}");
    assert_eq!(
        requests("signature_invalid"),
        Some(1.0),
        "signature_invalid count; metrics:\n{text}"
    );
    let p99 = sample(
        &text,
        "hookwall_ingress_ack_latency_seconds",
        &[("source", "stripe-a"), ("quantile", "0.99")],
    );
    let p99 = p99.unwrap_or_else(|| panic!("no ack latency p99 for stripe-a; metrics:\n{text}"));
    assert!(p99.is_finite() && p99 > 0.0 && p99 < 10.0, "ack latency p99 {p99} s");

    wait_for_sample(
        &f.hw,
        "hookwall_dispatch_attempts_total",
        &[("destination", "sink"), ("outcome", "delivered")],
        3.0,
        FORWARD_TIMEOUT,
    );
    assert_eq!(f.hw.admin_get("/healthz").status, 200, "/healthz");
    assert_eq!(f.hw.admin_get("/readyz").status, 200, "/readyz");
    // RFC 9110 §9.3.2: HEAD answers as GET would, without the body (uptime checkers use it).
    for path in ["/healthz", "/readyz", "/metrics"] {
        let head = head_request(f.hw.admin, path);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "HEAD {path}: {head}");
        let (_, body) = head.split_once("\r\n\r\n").expect("a whole head");
        assert_eq!(body, "", "HEAD {path} has no body: {head}");
    }
    let post = client::send_one(f.hw.admin, "POST", "/healthz", &[], b"");
    assert_eq!(post.status, 405, "POST /healthz: {post}");
    assert_eq!(post.header("allow"), Some("GET, HEAD"), "POST /healthz: {post}");
    let events = sample(
        &text,
        "hookwall_ingress_events_total",
        &[("source", "stripe-a"), ("event_type", "_other")],
    );
    assert_eq!(events, Some(4.0), "3 accepted + 1 duplicate, no allow-list; metrics:\n{text}");
    let deadline =
        sample(&text, "hookwall_ingress_ack_deadline_seconds", &[("source", "stripe-a")]);
    assert_eq!(deadline, Some(10.0), "Stripe's default ack deadline; metrics:\n{text}");
}

/// R26: events are counted by type when the source has an allow-list (the label values come
/// from the config, never from the request): listed types by name, others as `_other`.
#[test]
fn events_are_counted_by_allow_listed_type() {
    let f = Fixture::with(Io::Auto, Script::always(200), |setup| {
        let stripe = setup.sources.iter_mut().find(|s| s.id == "stripe-a").expect("stripe-a");
        stripe.event_types = vec!["charge.succeeded", "invoice.paid"];
    });
    let s = stripe_a();
    for _ in 0..2 {
        let id = sign::unique_id("evt_typed");
        let body = sign::body(Provider::Stripe, &id, "typed");
        assert_eq!(f.hw.deliver(&s, &id, &body).code(), "accepted");
    }
    let text = String::from_utf8_lossy(&f.hw.admin_get("/metrics").body).into_owned();
    let count = |t: &str| {
        let labels = [("source", "stripe-a"), ("event_type", t)];
        sample(&text, "hookwall_ingress_events_total", &labels)
    };
    assert_eq!(count("invoice.paid"), Some(2.0), "metrics:\n{text}");
    assert_eq!(count("charge.succeeded"), Some(0.0), "metrics:\n{text}");
    assert_eq!(count("_other"), Some(0.0), "metrics:\n{text}");
}
