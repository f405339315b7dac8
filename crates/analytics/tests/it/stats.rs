//! Queries over aggregates, checked against numbers worked out by hand for a small scripted day
//! of traffic ingested through the pipeline (import, so the times are the test's).

use std::sync::Arc;
use std::time::Duration;

use analytics::aggregate::{Aggregator, AggregatorConfig};
use analytics::enrich::{Enricher, EnricherConfig};
use analytics::event::RawEvent;
use analytics::goal::Goal;
use analytics::period::{DateRange, SiteZone};
use analytics::pipeline::{ImportEvent, IngestResult, Pipeline};
use analytics::schema::tally_schema;
use analytics::sites::{Site, SiteChanges, Sites};
use analytics::stats::{Filter, FilterOp, Metric, OrderKey, Query, Row, Stats, StatsError, Value};
use model::Table;
use store::Store;
use store_embedded::EmbeddedStore;

const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0";
const HOUR: i64 = 3_600_000;

struct World {
    _dir: tempfile::TempDir,
    table: Table,
    site: Site,
    stats: Stats,
    day: jiff::civil::Date,
}

/// Three visitors on one UTC day, three days ago:
/// - `a`: `/` at 10:00 from Google, `/pricing` at 10:01 — 2 page views, not a bounce, 60 s;
/// - `b`: `/` at 11:00, direct — a bounce, 0 s;
/// - `c`: `/blog` at 12:00, then the custom event `Signup` at 12:05 — not a bounce, 300 s.
async fn world() -> World {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).expect("the embedded engine opens"));
    let table = Table::new(store, tally_schema("tally"));
    table.create_table().await.expect("Tally's table is created");
    let sites = Arc::new(Sites::new(table.clone()));
    let site = sites.add("example.com", "UTC").await.unwrap();
    sites.add_goal(&site.site_id, Goal::event("Signup").unwrap()).await.unwrap();
    let site = sites.get(&site.site_id).await.unwrap().unwrap();
    let config = AggregatorConfig {
        flush_interval: Duration::from_secs(3600),
        heartbeat_interval: Duration::from_secs(3600),
        ..AggregatorConfig::default()
    };
    let aggregator = Aggregator::start(table.clone(), sites.clone(), config).await.unwrap();
    let enricher = Arc::new(Enricher::new(EnricherConfig::default()).unwrap());
    let pipeline = Pipeline::new(table.clone(), sites.clone(), enricher, aggregator.clone());
    let now = jiff::Timestamp::now().as_millisecond();
    let midnight = now - now.rem_euclid(24 * HOUR) - 3 * 24 * HOUR;
    let script: [(&str, &str, &str, i64, Option<&str>); 5] = [
        ("a", "pageview", "/", 10 * HOUR, Some("https://www.google.com/")),
        ("a", "pageview", "/pricing", 10 * HOUR + 60_000, None),
        ("b", "pageview", "/", 11 * HOUR, None),
        ("c", "pageview", "/blog", 12 * HOUR, None),
        ("c", "Signup", "/blog", 12 * HOUR + 300_000, None),
    ];
    for (visitor, name, path, at, referrer) in script {
        let mut raw = RawEvent::pageview(&format!("https://example.com{path}"), "example.com");
        raw.name = name.into();
        raw.user_agent = FIREFOX.into();
        raw.timestamp_ms = midnight + at;
        raw.referrer = referrer.map(str::to_owned);
        let event = ImportEvent { raw, visitor: Some(visitor.into()), country: None, client: None };
        assert!(matches!(pipeline.import(&site, event).await, IngestResult::Accepted));
    }
    aggregator.flush_now().await.unwrap();
    let day = SiteZone::utc().date_of(midnight).unwrap();
    World { _dir: dir, table: table.clone(), site, stats: Stats::new(table, sites), day }
}

fn q(w: &World, metrics: &[Metric], dimensions: &[&str], filters: Vec<Filter>) -> Query {
    Query::new(
        w.site.site_id.clone(),
        metrics.to_vec(),
        DateRange::new(w.day, w.day).unwrap(),
        dimensions.iter().map(|d| (*d).to_owned()).collect(),
        filters,
        Vec::new(),
        100,
        0,
    )
    .unwrap()
}

/// A query of `w`'s site over `range`.
fn over(w: &World, range: DateRange, metrics: &[Metric], dimensions: &[&str]) -> Query {
    let dimensions = dimensions.iter().map(|d| (*d).to_owned()).collect();
    Query::new(w.site.site_id.clone(), metrics.to_vec(), range, dimensions, vec![], Vec::new(), 100, 0).unwrap()
}

fn rows(rows: &[Row]) -> Vec<(Vec<String>, Vec<Value>)> {
    rows.iter().map(|r| (r.dimensions.clone(), r.metrics.clone())).collect()
}

use Value::{Float, Int};

#[tokio::test]
async fn every_metric_of_the_totals_matches_the_hand_count() {
    let w = world().await;
    let all = [
        Metric::Visitors,
        Metric::Visits,
        Metric::Pageviews,
        Metric::ViewsPerVisit,
        Metric::BounceRate,
        Metric::VisitDuration,
        Metric::Events,
    ];
    let got = w.stats.query(&q(&w, &all, &[], vec![])).await.unwrap();
    // 3 visitors and visits; 4 page views, 5 events; 4/3 views per visit; 1 bounce of 3 = 33 %;
    // (60 + 0 + 300) / 3 = 120 s.
    assert_eq!(rows(&got), vec![(vec![], vec![Int(3), Int(3), Int(4), Float(1.33), Int(33), Int(120), Int(5)])]);
}

#[tokio::test]
async fn breakdowns_by_page_source_exit_page_goal_and_day() {
    let w = world().await;
    let pages = w.stats.query(&q(&w, &[Metric::Visitors, Metric::Pageviews], &["event:page"], vec![])).await.unwrap();
    assert_eq!(
        rows(&pages),
        vec![
            (vec!["/".into()], vec![Int(2), Int(2)]),
            (vec!["/blog".into()], vec![Int(1), Int(1)]),
            (vec!["/pricing".into()], vec![Int(1), Int(1)]),
        ]
    );
    let sources =
        w.stats.query(&q(&w, &[Metric::Visitors, Metric::BounceRate], &["visit:source"], vec![])).await.unwrap();
    assert_eq!(
        rows(&sources),
        vec![(vec!["Direct / None".into()], vec![Int(2), Int(50)]), (vec!["Google".into()], vec![Int(1), Int(0)])]
    );
    let exits = w.stats.query(&q(&w, &[Metric::Visits], &["visit:exit_page"], vec![])).await.unwrap();
    assert_eq!(
        rows(&exits),
        vec![
            (vec!["/".into()], vec![Int(1)]),
            (vec!["/blog".into()], vec![Int(1)]),
            (vec!["/pricing".into()], vec![Int(1)]),
        ]
    );
    let goals =
        w.stats.query(&q(&w, &[Metric::Visitors, Metric::ConversionRate], &["event:goal"], vec![])).await.unwrap();
    assert_eq!(rows(&goals), vec![(vec!["Signup".into()], vec![Int(1), Float(33.33)])]);
    let days = w.stats.query(&q(&w, &[Metric::Visitors, Metric::Pageviews], &["time:day"], vec![])).await.unwrap();
    assert_eq!(rows(&days), vec![(vec![w.day.to_string()], vec![Int(3), Int(4)])]);
    let hours = w.stats.query(&q(&w, &[Metric::Pageviews], &["time:hour"], vec![])).await.unwrap();
    assert_eq!(
        rows(&hours).into_iter().map(|(d, m)| (d[0][11..13].to_owned(), m)).collect::<Vec<_>>(),
        vec![("10".into(), vec![Int(2)]), ("11".into(), vec![Int(1)]), ("12".into(), vec![Int(1)])]
    );
}

#[tokio::test]
async fn filters_ordering_and_pagination() {
    let w = world().await;
    let google = Filter::new(FilterOp::Is, "visit:source", vec!["Google".into()]).unwrap();
    let got = w.stats.query(&q(&w, &[Metric::Visitors, Metric::Pageviews], &[], vec![google])).await.unwrap();
    assert_eq!(rows(&got), vec![(vec![], vec![Int(1), Int(2)])]);
    let not_home = Filter::new(FilterOp::IsNot, "event:page", vec!["/".into()]).unwrap();
    let got = w.stats.query(&q(&w, &[Metric::Pageviews], &["event:page"], vec![not_home])).await.unwrap();
    assert_eq!(rows(&got).len(), 2);
    let contains = Filter::new(FilterOp::Contains, "event:page", vec!["pri".into()]).unwrap();
    let got = w.stats.query(&q(&w, &[Metric::Pageviews], &["event:page"], vec![contains])).await.unwrap();
    assert_eq!(rows(&got), vec![(vec!["/pricing".into()], vec![Int(1)])]);
    let mut paged = q(&w, &[Metric::Pageviews], &["event:page"], vec![]);
    let page = analytics::dimension::Dimension::parse("event:page").unwrap();
    paged.order_by = vec![(OrderKey::Metric(Metric::Pageviews), true), (OrderKey::Dimension(page), false)];
    paged.limit = 1;
    paged.offset = 1;
    assert_eq!(rows(&w.stats.query(&paged).await.unwrap()), vec![(vec!["/blog".into()], vec![Int(1)])]);
}

#[tokio::test]
async fn filters_on_another_dimension_read_raw_events_and_agree_with_aggregates() {
    let w = world().await;
    // Page views by page of visits from Google: a's two pages.
    let google = Filter::new(FilterOp::Is, "visit:source", vec!["Google".into()]).unwrap();
    let got =
        w.stats.query(&q(&w, &[Metric::Visitors, Metric::Pageviews], &["event:page"], vec![google])).await.unwrap();
    assert_eq!(
        rows(&got),
        vec![(vec!["/".into()], vec![Int(1), Int(1)]), (vec!["/pricing".into()], vec![Int(1), Int(1)])]
    );
    // Two filters on other dimensions: direct visits on Linux, by source — b and c.
    let direct = Filter::new(FilterOp::Is, "visit:source", vec!["Direct / None".into()]).unwrap();
    let linux = Filter::new(FilterOp::Is, "visit:os", vec!["Linux".into()]).unwrap();
    let all = [Metric::Visitors, Metric::Visits, Metric::Pageviews, Metric::BounceRate, Metric::VisitDuration];
    let raw = w.stats.query(&q(&w, &all, &["visit:browser"], vec![direct.clone(), linux])).await.unwrap();
    // The same numbers as the aggregate path's one-filter answer for the same visits.
    let agg = w.stats.query(&q(&w, &all, &[], vec![direct])).await.unwrap();
    assert_eq!(raw.len(), 1);
    assert_eq!(raw[0].dimensions, vec!["Firefox".to_owned()]);
    assert_eq!(raw[0].metrics, agg[0].metrics, "raw and aggregate paths agree");
    assert_eq!(raw[0].metrics, vec![Int(2), Int(2), Int(2), Int(50), Int(150)]);
    // Regular expressions and negations answer the same: sources matching `^Goo` are Google's,
    // and "not matching" or "not containing" it leaves the direct visits.
    let goo = Filter::new(FilterOp::Matches, "visit:source", vec!["^Goo".into()]).unwrap();
    let by_page = |f: Filter| q(&w, &[Metric::Visitors, Metric::Pageviews], &["event:page"], vec![f]);
    assert_eq!(rows(&w.stats.query(&by_page(goo)).await.unwrap()), rows(&got));
    let not_goo = Filter::new(FilterOp::MatchesNot, "visit:source", vec!["^Goo".into()]).unwrap();
    let no_google = Filter::new(FilterOp::ContainsNot, "visit:source", vec!["oogl".into()]).unwrap();
    let direct_only = Filter::new(FilterOp::Is, "visit:source", vec!["Direct / None".into()]).unwrap();
    let expected = rows(&w.stats.query(&by_page(direct_only)).await.unwrap());
    assert!(!expected.is_empty());
    assert_eq!(rows(&w.stats.query(&by_page(not_goo)).await.unwrap()), expected);
    assert_eq!(rows(&w.stats.query(&by_page(no_google)).await.unwrap()), expected);
    assert!(analytics::stats::compile_pattern("(unclosed").is_err(), "a bad pattern is refused");
}

/// Visit metrics under a filter on a page or a goal are those of the visits with a matching
/// event; event metrics count the matching events only (as Plausible's dashboard shows them).
#[tokio::test]
async fn an_event_filter_gives_the_visit_metrics_of_the_visits_it_matches() {
    let w = world().await;
    let all = [Metric::Visitors, Metric::Visits, Metric::Pageviews, Metric::BounceRate, Metric::VisitDuration];
    let filter = |op, dimension: &str, value: &str| Filter::new(op, dimension, vec![value.into()]).unwrap();
    let world = &w;
    let totals = |filters: Vec<Filter>| {
        let query = q(world, &all, &[], filters);
        async move { world.stats.query(&query).await.unwrap()[0].metrics.clone() }
    };
    // /pricing: a's visit (2 pages, 60 s); one page view of /pricing.
    assert_eq!(
        totals(vec![filter(FilterOp::Is, "event:page", "/pricing")]).await,
        [Int(1), Int(1), Int(1), Int(0), Int(60)]
    );
    // `/`: a's and b's visits (b bounced: 50 %, (60 + 0) / 2 s); two page views of `/`.
    assert_eq!(totals(vec![filter(FilterOp::Is, "event:page", "/")]).await, [Int(2), Int(2), Int(2), Int(50), Int(30)]);
    // The Signup goal: c's visit (300 s), no page view among the matching events.
    assert_eq!(
        totals(vec![filter(FilterOp::Is, "event:goal", "Signup")]).await,
        [Int(1), Int(1), Int(0), Int(0), Int(300)]
    );
    // Not /pricing: the visits that never viewed it, b's and c's; the page views of other pages.
    assert_eq!(
        totals(vec![filter(FilterOp::IsNot, "event:page", "/pricing")]).await,
        [Int(3), Int(2), Int(3), Int(50), Int(150)]
    );
    // With a visit filter too, and by source: `/` from Google is a's visit alone.
    let by_source = q(
        &w,
        &all,
        &["visit:source"],
        vec![filter(FilterOp::Is, "event:page", "/"), filter(FilterOp::Is, "visit:source", "Google")],
    );
    assert_eq!(
        rows(&w.stats.query(&by_source).await.unwrap()),
        vec![(vec!["Google".into()], vec![Int(1), Int(1), Int(1), Int(0), Int(60)])]
    );
}

/// Funnels, by hand: a went `/` → `/pricing`; b stayed on `/`; c read `/blog`, then signed up.
#[tokio::test]
async fn funnels_count_the_visitors_who_did_each_step_in_order() {
    let w = world().await;
    let range = DateRange::new(w.day, w.day).unwrap();
    let page = |p: &str| Goal::page(p).unwrap();
    let event = |e: &str| Goal::event(e).unwrap();
    let funnel = |steps: Vec<Goal>| {
        let (w, range) = (&w, &range);
        async move {
            let steps = w.stats.funnel(&w.site.site_id, range, &steps).await.unwrap();
            steps.into_iter().map(|s| (s.name, s.visitors, s.conversion_rate, s.dropoff)).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        funnel(vec![page("/"), page("/pricing")]).await,
        [("Visit /".into(), 2, 100.0, 0), ("Visit /pricing".into(), 1, 50.0, 1)]
    );
    assert_eq!(
        funnel(vec![page("/*"), event("Signup")]).await,
        [("Visit /*".into(), 3, 100.0, 0), ("Signup".into(), 1, 33.33, 2)]
    );
    // In order only: a saw `/` before `/pricing`, never after.
    assert_eq!(
        funnel(vec![page("/pricing"), page("/")]).await,
        [("Visit /pricing".into(), 1, 100.0, 0), ("Visit /".into(), 0, 0.0, 1)]
    );
    for wrong in [vec![page("/")], vec![page("/"); 9]] {
        let err = w.stats.funnel(&w.site.site_id, &range, &wrong).await.unwrap_err();
        assert!(matches!(err, StatsError::Invalid(_)) && err.to_string().contains("2 to 8 steps"), "{err}");
    }
}

#[tokio::test]
async fn filtered_reads_reach_as_far_back_as_raw_events_are_kept_and_no_further() {
    let w = world().await;
    let google = Filter::new(FilterOp::Is, "visit:source", vec!["Google".into()]).unwrap();
    let mut quarter = q(&w, &[Metric::Visitors, Metric::Pageviews], &["event:page"], vec![google]);
    quarter.range = DateRange::new(w.day.checked_sub(jiff::Span::new().days(89)).unwrap(), w.day).unwrap();
    let expected = vec![(vec!["/".into()], vec![Int(1), Int(1)]), (vec!["/pricing".into()], vec![Int(1), Int(1)])];
    // Kept two years by default: a quarter is read.
    assert_eq!(rows(&w.stats.query(&quarter).await.unwrap()), expected);
    let sites = Arc::new(Sites::new(w.table.clone()));
    let month_only = SiteChanges { retention_event_days: Some(30), ..SiteChanges::default() };
    sites.update(&w.site.site_id, &month_only).await.unwrap();
    // Kept 30 days: a quarter would be answered from a third of it, so it is refused.
    let err = Stats::new(w.table.clone(), sites.clone()).query(&quarter).await.unwrap_err();
    assert!(matches!(err, StatsError::Unsupported(_)) && err.to_string().contains("keeps for 30 days"), "{err}");
    // Kept 30 days: the last 30 days and today is as far back as a filter reads, counted in the
    // site's own time zone (east of UTC, its first midnight is the day before in UTC).
    let tokyo = SiteChanges { timezone: Some("Asia/Tokyo".into()), ..SiteChanges::default() };
    sites.update(&w.site.site_id, &tokyo).await.unwrap();
    let stats = Stats::new(w.table.clone(), sites.clone());
    let today = SiteZone::new("Asia/Tokyo").unwrap().date_of(jiff::Timestamp::now().as_millisecond()).unwrap();
    let back = |days: i64| today.checked_sub(jiff::Span::new().days(days)).unwrap();
    let mut month = quarter.clone();
    month.range = DateRange::new(back(30), today).unwrap();
    assert_eq!(rows(&stats.query(&month).await.unwrap()), expected);
    month.range = DateRange::new(back(31), today).unwrap();
    assert!(stats.query(&month).await.unwrap_err().to_string().contains("keeps for 30 days"));
    // Kept a year: the quarter is read, and says what the day alone says.
    let year = SiteChanges { retention_event_days: Some(365), ..SiteChanges::default() };
    sites.update(&w.site.site_id, &year).await.unwrap();
    let stats = Stats::new(w.table.clone(), sites.clone());
    assert_eq!(rows(&stats.query(&quarter).await.unwrap()), expected);
    // Bounded by time, not by range or count: past its budget a query is refused, naming the budget.
    let none = Stats::new(w.table.clone(), sites.clone()).with_time_budget(std::time::Duration::ZERO);
    let err = none.query(&quarter).await.unwrap_err();
    assert!(matches!(err, StatsError::TooSlow(_)) && err.to_string().contains("time budget of 0ns"), "{err}");
    let ample = Stats::new(w.table.clone(), sites).with_time_budget(std::time::Duration::from_secs(60));
    assert_eq!(rows(&ample.query(&quarter).await.unwrap()), expected);
}

#[tokio::test]
async fn bad_queries_say_what_is_wrong() {
    let w = world().await;
    let range = DateRange::new(w.day, w.day).unwrap();
    let make = |metrics: Vec<Metric>, dims: Vec<&str>| {
        Query::new(
            w.site.site_id.clone(),
            metrics,
            range,
            dims.into_iter().map(String::from).collect(),
            vec![],
            vec![],
            10,
            0,
        )
    };
    assert!(matches!(make(vec![], vec![]), Err(StatsError::Invalid(_))));
    assert!(make(vec![Metric::Visitors], vec!["event:nope"]).unwrap_err().to_string().contains("event:nope"));
    assert!(make(vec![Metric::BounceRate], vec!["event:page"]).unwrap_err().to_string().contains("bounce_rate"));
    assert!(make(vec![Metric::ConversionRate], vec![]).unwrap_err().to_string().contains("event:goal"));
    let google = Filter::new(FilterOp::Is, "visit:source", vec!["Google".into()]).unwrap();
    let err = w.stats.query(&q(&w, &[Metric::BounceRate], &["visit:source"], vec![google.clone()])).await;
    assert!(err.is_ok(), "a visit filter with its own breakdown is fine: {err:?}");
    let err = make(vec![Metric::Visits], vec!["event:page"]).unwrap_err();
    assert!(err.to_string().contains("event:page"), "visit metrics by page have no meaning: {err}");
    let mut long = q(&w, &[Metric::Visitors], &["event:page"], vec![google]);
    long.range = DateRange::new(w.day.checked_sub(jiff::Span::new().days(60)).unwrap(), w.day).unwrap();
    assert!(w.stats.query(&long).await.is_ok(), "a filtered query reads any range the site keeps its events for");
}

#[tokio::test]
async fn sessions_are_listed_replayed_and_erased() {
    let w = world().await;
    let day = w.day.to_string();
    let recent = w.stats.recent_sessions(&w.site.site_id, &day, 10).await.unwrap();
    assert_eq!(recent.len(), 3);
    assert_eq!(recent[0].entry_page, "/blog", "the latest session first");
    let a = recent.iter().find(|s| s.pageviews == 2).expect("a's visit");
    assert_eq!((a.entry_page.as_str(), a.exit_page.as_str(), a.last_seen_at - a.started_at), ("/", "/pricing", 60_000));
    let events = w.stats.session_events(&w.site.site_id, &a.session_ref.to_string()).await.unwrap();
    assert_eq!(events.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), ["/", "/pricing"]);
    let visitor = a.visitor_id.to_string();
    let mine = w.stats.visitor_sessions(&w.site.site_id, &day, &visitor).await.unwrap();
    assert_eq!(mine.len(), 1);
    assert!(w.stats.session_events(&w.site.site_id, "not-a-ref").await.is_err());
    let logged = |w: &World| {
        let (table, site, day) = (w.table.clone(), w.site.site_id.clone(), day.clone());
        async move {
            let key = store::item! { "site_id" => site.as_str(), "day" => day.as_str() };
            let mut visitors = Vec::new();
            for r in table.query("SessionLog").key(key).all().await.unwrap() {
                let Some(store::AttributeValue::B(bytes)) = r.get("sessions") else { panic!("a log without entries") };
                let entries = analytics::aggregate::session_log::decode(bytes).unwrap();
                visitors.extend(entries.iter().map(|(id, _)| id.visitor.to_string()));
            }
            visitors.sort();
            visitors.dedup();
            visitors
        }
    };
    assert_eq!(logged(&w).await.len(), 3);
    assert!(logged(&w).await.contains(&visitor));
    // Regression: an id in upper case erased no event but did clear the session log; one parse of
    // a visitor id serves every path, so it erases both.
    let upper = visitor.to_ascii_uppercase();
    assert_eq!(w.stats.visitor_events(&w.site.site_id, &day, &upper).await.unwrap().len(), 2);
    assert_eq!(w.stats.delete_visitor(&w.site.site_id, &day, &upper).await.unwrap(), 2);
    assert!(w.stats.visitor_sessions(&w.site.site_id, &day, &visitor).await.unwrap().is_empty());
    assert_eq!(w.stats.recent_sessions(&w.site.site_id, &day, 10).await.unwrap().len(), 2);
    let left = logged(&w).await;
    assert_eq!(left.len(), 2, "b and c stay in the session log");
    assert!(!left.contains(&visitor), "the erased visitor's id is gone from the session log too");
}

#[tokio::test]
async fn a_site_stored_before_weekly_aggregates_reads_its_earlier_weeks_as_days() {
    let w = world().await;
    // Two weeks before the traffic to a week after: the whole week holding it is read as one item.
    let days = |n: i64| w.day.checked_add(jiff::Span::new().days(n)).unwrap();
    let range = DateRange::new(days(-14), days(7)).unwrap();
    let metrics = [Metric::Visitors, Metric::Visits, Metric::Pageviews, Metric::BounceRate];
    let totals = over(&w, range, &metrics, &[]);
    let pages = over(&w, range, &[Metric::Visitors, Metric::Pageviews], &["event:page"]);
    let expected = (w.stats.query(&totals).await.unwrap(), w.stats.query(&pages).await.unwrap());
    assert_eq!(rows(&expected.0), vec![(vec![], vec![Int(3), Int(3), Int(4), Int(33)])]);

    // Make the site one stored by a Tally without weekly aggregates: no mark, no weekly items.
    let site_key = store::item! { "site_id" => w.site.site_id.as_str() };
    w.table.update("Site", site_key, model::expr::Update::new().remove("weeks_from")).await.unwrap();
    let mut pages_of_items = w.table.scan().entity("Aggregate").pages();
    let mut removed = 0;
    while let Some(page) = futures::StreamExt::next(&mut pages_of_items).await {
        for r in page.unwrap().records {
            if r.string("period").unwrap() != "week" {
                continue;
            }
            let key = store::item! {
                "site_id" => r.string("site_id").unwrap(),
                "period" => "week",
                "dimension" => r.string("dimension").unwrap(),
                "bucket" => r.string("bucket").unwrap(),
                "value" => r.opt_string("value").unwrap().unwrap_or_default(),
            };
            w.table.delete("Aggregate", key).await.unwrap();
            removed += 1;
        }
    }
    assert!(removed > 10, "the traffic wrote weekly items ({removed})");

    // Unmarked, and once marked now, its weeks so far are read as days: the same answers.
    let sites = Arc::new(Sites::new(w.table.clone()));
    let stats = Stats::new(w.table.clone(), sites.clone());
    assert_eq!(sites.get(&w.site.site_id).await.unwrap().unwrap().weeks_from_ms, i64::MAX);
    assert_eq!((stats.query(&totals).await.unwrap(), stats.query(&pages).await.unwrap()), expected);
    let now = jiff::Timestamp::now().as_millisecond();
    assert_eq!(sites.mark_weekly_aggregates(now).await.unwrap(), 1);
    assert_eq!(sites.mark_weekly_aggregates(now + 1).await.unwrap(), 0, "a mark is kept");
    assert_eq!(sites.get(&w.site.site_id).await.unwrap().unwrap().weeks_from_ms, now);
    assert_eq!((stats.query(&totals).await.unwrap(), stats.query(&pages).await.unwrap()), expected);

    // Were its weeks taken as complete, the missing weekly items would lose the traffic.
    let site_key = store::item! { "site_id" => w.site.site_id.as_str() };
    w.table.update("Site", site_key, model::expr::Update::new().set("weeks_from", 0i64)).await.unwrap();
    let fresh = Stats::new(w.table.clone(), Arc::new(Sites::new(w.table.clone())));
    assert_ne!(rows(&fresh.query(&totals).await.unwrap()), rows(&expected.0));
}

/// Recent sessions come from the session log: the latest by their last event, whichever flush
/// or start time they had, for a handful of requests however busy the day was.
#[tokio::test]
async fn recent_sessions_cost_what_they_list_not_the_days_traffic() {
    let w = world().await;
    let sites = Arc::new(Sites::new(w.table.clone()));
    let site = sites.add("busy.example", "UTC").await.unwrap();
    let config = AggregatorConfig { flush_interval: Duration::from_secs(3600), ..AggregatorConfig::default() };
    let aggregator = Aggregator::start(w.table.clone(), sites.clone(), config).await.unwrap();
    let enricher = Arc::new(Enricher::new(EnricherConfig::default()).unwrap());
    let pipeline = Pipeline::new(w.table.clone(), sites.clone(), enricher, aggregator.clone());
    let midnight = w.day.to_zoned(jiff::tz::TimeZone::UTC).unwrap().timestamp().as_millisecond();
    // 300 one-page visits two minutes apart from midnight, and one long visit: a page every 20
    // minutes from 01:00 to 23:40, so it starts early and ends last.
    let mut script: Vec<(String, String, i64)> =
        (0..300).map(|i| (format!("v{i}"), format!("/p{i}"), midnight + i * 120_000)).collect();
    script.extend((0..68).map(|i| ("long".to_owned(), format!("/l{i}"), midnight + HOUR + i * 1_200_000)));
    script.sort_by_key(|(_, _, at)| *at);
    for (n, (visitor, path, at)) in script.into_iter().enumerate() {
        let mut raw = RawEvent::pageview(&format!("https://busy.example{path}"), "busy.example");
        raw.user_agent = FIREFOX.into();
        raw.timestamp_ms = at;
        let event = ImportEvent { raw, visitor: Some(visitor), country: None, client: None };
        assert!(matches!(pipeline.import(&site, event).await, IngestResult::Accepted));
        if n % 50 == 49 {
            aggregator.flush_now().await.unwrap();
        }
    }
    aggregator.flush_now().await.unwrap();

    let metered = w.table.metered();
    let stats = Stats::new(metered.clone(), sites);
    let recent = stats.recent_sessions(&site.site_id, &w.day.to_string(), 4).await.unwrap();
    let summary: Vec<(&str, &str, i64, u32)> = recent
        .iter()
        .map(|s| (s.entry_page.as_str(), s.exit_page.as_str(), s.last_seen_at - midnight, s.pageviews))
        .collect();
    assert_eq!(
        summary,
        [
            ("/l0", "/l67", HOUR + 67 * 1_200_000, 68),
            ("/p299", "/p299", 299 * 120_000, 1),
            ("/p298", "/p298", 298 * 120_000, 1),
            ("/p297", "/p297", 297 * 120_000, 1),
        ]
    );
    let requests = metered.capacity().requests;
    assert!(requests <= 8, "four sessions and a page of the log, not the day's 368 events: {requests} requests");
    assert_eq!(stats.recent_sessions(&site.site_id, &w.day.to_string(), 1000).await.unwrap().len(), 301);
    assert!(stats.recent_sessions(&site.site_id, &w.day.to_string(), 0).await.unwrap().is_empty());
    let next_day = w.day.tomorrow().unwrap().to_string();
    assert!(stats.recent_sessions(&site.site_id, &next_day, 10).await.unwrap().is_empty());
}

/// Hour items are stored for totals, pages and sources only; an hourly series filtered or broken
/// down by another dimension is answered from the raw events, with the hand-counted numbers and
/// the same numbers the stored hours give where both exist.
#[tokio::test]
async fn hourly_series_of_any_dimension_come_from_the_raw_events() {
    let w = world().await;
    let metrics = [Metric::Visitors, Metric::Visits, Metric::Pageviews, Metric::Events];
    let firefox = Filter::new(FilterOp::Is, "visit:browser", vec!["Firefox".into()]).unwrap();
    let stored = rows(&w.stats.query(&q(&w, &metrics, &["time:hour"], vec![])).await.unwrap());
    let filtered = rows(&w.stats.query(&q(&w, &metrics, &["time:hour"], vec![firefox])).await.unwrap());
    let day = w.day.to_string();
    let hour = |h: &str, n: [i64; 4]| (vec![format!("{day} {h}:00:00")], n.iter().map(|&x| Int(x)).collect::<Vec<_>>());
    // a: two page views at 10:00 and 10:01; b: one at 11:00; c: a page view and Signup at 12:00.
    let expected = vec![hour("10", [1, 1, 2, 2]), hour("11", [1, 1, 1, 1]), hour("12", [1, 1, 1, 2])];
    assert_eq!(stored, expected, "the stored hours");
    assert_eq!(filtered, expected, "every visitor used Firefox, so the filter keeps everything");
    let by_browser =
        rows(&w.stats.query(&q(&w, &[Metric::Visitors], &["time:hour", "visit:browser"], vec![])).await.unwrap());
    let labels: Vec<(String, String, Value)> =
        by_browser.into_iter().map(|(d, m)| (d[0].clone(), d[1].clone(), m[0])).collect();
    let hours = ["10", "11", "12"].map(|h| (format!("{day} {h}:00:00"), "Firefox".to_owned(), Int(1)));
    assert_eq!(labels, hours);
    let safari = Filter::new(FilterOp::Is, "visit:browser", vec!["Safari".into()]).unwrap();
    assert!(w.stats.query(&q(&w, &metrics, &["time:hour"], vec![safari])).await.unwrap().is_empty());
}
