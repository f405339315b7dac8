//! The DynamoDB engine's integration tests, one binary: the shared conformance suite against
//! DynamoDB implementations we did not write (dynalite and moto, started by `cargo xtask test`).
//!
//! Without the harness (a plain `cargo test`) the emulator tests print a loud line saying they
//! did not run; with `TALLY_REQUIRE_EMULATORS=1` (set by the harness) a missing emulator fails.

mod conformance;
mod differential;
mod emulator;
mod faults;
mod retries;
mod unsupported;
