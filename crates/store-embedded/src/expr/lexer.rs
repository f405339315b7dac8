//! Splits expression text into tokens that remember where they came from.
//!
//! The lexer never fails: a character that cannot start a token becomes an
//! [`TokenKind::Invalid`] token, so that the parser reports it as DynamoDB does, as a syntax
//! error naming the token and its neighbourhood.

use std::ops::Range;

/// What a token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// A bare name: `[A-Za-z_][A-Za-z0-9_]*`. Keywords are identifiers too; the parser decides.
    Ident,
    /// `#name`, an expression attribute name placeholder.
    Name,
    /// `:value`, an expression attribute value placeholder.
    Value,
    /// A run of decimal digits (list indexes).
    Int,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `,`
    Comma,
    /// `.`
    Dot,
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
    /// `+`
    Plus,
    /// `-`
    Minus,
    /// Anything else, one character.
    Invalid,
}

/// One token and its byte range in the source.
#[derive(Clone, Debug)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Range<usize>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_part(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Splits `src` into tokens, skipping whitespace.
pub fn tokenize(src: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = src.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if matches!(c, ' ' | '\t' | '\r' | '\n') {
            continue;
        }
        let mut end = start + c.len_utf8();
        let mut take_while = |end: &mut usize, pred: fn(char) -> bool| {
            while let Some(&(i, next)) = chars.peek() {
                if !pred(next) {
                    break;
                }
                *end = i + next.len_utf8();
                chars.next();
            }
        };
        let kind = match c {
            c if is_ident_start(c) => {
                take_while(&mut end, is_ident_part);
                TokenKind::Ident
            }
            c if c.is_ascii_digit() => {
                take_while(&mut end, |c| c.is_ascii_digit());
                TokenKind::Int
            }
            '#' | ':' => {
                let before = end;
                take_while(&mut end, is_ident_part);
                if end == before {
                    // A lone `#` or `:` names nothing.
                    TokenKind::Invalid
                } else if c == '#' {
                    TokenKind::Name
                } else {
                    TokenKind::Value
                }
            }
            '(' => TokenKind::LParen,
            ')' => TokenKind::RParen,
            '[' => TokenKind::LBracket,
            ']' => TokenKind::RBracket,
            ',' => TokenKind::Comma,
            '.' => TokenKind::Dot,
            '=' => TokenKind::Eq,
            '+' => TokenKind::Plus,
            '-' => TokenKind::Minus,
            '<' | '>' => {
                let second = chars.peek().map(|&(_, n)| n);
                let kind = match (c, second) {
                    ('<', Some('>')) => TokenKind::Ne,
                    ('<', Some('=')) => TokenKind::Le,
                    ('>', Some('=')) => TokenKind::Ge,
                    ('<', _) => TokenKind::Lt,
                    _ => TokenKind::Gt,
                };
                if matches!(kind, TokenKind::Ne | TokenKind::Le | TokenKind::Ge) {
                    chars.next();
                    end += 1;
                }
                kind
            }
            _ => TokenKind::Invalid,
        };
        tokens.push(Token { kind, span: start..end });
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(TokenKind, &str)> {
        tokenize(src).into_iter().map(|t| (t.kind, &src[t.span])).collect()
    }

    #[test]
    fn splits_operators_and_names() {
        use TokenKind::*;
        assert_eq!(
            kinds("a.b[12] <> :v_1 AND #n>=x"),
            vec![
                (Ident, "a"),
                (Dot, "."),
                (Ident, "b"),
                (LBracket, "["),
                (Int, "12"),
                (RBracket, "]"),
                (Ne, "<>"),
                (Value, ":v_1"),
                (Ident, "AND"),
                (Name, "#n"),
                (Ge, ">="),
                (Ident, "x"),
            ]
        );
        assert_eq!(kinds("# é"), vec![(Invalid, "#"), (Invalid, "é")]);
    }
}
