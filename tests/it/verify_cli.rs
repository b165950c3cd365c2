//! `hookwall verify` (SPEC §1) through the real binary: exit 0 authentic and fresh, 1 not
//! (the reason on stderr), 2 bad usage; the body comes on stdin.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

const GH_SIG: &str =
    "X-Hub-Signature-256: sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

fn verify(args: &[&str], body: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .arg("verify")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running hookwall verify");
    // On bad usage the binary may exit before reading stdin: a broken pipe is not a failure.
    if let Err(e) = child.stdin.take().expect("stdin").write_all(body) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "writing the body: {e}");
    }
    child.wait_with_output().expect("hookwall verify finishes")
}

fn check(args: &[&str], body: &[u8], code: i32, stream_has: &str) {
    let out = verify(args, body);
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(code), "{args:?}: {text}");
    assert!(text.contains(stream_has), "{args:?}: {text:?} lacks {stream_has:?}");
}

#[test]
fn verify_exit_codes_follow_spec() {
    let secret = "It's a Secret to Everybody";
    let body = b"Hello, World!";
    check(&["--provider", "github", "--secret", secret, "--header", GH_SIG], body, 0, "authentic");
    check(
        &["--provider", "github", "--secret", "x", "--header", GH_SIG],
        body,
        1,
        "signature_invalid",
    );
    check(&["--provider", "github", "--secret", secret], body, 1, "signature_missing");
    check(&["--provider", "github", "--secret", secret, "--header", "bad"], body, 2, "--header");
    // Not a header name, or a value with a line break: bad usage, the line not echoed.
    for line in [": s3cr3t", "Bad Name: s3cr3t", "X\u{1}: s3cr3t", "X: s3\ncr3t", "X: s3\rcr3t"] {
        let out = verify(&["--provider", "github", "--secret", secret, "--header", line], body);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{line:?}: {err}");
        assert!(err.contains("--header number 1"), "{line:?}: {err}");
        assert!(!err.contains("cr3t"), "{line:?} echoed: {err}");
    }
    check(&["--provider", "nope", "--secret", secret], body, 2, "unsupported provider");
    check(&["--secret", secret], body, 2, "--provider");
    // Stripe: fresh at its own time, stale 301 s later.
    let t = "1700000000";
    let stripe_secret = "whsec_offline";
    let payload = br#"{"id":"evt_1","type":"invoice.paid"}"#;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, stripe_secret.as_bytes());
    let mut signed = t.as_bytes().to_vec();
    signed.push(b'.');
    signed.extend_from_slice(payload);
    let sig = hex::encode(ring::hmac::sign(&key, &signed).as_ref());
    let header = format!("Stripe-Signature: t={t},v1={sig}");
    let args = ["--provider", "stripe", "--secret", stripe_secret, "--header", &header];
    let at = |s: &'static str| [&args[..], &["--at", s]].concat();
    check(&at("1700000000"), payload, 0, "event id \"evt_1\"");
    check(&at("1700000301"), payload, 1, "stale");
}

/// Runs `hookwall verify --provider P --secret SECRET --at AT` with the headers of a delivery
/// of `signed` as event `evt_cli_1` signed at `T_CLI` by `signer`, `body` on stdin.
fn check_signed(
    provider: crate::sign::Provider,
    (secret, signer): (&str, &str),
    (signed, body): (&[u8], &[u8]),
    at: i64,
    (code, has): (i32, &str),
) {
    let headers = crate::sign::headers(provider, signer, "evt_cli_1", T_CLI, signed);
    let lines: Vec<String> = headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
    let at = at.to_string();
    let mut args = vec!["--provider", provider.name(), "--secret", secret, "--at", &at];
    for line in &lines {
        args.extend(["--header", line.as_str()]);
    }
    check(&args, body, code, has);
}

/// Signing time of the `check_signed` deliveries.
const T_CLI: i64 = 1_700_000_000;

/// `hookwall verify` for the providers added by issue 3: authentic (exit 0, the event id
/// printed), wrong key, changed body and stale (exit 1), badly formed key (exit 2).
#[test]
fn verify_cli_new_providers() {
    use crate::sign::{self, Provider};
    let cases = [
        (
            Provider::StandardV1a,
            sign::STANDARD_V1A_PUBLIC,
            "whpk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ),
        (Provider::Slack, sign::SLACK_SECRET, sign::WRONG_SECRET),
        (Provider::Svix, sign::SVIX_SECRET, "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
        (Provider::Shopify, sign::SHOPIFY_SECRET, sign::WRONG_SECRET),
        (Provider::Paddle, sign::PADDLE_SECRET, sign::WRONG_SECRET),
        (Provider::Twitch, sign::TWITCH_SECRET, sign::WRONG_SECRET),
        (Provider::Typeform, sign::TYPEFORM_SECRET, sign::WRONG_SECRET),
        (Provider::Gitlab, sign::GITLAB_TOKEN, sign::WRONG_SECRET),
        (Provider::Segment, sign::SEGMENT_SECRET, sign::WRONG_SECRET),
        (Provider::Pagerduty, sign::PAGERDUTY_SECRET, sign::WRONG_SECRET),
        (Provider::Woocommerce, sign::WOOCOMMERCE_SECRET, sign::WRONG_SECRET),
        (Provider::Bitbucket, sign::BITBUCKET_SECRET, sign::WRONG_SECRET),
    ];
    for (provider, secret, wrong) in cases {
        let body = sign::body(provider, "evt_cli_1", "cli");
        let changed = sign::body(provider, "evt_cli_1", "changed");
        let ok = (0, "event id \"evt_cli_1\"");
        let invalid = (1, "signature_invalid");
        check_signed(provider, (secret, secret), (&body, &body), T_CLI, ok);
        check_signed(provider, (secret, wrong), (&body, &body), T_CLI, invalid);
        if provider == Provider::Gitlab {
            // The token binds no body (docs/providers.md).
            check_signed(provider, (secret, secret), (&body, &changed), T_CLI, ok);
        } else {
            check_signed(provider, (secret, secret), (&body, &changed), T_CLI, invalid);
        }
        let timestamped = [
            Provider::StandardV1a,
            Provider::Slack,
            Provider::Svix,
            Provider::Paddle,
            Provider::Twitch,
        ];
        if timestamped.contains(&provider) {
            // At, then one second past, the provider's default tolerance (`hookwall verify`
            // uses it).
            let tolerance_s = match provider {
                Provider::Paddle => 5,
                Provider::Twitch => 600,
                _ => 300,
            };
            let late = T_CLI + tolerance_s;
            check_signed(provider, (secret, secret), (&body, &body), late, (0, "authentic"));
            check_signed(provider, (secret, secret), (&body, &body), late + 1, (1, "stale"));
            check_signed(provider, (secret, secret), (&body, &body), T_CLI - 61, (1, "stale"));
        }
    }
    check(&["--provider", "standard", "--secret", "whsk_AAAA"], b"{}", 2, "whpk_");
    check(&["--provider", "svix", "--secret", "whpk_AAAA"], b"{}", 2, "HMAC only");
}

/// A one-shot command whose stdout reader has gone (`hookwall verify … | head -0`) ends
/// quietly, as command-line tools do, instead of panicking in `println!` (exit 101).
#[test]
fn closed_stdout_ends_quietly_not_with_a_panic() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .args(["verify", "--provider", "github", "--secret", "It's a Secret to Everybody"])
        .args(["--header", GH_SIG])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running hookwall verify");
    drop(child.stdout.take()); // the reader is gone before anything is printed
    if let Err(e) = child.stdin.take().expect("stdin").write_all(b"Hello, World!") {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "writing the body: {e}");
    }
    let out = child.wait_with_output().expect("hookwall verify finishes");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "no panic: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Issue 3: every case of `tests/data/official_vectors.json` (made by the providers' own
/// libraries) is authentic through the binary at its own time (`--url` given where the case has
/// one), and refused with another secret.
#[test]
fn official_vectors_verify_through_the_cli() {
    let path = crate::harness::official_vectors_path();
    let text = std::fs::read_to_string(&path).expect("the vectors file");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("vectors are JSON");
    let mut url_cases = 0;
    for case in doc["cases"].as_array().expect("cases") {
        let field = |name: &str| case[name].as_str().expect("a string field").to_owned();
        let (provider, secret, body) = (field("provider"), field("secret"), field("body"));
        let at = case["timestamp"].as_i64().expect("timestamp").to_string();
        let mut args = vec!["--provider".to_owned(), provider.clone(), "--at".to_owned(), at];
        for (name, value) in case["headers"].as_object().expect("headers") {
            args.push("--header".to_owned());
            args.push(format!("{name}: {}", value.as_str().expect("header text")));
        }
        if let Some(url) = case["url"].as_str() {
            args.extend(["--url".to_owned(), url.to_owned()]);
            url_cases += 1;
        }
        // Per-source scheme options (`legacy_sha1`, the `hmac` table) travel as `--scheme`.
        if let Some(toml) = case["source_toml"].as_str() {
            args.extend(["--scheme".to_owned(), toml.to_owned()]);
        }
        let run = |secret: &str| {
            let mut all = args.clone();
            all.extend(["--secret".to_owned(), secret.to_owned()]);
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            verify(&all, body.as_bytes())
        };
        let out = run(&secret);
        let what = format!("{provider} / {}", field("name"));
        assert_eq!(out.status.code(), Some(0), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        let wrong = match provider.as_str() {
            // Standard Webhooks / Svix keys must stay base64: 32 zero bytes.
            "standard" | "svix" if secret.starts_with("whpk_") => {
                "whpk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned()
            }
            "standard" | "svix" => "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned(),
            "sendgrid" => crate::vectors::SENDGRID_OTHER_PUBLIC.to_owned(),
            // Another well-formed Ed25519 public key (hex).
            "discord" => "11".repeat(32),
            // Another hex HMAC key.
            "adyen" => "00".repeat(32),
            _ => format!("{secret}x"),
        };
        let out = run(&wrong);
        assert_eq!(out.status.code(), Some(1), "{what}: wrong secret");
    }
    assert!(
        url_cases >= 13,
        "Twilio, Square, HubSpot, Mandrill cases carry their URL: {url_cases}"
    );
    // A URL-signing provider without --url is a usage error naming the flag.
    check(
        &["--provider", "twilio", "--secret", "t", "--header", "X-Twilio-Signature: x"],
        b"",
        2,
        "--url",
    );
}

/// `hookwall verify` for discord, linear, intercom, postmark, calendly, coinbase, zoom and
/// mailgun: authentic (exit 0, the event id printed), wrong key and changed body (exit 1),
/// stale and future where the scheme signs a time. (`hmac` and GitHub's `legacy_sha1` take
/// per-source options the command line does not carry.)
#[test]
fn verify_cli_more_providers() {
    use crate::sign::{self, Provider};
    let cases = [
        (Provider::Discord, sign::DISCORD_PUBLIC, &"00".repeat(32) as &str),
        (Provider::Linear, sign::LINEAR_SECRET, sign::WRONG_SECRET),
        (Provider::Intercom, sign::INTERCOM_SECRET, sign::WRONG_SECRET),
        (Provider::Postmark, sign::POSTMARK_CREDENTIALS, "hookwall:wrong"),
        (Provider::Calendly, sign::CALENDLY_SECRET, sign::WRONG_SECRET),
        (Provider::Coinbase, sign::COINBASE_SECRET, sign::WRONG_SECRET),
        (Provider::Zoom, sign::ZOOM_SECRET, sign::WRONG_SECRET),
        (Provider::Mailgun, sign::MAILGUN_SECRET, sign::WRONG_SECRET),
    ];
    for (provider, secret, wrong) in cases {
        let body =
            |signer: &str, note: &str| sign::body_at(provider, signer, "evt_cli_1", T_CLI, note);
        let good = body(secret, "cli");
        let content_id =
            matches!(provider, Provider::Postmark | Provider::Calendly | Provider::Zoom);
        let ok = if content_id {
            let digest = ring::digest::digest(&ring::digest::SHA256, &good);
            format!("event id \"sha256:{}\"", hex::encode(digest.as_ref()))
        } else {
            "event id \"evt_cli_1\"".to_owned()
        };
        let invalid = (1, "signature_invalid");
        check_signed(provider, (secret, secret), (&good, &good), T_CLI, (0, &ok));
        let forged = body(wrong, "cli");
        check_signed(provider, (secret, wrong), (&forged, &forged), T_CLI, invalid);
        let changed = body(secret, "changed");
        let changed_expect = match provider {
            // Credentials and Mailgun's in-body signature bind no body (docs/providers.md).
            Provider::Postmark | Provider::Mailgun => (0, "authentic"),
            _ => invalid,
        };
        check_signed(provider, (secret, secret), (&good, &changed), T_CLI, changed_expect);
        let tolerance_s = match provider {
            Provider::Linear => 60,
            Provider::Calendly => 180,
            Provider::Intercom | Provider::Postmark | Provider::Coinbase => continue,
            _ => 300,
        };
        let late = T_CLI + tolerance_s;
        check_signed(provider, (secret, secret), (&good, &good), late, (0, "authentic"));
        check_signed(provider, (secret, secret), (&good, &good), late + 1, (1, "stale"));
        check_signed(provider, (secret, secret), (&good, &good), T_CLI - 61, (1, "stale"));
    }
    check(&["--provider", "discord", "--secret", "abcd"], b"{}", 2, "64 hex characters");
    check(&["--provider", "postmark", "--secret", "nocolon"], b"{}", 2, "user:password");
    check(&["--provider", "hmac", "--secret", "s"], b"{}", 2, "needs --scheme");
}

/// `hookwall verify --scheme …` for the per-source schemes: GitHub's `legacy_sha1` and the
/// generic `hmac` table (authentic, wrong key, changed body, stale), and the loader's precise
/// error for a malformed option.
#[test]
fn verify_cli_scheme_options() {
    use crate::sign::{self, Provider};
    let run = |provider: Provider,
               scheme: &str,
               (secret, signer): (&str, &str),
               body: &[u8],
               changed: &[u8],
               at: i64,
               expect: (i32, &str)| {
        let headers = sign::headers(provider, signer, "evt_cli_1", T_CLI, body);
        let lines: Vec<String> = headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        let at = at.to_string();
        let mut args = vec![
            "--provider",
            provider.name(),
            "--secret",
            secret,
            "--at",
            &at,
            "--scheme",
            scheme,
        ];
        for line in &lines {
            args.extend(["--header", line.as_str()]);
        }
        check(&args, changed, expect.0, expect.1);
    };
    for (provider, scheme, secret) in [
        (Provider::GithubSha1, "legacy_sha1 = true", sign::GITHUB_SHA1_SECRET),
        (Provider::Hmac, sign::HMAC_TABLE, sign::HMAC_SECRET),
    ] {
        let body = sign::body(provider, "evt_cli_1", "cli");
        let changed = sign::body(provider, "evt_cli_1", "changed");
        let ok = (0, "event id \"evt_cli_1\"");
        run(provider, scheme, (secret, secret), &body, &body, T_CLI, ok);
        run(
            provider,
            scheme,
            (secret, sign::WRONG_SECRET),
            &body,
            &body,
            T_CLI,
            (1, "signature_invalid"),
        );
        run(provider, scheme, (secret, secret), &body, &changed, T_CLI, (1, "signature_invalid"));
        if provider == Provider::Hmac {
            run(provider, scheme, (secret, secret), &body, &body, T_CLI + 301, (1, "stale"));
        }
    }
    let bad = r#"hmac = { header = "X-Sig", id_header = "X-Id", algorithm = "md5" }"#;
    check(
        &["--provider", "hmac", "--secret", "s", "--scheme", bad],
        b"{}",
        2,
        "hmac.algorithm: \"md5\" is not sha1, sha256 or sha512",
    );
    check(
        &["--provider", "stripe", "--secret", "whsec_x", "--scheme", "legacy_sha1 = true"],
        b"{}",
        2,
        "legacy_sha1: is only for provider \"github\"",
    );
    check(
        &["--provider", "adyen", "--secret", "00", "--scheme", "hmac_signature = \"body\""],
        b"{}",
        2,
        "hmac_signature: is \"body\"; expected \"additional_data\"",
    );
}
