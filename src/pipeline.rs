//! The life of one webhook request as named phases (pingora style): route → verify → (answer a
//! provider handshake) → inspect → admit. Everything here is pure and per-request: it reads no
//! clock of its own (`now` comes in), does no IO, and takes no locks; the only hand-off is the
//! [`Admission`] given to the ledger by the caller.

use std::collections::HashMap;
use std::sync::Arc;

use crate::answer::Answer;
use crate::config::{Config, SourceConfig};
use crate::http::{Head, Request};
use crate::inspect::{self, SchemaReject};
use crate::ledger::{Admission, RejectedRecord, Reply};
use crate::signed_url::{self, Origin, TrustedProxies};
use crate::verify::{self, Reject};

/// Ingress routes: `POST /webhooks/{source id}` (SPEC §3).
pub const WEBHOOK_PREFIX: &str = "/webhooks/";

/// The routing table of one configuration: source id → index in `Config::sources`.
#[derive(Debug)]
pub struct Routes {
    by_id: HashMap<String, usize>,
    /// Per source index: whether a `HEAD` is the provider's URL check (Mandrill).
    answers_head: Vec<bool>,
}

impl Routes {
    /// Builds the table from the validated config (ids are unique there).
    pub fn new(config: &Config) -> Routes {
        let by_id = config.sources.iter().enumerate().map(|(i, s)| (s.id.clone(), i)).collect();
        let answers_head = config
            .sources
            .iter()
            .map(|s| s.provider == crate::provider::Provider::Mandrill)
            .collect();
        Routes { by_id, answers_head }
    }

    /// The source a path names, if any (for counting early answers under their source).
    pub fn lookup(&self, path: &str) -> Option<usize> {
        path.strip_prefix(WEBHOOK_PREFIX).and_then(|id| self.by_id.get(id)).copied()
    }

    /// Phase 1, on the head alone: which source, or the early answer (404, 405) — decided
    /// before any body byte is read.
    ///
    /// # Errors
    /// `Answer::UnknownSource` or `Answer::MethodNotAllowed`; `Answer::Challenge` for a `HEAD`
    /// to a `mandrill` source: Mandrill checks a webhook URL with a HEAD request when the
    /// webhook is added and wants a 200 ([`crate::provider::mandrill`]), answered without a
    /// body and admitting nothing (`http::write_head_ok`). Other providers' sources answer
    /// every method but POST with 405.
    pub fn route(&self, head: &Head) -> Result<usize, Answer> {
        let source = self.lookup(head.path()).ok_or(Answer::UnknownSource)?;
        if head.method == "HEAD" && self.answers_head.get(source).copied().unwrap_or(false) {
            return Err(Answer::Challenge);
        }
        if head.method != "POST" {
            return Err(Answer::MethodNotAllowed);
        }
        if head.content_encoded {
            // A compressed (or otherwise encoded) body: no provider of SPEC §4 sends one, and
            // their signatures cover the bytes they send uncompressed. Refused from the head,
            // before anything is read or verified; nothing is recorded.
            return Err(Answer::UnsupportedEncoding);
        }
        Ok(source)
    }
}

/// A provider handshake to answer instead of admitting the request: Slack's
/// `url_verification` and the like. Built only after the request verified (never for an
/// unauthenticated one) and never admitted into the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// `Content-Type` of the answer.
    pub content_type: &'static str,
    /// The answer's body, as the provider documents it.
    pub body: Vec<u8>,
}

/// What to do with a complete, routed request.
pub enum Handled {
    /// Answer now; nothing is admitted. The id is echoed when known.
    Answer(Answer, Option<String>),
    /// An authentic handshake: answer 200 with this body; nothing is admitted or recorded.
    Challenge(Challenge),
    /// A schema reject: answer 400 and keep this minimised record (R23).
    Rejected(RejectedRecord),
    /// Authentic, fresh and well-formed: hand to the ledger, answer with its decision.
    Admit(Admission),
    /// A batch delivery (SPEC §4): one admission per event, in body order, whose replies are
    /// joined into the one reply `make_reply` gave ([`crate::batch`]); hand each to the ledger
    /// and answer with the joined decision.
    AdmitBatch(Vec<Admission>),
}

/// Maps a verification failure to its answer (all 401, SPEC §3).
pub fn reject_answer(reject: Reject) -> Answer {
    match reject {
        Reject::SignatureMissing => Answer::SignatureMissing,
        Reject::SignatureInvalid => Answer::SignatureInvalid,
        Reject::Stale => Answer::Stale,
    }
}

/// Phases 2–4 for one complete request of `source`: verify (R1–R7), inspect (R8, R11, R13,
/// R23), and build the admission. `now_unix_ms` is the receive time; `make_reply` is called
/// only when the result is [`Handled::Admit`] (rejects allocate no reply path). `origin` and
/// `proxies` give URL-signing providers their signed URL ([`signed_url`]).
pub fn handle(
    source_index: usize,
    source: &SourceConfig,
    req: Request,
    (origin, proxies): (Origin, &TrustedProxies),
    now_unix_ms: u64,
    make_reply: &mut dyn FnMut() -> Reply,
) -> Handled {
    let now_unix_s = i64::try_from(now_unix_ms / 1000).expect("seconds since 1970 fit in i64");
    let url = if source.provider.signs_url() {
        signed_url::signed_url(&req, origin, proxies, source.public_url.as_deref())
    } else {
        None
    };
    // Mandrill's URL check is signed with its generic key, not the source's (admits nothing).
    if source.provider == crate::provider::Provider::Mandrill {
        let check = url.as_deref().and_then(|url| crate::provider::mandrill::url_check(&req, url));
        if let Some(challenge) = check {
            return Handled::Challenge(challenge);
        }
    }
    let verified = match verify::verify_signed_url(source, &req, url.as_deref(), now_unix_s) {
        Ok(v) => v,
        Err(reject) => return Handled::Answer(reject_answer(reject), None),
    };
    let key = &source.secrets[verified.secret_index].key;
    if let Some(challenge) = crate::provider::challenge(source.provider, key, &req) {
        return Handled::Challenge(challenge);
    }
    if crate::provider::source_batches(source) {
        return batch(source_index, source, &req, verified, now_unix_ms, make_reply);
    }
    let inspected = match inspect::inspect(source, &req) {
        Ok(i) => i,
        Err(reason) => return Handled::Rejected(rejected(source_index, &req, reason, now_unix_ms)),
    };
    let key = identity_key(source, &inspected.event_id);
    let content_type = req.header("content-type").map(<[u8]>::to_vec);
    Handled::Admit(Admission {
        key,
        source: u32::try_from(source_index).expect("source count is bounded"),
        fingerprint: inspected.fingerprint,
        event_type: inspected.event_type,
        secret_id: source.secrets[verified.secret_index].id.clone(),
        signed_at: verified.signed_at,
        received_at_ms: now_unix_ms,
        content_type,
        body: req.body,
        ordering: inspected.ordering,
        reply: make_reply(),
    })
}

/// The ledger's identity key of an event (R8): `tenant/source/event id`, the stable event id
/// scoped by tenant and source. `join` sizes it once; `format!` grew its string four times
/// per admission.
fn identity_key(source: &SourceConfig, event_id: &str) -> String {
    [source.tenant.as_str(), source.id.as_str(), event_id].join("/")
}

/// The admissions of a verified batch delivery, or its schema reject.
fn batch(
    source_index: usize,
    source: &SourceConfig,
    req: &Request,
    verified: verify::Verified,
    now_unix_ms: u64,
    make_reply: &mut dyn FnMut() -> Reply,
) -> Handled {
    let events = match inspect::inspect_batch(source, req) {
        Ok(events) => events,
        Err(reason) => return Handled::Rejected(rejected(source_index, req, reason, now_unix_ms)),
    };
    let replies = crate::batch::split(make_reply(), events.len());
    let admissions = events
        .into_iter()
        .zip(replies)
        .map(|(event, reply)| Admission {
            key: identity_key(source, &event.inspected.event_id),
            source: u32::try_from(source_index).expect("source count is bounded"),
            fingerprint: event.inspected.fingerprint,
            event_type: event.inspected.event_type,
            secret_id: source.secrets[verified.secret_index].id.clone(),
            signed_at: verified.signed_at,
            received_at_ms: now_unix_ms,
            content_type: Some(b"application/json".to_vec()),
            body: event.body,
            ordering: event.inspected.ordering,
            reply,
        })
        .collect();
    Handled::AdmitBatch(admissions)
}

fn rejected(
    source: usize,
    req: &Request,
    reason: SchemaReject,
    now_unix_ms: u64,
) -> RejectedRecord {
    RejectedRecord {
        source: u32::try_from(source).expect("source count is bounded"),
        received_at_ms: now_unix_ms,
        reason: reason.reason(),
        event_id: None,
        body_bytes: req.body.len(),
        fingerprint: inspect::fingerprint(&req.body),
    }
}

/// The event id part of an idempotency key `tenant/source/event id` (the id may itself
/// contain `/`).
pub fn event_id_of(key: &str) -> &str {
    key.splitn(3, '/').nth(2).unwrap_or("")
}

/// Shared, read-only state of the request pipeline, one per running configuration.
#[derive(Debug)]
pub struct Pipeline {
    /// The validated configuration.
    pub config: Arc<Config>,
    /// Source routing.
    pub routes: Routes,
    /// `server.trusted_proxies`, parsed.
    pub proxies: TrustedProxies,
}

impl Pipeline {
    /// Builds the pipeline for `config`.
    pub fn new(config: Arc<Config>) -> Pipeline {
        let routes = Routes::new(&config);
        let proxies = TrustedProxies::parse(&config.server.trusted_proxies);
        Pipeline { config, routes, proxies }
    }
}
