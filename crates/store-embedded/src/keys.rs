//! Key encoding: DynamoDB's key order expressed as redb's byte order.
//!
//! Every key value encodes to a self-delimiting byte string whose bytewise order is
//! DynamoDB's order for that type, so a composite key is the plain concatenation of its
//! parts and no part can run into the next:
//!
//! * `S` and `B`: the bytes with `0x00` escaped as `0x00 0xFF`, ended by `0x00 0x01`.
//!   The terminator sorts below every escaped or ordinary byte, so a value sorts before
//!   every longer value it prefixes, as DynamoDB's bytewise comparison requires.
//! * `N`: a class byte (`0x01` negative, `0x02` zero, `0x03` positive), then for non-zero
//!   numbers the exponent as one byte (`exp + 129`, which spans exactly 0–255) and one byte
//!   per digit (`digit + 1`) ended by `0x00`. For negative numbers the exponent and digit
//!   bytes are complemented and the terminator is `0xFF`, so a larger magnitude sorts lower.
//!
//! The module is public so that the fuzz target (`fuzz/`) and tools can reach it; the engine's
//! API is [`crate::EmbeddedStore`].

use std::ops::Bound;

use store::{AttributeValue, Number, ScalarType};

/// The lowest exponent of a non-zero [`Number`] (`0.1 × 10^-129` is `1E-130`).
const MIN_EXP: i32 = -129;

const NEGATIVE: u8 = 0x01;
const ZERO: u8 = 0x02;
const POSITIVE: u8 = 0x03;

/// Appends the order-preserving encoding of a key value.
///
/// Callers validate that the value is a key type first; any other value encodes as an
/// empty string would, which can only happen through a bug and never corrupts order.
pub fn encode_value(out: &mut Vec<u8>, value: &AttributeValue) {
    match value {
        AttributeValue::S(s) => encode_bytes(out, s.as_bytes()),
        AttributeValue::B(b) => encode_bytes(out, b),
        AttributeValue::N(n) => encode_number(out, n),
        _ => encode_bytes(out, &[]),
    }
}

/// The encoding of one key value on its own.
pub fn encoded(value: &AttributeValue) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, value);
    out
}

/// Appends the escaped bytes of `b` without the terminator: the prefix shared by the
/// encodings of every value that begins with `b` (for `begins_with`).
pub fn encode_prefix(out: &mut Vec<u8>, b: &[u8]) {
    for &byte in b {
        out.push(byte);
        if byte == 0 {
            out.push(0xFF);
        }
    }
}

fn encode_bytes(out: &mut Vec<u8>, b: &[u8]) {
    encode_prefix(out, b);
    out.extend_from_slice(&[0x00, 0x01]);
}

fn encode_number(out: &mut Vec<u8>, n: &Number) {
    if n.is_zero() {
        out.push(ZERO);
        return;
    }
    // The exponent of a valid number lies in MIN_EXP..=126, so this is 0..=255.
    let exp = (n.exponent() - MIN_EXP).clamp(0, 255) as u8;
    if n.is_negative() {
        out.push(NEGATIVE);
        out.push(255 - exp);
        out.extend(n.digits().iter().map(|d| 10 - d));
        out.push(0xFF);
    } else {
        out.push(POSITIVE);
        out.push(exp);
        out.extend(n.digits().iter().map(|d| d + 1));
        out.push(0x00);
    }
}

/// Why bytes are not a valid key encoding; only corrupt data or a fuzzer produces one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError;

/// Decodes one value of type `ty` from the front of `input`, advancing it.
pub fn decode_value(input: &mut &[u8], ty: ScalarType) -> Result<AttributeValue, DecodeError> {
    match ty {
        ScalarType::S => {
            let bytes = decode_bytes(input)?;
            String::from_utf8(bytes).map(AttributeValue::S).map_err(|_| DecodeError)
        }
        ScalarType::B => decode_bytes(input).map(AttributeValue::B),
        ScalarType::N => decode_number(input).map(AttributeValue::N),
    }
}

fn decode_bytes(input: &mut &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let byte = *input.get(i).ok_or(DecodeError)?;
        if byte != 0 {
            out.push(byte);
            i += 1;
            continue;
        }
        match input.get(i + 1) {
            Some(0xFF) => {
                out.push(0);
                i += 2;
            }
            Some(0x01) => {
                *input = &input[i + 2..];
                return Ok(out);
            }
            _ => return Err(DecodeError),
        }
    }
}

fn decode_number(input: &mut &[u8]) -> Result<Number, DecodeError> {
    let (&class, rest) = input.split_first().ok_or(DecodeError)?;
    if class == ZERO {
        *input = rest;
        return Ok(Number::zero());
    }
    let negative = match class {
        NEGATIVE => true,
        POSITIVE => false,
        _ => return Err(DecodeError),
    };
    let (&exp_byte, mut rest) = rest.split_first().ok_or(DecodeError)?;
    let exp = i32::from(if negative { 255 - exp_byte } else { exp_byte }) + MIN_EXP;
    let mut text = String::with_capacity(48);
    if negative {
        text.push('-');
    }
    text.push_str("0.");
    let terminator = if negative { 0xFF } else { 0x00 };
    let mut digits = 0;
    loop {
        let (&b, tail) = rest.split_first().ok_or(DecodeError)?;
        rest = tail;
        if b == terminator {
            break;
        }
        let d = if negative { 10u8.checked_sub(b) } else { b.checked_sub(1) };
        let d = d.filter(|d| *d <= 9).ok_or(DecodeError)?;
        text.push(char::from(b'0' + d));
        digits += 1;
    }
    if digits == 0 {
        return Err(DecodeError);
    }
    text.push('E');
    text.push_str(&exp.to_string());
    let n: Number = text.parse().map_err(|_| DecodeError)?;
    // Only a canonical encoding decodes: anything else would break `decode(encode(x)) == x`
    // the other way round and let two byte strings name one key.
    if encoded(&AttributeValue::N(n.clone())) != input[..input.len() - rest.len()] {
        return Err(DecodeError);
    }
    *input = rest;
    Ok(n)
}

/// The smallest byte string greater than every string that starts with `prefix`,
/// or `None` when there is none (the prefix is all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while let Some(last) = out.pop() {
        if last != 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

/// A range of encoded keys: inclusive or exclusive bounds, `Unbounded` for open ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    /// Lower bound.
    pub start: Bound<Vec<u8>>,
    /// Upper bound.
    pub end: Bound<Vec<u8>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        KeyRange { start: Bound::Unbounded, end: Bound::Unbounded }
    }

    /// Every key that starts with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        KeyRange {
            start: Bound::Included(prefix.to_vec()),
            end: match prefix_successor(prefix) {
                Some(s) => Bound::Excluded(s),
                None => Bound::Unbounded,
            },
        }
    }

    /// Borrowed bounds, as redb's `range` takes them.
    pub fn as_bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        fn b(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
            match bound {
                Bound::Included(v) => Bound::Included(v.as_slice()),
                Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
                Bound::Unbounded => Bound::Unbounded,
            }
        }
        (b(&self.start), b(&self.end))
    }

    /// Whether the range holds no key at all; redb rejects a range whose start is past its end.
    pub fn is_empty(&self) -> bool {
        match (&self.start, &self.end) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a), Bound::Excluded(b))
            | (Bound::Excluded(a), Bound::Included(b))
            | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use store::n;

    fn number_strategy() -> impl Strategy<Value = Number> {
        prop_oneof![
            any::<i64>().prop_map(Number::from),
            ("-?[1-9][0-9]{0,37}", -130i32..=88)
                .prop_filter_map("in range", |(digits, e)| { format!("{digits}E{e}").parse::<Number>().ok() }),
            Just(Number::zero()),
        ]
    }

    fn value_strategy(ty: ScalarType) -> BoxedStrategy<AttributeValue> {
        match ty {
            ScalarType::S => {
                prop_oneof![".{0,6}".prop_map(AttributeValue::S), "[\\x00ab\\u{ff}]{0,6}".prop_map(AttributeValue::S),]
                    .boxed()
            }
            ScalarType::B => {
                proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(0xFFu8), any::<u8>()], 0..6)
                    .prop_map(AttributeValue::B)
                    .boxed()
            }
            ScalarType::N => number_strategy().prop_map(AttributeValue::N).boxed(),
        }
    }

    fn ty_strategy() -> impl Strategy<Value = ScalarType> {
        prop_oneof![Just(ScalarType::S), Just(ScalarType::N), Just(ScalarType::B)]
    }

    /// DynamoDB's order for two values of one key type.
    fn dynamo_cmp(a: &AttributeValue, b: &AttributeValue) -> std::cmp::Ordering {
        match (a, b) {
            (AttributeValue::S(a), AttributeValue::S(b)) => a.as_bytes().cmp(b.as_bytes()),
            (AttributeValue::B(a), AttributeValue::B(b)) => a.cmp(b),
            (AttributeValue::N(a), AttributeValue::N(b)) => a.cmp(b),
            _ => unreachable!("one type per comparison"),
        }
    }

    #[test]
    fn numbers_encode_in_numeric_order() {
        let sorted = [
            "-1E+125", "-100", "-10", "-2.5", "-1", "-0.5", "-0.001", "-1E-130", "0", "1E-130", "0.001", "0.5", "1",
            "1.5", "10", "100", "1E+125",
        ];
        for w in sorted.windows(2) {
            assert!(encoded(&n(w[0])) < encoded(&n(w[1])), "{} < {}", w[0], w[1]);
        }
    }

    #[test]
    fn strings_with_zero_bytes_cannot_collide_across_parts() {
        // ("a\0", "b") and ("a", "\0b") would collide under plain concatenation.
        let mut x = Vec::new();
        encode_value(&mut x, &"a\0".into());
        encode_value(&mut x, &"b".into());
        let mut y = Vec::new();
        encode_value(&mut y, &"a".into());
        encode_value(&mut y, &"\0b".into());
        assert_ne!(x, y);
    }

    #[test]
    fn garbage_does_not_decode_or_panic() {
        for bytes in [
            &[][..],
            &[0x03],
            &[0x03, 5],
            &[0x03, 5, 11, 0],
            &[0x03, 5, 0],
            &[0x07],
            &[b'a', 0x00],
            &[b'a', 0x00, 0x02],
        ] {
            let _ = decode_value(&mut &bytes[..], ScalarType::N);
            let _ = decode_value(&mut &bytes[..], ScalarType::S);
            let _ = decode_value(&mut &bytes[..], ScalarType::B);
        }
        // A leading zero digit is not canonical and must not decode.
        assert!(decode_value(&mut &[0x03, 5, 1, 0][..], ScalarType::N).is_err());
        assert!(decode_value(&mut &[b'a', 0x00][..], ScalarType::S).is_err());
    }

    #[test]
    fn prefix_successor_skips_trailing_ff() {
        assert_eq!(prefix_successor(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_successor(&[]), None);
    }

    proptest! {
        #[test]
        fn encoding_order_is_value_order(
            (a, b) in ty_strategy().prop_flat_map(|t| (value_strategy(t), value_strategy(t)))
        ) {
            prop_assert_eq!(encoded(&a).cmp(&encoded(&b)), dynamo_cmp(&a, &b));
        }

        #[test]
        fn composite_order_is_lexicographic_value_order(
            (a1, a2, b1, b2) in (ty_strategy(), ty_strategy()).prop_flat_map(|(t1, t2)| {
                (value_strategy(t1), value_strategy(t2), value_strategy(t1), value_strategy(t2))
            })
        ) {
            let mut x = encoded(&a1);
            encode_value(&mut x, &a2);
            let mut y = encoded(&b1);
            encode_value(&mut y, &b2);
            let want = dynamo_cmp(&a1, &b1).then_with(|| dynamo_cmp(&a2, &b2));
            prop_assert_eq!(x.cmp(&y), want);
        }

        #[test]
        fn decode_inverts_encode(
            (t1, a, t2, b) in (ty_strategy(), ty_strategy())
                .prop_flat_map(|(t1, t2)| (Just(t1), value_strategy(t1), Just(t2), value_strategy(t2)))
        ) {
            let mut bytes = encoded(&a);
            encode_value(&mut bytes, &b);
            let mut input = bytes.as_slice();
            prop_assert_eq!(decode_value(&mut input, t1), Ok(a));
            prop_assert_eq!(decode_value(&mut input, t2), Ok(b));
            prop_assert!(input.is_empty());
        }

        #[test]
        fn begins_with_prefix_bounds_exactly_the_matching_strings(
            prefix in "[\\x00ab]{0,3}", s in "[\\x00ab]{0,5}"
        ) {
            let mut p = Vec::new();
            encode_prefix(&mut p, prefix.as_bytes());
            let e = encoded(&AttributeValue::S(s.clone()));
            prop_assert_eq!(e.starts_with(&p), s.starts_with(&prefix));
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            for ty in [ScalarType::S, ScalarType::N, ScalarType::B] {
                let mut input = bytes.as_slice();
                if let Ok(v) = decode_value(&mut input, ty) {
                    // What decodes re-encodes to the bytes it consumed.
                    prop_assert_eq!(&encoded(&v)[..], &bytes[..bytes.len() - input.len()]);
                }
            }
        }
    }
}
