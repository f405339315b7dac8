//! Fuzzes ingestion without storage: any fields, parsed and, when valid, enriched, must never
//! panic, and whatever parses keeps within the spec's limits.
//!
//! The input is cut at `0x00` bytes into the event's fields (name, url, domain, referrer,
//! User-Agent, `X-Forwarded-For`, `CF-IPCountry`, then property keys and values in pairs), each
//! read as lossy UTF-8, so the fuzzer reaches every field with a few bytes.
//!
//! Run with `cargo +nightly fuzz run ingest` from `crates/analytics`.

#![no_main]

use std::net::IpAddr;
use std::sync::LazyLock;

use analytics::enrich::{Enricher, EnricherConfig, IpRanges, SiteContext};
use analytics::event::{Event, Hostname, Limits, RawEvent};
use libfuzzer_sys::fuzz_target;

static ENRICHER: LazyLock<Enricher> = LazyLock::new(|| {
    let config = EnricherConfig {
        trusted_proxies: IpRanges::parse(["10.0.0.0/8"]).unwrap(),
        country_headers: vec!["cf-ipcountry".into()],
        ..EnricherConfig::default()
    };
    Enricher::new(config).unwrap()
});

fuzz_target!(|data: &[u8]| {
    let mut fields = data.split(|&b| b == 0).map(|f| String::from_utf8_lossy(f).into_owned());
    let mut next = || fields.next().unwrap_or_default();
    let mut raw = RawEvent::pageview("", "");
    raw.name = next();
    raw.url = next();
    raw.domain = next();
    raw.referrer = Some(next());
    raw.user_agent = next();
    raw.peer_ip = IpAddr::from([10, 0, 0, 1]);
    raw.headers.push("X-Forwarded-For", next());
    raw.headers.push("CF-IPCountry", next());
    raw.hash_mode = data.first().is_some_and(|b| b & 1 == 1);
    loop {
        let (key, value) = (next(), next());
        if key.is_empty() && value.is_empty() {
            break;
        }
        raw.props.push((key, value));
    }
    let limits = Limits::default();
    let Ok(event) = Event::parse(raw, &limits) else { return };
    assert!(event.name.as_str().chars().count() <= limits.max_name_chars);
    assert!(event.props.len() <= limits.max_props);
    assert!(event.pathname.as_str().starts_with('/'));
    let domains: Vec<Hostname> = event.domains.clone();
    let site = SiteContext { domains: &domains, excluded_ips: &IpRanges::new() };
    let _ = ENRICHER.enrich(&event, &site);
});
