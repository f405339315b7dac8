//! The session cache: what [`make_room`] keeps and drops, and what a cached session tells.

use super::*;

const NOW: i64 = 1_800_000_000_000;

fn live(last_ts: i64) -> Slot {
    Arc::new(tokio::sync::Mutex::new(Cached {
        live: Some(Live {
            last: Arc::new(StoredEvent { day: UtcDay::from_unix_ms(last_ts), ts: last_ts, ..StoredEvent::default() }),
            written: None,
        }),
        head_version: None,
        just_read: false,
        holder: Holder::None,
        held_at_ms: 0,
    }))
}

fn key(i: usize) -> SessionKey {
    (SiteId::new("site"), VisitorId::from_u64(i as u64))
}

/// A cached session keeps only its latest event: the latest time it reports is the one the state
/// after that event holds, events out of time order included, and so is its liveness.
#[test]
fn a_cached_session_tells_its_latest_time_as_the_state_after_its_event_does() {
    let state = |events, last_ts| PrevState {
        events,
        pageviews: events,
        interactive: events,
        last_ts,
        exit_page: "/a".to_owned(),
    };
    let cases = [
        (PrevState::default(), NOW),   // a session's first event
        (state(3, NOW - 60_000), NOW), // in time order
        (state(3, NOW + 90_000), NOW), // arrived after a later one
        (state(1, NOW), NOW),          // at the same millisecond
    ];
    for (prev, ts) in cases {
        let live = Live {
            last: Arc::new(StoredEvent { ts, path: "/b".to_owned(), prev, ..StoredEvent::default() }),
            written: None,
        };
        let state = live.last.next();
        assert_eq!(live.last_ts(), state.last_ts);
        assert!(live.live_at(state.last_ts - SESSION_TIMEOUT_MS + 1));
        assert!(live.live_at(state.last_ts + SESSION_TIMEOUT_MS - 1));
        assert!(!live.live_at(state.last_ts - SESSION_TIMEOUT_MS));
        assert!(!live.live_at(state.last_ts + SESSION_TIMEOUT_MS));
    }
}

#[test]
fn idle_sessions_go_first_and_live_ones_stay_when_that_is_enough() {
    let mut sessions = Sessions::new();
    // A third idle (last event 31 minutes ago or more), the rest live.
    for i in 0..MAX_CACHED_SESSIONS {
        let age = if i % 3 == 0 { SESSION_TIMEOUT_MS + 60_000 + i as i64 } else { i as i64 };
        sessions.insert(key(i), live(NOW - age));
    }
    make_room(&mut sessions, NOW, MAX_CACHED_SESSIONS);
    let live_count = (0..MAX_CACHED_SESSIONS).filter(|i| i % 3 != 0).count();
    assert_eq!(sessions.len(), live_count, "every idle session dropped, no live one");
    assert!(sessions.keys().all(|(_, v)| v.as_u64() % 3 != 0));
}

#[test]
fn when_most_are_live_the_older_half_goes_and_slots_in_use_stay() {
    let mut sessions = Sessions::new();
    for i in 0..MAX_CACHED_SESSIONS {
        // visitor-i's last event was i milliseconds ago: higher i, older.
        sessions.insert(key(i), live(NOW - i as i64));
    }
    // A task holds the oldest session's slot, and another slot has no session yet (being loaded).
    let oldest = sessions[&key(MAX_CACHED_SESSIONS - 1)].clone();
    let held = oldest.try_lock().unwrap();
    sessions.insert(key(MAX_CACHED_SESSIONS), Slot::default());
    make_room(&mut sessions, NOW, MAX_CACHED_SESSIONS);

    assert!(sessions.len() <= MAX_CACHED_SESSIONS / 2 + 2, "{} left", sessions.len());
    assert!(sessions.len() >= MAX_CACHED_SESSIONS / 2 - 1, "{} left", sessions.len());
    for i in 0..MAX_CACHED_SESSIONS / 2 - 1 {
        assert!(sessions.contains_key(&key(i)), "newer session {i} dropped");
    }
    for i in MAX_CACHED_SESSIONS / 2 + 1..MAX_CACHED_SESSIONS - 1 {
        assert!(!sessions.contains_key(&key(i)), "older session {i} kept");
    }
    assert!(sessions.contains_key(&key(MAX_CACHED_SESSIONS - 1)), "a held slot was dropped");
    drop(held);
    // An empty slot (nothing cached) carries nothing worth keeping.
    assert!(!sessions.contains_key(&key(MAX_CACHED_SESSIONS)));
}

/// The borrowed key finds what the owned key stored, so a cache hit allocates nothing.
#[test]
fn a_borrowed_session_key_finds_the_owned_one() {
    let mut sessions = Sessions::new();
    let visitor = VisitorId::from_u64(0x3f2a_9c0d_1e4b_5a67);
    let slot = live(NOW);
    sessions.insert((SiteId::new("site"), visitor), slot.clone());
    let found = sessions.get(&SessionKeyRef("site", visitor)).expect("found by the borrowed key");
    assert!(Arc::ptr_eq(found, &slot));
    assert!(sessions.get(&SessionKeyRef("site", VisitorId::from_u64(1))).is_none());
    assert!(sessions.get(&SessionKeyRef("other", visitor)).is_none());
}

/// An imported event that names its client changes its own enrichment only: the parsed client
/// it shares with the User-Agent cache stays as parsed for the next event with that User-Agent.
#[test]
fn an_imports_client_changes_its_event_and_not_the_cached_user_agent() {
    let enricher = crate::enrich::Enricher::new(crate::enrich::EnricherConfig::default()).unwrap();
    let ua = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0";
    let mut raw = RawEvent::pageview("https://example.com/", "example.com");
    raw.user_agent = ua.into();
    let event = Event::parse(raw, &crate::event::Limits::default()).unwrap();
    let domains = [crate::event::Hostname::parse("example.com").unwrap()];
    let site = crate::enrich::SiteContext { domains: &domains, excluded_ips: &Default::default() };
    let mut imported = enricher.enrich(&event, &site).unwrap();
    let client = ImportClient { browser: "Netscape".into(), os: "BeOS".into(), device: "tv".into() };
    client.apply(&mut imported);
    assert_eq!(
        (imported.client.browser.name.as_str(), imported.client.os.name.as_str(), imported.client.device),
        ("Netscape", "BeOS", crate::enrich::DeviceType::Tv)
    );
    let next = enricher.enrich(&event, &site).unwrap();
    assert_eq!(
        (next.client.browser.name.as_str(), next.client.os.name.as_str(), next.client.device),
        ("Firefox", "Linux", crate::enrich::DeviceType::Desktop)
    );
}
