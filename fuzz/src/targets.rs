//! The bodies of hookwall's fuzz targets (issue 5), shared by `cargo fuzz` (`fuzz_targets/`)
//! and by the seeded smoke run in `cargo test` (`tests/fuzz_smoke.rs` includes this file).
//! Each takes arbitrary bytes and must never panic; each also checks the invariants its parser
//! promises (bounds, what a frame may contain).

use std::path::Path;
use std::sync::OnceLock;

use hookwall::config::{Config, SourceConfig};
use hookwall::http::{Frame, Framer, Limits, Request};
use hookwall::provider::Provider;

/// Limits small enough that fuzzed inputs reach them.
const LIMITS: Limits = Limits { header_bytes_max: 1024, body_bytes_max: 2048 };

/// HTTP/1.1 request framing (head limits, Content-Length, chunked, pipelining): the input is fed
/// in pieces whose sizes come from the input itself; every frame respects the limits, and the
/// framer never claims more bytes than it was given.
pub fn http_framing(data: &[u8]) {
    let mut framer = Framer::new(LIMITS);
    let mut buffered: Vec<u8> = Vec::new();
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    for piece in data.chunks(step) {
        buffered.extend_from_slice(piece);
        loop {
            let (used, frame) = framer.advance(&buffered);
            assert!(used <= buffered.len(), "the framer used more than it was given");
            buffered.drain(..used);
            match frame {
                Frame::Incomplete => break,
                Frame::Head(_) => {}
                Frame::Request(req) => {
                    assert!(req.body.len() <= LIMITS.body_bytes_max, "body over the limit");
                }
                Frame::Error(_) => return,
            }
        }
    }
}

/// One source per provider this build verifies, loaded through the real config loader (so the
/// secrets have each provider's dashboard form). Providers none of the sample secrets suit are
/// left out.
pub fn sources() -> &'static [SourceConfig] {
    static SOURCES: OnceLock<Vec<SourceConfig>> = OnceLock::new();
    SOURCES.get_or_init(|| {
        // One of these is a valid key for every provider (whsec_, plain HMAC secrets, a hex
        // Ed25519 key, basic-auth credentials, a base64 P-256 SPKI for SendGrid).
        let candidates = [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "It's a Secret to Everybody",
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
            "user:password",
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEjlM7b6C/e0YluzBmfAH7YH75+LioD+9bMAYocDGHsqNz6x294DMYNm0Gn4Om9ZAAU8c2M8sEGyHFXhqGwfQAtA==",
        ];
        let mut out = Vec::new();
        for provider in Provider::ALL {
            for secret in candidates {
                let text = format!(
                    "[ledger]\npath = \"/nonexistent\"\n[[source]]\nid = \"s\"\ntenant = \"t\"\n\
                     provider = \"{}\"\nsecrets = [{{ id = \"k\", value = {secret:?} }}]\n\
                     destination = \"d\"\n{}[[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\n",
                    provider.name(),
                    // The generic scheme needs its table.
                    match provider {
                        Provider::Hmac => "hmac = { header = \"X-Signature\", prefix = \"v1=\", \
                                           content = \"{timestamp}.{body}\", timestamp_header = \
                                           \"X-Timestamp\", id_header = \"X-Id\" }\n",
                        _ => "",
                    }
                );
                let loaded = Config::from_toml_str(&text, Path::new("fuzz.toml"), &|_| None);
                if let Ok(mut config) = loaded {
                    out.push(config.sources.remove(0));
                    break;
                }
            }
        }
        out
    })
}

/// Every provider's signature-header parsing and verification, then inspection (event id,
/// type, fingerprint), over a request built from the input: the first byte picks the provider,
/// the rest is `name: value` header lines, a blank line, and the body.
pub fn verify_headers(data: &[u8]) {
    let sources = sources();
    assert!(sources.len() >= 3, "stripe, github and standard sources load");
    let Some((&pick, rest)) = data.split_first() else { return };
    let source = &sources[usize::from(pick) % sources.len()];
    let split = rest.windows(2).position(|w| w == b"\n\n").unwrap_or(rest.len());
    let (head, body) = (&rest[..split], rest.get(split + 2..).unwrap_or(&[]));
    let headers = head
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let name = String::from_utf8_lossy(&line[..colon]).trim().to_ascii_lowercase();
            Some((name, line[colon + 1..].trim_ascii().to_vec()))
        })
        .collect();
    let req = Request {
        method: "POST".to_owned(),
        target: "/webhooks/s".to_owned(),
        headers,
        body: body.to_vec(),
        keep_alive: true,
    };
    let now = 1_767_225_600; // 2026-01-01T00:00:00Z: fixed, so runs replay exactly
    let _ = hookwall::verify::verify(source, &req, now);
    let _ = hookwall::inspect::inspect(source, &req);
}

/// The config loader on arbitrary text: never panics, and every error names a field.
pub fn config_loader(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(errors) = Config::from_toml_str(text, Path::new("fuzz.toml"), &|_| None) {
        for e in &errors.0 {
            assert!(!e.to_string().is_empty(), "an error says something");
        }
    }
}

/// GitHub form deliveries (`application/x-www-form-urlencoded`, the JSON in the single
/// `payload` field), parsed as the inspector parses them: the input is the body (the first byte
/// picks a spelling of the content type), correctly signed so it passes verification and
/// reaches the form decoding. An accepted body has exactly one `payload` field, its event id is
/// the delivery header and its fingerprint is over the RAW body (R11), never the decoded one.
pub fn form_body(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else { return };
    let source =
        sources().iter().find(|s| s.provider == Provider::Github).expect("a github source loads");
    let content_type: &[u8] = match pick % 4 {
        0 => b"application/x-www-form-urlencoded",
        1 => b"Application/X-WWW-Form-Urlencoded; charset=utf-8",
        2 => b"application/x-www-form-urlencoded ; q=1",
        _ => b"application/x-www-form-urlencodedx",
    };
    let hookwall::verify::Key::Hmac(key) = &source.secrets[0].key else {
        panic!("a github secret is an HMAC key");
    };
    let mac = ring::hmac::sign(key, body);
    let req = Request {
        method: "POST".to_owned(),
        target: "/webhooks/s".to_owned(),
        headers: [
            ("content-type".to_owned(), content_type.to_vec()),
            ("x-github-delivery".to_owned(), b"72d3162e".to_vec()),
            ("x-github-event".to_owned(), b"push".to_vec()),
            ("x-hub-signature-256".to_owned(), format!("sha256={}", hex::encode(mac)).into_bytes()),
        ]
        .into_iter()
        .collect(),
        body: body.to_vec(),
        keep_alive: true,
    };
    let now = 1_767_225_600;
    assert!(
        hookwall::verify::verify(source, &req, now).is_ok(),
        "a correctly signed body verifies"
    );
    if let Ok(inspected) = hookwall::inspect::inspect(source, &req) {
        assert_eq!(inspected.event_id, "72d3162e", "GitHub's id is the delivery header");
        let raw = ring::digest::digest(&ring::digest::SHA256, body);
        assert_eq!(inspected.fingerprint, raw.as_ref(), "the fingerprint is over the raw body");
        if pick % 4 != 3 {
            let payloads = form_urlencoded::parse(body).filter(|(n, _)| n == "payload").count();
            assert_eq!(payloads, 1, "an admitted form has exactly one payload field");
        }
    }
}

/// The admin API's JSON request body (`{"reason": …}` of replay and drop): never panics; an
/// accepted reason is trimmed, non-empty and within `REASON_BYTES_MAX`; a required reason is
/// never missing; every refusal has its documented code.
pub fn admin_json(data: &[u8]) {
    use hookwall::admin::api::{parse_reason, REASON_BYTES_MAX};
    for required in [false, true] {
        match parse_reason(data, required) {
            Ok(Some(reason)) => {
                assert!(!reason.is_empty() && reason.len() <= REASON_BYTES_MAX);
                assert_eq!(reason.trim(), reason, "reasons are trimmed");
            }
            Ok(None) => assert!(!required, "a required reason is present"),
            Err(refused) => {
                assert!(matches!(refused.code, "bad_body" | "reason_required"));
                assert!(!refused.message.is_empty());
            }
        }
    }
}
