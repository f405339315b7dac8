//! The storage benchmark workload, shared by every engine's criterion benches so that their
//! figures compare: the same table, items and operations against any [`Store`].
//!
//! Items imitate Tally's raw events (about 300 bytes, partition `SITE#<site>#SHARD#<shard>`,
//! a time-ordered sort key) and carry one GSI key (`SITE#<site>`, timestamp), so every write
//! also maintains an index, as an analytics item with a lookup index does.

use crate::{
    AttributeValue, BatchWriteItem, Item, KeySchema, Projection, PutItem, Query, Result, ScalarType, Store,
    TableDefinition, WriteRequest, item,
};

/// Partitions the fill spreads items over.
pub const PARTITIONS: u64 = 16;
/// Items per query page.
pub const PAGE: u32 = 100;

/// The bench table: `pk`/`sk` and one all-projecting GSI `gsi1` on `gsi1pk`/`gsi1sk`.
pub fn table_definition(name: &str) -> TableDefinition {
    TableDefinition::new(name, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S)).gsi(
        "gsi1",
        KeySchema::composite("gsi1pk", ScalarType::S, "gsi1sk", ScalarType::N),
        Projection::All,
    )
}

/// The `i`-th event item; item `i` lives in partition `i % PARTITIONS`.
pub fn event_item(i: u64) -> Item {
    let partition = i % PARTITIONS;
    item! {
        "pk" => format!("SITE#1#SHARD#{partition:03}"),
        "sk" => format!("EV#{i:016}"),
        "gsi1pk" => format!("SITE#{partition}"),
        "gsi1sk" => 1_732_262_400_000u64 + i,
        "name" => "pageview",
        "url" => format!("https://example.com/blog/posts/{}/a-reasonably-long-slug-for-a-page", i % 997),
        "referrer" => "https://news.ycombinator.com/",
        "browser" => "Firefox",
        "os" => "Linux",
        "device" => "Desktop",
        "country" => "DE",
        "visitor" => format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        "props" => AttributeValue::M(item! { "plan" => "pro", "variant" => "b" }),
    }
}

/// Creates the bench table.
pub async fn create(store: &dyn Store, table: &str) -> Result<()> {
    store.create_table(table_definition(table)).await.map(drop)
}

/// One `PutItem` of item `i`.
pub async fn put(store: &dyn Store, table: &str, i: u64) -> Result<()> {
    store.put_item(PutItem::new(table, event_item(i))).await.map(drop)
}

/// Callers writing at once in [`concurrent_puts`], as an ingesting server's requests do.
pub const CONCURRENT: u64 = 64;

/// [`CONCURRENT`] `PutItem`s of the items from `first`, all in flight at once: what an engine
/// does under a server's concurrent requests (the embedded engine group-commits them).
pub async fn concurrent_puts(store: &dyn Store, table: &str, first: u64) -> Result<()> {
    let puts = (first..first + CONCURRENT).map(|i| put(store, table, i));
    futures::future::try_join_all(puts).await.map(drop)
}

/// One `BatchWriteItem` of the 25 items from `first`, resending unprocessed items until done.
pub async fn batch_write(store: &dyn Store, table: &str, first: u64) -> Result<()> {
    let writes = (first..first + 25).map(|i| WriteRequest::Put(event_item(i))).collect();
    let mut request = BatchWriteItem { requests: [(table.to_string(), writes)].into() };
    loop {
        let output = store.batch_write_item(request).await?;
        if output.unprocessed_items.is_empty() {
            return Ok(());
        }
        request = BatchWriteItem { requests: output.unprocessed_items };
    }
}

/// Writes items `0..count` with batch writes.
pub async fn fill(store: &dyn Store, table: &str, count: u64) -> Result<()> {
    for first in (0..count).step_by(25) {
        batch_write(store, table, first).await?;
    }
    Ok(())
}

/// One page of [`PAGE`] items of a partition, newest first; returns the number of items read.
pub async fn query_page(store: &dyn Store, table: &str, partition: u64) -> Result<usize> {
    let query = Query::new(table, "pk = :pk")
        .value(":pk", format!("SITE#1#SHARD#{:03}", partition % PARTITIONS))
        .descending()
        .limit(PAGE);
    Ok(store.query(query).await?.items.len())
}

/// One page of [`PAGE`] items of a GSI partition, by time range; returns the number of items read.
pub async fn gsi_query_page(store: &dyn Store, table: &str, partition: u64) -> Result<usize> {
    let query = Query::new(table, "gsi1pk = :pk AND gsi1sk >= :from")
        .index("gsi1")
        .value(":pk", format!("SITE#{}", partition % PARTITIONS))
        .value(":from", 1_732_262_400_000u64)
        .limit(PAGE);
    Ok(store.query(query).await?.items.len())
}
