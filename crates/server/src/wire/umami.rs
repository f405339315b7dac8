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
//!
//! The answers are declared too: [`SendAnswer`] for a body taken or dropped, [`BatchAnswer`] for
//! a `/api/batch`, which lists the refused bodies with the error each would have got alone.

use analytics::event::RawEvent;
use serde::{Deserialize, Deserializer, Serialize};
use url::Url;

use super::sent::{Object, Sent};
use super::{ErrorBody, Nested, Properties, RequestMeta, WireError};

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

/// A `/api/send` body as sent.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SendBody {
    /// `event`, `identify`, `performance` or `engagement`.
    #[serde(rename = "type")]
    kind: Sent<String>,
    /// What the type carries.
    payload: Sent<Object<Payload>>,
}

/// A `/api/send` payload as sent.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Payload {
    /// The Umami website id.
    website: Sent<String>,
    /// The page's host name.
    hostname: Sent<String>,
    /// The page's path and query.
    url: Sent<String>,
    /// The previous page: a path, or an absolute URL.
    referrer: Sent<String>,
    /// A custom event's name; a page view has none.
    name: Sent<String>,
    /// The event's data.
    data: Sent<Data>,
    /// `WIDTHxHEIGHT`.
    screen: Sent<String>,
    /// `navigator.language`.
    language: Sent<String>,
}

/// An event's `data` as properties: nested objects flattened, arrays kept as JSON text.
#[derive(Debug, Default)]
struct Data(Properties);

impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Properties::read(deserializer, Nested::Flattened { levels: MAX_DATA_DEPTH }).map(Data)
    }
}

/// The bodies of a `/api/batch`, each read as `/api/send` reads its body.
pub type Batch = Vec<Sent<Object<SendBody>>>;

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
    read(super::parse_object(body)?, meta)
}

/// Reads one body of a `/api/batch` sent with `meta`, as [`parse`] reads a whole body.
pub fn parse_item(item: Sent<Object<SendBody>>, meta: RequestMeta) -> Result<Send, WireError> {
    read(super::object(item, WireError::NotAnObject)?, meta)
}

fn read(body: SendBody, meta: RequestMeta) -> Result<Send, WireError> {
    let kind = body.kind.string("type")?;
    if matches!(body.payload, Sent::Absent) {
        return Err(WireError::Missing("payload"));
    }
    let payload =
        super::object(body.payload, |found| WireError::WrongType { field: "payload", expected: "an object", found })?;
    let website = payload.website.string("payload.website")?;
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

fn event(payload: Payload, meta: RequestMeta) -> Result<RawEvent, WireError> {
    let hostname = payload.hostname.optional_string("payload.hostname")?.unwrap_or_default();
    let hostname = hostname.trim();
    let base = if hostname.is_empty() { "https://localhost".to_owned() } else { format!("https://{hostname}") };
    let base = Url::parse(&base)
        .map_err(|e| WireError::Invalid { field: "payload.hostname", problem: format!("is not a host name: {e}") })?;
    let path = payload.url.optional_string("payload.url")?.unwrap_or_default();
    let url = base
        .join(if path.is_empty() { "/" } else { &path })
        .map_err(|e| WireError::Invalid { field: "payload.url", problem: format!("is not a URL or path: {e}") })?;
    // A path-only referrer (the previous page of a single-page app) is on the same host.
    let referrer = payload
        .referrer
        .optional_string("payload.referrer")?
        .filter(|r| !r.trim().is_empty())
        .map(|r| base.join(&r).map(String::from).unwrap_or(r));
    let name = payload
        .name
        .optional_string("payload.name")?
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "pageview".to_owned());
    let props = match payload.data {
        Sent::Absent | Sent::Null => Vec::new(),
        Sent::Value(Data(props)) => props.0,
        Sent::Wrong(w) => {
            return Err(WireError::WrongType { field: "payload.data", expected: "an object", found: w.found });
        }
    };
    let domain = url.host_str().unwrap_or_default().to_owned();
    let mut raw = meta.event(name, url.into(), domain);
    raw.referrer = referrer;
    raw.props = props;
    // `screen` is `WIDTHxHEIGHT`; `language` is `navigator.language`. Either, unreadable, is left
    // out rather than refused, as Umami does.
    raw.screen_width =
        payload.screen.value().and_then(|s| s.split_once('x')).and_then(|(w, _)| w.trim().parse::<u32>().ok());
    raw.language = payload.language.value().cloned();
    Ok(raw)
}

/// Umami's answer to a `/api/send` body that was taken or dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum SendAnswer {
    /// Taken: `{"cache": token}`, a token the tracker sends back in `x-umami-cache`.
    Taken {
        /// `tally.` and the website id.
        cache: String,
    },
    /// Dropped on purpose: `{"beep": "boop"}`, as Umami answers a bot.
    Dropped {
        /// Always `boop`.
        beep: &'static str,
    },
}

impl SendAnswer {
    /// The answer to a body of `website` that was taken.
    pub fn taken(website: &str) -> Self {
        SendAnswer::Taken { cache: format!("tally.{website}") }
    }

    /// The answer to a body that was dropped.
    pub fn dropped() -> Self {
        SendAnswer::Dropped { beep: "boop" }
    }
}

/// The answer of `POST /api/batch`, as Umami gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchAnswer {
    /// How many bodies the batch held.
    pub size: usize,
    /// How many were taken or dropped.
    pub processed: usize,
    /// How many were refused.
    pub errors: usize,
    /// The refused ones, in order.
    pub details: Vec<BatchRefusal>,
}

/// A refused body of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchRefusal {
    /// Its place in the batch, from 0.
    pub index: usize,
    /// The error body `/api/send` would have answered it with.
    pub response: ErrorBody,
}

impl BatchAnswer {
    /// The answer to a batch of `size` bodies of which `details` were refused.
    pub fn new(size: usize, details: Vec<BatchRefusal>) -> Self {
        BatchAnswer { size, processed: size - details.len(), errors: details.len(), details }
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
