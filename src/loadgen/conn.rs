//! One `hookwall loadgen` connection: raw HTTP/1.1 over a tokio `TcpStream`, one request in
//! flight at a time (no pipelining), responses parsed with httparse and framed by
//! `Content-Length`, `chunked` or the end of the connection (RFC 9112 §6.3).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::limits::{HEADER_COUNT_MAX, LOADGEN_RESPONSE_BYTES_MAX};

/// Where requests go: the resolved address and the parts of the URL a request line needs.
#[derive(Debug, Clone)]
pub struct Target {
    /// The first resolved address of the URL's host and port.
    pub addr: SocketAddr,
    /// The `Host` header value (`host[:port]` as in the URL).
    pub host: String,
    /// Path and query (`/` when the URL has none).
    pub path: String,
}

/// The parts of a response the report needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// The body (at most [`LOADGEN_RESPONSE_BYTES_MAX`] bytes with the head).
    pub body: Vec<u8>,
    /// Whether the connection may carry the next request.
    pub keep_alive: bool,
}

/// Why an exchange failed; the connection is dropped after any of them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection before a whole response arrived.
    #[error("connection closed before a whole response")]
    Closed,
    /// The response is not HTTP/1.x, or its framing is broken.
    #[error("malformed response: {0}")]
    Malformed(&'static str),
    /// The response is larger than [`LOADGEN_RESPONSE_BYTES_MAX`].
    #[error("response larger than {LOADGEN_RESPONSE_BYTES_MAX} bytes")]
    TooLarge,
}

/// Opens a connection to `addr` with `TCP_NODELAY` (requests are single small writes).
///
/// # Errors
/// The connect error (refused, unreachable, …).
pub async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The bytes of `POST {path}` with `headers` and `body` (Content-Length framing, keep-alive).
pub fn request(target: &Target, headers: &[(&'static str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(target.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(target.host.as_bytes());
    out.extend_from_slice(b"\r\nUser-Agent: hookwall-loadgen\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

/// Writes `request` and reads one whole response; `buf` is the connection's read buffer
/// (bytes past the response stay in it).
///
/// # Errors
/// [`Error`]: IO, an early close, a malformed or oversized response.
pub async fn exchange(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    request: &[u8],
) -> Result<Response, Error> {
    stream.write_all(request).await?;
    loop {
        match parse(buf)? {
            Parsed::Whole(response, used) => {
                buf.drain(..used);
                return Ok(response);
            }
            Parsed::Partial => {}
        }
        if buf.len() >= LOADGEN_RESPONSE_BYTES_MAX {
            return Err(Error::TooLarge);
        }
        // Read straight into the buffer's spare capacity: no zeroed stack chunk per read
        // (16 KiB in each connection's future made 2 048 connections touch 32 MiB). Never past
        // the response limit: `reserve` may double the capacity, and one read fills all of it.
        buf.reserve(READ_RESERVE_BYTES);
        let room = LOADGEN_RESPONSE_BYTES_MAX - buf.len();
        let n = (&mut *stream).take(room as u64).read_buf(buf).await?;
        if n == 0 {
            // A response framed by the end of the connection is whole now.
            return match parse_at_eof(buf)? {
                Some(response) => {
                    buf.clear();
                    Ok(response)
                }
                None => Err(Error::Closed),
            };
        }
    }
}

/// Spare room made in a connection's read buffer before each read, in bytes: a typical
/// answer whole in one read.
const READ_RESERVE_BYTES: usize = 4096;

/// What [`parse`] found in the buffer.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    /// A whole response and the bytes it used.
    Whole(Response, usize),
    /// More bytes are needed.
    Partial,
}

/// How the body of a response is framed.
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

struct Head {
    status: u16,
    len: usize,
    framing: Framing,
    keep_alive: bool,
}

fn head(buf: &[u8]) -> Result<Option<Head>, Error> {
    let mut headers = [httparse::EMPTY_HEADER; HEADER_COUNT_MAX];
    let mut res = httparse::Response::new(&mut headers);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Error::Malformed("bad status line or header")),
    };
    let status = res.code.ok_or(Error::Malformed("no status code"))?;
    let mut keep_alive = res.version == Some(1);
    let mut framing = Framing::UntilClose;
    for h in res.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(h.value).map_err(|_| Error::Malformed("length"))?;
            let n = text.trim().parse().map_err(|_| Error::Malformed("content-length"))?;
            framing = Framing::Length(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if h.value.to_ascii_lowercase().ends_with(b"chunked") {
                framing = Framing::Chunked;
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = h.value.to_ascii_lowercase();
            if v == b"close" {
                keep_alive = false;
            } else if v == b"keep-alive" {
                keep_alive = true;
            }
        }
    }
    if matches!(status, 100..=199 | 204 | 304) {
        framing = Framing::Length(0);
    }
    if matches!(framing, Framing::UntilClose) {
        keep_alive = false;
    }
    Ok(Some(Head { status, len, framing, keep_alive }))
}

fn parse(buf: &[u8]) -> Result<Parsed, Error> {
    let Some(h) = head(buf)? else { return Ok(Parsed::Partial) };
    if (100..=199).contains(&h.status) {
        return Err(Error::Malformed("interim 1xx response to a request without Expect"));
    }
    let rest = &buf[h.len..];
    let (body, used) = match h.framing {
        Framing::Length(n) if rest.len() >= n => (rest[..n].to_vec(), h.len + n),
        Framing::Chunked => match dechunk(rest)? {
            Some((body, used)) => (body, h.len + used),
            None => return Ok(Parsed::Partial),
        },
        Framing::Length(_) | Framing::UntilClose => return Ok(Parsed::Partial),
    };
    Ok(Parsed::Whole(Response { status: h.status, body, keep_alive: h.keep_alive }, used))
}

fn parse_at_eof(buf: &[u8]) -> Result<Option<Response>, Error> {
    match head(buf)? {
        Some(h) if matches!(h.framing, Framing::UntilClose) => {
            Ok(Some(Response { status: h.status, body: buf[h.len..].to_vec(), keep_alive: false }))
        }
        _ => Ok(None),
    }
}

/// Decodes a whole chunked body at the start of `input`: the body and the bytes used, or
/// `None` when more bytes are needed. Trailers are skipped.
fn dechunk(input: &[u8]) -> Result<Option<(Vec<u8>, usize)>, Error> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = find_crlf(&input[at..]) else { return Ok(None) };
        let line = &input[at..at + eol];
        let size_text = line.split(|b| *b == b';').next().unwrap_or_default();
        let size_text = std::str::from_utf8(size_text).map_err(|_| Error::Malformed("chunk"))?;
        let size = usize::from_str_radix(size_text.trim(), 16)
            .map_err(|_| Error::Malformed("chunk size"))?;
        at += eol + 2;
        if size == 0 {
            // Trailer section: lines until an empty one.
            loop {
                let Some(eol) = find_crlf(&input[at..]) else { return Ok(None) };
                at += eol + 2;
                if eol == 0 {
                    return Ok(Some((body, at)));
                }
            }
        }
        if size > LOADGEN_RESPONSE_BYTES_MAX {
            return Err(Error::TooLarge);
        }
        if input.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&input[at..at + size]);
        if &input[at + size..at + size + 2] != b"\r\n" {
            return Err(Error::Malformed("chunk not followed by CRLF"));
        }
        at += size + 2;
    }
}

fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(wire: &str, expect: Option<(u16, &str, bool, usize)>) {
        let got = match parse(wire.as_bytes()).expect("well-formed") {
            Parsed::Whole(r, used) => {
                Some((r.status, String::from_utf8(r.body).expect("utf-8"), r.keep_alive, used))
            }
            Parsed::Partial => None,
        };
        let expect = expect.map(|(s, b, k, u)| (s, b.to_owned(), k, u));
        assert_eq!(got, expect, "{wire:?}");
    }

    #[test]
    fn responses_are_framed() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        check(ok, Some((200, "hi", true, ok.len())));
        check("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nhi", None);
        check("HTTP/1.1 200 OK\r\nContent-Len", None);
        let close = "HTTP/1.1 503 x\r\nConnection: close\r\nContent-Length: 0\r\n\r\nNEXT";
        check(close, Some((503, "", false, close.len() - 4)));
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n1;x=y\r\n!\r\n0\r\n\r\n";
        check(chunked, Some((200, "hi!", true, chunked.len())));
        check("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n", None);
        check("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", Some((200, "", false, 38)));
        check("HTTP/1.1 204 No Content\r\n\r\n", Some((204, "", true, 27)));
        // Framed by the close: never whole before EOF.
        check("HTTP/1.1 200 OK\r\n\r\nabc", None);
        let eof = parse_at_eof(b"HTTP/1.1 200 OK\r\n\r\nabc").expect("ok").expect("whole");
        assert_eq!((eof.status, eof.body.as_slice(), eof.keep_alive), (200, &b"abc"[..], false));
    }

    #[test]
    fn broken_responses_are_errors() {
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }

    #[test]
    fn the_request_is_one_post_with_a_length() {
        let target = Target {
            addr: "127.0.0.1:1".parse().expect("addr"),
            host: "example:1".to_owned(),
            path: "/webhooks/a?x=1".to_owned(),
        };
        let bytes = request(&target, &[("Stripe-Signature", "t=1,v1=ab".to_owned())], b"{}");
        let text = String::from_utf8(bytes).expect("utf-8");
        assert_eq!(
            text,
            "POST /webhooks/a?x=1 HTTP/1.1\r\nHost: example:1\r\nUser-Agent: hookwall-loadgen\r\nStripe-Signature: t=1,v1=ab\r\nContent-Length: 2\r\n\r\n{}"
        );
    }
}
