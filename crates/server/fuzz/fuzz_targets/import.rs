//! Fuzzes the import body (`POST /api/import`, `tally import`) read as NDJSON and as CSV, and
//! each event that reads validated as ingestion does: nothing panics, and every line is at most
//! one event or one error. The checks live in `server::fuzz::import_body`, which stable tests run
//! over `corpus/import`.
//!
//! Run with `cargo +nightly fuzz run import` from `crates/server`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| server::fuzz::import_body(data));
