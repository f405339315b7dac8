//! Transactions: `TransactGetItems` and `TransactWriteItems` over typed writes.

use std::collections::BTreeSet;

use store::{
    ConditionCheck, Item, ReturnValues, StoreError, TransactGet, TransactGetItems, TransactWrite, TransactWriteItems,
};

use super::table::*;
use crate::error::{Error, ItemFailure, Result};
use crate::expr::{Condition, Renderer, Update};
use crate::record::Record;

/// One write of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum TxWrite {
    /// A put, create or replace.
    Put {
        /// The entity.
        entity: String,
        /// Its attributes.
        item: Item,
        /// How it treats an existing item.
        mode: PutMode,
        /// An extra condition.
        condition: Option<Condition>,
    },
    /// An update.
    Update {
        /// The entity.
        entity: String,
        /// The key fields.
        key: Item,
        /// The update.
        update: Update,
        /// An extra condition.
        condition: Option<Condition>,
        /// Whether a missing item is created.
        upsert: bool,
    },
    /// A delete.
    Delete {
        /// The entity.
        entity: String,
        /// The key fields.
        key: Item,
        /// A condition.
        condition: Option<Condition>,
    },
    /// A condition on an item that is not written.
    Check {
        /// The entity.
        entity: String,
        /// The key fields.
        key: Item,
        /// The condition.
        condition: Condition,
    },
}

impl TxWrite {
    /// A put.
    pub fn put(entity: &str, item: Item) -> Self {
        TxWrite::Put { entity: entity.to_string(), item, mode: PutMode::Put, condition: None }
    }

    /// A create (fails when the item exists).
    pub fn create(entity: &str, item: Item) -> Self {
        TxWrite::Put { entity: entity.to_string(), item, mode: PutMode::Create, condition: None }
    }

    /// A replace (fails when the item does not exist).
    pub fn replace(entity: &str, item: Item) -> Self {
        TxWrite::Put { entity: entity.to_string(), item, mode: PutMode::Replace, condition: None }
    }

    /// An update of an existing item.
    pub fn update(entity: &str, key: Item, update: Update) -> Self {
        TxWrite::Update { entity: entity.to_string(), key, update, condition: None, upsert: false }
    }

    /// An update that creates a missing item.
    pub fn upsert(entity: &str, key: Item, update: Update) -> Self {
        TxWrite::Update { entity: entity.to_string(), key, update, condition: None, upsert: true }
    }

    /// A delete.
    pub fn delete(entity: &str, key: Item) -> Self {
        TxWrite::Delete { entity: entity.to_string(), key, condition: None }
    }

    /// A condition check.
    pub fn check(entity: &str, key: Item, condition: Condition) -> Self {
        TxWrite::Check { entity: entity.to_string(), key, condition }
    }

    /// Adds a condition (a check keeps its own and adds this one).
    pub fn condition(mut self, c: Condition) -> Self {
        match &mut self {
            TxWrite::Put { condition, .. } | TxWrite::Update { condition, .. } | TxWrite::Delete { condition, .. } => {
                *condition = Some(match condition.take() {
                    Some(old) => old.and(c),
                    None => c,
                })
            }
            TxWrite::Check { condition, .. } => *condition = condition.clone().and(c),
        }
        self
    }

    /// The entity it writes.
    pub fn entity(&self) -> &str {
        match self {
            TxWrite::Put { entity, .. }
            | TxWrite::Update { entity, .. }
            | TxWrite::Delete { entity, .. }
            | TxWrite::Check { entity, .. } => entity,
        }
    }
}

impl Table {
    /// Reads up to 100 items in one consistent snapshot, in input order.
    pub async fn transact_get(&self, keys: Vec<(&str, Item)>) -> Result<Vec<Option<Record>>> {
        if keys.len() > store::limits::MAX_TRANSACT_ITEMS {
            return Err(Error::TooManyItems {
                operation: "transact_get",
                count: keys.len(),
                max: store::limits::MAX_TRANSACT_ITEMS,
            });
        }
        let mut entities = Vec::new();
        let mut request = TransactGetItems::default();
        for (entity, fields) in &keys {
            let e = self.entity(entity)?;
            request.items.push(TransactGet {
                table: self.schema.table_name().to_string(),
                key: self.primary_key(e, fields)?,
                projection: None,
                attrs: Default::default(),
            });
            entities.push(e);
        }
        let out = self.store.transact_get_items(request).await?;
        self.record_all(&out.consumed_capacity);
        entities.into_iter().zip(out.items).map(|(e, i)| i.map(|i| self.decode_as(e, i)).transpose()).collect()
    }

    /// Writes up to 100 items, all or nothing. When DynamoDB cancels the transaction, the
    /// error lists each item that caused it with its reason. Returns the stored item of
    /// each put, `None` for the other writes.
    pub async fn transact_write(&self, writes: Vec<TxWrite>) -> Result<Vec<Option<Record>>> {
        if writes.len() > store::limits::MAX_TRANSACT_ITEMS {
            return Err(Error::TooManyItems {
                operation: "transact_write",
                count: writes.len(),
                max: store::limits::MAX_TRANSACT_ITEMS,
            });
        }
        let mut request = TransactWriteItems::default();
        let mut entities = Vec::new();
        let mut records = Vec::new();
        let mut seen = BTreeSet::new();
        for w in &writes {
            let (tx, record) = match w {
                TxWrite::Put { entity, item, mode, condition } => {
                    let put = self.prepare_put(entity, item.clone(), *mode, condition.as_ref())?;
                    let record = Record::new(entity.as_str(), put.item.clone());
                    (TransactWrite::Put(put), Some(record))
                }
                TxWrite::Update { entity, key, update, condition, upsert } => {
                    let u = self.prepare_update(entity, key, update, condition.as_ref(), *upsert)?;
                    (TransactWrite::Update(u), None)
                }
                TxWrite::Delete { entity, key, condition } => {
                    let mut d = self.prepare_delete(entity, key, condition.as_ref())?;
                    d.return_values = ReturnValues::None;
                    (TransactWrite::Delete(d), None)
                }
                TxWrite::Check { entity, key, condition } => {
                    let e = self.entity(entity)?;
                    let key = self.primary_key(e, key)?;
                    let mut r = Renderer::new();
                    let text = r.condition(condition);
                    let mut check = ConditionCheck::new(self.schema.table_name(), key, text);
                    check.attrs = r.finish();
                    (TransactWrite::ConditionCheck(check), None)
                }
            };
            let key = match &tx {
                TransactWrite::Put(p) => self.schema.table().key_schema.key_of(&p.item),
                TransactWrite::Update(u) => Some(u.key.clone()),
                TransactWrite::Delete(d) => Some(d.key.clone()),
                TransactWrite::ConditionCheck(c) => Some(c.key.clone()),
            };
            if !seen.insert(key) {
                return Err(Error::DuplicateKey { operation: "transact_write" });
            }
            entities.push(w.entity().to_string());
            records.push(record);
            request.items.push(tx);
        }
        match self.store.transact_write_items(request).await {
            Ok(out) => {
                self.record_all(&out.consumed_capacity);
                Ok(records)
            }
            Err(StoreError::TransactionCanceled { reasons }) => {
                let failures = reasons
                    .into_iter()
                    .enumerate()
                    .filter(|(_, r)| r.code != store::CancellationCode::None)
                    .map(|(index, r)| ItemFailure {
                        index,
                        entity: entities.get(index).cloned().unwrap_or_default(),
                        code: r.code,
                        message: r.message,
                    })
                    .collect();
                Err(Error::TransactionCanceled { failures })
            }
            Err(e) => Err(e.into()),
        }
    }
}
