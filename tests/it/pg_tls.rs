//! TLS to the PostgreSQL ledger (issue 8): libpq's `sslmode` / `sslrootcert` against a
//! throwaway server with `ssl = on` on 127.0.0.1 and a CA + server certificate made here
//! (rcgen). `verify-full` with the right CA admits and forwards over TLS; a wrong CA, or a
//! certificate for another name under `verify-full`, keeps `migrate` and `serve` from starting
//! with a message naming the cause; `verify-ca` ignores the name; `require` encrypts without
//! a CA.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{stripe_a, Hookwall, Io, Setup, FORWARD_TIMEOUT};
use crate::pg::Postgres;
use crate::sign::{self, Provider};
use crate::sink::{Script, Sink};

/// A CA (PEM certificate) and a server certificate chain + key it signed for `names`.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki(names: &[&str]) -> Pki {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    // A name of its own: two CAs of one name would look like one issuer with a bad signature.
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, sign::unique_id("test CA"));
    ca_params.key_usages =
        vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().expect("server key");
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = rcgen::CertificateParams::new(names).expect("server params");
    params.distinguished_name.push(rcgen::DnType::CommonName, "hookwall test database");
    let cert = params.signed_by(&key, &issuer).expect("server certificate");
    Pki { ca: ca.pem(), cert: cert.pem(), key: key.serialize_pem() }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a PEM file");
    path
}

fn tcp_url(pg: &Postgres, tls: &str) -> String {
    format!("host=127.0.0.1 port={} user=postgres dbname=postgres {tls}", pg.port())
}

/// Connections of hookwall's pool that negotiated TLS, as the server sees them.
fn tls_sessions(pg: &Postgres) -> i64 {
    let row = pg
        .client()
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
             WHERE pg_stat_ssl.ssl AND application_name = 'hookwall'",
            &[],
        )
        .expect("reading pg_stat_ssl");
    row.get(0)
}

fn run(command: &str, config: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookwall"))
        .args([command, "-c"])
        .arg(config)
        .env_remove("HOOKWALL_CONFIG")
        .output()
        .expect("running hookwall");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Admits one event through `setup` and waits for its forward; the node's pool is on TLS.
fn admits_over_tls(dir: &Path, setup: &Setup, pg: &Postgres, sink: &Sink) {
    let hw = Hookwall::start(dir, setup);
    let source = stripe_a();
    let id = sign::unique_id("evt_pgtls");
    let r = hw.deliver(&source, &id, &sign::body(Provider::Stripe, &id, "tls"));
    assert_eq!(r.answer(), (200, "accepted".to_owned()), "{r}");
    sink.wait_for_key(&source.key(&id), 1, FORWARD_TIMEOUT);
    assert!(tls_sessions(pg) >= 2, "hookwall's connections are not on TLS");
    drop(hw);
}

#[test]
fn verify_full_with_the_right_ca_admits_events_over_tls() {
    let pki = pki(&["127.0.0.1"]);
    let pg = Postgres::start_tls(&pki.cert, &pki.key);
    let sink = Sink::start(Script::always(200));
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.pem", &pki.ca);
    let mut setup = Setup::new(Io::Epoll, dir.path(), &sink.url());
    setup.ledger = dir.path().join("unused-rocksdb");
    setup.postgres =
        Some(tcp_url(&pg, &format!("sslmode=verify-full sslrootcert={}", ca.display())));
    admits_over_tls(dir.path(), &setup, &pg, &sink);
}

#[test]
fn require_encrypts_without_a_ca() {
    let pki = pki(&["db.example"]);
    let pg = Postgres::start_tls(&pki.cert, &pki.key);
    let sink = Sink::start(Script::always(200));
    let dir = tempfile::tempdir().unwrap();
    let mut setup = Setup::new(Io::Epoll, dir.path(), &sink.url());
    setup.ledger = dir.path().join("unused-rocksdb");
    setup.postgres = Some(tcp_url(&pg, "sslmode=require"));
    admits_over_tls(dir.path(), &setup, &pg, &sink);
}

/// A CA that did not sign the server's certificate, and `verify-full` against a certificate
/// for another name: `migrate` and `serve` exit non-zero naming `ledger.url` and the cause.
/// `verify-ca` with the right CA does not compare names and migrates.
#[test]
fn a_wrong_ca_or_name_keeps_migrate_and_serve_from_starting() {
    let pki_db = pki(&["db.example"]);
    let other = pki(&["127.0.0.1"]);
    let pg = Postgres::start_tls(&pki_db.cert, &pki_db.key);
    let dir = tempfile::tempdir().unwrap();
    let right = write(dir.path(), "right.pem", &pki_db.ca);
    let wrong = write(dir.path(), "wrong.pem", &other.ca);
    let config = dir.path().join("hookwall.toml");
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut setup = Setup::new(Io::Epoll, dir.path(), "http://127.0.0.1:9/");
    setup.ledger = dir.path().join("unused-rocksdb");
    for (tls, cause) in [
        (format!("sslmode=verify-full sslrootcert={}", wrong.display()), "UnknownIssuer"),
        (format!("sslmode=require sslrootcert={}", wrong.display()), "UnknownIssuer"),
        (format!("sslmode=verify-full sslrootcert={}", right.display()), "not valid for name"),
    ] {
        setup.postgres = Some(tcp_url(&pg, &tls));
        std::fs::write(&config, setup.toml(addr, addr)).unwrap();
        for command in ["migrate", "serve"] {
            let (ok, stderr) = run(command, &config);
            assert!(!ok, "{command} started with {tls}: {stderr}");
            assert!(
                stderr.contains("ledger.url") && stderr.contains(cause),
                "{command} with {tls}: {stderr}"
            );
        }
    }
    assert_eq!(tls_sessions(&pg), 0);
    setup.postgres =
        Some(tcp_url(&pg, &format!("sslmode=verify-ca sslrootcert={}", right.display())));
    std::fs::write(&config, setup.toml(addr, addr)).unwrap();
    let (ok, stderr) = run("migrate", &config);
    assert!(ok, "verify-ca ignores the name: {stderr}");
}
