//! The wire formats: request bodies as the official trackers send them, read into
//! [`analytics::event::RawEvent`], and Tally's import format ([`import`]), read and written. Nothing here validates the event's content (lengths, URLs,
//! domains): [`analytics::event::Event::parse`] does that later. This layer only refuses bodies
//! whose shape it cannot read, and says what is wrong with them.
//!
//! Bodies are read as JSON whatever their `Content-Type`, because Plausible's tracker sends JSON
//! labelled `text/plain` (a "simple" request that needs no CORS preflight).

use std::net::{IpAddr, Ipv4Addr};

use analytics::event::{RawEvent, RawRevenue, RequestHeaders};
use serde_json::{Map, Value};

pub mod accounts;
pub mod admin;
pub mod import;
pub mod plausible;
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

/// Parses `body` as a JSON object.
fn parse_object(body: &[u8]) -> Result<Map<String, Value>, WireError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(WireError::NotAnObject(json_type(&other))),
        Err(e) => Err(WireError::Json(e.to_string())),
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

/// `value` as a string, or a type error naming `field`.
fn string(value: &Value, field: &'static str) -> Result<String, WireError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(WireError::WrongType { field, expected: "a string", found: json_type(other) }),
    }
}

/// An optional string: absent and `null` are `None`.
fn optional_string(value: Option<&Value>, field: &'static str) -> Result<Option<String>, WireError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => string(v, field).map(Some),
    }
}

/// A scalar property value as text: strings as sent, numbers and booleans as JSON writes them.
/// `None` for `null` and the empty string (which say nothing) and for arrays and objects.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// Revenue `{currency, amount}`, the amount a number or decimal text; a JSON-encoded string of
/// that object is read too. Absent and `null` are `None`.
pub(crate) fn revenue(value: Option<&Value>, field: &'static str) -> Result<Option<RawRevenue>, WireError> {
    const EXPECTED: &str = "an object with currency and amount";
    let decoded;
    let object = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => {
                decoded = map;
                &decoded
            }
            _ => return Err(WireError::WrongType { field, expected: EXPECTED, found: "a string" }),
        },
        Some(other) => return Err(WireError::WrongType { field, expected: EXPECTED, found: json_type(other) }),
    };
    let currency = match object.get("currency") {
        Some(Value::String(c)) => c.clone(),
        Some(other) => {
            return Err(WireError::WrongType {
                field: "revenue.currency",
                expected: "a string",
                found: json_type(other),
            });
        }
        None => return Err(WireError::Missing("revenue.currency")),
    };
    let amount = match object.get("amount") {
        Some(Value::String(a)) => a.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(WireError::WrongType {
                field: "revenue.amount",
                expected: "a number or a decimal string",
                found: json_type(other),
            });
        }
        None => return Err(WireError::Missing("revenue.amount")),
    };
    Ok(Some(RawRevenue { amount, currency }))
}

#[cfg(test)]
mod tests;
