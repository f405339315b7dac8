//! The table handle: its meter and retry policy, item building, and the single-item operations (put, get, update, delete, typed variants), with the helpers that compute keys.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::sync::lock;

use store::{
    AttributeValue, ConsumedCapacity, DeleteItem, GetItem, Item, PutItem, ReturnValues, ScalarType, Store,
    TableDescription, UpdateItem,
};

use super::query::*;
use crate::error::{Error, Result};
use crate::expr::{Condition, Renderer, Update, attr};
use crate::key::KeyError;
use crate::pattern::{now_ms, ttl_timestamp};
use crate::record::{EntityItem, Record};
use crate::schema::{Entity, Generated, Index, KeyPart, Schema};

/// Capacity consumed by the operations of a table, summed over every response.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capacity {
    /// Requests sent (each page, batch chunk and retry counts).
    pub requests: u64,
    /// Read capacity units the responses reported (or the engine metered).
    pub read_units: f64,
    /// Write capacity units, likewise.
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
    pub(super) fn delay(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        let full = self.base_delay.saturating_mul(factor).min(self.max_delay);
        let permille = 500 + (ulid::Ulid::new().random() % 501) as u32;
        full.saturating_mul(permille) / 1000
    }

    /// Before attempt `attempt` (from 0) at `remaining` unprocessed items of `operation`:
    /// nothing the first time, the backoff of [`RetryPolicy::delay`] after, and
    /// [`Error::Unprocessed`] once `max_attempts` are spent.
    pub(super) async fn before_attempt(&self, attempt: u32, operation: &'static str, remaining: usize) -> Result<()> {
        if attempt == 0 {
            return Ok(());
        }
        if attempt >= self.max_attempts {
            return Err(Error::Unprocessed { operation, remaining, attempts: attempt });
        }
        tokio::time::sleep(self.delay(attempt - 1)).await;
        Ok(())
    }
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// A table: a store, a schema, a clock and a capacity meter. Cheap to clone.
#[derive(Clone)]
pub struct Table {
    pub(super) store: Arc<dyn Store>,
    pub(super) schema: Arc<Schema>,
    clock: Clock,
    meter: Arc<Mutex<Capacity>>,
    pub(super) retry: RetryPolicy,
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

    pub(super) fn record(&self, c: &ConsumedCapacity) {
        let mut m = lock(&self.meter);
        m.requests += 1;
        m.add(c);
    }

    /// Records a write its condition refused. DynamoDB charges it as a write of the larger of
    /// the existing item and the new one (at least one unit) but reports no consumed capacity
    /// with the error, so without this a meter would count a refused claim or retry as free.
    /// `new_bytes` is the written item's size where the request holds it (a put), else 0; the
    /// existing item's size is known when the error carries it.
    pub(super) fn record_refused(&self, new_bytes: usize, error: &store::StoreError) {
        let existing = match error {
            store::StoreError::ConditionalCheckFailed { item: Some(item) } => store::item_size(item),
            _ => 0,
        };
        let units = new_bytes.max(existing).div_ceil(store::limits::WRITE_UNIT_BYTES).max(1) as f64;
        self.record(&ConsumedCapacity {
            table: self.schema.table_name().to_owned(),
            capacity_units: units,
            write_capacity_units: units,
            table_units: units,
            ..ConsumedCapacity::default()
        });
    }

    pub(super) fn record_all(&self, cs: &[ConsumedCapacity]) {
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

    pub(super) fn primary_key(&self, entity: &Entity, fields: &Item) -> Result<Item> {
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
        let bytes = store::item_size(&request.item);
        match self.store.put_item(request).await {
            Ok(out) => {
                self.record(&out.consumed_capacity);
                Ok(())
            }
            Err(e) if e.is_condition_failed() => {
                self.record_refused(bytes, &e);
                Err(match (condition, mode) {
                    (None, PutMode::Create) => Error::AlreadyExists { entity: entity.to_string() },
                    (None, _) => Error::NotFound { entity: entity.to_string() },
                    (Some(_), _) => e.into(),
                })
            }
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
    pub(super) fn decode_as(&self, entity: &Entity, item: Item) -> Result<Record> {
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
            Err(e) if e.is_condition_failed() => {
                self.record_refused(0, &e);
                if condition.is_none() && !upsert {
                    return Err(Error::NotFound { entity: entity.to_string() });
                }
                Err(e.into())
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
        let out = match self.store.delete_item(request).await {
            Ok(out) => out,
            Err(e) => {
                if e.is_condition_failed() {
                    self.record_refused(0, &e);
                }
                return Err(e.into());
            }
        };
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
}

/// A new ULID whose time part is the table clock's `now_ms`, so that ids sort with the
/// timestamps written beside them, replays and imports included.
fn new_ulid(now_ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(now_ms).unwrap_or(0));
    ulid::Ulid::from_datetime(at).to_string()
}

pub(super) fn key_error(entity: &Entity, source: KeyError) -> Error {
    Error::Key { entity: entity.name().to_string(), source }
}

pub(super) fn missing_key_field(entity: &Entity, index: &Index, fields: &Item) -> Error {
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
