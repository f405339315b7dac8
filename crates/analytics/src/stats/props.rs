//! The custom property keys a site's events carry over a range, for the dashboard's key picker
//! (the properties breakdown needs a key, `event:props:{key}`, and a site's keys are its own).
//!
//! Aggregate items are found by their dimension, not listed by it, so the keys are read from the
//! event blocks of the range: only the time, name and properties columns, each block's property
//! dictionary counted once per row. Bounded like every raw read, by the time budget and the
//! site's raw-event retention.

use std::collections::HashMap;

use futures::StreamExt;

use super::{Stats, StatsError, check_range};
use crate::block::{Col, Cols};
use crate::period::DateRange;

/// The most keys [`Stats::property_keys`] lists.
pub const MAX_PROPERTY_KEYS: usize = 100;

impl Stats {
    /// The property keys of the site's events (engagement events aside: their properties are
    /// measurements, not the site's) in `range`, with how many events carry each, most first,
    /// at most [`MAX_PROPERTY_KEYS`].
    pub async fn property_keys(&self, site_id: &str, range: &DateRange) -> Result<Vec<(String, u64)>, StatsError> {
        check_range(range)?;
        let (zone, _) = self.zone_and_weeks(site_id).await?;
        let (start, end) = zone.bounds_ms(range).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let (first, last) = self.check_raw(site_id, (start, end)).await?;
        let deadline = self.deadline();
        let cols = Cols::NONE.with(Col::Ts).with(Col::Name).with(Col::Props);
        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut days = crate::event_store::blocks_of_days(&self.table, site_id, first, last, false);
        while let Some(day) = days.next().await {
            let (_, blocks) = day?;
            for b in blocks {
                let block = b.read(cols)?;
                let mut per_key = vec![0u64; block.props.values.len()];
                for i in 0..block.len {
                    if !(start..end).contains(&block.ts[i]) || block.name.get(i) == crate::stored::ENGAGEMENT {
                        continue;
                    }
                    for &(k, _) in block.props.row_ids(i) {
                        per_key[k as usize] += 1;
                    }
                }
                for (k, n) in per_key.into_iter().enumerate().filter(|(_, n)| *n > 0) {
                    *counts.entry(block.props.values[k].clone()).or_default() += n;
                }
            }
            deadline.check()?;
        }
        let mut keys: Vec<(String, u64)> = counts.into_iter().collect();
        keys.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        keys.truncate(MAX_PROPERTY_KEYS);
        Ok(keys)
    }
}
