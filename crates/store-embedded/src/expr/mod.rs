//! DynamoDB expressions: parsing, validation and evaluation against items.
//!
//! The engine receives expressions as text with `#name`/`:value` placeholders (as the DynamoDB
//! API does) and must accept and reject exactly what DynamoDB accepts and rejects, with
//! DynamoDB's messages, before it touches any data.
//!
//! CONTRACT between this module and the engine (`crate::engine`). Keep these signatures.

use std::collections::BTreeSet;

use store::{AttributeValue, ExpressionAttributes, Item, KeySchema, Result};

/// Tracks which `#name` and `:value` placeholders of a request the expressions used,
/// so that unused ones are rejected as DynamoDB rejects them.
pub struct ExprContext<'a> {
    attrs: &'a ExpressionAttributes,
    used_names: BTreeSet<String>,
    used_values: BTreeSet<String>,
}

impl<'a> ExprContext<'a> {
    /// A context over a request's placeholders.
    pub fn new(attrs: &'a ExpressionAttributes) -> Self {
        ExprContext { attrs, used_names: BTreeSet::new(), used_values: BTreeSet::new() }
    }

    /// Call after parsing every expression of the request: fails on unused names or values
    /// ("Value provided in ExpressionAttributeNames unused in expressions: keys: {#a}").
    pub fn finish(self) -> Result<()> {
        let _ = (&self.attrs, &self.used_names, &self.used_values);
        todo!()
    }
}

/// A parsed condition or filter expression.
pub struct Condition {}

impl Condition {
    /// Parses a `ConditionExpression` or `FilterExpression`.
    pub fn parse(text: &str, ctx: &mut ExprContext<'_>) -> Result<Condition> {
        let _ = (text, ctx);
        todo!()
    }

    /// Evaluates against an item; `None` is an absent item (every attribute missing).
    /// Errors only where DynamoDB raises a runtime validation error.
    pub fn evaluate(&self, item: Option<&Item>) -> Result<bool> {
        let _ = item;
        todo!()
    }
}

/// The sort-key part of a key condition.
#[derive(Clone, Debug, PartialEq)]
pub enum SortCondition {
    /// `sk = v`
    Eq(AttributeValue),
    /// `sk < v`
    Lt(AttributeValue),
    /// `sk <= v`
    Le(AttributeValue),
    /// `sk > v`
    Gt(AttributeValue),
    /// `sk >= v`
    Ge(AttributeValue),
    /// `sk BETWEEN lo AND hi` (lo ≤ hi, else a validation error at parse time)
    Between(AttributeValue, AttributeValue),
    /// `begins_with(sk, prefix)` (S or B only)
    BeginsWith(AttributeValue),
}

/// A parsed `KeyConditionExpression`, checked against the key schema being queried.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyCondition {
    /// The partition key value (`pk = :v` is required).
    pub partition: AttributeValue,
    /// The sort key condition, if any.
    pub sort: Option<SortCondition>,
}

impl KeyCondition {
    /// Parses and validates against `schema` (the table's or the queried index's key schema):
    /// only key attributes, the partition key with `=`, value types matching the schema.
    pub fn parse(text: &str, ctx: &mut ExprContext<'_>, schema: &KeySchema) -> Result<KeyCondition> {
        let _ = (text, ctx, schema);
        todo!()
    }
}

/// A parsed `UpdateExpression`.
pub struct Update {}

impl Update {
    /// Parses an update expression (`SET`, `REMOVE`, `ADD`, `DELETE` clauses, each at most once).
    pub fn parse(text: &str, ctx: &mut ExprContext<'_>) -> Result<Update> {
        let _ = (text, ctx);
        todo!()
    }

    /// Top-level attribute names the update writes or removes (the engine rejects key attributes).
    pub fn top_level_attributes(&self) -> BTreeSet<String> {
        todo!()
    }

    /// Applies the update to `item` in place (an absent item starts as the key alone).
    /// Fails, leaving the caller to discard `item`, on DynamoDB's runtime errors
    /// (type mismatch in arithmetic, ADD/DELETE on wrong types, list index paths, number overflow, empty set results are removals).
    pub fn apply(&self, item: &mut Item) -> Result<()> {
        let _ = item;
        todo!()
    }
}

/// A parsed `ProjectionExpression`.
pub struct Projection {}

impl Projection {
    /// Parses a projection expression (comma-separated document paths).
    pub fn parse(text: &str, ctx: &mut ExprContext<'_>) -> Result<Projection> {
        let _ = (text, ctx);
        todo!()
    }

    /// The projected copy of `item` (nested paths keep their structure, as DynamoDB does).
    pub fn apply(&self, item: &Item) -> Item {
        let _ = item;
        todo!()
    }
}
