//! `POST /api/export {site_id, date_range, filters, panel?}`: the dashboard's figures as CSV, for
//! the range and filters asked, behind the same credentials as the Stats API. With `panel`, that
//! one file (`text/csv`); without, every file in one zip, as Plausible's export is.
//!
//! The files, each one Stats API query with at most [`MAX_PAGE_ROWS`] rows:
//! `visitors.csv` (the time series, one row per day — per hour for a one-day range — zeros
//! included, every top-stat metric), then one per breakdown: pages, entry and exit pages,
//! sources, referrers, the five UTM dimensions, countries, devices, browsers, operating systems,
//! goals (`conversions.csv`) and custom events. A visit dimension's file has visitors, visits,
//! bounce rate and visit duration; pages visitors and page views; goals and events visitors and
//! events (and goals their conversion rate).
//!
//! The zip is written by the `zip` crate (zip-rs, the maintained Rust implementation, which
//! readers and writers across the ecosystem use) rather than by hand: local headers, the
//! central directory, CRCs and ZIP64 are its job. Its entries are stored, not compressed: it is
//! built without its codecs (`default-features = false`), so it brings five small crates and
//! about 15 s of a debug build on two busy cores, where its default features would build
//! bzip2, zstd, lzma and AES; a dashboard's CSV files are a few kilobytes.

use std::io::Write;

use analytics::period::Unit;
use analytics::stats::{MAX_PAGE_ROWS, Metric, Query, Value};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::error::ServerError;
use crate::state::AppState;
use crate::stats::json_request;
use crate::wire::stats::ExportBody;

/// One file of an export: its name (without `.csv`), the dimension it breaks down by (`None`
/// for the time series) and its metrics.
struct Panel {
    name: &'static str,
    dimension: Option<&'static str>,
    metrics: &'static [&'static str],
}

const VISIT: &[&str] = &["visitors", "visits", "bounce_rate", "visit_duration"];

/// Every file, in the zip's order.
const PANELS: &[Panel] = &[
    Panel {
        name: "visitors",
        dimension: None,
        metrics: &["visitors", "visits", "pageviews", "views_per_visit", "bounce_rate", "visit_duration"],
    },
    Panel { name: "pages", dimension: Some("event:page"), metrics: &["visitors", "pageviews"] },
    Panel { name: "entry_pages", dimension: Some("visit:entry_page"), metrics: VISIT },
    Panel { name: "exit_pages", dimension: Some("visit:exit_page"), metrics: VISIT },
    Panel { name: "sources", dimension: Some("visit:source"), metrics: VISIT },
    Panel { name: "referrers", dimension: Some("visit:referrer"), metrics: VISIT },
    Panel { name: "utm_sources", dimension: Some("visit:utm_source"), metrics: VISIT },
    Panel { name: "utm_mediums", dimension: Some("visit:utm_medium"), metrics: VISIT },
    Panel { name: "utm_campaigns", dimension: Some("visit:utm_campaign"), metrics: VISIT },
    Panel { name: "utm_contents", dimension: Some("visit:utm_content"), metrics: VISIT },
    Panel { name: "utm_terms", dimension: Some("visit:utm_term"), metrics: VISIT },
    Panel { name: "countries", dimension: Some("visit:country"), metrics: VISIT },
    Panel { name: "regions", dimension: Some("visit:region"), metrics: VISIT },
    Panel { name: "cities", dimension: Some("visit:city"), metrics: VISIT },
    Panel { name: "devices", dimension: Some("visit:device"), metrics: VISIT },
    Panel { name: "screen_sizes", dimension: Some("visit:screen"), metrics: VISIT },
    Panel { name: "browsers", dimension: Some("visit:browser"), metrics: VISIT },
    Panel { name: "browser_versions", dimension: Some("visit:browser_version"), metrics: VISIT },
    Panel { name: "operating_systems", dimension: Some("visit:os"), metrics: VISIT },
    Panel { name: "operating_system_versions", dimension: Some("visit:os_version"), metrics: VISIT },
    Panel { name: "languages", dimension: Some("visit:language"), metrics: VISIT },
    Panel { name: "conversions", dimension: Some("event:goal"), metrics: &["visitors", "events", "conversion_rate"] },
    Panel { name: "custom_events", dimension: Some("event:name"), metrics: &["visitors", "events"] },
];

/// The names `panel` takes.
fn panel_names() -> String {
    PANELS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

fn cell(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
    }
}

/// One panel's CSV.
async fn panel_csv(
    r: &crate::state::Reading,
    site: &analytics::sites::Site,
    range: analytics::period::DateRange,
    filters: &[analytics::stats::Filter],
    panel: &Panel,
) -> Result<Vec<u8>, ServerError> {
    let metrics: Vec<Metric> = panel.metrics.iter().filter_map(|m| Metric::parse(m)).collect();
    let unit = if range.days() == 1 { Unit::Hour } else { Unit::Day };
    let time = format!("time:{}", unit.as_str());
    let dimension = panel.dimension.map_or(time.clone(), str::to_owned);
    let order = match panel.dimension {
        None => vec![(time.clone(), false)],
        Some(d) => vec![(panel.metrics[0].to_owned(), true), (d.to_owned(), false)],
    };
    let q = Query::new(
        site.site_id.clone(),
        metrics.clone(),
        range,
        vec![dimension],
        filters.to_vec(),
        order,
        MAX_PAGE_ROWS,
        0,
    )
    .map_err(|e| ServerError::bad_request(format!("{}.csv: {e}", panel.name)))?;
    let mut rows = r.stats.query(&q).await.map_err(ServerError::from)?;
    if panel.dimension.is_none() {
        // Every bucket of the range, zeros included.
        let labels = r.stats.time_labels(&site.site_id, &range, unit).await.map_err(ServerError::from)?;
        let mut by_label: std::collections::HashMap<String, analytics::stats::Row> =
            rows.drain(..).map(|row| (row.dimensions[0].clone(), row)).collect();
        rows = labels
            .into_iter()
            .map(|label| {
                by_label.remove(&label).unwrap_or_else(|| analytics::stats::Row {
                    dimensions: vec![label],
                    metrics: metrics
                        .iter()
                        .map(|m| match m {
                            Metric::ViewsPerVisit | Metric::ConversionRate => Value::Float(0.0),
                            _ => Value::Int(0),
                        })
                        .collect(),
                })
            })
            .collect();
    }
    let mut out = csv::Writer::from_writer(Vec::new());
    let first = if panel.dimension.is_none() { unit.as_str() } else { "name" };
    let head = std::iter::once(first).chain(panel.metrics.iter().copied());
    out.write_record(head).map_err(ServerError::backend)?;
    for row in rows {
        let record = row.dimensions.iter().cloned().chain(row.metrics.iter().map(cell));
        out.write_record(record).map_err(ServerError::backend)?;
    }
    out.into_inner().map_err(ServerError::backend_display)
}

/// `POST /api/export`.
pub async fn export(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ServerError> {
    let (r, body, site) = json_request::<ExportBody>(&state, &headers, body).await?;
    let range = body.dated.range(&site.zone)?;
    analytics::stats::check_range(&range).map_err(|e| ServerError::bad_request(e.to_string()))?;
    let filters = body.filters.resolve(&site)?;
    let stem = format!("tally-{}-{}-{}", site.domain, range.first(), range.last());
    let attachment = |name: &str| {
        HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
            .unwrap_or(HeaderValue::from_static("attachment"))
    };
    let wrong = |_: &_| ServerError::bad_request(format!("`panel` is one of {}", panel_names()));
    if let Some(name) = body.panel.checked(wrong)? {
        let Some(panel) = PANELS.iter().find(|p| p.name == name) else {
            return Err(ServerError::bad_request(format!("unknown panel {name:?}; one of {}", panel_names())));
        };
        let csv = panel_csv(r, &site, range, &filters, panel).await?;
        let file = format!("{stem}-{}.csv", panel.name);
        return Ok((
            [
                (header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8")),
                (header::CONTENT_DISPOSITION, attachment(&file)),
            ],
            csv,
        )
            .into_response());
    }
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for panel in PANELS {
        let csv = panel_csv(r, &site, range, &filters, panel).await?;
        zip.start_file(format!("{}.csv", panel.name), options).map_err(ServerError::backend_display)?;
        zip.write_all(&csv).map_err(ServerError::backend_display)?;
    }
    let bytes = zip.finish().map_err(ServerError::backend_display)?.into_inner();
    Ok((
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/zip")),
            (header::CONTENT_DISPOSITION, attachment(&format!("{stem}.zip"))),
        ],
        bytes,
    )
        .into_response())
}
