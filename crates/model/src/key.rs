//! Key templates and safe key segments.
//!
//! A key template such as `SITE#{site}` or `PV#{ts}#{id}` is a list of segments joined by
//! the separator `#`: each segment is either a literal (`SITE`, `PV`) or exactly one field
//! (`{site}`). Field values are *encoded* before they are joined, so that no value can ever
//! contain the separator, be empty, or carry control bytes:
//!
//! | value | encoding |
//! | --- | --- |
//! | string | every character up to `#` (`0x00–0x23`: controls, space, `!`, `"`, `#`), `%` and `0x7F` → `%XX` (uppercase hex); everything else (all other Unicode) unchanged; the empty string → `%` |
//! | integer number | 19 zero-padded digits when `≥ 0`, `-` then 19 digits of `n − i64::MIN` when negative, so that keys sort as the numbers do; `{ts:13}` pads to 13 digits instead and accepts only `0 ≤ n < 10¹³` |
//! | boolean | `true` / `false` |
//! | binary | lowercase hex; empty → `%` |
//!
//! Because an encoded value never contains `#`, a rendered key splits back into exactly the
//! segments it was made from, so two different values can never render the same key and a
//! value can never reach into the next segment. The remaining way to forge a key — a field
//! value equal to another template's literal at the same position (`ORDER#{id}` with
//! `id = "META"` against `ORDER#META`) — is ruled out by schema validation
//! ([`crate::schema`]), which rejects two templates on one index whose first difference is a
//! field facing a literal. The property tests at the bottom of this file check all of it.
//!
//! Decoding is strict: only the escapes that encoding produces are accepted, so
//! `encode(decode(s)) == s` for every `s` that decodes.

use std::fmt;

use store::{AttributeValue, Number};

/// The separator between key segments.
pub const SEPARATOR: char = '#';
/// The escape character inside encoded string segments.
pub const ESCAPE: char = '%';
/// The encoding of an empty string or empty binary value.
pub const EMPTY_MARKER: &str = "%";
/// Width of a zero-padded integer segment when the template gives none.
pub const DEFAULT_NUMBER_WIDTH: usize = 19;

/// Why a key template could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The template is empty.
    #[error("key template is empty")]
    Empty,
    /// A segment between two separators is empty (`A##B`, a leading or trailing `#`).
    #[error("key template `{template}` has an empty segment")]
    EmptySegment {
        /// The template.
        template: String,
    },
    /// A segment mixes literal text and a field, or has unbalanced braces.
    #[error("key template `{template}`: segment `{segment}` must be either literal text or exactly one `{{field}}`")]
    MixedSegment {
        /// The template.
        template: String,
        /// The offending segment.
        segment: String,
    },
    /// A literal contains a character keys reserve (`%`, braces, control characters).
    #[error("key template `{template}`: literal `{segment}` contains a reserved character")]
    ReservedCharacter {
        /// The template.
        template: String,
        /// The offending segment.
        segment: String,
    },
    /// A field name is not an identifier, or its width is not a number from 1 to 19.
    #[error("key template `{template}`: bad field `{segment}`")]
    BadField {
        /// The template.
        template: String,
        /// The offending segment.
        segment: String,
    },
}

/// Why a value could not be rendered into a key segment, or a segment decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The value's type cannot be part of a key (maps, lists, sets, null).
    #[error("field `{field}`: a {found} value cannot be part of a key")]
    UnkeyableType {
        /// The field.
        field: String,
        /// The value's DynamoDB type.
        found: &'static str,
    },
    /// A number in a key must be an integer that fits an `i64` (and the field's width).
    #[error("field `{field}`: number {value} cannot be part of a key (integers only{width_note})")]
    UnkeyableNumber {
        /// The field.
        field: String,
        /// The number.
        value: String,
        /// A note on the width, when one applies.
        width_note: String,
    },
    /// The rendered key exceeds DynamoDB's size limit for its key attribute.
    #[error("key `{attribute}` is {len} bytes, more than the {max} DynamoDB allows")]
    TooLong {
        /// The key attribute.
        attribute: String,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A segment is not a valid encoding.
    #[error("`{segment}` is not a valid encoded key segment")]
    BadSegment {
        /// The segment.
        segment: String,
    },
}

/// One segment of a key template.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Segment {
    /// Fixed text.
    Literal(String),
    /// A field, filled from the attribute of the same name.
    Field {
        /// The attribute name.
        name: String,
        /// Zero-padding width for integer values (`{ts:13}`), if given.
        width: Option<usize>,
    },
}

impl Segment {
    /// The field name, if this is a field.
    pub fn field(&self) -> Option<&str> {
        match self {
            Segment::Field { name, .. } => Some(name),
            Segment::Literal(_) => None,
        }
    }
}

/// A parsed key template such as `PV#{site}#{ts:13}#{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyTemplate {
    source: String,
    segments: Vec<Segment>,
}

impl fmt::Display for KeyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for KeyTemplate {
    type Err = TemplateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KeyTemplate::parse(s)
    }
}

fn is_reserved_literal_char(c: char) -> bool {
    c == ESCAPE || c == '{' || c == '}' || c.is_control()
}

impl KeyTemplate {
    /// Parses a template: segments separated by `#`, each literal text or one `{field}` /
    /// `{field:width}`.
    pub fn parse(source: &str) -> Result<Self, TemplateError> {
        if source.is_empty() {
            return Err(TemplateError::Empty);
        }
        let mut segments = Vec::new();
        for raw in source.split(SEPARATOR) {
            if raw.is_empty() {
                return Err(TemplateError::EmptySegment { template: source.to_string() });
            }
            let err = |f: fn(String, String) -> TemplateError| f(source.to_string(), raw.to_string());
            if let Some(inner) = raw.strip_prefix('{') {
                let Some(inner) = inner.strip_suffix('}') else {
                    return Err(err(|template, segment| TemplateError::MixedSegment { template, segment }));
                };
                if inner.contains(['{', '}']) {
                    return Err(err(|template, segment| TemplateError::MixedSegment { template, segment }));
                }
                let (name, width) = match inner.split_once(':') {
                    Some((name, w)) => {
                        // Only canonical widths (`13`, not `013` or `+13`) so that one
                        // template has one spelling.
                        let canonical = !w.starts_with('0') && w.bytes().all(|b| b.is_ascii_digit());
                        match w.parse::<usize>() {
                            Ok(w) if canonical && (1..=DEFAULT_NUMBER_WIDTH).contains(&w) => (name, Some(w)),
                            _ => {
                                return Err(err(|template, segment| TemplateError::BadField { template, segment }));
                            }
                        }
                    }
                    None => (inner, None),
                };
                if !is_identifier(name) {
                    return Err(err(|template, segment| TemplateError::BadField { template, segment }));
                }
                segments.push(Segment::Field { name: name.to_string(), width });
            } else if raw.contains(['{', '}']) {
                return Err(err(|template, segment| TemplateError::MixedSegment { template, segment }));
            } else if raw.chars().any(is_reserved_literal_char) {
                return Err(err(|template, segment| TemplateError::ReservedCharacter { template, segment }));
            } else {
                segments.push(Segment::Literal(raw.to_string()));
            }
        }
        Ok(KeyTemplate { source: source.to_string(), segments })
    }

    /// The template as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Its segments, in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The field names it references, in order.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(Segment::field)
    }

    /// Whether the template has no fields (a constant key such as `META`).
    pub fn is_constant(&self) -> bool {
        self.fields().next().is_none()
    }

    /// Whether the template is exactly one field, so that a number or binary key attribute
    /// can hold the raw value instead of an encoded string.
    pub fn single_field(&self) -> Option<&str> {
        match self.segments.as_slice() {
            [Segment::Field { name, width: None }] => Some(name),
            _ => None,
        }
    }

    /// The literal text before the first field, ending with the separator when a field
    /// follows (`ORDER#{id}` → `ORDER#`; `META` → `META`). Every key the template renders
    /// starts with it.
    pub fn literal_prefix(&self) -> String {
        let mut out = String::new();
        for seg in &self.segments {
            match seg {
                Segment::Literal(l) => {
                    out.push_str(l);
                    out.push(SEPARATOR);
                }
                Segment::Field { .. } => return out,
            }
        }
        out.pop();
        out
    }

    /// Renders the key from field values, or `None` when a field has no value (the key is
    /// then not written: that is how sparse indexes work).
    pub fn render<'a>(&self, value: impl Fn(&str) -> Option<&'a AttributeValue>) -> Result<Option<String>, KeyError> {
        // Most keys are a few dozen bytes: one allocation rather than a growth per segment.
        let mut out = String::with_capacity(64);
        for (i, seg) in self.segments.iter().enumerate() {
            if i > 0 {
                out.push(SEPARATOR);
            }
            match seg {
                Segment::Literal(l) => out.push_str(l),
                Segment::Field { name, width } => match value(name) {
                    Some(v) => encode_value(name, v, *width, &mut out)?,
                    None => return Ok(None),
                },
            }
        }
        Ok(Some(out))
    }

    /// Renders the longest prefix possible from the values given: every segment up to the
    /// first field without a value, followed by the separator when the key continues.
    ///
    /// The result is what `begins_with` needs to select exactly the keys whose leading
    /// segments are these: because encoded values never contain `#`, `ORDER#abc#` cannot
    /// match `ORDER#abcd#…`. Returns whether the whole key was rendered.
    pub fn render_prefix<'a>(
        &self,
        value: impl Fn(&str) -> Option<&'a AttributeValue>,
    ) -> Result<(String, bool), KeyError> {
        let mut out = String::new();
        for seg in &self.segments {
            match seg {
                Segment::Literal(l) => out.push_str(l),
                Segment::Field { name, width } => match value(name) {
                    Some(v) => encode_value(name, v, *width, &mut out)?,
                    None => return Ok((out, false)),
                },
            }
            out.push(SEPARATOR);
        }
        out.pop();
        Ok((out, true))
    }

    /// Splits a rendered key back into its encoded field segments, or `None` when the key
    /// was not rendered by this template.
    pub fn match_key<'k>(&self, key: &'k str) -> Option<Vec<(&str, &'k str)>> {
        let parts: Vec<&str> = key.split(SEPARATOR).collect();
        if parts.len() != self.segments.len() {
            return None;
        }
        let mut fields = Vec::new();
        for (seg, part) in self.segments.iter().zip(parts) {
            match seg {
                Segment::Literal(l) if l == part => {}
                Segment::Literal(_) => return None,
                Segment::Field { name, .. } => {
                    if !is_valid_segment(part) {
                        return None;
                    }
                    fields.push((name.as_str(), part));
                }
            }
        }
        Some(fields)
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every character up to and including `#` (controls, space, `!`, `"`, `#`), the escape
/// character and DEL are escaped. Escaping everything below the separator, not only the
/// separator, means every character of an encoded value sorts *after* `#`, so a key whose
/// value is a prefix of another's sorts first (`A#b#…` < `A#bc#…`): multi-segment keys
/// sort as the tuples of their encoded values do.
fn needs_escape(c: char) -> bool {
    c <= SEPARATOR || c == ESCAPE || c == '\u{7f}'
}

/// Encodes a string into a key segment (see the module docs for the rules).
pub fn encode_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    encode_str_into(s, &mut out);
    out
}

fn encode_str_into(s: &str, out: &mut String) {
    if s.is_empty() {
        out.push_str(EMPTY_MARKER);
        return;
    }
    // Runs of characters kept as they are go in whole. The escaped characters are all ASCII (a
    // byte under 0x80 is a whole character in UTF-8), so one byte is two hex digits.
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(s.len());
    let mut kept = 0;
    for (i, b) in s.bytes().enumerate() {
        if b.is_ascii() && needs_escape(char::from(b)) {
            out.push_str(&s[kept..i]);
            out.push(ESCAPE);
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
            kept = i + 1;
        }
    }
    out.push_str(&s[kept..]);
}

/// The length in bytes of [`encode_str`]`(s)`, without building it: what a string field costs in
/// a rendered key, so callers can bound a value before it reaches one.
pub fn encoded_str_len(s: &str) -> usize {
    if s.is_empty() {
        return EMPTY_MARKER.len();
    }
    s.chars().map(|c| if needs_escape(c) { 3 } else { c.len_utf8() }).sum()
}

/// Encodes a prefix of a string value: like [`encode_str`] except that the empty prefix is
/// empty (it selects every value), so a `begins_with` on a partial value stays correct.
pub fn encode_str_prefix(s: &str) -> String {
    if s.is_empty() { String::new() } else { encode_str(s) }
}

/// Decodes a string key segment; strict, the inverse of [`encode_str`].
pub fn decode_str(segment: &str) -> Result<String, KeyError> {
    let bad = || KeyError::BadSegment { segment: segment.to_string() };
    if segment == EMPTY_MARKER {
        return Ok(String::new());
    }
    if segment.is_empty() {
        return Err(bad());
    }
    let mut out = String::with_capacity(segment.len());
    let mut chars = segment.chars();
    while let Some(c) = chars.next() {
        if c == ESCAPE {
            let hex: String = chars.by_ref().take(2).collect();
            if hex.len() != 2 || hex.chars().any(|h| h.is_ascii_lowercase()) {
                return Err(bad());
            }
            let byte = u8::from_str_radix(&hex, 16).map_err(|_| bad())?;
            let decoded = char::from(byte);
            if !byte.is_ascii() || !needs_escape(decoded) {
                return Err(bad());
            }
            out.push(decoded);
        } else if needs_escape(c) {
            return Err(bad());
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Whether `segment` is a valid encoded string segment (every other encoding is a subset).
fn is_valid_segment(segment: &str) -> bool {
    decode_str(segment).is_ok()
}

/// Encodes an integer so that encoded strings sort as the integers do.
pub fn encode_int(n: i64, width: Option<usize>) -> Option<String> {
    match width {
        Some(w) => {
            if n < 0 {
                return None;
            }
            let s = format!("{n:0w$}");
            (s.len() == w).then_some(s)
        }
        None if n >= 0 => Some(format!("{n:0width$}", width = DEFAULT_NUMBER_WIDTH)),
        None => {
            // Shifting by i64::MIN maps negatives onto 0..2^63, so the digits sort like the
            // numbers, and the leading '-' sorts before every digit.
            let shifted = (i128::from(n) - i128::from(i64::MIN)) as u64;
            Some(format!("-{shifted:0width$}", width = DEFAULT_NUMBER_WIDTH))
        }
    }
}

/// Decodes an integer segment; the inverse of [`encode_int`].
pub fn decode_int(segment: &str, width: Option<usize>) -> Result<i64, KeyError> {
    let bad = || KeyError::BadSegment { segment: segment.to_string() };
    let (negative, digits) = match segment.strip_prefix('-') {
        Some(rest) if width.is_none() => (true, rest),
        Some(_) => return Err(bad()),
        None => (false, segment),
    };
    let want = width.unwrap_or(DEFAULT_NUMBER_WIDTH);
    if digits.len() != want || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let v: u64 = digits.parse().map_err(|_| bad())?;
    if negative {
        let n = i128::from(v) + i128::from(i64::MIN);
        if n >= 0 {
            return Err(bad());
        }
        i64::try_from(n).map_err(|_| bad())
    } else {
        i64::try_from(v).map_err(|_| bad())
    }
}

/// Encodes bytes as lowercase hex; empty → the empty marker.
pub fn encode_bytes(b: &[u8]) -> String {
    if b.is_empty() {
        return EMPTY_MARKER.to_string();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Decodes a binary segment; the inverse of [`encode_bytes`].
pub fn decode_bytes(segment: &str) -> Result<Vec<u8>, KeyError> {
    let bad = || KeyError::BadSegment { segment: segment.to_string() };
    if segment == EMPTY_MARKER {
        return Ok(Vec::new());
    }
    if segment.is_empty()
        || !segment.len().is_multiple_of(2)
        || !segment.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(bad());
    }
    (0..segment.len()).step_by(2).map(|i| u8::from_str_radix(&segment[i..i + 2], 16).map_err(|_| bad())).collect()
}

/// The value kinds a key segment can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// A string.
    String,
    /// An integer.
    Integer,
    /// A boolean.
    Bool,
    /// Bytes.
    Binary,
}

/// Encodes one field value into `out`.
pub fn encode_value(
    field: &str,
    value: &AttributeValue,
    width: Option<usize>,
    out: &mut String,
) -> Result<(), KeyError> {
    match value {
        AttributeValue::S(s) => encode_str_into(s, out),
        AttributeValue::N(n) => out.push_str(&encode_number(field, n, width)?),
        AttributeValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        AttributeValue::B(b) => out.push_str(&encode_bytes(b)),
        other => {
            return Err(KeyError::UnkeyableType { field: field.to_string(), found: other.value_type().descriptor() });
        }
    }
    Ok(())
}

fn encode_number(field: &str, n: &Number, width: Option<usize>) -> Result<String, KeyError> {
    n.to_i64().and_then(|i| encode_int(i, width)).ok_or_else(|| KeyError::UnkeyableNumber {
        field: field.to_string(),
        value: n.to_string(),
        width_note: width.map(|w| format!(", 0 to {} digits", w)).unwrap_or_default(),
    })
}

/// Decodes one field segment back into a value of `kind`.
pub fn decode_value(kind: SegmentKind, segment: &str, width: Option<usize>) -> Result<AttributeValue, KeyError> {
    Ok(match kind {
        SegmentKind::String => AttributeValue::S(decode_str(segment)?),
        SegmentKind::Integer => AttributeValue::from(decode_int(segment, width)?),
        SegmentKind::Bool => match segment {
            "true" => AttributeValue::Bool(true),
            "false" => AttributeValue::Bool(false),
            _ => {
                return Err(KeyError::BadSegment { segment: segment.to_string() });
            }
        },
        SegmentKind::Binary => AttributeValue::B(decode_bytes(segment)?),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use expect_test::{Expect, expect};
    use proptest::prelude::*;
    use store::AttributeValue;

    use super::*;
    use crate::sample;
    use crate::schema::Index;

    fn check_template(source: &str, expect: Expect) {
        let shown = match KeyTemplate::parse(source) {
            Ok(t) => format!("{:?} prefix={:?}", t.segments(), t.literal_prefix()),
            Err(e) => format!("error: {e}"),
        };
        expect.assert_eq(&shown);
    }

    fn check_encoding(value: AttributeValue, expect: Expect) {
        let mut out = String::new();
        let shown = match encode_value("f", &value, None, &mut out) {
            Ok(()) => out,
            Err(e) => format!("error: {e}"),
        };
        expect.assert_eq(&shown);
    }

    #[test]
    fn templates() {
        check_template(
            "SITE#{site}",
            expect![[r#"[Literal("SITE"), Field { name: "site", width: None }] prefix="SITE#""#]],
        );
        check_template(
            "PV#{ts:13}#{id}",
            expect![[
                r#"[Literal("PV"), Field { name: "ts", width: Some(13) }, Field { name: "id", width: None }] prefix="PV#""#
            ]],
        );
        check_template("META", expect![[r#"[Literal("META")] prefix="META""#]]);
        check_template(
            "A#B#{c}",
            expect![[r#"[Literal("A"), Literal("B"), Field { name: "c", width: None }] prefix="A#B#""#]],
        );
        check_template("{a}#X", expect![[r#"[Field { name: "a", width: None }, Literal("X")] prefix="""#]]);
        check_template("", expect!["error: key template is empty"]);
        check_template("A##B", expect!["error: key template `A##B` has an empty segment"]);
        check_template("A#", expect!["error: key template `A#` has an empty segment"]);
        check_template(
            "V{v}",
            expect!["error: key template `V{v}`: segment `V{v}` must be either literal text or exactly one `{field}`"],
        );
        check_template(
            "{a}{b}",
            expect![
                "error: key template `{a}{b}`: segment `{a}{b}` must be either literal text or exactly one `{field}`"
            ],
        );
        check_template(
            "{a",
            expect!["error: key template `{a`: segment `{a` must be either literal text or exactly one `{field}`"],
        );
        check_template("A%B", expect!["error: key template `A%B`: literal `A%B` contains a reserved character"]);
        check_template("{1a}", expect!["error: key template `{1a}`: bad field `{1a}`"]);
        check_template("{a:013}", expect!["error: key template `{a:013}`: bad field `{a:013}`"]);
        check_template("{a:20}", expect!["error: key template `{a:20}`: bad field `{a:20}`"]);
    }

    #[test]
    fn encodings() {
        check_encoding("plain".into(), expect!["plain"]);
        check_encoding("".into(), expect!["%"]);
        check_encoding("a#b".into(), expect!["a%23b"]);
        check_encoding("100%".into(), expect!["100%25"]);
        check_encoding("%".into(), expect!["%25"]);
        check_encoding("tab\there\u{7f}".into(), expect!["tab%09here%7F"]);
        check_encoding("日本語 ✓".into(), expect!["日本語%20✓"]);
        check_encoding(0.into(), expect!["0000000000000000000"]);
        check_encoding(1_733_063_415_250i64.into(), expect!["0000001733063415250"]);
        check_encoding((-1).into(), expect!["-9223372036854775807"]);
        check_encoding(i64::MIN.into(), expect!["-0000000000000000000"]);
        check_encoding(
            store::n("1.5"),
            expect!["error: field `f`: number 1.5 cannot be part of a key (integers only)"],
        );
        check_encoding(true.into(), expect!["true"]);
        check_encoding(AttributeValue::B(vec![0, 255]), expect!["00ff"]);
        check_encoding(AttributeValue::B(vec![]), expect!["%"]);
        check_encoding(AttributeValue::Null, expect!["error: field `f`: a NULL value cannot be part of a key"]);
        let mut out = String::new();
        let err = encode_value("ts", &AttributeValue::from(10_000), Some(4), &mut out).unwrap_err();
        expect!["field `ts`: number 10000 cannot be part of a key (integers only, 0 to 4 digits)"]
            .assert_eq(&err.to_string());
    }

    #[test]
    fn decoding_is_strict() {
        for bad in ["", "a#b", "%2", "%41", "%23%", "%2a", "a%", "%%"] {
            assert!(decode_str(bad).is_err(), "{bad:?} must not decode");
        }
        for bad in ["", "1", "-1", "00000000000000000001", "000000000000000000a"] {
            assert!(decode_int(bad, None).is_err(), "{bad:?} must not decode");
        }
        assert!(decode_bytes("0F").is_err());
        assert!(decode_bytes("abc").is_err());
    }

    /// Strings that are likely to break a naive encoding.
    fn tricky_string() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("#".to_string()),
            Just("%".to_string()),
            Just("%23".to_string()),
            Just("META".to_string()),
            Just("ORDER".to_string()),
            Just("LINE".to_string()),
            Just("PROFILE".to_string()),
            "[A-Z#%]{0,8}",
            "[a-z0-9#%\\x00-\\x1f\\x7f]{0,8}",
            any::<String>(),
        ]
    }

    proptest! {
        #[test]
        fn string_segments_round_trip(s in tricky_string()) {
            let e = encode_str(&s);
            prop_assert!(!e.is_empty());
            prop_assert!(!e.contains(SEPARATOR));
            prop_assert!(!e.chars().any(|c| c.is_ascii_control()));
            prop_assert_eq!(decode_str(&e), Ok(s));
        }

        /// The encoder against the plainest one: character by character.
        #[test]
        fn strings_encode_as_character_by_character(s in tricky_string()) {
            let mut plain = String::new();
            if s.is_empty() {
                plain.push_str(EMPTY_MARKER);
            }
            for c in s.chars() {
                if needs_escape(c) {
                    plain.push_str(&format!("{ESCAPE}{:02X}", c as u32));
                } else {
                    plain.push(c);
                }
            }
            prop_assert_eq!(encode_str(&s), plain);
        }

        #[test]
        fn encoded_length_is_the_encoding_s_length(s in tricky_string()) {
            prop_assert_eq!(encoded_str_len(&s), encode_str(&s).len());
        }

        #[test]
        fn decoding_accepts_only_canonical_encodings(s in "[a-z%#0-9A-F]{0,8}") {
            if let Ok(d) = decode_str(&s) {
                prop_assert_eq!(encode_str(&d), s);
            }
        }

        #[test]
        fn distinct_strings_encode_distinctly(a in tricky_string(), b in tricky_string()) {
            prop_assert_eq!(a == b, encode_str(&a) == encode_str(&b));
        }

        #[test]
        fn integer_segments_sort_like_integers(a in any::<i64>(), b in any::<i64>()) {
            let (ea, eb) = (encode_int(a, None).unwrap(), encode_int(b, None).unwrap());
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
            prop_assert_eq!(decode_int(&ea, None), Ok(a));
        }

        #[test]
        fn fixed_width_segments_sort_like_integers(a in 0i64..10_000_000_000_000, b in 0i64..10_000_000_000_000) {
            let (ea, eb) = (encode_int(a, Some(13)).unwrap(), encode_int(b, Some(13)).unwrap());
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
            prop_assert_eq!(decode_int(&ea, Some(13)), Ok(a));
        }

        /// Encoded characters all sort after the separator, so keys sort as tuples of their
        /// encoded values.
        #[test]
        fn keys_sort_as_tuples(a in (tricky_string(), tricky_string()), b in (tricky_string(), tricky_string())) {
            let key = |(x, y): &(String, String)| format!("K#{}#{}", encode_str(x), encode_str(y));
            let tuple = |(x, y): &(String, String)| (encode_str(x), encode_str(y));
            prop_assert_eq!(key(&a).cmp(&key(&b)), tuple(&a).cmp(&tuple(&b)));
        }

        #[test]
        fn parsing_and_decoding_arbitrary_text_never_panics(s in ".{0,24}") {
            let _ = KeyTemplate::parse(&s);
            let _ = decode_str(&s);
            let _ = decode_int(&s, None);
            let _ = decode_int(&s, Some(4));
            let _ = decode_bytes(&s);
            let t = KeyTemplate::parse("A#{x}#{y}").unwrap();
            let _ = t.match_key(&s);
        }

        #[test]
        fn bytes_round_trip(b in proptest::collection::vec(any::<u8>(), 0..8)) {
            prop_assert_eq!(decode_bytes(&encode_bytes(&b)), Ok(b));
        }

        /// No two distinct inputs render the same key, and every key decodes back to its inputs.
        #[test]
        fn rendered_keys_are_injective_and_decode(
            a in (tricky_string(), any::<i64>(), tricky_string()),
            b in (tricky_string(), any::<i64>(), tricky_string()),
        ) {
            let t = KeyTemplate::parse("PV#{site}#{ts}#{id}").unwrap();
            let render = |(site, ts, id): &(String, i64, String)| {
                let vals: BTreeMap<&str, AttributeValue> = [
                    ("site", AttributeValue::from(site.as_str())),
                    ("ts", AttributeValue::from(*ts)),
                    ("id", AttributeValue::from(id.as_str())),
                ].into();
                t.render(|f| vals.get(f)).unwrap().unwrap()
            };
            let (ka, kb) = (render(&a), render(&b));
            prop_assert_eq!(a == b, ka == kb);
            let fields = t.match_key(&ka).unwrap();
            prop_assert_eq!(decode_str(fields[0].1), Ok(a.0.clone()));
            prop_assert_eq!(decode_int(fields[1].1, None), Ok(a.1));
            prop_assert_eq!(decode_str(fields[2].1), Ok(a.2.clone()));
        }

        /// On the sample schema, whatever the values, an entity's key on an index is never
        /// another entity's key there, and never starts with another entity's literal
        /// prefix unless its own template legitimately begins with that prefix (a hierarchy).
        #[test]
        fn no_value_forges_another_entitys_key(
            strings in proptest::collection::vec(tricky_string(), 8),
            numbers in proptest::collection::vec(0i64..10_000, 3),
        ) {
            let schema = sample::shop("shop");
            let names = ["customer_id", "order_id", "email", "status", "product_id", "category", "name", "note"];
            let mut item: store::Item = names.iter().zip(&strings).map(|(n, s)| (n.to_string(), AttributeValue::from(s.as_str()))).collect();
            for (n, v) in ["line_no", "created_at", "total"].iter().zip(&numbers) {
                item.insert(n.to_string(), AttributeValue::from(*v));
            }
            for index in schema.indexes() {
                let on: Vec<_> = schema.entities_on(&index).collect();
                for e in &on {
                    let key = e.key(&index).unwrap();
                    let pk = key.partition.render(|f| item.get(f)).unwrap().unwrap();
                    let sk = key.sort.as_ref().map(|s| s.render(|f| item.get(f)).unwrap().unwrap());
                    for f in &on {
                        if f.name() == e.name() {
                            continue;
                        }
                        let other = f.key(&index).unwrap();
                        if other.partition.match_key(&pk).is_none() {
                            // Different partitions can never meet in one query.
                            prop_assert!(!pk.starts_with(&other.partition.literal_prefix()) || key.partition.literal_prefix().starts_with(&other.partition.literal_prefix()) || index == Index::Table && other.partition.literal_prefix().is_empty());
                            continue;
                        }
                        let (sk, other_sort) = (sk.as_ref().unwrap(), other.sort.as_ref().unwrap());
                        prop_assert!(other_sort.match_key(sk).is_none(), "{} key {sk} matches {}", e.name(), f.name());
                        let prefix = other_sort.literal_prefix();
                        let own = key.sort.as_ref().unwrap().literal_prefix();
                        prop_assert!(
                            !sk.starts_with(&prefix) || own.starts_with(&prefix),
                            "{} key {sk} is inside {}'s prefix {prefix} on {index}", e.name(), f.name()
                        );
                    }
                }
            }
        }
    }
}
