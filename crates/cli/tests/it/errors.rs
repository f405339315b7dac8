//! Errors name their cause: what a user meets when the store cannot do what Tally needs says
//! what is wrong and what to do, never a bare engine code behind `internal error:`.

use std::process::Command;

use crate::support::{Server, tally};

/// Regression: `tally site add` against an endpoint without transactions (dynalite) printed
/// `internal error: UnknownOperationException:`. Runs against the dynalite `cargo xtask test`
/// starts (`TALLY_DYNALITE_ENDPOINT`).
#[test]
fn an_endpoint_without_transactions_is_named_with_where_they_exist() {
    let endpoint = match std::env::var("TALLY_DYNALITE_ENDPOINT") {
        Ok(e) if !e.is_empty() => e,
        _ => {
            let required = std::env::var("TALLY_REQUIRE_EMULATORS").is_ok_and(|v| v == "1");
            assert!(!required, "TALLY_DYNALITE_ENDPOINT is not set but TALLY_REQUIRE_EMULATORS=1");
            eprintln!("\n!!!!! the dynalite error message DID NOT RUN: TALLY_DYNALITE_ENDPOINT is not set !!!!!\n");
            return;
        }
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let store = format!("dynamodb://tally-errors-{}-{nanos}?region=us-east-1&endpoint={endpoint}", std::process::id());
    let output = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["site", "add", "example.com", "--store", &store])
        .envs([("AWS_ACCESS_KEY_ID", "tally-test"), ("AWS_SECRET_ACCESS_KEY", "tally-test")])
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("TALLY_LOG_LEVEL", "warn")
        .output()
        .expect("run tally");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    for part in ["TransactWriteItems", "DynamoDB Local", "moto"] {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }
    assert!(!stderr.contains("internal error"), "{stderr}");
}

/// Regression: a command on an embedded store that `tally serve` holds printed `internal error:
/// cannot open …: Database already open. Cannot acquire lock.`
#[test]
fn a_store_held_by_a_server_is_named_as_in_use() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("data");
    let server = Server::start(&store);
    let output = tally(&store, &["site", "add", "example.com"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("another process") && !stderr.contains("internal error"), "{stderr}");
    server.stop();
}
