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
    differs("ledger.payload_retention", a.payload_retention != b.payload_retention);
    differs("ledger.backend", a.backend != b.backend);
    differs("admin.token_file", old.admin.token_file != new.admin.token_file);
    if let Some(line) = retention_change(old, new) {
        why.push(line);
    }
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

/// The restart line for a changed `ledger.dedupe_retention`, if it changed. Unset, it is
/// derived from the sources (R25), so a longer tolerance or another provider can change it:
/// the line then says so, instead of blaming a `[ledger]` setting nobody touched.
fn retention_change(old: &Config, new: &Config) -> Option<String> {
    let (a, b) = (old.ledger.dedupe_retention, new.ledger.dedupe_retention);
    if a == b {
        return None;
    }
    let (from, to) = (super::load::human(a), super::load::human(b));
    if b == super::load::default_dedupe_retention(&new.sources) {
        Some(format!(
            "ledger.dedupe_retention changed from {from} to {to} (unset, it is derived from the \
             sources: at least twice the tolerance of each source with a signed timestamp, and \
             each provider's retry horizon plus a day; the running ledger keeps the retention it started with)"
        ))
    } else {
        Some(format!("ledger.dedupe_retention changed from {from} to {to}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(source_extra: &str) -> Config {
        let text = format!(
            "[[source]]\nid = \"s\"\ntenant = \"t\"\nprovider = \"standard\"\n\
             secrets = [{{ id = \"k\", value = \"whsec_eHl6\" }}]\ndestination = \"d\"\n{source_extra}\n\
             [[destination]]\nid = \"d\"\nurl = \"http://127.0.0.1:9/\"\n"
        );
        let loaded = Config::from_toml_str(&text, std::path::Path::new("t.toml"), &|_| None);
        loaded.unwrap_or_else(|e| panic!("test config: {e}"))
    }

    /// A tolerance is reloadable, but past half of the derived identity retention it changes
    /// that retention, which only a restart applies: the refusal says where the change came
    /// from (found by a bad-input review: it read as if `[ledger]` had been edited).
    #[test]
    fn a_derived_retention_change_names_its_cause() {
        let (old, short, long) =
            (config(""), config("tolerance = \"10m\""), config("tolerance = \"4d\""));
        assert!(restart_needed(&old, &short).is_empty(), "a short tolerance reloads");
        let why = restart_needed(&old, &long);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].starts_with("ledger.dedupe_retention changed from 7days to 8days"),
            "{why:?}"
        );
        assert!(why[0].contains("derived from the sources"), "{why:?}");
    }
}
