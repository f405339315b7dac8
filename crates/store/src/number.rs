//! DynamoDB's `N` type: an exact decimal of up to 38 significant digits.
//!
//! Numbers are normalised on the way in (`0042` → `42`, `1.5E2` → `150`, `-0` → `0`),
//! compared numerically and added exactly. There is no `f64` anywhere on this path:
//! a counter that is added to a million times stays exact.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// The most significant digits DynamoDB keeps.
pub const MAX_DIGITS: usize = 38;
/// Smallest decimal exponent (in [`Number`]'s `0.ddd × 10^exp` form) of a non-zero number: `1E-130`.
const MIN_EXP: i32 = -129;
/// Largest exponent: `9.99…E+125`.
const MAX_EXP: i32 = 126;

/// An exact decimal number with DynamoDB's precision and range.
///
/// The value is `±0.d₁d₂…dₙ × 10^exp` with `d₁ ≠ 0` and `dₙ ≠ 0`; zero has no digits.
/// Because the representation is canonical, derived equality is numeric equality.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Number {
    negative: bool,
    /// Decimal digits 0–9, no leading or trailing zeros.
    digits: Vec<u8>,
    exp: i32,
}

/// Why a string is not a DynamoDB number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NumberError {
    /// The text is not a decimal number.
    #[error("The parameter cannot be converted to a numeric value: {0}")]
    Syntax(String),
    /// More than 38 significant digits.
    #[error("Attempting to store more than 38 significant digits in a Number")]
    Precision,
    /// Magnitude above `9.99…E+125`.
    #[error("Number overflow. Attempting to store a number with magnitude larger than supported range")]
    Overflow,
    /// Non-zero magnitude below `1E-130`.
    #[error("Number underflow. Attempting to store a number with magnitude smaller than supported range")]
    Underflow,
}

impl Number {
    /// Zero.
    pub fn zero() -> Self {
        Number { negative: false, digits: Vec::new(), exp: 0 }
    }

    /// Whether this is zero.
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Whether this is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Number of significant digits (0 for zero).
    pub fn significant_digits(&self) -> usize {
        self.digits.len()
    }

    /// The significant digits, most significant first, each 0–9.
    pub fn digits(&self) -> &[u8] {
        &self.digits
    }

    /// The exponent `e` in `0.ddd × 10^e`.
    pub fn exponent(&self) -> i32 {
        self.exp
    }

    /// The number `±0.d₁d₂…dₙ × 10^exp` from its decimal digits (each 0–9), normalised
    /// (leading and trailing zeros dropped) and checked against DynamoDB's limits. Decoders of
    /// stored numbers use it instead of formatting text to parse.
    pub fn from_digits(negative: bool, digits: Vec<u8>, exp: i32) -> Result<Self, NumberError> {
        if digits.iter().any(|&d| d > 9) {
            return Err(NumberError::Syntax(format!("digit out of range in {digits:?}")));
        }
        Number::from_parts(negative, digits, exp)
    }

    /// Builds a number from parts, normalising and checking DynamoDB's limits.
    fn from_parts(negative: bool, mut digits: Vec<u8>, mut exp: i32) -> Result<Self, NumberError> {
        let lead = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..lead);
        exp = exp.saturating_sub(lead as i32);
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            return Ok(Number::zero());
        }
        if digits.len() > MAX_DIGITS {
            return Err(NumberError::Precision);
        }
        if exp > MAX_EXP {
            return Err(NumberError::Overflow);
        }
        if exp < MIN_EXP {
            return Err(NumberError::Underflow);
        }
        Ok(Number { negative, digits, exp })
    }

    /// `self + other`, exact; fails when the result leaves DynamoDB's range or precision.
    pub fn checked_add(&self, other: &Number) -> Result<Number, NumberError> {
        if self.is_zero() {
            return Ok(other.clone());
        }
        if other.is_zero() {
            return Ok(self.clone());
        }
        // Align both to a common lowest exponent: value = int(digits) × 10^(exp - len).
        let low = (self.exp - self.digits.len() as i32).min(other.exp - other.digits.len() as i32);
        let high = self.exp.max(other.exp);
        let width = (high - low) as usize;
        let a = aligned(self, high, width);
        let b = aligned(other, high, width);
        let (negative, mut digits) = if self.negative == other.negative {
            (self.negative, add_digits(&a, &b))
        } else {
            match a.cmp(&b) {
                Ordering::Equal => return Ok(Number::zero()),
                Ordering::Greater => (self.negative, sub_digits(&a, &b)),
                Ordering::Less => (other.negative, sub_digits(&b, &a)),
            }
        };
        // add_digits may carry into one extra leading digit.
        let exp = high + (digits.len() as i32 - width as i32);
        if digits.is_empty() {
            digits.push(0);
        }
        Number::from_parts(negative, digits, exp)
    }

    /// `self - other`, exact.
    pub fn checked_sub(&self, other: &Number) -> Result<Number, NumberError> {
        self.checked_add(&other.neg())
    }

    /// `-self`.
    pub fn neg(&self) -> Number {
        let mut n = self.clone();
        if !n.is_zero() {
            n.negative = !n.negative;
        }
        n
    }

    /// The value as an `i64` when it is an integer in range.
    pub fn to_i64(&self) -> Option<i64> {
        if self.is_zero() {
            return Some(0);
        }
        if self.exp < self.digits.len() as i32 || self.exp > 19 {
            return None;
        }
        let mut v: i128 = 0;
        for i in 0..self.exp as usize {
            v = v * 10 + i128::from(*self.digits.get(i).unwrap_or(&0));
        }
        let v = if self.negative { -v } else { v };
        i64::try_from(v).ok()
    }

    /// An approximation for display and statistics; never used for stored values.
    pub fn to_f64(&self) -> f64 {
        self.to_string().parse().unwrap_or(f64::NAN)
    }
}

fn aligned(n: &Number, high: i32, width: usize) -> Vec<u8> {
    let mut out = vec![0u8; width];
    let start = (high - n.exp) as usize;
    out[start..start + n.digits.len()].copy_from_slice(&n.digits);
    out
}

fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; a.len() + 1];
    let mut carry = 0;
    for i in (0..a.len()).rev() {
        let s = a[i] + b[i] + carry;
        out[i + 1] = s % 10;
        carry = s / 10;
    }
    if carry == 0 {
        out.remove(0);
    } else {
        out[0] = carry;
    }
    out
}

/// `a - b` for `a > b`, same length; the result keeps the length (leading zeros normalised later).
fn sub_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; a.len()];
    let mut borrow = 0i8;
    for i in (0..a.len()).rev() {
        let mut d = a[i] as i8 - b[i] as i8 - borrow;
        borrow = 0;
        if d < 0 {
            d += 10;
            borrow = 1;
        }
        out[i] = d as u8;
    }
    out
}

impl FromStr for Number {
    type Err = NumberError;

    fn from_str(text: &str) -> Result<Self, NumberError> {
        let syntax = || NumberError::Syntax(text.to_string());
        let bytes = text.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if let Some(&c) = bytes.first()
            && (c == b'-' || c == b'+')
        {
            negative = c == b'-';
            i = 1;
        }
        let mut digits = Vec::new();
        let mut int_len: i64 = 0;
        let mut seen_digit = false;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            digits.push(bytes[i] - b'0');
            int_len += 1;
            seen_digit = true;
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                digits.push(bytes[i] - b'0');
                seen_digit = true;
                i += 1;
            }
        }
        if !seen_digit {
            return Err(syntax());
        }
        let mut exp10: i64 = 0;
        if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
            i += 1;
            let mut eneg = false;
            if i < bytes.len() && (bytes[i] == b'-' || bytes[i] == b'+') {
                eneg = bytes[i] == b'-';
                i += 1;
            }
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                // Saturate: anything this large is out of range anyway.
                exp10 = (exp10 * 10 + i64::from(bytes[i] - b'0')).min(1_000_000);
                i += 1;
            }
            if start == i {
                return Err(syntax());
            }
            if eneg {
                exp10 = -exp10;
            }
        }
        if i != bytes.len() {
            return Err(syntax());
        }
        let exp = (int_len + exp10).clamp(i32::MIN as i64 / 2, i32::MAX as i64 / 2) as i32;
        let n = Number::from_parts(negative, digits, exp)?;
        Ok(n)
    }
}

impl fmt::Display for Number {
    /// Plain decimal notation with no exponent, the canonical text of a normalised number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        let mut s = String::with_capacity(self.digits.len() + 4);
        if self.negative {
            s.push('-');
        }
        let n = self.digits.len() as i32;
        let digit = |d: &u8| char::from(b'0' + d);
        if self.exp <= 0 {
            s.push_str("0.");
            s.extend(std::iter::repeat_n('0', (-self.exp) as usize));
            s.extend(self.digits.iter().map(digit));
        } else if self.exp >= n {
            s.extend(self.digits.iter().map(digit));
            s.extend(std::iter::repeat_n('0', (self.exp - n) as usize));
        } else {
            let (int, frac) = self.digits.split_at(self.exp as usize);
            s.extend(int.iter().map(digit));
            s.push('.');
            s.extend(frac.iter().map(digit));
        }
        f.write_str(&s)
    }
}

impl fmt::Debug for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Number({self})")
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Self) -> Ordering {
        fn magnitude(a: &Number, b: &Number) -> Ordering {
            a.exp.cmp(&b.exp).then_with(|| a.digits.cmp(&b.digits))
        }
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => {
                return if other.negative { Ordering::Greater } else { Ordering::Less };
            }
            (false, true) => {
                return if self.negative { Ordering::Less } else { Ordering::Greater };
            }
            _ => {}
        }
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => magnitude(self, other),
            (true, true) => magnitude(other, self),
        }
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Number {
            fn from(v: $t) -> Self {
                // Every width here is at most 64 bits, so i128 holds it exactly; its digits are
                // written straight out (no text in between: counters and timestamps are built
                // for every stored event and aggregate).
                let wide = v as i128;
                let mut magnitude = wide.unsigned_abs();
                let mut digits = Vec::with_capacity(20);
                while magnitude > 0 {
                    digits.push((magnitude % 10) as u8);
                    magnitude /= 10;
                }
                digits.reverse();
                let exp = digits.len() as i32;
                // At most 20 digits, well inside 38 digits and the range.
                Number::from_parts(wide < 0, digits, exp).unwrap_or_else(|_| Number::zero())
            }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(s: &str) -> Number {
        s.parse().unwrap()
    }

    #[test]
    fn from_digits_normalises_and_checks_like_parsing() {
        assert_eq!(Number::from_digits(false, vec![0, 1, 2, 0], 3), Ok(n("12")));
        assert_eq!(Number::from_digits(true, vec![5], 0), Ok(n("-0.5")));
        assert_eq!(Number::from_digits(true, vec![0, 0], 7), Ok(Number::zero()));
        assert_eq!(Number::from_digits(false, vec![1], 200), Err(NumberError::Overflow));
        assert_eq!(Number::from_digits(false, vec![1; 39], 0), Err(NumberError::Precision));
        assert!(Number::from_digits(false, vec![10], 0).is_err(), "a digit above 9");
        assert_eq!(Number::from_digits(false, vec![0, 1], i32::MIN), Err(NumberError::Underflow), "no overflow");
    }

    #[test]
    fn normalises_on_the_way_in() {
        for (input, want) in [
            ("0042", "42"),
            ("1.5E2", "150"),
            ("-0", "0"),
            ("+7", "7"),
            ("0.000", "0"),
            ("1.2300", "1.23"),
            ("-.5", "-0.5"),
            ("5.", "5"),
            ("1e-3", "0.001"),
            ("12345678901234567890123456789012345678", "12345678901234567890123456789012345678"),
            ("1E+125", &format!("1{}", "0".repeat(125))),
        ] {
            assert_eq!(n(input).to_string(), want, "{input}");
        }
    }

    #[test]
    fn rejects_what_dynamodb_rejects() {
        for bad in ["", "-", "abc", "1e", "1.2.3", " 1", "0x10", "NaN", "Infinity", "1e5x"] {
            assert!(matches!(bad.parse::<Number>(), Err(NumberError::Syntax(_))), "{bad}");
        }
        assert_eq!("123456789012345678901234567890123456789".parse::<Number>(), Err(NumberError::Precision));
        assert_eq!("1E+126".parse::<Number>(), Err(NumberError::Overflow));
        assert_eq!("1E-131".parse::<Number>(), Err(NumberError::Underflow));
        assert!("1E-130".parse::<Number>().is_ok());
        assert!("9.9999999999999999999999999999999999999E+125".parse::<Number>().is_ok());
        // Trailing zeros are not significant digits.
        assert!("1000000000000000000000000000000000000000000".parse::<Number>().is_ok());
    }

    #[test]
    fn orders_numerically() {
        let sorted = ["-100", "-2.5", "-0.001", "0", "0.001", "1", "1.5", "10", "150", "1E+100"];
        for w in sorted.windows(2) {
            assert!(n(w[0]) < n(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(n("1.5E2"), n("150"));
    }

    #[test]
    fn adds_exactly() {
        for (a, b, sum) in [
            ("1", "2", "3"),
            ("0.1", "0.2", "0.3"),
            ("99", "1", "100"),
            ("-5", "3", "-2"),
            ("5", "-5", "0"),
            ("1E+20", "1E-10", "100000000000000000000.0000000001"),
            ("-0.001", "-0.009", "-0.01"),
            ("1000", "-0.5", "999.5"),
        ] {
            assert_eq!(n(a).checked_add(&n(b)).unwrap().to_string(), sum, "{a} + {b}");
        }
        assert_eq!(n("1E+38").checked_add(&n("1")), Err(NumberError::Precision));
        assert_eq!(n("9E+125").checked_add(&n("9E+125")), Err(NumberError::Overflow));
    }

    #[test]
    fn integer_edges_convert_exactly() {
        assert_eq!(Number::from(0u8), n("0"));
        assert_eq!(Number::from(-0i32), n("0"));
        assert_eq!(Number::from(100u32), n("1E+2"));
        assert_eq!(Number::from(i64::MIN), n("-9223372036854775808"));
        assert_eq!(Number::from(u64::MAX), n("18446744073709551615"));
        assert_eq!(Number::from(usize::MAX).to_string(), usize::MAX.to_string());
    }

    #[test]
    fn converts_to_i64() {
        assert_eq!(n("42").to_i64(), Some(42));
        assert_eq!(n("-9223372036854775808").to_i64(), Some(i64::MIN));
        assert_eq!(n("9223372036854775808").to_i64(), None);
        assert_eq!(n("1.5").to_i64(), None);
        assert_eq!(n("1E+3").to_i64(), Some(1000));
    }

    proptest! {
        #[test]
        fn addition_matches_integers(a in -1_000_000_000_000i64..1_000_000_000_000, b in -1_000_000_000_000i64..1_000_000_000_000) {
            let sum = Number::from(a).checked_add(&Number::from(b)).unwrap();
            prop_assert_eq!(sum.to_i64(), Some(a + b));
        }

        #[test]
        fn integers_convert_as_their_decimal_text_parses(a in any::<i64>(), b in any::<u64>(), c in any::<i8>()) {
            prop_assert_eq!(Number::from(a), n(&a.to_string()));
            prop_assert_eq!(Number::from(b), n(&b.to_string()));
            prop_assert_eq!(Number::from(c), n(&c.to_string()));
            prop_assert_eq!(Number::from(a).to_i64(), Some(a));
        }

        #[test]
        fn order_matches_integers(a in any::<i64>(), b in any::<i64>()) {
            prop_assert_eq!(Number::from(a).cmp(&Number::from(b)), a.cmp(&b));
        }

        #[test]
        fn display_round_trips(s in "-?[0-9]{1,20}(\\.[0-9]{1,17})?") {
            let x = n(&s);
            prop_assert_eq!(n(&x.to_string()), x);
        }
    }
}
