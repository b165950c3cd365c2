//! `hookwall verify`: offline check of one captured delivery (SPEC §1) — is it authentic and
//! fresh, and if not, why? The same verification and inspection code as the running
//! appliance, on a request built from the command line and the body on stdin.

use std::io::Read as _;
use std::time::Duration;

use crate::config::{Secret, SourceConfig};
use crate::http::Request;
use crate::provider::{self, Provider};
use crate::{inspect, verify};

/// What the command line gave.
#[derive(Debug, Clone)]
pub struct Captured {
    /// Provider name as in the config (`stripe`, `svix`, …; see [`Provider::ALL`]).
    pub provider: String,
    /// The secret exactly as the provider's dashboard shows it.
    pub secret: String,
    /// `Name: value` header lines as captured.
    pub headers: Vec<String>,
    /// `--url`: the URL the provider signed (URL-signing providers only).
    pub url: Option<String>,
    /// When the delivery is judged, Unix seconds (default: now).
    pub at_unix_s: i64,
    /// The source's scheme options as `[[source]]` TOML lines (`--scheme`): `legacy_sha1 =
    /// true` for GitHub, `hmac = { … }` (required) for `hmac`, `hmac_signature = "header"` for
    /// Adyen. Empty for the others.
    pub scheme: Vec<String>,
}

/// The verdict, for the caller to print and turn into an exit code.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Authentic and fresh (exit 0): what was learned, one line per fact.
    Authentic(Vec<String>),
    /// Not authentic or not fresh (exit 1): the SPEC §3 code and the reason.
    Rejected(String),
    /// Bad usage (exit 2): what is wrong with the arguments.
    Usage(String),
}

/// Judges `body` against `captured` (pure: `at_unix_s` is the clock).
pub fn judge(captured: &Captured, body: Vec<u8>) -> Verdict {
    let Some(provider) = Provider::parse(&captured.provider) else {
        let known: Vec<&str> = Provider::ALL.iter().map(|p| p.name()).collect();
        return Verdict::Usage(format!(
            "unknown or unsupported provider {:?} (supported: {})",
            captured.provider,
            known.join(", ")
        ));
    };
    let scheme = match scheme_options(provider, &captured.scheme) {
        Ok(scheme) => scheme,
        Err(why) => return Verdict::Usage(why),
    };
    let key = match provider::key_with(provider, &scheme, &captured.secret) {
        Ok(key) => key,
        Err(why) => return Verdict::Usage(format!("--secret: {why}")),
    };
    let mut headers = crate::http::Headers::with_capacity(captured.headers.len(), 0);
    for (n, line) in captured.headers.iter().enumerate() {
        let Some((name, value)) = line.split_once(':') else {
            // Not echoed: a mistyped `Authorization` line is a credential.
            return Verdict::Usage(format!(
                "--header number {}: expected 'Name: value' (no ':' found; the line is not shown)",
                n + 1
            ));
        };
        let name = name.trim();
        // RFC 9110 §5.1, §5.5: a field name is a token; a value has no CR, LF or NUL. Neither
        // is echoed (either half of a mistyped line may be a credential).
        if name.is_empty() || !name.bytes().all(crate::http::is_tchar) {
            return Verdict::Usage(format!(
                "--header number {}: the name before ':' must be a header name (letters, digits, \
                 and !#$%&'*+-.^_`|~; no spaces; the line is not shown)",
                n + 1
            ));
        }
        if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Verdict::Usage(format!(
                "--header number {}: the value holds a line break or NUL (the line is not shown)",
                n + 1
            ));
        }
        headers.push(name, value.trim().as_bytes());
    }
    let source = SourceConfig {
        id: "offline".to_owned(),
        tenant: "offline".to_owned(),
        provider,
        tolerance: provider.default_tolerance(),
        future_skew: Duration::from_secs(60),
        event_types: None,
        secrets: vec![Secret { id: "given".to_owned(), key, not_before: None, not_after: None }],
        destination: 0,
        ack_deadline: provider.ack_deadline(),
        ordering_key: None,
        public_url: None,
        scheme,
    };
    let req = Request {
        method: "POST".to_owned(),
        target: "/".to_owned(),
        headers,
        body,
        keep_alive: false,
    };
    // The server refuses a declared encoding from the head (415, docs/providers.md
    // "Compressed bodies"): say so rather than judge bytes it would never verify.
    if req.headers_all("content-encoding").any(crate::http::is_content_encoded) {
        return Verdict::Rejected(
            "unsupported_encoding: the delivery declares a Content-Encoding other than identity; \
             hookwall answers it 415 without verifying it"
                .to_owned(),
        );
    }
    if provider.signs_url() && captured.url.is_none() {
        return Verdict::Usage(format!(
            "--url is required: {} signs the URL it posted to",
            provider.name()
        ));
    }
    let url = captured.url.as_deref();
    if let Some(text) = url.filter(|_| provider.signs_url()) {
        let parsed = reqwest::Url::parse(text).map_err(|e| e.to_string()).and_then(|u| {
            let web = matches!(u.scheme(), "http" | "https") && u.host_str().is_some();
            if web {
                Ok(())
            } else {
                Err("not an http:// or https:// URL with a host".to_owned())
            }
        });
        if let Err(why) = parsed {
            return Verdict::Usage(format!(
                "--url {text:?}: {why} (give the URL {} posted to, e.g. https://host/path?query)",
                provider.name()
            ));
        }
    }
    match verify::verify_signed_url(&source, &req, url, captured.at_unix_s) {
        Err(reject) => Verdict::Rejected(format!("{}: {reject}", reject.code())),
        Ok(verified) => Verdict::Authentic(facts(&source, &req, verified, captured.at_unix_s)),
    }
}

/// The scheme options of `--scheme` lines, checked by the config loader itself (the same
/// errors as `check-config`, field names included).
fn scheme_options(
    provider: Provider,
    lines: &[String],
) -> Result<provider::options::SchemeOptions, String> {
    if lines.is_empty() {
        if provider == Provider::Hmac {
            return Err("provider \"hmac\" needs --scheme 'hmac = { header = \"…\", … }' (the \
                        source's table, see docs/providers.md)"
                .to_owned());
        }
        return Ok(provider::options::SchemeOptions::default());
    }
    // A throwaway config around the lines; the secret is read through `env` so it is never
    // written into TOML text. Its form is checked again with the real secret afterwards.
    let text = format!(
        "[[source]]\nid = \"offline\"\ntenant = \"offline\"\nprovider = \"{}\"\n\
         secrets = [{{ id = \"given\", env = \"SCHEME\" }}]\n{}\ndestination = \"d\"\n\
         [[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\n",
        provider.name(),
        lines.join("\n")
    );
    // A placeholder of the provider's key form (Adyen's is hex; Postmark's `user:password`).
    let placeholder = |_: &str| {
        Some(if provider == Provider::Adyen { "00" } else { "user:placeholder" }.to_owned())
    };
    let placeholder_key =
        crate::config::Config::from_toml_str(&text, std::path::Path::new("--scheme"), &placeholder);
    match placeholder_key {
        Ok(mut config) => Ok(config.sources.swap_remove(0).scheme),
        Err(errors) => {
            let lines: Vec<String> = errors
                .0
                .iter()
                .filter(|e| !e.field.contains(".secrets"))
                .map(|e| format!("{}: {}", e.field.replace("source[offline].", ""), e.message))
                .collect();
            Err(format!("--scheme: {}", lines.join("; ")))
        }
    }
}

fn facts(source: &SourceConfig, req: &Request, v: verify::Verified, at: i64) -> Vec<String> {
    let mut out = vec![format!("authentic and fresh ({})", source.provider.name())];
    if let Some(signed) = v.signed_at {
        out.push(format!("signed at {signed} (Unix s), {} s before --at", at - signed));
    }
    let key = &source.secrets[v.secret_index].key;
    if let Some(challenge) = provider::challenge(source.provider, key, req) {
        let body = String::from_utf8_lossy(&challenge.body);
        out.push(format!("a handshake: hookwall answers 200 {body} and admits nothing"));
        return out;
    }
    if crate::provider::source_batches(source) {
        match inspect::inspect_batch(source, req) {
            Ok(events) => {
                out.push(format!("a batch of {} events", events.len()));
                for e in events {
                    let kind = e.inspected.event_type.unwrap_or_default();
                    out.push(format!("event id {:?} type {kind:?}", e.inspected.event_id));
                }
            }
            Err(reason) => {
                out.push(format!("but hookwall would answer 400 schema_rejected: {reason}"));
            }
        }
        return out;
    }
    match inspect::inspect(source, req) {
        Ok(i) => {
            out.push(format!("event id {:?}", i.event_id));
            if let Some(t) = i.event_type {
                out.push(format!("event type {t:?}"));
            }
            out.push(format!("fingerprint sha256:{}", hex::encode(i.fingerprint)));
        }
        Err(reason) => out.push(format!("but hookwall would answer 400 schema_rejected: {reason}")),
    }
    out
}

/// Reads the whole body from stdin.
///
/// # Errors
/// The read error.
pub fn read_body() -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    std::io::stdin().read_to_end(&mut body)?;
    Ok(body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// GitHub's documented example ("Validating webhook deliveries").
    const GH_SECRET: &str = "It's a Secret to Everybody";
    const GH_SIG: &str =
        "X-Hub-Signature-256: sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn check(provider: &str, secret: &str, headers: &[&str], body: &[u8], expect: &str) {
        let captured = Captured {
            provider: provider.to_owned(),
            secret: secret.to_owned(),
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            url: None,
            at_unix_s: 1_614_265_330,
            scheme: Vec::new(),
        };
        let got = match judge(&captured, body.to_vec()) {
            Verdict::Authentic(lines) => format!("ok: {}", lines.join("; ")),
            Verdict::Rejected(why) => format!("rejected: {why}"),
            Verdict::Usage(why) => format!("usage: {why}"),
        };
        assert!(got.starts_with(expect), "{got:?} does not start with {expect:?}");
    }

    #[test]
    fn verdicts() {
        let body = b"Hello, World!";
        check("github", GH_SECRET, &[GH_SIG], body, "ok: authentic and fresh (github)");
        check("github", "wrong", &[GH_SIG], body, "rejected: signature_invalid");
        check("github", GH_SECRET, &[], body, "rejected: signature_missing");
        check("github", GH_SECRET, &["no colon"], body, "usage: --header number 1: expected");
        let credential = [GH_SIG, "Authorization Basic dXNlcjpzM2NyZXQ="];
        let got = judge(
            &Captured {
                provider: "github".to_owned(),
                secret: GH_SECRET.to_owned(),
                headers: credential.iter().map(|h| (*h).to_owned()).collect(),
                url: None,
                at_unix_s: 1_614_265_330,
                scheme: Vec::new(),
            },
            body.to_vec(),
        );
        assert!(
            matches!(&got, Verdict::Usage(w) if w.starts_with("--header number 2") && !w.contains("dXNlcjpz")),
            "{got:?}"
        );
        // A URL-signing provider's --url that is no URL is bad usage naming --url, not a
        // missing signature (found by an audit of the CLI).
        for url in ["not a url", "ftp://host/x", "mailto:a@b"] {
            let twilio = Captured {
                provider: "twilio".to_owned(),
                secret: "token".to_owned(),
                headers: vec!["X-Twilio-Signature: abc".to_owned()],
                url: Some(url.to_owned()),
                at_unix_s: 1_614_265_330,
                scheme: Vec::new(),
            };
            let got = judge(&twilio, b"a=b".to_vec());
            assert!(matches!(&got, Verdict::Usage(w) if w.starts_with("--url")), "{url}: {got:?}");
        }
        let gzip = [GH_SIG, "Content-Encoding: gzip"];
        check("github", GH_SECRET, &gzip, body, "rejected: unsupported_encoding");
        let identity = [GH_SIG, "Content-Encoding: identity"];
        check("github", GH_SECRET, &identity, body, "ok: authentic and fresh (github)");
        check("quickbooks", GH_SECRET, &[GH_SIG], body, "usage: unknown or unsupported provider");
        check("standard", "whsec_!!", &[], body, "usage: --secret");
        // The Standard Webhooks spec vector, judged at its timestamp and 301 s later.
        let std_headers = [
            "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek",
            "webhook-timestamp: 1614265330",
            "webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ];
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        check("standard", secret, &std_headers, body, "ok: authentic and fresh (standard)");
        let mut late = Captured {
            provider: "standard".to_owned(),
            secret: secret.to_owned(),
            headers: std_headers.iter().map(|h| (*h).to_owned()).collect(),
            url: None,
            at_unix_s: 1_614_265_330 + 301,
            scheme: Vec::new(),
        };
        assert!(
            matches!(judge(&late, body.to_vec()), Verdict::Rejected(w) if w.starts_with("stale"))
        );
        late.at_unix_s = 1_614_265_330 + 300;
        assert!(matches!(judge(&late, body.to_vec()), Verdict::Authentic(_)));
        // A Slack url_verification handshake is authentic and answered, not admitted.
        let secret = "slack-secret";
        let body = br#"{"type":"url_verification","challenge":"c1"}"#;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        let signed = [b"v0:1614265330:".as_slice(), body].concat();
        let sig = hex::encode(ring::hmac::sign(&key, &signed));
        let headers = [
            "X-Slack-Request-Timestamp: 1614265330".to_owned(),
            format!("X-Slack-Signature: v0={sig}"),
        ];
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        check("slack", secret, &headers, body, "ok: authentic and fresh (slack); signed at");
        let captured = Captured {
            provider: "slack".to_owned(),
            secret: secret.to_owned(),
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            url: None,
            at_unix_s: 1_614_265_330,
            scheme: Vec::new(),
        };
        let Verdict::Authentic(lines) = judge(&captured, body.to_vec()) else {
            panic!("the handshake verifies");
        };
        assert!(lines.iter().any(|l| l.contains(r#"answers 200 {"challenge":"c1"}"#)), "{lines:?}");
    }
}
