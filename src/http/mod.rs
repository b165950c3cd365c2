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
    /// Request target as sent: origin form (`/webhooks/stripe-billing?x=1`) or absolute form
    /// (`http://hookwall.example:8080/webhooks/stripe-billing`, RFC 9112 §3.2.2).
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

    /// The path part of the target (see [`target_path`]).
    pub fn path(&self) -> &str {
        target_path(&self.target)
    }
}

/// The head of a request, returned as soon as it is parsed so routing can answer 404/405/413
/// and decide on `100 Continue` before any body byte is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Method token as sent.
    pub method: String,
    /// Request target as sent (origin or absolute form).
    pub target: String,
    /// Declared `Content-Length`, if any.
    pub content_length: Option<u64>,
    /// Whether the body is `Transfer-Encoding: chunked`.
    pub chunked: bool,
    /// Whether the client sent `Expect: 100-continue`.
    pub expect_continue: bool,
    /// Whether the connection stays open after the answer.
    pub keep_alive: bool,
    /// Whether a `Content-Encoding` other than `identity` was declared (the body is
    /// compressed or otherwise transformed: refused with 415, see [`crate::answer::Answer`]).
    pub content_encoded: bool,
}

/// Whether a `Content-Encoding` field value names a coding other than `identity` (RFC 9110
/// §8.4: a comma-separated list; names are case-insensitive). hookwall answers such a
/// delivery 415 without reading or verifying it (docs/providers.md, "Compressed bodies").
pub fn is_content_encoded(value: &[u8]) -> bool {
    value
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .any(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"identity"))
}

impl Head {
    /// The path part of the target (see [`target_path`]).
    pub fn path(&self) -> &str {
        target_path(&self.target)
    }
}

/// A framing failure: the connection is answered and closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Malformed request line, header, chunk size, or both `Content-Length` and
    /// `Transfer-Encoding`, or an unsupported transfer coding, or an HTTP/1.1 request without
    /// `Host`, or any request with more than one `Host` (RFC 9112 §3.2) → 400 `bad_request`.
    BadRequest,
    /// Head over `header_bytes_max` or more than `HEADER_COUNT_MAX` headers → 431.
    HeadersTooLarge,
    /// Body over `body_bytes_max` → 413 `too_large`.
    TooLarge,
}

/// The path of a request target, the part routing looks at: the query (`?…`) is dropped, and an
/// absolute-form target (RFC 9112 §3.2.2, which a server MUST accept) loses its
/// `http://` / `https://` scheme (any case) and authority; an absolute form with nothing after
/// the authority has path `/`. Other targets (`*`, authority form, other schemes) are returned
/// as they are and route nowhere.
fn target_path(target: &str) -> &str {
    let Some(rest) = strip_http_scheme(target) else {
        return without_query(target);
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match without_query(&rest[authority_end..]) {
        "" => "/",
        path => path,
    }
}

/// `target` before its first `?`.
fn without_query(target: &str) -> &str {
    target.split('?').next().unwrap_or("")
}

/// `target` after a leading `http://` or `https://` (ASCII case-insensitive), if it has one.
fn strip_http_scheme(target: &str) -> Option<&str> {
    ["http://", "https://"].iter().find_map(|scheme| {
        let head = target.get(..scheme.len())?;
        head.eq_ignore_ascii_case(scheme).then(|| &target[scheme.len()..])
    })
}

#[cfg(test)]
mod tests {
    use super::{Head, Request};

    /// `target` must route as `path` through both [`Head::path`] and [`Request::path`].
    fn check(target: &str, path: &str) {
        let head = Head {
            method: "POST".to_owned(),
            target: target.to_owned(),
            content_length: None,
            chunked: false,
            expect_continue: false,
            keep_alive: true,
            content_encoded: false,
        };
        let request = Request {
            method: "POST".to_owned(),
            target: target.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            keep_alive: true,
        };
        assert_eq!(head.path(), path, "Head::path of {target:?}");
        assert_eq!(request.path(), path, "Request::path of {target:?}");
    }

    #[test]
    fn target_paths() {
        let cases = [
            // Origin form: the query goes, the rest stays.
            ("/webhooks/a", "/webhooks/a"),
            ("/webhooks/a?x=1&y=2", "/webhooks/a"),
            ("/webhooks/a?", "/webhooks/a"),
            ("/", "/"),
            ("/?x", "/"),
            ("/webhooks/http://h/x", "/webhooks/http://h/x"),
            // Absolute form: scheme (any case) and authority go.
            ("http://h/webhooks/a", "/webhooks/a"),
            ("http://hookwall.example:8080/webhooks/a?x=1", "/webhooks/a"),
            ("https://h/webhooks/a", "/webhooks/a"),
            ("HTTP://h/webhooks/a", "/webhooks/a"),
            ("HtTpS://h/webhooks/a", "/webhooks/a"),
            ("http://user@h:1/webhooks/a", "/webhooks/a"),
            ("http://[::1]:8080/webhooks/a", "/webhooks/a"),
            ("http://h/", "/"),
            ("http://h", "/"),
            ("http://h:8080", "/"),
            ("http://h?x=1", "/"),
            ("https://h:443?", "/"),
            ("http://h//webhooks/a", "//webhooks/a"),
            // Neither: left alone (and routed nowhere).
            ("*", "*"),
            ("h:443", "h:443"),
            ("ftp://h/webhooks/a", "ftp://h/webhooks/a"),
            ("http:/webhooks/a", "http:/webhooks/a"),
            ("httpx://h/webhooks/a", "httpx://h/webhooks/a"),
            ("", ""),
        ];
        for (target, path) in cases {
            check(target, path);
        }
    }
}
