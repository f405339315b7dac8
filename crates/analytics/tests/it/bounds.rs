//! What no request may make Tally build or store: keys too long for DynamoDB, queries that
//! build millions of buckets or rows. Regression tests for the hardening issue's findings.

use std::sync::Arc;
use std::time::Duration;

use analytics::aggregate::{Aggregator, AggregatorConfig};
use analytics::enrich::{Enricher, EnricherConfig};
use analytics::event::RawEvent;
use analytics::key_bound::{MARK, bound_value};
use analytics::period::{DateRange, parse_date};
use analytics::pipeline::{ImportEvent, IngestResult, Pipeline};
use analytics::schema::tally_schema;
use analytics::sites::{Site, Sites};
use analytics::stats::{Filter, FilterOp, Metric, Query, Stats, StatsError};
use model::Table;
use store::Store;
use store_embedded::EmbeddedStore;

const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0";

struct World {
    _dir: tempfile::TempDir,
    site: Site,
    stats: Stats,
    pipeline: Pipeline,
    aggregator: Arc<Aggregator>,
}

async fn world() -> World {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).expect("the embedded engine opens"));
    let table = Table::new(store, tally_schema("tally"));
    table.create_table().await.expect("Tally's table is created");
    let sites = Arc::new(Sites::new(table.clone()));
    let site = sites.add("example.com", "UTC").await.unwrap();
    let config = AggregatorConfig {
        flush_interval: Duration::from_secs(3600),
        heartbeat_interval: Duration::from_secs(3600),
        ..AggregatorConfig::default()
    };
    let aggregator = Aggregator::start(table.clone(), sites.clone(), config).await.unwrap();
    let enricher = Arc::new(Enricher::new(EnricherConfig::default()).unwrap());
    let pipeline = Pipeline::new(table.clone(), sites.clone(), enricher, aggregator.clone());
    World { _dir: dir, site, stats: Stats::new(table, sites), pipeline, aggregator }
}

fn today() -> jiff::civil::Date {
    jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date()
}

fn query(w: &World, range: (&str, &str), dimensions: &[&str], filters: Vec<Filter>) -> Result<Query, StatsError> {
    let range = DateRange::new(parse_date(range.0).unwrap(), parse_date(range.1).unwrap()).unwrap();
    let dimensions = dimensions.iter().map(|d| (*d).to_owned()).collect();
    Query::new(w.site.site_id.clone(), vec![Metric::Pageviews], range, dimensions, filters, vec![], 100, 0)
}

/// Regression: a page URL of about 1,100 bytes (or a prop value) was accepted, and its aggregate
/// item's key was too long for DynamoDB: the flush failed and no dashboard moved again. Now the
/// longest accepted URL and prop value are stored as bounded values, the flush succeeds, and
/// the row is found by the whole value or by the one shown.
#[tokio::test]
async fn the_longest_accepted_url_and_prop_value_are_aggregated_and_filterable() {
    let w = world().await;
    let path = format!("/{}", "a%20b".repeat(395));
    let url = format!("https://example.com{path}");
    assert!(url.len() <= 2000, "{}", url.len());
    let mut raw = RawEvent::pageview(&url, "example.com");
    raw.user_agent = FIREFOX.into();
    raw.timestamp_ms = jiff::Timestamp::now().as_millisecond() - 60_000;
    raw.props.push(("plan".into(), "#".repeat(2000)));
    let event = ImportEvent { raw, visitor: Some("v".into()), country: None, client: None };
    assert!(matches!(w.pipeline.import(&w.site, event).await, IngestResult::Accepted));
    w.aggregator.flush_now().await.expect("the flush writes every item");
    assert_eq!(w.aggregator.stats().flush_item_errors, 0);

    let day = today().to_string();
    let rows = w.stats.query(&query(&w, (&day, &day), &["event:page"], vec![]).unwrap()).await.unwrap();
    assert_eq!(rows.len(), 1);
    let shown = &rows[0].dimensions[0];
    assert!(shown.starts_with("/a ba ba b") && shown.contains(MARK), "{shown}");
    let whole = path.replace("%20", " ");
    assert_eq!(shown, &bound_value(&whole));
    // Filtering by the whole path or by the value shown finds the row, from the aggregates
    // (a filter on the breakdown) and from the raw events (a filter on another dimension).
    for value in [whole.clone(), shown.clone()] {
        let filter = || vec![Filter::new(FilterOp::Is, "event:page", vec![value.clone()]).unwrap()];
        let by_aggregates = w.stats.query(&query(&w, (&day, &day), &["event:page"], filter()).unwrap()).await.unwrap();
        assert_eq!(by_aggregates.len(), 1);
        let by_raw = w.stats.query(&query(&w, (&day, &day), &["event:props:plan"], filter()).unwrap()).await.unwrap();
        assert_eq!(by_raw.len(), 1, "the raw path filters bounded values too");
        assert!(by_raw[0].dimensions[0].starts_with("###") && by_raw[0].dimensions[0].contains(MARK));
    }
}

/// Regression: `time:hour` over `["1901-01-01", "2400-12-30"]` took 11.7 s and 1.2 GB for one
/// request. Ranges are kept within the years a site can have data and series to a number of
/// buckets, each refused with a message naming the bound.
#[tokio::test]
async fn a_query_is_refused_past_its_bounds_with_the_bound_named() {
    let w = world().await;
    let err = |r: Result<Query, StatsError>| r.expect_err("refused").to_string();
    assert!(err(query(&w, ("1901-01-01", "2400-12-30"), &["time:hour"], vec![])).contains("1970 to 2100"));
    assert!(err(query(&w, ("2026-01-01", "2101-01-01"), &[], vec![])).contains("1970 to 2100"));
    let q = query(&w, ("1970-01-01", "2100-12-31"), &["time:hour"], vec![]).expect("a range within the years");
    let started = std::time::Instant::now();
    let refused = w.stats.query(&q).await.expect_err("too many hours").to_string();
    assert!(refused.contains("20000 hours"), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(30), "refused before building the buckets");
    let q = query(&w, ("2020-01-01", "2021-12-31"), &["time:hour"], vec![]).expect("two years");
    assert!(w.stats.query(&q).await.is_ok(), "two years of hours are within the bound");
    let q = query(&w, ("1970-01-01", "2100-12-31"), &["time:month"], vec![]).unwrap();
    assert!(w.stats.query(&q).await.unwrap_err().to_string().contains("20000 days"));

    let range = DateRange::new(today(), today()).unwrap();
    let new = |metrics: Vec<Metric>, filters: Vec<Filter>, order: Vec<(String, bool)>, limit| {
        Query::new(w.site.site_id.clone(), metrics, range, vec![], filters, order, limit, 0)
    };
    let is = |n: usize| Filter::new(FilterOp::Is, "event:page", vec!["/".into(); n]).unwrap();
    assert!(err(new(vec![Metric::Visitors; 2], vec![], vec![], 10)).contains("listed twice"));
    assert!(err(new(vec![Metric::Visitors], vec![], vec![], 10_001)).contains("at most 10000"));
    assert!(
        err(new(vec![Metric::Visitors], (0..21).map(|_| is(1)).collect(), vec![], 10)).contains("at most 20 filters")
    );
    assert!(err(new(vec![Metric::Visitors], vec![is(201)], vec![], 10)).contains("200"));
    let order = vec![("visitors".to_owned(), true); 3];
    assert!(err(new(vec![Metric::Visitors], vec![], order, 10)).contains("order_by"));
    assert!(new(vec![Metric::Visitors], vec![is(200)], vec![("visitors".into(), true)], 10_000).is_ok());
}
