//! What a query is: its metrics, filters and dimensions ([`Query`], [`Filter`]), the answer's
//! rows, the errors a query meets, and the checks every query passes before anything is read
//! (the bounds on its range, filters, rows and pages).

use std::collections::HashMap;
use std::sync::Arc;

use crate::dimension::{Dimension, EventDimension};
use crate::period::DateRange;
use crate::sites::SiteId;

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

    pub(super) fn is_session_metric(self) -> bool {
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
    /// The dimension filtered, parsed from its name (`visit:source`, `event:page`, …) by
    /// [`Filter::new`]: an aggregate dimension, not the totals.
    pub dimension: Dimension,
    /// The values (or, for `matches`, the patterns) compared with; one matching is enough.
    pub values: Vec<String>,
}

impl Filter {
    /// A filter on the dimension named `dimension`, or the error a query gives for a name that
    /// is not an aggregate dimension (a time dimension, the totals, an unknown name).
    pub fn new(op: FilterOp, dimension: &str, values: Vec<String>) -> Result<Filter, StatsError> {
        match Dimension::parse(dimension) {
            Some(d) if d.is_aggregated() && d != Dimension::Total => Ok(Filter { op, dimension: d, values }),
            _ => Err(unknown_filter_dimension(dimension)),
        }
    }

    /// Whether `value` passes the filter.
    pub(super) fn accepts(&self, value: &str) -> bool {
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
    /// Breakdown dimensions, parsed from their names: at most one aggregate dimension and at
    /// most one time dimension, in the order the answer's rows list their values.
    pub dimensions: Vec<Dimension>,
    /// Filters; an event or a value is counted only if it passes all of them.
    pub filters: Vec<Filter>,
    /// Ordering: one of the query's metrics or dimensions and whether descending.
    pub order_by: Vec<(OrderKey, bool)>,
    /// Rows to return.
    pub limit: usize,
    /// Rows to skip.
    pub offset: usize,
    /// Whether imported history (`crate::imported`) is merged in where the query can use it:
    /// daily counts of the breakdown's (or the one filter's) dimension, before the cut-over.
    pub include_imports: bool,
}

/// What a query's rows are ordered by: one of its metrics or one of its dimensions, as
/// `order_by` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderKey {
    /// A metric of the query, by its value.
    Metric(Metric),
    /// A dimension of the query, by its value as the row shows it.
    Dimension(Dimension),
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

fn unknown_filter_dimension(name: &str) -> StatsError {
    StatsError::Invalid(format!("unknown filter dimension `{name}`"))
}

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
        if !f.dimension.is_aggregated() || f.dimension == Dimension::Total {
            return Err(unknown_filter_dimension(&f.dimension.name()));
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

impl Query {
    /// Checks a query's shape: known metrics and dimensions, at most one breakdown dimension and
    /// one time dimension, session metrics only with visit dimensions. The dimensions and the
    /// `order_by` entries are given by name, as the Stats API spells them, and parsed here.
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
        let mut parsed = Vec::with_capacity(dimensions.len());
        for d in &dimensions {
            match Dimension::parse(d) {
                Some(dimension @ Dimension::Time(_)) => {
                    time += 1;
                    parsed.push(dimension);
                }
                Some(dimension) if dimension != Dimension::Total => {
                    other += 1;
                    if dimension.is_of_event() && metrics.iter().any(|m| m.is_session_metric()) {
                        let m = metrics.iter().find(|m| m.is_session_metric()).map_or("", |m| m.name());
                        return Err(StatsError::Invalid(format!(
                            "session metric `{m}` cannot be broken down by the event dimension `{d}`"
                        )));
                    }
                    parsed.push(dimension);
                }
                _ => return Err(StatsError::Invalid(format!("unknown dimension `{d}`"))),
            }
        }
        if time > 1 || other > 1 {
            return Err(StatsError::Unsupported(
                "at most one time dimension and one other dimension can be combined".into(),
            ));
        }
        if metrics.contains(&Metric::ConversionRate)
            && !parsed.contains(&Dimension::Event(EventDimension::Goal))
            && !filters.iter().any(|f| f.dimension == Dimension::Event(EventDimension::Goal))
        {
            return Err(StatsError::Invalid(
                "conversion_rate needs the event:goal dimension or a filter on event:goal".into(),
            ));
        }
        let mut keys = Vec::with_capacity(order_by.len());
        for (name, desc) in &order_by {
            let key = match (Metric::parse(name), dimensions.iter().position(|d| d == name)) {
                (Some(m), _) if metrics.contains(&m) => OrderKey::Metric(m),
                (_, Some(i)) => OrderKey::Dimension(parsed[i].clone()),
                _ => {
                    return Err(StatsError::Invalid(format!(
                        "cannot order by `{name}`: it is not a queried metric or dimension"
                    )));
                }
            };
            keys.push((key, *desc));
        }
        Ok(Query {
            site_id: site_id.into(),
            metrics,
            range,
            dimensions: parsed,
            filters,
            order_by: keys,
            limit,
            offset,
            include_imports: false,
        })
    }

    /// The names of its dimensions, as the Stats API spells them (and answers echo them).
    pub fn dimension_names(&self) -> Vec<String> {
        self.dimensions.iter().map(|d| d.name().into_owned()).collect()
    }
}
