//! Plausible's Events API body, `POST /api/event`, read the way Plausible reads it.
//!
//! Every field has a short name (what the tracker sends) and a long one (what the Events API
//! documentation shows); the short one wins when both are present. Accepted shapes:
//!
//! | field | names | shape |
//! |---|---|---|
//! | event name | `n`, `name` | string, required |
//! | page URL | `u`, `url` | string, required |
//! | site domain(s) | `d`, `domain` | string, comma-separated (the event counts for every site listed); absent → the URL's host |
//! | referrer | `r`, `referrer` | string or `null` |
//! | properties | `m`, `meta`, `p`, `props` (first present wins) | object, or a string holding a JSON object |
//! | hash routing | `h`, `hashMode` | `1` or `true` turns it on |
//! | interactive | `i`, `interactive` | `false` marks a non-interactive event |
//! | revenue | `$`, `revenue` | `{currency, amount}`, amount a number or a string |
//! | window width | `w` | number of CSS pixels; anything else is ignored |
//!
//! As Plausible does, property values that are `null`, empty, arrays or objects are left out
//! rather than refused, properties sent as a string that holds no JSON object are ignored (any
//! other type is refused), and unknown fields (the tracker's version `v`) are ignored. An `engagement` event's
//! `sd` (scroll depth, percent) and `e` (engaged time, ms) are kept as the properties
//! `scroll_depth` and `engaged_ms`, the names Tally's tracker sends them under.

use analytics::event::RawEvent;
use serde::{Deserialize, Deserializer};

use super::sent::Sent;
use super::{Nested, Properties, RequestMeta, RevenueSent, WireError};

/// The Events API body: every field under its short name and its long one.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EventBody {
    n: Sent<String>,
    name: Sent<String>,
    u: Sent<String>,
    url: Sent<String>,
    d: Sent<String>,
    domain: Sent<String>,
    r: Sent<String>,
    referrer: Sent<String>,
    m: Sent<PropsSent>,
    meta: Sent<PropsSent>,
    p: Sent<PropsSent>,
    props: Sent<PropsSent>,
    h: Sent<HashMode>,
    #[serde(rename = "hashMode")]
    hash_mode: Sent<HashMode>,
    i: Sent<bool>,
    interactive: Sent<bool>,
    #[serde(rename = "$")]
    dollar: Sent<RevenueSent>,
    revenue: Sent<RevenueSent>,
    /// An `engagement` event's scroll depth, percent.
    sd: Sent<f64>,
    /// An `engagement` event's engaged time, ms.
    e: Sent<f64>,
    /// The window's width in CSS pixels.
    w: Sent<f64>,
}

/// Properties as sent: an object, or a string that may hold one in JSON.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PropsSent {
    /// The object, its scalar values read.
    Object(Props),
    /// Text, read as JSON when it holds an object.
    Text(String),
}

/// An object's scalar properties; arrays and objects are left out.
#[derive(Debug, Default)]
struct Props(Properties);

impl<'de> Deserialize<'de> for Props {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Properties::read(deserializer, Nested::Dropped).map(Props)
    }
}

/// Hash routing as sent: `true` or `1` turns it on.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum HashMode {
    Flag(bool),
    Number(i64),
}

/// Reads a Plausible Events API body sent with `meta`.
///
/// ```
/// use server::wire::{RequestMeta, plausible};
///
/// let body = br#"{"n":"pageview","u":"https://example.com/","d":"example.com","r":null}"#;
/// let raw = plausible::parse(body, RequestMeta::default()).unwrap();
/// assert_eq!(raw.name, "pageview");
/// assert_eq!(raw.domain, "example.com");
/// ```
pub fn parse(body: &[u8], meta: RequestMeta) -> Result<RawEvent, WireError> {
    let body: EventBody = super::parse_object(body)?;

    let name = body.n.or(body.name).optional_string("name")?.ok_or(WireError::Missing("name"))?;
    let url = body.u.or(body.url).optional_string("url")?.ok_or(WireError::Missing("url"))?;
    let domain = match body.d.or(body.domain).optional_string("domain")? {
        Some(domain) => domain,
        // Plausible falls back to the page's host; an unreadable URL leaves the domain empty, and
        // validation then reports the URL.
        None => url::Url::parse(url.trim()).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default(),
    };
    let referrer = body.r.or(body.referrer).optional_string("referrer")?;
    let mut props = match body.m.or(body.meta).or(body.p).or(body.props) {
        Sent::Absent | Sent::Null => Vec::new(),
        Sent::Value(PropsSent::Object(Props(props))) => props.0,
        // A string that holds no object is ignored, as the tracker may send one.
        Sent::Value(PropsSent::Text(text)) => serde_json::from_str::<Props>(&text).unwrap_or_default().0.0,
        // Any other type is refused, so a client learns its properties were not recorded.
        Sent::Wrong(w) => return Err(WireError::WrongType { field: "props", expected: "an object", found: w.found }),
    };
    let hash_mode = matches!(body.h.or(body.hash_mode), Sent::Value(HashMode::Flag(true) | HashMode::Number(1)));
    // `false` is a value here, and `null` under the short name hides the long one.
    let interactive = if matches!(body.i, Sent::Absent) { body.interactive } else { body.i };
    let interactive = interactive != Sent::Value(false);
    let revenue = super::read_revenue(&body.dollar.or(body.revenue), "revenue")?;

    if name == "engagement" {
        for (sent, key) in [(&body.sd, "scroll_depth"), (&body.e, "engaged_ms")] {
            if let Some(n) = sent.value().filter(|n| n.is_finite() && **n >= 0.0)
                && !props.iter().any(|(k, _)| k == key)
            {
                props.push((key.to_owned(), (n.round() as u64).to_string()));
            }
        }
    }
    let mut raw = meta.event(name, url, domain);
    raw.referrer = referrer;
    raw.props = props;
    raw.hash_mode = hash_mode;
    raw.interactive = interactive;
    raw.revenue = revenue;
    // Plausible's tracker sends `window.innerWidth`, which Plausible turns into a screen size class.
    raw.screen_width = body.w.value().filter(|w| w.is_finite() && **w >= 0.0 && **w <= 100_000.0).map(|w| *w as u32);
    Ok(raw)
}
