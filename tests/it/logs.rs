//! R28 and checklist item 16: a full run at debug level, in the JSON and the logfmt log
//! formats, never writes a secret, a signature or a payload to the log — whatever the request's
//! fate (accepted, duplicate, conflict, bad signature, stale, schema reject, forwarded) — and
//! every line is well-formed in the chosen format.

use crate::harness::{github_a, standard_a, stripe_a, Fixture, Io, Source};
use crate::sign::{self, Provider};
use crate::sink::Script;

/// A body whose `note` is a marker that must never appear in the log.
fn marked(provider: Provider, id: &str, marker: &str) -> Vec<u8> {
    sign::body(provider, id, marker)
}

#[test]
fn a_debug_run_logs_no_secret_signature_or_payload_json() {
    let log = debug_run("json");
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "--log-format json writes one JSON object per line: {line}"
        );
    }
}

#[test]
fn a_debug_run_logs_no_secret_signature_or_payload_logfmt() {
    let log = debug_run("logfmt");
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            line.starts_with("ts=") && line.contains(" level=") && logfmt_pairs(line),
            "--log-format logfmt writes key=value lines: {line}"
        );
    }
}

/// Whether `line` is a sequence of `key=value` pairs, values bare or double-quoted (with
/// backslash escapes), separated by single spaces.
fn logfmt_pairs(line: &str) -> bool {
    let mut rest = line;
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else { return false };
        let key = &rest[..eq];
        if key.is_empty() || key.contains(' ') || key.contains('"') {
            return false;
        }
        rest = &rest[eq + 1..];
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut escaped = false;
            let Some(end) = quoted.char_indices().find_map(|(i, c)| {
                let closes = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closes.then_some(i)
            }) else {
                return false;
            };
            rest = &quoted[end + 1..];
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            if rest[..end].contains('"') {
                return false;
            }
            rest = &rest[end..];
        }
        match rest.strip_prefix(' ') {
            Some(next) => rest = next,
            None if rest.is_empty() => {}
            None => return false,
        }
    }
    true
}

/// A full debug-level run in `format` with every kind of outcome; returns its log after
/// checking that no secret, signature or payload marker is in it.
fn debug_run(format: &str) -> String {
    let f = Fixture::with(Io::Auto, Script::always(200), |s| {
        s.env.push(("HOOKWALL_LOG".to_owned(), "debug".to_owned()));
        s.serve_args = vec!["--log-format".to_owned(), format.to_owned()];
    });
    let sources: Vec<(Source, Provider)> = vec![
        (stripe_a(), Provider::Stripe),
        (github_a(), Provider::Github),
        (standard_a(), Provider::Standard),
    ];
    let mut forbidden: Vec<String> = Vec::new();
    for (n, (source, provider)) in sources.iter().enumerate() {
        forbidden.extend(source.secrets.iter().map(|(_, secret)| (*secret).to_owned()));
        let id = sign::unique_id("evt_log");
        let marker = format!("payload-marker-{n}-{}", sign::unique_id("m"));
        let body = marked(*provider, &id, &marker);
        let headers = sign::headers(*provider, source.secrets[0].1, &id, sign::now_unix_s(), &body);
        forbidden.push(marker.clone());
        forbidden.extend(
            headers
                .iter()
                .filter(|(name, _)| name.to_ascii_lowercase().contains("signature"))
                .map(|(_, value)| value.clone()),
        );
        let path = source.id;
        assert_eq!(f.hw.post(path, &headers, &body).answer(), (200, "accepted".to_owned()));
        assert_eq!(f.hw.post(path, &headers, &body).answer(), (200, "duplicate".to_owned()));
        // Same id, other bytes: a conflict.
        let other = marked(*provider, &id, &format!("{marker}-changed"));
        let h2 = sign::headers(*provider, source.secrets[0].1, &id, sign::now_unix_s(), &other);
        assert_eq!(f.hw.post(path, &h2, &other).status, 409);
        // Signed with a wrong secret: 401.
        let wrong =
            sign::headers(*provider, "whsec_d3JvbmctbG9nLXRlc3Q=", &id, sign::now_unix_s(), &body);
        forbidden.extend(
            wrong
                .iter()
                .filter(|(n, _)| n.to_ascii_lowercase().contains("signature"))
                .map(|(_, v)| v.clone()),
        );
        assert_eq!(f.hw.post(path, &wrong, &body).status, 401);
    }
    // A schema reject: authentic, not JSON.
    let source = stripe_a();
    let junk = format!("not json {}", sign::unique_id("junk-marker")).into_bytes();
    let headers =
        sign::headers(Provider::Stripe, source.secrets[0].1, "x", sign::now_unix_s(), &junk);
    forbidden.push(String::from_utf8(junk.clone()).expect("ascii"));
    assert_eq!(f.hw.post(source.id, &headers, &junk).status, 400);
    f.flush_with_marker();

    assert!(forbidden.len() >= 13, "secrets, signatures and markers were collected");
    let log = f.hw.stderr();
    assert!(log.lines().count() > 10, "a debug run logs something:\n{log}");
    for needle in &forbidden {
        assert!(!log.contains(needle.as_str()), "the log contains {needle:?}");
    }
    log
}
