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
//!
//! The module holds [`Stats`] and what every kind of read shares (the aggregate items of one
//! dimension, the site's zone, the time budget); each kind of query lives in a module of its own:
//! the query types and their checks (`query`), the aggregate query path (`plan`), the raw-event
//! reads under a time budget (`raw`, over the block scan of `scan`), realtime, funnels, sessions
//! and visitors, exports, and the engagement, revenue, journeys, property-key and comparison
//! reads.

use std::sync::Arc;

use model::Table;
use store::item;

mod compare;
mod engagement;
mod export;
mod funnel;
mod journeys;
mod plan;
mod props;
mod query;
mod raw;
mod realtime;
mod revenue;
mod scan;
mod sessions;
#[cfg(test)]
mod tests;

pub use compare::{Compared, Comparison, ComparisonMode, change};
pub use engagement::Engagement;
pub use export::DayItem;
pub use funnel::{FunnelStep, MAX_FUNNEL_STEPS, MIN_FUNNEL_STEPS};
pub use journeys::{ENTRANCE, EXIT, Journeys, MAX_JOURNEY_ROWS};
pub use props::MAX_PROPERTY_KEYS;
pub use query::{
    Filter, FilterOp, MAX_FILTER_VALUES, MAX_FILTERS, MAX_PAGE_ROWS, MAX_PATTERN_LEN, MAX_QUERY_BUCKETS,
    MAX_QUERY_ROWS, Metric, OrderKey, QUERY_YEARS, Query, Row, StatsError, Value, check_filters, check_range,
    compile_pattern,
};
pub use realtime::Realtime;
pub use revenue::{GoalRevenue, RevenueGoal, mean_to_cents};
pub use sessions::{SessionSummary, parse_visitor};

use plan::{order, time_label};

use crate::aggregate::{SiteSettingsSource, StoredAggregate};
use crate::dimension::{Dimension, VisitDimension};
use crate::period::SiteZone;
use crate::sketch::VisitorSketch;
use crate::stored::{Counters, Period};

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

/// The exit page: the one visit dimension the session's state tells (the previous states)
/// rather than its attributes, and whose visitors are its visits.
const EXIT_PAGE: Dimension = Dimension::Visit(VisitDimension::ExitPage);

/// A stored value of `dimension` as answers show it: the empty source or referrer is
/// `Direct / None`; `None` for an empty value of any other dimension (a row not shown).
fn display_value(dimension: &Dimension, value: &str) -> Option<String> {
    if !value.is_empty() {
        return Some(value.to_owned());
    }
    matches!(dimension, Dimension::Visit(VisitDimension::Source | VisitDimension::Referrer))
        .then(|| "Direct / None".to_owned())
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

/// Partitions the raw-event reads (filtered queries, funnels, recent sessions, exports) read
/// at once: on DynamoDB each is a round trip, so one at a time would leave the time to latency.
pub const PARALLEL_READS: usize = 16;
