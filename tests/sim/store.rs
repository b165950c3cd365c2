//! The simulated ledger store: an in-memory, ordered key-value store with RocksDB's write
//! semantics as the shard writers use them (one atomic batch per write; a synced write makes
//! every earlier write durable too, one WAL), plus what the real disk can do to it: a crash
//! that keeps the synced writes and only a prefix of the unsynced ones, and injected read and
//! write failures.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use hookwall::ledger::decide::{Col, ShardStore, Visit};

/// Shard number of the global column families in a key.
const GLOBAL: u16 = u16::MAX;

/// A stored key: column family, shard (or `GLOBAL`), key bytes.
type Key = (Col, u16, Vec<u8>);
type Map = BTreeMap<Key, Vec<u8>>;

/// One write of a batch.
#[derive(Debug, Clone)]
pub enum Op {
    Put(Key, Vec<u8>),
    Delete(Key),
    DeleteRange(Key, Key),
}

/// The whole simulated database (all shards share it, as they share one RocksDB and its WAL).
pub struct Db {
    /// What survives a crash.
    durable: Map,
    /// What reads see: `durable` plus the unsynced batches.
    visible: Map,
    /// Written without fsync since the last synced write, oldest first.
    unsynced: Vec<Vec<Op>>,
    /// Chance per mille that a read fails.
    pub read_fault: u64,
    /// Chance per mille that a write fails (nothing of it is applied).
    pub write_fault: u64,
    /// The fault generator (xorshift state; separate from the world's so reads stay cheap).
    faults: Cell<u64>,
    /// Reads that failed.
    pub read_faults: Cell<u64>,
}

/// A failed simulated read.
#[derive(Debug)]
pub struct Fault;

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("injected IO error")
    }
}

fn apply(map: &mut Map, batch: &[Op]) {
    for op in batch {
        match op {
            Op::Put(k, v) => {
                map.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                map.remove(k);
            }
            Op::DeleteRange(from, to) => {
                let doomed: Vec<Key> =
                    map.range(from.clone()..to.clone()).map(|(k, _)| k.clone()).collect();
                for k in doomed {
                    map.remove(&k);
                }
            }
        }
    }
}

impl Db {
    /// An empty database whose faults are drawn from `seed`.
    pub fn new(seed: u64) -> Db {
        Db {
            durable: Map::new(),
            visible: Map::new(),
            unsynced: Vec::new(),
            read_fault: 0,
            write_fault: 0,
            faults: Cell::new(seed | 1),
            read_faults: Cell::new(0),
        }
    }

    fn roll(&self, per_mille: u64) -> bool {
        if per_mille == 0 {
            return false;
        }
        let mut x = self.faults.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.faults.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) % 1000 < per_mille
    }

    /// Writes `batch` atomically; with `sync`, it and everything before it are durable when
    /// this returns. `Err` (an injected fault) applies nothing.
    pub fn write(&mut self, batch: Vec<Op>, sync: bool) -> Result<(), Fault> {
        if self.roll(self.write_fault) {
            return Err(Fault);
        }
        apply(&mut self.visible, &batch);
        self.unsynced.push(batch);
        if sync {
            for b in std::mem::take(&mut self.unsynced) {
                apply(&mut self.durable, &b);
            }
        }
        Ok(())
    }

    /// A crash: the synced writes survive, and of the unsynced ones only the first `keep`
    /// (the WAL may have reached the disk partly, always as a prefix).
    pub fn crash(&mut self, keep: usize) {
        for b in self.unsynced.drain(..).take(keep) {
            apply(&mut self.durable, &b);
        }
        self.visible = self.durable.clone();
    }

    /// Unsynced batches waiting.
    pub fn unsynced(&self) -> usize {
        self.unsynced.len()
    }

    /// Whether `key` of `col` in `shard` is visible (no fault: the checker's read).
    pub fn has(&self, col: Col, shard: usize, key: &[u8]) -> bool {
        self.visible.contains_key(&(col, shard_tag(col, shard), key.to_vec()))
    }
}

fn shard_tag(col: Col, shard: usize) -> u16 {
    match col {
        Col::Claims | Col::Inbox | Col::Schedule => u16::try_from(shard).expect("few shards"),
        Col::Meta | Col::Audit | Col::Quarantine | Col::Rejected => GLOBAL,
    }
}

/// One shard's view of the database, as the shard writer's decisions read and write it.
pub struct View<'a> {
    pub db: &'a RefCell<Db>,
    pub shard: usize,
    /// Whether reads may fail (the checker reads without faults).
    pub faulty: bool,
}

impl View<'_> {
    fn key(&self, col: Col, key: &[u8]) -> Key {
        (col, shard_tag(col, self.shard), key.to_vec())
    }

    fn fails(&self) -> bool {
        if !self.faulty {
            return false;
        }
        let db = self.db.borrow();
        let failed = db.roll(db.read_fault);
        if failed {
            db.read_faults.set(db.read_faults.get() + 1);
        }
        failed
    }
}

impl ShardStore for View<'_> {
    type Error = Fault;
    type Batch = Vec<Op>;

    fn get<R>(&self, col: Col, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, Fault> {
        if self.fails() {
            return Err(Fault);
        }
        Ok(self.db.borrow().visible.get(&self.key(col, key)).map(|v| f(v)))
    }

    fn scan(
        &self,
        col: Col,
        lower: &[u8],
        upper: &[u8],
        each: &mut Visit<'_>,
    ) -> Result<(), Fault> {
        if self.fails() {
            return Err(Fault);
        }
        // A snapshot of the range: `each` may read the store again.
        let entries: Vec<(Vec<u8>, Vec<u8>)> = self
            .db
            .borrow()
            .visible
            .range(self.key(col, lower)..self.key(col, upper))
            .map(|((_, _, k), v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in entries {
            if each(&k, &v).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn put(&self, batch: &mut Vec<Op>, col: Col, key: &[u8], value: &[u8]) {
        batch.push(Op::Put(self.key(col, key), value.to_vec()));
    }

    fn delete(&self, batch: &mut Vec<Op>, col: Col, key: &[u8]) {
        batch.push(Op::Delete(self.key(col, key)));
    }

    fn delete_range(&self, batch: &mut Vec<Op>, col: Col, from: &[u8], to: &[u8]) {
        batch.push(Op::DeleteRange(self.key(col, from), self.key(col, to)));
    }

    fn is_empty(&self, batch: &Vec<Op>) -> bool {
        batch.is_empty()
    }
}
