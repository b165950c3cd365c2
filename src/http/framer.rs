//! The request framer: a sans-IO state machine that turns received bytes into a [`Frame::Head`]
//! and then a [`Frame::Request`] per request (RFC 9112 §2–§7), enforcing the head, header-count
//! and body limits before buffering what they bound.
//!
//! Phases of one request: `Head` (httparse over at most `header_bytes_max` bytes) → `Body`
//! (`Content-Length` copy, or the chunked decoder: size line → data → CRLF → … → trailers) →
//! back to `Head` for the next pipelined request. Any error is sticky: the connection is answered
//! and closed.

use super::{FrameError, Head, Headers, Limits, Request};
use crate::answer::Answer;
use crate::limits::HEADER_COUNT_MAX;

/// Longest chunk-size line (size, extensions and CRLF) in bytes; longer is 400. Extensions are
/// ignored, so there is no reason to buffer long ones.
const CHUNK_LINE_BYTES_MAX: usize = 1024;

/// What one [`Framer::advance`] call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// More bytes are needed; call again with the unconsumed input plus new bytes.
    Incomplete,
    /// A request head was parsed (its bytes consumed); the body follows. Route, answer
    /// 404/405/413 or send `100 Continue` now, then keep calling `advance`.
    Head(Head),
    /// The request is complete: the head's fields plus the de-chunked body. The framer is ready
    /// for the next pipelined request.
    Request(Request),
    /// The bytes cannot be framed; answer [`FrameError::answer`] and close the connection.
    /// Every later call returns the same error.
    Error(FrameError),
}

/// Frames HTTP/1.1 requests out of a connection's byte stream, one request at a time.
///
/// Bytes in, frames out, no IO: the caller owns the buffer and drops what `advance` consumed.
#[derive(Debug)]
pub struct Framer {
    limits: Limits,
    state: State,
}

/// Where the framer is in the current request.
#[derive(Debug)]
enum State {
    /// Waiting for a complete request head.
    Head,
    /// Head returned; reading the body.
    Body(BodyReader),
    /// Framing failed; the connection must close.
    Failed(FrameError),
}

/// The request being completed and the body framing it follows.
#[derive(Debug)]
struct BodyReader {
    request: Request,
    phase: Phase,
}

/// Body framing phases (RFC 9112 §6.3 and §7.1).
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// `Content-Length` body (or none): this many bytes still to copy.
    Length { remaining: usize },
    /// Expecting `chunk-size [ chunk-ext ] CRLF`.
    ChunkSize,
    /// Inside chunk data: this many bytes still to copy.
    ChunkData { remaining: usize },
    /// Expecting the CRLF after chunk data.
    ChunkEnd,
    /// After the last chunk: trailer lines until an empty line; `bytes` read so far.
    Trailers { bytes: usize },
}

/// The result of one body step.
enum Step {
    /// Consumed this many bytes (at least one) and moved on.
    Advanced(usize),
    /// Needs more input.
    Blocked,
    /// The body is complete after consuming this many more bytes.
    Done(usize),
    /// The body cannot be framed.
    Failed(FrameError),
}

/// A line found at the front of the input.
enum Line {
    /// A line of this many bytes, its LF included.
    Found(usize),
    /// No LF yet, and the bound is not reached.
    Partial,
    /// No LF within the bound.
    Overlong,
}

/// A parsed head: what the caller sees, the stored headers, and how to read the body.
struct ParsedHead {
    head: Head,
    headers: Headers,
    len: usize,
}

/// The framing-relevant header fields of one head, gathered as headers are seen.
#[derive(Default)]
struct Fields {
    content_length: Option<u64>,
    chunked: bool,
    close: bool,
    keep_alive: bool,
    expect_continue: bool,
    /// A `Content-Encoding` other than `identity` (RFC 9110 §8.4).
    content_encoded: bool,
    /// How many `Host` field lines were seen (RFC 9112 §3.2: exactly one in HTTP/1.1).
    hosts: usize,
}

impl Framer {
    /// The first value of header `name` (give it lowercase) of the request whose head was
    /// returned and whose body is being read; `None` between requests or when absent. Lets
    /// the caller decide on the head alone (e.g. refuse `100 Continue` to an unsigned
    /// delivery).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        match &self.state {
            State::Body(reader) => reader.request.header(name),
            State::Head | State::Failed(_) => None,
        }
    }

    /// A framer for a new connection, waiting for the first request head.
    pub fn new(limits: Limits) -> Framer {
        Framer { limits, state: State::Head }
    }

    /// Feeds the unconsumed input; returns (bytes consumed, frame). The caller drops the
    /// consumed bytes from the front of its buffer and calls again with what is left plus
    /// new bytes.
    ///
    /// Each request yields `Head` then `Request`. `Incomplete` may come with bytes consumed
    /// (body bytes are copied as they arrive, never re-read). After `Error` nothing is consumed.
    pub fn advance(&mut self, input: &[u8]) -> (usize, Frame) {
        let state = std::mem::replace(&mut self.state, State::Head);
        let (next, consumed, frame) = match state {
            State::Failed(e) => (State::Failed(e), 0, Frame::Error(e)),
            State::Head => read_head(input, self.limits),
            State::Body(mut reader) => match reader.read(input, self.limits) {
                (n, None) => (State::Body(reader), n, Frame::Incomplete),
                (n, Some(Ok(()))) => (State::Head, n, Frame::Request(reader.request)),
                (n, Some(Err(e))) => (State::Failed(e), n, Frame::Error(e)),
            },
        };
        self.state = next;
        (consumed, frame)
    }
}

impl FrameError {
    /// The answer a framing failure gets: 400 `bad_request`, 431 `headers_too_large`, 414
    /// `uri_too_long`, 505 `version_not_supported` or 413 `too_large`.
    pub fn answer(self) -> Answer {
        match self {
            FrameError::BadRequest => Answer::BadRequest,
            FrameError::HeadersTooLarge => Answer::HeadersTooLarge,
            FrameError::UriTooLong => Answer::UriTooLong,
            FrameError::VersionNotSupported => Answer::VersionNotSupported,
            FrameError::TooLarge => Answer::TooLarge,
        }
    }
}

/// The head state: parse, then move to the body (or fail).
fn read_head(input: &[u8], limits: Limits) -> (State, usize, Frame) {
    match parse_head(input, limits) {
        Ok(None) => (State::Head, 0, Frame::Incomplete),
        Ok(Some(ParsedHead { head, headers, len })) => {
            (body_state(&head, headers, limits), len, Frame::Head(head))
        }
        Err(e) => (State::Failed(e), 0, Frame::Error(e)),
    }
}

/// Parses the head at the front of `input`, looking at no more than `header_bytes_max` bytes
/// (SPEC §2: the head's size is the limit, whatever its number of fields). `Ok(None)` means
/// incomplete (and still within the limit).
fn parse_head(input: &[u8], limits: Limits) -> Result<Option<ParsedHead>, FrameError> {
    let window = &input[..input.len().min(limits.header_bytes_max)];
    // Uninitialised slots: httparse writes the ones it fills, and initialising all 64 cost a
    // 2 KiB store per parse attempt.
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADER_COUNT_MAX];
    let mut request = httparse::Request::new(&mut []);
    match request.parse_with_uninit_headers(window, &mut slots) {
        Err(httparse::Error::TooManyHeaders) => parse_long_head(input, window, limits),
        parsed => head_of(&request, parsed, input, limits),
    }
}

/// [`parse_head`] for a head with more than `HEADER_COUNT_MAX` fields (behind proxies that
/// each add their own): slots on the heap for as many as `window` can hold, so only its size
/// can refuse it.
fn parse_long_head(
    input: &[u8],
    window: &[u8],
    limits: Limits,
) -> Result<Option<ParsedHead>, FrameError> {
    // The shortest field line is 3 bytes: `a:` and a bare LF, which httparse accepts
    // (review: 150 such lines of a 500-byte head got 431 when room was made for CRLF lines).
    let mut slots = vec![httparse::EMPTY_HEADER; window.len() / 3 + 1];
    let mut request = httparse::Request::new(&mut slots);
    let parsed = request.parse(window);
    head_of(&request, parsed, input, limits)
}

/// What httparse's `parsed` of the head at the front of `input` means for the framer.
fn head_of(
    request: &httparse::Request<'_, '_>,
    parsed: httparse::Result<usize>,
    input: &[u8],
    limits: Limits,
) -> Result<Option<ParsedHead>, FrameError> {
    match parsed {
        Ok(httparse::Status::Complete(len)) => build_head(request, len).map(Some),
        Ok(httparse::Status::Partial) if input.len() >= limits.header_bytes_max => {
            let window = &input[..limits.header_bytes_max];
            let line = request_line(window);
            // No line end within the limit: the request line (with its line end) does not fit
            // in it, a target too long for us (RFC 9112 §3); nothing but empty lines is no
            // request at all.
            if line.contains(&b'\n') {
                Err(FrameError::HeadersTooLarge)
            } else if line.is_empty() {
                Err(FrameError::BadRequest)
            } else {
                Err(FrameError::UriTooLong)
            }
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(FrameError::HeadersTooLarge),
        Err(httparse::Error::Version) => {
            let window = &input[..input.len().min(limits.header_bytes_max)];
            if let Some(at) = later_minor_version(window) {
                // HTTP/1.2 to HTTP/1.9: processed as HTTP/1.1, the highest minor version of
                // that major version we conform to (RFC 9110 §2.5), which httparse refuses.
                let mut as_one_one = window.to_vec();
                as_one_one[at] = b'1';
                return parse_head(&as_one_one, limits);
            }
            match names_another_major_version(window) {
                Some(true) => Err(FrameError::VersionNotSupported),
                Some(false) => Err(FrameError::BadRequest),
                None if window.len() >= limits.header_bytes_max => Err(FrameError::UriTooLong),
                None => Ok(None),
            }
        }
        Err(_) => Err(FrameError::BadRequest),
    }
}

/// `window` without the empty lines httparse skips before a request line (RFC 9112 §2.2).
fn request_line(window: &[u8]) -> &[u8] {
    let start = window.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(window.len());
    &window[start..]
}

/// After httparse refused the version of the request line at the front of `window`: where its
/// minor digit is (an index into `window`) when the whole line ends in `HTTP/1.2` to
/// `HTTP/1.9`, a later minor version of HTTP/1 than we implement; `None` otherwise.
fn later_minor_version(window: &[u8]) -> Option<usize> {
    let line = request_line(window);
    let start = window.len() - line.len();
    let end = line.iter().position(|&b| b == b'\n')?;
    let text = &line[..end];
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let version_at = text.iter().enumerate().filter(|(_, &b)| b == b' ').nth(1)?.0 + 1;
    let version = &text[version_at..];
    let later =
        version.len() == 8 && version.starts_with(b"HTTP/1.") && matches!(version[7], b'2'..=b'9');
    later.then_some(start + version_at + 7)
}

/// After httparse refused the version of the request line at the front of `window`: whether
/// that version — the third token, after method and target — is a well-formed `HTTP/d.d` with
/// a major version other than 1 (`HTTP/2.0`, `HTTP/3.0`, HTTP/2's `PRI * HTTP/2.0` preface), a
/// version we understand and do not speak, answered 505 rather than 400. `None` while the
/// line is incomplete and its next bytes could still make it one (httparse refuses `HTTP/2`
/// before the line ends), so the answer does not depend on how the bytes were split into
/// reads. Anything after the version (a space, a fourth token) makes the line malformed: 400.
fn names_another_major_version(window: &[u8]) -> Option<bool> {
    let window = request_line(window);
    let (line, complete) = match window.iter().position(|&b| b == b'\n') {
        Some(end) => (&window[..end], true),
        None => (window, false),
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut tokens = line.splitn(3, |&b| b == b' ');
    let version = tokens.nth(2).unwrap_or_default();
    // A prefix of `HTTP/` DIGIT `.` DIGIT, and nothing after it.
    let shaped = version.len() <= 8
        && version.iter().enumerate().all(|(i, &b)| match i {
            0..=4 => b == b"HTTP/"[i],
            5 | 7 => b.is_ascii_digit(),
            _ => b == b'.',
        });
    let not_one = version.get(5).is_none_or(|&major| major != b'1');
    match complete {
        true => Some(shaped && not_one && version.len() == 8),
        // Shaped so far: it may yet be another major version, or a later minor one of HTTP/1
        // (`HTTP/1.2`, [`later_minor_version`]), once the line ends.
        false if shaped => None,
        false => Some(false),
    }
}

/// Turns httparse's view of a complete head into a [`ParsedHead`], applying the framing rules
/// of RFC 9112 §6 (one of `Content-Length` / `Transfer-Encoding: chunked`) and §9.3
/// (persistence).
fn build_head(request: &httparse::Request<'_, '_>, len: usize) -> Result<ParsedHead, FrameError> {
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Err(FrameError::BadRequest);
    };
    let mut fields = Fields::default();
    let bytes = request.headers.iter().map(|h| h.name.len() + h.value.len()).sum();
    let mut headers = Headers::with_capacity(request.headers.len(), bytes);
    for header in request.headers.iter() {
        fields.add(header.name, header.value)?;
        headers.push(header.name, header.value);
    }
    let http_11 = match version {
        0 => false,
        1 => true,
        _ => return Err(FrameError::BadRequest),
    };
    fields.check(http_11)?;
    let head = Head {
        method: method.to_owned(),
        target: target.to_owned(),
        content_length: fields.content_length,
        chunked: fields.chunked,
        expect_continue: http_11 && fields.expect_continue,
        keep_alive: !fields.close && (http_11 || fields.keep_alive),
        content_encoded: fields.content_encoded,
    };
    Ok(ParsedHead { head, headers, len })
}

/// The state after a head: read its body, or fail at once with `TooLarge` when the declared
/// `Content-Length` is over `body_bytes_max` (R24: 413 before any body byte is buffered).
fn body_state(head: &Head, headers: Headers, limits: Limits) -> State {
    let phase = match head.content_length {
        _ if head.chunked => Phase::ChunkSize,
        None => Phase::Length { remaining: 0 },
        Some(declared) => match usize::try_from(declared) {
            Ok(n) if n <= limits.body_bytes_max => Phase::Length { remaining: n },
            _ => return State::Failed(FrameError::TooLarge),
        },
    };
    let reserve = match phase {
        Phase::Length { remaining } => remaining,
        _ => 0,
    };
    let request = Request {
        method: head.method.clone(),
        target: head.target.clone(),
        headers,
        body: Vec::with_capacity(reserve),
        keep_alive: head.keep_alive,
    };
    State::Body(BodyReader { request, phase })
}

impl Fields {
    /// Notes one header line; rejects values that make the framing ambiguous.
    fn add(&mut self, name: &str, value: &[u8]) -> Result<(), FrameError> {
        let value = value.trim_ascii();
        if name.eq_ignore_ascii_case("content-length") {
            let length = parse_content_length(value)?;
            if self.content_length.is_some_and(|seen| seen != length) {
                return Err(FrameError::BadRequest);
            }
            self.content_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Only a single `chunked` is supported; `gzip, chunked` or a repeated header is not.
            if self.chunked || !value.eq_ignore_ascii_case(b"chunked") {
                return Err(FrameError::BadRequest);
            }
            self.chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                self.close |= token.eq_ignore_ascii_case(b"close");
                self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            self.expect_continue |= value.eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case("host") {
            if !is_host(value) {
                return Err(FrameError::BadRequest);
            }
            self.hosts += 1;
        } else if name.eq_ignore_ascii_case("content-encoding") {
            self.content_encoded |= super::is_content_encoded(value);
        }
        Ok(())
    }

    /// Whole-head rules: `Content-Length` with `Transfer-Encoding` is a smuggling attempt
    /// (RFC 9112 §6.1, rejected rather than guessed), and `Transfer-Encoding` in HTTP/1.0 is
    /// faulty framing (same section). RFC 9112 §3.2: an HTTP/1.1 request without `Host`, or any
    /// request with more than one `Host` line, is answered 400 (HTTP/1.0 may omit it).
    fn check(&self, http_11: bool) -> Result<(), FrameError> {
        if self.chunked && (self.content_length.is_some() || !http_11) {
            return Err(FrameError::BadRequest);
        }
        if self.hosts > 1 || (http_11 && self.hosts == 0) {
            return Err(FrameError::BadRequest);
        }
        Ok(())
    }
}

/// `Host = uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2-3.2.3): a bracketed IP
/// literal (with an RFC 6874 zone, `%25eth0`) or a reg-name (unreserved, percent-encoded and sub-delims characters; an IPv4
/// address is one too), then optional digits after a colon. Empty is allowed (an empty
/// authority, RFC 9112 §3.2); anything else — spaces, `/`, `@`, controls — is an invalid
/// value, answered 400 (RFC 9112 §3.2 requires it).
fn is_host(value: &[u8]) -> bool {
    let (host, port) = if value.first() == Some(&b'[') {
        let Some(end) = value.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &value[1..end];
        let ok = !literal.is_empty()
            && literal
                .iter()
                .all(|&b| matches!(b, b':' | b'%') || is_unreserved(b) || is_sub_delim(b));
        if !ok {
            return false;
        }
        match &value[end + 1..] {
            [] => return true,
            [b':', port @ ..] => (&[][..], port),
            _ => return false,
        }
    } else {
        match value.iter().rposition(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon + 1..]),
            None => (value, &[][..]),
        }
    };
    is_reg_name(host) && port.iter().all(u8::is_ascii_digit)
}

/// `reg-name = *( unreserved / pct-encoded / sub-delims )` (RFC 3986 §3.2.2).
fn is_reg_name(name: &[u8]) -> bool {
    let mut i = 0;
    while i < name.len() {
        let b = name[i];
        if b == b'%' {
            let hex = name.get(i + 1..i + 3);
            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                return false;
            }
            i += 3;
            continue;
        }
        if !is_unreserved(b) && !is_sub_delim(b) {
            return false;
        }
        i += 1;
    }
    true
}

/// `tchar` (RFC 9110 §5.6.2): the characters of a token, such as a field name.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `unreserved = ALPHA / DIGIT / "-" / "." / "_" / "~"` (RFC 3986 §2.3).
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `sub-delims = "!" / "$" / "&" / "'" / "(" / ")" / "*" / "+" / "," / ";" / "="` (RFC 3986 §2.2).
fn is_sub_delim(b: u8) -> bool {
    matches!(b, b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=')
}

/// `Content-Length = 1*DIGIT` (RFC 9110 §8.6); a list of identical values counts as one.
fn parse_content_length(value: &[u8]) -> Result<u64, FrameError> {
    let mut length = None;
    for item in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
        let n = parse_decimal(item).ok_or(FrameError::BadRequest)?;
        if length.is_some_and(|seen| seen != n) {
            return Err(FrameError::BadRequest);
        }
        length = Some(n);
    }
    length.ok_or(FrameError::BadRequest)
}

/// `1*DIGIT` as a u64; `None` when empty, not all digits, or overflowing.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, b| {
        let digit = char::from(*b).to_digit(10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

impl BodyReader {
    /// Reads as much of the body as `input` holds. Returns the bytes consumed and `None`
    /// (more needed), `Some(Ok(()))` (complete) or `Some(Err(_))`.
    fn read(&mut self, input: &[u8], limits: Limits) -> (usize, Option<Result<(), FrameError>>) {
        let mut consumed = 0;
        loop {
            match self.step(&input[consumed..], limits) {
                Step::Advanced(n) => consumed += n,
                Step::Blocked => return (consumed, None),
                Step::Done(n) => return (consumed + n, Some(Ok(()))),
                Step::Failed(e) => return (consumed, Some(Err(e))),
            }
        }
    }

    /// One step of the current phase.
    fn step(&mut self, input: &[u8], limits: Limits) -> Step {
        match self.phase {
            Phase::Length { remaining: 0 } => Step::Done(0),
            Phase::Length { remaining } => match self.copy(input, remaining) {
                (n, 0) => Step::Done(n),
                (0, _) => Step::Blocked,
                (n, remaining) => {
                    self.phase = Phase::Length { remaining };
                    Step::Advanced(n)
                }
            },
            Phase::ChunkSize => self.chunk_size(input, limits),
            Phase::ChunkData { remaining } => match self.copy(input, remaining) {
                (0, _) => Step::Blocked,
                (n, 0) => {
                    self.phase = Phase::ChunkEnd;
                    Step::Advanced(n)
                }
                (n, remaining) => {
                    self.phase = Phase::ChunkData { remaining };
                    Step::Advanced(n)
                }
            },
            Phase::ChunkEnd => self.chunk_end(input),
            Phase::Trailers { bytes } => self.trailer(input, bytes, limits),
        }
    }

    /// Copies up to `remaining` body bytes; returns (copied, still remaining).
    fn copy(&mut self, input: &[u8], remaining: usize) -> (usize, usize) {
        let n = remaining.min(input.len());
        self.request.body.extend_from_slice(&input[..n]);
        (n, remaining - n)
    }

    /// `chunk-size [ chunk-ext ] CRLF` (RFC 9112 §7.1); extensions are ignored. A chunk that
    /// would take the body over `body_bytes_max` fails before any of its data is read.
    fn chunk_size(&mut self, input: &[u8], limits: Limits) -> Step {
        let len = match find_line(input, CHUNK_LINE_BYTES_MAX) {
            Line::Found(len) => len,
            Line::Partial => return Step::Blocked,
            Line::Overlong => return Step::Failed(FrameError::BadRequest),
        };
        let Some(size) = parse_chunk_size(&input[..len]) else {
            return Step::Failed(FrameError::BadRequest);
        };
        let room = limits.body_bytes_max.saturating_sub(self.request.body.len());
        self.phase = match usize::try_from(size) {
            Ok(0) => Phase::Trailers { bytes: 0 },
            Ok(remaining) if remaining <= room => Phase::ChunkData { remaining },
            _ => return Step::Failed(FrameError::TooLarge),
        };
        Step::Advanced(len)
    }

    /// The CRLF that ends chunk data.
    fn chunk_end(&mut self, input: &[u8]) -> Step {
        match input {
            [b'\r', b'\n', ..] => {
                self.phase = Phase::ChunkSize;
                Step::Advanced(2)
            }
            [] | [b'\r'] => Step::Blocked,
            _ => Step::Failed(FrameError::BadRequest),
        }
    }

    /// One trailer line (read and discarded, RFC 9112 §7.1.2), or the empty line that ends the
    /// body. The trailer section is bounded by `header_bytes_max`.
    fn trailer(&mut self, input: &[u8], bytes: usize, limits: Limits) -> Step {
        let len = match find_line(input, limits.header_bytes_max.saturating_sub(bytes)) {
            Line::Found(len) => len,
            Line::Partial => return Step::Blocked,
            Line::Overlong => return Step::Failed(FrameError::HeadersTooLarge),
        };
        match &input[..len] {
            b"\r\n" => Step::Done(len),
            line if is_trailer_line(line) => {
                self.phase = Phase::Trailers { bytes: bytes + len };
                Step::Advanced(len)
            }
            _ => Step::Failed(FrameError::BadRequest),
        }
    }
}

/// Finds the first line of `input` within `bytes_max` bytes (LF included).
fn find_line(input: &[u8], bytes_max: usize) -> Line {
    let window = &input[..input.len().min(bytes_max)];
    match window.iter().position(|b| *b == b'\n') {
        Some(lf) => Line::Found(lf + 1),
        None if input.len() >= bytes_max => Line::Overlong,
        None => Line::Partial,
    }
}

/// `1*HEXDIG [ BWS ";" … ] CRLF` → the size; `None` when malformed or overflowing u64.
fn parse_chunk_size(line: &[u8]) -> Option<u64> {
    let content = line.strip_suffix(b"\r\n")?;
    let digits = content.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || !is_chunk_ext(&content[digits..]) {
        return None;
    }
    content[..digits].iter().try_fold(0u64, |n, b| {
        let digit = char::from(*b).to_digit(16)?;
        n.checked_mul(16)?.checked_add(u64::from(digit))
    })
}

/// Empty, or optional spaces/tabs then `;` and visible text (the extensions themselves are
/// ignored, but no control character may hide in them).
fn is_chunk_ext(rest: &[u8]) -> bool {
    let start = rest.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
    match &rest[start..] {
        [] => start == 0,
        [b';', ext @ ..] => {
            ext.iter().all(|b| *b == b'\t' || (0x20..0x7f).contains(b) || *b >= 0x80)
        }
        _ => false,
    }
}

/// A trailer field line: `name ":" value CRLF`, no bare CR inside, non-empty name.
fn is_trailer_line(line: &[u8]) -> bool {
    let Some(content) = line.strip_suffix(b"\r\n") else {
        return false;
    };
    let colon = content.iter().position(|b| *b == b':');
    colon.is_some_and(|c| c > 0) && !content.contains(&b'\r')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { header_bytes_max: 1024, body_bytes_max: 64 };

    /// Renders one frame as a line; `Incomplete` renders as nothing.
    fn render(frame: &Frame) -> Option<String> {
        match frame {
            Frame::Incomplete => None,
            Frame::Head(h) => Some(format!(
                "head {} {} cl={:?} chunked={} expect={} keep_alive={}",
                h.method, h.target, h.content_length, h.chunked, h.expect_continue, h.keep_alive
            )),
            Frame::Request(r) => {
                let headers: Vec<String> = r
                    .headers
                    .iter()
                    .map(|(n, v)| format!("{n}={}", String::from_utf8_lossy(v)))
                    .collect();
                Some(format!(
                    "request {} {} keep_alive={} [{}] body={:?}",
                    r.method,
                    r.target,
                    r.keep_alive,
                    headers.join(" "),
                    String::from_utf8_lossy(&r.body)
                ))
            }
            Frame::Error(e) => Some(format!("error {e:?}")),
        }
    }

    /// Feeds `input` in the given pieces, the way a connection would, and renders every frame
    /// plus the bytes never consumed (`left N`). Stops advancing after an error.
    fn run(limits: Limits, input: &[u8], pieces: &[usize]) -> Vec<String> {
        let mut framer = Framer::new(limits);
        let (mut buf, mut out, mut failed, mut at) = (Vec::new(), Vec::new(), false, 0);
        for piece in pieces {
            buf.extend_from_slice(&input[at..at + piece]);
            at += piece;
            while !failed {
                let (n, frame) = framer.advance(&buf);
                assert!(n <= buf.len());
                buf.drain(..n);
                failed = matches!(frame, Frame::Error(_));
                match render(&frame) {
                    Some(line) => out.push(line),
                    None => break,
                }
            }
        }
        out.push(format!("left {}", buf.len()));
        out
    }

    /// Random piece sizes of 1..=max bytes covering `len`, from a tiny LCG.
    fn random_pieces(len: usize, seed: u64, max: u64) -> Vec<usize> {
        let (mut state, mut pieces, mut total) = (seed, Vec::new(), 0);
        while total < len {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let piece = usize::try_from((state >> 33) % max + 1).unwrap().min(len - total);
            pieces.push(piece);
            total += piece;
        }
        pieces
    }

    /// Frames `input` whole, byte by byte and in random splits; all must render as `expect`.
    fn check_with(limits: Limits, input: &[u8], expect: &str) {
        let whole = run(limits, input, &[input.len()]);
        assert_eq!(whole.join("\n"), expect.trim(), "whole input");
        assert_eq!(run(limits, input, &vec![1; input.len()]), whole, "byte by byte");
        for seed in 0..20 {
            let pieces = random_pieces(input.len(), seed, 1 + seed * 3);
            assert_eq!(run(limits, input, &pieces), whole, "split seed {seed}");
        }
    }

    fn check(input: &str, expect: &str) {
        check_with(LIMITS, input.as_bytes(), expect);
    }

    #[test]
    fn content_length_body() {
        check(
            "POST /webhooks/a?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
            r#"
head POST /webhooks/a?x=1 cl=Some(5) chunked=false expect=false keep_alive=true
request POST /webhooks/a?x=1 keep_alive=true [host=h content-length=5] body="hello"
left 0"#,
        );
    }

    #[test]
    fn empty_bodies() {
        let cases = [
            ("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", "cl=Some(0)"),
            ("GET / HTTP/1.1\r\nHost: h\r\n\r\n", "cl=None"),
        ];
        for (input, cl) in cases {
            let method = &input[..input.find(' ').unwrap()];
            let headers = if cl == "cl=None" { "host=h" } else { "host=h content-length=0" };
            check(
                input,
                &format!(
                    "head {method} / {cl} chunked=false expect=false keep_alive=true\n\
                     request {method} / keep_alive=true [{headers}] body=\"\"\nleft 0"
                ),
            );
        }
    }

    #[test]
    fn pipelined_requests() {
        let one = "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi";
        let two = "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\
                   3\r\nabc\r\n0\r\n\r\n";
        let three = "GET /c HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
        let mut input = String::new();
        let mut expect = String::new();
        for _ in 0..10 {
            input += &format!("{one}{two}{three}");
            expect += "head POST /a cl=Some(2) chunked=false expect=false keep_alive=true\n\
                request POST /a keep_alive=true [host=h content-length=2] body=\"hi\"\n\
                head POST /b cl=None chunked=true expect=false keep_alive=true\n\
                request POST /b keep_alive=true [host=h transfer-encoding=chunked] body=\"abc\"\n\
                head GET /c cl=None chunked=false expect=false keep_alive=false\n\
                request GET /c keep_alive=false [host=h connection=close] body=\"\"\n";
        }
        check(&input, &(expect + "left 0"));
    }

    #[test]
    fn chunked_bodies() {
        // `|` marks where framing stops: the bytes after it are left unconsumed.
        let cases = [
            (
                "4;name=value\r\nwebh\r\n5 ; x\r\nooks!\r\n0\r\nX-Trailer: t\r\nY: 2\r\n\r\n|",
                "body=\"webhooks!\"",
            ),
            ("A\r\n0123456789\r\n0\r\n\r\n|NEXT", "body=\"0123456789\""),
            ("0\r\n\r\n|", "body=\"\""),
            ("3\r\nabc|X\r\n", "error BadRequest"),
            ("3\r\nabc|\n0\r\n\r\n", "error BadRequest"),
            ("|g\r\n", "error BadRequest"),
            ("|\r\n", "error BadRequest"),
            ("|3x\r\nabc\r\n0\r\n\r\n", "error BadRequest"),
            ("|3\nabc\r\n0\r\n\r\n", "error BadRequest"),
            ("|3;a\0b\r\nabc\r\n0\r\n\r\n", "error BadRequest"),
            ("|ffffffffffffffffff\r\n", "error BadRequest"),
            ("0\r\n|nocolon\r\n\r\n", "error BadRequest"),
            ("|41\r\n", "error TooLarge"),
            ("20\r\n0123456789abcdef0123456789abcdef\r\n|21\r\n", "error TooLarge"),
        ];
        let head = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n";
        let head_line = "head POST /c cl=None chunked=true expect=false keep_alive=true";
        let request_line = "request POST /c keep_alive=true [host=h transfer-encoding=Chunked]";
        for (body, outcome) in cases {
            let (done, left) = body.split_once('|').unwrap();
            let outcome = match outcome.starts_with("body=") {
                true => format!("{request_line} {outcome}"),
                false => outcome.to_owned(),
            };
            let expect = format!("{head_line}\n{outcome}\nleft {}", left.len());
            check(&format!("{head}{done}{left}"), &expect);
        }
    }

    #[test]
    fn chunk_line_and_trailers_are_bounded() {
        let head = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
        let head_line = "head POST /c cl=None chunked=true expect=false keep_alive=true";
        let long_ext = format!("1;{}\r\n", "e".repeat(CHUNK_LINE_BYTES_MAX));
        let expect = format!("{head_line}\nerror BadRequest\nleft {}", long_ext.len());
        check(&format!("{head}{long_ext}"), &expect);
        let trailer = format!("0\r\nX: {}\r\n\r\n", "t".repeat(LIMITS.header_bytes_max));
        let expect = format!("{head_line}\nerror HeadersTooLarge\nleft {}", trailer.len() - 3);
        check(&format!("{head}{trailer}"), &expect);
    }

    #[test]
    fn framing_errors() {
        let cases = [
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\
             Transfer-Encoding: chunked\r\n\r\nabc",
            "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\
             Content-Length: 3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 4\r\n\r\nabcd",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3x\r\n\r\nabc",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\
             Transfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "POST / HTTP/1.10\r\nHost: h\r\n\r\n",
            "POST / HTTP/1.2 HTTP/1.1\r\nHost: h\r\n\r\n",
            "POST / HTTP/2.x\r\nHost: h\r\n\r\n",
            "POST / HTTP/20.0\r\nHost: h\r\n\r\n",
            "POST / HTTPS/2.0\r\nHost: h\r\n\r\n",
            "\x16\x03\x01\x02\x00\x01\x00\x01",
            "GARBAGE\r\n\r\n",
            "POST /a b HTTP/1.1\r\nHost: h\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nBad Name: x\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nFolded: x\r\n y\r\n\r\n",
        ];
        for input in cases {
            check(input, &format!("error BadRequest\nleft {}", input.len()));
        }
    }

    /// RFC 9112 §3.2: exactly one `Host` in HTTP/1.1, at most one in HTTP/1.0; a bad head is
    /// refused before any body byte is consumed, on the first or any pipelined request.
    #[test]
    fn host_header() {
        let ok = |version: &str, headers: &str| {
            format!(
                "head POST / cl=Some(2) chunked=false expect=false keep_alive={}\n\
                 request POST / keep_alive={} [{headers}content-length=2] body=\"hi\"\nleft 0",
                version == "1.1",
                version == "1.1",
            )
        };
        // (version, header lines before `Content-Length: 2`, expected rendering or `None` for
        // 400 with every byte left unconsumed)
        let cases = [
            ("1.1", "Host: h\r\n", Some(ok("1.1", "host=h "))),
            ("1.1", "HOST: h:8080\r\n", Some(ok("1.1", "host=h:8080 "))),
            ("1.1", "Host:\r\n", Some(ok("1.1", "host= "))),
            ("1.0", "", Some(ok("1.0", ""))),
            ("1.0", "Host: h\r\n", Some(ok("1.0", "host=h "))),
            ("1.1", "", None),
            ("1.1", "X-Host: h\r\nHost-Name: h\r\n", None),
            ("1.1", "Host: h\r\nHost: h\r\n", None),
            ("1.1", "Host: a\r\nhost: b\r\n", None),
            ("1.1", "Host: a\r\nX: y\r\nHost: a\r\n", None),
            ("1.0", "Host: a\r\nHost: b\r\n", None),
            // RFC 9112 §3.2: an invalid Host value is a 400, like a missing one.
            ("1.1", "Host: 127.0.0.1:9090\r\n", Some(ok("1.1", "host=127.0.0.1:9090 "))),
            ("1.1", "Host: [::1]:9090\r\n", Some(ok("1.1", "host=[::1]:9090 "))),
            ("1.1", "Host: [fe80::1%25eth0]\r\n", Some(ok("1.1", "host=[fe80::1%25eth0] "))),
            ("1.1", "Host: ex%41mple.com:\r\n", Some(ok("1.1", "host=ex%41mple.com: "))),
            ("1.1", "Host: a b\r\n", None),
            ("1.1", "Host: h/x\r\n", None),
            ("1.1", "Host: user@h\r\n", None),
            ("1.1", "Host: h:80x\r\n", None),
            ("1.1", "Host: h:8:80\r\n", None),
            ("1.1", "Host: [::1\r\n", None),
            ("1.1", "Host: []\r\n", None),
            ("1.1", "Host: [::1]x\r\n", None),
            ("1.1", "Host: h%zz\r\n", None),
            ("1.1", "Host: h\"\r\n", None),
            ("1.0", "Host: a b\r\n", None),
        ];
        for (version, headers, expect) in cases {
            let input = format!("POST / HTTP/{version}\r\n{headers}Content-Length: 2\r\n\r\nhi");
            let expect = expect.unwrap_or(format!("error BadRequest\nleft {}", input.len()));
            check(&input, &expect);
        }
        // Chunked: refused before the chunk-size line is read.
        let chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        check(chunked, &format!("error BadRequest\nleft {}", chunked.len()));
        // A later pipelined request is held to the same rule.
        let first = "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi";
        let second = "POST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi";
        check(
            &format!("{first}{second}"),
            &format!(
                "head POST /a cl=Some(2) chunked=false expect=false keep_alive=true\n\
                 request POST /a keep_alive=true [host=h content-length=2] body=\"hi\"\n\
                 error BadRequest\nleft {}",
                second.len()
            ),
        );
    }

    /// Absolute-form targets (RFC 9112 §3.2.2) frame as sent; `path()` routes on their path.
    #[test]
    fn absolute_form_targets() {
        let cases = [
            ("http://h:8080/webhooks/a?x=1", "/webhooks/a"),
            ("HTTPS://h/webhooks/a", "/webhooks/a"),
            ("http://h", "/"),
            ("/webhooks/a", "/webhooks/a"),
        ];
        for (target, path) in cases {
            let input = format!("POST {target} HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
            let mut framer = Framer::new(LIMITS);
            let (_, frame) = framer.advance(input.as_bytes());
            let Frame::Head(head) = frame else { panic!("{input:?}: {frame:?}") };
            assert_eq!((head.target.as_str(), head.path()), (target, path), "{input:?}");
            let Frame::Request(request) = framer.advance(b"").1 else { panic!("{input:?}") };
            assert_eq!((request.target.as_str(), request.path()), (target, path), "{input:?}");
        }
    }

    #[test]
    fn duplicate_equal_content_lengths_are_one() {
        check(
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\ncontent-length: 2, 2\r\n\r\nok",
            r#"
head POST / cl=Some(2) chunked=false expect=false keep_alive=true
request POST / keep_alive=true [host=h content-length=2 content-length=2, 2] body="ok"
left 0"#,
        );
    }

    #[test]
    fn oversized_content_length_consumes_no_body_byte() {
        let input = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 65\r\n\r\nabc";
        let head_len = input.len() - 3;
        check(
            input,
            "head POST / cl=Some(65) chunked=false expect=false keep_alive=true\n\
             error TooLarge\nleft 3",
        );
        let mut framer = Framer::new(LIMITS);
        assert!(matches!(framer.advance(input.as_bytes()), (n, Frame::Head(_)) if n == head_len));
        let body = &input.as_bytes()[head_len..];
        assert_eq!(framer.advance(body), (0, Frame::Error(FrameError::TooLarge)));
        assert_eq!(framer.advance(body), (0, Frame::Error(FrameError::TooLarge)));
        // Exactly at the limit is fine.
        let at_limit =
            format!("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 64\r\n\r\n{}", "b".repeat(64));
        let run = run(LIMITS, at_limit.as_bytes(), &[at_limit.len()]);
        assert!(run[1].starts_with("request") && run[2] == "left 0", "{run:?}");
    }

    #[test]
    fn head_limits() {
        let max = LIMITS.header_bytes_max;
        let complete = format!("POST / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n", "v".repeat(max));
        check(&complete, &format!("error HeadersTooLarge\nleft {}", complete.len()));
        let incomplete = format!("POST / HTTP/1.1\r\nHost: h\r\nX: {}", "v".repeat(max));
        check(&incomplete, &format!("error HeadersTooLarge\nleft {}", incomplete.len()));
        let pad = max - "POST / HTTP/1.1\r\nHost: h\r\nX: \r\n\r\n".len();
        let exact = format!("POST / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n", "v".repeat(pad));
        assert_eq!(exact.len(), max);
        let run = run(LIMITS, exact.as_bytes(), &[exact.len()]);
        assert!(run[0].starts_with("head") && run[2] == "left 0", "{run:?}");
    }

    /// SPEC §2: only the head's size (`header_bytes_max`) limits it, not its number of fields:
    /// a request through a chain of proxies may carry more than the `HEADER_COUNT_MAX` fields
    /// parsed without allocating (it got 431 before), up to the most the size allows.
    #[test]
    fn only_the_heads_size_limits_its_fields() {
        let limits = Limits { header_bytes_max: 16_384, body_bytes_max: 64 };
        let headers = |n: usize| (0..n).map(|i| format!("h{i}: v\r\n")).collect::<String>();
        let listed = |n: usize| {
            std::iter::once("host=h".to_owned())
                .chain((0..n).map(|i| format!("h{i}=v")))
                .collect::<Vec<String>>()
                .join(" ")
        };
        for n in [HEADER_COUNT_MAX - 1, HEADER_COUNT_MAX, 10 * HEADER_COUNT_MAX] {
            let head = format!("POST / HTTP/1.1\r\nHost: h\r\n{}\r\n", headers(n));
            check_with(
                limits,
                head.as_bytes(),
                &format!(
                    "head POST / cl=None chunked=false expect=false keep_alive=true\n\
                     request POST / keep_alive=true [{}] body=\"\"\nleft 0",
                    listed(n)
                ),
            );
        }
        // As many fields as fit, with CRLF lines (4 bytes at the shortest) and with the bare
        // LF lines httparse also accepts (3 bytes).
        let start = "POST / HTTP/1.1\r\nHost: h\r\n";
        for line in ["a:\r\n", "a:\n"] {
            let densest = (limits.header_bytes_max - start.len() - 2) / line.len();
            let dense = |n: usize| format!("{start}{}\r\n", line.repeat(n));
            let fits = dense(densest);
            let run_fits = run(limits, fits.as_bytes(), &[fits.len()]);
            let whole = run_fits[0].starts_with("head") && run_fits[2] == "left 0";
            assert!(whole, "{densest} fields {line:?}: {run_fits:?}");
            let over = dense(densest + 1);
            assert!(over.len() > limits.header_bytes_max);
            let run_over = run(limits, over.as_bytes(), &[over.len()]);
            let refused = ["error HeadersTooLarge".to_owned(), format!("left {}", over.len())];
            assert_eq!(run_over, refused, "{line:?}");
        }
    }

    #[test]
    fn content_encoding_other_than_identity_is_noted() {
        let cases = [
            ("", false),
            ("Content-Encoding: identity\r\n", false),
            ("Content-Encoding: IDENTITY , \r\n", false),
            ("Content-Encoding: gzip\r\n", true),
            ("Content-Encoding: identity, br\r\n", true),
            ("Content-Encoding: identity\r\nContent-Encoding: deflate\r\n", true),
        ];
        for (headers, encoded) in cases {
            let input = format!("POST /x HTTP/1.1\r\nHost: h\r\n{headers}\r\n");
            let Frame::Head(head) = Framer::new(LIMITS).advance(input.as_bytes()).1 else {
                panic!("{input:?}")
            };
            assert_eq!(head.content_encoded, encoded, "{input:?}");
        }
    }

    #[test]
    fn persistence_and_expect() {
        // (version, headers, keep_alive, expect_continue)
        let cases = [
            ("1.1", "", true, false),
            ("1.1", "Connection: close\r\n", false, false),
            ("1.1", "Connection: Keep-Alive, CLOSE\r\n", false, false),
            ("1.1", "Connection: upgrade\r\n", true, false),
            ("1.0", "", false, false),
            ("1.0", "Connection: keep-alive\r\n", true, false),
            ("1.0", "Connection: foo, Keep-Alive\r\n", true, false),
            ("1.1", "Expect: 100-Continue\r\n", true, true),
            ("1.1", "Expect: something\r\n", true, false),
            ("1.0", "Expect: 100-continue\r\n", false, false),
        ];
        for (version, headers, keep_alive, expect_continue) in cases {
            let input = format!("POST /x HTTP/{version}\r\nHost: h\r\n{headers}\r\n");
            let mut framer = Framer::new(LIMITS);
            let (n, frame) = framer.advance(input.as_bytes());
            assert_eq!(n, input.len());
            let Frame::Head(head) = frame else { panic!("{input:?}: {frame:?}") };
            assert_eq!(head.keep_alive, keep_alive, "{input:?}");
            assert_eq!(head.expect_continue, expect_continue, "{input:?}");
            let Frame::Request(request) = framer.advance(b"").1 else { panic!("{input:?}") };
            assert_eq!(request.keep_alive, keep_alive, "{input:?}");
        }
    }

    #[test]
    fn body_bytes_are_consumed_as_they_arrive() {
        let mut framer = Framer::new(LIMITS);
        let head = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\n";
        assert!(matches!(framer.advance(head).1, Frame::Head(_)));
        assert_eq!(framer.advance(b"abc"), (3, Frame::Incomplete));
        assert_eq!(framer.advance(b""), (0, Frame::Incomplete));
        let (n, frame) = framer.advance(b"defGET");
        assert_eq!(n, 3);
        let Frame::Request(request) = frame else { panic!("{frame:?}") };
        assert_eq!(request.body, b"abcdef");
        assert_eq!(request.header_str("content-length"), Some("6"));
        assert_eq!(framer.advance(b"GET"), (0, Frame::Incomplete));
    }

    /// RFC 9110 §2.5: a later minor version of HTTP/1 (`HTTP/1.2` to `HTTP/1.9`) is processed
    /// as HTTP/1.1, whichever way the bytes were split (it was answered 400); a head of nothing
    /// but empty lines up to the limit is no request at all: 400, not 414.
    #[test]
    fn a_later_minor_version_is_processed_as_http_1_1() {
        let expect = "head POST / cl=Some(2) chunked=false expect=false keep_alive=true\n\
             request POST / keep_alive=true [host=h content-length=2] body=\"hi\"\nleft 0";
        for version in ["1.1", "1.2", "1.9"] {
            check(
                &format!("POST / HTTP/{version}\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"),
                expect,
            );
            check(&format!("\r\nPOST / HTTP/{version}\nHost: h\nContent-Length: 2\n\nhi"), expect);
        }
        let empty = "\r\n".repeat(LIMITS.header_bytes_max);
        check(&empty, &format!("error BadRequest\nleft {}", empty.len()));
    }

    /// RFC 9110 §15.6.6: a well-formed version with another major number (HTTP/2's
    /// prior-knowledge preface among them) is answered 505, whichever way the bytes were split.
    #[test]
    fn another_major_version_is_not_supported() {
        for input in [
            "POST / HTTP/2.0\r\nHost: h\r\n\r\n",
            "POST / HTTP/3.0\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET / HTTP/0.9\n\n",
        ] {
            check(input, &format!("error VersionNotSupported\nleft {}", input.len()));
        }
        // After an empty line, which is skipped (RFC 9112 §2.2).
        let late = "\r\nPOST / HTTP/2.0\r\n\r\n";
        check(late, &format!("error VersionNotSupported\nleft {}", late.len()));
        // The version is the token after the target; anything after it is malformed, and a
        // token that is not a version is so at once, however the line continues.
        for input in [
            "GET / HTTP/2x HTTP/2.0\r\n\r\n",
            "GET / HTTP/1.x HTTP/2.0\r\n\r\n",
            "POST / HTTP/2.0x HTTP/3.0\r\n\r\n",
            "POST / HTTP/2.0 \r\n\r\n",
        ] {
            check(input, &format!("error BadRequest\nleft {}", input.len()));
        }
        let padded = format!("GET / HTTP/2.0{}\r\n\r\n", " ".repeat(2 * LIMITS.header_bytes_max));
        check(&padded, &format!("error BadRequest\nleft {}", padded.len()));
        let mut framer = Framer::new(LIMITS);
        assert_eq!(framer.advance(b"POST / HTTP/2"), (0, Frame::Incomplete), "waits for the line");
        let refused = (0, Frame::Error(FrameError::VersionNotSupported));
        assert_eq!(framer.advance(b"POST / HTTP/2.0\r\n"), refused);
    }

    /// RFC 9112 §3: a request line with no end within `header_bytes_max` (a long target) is
    /// 414, a long head whose request line ended is 431.
    #[test]
    fn a_request_line_over_the_head_limit_is_uri_too_long() {
        let max = LIMITS.header_bytes_max;
        let long = format!("POST /{} HTTP/1.1\r\nHost: h\r\n\r\n", "a".repeat(max));
        check(&long, &format!("error UriTooLong\nleft {}", long.len()));
        let unended = format!("POST /{}", "a".repeat(max));
        check(&unended, &format!("error UriTooLong\nleft {}", unended.len()));
        let late = format!("\r\n{unended}");
        check(&late, &format!("error UriTooLong\nleft {}", late.len()));
        let line = "POST / HTTP/1.1\r\n";
        let head = format!("{line}Host: {}\r\n\r\n", "h".repeat(max));
        check(&head, &format!("error HeadersTooLarge\nleft {}", head.len()));
    }

    #[test]
    fn errors_map_to_answers() {
        assert_eq!(FrameError::BadRequest.answer(), Answer::BadRequest);
        assert_eq!(FrameError::HeadersTooLarge.answer(), Answer::HeadersTooLarge);
        assert_eq!(FrameError::UriTooLong.answer(), Answer::UriTooLong);
        assert_eq!(FrameError::VersionNotSupported.answer(), Answer::VersionNotSupported);
        assert_eq!(FrameError::TooLarge.answer(), Answer::TooLarge);
    }
}
