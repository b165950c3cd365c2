//! Response bytes: every answer hookwall gives is a small, complete HTTP/1.1 response with a
//! fixed JSON body (SPEC §3), written straight into the connection's output buffer.

use crate::answer::Answer;
use std::io::Write;

const BODY_START: &[u8] = b"{\"status\":\"";
const BODY_ID: &[u8] = b"\",\"id\":\"";
const BODY_END: &[u8] = b"\"}";
const VEC_WRITE: &str = "writing into a Vec<u8> cannot fail";

/// An HTTP date in IMF-fixdate form, e.g. `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 §5.6.7):
/// always 29 ASCII bytes.
pub type HttpDate = [u8; 29];

/// Unix seconds `unix_s` as an [`HttpDate`]. Times before 1970 are written as the epoch.
pub fn http_date(unix_s: i64) -> HttpDate {
    let secs = u64::try_from(unix_s).unwrap_or(0);
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    let text = httpdate::fmt_http_date(at);
    let mut date = [b' '; 29];
    let n = text.len().min(date.len());
    date[..n].copy_from_slice(&text.as_bytes()[..n]);
    date
}

/// The current second as an [`HttpDate`], for the `Date` header every answer carries
/// (RFC 9110 §6.6.1: an origin server with a clock must send it). Formatted once per second per
/// thread; the rest is a clock read.
pub fn http_date_now() -> HttpDate {
    thread_local! {
        static NOW: std::cell::Cell<(i64, HttpDate)> = const { std::cell::Cell::new((-1, [0; 29])) };
    }
    let unix_s = crate::clock::now_unix_s();
    NOW.with(|now| {
        let (at, date) = now.get();
        if at == unix_s {
            return date;
        }
        let date = http_date(unix_s);
        now.set((unix_s, date));
        date
    })
}

/// `Date: <date>\r\n`.
fn write_date(out: &mut Vec<u8>, date: &HttpDate) {
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n");
}

/// Writes a complete response for `answer`: status line with reason phrase, `Date: date`,
/// `Content-Type: application/json`,
/// `Content-Length`, `Retry-After` when answer.retry_after_s() is Some, `Connection: keep-alive` or `close`,
/// and the body `{"status":"<code>"}` or `{"status":"<code>","id":"<escaped id>"}`.
///
/// A 405 also carries `Allow: POST` (RFC 9110 §15.5.6 requires it). `event_id` is escaped as a
/// JSON string (RFC 8259 §7); the body is framed by `Content-Length` (RFC 9112 §6.2). Pass
/// `keep_alive = false` for every framing error: the connection is closed after it.
pub fn write_answer(
    out: &mut Vec<u8>,
    date: &HttpDate,
    answer: Answer,
    event_id: Option<&str>,
    keep_alive: bool,
) {
    write_answer_with(out, date, answer, event_id, keep_alive, true);
}

/// The head [`write_answer`] would write, without the body: the answer to a `HEAD` request
/// (RFC 9110 §9.3.2; `Content-Length` still states the body a POST would have got).
pub fn write_answer_head(out: &mut Vec<u8>, date: &HttpDate, answer: Answer, keep_alive: bool) {
    write_answer_with(out, date, answer, None, keep_alive, false);
}

fn write_answer_with(
    out: &mut Vec<u8>,
    date: &HttpDate,
    answer: Answer,
    event_id: Option<&str>,
    keep_alive: bool,
    with_body: bool,
) {
    let status = answer.http_status();
    let body_bytes = body_len(answer.code(), event_id);
    write!(out, "HTTP/1.1 {status} {}\r\n", reason(status)).expect(VEC_WRITE);
    write_date(out, date);
    write!(out, "Content-Type: application/json\r\nContent-Length: {body_bytes}\r\n")
        .expect(VEC_WRITE);
    if let Some(seconds) = answer.retry_after_s() {
        write!(out, "Retry-After: {seconds}\r\n").expect(VEC_WRITE);
    }
    if answer == Answer::MethodNotAllowed {
        out.extend_from_slice(b"Allow: POST\r\n");
    }
    // Stated either way: an HTTP/1.0 client keeps the connection only when told
    // `keep-alive` (RFC 9112 §9.3, Appendix C.2.2), and nginx does the same for 1.1.
    if keep_alive {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    } else {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !with_body {
        return;
    }
    let body_start = out.len();
    write_body(out, answer.code(), event_id);
    assert_eq!(out.len() - body_start, body_bytes, "Content-Length matches the body");
}

/// Writes a complete `200 OK` answering a provider's handshake (Slack `url_verification`, …)
/// with the provider's documented `body` of `content_type`, framed by `Content-Length`, and
/// `Date` and `Connection: keep-alive` or `close` as for [`write_answer`].
pub fn write_challenge(
    out: &mut Vec<u8>,
    date: &HttpDate,
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
) {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    write_date(out, date);
    write!(
        out,
        "Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        body.len()
    )
    .expect(VEC_WRITE);
    out.extend_from_slice(body);
}

/// Writes the `200 OK` answering a URL-check `HEAD` (Mandrill, `pipeline::Routes::route`): no
/// body (RFC 9110 §9.3.2), `Date`, `Content-Length: 0`, `Connection: keep-alive` or `close` as
/// for [`write_answer`].
pub fn write_head_ok(out: &mut Vec<u8>, date: &HttpDate, keep_alive: bool) {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    write_date(out, date);
    write!(out, "Content-Length: 0\r\nConnection: {connection}\r\n\r\n").expect(VEC_WRITE);
}

/// Writes `HTTP/1.1 100 Continue\r\n\r\n`: the interim response that tells a client sending
/// `Expect: 100-continue` to send its body (RFC 9110 §10.1.1).
pub fn write_continue(out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
}

/// The reason phrase of each status hookwall sends (RFC 9110 §15).
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        // The reason phrase may be empty (RFC 9112 §4); every status above is listed.
        _ => "",
    }
}

/// Length in bytes of the JSON body for `code` and `event_id`.
fn body_len(code: &str, event_id: Option<&str>) -> usize {
    let id_bytes =
        event_id.map_or(0, |id| BODY_ID.len() + id.bytes().map(escaped_len).sum::<usize>());
    BODY_START.len() + code.len() + id_bytes + BODY_END.len()
}

/// Writes `{"status":"<code>"[,"id":"<escaped id>"]}`. Codes are plain ASCII words.
fn write_body(out: &mut Vec<u8>, code: &str, event_id: Option<&str>) {
    out.extend_from_slice(BODY_START);
    out.extend_from_slice(code.as_bytes());
    if let Some(id) = event_id {
        out.extend_from_slice(BODY_ID);
        for byte in id.bytes() {
            write_escaped(out, byte);
        }
    }
    out.extend_from_slice(BODY_END);
}

/// Bytes one UTF-8 byte takes inside a JSON string.
fn escaped_len(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' => 2,
        0x00..=0x1f => 6,
        _ => 1,
    }
}

/// One UTF-8 byte inside a JSON string: `"` and `\` backslash-escaped, control characters as
/// `\u00XX`, everything else (multi-byte UTF-8 included) as is.
fn write_escaped(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' | b'\\' => out.extend_from_slice(&[b'\\', byte]),
        0x00..=0x1f => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xf)],
        ]),
        _ => out.push(byte),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// RFC 9110 §5.6.7's example date, 784111777 seconds after the epoch.
    const RFC_DATE: HttpDate = *b"Sun, 06 Nov 1994 08:49:37 GMT";

    #[test]
    fn dates_are_imf_fixdate() {
        assert_eq!(http_date(784_111_777), RFC_DATE);
        assert_eq!(&http_date(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(-5), http_date(0), "before the epoch: the epoch");
        let now = http_date_now();
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&now).unwrap()).unwrap();
        let unix = parsed.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let at = u64::try_from(crate::clock::now_unix_s()).unwrap();
        assert!(at.abs_diff(unix) <= 1, "now is {now:?}, {unix} vs {at}");
    }

    /// Writes one answer, compares the exact bytes, and parses them back with httparse.
    fn check(answer: Answer, event_id: Option<&str>, keep_alive: bool, expect: &str) {
        let mut out = b"previous".to_vec();
        write_answer(&mut out, &RFC_DATE, answer, event_id, keep_alive);
        let written = &out[b"previous".len()..];
        assert_eq!(String::from_utf8_lossy(written), expect);

        let mut slots = [httparse::EMPTY_HEADER; 8];
        let mut response = httparse::Response::new(&mut slots);
        let httparse::Status::Complete(head_len) = response.parse(written).unwrap() else {
            panic!("incomplete response {expect:?}");
        };
        assert_eq!(response.code, Some(answer.http_status()));
        assert_eq!(response.reason, Some(reason(answer.http_status())));
        let length = response.headers.iter().find(|h| h.name == "Content-Length").unwrap();
        let length: usize = std::str::from_utf8(length.value).unwrap().parse().unwrap();
        assert_eq!(written.len() - head_len, length);
        let retry = response.headers.iter().any(|h| h.name == "Retry-After");
        assert_eq!(retry, answer.retry_after_s().is_some());
    }

    #[test]
    fn answers() {
        let cases = [
            (
                Answer::Accepted,
                Some("evt_1"),
                true,
                "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: application/json\r\nContent-Length: 34\r\n\
                 Connection: keep-alive\r\n\r\n\
                 {\"status\":\"accepted\",\"id\":\"evt_1\"}",
            ),
            (
                Answer::Unavailable,
                None,
                true,
                "HTTP/1.1 503 Service Unavailable\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: application/json\r\n\
                 Content-Length: 24\r\nRetry-After: 5\r\nConnection: keep-alive\r\n\r\n\
                 {\"status\":\"unavailable\"}",
            ),
            (
                Answer::Overloaded,
                None,
                false,
                "HTTP/1.1 503 Service Unavailable\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: application/json\r\n\
                 Content-Length: 23\r\nRetry-After: 1\r\nConnection: close\r\n\r\n\
                 {\"status\":\"overloaded\"}",
            ),
            (
                Answer::HeadersTooLarge,
                None,
                false,
                "HTTP/1.1 431 Request Header Fields Too Large\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: application/json\r\n\
                 Content-Length: 30\r\nConnection: close\r\n\r\n{\"status\":\"headers_too_large\"}",
            ),
            (
                Answer::MethodNotAllowed,
                None,
                true,
                "HTTP/1.1 405 Method Not Allowed\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: application/json\r\n\
                 Content-Length: 31\r\nAllow: POST\r\nConnection: keep-alive\r\n\r\n\
                 {\"status\":\"method_not_allowed\"}",
            ),
            (
                Answer::Duplicate,
                Some("a\"b\\c\nd\u{1}é"),
                true,
                "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: application/json\r\nContent-Length: 52\r\n\
                 Connection: keep-alive\r\n\r\n\
                 {\"status\":\"duplicate\",\"id\":\"a\\\"b\\\\c\\u000ad\\u0001é\"}",
            ),
        ];
        for (answer, event_id, keep_alive, expect) in cases {
            check(answer, event_id, keep_alive, expect);
        }
    }

    #[test]
    fn every_answer_is_well_formed() {
        for answer in Answer::ALL {
            assert!(!reason(answer.http_status()).is_empty(), "{answer:?}");
            assert!(answer.code().bytes().all(|b| escaped_len(b) == 1), "{answer:?}");
            let mut out = Vec::new();
            write_answer(&mut out, &RFC_DATE, answer, Some("id"), false);
            let mut slots = [httparse::EMPTY_HEADER; 8];
            let status = httparse::Response::new(&mut slots).parse(&out).unwrap();
            assert!(status.is_complete(), "{answer:?}");
        }
    }

    #[test]
    fn continue_line() {
        let mut out = Vec::new();
        write_continue(&mut out);
        assert_eq!(out, b"HTTP/1.1 100 Continue\r\n\r\n");
        let mut slots = [httparse::EMPTY_HEADER; 1];
        let mut response = httparse::Response::new(&mut slots);
        assert_eq!(response.parse(&out).unwrap(), httparse::Status::Complete(out.len()));
        assert_eq!(response.code, Some(100));
    }

    /// A handshake answer: 200 with the provider's body and content type, exact bytes.
    #[test]
    fn challenge_bytes() {
        let mut out = Vec::new();
        write_challenge(&mut out, &RFC_DATE, "text/plain", b"pogchamp", true);
        let expect = "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
                      Content-Type: text/plain\r\nContent-Length: 8\r\n\
                      Connection: keep-alive\r\n\r\npogchamp";
        assert_eq!(String::from_utf8_lossy(&out), expect);
        let mut out = Vec::new();
        write_challenge(&mut out, &RFC_DATE, "application/json", br#"{"challenge":"c"}"#, false);
        assert!(String::from_utf8_lossy(&out).contains("Content-Length: 17\r\nConnection: close"));
    }
}
