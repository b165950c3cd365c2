//! The closed list of answers hookwall gives a sender (SPEC §3). The HTTP status, the JSON
//! `status` code and the metric label all come from this one enum.

/// Every answer to a webhook delivery, in SPEC §3 order, plus the framing answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Answer {
    /// 404: no source with that id.
    UnknownSource,
    /// 405: not POST.
    MethodNotAllowed,
    /// 413: body over `body_bytes_max`.
    TooLarge,
    /// 415: a `Content-Encoding` other than `identity` (e.g. a gzip-compressed body): the
    /// signature covers the bytes as the provider sends them uncompressed, so none is decoded
    /// or verified (issue 3's decision; docs/providers.md).
    UnsupportedEncoding,
    /// 401: signature header missing or malformed.
    SignatureMissing,
    /// 401: no active key matches.
    SignatureInvalid,
    /// 401: signed timestamp outside the replay window.
    Stale,
    /// 400: not JSON, no stable id, or event type not allowed (R13, R23).
    SchemaRejected,
    /// 200: same identity already admitted with the same fingerprint (R12).
    Duplicate,
    /// 409: same identity, different fingerprint; quarantined (R11).
    Conflict,
    /// 503: the ledger cannot durably write; fail closed (R15).
    Unavailable,
    /// 503: the admission queue is full.
    Overloaded,
    /// 200: new event, claim and inbox record fsync'd (R14).
    Accepted,
    /// 200: an authentic handshake (Slack `url_verification`, …) answered with the provider's
    /// documented body; nothing is admitted (see `pipeline::Challenge`).
    Challenge,
    /// 400: malformed HTTP.
    BadRequest,
    /// 431: request head over `header_bytes_max`.
    HeadersTooLarge,
    /// 414: the request line with its line end does not fit in `header_bytes_max` (RFC 9112 §3: a server MUST
    /// answer 414 to a request-target longer than it parses).
    UriTooLong,
    /// 505: a request line naming an HTTP major version other than 1, such as `HTTP/2.0` or
    /// HTTP/2's prior-knowledge preface (RFC 9110 §15.6.6).
    VersionNotSupported,
    /// 408: request not fully read within `read_timeout`.
    Timeout,
}

impl Answer {
    /// Every answer, in a fixed order (metric label index).
    pub const ALL: [Answer; 19] = [
        Answer::UnknownSource,
        Answer::MethodNotAllowed,
        Answer::TooLarge,
        Answer::UnsupportedEncoding,
        Answer::SignatureMissing,
        Answer::SignatureInvalid,
        Answer::Stale,
        Answer::SchemaRejected,
        Answer::Duplicate,
        Answer::Conflict,
        Answer::Unavailable,
        Answer::Overloaded,
        Answer::Accepted,
        Answer::Challenge,
        Answer::BadRequest,
        Answer::HeadersTooLarge,
        Answer::UriTooLong,
        Answer::VersionNotSupported,
        Answer::Timeout,
    ];

    /// The `status` code in the JSON body and the metric label.
    pub fn code(self) -> &'static str {
        match self {
            Answer::UnknownSource => "unknown_source",
            Answer::MethodNotAllowed => "method_not_allowed",
            Answer::TooLarge => "too_large",
            Answer::UnsupportedEncoding => "unsupported_encoding",
            Answer::SignatureMissing => "signature_missing",
            Answer::SignatureInvalid => "signature_invalid",
            Answer::Stale => "stale",
            Answer::SchemaRejected => "schema_rejected",
            Answer::Duplicate => "duplicate",
            Answer::Conflict => "conflict",
            Answer::Unavailable => "unavailable",
            Answer::Overloaded => "overloaded",
            Answer::Accepted => "accepted",
            Answer::Challenge => "challenge",
            Answer::BadRequest => "bad_request",
            Answer::HeadersTooLarge => "headers_too_large",
            Answer::UriTooLong => "uri_too_long",
            Answer::VersionNotSupported => "version_not_supported",
            Answer::Timeout => "timeout",
        }
    }

    /// The HTTP status.
    pub fn http_status(self) -> u16 {
        match self {
            Answer::Accepted | Answer::Duplicate | Answer::Challenge => 200,
            Answer::SchemaRejected | Answer::BadRequest => 400,
            Answer::SignatureMissing | Answer::SignatureInvalid | Answer::Stale => 401,
            Answer::UnknownSource => 404,
            Answer::MethodNotAllowed => 405,
            Answer::Timeout => 408,
            Answer::Conflict => 409,
            Answer::TooLarge => 413,
            Answer::UriTooLong => 414,
            Answer::UnsupportedEncoding => 415,
            Answer::HeadersTooLarge => 431,
            Answer::Unavailable | Answer::Overloaded => 503,
            Answer::VersionNotSupported => 505,
        }
    }

    /// `Retry-After` seconds for the 503s: how soon the provider should try again.
    pub fn retry_after_s(self) -> Option<u32> {
        match self {
            Answer::Unavailable => Some(5),
            Answer::Overloaded => Some(1),
            _ => None,
        }
    }

    /// Index in [`Answer::ALL`] (for per-core counter arrays).
    pub fn index(self) -> usize {
        Answer::ALL.iter().position(|a| *a == self).expect("every answer is in ALL")
    }
}
