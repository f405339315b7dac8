//! The on-disk layout: redb tables, the state shared by readers and the writer, and the one
//! function through which every item write passes (base item, index entries, TTL index).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use redb::{Database, ReadableTable};
use store::{AttributeValue, Item, StoreError, item_size};

use crate::capacity::{Units, write_units};
use crate::codec;
use crate::journal::{On, Tx};
use crate::keys;
use crate::schema::TableInfo;

/// A redb table of encoded keys to encoded values.
pub type BytesTable<'a> = redb::TableDefinition<'a, &'static [u8], &'static [u8]>;

/// Table definitions: DynamoDB table name to encoded [`store::TableDefinition`].
pub const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("sys/tables");
/// The TTL index: `expiry (u64 BE) ‖ enc(table name) ‖ base key` to nothing.
pub const TTL: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("sys/ttl");
/// Transaction idempotency tokens: token to `time (u64 BE) ‖ request fingerprint (u64 BE)`.
pub const TOKENS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("sys/tokens");
/// Tokens by age, for purging: `time (u64 BE) ‖ token` to nothing.
pub const TOKEN_TIMES: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("sys/token-times");

/// The redb table definition of a base or index table.
pub fn bytes_table(name: &str) -> BytesTable<'_> {
    redb::TableDefinition::new(name)
}

/// State shared by the writer thread and the readers.
pub struct Shared {
    /// The database.
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

/// An error inside the writer: either an answer for the caller (nothing was written), or a
/// storage failure that aborts the whole group commit.
#[derive(Debug)]
pub enum OpError {
    /// The operation failed as DynamoDB would fail it; it wrote nothing.
    Store(StoreError),
    /// redb failed, or stored data is corrupt; the transaction must be discarded.
    Fatal(String),
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        OpError::Store(e)
    }
}

macro_rules! fatal_from {
    ($($t:ty),*) => {$(
        impl From<$t> for OpError {
            fn from(e: $t) -> Self {
                OpError::Fatal(e.to_string())
            }
        }
    )*};
}
fatal_from!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::SetDurabilityError,
    redb::Error,
    codec::CorruptData
);

impl std::fmt::Display for codec::CorruptData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "corrupt data: {}", self.0)
    }
}

/// Maps a redb error met while reading to the caller's error.
pub fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Internal(e.to_string())
}

/// Reads an item by encoded key inside the write transaction.
pub fn load(txn: &Tx, info: &TableInfo, key: &[u8]) -> Result<Option<Item>, OpError> {
    txn.tables().items(&info.redb_name, |table| match table.get(key)? {
        Some(v) => Ok(Some(codec::decode_item(v.value())?)),
        None => Ok(None),
    })
}

/// The TTL index key of an item.
pub fn ttl_key(table: &str, expiry: u64, base_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + table.len() + 2 + base_key.len());
    k.extend_from_slice(&expiry.to_be_bytes());
    keys::encode_value(&mut k, &AttributeValue::S(table.to_string()));
    k.extend_from_slice(base_key);
    k
}

/// Splits a TTL index key into expiry, table name and base key.
pub fn parse_ttl_key(k: &[u8]) -> Option<(u64, String, &[u8])> {
    let (expiry, mut rest) = k.split_first_chunk::<8>()?;
    let table = match keys::decode_value(&mut rest, store::ScalarType::S).ok()? {
        AttributeValue::S(s) => s,
        _ => return None,
    };
    Some((u64::from_be_bytes(*expiry), table, rest))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_keys_round_trip_and_sort_by_expiry() {
        let a = ttl_key("t\0x", 5, b"\x01key");
        let (e, t, k) = parse_ttl_key(&a).unwrap();
        assert_eq!((e, t.as_str(), k), (5, "t\0x", &b"\x01key"[..]));
        assert!(ttl_key("zzz", 4, b"k") < ttl_key("aaa", 5, b"k"));
        assert!(parse_ttl_key(b"short").is_none());
    }
}
