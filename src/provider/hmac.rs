//! `hmac`: a generic HMAC scheme configured per source, for senders hookwall has no provider
//! for. The source's `hmac` table says where the signature is (`header`, optional `prefix`),
//! how it is made (`algorithm` `sha1`/`sha256`/`sha512`, `encoding` `hex`/`base64`) and over
//! what (`content`, a template of literal text and the placeholders `{body}`, `{timestamp}`,
//! `{id}`, `{url}`; `{{` and `}}` are literal braces). The key is the secret's UTF-8 bytes.
//!
//! * `{body}`: the raw body, required (a scheme that does not sign the body proves nothing
//!   about it).
//! * `{timestamp}`: the text of header `timestamp_header`, as received.
//! * `{id}`: the text of header `id_header`, as received.
//! * `{url}`: the configured `url`, exactly as written (the URL the sender signs).
//!
//! The signed timestamp (checked against the source's `tolerance`) comes from
//! `timestamp_header` (which `content` must then sign as `{timestamp}`) or from
//! `timestamp_pointer`, a JSON pointer into the body (RFC 6901; a
//! number or a string of digits), in `timestamp_unit` `s` (default) or `ms`; without either
//! there is no freshness check (R7). A body timestamp is signed as part of `{body}`, so only a
//! header timestamp can appear in the template. The event id (R8) comes from `id_header` or
//! `id_pointer` (a JSON string), and the optional event type from `type_header` or
//! `type_pointer`. Every malformed option is a config error naming it ([`Scheme::parse`]).

use base64::Engine as _;

use crate::http::Request;
use crate::verify::{self, Candidates, Presented, Reject, Scheme as TagScheme, CONTENT_PIECES_MAX};

/// `[[source]] hmac = { … }` as written (every key optional here; [`Scheme::parse`] checks).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct RawScheme {
    header: Option<String>,
    prefix: Option<String>,
    algorithm: Option<String>,
    encoding: Option<String>,
    content: Option<String>,
    timestamp_header: Option<String>,
    timestamp_pointer: Option<String>,
    timestamp_unit: Option<String>,
    id_header: Option<String>,
    id_pointer: Option<String>,
    type_header: Option<String>,
    type_pointer: Option<String>,
    url: Option<String>,
}

/// The HMAC algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// HMAC-SHA1 (20-byte tags; legacy senders).
    Sha1,
    /// HMAC-SHA256 (32-byte tags), the default.
    Sha256,
    /// HMAC-SHA512 (64-byte tags).
    Sha512,
}

impl Algorithm {
    /// ring's algorithm.
    pub fn ring(self) -> ring::hmac::Algorithm {
        match self {
            Algorithm::Sha1 => ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Algorithm::Sha256 => ring::hmac::HMAC_SHA256,
            Algorithm::Sha512 => ring::hmac::HMAC_SHA512,
        }
    }

    /// Tag length in bytes.
    pub fn tag_bytes(self) -> usize {
        match self {
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
            Algorithm::Sha512 => 64,
        }
    }
}

/// How the tag is written in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Hex, either case (the default).
    Hex,
    /// Standard-alphabet base64 with padding.
    Base64,
}

/// One piece of the signed-content template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal bytes.
    Literal(Vec<u8>),
    /// The raw body.
    Body,
    /// The timestamp header's text.
    Timestamp,
    /// The id header's text.
    Id,
    /// The configured URL.
    Url,
}

/// Where a value is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    /// A request header (lowercase name).
    Header(String),
    /// A JSON pointer into the body (RFC 6901).
    Pointer(String),
}

/// A source's generic HMAC scheme, checked.
#[derive(Debug, Clone)]
pub struct Scheme {
    /// The signature header (lowercase).
    pub header: String,
    /// Text before the tag in the header (may be empty).
    pub prefix: String,
    /// The HMAC algorithm.
    pub algorithm: Algorithm,
    /// The tag's encoding.
    pub encoding: Encoding,
    /// The signed content, in order.
    pub content: Vec<Piece>,
    /// Where the signed timestamp is, if the sender sends one.
    pub timestamp: Option<Locator>,
    /// Whether the timestamp is in milliseconds (else seconds).
    pub timestamp_ms: bool,
    /// Where the event id is.
    pub id: Locator,
    /// Where the event type is, if anywhere.
    pub event_type: Option<Locator>,
    /// The URL `{url}` stands for.
    pub url: Option<String>,
}

impl Scheme {
    /// Checks `raw`.
    ///
    /// # Errors
    /// Every problem as `(key, message)`: `header` missing or not an HTTP token; `algorithm`
    /// not `sha1`/`sha256`/`sha512`; `encoding` not `hex`/`base64`; `content` without `{body}`,
    /// with an unknown or unclosed placeholder, a lone `}` or more than nine pieces; a
    /// placeholder whose source is not configured (`{timestamp}` without `timestamp_header`,
    /// `{id}` without `id_header`, `{url}` without `url`), a `url` never used or a
    /// `timestamp_header` the content does not sign; both or
    /// neither of `id_header`/`id_pointer`; both `timestamp_header` and `timestamp_pointer`,
    /// or both `type_*`; a pointer not starting with `/`; `timestamp_unit` not `s`/`ms` or
    /// given without a timestamp; a `url` that is not `http(s)://`.
    pub fn parse(raw: &RawScheme) -> Result<Scheme, Vec<(&'static str, String)>> {
        let mut errors = Vec::new();
        let header = match raw.header.as_deref() {
            None => {
                errors.push(("header", "is missing (the header carrying the signature)".into()));
                String::new()
            }
            Some(name) => {
                if let Some(problem) = header_name_problem(name) {
                    errors.push(("header", problem));
                }
                name.to_ascii_lowercase()
            }
        };
        let algorithm = match raw.algorithm.as_deref().unwrap_or("sha256") {
            "sha1" => Algorithm::Sha1,
            "sha256" => Algorithm::Sha256,
            "sha512" => Algorithm::Sha512,
            other => {
                errors.push(("algorithm", format!("{other:?} is not sha1, sha256 or sha512")));
                Algorithm::Sha256
            }
        };
        let encoding = match raw.encoding.as_deref().unwrap_or("hex") {
            "hex" => Encoding::Hex,
            "base64" => Encoding::Base64,
            other => {
                errors.push(("encoding", format!("{other:?} is not hex or base64")));
                Encoding::Hex
            }
        };
        let content = match parse_template(raw.content.as_deref().unwrap_or("{body}")) {
            Ok(content) => content,
            Err(problem) => {
                errors.push(("content", problem));
                Vec::new()
            }
        };
        let timestamp = one_of(
            &mut errors,
            ("timestamp_header", raw.timestamp_header.as_deref()),
            ("timestamp_pointer", raw.timestamp_pointer.as_deref()),
        );
        let timestamp_ms = match (raw.timestamp_unit.as_deref(), &timestamp) {
            (None, _) => false,
            (Some(_), None) => {
                let message = "is set but neither timestamp_header nor timestamp_pointer is";
                errors.push(("timestamp_unit", message.into()));
                false
            }
            (Some("s"), Some(_)) => false,
            (Some("ms"), Some(_)) => true,
            (Some(other), Some(_)) => {
                errors.push(("timestamp_unit", format!("{other:?} is not s or ms")));
                false
            }
        };
        let id = one_of(
            &mut errors,
            ("id_header", raw.id_header.as_deref()),
            ("id_pointer", raw.id_pointer.as_deref()),
        );
        if id.is_none() && raw.id_header.is_none() && raw.id_pointer.is_none() {
            let message = "one of id_header or id_pointer is required (the stable event id, R8)";
            errors.push(("id_header", message.into()));
        }
        let event_type = one_of(
            &mut errors,
            ("type_header", raw.type_header.as_deref()),
            ("type_pointer", raw.type_pointer.as_deref()),
        );
        let uses = |piece: &Piece| content.contains(piece);
        if uses(&Piece::Timestamp) && !matches!(timestamp, Some(Locator::Header(_))) {
            let message = "uses {timestamp}, which needs timestamp_header (a body timestamp is \
                           signed as part of {body})";
            errors.push(("content", message.into()));
        }
        if matches!(timestamp, Some(Locator::Header(_))) && !uses(&Piece::Timestamp) {
            let message = "is set but content has no {timestamp}: an unsigned timestamp proves \
                           no freshness";
            errors.push(("timestamp_header", message.into()));
        }
        if uses(&Piece::Id) && !matches!(id, Some(Locator::Header(_))) {
            let message = "uses {id}, which needs id_header (a body id is signed as part of \
                           {body})";
            errors.push(("content", message.into()));
        }
        match (&raw.url, uses(&Piece::Url)) {
            (None, true) => errors.push(("content", "uses {url}, which needs url".into())),
            (Some(_), false) => errors.push(("url", "is set but content has no {url}".into())),
            (Some(url), true) if !(url.starts_with("https://") || url.starts_with("http://")) => {
                errors.push(("url", format!("{url:?} is not an http:// or https:// URL")));
            }
            _ => {}
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Scheme {
            header,
            prefix: raw.prefix.clone().unwrap_or_default(),
            algorithm,
            encoding,
            content,
            timestamp,
            timestamp_ms,
            id: id.expect("checked above"),
            event_type,
            url: raw.url.clone(),
        })
    }

    /// The HMAC key of `secret` (its UTF-8 bytes) for this scheme's algorithm.
    pub fn key(&self, secret: &str) -> ring::hmac::Key {
        ring::hmac::Key::new(self.algorithm.ring(), secret.as_bytes())
    }
}

/// At most one of two locator keys; `None` when neither is set (an error is recorded when
/// both are, or when a pointer or header name is malformed).
fn one_of(
    errors: &mut Vec<(&'static str, String)>,
    (header_key, header): (&'static str, Option<&str>),
    (pointer_key, pointer): (&'static str, Option<&str>),
) -> Option<Locator> {
    match (header, pointer) {
        (Some(_), Some(_)) => {
            errors.push((pointer_key, format!("is set together with {header_key}; set one")));
            None
        }
        (Some(name), None) => {
            if let Some(problem) = header_name_problem(name) {
                errors.push((header_key, problem));
            }
            Some(Locator::Header(name.to_ascii_lowercase()))
        }
        (None, Some(pointer)) => {
            if !pointer.starts_with('/') {
                errors.push((
                    pointer_key,
                    format!("{pointer:?} is not a JSON pointer (starts with /)"),
                ));
            }
            Some(Locator::Pointer(pointer.to_owned()))
        }
        (None, None) => None,
    }
}

/// Why `name` is not a usable header name (empty, or not an RFC 9110 token).
fn header_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("is empty".to_owned())
    } else if !name.bytes().all(crate::http::is_tchar) {
        Some(format!("{name:?} is not a valid header name"))
    } else {
        None
    }
}

/// Splits a content template into pieces.
fn parse_template(template: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal = Vec::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("{{") {
            literal.push(b'{');
            rest = after;
        } else if let Some(after) = rest.strip_prefix("}}") {
            literal.push(b'}');
            rest = after;
        } else if c == '}' {
            return Err(format!("{template:?} has a lone }} (write }}}} for a literal brace)"));
        } else if c == '{' {
            let close = rest.find('}').ok_or_else(|| format!("{template:?} has an unclosed {{"))?;
            let piece = match &rest[1..close] {
                "body" => Piece::Body,
                "timestamp" => Piece::Timestamp,
                "id" => Piece::Id,
                "url" => Piece::Url,
                other => {
                    return Err(format!(
                        "unknown placeholder {{{other}}} (known: {{body}}, {{timestamp}}, {{id}}, \
                         {{url}})"
                    ))
                }
            };
            if !literal.is_empty() {
                pieces.push(Piece::Literal(std::mem::take(&mut literal)));
            }
            pieces.push(piece);
            rest = &rest[close + 1..];
        } else {
            let mut buf = [0; 4];
            literal.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            rest = &rest[c.len_utf8()..];
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    if !pieces.contains(&Piece::Body) {
        return Err(format!("{template:?} has no {{body}}; the body must be signed"));
    }
    if pieces.len() > CONTENT_PIECES_MAX {
        return Err(format!(
            "{template:?} makes {} pieces (literal runs and placeholders); at most \
             {CONTENT_PIECES_MAX} are supported",
            pieces.len()
        ));
    }
    Ok(pieces)
}

/// Reads the configured header into its single candidate, the timestamp (if configured) and
/// the signed content the template describes.
///
/// # Errors
/// [`Reject::SignatureMissing`] when `scheme` is `None` (never for a loaded config), the
/// signature header is absent or repeated, lacks the prefix or does not decode to a tag of the
/// algorithm's length, a header the template or the timestamp needs is absent, repeated or
/// empty, or the timestamp is not an integer (header) or not a non-negative integer or digit
/// string at the pointer (body).
pub(crate) fn presented<'a>(
    scheme: Option<&'a Scheme>,
    req: &'a Request,
) -> Result<Presented<'a>, Reject> {
    let scheme = scheme.ok_or(Reject::SignatureMissing)?;
    let header = verify::unique_header(req, &scheme.header).ok_or(Reject::SignatureMissing)?;
    let text = header.strip_prefix(scheme.prefix.as_bytes()).ok_or(Reject::SignatureMissing)?;
    let bytes = scheme.algorithm.tag_bytes();
    let tag = match scheme.encoding {
        Encoding::Hex => verify::decode_hex_tag(text, TagScheme::Hmac, bytes),
        Encoding::Base64 => verify::decode_base64_tag(text, TagScheme::Hmac, bytes),
    };
    let mut candidates = Candidates::new();
    candidates.offer(Some(tag.ok_or(Reject::SignatureMissing)?));
    let header_text = |name: &'a str| {
        verify::unique_header(req, name).filter(|v| !v.is_empty()).ok_or(Reject::SignatureMissing)
    };
    let (timestamp_text, signed_at) = match &scheme.timestamp {
        None => (None, None),
        Some(Locator::Header(name)) => {
            let text = header_text(name)?;
            let value = verify::parse_unix_seconds(text).ok_or(Reject::SignatureMissing)?;
            (Some(text), Some(value))
        }
        Some(Locator::Pointer(pointer)) => {
            let value = body_integer(&req.body, pointer).ok_or(Reject::SignatureMissing)?;
            (None, Some(value))
        }
    };
    let signed_at = signed_at.map(|v| if scheme.timestamp_ms { v.div_euclid(1000) } else { v });
    let mut content: [&'a [u8]; CONTENT_PIECES_MAX] = [b""; CONTENT_PIECES_MAX];
    for (slot, piece) in content.iter_mut().zip(&scheme.content) {
        *slot = match piece {
            Piece::Literal(bytes) => bytes,
            Piece::Body => &req.body,
            Piece::Timestamp => timestamp_text.ok_or(Reject::SignatureMissing)?,
            Piece::Id => match &scheme.id {
                Locator::Header(name) => header_text(name)?,
                Locator::Pointer(_) => return Err(Reject::SignatureMissing),
            },
            Piece::Url => scheme.url.as_deref().unwrap_or_default().as_bytes(),
        };
    }
    Ok(Presented::signed_pieces(signed_at, candidates, &content[..scheme.content.len()]))
}

/// A non-negative integer at `pointer` in the JSON body: a number, or a string of 1..=19
/// digits.
fn body_integer(body: &[u8], pointer: &str) -> Option<i64> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    match value.pointer(pointer)? {
        serde_json::Value::Number(n) => i64::try_from(n.as_u64()?).ok(),
        serde_json::Value::String(s) => verify::parse_unix_seconds(s.as_bytes()),
        _ => None,
    }
}

/// Encodes a tag as `scheme` writes it (prefix included): for signers and tests.
pub fn encode_tag(scheme: &Scheme, tag: &[u8]) -> String {
    let text = match scheme.encoding {
        Encoding::Hex => hex::encode(tag),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(tag),
    };
    format!("{}{text}", scheme.prefix)
}
