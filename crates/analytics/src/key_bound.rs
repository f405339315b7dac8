//! Values that reach a storage key, bounded so that no accepted value can make a key too long.
//!
//! DynamoDB refuses a partition key over 2,048 bytes and a sort key over 1,024 (both engines
//! enforce it). An aggregate item is keyed `AGG#{site}#{period}#{dimension}` / `B#{bucket}#{value}`,
//! and the values that reach it come from clients: a page path or a property value is accepted
//! at up to 2,000 bytes, and key encoding turns a space or a `#` into three bytes. One such value
//! used to make a flush fail for every site. So every aggregate value and dimension passes through
//! [`bound_value`] / [`bound_dimension`] before it reaches a key ([`bound_event`] does the whole
//! event, once, where its deltas are made):
//!
//! - a value whose key encoding fits in [`MAX_VALUE_KEY_BYTES`] is kept as it is;
//! - a longer one becomes its longest prefix that fits (cut at a character boundary), then
//!   [`MARK`] and 16 hex digits of the SHA-256 of the whole value. Two long values that share
//!   the prefix stay two rows, the dashboard shows the start of the value, and bounding a bounded
//!   value changes nothing, so a filter can name either form.
//!
//! Bounding is a pure function of the value, so live aggregation, recovery, rebuilds and the
//! raw-event path of queries agree on it. Raw events keep the whole value.
//!
//! ```
//! use analytics::key_bound::{MAX_VALUE_KEY_BYTES, bound_value};
//!
//! assert_eq!(bound_value("/pricing"), "/pricing");
//! let long = format!("/{}", "a b".repeat(1000));
//! let bounded = bound_value(&long);
//! assert!(model::key::encoded_str_len(&bounded) <= MAX_VALUE_KEY_BYTES);
//! assert!(bounded.starts_with("/a b"));
//! assert_eq!(bound_value(&bounded), bounded);
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use model::key::encoded_str_len;
use sha2::{Digest, Sha256};

#[cfg(test)]
use crate::stored::Visit;
use crate::stored::{PROPS_PREFIX, StoredEvent, VisitAttrs};

/// The most bytes a dimension value may take, key-encoded, in an aggregate's sort key
/// `B#{bucket}#{value}`: 1,024 allowed, less `B#`, the longest bucket label (13) and a `#`, with
/// room to spare should a template grow.
pub const MAX_VALUE_KEY_BYTES: usize = 768;

/// The most bytes a dimension name (`event:props:{key}`) may take, key-encoded, in an aggregate's
/// partition key `AGG#{site}#{period}#{dimension}`: 2,048 allowed, less the site id, the period
/// and the separators, with room to spare.
pub const MAX_DIMENSION_KEY_BYTES: usize = 1536;

/// What separates a bounded value's prefix from the hash of the whole.
pub const MARK: &str = "…";

/// Hex digits of the whole value's SHA-256 a bounded value ends with (64 bits).
const HASH_HEX: usize = 16;

/// `value` as it may appear in an aggregate key (see the module docs).
pub fn bound_value(value: &str) -> Cow<'_, str> {
    bound(value, MAX_VALUE_KEY_BYTES)
}

/// A dimension name as it may appear in an aggregate key (see the module docs).
pub fn bound_dimension(dimension: &str) -> Cow<'_, str> {
    bound(dimension, MAX_DIMENSION_KEY_BYTES)
}

/// A property key as it may appear in a dimension name: `event:props:` and the bounded key fit
/// in [`MAX_DIMENSION_KEY_BYTES`].
pub fn bound_prop_key(key: &str) -> Cow<'_, str> {
    bound(key, MAX_DIMENSION_KEY_BYTES - PROPS_PREFIX.len())
}

/// `value`, unchanged when its key encoding takes at most `max` bytes, else its longest prefix
/// that leaves room for [`MARK`] and the hash, then those.
fn bound(value: &str, max: usize) -> Cow<'_, str> {
    // Encoding at most triples a character's bytes, so short values need no measuring (the hot
    // path: every event's every value comes here).
    if value.len().saturating_mul(3) <= max || encoded_str_len(value) <= max {
        return Cow::Borrowed(value);
    }
    let budget = max - MARK.len() - HASH_HEX;
    let mut used = 0;
    let mut end = 0;
    let mut buf = [0u8; 4];
    for (i, c) in value.char_indices() {
        let cost = encoded_str_len(c.encode_utf8(&mut buf));
        if used + cost > budget {
            break;
        }
        used += cost;
        end = i + c.len_utf8();
    }
    let digest = Sha256::digest(value.as_bytes());
    let hash: String = digest.iter().take(HASH_HEX / 2).map(|b| format!("{b:02x}")).collect();
    Cow::Owned(format!("{}{MARK}{hash}", &value[..end]))
}

/// Whether any value of `event` that reaches an aggregate key needs bounding.
fn needs_bounding(e: &StoredEvent) -> bool {
    let long = |v: &str| matches!(bound_value(v), Cow::Owned(_));
    let v = &e.visit;
    long(&e.path)
        || long(&e.hostname)
        || long(&e.name)
        || long(&e.prev.exit_page)
        || e.goals.iter().any(|g| long(g))
        || e.props.iter().any(|(k, value)| long(value) || matches!(bound_prop_key(k), Cow::Owned(_)))
        || v.texts().into_iter().any(long)
}

/// `event` with every value that reaches an aggregate key bounded: borrowed as it is when none
/// needs it (nearly always), else a copy with those values bounded.
pub fn bound_event(event: &StoredEvent) -> Cow<'_, StoredEvent> {
    if !needs_bounding(event) {
        return Cow::Borrowed(event);
    }
    let mut e = event.clone();
    let fix = |s: &mut String| {
        if let Cow::Owned(b) = bound_value(s) {
            *s = b;
        }
    };
    fix(&mut e.path);
    fix(&mut e.hostname);
    fix(&mut e.name);
    fix(&mut e.prev.exit_page);
    e.goals.iter_mut().for_each(fix);
    e.props = e.props.iter().map(|(k, v)| (bound_prop_key(k).into_owned(), bound_value(v).into_owned())).collect();
    let bounded: Vec<Cow<'_, str>> = event.visit.texts().into_iter().map(bound_value).collect();
    e.visit = Arc::new(VisitAttrs::from_texts(event.visit.start_ts, std::array::from_fn(|i| &*bounded[i])));
    Cow::Owned(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_values_are_kept_and_long_ones_cut_with_a_hash() {
        assert!(matches!(bound_value("/pricing"), Cow::Borrowed("/pricing")));
        let a = format!("/{}", "x".repeat(3000));
        let b = format!("/{}y", "x".repeat(2999));
        let (ba, bb) = (bound_value(&a), bound_value(&b));
        assert_ne!(ba, bb, "values sharing the kept prefix stay distinct");
        assert!(ba.starts_with("/xxx") && ba.contains(MARK));
        assert_eq!(encoded_str_len(&ba), MAX_VALUE_KEY_BYTES);
    }

    /// An event with every field that reaches an aggregate key at the longest ingestion accepts
    /// (`crate::event::Limits`: url 2,000 bytes, props keys 300 and values 2,000 bytes, names 120
    /// characters; goal patterns 2,000 bytes; User-Agents cut at 1,024), each filled with `fill`.
    fn longest_event(fill: char) -> StoredEvent {
        let text = |bytes: usize| -> String {
            let n = (bytes / fill.len_utf8()).max(1);
            std::iter::repeat_n(fill, n).collect()
        };
        let path = format!("/{}", text(1999));
        let props = (0..30)
            .map(|i| {
                let key = format!("{i:02}{}", text(298));
                (key, text(2000))
            })
            .collect();
        StoredEvent {
            site_id: "01JDB3Y5C8M9V7T2X4K6P0QWER".into(),
            day: crate::visitor::UtcDay::parse("2026-11-22").unwrap(),
            visitor_id: crate::visitor::VisitorId::parse("3f2a9c0d1e4b5a67").unwrap(),
            session_id: "01JDB3Y5C8M9V7T2X4K6P0QWES".parse().unwrap(),
            seq: 3,
            name: std::iter::repeat_n(fill, 120).collect(),
            ts: 1_795_000_000_000,
            hostname: text(253),
            path: path.clone(),
            props,
            revenue: None,
            interactive: true,
            goals: vec![format!("Visit /{}", text(1999)), std::iter::repeat_n(fill, 120).collect()],
            visit: std::sync::Arc::new(crate::stored::VisitAttrs::new(
                1_794_990_000_000,
                &Visit {
                    entry_page: &path,
                    source: &text(2000),
                    referrer: &text(2000),
                    utm_source: &text(2000),
                    utm_medium: &text(2000),
                    utm_campaign: &text(2000),
                    utm_content: &text(2000),
                    utm_term: &text(2000),
                    country: "DE",
                    device: "Desktop",
                    browser: &text(1024),
                    browser_version: &text(1024),
                    os: &text(1024),
                    os_version: &text(1024),
                    region: &text(32),
                    city: &text(200),
                    screen: "Desktop",
                    language: &text(35),
                },
            )),
            prev: crate::stored::PrevState {
                events: 2,
                pageviews: 2,
                interactive: 2,
                last_ts: 1_794_999_000_000,
                exit_page: format!("/x{}", text(1998)),
            },
            run: "01JDB3Y5C8M9V7T2X4K6P0QWET".into(),
            epoch: 1,
            ttl: 0,
        }
    }

    /// Regression: a page URL or property value of about 1,100 bytes was accepted and its
    /// aggregate item's sort key was over DynamoDB's 1,024 bytes, which stopped every flush.
    /// Keys are rendered by the model layer from the schema, as the flush writes them.
    #[test]
    fn the_longest_accepted_values_make_aggregate_keys_that_fit() {
        let schema = crate::schema::tally_schema(crate::schema::TABLE_NAME);
        let entity = schema.entity("Aggregate").unwrap();
        let zone = crate::period::SiteZone::new("Asia/Kathmandu").unwrap();
        for fill in ['a', '#', ' ', '%', '\u{7f}', 'é', '\u{1F600}'] {
            let event = longest_event(fill);
            let mut keys = 0;
            for (key, _) in crate::aggregate::deltas(&event, &zone) {
                let fields = store::item! {
                    "site_id" => key.site_id.as_str(),
                    "period" => key.period.as_str(),
                    "dimension" => key.dimension.as_str(),
                    "bucket" => key.bucket.as_str(),
                    "value" => key.value.as_str(),
                };
                let rendered = entity.primary_key(&fields).unwrap_or_else(|e| panic!("{fill:?}: {e}")).unwrap();
                let len = |k: &str| rendered.get(k).and_then(|v| v.as_s()).map_or(0, str::len);
                assert!(len("pk") <= store::limits::MAX_PARTITION_KEY_BYTES, "{fill:?}");
                assert!(len("sk") <= store::limits::MAX_SORT_KEY_BYTES, "{fill:?}");
                keys += 1;
            }
            // Every dimension of the event was there to check (30 props, 15 visit, 4 event).
            assert!(keys > 49 * 3, "{fill:?}: only {keys} keys");
        }
    }

    proptest! {
        #[test]
        fn bounded_values_fit_stay_apart_and_are_fixed_points(
            a in "[ #%a-zé\u{1F600}\\x00-\\x1f]{0,1500}",
            b in "[ #%a-zé\u{1F600}\\x00-\\x1f]{0,1500}",
        ) {
            let (ba, bb) = (bound_value(&a), bound_value(&b));
            prop_assert!(encoded_str_len(&ba) <= MAX_VALUE_KEY_BYTES);
            prop_assert_eq!(bound_value(&ba), ba.clone());
            prop_assert_eq!(a == b, ba == bb);
            if encoded_str_len(&a) <= MAX_VALUE_KEY_BYTES {
                prop_assert_eq!(&*ba, a.as_str());
            }
            prop_assert!(encoded_str_len(&bound_prop_key(&a)) + PROPS_PREFIX.len() <= MAX_DIMENSION_KEY_BYTES);
        }
    }
}
