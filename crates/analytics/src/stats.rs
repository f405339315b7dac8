//! Reading: Plausible-style queries, the realtime panel and session replays, from aggregate items.
//!
//! A query names metrics, a date range in site time, at most one breakdown dimension plus
//! optionally a time dimension, and filters. It is answered from the aggregate items of **one**
//! dimension: the breakdown's, or — with no breakdown — the one dimension the filters name, or the
//! site totals. The range is covered by the fewest month, week, day and hour buckets
//! ([`SiteZone::cover`]), one Query per run of adjacent buckets, so the cost of a year is that of
//! ~40 buckets per value and of 30 days ~7, whatever the traffic. Visitors are the union of the
//! buckets' sketches, never a sum.
//!
//! Filters on a dimension other than the one read are answered from the event blocks of the
//! range ([`crate::event_store`]), filtered and aggregated in memory as live aggregation would,
//! over any range the site keeps its events for (its raw-event retention, two years by default).
//! Such a query is bounded by a time budget ([`Stats::time_budget`]), not by its range: past the
//! budget it is refused with [`StatsError::TooSlow`] naming it, never answered from part of the
//! events.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::StreamExt;

use model::Table;
use store::item;

mod compare;
mod engagement;
mod journeys;
mod props;
mod revenue;
mod scan;
#[cfg(test)]
mod tests;

pub use compare::{Compared, Comparison, ComparisonMode, change};
pub use engagement::Engagement;
pub use journeys::{ENTRANCE, EXIT, Journeys, MAX_JOURNEY_ROWS};
pub use props::MAX_PROPERTY_KEYS;
pub use revenue::{GoalRevenue, RevenueGoal, mean_to_cents};

use crate::aggregate::{SiteSettingsSource, StoredAggregate};
use crate::period::{Bucket, DateRange, SiteZone, Unit};
use crate::sites::SiteId;
use crate::sketch::VisitorSketch;
use crate::stored::{
    Counters, EVENT_DIMENSIONS, HOUR_DIMENSIONS, Period, SessionRef, TOTAL, VISIT_DIMENSIONS, minute_label,
};
use crate::visitor::{UtcDay, VisitorId};

/// A metric of the Stats API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Distinct visitors (sketch union).
    Visitors,
    /// Visits (sessions started in the range).
    Visits,
    /// Page views.
    Pageviews,
    /// Page views per visit.
    ViewsPerVisit,
    /// Bouncing visits over visits, percent.
    BounceRate,
    /// Mean visit duration, seconds.
    VisitDuration,
    /// Events of any name.
    Events,
    /// Converting visitors over all visitors, percent (with `event:goal`).
    ConversionRate,
}

impl Metric {
    /// Every metric, in the Stats API's spelling.
    pub const ALL: [(&'static str, Metric); 8] = [
        ("visitors", Metric::Visitors),
        ("visits", Metric::Visits),
        ("pageviews", Metric::Pageviews),
        ("views_per_visit", Metric::ViewsPerVisit),
        ("bounce_rate", Metric::BounceRate),
        ("visit_duration", Metric::VisitDuration),
        ("events", Metric::Events),
        ("conversion_rate", Metric::ConversionRate),
    ];

    /// The metric named `name`.
    pub fn parse(name: &str) -> Option<Metric> {
        Metric::ALL.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Metric::ALL.iter().find(|(_, m)| *m == self).map(|(n, _)| *n).unwrap_or("visitors")
    }

    fn is_session_metric(self) -> bool {
        matches!(self, Metric::Visits | Metric::ViewsPerVisit | Metric::BounceRate | Metric::VisitDuration)
    }
}

/// A filter operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterOp {
    /// The value is one of the list.
    Is,
    /// The value is none of the list.
    IsNot,
    /// The value contains one of the list.
    Contains,
    /// The value contains none of the list.
    ContainsNot,
    /// The value matches one of the list's regular expressions (anywhere in it, as Plausible's
    /// `matches`; Rust's `regex` syntax, which runs in time linear in the value).
    Matches,
    /// The value matches none of the list's regular expressions.
    MatchesNot,
}

impl FilterOp {
    /// The operator named as in Plausible's Stats API v2 (`is`, `is_not`, `contains`,
    /// `contains_not`, `matches`, `matches_not`).
    pub fn parse(name: &str) -> Option<FilterOp> {
        Some(match name {
            "is" => FilterOp::Is,
            "is_not" => FilterOp::IsNot,
            "contains" => FilterOp::Contains,
            "contains_not" => FilterOp::ContainsNot,
            "matches" => FilterOp::Matches,
            "matches_not" => FilterOp::MatchesNot,
            _ => return None,
        })
    }

    /// Its name in the Stats API.
    pub fn name(self) -> &'static str {
        match self {
            FilterOp::Is => "is",
            FilterOp::IsNot => "is_not",
            FilterOp::Contains => "contains",
            FilterOp::ContainsNot => "contains_not",
            FilterOp::Matches => "matches",
            FilterOp::MatchesNot => "matches_not",
        }
    }

    /// Whether the operator is a negation: a row with several values (goals) passes when every
    /// value does, and an event filter selects the visits whose every event passes.
    pub fn is_negated(self) -> bool {
        matches!(self, FilterOp::IsNot | FilterOp::ContainsNot | FilterOp::MatchesNot)
    }
}

/// The longest regular expression a filter takes.
pub const MAX_PATTERN_LEN: usize = 1024;

/// Compiles a filter's regular expression, within bounds on its length and its compiled size,
/// or says what is wrong with it.
pub fn compile_pattern(pattern: &str) -> Result<regex::Regex, StatsError> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(StatsError::Invalid(format!("a filter's pattern is longer than {MAX_PATTERN_LEN} bytes")));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| StatsError::Invalid(format!("filter pattern {pattern:?} is not a regular expression: {e}")))
}

/// Compiled patterns, shared by every filter naming them: a filter is checked once per distinct
/// value of a block, so compiling per check would cost more than the check. Bounded: emptied
/// when full.
fn pattern(text: &str) -> Option<Arc<regex::Regex>> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<HashMap<String, Arc<regex::Regex>>>> =
        std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = store::sync::lock(cache);
    if let Some(r) = map.get(text) {
        return Some(r.clone());
    }
    let compiled = Arc::new(compile_pattern(text).ok()?);
    if map.len() >= 256 {
        map.clear();
    }
    map.insert(text.to_owned(), compiled.clone());
    Some(compiled)
}

/// A filter on one dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The operator.
    pub op: FilterOp,
    /// The dimension (`visit:source`, `event:page`, …).
    pub dimension: String,
    /// The values (or, for `matches`, the patterns) compared with; one matching is enough.
    pub values: Vec<String>,
}

impl Filter {
    fn accepts(&self, value: &str) -> bool {
        match self.op {
            // Stored values are bounded (`key_bound`); a filter may name the whole value or
            // the bounded one it is shown as.
            FilterOp::Is => self.values.iter().any(|v| crate::key_bound::bound_value(v) == value),
            FilterOp::IsNot => !self.values.iter().any(|v| crate::key_bound::bound_value(v) == value),
            FilterOp::Contains => self.values.iter().any(|v| value.contains(v.as_str())),
            FilterOp::ContainsNot => !self.values.iter().any(|v| value.contains(v.as_str())),
            // A pattern that does not compile was refused when the query was made.
            FilterOp::Matches => self.values.iter().any(|p| pattern(p).is_some_and(|r| r.is_match(value))),
            FilterOp::MatchesNot => !self.values.iter().any(|p| pattern(p).is_some_and(|r| r.is_match(value))),
        }
    }
}

/// A query, validated by [`Query::new`].
#[derive(Debug, Clone)]
pub struct Query {
    /// The id of the site queried.
    pub site_id: SiteId,
    /// Metrics, in answer order.
    pub metrics: Vec<Metric>,
    /// The dates, in site time.
    pub range: DateRange,
    /// Breakdown dimensions: at most one aggregate dimension and at most one `time:*`.
    pub dimensions: Vec<String>,
    /// Filters; an event or a value is counted only if it passes all of them.
    pub filters: Vec<Filter>,
    /// Ordering: a metric or dimension name and whether descending.
    pub order_by: Vec<(String, bool)>,
    /// Rows to return.
    pub limit: usize,
    /// Rows to skip.
    pub offset: usize,
    /// Whether imported history (`crate::imported`) is merged in where the query can use it:
    /// daily counts of the breakdown's (or the one filter's) dimension, before the cut-over.
    pub include_imports: bool,
}

/// What is wrong with a query, or why it could not be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatsError {
    /// A client error, with the message to show.
    #[error("{0}")]
    Invalid(String),
    /// Valid, but not answerable from aggregates yet.
    #[error("{0}")]
    Unsupported(String),
    /// The table failed.
    #[error(transparent)]
    Model(#[from] model::Error),
    /// Stored data does not read back.
    #[error("stored aggregates are malformed: {0}")]
    Corrupt(String),
    /// Reading the events took longer than the query's time budget.
    #[error(
        "this query reads raw events and took longer than its time budget of {0:?}; choose a shorter range or fewer \
         filters"
    )]
    TooSlow(std::time::Duration),
}

impl From<crate::event_store::EventStoreError> for StatsError {
    fn from(e: crate::event_store::EventStoreError) -> Self {
        match e {
            crate::event_store::EventStoreError::Model(m) => StatsError::Model(m),
            other => StatsError::Corrupt(other.to_string()),
        }
    }
}

impl From<crate::block::BlockError> for StatsError {
    fn from(e: crate::block::BlockError) -> Self {
        StatsError::Corrupt(e.to_string())
    }
}

/// One metric's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A count.
    Int(i64),
    /// A ratio, rounded.
    Float(f64),
}

/// One row of an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The breakdown values, in query order.
    pub dimensions: Vec<String>,
    /// The metric values, in query order.
    pub metrics: Vec<Value>,
}

fn is_aggregate_dimension(d: &str) -> bool {
    crate::dimension::Dimension::parse(d).is_some_and(|d| d.is_aggregated())
}

/// A scan that stopped without an answer (it panicked, or the runtime is shutting down).
fn scan_stopped(e: tokio::task::JoinError) -> StatsError {
    StatsError::Corrupt(format!("a scan stopped: {e}"))
}

/// What a scan of one day's event blocks computes.
type DayScan<T> = Arc<dyn Fn(Vec<crate::event_store::StoredBlock>) -> Result<T, StatsError> + Send + Sync>;

impl Stats {
    /// Every day's event blocks from `first` to `last`, each read and passed to `scan` in a task
    /// of its own, [`SCANS_AT_ONCE`] days at a time, answers in no particular order. On the
    /// embedded engine a Query is CPU work done where it is polled, so reading every day from
    /// the caller's one task would leave the scans waiting on one core.
    fn scan_days<T: Send + 'static>(
        &self,
        site_id: &str,
        (first, last): (crate::visitor::UtcDay, crate::visitor::UtcDay),
        scan: DayScan<T>,
    ) -> impl futures::Stream<Item = Result<T, StatsError>> + '_ {
        let site: Arc<str> = Arc::from(site_id);
        futures::stream::iter(first.days()..=last.days())
            .map(move |d| {
                let (table, site, scan) = (self.table.clone(), site.clone(), scan.clone());
                let day = tokio::spawn(async move {
                    let day = crate::visitor::UtcDay::from_days(d);
                    let blocks = crate::event_store::blocks_of_day(&table, &site, day).await?;
                    tokio::task::spawn_blocking(move || scan(blocks)).await.map_err(scan_stopped)?
                });
                async move { day.await.map_err(scan_stopped)? }
            })
            .buffer_unordered(SCANS_AT_ONCE)
    }
}

/// Days of event blocks a block scan reads and scans at once: enough that one day's
/// read overlaps another's scan on each of two cores, few enough that a query past its time
/// budget leaves little work behind.
const SCANS_AT_ONCE: usize = 4;

/// The years a query's date range may cover: wide enough for any real site, narrow enough that
/// no range asks for millions of buckets.
pub const QUERY_YEARS: std::ops::RangeInclusive<i16> = 1970..=2100;

/// The most time buckets (hours of a `time:hour` series, days of any other series) one query
/// reads: an hourly series of about two years, a daily one of about 54.
pub const MAX_QUERY_BUCKETS: usize = 20_000;

/// The most rows (time buckets × breakdown values) one query builds before paginating.
pub const MAX_QUERY_ROWS: usize = 250_000;

/// The most rows one page of an answer holds (Plausible's own bound).
pub const MAX_PAGE_ROWS: usize = 10_000;

/// The most filters one query holds.
pub const MAX_FILTERS: usize = 20;

/// The most values all the filters of one query hold together.
pub const MAX_FILTER_VALUES: usize = 200;

/// Refuses a date range outside [`QUERY_YEARS`], naming the bound.
pub fn check_range(range: &DateRange) -> Result<(), StatsError> {
    let (first, last) = (range.first().year(), range.last().year());
    if QUERY_YEARS.contains(&first) && QUERY_YEARS.contains(&last) {
        Ok(())
    } else {
        Err(StatsError::Invalid(format!(
            "date_range {range} is outside the years {} to {} a query may cover",
            QUERY_YEARS.start(),
            QUERY_YEARS.end()
        )))
    }
}

/// The label of the time bucket holding the hour or day bucket `b` in a `unit` series, as
/// answers write it: hours `YYYY-MM-DD HH:00:00`, days, and weeks and months by their first day.
fn time_label(zone: &SiteZone, unit: Unit, b: &Bucket) -> String {
    match unit {
        Unit::Hour => format!("{} {:02}:00:00", b.first_date(), b.label().get(11..13).unwrap_or("00")),
        Unit::Day => b.first_date().to_string(),
        unit => zone.bucket(unit, b.start_ms()).map(|w| w.first_date().to_string()).unwrap_or_default(),
    }
}

/// Checks filters as a query takes them: known dimensions, at least one value each, at most
/// [`MAX_FILTERS`] filters holding [`MAX_FILTER_VALUES`] values, patterns that compile.
pub fn check_filters(filters: &[Filter]) -> Result<(), StatsError> {
    if filters.len() > MAX_FILTERS {
        return Err(StatsError::Invalid(format!("at most {MAX_FILTERS} filters, not {}", filters.len())));
    }
    let values: usize = filters.iter().map(|f| f.values.len()).sum();
    if values > MAX_FILTER_VALUES {
        return Err(StatsError::Invalid(format!(
            "the filters hold {values} values, more than the {MAX_FILTER_VALUES} a query may"
        )));
    }
    for f in filters {
        if !is_aggregate_dimension(&f.dimension) || f.dimension == TOTAL {
            return Err(StatsError::Invalid(format!("unknown filter dimension `{}`", f.dimension)));
        }
        if f.values.is_empty() {
            return Err(StatsError::Invalid(format!("the filter on `{}` needs at least one value", f.dimension)));
        }
        if matches!(f.op, FilterOp::Matches | FilterOp::MatchesNot) {
            for v in &f.values {
                compile_pattern(v)?;
            }
        }
    }
    Ok(())
}

fn time_unit(d: &str) -> Option<Unit> {
    match crate::dimension::Dimension::parse(d) {
        Some(crate::dimension::Dimension::Time(unit)) => Some(unit),
        _ => None,
    }
}

impl Query {
    /// Checks a query's shape: known metrics and dimensions, at most one breakdown dimension and
    /// one time dimension, session metrics only with visit dimensions.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        site_id: impl Into<SiteId>,
        metrics: Vec<Metric>,
        range: DateRange,
        dimensions: Vec<String>,
        filters: Vec<Filter>,
        order_by: Vec<(String, bool)>,
        limit: usize,
        offset: usize,
    ) -> Result<Query, StatsError> {
        if metrics.is_empty() {
            return Err(StatsError::Invalid("at least one metric is required".into()));
        }
        if let Some(m) = metrics.iter().enumerate().find(|(i, m)| metrics[..*i].contains(m)).map(|(_, m)| m) {
            return Err(StatsError::Invalid(format!("metric `{}` is listed twice", m.name())));
        }
        check_range(&range)?;
        if limit > MAX_PAGE_ROWS {
            return Err(StatsError::Invalid(format!("pagination.limit is at most {MAX_PAGE_ROWS}, not {limit}")));
        }
        if offset > MAX_QUERY_ROWS {
            return Err(StatsError::Invalid(format!("pagination.offset is at most {MAX_QUERY_ROWS}, not {offset}")));
        }
        if dimensions.len() > 2 {
            return Err(StatsError::Invalid(format!(
                "at most 2 dimensions (one time dimension and one other), not {}",
                dimensions.len()
            )));
        }
        check_filters(&filters)?;
        if order_by.len() > metrics.len() + dimensions.len() {
            return Err(StatsError::Invalid(format!(
                "order_by has {} entries, more than the query's metrics and dimensions",
                order_by.len()
            )));
        }
        let mut time = 0;
        let mut other = 0;
        for d in &dimensions {
            if time_unit(d).is_some() {
                time += 1;
            } else if is_aggregate_dimension(d) && d != TOTAL {
                other += 1;
                if d.starts_with("event:") && metrics.iter().any(|m| m.is_session_metric()) {
                    let m = metrics.iter().find(|m| m.is_session_metric()).map_or("", |m| m.name());
                    return Err(StatsError::Invalid(format!(
                        "session metric `{m}` cannot be broken down by the event dimension `{d}`"
                    )));
                }
            } else {
                return Err(StatsError::Invalid(format!("unknown dimension `{d}`")));
            }
        }
        if time > 1 || other > 1 {
            return Err(StatsError::Unsupported(
                "at most one time dimension and one other dimension can be combined".into(),
            ));
        }
        if metrics.contains(&Metric::ConversionRate)
            && !dimensions.iter().any(|d| d == "event:goal")
            && !filters.iter().any(|f| f.dimension == "event:goal")
        {
            return Err(StatsError::Invalid(
                "conversion_rate needs the event:goal dimension or a filter on event:goal".into(),
            ));
        }
        for (name, _) in &order_by {
            if Metric::parse(name).is_none_or(|m| !metrics.contains(&m)) && !dimensions.contains(name) {
                return Err(StatsError::Invalid(format!(
                    "cannot order by `{name}`: it is not a queried metric or dimension"
                )));
            }
        }
        Ok(Query {
            site_id: site_id.into(),
            metrics,
            range,
            dimensions,
            filters,
            order_by,
            limit,
            offset,
            include_imports: false,
        })
    }
}

/// Counters and visitors summed over buckets.
#[derive(Debug, Clone, Default)]
struct Sum {
    counters: Counters,
    sketch: VisitorSketch,
}

impl Sum {
    fn add(&mut self, other: &Sum) {
        self.counters.add(&other.counters);
        self.sketch.merge(&other.sketch);
    }
}

/// The realtime panel's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Realtime {
    /// Distinct visitors in the last 5 minutes.
    pub current_visitors: u64,
    /// Page views per UTC minute, the last 30 minutes, oldest first: (minute start ms, count).
    pub pageviews_per_minute: Vec<(i64, i64)>,
    /// Pages viewed in the last 30 minutes, most viewed first: (path, visitors, page views).
    pub top_pages: Vec<(String, u64, i64)>,
}

/// Answers queries. Share it behind an `Arc`.
pub struct Stats {
    table: Table,
    sites: Arc<dyn SiteSettingsSource>,
    time_budget: std::time::Duration,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").finish_non_exhaustive()
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn display_value(dimension: &str, value: &str) -> Option<String> {
    if !value.is_empty() {
        return Some(value.to_owned());
    }
    matches!(dimension, "visit:source" | "visit:referrer").then(|| "Direct / None".to_owned())
}

impl Stats {
    /// Queries over `table`.
    pub fn new(table: Table, sites: Arc<dyn SiteSettingsSource>) -> Self {
        Stats { table, sites, time_budget: DEFAULT_TIME_BUDGET }
    }

    /// With `budget` as the longest a query reading raw events may take (default
    /// [`DEFAULT_TIME_BUDGET`]).
    pub fn with_time_budget(mut self, budget: std::time::Duration) -> Self {
        self.time_budget = budget;
        self
    }

    /// The longest a query reading raw events may take before it is refused.
    pub fn time_budget(&self) -> std::time::Duration {
        self.time_budget
    }

    fn deadline(&self) -> Deadline {
        Deadline { at: std::time::Instant::now() + self.time_budget, budget: self.time_budget }
    }

    /// The site's zone and the instant its weekly aggregates are complete from.
    async fn zone_and_weeks(&self, site_id: &str) -> Result<(SiteZone, i64), StatsError> {
        let settings = self.sites.site_settings(site_id).await.map_err(|e| StatsError::Corrupt(e.to_string()))?;
        Ok(settings.map(|s| (s.zone, s.weeks_from_ms)).unwrap_or_else(|| (SiteZone::utc(), i64::MAX)))
    }

    /// The items of `dimension` at `period` with buckets from `first` to `last` (labels).
    async fn read(
        &self,
        site_id: &str,
        period: Period,
        dimension: &str,
        first: &str,
        last: &str,
    ) -> Result<Vec<(String, String, Sum)>, StatsError> {
        let records = self
            .table
            .query("Aggregate")
            .key(item! { "site_id" => site_id, "period" => period.as_str(), "dimension" => dimension })
            .between(item! { "bucket" => first }, item! { "bucket" => last })
            // Only what a sum needs: the engine then skips the rest of each item (the per-run
            // flush markers and TTL) without building it, and DynamoDB sends less.
            .projection(model::expr::Projection::of(
                ["bucket", "value"].into_iter().chain(StoredAggregate::SUM_ATTRIBUTES),
            ))
            .all()
            .await?;
        let corrupt = |e: &dyn std::fmt::Display| StatsError::Corrupt(e.to_string());
        let mut out = Vec::with_capacity(records.len());
        for r in &records {
            let bucket = r.string("bucket").map_err(|e| corrupt(&e))?.to_owned();
            let value = r.opt_string("value").map_err(|e| corrupt(&e))?.unwrap_or_default().to_owned();
            let (counters, sketch) = StoredAggregate::sums_from_record(r).map_err(|e| corrupt(&e))?;
            out.push((bucket, value, Sum { counters, sketch: sketch.unwrap_or_default() }));
        }
        Ok(out)
    }

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
        let time = q.dimensions.iter().find_map(|d| time_unit(d));
        let breakdown = q.dimensions.iter().find(|d| time_unit(d).is_none()).cloned();
        let session_metrics = q.metrics.iter().any(|m| m.is_session_metric());
        let (mut source, mut raw) = source_of(q, breakdown.as_deref(), session_metrics);
        if session_metrics && source.starts_with("event:") {
            return Err(StatsError::Invalid(format!(
                "session metrics cannot be combined with an event dimension ({source}) as the breakdown"
            )));
        }
        let wanted = wanted_buckets(&zone, time, bounds, weeks_from)?;
        // Hour items are stored for a few dimensions only: an hourly series or a part-day range
        // of any other is answered from the raw events (as far back as the site keeps them).
        if wanted.iter().any(|(p, _)| *p == Period::Hour) && !HOUR_DIMENSIONS.contains(&source.as_str()) {
            source = breakdown.clone().unwrap_or_else(|| TOTAL.to_owned());
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
            None => self.gather(&q.site_id, &plan.source, &plan.wanted, &label_of).await?,
        };
        // Conversion rates divide by all of the range's visitors.
        let total_visitors = if q.metrics.contains(&Metric::ConversionRate) {
            let totals = match &raw_sums {
                Some((sums, labels)) => sums.labelled(TOTAL, labels),
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
            crate::imported::read(&self.table, &q.site_id, &plan.source, &q.range)
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
        let visits = plan.session_metrics || plan.source == "visit:exit_page";
        let sums = self.raw_sums(&q.site_id, partitions, &q.filters, &plan.source, visits, buckets).await?;
        Ok((sums, labels))
    }

    /// Answers `q` over the last 30 minutes before `now_ms` (its `range` is not read), from the
    /// event blocks of those minutes: visitors, page views and events of the events in them,
    /// visits (and their bounce rate, duration, views) of the visits that started in them.
    /// Every dimension and filter a query takes, no time dimension (minutes are
    /// [`Stats::realtime_filtered`]'s).
    pub async fn query_realtime(&self, q: &Query, now_ms: i64) -> Result<Vec<Row>, StatsError> {
        if q.dimensions.iter().any(|d| time_unit(d).is_some()) {
            return Err(StatsError::Invalid(
                "the last 30 minutes take no time dimension; GET /api/realtime has page views per minute".into(),
            ));
        }
        let this_minute = now_ms.div_euclid(60_000);
        let (start, end) = ((this_minute - 29) * 60_000, (this_minute + 1) * 60_000);
        let partitions = self.check_raw(&q.site_id, (start, end)).await?;
        let breakdown = q.dimensions.first().cloned();
        let source = breakdown.clone().unwrap_or_else(|| TOTAL.to_owned());
        let visits = q.metrics.iter().any(|m| m.is_session_metric()) || source == "visit:exit_page";
        // The 30 minutes are one group.
        let raw = self.raw_sums(&q.site_id, partitions, &q.filters, &source, visits, vec![(start, end, 0)]).await?;
        let labels = [String::new()];
        let mut sums: BTreeMap<String, Sum> = BTreeMap::new();
        let mut total = VisitorSketch::new();
        for sum in raw.labelled(TOTAL, &labels).values() {
            total.merge(&sum.sketch);
        }
        for ((_, value), sum) in raw.labelled(&source, &labels) {
            let value = if breakdown.is_some() {
                match display_value(&source, &value) {
                    Some(v) => v,
                    None => continue,
                }
            } else {
                String::new()
            };
            sums.entry(value).or_default().add(&sum);
        }
        if breakdown.is_none() {
            sums.entry(String::new()).or_default();
        }
        let all = total.estimate();
        let mut out: Vec<Row> = sums
            .iter()
            .filter(|(_, s)| breakdown.is_none() || !s.counters.is_zero() || !s.sketch.is_empty())
            .map(|(value, s)| row_of(q, &source, "", value, s, all, 0))
            .collect();
        order(&mut out, q);
        Ok(out.into_iter().skip(q.offset).take(q.limit).collect())
    }

    /// The realtime panel of a site at `now_ms`.
    pub async fn realtime(&self, site_id: &str, now_ms: i64) -> Result<Realtime, StatsError> {
        let this_minute = now_ms.div_euclid(60_000);
        let first = minute_label((this_minute - 29) * 60_000);
        let last = minute_label(now_ms);
        let totals = self.read(site_id, Period::Minute, TOTAL, &first, &last).await?;
        let pages = self.read(site_id, Period::Minute, "event:page", &first, &last).await?;
        Ok(realtime_of(this_minute, totals, pages))
    }

    /// The realtime panel of the events `filters` select: with none, [`Stats::realtime`]; else
    /// computed from the event blocks of the last 30 minutes, as a filtered query is.
    pub async fn realtime_filtered(
        &self,
        site_id: &str,
        now_ms: i64,
        filters: &[Filter],
    ) -> Result<Realtime, StatsError> {
        if filters.is_empty() {
            return self.realtime(site_id, now_ms).await;
        }
        check_filters(filters)?;
        let this_minute = now_ms.div_euclid(60_000);
        let (start, end) = ((this_minute - 29) * 60_000, (this_minute + 1) * 60_000);
        let partitions = self.check_raw(site_id, (start, end)).await?;
        // Each UTC minute is a group, labelled as stored minute items are.
        let minutes: Vec<(i64, i64, u32)> =
            (0..30).map(|n| (start + n * 60_000, start + (n + 1) * 60_000, n as u32)).collect();
        let labels: Vec<String> = minutes.iter().map(|&(s, _, _)| minute_label(s)).collect();
        let raw = self.raw_sums(site_id, partitions, filters, "event:page", false, minutes).await?;
        let items = |dimension: &str| -> Vec<(String, String, Sum)> {
            raw.labelled(dimension, &labels).into_iter().map(|((label, value), sum)| (label, value, sum)).collect()
        };
        Ok(realtime_of(this_minute, items(TOTAL), items("event:page")))
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
    breakdown: Option<String>,
    /// The dimension read: the breakdown, the one filtered, or the site totals ([`TOTAL`]).
    source: String,
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
fn source_of(q: &Query, breakdown: Option<&str>, session_metrics: bool) -> (String, bool) {
    let filtered: BTreeSet<&str> = q.filters.iter().map(|f| f.dimension.as_str()).collect();
    let event_filtered = filtered.iter().any(|d| d.starts_with("event:"));
    let (mut source, mut raw) = match (breakdown, filtered.len()) {
        (Some(b), _) if filtered.iter().all(|f| *f == b) => (b.to_owned(), false),
        (None, 0) => (TOTAL.to_owned(), false),
        (None, 1) if !(session_metrics && event_filtered) => {
            (filtered.iter().next().map(|s| (*s).to_owned()).unwrap_or_default(), false)
        }
        (Some(b), _) => (b.to_owned(), true),
        (None, _) => (TOTAL.to_owned(), true),
    };
    // Region, city, screen size and language keep no item for visits without a value, which
    // a negated filter on them must count: the raw events have them.
    if q.filters
        .iter()
        .any(|f| f.op.is_negated() && crate::stored::SPARSE_VISIT_DIMENSIONS.contains(&f.dimension.as_str()))
    {
        source = breakdown.map_or_else(|| TOTAL.to_owned(), str::to_owned);
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
            && source != TOTAL
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
        if source != TOTAL && !q.filters.iter().all(|f| f.accepts(&value)) {
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
fn row_of(
    q: &Query,
    source: &str,
    label: &str,
    value: &str,
    s: &Sum,
    all_visitors: u64,
    imported_visitors: u64,
) -> Row {
    let c = &s.counters;
    let visitors =
        if source == "visit:exit_page" { c.visits.max(0) as u64 } else { s.sketch.estimate() + imported_visitors };
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
    let dimensions =
        q.dimensions.iter().map(|d| if time_unit(d).is_some() { label.to_owned() } else { value.to_owned() }).collect();
    Row { dimensions, metrics }
}

/// The realtime panel from the minute items of the last 30 minutes (totals and pages).
fn realtime_of(
    this_minute: i64,
    totals: Vec<(String, String, Sum)>,
    page_items: Vec<(String, String, Sum)>,
) -> Realtime {
    let mut per_minute: BTreeMap<i64, i64> = (this_minute - 29..=this_minute).map(|m| (m, 0)).collect();
    let mut current = VisitorSketch::new();
    for (bucket, _, agg) in &totals {
        let minute: i64 = bucket.parse().unwrap_or(0);
        if let Some(c) = per_minute.get_mut(&minute) {
            *c += agg.counters.pageviews;
        }
        if minute > this_minute - 5 {
            current.merge(&agg.sketch);
        }
    }
    let mut pages: HashMap<String, Sum> = HashMap::new();
    for (_, value, agg) in page_items {
        pages.entry(value).or_default().add(&agg);
    }
    let mut top_pages: Vec<(String, u64, i64)> =
        pages.into_iter().map(|(p, s)| (p, s.sketch.estimate(), s.counters.pageviews)).collect();
    top_pages.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
    top_pages.truncate(10);
    Realtime {
        current_visitors: current.estimate(),
        pageviews_per_minute: per_minute.into_iter().map(|(m, c)| (m * 60_000, c)).collect(),
        top_pages,
    }
}

/// The longest a query reading raw events may take unless [`Stats::with_time_budget`] says
/// otherwise.
pub const DEFAULT_TIME_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// When a query reading raw events must have finished.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: std::time::Instant,
    budget: std::time::Duration,
}

impl Deadline {
    fn check(&self) -> Result<(), StatsError> {
        if std::time::Instant::now() > self.at { Err(StatsError::TooSlow(self.budget)) } else { Ok(()) }
    }
}

/// The values of `dimension` for one stored event, as a filter sees them (the reference's).
#[cfg(test)]
fn event_value(e: &crate::stored::StoredEvent, dimension: &str) -> Vec<String> {
    // Bounded as the aggregates' values are, so both paths filter alike.
    let one = |v: &str| vec![crate::key_bound::bound_value(v).into_owned()];
    match dimension {
        "event:page" => one(&e.path),
        "event:hostname" => one(&e.hostname),
        "event:name" => one(&e.name),
        "event:goal" => e.goals.iter().map(|g| crate::key_bound::bound_value(g).into_owned()).collect(),
        "visit:exit_page" => one(&e.next().exit_page),
        d if let Some(key) = d.strip_prefix(crate::stored::PROPS_PREFIX) => {
            e.props.get(key).map(|v| one(v)).unwrap_or_default()
        }
        d => crate::dimension::VisitDimension::parse(d)
            .and_then(|visit| visit.value(&e.visit))
            .map(|v| one(&display_value(d, v).unwrap_or_default()))
            .unwrap_or_default(),
    }
}

/// Whether the filters select a visit (its events, in order): its visit attributes pass each
/// visit filter (the exit page as the visit ends), and for each event filter some event passes
/// it — or, for `is_not`, every event does (a visit that never viewed the page). So a filter on
/// a page gives visit metrics of the visits that viewed it, as Plausible's do.
#[cfg(test)]
fn session_selected(session: &[crate::stored::StoredEvent], filters: &[Filter]) -> bool {
    let Some(last) = session.last() else { return false };
    filters.iter().all(|f| {
        if !f.dimension.starts_with("event:") {
            passes(f, last)
        } else if f.op.is_negated() {
            session.iter().all(|e| passes(f, e))
        } else {
            session.iter().any(|e| passes(f, e))
        }
    })
}

#[cfg(test)]
fn passes(f: &Filter, e: &crate::stored::StoredEvent) -> bool {
    let values = event_value(e, &f.dimension);
    if f.op.is_negated() { values.iter().all(|v| f.accepts(v)) } else { values.iter().any(|v| f.accepts(v)) }
}

fn too_many_rows() -> StatsError {
    StatsError::Invalid(format!(
        "this query would build more than {MAX_QUERY_ROWS} rows (time buckets × values); choose a shorter \
         date_range, a coarser time dimension or add a filter"
    ))
}

impl Stats {
    /// Whether the raw events of the range `start_ms..end_ms` can answer a query: the site still
    /// keeps every one of them. Returns the UTC day partitions to read: from the day before the
    /// range (for visits that began then) to its last day.
    async fn check_raw(
        &self,
        site_id: &str,
        (start_ms, end_ms): (i64, i64),
    ) -> Result<(crate::visitor::UtcDay, crate::visitor::UtcDay), StatsError> {
        let settings = self.sites.site_settings(site_id).await.map_err(|e| StatsError::Corrupt(e.to_string()))?;
        let (zone, days) = settings.map_or((SiteZone::utc(), 730), |s| (s.zone, s.retention_event_days));
        // In site time: raw events live a day longer than the retention, so "the last N days"
        // (from midnight N days ago) is whole whenever N is at most the retention.
        let date_of = |ms| zone.date_of(ms).map_err(|e| StatsError::Invalid(e.to_string()));
        let today = date_of(jiff::Timestamp::now().as_millisecond())?;
        let kept_from = today.checked_sub(jiff::Span::new().days(i64::from(days))).unwrap_or(today);
        if date_of(start_ms)? < kept_from {
            return Err(StatsError::Unsupported(format!(
                "this query reads raw events (a filter on a dimension other than the breakdown, visit metrics \
                 under an event filter, or a funnel), which this site keeps for {days} days: the range must \
                 start on or after {kept_from}"
            )));
        }
        let first = crate::visitor::UtcDay::from_unix_ms(start_ms).previous();
        let last = crate::visitor::UtcDay::from_unix_ms(end_ms.saturating_sub(1));
        Ok((first, last))
    }

    /// The sums of `dimension`'s values (and of the site totals) that the events of the
    /// partitions `first..=last` ([`Stats::check_raw`]) passing the filters add up to, per group
    /// of `buckets` ([`scan::Spec`]): computed from the event blocks' columns ([`scan`]), each
    /// day's blocks on a blocking thread, [`crate::event_store::PARALLEL_READS`] days read ahead
    /// and two scanned at a time.
    async fn raw_sums(
        &self,
        site_id: &str,
        (first, last): (crate::visitor::UtcDay, crate::visitor::UtcDay),
        filters: &[Filter],
        dimension: &str,
        visits: bool,
        buckets: Vec<(i64, i64, u32)>,
    ) -> Result<scan::Sums, StatsError> {
        let deadline = self.deadline();
        let shared = Arc::new((filters.to_vec(), dimension.to_owned(), buckets));
        let mut days = self.scan_days(
            site_id,
            (first, last),
            Arc::new(move |blocks| {
                let (filters, dimension, buckets) = &*shared;
                scan::scan_day(&blocks, &scan::Spec { filters, dimension, visits, buckets })
            }),
        );
        let mut sums = scan::Sums::default();
        while let Some(day) = days.next().await {
            let day = day?;
            deadline.check()?;
            sums.merge(day);
        }
        Ok(sums)
    }
}

/// The items of `dimensions` that `events` (sorted by session, each session whole) passing the
/// filters add up to, by summing each event's deltas: the reference the block scan ([`scan`])
/// is tested against.
#[cfg(test)]
fn reference_items(
    events: &[crate::stored::StoredEvent],
    zone: &SiteZone,
    filters: &[Filter],
    dimensions: &[&str],
    periods: &[Period],
) -> HashMap<crate::stored::AggKey, Sum> {
    let mut items: HashMap<crate::stored::AggKey, Sum> = HashMap::new();
    let mut add = |e: &crate::stored::StoredEvent, event_part: bool, visit_part: bool| {
        crate::aggregate::for_each_delta_of_periods(e, zone, periods, |key, delta| {
            let (events, visits) = delta.counters.split();
            let mut counters = Counters::default();
            if event_part {
                counters.add(&events);
            }
            if visit_part {
                counters.add(&visits);
            }
            let visitor = delta.visitor.filter(|_| event_part);
            if (counters.is_zero() && visitor.is_none()) || !dimensions.contains(&key.dimension) {
                return;
            }
            let entry = items.entry(key.to_owned_key()).or_default();
            entry.counters.add(&counters);
            if let Some(v) = visitor {
                entry.sketch.insert_u64(v);
            }
        });
    };
    for session in events.chunk_by(|a, b| a.visitor_id == b.visitor_id && a.session_id == b.session_id) {
        let selected = session_selected(session, filters);
        for e in session {
            add(e, filters.iter().all(|f| passes(f, e)), selected);
        }
    }
    items
}

fn order(rows: &mut [Row], q: &Query) {
    let keys: Vec<(Option<usize>, Option<usize>, bool)> = if q.order_by.is_empty() {
        // Series in time order; breakdowns by their first metric, largest first.
        match q.dimensions.iter().position(|d| time_unit(d).is_some()) {
            Some(i) => vec![(None, Some(i), false)],
            None => vec![(Some(0), None, true)],
        }
    } else {
        q.order_by
            .iter()
            .map(|(name, desc)| {
                let metric = Metric::parse(name).and_then(|m| q.metrics.iter().position(|x| *x == m));
                let dim = q.dimensions.iter().position(|d| d == name);
                (metric, dim, *desc)
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

/// Partitions the raw-event reads (filtered queries, funnels, recent sessions, exports) read
/// at once: on DynamoDB each is a round trip, so one at a time would leave the time to latency.
pub const PARALLEL_READS: usize = 16;

/// Fewest steps of a funnel.
pub const MIN_FUNNEL_STEPS: usize = 2;
/// Most steps of a funnel.
pub const MAX_FUNNEL_STEPS: usize = 8;

/// One step of a funnel, as [`Stats::funnel`] counts it.
#[derive(Debug, Clone, PartialEq)]
pub struct FunnelStep {
    /// The step, as a goal of its kind is named (`Visit /pricing*`, `Signup`).
    pub name: String,
    /// Visitors who reached it, every step before it done in order within one visit.
    pub visitors: u64,
    /// Of the visitors who entered the funnel (the first step), the share who reached this step, in %.
    pub conversion_rate: f64,
    /// Visitors who reached the step before but not this one (0 for the first step).
    pub dropoff: u64,
}

/// One daily aggregate item, as `tally export --aggregates` writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct DayItem {
    /// The site-time date.
    pub date: String,
    /// The dimension (`total` for the site's totals).
    pub dimension: String,
    /// The value, as the Stats API shows it.
    pub value: String,
    /// Distinct visitors (the item's sketch).
    pub visitors: u64,
    /// The item's summed counters (page views, events, visits, bounces, durations).
    pub counters: Counters,
}

/// A visit as its events tell it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// The session, written as an opaque reference that finds it in one Query.
    pub session_ref: SessionRef,
    /// The visitor, as its events carry it.
    pub visitor_id: VisitorId,
    /// First event, epoch ms.
    pub started_at: i64,
    /// Latest event, epoch ms.
    pub last_seen_at: i64,
    /// Events and page views.
    pub events: u32,
    /// Page views.
    pub pageviews: u32,
    /// Entry and exit page.
    pub entry_page: String,
    /// The latest page viewed.
    pub exit_page: String,
    /// Source, country, device, browser, OS.
    pub visit: std::sync::Arc<crate::stored::VisitAttrs>,
}

/// A visitor id as given by a client (16 hexadecimal digits, either case): every path that
/// takes a visitor id parses it here, so an id in upper case finds, reads and erases the same
/// visitor everywhere.
pub fn parse_visitor(text: &str) -> Result<VisitorId, StatsError> {
    VisitorId::parse(text).ok_or_else(|| StatsError::Invalid(format!("{text:?} is not a visitor id")))
}

/// A UTC day as given by a client (`YYYY-MM-DD`), with the date parser's message when it is not.
fn parse_day(text: &str) -> Result<UtcDay, StatsError> {
    crate::period::parse_date(text).map_err(|e| StatsError::Invalid(e.to_string()))?;
    UtcDay::parse(text).ok_or_else(|| StatsError::Invalid(format!("{text:?} is not a day")))
}

fn summarize(events: &[crate::stored::StoredEvent]) -> Vec<SessionSummary> {
    let mut out: Vec<SessionSummary> = Vec::new();
    for e in events {
        let state = e.next();
        match out.last_mut() {
            Some(s) if s.session_ref == SessionRef::of(e) => {
                s.last_seen_at = s.last_seen_at.max(state.last_ts);
                s.events = state.events.max(s.events);
                s.pageviews = state.pageviews.max(s.pageviews);
                s.exit_page = state.exit_page.clone();
            }
            _ => out.push(SessionSummary {
                session_ref: SessionRef::of(e),
                visitor_id: e.visitor_id,
                started_at: e.visit.start_ts,
                last_seen_at: state.last_ts,
                events: state.events,
                pageviews: state.pageviews,
                entry_page: e.visit.entry_page.clone(),
                exit_page: state.exit_page.clone(),
                visit: e.visit.clone(),
            }),
        }
    }
    out
}

impl Stats {
    /// The events of the given sessions (day, visitor, session), each session's in order, read
    /// from the blocks of their start days: each day's blocks are read once, the sessions column
    /// first, and only the blocks holding a wanted session are decoded whole.
    async fn sessions_events(
        &self,
        site_id: &str,
        wanted: &[SessionRef],
    ) -> Result<Vec<crate::stored::StoredEvent>, StatsError> {
        use crate::block::{Col, Cols};
        let mut by_day: BTreeMap<UtcDay, BTreeSet<(u64, u128)>> = BTreeMap::new();
        for r in wanted {
            by_day.entry(r.day).or_default().insert((r.visitor.as_u64(), r.session.0));
        }
        let mut out = Vec::new();
        for (day, keys) in by_day {
            for b in crate::event_store::blocks_of_day(&self.table, site_id, day).await? {
                let head = b.read(Cols::NONE.with(Col::Sessions))?;
                if !head.sessions.iter().any(|k| keys.contains(&(k.visitor, k.session))) {
                    continue;
                }
                out.extend(b.events()?.into_iter().filter(|e| keys.contains(&(e.visitor_id.as_u64(), e.session_id.0))));
            }
        }
        crate::event_store::sort_sessions(&mut out);
        Ok(out)
    }

    /// A funnel over `range`: for each step, the visitors who, within one visit, completed it
    /// and every step before it in order (other events may come between), with the conversion
    /// from the first step and the drop-off from the previous one. Read from the raw events, so
    /// bounded as a filtered query is (the site's raw-event retention, [`Stats::time_budget`]).
    pub async fn funnel(
        &self,
        site_id: &str,
        range: &DateRange,
        steps: &[crate::goal::Goal],
    ) -> Result<Vec<FunnelStep>, StatsError> {
        self.funnel_filtered(site_id, range, steps, &[]).await
    }

    /// A funnel as [`Stats::funnel`] counts it, over the visits `filters` select only (as a
    /// filtered query selects them).
    pub async fn funnel_filtered(
        &self,
        site_id: &str,
        range: &DateRange,
        steps: &[crate::goal::Goal],
        filters: &[Filter],
    ) -> Result<Vec<FunnelStep>, StatsError> {
        check_filters(filters)?;
        if !(MIN_FUNNEL_STEPS..=MAX_FUNNEL_STEPS).contains(&steps.len()) {
            return Err(StatsError::Invalid(format!(
                "a funnel has {MIN_FUNNEL_STEPS} to {MAX_FUNNEL_STEPS} steps, not {}",
                steps.len()
            )));
        }
        check_range(range)?;
        let (zone, _) = self.zone_and_weeks(site_id).await?;
        let (start, end) = zone.bounds_ms(range).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let (first, last) = self.check_raw(site_id, (start, end)).await?;
        let deadline = self.deadline();
        let mut reached: Vec<std::collections::HashSet<u64>> = vec![Default::default(); steps.len()];
        let steps_owned: Arc<Vec<crate::goal::Goal>> = Arc::new(steps.to_vec());
        let filters: Arc<Vec<Filter>> = Arc::new(filters.to_vec());
        let mut days = self.scan_days(
            site_id,
            (first, last),
            Arc::new(move |blocks| scan::funnel_day(&blocks, &steps_owned, (start, end), &filters)),
        );
        while let Some(day) = days.next().await {
            let day = day?;
            deadline.check()?;
            for (all, some) in reached.iter_mut().zip(day) {
                all.extend(some);
            }
        }
        let entered = reached[0].len() as u64;
        let mut out = Vec::with_capacity(steps.len());
        let mut previous = entered;
        for (step, visitors) in steps.iter().zip(&reached) {
            let visitors = visitors.len() as u64;
            out.push(FunnelStep {
                name: step.display_name(),
                visitors,
                conversion_rate: crate::goal::conversion_rate(visitors, entered).percent(2),
                dropoff: previous.saturating_sub(visitors),
            });
            previous = visitors;
        }
        Ok(out)
    }

    /// The events of each UTC day partition of the site from `first` to `last`, each day's
    /// sorted by session (a session's events together, in order), in day order when `ordered`,
    /// else as they come; [`crate::event_store::PARALLEL_READS`] days at a time.
    fn partitions<'a>(
        &'a self,
        site_id: &'a str,
        first: crate::visitor::UtcDay,
        last: crate::visitor::UtcDay,
        ordered: bool,
    ) -> futures::stream::BoxStream<'a, Result<Vec<crate::stored::StoredEvent>, StatsError>> {
        crate::event_store::blocks_of_days(&self.table, site_id, first, last, ordered)
            .map(|day| {
                let (_, blocks) = day?;
                let mut events = Vec::new();
                for b in blocks {
                    events.extend(b.events()?);
                }
                crate::event_store::sort_sessions(&mut events);
                Ok(events)
            })
            .boxed()
    }

    /// Every stored event of the site whose site-time date is in `range`, session by session
    /// (each in order), for `tally export`: the UTC day partitions from the day before the range
    /// to the day after, as the rebuild reads them.
    pub async fn export_events(
        &self,
        site_id: &str,
        range: &DateRange,
        mut f: impl FnMut(&crate::stored::StoredEvent) -> Result<(), StatsError>,
    ) -> Result<u64, StatsError> {
        let (zone, _) = self.zone_and_weeks(site_id).await?;
        let (start, end) = zone.bounds_ms(range).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let first = crate::visitor::UtcDay::from_unix_ms(start).previous();
        let last = crate::visitor::UtcDay::from_unix_ms(end);
        let mut written = 0;
        let mut partitions = self.partitions(site_id, first, last, true);
        while let Some(events) = partitions.next().await {
            let events = events?;
            for e in events.iter().filter(|e| (start..end).contains(&e.ts)) {
                f(e)?;
                written += 1;
            }
        }
        Ok(written)
    }

    /// The site's daily aggregate items of `range`, for `tally export`: for each day, dimension
    /// and value, the counters and the visitors (estimated from the item's sketch).
    pub async fn export_days(&self, site_id: &str, range: &DateRange) -> Result<Vec<DayItem>, StatsError> {
        let (first, last) = (range.first().to_string(), range.last().to_string());
        let mut out = Vec::new();
        for dimension in
            std::iter::once(TOTAL).chain(EVENT_DIMENSIONS.iter().copied()).chain(VISIT_DIMENSIONS.iter().copied())
        {
            for (bucket, value, sum) in self.read(site_id, Period::Day, dimension, &first, &last).await? {
                out.push(DayItem {
                    date: bucket,
                    dimension: dimension.to_owned(),
                    value: display_value(dimension, &value).unwrap_or(value),
                    visitors: sum.sketch.estimate(),
                    counters: sum.counters,
                });
            }
        }
        out.sort_by(|a, b| (&a.date, &a.dimension, &a.value).cmp(&(&b.date, &b.dimension, &b.value)));
        Ok(out)
    }

    /// One session's events in order.
    pub async fn session_events(
        &self,
        site_id: &str,
        reference: &str,
    ) -> Result<Vec<crate::stored::StoredEvent>, StatsError> {
        let session = SessionRef::parse(reference)
            .ok_or_else(|| StatsError::Invalid(format!("{reference:?} is not a session reference")))?;
        self.sessions_events(site_id, &[session]).await
    }

    /// A visitor's sessions that started on UTC day `day` (one Query), oldest first.
    pub async fn visitor_sessions(
        &self,
        site_id: &str,
        day: &str,
        visitor: &str,
    ) -> Result<Vec<SessionSummary>, StatsError> {
        Ok(summarize(&self.visitor_events(site_id, day, visitor).await?))
    }

    /// Every event of a visitor whose sessions started on UTC day `day` (one Query), in order:
    /// all Tally keeps about them, for a GDPR access request.
    pub async fn visitor_events(
        &self,
        site_id: &str,
        day: &str,
        visitor: &str,
    ) -> Result<Vec<crate::stored::StoredEvent>, StatsError> {
        let day = parse_day(day)?;
        let visitor = parse_visitor(visitor)?;
        let mut events: Vec<_> = crate::event_store::events_of_day(&self.table, site_id, day)
            .await?
            .into_iter()
            .filter(|e| e.visitor_id == visitor)
            .collect();
        crate::event_store::sort_sessions(&mut events);
        Ok(events)
    }

    /// The sessions active on UTC day `day` with the latest events, latest first: the day's
    /// session log read newest first until no older entry can make the list, then each session
    /// (one Query each, [`PARALLEL_READS`] at a time). The cost follows `limit`, not the day's
    /// traffic. A session erased since is left out, so the list can be shorter than `limit`.
    pub async fn recent_sessions(
        &self,
        site_id: &str,
        day: &str,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StatsError> {
        use crate::aggregate::session_log;
        crate::period::parse_date(day).map_err(|e| StatsError::Invalid(e.to_string()))?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut latest: HashMap<SessionRef, i64> = HashMap::new();
        // The `limit`-th latest time so far: once an item's newest entry is older, no entry
        // from here on can make the list.
        let mut bar = i64::MIN;
        let mut logs = self
            .table
            .query("SessionLog")
            .key(item! { "site_id" => site_id, "day" => day })
            .descending()
            .page_size(64)
            .items();
        while let Some(record) = logs.next().await {
            let record = record?;
            if latest.len() >= limit && record.opt_i64("last_ts")?.unwrap_or(i64::MAX) < bar {
                break;
            }
            let Some(store::AttributeValue::B(bytes)) = record.get("sessions") else { continue };
            for (id, ts) in session_log::decode(bytes).map_err(|e| StatsError::Corrupt(e.to_string()))? {
                let at = latest.entry(id).or_insert(ts);
                *at = (*at).max(ts);
            }
            if latest.len() >= limit {
                let mut times: Vec<i64> = latest.values().copied().collect();
                times.select_nth_unstable_by_key(limit - 1, |&t| std::cmp::Reverse(t));
                bar = times[limit - 1];
            }
        }
        let mut chosen: Vec<(SessionRef, i64)> = latest.into_iter().collect();
        chosen.sort_by_key(|&(id, ts)| (std::cmp::Reverse(ts), id.session));
        chosen.truncate(limit);
        let wanted: Vec<SessionRef> = chosen.into_iter().map(|(id, _)| id).collect();
        let mut all: Vec<SessionSummary> = summarize(&self.sessions_events(site_id, &wanted).await?);
        all.sort_by_key(|s| std::cmp::Reverse(s.last_seen_at));
        Ok(all)
    }

    /// Deletes every event of a visitor whose sessions started on UTC day `day` (GDPR erasure),
    /// then their entries in the session log of that day and the next (a visit ends 30 minutes
    /// after its last event); returns how many events. Aggregates keep their counts (they hold no
    /// visitor id).
    pub async fn delete_visitor(&self, site_id: &str, day: &str, visitor: &str) -> Result<usize, StatsError> {
        let day = parse_day(day)?;
        let visitor = parse_visitor(visitor)?;
        let erased = crate::event_store::erase_visitor(&self.table, site_id, day, visitor).await?;
        self.forget_in_session_log(site_id, day, visitor).await?;
        Ok(erased)
    }

    /// Rewrites the session-log items of `day` and the next day that name `visitor`'s sessions
    /// started on `day`, without them (an item left empty is deleted).
    async fn forget_in_session_log(&self, site_id: &str, start: UtcDay, visitor: VisitorId) -> Result<(), StatsError> {
        use crate::aggregate::session_log;
        let theirs = |e: &(SessionRef, i64)| e.0.visitor == visitor && e.0.day == start;
        for active in [start, UtcDay::from_days(start.days() + 1)] {
            let active = active.to_string();
            let logs = self
                .table
                .query("SessionLog")
                .key(item! { "site_id" => site_id, "day" => active.as_str() })
                .consistent()
                .all()
                .await?;
            for record in logs {
                let Some(store::AttributeValue::B(bytes)) = record.get("sessions") else { continue };
                let entries = session_log::decode(bytes).map_err(|e| StatsError::Corrupt(e.to_string()))?;
                if !entries.iter().any(theirs) {
                    continue;
                }
                let key = item! {
                    "site_id" => site_id,
                    "day" => active.as_str(),
                    "last_ts" => record.opt_i64("last_ts")?.unwrap_or(0),
                    "run_id" => record.string("run_id")?,
                    "epoch" => record.opt_i64("epoch")?.unwrap_or(0),
                    "part" => record.opt_i64("part")?.unwrap_or(0),
                };
                let kept: Vec<_> = entries.into_iter().filter(|e| !theirs(e)).collect();
                if kept.is_empty() {
                    self.table.delete("SessionLog", key).await?;
                } else {
                    let bytes = store::AttributeValue::B(session_log::encode(&kept));
                    self.table.update("SessionLog", key, model::expr::Update::new().set("sessions", bytes)).await?;
                }
            }
        }
        Ok(())
    }
}
