//! Applies resolved update actions to an item, with DynamoDB's semantics.
//!
//! Every action sees the item as it was before the update: values are computed from the
//! original, then written. Writes happen first (in place, or appended for list indexes past
//! the end, in index order), then removals, deepest and highest index first, so that removing
//! several elements of one list removes the elements the expression named rather than
//! whatever shifted into their places. Paths never overlap (the parser rejects that), so no
//! write can disturb the location of another.

use std::collections::BTreeSet;

use store::{AttributeValue, Item, Number, Result, StoreError};

use super::ast::{Action, ArithOp, Path, PathElem, SetValue, UpdateOperand};
use super::eval::get;

fn invalid_path() -> StoreError {
    StoreError::validation("The document path provided in the update expression is invalid for update")
}

fn wrong_type() -> StoreError {
    StoreError::validation("An operand in the update expression has an incorrect data type")
}

fn missing() -> StoreError {
    StoreError::validation("The provided expression refers to an attribute that does not exist in the item")
}

/// Applies `actions` to `item`; on error `item` is left untouched.
pub fn apply(actions: &[Action], item: &mut Item) -> Result<()> {
    let original: &Item = item;
    let mut writes: Vec<(&Path, AttributeValue)> = Vec::new();
    let mut removals: Vec<&Path> = Vec::new();
    for action in actions {
        let path = action.path();
        check_parent(original, path)?;
        let existing = get(original, path);
        match action {
            Action::Set(_, value) => writes.push((path, set_value(value, original)?)),
            Action::Remove(_) => {
                if existing.is_some() {
                    removals.push(path);
                }
            }
            Action::Add(_, value) => writes.push((path, add(existing, value)?)),
            Action::Delete(_, value) => match existing {
                None => {}
                Some(existing) => match delete(existing, value)? {
                    Some(rest) => writes.push((path, rest)),
                    None => removals.push(path),
                },
            },
        }
    }

    let mut work = item.clone();
    // Appends are gathered per list and made in index order, as DynamoDB documents.
    let mut appends: Vec<(&Path, AttributeValue)> = Vec::new();
    for (path, value) in writes {
        let Some((last, parent)) = path.0.split_last() else {
            return Err(invalid_path());
        };
        match (last, parent_mut(&mut work, parent)?) {
            (PathElem::Key(k), Parent::Item(m)) => {
                m.insert(k.clone(), value);
            }
            (PathElem::Key(k), Parent::Value(AttributeValue::M(m))) => {
                m.insert(k.clone(), value);
            }
            (PathElem::Index(i), Parent::Value(AttributeValue::L(l))) => match l.get_mut(*i) {
                Some(slot) => *slot = value,
                None => appends.push((path, value)),
            },
            _ => return Err(invalid_path()),
        }
    }
    appends.sort_by(|a, b| a.0.cmp(b.0));
    for (path, value) in appends {
        let Some((_, parent)) = path.0.split_last() else {
            return Err(invalid_path());
        };
        match parent_mut(&mut work, parent)? {
            Parent::Value(AttributeValue::L(l)) => l.push(value),
            _ => return Err(invalid_path()),
        }
    }

    removals.sort();
    for path in removals.into_iter().rev() {
        let Some((last, parent)) = path.0.split_last() else {
            return Err(invalid_path());
        };
        match (last, parent_mut(&mut work, parent)?) {
            (PathElem::Key(k), Parent::Item(m)) => {
                m.remove(k);
            }
            (PathElem::Key(k), Parent::Value(AttributeValue::M(m))) => {
                m.remove(k);
            }
            (PathElem::Index(i), Parent::Value(AttributeValue::L(l))) if *i < l.len() => {
                l.remove(*i);
            }
            _ => {}
        }
    }
    *item = work;
    Ok(())
}

/// The container an action's last path element lives in.
enum Parent<'a> {
    Item(&'a mut Item),
    Value(&'a mut AttributeValue),
}

fn parent_mut<'a>(item: &'a mut Item, parent: &[PathElem]) -> Result<Parent<'a>> {
    let mut elems = parent.iter();
    let Some(first) = elems.next() else {
        return Ok(Parent::Item(item));
    };
    let mut current = match first {
        PathElem::Key(k) => item.get_mut(k).ok_or_else(invalid_path)?,
        PathElem::Index(_) => return Err(invalid_path()),
    };
    for elem in elems {
        current = match (elem, current) {
            (PathElem::Key(k), AttributeValue::M(m)) => m.get_mut(k).ok_or_else(invalid_path)?,
            (PathElem::Index(i), AttributeValue::L(l)) => l.get_mut(*i).ok_or_else(invalid_path)?,
            _ => return Err(invalid_path()),
        };
    }
    Ok(Parent::Value(current))
}

/// Fails unless the container the path's last element lives in exists and has the right
/// type (a map for a key, a list for an index).
fn check_parent(item: &Item, path: &Path) -> Result<()> {
    let Some((last, parent)) = path.0.split_last() else {
        return Err(invalid_path());
    };
    if parent.is_empty() {
        return match last {
            PathElem::Key(_) => Ok(()),
            PathElem::Index(_) => Err(invalid_path()),
        };
    }
    match (last, get(item, &Path(parent.to_vec()))) {
        (PathElem::Key(_), Some(AttributeValue::M(_))) => Ok(()),
        (PathElem::Index(_), Some(AttributeValue::L(_))) => Ok(()),
        _ => Err(invalid_path()),
    }
}

fn set_value(value: &SetValue, item: &Item) -> Result<AttributeValue> {
    match value {
        SetValue::Operand(op) => operand(op, item),
        SetValue::Arith(op, a, b) => {
            let a = operand(a, item)?;
            let b = operand(b, item)?;
            let (AttributeValue::N(a), AttributeValue::N(b)) = (&a, &b) else {
                return Err(wrong_type());
            };
            let result = match op {
                ArithOp::Plus => a.checked_add(b),
                ArithOp::Minus => a.checked_sub(b),
            };
            result.map(AttributeValue::N).map_err(|e| StoreError::validation(e.to_string()))
        }
    }
}

fn operand(op: &UpdateOperand, item: &Item) -> Result<AttributeValue> {
    match op {
        UpdateOperand::Path(p) => get(item, p).cloned().ok_or_else(missing),
        UpdateOperand::Value(v) => Ok(v.clone()),
        UpdateOperand::IfNotExists(p, fallback) => match get(item, p) {
            Some(v) => Ok(v.clone()),
            None => operand(fallback, item),
        },
        UpdateOperand::ListAppend(a, b) => {
            let a = operand(a, item)?;
            let b = operand(b, item)?;
            match (a, b) {
                (AttributeValue::L(mut a), AttributeValue::L(b)) => {
                    a.extend(b);
                    Ok(AttributeValue::L(a))
                }
                _ => Err(wrong_type()),
            }
        }
    }
}

/// `ADD`: numbers add (an absent attribute counts as zero), sets unite.
fn add(existing: Option<&AttributeValue>, value: &AttributeValue) -> Result<AttributeValue> {
    use AttributeValue::*;
    Ok(match (existing, value) {
        (None, N(n)) => N(Number::zero().checked_add(n).map_err(|e| StoreError::validation(e.to_string()))?),
        (None, v) => v.clone(),
        (Some(N(a)), N(b)) => N(a.checked_add(b).map_err(|e| StoreError::validation(e.to_string()))?),
        (Some(Ss(a)), Ss(b)) => Ss(a.union(b).cloned().collect()),
        (Some(Ns(a)), Ns(b)) => Ns(a.union(b).cloned().collect()),
        (Some(Bs(a)), Bs(b)) => Bs(a.union(b).cloned().collect()),
        _ => return Err(wrong_type()),
    })
}

/// `DELETE`: set difference; `None` when nothing is left, which removes the attribute.
fn delete(existing: &AttributeValue, value: &AttributeValue) -> Result<Option<AttributeValue>> {
    use AttributeValue::*;
    fn rest<T: Ord + Clone>(a: &BTreeSet<T>, b: &BTreeSet<T>) -> Option<BTreeSet<T>> {
        let d: BTreeSet<T> = a.difference(b).cloned().collect();
        (!d.is_empty()).then_some(d)
    }
    Ok(match (existing, value) {
        (Ss(a), Ss(b)) => rest(a, b).map(Ss),
        (Ns(a), Ns(b)) => rest(a, b).map(Ns),
        (Bs(a), Bs(b)) => rest(a, b).map(Bs),
        _ => return Err(wrong_type()),
    })
}
