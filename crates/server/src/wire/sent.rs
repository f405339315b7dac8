//! A request body's fields as they were sent, before they are checked.
//!
//! A derived `Deserialize` stops at the first field that does not read and words the error its
//! own way (`invalid type: integer, expected a string`). Tally's routes instead check their
//! fields in an order of their own and say what is wrong in Tally's words, naming the field. So
//! the request bodies in [`crate::wire`] declare each field as a [`Sent<T>`]: read as `T` when
//! it has `T`'s shape, and otherwise kept as what was wrong with it, for the route to refuse in
//! its turn. A derived body of `Sent` fields never fails to read; unknown fields are ignored.

use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// One field of a request body as it was sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Sent<T> {
    /// The body has no such field.
    #[default]
    Absent,
    /// The field is `null`.
    Null,
    /// The field has `T`'s shape.
    Value(T),
    /// The field has another shape.
    Wrong(Wrong),
}

/// A field that does not have the shape its route reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrong {
    /// Its JSON type, as a message names it (`a number`).
    pub found: &'static str,
    /// Its JSON text, for the messages that quote what was sent.
    pub json: String,
}

impl<T> Sent<T> {
    /// The value, when it has `T`'s shape.
    pub fn value(&self) -> Option<&T> {
        match self {
            Sent::Value(v) => Some(v),
            _ => None,
        }
    }

    /// This field when it was sent with a value other than `null`, else `other`: how a field
    /// with two names (a short one and a long one) is read.
    pub fn or(self, other: Self) -> Self {
        match self {
            Sent::Absent | Sent::Null => other,
            sent => sent,
        }
    }

    /// The value, `None` when the field is absent or `null`, or the error `wrong` makes of a
    /// field with another shape.
    pub fn checked<E>(&self, wrong: impl FnOnce(&Wrong) -> E) -> Result<Option<&T>, E> {
        match self {
            Sent::Absent | Sent::Null => Ok(None),
            Sent::Value(v) => Ok(Some(v)),
            Sent::Wrong(w) => Err(wrong(w)),
        }
    }

    /// Whether the field is absent or `null`.
    pub fn is_none(&self) -> bool {
        matches!(self, Sent::Absent | Sent::Null)
    }
}

/// Read as the JSON value comes: a scalar is offered to `T` as it is, and only an array or an
/// object is gathered into a [`Value`] first (which `T` then reads, and a [`Wrong`] quotes). Every
/// field of every body used to be gathered so, and then copied again into `T`: for a tracker's
/// event, the body's reading cost more than the rest of its route (BENCHMARKS.md, "twenty-ninth
/// session"). Either way a field reads as [`Sent::from_value`] says of its value.
impl<'de, T: DeserializeOwned> Deserialize<'de> for Sent<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SentVisitor(std::marker::PhantomData))
    }
}

impl<T: DeserializeOwned> Sent<T> {
    /// The field whose value is `value`: `null`, `T`'s shape, or what was wrong with it.
    fn from_value(value: Value) -> Self {
        if value.is_null() {
            return Sent::Null;
        }
        match T::deserialize(&value) {
            Ok(v) => Sent::Value(v),
            Err(_) => Sent::Wrong(Wrong { found: crate::wire::json_type(&value), json: value.to_string() }),
        }
    }

    /// The field whose value is the scalar `scalar` (as `value` holds it): `T` read straight from
    /// it, else what [`Sent::from_value`] makes of `value`.
    fn from_scalar<'a>(
        scalar: impl serde::de::IntoDeserializer<'a, serde::de::value::Error>,
        value: impl FnOnce() -> Value,
    ) -> Self {
        match T::deserialize(scalar.into_deserializer()) {
            Ok(v) => Sent::Value(v),
            Err(_) => Sent::from_value(value()),
        }
    }
}

/// [`Sent`]'s reading, one JSON type at a time.
struct SentVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: DeserializeOwned> Visitor<'de> for SentVisitor<T> {
    type Value = Sent<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Sent<T>, E> {
        Ok(Sent::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Sent<T>, E> {
        Ok(Sent::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Sent<T>, D::Error> {
        Sent::deserialize(deserializer)
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Sent<T>, E> {
        Ok(Sent::from_scalar(v, || Value::Bool(v)))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Sent<T>, E> {
        Ok(Sent::from_scalar(v, || Value::from(v)))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Sent<T>, E> {
        Ok(Sent::from_scalar(v, || Value::from(v)))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Sent<T>, E> {
        Ok(Sent::from_scalar(v, || Value::from(v)))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Sent<T>, E> {
        Ok(Sent::from_scalar(v, || Value::String(v.to_owned())))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Sent<T>, A::Error> {
        Ok(Sent::from_value(Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Sent<T>, A::Error> {
        Ok(Sent::from_value(Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?))
    }
}

/// Written as the value that was read; `null` when there is none (an answer echoes a field only
/// once it was checked).
impl<T: Serialize> Serialize for Sent<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Sent::Value(v) => v.serialize(serializer),
            _ => serializer.serialize_none(),
        }
    }
}

/// `T` read from a JSON object and nothing else: a derived struct also reads an array of its
/// fields' values, which no Tally body means.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Body {
        name: Sent<String>,
        days: Sent<u32>,
        inner: Sent<Object<Inner>>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Inner {
        page: Sent<String>,
    }

    fn read(json: &str) -> Body {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn each_field_is_absent_null_read_or_wrong() {
        let body = read(r#"{"name": null, "days": -1, "other": 1}"#);
        assert_eq!(body.name, Sent::Null);
        assert_eq!(body.days, Sent::Wrong(Wrong { found: "a number", json: "-1".into() }));
        assert_eq!(body.inner, Sent::Absent);
        assert_eq!(read(r#"{"days": 7}"#).days, Sent::Value(7));
        assert_eq!(read(r#"{"name": "x"}"#).name.or(Sent::Value("y".into())), Sent::Value("x".into()));
        assert_eq!(read(r#"{"name": null}"#).name.or(Sent::Value("y".into())), Sent::Value("y".into()));
    }

    /// Every field reads as the value it holds would (`Sent::from_value`, the reading every
    /// field had before scalars were offered to their type straight).
    #[test]
    fn a_field_reads_as_its_value_does() {
        fn same<T: DeserializeOwned + PartialEq + std::fmt::Debug>(json: &str) {
            let value: Value = serde_json::from_str(json).unwrap();
            let streamed: Sent<T> = serde_json::from_str(json).unwrap();
            let from_tree: Sent<T> = Sent::deserialize(&value).unwrap();
            assert_eq!(streamed, Sent::from_value(value), "{json} as {}", std::any::type_name::<T>());
            assert_eq!(from_tree, streamed, "{json} as {}", std::any::type_name::<T>());
        }
        let values = [
            "null",
            "true",
            "false",
            "0",
            "7",
            "-1",
            "18446744073709551615",
            "1e300",
            "1.5",
            "-0.0",
            "\"\"",
            "\"x\"",
            "\"caf\\u00e9 \\\"q\\\"\"",
            "\"7\"",
            "[]",
            "[\"a\", 1]",
            "{}",
            "{\"page\": \"/a\", \"x\": [1]}",
            "{\"page\": 3}",
        ];
        for json in values {
            same::<String>(json);
            same::<u32>(json);
            same::<i64>(json);
            same::<f64>(json);
            same::<bool>(json);
            same::<Vec<String>>(json);
            same::<Object<Inner>>(json);
            same::<Value>(json);
            same::<Option<String>>(json);
        }
    }

    #[test]
    fn an_object_is_not_read_from_an_array() {
        assert!(matches!(read(r#"{"inner": ["/a"]}"#).inner, Sent::Wrong(w) if w.found == "an array"));
        let read_inner = read(r#"{"inner": {"page": "/a"}}"#).inner;
        assert_eq!(read_inner.value().map(|o| o.0.page.value().cloned()), Some(Some("/a".to_owned())));
    }
}
