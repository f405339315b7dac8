//! The aggregate query path, [`Stats::query`]: a query planned (which dimension is read, from
//! its aggregate items or from the raw events, over which buckets), read, made rows and ordered.

use std::collections::{BTreeMap, HashMap};

use super::{
    EXIT_PAGE, MAX_QUERY_BUCKETS, MAX_QUERY_ROWS, Metric, OrderKey, Query, Row, Stats, StatsError, Sum, Value,
    display_value, scan,
};
use crate::dimension::Dimension;
use crate::period::{Bucket, SiteZone, Unit};
use crate::sketch::VisitorSketch;
use crate::stored::{HOUR_DIMENSIONS, Period, TOTAL};

impl Stats {
    /// Reads the buckets `wanted` of `dimension`, grouped by (time label, value).
    async fn gather(
        &self,
        site_id: &str,
        dimension: &str,
        wanted: &[(Period, Bucket)],
        label_of: &(dyn Fn(&Bucket) -> String + Sync),
    ) -> Result<BTreeMap<(String, String), Sum>, StatsError> {
        // Each bucket's output label, worked out once rather than for every item; one Query per
        // run of adjacent buckets of a period, so the days a week or a month covers are not read.
        let mut by_period: HashMap<Period, BTreeMap<i64, (String, Bucket)>> = HashMap::new();
        for (p, b) in wanted {
            by_period.entry(*p).or_default().insert(b.start_ms(), (label_of(b), *b));
        }
        let mut runs: Vec<(Period, HashMap<String, String>)> = Vec::new();
        for (period, buckets) in by_period {
            let mut end = None;
            for (label, bucket) in buckets.into_values() {
                if end != Some(bucket.start_ms()) {
                    runs.push((period, HashMap::new()));
                }
                end = Some(bucket.end_ms());
                if let Some((_, run)) = runs.last_mut() {
                    run.insert(bucket.label(), label);
                }
            }
        }
        // Sums by label, then value: a hit (most items) looks both up by `&str`, allocating nothing.
        let mut sums: HashMap<String, HashMap<String, Sum>> = HashMap::new();
        let mut rows = 0usize;
        for (period, buckets) in runs {
            let (Some(first), Some(last)) = (buckets.keys().min(), buckets.keys().max()) else { continue };
            for (bucket, value, agg) in self.read(site_id, period, dimension, first, last).await? {
                let Some(label) = buckets.get(&bucket) else { continue };
                let by_value = match sums.get_mut(label.as_str()) {
                    Some(m) => m,
                    None => sums.entry(label.clone()).or_default(),
                };
                // The first item of a value is the sum so far as it is, not merged into nothing.
                match by_value.get_mut(value.as_str()) {
                    Some(sum) => sum.add(&agg),
                    None => {
                        by_value.insert(value, agg);
                        rows += 1;
                        if rows > MAX_QUERY_ROWS {
                            return Err(too_many_rows());
                        }
                    }
                }
            }
        }
        Ok(sums
            .into_iter()
            .flat_map(|(label, m)| m.into_iter().map(move |(v, sum)| ((label.clone(), v), sum)))
            .collect())
    }

    /// Answers `q`: its page of rows.
    pub async fn query(&self, q: &Query) -> Result<Vec<Row>, StatsError> {
        Ok(self.all_rows(q).await?.into_iter().skip(q.offset).take(q.limit).collect())
    }

    /// Every row of `q`'s answer, in its order, before pagination: planned ([`Stats::plan`]),
    /// read ([`Stats::read_plan`]), then made rows ([`rows`]).
    pub(crate) async fn all_rows(&self, q: &Query) -> Result<Vec<Row>, StatsError> {
        let plan = self.plan(q).await?;
        let read = self.read_plan(q, &plan).await?;
        Ok(rows(q, &plan, read))
    }

    /// Works out how `q` is answered, reading nothing but the site's settings: which dimension
    /// is read, from its aggregate items or from the raw events, over which buckets.
    async fn plan(&self, q: &Query) -> Result<Plan, StatsError> {
        let (zone, weeks_from) = self.zone_and_weeks(&q.site_id).await?;
        let bounds = zone.bounds_ms(&q.range).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let time = q.dimensions.iter().find_map(Dimension::time_unit);
        let breakdown = q.dimensions.iter().find(|d| d.time_unit().is_none()).cloned();
        let session_metrics = q.metrics.iter().any(|m| m.is_session_metric());
        let (mut source, mut raw) = source_of(q, breakdown.as_ref(), session_metrics);
        if session_metrics && source.is_of_event() {
            return Err(StatsError::Invalid(format!(
                "session metrics cannot be combined with an event dimension ({source}) as the breakdown"
            )));
        }
        let wanted = wanted_buckets(&zone, time, bounds, weeks_from)?;
        // Hour items are stored for a few dimensions only: an hourly series or a part-day range
        // of any other is answered from the raw events (as far back as the site keeps them).
        if wanted.iter().any(|(p, _)| *p == Period::Hour) && !HOUR_DIMENSIONS.contains(&&*source.name()) {
            source = breakdown.clone().unwrap_or(Dimension::Total);
            raw = true;
        }
        Ok(Plan { zone, bounds, time, breakdown, source, raw, session_metrics, wanted })
    }

    /// Reads what `plan` needs: the sums of its source by (time label, value), the visitors of
    /// each label when conversion rates divide by them, and the imported history asked for.
    async fn read_plan(&self, q: &Query, plan: &Plan) -> Result<Read, StatsError> {
        let label_of = |b: &Bucket| plan.label(b);
        let raw_sums = if plan.raw { Some(self.read_raw(q, plan).await?) } else { None };
        let groups = match &raw_sums {
            Some((sums, labels)) => sums.labelled(&plan.source, labels),
            None => self.gather(&q.site_id, &plan.source.name(), &plan.wanted, &label_of).await?,
        };
        // Conversion rates divide by all of the range's visitors.
        let total_visitors = if q.metrics.contains(&Metric::ConversionRate) {
            let totals = match &raw_sums {
                Some((sums, labels)) => sums.labelled(&Dimension::Total, labels),
                None => self.gather(&q.site_id, TOTAL, &plan.wanted, &label_of).await?,
            };
            let mut by_label: HashMap<String, VisitorSketch> = HashMap::new();
            for ((label, _), sum) in totals {
                by_label.entry(label).or_default().merge(&sum.sketch);
            }
            by_label.into_iter().map(|(l, s)| (l, s.estimate())).collect()
        } else {
            HashMap::new()
        };
        // Imported history, when asked for, on the aggregate path only: it holds daily counts per
        // dimension, so neither filters on another dimension nor an hourly series can use it.
        let imported = if q.include_imports && !plan.raw && plan.time != Some(Unit::Hour) {
            crate::imported::read(&self.table, &q.site_id, &plan.source.name(), &q.range)
                .await
                .map_err(|e| StatsError::Corrupt(e.to_string()))?
        } else {
            Vec::new()
        };
        Ok(Read { groups, total_visitors, imported })
    }

    /// The raw events' sums for `plan`, counted straight into its output labels (one group per
    /// label), and those labels.
    async fn read_raw(&self, q: &Query, plan: &Plan) -> Result<(scan::Sums, Vec<String>), StatsError> {
        let partitions = self.check_raw(&q.site_id, plan.bounds).await?;
        let mut labels: Vec<String> = Vec::new();
        let mut buckets: Vec<(i64, i64, u32)> = Vec::with_capacity(plan.wanted.len());
        for (_, b) in &plan.wanted {
            let label = plan.label(b);
            let group = match labels.iter().position(|l| *l == label) {
                Some(g) => g,
                None => {
                    labels.push(label);
                    labels.len() - 1
                }
            };
            buckets.push((b.start_ms(), b.end_ms(), group as u32));
        }
        buckets.sort_unstable();
        // Visit counters only for the metrics made of them (and the exit page's visitors,
        // which are its visits).
        let visits = plan.session_metrics || plan.source == EXIT_PAGE;
        let sums = self.raw_sums(&q.site_id, partitions, &q.filters, &plan.source, visits, buckets).await?;
        Ok((sums, labels))
    }
}

/// How a query is answered ([`Stats::plan`]).
struct Plan {
    /// The site's time zone, which labels the buckets.
    zone: SiteZone,
    /// The range's start and end, epoch milliseconds.
    bounds: (i64, i64),
    /// The unit of the query's time dimension, if it has one.
    time: Option<Unit>,
    /// The query's breakdown dimension, if it has one.
    breakdown: Option<Dimension>,
    /// The dimension read: the breakdown, the one filtered, or the site totals ([`Dimension::Total`]).
    source: Dimension,
    /// Whether the raw events are read rather than `source`'s aggregate items.
    raw: bool,
    /// Whether a metric is made of visit counters.
    session_metrics: bool,
    /// The buckets read, each with the period of its items.
    wanted: Vec<(Period, Bucket)>,
}

impl Plan {
    /// A bucket's output label: its time dimension's value, or nothing without one.
    fn label(&self, b: &Bucket) -> String {
        self.time.map(|unit| time_label(&self.zone, unit, b)).unwrap_or_default()
    }
}

/// What [`Stats::read_plan`] read.
struct Read {
    /// The source's sums by (time label, value).
    groups: BTreeMap<(String, String), Sum>,
    /// Every visitor of each time label, for conversion rates (empty when none is asked for).
    total_visitors: HashMap<String, u64>,
    /// Imported days of the source: (date, value, counts).
    imported: Vec<(crate::period::Date, String, crate::imported::ImportedCounts)>,
}

/// The dimension a query reads, and whether from the raw events.
///
/// The aggregate path reads one dimension's items; filters on any other dimension need the raw
/// events, filtered event by event and aggregated in memory. Visit metrics under an event filter
/// describe the visits with a matching event, which only the raw events tell.
fn source_of(q: &Query, breakdown: Option<&Dimension>, session_metrics: bool) -> (Dimension, bool) {
    let mut filtered: Vec<&Dimension> = Vec::new();
    for f in &q.filters {
        if !filtered.contains(&&f.dimension) {
            filtered.push(&f.dimension);
        }
    }
    let event_filtered = filtered.iter().any(|d| d.is_of_event());
    let (mut source, mut raw) = match (breakdown, filtered.as_slice()) {
        (Some(b), _) if filtered.iter().all(|f| *f == b) => (b.clone(), false),
        (None, []) => (Dimension::Total, false),
        (None, [only]) if !(session_metrics && event_filtered) => ((*only).clone(), false),
        (Some(b), _) => (b.clone(), true),
        (None, _) => (Dimension::Total, true),
    };
    // Region, city, screen size and language keep no item for visits without a value, which
    // a negated filter on them must count: the raw events have them.
    if q.filters.iter().any(|f| f.op.is_negated() && matches!(&f.dimension, Dimension::Visit(v) if v.is_sparse())) {
        source = breakdown.cloned().unwrap_or(Dimension::Total);
        raw = true;
    }
    (source, raw)
}

/// Which buckets a query reads: hours for an hourly series, days for the other series, the
/// fewest month/week/day/hour buckets otherwise.
///
/// A series reads one bucket per hour or day: at most `MAX_QUERY_BUCKETS`, counted before any is
/// kept, so no range can make a query build millions of them.
fn wanted_buckets(
    zone: &SiteZone,
    time: Option<Unit>,
    (start, end): (i64, i64),
    weeks_from: i64,
) -> Result<Vec<(Period, Bucket)>, StatsError> {
    let series = |unit: Unit, period: Period| -> Result<Vec<(Period, Bucket)>, StatsError> {
        let b = zone.buckets(unit, start, end).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let b: Vec<(Period, Bucket)> = b.take(MAX_QUERY_BUCKETS + 1).map(|b| (period, b)).collect();
        if b.len() > MAX_QUERY_BUCKETS {
            return Err(StatsError::Invalid(format!(
                "this series would read more than {MAX_QUERY_BUCKETS} {}s; choose a shorter date_range or a \
                 coarser time dimension",
                unit.as_str()
            )));
        }
        Ok(b)
    };
    Ok(match time {
        Some(Unit::Hour) => series(Unit::Hour, Period::Hour)?,
        Some(_) => series(Unit::Day, Period::Day)?,
        None => zone
            .cover_with_weeks_from(start, end, weeks_from)
            .map_err(|e| StatsError::Invalid(e.to_string()))?
            .into_iter()
            .map(|b| (Period::of_unit(b.unit()), b))
            .collect(),
    })
}

/// The rows of a query from what was read for its plan, in its order, before pagination: the
/// source's values the filters accept (shown as the breakdown's values), with the imported
/// history added, and the query's metrics of each.
fn rows(q: &Query, plan: &Plan, read: Read) -> Vec<Row> {
    let Plan { source, breakdown, raw, time, .. } = plan;
    // Rows: (time label, breakdown value) → sum, with filters applied to the source's values.
    let mut rows: BTreeMap<(String, String), Sum> = BTreeMap::new();
    for ((label, value), sum) in read.groups {
        if !raw
            && *source != Dimension::Total
            && !q.filters.iter().all(|f| f.accepts(&display_value(source, &value).unwrap_or_default()))
        {
            continue;
        }
        let shown = if breakdown.is_some() {
            match display_value(source, &value) {
                Some(v) => v,
                None => continue,
            }
        } else {
            String::new()
        };
        let entry = rows.entry((label, shown)).or_default();
        entry.counters.add(&sum.counters);
        entry.sketch.merge(&sum.sketch);
    }
    let mut imported_visitors: HashMap<(String, String), i64> = HashMap::new();
    for (date, value, counts) in read.imported {
        if *source != Dimension::Total && !q.filters.iter().all(|f| f.accepts(&value)) {
            continue;
        }
        let Ok(day) = plan.zone.bucket_by_label(Unit::Day, &date.to_string()) else { continue };
        let key = (plan.label(&day), if breakdown.is_some() { value } else { String::new() });
        rows.entry(key.clone()).or_default().counters.add(&counts.counters);
        *imported_visitors.entry(key).or_default() += counts.visitors;
    }
    if rows.is_empty() && breakdown.is_none() && time.is_none() {
        rows.insert((String::new(), String::new()), Sum::default());
    }
    let mut out: Vec<Row> = rows
        .into_iter()
        .filter(|(_, s)| breakdown.is_none() || !s.counters.is_zero() || !s.sketch.is_empty())
        .map(|((label, value), s)| {
            let all = read.total_visitors.get(&label).copied().unwrap_or(0);
            let imported = imported_visitors.get(&(label.clone(), value.clone())).copied().unwrap_or(0).max(0) as u64;
            row_of(q, source, &label, &value, &s, all, imported)
        })
        .collect();
    order(&mut out, q);
    out
}

/// One row of an answer: `q`'s metrics of `s`, the sum of `source`'s items for (`label`,
/// `value`); `all_visitors` are the visitors of the label's buckets, for conversion rates;
/// `imported_visitors` are added to its visitors (imported history, `crate::imported`).
pub(super) fn row_of(
    q: &Query,
    source: &Dimension,
    label: &str,
    value: &str,
    s: &Sum,
    all_visitors: u64,
    imported_visitors: u64,
) -> Row {
    let c = &s.counters;
    let visitors = if *source == EXIT_PAGE { c.visits.max(0) as u64 } else { s.sketch.estimate() + imported_visitors };
    let per_visit = |x: i64| if c.visits > 0 { x as f64 / c.visits as f64 } else { 0.0 };
    let metrics = q
        .metrics
        .iter()
        .map(|m| match m {
            Metric::Visitors => Value::Int(visitors as i64),
            Metric::Visits => Value::Int(c.visits),
            Metric::Pageviews => Value::Int(c.pageviews),
            Metric::Events => Value::Int(c.events),
            Metric::ViewsPerVisit => Value::Float(round2(per_visit(c.visit_pageviews))),
            Metric::BounceRate => Value::Int((per_visit(c.bounces) * 100.0).round() as i64),
            Metric::VisitDuration => Value::Int((per_visit(c.duration_ms) / 1000.0).round() as i64),
            Metric::ConversionRate => {
                let rate = crate::goal::conversion_rate(visitors, all_visitors.max(visitors));
                Value::Float(rate.percent(2))
            }
        })
        .collect();
    let dimensions = q
        .dimensions
        .iter()
        .map(|d| if d.time_unit().is_some() { label.to_owned() } else { value.to_owned() })
        .collect();
    Row { dimensions, metrics }
}

pub(super) fn order(rows: &mut [Row], q: &Query) {
    let keys: Vec<(Option<usize>, Option<usize>, bool)> = if q.order_by.is_empty() {
        // Series in time order; breakdowns by their first metric, largest first.
        match q.dimensions.iter().position(|d| d.time_unit().is_some()) {
            Some(i) => vec![(None, Some(i), false)],
            None => vec![(Some(0), None, true)],
        }
    } else {
        q.order_by
            .iter()
            .map(|(key, desc)| match key {
                OrderKey::Metric(m) => (q.metrics.iter().position(|x| x == m), None, *desc),
                OrderKey::Dimension(d) => (None, q.dimensions.iter().position(|x| x == d), *desc),
            })
            .collect()
    };
    rows.sort_by(|a, b| {
        for (metric, dim, desc) in &keys {
            let ord = match (metric, dim) {
                (Some(i), _) => {
                    let x = |r: &Row| match r.metrics[*i] {
                        Value::Int(v) => v as f64,
                        Value::Float(v) => v,
                    };
                    x(a).partial_cmp(&x(b)).unwrap_or(std::cmp::Ordering::Equal)
                }
                (None, Some(i)) => a.dimensions[*i].cmp(&b.dimensions[*i]),
                _ => std::cmp::Ordering::Equal,
            };
            let ord = if *desc { ord.reverse() } else { ord };
            if ord != std::cmp::Ordering::Equal {
                return ord;
            }
        }
        a.dimensions.cmp(&b.dimensions)
    });
}

/// The label of the time bucket holding the hour or day bucket `b` in a `unit` series, as
/// answers write it: hours `YYYY-MM-DD HH:00:00`, days, and weeks and months by their first day.
pub(super) fn time_label(zone: &SiteZone, unit: Unit, b: &Bucket) -> String {
    match unit {
        Unit::Hour => format!("{} {:02}:00:00", b.first_date(), b.label().get(11..13).unwrap_or("00")),
        Unit::Day => b.first_date().to_string(),
        unit => zone.bucket(unit, b.start_ms()).map(|w| w.first_date().to_string()).unwrap_or_default(),
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(super) fn too_many_rows() -> StatsError {
    StatsError::Invalid(format!(
        "this query would build more than {MAX_QUERY_ROWS} rows (time buckets × values); choose a shorter \
         date_range, a coarser time dimension or add a filter"
    ))
}
