//! Opening the ledger's RocksDB: column families, options, the persisted shard count, and the
//! state a restart recovers from `meta` and `schedule/s` (next seqs, DLQ counters, gauges).
//!
//! Layout (one DB, one WAL, so one synced write commits a whole shard batch):
//! per shard `s`: `claims/{s}` (key → claim), `inbox/{s}` (seq BE → inbox record),
//! `schedule/{s}` (due_ms BE ‖ seq BE → attempts made and ordering place, or empty when
//! written before that value existed; one entry per unsettled event); `inbox/{s}` also
//! holds each event's failed attempts under `seq BE ‖ at_ms BE ‖ attempt BE` (sorting right
//! after its record, so one range scan finds both; a delivery is kept in the claim only);
//! global: `rejected`, `quarantine`, `audit`, `meta`. `meta` keys: `shards` (u64 BE, written
//! once at creation), `seq/{s}` (next seq of shard `s`, u64 BE), `dlq/{s}/{source id}` (DLQ
//! counter of one source kept by shard `s`, u64 BE; per shard so each key has one writer),
//! `exp/{s}/{due_ms BE ‖ kind ‖ seq BE}` (what retention removes when, written and swept by
//! shard `s`'s writer; value: the idempotency key).

use std::collections::HashMap;
use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, IteratorMode, Options,
};

use super::codec::{self, DecodeError};
use super::Error;
use crate::limits::SHARDS_MAX;

/// The RocksDB handle type used by the ledger (single-threaded CF map: CFs are only created
/// while opening, before the handle is shared).
pub type Db = rocksdb::DB;

/// `meta` key of the persisted shard count.
pub const META_SHARDS: &[u8] = b"shards";
/// `meta` key of the ledger's format (u64 BE): what a build must understand to read and write
/// the ledger. A ledger without it was written before the key existed (format 1).
pub const META_FORMAT: &[u8] = b"format";
/// The ledger format this build writes; it reads every format up to it. 2: a first delivery
/// is recorded as a delivered mark in `inbox/s` instead of a rewritten claim
/// (`codec::delivered_mark_key`, ARCHITECTURE.md "Ledger"). Builds from before format 2 do not
/// check the format and misread such a ledger: do not downgrade to them. 3: the events a group
/// commit delivered cleanly share their expiry entries (`codec::ExpiryKind::DeliveredPayloads`,
/// `DeliveredIdentities`), which format-2 builds cannot read; they refuse a format-3 ledger.
pub const LEDGER_FORMAT: u64 = 3;
/// Minimised rejected bodies (R23); global.
pub const CF_REJECTED: &str = "rejected";
/// Conflicting copies (R11).
pub const CF_QUARANTINE: &str = "quarantine";
/// Operator actions (R20); written by the admin API.
pub const CF_AUDIT: &str = "audit";
/// Shard count, seqs, DLQ counters.
pub const CF_META: &str = "meta";
const GLOBAL_CFS: [&str; 4] = [CF_REJECTED, CF_QUARANTINE, CF_AUDIT, CF_META];

/// Background flush + compaction jobs: two cores are shared with ingress and dispatch.
const BACKGROUND_JOBS: i32 = 2;
/// Threads RocksDB starts while the ledger opens and keeps, from C++ code that aborts the
/// process when one cannot be created (an uncaught `std::system_error`): one flush thread
/// (`rocksdb:high`) and one compaction thread (`rocksdb:low`) for [`BACKGROUND_JOBS`] = 2,
/// and the periodic task timer (unnamed). (Its table-opening threads are off:
/// `max_file_opening_threads` = 1.) `serve` checks that it can hold them before opening the ledger.
pub const ROCKSDB_THREADS: usize = 3;
/// Info log files kept.
const LOG_FILES_KEPT: usize = 4;
/// Bloom filter bits per key for `claims/s`: most lookups are for new keys, i.e. misses.
const CLAIMS_BLOOM_BITS: f64 = 10.0;

/// Name of shard `s`'s claims column family.
pub fn cf_claims(s: usize) -> String {
    format!("claims/{s}")
}
/// Name of shard `s`'s inbox column family.
pub fn cf_inbox(s: usize) -> String {
    format!("inbox/{s}")
}
/// Name of shard `s`'s schedule column family.
pub fn cf_schedule(s: usize) -> String {
    format!("schedule/{s}")
}
/// `meta` key prefix of shard `s`'s expiry entries (`exp/{s}/` ‖ due_ms ‖ kind ‖ seq → key, or
/// the list of a group commit's events: `codec::ExpiryKind`; R25). In `meta` rather than a column family of their own: every column family costs the
/// process a file descriptor.
pub fn meta_expiry_prefix(s: usize) -> Vec<u8> {
    format!("exp/{s}/").into_bytes()
}
/// `meta` prefix of the ordering index (R22): `ord/` ‖ group length (u16 BE) ‖ group, where the
/// group is `tenant/source` ‖ `\0` ‖ ordering value. Shared by every shard: entries are unique
/// per event, and each is written and deleted only by the writer owning the event's key.
pub const META_ORDERING: &[u8] = b"ord/";

/// `meta` prefix of one ordering group's entries.
pub fn meta_ordering_group(scope: &str, value: &str) -> Vec<u8> {
    let len = scope.len() + 1 + value.len();
    let mut k = Vec::with_capacity(META_ORDERING.len() + 2 + len + 18);
    k.extend_from_slice(META_ORDERING);
    k.extend_from_slice(
        &u16::try_from(len).expect("scope and ordering value are bounded").to_be_bytes(),
    );
    k.extend_from_slice(scope.as_bytes());
    k.push(0);
    k.extend_from_slice(value.as_bytes());
    k
}

/// `meta` key of one ordered event: its group prefix ‖ stamp (u64 BE) ‖ shard (u16 BE) ‖ seq
/// (u64 BE) → idempotency key. A group's first entry is the event that may be delivered now.
pub fn meta_ordering(scope: &str, value: &str, stamp: u64, shard: usize, seq: u64) -> Vec<u8> {
    let mut k = meta_ordering_group(scope, value);
    k.extend_from_slice(&stamp.to_be_bytes());
    k.extend_from_slice(&u16::try_from(shard).expect("SHARDS_MAX fits u16").to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The (stamp, shard, seq) at the end of an ordering-index key.
pub fn parse_meta_ordering(k: &[u8]) -> Option<(u64, usize, u64)> {
    let tail = k.len().checked_sub(18).map(|at| &k[at..])?;
    let stamp = u64::from_be_bytes(tail[..8].try_into().ok()?);
    let shard = u16::from_be_bytes(tail[8..10].try_into().ok()?);
    let seq = u64::from_be_bytes(tail[10..].try_into().ok()?);
    Some((stamp, usize::from(shard), seq))
}

/// `meta` key of shard `s`'s next seq.
pub fn meta_seq(s: usize) -> Vec<u8> {
    format!("seq/{s}").into_bytes()
}
/// `meta` key of shard `s`'s DLQ counter for `source_id`.
pub fn meta_dlq(s: usize, source_id: &str) -> Vec<u8> {
    format!("dlq/{s}/{source_id}").into_bytes()
}

/// DB-wide options: create what is missing, bounded background work, info logs and memory;
/// `direct_io` for flushes and compactions where the file system supports it.
fn db_options(direct_io: bool) -> Options {
    let mut o = Options::default();
    o.create_if_missing(true);
    // One budget for every column family's memtables: a flush starts when their total would
    // pass it (RocksDB's default is 64 MiB *per* column family, twice over while one
    // flushes — hundreds of MiB with the ledger's column families, for no gain: the hot
    // data, claims being decided and inbox records being forwarded, is a few MiB).
    o.set_db_write_buffer_size(MEMTABLES_BYTES_MAX);
    o.create_missing_column_families(true);
    o.set_max_background_jobs(BACKGROUND_JOBS);
    o.set_keep_log_file_num(LOG_FILES_KEPT);
    // Bounded, so RocksDB's table files cannot take the descriptors ingress counts on
    // (the default, -1, keeps every table file open).
    o.set_max_open_files(MAX_OPEN_FILES);
    // Table files are opened at `open` on the calling thread, not on up to 16 threads RocksDB
    // starts for it (the default): threads RocksDB cannot create abort the process, and
    // `serve` checks room only for the ones it keeps ([`ROCKSDB_THREADS`]).
    o.set_max_file_opening_threads(1);
    // Reuse obsolete WAL files instead of creating new ones: writes then overwrite blocks the
    // file already has, so the fdatasync after each group commit (R14) flushes data only, not
    // the inode's new size as well. On this project's dev VM that was +5..10 % admitted
    // events/s with the destination paused (docs/benchmarks.md). RocksDB keeps recycling only
    // with point-in-time WAL recovery, the default this ledger uses: each recycled record
    // carries its log number, so stale tail bytes of the old file are not replayed.
    o.set_recycle_log_file_num(WAL_FILES_RECYCLED);
    o.set_max_total_wal_size(WAL_BYTES_MAX);
    // An automatic flush (a full memtable, the memtable budget, the WAL budget) takes every
    // column family with data along (RocksDB's atomic flush; a manual `flush_cf` still
    // flushes one), so the WAL file ends for all of them at once: one WAL file per flush of
    // them all, each about as long as the last at a steady rate. RocksDB closes the retired
    // WAL file in the flush job, and a synced write waits while it does (RocksDB holds synced
    // writes while any WAL is being synced); closing a reused file truncates it to what this
    // life wrote. With column families switched one at a time a WAL file lived 10-100 MiB,
    // several per 10 s at half load, and a reused file shrunk by tens of MiB took 20-35 ms to
    // truncate (freeing blocks costs ~0.3 ms per MiB on the dev VM's ext4) with every
    // admission of that group commit waiting: the 22-38 ms commits at half load
    // (`ledger_commit_slow`, other_ms). With atomic flush: about one WAL file per 10 s at
    // 9 000 events/s, closed at ~95 MB in 0.15 ms. docs/benchmarks.md, run 19.
    o.set_atomic_flush(true);
    // Flushes and compactions write their table files with O_DIRECT, not through the page
    // cache. Buffered, a flush's tens of MiB sat dirty until its fsync (or the kernel's
    // writeback) sent them to the disk in one burst, and a group commit's fdatasync (R14)
    // issued behind that burst waited for it: a shard's writer then stood idle for 5-300 ms
    // with every admission in the drain waiting. Written directly, 1 MiB at a time
    // (`writable_file_max_buffer_size`), the disk sees no such burst. Reads for requests
    // still go through the block cache. Off where the file system refuses O_DIRECT (tmpfs before
    // Linux 6.6).
    o.set_use_direct_io_for_flush_and_compaction(direct_io);
    // Compactions run at the lowest CPU priority (nice 19, R17): they share the cores with
    // ingress and the shard writers, and at the default priority the scheduler let one run a
    // whole slice while a writer with admissions waiting stood preempted behind it.
    // Compaction is deferrable; acknowledgments are not (docs/benchmarks.md, run 13).
    // Flushes (the high-priority pool) keep the normal priority: a flush is what frees a
    // memtable, and at nice 19 they fell behind whenever the cores were busy, until RocksDB
    // stopped every write for the memtables waiting on them (5-8 stops per half-load run after
    // a burst, 20-425 ms each, and at saturation a 1 M-event segment 15 % slower with 150 MiB
    // more resident memtables: run 15). The setting is on RocksDB's process-wide default
    // environment.
    match rocksdb::Env::new() {
        Ok(mut env) => {
            env.lower_thread_pool_cpu_priority();
            o.set_env(&env);
        }
        Err(e) => tracing::warn!(
            code = "ledger_background_priority",
            error = %e,
            "RocksDB's environment could not be configured; compactions run at normal priority."
        ),
    }
    o
}

/// Obsolete WAL files kept for reuse (`recycle_log_file_num`); each is at most about the
/// memtable budget in size.
const WAL_FILES_RECYCLED: usize = 4;

/// Bytes of live WAL after which RocksDB flushes (`max_total_wal_size`; with atomic flush,
/// every column family with data), so the oldest WAL file becomes obsolete and is recycled.
/// RocksDB's default (0) means four times the sum of every column family's
/// `write_buffer_size`, 2 GiB here: a column family written rarely (`meta`, `audit`) kept
/// its first WAL file live for that long, and every group commit meanwhile wrote into new
/// files, paying for the inode's size in each fdatasync (R14's cost). On the dev VM this
/// was +12 % forwarded events/s in a 10 s closed loop from a fresh ledger
/// (docs/benchmarks.md, run 12); 32 MiB flushed so often that compaction cost as much.
const WAL_BYTES_MAX: u64 = MEMTABLES_BYTES_MAX as u64;

/// Table files RocksDB keeps open at most (part of `ingress::FDS_RESERVED`).
const MAX_OPEN_FILES: i32 = 512;

/// Total bytes of memtables over all column families (`db_write_buffer_size`).
const MEMTABLES_BYTES_MAX: usize = 128 << 20;

/// Bytes of the one block cache every column family shares (RocksDB's default gives each
/// table factory its own 32 MiB cache).
const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// Per-CF options: the shared block `cache`, bloom filters for claims (point lookups), lz4 for
/// inbox bodies, and fewer compactions of the column families every admission writes.
fn cf_options(name: &str, cache: &Cache) -> Options {
    let mut o = if name.starts_with("inbox/") {
        // Inbox keys only grow, so a flushed inbox file usually moves to the last level
        // untouched, and RocksDB then rewrote each one once just to zero its sequence numbers
        // ("BottommostFiles" compactions): 98 of the 450 MB compactions wrote in one
        // `benches/e2e.sh` run, background writing that (d)'s group commits wait behind
        // (docs/benchmarks.md, runs 20-21). Files older than the delay are still rewritten.
        options_from_string(&format!(
            "bottommost_file_compaction_delay={INBOX_BOTTOMMOST_REWRITE_DELAY_SECS}"
        ))
    } else {
        Options::default()
    };
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    if name.starts_with("claims/") || name == CF_META {
        // Claim keys are hashes, so every level-0 file overlaps all of level 1 and each
        // level-0 compaction rewrites all of it (`meta`'s expiry index is written at the same
        // rate); compacting at eight files instead of RocksDB's four halves those rewrites
        // (docs/benchmarks.md, runs 20-21). Claim lookups probe each level-0 file's bloom
        // filter first.
        o.set_level_zero_file_num_compaction_trigger(LEVEL0_COMPACTION_TRIGGER);
    }
    if name.starts_with("claims/") {
        table.set_bloom_filter(CLAIMS_BLOOM_BITS, false);
        // Every admission looks up a claim that is usually absent: a bloom filter over the
        // memtable's whole keys answers most of those misses without a skiplist search.
        o.set_memtable_prefix_bloom_ratio(CLAIMS_MEMTABLE_BLOOM_RATIO);
        o.set_memtable_whole_key_filtering(true);
    } else if name.starts_with("inbox/") {
        o.set_compression_type(DBCompressionType::Lz4);
    } else if name.starts_with("schedule/") {
        // The schedule is a queue: entries are deleted from its head as events settle, and
        // the dispatcher scans from the head. Compact files dense with tombstones early so
        // scans do not wade through them.
        o.add_compact_on_deletion_collector_factory(
            SCHEDULE_DELETION_WINDOW,
            SCHEDULE_DELETION_TRIGGER,
            0.5,
        );
    }
    o.set_block_based_table_factory(&table);
    // Room for memtables waiting for their flush. With RocksDB's default of two per column
    // family, a memtable that filled while its predecessor's flush was still queued (one flush
    // thread, at nice 19) stopped *every* write of the ledger until that flush finished: on the
    // dev VM 7-8 stops per half-load run after a burst, each holding all admissions 20-425 ms
    // (`ledger_commit_slow` lines with `stall_ms`); with four, none (docs/benchmarks.md, run 15).
    // The extra memtables exist only while flushes are behind; at worst a column family holds
    // four waiting plus the active one (64 MiB each, RocksDB's `write_buffer_size`), measured
    // by `benches/soak.sh`. From three waiting on, RocksDB slows writes before it stops them
    // (`benches/e2e.sh` counts both in its LOG).
    o.set_max_write_buffer_number(IMMUTABLE_MEMTABLES_MAX);
    o
}

/// RocksDB options set from their text form (`name=value;...`), for those the `rocksdb` crate
/// has no setter for; RocksDB's defaults, with a warning, if RocksDB rejects the text. The
/// base is a fresh `Options` on purpose: the returned one keeps alive only what is set on it
/// afterwards (cache, table factory, environment), not what a base had been given.
fn options_from_string(text: &str) -> Options {
    match Options::default().get_options_from_string(text) {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(
                code = "ledger_option_rejected",
                option = text,
                error = %e,
                "RocksDB rejected a ledger option; its default applies."
            );
            Options::default()
        }
    }
}

/// Seconds a last-level inbox file stays before RocksDB may rewrite it only to zero its
/// sequence numbers (`bottommost_file_compaction_delay`): one day.
const INBOX_BOTTOMMOST_REWRITE_DELAY_SECS: u32 = 86_400;

/// Level-0 files of `claims/*` and `meta` that start a compaction
/// (`level0_file_num_compaction_trigger`; RocksDB's default is 4, its write slowdown starts at
/// 20).
const LEVEL0_COMPACTION_TRIGGER: i32 = 8;

/// Immutable memtables (waiting for their flush) a column family may have before RocksDB stops
/// writes (`max_write_buffer_number`; RocksDB 11 compares the immutable ones only).
const IMMUTABLE_MEMTABLES_MAX: i32 = 4;

/// Share of a claims memtable's size given to its whole-key bloom filter (RocksDB's
/// `memtable_prefix_bloom_size_ratio`; 0.02 of the 64 MiB default is about 1.3 MiB per shard).
const CLAIMS_MEMTABLE_BLOOM_RATIO: f64 = 0.02;

/// Sliding window (entries) in which `SCHEDULE_DELETION_TRIGGER` tombstones mark a schedule
/// file for compaction.
const SCHEDULE_DELETION_WINDOW: usize = 1024;
/// Tombstones per window that trigger compaction of a schedule file.
const SCHEDULE_DELETION_TRIGGER: usize = 256;

/// Whether the file system holding the ledger directory `dir` accepts `O_DIRECT` (ext4 and
/// xfs do; tmpfs does from Linux 6.6 on): probed by creating and removing `dir/DIRECT_IO_PROBE`
/// (opened and one aligned block written), after creating `dir` and any missing parents as the
/// `rocksdb` crate's open does (`create_dir_all`). Whatever already has the probe's name (a
/// leftover of a killed start, a symlink) is unlinked first and the file is created with
/// `O_EXCL`, so no link is followed. False, logged with the error, when any step fails;
/// RocksDB then reports a directory it cannot create or write itself.
fn direct_io_supported(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(DIRECT_IO_PROBE);
    let opened = std::fs::create_dir_all(dir)
        .and_then(|()| match std::fs::remove_file(&probe) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_DIRECT)
                .open(&probe)
        })
        .and_then(|mut file| write_one_aligned_block(&mut file));
    match opened {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            true
        }
        Err(e) => {
            tracing::info!(
                code = "ledger_buffered_io",
                path = %probe.display(),
                error = %e,
                "The ledger's directory did not take an O_DIRECT file; flushes and compactions write through the page cache."
            );
            false
        }
    }
}

/// Writes one zeroed block of `DIRECT_IO_BLOCK` bytes from a buffer aligned to its size, as
/// RocksDB's direct writes are: a file system can accept an `O_DIRECT` open and refuse the
/// write itself (`EINVAL`), and every flush would then fail.
fn write_one_aligned_block(file: &mut std::fs::File) -> std::io::Result<()> {
    use std::io::Write;
    #[repr(C, align(4096))]
    struct Block([u8; DIRECT_IO_BLOCK]);
    let block = Box::new(Block([0; DIRECT_IO_BLOCK]));
    file.write_all(&block.0)
}

/// Bytes of the probe's write: a multiple of every logical block size in use (512 and 4096).
const DIRECT_IO_BLOCK: usize = 4096;

/// File name of the `O_DIRECT` probe in the ledger directory (removed at once).
const DIRECT_IO_PROBE: &str = "DIRECT_IO_PROBE";

fn shard_cfs(s: usize) -> [String; 3] {
    [cf_claims(s), cf_inbox(s), cf_schedule(s)]
}

/// Opens (or creates) the DB at `path` and returns it with its shard count: the persisted one
/// when the DB exists (changing it would move keys to other shards and break exactly-once,
/// R10), else `shards_if_new`, which is then persisted with a synced write.
///
/// # Errors
/// [`Error::NotALedger`] for a path that is not (or holds no) ledger or whose directory cannot
/// be created, [`Error::Open`] when RocksDB cannot open or create it, [`Error::Shards`] for a
/// count out of `1..=SHARDS_MAX`, [`Error::Corrupt`] when `meta` holds an unreadable count.
pub fn open(path: &Path, shards_if_new: usize) -> Result<(Db, usize), Error> {
    check_ledger_directory(path)?;
    // Created here, as RocksDB would, so a directory that cannot be made (no permission on a
    // parent, a read-only file system) is reported in plain words, not RocksDB's.
    std::fs::create_dir_all(path).map_err(|e| Error::NotALedger {
        path: path.to_path_buf(),
        reason: format!("its directory cannot be created: {e}"),
    })?;
    let open_err = |source| Error::Open { path: path.to_path_buf(), source };
    // A missing DB has no CF list yet; RocksDB then creates everything.
    let mut names = Db::list_cf(&Options::default(), path).unwrap_or_default();
    for g in GLOBAL_CFS {
        if !names.iter().any(|n| n == g) {
            names.push(g.to_owned());
        }
    }
    let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    let descriptors = names.iter().map(|n| ColumnFamilyDescriptor::new(n, cf_options(n, &cache)));
    let direct_io = direct_io_supported(path);
    let mut db =
        Db::open_cf_descriptors(&db_options(direct_io), path, descriptors).map_err(open_err)?;
    check_format(&db, path)?;
    let shards = shard_count(&db, shards_if_new)?;
    for s in 0..shards {
        for name in shard_cfs(s) {
            if db.cf_handle(&name).is_none() {
                db.create_cf(&name, &cf_options(&name, &cache)).map_err(open_err)?;
            }
        }
    }
    Ok((db, shards))
}

/// Refuses a `path` that is not a directory, and a directory without a ledger (no `CURRENT`)
/// holding any file RocksDB would not have written there: a mistyped `ledger.path` pointing at
/// some other directory must fail the start, not create a new, empty ledger among its files
/// (every event the real ledger holds would then be admitted again). A missing path, an empty
/// directory, and the leftovers of a first start that crashed before `CURRENT` existed are fine.
///
/// # Errors
/// [`Error::NotALedger`] naming what is there.
fn check_ledger_directory(path: &Path) -> Result<(), Error> {
    let refuse = |reason: String| Err(Error::NotALedger { path: path.to_path_buf(), reason });
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        // A file where a parent directory should be: no ledger can ever be made there.
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return refuse("a part of the path before it is a file, not a directory".to_owned());
        }
        // Missing: created at open. Unreadable: reported by the open.
        Err(_) => return Ok(()),
    };
    if !meta.is_dir() {
        return refuse("it is not a directory".to_owned());
    }
    if path.join("CURRENT").exists() {
        return Ok(());
    }
    let Ok(entries) = std::fs::read_dir(path) else { return Ok(()) };
    let foreign = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|name| !written_by_a_ledger(name));
    match foreign {
        Some(name) => refuse(format!(
            "the directory holds no ledger but holds other files (e.g. {name:?}); point \
             ledger.path at the ledger's directory, or at an empty or new one"
        )),
        None => Ok(()),
    }
}

/// Why `path` cannot be a RocksDB ledger directory, if it cannot (the check [`open`] makes
/// first, for `check-config`): not a directory, or a directory of other files.
pub fn path_problem(path: &Path) -> Option<String> {
    match check_ledger_directory(path) {
        Err(Error::NotALedger { reason, .. }) => Some(reason),
        _ => None,
    }
}

/// Whether a file named `name` may be in a ledger directory before its `CURRENT` exists:
/// RocksDB's own files (lock, info log, identity, manifests, options, WAL and table files,
/// temporaries), the `O_DIRECT` probe, and a file system's `lost+found` (a mount point).
fn written_by_a_ledger(name: &str) -> bool {
    matches!(name, "LOCK" | "LOG" | "IDENTITY" | "lost+found" | DIRECT_IO_PROBE)
        || ["LOG.old.", "MANIFEST-", "OPTIONS-"].iter().any(|p| name.starts_with(p))
        || [".log", ".sst", ".dbtmp", ".blob"].iter().any(|s| name.ends_with(s))
}

fn check_shards(shards: usize) -> Result<usize, Error> {
    if (1..=SHARDS_MAX).contains(&shards) {
        Ok(shards)
    } else {
        Err(Error::Shards { shards, max: SHARDS_MAX })
    }
}

/// Reads the persisted shard count, or persists `shards_if_new` on a new DB.
fn shard_count(db: &Db, shards_if_new: usize) -> Result<usize, Error> {
    let meta = cf(db, CF_META);
    match db.get_cf(meta, META_SHARDS)? {
        Some(v) => {
            let stored = codec::parse_u64(&v).map_err(|e| corrupt(CF_META, e))?;
            let shards = check_shards(usize::try_from(stored).unwrap_or(usize::MAX))?;
            if shards != shards_if_new {
                tracing::warn!(
                    code = "ledger_shards_kept",
                    persisted = shards,
                    configured = shards_if_new,
                    "The ledger keeps its persisted shard count; the configured one is ignored \
                     because changing it would move keys to other shards."
                );
            }
            Ok(shards)
        }
        None => {
            let shards = check_shards(shards_if_new)?;
            let mut opts = rocksdb::WriteOptions::default();
            opts.set_sync(true);
            let mut batch = rocksdb::WriteBatch::default();
            batch.put_cf(meta, META_SHARDS, (shards as u64).to_be_bytes());
            db.write_opt(batch, &opts)?;
            tracing::info!(code = "ledger_created", shards, "Created a new ledger.");
            Ok(shards)
        }
    }
}

/// Refuses a ledger written in a format newer than [`LEDGER_FORMAT`] (by a later build, which
/// this one would misread), and records this build's format in a new or older ledger.
///
/// # Errors
/// [`Error::NotALedger`] for a newer format, [`Error::Corrupt`] for an unreadable one,
/// [`Error::Storage`] when the format cannot be read or written.
fn check_format(db: &Db, path: &Path) -> Result<(), Error> {
    let meta = cf(db, CF_META);
    let stored = match db.get_cf(meta, META_FORMAT)? {
        Some(v) => codec::parse_u64(&v).map_err(|e| corrupt(CF_META, e))?,
        None => 1,
    };
    if stored > LEDGER_FORMAT {
        return Err(Error::NotALedger {
            path: path.to_path_buf(),
            reason: format!(
                "it was written by a newer hookwall (ledger format {stored}; this build reads \
                 formats up to {LEDGER_FORMAT}): run that version or a later one"
            ),
        });
    }
    if stored < LEDGER_FORMAT {
        let mut opts = rocksdb::WriteOptions::default();
        opts.set_sync(true);
        let mut batch = rocksdb::WriteBatch::default();
        batch.put_cf(meta, META_FORMAT, LEDGER_FORMAT.to_be_bytes());
        db.write_opt(batch, &opts)?;
    }
    Ok(())
}

/// The handle of a column family the ledger created at open.
///
/// # Panics
/// When `name` was not opened: every ledger CF is created by [`open`] (broken invariant).
pub fn cf<'a>(db: &'a Db, name: &str) -> &'a rocksdb::ColumnFamily {
    db.cf_handle(name).unwrap_or_else(|| panic!("column family {name} is created at open"))
}

/// A corrupt-record error for `cf`.
pub fn corrupt(cf: &str, reason: DecodeError) -> Error {
    Error::Corrupt { cf: cf.to_owned(), reason }
}

/// Shard `s`'s next seq (0 on a new shard).
///
/// # Errors
/// Read failure or a corrupt counter.
pub fn load_next_seq(db: &Db, s: usize) -> Result<u64, Error> {
    match db.get_cf(cf(db, CF_META), meta_seq(s))? {
        Some(v) => codec::parse_u64(&v).map_err(|e| corrupt(CF_META, e)),
        None => Ok(0),
    }
}

/// The highest admission stamp in the ordering index (0 when empty): new stamps start above it,
/// so admission order survives a restart even if the wall clock stepped back (R22).
///
/// # Errors
/// Read failure or a malformed index key.
pub fn load_max_order_stamp(db: &Db) -> Result<u64, Error> {
    let mut max = 0;
    let mode = IteratorMode::From(META_ORDERING, rocksdb::Direction::Forward);
    for entry in db.iterator_cf(cf(db, CF_META), mode) {
        let (k, _) = entry?;
        if !k.starts_with(META_ORDERING) {
            break;
        }
        let (stamp, _, _) = parse_meta_ordering(&k)
            .ok_or_else(|| corrupt(CF_META, DecodeError::KeyLength(k.len())))?;
        max = max.max(stamp);
    }
    Ok(max)
}

/// Shard `s`'s DLQ counters, by source index (only configured source ids).
///
/// # Errors
/// Read failure or a corrupt counter.
pub fn load_dlq(db: &Db, s: usize, source_ids: &[String]) -> Result<HashMap<u32, u64>, Error> {
    let mut out = HashMap::new();
    for (i, id) in source_ids.iter().enumerate() {
        if let Some(v) = db.get_cf(cf(db, CF_META), meta_dlq(s, id))? {
            let n = codec::parse_u64(&v).map_err(|e| corrupt(CF_META, e))?;
            out.insert(u32::try_from(i).expect("source count is bounded by config"), n);
        }
    }
    Ok(out)
}

/// Unsettled events of shard `s` per source index: one per schedule entry, the source read
/// from its inbox record (the `inbox_pending` gauge after a restart, R26).
///
/// # Errors
/// Read failure, a corrupt key or record, or a schedule entry without its inbox record.
pub fn count_pending(db: &Db, s: usize) -> Result<HashMap<u32, i64>, Error> {
    let mut out = HashMap::new();
    let (schedule, inbox) = (cf_schedule(s), cf_inbox(s));
    for entry in db.iterator_cf(cf(db, &schedule), IteratorMode::Start) {
        let (k, _) = entry?;
        let (_, seq) = codec::parse_schedule_key(&k).map_err(|e| corrupt(&schedule, e))?;
        let Some(v) = db.get_pinned_cf(cf(db, &inbox), codec::seq_key(seq))? else {
            return Err(corrupt(&inbox, DecodeError::Short("inbox record of a schedule entry")));
        };
        let (_, source) = codec::decode_inbox_head(&v).map_err(|e| corrupt(&inbox, e))?;
        *out.entry(source).or_insert(0) += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! WAL recycling under a crash, in a real child process (the unit-test binary re-run on one
    //! test with `HOOKWALL_WAL_CHILD_DIR` set) killed with SIGKILL.

    use super::*;

    /// Keys written in each phase of the child.
    const KEYS: usize = 2000;
    /// Set in the child's environment: the DB directory it writes and then dies in.
    const CHILD_DIR: &str = "HOOKWALL_WAL_CHILD_DIR";

    fn key(i: usize) -> Vec<u8> {
        format!("wal-test/{i:05}").into_bytes()
    }

    /// The child half of `a_crash_on_a_recycled_wal_restores_exactly_what_was_written`, which
    /// runs it (ignored otherwise: it kills its own process) with `HOOKWALL_WAL_CHILD_DIR`. Writes
    /// phase A (long values), flushes (its WAL becomes obsolete and is kept for reuse), writes
    /// phase B over the same keys, flushes again (the next WAL is the reused file of phase A),
    /// writes a few phase C keys with synced writes, then SIGKILLs itself: the live WAL is a
    /// reused file whose tail still holds phase A's records.
    #[test]
    #[ignore = "a child process of a_crash_on_a_recycled_wal_restores_exactly_what_was_written"]
    fn child_writes_into_a_recycled_wal_then_dies() {
        let dir = std::env::var_os(CHILD_DIR).expect("run by its parent test, which sets the dir");
        let (db, _) = open(Path::new(&dir), 1).expect("child opens the DB");
        let meta = cf(&db, CF_META);
        let mut synced = rocksdb::WriteOptions::default();
        synced.set_sync(true);
        let long = vec![b'a'; 200];
        for i in 0..KEYS {
            db.put_cf_opt(meta, key(i), &long, &synced).expect("phase A put");
        }
        db.flush_cf(meta).expect("flush after phase A");
        for i in 0..KEYS {
            db.put_cf_opt(meta, key(i), b"b", &synced).expect("phase B put");
        }
        db.flush_cf(meta).expect("flush after phase B");
        for j in 0..10 {
            db.put_cf_opt(meta, format!("wal-test/c{j}"), b"c", &synced).expect("phase C put");
        }
        // SAFETY: kill(2) on this process; nothing after it runs.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!("SIGKILL returned");
    }

    /// Claim keys the child of `a_crash_during_an_automatic_flush_loses_nothing_synced` writes
    /// before it fills the inbox.
    const CLAIMS_BEFORE: u8 = 100;

    /// The child half of `a_crash_during_an_automatic_flush_loses_nothing_synced` (ignored
    /// otherwise: it kills its own process). With synced writes: a few claims and a `meta`
    /// key, then 1 MiB inbox records until the inbox's memtable fills and RocksDB switches it
    /// (an automatic flush of every column family with data starts, and the WAL file ends);
    /// once that flush is done (the retired WAL file is now kept for reuse), records again until
    /// the next switch, whose new WAL file is that reused one. Then one more key in each of the
    /// three column families — `meta`'s holds the number of inbox records — and SIGKILL while
    /// the second flush may still run.
    #[test]
    #[ignore = "a child process of a_crash_during_an_automatic_flush_loses_nothing_synced"]
    fn child_dies_while_an_automatic_flush_runs() {
        let dir = std::env::var_os(CHILD_DIR).expect("run by its parent test, which sets the dir");
        let (db, _) = open(Path::new(&dir), 1).expect("child opens the DB");
        let (claims, inbox, meta) =
            (cf(&db, &cf_claims(0)), cf(&db, &cf_inbox(0)), cf(&db, CF_META));
        let mut synced = rocksdb::WriteOptions::default();
        synced.set_sync(true);
        for i in 0..CLAIMS_BEFORE {
            db.put_cf_opt(claims, [b'c', i], [i; 64], &synced).expect("claim put");
        }
        db.put_cf_opt(meta, b"crash/before", b"m", &synced).expect("meta put");
        let int = |name| db.property_int_value_cf(inbox, name).expect("reads").expect("exists");
        let mut seq = 0u64;
        for switch in 1..=2 {
            // A switch shows as an immutable memtable, or as one more table file if its flush
            // already finished.
            while int("rocksdb.num-immutable-mem-table") == 0
                && int("rocksdb.num-files-at-level0") < switch
            {
                assert!(seq < 250, "the inbox's memtable switched {switch} times in {seq} MiB");
                db.put_cf_opt(inbox, codec::seq_key(seq), vec![seq as u8; 1 << 20], &synced)
                    .expect("inbox put");
                seq += 1;
            }
            if switch == 1 {
                wait_until("the first flush ends", || int("rocksdb.num-immutable-mem-table") == 0);
            }
        }
        db.put_cf_opt(claims, b"c-after", b"a", &synced).expect("claim put after");
        db.put_cf_opt(inbox, codec::seq_key(1 << 20), b"after", &synced).expect("inbox put after");
        db.put_cf_opt(meta, b"crash/after", seq.to_be_bytes(), &synced).expect("meta put after");
        // SAFETY: kill(2) on this process; nothing after it runs.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!("SIGKILL returned");
    }

    /// Runs the ignored child test `name` of this module in a child process of the test binary
    /// with `CHILD_DIR` = `dir`, and waits for it (bounded: 120 s, then it is killed and the
    /// test fails).
    fn run_child(name: &str, dir: &Path) -> std::process::ExitStatus {
        let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", &format!("ledger::store::tests::{name}")])
            .args(["--ignored", "--test-threads", "1", "--nocapture"])
            .env(CHILD_DIR, dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("child starts");
        let deadline = crate::clock::monotonic() + std::time::Duration::from_secs(120);
        loop {
            if let Some(status) = child.try_wait().expect("child status") {
                return status;
            }
            if crate::clock::monotonic() >= deadline {
                let _ = child.kill();
                panic!("child {name} still ran after 120 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Waits until `done()` holds, polling every 5 ms; panics with `what` after 60 s.
    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = crate::clock::monotonic() + std::time::Duration::from_secs(60);
        while !done() {
            assert!(crate::clock::monotonic() < deadline, "{what} within 60 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// The WAL files in `dir`: (file number, length in bytes).
    fn wal_files(dir: &Path) -> Vec<(u64, u64)> {
        std::fs::read_dir(dir)
            .expect("ledger dir lists")
            .map(|e| e.expect("dir entry"))
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let number = name.strip_suffix(".log")?.parse::<u64>().ok()?;
                Some((number, e.metadata().expect("WAL file metadata").len()))
            })
            .collect()
    }

    /// Bytes of the WAL files RocksDB still needs (numbers from `min-log-number-to-keep` on;
    /// files kept for reuse have lower numbers).
    fn live_wal_bytes(db: &Db, dir: &Path) -> u64 {
        let keep = db
            .property_int_value("rocksdb.min-log-number-to-keep")
            .expect("property reads")
            .expect("property exists");
        wal_files(dir).into_iter().filter(|&(number, _)| number >= keep).map(|(_, len)| len).sum()
    }

    /// `max_total_wal_size`: with the writer's pattern (per drain a claim, an inbox record,
    /// a schedule entry and the shard's next seq in `meta`), the WAL RocksDB keeps live stays
    /// near [`WAL_BYTES_MAX`]: column families whose memtables RocksDB's write-buffer
    /// manager flushes later than others do not keep old WAL files from being recycled.
    #[test]
    fn live_wal_stays_within_its_budget() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (db, _) = open(dir.path(), 1).expect("ledger opens");
        let (claims, inbox, schedule, meta) = (
            cf(&db, &cf_claims(0)),
            cf(&db, &cf_inbox(0)),
            cf(&db, &cf_schedule(0)),
            cf(&db, CF_META),
        );
        let body = vec![7u8; 16 << 10];
        let drains = 8 * WAL_BYTES_MAX / body.len() as u64;
        let mut most = 0;
        for seq in 0..drains {
            let mut batch = rocksdb::WriteBatch::default();
            batch.put_cf(claims, codec::fnv1a64(&seq.to_le_bytes()).to_be_bytes(), [1u8; 64]);
            batch.put_cf(inbox, codec::seq_key(seq), &body);
            batch.put_cf(schedule, codec::schedule_key(seq / 64, seq), []);
            batch.put_cf(meta, meta_seq(0), (seq + 1).to_be_bytes());
            db.write(batch).expect("drain writes");
            if seq % 256 == 0 {
                // Writes here outrun any disk; the server's are far slower than its flushes.
                // Wait (bounded) for the flushes in progress, as a slower writer would.
                let int = |name| db.property_int_value(name).expect("reads").expect("exists");
                let pending = |c| db.property_int_value_cf(c, "rocksdb.mem-table-flush-pending");
                wait_until("flushes finish", || {
                    int("rocksdb.num-running-flushes") == 0
                        && [claims, inbox, schedule, meta]
                            .into_iter()
                            .all(|c| pending(c).expect("reads").expect("exists") == 0)
                });
                most = most.max(live_wal_bytes(&db, dir.path()));
            }
        }
        assert!(
            most <= 2 * WAL_BYTES_MAX,
            "live WAL reached {} MiB (budget {} MiB)",
            most >> 20,
            WAL_BYTES_MAX >> 20
        );
    }

    /// Atomic flush: when one column family's memtable fills (here `inbox/0`, past RocksDB's
    /// 64 MiB `write_buffer_size`, before the 128 MiB memtable and WAL budgets trigger), the
    /// flush takes every column family with data along, so the WAL file ends there for all of
    /// them (a reused WAL file is then not truncated by tens of MiB at its close while synced
    /// writes wait: run 19). Without it `claims/0` and `meta` keep their few keys in their
    /// memtables. What this buys, the WAL files' lengths, is measured in run 19, not here.
    #[test]
    fn a_memtable_that_fills_flushes_every_column_family() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (db, _) = open(dir.path(), 1).expect("ledger opens");
        let (claims, inbox, meta) =
            (cf(&db, &cf_claims(0)), cf(&db, &cf_inbox(0)), cf(&db, CF_META));
        let int_cf = |c, name| db.property_int_value_cf(c, name).expect("reads").expect("exists");
        for i in 0..10u64 {
            db.put_cf(claims, i.to_be_bytes(), [1u8; 64]).expect("claim writes");
        }
        db.put_cf(meta, meta_seq(0), 10u64.to_be_bytes()).expect("meta writes");
        let body = vec![9u8; 1 << 20];
        let mut seq = 0;
        // Until the inbox's memtable has been switched and flushed (bounded: 4x its size).
        while int_cf(inbox, "rocksdb.num-files-at-level0") == 0 {
            assert!(seq < 256, "the inbox never flushed after {seq} MiB");
            db.put_cf(inbox, codec::seq_key(seq), &body).expect("inbox writes");
            seq += 1;
            if int_cf(inbox, "rocksdb.num-immutable-mem-table") > 0 {
                wait_until("the inbox flush finishes", || {
                    int_cf(inbox, "rocksdb.num-files-at-level0") > 0
                });
            }
        }
        for (name, c) in [("claims/0", claims), ("meta", meta)] {
            assert_eq!(
                int_cf(c, "rocksdb.num-entries-active-mem-table"),
                0,
                "{name} kept its keys in its memtable when the inbox flushed"
            );
            assert!(int_cf(c, "rocksdb.num-files-at-level0") > 0, "{name} has no table file");
        }
    }

    /// The nice value of thread `tid` of this process (`/proc/self/task/TID/stat`, field 19).
    fn nice_of(tid: &str) -> Option<i64> {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        let after_comm = &stat[stat.rfind(')')? + 2..];
        after_comm.split(' ').nth(16)?.parse().ok()
    }

    /// The names and nice values of this process's RocksDB background threads.
    fn background_threads() -> Vec<(String, Option<i64>)> {
        let tasks = std::fs::read_dir("/proc/self/task").expect("proc is mounted");
        tasks
            .filter_map(|t| {
                let tid = t.ok()?.file_name().into_string().ok()?;
                let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
                let comm = comm.trim();
                comm.starts_with("rocksdb:").then(|| (comm.to_owned(), nice_of(&tid)))
            })
            .collect()
    }

    /// Compactions run at nice 19, below ingress and the shard writers (R17: the acknowledgment
    /// comes first); flushes, which free the memtables every write needs, at the normal
    /// priority. RocksDB's threads take the priority when they next pick a job, so the test
    /// gives each pool one (a flush for `high`, a manual compaction for `low`) and waits,
    /// bounded, for every background thread to show its own.
    #[test]
    fn compactions_run_at_the_lowest_cpu_priority_and_flushes_at_the_normal_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (db, _) = open(dir.path(), 1).expect("opens");
        flush_rounds_then_compact(&db, 2);
        // SAFETY: getpriority has no preconditions; errno is not consulted (nice 0..19 here).
        let normal = i64::from(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) });
        let expected = |name: &str| if name == "rocksdb:high" { normal } else { 19 };
        let deadline = crate::clock::monotonic() + std::time::Duration::from_secs(10);
        loop {
            let threads = background_threads();
            let pools = ["rocksdb:high", "rocksdb:low"];
            let all_present = pools.iter().all(|p| threads.iter().any(|(n, _)| n == p));
            if all_present && threads.iter().all(|(n, nice)| *nice == Some(expected(n))) {
                break;
            }
            assert!(
                crate::clock::monotonic() < deadline,
                "background threads (name, nice): {threads:?}; expected rocksdb:high at {normal}, rocksdb:low at 19"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Every column family may have `IMMUTABLE_MEMTABLES_MAX` memtables waiting, so one whose flush is
    /// queued behind another's keeps taking writes instead of stopping them all (RocksDB's
    /// default of 2 did: run 15). Read back from the OPTIONS file RocksDB wrote at open.
    #[test]
    fn every_column_family_has_room_for_memtables_waiting_on_a_flush() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (db, _) = open(dir.path(), 2).expect("opens");
        drop(db);
        let families = cf_options_written(dir.path());
        for (name, options) in &families {
            assert!(
                options
                    .iter()
                    .any(|l| *l == format!("max_write_buffer_number={IMMUTABLE_MEMTABLES_MAX}")),
                "column family {name} keeps RocksDB's default max_write_buffer_number"
            );
        }
        assert!(families.len() >= 10, "found {} ledger column families", families.len());
    }

    /// The ledger's column families (RocksDB's own `default` left out) with their options,
    /// one `name=value` line each, from the newest OPTIONS file RocksDB wrote in `dir`.
    fn cf_options_written(dir: &Path) -> Vec<(String, Vec<String>)> {
        let options = std::fs::read_dir(dir)
            .expect("lists the ledger")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("OPTIONS-")))
            .max()
            .expect("RocksDB wrote an OPTIONS file");
        let text = std::fs::read_to_string(&options).expect("reads the OPTIONS file");
        text.split("[CFOptions \"")
            .skip(1)
            .map(|section| {
                let name = section.split('"').next().unwrap_or_default().to_owned();
                let body = section.split("[TableOptions").next().unwrap_or_default();
                (name, body.lines().map(|l| l.trim().to_owned()).collect())
            })
            .filter(|(name, _)| name != "default")
            .collect()
    }

    /// A last-level inbox file is not rewritten only to zero its sequence numbers until it is
    /// a day old (the "BottommostFiles" compactions of run 20); every other column family keeps
    /// RocksDB's default. Read back from the OPTIONS file: the rewrite itself needs a released
    /// snapshot and RocksDB's timing to show.
    #[test]
    fn inbox_files_wait_a_day_before_a_rewrite_that_only_zeroes_sequence_numbers() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (db, _) = open(dir.path(), 2).expect("opens");
        drop(db);
        let families = cf_options_written(dir.path());
        for (name, options) in &families {
            let delay = options
                .iter()
                .find_map(|l| l.strip_prefix("bottommost_file_compaction_delay="))
                .unwrap_or_else(|| panic!("{name}: no bottommost_file_compaction_delay"));
            let expected = if name.starts_with("inbox/") { "86400" } else { "0" };
            assert_eq!(delay, expected, "{name}'s bottommost_file_compaction_delay");
        }
        let inboxes = families.iter().filter(|(n, _)| n.starts_with("inbox/")).count();
        assert_eq!(inboxes, 2, "both shards' inbox column families");
    }

    /// `claims/*` and `meta` compact level 0 at `LEVEL0_COMPACTION_TRIGGER` files, not
    /// RocksDB's four: seven flushed files (overlapping key ranges, as random claim keys
    /// always are) wait with no compaction pending or running; the eighth starts one, which
    /// merges level 0 down.
    #[test]
    fn claims_and_meta_compact_level0_at_eight_files_not_four() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (db, _) = open(dir.path(), 1).expect("opens");
        let int_cf = |c, name| db.property_int_value_cf(c, name).expect("reads").expect("exists");
        let int = |name| db.property_int_value(name).expect("reads").expect("exists");
        for name in [cf_claims(0), CF_META.to_owned()] {
            let c = cf(&db, &name);
            let flush_one_file = |round: u8| {
                for i in 0..64u32 {
                    db.put_cf(c, format!("k/{i:04}"), [round; 32]).expect("writes");
                }
                db.flush_cf(c).expect("flushes");
            };
            let files = || int_cf(c, "rocksdb.num-files-at-level0");
            let below = LEVEL0_COMPACTION_TRIGGER as u8 - 1;
            for round in 0..below {
                flush_one_file(round);
            }
            assert_eq!(files(), u64::from(below), "{name}: level-0 files after {below} flushes");
            assert_eq!(int_cf(c, "rocksdb.compaction-pending"), 0, "{name}: compaction pending");
            assert_eq!(int("rocksdb.num-running-compactions"), 0, "{name}: compaction running");
            flush_one_file(below);
            wait_until(&format!("{name}'s level 0 compacts at the trigger"), || files() == 0);
        }
    }

    /// Gives both background pools work: `rounds` times, 500 keys of 300 bytes (the value is
    /// the round number) in `meta` and a flush (the `high` pool), then a manual compaction of
    /// `meta` (the `low` pool).
    fn flush_rounds_then_compact(db: &Db, rounds: u8) {
        let meta = cf(db, CF_META);
        for round in 0..rounds {
            for i in 0..500u32 {
                db.put_cf(meta, format!("bg/{i}"), [round; 300]).expect("writes");
            }
            db.flush_cf(meta).expect("flushes");
        }
        db.compact_range_cf(meta, None::<&[u8]>, None::<&[u8]>);
    }

    /// The file system type (`statfs` magic) of `dir`.
    fn fs_magic(dir: &Path) -> i64 {
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL");
        // SAFETY: statfs writes into a zeroed struct we own; `c` is a valid C string.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statfs(c.as_ptr(), &raw mut st) }, 0, "statfs {dir:?}");
        st.f_type
    }

    /// Opens a ledger in `dir`, writes, flushes and compacts, reopens and reads everything
    /// back; returns the `use_direct_io_for_flush_and_compaction` value in RocksDB's LOG.
    fn round_trip_with_flushes(dir: &Path) -> String {
        flush_rounds_then_compact(&open(dir, 1).expect("opens").0, 3);
        let (db, _) = open(dir, 1).expect("reopens");
        for i in 0..500u32 {
            let v = db.get_cf(cf(&db, CF_META), format!("bg/{i}")).expect("reads");
            assert_eq!(v.as_deref(), Some(&[2u8; 300][..]), "key {i}");
        }
        assert!(!dir.join(DIRECT_IO_PROBE).exists(), "the O_DIRECT probe file was left behind");
        let log = std::fs::read_to_string(dir.join("LOG")).expect("RocksDB info log");
        let line = log
            .lines()
            .find(|l| l.contains("Options.use_direct_io_for_flush_and_compaction:"))
            .expect("the option is logged");
        line.rsplit(' ').next().expect("a value").to_owned()
    }

    /// On ext4 and xfs, flushes and compactions write with O_DIRECT (no dirty-page burst for a
    /// group commit's fdatasync to queue behind, R14), and the ledger round-trips through them.
    #[test]
    fn flushes_and_compactions_write_direct_on_ext4_and_xfs() {
        const EXT4: i64 = 0xEF53;
        const XFS: i64 = 0x5846_5342;
        // The crate directory, not /tmp: a developer's /tmp may be tmpfs.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).expect("temp dir");
        let magic = fs_magic(dir.path());
        assert!(
            magic == EXT4 || magic == XFS,
            "this test needs the checkout on ext4 or xfs (statfs type {magic:#x})"
        );
        assert_eq!(round_trip_with_flushes(dir.path()), "1");
    }

    /// A ledger on tmpfs opens, flushes and compacts with what the probe found there (kernels
    /// before 6.6 refuse O_DIRECT on tmpfs; later ones accept it).
    #[test]
    fn a_ledger_on_tmpfs_uses_what_the_probe_found() {
        const TMPFS: i64 = 0x0102_1994;
        let dir = tempfile::tempdir_in("/dev/shm").expect("temp dir in /dev/shm");
        assert_eq!(fs_magic(dir.path()), TMPFS, "/dev/shm is not tmpfs here");
        let expected = if direct_io_supported(dir.path()) { "1" } else { "0" };
        assert_eq!(round_trip_with_flushes(dir.path()), expected);
    }

    /// Where the probe cannot create its file, the ledger does not ask for O_DIRECT; a path
    /// that is a regular file is refused before the probe or RocksDB run, in plain words (it
    /// once gave a misleading probe line and RocksDB's debug text).
    #[test]
    fn a_failed_probe_means_buffered_io_and_a_file_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("not-a-directory");
        std::fs::write(&file, b"x").expect("writes");
        assert!(!direct_io_supported(&file));
        let error = open(&file, 1).expect_err("refused");
        assert!(matches!(error, Error::NotALedger { .. }), "{error:?}");
        assert!(error.to_string().ends_with("it is not a directory"), "{error}");
    }

    /// The ledger's format (`META_FORMAT`): a new ledger and one from before the key existed
    /// are given this build's format; one written in a newer format is refused in plain
    /// words, untouched.
    #[test]
    fn a_ledger_in_a_newer_format_is_refused_and_an_older_one_upgraded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let format = |db: &Db| db.get_cf(cf(db, CF_META), META_FORMAT).expect("reads");
        let (db, _) = open(dir.path(), 1).expect("opens");
        assert_eq!(format(&db), Some(LEDGER_FORMAT.to_be_bytes().to_vec()), "a new ledger");
        db.delete_cf(cf(&db, CF_META), META_FORMAT).expect("deletes");
        drop(db);
        let (db, _) = open(dir.path(), 1).expect("an older ledger opens");
        assert_eq!(format(&db), Some(LEDGER_FORMAT.to_be_bytes().to_vec()), "upgraded");
        let newer = (LEDGER_FORMAT + 1).to_be_bytes();
        db.put_cf(cf(&db, CF_META), META_FORMAT, newer).expect("writes");
        drop(db);
        let error = open(dir.path(), 1).expect_err("a newer ledger is refused");
        assert!(matches!(error, Error::NotALedger { .. }), "{error:?}");
        let text = error.to_string();
        let said = format!(
            "written by a newer hookwall (ledger format {}; this build reads formats up to {}): \
             run that version or a later one",
            LEDGER_FORMAT + 1,
            LEDGER_FORMAT
        );
        assert!(text.contains(&said), "{text}");
        let names = Db::list_cf(&Options::default(), dir.path()).expect("lists");
        let db = Db::open_cf_for_read_only(&Options::default(), dir.path(), names, false)
            .expect("opens read-only");
        assert_eq!(format(&db), Some(newer.to_vec()), "left as it was");
    }

    /// A directory that holds no ledger but other files is refused and left as it was (an
    /// audit's mistyped path had a new, empty ledger created among them); an empty directory,
    /// a missing one, and the leftovers of a first start killed before `CURRENT` existed open.
    #[test]
    fn a_directory_of_other_files_is_not_made_a_ledger() {
        let dir = tempfile::tempdir().expect("temp dir");
        let other = dir.path().join("other");
        std::fs::create_dir(&other).expect("creates");
        std::fs::write(other.join("notes.txt"), b"mine").expect("writes");
        let error = open(&other, 1).expect_err("refused");
        assert!(matches!(error, Error::NotALedger { .. }), "{error:?}");
        assert!(error.to_string().contains("\"notes.txt\""), "{error}");
        let names: Vec<_> = std::fs::read_dir(&other)
            .expect("lists")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["notes.txt"], "nothing written beside it");

        let leftovers = dir.path().join("leftovers");
        std::fs::create_dir(&leftovers).expect("creates");
        for name in ["LOCK", "LOG", "LOG.old.1700000000000000", "IDENTITY", "lost+found"] {
            std::fs::write(leftovers.join(name), b"").expect("writes");
        }
        let (db, shards) = open(&leftovers, 1).expect("a first start's leftovers open");
        assert_eq!(shards, 1);
        drop(db);
        let (db, _) = open(&leftovers, 1).expect("reopens");
        drop(db);
        assert!(open(&dir.path().join("new/ledger"), 1).is_ok(), "a missing path is created");
    }

    /// A ledger path whose parents are missing is created whole, as the `rocksdb` crate's open
    /// does (`create_dir_all`), and probed there: a first start in a new directory tree on
    /// ext4 or xfs writes direct too (the probe once gave up on the missing parent, and the
    /// whole run wrote through the page cache without a word).
    #[test]
    fn a_ledger_under_missing_parents_is_probed_where_it_is_created() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).expect("temp dir");
        let nested = dir.path().join("missing/parents/ledger");
        assert!(direct_io_supported(&nested), "statfs type {:#x}", fs_magic(dir.path()));
        assert!(nested.is_dir());
        assert_eq!(round_trip_with_flushes(&nested), "1");
    }

    /// Whatever already has the probe's name is removed, never followed: a symlink there to a
    /// file elsewhere leaves that file as it was (the probe's `O_TRUNC` once emptied it).
    #[test]
    fn a_symlink_with_the_probes_name_is_removed_not_followed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = dir.path().join("ledger");
        std::fs::create_dir(&ledger).expect("creates");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, b"not the ledger's").expect("writes");
        std::os::unix::fs::symlink(&elsewhere, ledger.join(DIRECT_IO_PROBE)).expect("links");
        let _ = direct_io_supported(&ledger);
        assert_eq!(std::fs::read(&elsewhere).expect("reads"), b"not the ledger's");
        assert!(
            ledger.join(DIRECT_IO_PROBE).symlink_metadata().is_err(),
            "probe entry left behind"
        );
    }

    /// R14 with `recycle_log_file_num`: a process killed while writing into a reused WAL file
    /// recovers every synced write and none of the file's previous contents (stale phase A
    /// values would come back if the old tail were replayed).
    #[test]
    fn a_crash_on_a_recycled_wal_restores_exactly_what_was_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let status = run_child("child_writes_into_a_recycled_wal_then_dies", dir.path());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "child ended with {status:?}");
        let log = std::fs::read_to_string(dir.path().join("LOG")).expect("RocksDB info log");
        assert!(log.contains("reusing log"), "the child's last WAL was not a recycled file");

        let (db, _) = open(dir.path(), 1).expect("DB reopens after the crash");
        let meta = cf(&db, CF_META);
        for i in 0..KEYS {
            let v = db.get_cf(meta, key(i)).expect("read").expect("phase B key survives");
            assert_eq!(v, b"b", "key {i} came back with a stale value");
        }
        for j in 0..10 {
            let v = db.get_cf(meta, format!("wal-test/c{j}")).expect("read");
            assert_eq!(v.as_deref(), Some(&b"c"[..]), "synced phase C key {j} lost");
        }
    }

    /// A SIGKILL right after an automatic flush started (the inbox's memtable filled: with
    /// atomic flush every column family with data is flushed and the WAL file ends there), the
    /// new WAL file being a reused one, loses nothing that was written with a synced write,
    /// before or after either switch, in any column family: every inbox record comes back,
    /// as many as the child wrote, each with its own bytes.
    #[test]
    fn a_crash_during_an_automatic_flush_loses_nothing_synced() {
        let dir = tempfile::tempdir().expect("temp dir");
        let status = run_child("child_dies_while_an_automatic_flush_runs", dir.path());
        // Only a child that saw both switches gets to SIGKILL itself (it panics otherwise).
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "child ended with {status:?}");
        // The live WAL file (the highest number) was reused: it keeps the length of its first
        // life (~64 MiB) while this life wrote a few records at its head.
        let newest_wal = wal_files(dir.path()).into_iter().max().expect("a WAL file");
        assert!(newest_wal.1 >= 32 << 20, "the live WAL {newest_wal:?} is not a reused file");

        let (db, _) = open(dir.path(), 1).expect("DB reopens after the crash");
        let (claims, inbox, meta) =
            (cf(&db, &cf_claims(0)), cf(&db, &cf_inbox(0)), cf(&db, CF_META));
        for i in 0..CLAIMS_BEFORE {
            let v = db.get_cf(claims, [b'c', i]).expect("read").expect("claim before the flush");
            assert_eq!(v, [i; 64], "claim {i}");
        }
        let read = |c, k: &[u8]| db.get_cf(c, k).expect("read");
        assert_eq!(read(meta, b"crash/before").as_deref(), Some(&b"m"[..]));
        let written = read(meta, b"crash/after").expect("meta key after the switch");
        let written = u64::from_be_bytes(written.try_into().expect("a u64"));
        let mut seq = 0u64;
        while let Some(v) = db.get_cf(inbox, codec::seq_key(seq)).expect("read") {
            assert!(v.len() == 1 << 20 && v.iter().all(|&b| b == seq as u8), "inbox record {seq}");
            seq += 1;
        }
        assert_eq!(seq, written, "inbox records that came back, of those the child wrote");
        assert_eq!(read(claims, b"c-after").as_deref(), Some(&b"a"[..]), "claim after the switch");
        assert_eq!(
            read(inbox, &codec::seq_key(1 << 20)).as_deref(),
            Some(&b"after"[..]),
            "inbox record after the switch"
        );
    }
}
