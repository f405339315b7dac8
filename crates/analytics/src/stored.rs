//! The raw event as stored, and the session arithmetic every aggregate is derived from.
//!
//! This module is the contract between ingestion (which writes [`StoredEvent`]s), aggregation
//! (which turns each one into aggregate deltas) and rebuilds (which do the same from the table).
//!
//! **Why every event carries its session's previous state.** A visit's bounce, duration and exit
//! page change as the visit goes on. Tally counts them the way a collapsing merge does: each event
//! adds the session's *new* contribution and takes away its *previous* one ([`Contribution`]). The
//! previous state is written into the event item itself ([`PrevState`]), so an event's deltas are a
//! pure function of the stored item and the site's time zone. Live aggregation and
//! `tally aggregate --rebuild` sum the same function over the same items, so they agree by
//! construction, whatever order events arrived in.
//!
//! **Why sessions are serialised by `seq`.** Event `seq = n` of a session is written with the
//! condition that slot `n` is free. A process that loses that race re-reads the session from the
//! table and tries `n + 1`, so every event's [`PrevState`] is the fold of exactly the events before
//! it, even with several `tally serve` processes behind a round-robin load balancer.

use std::collections::BTreeMap;
use std::sync::Arc;

use ulid::Ulid;

use crate::period::Unit;
use crate::sites::SiteId;
use crate::visitor::{UtcDay, VisitorId};

/// One raw event, as ingestion made it and as an event block holds it ([`crate::block`]), in the
/// blocks of its site and of the UTC day its session started (`day`). (The per-event `Event`
/// item of [`crate::schema`], keyed by [`visitor_shard`], is how an earlier Tally stored it; it
/// is kept to read such a store once, when it is converted.)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredEvent {
    /// The id of the site the event was sent to: part of the partition key.
    pub site_id: SiteId,
    /// The UTC day the session started: part of the partition key.
    pub day: UtcDay,
    /// The visitor, as the day's salt hashes it.
    pub visitor_id: VisitorId,
    /// The session, a ULID made when its first event arrived.
    pub session_id: Ulid,
    /// The event's position in its session, from 0.
    pub seq: u32,
    /// Event name: `pageview` or a custom name.
    pub name: String,
    /// When it happened, epoch milliseconds.
    pub ts: i64,
    /// Page host name, without `www.`.
    pub hostname: String,
    /// Page path.
    pub path: String,
    /// Custom properties.
    pub props: BTreeMap<String, String>,
    /// Revenue amount in decimal text and currency, if any.
    pub revenue: Option<(String, String)>,
    /// Whether the event counts against bounces.
    pub interactive: bool,
    /// Display names of the site goals this event completed (decided at ingestion).
    pub goals: Vec<String>,
    /// The session's visit attributes, fixed by its first event: shared by every event of the
    /// session that ingestion or one block read made, not copied into each.
    pub visit: Arc<VisitAttrs>,
    /// The session as it was just before this event.
    pub prev: PrevState,
    /// The ingesting process's run id (a ULID), for exactly-once flushes: shared by every event
    /// of the run.
    pub run: Arc<str>,
    /// The flush epoch of `run` this event belongs to.
    pub epoch: u64,
    /// Expiry, epoch seconds (the site's raw-event retention).
    pub ttl: i64,
}

/// One session, as everything that names a session names it: the UTC day it started (the
/// partition of its events), its visitor and its ULID. Written `YYYY-MM-DD.<visitor>.<ULID>`,
/// the form the Stats API and the dashboard hand out and take back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionRef {
    /// The UTC day the session started.
    pub day: UtcDay,
    /// The visitor whose session it is, under the salt of the session's start day.
    pub visitor: VisitorId,
    /// Its ULID.
    pub session: Ulid,
}

impl SessionRef {
    /// The session `e` belongs to.
    pub fn of(e: &StoredEvent) -> SessionRef {
        SessionRef { day: e.day, visitor: e.visitor_id, session: e.session_id }
    }

    /// Parses the written form, checking each part's shape; the visitor's hex digits may be in
    /// either case.
    pub fn parse(text: &str) -> Option<SessionRef> {
        let mut parts = text.split('.');
        let (day, visitor, session) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        Some(SessionRef {
            day: UtcDay::parse(day)?,
            visitor: VisitorId::parse(visitor)?,
            session: Ulid::from_string(session).ok()?,
        })
    }
}

/// Written as its text: the form the Stats API and the dashboard hand out.
impl serde::Serialize for SessionRef {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl std::fmt::Display for SessionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.day, self.visitor, self.session)
    }
}

/// The attributes of a visit, fixed by its first event.
///
/// Its eighteen texts are kept one after another in one allocation, with where each ends: a
/// session cache holds 20,000 visits, and eighteen `String`s each (456 bytes inline and an
/// allocation per text that is not empty) were half of its memory (BENCHMARKS.md, "tenth
/// session: server memory"). Read them by name ([`VisitAttrs::source`], …), all at once
/// ([`VisitAttrs::texts`], [`VisitAttrs::fields`]); build one from [`Visit`] or the texts in
/// order. Two visits are equal when their start and every text are.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct VisitAttrs {
    /// When the session started, epoch milliseconds.
    pub start_ts: i64,
    /// The texts, in [`VisitAttrs::texts`] order, one after another.
    text: Box<str>,
    /// Where each text ends in `text` (each starts where the one before ends).
    ends: [u32; VisitAttrs::TEXTS],
}

/// A visit's texts by name, borrowed: what builds a [`VisitAttrs`] and what
/// [`VisitAttrs::fields`] gives back. Every text is empty unless set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Visit<'a> {
    /// The first page's path.
    pub entry_page: &'a str,
    /// Source (`Google`, `Newsletter`); empty for direct.
    pub source: &'a str,
    /// Referrer as `host/path`; empty when none.
    pub referrer: &'a str,
    /// The page URL's `utm_source` parameter; empty when absent (so are the other four).
    pub utm_source: &'a str,
    /// The page URL's `utm_medium` parameter.
    pub utm_medium: &'a str,
    /// The page URL's `utm_campaign` parameter.
    pub utm_campaign: &'a str,
    /// The page URL's `utm_content` parameter.
    pub utm_content: &'a str,
    /// The page URL's `utm_term` parameter.
    pub utm_term: &'a str,
    /// ISO 3166-1 alpha-2 country; empty when unknown.
    pub country: &'a str,
    /// Device type (`Desktop`, `Mobile`, `Tablet`).
    pub device: &'a str,
    /// Browser family.
    pub browser: &'a str,
    /// Browser major version.
    pub browser_version: &'a str,
    /// Operating system family.
    pub os: &'a str,
    /// Operating system version.
    pub os_version: &'a str,
    /// Region: the ISO 3166-2 code of the country's first subdivision (`FR-IDF`); empty unless a
    /// city database is configured and knows it.
    pub region: &'a str,
    /// City name in English; empty unless a city database is configured and knows it.
    pub city: &'a str,
    /// Screen size class (`Mobile`, `Tablet`, `Laptop`, `Desktop`) from the window or screen
    /// width the tracker sent ([`crate::enrich::screen_class`]); empty when none was sent.
    pub screen: &'a str,
    /// The browser's language as the tracker sent it (`en-US`); empty when none was sent.
    pub language: &'a str,
}

impl<'a> Visit<'a> {
    /// The texts in [`VisitAttrs::texts`] order.
    pub fn texts(&self) -> [&'a str; VisitAttrs::TEXTS] {
        [
            self.entry_page,
            self.source,
            self.referrer,
            self.utm_source,
            self.utm_medium,
            self.utm_campaign,
            self.utm_content,
            self.utm_term,
            self.country,
            self.device,
            self.browser,
            self.browser_version,
            self.os,
            self.os_version,
            self.region,
            self.city,
            self.screen,
            self.language,
        ]
    }

    /// The texts named, from the texts in [`VisitAttrs::texts`] order.
    pub fn from_texts(t: [&'a str; VisitAttrs::TEXTS]) -> Visit<'a> {
        let [
            entry_page,
            source,
            referrer,
            utm_source,
            utm_medium,
            utm_campaign,
            utm_content,
            utm_term,
            country,
            device,
            browser,
            browser_version,
            os,
            os_version,
            region,
            city,
            screen,
            language,
        ] = t;
        Visit {
            entry_page,
            source,
            referrer,
            utm_source,
            utm_medium,
            utm_campaign,
            utm_content,
            utm_term,
            country,
            device,
            browser,
            browser_version,
            os,
            os_version,
            region,
            city,
            screen,
            language,
        }
    }
}

/// Reads text `$i` of a [`VisitAttrs`] by name.
macro_rules! visit_text {
    ($($(#[$doc:meta])* $name:ident = $i:literal;)*) => {
        impl VisitAttrs {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> &str {
                    self.text($i)
                }
            )*
        }
    };
}

visit_text! {
    /// The first page's path.
    entry_page = 0;
    /// Source (`Google`, `Newsletter`); empty for direct.
    source = 1;
    /// Referrer as `host/path`; empty when none.
    referrer = 2;
    /// The page URL's `utm_source` parameter; empty when absent.
    utm_source = 3;
    /// The page URL's `utm_medium` parameter.
    utm_medium = 4;
    /// The page URL's `utm_campaign` parameter.
    utm_campaign = 5;
    /// The page URL's `utm_content` parameter.
    utm_content = 6;
    /// The page URL's `utm_term` parameter.
    utm_term = 7;
    /// ISO 3166-1 alpha-2 country; empty when unknown.
    country = 8;
    /// Device type (`Desktop`, `Mobile`, `Tablet`).
    device = 9;
    /// Browser family.
    browser = 10;
    /// Browser major version.
    browser_version = 11;
    /// Operating system family.
    os = 12;
    /// Operating system version.
    os_version = 13;
    /// Region (`FR-IDF`); empty unless a city database knows it.
    region = 14;
    /// City name in English; empty unless a city database knows it.
    city = 15;
    /// Screen size class; empty when the tracker sent no width.
    screen = 16;
    /// The browser's language (`en-US`); empty when none was sent.
    language = 17;
}

impl VisitAttrs {
    /// How many texts a visit has.
    pub const TEXTS: usize = 18;

    /// The texts' names, in [`VisitAttrs::texts`] order (the methods' and [`Visit`]'s names).
    pub const NAMES: [&'static str; VisitAttrs::TEXTS] = [
        "entry_page",
        "source",
        "referrer",
        "utm_source",
        "utm_medium",
        "utm_campaign",
        "utm_content",
        "utm_term",
        "country",
        "device",
        "browser",
        "browser_version",
        "os",
        "os_version",
        "region",
        "city",
        "screen",
        "language",
    ];

    /// A visit that started at `start_ts` with the texts of `visit`.
    pub fn new(start_ts: i64, visit: &Visit<'_>) -> VisitAttrs {
        VisitAttrs::from_texts(start_ts, visit.texts())
    }

    /// A visit that started at `start_ts` with these texts, in [`VisitAttrs::texts`] order.
    pub fn from_texts(start_ts: i64, texts: [&str; VisitAttrs::TEXTS]) -> VisitAttrs {
        let mut text = String::with_capacity(texts.iter().map(|t| t.len()).sum());
        let mut ends = [0u32; VisitAttrs::TEXTS];
        for (end, t) in ends.iter_mut().zip(texts) {
            text.push_str(t);
            // A visit's texts come from one event (at most 64 KB) or one block (at most 400 KB).
            *end = u32::try_from(text.len()).expect("a visit's texts are under 4 GiB");
        }
        VisitAttrs { start_ts, text: text.into_boxed_str(), ends }
    }

    /// Text `i` (in [`VisitAttrs::texts`] order), alone.
    pub fn text(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        // Every end is a char boundary of `text`, at or after the one before: `from_texts`
        // made them so, and nothing changes them after.
        &self.text[start..self.ends[i] as usize]
    }

    /// The text attributes, in field order (everything but `start_ts`): entry page, source,
    /// referrer, the five UTM parameters, country, device, browser and its version, operating
    /// system and its version, region, city, screen, language.
    pub fn texts(&self) -> [&str; VisitAttrs::TEXTS] {
        std::array::from_fn(|i| self.text(i))
    }

    /// The texts' length in bytes, all together: the sum of [`VisitAttrs::texts`]' lengths.
    pub fn texts_len(&self) -> usize {
        self.text.len()
    }

    /// The texts by name.
    pub fn fields(&self) -> Visit<'_> {
        Visit::from_texts(self.texts())
    }

    /// This visit with its texts changed by `change` (tests and synthetic traffic).
    pub fn with<'a>(&'a self, change: impl FnOnce(&mut Visit<'a>)) -> VisitAttrs {
        let mut fields = self.fields();
        change(&mut fields);
        VisitAttrs::new(self.start_ts, &fields)
    }
}

impl std::fmt::Debug for VisitAttrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.fields();
        f.debug_struct("VisitAttrs")
            .field("start_ts", &self.start_ts)
            .field("entry_page", &v.entry_page)
            .field("source", &v.source)
            .field("referrer", &v.referrer)
            .field("utm_source", &v.utm_source)
            .field("utm_medium", &v.utm_medium)
            .field("utm_campaign", &v.utm_campaign)
            .field("utm_content", &v.utm_content)
            .field("utm_term", &v.utm_term)
            .field("country", &v.country)
            .field("device", &v.device)
            .field("browser", &v.browser)
            .field("browser_version", &v.browser_version)
            .field("os", &v.os)
            .field("os_version", &v.os_version)
            .field("region", &v.region)
            .field("city", &v.city)
            .field("screen", &v.screen)
            .field("language", &v.language)
            .finish()
    }
}

/// A session's running state: what the events before this one added up to.
/// The empty state (`PrevState::default()`) is before the first event (`seq == 0`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PrevState {
    /// Events so far.
    pub events: u32,
    /// Page views so far.
    pub pageviews: u32,
    /// Interactive events so far (page views count).
    pub interactive: u32,
    /// The latest event time so far (epoch ms); 0 when empty.
    pub last_ts: i64,
    /// The path of the latest page view so far; empty when none.
    pub exit_page: String,
}

impl PrevState {
    /// Whether no event came before.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// The state after `event` (name, time, path, interactive) is added. Events may arrive out of
    /// time order: the exit page is the page of the latest page view by time.
    pub fn after(&self, is_pageview: bool, interactive: bool, ts: i64, path: &str) -> PrevState {
        let later = self.is_empty() || ts >= self.last_ts;
        PrevState {
            events: self.events + 1,
            pageviews: self.pageviews + u32::from(is_pageview),
            interactive: self.interactive + u32::from(interactive || is_pageview),
            last_ts: if later { ts } else { self.last_ts },
            exit_page: if is_pageview && (later || self.exit_page.is_empty()) {
                path.to_owned()
            } else {
                self.exit_page.clone()
            },
        }
    }

    /// What a session in this state contributes to the visit counters; `None` when empty.
    pub fn contribution(&self, start_ts: i64) -> Option<Contribution> {
        (!self.is_empty()).then(|| Contribution {
            visits: 1,
            bounces: i64::from(self.interactive <= 1),
            duration_ms: (self.last_ts - start_ts).max(0),
            visit_pageviews: i64::from(self.pageviews),
        })
    }
}

impl StoredEvent {
    /// Whether this is a page view.
    pub fn is_pageview(&self) -> bool {
        self.name == crate::event::EventName::PAGEVIEW
    }

    /// The session's state after this event.
    pub fn next(&self) -> PrevState {
        self.prev.after(self.is_pageview(), self.interactive, self.ts, &self.path)
    }
}

/// One session's share of the visit counters (all counted in the bucket of the session's start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Contribution {
    /// Always 1 for a session with events.
    pub visits: i64,
    /// 1 when the session is a bounce: at most one interactive event.
    pub bounces: i64,
    /// Last event time minus first.
    pub duration_ms: i64,
    /// The session's page views.
    pub visit_pageviews: i64,
}

/// The write shard of a visitor's events: `0..EVENT_SHARDS`, from the visitor id's hex digits.
pub fn visitor_shard(visitor_id: VisitorId) -> u32 {
    let h = visitor_id
        .hex()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    (h % u64::from(crate::schema::EVENT_SHARDS)) as u32
}

/// The granularity of an aggregate item: its `period` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Period {
    /// One UTC minute, labelled by minutes since the epoch (10 digits); realtime only, kept 2 hours,
    /// for the `total` and `event:page` dimensions only.
    Minute,
    /// One hour of site time (`2026-11-22T08`, [`crate::period::Unit::Hour`] labels).
    Hour,
    /// One day of site time (`2026-11-22`).
    Day,
    /// One ISO week of site time, Monday to Sunday (`2026-W47`): a range's whole weeks are read
    /// as one item each rather than seven days, which bounds what a 30-day range reads.
    Week,
    /// One month of site time (`2026-11`).
    Month,
}

impl Period {
    /// Every period.
    pub const ALL: [Period; 5] = [Period::Minute, Period::Hour, Period::Day, Period::Week, Period::Month];

    /// The `period` attribute's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Minute => "minute",
            Period::Hour => "hour",
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    /// Whether its items are sums of day items (weeks and months): the aggregator adds them up
    /// from an epoch's days, and may write them one flush later than the days
    /// (`AggregatorConfig::defer_weeks_and_months`).
    pub fn is_sum_of_days(self) -> bool {
        matches!(self, Period::Week | Period::Month)
    }

    /// The period named by [`Period::as_str`].
    pub fn parse(text: &str) -> Option<Period> {
        Period::ALL.into_iter().find(|p| p.as_str() == text)
    }

    /// The site-time unit of its buckets; `None` for minutes, which are UTC minutes since the epoch.
    pub fn unit(self) -> Option<Unit> {
        match self {
            Period::Minute => None,
            Period::Hour => Some(Unit::Hour),
            Period::Day => Some(Unit::Day),
            Period::Week => Some(Unit::Week),
            Period::Month => Some(Unit::Month),
        }
    }

    /// The period whose buckets are of `unit`.
    pub fn of_unit(unit: Unit) -> Period {
        match unit {
            Unit::Hour => Period::Hour,
            Unit::Day => Period::Day,
            Unit::Week => Period::Week,
            Unit::Month => Period::Month,
        }
    }
}

/// The name of the tracker's engagement event (sent on page hide with scroll depth and engaged
/// time, not interactive). It extends its visit (duration, last seen) but is not an event in the
/// statistics: it adds no event counters, visitors or `event:*` values.
pub const ENGAGEMENT: &str = "engagement";

/// The dimension name of site totals (every event, every visit), with the empty value.
pub const TOTAL: &str = "total";

/// The event dimensions kept as aggregates (value from the event): counted with the event counters
/// (`pageviews`, `events`, visitors) in the bucket of the event's time. `event:page` counts page
/// views only; `event:goal` has one value per goal the event completed; `event:props:{key}` is one
/// dimension per property key.
pub const EVENT_DIMENSIONS: [&str; 4] = ["event:page", "event:hostname", "event:name", "event:goal"];

/// The dimensions kept at [`Period::Hour`] (every dimension is kept at day, week and month; minute keeps
/// [`TOTAL`] and `event:page`). A query needing another dimension by hour reads raw events.
pub const HOUR_DIMENSIONS: [&str; 3] = [TOTAL, "event:page", "visit:source"];

/// The dimensions kept at [`Period::Minute`], for the realtime panel.
pub const MINUTE_DIMENSIONS: [&str; 2] = [TOTAL, "event:page"];

/// The prefix of property dimensions: `event:props:plan`.
pub const PROPS_PREFIX: &str = "event:props:";

/// The visit dimensions kept as aggregates (value from the session's [`VisitAttrs`], or for
/// `visit:exit_page` its current exit page): counted with the event counters in the bucket of the
/// event's time **and** with the visit counters ([`Contribution`]) in the bucket of the session's
/// start. `visit:exit_page` holds visit counters only (its visitors are reported as its visits,
/// because a sketch cannot take a visitor out when the exit page moves).
pub const VISIT_DIMENSIONS: [&str; 19] = {
    let all = crate::dimension::VisitDimension::ALL;
    let mut names = [""; 19];
    let mut i = 0;
    while i < all.len() {
        names[i] = all[i].as_str();
        i += 1;
    }
    names
};

/// The visit dimensions that keep no aggregate item for the empty value: a visit without a
/// region, city, screen size or language adds nothing to them. Most visits have no region or
/// city (no city database) and Plausible's tracker sends no language, so empty items would cost
/// writes for nothing a breakdown shows (breakdowns list no empty value); and the aggregates of
/// events stored before these dimensions existed stay equal to a rebuild. A negated filter on one
/// of them (`is_not`, which must count the visits without a value) is answered from the event
/// blocks ([`crate::stats`]).
pub const SPARSE_VISIT_DIMENSIONS: [&str; 4] = ["visit:region", "visit:city", "visit:screen", "visit:language"];

/// Whether `dimension` keeps no item for `value` ([`SPARSE_VISIT_DIMENSIONS`]).
pub fn skips_value(dimension: &str, value: &str) -> bool {
    value.is_empty() && crate::dimension::VisitDimension::parse(dimension).is_some_and(|d| d.is_sparse())
}

/// The counters of one aggregate item. Event counters are counted in the bucket of each event's
/// time; visit counters in the bucket of each session's start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Counters {
    /// Page views (event counter).
    pub pageviews: i64,
    /// Events of any name (event counter).
    pub events: i64,
    /// Visits (visit counter).
    pub visits: i64,
    /// Bouncing visits (visit counter).
    pub bounces: i64,
    /// Summed visit durations, ms (visit counter).
    pub duration_ms: i64,
    /// Summed page views of the visits (visit counter), for views per visit.
    pub visit_pageviews: i64,
}

impl Counters {
    /// Adds `other` in.
    pub fn add(&mut self, other: &Counters) {
        self.pageviews += other.pageviews;
        self.events += other.events;
        self.visits += other.visits;
        self.bounces += other.bounces;
        self.duration_ms += other.duration_ms;
        self.visit_pageviews += other.visit_pageviews;
    }

    /// Adds `c` (sign +1) or takes it away (sign -1).
    pub fn add_contribution(&mut self, c: &Contribution, sign: i64) {
        self.visits += sign * c.visits;
        self.bounces += sign * c.bounces;
        self.duration_ms += sign * c.duration_ms;
        self.visit_pageviews += sign * c.visit_pageviews;
    }

    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        *self == Counters::default()
    }

    /// The event counters alone (page views, events) and the visit counters alone.
    pub fn split(&self) -> (Counters, Counters) {
        let events = Counters { pageviews: self.pageviews, events: self.events, ..Counters::default() };
        let visits = Counters { pageviews: 0, events: 0, ..*self };
        (events, visits)
    }
}

/// Which aggregate item: the model fields of an `Aggregate` key
/// (`AGG#{site_id}#{period}#{dimension}` / `B#{bucket}#{value}`), rendered by the model layer.
///
/// It hashes exactly as its borrowed form [`AggKeyRef`], so a map keyed by `AggKey` is looked up
/// with an `AggKeyRef` without allocating (ingestion does this for every delta of every event).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AggKey {
    /// The id of the site counted.
    pub site_id: String,
    /// Its granularity.
    pub period: Period,
    /// [`TOTAL`], one of [`EVENT_DIMENSIONS`] or [`VISIT_DIMENSIONS`], or a [`PROPS_PREFIX`] name.
    pub dimension: String,
    /// The bucket label in site time (`2026-11-22T08`, `2026-11-22`, `2026-11`), or for
    /// [`Period::Minute`] the UTC minute since the epoch as 10 zero-padded digits.
    pub bucket: String,
    /// The dimension's value; empty for [`TOTAL`] and for a missing value (direct traffic, no UTM).
    pub value: String,
}

impl AggKey {
    /// The borrowed form.
    pub fn as_ref(&self) -> AggKeyRef<'_> {
        AggKeyRef {
            site_id: &self.site_id,
            period: self.period,
            dimension: &self.dimension,
            bucket: &self.bucket,
            value: &self.value,
        }
    }
}

impl std::hash::Hash for AggKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}

/// An [`AggKey`] borrowed from an event: same fields, same hash, no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggKeyRef<'a> {
    /// [`AggKey::site_id`].
    pub site_id: &'a str,
    /// [`AggKey::period`].
    pub period: Period,
    /// [`AggKey::dimension`].
    pub dimension: &'a str,
    /// [`AggKey::bucket`].
    pub bucket: &'a str,
    /// [`AggKey::value`].
    pub value: &'a str,
}

impl AggKeyRef<'_> {
    /// The owned key.
    pub fn to_owned_key(self) -> AggKey {
        AggKey {
            site_id: self.site_id.to_owned(),
            period: self.period,
            dimension: self.dimension.to_owned(),
            bucket: self.bucket.to_owned(),
            value: self.value.to_owned(),
        }
    }
}

impl std::hash::Hash for AggKeyRef<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.site_id.hash(state);
        state.write_u8(self.period as u8);
        self.dimension.hash(state);
        self.bucket.hash(state);
        self.value.hash(state);
    }
}

impl hashbrown::Equivalent<AggKey> for AggKeyRef<'_> {
    fn equivalent(&self, key: &AggKey) -> bool {
        *self == key.as_ref()
    }
}

/// The label of the UTC minute containing `ts_ms`.
pub fn minute_label(ts_ms: i64) -> String {
    format!("{:010}", ts_ms.div_euclid(60_000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A visit gives back exactly the texts it was built from, by position and by name, and
        /// two visits are equal (and hash alike) exactly when their start and texts are.
        #[test]
        fn a_visits_texts_round_trip_and_decide_equality(
            a in prop::collection::vec(prop_oneof!["", "[a-z]{1,3}", "\\PC{0,12}"], VisitAttrs::TEXTS),
            b in prop::collection::vec(prop_oneof!["", "[a-z]{1,3}"], VisitAttrs::TEXTS),
            start in any::<i64>(),
        ) {
            use std::hash::BuildHasher;
            fn texts(t: &[String]) -> [&str; VisitAttrs::TEXTS] {
                std::array::from_fn(|i| t[i].as_str())
            }
            let va = VisitAttrs::from_texts(start, texts(&a));
            let vb = VisitAttrs::from_texts(start, texts(&b));
            prop_assert_eq!(va.texts(), texts(&a));
            prop_assert_eq!(va.texts_len(), a.iter().map(String::len).sum::<usize>());
            prop_assert_eq!(va.fields().texts(), texts(&a));
            prop_assert_eq!(VisitAttrs::new(start, &va.fields()), va.clone());
            let named = va.fields();
            let by_method = [
                va.entry_page(), va.source(), va.referrer(), va.utm_source(), va.utm_medium(),
                va.utm_campaign(), va.utm_content(), va.utm_term(), va.country(), va.device(),
                va.browser(), va.browser_version(), va.os(), va.os_version(), va.region(), va.city(),
                va.screen(), va.language(),
            ];
            prop_assert_eq!(by_method, named.texts());
            prop_assert_eq!(va == vb, a == b);
            let hasher = std::collections::hash_map::RandomState::new();
            if a == b {
                prop_assert_eq!(hasher.hash_one(&va), hasher.hash_one(&vb));
            }
            prop_assert_ne!(VisitAttrs::from_texts(start.wrapping_add(1), texts(&a)), va);
        }
    }

    /// A visit's texts share one allocation: the struct is its start, a pointer and the ends, not
    /// eighteen `String`s (456 bytes and up to eighteen allocations).
    #[test]
    fn a_visit_is_small() {
        assert!(std::mem::size_of::<VisitAttrs>() <= 96, "{} bytes", std::mem::size_of::<VisitAttrs>());
        let v = VisitAttrs::new(1, &Visit { entry_page: "/", browser: "Firefox", ..Visit::default() });
        assert_eq!((v.entry_page(), v.browser(), v.source()), ("/", "Firefox", ""));
        assert_eq!(v.with(|f| f.source = "Google").source(), "Google");
        assert_eq!(VisitAttrs::default().texts(), [""; VisitAttrs::TEXTS]);
    }

    #[test]
    fn contributions_telescope_to_the_final_state() {
        let start = 1_000;
        let mut s = PrevState::default();
        assert_eq!(s.contribution(start), None);
        s = s.after(true, true, 1_000, "/");
        assert_eq!(
            s.contribution(start),
            Some(Contribution { visits: 1, bounces: 1, duration_ms: 0, visit_pageviews: 1 })
        );
        s = s.after(true, true, 61_000, "/pricing");
        assert_eq!(
            s.contribution(start),
            Some(Contribution { visits: 1, bounces: 0, duration_ms: 60_000, visit_pageviews: 2 })
        );
        assert_eq!(s.exit_page, "/pricing");
        // A late page view from earlier does not move the exit page or the last time.
        s = s.after(true, true, 30_000, "/about");
        assert_eq!((s.exit_page.as_str(), s.last_ts, s.pageviews), ("/pricing", 61_000, 3));
    }

    #[test]
    fn a_non_interactive_event_keeps_a_bounce() {
        let s = PrevState::default().after(true, true, 0, "/").after(false, false, 5_000, "/");
        assert_eq!(s.contribution(0).unwrap().bounces, 1);
        assert_eq!(s.contribution(0).unwrap().duration_ms, 5_000);
    }

    #[test]
    fn shards_spread_and_stay_in_range() {
        let shards: std::collections::BTreeSet<u32> =
            (0..1000u64).map(|i| visitor_shard(VisitorId::from_u64(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))).collect();
        assert!(shards.len() > 60 && shards.iter().all(|&s| s < crate::schema::EVENT_SHARDS));
    }

    /// The shard is the one an earlier Tally keyed `Event` items by: FNV-1a over the id's hex
    /// text, so a store it wrote is still found when converted.
    #[test]
    fn the_shard_hashes_the_ids_hex_text() {
        for text in ["3f2a9c0d1e4b5a67", "00000000000000ff", "ffffffffffffffff"] {
            let fnv =
                text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
            let expected = (fnv % u64::from(crate::schema::EVENT_SHARDS)) as u32;
            assert_eq!(visitor_shard(VisitorId::parse(text).unwrap()), expected, "{text}");
        }
    }
}
