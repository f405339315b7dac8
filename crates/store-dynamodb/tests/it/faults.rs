//! Faults between the SDK and dynalite: a loopback HTTP proxy written here injects throttling,
//! 500s, dropped connections (before forwarding, and after — the write applied, its answer
//! lost) and answers delayed past the client's attempt timeout, and leaves batch writes
//! unprocessed (so `batch_write_all` resends them). Under a concurrent mixed
//! workload (create-only puts, versioned conditional updates, counter flushes, batch writes)
//! every acknowledged write is present, nothing is applied twice, and the run ends in bounded
//! time.
//!
//! Counters go through [`store::counter::CounterFlush`], the idempotent mechanism: a plain
//! `ADD` retried after a lost answer counts twice, which the first test shows on purpose, so
//! that the fault injection is known to reach the dangerous case.
//!
//! Transactions with a `ClientRequestToken` are not run through the proxy: dynalite has no
//! transactions, and moto ignores the token (see `unsupported.rs`), so a retried transaction is
//! applied twice there whatever the client does — such a run would only show moto's deviation.
//! The token path rests instead on `retries.rs` (every SDK retry of a transaction carries the
//! caller's token, or the one the SDK generated) and on DynamoDB's documented idempotency,
//! which the conformance case `transact-write-idempotency` checks on the embedded engine.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use store::counter::{CounterFlush, FlushOutcome};
use store::{
    AttributeValue, BatchWriteItem, GetItem, Item, KeySchema, PutItem, Query, ScalarType, Store, TableDefinition,
    UpdateItem, WriteRequest, item,
};
use store_dynamodb::{DynamoDbStore, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::emulator::endpoint;

/// What the proxy does to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// Forwarded, answered.
    None,
    /// Not forwarded: `ProvisionedThroughputExceededException`.
    Throttle,
    /// Not forwarded: HTTP 500 `InternalServerError`.
    ServerErrorBefore,
    /// Forwarded (so applied), then answered with HTTP 500.
    ServerErrorAfter,
    /// Not forwarded: the connection is closed without an answer.
    DropBefore,
    /// Forwarded (so applied), then the connection is closed without an answer.
    DropAfter,
    /// Held past the attempt timeout, then forwarded: it may land after the client's retry.
    DelayBefore,
    /// Forwarded, and the answer held past the attempt timeout.
    DelayAfter,
    /// A `BatchWriteItem` not forwarded but answered with every write unprocessed, as DynamoDB
    /// does when a partition is busy (other requests are forwarded and answered).
    Unprocessed,
}

/// The faults any request may get at random; batch writes may also get [`Fault::Unprocessed`].
const FAULTS: [Fault; 7] = [
    Fault::Throttle,
    Fault::ServerErrorBefore,
    Fault::ServerErrorAfter,
    Fault::DropBefore,
    Fault::DropAfter,
    Fault::DelayBefore,
    Fault::DelayAfter,
];

/// The client's time per attempt; delayed requests are held longer than this.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(800);
const DELAY: Duration = Duration::from_millis(1200);
/// A whole run, faults, recovery and checks included, must end within this.
const RUN_LIMIT: Duration = Duration::from_secs(240);

const THROTTLE_BODY: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded"}"#;
const INTERNAL_BODY: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected"}"#;

/// A small deterministic generator (SplitMix64), so that a failing run can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The proxy's state: how it picks faults, what it injected, and what is still in flight.
struct Faults {
    /// Random faults on or off; off, every request is forwarded and answered.
    random: AtomicBool,
    /// Faults to inject first, in order, before any random ones.
    script: Mutex<VecDeque<Fault>>,
    rng: Mutex<Rng>,
    /// Percentage of requests that get a random fault.
    rate: u64,
    injected: Mutex<BTreeMap<Fault, u64>>,
    in_flight: AtomicUsize,
    /// Batch writes seen while random faults were on.
    batch_writes: AtomicUsize,
}

impl Faults {
    fn pick(&self, batch_write: bool) -> Fault {
        if let Some(f) = self.script.lock().unwrap().pop_front() {
            return f;
        }
        if !self.random.load(Ordering::SeqCst) {
            return Fault::None;
        }
        let mut rng = self.rng.lock().unwrap();
        // The first batch write of a run is always left unprocessed, so that the case is met.
        if batch_write && (self.batch_writes.fetch_add(1, Ordering::SeqCst) == 0 || rng.below(100) < 20) {
            return Fault::Unprocessed;
        }
        if rng.below(100) >= self.rate {
            return Fault::None;
        }
        FAULTS[rng.below(FAULTS.len() as u64) as usize]
    }

    /// Waits (boundedly) until no request is held or being forwarded, so that a delayed write
    /// cannot land after the checks.
    async fn quiesce(&self) {
        let until = Instant::now() + Duration::from_secs(20);
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            assert!(Instant::now() < until, "the proxy still has requests in flight after 20 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Starts the proxy on a loopback port in front of `upstream` (`http://host:port`).
async fn proxy(upstream: &str, seed: u64, rate: u64) -> (String, Arc<Faults>) {
    let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_string();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let faults = Arc::new(Faults {
        random: AtomicBool::new(false),
        script: Mutex::default(),
        rng: Mutex::new(Rng(seed)),
        rate,
        injected: Mutex::default(),
        in_flight: AtomicUsize::new(0),
        batch_writes: AtomicUsize::new(0),
    });
    let state = faults.clone();
    // The accept loop ends with the test's runtime.
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let state = state.clone();
            let upstream = upstream.clone();
            state.in_flight.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                // Every step is bounded, so a connection task always ends.
                let _ = tokio::time::timeout(Duration::from_secs(15), serve(conn, &upstream, &state)).await;
                state.in_flight.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (format!("http://{addr}"), faults)
}

/// Serves one request on `conn` (the proxy answers `Connection: close`, so one per connection).
async fn serve(mut conn: TcpStream, upstream: &str, faults: &Faults) {
    let Some(request) = read_request(&mut conn).await else { return };
    let unprocessed = unprocessed_answer(&request);
    let fault = match faults.pick(unprocessed.is_some()) {
        // A scripted `Unprocessed` for a request that is not a batch write.
        Fault::Unprocessed if unprocessed.is_none() => Fault::None,
        fault => fault,
    };
    *faults.injected.lock().unwrap().entry(fault).or_default() += 1;
    let canned = |status: u16, body: &str| {
        format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let answer = match fault {
        Fault::Unprocessed => canned(200, unprocessed.as_deref().unwrap_or_default()),
        Fault::Throttle => canned(400, THROTTLE_BODY),
        Fault::ServerErrorBefore => canned(500, INTERNAL_BODY),
        Fault::DropBefore => return,
        _ => {
            if fault == Fault::DelayBefore {
                tokio::time::sleep(DELAY).await;
            }
            let Some(response) = forward(&request, upstream).await else { return };
            match fault {
                Fault::DropAfter => return,
                Fault::ServerErrorAfter => canned(500, INTERNAL_BODY),
                Fault::DelayAfter => {
                    tokio::time::sleep(DELAY).await;
                    response
                }
                _ => response,
            }
        }
    };
    let _ = conn.write_all(&answer).await;
    let _ = conn.shutdown().await;
}

/// For a `BatchWriteItem`, the answer that leaves every write unprocessed: its `RequestItems`
/// echoed as `UnprocessedItems`. `None` for any other request.
fn unprocessed_answer(request: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(request);
    if !text.contains("DynamoDB_20120810.BatchWriteItem") {
        return None;
    }
    let start = text.find("\"RequestItems\":")? + "\"RequestItems\":".len();
    let object = json_object(&text[start..])?;
    Some(format!("{{\"UnprocessedItems\":{object}}}"))
}

/// The JSON object at the start of `text` (after spaces), by matching braces outside strings.
fn json_object(text: &str) -> Option<&str> {
    let text = text.trim_start();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') => in_string = false,
            (true, false, _) => {}
            (false, _, '"') => in_string = true,
            (false, _, '{') => depth += 1,
            (false, _, '}') => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&text[..=i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Sends `request` upstream on a new connection with `Connection: close`, returns the raw answer.
async fn forward(request: &[u8], upstream: &str) -> Option<Vec<u8>> {
    let end = find(request, b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&request[..end]);
    let mut rewritten: String = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect::<Vec<_>>()
        .join("\r\n");
    rewritten.push_str("\r\nConnection: close\r\n\r\n");
    let mut bytes = rewritten.into_bytes();
    bytes.extend_from_slice(&request[end + 4..]);
    let mut up = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(upstream)).await.ok()?.ok()?;
    up.write_all(&bytes).await.ok()?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), up.read_to_end(&mut response)).await.ok()?.ok()?;
    (!response.is_empty()).then_some(response)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads one HTTP request (headers and a `Content-Length` body), raw.
async fn read_request(conn: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut chunk)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").and_then(|v| v.trim().parse().ok()))
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                buf.truncate(end + 4 + length);
                return Some(buf);
            }
        }
    }
}

/// The engine through the proxy: short attempts, a few SDK retries, bounded calls.
async fn proxied(endpoint: &str) -> DynamoDbStore {
    let options = Options {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(100),
        connect_timeout: Duration::from_secs(1),
        attempt_timeout: ATTEMPT_TIMEOUT,
        operation_timeout: Duration::from_secs(6),
        ..Options::emulator(endpoint)
    };
    DynamoDbStore::connect(options).await.expect("connect through the proxy")
}

fn seed() -> u64 {
    match std::env::var("TALLY_FAULT_SEED") {
        Ok(s) => s.parse().expect("TALLY_FAULT_SEED is a u64"),
        Err(_) => SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64),
    }
}

/// A fresh `pk`/`sk` table on the direct connection, named for the test and this process.
async fn table(direct: &dyn Store, name: &str) -> String {
    let name = format!("faults-{name}-{}", std::process::id());
    let _ = direct.delete_table(&name).await;
    let definition = TableDefinition::new(&name, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S));
    direct.create_table(definition).await.expect("create the table");
    name
}

async fn get(store: &dyn Store, table: &str, key: Item) -> Option<Item> {
    store.get_item(GetItem::new(table, key).consistent()).await.expect("consistent get").item
}

fn number(item: &Item, attribute: &str) -> i64 {
    item.get(attribute).and_then(AttributeValue::as_n).and_then(|n| n.to_i64()).unwrap_or(0)
}

/// Guard for the hazard itself: a plain `ADD` whose answer is lost is retried by the SDK and
/// counts twice. If this ever counts once, the proxy no longer injects the dangerous
/// case and the mixed test below proves less than it claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_add_retried_after_a_lost_answer_counts_twice() {
    let Some(dynalite) = endpoint("dynalite", "TALLY_DYNALITE_ENDPOINT") else { return };
    let direct = crate::emulator::store(&dynalite).await;
    let table = table(direct.as_ref(), "plain-add").await;
    let (endpoint, faults) = proxy(&dynalite, 1, 0).await;
    let store = proxied(&endpoint).await;
    let key = item! { "pk" => "c", "sk" => "c" };
    faults.script.lock().unwrap().push_back(Fault::DropAfter);
    let add = UpdateItem::new(&table, key.clone(), "ADD #v :one").name("#v", "views").value(":one", 1);
    store.update_item(add).await.expect("the SDK's retry succeeds");
    faults.quiesce().await;
    // Twice; more if a slow machine also timed the retry out.
    let views = number(&get(direct.as_ref(), &table, key).await.expect("item"), "views");
    assert!(views >= 2, "the lost answer's retry counted {views} time(s)");
    direct.delete_table(&table).await.expect("delete the table");
}

/// The same lost answer with a counter flush: the retry finds the flush applied, counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_flush_retried_after_a_lost_answer_counts_once() {
    let Some(dynalite) = endpoint("dynalite", "TALLY_DYNALITE_ENDPOINT") else { return };
    let direct = crate::emulator::store(&dynalite).await;
    let table = table(direct.as_ref(), "flush-once").await;
    let (endpoint, faults) = proxy(&dynalite, 1, 0).await;
    let store = proxied(&endpoint).await;
    let key = item! { "pk" => "c", "sk" => "c" };
    // Each flush meets one fault on its first attempt; the SDK's retry goes through cleanly.
    let script = [
        (Fault::DropAfter, Some(FlushOutcome::AlreadyApplied)),
        (Fault::ServerErrorAfter, Some(FlushOutcome::AlreadyApplied)),
        (Fault::DelayAfter, Some(FlushOutcome::AlreadyApplied)),
        // Held past the timeout, then forwarded: the retry may land before or after it.
        (Fault::DelayBefore, None),
        // Not forwarded, so the retry applies it — unless a slow machine times that retry out
        // too, when a third attempt finds it applied. Either is right; the sum below decides.
        (Fault::DropBefore, None),
    ];
    let mut flushes = Vec::new();
    for (n, (fault, expected)) in script.into_iter().enumerate() {
        faults.script.lock().unwrap().push_back(fault);
        let flush = CounterFlush::new(&table, key.clone(), n as u64 + 1).add("views", 1u64 << n);
        let outcome = flush.apply(&store).await.unwrap_or_else(|e| panic!("flush {} under {fault:?}: {e:?}", n + 1));
        if let Some(expected) = expected {
            assert_eq!(outcome, expected, "flush {} under {fault:?}", n + 1);
        }
        flushes.push(flush);
    }
    // A re-run of an old flush, as after a restart from a stale checkpoint, changes nothing.
    assert_eq!(flushes[0].apply(&store).await.expect("flush 1 again"), FlushOutcome::AlreadyApplied);
    faults.quiesce().await;
    let item = get(direct.as_ref(), &table, key).await.expect("item");
    // Deltas 1, 2, 4, 8, 16: any double count shows in the sum.
    assert_eq!((number(&item, "views"), number(&item, "flush")), (31, 5), "{item:?}");
    direct.delete_table(&table).await.expect("delete the table");
}

/// What the workload saw, for the checks.
#[derive(Default)]
struct Ledger {
    /// Create-only puts acknowledged: key → writer token.
    puts: BTreeMap<(String, String), String>,
    /// Versioned updates acknowledged, per document: write ids.
    updates: BTreeMap<String, BTreeSet<String>>,
    /// Counter flushes settled, per counter: the sums of their deltas and the last flush.
    counters: BTreeMap<String, (i64, i64, u64)>,
    /// Batch writes acknowledged: keys.
    batches: BTreeSet<(String, String)>,
    /// Writes whose answer was lost but which a re-read showed applied (the dangerous case).
    recovered: u64,
    /// Flushes found already applied.
    already_applied: u64,
    /// Writes given up on (unacknowledged; they may or may not be present).
    abandoned: u64,
    /// Errors the workload saw, by the start of their message.
    errors: BTreeMap<String, u64>,
}

impl Ledger {
    fn error(&mut self, e: &store::StoreError) {
        let text: String = e.to_string().chars().take(70).collect();
        *self.errors.entry(text).or_default() += 1;
    }
}

type Shared = Arc<Mutex<Ledger>>;

/// Create-only puts: `attribute_not_exists(pk)`. A condition failure after a lost answer is
/// checked by reading the item's writer token.
async fn puts(store: Arc<dyn Store>, direct: Arc<dyn Store>, table: String, task: u32, ledger: Shared) {
    for i in 0..40u32 {
        let (pk, sk) = (format!("put#{task}"), format!("{i:04}"));
        let token = format!("w{task}-{i}");
        let put = PutItem::new(&table, item! { "pk" => pk.clone(), "sk" => sk.clone(), "token" => token.clone() })
            .condition("attribute_not_exists(pk)");
        let acked = match store.put_item(put).await {
            Ok(_) => true,
            Err(e) if e.is_condition_failed() => {
                let found = get(direct.as_ref(), &table, item! { "pk" => pk.clone(), "sk" => sk.clone() }).await;
                let ours = found.is_some_and(|it| it.get("token") == Some(&AttributeValue::from(token.clone())));
                assert!(ours, "create-only put of {pk}/{sk} failed its condition, yet the item is not ours");
                ledger.lock().unwrap().recovered += 1;
                true
            }
            Err(e) => {
                ledger.lock().unwrap().error(&e);
                false
            }
        };
        let mut l = ledger.lock().unwrap();
        if acked {
            l.puts.insert((pk, sk), token);
        } else {
            l.abandoned += 1;
        }
    }
}

/// Versioned updates by two writers on one document: read the version, then
/// `SET ver = :next, log = list_append(log, [id])` if `ver` is still the one read.
async fn versioned(
    store: Arc<dyn Store>,
    direct: Arc<dyn Store>,
    table: String,
    doc: u32,
    writer: u32,
    ledger: Shared,
) {
    let key = item! { "pk" => format!("doc#{doc}"), "sk" => "doc" };
    for i in 0..15u32 {
        let id = format!("d{doc}-w{writer}-{i}");
        let mut settled = false;
        for _ in 0..20 {
            let current = get(direct.as_ref(), &table, key.clone()).await;
            let log: Vec<AttributeValue> = current
                .as_ref()
                .and_then(|it| it.get("log"))
                .and_then(|l| l.as_l())
                .map(<[_]>::to_vec)
                .unwrap_or_default();
            if log.contains(&AttributeValue::from(id.clone())) {
                // An earlier attempt was applied although its answer was lost.
                ledger.lock().unwrap().recovered += 1;
                settled = true;
                break;
            }
            let version = current.as_ref().map_or(0, |it| number(it, "ver"));
            let update = UpdateItem::new(
                &table,
                key.clone(),
                "SET #ver = :next, #log = list_append(if_not_exists(#log, :empty), :id)",
            )
            .condition("attribute_not_exists(#ver) OR #ver = :ver")
            .name("#ver", "ver")
            .name("#log", "log")
            .value(":next", version + 1)
            .value(":ver", version)
            .value(":empty", AttributeValue::L(vec![]))
            .value(":id", AttributeValue::L(vec![AttributeValue::from(id.clone())]));
            match store.update_item(update).await {
                Ok(_) => {
                    settled = true;
                    break;
                }
                // Another writer moved the version, or our own lost attempt did: re-read decides.
                Err(e) if e.is_condition_failed() => {}
                Err(e) if e.is_retryable() => ledger.lock().unwrap().error(&e),
                Err(e) => panic!("versioned update failed with a non-retryable error: {e:?}"),
            }
        }
        let mut l = ledger.lock().unwrap();
        if settled {
            l.updates.entry(format!("doc#{doc}")).or_default().insert(id);
        } else {
            l.abandoned += 1;
        }
    }
}

/// One counter's flushes, each retried (the same flush) until settled. A flush that does not
/// settle while faults are on is returned, to be settled after them, as a restart would.
async fn counter(
    store: Arc<dyn Store>,
    table: String,
    c: u32,
    seed: u64,
    ledger: Shared,
) -> Option<(CounterFlush, i64, i64)> {
    let key = item! { "pk" => format!("counter#{c}"), "sk" => "day" };
    let mut rng = Rng(seed ^ u64::from(c));
    for flush in 1..=25u64 {
        let (views, visits) = (rng.below(100) as i64 + 1, rng.below(7) as i64 - 3);
        let f = CounterFlush::new(&table, key.clone(), flush).add("views", views).add("visits", visits);
        let mut outcome = None;
        for _ in 0..10 {
            match f.apply(store.as_ref()).await {
                Ok(o) => {
                    outcome = Some(o);
                    break;
                }
                Err(e) if e.is_retryable() => {
                    ledger.lock().unwrap().error(&e);
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("counter flush failed with a non-retryable error: {e:?}"),
            }
        }
        let Some(o) = outcome else { return Some((f, views, visits)) };
        let mut l = ledger.lock().unwrap();
        if o == FlushOutcome::AlreadyApplied {
            l.already_applied += 1;
        }
        let entry = l.counters.entry(format!("counter#{c}")).or_default();
        *entry = (entry.0 + views, entry.1 + visits, flush);
    }
    None
}

/// Batches of 25 puts, resent whole after an error (plain puts and deletes are idempotent).
async fn batches(store: DynamoDbStore, table: String, task: u32, ledger: Shared) {
    for b in 0..6u32 {
        let keys: Vec<(String, String)> =
            (0..25).map(|j| (format!("batch#{task}"), format!("{b:02}-{j:02}"))).collect();
        let writes = keys
            .iter()
            .map(|(pk, sk)| WriteRequest::Put(item! { "pk" => pk.clone(), "sk" => sk.clone(), "batch" => b }))
            .collect();
        let request = BatchWriteItem { requests: [(table.clone(), writes)].into() };
        let mut acked = false;
        for _ in 0..5 {
            match store.batch_write_all(request.clone(), Duration::from_secs(5)).await {
                Ok(_) => {
                    acked = true;
                    break;
                }
                Err(e) if e.is_retryable() => ledger.lock().unwrap().error(&e),
                Err(e) => panic!("batch write failed with a non-retryable error: {e:?}"),
            }
        }
        let mut l = ledger.lock().unwrap();
        if acked {
            l.batches.extend(keys);
        } else {
            l.abandoned += 1;
        }
    }
}

/// Every item of partition `pk`, through the direct connection.
async fn partition(store: &dyn Store, table: &str, pk: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut start = None;
    for _ in 0..100 {
        let page = store
            .query(Query::new(table, "pk = :pk").value(":pk", pk).consistent().start_after(start))
            .await
            .expect("query");
        items.extend(page.items);
        start = page.last_evaluated_key;
        if start.is_none() {
            return items;
        }
    }
    panic!("partition {pk} has more than 100 pages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_workload_under_faults_loses_nothing_and_applies_nothing_twice() {
    let Some(dynalite) = endpoint("dynalite", "TALLY_DYNALITE_ENDPOINT") else { return };
    let seed = seed();
    eprintln!("faults: seed {seed} (replay with TALLY_FAULT_SEED={seed})");
    let started = Instant::now();
    tokio::time::timeout(RUN_LIMIT, run_mixed(&dynalite, seed))
        .await
        .unwrap_or_else(|_| panic!("the run did not end within {RUN_LIMIT:?} (seed {seed})"));
    eprintln!("faults: done in {:.1?}", started.elapsed());
}

async fn run_mixed(dynalite: &str, seed: u64) {
    let direct = crate::emulator::store(dynalite).await;
    let table = table(direct.as_ref(), "mixed").await;
    let (endpoint, faults) = proxy(dynalite, seed, 45).await;
    let proxied = proxied(&endpoint).await;
    let store: Arc<dyn Store> = Arc::new(proxied.clone());
    let ledger = Shared::default();

    faults.random.store(true, Ordering::SeqCst);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..3 {
        tasks.spawn(puts(store.clone(), direct.clone(), table.clone(), task, ledger.clone()).map_none());
    }
    for doc in 0..2 {
        for writer in 0..2 {
            tasks
                .spawn(versioned(store.clone(), direct.clone(), table.clone(), doc, writer, ledger.clone()).map_none());
        }
    }
    for c in 0..4 {
        tasks.spawn(counter(store.clone(), table.clone(), c, seed, ledger.clone()));
    }
    for task in 0..2 {
        tasks.spawn(batches(proxied.clone(), table.clone(), task, ledger.clone()).map_none());
    }
    let mut unsettled = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Some(pending) = done.expect("a workload task panicked") {
            unsettled.push(pending);
        }
    }
    // Faults off: flushes left unsettled are settled now, as a restarted aggregator would.
    faults.random.store(false, Ordering::SeqCst);
    for (flush, views, visits) in unsettled {
        let outcome = flush.apply(store.as_ref()).await.expect("settle a flush with faults off");
        let mut l = ledger.lock().unwrap();
        l.already_applied += u64::from(outcome == FlushOutcome::AlreadyApplied);
        let name = flush.key["pk"].as_s().unwrap().to_string();
        let entry = l.counters.entry(name).or_default();
        *entry = (entry.0 + views, entry.1 + visits, flush.flush);
        l.abandoned += 1;
    }
    faults.quiesce().await;

    let injected = faults.injected.lock().unwrap().clone();
    let l = std::mem::take(&mut *ledger.lock().unwrap());
    eprintln!(
        "faults: injected {injected:?}; {} puts, {} versioned updates, {} counters, {} batch items acknowledged; \
         {} lost answers recovered, {} flushes found already applied, {} writes unacknowledged; errors seen \
         after the SDK's retries: {:?}",
        l.puts.len(),
        l.updates.values().map(BTreeSet::len).sum::<usize>(),
        l.counters.len(),
        l.batches.len(),
        l.recovered,
        l.already_applied,
        l.abandoned,
        l.errors
    );
    for fault in FAULTS.into_iter().chain([Fault::Unprocessed]) {
        assert!(injected.get(&fault).copied().unwrap_or(0) > 0, "{fault:?} was never injected: {injected:?}");
    }
    assert!(l.recovered + l.already_applied > 0, "no write was applied with its answer lost: the test proved nothing");

    // Create-only puts: every acknowledged one is there, with its writer's token.
    for task in 0..3 {
        let found: BTreeMap<String, Item> = partition(direct.as_ref(), &table, &format!("put#{task}"))
            .await
            .into_iter()
            .map(|it| (it["sk"].as_s().unwrap().to_string(), it))
            .collect();
        for ((pk, sk), token) in l.puts.iter().filter(|((pk, _), _)| *pk == format!("put#{task}")) {
            let item = found.get(sk).unwrap_or_else(|| panic!("acknowledged put {pk}/{sk} is missing"));
            assert_eq!(item["token"], AttributeValue::from(token.clone()), "{pk}/{sk}");
        }
    }
    // Versioned updates: each applied once (no duplicate in the log, version = log length),
    // every acknowledged one present.
    for doc in 0..2 {
        let name = format!("doc#{doc}");
        let item = get(direct.as_ref(), &table, item! { "pk" => name.clone(), "sk" => "doc" }).await.expect("doc");
        let log: Vec<String> = item["log"].as_l().unwrap().iter().map(|v| v.as_s().unwrap().to_string()).collect();
        let distinct: BTreeSet<&String> = log.iter().collect();
        assert_eq!(distinct.len(), log.len(), "an update was applied twice to {name}: {log:?}");
        assert_eq!(number(&item, "ver"), log.len() as i64, "{name}: version and log disagree");
        for id in l.updates.get(&name).into_iter().flatten() {
            assert!(log.contains(id), "acknowledged update {id} of {name} is missing");
        }
    }
    // Counters: exactly the sum of every settled flush's deltas.
    assert_eq!(l.counters.len(), 4);
    for (name, (views, visits, last)) in &l.counters {
        let item = get(direct.as_ref(), &table, item! { "pk" => name.clone(), "sk" => "day" }).await.expect("counter");
        let found = (number(&item, "views"), number(&item, "visits"), number(&item, "flush") as u64);
        assert_eq!(found, (*views, *visits, *last), "{name}: counted twice or lost a flush");
    }
    // Batch writes: every acknowledged item there.
    for task in 0..2 {
        let found: BTreeSet<(String, String)> = partition(direct.as_ref(), &table, &format!("batch#{task}"))
            .await
            .into_iter()
            .map(|it| (it["pk"].as_s().unwrap().to_string(), it["sk"].as_s().unwrap().to_string()))
            .collect();
        for key in l.batches.iter().filter(|(pk, _)| *pk == format!("batch#{task}")) {
            assert!(found.contains(key), "acknowledged batch item {key:?} is missing");
        }
    }
    direct.delete_table(&table).await.expect("delete the table");
}

/// Lets tasks of different kinds share one `JoinSet` of optional unsettled flushes.
trait MapNone: std::future::Future<Output = ()> + Sized {
    fn map_none(self) -> impl std::future::Future<Output = Option<(CounterFlush, i64, i64)>> + Send
    where
        Self: Send,
    {
        async move {
            self.await;
            None
        }
    }
}

impl<F: std::future::Future<Output = ()>> MapNone for F {}
