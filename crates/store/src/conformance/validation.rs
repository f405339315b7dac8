//! Requests DynamoDB rejects with `ValidationException`, as tables of requests. Every row
//! must fail with a validation error, and a rejected write must write nothing.

use std::collections::{BTreeMap, BTreeSet};

use super::support::{Ctx, Expect, Op, Outcome, expect_all, expect_ok, get, key, put, sized};
use crate::{
    AttributeValue, BatchGetItem, BatchWriteItem, ConditionCheck, DeleteItem, GetItem, Item, KeySchema,
    KeysAndAttributes, Projection, PutItem, Query, ScalarType, Scan, TableDefinition, TransactGet, TransactGetItems,
    TransactWrite, TransactWriteItems, UpdateItem, WriteRequest, item, limits, n,
};

/// The case's table: string `pk`/`sk`, and a hash-only GSI on `gpk` (so index keys are validated too).
async fn table(ctx: &Ctx) -> Result<String, String> {
    ctx.create(TableDefinition::new(ctx.table(), KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S)).gsi(
        "gsi",
        KeySchema::hash("gpk", ScalarType::S),
        Projection::All,
    ))
    .await
}

/// Every item in the table, by scanning.
async fn all_items(ctx: &Ctx, t: &str) -> Result<Vec<Item>, String> {
    Ok(super::support::scan_all(&*ctx.store, Scan::new(t)).await?.0)
}

/// Key values: empty, missing, mistyped or too long; index keys too. Keys at exactly the limit pass.
pub(crate) async fn keys(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = table(&ctx).await?;
    let p = |item: Item| -> Op { PutItem::new(&t, item).into() };
    let long = |len: usize| "k".repeat(len);
    let rows: Vec<(&str, Op)> = vec![
        ("empty string partition key", p(item! { "pk" => "", "sk" => "s" })),
        ("empty string sort key", p(item! { "pk" => "p", "sk" => "" })),
        ("missing sort key", p(item! { "pk" => "p", "a" => 1 })),
        ("missing partition key", p(item! { "sk" => "s", "a" => 1 })),
        ("number partition key on an S key", p(item! { "pk" => 1, "sk" => "s" })),
        ("binary sort key on an S key", p(item! { "pk" => "p", "sk" => vec![1u8] })),
        ("partition key of 2049 bytes", p(item! { "pk" => long(2049), "sk" => "s" })),
        ("sort key of 1025 bytes", p(item! { "pk" => "p", "sk" => long(1025) })),
        // The limits are in UTF-8 bytes, not characters: 1025 × "é" is 2050 bytes.
        ("partition key of 1025 two-byte characters", p(item! { "pk" => "é".repeat(1025), "sk" => "s" })),
        ("sort key of 513 two-byte characters", p(item! { "pk" => "p", "sk" => "é".repeat(513) })),
        ("empty string GSI key", p(item! { "pk" => "p", "sk" => "g1", "gpk" => "" })),
        ("number GSI key on an S index key", p(item! { "pk" => "p", "sk" => "g2", "gpk" => 5 })),
        ("get without the sort key", GetItem::new(&t, item! { "pk" => "p" }).into()),
        (
            "get with a non-key attribute in the key",
            GetItem::new(&t, item! { "pk" => "p", "sk" => "s", "a" => 1 }).into(),
        ),
        ("get with a mistyped key", GetItem::new(&t, item! { "pk" => "p", "sk" => 1 }).into()),
        ("get with an empty key value", GetItem::new(&t, key("p", "")).into()),
        ("delete without the sort key", DeleteItem::new(&t, item! { "pk" => "p" }).into()),
        ("update without the sort key", UpdateItem::new(&t, item! { "pk" => "p" }, "SET a = :a").value(":a", 1).into()),
        (
            "update with a partition key of 2049 bytes",
            UpdateItem::new(&t, key(long(2049), "s"), "SET a = :a").value(":a", 1).into(),
        ),
    ];
    expect_all(store, Expect::Validation, rows).await?;
    ensure_eq!(all_items(&ctx, &t).await?, vec![], "items after rejected writes");

    let at_limit = item! { "pk" => long(2048), "sk" => long(1024) };
    let rows: Vec<(&str, Op)> = vec![
        ("keys of exactly 2048 and 1024 bytes", p(at_limit.clone())),
        (
            "an empty string outside the key",
            p(item! { "pk" => "p", "sk" => "empty", "a" => "", "b" => Vec::<u8>::new() }),
        ),
        ("an item without the GSI key", p(item! { "pk" => "p", "sk" => "sparse" })),
    ];
    expect_ok(store, rows).await?;
    ensure_eq!(get(store, &t, at_limit.clone()).await?, Some(at_limit), "item with keys at the limit");
    Ok(())
}

/// Items up to 400 KB (names and values, by DynamoDB's size rules) are accepted; one byte more is not.
pub(crate) async fn item_size_limit(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let max = limits::MAX_ITEM_BYTES;
    let at_limit = sized(key("p", "max"), max);
    put(store, &t, at_limit.clone()).await?;
    ensure_eq!(get(store, &t, key("p", "max")).await?, Some(at_limit), "item of exactly 400 KB");
    let over = sized(key("p", "over"), max + 1);
    let mut batch = BatchWriteItem::default();
    batch.requests.insert(t.clone(), vec![WriteRequest::Put(sized(key("p", "batch"), max + 1))]);
    let rows: Vec<(&str, Op)> = vec![
        ("put of 400 KB + 1 byte", PutItem::new(&t, over).into()),
        // An update that grows the item past the limit.
        (
            "update growing an item past 400 KB",
            UpdateItem::new(&t, key("p", "max"), "SET grow = :g").value(":g", "g").into(),
        ),
        ("batch write of 400 KB + 1 byte", batch.into()),
    ];
    expect_all(store, Expect::Validation, rows).await?;
    ensure_eq!(get(store, &t, key("p", "over")).await?, None, "oversized put wrote");
    ensure_eq!(get(store, &t, key("p", "batch")).await?, None, "oversized batch write wrote");
    let got = get(store, &t, key("p", "max")).await?.ok_or("400 KB item vanished")?;
    ensure!(!got.contains_key("grow"), "the rejected update applied");
    Ok(())
}

/// Expression placeholders and reserved words, in conditions, updates, projections and filters.
pub(crate) async fn expressions(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = table(&ctx).await?;
    let seed = item! { "pk" => "p", "sk" => "s", "a" => 1, "status" => "on" };
    put(store, &t, seed.clone()).await?;
    let put_new = || PutItem::new(&t, item! { "pk" => "p", "sk" => "new", "a" => 2 });
    let upd = |expr: &str| UpdateItem::new(&t, key("p", "s"), expr);
    let long_condition = vec!["a = :a"; 700].join(" OR ");
    let rows: Vec<(&str, Op)> = vec![
        ("reserved word in a condition", put_new().condition("status = :s").value(":s", "on").into()),
        ("reserved word in an update", upd("SET status = :s").value(":s", "off").into()),
        ("reserved word in a projection", GetItem::new(&t, key("p", "s")).projection("status").into()),
        (
            "reserved word in a filter",
            Query::new(&t, "pk = :p").filter("data = :d").value(":p", "p").value(":d", 1).into(),
        ),
        ("unused expression attribute name", put_new().condition("a = :a").value(":a", 1).name("#unused", "a").into()),
        ("unused expression attribute value", put_new().condition("a = :a").value(":a", 1).value(":unused", 1).into()),
        ("unused value in an update", upd("SET a = :a").value(":a", 1).value(":b", 2).into()),
        ("names without any expression", GetItem::new(&t, key("p", "s")).name("#a", "a").into()),
        ("values without any expression", PutItem::new(&t, item! { "pk" => "p", "sk" => "new" }).value(":a", 1).into()),
        ("undefined value placeholder", put_new().condition("a = :nope").into()),
        ("undefined name placeholder", put_new().condition("#nope = :a").value(":a", 1).into()),
        ("undefined value in an update", upd("SET a = :nope").into()),
        ("undefined name in a projection", GetItem::new(&t, key("p", "s")).projection("#nope").into()),
        ("syntax error", put_new().condition("a = = :a").value(":a", 1).into()),
        ("unknown function", put_new().condition("no_such_function(a)").into()),
        ("invalid attribute_type type", put_new().condition("attribute_type(a, :t)").value(":t", "XX").into()),
        ("unbalanced parentheses", put_new().condition("(a = :a").value(":a", 1).into()),
        ("expression over 4 KB", put_new().condition(long_condition).value(":a", 1).into()),
        ("empty condition", put_new().condition("").into()),
        ("scan filter with an unused value", Scan::new(&t).filter("a = :a").value(":a", 1).value(":b", 1).into()),
    ];
    expect_all(store, Expect::Validation, rows).await?;
    ensure_eq!(all_items(&ctx, &t).await?, vec![seed], "items after rejected requests");
    Ok(())
}

/// Key conditions DynamoDB rejects.
pub(crate) async fn key_conditions(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = table(&ctx).await?;
    let q = |expr: &str| Query::new(&t, expr);
    let rows: Vec<(&str, Op)> = vec![
        ("no partition key condition", q("sk = :s").value(":s", "s").into()),
        ("partition key with <", q("pk < :p").value(":p", "p").into()),
        ("begins_with on the partition key", q("begins_with(pk, :p)").value(":p", "p").into()),
        ("OR in a key condition", q("pk = :p OR sk = :s").value(":p", "p").value(":s", "s").into()),
        ("a non-key attribute", q("pk = :p AND a = :a").value(":p", "p").value(":a", 1).into()),
        (
            "two sort key conditions",
            q("pk = :p AND sk > :a AND sk < :b").value(":p", "p").value(":a", "a").value(":b", "b").into(),
        ),
        ("<> on the sort key", q("pk = :p AND sk <> :s").value(":p", "p").value(":s", "s").into()),
        (
            "BETWEEN with bounds reversed",
            q("pk = :p AND sk BETWEEN :b AND :a").value(":p", "p").value(":a", "a").value(":b", "b").into(),
        ),
        ("a mistyped partition key value", q("pk = :p").value(":p", 1).into()),
        ("a mistyped sort key value", q("pk = :p AND sk > :s").value(":p", "p").value(":s", 1).into()),
        ("a consistent read on a GSI", q("gpk = :g").index("gsi").value(":g", "g").consistent().into()),
        (
            "the table's sort key on a GSI",
            q("gpk = :g AND sk = :s").index("gsi").value(":g", "g").value(":s", "s").into(),
        ),
        ("an empty key condition", q("").into()),
    ];
    expect_all(store, Expect::Validation, rows).await
}

/// `BatchWriteItem` (25 writes, distinct keys, not empty) and `BatchGetItem` (100 keys, distinct).
pub(crate) async fn batch_limits(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let write = |requests: Vec<WriteRequest>| -> Op {
        let mut b = BatchWriteItem::default();
        b.requests.insert(t.clone(), requests);
        b.into()
    };
    let get_keys = |keys: Vec<Item>| -> Op {
        let mut b = BatchGetItem::default();
        b.requests.insert(t.clone(), KeysAndAttributes { keys, ..Default::default() });
        b.into()
    };
    let puts = |count: usize| -> Vec<WriteRequest> {
        (0..count).map(|i| WriteRequest::Put(key("p", format!("{i:03}").as_str()))).collect()
    };
    let keys = |count: usize| -> Vec<Item> { (0..count).map(|i| key("p", format!("{i:03}").as_str())).collect() };
    let rows: Vec<(&str, Op)> = vec![
        ("26 writes", write(puts(26))),
        ("no writes at all", BatchWriteItem::default().into()),
        ("a table with an empty write list", write(vec![])),
        ("one key put twice", write(vec![WriteRequest::Put(key("p", "d")), WriteRequest::Put(key("p", "d"))])),
        ("one key put and deleted", write(vec![WriteRequest::Put(key("p", "d")), WriteRequest::Delete(key("p", "d"))])),
        (
            "a write with an invalid item",
            write(vec![WriteRequest::Put(key("p", "ok")), WriteRequest::Put(item! { "pk" => "p" })]),
        ),
        ("101 keys", get_keys(keys(101))),
        ("no keys at all", BatchGetItem::default().into()),
        ("one key twice", get_keys(vec![key("p", "d"), key("p", "d")])),
    ];
    expect_all(store, Expect::Validation, rows).await?;
    ensure_eq!(all_items(&ctx, &t).await?, vec![], "items after rejected batches");
    // Exactly 25 writes and 100 keys are fine.
    let rows: Vec<(&str, Op)> = vec![("25 writes", write(puts(25))), ("100 keys", get_keys(keys(100)))];
    expect_ok(store, rows).await
}

/// `TransactWriteItems`: 100 items, one operation per item, 4 MB in all.
pub(crate) async fn transaction_limits(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let tx = |items: Vec<TransactWrite>| -> Op { TransactWriteItems { items, client_request_token: None }.into() };
    let puts = |count: usize| -> Vec<TransactWrite> {
        (0..count).map(|i| TransactWrite::Put(PutItem::new(&t, key("p", format!("{i:03}").as_str())))).collect()
    };
    // 11 items of 390 KB: each within the item limit, 4.2 MB together.
    let heavy: Vec<TransactWrite> = (0..11)
        .map(|i| TransactWrite::Put(PutItem::new(&t, sized(key("h", format!("{i:02}").as_str()), 390 * 1024))))
        .collect();
    let gets = |count: usize| TransactGetItems {
        items: (0..count)
            .map(|i| TransactGet {
                table: t.clone(),
                key: key("p", format!("{i:03}").as_str()),
                projection: None,
                attrs: Default::default(),
            })
            .collect(),
    };
    let rows: Vec<(&str, Op)> = vec![
        ("101 writes", tx(puts(101))),
        ("no writes", tx(vec![])),
        (
            "put and update of one item",
            tx(vec![
                TransactWrite::Put(PutItem::new(&t, key("p", "same"))),
                TransactWrite::Update(UpdateItem::new(&t, key("p", "same"), "SET a = :a").value(":a", 1)),
            ]),
        ),
        (
            "condition check and delete of one item",
            tx(vec![
                TransactWrite::ConditionCheck(ConditionCheck::new(&t, key("p", "same"), "attribute_not_exists(pk)")),
                TransactWrite::Delete(DeleteItem::new(&t, key("p", "same"))),
            ]),
        ),
        ("more than 4 MB", tx(heavy)),
        ("101 reads", gets(101).into()),
        // DynamoDB rejects two reads of one item as it rejects two writes.
        (
            "one item read twice",
            TransactGetItems { items: vec![gets(1).items[0].clone(), gets(1).items[0].clone()] }.into(),
        ),
    ];
    expect_all(store, Expect::Validation, rows).await?;
    ensure_eq!(all_items(&ctx, &t).await?, vec![], "items after rejected transactions");
    let rows: Vec<(&str, Op)> = vec![("100 writes", tx(puts(100))), ("100 reads", gets(100).into())];
    expect_ok(store, rows).await
}

/// Empty sets anywhere, and writes to key attributes.
pub(crate) async fn values(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let seed = item! { "pk" => "p", "sk" => "s", "a" => 1 };
    put(store, &t, seed.clone()).await?;
    let p = |attr: AttributeValue| -> Op { PutItem::new(&t, item! { "pk" => "p", "sk" => "new", "v" => attr }).into() };
    let upd = |expr: &str| UpdateItem::new(&t, key("p", "s"), expr);
    let nested_empty = AttributeValue::M(BTreeMap::from([("inner".to_string(), AttributeValue::Ss(BTreeSet::new()))]));
    let rows: Vec<(&str, Op)> = vec![
        ("empty string set", p(AttributeValue::Ss(BTreeSet::new()))),
        ("empty number set", p(AttributeValue::Ns(BTreeSet::new()))),
        ("empty binary set", p(AttributeValue::Bs(BTreeSet::new()))),
        ("empty set inside a map", p(nested_empty)),
        ("empty set inside a list", p(AttributeValue::L(vec![AttributeValue::Ns(BTreeSet::new())]))),
        ("empty set as an expression value", upd("SET v = :e").value(":e", AttributeValue::Ss(BTreeSet::new())).into()),
        ("SET the partition key", upd("SET pk = :v").value(":v", "q").into()),
        ("SET the sort key to its own value", upd("SET sk = :v").value(":v", "s").into()),
        ("REMOVE the sort key", upd("REMOVE sk").into()),
        ("ADD to the sort key", upd("ADD sk :v").value(":v", n("1")).into()),
    ];
    expect_all(store, Expect::Validation, rows).await?;
    ensure_eq!(all_items(&ctx, &t).await?, vec![seed], "items after rejected writes");
    // A set with elements is of course fine, and comes back as written.
    let good = item! { "pk" => "p", "sk" => "set", "v" => AttributeValue::Ss(BTreeSet::from(["x".to_string()])) };
    put(store, &t, good.clone()).await?;
    ensure_eq!(get(store, &t, key("p", "set")).await?, Some(good), "item with a one-element set");
    Ok(())
}
