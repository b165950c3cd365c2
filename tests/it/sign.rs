//! Signing as the providers do it, written here from the providers' documentation with `ring`,
//! independently of `src/` (a shared bug would otherwise cancel out). Also the bodies and headers
//! of test deliveries.

use base64::Engine as _;

/// Stripe secret of source `stripe-a` (used as written, `whsec_` included).
pub const STRIPE_SECRET: &str = "whsec_it_stripe_secret_0123456789";
/// Older secret of source `stripe-rot` (listed first in the config).
pub const STRIPE_OLD_SECRET: &str = "whsec_it_stripe_rotation_old";
/// Newer secret of source `stripe-rot`.
pub const STRIPE_NEW_SECRET: &str = "whsec_it_stripe_rotation_new";
/// A secret no source knows.
pub const WRONG_SECRET: &str = "whsec_it_nobody_knows_this_one";
/// GitHub secret of source `github-a` (GitHub's documentation example).
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
/// Standard Webhooks secret of source `standard-a` (the spec's example form).
pub const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A provider as the tests sign for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// `Stripe-Signature: t=…,v1=…`; id and type in the body.
    Stripe,
    /// `X-Hub-Signature-256`; id in `X-GitHub-Delivery`, type in `X-GitHub-Event`.
    Github,
    /// Standard Webhooks v1; id in `webhook-id`.
    Standard,
}

/// HMAC-SHA256 of the concatenated `parts` keyed by `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let mut ctx = ring::hmac::Context::with_key(&key);
    for part in parts {
        ctx.update(part);
    }
    ctx.sign().as_ref().to_vec()
}

/// Stripe's `v1`: hex HMAC-SHA256 over `"{t}.{body}"`, keyed by the secret's bytes as written.
pub fn stripe_v1(secret: &str, t: i64, body: &[u8]) -> String {
    hex::encode(hmac_sha256(secret.as_bytes(), &[t.to_string().as_bytes(), b".", body]))
}

/// A whole `Stripe-Signature` header with one `v1`.
pub fn stripe_header(secret: &str, t: i64, body: &[u8]) -> String {
    format!("t={t},v1={}", stripe_v1(secret, t, body))
}

/// GitHub's `X-Hub-Signature-256`: `sha256=` + hex HMAC-SHA256 over the body.
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(hmac_sha256(secret.as_bytes(), &[body])))
}

/// Standard Webhooks `webhook-signature` entry: `v1,` + base64 HMAC-SHA256 over
/// `"{id}.{ts}.{body}"`, keyed by the base64 after `whsec_`.
pub fn standard_signature(secret: &str, id: &str, ts: i64, body: &[u8]) -> String {
    let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = base64::engine::general_purpose::STANDARD.decode(b64).expect("test secret is base64");
    let tag = hmac_sha256(&key, &[id.as_bytes(), b".", ts.to_string().as_bytes(), b".", body]);
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(tag))
}

/// The wall clock in Unix seconds (the signing time of a fresh delivery).
pub fn now_unix_s() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_secs()).expect("seconds fit in i64")
}

/// An event id unique within this test process (and, by the pid and clock, across runs).
pub fn unique_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .subsec_nanos();
    format!("{prefix}_{}_{nanos:09}_{n}", std::process::id())
}

/// A JSON body for `provider` carrying `id` where the provider puts it (Stripe only; the
/// others carry the id in a header) and `note` so two bodies of one id can differ.
pub fn body(provider: Provider, id: &str, note: &str) -> Vec<u8> {
    let text = match provider {
        Provider::Stripe => format!(
            r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"note":"{note}"}}}}}}"#
        ),
        Provider::Github => format!(r#"{{"action":"opened","delivery":"{id}","zen":"{note}"}}"#),
        Provider::Standard => format!(r#"{{"type":"invoice.paid","data":{{"note":"{note}"}}}}"#),
    };
    text.into_bytes()
}

/// The headers of a delivery of `body` as event `id`, signed by `secret` at `t` (Unix s).
/// `Content-Type: application/json` is included.
pub fn headers(
    provider: Provider,
    secret: &str,
    id: &str,
    t: i64,
    body: &[u8],
) -> Vec<(String, String)> {
    let mut h = vec![("Content-Type".to_owned(), "application/json".to_owned())];
    match provider {
        Provider::Stripe => h.push(("Stripe-Signature".to_owned(), stripe_header(secret, t, body))),
        Provider::Github => {
            h.push(("X-GitHub-Delivery".to_owned(), id.to_owned()));
            h.push(("X-GitHub-Event".to_owned(), "pull_request".to_owned()));
            h.push(("X-Hub-Signature-256".to_owned(), github_signature(secret, body)));
        }
        Provider::Standard => {
            h.push(("webhook-id".to_owned(), id.to_owned()));
            h.push(("webhook-timestamp".to_owned(), t.to_string()));
            h.push(("webhook-signature".to_owned(), standard_signature(secret, id, t, body)));
        }
    }
    h
}

/// Replaces (or adds) header `name` (case-insensitive) in `headers`.
pub fn set_header(headers: &mut Vec<(String, String)>, name: &str, value: &str) {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    headers.push((name.to_owned(), value.to_owned()));
}

/// Removes header `name` (case-insensitive) from `headers`.
pub fn remove_header(headers: &mut Vec<(String, String)>, name: &str) {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
}
