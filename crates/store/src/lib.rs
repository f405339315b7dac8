//! Tally's storage interface: DynamoDB's data model and operations as one async trait.
//!
//! Every storage engine (the embedded one in `store-embedded`, Amazon DynamoDB in
//! `store-dynamodb`) implements [`Store`], and every engine's tests run the same
//! conformance suite (the `conformance` feature), so code above this crate cannot tell
//! the engines apart except by speed and cost.
//!
//! ```
//! use store::{item, AttributeValue, PutItem, Query};
//!
//! let put = PutItem::new("tally", item! { "pk" => "SITE#1", "sk" => "META", "views" => 3 })
//!     .condition("attribute_not_exists(pk)");
//! let query = Query::new("tally", "pk = :pk AND begins_with(sk, :p)")
//!     .value(":pk", "SITE#1")
//!     .value(":p", "PV#")
//!     .descending()
//!     .limit(10);
//! assert_eq!(put.item["views"], AttributeValue::from(3));
//! assert!(!query.scan_forward);
//! ```
//!
//! This crate is not an engine and does no I/O; it is not a DynamoDB wire-format
//! (JSON) codec either: values are plain Rust types.

#![deny(missing_docs)]

pub mod counter;
mod error;
pub mod limits;
mod number;
mod request;
pub mod sync;
mod table;
mod value;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "workload")]
pub mod workload;

pub use error::{CancellationCode, CancellationReason, Result, StoreError};
pub use number::{Number, NumberError};
pub use request::*;
pub use table::*;
pub use value::{AttributeValue, Item, ValueType, item_size, n};

use async_trait::async_trait;

/// DynamoDB's operations. Implementations must behave as DynamoDB does; the conformance suite checks it.
///
/// Every response carries the capacity DynamoDB would have billed for the call.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `CreateTable` (and `UpdateTimeToLive` when the definition names a TTL attribute);
    /// returns once the table is active.
    async fn create_table(&self, definition: TableDefinition) -> Result<TableDescription>;
    /// `DeleteTable`.
    async fn delete_table(&self, name: &str) -> Result<TableDescription>;
    /// `DescribeTable`.
    async fn describe_table(&self, name: &str) -> Result<TableDescription>;
    /// `ListTables`, every page.
    async fn list_tables(&self) -> Result<Vec<String>>;
    /// `GetItem`.
    async fn get_item(&self, request: GetItem) -> Result<GetItemOutput>;
    /// `PutItem`.
    async fn put_item(&self, request: PutItem) -> Result<WriteOutput>;
    /// `UpdateItem`.
    async fn update_item(&self, request: UpdateItem) -> Result<WriteOutput>;
    /// `DeleteItem`.
    async fn delete_item(&self, request: DeleteItem) -> Result<WriteOutput>;
    /// `Query`: one page.
    async fn query(&self, request: Query) -> Result<QueryOutput>;
    /// `Scan`: one page.
    async fn scan(&self, request: Scan) -> Result<QueryOutput>;
    /// `BatchGetItem`: may return unprocessed keys.
    async fn batch_get_item(&self, request: BatchGetItem) -> Result<BatchGetItemOutput>;
    /// `BatchWriteItem`: may return unprocessed items.
    async fn batch_write_item(&self, request: BatchWriteItem) -> Result<BatchWriteItemOutput>;
    /// `TransactGetItems`.
    async fn transact_get_items(&self, request: TransactGetItems) -> Result<TransactGetItemsOutput>;
    /// `TransactWriteItems`.
    async fn transact_write_items(&self, request: TransactWriteItems) -> Result<TransactWriteItemsOutput>;
}
