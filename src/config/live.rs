//! The running configuration, replaceable while hookwall serves (SIGHUP reload, issue 7).
//!
//! What a reload may change: every source's secrets (rotation without restart, R3), tolerance,
//! future skew, event-type allow-list and acknowledgment deadline, which destination it feeds,
//! every destination's URL, timeout, attempts, backoff and concurrency, and the TLS certificate
//! and key (re-read from their files). What it may not: the `[server]`, `[ledger]` and
//! `[admin]` settings (sockets, cores, limits, the ledger itself), TLS being switched on or
//! off, and the list of sources (id, tenant, provider) and destinations (id), in order —
//! identities, metrics and the ledger's per-source counters are keyed by them. A reload that
//! tries is refused as a whole, with the reason logged, and the running configuration stays.
//!
//! Readers poll [`Live::generation`] (one atomic load) and take the new configuration only
//! when it moved, so the hot path pays nothing for reloadability.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::types::Config;

/// The configuration in force, and a counter bumped by every successful reload.
#[derive(Debug)]
pub struct Live {
    generation: AtomicU64,
    current: RwLock<Arc<Config>>,
}

impl Live {
    /// Starts with `config` as generation 0.
    pub fn new(config: Arc<Config>) -> Live {
        Live { generation: AtomicU64::new(0), current: RwLock::new(config) }
    }

    /// The configuration in force now.
    pub fn get(&self) -> Arc<Config> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// How many reloads have taken effect; compare with a remembered value to learn cheaply
    /// whether [`Live::get`] would return something new.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Puts `config` in force (after [`restart_needed`] found nothing) and bumps the
    /// generation, so that a reader who sees the new generation reads the new configuration.
    pub fn replace(&self, config: Arc<Config>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = config;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Why `new` cannot replace `old` in a running process: one line per setting that only a
/// restart can change (empty = the reload may proceed). Each line names the field.
pub fn restart_needed(old: &Config, new: &Config) -> Vec<String> {
    let mut why = Vec::new();
    let mut differs = |field: &str, changed: bool| {
        if changed {
            why.push(format!("{field} changed"));
        }
    };
    let (a, b) = (&old.server, &new.server);
    differs("server.listen", a.listen != b.listen);
    differs("server.admin_listen", a.admin_listen != b.admin_listen);
    differs("server.cores", a.cores != b.cores);
    differs("server.io", a.io != b.io);
    differs("server.body_bytes_max", a.body_bytes_max != b.body_bytes_max);
    differs("server.header_bytes_max", a.header_bytes_max != b.header_bytes_max);
    differs("server.read_timeout", a.read_timeout != b.read_timeout);
    differs("server.trusted_proxies", a.trusted_proxies != b.trusted_proxies);
    differs("server.connections_max", a.connections_max != b.connections_max);
    differs("server.connections_per_ip_max", a.connections_per_ip_max != b.connections_per_ip_max);
    differs("server.tls (switched on or off)", a.tls.is_some() != b.tls.is_some());
    let (a, b) = (&old.ledger, &new.ledger);
    differs("ledger.path", a.path != b.path);
    differs("ledger.sync", a.sync != b.sync);
    differs("ledger.shards", a.shards != b.shards);
    differs("ledger.dedupe_retention", a.dedupe_retention != b.dedupe_retention);
    differs("ledger.payload_retention", a.payload_retention != b.payload_retention);
    differs("ledger.backend", a.backend != b.backend);
    differs("admin.token_file", old.admin.token_file != new.admin.token_file);
    let sources = |c: &Config| -> Vec<String> {
        c.sources
            .iter()
            .map(|s| format!("{}(tenant {}, {})", s.id, s.tenant, s.provider.name()))
            .collect()
    };
    let (a, b) = (sources(old), sources(new));
    if a != b {
        why.push(format!(
            "the list of sources changed (from [{}] to [{}]); their settings and secrets reload, \
             adding, removing, reordering or re-scoping a source needs a restart",
            a.join(", "),
            b.join(", ")
        ));
    }
    let destinations =
        |c: &Config| -> Vec<String> { c.destinations.iter().map(|d| d.id.clone()).collect() };
    let (a, b) = (destinations(old), destinations(new));
    if a != b {
        why.push(format!(
            "the list of destinations changed (from [{}] to [{}]); their settings reload, \
             adding, removing or reordering one needs a restart",
            a.join(", "),
            b.join(", ")
        ));
    }
    why
}
