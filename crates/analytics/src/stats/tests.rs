//! The block scan against the reference: any sessions written to blocks, any filters, any
//! breakdown, the scan's items equal the sum of every event's deltas.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::*;
use crate::stored::{PrevState, StoredEvent, TOTAL, Visit, VisitAttrs};

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
    let t0 = T0; // 2026-11-21, in the evening UTC
    let mut out = Vec::new();
    for (n, (visitor, source, country, events)) in specs.iter().enumerate() {
        let visitor_id = crate::visitor::VisitorId::from_u64(u64::from(*visitor) + 1);
        let session_id = ulid::Ulid::from_parts(t0 as u64 + n as u64, n as u128);
        let start = t0 + (n as i64) * 3_000_000;
        let mut prev = PrevState::default();
        let visit = VisitAttrs::new(
            start,
            &Visit {
                entry_page: PAGES[events[0].1],
                source: SOURCES[*source],
                country: COUNTRIES[*country],
                device: "Desktop",
                browser: "Firefox",
                ..Visit::default()
            },
        );
        for (seq, (name, page, after, interactive, prop, goal)) in events.iter().enumerate() {
            let name = ["pageview", "Signup", "engagement"][*name];
            // The first event starts the visit; the others come after it, in any order of time.
            let ts = if seq == 0 { start } else { start + i64::from(*after) * 1000 };
            let e = StoredEvent {
                site_id: "S".into(),
                day: crate::visitor::UtcDay::from_unix_ms(start),
                visitor_id,
                session_id,
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
                visit: std::sync::Arc::new(visit.clone()),
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
    (op, dim_values, any::<prop::sample::Index>()).prop_map(|(op, (dimension, values), i)| {
        Filter::new(op, dimension, vec![values[i.index(values.len())].to_owned()]).unwrap()
    })
}

/// Reference items of `dimension` summed into the groups of `wanted` (by bucket label), as
/// (group label, value) → (counters, visitors).
fn reference_groups(
    items: &HashMap<crate::stored::AggKey, Sum>,
    dimension: &str,
    wanted: &[(String, String)],
) -> BTreeMap<(String, String), (Counters, u64)> {
    let mut out: BTreeMap<(String, String), Sum> = BTreeMap::new();
    for (k, s) in items {
        if k.dimension != dimension {
            continue;
        }
        if let Some((_, label)) = wanted.iter().find(|(bucket, _)| *bucket == k.bucket) {
            out.entry((label.clone(), k.value.clone())).or_default().add(s);
        }
    }
    settle(out)
}

fn settle(sums: BTreeMap<(String, String), Sum>) -> BTreeMap<(String, String), (Counters, u64)> {
    sums.into_iter()
        .filter(|(_, s)| !s.counters.is_zero() || !s.sketch.is_empty())
        .map(|(k, s)| (k, (s.counters, s.sketch.estimate())))
        .collect()
}

/// The days of `events` as blocks, each day's events cut among `split` blocks as a writer
/// would cut them, each with its events' least and greatest times as its item says them, or,
/// not `ranged`, with no times (an item without them reads as the widest range).
fn blocks_by_day(events: &[StoredEvent], split: usize, ranged: bool) -> Vec<Vec<crate::event_store::StoredBlock>> {
    let mut by_day: BTreeMap<crate::visitor::UtcDay, Vec<StoredEvent>> = BTreeMap::new();
    for e in events {
        by_day.entry(e.day).or_default().push(e.clone());
    }
    by_day
        .iter()
        .map(|(day, evs)| {
            let chunk = evs.len().div_ceil(split).max(1);
            evs.chunks(chunk)
                .enumerate()
                .map(|(n, c)| crate::event_store::StoredBlock {
                    run_id: "R".into(),
                    number: n as u64,
                    max_epoch: 1,
                    ts_range: if ranged {
                        (c.iter().map(|e| e.ts).min().unwrap_or(0), c.iter().map(|e| e.ts).max().unwrap_or(0))
                    } else {
                        (i64::MIN, i64::MAX)
                    },
                    data: crate::block::encode("S", *day, c).unwrap(),
                    version: 0,
                    replaces: vec![],
                })
                .collect()
        })
        .collect()
}

const T0: i64 = 1_795_300_000_000;

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
        unit in prop::sample::select(vec![crate::period::Unit::Hour, crate::period::Unit::Day]),
        one_group in any::<bool>(),
        skip in 0usize..6,
        visits in any::<bool>(),
        ranged in any::<bool>(),
    ) {
        let zone = SiteZone::new(zone).unwrap();
        let mut events = events_of(&specs);
        // The buckets wanted: hours or days around the events, the first `skip` left out (their
        // events count nowhere), each its own group or all one group.
        let all: Vec<crate::period::Bucket> =
            zone.buckets(unit, T0 - 86_400_000, T0 + 2 * 86_400_000).unwrap().collect();
        let kept = &all[skip.min(all.len())..];
        let label = |n: usize, b: &crate::period::Bucket| if one_group { String::new() } else { format!("{n:04} {}", b.label()) };
        let mut labels: Vec<String> = Vec::new();
        let mut buckets = Vec::new();
        for (n, b) in kept.iter().enumerate() {
            let l = label(n, b);
            let group = labels.iter().position(|x| *x == l).unwrap_or_else(|| { labels.push(l); labels.len() - 1 });
            buckets.push((b.start_ms(), b.end_ms(), group as u32));
        }
        let mut scanned = scan::Sums::default();
        for blocks in blocks_by_day(&events, split, ranged) {
            let spec = scan::Spec { filters: &filters, dimension: &Dimension::parse(dimension).unwrap(), visits, buckets: &buckets };
            scanned.merge(scan::scan_day(&blocks, &spec).unwrap());
        }
        crate::event_store::sort_sessions(&mut events);
        let periods = [Period::of_unit(unit)];
        let reference = reference_items(&events, &zone, &filters, &[dimension, TOTAL], &periods);
        let wanted: Vec<(String, String)> = kept.iter().enumerate().map(|(n, b)| (b.label(), label(n, b))).collect();
        for d in [dimension, TOTAL] {
            let mut expected = reference_groups(&reference, d, &wanted);
            if !visits && dimension != "visit:exit_page" {
                // Without visit counters: the event counters and visitors alone.
                expected = expected
                    .into_iter()
                    .map(|(k, (c, v))| (k, (Counters { events: c.events, pageviews: c.pageviews, ..Counters::default() }, v)))
                    .filter(|(_, (c, v))| !c.is_zero() || *v > 0)
                    .collect();
            }
            prop_assert_eq!(settle(scanned.labelled(&Dimension::parse(d).unwrap(), &labels)), expected, "{}", d);
        }
    }

    #[test]
    fn the_block_funnel_equals_one_matched_event_at_a_time_in_the_selected_visits(
        specs in prop::collection::vec(session_spec(), 1..8),
        steps in prop::collection::vec(prop::sample::select(vec!["/", "/blog/*", "/docs", "/**", "Signup", "engagement"]), 2..5),
        split in 1usize..4,
        cut in 0i64..30_000,
        filters in prop::collection::vec(filter(), 0..3),
        reversed in any::<bool>(),
        ranged in any::<bool>(),
    ) {
        let steps: Vec<crate::goal::Goal> = steps
            .iter()
            .map(|s| if s.starts_with('/') { crate::goal::Goal::page(s) } else { crate::goal::Goal::event(s) }.unwrap())
            .collect();
        let mut events = events_of(&specs);
        // Events from `cut` seconds after the first visit's start count; earlier ones do not.
        let range = (T0 + cut * 1000, T0 + 2 * 86_400_000);
        let mut scanned: Vec<hashbrown::HashSet<u64>> = vec![Default::default(); steps.len()];
        for mut blocks in blocks_by_day(&events, split, ranged) {
            // A day's blocks come in key order (run, then number), which need not be the order of
            // a session's events: a visit continued by another run may be in an earlier one's.
            if reversed {
                blocks.reverse();
            }
            for (all, day) in scanned.iter_mut().zip(scan::funnel_day(&blocks, &steps, range, &filters).unwrap()) {
                all.extend(day);
            }
        }
        // The reference: each session the filters select (as a filtered query selects visits),
        // its events in order, each step taken by the first later event that matches it.
        crate::event_store::sort_sessions(&mut events);
        let mut reference: Vec<hashbrown::HashSet<u64>> = vec![Default::default(); steps.len()];
        for session in events.chunk_by(|a, b| (&a.visitor_id, &a.session_id) == (&b.visitor_id, &b.session_id)) {
            if !session_selected(session, &filters) {
                continue;
            }
            let mut done = 0;
            for e in session.iter().filter(|e| (range.0..range.1).contains(&e.ts)) {
                if done < steps.len() && steps[done].matches(&e.name, &e.path) {
                    done += 1;
                }
            }
            for set in reference.iter_mut().take(done) {
                set.insert(session[0].visitor_id.as_u64());
            }
        }
        prop_assert_eq!(scanned, reference);
    }
}

/// The values of `dimension` for one stored event, as a filter sees them (the reference's).
fn event_value(e: &crate::stored::StoredEvent, dimension: &Dimension) -> Vec<String> {
    use crate::dimension::EventDimension;
    // Bounded as the aggregates' values are, so both paths filter alike.
    let one = |v: &str| vec![crate::key_bound::bound_value(v).into_owned()];
    match dimension {
        Dimension::Event(EventDimension::Page) => one(&e.path),
        Dimension::Event(EventDimension::Hostname) => one(&e.hostname),
        Dimension::Event(EventDimension::Name) => one(&e.name),
        Dimension::Event(EventDimension::Goal) => {
            e.goals.iter().map(|g| crate::key_bound::bound_value(g).into_owned()).collect()
        }
        Dimension::Visit(VisitDimension::ExitPage) => one(&e.next().exit_page),
        Dimension::Prop(key) => e.props.get(key.as_str()).map(|v| one(v)).unwrap_or_default(),
        Dimension::Visit(visit) => {
            visit.value(&e.visit).map(|v| one(&display_value(dimension, v).unwrap_or_default())).unwrap_or_default()
        }
        Dimension::Total | Dimension::Time(_) => Vec::new(),
    }
}

/// Whether the filters select a visit (its events, in order): its visit attributes pass each
/// visit filter (the exit page as the visit ends), and for each event filter some event passes
/// it — or, for `is_not`, every event does (a visit that never viewed the page). So a filter on
/// a page gives visit metrics of the visits that viewed it, as Plausible's do.
fn session_selected(session: &[crate::stored::StoredEvent], filters: &[Filter]) -> bool {
    let Some(last) = session.last() else { return false };
    filters.iter().all(|f| {
        if !f.dimension.is_of_event() {
            passes(f, last)
        } else if f.op.is_negated() {
            session.iter().all(|e| passes(f, e))
        } else {
            session.iter().any(|e| passes(f, e))
        }
    })
}

fn passes(f: &Filter, e: &crate::stored::StoredEvent) -> bool {
    let values = event_value(e, &f.dimension);
    if f.op.is_negated() { values.iter().all(|v| f.accepts(v)) } else { values.iter().any(|v| f.accepts(v)) }
}

/// The items of `dimensions` that `events` (sorted by session, each session whole) passing the
/// filters add up to, by summing each event's deltas: the reference the block scan ([`scan`])
/// is tested against.
fn reference_items(
    events: &[crate::stored::StoredEvent],
    zone: &SiteZone,
    filters: &[Filter],
    dimensions: &[&str],
    periods: &[Period],
) -> HashMap<crate::stored::AggKey, Sum> {
    let mut items: HashMap<crate::stored::AggKey, Sum> = HashMap::new();
    let mut add = |e: &crate::stored::StoredEvent, event_part: bool, visit_part: bool| {
        crate::aggregate::for_each_delta_of_periods(e, zone, periods, |key, delta| {
            let (events, visits) = delta.counters.split();
            let mut counters = Counters::default();
            if event_part {
                counters.add(&events);
            }
            if visit_part {
                counters.add(&visits);
            }
            let visitor = delta.visitor.filter(|_| event_part);
            if (counters.is_zero() && visitor.is_none()) || !dimensions.contains(&key.dimension) {
                return;
            }
            let entry = items.entry(key.to_owned_key()).or_default();
            entry.counters.add(&counters);
            if let Some(v) = visitor {
                entry.sketch.insert_u64(v);
            }
        });
    };
    for session in events.chunk_by(|a, b| a.visitor_id == b.visitor_id && a.session_id == b.session_id) {
        let selected = session_selected(session, filters);
        for e in session {
            add(e, filters.iter().all(|f| passes(f, e)), selected);
        }
    }
    items
}
