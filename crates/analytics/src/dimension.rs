//! The dimensions Tally groups and filters by, parsed once from their Plausible-style names
//! (`visit:source`, `event:page`, `event:props:plan`, `time:day`).
//!
//! A name is parsed into a [`Dimension`] at the edge (a query, a filter); the code that picks a
//! dimension's value out of an event (the aggregator's deltas, the block scan, the reference of
//! the tests) matches on the enum, so adding a visit dimension is a compile error everywhere it
//! must be handled rather than a string silently falling through a `_` arm.
//!
//! The names stay the stored form: aggregate keys carry `dimension.as_str()`, so parsing and
//! printing round-trip exactly ([`Dimension::parse`] of [`Dimension::name`] is the same value).

use std::borrow::Cow;

use crate::period::Unit;
use crate::stored::{PROPS_PREFIX, TOTAL, VisitAttrs};

/// Longest property key a dimension may name (`event:props:{key}`).
pub const MAX_PROP_KEY: usize = 300;

/// A dimension of the Stats API, or the total every aggregate keeps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// The site's totals (`total`): one item per bucket, no value.
    Total,
    /// A property of each event.
    Event(EventDimension),
    /// A property of the visit (session) an event belongs to.
    Visit(VisitDimension),
    /// A custom property, by key (`event:props:{key}`).
    Prop(PropKey),
    /// A time series at a unit (`time:hour`, `time:day`, `time:week`, `time:month`).
    Time(Unit),
}

/// A custom property's key as a dimension names it: non-empty, at most [`MAX_PROP_KEY`] bytes,
/// free of control characters (checked once, by [`PropKey::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PropKey(String);

impl PropKey {
    /// `key` when it is one a dimension may name.
    pub fn parse(key: &str) -> Option<PropKey> {
        let fits = !key.is_empty() && key.len() <= MAX_PROP_KEY && !key.chars().any(char::is_control);
        fits.then(|| PropKey(key.to_owned()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PropKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The event dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventDimension {
    /// `event:page`: the page's path (page views only).
    Page,
    /// `event:hostname`.
    Hostname,
    /// `event:name`: `pageview` or a custom event's name.
    Name,
    /// `event:goal`: one value per goal the event completed.
    Goal,
}

/// The visit dimensions, in the order aggregates list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VisitDimension {
    /// `visit:entry_page`: the first page of the visit.
    EntryPage,
    /// `visit:exit_page`: the last page so far; not a stored attribute but the session's state.
    ExitPage,
    /// `visit:source`: the referrer's source name, or a UTM source.
    Source,
    /// `visit:referrer`.
    Referrer,
    /// `visit:utm_source`.
    UtmSource,
    /// `visit:utm_medium`.
    UtmMedium,
    /// `visit:utm_campaign`.
    UtmCampaign,
    /// `visit:utm_content`.
    UtmContent,
    /// `visit:utm_term`.
    UtmTerm,
    /// `visit:country`: ISO 3166-1 alpha-2.
    Country,
    /// `visit:device`: Desktop, Mobile, Tablet…
    Device,
    /// `visit:browser`.
    Browser,
    /// `visit:browser_version`.
    BrowserVersion,
    /// `visit:os`.
    Os,
    /// `visit:os_version`.
    OsVersion,
    /// `visit:region`: ISO 3166-2, from a city database.
    Region,
    /// `visit:city`: a GeoNames id, from a city database.
    City,
    /// `visit:screen`: Plausible's size class.
    Screen,
    /// `visit:language`.
    Language,
}

impl EventDimension {
    /// Every event dimension.
    pub const ALL: [EventDimension; 4] =
        [EventDimension::Page, EventDimension::Hostname, EventDimension::Name, EventDimension::Goal];

    /// Its name, as queries and aggregate keys spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventDimension::Page => "event:page",
            EventDimension::Hostname => "event:hostname",
            EventDimension::Name => "event:name",
            EventDimension::Goal => "event:goal",
        }
    }

    /// The event dimension named `name`.
    pub fn parse(name: &str) -> Option<EventDimension> {
        EventDimension::ALL.into_iter().find(|d| d.as_str() == name)
    }
}

impl VisitDimension {
    /// Every visit dimension, in the order aggregates list them.
    pub const ALL: [VisitDimension; 19] = [
        VisitDimension::EntryPage,
        VisitDimension::ExitPage,
        VisitDimension::Source,
        VisitDimension::Referrer,
        VisitDimension::UtmSource,
        VisitDimension::UtmMedium,
        VisitDimension::UtmCampaign,
        VisitDimension::UtmContent,
        VisitDimension::UtmTerm,
        VisitDimension::Country,
        VisitDimension::Device,
        VisitDimension::Browser,
        VisitDimension::BrowserVersion,
        VisitDimension::Os,
        VisitDimension::OsVersion,
        VisitDimension::Region,
        VisitDimension::City,
        VisitDimension::Screen,
        VisitDimension::Language,
    ];

    /// Its name, as queries and aggregate keys spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            VisitDimension::EntryPage => "visit:entry_page",
            VisitDimension::ExitPage => "visit:exit_page",
            VisitDimension::Source => "visit:source",
            VisitDimension::Referrer => "visit:referrer",
            VisitDimension::UtmSource => "visit:utm_source",
            VisitDimension::UtmMedium => "visit:utm_medium",
            VisitDimension::UtmCampaign => "visit:utm_campaign",
            VisitDimension::UtmContent => "visit:utm_content",
            VisitDimension::UtmTerm => "visit:utm_term",
            VisitDimension::Country => "visit:country",
            VisitDimension::Device => "visit:device",
            VisitDimension::Browser => "visit:browser",
            VisitDimension::BrowserVersion => "visit:browser_version",
            VisitDimension::Os => "visit:os",
            VisitDimension::OsVersion => "visit:os_version",
            VisitDimension::Region => "visit:region",
            VisitDimension::City => "visit:city",
            VisitDimension::Screen => "visit:screen",
            VisitDimension::Language => "visit:language",
        }
    }

    /// The visit dimension named `name`.
    pub fn parse(name: &str) -> Option<VisitDimension> {
        VisitDimension::ALL.into_iter().find(|d| d.as_str() == name)
    }

    /// Its value among a session's attributes; `None` for [`VisitDimension::ExitPage`], which
    /// is the session's current exit page, not an attribute.
    pub fn value(self, visit: &VisitAttrs) -> Option<&str> {
        Some(match self {
            VisitDimension::EntryPage => visit.entry_page(),
            VisitDimension::ExitPage => return None,
            VisitDimension::Source => visit.source(),
            VisitDimension::Referrer => visit.referrer(),
            VisitDimension::UtmSource => visit.utm_source(),
            VisitDimension::UtmMedium => visit.utm_medium(),
            VisitDimension::UtmCampaign => visit.utm_campaign(),
            VisitDimension::UtmContent => visit.utm_content(),
            VisitDimension::UtmTerm => visit.utm_term(),
            VisitDimension::Country => visit.country(),
            VisitDimension::Device => visit.device(),
            VisitDimension::Browser => visit.browser(),
            VisitDimension::BrowserVersion => visit.browser_version(),
            VisitDimension::Os => visit.os(),
            VisitDimension::OsVersion => visit.os_version(),
            VisitDimension::Region => visit.region(),
            VisitDimension::City => visit.city(),
            VisitDimension::Screen => visit.screen(),
            VisitDimension::Language => visit.language(),
        })
    }

    /// Whether the dimension keeps no aggregate item for the empty value
    /// ([`crate::stored::SPARSE_VISIT_DIMENSIONS`]).
    pub const fn is_sparse(self) -> bool {
        matches!(
            self,
            VisitDimension::Region | VisitDimension::City | VisitDimension::Screen | VisitDimension::Language
        )
    }
}

impl Dimension {
    /// The dimension named `name`, or `None` for a name Tally does not know. A property key
    /// must be non-empty, at most [`MAX_PROP_KEY`] bytes, and free of control characters.
    pub fn parse(name: &str) -> Option<Dimension> {
        if name == TOTAL {
            return Some(Dimension::Total);
        }
        if let Some(key) = name.strip_prefix(PROPS_PREFIX) {
            return PropKey::parse(key).map(Dimension::Prop);
        }
        if let Some(unit) = name.strip_prefix("time:") {
            return Unit::parse(unit).map(Dimension::Time);
        }
        EventDimension::parse(name).map(Dimension::Event).or_else(|| VisitDimension::parse(name).map(Dimension::Visit))
    }

    /// Its name, as queries and aggregate keys spell it.
    pub fn name(&self) -> Cow<'static, str> {
        match self {
            Dimension::Total => Cow::Borrowed(TOTAL),
            Dimension::Event(d) => Cow::Borrowed(d.as_str()),
            Dimension::Visit(d) => Cow::Borrowed(d.as_str()),
            Dimension::Prop(key) => Cow::Owned(format!("{PROPS_PREFIX}{key}")),
            Dimension::Time(unit) => Cow::Owned(format!("time:{}", unit.as_str())),
        }
    }

    /// Whether aggregate items are kept for it (every dimension but the time ones).
    pub fn is_aggregated(&self) -> bool {
        !matches!(self, Dimension::Time(_))
    }

    /// The unit of a time dimension; `None` for every other.
    pub fn time_unit(&self) -> Option<Unit> {
        match self {
            Dimension::Time(unit) => Some(*unit),
            _ => None,
        }
    }

    /// Whether its value is the event's own (`event:*`, custom properties included) rather than
    /// its visit's: a visit metric cannot be broken down by it.
    pub fn is_of_event(&self) -> bool {
        matches!(self, Dimension::Event(_) | Dimension::Prop(_))
    }
}

impl std::fmt::Display for Dimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stored::{EVENT_DIMENSIONS, SPARSE_VISIT_DIMENSIONS, VISIT_DIMENSIONS, Visit};

    #[test]
    fn names_round_trip_and_match_the_stored_lists() {
        let names: Vec<&str> = VisitDimension::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(names, VISIT_DIMENSIONS);
        let names: Vec<&str> = EventDimension::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(names, EVENT_DIMENSIONS);
        let sparse: Vec<&str> = VisitDimension::ALL.iter().filter(|d| d.is_sparse()).map(|d| d.as_str()).collect();
        assert_eq!(sparse, SPARSE_VISIT_DIMENSIONS);
        for name in VISIT_DIMENSIONS.iter().chain(&EVENT_DIMENSIONS).copied().chain([
            TOTAL,
            "event:props:plan",
            "time:hour",
            "time:day",
            "time:week",
            "time:month",
        ]) {
            let parsed = Dimension::parse(name).unwrap_or_else(|| panic!("{name} parses"));
            assert_eq!(parsed.name(), name);
            assert_eq!(Dimension::parse(&parsed.to_string()), Some(parsed));
        }
    }

    #[test]
    fn unknown_names_and_bad_property_keys_are_refused() {
        for name in [
            "",
            "visit",
            "visit:",
            "visit:nope",
            "event:props:",
            "event:props:a\u{7}b",
            "time:",
            "time:year",
            "Visit:source",
            "event:page ",
        ] {
            assert_eq!(Dimension::parse(name), None, "{name:?}");
        }
        let long = format!("event:props:{}", "k".repeat(MAX_PROP_KEY + 1));
        assert_eq!(Dimension::parse(&long), None);
        let longest = format!("event:props:{}", "k".repeat(MAX_PROP_KEY));
        assert!(matches!(Dimension::parse(&longest), Some(Dimension::Prop(_))));
    }

    #[test]
    fn every_visit_attribute_is_some_dimensions_value() {
        let visit = VisitAttrs::new(
            0,
            &Visit {
                entry_page: "entry",
                source: "source",
                referrer: "referrer",
                utm_source: "utm_source",
                utm_medium: "utm_medium",
                utm_campaign: "utm_campaign",
                utm_content: "utm_content",
                utm_term: "utm_term",
                country: "country",
                device: "device",
                browser: "browser",
                browser_version: "browser_version",
                os: "os",
                os_version: "os_version",
                region: "region",
                city: "city",
                screen: "screen",
                language: "language",
            },
        );
        let mut values: Vec<&str> = VisitDimension::ALL.iter().filter_map(|d| d.value(&visit)).collect();
        let mut texts: Vec<&str> = visit.texts().to_vec();
        values.sort_unstable();
        texts.sort_unstable();
        assert_eq!(values, texts);
        assert_eq!(VisitDimension::ExitPage.value(&visit), None);
    }
}
