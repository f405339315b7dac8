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
//! rather than refused, properties that are neither an object nor a string holding one are
//! ignored, and unknown fields (the tracker's version `v`) are ignored. An `engagement` event's
//! `sd` (scroll depth, percent) and `e` (engaged time, ms) are kept as the properties
//! `scroll_depth` and `engaged_ms`, the names Tally's tracker sends them under.

use analytics::event::RawEvent;
use serde_json::{Map, Value};

use super::{RequestMeta, WireError};

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
    let map = super::parse_object(body)?;

    let name = super::string(pick(&map, "n", "name").ok_or(WireError::Missing("name"))?, "name")?;
    let url = super::string(pick(&map, "u", "url").ok_or(WireError::Missing("url"))?, "url")?;
    let domain = match super::optional_string(pick(&map, "d", "domain"), "domain")? {
        Some(domain) => domain,
        // Plausible falls back to the page's host; an unreadable URL leaves the domain empty, and
        // validation then reports the URL.
        None => url::Url::parse(url.trim()).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default(),
    };
    let referrer = super::optional_string(pick(&map, "r", "referrer"), "referrer")?;
    let props = match ["m", "meta", "p", "props"].iter().find_map(|k| present(&map, k)) {
        Some(value) => props(value)?,
        None => Vec::new(),
    };
    let hash_mode = matches!(pick(&map, "h", "hashMode"), Some(Value::Bool(true)))
        || pick(&map, "h", "hashMode").and_then(Value::as_i64) == Some(1);
    // `false` is a value here, so the short name is looked up on its own.
    let interactive = map.get("i").or_else(|| map.get("interactive")) != Some(&Value::Bool(false));
    let revenue = super::revenue(pick(&map, "$", "revenue"), "revenue")?;

    let mut props = props;
    if name == "engagement" {
        for (field, key) in [("sd", "scroll_depth"), ("e", "engaged_ms")] {
            if let Some(n) = map.get(field).and_then(Value::as_f64).filter(|n| n.is_finite() && *n >= 0.0)
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
    raw.screen_width = map
        .get("w")
        .and_then(Value::as_f64)
        .filter(|w| w.is_finite() && *w >= 0.0 && *w <= 100_000.0)
        .map(|w| w as u32);
    Ok(raw)
}

/// The value under `short`, else under `long`; `null` counts as absent.
fn pick<'a>(map: &'a Map<String, Value>, short: &str, long: &str) -> Option<&'a Value> {
    present(map, short).or_else(|| present(map, long))
}

fn present<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

/// Properties from an object or from a string holding one, scalar values only. A string that
/// holds no object is ignored, as the tracker may send one; any other type is refused, so a
/// client learns its properties were not recorded.
fn props(value: &Value) -> Result<Vec<(String, String)>, WireError> {
    let decoded;
    let object = match value {
        Value::Object(map) => map,
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => {
                decoded = map;
                &decoded
            }
            _ => return Ok(Vec::new()),
        },
        other => {
            return Err(WireError::WrongType { field: "props", expected: "an object", found: super::json_type(other) });
        }
    };
    Ok(object.iter().filter_map(|(k, v)| Some((k.clone(), super::scalar_text(v)?))).collect())
}
