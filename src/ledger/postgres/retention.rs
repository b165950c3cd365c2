//! Retention (R25) on the PostgreSQL ledger, with the RocksDB ledger's settings and meaning:
//! a delivered or dropped event's body and attempt history go `payload_retention` after it
//! settled, its row (its identity: a later copy is admitted anew) `dedupe_retention` after it
//! was admitted; quarantine and rejected records go `dedupe_retention` after they arrived.
//! Unsettled (`received`, `failed`) and `dead` events never expire by themselves, and the audit
//! log is kept.
//!
//! Every node sweeps (on its settlement thread, every [`sweep_every`] — the RocksDB writers'
//! period) in bounded batches of [`SWEEP_BATCH_MAX`] rows per statement, in the portable form
//! `DELETE … WHERE pk IN (SELECT pk … LIMIT n FOR UPDATE SKIP LOCKED)` (`ctid` is
//! PostgreSQL-only). Several nodes sweeping at once take disjoint rows (`SKIP LOCKED`); the
//! outer statement repeats the expiry condition, so a row replayed meanwhile is not touched.

use postgres::Client;

use super::{as_i64, Shared};
use crate::ledger::Retention;

/// Most rows one sweep statement removes or empties (one transaction each).
pub const SWEEP_BATCH_MAX: i64 = 1000;
/// Most batches of each kind one sweep runs before the settlement thread takes its queue
/// again; what is left is swept on the next turn.
const SWEEP_ROUNDS_MAX: usize = 8;

pub(in crate::ledger) use crate::ledger::writer::sweep_every;

/// Rows of settled events whose identity expired (admitted before `$1`).
const EXPIRE_IDENTITIES: &str = "DELETE FROM hookwall_events
    WHERE seq IN (SELECT seq FROM hookwall_events
        WHERE due_ms IS NULL AND state IN ('delivered', 'dropped') AND received_at_ms < $1
        LIMIT $2 FOR UPDATE SKIP LOCKED)
    AND due_ms IS NULL AND state IN ('delivered', 'dropped') AND received_at_ms < $1
    RETURNING seq";

/// Bodies of settled events whose payload expired (settled before `$1`).
const EXPIRE_PAYLOADS: &str = "UPDATE hookwall_events SET body = NULL
    WHERE seq IN (SELECT seq FROM hookwall_events
        WHERE due_ms IS NULL AND body IS NOT NULL AND state IN ('delivered', 'dropped')
            AND settled_at_ms < $1
        LIMIT $2 FOR UPDATE SKIP LOCKED)
    AND due_ms IS NULL AND body IS NOT NULL AND state IN ('delivered', 'dropped')
        AND settled_at_ms < $1
    RETURNING seq";

/// The attempt history of the events just expired.
const EXPIRE_ATTEMPTS: &str = "DELETE FROM hookwall_attempts WHERE seq = ANY($1)";

const EXPIRE_QUARANTINE: &str = "DELETE FROM hookwall_quarantine
    WHERE (tenant, source, event_id, fingerprint) IN (
        SELECT tenant, source, event_id, fingerprint FROM hookwall_quarantine
        WHERE received_at_ms < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
    AND received_at_ms < $1";

const EXPIRE_REJECTED: &str = "DELETE FROM hookwall_rejected
    WHERE id IN (SELECT id FROM hookwall_rejected WHERE received_at_ms < $1
        LIMIT $2 FOR UPDATE SKIP LOCKED)
    AND received_at_ms < $1";

/// Removes what retention expired by now; returns how many events' records were removed
/// or emptied.
///
/// # Errors
/// The failed statement's error (that batch is rolled back and waits for the next sweep).
pub fn sweep(shared: &Shared, client: &mut Client) -> Result<usize, postgres::Error> {
    let Some(r) = &shared.opts.retention else {
        return Ok(0);
    };
    let now = (r.now_ms)();
    let (payload_cutoff, identity_cutoff) = cutoffs(r, now);
    let mut removed = 0usize;
    for (statement, cutoff) in
        [(EXPIRE_IDENTITIES, identity_cutoff), (EXPIRE_PAYLOADS, payload_cutoff)]
    {
        for _ in 0..SWEEP_ROUNDS_MAX {
            let mut tx = client.transaction()?;
            let rows = tx.query(statement, &[&cutoff, &SWEEP_BATCH_MAX])?;
            let seqs = rows.iter().map(|r| r.try_get(0)).collect::<Result<Vec<i64>, _>>()?;
            if !seqs.is_empty() {
                tx.execute(EXPIRE_ATTEMPTS, &[&seqs])?;
            }
            tx.commit()?;
            removed += seqs.len();
            if i64::try_from(seqs.len()).unwrap_or(i64::MAX) < SWEEP_BATCH_MAX {
                break;
            }
        }
    }
    for statement in [EXPIRE_QUARANTINE, EXPIRE_REJECTED] {
        for _ in 0..SWEEP_ROUNDS_MAX {
            let n = client.execute(statement, &[&identity_cutoff, &SWEEP_BATCH_MAX])?;
            if i64::try_from(n).unwrap_or(i64::MAX) < SWEEP_BATCH_MAX {
                break;
            }
        }
    }
    Ok(removed)
}

/// `(payload, identity)` cutoffs in Unix ms: records older than these expired at `now_ms`.
fn cutoffs(r: &Retention, now_ms: u64) -> (i64, i64) {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    (as_i64(now_ms.saturating_sub(ms(r.payload))), as_i64(now_ms.saturating_sub(ms(r.dedupe))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn cutoffs_are_now_minus_each_retention() {
        let r = Retention {
            payload: Duration::from_secs(2),
            dedupe: Duration::from_secs(6),
            now_ms: Arc::new(|| 0),
        };
        assert_eq!(cutoffs(&r, 10_000), (8_000, 4_000));
        assert_eq!(cutoffs(&r, 1_000), (0, 0), "never before the epoch");
    }
}
