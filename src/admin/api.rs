//! The operator API under `/admin/*` (SPEC §6, R20): list and inspect events, replay and drop
//! them, read the audit log, pause and resume destinations. JSON shapes are documented in
//! `docs/admin.md`.
//!
//! Every request is authenticated first ([`super::auth`]). Ledger reads run on the blocking
//! pool; replays and drops are [`Operation`]s carried out by the shard writer that owns the key
//! (the only writer of a shard's keys), committed with fsync together with their audit record,
//! and answered after that commit. On the PostgreSQL ledger the same routes read the shared
//! tables and an operation is one transaction (row locked, audit row inserted) on the
//! blocking pool, answered after its COMMIT (`ledger/postgres/admin.rs`).

// Errors here are the HTTP answer itself, built once per admin request, off the hot path.
#![allow(clippy::result_large_err)]

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::auth::{self, Caller};
use super::{json as respond_json, AdminState};
use crate::dispatch::Controls;
use crate::ledger::{
    AuditRecord, EventDetail, EventQuery, EventState, EventView, LedgerHandle, OpAction, OpDone,
    OpRefused, Operation, Page, QuarantineView, RejectedView,
};

/// Most bytes of an admin request body (`{"reason": …}`); more is answered 413.
const ADMIN_BODY_BYTES_MAX: usize = 16 * 1024;
/// Longest operator reason kept in the audit log, in bytes; longer is answered 400.
pub const REASON_BYTES_MAX: usize = 1024;
/// Default page size of the list routes.
const LIST_LIMIT_DEFAULT: usize = 100;
/// Largest `limit` accepted by the list routes.
pub const LIST_LIMIT_MAX: usize = 1000;

/// What the operator routes act on: the ledger and the destinations' pause switches.
pub struct Operator {
    /// The ledger, RocksDB or PostgreSQL (the same routes and answers on both; on PostgreSQL
    /// every node sees and acts on the shared tables).
    pub ledger: LedgerHandle,
    /// Destination pause switches shared with the dispatcher.
    pub controls: std::sync::Arc<Controls>,
}

/// States a list may filter on: the event states of SPEC §5 plus the two side lists.
const LIST_STATES: &str = "received, failed, delivered, dead, dropped, quarantined, rejected";

type Reply = Response<Full<Bytes>>;

/// Header set on every `/admin/*` answer (value `1`): how `hookwall dlq` knows it reached
/// hookwall's admin API and not another server at a wrong `--admin` address.
pub const ADMIN_API_HEADER: &str = "hookwall-admin-api";

/// Answers one `/admin/*` request.
pub(super) async fn handle(
    state: std::sync::Arc<AdminState>,
    request: Request<hyper::body::Incoming>,
) -> Reply {
    let caller = match auth::check(state.config.get().admin.token.as_ref(), request.headers()) {
        Ok(caller) => caller,
        Err(reply) => return reply,
    };
    let Some(operator) = state.operator.as_ref() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the ledger is not open");
    };
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or("").to_owned();
    let segments: Vec<&str> = path.trim_start_matches("/admin").split('/').skip(1).collect();
    let (get, post) = (request.method() == Method::GET, request.method() == Method::POST);
    let read_timeout = state.config.get().server.read_timeout;
    match segments.as_slice() {
        ["events"] if get => list(&state, operator, &query).await,
        ["events", key] if get => match decode_key(key) {
            Ok(key) => detail(operator, key).await,
            Err(reply) => reply,
        },
        ["events", key, action @ ("replay" | "drop")] if post => {
            let key = match decode_key(key) {
                Ok(key) => key,
                Err(reply) => return reply,
            };
            let action = if *action == "replay" { OpAction::Replay } else { OpAction::Drop };
            // SPEC §6: every operator action is audited with its reason.
            match reason(request, true, read_timeout).await {
                Ok(reason) => operate(operator, key, action, &caller, reason).await,
                Err(reply) => reply,
            }
        }
        ["audit"] if get => audit(operator, &query).await,
        ["destinations"] if get => destinations(&state, operator),
        ["destinations", id, switch @ ("pause" | "resume")] if post => {
            let (id, pause) = ((*id).to_owned(), *switch == "pause");
            match reason(request, true, read_timeout).await {
                Ok(reason) => {
                    switch_destination(&state, operator, &id, pause, &caller, reason).await
                }
                Err(reply) => reply,
            }
        }
        ["events"] | ["events", _] | ["audit"] | ["destinations"] => not_allowed(&path, "GET"),
        ["events", _, "replay" | "drop"] | ["destinations", _, "pause" | "resume"] => {
            not_allowed(&path, "POST")
        }
        _ => error(StatusCode::NOT_FOUND, "not_found", &format!("no admin route {path}")),
    }
}

/// 405 naming the one method `path` answers.
fn not_allowed(path: &str, allow: &'static str) -> Reply {
    let message = format!("{path} answers {allow} only");
    let mut reply = error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", &message);
    let value = hyper::header::HeaderValue::from_static(allow);
    reply.headers_mut().insert(hyper::header::ALLOW, value);
    reply
}

/// `{"status": code, "message": text}` with `status`.
pub(super) fn error(status: StatusCode, code: &str, message: &str) -> Reply {
    respond_json(status, json!({ "status": code, "message": message }).to_string())
}

fn ok(body: &Value) -> Reply {
    respond_json(StatusCode::OK, body.to_string())
}

/// The idempotency key from its percent-encoded path segment (`/` is `%2F`). 400 `bad_key`
/// (docs/admin.md) when the segment is empty, holds a `%` not followed by two hex digits
/// (RFC 3986 §2.1; the decoder would keep such text literally and the lookup answer 404), or is
/// not UTF-8 once decoded.
fn decode_key(segment: &str) -> Result<String, Reply> {
    let bytes = segment.as_bytes();
    let malformed = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%' && !bytes.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        let message =
            "the key holds a '%' not followed by two hex digits (percent-encode it as %25)";
        return Err(error(StatusCode::BAD_REQUEST, "bad_key", message));
    }
    let decoded = percent_encoding::percent_decode_str(segment).decode_utf8().map_err(|_| {
        error(StatusCode::BAD_REQUEST, "bad_key", "the key is not UTF-8 once percent-decoded")
    })?;
    if decoded.is_empty() {
        return Err(error(StatusCode::BAD_REQUEST, "bad_key", "the key is empty"));
    }
    Ok(decoded.into_owned())
}

/// The `reason` of a JSON body `{"reason": "…"}`; an empty body means none. `required`:
/// none (or a blank one) is answered 400 `reason_required`; a body that has not fully arrived
/// within `read_timeout` (`server.read_timeout`, as on the ingress) is answered 408 `timeout`.
async fn reason(
    request: Request<hyper::body::Incoming>,
    required: bool,
    read_timeout: std::time::Duration,
) -> Result<Option<String>, Reply> {
    // A declared length over the limit is refused at once, before any byte is waited for.
    let declared = hyper::body::Body::size_hint(request.body()).lower();
    if declared > ADMIN_BODY_BYTES_MAX as u64 {
        let message = format!("the body is over {ADMIN_BODY_BYTES_MAX} bytes");
        return Err(error(StatusCode::PAYLOAD_TOO_LARGE, "too_large", &message));
    }
    let body = Limited::new(request.into_body(), ADMIN_BODY_BYTES_MAX).collect();
    let Ok(body) = tokio::time::timeout(read_timeout, body).await else {
        let message =
            format!("the body did not arrive within {read_timeout:?} (server.read_timeout)");
        return Err(error(StatusCode::REQUEST_TIMEOUT, "timeout", &message));
    };
    let body = match body {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            let message = format!("the body is over {ADMIN_BODY_BYTES_MAX} bytes or was cut");
            return Err(error(StatusCode::PAYLOAD_TOO_LARGE, "too_large", &message));
        }
    };
    parse_reason(&body, required)
        .map_err(|refused| error(StatusCode::BAD_REQUEST, refused.code, &refused.message))
}

/// Why an admin request body was refused: answered 400 with this `status` code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyRefused {
    /// `bad_body` or `reason_required`.
    pub code: &'static str,
    /// What is wrong, for the operator.
    pub message: String,
}

/// The `reason` of an admin request body (`POST /admin/events/{key}/replay|drop`, docs/admin.md):
/// blank (only ASCII whitespace) means none; otherwise a JSON object whose `reason` is absent,
/// `null` or a string (trimmed; blank means none) of at most [`REASON_BYTES_MAX`] bytes.
///
/// # Errors
/// `bad_body` for anything else (not JSON, not an object, a field other than `reason`, `reason`
/// twice, a non-string reason, too long);
/// `reason_required` when `required` and there is no reason.
pub fn parse_reason(body: &[u8], required: bool) -> Result<Option<String>, BodyRefused> {
    let refuse = |code: &'static str, message: String| BodyRefused { code, message };
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        // Only `reason`, once: a misspelt or extra field (`"force": true`) or a second
        // `reason` is refused rather than silently ignored, so the operator learns the action
        // did not take what they wrote.
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct ActionBody {
            reason: Option<Value>,
        }
        if body.trim_ascii_start().first() != Some(&b'{') {
            let message = "the body must be a JSON object {\"reason\": \"...\"}";
            return Err(refuse("bad_body", message.to_owned()));
        }
        let parsed: ActionBody = serde_json::from_slice(body).map_err(|e| {
            refuse("bad_body", format!("the body must be JSON {{\"reason\": \"...\"}}: {e}"))
        })?;
        match parsed.reason {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.trim().to_owned()),
            Some(_) => return Err(refuse("bad_body", "reason must be a string".to_owned())),
        }
    };
    let reason = reason.filter(|r| !r.is_empty());
    if let Some(r) = &reason {
        if r.len() > REASON_BYTES_MAX {
            let message = format!("reason is {} bytes; at most {REASON_BYTES_MAX}", r.len());
            return Err(refuse("bad_body", message));
        }
    }
    if required && reason.is_none() {
        let message = "a JSON body {\"reason\": \"...\"} with a non-empty reason is required";
        return Err(refuse("reason_required", message.to_owned()));
    }
    Ok(reason)
}

/// Runs a blocking ledger read off the admin runtime's thread.
async fn blocking<T: Send + 'static>(
    ledger: &LedgerHandle,
    read: impl FnOnce(&LedgerHandle) -> Result<T, crate::ledger::Error> + Send + 'static,
) -> Result<T, Reply> {
    let ledger = ledger.clone();
    match tokio::task::spawn_blocking(move || read(&ledger)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(crate::ledger::Error::Cursor(why))) => {
            Err(error(StatusCode::BAD_REQUEST, "bad_cursor", &format!("cursor {why}")))
        }
        Ok(Err(e)) => {
            tracing::error!(code = "admin_read_failed", error = %e, "An admin ledger read failed.");
            Err(error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the ledger read failed"))
        }
        Err(e) => {
            tracing::error!(code = "admin_read_failed", error = %e, "An admin ledger read panicked.");
            Err(error(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the ledger read failed"))
        }
    }
}

/// The list parameters, checked.
struct ListParams {
    state: Option<String>,
    source: Option<usize>,
    limit: usize,
    cursor: Option<String>,
}

fn list_params(state: &AdminState, query: &str) -> Result<ListParams, Reply> {
    let bad = |message: String| error(StatusCode::BAD_REQUEST, "bad_query", &message);
    let mut p = ListParams { state: None, source: None, limit: LIST_LIMIT_DEFAULT, cursor: None };
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        // `?state=dead&state=failed` is ambiguous: refuse it rather than let the last one win.
        if seen.iter().any(|s| *s == *name) {
            return Err(bad(format!("parameter {name:?} is given more than once")));
        }
        seen.push(name.clone().into_owned());
        match &*name {
            "state" if value.is_empty() => {}
            "state" => {
                let known = EventState::from_code(&value).is_some()
                    || matches!(&*value, "quarantined" | "rejected");
                if !known {
                    return Err(bad(format!("state {value:?} is not one of {LIST_STATES}")));
                }
                p.state = Some(value.into_owned());
            }
            "source" if value.is_empty() => {}
            "source" => {
                let index = state.config.get().sources.iter().position(|s| s.id == *value);
                let Some(index) = index else {
                    return Err(bad(format!("source {value:?} is not configured")));
                };
                p.source = Some(index);
            }
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=LIST_LIMIT_MAX).contains(&n) => p.limit = n,
                _ => return Err(bad(format!("limit {value:?} is not 1..={LIST_LIMIT_MAX}"))),
            },
            "cursor" if value.is_empty() => {}
            "cursor" => p.cursor = Some(value.into_owned()),
            other => {
                let message =
                    format!("unknown parameter {other:?}; known: state, source, limit, cursor");
                return Err(bad(message));
            }
        }
    }
    Ok(p)
}

/// `GET /admin/events?state=&source=&limit=&cursor=`.
async fn list(state: &AdminState, operator: &Operator, query: &str) -> Reply {
    let p = match list_params(state, query) {
        Ok(p) => p,
        Err(reply) => return reply,
    };
    let prefix = p.source.map(|i| {
        let s = &state.config.get().sources[i];
        format!("{}/{}/", s.tenant, s.id)
    });
    let source_ids: Vec<String> = state.config.get().sources.iter().map(|s| s.id.clone()).collect();
    let (cursor, limit) = (p.cursor, p.limit);
    let page: Result<Page<Value>, Reply> = match p.state.as_deref() {
        Some("quarantined") => {
            blocking(&operator.ledger, move |l| {
                let page = l.quarantine_page(prefix.as_deref(), cursor.as_deref(), limit)?;
                Ok(map_page(page, |q| quarantine_json(&q)))
            })
            .await
        }
        Some("rejected") => {
            let source = p.source.map(|i| u32::try_from(i).expect("source count is bounded"));
            blocking(&operator.ledger, move |l| {
                let page = l.rejected_page(source, cursor.as_deref(), limit)?;
                Ok(map_page(page, |r| rejected_json(&r, &source_ids)))
            })
            .await
        }
        other => {
            let query =
                EventQuery { state: other.and_then(EventState::from_code), key_prefix: prefix };
            blocking(&operator.ledger, move |l| {
                let page = l.list_events(&query, cursor.as_deref(), limit)?;
                Ok(map_page(page, |e| event_json(&e)))
            })
            .await
        }
    };
    match page {
        Ok(page) => ok(&json!({ "items": page.items, "next_cursor": page.next_cursor })),
        Err(reply) => reply,
    }
}

fn map_page<T>(page: Page<T>, f: impl Fn(T) -> Value) -> Page<Value> {
    Page { items: page.items.into_iter().map(f).collect(), next_cursor: page.next_cursor }
}

/// RFC 3339 (UTC, milliseconds) of Unix milliseconds ([`crate::clock::rfc3339_ms`]).
fn rfc3339(ms: u64) -> String {
    crate::clock::rfc3339_ms(ms)
}

/// The source id inside an idempotency key `tenant/source/event id`.
fn source_of_key(key: &str) -> &str {
    key.split('/').nth(1).unwrap_or("")
}

/// The list and detail shape of one event (no payload).
fn event_json(e: &EventView) -> Value {
    json!({
        "key": e.key,
        "source": source_of_key(&e.key),
        "state": e.state.code(),
        "attempts": e.attempts,
        "last_error": e.last_error,
        "secret_id": e.secret_id,
        "fingerprint": hex::encode(e.fingerprint),
        "received_at": rfc3339(e.received_at_ms),
        "delivered_at": e.delivered_at_ms.map(rfc3339),
        "next_attempt_at": e.next_attempt_ms.map(rfc3339),
    })
}

fn quarantine_json(q: &QuarantineView) -> Value {
    json!({
        "key": q.key,
        "source": source_of_key(&q.key),
        "state": "quarantined",
        "reason": "conflict",
        "first_fingerprint": q.first_fingerprint,
        "new_fingerprint": q.new_fingerprint,
        "received_at": rfc3339(q.received_at_ms),
    })
}

fn rejected_json(r: &RejectedView, source_ids: &[String]) -> Value {
    json!({
        "key": null,
        "source": source_ids.get(r.source as usize),
        "state": "rejected",
        "reason": r.reason,
        "event_id": r.event_id,
        "body_bytes": r.body_bytes,
        "fingerprint": r.fingerprint,
        "received_at": rfc3339(r.received_at_ms),
    })
}

/// `GET /admin/events/{key}`: the event, and its payload while retained.
async fn detail(operator: &Operator, key: String) -> Reply {
    let found = blocking(&operator.ledger, move |l| l.event_detail(&key)).await;
    match found {
        Ok(Some(d)) => ok(&detail_json(&d)),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no event with this key (never admitted, or its identity retention ran out)",
        ),
        Err(reply) => reply,
    }
}

fn detail_json(d: &EventDetail) -> Value {
    let mut v = event_json(&d.event);
    let text = d.payload.as_deref().and_then(|p| std::str::from_utf8(p).ok());
    v["event_type"] = json!(d.event_type);
    v["content_type"] = json!(d.content_type.as_deref().map(String::from_utf8_lossy));
    v["signed_at"] = json!(d.signed_at);
    v["payload_retained"] = json!(d.payload.is_some());
    let history: Vec<Value> = d
        .attempts
        .iter()
        .map(|a| {
            json!({
                "attempt": a.attempt,
                "at": rfc3339(a.at_ms),
                "outcome": a.outcome,
                "error": a.error,
            })
        })
        .collect();
    v["attempt_history"] = json!(history);
    v["payload"] = json!(text);
    v["payload_base64"] = match (&d.payload, text) {
        (Some(bytes), None) => {
            json!(base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes))
        }
        _ => Value::Null,
    };
    v
}

/// `POST /admin/events/{key}/replay|drop`: through the owning shard writer, answered after
/// the commit that also holds the audit record.
async fn operate(
    operator: &Operator,
    key: String,
    action: OpAction,
    caller: &Caller,
    reason: Option<String>,
) -> Reply {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let op = Operation {
        key: key.clone(),
        action,
        actor: caller.token_id.clone(),
        reason,
        reply: Box::new(move |result| {
            // Err: the client went away; the action is committed (or not) all the same.
            let _ = tx.send(result);
        }),
    };
    // Queued to a shard writer on RocksDB; one transaction on this thread on PostgreSQL.
    let ledger = operator.ledger.clone();
    if tokio::task::spawn_blocking(move || ledger.operate(op)).await.is_err() {
        tracing::error!(code = "admin_read_failed", "An operator action panicked.");
    }
    let result = rx.await.unwrap_or(Err(OpRefused::Unavailable));
    operation_reply(&key, action, result)
}

fn operation_reply(key: &str, action: OpAction, result: Result<OpDone, OpRefused>) -> Reply {
    match result {
        Ok(done) => {
            tracing::info!(
                code = "operator_action",
                action = action.code(),
                key,
                before = done.before.code(),
                "Operator action carried out."
            );
            let status = if action == OpAction::Replay { "replayed" } else { "dropped" };
            ok(&json!({
                "status": status,
                "key": key,
                "state_before": done.before.code(),
                "state": done.after.code(),
            }))
        }
        Err(OpRefused::NotFound) => {
            error(StatusCode::NOT_FOUND, "not_found", "no event with this key")
        }
        Err(OpRefused::State(state)) => {
            let allowed = match action {
                OpAction::Replay => "dead, dropped or failed",
                OpAction::Drop => "received, failed or dead",
            };
            let message = format!(
                "cannot {} an event that is {}; allowed from {allowed}",
                action.code(),
                state.code()
            );
            let body =
                json!({ "status": "wrong_state", "state": state.code(), "message": message });
            respond_json(StatusCode::CONFLICT, body.to_string())
        }
        Err(OpRefused::PayloadGone) => error(
            StatusCode::GONE,
            "payload_gone",
            "the event's payload is no longer retained; it cannot be replayed",
        ),
        Err(OpRefused::Unavailable) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the ledger could not durably record the action; nothing changed",
        ),
    }
}

/// `GET /admin/audit?limit=&cursor=`: operator actions, newest first.
async fn audit(operator: &Operator, query: &str) -> Reply {
    let (mut limit, mut cursor) = (LIST_LIMIT_DEFAULT, None);
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        // As on `/admin/events`: a repeated parameter is ambiguous, never last-wins.
        if seen.iter().any(|s| *s == *name) {
            let message = format!("parameter {name:?} is given more than once");
            return error(StatusCode::BAD_REQUEST, "bad_query", &message);
        }
        seen.push(name.clone().into_owned());
        match &*name {
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=LIST_LIMIT_MAX).contains(&n) => limit = n,
                _ => {
                    let message = format!("limit {value:?} is not 1..={LIST_LIMIT_MAX}");
                    return error(StatusCode::BAD_REQUEST, "bad_query", &message);
                }
            },
            "cursor" if !value.is_empty() => cursor = Some(value.into_owned()),
            "cursor" => {}
            other => {
                let message = format!("unknown parameter {other:?}; known: limit, cursor");
                return error(StatusCode::BAD_REQUEST, "bad_query", &message);
            }
        }
    }
    let page = blocking(&operator.ledger, move |l| l.audit_page(cursor.as_deref(), limit)).await;
    match page {
        Ok(page) => {
            let items: Vec<Value> = page.items.iter().map(audit_json).collect();
            ok(&json!({ "items": items, "next_cursor": page.next_cursor }))
        }
        Err(reply) => reply,
    }
}

fn audit_json(a: &AuditRecord) -> Value {
    json!({
        "at": rfc3339(a.at_ms),
        "actor": a.actor,
        "action": a.action,
        "key": a.key,
        "destination": a.destination,
        "reason": a.reason,
        "state_before": a.state_before,
    })
}

/// `GET /admin/destinations`: each destination and whether it is paused.
fn destinations(state: &AdminState, operator: &Operator) -> Reply {
    let config = state.config.get();
    let items: Vec<Value> = config
        .destinations
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let breaker = if operator.controls.breaker_open(i) { "open" } else { "closed" };
            json!({ "id": d.id, "paused": operator.controls.paused(i), "breaker": breaker })
        })
        .collect();
    ok(&json!({ "items": items }))
}

/// `POST /admin/destinations/{id}/pause|resume`: flips the switch and appends the action to
/// the audit log.
async fn switch_destination(
    state: &AdminState,
    operator: &Operator,
    id: &str,
    pause: bool,
    caller: &Caller,
    reason: Option<String>,
) -> Reply {
    let Some(index) = state.config.get().destinations.iter().position(|d| d.id == id) else {
        let message = format!("destination {id:?} is not configured");
        return error(StatusCode::NOT_FOUND, "not_found", &message);
    };
    let action = if pause { "pause" } else { "resume" };
    let record = AuditRecord {
        at_ms: crate::clock::now_unix_ms(),
        actor: caller.token_id.clone(),
        action: action.to_owned(),
        key: None,
        destination: Some(id.to_owned()),
        reason,
        state_before: None,
    };
    // Audited first: an action that cannot be recorded is not carried out (R20).
    if let Err(reply) = blocking(&operator.ledger, move |l| l.append_audit(&record)).await {
        return reply;
    }
    let changed =
        if pause { operator.controls.pause(index) } else { operator.controls.resume(index) };
    tracing::info!(
        code = "operator_action",
        destination = id,
        action,
        changed,
        "Operator switched a destination."
    );
    let status = if pause { "paused" } else { "resumed" };
    ok(&json!({ "status": status, "destination": id, "changed": changed }))
}
