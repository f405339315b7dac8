//! Behaviours particular to the embedded engine, or checked here in more detail than the
//! shared conformance suite does: capacity figures, paging by size, TTL, reopening,
//! idempotency tokens, parallel scans and DynamoDB's validation messages.

use std::collections::BTreeSet;
use std::sync::Arc;

use store::limits::MAX_PAGE_BYTES;
use store::{
    AttributeValue, BatchWriteItem, DeleteItem, GetItem, Item, KeySchema, Projection, PutItem, Query, ScalarType, Scan,
    Select, Store, StoreError, TableDefinition, TransactWrite, TransactWriteItems, UpdateItem, WriteRequest, item,
};
use store_embedded::{EmbeddedStore, Options};

const T: &str = "things";

fn definition() -> TableDefinition {
    TableDefinition::new(T, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S))
        .gsi("gsi1", KeySchema::composite("g", ScalarType::S, "sk", ScalarType::S), Projection::KeysOnly)
        .lsi("lsi1", store::KeyAttribute::new("l", ScalarType::N), Projection::All)
        .ttl("expires")
}

async fn fresh() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(dir.path(), Options::default().ttl_sweep_interval(None)).unwrap();
    store.create_table(definition()).await.unwrap();
    (dir, store)
}

fn key(pk: &str, sk: &str) -> Item {
    item! { "pk" => pk, "sk" => sk }
}

#[tokio::test]
async fn write_capacity_counts_the_table_and_each_index_touched() {
    let (_dir, store) = fresh().await;
    let big = "x".repeat(1500);
    let out = store
        .put_item(PutItem::new(T, item! { "pk" => "a", "sk" => "1", "g" => "G", "l" => 1, "blob" => big.clone() }))
        .await
        .unwrap();
    let c = out.consumed_capacity;
    assert_eq!(c.table_units, 2.0);
    assert_eq!(c.global_indexes["gsi1"], 1.0, "keys-only entry is small");
    assert_eq!(c.local_indexes["lsi1"], 2.0, "an ALL projection copies the blob");
    assert_eq!(c.capacity_units, 5.0);
    assert_eq!(c.write_capacity_units, 5.0);

    // Changing the GSI key costs a delete and a put in the index.
    let out = store.update_item(UpdateItem::new(T, key("a", "1"), "SET g = :g").value(":g", "H")).await.unwrap();
    assert_eq!(out.consumed_capacity.global_indexes["gsi1"], 2.0);

    // Removing the index key takes the item out of the index: one delete.
    let out = store.update_item(UpdateItem::new(T, key("a", "1"), "REMOVE g")).await.unwrap();
    assert_eq!(out.consumed_capacity.global_indexes["gsi1"], 1.0);
    assert!(!out.consumed_capacity.local_indexes.is_empty());

    // Transactions cost double.
    let out = store
        .transact_write_items(TransactWriteItems {
            items: vec![TransactWrite::Put(PutItem::new(T, item! { "pk" => "b", "sk" => "1" }))],
            client_request_token: None,
        })
        .await
        .unwrap();
    assert_eq!(out.consumed_capacity[0].capacity_units, 2.0);

    let out = store.delete_item(DeleteItem::new(T, key("a", "1"))).await.unwrap();
    assert_eq!(out.consumed_capacity.table_units, 2.0, "a delete bills the old item");
}

#[tokio::test]
async fn read_capacity_rounds_the_page_up_and_halves_eventual_reads() {
    let (_dir, store) = fresh().await;
    for i in 0..3 {
        store
            .put_item(PutItem::new(T, item! { "pk" => "p", "sk" => format!("{i}"), "blob" => "y".repeat(3000) }))
            .await
            .unwrap();
    }
    let page = store.query(Query::new(T, "pk = :p").value(":p", "p")).await.unwrap();
    // About 9 KB read: three 4 KB units, halved.
    assert_eq!(page.consumed_capacity.capacity_units, 1.5);
    let page = store.query(Query::new(T, "pk = :p").value(":p", "p").consistent()).await.unwrap();
    assert_eq!(page.consumed_capacity.read_capacity_units, 3.0);
    let got = store.get_item(GetItem::new(T, key("nope", "0"))).await.unwrap();
    assert_eq!(got.consumed_capacity.capacity_units, 0.5);
}

#[tokio::test]
async fn a_page_stops_after_one_megabyte_and_resumes() {
    let (_dir, store) = fresh().await;
    let blob = "z".repeat(100 * 1024);
    let n = 25;
    for chunk in (0..n).collect::<Vec<_>>().chunks(5) {
        let mut batch = BatchWriteItem::default();
        batch.requests.insert(
            T.into(),
            chunk
                .iter()
                .map(|i| WriteRequest::Put(item! { "pk" => "big", "sk" => format!("{i:03}"), "blob" => blob.clone() }))
                .collect(),
        );
        store.batch_write_item(batch).await.unwrap();
    }
    let q = Query::new(T, "pk = :p").value(":p", "big").select_count();
    let per_page = MAX_PAGE_BYTES.div_ceil(blob.len() + 20);
    let mut start = None;
    let mut pages = Vec::new();
    loop {
        let page = store.query(q.clone().start_after(start)).await.unwrap();
        assert!(page.items.is_empty(), "Select::Count returns no items");
        assert!(page.scanned_count <= per_page + 1, "{}", page.scanned_count);
        pages.push(page.scanned_count);
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    // About 2.5 MB in 1 MB pages.
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert_eq!(pages.iter().sum::<usize>(), n);
}

trait SelectCount {
    fn select_count(self) -> Self;
}

impl SelectCount for Query {
    fn select_count(mut self) -> Self {
        self.select = Select::Count;
        self
    }
}

#[tokio::test]
async fn expired_items_are_swept_with_their_index_entries() {
    let (_dir, store) = fresh().await;
    for (sk, expires) in [("1", AttributeValue::from(100)), ("2", 300.into()), ("3", "100".into())] {
        store
            .put_item(PutItem::new(T, item! { "pk" => "ttl", "sk" => sk, "g" => "G", "expires" => expires }))
            .await
            .unwrap();
    }
    assert_eq!(store.sweep_expired(50).await.unwrap(), 0);
    assert_eq!(store.sweep_expired(200).await.unwrap(), 1);
    let left = store.query(Query::new(T, "pk = :p").value(":p", "ttl")).await.unwrap();
    let sks: Vec<_> = left.items.iter().map(|i| i["sk"].clone()).collect();
    assert_eq!(sks, vec!["2".into(), "3".into()], "a string TTL never expires");
    let idx = store.query(Query::new(T, "g = :g").index("gsi1").value(":g", "G")).await.unwrap();
    assert_eq!(idx.count, 2);
    // Moving the expiry moves the item's TTL entry.
    store.update_item(UpdateItem::new(T, key("ttl", "2"), "SET expires = :e").value(":e", 1000)).await.unwrap();
    assert_eq!(store.sweep_expired(400).await.unwrap(), 0);
    assert_eq!(store.sweep_expired(1001).await.unwrap(), 1);
}

#[tokio::test]
async fn background_sweeper_deletes_expired_items() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(
        dir.path(),
        Options::default().ttl_sweep_interval(Some(std::time::Duration::from_millis(50))),
    )
    .unwrap();
    store.create_table(definition()).await.unwrap();
    store.put_item(PutItem::new(T, item! { "pk" => "old", "sk" => "1", "expires" => now_secs() - 10 })).await.unwrap();
    // Sweeps every 50 ms; a loaded machine's disk syncs may hold one up for seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let got = store.get_item(GetItem::new(T, key("old", "1"))).await.unwrap();
        if got.item.is_none() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the background sweeper never deleted the expired item");
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test]
async fn data_and_tables_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.create_table(definition()).await.unwrap();
        store.put_item(PutItem::new(T, item! { "pk" => "k", "sk" => "s", "n" => store::n("1.5") })).await.unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(store.list_tables().await.unwrap(), vec![T.to_string()]);
    let got = store.get_item(GetItem::new(T, key("k", "s"))).await.unwrap();
    assert_eq!(got.item.unwrap()["n"], store::n("1.5"));
    let d = store.describe_table(T).await.unwrap();
    assert_eq!(d.item_count, 1);
    assert_eq!(d.definition, definition());
}

#[tokio::test]
async fn client_request_tokens_make_transactions_idempotent() {
    let (_dir, store) = fresh().await;
    let tx = |n: i64| TransactWriteItems {
        items: vec![TransactWrite::Update(UpdateItem::new(T, key("c", "c"), "ADD n :n").value(":n", n))],
        client_request_token: Some("token-1".into()),
    };
    store.transact_write_items(tx(1)).await.unwrap();
    store.transact_write_items(tx(1)).await.unwrap();
    let got = store.get_item(GetItem::new(T, key("c", "c"))).await.unwrap();
    assert_eq!(got.item.unwrap()["n"], 1.into(), "the repeat was not applied again");
    let err = store.transact_write_items(tx(2)).await.unwrap_err();
    assert!(matches!(err, StoreError::IdempotentParameterMismatch(_)), "{err:?}");
}

#[tokio::test]
async fn parallel_scan_segments_cover_every_item_once() {
    let (_dir, store) = fresh().await;
    let mut batch = BatchWriteItem::default();
    batch
        .requests
        .insert(T.into(), (0..25).map(|i| WriteRequest::Put(item! { "pk" => format!("p{i}"), "sk" => "s" })).collect());
    store.batch_write_item(batch).await.unwrap();
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for segment in 0..4 {
        let mut start = None;
        loop {
            let page = store.scan(Scan::new(T).segment(segment, 4).limit(3).start_after(start)).await.unwrap();
            for item in &page.items {
                seen.insert(item["pk"].clone());
                total += 1;
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
    }
    assert_eq!((seen.len(), total), (25, 25));
}

#[tokio::test]
async fn validation_speaks_dynamodbs_words() {
    let (_dir, store) = fresh().await;
    let store: Arc<dyn Store> = Arc::new(store);
    let message = |e: StoreError| e.to_string();

    let e = store.put_item(PutItem::new(T, item! { "sk" => "s" })).await.unwrap_err();
    assert_eq!(message(e), "One or more parameter values were invalid: Missing the key pk in the item");
    let e = store.put_item(PutItem::new(T, item! { "pk" => 1, "sk" => "s" })).await.unwrap_err();
    assert_eq!(message(e), "One or more parameter values were invalid: Type mismatch for key pk expected: S actual: N");
    let e = store.put_item(PutItem::new(T, item! { "pk" => "", "sk" => "s" })).await.unwrap_err();
    assert_eq!(
        message(e),
        "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: pk"
    );
    let e = store
        .put_item(PutItem::new(T, item! { "pk" => "p", "sk" => "s", "big" => "x".repeat(400 * 1024) }))
        .await
        .unwrap_err();
    assert_eq!(e, StoreError::ItemTooLarge("Item size has exceeded the maximum allowed size".into()));
    let e = store.put_item(PutItem::new(T, item! { "pk" => "p".repeat(2049), "sk" => "s" })).await.unwrap_err();
    assert!(matches!(e, StoreError::KeyTooLarge(_)));
    let e = store.put_item(PutItem::new(T, item! { "pk" => "p", "sk" => "s", "g" => 5 })).await.unwrap_err();
    assert!(e.is_validation(), "an index key of the wrong type: {e}");
    let e = store.update_item(UpdateItem::new(T, key("p", "s"), "SET pk = :v").value(":v", "q")).await.unwrap_err();
    assert!(message(e).contains("Cannot update attribute pk. This attribute is part of the key"));
    let e = store.get_item(GetItem::new("missing", key("p", "s"))).await.unwrap_err();
    assert_eq!(e, StoreError::ResourceNotFound("Requested resource not found".into()));
    let e = store.query(Query::new(T, "g = :g").index("nope").value(":g", "x")).await.unwrap_err();
    assert!(e.is_validation());
    let e = store.query(Query::new(T, "g = :g").index("gsi1").value(":g", "x").consistent()).await.unwrap_err();
    assert!(e.is_validation());

    let mut batch = BatchWriteItem::default();
    batch
        .requests
        .insert(T.into(), (0..26).map(|i| WriteRequest::Put(item! { "pk" => format!("{i}"), "sk" => "s" })).collect());
    let e = store.batch_write_item(batch).await.unwrap_err();
    assert_eq!(message(e), "Too many items requested for the BatchWriteItem call");
    let mut batch = BatchWriteItem::default();
    batch.requests.insert(T.into(), vec![WriteRequest::Put(key("d", "d")), WriteRequest::Delete(key("d", "d"))]);
    let e = store.batch_write_item(batch).await.unwrap_err();
    assert_eq!(message(e), "Provided list of item keys contains duplicates");

    let e = store
        .transact_write_items(TransactWriteItems {
            items: vec![
                TransactWrite::Put(PutItem::new(T, key("d", "d"))),
                TransactWrite::Delete(DeleteItem::new(T, key("d", "d"))),
            ],
            client_request_token: None,
        })
        .await
        .unwrap_err();
    assert_eq!(message(e), "Transaction request cannot include multiple operations on one item");
    let e = store
        .transact_write_items(TransactWriteItems {
            items: (0..101).map(|i| TransactWrite::Put(PutItem::new(T, key(&format!("{i}"), "s")))).collect(),
            client_request_token: None,
        })
        .await
        .unwrap_err();
    assert!(e.is_validation());
    // None of the failed writes left anything behind.
    let all = store.scan(Scan::new(T)).await.unwrap();
    assert_eq!(all.count, 0, "{:?}", all.items);
}

#[tokio::test]
async fn a_cancelled_transaction_names_the_failing_item_and_writes_nothing() {
    let (_dir, store) = fresh().await;
    store.put_item(PutItem::new(T, key("x", "1"))).await.unwrap();
    let e = store
        .transact_write_items(TransactWriteItems {
            items: vec![
                TransactWrite::Put(PutItem::new(T, item! { "pk" => "y", "sk" => "1", "g" => "G" })),
                TransactWrite::Put(PutItem::new(T, key("x", "1")).condition("attribute_not_exists(pk)")),
            ],
            client_request_token: None,
        })
        .await
        .unwrap_err();
    let codes: Vec<_> = e.cancellation_reasons().unwrap().iter().map(|r| r.code).collect();
    assert_eq!(codes, vec![store::CancellationCode::None, store::CancellationCode::ConditionalCheckFailed]);
    let got = store.get_item(GetItem::new(T, key("y", "1"))).await.unwrap();
    assert!(got.item.is_none());
    let idx = store.query(Query::new(T, "g = :g").index("gsi1").value(":g", "G")).await.unwrap();
    assert_eq!(idx.count, 0);
}

#[tokio::test]
async fn an_lsi_fetches_unprojected_attributes_from_the_table_and_bills_the_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(dir.path(), Options::default().ttl_sweep_interval(None)).unwrap();
    let def = TableDefinition::new("lsi", KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S)).lsi(
        "by-n",
        store::KeyAttribute::new("n", ScalarType::N),
        Projection::KeysOnly,
    );
    store.create_table(def).await.unwrap();
    store.put_item(PutItem::new("lsi", item! { "pk" => "p", "sk" => "a", "n" => 2, "extra" => "x" })).await.unwrap();
    let q = || Query::new("lsi", "pk = :p AND n > :z").index("by-n").value(":p", "p").value(":z", 0);
    let page = store.query(q()).await.unwrap();
    assert_eq!(page.items, vec![item! { "pk" => "p", "sk" => "a", "n" => 2 }], "keys only by default");
    assert_eq!(page.consumed_capacity.table_units, 0.0);
    let page = store.query(q().projection("extra, n")).await.unwrap();
    assert_eq!(page.items, vec![item! { "n" => 2, "extra" => "x" }]);
    assert_eq!(page.consumed_capacity.local_indexes["by-n"], 0.5);
    assert_eq!(page.consumed_capacity.table_units, 0.5);
}

#[tokio::test]
async fn updated_return_values_keep_only_the_touched_paths() {
    let (_dir, store) = fresh().await;
    store.put_item(PutItem::new(T, item! { "pk" => "u", "sk" => "1", "keep" => 1 })).await.unwrap();
    let mut m = std::collections::BTreeMap::new();
    m.insert("a".to_string(), AttributeValue::from(1));
    m.insert("b".to_string(), AttributeValue::from(2));
    store.update_item(UpdateItem::new(T, key("u", "1"), "SET m = :m").value(":m", AttributeValue::M(m))).await.unwrap();
    let update = || UpdateItem::new(T, key("u", "1"), "SET m.a = :v").value(":v", 5);
    let old = store.update_item(update().return_values(store::ReturnValues::UpdatedOld)).await.unwrap();
    let nested = |v: i64| {
        let mut m = std::collections::BTreeMap::new();
        m.insert("a".to_string(), AttributeValue::from(v));
        item! { "m" => AttributeValue::M(m) }
    };
    assert_eq!(old.attributes, Some(nested(1)));
    let new = store
        .update_item(
            UpdateItem::new(T, key("u", "1"), "SET m.a = :v")
                .value(":v", 6)
                .return_values(store::ReturnValues::UpdatedNew),
        )
        .await
        .unwrap();
    assert_eq!(new.attributes, Some(nested(6)));
}

/// Regression: a second process opening a store in use got `internal error: cannot open …:
/// Database already open. Cannot acquire lock.`; it is told what is wrong and what to do.
#[test]
fn a_store_open_elsewhere_is_refused_saying_why() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let _first = EmbeddedStore::open(dir.path()).expect("the store opens");
    let second = EmbeddedStore::open(dir.path()).err().expect("a second open is refused");
    assert!(matches!(second, StoreError::ResourceInUse(_)), "{second:?}");
    let text = second.to_string();
    assert!(text.contains("another process") && !text.contains("internal error"), "{text}");
}

/// Regression: data files were created 0644 and the directory 0755, so any local user could read
/// the salts and password hashes. A new store is owner-only, and an old one is narrowed on open.
#[cfg(unix)]
#[tokio::test]
async fn the_store_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let check = |dir: &std::path::Path| {
        assert_eq!(mode(dir), 0o700, "the directory");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    };
    {
        let store = EmbeddedStore::open_with(&dir, Options::default().ttl_sweep_interval(None)).unwrap();
        store.create_table(definition()).await.unwrap();
        store.put_item(PutItem::new(T, key("a", "1"))).await.unwrap();
    }
    assert!(std::fs::read_dir(&dir).unwrap().count() >= 2, "a database and a journal");
    check(&dir);
    // A store made by an older version, readable by all, is narrowed when it opens.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::set_permissions(entry.unwrap().path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    drop(EmbeddedStore::open_with(&dir, Options::default().ttl_sweep_interval(None)).unwrap());
    check(&dir);
}

/// The journal file is reused while writes keep coming (its syncs stay cheap), but once the
/// writer is idle it checkpoints and cuts the file to nothing, and closing does the same: a
/// store whose load fell keeps no journal the size of its busiest moment. Nothing is lost, and
/// writes after a cut are journaled and survive a reopen as before.
#[tokio::test]
async fn the_journal_is_cut_once_the_writer_is_idle_and_when_the_store_closes() {
    use std::time::{Duration, Instant};
    use store_embedded::Checkpoint;
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("tally.journal");
    let journal_len = || std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0);
    let options = |idle: Duration| {
        Options::default().ttl_sweep_interval(None).checkpoint(Checkpoint {
            interval: Duration::from_secs(3600),
            journal_bytes: 64 << 20,
            idle,
        })
    };
    let pad = "x".repeat(2_000);
    let put = |n: usize| {
        let mut item = key("a", &format!("{n:04}"));
        item.insert("pad".into(), pad.as_str().into());
        PutItem::new(T, item)
    };
    {
        // Idle after 3 s: long enough that a loaded machine's pause between two writes (or
        // before the look at the file) does not cut the journal under the test.
        let store = EmbeddedStore::open_with(dir.path(), options(Duration::from_secs(3))).unwrap();
        store.create_table(definition()).await.unwrap();
        for n in 0..50 {
            store.put_item(put(n)).await.unwrap();
        }
        assert!(journal_len() > 50 * 2_000, "the writes are journaled: {} bytes", journal_len());
        // Jobs that change nothing (a failed condition) do not keep the writer from idling.
        let waited = Instant::now();
        while journal_len() > 0 {
            assert!(waited.elapsed() < Duration::from_secs(30), "the idle writer never cut the journal");
            let refused = store.put_item(put(0).condition("attribute_not_exists(pk)")).await;
            assert!(refused.is_err());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Writes after the cut are journaled again, from an empty file.
        for n in 50..60 {
            store.put_item(put(n)).await.unwrap();
        }
        assert!(journal_len() > 0);
    }
    assert_eq!(journal_len(), 0, "closing cuts the journal");
    // A long idle time: only closing cuts it; everything written is there after reopening.
    let store = EmbeddedStore::open_with(dir.path(), options(Duration::from_secs(3600))).unwrap();
    assert_eq!(store.replayed_groups(), 0);
    let items = store.query(Query::new(T, "pk = :p").value(":p", "a")).await.unwrap().items;
    assert_eq!(items.len(), 60);
    store.put_item(put(60)).await.unwrap();
    assert!(journal_len() > 0, "reused while the writer is busy");
    drop(store);
    // Never idle, but the load falls to a trickle (a lease renewed now and then): the first
    // checkpoint after a busy interval cuts the file, since the interval wrote little of it.
    let store = EmbeddedStore::open_with(
        dir.path(),
        Options::default().ttl_sweep_interval(None).checkpoint(Checkpoint {
            interval: Duration::from_secs(2),
            journal_bytes: 64 << 20,
            idle: Duration::from_secs(3600),
        }),
    )
    .unwrap();
    let big = "y".repeat(20_000);
    let store = Arc::new(store);
    let burst: Vec<_> = (100..300)
        .map(|n| {
            let mut item = key("a", &format!("{n:04}"));
            item.insert("pad".into(), big.as_str().into());
            let store = store.clone();
            tokio::spawn(async move { store.put_item(PutItem::new(T, item)).await })
        })
        .collect();
    for written in burst {
        written.await.unwrap().unwrap();
    }
    assert!(journal_len() > 1 << 20, "a busy interval: {} bytes", journal_len());
    let waited = Instant::now();
    let mut n = 1_000;
    while journal_len() > 1 << 20 {
        assert!(waited.elapsed() < Duration::from_secs(30), "a trickle of writes kept the journal at its busiest size");
        store.put_item(put(n)).await.unwrap();
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(store);
    let store = EmbeddedStore::open_with(dir.path(), options(Duration::from_secs(3600))).unwrap();
    let (mut count, mut start) = (0, None);
    loop {
        let page = store.query(Query::new(T, "pk = :p").value(":p", "a").start_after(start)).await.unwrap();
        count += page.items.len();
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    assert_eq!(count, 61 + 200 + (n - 1_000), "nothing is lost");
}

/// The bytes the database file of the store in `dir` takes on disk.
fn database_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir.join("tally.redb")).unwrap().blocks() * 512
}

/// Writes 3,000 items of 4 KB in batches, then deletes two in three: the pages they held are
/// freed, and the file keeps its size unless it is compacted.
async fn write_then_delete_most(store: &EmbeddedStore) {
    let pad = "z".repeat(4_000);
    let item = |n: usize| {
        let mut item = key("c", &format!("{n:05}"));
        item.insert("pad".into(), pad.as_str().into());
        item
    };
    for chunk in (0..3_000).collect::<Vec<_>>().chunks(25) {
        let mut batch = BatchWriteItem::default();
        batch.requests.insert(T.into(), chunk.iter().map(|&n| WriteRequest::Put(item(n))).collect());
        store.batch_write_item(batch).await.unwrap();
    }
    let doomed: Vec<usize> = (0..3_000).filter(|n| n % 3 != 0).collect();
    for chunk in doomed.chunks(25) {
        let mut batch = BatchWriteItem::default();
        batch
            .requests
            .insert(T.into(), chunk.iter().map(|&n| WriteRequest::Delete(key("c", &format!("{n:05}")))).collect());
        store.batch_write_item(batch).await.unwrap();
    }
}

/// Every item [`write_then_delete_most`] kept is there, whole, and none it deleted.
async fn the_kept_items_are_there(store: &EmbeddedStore) {
    let (mut kept, mut start) = (Vec::new(), None);
    loop {
        let page = store.query(Query::new(T, "pk = :p").value(":p", "c").start_after(start)).await.unwrap();
        kept.extend(page.items);
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    let want: Vec<String> = (0..3_000).filter(|n| n % 3 == 0).map(|n| format!("{n:05}")).collect();
    let got: Vec<String> = kept.iter().map(|i| i["sk"].as_s().unwrap().to_string()).collect();
    assert_eq!(got, want);
    assert!(kept.iter().all(|i| i["pad"].as_s().map(str::len) == Some(4_000)), "an item came back damaged");
}

/// Closing a store whose file grew compacts it: the pages freed by deleted (or rewritten) items
/// are given back instead of staying as holes, and every item is still there after reopening.
#[tokio::test]
async fn closing_compacts_a_file_that_grew_and_keeps_every_item() {
    use std::time::Duration;
    use store_embedded::{Checkpoint, Compaction};
    // No checkpoint and no rest point while it runs: only the close compacts.
    let options = |compaction: Compaction| {
        Options::default()
            .ttl_sweep_interval(None)
            .checkpoint(Checkpoint {
                interval: Duration::from_secs(3600),
                journal_bytes: 64 << 20,
                idle: Duration::from_secs(3600),
            })
            .compaction(compaction)
    };
    let mut bytes = Vec::new();
    let mut dirs = Vec::new();
    for compaction in [Compaction { growth: None, ..Compaction::default() }, Compaction::default()] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = EmbeddedStore::open_with(dir.path(), options(compaction)).unwrap();
            store.create_table(definition()).await.unwrap();
            write_then_delete_most(&store).await;
            assert_eq!(store.compactions().count, 0, "nothing compacts before the close");
        }
        bytes.push(database_bytes(dir.path()));
        dirs.push(dir);
    }
    let [kept, compacted] = [bytes[0], bytes[1]];
    eprintln!("on disk after the close: {kept} bytes never compacted, {compacted} compacted");
    assert!(
        compacted * 10 <= kept * 6,
        "compacted at close: {compacted} bytes on disk, against {kept} for the same store never compacted"
    );
    for dir in &dirs {
        let store = EmbeddedStore::open_with(dir.path(), options(Compaction::default())).unwrap();
        assert_eq!(store.replayed_groups(), 0, "the close checkpointed before compacting");
        the_kept_items_are_there(&store).await;
    }
    // Reopened and closed, it stays as small.
    let store = EmbeddedStore::open_with(dirs[1].path(), options(Compaction::default())).unwrap();
    drop(store);
    assert!(database_bytes(dirs[1].path()) <= compacted + (64 << 10));
}

/// A store whose writer comes to rest (here: idle) compacts its file while it stays open:
/// reads and writes go on after the pause, and writes made after it are journaled and survive a
/// reopen like any other.
#[tokio::test]
async fn an_idle_writer_compacts_a_file_that_grew_and_writes_go_on() {
    use std::time::{Duration, Instant};
    use store_embedded::Checkpoint;
    let options = Options::default().ttl_sweep_interval(None).checkpoint(Checkpoint {
        interval: Duration::from_secs(3600),
        journal_bytes: 64 << 20,
        idle: Duration::from_secs(1),
    });
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EmbeddedStore::open_with(dir.path(), options.clone()).unwrap();
        store.create_table(definition()).await.unwrap();
        write_then_delete_most(&store).await;
        let waited = Instant::now();
        while store.compactions().count == 0 {
            assert!(waited.elapsed() < Duration::from_secs(30), "the idle writer never compacted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let compactions = store.compactions();
        let (before, after) = compactions.last_bytes.expect("a store on a file knows its size");
        eprintln!("compacted at rest: {before} to {after} bytes on disk in {:?}", compactions.longest_pause);
        assert!(after * 10 <= before * 6, "compacting took the file from {before} to {after} bytes on disk");
        assert!(compactions.longest_pause < Duration::from_secs(10));
        the_kept_items_are_there(&store).await;
        // Writes after the compaction: journaled, then made durable by the close.
        store.put_item(PutItem::new(T, key("after", "1"))).await.unwrap();
        // Idle again with nothing grown: no second compaction.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        store.put_item(PutItem::new(T, key("after", "2"))).await.unwrap();
        assert_eq!(store.compactions().count, 1, "compacted again with nothing grown");
    }
    let store = EmbeddedStore::open_with(dir.path(), options).unwrap();
    the_kept_items_are_there(&store).await;
    for sk in ["1", "2"] {
        let got = store.get_item(GetItem::new(T, key("after", sk))).await.unwrap();
        assert!(got.item.is_some(), "the write after the compaction was lost");
    }
}

/// The store counts its group commits: writes that wait together share a group and one journal
/// sync, each counted once with the time it took; a group that writes nothing (every condition
/// refused) commits nothing and is not counted; a table's creation is a durable commit of its
/// own, with no journal record.
#[tokio::test]
async fn group_commits_are_counted_with_their_operations_and_journal_syncs() {
    use std::time::Duration;
    use store_embedded::Checkpoint;
    let dir = tempfile::tempdir().unwrap();
    // No checkpoint while the test runs, so every group with a write has a journal record.
    let options = Options::default().ttl_sweep_interval(None).checkpoint(Checkpoint {
        interval: Duration::from_secs(3600),
        journal_bytes: 64 << 20,
        idle: Duration::from_secs(3600),
    });
    let store = Arc::new(EmbeddedStore::open_with(dir.path(), options).unwrap());
    assert_eq!(store.groups().count, 0, "nothing committed yet");
    store.create_table(definition()).await.unwrap();
    let created = store.groups();
    assert_eq!((created.count, created.operations, created.journal_syncs), (1, 1, 0), "{created:?}");

    let writes: Vec<_> = (0..64)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move { store.put_item(PutItem::new(T, key("a", &format!("{n:02}")))).await })
        })
        .collect();
    for w in writes {
        w.await.unwrap().unwrap();
    }
    let written = store.groups();
    let groups = written.count - created.count;
    assert_eq!(written.operations - created.operations, 64, "{written:?}");
    assert!((1..=64).contains(&groups), "{written:?}");
    assert_eq!(written.journal_syncs, groups, "one journal record per group: {written:?}");
    assert!(written.journal_time > Duration::ZERO && written.busy >= written.journal_time, "{written:?}");

    let refused = store.put_item(PutItem::new(T, key("a", "00")).condition("attribute_not_exists(pk)")).await;
    assert!(matches!(refused, Err(StoreError::ConditionalCheckFailed { .. })), "{refused:?}");
    let after = store.groups();
    assert_eq!((after.count, after.journal_syncs), (written.count, written.journal_syncs), "{after:?}");
    assert_eq!(after.operations, written.operations, "a group that wrote nothing is not counted");
}
