//! hookwall's integration tests: the real binary (`CARGO_BIN_EXE_hookwall`) on loopback ports,
//! a temp ledger, an in-process destination that fails on command, and raw HTTP/1.1 so each
//! test controls framing, pipelining and chunking byte for byte. Requirements (R1…R28) are the
//! numbered ones of `shared/SEEDS.md`; SPEC § refers to `shared/SPEC.md`.
//!
//! Run: `cargo test --release --test it` (the release profile: a debug build would compile
//! RocksDB a second time). Every wait has a deadline; nothing sleeps where a condition can be
//! awaited.
//!
//! Ingress-facing tests run on both back ends: `on_both_io!` turns `fn name(io: Io)` into the
//! tests `name::io_uring` and `name::epoll`.

#![allow(clippy::unwrap_used, clippy::disallowed_methods, clippy::too_many_lines)]

/// Defines `fn $name(io: Io)` and the tests `$name::io_uring` and `$name::epoll`, one per
/// ingress back end (`server.io`).
macro_rules! on_both_io {
    ($(#[$meta:meta])* fn $name:ident($io:ident: Io) $body:block) => {
        $(#[$meta])*
        fn $name($io: crate::harness::Io) $body

        mod $name {
            #[test]
            fn io_uring() {
                super::$name(crate::harness::Io::IoUring);
            }

            #[test]
            fn epoll() {
                super::$name(crate::harness::Io::Epoll);
            }
        }
    };
}

/// As `on_both_io!`, plus `$name::postgres`: epoll with `ledger.backend = "postgres"` on a
/// throwaway PostgreSQL server (`pg.rs`) that `Setup::new` picks up.
macro_rules! on_both_io_and_postgres {
    ($(#[$meta:meta])* fn $name:ident($io:ident: Io) $body:block) => {
        $(#[$meta])*
        fn $name($io: crate::harness::Io) $body

        mod $name {
            #[test]
            fn io_uring() {
                super::$name(crate::harness::Io::IoUring);
            }

            #[test]
            fn epoll() {
                super::$name(crate::harness::Io::Epoll);
            }

            #[test]
            fn postgres() {
                crate::pg::with_postgres(|| super::$name(crate::harness::Io::Epoll));
            }
        }
    };
}

/// The tests `$name::rocksdb` and `$name::postgres` of the plain `fn $name()` beside it: the same
/// test on the embedded ledger and on `ledger.backend = "postgres"` (a throwaway server that
/// `Setup::new` picks up, `pg.rs`).
macro_rules! on_rocksdb_and_postgres {
    ($name:ident) => {
        mod $name {
            #[test]
            fn rocksdb() {
                super::$name();
            }

            #[test]
            fn postgres() {
                crate::pg::with_postgres(super::$name);
            }
        }
    };
}

mod admin;
mod batches;
mod client;
mod crashloop;
mod diskfaults;
mod diskfull;
mod dispatch;
mod durability;
mod harness;
mod hostile;
mod ingress;
mod lifecycle;
mod loadgen;
mod logs;
mod metrics;
mod nats;
mod observability;
mod operator;
mod ordering;
mod pg;
mod pg_cluster;
mod pg_operator;
mod pg_tls;
mod providers;
mod providers_batch;
mod providers_more;
mod providers_options;
mod reload;
mod shedding;
mod sign;
mod sink;
mod systemd;
mod tls;
mod url_signing;
mod vectors;
mod verify_cli;
