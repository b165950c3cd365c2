//! TLS termination (issue 7, SPEC §2 `[server.tls]`): rustls with the ring provider on both IO
//! back ends, TLS 1.2 and 1.3 only, ALPN `http/1.1`, certificates generated in the test with
//! rcgen, renewed certificates served after SIGHUP while open connections keep working, and
//! `check-config` naming what is wrong with a certificate or key.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};

use crate::client::{self, Response};
use crate::harness::{self, Hookwall, Io, Setup};
use crate::sign::{self, Provider};
use crate::sink::{Script, Sink};

/// A self-signed certificate for `localhost` and its key, written as PEM into `dir` under
/// `name.crt` / `name.key`; returns the certificate's DER (the client's trust root).
fn self_signed(dir: &Path, name: &str) -> CertificateDer<'static> {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("rcgen");
    std::fs::write(dir.join(format!("{name}.crt")), generated.cert.pem()).expect("cert");
    std::fs::write(dir.join(format!("{name}.key")), generated.signing_key.serialize_pem())
        .expect("key");
    generated.cert.der().clone()
}

/// Copies `name.crt`/`name.key` onto the paths the config names (`server.crt`/`server.key`).
fn install(dir: &Path, name: &str) {
    for ext in ["crt", "key"] {
        std::fs::copy(dir.join(format!("{name}.{ext}")), dir.join(format!("server.{ext}")))
            .expect("installing the certificate");
    }
}

/// The `[server.tls]` table for the installed pair.
fn tls_table(dir: &Path) -> String {
    let path = |ext: &str| -> PathBuf { dir.join(format!("server.{ext}")) };
    format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}\n",
        path("crt").display().to_string(),
        path("key").display().to_string()
    )
}

/// A client configuration trusting only `root`, speaking `versions`, offering `http/1.1`.
fn client_config(
    root: &CertificateDer<'static>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).expect("adding the test root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// One TLS client connection with its unread plaintext.
struct TlsConn {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    buf: Vec<u8>,
}

impl TlsConn {
    /// Connects and completes the handshake, or the error (e.g. the certificate is not trusted).
    fn connect(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> std::io::Result<TlsConn> {
        let tcp = TcpStream::connect(addr)?;
        tcp.set_read_timeout(Some(client::READ_TIMEOUT))?;
        tcp.set_write_timeout(Some(client::READ_TIMEOUT))?;
        let name = ServerName::try_from("localhost").expect("a valid name");
        let conn = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(TlsConn { stream, buf: Vec::new() })
    }

    /// Sends a signed Stripe delivery of `id` to `stripe-a` and reads the answer.
    fn deliver(&mut self, id: &str) -> Response {
        let source = harness::stripe_a();
        let body = sign::body(Provider::Stripe, id, "tls");
        let headers =
            sign::headers(Provider::Stripe, source.secrets[0].1, id, sign::now_unix_s(), &body);
        self.post("/webhooks/stripe-a", &headers, &body)
    }

    /// `POST path` with `headers` and `body` over this connection; the answer.
    fn post(&mut self, path: &str, headers: &[(String, String)], body: &[u8]) -> Response {
        let request = client::request("POST", path, headers, body);
        self.stream.write_all(&request).expect("writing over TLS");
        self.stream.flush().expect("flushing over TLS");
        loop {
            if let Some((response, used)) = client::parse_response(&self.buf).expect("a response") {
                self.buf.drain(..used);
                return response;
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk).expect("reading over TLS");
            assert!(n > 0, "the server closed the TLS connection before answering");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The certificate the server presented (leaf).
    fn peer_leaf(&self) -> CertificateDer<'static> {
        let certs = self.stream.conn.peer_certificates().expect("a server certificate");
        certs[0].clone().into_owned()
    }
}

/// A temp dir with certificate `a` installed and a hookwall serving TLS on `io`.
fn start(io: Io) -> (tempfile::TempDir, Sink, Hookwall, CertificateDer<'static>) {
    start_with(io, |_| {})
}

/// As [`start`], with the setup edited first.
fn start_with(
    io: Io,
    edit: impl FnOnce(&mut Setup),
) -> (tempfile::TempDir, Sink, Hookwall, CertificateDer<'static>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let root_a = self_signed(dir.path(), "a");
    install(dir.path(), "a");
    let sink = Sink::start(Script::always(200));
    let mut setup = Setup::new(io, dir.path(), &sink.url());
    edit(&mut setup);
    setup.server_extra = tls_table(dir.path());
    let hw = Hookwall::start(dir.path(), &setup);
    (dir, sink, hw, root_a)
}

on_both_io! {
    /// A signed delivery over TLS (1.3 and 1.2, ALPN `http/1.1`) is verified and admitted like
    /// one over plain TCP: `accepted`, then `duplicate` on the same kept-alive connection, and
    /// forwarded once.
    fn tls_delivery_is_admitted_once_over_tls_12_and_13(io: Io) {
        let (_dir, sink, hw, root) = start(io);
        for (name, version) in [("1.3", &rustls::version::TLS13), ("1.2", &rustls::version::TLS12)]
        {
            let mut conn = TlsConn::connect(hw.ingress, client_config(&root, &[version]))
                .unwrap_or_else(|e| panic!("TLS {name} handshake: {e}"));
            assert_eq!(conn.stream.conn.alpn_protocol(), Some(&b"http/1.1"[..]), "ALPN, TLS {name}");
            let id = sign::unique_id("evt_tls");
            let first = conn.deliver(&id);
            assert_eq!(first.answer(), (200, "accepted".to_owned()), "TLS {name}: {first}");
            let again = conn.deliver(&id);
            assert_eq!(again.answer(), (200, "duplicate".to_owned()), "TLS {name}: {again}");
            sink.wait_for_key(&harness::stripe_a().key(&id), 1, harness::FORWARD_TIMEOUT);
        }
    }
}

on_both_io! {
    /// A URL-signing provider behind hookwall's own TLS: the URL Twilio signed is `https://`
    /// (hookwall terminated TLS, so it rebuilds `https`); a signature over `http://` fails.
    fn signed_url_is_https_when_hookwall_terminates_tls(io: Io) {
        let source = harness::Source {
            id: "twilio-tls",
            tenant: "acme",
            provider: Provider::Twilio,
            secrets: vec![("k1", sign::TWILIO_TOKEN)],
            event_types: Vec::new(),
        };
        let (_dir, sink, hw, root) = start_with(io, |setup| setup.sources.push(source.clone()));
        let mut conn = TlsConn::connect(hw.ingress, client_config(&root, &[&rustls::version::TLS13]))
            .expect("handshake");
        let id = sign::unique_id("evt_tls_twilio");
        let body = sign::body(Provider::Twilio, &id, "over tls");
        let path = "/webhooks/twilio-tls";
        let http = sign::url_headers(Provider::Twilio, sign::TWILIO_TOKEN, "http://127.0.0.1/webhooks/twilio-tls", &id, &body);
        let r = conn.post(path, &http, &body);
        assert_eq!(r.answer(), (401, "signature_invalid".to_owned()), "signed over http: {r}");
        let https = sign::url_headers(Provider::Twilio, sign::TWILIO_TOKEN, "https://127.0.0.1/webhooks/twilio-tls", &id, &body);
        let r = conn.post(path, &https, &body);
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "signed over https: {r}");
        let r = conn.post(path, &https, &body);
        assert_eq!(r.answer(), (200, "duplicate".to_owned()), "retry: {r}");
        sink.wait_for_key(&source.key(&id), 1, harness::FORWARD_TIMEOUT);
    }
}

on_both_io! {
    /// Plain HTTP sent to the TLS listener gets no HTTP answer (only a TLS alert, then the
    /// connection closes), and TLS clients are served normally afterwards.
    fn plain_http_on_the_tls_listener_is_refused(io: Io) {
        let (_dir, _sink, hw, root) = start(io);
        let mut plain = TcpStream::connect(hw.ingress).expect("connect");
        plain.set_read_timeout(Some(client::READ_TIMEOUT)).expect("timeout");
        plain.write_all(b"POST /webhooks/stripe-a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .expect("write");
        let mut got = Vec::new();
        let _ = plain.read_to_end(&mut got); // EOF or reset: either way the server closed it
        assert!(!got.windows(5).any(|w| w == b"HTTP/"), "no HTTP answer in plaintext: {got:?}");
        let mut conn =
            TlsConn::connect(hw.ingress, client_config(&root, &[&rustls::version::TLS13]))
                .expect("TLS handshake after the plain-HTTP attempt");
        let r = conn.deliver(&sign::unique_id("evt_tls_after_plain"));
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
    }
}

on_both_io! {
    /// A TLS client that sends its request and then `close_notify` at once (a TLS half-close)
    /// still gets its answer before the connection ends (epoll used to drop the request when
    /// both arrived in one read).
    fn request_then_close_notify_is_answered(io: Io) {
        let (_dir, _sink, hw, root) = start(io);
        let mut conn =
            TlsConn::connect(hw.ingress, client_config(&root, &[&rustls::version::TLS13]))
                .expect("handshake");
        let id = sign::unique_id("evt_close_notify");
        let body = sign::body(Provider::Stripe, &id, "close_notify");
        let source = harness::stripe_a();
        let h = sign::headers(Provider::Stripe, source.secrets[0].1, &id, sign::now_unix_s(), &body);
        let request = client::request("POST", "/webhooks/stripe-a", &h, &body);
        conn.stream.write_all(&request).expect("write");
        conn.stream.conn.send_close_notify();
        conn.stream.flush().expect("flush request and close_notify together");
        let mut got = Vec::new();
        let _ = conn.stream.read_to_end(&mut got); // the answer, then the server's close
        let (r, _) = client::parse_response(&got).expect("parse").expect("a whole response");
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
        // `Connection: close` only when the close_notify arrived before the answer was written;
        // the two may come in one read or in two, so either header is right.
    }
}

/// A TLS 1.1 ClientHello (no `supported_versions` extension, two TLS 1.0-era RSA suites).
fn tls11_client_hello() -> Vec<u8> {
    let mut hello = vec![0x03, 0x02]; // client_version TLS 1.1
    hello.extend_from_slice(&[0x5a; 32]); // random
    hello.push(0); // session id: none
    hello.extend_from_slice(&[0x00, 0x04, 0x00, 0x2f, 0x00, 0x35]); // two cipher suites
    hello.extend_from_slice(&[0x01, 0x00]); // compression: null
    let len = u32::try_from(hello.len()).expect("small").to_be_bytes();
    let mut handshake = vec![0x01, len[1], len[2], len[3]];
    handshake.extend_from_slice(&hello);
    let len = u16::try_from(handshake.len()).expect("small").to_be_bytes();
    let mut record = vec![0x16, 0x03, 0x01, len[0], len[1]];
    record.extend_from_slice(&handshake);
    record
}

on_both_io! {
    /// Issue 7: TLS 1.2 is the floor. A TLS 1.1 ClientHello gets an alert record, no
    /// ServerHello, and the connection is closed.
    fn tls_below_12_is_refused(io: Io) {
        let (_dir, _sink, hw, _root) = start(io);
        let mut tcp = TcpStream::connect(hw.ingress).expect("connect");
        tcp.set_read_timeout(Some(client::READ_TIMEOUT)).expect("timeout");
        tcp.write_all(&tls11_client_hello()).expect("write");
        let mut got = Vec::new();
        let _ = tcp.read_to_end(&mut got); // until the server closes
        assert_eq!(got.first(), Some(&0x15), "an alert record comes back: {got:02x?}");
        assert!(!got.contains(&0x16), "no handshake record (ServerHello): {got:02x?}");
    }
}

on_both_io! {
    /// Issue 7: a renewed certificate is served to new connections after SIGHUP, without a
    /// restart and without dropping a connection opened before the reload.
    fn renewed_certificate_is_served_after_sighup_without_dropping_connections(io: Io) {
        let (dir, _sink, mut hw, root_a) = start(io);
        let tls13 = [&rustls::version::TLS13];
        let mut before = TlsConn::connect(hw.ingress, client_config(&root_a, &tls13))
            .expect("handshake with certificate a");
        let r = before.deliver(&sign::unique_id("evt_before_renewal"));
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");

        let root_b = self_signed(dir.path(), "b");
        install(dir.path(), "b");
        let setup = hw.setup.clone();
        assert!(hw.reload(&setup), "the reload is applied:\n{}", hw.stderr());

        let after = TlsConn::connect(hw.ingress, client_config(&root_b, &tls13))
            .expect("handshake with certificate b after the reload");
        assert_eq!(after.peer_leaf(), root_b, "new connections get the renewed certificate");
        assert!(
            TlsConn::connect(hw.ingress, client_config(&root_a, &tls13)).is_err(),
            "a client trusting only the old certificate no longer completes a handshake"
        );
        let r = before.deliver(&sign::unique_id("evt_on_old_connection"));
        assert_eq!(r.answer(), (200, "accepted".to_owned()), "the old connection still works: {r}");
    }
}

/// A renewal gone wrong (the new key does not match the new certificate) is refused on
/// SIGHUP with the reason logged, and the old certificate keeps being served.
#[test]
fn mismatched_renewal_is_refused_and_the_old_certificate_stays() {
    let (dir, _sink, mut hw, root_a) = start(Io::Auto);
    let _ = self_signed(dir.path(), "b");
    let _ = self_signed(dir.path(), "c");
    std::fs::copy(dir.path().join("b.crt"), dir.path().join("server.crt")).expect("cert b");
    std::fs::copy(dir.path().join("c.key"), dir.path().join("server.key")).expect("key c");
    let setup = hw.setup.clone();
    assert!(!hw.reload(&setup), "a mismatched pair is refused:\n{}", hw.stderr());
    assert!(hw.stderr().contains("server.tls"), "the field is named:\n{}", hw.stderr());
    let mut conn = TlsConn::connect(hw.ingress, client_config(&root_a, &[&rustls::version::TLS13]))
        .expect("certificate a is still served");
    assert_eq!(conn.peer_leaf(), root_a);
    let r = conn.deliver(&sign::unique_id("evt_after_bad_renewal"));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
}

/// Runs `hookwall check-config` on a minimal Stripe config in `dir` whose server has the
/// `[server.tls]` table `tls` (empty: none).
fn check_config_with(dir: &Path, tls: &str) -> std::process::Output {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:1\"\n{tls}\n\
         [ledger]\npath = \"./ledger\"\n\n[[source]]\nid = \"s\"\ntenant = \"t\"\n\
         provider = \"stripe\"\nsecrets = [{{ id = \"k\", value = \"whsec_x\" }}]\n\
         destination = \"d\"\n\n[[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\n"
    );
    let path = dir.join("tls.toml");
    std::fs::write(&path, text).expect("config");
    std::process::Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .args(["check-config", "-c"])
        .arg(&path)
        .env("HOOKWALL_LOG", "warn")
        .output()
        .expect("running check-config")
}

/// SPEC §1: `check-config` exits 2 and names `server.tls` for a missing key path, an
/// unreadable certificate, and a key that belongs to another certificate.
#[test]
fn check_config_names_tls_problems() {
    let dir = tempfile::tempdir().expect("temp dir");
    let _ = self_signed(dir.path(), "a");
    let _ = self_signed(dir.path(), "b");
    let p = |name: &str| dir.path().join(name).display().to_string();
    let cases = [
        ("missing key", format!("[server.tls]\ncert = {:?}\n", p("a.crt")), "server.tls.key"),
        (
            "unreadable cert",
            format!("[server.tls]\ncert = {:?}\nkey = {:?}\n", p("nope.crt"), p("a.key")),
            "nope.crt",
        ),
        (
            "mismatched key",
            format!("[server.tls]\ncert = {:?}\nkey = {:?}\n", p("a.crt"), p("b.key")),
            "unusable certificate and key",
        ),
        (
            "key file is a certificate",
            format!("[server.tls]\ncert = {:?}\nkey = {:?}\n", p("a.crt"), p("a.crt")),
            "no PEM private key",
        ),
    ];
    for (case, tls, expect) in cases {
        let out = check_config_with(dir.path(), &tls);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{case}: exit code; stderr:\n{stderr}");
        assert!(stderr.contains("server.tls"), "{case}: names server.tls; stderr:\n{stderr}");
        assert!(stderr.contains(expect), "{case}: says {expect:?}; stderr:\n{stderr}");
        assert!(!stderr.contains("PRIVATE KEY-----"), "{case}: no key material; stderr:\n{stderr}");
    }
}

/// Writes `name.crt`/`name.key` into `dir`: a self-signed certificate valid from `not_before`
/// to `not_after` (Unix seconds).
fn self_signed_between(dir: &Path, name: &str, not_before: i64, not_after: i64) {
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    let at = |unix: i64| {
        let secs = u64::try_from(unix).expect("after 1970");
        rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(secs)
    };
    params.not_before = at(not_before);
    params.not_after = at(not_after);
    let cert = params.self_signed(&key).expect("a self-signed certificate");
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).expect("cert");
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).expect("key");
}

/// RFC 5280 §4.1.2.5: `check-config` warns (exit 0: it serves) about a certificate that has
/// expired, is not valid yet, or expires within two weeks — TLS clients refuse the first two,
/// so every delivery would fail its handshake; a certificate valid for a year draws no word.
#[test]
fn check_config_warns_about_a_certificate_out_of_its_validity() {
    let dir = tempfile::tempdir().expect("temp dir");
    let now = sign::now_unix_s();
    let day = 86_400;
    let cases = [
        ("expired", now - 400 * day, now - day, Some("the certificate expired at")),
        ("not yet valid", now + 10 * day, now + 400 * day, Some("is not valid before")),
        ("expiring", now - day, now + 3 * day, Some("renew it and reload before then")),
        ("valid for a year", now - day, now + 365 * day, None),
    ];
    for (case, not_before, not_after, warning) in cases {
        self_signed_between(dir.path(), "v", not_before, not_after);
        let p = |name: &str| dir.path().join(name).display().to_string();
        let tls = format!("[server.tls]\ncert = {:?}\nkey = {:?}\n", p("v.crt"), p("v.key"));
        let out = check_config_with(dir.path(), &tls);
        let both = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(0), "{case}: exit code:\n{both}");
        match warning {
            Some(warning) => {
                assert!(both.contains("server.tls.cert"), "{case}: names the field:\n{both}");
                assert!(both.contains(warning), "{case}: says {warning:?}:\n{both}");
            }
            None => assert!(!both.contains("server.tls.cert"), "{case}: no warning:\n{both}"),
        }
    }
}
