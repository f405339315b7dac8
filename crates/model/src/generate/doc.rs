//! The markdown design document and the access-pattern matrix.
//!
//! Everything shown is computed from the schema: key templates as parsed, sample items
//! rendered through the same code that computes keys on write, and the matrix from the
//! declared access patterns. Cells are escaped so that no attribute name or template can
//! break a table.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Map, Value};
use store::{AttributeValue, BillingMode, Item, KeyAttribute, Projection, TableDefinition};

use super::{billing_mode_name, projection_parts, stream_view_name};
use crate::schema::{AccessPattern, Attribute, Entity, EntityKey, Generated, Index, Operation, Schema, SortShape};

/// Shown in a cell that has nothing to show.
const NONE: &str = "—";

pub(super) fn design_doc(schema: &Schema) -> String {
    let table = schema.table();
    let mut out = String::new();
    let _ = writeln!(out, "# Single-table design: {}\n", code(&table.name));
    if let Some(d) = schema.description() {
        let _ = writeln!(out, "{}\n", d.trim());
    }
    out.push_str(
        "Generated from the schema definition; regenerate it rather than edit it, so that it always \
         describes the keys the code writes.\n\n",
    );
    out.push_str("## Contents\n\n- [Table](#table)\n- [Indexes](#indexes)\n- [Entities](#entities)\n");
    for e in schema.entities() {
        let _ = writeln!(out, "  - [{}](#{})", e.name(), anchor(e.name()));
    }
    out.push_str("- [Access patterns](#access-patterns)\n\n");
    table_section(&mut out, schema);
    index_section(&mut out, schema);
    entities_section(&mut out, schema);
    out.push_str("## Access patterns\n\n");
    out.push_str(
        "One row per access pattern the application uses. Key templates stand for the values a \
         request fills in; `:sk`, `:lo` and `:hi` are the rendered sort key values.\n\n",
    );
    out.push_str(&access_matrix(schema));
    out
}

pub(super) fn access_matrix(schema: &Schema) -> String {
    let mut out = String::from(
        "| Access pattern | Description | Operation | Index | Partition key | Sort key condition | Entities | Order |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for p in schema.access_patterns() {
        let keys: Vec<&EntityKey> =
            p.entities.iter().filter_map(|e| schema.entity(e)).filter_map(|e| e.key(&p.index)).collect();
        let (partition, sort) = key_condition(p, &keys);
        let operation = match p.operation {
            Operation::Get => "GetItem",
            Operation::Query => "Query",
            Operation::Scan => "Scan",
        };
        let order = match (p.operation, p.descending) {
            (Operation::Get, _) => NONE,
            (_, false) => "ascending",
            (_, true) => "descending",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {operation} | {} | {partition} | {sort} | {} | {order} |",
            code(&p.name),
            text(&p.description),
            code(p.index.label()),
            text(&p.entities.join(", ")),
        );
    }
    out
}

/// The partition and sort key cells of an access pattern's row.
fn key_condition(p: &AccessPattern, keys: &[&EntityKey]) -> (String, String) {
    if p.operation == Operation::Scan || keys.is_empty() {
        return (NONE.into(), NONE.into());
    }
    let partition = distinct(keys.iter().map(|k| format!("{} = {}", k.partition_attribute, k.partition)))
        .iter()
        .map(|c| code(c))
        .collect::<Vec<_>>()
        .join(" or ");
    let Some(sk) = keys.iter().find_map(|k| k.sort_attribute.as_deref()) else {
        return (partition, NONE.into());
    };
    let templates = distinct(keys.iter().filter_map(|k| k.sort.as_ref()).map(|t| t.source().to_string()));
    let each = |op: &str| templates.iter().map(|t| code(&format!("{sk} {op} {t}"))).collect::<Vec<_>>().join(" or ");
    let sort = match p.sort {
        SortShape::None => format!("{NONE} (whole partition)"),
        SortShape::Equals => each("="),
        SortShape::LessThan => each("<"),
        SortShape::LessOrEqual => each("<="),
        SortShape::GreaterThan => each(">"),
        SortShape::GreaterOrEqual => each(">="),
        SortShape::BeginsWith => {
            // One prefix that every returned entity's keys start with, so that one query
            // reads all of them.
            let prefixes: Vec<String> =
                keys.iter().filter_map(|k| k.sort.as_ref()).map(|t| t.literal_prefix()).collect();
            code(&format!("begins_with({sk}, {})", common_prefix(&prefixes)))
        }
        SortShape::Between => {
            let shapes = templates.iter().map(|t| code(t)).collect::<Vec<_>>().join(" or ");
            format!("{}, bounds shaped {shapes}", code(&format!("{sk} BETWEEN :lo AND :hi")))
        }
    };
    (partition, sort)
}

fn table_section(out: &mut String, schema: &Schema) {
    let table = schema.table();
    out.push_str("## Table\n\n| Property | Value |\n| --- | --- |\n");
    let _ = writeln!(out, "| Table name | {} |", code(&table.name));
    let _ = writeln!(out, "| Partition key | {} |", key_attribute(&table.key_schema.partition));
    let sort = table.key_schema.sort.as_ref().map_or_else(|| NONE.to_string(), key_attribute);
    let _ = writeln!(out, "| Sort key | {sort} |");
    let billing = match table.billing {
        BillingMode::PayPerRequest => format!("{} (on demand)", code(billing_mode_name(&table.billing))),
        BillingMode::Provisioned(t) => format!(
            "{} ({} read and {} write capacity units, the same for every global index)",
            code(billing_mode_name(&table.billing)),
            t.read,
            t.write
        ),
    };
    let _ = writeln!(out, "| Billing mode | {billing} |");
    let ttl =
        table.ttl_attribute.as_ref().map_or_else(|| "disabled".to_string(), |a| format!("{} (epoch seconds)", code(a)));
    let _ = writeln!(out, "| Time to live | {ttl} |");
    let stream = table.stream.map_or_else(|| "disabled".to_string(), |v| code(stream_view_name(v)));
    let _ = writeln!(out, "| Stream | {stream} |");
    let pitr = if table.point_in_time_recovery { "enabled" } else { "disabled" };
    let _ = writeln!(out, "| Point-in-time recovery | {pitr} |");
    let _ = writeln!(
        out,
        "| Entity-type attribute | {} (every item holds its entity's name) |\n",
        code(schema.entity_type_attribute())
    );
}

fn index_section(out: &mut String, schema: &Schema) {
    let table = schema.table();
    out.push_str(
        "## Indexes\n\n| Index | Kind | Partition key | Sort key | Projection | Entities |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for index in schema.indexes() {
        let (kind, partition, sort, projection) = index_row(table, &index);
        let entities: Vec<&str> = schema.entities_on(&index).map(Entity::name).collect();
        let entities = if entities.is_empty() { NONE.to_string() } else { text(&entities.join(", ")) };
        let _ =
            writeln!(out, "| {} | {kind} | {partition} | {sort} | {projection} | {entities} |", code(index.label()));
    }
    out.push('\n');
}

/// Kind, partition key, sort key and projection cells of an index.
fn index_row(table: &TableDefinition, index: &Index) -> (&'static str, String, String, String) {
    let sort_cell = |s: Option<&KeyAttribute>| s.map_or_else(|| NONE.to_string(), key_attribute);
    match index {
        Index::Table => (
            "primary key",
            key_attribute(&table.key_schema.partition),
            sort_cell(table.key_schema.sort.as_ref()),
            code("ALL"),
        ),
        Index::Global(name) => match table.global_indexes.iter().find(|g| &g.name == name) {
            Some(g) => (
                "global",
                key_attribute(&g.key_schema.partition),
                sort_cell(g.key_schema.sort.as_ref()),
                projection(&g.projection),
            ),
            None => ("global", NONE.into(), NONE.into(), NONE.into()),
        },
        Index::Local(name) => match table.local_indexes.iter().find(|l| &l.name == name) {
            Some(l) => (
                "local",
                format!("{}, the table's", key_attribute(&table.key_schema.partition)),
                key_attribute(&l.sort),
                projection(&l.projection),
            ),
            None => ("local", NONE.into(), NONE.into(), NONE.into()),
        },
    }
}

fn entities_section(out: &mut String, schema: &Schema) {
    let indexes = schema.indexes();
    out.push_str("## Entities\n\n");
    out.push_str("Key templates of every entity on every index (partition / sort):\n\n| Entity |");
    for index in &indexes {
        let _ = write!(out, " {} |", code(index.label()));
    }
    out.push_str("\n| --- |");
    for _ in &indexes {
        out.push_str(" --- |");
    }
    out.push('\n');
    for e in schema.entities() {
        let _ = write!(out, "| {} |", text(e.name()));
        for index in &indexes {
            let cell = e.key(index).map_or_else(String::new, template_pair);
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out.push('\n');
    for e in schema.entities() {
        entity_section(out, schema, e);
    }
}

fn entity_section(out: &mut String, schema: &Schema, e: &Entity) {
    let _ = writeln!(out, "### {}\n", e.name());
    if let Some(d) = e.description() {
        let _ = writeln!(out, "{}\n", d.trim());
    }
    let _ = writeln!(
        out,
        "Items carry {} = {}.{}\n",
        code(schema.entity_type_attribute()),
        code(e.name()),
        if e.is_open() { " The entity is open: undeclared attributes are accepted and stored untyped." } else { "" }
    );

    out.push_str(
        "**Attributes**\n\n| Attribute | Type | Required | Default | Generated | Description |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for a in e.attributes() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            code(&a.name),
            a.ty.descriptor(),
            if a.required { "yes" } else { "no" },
            a.default.as_ref().map_or_else(|| NONE.to_string(), |v| code(&value_text(v))),
            generated_text(a),
            a.description.as_deref().map_or_else(|| NONE.to_string(), text),
        );
    }
    out.push('\n');

    out.push_str("**Keys**\n\n| Index | Partition key | Sort key |\n| --- | --- | --- |\n");
    for k in e.keys() {
        let partition = match k.index {
            Index::Local(_) => {
                format!("{}, the table's", code(&format!("{} = {}", k.partition_attribute, k.partition)))
            }
            _ => code(&format!("{} = {}", k.partition_attribute, k.partition)),
        };
        let sort = match (&k.sort_attribute, &k.sort) {
            (Some(a), Some(t)) => code(&format!("{a} = {t}")),
            _ => NONE.to_string(),
        };
        let _ = writeln!(out, "| {} | {partition} | {sort} |", code(k.index.label()));
    }
    out.push('\n');
    for k in e.keys() {
        // A secondary key with a field that may be absent is sparse: items without it stay
        // out of the index, which is worth knowing when reading the index.
        let optional: Vec<String> =
            k.fields().into_iter().filter(|f| e.attribute(f).is_some_and(|a| !a.always_present())).map(code).collect();
        if k.index != Index::Table && !optional.is_empty() {
            let _ = writeln!(
                out,
                "Sparse on {}: the key is written only when {} {} present.\n",
                code(k.index.label()),
                optional.join(" and "),
                if optional.len() == 1 { "is" } else { "are" }
            );
        }
    }

    out.push_str("**Time to live**: ");
    match e.ttl() {
        Some(ttl) => {
            let _ = write!(out, "{} (epoch seconds); ", code(&ttl.attribute));
            match ttl.default_after {
                Some(after) => {
                    let _ = writeln!(out, "written as the write time plus {} when not given.\n", duration_text(after));
                }
                None => out.push_str("set by the caller; items without it never expire.\n\n"),
            }
        }
        None => out.push_str("none; items live until deleted.\n\n"),
    }

    out.push_str("**Sample item**\n\n");
    match schema.sample_item(e.name()) {
        Some(item) => sample_item(out, schema, e, &item),
        None => out.push_str("(none)\n\n"),
    }
}

fn sample_item(out: &mut String, schema: &Schema, e: &Entity, item: &Item) {
    out.push_str("| Index | Partition key | Sort key |\n| --- | --- | --- |\n");
    for k in e.keys() {
        let value = |name: Option<&str>| match name.and_then(|n| item.get(n)) {
            Some(v) => code(&key_value_text(v)),
            None => NONE.to_string(),
        };
        let partition = value(Some(&k.partition_attribute));
        // A sparse key the sample item lacks is shown as such rather than as an empty key.
        let sort = value(k.sort_attribute.as_deref());
        let present = k.written().all(|p| item.contains_key(p.attribute));
        if present {
            let _ = writeln!(out, "| {} | {partition} | {sort} |", code(k.index.label()));
        } else {
            let _ = writeln!(out, "| {} | not in the index | |", code(k.index.label()));
        }
    }
    // Key attributes first (in index order), then the entity type, then declared attributes:
    // the order a reader looks for them in.
    let mut order: Vec<String> = schema.table().key_attributes().into_iter().map(|a| a.name).collect();
    order.push(schema.entity_type_attribute().to_string());
    order.extend(e.attributes().iter().map(|a| a.name.clone()));
    order.extend(item.keys().cloned());
    // One attribute a line, each value compact: as readable as a table, and still JSON that
    // `aws dynamodb put-item --item` accepts.
    let mut seen = Vec::new();
    let mut lines = Vec::new();
    for name in order {
        if let Some(v) = item.get(&name)
            && !seen.contains(&name)
        {
            lines.push(format!("  {}: {}", Value::String(name.clone()), dynamo_json(v)));
            seen.push(name);
        }
    }
    let rendered = format!("{{\n{}\n}}", lines.join(",\n"));
    let _ = writeln!(out, "\nAs stored (DynamoDB JSON):\n\n```json\n{rendered}\n```\n");
}

/// A value in DynamoDB's JSON form (`{"S": "…"}`), as the AWS CLI and console show items.
pub(super) fn dynamo_json(value: &AttributeValue) -> Value {
    let (tag, inner) = match value {
        AttributeValue::S(s) => ("S", Value::String(s.clone())),
        AttributeValue::N(n) => ("N", Value::String(n.to_string())),
        AttributeValue::B(b) => ("B", Value::String(base64(b))),
        AttributeValue::Bool(b) => ("BOOL", Value::Bool(*b)),
        AttributeValue::Null => ("NULL", Value::Bool(true)),
        AttributeValue::M(m) => ("M", Value::Object(m.iter().map(|(k, v)| (k.clone(), dynamo_json(v))).collect())),
        AttributeValue::L(l) => ("L", Value::Array(l.iter().map(dynamo_json).collect())),
        AttributeValue::Ss(s) => ("SS", Value::Array(s.iter().cloned().map(Value::String).collect())),
        AttributeValue::Ns(s) => ("NS", Value::Array(s.iter().map(|n| Value::String(n.to_string())).collect())),
        AttributeValue::Bs(s) => ("BS", Value::Array(s.iter().map(|b| Value::String(base64(b))).collect())),
    };
    let mut m = Map::new();
    m.insert(tag.to_string(), inner);
    Value::Object(m)
}

/// A default value as a reader expects it: strings quoted, numbers and booleans bare,
/// anything else in DynamoDB JSON.
fn value_text(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(s) => Value::String(s.clone()).to_string(),
        AttributeValue::N(n) => n.to_string(),
        AttributeValue::Bool(b) => b.to_string(),
        other => dynamo_json(other).to_string(),
    }
}

/// A key attribute's value as it appears in the key.
fn key_value_text(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(s) => s.clone(),
        AttributeValue::N(n) => n.to_string(),
        AttributeValue::B(b) => base64(b),
        other => dynamo_json(other).to_string(),
    }
}

fn generated_text(a: &Attribute) -> &'static str {
    match a.generated {
        Some(Generated::Ulid) => "ULID when absent",
        Some(Generated::CreatedAt) => "creation time",
        Some(Generated::UpdatedAt) => "time of every write",
        None => NONE,
    }
}

fn key_attribute(a: &KeyAttribute) -> String {
    format!("{} ({})", code(&a.name), a.ty.descriptor())
}

fn projection(projection: &Projection) -> String {
    let (kind, include) = projection_parts(projection);
    match projection {
        Projection::Include(_) => {
            let names: Vec<String> = include.iter().map(|n| code(n)).collect();
            format!("{}: {}", code(kind), names.join(", "))
        }
        Projection::All | Projection::KeysOnly => code(kind),
    }
}

/// `partition / sort` templates of one key, for the overview table.
fn template_pair(k: &EntityKey) -> String {
    match &k.sort {
        Some(s) => format!("{} / {}", code(k.partition.source()), code(s.source())),
        None => code(k.partition.source()),
    }
}

fn duration_text(d: Duration) -> String {
    let secs = d.as_secs();
    let (n, unit) = match secs {
        0 => (0, "second"),
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    if n == 1 { format!("1 {unit}") } else { format!("{n} {unit}s") }
}

/// The longest common prefix of the strings (on character boundaries).
fn common_prefix(strings: &[String]) -> String {
    let Some((first, rest)) = strings.split_first() else {
        return String::new();
    };
    let mut prefix = first.clone();
    for s in rest {
        prefix = prefix.chars().zip(s.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect();
    }
    prefix
}

/// The values in first-seen order, each once.
fn distinct(values: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Inline code in a table cell: backticks, with `|` escaped so it cannot end the cell.
fn code(s: &str) -> String {
    let escaped = s.replace('|', "\\|");
    if escaped.contains('`') { format!("`` {escaped} ``") } else { format!("`{escaped}`") }
}

/// Plain text in a table cell: on one line, with `|` escaped.
fn text(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

/// The anchor GitHub gives a heading: lowercase, spaces to dashes, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_lowercase().next().unwrap_or(c)),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

/// Standard base64 with padding, as DynamoDB JSON carries binary values.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
