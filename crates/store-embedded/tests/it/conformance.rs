//! The shared conformance suite, run against the embedded engine, and against deliberately
//! broken wrappers of it, to show that the suite notices when an engine departs from DynamoDB.

use std::sync::Arc;

use async_trait::async_trait;
use store::{
    BatchGetItem, BatchGetItemOutput, BatchWriteItem, BatchWriteItemOutput, DeleteItem, GetItem, GetItemOutput,
    PutItem, Query, QueryOutput, Result, Scan, Store, TableDefinition, TableDescription, TransactGetItems,
    TransactGetItemsOutput, TransactWriteItems, TransactWriteItemsOutput, UpdateItem, WriteOutput,
};
use store_embedded::EmbeddedStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_the_embedded_engine() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).expect("open the engine"));
    // The embedded engine aims to support every case: nothing is listed as unsupported.
    store::conformance::run_suite(store, "embedded", "conf", &[]).await;
}

/// One way of breaking DynamoDB's rules on top of a correct engine.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    /// Pages never say where to resume.
    DropLastEvaluatedKey,
    /// `Limit` is ignored.
    IgnoreLimit,
    /// Descending queries come back ascending.
    IgnoreDirection,
    /// Conditions on single-item writes are ignored.
    IgnoreConditions,
    /// Every capacity figure is doubled.
    DoubleCapacity,
    /// Transactions are applied item by item, keeping what succeeded before a failure.
    NonAtomicTransactions,
}

/// A correct engine with one [`Mutation`] applied.
struct Mutant {
    inner: Arc<dyn Store>,
    mutation: Mutation,
}

impl Mutant {
    fn page(&self, mut out: QueryOutput) -> QueryOutput {
        match self.mutation {
            Mutation::DropLastEvaluatedKey => out.last_evaluated_key = None,
            Mutation::DoubleCapacity => out.consumed_capacity.capacity_units *= 2.0,
            _ => {}
        }
        out
    }

    fn write(&self, mut out: WriteOutput) -> WriteOutput {
        if let Mutation::DoubleCapacity = self.mutation {
            out.consumed_capacity.capacity_units *= 2.0;
        }
        out
    }
}

#[async_trait]
impl Store for Mutant {
    async fn create_table(&self, definition: TableDefinition) -> Result<TableDescription> {
        self.inner.create_table(definition).await
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
    async fn get_item(&self, request: GetItem) -> Result<GetItemOutput> {
        let mut out = self.inner.get_item(request).await?;
        if let Mutation::DoubleCapacity = self.mutation {
            out.consumed_capacity.capacity_units *= 2.0;
        }
        Ok(out)
    }
    async fn put_item(&self, mut request: PutItem) -> Result<WriteOutput> {
        if let Mutation::IgnoreConditions = self.mutation {
            request.condition = None;
            request.attrs = Default::default();
        }
        Ok(self.write(self.inner.put_item(request).await?))
    }
    async fn update_item(&self, mut request: UpdateItem) -> Result<WriteOutput> {
        if let Mutation::IgnoreConditions = self.mutation {
            request.condition = None;
        }
        Ok(self.write(self.inner.update_item(request).await?))
    }
    async fn delete_item(&self, mut request: DeleteItem) -> Result<WriteOutput> {
        if let Mutation::IgnoreConditions = self.mutation {
            request.condition = None;
            request.attrs = Default::default();
        }
        Ok(self.write(self.inner.delete_item(request).await?))
    }
    async fn query(&self, mut request: Query) -> Result<QueryOutput> {
        match self.mutation {
            Mutation::IgnoreLimit => request.limit = None,
            Mutation::IgnoreDirection => request.scan_forward = true,
            _ => {}
        }
        Ok(self.page(self.inner.query(request).await?))
    }
    async fn scan(&self, mut request: Scan) -> Result<QueryOutput> {
        if let Mutation::IgnoreLimit = self.mutation {
            request.limit = None;
        }
        Ok(self.page(self.inner.scan(request).await?))
    }
    async fn batch_get_item(&self, request: BatchGetItem) -> Result<BatchGetItemOutput> {
        self.inner.batch_get_item(request).await
    }
    async fn batch_write_item(&self, request: BatchWriteItem) -> Result<BatchWriteItemOutput> {
        self.inner.batch_write_item(request).await
    }
    async fn transact_get_items(&self, request: TransactGetItems) -> Result<TransactGetItemsOutput> {
        self.inner.transact_get_items(request).await
    }
    async fn transact_write_items(&self, request: TransactWriteItems) -> Result<TransactWriteItemsOutput> {
        if !matches!(self.mutation, Mutation::NonAtomicTransactions) || request.items.len() < 2 {
            return self.inner.transact_write_items(request).await;
        }
        for item in request.items {
            let single = TransactWriteItems { items: vec![item], client_request_token: None };
            self.inner.transact_write_items(single).await?;
        }
        Ok(TransactWriteItemsOutput::default())
    }
}

/// A regression guard for the suite itself: each broken engine must fail the cases that
/// cover the rule it breaks (a suite that cannot fail proves nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_fails_engines_that_break_the_rules() {
    let cases: &[(Mutation, &[&str])] = &[
        (Mutation::DropLastEvaluatedKey, &["query-limit-filter", "query-1mb-pages", "scan-1mb-pages"]),
        (Mutation::IgnoreLimit, &["query-limit-filter", "scan-limit-filter", "index-pagination"]),
        (Mutation::IgnoreDirection, &["key-conditions-s", "key-conditions-n", "key-conditions-b", "query-1mb-pages"]),
        (Mutation::IgnoreConditions, &["put-create-only", "put-replace-only", "conditional-update-delete"]),
        (Mutation::DoubleCapacity, &["capacity-writes", "capacity-reads", "capacity-query"]),
        (Mutation::NonAtomicTransactions, &["transact-write-cancellation"]),
    ];
    for &(mutation, must_fail) in cases {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).expect("open the engine"));
        let mutant = Arc::new(Mutant { inner, mutation });
        let engine = format!("mutant-{mutation:?}");
        let run = tokio::spawn(async move { store::conformance::run_suite(mutant, &engine, "mut", &[]).await });
        let panic = match run.await {
            Ok(()) => panic!("the suite passed an engine with {mutation:?}"),
            Err(e) => e.into_panic(),
        };
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        for case in must_fail {
            assert!(
                message.split([':', ',', ' ']).any(|name| name == *case),
                "{mutation:?} should fail {case}; the suite reported: {message}"
            );
        }
    }
}
