//! Fuzzes the Stats API query body (`POST /api/v2/query`, `POST /api/funnel`) as the routes read
//! it: no input panics, a refusal is a 400, and an accepted query is within the query bounds.
//! The checks live in `server::fuzz::stats_query_body`, which stable tests run over
//! `corpus/stats_query`.
//!
//! Run with `cargo +nightly fuzz run stats_query` from `crates/server`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| server::fuzz::stats_query_body(data));
