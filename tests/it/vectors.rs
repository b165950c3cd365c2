//! Signature vectors made by the providers' own libraries or, where a provider ships none, as
//! its documentation describes (`tests/vectors/gen_vectors.py`, which states the provenance of
//! each provider's cases: stripe-python, standardwebhooks, svix, PyNaCl for Standard Webhooks
//! v1a, Python's `hmac` per Shopify's documented example, GitLab's documented headers), plus
//! GitHub's documented example; for the providers of the second batch discord-interactions,
//! coinbase-commerce and mailgun's SDK check what PyNaCl and Python's `hmac` made; HubSpot's
//! cases are hubspot-api-client's `Signature`, Mandrill's Python's `hmac` per its documented
//! algorithm, Adyen's the Adyen library's HMAC util (provenance per provider in
//! `gen_vectors.py`).
//! Checked with the library API `hookwall::verify::verify` and `hookwall::inspect::inspect`
//! (R1, R2, R6, R8). CI regenerates the JSON before the tests; the
//! committed copy keeps `cargo test` working offline.

use std::time::Duration;

use hookwall::config::{Config, Secret, SourceConfig};
use hookwall::http::Request;
use hookwall::inspect::inspect;
use hookwall::provider::{key, Provider};
use hookwall::verify::{self, Reject, Verified};

/// One source of `provider` with the single key `secret` (as the dashboard shows it).
fn source(provider: Provider, secret: &str) -> SourceConfig {
    SourceConfig {
        id: "vectors".to_owned(),
        tenant: "acme".to_owned(),
        provider,
        tolerance: Duration::from_secs(300),
        future_skew: Duration::from_secs(60),
        event_types: None,
        secrets: vec![Secret {
            id: "k".to_owned(),
            key: key(provider, secret).unwrap_or_else(|e| panic!("secret of {provider:?}: {e}")),
            not_before: None,
            not_after: None,
        }],
        destination: 0,
        ack_deadline: Duration::from_secs(10),
        ordering_key: None,
        public_url: None,
        scheme: Default::default(),
    }
}

/// One source of `provider` with the single key `secret` and the scheme options in
/// `source_toml` (TOML lines of the `[[source]]`), built by the config loader; tolerance 300 s
/// and future skew 60 s as [`source`].
fn configured(provider: Provider, secret: &str, source_toml: &str) -> SourceConfig {
    let text = format!(
        "[[source]]\nid = \"vectors\"\ntenant = \"acme\"\nprovider = \"{}\"\n\
         tolerance = \"300s\"\nfuture_skew = \"60s\"\n\
         secrets = [{{ id = \"k\", value = {secret:?} }}]\n{source_toml}\n\
         destination = \"d\"\n[[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\n",
        provider.name()
    );
    let config = Config::from_toml_str(&text, std::path::Path::new("vectors.toml"), &|_| None)
        .unwrap_or_else(|e| panic!("source of {provider:?}: {e}"));
    config.sources.into_iter().next().expect("one source")
}

/// A request as the framer hands it over (header names lowercased).
fn request(headers: &[(String, String)], body: &[u8]) -> Request {
    Request {
        method: "POST".to_owned(),
        target: "/webhooks/vectors".to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
        keep_alive: true,
    }
}

/// `body` with its first byte changed.
fn flipped(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out[0] ^= 0x01;
    out
}

/// A key of the same form as `secret` that is not it (the wrong-key case).
fn other_secret(provider: Provider, secret: &str) -> String {
    match provider {
        // 32 zero bytes: a well-formed Ed25519 public key or HMAC key no case uses.
        Provider::Standard | Provider::Svix if secret.starts_with("whpk_") => {
            "whpk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned()
        }
        Provider::Standard | Provider::Svix => {
            "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned()
        }
        // Another P-256 public key (the point 7·G), as Mail Settings would show it.
        Provider::Sendgrid => SENDGRID_OTHER_PUBLIC.to_owned(),
        // Another hex public key (32 bytes of 0x11).
        Provider::Discord => "11".repeat(32),
        // Another hex HMAC key.
        Provider::Adyen => "00".repeat(32),
        _ => format!("{secret}x"),
    }
}

/// A well-formed SendGrid public key no case uses: SPKI of the P-256 point 7·G.
pub const SENDGRID_OTHER_PUBLIC: &str =
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEjlM7b6C/e0YluzBmfAH7YH75+LioD+9bMAYocDGHsqNz6x294DMYNm0Gn4Om9ZAAU8c2M8sEGyHFXhqGwfQAtA==";

/// Verifies `req` against the signed URL `url` (URL-signing providers), or as the library's
/// `verify` does.
fn verify(
    source: &SourceConfig,
    req: &Request,
    url: Option<&str>,
    t: i64,
) -> Result<Verified, Reject> {
    verify::verify_signed_url(source, req, url, t)
}

/// Checks one authentic case: Ok at its timestamp with an event id; `SignatureInvalid` with a
/// flipped body byte (where the body is signed) or another key; for timestamped schemes,
/// `Stale` one second past the tolerance (300 s) or the future skew (60 s), fresh at both.
#[allow(clippy::too_many_arguments)]
fn check(
    name: &str,
    provider: Provider,
    secret: &str,
    source_toml: Option<&str>,
    timestamped: bool,
    headers: &[(String, String)],
    body: &[u8],
    (url, t): (Option<&str>, i64),
) {
    let make = |secret: &str| match source_toml {
        Some(toml) => configured(provider, secret, toml),
        None => source(provider, secret),
    };
    let source = make(secret);
    let req = request(headers, body);
    let verified = verify(&source, &req, url, t);
    let verified = verified.unwrap_or_else(|e| panic!("{name}: expected authentic, got {e:?}"));
    assert_eq!(verified.secret_index, 0, "{name}");
    let signed_at = timestamped.then_some(t);
    assert_eq!(verified.signed_at, signed_at, "{name}: signed timestamp");
    // GitHub's documented example body ("Hello, World!") is no JSON event; all others are.
    if hookwall::provider::source_batches(&source) {
        let events = hookwall::inspect::inspect_batch(&source, &req)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(events.iter().all(|e| !e.inspected.event_id.is_empty()), "{name}: event ids");
        // Mandrill's array is the decoded `mandrill_events` form parameter.
        let array: Vec<u8> = if provider == Provider::Mandrill {
            let mut events = form_urlencoded::parse(body).filter(|(k, _)| k == "mandrill_events");
            events.next().expect("a mandrill_events parameter").1.into_owned().into_bytes()
        } else {
            body.to_vec()
        };
        for e in &events {
            // Each event's bytes are a slice of the array, exactly as sent.
            assert!(array.windows(e.body.len()).any(|w| w == e.body.as_slice()), "{name}");
        }
    // Twilio's id is a header and its body usually a form.
    } else if serde_json::from_slice::<serde_json::Value>(body).is_ok()
        || provider == Provider::Twilio
    {
        let inspected = inspect(&source, &req).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(!inspected.event_id.is_empty(), "{name}: event id");
    }
    // GitLab's and Postmark's credentials bind no body: a changed body is still authentic
    // (docs/providers.md). Mailgun's signature and Linear's timestamp are read from the body,
    // which a flipped first byte stops being JSON (so is an `hmac` source's body timestamp).
    let body_timestamp = source_toml.is_some_and(|t| t.contains("timestamp_pointer"));
    let flipped_expect = match provider {
        Provider::Gitlab | Provider::Postmark => Ok(verified),
        // Adyen's item signatures are inside the items of the JSON body (a header-HMAC source's
        // signature is over the body, as usual).
        Provider::Adyen if source_toml.is_none() => Err(Reject::SignatureMissing),
        Provider::Mailgun | Provider::Linear => Err(Reject::SignatureMissing),
        Provider::Hmac if body_timestamp => Err(Reject::SignatureMissing),
        _ => Err(Reject::SignatureInvalid),
    };
    assert_eq!(
        verify(&source, &request(headers, &flipped(body)), url, t),
        flipped_expect,
        "{name}: flipped byte"
    );
    let wrong = make(&other_secret(provider, secret));
    assert_eq!(verify(&wrong, &req, url, t), Err(Reject::SignatureInvalid), "{name}: wrong key");
    if let Some(url) = url {
        // The URL is signed: another path, or a proxy that turned https into http, fails.
        let moved = url.replacen("/webhooks/", "/hooks/", 1).replacen(".php", ".asp", 1);
        let moved = if moved == url { format!("{url}x") } else { moved };
        let err = Err(Reject::SignatureInvalid);
        assert_eq!(verify(&source, &req, Some(&moved), t), err, "{name}: other path");
        let http = url.replacen("https://", "http://", 1);
        assert_eq!(verify(&source, &req, Some(&http), t), err, "{name}: https became http");
    }
    if timestamped {
        assert_eq!(verify(&source, &req, url, t + 301), Err(Reject::Stale), "{name}: 301 s later");
        assert!(verify(&source, &req, url, t + 300).is_ok(), "{name}: exactly at the tolerance");
        assert_eq!(verify(&source, &req, url, t - 61), Err(Reject::Stale), "{name}: 61 s ahead");
        assert!(verify(&source, &req, url, t - 60).is_ok(), "{name}: exactly at the future skew");
    }
}

/// R1, R2: hookwall accepts what the official libraries sign and nothing with one byte changed.
#[test]
fn official_library_vectors_verify() {
    let path = crate::harness::official_vectors_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("vectors are JSON");
    let cases = doc["cases"].as_array().expect("a cases array");
    let mut counts = std::collections::BTreeMap::new();
    for case in cases {
        let name = format!(
            "{} / {}",
            case["provider"].as_str().unwrap_or("?"),
            case["name"].as_str().unwrap_or("?")
        );
        let provider = case["provider"]
            .as_str()
            .and_then(Provider::parse)
            .unwrap_or_else(|| panic!("{name}: unknown provider"));
        *counts.entry(provider.name()).or_insert(0) += 1;
        let secret = case["secret"].as_str().expect("secret");
        let body = case["body"].as_str().expect("body").as_bytes();
        let t = case["timestamp"].as_i64().expect("timestamp");
        let headers: Vec<(String, String)> = case["headers"]
            .as_object()
            .expect("headers")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("header text").to_owned()))
            .collect();
        let url = case["url"].as_str();
        let source_toml = case["source_toml"].as_str();
        let timestamped =
            case["timestamped"].as_bool().unwrap_or_else(|| provider.signs_timestamp());
        check(&name, provider, secret, source_toml, timestamped, &headers, body, (url, t));
    }
    let with_several = ["stripe", "slack", "standard", "svix", "shopify", "paddle", "twitch"];
    for provider in with_several.into_iter().chain([
        "typeform",
        "segment",
        "pagerduty",
        "woocommerce",
        "bitbucket",
        "twilio",
        "square",
        "sendgrid",
        "discord",
        "hmac",
        "linear",
        "intercom",
        "calendly",
        "coinbase",
        "zoom",
        "mailgun",
        "hubspot",
        "mandrill",
        "adyen",
    ]) {
        let n = counts.get(provider).copied().unwrap_or(0);
        assert!(n >= 3, "several cases for {provider}, got {counts:?}");
    }
    assert!(counts.contains_key("gitlab"), "a GitLab case, got {counts:?}");
    assert!(counts.contains_key("postmark"), "a Postmark case, got {counts:?}");
    let legacy = cases.iter().filter(|c| c["source_toml"].as_str() == Some("legacy_sha1 = true"));
    assert!(legacy.count() >= 3, "several GitHub legacy sha1 cases");
    let v1a = cases.iter().filter(|c| c["secret"].as_str().is_some_and(|s| s.starts_with("whpk_")));
    assert!(v1a.count() >= 3, "several Standard Webhooks v1a cases");
    // Twilio's SharedKey option: HMAC-SHA256 named by X-Twilio-Webhooks-Signature-Settings.
    let sha256 = cases.iter().filter(|c| {
        c["headers"]["X-Twilio-Webhooks-Signature-Settings"]
            .as_str()
            .is_some_and(|s| s.ends_with("algorithm=HMAC_SHA256"))
    });
    assert!(sha256.count() >= 3, "several Twilio HMAC-SHA256 cases");
    let header =
        cases.iter().filter(|c| c["source_toml"].as_str() == Some("hmac_signature = \"header\""));
    assert!(header.count() >= 3, "several Adyen header-HMAC cases");

    // GitHub's documented example ("Validating webhook deliveries"): no signed timestamp.
    let headers = [(
        "X-Hub-Signature-256".to_owned(),
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_owned(),
    )];
    check(
        "github / documented example",
        Provider::Github,
        "It's a Secret to Everybody",
        None,
        false,
        &headers,
        b"Hello, World!",
        (None, 1_700_000_000),
    );
}

/// One vector: secret, headers, body and (URL-signing providers) URL.
type Vector = (String, Vec<(String, String)>, Vec<u8>, Option<String>);

/// The vector named `name` of `provider`.
fn vector(provider: &str, name: &str) -> Vector {
    let path = crate::harness::official_vectors_path();
    let text = std::fs::read_to_string(&path).expect("vectors");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("vectors are JSON");
    let case = doc["cases"]
        .as_array()
        .expect("a cases array")
        .iter()
        .find(|c| c["provider"] == provider && c["name"] == name)
        .unwrap_or_else(|| panic!("no vector {provider} / {name}"));
    let headers = case["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("header text").to_owned()))
        .collect();
    (
        case["secret"].as_str().expect("secret").to_owned(),
        headers,
        case["body"].as_str().expect("body").as_bytes().to_vec(),
        case["url"].as_str().map(str::to_owned),
    )
}

/// `headers` with `name` set to `value` (`None`: removed).
fn with_header(
    headers: &[(String, String)],
    name: &str,
    value: Option<&str>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> =
        headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(name)).cloned().collect();
    if let Some(value) = value {
        out.push((name.to_owned(), value.to_owned()));
    }
    out
}

/// Twilio's SharedKey option: the algorithm is the one `X-Twilio-Webhooks-Signature-Settings`
/// names (twilio-python's `get_signature_algorithm`): without that header, or naming
/// HMAC_SHA1, a 32-byte HMAC-SHA256 tag is malformed; an unknown algorithm cannot be verified;
/// the Auth Token (another secret) does not make a SharedKey signature.
#[test]
fn twilio_signature_algorithm_comes_from_the_settings_header() {
    let (secret, headers, body, url) = vector("twilio", "shared key HMAC_SHA256 form");
    let url = url.as_deref();
    let source = source(Provider::Twilio, &secret);
    let t = 1_700_000_000;
    assert!(verify(&source, &request(&headers, &body), url, t).is_ok());
    let settings = "X-Twilio-Webhooks-Signature-Settings";
    for (value, what) in [
        (None, "no settings header"),
        (Some("key=webhooks_sharedkey_0123456789abcdef,algorithm=HMAC_SHA1"), "named SHA-1"),
        (Some("key=webhooks_sharedkey_0123456789abcdef,algorithm=HMAC_SHA512"), "unknown"),
    ] {
        let req = request(&with_header(&headers, settings, value), &body);
        assert_eq!(verify(&source, &req, url, t), Err(Reject::SignatureMissing), "{what}");
    }
    let mut twice = headers.clone();
    twice.push((settings.to_owned(), "algorithm=HMAC_SHA256".to_owned()));
    let req = request(&twice, &body);
    assert_eq!(verify(&source, &req, url, t), Err(Reject::SignatureMissing), "repeated");
    // Case and spaces as the SDK tolerates them.
    let loose = with_header(&headers, settings, Some(" algorithm = hmac_sha256 "));
    assert!(verify(&source, &request(&loose, &body), url, t).is_ok(), "any case");
    // Rotation: the Auth Token listed first, the SharedKey secret second; the second matches.
    let both = Config::from_toml_str(
        &format!(
            "[[source]]\nid = \"t\"\ntenant = \"acme\"\nprovider = \"twilio\"\n\
             secrets = [{{ id = \"auth\", value = \"12345\" }}, {{ id = \"shared\", value = {secret:?} }}]\n\
             destination = \"d\"\n[[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\n"
        ),
        std::path::Path::new("t.toml"),
        &|_| None,
    )
    .expect("config");
    let verified = verify(&both.sources[0], &request(&headers, &body), url, t).expect("shared key");
    assert_eq!(verified.secret_index, 1, "the SharedKey secret matched");
    // An Auth Token signature (HMAC-SHA1, no settings header) still verifies on that source.
    let (token, sha1_headers, sha1_body, sha1_url) = vector("twilio", "docs example form");
    assert_eq!(token, "12345");
    let req = request(&sha1_headers, &sha1_body);
    let verified = verify(&both.sources[0], &req, sha1_url.as_deref(), t).expect("auth token");
    assert_eq!(verified.secret_index, 0);
}

/// Adyen: a source verifies one scheme, chosen by `hmac_signature` (docs/providers.md): a
/// header-signed platform webhook is `signature_missing` at a per-item source, and a
/// notification with signed items is `signature_missing` at a header-HMAC source (no
/// fallback either way). A header-HMAC event's id is its content, its type the body's `type`.
#[test]
fn adyen_schemes_are_chosen_per_source() {
    let t = 1_700_000_000;
    let (key, headers, body, _) =
        vector("adyen", "header HMAC, balance platform configuration webhook");
    let header_source = configured(Provider::Adyen, &key, "hmac_signature = \"header\"");
    let items_source = source(Provider::Adyen, &key);
    let req = request(&headers, &body);
    assert!(verify(&header_source, &req, None, t).is_ok());
    assert_eq!(verify(&items_source, &req, None, t), Err(Reject::SignatureMissing));
    let inspected = inspect(&header_source, &req).expect("one event");
    let digest = ring::digest::digest(&ring::digest::SHA256, &body);
    assert_eq!(inspected.event_id, format!("sha256:{}", hex::encode(digest)));
    assert_eq!(inspected.event_type.as_deref(), Some("balancePlatform.accountHolder.updated"));
    let unsigned = request(&with_header(&headers, "HmacSignature", None), &body);
    assert_eq!(verify(&header_source, &unsigned, None, t), Err(Reject::SignatureMissing));

    let (key, headers, body, _) = vector("adyen", "batch of two");
    let header_source = configured(Provider::Adyen, &key, "hmac_signature = \"header\"");
    let req = request(&headers, &body);
    assert!(verify(&source(Provider::Adyen, &key), &req, None, t).is_ok());
    assert_eq!(verify(&header_source, &req, None, t), Err(Reject::SignatureMissing));
    // An explicit default is the per-item scheme.
    let explicit = configured(Provider::Adyen, &key, "hmac_signature = \"additional_data\"");
    assert!(verify(&explicit, &req, None, t).is_ok());
}
