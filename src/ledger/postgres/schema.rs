//! The PostgreSQL schema, versioned and embedded in the binary: `hookwall migrate` applies the
//! migrations a database lacks, in order, each in its own transaction together with its row
//! in `hookwall_schema`; `hookwall serve` refuses a database whose version is not exactly
//! [`VERSION`] (unmigrated: run `hookwall migrate`; newer: this binary is older than the
//! schema, upgrade it). The SQL keeps to what CockroachDB and YugabyteDB also accept
//! (`docs/postgres.md`).

/// One schema change: its version (1, 2, … with no gap) and its statements.
pub struct Migration {
    /// Version after this migration.
    pub version: i32,
    /// Short name, stored with the version.
    pub name: &'static str,
    /// DDL statements, run in order.
    pub statements: &'static [&'static str],
}

/// Every migration, oldest first. Never edit a released one: add the next.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "events, quarantine, rejected",
        statements: &[
            // One row per identity: the claim (fingerprint, state, attempts) and the inbox record
            // (body, content type, due time) together, so one INSERT commits both. The primary
            // key is the single source of truth for admission (R10): INSERT … ON CONFLICT DO
            // NOTHING. `seq` is the node-independent handle the dispatcher settles by; `due_ms` is
            // NULL once settled, otherwise the next attempt's time or the lease deadline.
            "CREATE TABLE IF NOT EXISTS hookwall_events (
            tenant TEXT NOT NULL,
            source TEXT NOT NULL,
            event_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            source_index INT NOT NULL,
            fingerprint BYTEA NOT NULL,
            event_type TEXT,
            secret_id TEXT NOT NULL,
            signed_at BIGINT,
            received_at_ms BIGINT NOT NULL,
            content_type BYTEA,
            body BYTEA,
            state TEXT NOT NULL,
            attempts INT NOT NULL,
            due_ms BIGINT,
            lease_owner TEXT,
            last_error TEXT,
            settled_at_ms BIGINT,
            CONSTRAINT hookwall_events_identity PRIMARY KEY (tenant, source, event_id)
        )",
            "CREATE UNIQUE INDEX IF NOT EXISTS hookwall_events_seq ON hookwall_events (seq)",
            "CREATE INDEX IF NOT EXISTS hookwall_events_due ON hookwall_events (due_ms)
            WHERE due_ms IS NOT NULL",
            // A different body under a known identity (R11): the first binding stays in
            // hookwall_events, each different fingerprint is recorded once here.
            "CREATE TABLE IF NOT EXISTS hookwall_quarantine (
            tenant TEXT NOT NULL,
            source TEXT NOT NULL,
            event_id TEXT NOT NULL,
            fingerprint BYTEA NOT NULL,
            received_at_ms BIGINT NOT NULL,
            PRIMARY KEY (tenant, source, event_id, fingerprint)
        )",
            // Minimised records of refused bodies (R23): no body bytes.
            "CREATE TABLE IF NOT EXISTS hookwall_rejected (
            id BIGINT NOT NULL PRIMARY KEY,
            source TEXT NOT NULL,
            received_at_ms BIGINT NOT NULL,
            reason TEXT NOT NULL,
            event_id TEXT,
            body_bytes BIGINT NOT NULL,
            fingerprint BYTEA NOT NULL
        )",
        ],
    },
    Migration {
        version: 2,
        name: "audit, attempt history, retention indexes",
        statements: &[
            // Operator actions (R20), newest first by (at_ms, id); `id` is random (no sequence).
            "CREATE TABLE IF NOT EXISTS hookwall_audit (
            at_ms BIGINT NOT NULL,
            id BIGINT NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            event_key TEXT,
            destination TEXT,
            reason TEXT,
            state_before TEXT,
            PRIMARY KEY (at_ms, id)
        )",
            // Every settled attempt of an event (R20), by the event's `seq`: kept across replays,
            // removed with the payload (R25).
            "CREATE TABLE IF NOT EXISTS hookwall_attempts (
            seq BIGINT NOT NULL,
            at_ms BIGINT NOT NULL,
            attempt INT NOT NULL,
            outcome TEXT NOT NULL,
            error TEXT,
            PRIMARY KEY (seq, at_ms, attempt)
        )",
            // The binding a conflicting copy was refused against, kept with the copy (NULL in rows
            // written by version 1: the event's current fingerprint is shown then).
            "ALTER TABLE hookwall_quarantine ADD COLUMN IF NOT EXISTS first_fingerprint BYTEA",
            // Retention sweeps (R25) and newest-first lists.
            "CREATE INDEX IF NOT EXISTS hookwall_events_identity_expiry
            ON hookwall_events (received_at_ms) WHERE due_ms IS NULL",
            "CREATE INDEX IF NOT EXISTS hookwall_events_payload_expiry
            ON hookwall_events (settled_at_ms) WHERE due_ms IS NULL AND body IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS hookwall_quarantine_received
            ON hookwall_quarantine (received_at_ms)",
            "CREATE INDEX IF NOT EXISTS hookwall_rejected_received
            ON hookwall_rejected (received_at_ms)",
        ],
    },
    Migration {
        version: 3,
        name: "ordering groups (R22)",
        statements: &[
            // `ordering_value`: the value at the source's `ordering_key` (NULL: unordered);
            // `order_stamp`: the admission stamp that orders a group (the database's statement
            // time in µs × 2048 + the row's place in its batch). A row is leased only while no
            // unsettled row of its group (`due_ms IS NOT NULL`) has a smaller (order_stamp, seq).
            "ALTER TABLE hookwall_events ADD COLUMN IF NOT EXISTS ordering_value TEXT",
            "ALTER TABLE hookwall_events ADD COLUMN IF NOT EXISTS order_stamp BIGINT",
            // The unsettled rows of each group in order: the lease's NOT EXISTS probe.
            "CREATE INDEX IF NOT EXISTS hookwall_events_order
            ON hookwall_events (tenant, source, ordering_value, order_stamp, seq)
            WHERE ordering_value IS NOT NULL AND due_ms IS NOT NULL",
        ],
    },
];

/// The schema version this binary serves on: the last migration's.
pub const VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

const VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS hookwall_schema (
    version INT NOT NULL PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at_ms BIGINT NOT NULL
)";

/// Why the schema cannot be used or changed.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The database could not be reached or a statement failed.
    #[error("PostgreSQL: {}", describe(.0))]
    Db(#[from] postgres::Error),
    /// `serve` on a database without the current schema.
    #[error(
        "the database schema is at version {found}, this hookwall needs {VERSION}: run \
         `hookwall migrate -c CONFIG` first"
    )]
    Unmigrated {
        /// Version found (0 = none).
        found: i32,
    },
    /// The database was migrated by a newer hookwall.
    #[error(
        "the database schema is at version {found}, newer than this hookwall's {VERSION}: \
         upgrade hookwall (never run an older binary on a newer schema)"
    )]
    Newer {
        /// Version found.
        found: i32,
    },
}

/// The driver's error with its causes (`error connecting to server: Connection refused …`):
/// the top-level text alone does not say why.
pub fn describe(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The highest applied version (0 when the version table does not exist yet).
///
/// # Errors
/// [`SchemaError::Db`].
pub fn current(client: &mut postgres::Client) -> Result<i32, SchemaError> {
    let exists = client.query_one(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'hookwall_schema'",
        &[],
    )?;
    if exists.try_get::<_, i64>(0)? == 0 {
        return Ok(0);
    }
    let row = client.query_one("SELECT max(version) FROM hookwall_schema", &[])?;
    Ok(row.try_get::<_, Option<i32>>(0)?.unwrap_or(0))
}

/// Refuses a schema that is not exactly [`VERSION`] (checked by `serve` at start-up).
///
/// # Errors
/// [`SchemaError::Unmigrated`], [`SchemaError::Newer`] or [`SchemaError::Db`].
pub fn check(client: &mut postgres::Client) -> Result<(), SchemaError> {
    match current(client)? {
        VERSION => Ok(()),
        found if found > VERSION => Err(SchemaError::Newer { found }),
        found => Err(SchemaError::Unmigrated { found }),
    }
}

/// Applies every migration newer than the database's version; returns `(from, to)`.
///
/// # Errors
/// [`SchemaError::Newer`] when the database is ahead of this binary; [`SchemaError::Db`] when a
/// statement fails (that migration's transaction is rolled back).
pub fn migrate(client: &mut postgres::Client, now_ms: u64) -> Result<(i32, i32), SchemaError> {
    client.batch_execute(VERSION_TABLE)?;
    let from = current(client)?;
    if from > VERSION {
        return Err(SchemaError::Newer { found: from });
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > from) {
        let mut tx = client.transaction()?;
        for statement in m.statements {
            tx.batch_execute(statement)?;
        }
        let at = i64::try_from(now_ms).unwrap_or(i64::MAX);
        // A concurrent `migrate` that applied the same version makes this insert fail on the
        // primary key, rolling this copy back.
        tx.execute(
            "INSERT INTO hookwall_schema (version, name, applied_at_ms) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &at],
        )?;
        tx.commit()?;
    }
    Ok((from, VERSION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_start_at_one_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i32::try_from(i).expect("few migrations") + 1, "{}", m.name);
        }
    }
}
