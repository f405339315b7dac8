//! Evaluates resolved conditions against items, with DynamoDB's comparison rules.
//!
//! Values compare only within one type: strings by UTF-8 bytes, numbers numerically, binaries
//! bytewise. Equality is deep and works on every type; ordering between other types, or
//! involving a missing attribute, is simply false, never an error.

use std::cmp::Ordering;

use store::{AttributeValue, Item, Number};

use super::ast::{CmpOp, Cond, Operand, Path, PathElem};

/// The value at `path` in `item`, if there is one.
pub fn get<'a>(item: &'a Item, path: &Path) -> Option<&'a AttributeValue> {
    let mut elems = path.0.iter();
    let mut current = match elems.next()? {
        PathElem::Key(k) => item.get(k)?,
        PathElem::Index(_) => return None,
    };
    for elem in elems {
        current = match (elem, current) {
            (PathElem::Key(k), AttributeValue::M(m)) => m.get(k)?,
            (PathElem::Index(i), AttributeValue::L(l)) => l.get(*i)?,
            _ => return None,
        };
    }
    Some(current)
}

/// The order of two values of one ordered type (`S`, `N`, `B`); `None` for anything else.
pub fn compare(a: &AttributeValue, b: &AttributeValue) -> Option<Ordering> {
    match (a, b) {
        (AttributeValue::S(x), AttributeValue::S(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (AttributeValue::N(x), AttributeValue::N(y)) => Some(x.cmp(y)),
        (AttributeValue::B(x), AttributeValue::B(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// DynamoDB's `size()`: string length in UTF-16 code units (what DynamoDB counts), bytes of a
/// binary, elements of a set, list or map. Other types have no size.
pub fn size(v: &AttributeValue) -> Option<AttributeValue> {
    let n = match v {
        AttributeValue::S(s) => s.encode_utf16().count(),
        AttributeValue::B(b) => b.len(),
        AttributeValue::Ss(s) => s.len(),
        AttributeValue::Ns(s) => s.len(),
        AttributeValue::Bs(s) => s.len(),
        AttributeValue::L(l) => l.len(),
        AttributeValue::M(m) => m.len(),
        _ => return None,
    };
    Some(AttributeValue::N(Number::from(n)))
}

/// An operand's value for `item`; `None` when it refers to something missing.
fn operand<'a>(op: &'a Operand, item: &'a Item) -> Option<std::borrow::Cow<'a, AttributeValue>> {
    use std::borrow::Cow;
    match op {
        Operand::Path(p) => get(item, p).map(Cow::Borrowed),
        Operand::Value(v) => Some(Cow::Borrowed(v)),
        Operand::Size(inner) => size(operand(inner, item)?.as_ref()).map(Cow::Owned),
    }
}

/// Whether `cond` holds for `item`.
pub fn evaluate(cond: &Cond, item: &Item) -> bool {
    match cond {
        Cond::Cmp(op, a, b) => {
            let (a, b) = (operand(a, item), operand(b, item));
            match (a, b) {
                (Some(a), Some(b)) => match op {
                    CmpOp::Eq => a == b,
                    CmpOp::Ne => a != b,
                    _ => compare(&a, &b).is_some_and(|o| match op {
                        CmpOp::Lt => o == Ordering::Less,
                        CmpOp::Le => o != Ordering::Greater,
                        CmpOp::Gt => o == Ordering::Greater,
                        CmpOp::Ge => o != Ordering::Less,
                        CmpOp::Eq | CmpOp::Ne => false,
                    }),
                },
                // A missing value equals nothing, so it differs from anything present.
                (None, Some(_)) | (Some(_), None) => *op == CmpOp::Ne,
                (None, None) => false,
            }
        }
        Cond::Between(x, lo, hi) => {
            let (Some(x), Some(lo), Some(hi)) = (operand(x, item), operand(lo, item), operand(hi, item)) else {
                return false;
            };
            compare(&x, &lo).is_some_and(|o| o != Ordering::Less)
                && compare(&x, &hi).is_some_and(|o| o != Ordering::Greater)
        }
        Cond::In(x, list) => {
            let Some(x) = operand(x, item) else {
                return false;
            };
            list.iter().any(|candidate| operand(candidate, item).is_some_and(|c| c == x))
        }
        Cond::Exists(p) => get(item, p).is_some(),
        Cond::NotExists(p) => get(item, p).is_none(),
        Cond::Type(x, ty) => operand(x, item).is_some_and(|v| v.value_type() == *ty),
        Cond::BeginsWith(x, prefix) => {
            let (Some(x), Some(prefix)) = (operand(x, item), operand(prefix, item)) else {
                return false;
            };
            match (&*x, &*prefix) {
                (AttributeValue::S(s), AttributeValue::S(p)) => s.starts_with(p.as_str()),
                (AttributeValue::B(b), AttributeValue::B(p)) => b.starts_with(p),
                _ => false,
            }
        }
        Cond::Contains(x, needle) => {
            let (Some(x), Some(needle)) = (operand(x, item), operand(needle, item)) else {
                return false;
            };
            contains(&x, &needle)
        }
        Cond::Not(inner) => !evaluate(inner, item),
        Cond::And(parts) => parts.iter().all(|c| evaluate(c, item)),
        Cond::Or(parts) => parts.iter().any(|c| evaluate(c, item)),
    }
}

/// `contains`: a substring of a string or binary, a member of a set of the needle's type,
/// or an element of a list.
fn contains(haystack: &AttributeValue, needle: &AttributeValue) -> bool {
    match (haystack, needle) {
        (AttributeValue::S(s), AttributeValue::S(n)) => s.contains(n.as_str()),
        (AttributeValue::B(b), AttributeValue::B(n)) => n.is_empty() || b.windows(n.len()).any(|w| w == n.as_slice()),
        (AttributeValue::Ss(set), AttributeValue::S(n)) => set.contains(n),
        (AttributeValue::Ns(set), AttributeValue::N(n)) => set.contains(n),
        (AttributeValue::Bs(set), AttributeValue::B(n)) => set.contains(n),
        (AttributeValue::L(list), n) => list.contains(n),
        _ => false,
    }
}
