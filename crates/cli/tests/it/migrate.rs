//! A store written by the previous Tally (one item per raw event) opens and works: its events are
//! converted to event blocks on first open, once, and every number stays what it was.
//!
//! The fixture (`tests/fixtures/store-v1`) was written by the Tally before event blocks
//! (commit 6c4b602): `site add fixture.test --timezone Europe/Berlin`, retention of ten years,
//! then `import events.ndjson` (six events of three visitors on 2026-11-24, the file beside it).

use std::path::Path;

use crate::support::{Server, tally, tally_ok};

fn copy_fixture(to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1");
    std::fs::create_dir_all(to).unwrap();
    for name in ["tally.redb", "tally.journal"] {
        std::fs::copy(from.join(name), to.join(name)).unwrap();
    }
}

#[test]
fn a_store_of_per_event_items_is_converted_to_event_blocks_and_reads_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    copy_fixture(&store);

    // The first command that opens the store converts it, and says so.
    let out = tally(&store, &["export", "--site", "fixture.test", "--from", "2026-11-01", "--to", "2026-11-30"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("6 stored events converted to event blocks"), "{stderr}");
    let exported = String::from_utf8_lossy(&out.stdout).into_owned();
    let paths: Vec<&str> = exported.lines().map(|l| l.split("\"url\":\"").nth(1).unwrap_or("")).collect();
    assert_eq!(exported.lines().count(), 6, "every event is there: {exported}");
    assert!(paths.iter().filter(|p| p.starts_with("https://fixture.test/pricing")).count() == 2, "{exported}");

    // Once: the next open converts nothing.
    let out = tally(&store, &["site", "list"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("converted"), "converted twice");

    // The stored aggregates equal a rebuild from the converted blocks.
    let verify = tally_ok(
        &store,
        &["aggregate", "--rebuild", "--site", "fixture.test", "--from", "2026-11-01", "--to", "2026-11-30", "--verify"],
    );
    assert!(verify.contains("events read: 6") && verify.contains("differences: 0"), "{verify}");

    // A question no aggregate holds (visitors from Germany, by page) reads the blocks.
    let key = crate::support::field(&tally_ok(&store, &["key", "create", "fixture.test"]), "key:");
    let server = Server::start(&store);
    let body = serde_json::json!({
        "site_id": "fixture.test", "metrics": ["visitors", "pageviews"], "date_range": ["2026-11-24", "2026-11-24"],
        "dimensions": ["event:page"], "filters": [["is", "visit:country", ["DE"]]],
    });
    let r = server.client().post_json("/api/v2/query", &[("authorization", &format!("Bearer {key}"))], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let mut rows: Vec<(String, i64, i64)> = r.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let m = &row["metrics"];
            (row["dimensions"][0].as_str().unwrap().to_owned(), m[0].as_i64().unwrap(), m[1].as_i64().unwrap())
        })
        .collect();
    rows.sort();
    // v1: /, /pricing (and a Signup); v3: /, /docs. v2 (France) is filtered out.
    assert_eq!(
        rows,
        [("/".to_owned(), 2, 2), ("/docs".to_owned(), 1, 1), ("/pricing".to_owned(), 1, 1)],
        "{}",
        r.text()
    );
    server.stop();
}
