//! Items as the operations return them: [`Record`], and the [`EntityItem`] trait for typed structs.
//!
//! Every read returns [`Record`]s: an item together with the entity it was decoded as, with
//! typed getters that fail with a clear [`Error::Decode`] naming the entity and attribute.
//! A record is what a collection query needs (one query, several entity types), and what
//! code that only touches a field or two wants.
//!
//! Code that prefers structs implements [`EntityItem`] by hand: `to_item` and
//! `from_record`, a few lines each, written with the getters. There is no derive and no
//! serde on purpose: the mapping between a struct and its stored attributes is part of the
//! storage format, so it is written out where a reviewer sees it, and a renamed field can
//! never silently rename a stored attribute.
//!
//! ```
//! use model::record::{EntityItem, Record};
//! use model::Result;
//! use store::{item, Item};
//!
//! struct Customer { email: String, visits: i64 }
//!
//! impl EntityItem for Customer {
//!     const ENTITY: &'static str = "Customer";
//!     fn to_item(&self) -> Item {
//!         item! { "email" => self.email.as_str(), "visits" => self.visits }
//!     }
//!     fn from_record(r: &Record) -> Result<Self> {
//!         Ok(Customer { email: r.string("email")?.to_string(), visits: r.i64("visits")? })
//!     }
//! }
//!
//! let r = Record::new("Customer", item! { "email" => "a@b.c", "visits" => 3 });
//! let c: Customer = r.decode().unwrap();
//! assert_eq!(c.visits, 3);
//! assert!(r.i64("email").is_err());
//! ```

use std::collections::{BTreeMap, BTreeSet};

use store::{AttributeValue, Item, Number};

use crate::error::{Error, Result};

/// An item read from the table and the entity it belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    entity: String,
    item: Item,
}

/// A Rust type stored as one entity.
pub trait EntityItem: Sized {
    /// The entity's name in the schema.
    const ENTITY: &'static str;

    /// The entity's attributes (not the keys, which the model computes).
    fn to_item(&self) -> Item;

    /// Decodes a record of this entity.
    fn from_record(record: &Record) -> Result<Self>;
}

impl Record {
    /// A record of `entity`.
    pub fn new(entity: impl Into<String>, item: Item) -> Self {
        Record { entity: entity.into(), item }
    }

    /// The entity's name.
    pub fn entity(&self) -> &str {
        &self.entity
    }

    /// The whole item as stored, keys included.
    pub fn item(&self) -> &Item {
        &self.item
    }

    /// Takes the item.
    pub fn into_item(self) -> Item {
        self.item
    }

    /// The raw value of `name`.
    pub fn get(&self, name: &str) -> Option<&AttributeValue> {
        self.item.get(name)
    }

    /// Decodes it as `T`, checking the entity.
    pub fn decode<T: EntityItem>(&self) -> Result<T> {
        if self.entity != T::ENTITY {
            return Err(Error::Decode {
                what: T::ENTITY.to_string(),
                reason: format!("the item is a {}", self.entity),
            });
        }
        T::from_record(self)
    }

    fn err(&self, name: &str, reason: impl Into<String>) -> Error {
        Error::Decode { what: format!("{}.{name}", self.entity), reason: reason.into() }
    }

    fn required<'a, T>(&'a self, name: &str, want: &str, f: impl Fn(&'a AttributeValue) -> Option<T>) -> Result<T> {
        match self.optional(name, want, f)? {
            Some(v) => Ok(v),
            None => Err(self.err(name, "missing")),
        }
    }

    fn optional<'a, T>(
        &'a self,
        name: &str,
        want: &str,
        f: impl Fn(&'a AttributeValue) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null) => Ok(None),
            Some(v) => f(v)
                .map(Some)
                .ok_or_else(|| self.err(name, format!("expected {want}, found {}", v.value_type().descriptor()))),
        }
    }

    /// A string attribute.
    pub fn string(&self, name: &str) -> Result<&str> {
        self.required(name, "S", AttributeValue::as_s)
    }

    /// An optional string attribute.
    pub fn opt_string(&self, name: &str) -> Result<Option<&str>> {
        self.optional(name, "S", AttributeValue::as_s)
    }

    /// A number attribute, exactly.
    pub fn number(&self, name: &str) -> Result<&Number> {
        self.required(name, "N", AttributeValue::as_n)
    }

    /// An optional number attribute.
    pub fn opt_number(&self, name: &str) -> Result<Option<&Number>> {
        self.optional(name, "N", AttributeValue::as_n)
    }

    /// An integer attribute that fits an `i64`.
    pub fn i64(&self, name: &str) -> Result<i64> {
        let n = self.number(name)?;
        n.to_i64().ok_or_else(|| self.err(name, format!("{n} is not an i64")))
    }

    /// An optional integer attribute.
    pub fn opt_i64(&self, name: &str) -> Result<Option<i64>> {
        match self.opt_number(name)? {
            None => Ok(None),
            Some(n) => n.to_i64().map(Some).ok_or_else(|| self.err(name, format!("{n} is not an i64"))),
        }
    }

    /// A boolean attribute.
    pub fn bool(&self, name: &str) -> Result<bool> {
        self.required(name, "BOOL", AttributeValue::as_bool)
    }

    /// An optional boolean attribute.
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>> {
        self.optional(name, "BOOL", AttributeValue::as_bool)
    }

    /// A binary attribute.
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        self.required(name, "B", AttributeValue::as_b)
    }

    /// A map attribute.
    pub fn map(&self, name: &str) -> Result<&BTreeMap<String, AttributeValue>> {
        self.required(name, "M", AttributeValue::as_m)
    }

    /// A list attribute.
    pub fn list(&self, name: &str) -> Result<&[AttributeValue]> {
        self.required(name, "L", AttributeValue::as_l)
    }

    /// A string-set attribute; absent is the empty set (DynamoDB stores no empty sets).
    pub fn string_set(&self, name: &str) -> Result<BTreeSet<String>> {
        Ok(self
            .optional(name, "SS", |v| match v {
                AttributeValue::Ss(s) => Some(s.clone()),
                _ => None,
            })?
            .unwrap_or_default())
    }

    /// A number-set attribute; absent is the empty set.
    pub fn number_set(&self, name: &str) -> Result<BTreeSet<Number>> {
        Ok(self
            .optional(name, "NS", |v| match v {
                AttributeValue::Ns(s) => Some(s.clone()),
                _ => None,
            })?
            .unwrap_or_default())
    }
}
