//! What the cases share: the case context (store, table names, clean-up), expected error
//! kinds, a request type for data-driven error tables, paging and bulk-loading helpers.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use crate::{
    AttributeValue, BatchGetItem, BatchWriteItem, DeleteItem, GetItem, Item, KeySchema, PutItem, Query, ScalarType,
    Scan, Store, StoreError, TableDefinition, TransactGetItems, TransactWriteItems, UpdateItem, WriteRequest,
};

/// What a case returns: `Err` carries the reason it failed.
pub(crate) type Outcome = Result<(), String>;

/// A registered case.
pub(crate) struct Case {
    /// Its name: kebab-case, unique, part of its tables' names.
    pub name: &'static str,
    /// Runs it.
    pub run: fn(Ctx) -> Pin<Box<dyn Future<Output = Outcome> + Send>>,
}

/// What a case runs against: the store, and the names of the tables it may create.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub store: Arc<dyn Store>,
    base: String,
    created: Arc<Mutex<Vec<String>>>,
}

impl Ctx {
    pub(crate) fn new(store: Arc<dyn Store>, prefix: &str, case: &str) -> Self {
        Ctx { store, base: format!("{prefix}-{case}"), created: Arc::default() }
    }

    /// The case's main table name, `{prefix}-{case}`.
    pub fn table(&self) -> String {
        self.base.clone()
    }

    /// Another table of the case, `{prefix}-{case}-{suffix}`.
    pub fn table_named(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.base)
    }

    /// Creates a table (dropping a leftover of an earlier, interrupted run first) and
    /// remembers it for clean-up. Returns its name.
    pub async fn create(&self, definition: TableDefinition) -> Result<String, String> {
        let name = definition.name.clone();
        // A leftover from an interrupted run against a persistent emulator; absence is fine.
        if self.store.delete_table(&name).await.is_ok() {
            wait_deleted(&*self.store, &name).await?;
        }
        self.created.lock().unwrap().push(name.clone());
        self.store.create_table(definition).await.or_fail(&format!("create table {name}"))?;
        Ok(name)
    }

    /// Creates the case's main table with a string `pk` and a string `sk`.
    pub async fn create_composite(&self) -> Result<String, String> {
        self.create(composite(&self.table())).await
    }

    /// Deletes every table the case created; errors are ignored (the case may have deleted them).
    pub(crate) async fn cleanup(&self) {
        let names = std::mem::take(&mut *self.created.lock().unwrap());
        for name in names {
            let _ = self.store.delete_table(&name).await;
        }
    }
}

/// Waits until `name` is gone: DynamoDB deletes tables in the background (status `DELETING`).
pub(crate) async fn wait_deleted(store: &dyn Store, name: &str) -> Outcome {
    for _ in 0..600 {
        match store.describe_table(name).await {
            Err(e) if e.is_not_found() => return Ok(()),
            Ok(d) if d.status == crate::TableStatus::Deleting => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await
            }
            other => return Err(format!("describe of deleted table {name}: {}", short(&other))),
        }
    }
    Err(format!("table {name} still deleting after 60 s"))
}

/// A table definition with a string `pk` and a string `sk`.
pub(crate) fn composite(name: &str) -> TableDefinition {
    TableDefinition::new(name, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S))
}

/// A key of a `pk`/`sk` table.
pub(crate) fn key(pk: impl Into<AttributeValue>, sk: impl Into<AttributeValue>) -> Item {
    let mut item = Item::new();
    item.insert("pk".into(), pk.into());
    item.insert("sk".into(), sk.into());
    item
}

/// `base` with more attributes.
pub(crate) fn with(mut base: Item, extra: Item) -> Item {
    base.extend(extra);
    base
}

/// Turns a store error into a case failure that says what was being done.
pub(crate) trait OrFail<T> {
    fn or_fail(self, what: &str) -> Result<T, String>;
}

impl<T> OrFail<T> for crate::Result<T> {
    fn or_fail(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error {}", short(&e)))
    }
}

/// A value's debug text, cut to a readable length (pages of 100 KB items print otherwise).
pub(crate) fn short(value: &dyn Debug) -> String {
    let text = format!("{value:?}");
    if text.len() <= 600 {
        return text;
    }
    let mut cut = 600;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} bytes)", &text[..cut], text.len())
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// The error kind a request must fail with, checked by predicate, never by message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// `ValidationException` (including the size limits).
    Validation,
    /// `ConditionalCheckFailedException`.
    ConditionFailed,
    /// `ResourceNotFoundException`.
    NotFound,
    /// `ResourceInUseException`.
    InUse,
    /// `TransactionCanceledException`.
    Canceled,
    /// `IdempotentParameterMismatchException`.
    ParameterMismatch,
}

impl Expect {
    fn matches(self, e: &StoreError) -> bool {
        match self {
            Expect::Validation => e.is_validation(),
            Expect::ConditionFailed => e.is_condition_failed(),
            Expect::NotFound => e.is_not_found(),
            Expect::InUse => matches!(e, StoreError::ResourceInUse(_)),
            Expect::Canceled => e.is_transaction_canceled(),
            Expect::ParameterMismatch => matches!(e, StoreError::IdempotentParameterMismatch(_)),
        }
    }
}

/// Checks that `result` is an error of kind `want`; returns the error for further checks.
pub(crate) fn expect_err<T: Debug>(result: crate::Result<T>, want: Expect, what: &str) -> Result<StoreError, String> {
    match result {
        Ok(v) => Err(format!("{what}: succeeded with {}, want {want:?}", short(&v))),
        Err(e) if want.matches(&e) => Ok(e),
        Err(e) => Err(format!("{what}: failed with {}, want {want:?}", short(&e))),
    }
}

/// Any request, so that tables of requests with their expected outcome can be written as data.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Get(GetItem),
    Put(PutItem),
    Update(UpdateItem),
    Delete(DeleteItem),
    Query(Query),
    Scan(Scan),
    BatchGet(BatchGetItem),
    BatchWrite(BatchWriteItem),
    TransactGet(TransactGetItems),
    TransactWrite(TransactWriteItems),
}

macro_rules! op_from {
    ($($variant:ident($t:ty)),*) => {$(
        impl From<$t> for Op {
            fn from(r: $t) -> Op {
                Op::$variant(r)
            }
        }
    )*};
}
op_from!(
    Get(GetItem),
    Put(PutItem),
    Update(UpdateItem),
    Delete(DeleteItem),
    Query(Query),
    Scan(Scan),
    BatchGet(BatchGetItem),
    BatchWrite(BatchWriteItem),
    TransactGet(TransactGetItems),
    TransactWrite(TransactWriteItems)
);

impl Op {
    /// Sends the request; the output is returned as debug text (only printed on failure).
    pub async fn run(self, store: &dyn Store) -> crate::Result<String> {
        Ok(match self {
            Op::Get(r) => short(&store.get_item(r).await?),
            Op::Put(r) => short(&store.put_item(r).await?),
            Op::Update(r) => short(&store.update_item(r).await?),
            Op::Delete(r) => short(&store.delete_item(r).await?),
            Op::Query(r) => short(&store.query(r).await?),
            Op::Scan(r) => short(&store.scan(r).await?),
            Op::BatchGet(r) => short(&store.batch_get_item(r).await?),
            Op::BatchWrite(r) => short(&store.batch_write_item(r).await?),
            Op::TransactGet(r) => short(&store.transact_get_items(r).await?),
            Op::TransactWrite(r) => short(&store.transact_write_items(r).await?),
        })
    }
}

/// Runs every request of a table and checks each fails with `want`; reports every row that did not.
pub(crate) async fn expect_all(store: &dyn Store, want: Expect, rows: Vec<(&str, Op)>) -> Outcome {
    let mut failures = Vec::new();
    for (label, op) in rows {
        if let Err(reason) = expect_err(op.run(store).await, want, label) {
            failures.push(reason);
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) }
}

/// Runs every request of a table and checks each succeeds; reports every row that did not.
pub(crate) async fn expect_ok(store: &dyn Store, rows: Vec<(&str, Op)>) -> Outcome {
    let mut failures = Vec::new();
    for (label, op) in rows {
        if let Err(e) = op.run(store).await {
            failures.push(format!("{label}: unexpected error {}", short(&e)));
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) }
}

/// Writes `items` to `table` with batch writes of 25, resending unprocessed items.
pub(crate) async fn put_all(store: &dyn Store, table: &str, items: Vec<Item>) -> Outcome {
    for chunk in items.chunks(crate::limits::MAX_BATCH_WRITE) {
        let mut request = BatchWriteItem::default();
        request.requests.insert(table.to_string(), chunk.iter().cloned().map(WriteRequest::Put).collect());
        for attempt in 0.. {
            ensure!(attempt < 50, "batch write: items still unprocessed after 50 attempts");
            let out = store.batch_write_item(request).await.or_fail("batch write")?;
            if out.unprocessed_items.values().all(Vec::is_empty) {
                break;
            }
            request = BatchWriteItem { requests: out.unprocessed_items };
            tokio::time::sleep(std::time::Duration::from_millis(20 * attempt.min(10))).await;
        }
    }
    Ok(())
}

/// Every page of a query: the items in order, and the number of pages.
pub(crate) async fn query_all(store: &dyn Store, query: Query) -> Result<(Vec<Item>, usize), String> {
    let mut items = Vec::new();
    let mut start = None;
    for page in 1..=10_000 {
        let out = store.query(query.clone().start_after(start)).await.or_fail(&format!("query page {page}"))?;
        items.extend(out.items);
        match out.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return Ok((items, page)),
        }
    }
    Err("query: more than 10,000 pages".into())
}

/// Every page of a scan: the items in order, and the number of pages.
pub(crate) async fn scan_all(store: &dyn Store, scan: Scan) -> Result<(Vec<Item>, usize), String> {
    let mut items = Vec::new();
    let mut start = None;
    for page in 1..=10_000 {
        let out = store.scan(scan.clone().start_after(start)).await.or_fail(&format!("scan page {page}"))?;
        items.extend(out.items);
        match out.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return Ok((items, page)),
        }
    }
    Err("scan: more than 10,000 pages".into())
}

/// The `id` attribute of each item, as text (`?` when absent).
pub(crate) fn ids(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|i| match i.get("id") {
            Some(AttributeValue::S(s)) => s.clone(),
            Some(AttributeValue::N(n)) => n.to_string(),
            Some(other) => format!("{other:?}"),
            None => "?".to_string(),
        })
        .collect()
}

/// Reads one item (strongly consistent, so that the check sees every earlier write).
pub(crate) async fn get(store: &dyn Store, table: &str, key: Item) -> Result<Option<Item>, String> {
    Ok(store.get_item(GetItem::new(table, key).consistent()).await.or_fail("get")?.item)
}

/// Writes one item unconditionally.
pub(crate) async fn put(store: &dyn Store, table: &str, item: Item) -> Outcome {
    store.put_item(PutItem::new(table, item)).await.or_fail("put")?;
    Ok(())
}

/// A string attribute of `len` bytes, for sizing items.
pub(crate) fn filler(len: usize) -> AttributeValue {
    AttributeValue::S("x".repeat(len))
}

/// `base` plus an `x_pad` attribute sized so that the item is exactly `size` bytes by DynamoDB's rules.
pub(crate) fn sized(mut base: Item, size: usize) -> Item {
    base.insert("x_pad".into(), filler(0));
    let without = crate::item_size(&base);
    assert!(size >= without, "item of {size} bytes is smaller than its keys");
    base.insert("x_pad".into(), filler(size - without));
    debug_assert_eq!(crate::item_size(&base), size);
    base
}

/// Approximate equality for capacity units (they are multiples of 0.5).
pub(crate) fn units_eq(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}
