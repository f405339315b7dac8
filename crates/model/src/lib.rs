//! Tally's single-table modelling layer: one DynamoDB table, many entities, typed.
//!
//! A [`Schema`] describes the table once: its indexes, its entities with
//! typed attributes and key templates per index (`SITE#{site}`, `PV#{ts:13}#{id}`), and the
//! access patterns the application needs. From it, a [`Table`] computes every key, writes
//! the entity-type attribute, generates ids and timestamps, checks types and required
//! attributes, renders every expression with placeholders, follows pagination, chunks and
//! retries batches, and meters consumed capacity. Field values are encoded into key
//! segments so that no value can forge another item's key ([`key`]).
//!
//! ```
//! use std::sync::Arc;
//! use model::{Table, expr::{Update, attr}, sample};
//! use store::item;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> model::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store: Arc<dyn store::Store> = Arc::new(store_embedded::EmbeddedStore::open(dir.path())?);
//! let table = Table::new(store, sample::shop("shop"));
//! table.create_table().await?;
//!
//! let order = table.create("Order", item! { "customer_id" => "c1", "total" => 30 }).await?;
//! assert_eq!(order.get("pk"), Some(&"CUSTOMER#c1".into())); // computed from `CUSTOMER#{customer_id}`
//! let key = item! { "customer_id" => "c1", "order_id" => order.string("order_id")? };
//! let paid = table.update("Order", key, Update::new().set("status", "PAID")).await?;
//! assert_eq!(paid.string("status")?, "PAID");
//!
//! let big = table
//!     .query("Order")
//!     .key(item! { "customer_id" => "c1" })
//!     .filter(attr("total").ge(20))
//!     .all()
//!     .await?;
//! assert_eq!(big.len(), 1);
//! assert!(table.capacity().write_units >= 2.0);
//! # Ok(()) }
//! ```
//!
//! Modules: [`schema`] (definitions and validation), [`key`] (templates and safe segments),
//! [`pattern`] (time-series, shard, TTL and composite keys), [`expr`] (typed expressions),
//! [`record`] (records and typed structs), [`ops`] (the operations), [`generate`] (the design
//! document, CloudFormation and Terraform rendered from a schema), [`error`] (the one error
//! type), [`sample`] (a sample schema for tests and documents).
//!
//! This crate does no I/O of its own: it reaches storage only through
//! `Arc<dyn store::Store>`, so it runs the same on the embedded engine and on DynamoDB. It
//! is not an engine and not an object mapper with derives.

#![deny(missing_docs)]

pub mod error;
pub mod expr;
pub mod generate;
pub mod key;
pub mod ops;
pub mod pattern;
pub mod record;
pub mod sample;
pub mod schema;

pub use error::{Error, ItemFailure, Result};
pub use ops::{BatchWrite, Capacity, Collection, Page, PutMode, RetryPolicy, Table, TxWrite};
pub use record::{EntityItem, Record};
pub use schema::{AccessPattern, Attribute, AttributeType, Entity, Index, Schema};
