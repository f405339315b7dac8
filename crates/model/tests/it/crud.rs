//! Single-item operations: what gets written, and the errors callers can rely on.

use model::expr::{Update, attr};
use model::{EntityItem, PutMode, Record, Result};
use store::{AttributeValue, Item, item};

use crate::{Fixture, T0};

#[tokio::test]
async fn create_writes_keys_generated_fields_defaults_and_entity_type() {
    let f = Fixture::new().await;
    let order = f.table.create("Order", item! { "customer_id" => "c1", "total" => 30 }).await.unwrap();
    let id = order.string("order_id").unwrap().to_string();
    assert_eq!(id.len(), 26, "a ULID");
    let stored =
        f.table.get("Order", item! { "customer_id" => "c1", "order_id" => id.as_str() }).await.unwrap().unwrap();
    assert_eq!(stored, order);
    let item = stored.item();
    assert_eq!(item["pk"], AttributeValue::from("CUSTOMER#c1"));
    assert_eq!(item["sk"], AttributeValue::from(format!("ORDER#{id}")));
    assert_eq!(item["gsi1pk"], AttributeValue::from(format!("ORDER#{id}")));
    assert_eq!(item["gsi2sk"], AttributeValue::from(format!("ORDER#{T0}#{id}")));
    assert_eq!(item["lsi1sk"], AttributeValue::from(format!("STATUS#PENDING#{id}")));
    assert_eq!(item["_et"], AttributeValue::from("Order"));
    assert_eq!(item["status"], AttributeValue::from("PENDING"));
    assert_eq!(item["created_at"], AttributeValue::from(T0));
    assert!(f.table.capacity().write_units > 0.0, "capacity is metered");
}

#[tokio::test]
async fn create_refuses_an_existing_item_and_replace_a_missing_one() {
    let f = Fixture::new().await;
    let product = item! { "product_id" => "p1", "name" => "Pen", "price" => 2 };
    f.table.create("Product", product.clone()).await.unwrap();
    let err = f.table.create("Product", product.clone()).await.unwrap_err();
    assert!(err.is_already_exists() && err.is_condition_failed(), "{err}");
    let err =
        f.table.replace("Product", item! { "product_id" => "p2", "name" => "Ink", "price" => 3 }).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    f.table.replace("Product", item! { "product_id" => "p1", "name" => "Pen", "price" => 4 }).await.unwrap();
    let p = f.table.get("Product", item! { "product_id" => "p1" }).await.unwrap().unwrap();
    assert_eq!(p.i64("price").unwrap(), 4);
}

#[tokio::test]
async fn write_puts_like_put_with_and_answers_only_whether_it_worked() {
    let f = Fixture::new().await;
    let product = item! { "product_id" => "p1", "name" => "Pen", "price" => 2 };
    f.table.write("Product", product.clone(), PutMode::Create, None).await.unwrap();
    let err = f.table.write("Product", product.clone(), PutMode::Create, None).await.unwrap_err();
    assert!(err.is_already_exists() && err.is_condition_failed(), "{err}");
    let pricier = item! { "product_id" => "p1", "name" => "Pen", "price" => 5 };
    let err = f.table.write("Product", pricier.clone(), PutMode::Put, Some(&attr("price").eq(3))).await.unwrap_err();
    assert!(err.is_condition_failed() && !err.is_already_exists(), "{err}");
    assert_eq!(f.table.get("Product", item! { "product_id" => "p1" }).await.unwrap().unwrap().i64("price").unwrap(), 2);
    f.table.write("Product", pricier, PutMode::Put, Some(&attr("price").eq(2))).await.unwrap();
    let err = f
        .table
        .write("Product", item! { "product_id" => "p9", "name" => "Ink", "price" => 1 }, PutMode::Replace, None)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(f.table.get("Product", item! { "product_id" => "p1" }).await.unwrap().unwrap().i64("price").unwrap(), 5);
}

#[tokio::test]
async fn invalid_input_is_refused_before_any_request() {
    let f = Fixture::new().await;
    let cases: Vec<(&str, Item, &str)> = vec![
        ("Order", item! { "total" => 1 }, "Order: required attribute `customer_id` is missing"),
        ("Order", item! { "customer_id" => "c", "total" => "lots" }, "Order: attribute `total` must be N, not S"),
        ("Order", item! { "customer_id" => "c", "colour" => "red" }, "Order: attribute `colour` is not declared"),
        (
            "Order",
            item! { "customer_id" => "c", "pk" => "X" },
            "Order: attribute `pk` is computed by the model and cannot be written",
        ),
        (
            "Order",
            item! { "customer_id" => "c", "_et" => "Customer" },
            "Order: attribute `_et` is computed by the model and cannot be written",
        ),
        ("Nope", item! {}, "unknown entity `Nope`"),
    ];
    for (entity, input, want) in cases {
        let err = f.table.put(entity, input).await.unwrap_err();
        assert!(err.is_validation(), "{err}");
        assert_eq!(err.to_string(), want);
    }
    assert_eq!(f.table.capacity().requests, 0, "nothing was sent");
}

#[tokio::test]
async fn a_hostile_value_stays_inside_its_segment() {
    // Regression guard: an id containing the separator must not produce another order's key.
    let f = Fixture::new().await;
    f.table.create("Order", item! { "customer_id" => "c1", "order_id" => "A#LINE#0001" }).await.unwrap();
    f.table.create("Order", item! { "customer_id" => "c1", "order_id" => "A" }).await.unwrap();
    let a = f.table.get("Order", item! { "customer_id" => "c1", "order_id" => "A" }).await.unwrap().unwrap();
    assert_eq!(a.item()["sk"], AttributeValue::from("ORDER#A"));
    let hostile =
        f.table.get("Order", item! { "customer_id" => "c1", "order_id" => "A#LINE#0001" }).await.unwrap().unwrap();
    assert_eq!(hostile.item()["sk"], AttributeValue::from("ORDER#A%23LINE%230001"));
    let lines = f.table.query("OrderLine").key(item! { "customer_id" => "c1", "order_id" => "A" }).all().await.unwrap();
    assert!(lines.is_empty());
}

#[tokio::test]
async fn update_sets_updated_at_recomputes_index_keys_and_requires_the_item() {
    let f = Fixture::new().await;
    let key = item! { "customer_id" => "c1", "order_id" => "o1" };
    let err = f.table.update("Order", key.clone(), Update::new().set("total", 5)).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");

    f.table.create("Order", key.clone()).await.unwrap();
    f.advance(1000);
    let after =
        f.table.update("Order", key.clone(), Update::new().set("status", "PAID").add("total", 7)).await.unwrap();
    assert_eq!(after.i64("total").unwrap(), 7);
    assert_eq!(after.i64("updated_at").unwrap(), T0 + 1000);
    assert_eq!(after.i64("created_at").unwrap(), T0);
    assert_eq!(after.item()["gsi2pk"], AttributeValue::from("STATUS#PAID"));
    assert_eq!(after.item()["lsi1sk"], AttributeValue::from("STATUS#PAID#o1"));

    // An ADD cannot feed a key: the new value is not known before the write.
    let err = f.table.update("Order", key.clone(), Update::new().add("created_at", 1)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Order: `created_at` is part of `gsi2sk` (`ORDER#{created_at:13}#{order_id}` on `gsi2`), so the update must also set `created_at` to plain values"
    );
    let err = f.table.update("Order", key.clone(), Update::new().set("customer_id", "c2")).await.unwrap_err();
    assert_eq!(err.to_string(), "Order: `customer_id` is part of the table key; write a new item instead");
    let err = f.table.update("Order", key.clone(), Update::new().remove("customer_id")).await.unwrap_err();
    assert!(err.is_validation(), "{err}");
}

#[tokio::test]
async fn updating_a_field_of_a_sparse_index_moves_the_item_in_and_out() {
    let f = Fixture::new().await;
    let key = item! { "product_id" => "p1" };
    f.table.create("Product", item! { "product_id" => "p1", "name" => "Pen", "price" => 2 }).await.unwrap();
    let in_office = || f.table.query("Product").index("gsi2").key(item! { "category" => "office" }).all();
    assert!(in_office().await.unwrap().is_empty());
    f.table.update("Product", key.clone(), Update::new().set("category", "office")).await.unwrap();
    assert_eq!(in_office().await.unwrap().len(), 1);
    f.table.update("Product", key.clone(), Update::new().remove("category")).await.unwrap();
    assert!(in_office().await.unwrap().is_empty());
}

#[tokio::test]
async fn upsert_creates_counters_with_their_keys_and_entity_type() {
    let f = Fixture::new().await;
    let key = item! { "customer_id" => "c9" };
    for _ in 0..3 {
        f.table.upsert("Cart", key.clone(), Update::new().append("lines", vec!["p1".into()])).await.unwrap();
    }
    let cart = f.table.get("Cart", key).await.unwrap().unwrap();
    assert_eq!(cart.list("lines").unwrap().len(), 3);
    assert_eq!(cart.string("customer_id").unwrap(), "c9");
    assert_eq!(cart.i64("created_at").unwrap(), T0);
    assert_eq!(cart.i64("expires_at").unwrap(), T0 / 1000 + 7 * 86_400, "the default TTL");
    assert_eq!(cart.item()["_et"], AttributeValue::from("Cart"));
}

#[tokio::test]
async fn conditional_delete_and_put() {
    let f = Fixture::new().await;
    let key = item! { "product_id" => "p1" };
    f.table.create("Product", item! { "product_id" => "p1", "name" => "Pen", "price" => 2 }).await.unwrap();
    let err = f.table.delete_with("Product", key.clone(), Some(&attr("price").gt(10))).await.unwrap_err();
    assert!(err.is_condition_failed(), "{err}");
    let old = f.table.delete_with("Product", key.clone(), Some(&attr("price").le(10))).await.unwrap().unwrap();
    assert_eq!(old.string("name").unwrap(), "Pen");
    assert!(f.table.delete("Product", key).await.unwrap().is_none());
}

/// A typed struct mapped by hand.
#[derive(Debug, PartialEq)]
struct Customer {
    customer_id: Option<String>,
    email: String,
    name: String,
    tier: String,
}

impl EntityItem for Customer {
    const ENTITY: &'static str = "Customer";

    fn to_item(&self) -> Item {
        let mut item =
            item! { "email" => self.email.as_str(), "name" => self.name.as_str(), "tier" => self.tier.as_str() };
        if let Some(id) = &self.customer_id {
            item.insert("customer_id".into(), id.as_str().into());
        }
        item
    }

    fn from_record(r: &Record) -> Result<Self> {
        Ok(Customer {
            customer_id: Some(r.string("customer_id")?.to_string()),
            email: r.string("email")?.to_string(),
            name: r.string("name")?.to_string(),
            tier: r.string("tier")?.to_string(),
        })
    }
}

#[tokio::test]
async fn typed_structs_round_trip() {
    let f = Fixture::new().await;
    let ada = Customer { customer_id: None, email: "ada@example.com".into(), name: "Ada".into(), tier: "gold".into() };
    let stored = f.table.create_typed(&ada).await.unwrap();
    let id = stored.customer_id.clone().unwrap();
    let got: Customer = f.table.get_typed(item! { "customer_id" => id.as_str() }).await.unwrap().unwrap();
    assert_eq!(got, stored);
    let by_email = f
        .table
        .query("Customer")
        .index("gsi1")
        .key(item! { "email" => "ada@example.com" })
        .all_typed::<Customer>()
        .await
        .unwrap();
    assert_eq!(by_email, vec![stored]);
    let wrong = f.table.get("Customer", item! { "customer_id" => id.as_str() }).await.unwrap().unwrap();
    assert!(wrong.i64("email").is_err());
}

#[tokio::test]
async fn an_upserted_item_gets_the_index_keys_its_key_fields_determine() {
    let f = Fixture::new().await;
    let key = item! { "customer_id" => "c1", "order_id" => "o7" };
    f.table.upsert("Order", key, Update::new().increment("total", 5)).await.unwrap();
    let by_id = f.table.query("Order").index("gsi1").key(item! { "order_id" => "o7" }).all().await.unwrap();
    assert_eq!(by_id.len(), 1, "gsi1 is keyed on the order id alone");
    assert_eq!(by_id[0].i64("total").unwrap(), 5);
    assert_eq!(by_id[0].string("status").unwrap(), "PENDING", "defaults are set when absent");
    let err = f.table.update("Order", item! { "customer_id" => "c1", "order_id" => "o7" }, Update::new()).await;
    assert!(err.is_ok(), "an empty update still refreshes updated_at");
}

#[tokio::test]
async fn generated_ids_carry_the_table_clock() {
    let f = Fixture::new().await;
    let order = f.table.create("Order", item! { "customer_id" => "c1" }).await.unwrap();
    let id: ulid::Ulid = order.string("order_id").unwrap().parse().unwrap();
    assert_eq!(id.timestamp_ms() as i64, T0);
}

/// Regression: DynamoDB charges a write its condition refuses (as a write of the larger of the
/// existing and the new item, at least one unit) but reports no consumed capacity with the
/// error, and the meter counted such writes as free: a refused claim or retry cost nothing in
/// Tally's figures and a write unit on the bill.
#[tokio::test]
async fn a_refused_conditional_write_is_metered_as_a_write() {
    let f = Fixture::new().await;
    let product = item! { "product_id" => "p1", "name" => "Pen", "price" => 2 };
    let key = || item! { "product_id" => "p1" };
    f.table.create("Product", product.clone()).await.unwrap();
    f.table.reset_capacity();
    let refused = |what: &str, err: model::Error, units: f64| {
        assert!(err.is_condition_failed(), "{what}: {err}");
        let capacity = f.table.reset_capacity();
        assert_eq!((capacity.write_units, capacity.requests), (units, 1), "{what}");
    };
    refused("create", f.table.create("Product", product.clone()).await.unwrap_err(), 1.0);
    let stale = attr("price").eq(3);
    let pricier = item! { "product_id" => "p1", "name" => "Pen", "price" => 5 };
    refused("put", f.table.write("Product", pricier, PutMode::Put, Some(&stale)).await.unwrap_err(), 1.0);
    let update = Update::new().set("price", 7);
    refused("update", f.table.update_with("Product", key(), update, Some(&stale), false).await.unwrap_err(), 1.0);
    refused("delete", f.table.delete_with("Product", key(), Some(&stale)).await.unwrap_err(), 1.0);
    // A refused put of a larger item costs that item's size.
    let large = item! { "product_id" => "p1", "name" => "x".repeat(2500), "price" => 5 };
    refused("large put", f.table.write("Product", large, PutMode::Put, Some(&stale)).await.unwrap_err(), 3.0);
    // And a write whose condition holds costs what it reports, as before.
    f.table.write("Product", product, PutMode::Put, Some(&attr("price").eq(2))).await.unwrap();
    assert_eq!(f.table.reset_capacity().write_units, 1.0);
}
