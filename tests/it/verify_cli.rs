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
    child.stdin.take().expect("stdin").write_all(body).expect("writing the body");
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
