//! Criterion benches of the per-event ingestion work that needs no storage: validating an event,
//! enriching it (User-Agent patterns, bot lists, referrer list, forwarding headers), and hashing
//! its visitor id. `cargo bench -p analytics --bench ingest`.

use std::hint::black_box;
use std::net::IpAddr;

use analytics::enrich::{Enricher, EnricherConfig, IpRanges, SiteContext};
use analytics::event::{Event, Hostname, Limits, RawEvent};
use analytics::visitor::{Salt, visitor_id};
use criterion::{Criterion, criterion_group, criterion_main};

/// A mix of today's common browsers, one of each, as a site sees them.
const USER_AGENTS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.104 Mobile Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.2 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.86",
    "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
];

fn raw_event(i: usize) -> RawEvent {
    let mut raw =
        RawEvent::pageview("https://www.example.com/blog/post?utm_source=newsletter&utm_medium=email", "example.com");
    raw.user_agent = USER_AGENTS[i % USER_AGENTS.len()].into();
    raw.referrer = Some("https://www.google.com/search?q=tally".into());
    raw.peer_ip = IpAddr::from([10, 0, 0, 2]);
    raw.headers.push("X-Forwarded-For", format!("198.51.100.{}", i % 250));
    raw.timestamp_ms = 1_795_305_600_000;
    raw
}

fn benches(c: &mut Criterion) {
    let config = EnricherConfig { trusted_proxies: IpRanges::parse(["10.0.0.0/8"]).unwrap(), ..Default::default() };
    let enricher = Enricher::new(config).unwrap();
    let domains = [Hostname::parse("example.com").unwrap()];
    let excluded = IpRanges::parse(["192.0.2.0/24"]).unwrap();
    let site = SiteContext { domains: &domains, excluded_ips: &excluded };
    let limits = Limits::default();
    let events: Vec<Event> = (0..64).map(|i| Event::parse(raw_event(i), &limits).unwrap()).collect();
    let salt = Salt::random();

    c.bench_function("event_parse", |b| {
        let raws: Vec<RawEvent> = (0..64).map(raw_event).collect();
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % raws.len();
            black_box(Event::parse(raws[i].clone(), &limits).unwrap())
        })
    });
    c.bench_function("user_agent_parse", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % USER_AGENTS.len();
            black_box(enricher.user_agents().parse_uncached(USER_AGENTS[i]))
        })
    });
    c.bench_function("user_agent_parse_cached", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % USER_AGENTS.len();
            black_box(enricher.user_agents().parse(USER_AGENTS[i]))
        })
    });
    c.bench_function("bot_check", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % USER_AGENTS.len();
            black_box(enricher.bots().check_user_agent_uncached(USER_AGENTS[i]))
        })
    });
    c.bench_function("bot_check_cached", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % USER_AGENTS.len();
            black_box(enricher.bots().check_user_agent(USER_AGENTS[i]))
        })
    });
    c.bench_function("enrich", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % events.len();
            black_box(enricher.enrich(&events[i], &site).unwrap())
        })
    });
    c.bench_function("visitor_id", |b| {
        let ip = IpAddr::from([198, 51, 100, 7]);
        b.iter(|| black_box(visitor_id(&salt, "01JD0000000000000000000000", ip, USER_AGENTS[0])))
    });
}

criterion_group!(ingest, benches);
criterion_main!(ingest);
