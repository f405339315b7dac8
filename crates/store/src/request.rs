//! Typed requests and responses, one pair per DynamoDB operation.
//!
//! Expressions travel as DynamoDB expression text with `#name` and `:value` placeholders,
//! exactly as the DynamoDB API takes them: the `model` crate renders typed expressions to
//! this form, and every engine validates and evaluates it the way DynamoDB does.

use std::collections::BTreeMap;

use crate::value::{AttributeValue, Item};

/// Expression attribute names (`#n` → `name`) and values (`:v` → value) of one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExpressionAttributes {
    /// `ExpressionAttributeNames`.
    pub names: BTreeMap<String, String>,
    /// `ExpressionAttributeValues`.
    pub values: BTreeMap<String, AttributeValue>,
}

impl ExpressionAttributes {
    /// Whether there are neither names nor values.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.values.is_empty()
    }
}

/// Adds the `name(…)` and `value(…)` builder methods to a request with an `attrs` field.
macro_rules! expression_builders {
    ($($t:ty),*) => {$(
        impl $t {
            /// Adds an expression attribute name (`#placeholder` → attribute name).
            pub fn name(mut self, placeholder: impl Into<String>, name: impl Into<String>) -> Self {
                self.attrs.names.insert(placeholder.into(), name.into());
                self
            }

            /// Adds an expression attribute value (`:placeholder` → value).
            pub fn value(mut self, placeholder: impl Into<String>, value: impl Into<AttributeValue>) -> Self {
                self.attrs.values.insert(placeholder.into(), value.into());
                self
            }

            /// Replaces all expression attribute names and values.
            pub fn attributes(mut self, attrs: ExpressionAttributes) -> Self {
                self.attrs = attrs;
                self
            }
        }
    )*};
}

/// What a write returns of the item (`ReturnValues`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReturnValues {
    /// Nothing.
    #[default]
    None,
    /// The whole item before the write.
    AllOld,
    /// The updated attributes before the write (update only).
    UpdatedOld,
    /// The whole item after the write (update only).
    AllNew,
    /// The updated attributes after the write (update only).
    UpdatedNew,
}

/// `GetItem`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GetItem {
    /// Table name.
    pub table: String,
    /// The full primary key.
    pub key: Item,
    /// Strongly consistent read (costs twice an eventually consistent one).
    pub consistent_read: bool,
    /// `ProjectionExpression`.
    pub projection: Option<String>,
    /// Placeholders used by the projection.
    pub attrs: ExpressionAttributes,
}

impl GetItem {
    /// Gets the item with `key` from `table`.
    pub fn new(table: impl Into<String>, key: Item) -> Self {
        GetItem { table: table.into(), key, ..Default::default() }
    }

    /// Asks for a strongly consistent read.
    pub fn consistent(mut self) -> Self {
        self.consistent_read = true;
        self
    }

    /// Sets the projection expression.
    pub fn projection(mut self, expr: impl Into<String>) -> Self {
        self.projection = Some(expr.into());
        self
    }
}

/// `PutItem`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PutItem {
    /// Table name.
    pub table: String,
    /// The whole item, keys included.
    pub item: Item,
    /// `ConditionExpression`.
    pub condition: Option<String>,
    /// Placeholders used by the condition.
    pub attrs: ExpressionAttributes,
    /// `ReturnValues`: `None` or `AllOld`.
    pub return_values: ReturnValues,
    /// Return the existing item when the condition fails.
    pub return_old_on_condition_failure: bool,
}

impl PutItem {
    /// Puts `item` into `table`.
    pub fn new(table: impl Into<String>, item: Item) -> Self {
        PutItem { table: table.into(), item, ..Default::default() }
    }

    /// Sets the condition expression.
    pub fn condition(mut self, expr: impl Into<String>) -> Self {
        self.condition = Some(expr.into());
        self
    }

    /// Sets `ReturnValues`.
    pub fn return_values(mut self, rv: ReturnValues) -> Self {
        self.return_values = rv;
        self
    }
}

/// `UpdateItem`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdateItem {
    /// Table name.
    pub table: String,
    /// The full primary key.
    pub key: Item,
    /// `UpdateExpression` (`SET … REMOVE … ADD … DELETE …`).
    pub update: String,
    /// `ConditionExpression`.
    pub condition: Option<String>,
    /// Placeholders used by the update and condition.
    pub attrs: ExpressionAttributes,
    /// `ReturnValues`.
    pub return_values: ReturnValues,
    /// Return the existing item when the condition fails.
    pub return_old_on_condition_failure: bool,
}

impl UpdateItem {
    /// Applies `update` to the item with `key` in `table` (creating it if absent, as DynamoDB does).
    pub fn new(table: impl Into<String>, key: Item, update: impl Into<String>) -> Self {
        UpdateItem { table: table.into(), key, update: update.into(), ..Default::default() }
    }

    /// Sets the condition expression.
    pub fn condition(mut self, expr: impl Into<String>) -> Self {
        self.condition = Some(expr.into());
        self
    }

    /// Sets `ReturnValues`.
    pub fn return_values(mut self, rv: ReturnValues) -> Self {
        self.return_values = rv;
        self
    }
}

/// `DeleteItem`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeleteItem {
    /// Table name.
    pub table: String,
    /// The full primary key.
    pub key: Item,
    /// `ConditionExpression`.
    pub condition: Option<String>,
    /// Placeholders used by the condition.
    pub attrs: ExpressionAttributes,
    /// `ReturnValues`: `None` or `AllOld`.
    pub return_values: ReturnValues,
    /// Return the existing item when the condition fails.
    pub return_old_on_condition_failure: bool,
}

impl DeleteItem {
    /// Deletes the item with `key` from `table`.
    pub fn new(table: impl Into<String>, key: Item) -> Self {
        DeleteItem { table: table.into(), key, ..Default::default() }
    }

    /// Sets the condition expression.
    pub fn condition(mut self, expr: impl Into<String>) -> Self {
        self.condition = Some(expr.into());
        self
    }

    /// Sets `ReturnValues`.
    pub fn return_values(mut self, rv: ReturnValues) -> Self {
        self.return_values = rv;
        self
    }
}

/// `ConditionCheck`, inside a transaction only.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConditionCheck {
    /// Table name.
    pub table: String,
    /// The full primary key.
    pub key: Item,
    /// `ConditionExpression` (required).
    pub condition: String,
    /// Placeholders used by the condition.
    pub attrs: ExpressionAttributes,
    /// Return the existing item when the condition fails.
    pub return_old_on_condition_failure: bool,
}

impl ConditionCheck {
    /// Checks `condition` on the item with `key`.
    pub fn new(table: impl Into<String>, key: Item, condition: impl Into<String>) -> Self {
        ConditionCheck { table: table.into(), key, condition: condition.into(), ..Default::default() }
    }
}

/// What a query or scan returns (`Select`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Select {
    /// Items with all attributes (of the index's projection, for an index).
    #[default]
    AllAttributes,
    /// Only the count.
    Count,
}

/// `Query`.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// Table name.
    pub table: String,
    /// Index name, or the table itself.
    pub index: Option<String>,
    /// `KeyConditionExpression`.
    pub key_condition: String,
    /// `FilterExpression`, applied after `Limit` and after reading.
    pub filter: Option<String>,
    /// `ProjectionExpression`.
    pub projection: Option<String>,
    /// Placeholders used by all expressions.
    pub attrs: ExpressionAttributes,
    /// Ascending (`true`, the default) or descending sort-key order.
    pub scan_forward: bool,
    /// Maximum number of items to *read* (before the filter).
    pub limit: Option<u32>,
    /// Resume after this key (`ExclusiveStartKey`).
    pub exclusive_start_key: Option<Item>,
    /// Strongly consistent read (tables and LSIs only).
    pub consistent_read: bool,
    /// What each item returned holds (`Select`): all attributes, projected ones or a count.
    pub select: Select,
}

impl Query {
    /// Queries `table` with `key_condition`.
    pub fn new(table: impl Into<String>, key_condition: impl Into<String>) -> Self {
        Query {
            table: table.into(),
            index: None,
            key_condition: key_condition.into(),
            filter: None,
            projection: None,
            attrs: ExpressionAttributes::default(),
            scan_forward: true,
            limit: None,
            exclusive_start_key: None,
            consistent_read: false,
            select: Select::AllAttributes,
        }
    }

    /// Queries the named index.
    pub fn index(mut self, index: impl Into<String>) -> Self {
        self.index = Some(index.into());
        self
    }

    /// Sets the filter expression.
    pub fn filter(mut self, expr: impl Into<String>) -> Self {
        self.filter = Some(expr.into());
        self
    }

    /// Sets the projection expression.
    pub fn projection(mut self, expr: impl Into<String>) -> Self {
        self.projection = Some(expr.into());
        self
    }

    /// Reads in descending sort-key order.
    pub fn descending(mut self) -> Self {
        self.scan_forward = false;
        self
    }

    /// Sets `Limit`.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets `ExclusiveStartKey`.
    pub fn start_after(mut self, key: Option<Item>) -> Self {
        self.exclusive_start_key = key;
        self
    }

    /// Asks for a strongly consistent read.
    pub fn consistent(mut self) -> Self {
        self.consistent_read = true;
        self
    }
}

/// `Scan`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scan {
    /// Table name.
    pub table: String,
    /// Index name, or the table itself.
    pub index: Option<String>,
    /// `FilterExpression`.
    pub filter: Option<String>,
    /// `ProjectionExpression`.
    pub projection: Option<String>,
    /// Placeholders used by all expressions.
    pub attrs: ExpressionAttributes,
    /// Maximum number of items to read (before the filter).
    pub limit: Option<u32>,
    /// Resume after this key.
    pub exclusive_start_key: Option<Item>,
    /// `(Segment, TotalSegments)` for a parallel scan.
    pub segment: Option<(u32, u32)>,
    /// Strongly consistent read.
    pub consistent_read: bool,
    /// What each item returned holds (`Select`): all attributes, projected ones or a count.
    pub select: Select,
}

impl Scan {
    /// Scans `table`.
    pub fn new(table: impl Into<String>) -> Self {
        Scan { table: table.into(), ..Default::default() }
    }

    /// Scans the named index.
    pub fn index(mut self, index: impl Into<String>) -> Self {
        self.index = Some(index.into());
        self
    }

    /// Sets the filter expression.
    pub fn filter(mut self, expr: impl Into<String>) -> Self {
        self.filter = Some(expr.into());
        self
    }

    /// Sets `Limit`.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Scans one segment of `total`.
    pub fn segment(mut self, segment: u32, total: u32) -> Self {
        self.segment = Some((segment, total));
        self
    }

    /// Sets `ExclusiveStartKey`.
    pub fn start_after(mut self, key: Option<Item>) -> Self {
        self.exclusive_start_key = key;
        self
    }
}

expression_builders!(GetItem, PutItem, UpdateItem, DeleteItem, ConditionCheck, Query, Scan, KeysAndAttributes);

/// Keys to read from one table in a batch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeysAndAttributes {
    /// Primary keys.
    pub keys: Vec<Item>,
    /// `ProjectionExpression`.
    pub projection: Option<String>,
    /// Placeholders used by the projection.
    pub attrs: ExpressionAttributes,
    /// Strongly consistent read.
    pub consistent_read: bool,
}

/// `BatchGetItem`: up to 100 keys across tables.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchGetItem {
    /// Keys per table.
    pub requests: BTreeMap<String, KeysAndAttributes>,
}

/// One write of a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteRequest {
    /// Put a whole item.
    Put(Item),
    /// Delete by key.
    Delete(Item),
}

/// `BatchWriteItem`: up to 25 puts and deletes across tables, without conditions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchWriteItem {
    /// Writes per table.
    pub requests: BTreeMap<String, Vec<WriteRequest>>,
}

/// One read of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct TransactGet {
    /// Table name.
    pub table: String,
    /// The full primary key.
    pub key: Item,
    /// `ProjectionExpression`.
    pub projection: Option<String>,
    /// Placeholders used by the projection.
    pub attrs: ExpressionAttributes,
}

/// `TransactGetItems`: up to 100 reads, one consistent snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransactGetItems {
    /// The reads.
    pub items: Vec<TransactGet>,
}

/// One write of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum TransactWrite {
    /// A conditional put.
    Put(PutItem),
    /// A conditional update.
    Update(UpdateItem),
    /// A conditional delete.
    Delete(DeleteItem),
    /// A condition on an item that is not written.
    ConditionCheck(ConditionCheck),
}

/// `TransactWriteItems`: up to 100 writes, all or nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransactWriteItems {
    /// The writes, each on a distinct item.
    pub items: Vec<TransactWrite>,
    /// Makes the call idempotent for ten minutes (`ClientRequestToken`).
    pub client_request_token: Option<String>,
}

/// Capacity consumed by one call on one table, by DynamoDB's rules.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsumedCapacity {
    /// Table name.
    pub table: String,
    /// Total units: table plus indexes.
    pub capacity_units: f64,
    /// Read units, in total.
    pub read_capacity_units: f64,
    /// Write units, in total.
    pub write_capacity_units: f64,
    /// Units spent on the table itself.
    pub table_units: f64,
    /// Units per global secondary index.
    pub global_indexes: BTreeMap<String, f64>,
    /// Units per local secondary index.
    pub local_indexes: BTreeMap<String, f64>,
}

/// Result of `GetItem`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GetItemOutput {
    /// The item, if it exists.
    pub item: Option<Item>,
    /// Capacity used.
    pub consumed_capacity: ConsumedCapacity,
}

/// Result of a single-item write (`PutItem`, `UpdateItem`, `DeleteItem`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WriteOutput {
    /// The attributes asked for with `ReturnValues`.
    pub attributes: Option<Item>,
    /// Capacity used.
    pub consumed_capacity: ConsumedCapacity,
}

/// Result of one page of `Query` or `Scan`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryOutput {
    /// Items that passed the filter (empty for `Select::Count`).
    pub items: Vec<Item>,
    /// Number of items that passed the filter.
    pub count: usize,
    /// Number of items read before the filter.
    pub scanned_count: usize,
    /// Where to resume, if there may be more.
    pub last_evaluated_key: Option<Item>,
    /// Capacity used.
    pub consumed_capacity: ConsumedCapacity,
}

/// Result of `BatchGetItem`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchGetItemOutput {
    /// Items found, per table (in no particular order).
    pub responses: BTreeMap<String, Vec<Item>>,
    /// Keys not read this time; send them again.
    pub unprocessed_keys: BTreeMap<String, KeysAndAttributes>,
    /// Capacity used, per table.
    pub consumed_capacity: Vec<ConsumedCapacity>,
}

/// Result of `BatchWriteItem`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchWriteItemOutput {
    /// Writes not applied this time; send them again.
    pub unprocessed_items: BTreeMap<String, Vec<WriteRequest>>,
    /// Capacity used, per table.
    pub consumed_capacity: Vec<ConsumedCapacity>,
}

/// Result of `TransactGetItems`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransactGetItemsOutput {
    /// One entry per requested item, in request order.
    pub items: Vec<Option<Item>>,
    /// Capacity used, per table.
    pub consumed_capacity: Vec<ConsumedCapacity>,
}

/// Result of `TransactWriteItems`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TransactWriteItemsOutput {
    /// Capacity used, per table.
    pub consumed_capacity: Vec<ConsumedCapacity>,
}
