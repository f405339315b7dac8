//! The state shared by readers and the writer, and the one function through which every item
//! write passes (base item, index entries, TTL index). The redb tables themselves are laid out
//! in `crate::layout`; each write is recorded as an effect through `crate::effects`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::{
    CompactionError, Database, ReadTransaction, ReadableDatabase, ReadableTable, TransactionError, WriteTransaction,
};
use store::{Item, StoreError, item_size};

use crate::capacity::{Units, write_units};
use crate::codec;
use crate::effects::{On, Tx};
use crate::layout::{OpError, ttl_key};
use crate::schema::TableInfo;

/// State shared by the writer thread and the readers.
pub struct Shared {
    /// The redb database: read transactions for readers, write transactions for the writer only.
    /// The lock is held only to begin a transaction, and exclusively by [`Shared::compact`].
    db: RwLock<Database>,
    /// Committed table definitions. The writer replaces entries only after a commit.
    pub tables: RwLock<BTreeMap<String, Arc<TableInfo>>>,
    /// What the writer's compactions did.
    compactions: Mutex<Compactions>,
    /// What the writer's group commits did.
    groups: Mutex<Groups>,
}

/// What compacting the database file did since the store opened (DESIGN.md, "Compaction at rest").
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct Compactions {
    /// Compactions run.
    pub count: u64,
    /// The longest time one held readers and writers.
    pub longest_pause: Duration,
    /// The time the last one held them.
    pub last_pause: Duration,
    /// The last one's bytes of the database file on disk, before and after (`None` when the
    /// store is not on a file).
    pub last_bytes: Option<(u64, u64)>,
}

/// What the writer's group commits did since the store opened: how many groups it committed,
/// how many operations they held, and how long their journal syncs took. The sync time is the
/// disk's latency for a durable write, which paces the groups when few writers wait on each
/// (DESIGN.md, "Group commit").
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct Groups {
    /// Groups committed with something written (a journal record or a durable redb commit).
    pub count: u64,
    /// Operations in those groups, reads and refused conditions included.
    pub operations: u64,
    /// Journal records written and synced.
    pub journal_syncs: u64,
    /// The time those writes and syncs took, together.
    pub journal_time: Duration,
    /// The time the writer spent on those groups, from its transaction's start to its commit.
    pub busy: Duration,
}

/// How a [`Shared::compact`] went.
pub enum Compacted {
    /// The file was compacted (or had nothing to move), readers and the writer held for this long.
    Done(Duration),
    /// A read transaction (a backup, say) outlived the wait for it: nothing was done.
    ReadersBusy,
}

impl Shared {
    /// The state over `db` and its table definitions.
    pub fn new(db: Database, tables: BTreeMap<String, Arc<TableInfo>>) -> Shared {
        Shared {
            db: RwLock::new(db),
            tables: RwLock::new(tables),
            compactions: Mutex::default(),
            groups: Mutex::default(),
        }
    }

    /// What the compactions so far did.
    pub fn compactions(&self) -> Compactions {
        *store::sync::lock(&self.compactions)
    }

    /// What the group commits so far did.
    pub fn groups(&self) -> Groups {
        *store::sync::lock(&self.groups)
    }

    /// Counts a committed group of `operations` that took `busy`, its journal record `journal`
    /// to write and sync (`None` for a durable redb commit).
    pub fn record_group(&self, operations: usize, busy: Duration, journal: Option<Duration>) {
        let mut g = store::sync::lock(&self.groups);
        g.count += 1;
        g.operations += operations as u64;
        g.busy += busy;
        if let Some(time) = journal {
            g.journal_syncs += 1;
            g.journal_time += time;
        }
    }

    /// Counts a compaction that paused everything for `pause`, with the file's bytes on disk
    /// before and after it.
    pub fn record_compaction(&self, pause: Duration, before: Option<u64>, after: Option<u64>) {
        let mut c = store::sync::lock(&self.compactions);
        c.count += 1;
        c.longest_pause = c.longest_pause.max(pause);
        c.last_pause = pause;
        c.last_bytes = before.zip(after);
    }

    /// A read transaction on the last commit.
    pub fn begin_read(&self) -> Result<ReadTransaction, TransactionError> {
        store::sync::read(&self.db).begin_read()
    }

    /// A write transaction: for the writer thread only.
    pub fn begin_write(&self) -> Result<WriteTransaction, TransactionError> {
        store::sync::read(&self.db).begin_write()
    }

    /// Compacts the database file with redb (its pages moved down, the free tail cut off), which
    /// needs the database to itself: no new transaction begins meanwhile, and the read
    /// transactions in flight get up to `drain` to end. Called by the writer thread only, between
    /// groups, so no write transaction is live.
    pub fn compact(&self, drain: Duration) -> Result<Compacted, CompactionError> {
        let mut db = store::sync::write(&self.db);
        let started = Instant::now();
        loop {
            match db.compact() {
                Ok(_) => return Ok(Compacted::Done(started.elapsed())),
                // Readers began their transactions before the lock was taken; they end soon.
                Err(CompactionError::TransactionInProgress) if started.elapsed() < drain => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(CompactionError::TransactionInProgress) => return Ok(Compacted::ReadersBusy),
                Err(e) => return Err(e),
            }
        }
    }

    /// The committed definition of `table`, or DynamoDB's not-found error.
    pub fn table(&self, table: &str) -> Result<Arc<TableInfo>, StoreError> {
        let tables = store::sync::read(&self.tables);
        tables.get(table).cloned().ok_or_else(|| StoreError::ResourceNotFound("Requested resource not found".into()))
    }
}

/// Reads an item by encoded key inside the write transaction.
pub fn load(txn: &Tx, info: &TableInfo, key: &[u8]) -> Result<Option<Item>, OpError> {
    txn.tables().items(&info.redb_name, |table| match table.get(key)? {
        Some(v) => Ok(Some(codec::decode_item(v.value())?)),
        None => Ok(None),
    })
}

/// Replaces the item at `key` (`old` is what is there now) by `new` (`None` deletes it),
/// keeping every index and the TTL index in step, and returns the write units spent.
///
/// Invariant: this and [`replace_item`] are the only functions that write base items, and
/// both write the indexes in the same transaction, so the indexes can never disagree with
/// the base table after a commit.
pub fn store_item(
    txn: &Tx,
    info: &TableInfo,
    key: &[u8],
    old: Option<&Item>,
    new: Option<&Item>,
) -> Result<Units, OpError> {
    write_base(txn, info, key, new, false)?;
    write_secondary(txn, info, key, old, new)
}

/// Like [`store_item`] for a write with no condition: the item it replaces comes back from
/// the base table's own insert or remove, saving a lookup. Returns the old item and the units.
pub fn replace_item(
    txn: &Tx,
    info: &TableInfo,
    key: &[u8],
    new: Option<&Item>,
) -> Result<(Option<Item>, Units), OpError> {
    let old = write_base(txn, info, key, new, true)?;
    let units = write_secondary(txn, info, key, old.as_ref(), new)?;
    Ok((old, units))
}

/// Writes or removes the base item, returning the previous one when asked for.
fn write_base(
    txn: &Tx,
    info: &TableInfo,
    key: &[u8],
    new: Option<&Item>,
    want_old: bool,
) -> Result<Option<Item>, OpError> {
    let on = On::Items(&info.redb_name);
    let previous = match new {
        Some(item) => txn.put(on, key, codec::encode_item(item).as_slice(), want_old)?,
        None => txn.remove(on, key, want_old)?,
    };
    match previous {
        Some(v) => Ok(Some(codec::decode_item(&v)?)),
        None => Ok(None),
    }
}

/// Brings the indexes and the TTL index from `old` to `new` and counts the units spent.
fn write_secondary(
    txn: &Tx,
    info: &TableInfo,
    key: &[u8],
    old: Option<&Item>,
    new: Option<&Item>,
) -> Result<Units, OpError> {
    let size = old.map(item_size).unwrap_or(0).max(new.map(item_size).unwrap_or(0));
    let mut units = Units::table(write_units(size));
    for index in &info.indexes {
        let before = old.and_then(|o| info.index_entry(index, o));
        let after = new.and_then(|n| info.index_entry(index, n));
        let spent = match (&before, &after) {
            (None, None) => continue,
            (Some((bk, bi)), Some((ak, ai))) if bk == ak => {
                if bi == ai {
                    // No projected attribute changed: DynamoDB writes nothing to the index.
                    continue;
                }
                write_units(item_size(ai))
            }
            (b, a) => {
                b.as_ref().map_or(0.0, |(_, i)| write_units(item_size(i)))
                    + a.as_ref().map_or(0.0, |(_, i)| write_units(item_size(i)))
            }
        };
        let on = On::Items(&index.redb_name);
        if let Some((bk, _)) = &before {
            txn.remove(on, bk.as_slice(), false)?;
        }
        if let Some((ak, ai)) = &after {
            txn.put(on, ak.as_slice(), codec::encode_item(ai).as_slice(), false)?;
        }
        units.add_index(index.kind, &index.name, spent);
    }
    let old_expiry = old.and_then(|o| info.expiry(o));
    let new_expiry = new.and_then(|n| info.expiry(n));
    if old_expiry != new_expiry {
        if let Some(e) = old_expiry {
            txn.remove(On::Ttl, ttl_key(&info.def.name, e, key).as_slice(), false)?;
        }
        if let Some(e) = new_expiry {
            txn.put(On::Ttl, ttl_key(&info.def.name, e, key).as_slice(), &[], false)?;
        }
    }
    Ok(units)
}
