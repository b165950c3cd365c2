//! The NATS JetStream destination (issue 8) against a real `nats-server -js` started per test
//! on a loopback port with its store in a temp dir (Debian package `nats-server`, installed by
//! `.ci/run`; without it the test FAILS with that message). A pausing TCP proxy between
//! hookwall and the server holds the server's answers back, so a publish is stored but its ack
//! arrives after the attempt's timeout: the retry publishes again with the same `Nats-Msg-Id`,
//! and the stream still holds the event once.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{stripe_a, Hookwall, Io, Setup, FORWARD_TIMEOUT};
use crate::sign::{self, Provider};

const STREAM: &str = "HOOKS";
const SUBJECT: &str = "hooks.events";

/// `nats-server`: `HOOKWALL_TEST_NATS_BIN`, else on `PATH`, else Debian's `/usr/sbin`.
fn nats_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("HOOKWALL_TEST_NATS_BIN") {
        return PathBuf::from(bin);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "nats-server not found (PATH, /usr/sbin, HOOKWALL_TEST_NATS_BIN): install the \
                 Debian package `nats-server` (`apt-get install --no-install-recommends \
                 nats-server`, as .ci/run does)"
            )
        })
}

/// A throwaway JetStream server on 127.0.0.1, killed and its store removed on drop.
struct NatsServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    fn start() -> NatsServer {
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // Small and bounded: the machine is shared.
        let config = dir.path().join("nats.conf");
        let store = dir.path().join("store");
        std::fs::write(
            &config,
            format!(
                "jetstream {{\n  store_dir: {:?}\n  max_mem: 16MB\n  max_file: 64MB\n}}\n",
                store
            ),
        )
        .unwrap();
        let log = dir.path().join("nats.log");
        let child = Command::new(nats_bin())
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-c"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting nats-server");
        let mut server = NatsServer { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = || std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("nats-server exited with {status}:\n{}", log());
            }
            assert!(Instant::now() < deadline, "nats-server did not listen on {port}:\n{}", log());
            std::thread::sleep(Duration::from_millis(20)); // poll interval
        }
        server
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback TCP proxy whose server-to-client direction can be paused: while paused, the
/// server's bytes wait in the kernel's buffers and reach the client, in order, on resume.
struct Proxy {
    port: u16,
    paused: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let paused = Arc::new(AtomicBool::new(false));
        let p = Arc::clone(&paused);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || copy(client, server, None, None));
                let p = Arc::clone(&p);
                std::thread::spawn(move || copy(s2, c2, Some(p), None));
            }
        });
        Proxy { port, paused }
    }
}

/// Copies `from` to `to` until either ends: held while `paused` is on, and with `inject`'s
/// bytes written after its chunk number (from 1) was forwarded.
fn copy(
    mut from: TcpStream,
    mut to: TcpStream,
    paused: Option<Arc<AtomicBool>>,
    inject: Option<(usize, &[u8])>,
) {
    use std::io::{Read, Write};
    let mut buf = [0u8; 16 * 1024];
    let mut chunks = 0;
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                // Bytes read while (or just before) the switch is on wait here until it is off.
                while paused.as_ref().is_some_and(|p| p.load(Ordering::SeqCst)) {
                    std::thread::sleep(Duration::from_millis(5)); // poll interval of the switch
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                chunks += 1;
                if let Some((_, bytes)) = inject.filter(|(after, _)| *after == chunks) {
                    let _ = to.write_all(bytes);
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Creates the stream on `hooks.>` with a 2-minute duplicate window.
fn create_stream(rt: &tokio::runtime::Runtime, url: &str) -> async_nats::jetstream::Context {
    rt.block_on(async {
        let client = async_nats::connect(url).await.expect("connecting to nats-server");
        let js = async_nats::jetstream::new(client);
        js.create_stream(async_nats::jetstream::stream::Config {
            name: STREAM.to_owned(),
            subjects: vec!["hooks.>".to_owned()],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .expect("creating the stream");
        js
    })
}

fn stored(rt: &tokio::runtime::Runtime, js: &async_nats::jetstream::Context) -> u64 {
    rt.block_on(async {
        let mut stream = js.get_stream(STREAM).await.expect("the stream");
        stream.info().await.expect("stream info").state.messages
    })
}

fn attempts(hw: &Hookwall, outcome: &str) -> f64 {
    let text = String::from_utf8_lossy(&hw.admin_get("/metrics").body).into_owned();
    let labels = [("destination", "sink"), ("outcome", outcome)];
    crate::metrics::sample(&text, "hookwall_dispatch_attempts_total", &labels).unwrap_or(0.0)
}

fn wait(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }
}

/// An event is published once with `Nats-Msg-Id` = its idempotency key and its exact body;
/// a publish whose ack comes too late is retried, and JetStream stores the event once.
#[test]
fn jetstream_stores_a_delivered_event_once_even_when_the_publish_is_retried() {
    let server = NatsServer::start();
    let rt = runtime();
    let js = create_stream(&rt, &server.url());
    let proxy = Proxy::start(server.port);
    let dir = tempfile::tempdir().unwrap();
    let mut setup = Setup::new(Io::Epoll, dir.path(), &format!("nats://127.0.0.1:{}", proxy.port));
    setup.destination_extra =
        format!("kind = \"nats\"\nsubject = \"{SUBJECT}\"\nstream = \"{STREAM}\"");
    setup.destination_timeout = "1s";
    let hw = Hookwall::start(dir.path(), &setup);
    let source = stripe_a();

    // 1. A plain delivery: one message, the key as Nats-Msg-Id, the exact body.
    let first = sign::unique_id("evt_nats");
    let body = sign::body(Provider::Stripe, &first, "nats");
    assert_eq!(hw.deliver(&source, &first, &body).answer(), (200, "accepted".to_owned()));
    wait("the first event delivered", FORWARD_TIMEOUT, || attempts(&hw, "delivered") >= 1.0);
    assert_eq!(stored(&rt, &js), 1);
    let message = rt.block_on(async {
        let stream = js.get_stream(STREAM).await.unwrap();
        stream.get_raw_message(1).await.unwrap()
    });
    let headers = message.headers;
    assert_eq!(headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned()), Some(source.key(&first)));
    assert_eq!(
        headers.get("Idempotency-Key").map(|v| v.as_str().to_owned()),
        Some(source.key(&first))
    );
    assert_eq!(message.payload.as_ref(), body.as_slice());

    // 2. The ack of the next publish is held back past the 1 s attempt timeout: the event is
    // stored, hookwall counts a retry, then publishes again when the answers flow.
    proxy.paused.store(true, Ordering::SeqCst);
    let second = sign::unique_id("evt_nats_retry");
    let body = sign::body(Provider::Stripe, &second, "retried");
    assert_eq!(hw.deliver(&source, &second, &body).answer(), (200, "accepted".to_owned()));
    wait("the second publish stored", FORWARD_TIMEOUT, || stored(&rt, &js) == 2);
    wait("a timed-out attempt", FORWARD_TIMEOUT, || attempts(&hw, "retry") >= 1.0);
    proxy.paused.store(false, Ordering::SeqCst);
    wait("the second event delivered", FORWARD_TIMEOUT, || attempts(&hw, "delivered") >= 2.0);
    assert_eq!(stored(&rt, &js), 2, "the retried publish was stored once");
}

/// A loopback TCP proxy that, on the `n`-th connection (from 0) listed in `inject`, writes
/// that entry's bytes to the client after forwarding the server's `after`-th chunk — a NATS
/// server (or whoever answers on its address) sending a malformed protocol line.
fn injecting_proxy(upstream: u16, inject: Vec<Option<(usize, &'static [u8])>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (n, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || copy(client, server, None, None));
            let garbage = inject.get(n).copied().flatten();
            std::thread::spawn(move || copy(s2, c2, None, garbage));
        }
    });
    port
}

/// A NATS server that sends malformed protocol lines — here an `-ERR` without a message during
/// the handshake, then a `MSG` whose length is `usize::MAX` — makes the NATS client library
/// panic. hookwall contains it: the attempt fails and is retried on a new connection, the
/// event is delivered once the server behaves, and the process keeps serving. Before, each
/// panic aborted the process, and every restart aborted again while the event was due.
#[test]
fn malformed_nats_server_answers_fail_attempts_without_aborting_the_process() {
    let server = NatsServer::start();
    let rt = runtime();
    let js = create_stream(&rt, &server.url());
    let port = injecting_proxy(
        server.port,
        vec![Some((1, b"-ERR\r\n")), Some((2, b"MSG x 1 18446744073709551615\r\n"))],
    );
    let dir = tempfile::tempdir().unwrap();
    let mut setup = Setup::new(Io::Epoll, dir.path(), &format!("nats://127.0.0.1:{port}"));
    setup.destination_extra =
        format!("kind = \"nats\"\nsubject = \"{SUBJECT}\"\nstream = \"{STREAM}\"");
    setup.destination_timeout = "1s";
    setup.attempts_max = 10;
    let mut hw = Hookwall::start(dir.path(), &setup);
    let source = stripe_a();
    let id = sign::unique_id("evt_nats_garbage");
    let body = sign::body(Provider::Stripe, &id, "garbage");
    assert_eq!(hw.deliver(&source, &id, &body).answer(), (200, "accepted".to_owned()));
    wait("the event delivered", FORWARD_TIMEOUT, || attempts(&hw, "delivered") >= 1.0);
    assert_eq!(stored(&rt, &js), 1);
    let stderr = hw.stderr();
    assert_eq!(stderr.matches("nats_client_panicked").count(), 2, "{stderr}");
    assert!(attempts(&hw, "retry") >= 2.0, "each malformed answer failed an attempt");
    let later = sign::unique_id("evt_nats_after");
    let body = sign::body(Provider::Stripe, &later, "after");
    assert_eq!(hw.deliver(&source, &later, &body).answer(), (200, "accepted".to_owned()));
    wait("the later event delivered", FORWARD_TIMEOUT, || attempts(&hw, "delivered") >= 2.0);
    assert!(hw.stop().success(), "the process ran on; stderr:\n{}", hw.stderr());
}
