//! The session and visitor routes' answers ([`crate::visitors`]), declared: a session's
//! summary, a session's events, and everything kept about a visitor (a GDPR access request),
//! and how many events deleting a visitor removed.

use std::collections::BTreeMap;

use analytics::stats::SessionSummary;
use analytics::stored::{SessionRef, StoredEvent};
use analytics::visitor::VisitorId;
use serde::Serialize;

/// The answer of the routes that list sessions.
#[derive(Debug, Serialize)]
pub struct SessionList<'a> {
    /// The sessions, latest activity first.
    pub sessions: Vec<SessionView<'a>>,
}

/// The answer of `DELETE /api/visitors/{visitor}`.
#[derive(Debug, Serialize)]
pub struct Deleted {
    /// How many of the visitor's events were deleted.
    pub deleted_events: usize,
}

/// A session as the lists of sessions show it.
#[derive(Debug, Serialize)]
pub struct SessionView<'a> {
    /// The session's reference, for `GET /api/sessions/{session}`.
    pub session: SessionRef,
    /// The visitor the session belongs to, for `GET /api/visitors/{visitor}/sessions`.
    pub visitor_id: VisitorId,
    /// Its first event, in epoch milliseconds.
    pub started_at: i64,
    /// Its latest event, in epoch milliseconds.
    pub last_seen_at: i64,
    /// How many events it has.
    pub events: u32,
    /// How many of them are page views.
    pub pageviews: u32,
    /// Its first page.
    pub entry_page: &'a str,
    /// Its latest page.
    pub exit_page: &'a str,
    /// Where the visit came from.
    pub source: &'a str,
    /// The visitor's country.
    pub country: &'a str,
    /// The visitor's device.
    pub device: &'a str,
    /// The visitor's browser.
    pub browser: &'a str,
    /// The visitor's operating system.
    pub os: &'a str,
}

impl<'a> SessionView<'a> {
    /// `s` as shown.
    pub fn new(s: &'a SessionSummary) -> Self {
        SessionView {
            session: s.session_ref,
            visitor_id: s.visitor_id,
            started_at: s.started_at,
            last_seen_at: s.last_seen_at,
            events: s.events,
            pageviews: s.pageviews,
            entry_page: &s.entry_page,
            exit_page: &s.exit_page,
            source: s.visit.source(),
            country: s.visit.country(),
            device: s.visit.device(),
            browser: s.visit.browser(),
            os: s.visit.os(),
        }
    }
}

/// Revenue, exact as stored.
#[derive(Debug, Serialize)]
pub struct RevenueView<'a> {
    /// The decimal amount.
    pub amount: &'a str,
    /// The ISO 4217 currency code.
    pub currency: &'a str,
}

impl<'a> RevenueView<'a> {
    /// The revenue `e` carries, if any.
    fn of(e: &'a StoredEvent) -> Option<Self> {
        e.revenue.as_ref().map(|(amount, currency)| RevenueView { amount, currency })
    }
}

/// One event of a session, in order.
#[derive(Debug, Serialize)]
pub struct SessionEventView<'a> {
    /// The event's name.
    pub name: &'a str,
    /// When, in epoch milliseconds.
    pub timestamp: i64,
    /// The page's host.
    pub hostname: &'a str,
    /// The page's path.
    pub path: &'a str,
    /// Custom properties.
    pub props: &'a BTreeMap<String, String>,
    /// Revenue, on the events that carry some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revenue: Option<RevenueView<'a>>,
}

impl<'a> SessionEventView<'a> {
    /// `e` as shown.
    pub fn new(e: &'a StoredEvent) -> Self {
        SessionEventView {
            name: &e.name,
            timestamp: e.ts,
            hostname: &e.hostname,
            path: &e.path,
            props: &e.props,
            revenue: RevenueView::of(e),
        }
    }
}

/// The answer of `GET /api/sessions/{session}`.
#[derive(Debug, Serialize)]
pub struct SessionEvents<'a> {
    /// The session's reference.
    pub session: &'a str,
    /// Its events, in order.
    pub events: Vec<SessionEventView<'a>>,
}

/// Everything kept about one event of a visitor.
#[derive(Debug, Serialize)]
pub struct VisitorEventView<'a> {
    /// The session's reference.
    pub session: SessionRef,
    /// When, in epoch milliseconds.
    pub timestamp: i64,
    /// The event's name.
    pub name: &'a str,
    /// The page's host.
    pub hostname: &'a str,
    /// The page's path.
    pub path: &'a str,
    /// Custom properties.
    pub props: &'a BTreeMap<String, String>,
    /// Whether the event makes its visit engaged.
    pub interactive: bool,
    /// The goals it completed.
    pub goals: &'a [String],
    /// Its revenue (`null` when none).
    pub revenue: Option<RevenueView<'a>>,
    /// The visit's first page.
    pub entry_page: &'a str,
    /// The visit's source.
    pub source: &'a str,
    /// The visit's referrer.
    pub referrer: &'a str,
    /// The visit's `utm_source`.
    pub utm_source: &'a str,
    /// The visit's `utm_medium`.
    pub utm_medium: &'a str,
    /// The visit's `utm_campaign`.
    pub utm_campaign: &'a str,
    /// The visit's `utm_content`.
    pub utm_content: &'a str,
    /// The visit's `utm_term`.
    pub utm_term: &'a str,
    /// The visitor's country.
    pub country: &'a str,
    /// The visitor's device.
    pub device: &'a str,
    /// The visitor's browser.
    pub browser: &'a str,
    /// The browser's major version.
    pub browser_version: &'a str,
    /// The visitor's operating system.
    pub os: &'a str,
    /// The operating system's version.
    pub os_version: &'a str,
}

impl<'a> VisitorEventView<'a> {
    /// `e` as shown.
    pub fn new(e: &'a StoredEvent) -> Self {
        let v = &e.visit;
        VisitorEventView {
            session: SessionRef::of(e),
            timestamp: e.ts,
            name: &e.name,
            hostname: &e.hostname,
            path: &e.path,
            props: &e.props,
            interactive: e.interactive,
            goals: &e.goals,
            revenue: RevenueView::of(e),
            entry_page: v.entry_page(),
            source: v.source(),
            referrer: v.referrer(),
            utm_source: v.utm_source(),
            utm_medium: v.utm_medium(),
            utm_campaign: v.utm_campaign(),
            utm_content: v.utm_content(),
            utm_term: v.utm_term(),
            country: v.country(),
            device: v.device(),
            browser: v.browser(),
            browser_version: v.browser_version(),
            os: v.os(),
            os_version: v.os_version(),
        }
    }
}

/// The answer of `GET /api/visitors/{visitor}/events`.
#[derive(Debug, Serialize)]
pub struct VisitorEvents<'a> {
    /// The visitor's id, in lower case.
    pub visitor_id: String,
    /// The UTC day.
    pub date: &'a str,
    /// Every event kept of the visitor that day.
    pub events: Vec<VisitorEventView<'a>>,
}
