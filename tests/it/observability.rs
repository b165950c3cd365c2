//! Dashboards and alerts (issue 7, SEEDS R26/R27): `config/prometheus/hookwall-alerts.yml`
//! passes `promtool check rules` and its unit tests (each R27 threshold fires just past it and
//! not below), and every query of `config/grafana/hookwall.json` parses as PromQL and names only
//! metrics of the closed list hookwall exposes. promtool comes from Debian's `prometheus`
//! package, which `.ci/run` installs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use hookwall::admin::METRIC_NAMES;

fn config_dir() -> PathBuf {
    crate::harness::repo_root().join("config")
}

/// Runs `promtool args…` in `dir`; panics with its output unless it succeeds.
fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool is installed (.ci/run installs Debian's prometheus package)");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

/// Every `hookwall_…` metric name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("hookwall_") {
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// Whether `name` is an exposed family or a summary's `_sum`/`_count` series.
fn exposed(name: &str) -> bool {
    let family = name.strip_suffix("_sum").or_else(|| name.strip_suffix("_count")).unwrap_or(name);
    METRIC_NAMES.contains(&name) || METRIC_NAMES.contains(&family)
}

/// R27: the alert rules are valid, their unit tests pass, and they name only exposed metrics.
#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = config_dir().join("prometheus");
    let checked = promtool(&dir, &["check", "rules", "hookwall-alerts.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&dir, &["test", "rules", "hookwall-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    let rules = std::fs::read_to_string(dir.join("hookwall-alerts.yml")).expect("reading rules");
    for name in metric_names(&rules) {
        assert!(exposed(&name), "the alert rules name {name}, which hookwall does not expose");
    }
    for alert in [
        "HookwallSignatureFailureRate",
        "HookwallDeadLetters",
        "HookwallInboxBacklog",
        "HookwallNoEvents",
    ] {
        assert!(rules.contains(&format!("alert: {alert}")), "R27 alert {alert} is defined");
    }
}

/// Issue 7: the dashboard has the panels operators need, and each query parses as PromQL
/// (checked by promtool as a recording rule, Grafana variables substituted) and names only
/// exposed metrics.
#[test]
fn dashboard_queries_parse_and_use_exposed_metrics() {
    let path = config_dir().join("grafana/hookwall.json");
    let text = std::fs::read_to_string(&path).expect("reading the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for want in [
        "Ack latency p99 vs provider deadline",
        "Requests by status",
        "Ledger commit latency",
        "Ledger commit batch size",
        "Inbox pending",
        "Dead-letter queue depth",
        "Signature failure rate",
    ] {
        assert!(titles.contains(&want), "panel {want:?} exists; panels: {titles:?}");
    }
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut count = 0;
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("a PromQL expression");
            for name in metric_names(expr) {
                assert!(exposed(&name), "panel {:?} queries unknown {name}", panel["title"]);
            }
            let concrete = expr
                .replace("$__rate_interval", "5m")
                .replace("$instance", ".*")
                .replace("$source", ".*");
            count += 1;
            let quoted = serde_json::to_string(&concrete).expect("a JSON string is YAML");
            rules
                .push_str(&format!("      - record: dashboard:q{count}\n        expr: {quoted}\n"));
        }
    }
    assert!(count >= 12, "every panel has a query ({count})");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("dashboard.yml"), rules).expect("writing the rules");
    promtool(dir.path(), &["check", "rules", "dashboard.yml"]);
}
