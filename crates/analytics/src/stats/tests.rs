//! The block scan against the reference: any sessions written to blocks, any filters, any
//! breakdown, the scan's items equal the sum of every event's deltas.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::stored::{PrevState, StoredEvent, VisitAttrs, visitor_shard};

const PAGES: [&str; 4] = ["/", "/pricing", "/blog/a", "/docs"];
const SOURCES: [&str; 3] = ["", "Google", "Newsletter"];
const COUNTRIES: [&str; 3] = ["DE", "FR", ""];

/// One session: its visitor, source and country, and its events (name, path, seconds after the
/// start, interactive, a prop value, a goal).
type SessionSpec = (u8, usize, usize, Vec<(usize, usize, u16, bool, Option<u8>, bool)>);

fn session_spec() -> impl Strategy<Value = SessionSpec> {
    (
        0u8..6,
        0..SOURCES.len(),
        0..COUNTRIES.len(),
        prop::collection::vec(
            (0usize..3, 0..PAGES.len(), 0u16..4000, any::<bool>(), prop::option::of(0u8..3), any::<bool>()),
            1..6,
        ),
    )
}

/// Events as the pipeline stores them: each session's previous states folded in order.
fn events_of(specs: &[SessionSpec]) -> Vec<StoredEvent> {
    let t0 = 1_795_300_000_000i64; // 2026-11-21, in the evening UTC
    let mut out = Vec::new();
    for (n, (visitor, source, country, events)) in specs.iter().enumerate() {
        let visitor_id = format!("{:016x}", u64::from(*visitor) + 1);
        let session_id = ulid::Ulid::from_parts(t0 as u64 + n as u64, n as u128).to_string();
        let start = t0 + (n as i64) * 3_000_000;
        let mut prev = PrevState::default();
        let visit = VisitAttrs {
            start_ts: start,
            entry_page: PAGES[events[0].1].into(),
            source: SOURCES[*source].into(),
            country: COUNTRIES[*country].into(),
            device: "Desktop".into(),
            browser: "Firefox".into(),
            ..VisitAttrs::default()
        };
        for (seq, (name, page, after, interactive, prop, goal)) in events.iter().enumerate() {
            let name = ["pageview", "Signup", "engagement"][*name];
            // The first event starts the visit; the others come after it, in any order of time.
            let ts = if seq == 0 { start } else { start + i64::from(*after) * 1000 };
            let e = StoredEvent {
                site_id: "S".into(),
                day: crate::visitor::UtcDay::from_unix_ms(start).to_string(),
                shard: visitor_shard(&visitor_id),
                visitor_id: visitor_id.clone(),
                session_id: session_id.clone(),
                seq: seq as u32,
                name: name.into(),
                ts,
                hostname: "example.com".into(),
                path: PAGES[*page].into(),
                props: prop
                    .map(|p| ("plan".to_owned(), ["free", "pro", "team"][p as usize].to_owned()))
                    .into_iter()
                    .collect::<BTreeMap<_, _>>(),
                revenue: None,
                interactive: *interactive && name != "engagement",
                goals: if *goal { vec!["Signup".into()] } else { vec![] },
                visit: visit.clone(),
                prev: prev.clone(),
                run: "R".into(),
                epoch: 1,
                ttl: 0,
            };
            prev = e.next();
            out.push(e);
        }
    }
    out
}

fn filter() -> impl Strategy<Value = Filter> {
    let op = prop::sample::select(vec![
        FilterOp::Is,
        FilterOp::IsNot,
        FilterOp::Contains,
        FilterOp::ContainsNot,
        FilterOp::Matches,
        FilterOp::MatchesNot,
    ]);
    let dim_values = prop_oneof![
        Just(("visit:source", vec!["Google", "Direct / None", "oo"])),
        Just(("visit:country", vec!["DE", "FR", ""])),
        Just(("event:page", vec!["/", "/pricing", "blog", "^/(blog|docs)", "[a-z]$"])),
        Just(("visit:exit_page", vec!["/", "/docs"])),
        Just(("event:props:plan", vec!["pro", "free"])),
        Just(("event:goal", vec!["Signup"])),
        Just(("event:name", vec!["Signup", "pageview"])),
    ];
    (op, dim_values, any::<prop::sample::Index>()).prop_map(|(op, (dimension, values), i)| Filter {
        op,
        dimension: dimension.into(),
        values: vec![values[i.index(values.len())].to_owned()],
    })
}

fn summary(items: &HashMap<crate::stored::AggKey, Sum>) -> BTreeMap<String, (Counters, u64)> {
    items
        .iter()
        .filter(|(_, s)| !s.counters.is_zero() || !s.sketch.is_empty())
        .map(|(k, s)| {
            (format!("{:?} {} {} {:?}", k.period, k.dimension, k.bucket, k.value), (s.counters, s.sketch.estimate()))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_block_scan_equals_the_sum_of_the_events_deltas(
        specs in prop::collection::vec(session_spec(), 1..8),
        filters in prop::collection::vec(filter(), 0..3),
        dimension in prop::sample::select(vec![
            "total", "event:page", "event:name", "event:goal", "event:props:plan", "visit:source", "visit:country",
            "visit:exit_page", "visit:entry_page",
        ]),
        split in 1usize..4,
        zone in prop::sample::select(vec!["UTC", "Asia/Kolkata", "America/New_York"]),
    ) {
        let zone = SiteZone::new(zone).unwrap();
        let mut events = events_of(&specs);
        let periods = [Period::Hour, Period::Day, Period::Month];
        // The blocks of each day, the events cut among a few blocks as a writer would cut them.
        let mut scanned: HashMap<crate::stored::AggKey, Sum> = HashMap::new();
        let mut by_day: BTreeMap<String, Vec<StoredEvent>> = BTreeMap::new();
        for e in &events {
            by_day.entry(e.day.clone()).or_default().push(e.clone());
        }
        for (day, evs) in &by_day {
            let chunk = evs.len().div_ceil(split).max(1);
            let blocks: Vec<crate::event_store::StoredBlock> = evs
                .chunks(chunk)
                .enumerate()
                .map(|(n, c)| crate::event_store::StoredBlock {
                    run_id: "R".into(),
                    number: n as u64,
                    max_epoch: 1,
                    ts_range: (0, 0),
                    data: crate::block::encode("S", day, c).unwrap(),
                    version: 0,
                    replaces: vec![],
                })
                .collect();
            let spec = scan::Spec { site_id: "S", zone: &zone, filters: &filters, dimension, periods: &periods };
            for (k, s) in scan::scan_day(&blocks, &spec).unwrap() {
                scanned.entry(k).or_default().add(&s);
            }
        }
        crate::event_store::sort_sessions(&mut events);
        let reference = reference_items(&events, &zone, &filters, &[dimension, TOTAL], &periods);
        prop_assert_eq!(summary(&scanned), summary(&reference));
    }
}
