//! Schema tooling generated from the one schema definition.
//!
//! Everything a team writes by hand around a single-table design — the design document, the
//! access-pattern matrix, the CloudFormation and Terraform for the table — is derived here
//! from a [`Schema`], so it can never drift from the keys the code actually writes. The
//! golden tests in this module fail when a generated file in `crates/model/tests/golden/`
//! is out of date (`UPDATE_EXPECT=1 cargo test -p model` rewrites them).
//!
//! ```
//! let schema = model::sample::shop("shop");
//! let doc = model::generate::design_doc(&schema);
//! assert!(doc.contains("CUSTOMER#01JD7X3K5M0000000000000000"));
//! let template: serde_json::Value =
//!     serde_json::from_str(&model::generate::cloudformation_json(&schema)).unwrap();
//! assert_eq!(template["Resources"]["ShopTable"]["Type"], "AWS::DynamoDB::Table");
//! ```
//!
//! Every function here is total: a validated schema always renders, so none returns an error.

mod cloudformation;
mod doc;
mod terraform;
mod yaml;

#[cfg(test)]
mod tests;

use crate::schema::Schema;

pub use cloudformation::logical_id;

/// The markdown design document: the table, its indexes, every entity with its attributes,
/// key templates, TTL and a sample item rendered through its real key templates, and the
/// access-pattern matrix.
pub fn design_doc(schema: &Schema) -> String {
    doc::design_doc(schema)
}

/// The access-pattern matrix alone, as a markdown table: one row per access pattern with
/// its operation, index, key condition shape, entities returned and order.
pub fn access_matrix(schema: &Schema) -> String {
    doc::access_matrix(schema)
}

/// A CloudFormation template (JSON) with one `AWS::DynamoDB::Table` resource and outputs
/// for its name and ARN (and stream ARN when the table has a stream).
pub fn cloudformation_json(schema: &Schema) -> String {
    let template = cloudformation::template(schema);
    // Serialising a `Value` built from strings, numbers and booleans cannot fail; the
    // fallback only keeps this function total.
    let mut out = serde_json::to_string_pretty(&template).unwrap_or_default();
    out.push('\n');
    out
}

/// The same CloudFormation template as [`cloudformation_json`], in YAML. It parses to the
/// same value as the JSON.
pub fn cloudformation_yaml(schema: &Schema) -> String {
    yaml::to_yaml(&cloudformation::template(schema))
}

/// A Terraform configuration with one `aws_dynamodb_table` resource and outputs for its
/// name and ARN (and stream ARN when the table has a stream).
pub fn terraform(schema: &Schema) -> String {
    terraform::terraform(schema)
}

/// DynamoDB's name for a billing mode, as CloudFormation and Terraform spell it.
fn billing_mode_name(billing: &store::BillingMode) -> &'static str {
    match billing {
        store::BillingMode::PayPerRequest => "PAY_PER_REQUEST",
        store::BillingMode::Provisioned(_) => "PROVISIONED",
    }
}

/// DynamoDB's name for a stream view type.
fn stream_view_name(view: store::StreamView) -> &'static str {
    match view {
        store::StreamView::KeysOnly => "KEYS_ONLY",
        store::StreamView::NewImage => "NEW_IMAGE",
        store::StreamView::OldImage => "OLD_IMAGE",
        store::StreamView::NewAndOldImages => "NEW_AND_OLD_IMAGES",
    }
}

/// DynamoDB's projection type and the non-key attributes it includes.
fn projection_parts(projection: &store::Projection) -> (&'static str, &[String]) {
    match projection {
        store::Projection::All => ("ALL", &[]),
        store::Projection::KeysOnly => ("KEYS_ONLY", &[]),
        store::Projection::Include(names) => ("INCLUDE", names),
    }
}
