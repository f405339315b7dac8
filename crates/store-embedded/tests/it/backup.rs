//! Backups taken while writers keep writing: the copy holds every write acknowledged before the
//! backup began, each transaction whole, and indexes that match their base items; a restore
//! brings it back as a store that opens and serves. Bad targets and bad backups are refused
//! and change nothing.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use store::{
    AttributeValue, Item, KeySchema, Projection, PutItem, ScalarType, Scan, Store, StoreError, TableDefinition,
    TransactWrite, TransactWriteItems, UpdateItem, item,
};
use store_embedded::{EmbeddedStore, Options};

const TABLE: &str = "backup";

fn definition() -> TableDefinition {
    TableDefinition::new(TABLE, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S)).gsi(
        "by-group",
        KeySchema::composite("g", ScalarType::S, "sk", ScalarType::S),
        Projection::KeysOnly,
    )
}

async fn scan_all(store: &EmbeddedStore, index: Option<&str>) -> Vec<Item> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let mut scan = Scan::new(TABLE).start_after(start);
        if let Some(index) = index {
            scan = scan.index(index);
        }
        let page = store.scan(scan).await.expect("scan");
        items.extend(page.items);
        start = page.last_evaluated_key;
        if start.is_none() {
            return items;
        }
    }
}

fn s(item: &Item, name: &str) -> String {
    item.get(name).and_then(AttributeValue::as_s).unwrap_or_default().to_string()
}

/// One writer's transaction: a pair of items (one indexed) and the writer's counter.
fn pair(writer: usize, i: u64) -> TransactWriteItems {
    let id = format!("{writer}-{i}");
    TransactWriteItems {
        items: vec![
            TransactWrite::Put(PutItem::new(TABLE, item! { "pk" => format!("t#{id}"), "sk" => "a", "g" => "G" })),
            TransactWrite::Put(PutItem::new(TABLE, item! { "pk" => format!("t#{id}"), "sk" => "b" })),
            TransactWrite::Update(
                UpdateItem::new(TABLE, item! { "pk" => "counter", "sk" => writer.to_string() }, "ADD #n :one")
                    .name("#n", "n")
                    .value(":one", 1),
            ),
        ],
        client_request_token: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_writing_holds_every_acknowledged_write_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let (live, copy, restored) = (dir.path().join("live"), dir.path().join("copy"), dir.path().join("restored"));
    let store = Arc::new(EmbeddedStore::open_with(&live, Options::default().ttl_sweep_interval(None)).unwrap());
    store.create_table(definition()).await.unwrap();

    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (store, acknowledged, stop) = (store.clone(), acknowledged.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    store.transact_write_items(pair(w, i)).await.expect("a transaction");
                    acknowledged.lock().unwrap().push(format!("{w}-{i}"));
                }
            })
        })
        .collect();
    while acknowledged.lock().unwrap().len() < 400 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Everything acknowledged up to here must be in the copy; writers go on meanwhile.
    let before: Vec<String> = acknowledged.lock().unwrap().clone();
    let summary = {
        let (store, copy) = (store.clone(), copy.clone());
        tokio::task::spawn_blocking(move || store.backup(&copy)).await.unwrap().expect("a backup")
    };
    // Writers go on after it too (how many wrote while it ran depends on the machine's load).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while acknowledged.lock().unwrap().len() <= before.len() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let written_in_all = acknowledged.lock().unwrap().len();
    assert!(written_in_all > before.len(), "writers kept writing during the backup");
    assert_eq!(summary.tables, 1);
    assert!(summary.entries as usize >= before.len() * 3, "{summary:?}");

    // A second backup into the same directory is refused and leaves the first alone.
    let again = store.backup(&copy).expect_err("the directory is not empty");
    assert!(matches!(again, StoreError::Validation(_)), "{again}");
    drop(store);

    store_embedded::restore(&copy, &restored).expect("a restore");
    let back = EmbeddedStore::open_with(&restored, Options::default().ttl_sweep_interval(None)).unwrap();
    assert_eq!(back.replayed_groups(), 0, "a backup needs no journal");
    let base = scan_all(&back, None).await;
    let keys: BTreeSet<(String, String)> = base.iter().map(|i| (s(i, "pk"), s(i, "sk"))).collect();
    for id in &before {
        for sk in ["a", "b"] {
            assert!(keys.contains(&(format!("t#{id}"), sk.into())), "acknowledged transaction {id} lost {sk}");
        }
    }
    // Transactions are whole, the counters count exactly the pairs in the copy.
    let pairs = base.iter().filter(|i| s(i, "pk").starts_with("t#")).count();
    assert_eq!(pairs % 2, 0, "a transaction is half in the copy");
    let counted: i64 =
        base.iter().filter(|i| s(i, "pk") == "counter").map(|i| i["n"].as_n().and_then(|n| n.to_i64()).unwrap()).sum();
    assert_eq!(counted as usize, pairs / 2);
    assert!(pairs / 2 <= written_in_all);
    // The index holds exactly the indexed base items.
    let mut want: Vec<(String, String)> =
        base.iter().filter(|i| i.contains_key("g")).map(|i| (s(i, "pk"), s(i, "sk"))).collect();
    let mut got: Vec<(String, String)> =
        scan_all(&back, Some("by-group")).await.iter().map(|i| (s(i, "pk"), s(i, "sk"))).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // The restored store takes writes.
    back.transact_write_items(pair(9, 1)).await.expect("a write to the restored store");
}

#[test]
fn restore_refuses_what_is_not_a_backup_and_targets_that_are_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (bogus, target) = (dir.path().join("bogus"), dir.path().join("target"));
    std::fs::create_dir(&bogus).unwrap();

    // No database file at all.
    let e = store_embedded::restore(&bogus, &target).unwrap_err();
    assert!(e.to_string().contains("is not a Tally backup"), "{e}");
    assert!(!target.exists(), "a refused restore created nothing");

    // A file of garbage under the right name.
    std::fs::write(bogus.join("tally.redb"), b"not a database at all, just some bytes").unwrap();
    let e = store_embedded::restore(&bogus, &target).unwrap_err();
    assert!(matches!(e, StoreError::Validation(_)), "{e}");
    assert!(!target.exists(), "a refused restore created nothing");

    // A real backup into a directory that already holds something.
    let live = dir.path().join("live");
    let store = EmbeddedStore::open_with(&live, Options::default().ttl_sweep_interval(None)).unwrap();
    let good = dir.path().join("good");
    store.backup(&good).unwrap();
    drop(store);
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep-me"), b"x").unwrap();
    let e = store_embedded::restore(&good, &target).unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 1, "the target is untouched");
}
