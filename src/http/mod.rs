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
    pub headers: Headers,
    /// The body bytes signatures are checked over (after de-chunking).
    pub body: Vec<u8>,
    /// Whether the connection stays open after the answer (HTTP/1.1 default unless
    /// `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`).
    pub keep_alive: bool,
}

impl Request {
    /// The first value of header `name` (give it lowercase).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.values(name).next()
    }

    /// The first value of header `name` as UTF-8, `None` if absent or not UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Every value of header `name`, in arrival order.
    pub fn headers_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.values(name)
    }

    /// The path part of the target (see [`target_path`]).
    pub fn path(&self) -> &str {
        target_path(&self.target)
    }
}

/// A request's header fields in arrival order, names lowercased, values as raw bytes, stored
/// in one buffer: the framer copies a head's fields with two allocations instead of two per
/// field (docs/benchmarks.md run 32).
///
/// Build one with [`Headers::push`] or by collecting `(name, value)` pairs; read it with
/// [`Headers::iter`] (or [`Request::header`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    /// Every field's lowercased name followed by its value, field after field.
    bytes: Vec<u8>,
    /// Per field: where its name starts, where its name ends (and its value starts), where
    /// its value ends, as offsets into `bytes`.
    fields: Vec<[usize; 3]>,
}

impl Headers {
    /// Room for `fields` fields of `bytes` bytes (names plus values) in all.
    pub fn with_capacity(fields: usize, bytes: usize) -> Headers {
        Headers { bytes: Vec::with_capacity(bytes), fields: Vec::with_capacity(fields) }
    }

    /// Appends a field; `name` is stored lowercased (ASCII).
    pub fn push(&mut self, name: &str, value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend(name.bytes().map(|b| b.to_ascii_lowercase()));
        let name_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.fields.push([start, name_end, self.bytes.len()]);
    }

    /// The fields in arrival order: (lowercased name, raw value).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.fields.iter().map(|&[start, name_end, end]| {
            // Names were pushed as `&str` and lowercased byte by byte (ASCII only), so the
            // range is UTF-8; an empty name is what a broken range would read as.
            let name = std::str::from_utf8(&self.bytes[start..name_end]).unwrap_or("");
            (name, &self.bytes[name_end..end])
        })
    }

    /// Every value of the fields named `name` (give it lowercase), in arrival order.
    pub fn values<'a, 'n>(&'a self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        self.fields
            .iter()
            .filter(move |&&[start, name_end, _]| &self.bytes[start..name_end] == name.as_bytes())
            .map(|&[_, name_end, end]| &self.bytes[name_end..end])
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

/// As the `(name, value)` pairs they hold (values lossily as UTF-8), not as the buffer and its
/// offsets.
impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().map(|(n, v)| (n, String::from_utf8_lossy(v)))).finish()
    }
}

impl<N: AsRef<str>, V: AsRef<[u8]>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Headers {
        let mut headers = Headers::default();
        for (name, value) in pairs {
            headers.push(name.as_ref(), value.as_ref());
        }
        headers
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
    /// Head over `header_bytes_max` → 431 (whatever its number of fields).
    HeadersTooLarge,
    /// The request line with its line end over `header_bytes_max` (a long target) → 414 `uri_too_long`
    /// (RFC 9112 §3).
    UriTooLong,
    /// A request line whose version is `HTTP/d.d` with a major version other than 1 → 505
    /// `version_not_supported` (RFC 9110 §15.6.6); other bad versions are 400.
    VersionNotSupported,
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
    use super::{Head, Headers, Request};

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
            headers: super::Headers::default(),
            body: Vec::new(),
            keep_alive: true,
        };
        assert_eq!(head.path(), path, "Head::path of {target:?}");
        assert_eq!(request.path(), path, "Request::path of {target:?}");
    }

    /// Headers keep arrival order, lowercase names (never values), keep raw and empty values,
    /// and find every value of a repeated name, through each way of building them.
    #[test]
    fn headers_keep_order_names_and_raw_values() {
        let mut pushed = Headers::with_capacity(1, 4);
        pushed.push("Stripe-Signature", b"t=1,V1=AbC");
        pushed.push("x-EMPTY", b"");
        pushed.push("stripe-signature", b"\xff second");
        let collected: Headers = [
            ("Stripe-Signature", &b"t=1,V1=AbC"[..]),
            ("x-EMPTY", b""),
            ("stripe-signature", b"\xff second"),
        ]
        .into_iter()
        .collect();
        for headers in [&pushed, &collected] {
            let fields: Vec<(&str, &[u8])> = headers.iter().collect();
            assert_eq!(
                fields,
                [
                    ("stripe-signature", &b"t=1,V1=AbC"[..]),
                    ("x-empty", b""),
                    ("stripe-signature", b"\xff second")
                ]
            );
            assert_eq!(headers.len(), 3);
            let request = Request {
                method: "POST".to_owned(),
                target: "/".to_owned(),
                headers: headers.clone(),
                body: Vec::new(),
                keep_alive: true,
            };
            assert_eq!(request.header("stripe-signature"), Some(&b"t=1,V1=AbC"[..]));
            assert_eq!(request.header("x-empty"), Some(&b""[..]));
            assert_eq!(request.header("Stripe-Signature"), None, "lookups give lowercase names");
            assert_eq!(request.header("stripe"), None, "no prefix match");
            assert_eq!(request.header("stripe-signaturex"), None);
            let all: Vec<&[u8]> = request.headers_all("stripe-signature").collect();
            assert_eq!(all, [&b"t=1,V1=AbC"[..], b"\xff second"]);
        }
        assert_eq!(pushed, collected);
        assert!(Headers::default().is_empty());
        assert_eq!(
            format!("{pushed:?}"),
            "[(\"stripe-signature\", \"t=1,V1=AbC\"), (\"x-empty\", \"\"), (\"stripe-signature\", \"\u{fffd} second\")]"
        );
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
