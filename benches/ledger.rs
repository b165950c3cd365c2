//! Criterion benches of durable admission throughput (events/s) by batch size, `sync = true`,
//! real RocksDB in a temp dir:
//! - `ledger_admit_sync/N`: N admissions handed to [`Ledger::admit`] at once (one shard
//!   writer), timed until every reply arrived. The writer forms its own group commits from
//!   what is queued, so after each size the mean committed batch is printed (from the
//!   ledger's `commit_batch_events` histogram).
//! - `rocksdb_writebatch_sync/N`: the raw floor: one `WriteBatch` of N puts (48-byte key,
//!   512-byte value, about one claim plus inbox record) written with `sync = true`.
//!
//! Sizes: 1, 16, 64, 256, plus any in `HOOKWALL_BENCH_BATCHES` (comma-separated; used by
//! `benches/e2e.sh` to add the batch size hookwall formed under load).
//! Run: `cargo bench --bench ledger`. This bench opens RocksDB directly for the raw floor (a
//! baseline outside the appliance; `src/` keeps the rule that only `src/ledger/` does).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hookwall::clock;
use hookwall::ledger::{Admission, Decision, Ledger, LedgerOptions};
use hookwall::metrics::{DispatchStats, LedgerStats, Metrics};

/// Batch sizes measured (plus `HOOKWALL_BENCH_BATCHES`).
fn sizes() -> Vec<usize> {
    let mut sizes = vec![1, 16, 64, 256];
    if let Ok(extra) = std::env::var("HOOKWALL_BENCH_BATCHES") {
        for s in extra.split(',').filter(|s| !s.trim().is_empty()) {
            let n: usize = s.trim().parse().expect("HOOKWALL_BENCH_BATCHES: comma-separated sizes");
            assert!((1..=4096).contains(&n), "HOOKWALL_BENCH_BATCHES: sizes are 1..=4096");
            if !sizes.contains(&n) {
                sizes.push(n);
            }
        }
    }
    sizes.sort_unstable();
    sizes
}

/// A unique idempotency key per admission across the whole bench run.
fn next_key() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("bench/src/evt_{:012}", NEXT.fetch_add(1, Ordering::Relaxed))
}

const BODY: &[u8] = br#"{"id":"evt_bench","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount_paid":2000,"currency":"usd","customer":"cus_9s6XKzkNRiz8i3","lines":{"data":[{"id":"il_1","amount":2000}]}}}}"#;

fn bench_admit(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let metrics = Arc::new(Metrics {
        reloads: Default::default(),
        cores: Vec::new(),
        ledger: LedgerStats::new(1),
        dispatch: DispatchStats::new(1),
    });
    let ledger = Ledger::open(
        LedgerOptions {
            path: dir.path().join("ledger"),
            sync: true,
            shards_if_new: 1,
            source_ids: vec!["src".to_owned()],
            notify: Arc::new(tokio::sync::Notify::new()),
            retention: None,
        },
        Arc::clone(&metrics),
    )
    .expect("opening the bench ledger");
    let mut group = c.benchmark_group("ledger_admit_sync");
    group.sample_size(10);
    for n in sizes() {
        reset(&metrics);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += admit_burst(&ledger, n);
                }
                total
            });
        });
        let h = metrics.ledger.batch_events.lock().expect("histogram lock");
        if h.is_empty() {
            continue; // filtered out on the command line
        }
        println!(
            "ledger_admit_sync/{n}: mean committed batch {:.1} events over {} commits",
            h.mean(),
            h.len()
        );
    }
    group.finish();
    ledger.shutdown();
}

fn reset(metrics: &Metrics) {
    metrics.ledger.batch_events.lock().expect("histogram lock").reset();
}

/// Hands `n` new admissions to the ledger at once and waits for every decision; returns the
/// time from the first hand-off to the last reply (building them is not timed).
fn admit_burst(ledger: &Ledger, n: usize) -> Duration {
    let (tx, rx) = crossbeam_channel::bounded(n);
    let admissions: Vec<Admission> = (0..n)
        .map(|_| {
            let tx = tx.clone();
            Admission {
                key: next_key(),
                source: 0,
                fingerprint: [7; 32],
                event_type: Some("invoice.paid".to_owned()),
                secret_id: "k1".to_owned(),
                signed_at: Some(1_700_000_000),
                received_at_ms: 1_700_000_000_000,
                content_type: Some(b"application/json".to_vec()),
                body: BODY.to_vec(),
                ordering: None,
                reply: Box::new(move |d| {
                    let _ = tx.send(d);
                }),
            }
        })
        .collect();
    let start = clock::monotonic();
    for a in admissions {
        assert!(ledger.admit(a).is_ok(), "the bench never fills the shard queue");
    }
    for _ in 0..n {
        let d = rx.recv().expect("the writer replies");
        assert_eq!(d, Decision::Accepted, "every bench key is new");
    }
    clock::monotonic().saturating_duration_since(start)
}

fn bench_raw(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    let db = rocksdb::DB::open(&opts, dir.path()).expect("opening the raw bench DB");
    let mut write = rocksdb::WriteOptions::default();
    write.set_sync(true);
    let value = vec![0x5a_u8; 512];
    let mut group = c.benchmark_group("rocksdb_writebatch_sync");
    group.sample_size(10);
    for n in sizes() {
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| {
                let mut batch = rocksdb::WriteBatch::default();
                for _ in 0..n {
                    batch.put(format!("{:>48}", next_key()), &value);
                }
                db.write_opt(batch, &write).expect("raw synced write");
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_admit, bench_raw);
criterion_main!(benches);
