//! Tally's single-table modelling layer.
#![deny(missing_docs)]

pub mod expr;
pub mod key;
pub mod pattern;
pub mod sample;
pub mod schema;
