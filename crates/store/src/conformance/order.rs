//! Numbers, strings and binaries as keys: normalisation, exactness, and DynamoDB's order
//! (numbers numerically, strings by UTF-8 bytes, binaries by unsigned bytes).

use super::support::{Ctx, Expect, OrFail, Outcome, expect_err, get, ids, put_all};
use crate::{
    AttributeValue, GetItem, Item, KeySchema, PutItem, Query, ScalarType, Scan, TableDefinition, UpdateItem, item, n,
};

fn nkey(sk: AttributeValue) -> Item {
    item! { "pk" => "P", "sk" => sk }
}

async fn table_with_sort(ctx: &Ctx, ty: ScalarType) -> Result<String, String> {
    ctx.create(TableDefinition::new(ctx.table(), KeySchema::composite("pk", ScalarType::S, "sk", ty))).await
}

/// A number is one value however it is written: `1.5E2` is the key `150`, `0042` reads back as 42.
pub(crate) async fn numbers_normalised(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = table_with_sort(&ctx, ScalarType::N).await?;
    store
        .put_item(PutItem::new(
            &t,
            item! { "pk" => "P", "sk" => n("1.5E2"), "a" => n("0042"), "z" => n("-0"), "d" => n("1.2300") },
        ))
        .await
        .or_fail("put 1.5E2")?;
    let got = get(store, &t, nkey(n("150"))).await?;
    let Some(got) = got else {
        return Err("get 150 after putting 1.5E2: no item".into());
    };
    for (attr, want) in [("sk", "150"), ("a", "42"), ("z", "0"), ("d", "1.23")] {
        let text = got.get(attr).and_then(AttributeValue::as_n).map(ToString::to_string);
        ensure_eq!(text.as_deref(), Some(want), "attribute {attr} read back");
    }
    let out = store
        .query(Query::new(&t, "pk = :p AND sk = :v").value(":p", "P").value(":v", n("150.000")))
        .await
        .or_fail("query sk = 150.000")?;
    ensure_eq!(out.count, 1, "query sk = 150.000 finds the item stored as 1.5E2");
    // Writing 150 replaces the item stored as 1.5E2: one key, one item.
    store.put_item(PutItem::new(&t, item! { "pk" => "P", "sk" => n("15E1"), "a" => 1 })).await.or_fail("put 15E1")?;
    let out = store.scan(Scan::new(&t)).await.or_fail("scan")?;
    ensure_eq!(out.count, 1, "items after writing 1.5E2 and 15E1");
    // Conditions compare numbers numerically too.
    store
        .update_item(
            UpdateItem::new(&t, nkey(n("150")), "SET b = :one")
                .condition("a = :a")
                .value(":one", 1)
                .value(":a", n("1.000")),
        )
        .await
        .or_fail("condition a = 1.000 on a = 1")?;
    // A partition key too.
    let t2 = ctx.create(TableDefinition::new(ctx.table_named("hash"), KeySchema::hash("pk", ScalarType::N))).await?;
    store.put_item(PutItem::new(&t2, item! { "pk" => n("-0.50"), "v" => 1 })).await.or_fail("put pk -0.50")?;
    let got =
        store.get_item(GetItem::new(&t2, item! { "pk" => n("-5E-1") }).consistent()).await.or_fail("get pk -5E-1")?;
    ensure!(got.item.is_some(), "get -5E-1 after putting -0.50: no item");
    Ok(())
}

/// Number sort keys sort numerically across signs, magnitudes and DynamoDB's whole range.
pub(crate) async fn numbers_order(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = table_with_sort(&ctx, ScalarType::N).await?;
    let sorted = [
        "-9.9999999999999999999999999999999999999E+125",
        "-1E+100",
        "-100",
        "-10",
        "-9.99",
        "-2.5",
        "-0.001",
        "-1E-130",
        "0",
        "1E-130",
        "0.001",
        "0.0011",
        "1",
        "1.5",
        "9.99",
        "10",
        "100",
        "150",
        "1E+100",
        "9.9999999999999999999999999999999999999E+125",
    ];
    // Written in a scrambled order, so that insertion order cannot pass for key order.
    let items = (0..sorted.len())
        .map(|i| (i * 7) % sorted.len())
        .map(|i| item! { "pk" => "P", "sk" => n(sorted[i]), "id" => i as i64 })
        .collect();
    put_all(store, &t, items).await?;
    let want: Vec<String> = (0..sorted.len()).map(|i| i.to_string()).collect();
    let out = store.query(Query::new(&t, "pk = :p").value(":p", "P")).await.or_fail("query")?;
    ensure_eq!(ids(&out.items), want, "ascending order (ids are ranks)");
    let out = store.query(Query::new(&t, "pk = :p").value(":p", "P").descending()).await.or_fail("descending query")?;
    let mut rev = want.clone();
    rev.reverse();
    ensure_eq!(ids(&out.items), rev, "descending order");
    let out = store
        .query(Query::new(&t, "pk = :p AND sk < :zero").value(":p", "P").value(":zero", 0))
        .await
        .or_fail("sk < 0")?;
    ensure_eq!(ids(&out.items), want[..8].to_vec(), "sk < 0");
    // 10 > 9.99 although "10" < "9.99" as text.
    let out = store
        .query(Query::new(&t, "pk = :p AND sk > :v").value(":p", "P").value(":v", n("9.99")))
        .await
        .or_fail("sk > 9.99")?;
    ensure_eq!(ids(&out.items), want[15..].to_vec(), "sk > 9.99");
    Ok(())
}

/// 38 significant digits are kept exactly, and arithmetic is exact decimal arithmetic.
pub(crate) async fn numbers_exact(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = table_with_sort(&ctx, ScalarType::N).await?;
    let big = "12345678901234567890123456789012345678";
    let small = "0.12345678901234567890123456789012345678";
    store
        .put_item(PutItem::new(
            &t,
            item! { "pk" => "P", "sk" => n(big), "big" => n(big), "small" => n(small), "neg" => n(&format!("-{big}")) },
        ))
        .await
        .or_fail("put 38-digit numbers")?;
    let got = get(store, &t, nkey(n(big))).await?.ok_or("38-digit key not found")?;
    ensure_eq!(got.get("big"), Some(&n(big)), "38-digit integer");
    ensure_eq!(got.get("small"), Some(&n(small)), "38-digit fraction");
    ensure_eq!(got.get("neg"), Some(&n(&format!("-{big}"))), "38-digit negative");

    // ADD and SET arithmetic at full precision.
    store
        .update_item(UpdateItem::new(&t, nkey(n(big)), "ADD big :one SET neg = neg - :one").value(":one", 1))
        .await
        .or_fail("ADD 1 to a 38-digit number")?;
    let got = get(store, &t, nkey(n(big))).await?.ok_or("item vanished")?;
    ensure_eq!(got.get("big"), Some(&n("12345678901234567890123456789012345679")), "38 digits + 1");
    ensure_eq!(got.get("neg"), Some(&n("-12345678901234567890123456789012345679")), "-38 digits - 1");

    // 0.1 + 0.2 is 0.3, not 0.30000000000000004.
    for _ in 0..3 {
        store
            .update_item(UpdateItem::new(&t, nkey(n("1")), "ADD c :tenth").value(":tenth", n("0.1")))
            .await
            .or_fail("ADD 0.1")?;
    }
    let got = get(store, &t, nkey(n("1"))).await?.ok_or("counter item not created")?;
    ensure_eq!(got.get("c"), Some(&n("0.3")), "0.1 + 0.1 + 0.1");
    store
        .update_item(
            UpdateItem::new(&t, nkey(n("1")), "SET d = :a + :b").value(":a", n("1E+20")).value(":b", n("1E-10")),
        )
        .await
        .or_fail("SET 1E+20 + 1E-10")?;
    let got = get(store, &t, nkey(n("1"))).await?.ok_or("item vanished")?;
    ensure_eq!(got.get("d"), Some(&n("100000000000000000000.0000000001")), "1E+20 + 1E-10");

    // A result beyond DynamoDB's range (above 9.99…E+125) is a validation error, and
    // nothing changes. (Whether a result of 39 significant digits is rounded or rejected is
    // not documented, so the suite does not test it.)
    store
        .update_item(UpdateItem::new(&t, nkey(n("1")), "SET huge = :h").value(":h", n("9E+125")))
        .await
        .or_fail("SET 9E+125")?;
    expect_err(
        store.update_item(UpdateItem::new(&t, nkey(n("1")), "ADD huge :h").value(":h", n("9E+125"))).await,
        Expect::Validation,
        "ADD overflowing the number range",
    )?;
    expect_err(
        store.update_item(UpdateItem::new(&t, nkey(n("1")), "SET huge = huge + :h").value(":h", n("9E+125"))).await,
        Expect::Validation,
        "SET + overflowing the number range",
    )?;
    let got = get(store, &t, nkey(n("1"))).await?.ok_or("item vanished")?;
    ensure_eq!(got.get("huge"), Some(&n("9E+125")), "after the rejected additions");
    Ok(())
}

/// Strings sort by UTF-8 bytes (not UTF-16 units, not locale): "Z" < "a" < "é" < "｡" < "😀".
pub(crate) async fn string_order(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = table_with_sort(&ctx, ScalarType::S).await?;
    // U+FF61 sorts before U+1F600 in UTF-8 but after it in UTF-16.
    let sorted = ["0", "A", "Z", "a", "ab", "b", "z", "~", "\u{7f}", "é", "\u{FF61}", "😀"];
    let items = sorted
        .iter()
        .rev()
        .enumerate()
        .map(|(i, s)| item! { "pk" => "P", "sk" => *s, "id" => (sorted.len() - 1 - i) as i64 })
        .collect();
    put_all(store, &t, items).await?;
    let want: Vec<String> = (0..sorted.len()).map(|i| i.to_string()).collect();
    let out = store.query(Query::new(&t, "pk = :p").value(":p", "P")).await.or_fail("query")?;
    ensure_eq!(ids(&out.items), want, "ascending order (ids are ranks)");
    let out =
        store.query(Query::new(&t, "pk = :p AND sk > :v").value(":p", "P").value(":v", "é")).await.or_fail("sk > é")?;
    ensure_eq!(ids(&out.items), want[10..].to_vec(), "sk > é");
    Ok(())
}

/// Binaries sort as unsigned bytes, shorter prefix first.
pub(crate) async fn binary_order(ctx: Ctx) -> Outcome {
    let store = &*ctx.store;
    let t = table_with_sort(&ctx, ScalarType::B).await?;
    let sorted: [&[u8]; 9] =
        [&[0x00], &[0x00, 0x00], &[0x01], &[0x01, 0xff], &[0x7f], &[0x80], &[0x80, 0x00], &[0xfe, 0xff], &[0xff]];
    let items = sorted
        .iter()
        .enumerate()
        .rev()
        .map(|(i, b)| item! { "pk" => "P", "sk" => b.to_vec(), "id" => i as i64 })
        .collect();
    put_all(store, &t, items).await?;
    let want: Vec<String> = (0..sorted.len()).map(|i| i.to_string()).collect();
    let out = store.query(Query::new(&t, "pk = :p").value(":p", "P")).await.or_fail("query")?;
    ensure_eq!(ids(&out.items), want, "ascending order (ids are ranks)");
    let out = store
        .query(
            Query::new(&t, "pk = :p AND sk BETWEEN :a AND :b")
                .value(":p", "P")
                .value(":a", vec![0x7fu8])
                .value(":b", vec![0x80u8, 0x00]),
        )
        .await
        .or_fail("BETWEEN 7f AND 8000")?;
    ensure_eq!(ids(&out.items), want[4..7].to_vec(), "BETWEEN 0x7f AND 0x8000");
    Ok(())
}
