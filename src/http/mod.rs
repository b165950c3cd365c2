//! HTTP/1.1 request framing and responses — sans-IO: bytes in, [`Frame`]s and bytes out. Both
//! ingress back ends (io_uring and epoll) drive the same [`Framer`].
//!
//! Head parsing is httparse's; body framing (`Content-Length`, `chunked`), limits and
//! `Expect: 100-continue` are ours (SPEC §3, R24).

mod framer;
mod response;

pub use framer::*;
pub use response::*;

/// Limits applied while framing one request (from `[server]`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request head (request line + headers + CRLFs) in bytes; 431 above.
    pub header_bytes_max: usize,
    /// Largest (de-chunked) body in bytes; 413 above, decided from Content-Length before any
    /// body byte is buffered.
    pub body_bytes_max: usize,
}

/// One complete request: head fields plus the de-chunked body, exactly as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Method token as sent (`POST`).
    pub method: String,
    /// Request target as sent (origin form, e.g. `/webhooks/stripe-billing?x=1`).
    pub target: String,
    /// Headers in arrival order; names lowercased, values as raw bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body bytes signatures are checked over (after de-chunking).
    pub body: Vec<u8>,
    /// Whether the connection stays open after the answer (HTTP/1.1 default unless
    /// `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`).
    pub keep_alive: bool,
}

impl Request {
    /// The first value of header `name` (give it lowercase).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice())
    }

    /// The first value of header `name` as UTF-8, `None` if absent or not UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Every value of header `name`, in arrival order.
    pub fn headers_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |(n, _)| n == name).map(|(_, v)| v.as_slice())
    }

    /// The path part of the target (before `?`).
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// The head of a request, returned as soon as it is parsed so routing can answer 404/405/413
/// and decide on `100 Continue` before any body byte is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Method token as sent.
    pub method: String,
    /// Request target as sent.
    pub target: String,
    /// Declared `Content-Length`, if any.
    pub content_length: Option<u64>,
    /// Whether the body is `Transfer-Encoding: chunked`.
    pub chunked: bool,
    /// Whether the client sent `Expect: 100-continue`.
    pub expect_continue: bool,
    /// Whether the connection stays open after the answer.
    pub keep_alive: bool,
}

impl Head {
    /// The path part of the target (before `?`).
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// A framing failure: the connection is answered and closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Malformed request line, header, chunk size, or both `Content-Length` and
    /// `Transfer-Encoding`, or an unsupported transfer coding → 400 `bad_request`.
    BadRequest,
    /// Head over `header_bytes_max` or more than `HEADER_COUNT_MAX` headers → 431.
    HeadersTooLarge,
    /// Body over `body_bytes_max` → 413 `too_large`.
    TooLarge,
}
