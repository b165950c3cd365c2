//! A raw HTTP/1.1 client over `std::net::TcpStream`: the test writes exact bytes (so it decides
//! pipelining, chunking and what is left unsent) and reads one response at a time with
//! httparse and `Content-Length`.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long any single read waits for the server.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// One parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers in order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Body bytes (framed by `Content-Length`).
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The `status` code of hookwall's JSON body (`""` when absent).
    pub fn code(&self) -> String {
        self.json().get("status").and_then(|s| s.as_str()).unwrap_or("").to_owned()
    }

    /// The `id` of hookwall's JSON body.
    pub fn id(&self) -> Option<String> {
        self.json().get("id").and_then(|s| s.as_str()).map(str::to_owned)
    }

    /// `(status, code)` for compact assertions.
    pub fn answer(&self) -> (u16, String) {
        (self.status, self.code())
    }
}

impl std::fmt::Display for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?} {}", self.status, self.headers, String::from_utf8_lossy(&self.body))
    }
}

/// One client connection with its unread bytes.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Connects to `addr` with bounded reads and writes.
    pub fn connect(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
        Conn::from_stream(stream)
    }

    /// Connects to `addr` from the local address `from` (e.g. `127.0.0.2`, another loopback
    /// address, to be a peer other than `127.0.0.1`).
    pub fn connect_from(addr: SocketAddr, from: std::net::IpAddr) -> Conn {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a TCP socket");
        let local = SocketAddr::new(from, 0);
        socket.bind(&local.into()).unwrap_or_else(|e| panic!("binding {local}: {e}"));
        socket
            .connect_timeout(&addr.into(), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connecting to {addr} from {from}: {e}"));
        Conn::from_stream(socket.into())
    }

    /// Connects to `addr`, or the error (for tests where the server may be gone).
    pub fn try_connect(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        Ok(Conn::from_stream(stream))
    }

    /// The socket, for tests that watch it themselves.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    fn from_stream(stream: TcpStream) -> Conn {
        stream.set_read_timeout(Some(READ_TIMEOUT)).expect("set_read_timeout");
        stream.set_write_timeout(Some(READ_TIMEOUT)).expect("set_write_timeout");
        stream.set_nodelay(true).expect("set_nodelay");
        Conn { stream, buf: Vec::new() }
    }

    /// Writes `bytes` in one call (one `write_all`).
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap_or_else(|e| panic!("writing the request: {e}"));
    }

    /// Writes `bytes`, or the error.
    pub fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one response (an interim `100 Continue` counts as one).
    pub fn read_response(&mut self) -> Response {
        self.try_read_response().unwrap_or_else(|e| panic!("reading a response: {e}"))
    }

    /// Reads one response, or the IO error (timeout, reset, EOF as `UnexpectedEof`).
    pub fn try_read_response(&mut self) -> std::io::Result<Response> {
        loop {
            if let Some((response, used)) = parse_response(&self.buf)? {
                self.buf.drain(..used);
                return Ok(response);
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "server closed"));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// One response at the front of `buf`, with the bytes it takes; `None` if incomplete.
pub fn parse_response(buf: &[u8]) -> std::io::Result<Option<(Response, usize)>> {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut slots);
    let head_len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            let text = String::from_utf8_lossy(buf);
            return Err(std::io::Error::other(format!("bad response ({e}): {text:?}")));
        }
    };
    let status = parsed.code.expect("complete response has a code");
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let is_chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    if is_chunked && status != 100 {
        return Ok(dechunk(&buf[head_len..])
            .map(|(body, used)| (Response { status, headers, body }, head_len + used)));
    }
    let length = if status == 100 {
        0
    } else {
        headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.trim().parse::<usize>().expect("numeric Content-Length"))
            .unwrap_or(0)
    };
    if buf.len() < head_len + length {
        return Ok(None);
    }
    let body = buf[head_len..head_len + length].to_vec();
    Ok(Some((Response { status, headers, body }, head_len + length)))
}

/// A complete chunked body at the front of `buf` (trailers skipped): the de-chunked bytes and
/// the bytes it takes; `None` if incomplete.
pub fn dechunk(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&buf[at..line_end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailers until an empty line.
            loop {
                let end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
                let empty = end == at;
                at = end + 2;
                if empty {
                    return Some((body, at));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

/// Writes `request` to `addr` over and over without reading a byte of the answers, through a
/// small fixed receive window (no autotuning, so the answers back up at once), until a write
/// fails; returns the bytes written and the error. Panics after 64 MiB: the server kept a
/// client that takes nothing open.
pub fn pipeline_without_reading(addr: SocketAddr, request: &[u8]) -> (usize, std::io::Error) {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket.connect(&addr.into()).expect("connect");
    let mut s: TcpStream = socket.into();
    s.set_write_timeout(Some(Duration::from_secs(30))).expect("write timeout");
    let burst = request.repeat(1024);
    let mut written = 0usize;
    loop {
        match s.write_all(&burst) {
            Ok(()) => written += burst.len(),
            Err(e) => return (written, e),
        }
        assert!(written < 64 << 20, "64 MiB of requests written, no answer read, still open");
    }
}

/// Whether `error` is the server closing the connection (a reset, or a write after its close).
pub fn closed_by_server(error: &std::io::Error) -> bool {
    matches!(error.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset)
}

/// The bytes of a request with `Host` and `Content-Length` added.
pub fn request(method: &str, path: &str, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut out = head(method, path, headers);
    out.truncate(out.len() - 2);
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

/// The bytes of a request head (request line, `Host`, `headers`, blank line), nothing more.
pub fn head(method: &str, path: &str, headers: &[(String, String)]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n").into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `body` in chunked transfer coding, cut into pieces of at most `chunk` bytes.
pub fn chunked(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// One request on a fresh connection, its response.
pub fn send_one(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let mut conn = Conn::connect(addr);
    conn.send(&request(method, path, headers, body));
    conn.read_response()
}

/// `GET path` on a fresh connection.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    send_one(addr, "GET", path, &[], b"")
}

/// `GET path`, or the error (the server may not be listening yet).
pub fn try_get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    let mut conn = Conn::try_connect(addr)?;
    conn.try_send(&request("GET", path, &[], b""))?;
    conn.try_read_response()
}
