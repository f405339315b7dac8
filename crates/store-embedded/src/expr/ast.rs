//! The two trees of an expression: the raw syntax tree the parser builds (placeholders and
//! bare names still as tokens), and the resolved trees that evaluation works on.
//!
//! Keeping them apart lets every syntax error win over every semantic error, as in DynamoDB,
//! and lets the resolver report semantic errors in DynamoDB's order of precedence.

use std::cmp::Ordering;
use std::fmt;

use store::{AttributeValue, ValueType};

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// The operator seen from the other side (`a < b` is `b > a`).
    pub fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            other => other,
        }
    }
}

/// `+` or `-` in a `SET` action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    Plus,
    Minus,
}

/// One element of a raw document path; token indexes point into the token list.
#[derive(Clone, Debug)]
pub enum RawElem {
    /// A bare attribute name.
    Ident(usize),
    /// A `#name` placeholder.
    Name(usize),
    /// A list index (its value; `None` when too large to be any list's index).
    Index(Option<usize>),
}

/// A raw document path.
#[derive(Clone, Debug)]
pub struct RawPath {
    pub elems: Vec<RawElem>,
}

/// A raw expression node and the token range `[start, end)` it came from.
#[derive(Clone, Debug)]
pub struct RawExpr {
    pub kind: RawKind,
    pub start: usize,
    pub end: usize,
}

/// The shapes a raw expression can take.
#[derive(Clone, Debug)]
pub enum RawKind {
    Path(RawPath),
    /// A `:value` placeholder (token index).
    Value(usize),
    /// `name(args…)`; `name` is the token index of the function name.
    Call {
        name: usize,
        args: Vec<RawExpr>,
    },
    Paren(Box<RawExpr>),
    Cmp(CmpOp, Box<RawExpr>, Box<RawExpr>),
    Between(Box<RawExpr>, Box<RawExpr>, Box<RawExpr>),
    In(Box<RawExpr>, Vec<RawExpr>),
    Not(Box<RawExpr>),
    And(Vec<RawExpr>),
    Or(Vec<RawExpr>),
    Arith(ArithOp, Box<RawExpr>, Box<RawExpr>),
}

/// The clauses of an update expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClauseKind {
    Set,
    Remove,
    Add,
    Delete,
}

impl ClauseKind {
    /// DynamoDB's spelling.
    pub fn keyword(self) -> &'static str {
        match self {
            ClauseKind::Set => "SET",
            ClauseKind::Remove => "REMOVE",
            ClauseKind::Add => "ADD",
            ClauseKind::Delete => "DELETE",
        }
    }
}

/// One raw update action.
#[derive(Clone, Debug)]
pub enum RawAction {
    Set(RawPath, RawExpr),
    Remove(RawPath),
    /// `ADD path :value` (the value's token index).
    Add(RawPath, usize),
    /// `DELETE path :value`.
    Delete(RawPath, usize),
}

/// One clause: its keyword and actions.
#[derive(Clone, Debug)]
pub struct RawClause {
    pub kind: ClauseKind,
    pub actions: Vec<RawAction>,
}

/// One element of a resolved document path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathElem {
    /// A map key (or, first, a top-level attribute name).
    Key(String),
    /// A list index.
    Index(usize),
}

impl PartialOrd for PathElem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PathElem {
    /// Keys by name, indexes numerically; the two kinds never meet under one parent in a
    /// valid update, so their relative order only has to be total.
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElem::Key(a), PathElem::Key(b)) => a.cmp(b),
            (PathElem::Index(a), PathElem::Index(b)) => a.cmp(b),
            (PathElem::Key(_), PathElem::Index(_)) => Ordering::Less,
            (PathElem::Index(_), PathElem::Key(_)) => Ordering::Greater,
        }
    }
}

/// A resolved document path: a top-level attribute name, then keys and indexes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Path(pub Vec<PathElem>);

impl Path {
    /// The top-level attribute the path starts at.
    pub fn head(&self) -> &str {
        match self.0.first() {
            Some(PathElem::Key(k)) => k,
            _ => "",
        }
    }
}

impl fmt::Display for Path {
    /// DynamoDB's rendering in error messages: `[a, b, [0]]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, elem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match elem {
                PathElem::Key(k) => f.write_str(k)?,
                PathElem::Index(n) => write!(f, "[{n}]")?,
            }
        }
        f.write_str("]")
    }
}

/// An operand of a condition.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Path(Path),
    Value(AttributeValue),
    Size(Box<Operand>),
}

/// A resolved condition.
#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    Cmp(CmpOp, Operand, Operand),
    Between(Operand, Operand, Operand),
    In(Operand, Vec<Operand>),
    Exists(Path),
    NotExists(Path),
    Type(Operand, ValueType),
    BeginsWith(Operand, Operand),
    Contains(Operand, Operand),
    Not(Box<Cond>),
    And(Vec<Cond>),
    Or(Vec<Cond>),
}

/// An operand of a `SET` action's value.
#[derive(Clone, Debug, PartialEq)]
pub enum UpdateOperand {
    Path(Path),
    Value(AttributeValue),
    IfNotExists(Path, Box<UpdateOperand>),
    ListAppend(Box<UpdateOperand>, Box<UpdateOperand>),
}

/// The value of a `SET` action.
#[derive(Clone, Debug, PartialEq)]
pub enum SetValue {
    Operand(UpdateOperand),
    Arith(ArithOp, UpdateOperand, UpdateOperand),
}

/// A resolved update action.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Set(Path, SetValue),
    Remove(Path),
    Add(Path, AttributeValue),
    Delete(Path, AttributeValue),
}

impl Action {
    /// The path the action writes or removes.
    pub fn path(&self) -> &Path {
        match self {
            Action::Set(p, _) | Action::Remove(p) | Action::Add(p, _) | Action::Delete(p, _) => p,
        }
    }
}
