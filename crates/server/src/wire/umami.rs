//! Umami's collection body, `POST /api/send`: `{type, payload}`, as Umami's tracker sends it.
//!
//! The payload names its site by `website`, a UUID, not by domain; the site lookup happens in the
//! pipeline, so [`Send::website`] carries it beside the event. The tracker sends `url` and
//! `referrer` as a path and query (`/pricing?plan=pro`) and the page's `hostname` separately;
//! they are resolved against `https://{hostname}` into the absolute URL Tally validates, and the
//! event's domain is that host. A payload without `name` is a page view. `data` becomes
//! properties: scalars as text, nested objects flattened to dotted keys (`cart.total`), arrays
//! kept as JSON text.
//!
//! `identify` sends visitor traits Tally does not keep (it stores no identities), and
//! `performance` and `engagement` carry measurements Tally does not record yet: they are read,
//! checked for a website, and acknowledged without an event.

use analytics::event::RawEvent;
use serde_json::{Map, Value};
use url::Url;

use super::{RequestMeta, WireError};

/// A `/api/send` body that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    /// The Umami website id (a UUID), for the pipeline to map to a Tally site.
    pub website: String,
    /// What was sent.
    pub kind: SendKind,
}

/// What a `/api/send` body asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendKind {
    /// A page view or custom event, to ingest.
    Event(Box<RawEvent>),
    /// Visitor traits: acknowledged, not kept.
    Identify,
    /// A type Tally acknowledges without recording (`performance`, `engagement`).
    Ignored(String),
}

/// Deepest nesting of `data` that is flattened; deeper values are kept as JSON text.
const MAX_DATA_DEPTH: usize = 4;

/// Reads an Umami `/api/send` body sent with `meta`.
///
/// ```
/// use server::wire::{RequestMeta, umami};
///
/// let body = br#"{"type":"event","payload":{"website":"c37edc28-ee5f-4c62-9ce3-377fa6f600a8",
///     "hostname":"example.com","url":"/pricing","referrer":""}}"#;
/// let send = umami::parse(body, RequestMeta::default()).unwrap();
/// let umami::SendKind::Event(raw) = send.kind else { panic!() };
/// assert_eq!(raw.url, "https://example.com/pricing");
/// assert_eq!(raw.name, "pageview");
/// ```
pub fn parse(body: &[u8], meta: RequestMeta) -> Result<Send, WireError> {
    let map = super::parse_object(body)?;
    let kind = super::string(map.get("type").ok_or(WireError::Missing("type"))?, "type")?;
    let payload = match map.get("payload") {
        Some(Value::Object(payload)) => payload,
        Some(other) => {
            return Err(WireError::WrongType {
                field: "payload",
                expected: "an object",
                found: super::json_type(other),
            });
        }
        None => return Err(WireError::Missing("payload")),
    };
    let website =
        super::string(payload.get("website").ok_or(WireError::Missing("payload.website"))?, "payload.website")?;
    if !is_uuid(&website) {
        return Err(WireError::Invalid { field: "payload.website", problem: "must be a UUID".into() });
    }
    let kind = match kind.as_str() {
        "event" => SendKind::Event(Box::new(event(payload, meta)?)),
        "identify" => SendKind::Identify,
        "performance" | "engagement" => SendKind::Ignored(kind),
        _ => {
            return Err(WireError::Invalid {
                field: "type",
                problem: "must be event, identify, performance or engagement".into(),
            });
        }
    };
    Ok(Send { website, kind })
}

fn event(payload: &Map<String, Value>, meta: RequestMeta) -> Result<RawEvent, WireError> {
    let hostname = super::optional_string(payload.get("hostname"), "payload.hostname")?.unwrap_or_default();
    let hostname = hostname.trim();
    let base = if hostname.is_empty() { "https://localhost".to_owned() } else { format!("https://{hostname}") };
    let base = Url::parse(&base)
        .map_err(|e| WireError::Invalid { field: "payload.hostname", problem: format!("is not a host name: {e}") })?;
    let path = super::optional_string(payload.get("url"), "payload.url")?.unwrap_or_default();
    let url = base
        .join(if path.is_empty() { "/" } else { &path })
        .map_err(|e| WireError::Invalid { field: "payload.url", problem: format!("is not a URL or path: {e}") })?;
    // A path-only referrer (the previous page of a single-page app) is on the same host.
    let referrer = super::optional_string(payload.get("referrer"), "payload.referrer")?
        .filter(|r| !r.trim().is_empty())
        .map(|r| base.join(&r).map(String::from).unwrap_or(r));
    let name = super::optional_string(payload.get("name"), "payload.name")?
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "pageview".to_owned());
    let mut props = Vec::new();
    match payload.get("data") {
        None | Some(Value::Null) => {}
        Some(Value::Object(data)) => flatten("", data, 0, &mut props),
        Some(other) => {
            return Err(WireError::WrongType {
                field: "payload.data",
                expected: "an object",
                found: super::json_type(other),
            });
        }
    }
    let domain = url.host_str().unwrap_or_default().to_owned();
    let mut raw = meta.event(name, url.into(), domain);
    raw.referrer = referrer;
    raw.props = props;
    // `screen` is `WIDTHxHEIGHT`; `language` is `navigator.language`. Either, unreadable, is left
    // out rather than refused, as Umami does.
    raw.screen_width = payload
        .get("screen")
        .and_then(Value::as_str)
        .and_then(|s| s.split_once('x'))
        .and_then(|(w, _)| w.trim().parse::<u32>().ok());
    raw.language = payload.get("language").and_then(Value::as_str).map(str::to_owned);
    Ok(raw)
}

fn flatten(prefix: &str, data: &Map<String, Value>, depth: usize, out: &mut Vec<(String, String)>) {
    for (key, value) in data {
        let key = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            Value::Object(inner) if depth < MAX_DATA_DEPTH => flatten(&key, inner, depth + 1, out),
            Value::Object(_) | Value::Array(_) => out.push((key, value.to_string())),
            scalar => {
                if let Some(text) = super::scalar_text(scalar) {
                    out.push((key, text));
                }
            }
        }
    }
}

/// Whether `text` is a UUID in its usual hyphenated form.
fn is_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}
