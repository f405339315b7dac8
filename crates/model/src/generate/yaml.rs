//! A small YAML emitter for JSON values, in block style.
//!
//! Infrastructure templates are built once as a [`serde_json::Value`] and written both as
//! JSON and as YAML; this emitter guarantees the YAML parses back to the same value. It
//! writes a string plainly only when it is obviously a string to every YAML parser (and
//! CloudFormation's): otherwise it double-quotes it, so `true`, `no`, `1e3`, `2010-09-09`,
//! `Fn::GetAtt` and `a: b` all stay strings.

use serde_json::Value;

/// The value as a YAML document, ending with a newline.
pub(super) fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => write_block(&mut out, value, 0),
        Value::Array(a) if !a.is_empty() => write_block(&mut out, value, 0),
        scalar => {
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
    out
}

/// Writes a non-empty mapping or sequence with every line indented by `indent` spaces.
fn write_block(out: &mut String, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                out.push_str(&pad);
                out.push_str(&scalar_string(key));
                out.push(':');
                if is_block(v) {
                    out.push('\n');
                    write_block(out, v, indent + 2);
                } else {
                    out.push(' ');
                    out.push_str(&inline(v));
                    out.push('\n');
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                if is_block(v) {
                    // The item is written as a block two columns further in, then its first
                    // line's indentation is replaced by the `- ` indicator, which puts the
                    // first key on the dash's line as YAML's compact notation allows.
                    let mut item = String::new();
                    write_block(&mut item, v, indent + 2);
                    out.push_str(&pad);
                    out.push_str("- ");
                    let inner = " ".repeat(indent + 2);
                    out.push_str(item.strip_prefix(inner.as_str()).unwrap_or(&item));
                } else {
                    out.push_str(&pad);
                    out.push_str("- ");
                    out.push_str(&inline(v));
                    out.push('\n');
                }
            }
        }
        scalar => {
            out.push_str(&pad);
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
}

/// Whether the value is written as an indented block rather than on its key's line.
fn is_block(value: &Value) -> bool {
    match value {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

/// A scalar or an empty collection on one line.
fn inline(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => scalar_string(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

/// Words that some YAML parser (1.1 or 1.2) reads as something other than a string.
const RESERVED: &[&str] = &["true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"];

/// The string plain when that is unambiguous, double-quoted otherwise.
fn scalar_string(s: &str) -> String {
    let plain_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ' ');
    // Starting with a letter rules out numbers, dates, indicators (`-`, `?`, `&`, `*`, `!`,
    // `|`, `>`, `%`, `@`) and the special floats; the character set rules out `:` and `#`,
    // which could start a mapping or a comment; no edge spaces, which plain scalars lose.
    let plain = s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars().all(plain_char)
        && !s.ends_with(' ')
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s));
    if plain { s.to_string() } else { double_quoted(s) }
}

/// A YAML double-quoted scalar: JSON-like escapes, and `\u` for anything not printable.
fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            // YAML streams may not contain C0 or C1 controls, DEL, the byte-order mark or the
            // two non-characters, so they are escaped.
            c if c.is_control() || matches!(c, '\u{FEFF}' | '\u{FFFE}' | '\u{FFFF}') => {
                out.push_str(&format!("\\u{:04X}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
