//! The analytics crate's integration tests, one binary: each module exercises one part of the
//! pipeline against the embedded engine.

mod accounts;
mod aggregate;
mod bounds;
mod hooked;
mod pipeline;
mod stats;
