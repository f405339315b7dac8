//! A tour of the modelling layer on the sample shop schema, on an embedded store in a
//! temporary directory: `cargo run -p model --example shop`.

use std::sync::Arc;

use model::expr::{Update, attr};
use model::{BatchWrite, Table, TxWrite, sample};
use store::item;

#[tokio::main(flavor = "current_thread")]
async fn main() -> model::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store: Arc<dyn store::Store> = Arc::new(store_embedded::EmbeddedStore::open(dir.path())?);
    let table = Table::new(store, sample::shop("shop"));
    table.create_table().await?;

    let ada = table.create("Customer", item! { "email" => "ada@example.com", "name" => "Ada" }).await?;
    let customer = ada.string("customer_id")?.to_string();
    println!("customer {customer}: pk={:?}", ada.get("pk"));

    // An order and its lines, all or nothing.
    let order_id = "01JD7X3K5M0000000000000001";
    let mut writes = vec![TxWrite::create(
        "Order",
        item! { "customer_id" => customer.as_str(), "order_id" => order_id, "total" => 12 },
    )];
    for line in 0..3i64 {
        writes.push(TxWrite::create(
            "OrderLine",
            item! { "customer_id" => customer.as_str(), "order_id" => order_id, "line_no" => line, "product_id" => "pen", "quantity" => 1, "price" => 4 },
        ));
    }
    table.transact_write(writes).await?;

    // A catalogue, in chunks of 25.
    let products = (0..40).map(|i| {
        let category = if i % 2 == 0 { "office" } else { "art" };
        BatchWrite::put(
            "Product",
            item! { "product_id" => format!("p{i:02}"), "name" => "thing", "price" => i, "category" => category },
        )
    });
    table.batch_write(products.collect()).await?;

    let key = item! { "customer_id" => customer.as_str(), "order_id" => order_id };
    table.update("Order", key, Update::new().set("status", "PAID")).await?;

    let order =
        table.collection(&["Order", "OrderLine"]).index("gsi1").key(item! { "order_id" => order_id }).collect().await?;
    println!("order {order_id}: {} order, {} lines", order["Order"].len(), order["OrderLine"].len());

    let cheap_office = table
        .query("Product")
        .index("gsi2")
        .key(item! { "category" => "office" })
        .filter(attr("price").lt(10))
        .all()
        .await?;
    println!("{} cheap office products", cheap_office.len());

    let c = table.capacity();
    println!("{} requests, {} read units, {} write units", c.requests, c.read_units, c.write_units);
    Ok(())
}
