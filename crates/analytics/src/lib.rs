//! Tally's analytics domain: the table's schema ([`schema`]), ingestion ([`pipeline`]: validation
//! and enrichment in [`event`] and [`enrich`], visitors, sessions), raw events stored as
//! columnar event blocks ([`block`], [`event_store`]), exactly-once aggregation and rebuilds
//! ([`aggregate`]), the ingest lease ([`lease`]), queries over aggregates and blocks ([`stats`]),
//! imported history ([`imported`]), sites, accounts and reports.
//!
//! ```
//! let schema = analytics::schema::tally_schema("tally");
//! assert!(schema.entity("EventBlock").is_some());
//! assert!(schema.entity("Aggregate").is_some());
//! ```
//!
//! This crate knows no HTTP (that is the `server` crate's) and formats no key by hand: every
//! key comes from the templates in [`schema`]. `crates/analytics/DESIGN.md` says why the
//! pipeline is shaped as it is.

#![deny(missing_docs)]

pub mod accounts;
pub mod aggregate;
pub mod block;
pub mod dimension;
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
mod stale;
pub mod stats;
pub mod stored;
pub mod synth;
mod ttl_cache;
pub mod two_factor;
pub mod visitor;
