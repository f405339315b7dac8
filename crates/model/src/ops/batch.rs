//! Batches: `BatchGetItem` and `BatchWriteItem`, chunked to DynamoDB's limits, unprocessed items retried with backoff.

use std::collections::{BTreeMap, BTreeSet};

use store::{BatchGetItem, BatchWriteItem, Item, KeysAndAttributes, WriteRequest};

use super::table::*;
use crate::error::{Error, Result};
use crate::record::Record;

/// One write of a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchWrite {
    /// Put an item of an entity.
    Put {
        /// The entity.
        entity: String,
        /// Its attributes.
        item: Item,
    },
    /// Delete an item by the fields of its key.
    Delete {
        /// The entity.
        entity: String,
        /// The key fields.
        key: Item,
    },
}

impl BatchWrite {
    /// A put.
    pub fn put(entity: &str, item: Item) -> Self {
        BatchWrite::Put { entity: entity.to_string(), item }
    }

    /// A delete.
    pub fn delete(entity: &str, key: Item) -> Self {
        BatchWrite::Delete { entity: entity.to_string(), key }
    }
}

impl Table {
    /// Gets many items by key, in input order (`None` for missing ones). Chunked to 100
    /// keys per request; unprocessed keys are retried with backoff.
    pub async fn batch_get(&self, keys: Vec<(&str, Item)>) -> Result<Vec<Option<Record>>> {
        let mut wanted = Vec::with_capacity(keys.len());
        for (entity, fields) in &keys {
            let e = self.entity(entity)?;
            wanted.push((e, self.primary_key(e, fields)?));
        }
        let unique: Vec<Item> = wanted.iter().map(|(_, k)| k.clone()).collect::<BTreeSet<_>>().into_iter().collect();
        let key_schema = self.schema.table().key_schema.clone();
        let mut found: BTreeMap<Item, Item> = BTreeMap::new();
        for chunk in unique.chunks(store::limits::MAX_BATCH_GET) {
            let mut pending = chunk.to_vec();
            let mut attempt = 0;
            while !pending.is_empty() {
                self.retry.before_attempt(attempt, "batch_get", pending.len()).await?;
                attempt += 1;
                let mut request = BatchGetItem::default();
                request.requests.insert(
                    self.schema.table_name().to_string(),
                    KeysAndAttributes { keys: std::mem::take(&mut pending), ..Default::default() },
                );
                let out = self.store.batch_get_item(request).await?;
                self.record_all(&out.consumed_capacity);
                for items in out.responses.into_values() {
                    for item in items {
                        if let Some(k) = key_schema.key_of(&item) {
                            found.insert(k, item);
                        }
                    }
                }
                pending = out.unprocessed_keys.into_values().flat_map(|k| k.keys).collect();
            }
        }
        wanted.into_iter().map(|(e, k)| found.get(&k).cloned().map(|i| self.decode_as(e, i)).transpose()).collect()
    }

    /// Writes many items without conditions. Chunked to 25 per request; unprocessed items
    /// are retried with backoff. Returns the stored item of each put, `None` for deletes.
    pub async fn batch_write(&self, writes: Vec<BatchWrite>) -> Result<Vec<Option<Record>>> {
        let key_schema = self.schema.table().key_schema.clone();
        let mut requests = Vec::with_capacity(writes.len());
        let mut out = Vec::with_capacity(writes.len());
        let mut seen = BTreeSet::new();
        for w in writes {
            let (request, record, key) = match w {
                BatchWrite::Put { entity, item } => {
                    let item = self.build_item(&entity, item)?;
                    let key = key_schema.key_of(&item).unwrap_or_default();
                    (WriteRequest::Put(item.clone()), Some(Record::new(entity, item)), key)
                }
                BatchWrite::Delete { entity, key } => {
                    let key = self.key(&entity, &key)?;
                    (WriteRequest::Delete(key.clone()), None, key)
                }
            };
            if !seen.insert(key) {
                return Err(Error::DuplicateKey { operation: "batch_write" });
            }
            requests.push(request);
            out.push(record);
        }
        // Each chunk's requests are moved into its call, not copied: an item is cloned once, for
        // the record returned.
        let mut requests = requests.into_iter().peekable();
        while requests.peek().is_some() {
            let mut pending: Vec<WriteRequest> = requests.by_ref().take(store::limits::MAX_BATCH_WRITE).collect();
            let mut attempt = 0;
            while !pending.is_empty() {
                self.retry.before_attempt(attempt, "batch_write", pending.len()).await?;
                attempt += 1;
                let mut request = BatchWriteItem::default();
                request.requests.insert(self.schema.table_name().to_string(), std::mem::take(&mut pending));
                let result = self.store.batch_write_item(request).await?;
                self.record_all(&result.consumed_capacity);
                pending = result.unprocessed_items.into_values().flatten().collect();
            }
        }
        Ok(out)
    }
}
