//! The reading routes, every one behind a site API key: `POST /api/v2/query` in the shape of
//! Plausible's Stats API v2, `POST /api/funnel`, `GET /api/realtime`,
//! `GET /api/v1/stats/realtime/visitors` (a bare number, as Plausible answers), and the backfill
//! route `POST /api/import` (NDJSON lines or CSV records of
//! events with their own timestamps).
//!
//! A missing, unknown, revoked or other site's key gets `401` with the same message, so a caller
//! learns nothing about which sites exist.

use analytics::dimension::{Dimension, EventDimension};
use analytics::sites::Site;
use analytics::stats::{FilterOp, Metric, Query, Value};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::auth::{Need, authorize};
use crate::error::ServerError;
use crate::extract::UrlQuery;
use crate::state::{AppState, Reading};
use crate::wire::import::Format;
use crate::wire::json_ok;
use crate::wire::query::{Meta, MetricValue, Paired, QueryAnswer, ResultRow};
use crate::wire::sent::Sent;
use crate::wire::stats::{
    Dated, EchoTail, Filters, FunnelAnswer, FunnelBody, FunnelQuery, FunnelStepView, ImportReport, JourneysBody,
    JourneysView, PropertyKeys, QueryBody, QueryEcho, RangeEcho, RangeSent, RealtimeView, days, strings,
};

/// Largest import body accepted.
pub const MAX_IMPORT_BYTES: usize = 10 * 1024 * 1024;

/// Why imported history was left out of an answer that asked for it (`None`: it was merged in),
/// in Plausible's words: the history is daily counts of one dimension.
fn imports_skip_reason(q: &Query) -> Option<&'static str> {
    let breakdown = q.dimensions.iter().find(|d| d.time_unit().is_none()).map(|d| d.name());
    let mut filtered: Vec<_> = q.filters.iter().map(|f| f.dimension.name()).collect();
    filtered.dedup();
    if q.dimensions.iter().any(|d| d.time_unit() == Some(analytics::period::Unit::Hour)) {
        Some("unsupported_interval")
    } else if filtered.iter().any(|f| Some(f.as_ref()) != breakdown.as_deref())
        && !(breakdown.is_none() && filtered.len() == 1)
    {
        Some("unsupported_query")
    } else {
        None
    }
}

/// A JSON body naming a `site_id` the caller may read the statistics of: the reading state,
/// the body read as `B` and the site, or the answer refusing it.
pub(crate) async fn json_request<'a, B: DeserializeOwned + AsRef<Dated>>(
    state: &'a AppState,
    headers: &HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<(&'a Reading, B, Site), ServerError> {
    let r = state.reading()?;
    let body = match body {
        Ok(b) => b,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Err(ServerError::BodyTooLarge { limit: crate::extract::MAX_BODY_BYTES });
        }
        Err(rejection) => return Err(ServerError::bad_request(format!("could not read the body: {rejection}"))),
    };
    let body: B = crate::extract::object_body(&body)?;
    let Some(site_name) = body.as_ref().site_id.value() else {
        return Err(ServerError::bad_request("`site_id` is required"));
    };
    let (_, site) = authorize(r, headers, Some(site_name), Need::Stats).await?;
    Ok((r, body, site))
}

/// `POST /api/funnel {site_id, date_range, steps: [{"page": "/pricing*"} | {"event": "Signup"}], filters}`:
/// of 2 to 8 steps, the visitors who did each step and every one before it, in order, within
/// one visit (of the visits `filters` select, as the Stats API's); answers
/// `{steps: [{step, visitors, conversion_rate, conversion_rate_step, dropoff, dropoff_percentage}],
/// query}`. Read from
/// raw events, so only within the site's raw-event retention.
pub async fn funnel(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ServerError> {
    let (r, body, site) = json_request::<FunnelBody>(&state, &headers, body).await?;
    let range = body.dated.range(&site.zone)?;
    let steps = body.steps.goals()?;
    let filters = body.filters.resolve(&site)?;
    let result = r.stats.funnel_filtered(&site.site_id, &range, &steps, &filters).await?;
    // Per step, also as Plausible's funnels report it: the conversion from the step before and
    // the share of its visitors lost (from the first step's visitors for the first step).
    let steps = FunnelStepView::steps(&result);
    let query =
        FunnelQuery { site_id: body.dated.site_id.value().map_or("", String::as_str), date_range: days(&range) };
    Ok(json_ok(FunnelAnswer { steps, query }))
}

/// The metrics read from engagement events rather than the query engine (`stats::engagement`).
const ENGAGEMENT_METRICS: [&str; 2] = ["scroll_depth", "time_on_page"];

/// The query's dimensions, once its shape suits a pair of metrics read apart from the query
/// engine (engagement's or revenue's): not the last 30 minutes, no dimension but `dimension`,
/// and not ordered by either metric.
fn paired_metrics_shape(body: &QueryBody, [a, b]: [&str; 2], dimension: &str) -> Result<Vec<String>, ServerError> {
    if body.dated.is_realtime() {
        return Err(ServerError::bad_request(format!("{a} and {b} are not measured over the last 30 minutes")));
    }
    let dimensions = strings(&body.dimensions, "dimensions")?;
    if !(dimensions.is_empty() || dimensions == [dimension]) {
        return Err(ServerError::bad_request(format!("{a} and {b} take no dimension or {dimension}")));
    }
    if body.ordered_by().any(|n| n == a || n == b) {
        return Err(ServerError::bad_request(format!("answers cannot be ordered by {a} or {b}")));
    }
    Ok(dimensions)
}

/// The mean `metric` (`scroll_depth` or `time_on_page`) of an engagement, when one was measured.
fn engagement_value(e: Option<&analytics::stats::Engagement>, metric: &str) -> Option<u64> {
    let e = e?;
    if metric == "scroll_depth" { e.scroll_depth } else { e.time_on_page }
}

/// A query naming `scroll_depth` or `time_on_page`, with Plausible's definitions: by page
/// (`event:page`) or for the site, under filters on the page; the other metrics are the query
/// engine's, and comparisons compare both. A metric no engagement event measured is `null`.
async fn engagement_query(
    r: &Reading,
    body: &QueryBody,
    site: &Site,
    asked: &[String],
) -> Result<Response, ServerError> {
    let dimensions = paired_metrics_shape(body, ENGAGEMENT_METRICS, "event:page")?;
    let q = paired_inner_query(body, site, asked, ENGAGEMENT_METRICS)?;
    let by_page = !dimensions.is_empty();
    let lookup = |(pages, all): &(
        std::collections::HashMap<String, analytics::stats::Engagement>,
        analytics::stats::Engagement,
    ),
                  dims: &[String]| {
        if by_page { pages.get(dims.first().map_or("", String::as_str)).copied() } else { Some(*all) }
    };
    let paired = Paired { asked, names: ENGAGEMENT_METRICS };
    let measured =
        |e: Option<analytics::stats::Engagement>| move |m: &str| MetricValue::measured(engagement_value(e.as_ref(), m));
    let now = r.stats.engagement(&site.site_id, &q.range, &q.filters).await.map_err(ServerError::from)?;
    match body.comparison(site)? {
        None => {
            let rows = r.stats.query(&q).await.map_err(ServerError::from)?;
            let results = rows.iter().map(|row| paired.row(row, measured(lookup(&now, &row.dimensions)))).collect();
            Ok(paired_answer(body, &q, asked, results, None))
        }
        Some(mode) => {
            let compared = r.stats.query_compared(&q, mode).await.map_err(ServerError::from)?;
            let before =
                r.stats.engagement(&site.site_id, &compared.range, &q.filters).await.map_err(ServerError::from)?;
            let results = compared
                .rows
                .iter()
                .map(|(row, c)| {
                    let (e_now, e_before) = (lookup(&now, &row.dimensions), lookup(&before, &c.dimensions));
                    let change = |m: &str| {
                        let (a, b) = (engagement_value(e_now.as_ref(), m)?, engagement_value(e_before.as_ref(), m)?);
                        // Scroll depth is a percentage: its change is in points, as a rate's.
                        let metric = if m == "scroll_depth" { Metric::BounceRate } else { Metric::Visitors };
                        analytics::stats::change(metric, Value::Int(a as i64), Value::Int(b as i64))
                    };
                    paired.compared((row, c), measured(e_now), measured(e_before), change)
                })
                .collect();
            Ok(paired_answer(body, &q, asked, results, Some(days(&compared.range))))
        }
    }
}

/// The query of a query body naming metrics read apart from the query engine (`paired`): the
/// body's, for its other metrics (`visitors` when it names no other).
fn paired_inner_query(
    body: &QueryBody,
    site: &Site,
    asked: &[String],
    paired: [&str; 2],
) -> Result<Query, ServerError> {
    let mut others: Vec<String> = asked.iter().filter(|m| !paired.contains(&m.as_str())).cloned().collect();
    if others.is_empty() {
        others.push("visitors".to_owned());
    }
    QueryBody { metrics: Sent::Value(others), ..body.clone() }.query(site)
}

/// The answer of an engagement or revenue query: `results`, an empty `meta`, and the query
/// echoed with the compared range before `include`.
fn paired_answer(
    body: &QueryBody,
    q: &Query,
    asked: &[String],
    results: Vec<ResultRow<'_>>,
    compared_range: Option<[String; 2]>,
) -> Response {
    let mut query = QueryEcho::new(body, q, asked.iter().map(String::as_str).collect());
    query.tail = EchoTail::RangeFirst { comparison_date_range: compared_range, include: body.include.sent.as_ref() };
    json_ok(QueryAnswer { results, meta: Meta::default(), query })
}

/// The metrics read from revenue goals' events rather than the query engine (`stats::revenue`).
const REVENUE_METRICS: [&str; 2] = ["total_revenue", "average_revenue"];

/// The amount `metric` (`total_revenue` or `average_revenue`) of a goal's revenue.
fn revenue_value(s: &analytics::stats::GoalRevenue, metric: &str) -> Option<store::Number> {
    if metric == "total_revenue" { Some(s.total.clone()) } else { s.average() }
}

/// A query naming `total_revenue` or `average_revenue`: by goal (`event:goal`), each revenue
/// goal's in its currency and `null` for other goals, or with no dimension the revenue goals'
/// (those an `event:goal` `is` filter names, when there is one) when they share one currency,
/// else `null`, as Plausible answers a mix of currencies. The other metrics are the query
/// engine's; comparisons compare both. Answers are not ordered by revenue.
async fn revenue_query(r: &Reading, body: &QueryBody, site: &Site, asked: &[String]) -> Result<Response, ServerError> {
    let dimensions = paired_metrics_shape(body, REVENUE_METRICS, "event:goal")?;
    if asked.iter().any(|m| ENGAGEMENT_METRICS.contains(&m.as_str())) {
        return Err(ServerError::bad_request("revenue and engagement metrics are asked for in separate queries"));
    }
    let q = paired_inner_query(body, site, asked, REVENUE_METRICS)?;
    let goals: Vec<analytics::stats::RevenueGoal> = site
        .goals
        .iter()
        .filter_map(|g| {
            let currency = g.currency.clone()?;
            Some(analytics::stats::RevenueGoal { goal: g.goal.display_name(), currency })
        })
        .collect();
    let sums = r.stats.revenue(&site.site_id, &q.range, &q.filters, &goals).await.map_err(ServerError::from)?;
    // With no dimension: the goals an `event:goal is` filter names, else every revenue goal.
    let named: Vec<&String> = q
        .filters
        .iter()
        .filter(|f| f.dimension == Dimension::Event(EventDimension::Goal) && f.op == FilterOp::Is)
        .flat_map(|f| &f.values)
        .collect();
    let combined = |sums: &[analytics::stats::GoalRevenue]| {
        let chosen: Vec<&analytics::stats::GoalRevenue> =
            sums.iter().filter(|s| named.is_empty() || named.contains(&&s.goal)).collect();
        analytics::stats::GoalRevenue::combined(&chosen).map_err(ServerError::from)
    };
    let combined_now = combined(&sums)?;
    let pick =
        |sums: &[analytics::stats::GoalRevenue], combined: Option<analytics::stats::GoalRevenue>, dims: &[String]| {
            if dimensions.is_empty() { combined } else { sums.iter().find(|s| Some(&s.goal) == dims.first()).cloned() }
        };
    let paired = Paired { asked, names: REVENUE_METRICS };
    let money = |revenue: Option<analytics::stats::GoalRevenue>| {
        move |m: &str| match &revenue {
            Some(s) => MetricValue::money(revenue_value(s, m), &s.currency),
            None => MetricValue::Null,
        }
    };
    match body.comparison(site)? {
        None => {
            let rows = r.stats.query(&q).await.map_err(ServerError::from)?;
            let results = rows
                .iter()
                .map(|row| paired.row(row, money(pick(&sums, combined_now.clone(), &row.dimensions))))
                .collect();
            Ok(paired_answer(body, &q, asked, results, None))
        }
        Some(mode) => {
            let compared = r.stats.query_compared(&q, mode).await.map_err(ServerError::from)?;
            let before =
                r.stats.revenue(&site.site_id, &compared.range, &q.filters, &goals).await.map_err(ServerError::from)?;
            let combined_before = combined(&before)?;
            let results = compared
                .rows
                .iter()
                .map(|(row, c)| {
                    let now = pick(&sums, combined_now.clone(), &row.dimensions);
                    let then = pick(&before, combined_before.clone(), &c.dimensions);
                    let change = |m: &str| {
                        let value = |s: &Option<analytics::stats::GoalRevenue>| revenue_value(s.as_ref()?, m);
                        let (a, b) = (value(&now)?, value(&then)?);
                        // A percentage for display; the amounts themselves stay exact.
                        analytics::stats::change(Metric::Visitors, Value::Float(a.to_f64()), Value::Float(b.to_f64()))
                    };
                    paired.compared((row, c), money(now.clone()), money(then.clone()), change)
                })
                .collect();
            Ok(paired_answer(body, &q, asked, results, Some(days(&compared.range))))
        }
    }
}

/// `POST /api/journeys {site_id, date_range, page, filters}`: within the visits the filters
/// select, the pages viewed just before `page` and just after it, and the most common paths of
/// 2 to 4 pages from it, in visitors: `{page, before: [{page, visitors}], after: [...],
/// paths: [{pages, visitors}]}`.
pub async fn journeys(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ServerError> {
    let (r, body, site) = json_request::<JourneysBody>(&state, &headers, body).await?;
    let range = body.dated.range(&site.zone)?;
    let filters = body.filters.resolve(&site)?;
    let page = match body.page.value() {
        Some(p) if !p.is_empty() && p.len() <= 2000 => p,
        _ => return Err(ServerError::bad_request("`page` is required: a page path such as \"/pricing\"")),
    };
    let j = r.stats.journeys(&site.site_id, &range, page, &filters).await?;
    Ok(json_ok(JourneysView::new(page, &j)))
}

/// `POST /api/properties {site_id, date_range}`: the custom property keys of the site's events
/// in the range, most used first: `{keys: [{key, events}]}`.
pub async fn property_keys(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ServerError> {
    let (r, body, site) = json_request::<Dated>(&state, &headers, body).await?;
    let range = body.range(&site.zone)?;
    let keys = r.stats.property_keys(&site.site_id, &range).await?;
    Ok(json_ok(PropertyKeys::new(&keys)))
}

/// `POST /api/v2/query`: Plausible's Stats API v2, with `include.comparisons`; a `date_range`
/// of `30m` (or `realtime`) is the last 30 minutes.
pub async fn query(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ServerError> {
    let (r, body, site) = json_request::<QueryBody>(&state, &headers, body).await?;
    let asked = strings(&body.metrics, "metrics")?;
    if asked.iter().any(|m| ENGAGEMENT_METRICS.contains(&m.as_str())) {
        return engagement_query(r, &body, &site, &asked).await;
    }
    if asked.iter().any(|m| REVENUE_METRICS.contains(&m.as_str())) {
        return revenue_query(r, &body, &site, &asked).await;
    }
    // `30m` (or `realtime`): the last 30 minutes, read from their event blocks.
    if body.dated.is_realtime() {
        let mut today = body.clone();
        today.dated.date_range = Sent::Value(RangeSent::Name("day".into()));
        let q = today.query(&site)?;
        if body.comparison(&site)?.is_some() {
            return Err(ServerError::bad_request("the last 30 minutes have no comparison"));
        }
        let rows = r.stats.query_realtime(&q, jiff::Timestamp::now().as_millisecond()).await?;
        let mut query = QueryEcho::new(&body, &q, q.metrics.iter().map(|m| m.name()).collect());
        query.date_range = RangeEcho::Sent(&body.dated.date_range);
        let results = rows.iter().map(ResultRow::new).collect();
        return Ok(json_ok(QueryAnswer { results, meta: Meta::default(), query }));
    }
    let q = body.query(&site)?;
    let (rows, compared) = match body.comparison(&site)? {
        None => (r.stats.query(&q).await?, None),
        Some(mode) => (Vec::new(), Some(r.stats.query_compared(&q, mode).await?)),
    };
    let results = match &compared {
        None => rows.iter().map(ResultRow::new).collect(),
        Some(compared) => compared.rows.iter().map(|(row, c)| ResultRow::compared(row, c)).collect(),
    };
    let mut query = QueryEcho::new(&body, &q, q.metrics.iter().map(|m| m.name()).collect());
    query.tail = EchoTail::IncludeFirst {
        include: body.include.sent.as_ref(),
        comparison_date_range: compared.as_ref().map(|c| days(&c.range)),
    };
    let meta = Meta::imports(q.include_imports, imports_skip_reason(&q));
    Ok(json_ok(QueryAnswer { results, meta, query }))
}

/// The `site_id` of a GET route's query string.
#[derive(Debug, serde::Deserialize)]
pub struct SiteParam {
    site_id: Option<String>,
    /// Filters as the Stats API takes them, as JSON (`/api/realtime` only).
    filters: Option<String>,
}

/// The realtime panel of the site a realtime route names, or the answer refusing the request.
async fn realtime_of(
    state: &AppState,
    headers: &HeaderMap,
    p: SiteParam,
) -> Result<analytics::stats::Realtime, ServerError> {
    let r = state.reading()?;
    let Some(name) = p.site_id else { return Err(ServerError::bad_request("`site_id` is required")) };
    let (_, site) = authorize(r, headers, Some(&name), Need::Stats).await?;
    let filters = match &p.filters {
        None => Vec::new(),
        Some(text) => {
            let list: Filters = serde_json::from_str(text)
                .map_err(|e| ServerError::bad_request(format!("`filters` is not JSON: {e}")))?;
            list.resolve(&site)?
        }
    };
    r.stats
        .realtime_filtered(&site.site_id, jiff::Timestamp::now().as_millisecond(), &filters)
        .await
        .map_err(ServerError::from)
}

/// `GET /api/realtime?site_id=…&filters=…` (`filters` as the Stats API's, in JSON, optional):
/// `{current_visitors, pageviews_per_minute: [{minute, pageviews}],
/// top_pages: [{page, visitors, pageviews}]}` over the last 30 minutes.
pub async fn realtime(
    State(state): State<AppState>,
    headers: HeaderMap,
    UrlQuery(p): UrlQuery<SiteParam>,
) -> Result<Response, ServerError> {
    let rt = realtime_of(&state, &headers, p).await?;
    Ok(json_ok(RealtimeView::new(&rt)))
}

/// `GET /api/v1/stats/realtime/visitors?site_id=…`: the current visitors as a bare number.
pub async fn realtime_visitors(
    State(state): State<AppState>,
    headers: HeaderMap,
    UrlQuery(p): UrlQuery<SiteParam>,
) -> Result<Response, ServerError> {
    let rt = realtime_of(&state, &headers, p).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], rt.current_visitors.to_string()).into_response())
}

/// How many visitors one import request ingests at once.
const IMPORT_LANES: usize = 64;

/// `POST /api/import`: events with their own timestamps for the key's site, NDJSON lines or CSV
/// records (`Content-Type: text/csv`, or `?format=csv`; see [`crate::wire::import`]), ingested in time
/// order; answers `{imported, dropped, errors: [{line, error}], errors_total, errors_omitted}`
/// with the first [`crate::wire::import::MAX_REPORTED_ERRORS`] refused lines; a bad line does not stop
/// the others, a CSV header naming an unknown column stops all (`400`).
///
/// The caller is authorized before a byte of the body is read, so an upload without a key costs
/// nothing; at most [`MAX_CONCURRENT_IMPORTS`] bodies are read and ingested at once, so memory
/// stays bounded by a few bodies (`503` with `Retry-After` past that).
pub async fn import(
    State(state): State<AppState>,
    headers: HeaderMap,
    UrlQuery(params): UrlQuery<ImportParams>,
    body: axum::body::Body,
) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let (_, site) = authorize(r, &headers, params.site_id.as_deref(), Need::Import).await?;
    let format = match params.format.as_deref() {
        Some(name) => match Format::parse(name) {
            Some(f) => f,
            None => return Err(ServerError::bad_request("`format` must be ndjson or csv")),
        },
        None => Format::detect(headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("")),
    };
    static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_CONCURRENT_IMPORTS);
    let Ok(_slot) = tokio::time::timeout(std::time::Duration::from_secs(5), SLOTS.acquire()).await else {
        return Err(ServerError::Unavailable {
            message: "too many imports at once; try again shortly".into(),
            retry_after_secs: 5,
        });
    };
    let body = match axum::body::to_bytes(body, MAX_IMPORT_BYTES).await {
        Ok(b) => b,
        Err(e) if is_too_large(&e) => {
            return Err(ServerError::BodyTooLarge { limit: MAX_IMPORT_BYTES });
        }
        Err(e) => return Err(ServerError::bad_request(format!("could not read the body: {e}"))),
    };
    let parsed = match crate::wire::import::parse(&body, format, &site) {
        Ok(p) => p.in_time_order(),
        Err(message) => return Err(ServerError::bad_request(message)),
    };
    drop(body);
    let mut errors = parsed.errors;
    // Many visitors at once, each visitor's events in order: their events share event blocks.
    let report = r
        .pipeline
        .import_all(&site, parsed.events, IMPORT_LANES, &|_| {})
        .await
        .map_err(|(_, e)| ServerError::backend(e))?;
    for (line, reason) in report.refused {
        errors.push(line, reason);
    }
    Ok(json_ok(ImportReport::new(report.imported, report.dropped, &errors)))
}

/// Most imports read and ingested at once (each holds its body, up to [`MAX_IMPORT_BYTES`]).
pub const MAX_CONCURRENT_IMPORTS: usize = 2;

/// Whether a body read failed on the size limit (axum's `LengthLimitError`, somewhere in the chain).
fn is_too_large(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.to_string().contains("length limit exceeded") {
            return true;
        }
        source = err.source();
    }
    false
}

/// The query of `POST /api/import`.
#[derive(Debug, serde::Deserialize)]
pub struct ImportParams {
    site_id: Option<String>,
    format: Option<String>,
}
