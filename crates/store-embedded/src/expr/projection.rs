//! Builds the projected copy of an item: only the named paths, in their original structure.
//!
//! Projecting `a.b` yields `{a: {b: …}}`; projecting list elements yields a list of just
//! those elements in index order (`l[1], l[3]` gives `{l: [l1, l3]}`), as DynamoDB returns them.

use std::collections::BTreeMap;

use store::{AttributeValue, Item};

use super::ast::{Path, PathElem};
use super::eval::get;

/// A partially built projection.
enum Tree {
    Leaf(AttributeValue),
    Map(BTreeMap<String, Tree>),
    List(BTreeMap<usize, Tree>),
}

impl Tree {
    fn into_value(self) -> AttributeValue {
        match self {
            Tree::Leaf(v) => v,
            Tree::Map(m) => AttributeValue::M(m.into_iter().map(|(k, t)| (k, t.into_value())).collect()),
            Tree::List(l) => AttributeValue::L(l.into_values().map(Tree::into_value).collect()),
        }
    }

    /// Inserts `value` below this node along `rest`.
    fn insert(&mut self, rest: &[PathElem], value: AttributeValue) {
        let Some((first, rest)) = rest.split_first() else {
            *self = Tree::Leaf(value);
            return;
        };
        match first {
            PathElem::Key(k) => {
                if !matches!(self, Tree::Map(_)) {
                    *self = Tree::Map(BTreeMap::new());
                }
                if let Tree::Map(m) = self {
                    m.entry(k.clone()).or_insert_with(|| Tree::Map(BTreeMap::new())).insert(rest, value);
                }
            }
            PathElem::Index(i) => {
                if !matches!(self, Tree::List(_)) {
                    *self = Tree::List(BTreeMap::new());
                }
                if let Tree::List(l) = self {
                    l.entry(*i).or_insert_with(|| Tree::Map(BTreeMap::new())).insert(rest, value);
                }
            }
        }
    }
}

/// The attributes of `item` named by `paths`.
pub fn project(paths: &[Path], item: &Item) -> Item {
    let mut root = Tree::Map(BTreeMap::new());
    for path in paths {
        if let Some(value) = get(item, path) {
            root.insert(&path.0, value.clone());
        }
    }
    match root.into_value() {
        AttributeValue::M(m) => m,
        _ => Item::new(),
    }
}
