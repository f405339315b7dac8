//! The answer of `POST /api/v2/query`, declared: its `results` rows, its `meta`, and the query
//! it echoes ([`QueryEcho`]). Each row is made here from the `analytics` values: the query
//! engine's [`Row`] and [`Comparison`], and for the metrics read apart from the engine
//! (engagement's and revenue's, [`Paired`]) the values the route looked up, merged into the
//! engine's in the order the metrics were asked for.
//!
//! A metric's value is an integer, a float, a mean the engagement events measured, an amount of
//! money or `null` ([`MetricValue`]), written as the JSON number or object it stands for: counts
//! stay integers, a ratio is a float (`5.0` stays `5.0`), and a float that is not finite is
//! `null`.

use analytics::stats::{Comparison, Row, Value};
use serde::Serialize;
use store::Number;

use crate::wire::stats::QueryEcho;

/// The answer of `POST /api/v2/query`.
#[derive(Debug, Serialize)]
pub struct QueryAnswer<'a> {
    /// The rows, in the query's order.
    pub results: Vec<ResultRow<'a>>,
    /// What the answer says about itself (whether imported history is in it).
    pub meta: Meta,
    /// The query as it was read.
    pub query: QueryEcho<'a>,
}

/// One row of an answer.
#[derive(Debug, Serialize)]
pub struct ResultRow<'a> {
    /// The metrics, in the asked order.
    pub metrics: Vec<MetricValue>,
    /// The breakdown values, in the query's order.
    pub dimensions: &'a [String],
    /// The compared range's row, when the query asked for a comparison.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<ComparedRow<'a>>,
}

/// A row's counterpart in the compared range, and the change of each metric.
#[derive(Debug, Serialize)]
pub struct ComparedRow<'a> {
    /// Its metrics, in the asked order.
    pub metrics: Vec<MetricValue>,
    /// Its breakdown values: the same breakdown value, its own time bucket.
    pub dimensions: &'a [String],
    /// The change of each metric, in the asked order (`null` where it has no meaning).
    pub change: Vec<Option<f64>>,
}

/// One metric's value in a row.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MetricValue {
    /// A count of the query engine.
    Int(i64),
    /// A ratio of the query engine, rounded.
    Float(f64),
    /// A mean the engagement events measured: a scroll depth in percent, or seconds.
    Measured(u64),
    /// Revenue.
    Money(Money),
    /// Nothing measured it.
    #[default]
    Null,
}

/// A money value as Plausible's Stats API gives one (`value`, `currency`), with the exact
/// decimal beside it (`amount`): `value` is a JSON number for Plausible's clients, `amount` is
/// the sum as Tally counted it, to the last digit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Money {
    /// The amount as a JSON number, approximate.
    pub value: f64,
    /// The amount as decimal text, exact.
    pub amount: String,
    /// The ISO 4217 currency.
    pub currency: String,
}

impl From<&Value> for MetricValue {
    fn from(v: &Value) -> Self {
        match *v {
            Value::Int(i) => MetricValue::Int(i),
            Value::Float(f) => MetricValue::Float(f),
        }
    }
}

impl MetricValue {
    /// A mean the engagement events measured, `null` when none did.
    pub fn measured(mean: Option<u64>) -> Self {
        mean.map_or(MetricValue::Null, MetricValue::Measured)
    }

    /// An amount of `currency`, `null` when there is none.
    pub fn money(amount: Option<Number>, currency: &str) -> Self {
        match amount {
            Some(n) => {
                MetricValue::Money(Money { value: n.to_f64(), amount: n.to_string(), currency: currency.into() })
            }
            None => MetricValue::Null,
        }
    }

    /// The query engine's values as answered.
    fn all(values: &[Value]) -> Vec<Self> {
        values.iter().map(MetricValue::from).collect()
    }
}

impl<'a> ResultRow<'a> {
    /// A row of the query engine.
    pub fn new(row: &'a Row) -> Self {
        ResultRow { metrics: MetricValue::all(&row.metrics), dimensions: &row.dimensions, comparison: None }
    }

    /// A row of the query engine with its comparison.
    pub fn compared(row: &'a Row, c: &'a Comparison) -> Self {
        let comparison =
            ComparedRow { metrics: MetricValue::all(&c.metrics), dimensions: &c.dimensions, change: c.change.clone() };
        ResultRow { comparison: Some(comparison), ..ResultRow::new(row) }
    }
}

/// The metrics of a query read apart from the query engine (engagement's or revenue's), and the
/// metrics asked for: merges the values looked up for the first into the engine's rows, which
/// hold the others in turn.
#[derive(Debug, Clone, Copy)]
pub struct Paired<'a> {
    /// The metrics asked for, in order.
    pub asked: &'a [String],
    /// The metrics read apart from the engine.
    pub names: [&'a str; 2],
}

impl<'a> Paired<'a> {
    /// The values in the asked order: `engine`'s in turn (the default when it runs out), and
    /// `read`'s for the paired metrics.
    fn in_asked_order<T: Default>(&self, mut engine: impl Iterator<Item = T>, read: impl Fn(&str) -> T) -> Vec<T> {
        self.asked
            .iter()
            .map(|m| if self.names.contains(&m.as_str()) { read(m) } else { engine.next().unwrap_or_default() })
            .collect()
    }

    /// The engine's `row`, with `now` read for the paired metrics.
    pub fn row(&self, row: &'a Row, now: impl Fn(&str) -> MetricValue) -> ResultRow<'a> {
        let metrics = self.in_asked_order(row.metrics.iter().map(MetricValue::from), now);
        ResultRow { metrics, dimensions: &row.dimensions, comparison: None }
    }

    /// The engine's `row` and its comparison `c`, with `now`, `before` and `change` read for
    /// the paired metrics.
    pub fn compared(
        &self,
        (row, c): (&'a Row, &'a Comparison),
        now: impl Fn(&str) -> MetricValue,
        before: impl Fn(&str) -> MetricValue,
        change: impl Fn(&str) -> Option<f64>,
    ) -> ResultRow<'a> {
        let comparison = ComparedRow {
            metrics: self.in_asked_order(c.metrics.iter().map(MetricValue::from), before),
            dimensions: &c.dimensions,
            change: self.in_asked_order(c.change.iter().copied(), change),
        };
        ResultRow { comparison: Some(comparison), ..self.row(row, now) }
    }
}

/// An answer's `meta`: empty unless the query asked for imported history, then whether it is in
/// the answer and, when it is not, why, in Plausible's words.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Meta {
    /// Whether imported history was merged in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imports_included: Option<bool>,
    /// Why it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imports_skip_reason: Option<&'static str>,
}

impl Meta {
    /// The `meta` of a query that asked for imported history or not (`asked`), left out for
    /// `skipped` (`None`: merged in).
    pub fn imports(asked: bool, skipped: Option<&'static str>) -> Self {
        if !asked {
            return Meta::default();
        }
        Meta { imports_included: Some(skipped.is_none()), imports_skip_reason: skipped }
    }
}
