//! hookwall: a webhook ingestion appliance. For each delivery it proves authenticity and
//! freshness, admits the event's identity exactly once into a durable RocksDB ledger before
//! acknowledging, then forwards the event downstream with an idempotency key, retries and a
//! dead-letter queue. See ARCHITECTURE.md for the codemap and invariants.
//!
//! Modules are listed in data-flow order.

pub mod admin;
pub mod answer;
pub mod batch;
pub mod cli;
pub mod clock;
pub mod config;
pub mod dispatch;
pub mod dlq;
pub mod http;
pub mod ingress;
pub mod inspect;
pub mod ledger;
pub mod limits;
pub mod loadgen;
pub mod metrics;
pub mod offline;
pub mod ordering;
pub mod pipeline;
pub mod provider;
pub mod runtime;
pub mod server;
pub mod signed_url;
pub mod tls;
pub mod verify;
pub mod wake;
