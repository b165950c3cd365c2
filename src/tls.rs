//! TLS termination with rustls and its ring crypto provider (`[server.tls]`, SPEC §2): TLS 1.2
//! and 1.3 only, ALPN `http/1.1`, no client certificates. The certificate chain and key are
//! read from PEM files at start and again on every reload (SIGHUP): [`CertStore`] swaps the
//! pair for new handshakes while open connections keep the keys they negotiated with, so a
//! renewal drops no connection.
//!
//! The record layer itself is driven by the sans-IO connection ([`crate::ingress::conn`]):
//! ciphertext in, plaintext to the HTTP framer, plaintext answers out, ciphertext to the
//! socket — identically on both IO back ends.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;

use crate::config::read_bounded;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The ALPN protocol hookwall speaks (HTTP/2 is not offered: providers deliver over HTTP/1.1).
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// The crypto provider every TLS object of hookwall uses: rustls' ring provider (DEPS.md:
/// one provider, chosen explicitly, never a process-wide default that a dependency could race).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The validity period of certificate `der` (RFC 5280 §4.1.2.5): `(not_before, not_after)` in
/// Unix seconds, or `None` when it does not decode as an X.509 certificate.
pub fn validity(der: &CertificateDer<'_>) -> Option<(u64, u64)> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(der.as_ref()).ok()?;
    let v = cert.tbs_certificate.validity;
    Some((v.not_before.to_unix_duration().as_secs(), v.not_after.to_unix_duration().as_secs()))
}

/// Reads a PEM certificate chain (leaf first) and its PEM private key (PKCS#8, PKCS#1 or
/// SEC1) and checks that the key belongs to the leaf certificate.
///
/// # Errors
/// A message naming the file and what is wrong: unreadable, no certificate / no private key in
/// it, a key type ring cannot sign with, or a key that does not match the certificate. Key bytes
/// are never part of a message.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    let max = crate::limits::CONFIG_FILE_BYTES_MAX;
    let cert_pem = read_bounded(cert, max).map_err(|e| format!("{}: {e}", cert.display()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: not a PEM certificate chain ({e})", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no PEM CERTIFICATE block in the file", cert.display()));
    }
    let key_pem = read_bounded(key, max).map_err(|e| format!("{}: {e}", key.display()))?;
    if key_pem.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err(format!(
            "{}: the private key is encrypted; hookwall needs it unencrypted (e.g. `openssl pkey -in KEY -out KEY.plain`), readable only by the service",
            key.display()
        ));
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!("{}: no PEM private key (PKCS#8, RSA or EC) in the file ({e})", key.display())
    })?;
    let certified = CertifiedKey::from_der(chain, private, &provider()).map_err(|e| {
        format!("{} with {}: unusable certificate and key ({e})", cert.display(), key.display())
    })?;
    Ok(Arc::new(certified))
}

/// The certificate and key new handshakes use; replaced on reload without touching open
/// connections.
#[derive(Debug)]
pub struct CertStore {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertStore {
    /// A store serving `key` until the next [`CertStore::replace`].
    pub fn new(key: Arc<CertifiedKey>) -> CertStore {
        CertStore { current: RwLock::new(key) }
    }

    /// Serves `key` to every handshake from now on.
    pub fn replace(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = key;
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner)))
    }
}

/// The rustls server configuration shared by every core: TLS 1.2 and 1.3, ALPN `http/1.1`,
/// certificates from `store`.
///
/// # Errors
/// rustls refusing the protocol versions with the ring provider (a build defect).
pub fn server_config(store: Arc<CertStore>) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
    // Renegotiation does not exist in rustls; session tickets are fine (stateless, rotated).
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}
