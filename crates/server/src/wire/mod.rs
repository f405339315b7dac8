//! The wire formats: request bodies as the official trackers send them, read into
//! [`analytics::event::RawEvent`], and Tally's import format ([`import`]), read and written. Nothing here validates the event's content (lengths, URLs,
//! domains): [`analytics::event::Event::parse`] does that later. This layer only refuses bodies
//! whose shape it cannot read, and says what is wrong with them.
//!
//! The trackers' and the API's JSON bodies are declared structs of [`sent::Sent`] fields, each
//! read into `analytics` values in one place. The answers are declared `Serialize` structs, each
//! made from the `analytics` values it shows in one place and written in the order of its
//! fields; a refusal's body is an [`ErrorBody`].
//!
//! Bodies are read as JSON whatever their `Content-Type`, because Plausible's tracker sends JSON
//! labelled `text/plain` (a "simple" request that needs no CORS preflight).

use std::net::{IpAddr, Ipv4Addr};

use analytics::event::{RawEvent, RawRevenue, RequestHeaders};
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::wire::sent::{Object, Sent, Wrong};

pub mod accounts;
pub mod admin;
pub mod import;
pub mod plausible;
pub mod query;
pub mod sent;
pub mod stats;
pub mod umami;
pub mod visitors;

/// A `200` answer with `body` as JSON.
pub(crate) fn json_ok(body: impl serde::Serialize) -> axum::response::Response {
    use axum::response::IntoResponse;
    let text = serde_json::to_string(&body).unwrap_or_default();
    ([(axum::http::header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// The body of every refusal: what is wrong, in Tally's words, and the request field at fault
/// when one is (on the ingestion routes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ErrorBody {
    /// What is wrong.
    pub error: String,
    /// The field at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<&'static str>,
}

/// What the server knows about a request besides its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMeta {
    /// The User-Agent header, empty when absent.
    pub user_agent: String,
    /// The TCP peer's address.
    pub peer_ip: IpAddr,
    /// The request headers enrichment may read (forwarding, CDN country).
    pub headers: RequestHeaders,
    /// When the request arrived, in milliseconds since the Unix epoch.
    pub received_ms: i64,
}

impl Default for RequestMeta {
    fn default() -> Self {
        RequestMeta {
            user_agent: String::new(),
            peer_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            headers: RequestHeaders::new(),
            received_ms: 0,
        }
    }
}

impl RequestMeta {
    /// A raw event with this request's metadata and the given body fields.
    fn event(self, name: String, url: String, domain: String) -> RawEvent {
        let mut raw = RawEvent::pageview(&url, &domain);
        raw.name = name;
        raw.timestamp_ms = self.received_ms;
        raw.user_agent = self.user_agent;
        raw.peer_ip = self.peer_ip;
        raw.headers = self.headers;
        raw
    }
}

/// Why a body could not be read. The message names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The body is not JSON (or not UTF-8).
    #[error("body is not valid JSON: {0}")]
    Json(String),
    /// The body is JSON but not an object.
    #[error("body must be a JSON object, not {0}")]
    NotAnObject(&'static str),
    /// A required field is absent.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A field has the wrong JSON type.
    #[error("{field} must be {expected}, not {found}")]
    WrongType {
        /// The field, as the wire format names it.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
        /// The JSON type that was sent.
        found: &'static str,
    },
    /// A field has the right type but a value this format does not allow.
    #[error("{field} {problem}")]
    Invalid {
        /// The field, as the wire format names it.
        field: &'static str,
        /// What is wrong, as the end of a sentence.
        problem: String,
    },
}

impl WireError {
    /// The field at fault, or `body` when the whole body is.
    pub fn field(&self) -> &'static str {
        match self {
            WireError::Json(_) | WireError::NotAnObject(_) => "body",
            WireError::Missing(field) => field,
            WireError::WrongType { field, .. } | WireError::Invalid { field, .. } => field,
        }
    }
}

/// Reads `body` as a JSON object of `T`'s fields.
///
/// A body of UTF-8 that reads straight into `T` is taken so, without gathering it into a
/// [`Value`] first; any other (not UTF-8, not an object, not JSON, a field twice) is read again
/// the way that says what is wrong with it, or, for a repeated field, that keeps its last value
/// as JSON readers do. The whole body is checked for UTF-8 first because reading straight skips
/// the fields `T` does not have without looking inside their strings.
fn parse_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, WireError> {
    if let Ok(text) = std::str::from_utf8(body)
        && let Ok(Object(body)) = serde_json::from_str::<Object<T>>(text)
    {
        return Ok(body);
    }
    match serde_json::from_slice::<Sent<Object<T>>>(body) {
        Ok(sent) => object(sent, WireError::NotAnObject),
        Err(e) => Err(WireError::Json(e.to_string())),
    }
}

/// A value that must be an object, or the error `wrong` makes of the JSON type that was sent
/// (`null` when absent).
fn object<T>(sent: Sent<Object<T>>, wrong: impl FnOnce(&'static str) -> WireError) -> Result<T, WireError> {
    match sent {
        Sent::Value(Object(body)) => Ok(body),
        Sent::Absent | Sent::Null => Err(wrong("null")),
        Sent::Wrong(w) => Err(wrong(w.found)),
    }
}

/// The JSON type of `value`, as a message names it.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The checks of a tracker body's string field, naming it as the wire format does.
impl Sent<String> {
    /// A required string: absent is missing, `null` a wrong type.
    fn string(&self, field: &'static str) -> Result<String, WireError> {
        match self {
            Sent::Absent => Err(WireError::Missing(field)),
            sent => {
                sent.optional_string(field)?.ok_or(WireError::WrongType { field, expected: "a string", found: "null" })
            }
        }
    }

    /// An optional string: absent and `null` are `None`.
    fn optional_string(&self, field: &'static str) -> Result<Option<String>, WireError> {
        let wrong = |w: &Wrong| WireError::WrongType { field, expected: "a string", found: w.found };
        self.checked(wrong).map(Option::<&String>::cloned)
    }
}

/// Custom properties read from a JSON object, in the order sent: scalars as text (numbers and
/// booleans as JSON writes them), `null` and `""` left out, as they say nothing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Properties(Vec<(String, String)>);

/// How a property whose value is an array or an object is read.
#[derive(Debug, Clone, Copy)]
enum Nested {
    /// Left out.
    Dropped,
    /// An object's properties flattened to dotted keys (`cart.total`) while `levels` remain,
    /// deeper objects and arrays kept as JSON text.
    Flattened {
        /// How many more levels of objects are flattened.
        levels: usize,
    },
}

/// Reads a JSON object's properties into `out`, each key after `prefix`.
struct Entries<'a> {
    prefix: &'a str,
    nested: Nested,
    out: &'a mut Vec<(String, String)>,
}

impl<'de> Visitor<'de> for Entries<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let key = if self.prefix.is_empty() { key } else { format!("{}.{key}", self.prefix) };
            map.next_value_seed(Entry { key, nested: self.nested, out: self.out })?;
        }
        Ok(())
    }
}

/// Reads one property's value.
struct Entry<'a> {
    key: String,
    nested: Nested,
    out: &'a mut Vec<(String, String)>,
}

impl<'de> DeserializeSeed<'de> for Entry<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Entry<'_> {
    fn push(self, text: String) {
        self.out.push((self.key, text));
    }
}

impl<'de> Visitor<'de> for Entry<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a property value")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        if !v.is_empty() {
            self.push(v.to_owned());
        }
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.push(v.to_string());
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.push(v.to_string());
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.push(v.to_string());
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        if let Some(n) = serde_json::Number::from_f64(v) {
            self.push(n.to_string());
        }
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        match self.nested {
            Nested::Dropped => IgnoredAny::deserialize(SeqAccessDeserializer::new(seq)).map(|_| ()),
            // Kept as the JSON text it was sent as.
            Nested::Flattened { .. } => {
                let value = Value::deserialize(SeqAccessDeserializer::new(seq))?;
                self.push(value.to_string());
                Ok(())
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        match self.nested {
            Nested::Dropped => IgnoredAny::deserialize(MapAccessDeserializer::new(map)).map(|_| ()),
            Nested::Flattened { levels: 0 } => {
                let value = Value::deserialize(MapAccessDeserializer::new(map))?;
                self.push(value.to_string());
                Ok(())
            }
            Nested::Flattened { levels } => {
                let nested = Nested::Flattened { levels: levels - 1 };
                Entries { prefix: &self.key, nested, out: self.out }.visit_map(map)
            }
        }
    }
}

impl Properties {
    /// Reads an object's properties, nested ones as `nested` says.
    fn read<'de, D: Deserializer<'de>>(deserializer: D, nested: Nested) -> Result<Self, D::Error> {
        let mut out = Vec::new();
        deserializer.deserialize_map(Entries { prefix: "", nested, out: &mut out })?;
        Ok(Properties(out))
    }
}

/// Revenue as a body sends it: `{currency, amount}`, or a string holding that object in JSON.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RevenueSent {
    /// The object.
    Object(Object<RevenueFields>),
    /// Its JSON text.
    Text(String),
}

/// Revenue's fields.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
struct RevenueFields {
    /// An ISO 4217 code.
    currency: Sent<String>,
    /// A number or decimal text.
    amount: Sent<Amount>,
}

/// A revenue amount as sent.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Amount {
    /// Decimal text, kept exactly.
    Text(String),
    /// A JSON number, as JSON writes it.
    Number(serde_json::Number),
}

/// Revenue `{currency, amount}`, the amount a number or decimal text; a JSON-encoded string of
/// that object is read too. Absent and `null` are `None`.
fn read_revenue(sent: &Sent<RevenueSent>, field: &'static str) -> Result<Option<RawRevenue>, WireError> {
    const EXPECTED: &str = "an object with currency and amount";
    let decoded;
    let fields = match sent {
        Sent::Absent | Sent::Null => return Ok(None),
        Sent::Value(RevenueSent::Object(Object(fields))) => fields,
        Sent::Value(RevenueSent::Text(text)) => match serde_json::from_str::<Object<RevenueFields>>(text) {
            Ok(Object(fields)) => {
                decoded = fields;
                &decoded
            }
            Err(_) => return Err(WireError::WrongType { field, expected: EXPECTED, found: "a string" }),
        },
        Sent::Wrong(w) => return Err(WireError::WrongType { field, expected: EXPECTED, found: w.found }),
    };
    let found = |sent_type: Option<&'static str>| sent_type.unwrap_or("null");
    let currency = match &fields.currency {
        Sent::Value(c) => c.clone(),
        Sent::Absent => return Err(WireError::Missing("revenue.currency")),
        other => {
            return Err(WireError::WrongType {
                field: "revenue.currency",
                expected: "a string",
                found: found(wrong_type(other)),
            });
        }
    };
    let amount = match &fields.amount {
        Sent::Value(Amount::Text(a)) => a.clone(),
        Sent::Value(Amount::Number(n)) => n.to_string(),
        Sent::Absent => return Err(WireError::Missing("revenue.amount")),
        other => {
            return Err(WireError::WrongType {
                field: "revenue.amount",
                expected: "a number or a decimal string",
                found: found(wrong_type(other)),
            });
        }
    };
    Ok(Some(RawRevenue { amount, currency }))
}

/// The JSON type of a field that does not have its shape (`None` for `null`).
fn wrong_type<T>(sent: &Sent<T>) -> Option<&'static str> {
    match sent {
        Sent::Wrong(w) => Some(w.found),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
