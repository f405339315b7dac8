//! Tally's import format, read and written in one place: NDJSON lines or CSV records of events
//! with their own timestamps, read into [`ImportEvent`]s for `POST /api/import` and
//! `tally import`, and written from stored events by `tally export` ([`EventRecord`]), so an
//! export reads back as the events it came from.
//!
//! Both formats carry the same fields: `timestamp` (RFC 3339, or epoch milliseconds), `url`,
//! and optionally `name`, `referrer`, `user_agent`, `ip`, `visitor`, `country`, `interactive`,
//! `screen_width`, `language`, `browser`, `os` and `device` (what another tool recorded,
//! instead of the User-Agent's), revenue — an object `revenue: {amount, currency}` in NDJSON,
//! the columns `revenue_amount` and `revenue_currency` in CSV — and props — an object `props` in
//! NDJSON, one `props.NAME` column per prop in CSV (an empty cell is no prop, or no field). A
//! CSV file starts with a header row naming its columns; a column Tally does not know is
//! refused up front, so a misspelt header cannot drop a field silently.
//!
//! An export carries every field of an [`EventRecord`]: as CSV, the columns `timestamp`, `url`,
//! `name`, `referrer`, `visitor`, `country`, `interactive`, `language`, `revenue_amount`,
//! `revenue_currency`, `browser`, `os` and `device`, then one `props.NAME` column per prop key
//! any event has, so a CSV export imports back as the NDJSON one does. (A browser's or an
//! operating system's version and the screen size class are not exported: the import reads no
//! field for them.) A line
//! (and a record, read as the line it stands for) is a declared struct of
//! [`Sent`](crate::wire::sent::Sent) fields, made an event in one place.
//!
//! Visits are worked out in the order events are ingested, so [`Parsed::in_time_order`] sorts
//! what one body or file holds by timestamp first: the lines of a file may come in any order.
//! (Events of one visit sent in separate requests must still arrive in time order.)
//!
//! CSV is read with the `csv` crate (BurntSushi's, the Rust ecosystem's standard reader: quoted
//! fields with commas and newlines, CRLF, byte positions for error messages).

use std::collections::BTreeMap;
use std::io::Write;

use analytics::event::RawEvent;
use analytics::pipeline::{ImportClient, ImportEvent};
use analytics::sites::Site;
use analytics::stored::StoredEvent;
use serde::Deserialize;
use serde_json::{Map, Value as Json};

use crate::wire::sent::{Object, Sent};
use crate::wire::{RevenueSent, read_revenue};

/// How an import is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    Ndjson,
    /// A header row, then one event per record.
    Csv,
}

impl Format {
    /// The format a file name or a `Content-Type` names: CSV for `.csv` and `text/csv`,
    /// NDJSON otherwise.
    pub fn detect(name_or_type: &str) -> Format {
        let lower = name_or_type.trim().to_ascii_lowercase();
        if lower.ends_with(".csv") || lower.starts_with("text/csv") { Format::Csv } else { Format::Ndjson }
    }

    /// `ndjson` or `csv`.
    pub fn parse(name: &str) -> Option<Format> {
        match name.to_ascii_lowercase().as_str() {
            "ndjson" | "jsonl" | "json" => Some(Format::Ndjson),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }
}

/// What a body or file held: the events that read, and why the others did not, each with its
/// line number (the line a CSV record starts on).
#[derive(Debug, Default)]
pub struct Parsed {
    /// Events read, in the order they came.
    pub events: Vec<(usize, ImportEvent)>,
    /// Lines refused, with the reason (the first [`MAX_REPORTED_ERRORS`], and how many).
    pub errors: Refusals,
}

/// Most refused lines an import reports one by one; the others are counted.
pub const MAX_REPORTED_ERRORS: usize = 100;

/// Longest reason reported for one line, in characters.
const MAX_REASON_CHARS: usize = 300;

/// The lines an import refused: the [`MAX_REPORTED_ERRORS`] with the lowest line numbers, each
/// with its reason (at most 300 characters), and how many there were. Its memory is bounded
/// however many lines are bad.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Refusals {
    first: Vec<(usize, String)>,
    total: u64,
}

impl Refusals {
    /// Counts line `line` as refused for `reason`, keeping it if it is among the first.
    pub fn push(&mut self, line: usize, reason: impl Into<String>) {
        self.total += 1;
        if self.first.len() == MAX_REPORTED_ERRORS && self.first.last().is_some_and(|(last, _)| *last <= line) {
            return;
        }
        let mut reason = reason.into();
        if let Some((cut, _)) = reason.char_indices().nth(MAX_REASON_CHARS) {
            reason.truncate(cut);
            reason.push('…');
        }
        let at = self.first.partition_point(|(kept, _)| *kept <= line);
        self.first.insert(at, (line, reason));
        self.first.truncate(MAX_REPORTED_ERRORS);
    }

    /// The first refused lines by number, with their reasons.
    pub fn reported(&self) -> &[(usize, String)] {
        &self.first
    }

    /// How many lines were refused in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many refused lines are counted but not reported.
    pub fn omitted(&self) -> u64 {
        self.total - self.first.len() as u64
    }

    /// Whether no line was refused.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Adds the refusals of `other` (another part of the same body) to these.
    pub fn merge(&mut self, other: Refusals) {
        let omitted = other.omitted();
        for (line, reason) in other.first {
            self.push(line, reason);
        }
        self.total += omitted;
    }
}

impl Parsed {
    /// The events sorted by timestamp (ties keep their order), as visits must be ingested.
    pub fn in_time_order(mut self) -> Parsed {
        // Sorting the keys and moving each event once, not the events at every step of the sort.
        self.events.sort_by_cached_key(|(_, e)| e.raw.timestamp_ms);
        self
    }
}

/// The columns a CSV import may have, besides `props.NAME`.
const COLUMNS: [&str; 16] = [
    "timestamp",
    "url",
    "name",
    "referrer",
    "user_agent",
    "ip",
    "visitor",
    "country",
    "interactive",
    "browser",
    "os",
    "device",
    "screen_width",
    "language",
    "revenue_amount",
    "revenue_currency",
];
const PROP_PREFIX: &str = "props.";

/// Reads `body` as `format`. A body that cannot be read at all (a CSV header naming an unknown
/// column) is an `Err`; a bad line or record is an entry of [`Parsed::errors`].
pub fn parse(body: &[u8], format: Format, site: &Site) -> Result<Parsed, String> {
    match format {
        Format::Ndjson => Ok(parse_ndjson(body, site)),
        Format::Csv => parse_csv(body, site),
    }
}

fn parse_ndjson(body: &[u8], site: &Site) -> Parsed {
    parse_ndjson_from(body, 1, site)
}

/// Reads `body`, whole NDJSON lines the first of which is line `first_line` of its file (so a
/// file's parts can be read apart, each from a line's start, and their results put together).
pub fn parse_ndjson_from(body: &[u8], first_line: usize, site: &Site) -> Parsed {
    let mut out = Parsed::default();
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        let number = i + first_line;
        let Ok(line) = std::str::from_utf8(line) else {
            out.errors.push(number, "the line is not UTF-8");
            continue;
        };
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        match import_line(line, site) {
            Ok(event) => out.events.push((number, event)),
            Err(e) => out.errors.push(number, e),
        }
    }
    out
}

fn parse_csv(body: &[u8], site: &Site) -> Result<Parsed, String> {
    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(body);
    let header = reader.byte_headers().map_err(|e| format!("the header row cannot be read: {e}"))?.clone();
    let mut names = Vec::with_capacity(header.len());
    for (i, raw) in header.iter().enumerate() {
        let name = std::str::from_utf8(raw).map_err(|_| format!("column {} of the header is not UTF-8", i + 1))?;
        let name = name.trim().trim_start_matches('\u{feff}');
        let known = COLUMNS.contains(&name) || name.strip_prefix(PROP_PREFIX).is_some_and(|p| !p.is_empty());
        if !known {
            return Err(format!(
                "unknown column {name:?} (columns: {}, and props.NAME for each prop)",
                COLUMNS.join(", ")
            ));
        }
        if names.contains(&name) {
            return Err(format!("the column {name:?} appears twice"));
        }
        names.push(name);
    }
    for required in ["timestamp", "url"] {
        if !names.contains(&required) {
            return Err(format!("the header row has no {required:?} column"));
        }
    }
    let mut out = Parsed::default();
    let mut record = csv::ByteRecord::new();
    // Line numbers from byte offsets: a quoted field may span lines.
    let (mut counted_to, mut line) = (0usize, 1usize);
    let mut line_at = |byte: usize| {
        // After a CRLF the reader's position is the LF, which belongs to the line before.
        let byte = (byte + usize::from(body.get(byte) == Some(&b'\n'))).min(body.len());
        if byte > counted_to {
            line += body[counted_to..byte].iter().filter(|&&b| b == b'\n').count();
            counted_to = byte;
        }
        line
    };
    loop {
        let start = reader.position().byte() as usize;
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let message = match e.kind() {
                    csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                        format!("the record has {len} fields where the header has {expected_len}")
                    }
                    _ => format!("the record cannot be read: {e}"),
                };
                let number = line_at(e.position().map_or(start, |p| p.byte() as usize));
                out.errors.push(number, message);
                if matches!(e.kind(), csv::ErrorKind::Io(_)) {
                    break;
                }
                continue;
            }
        }
        let number = line_at(record.position().map_or(start, |p| p.byte() as usize));
        if record.iter().all(|field| field.iter().all(u8::is_ascii_whitespace)) {
            continue;
        }
        match csv_object(&names, &record).and_then(|object| csv_line(object).event(site)) {
            Ok(event) => out.events.push((number, event)),
            Err(e) => out.errors.push(number, e),
        }
    }
    Ok(out)
}

/// A CSV record as the JSON object an NDJSON line would hold: empty cells left out, props
/// gathered into `props`, `interactive` a boolean.
fn csv_object(names: &[&str], record: &csv::ByteRecord) -> Result<Map<String, Json>, String> {
    let mut object = Map::new();
    let mut props = Map::new();
    for (name, field) in names.iter().zip(record.iter()) {
        let text = std::str::from_utf8(field).map_err(|_| format!("the {name:?} field is not UTF-8"))?;
        if text.is_empty() {
            continue;
        }
        let value = match *name {
            "interactive" => match text.trim().to_ascii_lowercase().as_str() {
                "true" | "1" => Json::Bool(true),
                "false" | "0" => Json::Bool(false),
                _ => return Err(format!("`interactive` must be true or false, not {text:?}")),
            },
            "timestamp" if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
                Json::Number(text.parse::<i64>().map_err(|_| "`timestamp` is out of range".to_owned())?.into())
            }
            _ => Json::String(text.to_owned()),
        };
        match (name.strip_prefix(PROP_PREFIX), *name) {
            (Some(prop), _) => {
                props.insert(prop.to_owned(), value);
            }
            // Two columns make the `revenue` object an NDJSON line has.
            (None, "revenue_amount" | "revenue_currency") => {
                let revenue = object.entry("revenue").or_insert_with(|| Json::Object(Map::new()));
                if let Json::Object(r) = revenue {
                    r.insert(name.trim_start_matches("revenue_").to_owned(), value);
                }
            }
            (None, _) => {
                object.insert((*name).to_owned(), value);
            }
        }
    }
    if !props.is_empty() {
        object.insert("props".into(), Json::Object(props));
    }
    Ok(object)
}

/// A CSV record's object read as the NDJSON line it stands for.
fn csv_line(object: Map<String, Json>) -> ImportLine {
    // A map of JSON values reads as any struct of `Sent` fields.
    ImportLine::deserialize(Json::Object(object)).unwrap_or_default()
}

/// One NDJSON import line as an event of `site`.
pub fn import_line(line: &str, site: &Site) -> Result<ImportEvent, String> {
    match serde_json::from_str::<Sent<Object<ImportLine>>>(line) {
        Ok(Sent::Value(Object(line))) => line.event(site),
        Ok(_) => Err("each line must be a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// An import line as sent (a CSV record is read as the line it stands for).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ImportLine {
    /// When the event happened: RFC 3339, or epoch milliseconds.
    timestamp: Sent<Timestamp>,
    /// The page's URL, required.
    url: Sent<String>,
    /// The event's name; a page view when absent.
    name: Sent<String>,
    /// The referrer.
    referrer: Sent<String>,
    /// The User-Agent header the event came with.
    user_agent: Sent<String>,
    /// The client's address.
    ip: Sent<String>,
    /// `false` for an event that does not make a visit engaged.
    interactive: Sent<bool>,
    /// The screen's width in pixels: a number, or its decimal text.
    screen_width: Sent<Width>,
    /// The browser's language.
    language: Sent<String>,
    /// `{currency, amount}`.
    revenue: Sent<RevenueSent>,
    /// Custom properties.
    props: Sent<ImportProps>,
    /// The browser another tool recorded.
    browser: Sent<String>,
    /// The operating system another tool recorded.
    os: Sent<String>,
    /// The device class another tool recorded.
    device: Sent<String>,
    /// The visitor id another tool recorded.
    visitor: Sent<String>,
    /// The country code another tool recorded.
    country: Sent<String>,
}

/// An import line's `timestamp` as sent.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Timestamp {
    /// Epoch milliseconds.
    Millis(serde_json::Number),
    /// RFC 3339.
    Text(String),
}

/// An import line's `screen_width` as sent.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Width {
    /// Pixels.
    Number(serde_json::Number),
    /// Pixels as decimal text.
    Text(String),
}

/// An import line's `props`, in the order sent, each value as sent.
#[derive(Debug, Default)]
struct ImportProps(Vec<(String, Sent<PropValue>)>);

/// A prop's value: a string, number or boolean.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PropValue {
    /// Text, kept as it is.
    Text(String),
    /// A number, as JSON writes it.
    Number(serde_json::Number),
    /// A boolean, as JSON writes it.
    Flag(bool),
}

impl<'de> Deserialize<'de> for ImportProps {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = ImportProps;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ImportProps, A::Error> {
                let mut props = Vec::new();
                while let Some((key, value)) = map.next_entry()? {
                    props.push((key, value));
                }
                Ok(ImportProps(props))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

impl ImportLine {
    /// The line as an event of `site`: every [`ImportEvent`] an import makes is made here.
    fn event(&self, site: &Site) -> Result<ImportEvent, String> {
        let text = |sent: &Sent<String>, name: &str| -> Result<Option<String>, String> {
            sent.checked(|_| format!("`{name}` must be a string")).map(Option::<&String>::cloned)
        };
        let timestamp_ms = match &self.timestamp {
            Sent::Value(Timestamp::Millis(n)) => n.as_i64().ok_or("`timestamp` must be whole milliseconds")?,
            Sent::Value(Timestamp::Text(s)) => {
                s.parse::<jiff::Timestamp>().map_err(|e| format!("`timestamp` is not RFC 3339: {e}"))?.as_millisecond()
            }
            _ => return Err("`timestamp` is required (RFC 3339 or epoch milliseconds)".into()),
        };
        let url = text(&self.url, "url")?.ok_or("`url` is required")?;
        let mut raw = RawEvent::pageview(&url, &site.domain);
        raw.timestamp_ms = timestamp_ms;
        if let Some(name) = text(&self.name, "name")? {
            raw.name = name;
        }
        raw.referrer = text(&self.referrer, "referrer")?;
        raw.user_agent = text(&self.user_agent, "user_agent")?.unwrap_or_default();
        if let Some(ip) = text(&self.ip, "ip")? {
            raw.peer_ip = ip.parse().map_err(|_| format!("`ip` is not an address: {ip:?}"))?;
        }
        if let Some(interactive) = self.interactive.checked(|_| "`interactive` must be true or false")? {
            raw.interactive = *interactive;
        }
        let width_error = || "`screen_width` must be a whole number of pixels up to 100000".to_owned();
        raw.screen_width = match self.screen_width.checked(|_| width_error())? {
            None => None,
            Some(Width::Number(n)) => Some(n.as_u64().filter(|w| *w <= 100_000).ok_or_else(width_error)? as u32),
            Some(Width::Text(s)) => {
                Some(s.trim().parse::<u32>().ok().filter(|w| *w <= 100_000).ok_or_else(width_error)?)
            }
        };
        raw.language = text(&self.language, "language")?;
        raw.revenue = read_revenue(&self.revenue, "revenue").map_err(|e| e.to_string())?;
        for (k, v) in self.props.checked(|_| "`props` must be an object")?.map_or(&[][..], |p| &p.0) {
            let value = match v {
                Sent::Value(PropValue::Text(s)) => s.clone(),
                Sent::Value(PropValue::Number(n)) => n.to_string(),
                Sent::Value(PropValue::Flag(b)) => b.to_string(),
                _ => return Err(format!("prop `{k}` must be a string, number or boolean")),
            };
            raw.props.push((k.clone(), value));
        }
        let (browser, os, device) =
            (text(&self.browser, "browser")?, text(&self.os, "os")?, text(&self.device, "device")?);
        let client = (browser.is_some() || os.is_some() || device.is_some()).then(|| ImportClient {
            browser: browser.unwrap_or_default(),
            os: os.unwrap_or_default(),
            device: device.unwrap_or_default(),
        });
        Ok(ImportEvent {
            raw,
            visitor: text(&self.visitor, "visitor")?,
            country: text(&self.country, "country")?,
            client,
        })
    }
}

/// An event as an import line carries it: what `tally export` writes, in the shape
/// [`import_line`] reads back. A visit's first event carries its referrer, its language, its
/// browser, operating system and device, and its `utm_*` parameters in the URL, so visits,
/// sources, campaigns and devices come back the same. Fields an event does not have are left
/// out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EventRecord {
    /// RFC 3339.
    pub timestamp: String,
    /// `https://` host and path, with the visit's `utm_*` parameters on its first event.
    pub url: String,
    /// The event's name (`pageview` or a custom event's).
    pub name: String,
    /// The visit's referrer, on its first event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub referrer: Option<String>,
    /// The visitor id as stored.
    pub visitor: String,
    /// A country code, when one was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// `Some(false)` for an event that does not make a visit engaged; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interactive: Option<bool>,
    /// Custom properties.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub props: BTreeMap<String, String>,
    /// The visit's language, on its first event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Revenue, exact as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revenue: Option<RevenueRecord>,
    /// The visit's browser family, on its first event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub browser: Option<String>,
    /// The visit's operating system family, on its first event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// The visit's device type (`Desktop`, `Mobile`, `Tablet`), on its first event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// A revenue amount as an import line carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RevenueRecord {
    /// The decimal amount.
    pub amount: String,
    /// The ISO 4217 currency code.
    pub currency: String,
}

impl EventRecord {
    /// A stored event as an import line.
    pub fn from_stored(e: &StoredEvent) -> EventRecord {
        let v = e.visit.fields();
        let mut url = format!("https://{}{}", e.hostname, e.path);
        let first = e.seq == 0;
        let visit_text = |text: &str| (first && !text.is_empty()).then(|| text.to_owned());
        if first {
            let utm: Vec<(&str, &str)> = [
                ("utm_source", v.utm_source),
                ("utm_medium", v.utm_medium),
                ("utm_campaign", v.utm_campaign),
                ("utm_content", v.utm_content),
                ("utm_term", v.utm_term),
            ]
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .collect();
            if !utm.is_empty() {
                let query: String = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(utm).finish();
                url = format!("{url}?{query}");
            }
        }
        EventRecord {
            timestamp: jiff::Timestamp::from_millisecond(e.ts).map(|t| t.to_string()).unwrap_or_default(),
            url,
            name: e.name.clone(),
            referrer: (first && !v.referrer.is_empty()).then(|| format!("https://{}", v.referrer)),
            visitor: e.visitor_id.to_string(),
            country: (!v.country.is_empty()).then(|| v.country.to_owned()),
            interactive: (!e.interactive).then_some(false),
            props: e.props.clone(),
            language: (first && !v.language.is_empty()).then(|| v.language.to_owned()),
            revenue: e
                .revenue
                .as_ref()
                .map(|(amount, currency)| RevenueRecord { amount: amount.clone(), currency: currency.clone() }),
            browser: visit_text(v.browser),
            os: visit_text(v.os),
            device: visit_text(v.device),
        }
    }

    /// The record as one NDJSON line, without its newline.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The columns [`write_csv`] writes, before one `props.NAME` column per prop key: every field of
/// an [`EventRecord`], revenue in the two columns [`parse`] reads it from.
const WRITTEN_COLUMNS: [&str; 13] = [
    "timestamp",
    "url",
    "name",
    "referrer",
    "visitor",
    "country",
    "interactive",
    "language",
    "revenue_amount",
    "revenue_currency",
    "browser",
    "os",
    "device",
];

/// Writes `records` as CSV: a header row naming every prop key any record has, then one row a
/// record.
pub fn write_csv(out: &mut dyn Write, records: &[EventRecord]) -> Result<(), csv::Error> {
    let mut props: Vec<&str> = records.iter().flat_map(|r| r.props.keys().map(String::as_str)).collect();
    props.sort_unstable();
    props.dedup();
    let mut w = csv::Writer::from_writer(out);
    let header: Vec<String> = WRITTEN_COLUMNS
        .iter()
        .map(|c| (*c).to_owned())
        .chain(props.iter().map(|p| format!("{PROP_PREFIX}{p}")))
        .collect();
    w.write_record(&header)?;
    for r in records {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let cells = [
            r.timestamp.clone(),
            r.url.clone(),
            r.name.clone(),
            text(&r.referrer),
            r.visitor.clone(),
            text(&r.country),
            r.interactive.map(|b| b.to_string()).unwrap_or_default(),
            text(&r.language),
            r.revenue.as_ref().map(|m| m.amount.clone()).unwrap_or_default(),
            r.revenue.as_ref().map(|m| m.currency.clone()).unwrap_or_default(),
            text(&r.browser),
            text(&r.os),
            text(&r.device),
        ]
        .into_iter()
        .chain(props.iter().map(|p| r.props.get(*p).cloned().unwrap_or_default()));
        w.write_record(cells.collect::<Vec<_>>())?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: 2 MB of bad lines once made a 70 MB answer; the report keeps the first lines.
    #[test]
    fn refusals_keep_the_first_lines_and_count_the_rest() {
        let mut r = Refusals::default();
        for line in (1..=10_000).rev() {
            r.push(line, "x".repeat(10_000));
        }
        r.push(3, "again");
        assert_eq!(r.total(), 10_001);
        assert_eq!(r.reported().len(), MAX_REPORTED_ERRORS);
        assert_eq!(r.omitted(), 10_001 - MAX_REPORTED_ERRORS as u64);
        let lines: Vec<usize> = r.reported().iter().map(|(n, _)| *n).collect();
        assert_eq!(&lines[..4], [1, 2, 3, 3]);
        assert!(lines.windows(2).all(|w| w[0] <= w[1]));
        assert!(r.reported().iter().all(|(_, e)| e.chars().count() <= MAX_REASON_CHARS + 1));
    }

    fn site() -> Site {
        Site {
            site_id: "01SITE".into(),
            domain: "shop.test".into(),
            domains: Vec::new(),
            umami_id: String::new(),
            zone: analytics::period::SiteZone::new("UTC").unwrap(),
            retention_event_days: 30,
            retention_hourly_days: 90,
            retention_daily_days: 730,
            weeks_from_ms: 0,
            excluded_ips: analytics::enrich::IpRanges::new(),
            goals: Vec::new(),
            funnels: Vec::new(),
            segments: Vec::new(),
            import_salt: None,
        }
    }

    #[test]
    fn formats_are_told_by_name_and_type() {
        assert_eq!(Format::detect("events.CSV"), Format::Csv);
        assert_eq!(Format::detect("text/csv; charset=utf-8"), Format::Csv);
        assert_eq!(Format::detect("events.ndjson"), Format::Ndjson);
        assert_eq!(Format::detect("application/x-ndjson"), Format::Ndjson);
        assert_eq!(Format::parse("csv"), Some(Format::Csv));
        assert_eq!(Format::parse("xml"), None);
    }

    #[test]
    fn csv_records_read_as_ndjson_lines_do() {
        let csv = "timestamp,url,name,referrer,user_agent,ip,visitor,country,interactive,props.plan\r\n\
                   2026-10-05T10:00:00Z,https://shop.test/a,,https://news.example/,UA,192.0.2.1,v1,DE,,\r\n\
                   1791201600000,\"https://shop.test/b?x=1,2\",Signup,,UA,,v1,,false,pro\r\n\
                   ,,,,,,,,,\r\n\
                   2026-10-05T10:01:00Z,https://shop.test/c,,,UA,,v1,,maybe,\r\n\
                   2026-10-05T10:02:00Z,https://shop.test/d\r\n";
        let parsed = parse(csv.as_bytes(), Format::Csv, &site()).unwrap();
        let lines: Vec<usize> = parsed.events.iter().map(|(n, _)| *n).collect();
        assert_eq!(lines, [2, 3]);
        let (_, first) = &parsed.events[0];
        assert_eq!(first.raw.timestamp_ms, 1_791_194_400_000);
        assert_eq!(first.raw.referrer.as_deref(), Some("https://news.example/"));
        assert_eq!((first.visitor.as_deref(), first.country.as_deref()), (Some("v1"), Some("DE")));
        assert_eq!(first.raw.peer_ip.to_string(), "192.0.2.1");
        let (_, second) = &parsed.events[1];
        assert_eq!((second.raw.name.as_str(), second.raw.url.as_str()), ("Signup", "https://shop.test/b?x=1,2"));
        assert_eq!(second.raw.props, [("plan".to_owned(), "pro".to_owned())]);
        assert!(!second.raw.interactive);
        let errors: Vec<(usize, bool)> = parsed
            .errors
            .reported()
            .iter()
            .map(|(n, e)| (*n, e.contains("interactive") || e.contains("fields")))
            .collect();
        assert_eq!(errors, [(5, true), (6, true)], "{:?}", parsed.errors);
    }

    #[test]
    fn csv_line_numbers_count_lines_inside_quoted_fields() {
        let csv =
            "timestamp,url,props.note\n1000,https://shop.test/,\"two\nlines\"\n\n2000,https://shop.test/,x,extra\n";
        let parsed = parse(csv.as_bytes(), Format::Csv, &site()).unwrap();
        assert_eq!(parsed.events[0].1.raw.props, [("note".to_owned(), "two\nlines".to_owned())]);
        assert_eq!(parsed.errors.reported().iter().map(|(n, _)| *n).collect::<Vec<_>>(), [5], "{:?}", parsed.errors);
    }

    #[test]
    fn a_csv_header_must_name_known_columns_once() {
        for (header, complaint) in [
            ("timestamp,url,refferer", "unknown column \"refferer\""),
            ("timestamp,url,url", "appears twice"),
            ("url,name", "no \"timestamp\" column"),
            ("timestamp,url,props.", "unknown column"),
        ] {
            let e = parse(format!("{header}\n").as_bytes(), Format::Csv, &site()).unwrap_err();
            assert!(e.contains(complaint), "{header}: {e}");
        }
        assert!(parse(b"\xef\xbb\xbftimestamp,url\n", Format::Csv, &site()).unwrap().errors.is_empty(), "a BOM");
    }

    /// Import bodies near the real ones: fields and cells from a small vocabulary, quotes,
    /// commas, newlines and stray bytes included.
    fn body() -> impl proptest::strategy::Strategy<Value = (Vec<u8>, Format)> {
        use proptest::prelude::*;
        let cell = prop_oneof![
            Just(String::new()),
            Just("2026-10-05T10:00:00Z".to_owned()),
            Just("1791194400000".to_owned()),
            Just("https://shop.test/a?b=1,2".to_owned()),
            Just("\"quoted, with \"\"quotes\"\" and\nnewline\"".to_owned()),
            Just("true".to_owned()),
            Just("192.0.2.1".to_owned()),
            "[ -~]{0,12}".prop_map(|s| s),
            Just("\u{1}".to_owned()),
        ];
        let column = prop_oneof![
            Just("timestamp"),
            Just("url"),
            Just("name"),
            Just("interactive"),
            Just("ip"),
            Just("props.plan"),
            Just("visitor")
        ];
        let csv = (
            proptest::collection::vec(column, 0..6),
            proptest::collection::vec(proptest::collection::vec(cell.clone(), 0..7), 0..6),
        )
            .prop_map(|(header, rows)| {
                let mut text =
                    format!("timestamp,url{}{}\n", if header.is_empty() { "" } else { "," }, header.join(","));
                for row in rows {
                    text.push_str(&row.join(","));
                    text.push('\n');
                }
                (text.into_bytes(), Format::Csv)
            });
        let field = (prop_oneof![Just("timestamp"), Just("url"), Just("props"), Just("ip"), Just("interactive")], cell)
            .prop_map(|(k, v)| format!("{k:?}:{}", serde_json::Value::String(v)));
        let line = proptest::collection::vec(field, 0..5).prop_map(|f| format!("{{{}}}", f.join(",")));
        let ndjson = proptest::collection::vec(line, 0..6).prop_map(|l| (l.join("\n").into_bytes(), Format::Ndjson));
        let bytes =
            (proptest::collection::vec(any::<u8>(), 0..200), prop_oneof![Just(Format::Csv), Just(Format::Ndjson)]);
        prop_oneof![csv, ndjson, bytes]
    }

    proptest::proptest! {
        /// No body panics the reader; every line named is a line of the body, once; time order
        /// is time order.
        #[test]
        fn any_body_reads_without_panic_into_numbered_lines((bytes, format) in body()) {
            let lines = bytes.split(|b| *b == b'\n').count();
            if let Ok(parsed) = parse(&bytes, format, &site()) {
                let parsed = parsed.in_time_order();
                let mut named: Vec<usize> =
                    parsed.events.iter().map(|(n, _)| *n).chain(parsed.errors.reported().iter().map(|(n, _)| *n)).collect();
                proptest::prop_assert!(named.iter().all(|n| (1..=lines).contains(n)), "{named:?} of {lines}");
                named.sort_unstable();
                named.dedup();
                proptest::prop_assert_eq!(named.len(), parsed.events.len() + parsed.errors.reported().len());
                proptest::prop_assert!(parsed.events.windows(2).all(|w| w[0].1.raw.timestamp_ms <= w[1].1.raw.timestamp_ms));
            }
        }
    }

    /// Regression: the CSV export once left out `language` and revenue, which the NDJSON
    /// export and both imports carry, so a CSV export imported back lost them; and no export
    /// carried the visit's browser, operating system and device, which both imports read.
    #[test]
    fn a_csv_export_imports_back_with_language_and_revenue() {
        let record = EventRecord {
            timestamp: "2026-10-05T10:00:00Z".into(),
            url: "https://shop.test/checkout".into(),
            name: "Purchase".into(),
            referrer: None,
            visitor: "v1".into(),
            country: Some("DE".into()),
            interactive: None,
            props: BTreeMap::from([("plan".to_owned(), "pro".to_owned())]),
            language: Some("de-DE".into()),
            revenue: Some(RevenueRecord { amount: "1322.22".into(), currency: "EUR".into() }),
            browser: Some("Firefox".into()),
            os: Some("Linux".into()),
            device: Some("Desktop".into()),
        };
        let plain = EventRecord {
            language: None,
            revenue: None,
            props: BTreeMap::new(),
            browser: None,
            os: None,
            device: None,
            ..record.clone()
        };
        let mut csv = Vec::new();
        write_csv(&mut csv, &[record, plain]).unwrap();
        let text = String::from_utf8(csv).unwrap();
        assert!(
            text.starts_with(
                "timestamp,url,name,referrer,visitor,country,interactive,language,revenue_amount,revenue_currency,\
                 browser,os,device,props.plan\n"
            ),
            "{text}"
        );
        let parsed = parse(text.as_bytes(), Format::Csv, &site()).unwrap();
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        let read: Vec<_> = parsed
            .events
            .iter()
            .map(|(_, e)| {
                let revenue = e.raw.revenue.as_ref().map(|r| (r.amount.as_str(), r.currency.as_str()));
                let client = e.client.as_ref().map(|c| (c.browser.as_str(), c.os.as_str(), c.device.as_str()));
                (e.raw.language.as_deref(), revenue, e.raw.props.len(), client)
            })
            .collect();
        assert_eq!(
            read,
            [
                (Some("de-DE"), Some(("1322.22", "EUR")), 1, Some(("Firefox", "Linux", "Desktop"))),
                (None, None, 0, None)
            ]
        );
    }

    #[test]
    fn events_are_put_in_time_order_and_ties_keep_theirs() {
        let ndjson = [
            r#"{"timestamp": 3000, "url": "https://shop.test/c"}"#,
            r#"{"timestamp": 1000, "url": "https://shop.test/a"}"#,
            "not json",
            r#"{"timestamp": 3000, "url": "https://shop.test/d"}"#,
            r#"{"timestamp": 2000, "url": "https://shop.test/b"}"#,
        ]
        .join("\n");
        let parsed = parse(ndjson.as_bytes(), Format::Ndjson, &site()).unwrap().in_time_order();
        let order: Vec<(usize, &str)> = parsed.events.iter().map(|(n, e)| (*n, e.raw.url.as_str())).collect();
        assert_eq!(
            order,
            [
                (2, "https://shop.test/a"),
                (5, "https://shop.test/b"),
                (1, "https://shop.test/c"),
                (4, "https://shop.test/d")
            ]
        );
        assert_eq!(parsed.errors.reported().len(), 1);
        assert_eq!(parsed.errors.reported()[0].0, 3);
    }
}
