//! The last 30 minutes: the realtime panel (from the minute items, or from the event blocks
//! under filters) and queries over those minutes.

use std::collections::{BTreeMap, HashMap};

use super::{EXIT_PAGE, Filter, Query, Row, Stats, StatsError, Sum, check_filters, display_value, order, plan::row_of};
use crate::dimension::{Dimension, EventDimension};
use crate::sketch::VisitorSketch;
use crate::stored::{Period, TOTAL, minute_label};

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

impl Stats {
    /// Answers `q` over the last 30 minutes before `now_ms` (its `range` is not read), from the
    /// event blocks of those minutes: visitors, page views and events of the events in them,
    /// visits (and their bounce rate, duration, views) of the visits that started in them.
    /// Every dimension and filter a query takes, no time dimension (minutes are
    /// [`Stats::realtime_filtered`]'s).
    pub async fn query_realtime(&self, q: &Query, now_ms: i64) -> Result<Vec<Row>, StatsError> {
        if q.dimensions.iter().any(|d| d.time_unit().is_some()) {
            return Err(StatsError::Invalid(
                "the last 30 minutes take no time dimension; GET /api/realtime has page views per minute".into(),
            ));
        }
        let this_minute = now_ms.div_euclid(60_000);
        let (start, end) = ((this_minute - 29) * 60_000, (this_minute + 1) * 60_000);
        let partitions = self.check_raw(&q.site_id, (start, end)).await?;
        let breakdown = q.dimensions.first();
        let source = breakdown.cloned().unwrap_or(Dimension::Total);
        let visits = q.metrics.iter().any(|m| m.is_session_metric()) || source == EXIT_PAGE;
        // The 30 minutes are one group.
        let raw = self.raw_sums(&q.site_id, partitions, &q.filters, &source, visits, vec![(start, end, 0)]).await?;
        let labels = [String::new()];
        let mut sums: BTreeMap<String, Sum> = BTreeMap::new();
        let mut total = VisitorSketch::new();
        for sum in raw.labelled(&Dimension::Total, &labels).values() {
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
        let page = Dimension::Event(EventDimension::Page);
        let raw = self.raw_sums(site_id, partitions, filters, &page, false, minutes).await?;
        let items = |dimension: &Dimension| -> Vec<(String, String, Sum)> {
            raw.labelled(dimension, &labels).into_iter().map(|((label, value), sum)| (label, value, sum)).collect()
        };
        Ok(realtime_of(this_minute, items(&Dimension::Total), items(&page)))
    }
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
