//! The destination: an HTTP/1.1 server on `127.0.0.1:0` in std threads that records every
//! request (method, path, headers, exact body) and answers from a script ("503, 503, then
//! 200", "always 500"). Tests wait on a condition variable, with a deadline, until what they
//! expect has arrived.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Which status the sink answers the n-th request (0-based, counted over all requests) with.
#[derive(Debug, Clone)]
pub struct Script {
    first: Vec<u16>,
    then: u16,
    /// How long the sink takes to answer each request (a slow destination).
    delay: Duration,
}

impl Script {
    /// Every request gets `status`.
    pub fn always(status: u16) -> Script {
        Script { first: Vec::new(), then: status, delay: Duration::ZERO }
    }

    /// The first requests get `first` in order, every later one `then`.
    pub fn first_then(first: &[u16], then: u16) -> Script {
        Script { first: first.to_vec(), then, delay: Duration::ZERO }
    }

    /// The same answers, each given `delay` after the request arrived (a slow destination:
    /// the sink's connection thread holds the answer back; nothing in the test waits on it).
    pub fn slow(self, delay: Duration) -> Script {
        Script { delay, ..self }
    }

    fn status(&self, n: usize) -> u16 {
        self.first.get(n).copied().unwrap_or(self.then)
    }
}

/// One request the sink received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Method.
    pub method: String,
    /// Request target.
    pub path: String,
    /// Headers in order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Exact body bytes (de-chunked if it came chunked).
    pub body: Vec<u8>,
    /// The status the sink answered.
    pub answered: u16,
    /// When the whole request had arrived.
    pub arrived_at: Instant,
    /// When its answer was written: `arrived_at` + the script's delay.
    pub answered_at: Instant,
}

impl Recorded {
    /// The first value of header `name` (lowercase), or `""`.
    pub fn header(&self, name: &str) -> &str {
        self.headers.iter().find(|(n, _)| n == name).map_or("", |(_, v)| v.as_str())
    }

    /// All values of header `name` (lowercase).
    pub fn header_count(&self, name: &str) -> usize {
        self.headers.iter().filter(|(n, _)| n == name).count()
    }
}

struct State {
    script: Script,
    recorded: Vec<Recorded>,
}

struct Shared {
    state: Mutex<State>,
    arrived: Condvar,
    stop: AtomicBool,
    /// Connections open now, and the most open at once so far.
    open: AtomicUsize,
    most_open: AtomicUsize,
}

/// Counts one open connection of the sink until dropped.
struct Counted<'a>(&'a Shared);

impl<'a> Counted<'a> {
    fn new(shared: &'a Shared) -> Counted<'a> {
        let open = shared.open.fetch_add(1, Ordering::SeqCst) + 1;
        shared.most_open.fetch_max(open, Ordering::SeqCst);
        Counted(shared)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running destination; stops accepting on drop.
pub struct Sink {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Sink {
    /// Starts a sink answering by `script`.
    pub fn start(script: Script) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the sink");
        let addr = listener.local_addr().expect("sink address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State { script, recorded: Vec::new() }),
            arrived: Condvar::new(),
            stop: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            most_open: AtomicUsize::new(0),
        });
        let accept_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("sink-accept".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .expect("spawning the sink");
        Sink { addr, shared }
    }

    /// The destination URL to configure.
    pub fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    /// From now on every request is answered `status` (a destination that recovers or fails).
    pub fn answer_from_now(&self, status: u16) {
        let mut state = self.shared.state.lock().expect("sink lock");
        let n = state.recorded.len();
        let first: Vec<u16> = (0..n).map(|i| state.script.status(i)).collect();
        state.script = Script { first, then: status, delay: state.script.delay };
    }

    /// The most connections the sink had open at once so far (counted from its accept to the
    /// end of its connection's stream, which it reads only between answers: a close may be
    /// counted a moment late).
    pub fn most_connections_open(&self) -> usize {
        self.shared.most_open.load(Ordering::SeqCst)
    }

    /// Everything received so far.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.shared.state.lock().expect("sink lock").recorded.clone()
    }

    /// Waits until `done(received so far)` holds; panics with `what` after `timeout`.
    pub fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&[Recorded]) -> bool,
    ) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock().expect("sink lock");
        loop {
            if done(state.recorded.as_slice()) {
                return state.recorded.clone();
            }
            let now = Instant::now();
            if now >= deadline {
                let keys: Vec<String> = state
                    .recorded
                    .iter()
                    .map(|r| {
                        format!("{} #{}", r.header("idempotency-key"), r.header("hookwall-attempt"))
                    })
                    .collect();
                panic!("sink: timed out after {timeout:?} waiting for {what}; received {keys:?}");
            }
            state = self.shared.arrived.wait_timeout(state, deadline - now).expect("sink lock").0;
        }
    }

    /// Waits until at least `n` requests carrying `Idempotency-Key: key` arrived; returns those.
    pub fn wait_for_key(&self, key: &str, n: usize, timeout: Duration) -> Vec<Recorded> {
        let all = self.wait_until(timeout, &format!("{n} forwards of {key}"), |r| {
            r.iter().filter(|r| r.header("idempotency-key") == key).count() >= n
        });
        all.into_iter().filter(|r| r.header("idempotency-key") == key).collect()
    }

    /// The requests received with `Idempotency-Key: key`.
    pub fn for_key(&self, key: &str) -> Vec<Recorded> {
        self.recorded().into_iter().filter(|r| r.header("idempotency-key") == key).collect()
    }

    /// Asserts that no request beyond the first `n` arrives within `window` (a bounded wait
    /// for absence: used only where a bound on attempts is the thing under test).
    pub fn assert_no_more_within(&self, n: usize, window: Duration) {
        let deadline = Instant::now() + window;
        let mut state = self.shared.state.lock().expect("sink lock");
        loop {
            assert!(
                state.recorded.len() <= n,
                "sink: expected no more than {n} requests, got {}",
                state.recorded.len()
            );
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            state = self.shared.arrived.wait_timeout(state, deadline - now).expect("sink lock").0;
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the blocking accept so its thread ends.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(shared);
        let _ = std::thread::Builder::new().name("sink-conn".to_owned()).spawn(move || {
            let _counted = Counted::new(&shared);
            serve_connection(stream, &shared);
        });
    }
}

/// Serves keep-alive requests on one connection until the peer closes, an error, or stop.
fn serve_connection(mut stream: TcpStream, shared: &Shared) {
    // Bounded: an idle connection from a killed hookwall ends its thread.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    loop {
        let Some((mut recorded, used)) = read_request(&mut stream, &mut buf) else { return };
        buf.drain(..used);
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let (status, delay) = {
            let mut state = shared.state.lock().expect("sink lock");
            let status = state.script.status(state.recorded.len());
            recorded.answered = status;
            recorded.answered_at = recorded.arrived_at + state.script.delay;
            let delay = state.script.delay;
            state.recorded.push(recorded);
            shared.arrived.notify_all();
            (status, delay)
        };
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let answer = format!("HTTP/1.1 {status} Scripted\r\nContent-Length: 0\r\n\r\n");
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads until one whole request is in `buf`; the request and the bytes it takes.
fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Recorded, usize)> {
    loop {
        if let Some(parsed) = parse_request(buf) {
            return Some(parsed);
        }
        let mut chunk = [0u8; 64 * 1024];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn parse_request(buf: &[u8]) -> Option<(Recorded, usize)> {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut slots);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return None,
        Err(e) => panic!("sink: malformed request from hookwall: {e}"),
    };
    let headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let (body, used) = if chunked {
        crate::client::dechunk(&buf[head_len..])?
    } else {
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map_or(0, |(_, v)| v.trim().parse::<usize>().expect("numeric Content-Length"));
        if buf.len() < head_len + length {
            return None;
        }
        (buf[head_len..head_len + length].to_vec(), length)
    };
    let recorded = Recorded {
        method: req.method.unwrap_or("").to_owned(),
        path: req.path.unwrap_or("").to_owned(),
        headers,
        body,
        answered: 0,
        arrived_at: Instant::now(),
        answered_at: Instant::now(),
    };
    Some((recorded, head_len + used))
}
