//! `tally aggregate --rebuild`: a site's aggregates recomputed from its raw events.
//!
//! The rebuild sums the same [`deltas`](super::deltas) over the site's stored events as live
//! aggregation does, so on a healthy table [`RebuildMode::Verify`] finds no difference. Events are
//! read from the partitions of the UTC days `first - 1 ..= last + 1` (a partition's day is the UTC
//! day its session started, so a session that began the evening before, in site time or in UTC,
//! is still found), and only buckets whose site-time date is within `[first, last]` are kept: hours
//! and days inside the range, weeks and months wholly inside it, never minutes (they are realtime
//! only and expire after two hours).
//!
//! **Weeks and months across an end of the range.** Kept as they are, they would still hold
//! whatever the rebuild was run to correct, and dashboards read them in preference to days. So
//! when the caller says from which date every raw event is still stored
//! ([`RebuildRange::events_from`]: the site's event retention), a week or month that straddles an
//! end of the range and starts on or after that date is rebuilt whole: the events of its whole
//! extent are read, and only such items are kept from outside the range. One that starts earlier
//! is left as it is (some of its events may have expired, and a rebuild would shrink it), and
//! counted in [`RebuildReport::straddling_left`].
//!
//! [`RebuildMode::Replace`] overwrites the items of the range with the rebuilt ones (and deletes
//! stored items the events do not produce). It must run with **ingestion for the site stopped**:
//! a live flush between the read of the events and the write of an item would be overwritten. Each
//! written item's `flushes` holds, for every run seen in the events, the highest epoch seen, so a
//! later flush of an epoch already counted by the rebuild is skipped.
//!
//! Stored items are found by querying each dimension Tally keeps (and each property dimension the
//! events name); an item of a property key that no event in the range carries is not looked for.

use std::collections::{BTreeMap, BTreeSet};

use futures::stream::{self, StreamExt, TryStreamExt};
use jiff::civil::Date;
use model::Table;
use store::item;

use super::apply::{Accumulator, Pending, accumulate_from};
use super::codec::{StoredAggregate, agg_key_fields, agg_key_from_record};
use super::{AggregateError, SiteSettings, SiteSettingsSource};
use crate::period::{DateRange, SiteZone, Unit};
use crate::sketch::VisitorSketch;
use crate::stored::{AggKey, Counters, EVENT_DIMENSIONS, HOUR_DIMENSIONS, Period, TOTAL, VISIT_DIMENSIONS};

/// Whether a rebuild only compares or also writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebuildMode {
    /// Compare the stored items with the rebuilt ones; write nothing.
    Verify,
    /// Overwrite the stored items of the range with the rebuilt ones. Stop ingestion for the site
    /// first.
    Replace,
}

/// One item whose stored and rebuilt values differ (a missing item counts as zeros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The item.
    pub key: AggKey,
    /// The stored counters; `None` when the item is not stored.
    pub stored: Option<Counters>,
    /// The rebuilt counters; `None` when the events produce no such item.
    pub rebuilt: Option<Counters>,
    /// The stored visitor estimate.
    pub stored_visitors: u64,
    /// The rebuilt visitor estimate.
    pub rebuilt_visitors: u64,
}

/// What a rebuild found (and did).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Raw events read.
    pub events_read: u64,
    /// Items compared: stored or rebuilt, in the range.
    pub items_compared: u64,
    /// Items that differ.
    pub differences: Vec<Difference>,
    /// Items written ([`RebuildMode::Replace`]).
    pub items_written: u64,
    /// Stored items deleted because the events produce none ([`RebuildMode::Replace`]).
    pub items_deleted: u64,
    /// Week and month buckets straddling an end of the range that were rebuilt whole.
    pub straddling_rebuilt: u64,
    /// Week and month buckets straddling an end of the range that were left as they are, since
    /// they start before [`RebuildRange::events_from`] (or it was not given).
    pub straddling_left: u64,
}

/// The dates a rebuild covers, in site time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebuildRange {
    /// The first date rebuilt.
    pub first: Date,
    /// The last date rebuilt.
    pub last: Date,
    /// From which date every raw event of the site is still stored (today minus the site's event
    /// retention); weeks and months straddling an end of the range that start on or after it are
    /// rebuilt whole. `None` leaves every straddling week and month as it is.
    pub events_from: Option<Date>,
}

impl RebuildRange {
    /// `[first, last]`, leaving straddling weeks and months as they are.
    pub fn new(first: Date, last: Date) -> RebuildRange {
        RebuildRange { first, last, events_from: None }
    }

    /// Rebuilds weeks and months straddling an end whole when they start on or after `date`.
    pub fn events_from(self, date: Date) -> RebuildRange {
        RebuildRange { events_from: Some(date), ..self }
    }
}

/// A week or month bucket by its period and first date.
type WholeBucket = (Period, Date);

/// The first and last dates of the week or month bucket holding `date`.
fn extent(period: Period, date: Date) -> Option<(Date, Date)> {
    match period {
        Period::Week => {
            let back = i64::from(date.weekday().to_monday_zero_offset());
            let start = date.checked_sub(jiff::Span::new().days(back)).ok()?;
            Some((start, start.checked_add(jiff::Span::new().days(6)).ok()?))
        }
        Period::Month => Some((date.first_of_month(), date.last_of_month())),
        _ => None,
    }
}

/// The week and month buckets that straddle an end of `range` (those holding `first` or `last`
/// but not wholly inside the range), split into those rebuilt whole and those left.
fn straddling(range: &RebuildRange) -> (Vec<(WholeBucket, Date)>, u64) {
    let mut whole = Vec::new();
    let mut left = 0;
    let mut seen = BTreeSet::new();
    for period in [Period::Week, Period::Month] {
        for date in [range.first, range.last] {
            let Some((start, end)) = extent(period, date) else { continue };
            if (start >= range.first && end <= range.last) || !seen.insert((period, start)) {
                continue;
            }
            match range.events_from {
                Some(from) if start >= from => whole.push(((period, start), end)),
                _ => left += 1,
            }
        }
    }
    (whole, left)
}

/// Whether the bucket of `key` lies within `[first, last]` in site time, or is one of the
/// straddling weeks and months rebuilt `whole`.
fn in_range(key: &AggKey, zone: &SiteZone, first: Date, last: Date, whole: &BTreeSet<WholeBucket>) -> bool {
    let Some(unit) = key.period.unit() else { return false };
    let Ok(bucket) = zone.bucket_by_label(unit, &key.bucket) else { return false };
    let start = bucket.first_date();
    match extent(key.period, start) {
        Some((_, end)) => (start >= first && end <= last) || whole.contains(&(key.period, start)),
        None => start >= first && start <= last,
    }
}

/// Reads a site's events around the range, rebuilds its aggregates in that range, and compares
/// them with the stored ones or replaces them. `progress` is told the number of events read so
/// far.
pub async fn rebuild(
    table: &Table,
    sites: &dyn SiteSettingsSource,
    site_id: &str,
    range: RebuildRange,
    mode: RebuildMode,
    progress: &dyn Fn(u64),
) -> Result<RebuildReport, AggregateError> {
    let dates = DateRange::new(range.first, range.last)?;
    let settings = sites.site_settings(site_id).await?.unwrap_or_else(SiteSettings::fallback);
    let mut report = RebuildReport::default();
    let (whole, left) = straddling(&range);
    report.straddling_rebuilt = whole.len() as u64;
    report.straddling_left = left;
    let days = partitions(&range, &whole)?;
    let kept = Kept {
        zone: &settings.zone,
        first: range.first,
        last: range.last,
        whole: whole.into_iter().map(|(bucket, _)| bucket).collect(),
    };
    let (rebuilt, runs) = rebuild_items(table, site_id, days, &kept, &mut report, progress).await?;
    let stored = stored_items(table, site_id, &dates, &rebuilt, &kept).await?;
    compare(&rebuilt, &stored, &mut report);
    if mode == RebuildMode::Verify {
        return Ok(report);
    }
    replace(table, &settings, &rebuilt, &stored, &runs, &mut report).await?;
    Ok(report)
}

/// The buckets a rebuild keeps: those within `[first, last]` in site time, and the straddling
/// weeks and months rebuilt `whole`.
struct Kept<'a> {
    /// The site's time zone, in which buckets are dated.
    zone: &'a SiteZone,
    /// The first date rebuilt.
    first: Date,
    /// The last date rebuilt.
    last: Date,
    /// The straddling weeks and months rebuilt whole.
    whole: BTreeSet<WholeBucket>,
}

impl Kept<'_> {
    /// Whether the item of `key` is rebuilt.
    fn contains(&self, key: &AggKey) -> bool {
        in_range(key, self.zone, self.first, self.last, &self.whole)
    }
}

/// Every event partition to read (UTC days): those of the range and of the straddling buckets
/// rebuilt `whole`, with a day more on each side.
fn partitions(range: &RebuildRange, whole: &[(WholeBucket, Date)]) -> Result<Vec<String>, AggregateError> {
    let (first, last) = (range.first, range.last);
    let read_first = whole.iter().map(|((_, start), _)| *start).chain([first]).min().unwrap_or(first);
    let read_last = whole.iter().map(|(_, end)| *end).chain([last]).max().unwrap_or(last);
    let mut days = Vec::new();
    let mut day = read_first
        .yesterday()
        .map_err(|e| AggregateError::Period(crate::period::PeriodError::OutOfRange(e.to_string())))?;
    let end = read_last
        .tomorrow()
        .map_err(|e| AggregateError::Period(crate::period::PeriodError::OutOfRange(e.to_string())))?;
    while day <= end {
        days.push(day.to_string());
        match day.tomorrow() {
            Ok(d) => day = d,
            Err(_) => break,
        }
    }
    Ok(days)
}

/// Sums the deltas of the events of `days` into the items `kept` names, as live aggregation
/// would, counting the events read in `report`. Returns the items and, for every run seen, the
/// highest epoch seen.
async fn rebuild_items(
    table: &Table,
    site_id: &str,
    days: Vec<String>,
    kept: &Kept<'_>,
    report: &mut RebuildReport,
    progress: &dyn Fn(u64),
) -> Result<(BTreeMap<AggKey, Pending>, BTreeMap<String, u64>), AggregateError> {
    let mut pages = stream::iter(days)
        .map(|day| async move {
            let d = crate::visitor::UtcDay::parse(&day).ok_or_else(|| AggregateError::Events(format!("day {day}")))?;
            crate::event_store::events_of_day(table, site_id, d)
                .await
                .map_err(|e| AggregateError::Events(e.to_string()))
        })
        .buffer_unordered(16);
    let mut acc = Accumulator::default();
    let mut runs: BTreeMap<String, u64> = BTreeMap::new();
    while let Some(events) = pages.next().await {
        for event in events? {
            accumulate_from(&mut acc, &event, kept.zone, i64::MAX);
            let max = runs.entry(event.run.to_string()).or_default();
            *max = (*max).max(event.epoch);
            report.events_read += 1;
        }
        progress(report.events_read);
    }
    let rebuilt = acc.finish().into_keyed().filter(|(key, _)| kept.contains(key)).collect();
    Ok((rebuilt, runs))
}

/// The stored items `kept` names, one query per (period, dimension): every dimension Tally
/// keeps, and the property dimensions of the `rebuilt` items.
async fn stored_items(
    table: &Table,
    site_id: &str,
    dates: &DateRange,
    rebuilt: &BTreeMap<AggKey, Pending>,
    kept: &Kept<'_>,
) -> Result<BTreeMap<AggKey, StoredAggregate>, AggregateError> {
    let zone = kept.zone;
    let (start_ms, end_ms) = zone.bounds_ms(dates)?;
    let props: BTreeSet<String> = rebuilt.keys().map(|k| k.dimension.clone()).collect();
    let mut stored: BTreeMap<AggKey, StoredAggregate> = BTreeMap::new();
    for unit in Unit::AGGREGATE_PERIODS {
        let period = Period::of_unit(unit);
        let lo = zone.bucket(unit, start_ms)?.label();
        let hi = zone.bucket(unit, end_ms - 1)?.label();
        let dimensions: BTreeSet<&str> = if period == Period::Hour {
            HOUR_DIMENSIONS.into_iter().collect()
        } else {
            [TOTAL]
                .into_iter()
                .chain(EVENT_DIMENSIONS)
                .chain(VISIT_DIMENSIONS)
                .chain(props.iter().map(String::as_str))
                .collect()
        };
        for dimension in dimensions {
            let records = table
                .query("Aggregate")
                .key(item! { "site_id" => site_id, "period" => period.as_str(), "dimension" => dimension })
                .between(item! { "bucket" => lo.as_str() }, item! { "bucket" => hi.as_str() })
                .consistent()
                .all()
                .await?;
            for r in records {
                let key = agg_key_from_record(&r)?;
                if kept.contains(&key) {
                    stored.insert(key, StoredAggregate::from_record(&r)?);
                }
            }
        }
    }
    Ok(stored)
}

/// Compares the `rebuilt` items with the `stored` ones (a missing item counts as zeros),
/// counting them and listing the differences in `report`.
fn compare(
    rebuilt: &BTreeMap<AggKey, Pending>,
    stored: &BTreeMap<AggKey, StoredAggregate>,
    report: &mut RebuildReport,
) {
    let keys: BTreeSet<&AggKey> = rebuilt.keys().chain(stored.keys()).collect();
    report.items_compared = keys.len() as u64;
    for key in &keys {
        let new = rebuilt.get(*key);
        let old = stored.get(*key);
        let rebuilt_counters = new.map(|p| p.counters).unwrap_or_default();
        let stored_counters = old.map(|s| s.counters).unwrap_or_default();
        let rebuilt_visitors = new.map_or(0, |p| p.visitors.to_sketch().estimate());
        let stored_visitors = old.and_then(|s| s.sketch.as_ref()).map_or(0, VisitorSketch::estimate);
        if rebuilt_counters != stored_counters || rebuilt_visitors != stored_visitors {
            report.differences.push(Difference {
                key: (*key).clone(),
                stored: old.map(|s| s.counters),
                rebuilt: new.map(|p| p.counters),
                stored_visitors,
                rebuilt_visitors,
            });
        }
    }
}

/// Writes the `rebuilt` items over the stored ones (each item's `flushes` holding `runs`), then
/// deletes the `stored` items the events do not produce, counting both in `report`.
async fn replace(
    table: &Table,
    settings: &SiteSettings,
    rebuilt: &BTreeMap<AggKey, Pending>,
    stored: &BTreeMap<AggKey, StoredAggregate>,
    runs: &BTreeMap<String, u64>,
    report: &mut RebuildReport,
) -> Result<(), AggregateError> {
    let now_s = jiff::Timestamp::now().as_second();
    let no_finished = BTreeSet::new();
    let writes: Vec<_> = rebuilt
        .iter()
        .map(|(key, pending)| {
            let item = StoredAggregate {
                version: None,
                counters: pending.counters,
                sketch: (!pending.visitors.is_empty()).then(|| pending.visitors.to_sketch()),
                flushes: runs.clone(),
            };
            let version = stored.get(key).and_then(|s| s.version).map_or(1, |v| v + 1);
            let ttl = match key.period {
                Period::Minute => Some(now_s + 2 * 3600),
                Period::Hour => Some(now_s + i64::from(settings.retention_hourly_days) * 86_400),
                Period::Day | Period::Week => Some(now_s + i64::from(settings.retention_daily_days) * 86_400),
                Period::Month => None,
            };
            item.to_item(key, version, ttl, &no_finished)
        })
        .collect();
    report.items_written = writes.len() as u64;
    stream::iter(writes).map(|item| table.put("Aggregate", item)).buffer_unordered(32).try_collect::<Vec<_>>().await?;
    let gone: Vec<_> = stored.keys().filter(|k| !rebuilt.contains_key(*k)).collect();
    report.items_deleted = gone.len() as u64;
    stream::iter(gone)
        .map(|key| table.delete("Aggregate", agg_key_fields(key)))
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}
