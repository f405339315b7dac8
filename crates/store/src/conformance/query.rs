//! `Query` and `Scan`: every key-condition operator on the table, a GSI and an LSI in both
//! directions for each key type; `Limit` before the filter; filters; 1 MB pages resumed by
//! `LastEvaluatedKey`; parallel scan segments.

use std::collections::BTreeSet;

use super::support::{Ctx, Expect, OrFail, Outcome, expect_err, ids, key, put_all, query_all, scan_all, sized};
use crate::{
    AttributeValue, Item, KeyAttribute, KeySchema, Projection, Query, ScalarType, Scan, Select, TableDefinition, item,
    n,
};

/// Five sort-key values of one type, strictly ascending in DynamoDB's order, and a
/// `begins_with` prefix matching exactly values 1 and 2 (`None` for numbers).
struct SortValues {
    ty: ScalarType,
    values: [AttributeValue; 5],
    prefix: Option<AttributeValue>,
}

/// One key-condition row: the sort-key part (with `{k}` for the key name), its operands
/// (indexes into the values, or the prefix), and the value indexes it selects, ascending.
struct Cond {
    op: &'static str,
    text: &'static str,
    operands: &'static [usize],
    selects: &'static [usize],
}

const CONDS: &[Cond] = &[
    Cond { op: "none", text: "", operands: &[], selects: &[0, 1, 2, 3, 4] },
    Cond { op: "=", text: "{k} = :a", operands: &[2], selects: &[2] },
    Cond { op: "<", text: "{k} < :a", operands: &[2], selects: &[0, 1] },
    Cond { op: "<=", text: "{k} <= :a", operands: &[2], selects: &[0, 1, 2] },
    Cond { op: ">", text: "{k} > :a", operands: &[2], selects: &[3, 4] },
    Cond { op: ">=", text: "{k} >= :a", operands: &[2], selects: &[2, 3, 4] },
    Cond { op: "BETWEEN", text: "{k} BETWEEN :a AND :b", operands: &[1, 3], selects: &[1, 2, 3] },
    Cond { op: "BETWEEN (one value)", text: "{k} BETWEEN :a AND :b", operands: &[4, 4], selects: &[4] },
    Cond { op: "= (no match)", text: "{k} = :a", operands: &[], selects: &[] },
    Cond { op: "begins_with", text: "begins_with({k}, :a)", operands: &[], selects: &[1, 2] },
];

/// Which key an access path sorts by, and which item holds value `v` of that key.
struct Path {
    label: &'static str,
    index: Option<&'static str>,
    pk: &'static str,
    pk_value: &'static str,
    /// The sort key as written in the condition (a `#placeholder` for the LSI, to cover names).
    sk_ref: &'static str,
    sk_name: &'static str,
    /// Item id holding value index `v`.
    holder: fn(usize) -> usize,
}

const PATHS: &[Path] = &[
    Path { label: "table", index: None, pk: "pk", pk_value: "P", sk_ref: "sk", sk_name: "sk", holder: |v| v },
    Path { label: "lsi", index: Some("lsi"), pk: "pk", pk_value: "P", sk_ref: "#k", sk_name: "lsk", holder: |v| 4 - v },
    Path {
        label: "gsi",
        index: Some("gsi"),
        pk: "gpk",
        pk_value: "G",
        sk_ref: "gsk",
        sk_name: "gsk",
        holder: |v| (v + 2) % 5,
    },
];

async fn key_conditions(ctx: Ctx, sv: SortValues) -> Outcome {
    let store = &*ctx.store;
    let t = ctx
        .create(
            TableDefinition::new(ctx.table(), KeySchema::composite("pk", ScalarType::S, "sk", sv.ty))
                .lsi("lsi", KeyAttribute::new("lsk", sv.ty), Projection::All)
                .gsi("gsi", KeySchema::composite("gpk", ScalarType::S, "gsk", sv.ty), Projection::All),
        )
        .await?;
    // Item i has sk = values[i], lsk = values[4 - i], gsk = values[(i + 3) % 5], so each access
    // path sees the items in a different order. Items of partitions Q / H hold the same key
    // values and must never be returned.
    let mut items = Vec::new();
    for (pk, gpk, prefix) in [("P", "G", ""), ("Q", "H", "other-")] {
        for i in 0..5 {
            items.push(item! {
                "pk" => pk,
                "sk" => sv.values[i].clone(),
                "lsk" => sv.values[4 - i].clone(),
                "gpk" => gpk,
                "gsk" => sv.values[(i + 3) % 5].clone(),
                "id" => format!("{prefix}{i}"),
            });
        }
    }
    put_all(store, &t, items).await?;

    let mut failures = Vec::new();
    for path in PATHS {
        for cond in CONDS {
            let mut query = Query::new(
                &t,
                if cond.text.is_empty() {
                    format!("{} = :p", path.pk)
                } else {
                    format!("{} = :p AND {}", path.pk, cond.text.replace("{k}", path.sk_ref))
                },
            )
            .value(":p", path.pk_value);
            if let Some(index) = path.index {
                query = query.index(index);
            }
            if path.sk_ref.starts_with('#') && !cond.text.is_empty() {
                query = query.name(path.sk_ref, path.sk_name);
            }
            match (cond.op, &sv.prefix) {
                ("begins_with", None) => {
                    // begins_with is not defined on numbers: a validation error.
                    let q = query.value(":a", sv.values[1].clone());
                    if let Err(reason) = expect_err(
                        store.query(q).await,
                        Expect::Validation,
                        &format!("{} begins_with on a number", path.label),
                    ) {
                        failures.push(reason);
                    }
                    continue;
                }
                ("begins_with", Some(prefix)) => query = query.value(":a", prefix.clone()),
                ("= (no match)", _) => query = query.value(":a", no_match(sv.ty)),
                _ => {
                    for (slot, &v) in [":a", ":b"].iter().zip(cond.operands) {
                        query = query.value(*slot, sv.values[v].clone());
                    }
                }
            }
            let want: Vec<String> = cond.selects.iter().map(|&v| (path.holder)(v).to_string()).collect();
            for descending in [false, true] {
                let q = if descending { query.clone().descending() } else { query.clone() };
                let mut want = want.clone();
                if descending {
                    want.reverse();
                }
                let label =
                    format!("{} {} {}", path.label, cond.op, if descending { "descending" } else { "ascending" });
                match query_all(store, q).await {
                    Ok((got, _)) if ids(&got) == want => {}
                    Ok((got, _)) => failures.push(format!("{label}: got ids {:?}, want {want:?}", ids(&got))),
                    Err(e) => failures.push(format!("{label}: {e}")),
                }
            }
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) }
}

/// A value of type `ty` that no item holds.
fn no_match(ty: ScalarType) -> AttributeValue {
    match ty {
        ScalarType::S => "absent".into(),
        ScalarType::N => n("7.25"),
        ScalarType::B => vec![0x01, 0x01].into(),
    }
}

/// String sort keys: byte order, and `begins_with`.
pub(crate) async fn key_conditions_s(ctx: Ctx) -> Outcome {
    key_conditions(
        ctx,
        SortValues {
            ty: ScalarType::S,
            values: ["A".into(), "a".into(), "ab".into(), "b".into(), "é".into()],
            prefix: Some("a".into()),
        },
    )
    .await
}

/// Number sort keys: numeric order, negatives and decimals; `begins_with` is rejected.
pub(crate) async fn key_conditions_n(ctx: Ctx) -> Outcome {
    key_conditions(
        ctx,
        SortValues { ty: ScalarType::N, values: [n("-2.5"), n("0"), n("10"), n("1.5E2"), n("1000")], prefix: None },
    )
    .await
}

/// Binary sort keys: unsigned byte order, prefixes, and `begins_with`.
pub(crate) async fn key_conditions_b(ctx: Ctx) -> Outcome {
    key_conditions(
        ctx,
        SortValues {
            ty: ScalarType::B,
            values: [
                vec![0x00].into(),
                vec![0x01].into(),
                vec![0x01, 0x00].into(),
                vec![0x80].into(),
                vec![0xff].into(),
            ],
            prefix: Some(vec![0x01].into()),
        },
    )
    .await
}

/// Ten items `00`..`09` in partition `P`; `odd` is true for odd numbers.
async fn ten_items(ctx: &Ctx) -> Result<String, String> {
    let t = ctx.create_composite().await?;
    let items = (0..10)
        .map(|i| item! { "pk" => "P", "sk" => format!("{i:02}"), "id" => format!("{i:02}"), "odd" => i % 2 == 1, "num" => i })
        .collect();
    put_all(&*ctx.store, &t, items).await?;
    Ok(t)
}

/// `Limit` counts items read before the filter: `ScannedCount` is the limit, `Count` what passed,
/// and `LastEvaluatedKey` is the last item read (even if filtered out).
pub(crate) async fn limit_filter(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ten_items(&ctx).await?;
    let q = Query::new(&t, "pk = :p").filter("odd = :t").value(":p", "P").value(":t", true).limit(4);
    let out = store.query(q.clone()).await.or_fail("page 1")?;
    ensure_eq!(out.scanned_count, 4, "page 1 scanned count");
    ensure_eq!(out.count, 2, "page 1 count");
    ensure_eq!(ids(&out.items), vec!["01", "03"], "page 1 items");
    ensure_eq!(out.last_evaluated_key, Some(key("P", "03")), "page 1 LastEvaluatedKey");

    let out = store.query(q.clone().start_after(out.last_evaluated_key)).await.or_fail("page 2")?;
    ensure_eq!((out.scanned_count, out.count), (4, 2), "page 2 (scanned, count)");
    ensure_eq!(ids(&out.items), vec!["05", "07"], "page 2 items");
    ensure_eq!(out.last_evaluated_key, Some(key("P", "07")), "page 2 LastEvaluatedKey");

    let out = store.query(q.clone().start_after(out.last_evaluated_key)).await.or_fail("page 3")?;
    ensure_eq!((out.scanned_count, out.count), (2, 1), "page 3 (scanned, count)");
    ensure_eq!(ids(&out.items), vec!["09"], "page 3 items");
    ensure_eq!(out.last_evaluated_key, None, "page 3 LastEvaluatedKey (fewer than Limit read)");

    // A page where the filter keeps nothing is still a page: empty, with a LastEvaluatedKey.
    let out = store
        .query(Query::new(&t, "pk = :p").filter("num > :big").value(":p", "P").value(":big", 100).limit(3))
        .await
        .or_fail("filtered-out page")?;
    ensure_eq!((out.scanned_count, out.count, out.items.len()), (3, 0, 0), "filtered-out page");
    ensure_eq!(out.last_evaluated_key, Some(key("P", "02")), "filtered-out page LastEvaluatedKey");

    // ExclusiveStartKey need not be a key that exists: reading resumes after its position.
    let out = store
        .query(Query::new(&t, "pk = :p").value(":p", "P").limit(2).start_after(Some(key("P", "045"))))
        .await
        .or_fail("start after an absent key")?;
    ensure_eq!(ids(&out.items), vec!["05", "06"], "start after the absent key 045");
    let out = store
        .query(Query::new(&t, "pk = :p").value(":p", "P").descending().limit(2).start_after(Some(key("P", "045"))))
        .await
        .or_fail("start after an absent key, descending")?;
    ensure_eq!(ids(&out.items), vec!["04", "03"], "start after the absent key 045, descending");

    // Descending with a limit: the key of the last item read going down.
    let out = store
        .query(Query::new(&t, "pk = :p").value(":p", "P").descending().limit(3))
        .await
        .or_fail("descending page")?;
    ensure_eq!(ids(&out.items), vec!["09", "08", "07"], "descending page");
    ensure_eq!(out.last_evaluated_key, Some(key("P", "07")), "descending LastEvaluatedKey");
    let out = store
        .query(Query::new(&t, "pk = :p").value(":p", "P").descending().limit(3).start_after(out.last_evaluated_key))
        .await
        .or_fail("descending page 2")?;
    ensure_eq!(ids(&out.items), vec!["06", "05", "04"], "descending page 2");

    // Without a limit, one page holds everything and there is no LastEvaluatedKey.
    let out = store
        .query(Query::new(&t, "pk = :p").filter("odd = :f").value(":p", "P").value(":f", false))
        .await
        .or_fail("unlimited query")?;
    ensure_eq!((out.scanned_count, out.count), (10, 5), "unlimited (scanned, count)");
    ensure_eq!(out.last_evaluated_key, None, "unlimited LastEvaluatedKey");

    // Limit must be at least 1.
    expect_err(store.query(Query::new(&t, "pk = :p").value(":p", "P").limit(0)).await, Expect::Validation, "Limit 0")?;
    Ok(())
}

/// The same rules on `Scan`.
pub(crate) async fn scan_limit_filter(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ten_items(&ctx).await?;
    let s = Scan::new(&t).filter("odd = :t").value(":t", true).limit(4);
    let out = store.scan(s.clone()).await.or_fail("page 1")?;
    ensure_eq!((out.scanned_count, out.count), (4, out.items.len()), "page 1 (scanned, count)");
    ensure!(out.last_evaluated_key.is_some(), "page 1 of 3 has no LastEvaluatedKey");
    ensure!(
        out.items.iter().all(|i| i.get("odd") == Some(&AttributeValue::Bool(true))),
        "the filter let through {:?}",
        ids(&out.items)
    );
    let (all, pages) = scan_all(store, s).await?;
    let mut got = ids(&all);
    got.sort();
    ensure_eq!(got, vec!["01", "03", "05", "07", "09"], "filtered scan over every page");
    ensure!(pages >= 3, "a scan with Limit 4 over 10 items took {pages} page(s)");
    Ok(())
}

/// `Select=COUNT`: counts without items, with the same Limit rules.
pub(crate) async fn select_count(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ten_items(&ctx).await?;
    let mut q = Query::new(&t, "pk = :p AND sk >= :from")
        .filter("odd = :t")
        .value(":p", "P")
        .value(":from", "02")
        .value(":t", true);
    q.select = Select::Count;
    let out = store.query(q.clone()).await.or_fail("count query")?;
    ensure_eq!((out.count, out.scanned_count, out.items.len()), (4, 8, 0), "count query (count, scanned, items)");
    let out = store.query(q.limit(3)).await.or_fail("count query with limit")?;
    ensure_eq!((out.count, out.scanned_count), (1, 3), "count query with limit 3 (count, scanned)");
    ensure!(out.last_evaluated_key.is_some(), "count query with limit: no LastEvaluatedKey");
    let mut s = Scan::new(&t);
    s.select = Select::Count;
    let out = store.scan(s).await.or_fail("count scan")?;
    ensure_eq!((out.count, out.scanned_count, out.items.len()), (10, 10, 0), "count scan");
    Ok(())
}

/// Filter (and condition) expression semantics: comparators, `IN`, `BETWEEN`, boolean logic and
/// precedence, functions, nested paths, and comparisons across types (false, not an error).
pub(crate) async fn filter_expressions(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    let mut items = Vec::new();
    // Item 1: full; item 2: other values; item 3: almost empty; item 4: a string where others have numbers.
    items.push(item! {
        "pk" => "P", "sk" => "1", "id" => "1",
        "num" => 5, "str" => "apple pie", "flag" => true,
        "tags" => AttributeValue::Ss(BTreeSet::from(["red".to_string(), "blue".to_string()])),
        "lst" => AttributeValue::L(vec!["x".into(), 2.into()]),
        "mp" => AttributeValue::M([("k".to_string(), AttributeValue::from("v"))].into()),
        "nul" => AttributeValue::Null,
    });
    items.push(item! {
        "pk" => "P", "sk" => "2", "id" => "2",
        "num" => 50, "str" => "banana", "flag" => false,
        "tags" => AttributeValue::Ss(BTreeSet::from(["green".to_string()])),
        "lst" => AttributeValue::L(vec![]),
        "mp" => AttributeValue::M([("k".to_string(), AttributeValue::from("w"))].into()),
    });
    items.push(item! { "pk" => "P", "sk" => "3", "id" => "3" });
    items.push(item! { "pk" => "P", "sk" => "4", "id" => "4", "num" => "5", "str" => "" });
    put_all(store, &t, items).await?;

    type Vals = &'static [(&'static str, fn() -> AttributeValue)];
    let rows: &[(&str, Vals, &[&str])] = &[
        ("num = :five", &[(":five", || 5.into())], &["1"]),
        ("attribute_exists(num) AND num <> :five", &[(":five", || 5.into())], &["2", "4"]),
        ("num < :ten", &[(":ten", || 10.into())], &["1"]),
        ("num <= :five", &[(":five", || 5.into())], &["1"]),
        ("num > :five", &[(":five", || 5.into())], &["2"]),
        ("num >= :five", &[(":five", || 5.into())], &["1", "2"]),
        // A number compared with a string is false, never an error (item 4's num is a string).
        ("num < :s", &[(":s", || "zzz".into())], &["4"]),
        ("num = :s", &[(":s", || "5".into())], &["4"]),
        ("num BETWEEN :a AND :b", &[(":a", || 5.into()), (":b", || 50.into())], &["1", "2"]),
        ("num IN (:a, :b)", &[(":a", || 50.into()), (":b", || 51.into())], &["2"]),
        ("str < :b", &[(":b", || "b".into())], &["1", "4"]),
        ("begins_with(str, :p)", &[(":p", || "app".into())], &["1"]),
        ("contains(str, :sub)", &[(":sub", || "nan".into())], &["2"]),
        ("contains(tags, :t)", &[(":t", || "red".into())], &["1"]),
        ("contains(lst, :e)", &[(":e", || 2.into())], &["1"]),
        ("attribute_exists(flag)", &[], &["1", "2"]),
        ("attribute_not_exists(flag)", &[], &["3", "4"]),
        ("attribute_exists(nul)", &[], &["1"]),
        ("attribute_type(num, :t)", &[(":t", || "S".into())], &["4"]),
        ("attribute_type(tags, :t)", &[(":t", || "SS".into())], &["1", "2"]),
        ("attribute_type(nul, :t)", &[(":t", || "NULL".into())], &["1"]),
        ("size(str) > :n", &[(":n", || 6.into())], &["1"]),
        ("size(str) = :zero", &[(":zero", || 0.into())], &["4"]),
        ("size(tags) = :one", &[(":one", || 1.into())], &["2"]),
        ("size(lst) = :zero", &[(":zero", || 0.into())], &["2"]),
        ("mp.k = :v", &[(":v", || "v".into())], &["1"]),
        ("lst[0] = :x", &[(":x", || "x".into())], &["1"]),
        ("flag = :t", &[(":t", || true.into())], &["1"]),
        ("NOT flag = :t", &[(":t", || true.into())], &["2", "3", "4"]),
        ("flag = :t OR num = :fifty", &[(":t", || true.into()), (":fifty", || 50.into())], &["1", "2"]),
        // AND binds tighter than OR.
        (
            "num = :five OR num = :fifty AND flag = :f",
            &[(":fifty", || 50.into()), (":five", || 5.into()), (":f", || false.into())],
            &["1", "2"],
        ),
        (
            "(num = :five OR num = :fifty) AND flag = :f",
            &[(":fifty", || 50.into()), (":five", || 5.into()), (":f", || false.into())],
            &["2"],
        ),
        ("NOT (attribute_exists(num) AND attribute_exists(flag))", &[], &["3", "4"]),
    ];
    let mut failures = Vec::new();
    for (filter, values, want) in rows {
        let mut q = Query::new(&t, "pk = :pk").filter(*filter).value(":pk", "P");
        for (p, v) in values.iter() {
            q = q.value(*p, v());
        }
        match store.query(q).await {
            Ok(out) if ids(&out.items) == *want => {}
            Ok(out) => failures.push(format!("{filter}: got {:?}, want {want:?}", ids(&out.items))),
            Err(e) => failures.push(format!("{filter}: error {e:?}")),
        }
    }
    // A filter on a key attribute is not allowed in a Query.
    if let Err(reason) = expect_err(
        store.query(Query::new(&t, "pk = :pk").filter("sk = :s").value(":pk", "P").value(":s", "1")).await,
        Expect::Validation,
        "query filter on the sort key",
    ) {
        failures.push(reason);
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) }
}

/// About 100 KB.
const BIG_ITEM: usize = 100 * 1024;
/// 25 items of 100 KB: about 2.5 MB, three 1 MB pages.
const BIG_COUNT: usize = 25;

async fn big_items(ctx: &Ctx) -> Result<String, String> {
    let t = ctx.create_composite().await?;
    let items = (0..BIG_COUNT)
        .map(|i| sized(item! { "pk" => "P", "sk" => format!("{i:02}"), "id" => format!("{i:02}") }, BIG_ITEM))
        .collect();
    put_all(&*ctx.store, &t, items).await?;
    Ok(t)
}

/// Checks a first page of 100 KB items: partial (about 1 MB), with a LastEvaluatedKey.
fn check_first_page(out: &crate::QueryOutput) -> Outcome {
    let bytes: usize = out.items.iter().map(crate::item_size).sum();
    ensure!(
        out.last_evaluated_key.is_some(),
        "a 1 MB page of {} items ({bytes} bytes) has no LastEvaluatedKey",
        out.items.len()
    );
    // DynamoDB stops reading once it has read 1 MB: 10 or 11 items of 100 KB, never all 25.
    ensure!(
        (9..=11).contains(&out.items.len()),
        "first page holds {} items ({bytes} bytes), want about 1 MB (9 to 11 items of 100 KB)",
        out.items.len()
    );
    ensure_eq!(out.scanned_count, out.items.len(), "first page scanned count");
    Ok(())
}

fn check_all_pages(got: &[Item], mut want: Vec<String>, descending: bool) -> Outcome {
    if descending {
        want.reverse();
    }
    ensure_eq!(ids(got), want, "items over every page (each exactly once, in order)");
    Ok(())
}

/// Query pages stop at 1 MB and resume from LastEvaluatedKey, both directions.
pub(crate) async fn query_pages(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = big_items(&ctx).await?;
    let want: Vec<String> = (0..BIG_COUNT).map(|i| format!("{i:02}")).collect();
    for descending in [false, true] {
        let mut q = Query::new(&t, "pk = :p").value(":p", "P");
        if descending {
            q = q.descending();
        }
        let first = store.query(q.clone()).await.or_fail("first page")?;
        check_first_page(&first)?;
        let (all, pages) = query_all(store, q).await?;
        ensure!(pages >= 3, "2.5 MB came back in {pages} page(s)");
        check_all_pages(&all, want.clone(), descending)?;
    }
    Ok(())
}

/// Scan pages stop at 1 MB and resume from LastEvaluatedKey.
pub(crate) async fn scan_pages(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = big_items(&ctx).await?;
    let first = store.scan(Scan::new(&t)).await.or_fail("first page")?;
    check_first_page(&first)?;
    let (all, pages) = scan_all(store, Scan::new(&t)).await?;
    ensure!(pages >= 3, "2.5 MB came back in {pages} page(s)");
    // One partition: a scan returns it in sort-key order.
    check_all_pages(&all, (0..BIG_COUNT).map(|i| format!("{i:02}")).collect(), false)
}

/// With 4 segments, paged with small limits, the segments' union holds every item exactly once.
pub(crate) async fn scan_segments(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx.create_composite().await?;
    // 60 partitions of 1 or 2 items, so that every segment has work to do.
    let mut items = Vec::new();
    let mut want = Vec::new();
    for p in 0..60 {
        for s in 0..(1 + p % 2) {
            let id = format!("{p:02}-{s}");
            items.push(item! { "pk" => format!("part-{p:02}"), "sk" => s.to_string(), "id" => id.clone() });
            want.push(id);
        }
    }
    put_all(store, &t, items).await?;
    let mut got = Vec::new();
    let mut non_empty = 0;
    for segment in 0..4 {
        let (seg_items, _) = scan_all(store, Scan::new(&t).segment(segment, 4).limit(7)).await?;
        if !seg_items.is_empty() {
            non_empty += 1;
        }
        got.extend(ids(&seg_items));
    }
    got.sort();
    want.sort();
    ensure_eq!(got, want, "union of the 4 segments");
    ensure!(non_empty >= 2, "only {non_empty} of 4 segments returned items");
    // Segment must be below TotalSegments.
    expect_err(store.scan(Scan::new(&t).segment(4, 4)).await, Expect::Validation, "segment 4 of 4")?;
    Ok(())
}

/// Index pages resume correctly when many items share one index key: `LastEvaluatedKey`
/// holds the index key and the table key, and each item comes back exactly once, in
/// index-key then table-key order.
pub(crate) async fn index_pagination(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ctx
        .create(
            TableDefinition::new(ctx.table(), KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S))
                .gsi("gsi", KeySchema::composite("gpk", ScalarType::S, "gsk", ScalarType::N), Projection::All)
                .lsi("lsi", KeyAttribute::new("lsk", ScalarType::S), Projection::All),
        )
        .await?;
    // 12 items over 3 partitions; the GSI key takes only two values, the LSI sort key one per partition.
    let mut items = Vec::new();
    for p in 0..3 {
        for s in 0..4 {
            items.push(item! {
                "pk" => format!("p{p}"), "sk" => format!("s{s}"), "id" => format!("{p}{s}"),
                "gpk" => "G", "gsk" => (s % 2) as i64, "lsk" => "same",
            });
        }
    }
    put_all(store, &t, items).await?;

    let q = Query::new(&t, "gpk = :g").index("gsi").value(":g", "G").limit(5);
    let first = store.query(q.clone()).await.or_fail("first GSI page")?;
    let lek = first.last_evaluated_key.clone().ok_or("first GSI page of 5 of 12 has no LastEvaluatedKey")?;
    let mut lek_names: Vec<&str> = lek.keys().map(String::as_str).collect();
    lek_names.sort();
    ensure_eq!(lek_names, vec!["gpk", "gsk", "pk", "sk"], "attributes of a GSI LastEvaluatedKey");
    // DynamoDB does not document the order of items sharing an index key, so compare as sets,
    // and check the index-key order.
    for descending in [false, true] {
        let q = if descending { q.clone().descending() } else { q.clone() };
        let (all, pages) = query_all(store, q).await?;
        ensure!(pages >= 3, "12 items with Limit 5 came back in {pages} page(s)");
        let gsks: Vec<&AttributeValue> = all.iter().filter_map(|i| i.get("gsk")).collect();
        let mut sorted = gsks.clone();
        sorted.sort();
        if descending {
            sorted.reverse();
        }
        ensure_eq!(gsks, sorted, "GSI items in index-key order (descending: {descending})");
        let mut got = ids(&all);
        got.sort();
        let mut want: Vec<String> = (0..3).flat_map(|p| (0..4).map(move |s| format!("{p}{s}"))).collect();
        want.sort();
        ensure_eq!(got, want, "GSI items over every page (descending: {descending})");
    }

    // LSI: one partition, four items with the same LSI sort key.
    let q = Query::new(&t, "pk = :p").index("lsi").value(":p", "p1").limit(3);
    let first = store.query(q.clone()).await.or_fail("first LSI page")?;
    let lek = first.last_evaluated_key.clone().ok_or("first LSI page of 3 of 4 has no LastEvaluatedKey")?;
    let mut lek_names: Vec<&str> = lek.keys().map(String::as_str).collect();
    lek_names.sort();
    ensure_eq!(lek_names, vec!["lsk", "pk", "sk"], "attributes of an LSI LastEvaluatedKey");
    let (all, _) = query_all(store, q.limit(1)).await?;
    let mut got = ids(&all);
    got.sort();
    ensure_eq!(got, vec!["10", "11", "12", "13"], "LSI items over pages of 1");
    Ok(())
}

/// `ProjectionExpression` on query and scan: only the named attributes (keys are not added),
/// while `Count` and `ScannedCount` are unchanged.
pub(crate) async fn query_projection(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = ten_items(&ctx).await?;
    let out = store
        .query(
            Query::new(&t, "pk = :p AND sk < :s")
                .projection("id, #n")
                .name("#n", "num")
                .value(":p", "P")
                .value(":s", "02"),
        )
        .await
        .or_fail("query with projection")?;
    ensure_eq!(
        out.items,
        vec![item! { "id" => "00", "num" => 0 }, item! { "id" => "01", "num" => 1 }],
        "projected query items"
    );
    let mut s = Scan::new(&t).filter("num = :three").value(":three", 3);
    s.projection = Some("odd".into());
    let out = store.scan(s).await.or_fail("scan with projection")?;
    ensure_eq!(out.items, vec![item! { "odd" => true }], "projected scan items");
    ensure_eq!((out.count, out.scanned_count), (1, 10), "projected scan (count, scanned)");
    Ok(())
}
