//! The aggregate deltas of one stored event: a pure function of the event and its site's zone.
//!
//! Live flushes, crash recovery and rebuilds all sum this one function, so they agree by
//! construction. The rules are those of [`crate::stored`]: event counters and the visitor go to
//! the bucket of the event's time, visit counters ([`Contribution`]s) to the bucket of the
//! session's start, the new contribution added and the previous one taken away.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dimension::VisitDimension;
use crate::period::{PeriodError, SiteZone};
use crate::stored::{
    AggKey, AggKeyRef, Contribution, Counters, HOUR_DIMENSIONS, MINUTE_DIMENSIONS, PROPS_PREFIX, Period, StoredEvent,
    TOTAL, minute_label,
};

/// What one event adds to one aggregate item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Delta {
    /// Counters to add (visit counters may be negative: a bounce undone).
    pub counters: Counters,
    /// The visitor to add to the item's sketch, if the event counts a visitor there.
    pub visitor: Option<u64>,
}

/// Whether `period` keeps `dimension` (every dimension at day, week and month).
pub fn period_keeps(period: Period, dimension: &str) -> bool {
    match period {
        Period::Minute => MINUTE_DIMENSIONS.contains(&dimension),
        Period::Hour => HOUR_DIMENSIONS.contains(&dimension),
        Period::Day | Period::Week | Period::Month => true,
    }
}

/// [`period_keeps`] of every visit dimension (in [`VisitDimension::ALL`]'s order), per period:
/// looked up rather than compared by name for every key of every event.
static VISIT_KEPT: std::sync::LazyLock<[[bool; VisitDimension::ALL.len()]; Period::ALL.len()]> =
    std::sync::LazyLock::new(|| {
        Period::ALL.map(|period| VisitDimension::ALL.map(|d| period_keeps(period, d.as_str())))
    });

/// The bucket label of `ts_ms` at `period` in the site's zone.
pub fn bucket_label(period: Period, zone: &SiteZone, ts_ms: i64) -> Result<String, PeriodError> {
    match period.unit() {
        None => Ok(minute_label(ts_ms)),
        Some(unit) => Ok(zone.bucket(unit, ts_ms)?.label()),
    }
}

/// A bucket whose label was worked out: its zone, its instants `[start_ms, end_ms)`, its label.
struct Labelled {
    zone: String,
    start_ms: i64,
    end_ms: i64,
    label: Arc<str>,
}

/// How many buckets of each period a thread remembers (a few sites' zones, a day's neighbours).
const LABELS_KEPT: usize = 8;

thread_local! {
    /// The buckets this thread labelled last, per period, newest first.
    static LABELS: std::cell::RefCell<[Vec<Labelled>; Period::ALL.len()]> = Default::default();
}

/// [`bucket_label`] remembered: consecutive events mostly fall in the buckets of the ones before,
/// and working a label out (a zone conversion, the bucket's edges, formatting) costs more than
/// the rest of an event's deltas in that period. `None` where `bucket_label` fails. Shared, so a
/// remembered label costs an event no allocation.
///
/// Invariant: equal to `bucket_label(period, zone, ts_ms).ok()`, because every instant of a
/// bucket has that bucket's label (`the_remembered_labels_equal_the_worked_out_ones`).
fn cached_label(period: Period, zone: &SiteZone, ts_ms: i64) -> Option<Arc<str>> {
    let slot = period as usize;
    let hit = LABELS.with_borrow(|labels| {
        labels[slot]
            .iter()
            .find(|b| b.start_ms <= ts_ms && ts_ms < b.end_ms && b.zone == zone.name())
            .map(|b| b.label.clone())
    });
    if hit.is_some() {
        return hit;
    }
    let (start_ms, end_ms, label): (i64, i64, Arc<str>) = match period.unit() {
        None => {
            let start = ts_ms.div_euclid(60_000) * 60_000;
            (start, start.saturating_add(60_000), minute_label(ts_ms).into())
        }
        Some(unit) => {
            let bucket = zone.bucket(unit, ts_ms).ok()?;
            (bucket.start_ms(), bucket.end_ms(), bucket.label().into())
        }
    };
    LABELS.with_borrow_mut(|labels| {
        let kept = &mut labels[slot];
        kept.truncate(LABELS_KEPT - 1);
        kept.insert(0, Labelled { zone: zone.name().to_owned(), start_ms, end_ms, label: label.clone() });
    });
    Some(label)
}

/// The aggregate deltas of `event` in a site whose zone is `zone`, sorted by key, one entry per key.
///
/// An instant outside the zone's supported years (never accepted by ingestion) has no bucket; its
/// deltas are left out rather than failing a whole flush.
pub fn deltas(event: &StoredEvent, zone: &SiteZone) -> Vec<(AggKey, Delta)> {
    let mut out: BTreeMap<AggKey, Delta> = BTreeMap::new();
    for_each_delta(event, zone, i64::MIN, |key, delta| {
        let d = out.entry(key.to_owned_key()).or_default();
        d.counters.add(&delta.counters);
        d.visitor = d.visitor.or(delta.visitor);
    });
    out.into_iter().filter(|(_, d)| !d.counters.is_zero() || d.visitor.is_some()).collect()
}

/// Calls `f` with each of [`deltas`]' entries without collecting them; a key may come more than
/// once (its deltas then add up), and an entry whose deltas add up to nothing may come.
/// Minute buckets are left out for events before `minutes_from` (ms): realtime reads only the
/// last half hour, and minute items expire two hours after their last write.
pub fn for_each_delta(event: &StoredEvent, zone: &SiteZone, minutes_from: i64, f: impl FnMut(AggKeyRef<'_>, Delta)) {
    each_delta(event, zone, minutes_from, &Period::ALL, false, f);
}

/// The deltas of `event` in `periods` only (no minutes), with **every** dimension's hour items
/// where the stored aggregates keep hours for [`HOUR_DIMENSIONS`] only: what a query that reads
/// raw events builds, so it can answer hourly series and part-day ranges of any dimension.
pub fn for_each_delta_of_periods(
    event: &StoredEvent,
    zone: &SiteZone,
    periods: &[Period],
    f: impl FnMut(AggKeyRef<'_>, Delta),
) {
    let periods: Vec<Period> = periods.iter().copied().filter(|p| *p != Period::Minute).collect();
    each_delta(event, zone, i64::MAX, &periods, true, f);
}

/// [`for_each_delta`] without the week and month items, which are the sums of the event's day
/// items (a site-time day lies in one ISO week and one month, and both keep every dimension the
/// day keeps): the accumulator adds them up per item once an epoch is over
/// ([`super::Accumulator::finish`]) rather than per event, so an event costs about 25 lookups
/// instead of 60.
pub(crate) fn for_each_fine_delta(
    event: &StoredEvent,
    zone: &SiteZone,
    minutes_from: i64,
    f: impl FnMut(AggKeyRef<'_>, Delta),
) {
    each_delta(event, zone, minutes_from, &[Period::Minute, Period::Hour, Period::Day], false, f);
}

fn each_delta(
    event: &StoredEvent,
    zone: &SiteZone,
    minutes_from: i64,
    periods: &[Period],
    every_hour: bool,
    mut f: impl FnMut(AggKeyRef<'_>, Delta),
) {
    // Every value that reaches an aggregate key is bounded first, so none makes a key too long.
    let bounded = crate::key_bound::bound_event(event);
    let event = bounded.as_ref();
    let keeps =
        |period: Period, dimension: &str| period_keeps(period, dimension) || (every_hour && period == Period::Hour);
    // What the loop below asks of every period, worked out once per event: each visit
    // dimension's value, and whether a period keeps each dimension (a comparison of names).
    let visit_values: [Option<&str>; VisitDimension::ALL.len()] = VisitDimension::ALL.map(|d| d.value(&event.visit));
    let site_id = event.site_id.as_str();
    let pageviews = i64::from(event.is_pageview());
    let visitor = event.visitor_id.as_u64();
    let counted = Delta { counters: Counters { events: 1, pageviews, ..Counters::default() }, visitor: Some(visitor) };
    // An engagement event only extends its visit: no event counters, visitor or event values.
    let counts_event = event.name != crate::stored::ENGAGEMENT;
    let props: Vec<(String, &str)> = if counts_event {
        event.props.iter().map(|(k, v)| (format!("{PROPS_PREFIX}{k}"), v.as_str())).collect()
    } else {
        Vec::new()
    };

    // Visit counters go to the bucket of the session's start: the new contribution in, the old out.
    let start = event.visit.start_ts;
    let next = event.next();
    let cn = next.contribution(start);
    let cp = event.prev.contribution(start);
    let with = |contribution: &Option<Contribution>, sign: i64| {
        let mut d = Delta::default();
        if let Some(x) = contribution {
            d.counters.add_contribution(x, sign);
        }
        d
    };
    let (added, removed) = (with(&cn, 1), with(&cp, -1));
    let mut change = added;
    change.counters.add(&removed.counters);
    let plus = |a: Delta, b: Delta| {
        let mut d = a;
        d.counters.add(&b.counters);
        d.visitor = a.visitor.or(b.visitor);
        d
    };

    for &period in periods {
        let kept = |dimension: &str| keeps(period, dimension);
        let (keeps_total, keeps_page, keeps_hostname, keeps_name, keeps_goal) =
            (kept(TOTAL), kept("event:page"), kept("event:hostname"), kept("event:name"), kept("event:goal"));
        // A property's dimension is never one of the named ones a minute or an hour keeps.
        let keeps_props = props.first().is_some_and(|(dimension, _)| kept(dimension));
        let keeps_visit = if every_hour && period == Period::Hour {
            [true; VisitDimension::ALL.len()]
        } else {
            VISIT_KEPT[period as usize]
        };
        // Event counters and the visitor go to the bucket of the event's time.
        let event_bucket = (counts_event && (period != Period::Minute || event.ts >= minutes_from))
            .then(|| cached_label(period, zone, event.ts))
            .flatten();
        let start_bucket = (period != Period::Minute).then(|| cached_label(period, zone, start)).flatten();
        // Usually both are one bucket, and a visit dimension's item takes both deltas at once.
        let same = event_bucket.is_some() && event_bucket == start_bucket;
        let visit_change = if same { change } else { Delta::default() };
        if let Some(bucket) = &event_bucket {
            let mut add = |kept: bool, dimension: &str, value: &str, delta: Delta| {
                if kept {
                    f(AggKeyRef { site_id, period, dimension, bucket, value }, delta);
                }
            };
            add(keeps_total, TOTAL, "", plus(counted, visit_change));
            if event.is_pageview() {
                add(keeps_page, "event:page", &event.path, counted);
            }
            add(keeps_hostname, "event:hostname", &event.hostname, counted);
            add(keeps_name, "event:name", &event.name, counted);
            for goal in &event.goals {
                add(keeps_goal, "event:goal", goal, counted);
            }
            for (dimension, value) in &props {
                add(keeps_props, dimension, value, counted);
            }
            for (i, dimension) in VisitDimension::ALL.into_iter().enumerate() {
                if let Some(value) = visit_values[i]
                    && !(dimension.is_sparse() && value.is_empty())
                {
                    add(keeps_visit[i], dimension.as_str(), value, plus(counted, visit_change));
                }
            }
        }
        let Some(bucket) = &start_bucket else { continue };
        let key = |dimension, value| AggKeyRef { site_id, period, dimension, bucket, value };
        if !same && keeps_total && !change.counters.is_zero() {
            f(key(TOTAL, ""), change);
        }
        for (i, visit_dimension) in VisitDimension::ALL.into_iter().enumerate() {
            let dimension = visit_dimension.as_str();
            if !keeps_visit[i] {
                continue;
            }
            match visit_values[i] {
                Some(value) if visit_dimension.is_sparse() && value.is_empty() => {}
                Some(value) => {
                    if !same && !change.counters.is_zero() {
                        f(key(dimension, value), change);
                    }
                }
                None if event.prev.exit_page == next.exit_page || cp.is_none() => {
                    // The exit page did not move (or the visit is new): one entry.
                    if !change.counters.is_zero() {
                        f(key(dimension, &next.exit_page), change);
                    }
                }
                None => {
                    f(key(dimension, &event.prev.exit_page), removed);
                    if cn.is_some() {
                        f(key(dimension, &next.exit_page), added);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Zones with whole-hour, half-hour and 30-minute daylight-saving shifts, and none.
    const ZONES: [&str; 5] = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"];

    proptest! {
        /// Runs of nearby instants (around the 2026 daylight-saving changes, so folds and gaps
        /// cross bucket edges) in several zones, in any order: a remembered label is always the
        /// one worked out afresh.
        #[test]
        fn the_remembered_labels_equal_the_worked_out_ones(
            base in prop::sample::select(vec![1_774_746_000_000i64, 1_792_890_000_000, 1_775_394_000_000, 1_783_000_000_000]),
            steps in prop::collection::vec((0usize..ZONES.len(), 0usize..Period::ALL.len(), -7_200_000i64..7_200_000), 1..200),
        ) {
            for (zone, period, offset) in steps {
                let zone = SiteZone::new(ZONES[zone]).expect("a zone");
                let period = Period::ALL[period];
                let ts = base + offset;
                prop_assert_eq!(cached_label(period, &zone, ts).map(|l| l.to_string()), bucket_label(period, &zone, ts).ok());
            }
        }
    }
}
