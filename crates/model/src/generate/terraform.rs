//! The Terraform configuration for the schema's table.
//!
//! The output is laid out as `terraform fmt` would lay it out (two-space indentation, the
//! `=` of consecutive arguments aligned), so committing it and formatting it agree.

use store::{BillingMode, TableDefinition};

use super::{billing_mode_name, projection_parts, stream_view_name};
use crate::schema::Schema;

/// One line of an HCL body.
enum Line {
    /// `name = expression`.
    Argument(&'static str, String),
    /// `header { body }`.
    Block(String, Vec<Line>),
    /// An empty line between groups.
    Blank,
}

pub(super) fn terraform(schema: &Schema) -> String {
    let table = schema.table();
    let label = resource_label(&table.name);
    let mut out = String::new();
    match schema.description() {
        Some(d) => out.push_str(&format!("# Tally single-table design `{}`: {}\n", table.name, one_line(d))),
        None => out.push_str(&format!("# Tally single-table design `{}`.\n", table.name)),
    }
    out.push_str("# Generated from the schema definition; do not edit by hand.\n\n");
    write_block(&mut out, &format!("resource \"aws_dynamodb_table\" {}", string(&label)), &table_body(table), 0);
    let mut outputs = vec![("table_name", "name", "The table's name."), ("table_arn", "arn", "The table's ARN.")];
    if table.stream.is_some() {
        outputs.push(("stream_arn", "stream_arn", "The table's change stream ARN."));
    }
    for (name, attribute, description) in outputs {
        out.push('\n');
        let body = vec![
            Line::Argument("description", string(description)),
            Line::Argument("value", format!("aws_dynamodb_table.{label}.{attribute}")),
        ];
        write_block(&mut out, &format!("output {}", string(name)), &body, 0);
    }
    out
}

fn table_body(table: &TableDefinition) -> Vec<Line> {
    let mut body = vec![
        Line::Argument("name", string(&table.name)),
        Line::Argument("billing_mode", string(billing_mode_name(&table.billing))),
    ];
    if let BillingMode::Provisioned(t) = table.billing {
        body.push(Line::Argument("read_capacity", t.read.to_string()));
        body.push(Line::Argument("write_capacity", t.write.to_string()));
    }
    body.push(Line::Argument("hash_key", string(&table.key_schema.partition.name)));
    if let Some(sort) = &table.key_schema.sort {
        body.push(Line::Argument("range_key", string(&sort.name)));
    }
    // Only key attributes may be declared, each once: the provider rejects any other.
    for a in table.key_attributes() {
        body.push(Line::Blank);
        body.push(Line::Block(
            "attribute".into(),
            vec![Line::Argument("name", string(&a.name)), Line::Argument("type", string(a.ty.descriptor()))],
        ));
    }
    for g in &table.global_indexes {
        let mut index = vec![
            Line::Argument("name", string(&g.name)),
            Line::Argument("hash_key", string(&g.key_schema.partition.name)),
        ];
        if let Some(sort) = &g.key_schema.sort {
            index.push(Line::Argument("range_key", string(&sort.name)));
        }
        push_projection(&mut index, &g.projection);
        // The table definition has one throughput, which its indexes share.
        if let BillingMode::Provisioned(t) = table.billing {
            index.push(Line::Argument("read_capacity", t.read.to_string()));
            index.push(Line::Argument("write_capacity", t.write.to_string()));
        }
        body.push(Line::Blank);
        body.push(Line::Block("global_secondary_index".into(), index));
    }
    for l in &table.local_indexes {
        let mut index =
            vec![Line::Argument("name", string(&l.name)), Line::Argument("range_key", string(&l.sort.name))];
        push_projection(&mut index, &l.projection);
        body.push(Line::Blank);
        body.push(Line::Block("local_secondary_index".into(), index));
    }
    if let Some(ttl) = &table.ttl_attribute {
        body.push(Line::Blank);
        body.push(Line::Block(
            "ttl".into(),
            vec![Line::Argument("attribute_name", string(ttl)), Line::Argument("enabled", "true".into())],
        ));
    }
    body.push(Line::Blank);
    match table.stream {
        Some(view) => {
            body.push(Line::Argument("stream_enabled", "true".into()));
            body.push(Line::Argument("stream_view_type", string(stream_view_name(view))));
        }
        None => body.push(Line::Argument("stream_enabled", "false".into())),
    }
    body.push(Line::Blank);
    body.push(Line::Block(
        "point_in_time_recovery".into(),
        vec![Line::Argument("enabled", table.point_in_time_recovery.to_string())],
    ));
    body
}

fn push_projection(index: &mut Vec<Line>, projection: &store::Projection) {
    let (kind, include) = projection_parts(projection);
    index.push(Line::Argument("projection_type", string(kind)));
    if matches!(projection, store::Projection::Include(_)) {
        let names: Vec<String> = include.iter().map(|n| string(n)).collect();
        index.push(Line::Argument("non_key_attributes", format!("[{}]", names.join(", "))));
    }
}

/// Writes `header {`, the body, and `}`, aligning the `=` of consecutive arguments.
fn write_block(out: &mut String, header: &str, body: &[Line], indent: usize) {
    let pad = " ".repeat(indent);
    out.push_str(&format!("{pad}{header} {{\n"));
    let inner = " ".repeat(indent + 2);
    let mut i = 0;
    while i < body.len() {
        match &body[i] {
            Line::Argument(..) => {
                // A run of consecutive arguments is aligned on its longest name.
                let run: Vec<(&str, &String)> = body[i..]
                    .iter()
                    .map_while(|l| match l {
                        Line::Argument(name, value) => Some((*name, value)),
                        _ => None,
                    })
                    .collect();
                let width = run.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
                for (name, value) in &run {
                    out.push_str(&format!("{inner}{name:<width$} = {value}\n"));
                }
                i += run.len();
            }
            Line::Block(header, lines) => {
                write_block(out, header, lines, indent + 2);
                i += 1;
            }
            Line::Blank => {
                out.push('\n');
                i += 1;
            }
        }
    }
    out.push_str(&format!("{pad}}}\n"));
}

/// An HCL string literal: escapes, and `${`/`%{` doubled so no template is interpolated.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A resource label: HCL identifiers hold letters, digits, `_` and `-`, and start with a
/// letter or `_`.
fn resource_label(table_name: &str) -> String {
    let mut label: String =
        table_name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    if !label.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        label.insert(0, '_');
    }
    label
}

/// Text for a `#` comment: one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
