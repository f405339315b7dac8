//! Key pattern helpers: entity and composite keys, time-series buckets, shards and TTLs.
//!
//! Times are UTC epoch **milliseconds** (`i64`), as the model layer's timestamps are; TTLs
//! are epoch **seconds**, as DynamoDB's TTL wants.
//!
//! Time-series keys are chosen so that they sort as time does and so that a coarser bucket is
//! a prefix of the finer ones inside it (`2024-12-01` ⊂ `2024-12-01T14` ⊂ `2024-12-01T14:30`),
//! which lets a `begins_with` on a day select its hours. ISO weeks are the exception
//! (`2024-W48`): a week straddles months, so it cannot be a prefix of its days.
//! Keys sort correctly for the years 0000–9999.
//!
//! The shard hash is 64-bit FNV-1a over the value's UTF-8 bytes (offset basis
//! `0xcbf29ce484222325`, prime `0x100000001b3`), reduced `mod n`. It is written down here
//! because shard numbers are stored in keys: changing the hash would move every item.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::key::{SEPARATOR, encode_str};

/// Joins parts into a key, encoding each one so that no part can contain the separator:
/// `composite_key(["SENSOR", "123", "2024-12-01T14"])` is `SENSOR#123#2024-12-01T14`.
pub fn composite_key<S: AsRef<str>>(parts: impl IntoIterator<Item = S>) -> String {
    let mut out = String::new();
    for (i, p) in parts.into_iter().enumerate() {
        if i > 0 {
            out.push(SEPARATOR);
        }
        out.push_str(&encode_str(p.as_ref()));
    }
    out
}

/// An entity key: `entity_key("USER", "alice")` is `USER#alice`.
pub fn entity_key(entity: &str, id: &str) -> String {
    composite_key([entity, id])
}

const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;
const MS_PER_DAY: i64 = 86_400_000;

/// A time-series bucket size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Granularity {
    /// One minute: `2024-12-01T14:30`.
    Minute,
    /// One hour: `2024-12-01T14`.
    Hour,
    /// One day: `2024-12-01`.
    Day,
    /// One ISO week, Monday to Sunday: `2024-W48`.
    Week,
    /// One month: `2024-12`.
    Month,
    /// One year: `2024`.
    Year,
}

impl Granularity {
    /// Every granularity, finest first.
    pub const ALL: [Granularity; 6] = [
        Granularity::Minute,
        Granularity::Hour,
        Granularity::Day,
        Granularity::Week,
        Granularity::Month,
        Granularity::Year,
    ];

    /// Its lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Minute => "minute",
            Granularity::Hour => "hour",
            Granularity::Day => "day",
            Granularity::Week => "week",
            Granularity::Month => "month",
            Granularity::Year => "year",
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    // Shift the year to start in March so that the leap day is the year's last day.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Monday = 0 … Sunday = 6 (1970-01-01 was a Thursday).
fn weekday(days: i64) -> i64 {
    (days + 3).rem_euclid(7)
}

/// The ISO year and week of a day.
fn iso_week(days: i64) -> (i64, u32) {
    let thursday = days - weekday(days) + 3;
    let (y, _, _) = civil_from_days(thursday);
    let week = (thursday - days_from_civil(y, 1, 1)) / 7 + 1;
    (y, week as u32)
}

/// The first day (a Monday) of ISO week 1 of `year`.
fn iso_week1_monday(year: i64) -> i64 {
    let jan4 = days_from_civil(year, 1, 4);
    jan4 - weekday(jan4)
}

/// One time-series bucket: a granularity and the instant it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket {
    granularity: Granularity,
    start_ms: i64,
}

impl Bucket {
    /// The bucket of `granularity` containing `ts_ms`.
    pub fn containing(ts_ms: i64, granularity: Granularity) -> Bucket {
        let days = ts_ms.div_euclid(MS_PER_DAY);
        let start_ms = match granularity {
            Granularity::Minute => ts_ms - ts_ms.rem_euclid(MS_PER_MINUTE),
            Granularity::Hour => ts_ms - ts_ms.rem_euclid(MS_PER_HOUR),
            Granularity::Day => days * MS_PER_DAY,
            Granularity::Week => (days - weekday(days)) * MS_PER_DAY,
            Granularity::Month => {
                let (y, m, _) = civil_from_days(days);
                days_from_civil(y, m, 1) * MS_PER_DAY
            }
            Granularity::Year => {
                let (y, _, _) = civil_from_days(days);
                days_from_civil(y, 1, 1) * MS_PER_DAY
            }
        };
        Bucket { granularity, start_ms }
    }

    /// Its granularity.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// Its first instant, epoch milliseconds.
    pub fn start_ms(&self) -> i64 {
        self.start_ms
    }

    /// The first instant after it (exclusive end), epoch milliseconds.
    pub fn end_ms(&self) -> i64 {
        self.next().start_ms
    }

    /// The bucket after it.
    pub fn next(&self) -> Bucket {
        let days = self.start_ms.div_euclid(MS_PER_DAY);
        let start_ms = match self.granularity {
            Granularity::Minute => self.start_ms + MS_PER_MINUTE,
            Granularity::Hour => self.start_ms + MS_PER_HOUR,
            Granularity::Day => self.start_ms + MS_PER_DAY,
            Granularity::Week => self.start_ms + 7 * MS_PER_DAY,
            Granularity::Month => {
                let (y, m, _) = civil_from_days(days);
                let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                days_from_civil(y, m, 1) * MS_PER_DAY
            }
            Granularity::Year => {
                let (y, _, _) = civil_from_days(days);
                days_from_civil(y + 1, 1, 1) * MS_PER_DAY
            }
        };
        Bucket { granularity: self.granularity, start_ms }
    }

    /// Its key: `2024-12-01T14:30`, `2024-12-01T14`, `2024-12-01`, `2024-W48`, `2024-12`, `2024`.
    pub fn key(&self) -> String {
        let days = self.start_ms.div_euclid(MS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        let ms_of_day = self.start_ms.rem_euclid(MS_PER_DAY);
        let hour = ms_of_day / MS_PER_HOUR;
        let minute = ms_of_day % MS_PER_HOUR / MS_PER_MINUTE;
        match self.granularity {
            Granularity::Minute => format!("{y:04}-{m:02}-{d:02}T{hour:02}:{minute:02}"),
            Granularity::Hour => format!("{y:04}-{m:02}-{d:02}T{hour:02}"),
            Granularity::Day => format!("{y:04}-{m:02}-{d:02}"),
            Granularity::Week => {
                let (wy, w) = iso_week(days);
                format!("{wy:04}-W{w:02}")
            }
            Granularity::Month => format!("{y:04}-{m:02}"),
            Granularity::Year => format!("{y:04}"),
        }
    }

    /// Parses a key written by [`Bucket::key`]; `None` for anything else.
    pub fn parse(key: &str, granularity: Granularity) -> Option<Bucket> {
        fn num(s: &str, len: usize) -> Option<i64> {
            (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
        }
        let year = num(key.get(0..4)?, 4)?;
        let date = |rest: &str| -> Option<i64> {
            let m = num(rest.get(5..7)?, 2)? as u32;
            let d = num(rest.get(8..10)?, 2)? as u32;
            if rest.as_bytes().get(4) != Some(&b'-') || rest.as_bytes().get(7) != Some(&b'-') {
                return None;
            }
            let days = days_from_civil(year, m, d);
            // Reject dates such as 2024-02-30 by checking they survive a round trip.
            (civil_from_days(days) == (year, m, d)).then_some(days)
        };
        let start_ms = match granularity {
            Granularity::Year => {
                (key.len() == 4).then_some(())?;
                days_from_civil(year, 1, 1) * MS_PER_DAY
            }
            Granularity::Month => {
                (key.len() == 7 && key.as_bytes()[4] == b'-').then_some(())?;
                let m = num(&key[5..7], 2)? as u32;
                (1..=12).contains(&m).then_some(())?;
                days_from_civil(year, m, 1) * MS_PER_DAY
            }
            Granularity::Week => {
                (key.len() == 8 && key.get(4..6)? == "-W").then_some(())?;
                let w = num(&key[6..8], 2)?;
                let weeks_in_year = iso_week(iso_week1_monday(year + 1) - 1).1;
                (1..=i64::from(weeks_in_year)).contains(&w).then_some(())?;
                (iso_week1_monday(year) + (w - 1) * 7) * MS_PER_DAY
            }
            Granularity::Day => {
                (key.len() == 10).then_some(())?;
                date(key)? * MS_PER_DAY
            }
            Granularity::Hour => {
                (key.len() == 13 && key.as_bytes()[10] == b'T').then_some(())?;
                let h = num(&key[11..13], 2)?;
                (h < 24).then_some(())?;
                date(key)? * MS_PER_DAY + h * MS_PER_HOUR
            }
            Granularity::Minute => {
                (key.len() == 16 && key.as_bytes()[10] == b'T' && key.as_bytes()[13] == b':').then_some(())?;
                let h = num(&key[11..13], 2)?;
                let min = num(&key[14..16], 2)?;
                (h < 24 && min < 60).then_some(())?;
                date(key)? * MS_PER_DAY + h * MS_PER_HOUR + min * MS_PER_MINUTE
            }
        };
        Some(Bucket { granularity, start_ms })
    }
}

/// The time-series key of `ts_ms` at `granularity`: `time_series_key(t, Granularity::Hour)`.
pub fn time_series_key(ts_ms: i64, granularity: Granularity) -> String {
    Bucket::containing(ts_ms, granularity).key()
}

/// The buckets from the one containing `from_ms` to the one containing `to_ms`, both
/// included; empty when `from_ms > to_ms`. Lazy, so a long range costs nothing up front.
pub fn buckets_between(from_ms: i64, to_ms: i64, granularity: Granularity) -> impl Iterator<Item = Bucket> {
    let last = Bucket::containing(to_ms, granularity);
    let first = (from_ms <= to_ms).then(|| Bucket::containing(from_ms, granularity));
    std::iter::successors(first, move |b| {
        let n = b.next();
        (n.start_ms <= last.start_ms).then_some(n)
    })
}

/// The 64-bit FNV-1a hash of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The shard of `value` among `n` shards: `fnv1a64(value) % n` (`0` when `n` is 0).
pub fn shard(value: &str, n: u32) -> u32 {
    if n == 0 {
        return 0;
    }
    (fnv1a64(value.as_bytes()) % u64::from(n)) as u32
}

/// The shard of `value` as a key segment, zero-padded to the width of `n - 1` so that shard
/// keys sort numerically: `shard_key("session-1", 100)` is two digits.
pub fn shard_key(value: &str, n: u32) -> String {
    let width = n.saturating_sub(1).max(1).to_string().len();
    format!("{:0width$}", shard(value, n))
}

/// Epoch milliseconds of `t` (negative before 1970).
pub fn epoch_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The current time in epoch milliseconds.
pub fn now_ms() -> i64 {
    epoch_ms(SystemTime::now())
}

/// A TTL value: `now_ms + after`, in epoch **seconds** (rounded down), as DynamoDB wants.
pub fn ttl_timestamp(now_ms: i64, after: Duration) -> i64 {
    let after_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
    now_ms.saturating_add(after_ms).div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use proptest::prelude::*;

    use super::*;

    /// 2024-12-01T14:30:15.250Z.
    const T: i64 = 1_733_063_415_250;

    fn check(ts_ms: i64, expect: Expect) {
        let line: Vec<String> = Granularity::ALL
            .iter()
            .map(|g| {
                let b = Bucket::containing(ts_ms, *g);
                format!("{}={}", g.as_str(), b.key())
            })
            .collect();
        expect.assert_eq(&line.join(" "));
    }

    #[test]
    fn time_series_keys() {
        check(
            T,
            expect!["minute=2024-12-01T14:30 hour=2024-12-01T14 day=2024-12-01 week=2024-W48 month=2024-12 year=2024"],
        );
        check(
            0,
            expect!["minute=1970-01-01T00:00 hour=1970-01-01T00 day=1970-01-01 week=1970-W01 month=1970-01 year=1970"],
        );
        check(
            -1,
            expect!["minute=1969-12-31T23:59 hour=1969-12-31T23 day=1969-12-31 week=1970-W01 month=1969-12 year=1969"],
        );
        // 2024-12-30 is a Monday of ISO week 1 of 2025.
        check(
            1_735_516_800_000,
            expect!["minute=2024-12-30T00:00 hour=2024-12-30T00 day=2024-12-30 week=2025-W01 month=2024-12 year=2024"],
        );
        // 2021-01-03 is a Sunday of week 53 of 2020.
        check(
            1_609_632_000_000,
            expect!["minute=2021-01-03T00:00 hour=2021-01-03T00 day=2021-01-03 week=2020-W53 month=2021-01 year=2021"],
        );
        // A leap day.
        check(
            1_709_208_000_000,
            expect!["minute=2024-02-29T12:00 hour=2024-02-29T12 day=2024-02-29 week=2024-W09 month=2024-02 year=2024"],
        );
    }

    #[test]
    fn bucket_bounds_and_ranges() {
        let show = |b: Bucket| format!("{} [{}, {})", b.key(), b.start_ms(), b.end_ms());
        expect!["2024-W48 [1732492800000, 1733097600000)"].assert_eq(&show(Bucket::containing(T, Granularity::Week)));
        expect!["2024-12 [1733011200000, 1735689600000)"].assert_eq(&show(Bucket::containing(T, Granularity::Month)));
        expect!["2024-02 [1706745600000, 1709251200000)"]
            .assert_eq(&show(Bucket::containing(1_709_208_000_000, Granularity::Month)));
        let keys = |from, to, g| buckets_between(from, to, g).map(|b| b.key()).collect::<Vec<_>>().join(" ");
        expect!["2024-12-01T14 2024-12-01T15 2024-12-01T16"].assert_eq(&keys(
            T,
            T + 2 * MS_PER_HOUR,
            Granularity::Hour,
        ));
        expect!["2024-11 2024-12 2025-01 2025-02"].assert_eq(&keys(
            T - 20 * MS_PER_DAY,
            T + 70 * MS_PER_DAY,
            Granularity::Month,
        ));
        expect!["2024-W48 2024-W49"].assert_eq(&keys(T, T + MS_PER_DAY, Granularity::Week));
        expect![""].assert_eq(&keys(T, T - 1, Granularity::Day));
    }

    #[test]
    fn keys_shards_and_ttls() {
        expect!["USER#alice"].assert_eq(&entity_key("USER", "alice"));
        expect!["USER#a%23b"].assert_eq(&entity_key("USER", "a#b"));
        expect!["SENSOR#123#2024-12-01T14"].assert_eq(&composite_key([
            "SENSOR".to_string(),
            "123".to_string(),
            time_series_key(T, Granularity::Hour),
        ]));
        expect!["SITE#%#x"].assert_eq(&composite_key(["SITE", "", "x"]));
        // Golden values pin the hash: changing it would move every stored item.
        expect!["cbf29ce484222325 af63dc4c8601ec8c 1688595dcf49184d"].assert_eq(&format!(
            "{:x} {:x} {:x}",
            fnv1a64(b""),
            fnv1a64(b"a"),
            fnv1a64(b"session-1")
        ));
        expect!["61 1 0"].assert_eq(&format!(
            "{} {} {}",
            shard("session-1", 100),
            shard("session-1", 4),
            shard("x", 0)
        ));
        expect!["61 8461 0"].assert_eq(&format!(
            "{} {} {}",
            shard_key("session-1", 100),
            shard_key("session-1", 10_000),
            shard_key("x", 1)
        ));
        expect!["1735655415"].assert_eq(&ttl_timestamp(T, Duration::from_secs(30 * 86_400)).to_string());
    }

    proptest! {
        #[test]
        fn buckets_contain_their_instant_and_parse_back(ts in -62_135_596_800_000i64..253_402_300_799_999, g in 0usize..6) {
            let g = Granularity::ALL[g];
            let b = Bucket::containing(ts, g);
            prop_assert!(b.start_ms() <= ts && ts < b.end_ms());
            prop_assert_eq!(Bucket::parse(&b.key(), g), Some(b));
            prop_assert_eq!(Bucket::containing(b.end_ms(), g), b.next());
        }

        #[test]
        fn parsing_arbitrary_text_never_panics(s in ".{0,20}", t in "[0-9W:T-]{0,17}", g in 0usize..6) {
            let g = Granularity::ALL[g];
            let _ = Bucket::parse(&s, g);
            if let Some(b) = Bucket::parse(&t, g) {
                prop_assert_eq!(b.key(), t);
            }
        }

        #[test]
        fn bucket_keys_sort_like_time(a in 0i64..253_402_300_799_999, b in 0i64..253_402_300_799_999, g in 0usize..6) {
            let g = Granularity::ALL[g];
            let (ka, kb) = (Bucket::containing(a, g), Bucket::containing(b, g));
            prop_assert_eq!(ka.start_ms().cmp(&kb.start_ms()), ka.key().cmp(&kb.key()));
        }
    }
}
