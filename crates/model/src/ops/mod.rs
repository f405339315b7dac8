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

mod batch;
mod query;
mod table;
#[cfg(test)]
mod tests;
mod transact;

pub use batch::BatchWrite;
pub use query::{Collection, Page, QueryBuilder, ScanBuilder};
pub use table::{Capacity, PutMode, RetryPolicy, Table};
pub use transact::TxWrite;
