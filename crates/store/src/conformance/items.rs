//! Single-item operations: `GetItem`, `PutItem`, `DeleteItem`, conditional writes and
//! `ReturnValues`.

use std::collections::{BTreeMap, BTreeSet};

use super::support::{Ctx, Expect, OrFail, Outcome, expect_err, get, key, put, with};
use crate::{AttributeValue, DeleteItem, GetItem, Item, PutItem, ReturnValues, StoreError, UpdateItem, item, n};

/// Put then get returns the item; a second put replaces the whole item (it does not merge);
/// delete removes it; getting or deleting an absent item succeeds with nothing.
pub(crate) async fn put_get_delete(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let first = item! { "pk" => "p", "sk" => "s", "a" => 1, "b" => "two" };
    put(store, &t, first.clone()).await?;
    ensure_eq!(get(store, &t, key("p", "s")).await?, Some(first), "get after put");
    // An eventually consistent read is allowed to be stale in DynamoDB, but only briefly;
    // it must not fail.
    store.get_item(GetItem::new(&t, key("p", "s"))).await.or_fail("eventually consistent get")?;

    let second = item! { "pk" => "p", "sk" => "s", "c" => true };
    put(store, &t, second.clone()).await?;
    ensure_eq!(get(store, &t, key("p", "s")).await?, Some(second), "put replaces the whole item");

    // Keys are exact: another sort key, or a partition key differing in case, is another item.
    ensure_eq!(get(store, &t, key("p", "S")).await?, None, "get with another sort key");
    ensure_eq!(get(store, &t, key("P", "s")).await?, None, "get with another partition key");

    store.delete_item(DeleteItem::new(&t, key("p", "s"))).await.or_fail("delete")?;
    ensure_eq!(get(store, &t, key("p", "s")).await?, None, "get after delete");
    let out = store
        .delete_item(DeleteItem::new(&t, key("p", "s")).return_values(ReturnValues::AllOld))
        .await
        .or_fail("delete of an absent item")?;
    ensure_eq!(out.attributes, None, "ALL_OLD of deleting an absent item");
    Ok(())
}

/// Every one of the ten types, nested, survives a put and a get unchanged, as does an empty
/// string or binary outside the key.
pub(crate) async fn all_value_types(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let mut nested = BTreeMap::new();
    nested.insert("inner".to_string(), AttributeValue::L(vec![n("1"), "x".into()]));
    nested.insert("empty".to_string(), AttributeValue::M(BTreeMap::new()));
    let item = item! {
        "pk" => "p",
        "sk" => "types",
        "s" => "héllo",
        "s_empty" => "",
        "n" => n("-12.5"),
        "b" => vec![0u8, 1, 255],
        "b_empty" => Vec::<u8>::new(),
        "t" => true,
        "f" => false,
        "null" => AttributeValue::Null,
        "m" => AttributeValue::M(nested),
        "l" => AttributeValue::L(vec![AttributeValue::Null, AttributeValue::L(vec![]), n("3")]),
        "ss" => AttributeValue::Ss(BTreeSet::from(["a".to_string(), "b".to_string()])),
        "ns" => AttributeValue::Ns(BTreeSet::from(["1".parse().unwrap(), "2.5".parse().unwrap()])),
        "bs" => AttributeValue::Bs(BTreeSet::from([vec![1u8], vec![2u8, 3]])),
        // An empty string or binary may be a set member; only an empty set is invalid.
        "ss_empty_member" => AttributeValue::Ss(BTreeSet::from([String::new(), "x".to_string()])),
        "bs_empty_member" => AttributeValue::Bs(BTreeSet::from([Vec::new(), vec![1u8]])),
    };
    put(store, &t, item.clone()).await?;
    ensure_eq!(get(store, &t, key("p", "types")).await?, Some(item), "round trip");
    Ok(())
}

/// `ProjectionExpression` on `GetItem`: top-level names, nested map paths, list elements,
/// and names through placeholders.
pub(crate) async fn get_projection(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let mut m = BTreeMap::new();
    m.insert("x".to_string(), AttributeValue::from(1));
    m.insert("y".to_string(), AttributeValue::from(2));
    put(
        store,
        &t,
        item! {
            "pk" => "p", "sk" => "s", "a" => "A", "b" => "B",
            "m" => AttributeValue::M(m),
            "l" => AttributeValue::L(vec!["l0".into(), "l1".into(), "l2".into()]),
            "status" => "on",
        },
    )
    .await?;
    let got = store
        .get_item(GetItem::new(&t, key("p", "s")).projection("a, m.y, l[1], #st, absent_attr").name("#st", "status"))
        .await
        .or_fail("get with projection")?
        .item;
    let mut want_m = BTreeMap::new();
    want_m.insert("y".to_string(), AttributeValue::from(2));
    let want = item! {
        "a" => "A",
        "m" => AttributeValue::M(want_m),
        "l" => AttributeValue::L(vec!["l1".into()]),
        "status" => "on",
    };
    ensure_eq!(got, Some(want), "projected item (keys are not added)");
    Ok(())
}

/// `attribute_not_exists(pk)`: the create-only put.
pub(crate) async fn create_only(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let original = item! { "pk" => "p", "sk" => "s", "v" => 1 };
    let create = |item: Item| PutItem::new(&t, item).condition("attribute_not_exists(pk)");
    store.put_item(create(original.clone())).await.or_fail("create-only put of a new item")?;
    expect_err(
        store.put_item(create(item! { "pk" => "p", "sk" => "s", "v" => 2 })).await,
        Expect::ConditionFailed,
        "create-only put over an existing item",
    )?;
    ensure_eq!(get(store, &t, key("p", "s")).await?, Some(original), "item after the failed put");
    // Same partition key, another sort key: a different item, so the condition holds.
    store.put_item(create(item! { "pk" => "p", "sk" => "s2" })).await.or_fail("create-only put of a sibling")?;
    Ok(())
}

/// `attribute_exists(pk)`: the replace-only put.
pub(crate) async fn replace_only(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let replace = |item: Item| PutItem::new(&t, item).condition("attribute_exists(pk)");
    expect_err(
        store.put_item(replace(item! { "pk" => "p", "sk" => "s", "v" => 1 })).await,
        Expect::ConditionFailed,
        "replace-only put of an absent item",
    )?;
    ensure_eq!(get(store, &t, key("p", "s")).await?, None, "the failed put wrote");
    put(store, &t, item! { "pk" => "p", "sk" => "s", "v" => 1 }).await?;
    let new = item! { "pk" => "p", "sk" => "s", "v" => 2 };
    store.put_item(replace(new.clone())).await.or_fail("replace-only put of an existing item")?;
    ensure_eq!(get(store, &t, key("p", "s")).await?, Some(new), "item after replace");
    Ok(())
}

/// Conditions on update and delete: a false condition writes nothing; conditions see the
/// item before the write; on an absent item every attribute is missing.
pub(crate) async fn conditional_update_delete(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let original = item! { "pk" => "p", "sk" => "s", "v" => 5, "state" => "open" };
    put(store, &t, original.clone()).await?;

    expect_err(
        store
            .update_item(
                UpdateItem::new(&t, key("p", "s"), "SET v = :new")
                    .condition("v > :min")
                    .value(":new", 6)
                    .value(":min", 5),
            )
            .await,
        Expect::ConditionFailed,
        "update with a false condition",
    )?;
    expect_err(
        store
            .delete_item(
                DeleteItem::new(&t, key("p", "s"))
                    .condition("#s = :closed")
                    .name("#s", "state")
                    .value(":closed", "closed"),
            )
            .await,
        Expect::ConditionFailed,
        "delete with a false condition",
    )?;
    ensure_eq!(get(store, &t, key("p", "s")).await?, Some(original.clone()), "item after failed writes");

    // An update with a false condition on an absent item creates nothing.
    expect_err(
        store
            .update_item(
                UpdateItem::new(&t, key("p", "absent"), "SET v = :v").condition("attribute_exists(v)").value(":v", 1),
            )
            .await,
        Expect::ConditionFailed,
        "conditional update of an absent item",
    )?;
    ensure_eq!(get(store, &t, key("p", "absent")).await?, None, "the failed update created the item");
    // A delete whose condition fails on an absent item (attribute_exists is false).
    expect_err(
        store.delete_item(DeleteItem::new(&t, key("p", "absent")).condition("attribute_exists(pk)")).await,
        Expect::ConditionFailed,
        "conditional delete of an absent item",
    )?;

    // True conditions apply, and see the old values.
    store
        .update_item(
            UpdateItem::new(&t, key("p", "s"), "SET v = v + :one")
                .condition("v = :five AND #s IN (:open, :x)")
                .name("#s", "state")
                .value(":one", 1)
                .value(":five", 5)
                .value(":open", "open")
                .value(":x", "x"),
        )
        .await
        .or_fail("update with a true condition")?;
    ensure_eq!(
        get(store, &t, key("p", "s")).await?,
        Some(with(original.clone(), item! { "v" => 6 })),
        "item after the conditional update"
    );
    store
        .delete_item(DeleteItem::new(&t, key("p", "s")).condition("v = :six").value(":six", 6))
        .await
        .or_fail("delete with a true condition")?;
    ensure_eq!(get(store, &t, key("p", "s")).await?, None, "item after the conditional delete");
    Ok(())
}

/// `ReturnValuesOnConditionCheckFailure=ALL_OLD`: the failure carries the existing item.
pub(crate) async fn condition_failure_returns_old(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let original = item! { "pk" => "p", "sk" => "s", "v" => 1 };
    put(store, &t, original.clone()).await?;
    let mut request =
        PutItem::new(&t, item! { "pk" => "p", "sk" => "s", "v" => 2 }).condition("attribute_not_exists(pk)");
    request.return_old_on_condition_failure = true;
    let e = expect_err(store.put_item(request).await, Expect::ConditionFailed, "put")?;
    ensure_eq!(e, StoreError::ConditionalCheckFailed { item: Some(original.clone()) }, "put failure with ALL_OLD");
    let mut request = UpdateItem::new(&t, key("p", "s"), "SET v = :v").condition("v = :v").value(":v", 9);
    request.return_old_on_condition_failure = true;
    let e = expect_err(store.update_item(request).await, Expect::ConditionFailed, "update")?;
    ensure_eq!(e, StoreError::ConditionalCheckFailed { item: Some(original.clone()) }, "update failure with ALL_OLD");
    // Without the flag, no item comes back.
    let e = expect_err(
        store.delete_item(DeleteItem::new(&t, key("p", "s")).condition("attribute_not_exists(v)")).await,
        Expect::ConditionFailed,
        "delete",
    )?;
    ensure_eq!(e, StoreError::ConditionalCheckFailed { item: None }, "delete failure without ALL_OLD");
    Ok(())
}

/// Every `ReturnValues` option on put, update and delete.
pub(crate) async fn return_values(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let v1 = item! { "pk" => "p", "sk" => "s", "a" => 1, "b" => "x" };
    let out = store
        .put_item(PutItem::new(&t, v1.clone()).return_values(ReturnValues::AllOld))
        .await
        .or_fail("put ALL_OLD of a new item")?;
    ensure_eq!(out.attributes, None, "put ALL_OLD of a new item");
    let v2 = item! { "pk" => "p", "sk" => "s", "a" => 2, "b" => "x" };
    let out = store
        .put_item(PutItem::new(&t, v2.clone()).return_values(ReturnValues::AllOld))
        .await
        .or_fail("put ALL_OLD over an item")?;
    ensure_eq!(out.attributes, Some(v1), "put ALL_OLD over an item");
    let out = store.put_item(PutItem::new(&t, v2.clone())).await.or_fail("put NONE")?;
    ensure_eq!(out.attributes, None, "put NONE");

    // From v2 = {a: 2, b: "x"}: a changes, c is added, b is removed.
    let update = |rv| {
        UpdateItem::new(&t, key("p", "s"), "SET a = a + :one, c = :c REMOVE b")
            .value(":one", 1)
            .value(":c", "new")
            .return_values(rv)
    };
    let reset = || put(store, &t, v2.clone());
    let cases = [
        (ReturnValues::None, None),
        (ReturnValues::AllOld, Some(v2.clone())),
        (ReturnValues::AllNew, Some(item! { "pk" => "p", "sk" => "s", "a" => 3, "c" => "new" })),
        // UPDATED_OLD: the updated attributes that existed before (c did not).
        (ReturnValues::UpdatedOld, Some(item! { "a" => 2, "b" => "x" })),
        // UPDATED_NEW: the updated attributes that exist after (b does not).
        (ReturnValues::UpdatedNew, Some(item! { "a" => 3, "c" => "new" })),
    ];
    for (rv, want) in cases {
        reset().await?;
        let out = store.update_item(update(rv)).await.or_fail(&format!("update {rv:?}"))?;
        ensure_eq!(out.attributes, want, "update {rv:?}");
    }

    // ALL_OLD of an update that creates the item returns nothing.
    let out = store
        .update_item(
            UpdateItem::new(&t, key("p", "new"), "SET a = :a").value(":a", 1).return_values(ReturnValues::AllOld),
        )
        .await
        .or_fail("update ALL_OLD creating an item")?;
    ensure_eq!(out.attributes, None, "update ALL_OLD creating an item");

    reset().await?;
    let out = store
        .delete_item(DeleteItem::new(&t, key("p", "s")).return_values(ReturnValues::AllOld))
        .await
        .or_fail("delete ALL_OLD")?;
    ensure_eq!(out.attributes, Some(v2.clone()), "delete ALL_OLD");

    // Put and delete accept only NONE and ALL_OLD.
    for rv in [ReturnValues::AllNew, ReturnValues::UpdatedOld, ReturnValues::UpdatedNew] {
        expect_err(
            store.put_item(PutItem::new(&t, v2.clone()).return_values(rv)).await,
            Expect::Validation,
            &format!("put with {rv:?}"),
        )?;
        expect_err(
            store.delete_item(DeleteItem::new(&t, key("p", "s")).return_values(rv)).await,
            Expect::Validation,
            &format!("delete with {rv:?}"),
        )?;
    }
    Ok(())
}

/// Condition expressions evaluate like filters, against the item before the write; on an
/// absent item every attribute is missing. Each row: a condition, and whether the write applies.
pub(crate) async fn condition_expressions(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let mut m = BTreeMap::new();
    m.insert("lvl".to_string(), AttributeValue::from(3));
    let existing = item! {
        "pk" => "p", "sk" => "s", "v" => 5, "name_" => "alpha",
        "tags" => AttributeValue::Ss(BTreeSet::from(["x".to_string(), "y".to_string()])),
        "m" => AttributeValue::M(m),
    };
    type Vals = &'static [(&'static str, fn() -> AttributeValue)];
    let rows: &[(&str, &str, Vals, bool)] = &[
        ("s", "v = :five", &[(":five", || 5.into())], true),
        ("s", "v <> :five", &[(":five", || 5.into())], false),
        ("s", "v BETWEEN :a AND :b", &[(":a", || 1.into()), (":b", || 5.into())], true),
        ("s", "v IN (:a, :b)", &[(":a", || 1.into()), (":b", || 2.into())], false),
        ("s", "begins_with(name_, :p)", &[(":p", || "al".into())], true),
        ("s", "contains(tags, :e)", &[(":e", || "y".into())], true),
        ("s", "size(tags) = :two", &[(":two", || 2.into())], true),
        ("s", "m.lvl > :two", &[(":two", || 2.into())], true),
        ("s", "attribute_type(v, :n)", &[(":n", || "N".into())], true),
        ("s", "NOT (v = :five) OR attribute_not_exists(name_)", &[(":five", || 5.into())], false),
        ("s", "attribute_exists(v) AND attribute_not_exists(w)", &[], true),
        ("absent", "attribute_not_exists(pk)", &[], true),
        ("absent", "attribute_exists(pk)", &[], false),
        ("absent", "v = :five", &[(":five", || 5.into())], false),
    ];
    let mut failures = Vec::new();
    for (i, (sk, condition, values, applies)) in rows.iter().enumerate() {
        put(store, &t, existing.clone()).await?;
        let _ = store.delete_item(DeleteItem::new(&t, key("p", "absent"))).await;
        let mut request =
            UpdateItem::new(&t, key("p", *sk), "SET touched = :row").condition(*condition).value(":row", i);
        for (p, v) in values.iter() {
            request = request.value(*p, v());
        }
        let result = store.update_item(request).await;
        let touched = get(store, &t, key("p", *sk)).await?.and_then(|item| item.get("touched").cloned());
        match (result, applies) {
            (Ok(_), true) if touched == Some(AttributeValue::from(i)) => {}
            (Err(e), false) if e.is_condition_failed() && touched.is_none() => {}
            (result, _) => failures.push(format!(
                "{condition} on {sk}: got {}, touched {touched:?}; want the write {}",
                super::support::short(&result),
                if *applies { "applied" } else { "refused" }
            )),
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) }
}
