//! Table lifecycle: `CreateTable`, `DescribeTable`, `ListTables`, `DeleteTable`, and what
//! every operation answers for a table (or index) that does not exist.

use super::support::{Ctx, Expect, Op, OrFail, Outcome, composite, expect_all, expect_err, key};
use crate::{
    BatchGetItem, BatchWriteItem, DeleteItem, GetItem, KeyAttribute, KeySchema, KeysAndAttributes, Projection, PutItem,
    Query, ScalarType, Scan, TableStatus, TransactGet, TransactGetItems, TransactWrite, TransactWriteItems, UpdateItem,
    WriteRequest, item,
};

/// Create, describe, list, duplicate create, delete, and describe/delete after deletion.
pub(crate) async fn lifecycle(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let name = ctx.table();
    let definition = composite(&name);
    let created = ctx.create(definition.clone()).await?;
    ensure_eq!(created, name, "created table name");

    let described = store.describe_table(&name).await.or_fail("describe")?;
    ensure_eq!(described.definition.name, name, "described name");
    ensure_eq!(described.definition.key_schema, definition.key_schema, "described key schema");
    ensure_eq!(described.status, TableStatus::Active, "status after create");

    let listed = store.list_tables().await.or_fail("list tables")?;
    ensure!(listed.contains(&name), "list_tables does not contain {name}: {listed:?}");

    // Creating a table that exists is ResourceInUseException.
    expect_err(store.create_table(definition.clone()).await, Expect::InUse, "create an existing table")?;

    store.delete_table(&name).await.or_fail("delete table")?;
    // Deletion may take a while (status DELETING), but then the table is gone.
    super::support::wait_deleted(store, &name).await?;
    expect_err(store.describe_table(&name).await, Expect::NotFound, "describe a deleted table")?;
    expect_err(store.delete_table(&name).await, Expect::NotFound, "delete a deleted table")?;
    let listed = store.list_tables().await.or_fail("list tables")?;
    ensure!(!listed.contains(&name), "list_tables still contains deleted {name}");

    // A deleted table's name can be reused, and the new table starts empty.
    ctx.create(definition).await?;
    let out = store.get_item(GetItem::new(&name, key("a", "b"))).await.or_fail("get from recreated table")?;
    ensure_eq!(out.item, None, "item in a freshly created table");
    Ok(())
}

/// Secondary indexes, a TTL attribute and the key types are described as created.
pub(crate) async fn with_indexes(ctx: Ctx) -> Outcome {
    let name = ctx.table();
    let definition = crate::TableDefinition::new(&name, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::N))
        .gsi(
            "by-g",
            KeySchema::composite("gpk", ScalarType::B, "gsk", ScalarType::S),
            Projection::Include(vec!["a".into(), "b".into()]),
        )
        .gsi("by-h", KeySchema::hash("hpk", ScalarType::N), Projection::KeysOnly)
        .lsi("by-l", KeyAttribute::new("lsk", ScalarType::S), Projection::All);
    ctx.create(definition.clone()).await?;
    let described = ctx.store.describe_table(&name).await.or_fail("describe")?;
    ensure_eq!(described.definition.key_schema, definition.key_schema, "key schema");
    let mut gsis = described.definition.global_indexes.clone();
    gsis.sort_by(|a, b| a.name.cmp(&b.name));
    ensure_eq!(gsis, definition.global_indexes, "global indexes");
    ensure_eq!(described.definition.local_indexes, definition.local_indexes, "local indexes");
    Ok(())
}

/// A table created with a TTL attribute describes it (`UpdateTimeToLive` / `DescribeTimeToLive`).
/// When expired items are deleted is not checked: DynamoDB gives no deadline.
pub(crate) async fn ttl_described(ctx: Ctx) -> Outcome {
    let name = ctx.create(composite(&ctx.table()).ttl("expires_at")).await?;
    let described = ctx.store.describe_table(&name).await.or_fail("describe")?;
    ensure_eq!(described.definition.ttl_attribute.as_deref(), Some("expires_at"), "TTL attribute");
    Ok(())
}

/// Every operation on a table that does not exist is ResourceNotFoundException, and so is
/// a query on an index the table does not have.
pub(crate) async fn missing_table(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let missing = ctx.table_named("absent");
    let _ = store.delete_table(&missing).await;
    let k = key("a", "b");
    let mut batch_get = BatchGetItem::default();
    batch_get.requests.insert(missing.clone(), KeysAndAttributes { keys: vec![k.clone()], ..Default::default() });
    let mut batch_write = BatchWriteItem::default();
    batch_write.requests.insert(missing.clone(), vec![WriteRequest::Put(k.clone())]);
    let rows: Vec<(&str, Op)> = vec![
        ("get", GetItem::new(&missing, k.clone()).into()),
        ("put", PutItem::new(&missing, k.clone()).into()),
        ("update", UpdateItem::new(&missing, k.clone(), "SET a = :a").value(":a", 1).into()),
        ("delete", DeleteItem::new(&missing, k.clone()).into()),
        ("query", Query::new(&missing, "pk = :p").value(":p", "a").into()),
        ("scan", Scan::new(&missing).into()),
        ("batch get", batch_get.into()),
        ("batch write", batch_write.into()),
    ];
    expect_all(store, Expect::NotFound, rows).await?;
    expect_err(store.describe_table(&missing).await, Expect::NotFound, "describe")?;

    let name = ctx.create_composite().await?;
    // An index the table does not have.
    expect_err(
        store.query(Query::new(&name, "pk = :p").index("no-such-index").value(":p", "a")).await,
        Expect::Validation,
        "query on a missing index",
    )?;
    Ok(())
}

/// Transactions naming a table that does not exist fail as a whole.
pub(crate) async fn missing_table_transactions(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let missing = ctx.table_named("absent");
    let _ = store.delete_table(&missing).await;
    let k = key("a", "b");
    expect_err(
        store
            .transact_get_items(TransactGetItems {
                items: vec![TransactGet {
                    table: missing.clone(),
                    key: k.clone(),
                    projection: None,
                    attrs: Default::default(),
                }],
            })
            .await,
        Expect::NotFound,
        "transact get",
    )?;
    let name = ctx.create_composite().await?;
    // A transaction naming a missing table fails as a whole. DynamoDB answers
    // ResourceNotFoundException; either that or a validation error is accepted as long as
    // nothing is written to the existing table.
    let result = store
        .transact_write_items(TransactWriteItems {
            items: vec![
                TransactWrite::Put(PutItem::new(&name, item! { "pk" => "t", "sk" => "1" })),
                TransactWrite::Put(PutItem::new(&missing, k.clone())),
            ],
            client_request_token: None,
        })
        .await;
    ensure!(
        matches!(&result, Err(e) if e.is_not_found() || e.is_validation()),
        "transaction on a missing table: {result:?}"
    );
    let got = super::support::get(store, &name, key("t", "1")).await?;
    ensure_eq!(got, None, "transaction on a missing table wrote to the other");

    Ok(())
}
