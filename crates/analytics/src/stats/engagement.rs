//! Engagement per page, with Plausible's definitions so the numbers compare:
//! - **scroll depth** of a page: the mean, over the visitors who sent engagement for it, of the
//!   deepest each scrolled (percent, rounded);
//! - **time on page**: the engaged time all visitors spent on it, over those visitors (seconds,
//!   rounded).
//!
//! Both come from the `engagement` events the trackers send when a page is left or hidden —
//! Tally's with `scroll_depth` and `engaged_ms` properties, Plausible's with `sd` and `e`, which
//! ingestion stores under the same names — read from the event blocks of the range (time, name,
//! path, sessions and properties columns only). For the whole site they are the same means over
//! every (visitor, page) pair. Filters may name the page only: engagement events carry no other
//! event dimension, and their visits' dimensions would be another read.

use std::collections::HashMap;

use futures::StreamExt;

use super::{Filter, Stats, StatsError, check_range};
use crate::block::{Col, Cols};
use crate::dimension::{Dimension, EventDimension};
use crate::period::DateRange;

/// One page's (or the site's) engagement; `None` where no engagement event said it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Engagement {
    /// Mean deepest scroll, percent.
    pub scroll_depth: Option<u64>,
    /// Mean engaged time per visitor, seconds.
    pub time_on_page: Option<u64>,
}

/// Per (visitor, page): the deepest scroll seen and the engaged milliseconds summed.
#[derive(Default)]
struct Seen {
    depth: Option<u64>,
    engaged_ms: Option<u64>,
}

#[derive(Default)]
struct Means {
    depth_sum: u64,
    depth_n: u64,
    engaged_sum: u64,
    engaged_n: u64,
}

impl Means {
    fn add(&mut self, s: &Seen) {
        if let Some(d) = s.depth {
            self.depth_sum += d;
            self.depth_n += 1;
        }
        if let Some(e) = s.engaged_ms {
            self.engaged_sum += e;
            self.engaged_n += 1;
        }
    }

    fn engagement(&self) -> Engagement {
        let mean = |sum: u64, n: u64, unit: u64| (n > 0).then(|| (sum as f64 / n as f64 / unit as f64).round() as u64);
        Engagement {
            scroll_depth: mean(self.depth_sum, self.depth_n, 1),
            time_on_page: mean(self.engaged_sum, self.engaged_n, 1000),
        }
    }
}

impl Stats {
    /// Engagement per page path and for the whole site over `range`, of the pages `filters`
    /// (on `event:page` only) select.
    pub async fn engagement(
        &self,
        site_id: &str,
        range: &DateRange,
        filters: &[Filter],
    ) -> Result<(HashMap<String, Engagement>, Engagement), StatsError> {
        check_range(range)?;
        if let Some(f) = filters.iter().find(|f| f.dimension != Dimension::Event(EventDimension::Page)) {
            return Err(StatsError::Invalid(format!(
                "scroll_depth and time_on_page take filters on event:page only, not on {}",
                f.dimension
            )));
        }
        let (zone, _) = self.zone_and_weeks(site_id).await?;
        let (start, end) = zone.bounds_ms(range).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let (first, last) = self.check_raw(site_id, (start, end)).await?;
        let deadline = self.deadline();
        let cols = Cols::NONE
            .with(Col::Sessions)
            .with(Col::Session)
            .with(Col::Ts)
            .with(Col::Name)
            .with(Col::Path)
            .with(Col::Props);
        let mut seen: HashMap<(u64, String), Seen> = HashMap::new();
        let mut days = crate::event_store::blocks_of_days(&self.table, site_id, first, last, false);
        while let Some(day) = days.next().await {
            let (_, blocks) = day?;
            for b in blocks {
                let block = b.read(cols)?;
                let pages: Vec<bool> =
                    block.path.matching(|p| filters.iter().all(|f| f.accepts(&crate::key_bound::bound_value(p))));
                for i in 0..block.len {
                    if block.name.get(i) != crate::stored::ENGAGEMENT
                        || !(start..end).contains(&block.ts[i])
                        || !pages[block.path.rows[i] as usize]
                    {
                        continue;
                    }
                    let visitor = block.sessions[block.session[i] as usize].visitor;
                    let s = seen.entry((visitor, block.path.get(i).to_owned())).or_default();
                    for (k, v) in block.props.row(i) {
                        let Ok(n) = v.trim().parse::<f64>() else { continue };
                        if !n.is_finite() || n < 0.0 {
                            continue;
                        }
                        match k {
                            "scroll_depth" => s.depth = Some(s.depth.unwrap_or(0).max(n.min(100.0).round() as u64)),
                            // At most a day per event: one wrong clock must not own the mean.
                            "engaged_ms" => s.engaged_ms = Some(s.engaged_ms.unwrap_or(0) + n.min(86_400_000.0) as u64),
                            _ => {}
                        }
                    }
                }
            }
            deadline.check()?;
        }
        let mut pages: HashMap<String, Means> = HashMap::new();
        let mut all = Means::default();
        for ((_, page), s) in &seen {
            pages.entry(page.clone()).or_default().add(s);
            all.add(s);
        }
        Ok((pages.into_iter().map(|(p, m)| (p, m.engagement())).collect(), all.engagement()))
    }
}
