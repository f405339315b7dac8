//! Tests of the generated documents and templates.
//!
//! The golden files under `crates/model/tests/golden/` are the sample schema's generated
//! outputs, committed so that reviews show what a schema change does to the design doc and
//! the infrastructure; these tests fail when they are out of date
//! (`UPDATE_EXPECT=1 cargo test -p model generate` rewrites them).

use expect_test::expect_file;
use serde_json::Value;
use store::{BillingMode, KeySchema, Projection, ScalarType, StreamView, TableDefinition, Throughput};

use super::*;
use crate::sample;
use crate::schema::{AccessPattern, Attribute, Entity, Schema, SortShape};

fn shop() -> Schema {
    sample::shop("shop")
}

fn parsed_json(schema: &Schema) -> Value {
    serde_json::from_str(&cloudformation_json(schema)).expect("the CloudFormation JSON parses")
}

fn properties(template: &Value, schema: &Schema) -> Value {
    template["Resources"][logical_id(schema.table_name())]["Properties"].clone()
}

/// A schema with provisioned billing, a keys-only stream, no TTL, no point-in-time recovery,
/// a partition-key-only GSI and a table without local indexes.
fn provisioned() -> Schema {
    let mut table = TableDefinition::new(
        "tally-events",
        KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S),
    )
    .gsi("by_visitor", KeySchema::hash("visitor_pk", ScalarType::S), Projection::KeysOnly);
    table.billing = BillingMode::Provisioned(Throughput { read: 25, write: 10 });
    table.stream = Some(StreamView::KeysOnly);
    Schema::builder(table)
        .entity(
            Entity::new("Visit")
                .attribute(Attribute::string("site").required())
                .attribute(Attribute::string("visit_id").ulid())
                .attribute(Attribute::string("visitor"))
                .key("SITE#{site}", "VISIT#{visit_id}")
                .gsi("by_visitor", "VISITOR#{visitor}", ""),
        )
        .access_pattern(
            AccessPattern::query("visits_of_site", "A site's visits").entity("Visit").sort(SortShape::BeginsWith),
        )
        .access_pattern(AccessPattern::query("visits_of_visitor", "").entity("Visit").index("by_visitor"))
        .access_pattern(AccessPattern::scan("all_visits", "Every visit, for exports").entity("Visit"))
        .build()
        .expect("the provisioned test schema is valid")
}

#[test]
fn golden_design_doc() {
    expect_file!["../../tests/golden/shop.design.md"].assert_eq(&design_doc(&shop()));
}

#[test]
fn golden_access_matrix() {
    expect_file!["../../tests/golden/shop.access-matrix.md"].assert_eq(&access_matrix(&shop()));
}

#[test]
fn golden_cloudformation_json() {
    expect_file!["../../tests/golden/shop.cloudformation.json"].assert_eq(&cloudformation_json(&shop()));
}

#[test]
fn golden_cloudformation_yaml() {
    expect_file!["../../tests/golden/shop.cloudformation.yaml"].assert_eq(&cloudformation_yaml(&shop()));
}

#[test]
fn golden_terraform() {
    expect_file!["../../tests/golden/shop.tf"].assert_eq(&terraform(&shop()));
}

#[test]
fn yaml_parses_to_the_same_value_as_json() {
    for schema in [shop(), provisioned()] {
        let json = parsed_json(&schema);
        let yaml: Value = serde_yaml::from_str(&cloudformation_yaml(&schema)).expect("the YAML parses");
        assert_eq!(yaml, json);
    }
}

#[test]
fn cloudformation_names_indexes_ttl_billing_and_key_attributes() {
    let schema = shop();
    let template = parsed_json(&schema);
    let p = properties(&template, &schema);
    assert_eq!(template["Resources"]["ShopTable"]["Type"], "AWS::DynamoDB::Table");
    assert_eq!(p["TableName"], "shop");
    assert_eq!(p["BillingMode"], "PAY_PER_REQUEST");
    assert!(p.get("ProvisionedThroughput").is_none());
    assert_eq!(p["TimeToLiveSpecification"]["AttributeName"], "expires_at");
    assert_eq!(p["TimeToLiveSpecification"]["Enabled"], true);
    assert_eq!(p["StreamSpecification"]["StreamViewType"], "NEW_AND_OLD_IMAGES");
    assert_eq!(p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"], true);

    let names = |v: &Value, field: &str| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|x| x[field].as_str().map(String::from)).collect()
    };
    let gsis = names(&p["GlobalSecondaryIndexes"], "IndexName");
    let want_gsis: Vec<String> = schema.table().global_indexes.iter().map(|g| g.name.clone()).collect();
    assert_eq!(gsis, want_gsis);
    assert_eq!(names(&p["LocalSecondaryIndexes"], "IndexName"), ["lsi1"]);
    assert_eq!(
        p["GlobalSecondaryIndexes"][1]["Projection"]["NonKeyAttributes"],
        serde_json::json!(["total", "name", "price"])
    );
    assert_eq!(p["LocalSecondaryIndexes"][0]["KeySchema"][0]["AttributeName"], "pk");

    // Exactly the key attributes, each once: CloudFormation rejects anything else.
    let defined = names(&p["AttributeDefinitions"], "AttributeName");
    assert_eq!(defined, ["pk", "sk", "gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk", "lsi1sk"]);
    let mut used: Vec<String> = names(&p["KeySchema"], "AttributeName");
    for index in p["GlobalSecondaryIndexes"].as_array().into_iter().chain(p["LocalSecondaryIndexes"].as_array()) {
        for i in index {
            used.extend(names(&i["KeySchema"], "AttributeName"));
        }
    }
    for name in &defined {
        assert!(used.contains(name), "{name} is defined but in no key schema");
    }
    for name in &used {
        assert!(defined.contains(name), "{name} is in a key schema but not defined");
    }

    assert_eq!(template["Outputs"]["TableArn"]["Value"]["Fn::GetAtt"], serde_json::json!(["ShopTable", "Arn"]));
    assert_eq!(template["Outputs"]["TableName"]["Value"]["Ref"], "ShopTable");
}

#[test]
fn provisioned_billing_and_streams_are_rendered() {
    let schema = provisioned();
    let template = parsed_json(&schema);
    let p = properties(&template, &schema);
    let throughput = serde_json::json!({ "ReadCapacityUnits": 25, "WriteCapacityUnits": 10 });
    assert_eq!(p["BillingMode"], "PROVISIONED");
    assert_eq!(p["ProvisionedThroughput"], throughput);
    assert_eq!(p["GlobalSecondaryIndexes"][0]["ProvisionedThroughput"], throughput);
    assert_eq!(p["GlobalSecondaryIndexes"][0]["KeySchema"].as_array().map(Vec::len), Some(1));
    assert_eq!(p["StreamSpecification"]["StreamViewType"], "KEYS_ONLY");
    assert_eq!(p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"], false);
    assert!(p.get("TimeToLiveSpecification").is_none());
    assert!(p.get("LocalSecondaryIndexes").is_none());
    assert!(template["Outputs"].get("StreamArn").is_some());
    assert!(template["Resources"].get("TallyEventsTable").is_some());

    let tf = terraform(&schema);
    let args = terraform_arguments(&tf);
    assert!(args.contains(&("billing_mode".into(), "\"PROVISIONED\"".into())));
    assert_eq!(args.iter().filter(|a| a.0 == "read_capacity" && a.1 == "25").count(), 2, "{tf}");
    assert_eq!(args.iter().filter(|a| a.0 == "write_capacity" && a.1 == "10").count(), 2, "{tf}");
    assert!(args.contains(&("stream_enabled".into(), "true".into())));
    assert!(args.contains(&("stream_view_type".into(), "\"KEYS_ONLY\"".into())));
    assert!(!tf.contains("ttl {"));
    assert!(tf.contains("resource \"aws_dynamodb_table\" \"tally-events\" {"));

    let doc = design_doc(&schema);
    assert!(doc.contains("| Billing mode | `PROVISIONED` (25 read and 10 write capacity units"), "{doc}");
    assert!(doc.contains("| Stream | `KEYS_ONLY` |"));
    assert!(doc.contains("| Time to live | disabled |"));
    assert!(doc.contains("| Point-in-time recovery | disabled |"));
    let matrix = access_matrix(&schema);
    assert!(
        matrix.contains("| `all_visits` | Every visit, for exports | Scan | `table` | — | — | Visit | ascending |")
    );
    assert!(matrix.contains("| `by_visitor` | `visitor_pk = VISITOR#{visitor}` | — | Visit |"), "{matrix}");
}

/// The `name = value` arguments of a Terraform file, in order, whatever their alignment.
fn terraform_arguments(tf: &str) -> Vec<(String, String)> {
    tf.lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
        .collect()
}

#[test]
fn terraform_names_every_index_and_key_attribute() {
    let schema = shop();
    let tf = terraform(&schema);
    let args = terraform_arguments(&tf);
    let has = |name: &str, value: &str| args.iter().any(|(n, v)| n == name && *v == format!("\"{value}\""));
    assert!(has("name", "shop"));
    assert!(has("billing_mode", "PAY_PER_REQUEST"));
    assert!(has("hash_key", "pk") && has("range_key", "sk"));
    for g in &schema.table().global_indexes {
        assert!(has("name", &g.name), "{} missing:\n{tf}", g.name);
        assert!(has("hash_key", &g.key_schema.partition.name));
    }
    for l in &schema.table().local_indexes {
        assert!(has("name", &l.name));
        assert!(has("range_key", &l.sort.name));
    }
    for a in schema.table().key_attributes() {
        assert!(has("name", &a.name), "attribute {} missing:\n{tf}", a.name);
    }
    assert_eq!(tf.matches("\n  attribute {").count(), schema.table().key_attributes().len());
    assert_eq!(tf.matches("global_secondary_index {").count(), 2);
    assert_eq!(tf.matches("local_secondary_index {").count(), 1);
    assert!(has("attribute_name", "expires_at"));
    assert!(has("stream_view_type", "NEW_AND_OLD_IMAGES"));
    assert!(args.contains(&("non_key_attributes".into(), "[\"total\", \"name\", \"price\"]".into())));
    // Braces balance, so the blocks are well formed.
    assert_eq!(tf.matches('{').count(), tf.matches('}').count());
}

#[test]
fn design_doc_covers_every_entity_index_and_access_pattern() {
    let schema = shop();
    let doc = design_doc(&schema);
    for e in schema.entities() {
        assert!(doc.contains(&format!("\n### {}\n", e.name())), "entity {} missing", e.name());
        for a in e.attributes() {
            assert!(doc.contains(&format!("| `{}` |", a.name)));
        }
    }
    for index in schema.indexes() {
        assert!(doc.contains(&format!("| `{}` |", index.label())), "index {index} missing");
    }
    for p in schema.access_patterns() {
        assert!(doc.contains(&format!("| `{}` | {} |", p.name, p.description)), "pattern {} missing", p.name);
    }
    assert!(doc.contains(&access_matrix(&schema)));
    // Sample items are rendered through the real templates, generated ids and all.
    assert!(doc.contains("| `table` | `CUSTOMER#01JD7X3K5M0000000000000000` | `PROFILE` |"));
    assert!(doc.contains("| `gsi1` | `EMAIL#ada@example.com` | `CUSTOMER` |"));
    assert!(doc.contains("`ORDER#1732262400000#01JD7X3K5M0000000000000000`"));
    assert!(doc.contains("Sparse on `gsi2`: the key is written only when `category` is present."));
    assert!(doc.contains("written as the write time plus 7 days when not given"));
}

#[test]
fn sample_items_in_the_doc_are_the_schema_s_sample_items() {
    let schema = shop();
    let doc = design_doc(&schema);
    // Every sample item's JSON block parses back to the sample item.
    let blocks: Vec<&str> = doc.split("```json\n").skip(1).filter_map(|b| b.split("\n```").next()).collect();
    assert_eq!(blocks.len(), schema.entities().len());
    for (block, e) in blocks.iter().zip(schema.entities()) {
        let parsed: Value = serde_json::from_str(block).expect("a sample item is JSON");
        let item = schema.sample_item(e.name()).expect("the entity exists");
        let object = parsed.as_object().expect("an item is an object");
        assert_eq!(object.len(), item.len());
        for (name, value) in &item {
            assert_eq!(object[name], doc::dynamo_json(value), "{}.{name}", e.name());
        }
    }
}

#[test]
fn matrix_rows_show_key_condition_shapes() {
    let matrix = access_matrix(&shop());
    let row = |name: &str| -> String {
        matrix.lines().find(|l| l.starts_with(&format!("| `{name}` |"))).map(String::from).unwrap_or_default()
    };
    assert_eq!(
        row("orders_of_customer"),
        "| `orders_of_customer` | A customer's orders and their lines | Query | `table` | \
         `pk = CUSTOMER#{customer_id}` | `begins_with(sk, ORDER#)` | Order, OrderLine | descending |"
    );
    assert_eq!(
        row("get_customer"),
        "| `get_customer` | A customer's profile by id | GetItem | `table` | `pk = CUSTOMER#{customer_id}` | \
         `sk = PROFILE` | Customer | — |"
    );
    assert!(
        row("orders_by_status")
            .contains("`gsi2sk BETWEEN :lo AND :hi`, bounds shaped `ORDER#{created_at:13}#{order_id}`")
    );
    assert!(row("order_with_lines").contains("| `gsi1pk = ORDER#{order_id}` | — (whole partition) |"));
    assert_eq!(matrix.lines().count(), 2 + shop().access_patterns().len());
}

#[test]
fn yaml_quotes_what_would_change_meaning() {
    let cases = [
        "true",
        "No",
        "null",
        "~",
        "",
        "1",
        "1.5",
        "2010-09-09",
        "0x1F",
        ".inf",
        "Fn::GetAtt",
        "a: b",
        "a #b",
        "-x",
        "*ref",
        "&anchor",
        "!tag",
        "[x]",
        "{x}",
        "'q'",
        "\"q\"",
        " lead",
        "trail ",
        "line\nbreak",
        "tab\there",
        "back\\slash",
        "bell\u{7}",
        "bom\u{feff}",
        "C1\u{85}",
        "ünïcode",
        "%x",
        "@x",
        "`x",
        "|x",
        ">x",
        "?x",
        ",x",
    ];
    for s in cases {
        let value = serde_json::json!({ s: s, "list": [s, [s], { s: [] }], "empty": {} });
        let yaml = yaml::to_yaml(&value);
        let back: Value = serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("{s:?}: {e}\n{yaml}"));
        assert_eq!(back, value, "{s:?}:\n{yaml}");
    }
    // Plain where it is safe, so the templates stay readable.
    expect_test::expect![[r#"
        "AWS::Thing": "Fn::GetAtt"
        plain: PAY_PER_REQUEST
        spaced: A small shop
        numbers:
          - 1
          - true
          - null
          - - nested
            - "yes"
          - Key: v
            Other: []
    "#]]
    .assert_eq(&yaml::to_yaml(&serde_json::json!({
        "AWS::Thing": "Fn::GetAtt",
        "plain": "PAY_PER_REQUEST",
        "spaced": "A small shop",
        "numbers": [1, true, null, ["nested", "yes"], { "Key": "v", "Other": [] }],
    })));
}

#[test]
fn logical_ids_and_labels_are_valid_identifiers() {
    assert_eq!(logical_id("shop"), "ShopTable");
    assert_eq!(logical_id("tally-events.v2"), "TallyEventsV2Table");
    assert_eq!(logical_id("9lives"), "T9livesTable");
}
