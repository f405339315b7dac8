//! Tally's analytics domain: the table schema today; ingestion, enrichment, sessions,
//! exactly-once aggregation and queries as they land.
//!
//! ```
//! let schema = analytics::schema::tally_schema("tally");
//! assert!(schema.entity("Event").is_some());
//! ```
//!
//! This crate knows no HTTP (that is the `server` crate's) and formats no key by hand: every
//! key comes from the templates in [`schema`].

#![deny(missing_docs)]

pub mod accounts;
pub mod aggregate;
pub mod block;
pub mod enrich;
pub mod event;
pub mod event_store;
pub mod goal;
pub mod imported;
pub mod key_bound;
pub mod lease;
pub mod period;
pub mod pipeline;
pub mod report;
pub mod schema;
pub mod sites;
pub mod sketch;
pub mod stats;
pub mod stored;
pub mod synth;
mod ttl_cache;
pub mod two_factor;
pub mod visitor;
