//! Tally's embedded storage engine (being written).
#![allow(dead_code)]
mod expr;
