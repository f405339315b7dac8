//! Unprocessed batch items: retried until done, or given up after a bounded number of attempts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use model::{BatchWrite, RetryPolicy, Table, sample};
use store::*;
use store_embedded::EmbeddedStore;

/// Forwards to the embedded engine, but processes only the first item of each batch while
/// `stubborn` calls remain (DynamoDB does this under throttling).
struct Flaky {
    inner: Arc<dyn Store>,
    stubborn: AtomicU32,
}

impl Flaky {
    fn stubborn(&self) -> bool {
        self.stubborn.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }
}

#[async_trait]
impl Store for Flaky {
    async fn create_table(&self, d: TableDefinition) -> Result<TableDescription> {
        self.inner.create_table(d).await
    }
    async fn delete_table(&self, name: &str) -> Result<TableDescription> {
        self.inner.delete_table(name).await
    }
    async fn describe_table(&self, name: &str) -> Result<TableDescription> {
        self.inner.describe_table(name).await
    }
    async fn list_tables(&self) -> Result<Vec<String>> {
        self.inner.list_tables().await
    }
    async fn get_item(&self, r: GetItem) -> Result<GetItemOutput> {
        self.inner.get_item(r).await
    }
    async fn put_item(&self, r: PutItem) -> Result<WriteOutput> {
        self.inner.put_item(r).await
    }
    async fn update_item(&self, r: UpdateItem) -> Result<WriteOutput> {
        self.inner.update_item(r).await
    }
    async fn delete_item(&self, r: DeleteItem) -> Result<WriteOutput> {
        self.inner.delete_item(r).await
    }
    async fn query(&self, r: Query) -> Result<QueryOutput> {
        self.inner.query(r).await
    }
    async fn scan(&self, r: Scan) -> Result<QueryOutput> {
        self.inner.scan(r).await
    }
    async fn batch_get_item(&self, mut r: BatchGetItem) -> Result<BatchGetItemOutput> {
        let mut unprocessed = std::collections::BTreeMap::new();
        if self.stubborn() {
            for (table, ks) in r.requests.iter_mut() {
                let rest = ks.keys.split_off(1.min(ks.keys.len()));
                unprocessed.insert(table.clone(), KeysAndAttributes { keys: rest, ..ks.clone() });
            }
        }
        let mut out = self.inner.batch_get_item(r).await?;
        out.unprocessed_keys.extend(unprocessed);
        Ok(out)
    }
    async fn batch_write_item(&self, mut r: BatchWriteItem) -> Result<BatchWriteItemOutput> {
        let mut unprocessed = std::collections::BTreeMap::new();
        if self.stubborn() {
            for (table, ws) in r.requests.iter_mut() {
                let rest = ws.split_off(1.min(ws.len()));
                unprocessed.insert(table.clone(), rest);
            }
        }
        let mut out = self.inner.batch_write_item(r).await?;
        out.unprocessed_items.extend(unprocessed);
        Ok(out)
    }
    async fn transact_get_items(&self, r: TransactGetItems) -> Result<TransactGetItemsOutput> {
        self.inner.transact_get_items(r).await
    }
    async fn transact_write_items(&self, r: TransactWriteItems) -> Result<TransactWriteItemsOutput> {
        self.inner.transact_write_items(r).await
    }
}

async fn flaky_table(stubborn: u32, max_attempts: u32) -> (tempfile::TempDir, Table) {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let store = Arc::new(Flaky { inner, stubborn: AtomicU32::new(stubborn) });
    let retry = RetryPolicy { max_attempts, base_delay: std::time::Duration::from_millis(1), ..Default::default() };
    let table = Table::new(store, sample::shop("shop")).with_retry(retry);
    table.create_table().await.unwrap();
    (dir, table)
}

fn products(n: usize) -> Vec<BatchWrite> {
    (0..n)
        .map(|i| BatchWrite::put("Product", item! { "product_id" => format!("p{i}"), "name" => "n", "price" => 1 }))
        .collect()
}

#[tokio::test]
async fn unprocessed_items_are_retried_until_done() {
    let (_dir, table) = flaky_table(5, 10).await;
    table.batch_write(products(10)).await.unwrap();
    // Five stubborn calls write one item each; the sixth writes the remaining five.
    assert_eq!(table.capacity().requests, 6);
    let keys = (0..10).map(|i| ("Product", item! { "product_id" => format!("p{i}") })).collect();
    let got = table.batch_get(keys).await.unwrap();
    assert!(got.iter().all(Option::is_some));
}

#[tokio::test]
async fn retries_are_bounded() {
    let (_dir, table) = flaky_table(u32::MAX, 3).await;
    let err = table.batch_write(products(10)).await.unwrap_err();
    assert_eq!(err.to_string(), "batch_write: 7 items still unprocessed after 3 attempts");
    assert!(err.is_retryable());
}
