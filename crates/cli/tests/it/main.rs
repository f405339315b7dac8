//! The `tally` binary, run as a user runs it.

mod abuse;
mod abuse_data;
mod accounts;
mod analysis;
mod backup;
mod bad_input;
mod bench;
mod browser;
mod config;
mod demo;
mod e2e;
mod errors;
mod history;
mod import;
mod live;
mod migrate;
mod notify;
mod shared_table;
mod sigkill;
mod support;

use std::process::{Command, Output};

fn tally(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_tally")).args(args).output().expect("run tally");
    assert!(output.status.success(), "tally {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    output
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(tally(args).stdout).expect("utf-8 output")
}

#[test]
fn schema_doc_describes_every_entity_and_access_pattern() {
    let doc = stdout(&["schema", "doc"]);
    let schema = analytics::schema::tally_schema(analytics::schema::TABLE_NAME);
    for entity in schema.entities() {
        assert!(doc.contains(entity.name()), "the doc names {}", entity.name());
    }
    for pattern in schema.access_patterns() {
        assert!(doc.contains(&pattern.name), "the doc lists {}", pattern.name);
    }
}

#[test]
fn cloudformation_json_names_the_table_and_its_indexes() {
    let text = stdout(&["schema", "cloudformation", "--format", "json", "--table", "tally-test"]);
    for needle in ["AWS::DynamoDB::Table", "tally-test", "gsi1", "TimeToLiveSpecification"] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn create_table_is_idempotent_on_the_embedded_engine() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    assert!(stdout(&["schema", "create-table", "--store", data]).contains("created table tally"));
    assert!(stdout(&["schema", "create-table", "--store", data]).contains("already exists"));
}

#[test]
fn unknown_commands_fail_with_usage() {
    let output = Command::new(env!("CARGO_BIN_EXE_tally")).arg("frobnicate").output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("Usage"));
}

#[test]
fn schema_matrix_and_terraform_describe_tallys_own_table() {
    let schema = analytics::schema::tally_schema(analytics::schema::TABLE_NAME);
    let matrix = stdout(&["schema", "matrix"]);
    for pattern in schema.access_patterns() {
        let row = format!("| `{}` |", pattern.name);
        assert!(matrix.lines().any(|l| l.starts_with(&row)), "the matrix has a row for {}", pattern.name);
    }
    let terraform = stdout(&["schema", "terraform", "--table", "tally-prod"]);
    for needle in [
        "resource \"aws_dynamodb_table\"",
        "name         = \"tally-prod\"",
        "billing_mode = \"PAY_PER_REQUEST\"",
        "name            = \"gsi1\"",
        "attribute_name = \"ttl\"",
    ] {
        assert!(terraform.contains(needle), "{needle} missing from:\n{terraform}");
    }
}

/// SIGTERM the moment `tally serve` says it listens still stops it gracefully (exit 0, aggregates
/// flushed): the handlers are installed before that line, not when the server first polls them.
#[test]
fn sigterm_as_soon_as_serve_listens_stops_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..5 {
        support::Server::start(&dir.path().join("data")).stop();
    }
}
