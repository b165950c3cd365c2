//! The validated configuration. Holding a [`Config`] proves it passed
//! [`Config::load`](super::Config::load): every field here is checked and resolved (secrets read,
//! destinations linked, durations parsed). Shapes follow SPEC §2.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::provider::Provider;

/// The whole validated configuration.
#[derive(Debug)]
pub struct Config {
    /// The file it was loaded from (for messages).
    pub path: PathBuf,
    /// `[server]`.
    pub server: ServerConfig,
    /// `[ledger]`.
    pub ledger: LedgerConfig,
    /// `[admin]`.
    pub admin: AdminConfig,
    /// `[[source]]`, in file order; a source's index here is its id in metrics and the ledger.
    pub sources: Vec<SourceConfig>,
    /// `[[destination]]`, in file order.
    pub destinations: Vec<DestinationConfig>,
    /// Non-fatal findings (inline secrets, short retention, …), printed at start and by
    /// `check-config`.
    pub warnings: Vec<String>,
}

/// Which IO back end the ingress cores use (`server.io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// io_uring when `io_uring_setup` with the needed flags works, otherwise epoll (logged).
    Auto,
    /// io_uring or fail at start.
    IoUring,
    /// epoll (a tokio `current_thread` runtime per core).
    Epoll,
}

/// `[server]`.
#[derive(Debug)]
pub struct ServerConfig {
    /// Webhook ingress address; one `SO_REUSEPORT` socket per core binds it.
    pub listen: SocketAddr,
    /// Admin listener: `/metrics`, `/healthz`, `/readyz`, `/admin/*`.
    pub admin_listen: SocketAddr,
    /// Ingress cores, resolved (`0` in the file means all online CPUs); 1..=`CORES_MAX`.
    pub cores: usize,
    /// IO back end.
    pub io: IoMode,
    /// Largest accepted body in bytes; 413 above it, decided from Content-Length before buffering.
    pub body_bytes_max: usize,
    /// Largest accepted request head in bytes; 431 above it.
    pub header_bytes_max: usize,
    /// Longest time to read one whole request; slower clients get 408 and are closed.
    pub read_timeout: Duration,
    /// CIDRs allowed to set `X-Forwarded-Proto`/`X-Forwarded-Host`, as written.
    pub trusted_proxies: Vec<String>,
    /// Most open ingress connections over all cores; further ones are answered `503
    /// overloaded` and closed. 0 = as many as the descriptor limit allows (logged at start).
    pub connections_max: usize,
    /// Most open ingress connections from one client address; 0 = no per-address limit (the
    /// default: behind a load balancer every connection comes from its address).
    pub connections_per_ip_max: usize,
    /// `[server.tls]`: terminate TLS on the ingress listener; `None` = plain HTTP.
    pub tls: Option<TlsConfig>,
}

/// `[server.tls]`: the PEM certificate chain and private key, loaded and checked to match.
/// Re-read on every reload (SIGHUP), so a renewed certificate is served without a restart.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key: PathBuf,
    /// The pair as loaded when this configuration was read.
    pub certified: std::sync::Arc<rustls::sign::CertifiedKey>,
}

/// `[ledger]`.
#[derive(Debug)]
pub struct LedgerConfig {
    /// RocksDB directory.
    pub path: PathBuf,
    /// fsync the WAL (group commit) before any 2xx. `false` is for benchmarks only (warned).
    pub sync: bool,
    /// Shard writers when the ledger is created (`0` in the file = one per core); an existing
    /// ledger keeps the count it was created with (keys are mapped to shards by it). All
    /// shards share one WAL, so more writers mean more, smaller group commits: on a 2-core
    /// machine one writer admitted ~1.4× the events/s of two (see the README).
    pub shards: usize,
    /// How long an idempotency key is remembered.
    pub dedupe_retention: Duration,
    /// How long a raw body is kept after its event settles.
    pub payload_retention: Duration,
    /// Where the ledger lives: the embedded RocksDB at `path` (the default) or a shared
    /// PostgreSQL database (several nodes, issue 8).
    pub backend: LedgerBackend,
}

/// `ledger.backend`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerBackend {
    /// `"rocksdb"` (default): one embedded RocksDB at `ledger.path`, one node.
    RocksDb,
    /// `"postgres"`: a PostgreSQL (or wire-compatible distributed SQL) database shared by
    /// every node (`docs/postgres.md`).
    Postgres(PostgresConfig),
}

/// `[ledger]` with `backend = "postgres"`. Its `Debug` output leaves the URL out (it may
/// hold a password).
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// `ledger.url`: a libpq-style URL or key=value string (`postgres://user@host/db`), with
    /// libpq's `sslmode` and `sslrootcert` (`crate::ledger::postgres::tls`).
    pub url: String,
    /// `ledger.pool_size`: database connections of this node, `2..=POSTGRES_POOL_MAX`: one for
    /// the dispatcher's leases and settlements, the others each an admission writer.
    pub pool_size: usize,
    /// `ledger.lease`: how long a node owns an event it started delivering; when it dies, the
    /// others deliver the event after this (with the same `Idempotency-Key`). Must exceed the
    /// longest attempt (`destination.timeout`).
    pub lease: Duration,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &"(not shown: it may hold a password)")
            .field("pool_size", &self.pool_size)
            .field("lease", &self.lease)
            .finish()
    }
}

/// `[admin]`.
#[derive(Debug)]
pub struct AdminConfig {
    /// File holding the bearer token for `/admin/*`; `None` disables `/admin/*` (every
    /// `/admin/*` request is answered 403 `admin_disabled`).
    pub token_file: Option<PathBuf>,
    /// The token read from `token_file` at load (surrounding whitespace trimmed); `Some`
    /// exactly when `token_file` is set (a missing or empty file is a config error).
    pub token: Option<AdminToken>,
}

/// The admin bearer token. Its `Debug` never prints it (R28).
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(pub String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

/// One verification secret of a source, ready to use (R3: several per source for rotation).
pub struct Secret {
    /// The key id from the config (recorded with each event it verified).
    pub id: String,
    /// The verification key (HMAC key, Ed25519 public key or token digest), derived from the
    /// secret exactly as the provider documents (see [`crate::provider::key`]).
    pub key: crate::verify::Key,
    /// Unix seconds from which the key is active (inclusive); `None` = always.
    pub not_before: Option<i64>,
    /// Unix seconds at which the key retires (exclusive); `None` = never.
    pub not_after: Option<i64>,
}

impl Secret {
    /// Whether the key may verify a delivery received at `now_unix_s` (R3: a retired key is
    /// never revived).
    pub fn active_at(&self, now_unix_s: i64) -> bool {
        self.not_before.is_none_or(|t| now_unix_s >= t)
            && self.not_after.is_none_or(|t| now_unix_s < t)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material (R28).
        f.debug_struct("Secret")
            .field("id", &self.id)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// `[[source]]`: an inbound webhook path with its provider, tenant and keys.
#[derive(Debug)]
pub struct SourceConfig {
    /// Path segment: `POST /webhooks/{id}`. Matches `[a-z0-9][a-z0-9_-]*`, at most 64 bytes.
    pub id: String,
    /// Scope of keys and identities; never read from the payload (R4). Same charset as `id`.
    pub tenant: String,
    /// Signature scheme and id/timestamp rules.
    pub provider: Provider,
    /// Max age of the signed timestamp (R6).
    pub tolerance: Duration,
    /// Max lead of the signed timestamp over our clock (R6).
    pub future_skew: Duration,
    /// Allowed event types; `None` = all.
    pub event_types: Option<Vec<String>>,
    /// 1..=`SECRETS_PER_SOURCE_MAX` keys.
    pub secrets: Vec<Secret>,
    /// Index into [`Config::destinations`].
    pub destination: usize,
    /// The provider's acknowledgment deadline (defaults from the provider table).
    pub ack_deadline: Duration,
    /// `ordering_key`: events with the same value at this JSON pointer are delivered one at a
    /// time in admission order (R22, `crate::ordering`); `None` = no ordering.
    pub ordering_key: Option<crate::ordering::OrderingKey>,
    /// `public_url`: the endpoint URL as configured at a URL-signing provider (Twilio,
    /// Square), without a query; `None` rebuilds it from the request ([`crate::signed_url`]).
    pub public_url: Option<String>,
    /// Per-source scheme options (`legacy_sha1`, `hmac`); default = the documented scheme.
    pub scheme: crate::provider::options::SchemeOptions,
}

/// `[[destination]]`: where admitted events are forwarded (SPEC §5).
#[derive(Debug)]
pub struct DestinationConfig {
    /// Id used in config and metric labels. Same charset as source ids.
    pub id: String,
    /// `http://` or `https://` URL the events are POSTed to.
    pub url: String,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Attempts before the event is dead (R19); at least 1.
    pub attempts_max: u32,
    /// Backoff before the second attempt; doubles per attempt with full jitter.
    pub backoff_min: Duration,
    /// Cap of the backoff.
    pub backoff_max: Duration,
    /// In-flight attempts to this destination, at least 1.
    pub concurrency_max: usize,
    /// Requests in flight on one connection to a plain `http://` destination (HTTP/1.1
    /// pipelining, RFC 9112 §9.3.2): `concurrency_max / pipeline` connections (rounded up)
    /// carry the attempts. 1..=64, default 1 (one request per connection at a time).
    pub pipeline: usize,
    /// Whether the destination starts paused (`paused = true`: events are admitted and wait,
    /// no attempt is made until `POST /admin/destinations/{id}/resume`). Default `false`.
    pub paused: bool,
    /// Consecutive failed attempts (timeouts, connection errors, 408, 429, 5xx) after which
    /// the destination's circuit breaker opens: then one probe attempt at a time, at most one
    /// per `backoff_min`, until one succeeds. `0` = no breaker. Default 10.
    pub breaker_failures_max: u32,
    /// `signing_secret` (Standard Webhooks `whsec_…`): when set, every forward is signed with
    /// `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,…` (SPEC §5).
    pub signing_key: Option<SigningKey>,
    /// `kind = "nats"`: publish to a NATS JetStream stream instead of POSTing; `None` = HTTP.
    pub nats: Option<NatsTarget>,
}

impl DestinationConfig {
    /// The most connections the dispatcher holds open to this destination: one to a NATS
    /// server, `concurrency_max / pipeline` (rounded up) to a plain `http://` destination,
    /// `concurrency_max` to an `https://` one. Counted into the descriptors ingress keeps
    /// back ([`crate::ingress::connections_per_core`]).
    pub fn connections_max(&self) -> usize {
        if self.nats.is_some() {
            1
        } else {
            self.concurrency_max.max(1).div_ceil(self.pipeline.max(1))
        }
    }
}

/// A destination whose `concurrency_max` [`fit_connections`] lowered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FittedDestination {
    /// The destination's id.
    pub id: String,
    /// `concurrency_max` as configured.
    pub configured: usize,
    /// `concurrency_max` in force.
    pub fitted: usize,
}

/// Lowers the destinations' `concurrency_max` so that together they open at most `max`
/// connections ([`DestinationConfig::connections_max`]; the descriptors the ingress connection
/// cap keeps back for them, [`crate::ingress::destination_connections_max`]) and returns those
/// it lowered, for the log. A NATS destination keeps its one connection, and so does every
/// other destination; what `max` leaves beyond those is shared among the others in proportion
/// to the connections they would open beyond their first. When even one connection each does
/// not fit, each is held to one and the total stays over `max` (the caller warns). Beyond
/// those descriptors the dispatcher's connects would fail for want of one (`EMFILE`) once
/// ingress holds its share, an outage that looks like a failing destination.
pub fn fit_connections(
    destinations: &mut [DestinationConfig],
    max: usize,
) -> Vec<FittedDestination> {
    let total: usize = destinations.iter().map(DestinationConfig::connections_max).sum();
    if total <= max {
        return Vec::new();
    }
    let (nats, http): (Vec<_>, Vec<_>) = destinations.iter_mut().partition(|d| d.nats.is_some());
    // Each HTTP destination's first connection, and the NATS ones, come first.
    let spare = max.saturating_sub(nats.len()).saturating_sub(http.len());
    let beyond_first: usize = http.iter().map(|d| d.connections_max() - 1).sum();
    let mut fitted = Vec::new();
    for d in http {
        let extra = (d.connections_max() - 1).saturating_mul(spare) / beyond_first.max(1);
        let connections = 1 + extra;
        let concurrency = d.concurrency_max.min(connections.saturating_mul(d.pipeline.max(1)));
        if concurrency < d.concurrency_max {
            fitted.push(FittedDestination {
                id: d.id.clone(),
                configured: d.concurrency_max,
                fitted: concurrency,
            });
            d.concurrency_max = concurrency;
        }
    }
    fitted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn destination(id: &str, concurrency_max: usize, pipeline: usize) -> DestinationConfig {
        DestinationConfig {
            id: id.to_owned(),
            url: "http://127.0.0.1:1/".to_owned(),
            timeout: Duration::from_secs(10),
            attempts_max: 5,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(3600),
            concurrency_max,
            pipeline,
            paused: false,
            breaker_failures_max: 10,
            signing_key: None,
            nats: None,
        }
    }

    fn connections(destinations: &[DestinationConfig]) -> usize {
        destinations.iter().map(DestinationConfig::connections_max).sum()
    }

    /// Within the descriptors kept for them, the destinations keep what is configured.
    #[test]
    fn destinations_within_the_budget_are_left_alone() {
        let mut d = vec![destination("a", 64, 1), destination("b", 64, 32)];
        assert_eq!(connections(&d), 66);
        assert!(fit_connections(&mut d, 66).is_empty());
        assert_eq!((d[0].concurrency_max, d[1].concurrency_max), (64, 64));
    }

    /// The default `concurrency_max = 64` under a limit of 128 descriptors (32 kept for the
    /// destinations): the connections are shared in proportion, and never exceed the budget.
    #[test]
    fn destinations_over_the_budget_share_it_in_proportion() {
        let mut d =
            vec![destination("a", 64, 1), destination("b", 32, 1), destination("c", 64, 32)];
        let fitted = fit_connections(&mut d, 32);
        assert!(connections(&d) <= 32, "{}", connections(&d));
        // 98 connections: a gets 64·32/98 = 20, b 10, c (2 connections) 1, so 32 attempts.
        assert_eq!(
            (d[0].concurrency_max, d[1].concurrency_max, d[2].concurrency_max),
            (20, 10, 32)
        );
        let ids: Vec<(&str, usize, usize)> =
            fitted.iter().map(|f| (f.id.as_str(), f.configured, f.fitted)).collect();
        assert_eq!(ids, [("a", 64, 20), ("b", 32, 10), ("c", 64, 32)]);
    }

    /// However small the budget, each destination keeps one connection.
    #[test]
    fn every_destination_keeps_a_connection() {
        let mut d = vec![destination("a", 64, 1), destination("b", 8, 4)];
        fit_connections(&mut d, 1);
        assert_eq!((d[0].concurrency_max, d[1].concurrency_max), (1, 4));
    }

    /// The first connection of every destination, and the NATS ones, are taken from the
    /// budget before the rest is shared, so the total stays within it whenever one each fits.
    /// (The shares once had a floor of one each on top of the proportional split, and NATS
    /// destinations were not counted: one at 1 000 beside fifteen at 1 under a budget of 16
    /// opened 30 connections, and the starved destinations' connects failed with `EMFILE`.)
    #[test]
    fn first_connections_and_nats_come_out_of_the_budget() {
        let mut many = vec![destination("big", 1000, 1)];
        many.extend((1..=15).map(|n| destination(&format!("s{n}"), 1, 1)));
        fit_connections(&mut many, 16);
        assert_eq!(connections(&many), 16);
        assert_eq!(many[0].concurrency_max, 1);

        let mut with_nats = vec![destination("http", 64, 1)];
        for n in 0..12 {
            let mut d = destination(&format!("nats{n}"), 64, 1);
            d.nats = Some(NatsTarget { subject: "s".to_owned(), stream: "S".to_owned() });
            with_nats.push(d);
        }
        fit_connections(&mut with_nats, 16);
        assert_eq!(connections(&with_nats), 16, "12 NATS connections and 4 to http");
        assert_eq!(with_nats[0].concurrency_max, 4);

        // Rounding never takes the total past the budget: 200 / 1, 200 / 64 and NATS under 32.
        let mut rounded = vec![destination("a", 200, 1), destination("b", 200, 64)];
        rounded.push(with_nats.pop().expect("a NATS destination"));
        fit_connections(&mut rounded, 32);
        assert!(connections(&rounded) <= 32, "{}", connections(&rounded));

        for max in 0..40 {
            let mut d = vec![destination("a", 64, 1), destination("b", 100, 3)];
            d.push(destination("c", 7, 2));
            fit_connections(&mut d, max);
            assert!(connections(&d) <= max.max(3), "budget {max}: {}", connections(&d));
        }
    }
}

/// A `[[destination]]` with `kind = "nats"`: `url` is the NATS server (`nats://host:port`), each
/// event is published to `subject` with `Nats-Msg-Id` = its idempotency key (JetStream's
/// duplicate window drops repeats) and is delivered when `stream` acknowledged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsTarget {
    /// `subject`: the subject published to (no wildcards).
    pub subject: String,
    /// `stream`: the JetStream stream that must store it (the ack names it).
    pub stream: String,
}

/// A destination's Standard Webhooks signing key: HMAC-SHA256 keyed by the base64-decoded
/// part of `whsec_…`. Its `Debug` never prints key material (R28).
#[derive(Clone)]
pub struct SigningKey(pub ring::hmac::Key);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}
