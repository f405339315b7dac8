//! DynamoDB expressions: parsing, validation and evaluation against items.
//!
//! The engine receives expressions as text with `#name`/`:value` placeholders (as the DynamoDB
//! API does) and must accept and reject exactly what DynamoDB accepts and rejects, with
//! DynamoDB's messages, before it touches any data.
//!
//! CONTRACT between this module and the engine (`crate::engine`). Keep these signatures.
//!
//! Inside, text becomes tokens ([`lexer`]), tokens a raw syntax tree ([`parser`]), and the raw
//! tree a resolved one ([`resolve`]: placeholders substituted, reserved words, functions and
//! operand types checked); [`eval`], [`update`] and [`projection`] work on resolved trees only.

mod ast;
mod eval;
mod lexer;
mod parser;
mod projection;
mod reserved;
mod resolve;
#[cfg(test)]
mod tests;
mod update;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use store::{AttributeValue, ExpressionAttributes, Item, KeySchema, Result, StoreError};

use ast::{CmpOp, Cond, Operand, Path, PathElem};
use parser::Parser;
use resolve::Resolver;

/// The longest expression DynamoDB accepts, in bytes.
const MAX_EXPRESSION_BYTES: usize = store::limits::MAX_EXPRESSION_BYTES;

/// Which request parameter an expression came from; DynamoDB names it in every error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExprKind {
    Condition,
    Filter,
    KeyCondition,
    Update,
    Projection,
}

impl ExprKind {
    fn parameter(self) -> &'static str {
        match self {
            ExprKind::Condition => "ConditionExpression",
            ExprKind::Filter => "FilterExpression",
            ExprKind::KeyCondition => "KeyConditionExpression",
            ExprKind::Update => "UpdateExpression",
            ExprKind::Projection => "ProjectionExpression",
        }
    }

    fn invalid(self, message: impl std::fmt::Display) -> StoreError {
        StoreError::validation(format!("Invalid {}: {message}", self.parameter()))
    }
}

/// Tracks which `#name` and `:value` placeholders of a request the expressions used,
/// so that unused ones are rejected as DynamoDB rejects them.
pub struct ExprContext<'a> {
    attrs: &'a ExpressionAttributes,
    used_names: BTreeSet<String>,
    used_values: BTreeSet<String>,
    /// Whether the placeholders themselves have been validated (done once, before any parse).
    checked: bool,
}

impl<'a> ExprContext<'a> {
    /// A context over a request's placeholders.
    pub fn new(attrs: &'a ExpressionAttributes) -> Self {
        ExprContext { attrs, used_names: BTreeSet::new(), used_values: BTreeSet::new(), checked: false }
    }

    /// Call after parsing every expression of the request: fails on unused names or values
    /// ("Value provided in ExpressionAttributeNames unused in expressions: keys: {#a}").
    pub fn finish(self) -> Result<()> {
        let unused = |keys: &mut dyn Iterator<Item = &String>, used: &BTreeSet<String>| {
            keys.filter(|k| !used.contains(*k)).map(String::as_str).collect::<Vec<_>>().join(", ")
        };
        let names = unused(&mut self.attrs.names.keys(), &self.used_names);
        if !names.is_empty() {
            return Err(StoreError::validation(format!(
                "Value provided in ExpressionAttributeNames unused in expressions: keys: {{{names}}}"
            )));
        }
        let values = unused(&mut self.attrs.values.keys(), &self.used_values);
        if !values.is_empty() {
            return Err(StoreError::validation(format!(
                "Value provided in ExpressionAttributeValues unused in expressions: keys: {{{values}}}"
            )));
        }
        Ok(())
    }

    /// Validates the placeholders' own syntax and values, once per request, as DynamoDB
    /// does before it looks at any expression.
    fn check_attributes(&mut self) -> Result<()> {
        if self.checked {
            return Ok(());
        }
        let well_formed = |key: &str, sigil: char| {
            key.strip_prefix(sigil)
                .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        };
        for key in self.attrs.names.keys() {
            if !well_formed(key, '#') {
                return Err(StoreError::validation(format!(
                    "ExpressionAttributeNames contains invalid key: Syntax error; key: \"{key}\""
                )));
            }
        }
        for (key, value) in &self.attrs.values {
            if !well_formed(key, ':') {
                return Err(StoreError::validation(format!(
                    "ExpressionAttributeValues contains invalid key: Syntax error; key: \"{key}\""
                )));
            }
            if let Some(problem) = empty_set(value) {
                return Err(StoreError::validation(format!(
                    "ExpressionAttributeValues contains invalid value: One or more parameter values were invalid: {problem} for key {key}"
                )));
            }
        }
        self.checked = true;
        Ok(())
    }

    /// The attribute name behind `#placeholder`, marking it used.
    fn name(&mut self, placeholder: &str) -> Option<String> {
        let name = self.attrs.names.get(placeholder)?.clone();
        self.used_names.insert(placeholder.to_string());
        Some(name)
    }

    /// The value behind `:placeholder`, marking it used.
    fn value(&mut self, placeholder: &str) -> Option<AttributeValue> {
        let value = self.attrs.values.get(placeholder)?.clone();
        self.used_values.insert(placeholder.to_string());
        Some(value)
    }
}

/// DynamoDB's complaint about the first empty set inside `value`, if any.
fn empty_set(value: &AttributeValue) -> Option<&'static str> {
    match value {
        AttributeValue::Ss(s) if s.is_empty() => Some("An string set  may not be empty"),
        AttributeValue::Ns(s) if s.is_empty() => Some("An number set  may not be empty"),
        AttributeValue::Bs(s) if s.is_empty() => Some("Binary sets should not be empty"),
        AttributeValue::M(m) => m.values().find_map(empty_set),
        AttributeValue::L(l) => l.iter().find_map(empty_set),
        _ => None,
    }
}

/// Checks what DynamoDB checks before parsing, and tokenizes.
fn prepare<'s>(text: &'s str, kind: ExprKind, ctx: &mut ExprContext<'_>) -> Result<Parser<'s>> {
    ctx.check_attributes()?;
    if text.is_empty() {
        return Err(kind.invalid("The expression can not be empty;"));
    }
    if text.len() > MAX_EXPRESSION_BYTES {
        return Err(kind.invalid(format_args!(
            "Expression size has exceeded the maximum allowed size; expression size: {}",
            text.len()
        )));
    }
    Ok(Parser::new(text))
}

/// The most operators and functions one expression may use.
const MAX_OPERATORS: usize = 300;

/// Rejects expressions with more operators than DynamoDB allows; like DynamoDB, the message
/// gives the count at which it gave up.
fn check_operators(kind: ExprKind, count: usize) -> Result<()> {
    if count > MAX_OPERATORS {
        return Err(kind.invalid(format_args!(
            "The expression contains too many operators; operator count: {}",
            MAX_OPERATORS + 1
        )));
    }
    Ok(())
}

fn parse_cond(text: &str, ctx: &mut ExprContext<'_>, kind: ExprKind) -> Result<Cond> {
    let mut p = prepare(text, kind, ctx)?;
    let raw = parser::parse_condition(&mut p).map_err(|e| kind.invalid(p.syntax_message(e)))?;
    check_operators(kind, parser::operator_count(&raw))?;
    let mut r = Resolver::new(&p, ctx, kind);
    let cond = r.cond(&raw);
    r.finish().map_err(|m| kind.invalid(m))?;
    Ok(cond)
}

/// A parsed condition or filter expression.
pub struct Condition {
    cond: Cond,
}

impl Condition {
    /// Parses a `ConditionExpression` or `FilterExpression`.
    ///
    /// Errors name the `ConditionExpression`; use [`Condition::parse_filter`] for filters so
    /// that they name the `FilterExpression`, as DynamoDB's do.
    pub fn parse(text: &str, ctx: &mut ExprContext<'_>) -> Result<Condition> {
        parse_cond(text, ctx, ExprKind::Condition).map(|cond| Condition { cond })
    }

    /// Parses a `FilterExpression` (the same grammar, errors naming the filter).
    pub fn parse_filter(text: &str, ctx: &mut ExprContext<'_>) -> Result<Condition> {
        parse_cond(text, ctx, ExprKind::Filter).map(|cond| Condition { cond })
    }

    /// Top-level attributes the condition reads (a query rejects key attributes in a filter:
    /// "Filter Expression can only contain non-primary key attributes").
    pub fn top_level_attributes(&self) -> BTreeSet<String> {
        fn operand(op: &Operand, out: &mut BTreeSet<String>) {
            match op {
                Operand::Path(p) => {
                    out.insert(p.head().to_string());
                }
                Operand::Value(_) => {}
                Operand::Size(inner) => operand(inner, out),
            }
        }
        fn walk(cond: &Cond, out: &mut BTreeSet<String>) {
            match cond {
                Cond::Cmp(_, a, b) | Cond::BeginsWith(a, b) | Cond::Contains(a, b) => {
                    operand(a, out);
                    operand(b, out);
                }
                Cond::Between(a, b, c) => {
                    for op in [a, b, c] {
                        operand(op, out);
                    }
                }
                Cond::In(a, list) => {
                    operand(a, out);
                    list.iter().for_each(|op| operand(op, out));
                }
                Cond::Exists(p) | Cond::NotExists(p) => {
                    out.insert(p.head().to_string());
                }
                Cond::Type(a, _) => operand(a, out),
                Cond::Not(inner) => walk(inner, out),
                Cond::And(parts) | Cond::Or(parts) => parts.iter().for_each(|c| walk(c, out)),
            }
        }
        let mut out = BTreeSet::new();
        walk(&self.cond, &mut out);
        out
    }

    /// Evaluates against an item; `None` is an absent item (every attribute missing).
    /// Errors only where DynamoDB raises a runtime validation error.
    pub fn evaluate(&self, item: Option<&Item>) -> Result<bool> {
        let empty = Item::new();
        Ok(eval::evaluate(&self.cond, item.unwrap_or(&empty)))
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

impl SortCondition {
    /// Whether a sort key value satisfies the condition (values of another type never do).
    // The engine turns sort conditions into key ranges; this is the reference semantics for
    // model-based tests, so it may go unused outside them.
    #[allow(dead_code)]
    pub fn matches(&self, sk: &AttributeValue) -> bool {
        let cmp = |v: &AttributeValue| eval::compare(sk, v);
        match self {
            SortCondition::Eq(v) => cmp(v) == Some(Ordering::Equal),
            SortCondition::Lt(v) => cmp(v) == Some(Ordering::Less),
            SortCondition::Le(v) => matches!(cmp(v), Some(Ordering::Less | Ordering::Equal)),
            SortCondition::Gt(v) => cmp(v) == Some(Ordering::Greater),
            SortCondition::Ge(v) => matches!(cmp(v), Some(Ordering::Greater | Ordering::Equal)),
            SortCondition::Between(lo, hi) => {
                matches!(cmp(lo), Some(Ordering::Greater | Ordering::Equal))
                    && matches!(cmp(hi), Some(Ordering::Less | Ordering::Equal))
            }
            SortCondition::BeginsWith(p) => match (sk, p) {
                (AttributeValue::S(s), AttributeValue::S(p)) => s.starts_with(p.as_str()),
                (AttributeValue::B(b), AttributeValue::B(p)) => b.starts_with(p),
                _ => false,
            },
        }
    }
}

/// A parsed `KeyConditionExpression`, checked against the key schema being queried.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyCondition {
    /// The partition key value (`pk = :v` is required).
    pub partition: AttributeValue,
    /// The sort key condition, if any.
    pub sort: Option<SortCondition>,
}

/// One key attribute's condition, before it is matched to the schema.
struct KeyPredicate {
    attribute: String,
    /// DynamoDB's name for the operator (`EQ`, `BETWEEN`, …), used in its messages.
    operator: &'static str,
    condition: SortCondition,
}

impl KeyPredicate {
    fn values(&self) -> Vec<&AttributeValue> {
        match &self.condition {
            SortCondition::Eq(v)
            | SortCondition::Lt(v)
            | SortCondition::Le(v)
            | SortCondition::Gt(v)
            | SortCondition::Ge(v)
            | SortCondition::BeginsWith(v) => vec![v],
            SortCondition::Between(lo, hi) => vec![lo, hi],
        }
    }
}

fn key_error(message: impl Into<String>) -> StoreError {
    StoreError::validation(message)
}

/// Splits a resolved key condition into one predicate per key attribute, rejecting what a
/// key condition cannot express.
fn key_predicates(cond: &Cond, out: &mut Vec<KeyPredicate>) -> Result<()> {
    let invalid_operator = |op: &str| key_error(format!("Invalid operator used in KeyConditionExpression: {op}"));
    let (operands, first_must_be_key): (Vec<&Operand>, Option<&str>) = match cond {
        Cond::And(parts) => {
            for part in parts {
                key_predicates(part, out)?;
            }
            return Ok(());
        }
        Cond::Or(_) => return Err(invalid_operator("OR")),
        Cond::Not(_) => return Err(invalid_operator("NOT")),
        Cond::In(..) => return Err(invalid_operator("IN")),
        Cond::Cmp(CmpOp::Ne, ..) => return Err(invalid_operator("<>")),
        Cond::Exists(_) => return Err(invalid_operator("attribute_exists")),
        Cond::NotExists(_) => return Err(invalid_operator("attribute_not_exists")),
        Cond::Type(..) => return Err(invalid_operator("attribute_type")),
        Cond::Contains(..) => return Err(invalid_operator("contains")),
        Cond::Cmp(_, a, b) => (vec![a, b], None),
        Cond::Between(x, lo, hi) => (vec![x, lo, hi], Some("BETWEEN")),
        Cond::BeginsWith(x, p) => (vec![x, p], Some("begins_with")),
    };
    if let Some(op) = first_must_be_key
        && !matches!(operands.first(), Some(Operand::Path(_)))
    {
        return Err(key_error(format!(
            "Invalid condition in KeyConditionExpression: {op} operator must have the key attribute as its first operand"
        )));
    }
    let mut key: Option<(usize, &Path)> = None;
    let mut values = Vec::new();
    for (i, operand) in operands.iter().enumerate() {
        match operand {
            Operand::Size(_) => {
                return Err(key_error("KeyConditionExpressions cannot contain nested operations"));
            }
            Operand::Path(p) => {
                if key.is_some() {
                    return Err(key_error(
                        "Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition",
                    ));
                }
                if p.0.len() > 1 {
                    return Err(key_error("KeyConditionExpressions cannot have conditions on nested attributes"));
                }
                key = Some((i, p));
            }
            Operand::Value(v) => values.push(v.clone()),
        }
    }
    let Some((position, path)) = key else {
        return Err(key_error("Invalid condition in KeyConditionExpression: No key attribute specified"));
    };
    let attribute = path.head().to_string();
    if out.iter().any(|p| p.attribute == attribute) {
        return Err(key_error("KeyConditionExpressions must only contain one condition per key"));
    }
    let mut values = values.into_iter();
    let mut next = || values.next().unwrap_or(AttributeValue::Null);
    let (operator, condition) = match cond {
        Cond::Cmp(op, ..) => {
            // `:v < sk` is `sk > :v`.
            let op = if position == 0 { *op } else { op.flipped() };
            match op {
                CmpOp::Lt => ("LT", SortCondition::Lt(next())),
                CmpOp::Le => ("LE", SortCondition::Le(next())),
                CmpOp::Gt => ("GT", SortCondition::Gt(next())),
                CmpOp::Ge => ("GE", SortCondition::Ge(next())),
                CmpOp::Eq | CmpOp::Ne => ("EQ", SortCondition::Eq(next())),
            }
        }
        Cond::Between(..) => {
            let lo = next();
            ("BETWEEN", SortCondition::Between(lo, next()))
        }
        _ => ("BEGINS_WITH", SortCondition::BeginsWith(next())),
    };
    out.push(KeyPredicate { attribute, operator, condition });
    Ok(())
}

impl KeyCondition {
    /// Parses and validates against `schema` (the table's or the queried index's key schema):
    /// only key attributes, the partition key with `=`, value types matching the schema.
    pub fn parse(text: &str, ctx: &mut ExprContext<'_>, schema: &KeySchema) -> Result<KeyCondition> {
        let cond = parse_cond(text, ctx, ExprKind::KeyCondition)?;
        let mut predicates = Vec::new();
        key_predicates(&cond, &mut predicates)?;
        if !(1..=2).contains(&predicates.len()) {
            return Err(key_error("Conditions can be of length 1 or 2 only"));
        }
        for p in &predicates {
            let allowed: &[&str] = match p.operator {
                "EQ" => &["S", "N", "B", "SS", "NS", "BS"],
                "BEGINS_WITH" => &["S", "B"],
                _ => &["S", "N", "B"],
            };
            for v in p.values() {
                let ty = v.value_type().descriptor();
                if !allowed.contains(&ty) {
                    return Err(key_error(format!(
                        "One or more parameter values were invalid: ComparisonOperator {} is not valid for {ty} AttributeValue type",
                        p.operator
                    )));
                }
            }
        }
        let mut by_name: BTreeMap<&str, &KeyPredicate> = predicates.iter().map(|p| (p.attribute.as_str(), p)).collect();
        let mut partition = None;
        let mut sort = None;
        for (is_partition, key) in
            std::iter::once((true, &schema.partition)).chain(schema.sort.as_ref().map(|k| (false, k)))
        {
            if is_partition && schema.sort.is_none() && predicates.len() > 1 {
                return Err(key_error("Query key condition not supported"));
            }
            let Some(p) = by_name.remove(key.name.as_str()) else {
                if is_partition || predicates.len() > 1 {
                    return Err(key_error(format!("Query condition missed key schema element: {}", key.name)));
                }
                continue;
            };
            if p.values().iter().any(|v| !key.ty.matches(v)) {
                return Err(key_error(
                    "One or more parameter values were invalid: Condition parameter type does not match schema type",
                ));
            }
            if is_partition {
                match &p.condition {
                    SortCondition::Eq(v) => partition = Some(v.clone()),
                    _ => return Err(key_error("Query key condition not supported")),
                }
            } else {
                sort = Some(p.condition.clone());
            }
        }
        match partition {
            Some(partition) => Ok(KeyCondition { partition, sort }),
            None => Err(key_error(format!("Query condition missed key schema element: {}", schema.partition.name))),
        }
    }
}

/// A parsed `UpdateExpression`.
pub struct Update {
    actions: Vec<ast::Action>,
}

impl Update {
    /// Parses an update expression (`SET`, `REMOVE`, `ADD`, `DELETE` clauses, each at most once).
    pub fn parse(text: &str, ctx: &mut ExprContext<'_>) -> Result<Update> {
        let kind = ExprKind::Update;
        let mut p = prepare(text, kind, ctx)?;
        let raw = parser::parse_update(&mut p).map_err(|e| kind.invalid(p.syntax_message(e)))?;
        let operators = raw
            .iter()
            .flat_map(|clause| &clause.actions)
            .map(|action| match action {
                ast::RawAction::Set(_, value) => parser::operator_count(value),
                _ => 0,
            })
            .sum();
        check_operators(kind, operators)?;
        let mut r = Resolver::new(&p, ctx, kind);
        let actions = r.update(&raw);
        r.finish().map_err(|m| kind.invalid(m))?;
        Ok(Update { actions })
    }

    /// Top-level attribute names the update writes or removes (the engine rejects key attributes).
    pub fn top_level_attributes(&self) -> BTreeSet<String> {
        self.actions.iter().map(|a| a.path().head().to_string()).collect()
    }

    /// A projection of exactly the paths the update writes or removes: applied to the item
    /// before and after the update it gives `ReturnValues` `UPDATED_OLD` and `UPDATED_NEW`.
    pub fn updated_paths(&self) -> Projection {
        let mut paths: Vec<Path> = self.actions.iter().map(|a| a.path().clone()).collect();
        paths.sort();
        paths.dedup();
        Projection { paths }
    }

    /// Applies the update to `item` in place (an absent item starts as the key alone).
    /// Fails, leaving the caller to discard `item`, on DynamoDB's runtime errors
    /// (type mismatch in arithmetic, ADD/DELETE on wrong types, list index paths, number overflow, empty set results are removals).
    ///
    /// On failure `item` is in fact left exactly as it was: the update works on a copy.
    pub fn apply(&self, item: &mut Item) -> Result<()> {
        update::apply(&self.actions, item)
    }
}

/// A parsed `ProjectionExpression`.
pub struct Projection {
    paths: Vec<Path>,
}

impl Projection {
    /// Parses a projection expression (comma-separated document paths).
    pub fn parse(text: &str, ctx: &mut ExprContext<'_>) -> Result<Projection> {
        let kind = ExprKind::Projection;
        let mut p = prepare(text, kind, ctx)?;
        let raw = parser::parse_projection(&mut p).map_err(|e| kind.invalid(p.syntax_message(e)))?;
        let mut r = Resolver::new(&p, ctx, kind);
        let paths: Vec<Path> = raw.iter().map(|path| r.path(path)).collect();
        r.overlaps(&paths.iter().collect::<Vec<_>>());
        r.finish().map_err(|m| kind.invalid(m))?;
        Ok(Projection { paths })
    }

    /// The projected copy of `item` (nested paths keep their structure, as DynamoDB does).
    pub fn apply(&self, item: &Item) -> Item {
        projection::project(&self.paths, item)
    }

    /// Like [`Projection::apply`], consuming the item: when every path is a top-level
    /// attribute, the others are dropped in place and nothing is copied.
    pub fn apply_owned(&self, mut item: Item) -> Item {
        fn top_level(p: &Path) -> Option<&String> {
            match p.0.as_slice() {
                [PathElem::Key(k)] => Some(k),
                _ => None,
            }
        }
        if !self.paths.iter().all(|p| top_level(p).is_some()) {
            return self.apply(&item);
        }
        item.retain(|name, _| self.paths.iter().any(|p| top_level(p).is_some_and(|k| k == name)));
        item
    }

    /// The top-level attributes the projection reads (for deciding whether an index holds them).
    pub fn top_level_attributes(&self) -> BTreeSet<String> {
        self.paths
            .iter()
            .filter_map(|p| match p.0.first() {
                Some(PathElem::Key(k)) => Some(k.clone()),
                _ => None,
            })
            .collect()
    }
}
