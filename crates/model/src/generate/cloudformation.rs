//! The CloudFormation template for the schema's table, as a JSON value.
//!
//! One value feeds both the JSON and the YAML output, so the two can never disagree.

use serde_json::{Map, Value, json};
use store::{BillingMode, KeySchema, Projection, TableDefinition, Throughput};

use super::{billing_mode_name, projection_parts, stream_view_name};
use crate::schema::Schema;

/// The template's logical id for the table: the table name in CamelCase plus `Table`
/// (`tally-events` → `TallyEventsTable`), since logical ids must be alphanumeric.
pub fn logical_id(table_name: &str) -> String {
    let mut id = String::new();
    for part in table_name.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            id.push(first.to_ascii_uppercase());
            id.extend(chars);
        }
    }
    // A logical id must start with a letter, and table names may start with a digit.
    if !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
        id.insert(0, 'T');
    }
    id.push_str("Table");
    id
}

/// The whole template.
pub(super) fn template(schema: &Schema) -> Value {
    let table = schema.table();
    let id = logical_id(&table.name);
    let description = match schema.description() {
        Some(d) => format!("Tally single-table design `{}`: {d}", table.name),
        None => format!("Tally single-table design `{}`.", table.name),
    };
    let mut outputs = Map::new();
    outputs.insert("TableName".into(), json!({ "Description": "The table's name.", "Value": { "Ref": id } }));
    outputs.insert(
        "TableArn".into(),
        json!({ "Description": "The table's ARN.", "Value": { "Fn::GetAtt": [id, "Arn"] } }),
    );
    if table.stream.is_some() {
        outputs.insert(
            "StreamArn".into(),
            json!({ "Description": "The table's change stream ARN.", "Value": { "Fn::GetAtt": [id, "StreamArn"] } }),
        );
    }
    let mut resources = Map::new();
    resources.insert(
        id,
        json!({
            "Type": "AWS::DynamoDB::Table",
            // The table holds every site's data: deleting or replacing the stack must not
            // delete it with it.
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": properties(table),
        }),
    );
    json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": description,
        "Resources": resources,
        "Outputs": outputs,
    })
}

fn properties(table: &TableDefinition) -> Value {
    let mut p = Map::new();
    p.insert("TableName".into(), json!(table.name));
    // Only key attributes may be declared, each once: CloudFormation rejects any other.
    let definitions: Vec<Value> = table
        .key_attributes()
        .iter()
        .map(|a| json!({ "AttributeName": a.name, "AttributeType": a.ty.descriptor() }))
        .collect();
    p.insert("AttributeDefinitions".into(), Value::Array(definitions));
    p.insert("KeySchema".into(), key_schema(&table.key_schema));
    p.insert("BillingMode".into(), json!(billing_mode_name(&table.billing)));
    if let BillingMode::Provisioned(t) = table.billing {
        p.insert("ProvisionedThroughput".into(), throughput(t));
    }
    if !table.global_indexes.is_empty() {
        let gsis = table
            .global_indexes
            .iter()
            .map(|g| {
                let mut index = Map::new();
                index.insert("IndexName".into(), json!(g.name));
                index.insert("KeySchema".into(), key_schema(&g.key_schema));
                index.insert("Projection".into(), projection(&g.projection));
                // The table definition has one throughput, which its indexes share.
                if let BillingMode::Provisioned(t) = table.billing {
                    index.insert("ProvisionedThroughput".into(), throughput(t));
                }
                Value::Object(index)
            })
            .collect();
        p.insert("GlobalSecondaryIndexes".into(), Value::Array(gsis));
    }
    if !table.local_indexes.is_empty() {
        let lsis = table
            .local_indexes
            .iter()
            .map(|l| {
                let key = KeySchema { partition: table.key_schema.partition.clone(), sort: Some(l.sort.clone()) };
                json!({
                    "IndexName": l.name,
                    "KeySchema": key_schema(&key),
                    "Projection": projection(&l.projection),
                })
            })
            .collect();
        p.insert("LocalSecondaryIndexes".into(), Value::Array(lsis));
    }
    if let Some(ttl) = &table.ttl_attribute {
        p.insert("TimeToLiveSpecification".into(), json!({ "AttributeName": ttl, "Enabled": true }));
    }
    if let Some(view) = table.stream {
        p.insert("StreamSpecification".into(), json!({ "StreamViewType": stream_view_name(view) }));
    }
    // Written even when off, so the template states the choice instead of relying on a default.
    p.insert(
        "PointInTimeRecoverySpecification".into(),
        json!({ "PointInTimeRecoveryEnabled": table.point_in_time_recovery }),
    );
    Value::Object(p)
}

fn key_schema(key: &KeySchema) -> Value {
    let mut out = vec![json!({ "AttributeName": key.partition.name, "KeyType": "HASH" })];
    if let Some(sort) = &key.sort {
        out.push(json!({ "AttributeName": sort.name, "KeyType": "RANGE" }));
    }
    Value::Array(out)
}

fn projection(projection: &Projection) -> Value {
    let (kind, include) = projection_parts(projection);
    match projection {
        Projection::Include(_) => json!({ "ProjectionType": kind, "NonKeyAttributes": include }),
        Projection::All | Projection::KeysOnly => json!({ "ProjectionType": kind }),
    }
}

fn throughput(t: Throughput) -> Value {
    json!({ "ReadCapacityUnits": t.read, "WriteCapacityUnits": t.write })
}
