//! Stored events and aggregate items as model items, converted by hand (no serde in this crate).
//!
//! [`event_item`] and [`event_from_record`] are the one place the `Event` entity's attributes are
//! spelled: ingestion writes with the first, aggregation, recovery, rebuilds and raw-event queries
//! read with the second. Empty strings, maps and lists are left out of the item (they cost bytes on
//! every one of millions of events) and read back as empty.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use model::Record;
use store::{AttributeValue, Item};

use super::AggregateError;
use crate::sketch::VisitorSketch;
use ulid::Ulid;

use crate::sites::SiteId;
use crate::stored::{AggKey, Counters, Period, PrevState, StoredEvent, VisitAttrs};
use crate::visitor::{UtcDay, VisitorId};

/// The `Event` entity's fields of a stored event, ready for `table.put("Event", …)` (the model
/// layer adds the keys).
pub fn event_item(e: &StoredEvent) -> Item {
    let mut item = Item::new();
    let mut text = |name: &str, value: &str| {
        if !value.is_empty() {
            item.insert(name.to_owned(), AttributeValue::from(value));
        }
    };
    text("site_id", &e.site_id);
    text("day", &e.day.to_string());
    text("visitor_id", &e.visitor_id.to_string());
    text("session_id", &e.session_id.to_string());
    text("name", &e.name);
    text("hostname", &e.hostname);
    text("path", &e.path);
    let v = &e.visit;
    for (name, value) in VisitAttrs::NAMES.into_iter().zip(v.texts()) {
        text(name, value);
    }
    text("prev_exit_page", &e.prev.exit_page);
    text("run", &e.run);
    if let Some((amount, currency)) = &e.revenue {
        text("revenue", amount);
        text("currency", currency);
    }
    item.insert("shard".into(), crate::stored::visitor_shard(e.visitor_id).into());
    item.insert("seq".into(), e.seq.into());
    item.insert("ts".into(), e.ts.into());
    item.insert("start_ts".into(), v.start_ts.into());
    item.insert("interactive".into(), e.interactive.into());
    item.insert("prev_events".into(), e.prev.events.into());
    item.insert("prev_pageviews".into(), e.prev.pageviews.into());
    item.insert("prev_interactive".into(), e.prev.interactive.into());
    item.insert("prev_last_ts".into(), e.prev.last_ts.into());
    item.insert("epoch".into(), e.epoch.into());
    // No expiry given (0) leaves the `Event` entity's default retention to the model layer: a TTL
    // of 0 would mean "expired in 1970".
    if e.ttl > 0 {
        item.insert("ttl".into(), e.ttl.into());
    }
    if !e.props.is_empty() {
        let props = e.props.iter().map(|(k, v)| (k.clone(), AttributeValue::from(v.as_str()))).collect();
        item.insert("props".into(), AttributeValue::M(props));
    }
    if !e.goals.is_empty() {
        item.insert("goals".into(), AttributeValue::L(e.goals.iter().map(|g| g.as_str().into()).collect()));
    }
    item
}

fn decode_error(what: &str, reason: impl Into<String>) -> AggregateError {
    AggregateError::Decode { what: what.to_owned(), reason: reason.into() }
}

/// Reads an optional string attribute; absent reads as empty.
fn text(r: &Record, name: &str) -> Result<String, AggregateError> {
    Ok(r.opt_string(name)?.unwrap_or_default().to_owned())
}

/// The text attribute `name`, parsed by `parse`; a missing or malformed one is a decode error.
fn parsed<T>(r: &Record, name: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, AggregateError> {
    let text = r.string(name)?;
    parse(text).ok_or_else(|| decode_error("Event", format!("`{name}` = {text:?} is malformed")))
}

fn number<T: TryFrom<i64>>(r: &Record, name: &str) -> Result<T, AggregateError> {
    let n = r.opt_i64(name)?.unwrap_or(0);
    T::try_from(n).map_err(|_| decode_error("Event", format!("`{name}` = {n} is out of range")))
}

/// The stored event of an `Event` record (from a get, a query or [`event_item`] via the model).
pub fn event_from_record(r: &Record) -> Result<StoredEvent, AggregateError> {
    let props = match r.get("props") {
        None => BTreeMap::new(),
        Some(AttributeValue::M(m)) => m
            .iter()
            .map(|(k, v)| match v.as_s() {
                Some(s) => Ok((k.clone(), s.to_owned())),
                None => Err(decode_error("Event", format!("property `{k}` is not a string"))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(decode_error("Event", "`props` is not a map")),
    };
    let goals = match r.get("goals") {
        None => Vec::new(),
        Some(AttributeValue::L(l)) => l
            .iter()
            .map(|g| g.as_s().map(str::to_owned).ok_or_else(|| decode_error("Event", "a goal is not a string")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(decode_error("Event", "`goals` is not a list")),
    };
    let revenue = match (r.opt_string("revenue")?, r.opt_string("currency")?) {
        (Some(amount), currency) => Some((amount.to_owned(), currency.unwrap_or_default().to_owned())),
        (None, _) => None,
    };
    Ok(StoredEvent {
        site_id: SiteId::new(r.string("site_id")?),
        day: parsed(r, "day", UtcDay::parse)?,
        visitor_id: parsed(r, "visitor_id", VisitorId::parse)?,
        session_id: parsed(r, "session_id", |t| Ulid::from_string(t).ok())?,
        seq: number(r, "seq")?,
        name: r.string("name")?.to_owned(),
        ts: r.i64("ts")?,
        hostname: text(r, "hostname")?,
        path: text(r, "path")?,
        props,
        revenue,
        interactive: r.opt_bool("interactive")?.unwrap_or(true),
        goals,
        visit: {
            let mut texts = Vec::with_capacity(VisitAttrs::TEXTS);
            for name in VisitAttrs::NAMES {
                texts.push(text(r, name)?);
            }
            Arc::new(VisitAttrs::from_texts(r.i64("start_ts")?, std::array::from_fn(|i| texts[i].as_str())))
        },
        prev: PrevState {
            events: number(r, "prev_events")?,
            pageviews: number(r, "prev_pageviews")?,
            interactive: number(r, "prev_interactive")?,
            last_ts: number(r, "prev_last_ts")?,
            exit_page: text(r, "prev_exit_page")?,
        },
        run: Arc::from(r.string("run")?),
        epoch: number(r, "epoch")?,
        ttl: r.opt_i64("ttl")?.unwrap_or(0),
    })
}

/// The model fields of an aggregate item's key.
pub(crate) fn agg_key_fields(key: &AggKey) -> Item {
    store::item! {
        "site_id" => key.site_id.as_str(),
        "period" => key.period.as_str(),
        "dimension" => key.dimension.as_str(),
        "bucket" => key.bucket.as_str(),
        "value" => key.value.as_str(),
    }
}

/// The key of an `Aggregate` record.
pub(crate) fn agg_key_from_record(r: &Record) -> Result<AggKey, AggregateError> {
    let period = r.string("period")?;
    Ok(AggKey {
        site_id: r.string("site_id")?.to_owned(),
        period: Period::parse(period).ok_or_else(|| decode_error("Aggregate", format!("unknown period {period:?}")))?,
        dimension: r.string("dimension")?.to_owned(),
        bucket: r.string("bucket")?.to_owned(),
        value: r.opt_string("value")?.unwrap_or_default().to_owned(),
    })
}

/// An aggregate item as read: what a flush needs to write the next version.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoredAggregate {
    /// `None` when the item does not exist yet.
    pub version: Option<i64>,
    pub counters: Counters,
    pub sketch: Option<VisitorSketch>,
    pub flushes: BTreeMap<String, u64>,
}

impl StoredAggregate {
    /// Decodes an `Aggregate` record.
    pub fn from_record(r: &Record) -> Result<StoredAggregate, AggregateError> {
        let (counters, sketch) = StoredAggregate::sums_from_record(r)?;
        let flushes = match r.get("flushes") {
            Some(AttributeValue::M(m)) => m
                .iter()
                .filter_map(|(run, v)| v.as_n().and_then(|n| n.to_i64()).map(|e| (run.clone(), e.max(0) as u64)))
                .collect(),
            _ => BTreeMap::new(),
        };
        Ok(StoredAggregate { version: Some(r.opt_i64("version")?.unwrap_or(0)), counters, sketch, flushes })
    }

    /// The attributes [`StoredAggregate::sums_from_record`] reads: a read that only sums can
    /// project these (and the bucket and value it groups by).
    pub const SUM_ATTRIBUTES: [&'static str; 7] =
        ["pageviews", "events", "visits", "bounces", "duration_ms", "visit_pageviews", "visitors_sketch"];

    /// Decodes only the counters and the sketch of an `Aggregate` record: what a dashboard sums
    /// (the flush bookkeeping is for writers).
    pub fn sums_from_record(r: &Record) -> Result<(Counters, Option<VisitorSketch>), AggregateError> {
        let counter = |name: &str| -> Result<i64, AggregateError> { Ok(r.opt_i64(name)?.unwrap_or(0)) };
        let sketch = match r.get("visitors_sketch") {
            Some(AttributeValue::B(bytes)) => Some(VisitorSketch::from_bytes(bytes)?),
            _ => None,
        };
        let counters = Counters {
            pageviews: counter("pageviews")?,
            events: counter("events")?,
            visits: counter("visits")?,
            bounces: counter("bounces")?,
            duration_ms: counter("duration_ms")?,
            visit_pageviews: counter("visit_pageviews")?,
        };
        Ok((counters, sketch))
    }

    /// The whole item of the next version, for a conditional put.
    pub fn to_item(&self, key: &AggKey, version: i64, ttl: Option<i64>, finished: &BTreeSet<String>) -> Item {
        let mut item = agg_key_fields(key);
        let c = &self.counters;
        // A counter of zero is left out (readers take a missing one as zero): an event
        // dimension's items never count visits, and every byte is paid on each rewrite.
        for (name, value) in [
            ("pageviews", c.pageviews),
            ("events", c.events),
            ("visits", c.visits),
            ("bounces", c.bounces),
            ("duration_ms", c.duration_ms),
            ("visit_pageviews", c.visit_pageviews),
        ] {
            if value != 0 {
                item.insert(name.into(), value.into());
            }
        }
        item.insert("version".into(), version.into());
        if let Some(s) = &self.sketch {
            item.insert("visitors_sketch".into(), AttributeValue::B(s.to_bytes()));
        }
        let flushes = self
            .flushes
            .iter()
            .filter(|(run, _)| !finished.contains(*run))
            .map(|(run, e)| (run.clone(), AttributeValue::from(*e)))
            .collect();
        item.insert("flushes".into(), AttributeValue::M(flushes));
        if let Some(ttl) = ttl {
            item.insert("ttl".into(), ttl.into());
        }
        item
    }
}
