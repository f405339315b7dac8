//! Sessions and visitors: session references, one session's events, a visitor's sessions and
//! events of a day, the latest sessions of a day (from the session log), and the erasure of a
//! visitor.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures::StreamExt;
use store::item;

use super::{Stats, StatsError};
use crate::stored::SessionRef;
use crate::visitor::{UtcDay, VisitorId};

/// A visit as its events tell it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// The session, written as an opaque reference that finds it in one Query.
    pub session_ref: SessionRef,
    /// The visitor, as its events carry it.
    pub visitor_id: VisitorId,
    /// First event, epoch ms.
    pub started_at: i64,
    /// Latest event, epoch ms.
    pub last_seen_at: i64,
    /// Events and page views.
    pub events: u32,
    /// Page views.
    pub pageviews: u32,
    /// Entry and exit page.
    pub entry_page: String,
    /// The latest page viewed.
    pub exit_page: String,
    /// Source, country, device, browser, OS.
    pub visit: std::sync::Arc<crate::stored::VisitAttrs>,
}

/// A visitor id as given by a client (16 hexadecimal digits, either case): every path that
/// takes a visitor id parses it here, so an id in upper case finds, reads and erases the same
/// visitor everywhere.
pub fn parse_visitor(text: &str) -> Result<VisitorId, StatsError> {
    VisitorId::parse(text).ok_or_else(|| StatsError::Invalid(format!("{text:?} is not a visitor id")))
}

/// A UTC day as given by a client (`YYYY-MM-DD`), with the date parser's message when it is not.
fn parse_day(text: &str) -> Result<UtcDay, StatsError> {
    crate::period::parse_date(text).map_err(|e| StatsError::Invalid(e.to_string()))?;
    UtcDay::parse(text).ok_or_else(|| StatsError::Invalid(format!("{text:?} is not a day")))
}

fn summarize(events: &[crate::stored::StoredEvent]) -> Vec<SessionSummary> {
    let mut out: Vec<SessionSummary> = Vec::new();
    for e in events {
        let state = e.next();
        match out.last_mut() {
            Some(s) if s.session_ref == SessionRef::of(e) => {
                s.last_seen_at = s.last_seen_at.max(state.last_ts);
                s.events = state.events.max(s.events);
                s.pageviews = state.pageviews.max(s.pageviews);
                s.exit_page = state.exit_page.clone();
            }
            _ => out.push(SessionSummary {
                session_ref: SessionRef::of(e),
                visitor_id: e.visitor_id,
                started_at: e.visit.start_ts,
                last_seen_at: state.last_ts,
                events: state.events,
                pageviews: state.pageviews,
                entry_page: e.visit.entry_page().to_owned(),
                exit_page: state.exit_page.clone(),
                visit: e.visit.clone(),
            }),
        }
    }
    out
}

impl Stats {
    /// One session's events in order.
    pub async fn session_events(
        &self,
        site_id: &str,
        reference: &str,
    ) -> Result<Vec<crate::stored::StoredEvent>, StatsError> {
        let session = SessionRef::parse(reference)
            .ok_or_else(|| StatsError::Invalid(format!("{reference:?} is not a session reference")))?;
        self.sessions_events(site_id, &[session]).await
    }

    /// A visitor's sessions that started on UTC day `day` (one Query), oldest first.
    pub async fn visitor_sessions(
        &self,
        site_id: &str,
        day: &str,
        visitor: &str,
    ) -> Result<Vec<SessionSummary>, StatsError> {
        Ok(summarize(&self.visitor_events(site_id, day, visitor).await?))
    }

    /// Every event of a visitor whose sessions started on UTC day `day` (one Query), in order:
    /// all Tally keeps about them, for a GDPR access request.
    pub async fn visitor_events(
        &self,
        site_id: &str,
        day: &str,
        visitor: &str,
    ) -> Result<Vec<crate::stored::StoredEvent>, StatsError> {
        let day = parse_day(day)?;
        let visitor = parse_visitor(visitor)?;
        let mut events: Vec<_> = crate::event_store::events_of_day(&self.table, site_id, day)
            .await?
            .into_iter()
            .filter(|e| e.visitor_id == visitor)
            .collect();
        crate::event_store::sort_sessions(&mut events);
        Ok(events)
    }

    /// The sessions active on UTC day `day` with the latest events, latest first: the day's
    /// session log read newest first until no older entry can make the list, then each session
    /// (one Query each, [`PARALLEL_READS`] at a time). The cost follows `limit`, not the day's
    /// traffic. A session erased since is left out, so the list can be shorter than `limit`.
    pub async fn recent_sessions(
        &self,
        site_id: &str,
        day: &str,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StatsError> {
        use crate::aggregate::session_log;
        crate::period::parse_date(day).map_err(|e| StatsError::Invalid(e.to_string()))?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut latest: HashMap<SessionRef, i64> = HashMap::new();
        // The `limit`-th latest time so far: once an item's newest entry is older, no entry
        // from here on can make the list.
        let mut bar = i64::MIN;
        let mut logs = self
            .table
            .query("SessionLog")
            .key(item! { "site_id" => site_id, "day" => day })
            .descending()
            .page_size(64)
            .items();
        while let Some(record) = logs.next().await {
            let record = record?;
            if latest.len() >= limit && record.opt_i64("last_ts")?.unwrap_or(i64::MAX) < bar {
                break;
            }
            let Some(store::AttributeValue::B(bytes)) = record.get("sessions") else { continue };
            for (id, ts) in session_log::decode(bytes).map_err(|e| StatsError::Corrupt(e.to_string()))? {
                let at = latest.entry(id).or_insert(ts);
                *at = (*at).max(ts);
            }
            if latest.len() >= limit {
                let mut times: Vec<i64> = latest.values().copied().collect();
                times.select_nth_unstable_by_key(limit - 1, |&t| std::cmp::Reverse(t));
                bar = times[limit - 1];
            }
        }
        let mut chosen: Vec<(SessionRef, i64)> = latest.into_iter().collect();
        chosen.sort_by_key(|&(id, ts)| (std::cmp::Reverse(ts), id.session));
        chosen.truncate(limit);
        let wanted: Vec<SessionRef> = chosen.into_iter().map(|(id, _)| id).collect();
        let mut all: Vec<SessionSummary> = summarize(&self.sessions_events(site_id, &wanted).await?);
        all.sort_by_key(|s| std::cmp::Reverse(s.last_seen_at));
        Ok(all)
    }

    /// Deletes every event of a visitor whose sessions started on UTC day `day` (GDPR erasure),
    /// then their entries in the session log of that day and the next (a visit ends 30 minutes
    /// after its last event); returns how many events. Aggregates keep their counts (they hold no
    /// visitor id).
    pub async fn delete_visitor(&self, site_id: &str, day: &str, visitor: &str) -> Result<usize, StatsError> {
        let day = parse_day(day)?;
        let visitor = parse_visitor(visitor)?;
        let erased = crate::event_store::erase_visitor(&self.table, site_id, day, visitor).await?;
        self.forget_in_session_log(site_id, day, visitor).await?;
        Ok(erased)
    }

    /// Rewrites the session-log items of `day` and the next day that name `visitor`'s sessions
    /// started on `day`, without them (an item left empty is deleted).
    async fn forget_in_session_log(&self, site_id: &str, start: UtcDay, visitor: VisitorId) -> Result<(), StatsError> {
        use crate::aggregate::session_log;
        let theirs = |e: &(SessionRef, i64)| e.0.visitor == visitor && e.0.day == start;
        for active in [start, UtcDay::from_days(start.days() + 1)] {
            let active = active.to_string();
            let logs = self
                .table
                .query("SessionLog")
                .key(item! { "site_id" => site_id, "day" => active.as_str() })
                .consistent()
                .all()
                .await?;
            for record in logs {
                let Some(store::AttributeValue::B(bytes)) = record.get("sessions") else { continue };
                let entries = session_log::decode(bytes).map_err(|e| StatsError::Corrupt(e.to_string()))?;
                if !entries.iter().any(theirs) {
                    continue;
                }
                let key = item! {
                    "site_id" => site_id,
                    "day" => active.as_str(),
                    "last_ts" => record.opt_i64("last_ts")?.unwrap_or(0),
                    "run_id" => record.string("run_id")?,
                    "epoch" => record.opt_i64("epoch")?.unwrap_or(0),
                    "part" => record.opt_i64("part")?.unwrap_or(0),
                };
                let kept: Vec<_> = entries.into_iter().filter(|e| !theirs(e)).collect();
                if kept.is_empty() {
                    self.table.delete("SessionLog", key).await?;
                } else {
                    let bytes = store::AttributeValue::B(session_log::encode(&kept));
                    self.table.update("SessionLog", key, model::expr::Update::new().set("sessions", bytes)).await?;
                }
            }
        }
        Ok(())
    }

    /// The events of the given sessions (day, visitor, session), each session's in order, read
    /// from the blocks of their start days: each day's blocks are read once, the sessions column
    /// first, and only the blocks holding a wanted session are decoded whole.
    async fn sessions_events(
        &self,
        site_id: &str,
        wanted: &[SessionRef],
    ) -> Result<Vec<crate::stored::StoredEvent>, StatsError> {
        use crate::block::{Col, Cols};
        let mut by_day: BTreeMap<UtcDay, BTreeSet<(u64, u128)>> = BTreeMap::new();
        for r in wanted {
            by_day.entry(r.day).or_default().insert((r.visitor.as_u64(), r.session.0));
        }
        let mut out = Vec::new();
        for (day, keys) in by_day {
            for b in crate::event_store::blocks_of_day(&self.table, site_id, day).await? {
                let head = b.read(Cols::NONE.with(Col::Sessions))?;
                if !head.sessions.iter().any(|k| keys.contains(&(k.visitor, k.session))) {
                    continue;
                }
                out.extend(b.events()?.into_iter().filter(|e| keys.contains(&(e.visitor_id.as_u64(), e.session_id.0))));
            }
        }
        crate::event_store::sort_sessions(&mut out);
        Ok(out)
    }
}
