//! Journeys through one page: within the visits of a range (those the filters select), the
//! pages visitors viewed just before it (or `(entrance)`) and just after it (or `(exit)`), and
//! the most common paths of 2 to 4 pages starting at it, each counted in distinct visitors.
//! A page viewed again at once (a reload) counts once in a path.
//!
//! Read from the event blocks of the range like a funnel ([`super::scan::page_sequences`]),
//! bounded the same way (the site's raw-event retention, [`Stats::time_budget`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;

use super::{Filter, Stats, StatsError, check_filters, check_range, scan};
use crate::period::DateRange;

/// Where a journey through a page came from when it began there.
pub const ENTRANCE: &str = "(entrance)";
/// Where a journey through a page went when it ended there.
pub const EXIT: &str = "(exit)";
/// The most rows each list of [`Journeys`] holds.
pub const MAX_JOURNEY_ROWS: usize = 10;

/// The journeys through one page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journeys {
    /// Pages viewed just before it, with their visitors, most first.
    pub before: Vec<(String, u64)>,
    /// Pages viewed just after it, with their visitors, most first.
    pub after: Vec<(String, u64)>,
    /// Paths of 2 to 4 pages starting at it, with their visitors, most first.
    pub paths: Vec<(Vec<String>, u64)>,
}

fn top<K: Ord + Clone>(counts: HashMap<K, HashSet<u64>>) -> Vec<(K, u64)> {
    let mut list: Vec<(K, u64)> = counts.into_iter().map(|(k, v)| (k, v.len() as u64)).collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    list.truncate(MAX_JOURNEY_ROWS);
    list
}

impl Stats {
    /// The journeys through `page` (a path, compared whole) over `range`.
    pub async fn journeys(
        &self,
        site_id: &str,
        range: &DateRange,
        page: &str,
        filters: &[Filter],
    ) -> Result<Journeys, StatsError> {
        check_range(range)?;
        check_filters(filters)?;
        let (zone, _) = self.zone_and_weeks(site_id).await?;
        let (start, end) = zone.bounds_ms(range).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let (first, last) = self.check_raw(site_id, (start, end)).await?;
        let deadline = self.deadline();
        let filters: Arc<Vec<Filter>> = Arc::new(filters.to_vec());
        let mut days = self.scan_days(
            site_id,
            (first, last),
            Arc::new(move |blocks| scan::page_sequences(&blocks, (start, end), &filters)),
        );
        let mut before: HashMap<String, HashSet<u64>> = HashMap::new();
        let mut after: HashMap<String, HashSet<u64>> = HashMap::new();
        let mut paths: HashMap<Vec<String>, HashSet<u64>> = HashMap::new();
        while let Some(day) = days.next().await {
            for (visitor, pages) in day? {
                for (j, p) in pages.iter().enumerate() {
                    if p != page {
                        continue;
                    }
                    let came = if j == 0 { ENTRANCE } else { pages[j - 1].as_str() };
                    before.entry(came.to_owned()).or_default().insert(visitor);
                    let went = pages.get(j + 1).map_or(EXIT, String::as_str);
                    after.entry(went.to_owned()).or_default().insert(visitor);
                    for k in 2..=4 {
                        if let Some(path) = pages.get(j..j + k) {
                            paths.entry(path.to_vec()).or_default().insert(visitor);
                        }
                    }
                }
            }
            deadline.check()?;
        }
        Ok(Journeys { before: top(before), after: top(after), paths: top(paths) })
    }
}
