//! Admin tests: the exposition parses line by line against the closed list of names, and the
//! routes answer over a real socket on `127.0.0.1:0`.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::answer::Answer;
use crate::config::{Config, Live};
use crate::metrics::{AttemptOutcome, CoreStats, DispatchStats, LedgerStats, Metrics};

/// Two sources (stripe → billing-api, github → ci), loaded through the real config loader.
fn config() -> Config {
    let text = r#"
        [server]
        cores = 2
        [[source]]
        id = "stripe-billing"
        tenant = "acme"
        provider = "stripe"
        secrets = [{ id = "k1", value = "whsec_test" }]
        destination = "billing-api"
        [[source]]
        id = "gh"
        tenant = "acme"
        provider = "github"
        secrets = [{ id = "k1", value = "test" }]
        destination = "ci"
        [[destination]]
        id = "billing-api"
        url = "http://127.0.0.1:3000/hooks"
        [[destination]]
        id = "ci"
        url = "http://127.0.0.1:3000/ci"
    "#;
    Config::from_toml_str(text, std::path::Path::new("test.toml"), &|_| None)
        .expect("the test config is valid")
}

/// Metrics of two cores with a few known counts recorded.
fn metrics() -> Metrics {
    let cores: Vec<Arc<CoreStats>> = (0..2).map(|_| Arc::new(CoreStats::new(2))).collect();
    cores[0].count(Some(0), Answer::Accepted);
    cores[1].count(Some(0), Answer::Accepted);
    cores[1].count(Some(1), Answer::Stale);
    cores[0].count(None, Answer::UnknownSource);
    cores[0].record_ack_us(0, 1500);
    cores[1].record_ack_us(0, 2500);
    cores[0].connections_open.store(3, Ordering::Relaxed);
    cores[1].connections_open.store(4, Ordering::Relaxed);
    let m = Metrics {
        reloads: Default::default(),
        cores,
        ledger: LedgerStats::new(2),
        dispatch: DispatchStats::new(2),
    };
    m.ledger.commit_us.lock().expect("test lock").saturating_record(800);
    m.ledger.batch_events.lock().expect("test lock").saturating_record(12);
    m.ledger.inbox_pending[1].store(5, Ordering::Relaxed);
    m.ledger.dlq_depth[0].store(2, Ordering::Relaxed);
    m.dispatch.count(1, AttemptOutcome::Retry);
    m.dispatch.delivery_latency_us[0].lock().expect("test lock").saturating_record(2_000_000);
    m
}

/// One sample line: `name{labels} value`, the name from the closed list (summaries may add
/// `_sum`/`_count`); returns (name, labels text, value).
fn parse_sample(line: &str) -> (String, String, f64) {
    let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
    let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}').expect("labels close").to_owned()),
        None => (series, String::new()),
    };
    let family = name.strip_suffix("_sum").or_else(|| name.strip_suffix("_count")).unwrap_or(name);
    assert!(
        METRIC_NAMES.contains(&name) || METRIC_NAMES.contains(&family),
        "{name} is not in the closed list"
    );
    for pair in labels.split(',').filter(|p| !p.is_empty()) {
        let (key, val) = pair.split_once('=').expect("label is key=value");
        assert!(key.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "label key {key}");
        assert!(val.starts_with('"') && val.ends_with('"'), "label value {val} is quoted");
    }
    (name.to_owned(), labels, value)
}

fn samples(text: &str) -> Vec<(String, String, f64)> {
    let mut families = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a kind");
            assert!(matches!(kind, "counter" | "gauge" | "summary"), "{kind}");
            families.push(name.to_owned());
        } else if !line.starts_with("# HELP ") {
            out.push(parse_sample(line));
        }
    }
    assert_eq!(families, METRIC_NAMES, "every family once, in order");
    out
}

fn value(all: &[(String, String, f64)], name: &str, labels: &str) -> f64 {
    let found = all.iter().find(|(n, l, _)| n == name && l == labels);
    found.unwrap_or_else(|| panic!("no sample {name}{{{labels}}}")).2
}

#[test]
fn exposition_parses_and_sums_over_cores() {
    let all = samples(&render_metrics(&config(), &metrics()));
    let req = "hookwall_ingress_requests_total";
    let accepted = r#"source="stripe-billing",provider="stripe",status="accepted""#;
    assert_eq!(value(&all, req, accepted), 2.0);
    assert_eq!(value(&all, req, r#"source="gh",provider="github",status="stale""#), 1.0);
    let unknown = r#"source="_unknown",provider="_unknown",status="unknown_source""#;
    assert_eq!(value(&all, req, unknown), 1.0);
    assert_eq!(all.iter().filter(|(n, _, _)| n == req).count(), 3 * Answer::ALL.len());
    let ack = "hookwall_ingress_ack_latency_seconds";
    assert_eq!(value(&all, &format!("{ack}_count"), r#"source="stripe-billing""#), 2.0);
    let p99 = value(&all, ack, r#"source="stripe-billing",quantile="0.99""#);
    assert!((p99 - 0.0025).abs() < 0.00001, "p99 {p99}");
    let sum = value(&all, &format!("{ack}_sum"), r#"source="stripe-billing""#);
    assert!((sum - 0.004).abs() < 0.00001, "sum {sum}");
    assert!(value(&all, ack, r#"source="gh",quantile="0.5""#).is_nan());
    assert_eq!(value(&all, "hookwall_ingress_connections_open", ""), 7.0);
    assert_eq!(value(&all, "hookwall_ledger_commit_seconds_count", ""), 1.0);
    assert_eq!(value(&all, "hookwall_ledger_commit_batch_events", r#"quantile="0.5""#), 12.0);
    let attempts = "hookwall_dispatch_attempts_total";
    assert_eq!(value(&all, attempts, r#"destination="ci",outcome="retry""#), 1.0);
    assert_eq!(value(&all, attempts, r#"destination="billing-api",outcome="delivered""#), 0.0);
    let delivery = "hookwall_dispatch_delivery_latency_seconds";
    let median = value(&all, delivery, r#"destination="billing-api",quantile="0.5""#);
    assert!((median - 2.0).abs() < 0.01, "median {median}");
    assert_eq!(value(&all, "hookwall_inbox_pending", r#"source="gh""#), 5.0);
    assert_eq!(value(&all, "hookwall_dlq_depth", r#"source="stripe-billing""#), 2.0);
}

#[test]
fn label_values_are_escaped() {
    let mut cfg = config();
    cfg.sources[0].id = "we\"ird\\id".to_owned();
    let text = render_metrics(&cfg, &metrics());
    assert!(text.contains(r#"hookwall_dlq_depth{source="we\"ird\\id"} 2"#), "{text}");
}

// ---------------------------------------------------------------- over a socket

struct Server {
    addr: SocketAddr,
    state: Arc<AdminState>,
    handle: AdminHandle,
}

fn server(ledger_ok: bool) -> Server {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let state = Arc::new(AdminState {
        config: Arc::new(Live::new(Arc::new(config()))),
        metrics: Arc::new(metrics()),
        ledger_healthy: Box::new(move || ledger_ok),
        operator: None,
        listeners_bound: AtomicBool::new(false),
    });
    let handle = spawn(listener, Arc::clone(&state)).expect("admin starts");
    Server { addr, state, handle }
}

/// Sends one request and returns (status, head, body).
fn get(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let request = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status");
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[test]
fn health_readiness_and_metrics_over_a_socket() {
    let s = server(true);
    let (status, head, body) = get(s.addr, "GET", "/healthz");
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    assert!(head.contains("content-type: application/json"), "{head}");
    let (status, _, body) = get(s.addr, "GET", "/readyz");
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"status":"not_ready","ledger":true,"listeners":false}"#)
    );
    s.state.listeners_bound.store(true, Ordering::Release);
    let (status, _, body) = get(s.addr, "GET", "/readyz");
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ready"}"#));
    let (status, head, body) = get(s.addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/plain; version=0.0.4"), "{head}");
    assert_eq!(samples(&body).len(), samples(&render_metrics(&config(), &metrics())).len());
    s.handle.shutdown();
}

#[test]
fn ledger_down_is_not_ready_and_other_routes_are_refused() {
    let s = server(false);
    s.state.listeners_bound.store(true, Ordering::Release);
    let (status, _, body) = get(s.addr, "GET", "/readyz");
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"status":"not_ready","ledger":false,"listeners":true}"#)
    );
    let (status, head, _) = get(s.addr, "POST", "/metrics");
    assert_eq!(status, 405);
    assert!(head.contains("allow: get"), "{head}");
    // No admin.token_file: every /admin/* route is refused with a reason.
    let (status, _, body) = get(s.addr, "POST", "/admin/events/a%2Fb%2Fc/replay");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains(r#""status":"admin_disabled""#), "{body}");
    assert!(body.contains("admin.token_file"), "{body}");
    assert_eq!(get(s.addr, "GET", "/nope").0, 404);
    s.handle.shutdown();
}
