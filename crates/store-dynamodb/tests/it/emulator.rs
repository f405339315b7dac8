//! Finding the emulators started by `cargo xtask test`, and connecting the engine to them.

use std::io::Write;
use std::sync::Arc;

use store::Store;
use store_dynamodb::{DynamoDbStore, Options};

/// Set by the harness: a missing emulator endpoint is then a failure, not a notice.
const REQUIRE: &str = "TALLY_REQUIRE_EMULATORS";

/// The endpoint in `var`, or `None` after a loud notice when it is unset. Panics (failing the
/// test) when it is unset and the harness asked for the emulators to be required.
pub fn endpoint(server: &str, var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(endpoint) if !endpoint.is_empty() => Some(endpoint),
        _ => {
            let required = std::env::var(REQUIRE).is_ok_and(|v| v == "1");
            assert!(!required, "{var} is not set but {REQUIRE}=1: the {server} server was not started");
            // Straight to stderr: libtest captures print!, and this line must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!!! {server} tests DID NOT RUN: {var} is not set. Run `cargo xtask test` to install and \
                 start {server} on 127.0.0.1. !!!!!\n"
            );
            None
        }
    }
}

/// The engine connected to an emulator, with fake credentials in `us-east-1`.
pub async fn store(endpoint: &str) -> Arc<dyn Store> {
    let store = DynamoDbStore::connect(Options::emulator(endpoint)).await.expect("connect to the emulator");
    Arc::new(store)
}
