//! Revenue of revenue goals, with Plausible's metric names: `total_revenue` (the sum of the
//! revenue of the events that completed a goal) and `average_revenue` (that sum over the number
//! of those events that carried revenue).
//!
//! A revenue goal counts revenue in its own currency ([`crate::sites::SiteGoal::currency`]).
//! Plausible converts other currencies at the day's exchange rate; Tally keeps no rates and
//! converts nothing, so revenue sent in another currency is left out of the goal's sums rather
//! than counted at a guessed rate.
//!
//! **Exact.** Amounts are summed as exact decimals ([`store::Number`], 38 significant digits);
//! the average is the exact quotient rounded half away from zero to the cent, computed in
//! integers ([`mean_to_cents`]). No `f64` touches an amount.
//!
//! Read from the event blocks of the range (goals, revenue, time and the columns the filters
//! need), within the visits the filters select, as funnels and journeys are
//! ([`super::scan::goal_revenue_day`]).

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use store::Number;

use super::{Filter, Stats, StatsError, check_filters, check_range, scan};
use crate::period::DateRange;

/// A revenue goal: its display name (as events record the goals they complete) and currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevenueGoal {
    /// The goal's display name.
    pub goal: String,
    /// Its currency, upper-case.
    pub currency: String,
}

/// One revenue goal's revenue over a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalRevenue {
    /// The goal's display name.
    pub goal: String,
    /// The ISO 4217 currency the goal's revenue is counted in.
    pub currency: String,
    /// The revenue summed, exact.
    pub total: Number,
    /// How many events completing it carried revenue in its currency.
    pub events: u64,
}

impl GoalRevenue {
    /// The revenue of several goals together when they share one currency (the goal's name
    /// empty); `None` for no goals or a mix of currencies, which Tally does not convert.
    pub fn combined(list: &[&GoalRevenue]) -> Result<Option<GoalRevenue>, StatsError> {
        let Some(first) = list.first() else { return Ok(None) };
        if list.iter().any(|s| s.currency != first.currency) {
            return Ok(None);
        }
        let mut all =
            GoalRevenue { goal: String::new(), currency: first.currency.clone(), total: Number::zero(), events: 0 };
        for s in list {
            all.total =
                all.total.checked_add(&s.total).map_err(|e| StatsError::Corrupt(format!("revenue sum: {e}")))?;
            all.events += s.events;
        }
        Ok(Some(all))
    }

    /// The mean revenue per event, rounded half away from zero to the cent; `None` with no events.
    pub fn average(&self) -> Option<Number> {
        mean_to_cents(&self.total, self.events)
    }
}

/// `total / n` rounded half away from zero to two decimal places, exactly; `None` when `n` is 0
/// or the arithmetic would leave 128-bit integers (a total no real site reaches).
pub fn mean_to_cents(total: &Number, n: u64) -> Option<Number> {
    if n == 0 {
        return None;
    }
    // total = D × 10^(exp − k) with D the k significant digits (at most 38, so D fits in u128).
    let digits = total.digits();
    let d = digits.iter().try_fold(0u128, |acc, &x| acc.checked_mul(10)?.checked_add(u128::from(x)))?;
    let shift = total.exponent() - digits.len() as i32 + 2;
    let (num, den) = if shift >= 0 {
        (d.checked_mul(10u128.checked_pow(shift as u32)?)?, u128::from(n))
    } else {
        match 10u128.checked_pow(shift.unsigned_abs()) {
            Some(p) => (d, u128::from(n).checked_mul(p)?),
            // Far below a cent.
            None => return Some(Number::zero()),
        }
    };
    let cents = num.checked_mul(2)?.checked_add(den)? / den.checked_mul(2)?;
    let sign = if total.is_negative() && cents > 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents / 100, cents % 100).parse().ok()
}

impl Stats {
    /// The revenue of each of `goals` over `range`, within the visits `filters` select, in the
    /// order given (a goal with no revenue has a zero total and no events).
    pub async fn revenue(
        &self,
        site_id: &str,
        range: &DateRange,
        filters: &[Filter],
        goals: &[RevenueGoal],
    ) -> Result<Vec<GoalRevenue>, StatsError> {
        check_range(range)?;
        check_filters(filters)?;
        let mut sums: Vec<GoalRevenue> = goals
            .iter()
            .map(|g| GoalRevenue {
                goal: g.goal.clone(),
                currency: g.currency.clone(),
                total: Number::zero(),
                events: 0,
            })
            .collect();
        if goals.is_empty() {
            return Ok(sums);
        }
        let (zone, _) = self.zone_and_weeks(site_id).await?;
        let (start, end) = zone.bounds_ms(range).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let (first, last) = self.check_raw(site_id, (start, end)).await?;
        let deadline = self.deadline();
        let filters: Arc<Vec<Filter>> = Arc::new(filters.to_vec());
        let wanted: Arc<HashMap<String, (usize, String)>> =
            Arc::new(goals.iter().enumerate().map(|(i, g)| (g.goal.clone(), (i, g.currency.clone()))).collect());
        let mut days = self.scan_days(
            site_id,
            (first, last),
            Arc::new(move |blocks| scan::goal_revenue_day(&blocks, (start, end), &filters, &wanted)),
        );
        while let Some(day) = days.next().await {
            for (i, (total, events)) in day?.into_iter().enumerate() {
                let sum = &mut sums[i];
                sum.total =
                    sum.total.checked_add(&total).map_err(|e| StatsError::Corrupt(format!("revenue sum: {e}")))?;
                sum.events += events;
            }
            deadline.check()?;
        }
        Ok(sums)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> Number {
        text.parse().unwrap()
    }

    #[test]
    fn means_round_half_away_from_zero_to_the_cent() {
        for (total, events, mean) in [
            ("10", 4, "2.5"),
            ("10", 3, "3.33"),
            ("20", 3, "6.67"),
            ("0.005", 1, "0.01"),
            ("0.004", 1, "0"),
            ("-10", 3, "-3.33"),
            ("1234567890123456789.01", 1, "1234567890123456789.01"),
            ("1E-100", 1, "0"),
            ("0", 5, "0"),
        ] {
            assert_eq!(mean_to_cents(&n(total), events), Some(n(mean)), "{total} / {events}");
        }
        assert_eq!(mean_to_cents(&n("5"), 0), None);
    }
}
