//! Inspection of an authenticated body: stable event id, event type and fingerprint (R8, R11,
//! R13, R23). JSON is parsed with simd-json on a scratch copy; the raw bytes stay untouched.
//!
//! Where each provider puts its id and type (from the provider's documentation):
//!
//! | provider | event id | event type |
//! |---|---|---|
//! | `stripe` | body `"id"` (the Event object's id, `evt_…`) | body `"type"` |
//! | `github` | header `X-GitHub-Delivery` | header `X-GitHub-Event` |
//! | `slack` | body `"event_id"` (`Ev…`) | body `"type"` (`event_callback`; the inner `event.type` is not read) |
//! | `shopify` | header `X-Shopify-Event-Id`, else `X-Shopify-Webhook-Id` | header `X-Shopify-Topic` |
//! | `standard` | header `webhook-id` (signed) | body `"type"`, optional |
//! | `svix` | header `svix-id` (signed) | body `"type"`, optional |
//! | `paddle` | body `"event_id"` (`evt_…`) | body `"event_type"` |
//! | `pagerduty` | body `"event"."id"` | body `"event"."event_type"` |
//! | `twitch` | header `Twitch-Eventsub-Message-Id` (signed) | header `Twitch-Eventsub-Subscription-Type` |
//! | `typeform` | body `"event_id"` | body `"event_type"` |
//! | `segment` | body `"messageId"` | body `"type"` (`track`, `identify`, …) |
//! | `gitlab` | header `Idempotency-Key`, else `X-Gitlab-Event-UUID` | header `X-Gitlab-Event` |
//! | `woocommerce` | header `X-WC-Webhook-Delivery-ID` | header `X-WC-Webhook-Topic` |
//! | `bitbucket` | header `X-Request-UUID` | header `X-Event-Key` |
//! | `twilio` | header `I-Twilio-Idempotency-Token` | none (the body is a form; it is not parsed) |
//! | `square` | body `"event_id"` | body `"type"` |
//! | `sendgrid` | each array element's `"sg_event_id"` ([`inspect_batch`]) | each element's `"event"` |
//! | `discord` | body `"id"` (the interaction's snowflake) | none (Discord's `type` is a number) |
//! | `hmac` | the source's `id_header` or `id_pointer` | the source's `type_header` or `type_pointer`, optional |
//! | `linear` | header `Linear-Delivery` | header `Linear-Event` |
//! | `intercom` | body `"id"` (`notif_…`) | body `"topic"` |
//! | `postmark` | content: `sha256:<hex SHA-256 of the body>` | body `"RecordType"` |
//! | `calendly` | content: `sha256:<hex SHA-256 of the body>` | body `"event"` |
//! | `coinbase` | body `"event"."id"` | body `"event"."type"` |
//! | `zoom` | content: `sha256:<hex SHA-256 of the body>` | body `"event"` |
//! | `mailgun` | body `"event-data"."id"` | body `"event-data"."event"` |
//! | `mandrill` | each `mandrill_events` element's content: `sha256:<hex SHA-256 of its bytes>` | each element's `"event"` |
//! | `adyen` | each item's `pspReference:eventCode:success` ([`adyen::item_identity`]) | each item's `eventCode` |
//! | `adyen`, `hmac_signature = "header"` | content: `sha256:<hex SHA-256 of the body>` | body `"type"` |
//! | `hubspot` | each element's intent: `sha256:<hex>` ([`hubspot::intent_members`]) | each element's `"subscriptionType"` |
//!
//! "Content" means the provider's payload carries no event or delivery id, so the id is derived
//! from the bytes: a retry that repeats the body is a duplicate (see `docs/providers.md`).
//!
//! "Else" means: only when the first header is absent (older senders); when it is present, the
//! second is not looked at.
//!
//! Only top-level members of the JSON object are read (PagerDuty's: those of its top-level
//! `event` object). A member named twice at the top level is
//! ambiguous and refused rather than guessed at (R13).
//!
//! GitHub hooks configured with content type `application/x-www-form-urlencoded` send the body
//! `payload=<url-encoded JSON>` (GitHub's "Webhook events and payloads"). For `github` only, when
//! the request's `Content-Type` media type is `application/x-www-form-urlencoded` (any case,
//! parameters ignored, exactly one `Content-Type` line), the single `payload` field is decoded
//! and inspected as the JSON object; a missing or repeated `payload` is `not_json`. The
//! signature and the fingerprint stay over the raw form body.
//!
//! Event ids are opaque tokens compared byte for byte, so one with whitespace at either edge
//! (or only whitespace) is refused as `bad_event_id`: it is always a sender bug, and it would
//! make two ids that look the same differ.

use simd_json::prelude::*;

use crate::config::SourceConfig;
use crate::http::Request;
use crate::limits::{EVENT_ID_BYTES_MAX, EVENT_TYPE_BYTES_MAX};
use crate::provider::{
    adyen, bitbucket, calendly, coinbase, github, gitlab, hmac, hubspot, intercom, linear, mailgun,
    mandrill, paddle, pagerduty, postmark, segment, sendgrid, shopify, slack, square, standard,
    svix, twilio, twitch, typeform, woocommerce, zoom, Provider,
};

/// What inspection learned about an authenticated delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// The provider's stable event id (R8), at most `EVENT_ID_BYTES_MAX` bytes, no control
    /// characters.
    pub event_id: String,
    /// The event type, when the provider states one.
    pub event_type: Option<String>,
    /// SHA-256 of the authenticated raw body (R11).
    pub fingerprint: [u8; 32],
    /// The value at the source's `ordering_key` (R22), when it has one and the body holds a
    /// string, number or boolean there.
    pub ordering: Option<String>,
}

/// Why an authenticated body is refused (400 `schema_rejected`, kept minimised in `rejected`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SchemaReject {
    /// Body is not valid JSON (or not a JSON object); for a GitHub form delivery, the body has
    /// no single `payload` field or that field is not a JSON object.
    #[error("the body is not a JSON object")]
    NotJson,
    /// No stable event id where the provider puts it (R13: never guess).
    #[error("the body or headers carry no event id where the provider puts it")]
    NoEventId,
    /// Event id empty, too long, with control characters or with whitespace at an edge.
    #[error(
        "the event id is empty, too long, repeated, not a string, has control characters or \
         whitespace at an edge"
    )]
    BadEventId,
    /// Event type missing/too long while `event_types` is set, or not in the allow-list.
    #[error("the event type is not allowed for this source")]
    EventTypeNotAllowed,
}

impl SchemaReject {
    /// Reason code stored with the rejected record and logged.
    pub fn reason(self) -> &'static str {
        match self {
            SchemaReject::NotJson => "not_json",
            SchemaReject::NoEventId => "no_event_id",
            SchemaReject::BadEventId => "bad_event_id",
            SchemaReject::EventTypeNotAllowed => "event_type_not_allowed",
        }
    }
}

/// Finds the event id and type of an authenticated delivery and fingerprints its raw body.
///
/// The body must be a JSON object (parsed on a scratch copy; `req.body` is never modified, R1);
/// for a GitHub form delivery, its `payload` field must be (see the module doc). The id and type
/// come from where `source.provider` documents them (table above). An event type that is empty,
/// longer than `EVENT_TYPE_BYTES_MAX` bytes, not a string, repeated or with control characters
/// is refused; when `source.event_types` is set, a missing type or one not in the list is
/// refused too.
///
/// # Errors
/// [`SchemaReject::NotJson`] when the body is not a JSON object, [`SchemaReject::NoEventId`]
/// when the id is absent, [`SchemaReject::BadEventId`] when it is empty, longer than
/// `EVENT_ID_BYTES_MAX` bytes, has control characters or whitespace at an edge, is not a string
/// or is given twice, [`SchemaReject::EventTypeNotAllowed`] as described above.
pub fn inspect(source: &SourceConfig, req: &Request) -> Result<Inspected, SchemaReject> {
    let mut scratch = json_scratch(source.provider, req)?;
    let members = match source.provider {
        Provider::Slack => Members::top(slack::EVENT_ID_MEMBER, "type"),
        Provider::Typeform => Members::top(typeform::EVENT_ID_MEMBER, typeform::EVENT_TYPE_MEMBER),
        Provider::Paddle => Members::top(paddle::EVENT_ID_MEMBER, paddle::EVENT_TYPE_MEMBER),
        Provider::Segment => Members::top(segment::EVENT_ID_MEMBER, "type"),
        Provider::Square => Members::top(square::EVENT_ID_MEMBER, square::EVENT_TYPE_MEMBER),
        Provider::Pagerduty => Members {
            container: Some(pagerduty::EVENT_MEMBER),
            id: pagerduty::EVENT_ID_MEMBER,
            kind: pagerduty::EVENT_TYPE_MEMBER,
        },
        Provider::Intercom => Members::top(intercom::EVENT_ID_MEMBER, intercom::EVENT_TYPE_MEMBER),
        Provider::Postmark => Members::top("", postmark::EVENT_TYPE_MEMBER),
        Provider::Calendly => Members::top("", calendly::EVENT_TYPE_MEMBER),
        Provider::Zoom => Members::top("", zoom::EVENT_TYPE_MEMBER),
        Provider::Coinbase => Members {
            container: Some(coinbase::EVENT_MEMBER),
            id: coinbase::EVENT_ID_MEMBER,
            kind: coinbase::EVENT_TYPE_MEMBER,
        },
        Provider::Mailgun => Members {
            container: Some(mailgun::EVENT_MEMBER),
            id: mailgun::EVENT_ID_MEMBER,
            kind: mailgun::EVENT_TYPE_MEMBER,
        },
        _ => Members::top("id", "type"),
    };
    let mut owned = OwnedFields::default();
    let body = if source.provider == Provider::Twilio {
        // Twilio's id is a header and its body a form (or JSON bound by `bodySHA256`).
        BodyFields { id: Field::Absent, kind: Field::Absent }
    } else {
        let original = || json_scratch(source.provider, req);
        BodyFields::read_any(&mut scratch, original, &mut owned, members)?
    };
    // `hmac`: the id and type from the source's locators (JSON pointers need a parsed body).
    let located = match source.scheme.hmac.as_deref() {
        Some(scheme) if source.provider == Provider::Hmac => Some((scheme, parsed_body(req))),
        _ => None,
    };
    let (body_id, body_kind) = match &located {
        Some((scheme, parsed)) => (
            locate(req, parsed.as_ref(), Some(&scheme.id)),
            locate(req, parsed.as_ref(), scheme.event_type.as_ref()),
        ),
        None => (body.id, body.kind),
    };
    // Adyen reaches here only with `hmac_signature = "header"`: a single webhook without an
    // event id, identified by its content ([`adyen`] module doc).
    let event_id = if source.provider == Provider::Adyen {
        format!("sha256:{}", hex::encode(fingerprint(&req.body)))
    } else {
        event_id(source.provider, req, body_id)?
    };
    let event_type = event_type(source, req, body_kind)?;
    let fingerprint = intent_fingerprint(source.provider, &req.body)?;
    // Ordered sources only: a second parse of another scratch copy (the first one's tape
    // borrows it), paid by the sources that ask for ordering.
    let ordering = match &source.ordering_key {
        Some(key) => key.value_in(json_scratch(source.provider, req)?),
        None => None,
    };
    Ok(Inspected { event_id, event_type, fingerprint, ordering })
}

/// The fingerprint bound to the event id (R11): SHA-256 of the raw body, except for providers
/// whose retries legitimately change bytes outside the event (SPEC §3: their intent fields
/// instead) — Coinbase Commerce (`attempt_number` per attempt): the raw bytes of `event`;
/// Intercom (`delivery_attempts`, `first_sent_at`…): the raw bytes of `data`; Mailgun (each
/// attempt signs anew): the raw bytes of `event-data`. The member's bytes are taken as sent
/// (never re-serialised); a body with it twice is `not_json`, one without it is fingerprinted
/// whole.
fn intent_fingerprint(provider: Provider, body: &[u8]) -> Result<[u8; 32], SchemaReject> {
    let member = match provider {
        Provider::Coinbase => coinbase::EVENT_MEMBER,
        Provider::Intercom => intercom::INTENT_MEMBER,
        Provider::Mailgun => mailgun::EVENT_MEMBER,
        _ => return Ok(fingerprint(body)),
    };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let raw = serde::Deserializer::deserialize_map(&mut deserializer, OneMember(member))
        .map_err(|_| SchemaReject::NotJson)?;
    deserializer.end().map_err(|_| SchemaReject::NotJson)?;
    // Without the member there is no intent to isolate: the whole body is the fingerprint.
    Ok(raw.map_or_else(|| fingerprint(body), |raw| fingerprint(raw.get().as_bytes())))
}

/// Reads a JSON object, keeping the raw bytes of its member named `.0`; a second member of
/// that name is an error (ambiguous, R13).
struct OneMember(&'static str);

impl<'de> serde::de::Visitor<'de> for OneMember {
    type Value = Option<&'de serde_json::value::RawValue>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a JSON object with one member {:?}", self.0)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.0 {
                let raw: &'de serde_json::value::RawValue = map.next_value()?;
                if found.replace(raw).is_some() {
                    return Err(serde::de::Error::custom("member given twice"));
                }
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// The body as a JSON value, when it is one (for `hmac` pointers).
fn parsed_body(req: &Request) -> Option<serde_json::Value> {
    serde_json::from_slice(&req.body).ok()
}

/// The field an `hmac` locator names: a header, or the JSON value at a pointer.
fn locate<'a>(
    req: &'a Request,
    parsed: Option<&'a serde_json::Value>,
    locator: Option<&'a hmac::Locator>,
) -> Field<'a> {
    match locator {
        None => Field::Absent,
        Some(hmac::Locator::Header(name)) => Field::header(req, name),
        Some(hmac::Locator::Pointer(pointer)) => match parsed.and_then(|v| v.pointer(pointer)) {
            None => Field::Absent,
            Some(serde_json::Value::String(text)) => Field::Text(text),
            Some(_) => Field::NotText,
        },
    }
}

/// SHA-256 of `body` (the fingerprint bound to an event id, R11), via `ring::digest`.
#[must_use]
pub fn fingerprint(body: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, body);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// A scratch copy of the bytes to inspect as the JSON object: the raw body, or for a GitHub
/// form delivery its decoded `payload` field.
fn json_scratch(provider: Provider, req: &Request) -> Result<Vec<u8>, SchemaReject> {
    match provider {
        Provider::Github if is_form(req) => form_payload(&req.body),
        Provider::Twilio => Ok(Vec::new()),
        Provider::Stripe
        | Provider::Github
        | Provider::Slack
        | Provider::Shopify
        | Provider::Standard
        | Provider::Svix
        | Provider::Paddle
        | Provider::Twitch
        | Provider::Typeform
        | Provider::Gitlab
        | Provider::Pagerduty
        | Provider::Segment
        | Provider::Woocommerce
        | Provider::Bitbucket
        | Provider::Square
        | Provider::Sendgrid
        | Provider::Discord
        | Provider::Hmac
        | Provider::Linear
        | Provider::Intercom
        | Provider::Postmark
        | Provider::Calendly
        | Provider::Coinbase
        | Provider::Zoom
        | Provider::Mailgun
        | Provider::Hubspot
        | Provider::Mandrill
        | Provider::Adyen => Ok(req.body.to_vec()),
    }
}

/// Whether the request has exactly one `Content-Type` and its media type is
/// `application/x-www-form-urlencoded` (ASCII case-insensitive, parameters ignored).
fn is_form(req: &Request) -> bool {
    let mut values = req.headers_all("content-type");
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let media_type = value.split(|b| *b == b';').next().unwrap_or_default().trim_ascii();
    media_type.eq_ignore_ascii_case(b"application/x-www-form-urlencoded")
}

/// The decoded value of the single `payload` field of a form body. Decoding is
/// `form_urlencoded`'s (`+` is a space; invalid UTF-8 becomes U+FFFD, harmless here: GitHub's id
/// and type come from headers and the fingerprint is over the raw body).
fn form_payload(body: &[u8]) -> Result<Vec<u8>, SchemaReject> {
    let mut payloads = form_urlencoded::parse(body).filter(|(name, _)| name == "payload");
    match (payloads.next(), payloads.next()) {
        (Some((_, payload)), None) => Ok(payload.into_owned().into_bytes()),
        _ => Err(SchemaReject::NotJson),
    }
}

/// One place an id or type may be found: a body member or a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field<'a> {
    /// Not there.
    Absent,
    /// There once, as text (JSON escapes resolved; header bytes as UTF-8).
    Text(&'a str),
    /// There once, but not text (a JSON number, object…, or a header that is not UTF-8).
    NotText,
    /// There more than once: ambiguous.
    Repeated,
}

impl<'a> Field<'a> {
    /// Adds one more occurrence.
    fn and(self, next: Field<'a>) -> Field<'a> {
        match self {
            Field::Absent => next,
            _ => Field::Repeated,
        }
    }

    /// `self`, or `other()` when `self` is absent.
    fn or_else(self, other: impl FnOnce() -> Field<'a>) -> Field<'a> {
        match self {
            Field::Absent => other(),
            present => present,
        }
    }

    /// The value of header `name`, as a field.
    fn header(req: &'a Request, name: &'a str) -> Field<'a> {
        req.headers_all(name).fold(Field::Absent, |field, value| {
            field.and(std::str::from_utf8(value).map_or(Field::NotText, Field::Text))
        })
    }
}

/// Where a provider puts its id and type in a JSON object body: `id` and `kind` are member
/// names, read at the top level or, when `container` is set, inside that top-level object
/// member (PagerDuty's `event`).
#[derive(Debug, Clone, Copy)]
struct Members {
    container: Option<&'static str>,
    id: &'static str,
    kind: &'static str,
}

impl Members {
    /// Top-level `id` and `type` members with these names.
    const fn top(id: &'static str, kind: &'static str) -> Members {
        Members { container: None, id, kind }
    }
}

/// Bodies up to this many bytes are parsed with the thread's reused simd-json buffers; a
/// larger one gets buffers of its own, freed with it, so one large delivery does not leave
/// each ingress thread holding buffers sized for it for good.
const REUSED_JSON_BUFFERS_BYTES: usize = 64 << 10;

/// Structural characters (`{`, `:`, `,`, string and value starts…) a parse may leave in the
/// thread's buffers. simd-json sizes the next tape by the previous parse's count (24 bytes
/// each), so after a denser body the buffers are replaced: a 64 KiB array of zeros would
/// otherwise make every later small body allocate a 1.5 MiB tape, and keep a 256 KiB index.
const REUSED_JSON_STRUCTURALS_MAX: usize = 4096;

thread_local! {
    /// simd-json's working buffers (structural indexes, string buffer, padded input copy,
    /// stage-2 stack), reused by every parse on this thread: `simd_json::to_tape` makes them
    /// anew per call (two of them the body's size), 0.24 µs of a 0.8 µs Stripe inspection
    /// (`cargo bench --bench hot_path -- inspect`, docs/benchmarks.md run 32). Held: about
    /// 130 KiB per thread from its first parse, at most about 200 KiB (the two 64 KiB buffers,
    /// an index of up to [`REUSED_JSON_STRUCTURALS_MAX`] entries, the stage-2 stack).
    static JSON_BUFFERS: std::cell::RefCell<simd_json::Buffers> =
        std::cell::RefCell::new(simd_json::Buffers::new(REUSED_JSON_BUFFERS_BYTES));
}

/// simd-json's tape of `scratch` (rewritten in place), parsed with this thread's reused
/// buffers when it is at most [`REUSED_JSON_BUFFERS_BYTES`] long.
///
/// # Errors
/// simd-json's error when `scratch` is not valid JSON.
pub(crate) fn parse_tape(scratch: &mut [u8]) -> simd_json::Result<simd_json::tape::Tape<'_>> {
    if scratch.len() > REUSED_JSON_BUFFERS_BYTES {
        return simd_json::to_tape(scratch);
    }
    JSON_BUFFERS.with_borrow_mut(|buffers| {
        let tape = simd_json::to_tape_with_buffers(scratch, buffers);
        // The tape borrows `scratch`, not the buffers: they may be replaced under it.
        if buffers.structural_indexes().len() > REUSED_JSON_STRUCTURALS_MAX {
            *buffers = simd_json::Buffers::new(REUSED_JSON_BUFFERS_BYTES);
        }
        tape
    })
}

/// The id and type members of a JSON object body (see [`Members`]).
struct BodyFields<'a> {
    id: Field<'a>,
    kind: Field<'a>,
}

impl<'a> BodyFields<'a> {
    /// [`BodyFields::read`] of `scratch`; where simd-json refuses it, [`OwnedFields::read`] of
    /// `original()` (the same bytes again: simd-json rewrote `scratch`), kept in `owned`.
    /// simd-json refuses some valid JSON (RFC 8259 §8.2, §6): a `\u` escape of a lone surrogate
    /// (which JavaScript's `JSON.stringify` writes for a cut emoji) and a number no `f64` holds
    /// (`1e99999`). Neither matters to the id or type of a body that holds them elsewhere, and
    /// refusing such a delivery with 400 loses it (GitHub does not retry a 4xx).
    ///
    /// # Errors
    /// As [`BodyFields::read`]: [`SchemaReject::NotJson`] only when serde_json refuses the
    /// body too.
    fn read_any(
        scratch: &'a mut [u8],
        original: impl FnOnce() -> Result<Vec<u8>, SchemaReject>,
        owned: &'a mut OwnedFields,
        members: Members,
    ) -> Result<BodyFields<'a>, SchemaReject> {
        match BodyFields::read(scratch, members) {
            Err(SchemaReject::NotJson) => {
                let original = original()?;
                // JSON text is UTF-8 (RFC 8259 §8.1): simd-json checks it, serde_json not in
                // what it skips (review: `"s":"\xff"` was admitted through here).
                std::str::from_utf8(&original).map_err(|_| SchemaReject::NotJson)?;
                *owned = OwnedFields::read(&original, members)?;
                Ok(BodyFields { id: owned.id.field(), kind: owned.kind.field() })
            }
            read => read,
        }
    }

    /// Parses `scratch` (a copy of the body; simd-json rewrites it in place), taking the id and
    /// the type from the members `members` names, in the top-level object or in its single
    /// `container` object member (absent container: neither is there; repeated: both are
    /// ambiguous; not an object: not the JSON the provider sends).
    fn read(
        scratch: &'a mut [u8],
        Members { container, id: id_member, kind: type_member }: Members,
    ) -> Result<BodyFields<'a>, SchemaReject> {
        let tape = parse_tape(scratch).map_err(|_| SchemaReject::NotJson)?;
        let top = tape.as_value().as_object().ok_or(SchemaReject::NotJson)?;
        let mut fields = BodyFields { id: Field::Absent, kind: Field::Absent };
        let object = match container {
            None => top,
            Some(name) => {
                let mut found = top.iter().filter(|(key, _)| *key == name).map(|(_, v)| v);
                match (found.next(), found.next()) {
                    (None, _) => return Ok(fields),
                    (Some(inner), None) => inner.as_object().ok_or(SchemaReject::NotJson)?,
                    (Some(_), Some(_)) => {
                        return Ok(BodyFields { id: Field::Repeated, kind: Field::Repeated })
                    }
                }
            }
        };
        for (key, value) in &object {
            let text = value.into_string().map_or(Field::NotText, Field::Text);
            if key == id_member {
                fields.id = fields.id.and(text);
            } else if key == type_member {
                fields.kind = fields.kind.and(text);
            }
        }
        Ok(fields)
    }
}

/// A [`Field`] read by serde_json, its text owned (escapes resolved).
#[derive(Debug, Default, PartialEq, Eq)]
enum OwnedField {
    /// Not there.
    #[default]
    Absent,
    /// There once, as text.
    Text(String),
    /// There once, but not text.
    NotText,
    /// There more than once.
    Repeated,
}

impl OwnedField {
    /// Adds one more occurrence.
    fn and(self, next: OwnedField) -> OwnedField {
        match self {
            OwnedField::Absent => next,
            _ => OwnedField::Repeated,
        }
    }

    fn field(&self) -> Field<'_> {
        match self {
            OwnedField::Absent => Field::Absent,
            OwnedField::Text(text) => Field::Text(text),
            OwnedField::NotText => Field::NotText,
            OwnedField::Repeated => Field::Repeated,
        }
    }
}

impl<'de> serde::Deserialize<'de> for OwnedField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OwnedField, D::Error> {
        d.deserialize_any(FieldVisitor)
    }
}

/// A member's value: text, or anything else (skipped unchecked, as serde_json skips).
struct FieldVisitor;

impl<'de> serde::de::Visitor<'de> for FieldVisitor {
    type Value = OwnedField;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, v: &str) -> Result<OwnedField, E> {
        Ok(OwnedField::Text(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<OwnedField, E> {
        Ok(OwnedField::Text(v))
    }
    fn visit_bool<E>(self, _: bool) -> Result<OwnedField, E> {
        Ok(OwnedField::NotText)
    }
    fn visit_i64<E>(self, _: i64) -> Result<OwnedField, E> {
        Ok(OwnedField::NotText)
    }
    fn visit_u64<E>(self, _: u64) -> Result<OwnedField, E> {
        Ok(OwnedField::NotText)
    }
    fn visit_f64<E>(self, _: f64) -> Result<OwnedField, E> {
        Ok(OwnedField::NotText)
    }
    fn visit_unit<E>(self) -> Result<OwnedField, E> {
        Ok(OwnedField::NotText)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<OwnedField, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(OwnedField::NotText)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<OwnedField, A::Error> {
        while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(OwnedField::NotText)
    }
}

/// The id and type of a JSON object body as serde_json reads it, for bodies simd-json refuses
/// ([`BodyFields::read_any`]): the same [`Members`], every other member skipped without
/// checking its escapes or its numbers' range (serde_json's `IgnoredAny`).
#[derive(Debug, Default)]
struct OwnedFields {
    id: OwnedField,
    kind: OwnedField,
}

impl OwnedFields {
    /// Reads `json` as [`BodyFields::read`] reads a parsed body.
    ///
    /// # Errors
    /// [`SchemaReject::NotJson`] when `json` is not one JSON object (or its container member
    /// is not an object).
    fn read(json: &[u8], members: Members) -> Result<OwnedFields, SchemaReject> {
        let mut deserializer = serde_json::Deserializer::from_slice(json);
        let fields = serde::Deserializer::deserialize_map(&mut deserializer, TopMembers(members))
            .map_err(|_| SchemaReject::NotJson)?;
        deserializer.end().map_err(|_| SchemaReject::NotJson)?;
        Ok(fields)
    }
}

/// Reads the top-level object for [`OwnedFields::read`].
struct TopMembers(Members);

impl<'de> serde::de::Visitor<'de> for TopMembers {
    type Value = OwnedFields;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<OwnedFields, A::Error> {
        let Members { container, id, kind } = self.0;
        let mut fields = OwnedFields::default();
        let mut containers = 0usize;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match container {
                Some(name) if key == name => {
                    containers += 1;
                    if containers == 1 {
                        fields = map.next_value_seed(InnerMembers(Members::top(id, kind)))?;
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                None if key == id => {
                    fields.id = std::mem::take(&mut fields.id).and(map.next_value()?)
                }
                None if key == kind => {
                    fields.kind = std::mem::take(&mut fields.kind).and(map.next_value()?);
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        if containers > 1 {
            return Ok(OwnedFields { id: OwnedField::Repeated, kind: OwnedField::Repeated });
        }
        Ok(fields)
    }
}

/// The container member's object, read with its members at its top.
struct InnerMembers(Members);

impl<'de> serde::de::DeserializeSeed<'de> for InnerMembers {
    type Value = OwnedFields;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<OwnedFields, D::Error> {
        d.deserialize_map(TopMembers(self.0))
    }
}

/// The event id from where `provider` puts it, checked (R8, R13).
fn event_id(provider: Provider, req: &Request, body_id: Field<'_>) -> Result<String, SchemaReject> {
    let field = match provider {
        Provider::Stripe
        | Provider::Slack
        | Provider::Paddle
        | Provider::Typeform
        | Provider::Pagerduty
        | Provider::Segment
        | Provider::Square
        | Provider::Sendgrid
        | Provider::Discord
        | Provider::Hmac
        | Provider::Intercom
        | Provider::Coinbase
        | Provider::Mailgun
        | Provider::Hubspot
        | Provider::Mandrill
        | Provider::Adyen => body_id,
        Provider::Linear => Field::header(req, linear::DELIVERY_HEADER),
        // No id in the payload: the content is the identity (module doc).
        Provider::Postmark | Provider::Calendly | Provider::Zoom => {
            return Ok(format!("sha256:{}", hex::encode(fingerprint(&req.body))));
        }
        Provider::Twilio => Field::header(req, twilio::IDEMPOTENCY_HEADER),
        Provider::Github => Field::header(req, github::DELIVERY_HEADER),
        Provider::Standard => Field::header(req, standard::ID_HEADER),
        Provider::Svix => Field::header(req, svix::ID_HEADER),
        Provider::Twitch => Field::header(req, twitch::ID_HEADER),
        Provider::Shopify => Field::header(req, shopify::EVENT_ID_HEADER)
            .or_else(|| Field::header(req, shopify::WEBHOOK_ID_HEADER)),
        Provider::Gitlab => Field::header(req, gitlab::IDEMPOTENCY_HEADER)
            .or_else(|| Field::header(req, gitlab::EVENT_UUID_HEADER)),
        Provider::Woocommerce => Field::header(req, woocommerce::DELIVERY_ID_HEADER),
        Provider::Bitbucket => Field::header(req, bitbucket::REQUEST_UUID_HEADER),
    };
    match field {
        Field::Absent => Err(SchemaReject::NoEventId),
        Field::NotText | Field::Repeated => Err(SchemaReject::BadEventId),
        Field::Text(id) if is_clean(id, EVENT_ID_BYTES_MAX) && is_trimmed(id) => Ok(id.to_owned()),
        Field::Text(_) => Err(SchemaReject::BadEventId),
    }
}

/// The event type from where the source's provider puts it, checked against the allow-list.
fn event_type(
    source: &SourceConfig,
    req: &Request,
    body_type: Field<'_>,
) -> Result<Option<String>, SchemaReject> {
    let field = match source.provider {
        Provider::Stripe
        | Provider::Slack
        | Provider::Standard
        | Provider::Svix
        | Provider::Paddle
        | Provider::Typeform
        | Provider::Pagerduty
        | Provider::Segment
        | Provider::Square
        | Provider::Sendgrid
        | Provider::Hmac
        | Provider::Intercom
        | Provider::Postmark
        | Provider::Calendly
        | Provider::Coinbase
        | Provider::Zoom
        | Provider::Mailgun
        | Provider::Hubspot
        | Provider::Mandrill
        | Provider::Adyen => body_type,
        // Discord's `type` is a number (interaction kind), not an event type.
        Provider::Discord => Field::Absent,
        Provider::Linear => Field::header(req, linear::EVENT_HEADER),
        Provider::Twilio => Field::Absent,
        Provider::Github => Field::header(req, github::EVENT_HEADER),
        Provider::Shopify => Field::header(req, shopify::TOPIC_HEADER),
        Provider::Gitlab => Field::header(req, gitlab::EVENT_HEADER),
        Provider::Twitch => Field::header(req, twitch::SUBSCRIPTION_TYPE_HEADER),
        Provider::Woocommerce => Field::header(req, woocommerce::TOPIC_HEADER),
        Provider::Bitbucket => Field::header(req, bitbucket::EVENT_KEY_HEADER),
    };
    let kind = match field {
        Field::Absent => None,
        Field::Text(kind) if is_clean(kind, EVENT_TYPE_BYTES_MAX) => Some(kind),
        Field::Text(_) | Field::NotText | Field::Repeated => {
            return Err(SchemaReject::EventTypeNotAllowed)
        }
    };
    match (&source.event_types, kind) {
        (None, kind) => Ok(kind.map(str::to_owned)),
        (Some(allowed), Some(kind)) if allowed.iter().any(|a| a == kind) => {
            Ok(Some(kind.to_owned()))
        }
        (Some(_), _) => Err(SchemaReject::EventTypeNotAllowed),
    }
}

/// One event of a batch delivery: what inspection learned, and its exact bytes in the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEvent {
    /// Id, type and fingerprint (of `body`, the element's bytes).
    pub inspected: Inspected,
    /// The element's exact bytes as received (forwarded as they are, SPEC §5).
    pub body: Vec<u8>,
}

/// The events of a batch delivery (SendGrid: a JSON array of objects, each with its
/// `sg_event_id` and `event`; HubSpot: each with its `eventId` and `subscriptionType`, its id
/// and fingerprint over [`hubspot::intent_members`]; Mandrill: the elements of the decoded
/// `mandrill_events` form parameter, each id the SHA-256 of its bytes; Adyen: the elements of
/// the body's `notificationItems`, each id `{pspReference}:{eventCode}:{success}` from
/// [`adyen::item_identity`], type `eventCode`), in body order, each with its exact bytes.
///
/// Each element is checked as a single delivery's body is (its id present, clean and given
/// once; its type clean). With `event_types` set, elements of other types are left out (not
/// admitted, not forwarded); the delivery is refused only when none is left.
///
/// # Errors
/// [`SchemaReject::NotJson`] when the body is not a JSON array of objects (or is empty);
/// [`SchemaReject::NoEventId`] / [`SchemaReject::BadEventId`] when any element's id is missing
/// or bad (the whole delivery is refused: no event of it is admitted);
/// [`SchemaReject::EventTypeNotAllowed`] when no element's type is allowed.
pub fn inspect_batch(
    source: &SourceConfig,
    req: &Request,
) -> Result<Vec<BatchEvent>, SchemaReject> {
    let is_hubspot = source.provider == Provider::Hubspot;
    let is_mandrill = source.provider == Provider::Mandrill;
    let members = match source.provider {
        Provider::Hubspot => Members::top(hubspot::EVENT_ID_MEMBER, hubspot::EVENT_TYPE_MEMBER),
        Provider::Mandrill => Members::top("", mandrill::EVENT_TYPE_MEMBER),
        _ => Members::top(sendgrid::EVENT_ID_MEMBER, sendgrid::EVENT_TYPE_MEMBER),
    };
    // Mandrill: the array is the decoded `mandrill_events` form parameter; Adyen: the body's
    // `notificationItems`; the others: the body itself.
    let decoded;
    let array: &[u8] = match source.provider {
        Provider::Mandrill => {
            decoded = mandrill::events_param(&req.body).ok_or(SchemaReject::NotJson)?;
            &decoded
        }
        Provider::Adyen => adyen::items_array(&req.body).ok_or(SchemaReject::NotJson)?,
        _ => &req.body,
    };
    let mut events = Vec::new();
    let mut left_out = 0;
    for element in array_elements(array)? {
        let mut scratch = element.to_vec();
        let mut owned = OwnedFields::default();
        let original = || Ok(element.to_vec());
        let mut fields = BodyFields::read_any(&mut scratch, original, &mut owned, members)?;
        let adyen_id;
        if source.provider == Provider::Adyen {
            let (id, kind) = adyen::item_identity(element).ok_or(SchemaReject::NoEventId)?;
            adyen_id = (id, kind);
            fields = BodyFields { id: Field::Text(&adyen_id.0), kind: Field::Text(&adyen_id.1) };
        }
        let (event_id, fingerprint) = if is_hubspot {
            // HubSpot's `eventId` (a number) must be there once, but is not the identity.
            match fields.id {
                Field::Absent => return Err(SchemaReject::NoEventId),
                Field::Repeated => return Err(SchemaReject::BadEventId),
                Field::Text(_) | Field::NotText => {}
            }
            let intent = hubspot::intent_members(element).ok_or(SchemaReject::NotJson)?;
            let fingerprint = fingerprint(&intent);
            (format!("sha256:{}", hex::encode(fingerprint)), fingerprint)
        } else if is_mandrill {
            // No event id in Mandrill's events: the element's bytes are its identity.
            let fingerprint = fingerprint(element);
            (format!("sha256:{}", hex::encode(fingerprint)), fingerprint)
        } else {
            (event_id(source.provider, req, fields.id)?, fingerprint(element))
        };
        let event_type = match event_type(source, req, fields.kind) {
            Ok(kind) => kind,
            Err(SchemaReject::EventTypeNotAllowed) if source.event_types.is_some() => {
                left_out += 1;
                continue;
            }
            Err(other) => return Err(other),
        };
        let ordering = source.ordering_key.as_ref().and_then(|key| key.value_in(element.to_vec()));
        let inspected = Inspected { event_id, event_type, fingerprint, ordering };
        events.push(BatchEvent { inspected, body: element.to_vec() });
    }
    if events.is_empty() {
        return Err(if left_out > 0 {
            SchemaReject::EventTypeNotAllowed
        } else {
            SchemaReject::NotJson
        });
    }
    Ok(events)
}

/// The exact byte ranges of the elements of the JSON array `body` (whitespace around them
/// excluded); each element is parsed once by serde_json to find where it ends.
fn array_elements(body: &[u8]) -> Result<Vec<&[u8]>, SchemaReject> {
    let skip_ws = |at: usize| {
        body[at..].iter().position(|b| !b" \t\r\n".contains(b)).map_or(body.len(), |n| at + n)
    };
    let mut at = skip_ws(0);
    if body.get(at) != Some(&b'[') {
        return Err(SchemaReject::NotJson);
    }
    at = skip_ws(at + 1);
    let mut elements = Vec::new();
    if body.get(at) == Some(&b']') {
        at += 1;
    } else {
        loop {
            let mut stream = serde_json::Deserializer::from_slice(&body[at..])
                .into_iter::<serde::de::IgnoredAny>();
            match stream.next() {
                Some(Ok(_)) => {}
                _ => return Err(SchemaReject::NotJson),
            }
            let end = at + stream.byte_offset();
            elements.push(&body[at..end]);
            at = skip_ws(end);
            match body.get(at) {
                Some(b',') => at = skip_ws(at + 1),
                Some(b']') => {
                    at += 1;
                    break;
                }
                _ => return Err(SchemaReject::NotJson),
            }
        }
    }
    if skip_ws(at) != body.len() {
        return Err(SchemaReject::NotJson);
    }
    Ok(elements)
}

/// Whether `text` has no whitespace (Unicode `White_Space`) at either edge; an all-whitespace
/// text has it at both.
fn is_trimmed(text: &str) -> bool {
    text.trim() == text
}

/// Whether `text` is non-empty, at most `bytes_max` bytes and free of control characters.
fn is_clean(text: &str, bytes_max: usize) -> bool {
    !text.is_empty() && text.len() <= bytes_max && !text.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{fingerprint, inspect, SchemaReject};
    use crate::config::SourceConfig;
    use crate::http::Request;
    use crate::limits::{EVENT_ID_BYTES_MAX, EVENT_TYPE_BYTES_MAX};
    use crate::provider::Provider;

    fn source(provider: Provider, event_types: Option<&[&str]>) -> SourceConfig {
        SourceConfig {
            id: "src".to_owned(),
            tenant: "acme".to_owned(),
            provider,
            tolerance: Duration::from_secs(300),
            future_skew: Duration::from_secs(60),
            event_types: event_types.map(|types| types.iter().map(|t| (*t).to_owned()).collect()),
            secrets: Vec::new(),
            destination: 0,
            ack_deadline: Duration::from_secs(10),
            ordering_key: None,
            public_url: None,
            scheme: Default::default(),
        }
    }

    fn request(headers: &[(&str, &[u8])], body: &[u8]) -> Request {
        Request {
            method: "POST".to_owned(),
            target: "/webhooks/src".to_owned(),
            headers: headers.iter().map(|(n, v)| ((*n).to_owned(), v.to_vec())).collect(),
            body: body.to_vec(),
            keep_alive: true,
        }
    }

    /// A case with headers: allow-list, headers, body, expected outcome.
    type HeaderCase<'a> = (Option<&'a [&'a str]>, &'a [(&'a str, &'a [u8])], &'a [u8], Expect<'a>);

    /// Expected outcome: `(event id, event type)` or the reject.
    type Expect<'a> = Result<(&'a str, Option<&'a str>), SchemaReject>;

    /// Inspects one delivery and compares with `expect`; also checks that the raw body is
    /// unchanged and that the fingerprint is the body's SHA-256.
    fn check(
        provider: Provider,
        event_types: Option<&[&str]>,
        headers: &[(&str, &[u8])],
        body: &[u8],
        expect: Expect<'_>,
    ) {
        let req = request(headers, body);
        let got = inspect(&source(provider, event_types), &req);
        assert_eq!(req.body, body, "raw body untouched for {:?}", String::from_utf8_lossy(body));
        let got = got.map(|i| {
            assert_eq!(i.fingerprint, fingerprint(body));
            (i.event_id, i.event_type)
        });
        let expect = expect.map(|(id, kind)| (id.to_owned(), kind.map(str::to_owned)));
        assert_eq!(got, expect, "{provider:?} {:?}", String::from_utf8_lossy(body));
    }

    /// Valid JSON that simd-json refuses — a `\u` escape of a lone surrogate (RFC 8259 §8.2;
    /// JavaScript's `JSON.stringify` writes one for a cut emoji) or a number no `f64` holds
    /// (§6) — is read by serde_json, with the same rules: the id and type where the provider
    /// puts them, repeated or non-text ids refused, and a body that is not one JSON object
    /// still `not_json`. Such deliveries were answered 400, and GitHub does not retry a 4xx.
    #[test]
    fn valid_json_that_simd_json_refuses_is_read_by_serde_json() {
        let stripe: &[(&[u8], Expect<'_>)] = &[
            (br#"{"id":"evt_sur","type":"x","s":"\ud800"}"#, Ok(("evt_sur", Some("x")))),
            (br#"{"n":1e99999,"id":"evt_num","type":"x"}"#, Ok(("evt_num", Some("x")))),
            (br#"{"id":"evt_\u00e9","a":[-1e99999,{"b":"\udc00"}]}"#, Ok(("evt_\u{e9}", None))),
            (br#"{"n":1e99999,"id":"evt_a","id":"evt_b"}"#, Err(SchemaReject::BadEventId)),
            (br#"{"id":7,"type":"x","n":1e99999}"#, Err(SchemaReject::BadEventId)),
            (br#"{"s":"\udc00","type":"x"}"#, Err(SchemaReject::NoEventId)),
            (br#"{"id":"evt_\ud800","type":"x"}"#, Err(SchemaReject::NotJson)),
            (br#"{"id":"evt_t","n":1e99999} {}"#, Err(SchemaReject::NotJson)),
            (br#"["\ud800"]"#, Err(SchemaReject::NotJson)),
            (br#"{"id":"evt_open","n":1e99999"#, Err(SchemaReject::NotJson)),
            // Not UTF-8 where serde_json only skips: still not JSON (RFC 8259 §8.1).
            (b"{\"id\":\"evt_u\",\"s\":\"\xff\xfe\"}", Err(SchemaReject::NotJson)),
            (
                b"{\"id\":\"evt_u\",\"d\":{\"s\":[\"\xc0\xaf\"]},\"n\":1e99999}",
                Err(SchemaReject::NotJson),
            ),
            (b"{\"id\":\"evt_u\",\"d\":{\"\xff\":1}}", Err(SchemaReject::NotJson)),
        ];
        for (body, expect) in stripe {
            check(Provider::Stripe, None, &[], body, *expect);
        }
        let pagerduty: &[(&[u8], Expect<'_>)] = &[
            (
                br#"{"event":{"id":"01D","event_type":"i.t","x":"\ud800"}}"#,
                Ok(("01D", Some("i.t"))),
            ),
            (br#"{"n":1e99999,"event":"01D"}"#, Err(SchemaReject::NotJson)),
            (
                br#"{"n":1e99999,"event":{"id":"a"},"event":{"id":"b"}}"#,
                Err(SchemaReject::BadEventId),
            ),
        ];
        for (body, expect) in pagerduty {
            check(Provider::Pagerduty, None, &[], body, *expect);
        }
        let batch = br#"[{"sg_event_id":"sg1","event":"delivered","s":"\ud800"},{"sg_event_id":"sg2","event":"open","n":1e99999}]"#;
        let events = super::inspect_batch(&source(Provider::Sendgrid, None), &request(&[], batch))
            .expect("a batch of valid JSON");
        let ids: Vec<_> = events.iter().map(|e| e.inspected.event_id.as_str()).collect();
        assert_eq!(ids, ["sg1", "sg2"]);
    }

    /// The thread's reused simd-json buffers (REUSED_JSON_BUFFERS_BYTES) carry nothing from one
    /// body to the next: failed parses (stopped in stage 1 and in stage 2), a body with more
    /// structurals than the buffers were made for (they grow), one with more than are kept
    /// (REUSED_JSON_STRUCTURALS_MAX: the buffers are replaced), one over the reuse limit and
    /// small ones after each, on one thread, each read exactly as on its own; and a dense body
    /// leaves no index of its size behind.
    #[test]
    fn reused_json_buffers_carry_nothing_between_bodies() {
        let padding = |bytes: usize| format!(r#","pad":"{}""#, "p".repeat(bytes));
        let zeros = |n: usize| format!(r#","zeros":[{}0]"#, "0,".repeat(n));
        let structurals = || super::JSON_BUFFERS.with_borrow(|b| b.structural_indexes().len());
        let grown = format!(r#"{{"id":"evt_grown","type":"t.grown"{}}}"#, zeros(1500));
        let dense = format!(
            r#"{{"id":"evt_dense","type":"t.dense"{}}}"#,
            zeros(super::REUSED_JSON_STRUCTURALS_MAX)
        );
        let over = format!(
            r#"{{"type":"t.over","id":"evt_over"{}}}"#,
            padding(super::REUSED_JSON_BUFFERS_BYTES)
        );
        let escaped = br#"{"id":"evt_\u00e9\"q\"","type":"t.e"}"#;
        let cases: &[(&[u8], Expect<'_>)] = &[
            (br#"{"id":"evt_1","type":"a"}"#, Ok(("evt_1", Some("a")))),
            (b"{\"id\":\"evt_\xff\"}", Err(SchemaReject::NotJson)),
            (br#"{"id":"evt_2","type":"b","x":[1,2,{"y":"#, Err(SchemaReject::NotJson)),
            (grown.as_bytes(), Ok(("evt_grown", Some("t.grown")))),
            (br#"{"type":"c"}"#, Err(SchemaReject::NoEventId)),
            (dense.as_bytes(), Ok(("evt_dense", Some("t.dense")))),
            (br#"{"id":"evt_4","type":"d"}"#, Ok(("evt_4", Some("d")))),
            (escaped, Ok(("evt_\u{e9}\"q\"", Some("t.e")))),
            (over.as_bytes(), Ok(("evt_over", Some("t.over")))),
            (br#"{"id":"evt_3"}"#, Ok(("evt_3", None))),
            (br#"{"id":"evt_1","type":"a"}"#, Ok(("evt_1", Some("a")))),
        ];
        for _ in 0..2 {
            for (body, expect) in cases {
                check(Provider::Stripe, None, &[], body, *expect);
                assert!(
                    structurals() <= super::REUSED_JSON_STRUCTURALS_MAX,
                    "{} structurals kept after a {}-byte body",
                    structurals(),
                    body.len()
                );
            }
        }
        check(Provider::Stripe, None, &[], grown.as_bytes(), Ok(("evt_grown", Some("t.grown"))));
        assert!(structurals() > 1500, "the grown body's index is kept: {}", structurals());
    }

    #[test]
    fn stripe() {
        let long_id = format!(r#"{{"id":"{}"}}"#, "e".repeat(EVENT_ID_BYTES_MAX));
        let too_long_id = format!(r#"{{"id":"{}"}}"#, "e".repeat(EVENT_ID_BYTES_MAX + 1));
        let long_type =
            format!(r#"{{"id":"evt_1","type":"{}"}}"#, "t".repeat(EVENT_TYPE_BYTES_MAX + 1));
        let cases: &[(&[u8], Expect<'_>)] = &[
            (br#"{"id":"evt_1","type":"invoice.paid"}"#, Ok(("evt_1", Some("invoice.paid")))),
            (br#"{"id":"evt_1"}"#, Ok(("evt_1", None))),
            (
                br#" {"object":"event","id":"evt_\u0041","data":{"id":"in_1"}} "#,
                Ok(("evt_A", None)),
            ),
            (long_id.as_bytes(), Ok((&long_id[7..7 + EVENT_ID_BYTES_MAX], None))),
            (b"not json", Err(SchemaReject::NotJson)),
            (b"", Err(SchemaReject::NotJson)),
            (br#"[{"id":"evt_1"}]"#, Err(SchemaReject::NotJson)),
            (br#""evt_1""#, Err(SchemaReject::NotJson)),
            (br#"{"id":"evt_1"} {}"#, Err(SchemaReject::NotJson)),
            (b"{\"id\":\"evt_\xff\"}", Err(SchemaReject::NotJson)),
            (br#"{"type":"invoice.paid"}"#, Err(SchemaReject::NoEventId)),
            (br#"{"data":{"id":"evt_1"}}"#, Err(SchemaReject::NoEventId)),
            (br#"{"id":""}"#, Err(SchemaReject::BadEventId)),
            (br#"{"id":"evt_\u0001"}"#, Err(SchemaReject::BadEventId)),
            (br#"{"id":"evt\n1"}"#, Err(SchemaReject::BadEventId)),
            (br#"{"id":12}"#, Err(SchemaReject::BadEventId)),
            (br#"{"id":"evt_1","id":"evt_2"}"#, Err(SchemaReject::BadEventId)),
            (too_long_id.as_bytes(), Err(SchemaReject::BadEventId)),
            (long_type.as_bytes(), Err(SchemaReject::EventTypeNotAllowed)),
            (br#"{"id":"evt_1","type":7}"#, Err(SchemaReject::EventTypeNotAllowed)),
            (br#"{"id":"evt_1","type":"a","type":"b"}"#, Err(SchemaReject::EventTypeNotAllowed)),
        ];
        for (body, expect) in cases {
            check(Provider::Stripe, None, &[], body, *expect);
        }
    }

    #[test]
    fn stripe_allow_list() {
        let allowed: Option<&[&str]> = Some(&["invoice.paid", "charge.succeeded"]);
        let cases: &[(&[u8], Expect<'_>)] = &[
            (
                br#"{"id":"evt_1","type":"charge.succeeded"}"#,
                Ok(("evt_1", Some("charge.succeeded"))),
            ),
            (br#"{"id":"evt_1","type":"charge.refunded"}"#, Err(SchemaReject::EventTypeNotAllowed)),
            (br#"{"id":"evt_1","type":"invoice.paid "}"#, Err(SchemaReject::EventTypeNotAllowed)),
            (br#"{"id":"evt_1"}"#, Err(SchemaReject::EventTypeNotAllowed)),
            (br#"{"type":"invoice.paid"}"#, Err(SchemaReject::NoEventId)),
        ];
        for (body, expect) in cases {
            check(Provider::Stripe, allowed, &[], body, *expect);
        }
    }

    #[test]
    fn github() {
        let id: (&str, &[u8]) = ("x-github-delivery", b"72d3162e-cc78-11e3-81ab-4c9367dc0958");
        let push: (&str, &[u8]) = ("x-github-event", b"push");
        let body: &[u8] = br#"{"zen":"Keep it logically awesome.","id":"not-this"}"#;
        let long = "d".repeat(EVENT_ID_BYTES_MAX + 1);
        let ok = Ok(("72d3162e-cc78-11e3-81ab-4c9367dc0958", Some("push")));
        let push_only: Option<&[&str]> = Some(&["push"]);
        let cases: &[HeaderCase<'_>] = &[
            (None, &[id, push], body, ok),
            (push_only, &[id, push], body, ok),
            (None, &[id], body, Ok(("72d3162e-cc78-11e3-81ab-4c9367dc0958", None))),
            (
                push_only,
                &[id, ("x-github-event", b"issues")],
                body,
                Err(SchemaReject::EventTypeNotAllowed),
            ),
            (push_only, &[id], body, Err(SchemaReject::EventTypeNotAllowed)),
            (None, &[push], body, Err(SchemaReject::NoEventId)),
            (None, &[("x-github-delivery", b""), push], body, Err(SchemaReject::BadEventId)),
            (None, &[("x-github-delivery", b"ab\x01c"), push], body, Err(SchemaReject::BadEventId)),
            (None, &[("x-github-delivery", b"ab\xffc"), push], body, Err(SchemaReject::BadEventId)),
            (
                None,
                &[("x-github-delivery", long.as_bytes()), push],
                body,
                Err(SchemaReject::BadEventId),
            ),
            (None, &[id, id, push], body, Err(SchemaReject::BadEventId)),
            (None, &[id, push], b"payload=%7B%7D", Err(SchemaReject::NotJson)),
        ];
        for (types, headers, body, expect) in cases {
            check(Provider::Github, *types, headers, body, *expect);
        }
    }

    /// GitHub form deliveries: the single `payload` field is the JSON object; id and type still
    /// come from the headers, and the fingerprint (checked by `check`) is over the raw body.
    #[test]
    fn github_form() {
        let id: (&str, &[u8]) = ("x-github-delivery", b"72d3162e-cc78-11e3-81ab-4c9367dc0958");
        let push: (&str, &[u8]) = ("x-github-event", b"push");
        let form: (&str, &[u8]) = ("content-type", b"application/x-www-form-urlencoded");
        let json: (&str, &[u8]) = ("content-type", b"application/json");
        let payload: &[u8] = b"payload=%7B%22zen%22%3A%22Keep+it+logically+awesome.%22%7D";
        let ok = Ok(("72d3162e-cc78-11e3-81ab-4c9367dc0958", Some("push")));
        let not_json = Err(SchemaReject::NotJson);
        let push_only: Option<&[&str]> = Some(&["push"]);
        let cases: &[HeaderCase<'_>] = &[
            (None, &[form, id, push], payload, ok),
            (push_only, &[form, id, push], payload, ok),
            (None, &[form, id, push], b"a=1&payload=%7B%7D&b=%5B%5D", ok),
            (None, &[form, id, push], b"payload={\"zen\":\"a b\"}", ok),
            (None, &[form, id, push], b"payloa%64=%7B%7D", ok),
            (
                None,
                &[("content-type", b"Application/X-WWW-Form-URLEncoded"), id, push],
                payload,
                ok,
            ),
            (
                None,
                &[("content-type", b"application/x-www-form-urlencoded ; charset=utf-8"), id, push],
                payload,
                ok,
            ),
            // The headers still decide id and type.
            (None, &[form, push], payload, Err(SchemaReject::NoEventId)),
            (
                None,
                &[form, ("x-github-delivery", b" d1"), push],
                payload,
                Err(SchemaReject::BadEventId),
            ),
            (
                push_only,
                &[form, id, ("x-github-event", b"issues")],
                payload,
                Err(SchemaReject::EventTypeNotAllowed),
            ),
            // No single `payload` field holding a JSON object.
            (None, &[form, id, push], b"", not_json),
            (None, &[form, id, push], b"a=%7B%7D", not_json),
            (None, &[form, id, push], b"Payload=%7B%7D", not_json),
            (None, &[form, id, push], b"payload=%7B%7D&payload=%7B%7D", not_json),
            (None, &[form, id, push], b"payload=%7B%7D&payload=", not_json),
            (None, &[form, id, push], b"payload=", not_json),
            (None, &[form, id, push], b"payload=hello", not_json),
            (None, &[form, id, push], b"payload=%5B%5D", not_json),
            (None, &[form, id, push], b"payload=%7B%7D%7B%7D", not_json),
            (None, &[form, id, push], br#"{"zen":"form header, JSON body"}"#, not_json),
            // Not a form delivery: the raw body must be the JSON object.
            (None, &[id, push], payload, not_json),
            (None, &[json, id, push], payload, not_json),
            (
                None,
                &[("content-type", b"application/x-www-form-urlencodedx"), id, push],
                payload,
                not_json,
            ),
            (
                None,
                &[("content-type", b"text/plain; application/x-www-form-urlencoded"), id, push],
                payload,
                not_json,
            ),
            (None, &[form, form, id, push], payload, not_json),
            (None, &[form, json, id, push], payload, not_json),
            (None, &[json, id, push], br#"{"zen":"x"}"#, ok),
        ];
        for (types, headers, body, expect) in cases {
            check(Provider::Github, *types, headers, body, *expect);
        }
        // Only GitHub documents form payloads; other providers' bodies must be JSON as sent.
        let stripe_form: &[u8] = b"payload=%7B%22id%22%3A%22evt_1%22%7D";
        check(Provider::Stripe, None, &[form], stripe_form, not_json);
        let webhook_id: (&str, &[u8]) = ("webhook-id", b"msg_1");
        check(Provider::Standard, None, &[form, webhook_id], b"payload=%7B%7D", not_json);
    }

    /// An event id with whitespace at an edge, or only whitespace, is refused wherever the
    /// provider puts it; whitespace inside an id is the sender's business.
    #[test]
    fn event_id_whitespace() {
        let cases: &[(&str, Result<&str, SchemaReject>)] = &[
            ("evt_1", Ok("evt_1")),
            ("evt 1", Ok("evt 1")),
            ("e\u{a0}1", Ok("e\u{a0}1")),
            (" evt_1", Err(SchemaReject::BadEventId)),
            ("evt_1 ", Err(SchemaReject::BadEventId)),
            (" evt_1 ", Err(SchemaReject::BadEventId)),
            (" ", Err(SchemaReject::BadEventId)),
            ("   ", Err(SchemaReject::BadEventId)),
            ("\t", Err(SchemaReject::BadEventId)),
            ("evt_1\t", Err(SchemaReject::BadEventId)),
            ("\u{a0}evt_1", Err(SchemaReject::BadEventId)),
            ("evt_1\u{3000}", Err(SchemaReject::BadEventId)),
            ("\u{2003}", Err(SchemaReject::BadEventId)),
            ("", Err(SchemaReject::BadEventId)),
        ];
        for (raw, expect) in cases {
            let json_id = serde_json::to_string(raw).expect("a str serialises");
            let stripe_body = format!(r#"{{"id":{json_id}}}"#);
            let deliveries: [(Provider, &str, &[u8]); 3] = [
                (Provider::Stripe, "x-unused", stripe_body.as_bytes()),
                (Provider::Github, "x-github-delivery", b"{}"),
                (Provider::Standard, "webhook-id", b"{}"),
            ];
            for (provider, header, body) in deliveries {
                let headers: &[(&str, &[u8])] = &[(header, raw.as_bytes())];
                check(provider, None, headers, body, expect.map(|id| (id, None)));
            }
        }
    }

    #[test]
    fn standard() {
        let id: (&str, &[u8]) = ("webhook-id", b"msg_p5jXN8AQM9LWM0D4loKWxJek");
        let typed: &[u8] = br#"{"type":"user.created","data":{"id":"u_1"}}"#;
        let untyped: &[u8] = br#"{"test": 2432232314}"#;
        let user_created: Option<&[&str]> = Some(&["user.created"]);
        let cases: &[HeaderCase<'_>] = &[
            (None, &[id], typed, Ok(("msg_p5jXN8AQM9LWM0D4loKWxJek", Some("user.created")))),
            (None, &[id], untyped, Ok(("msg_p5jXN8AQM9LWM0D4loKWxJek", None))),
            (
                user_created,
                &[id],
                typed,
                Ok(("msg_p5jXN8AQM9LWM0D4loKWxJek", Some("user.created"))),
            ),
            (user_created, &[id], untyped, Err(SchemaReject::EventTypeNotAllowed)),
            (None, &[], typed, Err(SchemaReject::NoEventId)),
            (None, &[("webhook-id", b"msg\x7f1")], typed, Err(SchemaReject::BadEventId)),
            (None, &[id], b"[]", Err(SchemaReject::NotJson)),
        ];
        for (types, headers, body, expect) in cases {
            check(Provider::Standard, *types, headers, body, *expect);
        }
    }

    /// Shopify, Svix and GitLab take id and type from headers; the second id header is read
    /// only when the first is absent.
    #[test]
    fn header_ids() {
        type Case<'a> = (Provider, &'a [(&'a str, &'a [u8])], Expect<'a>);
        let body: &[u8] = br#"{"type":"in.body","id":"body_id"}"#;
        let cases: &[Case<'_>] = &[
            (
                Provider::Shopify,
                &[
                    ("x-shopify-event-id", b"ev_1"),
                    ("x-shopify-webhook-id", b"wh_1"),
                    ("x-shopify-topic", b"orders/create"),
                ],
                Ok(("ev_1", Some("orders/create"))),
            ),
            (Provider::Shopify, &[("x-shopify-webhook-id", b"wh_1")], Ok(("wh_1", None))),
            (Provider::Shopify, &[], Err(SchemaReject::NoEventId)),
            (
                Provider::Shopify,
                &[("x-shopify-event-id", b""), ("x-shopify-webhook-id", b"wh_1")],
                Err(SchemaReject::BadEventId),
            ),
            (Provider::Svix, &[("svix-id", b"msg_1")], Ok(("msg_1", Some("in.body")))),
            (Provider::Svix, &[("webhook-id", b"msg_1")], Err(SchemaReject::NoEventId)),
            (
                Provider::Gitlab,
                &[
                    ("idempotency-key", b"f0e1"),
                    ("x-gitlab-event-uuid", b"uuid-1"),
                    ("x-gitlab-event", b"Push Hook"),
                ],
                Ok(("f0e1", Some("Push Hook"))),
            ),
            (Provider::Gitlab, &[("x-gitlab-event-uuid", b"uuid-1")], Ok(("uuid-1", None))),
            (
                Provider::Gitlab,
                &[("idempotency-key", b"a"), ("idempotency-key", b"b")],
                Err(SchemaReject::BadEventId),
            ),
            (Provider::Gitlab, &[], Err(SchemaReject::NoEventId)),
            (
                Provider::Woocommerce,
                &[("x-wc-webhook-delivery-id", b"d-1"), ("x-wc-webhook-topic", b"order.updated")],
                Ok(("d-1", Some("order.updated"))),
            ),
            (Provider::Woocommerce, &[], Err(SchemaReject::NoEventId)),
            (
                Provider::Bitbucket,
                &[("x-request-uuid", b"7d8f-1"), ("x-event-key", b"repo:push")],
                Ok(("7d8f-1", Some("repo:push"))),
            ),
            (Provider::Bitbucket, &[("x-hook-uuid", b"h-1")], Err(SchemaReject::NoEventId)),
        ];
        let slack: &[(&[u8], Expect<'_>)] = &[
            (
                br#"{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}"#,
                Ok(("Ev1", Some("event_callback"))),
            ),
            (br#"{"type":"event_callback","id":"Ev1"}"#, Err(SchemaReject::NoEventId)),
            (br#"{"event_id":"Ev1","event_id":"Ev2"}"#, Err(SchemaReject::BadEventId)),
        ];
        for (body, expect) in slack {
            check(Provider::Slack, None, &[], body, *expect);
        }
        let typeform: &[(&[u8], Expect<'_>)] = &[
            (
                br#"{"event_id":"01H","event_type":"form_response","form_response":{}}"#,
                Ok(("01H", Some("form_response"))),
            ),
            (br#"{"id":"01H","type":"form_response"}"#, Err(SchemaReject::NoEventId)),
        ];
        for (body, expect) in typeform {
            check(Provider::Typeform, None, &[], body, *expect);
        }
        let pagerduty: &[(&[u8], Expect<'_>)] = &[
            (
                br#"{"event":{"id":"01DEN","event_type":"incident.triggered","data":{"id":"X"}}}"#,
                Ok(("01DEN", Some("incident.triggered"))),
            ),
            (br#"{"id":"01DEN","event_type":"incident.triggered"}"#, Err(SchemaReject::NoEventId)),
            (br#"{"event":{"id":"a"},"event":{"id":"b"}}"#, Err(SchemaReject::BadEventId)),
            (br#"{"event":"01DEN"}"#, Err(SchemaReject::NotJson)),
            (br#"{"event":{"id":7}}"#, Err(SchemaReject::BadEventId)),
        ];
        for (body, expect) in pagerduty {
            check(Provider::Pagerduty, None, &[], body, *expect);
        }
        for (provider, headers, expect) in cases {
            check(*provider, None, headers, body, *expect);
        }
    }

    /// simd-json unescapes strings in place; only the scratch copy may change (R1).
    #[test]
    fn raw_body_unchanged() {
        let body: &[u8] = br#"{"id":"evt_\u00e9\n","type":"a\"b","data":{"s":"\ud83d\ude00"}}"#;
        let req = request(&[], body);
        let copy = req.body.clone();
        let got = inspect(&source(Provider::Stripe, None), &req);
        assert_eq!(got, Err(SchemaReject::BadEventId));
        assert_eq!(req.body, copy);
        let body: &[u8] = br#"{"id":"evt_\u00e9","type":"a\"b"}"#;
        let req = request(&[], body);
        let got =
            inspect(&source(Provider::Stripe, None), &req).map(|i| (i.event_id, i.event_type));
        assert_eq!(got, Ok(("evt_\u{e9}".to_owned(), Some("a\"b".to_owned()))));
        assert_eq!(req.body, body);
    }

    #[test]
    fn fingerprint_is_sha256() {
        assert_eq!(
            hex::encode(fingerprint(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex::encode(fingerprint(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn reasons() {
        assert_eq!(SchemaReject::NotJson.reason(), "not_json");
        assert_eq!(SchemaReject::EventTypeNotAllowed.reason(), "event_type_not_allowed");
    }
}
