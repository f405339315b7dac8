//! A table definition prepared for the engine: its redb tables, key encoders and validation.
//!
//! Validation messages are DynamoDB's own, so that code written against one engine sees
//! the same errors on the other.

use std::collections::BTreeSet;

use store::limits::{MAX_ITEM_BYTES, MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES};
use store::{
    AttributeValue, Item, KeyAttribute, KeySchema, Projection, Result, ScalarType, StoreError, TableDefinition,
    item_size,
};

use crate::keys;

/// The prefix of every DynamoDB parameter-validation message.
const INVALID: &str = "One or more parameter values were invalid";

/// Whether an index is global or local (they are billed under different names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    /// A global secondary index.
    Global,
    /// A local secondary index.
    Local,
}

/// One secondary index of a table.
#[derive(Clone, Debug)]
pub struct IndexInfo {
    /// Index name.
    pub name: String,
    /// Global or local.
    pub kind: IndexKind,
    /// The index's own key schema.
    pub schema: KeySchema,
    /// What the index stores.
    pub projection: Projection,
    /// The redb table holding its entries.
    pub redb_name: String,
}

/// A table definition with everything the engine derives from it.
#[derive(Clone, Debug)]
pub struct TableInfo {
    /// The definition as created.
    pub def: TableDefinition,
    /// The redb table holding base items.
    pub redb_name: String,
    /// Secondary indexes, global first, in definition order.
    pub indexes: Vec<IndexInfo>,
}

/// The redb table of a DynamoDB table's base items.
pub fn base_table_name(table: &str) -> String {
    format!("t/{table}")
}

/// The redb table of an index. Table names cannot contain `/`, so names never collide.
pub fn index_table_name(table: &str, index: &str) -> String {
    format!("i/{table}/{index}")
}

impl TableInfo {
    /// Prepares a definition.
    pub fn new(def: TableDefinition) -> Self {
        let mut indexes = Vec::new();
        for g in &def.global_indexes {
            indexes.push(IndexInfo {
                name: g.name.clone(),
                kind: IndexKind::Global,
                schema: g.key_schema.clone(),
                projection: g.projection.clone(),
                redb_name: index_table_name(&def.name, &g.name),
            });
        }
        for l in &def.local_indexes {
            indexes.push(IndexInfo {
                name: l.name.clone(),
                kind: IndexKind::Local,
                schema: KeySchema { partition: def.key_schema.partition.clone(), sort: Some(l.sort.clone()) },
                projection: l.projection.clone(),
                redb_name: index_table_name(&def.name, &l.name),
            });
        }
        TableInfo { redb_name: base_table_name(&def.name), def, indexes }
    }

    /// The table's primary key schema.
    pub fn schema(&self) -> &KeySchema {
        &self.def.key_schema
    }

    /// The named index, or a validation error as DynamoDB words it.
    pub fn index(&self, name: &str) -> Result<&IndexInfo> {
        self.indexes
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| StoreError::validation(format!("The table does not have the specified index: {name}")))
    }

    /// The encoded primary key of an item or key whose key attributes were validated.
    pub fn base_key(&self, item: &Item) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        encode_schema_key(&mut out, self.schema(), item);
        out
    }

    /// The primary key attributes of an item.
    pub fn key_of(&self, item: &Item) -> Item {
        let mut key = Item::new();
        for a in self.schema().attributes() {
            if let Some(v) = item.get(&a.name) {
                key.insert(a.name.clone(), v.clone());
            }
        }
        key
    }

    /// The entry `item` has in `index`: its encoded key and the projected item, or `None`
    /// when the item lacks an index key attribute (indexes are sparse) or has one of the
    /// wrong type (which validation rejects before any write).
    pub fn index_entry(&self, index: &IndexInfo, item: &Item) -> Option<(Vec<u8>, Item)> {
        for a in index.schema.attributes() {
            if !a.ty.matches(item.get(&a.name)?) {
                return None;
            }
        }
        let mut key = Vec::with_capacity(48);
        encode_schema_key(&mut key, &index.schema, item);
        encode_schema_key(&mut key, self.schema(), item);
        let projected = match &index.projection {
            Projection::All => item.clone(),
            Projection::KeysOnly | Projection::Include(_) => {
                let mut out = Item::new();
                let keys = self.schema().attributes().chain(index.schema.attributes()).map(|a| &a.name);
                let extra: &[String] = match &index.projection {
                    Projection::Include(names) => names,
                    _ => &[],
                };
                for name in keys.chain(extra.iter()) {
                    if let Some(v) = item.get(name) {
                        out.insert(name.clone(), v.clone());
                    }
                }
                out
            }
        };
        Some((key, projected))
    }

    /// The attributes of a `LastEvaluatedKey` for a page read from `index` (or the table).
    pub fn last_key(&self, index: Option<&IndexInfo>, item: &Item) -> Item {
        let mut key = self.key_of(item);
        if let Some(index) = index {
            for a in index.schema.attributes() {
                if let Some(v) = item.get(&a.name) {
                    key.insert(a.name.clone(), v.clone());
                }
            }
        }
        key
    }

    /// Encodes an `ExclusiveStartKey` for the table or an index, checking its attributes.
    pub fn start_key(&self, index: Option<&IndexInfo>, key: &Item) -> Result<Vec<u8>> {
        let invalid = || {
            StoreError::validation(
                "The provided starting key is invalid: The provided key element does not match the schema",
            )
        };
        let mut wanted: Vec<&KeyAttribute> = Vec::new();
        if let Some(index) = index {
            wanted.extend(index.schema.attributes());
        }
        for a in self.schema().attributes() {
            if !wanted.iter().any(|w| w.name == a.name) {
                wanted.push(a);
            }
        }
        if key.len() != wanted.len() {
            return Err(invalid());
        }
        for a in &wanted {
            match key.get(&a.name) {
                Some(v) if a.ty.matches(v) => {}
                _ => return Err(invalid()),
            }
        }
        let mut out = Vec::new();
        if let Some(index) = index {
            encode_schema_key(&mut out, &index.schema, key);
        }
        encode_schema_key(&mut out, self.schema(), key);
        Ok(out)
    }

    /// Checks a full key (`GetItem`, `DeleteItem`, `UpdateItem`, batch and transaction keys):
    /// exactly the key attributes, of the right types, non-empty and within size limits.
    pub fn check_key(&self, key: &Item) -> Result<()> {
        let schema = self.schema();
        let mismatch = || StoreError::validation("The provided key element does not match the schema");
        if key.len() != schema.attributes().count() {
            return Err(mismatch());
        }
        for a in schema.attributes() {
            match key.get(&a.name) {
                Some(v) if a.ty.matches(v) => {}
                _ => return Err(mismatch()),
            }
        }
        self.check_key_values(key)
    }

    /// Checks an item to be written whole (`PutItem`, batch and transaction puts).
    pub fn check_put(&self, item: &Item) -> Result<()> {
        for a in self.schema().attributes() {
            match item.get(&a.name) {
                None => {
                    return Err(StoreError::validation(format!("{INVALID}: Missing the key {} in the item", a.name)));
                }
                Some(v) if !a.ty.matches(v) => {
                    return Err(StoreError::validation(format!(
                        "{INVALID}: Type mismatch for key {} expected: {} actual: {}",
                        a.name,
                        a.ty.descriptor(),
                        v.value_type().descriptor()
                    )));
                }
                Some(_) => {}
            }
        }
        self.check_key_values(item)?;
        self.check_item(item, "Item size has exceeded the maximum allowed size")
    }

    /// Checks what every written item must satisfy: no empty sets, index key attributes of
    /// the index's types and non-empty, and the size limit (`too_large` is the message).
    pub fn check_item(&self, item: &Item, too_large: &str) -> Result<()> {
        for v in item.values() {
            check_no_empty_sets(v)?;
        }
        for index in &self.indexes {
            for a in index.schema.attributes() {
                let Some(v) = item.get(&a.name) else { continue };
                if !a.ty.matches(v) {
                    return Err(StoreError::validation(format!(
                        "{INVALID}: Type mismatch for Index Key {} Expected: {} Actual: {} IndexName: {}",
                        a.name,
                        a.ty.descriptor(),
                        v.value_type().descriptor(),
                        index.name
                    )));
                }
                if is_empty_scalar(v) {
                    return Err(StoreError::validation(format!(
                        "One or more parameter values are not valid. A value specified for a secondary index key is not supported. The AttributeValue for a key attribute cannot contain an empty {} value. IndexName: {}, IndexKey: {}",
                        empty_kind(a.ty),
                        index.name,
                        a.name
                    )));
                }
            }
            check_key_sizes(&index.schema, item)?;
        }
        if item_size(item) > MAX_ITEM_BYTES {
            return Err(StoreError::ItemTooLarge(too_large.to_string()));
        }
        Ok(())
    }

    fn check_key_values(&self, item: &Item) -> Result<()> {
        for a in self.schema().attributes() {
            if let Some(v) = item.get(&a.name)
                && is_empty_scalar(v)
            {
                return Err(StoreError::validation(format!(
                    "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty {} value. Key: {}",
                    empty_kind(a.ty),
                    a.name
                )));
            }
        }
        check_key_sizes(self.schema(), item)
    }

    /// Every attribute that is part of the table's primary key.
    pub fn primary_key_names(&self) -> BTreeSet<&str> {
        self.schema().attributes().map(|a| a.name.as_str()).collect()
    }

    /// The expiry of an item under the table's TTL attribute, in epoch seconds: only a
    /// non-negative `N` counts; any other type, or no attribute, never expires.
    pub fn expiry(&self, item: &Item) -> Option<u64> {
        let name = self.def.ttl_attribute.as_ref()?;
        let n = item.get(name)?.as_n()?;
        if n.is_negative() {
            return None;
        }
        // Fractional seconds round down; numbers past u64 never expire in practice.
        let text = n.to_string();
        text.split('.').next()?.parse().ok()
    }
}

fn encode_schema_key(out: &mut Vec<u8>, schema: &KeySchema, item: &Item) {
    for a in schema.attributes() {
        if let Some(v) = item.get(&a.name) {
            keys::encode_value(out, v);
        }
    }
}

fn check_key_sizes(schema: &KeySchema, item: &Item) -> Result<()> {
    if let Some(v) = item.get(&schema.partition.name)
        && v.size() > MAX_PARTITION_KEY_BYTES
    {
        return Err(StoreError::KeyTooLarge(format!(
            "{INVALID}: Size of hashkey has exceeded the maximum size limit of {MAX_PARTITION_KEY_BYTES} bytes"
        )));
    }
    if let Some(sort) = &schema.sort
        && let Some(v) = item.get(&sort.name)
        && v.size() > MAX_SORT_KEY_BYTES
    {
        return Err(StoreError::KeyTooLarge(format!(
            "{INVALID}: Aggregated size of all range keys has exceeded the size limit of {MAX_SORT_KEY_BYTES} bytes"
        )));
    }
    Ok(())
}

fn is_empty_scalar(v: &AttributeValue) -> bool {
    match v {
        AttributeValue::S(s) => s.is_empty(),
        AttributeValue::B(b) => b.is_empty(),
        _ => false,
    }
}

fn empty_kind(ty: ScalarType) -> &'static str {
    match ty {
        ScalarType::B => "binary",
        _ => "string",
    }
}

/// Rejects empty sets anywhere in a value, with DynamoDB's messages.
pub fn check_no_empty_sets(v: &AttributeValue) -> Result<()> {
    match v {
        AttributeValue::Ss(s) if s.is_empty() => {
            Err(StoreError::validation(format!("{INVALID}: An string set  may not be empty")))
        }
        AttributeValue::Ns(s) if s.is_empty() => {
            Err(StoreError::validation(format!("{INVALID}: An number set  may not be empty")))
        }
        AttributeValue::Bs(s) if s.is_empty() => {
            Err(StoreError::validation(format!("{INVALID}: Binary sets should not be empty")))
        }
        AttributeValue::M(m) => m.values().try_for_each(check_no_empty_sets),
        AttributeValue::L(l) => l.iter().try_for_each(check_no_empty_sets),
        _ => Ok(()),
    }
}

/// Checks a definition for `CreateTable`.
pub fn check_definition(def: &TableDefinition) -> Result<()> {
    check_name(&def.name, "tableName")?;
    if def.global_indexes.len() > store::limits::MAX_GSIS {
        return Err(StoreError::validation(format!(
            "{INVALID}: GlobalSecondaryIndexes exceeds maximum of {}",
            store::limits::MAX_GSIS
        )));
    }
    if def.local_indexes.len() > store::limits::MAX_LSIS {
        return Err(StoreError::validation(format!(
            "{INVALID}: LocalSecondaryIndexes exceeds maximum of {}",
            store::limits::MAX_LSIS
        )));
    }
    if !def.local_indexes.is_empty() && def.key_schema.sort.is_none() {
        return Err(StoreError::validation(format!(
            "{INVALID}: Table KeySchema does not have a range key, which is required when specifying a LocalSecondaryIndex"
        )));
    }
    let mut names = BTreeSet::new();
    let index_names = def.global_indexes.iter().map(|g| &g.name).chain(def.local_indexes.iter().map(|l| &l.name));
    for name in index_names {
        check_name(name, "indexName")?;
        if !names.insert(name) {
            return Err(StoreError::validation(format!("{INVALID}: Duplicate index name: {name}")));
        }
    }
    // One attribute name has one type everywhere (DynamoDB's AttributeDefinitions).
    let mut seen: Vec<&KeyAttribute> = Vec::new();
    let all = def
        .key_schema
        .attributes()
        .chain(def.global_indexes.iter().flat_map(|g| g.key_schema.attributes()))
        .chain(def.local_indexes.iter().map(|l| &l.sort));
    for a in all {
        if let Some(other) = seen.iter().find(|s| s.name == a.name) {
            if other.ty != a.ty {
                return Err(StoreError::validation(format!(
                    "{INVALID}: Some AttributeDefinitions are not valid: attribute {} has two types",
                    a.name
                )));
            }
        } else {
            seen.push(a);
        }
    }
    for s in [&def.key_schema].into_iter().chain(def.global_indexes.iter().map(|g| &g.key_schema)) {
        if let Some(sort) = &s.sort
            && sort.name == s.partition.name
        {
            return Err(StoreError::validation(format!(
                "{INVALID}: Both the Hash Key and the Range Key element in the KeySchema have the same name"
            )));
        }
    }
    Ok(())
}

fn check_name(name: &str, what: &str) -> Result<()> {
    if name.len() < 3 || name.len() > 255 {
        return Err(StoreError::validation(format!(
            "1 validation error detected: Value '{name}' at '{what}' failed to satisfy constraint: Member must have length between 3 and 255"
        )));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-') {
        return Err(StoreError::validation(format!(
            "1 validation error detected: Value '{name}' at '{what}' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::{ScalarType, item};

    fn info() -> TableInfo {
        TableInfo::new(
            TableDefinition::new("tally", KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S))
                .gsi("gsi1", KeySchema::composite("g1pk", ScalarType::S, "g1sk", ScalarType::N), Projection::KeysOnly)
                .ttl("exp"),
        )
    }

    #[test]
    fn put_messages_are_dynamodbs() {
        let t = info();
        let err = t.check_put(&item! { "sk" => "a" }).unwrap_err();
        assert_eq!(err.to_string(), "One or more parameter values were invalid: Missing the key pk in the item");
        let err = t.check_put(&item! { "pk" => 1, "sk" => "a" }).unwrap_err();
        assert_eq!(
            err.to_string(),
            "One or more parameter values were invalid: Type mismatch for key pk expected: S actual: N"
        );
        let err = t.check_put(&item! { "pk" => "", "sk" => "a" }).unwrap_err();
        assert_eq!(
            err.to_string(),
            "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: pk"
        );
        let err = t.check_put(&item! { "pk" => "a", "sk" => "a", "g1pk" => 3 }).unwrap_err();
        assert!(err.is_validation(), "{err}");
        let big = "x".repeat(2049);
        assert!(matches!(t.check_put(&item! { "pk" => big, "sk" => "a" }), Err(StoreError::KeyTooLarge(_))));
    }

    #[test]
    fn index_entries_are_sparse_and_projected() {
        let t = info();
        let idx = &t.indexes[0];
        assert!(t.index_entry(idx, &item! { "pk" => "a", "sk" => "b", "g1pk" => "x" }).is_none());
        let (_, projected) =
            t.index_entry(idx, &item! { "pk" => "a", "sk" => "b", "g1pk" => "x", "g1sk" => 1, "other" => 2 }).unwrap();
        assert_eq!(projected, item! { "pk" => "a", "sk" => "b", "g1pk" => "x", "g1sk" => 1 });
    }

    #[test]
    fn expiry_needs_a_number() {
        let t = info();
        assert_eq!(t.expiry(&item! { "exp" => 10 }), Some(10));
        assert_eq!(t.expiry(&item! { "exp" => store::n("10.9") }), Some(10));
        assert_eq!(t.expiry(&item! { "exp" => "10" }), None);
        assert_eq!(t.expiry(&item! { "exp" => -1 }), None);
        assert_eq!(t.expiry(&item! {}), None);
    }
}
