//! Tests of the synthetic traffic generator: determinism, order, realism, and that every event
//! passes validation and enrichment as a real tracker's would.

use std::collections::BTreeSet;

use super::*;
use crate::enrich::{DeviceType, Enricher, EnricherConfig, IpRanges, SiteContext};
use crate::event::{Event, Hostname, Limits};

/// 2026-01-01T00:00:00Z, a Thursday.
const START: i64 = 1_767_225_600_000;

fn config(seed: u64) -> SynthConfig {
    SynthConfig::new(seed, vec!["example.com".into(), "blog.example.org".into()], START, 14, 500.0)
}

#[test]
fn equal_seeds_give_equal_events_and_other_seeds_differ() {
    let a: Vec<_> = Synth::new(config(1)).take(2_000).collect();
    let b: Vec<_> = Synth::new(config(1)).take(2_000).collect();
    let c: Vec<_> = Synth::new(config(2)).take(2_000).collect();
    assert_eq!(a.len(), 2_000);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn events_come_in_time_order_within_the_configured_days() {
    let events: Vec<_> = Synth::new(config(3)).collect();
    assert!(events.windows(2).all(|w| w[0].timestamp_ms <= w[1].timestamp_ms));
    let first = events.first().expect("some events").timestamp_ms;
    assert!(first >= START);
    // About 500 a day for 14 days; the rhythm and jitter move it by less than half.
    assert!((3_500..10_500).contains(&events.len()), "{} events", events.len());
    // The last sessions may run a little past the last midnight, never hours.
    let last = events.last().expect("some events").timestamp_ms;
    assert!(last < START + 14 * DAY_MS + 3 * 3_600_000);
}

#[test]
fn the_days_hold_the_configured_events_a_day_whichever_weekdays_they_are() {
    // 30 days from a Friday hold nine weekend days, 30 from a Monday eight; on average over
    // seeds (each day's traffic is jittered), either holds 30 days' worth.
    for first_day in [1, 4] {
        let runs = 12;
        let total: usize = (0..runs)
            .map(|seed| {
                let config = SynthConfig::new(seed, vec!["example.com".into()], START + first_day * DAY_MS, 30, 400.0);
                Synth::new(config).count()
            })
            .sum();
        let ratio = total as f64 / (f64::from(runs as u32) * 30.0 * 400.0);
        assert!((0.98..1.02).contains(&ratio), "from day {first_day}: {ratio:.3} of the configured events");
    }
}

#[test]
fn weekdays_are_busier_than_weekends_and_afternoons_than_nights() {
    let events: Vec<_> = Synth::new(config(4)).collect();
    let per_day = |day: i64| events.iter().filter(|e| (e.timestamp_ms - START).div_euclid(DAY_MS) == day).count();
    // Day 0 is a Thursday; days 2 and 3 are the weekend.
    assert!(per_day(0) + per_day(1) > per_day(2) + per_day(3));
    let hour = |e: &RawEvent| e.timestamp_ms.rem_euclid(DAY_MS) / 3_600_000;
    let night = events.iter().filter(|e| (1..5).contains(&hour(e))).count();
    let afternoon = events.iter().filter(|e| (13..17).contains(&hour(e))).count();
    assert!(afternoon > 3 * night, "afternoon {afternoon}, night {night}");
}

#[test]
fn traffic_has_bounces_referrers_campaigns_custom_events_and_several_sites() {
    let events: Vec<_> = Synth::new(config(5)).collect();
    let pageviews = events.iter().filter(|e| e.name == "pageview").count();
    let custom: BTreeSet<_> = events.iter().filter(|e| e.name != "pageview").map(|e| e.name.as_str()).collect();
    assert!(pageviews > events.len() * 8 / 10);
    assert_eq!(custom, EVENT_NAMES.into_iter().collect());
    assert!(events.iter().any(|e| e.url.contains("utm_source=newsletter")));
    assert!(events.iter().any(|e| e.referrer.as_deref().is_some_and(|r| r.contains("google"))));
    assert!(events.iter().any(|e| e.url.ends_with(SIGNUP_PAGE)));
    assert!(events.iter().any(|e| e.name == "Signup" && e.props.iter().any(|(k, _)| k == "plan")));
    let domains: BTreeSet<_> = events.iter().map(|e| e.domain.as_str()).collect();
    assert_eq!(domains.len(), 2);
    let countries: BTreeSet<_> = events.iter().filter_map(|e| e.headers.get(COUNTRY_HEADER)).collect();
    assert!(countries.len() >= 10);
}

#[test]
fn every_event_validates_and_enriches_as_a_real_browser() {
    let enricher =
        Enricher::new(EnricherConfig { country_headers: vec![COUNTRY_HEADER.into()], ..EnricherConfig::default() })
            .expect("enricher");
    let domains = [Hostname::parse("example.com").expect("host"), Hostname::parse("blog.example.org").expect("host")];
    let excluded = IpRanges::new();
    let site = SiteContext { domains: &domains, excluded_ips: &excluded };
    let mut devices = BTreeSet::new();
    for raw in Synth::new(config(6)).take(3_000) {
        let event = Event::parse(raw.clone(), &Limits::default()).unwrap_or_else(|e| panic!("{raw:?}: {e}"));
        let enrichment = enricher.enrich(&event, &site).unwrap_or_else(|r| panic!("{raw:?} dropped: {r:?}"));
        assert!(enrichment.country.is_some());
        devices.insert(format!("{:?}", enrichment.client.device));
    }
    for device in [DeviceType::Desktop, DeviceType::Mobile, DeviceType::Tablet] {
        assert!(devices.contains(&format!("{device:?}")), "{device:?} missing from {devices:?}");
    }
}

#[test]
fn no_configuration_panics() {
    assert_eq!(Synth::new(SynthConfig::new(0, Vec::new(), START, 3, 100.0)).count(), 0);
    assert_eq!(Synth::new(SynthConfig::new(0, vec!["a.example".into()], START, 0, 100.0)).count(), 0);
    assert_eq!(Synth::new(SynthConfig::new(0, vec!["a.example".into()], START, 2, -5.0)).count(), 0);
    assert!(Synth::new(SynthConfig::new(0, vec!["a.example".into()], i64::MAX - 10, 2, 50.0)).count() > 0);
}
