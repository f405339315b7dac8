//! Multi-item operations: `BatchWriteItem`, `BatchGetItem`, `TransactGetItems` and
//! `TransactWriteItems` (all-or-nothing, cancellation reasons, idempotency tokens).

use super::support::{Ctx, Expect, OrFail, Outcome, composite, expect_err, get, ids, key, put, put_all, scan_all};
use crate::{
    BatchGetItem, BatchWriteItem, CancellationCode, ConditionCheck, DeleteItem, Item, KeysAndAttributes, PutItem, Scan,
    Store, TransactGet, TransactGetItems, TransactWrite, TransactWriteItems, UpdateItem, WriteRequest, item,
};

fn keyed(pk: &str, sk: &str, id: &str) -> Item {
    item! { "pk" => pk, "sk" => sk, "id" => id }
}

async fn sorted_ids(store: &dyn Store, table: &str) -> Result<Vec<String>, String> {
    let (items, _) = scan_all(store, Scan::new(table)).await?;
    let mut got = ids(&items);
    got.sort();
    Ok(got)
}

/// Puts and deletes across two tables in one call; a put replaces the whole item.
pub(crate) async fn batch_write(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t1 = ctx.create_composite().await?;
    let t2 = ctx.create(composite(&ctx.table_named("two"))).await?;
    put(store, &t1, item! { "pk" => "p", "sk" => "00", "id" => "old", "extra" => 1 }).await?;

    let mut request = BatchWriteItem::default();
    request.requests.insert(
        t1.clone(),
        (0..15).map(|i| WriteRequest::Put(keyed("p", &format!("{i:02}"), &format!("a{i:02}")))).collect(),
    );
    request.requests.insert(
        t2.clone(),
        (0..10).map(|i| WriteRequest::Put(keyed("q", &format!("{i:02}"), &format!("b{i:02}")))).collect(),
    );
    let mut attempts = 0;
    loop {
        attempts += 1;
        ensure!(attempts <= 50, "unprocessed items after 50 attempts");
        let out = store.batch_write_item(request).await.or_fail("batch write of 25")?;
        if out.unprocessed_items.values().all(Vec::is_empty) {
            break;
        }
        request = BatchWriteItem { requests: out.unprocessed_items };
    }
    ensure_eq!(sorted_ids(store, &t1).await?, (0..15).map(|i| format!("a{i:02}")).collect::<Vec<_>>(), "table 1");
    ensure_eq!(sorted_ids(store, &t2).await?, (0..10).map(|i| format!("b{i:02}")).collect::<Vec<_>>(), "table 2");
    ensure_eq!(
        get(store, &t1, key("p", "00")).await?,
        Some(keyed("p", "00", "a00")),
        "batch put replaces the whole item"
    );

    // Mixed puts and deletes (deleting an absent key is fine).
    let mut request = BatchWriteItem::default();
    let mut writes: Vec<WriteRequest> =
        (0..5).map(|i| WriteRequest::Delete(key("p", format!("{i:02}").as_str()))).collect();
    writes.push(WriteRequest::Delete(key("p", "absent")));
    writes.push(WriteRequest::Put(keyed("p", "new", "new")));
    request.requests.insert(t1.clone(), writes);
    let out = store.batch_write_item(request).await.or_fail("mixed batch")?;
    ensure!(out.unprocessed_items.values().all(Vec::is_empty), "small batch left unprocessed items");
    let mut want: Vec<String> = (5..15).map(|i| format!("a{i:02}")).collect();
    want.push("new".into());
    ensure_eq!(sorted_ids(store, &t1).await?, want, "table 1 after deletes");
    Ok(())
}

/// Reads across two tables; absent keys are simply missing; projections apply per table.
pub(crate) async fn batch_get(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t1 = ctx.create_composite().await?;
    let t2 = ctx.create(composite(&ctx.table_named("two"))).await?;
    put_all(
        store,
        &t1,
        (0..10)
            .map(|i| item! { "pk" => "p", "sk" => format!("{i:02}"), "id" => format!("a{i:02}"), "x" => i })
            .collect(),
    )
    .await?;
    put_all(
        store,
        &t2,
        (0..5)
            .map(|i| item! { "pk" => "q", "sk" => format!("{i:02}"), "id" => format!("b{i:02}"), "x" => i })
            .collect(),
    )
    .await?;

    let mut request = BatchGetItem::default();
    request.requests.insert(
        t1.clone(),
        KeysAndAttributes {
            keys: ["01", "03", "05", "07", "nope", "also-nope"].iter().map(|s| key("p", *s)).collect(),
            consistent_read: true,
            ..Default::default()
        },
    );
    request.requests.insert(
        t2.clone(),
        KeysAndAttributes { keys: ["00", "04"].iter().map(|s| key("q", *s)).collect(), ..Default::default() }
            .projection_of("id, #x", "#x", "x"),
    );
    let mut found: std::collections::BTreeMap<String, Vec<Item>> = Default::default();
    let mut attempts = 0;
    loop {
        attempts += 1;
        ensure!(attempts <= 50, "unprocessed keys after 50 attempts");
        let out = store.batch_get_item(request).await.or_fail("batch get")?;
        for (table, items) in out.responses {
            found.entry(table).or_default().extend(items);
        }
        if out.unprocessed_keys.values().all(|k| k.keys.is_empty()) {
            break;
        }
        request = BatchGetItem { requests: out.unprocessed_keys };
    }
    let mut a = found.remove(&t1).unwrap_or_default();
    a.sort_by_key(|i| ids(std::slice::from_ref(i)));
    ensure_eq!(ids(&a), vec!["a01", "a03", "a05", "a07"], "table 1 items found");
    ensure_eq!(a[0], item! { "pk" => "p", "sk" => "01", "id" => "a01", "x" => 1 }, "a whole item from table 1");
    let mut b = found.remove(&t2).unwrap_or_default();
    b.sort_by_key(|i| ids(std::slice::from_ref(i)));
    ensure_eq!(
        b,
        vec![item! { "id" => "b00", "x" => 0 }, item! { "id" => "b04", "x" => 4 }],
        "projected items from table 2"
    );
    ensure!(found.is_empty(), "responses for unknown tables: {:?}", found.keys());
    Ok(())
}

trait ProjectionOf {
    fn projection_of(self, expr: &str, placeholder: &str, name: &str) -> Self;
}

impl ProjectionOf for KeysAndAttributes {
    fn projection_of(mut self, expr: &str, placeholder: &str, name: &str) -> Self {
        self.projection = Some(expr.to_string());
        self.attrs.names.insert(placeholder.to_string(), name.to_string());
        self
    }
}

fn tget(table: &str, key: Item) -> TransactGet {
    TransactGet { table: table.to_string(), key, projection: None, attrs: Default::default() }
}

/// Reads across tables in request order, `None` for absent items, with projections.
pub(crate) async fn transact_get(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t1 = ctx.create_composite().await?;
    let t2 = ctx.create(composite(&ctx.table_named("two"))).await?;
    let a = item! { "pk" => "p", "sk" => "a", "v" => 1, "w" => "x" };
    let b = item! { "pk" => "q", "sk" => "b", "v" => 2 };
    put(store, &t1, a.clone()).await?;
    put(store, &t2, b.clone()).await?;
    let c = item! { "pk" => "p", "sk" => "c", "v" => 3, "w" => "y" };
    put(store, &t1, c.clone()).await?;
    let mut projected = tget(&t1, key("p", "c"));
    projected.projection = Some("#w".into());
    projected.attrs.names.insert("#w".into(), "w".into());
    let out = store
        .transact_get_items(TransactGetItems {
            items: vec![tget(&t2, key("q", "b")), tget(&t1, key("p", "absent")), tget(&t1, key("p", "a")), projected],
        })
        .await
        .or_fail("transact get")?;
    ensure_eq!(out.items, vec![Some(b), None, Some(a), Some(item! { "w" => "y" })], "items in request order");
    Ok(())
}

/// Put, Update, Delete and ConditionCheck, across two tables, all applied together.
pub(crate) async fn transact_write(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t1 = ctx.create_composite().await?;
    let t2 = ctx.create(composite(&ctx.table_named("two"))).await?;
    put(store, &t1, item! { "pk" => "p", "sk" => "upd", "v" => 1 }).await?;
    put(store, &t1, item! { "pk" => "p", "sk" => "del", "v" => 1 }).await?;
    let checked = item! { "pk" => "p", "sk" => "chk", "state" => "open" };
    put(store, &t2, checked.clone()).await?;
    store
        .transact_write_items(TransactWriteItems {
            items: vec![
                TransactWrite::Put(
                    PutItem::new(&t2, item! { "pk" => "q", "sk" => "new", "v" => 7 })
                        .condition("attribute_not_exists(pk)"),
                ),
                TransactWrite::Update(
                    UpdateItem::new(&t1, key("p", "upd"), "SET v = v + :one, w = :w")
                        .condition("v = :one")
                        .value(":one", 1)
                        .value(":w", "w"),
                ),
                TransactWrite::Delete(DeleteItem::new(&t1, key("p", "del")).condition("attribute_exists(v)")),
                TransactWrite::ConditionCheck(
                    ConditionCheck::new(&t2, key("p", "chk"), "#s = :open").name("#s", "state").value(":open", "open"),
                ),
                // An update of an absent item creates it, in a transaction too.
                TransactWrite::Update(UpdateItem::new(&t1, key("p", "created"), "ADD n :one").value(":one", 1)),
            ],
            client_request_token: None,
        })
        .await
        .or_fail("transaction")?;
    ensure_eq!(get(store, &t2, key("q", "new")).await?, Some(item! { "pk" => "q", "sk" => "new", "v" => 7 }), "put");
    ensure_eq!(
        get(store, &t1, key("p", "upd")).await?,
        Some(item! { "pk" => "p", "sk" => "upd", "v" => 2, "w" => "w" }),
        "update"
    );
    ensure_eq!(get(store, &t1, key("p", "del")).await?, None, "delete");
    ensure_eq!(get(store, &t2, key("p", "chk")).await?, Some(checked), "condition-checked item untouched");
    ensure_eq!(
        get(store, &t1, key("p", "created")).await?,
        Some(item! { "pk" => "p", "sk" => "created", "n" => 1 }),
        "update creating an item"
    );
    Ok(())
}

/// One failing condition cancels the whole transaction: one reason per item, in order,
/// `ConditionalCheckFailed` on the failing item and `None` on the others; nothing applied.
pub(crate) async fn transact_cancellation(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let a = item! { "pk" => "p", "sk" => "a", "v" => 1 };
    let b = item! { "pk" => "p", "sk" => "b", "v" => 1 };
    let c = item! { "pk" => "p", "sk" => "c", "v" => 1 };
    for i in [&a, &b, &c] {
        put(store, &t, i.clone()).await?;
    }
    let mut check = ConditionCheck::new(&t, key("p", "b"), "v = :two").value(":two", 2);
    check.return_old_on_condition_failure = true;
    let result = store
        .transact_write_items(TransactWriteItems {
            items: vec![
                TransactWrite::Put(PutItem::new(&t, item! { "pk" => "p", "sk" => "x", "v" => 1 })),
                TransactWrite::Update(UpdateItem::new(&t, key("p", "a"), "SET v = :five").value(":five", 5)),
                TransactWrite::ConditionCheck(check),
                TransactWrite::Delete(DeleteItem::new(&t, key("p", "c"))),
                TransactWrite::Update(UpdateItem::new(&t, key("p", "y"), "SET v = :five").value(":five", 5)),
            ],
            client_request_token: None,
        })
        .await;
    let e = expect_err(result, Expect::Canceled, "transaction with a false condition")?;
    let reasons = e.cancellation_reasons().unwrap_or_default();
    let codes: Vec<CancellationCode> = reasons.iter().map(|r| r.code).collect();
    use CancellationCode::{ConditionalCheckFailed as Failed, None as Ok_};
    ensure_eq!(codes, vec![Ok_, Ok_, Failed, Ok_, Ok_], "cancellation reason codes");
    ensure_eq!(reasons[2].item, Some(b.clone()), "ALL_OLD item on the failing check");
    ensure_eq!(reasons[0].item, None, "item on a reason that did not fail");

    let (items, _) = scan_all(store, Scan::new(&t)).await?;
    ensure_eq!(items, vec![a.clone(), b.clone(), c.clone()], "items after the cancelled transaction");

    // A failing condition on an absent item, last in the list; without ALL_OLD no item comes back.
    let result = store
        .transact_write_items(TransactWriteItems {
            items: vec![
                TransactWrite::Delete(DeleteItem::new(&t, key("p", "a"))),
                TransactWrite::Put(
                    PutItem::new(&t, item! { "pk" => "p", "sk" => "z" }).condition("attribute_exists(pk)"),
                ),
            ],
            client_request_token: None,
        })
        .await;
    let e = expect_err(result, Expect::Canceled, "transaction with a false condition on an absent item")?;
    let reasons = e.cancellation_reasons().unwrap_or_default();
    let codes: Vec<CancellationCode> = reasons.iter().map(|r| r.code).collect();
    ensure_eq!(codes, vec![Ok_, Failed], "cancellation reason codes");
    ensure_eq!(reasons[1].item, None, "item without ALL_OLD");
    let (items, _) = scan_all(store, Scan::new(&t)).await?;
    ensure_eq!(items, vec![a, b, c], "items after the second cancelled transaction");
    Ok(())
}

/// A `ClientRequestToken` makes a transaction idempotent: repeating it applies nothing more;
/// reusing the token with other items is `IdempotentParameterMismatchException`.
pub(crate) async fn transact_idempotency(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    // Unique per run: a token stays bound to its parameters for ten minutes, across runs.
    let token = format!(
        "{t}-{}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default()
    );
    let tx = |by: i64| TransactWriteItems {
        items: vec![TransactWrite::Update(UpdateItem::new(&t, key("p", "counter"), "ADD n :by").value(":by", by))],
        client_request_token: Some(token.clone()),
    };
    store.transact_write_items(tx(1)).await.or_fail("first call")?;
    store.transact_write_items(tx(1)).await.or_fail("repeated call")?;
    ensure_eq!(
        get(store, &t, key("p", "counter")).await?,
        Some(item! { "pk" => "p", "sk" => "counter", "n" => 1 }),
        "counter after the same transaction twice"
    );
    expect_err(store.transact_write_items(tx(2)).await, Expect::ParameterMismatch, "same token, other parameters")?;
    ensure_eq!(
        get(store, &t, key("p", "counter")).await?,
        Some(item! { "pk" => "p", "sk" => "counter", "n" => 1 }),
        "counter after the mismatched call"
    );
    Ok(())
}

/// A batch get returns at most 16 MB; the rest comes back as unprocessed keys, and
/// resending them yields every item exactly once.
pub(crate) async fn batch_get_16mb(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    // 45 items of 390 KB: 17.1 MB, over the limit even if the item crossing it is returned.
    let count = 45;
    let items: Vec<Item> = (0..count)
        .map(|i| super::support::sized(keyed("p", &format!("{i:02}"), &format!("{i:02}")), 390 * 1024))
        .collect();
    put_all(store, &t, items).await?;
    let mut request = BatchGetItem::default();
    request.requests.insert(
        t.clone(),
        KeysAndAttributes {
            keys: (0..count).map(|i| key("p", format!("{i:02}").as_str())).collect(),
            ..Default::default()
        },
    );
    let mut got: Vec<String> = Vec::new();
    for call in 1.. {
        ensure!(call <= 100, "batch get still has unprocessed keys after 100 calls");
        let out = store.batch_get_item(request).await.or_fail("batch get")?;
        let page: Vec<Item> = out.responses.into_values().flatten().collect();
        let bytes: usize = page.iter().map(crate::item_size).sum();
        // "Up to 16 MB": whether the item crossing the limit is still returned is not
        // documented, so one item of slack is allowed.
        ensure!(
            bytes <= crate::limits::MAX_BATCH_GET_BYTES + crate::limits::MAX_ITEM_BYTES,
            "batch get call {call} returned {bytes} bytes, over 16 MB"
        );
        let unprocessed = out.unprocessed_keys.values().map(|k| k.keys.len()).sum::<usize>();
        if call == 1 {
            ensure!(unprocessed > 0, "16.4 MB came back from one batch get with no unprocessed keys");
        }
        got.extend(ids(&page));
        if unprocessed == 0 {
            break;
        }
        request = BatchGetItem { requests: out.unprocessed_keys };
    }
    got.sort();
    ensure_eq!(got, (0..count).map(|i| format!("{i:02}")).collect::<Vec<_>>(), "items over every call");
    Ok(())
}
