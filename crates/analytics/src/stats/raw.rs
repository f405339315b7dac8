//! Reading raw events under a time budget: whether the site still keeps a range's events, and
//! each day's event blocks read and scanned in a task of its own ([`super::scan`]), the answer
//! refused with [`StatsError::TooSlow`] once the budget is spent.

use std::sync::Arc;

use futures::StreamExt;

use super::{Filter, Stats, StatsError, scan};
use crate::dimension::Dimension;
use crate::period::SiteZone;

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
    pub(super) fn scan_days<T: Send + 'static>(
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

impl Stats {
    /// Whether the raw events of the range `start_ms..end_ms` can answer a query: the site still
    /// keeps every one of them. Returns the UTC day partitions to read: from the day before the
    /// range (for visits that began then) to its last day.
    pub(super) async fn check_raw(
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
    pub(super) async fn raw_sums(
        &self,
        site_id: &str,
        (first, last): (crate::visitor::UtcDay, crate::visitor::UtcDay),
        filters: &[Filter],
        dimension: &Dimension,
        visits: bool,
        buckets: Vec<(i64, i64, u32)>,
    ) -> Result<scan::Sums, StatsError> {
        let deadline = self.deadline();
        let shared = Arc::new((filters.to_vec(), dimension.clone(), buckets));
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
