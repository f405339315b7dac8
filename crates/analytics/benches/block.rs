//! Criterion benches of reading event blocks: the columns a filtered breakdown reads from a block
//! as a busy writer leaves it (17 events, never merged) and from a merged one (1,024 events).
//! `cargo bench -p analytics --bench block`.

use std::hint::black_box;
use std::sync::Arc;

use analytics::block::{self, Col, Cols};
use analytics::stored::{PrevState, StoredEvent, Visit, VisitAttrs};
use analytics::visitor::{UtcDay, VisitorId};
use criterion::{Criterion, criterion_group, criterion_main};

/// 2026-11-22T07:30:00Z.
const T0: i64 = 1_795_332_600_000;

const SITE: &str = "01JDB3Y5C8M9V7T2X4K6P0SITE";

const PATHS: [&str; 8] = ["/", "/pricing", "/blog", "/blog/why-tally", "/docs", "/docs/install", "/about", "/signup"];
const COUNTRIES: [&str; 5] = ["DE", "US", "FR", "GB", "NL"];
const SOURCES: [&str; 4] = ["Google", "Direct / None", "Hacker News", "DuckDuckGo"];

/// `n` events of sessions of three events each, over a handful of pages, countries and sources.
fn events(n: usize) -> Vec<StoredEvent> {
    (0..n)
        .map(|i| {
            let session = i / 3;
            let seq = (i % 3) as u32;
            let start = T0 + session as i64 * 20_000;
            let visit = Arc::new(VisitAttrs::new(
                start,
                &Visit {
                    entry_page: PATHS[session % PATHS.len()],
                    source: SOURCES[session % SOURCES.len()],
                    country: COUNTRIES[session % COUNTRIES.len()],
                    device: "Desktop",
                    browser: "Firefox",
                    browser_version: "133.0",
                    os: "Windows",
                    os_version: "10",
                    ..Visit::default()
                },
            ));
            let mut prev = PrevState::default();
            for s in 0..seq {
                prev =
                    prev.after(true, true, start + i64::from(s) * 5_000, PATHS[(session + s as usize) % PATHS.len()]);
            }
            StoredEvent {
                site_id: SITE.into(),
                day: UtcDay::parse("2026-11-22").expect("a day"),
                visitor_id: VisitorId::from_u64(0x5d41_402a_bc4b_0000 + session as u64),
                session_id: ulid::Ulid(0x0193_0000_0000_0000_0000_0000_0000_0000 + session as u128),
                seq,
                name: "pageview".into(),
                ts: start + i64::from(seq) * 5_000,
                hostname: "example.com".into(),
                path: PATHS[(session + seq as usize) % PATHS.len()].into(),
                props: Default::default(),
                revenue: None,
                interactive: true,
                goals: Vec::new(),
                visit,
                prev,
                run: "01JDB3Y5C8M9V7T2X4K6P0RUN0".into(),
                epoch: 1,
                ttl: 0,
            }
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let day = UtcDay::parse("2026-11-22").expect("a day");
    // What a filtered breakdown of visitors and page views (country is X, by source) reads.
    let breakdown = Cols::NONE
        .with(Col::Sessions)
        .with(Col::Session)
        .with(Col::Ts)
        .with(Col::Name)
        .with(Col::Path)
        .with(Col::VisitCountry)
        .with(Col::VisitSource);
    for n in [17, 1024] {
        let bytes = block::encode(SITE, day, &events(n)).expect("a block");
        c.bench_function(&format!("read_breakdown_columns_of_{n}_events"), |b| {
            b.iter(|| black_box(block::read(black_box(&bytes), breakdown).expect("a block").len))
        });
        c.bench_function(&format!("read_every_column_of_{n}_events"), |b| {
            b.iter(|| black_box(block::read(black_box(&bytes), Cols::ALL).expect("a block").len))
        });
    }
}

criterion_group!(block_reads, benches);
criterion_main!(block_reads);
