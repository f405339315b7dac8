//! Consumed capacity: the units DynamoDB would bill, by the developer guide's rules
//! ("Read/write capacity mode" and "Capacity unit consumption"):
//!
//! - A write costs 1 WCU per 1 KB of item size, rounded up; an update is sized by the larger
//!   of the item before and after; a delete by the deleted item.
//! - A global secondary index write costs the same rule applied to the index entry
//!   (for an `ALL` projection, the whole item), on top of the table's write; an item without
//!   the index key costs the index nothing.
//! - A strongly consistent read costs 1 RCU per 4 KB, rounded up; an eventually consistent
//!   read half that. Reading an absent item still costs the minimum (0.5 or 1).
//! - A query or scan adds up the sizes of every item read (before the filter, whatever the
//!   projection) and rounds the total up to 4 KB once.
//! - Transactions cost twice the units of the same non-transactional operations.
//! - Batch writes cost each item on its own.

use super::support::{Ctx, OrFail, Outcome, key, put_all, sized, units_eq};
use crate::{
    BatchWriteItem, ConsumedCapacity, DeleteItem, GetItem, KeySchema, Projection, PutItem, Query, ScalarType, Scan,
    TableDefinition, TransactGet, TransactGetItems, TransactWrite, TransactWriteItems, UpdateItem, WriteRequest, item,
};

/// 1.5 KB: 2 write units, 1 read unit.
const KB_1_5: usize = 1536;

fn check(got: &ConsumedCapacity, total: f64, table: f64, what: &str) -> Outcome {
    ensure!(
        units_eq(got.capacity_units, total) && units_eq(got.table_units, table),
        "{what}: capacity {} (table {}), want {total} (table {table}); full report {got:?}",
        got.capacity_units,
        got.table_units
    );
    Ok(())
}

fn gsi_units(got: &ConsumedCapacity, index: &str) -> f64 {
    got.global_indexes.get(index).copied().unwrap_or(0.0)
}

/// The capacity reported for `table` in a multi-table response.
fn for_table<'a>(list: &'a [ConsumedCapacity], table: &str) -> Result<&'a ConsumedCapacity, String> {
    list.iter().find(|c| c.table == table).ok_or_else(|| format!("no consumed capacity reported for {table}: {list:?}"))
}

/// Put, update, delete and batch write costs, with and without a GSI.
pub(crate) async fn writes(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx
        .create(TableDefinition::new(ctx.table(), KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S)).gsi(
            "gsi",
            KeySchema::hash("gpk", ScalarType::S),
            Projection::All,
        ))
        .await?;
    let table = t.as_str();
    let put_cost = |item| async move {
        store.put_item(PutItem::new(table, item)).await.map(|o| o.consumed_capacity).or_fail("put")
    };

    // Rounding: up to 1 KB is 1 unit, one byte more is 2.
    let c = put_cost(sized(key("p", "1k"), 1024)).await?;
    check(&c, 1.0, 1.0, "put of exactly 1 KB")?;
    ensure!(units_eq(c.write_capacity_units, 1.0), "write_capacity_units of a 1 KB put: {c:?}");
    ensure!(units_eq(c.read_capacity_units, 0.0), "read_capacity_units of a put: {c:?}");
    check(&put_cost(sized(key("p", "1k+1"), 1025)).await?, 2.0, 2.0, "put of 1 KB + 1 byte")?;
    check(&put_cost(sized(key("p", "tiny"), 20)).await?, 1.0, 1.0, "put of 20 bytes")?;

    // 1.5 KB without the index key: 2 units, the index is not written.
    let c = put_cost(sized(key("p", "plain"), KB_1_5)).await?;
    check(&c, 2.0, 2.0, "put of 1.5 KB without the GSI key")?;
    ensure!(units_eq(gsi_units(&c, "gsi"), 0.0), "GSI units for an item outside the index: {c:?}");

    // 1.5 KB with the index key: table 2 + GSI 2 (the ALL projection's entry is the whole item).
    let indexed = sized(item! { "pk" => "p", "sk" => "indexed", "gpk" => "g" }, KB_1_5);
    let c = put_cost(indexed).await?;
    check(&c, 4.0, 2.0, "put of 1.5 KB with one ALL GSI")?;
    ensure!(units_eq(gsi_units(&c, "gsi"), 2.0), "GSI units of a 1.5 KB put: {c:?}");

    // An update is sized by the larger of the item before and after: 0.5 KB growing to 1.5 KB is 2.
    store.put_item(PutItem::new(&t, sized(key("p", "grow"), 512))).await.or_fail("put 0.5 KB")?;
    let c = store
        .update_item(UpdateItem::new(&t, key("p", "grow"), "SET more = :m").value(":m", super::support::filler(1024)))
        .await
        .or_fail("update growing to 1.5 KB")?
        .consumed_capacity;
    check(&c, 2.0, 2.0, "update from 0.5 KB to about 1.5 KB")?;
    // ... and 1.5 KB shrinking to a few bytes is still 2.
    let c = store
        .update_item(UpdateItem::new(&t, key("p", "grow"), "REMOVE more, x_pad"))
        .await
        .or_fail("update shrinking")?
        .consumed_capacity;
    check(&c, 2.0, 2.0, "update from about 1.5 KB to a few bytes")?;

    // A delete is sized by the deleted item.
    let c = store.delete_item(DeleteItem::new(&t, key("p", "plain"))).await.or_fail("delete")?.consumed_capacity;
    check(&c, 2.0, 2.0, "delete of a 1.5 KB item")?;

    // A batch write costs each item on its own: 3 × 1.5 KB = 6, not ceil(4.5) = 5.
    let mut batch = BatchWriteItem::default();
    batch.requests.insert(
        t.clone(),
        (0..3).map(|i| WriteRequest::Put(sized(key("b", format!("{i}").as_str()), KB_1_5))).collect(),
    );
    let out = store.batch_write_item(batch).await.or_fail("batch write")?;
    ensure!(out.unprocessed_items.values().all(Vec::is_empty), "small batch left unprocessed items");
    check(for_table(&out.consumed_capacity, &t)?, 6.0, 6.0, "batch write of 3 × 1.5 KB")?;
    Ok(())
}

/// `GetItem` costs: 4 KB rounding, eventually consistent halves, absent items, projections.
pub(crate) async fn reads(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    put_all(
        store,
        &t,
        vec![sized(key("p", "5k"), 5 * 1024), sized(key("p", "8k"), 8 * 1024), sized(key("p", "8k+1"), 8 * 1024 + 1)],
    )
    .await?;
    for (sk, eventual, strong) in [("5k", 1.0, 2.0), ("8k", 1.0, 2.0), ("8k+1", 1.5, 3.0), ("absent", 0.5, 1.0)] {
        let c = store.get_item(GetItem::new(&t, key("p", sk))).await.or_fail("get")?.consumed_capacity;
        check(&c, eventual, eventual, &format!("eventually consistent get of {sk}"))?;
        ensure!(units_eq(c.read_capacity_units, eventual), "read_capacity_units of get {sk}: {c:?}");
        let c = store.get_item(GetItem::new(&t, key("p", sk)).consistent()).await.or_fail("get")?.consumed_capacity;
        check(&c, strong, strong, &format!("strongly consistent get of {sk}"))?;
    }
    // A projection does not reduce the cost: the whole item is read.
    let c = store
        .get_item(GetItem::new(&t, key("p", "5k")).projection("pk"))
        .await
        .or_fail("get with projection")?
        .consumed_capacity;
    check(&c, 1.0, 1.0, "eventually consistent get of 5 KB with a projection")?;
    Ok(())
}

/// Query and scan costs: item sizes summed, then rounded up to 4 KB once; the filter does not help.
pub(crate) async fn query(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    // Ten items of 1 KB: 10 KB read, rounded to 12 KB: 3 units strong, 1.5 eventual.
    put_all(
        store,
        &t,
        (0..10).map(|i| sized(item! { "pk" => "p", "sk" => format!("{i:02}"), "odd" => i % 2 == 1 }, 1024)).collect(),
    )
    .await?;
    let q = Query::new(&t, "pk = :p").value(":p", "p");
    let c = store.query(q.clone()).await.or_fail("query")?.consumed_capacity;
    check(&c, 1.5, 1.5, "eventually consistent query reading 10 KB")?;
    let c = store.query(q.clone().consistent()).await.or_fail("query")?.consumed_capacity;
    check(&c, 3.0, 3.0, "strongly consistent query reading 10 KB")?;
    let c =
        store.query(q.clone().filter("odd = :t").value(":t", true)).await.or_fail("filtered query")?.consumed_capacity;
    check(&c, 1.5, 1.5, "query reading 10 KB and keeping 5")?;
    // Limit 4: exactly 4 KB read, one unit strong.
    let c = store.query(q.clone().limit(4).consistent()).await.or_fail("query limit 4")?.consumed_capacity;
    check(&c, 1.0, 1.0, "strongly consistent query reading 4 × 1 KB")?;
    // Limit 5: 5 KB, rounded to 8 KB.
    let c = store.query(q.clone().limit(5)).await.or_fail("query limit 5")?.consumed_capacity;
    check(&c, 1.0, 1.0, "eventually consistent query reading 5 × 1 KB")?;
    let c = store.scan(Scan::new(&t)).await.or_fail("scan")?.consumed_capacity;
    check(&c, 1.5, 1.5, "eventually consistent scan reading 10 KB")?;
    // A projection does not reduce the cost: whole items are read. Paged by `Limit`, it still
    // resumes where it stopped.
    let projected = q.clone().projection("odd").consistent();
    let out = store.query(projected.clone()).await.or_fail("query with projection")?;
    check(&out.consumed_capacity, 3.0, 3.0, "strongly consistent query reading 10 KB, projected")?;
    if out.items.len() != 10 || out.items.iter().any(|i| i.keys().ne(["odd"])) {
        return Err(format!("a projected query returns only `odd` of each of 10 items: {:?}", out.items));
    }
    let first = store.query(projected.clone().limit(4)).await.or_fail("projected query, limit 4")?;
    check(&first.consumed_capacity, 1.0, 1.0, "strongly consistent query reading 4 × 1 KB, projected")?;
    // Filtered on one attribute, projected on another: the filter still sees what it reads.
    let out = store
        .query(q.clone().filter("odd = :t").value(":t", true).projection("sk"))
        .await
        .or_fail("filtered query with projection")?;
    check(&out.consumed_capacity, 1.5, 1.5, "query reading 10 KB, keeping 5, projected")?;
    if out.items.len() != 5 || out.items.iter().any(|i| i.keys().ne(["sk"])) {
        return Err(format!("a filtered, projected query returns `sk` of the 5 odd items: {:?}", out.items));
    }
    if first.last_evaluated_key.is_none() {
        return Err("a projected page stopped by Limit names where to resume".into());
    }
    let rest =
        store.query(projected.start_after(first.last_evaluated_key)).await.or_fail("projected query, resumed")?;
    if first.items.len() + rest.items.len() != 10 {
        return Err(format!(
            "pages of a projected query hold 10 items, got {} + {}",
            first.items.len(),
            rest.items.len()
        ));
    }
    Ok(())
}

/// Transactions cost twice as much: 2 WCU per 1 KB written, 2 RCU per 4 KB read.
pub(crate) async fn transactions(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let out = store
        .transact_write_items(TransactWriteItems {
            items: vec![
                TransactWrite::Put(PutItem::new(&t, sized(key("p", "a"), KB_1_5))),
                TransactWrite::Put(PutItem::new(&t, sized(key("p", "b"), 512))),
            ],
            client_request_token: None,
        })
        .await
        .or_fail("transact write")?;
    // 1.5 KB → 2 × 2 = 4; 0.5 KB → 2 × 1 = 2.
    check(for_table(&out.consumed_capacity, &t)?, 6.0, 6.0, "transactional puts of 1.5 KB and 0.5 KB")?;

    put_all(store, &t, vec![sized(key("p", "5k"), 5 * 1024)]).await?;
    let out = store
        .transact_get_items(TransactGetItems {
            items: vec![TransactGet {
                table: t.clone(),
                key: key("p", "5k"),
                projection: None,
                attrs: Default::default(),
            }],
        })
        .await
        .or_fail("transact get")?;
    // 5 KB → 2 read units, doubled.
    check(for_table(&out.consumed_capacity, &t)?, 4.0, 4.0, "transactional get of 5 KB")?;
    Ok(())
}
