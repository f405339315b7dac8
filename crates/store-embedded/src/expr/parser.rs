//! Recursive-descent parsers for the three expression grammars: conditions (also key
//! conditions and filters), updates and projections.
//!
//! Conditions are parsed with one grammar for conditions and operands alike, with DynamoDB's
//! precedence (`OR` < `AND` < `NOT` < comparisons), so that no input needs backtracking; the
//! resolver then checks that each node is used as a condition or as an operand. Nesting is
//! bounded so that no input can exhaust the stack.

use super::ast::{ArithOp, ClauseKind, CmpOp, RawAction, RawClause, RawElem, RawExpr, RawKind, RawPath};
use super::lexer::{Token, TokenKind, tokenize};

/// Deepest nesting of parentheses, `NOT`s and function calls accepted.
///
/// DynamoDB's own limit is not documented; this one is far above anything a real expression
/// needs and far below what would threaten the stack.
const MAX_DEPTH: usize = 100;

/// A syntax error at token `at` (`at == tokens.len()` is the end of the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxError {
    pub at: usize,
}

type PResult<T> = Result<T, SyntaxError>;

/// A tokenized expression and a cursor over it.
pub struct Parser<'s> {
    pub src: &'s str,
    pub tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl<'s> Parser<'s> {
    pub fn new(src: &'s str) -> Self {
        Parser { src, tokens: tokenize(src), pos: 0, depth: 0 }
    }

    /// The source text of token `i`.
    pub fn text(&self, i: usize) -> &'s str {
        self.tokens.get(i).map_or("", |t| &self.src[t.span.clone()])
    }

    /// DynamoDB's syntax error text: the offending token and its neighbourhood as written.
    pub fn syntax_message(&self, err: SyntaxError) -> String {
        let n = self.tokens.len();
        let (token, near) = if err.at >= n {
            let from = n.saturating_sub(2);
            let near = match (self.tokens.get(from), self.tokens.last()) {
                (Some(a), Some(b)) => &self.src[a.span.start..b.span.end],
                _ => "",
            };
            ("<EOF>", near)
        } else {
            let from = &self.tokens[err.at.saturating_sub(1)];
            let to = &self.tokens[(err.at + 1).min(n - 1)];
            (self.text(err.at), &self.src[from.span.start..to.span.end])
        };
        format!("Syntax error; token: \"{token}\", near: \"{near}\"")
    }

    fn peek(&self) -> Option<&TokenKind> {
        self.tokens.get(self.pos).map(|t| &t.kind)
    }

    fn peek_at(&self, offset: usize) -> Option<&TokenKind> {
        self.tokens.get(self.pos + offset).map(|t| &t.kind)
    }

    fn error<T>(&self) -> PResult<T> {
        Err(SyntaxError { at: self.pos })
    }

    fn expect(&mut self, kind: TokenKind) -> PResult<usize> {
        if self.peek() == Some(&kind) {
            self.pos += 1;
            Ok(self.pos - 1)
        } else {
            self.error()
        }
    }

    fn expect_end(&self) -> PResult<()> {
        if self.pos == self.tokens.len() { Ok(()) } else { self.error() }
    }

    /// Whether the current token is the keyword `word` (case-insensitive).
    fn at_keyword(&self, word: &str) -> bool {
        self.peek() == Some(&TokenKind::Ident) && self.text(self.pos).eq_ignore_ascii_case(word)
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.error();
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn node(&self, kind: RawKind, start: usize) -> RawExpr {
        RawExpr { kind, start, end: self.pos }
    }

    /// A document path; `keywords` are the grammar's words that cannot name an attribute.
    fn path(&mut self, keywords: &[&str]) -> PResult<RawPath> {
        let mut elems = vec![self.path_name(keywords)?];
        loop {
            match self.peek() {
                Some(TokenKind::Dot) => {
                    self.pos += 1;
                    elems.push(self.path_name(keywords)?);
                }
                Some(TokenKind::LBracket) => {
                    self.pos += 1;
                    let at = self.expect(TokenKind::Int)?;
                    self.expect(TokenKind::RBracket)?;
                    elems.push(RawElem::Index(self.text(at).parse().ok()));
                }
                _ => return Ok(RawPath { elems }),
            }
        }
    }

    fn path_name(&mut self, keywords: &[&str]) -> PResult<RawElem> {
        match self.peek() {
            Some(TokenKind::Ident) if !keywords.iter().any(|k| self.text(self.pos).eq_ignore_ascii_case(k)) => {
                self.pos += 1;
                Ok(RawElem::Ident(self.pos - 1))
            }
            Some(TokenKind::Name) => {
                self.pos += 1;
                Ok(RawElem::Name(self.pos - 1))
            }
            _ => self.error(),
        }
    }
}

const CONDITION_KEYWORDS: &[&str] = &["AND", "OR", "NOT", "BETWEEN", "IN"];
const UPDATE_KEYWORDS: &[&str] = &["SET", "REMOVE", "ADD", "DELETE"];

/// Parses a condition, key condition or filter expression.
pub fn parse_condition(p: &mut Parser<'_>) -> PResult<RawExpr> {
    let e = cond_or(p)?;
    p.expect_end()?;
    Ok(e)
}

fn cond_or(p: &mut Parser<'_>) -> PResult<RawExpr> {
    let start = p.pos;
    let mut parts = vec![cond_and(p)?];
    while p.at_keyword("OR") {
        p.pos += 1;
        parts.push(cond_and(p)?);
    }
    Ok(match parts.len() {
        1 => parts.remove(0),
        _ => p.node(RawKind::Or(parts), start),
    })
}

fn cond_and(p: &mut Parser<'_>) -> PResult<RawExpr> {
    let start = p.pos;
    let mut parts = vec![cond_not(p)?];
    while p.at_keyword("AND") {
        p.pos += 1;
        parts.push(cond_not(p)?);
    }
    Ok(match parts.len() {
        1 => parts.remove(0),
        _ => p.node(RawKind::And(parts), start),
    })
}

fn cond_not(p: &mut Parser<'_>) -> PResult<RawExpr> {
    let start = p.pos;
    if p.at_keyword("NOT") {
        p.pos += 1;
        p.enter()?;
        let inner = cond_not(p)?;
        p.leave();
        return Ok(p.node(RawKind::Not(Box::new(inner)), start));
    }
    cond_compare(p)
}

fn cond_compare(p: &mut Parser<'_>) -> PResult<RawExpr> {
    let start = p.pos;
    let left = cond_primary(p)?;
    let op = match p.peek() {
        Some(TokenKind::Eq) => Some(CmpOp::Eq),
        Some(TokenKind::Ne) => Some(CmpOp::Ne),
        Some(TokenKind::Lt) => Some(CmpOp::Lt),
        Some(TokenKind::Le) => Some(CmpOp::Le),
        Some(TokenKind::Gt) => Some(CmpOp::Gt),
        Some(TokenKind::Ge) => Some(CmpOp::Ge),
        _ => None,
    };
    if let Some(op) = op {
        p.pos += 1;
        let right = cond_primary(p)?;
        return Ok(p.node(RawKind::Cmp(op, Box::new(left), Box::new(right)), start));
    }
    if p.at_keyword("BETWEEN") {
        p.pos += 1;
        let lo = cond_primary(p)?;
        if !p.at_keyword("AND") {
            return p.error();
        }
        p.pos += 1;
        let hi = cond_primary(p)?;
        return Ok(p.node(RawKind::Between(Box::new(left), Box::new(lo), Box::new(hi)), start));
    }
    if p.at_keyword("IN") {
        p.pos += 1;
        p.expect(TokenKind::LParen)?;
        let mut list = vec![cond_primary(p)?];
        while p.peek() == Some(&TokenKind::Comma) {
            p.pos += 1;
            list.push(cond_primary(p)?);
        }
        p.expect(TokenKind::RParen)?;
        return Ok(p.node(RawKind::In(Box::new(left), list), start));
    }
    Ok(left)
}

fn cond_primary(p: &mut Parser<'_>) -> PResult<RawExpr> {
    let start = p.pos;
    match p.peek() {
        Some(TokenKind::LParen) => {
            p.pos += 1;
            p.enter()?;
            let inner = cond_or(p)?;
            p.leave();
            p.expect(TokenKind::RParen)?;
            Ok(p.node(RawKind::Paren(Box::new(inner)), start))
        }
        Some(TokenKind::Value) => {
            p.pos += 1;
            Ok(p.node(RawKind::Value(start), start))
        }
        Some(TokenKind::Ident) if p.peek_at(1) == Some(&TokenKind::LParen) => {
            if CONDITION_KEYWORDS.iter().any(|k| p.text(start).eq_ignore_ascii_case(k)) {
                return p.error();
            }
            p.pos += 2;
            p.enter()?;
            let mut args = vec![cond_primary(p)?];
            while p.peek() == Some(&TokenKind::Comma) {
                p.pos += 1;
                args.push(cond_primary(p)?);
            }
            p.leave();
            p.expect(TokenKind::RParen)?;
            Ok(p.node(RawKind::Call { name: start, args }, start))
        }
        _ => {
            let path = p.path(CONDITION_KEYWORDS)?;
            Ok(p.node(RawKind::Path(path), start))
        }
    }
}

/// Parses an update expression into its clauses.
pub fn parse_update(p: &mut Parser<'_>) -> PResult<Vec<RawClause>> {
    let mut clauses = Vec::new();
    loop {
        let kind = if p.at_keyword("SET") {
            ClauseKind::Set
        } else if p.at_keyword("REMOVE") {
            ClauseKind::Remove
        } else if p.at_keyword("ADD") {
            ClauseKind::Add
        } else if p.at_keyword("DELETE") {
            ClauseKind::Delete
        } else if clauses.is_empty() || p.pos < p.tokens.len() {
            return p.error();
        } else {
            return Ok(clauses);
        };
        p.pos += 1;
        let mut actions = vec![update_action(p, kind)?];
        while p.peek() == Some(&TokenKind::Comma) {
            p.pos += 1;
            actions.push(update_action(p, kind)?);
        }
        clauses.push(RawClause { kind, actions });
    }
}

fn update_action(p: &mut Parser<'_>, kind: ClauseKind) -> PResult<RawAction> {
    let path = p.path(UPDATE_KEYWORDS)?;
    Ok(match kind {
        ClauseKind::Set => {
            p.expect(TokenKind::Eq)?;
            RawAction::Set(path, set_value(p, true)?)
        }
        ClauseKind::Remove => RawAction::Remove(path),
        ClauseKind::Add => RawAction::Add(path, p.expect(TokenKind::Value)?),
        ClauseKind::Delete => RawAction::Delete(path, p.expect(TokenKind::Value)?),
    })
}

/// A `SET` value: `operand`, or at the top level `operand + operand` / `operand - operand`.
fn set_value(p: &mut Parser<'_>, top: bool) -> PResult<RawExpr> {
    let start = p.pos;
    let left = set_operand(p, top)?;
    let op = match p.peek() {
        Some(TokenKind::Plus) => ArithOp::Plus,
        Some(TokenKind::Minus) => ArithOp::Minus,
        _ => return Ok(left),
    };
    // Arithmetic takes plain operands only: a parenthesised sum cannot be added to.
    if !top || is_paren_arith(&left) {
        return p.error();
    }
    p.pos += 1;
    let right = set_operand(p, false)?;
    Ok(p.node(RawKind::Arith(op, Box::new(left), Box::new(right)), start))
}

fn is_paren_arith(e: &RawExpr) -> bool {
    match &e.kind {
        RawKind::Paren(inner) => matches!(inner.kind, RawKind::Arith(..)) || is_paren_arith(inner),
        _ => false,
    }
}

fn set_operand(p: &mut Parser<'_>, top: bool) -> PResult<RawExpr> {
    let start = p.pos;
    match p.peek() {
        Some(TokenKind::LParen) => {
            p.pos += 1;
            p.enter()?;
            let inner = set_value(p, top)?;
            p.leave();
            p.expect(TokenKind::RParen)?;
            Ok(p.node(RawKind::Paren(Box::new(inner)), start))
        }
        Some(TokenKind::Value) => {
            p.pos += 1;
            Ok(p.node(RawKind::Value(start), start))
        }
        Some(TokenKind::Ident) if p.peek_at(1) == Some(&TokenKind::LParen) => {
            if UPDATE_KEYWORDS.iter().any(|k| p.text(start).eq_ignore_ascii_case(k)) {
                return p.error();
            }
            p.pos += 2;
            p.enter()?;
            let mut args = vec![set_value(p, false)?];
            while p.peek() == Some(&TokenKind::Comma) {
                p.pos += 1;
                args.push(set_value(p, false)?);
            }
            p.leave();
            p.expect(TokenKind::RParen)?;
            Ok(p.node(RawKind::Call { name: start, args }, start))
        }
        _ => {
            let path = p.path(UPDATE_KEYWORDS)?;
            Ok(p.node(RawKind::Path(path), start))
        }
    }
}

/// How many operators and functions an expression uses, by DynamoDB's count: comparisons,
/// `BETWEEN`, `IN`, arithmetic and function calls (`AND`, `OR` and `NOT` are free).
pub fn operator_count(e: &RawExpr) -> usize {
    let children: usize = match &e.kind {
        RawKind::Path(_) | RawKind::Value(_) => 0,
        RawKind::Call { args, .. } | RawKind::And(args) | RawKind::Or(args) => args.iter().map(operator_count).sum(),
        RawKind::Paren(inner) | RawKind::Not(inner) => operator_count(inner),
        RawKind::Cmp(_, a, b) | RawKind::Arith(_, a, b) => operator_count(a) + operator_count(b),
        RawKind::Between(a, b, c) => operator_count(a) + operator_count(b) + operator_count(c),
        RawKind::In(a, list) => operator_count(a) + list.iter().map(operator_count).sum::<usize>(),
    };
    let own = usize::from(matches!(
        e.kind,
        RawKind::Call { .. } | RawKind::Cmp(..) | RawKind::Arith(..) | RawKind::Between(..) | RawKind::In(..)
    ));
    children + own
}

/// Parses a projection expression: comma-separated document paths.
pub fn parse_projection(p: &mut Parser<'_>) -> PResult<Vec<RawPath>> {
    let mut paths = vec![p.path(&[])?];
    while p.peek() == Some(&TokenKind::Comma) {
        p.pos += 1;
        paths.push(p.path(&[])?);
    }
    p.expect_end()?;
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syntax(src: &str, f: fn(&mut Parser<'_>) -> PResult<()>) -> String {
        let mut p = Parser::new(src);
        match f(&mut p) {
            Ok(()) => "ok".into(),
            Err(e) => p.syntax_message(e),
        }
    }

    fn cond(p: &mut Parser<'_>) -> PResult<()> {
        parse_condition(p).map(|_| ())
    }

    fn update(p: &mut Parser<'_>) -> PResult<()> {
        parse_update(p).map(|_| ())
    }

    #[test]
    fn syntax_errors_name_the_token_and_its_neighbours() {
        assert_eq!(syntax("user-id = :v", cond), r#"Syntax error; token: "-", near: "user-id""#);
        assert_eq!(syntax("d.1 = :v", cond), r#"Syntax error; token: "1", near: ".1 =""#);
        assert_eq!(syntax("a = ", cond), r#"Syntax error; token: "<EOF>", near: "a =""#);
        assert_eq!(syntax("SET a = b + c + d", update), r#"Syntax error; token: "+", near: "c + d""#);
        assert_eq!(syntax("SET a = (b + c)", update), "ok");
        assert_eq!(syntax("SET a = (b + c) - d", update), r#"Syntax error; token: "-", near: ") - d""#);
        assert_eq!(syntax("SET a = :v,", update), r#"Syntax error; token: "<EOF>", near: ":v,""#);
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!("{}a = :v{}", "(".repeat(5000), ")".repeat(5000));
        assert!(syntax(&deep, cond).starts_with("Syntax error"));
        let nots = format!("{}a = :v", "NOT ".repeat(5000));
        assert!(syntax(&nots, cond).starts_with("Syntax error"));
    }
}
