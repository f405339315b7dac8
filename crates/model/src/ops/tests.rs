//! Request-building and behaviour tests of the typed operations.

use std::sync::Arc;

use expect_test::{Expect, expect};
use store::{ExpressionAttributes, item};

use super::{query::*, table::*};
use crate::expr::Update;
use crate::sample;
use store::{AttributeValue, Store};

/// A table on an embedded store that the request-building tests never call.
fn table() -> (tempfile::TempDir, Table) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(store_embedded::EmbeddedStore::open(dir.path()).unwrap());
    let table = Table::new(store, sample::shop("shop")).with_clock(|| 1_733_063_400_000);
    (dir, table)
}

fn attrs(a: &ExpressionAttributes) -> String {
    let names: Vec<String> = a.names.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let values: Vec<String> = a.values.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{} | {}", names.join(" "), values.join(" "))
}

fn check_query(q: QueryBuilder, expect: Expect) {
    let shown = match q.request() {
        Ok(r) => format!(
            "{} | key {} | filter {} | {}",
            r.index.as_deref().unwrap_or("table"),
            r.key_condition,
            r.filter.as_deref().unwrap_or("-"),
            attrs(&r.attrs)
        ),
        Err(e) => format!("error: {e}"),
    };
    expect.assert_eq(&shown);
}

fn check_update(entity: &str, key: store::Item, u: Update, upsert: bool, expect: Expect) {
    let (_dir, t) = table();
    let shown = match t.prepare_update(entity, &key, &u, None, upsert) {
        Ok(r) => format!("{} | if {} | {}", r.update, r.condition.as_deref().unwrap_or("-"), attrs(&r.attrs)),
        Err(e) => format!("error: {e}"),
    };
    expect.assert_eq(&shown);
}

#[test]
fn query_requests() {
    let (_dir, t) = table();
    let c1 = || item! { "customer_id" => "c1" };
    check_query(
        t.query("Order").key(c1()),
        expect![[
            r#"table | key #pk = :v0 AND begins_with(#sk, :v1) | filter #_0 = :v2 | #_0=_et #pk=pk #sk=sk | :v0=S("CUSTOMER#c1") :v1=S("ORDER#") :v2=S("Order")"#
        ]],
    );
    check_query(
        t.query("Order").key(item! { "customer_id" => "c1", "order_id" => "o1" }),
        expect![[
            r#"table | key #pk = :v0 AND #sk = :v1 | filter #_0 = :v2 | #_0=_et #pk=pk #sk=sk | :v0=S("CUSTOMER#c1") :v1=S("ORDER#o1") :v2=S("Order")"#
        ]],
    );
    check_query(
        t.query("Customer").index("gsi1").key(item! { "email" => "a#b" }),
        expect![[
            r#"gsi1 | key #gsi1pk = :v0 AND #gsi1sk = :v1 | filter #_0 = :v2 | #_0=_et #gsi1pk=gsi1pk #gsi1sk=gsi1sk | :v0=S("EMAIL#a%23b") :v1=S("CUSTOMER") :v2=S("Customer")"#
        ]],
    );
    check_query(
        t.query("Order").index("lsi1").key(item! { "customer_id" => "c1", "status" => "PAID" }),
        expect![[
            r#"lsi1 | key #pk = :v0 AND begins_with(#lsi1sk, :v1) | filter - | #lsi1sk=lsi1sk #pk=pk | :v0=S("CUSTOMER#c1") :v1=S("STATUS#PAID#")"#
        ]],
    );
    check_query(
        t.collection(&["Order", "OrderLine"]).index("gsi1").key(item! { "order_id" => "o1" }),
        expect![[
            r#"gsi1 | key #gsi1pk = :v0 AND #gsi1sk BETWEEN :v1 AND :v2 | filter #_0 IN (:v3, :v4) | #_0=_et #gsi1pk=gsi1pk #gsi1sk=gsi1sk | :v0=S("ORDER#o1") :v1=S("LINE#") :v2=S("ORDER") :v3=S("Order") :v4=S("OrderLine")"#
        ]],
    );
    check_query(
        t.query("Order").key(c1()).filter(crate::expr::attr("total").gt(5)).descending(),
        expect![[
            r#"table | key #pk = :v0 AND begins_with(#sk, :v1) | filter #_0 = :v2 AND #total > :v3 | #_0=_et #pk=pk #sk=sk #total=total | :v0=S("CUSTOMER#c1") :v1=S("ORDER#") :v2=S("Order") :v3=N(Number(5))"#
        ]],
    );
    check_query(
        t.query("Order").key(item! {}),
        expect!["error: Order: field `customer_id` is needed for the key on `table`"],
    );
    check_query(t.query("Product").index("lsi1"), expect!["error: entity `Product` has no key on index `lsi1`"]);
    check_query(
        t.collection(&["Order", "Product"]).key(c1()),
        expect!["error: invalid query: `Order` and `Product` do not share a partition on `table` for these fields"],
    );
    check_query(
        t.query("Order").key(c1()).after(item! { "order_id" => "o1" }).key(item! { "x" => 1 }),
        expect![[
            r#"table | key #pk = :v0 AND #sk > :v1 | filter #_0 = :v2 | #_0=_et #pk=pk #sk=sk | :v0=S("CUSTOMER#c1") :v1=S("ORDER#o1") :v2=S("Order")"#
        ]],
    );
}

#[test]
fn range_bounds_pad_partial_keys() {
    let (_dir, t) = table();
    let q = t
        .query("Order")
        .index("gsi2")
        .key(item! { "status" => "PAID" })
        .between(item! { "created_at" => 5 }, item! { "created_at" => 9 })
        .request()
        .unwrap();
    let hi = q.attrs.values[":v2"].as_s().unwrap().to_string();
    assert_eq!(q.attrs.values[":v1"], AttributeValue::from("ORDER#0000000000005#"));
    assert!(hi.starts_with("ORDER#0000000000009#\u{10FFFF}"));
    assert!(hi.len() <= store::limits::MAX_SORT_KEY_BYTES);
}

#[test]
fn update_requests() {
    let key = || item! { "customer_id" => "c1", "order_id" => "o1" };
    check_update(
        "Order",
        key(),
        Update::new().set("note", "hi"),
        false,
        expect![[
            r#"SET #note = :v0, #updated_at = :v1 | if attribute_exists(#pk) | #note=note #pk=pk #updated_at=updated_at | :v0=S("hi") :v1=N(Number(1733063400000))"#
        ]],
    );
    check_update(
        "Order",
        key(),
        Update::new().set("status", "PAID"),
        false,
        expect![[
            r#"SET #status = :v0, #updated_at = :v1, #gsi2pk = :v2, #lsi1sk = :v3 | if attribute_exists(#pk) | #gsi2pk=gsi2pk #lsi1sk=lsi1sk #pk=pk #status=status #updated_at=updated_at | :v0=S("PAID") :v1=N(Number(1733063400000)) :v2=S("STATUS#PAID") :v3=S("STATUS#PAID#o1")"#
        ]],
    );
    check_update(
        "Product",
        item! { "product_id" => "p" },
        Update::new().remove("category"),
        false,
        expect![
            "SET #updated_at = :v0 REMOVE #category, #gsi2pk, #gsi2sk | if attribute_exists(#pk) | #category=category #gsi2pk=gsi2pk #gsi2sk=gsi2sk #pk=pk #updated_at=updated_at | :v0=N(Number(1733063400000))"
        ],
    );
    check_update(
        "Cart",
        item! { "customer_id" => "c1" },
        Update::new().append("lines", vec!["x".into()]),
        true,
        expect![[
            r#"SET #lines = list_append(if_not_exists(#lines, :v0), :v1), #updated_at = :v2, #expires_at = :v3, #_0 = :v4, #customer_id = :v5, #created_at = if_not_exists(#created_at, :v2) | if - | #_0=_et #created_at=created_at #customer_id=customer_id #expires_at=expires_at #lines=lines #updated_at=updated_at | :v0=L([]) :v1=L([S("x")]) :v2=N(Number(1733063400000)) :v3=N(Number(1733668200)) :v4=S("Cart") :v5=S("c1")"#
        ]],
    );
    check_update(
        "Order",
        key(),
        Update::new().set("total", "x"),
        false,
        expect!["error: Order: attribute `total` must be N, not S"],
    );
    check_update(
        "Order",
        key(),
        Update::new().set("gsi1pk", "x"),
        false,
        expect!["error: Order: attribute `gsi1pk` is computed by the model and cannot be written"],
    );
    check_update(
        "Order",
        item! { "customer_id" => "c1" },
        Update::new(),
        false,
        expect!["error: Order: field `order_id` is needed for the key on `table`"],
    );
    check_update(
        "Order",
        key(),
        Update::new().remove("customer_id"),
        false,
        expect!["error: Order: `customer_id` is part of the table key; write a new item instead"],
    );
}

#[test]
fn put_requests() {
    let (_dir, t) = table();
    let r = t
        .prepare_put("Product", item! { "product_id" => "p", "name" => "n", "price" => 1 }, PutMode::Create, None)
        .unwrap();
    expect!["attribute_not_exists(#pk) | #pk=pk | "].assert_eq(&format!(
        "{} | {}",
        r.condition.unwrap(),
        attrs(&r.attrs)
    ));
    let keys: Vec<&String> = r.item.keys().collect();
    expect![[r#"["_et", "created_at", "name", "pk", "price", "product_id", "sk", "updated_at"]"#]]
        .assert_eq(&format!("{keys:?}"));
    let r = t
        .prepare_put(
            "Product",
            item! { "product_id" => "p", "name" => "n", "price" => 1 },
            PutMode::Replace,
            Some(&crate::expr::attr("price").lt(5)),
        )
        .unwrap();
    expect!["attribute_exists(#pk) AND #price < :v0 | #pk=pk #price=price | :v0=N(Number(5))"].assert_eq(&format!(
        "{} | {}",
        r.condition.unwrap(),
        attrs(&r.attrs)
    ));
    let err = t
        .prepare_put("Order", item! { "customer_id" => "c", "created_at" => store::n("1.5") }, PutMode::Put, None)
        .unwrap_err();
    expect!["Order: field `created_at`: number 1.5 cannot be part of a key (integers only, 0 to 13 digits)"]
        .assert_eq(&err.to_string());
}
