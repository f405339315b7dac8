//! Typed expressions, rendered to DynamoDB's expression syntax with placeholders.
//!
//! Expressions are values ([`KeyCondition`], [`Condition`], [`Update`], [`Projection`])
//! built with small constructors, so code above this module never concatenates expression
//! text. A [`Renderer`] turns them into text plus [`store::ExpressionAttributes`]:
//!
//! - every attribute name goes through a `#placeholder`, so reserved words (`status`,
//!   `name`, `size`, …) and names with dots or dashes are always safe. A name made only of
//!   ASCII letters, digits and `_` and starting with a letter keeps its own spelling
//!   (`#status`), which makes rendered text readable; any other name gets `#_0`, `#_1`, …
//!   (which no readable placeholder can equal, since those never start with `_`);
//! - every value goes through a `:v0`, `:v1`, … placeholder;
//! - both are deduplicated: the same name or the same value is given one placeholder,
//!   however often it appears, across all the expressions of one request (DynamoDB rejects
//!   placeholders that are declared but unused, and one renderer per request guarantees
//!   none are).
//!
//! ```
//! use model::expr::{attr, Renderer, Update};
//!
//! let mut r = Renderer::new();
//! let cond = r.condition(&attr("status").eq("PAID").and(attr("total").gt(10)));
//! let update = r.update(&Update::new().add("views", 1).remove("draft"));
//! assert_eq!(cond, "#status = :v0 AND #total > :v1");
//! assert_eq!(update, "REMOVE #draft ADD #views :v2");
//! let attrs = r.finish();
//! assert_eq!(attrs.names["#status"], "status");
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use store::{AttributeValue, ExpressionAttributes, ValueType};

/// One step of a document path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathElement {
    /// A map key or top-level attribute name.
    Name(String),
    /// A list index.
    Index(usize),
}

/// A document path: a top-level attribute, then map keys and list indexes.
///
/// `Path::from("a.b")` is the *single* attribute named `a.b` (names may contain dots);
/// use [`Path::key`] and [`Path::index`] to descend.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Path(Vec<PathElement>);

impl Path {
    /// The top-level attribute `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Path(vec![PathElement::Name(name.into())])
    }

    /// Descends into map key `name`.
    pub fn key(mut self, name: impl Into<String>) -> Self {
        self.0.push(PathElement::Name(name.into()));
        self
    }

    /// Descends into list element `index`.
    pub fn index(mut self, index: usize) -> Self {
        self.0.push(PathElement::Index(index));
        self
    }

    /// Its elements.
    pub fn elements(&self) -> &[PathElement] {
        &self.0
    }

    /// The top-level attribute name.
    pub fn top(&self) -> Option<&str> {
        match self.0.first() {
            Some(PathElement::Name(n)) => Some(n),
            _ => None,
        }
    }
}

impl From<&str> for Path {
    fn from(name: &str) -> Self {
        Path::new(name)
    }
}

impl From<String> for Path {
    fn from(name: String) -> Self {
        Path::new(name)
    }
}

impl From<&String> for Path {
    fn from(name: &String) -> Self {
        Path::new(name.clone())
    }
}

/// One side of a comparison: an attribute, a value, or the size of an attribute.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// An attribute's value.
    Path(Path),
    /// A literal value.
    Value(AttributeValue),
    /// `size(path)`.
    Size(Path),
}

impl<T: Into<AttributeValue>> From<T> for Operand {
    fn from(v: T) -> Self {
        Operand::Value(v.into())
    }
}

impl From<Attr> for Operand {
    fn from(a: Attr) -> Self {
        match a.size {
            true => Operand::Size(a.path),
            false => Operand::Path(a.path),
        }
    }
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Comparator {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Comparator {
    /// The operator's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Comparator::Eq => "=",
            Comparator::Ne => "<>",
            Comparator::Lt => "<",
            Comparator::Le => "<=",
            Comparator::Gt => ">",
            Comparator::Ge => ">=",
        }
    }
}

/// A condition or filter expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Condition {
    /// `a op b`.
    Compare(Operand, Comparator, Operand),
    /// `a BETWEEN lo AND hi`.
    Between(Operand, Operand, Operand),
    /// `a IN (b, c, …)`.
    In(Operand, Vec<Operand>),
    /// All of them.
    And(Vec<Condition>),
    /// Any of them.
    Or(Vec<Condition>),
    /// The negation.
    Not(Box<Condition>),
    /// `attribute_exists(path)`.
    Exists(Path),
    /// `attribute_not_exists(path)`.
    NotExists(Path),
    /// `attribute_type(path, :type)`.
    Type(Path, ValueType),
    /// `begins_with(path, prefix)`.
    BeginsWith(Path, Operand),
    /// `contains(path, operand)`.
    Contains(Path, Operand),
}

impl Condition {
    /// `self AND other` (flattened).
    pub fn and(self, other: Condition) -> Condition {
        match (self, other) {
            (Condition::And(mut a), Condition::And(b)) => {
                a.extend(b);
                Condition::And(a)
            }
            (Condition::And(mut a), b) => {
                a.push(b);
                Condition::And(a)
            }
            (a, b) => Condition::And(vec![a, b]),
        }
    }

    /// `self OR other` (flattened).
    pub fn or(self, other: Condition) -> Condition {
        match (self, other) {
            (Condition::Or(mut a), Condition::Or(b)) => {
                a.extend(b);
                Condition::Or(a)
            }
            (Condition::Or(mut a), b) => {
                a.push(b);
                Condition::Or(a)
            }
            (a, b) => Condition::Or(vec![a, b]),
        }
    }

    /// `NOT self`.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Condition {
        Condition::Not(Box::new(self))
    }

    /// All of `conditions`, or `None` when there are none.
    pub fn all(conditions: impl IntoIterator<Item = Condition>) -> Option<Condition> {
        conditions.into_iter().reduce(Condition::and)
    }
}

impl std::ops::Not for Condition {
    type Output = Condition;

    fn not(self) -> Condition {
        Condition::Not(Box::new(self))
    }
}

/// An attribute reference, the starting point of conditions: `attr("total").gt(10)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Attr {
    path: Path,
    size: bool,
}

/// Refers to attribute (or path) `path`.
pub fn attr(path: impl Into<Path>) -> Attr {
    Attr { path: path.into(), size: false }
}

impl Attr {
    /// `size(path)`, to compare: `attr("tags").size().gt(3)`.
    pub fn size(mut self) -> Attr {
        self.size = true;
        self
    }

    fn cmp(self, op: Comparator, other: impl Into<Operand>) -> Condition {
        Condition::Compare(self.into(), op, other.into())
    }

    /// `= other`.
    pub fn eq(self, other: impl Into<Operand>) -> Condition {
        self.cmp(Comparator::Eq, other)
    }

    /// `<> other`.
    pub fn ne(self, other: impl Into<Operand>) -> Condition {
        self.cmp(Comparator::Ne, other)
    }

    /// `< other`.
    pub fn lt(self, other: impl Into<Operand>) -> Condition {
        self.cmp(Comparator::Lt, other)
    }

    /// `<= other`.
    pub fn le(self, other: impl Into<Operand>) -> Condition {
        self.cmp(Comparator::Le, other)
    }

    /// `> other`.
    pub fn gt(self, other: impl Into<Operand>) -> Condition {
        self.cmp(Comparator::Gt, other)
    }

    /// `>= other`.
    pub fn ge(self, other: impl Into<Operand>) -> Condition {
        self.cmp(Comparator::Ge, other)
    }

    /// `BETWEEN lo AND hi`.
    pub fn between(self, lo: impl Into<Operand>, hi: impl Into<Operand>) -> Condition {
        Condition::Between(self.into(), lo.into(), hi.into())
    }

    /// `IN (…)`.
    pub fn is_in<T: Into<Operand>>(self, items: impl IntoIterator<Item = T>) -> Condition {
        Condition::In(self.into(), items.into_iter().map(Into::into).collect())
    }

    /// `attribute_exists(path)`.
    pub fn exists(self) -> Condition {
        Condition::Exists(self.path)
    }

    /// `attribute_not_exists(path)`.
    pub fn not_exists(self) -> Condition {
        Condition::NotExists(self.path)
    }

    /// `attribute_type(path, type)`.
    pub fn has_type(self, ty: ValueType) -> Condition {
        Condition::Type(self.path, ty)
    }

    /// `begins_with(path, prefix)`.
    pub fn begins_with(self, prefix: impl Into<Operand>) -> Condition {
        Condition::BeginsWith(self.path, prefix.into())
    }

    /// `contains(path, operand)`.
    pub fn contains(self, operand: impl Into<Operand>) -> Condition {
        Condition::Contains(self.path, operand.into())
    }
}

/// The condition on a query's sort key.
#[derive(Clone, Debug, PartialEq)]
pub enum SortCondition {
    /// `sk = v`.
    Eq(AttributeValue),
    /// `sk < v`.
    Lt(AttributeValue),
    /// `sk <= v`.
    Le(AttributeValue),
    /// `sk > v`.
    Gt(AttributeValue),
    /// `sk >= v`.
    Ge(AttributeValue),
    /// `sk BETWEEN lo AND hi`.
    Between(AttributeValue, AttributeValue),
    /// `begins_with(sk, prefix)`.
    BeginsWith(AttributeValue),
}

/// A query's key condition: partition key equality and an optional sort key condition.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyCondition {
    /// Partition key attribute name.
    pub partition_attribute: String,
    /// The value the partition key must equal (the rendered key for a template key).
    pub partition_value: AttributeValue,
    /// The sort key attribute name and condition.
    pub sort: Option<(String, SortCondition)>,
}

impl KeyCondition {
    /// `attribute = value`.
    pub fn partition(attribute: impl Into<String>, value: impl Into<AttributeValue>) -> Self {
        KeyCondition { partition_attribute: attribute.into(), partition_value: value.into(), sort: None }
    }

    /// Adds a sort key condition.
    pub fn sort(mut self, attribute: impl Into<String>, condition: SortCondition) -> Self {
        self.sort = Some((attribute.into(), condition));
        self
    }
}

/// An operand of a `SET` action.
#[derive(Clone, Debug, PartialEq)]
pub enum SetOperand {
    /// An attribute's current value.
    Path(Path),
    /// A literal value.
    Value(AttributeValue),
    /// `if_not_exists(path, fallback)`.
    IfNotExists(Path, Box<SetOperand>),
    /// `list_append(a, b)`.
    ListAppend(Box<SetOperand>, Box<SetOperand>),
}

impl<T: Into<AttributeValue>> From<T> for SetOperand {
    fn from(v: T) -> Self {
        SetOperand::Value(v.into())
    }
}

impl SetOperand {
    /// The current value of `path`.
    pub fn path(path: impl Into<Path>) -> Self {
        SetOperand::Path(path.into())
    }

    /// `if_not_exists(path, fallback)`.
    pub fn if_not_exists(path: impl Into<Path>, fallback: impl Into<SetOperand>) -> Self {
        SetOperand::IfNotExists(path.into(), Box::new(fallback.into()))
    }

    /// `list_append(a, b)`.
    pub fn list_append(a: impl Into<SetOperand>, b: impl Into<SetOperand>) -> Self {
        SetOperand::ListAppend(Box::new(a.into()), Box::new(b.into()))
    }
}

/// The right-hand side of a `SET` action.
#[derive(Clone, Debug, PartialEq)]
pub enum SetValue {
    /// One operand.
    Operand(SetOperand),
    /// `a + b`.
    Plus(SetOperand, SetOperand),
    /// `a - b`.
    Minus(SetOperand, SetOperand),
}

impl<T: Into<SetOperand>> From<T> for SetValue {
    fn from(v: T) -> Self {
        SetValue::Operand(v.into())
    }
}

/// An update expression: `SET`, `REMOVE`, `ADD` and `DELETE` actions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Update {
    set: Vec<(Path, SetValue)>,
    remove: Vec<Path>,
    add: Vec<(Path, AttributeValue)>,
    delete: Vec<(Path, AttributeValue)>,
}

impl Update {
    /// An empty update.
    pub fn new() -> Self {
        Update::default()
    }

    /// `SET path = value` (a value, or any [`SetValue`]).
    pub fn set(mut self, path: impl Into<Path>, value: impl Into<SetValue>) -> Self {
        self.set.push((path.into(), value.into()));
        self
    }

    /// `SET path = if_not_exists(path, value)`: sets it only when absent.
    pub fn set_if_absent(self, path: impl Into<Path>, value: impl Into<AttributeValue>) -> Self {
        let path = path.into();
        let v = SetOperand::if_not_exists(path.clone(), SetOperand::Value(value.into()));
        self.set(path, SetValue::Operand(v))
    }

    /// `SET path = if_not_exists(path, 0) + by`: a counter that starts at zero.
    pub fn increment(self, path: impl Into<Path>, by: impl Into<AttributeValue>) -> Self {
        let path = path.into();
        let base = SetOperand::if_not_exists(path.clone(), 0);
        self.set(path, SetValue::Plus(base, SetOperand::Value(by.into())))
    }

    /// `SET path = if_not_exists(path, 0) - by`.
    pub fn decrement(self, path: impl Into<Path>, by: impl Into<AttributeValue>) -> Self {
        let path = path.into();
        let base = SetOperand::if_not_exists(path.clone(), 0);
        self.set(path, SetValue::Minus(base, SetOperand::Value(by.into())))
    }

    /// `SET path = list_append(if_not_exists(path, []), items)`.
    pub fn append(self, path: impl Into<Path>, items: Vec<AttributeValue>) -> Self {
        let path = path.into();
        let base = SetOperand::if_not_exists(path.clone(), AttributeValue::L(Vec::new()));
        self.set(path, SetValue::Operand(SetOperand::list_append(base, AttributeValue::L(items))))
    }

    /// `REMOVE path`.
    pub fn remove(mut self, path: impl Into<Path>) -> Self {
        self.remove.push(path.into());
        self
    }

    /// `ADD path value` (numbers and sets).
    pub fn add(mut self, path: impl Into<Path>, value: impl Into<AttributeValue>) -> Self {
        self.add.push((path.into(), value.into()));
        self
    }

    /// `DELETE path subset` (sets).
    pub fn delete(mut self, path: impl Into<Path>, subset: impl Into<AttributeValue>) -> Self {
        self.delete.push((path.into(), subset.into()));
        self
    }

    /// Whether it has no action.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty() && self.add.is_empty() && self.delete.is_empty()
    }

    /// Whether an action already targets top-level attribute `name`.
    pub fn touches(&self, name: &str) -> bool {
        let top = |p: &Path| matches!(p.0.first(), Some(PathElement::Name(n)) if n == name);
        self.set.iter().any(|(p, _)| top(p))
            || self.remove.iter().any(top)
            || self.add.iter().any(|(p, _)| top(p))
            || self.delete.iter().any(|(p, _)| top(p))
    }

    /// Whether a `SET` action assigns top-level attribute `name`.
    pub fn sets(&self, name: &str) -> bool {
        self.set.iter().any(|(p, _)| p.top() == Some(name))
    }

    /// Whether a `REMOVE` action removes top-level attribute `name` (or a path inside it).
    pub fn removes(&self, name: &str) -> bool {
        self.remove.iter().any(|p| p.top() == Some(name))
    }

    /// The top-level attribute names the actions target.
    pub fn targets(&self) -> Vec<&str> {
        fn top(p: &Path) -> Option<&str> {
            match p.0.first() {
                Some(PathElement::Name(n)) => Some(n.as_str()),
                _ => None,
            }
        }
        self.set
            .iter()
            .map(|(p, _)| p)
            .chain(self.remove.iter())
            .chain(self.add.iter().map(|(p, _)| p))
            .chain(self.delete.iter().map(|(p, _)| p))
            .filter_map(top)
            .collect()
    }

    /// The `SET` actions that assign a plain value, by top-level name.
    pub fn plain_sets(&self) -> impl Iterator<Item = (&str, &AttributeValue)> {
        self.set.iter().filter_map(|(p, v)| match (p.0.as_slice(), v) {
            ([PathElement::Name(n)], SetValue::Operand(SetOperand::Value(v))) => Some((n.as_str(), v)),
            _ => None,
        })
    }
}

/// A projection: the attributes (or paths) to return.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Projection(pub Vec<Path>);

impl Projection {
    /// Projects these top-level attributes.
    pub fn of<P: Into<Path>>(names: impl IntoIterator<Item = P>) -> Self {
        Projection(names.into_iter().map(Into::into).collect())
    }
}

/// Renders expressions of one request, sharing (and deduplicating) placeholders.
#[derive(Debug, Default)]
pub struct Renderer {
    names: BTreeMap<String, String>,
    values: Vec<(AttributeValue, String)>,
    attrs: ExpressionAttributes,
}

fn readable(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Renderer {
    /// A renderer with no placeholders yet.
    pub fn new() -> Self {
        Renderer::default()
    }

    /// The placeholder for attribute name `name`.
    pub fn name(&mut self, name: &str) -> String {
        if let Some(p) = self.names.get(name) {
            return p.clone();
        }
        let placeholder = if readable(name) {
            format!("#{name}")
        } else {
            format!("#_{}", self.names.values().filter(|p| p.starts_with("#_")).count())
        };
        self.names.insert(name.to_string(), placeholder.clone());
        self.attrs.names.insert(placeholder.clone(), name.to_string());
        placeholder
    }

    /// The placeholder for value `value`.
    pub fn value(&mut self, value: &AttributeValue) -> String {
        if let Some((_, p)) = self.values.iter().find(|(v, _)| v == value) {
            return p.clone();
        }
        let placeholder = format!(":v{}", self.values.len());
        self.values.push((value.clone(), placeholder.clone()));
        self.attrs.values.insert(placeholder.clone(), value.clone());
        placeholder
    }

    /// Renders a path.
    pub fn path(&mut self, path: &Path) -> String {
        let mut out = String::new();
        for (i, el) in path.0.iter().enumerate() {
            match el {
                PathElement::Name(n) => {
                    if i > 0 {
                        out.push('.');
                    }
                    let p = self.name(n);
                    out.push_str(&p);
                }
                PathElement::Index(ix) => {
                    let _ = write!(out, "[{ix}]");
                }
            }
        }
        out
    }

    fn operand(&mut self, op: &Operand) -> String {
        match op {
            Operand::Path(p) => self.path(p),
            Operand::Value(v) => self.value(v),
            Operand::Size(p) => format!("size({})", self.path(p)),
        }
    }

    /// Renders a key condition.
    pub fn key_condition(&mut self, kc: &KeyCondition) -> String {
        let pk = self.name(&kc.partition_attribute);
        let pv = self.value(&kc.partition_value);
        let mut out = format!("{pk} = {pv}");
        if let Some((attribute, cond)) = &kc.sort {
            let sk = self.name(attribute);
            let text = match cond {
                SortCondition::Eq(v) => format!("{sk} = {}", self.value(v)),
                SortCondition::Lt(v) => format!("{sk} < {}", self.value(v)),
                SortCondition::Le(v) => format!("{sk} <= {}", self.value(v)),
                SortCondition::Gt(v) => format!("{sk} > {}", self.value(v)),
                SortCondition::Ge(v) => format!("{sk} >= {}", self.value(v)),
                SortCondition::Between(lo, hi) => {
                    let lo = self.value(lo);
                    let hi = self.value(hi);
                    format!("{sk} BETWEEN {lo} AND {hi}")
                }
                SortCondition::BeginsWith(v) => format!("begins_with({sk}, {})", self.value(v)),
            };
            out.push_str(" AND ");
            out.push_str(&text);
        }
        out
    }

    /// Renders a condition or filter.
    pub fn condition(&mut self, c: &Condition) -> String {
        match c {
            Condition::Compare(a, op, b) => {
                let a = self.operand(a);
                let b = self.operand(b);
                format!("{a} {} {b}", op.as_str())
            }
            Condition::Between(a, lo, hi) => {
                let a = self.operand(a);
                let lo = self.operand(lo);
                let hi = self.operand(hi);
                format!("{a} BETWEEN {lo} AND {hi}")
            }
            Condition::In(a, items) => {
                let a = self.operand(a);
                let items: Vec<String> = items.iter().map(|i| self.operand(i)).collect();
                format!("{a} IN ({})", items.join(", "))
            }
            Condition::And(cs) => self.junction(cs, " AND ", |c| matches!(c, Condition::Or(_))),
            Condition::Or(cs) => self.junction(cs, " OR ", |c| matches!(c, Condition::And(_))),
            Condition::Not(inner) => {
                let text = self.condition(inner);
                if matches!(**inner, Condition::And(_) | Condition::Or(_) | Condition::Not(_)) {
                    format!("NOT ({text})")
                } else {
                    format!("NOT {text}")
                }
            }
            Condition::Exists(p) => format!("attribute_exists({})", self.path(p)),
            Condition::NotExists(p) => format!("attribute_not_exists({})", self.path(p)),
            Condition::Type(p, ty) => {
                let p = self.path(p);
                let t = self.value(&AttributeValue::from(ty.descriptor()));
                format!("attribute_type({p}, {t})")
            }
            Condition::BeginsWith(p, v) => {
                let p = self.path(p);
                let v = self.operand(v);
                format!("begins_with({p}, {v})")
            }
            Condition::Contains(p, v) => {
                let p = self.path(p);
                let v = self.operand(v);
                format!("contains({p}, {v})")
            }
        }
    }

    fn junction(&mut self, cs: &[Condition], sep: &str, needs_parens: impl Fn(&Condition) -> bool) -> String {
        // AND binds tighter than OR, so only the other junction needs parentheses; they are
        // added anyway for an empty or single-child junction nested inside, which is harmless.
        let parts: Vec<String> = cs
            .iter()
            .map(|c| {
                let text = self.condition(c);
                if needs_parens(c) { format!("({text})") } else { text }
            })
            .collect();
        parts.join(sep)
    }

    fn set_operand(&mut self, op: &SetOperand) -> String {
        match op {
            SetOperand::Path(p) => self.path(p),
            SetOperand::Value(v) => self.value(v),
            SetOperand::IfNotExists(p, fallback) => {
                let p = self.path(p);
                let f = self.set_operand(fallback);
                format!("if_not_exists({p}, {f})")
            }
            SetOperand::ListAppend(a, b) => {
                let a = self.set_operand(a);
                let b = self.set_operand(b);
                format!("list_append({a}, {b})")
            }
        }
    }

    /// Renders an update expression (clauses in the order SET, REMOVE, ADD, DELETE).
    pub fn update(&mut self, u: &Update) -> String {
        let mut clauses = Vec::new();
        if !u.set.is_empty() {
            let actions: Vec<String> = u
                .set
                .iter()
                .map(|(p, v)| {
                    let p = self.path(p);
                    let v = match v {
                        SetValue::Operand(o) => self.set_operand(o),
                        SetValue::Plus(a, b) => {
                            let a = self.set_operand(a);
                            let b = self.set_operand(b);
                            format!("{a} + {b}")
                        }
                        SetValue::Minus(a, b) => {
                            let a = self.set_operand(a);
                            let b = self.set_operand(b);
                            format!("{a} - {b}")
                        }
                    };
                    format!("{p} = {v}")
                })
                .collect();
            clauses.push(format!("SET {}", actions.join(", ")));
        }
        if !u.remove.is_empty() {
            let paths: Vec<String> = u.remove.iter().map(|p| self.path(p)).collect();
            clauses.push(format!("REMOVE {}", paths.join(", ")));
        }
        for (keyword, actions) in [("ADD", &u.add), ("DELETE", &u.delete)] {
            if !actions.is_empty() {
                let actions: Vec<String> = actions
                    .iter()
                    .map(|(p, v)| {
                        let p = self.path(p);
                        let v = self.value(v);
                        format!("{p} {v}")
                    })
                    .collect();
                clauses.push(format!("{keyword} {}", actions.join(", ")));
            }
        }
        clauses.join(" ")
    }

    /// Renders a projection.
    pub fn projection(&mut self, p: &Projection) -> String {
        let paths: Vec<String> = p.0.iter().map(|p| self.path(p)).collect();
        paths.join(", ")
    }

    /// The names and values used so far.
    pub fn attributes(&self) -> &ExpressionAttributes {
        &self.attrs
    }

    /// Consumes the renderer, returning the names and values used.
    pub fn finish(self) -> ExpressionAttributes {
        self.attrs
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use store::{AttributeValue, ValueType};

    use super::*;

    /// Renders with `f` and shows the text followed by the placeholders, on one line.
    fn check(f: impl FnOnce(&mut Renderer) -> String, expect: Expect) {
        let mut r = Renderer::new();
        let text = f(&mut r);
        let attrs = r.finish();
        let names: Vec<String> = attrs.names.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let values: Vec<String> = attrs.values.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        expect.assert_eq(&format!("{text} | {} | {}", names.join(" "), values.join(" ")));
    }

    fn cond(c: Condition, e: Expect) {
        check(|r| r.condition(&c), e)
    }

    fn upd(u: Update, e: Expect) {
        check(|r| r.update(&u), e)
    }

    fn key(k: KeyCondition, e: Expect) {
        check(|r| r.key_condition(&k), e)
    }

    #[test]
    fn key_conditions() {
        let pk = || KeyCondition::partition("pk", "SITE#1");
        key(pk(), expect![[r#"#pk = :v0 | #pk=pk | :v0=S("SITE#1")"#]]);
        key(
            pk().sort("sk", SortCondition::Eq("A".into())),
            expect![[r#"#pk = :v0 AND #sk = :v1 | #pk=pk #sk=sk | :v0=S("SITE#1") :v1=S("A")"#]],
        );
        key(
            pk().sort("sk", SortCondition::Lt("A".into())),
            expect![[r#"#pk = :v0 AND #sk < :v1 | #pk=pk #sk=sk | :v0=S("SITE#1") :v1=S("A")"#]],
        );
        key(
            pk().sort("sk", SortCondition::Le("A".into())),
            expect![[r#"#pk = :v0 AND #sk <= :v1 | #pk=pk #sk=sk | :v0=S("SITE#1") :v1=S("A")"#]],
        );
        key(
            pk().sort("sk", SortCondition::Gt("A".into())),
            expect![[r#"#pk = :v0 AND #sk > :v1 | #pk=pk #sk=sk | :v0=S("SITE#1") :v1=S("A")"#]],
        );
        key(
            pk().sort("sk", SortCondition::Ge("A".into())),
            expect![[r#"#pk = :v0 AND #sk >= :v1 | #pk=pk #sk=sk | :v0=S("SITE#1") :v1=S("A")"#]],
        );
        key(
            pk().sort("sk", SortCondition::Between("A".into(), "B".into())),
            expect![[
                r#"#pk = :v0 AND #sk BETWEEN :v1 AND :v2 | #pk=pk #sk=sk | :v0=S("SITE#1") :v1=S("A") :v2=S("B")"#
            ]],
        );
        key(
            pk().sort("sk", SortCondition::BeginsWith("PV#".into())),
            expect![[r#"#pk = :v0 AND begins_with(#sk, :v1) | #pk=pk #sk=sk | :v0=S("SITE#1") :v1=S("PV#")"#]],
        );
        // The same value on both sides gets one placeholder.
        key(
            KeyCondition::partition("pk", "X").sort("sk", SortCondition::Eq("X".into())),
            expect![[r#"#pk = :v0 AND #sk = :v0 | #pk=pk #sk=sk | :v0=S("X")"#]],
        );
    }

    #[test]
    fn conditions() {
        cond(attr("status").eq("PAID"), expect![[r#"#status = :v0 | #status=status | :v0=S("PAID")"#]]);
        cond(attr("a").ne(1), expect![[r#"#a <> :v0 | #a=a | :v0=N(Number(1))"#]]);
        cond(attr("a").lt(attr("b")), expect!["#a < #b | #a=a #b=b | "]);
        cond(attr("a").le(1), expect!["#a <= :v0 | #a=a | :v0=N(Number(1))"]);
        cond(attr("a").gt(1), expect!["#a > :v0 | #a=a | :v0=N(Number(1))"]);
        cond(attr("a").ge(1), expect!["#a >= :v0 | #a=a | :v0=N(Number(1))"]);
        cond(attr("a").between(1, 5), expect!["#a BETWEEN :v0 AND :v1 | #a=a | :v0=N(Number(1)) :v1=N(Number(5))"]);
        cond(attr("s").is_in(["a", "b", "a"]), expect![[r#"#s IN (:v0, :v1, :v0) | #s=s | :v0=S("a") :v1=S("b")"#]]);
        cond(attr("x").exists(), expect!["attribute_exists(#x) | #x=x | "]);
        cond(attr("x").not_exists(), expect!["attribute_not_exists(#x) | #x=x | "]);
        cond(attr("x").has_type(ValueType::Ss), expect![[r#"attribute_type(#x, :v0) | #x=x | :v0=S("SS")"#]]);
        cond(attr("x").begins_with("ab"), expect![[r#"begins_with(#x, :v0) | #x=x | :v0=S("ab")"#]]);
        cond(attr("tags").contains("red"), expect![[r#"contains(#tags, :v0) | #tags=tags | :v0=S("red")"#]]);
        cond(attr("tags").size().gt(3), expect!["size(#tags) > :v0 | #tags=tags | :v0=N(Number(3))"]);
        cond(
            attr("a").eq(1).and(attr("b").eq(2)).and(attr("c").eq(3)),
            expect![
                "#a = :v0 AND #b = :v1 AND #c = :v2 | #a=a #b=b #c=c | :v0=N(Number(1)) :v1=N(Number(2)) :v2=N(Number(3))"
            ],
        );
        cond(
            attr("a").eq(1).or(attr("b").eq(1)).and(attr("c").eq(1)),
            expect!["(#a = :v0 OR #b = :v0) AND #c = :v0 | #a=a #b=b #c=c | :v0=N(Number(1))"],
        );
        cond(
            attr("a").eq(1).and(attr("b").eq(1)).or(attr("c").eq(1)),
            expect!["(#a = :v0 AND #b = :v0) OR #c = :v0 | #a=a #b=b #c=c | :v0=N(Number(1))"],
        );
        cond(!attr("a").exists(), expect!["NOT attribute_exists(#a) | #a=a | "]);
        cond(
            !(attr("a").eq(1).or(attr("b").eq(2))),
            expect!["NOT (#a = :v0 OR #b = :v1) | #a=a #b=b | :v0=N(Number(1)) :v1=N(Number(2))"],
        );
    }

    #[test]
    fn names_are_always_placeholders() {
        // Reserved words, dots, dashes and a leading underscore are all safe.
        cond(attr("size").eq(1), expect!["#size = :v0 | #size=size | :v0=N(Number(1))"]);
        cond(
            attr("a.b").eq(attr("c-d")).and(attr("_et").eq("X")),
            expect![[r#"#_0 = #_1 AND #_2 = :v0 | #_0=a.b #_1=c-d #_2=_et | :v0=S("X")"#]],
        );
        cond(
            attr(Path::new("m").key("k").index(2).key("z")).exists(),
            expect!["attribute_exists(#m.#k[2].#z) | #k=k #m=m #z=z | "],
        );
        cond(attr("é").eq(1), expect!["#_0 = :v0 | #_0=é | :v0=N(Number(1))"]);
    }

    #[test]
    fn updates() {
        upd(Update::new().set("a", 1), expect!["SET #a = :v0 | #a=a | :v0=N(Number(1))"]);
        upd(
            Update::new().increment("views", 1),
            expect!["SET #views = if_not_exists(#views, :v0) + :v1 | #views=views | :v0=N(Number(0)) :v1=N(Number(1))"],
        );
        upd(
            Update::new().decrement("stock", 2),
            expect!["SET #stock = if_not_exists(#stock, :v0) - :v1 | #stock=stock | :v0=N(Number(0)) :v1=N(Number(2))"],
        );
        upd(
            Update::new().set("a", SetValue::Plus(SetOperand::path("a"), SetOperand::path("b"))),
            expect!["SET #a = #a + #b | #a=a #b=b | "],
        );
        upd(
            Update::new().set_if_absent("first_seen", 5),
            expect!["SET #first_seen = if_not_exists(#first_seen, :v0) | #first_seen=first_seen | :v0=N(Number(5))"],
        );
        upd(
            Update::new().append("log", vec!["x".into()]),
            expect![[
                r#"SET #log = list_append(if_not_exists(#log, :v0), :v1) | #log=log | :v0=L([]) :v1=L([S("x")])"#
            ]],
        );
        upd(Update::new().remove("a").remove(Path::new("m").key("k")), expect!["REMOVE #a, #m.#k | #a=a #k=k #m=m | "]);
        upd(
            Update::new().add("n", 1).add("tags", AttributeValue::Ss(["x".to_string()].into())),
            expect![[r#"ADD #n :v0, #tags :v1 | #n=n #tags=tags | :v0=N(Number(1)) :v1=Ss({"x"})"#]],
        );
        upd(
            Update::new().delete("tags", AttributeValue::Ss(["x".to_string()].into())),
            expect![[r#"DELETE #tags :v0 | #tags=tags | :v0=Ss({"x"})"#]],
        );
        upd(
            Update::new().delete("d", AttributeValue::Ss(["x".to_string()].into())).add("c", 1).remove("b").set("a", 1),
            expect![[
                r#"SET #a = :v0 REMOVE #b ADD #c :v0 DELETE #d :v1 | #a=a #b=b #c=c #d=d | :v0=N(Number(1)) :v1=Ss({"x"})"#
            ]],
        );
    }

    #[test]
    fn projections_share_placeholders_with_other_expressions() {
        check(
            |r| {
                let k = r.key_condition(&KeyCondition::partition("pk", "A"));
                let f = r.condition(&attr("name").begins_with("A"));
                let p = r.projection(&Projection::of(["pk", "name", "list.x"]));
                format!("{k} ; {f} ; {p}")
            },
            expect![[
                r#"#pk = :v0 ; begins_with(#name, :v0) ; #pk, #name, #_0 | #_0=list.x #name=name #pk=pk | :v0=S("A")"#
            ]],
        );
    }

    fn name() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            Just("status".to_string()),
            Just("_et".to_string()),
            Just("a.b".to_string()),
            "[a-z_#:. ]{1,6}",
            any::<String>().prop_filter("non-empty", |s| !s.is_empty())
        ]
    }

    fn condition() -> impl proptest::strategy::Strategy<Value = Condition> {
        use proptest::prelude::*;
        let value = prop_oneof![any::<i64>().prop_map(AttributeValue::from), ".{0,4}".prop_map(AttributeValue::from)];
        let leaf = prop_oneof![
            (name(), value.clone()).prop_map(|(n, v)| attr(n).eq(v)),
            (name(), name()).prop_map(|(a, b)| attr(a).lt(attr(b))),
            (name(), value.clone(), value.clone()).prop_map(|(n, a, b)| attr(n).between(a, b)),
            (name(), proptest::collection::vec(value.clone(), 1..4)).prop_map(|(n, vs)| attr(n).is_in(vs)),
            name().prop_map(|n| attr(n).exists()),
            (name(), value.clone()).prop_map(|(n, v)| attr(n).size().ge(v)),
            (name(), value).prop_map(|(n, v)| attr(n).begins_with(v)),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
                inner.prop_map(|c| !c),
            ]
        })
    }

    proptest::proptest! {
        /// Every placeholder in the text is declared, every declared one is used, and no
        /// attribute name or value leaks into the text.
        #[test]
        fn placeholders_are_declared_used_and_deduplicated(c in condition()) {
            let mut r = Renderer::new();
            let text = r.condition(&c);
            let attrs = r.finish();
            let tokens: std::collections::BTreeSet<&str> = text
                .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '#' || ch == ':'))
                .filter(|t| t.starts_with('#') || t.starts_with(':'))
                .collect();
            let declared: std::collections::BTreeSet<&str> =
                attrs.names.keys().chain(attrs.values.keys()).map(String::as_str).collect();
            proptest::prop_assert_eq!(tokens, declared);
            let distinct_names: std::collections::BTreeSet<&String> = attrs.names.values().collect();
            proptest::prop_assert_eq!(distinct_names.len(), attrs.names.len());
            let values: Vec<&AttributeValue> = attrs.values.values().collect();
            for (i, v) in values.iter().enumerate() {
                proptest::prop_assert!(!values[..i].contains(v), "value {:?} has two placeholders", v);
            }
            proptest::prop_assert!(text.len() < 100_000);
        }
    }
}
