//! Key templates and safe key segments.
//!
//! A key template such as `SITE#{site}` or `PV#{ts}#{id}` is a list of segments joined by
//! the separator `#`: each segment is either a literal (`SITE`, `PV`) or exactly one field
//! (`{site}`). Field values are *encoded* before they are joined, so that no value can ever
//! contain the separator, be empty, or carry control bytes:
//!
//! | value | encoding |
//! | --- | --- |
//! | string | `#` → `%23`, `%` → `%25`, bytes `0x00–0x1F` and `0x7F` → `%XX` (uppercase hex), everything else (all of Unicode) unchanged; the empty string → `%` |
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
        let mut out = String::new();
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

fn needs_escape(c: char) -> bool {
    c == SEPARATOR || c == ESCAPE || c.is_ascii_control()
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
    for c in s.chars() {
        if needs_escape(c) {
            // The escaped characters are all ASCII, so one byte is two hex digits.
            out.push(ESCAPE);
            out.push_str(&format!("{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
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
        || segment.len() % 2 != 0
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
