//! A store around another that lets a test step in before each write reaches it: fail the
//! write, hold it back, or look at it. One delegating [`Store`] for every test store that
//! imitates an outage, a slow store or a refused item, so each of those says only what it does.

use std::sync::Arc;

use async_trait::async_trait;
use store::Store;

/// A write on its way to the inner store, for a hook to look at.
#[allow(dead_code, reason = "every kind of write carries its request; today's hooks read only puts'")]
pub(crate) enum Write<'a> {
    Put(&'a store::PutItem),
    Update(&'a store::UpdateItem),
    Delete(&'a store::DeleteItem),
    Batch(&'a store::BatchWriteItem),
    Transact(&'a store::TransactWriteItems),
}

/// What a test does before each write; reads always go straight through.
#[async_trait]
pub(crate) trait Hooks: Send + Sync + 'static {
    /// Runs before `write` reaches the inner store (and may wait); an error fails the write,
    /// which then never reaches it.
    async fn before(&self, write: Write<'_>) -> store::Result<()>;
}

/// `inner`, with `hooks` run before each write. Dereferences to the hooks, so a test arms or
/// reads them through the store it handed out.
pub(crate) struct Hooked<H> {
    inner: Arc<dyn Store>,
    hooks: H,
}

impl<H: Hooks> Hooked<H> {
    pub(crate) fn new(inner: Arc<dyn Store>, hooks: H) -> Hooked<H> {
        Hooked { inner, hooks }
    }
}

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hooks
    }
}

#[async_trait]
impl<H: Hooks> Store for Hooked<H> {
    async fn create_table(&self, d: store::TableDefinition) -> store::Result<store::TableDescription> {
        self.inner.create_table(d).await
    }
    async fn delete_table(&self, name: &str) -> store::Result<store::TableDescription> {
        self.inner.delete_table(name).await
    }
    async fn describe_table(&self, name: &str) -> store::Result<store::TableDescription> {
        self.inner.describe_table(name).await
    }
    async fn list_tables(&self) -> store::Result<Vec<String>> {
        self.inner.list_tables().await
    }
    async fn get_item(&self, r: store::GetItem) -> store::Result<store::GetItemOutput> {
        self.inner.get_item(r).await
    }
    async fn put_item(&self, r: store::PutItem) -> store::Result<store::WriteOutput> {
        self.hooks.before(Write::Put(&r)).await?;
        self.inner.put_item(r).await
    }
    async fn update_item(&self, r: store::UpdateItem) -> store::Result<store::WriteOutput> {
        self.hooks.before(Write::Update(&r)).await?;
        self.inner.update_item(r).await
    }
    async fn delete_item(&self, r: store::DeleteItem) -> store::Result<store::WriteOutput> {
        self.hooks.before(Write::Delete(&r)).await?;
        self.inner.delete_item(r).await
    }
    async fn query(&self, r: store::Query) -> store::Result<store::QueryOutput> {
        self.inner.query(r).await
    }
    async fn scan(&self, r: store::Scan) -> store::Result<store::QueryOutput> {
        self.inner.scan(r).await
    }
    async fn batch_get_item(&self, r: store::BatchGetItem) -> store::Result<store::BatchGetItemOutput> {
        self.inner.batch_get_item(r).await
    }
    async fn batch_write_item(&self, r: store::BatchWriteItem) -> store::Result<store::BatchWriteItemOutput> {
        self.hooks.before(Write::Batch(&r)).await?;
        self.inner.batch_write_item(r).await
    }
    async fn transact_get_items(&self, r: store::TransactGetItems) -> store::Result<store::TransactGetItemsOutput> {
        self.inner.transact_get_items(r).await
    }
    async fn transact_write_items(
        &self,
        r: store::TransactWriteItems,
    ) -> store::Result<store::TransactWriteItemsOutput> {
        self.hooks.before(Write::Transact(&r)).await?;
        self.inner.transact_write_items(r).await
    }
}
