//! Unit tests of the pure parts: the deltas of single events (expect tests) and the event codec.

use expect_test::{Expect, expect};

use super::*;
use crate::stored::{AggKey, AggKeyRef, Counters, Period, PrevState, Visit, VisitAttrs};

/// 2026-11-22T07:30:00Z.
const T0: i64 = 1_795_332_600_000;

fn pageview(path: &str, ts: i64, prev: &PrevState) -> StoredEvent {
    StoredEvent {
        site_id: "S1".into(),
        day: crate::visitor::UtcDay::parse("2026-11-22").unwrap(),
        visitor_id: crate::visitor::VisitorId::from_u64(0xff),
        session_id: "01JDB3Y5C8M9V7T2X4K6P0QWER".parse().unwrap(),
        seq: prev.events,
        name: "pageview".into(),
        ts,
        hostname: "example.com".into(),
        path: path.into(),
        props: Default::default(),
        revenue: None,
        interactive: true,
        goals: vec![],
        visit: std::sync::Arc::new(VisitAttrs::new(
            T0,
            &Visit {
                entry_page: "/",
                source: "Google",
                country: "DE",
                device: "Desktop",
                browser: "Firefox",
                ..Visit::default()
            },
        )),
        prev: prev.clone(),
        run: "R1".into(),
        epoch: 1,
        ttl: 0,
    }
}

/// One line per delta, keeping those whose dimension passes `keep`: period, dimension, value,
/// bucket, then the non-zero counters and the visitor.
fn render(event: &StoredEvent, zone: &SiteZone, keep: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    for (k, d) in deltas(event, zone) {
        if !keep(&k.dimension) {
            continue;
        }
        let c = d.counters;
        let mut line = format!("{} {}={:?} @{}:", k.period.as_str(), k.dimension, k.value, k.bucket);
        for (name, v) in [
            ("pv", c.pageviews),
            ("ev", c.events),
            ("visits", c.visits),
            ("bounces", c.bounces),
            ("dur", c.duration_ms),
            ("vpv", c.visit_pageviews),
        ] {
            if v != 0 {
                line.push_str(&format!(" {name}={v}"));
            }
        }
        if let Some(v) = d.visitor {
            line.push_str(&format!(" visitor={v:x}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn check(event: &StoredEvent, keep: impl Fn(&str) -> bool, expected: Expect) {
    expected.assert_eq(&render(event, &SiteZone::utc(), keep));
}

fn focus(dimension: &str) -> bool {
    matches!(dimension, "total" | "event:page" | "visit:exit_page" | "visit:source" | "event:name")
}

#[test]
fn a_first_page_view() {
    let e = pageview("/", T0, &PrevState::default());
    check(
        &e,
        |_| true,
        expect![[r#"
            minute event:page="/" @0029922210: pv=1 ev=1 visitor=ff
            minute total="" @0029922210: pv=1 ev=1 visitor=ff
            hour event:page="/" @2026-11-22T07: pv=1 ev=1 visitor=ff
            hour total="" @2026-11-22T07: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            hour visit:source="Google" @2026-11-22T07: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day event:hostname="example.com" @2026-11-22: pv=1 ev=1 visitor=ff
            day event:name="pageview" @2026-11-22: pv=1 ev=1 visitor=ff
            day event:page="/" @2026-11-22: pv=1 ev=1 visitor=ff
            day total="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:browser="Firefox" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:browser_version="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:country="DE" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:device="Desktop" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:entry_page="/" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:exit_page="/" @2026-11-22: visits=1 bounces=1 vpv=1
            day visit:os="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:os_version="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:referrer="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:source="Google" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:utm_campaign="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:utm_content="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:utm_medium="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:utm_source="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            day visit:utm_term="" @2026-11-22: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week event:hostname="example.com" @2026-W47: pv=1 ev=1 visitor=ff
            week event:name="pageview" @2026-W47: pv=1 ev=1 visitor=ff
            week event:page="/" @2026-W47: pv=1 ev=1 visitor=ff
            week total="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:browser="Firefox" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:browser_version="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:country="DE" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:device="Desktop" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:entry_page="/" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:exit_page="/" @2026-W47: visits=1 bounces=1 vpv=1
            week visit:os="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:os_version="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:referrer="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:source="Google" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:utm_campaign="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:utm_content="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:utm_medium="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:utm_source="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            week visit:utm_term="" @2026-W47: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month event:hostname="example.com" @2026-11: pv=1 ev=1 visitor=ff
            month event:name="pageview" @2026-11: pv=1 ev=1 visitor=ff
            month event:page="/" @2026-11: pv=1 ev=1 visitor=ff
            month total="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:browser="Firefox" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:browser_version="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:country="DE" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:device="Desktop" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:entry_page="/" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:exit_page="/" @2026-11: visits=1 bounces=1 vpv=1
            month visit:os="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:os_version="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:referrer="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:source="Google" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:utm_campaign="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:utm_content="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:utm_medium="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:utm_source="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
            month visit:utm_term="" @2026-11: pv=1 ev=1 visits=1 bounces=1 vpv=1 visitor=ff
        "#]],
    );
}

#[test]
fn a_second_page_view_undoes_the_bounce_and_moves_the_exit_page() {
    let first = pageview("/", T0, &PrevState::default());
    let second = pageview("/pricing", T0 + 90_000, &first.next());
    check(
        &second,
        |d| focus(d) && d != "visit:source",
        expect![[r#"
            minute event:page="/pricing" @0029922211: pv=1 ev=1 visitor=ff
            minute total="" @0029922211: pv=1 ev=1 visitor=ff
            hour event:page="/pricing" @2026-11-22T07: pv=1 ev=1 visitor=ff
            hour total="" @2026-11-22T07: pv=1 ev=1 bounces=-1 dur=90000 vpv=1 visitor=ff
            day event:name="pageview" @2026-11-22: pv=1 ev=1 visitor=ff
            day event:page="/pricing" @2026-11-22: pv=1 ev=1 visitor=ff
            day total="" @2026-11-22: pv=1 ev=1 bounces=-1 dur=90000 vpv=1 visitor=ff
            day visit:exit_page="/" @2026-11-22: visits=-1 bounces=-1 vpv=-1
            day visit:exit_page="/pricing" @2026-11-22: visits=1 dur=90000 vpv=2
            week event:name="pageview" @2026-W47: pv=1 ev=1 visitor=ff
            week event:page="/pricing" @2026-W47: pv=1 ev=1 visitor=ff
            week total="" @2026-W47: pv=1 ev=1 bounces=-1 dur=90000 vpv=1 visitor=ff
            week visit:exit_page="/" @2026-W47: visits=-1 bounces=-1 vpv=-1
            week visit:exit_page="/pricing" @2026-W47: visits=1 dur=90000 vpv=2
            month event:name="pageview" @2026-11: pv=1 ev=1 visitor=ff
            month event:page="/pricing" @2026-11: pv=1 ev=1 visitor=ff
            month total="" @2026-11: pv=1 ev=1 bounces=-1 dur=90000 vpv=1 visitor=ff
            month visit:exit_page="/" @2026-11: visits=-1 bounces=-1 vpv=-1
            month visit:exit_page="/pricing" @2026-11: visits=1 dur=90000 vpv=2
        "#]],
    );
}

#[test]
fn a_custom_event_with_props_and_goals() {
    let first = pageview("/", T0, &PrevState::default());
    let mut signup = pageview("/signup", T0 + 30_000, &first.next());
    signup.name = "Signup".into();
    signup.props = [("plan".to_owned(), "pro".to_owned()), ("trial".to_owned(), "yes".to_owned())].into();
    signup.goals = vec!["Signup".into(), "Visit /signup".into()];
    check(
        &signup,
        |d| d.starts_with("event:") || d == "total" || d == "visit:exit_page",
        expect![[r#"
            minute total="" @0029922210: ev=1 visitor=ff
            hour total="" @2026-11-22T07: ev=1 bounces=-1 dur=30000 visitor=ff
            day event:goal="Signup" @2026-11-22: ev=1 visitor=ff
            day event:goal="Visit /signup" @2026-11-22: ev=1 visitor=ff
            day event:hostname="example.com" @2026-11-22: ev=1 visitor=ff
            day event:name="Signup" @2026-11-22: ev=1 visitor=ff
            day event:props:plan="pro" @2026-11-22: ev=1 visitor=ff
            day event:props:trial="yes" @2026-11-22: ev=1 visitor=ff
            day total="" @2026-11-22: ev=1 bounces=-1 dur=30000 visitor=ff
            day visit:exit_page="/" @2026-11-22: bounces=-1 dur=30000
            week event:goal="Signup" @2026-W47: ev=1 visitor=ff
            week event:goal="Visit /signup" @2026-W47: ev=1 visitor=ff
            week event:hostname="example.com" @2026-W47: ev=1 visitor=ff
            week event:name="Signup" @2026-W47: ev=1 visitor=ff
            week event:props:plan="pro" @2026-W47: ev=1 visitor=ff
            week event:props:trial="yes" @2026-W47: ev=1 visitor=ff
            week total="" @2026-W47: ev=1 bounces=-1 dur=30000 visitor=ff
            week visit:exit_page="/" @2026-W47: bounces=-1 dur=30000
            month event:goal="Signup" @2026-11: ev=1 visitor=ff
            month event:goal="Visit /signup" @2026-11: ev=1 visitor=ff
            month event:hostname="example.com" @2026-11: ev=1 visitor=ff
            month event:name="Signup" @2026-11: ev=1 visitor=ff
            month event:props:plan="pro" @2026-11: ev=1 visitor=ff
            month event:props:trial="yes" @2026-11: ev=1 visitor=ff
            month total="" @2026-11: ev=1 bounces=-1 dur=30000 visitor=ff
            month visit:exit_page="/" @2026-11: bounces=-1 dur=30000
        "#]],
    );
}

#[test]
fn a_non_interactive_event_keeps_the_bounce() {
    let first = pageview("/", T0, &PrevState::default());
    let mut scroll = pageview("/", T0 + 10_000, &first.next());
    scroll.name = "Scroll".into();
    scroll.interactive = false;
    check(
        &scroll,
        |d| d == "total" || d == "visit:exit_page",
        expect![[r#"
            minute total="" @0029922210: ev=1 visitor=ff
            hour total="" @2026-11-22T07: ev=1 dur=10000 visitor=ff
            day total="" @2026-11-22: ev=1 dur=10000 visitor=ff
            day visit:exit_page="/" @2026-11-22: dur=10000
            week total="" @2026-W47: ev=1 dur=10000 visitor=ff
            week visit:exit_page="/" @2026-W47: dur=10000
            month total="" @2026-11: ev=1 dur=10000 visitor=ff
            month visit:exit_page="/" @2026-11: dur=10000
        "#]],
    );
}

#[test]
fn an_event_late_in_time_order_keeps_the_exit_page_and_counts_in_its_own_bucket() {
    // The session started at 07:30 and went on to 08:10; a page view from 07:40 arrives last.
    let first = pageview("/", T0, &PrevState::default());
    let second = pageview("/pricing", T0 + 40 * 60_000, &first.next());
    let late = pageview("/about", T0 + 10 * 60_000, &second.next());
    check(
        &late,
        |d| d == "total" || d == "visit:exit_page" || d == "event:page",
        expect![[r#"
            minute event:page="/about" @0029922220: pv=1 ev=1 visitor=ff
            minute total="" @0029922220: pv=1 ev=1 visitor=ff
            hour event:page="/about" @2026-11-22T07: pv=1 ev=1 visitor=ff
            hour total="" @2026-11-22T07: pv=1 ev=1 vpv=1 visitor=ff
            day event:page="/about" @2026-11-22: pv=1 ev=1 visitor=ff
            day total="" @2026-11-22: pv=1 ev=1 vpv=1 visitor=ff
            day visit:exit_page="/pricing" @2026-11-22: vpv=1
            week event:page="/about" @2026-W47: pv=1 ev=1 visitor=ff
            week total="" @2026-W47: pv=1 ev=1 vpv=1 visitor=ff
            week visit:exit_page="/pricing" @2026-W47: vpv=1
            month event:page="/about" @2026-11: pv=1 ev=1 visitor=ff
            month total="" @2026-11: pv=1 ev=1 vpv=1 visitor=ff
            month visit:exit_page="/pricing" @2026-11: vpv=1
        "#]],
    );
}

#[test]
fn visit_counters_go_to_the_bucket_of_the_session_start_in_site_time() {
    // 22:50 UTC is 23:50 in Berlin; the second event at 23:10 UTC is the next day there.
    let start = 1_795_387_800_000; // 2026-11-22T22:50:00Z
    let mut first = pageview("/", start, &PrevState::default());
    std::sync::Arc::make_mut(&mut first.visit).start_ts = start;
    let mut second = pageview("/b", start + 20 * 60_000, &first.next());
    std::sync::Arc::make_mut(&mut second.visit).start_ts = start;
    let berlin = SiteZone::new("Europe/Berlin").unwrap();
    expect![[r#"
        day total="" @2026-11-22: bounces=-1 dur=1200000 vpv=1
        day total="" @2026-11-23: pv=1 ev=1 visitor=ff
    "#]]
    .assert_eq(&render(&second, &berlin, |d| d == "total").lines().filter(|l| l.starts_with("day")).fold(
        String::new(),
        |mut s, l| {
            s.push_str(l);
            s.push('\n');
            s
        },
    ));
}

#[test]
fn deltas_of_a_session_telescope_to_its_final_state() {
    let a = pageview("/", T0, &PrevState::default());
    let b = pageview("/x", T0 + 5_000, &a.next());
    let c = pageview("/y", T0 + 9_000, &b.next());
    let mut sum: BTreeMap<AggKey, Counters> = BTreeMap::new();
    for e in [&a, &b, &c] {
        for (k, d) in deltas(e, &SiteZone::utc()) {
            sum.entry(k).or_default().add(&d.counters);
        }
    }
    let day_total = sum.iter().find(|(k, _)| k.period == crate::stored::Period::Day && k.dimension == "total");
    let expected = Counters { pageviews: 3, events: 3, visits: 1, bounces: 0, duration_ms: 9_000, visit_pageviews: 3 };
    assert_eq!(day_total.map(|(_, c)| *c), Some(expected));
    let exits: Vec<(&str, i64)> = sum
        .iter()
        .filter(|(k, c)| k.period == crate::stored::Period::Day && k.dimension == "visit:exit_page" && !c.is_zero())
        .map(|(k, c)| (k.value.as_str(), c.visits))
        .collect();
    assert_eq!(exits, vec![("/y", 1)]);
}

#[test]
fn an_event_survives_its_item_round_trip() {
    let schema = crate::schema::tally_schema("tally");
    let first = pageview("/", T0, &PrevState::default());
    let mut e = pageview("/pricing?x", T0 + 1, &first.next());
    e.props = [("plan".to_owned(), "pro".to_owned())].into();
    e.goals = vec!["Pricing".into()];
    e.revenue = Some(("19.99".into(), "EUR".into()));
    e.interactive = false;
    e.visit = std::sync::Arc::new(e.visit.with(|v| v.utm_term = "t"));
    e.ttl = T0 / 1000 + 30 * 86_400;
    let store: Arc<dyn store::Store> = Arc::new(NoStore);
    let table = Table::new(store, schema);
    let item = table.build_item("Event", event_item(&e)).expect("the item fits the Event entity");
    let record = model::Record::new("Event", item);
    assert_eq!(event_from_record(&record).expect("decodes"), e);
}

/// A store that is never called: `build_item` does no I/O.
pub(crate) struct NoStore;

#[async_trait]
impl store::Store for NoStore {
    async fn create_table(&self, _: store::TableDefinition) -> store::Result<store::TableDescription> {
        unreachable!("no I/O in this test")
    }
    async fn delete_table(&self, _: &str) -> store::Result<store::TableDescription> {
        unreachable!("no I/O in this test")
    }
    async fn describe_table(&self, _: &str) -> store::Result<store::TableDescription> {
        unreachable!("no I/O in this test")
    }
    async fn list_tables(&self) -> store::Result<Vec<String>> {
        unreachable!("no I/O in this test")
    }
    async fn get_item(&self, _: store::GetItem) -> store::Result<store::GetItemOutput> {
        unreachable!("no I/O in this test")
    }
    async fn put_item(&self, _: store::PutItem) -> store::Result<store::WriteOutput> {
        unreachable!("no I/O in this test")
    }
    async fn update_item(&self, _: store::UpdateItem) -> store::Result<store::WriteOutput> {
        unreachable!("no I/O in this test")
    }
    async fn delete_item(&self, _: store::DeleteItem) -> store::Result<store::WriteOutput> {
        unreachable!("no I/O in this test")
    }
    async fn query(&self, _: store::Query) -> store::Result<store::QueryOutput> {
        unreachable!("no I/O in this test")
    }
    async fn scan(&self, _: store::Scan) -> store::Result<store::QueryOutput> {
        unreachable!("no I/O in this test")
    }
    async fn batch_get_item(&self, _: store::BatchGetItem) -> store::Result<store::BatchGetItemOutput> {
        unreachable!("no I/O in this test")
    }
    async fn batch_write_item(&self, _: store::BatchWriteItem) -> store::Result<store::BatchWriteItemOutput> {
        unreachable!("no I/O in this test")
    }
    async fn transact_get_items(&self, _: store::TransactGetItems) -> store::Result<store::TransactGetItemsOutput> {
        unreachable!("no I/O in this test")
    }
    async fn transact_write_items(
        &self,
        _: store::TransactWriteItems,
    ) -> store::Result<store::TransactWriteItemsOutput> {
        unreachable!("no I/O in this test")
    }
}

#[test]
fn tickets_and_aggregators_cross_tasks() {
    // Ingestion holds a ticket across the await of its event write, inside spawned tasks.
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Ticket>();
    shareable::<Aggregator>();
    shareable::<AggregateError>();
}

#[test]
fn only_transient_failures_are_retryable() {
    let throttled = model::Error::Store(store::StoreError::Throttled("slow down".into()));
    assert!(AggregateError::Model(throttled).is_retryable());
    assert!(AggregateError::Contended { key: "k".into(), attempts: 16 }.is_retryable());
    assert!(!AggregateError::Stopped.is_retryable());
}

#[test]
fn minute_buckets_are_left_out_for_events_before_the_window() {
    let event = pageview("/", T0, &PrevState::default());
    let minutes = |acc: &apply::Accumulated| acc.keys().filter(|k| k.period == Period::Minute).count();
    let (mut recent, mut old) = (apply::Accumulator::default(), apply::Accumulator::default());
    apply::accumulate_from(&mut recent, &event, &SiteZone::utc(), T0);
    apply::accumulate_from(&mut old, &event, &SiteZone::utc(), T0 + 1);
    let (recent, old) = (recent.finish(), old.finish());
    assert_eq!(minutes(&recent), 2, "total and the page");
    assert_eq!(minutes(&old), 0);
    // Everything else is the same, and the same as the collected deltas without the minutes.
    let others = |acc: &apply::Accumulated| {
        let mut v: Vec<_> = acc
            .iter()
            .filter(|(k, _)| k.period != Period::Minute)
            .map(|(k, p)| (k.to_owned_key(), p.counters))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(others(&recent), others(&old));
    let collected: Vec<_> = deltas(&event, &SiteZone::utc())
        .into_iter()
        .filter(|(k, _)| k.period != Period::Minute)
        .map(|(k, d)| (k, d.counters))
        .collect();
    assert_eq!(others(&old), collected);
}

fn cached_item(visitors: u64) -> codec::StoredAggregate {
    let mut sketch = crate::sketch::VisitorSketch::new();
    for id in 0..visitors {
        sketch.insert_u64(id);
    }
    codec::StoredAggregate { version: Some(1), sketch: Some(sketch), ..Default::default() }
}

fn cache_key(i: usize) -> AggKey {
    AggKey {
        site_id: "site".into(),
        period: Period::Day,
        dimension: "event:page".into(),
        bucket: "2026-11-25".into(),
        value: format!("/page/{i}"),
    }
}

#[test]
fn the_item_cache_is_bounded_by_bytes_as_well_as_by_count() {
    // Dense sketches (`HLL_4`, about 8 KB each): ten hold over 80 KB.
    let mut cache = apply::ItemCache::default();
    for i in 0..10 {
        cache.insert(cache_key(i), cached_item(20_000), 5);
    }
    let bytes = cache.memory_bytes();
    assert!(bytes > 80_000, "ten dense sketches measured as {bytes} bytes");
    cache.trim(5, 1_000, bytes + 1);
    assert_eq!(cache.len(), 10, "within both bounds, everything stays");
    cache.trim(5, 1_000, bytes - 1);
    assert_eq!(cache.len(), 0, "over the byte bound, the cache is emptied");

    // Small sparse sketches are cheap: under 1 KB an item, with the item's own overhead.
    for i in 0..1_000 {
        cache.insert(cache_key(i), cached_item(3), 5);
    }
    assert!(cache.memory_bytes() < 1_000 * 1024, "{} bytes for 1,000 small items", cache.memory_bytes());
    cache.trim(5, 999, usize::MAX);
    assert_eq!(cache.len(), 0, "over the count bound, the cache is emptied");

    // Items untouched for 256 epochs go whatever the bounds.
    cache.insert(cache_key(1), cached_item(3), 5);
    cache.insert(cache_key(2), cached_item(3), 300);
    cache.trim(300, 1_000, usize::MAX);
    assert_eq!(cache.len(), 1);
}

fn counted(events: i64, visitor: Option<u64>) -> Delta {
    Delta { counters: Counters { events, ..Counters::default() }, visitor }
}

#[test]
fn an_accumulated_item_sums_its_counters_and_keeps_each_visitor_once() {
    let key =
        AggKeyRef { site_id: "S1", period: Period::Day, dimension: "event:page", bucket: "2026-11-22", value: "/" };
    let mut acc = apply::Accumulator::default();
    // Ten distinct visitors, each three times: past the inline few, into a set.
    for round in 0..3 {
        for v in 0..10u64 {
            acc.add(key, counted(1, Some(v * 1_000 + 7)));
        }
        acc.add(key, counted(round, None));
    }
    assert_eq!(acc.len(), 1);
    let acc = acc.finish();
    // The day's item, and the same sums in its week and month.
    assert_eq!(acc.len(), 3);
    let (got, pending) = acc.iter().next().expect("one item");
    assert_eq!(got, key);
    assert_eq!(pending.counters.events, 30 + 3);
    assert!(matches!(&pending.visitors, apply::Visitors::Many(set) if set.len() == 10));
    let ids: Vec<u64> = (0..10u64).map(|v| v * 1_000 + 7).collect();
    assert_eq!(pending.visitors.to_sketch().to_bytes(), sketch_of(&ids).to_bytes());
}

/// The sketch of `ids`, each inserted once.
fn sketch_of<'a>(ids: impl IntoIterator<Item = &'a u64>) -> crate::sketch::VisitorSketch {
    let mut sketch = crate::sketch::VisitorSketch::new();
    ids.into_iter().for_each(|&v| sketch.insert_u64(v));
    sketch
}

#[test]
fn an_item_with_few_visitors_keeps_them_inline_and_distinct() {
    let mut visitors = apply::Visitors::default();
    assert!(visitors.is_empty());
    for v in [5, 9, 5, 9, 5] {
        visitors.insert(v);
    }
    assert!(matches!(visitors, apply::Visitors::Few { ids: [5, 9, ..], len: 2 }));
}

proptest::proptest! {
    /// An item's visitors past a set's worth are poured into a sketch, so an item holds a
    /// bounded number of bytes however many visitors an epoch brings; the visitors it hands to
    /// the stored sketch are still exactly the ids inserted: inserted into one item, or spread
    /// over several (an epoch's accumulators) and merged in any grouping, the sketch's stored
    /// bytes are those of every distinct id inserted once.
    #[test]
    fn an_items_visitors_are_bounded_and_exactly_those_inserted(
        distinct in 0usize..6_000,
        repeats in 1usize..3,
        parts in 1usize..4,
        seed in proptest::num::u64::ANY,
    ) {
        let ids: Vec<u64> = (0..distinct as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed).collect();
        let mut one = apply::Visitors::default();
        let mut split: Vec<apply::Visitors> = (0..parts).map(|_| apply::Visitors::default()).collect();
        for round in 0..repeats {
            for (i, &id) in ids.iter().enumerate() {
                one.insert(id);
                split[(i + round) % parts].insert(id);
            }
        }
        let expected = sketch_of(&ids).to_bytes();
        proptest::prop_assert_eq!(one.to_sketch().to_bytes(), expected.clone());
        proptest::prop_assert_eq!(one.is_empty(), ids.is_empty());
        // Merged in both orders: into an empty one, and into one that holds some already.
        let mut merged = apply::Visitors::default();
        for part in &split {
            merged.merge(part);
        }
        proptest::prop_assert_eq!(merged.to_sketch().to_bytes(), expected.clone());
        let mut backwards = split.last().cloned().unwrap_or_default();
        for part in split.iter().rev() {
            backwards.merge(part);
        }
        proptest::prop_assert_eq!(backwards.to_sketch().to_bytes(), expected.clone());
        // Added to a sketch that holds other visitors, as a flush adds them to a stored item.
        let mut stored = sketch_of(&[1, 2, 3]);
        one.add_to(&mut stored);
        let mut all = ids.clone();
        all.extend([1, 2, 3]);
        proptest::prop_assert_eq!(stored.to_bytes(), sketch_of(&all).to_bytes());
        // Bounded: a set of fewer than `SPILL_AT` ids and a sketch, whatever the count.
        for v in [&one, &merged, &backwards] {
            proptest::prop_assert!(v.memory_bytes() <= 40 * 1024, "{} bytes", v.memory_bytes());
        }
        if distinct >= apply::SPILL_AT {
            proptest::prop_assert!(matches!(one, apply::Visitors::Spilled(_)));
        }
    }
}

proptest::proptest! {
    /// Keys go into the accumulator packed into one buffer and come back out unpacked: any texts,
    /// empty or not, short or spilling past the inline bytes, come back as they went in, and
    /// keys differing in any one part stay apart.
    #[test]
    fn accumulated_keys_come_back_as_they_went_in(
        parts in proptest::collection::vec(
            (0..5usize, ".{0,30}", "[a-z:_]{0,20}", "b.{0,13}", ".{0,120}"),
            1..20,
        ),
    ) {
        let mut acc = apply::Accumulator::default();
        let mut expected = std::collections::BTreeMap::new();
        for (i, (period, site, dimension, bucket, value)) in parts.iter().enumerate() {
            let key = AggKeyRef { site_id: site, period: Period::ALL[*period], dimension, bucket, value };
            acc.add(key, counted(1 << i, None));
            *expected.entry(key.to_owned_key()).or_insert(0) += 1i64 << i;
        }
        // The buckets are no day labels, so finishing adds no week or month items.
        let got: std::collections::BTreeMap<AggKey, i64> =
            acc.finish().iter().map(|(k, p)| (k.to_owned_key(), p.counters.events)).collect();
        proptest::prop_assert_eq!(got, expected);
    }

    /// The accumulator adds only minute, hour and day deltas per event and derives the weeks
    /// and months when it finishes; what it ends with must be exactly the sum of every event's
    /// [`deltas`], counters and visitors, in zones with DST and odd offsets, for sessions that
    /// cross midnights, week and month ends.
    #[test]
    fn an_epoch_finished_from_day_items_equals_the_sum_of_every_events_deltas(
        zone in proptest::sample::select(vec![
            "UTC", "Europe/Berlin", "Asia/Kathmandu", "America/St_Johns", "Australia/Lord_Howe", "America/Havana",
        ]),
        sessions in proptest::collection::vec(
            (0u64..4, -40i64 * 86_400..40 * 86_400, proptest::collection::vec((0i64..29 * 60, 0usize..4, proptest::bool::ANY), 1..6)),
            1..6,
        ),
        split in proptest::collection::vec(0usize..3, 1..40),
    ) {
        let zone = SiteZone::new(zone).expect("a zone");
        let mut events = Vec::new();
        for (visitor, start_s, steps) in &sessions {
            let mut prev = PrevState::default();
            let mut ts = T0 + start_s * 1_000;
            for (i, (gap_s, page, custom)) in steps.iter().enumerate() {
                ts += gap_s * 1_000 * i64::from(i > 0);
                let mut e = pageview(&format!("/p{page}"), ts, &prev);
                e.visitor_id = crate::visitor::VisitorId::from_u64(100 + visitor);
                std::sync::Arc::make_mut(&mut e.visit).start_ts = T0 + start_s * 1_000;
                let entry_page = format!("/p{}", steps[0].1);
                e.visit = std::sync::Arc::new(e.visit.with(|v| v.entry_page = &entry_page));
                if *custom {
                    e.name = "signup".into();
                    e.props.insert("plan".into(), format!("p{page}"));
                }
                prev = e.next();
                events.push(e);
            }
        }
        // Visitors are compared as their sketches' stored bytes, which depend only on the ids.
        type Sums = BTreeMap<AggKey, (Counters, Vec<u8>)>;
        let mut expected: BTreeMap<AggKey, (Counters, std::collections::BTreeSet<u64>)> = BTreeMap::new();
        let mut acc = apply::Accumulator::default();
        // The same events spread over three accumulators, as an epoch's shards take them.
        let mut shards: [apply::Accumulator; 3] = Default::default();
        for (i, e) in events.iter().enumerate() {
            for (k, d) in deltas(e, &zone) {
                let entry = expected.entry(k).or_default();
                entry.0.add(&d.counters);
                entry.1.extend(d.visitor);
            }
            acc.accumulate(e, &zone);
            acc.note_session(e);
            let shard = &mut shards[split[i % split.len()]];
            shard.accumulate(e, &zone);
            shard.note_session(e);
        }
        let mut absorbed = apply::Accumulator::default();
        for shard in shards {
            absorbed.absorb(shard);
        }
        let sums = |acc: apply::Accumulator| -> (Sums, BTreeSet<String>) {
            let acc = acc.finish();
            let sums = acc.iter().map(|(k, p)| (k.to_owned_key(), (p.counters, p.visitors.to_sketch().to_bytes()))).collect();
            let log = acc.sessions().items("run", 1).iter().map(|item| format!("{item:?}")).collect();
            (sums, log)
        };
        let none = crate::sketch::VisitorSketch::new().to_bytes();
        let nonzero = |sums: Sums| -> Sums { sums.into_iter().filter(|(_, (c, v))| !c.is_zero() || *v != none).collect() };
        let expected: Sums = expected.into_iter().map(|(k, (c, ids))| (k, (c, sketch_of(&ids).to_bytes()))).collect();
        let ((got, log), (got_absorbed, log_absorbed)) = (sums(acc), sums(absorbed));
        let (got, got_absorbed, expected) = (nonzero(got), nonzero(got_absorbed), nonzero(expected));
        proptest::prop_assert!(expected.keys().any(|k| k.period == Period::Week));
        proptest::prop_assert_eq!(&got, &expected);
        proptest::prop_assert_eq!(got_absorbed, expected);
        proptest::prop_assert_eq!(log_absorbed, log);
    }
}

#[test]
fn aggregate_ttls_stay_put_within_an_hour_and_never_come_early() {
    let settings = SiteSettings::fallback();
    let at = |period, now_s| apply::ttl(period, Some(&settings), now_s).expect("a ttl");
    let hour_start = 1_795_330_800; // 2026-11-22T07:00:00Z
    for period in [Period::Hour, Period::Day, Period::Week] {
        // Every flush of one hour gives one TTL, no earlier than the retention after the write.
        let first = at(period, hour_start);
        for now_s in [hour_start + 1, hour_start + 1_800, hour_start + 3_599] {
            assert_eq!(at(period, now_s), first, "{period:?} at {now_s}");
        }
        let retention =
            if period == Period::Hour { settings.retention_hourly_days } else { settings.retention_daily_days };
        assert!(first >= hour_start + 3_599 + i64::from(retention) * 86_400, "never before the retention");
        assert!(at(period, hour_start + 3_600) > first, "the next hour moves it on");
    }
    // Minute items: two hours after the write, in 10-minute steps.
    assert_eq!(at(Period::Minute, hour_start), hour_start + 2 * 3_600 + 600);
    assert_eq!(at(Period::Minute, hour_start + 599), hour_start + 2 * 3_600 + 600);
    assert!(apply::ttl(Period::Month, Some(&settings), hour_start).is_none());
}

/// A counter of zero is not stored (an event dimension's items never count visits); the item
/// still has its version. Readers take a missing counter as zero, which every flush, rebuild and
/// query test reads back through.
#[test]
fn zero_counters_are_left_out_of_the_item() {
    let key = AggKey {
        site_id: "S1".into(),
        period: Period::Day,
        dimension: "event:page".into(),
        bucket: "2026-11-22".into(),
        value: "/pricing".into(),
    };
    let stored = codec::StoredAggregate {
        version: Some(3),
        counters: Counters { pageviews: 5, events: 5, ..Counters::default() },
        ..Default::default()
    };
    let item = stored.to_item(&key, 4, None, &BTreeSet::new());
    for zero in ["visits", "bounces", "duration_ms", "visit_pageviews"] {
        assert!(!item.contains_key(zero), "{zero} is stored");
    }
    assert_eq!(item.get("pageviews"), Some(&store::AttributeValue::from(5i64)));
    assert_eq!(item.get("version"), Some(&store::AttributeValue::from(4i64)));
}
