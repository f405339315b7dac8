//! What `tally export` reads: every stored event of a range, session by session, and the daily
//! aggregate items of a range.

use futures::StreamExt;

use super::{Stats, StatsError, display_value};
use crate::dimension::{Dimension, EventDimension, VisitDimension};
use crate::period::DateRange;
use crate::stored::{Counters, Period};

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

impl Stats {
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
        let every = std::iter::once(Dimension::Total)
            .chain(EventDimension::ALL.map(Dimension::Event))
            .chain(VisitDimension::ALL.map(Dimension::Visit));
        for dimension in every {
            let name = dimension.name();
            for (bucket, value, sum) in self.read(site_id, Period::Day, &name, &first, &last).await? {
                out.push(DayItem {
                    date: bucket,
                    dimension: name.clone().into_owned(),
                    value: display_value(&dimension, &value).unwrap_or(value),
                    visitors: sum.sketch.estimate(),
                    counters: sum.counters,
                });
            }
        }
        out.sort_by(|a, b| (&a.date, &a.dimension, &a.value).cmp(&(&b.date, &b.dimension, &b.value)));
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
}
