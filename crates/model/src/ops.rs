//! Typed operations on a table: the only way Tally code reads and writes items.
//!
//! A [`Table`] is a store plus a schema. Its operations take entity names and plain field
//! values; they compute every key from the entity's templates, write the entity-type
//! attribute, generate ULIDs and timestamps, apply defaults and TTLs, check required
//! attributes and types, and render every expression with placeholders. User code never
//! formats a key by hand.
//!
//! Reads return [`Record`]s decoded by entity. Queries are builders ending in a page
//! stream, an item stream, or a collected `Vec`; they follow `LastEvaluatedKey` until the
//! end. Batches are chunked to DynamoDB's limits and unprocessed items are retried with
//! exponential backoff. Every response's consumed capacity is added to the table's
//! [`Capacity`] meter, so callers can measure what an operation costs.
//!
//! ```no_run
//! # async fn demo(store: std::sync::Arc<dyn store::Store>) -> model::Result<()> {
//! use model::{Table, expr::Update, sample};
//! use store::item;
//!
//! let table = Table::new(store, sample::shop("shop"));
//! let order = table.create("Order", item! { "customer_id" => "c1", "total" => 30 }).await?;
//! let id = order.string("order_id")?.to_string();
//! table
//!     .update("Order", item! { "customer_id" => "c1", "order_id" => id.as_str() },
//!             Update::new().set("status", "PAID"))
//!     .await?;
//! let orders = table.query("Order").key(item! { "customer_id" => "c1" }).all().await?;
//! assert_eq!(orders.len(), 1);
//! println!("spent {} write units", table.capacity().write_units);
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::sync::lock;

use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use store::{
    AttributeValue, BatchGetItem, BatchWriteItem, ConditionCheck, ConsumedCapacity, DeleteItem, GetItem, Item,
    KeysAndAttributes, PutItem, Query, ReturnValues, ScalarType, Scan, Store, StoreError, TableDescription,
    TransactGet, TransactGetItems, TransactWrite, TransactWriteItems, UpdateItem, WriteRequest,
};

use crate::error::{Error, ItemFailure, Result};
use crate::expr::{self, Condition, KeyCondition, Projection, Renderer, SortCondition, Update, attr};
use crate::key::KeyError;
use crate::pattern::{now_ms, ttl_timestamp};
use crate::record::{EntityItem, Record};
use crate::schema::{Entity, EntityKey, Generated, Index, KeyPart, Schema};

/// Capacity consumed by the operations of a table, summed over every response.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capacity {
    /// Requests sent (each page, batch chunk and retry counts).
    pub requests: u64,
    /// Read units.
    pub read_units: f64,
    /// Write units.
    pub write_units: f64,
    /// All units: table plus indexes.
    pub total_units: f64,
    /// Units spent on the table itself.
    pub table_units: f64,
    /// Units per secondary index.
    pub index_units: BTreeMap<String, f64>,
}

impl Capacity {
    /// Adds one response's consumed capacity.
    pub fn add(&mut self, c: &ConsumedCapacity) {
        self.read_units += c.read_capacity_units;
        self.write_units += c.write_capacity_units;
        self.total_units += c.capacity_units;
        self.table_units += c.table_units;
        for (name, units) in c.global_indexes.iter().chain(&c.local_indexes) {
            *self.index_units.entry(name.clone()).or_default() += units;
        }
    }
}

/// How unprocessed batch items are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The wait before the first retry; it doubles after each one.
    pub base_delay: Duration,
    /// The longest wait.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 10, base_delay: Duration::from_millis(20), max_delay: Duration::from_secs(2) }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (from 0): exponential, capped, and jittered
    /// to between half and all of it, so that clients throttled together do not retry
    /// together. The randomness comes from a fresh ULID's random bits.
    fn delay(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        let full = self.base_delay.saturating_mul(factor).min(self.max_delay);
        let permille = 500 + (ulid::Ulid::new().random() % 501) as u32;
        full.saturating_mul(permille) / 1000
    }
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// A table: a store, a schema, a clock and a capacity meter. Cheap to clone.
#[derive(Clone)]
pub struct Table {
    store: Arc<dyn Store>,
    schema: Arc<Schema>,
    clock: Clock,
    meter: Arc<Mutex<Capacity>>,
    retry: RetryPolicy,
    /// The attribute names only the model writes (keys, entity type), computed once.
    reserved: Arc<BTreeSet<String>>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("table", &self.schema.table_name())
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

/// How a put treats an existing item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutMode {
    /// Overwrite or create.
    Put,
    /// Fail with [`Error::AlreadyExists`] when the item exists.
    Create,
    /// Fail with [`Error::NotFound`] when the item does not exist.
    Replace,
}

impl Table {
    /// A table on `store` described by `schema`, with the system clock.
    pub fn new(store: Arc<dyn Store>, schema: Schema) -> Self {
        let mut reserved: BTreeSet<String> = schema.table().key_attributes().into_iter().map(|k| k.name).collect();
        reserved.insert(schema.entity_type_attribute().to_string());
        Table {
            store,
            schema: Arc::new(schema),
            clock: Arc::new(now_ms),
            meter: Arc::default(),
            retry: RetryPolicy::default(),
            reserved: Arc::new(reserved),
        }
    }

    /// Uses `clock` (epoch milliseconds) for timestamps and TTLs; for tests and replays.
    pub fn with_clock(mut self, clock: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets how unprocessed batch items are retried.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The same table with a fresh capacity meter, to measure a piece of work on its own.
    pub fn metered(&self) -> Table {
        Table { meter: Arc::default(), ..self.clone() }
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The capacity consumed so far through this meter.
    pub fn capacity(&self) -> Capacity {
        lock(&self.meter).clone()
    }

    /// Returns the capacity consumed so far and starts again from zero.
    pub fn reset_capacity(&self) -> Capacity {
        std::mem::take(&mut *lock(&self.meter))
    }

    fn record(&self, c: &ConsumedCapacity) {
        let mut m = lock(&self.meter);
        m.requests += 1;
        m.add(c);
    }

    fn record_all(&self, cs: &[ConsumedCapacity]) {
        let mut m = lock(&self.meter);
        m.requests += 1;
        cs.iter().for_each(|c| m.add(c));
    }

    fn now(&self) -> i64 {
        (self.clock)()
    }

    /// Creates the table (and its indexes, TTL and stream) on the store.
    pub async fn create_table(&self) -> Result<TableDescription> {
        Ok(self.store.create_table(self.schema.table().clone()).await?)
    }

    /// The entity named `name`.
    pub fn entity(&self, name: &str) -> Result<&Entity> {
        self.schema.entity(name).ok_or_else(|| Error::UnknownEntity(name.to_string()))
    }

    /// Checks one caller-given attribute against the entity's declaration.
    fn check_attribute(
        &self,
        entity: &Entity,
        reserved: &BTreeSet<String>,
        name: &str,
        value: Option<&AttributeValue>,
    ) -> Result<()> {
        if reserved.contains(name) {
            return Err(Error::ReservedAttribute { entity: entity.name().to_string(), attribute: name.to_string() });
        }
        match entity.attribute(name) {
            None if entity.is_open() => Ok(()),
            None => Err(Error::UndeclaredAttribute { entity: entity.name().to_string(), attribute: name.to_string() }),
            Some(a) => match value {
                Some(v) if !a.ty.matches(v) => Err(Error::WrongType {
                    entity: entity.name().to_string(),
                    attribute: name.to_string(),
                    expected: a.ty.descriptor(),
                    found: v.value_type().descriptor(),
                }),
                _ => Ok(()),
            },
        }
    }

    /// Builds the item a put writes: checks the input, generates ULIDs and timestamps,
    /// applies defaults and the default TTL, checks required attributes, computes every
    /// index key and sets the entity-type attribute. No I/O.
    pub fn build_item(&self, entity: &str, input: Item) -> Result<Item> {
        let entity = self.entity(entity)?;
        let reserved = &self.reserved;
        for (name, value) in &input {
            self.check_attribute(entity, reserved, name, Some(value))?;
        }
        let now = self.now();
        let mut item = input;
        for a in entity.attributes() {
            match a.generated {
                Some(Generated::Ulid) if !item.contains_key(&a.name) => {
                    item.insert(a.name.clone(), new_ulid(now).into());
                }
                Some(Generated::CreatedAt) if !item.contains_key(&a.name) => {
                    item.insert(a.name.clone(), now.into());
                }
                // The update time is the write's time, whatever the caller says.
                Some(Generated::UpdatedAt) => {
                    item.insert(a.name.clone(), now.into());
                }
                _ => {}
            }
            if let Some(d) = &a.default {
                item.entry(a.name.clone()).or_insert_with(|| d.clone());
            }
        }
        if let Some(ttl) = entity.ttl()
            && let (Some(after), false) = (ttl.default_after, item.contains_key(&ttl.attribute))
        {
            item.insert(ttl.attribute.clone(), ttl_timestamp(now, after).into());
        }
        for a in entity.attributes() {
            if a.required && !item.contains_key(&a.name) {
                return Err(Error::MissingAttribute { entity: entity.name().to_string(), attribute: a.name.clone() });
            }
        }
        let keys = entity
            .index_keys(&item)
            .map_err(|source| key_error(entity, source))?
            .ok_or_else(|| missing_key_field(entity, &Index::Table, &item))?;
        item.extend(keys);
        item.insert(self.schema.entity_type_attribute().to_string(), entity.name().into());
        Ok(item)
    }

    /// The primary key of `entity`'s item with these field values. No I/O.
    pub fn key(&self, entity: &str, fields: &Item) -> Result<Item> {
        let entity = self.entity(entity)?;
        self.primary_key(entity, fields)
    }

    fn primary_key(&self, entity: &Entity, fields: &Item) -> Result<Item> {
        for (name, value) in fields {
            if let Some(a) = entity.attribute(name)
                && !a.ty.matches(value)
            {
                return Err(Error::WrongType {
                    entity: entity.name().to_string(),
                    attribute: name.clone(),
                    expected: a.ty.descriptor(),
                    found: value.value_type().descriptor(),
                });
            }
        }
        entity
            .primary_key(fields)
            .map_err(|source| key_error(entity, source))?
            .ok_or_else(|| missing_key_field(entity, &Index::Table, fields))
    }

    fn exists_condition(&self, exists: bool) -> Condition {
        let pk = self.schema.table().key_schema.partition.name.clone();
        if exists { attr(pk).exists() } else { attr(pk).not_exists() }
    }

    /// The `PutItem` request for a put in `mode`, with an optional extra condition. No I/O.
    pub fn prepare_put(
        &self,
        entity: &str,
        input: Item,
        mode: PutMode,
        condition: Option<&Condition>,
    ) -> Result<PutItem> {
        let item = self.build_item(entity, input)?;
        let mode_condition = match mode {
            PutMode::Put => None,
            PutMode::Create => Some(self.exists_condition(false)),
            PutMode::Replace => Some(self.exists_condition(true)),
        };
        let condition = Condition::all(mode_condition.into_iter().chain(condition.cloned()));
        let mut request = PutItem::new(self.schema.table_name(), item);
        if let Some(c) = condition {
            let mut r = Renderer::new();
            request.condition = Some(r.condition(&c));
            request.attrs = r.finish();
        }
        Ok(request)
    }

    /// Puts an item of `entity` (overwriting any item with the same key).
    pub async fn put(&self, entity: &str, input: Item) -> Result<Record> {
        self.put_with(entity, input, PutMode::Put, None).await
    }

    /// Creates an item; fails with [`Error::AlreadyExists`] when one has the same key.
    pub async fn create(&self, entity: &str, input: Item) -> Result<Record> {
        self.put_with(entity, input, PutMode::Create, None).await
    }

    /// Replaces an existing item; fails with [`Error::NotFound`] when there is none.
    pub async fn replace(&self, entity: &str, input: Item) -> Result<Record> {
        self.put_with(entity, input, PutMode::Replace, None).await
    }

    /// Puts in `mode`, with an optional extra condition, like [`put_with`](Self::put_with), but
    /// answers only whether it worked: the hot paths (an event per request) need no copy of the
    /// item back.
    pub async fn write(&self, entity: &str, input: Item, mode: PutMode, condition: Option<&Condition>) -> Result<()> {
        let request = self.prepare_put(entity, input, mode, condition)?;
        self.send_put(entity, request, mode, condition).await
    }

    async fn send_put(
        &self,
        entity: &str,
        request: PutItem,
        mode: PutMode,
        condition: Option<&Condition>,
    ) -> Result<()> {
        match self.store.put_item(request).await {
            Ok(out) => {
                self.record(&out.consumed_capacity);
                Ok(())
            }
            Err(e) if e.is_condition_failed() && condition.is_none() => Err(match mode {
                PutMode::Create => Error::AlreadyExists { entity: entity.to_string() },
                _ => Error::NotFound { entity: entity.to_string() },
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Puts in `mode`, with an optional extra condition.
    pub async fn put_with(
        &self,
        entity: &str,
        input: Item,
        mode: PutMode,
        condition: Option<&Condition>,
    ) -> Result<Record> {
        let request = self.prepare_put(entity, input, mode, condition)?;
        let item = request.item.clone();
        self.send_put(entity, request, mode, condition).await?;
        Ok(Record::new(entity, item))
    }

    /// Gets an item by the fields of its table key.
    pub async fn get(&self, entity: &str, key_fields: Item) -> Result<Option<Record>> {
        self.get_with(entity, key_fields, false).await
    }

    /// Gets an item, optionally with a strongly consistent read.
    pub async fn get_with(&self, entity: &str, key_fields: Item, consistent: bool) -> Result<Option<Record>> {
        let e = self.entity(entity)?;
        let key = self.primary_key(e, &key_fields)?;
        let mut request = GetItem::new(self.schema.table_name(), key);
        request.consistent_read = consistent;
        let out = self.store.get_item(request).await?;
        self.record(&out.consumed_capacity);
        out.item.map(|item| self.decode_as(e, item)).transpose()
    }

    /// Decodes an item read for `entity`, checking its entity-type attribute.
    fn decode_as(&self, entity: &Entity, item: Item) -> Result<Record> {
        match item.get(self.schema.entity_type_attribute()) {
            Some(AttributeValue::S(et)) if et != entity.name() => {
                Err(Error::Decode { what: entity.name().to_string(), reason: format!("the item is a {et}") })
            }
            _ => Ok(Record::new(entity.name(), item)),
        }
    }

    /// Decodes an item read from `index`: by its entity-type attribute, or, when the index
    /// does not project it, by which entity's key templates its keys match.
    pub fn decode(&self, index: &Index, item: Item) -> Result<Record> {
        match self.record_from(index, item) {
            Some(record) => Ok(record),
            None => Err(Error::Decode { what: "item".into(), reason: "it belongs to no entity of the schema".into() }),
        }
    }

    /// The entity an item belongs to.
    pub fn identify(&self, index: &Index, item: &Item) -> Option<String> {
        if let Some(AttributeValue::S(et)) = item.get(self.schema.entity_type_attribute()) {
            return self.schema.entity(et).map(|e| e.name().to_string());
        }
        self.schema
            .entities_on(index)
            .find(|e| {
                e.key(index).is_some_and(|k| {
                    std::iter::once(k.partition_part()).chain(k.sort_part()).all(|p| part_matches(p, item))
                })
            })
            .map(|e| e.name().to_string())
    }

    /// Identifies an item read from `index` and returns it as a record, with the fields its
    /// keys encode filled in when the index did not project them (a keys-only index still
    /// yields the fields of its key templates).
    pub fn record_from(&self, index: &Index, mut item: Item) -> Option<Record> {
        let name = self.identify(index, &item)?;
        let entity = self.schema.entity(&name)?;
        let keys = [Some(entity.table_key()), entity.key(index)];
        for key in keys.into_iter().flatten() {
            for part in std::iter::once(key.partition_part()).chain(key.sort_part()) {
                fill_fields(entity, part, &mut item);
            }
        }
        Some(Record::new(name, item))
    }

    /// The `UpdateItem` request for an update. No I/O.
    ///
    /// The update may not touch key attributes, the entity-type attribute or fields of the
    /// table key. When it touches a field of a secondary index's key, it must set every
    /// field of that key (so the index key can be recomputed) or remove one (so the item
    /// leaves the sparse index). The update time and the default TTL are set. Unless
    /// `upsert`, the item must exist; with `upsert`, a missing item is created with its
    /// key fields, entity type, creation time, defaults and generated ids (required
    /// attributes cannot be checked then, since the stored item is not known).
    pub fn prepare_update(
        &self,
        entity: &str,
        key_fields: &Item,
        update: &Update,
        condition: Option<&Condition>,
        upsert: bool,
    ) -> Result<UpdateItem> {
        let e = self.entity(entity)?;
        let key = self.primary_key(e, key_fields)?;
        let invalid = |reason: String| Error::InvalidUpdate { entity: entity.to_string(), reason };
        let reserved = &self.reserved;
        let table_fields = e.table_key().fields();
        let plain: BTreeMap<&str, &AttributeValue> = update.plain_sets().collect();
        for target in update.targets() {
            self.check_attribute(e, reserved, target, plain.get(target).copied())?;
            if table_fields.contains(target) {
                return Err(invalid(format!("`{target}` is part of the table key; write a new item instead")));
            }
        }
        // Only whole attributes removed count: removing a path inside a map leaves it.
        let removed: BTreeSet<&str> =
            update.targets().into_iter().filter(|t| update.removes(t) && !update.sets(t)).collect();
        for a in e.attributes() {
            if a.required && removed.contains(a.name.as_str()) {
                return Err(invalid(format!("`{}` is required and cannot be removed", a.name)));
            }
        }

        let now = self.now();
        let mut full = update.clone();
        let touched: BTreeSet<String> = update.targets().iter().map(|s| s.to_string()).collect();
        if let Some(a) = e.updated_at()
            && !touched.contains(&a.name)
        {
            full = full.set(a.name.as_str(), now);
        }
        if let Some(ttl) = e.ttl()
            && let (Some(after), false) = (ttl.default_after, touched.contains(&ttl.attribute))
        {
            full = full.set(ttl.attribute.as_str(), ttl_timestamp(now, after));
        }
        if upsert {
            full = full.set(self.schema.entity_type_attribute(), e.name());
            for (name, value) in key_fields {
                if table_fields.contains(name.as_str()) && !touched.contains(name) {
                    full = full.set(name.as_str(), value.clone());
                }
            }
            for a in e.attributes() {
                if touched.contains(&a.name) || key_fields.contains_key(&a.name) {
                    continue;
                }
                match (&a.default, a.generated) {
                    (Some(d), _) => full = full.set_if_absent(a.name.as_str(), d.clone()),
                    (None, Some(Generated::CreatedAt)) => full = full.set_if_absent(a.name.as_str(), now),
                    (None, Some(Generated::Ulid)) => full = full.set_if_absent(a.name.as_str(), new_ulid(now)),
                    _ => {}
                }
            }
        }

        // Secondary index key attributes whose fields the update touches are recomputed,
        // one key attribute at a time: a part the update does not touch keeps its value.
        let mut known: Item = key_fields.clone();
        known.extend(plain.iter().map(|(k, v)| (k.to_string(), (*v).clone())));
        for k in e.keys().iter().filter(|k| k.index != Index::Table) {
            let key_hit = k.fields().iter().any(|f| touched.contains(*f));
            // An upsert may be creating the item, so it writes every index key it can
            // compute, touched or not (the values are the same on an existing item).
            if !key_hit && !upsert {
                continue;
            }
            // Removing any field of the key takes the item out of the (sparse) index.
            if k.fields().iter().any(|f| removed.contains(f)) {
                for part in k.written() {
                    full = full.remove(part.attribute);
                }
                continue;
            }
            for part in k.written() {
                let fields: Vec<&str> = part.template.fields().collect();
                let hit: Vec<&str> = fields.iter().copied().filter(|f| touched.contains(*f)).collect();
                let missing: Vec<&str> = fields.iter().copied().filter(|f| !known.contains_key(*f)).collect();
                // A part the update does not touch is still written when all its fields are
                // known: the item may be entering a sparse index it was not in, and an
                // index only holds items that have every one of its key attributes.
                if hit.is_empty() && !missing.is_empty() {
                    continue;
                }
                if !missing.is_empty() {
                    return Err(invalid(format!(
                        "`{}` is part of `{}` (`{}` on `{}`), so the update must also set {} to plain values",
                        hit.join("`, `"),
                        part.attribute,
                        part.template,
                        k.index,
                        missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                    )));
                }
                match part.render(&known).map_err(|source| key_error(e, source))? {
                    Some(v) => full = full.set(part.attribute, v),
                    None => full = full.remove(part.attribute),
                }
            }
        }

        if full.is_empty() {
            return Err(invalid("the update has no action".into()));
        }
        let condition =
            Condition::all((!upsert).then(|| self.exists_condition(true)).into_iter().chain(condition.cloned()));
        let mut r = Renderer::new();
        let text = r.update(&full);
        let mut request = UpdateItem::new(self.schema.table_name(), key, text).return_values(ReturnValues::AllNew);
        if let Some(c) = condition {
            request.condition = Some(r.condition(&c));
        }
        request.attrs = r.finish();
        Ok(request)
    }

    /// Updates an existing item; fails with [`Error::NotFound`] when there is none.
    /// Returns the item after the update.
    pub async fn update(&self, entity: &str, key_fields: Item, update: Update) -> Result<Record> {
        self.update_with(entity, key_fields, update, None, false).await
    }

    /// Updates an item, creating it when absent (counters, aggregates).
    pub async fn upsert(&self, entity: &str, key_fields: Item, update: Update) -> Result<Record> {
        self.update_with(entity, key_fields, update, None, true).await
    }

    /// Updates with an optional extra condition; `upsert` creates a missing item.
    pub async fn update_with(
        &self,
        entity: &str,
        key_fields: Item,
        update: Update,
        condition: Option<&Condition>,
        upsert: bool,
    ) -> Result<Record> {
        let request = self.prepare_update(entity, &key_fields, &update, condition, upsert)?;
        match self.store.update_item(request).await {
            Ok(out) => {
                self.record(&out.consumed_capacity);
                Ok(Record::new(entity, out.attributes.unwrap_or_default()))
            }
            Err(e) if e.is_condition_failed() && condition.is_none() && !upsert => {
                Err(Error::NotFound { entity: entity.to_string() })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The `DeleteItem` request for a delete. No I/O.
    pub fn prepare_delete(&self, entity: &str, key_fields: &Item, condition: Option<&Condition>) -> Result<DeleteItem> {
        let e = self.entity(entity)?;
        let key = self.primary_key(e, key_fields)?;
        let mut request = DeleteItem::new(self.schema.table_name(), key).return_values(ReturnValues::AllOld);
        if let Some(c) = condition {
            let mut r = Renderer::new();
            request.condition = Some(r.condition(c));
            request.attrs = r.finish();
        }
        Ok(request)
    }

    /// Deletes an item; returns it, or `None` when there was none.
    pub async fn delete(&self, entity: &str, key_fields: Item) -> Result<Option<Record>> {
        self.delete_with(entity, key_fields, None).await
    }

    /// Deletes an item if `condition` holds.
    pub async fn delete_with(
        &self,
        entity: &str,
        key_fields: Item,
        condition: Option<&Condition>,
    ) -> Result<Option<Record>> {
        let request = self.prepare_delete(entity, &key_fields, condition)?;
        let out = self.store.delete_item(request).await?;
        self.record(&out.consumed_capacity);
        Ok(out.attributes.map(|item| Record::new(entity, item)))
    }

    /// Creates a typed item; returns it as stored (with generated fields).
    pub async fn create_typed<T: EntityItem>(&self, value: &T) -> Result<T> {
        self.create(T::ENTITY, value.to_item()).await?.decode()
    }

    /// Puts a typed item; returns it as stored.
    pub async fn put_typed<T: EntityItem>(&self, value: &T) -> Result<T> {
        self.put(T::ENTITY, value.to_item()).await?.decode()
    }

    /// Gets a typed item by the fields of its table key.
    pub async fn get_typed<T: EntityItem>(&self, key_fields: Item) -> Result<Option<T>> {
        self.get(T::ENTITY, key_fields).await?.map(|r| r.decode()).transpose()
    }

    /// Starts a query for one entity (on the table unless [`QueryBuilder::index`] says otherwise).
    pub fn query(&self, entity: &str) -> QueryBuilder {
        QueryBuilder::new(self.clone(), vec![entity.to_string()])
    }

    /// Starts a collection query: one query returning several entities that share a partition.
    pub fn collection(&self, entities: &[&str]) -> QueryBuilder {
        QueryBuilder::new(self.clone(), entities.iter().map(|s| s.to_string()).collect())
    }

    /// Starts a scan of the whole table.
    pub fn scan(&self) -> ScanBuilder {
        ScanBuilder {
            table: self.clone(),
            index: None,
            entities: Vec::new(),
            filter: None,
            segments: 1,
            page_size: None,
            consistent: false,
        }
    }

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
                if attempt > 0 {
                    if attempt >= self.retry.max_attempts {
                        return Err(Error::Unprocessed {
                            operation: "batch_get",
                            remaining: pending.len(),
                            attempts: attempt,
                        });
                    }
                    tokio::time::sleep(self.retry.delay(attempt - 1)).await;
                }
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
        for chunk in requests.chunks(store::limits::MAX_BATCH_WRITE) {
            let mut pending = chunk.to_vec();
            let mut attempt = 0;
            while !pending.is_empty() {
                if attempt > 0 {
                    if attempt >= self.retry.max_attempts {
                        return Err(Error::Unprocessed {
                            operation: "batch_write",
                            remaining: pending.len(),
                            attempts: attempt,
                        });
                    }
                    tokio::time::sleep(self.retry.delay(attempt - 1)).await;
                }
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

/// A new ULID whose time part is the table clock's `now_ms`, so that ids sort with the
/// timestamps written beside them, replays and imports included.
fn new_ulid(now_ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(now_ms).unwrap_or(0));
    ulid::Ulid::from_datetime(at).to_string()
}

fn key_error(entity: &Entity, source: KeyError) -> Error {
    Error::Key { entity: entity.name().to_string(), source }
}

fn missing_key_field(entity: &Entity, index: &Index, fields: &Item) -> Error {
    let field = entity
        .key(index)
        .map(|k| k.fields())
        .unwrap_or_default()
        .into_iter()
        .find(|f| !fields.contains_key(*f))
        .unwrap_or_default()
        .to_string();
    Error::MissingKeyField { entity: entity.name().to_string(), index: index.label().to_string(), field }
}

/// Decodes the fields of one key attribute into `item` where they are missing.
fn fill_fields(entity: &Entity, part: KeyPart<'_>, item: &mut Item) {
    // Items written whole hold every field already: nothing to decode (the common case, and a
    // dashboard reads thousands of items).
    if part.template.fields().all(|f| item.contains_key(f)) {
        return;
    }
    if part.ty != ScalarType::S {
        if let (Some(field), Some(value)) = (part.template.single_field(), item.get(part.attribute)) {
            let value = value.clone();
            item.entry(field.to_string()).or_insert(value);
        }
        return;
    }
    let Some(AttributeValue::S(s)) = item.get(part.attribute) else {
        return;
    };
    let Some(fields) = part.template.match_key(s) else {
        return;
    };
    let widths: BTreeMap<&str, Option<usize>> = part
        .template
        .segments()
        .iter()
        .filter_map(|seg| match seg {
            crate::key::Segment::Field { name, width } => Some((name.as_str(), *width)),
            crate::key::Segment::Literal(_) => None,
        })
        .collect();
    let decoded: Vec<(String, AttributeValue)> = fields
        .into_iter()
        .filter(|(name, _)| !item.contains_key(*name))
        .filter_map(|(name, segment)| {
            let kind = entity.attribute(name)?.ty.segment_kind()?;
            let width = widths.get(name).copied().flatten();
            crate::key::decode_value(kind, segment, width).ok().map(|v| (name.to_string(), v))
        })
        .collect();
    item.extend(decoded);
}

/// Whether an item's key attribute could have been rendered by `part`.
fn part_matches(part: KeyPart<'_>, item: &Item) -> bool {
    match (item.get(part.attribute), part.ty) {
        (Some(AttributeValue::S(s)), ScalarType::S) => part.template.match_key(s).is_some(),
        (Some(v), ty) => ty.matches(v),
        (None, _) => false,
    }
}

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

/// One page of query or scan results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// The records of the page.
    pub records: Vec<Record>,
    /// Where the next page starts, if there may be one.
    pub last_evaluated_key: Option<Item>,
    /// Items read before filtering.
    pub scanned_count: usize,
    /// Capacity this page consumed.
    pub consumed_capacity: ConsumedCapacity,
}

/// The records of a collection query, by entity name (every requested entity is present).
pub type Collection = BTreeMap<String, Vec<Record>>;

/// A range over the sort key, expressed with field values.
#[derive(Clone, Debug, PartialEq)]
enum Range {
    Between(Item, Item),
    Gt(Item),
    Ge(Item),
    Lt(Item),
    Le(Item),
}

/// Builds a query; see [`Table::query`] and [`Table::collection`].
#[derive(Clone, Debug)]
pub struct QueryBuilder {
    table: Table,
    entities: Vec<String>,
    index: Option<String>,
    fields: Item,
    range: Option<Range>,
    filter: Option<Condition>,
    descending: bool,
    page_size: Option<u32>,
    limit: Option<usize>,
    start: Option<Item>,
    consistent: bool,
    projection: Option<Projection>,
}

/// A sort key bound, with padding that sorts after any key with a prefix: the largest
/// Unicode scalar value repeated to DynamoDB's sort key size limit.
fn upper_bound_of_prefix(prefix: &str) -> String {
    let room = store::limits::MAX_SORT_KEY_BYTES.saturating_sub(prefix.len()) / 4;
    let mut out = prefix.to_string();
    out.extend(std::iter::repeat_n('\u{10FFFF}', room.max(1)));
    out
}

impl QueryBuilder {
    fn new(table: Table, entities: Vec<String>) -> Self {
        QueryBuilder {
            table,
            entities,
            index: None,
            fields: Item::new(),
            range: None,
            filter: None,
            descending: false,
            page_size: None,
            limit: None,
            start: None,
            consistent: false,
            projection: None,
        }
    }

    /// Queries a secondary index.
    pub fn index(mut self, index: &str) -> Self {
        self.index = Some(index.to_string());
        self
    }

    /// Field values: all the partition key's fields, and optionally leading fields of the
    /// sort key (selecting the keys that begin with them).
    pub fn key(mut self, fields: Item) -> Self {
        self.fields.extend(fields);
        self
    }

    /// Sort keys from the one made of `lo` (plus the key fields) to the one made of `hi`,
    /// inclusive; partial field lists cover every key that begins with them.
    pub fn between(mut self, lo: Item, hi: Item) -> Self {
        self.range = Some(Range::Between(lo, hi));
        self
    }

    /// Sort keys after every key made of these fields.
    pub fn after(mut self, fields: Item) -> Self {
        self.range = Some(Range::Gt(fields));
        self
    }

    /// Sort keys from the first key made of these fields on.
    pub fn from(mut self, fields: Item) -> Self {
        self.range = Some(Range::Ge(fields));
        self
    }

    /// Sort keys before every key made of these fields.
    pub fn before(mut self, fields: Item) -> Self {
        self.range = Some(Range::Lt(fields));
        self
    }

    /// Sort keys up to the last key made of these fields.
    pub fn until(mut self, fields: Item) -> Self {
        self.range = Some(Range::Le(fields));
        self
    }

    /// Adds a filter (applied after reading; it does not reduce the read cost).
    pub fn filter(mut self, condition: Condition) -> Self {
        self.filter = Some(match self.filter.take() {
            Some(f) => f.and(condition),
            None => condition,
        });
        self
    }

    /// Reads in descending sort key order.
    pub fn descending(mut self) -> Self {
        self.descending = true;
        self
    }

    /// Items read per request (DynamoDB's `Limit`, counted before filtering).
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Stops after this many records in all; the last page's key then resumes after the
    /// last record returned.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Resumes after this key (a page's `last_evaluated_key`).
    pub fn start_after(mut self, key: Option<Item>) -> Self {
        self.start = key;
        self
    }

    /// Asks for strongly consistent reads (table and local indexes only).
    pub fn consistent(mut self) -> Self {
        self.consistent = true;
        self
    }

    /// Returns only these attributes (plus the keys and the entity type, always).
    pub fn projection(mut self, projection: Projection) -> Self {
        self.projection = Some(projection);
        self
    }

    fn resolve(&self) -> Result<(Index, Vec<&Entity>)> {
        let schema = self.table.schema();
        let index = schema.index(self.index.as_deref()).ok_or_else(|| Error::UnknownIndex {
            entity: self.entities.join(", "),
            index: self.index.clone().unwrap_or_default(),
        })?;
        if self.entities.is_empty() {
            return Err(Error::InvalidQuery("no entity to query".into()));
        }
        let mut entities = Vec::new();
        for name in &self.entities {
            let e = self.table.entity(name)?;
            if e.key(&index).is_none() {
                return Err(Error::UnknownIndex { entity: name.clone(), index: index.label().to_string() });
            }
            entities.push(e);
        }
        Ok((index, entities))
    }

    /// Whether the index stores the entity-type attribute, so it can be filtered on.
    fn projects_entity_type(&self, index: &Index) -> bool {
        let table = self.table.schema().table();
        let et = self.table.schema().entity_type_attribute();
        let projection = match index {
            Index::Table => return true,
            Index::Global(n) => table.global_indexes.iter().find(|g| &g.name == n).map(|g| &g.projection),
            Index::Local(n) => table.local_indexes.iter().find(|l| &l.name == n).map(|l| &l.projection),
        };
        match projection {
            Some(store::Projection::All) => true,
            Some(store::Projection::Include(names)) => names.iter().any(|n| n == et),
            _ => false,
        }
    }

    /// The sort bound for `fields` merged over the key fields: the exact key when complete,
    /// else the prefix (lower) or the prefix padded to sort after all its keys (upper).
    fn bound(&self, entity: &Entity, key: &EntityKey, extra: &Item, upper: bool) -> Result<Option<AttributeValue>> {
        let Some(part) = key.sort_part() else {
            return Ok(None);
        };
        let mut fields = self.fields.clone();
        fields.extend(extra.clone());
        if part.ty != ScalarType::S {
            let field = part.template.single_field().unwrap_or_default();
            return Ok(fields.get(field).cloned());
        }
        let (prefix, complete) =
            part.template.render_prefix(|f| fields.get(f)).map_err(|source| key_error(entity, source))?;
        Ok(match (complete, prefix.is_empty(), upper) {
            (true, _, _) => Some(prefix.into()),
            (false, true, _) => None,
            (false, false, false) => Some(prefix.into()),
            (false, false, true) => Some(upper_bound_of_prefix(&prefix).into()),
        })
    }

    /// The first request this query sends (later pages add `ExclusiveStartKey`). No I/O.
    pub fn request(&self) -> Result<Query> {
        Ok(self.build()?.0)
    }

    /// Builds the first request, the index and the entity names to keep.
    fn build(&self) -> Result<(Query, Index, Vec<String>, bool)> {
        let (index, entities) = self.resolve()?;
        let first = entities[0];
        let first_key = first.key(&index).ok_or_else(|| Error::InvalidQuery("no key".into()))?;
        let pk_part = first_key.partition_part();
        let pk = pk_part
            .render(&self.fields)
            .map_err(|source| key_error(first, source))?
            .ok_or_else(|| missing_key_field(first, &index, &self.fields))?;
        for e in &entities[1..] {
            let k = e.key(&index).ok_or_else(|| Error::InvalidQuery("no key".into()))?;
            let other = k.partition_part().render(&self.fields).map_err(|source| key_error(e, source))?;
            if other.as_ref() != Some(&pk) {
                return Err(Error::InvalidQuery(format!(
                    "`{}` and `{}` do not share a partition on `{index}` for these fields",
                    first.name(),
                    e.name()
                )));
            }
        }
        let mut kc = KeyCondition::partition(pk_part.attribute, pk);
        let sort_attribute = first_key.sort_attribute.clone();
        let sort = match (&self.range, entities.len()) {
            (Some(_), n) if n > 1 => {
                return Err(Error::InvalidQuery("ranges apply to single-entity queries".into()));
            }
            (Some(range), _) => {
                let b = |extra: &Item, upper: bool| self.bound(first, first_key, extra, upper);
                match range {
                    Range::Between(lo, hi) => match (b(lo, false)?, b(hi, true)?) {
                        (Some(lo), Some(hi)) => Some(SortCondition::Between(lo, hi)),
                        (None, Some(hi)) => Some(SortCondition::Le(hi)),
                        (Some(lo), None) => Some(SortCondition::Ge(lo)),
                        (None, None) => None,
                    },
                    Range::Gt(f) => b(f, true)?.map(SortCondition::Gt),
                    Range::Ge(f) => b(f, false)?.map(SortCondition::Ge),
                    Range::Lt(f) => b(f, false)?.map(SortCondition::Lt),
                    Range::Le(f) => b(f, true)?.map(SortCondition::Le),
                }
            }
            (None, 1) => {
                let empty = Item::new();
                match (self.bound(first, first_key, &empty, false)?, first_key.sort_part()) {
                    (None, _) | (_, None) => None,
                    (Some(lo), Some(part)) => {
                        let complete = part.ty != ScalarType::S
                            || part.template.render_prefix(|f| self.fields.get(f)).map(|(_, c)| c).unwrap_or(false);
                        if complete { Some(SortCondition::Eq(lo)) } else { Some(SortCondition::BeginsWith(lo)) }
                    }
                }
            }
            (None, _) => {
                let empty = Item::new();
                let mut lo: Option<AttributeValue> = None;
                let mut hi: Option<AttributeValue> = None;
                let mut bounded = true;
                for e in &entities {
                    let k = e.key(&index).ok_or_else(|| Error::InvalidQuery("no key".into()))?;
                    match (self.bound(e, k, &empty, false)?, self.bound(e, k, &empty, true)?) {
                        (Some(l), Some(h)) => {
                            lo = Some(lo.map_or(l.clone(), |x| x.min(l)));
                            hi = Some(hi.map_or(h.clone(), |x| x.max(h)));
                        }
                        _ => bounded = false,
                    }
                }
                match (bounded, lo, hi) {
                    (true, Some(lo), Some(hi)) if lo == hi => Some(SortCondition::Eq(lo)),
                    (true, Some(lo), Some(hi)) => Some(SortCondition::Between(lo, hi)),
                    _ => None,
                }
            }
        };
        if let (Some(sk), Some(cond)) = (sort_attribute, sort) {
            kc = kc.sort(sk, cond);
        }

        let names: Vec<String> = entities.iter().map(|e| e.name().to_string()).collect();
        let server_filter = self.projects_entity_type(&index);
        let et = self.table.schema().entity_type_attribute();
        let type_filter = server_filter.then(|| {
            if names.len() == 1 {
                attr(et).eq(names[0].as_str())
            } else {
                attr(et).is_in(names.iter().map(|n| n.as_str()))
            }
        });
        let filter = Condition::all(type_filter.into_iter().chain(self.filter.clone()));

        let mut r = Renderer::new();
        let mut query = Query::new(self.table.schema().table_name(), r.key_condition(&kc));
        query.index = index.name().map(str::to_string);
        if let Some(f) = &filter {
            query.filter = Some(r.condition(f));
        }
        if let Some(p) = &self.projection {
            let mut paths = p.0.clone();
            let always = self
                .table
                .schema()
                .table()
                .index_key_schema(index.name())
                .into_iter()
                .flat_map(|k| k.attributes().map(|a| a.name.clone()).collect::<Vec<_>>())
                .chain(self.table.schema().table().key_schema.attributes().map(|a| a.name.clone()))
                // Asking a global index for an attribute it does not project is an error, so
                // the entity type is only added where the index stores it.
                .chain(server_filter.then(|| et.to_string()));
            for name in always {
                let path = expr::Path::new(name);
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
            query.projection = Some(r.projection(&Projection(paths)));
        }
        query.attrs = r.finish();
        query.scan_forward = !self.descending;
        query.limit = self.page_size;
        query.exclusive_start_key = self.start.clone();
        query.consistent_read = self.consistent;
        Ok((query, index, names, server_filter))
    }

    /// The pages, following `LastEvaluatedKey` to the end (or to the limit).
    pub fn pages(self) -> BoxStream<'static, Result<Page>> {
        let built = self.build();
        let table = self.table.clone();
        let limit = self.limit;
        let (query, index, names, _) = match built {
            Ok(b) => b,
            Err(e) => return stream::once(async move { Err(e) }).boxed(),
        };
        let state = PageState { next: Some(query), remaining: limit };
        stream::unfold(state, move |mut state| {
            let table = table.clone();
            let index = index.clone();
            let names = names.clone();
            async move {
                let query = state.next.take()?;
                if state.remaining == Some(0) {
                    return None;
                }
                let start = query.clone();
                let out = match table.store.query(query).await {
                    Ok(out) => out,
                    Err(e) => return Some((Err(e.into()), state)),
                };
                table.record(&out.consumed_capacity);
                let mut records = Vec::with_capacity(out.items.len());
                for item in out.items {
                    match table.record_from(&index, item) {
                        Some(r) if names.iter().any(|n| n == r.entity()) => records.push(r),
                        _ => {}
                    }
                }
                let mut last = out.last_evaluated_key;
                if let Some(rem) = state.remaining.as_mut() {
                    if records.len() >= *rem {
                        records.truncate(*rem);
                        // Resume after the last record returned, not after the page.
                        let resume = records.last().and_then(|r| continuation_key(&table, &index, r.item()));
                        last = if resume.is_some() { resume } else { last };
                        *rem = 0;
                    } else {
                        *rem -= records.len();
                    }
                }
                if let (Some(key), false) = (&last, state.remaining == Some(0)) {
                    state.next = Some(start.start_after(Some(key.clone())));
                }
                let page = Page {
                    records,
                    last_evaluated_key: last,
                    scanned_count: out.scanned_count,
                    consumed_capacity: out.consumed_capacity,
                };
                Some((Ok(page), state))
            }
        })
        .boxed()
    }

    /// The records, one at a time, across pages.
    pub fn items(self) -> BoxStream<'static, Result<Record>> {
        self.pages().map_ok(|p| stream::iter(p.records.into_iter().map(Ok))).try_flatten().boxed()
    }

    /// Every record.
    pub async fn all(self) -> Result<Vec<Record>> {
        self.items().try_collect().await
    }

    /// The first record, if any.
    pub async fn first(self) -> Result<Option<Record>> {
        Ok(self.limit(1).all().await?.into_iter().next())
    }

    /// Every record decoded as `T`.
    pub async fn all_typed<T: EntityItem>(self) -> Result<Vec<T>> {
        self.all().await?.iter().map(Record::decode).collect()
    }

    /// Every record, grouped by entity.
    pub async fn collect(self) -> Result<Collection> {
        let mut out: Collection = self.entities.iter().map(|e| (e.clone(), Vec::new())).collect();
        for r in self.all().await? {
            out.entry(r.entity().to_string()).or_default().push(r);
        }
        Ok(out)
    }
}

struct PageState {
    next: Option<Query>,
    remaining: Option<usize>,
}

/// The key to resume a query after `item`: the table key plus the index key.
fn continuation_key(table: &Table, index: &Index, item: &Item) -> Option<Item> {
    let t = table.schema().table();
    let mut key = t.key_schema.key_of(item)?;
    if let Some(ks) = t.index_key_schema(index.name()) {
        key.extend(ks.key_of(item)?);
    }
    Some(key)
}

/// Builds a scan; see [`Table::scan`].
#[derive(Clone, Debug)]
pub struct ScanBuilder {
    table: Table,
    index: Option<String>,
    entities: Vec<String>,
    filter: Option<Condition>,
    segments: u32,
    page_size: Option<u32>,
    consistent: bool,
}

impl ScanBuilder {
    /// Scans a secondary index.
    pub fn index(mut self, index: &str) -> Self {
        self.index = Some(index.to_string());
        self
    }

    /// Keeps only records of this entity (may be called several times).
    pub fn entity(mut self, entity: &str) -> Self {
        self.entities.push(entity.to_string());
        self
    }

    /// Adds a filter.
    pub fn filter(mut self, condition: Condition) -> Self {
        self.filter = Some(match self.filter.take() {
            Some(f) => f.and(condition),
            None => condition,
        });
        self
    }

    /// Scans in `n` parallel segments (at least 1), merged into one stream.
    pub fn segments(mut self, n: u32) -> Self {
        self.segments = n.max(1);
        self
    }

    /// Items read per request.
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Asks for strongly consistent reads.
    pub fn consistent(mut self) -> Self {
        self.consistent = true;
        self
    }

    fn build(&self) -> Result<(Scan, Index)> {
        let schema = self.table.schema();
        let index = schema.index(self.index.as_deref()).ok_or_else(|| Error::UnknownIndex {
            entity: self.entities.join(", "),
            index: self.index.clone().unwrap_or_default(),
        })?;
        for e in &self.entities {
            self.table.entity(e)?;
        }
        let mut scan = Scan::new(schema.table_name());
        scan.index = index.name().map(str::to_string);
        if let Some(f) = &self.filter {
            let mut r = Renderer::new();
            scan.filter = Some(r.condition(f));
            scan.attrs = r.finish();
        }
        scan.limit = self.page_size;
        scan.consistent_read = self.consistent;
        Ok((scan, index))
    }

    /// The pages of every segment, merged as they arrive. Items of no known entity are
    /// skipped, as are items of other entities when [`ScanBuilder::entity`] was given.
    pub fn pages(self) -> BoxStream<'static, Result<Page>> {
        let (scan, index) = match self.build() {
            Ok(b) => b,
            Err(e) => return stream::once(async move { Err(e) }).boxed(),
        };
        let total = self.segments;
        let segments = (0..total).map(|segment| {
            let table = self.table.clone();
            let index = index.clone();
            let entities = self.entities.clone();
            let mut first = scan.clone();
            if total > 1 {
                first.segment = Some((segment, total));
            }
            stream::unfold(Some(first), move |next| {
                let table = table.clone();
                let index = index.clone();
                let entities = entities.clone();
                async move {
                    let request = next?;
                    let resume = request.clone();
                    let out = match table.store.scan(request).await {
                        Ok(out) => out,
                        Err(e) => return Some((Err(Error::from(e)), None)),
                    };
                    table.record(&out.consumed_capacity);
                    let records = out
                        .items
                        .into_iter()
                        .filter_map(|item| {
                            let record = table.record_from(&index, item)?;
                            (entities.is_empty() || entities.iter().any(|e| e == record.entity())).then_some(record)
                        })
                        .collect();
                    let next = out.last_evaluated_key.clone().map(|k| resume.start_after(Some(k)));
                    let page = Page {
                        records,
                        last_evaluated_key: out.last_evaluated_key,
                        scanned_count: out.scanned_count,
                        consumed_capacity: out.consumed_capacity,
                    };
                    Some((Ok(page), next))
                }
            })
            .boxed()
        });
        stream::select_all(segments).boxed()
    }

    /// Every record, across segments (in no particular order when parallel).
    pub async fn all(self) -> Result<Vec<Record>> {
        self.pages().map_ok(|p| stream::iter(p.records.into_iter().map(Ok))).try_flatten().try_collect().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use expect_test::{Expect, expect};
    use store::{ExpressionAttributes, item};

    use super::*;
    use crate::expr::Update;
    use crate::sample;

    /// A table on an embedded store that the request-building tests never call.
    fn table() -> (tempfile::TempDir, Table) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(store_embedded::EmbeddedStore::open(dir.path()).unwrap());
        let table = Table::new(store, sample::shop("shop")).with_clock(|| 1_733_063_400_000);
        (dir, table)
    }

    fn attrs(a: &ExpressionAttributes) -> String {
        let names: Vec<String> = a.names.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let values: Vec<String> = a.values.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        format!("{} | {}", names.join(" "), values.join(" "))
    }

    fn check_query(q: QueryBuilder, expect: Expect) {
        let shown = match q.request() {
            Ok(r) => format!(
                "{} | key {} | filter {} | {}",
                r.index.as_deref().unwrap_or("table"),
                r.key_condition,
                r.filter.as_deref().unwrap_or("-"),
                attrs(&r.attrs)
            ),
            Err(e) => format!("error: {e}"),
        };
        expect.assert_eq(&shown);
    }

    fn check_update(entity: &str, key: store::Item, u: Update, upsert: bool, expect: Expect) {
        let (_dir, t) = table();
        let shown = match t.prepare_update(entity, &key, &u, None, upsert) {
            Ok(r) => format!("{} | if {} | {}", r.update, r.condition.as_deref().unwrap_or("-"), attrs(&r.attrs)),
            Err(e) => format!("error: {e}"),
        };
        expect.assert_eq(&shown);
    }

    #[test]
    fn query_requests() {
        let (_dir, t) = table();
        let c1 = || item! { "customer_id" => "c1" };
        check_query(
            t.query("Order").key(c1()),
            expect![[
                r#"table | key #pk = :v0 AND begins_with(#sk, :v1) | filter #_0 = :v2 | #_0=_et #pk=pk #sk=sk | :v0=S("CUSTOMER#c1") :v1=S("ORDER#") :v2=S("Order")"#
            ]],
        );
        check_query(
            t.query("Order").key(item! { "customer_id" => "c1", "order_id" => "o1" }),
            expect![[
                r#"table | key #pk = :v0 AND #sk = :v1 | filter #_0 = :v2 | #_0=_et #pk=pk #sk=sk | :v0=S("CUSTOMER#c1") :v1=S("ORDER#o1") :v2=S("Order")"#
            ]],
        );
        check_query(
            t.query("Customer").index("gsi1").key(item! { "email" => "a#b" }),
            expect![[
                r#"gsi1 | key #gsi1pk = :v0 AND #gsi1sk = :v1 | filter #_0 = :v2 | #_0=_et #gsi1pk=gsi1pk #gsi1sk=gsi1sk | :v0=S("EMAIL#a%23b") :v1=S("CUSTOMER") :v2=S("Customer")"#
            ]],
        );
        check_query(
            t.query("Order").index("lsi1").key(item! { "customer_id" => "c1", "status" => "PAID" }),
            expect![[
                r#"lsi1 | key #pk = :v0 AND begins_with(#lsi1sk, :v1) | filter - | #lsi1sk=lsi1sk #pk=pk | :v0=S("CUSTOMER#c1") :v1=S("STATUS#PAID#")"#
            ]],
        );
        check_query(
            t.collection(&["Order", "OrderLine"]).index("gsi1").key(item! { "order_id" => "o1" }),
            expect![[
                r#"gsi1 | key #gsi1pk = :v0 AND #gsi1sk BETWEEN :v1 AND :v2 | filter #_0 IN (:v3, :v4) | #_0=_et #gsi1pk=gsi1pk #gsi1sk=gsi1sk | :v0=S("ORDER#o1") :v1=S("LINE#") :v2=S("ORDER") :v3=S("Order") :v4=S("OrderLine")"#
            ]],
        );
        check_query(
            t.query("Order").key(c1()).filter(crate::expr::attr("total").gt(5)).descending(),
            expect![[
                r#"table | key #pk = :v0 AND begins_with(#sk, :v1) | filter #_0 = :v2 AND #total > :v3 | #_0=_et #pk=pk #sk=sk #total=total | :v0=S("CUSTOMER#c1") :v1=S("ORDER#") :v2=S("Order") :v3=N(Number(5))"#
            ]],
        );
        check_query(
            t.query("Order").key(item! {}),
            expect!["error: Order: field `customer_id` is needed for the key on `table`"],
        );
        check_query(t.query("Product").index("lsi1"), expect!["error: entity `Product` has no key on index `lsi1`"]);
        check_query(
            t.collection(&["Order", "Product"]).key(c1()),
            expect!["error: invalid query: `Order` and `Product` do not share a partition on `table` for these fields"],
        );
        check_query(
            t.query("Order").key(c1()).after(item! { "order_id" => "o1" }).key(item! { "x" => 1 }),
            expect![[
                r#"table | key #pk = :v0 AND #sk > :v1 | filter #_0 = :v2 | #_0=_et #pk=pk #sk=sk | :v0=S("CUSTOMER#c1") :v1=S("ORDER#o1") :v2=S("Order")"#
            ]],
        );
    }

    #[test]
    fn range_bounds_pad_partial_keys() {
        let (_dir, t) = table();
        let q = t
            .query("Order")
            .index("gsi2")
            .key(item! { "status" => "PAID" })
            .between(item! { "created_at" => 5 }, item! { "created_at" => 9 })
            .request()
            .unwrap();
        let hi = q.attrs.values[":v2"].as_s().unwrap().to_string();
        assert_eq!(q.attrs.values[":v1"], AttributeValue::from("ORDER#0000000000005#"));
        assert!(hi.starts_with("ORDER#0000000000009#\u{10FFFF}"));
        assert!(hi.len() <= store::limits::MAX_SORT_KEY_BYTES);
    }

    #[test]
    fn update_requests() {
        let key = || item! { "customer_id" => "c1", "order_id" => "o1" };
        check_update(
            "Order",
            key(),
            Update::new().set("note", "hi"),
            false,
            expect![[
                r#"SET #note = :v0, #updated_at = :v1 | if attribute_exists(#pk) | #note=note #pk=pk #updated_at=updated_at | :v0=S("hi") :v1=N(Number(1733063400000))"#
            ]],
        );
        check_update(
            "Order",
            key(),
            Update::new().set("status", "PAID"),
            false,
            expect![[
                r#"SET #status = :v0, #updated_at = :v1, #gsi2pk = :v2, #lsi1sk = :v3 | if attribute_exists(#pk) | #gsi2pk=gsi2pk #lsi1sk=lsi1sk #pk=pk #status=status #updated_at=updated_at | :v0=S("PAID") :v1=N(Number(1733063400000)) :v2=S("STATUS#PAID") :v3=S("STATUS#PAID#o1")"#
            ]],
        );
        check_update(
            "Product",
            item! { "product_id" => "p" },
            Update::new().remove("category"),
            false,
            expect![
                "SET #updated_at = :v0 REMOVE #category, #gsi2pk, #gsi2sk | if attribute_exists(#pk) | #category=category #gsi2pk=gsi2pk #gsi2sk=gsi2sk #pk=pk #updated_at=updated_at | :v0=N(Number(1733063400000))"
            ],
        );
        check_update(
            "Cart",
            item! { "customer_id" => "c1" },
            Update::new().append("lines", vec!["x".into()]),
            true,
            expect![[
                r#"SET #lines = list_append(if_not_exists(#lines, :v0), :v1), #updated_at = :v2, #expires_at = :v3, #_0 = :v4, #customer_id = :v5, #created_at = if_not_exists(#created_at, :v2) | if - | #_0=_et #created_at=created_at #customer_id=customer_id #expires_at=expires_at #lines=lines #updated_at=updated_at | :v0=L([]) :v1=L([S("x")]) :v2=N(Number(1733063400000)) :v3=N(Number(1733668200)) :v4=S("Cart") :v5=S("c1")"#
            ]],
        );
        check_update(
            "Order",
            key(),
            Update::new().set("total", "x"),
            false,
            expect!["error: Order: attribute `total` must be N, not S"],
        );
        check_update(
            "Order",
            key(),
            Update::new().set("gsi1pk", "x"),
            false,
            expect!["error: Order: attribute `gsi1pk` is computed by the model and cannot be written"],
        );
        check_update(
            "Order",
            item! { "customer_id" => "c1" },
            Update::new(),
            false,
            expect!["error: Order: field `order_id` is needed for the key on `table`"],
        );
        check_update(
            "Order",
            key(),
            Update::new().remove("customer_id"),
            false,
            expect!["error: Order: `customer_id` is part of the table key; write a new item instead"],
        );
    }

    #[test]
    fn put_requests() {
        let (_dir, t) = table();
        let r = t
            .prepare_put("Product", item! { "product_id" => "p", "name" => "n", "price" => 1 }, PutMode::Create, None)
            .unwrap();
        expect!["attribute_not_exists(#pk) | #pk=pk | "].assert_eq(&format!(
            "{} | {}",
            r.condition.unwrap(),
            attrs(&r.attrs)
        ));
        let keys: Vec<&String> = r.item.keys().collect();
        expect![[r#"["_et", "created_at", "name", "pk", "price", "product_id", "sk", "updated_at"]"#]]
            .assert_eq(&format!("{keys:?}"));
        let r = t
            .prepare_put(
                "Product",
                item! { "product_id" => "p", "name" => "n", "price" => 1 },
                PutMode::Replace,
                Some(&crate::expr::attr("price").lt(5)),
            )
            .unwrap();
        expect!["attribute_exists(#pk) AND #price < :v0 | #pk=pk #price=price | :v0=N(Number(5))"].assert_eq(&format!(
            "{} | {}",
            r.condition.unwrap(),
            attrs(&r.attrs)
        ));
        let err = t
            .prepare_put("Order", item! { "customer_id" => "c", "created_at" => store::n("1.5") }, PutMode::Put, None)
            .unwrap_err();
        expect!["Order: field `created_at`: number 1.5 cannot be part of a key (integers only, 0 to 13 digits)"]
            .assert_eq(&err.to_string());
    }
}
