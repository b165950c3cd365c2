//! One attempt: POST an event's exact body bytes to its destination with the forwarding headers
//! of SPEC §5, and reduce whatever happens to an [`AttemptResult`]. The only socket-touching
//! part of the dispatcher.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};

use super::classify::AttemptResult;
use crate::ledger::DueEvent;

/// Most response-body bytes read (and discarded) after the status, so the connection can go
/// back to the pool; a larger answer is dropped and its connection closed.
pub(super) const RESPONSE_BODY_BYTES_MAX: usize = 64 * 1024;

/// Longest transport error text kept before classification adds its prefix.
const TRANSPORT_ERROR_BYTES_MAX: usize = 200;

/// Builds the one HTTP client of the dispatcher: rustls with the `ring` provider and the
/// platform's certificate verifier (so `https://` destinations work), no redirects (a 3xx is a
/// permanent answer, SPEC §5), no automatic retries beyond reqwest's protocol NACKs.
///
/// # Errors
/// reqwest could not build the client (e.g. no usable TLS configuration).
pub(super) fn client() -> std::io::Result<reqwest::Client> {
    // Err means a provider is already installed for this process: that one is used.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .tls_backend_rustls()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(USER_AGENT)
        .build()
        .map_err(std::io::Error::other)
}

/// What an attempt needs besides the client: where to, how long, and which provider verified
/// the event (for `Hookwall-Verification`).
pub(super) struct Target {
    /// Destination URL.
    pub url: String,
    /// Per-attempt timeout (whole request: connect, send, status).
    pub timeout: Duration,
    /// Source id (`Hookwall-Source`).
    pub source_id: String,
    /// Provider name (`Hookwall-Verification: provider=…`).
    pub provider: &'static str,
    /// The destination's Standard Webhooks signing key, when `signing_secret` is set.
    pub signing_key: Option<ring::hmac::Key>,
    /// `kind = "nats"`: publish to JetStream instead of POSTing (`super::nats`).
    pub nats: Option<crate::config::NatsTarget>,
    /// Plain `http://` destinations: their connections (`super::h1`); `None` = reqwest
    /// (`https://`).
    pub route: Option<std::sync::Arc<super::h1::Route>>,
    /// The parsed URL of a plain `http://` destination (with `route`).
    pub endpoint: Option<std::sync::Arc<super::h1::Endpoint>>,
}

/// Sends attempt number `attempt` (1-based) of `event` to an `https://` or NATS destination
/// and classifies the transport outcome (a plain `http://` destination goes to [`send_h1`]).
/// Never returns the URL or payload in error texts.
pub(super) async fn send(
    client: &reqwest::Client,
    target: &Target,
    event: &DueEvent,
    body: Vec<u8>,
    attempt: u32,
) -> AttemptResult {
    // The NATS and reqwest futures are boxed: unboxed they made this future (and so every
    // spawned attempt task) about 10 KiB, copied on each spawn. `http://` attempts do not come
    // here: the dispatcher loop hands them to `send_h1` itself (no task).
    if let Some(nats) = &target.nats {
        return Box::pin(super::nats::publish(target, nats, event, body, attempt)).await;
    }
    let now_unix_s = crate::clock::now_unix_s();
    let headers = header_map(|emit| {
        each_forward_header(target, event, attempt, emit);
        if let Some(key) = &target.signing_key {
            each_signature_header(key, &event.key, now_unix_s, &body, emit);
        }
    });
    Box::pin(send_reqwest(client, target, headers, body)).await
}

/// Whether `target` is a plain `http://` destination, served by `super::h1`.
pub(super) fn is_h1(target: &Target) -> bool {
    target.nats.is_none() && target.route.is_some() && target.endpoint.is_some()
}

/// Hands attempt `attempt` (1-based) of `event` to its plain `http://` destination's
/// connections (`super::h1`), which give the result to `reply`. A target that is not such a
/// destination ([`is_h1`]) gets an `Other` result at once.
pub(super) fn send_h1(
    target: &Target,
    event: &DueEvent,
    body: &[u8],
    attempt: u32,
    reply: super::h1::Reply,
) {
    let (None, Some(route), Some(endpoint)) = (&target.nats, &target.route, &target.endpoint)
    else {
        reply.send(AttemptResult::Other("not an http:// destination".to_owned()));
        return;
    };
    let now_unix_s = crate::clock::now_unix_s();
    let request = request_bytes(endpoint, body, |emit| {
        each_forward_header(target, event, attempt, emit);
        if let Some(key) = &target.signing_key {
            each_signature_header(key, &event.key, now_unix_s, body, emit);
        }
    });
    let deadline = tokio::time::Instant::from_std(crate::clock::monotonic()) + target.timeout;
    route.send(super::h1::Job { request, deadline, reply });
}

/// The attempt through reqwest (`https://` destinations).
async fn send_reqwest(
    client: &reqwest::Client,
    target: &Target,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
) -> AttemptResult {
    let request =
        client.post(target.url.as_str()).timeout(target.timeout).headers(headers).body(body);
    match request.send().await {
        Ok(response) => answered(response).await,
        Err(e) => transport_error(&e),
    }
}

/// The status and `Retry-After` of an answer; the body is read (up to a bound) and dropped.
async fn answered(mut response: reqwest::Response) -> AttemptResult {
    let code = response.status().as_u16();
    let retry_after = response.headers().get(RETRY_AFTER).and_then(retry_after_seconds);
    let mut read = 0usize;
    while read <= RESPONSE_BODY_BYTES_MAX {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            // The status already decided the attempt; a body error does not change it.
            Ok(None) | Err(_) => break,
        }
    }
    AttemptResult::Status { code, retry_after }
}

/// `Retry-After: <delta-seconds>`; HTTP dates would need a clock read here and are ignored.
fn retry_after_seconds(value: &HeaderValue) -> Option<Duration> {
    retry_after_text(value.to_str().ok()?)
}

/// [`retry_after_seconds`] of a header value's text.
pub(super) fn retry_after_text(text: &str) -> Option<Duration> {
    text.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Receives one header as it goes on the wire: lower-case name and value bytes, already
/// sendable (no CR, LF or other control byte; see [`each_forward_header`]).
pub(super) type Emit<'a> = dyn FnMut(&'static str, &[u8]) + 'a;

/// One HTTP/1.1 `POST` of `body` to `endpoint` with the headers `each` emits (SPEC §5), as
/// bytes for `super::h1`: request line, `Host`, `User-Agent`, `Content-Length`, the headers,
/// the body. The headers are written straight into the request: no header map, no copy of
/// each value (issue 6: the map was a tenth of the dispatcher's CPU per event).
pub(super) fn request_bytes(
    endpoint: &super::h1::Endpoint,
    body: &[u8],
    each: impl FnOnce(&mut Emit<'_>),
) -> Vec<u8> {
    fn line(out: &mut Vec<u8>, parts: &[&[u8]]) {
        parts.iter().for_each(|p| out.extend_from_slice(p));
        out.extend_from_slice(b"\r\n");
    }
    let mut out = Vec::with_capacity(512 + body.len());
    line(&mut out, &[b"POST ", endpoint.target.as_bytes(), b" HTTP/1.1"]);
    line(&mut out, &[b"host: ", endpoint.authority().as_bytes()]);
    line(&mut out, &[b"user-agent: ", USER_AGENT.as_bytes()]);
    // Written in place (`to_string` was an allocation per attempt).
    let _ = std::io::Write::write_fmt(&mut out, format_args!("content-length: {}\r\n", body.len()));
    each(&mut |name, value| {
        debug_assert!(sendable(value), "{name}: an emitted value must be sendable");
        line(&mut out, &[name.as_bytes(), b": ", value]);
    });
    line(&mut out, &[]);
    out.extend_from_slice(body);
    out
}

/// The headers `each` emits as a map, for reqwest (`https://`) and NATS.
pub(super) fn header_map(each: impl FnOnce(&mut Emit<'_>)) -> HeaderMap {
    let mut h = HeaderMap::new();
    each(&mut |name, value| {
        let value = HeaderValue::from_bytes(value).expect("emitted values are sendable");
        h.insert(HeaderName::from_static(name), value);
    });
    h
}

/// `User-Agent` of every forward.
const USER_AGENT: &str = concat!("hookwall/", env!("CARGO_PKG_VERSION"));

/// Reduces a reqwest error to a short, payload-free [`AttemptResult`].
fn transport_error(e: &reqwest::Error) -> AttemptResult {
    if e.is_timeout() {
        return AttemptResult::Timeout;
    }
    let why = short(&root_cause(e));
    if e.is_connect() {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                return super::classify::connect_failed(io, why);
            }
            cause = c.source();
        }
        AttemptResult::Connect(why)
    } else {
        AttemptResult::Other(why)
    }
}

/// The innermost error text (e.g. `Connection refused (os error 111)`), which names the cause
/// without the URL reqwest's own message carries.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// `text` cut to `TRANSPORT_ERROR_BYTES_MAX` bytes at a character boundary.
pub(super) fn short(text: &str) -> String {
    let mut end = text.len().min(TRANSPORT_ERROR_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The forwarding headers of SPEC §5 for attempt `attempt` of `event`, as a map.
pub(super) fn forward_headers(target: &Target, event: &DueEvent, attempt: u32) -> HeaderMap {
    header_map(|emit| each_forward_header(target, event, attempt, emit))
}

/// Emits the forwarding headers of SPEC §5 for attempt `attempt` of `event`, in this order:
/// `content-type` (the delivery's, when it is a valid header value), `idempotency-key`,
/// `hookwall-source`, `hookwall-event-id`, `hookwall-attempt`, `hookwall-received-at`,
/// `hookwall-verification`. Text values go as they are, or percent-encoded when they hold a `%`
/// or a byte a header cannot carry ([`emit_text`]).
pub(super) fn each_forward_header(
    target: &Target,
    event: &DueEvent,
    attempt: u32,
    emit: &mut Emit<'_>,
) {
    if let Some(ct) = event.content_type.as_deref().filter(|v| sendable(v)) {
        emit(CONTENT_TYPE.as_str(), ct);
    }
    emit_text(emit, "idempotency-key", &event.key);
    emit_text(emit, "hookwall-source", &target.source_id);
    emit_text(emit, "hookwall-event-id", event_id(&event.key));
    // The formatted values through one buffer: a `String` each was three allocations per
    // attempt on the dispatcher (issue 6).
    let mut text = String::with_capacity(96);
    let mut emit_formatted = |name: &'static str, args: std::fmt::Arguments<'_>| {
        use std::fmt::Write as _;
        text.clear();
        let _ = text.write_fmt(args);
        emit_text(emit, name, &text);
    };
    emit_formatted("hookwall-attempt", format_args!("{attempt}"));
    let received = crate::clock::rfc3339_ms_display(event.received_at_ms);
    emit_formatted("hookwall-received-at", format_args!("{received}"));
    emit_formatted(
        "hookwall-verification",
        format_args!("{}", Verification(target.provider, event)),
    );
}

/// Emits the Standard Webhooks signature of a forward (SPEC §5): `webhook-id` = the
/// idempotency key `id` (as the header carries it), `webhook-timestamp` = `now_unix_s` (the
/// attempt time, so a retry is fresh), `webhook-signature` = `v1,` + base64 of HMAC-SHA256 over
/// `{webhook-id}.{webhook-timestamp}.{body}` (ring).
pub(super) fn each_signature_header(
    key: &ring::hmac::Key,
    id: &str,
    now_unix_s: i64,
    body: &[u8],
    emit: &mut Emit<'_>,
) {
    use base64::Engine as _;
    let id = sent_text(id);
    let timestamp = now_unix_s.to_string();
    let mut ctx = ring::hmac::Context::with_key(key);
    for part in [id.as_bytes(), b".", timestamp.as_bytes(), b".", body] {
        ctx.update(part);
    }
    let mac = base64::engine::general_purpose::STANDARD.encode(ctx.sign().as_ref());
    emit("webhook-id", id.as_bytes());
    emit("webhook-timestamp", timestamp.as_bytes());
    emit("webhook-signature", format!("v1,{mac}").as_bytes());
}

/// The provider event id: the idempotency key `tenant/source/event id` after its first two
/// `/` (the id itself may contain `/`).
pub(super) fn event_id(key: &str) -> &str {
    key.splitn(3, '/').nth(2).unwrap_or(key)
}

/// `Hookwall-Verification: provider=…; key_id=…[; skew_s=…]` (the provider and the event) —
/// skew is received-at seconds minus the signed timestamp, omitted when the provider signs
/// none. `Hookwall-Received-At` is RFC 3339 with milliseconds, UTC
/// ([`crate::clock::rfc3339_ms`]).
struct Verification<'a>(&'a str, &'a DueEvent);

impl std::fmt::Display for Verification<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Verification(provider, event) = self;
        write!(f, "provider={provider}; key_id={}", event.secret_id)?;
        if let Some(signed_at) = event.signed_at {
            let received_s = i64::try_from(event.received_at_ms / 1000).unwrap_or(i64::MAX);
            write!(f, "; skew_s={}", received_s.saturating_sub(signed_at))?;
        }
        Ok(())
    }
}

/// Emits `value` as it is (`http` takes bytes from 0x80 up as obs-text), or percent-encoded
/// (every byte outside visible ASCII, and `%`) when it holds a byte a header value cannot carry
/// (control bytes) or a `%`. Ids from config are plain; event ids usually are. The mapping is
/// one-to-one — a value sent as it is has no `%`, an encoded one always has — so two distinct
/// idempotency keys never reach the destination as one `Idempotency-Key`, which it would
/// dedupe (R21: one event lost). Before, a key spelling out an escape (`a%01`) was sent as it
/// is and collided with the encoding of another (`a` and the byte 0x01).
fn emit_text(emit: &mut Emit<'_>, name: &'static str, value: &str) {
    emit(name, sent_text(value).as_bytes());
}

/// `value` as a header carries it: as it is, or percent-encoded when it holds a `%` or a byte
/// a header value cannot carry ([`sendable`]).
fn sent_text(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains('%') || !sendable(value.as_bytes()) {
        std::borrow::Cow::Owned(encoded(value))
    } else {
        std::borrow::Cow::Borrowed(value)
    }
}

/// Whether every byte may stand in a header value as it is: visible ASCII, space, tab and
/// obs-text (0x80 up), RFC 9110 §5.5 — the rule of `http::HeaderValue::from_bytes`.
fn sendable(value: &[u8]) -> bool {
    value.iter().all(|&b| (b >= 0x20 && b != 0x7f) || b == b'\t')
}

fn encoded(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if (0x21..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
pub(in crate::dispatch) mod tests {
    use super::*;

    pub(in crate::dispatch) fn event(signed_at: Option<i64>) -> DueEvent {
        DueEvent {
            shard: 0,
            seq: 1,
            due_ms: 0,
            key: "acme/stripe-billing/evt_1/x".to_owned(),
            source: 0,
            attempts: 0,
            received_at_ms: 1_700_000_000_123,
            secret_id: "k13".to_owned(),
            signed_at,
            content_type: Some(b"application/json".to_vec()),
            body: b"{}".to_vec(),
            ordering: None,
        }
    }

    pub(in crate::dispatch) fn target() -> Target {
        Target {
            url: "http://127.0.0.1:1/".to_owned(),
            timeout: Duration::from_secs(1),
            source_id: "stripe-billing".to_owned(),
            provider: "stripe",
            signing_key: None,
            nats: None,
            route: None,
            endpoint: None,
        }
    }

    /// The Standard Webhooks specification's published example: secret, id, timestamp and
    /// payload give exactly this `v1` signature.
    #[test]
    fn signing_matches_the_standard_webhooks_example() {
        let key = crate::provider::standard::whsec_key(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "Standard Webhooks",
        )
        .expect("the example secret is valid");
        let body = br#"{"test": 2432232314}"#;
        let h = header_map(|emit| {
            each_signature_header(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body, emit);
        });
        let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("<missing>");
        assert_eq!(get("webhook-id"), "msg_p5jXN8AQM9LWM0D4loKWxJek");
        assert_eq!(get("webhook-timestamp"), "1614265330");
        assert_eq!(get("webhook-signature"), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn headers_follow_spec_section_5() {
        let h = forward_headers(&target(), &event(Some(1_699_999_990)), 2);
        let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("<missing>");
        assert_eq!(get("content-type"), "application/json");
        assert_eq!(get("idempotency-key"), "acme/stripe-billing/evt_1/x");
        assert_eq!(get("hookwall-source"), "stripe-billing");
        assert_eq!(get("hookwall-event-id"), "evt_1/x");
        assert_eq!(get("hookwall-attempt"), "2");
        assert_eq!(get("hookwall-received-at"), "2023-11-14T22:13:20.123Z");
        assert_eq!(get("hookwall-verification"), "provider=stripe; key_id=k13; skew_s=10");
        let unsigned = forward_headers(&target(), &event(None), 1);
        assert_eq!(
            unsigned.get("hookwall-verification").and_then(|v| v.to_str().ok()),
            Some("provider=stripe; key_id=k13")
        );
    }

    #[test]
    fn unsendable_bytes_are_percent_encoded() {
        assert_eq!(encoded("a b\n%é"), "a%20b%0A%25%C3%A9");
        assert_eq!(event_id("no-slashes"), "no-slashes");
    }

    /// Distinct keys reach the destination as distinct `Idempotency-Key`s, including keys that
    /// spell out another key's escapes.
    #[test]
    fn distinct_keys_keep_distinct_header_values() {
        let keys = [
            "acme/s/xé",
            "acme/s/x%C3%A9",
            "acme/s/x%25C3%25A9",
            "acme/s/a b",
            "acme/s/a%20b",
            "acme/s/a\u{1}",
            "acme/s/a%01",
            "acme/s/100%",
            "acme/s/100%25",
            "acme/s/plain",
        ];
        let mut seen = std::collections::HashSet::new();
        let put = |key: &str| header_map(|emit| emit_text(emit, "idempotency-key", key));
        for key in keys {
            let h = put(key);
            let value = h.get("idempotency-key").expect("inserted").as_bytes().to_vec();
            assert!(seen.insert(value.clone()), "{key:?} collides: {value:?}");
        }
        let h = put("acme/s/evt_1 plain");
        assert_eq!(h.get("idempotency-key").expect("inserted"), "acme/s/evt_1 plain", "as it is");
    }

    /// The bytes the `http://` client writes carry exactly the headers the map for reqwest
    /// and NATS holds, signature included, whatever the key holds (both come from one emitter;
    /// this keeps a second writer from drifting).
    #[test]
    fn request_bytes_carry_the_same_headers_as_the_map() {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"destination secret");
        let endpoint =
            crate::dispatch::h1::Endpoint::parse("http://127.0.0.1:8080/in?x=1").expect("valid");
        for (id, content_type, sent_id) in [
            (
                "acme/stripe-billing/evt_1",
                Some(b"application/json".to_vec()),
                "acme/stripe-billing/evt_1",
            ),
            (
                "acme/stripe-billing/x%41 é\u{1}",
                Some(b"text/plain\n".to_vec()),
                "acme/stripe-billing/x%2541%20%C3%A9%01",
            ),
            ("acme/stripe-billing/évt 2", None, "acme/stripe-billing/évt 2"),
        ] {
            let mut ev = event(Some(1_699_999_990));
            ev.key = id.to_owned();
            ev.content_type = content_type;
            let each = |emit: &mut Emit<'_>| {
                each_forward_header(&target(), &ev, 3, emit);
                each_signature_header(&key, &ev.key, 1_700_000_000, b"{}", emit);
            };
            let bytes = request_bytes(&endpoint, b"{}", each);
            let map = header_map(each);
            let mut parsed = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut parsed);
            let head = req.parse(&bytes).expect("parses");
            assert!(head.is_complete());
            assert_eq!((req.method, req.path), (Some("POST"), Some("/in?x=1")));
            let wire: Vec<(String, Vec<u8>)> = req
                .headers
                .iter()
                .filter(|h| !matches!(h.name, "host" | "user-agent" | "content-length"))
                .map(|h| (h.name.to_owned(), h.value.to_vec()))
                .collect();
            let mapped: Vec<(String, Vec<u8>)> =
                map.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect();
            assert_eq!(wire, mapped, "{id:?}");
            let header = |name: &str| {
                let value = wire.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
                value.unwrap_or_else(|| panic!("{name} missing for {id:?}"))
            };
            // Sent as it is unless it holds `%` or a control byte (obs-text stays as it is).
            assert_eq!(header("idempotency-key"), sent_id.as_bytes(), "{id:?}");
            assert_eq!(header("webhook-id"), sent_id.as_bytes(), "{id:?}");
            // The signature covers the id and timestamp exactly as they went on the wire.
            let mut ctx = ring::hmac::Context::with_key(&key);
            for part in [&header("webhook-id")[..], b".", &header("webhook-timestamp"), b".", b"{}"]
            {
                ctx.update(part);
            }
            use base64::Engine as _;
            let mac = base64::engine::general_purpose::STANDARD.encode(ctx.sign().as_ref());
            assert_eq!(header("webhook-signature"), format!("v1,{mac}").into_bytes(), "{id:?}");
            assert_eq!(
                map.len(),
                9 + usize::from(ev.content_type.as_deref() == Some(b"application/json"))
            );
            assert_eq!(&bytes[bytes.len() - 2..], b"{}");
        }
    }

    #[test]
    fn retry_after_takes_seconds_only() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert_eq!(retry_after_seconds(&v(" 30 ")), Some(Duration::from_secs(30)));
        assert_eq!(retry_after_seconds(&v("Wed, 21 Oct 2015 07:28:00 GMT")), None);
    }
}
