//! TLS to the PostgreSQL server: libpq's `sslmode` and `sslrootcert` connection parameters
//! (PostgreSQL docs, "libpq — Connection Strings" and "SSL Support"), over rustls with its
//! ring provider (DEPS.md: one provider, chosen explicitly) through `tokio-postgres-rustls`.
//!
//! The driver (`tokio-postgres`) knows only `disable`, `prefer` and `require` and rejects
//! `sslrootcert`; [`Target::parse`] takes both parameters out of the URL (or key=value string)
//! and hands the rest to the driver's own parser:
//!
//! | `sslmode` | TLS | certificate check |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default, as libpq) | when the server offers it | chain, when `sslrootcert` is set |
//! | `require` | always | chain, when `sslrootcert` is set (libpq's rule) |
//! | `verify-ca` | always | chain to `sslrootcert` (needed) |
//! | `verify-full` | always | chain to `sslrootcert` (needed) and host name / IP |
//!
//! Without `sslrootcert`, `prefer` and `require` encrypt but accept any certificate (as libpq
//! does without a root file): they protect against passive capture, not against an active
//! man-in-the-middle. `sslrootcert` is a PEM file of one or more CA certificates, read when the
//! configuration is loaded (a relative path is relative to the current directory, as libpq's);
//! `sslrootcert=system` (libpq 16) is not supported: name the CA file.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`, as hookwall supports it (`allow` is not: use `prefer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it (libpq's default).
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, and the server's chain must lead to `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host (DNS name or IP address).
    VerifyFull,
}

impl SslMode {
    /// The libpq spelling.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<SslMode, String> {
        match value {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            // The value is not echoed: in a mis-quoted key=value string it may run on into the
            // password.
            _ => Err("sslmode is not one of disable, prefer, require, verify-ca, verify-full \
                      (its value is not shown: it may hold a password)"
                .to_owned()),
        }
    }
}

/// `ledger.url` taken apart: the driver's configuration without the TLS parameters, and those.
#[derive(Clone)]
pub struct Target {
    /// Everything but `sslmode` / `sslrootcert`, parsed by the driver (its `ssl_mode` set from
    /// [`Target::mode`]).
    pub config: postgres::Config,
    /// `sslmode` (default `prefer`).
    pub mode: SslMode,
    /// `sslrootcert`, when given.
    pub root_cert: Option<PathBuf>,
}

impl fmt::Debug for Target {
    /// Never prints the password (the driver's `Config` debug output redacts it too).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("hosts", &self.config.get_hosts())
            .field("mode", &self.mode)
            .field("root_cert", &self.root_cert)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// Parses a libpq URL (`postgres://…?sslmode=verify-full&sslrootcert=/etc/ca.pem`) or
    /// key=value string (`host=db sslmode=require`).
    ///
    /// # Errors
    /// A message that never contains the URL (it may hold a password): an unknown `sslmode`,
    /// `verify-ca` / `verify-full` without `sslrootcert`, `sslrootcert=system`, a parameter
    /// given twice, a port 0, or the driver's own parse error (which names the option, not
    /// its value).
    pub fn parse(url: &str) -> Result<Target, String> {
        let (rest, params) = take_tls_params(url)?;
        let mut mode = SslMode::Prefer;
        let mut root_cert = None;
        let (mut seen_mode, mut seen_root) = (false, false);
        for (key, value) in params {
            let seen = if key == "sslmode" { &mut seen_mode } else { &mut seen_root };
            if std::mem::replace(seen, true) {
                return Err(format!("{key} is given twice"));
            }
            if key == "sslmode" {
                mode = SslMode::parse(&value)?;
            } else if value == "system" {
                return Err("sslrootcert=system is not supported: give the path of a PEM file \
                            with the CA certificate(s) that signed the server's certificate"
                    .to_owned());
            } else if value.is_empty() {
                return Err("sslrootcert is empty".to_owned());
            } else {
                root_cert = Some(PathBuf::from(value));
            }
        }
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
            return Err(format!(
                "sslmode={} needs sslrootcert=PATH: a PEM file with the CA certificate(s) that \
                 signed the server's certificate",
                mode.name()
            ));
        }
        let mut config: postgres::Config = rest.parse().map_err(|e: postgres::Error| {
            // The driver's message quotes what it could not take, which can be the password
            // (a URL it did not recognise as one is read as a key); only a plain option name is
            // repeated.
            let text = super::schema::describe(&e);
            let option = text
                .split_once("unknown option `")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map(|(name, _)| name)
                .filter(|name| {
                    (1..=40).contains(&name.len())
                        && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                });
            match option {
                Some(name) => {
                    format!("is not a PostgreSQL connection string: unknown option `{name}`")
                }
                None => NOT_A_CONNECTION_STRING.to_owned(),
            }
        })?;
        if config.get_ports().contains(&0) {
            return Err("port 0 cannot be connected to; give the port PostgreSQL listens on \
                        (5432 by default)"
                .to_owned());
        }
        config.ssl_mode(match mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
        Ok(Target { config, mode, root_cert })
    }

    /// Reads the CA file (when set) and builds the TLS connector for [`Target::mode`].
    ///
    /// # Errors
    /// `sslrootcert PATH: …` when the file cannot be read or holds no PEM certificate, or a
    /// certificate rustls cannot use as a trust anchor.
    pub fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let roots = self.root_cert.as_deref().map(load_roots).transpose()?;
        Ok(MakeRustlsConnect::new(client_config(self.mode, roots)?))
    }
}

/// Reads a PEM file of CA certificates into a root store.
///
/// # Errors
/// Names the file: unreadable, not PEM, no certificate, or none rustls accepts as an anchor.
pub fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let at = || format!("sslrootcert {}", path.display());
    let pem = crate::config::read_bounded(path, crate::limits::CONFIG_FILE_BYTES_MAX)
        .map_err(|e| format!("{}: cannot read it: {e}", at()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: not a PEM certificate file ({e})", at()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM CERTIFICATE block in the file", at()));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| format!("{}: unusable CA certificate ({e})", at()))?;
    }
    Ok(roots)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(
    mode: SslMode,
    roots: Option<RootCertStore>,
) -> Result<rustls::ClientConfig, String> {
    let provider = provider();
    let verifier: Arc<dyn ServerCertVerifier> = match roots {
        Some(roots) => {
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| format!("sslrootcert: {e}"))?;
            if mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(ChainOnly { webpki })
            }
        }
        None => Arc::new(AnyCertificate { provider: Arc::clone(&provider) }),
    };
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// `verify-ca` (and `prefer` / `require` with `sslrootcert`): the chain must lead to a
/// configured CA; the certificate's names are not compared with the host (libpq's verify-ca).
#[derive(Debug)]
struct ChainOnly {
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        // rustls checks the chain (signatures, validity, CA constraints) before the name and
        // returns the name error only once the chain passed.
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `prefer` / `require` without `sslrootcert`: encryption without authentication (libpq's
/// behaviour when it has no root certificate). The handshake signature is still checked, so the
/// peer holds the key of the certificate it sent.
#[derive(Debug)]
struct AnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// What a `ledger.url` the driver cannot read is told, without any part of it.
const NOT_A_CONNECTION_STRING: &str = "is not a PostgreSQL connection string (a libpq URL \
    `postgres://user:password@host:port/db?sslmode=…` or key=value pairs `host=… user=…`); \
    its text is not shown: it may hold a password";

/// Removes `sslmode` and `sslrootcert` from `url`, returning the rest (byte for byte otherwise)
/// and the removed `(key, value)` pairs, values decoded.
///
/// # Errors
/// A URL with more than one `?`: the query cannot be told from an unencoded `?` in the user
/// name or password, and reading the wrong part would drop `sslmode` (a silent downgrade to
/// `prefer`), so it is refused with what to do.
fn take_tls_params(url: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut params = Vec::new();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        if url.matches('?').count() > 1 {
            return Err("has more than one `?`: percent-encode `?` as %3F in the user name and \
                        password (only the query starts with `?`)"
                .to_owned());
        }
        let Some((head, query)) = url.split_once('?') else { return Ok((url.to_owned(), params)) };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key)?;
            if key == "sslmode" || key == "sslrootcert" {
                params.push((key, decode(value)?));
            } else {
                kept.push(pair);
            }
        }
        let rest =
            if kept.is_empty() { head.to_owned() } else { format!("{head}?{}", kept.join("&")) };
        return Ok((rest, params));
    }
    let mut rest = String::with_capacity(url.len());
    let mut last = 0;
    for (key, value, span) in key_values(url)? {
        if key == "sslmode" || key == "sslrootcert" {
            rest.push_str(&url[last..span.start]);
            last = span.end;
            params.push((key, value));
        }
    }
    rest.push_str(&url[last..]);
    Ok((rest, params))
}

fn decode(s: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| "a URL parameter is not UTF-8 once percent-decoded".to_owned())
}

/// The `keyword = value` pairs of a libpq key=value string with each pair's byte span: values
/// are bare (ending at whitespace) or single-quoted; `\` escapes the next character in both.
fn key_values(s: &str) -> Result<Vec<(String, String, Range<usize>)>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    loop {
        i = skip_ws(i);
        if i >= bytes.len() {
            return Ok(out);
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = s[start..i].to_owned();
        i = skip_ws(i);
        if bytes.get(i) != Some(&b'=') {
            return Err(format!("{NOT_A_CONNECTION_STRING} (a word without `=`)"));
        }
        i = skip_ws(i + 1);
        let mut value = Vec::new();
        if bytes.get(i) == Some(&b'\'') {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => {
                        return Err(format!(
                            "{NOT_A_CONNECTION_STRING} (a value without its closing quote)"
                        ))
                    }
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < bytes.len() => {
                        value.push(bytes[i + 1]);
                        i += 2;
                    }
                    Some(&b) => {
                        value.push(b);
                        i += 1;
                    }
                }
            }
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    i += 1;
                }
                value.push(bytes[i]);
                i += 1;
            }
        }
        let value = String::from_utf8(value).map_err(|_| "a value is not UTF-8".to_owned())?;
        out.push((key, value, start..i));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_of_both_url_forms() {
        let t = Target::parse(
            "postgres://hw:s3cret@db.internal:6432/hookwall?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.root_cert.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Require);
        assert_eq!(t.config.get_ports(), [6432]);
        let t = Target::parse(
            "host=db user=hw sslrootcert='/etc/my ca.pem' sslmode = verify-ca dbname=h",
        )
        .unwrap();
        assert_eq!((t.mode, t.config.get_dbname()), (SslMode::VerifyCa, Some("h")));
        assert_eq!(t.root_cert.as_deref(), Some(Path::new("/etc/my ca.pem")));
        let t = Target::parse("host=db user=hw").unwrap();
        assert_eq!((t.mode, t.root_cert), (SslMode::Prefer, None));
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Prefer);
        let t = Target::parse("postgres://db/h?sslmode=disable").unwrap();
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Disable);
    }

    #[test]
    fn tls_parameter_errors_are_precise_and_never_echo_the_password() {
        for (url, expected) in [
            ("postgres://hw:pw1@db/h?sslmode=bogus", "sslmode is not one of"),
            ("host=db sslmode='verify-full password=pw1'", "sslmode is not one of"),
            ("POSTGRES://hw:pw1@db:1/hw", "its text is not shown"),
            (" postgres://hw:pw1@db:1/hw", "its text is not shown"),
            ("postgress://hw:pw1@db:1/hw", "its text is not shown"),
            ("host=db user=hw password=my pw1", "a word without `=`"),
            ("postgres://hw:pw1?x@db/h?sslmode=require", "more than one `?`"),
            ("postgres://hw:pw1@db/h?sslmode=verify-full", "sslmode=verify-full needs sslrootcert"),
            ("host=db password=pw1 sslmode=verify-ca", "sslmode=verify-ca needs sslrootcert"),
            ("host=db password=pw1 sslrootcert=system", "sslrootcert=system is not supported"),
            ("host=db password=pw1 sslmode=require sslmode=disable", "sslmode is given twice"),
            ("host=db password='pw1", "without its closing quote"),
            ("postgres://hw:pw1@db/h?sslcert=x", "unknown option `sslcert`"),
            ("postgres://hw:pw1@db:0/h", "port 0 cannot be connected to"),
            ("host=db port=0 password=pw1", "port 0 cannot be connected to"),
            ("host=a,b port=5432,0 password=pw1", "port 0 cannot be connected to"),
        ] {
            let e = Target::parse(url).unwrap_err();
            assert!(e.contains(expected), "{url}: {e}");
            assert!(!e.contains("pw1"), "{url}: the password is in {e}");
        }
        let t = Target::parse("postgres://hw:pw1@db/h").unwrap();
        assert!(!format!("{t:?}").contains("pw1"));
    }

    #[test]
    fn the_server_is_named_without_user_password_or_options() {
        let server = |url: &str| super::super::Connector::new(url).unwrap().server();
        assert_eq!(
            server("postgres://hw:pw1@db.internal:6432/h?sslmode=disable"),
            "db.internal:6432"
        );
        assert_eq!(
            server("host=/run/pg port=5433 password=pw1 sslmode=disable"),
            "/run/pg/.s.PGSQL.5433"
        );
        assert_eq!(server("host=a,b port=1,2 sslmode=disable"), "a:1, b:2");
        assert_eq!(server("host=a user=u sslmode=disable"), "a:5432");
    }

    #[test]
    fn an_unreadable_or_empty_ca_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = load_roots(&missing).unwrap_err();
        assert!(
            e.starts_with(&format!("sslrootcert {}: cannot read it", missing.display())),
            "{e}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = load_roots(&empty).unwrap_err();
        assert!(e.contains("no PEM CERTIFICATE block"), "{e}");
    }
}
