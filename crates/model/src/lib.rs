//! Tally's single-table modelling layer.
#![deny(missing_docs)]

pub mod key;
pub mod sample;
pub mod schema;
