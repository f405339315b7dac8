//! Turns raw syntax trees into resolved ones: substitutes placeholders, checks reserved
//! words, function names, arities and operand types, and path overlaps.
//!
//! DynamoDB reports one error per request, and when an expression has several problems it
//! reports them in a fixed order of kinds (a reserved word before an undefined placeholder,
//! and so on). The resolver therefore walks the whole tree, remembers the first error of each
//! kind, and reports the most important kind at the end.

use std::collections::BTreeMap;

use store::{AttributeValue, ValueType};

use super::ast::{
    Action, ArithOp, ClauseKind, CmpOp, Cond, Operand, Path, PathElem, RawAction, RawClause, RawElem, RawExpr, RawKind,
    RawPath, SetValue, UpdateOperand,
};
use super::eval::compare;
use super::parser::{Parser, SyntaxError};
use super::reserved::is_reserved;
use super::{ExprContext, ExprKind};

/// Kinds of semantic error, in no particular order; each expression kind ranks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Cat {
    Syntax,
    Parens,
    UnknownFunction,
    MisusedFunction,
    Reserved,
    /// An undefined `#name` or `:value`, whichever came first.
    Placeholder,
    AttrName,
    AttrVal,
    Section,
    PathOverlap,
    PathConflict,
    /// `ADD`/`DELETE` operand types.
    Operand,
    OperandCount,
    Distinct,
    Function,
    /// The first atomic condition's most important error among undefined placeholders,
    /// operand counts, distinctness and operand types: DynamoDB settles these one
    /// comparison or function at a time, in source order.
    Condition,
}

const CONDITION_ORDER: &[Cat] =
    &[Cat::Syntax, Cat::Parens, Cat::UnknownFunction, Cat::MisusedFunction, Cat::Reserved, Cat::Condition];

/// The kinds an atomic condition's own error is chosen from, most important first.
const ATOMIC_ORDER: &[Cat] = &[Cat::Placeholder, Cat::OperandCount, Cat::Distinct, Cat::Function];

const UPDATE_ORDER: &[Cat] = &[
    Cat::Syntax,
    Cat::Reserved,
    Cat::UnknownFunction,
    Cat::Section,
    Cat::AttrName,
    Cat::AttrVal,
    Cat::PathOverlap,
    Cat::PathConflict,
    Cat::Operand,
    Cat::OperandCount,
    Cat::Function,
];

const PROJECTION_ORDER: &[Cat] = &[Cat::Syntax, Cat::Reserved, Cat::Placeholder, Cat::PathOverlap, Cat::PathConflict];

/// Resolves the raw trees of one expression.
pub struct Resolver<'p, 's, 'c, 'a> {
    parser: &'p Parser<'s>,
    ctx: &'c mut ExprContext<'a>,
    kind: ExprKind,
    errors: BTreeMap<Cat, String>,
}

impl<'p, 's, 'c, 'a> Resolver<'p, 's, 'c, 'a> {
    pub fn new(parser: &'p Parser<'s>, ctx: &'c mut ExprContext<'a>, kind: ExprKind) -> Self {
        Resolver { parser, ctx, kind, errors: BTreeMap::new() }
    }

    fn report(&mut self, cat: Cat, message: impl FnOnce() -> String) {
        self.errors.entry(cat).or_insert_with(message);
    }

    fn syntax(&mut self, at: usize) {
        let message = self.parser.syntax_message(SyntaxError { at });
        self.report(Cat::Syntax, || message);
    }

    /// The most important error found, as DynamoDB would word it (without the expression prefix).
    pub fn finish(self) -> Result<(), String> {
        let order = match self.kind {
            ExprKind::Update => UPDATE_ORDER,
            ExprKind::Projection => PROJECTION_ORDER,
            _ => CONDITION_ORDER,
        };
        match order.iter().find_map(|cat| self.errors.get(cat)) {
            Some(message) => Err(message.clone()),
            None => Ok(()),
        }
    }

    fn value(&mut self, token: usize) -> AttributeValue {
        let placeholder = self.parser.text(token);
        match self.ctx.value(placeholder) {
            Some(v) => v,
            None => {
                let message = || {
                    format!(
                        "An expression attribute value used in expression is not defined; attribute value: {placeholder}"
                    )
                };
                self.report(Cat::Placeholder, message);
                self.report(Cat::AttrVal, message);
                AttributeValue::Null
            }
        }
    }

    pub fn path(&mut self, raw: &RawPath) -> Path {
        let mut elems = Vec::with_capacity(raw.elems.len());
        for elem in &raw.elems {
            elems.push(match elem {
                RawElem::Ident(t) => {
                    let name = self.parser.text(*t);
                    if is_reserved(name) {
                        self.report(Cat::Reserved, || {
                            format!(
                                "Attribute name is a reserved keyword; reserved keyword: {name}"
                            )
                        });
                    }
                    PathElem::Key(name.to_string())
                }
                RawElem::Name(t) => {
                    let placeholder = self.parser.text(*t);
                    match self.ctx.name(placeholder) {
                        Some(name) => PathElem::Key(name),
                        None => {
                            let message = || {
                                format!(
                                    "An expression attribute name used in the document path is not defined; attribute name: {placeholder}"
                                )
                            };
                            self.report(Cat::Placeholder, message);
                            self.report(Cat::AttrName, message);
                            PathElem::Key(String::new())
                        }
                    }
                }
                // An index beyond any list's length behaves like any other absent element.
                RawElem::Index(n) => PathElem::Index(n.unwrap_or(usize::MAX)),
            });
        }
        Path(elems)
    }

    fn function_name(&self, token: usize) -> &'s str {
        self.parser.text(token)
    }

    fn unknown_function(&mut self, name: &str) {
        self.report(Cat::UnknownFunction, || format!("Invalid function name; function: {name}"));
    }

    fn misused_function(&mut self, name: &str) {
        self.report(Cat::MisusedFunction, || {
            format!("The function is not allowed to be used this way in an expression; function: {name}")
        });
    }

    fn operand_count(&mut self, name: &str, n: usize) {
        let cat = if self.kind == ExprKind::Update { Cat::Function } else { Cat::OperandCount };
        self.report(cat, || {
            format!(
                "Incorrect number of operands for operator or function; operator or function: {name}, number of operands: {n}"
            )
        });
    }

    fn operand_type(&mut self, name: &str, ty: &str) {
        self.report(Cat::Function, || {
            format!("Incorrect operand type for operator or function; operator or function: {name}, operand type: {ty}")
        });
    }

    fn requires_path(&mut self, name: &str) {
        self.report(Cat::Function, || {
            format!("Operator or function requires a document path; operator or function: {name}")
        });
    }

    fn distinct(&mut self, op: &str, a: &Operand, b: &Operand) {
        if let (Operand::Path(x), Operand::Path(y)) = (a, b)
            && x == y
        {
            self.report(Cat::Distinct, || {
                format!(
                    "The first operand must be distinct from the remaining operands for this operator or function; operator: {op}, first operand: {x}"
                )
            });
        }
    }

    /// Strips parentheses, reporting doubled ones.
    fn unparen<'e>(&mut self, mut e: &'e RawExpr) -> &'e RawExpr {
        let mut depth = 0;
        while let RawKind::Paren(inner) = &e.kind {
            depth += 1;
            if depth > 1 {
                self.report(Cat::Parens, || "The expression has redundant parentheses;".to_string());
            }
            e = inner;
        }
        e
    }

    /// Records the error of the atomic condition just resolved, unless an earlier one has.
    fn settle_condition(&mut self) {
        if self.errors.contains_key(&Cat::Condition) {
            return;
        }
        if let Some(message) = ATOMIC_ORDER.iter().find_map(|c| self.errors.get(c)).cloned() {
            self.errors.insert(Cat::Condition, message);
        }
    }

    /// Resolves a node that must be a condition.
    pub fn cond(&mut self, e: &RawExpr) -> Cond {
        let e = self.unparen(e);
        let atomic = !matches!(e.kind, RawKind::Or(_) | RawKind::And(_) | RawKind::Not(_));
        let cond = self.cond_inner(e);
        if atomic {
            self.settle_condition();
        }
        cond
    }

    fn cond_inner(&mut self, e: &RawExpr) -> Cond {
        match &e.kind {
            RawKind::Or(parts) => Cond::Or(parts.iter().map(|p| self.cond(p)).collect()),
            RawKind::And(parts) => Cond::And(parts.iter().map(|p| self.cond(p)).collect()),
            RawKind::Not(inner) => Cond::Not(Box::new(self.cond(inner))),
            RawKind::Cmp(op, l, r) => {
                let a = self.operand(l);
                let b = self.operand(r);
                self.distinct(op.symbol(), &a, &b);
                Cond::Cmp(*op, a, b)
            }
            RawKind::Between(x, lo, hi) => {
                let x = self.operand(x);
                let lo = self.operand(lo);
                let hi = self.operand(hi);
                if let (Operand::Value(a), Operand::Value(b)) = (&lo, &hi) {
                    self.between_bounds(a, b);
                }
                Cond::Between(x, lo, hi)
            }
            RawKind::In(x, list) => {
                let x = self.operand(x);
                let list: Vec<Operand> = list.iter().map(|o| self.operand(o)).collect();
                if list.len() > 100 {
                    let n = list.len() + 1;
                    self.report(Cat::Function, || {
                        format!("The IN operator is provided with too many operands; number of operands: {n}")
                    });
                }
                Cond::In(x, list)
            }
            RawKind::Call { name, args } => self.cond_call(*name, args),
            // A bare operand where a condition belongs is a syntax error at the next token.
            RawKind::Path(_) | RawKind::Value(_) | RawKind::Arith(..) | RawKind::Paren(_) => {
                self.syntax(e.end);
                Cond::And(Vec::new())
            }
        }
    }

    fn between_bounds(&mut self, lo: &AttributeValue, hi: &AttributeValue) {
        let show = |v: &AttributeValue| format!("AttributeValue: {{{}}}", describe(v));
        if lo.value_type() != hi.value_type() {
            self.report(Cat::Function, || {
                format!(
                    "The BETWEEN operator requires same data type for lower and upper bounds; lower bound operand: {}, upper bound operand: {}",
                    show(lo),
                    show(hi)
                )
            });
        } else if compare(lo, hi) == Some(std::cmp::Ordering::Greater) {
            self.report(Cat::Function, || {
                format!(
                    "The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower bound operand: {}, upper bound operand: {}",
                    show(lo),
                    show(hi)
                )
            });
        }
    }

    fn cond_call(&mut self, name_token: usize, args: &[RawExpr]) -> Cond {
        let name = self.function_name(name_token);
        let arity = match name {
            "attribute_exists" | "attribute_not_exists" | "size" => 1,
            "attribute_type" | "begins_with" | "contains" => 2,
            _ => {
                self.unknown_function(name);
                args.iter().for_each(|a| {
                    self.operand(a);
                });
                return Cond::And(Vec::new());
            }
        };
        if name == "size" {
            self.misused_function(name);
        }
        let ops: Vec<Operand> = args.iter().map(|a| self.operand(a)).collect();
        if ops.len() != arity {
            self.operand_count(name, ops.len());
            return Cond::And(Vec::new());
        }
        let mut ops = ops.into_iter();
        let (a, b) = (ops.next(), ops.next());
        match (name, a, b) {
            ("attribute_exists" | "attribute_not_exists", Some(a), _) => match a {
                Operand::Path(p) if name == "attribute_exists" => Cond::Exists(p),
                Operand::Path(p) => Cond::NotExists(p),
                _ => {
                    self.requires_path(name);
                    Cond::And(Vec::new())
                }
            },
            ("size", Some(a), _) => Cond::Cmp(CmpOp::Eq, a.clone(), a),
            ("begins_with", Some(a), Some(b)) => {
                self.distinct(name, &a, &b);
                for op in [&a, &b] {
                    if let Some(ty) = static_type(op)
                        && !matches!(ty, ValueType::S | ValueType::B)
                    {
                        self.operand_type(name, ty.descriptor());
                    }
                }
                Cond::BeginsWith(a, b)
            }
            ("contains", Some(a), Some(b)) => {
                self.distinct(name, &a, &b);
                Cond::Contains(a, b)
            }
            ("attribute_type", Some(a), Some(b)) => {
                self.distinct(name, &a, &b);
                match b {
                    Operand::Value(AttributeValue::S(t)) => match ValueType::from_descriptor(&t) {
                        Some(ty) => Cond::Type(a, ty),
                        None => {
                            self.report(Cat::Function, || {
                            format!(
                                "Invalid attribute type name found; type: {t}, valid types: {{B,NULL,SS,BOOL,L,BS,N,NS,S,M}}"
                            )
                        });
                            Cond::And(Vec::new())
                        }
                    },
                    Operand::Size(_) => {
                        self.operand_type(name, "N");
                        Cond::And(Vec::new())
                    }
                    Operand::Value(v) => {
                        self.operand_type(name, v.value_type().descriptor());
                        Cond::And(Vec::new())
                    }
                    Operand::Path(_) => {
                        self.operand_type(name, "{NS,SS,L,BS,N,M,B,BOOL,NULL,S}");
                        Cond::And(Vec::new())
                    }
                }
            }
            _ => Cond::And(Vec::new()),
        }
    }

    /// Resolves a node that must be an operand of a condition.
    pub fn operand(&mut self, e: &RawExpr) -> Operand {
        let e = self.unparen(e);
        match &e.kind {
            RawKind::Path(p) => Operand::Path(self.path(p)),
            RawKind::Value(t) => Operand::Value(self.value(*t)),
            RawKind::Call { name, args } => {
                let name = self.function_name(*name);
                match name {
                    "size" => {
                        let ops: Vec<Operand> = args.iter().map(|a| self.operand(a)).collect();
                        if ops.len() != 1 {
                            self.operand_count(name, ops.len());
                        }
                        let arg = ops.into_iter().next().unwrap_or(Operand::Path(Path(vec![])));
                        if let Some(ty) = static_type(&arg)
                            && matches!(ty, ValueType::N | ValueType::Bool | ValueType::Null)
                        {
                            self.operand_type(name, ty.descriptor());
                        }
                        Operand::Size(Box::new(arg))
                    }
                    "attribute_exists" | "attribute_not_exists" | "attribute_type" | "begins_with" | "contains" => {
                        self.misused_function(name);
                        Operand::Value(AttributeValue::Null)
                    }
                    _ => {
                        self.unknown_function(name);
                        for arg in args {
                            self.operand(arg);
                        }
                        Operand::Value(AttributeValue::Null)
                    }
                }
            }
            // A condition where an operand belongs: DynamoDB's grammar has no such production.
            _ => {
                self.syntax(e.end);
                Operand::Value(AttributeValue::Null)
            }
        }
    }

    /// Resolves the clauses of an update expression.
    pub fn update(&mut self, clauses: &[RawClause]) -> Vec<Action> {
        let mut seen: Vec<ClauseKind> = Vec::new();
        let mut actions = Vec::new();
        for clause in clauses {
            if seen.contains(&clause.kind) {
                let keyword = clause.kind.keyword();
                self.report(Cat::Section, || {
                    format!("The \"{keyword}\" section can only be used once in an update expression;")
                });
            }
            seen.push(clause.kind);
            for action in &clause.actions {
                let action = match action {
                    RawAction::Set(path, value) => {
                        let path = self.path(path);
                        Action::Set(path, self.set_value(value))
                    }
                    RawAction::Remove(path) => Action::Remove(self.path(path)),
                    RawAction::Add(path, value) => {
                        let path = self.path(path);
                        let value = self.value(*value);
                        if !matches!(value, AttributeValue::N(_)) && !value.is_set() {
                            self.add_delete_type("ADD", &value);
                        }
                        Action::Add(path, value)
                    }
                    RawAction::Delete(path, value) => {
                        let path = self.path(path);
                        let value = self.value(*value);
                        if !value.is_set() {
                            self.add_delete_type("DELETE", &value);
                        }
                        Action::Delete(path, value)
                    }
                };
                actions.push(action);
            }
        }
        let paths: Vec<&Path> = actions.iter().map(Action::path).collect();
        self.overlaps(&paths);
        actions
    }

    fn add_delete_type(&mut self, operator: &str, value: &AttributeValue) {
        let ty = match value.value_type() {
            ValueType::S => "STRING",
            ValueType::N => "NUMBER",
            ValueType::B => "BINARY",
            ValueType::Bool => "BOOLEAN",
            ValueType::Null => "NULL",
            ValueType::L => "LIST",
            ValueType::M => "MAP",
            other => other.descriptor(),
        };
        self.report(Cat::Operand, || {
            format!("Incorrect operand type for operator or function; operator: {operator}, operand type: {ty}")
        });
    }

    fn set_value(&mut self, e: &RawExpr) -> SetValue {
        let e = self.unparen(e);
        match &e.kind {
            RawKind::Arith(op, l, r) => {
                let symbol = match op {
                    ArithOp::Plus => "+",
                    ArithOp::Minus => "-",
                };
                let a = self.update_operand(l);
                let b = self.update_operand(r);
                for operand in [&a, &b] {
                    if let UpdateOperand::Value(v) = operand
                        && !matches!(v, AttributeValue::N(_))
                    {
                        self.operand_type(symbol, v.value_type().descriptor());
                    }
                }
                SetValue::Arith(*op, a, b)
            }
            _ => SetValue::Operand(self.update_operand(e)),
        }
    }

    fn update_operand(&mut self, e: &RawExpr) -> UpdateOperand {
        let e = self.unparen(e);
        match &e.kind {
            RawKind::Path(p) => UpdateOperand::Path(self.path(p)),
            RawKind::Value(t) => UpdateOperand::Value(self.value(*t)),
            RawKind::Call { name, args } => {
                let name = self.function_name(*name);
                if !matches!(name, "if_not_exists" | "list_append") {
                    self.unknown_function(name);
                    return UpdateOperand::Value(AttributeValue::Null);
                }
                let ops: Vec<UpdateOperand> = args.iter().map(|a| self.update_operand(a)).collect();
                if ops.len() != 2 {
                    self.operand_count(name, ops.len());
                    return UpdateOperand::Value(AttributeValue::Null);
                }
                let mut ops = ops.into_iter();
                let (Some(a), Some(b)) = (ops.next(), ops.next()) else {
                    return UpdateOperand::Value(AttributeValue::Null);
                };
                if name == "if_not_exists" {
                    match a {
                        UpdateOperand::Path(p) => UpdateOperand::IfNotExists(p, Box::new(b)),
                        _ => {
                            self.requires_path(name);
                            UpdateOperand::Value(AttributeValue::Null)
                        }
                    }
                } else {
                    for operand in [&a, &b] {
                        if let UpdateOperand::Value(v) = operand
                            && !matches!(v, AttributeValue::L(_))
                        {
                            self.operand_type(name, v.value_type().descriptor());
                        }
                    }
                    UpdateOperand::ListAppend(Box::new(a), Box::new(b))
                }
            }
            // Arithmetic nested inside a function: the grammar allows it only at the top.
            _ => {
                self.syntax(e.start);
                UpdateOperand::Value(AttributeValue::Null)
            }
        }
    }

    /// Reports the first pair of paths where one is a prefix of the other, or where they
    /// disagree on whether a level is a map or a list.
    pub fn overlaps(&mut self, paths: &[&Path]) {
        for (i, later) in paths.iter().enumerate() {
            for earlier in &paths[..i] {
                match relation(earlier, later) {
                    Relation::Disjoint => {}
                    Relation::Overlap => self.report(Cat::PathOverlap, || {
                        format!(
                            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: {earlier}, path two: {later}"
                        )
                    }),
                    Relation::Conflict => self.report(Cat::PathConflict, || {
                        format!(
                            "Two document paths conflict with each other; must remove or rewrite one of these paths; path one: {earlier}, path two: {later}"
                        )
                    }),
                }
            }
        }
    }
}

enum Relation {
    Disjoint,
    Overlap,
    Conflict,
}

fn relation(a: &Path, b: &Path) -> Relation {
    for (x, y) in a.0.iter().zip(&b.0) {
        match (x, y) {
            (PathElem::Key(x), PathElem::Key(y)) if x != y => return Relation::Disjoint,
            (PathElem::Index(x), PathElem::Index(y)) if x != y => return Relation::Disjoint,
            (PathElem::Key(_), PathElem::Index(_)) | (PathElem::Index(_), PathElem::Key(_)) => {
                return Relation::Conflict;
            }
            _ => {}
        }
    }
    Relation::Overlap
}

/// The type an operand is known to have before any item is seen: a constant's own type,
/// or `N` for `size()`.
fn static_type(op: &Operand) -> Option<ValueType> {
    match op {
        Operand::Value(v) => Some(v.value_type()),
        Operand::Size(_) => Some(ValueType::N),
        Operand::Path(_) => None,
    }
}

/// A value as DynamoDB prints it inside error messages: `N:5`, `S:abc`.
fn describe(v: &AttributeValue) -> String {
    match v {
        AttributeValue::S(s) => format!("S:{s}"),
        AttributeValue::N(n) => format!("N:{n}"),
        other => format!("{}:{other:?}", other.value_type().descriptor()),
    }
}
