//! Batches and transactions: chunking, retries, all-or-nothing and per-item reasons.

use model::expr::{Update, attr};
use model::{BatchWrite, TxWrite};
use store::{CancellationCode, item};

use crate::Fixture;

fn product(i: usize) -> store::Item {
    item! { "product_id" => format!("p{i:03}"), "name" => "thing", "price" => i as i64 }
}

#[tokio::test]
async fn batch_writes_and_gets_are_chunked() {
    let f = Fixture::new().await;
    let written = f.table.batch_write((0..60).map(|i| BatchWrite::put("Product", product(i))).collect()).await.unwrap();
    assert_eq!(written.iter().flatten().count(), 60);
    assert_eq!(f.table.capacity().requests, 3, "25 + 25 + 10");

    let mut keys: Vec<(&str, store::Item)> =
        (0..130).map(|i| ("Product", item! { "product_id" => format!("p{i:03}") })).collect();
    keys.push(("Product", item! { "product_id" => "p001" }));
    f.table.reset_capacity();
    let got = f.table.batch_get(keys).await.unwrap();
    assert_eq!(got.len(), 131);
    assert_eq!(got.iter().flatten().count(), 61, "60 found, one of them twice");
    assert_eq!(got[7].as_ref().unwrap().i64("price").unwrap(), 7);
    assert!(got[100].is_none());
    assert_eq!(f.table.capacity().requests, 2, "100 + 30 distinct keys");

    let deletes =
        (0..30).map(|i| BatchWrite::delete("Product", item! { "product_id" => format!("p{i:03}") })).collect();
    f.table.batch_write(deletes).await.unwrap();
    assert_eq!(f.table.scan().entity("Product").all().await.unwrap().len(), 30);

    let dup = vec![BatchWrite::put("Product", product(1)), BatchWrite::put("Product", product(1))];
    assert!(f.table.batch_write(dup).await.unwrap_err().is_validation());
}

#[tokio::test]
async fn transactions_are_all_or_nothing_with_reasons_per_item() {
    let f = Fixture::new().await;
    f.table.create("Product", product(1)).await.unwrap();
    let err = f
        .table
        .transact_write(vec![
            TxWrite::create("Product", product(2)),
            TxWrite::create("Product", product(1)),
            TxWrite::update("Product", item! { "product_id" => "p001" }, Update::new().set("price", 9))
                .condition(attr("price").gt(100)),
        ])
        .await;
    // Two writes on p001 in one transaction is itself refused, before sending.
    assert!(err.unwrap_err().is_validation());

    let err = f
        .table
        .transact_write(vec![
            TxWrite::create("Product", product(2)),
            TxWrite::create("Product", product(1)),
            TxWrite::check("Product", item! { "product_id" => "p003" }, attr("product_id").exists()),
        ])
        .await
        .unwrap_err();
    assert!(err.is_transaction_canceled(), "{err}");
    let failures = err.transaction_failures().unwrap();
    assert_eq!(
        failures.iter().map(|f| (f.index, f.entity.as_str(), f.code)).collect::<Vec<_>>(),
        [
            (1, "Product", CancellationCode::ConditionalCheckFailed),
            (2, "Product", CancellationCode::ConditionalCheckFailed)
        ]
    );
    assert!(f.table.get("Product", item! { "product_id" => "p002" }).await.unwrap().is_none(), "nothing written");

    let written = f
        .table
        .transact_write(vec![
            TxWrite::create("Product", product(2)),
            TxWrite::update("Product", item! { "product_id" => "p001" }, Update::new().add("price", 10)),
            TxWrite::upsert(
                "Cart",
                item! { "customer_id" => "c1" },
                Update::new().append("lines", vec!["p002".into()]),
            ),
        ])
        .await
        .unwrap();
    assert!(written[0].is_some() && written[1].is_none());
    let got = f
        .table
        .transact_get(vec![
            ("Product", item! { "product_id" => "p001" }),
            ("Product", item! { "product_id" => "p404" }),
            ("Cart", item! { "customer_id" => "c1" }),
        ])
        .await
        .unwrap();
    assert_eq!(got[0].as_ref().unwrap().i64("price").unwrap(), 11);
    assert!(got[1].is_none());
    assert_eq!(got[2].as_ref().unwrap().list("lines").unwrap().len(), 1);

    let too_many = (0..101).map(|i| TxWrite::put("Product", product(i))).collect();
    assert_eq!(
        f.table.transact_write(too_many).await.unwrap_err().to_string(),
        "transact_write: 101 items, at most 100 allowed"
    );
}
