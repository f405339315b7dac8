//! Crash test: a child process writes as fast as it can and is killed with SIGKILL at a
//! random moment, several rounds over one directory; afterwards every write the child saw
//! acknowledged must be there, no transaction may be half applied, and every index entry must
//! match its base item.
//!
//! The child is this same test binary, re-executed with the name of [`crash_child`] and an
//! environment variable saying where the store is.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use store::{
    AttributeValue, BatchWriteItem, Item, KeySchema, Projection, PutItem, ScalarType, Scan, Store, StoreError,
    TableDefinition, TransactWrite, TransactWriteItems, UpdateItem, WriteRequest, item,
};
use store_embedded::{EmbeddedStore, Options};

const DIR_VAR: &str = "TALLY_CRASH_TEST_DIR";
const ROUND_VAR: &str = "TALLY_CRASH_TEST_ROUND";
const TABLE: &str = "crash";
/// Concurrent writers in the child, so that group commits hold several callers' writes.
const WRITERS: usize = 4;

fn definition() -> TableDefinition {
    TableDefinition::new(TABLE, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S)).gsi(
        "by-group",
        KeySchema::composite("g", ScalarType::S, "sk", ScalarType::S),
        Projection::KeysOnly,
    )
}

/// The child's entry point, run only by [`acknowledged_writes_survive_kill_9`] (with
/// `--ignored` and [`DIR_VAR`] set); on its own it has nothing to check and returns at once.
#[test]
#[ignore = "the child process of acknowledged_writes_survive_kill_9, which runs it"]
fn crash_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let round: u32 = std::env::var(ROUND_VAR).ok().and_then(|r| r.parse().ok()).unwrap_or(0);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async move {
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open_with(&dir, Options::default().ttl_sweep_interval(None)).expect("open"));
        match store.create_table(definition()).await {
            Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
            Err(e) => panic!("create table: {e}"),
        }
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                child_writer(store, round, writer).await;
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

async fn child_writer(store: Arc<dyn Store>, round: u32, writer: usize) {
    for i in 0.. {
        let id = format!("{round}-{writer}-{i}");
        let puts = (0..25)
            .map(|j| {
                let mut it = item! { "pk" => format!("b#{id}"), "sk" => format!("{j:02}"), "n" => j };
                // Every third item stays out of the index, which must stay sparse.
                if j % 3 != 0 {
                    it.insert("g".into(), format!("g{}", j % 3).into());
                }
                WriteRequest::Put(it)
            })
            .collect();
        let mut batch = BatchWriteItem::default();
        batch.requests.insert(TABLE.into(), puts);
        store.batch_write_item(batch).await.expect("batch write");
        acknowledge(&format!("B {id}"));

        let pair = |sk: &str| {
            TransactWrite::Put(PutItem::new(TABLE, item! { "pk" => format!("t#{id}"), "sk" => sk, "g" => "pairs" }))
        };
        let counter = TransactWrite::Update(
            UpdateItem::new(TABLE, item! { "pk" => "counter", "sk" => format!("w{writer}") }, "ADD #n :one")
                .name("#n", "n")
                .value(":one", 1),
        );
        store
            .transact_write_items(TransactWriteItems {
                items: vec![pair("a"), pair("b"), counter],
                client_request_token: None,
            })
            .await
            .expect("transaction");
        acknowledge(&format!("T {id}"));
    }
}

fn acknowledge(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rng();
    let mut acknowledged = Vec::new();
    let started = Instant::now();
    for round in 0..4u32 {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash::crash_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env(DIR_VAR, dir.path())
            .env(ROUND_VAR, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                let _ = lines_tx.send(line);
            }
        });
        // A random moment, but only once the child has acknowledged a few writes (a loaded
        // machine may start it slowly): without them the round would prove nothing.
        let kill_at = Instant::now() + Duration::from_millis(rng.random_range(300..1200));
        let give_up = Instant::now() + Duration::from_secs(60);
        let mut acked_this_round = 0;
        while Instant::now() < give_up && (Instant::now() < kill_at || acked_this_round < 3) {
            if let Ok(line) = lines_rx.recv_timeout(Duration::from_millis(10)) {
                acked_this_round += usize::from(line.starts_with("B ") || line.starts_with("T "));
                acknowledged.push(line);
            }
        }
        child.kill().expect("kill -9 the child");
        child.wait().unwrap();
        reader.join().unwrap();
        acknowledged.extend(lines_rx.try_iter());
    }
    let acked = acknowledged.iter().filter(|l| l.starts_with("B ") || l.starts_with("T ")).count();
    // Without acknowledged writes the test would prove nothing.
    assert!(acked > 10, "the child acknowledged only {acked} writes");
    eprintln!("{acked} writes acknowledged in {:?}", started.elapsed());

    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        let store = EmbeddedStore::open_with(dir.path(), Options::default().ttl_sweep_interval(None))
            .expect("reopen after the crash");
        let base = scan_all(&store, None).await;
        let index = scan_all(&store, Some("by-group")).await;
        check(&acknowledged, &base, &index);
    });
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

fn check(acknowledged: &[String], base: &[Item], index: &[Item]) {
    let keys: BTreeSet<(String, String)> = base.iter().map(|i| (s(i, "pk"), s(i, "sk"))).collect();

    // Every acknowledged batch and transaction is there in full.
    for line in acknowledged {
        if let Some(id) = line.strip_prefix("B ") {
            for j in 0..25 {
                assert!(
                    keys.contains(&(format!("b#{id}"), format!("{j:02}"))),
                    "acknowledged batch {id} lost item {j}"
                );
            }
        } else if let Some(id) = line.strip_prefix("T ") {
            for sk in ["a", "b"] {
                assert!(keys.contains(&(format!("t#{id}"), sk.to_string())), "acknowledged transaction {id} lost {sk}");
            }
        }
    }

    // No transaction is half applied: pairs come whole, and the counters count exactly the
    // transactions that were applied.
    let mut pairs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut batches: BTreeMap<String, usize> = BTreeMap::new();
    let mut counted = 0i64;
    for item in base {
        let pk = s(item, "pk");
        if let Some(id) = pk.strip_prefix("t#") {
            pairs.entry(id.to_string()).or_default().insert(s(item, "sk"));
        } else if let Some(id) = pk.strip_prefix("b#") {
            *batches.entry(id.to_string()).or_default() += 1;
        } else if pk == "counter" {
            counted += item["n"].as_n().and_then(|n| n.to_i64()).unwrap();
        }
    }
    for (id, sks) in &pairs {
        assert_eq!(sks.len(), 2, "transaction {id} half applied: {sks:?}");
    }
    assert_eq!(counted, pairs.len() as i64, "counters disagree with the applied transactions");
    // A batch write is one redb transaction here, so it is whole too.
    for (id, n) in &batches {
        assert_eq!(*n, 25, "batch {id} half applied");
    }

    // The index holds exactly the base items that have the index key, with matching keys.
    let mut want: Vec<(String, String, String)> =
        base.iter().filter(|i| i.contains_key("g")).map(|i| (s(i, "g"), s(i, "sk"), s(i, "pk"))).collect();
    let mut got: Vec<(String, String, String)> = index.iter().map(|i| (s(i, "g"), s(i, "sk"), s(i, "pk"))).collect();
    want.sort();
    got.sort();
    assert_eq!(got.len(), want.len(), "index and base disagree in size");
    assert!(got == want, "index entries disagree with base items");
    assert!(!base.is_empty(), "nothing was written at all");
}
