//! The Stats API's fixed-shape answers ([`crate::stats`]), declared: realtime, funnels,
//! journeys, property keys and imports. (`POST /api/v2/query` echoes the query it was sent, so
//! its answer is built from the body it read.)

use analytics::stats::{FunnelStep, Realtime};
use serde::Serialize;

use crate::wire::import::Refusals;

/// The answer of `GET /api/realtime`: the last 30 minutes.
#[derive(Debug, Serialize)]
pub struct RealtimeView<'a> {
    /// Visitors seen in the last minutes.
    pub current_visitors: u64,
    /// Page views per minute.
    pub pageviews_per_minute: Vec<MinuteView>,
    /// The most viewed pages.
    pub top_pages: Vec<TopPage<'a>>,
}

/// Page views in one minute.
#[derive(Debug, Serialize)]
pub struct MinuteView {
    /// The minute, RFC 3339.
    pub minute: String,
    /// Page views in it.
    pub pageviews: i64,
}

/// A page of the realtime panel.
#[derive(Debug, Serialize)]
pub struct TopPage<'a> {
    /// The page's path.
    pub page: &'a str,
    /// Its visitors.
    pub visitors: u64,
    /// Its page views.
    pub pageviews: i64,
}

impl<'a> RealtimeView<'a> {
    /// `rt` as answered.
    pub fn new(rt: &'a Realtime) -> Self {
        RealtimeView {
            current_visitors: rt.current_visitors,
            pageviews_per_minute: rt
                .pageviews_per_minute
                .iter()
                .map(|(ms, n)| MinuteView {
                    minute: jiff::Timestamp::from_millisecond(*ms).map(|t| t.to_string()).unwrap_or_default(),
                    pageviews: *n,
                })
                .collect(),
            top_pages: rt.top_pages.iter().map(|(p, v, n)| TopPage { page: p, visitors: *v, pageviews: *n }).collect(),
        }
    }
}

/// One step of a funnel, as Plausible's funnels report it.
#[derive(Debug, Serialize)]
pub struct FunnelStepView<'a> {
    /// The step's name.
    pub step: &'a str,
    /// The visitors who did it and every step before it.
    pub visitors: u64,
    /// Their share of the first step's visitors.
    pub conversion_rate: f64,
    /// Their share of the step before's.
    pub conversion_rate_step: f64,
    /// The visitors of the step before who did not do this one.
    pub dropoff: u64,
    /// Their share of the step before's visitors.
    pub dropoff_percentage: f64,
}

impl<'a> FunnelStepView<'a> {
    /// The steps of a funnel: each step's rates against the step before (the first step's
    /// against itself).
    pub fn steps(result: &'a [FunnelStep]) -> Vec<Self> {
        let mut previous = result.first().map_or(0, |s| s.visitors);
        result
            .iter()
            .map(|s| {
                let step = analytics::goal::conversion_rate(s.visitors, previous).percent(2);
                let lost = analytics::goal::conversion_rate(s.dropoff, previous).percent(2);
                previous = s.visitors;
                FunnelStepView {
                    step: &s.name,
                    visitors: s.visitors,
                    conversion_rate: s.conversion_rate,
                    conversion_rate_step: step,
                    dropoff: s.dropoff,
                    dropoff_percentage: lost,
                }
            })
            .collect()
    }
}

/// A page and its visitors.
#[derive(Debug, Serialize)]
pub struct PageVisitors<'a> {
    /// The page's path.
    pub page: &'a str,
    /// Its visitors.
    pub visitors: u64,
}

/// A path of pages and its visitors.
#[derive(Debug, Serialize)]
pub struct PathVisitors<'a> {
    /// The pages, in order.
    pub pages: &'a [String],
    /// The visitors who took it.
    pub visitors: u64,
}

/// The answer of `POST /api/journeys`.
#[derive(Debug, Serialize)]
pub struct JourneysView<'a> {
    /// The page asked about.
    pub page: &'a str,
    /// The pages viewed just before it.
    pub before: Vec<PageVisitors<'a>>,
    /// The pages viewed just after it.
    pub after: Vec<PageVisitors<'a>>,
    /// The most common paths from it.
    pub paths: Vec<PathVisitors<'a>>,
}

impl<'a> JourneysView<'a> {
    /// The journeys `j` through `page`.
    pub fn new(page: &'a str, j: &'a analytics::stats::Journeys) -> Self {
        let list =
            |rows: &'a [(String, u64)]| rows.iter().map(|(p, v)| PageVisitors { page: p, visitors: *v }).collect();
        JourneysView {
            page,
            before: list(&j.before),
            after: list(&j.after),
            paths: j.paths.iter().map(|(p, v)| PathVisitors { pages: p, visitors: *v }).collect(),
        }
    }
}

/// A custom property key and how many events carry it.
#[derive(Debug, Serialize)]
pub struct KeyEvents<'a> {
    /// The key.
    pub key: &'a str,
    /// Events with it.
    pub events: u64,
}

/// A refused import line.
#[derive(Debug, Serialize)]
pub struct LineError<'a> {
    /// Its line number.
    pub line: usize,
    /// Why it was refused.
    pub error: &'a str,
}

/// The answer of `POST /api/import`.
#[derive(Debug, Serialize)]
pub struct ImportReport<'a> {
    /// Events stored.
    pub imported: u64,
    /// Events dropped on purpose (bots, excluded addresses).
    pub dropped: u64,
    /// The first refused lines.
    pub errors: Vec<LineError<'a>>,
    /// How many lines were refused.
    pub errors_total: u64,
    /// How many refused lines are counted but not listed.
    pub errors_omitted: u64,
}

impl<'a> ImportReport<'a> {
    /// The report of an import that stored `imported`, dropped `dropped` and refused `errors`.
    pub fn new(imported: u64, dropped: u64, errors: &'a Refusals) -> Self {
        ImportReport {
            imported,
            dropped,
            errors: errors.reported().iter().map(|(line, error)| LineError { line: *line, error }).collect(),
            errors_total: errors.total(),
            errors_omitted: errors.omitted(),
        }
    }
}
