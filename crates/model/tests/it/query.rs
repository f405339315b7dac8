//! Queries: key conditions from templates, ranges, pagination, limits, collections, scans.

use futures::TryStreamExt;
use model::expr::attr;
use store::{AttributeValue, item};

use crate::{Fixture, T0};

/// Creates customer `c1` with `n` orders (ids `o00`…), each with `lines` lines, one minute apart.
async fn orders(f: &Fixture, n: usize, lines: i64) {
    f.table
        .create("Customer", item! { "customer_id" => "c1", "email" => "c1@example.com", "name" => "C" })
        .await
        .unwrap();
    for i in 0..n {
        let id = format!("o{i:02}");
        f.table
            .create("Order", item! { "customer_id" => "c1", "order_id" => id.as_str(), "total" => i as i64 })
            .await
            .unwrap();
        for l in 0..lines {
            f.table
                .create(
                    "OrderLine",
                    item! { "customer_id" => "c1", "order_id" => id.as_str(), "line_no" => l, "product_id" => "p", "quantity" => 1, "price" => 2 },
                )
                .await
                .unwrap();
        }
        f.advance(60_000);
    }
}

fn ids(records: &[model::Record]) -> Vec<String> {
    records.iter().map(|r| r.string("order_id").unwrap().to_string()).collect()
}

#[tokio::test]
async fn an_entity_query_returns_only_that_entity() {
    let f = Fixture::new().await;
    orders(&f, 3, 2).await;
    let got = f.table.query("Order").key(item! { "customer_id" => "c1" }).all().await.unwrap();
    assert_eq!(ids(&got), ["o00", "o01", "o02"], "lines and the profile share the partition but are not orders");
    let lines =
        f.table.query("OrderLine").key(item! { "customer_id" => "c1", "order_id" => "o01" }).all().await.unwrap();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l.string("order_id").unwrap() == "o01"));
    let desc = f.table.query("Order").key(item! { "customer_id" => "c1" }).descending().first().await.unwrap();
    assert_eq!(desc.unwrap().string("order_id").unwrap(), "o02");
}

#[tokio::test]
async fn ranges_over_time_series_fields() {
    let f = Fixture::new().await;
    orders(&f, 5, 0).await;
    let status = item! { "status" => "PENDING" };
    let q = || f.table.query("Order").index("gsi2").key(status.clone());
    let between =
        q().between(item! { "created_at" => T0 + 60_000 }, item! { "created_at" => T0 + 180_000 }).all().await.unwrap();
    assert_eq!(ids(&between), ["o01", "o02", "o03"], "both ends included");
    let after = q().after(item! { "created_at" => T0 + 180_000 }).all().await.unwrap();
    assert_eq!(ids(&after), ["o04"]);
    let from = q().from(item! { "created_at" => T0 + 180_000 }).all().await.unwrap();
    assert_eq!(ids(&from), ["o03", "o04"]);
    let before = q().before(item! { "created_at" => T0 + 60_000 }).all().await.unwrap();
    assert_eq!(ids(&before), ["o00"]);
    let until = q().until(item! { "created_at" => T0 + 60_000 }).all().await.unwrap();
    assert_eq!(ids(&until), ["o00", "o01"]);
}

#[tokio::test]
async fn pages_follow_last_evaluated_key_and_limits_resume_exactly() {
    let f = Fixture::new().await;
    orders(&f, 7, 0).await;
    let q = || f.table.query("Order").key(item! { "customer_id" => "c1" });
    let pages: Vec<model::Page> = q().page_size(2).pages().try_collect().await.unwrap();
    let seen: Vec<String> = pages.iter().flat_map(|p| ids(&p.records)).collect();
    assert_eq!(seen, ["o00", "o01", "o02", "o03", "o04", "o05", "o06"]);
    assert!(pages.len() >= 4, "{} pages", pages.len());

    let first = q().limit(3).pages().try_collect::<Vec<_>>().await.unwrap();
    let got: Vec<String> = first.iter().flat_map(|p| ids(&p.records)).collect();
    assert_eq!(got, ["o00", "o01", "o02"]);
    let resume = first.last().unwrap().last_evaluated_key.clone();
    assert!(resume.is_some());
    let rest = q().start_after(resume).all().await.unwrap();
    assert_eq!(ids(&rest), ["o03", "o04", "o05", "o06"]);
}

#[tokio::test]
async fn filters_apply_after_the_key_condition() {
    let f = Fixture::new().await;
    orders(&f, 6, 0).await;
    let big =
        f.table.query("Order").key(item! { "customer_id" => "c1" }).filter(attr("total").ge(4)).all().await.unwrap();
    assert_eq!(ids(&big), ["o04", "o05"]);
}

#[tokio::test]
async fn a_collection_returns_several_entities_from_one_query() {
    let f = Fixture::new().await;
    orders(&f, 3, 2).await;
    f.table.reset_capacity();
    let c = f
        .table
        .collection(&["Order", "OrderLine"])
        .index("gsi1")
        .key(item! { "order_id" => "o01" })
        .collect()
        .await
        .unwrap();
    assert_eq!(c["Order"].len(), 1);
    assert_eq!(c["OrderLine"].len(), 2);
    assert_eq!(f.table.capacity().requests, 1, "one query");

    let c = f
        .table
        .collection(&["Order", "OrderLine"])
        .key(item! { "customer_id" => "c1", "order_id" => "o02" })
        .collect()
        .await
        .unwrap();
    assert_eq!(ids(&c["Order"]), ["o02"]);
    assert_eq!(ids(&c["OrderLine"]), ["o02", "o02"]);

    let everything = f
        .table
        .collection(&["Customer", "Order", "OrderLine"])
        .key(item! { "customer_id" => "c1" })
        .collect()
        .await
        .unwrap();
    assert_eq!(everything.values().map(Vec::len).collect::<Vec<_>>(), [1, 3, 6]);
}

#[tokio::test]
async fn a_keys_only_index_is_decoded_by_key_templates() {
    let f = Fixture::new().await;
    orders(&f, 2, 1).await;
    let got = f
        .table
        .query("Order")
        .index("lsi1")
        .key(item! { "customer_id" => "c1", "status" => "PENDING" })
        .all()
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|r| r.entity() == "Order" && r.get("total").is_none()), "keys only");
}

#[tokio::test]
async fn missing_key_fields_and_unknown_indexes_are_errors() {
    let f = Fixture::new().await;
    let err = f.table.query("Order").key(item! {}).all().await.unwrap_err();
    assert_eq!(err.to_string(), "Order: field `customer_id` is needed for the key on `table`");
    let err = f.table.query("Product").index("gsi1").key(item! {}).all().await.unwrap_err();
    assert_eq!(err.to_string(), "entity `Product` has no key on index `gsi1`");
}

#[tokio::test]
async fn parallel_scans_see_every_item_once() {
    let f = Fixture::new().await;
    orders(&f, 10, 1).await;
    for segments in [1, 3] {
        let mut all = f.table.scan().segments(segments).page_size(4).entity("Order").all().await.unwrap();
        all.sort_by(|a, b| a.item()["sk"].cmp(&b.item()["sk"]));
        assert_eq!(all.len(), 10, "{segments} segments");
        assert!(all.iter().all(|r| r.entity() == "Order"));
        assert_eq!(all[0].item()["_et"], AttributeValue::from("Order"));
    }
    let everything = f.table.scan().segments(2).all().await.unwrap();
    assert_eq!(everything.len(), 21);
}

#[tokio::test]
async fn projections_keep_the_keys_and_the_entity_type() {
    let f = Fixture::new().await;
    orders(&f, 2, 1).await;
    let got = f
        .table
        .query("Order")
        .key(item! { "customer_id" => "c1" })
        .projection(model::expr::Projection::of(["total"]))
        .all()
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|r| r.get("total").is_some() && r.get("note").is_none()));
    assert_eq!(ids(&got), ["o00", "o01"], "fields come back from the keys");
    let keys_only = f
        .table
        .query("Order")
        .index("lsi1")
        .key(item! { "customer_id" => "c1", "status" => "PENDING" })
        .projection(model::expr::Projection::of(["order_id"]))
        .all()
        .await
        .unwrap();
    assert_eq!(keys_only.len(), 2);
}
