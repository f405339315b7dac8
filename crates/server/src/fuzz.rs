//! What the fuzz targets in `crates/server/fuzz` run, kept here so that it compiles (and runs
//! over the committed seed corpus, `tests/it/fuzz_seeds.rs`) with every stable `cargo test`:
//! the targets themselves need nightly and libFuzzer and are thin wrappers around these.
//!
//! - [`stats_query_body`]: a `POST /api/v2/query` (and `/api/funnel`) body, read as the route
//!   reads it. Whatever the bytes, reading never panics, a refusal is a `400`, and an accepted
//!   query stays within the bounds of [`analytics::stats`] (so answering it is bounded too).
//! - [`import_body`]: a `POST /api/import` body, read as NDJSON and as CSV, then every event that
//!   reads validated as ingestion validates it. Nothing panics, and every line is either an
//!   event or an error.
//!
//! Run the targets with `cargo +nightly fuzz run stats_query` or `cargo +nightly fuzz run
//! import` from `crates/server` (see `fuzz/README.md`).

use std::sync::LazyLock;

use crate::wire::import::Format;
use crate::wire::stats::{FunnelBody, QueryBody};
use analytics::enrich::IpRanges;
use analytics::event::{Event, Hostname, Limits};
use analytics::period::SiteZone;
use analytics::sites::Site;
use analytics::stats::{MAX_FILTER_VALUES, MAX_FILTERS, MAX_PAGE_ROWS, MAX_QUERY_ROWS, QUERY_YEARS};
use axum::http::StatusCode;

/// The site the bodies are read for.
fn site() -> &'static Site {
    static SITE: LazyLock<Site> = LazyLock::new(|| Site {
        site_id: "01JDB3Y5C8M9V7T2X4K6P0QWER".into(),
        domain: "example.com".into(),
        domains: Hostname::parse("example.com").into_iter().collect(),
        umami_id: "9f1c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b".into(),
        zone: SiteZone::new("Europe/Berlin").unwrap_or_else(|_| SiteZone::utc()),
        retention_event_days: 30,
        retention_hourly_days: 90,
        retention_daily_days: 730,
        weeks_from_ms: 0,
        excluded_ips: IpRanges::new(),
        goals: Vec::new(),
        funnels: Vec::new(),
        segments: Vec::new(),
        import_salt: None,
    });
    &SITE
}

/// Reads `data` as a Stats API query body; panics if an invariant breaks.
pub fn stats_query_body(data: &[u8]) {
    let Ok(body) = crate::extract::object_body::<QueryBody>(data) else { return };
    match body.query(site()) {
        Ok(q) => {
            assert!(!q.metrics.is_empty());
            assert!(q.limit <= MAX_PAGE_ROWS && q.offset <= MAX_QUERY_ROWS);
            assert!(q.dimensions.len() <= 2);
            assert!(q.filters.len() <= MAX_FILTERS);
            assert!(q.filters.iter().map(|f| f.values.len()).sum::<usize>() <= MAX_FILTER_VALUES);
            assert!(QUERY_YEARS.contains(&q.range.first().year()) && QUERY_YEARS.contains(&q.range.last().year()));
            assert!(q.range.first() <= q.range.last());
        }
        Err(refused) => assert_eq!(refused.status(), StatusCode::BAD_REQUEST),
    }
    // The funnel route reads the same range and its steps.
    let Ok(funnel) = crate::extract::object_body::<FunnelBody>(data) else { return };
    if let Err(refused) = funnel.steps.goals() {
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    }
}

/// Reads `data` as an import body in both formats; panics if an invariant breaks.
pub fn import_body(data: &[u8]) {
    // CSV ends a record at `\r` too.
    let lines = data.iter().filter(|&&b| b == b'\n' || b == b'\r').count() + 1;
    for format in [Format::Ndjson, Format::Csv] {
        let Ok(parsed) = crate::wire::import::parse(data, format, site()) else { continue };
        // Every line (a CSV record may span several) is at most one event or one error.
        assert!(parsed.events.len() as u64 + parsed.errors.total() <= lines as u64, "{format:?}");
        for (_, event) in parsed.in_time_order().events {
            let _ = Event::parse(event.raw, &Limits::default());
        }
    }
}
