//! Secondary indexes: sparse GSIs, index maintenance as the base item changes, and projections
//! (`KEYS_ONLY`, `INCLUDE`, `ALL`) on GSIs and LSIs.
//!
//! GSIs are eventually consistent in DynamoDB, so GSI reads are retried for a few seconds
//! before a case fails; an engine that is immediately consistent passes on the first try.

use std::time::{Duration, Instant};

use super::support::{Ctx, OrFail, Outcome, ids, key, put, put_all, scan_all};
use crate::{
    DeleteItem, Item, KeyAttribute, KeySchema, Projection, PutItem, Query, ScalarType, Scan, Store, TableDefinition,
    TransactWrite, TransactWriteItems, UpdateItem, item,
};

/// How long a GSI may lag its table before the case fails.
const GSI_LAG: Duration = Duration::from_secs(10);

/// Runs `query` until its items (all pages) equal `want`, or `GSI_LAG` passes.
async fn eventually_query(store: &dyn Store, query: Query, want: &[Item], what: &str) -> Outcome {
    let deadline = Instant::now() + GSI_LAG;
    loop {
        let (got, _) = super::support::query_all(store, query.clone()).await?;
        if got == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            ensure_eq!(got, want.to_vec(), "{what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Same for a scan (compared as id lists, sorted).
async fn eventually_scan_ids(store: &dyn Store, scan: Scan, want: &[&str], what: &str) -> Outcome {
    let deadline = Instant::now() + GSI_LAG;
    loop {
        let (got, _) = scan_all(store, scan.clone()).await?;
        let mut got = ids(&got);
        got.sort();
        if got == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            ensure_eq!(got, want.to_vec(), "{what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn gsi_table(ctx: &Ctx) -> TableDefinition {
    TableDefinition::new(ctx.table(), KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S)).gsi(
        "gsi",
        KeySchema::composite("gpk", ScalarType::S, "gsk", ScalarType::S),
        Projection::All,
    )
}

/// Items lacking either GSI key attribute are not in the GSI.
pub(crate) async fn sparse(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create(gsi_table(&ctx)).await?;
    let indexed: Vec<Item> = (0..3)
        .map(|i| item! { "pk" => format!("p{i}"), "sk" => "s", "id" => format!("in{i}"), "gpk" => "G", "gsk" => format!("{i}") })
        .collect();
    let mut items = indexed.clone();
    items.push(item! { "pk" => "p3", "sk" => "s", "id" => "no-keys" });
    items.push(item! { "pk" => "p4", "sk" => "s", "id" => "only-gpk", "gpk" => "G" });
    items.push(item! { "pk" => "p5", "sk" => "s", "id" => "only-gsk", "gsk" => "9" });
    put_all(store, &t, items).await?;
    eventually_query(
        store,
        Query::new(&t, "gpk = :g").index("gsi").value(":g", "G"),
        &indexed,
        "GSI query holds only items with both index keys",
    )
    .await?;
    eventually_scan_ids(store, Scan::new(&t).index("gsi"), &["in0", "in1", "in2"], "GSI scan").await?;
    let (all, _) = scan_all(store, Scan::new(&t)).await?;
    ensure_eq!(all.len(), 6, "table scan still holds every item");
    Ok(())
}

/// The GSI and LSI follow every change of the base item: key changes, removal, overwrite,
/// delete, and writes inside a transaction.
pub(crate) async fn maintained(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create(gsi_table(&ctx).lsi("lsi", KeyAttribute::new("lsk", ScalarType::S), Projection::All)).await?;
    let gq = |g: &str| Query::new(&t, "gpk = :g").index("gsi").value(":g", g);
    let lq = || Query::new(&t, "pk = :p").index("lsi").value(":p", "p");
    let v1 = item! { "pk" => "p", "sk" => "s", "gpk" => "A", "gsk" => "1", "lsk" => "x", "v" => 1 };
    put(store, &t, v1.clone()).await?;
    eventually_query(store, gq("A"), std::slice::from_ref(&v1), "GSI after put").await?;
    eventually_query(store, lq(), std::slice::from_ref(&v1), "LSI after put").await?;

    // Changing the GSI partition key moves the entry; the LSI entry carries the new values.
    store
        .update_item(UpdateItem::new(&t, key("p", "s"), "SET gpk = :b, v = :two").value(":b", "B").value(":two", 2))
        .await
        .or_fail("update gpk")?;
    let v2 = item! { "pk" => "p", "sk" => "s", "gpk" => "B", "gsk" => "1", "lsk" => "x", "v" => 2 };
    eventually_query(store, gq("A"), &[], "old GSI partition after the key change").await?;
    eventually_query(store, gq("B"), std::slice::from_ref(&v2), "new GSI partition after the key change").await?;
    eventually_query(store, lq(), std::slice::from_ref(&v2), "LSI after the update").await?;

    // Removing an index key takes the item out of that index only.
    store.update_item(UpdateItem::new(&t, key("p", "s"), "REMOVE gsk")).await.or_fail("remove gsk")?;
    eventually_query(store, gq("B"), &[], "GSI after removing its sort key").await?;
    store.update_item(UpdateItem::new(&t, key("p", "s"), "REMOVE lsk")).await.or_fail("remove lsk")?;
    eventually_query(store, lq(), &[], "LSI after removing its sort key").await?;

    // An overwriting put brings the keys back; a delete removes the entries.
    put(store, &t, v1.clone()).await?;
    eventually_query(store, gq("A"), std::slice::from_ref(&v1), "GSI after overwrite").await?;
    store.delete_item(DeleteItem::new(&t, key("p", "s"))).await.or_fail("delete")?;
    eventually_query(store, gq("A"), &[], "GSI after delete").await?;
    eventually_query(store, lq(), &[], "LSI after delete").await?;

    Ok(())
}

/// `KEYS_ONLY` and `INCLUDE` indexes return the table and index keys (plus the included
/// attributes) and nothing else; `ALL` returns everything.
pub(crate) async fn projections(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx
        .create(
            TableDefinition::new(ctx.table(), KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S))
                .gsi("keys", KeySchema::hash("gpk", ScalarType::S), Projection::KeysOnly)
                .gsi(
                    "incl",
                    KeySchema::composite("gpk", ScalarType::S, "gsk", ScalarType::N),
                    Projection::Include(vec!["a".into(), "c".into()]),
                )
                .gsi("all", KeySchema::hash("gpk", ScalarType::S), Projection::All)
                .lsi("lkeys", KeyAttribute::new("lsk", ScalarType::S), Projection::KeysOnly),
        )
        .await?;
    let full = item! { "pk" => "p", "sk" => "s", "gpk" => "G", "gsk" => 5, "lsk" => "l", "a" => "A", "b" => "B" };
    put(store, &t, full.clone()).await?;
    let gq = |index: &str| Query::new(&t, "gpk = :g").index(index).value(":g", "G");
    eventually_query(store, gq("keys"), &[item! { "pk" => "p", "sk" => "s", "gpk" => "G" }], "KEYS_ONLY GSI").await?;
    // "c" is projected but absent from the item; "b" exists but is not projected.
    eventually_query(
        store,
        gq("incl"),
        &[item! { "pk" => "p", "sk" => "s", "gpk" => "G", "gsk" => 5, "a" => "A" }],
        "INCLUDE GSI",
    )
    .await?;
    eventually_query(store, gq("all"), std::slice::from_ref(&full), "ALL GSI").await?;
    let (got, _) = super::support::query_all(store, Query::new(&t, "pk = :p").index("lkeys").value(":p", "p")).await?;
    ensure_eq!(got, vec![item! { "pk" => "p", "sk" => "s", "lsk" => "l" }], "KEYS_ONLY LSI");
    let (got, _) = scan_all(store, Scan::new(&t).index("keys")).await?;
    ensure_eq!(got, vec![item! { "pk" => "p", "sk" => "s", "gpk" => "G" }], "KEYS_ONLY GSI scan");
    Ok(())
}

/// Transactional writes maintain the GSI and LSI like single-item writes.
pub(crate) async fn maintained_by_transactions(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create(gsi_table(&ctx).lsi("lsi", KeyAttribute::new("lsk", ScalarType::S), Projection::All)).await?;
    let gq = |g: &str| Query::new(&t, "gpk = :g").index("gsi").value(":g", g);
    let lq = || Query::new(&t, "pk = :p").index("lsi").value(":p", "p");
    let tx = |w: TransactWrite| TransactWriteItems { items: vec![w], client_request_token: None };
    let v1 = item! { "pk" => "p", "sk" => "t", "gpk" => "T", "gsk" => "1", "lsk" => "y" };
    store
        .transact_write_items(tx(TransactWrite::Put(PutItem::new(&t, v1.clone()))))
        .await
        .or_fail("transactional put")?;
    eventually_query(store, gq("T"), std::slice::from_ref(&v1), "GSI after a transactional put").await?;
    eventually_query(store, lq(), std::slice::from_ref(&v1), "LSI after a transactional put").await?;
    store
        .transact_write_items(tx(TransactWrite::Update(
            UpdateItem::new(&t, key("p", "t"), "SET gpk = :u").value(":u", "U"),
        )))
        .await
        .or_fail("transactional update of the GSI key")?;
    let v2 = item! { "pk" => "p", "sk" => "t", "gpk" => "U", "gsk" => "1", "lsk" => "y" };
    eventually_query(store, gq("T"), &[], "old GSI partition after a transactional key change").await?;
    eventually_query(store, gq("U"), std::slice::from_ref(&v2), "new GSI partition after a transactional key change")
        .await?;
    store
        .transact_write_items(tx(TransactWrite::Delete(DeleteItem::new(&t, key("p", "t")))))
        .await
        .or_fail("transactional delete")?;
    eventually_query(store, gq("U"), &[], "GSI after a transactional delete").await?;
    eventually_query(store, lq(), &[], "LSI after a transactional delete").await?;
    Ok(())
}
