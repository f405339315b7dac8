//! A sample schema: a small shop on one table, used by tests, examples and documents.
//!
//! It exercises every feature of the modelling layer: two global indexes and a local one,
//! a hierarchy (order lines under their order), a collection (an order and its lines in one
//! global-index partition), a sparse index (only products with a category are in `gsi2`'s
//! category partitions), generated ids, timestamps, defaults and a TTL.
//!
//! | entity | table key | gsi1 | gsi2 | lsi1 |
//! | --- | --- | --- | --- | --- |
//! | Customer | `CUSTOMER#{customer_id}` / `PROFILE` | `EMAIL#{email}` / `CUSTOMER` | | |
//! | Order | `CUSTOMER#{customer_id}` / `ORDER#{order_id}` | `ORDER#{order_id}` / `ORDER` | `STATUS#{status}` / `ORDER#{created_at:13}#{order_id}` | `STATUS#{status}#{order_id}` |
//! | OrderLine | `CUSTOMER#{customer_id}` / `ORDER#{order_id}#LINE#{line_no:4}` | `ORDER#{order_id}` / `LINE#{line_no:4}` | | |
//! | Product | `PRODUCT#{product_id}` / `PRODUCT` | | `CATEGORY#{category}` / `PRODUCT#{product_id}` | |
//! | Cart | `CUSTOMER#{customer_id}` / `CART` | | | |

use std::time::Duration;

use store::{KeyAttribute, KeySchema, Projection, ScalarType, StreamView, TableDefinition};

use crate::schema::{AccessPattern, Attribute, Entity, Schema, SortShape};

/// The shop's table: `pk`/`sk`, `gsi1`, `gsi2`, `lsi1`, TTL on `expires_at`, a stream.
pub fn shop_table(name: &str) -> TableDefinition {
    let mut table = TableDefinition::new(name, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S))
        .gsi("gsi1", KeySchema::composite("gsi1pk", ScalarType::S, "gsi1sk", ScalarType::S), Projection::All)
        .gsi(
            "gsi2",
            KeySchema::composite("gsi2pk", ScalarType::S, "gsi2sk", ScalarType::S),
            Projection::Include(vec!["total".into(), "name".into(), "price".into()]),
        )
        .lsi("lsi1", KeyAttribute::new("lsi1sk", ScalarType::S), Projection::KeysOnly)
        .ttl("expires_at");
    table.stream = Some(StreamView::NewAndOldImages);
    table.point_in_time_recovery = true;
    table
}

/// The shop schema on a table named `name`.
pub fn shop(name: &str) -> Schema {
    Schema::builder(shop_table(name))
        .description("A small shop: customers, orders with lines, products and carts.")
        .entity(
            Entity::new("Customer")
                .description("A customer's profile.")
                .attribute(Attribute::string("customer_id").ulid())
                .attribute(Attribute::string("email").required().example("ada@example.com"))
                .attribute(Attribute::string("name").required().example("Ada Lovelace"))
                .attribute(Attribute::string("tier").default_value("standard"))
                .timestamps()
                .key("CUSTOMER#{customer_id}", "PROFILE")
                .gsi("gsi1", "EMAIL#{email}", "CUSTOMER"),
        )
        .entity(
            Entity::new("Order")
                .description("An order, in its customer's partition.")
                .attribute(Attribute::string("customer_id").required())
                .attribute(Attribute::string("order_id").ulid())
                .attribute(Attribute::string("status").default_value("PENDING"))
                .attribute(Attribute::number("total").default_value(0))
                .attribute(Attribute::string("note"))
                .timestamps()
                .key("CUSTOMER#{customer_id}", "ORDER#{order_id}")
                .gsi("gsi1", "ORDER#{order_id}", "ORDER")
                .gsi("gsi2", "STATUS#{status}", "ORDER#{created_at:13}#{order_id}")
                .lsi("lsi1", "STATUS#{status}#{order_id}"),
        )
        .entity(
            Entity::new("OrderLine")
                .description("One line of an order, under the order in the customer's partition.")
                .attribute(Attribute::string("customer_id").required())
                .attribute(Attribute::string("order_id").required())
                .attribute(Attribute::number("line_no").required())
                .attribute(Attribute::string("product_id").required())
                .attribute(Attribute::number("quantity").required())
                .attribute(Attribute::number("price").required())
                .key("CUSTOMER#{customer_id}", "ORDER#{order_id}#LINE#{line_no:4}")
                .gsi("gsi1", "ORDER#{order_id}", "LINE#{line_no:4}"),
        )
        .entity(
            Entity::new("Product")
                .description("A product; in gsi2's category partitions only when it has a category.")
                .attribute(Attribute::string("product_id").required())
                .attribute(Attribute::string("name").required())
                .attribute(Attribute::number("price").required())
                .attribute(Attribute::string("category"))
                .attribute(Attribute::string_set("tags"))
                .attribute(Attribute::map("attributes"))
                .timestamps()
                .key("PRODUCT#{product_id}", "PRODUCT")
                .gsi("gsi2", "CATEGORY#{category}", "PRODUCT#{product_id}"),
        )
        .entity(
            Entity::new("Cart")
                .description("A customer's cart; expires a week after its last write.")
                .attribute(Attribute::string("customer_id").required())
                .attribute(Attribute::list("lines"))
                .ttl_after("expires_at", Duration::from_secs(7 * 86_400))
                .timestamps()
                .key("CUSTOMER#{customer_id}", "CART"),
        )
        .access_pattern(AccessPattern::get("get_customer", "A customer's profile by id").entity("Customer"))
        .access_pattern(
            AccessPattern::query("customer_by_email", "Find a customer by email at sign-in")
                .entity("Customer")
                .index("gsi1")
                .sort(SortShape::Equals),
        )
        .access_pattern(
            AccessPattern::query("orders_of_customer", "A customer's orders and their lines")
                .entity("Order")
                .entity("OrderLine")
                .sort(SortShape::BeginsWith)
                .descending(),
        )
        .access_pattern(
            AccessPattern::query("order_with_lines", "An order and its lines in one query")
                .entity("Order")
                .entity("OrderLine")
                .index("gsi1"),
        )
        .access_pattern(
            AccessPattern::query("orders_by_status", "Recent orders in a status, newest first")
                .entity("Order")
                .index("gsi2")
                .sort(SortShape::Between)
                .descending(),
        )
        .access_pattern(
            AccessPattern::query("customer_orders_by_status", "A customer's orders in a status")
                .entity("Order")
                .index("lsi1")
                .sort(SortShape::BeginsWith),
        )
        .access_pattern(
            AccessPattern::query("products_in_category", "Products of a category").entity("Product").index("gsi2"),
        )
        .access_pattern(AccessPattern::get("get_cart", "A customer's cart").entity("Cart"))
        .build()
        .unwrap_or_else(|e| panic!("the sample schema is valid: {e}"))
}
