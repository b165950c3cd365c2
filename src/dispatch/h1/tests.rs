//! The pipelined client against scripted servers on real loopback sockets: each test server
//! reads requests and writes exactly the bytes the test gives it, so framing, pipelining and
//! every loss rule are checked on the wire.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream as StdStream};
use std::sync::mpsc as std_mpsc;

use super::*;

/// Requests (`POST /h HTTP/1.1` … `content-length: 2` … `ok`) as the test client sends them.
fn request(tag: &str) -> Vec<u8> {
    format!("POST /h HTTP/1.1\r\nhost: t\r\nx-tag: {tag}\r\ncontent-length: 2\r\n\r\nok")
        .into_bytes()
}

/// Reads whole test requests from `s` until `n` are in; returns their tags in order (fewer
/// when the client closes or nothing comes for a minute).
fn read_requests(s: &mut StdStream, n: usize, carry: &mut Vec<u8>) -> Vec<String> {
    read_requests_within(s, n, carry, Duration::from_secs(60))
}

/// A server that runs `script` on each accepted connection (in order), on its own thread.
fn server(
    script: impl Fn(usize, StdStream) + Send + 'static,
) -> (Endpoint, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let handle = std::thread::spawn(move || {
        for (i, conn) in listener.incoming().enumerate() {
            let Ok(conn) = conn else { return };
            if i == usize::MAX {
                return;
            }
            script(i, conn);
        }
    });
    let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}/h")).expect("endpoint");
    (endpoint, handle)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// Sends `tags` through one route and returns the results in tag order.
async fn send_all(route: &Route, tags: &[&str], timeout: Duration) -> Vec<AttemptResult> {
    let mut answers = Vec::new();
    for tag in tags {
        let (reply, rx) = oneshot::channel();
        let deadline = Instant::from_std(crate::clock::monotonic()) + timeout;
        route.send(Job { request: request(tag), deadline, reply: reply.into() });
        answers.push(rx);
    }
    let mut out = Vec::new();
    for rx in answers {
        out.push(rx.await.expect("every job is answered"));
    }
    out
}

fn status(code: u16) -> AttemptResult {
    AttemptResult::Status { code, retry_after: None }
}

#[test]
fn endpoint_keeps_path_and_query_and_drops_the_fragment() {
    let e = Endpoint::parse("http://app.internal:8080/hooks/in?x=1#frag").expect("parses");
    assert_eq!(
        (e.host.as_str(), e.port, e.authority()),
        ("app.internal", 8080, "app.internal:8080")
    );
    assert_eq!(e.target, "/hooks/in?x=1");
    let v6 = Endpoint::parse("http://[::1]/").expect("parses");
    assert_eq!((v6.host.as_str(), v6.port, v6.authority()), ("::1", 80, "[::1]"));
    assert!(Endpoint::parse("https://example.com/").is_none());
}

/// Pipelining: eight requests on one connection arrive back to back and are answered in
/// order with different statuses, framings (length, chunked with a trailer, no body, 100
/// Continue before the final answer) and a Retry-After.
#[test]
fn pipelined_answers_are_matched_in_request_order() {
    let (endpoint, _server) = server(|_, mut s| {
        let mut carry = Vec::new();
        let tags = read_requests(&mut s, 8, &mut carry);
        assert_eq!(tags, ["a", "b", "c", "d", "e", "f", "g", "h"], "requests in order");
        let answers = [
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".to_owned(),
            "HTTP/1.1 500 Oops\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-t: 1\r\n\r\n"
                .to_owned(),
            "HTTP/1.1 204 No Content\r\n\r\n".to_owned(),
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"
                .to_owned(),
            "HTTP/1.1 429 Slow\r\nretry-after: 7\r\ncontent-length: 0\r\n\r\n".to_owned(),
            "HTTP/1.1 404 No\r\ncontent-length: 3\r\n\r\nabc".to_owned(),
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_owned(),
            "HTTP/1.1 201 Created\r\ncontent-length: 1\r\n\r\nz".to_owned(),
        ];
        // One write for all, split at an awkward place to exercise partial parsing.
        let all = answers.concat().into_bytes();
        s.write_all(&all[..37]).expect("write");
        s.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(20));
        s.write_all(&all[37..]).expect("write");
        let _ = read_requests(&mut s, 1, &mut carry);
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 8, 8);
        let got = send_all(&route, &["a", "b", "c", "d", "e", "f", "g", "h"], secs(5)).await;
        let want = vec![
            status(200),
            status(500),
            status(204),
            status(202),
            AttemptResult::Status { code: 429, retry_after: Some(secs(7)) },
            status(404),
            status(200),
            status(201),
        ];
        assert_eq!(got, want);
    });
}

/// Reads one request head (up to its empty line) byte by byte, leaving the body unread;
/// false at the end of the stream.
fn read_head(s: &mut StdStream) -> bool {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).expect("read") == 0 {
            return false;
        }
        head.push(byte[0]);
    }
    true
}

/// A `POST` with a body of `bytes` (far more than loopback socket buffers hold when large).
fn large_request(bytes: usize) -> Vec<u8> {
    let mut r =
        format!("POST /h HTTP/1.1\r\nhost: t\r\ncontent-length: {bytes}\r\n\r\n").into_bytes();
    r.resize(r.len() + bytes, b'x');
    r
}

/// A server that reads each request's head only, answers `413` + `connection: close` and
/// drops the connection with the body unread (the kernel then resets it).
fn early_413_and_reset() -> (Endpoint, std::thread::JoinHandle<()>) {
    server(|_, mut s| {
        if !read_head(&mut s) {
            return;
        }
        let answer =
            b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        s.write_all(answer).expect("write");
    })
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A keep-alive connection the server closes after an answer is not charged to the next
/// request: that goes out on a new connection (whether the close was noticed while idle or
/// only after the request was written on it).
#[test]
fn a_closed_keep_alive_connection_is_replaced_without_failing_the_request() {
    let (endpoint, _server) = server(|i, mut s| {
        let mut carry = Vec::new();
        let _ = read_requests(&mut s, 1, &mut carry);
        let code = if i == 0 { "200 OK" } else { "201 Created" };
        let answer = format!("HTTP/1.1 {code}\r\ncontent-length: 0\r\n\r\n");
        s.write_all(answer.as_bytes()).expect("write");
        if i > 0 {
            let _ = read_requests(&mut s, 1, &mut carry);
        }
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        assert_eq!(send_all(&route, &["first"], secs(5)).await, vec![status(200)]);
        assert_eq!(send_all(&route, &["second"], secs(5)).await, vec![status(201)]);
    });
}

/// The race made certain: the server reads the second request on the reused connection and
/// closes without answering. The request may never have been processed, so it is written
/// again, once, on a new connection (same bytes, same idempotency key).
#[test]
fn a_request_lost_on_a_reused_connection_is_resent_once() {
    let (tx, rx) = std_mpsc::channel();
    let (endpoint, _server) = server(move |i, mut s| {
        let mut carry = Vec::new();
        let tags = read_requests(&mut s, 1, &mut carry);
        tx.send((i, tags)).expect("report");
        if i == 0 {
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").expect("write");
            let second = read_requests(&mut s, 1, &mut carry);
            tx.send((i, second)).expect("report");
            // Closes with the second request unanswered.
        } else {
            s.write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n").expect("write");
            let _ = read_requests(&mut s, 1, &mut carry);
        }
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        assert_eq!(send_all(&route, &["first"], secs(5)).await, vec![status(200)]);
        assert_eq!(send_all(&route, &["second"], secs(5)).await, vec![status(201)]);
    });
    let seen: Vec<(usize, Vec<String>)> = rx.try_iter().collect();
    let s = |t: &str| vec![t.to_owned()];
    assert_eq!(seen, vec![(0, s("first")), (0, s("second")), (1, s("second"))]);
}

/// An idle keep-alive connection is closed by the client after its idle limit (the server
/// sees the close), and the next request goes out on a new connection.
#[test]
fn an_idle_connection_is_closed_after_its_idle_limit() {
    let (tx, rx) = std_mpsc::channel();
    let (endpoint, _server) = server(move |i, mut s| {
        let mut carry = Vec::new();
        let _ = read_requests(&mut s, 1, &mut carry);
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").expect("write");
        // Waits for the client's close (read returns 0), or for a second request.
        let more = read_requests(&mut s, 1, &mut carry);
        tx.send((i, more)).expect("report");
    });
    runtime().block_on(async {
        let route = Route::with_idle_max(
            endpoint,
            1,
            1,
            Duration::from_millis(200),
            &Arc::new(Gate::new(9)),
            secs(1),
        );
        assert_eq!(send_all(&route, &["first"], secs(5)).await, vec![status(200)]);
        let (i, more) = tokio::task::spawn_blocking(move || {
            rx.recv_timeout(secs(10)).expect("the client closed the idle connection within 10 s")
        })
        .await
        .expect("join");
        assert_eq!((i, more), (0, Vec::<String>::new()), "the client closed the idle connection");
        assert_eq!(send_all(&route, &["second"], secs(5)).await, vec![status(200)]);
    });
}

/// A destination that answers before reading a large request (413) and stops reading: the
/// answer is taken while the request is still being written (not at the attempt timeout),
/// and that connection is closed, not reused (the unwritten rest would be read as a request).
#[test]
fn an_early_answer_to_an_unread_request_is_taken_and_ends_the_connection() {
    let (report, reported) = std_mpsc::channel();
    let (go, gone) = std_mpsc::channel::<()>();
    let gone = std::sync::Mutex::new(gone);
    let (endpoint, _server) = server(move |i, mut s| {
        if !read_head(&mut s) {
            return;
        }
        let code = if i == 0 { "413 Payload Too Large" } else { "200 OK" };
        let answer = format!("HTTP/1.1 {code}\r\ncontent-length: 0\r\n\r\n");
        s.write_all(answer.as_bytes()).expect("write");
        if i == 0 {
            // Reads nothing more until the client has the answer, then drains to the close.
            let _ = gone.lock().expect("lock").recv_timeout(secs(60));
            let mut rest = Vec::new();
            let closed = s.read_to_end(&mut rest).is_ok();
            report.send(closed).expect("report");
        } else {
            let _ = s.read_to_end(&mut Vec::new());
        }
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        // 64 MiB: far more than the loopback socket buffers hold.
        let big = large_request(64 << 20);
        let (reply, answer) = oneshot::channel();
        let deadline = Instant::from_std(crate::clock::monotonic()) + secs(60);
        route.send(Job { request: big, deadline, reply: reply.into() });
        let got = tokio::time::timeout(secs(30), answer).await;
        assert_eq!(got.ok().and_then(Result::ok), Some(status(413)), "the early answer, in time");
        go.send(()).expect("server waiting");
        assert_eq!(send_all(&route, &["next"], secs(10)).await, vec![status(200)]);
    });
    assert_eq!(reported.recv_timeout(secs(30)), Ok(true), "the first connection was closed");
}

/// A destination that answers 413 and closes at once, with most of a large request unread
/// (the kernel then resets the connection): the write fails, and the answer already
/// received is still read — the attempt gets its 413, not a reset error.
#[test]
fn an_answer_before_a_reset_is_not_lost() {
    let (endpoint, _server) = early_413_and_reset();
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        let big = large_request(64 << 20);
        let (reply, answer) = oneshot::channel();
        let deadline = Instant::from_std(crate::clock::monotonic()) + secs(30);
        route.send(Job { request: big, deadline, reply: reply.into() });
        assert_eq!(answer.await.expect("answered"), status(413));
    });
}

/// `101 Switching Protocols` (never asked for) is a final answer that ends HTTP on the
/// connection: the attempt gets 101 (permanent by `classify`), not a timeout.
#[test]
fn a_101_is_a_final_answer() {
    let (endpoint, _server) =
        one_answer_per_connection(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n");
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        assert_eq!(send_all(&route, &["a"], secs(5)).await, vec![status(101)]);
    });
}

/// `Connection: close` after the first of three pipelined answers: the two requests behind
/// it were never processed (RFC 9112 §9.6), so they go out again on a new connection without
/// using their one resend — and one at a time there: a destination that closes after an
/// answer is not pipelined to any more.
#[test]
fn requests_behind_a_connection_close_are_resent_on_a_new_connection() {
    let (tx, rx) = std_mpsc::channel();
    let (endpoint, _server) = server(move |i, mut s| {
        let mut carry = Vec::new();
        if i == 0 {
            tx.send((i, read_requests(&mut s, 3, &mut carry))).expect("report");
            s.write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
                .expect("write");
            return;
        }
        loop {
            let tags = read_requests(&mut s, 1, &mut carry);
            if tags.is_empty() {
                return;
            }
            // Whatever else arrived before this answer was pipelined behind it.
            let behind = carry.windows(4).filter(|w| w == b"\r\n\r\n").count();
            tx.send((i, tags)).expect("report");
            tx.send((i, vec![format!("behind {behind}")])).expect("report");
            s.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n").expect("write");
        }
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 3, 3);
        let got = send_all(&route, &["a", "b", "c"], secs(5)).await;
        assert_eq!(got, vec![status(200), status(202), status(202)]);
    });
    let seen: Vec<(usize, Vec<String>)> = rx.try_iter().collect();
    let v = |t: &str| vec![t.to_owned()];
    let want = vec![
        (0, vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]),
        (1, v("b")),
        (1, v("behind 0")),
        (1, v("c")),
        (1, v("behind 0")),
    ];
    assert_eq!(seen, want);
}

/// A destination that never answers: the head request times out; the one pipelined behind
/// it is resent on a new connection, times out too, and nothing waits forever.
#[test]
fn an_unanswered_request_times_out_and_closes_its_connection() {
    let (endpoint, _server) = server(|_, mut s| {
        let mut carry = Vec::new();
        let _ = read_requests(&mut s, 100, &mut carry);
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 2, 2);
        let started = Instant::from_std(crate::clock::monotonic());
        let got = send_all(&route, &["a", "b"], Duration::from_millis(300)).await;
        assert_eq!(got, vec![AttemptResult::Timeout, AttemptResult::Timeout]);
        assert!(started.elapsed() < secs(5), "timeouts took {:?}", started.elapsed());
    });
}

/// Nothing listens: a connection error, named as such, for every waiting request.
#[test]
fn a_refused_connection_is_a_connect_error() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}/")).expect("endpoint");
    runtime().block_on(async {
        let route = Route::new(endpoint, 2, 2);
        for r in send_all(&route, &["a", "b"], secs(5)).await {
            assert!(matches!(&r, AttemptResult::Connect(why) if why.contains("refused")), "{r:?}");
        }
    });
}

/// A malformed answer, or a connection reset with no answer on a fresh connection, is an
/// uncertain outcome (`Other`), not a status.
#[test]
fn garbage_or_a_reset_without_an_answer_is_an_other_error() {
    let (endpoint, _server) = server(|i, mut s| {
        let mut carry = Vec::new();
        let _ = read_requests(&mut s, 1, &mut carry);
        if i == 0 {
            s.write_all(b"NOT HTTP AT ALL\r\n\r\n").expect("write");
        }
        // i == 1: closes without answering.
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        let got = send_all(&route, &["a"], secs(5)).await;
        assert!(
            matches!(&got[0], AttemptResult::Other(why) if why.contains("malformed")),
            "{got:?}"
        );
        let got = send_all(&route, &["b"], secs(5)).await;
        assert!(matches!(&got[0], AttemptResult::Other(why) if why.contains("closed")), "{got:?}");
    });
}

#[test]
fn answer_framing_rules() {
    let parse = |s: &str| parse_answer(s.as_bytes(), &mut Progress::default());
    let a = parse("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhiHTTP/1.1")
        .expect("ok")
        .expect("whole");
    assert_eq!((a.code, a.len, a.close), (200, 40, false));
    assert_eq!(parse("HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhi"), Ok(None));
    assert_eq!(parse("HTTP/1.1 200 OK\r\ncontent-le"), Ok(None));
    let close = parse("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").expect("ok").expect("whole");
    assert!(close.close, "HTTP/1.0 closes unless keep-alive");
    let unframed = parse("HTTP/1.1 200 OK\r\n\r\nbody until close").expect("ok").expect("whole");
    assert!(unframed.close, "a close-delimited body ends the connection");
    let big = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", RESPONSE_BODY_BYTES_MAX + 1);
    let big = parse(&big).expect("ok").expect("status known");
    assert!(big.close && big.code == 200, "an oversized body is not read");
    assert!(parse("HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n").is_err());
    assert!(parse("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n").is_err());
    assert!(parse("HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nhi").is_err(), "1*DIGIT only");
    let gzip = "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 2\r\n\r\nhi";
    let gzip = parse(gzip).expect("ok").expect("status known");
    assert!(gzip.close, "a non-chunked transfer coding is delimited by the close");
}

/// A server that answers the one request of each connection with the raw `answer`, then closes;
/// used by the tests below.
fn one_answer_per_connection(answer: &'static [u8]) -> (Endpoint, std::thread::JoinHandle<()>) {
    server(move |_, mut s| {
        let mut carry = Vec::new();
        let _ = read_requests(&mut s, 1, &mut carry);
        let _ = s.write_all(answer);
        // Closes the connection (HTTP/1.0 style: one answer per connection).
    })
}

/// An HTTP/1.0-style destination (one answer, then close: e.g. Python's `http.server`,
/// `tools/dev_sink.py`) with `pipeline` > 1: every request behind the first on a connection
/// is certainly unprocessed (RFC 9112 §9.6), so none is failed — found in review, when 22 %
/// of such events were dead-lettered after their one resend.
#[test]
fn requests_behind_repeated_connection_close_are_not_failed() {
    let (endpoint, _server) =
        one_answer_per_connection(b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n");
    runtime().block_on(async {
        let route = Route::new(endpoint, 4, 4);
        let got = send_all(&route, &["a", "b", "c", "d"], secs(10)).await;
        assert_eq!(got, vec![status(200); 4], "requests never processed were failed");
    });
}

/// A chunk-size line (or trailer) without end is refused as malformed once the answer passes
/// `ANSWER_BUFFER_MAX`, not buffered until the attempt's deadline (httparse accepts any
/// number of extension bytes): a destination cannot make the dispatcher hold gigabytes.
#[test]
fn an_endless_chunk_extension_is_refused_not_buffered() {
    let (endpoint, _server) = server(|_, mut s| {
        let mut carry = Vec::new();
        let _ = read_requests(&mut s, 1, &mut carry);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;");
        let junk = vec![b'x'; 64 * 1024];
        for _ in 0..32 {
            if s.write_all(&junk).is_err() {
                return;
            }
        }
        // 2 MiB of one chunk-size line, then silence with the connection open.
        let _ = read_requests(&mut s, 1, &mut carry);
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        let got = send_all(&route, &["a"], secs(3)).await;
        assert!(matches!(&got[0], AttemptResult::Other(_)), "buffered until the deadline: {got:?}");
    });
}

/// A valid 200 answer with 70 header fields is a 200 (up to `HEADERS_MAX`, 128; hyper took
/// 100), not a malformed answer retried until dead-lettered.
#[test]
fn a_200_with_many_headers_is_delivered() {
    let mut answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n".to_vec();
    for i in 0..70 {
        answer.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    answer.extend_from_slice(b"\r\n");
    let answer: &'static [u8] = answer.leak();
    let (endpoint, _server) = one_answer_per_connection(answer);
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        assert_eq!(send_all(&route, &["a"], secs(5)).await, vec![status(200)]);
    });
}

/// Like `read_requests`, but gives up after `within` without a byte (returns what came).
fn read_requests_within(
    s: &mut StdStream,
    n: usize,
    carry: &mut Vec<u8>,
    within: Duration,
) -> Vec<String> {
    s.set_read_timeout(Some(within)).expect("read timeout");
    let mut tags = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(end) = carry.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&carry[..end]).to_string();
            let tag = head.lines().find_map(|l| l.strip_prefix("x-tag: ")).unwrap_or("?");
            tags.push(tag.to_owned());
            carry.drain(..end + 4 + 2);
        }
        if tags.len() >= n {
            return tags;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return tags,
            Ok(got) => carry.extend_from_slice(&buf[..got]),
        }
    }
}

/// Runs `first` on the route's first connection (it answers the requests `first_tags`, the
/// last answer ending the connection one way or another), then sends `c` and `d` together and
/// returns the tags the second connection had received before it answered anything: `[c, d]`
/// while the link still pipelines (depth 2), `[c]` once it has dropped to depth 1.
fn pipelined_after(
    first_tags: &'static [&'static str],
    first: impl Fn(&mut StdStream, &mut Vec<u8>) + Send + 'static,
) -> Vec<String> {
    let (tx, rx) = std_mpsc::channel();
    let (endpoint, _server) = server(move |i, mut s| {
        let mut carry = Vec::new();
        if i == 0 {
            first(&mut s, &mut carry);
            return;
        }
        // Generous: two small requests written back to back arrive within milliseconds.
        let tags = read_requests_within(&mut s, 2, &mut carry, secs(10));
        tx.send(tags.clone()).expect("report");
        let mut pending = tags.len();
        loop {
            for _ in 0..pending {
                if s.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n").is_err() {
                    return;
                }
            }
            pending = read_requests_within(&mut s, 1, &mut carry, secs(30)).len();
            if pending == 0 {
                return;
            }
        }
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 2, 2);
        for tag in first_tags {
            assert_eq!(send_all(&route, &[tag], secs(10)).await, vec![status(200)]);
        }
        let got = send_all(&route, &["c", "d"], secs(60)).await;
        assert_eq!(got, vec![status(202), status(202)]);
    });
    rx.recv_timeout(secs(30)).expect("second connection reported")
}

/// A keep-alive destination that rotates its connections — `Connection: close` on the N-th
/// answer (nginx `keepalive_requests`, default 1000; Apache `MaxKeepAliveRequests`, default
/// 100) with nothing pipelined behind — is still pipelined to on the next connection. Today
/// the link drops to depth 1 for good, so every link to such a destination ends up one
/// request at a time and the destination's concurrency collapses from `concurrency_max` to
/// `ceil(concurrency_max / pipeline)` (benches/common.sh sets keepalive_requests 10000000,
/// which hides it).
#[test]
fn a_keep_alive_rotation_close_does_not_stop_pipelining() {
    let seen = pipelined_after(&["a", "b"], |s, carry| {
        let _ = read_requests(s, 1, carry);
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").expect("write");
        let _ = read_requests(s, 1, carry);
        s.write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
            .expect("write");
    });
    assert_eq!(seen, ["c", "d"], "the link stopped pipelining after a routine close");
}

/// A connection the client itself ends — here after a keep-alive 200 whose body is over
/// `RESPONSE_BODY_BYTES_MAX` and is not read — says nothing about the destination's
/// pipelining; yet `answer.close` is set for it and the link drops to depth 1 for good.
/// (Same for a close-delimited body, a non-chunked transfer coding, or a 101.)
#[test]
fn an_oversized_answer_body_does_not_stop_pipelining() {
    let seen = pipelined_after(&["a"], |s, carry| {
        let _ = read_requests(s, 1, carry);
        let body = vec![b'x'; RESPONSE_BODY_BYTES_MAX + 4096];
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
        let _ = s.write_all(head.as_bytes());
        let _ = s.write_all(&body);
        // Keeps the connection open (the client ends it: read until then).
        let _ = read_requests_within(s, 1, carry, secs(30));
    });
    assert_eq!(seen, ["c", "d"], "the link stopped pipelining after a client-side close");
}

/// A request waiting for a busy link (here behind one the destination holds) gets its
/// `Timeout` at its own deadline, not when the request ahead of it is resolved. Deadlines
/// differ on one route after a reload that lowers the destination's `timeout` (the route is
/// kept: `made_for` has no timeout); today the waiting request is not looked at until it is
/// taken from the link's channel, so it waits out the other request's (60 s) deadline.
#[test]
fn a_waiting_request_times_out_at_its_own_deadline() {
    let (endpoint, _server) = server(|_, mut s| {
        let mut carry = Vec::new();
        // Holds the first request unanswered until the client goes away.
        let _ = read_requests_within(&mut s, 100, &mut carry, secs(120));
    });
    runtime().block_on(async {
        let route = Route::new(endpoint, 1, 1);
        let now = Instant::from_std(crate::clock::monotonic());
        let (reply, _held) = oneshot::channel();
        route.send(Job { request: request("held"), deadline: now + secs(60), reply: reply.into() });
        let (reply, waiting) = oneshot::channel();
        let deadline = now + Duration::from_millis(300);
        route.send(Job { request: request("short"), deadline, reply: reply.into() });
        let got = tokio::time::timeout(secs(20), waiting).await;
        assert_eq!(
            got.ok().and_then(Result::ok),
            Some(AttemptResult::Timeout),
            "the waiting request was not timed out within 20 s of its 300 ms deadline"
        );
    });
}

/// A destination that answers every large request early with `413` + close and resets the
/// connection with the body unread, while a second large request is pipelined behind: every
/// connection answers its head, so both requests get their 413 (no livelock, no resend used).
#[test]
fn early_413_and_close_on_every_connection_answers_every_request() {
    let (endpoint, _server) = early_413_and_reset();
    runtime().block_on(async {
        let route = Route::new(endpoint, 2, 2);
        let mut answers = Vec::new();
        for _ in 0..2 {
            let big = large_request(16 << 20);
            let (reply, answer) = oneshot::channel();
            let deadline = Instant::from_std(crate::clock::monotonic()) + secs(60);
            route.send(Job { request: big, deadline, reply: reply.into() });
            answers.push(answer);
        }
        for answer in answers {
            assert_eq!(answer.await.expect("answered"), status(413));
        }
    });
}

/// Answers fed to one `Progress` a byte at a time parse exactly as each prefix does from
/// scratch: the resumed parse finds the same answer at the same length.
#[test]
fn a_resumed_parse_matches_a_fresh_one_at_every_length() {
    let answers: [&[u8]; 9] = [
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
        b"HTTP/1.1 503 Busy\r\nretry-after: 7\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nx-t: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;a\nb\r\nz\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
        b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n!",
        b"HTTP/1.1 304 Not Modified\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ];
    for answer in answers {
        let mut p = Progress::default();
        for k in 0..=answer.len() {
            let fresh = parse_answer(&answer[..k], &mut Progress::default());
            let resumed = parse_answer(&answer[..k], &mut p);
            let text = String::from_utf8_lossy(&answer[..k]);
            assert_eq!(resumed, fresh, "after {k} bytes of {text:?}");
            if matches!(fresh, Ok(Some(_))) {
                break;
            }
        }
    }
    for bad in [
        &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"[..],
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabX\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
        b"NOT HTTP\r\n\r\n",
    ] {
        let mut p = Progress::default();
        let errors = (0..=bad.len()).filter(|&k| parse_answer(&bad[..k], &mut p).is_err()).count();
        assert!(errors > 0, "{:?} is refused fed a byte at a time", String::from_utf8_lossy(bad));
    }
}

/// Bytes handed to a search or parser while `answer` arrives `step` bytes at a time.
fn parse_work(answer: &[u8], step: usize) -> (usize, Option<Answer>) {
    let mut p = Progress::default();
    let mut k = 0;
    loop {
        k = (k + step).min(answer.len());
        match parse_answer(&answer[..k], &mut p) {
            Ok(Some(a)) => return (p.work, Some(a)),
            Ok(None) if k == answer.len() => return (p.work, None),
            Ok(None) => {}
            Err(e) => panic!("refused after {k} bytes: {e}"),
        }
    }
}

/// A destination that trickles its answer a byte per read costs work linear in the answer's
/// length: a 50 KiB head and the largest body read, a chunked body of one-byte chunks, and a long chunk
/// extension full of bare line feeds are each examined at most a few times over. Before, the
/// whole answer was parsed again from its start on every read (quadratic: about 10^10 bytes
/// for the one-byte chunks), on the dispatcher that every destination shares.
#[test]
fn an_answer_trickled_a_byte_at_a_time_is_parsed_in_linear_work() {
    let body = RESPONSE_BODY_BYTES_MAX;
    let mut long_head = format!("HTTP/1.1 200 OK\r\ncontent-length: {body}\r\n").into_bytes();
    for i in 0..100 {
        long_head.extend(format!("x-filler-{i}: {}\r\n", "v".repeat(500)).as_bytes());
    }
    long_head.extend(b"\r\n");
    long_head.extend(vec![b'b'; body]);
    let mut one_byte_chunks = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..25_000 {
        one_byte_chunks.extend(b"1\r\nx\r\n");
    }
    one_byte_chunks.extend(b"0\r\n\r\n");
    let mut bare_feeds = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;".to_vec();
    bare_feeds.extend(b"e\n".repeat(50_000));
    bare_feeds.extend(b"\r\nx\r\n0\r\n\r\n");
    // Empty lines before the status line (httparse skips them): found by a review.
    let mut blank_lines = b"\r\n".repeat(30_000);
    blank_lines.extend(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    for (name, answer) in [
        ("long head", long_head),
        ("one-byte chunks", one_byte_chunks),
        ("bare feeds", bare_feeds),
        ("blank lines first", blank_lines),
    ] {
        let (work, got) = parse_work(&answer, 1);
        let got = got.unwrap_or_else(|| panic!("{name}: never whole"));
        assert_eq!((got.code, got.len), (200, answer.len()), "{name}");
        assert!(work <= 4 * answer.len(), "{name}: {work} bytes examined for {}", answer.len());
    }
}

/// A connect that fails for want of a descriptor is hookwall's own limit: logged at warn, at
/// most every 10 s; other connect errors are the destination's and are not.
#[test]
fn running_out_of_descriptors_is_logged_at_most_every_ten_seconds() {
    let last = std::sync::atomic::AtomicU64::new(0);
    let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
    let enfile = std::io::Error::from_raw_os_error(libc::ENFILE);
    let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
    assert!(!out_of_descriptors_to_log(&refused, 1_000, &last));
    assert!(out_of_descriptors_to_log(&emfile, 1_000, &last));
    assert!(!out_of_descriptors_to_log(&enfile, 10_999, &last));
    assert!(out_of_descriptors_to_log(&enfile, 11_000, &last));
    assert!(!out_of_descriptors_to_log(&refused, 30_000, &last));
}

/// The destinations' connections are held to their descriptor budget (`Gate`) also while a
/// reload's replaced route still answers its requests: the successor connects only as the old
/// connections close, and a request whose deadline passes while it waits was never attempted
/// (`NoDescriptor`, not counted). Before, the new route opened its own at once: up to twice
/// the budget, which ran the process out of descriptors (a review's reproduction: 32
/// budgeted connections, 46–50 open, `EMFILE`).
#[test]
fn a_replacing_route_connects_only_as_the_replaced_ones_close() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (release, released) = std_mpsc::channel::<()>();
    let released = Arc::new(std::sync::Mutex::new(released));
    let counted = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            counted.fetch_add(1, Ordering::SeqCst);
            let released = Arc::clone(&released);
            std::thread::spawn(move || {
                let mut carry = Vec::new();
                loop {
                    let tags = read_requests_within(&mut s, 1, &mut carry, secs(20));
                    let Some(tag) = tags.first() else { return };
                    if tag.starts_with("old") {
                        let _ = released.lock().expect("lock").recv();
                    }
                    if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err() {
                        return;
                    }
                }
            });
        }
    });
    let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}/h")).expect("endpoint");
    let send = |route: &Route, tag: &str, within: Duration| {
        let (reply, rx) = oneshot::channel();
        let deadline = Instant::from_std(crate::clock::monotonic()) + within;
        route.send(Job { request: request(tag), deadline, reply: reply.into() });
        rx
    };
    let wait_for = |n: usize| {
        let accepted = Arc::clone(&accepted);
        async move {
            let deadline = crate::clock::monotonic() + secs(10);
            while accepted.load(Ordering::SeqCst) < n {
                assert!(crate::clock::monotonic() < deadline, "{n} connections were not made");
                tokio::time::sleep(Duration::from_millis(5)).await; // poll interval
            }
        }
    };
    runtime().block_on(async {
        let gate = Arc::new(Gate::new(2));
        let old = Route::gated(endpoint.clone(), 2, 1, &gate, secs(1));
        let old_answers = [send(&old, "old-1", secs(20)), send(&old, "old-2", secs(20))];
        wait_for(2).await;
        let new = Route::gated(endpoint, 2, 1, &gate, secs(1));
        drop(old);
        let new_answers = [send(&new, "new-1", secs(20)), send(&new, "new-2", secs(20))];
        let hurried = send(&new, "new-hurried", Duration::from_millis(200));
        // Not made while both old connections are open: not attempted, not a timeout.
        let why = "the destinations' descriptor budget was in use".to_owned();
        assert_eq!(hurried.await.expect("answered"), AttemptResult::NoDescriptor(why));
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "the new route waits for the old one");
        assert_eq!(gate.open_now(), 2);
        release.send(()).expect("release");
        wait_for(3).await;
        release.send(()).expect("release");
        for rx in old_answers.into_iter().chain(new_answers) {
            assert_eq!(rx.await.expect("answered"), status(200));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
        assert!(gate.open_now() <= 2, "{}", gate.open_now());
    });
}

/// While descriptors are short, a route sends to the connection it has open, not to a link
/// whose connect just found no descriptor (it is passed over for `starve_for`), and counts
/// what its open connections carry (`open_capacity`, the dispatcher's cap while starved).
/// Before, `send` took the least loaded link in order: an idle starved link (load 0) came
/// before the idle open connection, so every request failed for want of a descriptor while a
/// working connection sat idle (a review's reproduction: 300 events to a 20 ms sink took
/// ~170 s). Here the budget (`Gate`) of 2 stands for the descriptor limit.
#[test]
fn a_route_short_of_descriptors_sends_to_its_open_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            std::thread::spawn(move || {
                let mut carry = Vec::new();
                loop {
                    let tags = read_requests_within(&mut s, 1, &mut carry, secs(20));
                    let Some(tag) = tags.first() else { return };
                    // "a" ends its connection (RFC 9112 §9.6): its link has none open after.
                    let answer: &[u8] = if tag == "a" {
                        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
                    };
                    if s.write_all(answer).is_err() || tag == "a" {
                        return;
                    }
                }
            });
        }
    });
    let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}/h")).expect("endpoint");
    let budget_in_use =
        || AttemptResult::NoDescriptor("the destinations' descriptor budget was in use".into());
    runtime().block_on(async {
        let gate = Arc::new(Gate::new(2));
        let route = Route::gated(endpoint.clone(), 2, 1, &gate, secs(30));
        // "a" on the first link (its connection then closed by the server), "b" on the second.
        assert_eq!(send_all(&route, &["a", "b"], secs(10)).await, [status(200), status(200)]);
        assert_eq!(route.open_capacity(), 1, "the second link's connection is open");
        // Another route takes the freed descriptor: the budget is in use.
        let holder = Route::gated(endpoint, 1, 1, &gate, secs(30));
        assert_eq!(send_all(&holder, &["h"], secs(10)).await, [status(200)]);
        assert_eq!(gate.open_now(), 2);
        // Both links idle: the first (no connection) is tried and finds no descriptor...
        let c = send_all(&route, &["c"], Duration::from_millis(200)).await;
        assert_eq!(c, [budget_in_use()]);
        // ...and is passed over from then on: the open connection carries the next ones.
        for tag in ["d", "e", "f"] {
            assert_eq!(send_all(&route, &[tag], secs(2)).await, [status(200)], "{tag}");
        }
        assert_eq!((route.open_capacity(), gate.open_now()), (1, 2));
        // With the open connection busy, the starved link is still tried (it fails at once
        // for want of a descriptor rather than queueing behind a busy connection).
        let both = send_all(&route, &["g", "i"], Duration::from_millis(300)).await;
        assert_eq!(both, [status(200), budget_in_use()]);
    });
}
