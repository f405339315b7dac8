//! Criterion benches of aggregation's in-memory work: the deltas of one event (what every
//! ingested event costs the aggregator before any write), and the sums a dashboard row makes of
//! a range's visitor sketches. `cargo bench -p analytics --bench aggregate`.

use std::hint::black_box;

use analytics::aggregate::{Accumulator, deltas, for_each_delta};
use analytics::period::SiteZone;
use analytics::sketch::VisitorSketch;
use analytics::stored::{AggKey, Counters, PrevState, StoredEvent, Visit, VisitAttrs};
use criterion::{Criterion, criterion_group, criterion_main};

/// 2026-11-22T07:30:00Z.
const T0: i64 = 1_795_332_600_000;

/// The third page view of a visit from a search engine, with one property.
fn pageview() -> StoredEvent {
    let prev = PrevState::default().after(true, true, T0, "/").after(true, true, T0 + 30_000, "/blog");
    StoredEvent {
        site_id: "01JDB3Y5C8M9V7T2X4K6P0SITE".into(),
        day: analytics::visitor::UtcDay::parse("2026-11-22").unwrap(),
        visitor_id: analytics::visitor::VisitorId::parse("5d41402abc4b2a76").unwrap(),
        session_id: "01JDB3Y5C8M9V7T2X4K6P0QWER".parse().unwrap(),
        seq: 2,
        name: "pageview".into(),
        ts: T0 + 90_000,
        hostname: "example.com".into(),
        path: "/pricing".into(),
        props: [("plan".to_owned(), "team".to_owned())].into(),
        revenue: None,
        interactive: true,
        goals: vec!["Visit /pricing".into()],
        visit: std::sync::Arc::new(VisitAttrs::new(
            T0,
            &Visit {
                entry_page: "/",
                source: "Google",
                referrer: "google.com",
                country: "DE",
                device: "Desktop",
                browser: "Firefox",
                browser_version: "133.0",
                os: "Windows",
                os_version: "10",
                ..Visit::default()
            },
        )),
        prev,
        run: "01JDB3Y5C8M9V7T2X4K6P0RUN0".into(),
        epoch: 1,
        ttl: 0,
    }
}

/// `n` sketches of `per` visitors each, overlapping by half, as thirty days of one page, read
/// back from their stored form as a dashboard reads them.
fn days(n: u64, per: u64) -> Vec<VisitorSketch> {
    (0..n)
        .map(|d| {
            let mut s = VisitorSketch::new();
            for i in 0..per {
                s.insert_u64((d * per / 2 + i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            }
            VisitorSketch::from_bytes(&s.to_bytes()).expect("a sketch reads back")
        })
        .collect()
}

/// One flush interval of a busy server: `n` events of 2,000 visitors over 3 seconds, on 300 pages
/// with the visit attributes varied as real traffic varies them.
fn epoch(n: u64) -> Vec<StoredEvent> {
    let base = pageview();
    let pick = |list: &[&str], i: u64| list[(i % list.len() as u64) as usize].to_owned();
    (0..n)
        .map(|i| {
            let v = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 2_000;
            let mut e = base.clone();
            e.visitor_id = analytics::visitor::VisitorId::from_u64(v.wrapping_mul(0xff51_afd7_ed55_8ccd));
            e.ts = T0 + (i * 3_000 / n) as i64;
            e.path = format!("/docs/section-{}/page-{}", i % 17, (i * 7) % 300);
            let entry_page = format!("/landing/{}", v % 40);
            let country = pick(&["DE", "US", "FR", "GB", "IN", "BR", "JP", "NL", "SE", "PL"], v);
            let browser = pick(&["Chrome", "Firefox", "Safari", "Edge", "Opera"], v / 3);
            let browser_version = format!("{}.0", 120 + v % 14);
            let os = pick(&["Windows", "macOS", "Linux", "Android", "iOS"], v / 5);
            let source = pick(&["Google", "Bing", "", "Twitter", "Hacker News", "DuckDuckGo"], v / 7);
            let utm_campaign = if v % 9 == 0 { format!("launch-{}", v % 4) } else { String::new() };
            e.visit = std::sync::Arc::new(e.visit.with(|visit| {
                *visit = Visit {
                    entry_page: &entry_page,
                    country: &country,
                    browser: &browser,
                    browser_version: &browser_version,
                    os: &os,
                    source: &source,
                    utm_campaign: &utm_campaign,
                    ..*visit
                }
            }));
            e
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let event = pageview();
    let zone = SiteZone::new("Europe/Berlin").unwrap();
    c.bench_function("deltas_of_a_pageview", |b| b.iter(|| black_box(deltas(black_box(&event), &zone))));
    // What ingestion pays: the deltas streamed (the aggregator adds each to its epoch's map by
    // a borrowed key), not collected.
    c.bench_function("stream_deltas_of_a_pageview", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for_each_delta(black_box(&event), &zone, i64::MIN, |key, delta| {
                n += key.value.len() as u64 + delta.counters.pageviews as u64;
            });
            black_box(n)
        })
    });

    // What the aggregator does with every ingested event: add its deltas to the epoch's map,
    // then complete the epoch (weeks and months summed from the days). Against the map of owned
    // keys it replaced (four strings per key, a set of visitors per item, every event's ~60
    // deltas added one by one), in the same run; 36,000 events is one 3 s flush at 12,000
    // events/s. Both end with the same items (checked below).
    let events = epoch(36_000);
    let mut group = c.benchmark_group("accumulate_an_epoch_of_36000_events");
    group.sample_size(10);
    group.bench_function("packed_keys", |b| {
        b.iter(|| {
            let mut acc = Accumulator::default();
            for e in &events {
                acc.accumulate(e, &zone);
            }
            black_box(acc.finish().len())
        })
    });
    let owned = || {
        let mut acc: hashbrown::HashMap<AggKey, (Counters, hashbrown::HashSet<u64>)> = Default::default();
        for e in &events {
            for_each_delta(e, &zone, i64::MIN, |key, delta| {
                let p = match acc.get_mut(&key) {
                    Some(p) => p,
                    None => acc.entry(key.to_owned_key()).or_default(),
                };
                p.0.add(&delta.counters);
                p.1.extend(delta.visitor);
            });
        }
        acc
    };
    group.bench_function("owned_keys_baseline", |b| b.iter(|| black_box(owned().len())));
    group.finish();
    let mut packed = Accumulator::default();
    events.iter().for_each(|e| packed.accumulate(e, &zone));
    let packed = packed.finish();
    let baseline = owned();
    assert_eq!(packed.len(), baseline.len(), "both designs end with the same items");
    for (key, pending) in packed.iter() {
        let (counters, visitors) = &baseline[&key.to_owned_key()];
        let mut sketch = VisitorSketch::new();
        visitors.iter().for_each(|&v| sketch.insert_u64(v));
        assert_eq!((&pending.counters, pending.visitors.to_sketch().to_bytes()), (counters, sketch.to_bytes()));
    }

    // A dashboard row over 30 days: the sum is merged item by item, then estimated.
    for (name, per) in [("sum_30_sparse_sketches", 50), ("sum_30_dense_sketches", 5_000)] {
        let parts = days(30, per);
        c.bench_function(name, |b| {
            b.iter(|| {
                let mut sum = VisitorSketch::new();
                for p in &parts {
                    sum.merge(black_box(p));
                }
                black_box(sum.estimate())
            })
        });
    }
    let sparse = days(1, 50).remove(0).to_bytes();
    c.bench_function("read_a_sparse_sketch", |b| b.iter(|| black_box(VisitorSketch::from_bytes(black_box(&sparse)))));
    let dense = days(1, 5_000).remove(0).to_bytes();
    c.bench_function("read_a_dense_sketch", |b| b.iter(|| black_box(VisitorSketch::from_bytes(black_box(&dense)))));

    // An aggregate flush writes each busy item's sketch back: the stored one (read dense) merged
    // with an epoch's visitors (inserted, dense or sparse).
    let mut stored_and_epoch = VisitorSketch::from_bytes(&dense).expect("a stored sketch");
    stored_and_epoch.merge(&days(1, 3_000).remove(0));
    let inserted = |n: u64| {
        let mut s = VisitorSketch::new();
        (0..n).for_each(|i| s.insert_u64(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        s
    };
    let mut inserted_and_stored = inserted(3_000);
    inserted_and_stored.merge(&VisitorSketch::from_bytes(&sparse).expect("a stored sketch"));
    for (name, sketch) in [
        ("write_a_dense_sketch_read", VisitorSketch::from_bytes(&dense).expect("a stored sketch")),
        ("write_a_dense_sketch_merged", stored_and_epoch),
        ("write_a_dense_sketch_inserted", inserted(5_000)),
        ("write_a_dense_sketch_inserted_and_merged", inserted_and_stored),
    ] {
        c.bench_function(name, |b| b.iter(|| black_box(black_box(&sketch).to_bytes())));
    }
}

criterion_group!(aggregate, benches);
criterion_main!(aggregate);
