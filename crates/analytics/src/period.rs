//! Site time: hour, day, ISO-week and month buckets in a site's IANA time zone, Plausible's
//! date ranges resolved in that zone, and the fewest aggregate buckets that cover a range.
//!
//! ```
//! use analytics::period::{parse_date, RangeSpec, SiteZone, Unit};
//!
//! let berlin = SiteZone::new("Europe/Berlin").unwrap();
//! // 2026-11-22T07:30Z is 08:30 in Berlin.
//! let t = 1_795_332_600_000;
//! assert_eq!(berlin.bucket(Unit::Hour, t).unwrap().label(), "2026-11-22T08");
//! assert_eq!(berlin.bucket(Unit::Day, t).unwrap().label(), "2026-11-22");
//! assert_eq!(berlin.bucket(Unit::Week, t).unwrap().label(), "2026-W47");
//! assert_eq!(berlin.bucket(Unit::Month, t).unwrap().label(), "2026-11");
//!
//! // The last 7 days, ending on Sunday in Berlin, read as one weekly aggregate; the last 30
//! // days as four weeks and three days.
//! let today = berlin.date_of(t).unwrap();
//! let range = RangeSpec::parse("7d").unwrap().resolve(today, None).unwrap();
//! assert_eq!(range.to_string(), "2026-11-16..2026-11-22");
//! assert_eq!(range.cover(&berlin).unwrap().len(), 1);
//! let month = RangeSpec::parse("30d").unwrap().resolve(today, None).unwrap();
//! assert_eq!(month.cover(&berlin).unwrap().len(), 7);
//! assert_eq!(range.previous_period().unwrap().to_string(), "2026-11-09..2026-11-15");
//! assert_eq!(parse_date("2026-11-22").unwrap(), today);
//! ```
//!
//! # Buckets
//!
//! A bucket is named by its label in site time (`2026-11-22T08`, `2026-11-22`, `2026-W47`,
//! `2026-11`) and spans the instants `[start_ms, end_ms)`, where `start_ms` is the first instant at
//! which the site's clock shows the bucket's first moment and `end_ms` is the next bucket's start.
//! Buckets of one unit therefore tile the time line with neither gap nor overlap, whatever the
//! clocks do: a day is 23 or 25 hours long across a DST change; in the spring the skipped hour
//! (`02` in Berlin) is an empty bucket that lists of buckets leave out, and in the autumn the
//! repeated hour is one bucket two hours long, so an hourly aggregate never has two items with one
//! label. A local time the clock skips starts at the instant of the jump; one it shows twice
//! starts at its first showing.
//!
//! Week labels use ISO weeks (Monday to Sunday, numbered in the ISO week-year, so 2027-01-01 is in
//! `2026-W53`); unlike the other labels a week is not a prefix of its days, because weeks straddle
//! months. Labels match [`model::pattern::Bucket`]'s, which are the same buckets in UTC.
//!
//! Instants are epoch milliseconds, as everywhere in Tally; those from 1900 to 9000 are supported
//! (a typed error outside), which keeps every label four-digit and every computation in range.
//!
//! # Why jiff
//!
//! Time zones come from `jiff` with the IANA database bundled into the binary
//! (`tzdb-bundle-always`): pure Rust, no build script, no system files and no network, so a site's
//! buckets are the same on every machine, and only a handful of small crates. `chrono-tz` would
//! need `chrono` as well and generates its tables with a build script; jiff also gives exact
//! gap/fold information and ISO week dates directly.
//!
//! # Reading a range from aggregates
//!
//! Aggregates exist per hour, day, ISO week and month. [`SiteZone::cover`] splits a range into
//! the fewest of them — whole months from monthly items, whole weeks from weekly ones, the other
//! whole days from daily ones, the edges from hourly ones — so a year ending mid-day costs about
//! 12 + 3 + 8 + 24 items, not 8,760, and the last 30 days 7 items, not 31.

use std::fmt;

use jiff::civil::{DateTime, ISOWeekDate, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{Span, Timestamp};

pub use jiff::civil::Date;

/// The earliest supported instant: 1900-01-01T00:00:00Z.
pub const MIN_MS: i64 = -2_208_988_800_000;

/// The first instant past the supported range: 9000-01-01T00:00:00Z.
pub const MAX_MS: i64 = 221_845_392_000_000;

/// How many days at each end of a range [`SiteZone::cover`] considers one by one; between them,
/// only month starts. Two months, so every month start near an end is among them.
pub const COVER_EDGE_DAYS: i64 = 62;

/// What went wrong with a zone, an instant, a label or a range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeriodError {
    /// Not a time zone name in the IANA database.
    #[error("unknown time zone {0:?}; use an IANA name such as \"Europe/Berlin\"")]
    UnknownTimeZone(String),
    /// An instant or date outside the supported years.
    #[error("{0} is outside the supported range (years 1900 to 8999)")]
    OutOfRange(String),
    /// A string that is not a `YYYY-MM-DD` date.
    #[error("invalid date {0:?}; expected YYYY-MM-DD")]
    InvalidDate(String),
    /// A string that is not a bucket label of the unit asked for.
    #[error("invalid {unit} label {label:?}")]
    InvalidLabel {
        /// The unit asked for.
        unit: &'static str,
        /// The label given.
        label: String,
    },
    /// A date range that is not one of Plausible's names.
    #[error("unknown date range {0:?}; expected day, 7d, 30d, month, 6mo, 12mo, year, all or [from, to]")]
    UnknownRange(String),
    /// A range whose first date is after its last.
    #[error("a date range must not end ({last}) before it starts ({first})")]
    Reversed {
        /// The first date given.
        first: Date,
        /// The last date given.
        last: Date,
    },
}

/// A bucket size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// One hour of site time: `2026-11-22T08`.
    Hour,
    /// One day of site time: `2026-11-22`.
    Day,
    /// One ISO week of site time, Monday to Sunday: `2026-W47`.
    Week,
    /// One month of site time: `2026-11`.
    Month,
}

impl Unit {
    /// Every unit, finest first.
    pub const ALL: [Unit; 4] = [Unit::Hour, Unit::Day, Unit::Week, Unit::Month];

    /// The units aggregates are stored at, the `period` of an `Aggregate` item.
    pub const AGGREGATE_PERIODS: [Unit; 4] = [Unit::Hour, Unit::Day, Unit::Week, Unit::Month];

    /// Its lowercase name, as the `period` attribute and the Stats API's `time:…` dimensions spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
        }
    }

    /// The unit of a name written by [`Unit::as_str`].
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.as_str() == name)
    }

    /// The first moment of the bucket containing a local time.
    fn truncate(self, dt: DateTime) -> DateTime {
        let date = dt.date();
        match self {
            Unit::Hour => date.at(dt.hour(), 0, 0, 0),
            Unit::Day => date.at(0, 0, 0, 0),
            Unit::Week => {
                let back = i64::from(date.weekday().to_monday_zero_offset());
                date.checked_sub(Span::new().days(back)).unwrap_or(date).at(0, 0, 0, 0)
            }
            Unit::Month => date.first_of_month().at(0, 0, 0, 0),
        }
    }

    /// The local start of the bucket after (`+1`) or before (`-1`) the one starting at `start`.
    fn step(self, start: DateTime, by: i64) -> Result<DateTime, PeriodError> {
        let span = match self {
            Unit::Hour => Span::new().hours(by),
            Unit::Day => Span::new().days(by),
            Unit::Week => Span::new().weeks(by),
            Unit::Month => Span::new().months(by),
        };
        start.checked_add(span).map_err(|_| PeriodError::OutOfRange(start.to_string()))
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One bucket of site time: a unit, a label and the instants `[start_ms, end_ms)` it spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bucket {
    unit: Unit,
    /// Its first moment on the site's clock; the label is derived from it.
    local_start: DateTime,
    start_ms: i64,
    end_ms: i64,
}

impl Bucket {
    /// Its unit.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// Its label in site time: `2026-11-22T08`, `2026-11-22`, `2026-W47` or `2026-11`.
    pub fn label(&self) -> String {
        let d = self.local_start.date();
        let (y, m, day) = (d.year(), d.month(), d.day());
        match self.unit {
            Unit::Hour => format!("{y:04}-{m:02}-{day:02}T{:02}", self.local_start.hour()),
            Unit::Day => format!("{y:04}-{m:02}-{day:02}"),
            Unit::Week => week_label(d),
            Unit::Month => month_label(d),
        }
    }

    /// Its first instant, epoch milliseconds.
    pub fn start_ms(&self) -> i64 {
        self.start_ms
    }

    /// The first instant after it (exclusive end), epoch milliseconds.
    pub fn end_ms(&self) -> i64 {
        self.end_ms
    }

    /// Its length in milliseconds: 23 or 25 hours for a day across a DST change.
    pub fn duration_ms(&self) -> i64 {
        self.end_ms - self.start_ms
    }

    /// Whether it spans no instant (an hour the clock skips).
    pub fn is_empty(&self) -> bool {
        self.end_ms <= self.start_ms
    }

    /// The site-time date its label starts on (a week's Monday, a month's first day).
    pub fn first_date(&self) -> Date {
        self.local_start.date()
    }
}

/// A site's time zone: turns instants into site-time buckets and dates into instants.
///
/// Cheap to clone (the aggregator takes the site's zone for every event): the zone and its
/// name are both shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteZone {
    tz: TimeZone,
    name: std::sync::Arc<str>,
}

impl SiteZone {
    /// The zone of an IANA name such as `Europe/Berlin` or `UTC`.
    pub fn new(name: &str) -> Result<SiteZone, PeriodError> {
        // Names are short; refusing long ones keeps error messages and lookups small.
        if name.is_empty() || name.len() > 64 {
            return Err(PeriodError::UnknownTimeZone(name.chars().take(64).collect()));
        }
        let tz = TimeZone::get(name).map_err(|_| PeriodError::UnknownTimeZone(name.to_owned()))?;
        let name = tz.iana_name().unwrap_or(name).into();
        Ok(SiteZone { tz, name })
    }

    /// UTC, the zone of a site that names none.
    pub fn utc() -> SiteZone {
        SiteZone { tz: TimeZone::UTC, name: "UTC".into() }
    }

    /// Its IANA name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The site-time date of an instant: "today" for `now_ms`.
    pub fn date_of(&self, ts_ms: i64) -> Result<Date, PeriodError> {
        Ok(self.tz.to_datetime(timestamp(ts_ms)?).date())
    }

    /// The bucket of `unit` containing the instant `ts_ms`.
    pub fn bucket(&self, unit: Unit, ts_ms: i64) -> Result<Bucket, PeriodError> {
        let local = self.tz.to_datetime(timestamp(ts_ms)?);
        let mut start = unit.truncate(local);
        // The clock's label and the tiling agree except around a fold that crosses a bucket
        // boundary, where the instant belongs to a neighbour; the tiling is monotone, so a step
        // or two settles it.
        for _ in 0..8 {
            let b = self.bucket_starting(unit, start)?;
            if ts_ms < b.start_ms {
                start = unit.step(start, -1)?;
            } else if ts_ms >= b.end_ms {
                start = unit.step(start, 1)?;
            } else {
                return Ok(b);
            }
        }
        Err(PeriodError::OutOfRange(format!("{ts_ms} ms")))
    }

    /// The bucket a label names, the inverse of [`Bucket::label`].
    pub fn bucket_by_label(&self, unit: Unit, label: &str) -> Result<Bucket, PeriodError> {
        let start = parse_label(unit, label).ok_or_else(|| PeriodError::InvalidLabel {
            unit: unit.as_str(),
            label: label.chars().take(40).collect(),
        })?;
        self.bucket_starting(unit, start)
    }

    /// The non-empty buckets of `unit` that overlap `[start_ms, end_ms)`, in order. Lazy, so a
    /// long range of hours costs nothing up front.
    pub fn buckets(&self, unit: Unit, start_ms: i64, end_ms: i64) -> Result<Buckets<'_>, PeriodError> {
        let first = if start_ms < end_ms { Some(self.bucket(unit, start_ms)?) } else { None };
        Ok(Buckets { zone: self, next: first, end_ms })
    }

    /// The instants `[start, end)` of a range of whole site-time days.
    pub fn bounds_ms(&self, range: &DateRange) -> Result<(i64, i64), PeriodError> {
        let start = self.resolve(range.first.at(0, 0, 0, 0))?;
        let after = range.last.tomorrow().map_err(|_| PeriodError::OutOfRange(range.last.to_string()))?;
        Ok((start, self.resolve(after.at(0, 0, 0, 0))?))
    }

    /// The fewest aggregate buckets (months, weeks, days, hours) whose union is `[start_ms, end_ms)`,
    /// in order. Where an end falls inside an hour, that whole hour is included, since hours
    /// are the finest aggregates. Empty when `start_ms >= end_ms`.
    ///
    /// Hours cover the partial days at the ends; the whole days between are covered by a
    /// shortest path over day boundaries, where a day, an ISO week or a month is one step.
    /// Weeks straddle months, so taking the largest bucket that fits from the left is not
    /// always fewest (from a Monday 26 October to 30 November, five weeks and a day beat six
    /// days and the month). Away from the ends only whole months can be on a shortest path, so
    /// the path is searched over every day near the ends ([`COVER_EDGE_DAYS`]) and month starts
    /// between: a century costs no more than its months.
    pub fn cover(&self, start_ms: i64, end_ms: i64) -> Result<Vec<Bucket>, PeriodError> {
        self.cover_with_weeks_from(start_ms, end_ms, i64::MIN)
    }

    /// [`SiteZone::cover`] using only the weeks that start at or after `weeks_from_ms`: a site's
    /// weekly aggregates are complete from the moment they were first written, and the weeks
    /// before are read as days.
    pub fn cover_with_weeks_from(
        &self,
        start_ms: i64,
        end_ms: i64,
        weeks_from_ms: i64,
    ) -> Result<Vec<Bucket>, PeriodError> {
        let mut out = Vec::new();
        if start_ms >= end_ms {
            return Ok(out);
        }
        // The whole days inside: from the first day boundary at or after the start to the last
        // at or before the end.
        let first = self.bucket(Unit::Day, start_ms)?;
        let days_from = if first.start_ms == start_ms { start_ms } else { first.end_ms };
        let last = self.bucket(Unit::Day, end_ms - 1)?;
        let days_to = if last.end_ms == end_ms { end_ms } else { last.start_ms };
        if days_from >= days_to {
            self.push_hours(&mut out, start_ms, end_ms)?;
            return Ok(out);
        }
        self.push_hours(&mut out, start_ms, days_from)?;
        out.extend(self.cover_days(days_from, days_to, weeks_from_ms)?);
        self.push_hours(&mut out, days_to, end_ms)?;
        Ok(out)
    }

    /// The hours from the one containing `start_ms` to the one containing `end_ms - 1`.
    fn push_hours(&self, out: &mut Vec<Bucket>, start_ms: i64, end_ms: i64) -> Result<(), PeriodError> {
        let mut t = start_ms;
        while t < end_ms {
            // The hour containing `t` contains it, so it is not empty and the loop advances.
            let b = self.bucket(Unit::Hour, t)?;
            t = b.end_ms;
            out.push(b);
        }
        Ok(())
    }

    /// The fewest days, weeks and months tiling `[from, to)`, both day boundaries.
    fn cover_days(&self, from: i64, to: i64, weeks_from_ms: i64) -> Result<Vec<Bucket>, PeriodError> {
        // The boundaries a step may start or end on: every day near either end, month starts between.
        let edge = COVER_EDGE_DAYS * 86_400_000;
        let mut nodes = Vec::new();
        let mut t = from;
        while t < to && t <= from.saturating_add(edge) {
            nodes.push(t);
            t = self.bucket(Unit::Day, t)?.end_ms;
        }
        let tail = self.bucket(Unit::Day, to.saturating_sub(edge).max(t).min(to - 1))?.start_ms;
        while t < tail {
            nodes.push(t);
            t = self.bucket(Unit::Month, t)?.end_ms;
        }
        t = t.min(tail);
        while t < to {
            nodes.push(t);
            t = self.bucket(Unit::Day, t)?.end_ms;
        }
        nodes.push(to);
        nodes.sort_unstable();
        nodes.dedup();
        // Shortest path from each boundary to `to`, from the right; on a tie the larger bucket.
        let n = nodes.len();
        let mut steps = vec![usize::MAX; n];
        let mut choice: Vec<Option<(Bucket, usize)>> = vec![None; n];
        steps[n - 1] = 0;
        for i in (0..n - 1).rev() {
            for unit in [Unit::Month, Unit::Week, Unit::Day] {
                let b = self.bucket(unit, nodes[i])?;
                if b.start_ms != nodes[i] || b.end_ms > to || (unit == Unit::Week && b.start_ms < weeks_from_ms) {
                    continue;
                }
                let Ok(j) = nodes.binary_search(&b.end_ms) else { continue };
                if steps[j] != usize::MAX && steps[j] + 1 < steps[i] {
                    steps[i] = steps[j] + 1;
                    choice[i] = Some((b, j));
                }
            }
        }
        let mut out = Vec::with_capacity(steps[0].min(n));
        let mut i = 0;
        while i < n - 1 {
            // The start reaches `to`: day steps join the boundaries near the ends, month steps
            // those between.
            let Some((b, j)) = choice[i] else { return Err(PeriodError::OutOfRange(format!("{} ms", nodes[i]))) };
            out.push(b);
            i = j;
        }
        Ok(out)
    }

    /// The bucket of `unit` whose first local moment is `start`.
    fn bucket_starting(&self, unit: Unit, start: DateTime) -> Result<Bucket, PeriodError> {
        let start_ms = self.resolve(start)?;
        let end_ms = self.resolve(unit.step(start, 1)?)?;
        Ok(Bucket { unit, local_start: start, start_ms, end_ms })
    }

    /// The instant a local time begins: itself where the clock shows it once, its first showing
    /// in a fold, and the instant of the jump in a gap. This map never decreases as the local
    /// time grows, which is what makes buckets tile the time line.
    fn resolve(&self, dt: DateTime) -> Result<i64, PeriodError> {
        let naive_ms = TimeZone::UTC
            .to_ambiguous_timestamp(dt)
            .unambiguous()
            .map_err(|_| PeriodError::OutOfRange(dt.to_string()))?
            .as_millisecond();
        let ms = match self.tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => naive_ms - i64::from(offset.seconds()) * 1000,
            AmbiguousOffset::Fold { before, .. } => naive_ms - i64::from(before.seconds()) * 1000,
            AmbiguousOffset::Gap { after, .. } => {
                // Read with the later offset, the local time is an instant before the jump, and
                // the jump is the zone's next transition after it.
                let before_jump = timestamp(naive_ms - i64::from(after.seconds()) * 1000)?;
                match self.tz.following(before_jump).next() {
                    Some(t) => t.timestamp().as_millisecond(),
                    None => before_jump.as_millisecond(),
                }
            }
        };
        check_ms(ms)?;
        Ok(ms)
    }
}

/// The buckets of [`SiteZone::buckets`].
#[derive(Debug, Clone)]
pub struct Buckets<'a> {
    zone: &'a SiteZone,
    next: Option<Bucket>,
    end_ms: i64,
}

impl Iterator for Buckets<'_> {
    type Item = Bucket;

    fn next(&mut self) -> Option<Bucket> {
        loop {
            let current = self.next.take()?;
            if current.start_ms >= self.end_ms {
                return None;
            }
            // A bucket past the supported range ends the list rather than failing it.
            self.next = current
                .unit
                .step(current.local_start, 1)
                .and_then(|start| self.zone.bucket_starting(current.unit, start))
                .ok();
            if !current.is_empty() {
                return Some(current);
            }
        }
    }
}

/// An inclusive range of site-time dates, as Plausible's `date_range` resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DateRange {
    first: Date,
    last: Date,
}

impl DateRange {
    /// The dates from `first` to `last`, both included.
    pub fn new(first: Date, last: Date) -> Result<DateRange, PeriodError> {
        if first > last {
            return Err(PeriodError::Reversed { first, last });
        }
        check_date(first)?;
        check_date(last)?;
        Ok(DateRange { first, last })
    }

    /// Its first date.
    pub fn first(&self) -> Date {
        self.first
    }

    /// Its last date (included).
    pub fn last(&self) -> Date {
        self.last
    }

    /// How many dates it holds.
    pub fn days(&self) -> i64 {
        self.first.until(self.last).map(|s| i64::from(s.get_days()) + 1).unwrap_or(1)
    }

    /// The period of equal length just before it, for "change versus the previous period".
    pub fn previous_period(&self) -> Result<DateRange, PeriodError> {
        let last = self.first.yesterday().map_err(|_| PeriodError::OutOfRange(self.first.to_string()))?;
        let first = last
            .checked_sub(Span::new().days(self.days() - 1))
            .map_err(|_| PeriodError::OutOfRange(last.to_string()))?;
        DateRange::new(first, last)
    }

    /// The fewest aggregate buckets covering it in `zone`: months, weeks and days ([`SiteZone::cover`]).
    pub fn cover(&self, zone: &SiteZone) -> Result<Vec<Bucket>, PeriodError> {
        let (start, end) = zone.bounds_ms(self)?;
        zone.cover(start, end)
    }
}

impl fmt::Display for DateRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.first, self.last)
    }
}

/// A Plausible `date_range`, before it is resolved against "today".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RangeSpec {
    /// `day`: the day itself.
    Day,
    /// `7d`: the day and the 6 before it.
    SevenDays,
    /// `30d`: the day and the 30 before it (31 dates, as Plausible counts).
    ThirtyDays,
    /// `month`: the day's calendar month.
    Month,
    /// `6mo`: the day's month and the 5 before it.
    SixMonths,
    /// `12mo`: the day's month and the 11 before it.
    TwelveMonths,
    /// `year`: the day's calendar year.
    Year,
    /// `all`: from the site's first stats to the day.
    All,
    /// `[from, to]`: explicit dates, both included.
    Custom {
        /// The first date.
        from: Date,
        /// The last date.
        to: Date,
    },
}

impl RangeSpec {
    /// A named range: `day`, `7d`, `30d`, `month`, `6mo`, `12mo`, `year` or `all`.
    pub fn parse(name: &str) -> Result<RangeSpec, PeriodError> {
        Ok(match name {
            "day" => RangeSpec::Day,
            "7d" => RangeSpec::SevenDays,
            "30d" => RangeSpec::ThirtyDays,
            "month" => RangeSpec::Month,
            "6mo" => RangeSpec::SixMonths,
            "12mo" => RangeSpec::TwelveMonths,
            "year" => RangeSpec::Year,
            "all" => RangeSpec::All,
            _ => return Err(PeriodError::UnknownRange(name.chars().take(40).collect())),
        })
    }

    /// A custom range from two `YYYY-MM-DD` dates.
    pub fn custom(from: &str, to: &str) -> Result<RangeSpec, PeriodError> {
        Ok(RangeSpec::Custom { from: parse_date(from)?, to: parse_date(to)? })
    }

    /// The dates it means when "today" (or the query's `date`) is `date` in site time;
    /// `stats_start` is the site's first day of stats, for `all` (`date` itself when unknown).
    pub fn resolve(&self, date: Date, stats_start: Option<Date>) -> Result<DateRange, PeriodError> {
        let oor = |d: Date| PeriodError::OutOfRange(d.to_string());
        let days_back = |n: i64| date.checked_sub(Span::new().days(n)).map_err(|_| oor(date));
        let months_back = |n: i64| date.first_of_month().checked_sub(Span::new().months(n)).map_err(|_| oor(date));
        let (first, last) = match *self {
            RangeSpec::Day => (date, date),
            RangeSpec::SevenDays => (days_back(6)?, date),
            RangeSpec::ThirtyDays => (days_back(30)?, date),
            RangeSpec::Month => (date.first_of_month(), date.last_of_month()),
            RangeSpec::SixMonths => (months_back(5)?, date.last_of_month()),
            RangeSpec::TwelveMonths => (months_back(11)?, date.last_of_month()),
            RangeSpec::Year => (date.first_of_year(), date.last_of_year()),
            RangeSpec::All => (stats_start.unwrap_or(date).min(date), date),
            RangeSpec::Custom { from, to } => (from, to),
        };
        DateRange::new(first, last)
    }
}

/// A strict `YYYY-MM-DD` date within the supported years.
pub fn parse_date(text: &str) -> Result<Date, PeriodError> {
    let bad = || PeriodError::InvalidDate(text.chars().take(40).collect());
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let year = digits(&text[0..4]).ok_or_else(bad)?;
    let month = digits(&text[5..7]).ok_or_else(bad)?;
    let day = digits(&text[8..10]).ok_or_else(bad)?;
    let date = Date::new(year as i16, month as i8, day as i8).map_err(|_| bad())?;
    check_date(date)?;
    Ok(date)
}

/// The value of a run of ASCII digits (at most four, so it fits).
fn digits(s: &str) -> Option<i32> {
    (!s.is_empty() && s.len() <= 4 && s.bytes().all(|c| c.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

/// The local first moment a label names, or `None` if it is not a label of `unit`.
fn parse_label(unit: Unit, label: &str) -> Option<DateTime> {
    let b = label.as_bytes();
    let dt = match unit {
        Unit::Hour => {
            (b.len() == 13 && b[10] == b'T').then_some(())?;
            let hour = digits(label.get(11..13)?)?;
            (hour < 24).then_some(())?;
            parse_date(label.get(..10)?).ok()?.at(hour as i8, 0, 0, 0)
        }
        Unit::Day => (b.len() == 10).then(|| parse_date(label).ok()).flatten()?.at(0, 0, 0, 0),
        Unit::Week => {
            (b.len() == 8 && label.get(4..6)? == "-W").then_some(())?;
            let year = digits(label.get(..4)?)?;
            let week = digits(label.get(6..8)?)?;
            ISOWeekDate::new(year as i16, week as i8, Weekday::Monday).ok()?.date().at(0, 0, 0, 0)
        }
        Unit::Month => {
            (b.len() == 7).then_some(())?;
            parse_date(&format!("{label}-01")).ok()?.at(0, 0, 0, 0)
        }
    };
    check_date(dt.date()).ok()?;
    Some(dt)
}

fn week_label(date: Date) -> String {
    let iso = date.iso_week_date();
    format!("{:04}-W{:02}", iso.year(), iso.week())
}

fn month_label(date: Date) -> String {
    format!("{:04}-{:02}", date.year(), date.month())
}

/// The labels of the ISO week and the month a day's label lies in: `2026-11-22` gives
/// `2026-W47` and `2026-11`. Site-time days nest in weeks and months (every bucket starts at a
/// day's start), so these are the buckets of every instant of that day. `None` for text that is
/// not a day label.
pub fn week_and_month_of_day(label: &str) -> Option<(String, String)> {
    let date = parse_label(Unit::Day, label)?.date();
    Some((week_label(date), month_label(date)))
}

/// The jiff timestamp of a supported instant.
fn timestamp(ts_ms: i64) -> Result<Timestamp, PeriodError> {
    check_ms(ts_ms)?;
    Timestamp::from_millisecond(ts_ms).map_err(|_| PeriodError::OutOfRange(format!("{ts_ms} ms")))
}

/// Refuses instants outside [`MIN_MS`, `MAX_MS`).
fn check_ms(ts_ms: i64) -> Result<(), PeriodError> {
    if (MIN_MS..MAX_MS).contains(&ts_ms) { Ok(()) } else { Err(PeriodError::OutOfRange(format!("{ts_ms} ms"))) }
}

/// Refuses dates outside the supported years, with a day's margin for any zone's offset.
fn check_date(date: Date) -> Result<(), PeriodError> {
    if (1900..=8999).contains(&date.year())
        && date > jiff::civil::date(1900, 1, 1)
        && date < jiff::civil::date(8999, 12, 31)
    {
        Ok(())
    } else {
        Err(PeriodError::OutOfRange(date.to_string()))
    }
}

#[cfg(test)]
mod tests;
