//! The aggregate deltas of one stored event: a pure function of the event and its site's zone.
//!
//! Live flushes, crash recovery and rebuilds all sum this one function, so they agree by
//! construction. The rules are those of [`crate::stored`]: event counters and the visitor go to
//! the bucket of the event's time, visit counters ([`Contribution`]s) to the bucket of the
//! session's start, the new contribution added and the previous one taken away.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::period::{PeriodError, SiteZone, Unit};
use crate::stored::{
    AggKey, Contribution, Counters, HOUR_DIMENSIONS, MINUTE_DIMENSIONS, PROPS_PREFIX, Period, StoredEvent, TOTAL,
    VISIT_DIMENSIONS, VisitAttrs, minute_label,
};

/// What one event adds to one aggregate item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Delta {
    /// Counters to add (visit counters may be negative: a bounce undone).
    pub counters: Counters,
    /// The visitor to add to the item's sketch, if the event counts a visitor there.
    pub visitor: Option<u64>,
}

/// The visitor id as the `u64` its 16 hex digits spell. An id that is not hex (never written by
/// Tally's ingestion, but possible in a damaged item) is hashed instead, so no input panics and
/// the same text always maps to the same number.
pub fn visitor_u64(visitor_id: &str) -> u64 {
    u64::from_str_radix(visitor_id, 16).unwrap_or_else(|_| {
        visitor_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    })
}

/// The value of a visit dimension in a session's attributes; `None` for `visit:exit_page`, which
/// is not a visit attribute but the session's current exit page.
pub fn visit_value<'a>(visit: &'a VisitAttrs, dimension: &str) -> Option<&'a str> {
    Some(match dimension {
        "visit:entry_page" => &visit.entry_page,
        "visit:source" => &visit.source,
        "visit:referrer" => &visit.referrer,
        "visit:utm_source" => &visit.utm_source,
        "visit:utm_medium" => &visit.utm_medium,
        "visit:utm_campaign" => &visit.utm_campaign,
        "visit:utm_content" => &visit.utm_content,
        "visit:utm_term" => &visit.utm_term,
        "visit:country" => &visit.country,
        "visit:device" => &visit.device,
        "visit:browser" => &visit.browser,
        "visit:browser_version" => &visit.browser_version,
        "visit:os" => &visit.os,
        "visit:os_version" => &visit.os_version,
        _ => return None,
    })
}

/// Whether `period` keeps `dimension` (every dimension at day and month).
pub fn period_keeps(period: Period, dimension: &str) -> bool {
    match period {
        Period::Minute => MINUTE_DIMENSIONS.contains(&dimension),
        Period::Hour => HOUR_DIMENSIONS.contains(&dimension),
        Period::Day | Period::Month => true,
    }
}

/// The bucket label of `ts_ms` at `period` in the site's zone.
pub fn bucket_label(period: Period, zone: &SiteZone, ts_ms: i64) -> Result<String, PeriodError> {
    let unit = match period {
        Period::Minute => return Ok(minute_label(ts_ms)),
        Period::Hour => Unit::Hour,
        Period::Day => Unit::Day,
        Period::Month => Unit::Month,
    };
    Ok(zone.bucket(unit, ts_ms)?.label())
}

/// Collects deltas, merging those of one key.
struct Collector<'a> {
    site_id: &'a str,
    out: BTreeMap<AggKey, Delta>,
}

impl Collector<'_> {
    fn add(&mut self, period: Period, dimension: &str, bucket: &str, value: &str, f: impl FnOnce(&mut Delta)) {
        let key = AggKey {
            site_id: self.site_id.to_owned(),
            period,
            dimension: dimension.to_owned(),
            bucket: bucket.to_owned(),
            value: value.to_owned(),
        };
        f(self.out.entry(key).or_default());
    }
}

/// The aggregate deltas of `event` in a site whose zone is `zone`, sorted by key, one entry per key.
///
/// An instant outside the zone's supported years (never accepted by ingestion) has no bucket; its
/// deltas are left out rather than failing a whole flush.
pub fn deltas(event: &StoredEvent, zone: &SiteZone) -> Vec<(AggKey, Delta)> {
    let mut c = Collector { site_id: &event.site_id, out: BTreeMap::new() };
    let pageviews = i64::from(event.is_pageview());
    let visitor = visitor_u64(&event.visitor_id);
    let count = |d: &mut Delta| {
        d.counters.events += 1;
        d.counters.pageviews += pageviews;
        d.visitor = Some(visitor);
    };

    // Event counters and the visitor, in the bucket of the event's time; an engagement event
    // only extends its visit.
    let periods: &[Period] = if event.name == crate::stored::ENGAGEMENT { &[] } else { &Period::ALL };
    for &period in periods {
        let Ok(bucket) = bucket_label(period, zone, event.ts) else { continue };
        let mut values: Vec<(Cow<'static, str>, &str)> = Vec::with_capacity(24);
        values.push((TOTAL.into(), ""));
        if event.is_pageview() {
            values.push(("event:page".into(), &event.path));
        }
        values.push(("event:hostname".into(), &event.hostname));
        values.push(("event:name".into(), &event.name));
        values.extend(event.goals.iter().map(|g| ("event:goal".into(), g.as_str())));
        values.extend(event.props.iter().map(|(k, v)| (format!("{PROPS_PREFIX}{k}").into(), v.as_str())));
        values.extend(VISIT_DIMENSIONS.iter().filter_map(|d| visit_value(&event.visit, d).map(|v| ((*d).into(), v))));
        for (dimension, value) in values {
            if period_keeps(period, &dimension) {
                c.add(period, &dimension, &bucket, value, count);
            }
        }
    }

    // Visit counters, in the bucket of the session's start: the new contribution in, the old out.
    let start = event.visit.start_ts;
    let next = event.next();
    let cn = next.contribution(start);
    let cp = event.prev.contribution(start);
    let change = |d: &mut Delta| {
        if let Some(n) = &cn {
            d.counters.add_contribution(n, 1);
        }
        if let Some(p) = &cp {
            d.counters.add_contribution(p, -1);
        }
    };
    let with = |contribution: Option<Contribution>, sign: i64| {
        move |d: &mut Delta| {
            if let Some(x) = &contribution {
                d.counters.add_contribution(x, sign);
            }
        }
    };
    for period in [Period::Hour, Period::Day, Period::Month] {
        let Ok(bucket) = bucket_label(period, zone, start) else { continue };
        if period_keeps(period, TOTAL) {
            c.add(period, TOTAL, &bucket, "", change);
        }
        for dimension in VISIT_DIMENSIONS {
            if !period_keeps(period, dimension) {
                continue;
            }
            match visit_value(&event.visit, dimension) {
                Some(value) => c.add(period, dimension, &bucket, value, change),
                None => {
                    if cp.is_some() {
                        c.add(period, dimension, &bucket, &event.prev.exit_page, with(cp, -1));
                    }
                    if cn.is_some() {
                        c.add(period, dimension, &bucket, &next.exit_page, with(cn, 1));
                    }
                }
            }
        }
    }
    c.out.into_iter().filter(|(_, d)| !d.counters.is_zero() || d.visitor.is_some()).collect()
}
