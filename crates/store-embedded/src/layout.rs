//! The on-disk layout: the redb tables every store holds and how their keys are built, and
//! [`OpError`], the error met while reading or writing them.
//!
//! This module depends on no other part of the engine's storage layer: the effects of a write
//! (`crate::effects`), the journal (`crate::journal`), item writes (`crate::db`) and the readers
//! all build on it.

use store::{AttributeValue, StoreError};

use crate::codec;
use crate::keys;

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
/// The redb table holding the sequence number of the last journal group in the database,
/// under [`APPLIED_KEY`].
pub const APPLIED: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("sys/journal");
/// The one key of [`APPLIED`].
pub const APPLIED_KEY: &str = "applied";

/// The redb table definition of a base or index table.
pub fn bytes_table(name: &str) -> BytesTable<'_> {
    redb::TableDefinition::new(name)
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

/// The caller's error: DynamoDB's own, or [`StoreError::Internal`] for a storage failure.
impl From<OpError> for StoreError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Store(e) => e,
            OpError::Fatal(e) => internal(e),
        }
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
