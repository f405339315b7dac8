//! Comparisons: a query answered again over another date range (the previous period, the same
//! dates a year before, or dates of the caller's choice), each row paired with the other
//! range's row for the same breakdown value and the change between them.
//!
//! A row's comparison is looked up among **every** row of the comparison query, not only its
//! page, so the tenth page of a breakdown still finds its values. In a time series the buckets
//! are paired by position (the first day with the comparison's first day, and so on), and every
//! bucket of the range gets a row, zero where nothing happened, so the two series line up.
//!
//! The change follows Plausible's definitions, so numbers compare: for rates given in percent
//! (`bounce_rate`, `conversion_rate`) it is the difference in percentage points; for every
//! other metric the percent change rounded to a whole number, 100 when the comparison is 0 and
//! the value is not, 0 when both are.

use std::collections::HashMap;

use jiff::ToSpan;

use super::{Metric, Query, Row, Stats, StatsError, Value, time_label};
use crate::period::{DateRange, Unit};

/// Which range a query is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComparisonMode {
    /// The range of the same length just before; with `match_day_of_week`, moved to start on
    /// the nearest day of the range's first weekday (other than the range's own first day).
    PreviousPeriod {
        /// Whether to start on the range's first weekday.
        match_day_of_week: bool,
    },
    /// The same dates a year before (29 February becomes the 28th); with `match_day_of_week`,
    /// moved as [`ComparisonMode::PreviousPeriod`] is.
    YearOverYear {
        /// Whether to start on the range's first weekday.
        match_day_of_week: bool,
    },
    /// Dates of the caller's choice.
    Custom(DateRange),
}

impl ComparisonMode {
    /// The range `range` is compared with.
    pub fn range_for(&self, range: &DateRange) -> Result<DateRange, StatsError> {
        let invalid = |e: &dyn std::fmt::Display| StatsError::Invalid(format!("comparison date range: {e}"));
        let (compared, matching) = match self {
            ComparisonMode::PreviousPeriod { match_day_of_week } => {
                (range.previous_period().map_err(|e| invalid(&e))?, *match_day_of_week)
            }
            ComparisonMode::YearOverYear { match_day_of_week } => {
                let back = |d: jiff::civil::Date| d.checked_sub(1.year()).map_err(|e| invalid(&e));
                (
                    DateRange::new(back(range.first())?, back(range.last())?).map_err(|e| invalid(&e))?,
                    *match_day_of_week,
                )
            }
            ComparisonMode::Custom(r) => (*r, false),
        };
        let compared = if matching {
            // The nearest day, before or after, on the range's first weekday; never the range's
            // own first day (a previous period that ends the day before would become the range).
            let weekday = range.first().weekday();
            let from = compared.first();
            let candidates = (-6i64..=6).filter_map(|d| from.checked_add(d.days()).ok().map(|c| (d, c)));
            let shift = candidates
                .filter(|(_, c)| c.weekday() == weekday && *c != range.first())
                .min_by_key(|(d, _)| d.abs())
                .map_or(0, |(d, _)| d);
            let moved = |x: jiff::civil::Date| x.checked_add(shift.days()).map_err(|e| invalid(&e));
            DateRange::new(moved(compared.first())?, moved(compared.last())?).map_err(|e| invalid(&e))?
        } else {
            compared
        };
        super::check_range(&compared)?;
        Ok(compared)
    }
}

/// One row's comparison: the other range's row for the same breakdown value (zeros when it
/// had none) and the change of each metric (`None` where it has no meaning).
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The comparison row's dimensions: the same breakdown value, its own time bucket.
    pub dimensions: Vec<String>,
    /// Its metrics, in query order.
    pub metrics: Vec<Value>,
    /// The change of each metric from the comparison to the row.
    pub change: Vec<Option<f64>>,
}

/// A query's page of rows, each with its comparison, and the range compared with.
#[derive(Debug, Clone, PartialEq)]
pub struct Compared {
    /// The rows of the page with their comparisons.
    pub rows: Vec<(Row, Comparison)>,
    /// The comparison's dates.
    pub range: DateRange,
}

fn number(v: Value) -> f64 {
    match v {
        Value::Int(i) => i as f64,
        Value::Float(f) => f,
    }
}

fn zero(m: Metric) -> Value {
    match m {
        Metric::ViewsPerVisit | Metric::ConversionRate => Value::Float(0.0),
        _ => Value::Int(0),
    }
}

/// The change of `metric` from `before` to `now`, as Plausible reports it.
pub fn change(metric: Metric, now: Value, before: Value) -> Option<f64> {
    let (now, before) = (number(now), number(before));
    Some(match metric {
        Metric::BounceRate => (now - before).round(),
        Metric::ConversionRate => ((now - before) * 10.0).round() / 10.0,
        _ if before == 0.0 => {
            if now == 0.0 {
                0.0
            } else {
                100.0
            }
        }
        _ => ((now - before) / before * 100.0).round(),
    })
}

impl Stats {
    /// The time labels of every bucket of `range` in a `unit` series, in order, as answers
    /// write them (at most [`super::MAX_QUERY_BUCKETS`] of the hours or days they start from).
    pub async fn time_labels(&self, site_id: &str, range: &DateRange, unit: Unit) -> Result<Vec<String>, StatsError> {
        let (zone, _) = self.zone_and_weeks(site_id).await?;
        let (start, end) = zone.bounds_ms(range).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let step = if unit == Unit::Hour { Unit::Hour } else { Unit::Day };
        let buckets = zone.buckets(step, start, end).map_err(|e| StatsError::Invalid(e.to_string()))?;
        let mut out: Vec<String> = Vec::new();
        for b in buckets.take(super::MAX_QUERY_BUCKETS + 1) {
            let label = time_label(&zone, unit, &b);
            if out.last() != Some(&label) {
                out.push(label);
            }
        }
        Ok(out)
    }

    /// Answers `q` and the same query over the range `mode` names: `q`'s page of rows, each
    /// with its comparison.
    pub async fn query_compared(&self, q: &Query, mode: ComparisonMode) -> Result<Compared, StatsError> {
        let compared_range = mode.range_for(&q.range)?;
        let mut other = q.clone();
        other.range = compared_range;
        let time = q.dimensions.iter().position(|d| d.time_unit().is_some());
        let mut rows = self.all_rows(q).await?;
        let before = self.all_rows(&other).await?;
        // Bucket i of the range is compared with bucket i of the comparison's.
        let mut to_compared: HashMap<String, String> = HashMap::new();
        if let Some(t) = time {
            let unit = q.dimensions[t].time_unit().unwrap_or(Unit::Day);
            let labels = self.time_labels(&q.site_id, &q.range, unit).await?;
            let compared_labels = self.time_labels(&q.site_id, &compared_range, unit).await?;
            if q.dimensions.len() == 1 {
                // A series with no other breakdown: every bucket gets a row, so both line up.
                let present: std::collections::HashSet<String> = rows.iter().map(|r| r.dimensions[t].clone()).collect();
                for label in &labels {
                    if !present.contains(label) {
                        rows.push(Row {
                            dimensions: vec![label.clone()],
                            metrics: q.metrics.iter().map(|m| zero(*m)).collect(),
                        });
                    }
                }
                super::order(&mut rows, q);
            }
            for (i, label) in labels.into_iter().enumerate() {
                if let Some(c) = compared_labels.get(i) {
                    to_compared.insert(label, c.clone());
                }
            }
        }
        let by_dimensions: HashMap<&[String], &Row> = before.iter().map(|r| (r.dimensions.as_slice(), r)).collect();
        let page = rows
            .into_iter()
            .skip(q.offset)
            .take(q.limit)
            .map(|row| {
                let mut dimensions = row.dimensions.clone();
                if let Some(t) = time {
                    dimensions[t] = to_compared.get(&dimensions[t]).cloned().unwrap_or_default();
                }
                let metrics: Vec<Value> = match by_dimensions.get(dimensions.as_slice()) {
                    Some(r) => r.metrics.clone(),
                    None => q.metrics.iter().map(|m| zero(*m)).collect(),
                };
                let change = q
                    .metrics
                    .iter()
                    .zip(row.metrics.iter().zip(&metrics))
                    .map(|(m, (now, before))| change(*m, *now, *before))
                    .collect();
                (row, Comparison { dimensions, metrics, change })
            })
            .collect();
        Ok(Compared { rows: page, range: compared_range })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(s: &str) -> jiff::civil::Date {
        s.parse().unwrap()
    }

    #[test]
    fn comparison_ranges() {
        let r = DateRange::new(date("2024-03-01"), date("2024-03-07")).unwrap();
        let previous = ComparisonMode::PreviousPeriod { match_day_of_week: false };
        let prev = previous.range_for(&r).unwrap();
        assert_eq!(prev.to_string(), "2024-02-23..2024-02-29");
        let leap = DateRange::new(date("2024-02-29"), date("2024-02-29")).unwrap();
        let yoy = ComparisonMode::YearOverYear { match_day_of_week: false };
        assert_eq!(yoy.range_for(&leap).unwrap().to_string(), "2023-02-28..2023-02-28");
        // Matching weekdays: Friday 1 March 2024; a year before it was a Wednesday, so the
        // comparison starts on the nearest Friday, 3 March 2023.
        let yoy_days = ComparisonMode::YearOverYear { match_day_of_week: true };
        assert_eq!(yoy_days.range_for(&r).unwrap().to_string(), "2023-03-03..2023-03-09");
        // A week's previous period already starts on its weekday.
        let previous_days = ComparisonMode::PreviousPeriod { match_day_of_week: true };
        assert_eq!(previous_days.range_for(&r).unwrap().to_string(), "2024-02-23..2024-02-29");
        // Ten days from Friday 1 March: the previous period starts on Tuesday 20 February, the
        // nearest Friday is the 23rd.
        let ten = DateRange::new(date("2024-03-01"), date("2024-03-10")).unwrap();
        assert_eq!(previous_days.range_for(&ten).unwrap().to_string(), "2024-02-23..2024-03-03");
    }

    #[test]
    fn changes_as_plausible_reports_them() {
        let v = Value::Int;
        assert_eq!(change(Metric::Visitors, v(15), v(10)), Some(50.0));
        assert_eq!(change(Metric::Visitors, v(5), v(0)), Some(100.0));
        assert_eq!(change(Metric::Visitors, v(0), v(0)), Some(0.0));
        assert_eq!(change(Metric::Visitors, v(1), v(3)), Some(-67.0));
        assert_eq!(change(Metric::BounceRate, v(40), v(55)), Some(-15.0));
        assert_eq!(change(Metric::ConversionRate, Value::Float(12.5), Value::Float(10.04)), Some(2.5));
    }
}
