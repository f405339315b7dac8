//! The state shared by readers and the writer, and the one function through which every item
//! write passes (base item, index entries, TTL index). The redb tables themselves are laid out
//! in `crate::layout`; each write is recorded as an effect through `crate::effects`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use redb::{Database, ReadableTable};
use store::{Item, StoreError, item_size};

use crate::capacity::{Units, write_units};
use crate::codec;
use crate::effects::{On, Tx};
use crate::layout::{OpError, ttl_key};
use crate::schema::TableInfo;

/// State shared by the writer thread and the readers.
pub struct Shared {
    /// The redb database: read transactions for readers, write transactions for the writer only.
    pub db: Database,
    /// Committed table definitions. The writer replaces entries only after a commit.
    pub tables: RwLock<BTreeMap<String, Arc<TableInfo>>>,
}

impl Shared {
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
