//! Retries against a scripted loopback server: throttling and 5xx answers are retried with
//! backoff, validation errors are not, a slow attempt times out and is retried, and every
//! retry of a `TransactWriteItems` carries the same `ClientRequestToken` (so DynamoDB applies
//! the transaction once).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use store::{PutItem, StoreError, TransactWrite, TransactWriteItems, UpdateItem, item};
use store_dynamodb::{DynamoDbStore, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One scripted answer: HTTP status, JSON body, and a delay before answering.
#[derive(Clone)]
struct Answer {
    status: u16,
    body: &'static str,
    delay: Duration,
}

const OK: Answer = Answer { status: 200, body: "{}", delay: Duration::ZERO };
const INTERNAL: Answer = Answer {
    status: 500,
    body: r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"boom"}"#,
    delay: Duration::ZERO,
};
const THROTTLED: Answer = Answer {
    status: 400,
    body: r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow down"}"#,
    delay: Duration::ZERO,
};
const INVALID: Answer = Answer {
    status: 400,
    body: r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"bad request"}"#,
    delay: Duration::ZERO,
};

/// A loopback server answering requests in turn from `script` (then `OK`), recording bodies.
async fn scripted(script: Vec<Answer>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = seen.clone();
            let script = script.clone();
            tokio::spawn(async move {
                let Some(body) = read_request(&mut conn).await else { return };
                let answer = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(body);
                    script.get(seen.len() - 1).cloned().unwrap_or(OK)
                };
                tokio::time::sleep(answer.delay).await;
                let response = format!(
                    "HTTP/1.1 {} X\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                    answer.status,
                    answer.body.len(),
                    answer.body
                );
                let _ = conn.write_all(response.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (format!("http://{addr}"), bodies)
}

/// Reads one HTTP request and returns its body.
async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().ok()))
                .flatten()
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Some(String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).into_owned());
            }
        }
    }
}

/// A store whose attempts time out only when something is stuck: the scripted server runs on
/// the test's runtime, and a loaded machine may stall it long enough to count another attempt.
async fn store(endpoint: &str) -> DynamoDbStore {
    store_timing_out_after(endpoint, Duration::from_secs(10)).await
}

async fn store_timing_out_after(endpoint: &str, attempt_timeout: Duration) -> DynamoDbStore {
    let options = Options {
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(20),
        attempt_timeout,
        max_attempts: 4,
        ..Options::emulator(endpoint)
    };
    DynamoDbStore::connect(options).await.expect("connect")
}

fn token_of(body: &str) -> Option<String> {
    let start = body.find("\"ClientRequestToken\":\"")? + "\"ClientRequestToken\":\"".len();
    Some(body[start..].split('"').next()?.to_string())
}

fn counter_transaction(token: Option<&str>) -> TransactWriteItems {
    let update = UpdateItem::new("t", item! { "pk" => "SITE#1", "sk" => "DAY#1" }, "ADD #v :one")
        .name("#v", "views")
        .value(":one", 1);
    TransactWriteItems { items: vec![TransactWrite::Update(update)], client_request_token: token.map(str::to_string) }
}

#[tokio::test]
async fn retried_transactions_carry_the_callers_token() {
    use store::Store;
    let (endpoint, bodies) = scripted(vec![INTERNAL, THROTTLED]).await;
    store(&endpoint).await.transact_write_items(counter_transaction(Some("flush-42"))).await.expect("third attempt");
    let tokens: Vec<_> = bodies.lock().unwrap().iter().map(|b| token_of(b)).collect();
    assert_eq!(tokens, vec![Some("flush-42".to_string()); 3]);
}

#[tokio::test]
async fn retried_transactions_without_a_token_reuse_the_generated_one() {
    use store::Store;
    let (endpoint, bodies) = scripted(vec![INTERNAL]).await;
    store(&endpoint).await.transact_write_items(counter_transaction(None)).await.expect("second attempt");
    let tokens: Vec<_> = bodies.lock().unwrap().iter().map(|b| token_of(b)).collect();
    assert_eq!(tokens.len(), 2);
    assert!(tokens[0].is_some(), "the SDK did not generate a token");
    assert_eq!(tokens[0], tokens[1]);
}

#[tokio::test]
async fn a_slow_attempt_times_out_and_is_retried() {
    use store::Store;
    let slow = Answer { delay: Duration::from_secs(30), ..OK };
    let (endpoint, bodies) = scripted(vec![slow]).await;
    store_timing_out_after(&endpoint, Duration::from_secs(1))
        .await
        .transact_write_items(counter_transaction(Some("slow-1")))
        .await
        .expect("retry after timeout");
    let tokens: Vec<_> = bodies.lock().unwrap().iter().map(|b| token_of(b)).collect();
    assert_eq!(tokens, vec![Some("slow-1".to_string()); 2]);
}

#[tokio::test]
async fn throttling_is_retried_until_the_attempts_run_out() {
    use store::Store;
    let (endpoint, bodies) = scripted(vec![THROTTLED; 10]).await;
    let err = store(&endpoint).await.put_item(PutItem::new("t", item! { "pk" => "a" })).await.unwrap_err();
    assert!(err.is_throttled(), "{err:?}");
    assert_eq!(bodies.lock().unwrap().len(), 4, "max_attempts is 4");
}

#[tokio::test]
async fn validation_errors_are_not_retried() {
    use store::Store;
    let (endpoint, bodies) = scripted(vec![INVALID]).await;
    let err = store(&endpoint).await.put_item(PutItem::new("t", item! { "pk" => "a" })).await.unwrap_err();
    assert!(matches!(&err, StoreError::Validation(m) if m == "bad request"), "{err:?}");
    assert_eq!(bodies.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn every_call_asks_for_capacity_by_index() {
    use store::Store;
    let (endpoint, bodies) = scripted(vec![]).await;
    let store = store(&endpoint).await;
    store.put_item(PutItem::new("t", item! { "pk" => "a" })).await.expect("put");
    store.transact_write_items(counter_transaction(None)).await.expect("transaction");
    for body in bodies.lock().unwrap().iter() {
        assert!(body.contains(r#""ReturnConsumedCapacity":"INDEXES""#), "{body}");
    }
}

const ONE_UNPROCESSED_WRITE: Answer = Answer {
    status: 200,
    body: r#"{"UnprocessedItems":{"t":[{"PutRequest":{"Item":{"pk":{"S":"b"}}}}]}}"#,
    delay: Duration::ZERO,
};
const ONE_UNPROCESSED_KEY: Answer = Answer {
    status: 200,
    body: r#"{"Responses":{"t":[{"pk":{"S":"a"}}]},"UnprocessedKeys":{"t":{"Keys":[{"pk":{"S":"b"}}]}}}"#,
    delay: Duration::ZERO,
};
const FOUND_B: Answer =
    Answer { status: 200, body: r#"{"Responses":{"t":[{"pk":{"S":"b"}}]}}"#, delay: Duration::ZERO };

fn two_puts() -> store::BatchWriteItem {
    let mut batch = store::BatchWriteItem::default();
    batch.requests.insert(
        "t".into(),
        vec![store::WriteRequest::Put(item! { "pk" => "a" }), store::WriteRequest::Put(item! { "pk" => "b" })],
    );
    batch
}

#[tokio::test]
async fn batch_write_returns_unprocessed_items_as_dynamodb_does() {
    use store::Store;
    let (endpoint, _) = scripted(vec![ONE_UNPROCESSED_WRITE]).await;
    let out = store(&endpoint).await.batch_write_item(two_puts()).await.expect("batch write");
    assert_eq!(out.unprocessed_items["t"], vec![store::WriteRequest::Put(item! { "pk" => "b" })]);
}

#[tokio::test]
async fn batch_write_all_resends_unprocessed_items_only() {
    let (endpoint, bodies) = scripted(vec![ONE_UNPROCESSED_WRITE, ONE_UNPROCESSED_WRITE]).await;
    let out = store(&endpoint).await.batch_write_all(two_puts(), Duration::from_secs(10)).await.expect("all written");
    assert!(out.unprocessed_items.is_empty());
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 3);
    assert!(bodies[0].contains(r#""S":"a""#) && bodies[0].contains(r#""S":"b""#));
    assert!(!bodies[1].contains(r#""S":"a""#) && bodies[1].contains(r#""S":"b""#), "{}", bodies[1]);
}

#[tokio::test]
async fn batch_write_all_gives_up_at_its_deadline() {
    let (endpoint, _) = scripted(vec![ONE_UNPROCESSED_WRITE; 1000]).await;
    let started = std::time::Instant::now();
    let err = store(&endpoint).await.batch_write_all(two_puts(), Duration::from_millis(300)).await.unwrap_err();
    assert!(err.is_throttled(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn batch_get_all_merges_the_rounds() {
    let (endpoint, _) = scripted(vec![ONE_UNPROCESSED_KEY, FOUND_B]).await;
    let mut batch = store::BatchGetItem::default();
    batch.requests.insert(
        "t".into(),
        store::KeysAndAttributes { keys: vec![item! { "pk" => "a" }, item! { "pk" => "b" }], ..Default::default() },
    );
    let out = store(&endpoint).await.batch_get_all(batch, Duration::from_secs(10)).await.expect("all read");
    let mut found = out.responses["t"].clone();
    found.sort();
    assert_eq!(found, vec![item! { "pk" => "a" }, item! { "pk" => "b" }]);
    assert!(out.unprocessed_keys.is_empty());
}

/// Regression: every store shared the SDK's process-wide retry quota (its token bucket), so one
/// store facing a failing server — the fault test's — switched off retries for every other
/// store in the process, and the tests above failed when they ran beside the fault test.
#[tokio::test]
async fn one_stores_failures_do_not_spend_another_stores_retries() {
    use store::Store;
    let put = || PutItem::new("t", item! { "pk" => "a" });
    let (failing, failing_bodies) = scripted(vec![INTERNAL; 5000]).await;
    let spent = store(&failing).await;
    // 60 calls of 4 attempts: 180 retries at 5 units each, far beyond the quota of 500.
    for _ in 0..60 {
        assert!(spent.put_item(put()).await.is_err());
    }
    let before = failing_bodies.lock().unwrap().len();
    assert!(spent.put_item(put()).await.is_err());
    let attempts = failing_bodies.lock().unwrap().len() - before;
    assert_eq!(attempts, 1, "the quota was not spent, so this test shows nothing");

    let (flaky, bodies) = scripted(vec![INTERNAL]).await;
    store(&flaky).await.put_item(put()).await.expect("another store still retries");
    assert_eq!(bodies.lock().unwrap().len(), 2);
}
