//! Exactly-once aggregation end to end on the embedded engine: events are written as the pipeline
//! writes them (a ticket, the `Event` item, the commit), flushed, and the aggregate items checked
//! against hand-computed numbers and against a rebuild from the raw events, through crashes,
//! interrupted flushes, replays and two runs writing the same items.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use analytics::aggregate::{
    AggregateError, Aggregator, AggregatorConfig, RebuildMode, RebuildRange, RebuildReport, SiteSettings,
    SiteSettingsSource, rebuild,
};
use analytics::period::{SiteZone, parse_date};
use analytics::schema::tally_schema;
use analytics::stored::{Counters, PrevState, StoredEvent, Visit, VisitAttrs};
use async_trait::async_trait;
use model::Table;
use proptest::prelude::*;
use store::{Store, StoreError, item};
use store_embedded::EmbeddedStore;

use crate::hooked::{Hooked, Hooks, Write};

/// 2026-11-22T07:30:00Z.
const T0: i64 = 1_795_332_600_000;

/// Site settings from a map: `S1` in UTC, `S2` in Berlin.
struct Sites(HashMap<String, SiteSettings>);

#[async_trait]
impl SiteSettingsSource for Sites {
    async fn site_settings(&self, site_id: &str) -> Result<Option<SiteSettings>, AggregateError> {
        Ok(self.0.get(site_id).cloned())
    }
}

fn sites() -> Arc<Sites> {
    let settings = |zone: SiteZone| SiteSettings { zone, ..SiteSettings::fallback() };
    Arc::new(Sites(HashMap::from([
        ("S1".to_owned(), settings(SiteZone::utc())),
        ("S2".to_owned(), settings(SiteZone::new("Europe/Berlin").expect("a known zone"))),
    ])))
}

struct Harness {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    table: Table,
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).expect("the embedded engine opens"));
    let table = Table::new(store.clone(), tally_schema("tally"));
    table.create_table().await.expect("Tally's table is created");
    Harness { _dir: dir, store, table }
}

/// Flushes and heartbeats only when a test asks.
fn quiet() -> AggregatorConfig {
    AggregatorConfig {
        flush_interval: Duration::from_secs(3600),
        heartbeat_interval: Duration::from_secs(3600),
        // The events of these tests are from a fixed past day; their minute items are checked.
        minute_items_for: Duration::from_secs(100 * 365 * 86_400),
        // Periodic flushes (`flush_tick`) always defer weeks and months, however slowly a
        // loaded machine runs the test; one test narrows it.
        weeks_and_months_lag: Duration::from_secs(3600),
        ..AggregatorConfig::default()
    }
}

/// A session under construction: each event's `prev` is the fold of the session's earlier events
/// (in `seq` order, which is the order they were stored in, whatever their times).
struct Session {
    site_id: String,
    visitor_id: analytics::visitor::VisitorId,
    session_id: ulid::Ulid,
    visit: VisitAttrs,
    state: PrevState,
}

impl Session {
    fn new(site_id: &str, visitor: u64, session: u32, start_ts: i64, source: &str) -> Session {
        Session {
            site_id: site_id.to_owned(),
            visitor_id: analytics::visitor::VisitorId::from_u64(visitor),
            session_id: format!("01JDB3Y5C8M9V7T2X4K6P{session:05}").parse().expect("a ULID"),
            visit: VisitAttrs::new(
                start_ts,
                &Visit { source, country: "DE", device: "Desktop", browser: "Firefox", ..Visit::default() },
            ),
            state: PrevState::default(),
        }
    }

    fn event(&mut self, name: &str, path: &str, ts: i64, interactive: bool) -> StoredEvent {
        if self.state.is_empty() {
            self.visit = self.visit.with(|v| v.entry_page = path);
        }
        let e = StoredEvent {
            site_id: self.site_id.as_str().into(),
            day: analytics::visitor::UtcDay::from_unix_ms(self.visit.start_ts),
            visitor_id: self.visitor_id,
            session_id: self.session_id,
            seq: self.state.events,
            name: name.to_owned(),
            ts,
            hostname: "example.com".into(),
            path: path.to_owned(),
            props: if name == "Signup" { [("plan".to_owned(), "pro".to_owned())].into() } else { BTreeMap::new() },
            revenue: None,
            interactive,
            goals: if name == "Signup" { vec!["Signup".into()] } else { vec![] },
            visit: std::sync::Arc::new(self.visit.clone()),
            prev: self.state.clone(),
            run: "".into(),
            epoch: 0,
            ttl: ts / 1000 + 30 * 86_400,
        };
        self.state = e.next();
        e
    }

    fn pageview(&mut self, path: &str, ts: i64) -> StoredEvent {
        self.event("pageview", path, ts, true)
    }
}

/// Stores `e` as the pipeline does: partition registered, ticket taken, the event written with
/// the ticket's run and epoch, the ticket committed.
async fn ingest(agg: &Aggregator, table: &Table, mut e: StoredEvent) -> StoredEvent {
    agg.register_partition(&e.site_id, e.day).await.expect("the partition is registered");
    let ticket = agg.begin();
    e.run = ticket.run();
    e.epoch = ticket.epoch();
    analytics::event_store::store_events(table, std::slice::from_ref(&e)).await.expect("the event is stored");
    ticket.commit(&e);
    e
}

/// An aggregate item's counters and visitor estimate, or `None` when it is not stored.
async fn item(table: &Table, period: &str, dimension: &str, bucket: &str, value: &str) -> Option<(Counters, u64)> {
    let r = table
        .get(
            "Aggregate",
            item! { "site_id" => "S1", "period" => period, "dimension" => dimension, "bucket" => bucket, "value" => value },
        )
        .await
        .expect("the item is read")?;
    let n = |name: &str| r.opt_i64(name).expect("a number").unwrap_or(0);
    let visitors = match r.get("visitors_sketch") {
        Some(store::AttributeValue::B(b)) => {
            analytics::sketch::VisitorSketch::from_bytes(b).expect("a sketch").estimate()
        }
        _ => 0,
    };
    Some((
        Counters {
            pageviews: n("pageviews"),
            events: n("events"),
            visits: n("visits"),
            bounces: n("bounces"),
            duration_ms: n("duration_ms"),
            visit_pageviews: n("visit_pageviews"),
        },
        visitors,
    ))
}

async fn verify(table: &Table, site: &str, first: &str, last: &str) -> RebuildReport {
    let sites = sites();
    let (first, last) = (parse_date(first).expect("a date"), parse_date(last).expect("a date"));
    rebuild(table, sites.as_ref(), site, RebuildRange::new(first, last), RebuildMode::Verify, &|_| {})
        .await
        .expect("the rebuild runs")
}

/// Every aggregate item, to compare snapshots.
async fn aggregates(table: &Table) -> Vec<store::Item> {
    let mut items: Vec<store::Item> = table
        .scan()
        .entity("Aggregate")
        .all()
        .await
        .expect("the table scans")
        .into_iter()
        .map(|r| r.into_item())
        .collect();
    items.sort_by(|a, b| {
        format!("{:?}{:?}", a.get("pk"), a.get("sk")).cmp(&format!("{:?}{:?}", b.get("pk"), b.get("sk")))
    });
    items
}

fn counters(
    pageviews: i64,
    events: i64,
    visits: i64,
    bounces: i64,
    duration_ms: i64,
    visit_pageviews: i64,
) -> Counters {
    Counters { pageviews, events, visits, bounces, duration_ms, visit_pageviews }
}

/// Two visits, flushed in two epochs: A views `/` then `/pricing` a minute later; B views `/` and
/// scrolls (not interactive) 30 seconds later, a bounce.
async fn two_visits(agg: &Aggregator, table: &Table) -> Vec<StoredEvent> {
    let mut a = Session::new("S1", 0xa, 1, T0, "Google");
    let mut b = Session::new("S1", 0xb, 2, T0 + 120_000, "");
    let mut stored = vec![ingest(agg, table, a.pageview("/", T0)).await];
    agg.flush_now().await.expect("the first epoch flushes");
    stored.push(ingest(agg, table, b.pageview("/", T0 + 120_000)).await);
    stored.push(ingest(agg, table, a.pageview("/pricing", T0 + 60_000)).await);
    stored.push(ingest(agg, table, b.event("Scroll", "/", T0 + 150_000, false)).await);
    agg.flush_now().await.expect("the second epoch flushes");
    stored
}

#[tokio::test]
async fn two_visits_add_up_to_hand_computed_aggregates() {
    let h = harness().await;
    let agg = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    let events = two_visits(&agg, &h.table).await;
    assert_eq!(events.iter().map(|e| e.epoch).collect::<Vec<_>>(), [1, 2, 2, 2]);

    let day = "2026-11-22";
    assert_eq!(item(&h.table, "day", "total", day, "").await, Some((counters(3, 4, 2, 1, 90_000, 3), 2)));
    assert_eq!(item(&h.table, "month", "total", "2026-11", "").await, Some((counters(3, 4, 2, 1, 90_000, 3), 2)));
    assert_eq!(item(&h.table, "week", "total", "2026-W47", "").await, Some((counters(3, 4, 2, 1, 90_000, 3), 2)));
    assert_eq!(item(&h.table, "hour", "total", "2026-11-22T07", "").await, Some((counters(3, 4, 2, 1, 90_000, 3), 2)));
    assert_eq!(item(&h.table, "day", "event:page", day, "/").await, Some((counters(2, 2, 0, 0, 0, 0), 2)));
    assert_eq!(item(&h.table, "day", "event:page", day, "/pricing").await, Some((counters(1, 1, 0, 0, 0, 0), 1)));
    // The exit page moved from `/` to `/pricing` for A: `/` keeps only B's bouncing visit.
    assert_eq!(item(&h.table, "day", "visit:exit_page", day, "/").await, Some((counters(0, 0, 1, 1, 30_000, 1), 0)));
    assert_eq!(
        item(&h.table, "day", "visit:exit_page", day, "/pricing").await,
        Some((counters(0, 0, 1, 0, 60_000, 2), 0))
    );
    assert_eq!(item(&h.table, "day", "visit:source", day, "Google").await, Some((counters(2, 2, 1, 0, 60_000, 2), 1)));
    assert_eq!(item(&h.table, "day", "visit:source", day, "").await, Some((counters(1, 2, 1, 1, 30_000, 1), 1)));
    assert_eq!(item(&h.table, "day", "event:name", day, "Scroll").await, Some((counters(0, 1, 0, 0, 0, 0), 1)));
    // Minutes count events, not visits.
    assert_eq!(item(&h.table, "minute", "total", "0029922210", "").await, Some((counters(1, 1, 0, 0, 0, 0), 1)));

    let stats = agg.stats();
    assert_eq!((stats.epochs_flushed, stats.pending_events, stats.flush_errors), (2, 0, 0));
    assert!(stats.last_flush_write_units > 0.0 && stats.flush_write_units > stats.last_flush_write_units);
    let report = verify(&h.table, "S1", "2026-11-01", "2026-11-30").await;
    assert_eq!((report.events_read, report.differences.len()), (4, 0), "{:#?}", report.differences);
    assert!(report.items_compared > 40);
    agg.shutdown().await.expect("the run shuts down");
}

/// A flush reads neither the items it creates (new ones, created under the condition that they
/// do not exist), minutes' and hours', nor those it wrote before (cached).
#[tokio::test]
async fn a_flush_reads_neither_new_items_nor_cached_ones() {
    let h = harness().await;
    let agg = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    let mut a = Session::new("S1", 0xa, 1, T0, "Google");
    ingest(&agg, &h.table, a.pageview("/", T0)).await;
    agg.flush_now().await.expect("flushes");
    // One read unit per day, week or month item (looked for, not found), none for the others.
    let stored: Vec<String> = aggregates(&h.table)
        .await
        .iter()
        .filter_map(|i| i.get("period").and_then(|p| p.as_s()).map(str::to_owned))
        .collect();
    assert!(stored.iter().any(|p| p == "hour"));
    let read_first = stored.iter().filter(|p| ["day", "week", "month"].contains(&p.as_str())).count();
    assert_eq!(agg.stats().last_flush_read_units, read_first as f64, "hours are not read");
    assert_eq!((agg.stats().wrong_guesses, agg.stats().conflicts), (0, 0));
    assert_eq!(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await.differences, vec![]);
    ingest(&agg, &h.table, a.pageview("/", T0 + 1_000)).await;
    agg.flush_now().await.expect("flushes");
    // The second flush touches the same items, all cached, so it reads none of them again.
    let stats = agg.stats();
    assert_eq!(stats.last_flush_read_units, 0.0);
    assert!(stats.last_flush_write_units > 0.0);
    // A first page view touches 62 items (listed in the unit test `a_first_page_view`); the
    // second page view of the same page touches the same ones.
    assert_eq!(stats.items_written, 2 * 62);
    agg.shutdown().await.expect("shuts down");
}

#[tokio::test]
async fn applying_the_same_epochs_twice_changes_nothing() {
    let h = harness().await;
    let a = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    two_visits(&a, &h.table).await;
    a.abort();
    let before = aggregates(&h.table).await;
    // Pretend the run never recorded its flushes and died: recovery replays every epoch of it.
    h.table
        .update(
            "Run",
            item! { "run_id" => a.run_id() },
            model::expr::Update::new().set("flushed_epoch", 0).set("heartbeat_ms", 0),
        )
        .await
        .expect("the run item is rewound");
    let b = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("a second run starts");
    wait_recovered(&h.table, a.run_id()).await;
    assert_eq!(aggregates(&h.table).await, before, "a replayed epoch must be skipped by every item");
    assert_eq!(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await.differences, vec![]);
    b.shutdown().await.expect("shuts down");
}

async fn run_state(table: &Table, run_id: &str) -> String {
    let r = table.get("Run", item! { "run_id" => run_id }).await.expect("reads").expect("the run exists");
    r.opt_string("state").expect("a string").unwrap_or("live").to_owned()
}

/// Waits (up to 30 s: a loaded machine may delay the beat that recovers it) until `run_id` is
/// marked recovered.
async fn wait_recovered(table: &Table, run_id: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if run_state(table, run_id).await == "recovered" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run_id} was not recovered: {}", run_state(table, run_id).await);
}

fn recovering() -> AggregatorConfig {
    AggregatorConfig {
        heartbeat_interval: Duration::from_millis(50),
        dead_after: Duration::from_millis(300),
        flush_interval: Duration::from_secs(3600),
        ..quiet()
    }
}

/// The latest time the session log holds for each visitor active on `site` on UTC day `day`.
async fn logged(table: &Table, site: &str, day: &str) -> BTreeMap<u64, i64> {
    let records = table.query("SessionLog").key(item! { "site_id" => site, "day" => day }).all().await.unwrap();
    let mut latest = BTreeMap::new();
    for r in records {
        let Some(store::AttributeValue::B(bytes)) = r.get("sessions") else { panic!("a log without entries") };
        for (id, ts) in analytics::aggregate::session_log::decode(bytes).unwrap() {
            let at = latest.entry(id.visitor.as_u64()).or_insert(ts);
            *at = (*at).max(ts);
        }
    }
    latest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_run_is_recovered_by_another() {
    let h = harness().await;
    let a = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    let mut s = Session::new("S1", 0xa, 1, T0, "Google");
    let mut t = Session::new("S1", 0xb, 2, T0 + 5_000, "Newsletter");
    ingest(&a, &h.table, s.pageview("/", T0)).await;
    ingest(&a, &h.table, t.pageview("/blog", T0 + 5_000)).await;
    a.flush_now().await.expect("flushes");
    // Two more epochs that are never flushed, then the process dies.
    ingest(&a, &h.table, s.pageview("/pricing", T0 + 60_000)).await;
    ingest(&a, &h.table, t.event("Signup", "/signup", T0 + 70_000, true)).await;
    assert_eq!(a.stats().pending_events, 2);
    a.abort();
    assert!(!verify(&h.table, "S1", "2026-11-01", "2026-11-30").await.differences.is_empty());
    assert_eq!(logged(&h.table, "S1", "2026-11-22").await, BTreeMap::from([(0xa, T0), (0xb, T0 + 5_000)]));

    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = Aggregator::start(h.table.clone(), sites(), recovering()).await.expect("a second run starts");
    wait_recovered(&h.table, a.run_id()).await;
    let report = verify(&h.table, "S1", "2026-11-01", "2026-11-30").await;
    assert_eq!((report.events_read, report.differences), (4, vec![]));
    assert_eq!(item(&h.table, "day", "total", "2026-11-22", "").await, Some((counters(3, 4, 2, 0, 125_000, 3), 2)));
    let recovered = BTreeMap::from([(0xa, T0 + 60_000), (0xb, T0 + 70_000)]);
    assert_eq!(logged(&h.table, "S1", "2026-11-22").await, recovered, "recovery logs the dead run's sessions");
    b.shutdown().await.expect("shuts down");
    assert_eq!(run_state(&h.table, b.run_id()).await, "done");
}

/// A store that fails every write after the first `n` once armed, as a flush cut off by a crash
/// or an outage would.
pub(crate) type FailingStore = Hooked<Failing>;

/// [`FailingStore`]'s state.
pub(crate) struct Failing {
    /// Writes still allowed; negative means unarmed.
    left: AtomicI64,
    /// Writes to fail before any of the above applies.
    fail_first: AtomicI64,
    /// When set, each put waits for a permit of `gate` (the test lets writes through one by one).
    gated: std::sync::atomic::AtomicBool,
    gate: tokio::sync::Semaphore,
    /// Puts begun, let through the gate or not.
    puts_begun: std::sync::atomic::AtomicUsize,
    /// The size of each item put, in order, by DynamoDB's rules.
    put_sizes: std::sync::Mutex<Vec<usize>>,
}

impl FailingStore {
    /// Around `inner`, letting every write through until told otherwise.
    pub(crate) fn around(inner: Arc<dyn Store>) -> FailingStore {
        let failing = Failing {
            left: AtomicI64::new(-1),
            fail_first: AtomicI64::new(0),
            gated: Default::default(),
            gate: tokio::sync::Semaphore::new(0),
            puts_begun: Default::default(),
            put_sizes: Default::default(),
        };
        Hooked::new(inner, failing)
    }
}

impl Failing {
    /// Fails the next `n` writes, then lets writes through (as armed before, if it was).
    pub(crate) fn fail_next(&self, n: i64) {
        self.fail_first.store(n, Ordering::SeqCst);
    }

    fn arm(&self, n: i64) {
        self.left.store(n, Ordering::SeqCst);
    }

    fn disarm(&self) {
        self.left.store(-1, Ordering::SeqCst);
    }

    fn write(&self) -> store::Result<()> {
        if self.fail_first.fetch_sub(1, Ordering::SeqCst) > 0 {
            return Err(StoreError::Internal("injected write failure".into()));
        }
        self.fail_first.store(0, Ordering::SeqCst);
        let left = self.left.load(Ordering::SeqCst);
        if left < 0 {
            return Ok(());
        }
        if left == 0 || self.left.fetch_sub(1, Ordering::SeqCst) <= 0 {
            self.left.store(0, Ordering::SeqCst);
            return Err(StoreError::Internal("injected write failure".into()));
        }
        Ok(())
    }
}

#[async_trait]
impl Hooks for Failing {
    async fn before(&self, write: Write<'_>) -> store::Result<()> {
        let Write::Put(put) = write else { return self.write() };
        self.puts_begun.fetch_add(1, Ordering::SeqCst);
        if self.gated.load(Ordering::SeqCst) {
            self.gate.acquire().await.expect("the gate stays open").forget();
        }
        self.write()?;
        self.put_sizes.lock().expect("not poisoned").push(store::item_size(&put.item));
        Ok(())
    }
}

async fn failing(h: &Harness) -> (Arc<FailingStore>, Table) {
    let failing = Arc::new(FailingStore::around(h.store.clone()));
    let table = Table::new(failing.clone(), tally_schema("tally"));
    (failing, table)
}

/// Three sessions over two hours, with props, goals and a late event.
async fn some_traffic(agg: &Aggregator, table: &Table) -> usize {
    let mut a = Session::new("S1", 0xa, 1, T0, "Google");
    let mut b = Session::new("S1", 0xb, 2, T0 + 3_600_000, "");
    let mut c = Session::new("S1", 0xa, 3, T0 + 7_200_000, "Newsletter");
    let events = vec![
        a.pageview("/", T0),
        b.pageview("/docs", T0 + 3_600_000),
        a.pageview("/pricing", T0 + 120_000),
        a.event("Signup", "/signup", T0 + 180_000, true),
        b.pageview("/docs/start", T0 + 3_660_000),
        a.pageview("/about", T0 + 60_000),
        c.pageview("/", T0 + 7_200_000),
    ];
    let n = events.len();
    for e in events {
        ingest(agg, table, e).await;
    }
    n
}

#[tokio::test]
async fn an_interrupted_flush_is_retried_without_counting_twice() {
    let h = harness().await;
    let (failing, table) = failing(&h).await;
    let agg = Aggregator::start(table, sites(), quiet()).await.expect("the run starts");
    some_traffic(&agg, &h.table).await;
    failing.arm(10);
    assert!(agg.flush_now().await.is_err());
    assert_eq!(agg.stats().flush_errors, 1);
    assert_eq!(agg.stats().pending_events, 7, "an unflushed epoch is kept");
    let partial = verify(&h.table, "S1", "2026-11-01", "2026-11-30").await;
    assert!(!partial.differences.is_empty(), "the flush was cut off halfway");
    failing.disarm();
    agg.flush_now().await.expect("the retry flushes");
    let report = verify(&h.table, "S1", "2026-11-01", "2026-11-30").await;
    assert_eq!((report.events_read, report.differences), (7, vec![]));
    assert_eq!(agg.stats().pending_events, 0);
    agg.shutdown().await.expect("shuts down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_flush_of_a_crashed_run_is_completed_by_recovery() {
    let h = harness().await;
    let (failing, table) = failing(&h).await;
    let a = Aggregator::start(table, sites(), quiet()).await.expect("the run starts");
    some_traffic(&a, &h.table).await;
    failing.arm(25);
    assert!(a.flush_now().await.is_err());
    a.abort();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = Aggregator::start(h.table.clone(), sites(), recovering()).await.expect("a second run starts");
    wait_recovered(&h.table, a.run_id()).await;
    let report = verify(&h.table, "S1", "2026-11-01", "2026-11-30").await;
    assert_eq!((report.events_read, report.differences), (7, vec![]));
    // The 25 items the interrupted flush reached already had the epoch: recovery skipped them.
    // The recovery is counted once its state is written, a moment after the table says so.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while b.stats().runs_recovered == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = b.stats();
    assert_eq!(stats.runs_recovered, 1);
    assert_eq!(stats.items_skipped, 25);
    b.shutdown().await.expect("shuts down");
}

/// The pageviews of the site's month and week totals as stored (`None` while unwritten).
async fn month_and_week_pageviews(table: &Table) -> (Option<i64>, Option<i64>) {
    let month = item(table, "month", "total", "2026-11", "").await.map(|(c, _)| c.pageviews);
    let week = item(table, "week", "total", "2026-W47", "").await.map(|(c, _)| c.pageviews);
    (month, week)
}

/// The periodic flush leaves an epoch's weeks and months to the next flush, which writes them
/// with its own epoch's deltas under its mark, or alone when no epoch came: each epoch once, and
/// the run records an epoch as flushed only once its weeks and months are written.
#[tokio::test]
async fn weeks_and_months_wait_one_flush_and_count_each_epoch_once() {
    let h = harness().await;
    let agg = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    let mut a = Session::new("S1", 0xa, 1, T0, "Google");
    let day = "2026-11-22";
    ingest(&agg, &h.table, a.pageview("/", T0)).await;
    agg.flush_tick().await.expect("flushes");
    assert_eq!(item(&h.table, "day", "total", day, "").await.map(|(c, _)| c.pageviews), Some(1));
    assert_eq!(month_and_week_pageviews(&h.table).await, (None, None), "the week and the month wait");
    let stats = agg.stats();
    assert_eq!((stats.pending_events, stats.flushed_epoch), (1, 0), "not flushed while the month waits");

    ingest(&agg, &h.table, a.pageview("/pricing", T0 + 60_000)).await;
    agg.flush_tick().await.expect("flushes");
    assert_eq!(month_and_week_pageviews(&h.table).await, (Some(2), Some(2)), "the next epoch took them along");
    let stats = agg.stats();
    assert_eq!((stats.pending_events, stats.flushed_epoch), (0, 2));

    ingest(&agg, &h.table, a.pageview("/about", T0 + 120_000)).await;
    agg.flush_tick().await.expect("flushes");
    assert_eq!(month_and_week_pageviews(&h.table).await, (Some(2), Some(2)));
    agg.flush_tick().await.expect("a flush without a new epoch writes them alone");
    assert_eq!(month_and_week_pageviews(&h.table).await, (Some(3), Some(3)));
    let stats = agg.stats();
    assert_eq!((stats.pending_events, stats.flushed_epoch, stats.epochs_flushed), (0, 3, 3));
    let report = verify(&h.table, "S1", "2026-11-01", "2026-11-30").await;
    assert_eq!((report.events_read, report.differences), (3, vec![]));
    agg.shutdown().await.expect("shuts down");
}

/// An epoch whose weeks and months would fall further behind than `weeks_and_months_lag` (by
/// its oldest event's age and the flushes' pace) writes them at once.
#[tokio::test]
async fn weeks_and_months_do_not_wait_past_their_lag() {
    let h = harness().await;
    let config = AggregatorConfig { weeks_and_months_lag: Duration::from_millis(5), ..quiet() };
    let agg = Aggregator::start(h.table.clone(), sites(), config).await.expect("the run starts");
    let mut a = Session::new("S1", 0xa, 1, T0, "Google");
    ingest(&agg, &h.table, a.pageview("/", T0)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    agg.flush_tick().await.expect("flushes");
    assert_eq!(month_and_week_pageviews(&h.table).await, (Some(1), Some(1)));
    assert_eq!((agg.stats().pending_events, agg.stats().flushed_epoch), (0, 1));
    agg.shutdown().await.expect("shuts down");
}

/// A process that dies while an epoch's weeks and months wait loses none of them: its run did not
/// record the epoch as flushed, so recovery reads it again, skips every item the flush wrote and
/// adds the epoch to the weeks and months once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_dies_while_weeks_and_months_wait_is_recovered_whole() {
    let h = harness().await;
    let a = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    let n = some_traffic(&a, &h.table).await;
    a.flush_tick().await.expect("flushes");
    assert_eq!(month_and_week_pageviews(&h.table).await, (None, None));
    let written = a.stats().items_written;
    a.abort();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = Aggregator::start(h.table.clone(), sites(), recovering()).await.expect("a second run starts");
    wait_recovered(&h.table, a.run_id()).await;
    let report = verify(&h.table, "S1", "2026-11-01", "2026-11-30").await;
    assert_eq!((report.events_read, report.differences), (n as u64, vec![]));
    assert_eq!(b.stats().items_skipped, written, "every item the flush wrote already had the epoch");
    assert!(month_and_week_pageviews(&h.table).await.0.is_some());
    b.shutdown().await.expect("shuts down");
}

/// Weeks and months whose write alone was cut off are written alone again, under their own
/// epoch, before a later epoch touches them: taken along by a later epoch, the items the cut-off
/// write reached would count their epoch twice.
#[tokio::test]
async fn weeks_and_months_whose_write_alone_failed_go_before_a_later_epoch() {
    let h = harness().await;
    let (failing, table) = failing(&h).await;
    let agg = Aggregator::start(table, sites(), quiet()).await.expect("the run starts");
    let mut a = Session::new("S1", 0xa, 1, T0, "Google");
    ingest(&agg, &h.table, a.pageview("/", T0)).await;
    agg.flush_tick().await.expect("flushes");
    failing.arm(1);
    assert!(agg.flush_tick().await.is_err(), "the write alone is cut off after one item");
    assert_eq!(agg.stats().pending_events, 1);
    failing.disarm();
    ingest(&agg, &h.table, a.pageview("/pricing", T0 + 60_000)).await;
    agg.flush_tick().await.expect("flushes");
    assert_eq!(month_and_week_pageviews(&h.table).await, (Some(1), Some(1)), "the first epoch's, alone");
    agg.flush_tick().await.expect("flushes");
    assert_eq!(month_and_week_pageviews(&h.table).await, (Some(2), Some(2)));
    let report = verify(&h.table, "S1", "2026-11-01", "2026-11-30").await;
    assert_eq!((report.events_read, report.differences), (2, vec![]));
    assert_eq!(agg.stats().flushed_epoch, 2);
    agg.shutdown().await.expect("shuts down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_writing_the_same_items_add_up() {
    let h = harness().await;
    let a = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("run a starts");
    let b = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("run b starts");
    let mut n = 0;
    for round in 0..4u32 {
        let mut sessions: Vec<Session> = (0..6u64)
            .map(|v| {
                Session::new("S1", v + 16 * u64::from(round), round * 10 + v as u32, T0 + i64::from(round), "Google")
            })
            .collect();
        for (i, s) in sessions.iter_mut().enumerate() {
            let agg = if i % 2 == 0 { &a } else { &b };
            ingest(agg, &h.table, s.pageview("/", T0 + i64::from(round))).await;
            ingest(agg, &h.table, s.pageview("/next", T0 + i64::from(round) + 10_000)).await;
            n += 2;
        }
        let (ra, rb) = tokio::join!(a.flush_now(), b.flush_now());
        ra.expect("run a flushes");
        rb.expect("run b flushes");
    }
    assert_eq!(
        item(&h.table, "day", "total", "2026-11-22", "").await.map(|(c, v)| (c.pageviews, c.visits, c.bounces, v)),
        Some((n, 24, 0, 24))
    );
    assert_eq!(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await.differences, vec![]);
    a.shutdown().await.expect("a shuts down");
    b.shutdown().await.expect("b shuts down");
}

/// Counts the puts of aggregate items that reach the store.
#[derive(Default)]
struct AggregatePuts(std::sync::atomic::AtomicU64);

#[async_trait]
impl Hooks for AggregatePuts {
    async fn before(&self, write: Write<'_>) -> store::Result<()> {
        if let Write::Put(put) = write
            && put.item.contains_key("dimension")
        {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A run whose cache lacks items another run wrote guesses them new, has the table refuse the
/// guesses, and adds to the items as stored (no count lost, no refusal counted as a conflict);
/// having met such items mostly, it reads the next uncached ones first: one put per item.
#[tokio::test]
async fn a_run_meeting_items_another_wrote_adds_to_them_then_reads_such_items_first() {
    let h = harness().await;
    // Enough for each period to meet 64 uncached items (an hour keeps three dimensions).
    let pages: Vec<String> = (0..80).map(|i| format!("/p{i}")).collect();
    let day_ms = 86_400_000;
    let traffic = |first_visitor: u64, at: i64| {
        pages
            .iter()
            .enumerate()
            .map(|(i, page)| {
                let mut s = Session::new("S1", first_visitor + i as u64, first_visitor as u32 + i as u32, at, "Google");
                s.pageview(page, at + i as i64)
            })
            .collect::<Vec<_>>()
    };
    let a = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("run a starts");
    for day in 0..2 {
        for e in traffic(100, T0 + day * day_ms) {
            ingest(&a, &h.table, e).await;
        }
    }
    a.shutdown().await.expect("a shuts down");

    let puts = Arc::new(Hooked::new(h.store.clone(), AggregatePuts::default()));
    let table = Table::new(puts.clone(), tally_schema("tally"));
    let b = Aggregator::start(table.clone(), sites(), quiet()).await.expect("run b starts");
    for e in traffic(1_000, T0) {
        ingest(&b, &table, e).await;
    }
    b.flush_now().await.expect("b flushes");
    let first = b.stats();
    assert!(first.items_written >= 64, "{} items", first.items_written);
    assert_eq!(first.conflicts, 0, "a guess proved wrong is no conflict");
    assert!(first.wrong_guesses >= 64, "{} guesses refused", first.wrong_guesses);
    assert!(puts.0.load(Ordering::SeqCst) > first.items_written, "items guessed new were refused and written again");
    // The day after: items a wrote, none in b's cache but the week's and the month's.
    puts.0.store(0, Ordering::SeqCst);
    for e in traffic(1_000, T0 + day_ms) {
        ingest(&b, &table, e).await;
    }
    b.flush_now().await.expect("b flushes");
    let second = b.stats().items_written - first.items_written;
    assert_eq!(puts.0.load(Ordering::SeqCst), second, "each item written once, read first");
    assert_eq!(b.stats().wrong_guesses, first.wrong_guesses);
    assert_eq!(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await.differences, vec![]);
    assert_eq!(
        item(&h.table, "day", "event:page", "2026-11-23", "/p7").await.map(|(c, v)| (c.pageviews, v)),
        Some((2, 2))
    );
    b.shutdown().await.expect("b shuts down");
}

#[tokio::test]
async fn finished_runs_leave_the_flush_marks() {
    let h = harness().await;
    let a = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("run a starts");
    let mut s = Session::new("S1", 1, 1, T0, "");
    ingest(&a, &h.table, s.pageview("/", T0)).await;
    a.shutdown().await.expect("a shuts down");
    let config = AggregatorConfig { heartbeat_interval: Duration::from_millis(20), ..quiet() };
    let b = Aggregator::start(h.table.clone(), sites(), config).await.expect("run b starts");
    tokio::time::sleep(Duration::from_millis(200)).await;
    ingest(&b, &h.table, s.pageview("/x", T0 + 1_000)).await;
    b.flush_now().await.expect("b flushes");
    let r = h
        .table
        .get("Aggregate", item! { "site_id" => "S1", "period" => "day", "dimension" => "total", "bucket" => "2026-11-22", "value" => "" })
        .await
        .expect("reads")
        .expect("exists");
    let runs: Vec<&str> = r.map("flushes").expect("a map").keys().map(String::as_str).collect();
    assert_eq!(runs, vec![b.run_id()]);
    b.shutdown().await.expect("b shuts down");
}

#[tokio::test]
async fn replace_rewrites_damaged_aggregates() {
    let h = harness().await;
    let agg = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    some_traffic(&agg, &h.table).await;
    agg.shutdown().await.expect("shuts down");
    let key =
        item! { "site_id" => "S1", "period" => "day", "dimension" => "total", "bucket" => "2026-11-22", "value" => "" };
    h.table.update("Aggregate", key.clone(), model::expr::Update::new().set("pageviews", 1000)).await.expect("damaged");
    let report = verify(&h.table, "S1", "2026-11-22", "2026-11-22").await;
    assert_eq!(report.differences.len(), 1, "{:#?}", report.differences);
    let sites = sites();
    let day = parse_date("2026-11-22").expect("a date");
    let replaced = rebuild(&h.table, sites.as_ref(), "S1", RebuildRange::new(day, day), RebuildMode::Replace, &|_| {})
        .await
        .expect("replaces");
    assert!(replaced.items_written > 0);
    assert_eq!(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await.differences, vec![]);
}

#[tokio::test]
async fn replace_rebuilds_weeks_and_months_across_the_range_ends_whole_when_their_events_are_kept() {
    let h = harness().await;
    let agg = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    // Mon 2 Nov, Mon 16 Nov, Wed 18 Nov and Sun 22 Nov 2026, one visitor each, and the usual
    // traffic of Sun 22 Nov.
    let day_ms = 86_400_000;
    for (i, days_before) in [20i64, 6, 4, 0].into_iter().enumerate() {
        let ts = T0 - days_before * day_ms - 3_600_000;
        let mut s = Session::new("S1", 0x100 + i as u64, 100 + i as u32, ts, "");
        ingest(&agg, &h.table, s.pageview("/", ts)).await;
    }
    some_traffic(&agg, &h.table).await;
    agg.shutdown().await.expect("shuts down");
    assert_eq!(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await.differences, vec![], "healthy");

    // Damage the week of 16–22 Nov and the month: both straddle 18–25 Nov.
    let damage = |period: &'static str, bucket: &'static str| {
        let key =
            item! { "site_id" => "S1", "period" => period, "dimension" => "total", "bucket" => bucket, "value" => "" };
        h.table.update("Aggregate", key, model::expr::Update::new().set("pageviews", 1000))
    };
    let damaged = |report: RebuildReport| {
        let mut buckets: Vec<String> = report.differences.iter().map(|d| d.key.bucket.clone()).collect();
        buckets.sort();
        buckets
    };
    damage("week", "2026-W47").await.expect("damaged");
    damage("month", "2026-11").await.expect("damaged");
    assert_eq!(damaged(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await), ["2026-11", "2026-W47"]);

    let sites = sites();
    let (first, last) = (parse_date("2026-11-18").expect("a date"), parse_date("2026-11-25").expect("a date"));
    let replace = |range: RebuildRange| rebuild(&h.table, sites.as_ref(), "S1", range, RebuildMode::Replace, &|_| {});

    // Not told which events are kept: the straddling items are left, damage and all.
    let report = replace(RebuildRange::new(first, last)).await.expect("replaces");
    assert_eq!((report.straddling_rebuilt, report.straddling_left), (0, 3), "W47, W48 and November");
    assert_eq!(damaged(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await), ["2026-11", "2026-W47"]);

    // Events kept from 10 Nov: both weeks are rebuilt whole (W47 from Mon 16 Nov's events on,
    // which lie outside the range), the month, starting earlier, is left.
    let from_10th = RebuildRange::new(first, last).events_from(parse_date("2026-11-10").expect("a date"));
    let report = replace(from_10th).await.expect("replaces");
    assert_eq!((report.straddling_rebuilt, report.straddling_left), (2, 1));
    assert!(report.events_read >= 9, "Mon 16 Nov's event is read: {report:?}");
    assert_eq!(damaged(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await), ["2026-11"]);
    let week = item(&h.table, "week", "total", "2026-W47", "").await.expect("the week is stored");
    assert_eq!((week.0.pageviews, week.1), (3 + 6, 3 + 2), "16, 18 and 22 Nov's visitors and the usual traffic");

    // Events kept from 1 Nov: the month too, with Mon 2 Nov's visitor.
    let from_1st = RebuildRange::new(first, last).events_from(parse_date("2026-11-01").expect("a date"));
    let report = replace(from_1st).await.expect("replaces");
    assert_eq!((report.straddling_rebuilt, report.straddling_left), (3, 0));
    assert_eq!(verify(&h.table, "S1", "2026-11-01", "2026-11-30").await.differences, vec![]);
    let month = item(&h.table, "month", "total", "2026-11", "").await.expect("the month is stored");
    assert_eq!((month.0.pageviews, month.1), (4 + 6, 4 + 2));
    // Days outside the range were read but not written: Mon 2 Nov's day item is as it was.
    assert!(item(&h.table, "day", "total", "2026-11-02", "").await.is_some());
}

/// One generated session: site, visitor, start (minutes into 2026-11-10), and events as
/// (kind, path index, seconds after the start, possibly negative for a late event).
type SessionSpec = (usize, u64, i64, Vec<(u8, usize, i64)>);

fn session_spec() -> impl Strategy<Value = SessionSpec> {
    (0..2usize, 0..5u64, 0..(10 * 24 * 60i64), prop::collection::vec((0..4u8, 0..4usize, -600..3600i64), 1..5))
}

/// The events of generated sessions in a random arrival order: sessions interleave at random,
/// and each session's events arrive in `seq` order (their times need not be in order).
fn arrivals(specs: &[SessionSpec], order: &[u32]) -> Vec<StoredEvent> {
    // 2026-11-10T00:00Z.
    let base = 1_794_268_800_000i64;
    let paths = ["/", "/pricing", "/docs", "/about"];
    let mut events: Vec<(u32, StoredEvent)> = Vec::new();
    let mut k = 0;
    for (i, (site, visitor, start_min, evs)) in specs.iter().enumerate() {
        let start = base + start_min * 60_000;
        let mut s = Session::new(["S1", "S2"][*site], *visitor, i as u32, start, ["", "Google"][i % 2]);
        let mut keys: Vec<u32> = evs
            .iter()
            .map(|_| {
                k += 1;
                order[k % order.len()]
            })
            .collect();
        keys.sort_unstable();
        for (j, ((kind, path, offset_s), key)) in evs.iter().zip(keys).enumerate() {
            let ts = if j == 0 { start } else { start + offset_s * 1000 };
            let e = match kind {
                0 | 1 => s.pageview(paths[*path], ts),
                2 => s.event("Signup", paths[*path], ts, true),
                _ => s.event("Scroll", paths[*path], ts, false),
            };
            events.push((key, e));
        }
    }
    events.sort_by_key(|(key, _)| *key);
    events.into_iter().map(|(_, e)| e).collect()
}

/// Verifies both sites over November; returns the events read.
/// What a test does after an event: nothing, a whole flush, or the periodic one, which may leave
/// the week and month items to the next flush.
#[derive(Debug, Clone, Copy)]
enum Flush {
    None,
    Now,
    Tick,
}

impl Flush {
    async fn run(self, agg: &Aggregator) -> Result<(), AggregateError> {
        match self {
            Flush::None => Ok(()),
            Flush::Now => agg.flush_now().await,
            Flush::Tick => agg.flush_tick().await,
        }
    }
}

fn flush_kind() -> impl Strategy<Value = Flush> {
    prop_oneof![2 => Just(Flush::None), 1 => Just(Flush::Now), 1 => Just(Flush::Tick)]
}

async fn verify_all(table: &Table) -> u64 {
    let mut read = 0;
    for site in ["S1", "S2"] {
        let report = verify(table, site, "2026-11-01", "2026-11-30").await;
        assert_eq!(report.differences, vec![], "site {site}");
        read += report.events_read;
    }
    read
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn live_aggregates_equal_the_rebuild(
        specs in prop::collection::vec(session_spec(), 1..6),
        order in prop::collection::vec(any::<u32>(), 30),
        flushes in prop::collection::vec(flush_kind(), 30),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        rt.block_on(async {
            let h = harness().await;
            let agg = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
            let events = arrivals(&specs, &order);
            let n = events.len() as u64;
            for (i, e) in events.into_iter().enumerate() {
                ingest(&agg, &h.table, e).await;
                flushes[i % flushes.len()].run(&agg).await.expect("flushes");
            }
            agg.flush_now().await.expect("flushes");
            assert_eq!(verify_all(&h.table).await, n);
            agg.shutdown().await.expect("shuts down");
        });
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_crash_anywhere_recovered_by_another_run_equals_the_rebuild(
        specs in prop::collection::vec(session_spec(), 1..6),
        order in prop::collection::vec(any::<u32>(), 30),
        flushes in prop::collection::vec(flush_kind(), 30),
        crash_at in 0..24usize,
        fail_after in prop::option::of(0..60i64),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
        rt.block_on(async {
            let h = harness().await;
            let (failing, table) = failing(&h).await;
            let a = Aggregator::start(table, sites(), quiet()).await.expect("run a starts");
            let successor = AggregatorConfig {
                dead_after: Duration::from_millis(1),
                heartbeat_interval: Duration::from_millis(20),
                ..quiet()
            };
            let events = arrivals(&specs, &order);
            let n = events.len() as u64;
            let crash_at = crash_at.min(events.len());
            let mut b = None;
            for (i, e) in events.into_iter().enumerate() {
                if i == crash_at {
                    // The process dies, perhaps in the middle of a flush.
                    if let Some(writes) = fail_after {
                        failing.arm(writes);
                        let _ = flushes[i % flushes.len()].run(&a).await;
                    }
                    a.abort();
                    b = Some(Aggregator::start(h.table.clone(), sites(), successor.clone()).await.expect("run b starts"));
                }
                let agg = b.as_deref().unwrap_or(&a);
                ingest(agg, &h.table, e).await;
                flushes[i % flushes.len()].run(agg).await.expect("flushes");
            }
            let b = match b {
                Some(b) => b,
                None => {
                    a.abort();
                    Aggregator::start(h.table.clone(), sites(), successor).await.expect("run b starts")
                }
            };
            wait_recovered(&h.table, a.run_id()).await;
            b.flush_now().await.expect("flushes");
            assert_eq!(verify_all(&h.table).await, n);
            b.shutdown().await.expect("shuts down");
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_an_epoch_waits_for_its_tickets() {
    let h = harness().await;
    let agg = Aggregator::start(h.table.clone(), sites(), quiet()).await.expect("the run starts");
    let mut s = Session::new("S1", 1, 1, T0, "");
    let mut e = s.pageview("/", T0);
    agg.register_partition(&e.site_id, e.day).await.expect("registers");
    // A write that failed gives its ticket back: it holds nothing up.
    drop(agg.begin());
    let ticket = agg.begin();
    e.run = ticket.run();
    e.epoch = ticket.epoch();
    let flushing = tokio::spawn({
        let agg = agg.clone();
        async move { agg.flush_now().await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!flushing.is_finished(), "the epoch is closed but one of its events is still being written");
    // New tickets go to the next epoch meanwhile.
    assert_eq!(agg.begin().epoch(), e.epoch + 1);
    analytics::event_store::store_events(&h.table, std::slice::from_ref(&e)).await.expect("stored");
    ticket.commit(&e);
    flushing.await.expect("the task ends").expect("flushes");
    assert_eq!(item(&h.table, "day", "total", "2026-11-22", "").await.map(|(c, _)| c.pageviews), Some(1));
    assert_eq!(agg.stats().epochs_flushed, 1);
    agg.shutdown().await.expect("shuts down");
}

/// A store that refuses, as a validation error, every put of an aggregate item whose value is
/// `/poison`: an item that can never be written, as one whose key was too long could not.
#[derive(Default)]
struct Poison {
    refused: AtomicI64,
}

#[async_trait]
impl Hooks for Poison {
    async fn before(&self, write: Write<'_>) -> store::Result<()> {
        if let Write::Put(put) = write
            && put.item.get("value") == Some(&store::AttributeValue::from("/poison"))
        {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::KeyTooLarge("injected: the sort key is too long".into()));
        }
        Ok(())
    }
}

/// Regression: one aggregate item that could not be written (its key was too long) failed
/// every flush of its epoch, and every later epoch waited behind it, for every site. An item
/// refused permanently is now counted and left out; the rest of its epoch and later epochs
/// are written.
#[tokio::test]
async fn an_item_refused_by_validation_does_not_hold_back_its_epoch_or_later_ones() {
    let h = harness().await;
    let poison = Arc::new(Hooked::new(h.store.clone(), Poison::default()));
    let table = Table::new(poison.clone(), tally_schema("tally"));
    let agg = Aggregator::start(table, sites(), quiet()).await.expect("the run starts");
    let mut a = Session::new("S1", 0xa, 1, T0, "Google");
    ingest(&agg, &h.table, a.pageview("/poison", T0)).await;
    ingest(&agg, &h.table, a.pageview("/fine", T0 + 60_000)).await;
    agg.flush_now().await.expect("the epoch flushes without the refused items");
    let stats = agg.stats();
    assert_eq!((stats.epochs_flushed, stats.pending_events), (1, 0));
    let refused = poison.refused.load(Ordering::SeqCst) as u64;
    assert!(refused > 0);
    assert_eq!(stats.flush_item_errors, refused, "each refused item is counted");
    assert_eq!(item(&h.table, "day", "event:page", "2026-11-22", "/fine").await.map(|(c, _)| c.pageviews), Some(1));
    assert_eq!(item(&h.table, "day", "total", "2026-11-22", "").await.map(|(c, _)| c.pageviews), Some(2));
    // A later epoch is not held back either.
    let mut b = Session::new("S1", 0xb, 2, T0 + 3_600_000, "");
    ingest(&agg, &h.table, b.pageview("/later", T0 + 3_600_000)).await;
    agg.flush_now().await.expect("the next epoch flushes");
    assert_eq!(agg.stats().epochs_flushed, 2);
    assert_eq!(item(&h.table, "day", "total", "2026-11-22", "").await.map(|(c, _)| c.pageviews), Some(3));
    assert_eq!(agg.stats().flush_errors, 0);
    agg.shutdown().await.expect("shuts down");
}

/// Alone, a session's next event is queued while its previous one is still being written, and
/// computed from it: if the previous one's block fails, the next must fail too, even when its
/// own block is written, and so must every later one; nothing else is held back.
#[tokio::test]
async fn a_failed_block_fails_the_later_events_of_its_session_queued_meanwhile() {
    use analytics::event_store::BlockWriter;
    let h = harness().await;
    let (failing, table) = failing(&h).await;
    let writer = BlockWriter::start(table, "01JDB3Y5C8M9V7T2X4K6P00RUN", Arc::new(|| 0));
    let mut session = Session::new("S1", 0xa, 1, T0, "Google");
    let first = session.pageview("/", T0);
    // Enough other events of the partition that the batch is cut into several blocks, the
    // session's first event in the first block and its second in the last.
    let others: Vec<StoredEvent> = (0..3_000u32)
        .map(|i| Session::new("S1", 0x100 + u64::from(i), 10 + i, T0, "").pageview("/other", T0 + 1))
        .collect();
    let second = session.pageview("/pricing", T0 + 60_000);
    failing.fail_next(1);
    // Queued together before the writer runs: one batch.
    let first_queued = writer.queue(Arc::new(first), None);
    let after_first = first_queued.written();
    let others_queued: Vec<_> = others.iter().map(|e| writer.queue(Arc::new(e.clone()), None)).collect();
    let second_queued = writer.queue(Arc::new(second), Some(after_first.clone()));
    let after_second = second_queued.written();
    assert!(first_queued.done().await.is_err(), "the first block's write fails");
    assert!(second_queued.done().await.is_err(), "the next event of the session fails with it");
    assert!(after_first.is_failed() && after_second.is_failed());
    let mut stored_others = Vec::new();
    for (e, q) in others.iter().zip(others_queued) {
        if q.done().await.is_ok() {
            stored_others.push(e.session_id);
        }
    }
    assert!(!stored_others.is_empty() && stored_others.len() < others.len(), "only the first block failed");
    // A third event queued after the second failed fails without a write; another session's
    // event is stored.
    let third = session.pageview("/signup", T0 + 120_000);
    assert!(writer.queue(Arc::new(third), Some(after_second)).done().await.is_err());
    let unrelated = Session::new("S1", 0xb, 2, T0, "").pageview("/", T0 + 5);
    let unrelated_id = unrelated.session_id;
    assert!(writer.queue(Arc::new(unrelated), None).done().await.is_ok());
    let mut stored = stored_sessions(&h.table).await;
    stored.sort();
    let mut expected = stored_others;
    expected.push(unrelated_id);
    expected.sort();
    assert_eq!(stored, expected, "exactly the events whose writes were acknowledged are stored");
}

/// Events queued by tasks that became ready together share a block: the writer lets the
/// runtime run them once before it cuts its round, instead of writing the first event alone and
/// the rest in a second block (under load, blocks held half as many events, each block a write).
#[tokio::test]
async fn events_queued_by_tasks_ready_together_share_a_block() {
    use analytics::event_store::BlockWriter;
    let h = harness().await;
    let writer = BlockWriter::start(h.table.clone(), "01JDB3Y5C8M9V7T2X4K6P00RUN", Arc::new(|| 0));
    let mut events: Vec<StoredEvent> = (0..11u32)
        .map(|i| Session::new("S1", 0x200 + u64::from(i), 10 + i, T0, "Google").pageview("/", T0 + i64::from(i)))
        .collect();
    let first = writer.queue(Arc::new(events.remove(0)), None);
    // Ready now, run only once this task waits: after the writer has taken the first event.
    let others: Vec<_> = events
        .into_iter()
        .map(|event| {
            let writer = writer.clone();
            tokio::spawn(async move { writer.queue(Arc::new(event), None).done().await })
        })
        .collect();
    first.done().await.expect("stored");
    for other in others {
        other.await.expect("the task ends").expect("stored");
    }
    assert_eq!(stored_sessions(&h.table).await.len(), 11, "every event once");
    assert_eq!(writer.counters().blocks.load(Ordering::SeqCst), 1, "one block for the events queued together");
}

/// Notes, whenever an event block reaches the store, how many blocks its writer had encoded.
#[derive(Default)]
struct BlockPuts {
    writer: std::sync::OnceLock<Arc<analytics::event_store::BlockWriter>>,
    encoded: std::sync::Mutex<Vec<u64>>,
}

#[async_trait]
impl Hooks for BlockPuts {
    async fn before(&self, write: Write<'_>) -> store::Result<()> {
        if let Write::Put(put) = write
            && put.item.contains_key("block")
            && let Some(writer) = self.writer.get()
        {
            let encoded = writer.counters().encodings.load(Ordering::SeqCst);
            self.encoded.lock().expect("not poisoned").push(encoded);
        }
        Ok(())
    }
}

/// A round of events of four partitions encodes the four blocks before it writes any, so their
/// writes reach the store together (and share a group commit on the embedded engine) rather than
/// the first going alone while the others are encoded; every event is stored once, in its own
/// partition.
#[tokio::test]
async fn a_round_encodes_every_partitions_block_before_writing_any() {
    use analytics::event_store::BlockWriter;
    let h = harness().await;
    let puts = Arc::new(Hooked::new(h.store.clone(), BlockPuts::default()));
    let table = Table::new(puts.clone(), tally_schema("tally"));
    let writer = BlockWriter::start(table, "01JDB3Y5C8M9V7T2X4K6P00RUN", Arc::new(|| 0));
    assert!(puts.writer.set(writer.clone()).is_ok());
    // Queued before the writer's task runs (this runtime has one thread): one round.
    let sites = ["S1", "S2", "S3", "S4"];
    let mut queued = Vec::new();
    for (n, site) in sites.iter().enumerate() {
        for i in 0..3u32 {
            let mut session = Session::new(site, 0x300 + 4 * u64::from(i) + n as u64, 10 + i, T0, "Google");
            queued.push(writer.queue(Arc::new(session.pageview("/", T0 + i64::from(i))), None));
        }
    }
    for q in queued {
        q.done().await.expect("stored");
    }
    let encoded = puts.encoded.lock().expect("not poisoned").clone();
    assert!(encoded.first().is_some_and(|&n| n >= 4), "blocks encoded as each block was written: {encoded:?}");
    let day = analytics::visitor::UtcDay::from_unix_ms(T0);
    for site in sites {
        let events = analytics::event_store::events_of_day(&h.table, site, day).await.expect("the day reads");
        assert_eq!(events.len(), 3, "{site}");
    }
}

/// One event of a burst of [`gated_bursts`]: sessions of their own, seven pages.
fn burst_event(i: u32) -> StoredEvent {
    let mut s = Session::new("S1", 0x100 + u64::from(i), 10 + i, T0, "Google");
    s.pageview(&format!("/page/{}", i % 7), T0 + i64::from(i))
}

/// Starts a block writer (merging small blocks or not, as `compaction` says) and queues a lone
/// event, then three bursts of 40, each while the block before it is being written (held at a
/// gate); waits until every event is stored, and checks each is stored once. Returns the writer
/// and the sizes of the blocks' items, in the order written.
async fn gated_bursts(compaction: bool) -> (Arc<analytics::event_store::BlockWriter>, Vec<usize>) {
    let h = harness().await;
    let (failing, table) = failing(&h).await;
    failing.gated.store(true, Ordering::SeqCst);
    let writer = analytics::event_store::BlockWriter::start(table, "01JDB3Y5C8M9V7T2X4K6P00RUN", Arc::new(|| 0));
    writer.set_compaction(compaction);
    let mut queued = vec![writer.queue(Arc::new(burst_event(0)), None)];
    let mut next = 1;
    for round in 1..=3 {
        // The writer waits at the gate with the previous round's block.
        while failing.puts_begun.load(Ordering::SeqCst) < round {
            tokio::task::yield_now().await;
        }
        for _ in 0..40 {
            queued.push(writer.queue(Arc::new(burst_event(next)), None));
            next += 1;
        }
        failing.gate.add_permits(1);
    }
    // Let everything through.
    failing.gate.add_permits(1_000);
    for q in queued {
        q.done().await.expect("every event is stored");
    }
    let mut stored = stored_sessions(&h.table).await;
    assert_eq!(stored.len(), next as usize, "every event once");
    stored.sort();
    stored.dedup();
    assert_eq!(stored.len(), next as usize, "no event twice");
    let sizes = failing.put_sizes.lock().expect("not poisoned").clone();
    (writer, sizes)
}

/// Where small blocks are merged (the embedded engine's default), a block holds no event back to
/// end on a write unit: it would be merged away minutes later, so the unit saved is not worth a
/// second encoding and a round's wait. Each burst is one block.
#[tokio::test]
async fn with_compaction_a_block_holds_nothing_back() {
    let (writer, sizes) = gated_bursts(true).await;
    assert_eq!(writer.counters().held.load(Ordering::SeqCst), 0, "{sizes:?}");
    assert_eq!(sizes.len(), 4, "the lone event's block and one a burst: {sizes:?}");
    assert_eq!(writer.counters().encodings.load(Ordering::SeqCst), 4, "each block encoded once");
}

/// Write units are billed per started KB, so a busy writer's blocks of a KB or two used to pay
/// for a part-filled unit each. Where small blocks are not merged (DynamoDB's default), a block
/// ends on a unit's boundary, holding its last events back to lead the partition's next block:
/// under a steady stream only the final block rounds up, every event is stored exactly once, and
/// an event is held back at most once.
#[tokio::test]
async fn blocks_end_on_a_write_unit_and_the_events_held_back_lead_the_next_block() {
    let (writer, sizes) = gated_bursts(false).await;
    let unit = store::limits::WRITE_UNIT_BYTES;
    assert!(sizes[0] < unit, "the lone event's block: {sizes:?}");
    assert!(writer.counters().held.load(Ordering::SeqCst) > 0, "{sizes:?}");
    // Every block but the lone one and the last fills at least half of its last unit: a block
    // that would fill less is cut on the boundary before it (`event_store::fit`), so none pays
    // for more than half a unit it does not use.
    let middle = &sizes[1..sizes.len() - 1];
    for size in middle {
        assert!(
            *size > unit && (size % unit == 0 || size % unit >= unit / 2),
            "a block of {size} bytes pays for a unit it fills less than half: {sizes:?}"
        );
    }
    let units: usize = sizes.iter().map(|s| s.div_ceil(unit)).sum();
    let bytes: usize = sizes[1..].iter().sum();
    assert!(units <= 1 + bytes.div_ceil(unit) + middle.len() / 2, "{units} units for {bytes} bytes: {sizes:?}");
}

/// The session id of every event stored on site `S1` on `T0`'s day, in the order read.
async fn stored_sessions(table: &Table) -> Vec<ulid::Ulid> {
    analytics::event_store::events_of_day(table, "S1", analytics::visitor::UtcDay::from_unix_ms(T0))
        .await
        .expect("the day reads")
        .into_iter()
        .map(|e| e.session_id)
        .collect()
}
