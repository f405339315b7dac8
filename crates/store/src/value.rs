//! Attribute values and items: DynamoDB's ten data types and its item-size rules.

use std::collections::{BTreeMap, BTreeSet};

use crate::number::Number;

/// An item: attribute name to value. Ordered, so items print and compare deterministically.
pub type Item = BTreeMap<String, AttributeValue>;

/// One DynamoDB attribute value.
///
/// Sets are ordered sets; DynamoDB rejects empty sets, and so does every engine
/// (the type can hold one so that the rejection can be tested).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttributeValue {
    /// String (`S`), compared by UTF-8 bytes.
    S(String),
    /// Number (`N`), exact decimal.
    N(Number),
    /// Binary (`B`), compared bytewise.
    B(Vec<u8>),
    /// Boolean (`BOOL`).
    Bool(bool),
    /// Null (`NULL`).
    Null,
    /// Map (`M`).
    M(BTreeMap<String, AttributeValue>),
    /// List (`L`).
    L(Vec<AttributeValue>),
    /// String set (`SS`).
    Ss(BTreeSet<String>),
    /// Number set (`NS`).
    Ns(BTreeSet<Number>),
    /// Binary set (`BS`).
    Bs(BTreeSet<Vec<u8>>),
}

/// The type of an attribute value, as DynamoDB names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `S`
    S,
    /// `N`
    N,
    /// `B`
    B,
    /// `BOOL`
    Bool,
    /// `NULL`
    Null,
    /// `M`
    M,
    /// `L`
    L,
    /// `SS`
    Ss,
    /// `NS`
    Ns,
    /// `BS`
    Bs,
}

impl ValueType {
    /// DynamoDB's type descriptor (`"S"`, `"BOOL"`, …).
    pub fn descriptor(self) -> &'static str {
        match self {
            ValueType::S => "S",
            ValueType::N => "N",
            ValueType::B => "B",
            ValueType::Bool => "BOOL",
            ValueType::Null => "NULL",
            ValueType::M => "M",
            ValueType::L => "L",
            ValueType::Ss => "SS",
            ValueType::Ns => "NS",
            ValueType::Bs => "BS",
        }
    }

    /// Parses a type descriptor as used by `attribute_type`.
    pub fn from_descriptor(s: &str) -> Option<ValueType> {
        Some(match s {
            "S" => ValueType::S,
            "N" => ValueType::N,
            "B" => ValueType::B,
            "BOOL" => ValueType::Bool,
            "NULL" => ValueType::Null,
            "M" => ValueType::M,
            "L" => ValueType::L,
            "SS" => ValueType::Ss,
            "NS" => ValueType::Ns,
            "BS" => ValueType::Bs,
            _ => return None,
        })
    }
}

impl AttributeValue {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            AttributeValue::S(_) => ValueType::S,
            AttributeValue::N(_) => ValueType::N,
            AttributeValue::B(_) => ValueType::B,
            AttributeValue::Bool(_) => ValueType::Bool,
            AttributeValue::Null => ValueType::Null,
            AttributeValue::M(_) => ValueType::M,
            AttributeValue::L(_) => ValueType::L,
            AttributeValue::Ss(_) => ValueType::Ss,
            AttributeValue::Ns(_) => ValueType::Ns,
            AttributeValue::Bs(_) => ValueType::Bs,
        }
    }

    /// The string, if this is an `S`.
    pub fn as_s(&self) -> Option<&str> {
        match self {
            AttributeValue::S(s) => Some(s),
            _ => None,
        }
    }

    /// The number, if this is an `N`.
    pub fn as_n(&self) -> Option<&Number> {
        match self {
            AttributeValue::N(n) => Some(n),
            _ => None,
        }
    }

    /// The bytes, if this is a `B`.
    pub fn as_b(&self) -> Option<&[u8]> {
        match self {
            AttributeValue::B(b) => Some(b),
            _ => None,
        }
    }

    /// The map, if this is an `M`.
    pub fn as_m(&self) -> Option<&BTreeMap<String, AttributeValue>> {
        match self {
            AttributeValue::M(m) => Some(m),
            _ => None,
        }
    }

    /// The list, if this is an `L`.
    pub fn as_l(&self) -> Option<&[AttributeValue]> {
        match self {
            AttributeValue::L(l) => Some(l),
            _ => None,
        }
    }

    /// The boolean, if this is a `BOOL`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            AttributeValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Whether the value is a set type.
    pub fn is_set(&self) -> bool {
        matches!(self, AttributeValue::Ss(_) | AttributeValue::Ns(_) | AttributeValue::Bs(_))
    }

    /// Whether the value is a scalar that can be a key (`S`, `N`, `B`).
    pub fn is_key_type(&self) -> bool {
        matches!(self, AttributeValue::S(_) | AttributeValue::N(_) | AttributeValue::B(_))
    }

    /// The value's size in bytes by DynamoDB's rules (without the attribute name).
    ///
    /// Strings and binaries count their bytes; a number counts one byte per two significant
    /// digits plus one (plus one when negative); booleans and nulls one byte; lists and maps
    /// three bytes plus one per element plus their contents; sets the sum of their elements.
    pub fn size(&self) -> usize {
        match self {
            AttributeValue::S(s) => s.len(),
            AttributeValue::N(n) => number_size(n),
            AttributeValue::B(b) => b.len(),
            AttributeValue::Bool(_) | AttributeValue::Null => 1,
            AttributeValue::M(m) => 3 + m.iter().map(|(k, v)| 1 + k.len() + v.size()).sum::<usize>(),
            AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + v.size()).sum::<usize>(),
            AttributeValue::Ss(s) => s.iter().map(String::len).sum(),
            AttributeValue::Ns(s) => s.iter().map(number_size).sum(),
            AttributeValue::Bs(s) => s.iter().map(Vec::len).sum(),
        }
    }
}

fn number_size(n: &Number) -> usize {
    n.significant_digits().div_ceil(2) + 1 + usize::from(n.is_negative())
}

/// An item's size in bytes by DynamoDB's rules: attribute names plus values.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + v.size()).sum()
}

impl From<&str> for AttributeValue {
    fn from(s: &str) -> Self {
        AttributeValue::S(s.to_string())
    }
}

impl From<String> for AttributeValue {
    fn from(s: String) -> Self {
        AttributeValue::S(s)
    }
}

impl From<Number> for AttributeValue {
    fn from(n: Number) -> Self {
        AttributeValue::N(n)
    }
}

impl From<bool> for AttributeValue {
    fn from(b: bool) -> Self {
        AttributeValue::Bool(b)
    }
}

impl From<Vec<u8>> for AttributeValue {
    fn from(b: Vec<u8>) -> Self {
        AttributeValue::B(b)
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for AttributeValue {
            fn from(v: $t) -> Self {
                AttributeValue::N(Number::from(v))
            }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

/// Builds an [`Item`] from `name => value` pairs, converting values with `Into<AttributeValue>`.
///
/// ```
/// let item = store::item! { "pk" => "SITE#1", "views" => 3 };
/// assert_eq!(item["views"], store::AttributeValue::from(3));
/// ```
#[macro_export]
macro_rules! item {
    ($($k:expr => $v:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut item = $crate::Item::new();
        $( item.insert(::std::string::String::from($k), $crate::AttributeValue::from($v)); )*
        item
    }};
}

/// Parses a number literal, panicking on invalid input; for tests and constants.
pub fn n(text: &str) -> AttributeValue {
    AttributeValue::N(text.parse().unwrap_or_else(|e| panic!("{text}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_dynamodb_rules() {
        assert_eq!(AttributeValue::from("héllo").size(), 6);
        assert_eq!(n("12345").size(), 4);
        assert_eq!(n("-1").size(), 3);
        assert_eq!(AttributeValue::Null.size(), 1);
        assert_eq!(AttributeValue::L(vec![1.into(), "ab".into()]).size(), 3 + (1 + 2) + (1 + 2));
        let item = item! { "pk" => "a", "n" => 10 };
        assert_eq!(item_size(&item), 2 + 1 + 1 + 2);
    }
}
