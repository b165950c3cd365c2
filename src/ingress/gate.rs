//! Connection admission shared by every ingress core: the total (`server.connections_max`) and
//! per-client-address (`server.connections_per_ip_max`) limits (issue 5: a flood of
//! connections from one address, or from everywhere, must not starve the senders that matter).
//!
//! A connection over a limit is not dropped silently: it is served by a refusing connection that
//! reads its request and answers `503 overloaded` with `Retry-After` and `Connection: close`
//! (webhook providers retry on 503), so the refusal is visible to the sender and in the metrics.
//! Each core holds at most [`crate::limits::REFUSING_CONNECTIONS_PER_CORE_MAX`] such refusing
//! connections (fewer under a small descriptor limit: [`crate::ingress::ConnectionCap::refusing`]);
//! past that a refused connection is closed at once, unanswered, so a flood from one address
//! cannot fill the cores' caps with its own refusals.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;

/// Why a connection was refused (the metric label of
/// `hookwall_ingress_connections_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `server.connections_max` open connections over all cores.
    Total,
    /// `server.connections_per_ip_max` open connections from this client address.
    PerIp,
    /// The core that accepted it already holds its share of the total (`connections_per_core_max`
    /// in the `ready` line) while the total is not reached: the kernel spread connections
    /// unevenly over the cores' listeners.
    PerCore,
}

impl Refusal {
    /// Every reason, label order.
    pub const ALL: [Refusal; 3] = [Refusal::Total, Refusal::PerIp, Refusal::PerCore];

    /// The metric label: `connections_max`, `connections_per_ip_max` or
    /// `connections_per_core_max`.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Total => "connections_max",
            Refusal::PerIp => "connections_per_ip_max",
            Refusal::PerCore => "connections_per_core_max",
        }
    }
}

/// A place held inside the limits; give it back with [`Gate::leave`] when the connection
/// closes.
#[derive(Debug)]
#[must_use = "a ticket must be returned with Gate::leave when the connection closes"]
pub struct Ticket {
    ip: Option<IpAddr>,
}

/// The shared connection counters.
#[derive(Debug)]
pub struct Gate {
    /// `server.connections_max`, or the descriptor-derived cap; lowered or raised by a reload
    /// that changes the destinations' connections ([`Gate::set_total_max`]).
    total_max: AtomicUsize,
    per_ip_max: usize,
    open: AtomicUsize,
    per_ip: DashMap<IpAddr, usize>,
}

impl Gate {
    /// Limits of `total_max` open connections over all cores and `per_ip_max` per client
    /// address (0 = no per-address limit: behind a load balancer every connection comes from
    /// its address).
    pub fn new(total_max: usize, per_ip_max: usize) -> Gate {
        Gate {
            total_max: AtomicUsize::new(total_max),
            per_ip_max,
            open: AtomicUsize::new(0),
            per_ip: DashMap::new(),
        }
    }

    /// The total limit in force (connections over all cores).
    pub fn total_max(&self) -> usize {
        self.total_max.load(Ordering::Relaxed)
    }

    /// Puts a new total limit in force for the connections accepted from now on; connections
    /// already open above it are not closed, they only keep new ones out until they end.
    pub fn set_total_max(&self, total_max: usize) {
        self.total_max.store(total_max, Ordering::Relaxed);
    }

    /// Whether the per-address limit is on (then the back ends look up the peer address).
    pub fn tracks_addresses(&self) -> bool {
        self.per_ip_max > 0
    }

    /// Takes a place for a connection from `peer` (`None` when unknown or not tracked).
    ///
    /// # Errors
    /// The limit that is full (the caller counts the refusal).
    pub fn enter(&self, peer: Option<IpAddr>) -> Result<Ticket, Refusal> {
        let total = self.open.fetch_add(1, Ordering::AcqRel);
        if total >= self.total_max() {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Total);
        }
        let ip = peer.filter(|_| self.tracks_addresses());
        if let Some(ip) = ip {
            // The entry guard is dropped at the end of this block, before any other map call
            // (DEPS.md: a dashmap guard held across another call on the same shard deadlocks).
            let admitted = {
                let mut count = self.per_ip.entry(ip).or_insert(0);
                if *count >= self.per_ip_max {
                    false
                } else {
                    *count += 1;
                    true
                }
            };
            if !admitted {
                self.open.fetch_sub(1, Ordering::AcqRel);
                self.per_ip.remove_if(&ip, |_, count| *count == 0);
                return Err(Refusal::PerIp);
            }
        }
        Ok(Ticket { ip })
    }

    /// Gives back the place `ticket` held.
    pub fn leave(&self, ticket: Ticket) {
        if let Some(ip) = ticket.ip {
            let empty = match self.per_ip.get_mut(&ip) {
                Some(mut count) => {
                    *count = count.saturating_sub(1);
                    *count == 0
                }
                None => false,
            };
            if empty {
                self.per_ip.remove_if(&ip, |_, count| *count == 0);
            }
        }
        self.open.fetch_sub(1, Ordering::AcqRel);
    }

    /// Connections open inside the limits now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn per_address_and_total_limits_refuse_and_recover() {
        let gate = Gate::new(3, 2);
        let a1 = gate.enter(ip(1)).expect("first from .1");
        let a2 = gate.enter(ip(1)).expect("second from .1");
        assert_eq!(gate.enter(ip(1)).expect_err("refused"), Refusal::PerIp, "third from .1");
        let b1 = gate.enter(ip(2)).expect("first from .2");
        assert_eq!(gate.enter(ip(3)).expect_err("refused"), Refusal::Total, "fourth overall");
        gate.leave(a1);
        let a3 = gate.enter(ip(1)).expect(".1 again after one left");
        for t in [a2, a3, b1] {
            gate.leave(t);
        }
        assert_eq!(gate.open(), 0);
        assert!(gate.per_ip.is_empty(), "no entry outlives its connections");
    }

    #[test]
    fn without_a_per_address_limit_only_the_total_counts() {
        let gate = Gate::new(2, 0);
        let t1 = gate.enter(ip(1)).expect("one");
        let t2 = gate.enter(ip(1)).expect("two");
        assert_eq!(gate.enter(None).expect_err("refused"), Refusal::Total);
        assert!(gate.per_ip.is_empty(), "addresses are not tracked");
        gate.leave(t1);
        gate.leave(t2);
    }

    /// A lowered total keeps new connections out while the open ones stay; raised again, it
    /// admits them.
    #[test]
    fn a_new_total_applies_to_the_next_connection() {
        let gate = Gate::new(3, 0);
        let held: Vec<Ticket> = (0..3).map(|_| gate.enter(None).expect("inside 3")).collect();
        gate.set_total_max(2);
        assert_eq!(gate.total_max(), 2);
        assert_eq!(gate.enter(None).expect_err("over 2"), Refusal::Total);
        let mut held = held.into_iter();
        gate.leave(held.next().expect("a ticket"));
        assert_eq!(gate.enter(None).expect_err("2 still open"), Refusal::Total);
        gate.set_total_max(3);
        let again = gate.enter(None).expect("inside 3 again");
        gate.leave(again);
        held.for_each(|t| gate.leave(t));
        assert_eq!(gate.open(), 0);
    }
}
