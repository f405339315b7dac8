//! The conformance suite: one set of cases that every engine must pass, written against
//! DynamoDB's documented behaviour (the DynamoDB developer guide is the reference).
//!
//! CONTRACT (keep this signature): each engine's integration tests call [`run_suite`].

use std::sync::Arc;

use crate::Store;

/// A case an engine is known not to support, with the reason; printed, never silently skipped.
#[derive(Clone, Copy, Debug)]
pub struct Unsupported {
    /// The case's name, as the suite prints it.
    pub case: &'static str,
    /// Why the engine does not support it.
    pub reason: &'static str,
}

/// Runs every case against `store`, prints a line per case (and the unsupported table),
/// and panics listing every failed case. Each case uses tables of its own, named with `prefix`.
pub async fn run_suite(store: Arc<dyn Store>, engine: &str, prefix: &str, unsupported: &[Unsupported]) {
    let _ = (store, engine, prefix, unsupported);
    todo!("the suite's cases")
}
