//! Funnels: the visitors who completed a list of goals in order within one visit, step by step,
//! read from the event blocks of the range ([`super::scan::funnel_day`]).

use std::sync::Arc;

use futures::StreamExt;

use super::{Filter, Stats, StatsError, check_filters, check_range, scan};
use crate::period::DateRange;

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

impl Stats {
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
        let mut reached: Vec<hashbrown::HashSet<u64>> = vec![Default::default(); steps.len()];
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
}
