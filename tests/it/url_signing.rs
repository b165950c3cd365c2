//! URL-signing providers (Twilio, Square) through the running server on both back ends
//! (issue 3): the signed URL is rebuilt from the request (`http://127.0.0.1/webhooks/{id}` for
//! a direct delivery), from `X-Forwarded-Proto`/`X-Forwarded-Host` only when the peer is in
//! `server.trusted_proxies` (here `127.0.0.1`; connections from `127.0.0.2` are untrusted), or
//! taken from the source's `public_url`. Each provider's delivery is `accepted`, forwarded once
//! byte for byte, and its retry is a `duplicate`; a proxy that turns https into http or drops
//! the port is covered. Signing is `sign.rs`'s, written from the providers' docs.

use std::net::IpAddr;

use crate::client::{self, Conn, Response};
use crate::harness::{Fixture, Source, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};
use crate::sink::Script;

/// A source of a URL-signing `provider` with one key.
fn source(id: &'static str, provider: Provider) -> Source {
    let secret = if provider == Provider::Twilio { sign::TWILIO_TOKEN } else { sign::SQUARE_KEY };
    Source { id, tenant: "acme", provider, secrets: vec![("k1", secret)], event_types: Vec::new() }
}

/// The URL hookwall rebuilds for a direct delivery to `source` (the test client sends
/// `Host: 127.0.0.1` and hookwall serves plain HTTP here).
fn direct_url(source: &Source) -> String {
    format!("http://127.0.0.1/webhooks/{}", source.id)
}

/// `POST /webhooks/{source}{query}` from local address `from`.
fn post_from(
    f: &Fixture,
    from: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let from: IpAddr = from.parse().expect("an IP address");
    let mut conn = Conn::connect_from(f.hw.ingress, from);
    conn.send(&client::request("POST", path, headers, body));
    conn.read_response()
}

#[track_caller]
fn expect(r: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(r.answer(), (status, code.to_owned()), "{what}: got {r}");
}

/// One delivery of a fresh event signed over `signed_url`, sent to `path` from `from` with
/// `extra` headers: the answer, then (when `accepted`) its single forward and its duplicate.
fn deliver(
    f: &Fixture,
    source: &Source,
    (from, path, extra): (&str, &str, &[(&str, &str)]),
    signed_url: &str,
    expect_code: &str,
) {
    let what = format!("{} via {path} from {from}, signed over {signed_url}", source.id);
    let id = sign::unique_id("evt_url");
    let body = sign::body(source.provider, &id, "first copy");
    let mut headers =
        sign::url_headers(source.provider, source.secrets[0].1, signed_url, &id, &body);
    for (name, value) in extra {
        sign::set_header(&mut headers, name, value);
    }
    let r = post_from(f, from, path, &headers, &body);
    if expect_code != "accepted" {
        expect(&r, 401, expect_code, &what);
        return;
    }
    expect(&r, 200, "accepted", &what);
    let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
    assert!(fwd[0].body == body, "{what}: forwarded byte for byte");
    let verification = fwd[0].header("hookwall-verification");
    assert!(verification.contains(source.provider.name()), "{what}: {verification:?}");
    // The provider's retry: same id, same bytes, same signature.
    expect(&post_from(f, from, path, &headers, &body), 200, "duplicate", &format!("{what}: retry"));
    // A changed body under the same signature.
    let changed = sign::body(source.provider, &id, "second copy");
    let r = post_from(f, from, path, &headers, &changed);
    expect(&r, 401, "signature_invalid", &format!("{what}: changed body"));
}

on_both_io! {
    /// Issue 3: Twilio and Square, direct, behind a trusted proxy, from an untrusted peer that
    /// sends the same forwarded headers, and with `public_url`.
    fn url_signing_providers(io: Io) {
        let twilio = source("twilio-a", Provider::Twilio);
        let square = source("square-a", Provider::Square);
        let twilio_pub = source("twilio-pub", Provider::Twilio);
        let square_pub = source("square-pub", Provider::Square);
        let sources = [twilio.clone(), square.clone(), twilio_pub.clone(), square_pub.clone()];
        let f = Fixture::with(io, Script::always(200), |setup| {
            setup.sources.extend(sources.iter().cloned());
            setup.server_extra = "trusted_proxies = [\"127.0.0.1/32\"]".to_owned();
            setup.source_lines.push((
                "twilio-pub",
                "public_url = \"https://hooks.example.com/twilio\"".to_owned(),
            ));
            setup.source_lines.push((
                "square-pub",
                "public_url = \"https://hooks.example.com:8443/square\"".to_owned(),
            ));
        });
        let proxied = [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "hooks.example.com")];
        for s in [&twilio, &square] {
            let path = format!("/webhooks/{}", s.id);
            let public = format!("https://hooks.example.com/webhooks/{}", s.id);
            // Direct: the URL is rebuilt from Host and the target.
            deliver(&f, s, ("127.0.0.1", &path, &[]), &direct_url(s), "accepted");
            // Behind a TLS-terminating proxy that says so, from a trusted peer.
            deliver(&f, s, ("127.0.0.1", &path, &proxied), &public, "accepted");
            // The same headers from an untrusted peer are ignored: the provider's https URL
            // is not what hookwall checks, and a forger cannot pick the URL either.
            deliver(&f, s, ("127.0.0.2", &path, &proxied), &public, "signature_invalid");
            deliver(&f, s, ("127.0.0.2", &path, &proxied), &direct_url(s), "accepted");
            // A proxy that turns https into http and does not say so: not the signed URL.
            let http_only = [("X-Forwarded-Host", "hooks.example.com")];
            deliver(&f, s, ("127.0.0.1", &path, &http_only), &public, "signature_invalid");
        }
        // Twilio's port quirk: signed with the default port, forwarded without it (and back).
        let path = "/webhooks/twilio-a";
        let with_port = "https://hooks.example.com:443/webhooks/twilio-a";
        deliver(&f, &twilio, ("127.0.0.1", path, &proxied), with_port, "accepted");
        let proxied_port = [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "hooks.example.com:443")];
        let without_port = "https://hooks.example.com/webhooks/twilio-a";
        deliver(&f, &twilio, ("127.0.0.1", path, &proxied_port), without_port, "accepted");
        // Square has no such quirk: a dropped port is another URL.
        let square_port = "https://hooks.example.com:443/webhooks/square-a";
        let sq_path = "/webhooks/square-a";
        deliver(&f, &square, ("127.0.0.1", sq_path, &proxied), square_port, "signature_invalid");

        // `public_url`: what the provider was given, whatever the request looks like; the
        // request's query is appended (Twilio's JSON variant carries `bodySHA256` there).
        let public = "https://hooks.example.com/twilio";
        deliver(&f, &twilio_pub, ("127.0.0.2", "/webhooks/twilio-pub", &[]), public, "accepted");
        let wrong = direct_url(&twilio_pub);
        deliver(&f, &twilio_pub, ("127.0.0.1", "/webhooks/twilio-pub", &[]), &wrong, "signature_invalid");
        let sq_public = "https://hooks.example.com:8443/square";
        deliver(&f, &square_pub, ("127.0.0.1", "/webhooks/square-pub", &proxied), sq_public, "accepted");
        twilio_json(&f, &twilio_pub);

        // Unsigned: 401 signature_missing.
        let id = sign::unique_id("evt_url_unsigned");
        let body = sign::body(Provider::Square, &id, "x");
        let mut headers = sign::url_headers(Provider::Square, sign::SQUARE_KEY, &direct_url(&square), &id, &body);
        sign::remove_header(&mut headers, "x-square-hmacsha256-signature");
        expect(&f.hw.post("square-a", &headers, &body), 401, "signature_missing", "unsigned");

        f.flush_with_marker();
        let recorded = f.sink.recorded();
        for s in &sources {
            let prefix = format!("{}/{}/evt_url_", s.tenant, s.id);
            let keys: Vec<String> = recorded
                .iter()
                .map(|r| r.header("idempotency-key").to_owned())
                .filter(|k| k.starts_with(&prefix))
                .collect();
            let mut distinct = keys.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(keys.len(), distinct.len(), "{}: each event forwarded once", s.id);
        }
    }
}

/// Twilio's JSON variant: the body's hex SHA-256 in the `bodySHA256` query parameter, the
/// signature over the URL alone; a body that does not match the hash is refused.
fn twilio_json(f: &Fixture, source: &Source) {
    let id = sign::unique_id("evt_url_json");
    let body = format!(r#"{{"MessageSid":"SM{id}","Body":"caf\u00e9 \/ ok"}}"#).into_bytes();
    let digest = ring::digest::digest(&ring::digest::SHA256, &body);
    let query = format!("?bodySHA256={}", hex::encode(digest));
    let signed_url = format!("https://hooks.example.com/twilio{query}");
    let headers = sign::url_headers(Provider::Twilio, sign::TWILIO_TOKEN, &signed_url, &id, &body);
    let path = format!("/webhooks/{}{query}", source.id);
    expect(&post_from(f, "127.0.0.1", &path, &headers, &body), 200, "accepted", "JSON");
    let fwd = f.sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
    assert!(fwd[0].body == body, "JSON: forwarded byte for byte");
    expect(&post_from(f, "127.0.0.1", &path, &headers, &body), 200, "duplicate", "JSON retry");
    let mut other = body.clone();
    other[2] ^= 0x20;
    let r = post_from(f, "127.0.0.1", &path, &headers, &other);
    expect(&r, 401, "signature_invalid", "JSON body not matching bodySHA256");
}
