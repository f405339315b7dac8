//! Which sessions were active when: each flush writes, per site and UTC day, one `SessionLog`
//! item listing the sessions that had an event in the epoch, each with its latest event time.
//!
//! Recent sessions read a day's newest log items and then each session they name (one Query
//! each), so listing them costs what is listed, not the day's traffic; without the log the list
//! read every event of the day. An entry is 36 bytes (start day, visitor, session, time), so a
//! flush adds about 0.04 write units per active session; a busy site's flush pays one unit per
//! 28 sessions. Entries are idempotent facts: a flush retried or a run recovered may write one
//! twice, and readers keep the latest time per session.

use hashbrown::HashMap;

use store::{AttributeValue, Item};

use super::AggregateError;
use crate::stored::{SessionRef, StoredEvent};
use crate::visitor::{UtcDay, VisitorId};

/// The bytes of one entry: start day (4), visitor (8), session (16), latest event time (8).
pub const ENTRY_BYTES: usize = 36;

/// The most entries one item holds (288 KB, under DynamoDB's 400 KB item limit).
pub const MAX_ENTRIES: usize = 8_000;

#[derive(Debug, Clone, Copy)]
struct Seen {
    last_ts: i64,
    ttl: i64,
}

/// The sessions an epoch saw, by site and UTC day of activity.
#[derive(Debug, Default)]
pub struct SessionActivity {
    sites: HashMap<String, HashMap<(SessionRef, i64), Seen>>,
}

impl SessionActivity {
    /// Notes that `e`'s session was active at `e.ts`.
    pub fn record(&mut self, e: &StoredEvent) {
        let id = SessionRef::of(e);
        let sessions = match self.sites.get_mut(e.site_id.as_str()) {
            Some(s) => s,
            None => self.sites.entry(e.site_id.to_string()).or_default(),
        };
        let day = UtcDay::from_unix_ms(e.ts).days();
        let seen = sessions.entry((id, day)).or_insert(Seen { last_ts: e.ts, ttl: e.ttl });
        seen.last_ts = seen.last_ts.max(e.ts);
        seen.ttl = seen.ttl.max(e.ttl);
    }

    /// Adds what `other` recorded: each session's latest time and expiry are the later of both.
    pub fn absorb(&mut self, other: SessionActivity) {
        for (site, sessions) in other.sites {
            let mine = self.sites.entry(site).or_default();
            for (key, seen) in sessions {
                let entry = mine.entry(key).or_insert(seen);
                entry.last_ts = entry.last_ts.max(seen.last_ts);
                entry.ttl = entry.ttl.max(seen.ttl);
            }
        }
    }

    /// Whether no session was seen.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// The `SessionLog` items of this activity for a flush of `run_id`'s `epoch`: one per site
    /// and day (more past [`MAX_ENTRIES`]), newest entry first within each.
    pub fn items(&self, run_id: &str, epoch: u64) -> Vec<Item> {
        let mut out = Vec::new();
        for (site_id, sessions) in &self.sites {
            let mut by_day: HashMap<i64, Vec<(SessionRef, Seen)>> = HashMap::new();
            for (&(id, day), &seen) in sessions {
                by_day.entry(day).or_default().push((id, seen));
            }
            for (day, mut entries) in by_day {
                entries.sort_by_key(|(id, seen)| (std::cmp::Reverse(seen.last_ts), id.session));
                let date = UtcDay::from_days(day).to_string();
                for (part, chunk) in entries.chunks(MAX_ENTRIES).enumerate() {
                    let last_ts = chunk.iter().map(|(_, s)| s.last_ts).max().unwrap_or(0);
                    let ttl = chunk.iter().map(|(_, s)| s.ttl).max().unwrap_or(0);
                    let pairs: Vec<(SessionRef, i64)> = chunk.iter().map(|(id, s)| (*id, s.last_ts)).collect();
                    let mut item = Item::new();
                    item.insert("site_id".into(), site_id.as_str().into());
                    item.insert("day".into(), date.as_str().into());
                    item.insert("last_ts".into(), last_ts.into());
                    item.insert("run_id".into(), run_id.into());
                    item.insert("epoch".into(), epoch.into());
                    item.insert("part".into(), (part as u64).into());
                    item.insert("sessions".into(), AttributeValue::B(encode(&pairs)));
                    // No expiry given (an event without one) leaves the entity's default.
                    if ttl > 0 {
                        item.insert("ttl".into(), ttl.into());
                    }
                    out.push(item);
                }
            }
        }
        out
    }
}

/// The bytes of `entries` ([`ENTRY_BYTES`] each, little-endian).
pub fn encode(entries: &[(SessionRef, i64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_BYTES);
    for (id, ts) in entries {
        // Day numbers fit i32 for ±5 million years; a stored day past that is clamped.
        let start = id.day.days();
        let day = i32::try_from(start).unwrap_or(if start < 0 { i32::MIN } else { i32::MAX });
        out.extend_from_slice(&day.to_le_bytes());
        out.extend_from_slice(&id.visitor.as_u64().to_le_bytes());
        out.extend_from_slice(&id.session.0.to_le_bytes());
        out.extend_from_slice(&ts.to_le_bytes());
    }
    out
}

/// The entries of `bytes` as [`encode`] wrote them.
pub fn decode(bytes: &[u8]) -> Result<Vec<(SessionRef, i64)>, AggregateError> {
    if !bytes.len().is_multiple_of(ENTRY_BYTES) {
        return Err(AggregateError::Decode {
            what: "SessionLog".into(),
            reason: format!("{} bytes is not a whole number of {ENTRY_BYTES}-byte entries", bytes.len()),
        });
    }
    Ok(bytes
        .chunks_exact(ENTRY_BYTES)
        .map(|e| {
            let (day, rest) = e.split_at(4);
            let (visitor, rest) = rest.split_at(8);
            let (session, ts) = rest.split_at(16);
            let id = SessionRef {
                day: UtcDay::from_days(i64::from(i32::from_le_bytes(day.try_into().unwrap_or_default()))),
                visitor: VisitorId::from_u64(u64::from_le_bytes(visitor.try_into().unwrap_or_default())),
                session: ulid::Ulid(u128::from_le_bytes(session.try_into().unwrap_or_default())),
            };
            (id, i64::from_le_bytes(ts.try_into().unwrap_or_default()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(site: &str, visitor: u64, session: u128, ts: i64) -> StoredEvent {
        StoredEvent {
            site_id: site.into(),
            day: UtcDay::from_unix_ms(ts),
            visitor_id: VisitorId::from_u64(visitor),
            session_id: ulid::Ulid(session),
            seq: 0,
            name: "pageview".into(),
            ts,
            hostname: String::new(),
            path: "/".into(),
            props: Default::default(),
            revenue: None,
            interactive: true,
            goals: vec![],
            visit: Default::default(),
            prev: Default::default(),
            run: "R".into(),
            epoch: 1,
            ttl: ts / 1000 + 86_400,
        }
    }

    #[test]
    fn entries_round_trip_and_name_the_events_keys() {
        let e = event("s", 0xdead_beef_0000_0001, 7 << 80, 1_764_000_000_000);
        let id = SessionRef::of(&e);
        assert_eq!((id.day, id.visitor, id.session), (e.day, e.visitor_id, e.session_id));
        let far = SessionRef {
            day: UtcDay::from_days(-3),
            visitor: VisitorId::from_u64(u64::MAX),
            session: ulid::Ulid(u128::MAX),
        };
        let entries = vec![(id, e.ts), (far, -1)];
        let bytes = encode(&entries);
        assert_eq!(bytes.len(), 2 * ENTRY_BYTES);
        assert_eq!(decode(&bytes).unwrap(), entries);
        assert!(decode(&bytes[1..]).is_err(), "a torn entry is refused");
    }

    #[test]
    fn one_item_per_site_and_day_with_each_session_once_at_its_latest() {
        let mut activity = SessionActivity::default();
        let midnight = 1_764_028_800_000; // 2025-11-25T00:00:00Z
        activity.record(&event("a", 1, 1, midnight - 60_000));
        activity.record(&event("a", 1, 1, midnight - 1_000));
        let mut across = event("a", 1, 1, midnight + 5_000);
        across.day = UtcDay::from_unix_ms(midnight - 60_000);
        activity.record(&across);
        activity.record(&event("b", 2, 2, midnight + 9_000));
        let mut items = activity.items("run", 4);
        items.sort_by_key(|i| (i["site_id"].as_s().unwrap().to_owned(), i["day"].as_s().unwrap().to_owned()));
        type Logged = (String, String, i64, Vec<(SessionRef, i64)>);
        let summary: Vec<Logged> = items
            .iter()
            .map(|i| {
                let AttributeValue::B(bytes) = &i["sessions"] else { panic!("binary entries") };
                (
                    i["site_id"].as_s().unwrap().to_owned(),
                    i["day"].as_s().unwrap().to_owned(),
                    i["last_ts"].as_n().unwrap().to_i64().unwrap(),
                    decode(bytes).unwrap(),
                )
            })
            .collect();
        let a = SessionRef::of(&across);
        let b = SessionRef::of(&event("b", 2, 2, midnight + 9_000));
        assert_eq!(
            summary,
            [
                ("a".into(), "2025-11-24".into(), midnight - 1_000, vec![(a, midnight - 1_000)]),
                ("a".into(), "2025-11-25".into(), midnight + 5_000, vec![(a, midnight + 5_000)]),
                ("b".into(), "2025-11-25".into(), midnight + 9_000, vec![(b, midnight + 9_000)]),
            ],
            "a session active across midnight is listed on both days"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_entries_round_trip_and_any_bytes_decode_or_refuse(
            entries in proptest::collection::vec((-1_000_000i64..1_000_000, proptest::prelude::any::<u64>(),
                proptest::prelude::any::<u128>(), proptest::prelude::any::<i64>()), 0..40),
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let entries: Vec<(SessionRef, i64)> = entries
                .into_iter()
                .map(|(day, visitor, session, ts)| {
                    let id = SessionRef {
                        day: UtcDay::from_days(day),
                        visitor: VisitorId::from_u64(visitor),
                        session: ulid::Ulid(session),
                    };
                    (id, ts)
                })
                .collect();
            proptest::prop_assert_eq!(decode(&encode(&entries)).unwrap(), entries);
            let decoded = decode(&junk);
            proptest::prop_assert_eq!(decoded.is_ok(), junk.len() % ENTRY_BYTES == 0);
        }
    }

    #[test]
    fn a_busy_epoch_splits_into_parts_under_the_item_limit() {
        let mut activity = SessionActivity::default();
        for s in 0..(MAX_ENTRIES as u128 + 5) {
            activity.record(&event("a", 9, s + 1, 1_764_028_800_000 + s as i64));
        }
        let items = activity.items("run", 1);
        let sizes: Vec<usize> =
            items.iter().map(|i| if let AttributeValue::B(b) = &i["sessions"] { b.len() } else { 0 }).collect();
        assert_eq!(items.len(), 2);
        assert!(sizes.iter().all(|&s| s <= MAX_ENTRIES * ENTRY_BYTES), "{sizes:?}");
        const { assert!(MAX_ENTRIES * ENTRY_BYTES < 400_000, "an item stays under DynamoDB's limit") };
        assert_eq!(sizes.iter().sum::<usize>(), (MAX_ENTRIES + 5) * ENTRY_BYTES);
    }
}
