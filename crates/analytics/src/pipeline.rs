//! The ingestion path of one event (DESIGN.md, "The path of one event"): validate, resolve the
//! site, enrich, compute the visitor id under the shared daily salt, find or start the session,
//! write the event under its session's next `seq`, and hand it to the aggregator.
//!
//! **Sessions across processes.** A process keeps the sessions it has seen in memory, each behind
//! an async mutex so one process writes a session's events one at a time. Another process may
//! have written to the same session meanwhile; the write of slot `seq = n` is conditional on the
//! slot being free, so a stale cache is found out by a failed condition, the session is read back
//! from the table (one Query for the visitor's newest event, whose stored previous state plus
//! itself is the whole session), and the write is tried again at the next slot.
//!
//! **Salts.** Today's salt is created by whichever process needs it first (a conditional put; the
//! loser reads the winner's), so every process computes the same visitor ids.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use model::{PutMode, Table};
use store::item;

use crate::aggregate::{Aggregator, event_from_record, event_item};
use crate::enrich::{DropReason, Enricher, Enrichment, SiteContext};
use crate::event::{Event, EventError, Limits, RawEvent};
use crate::sites::{Site, Sites, SitesError};
use crate::stored::{PrevState, StoredEvent, VisitAttrs, visitor_shard};
use crate::visitor::{Salt, UtcDay, VisitorId, salt_expires_at_ms, salts_to_try, visitor_id};

/// A visit ends after this long without an event.
pub const SESSION_TIMEOUT_MS: i64 = 30 * 60 * 1000;

/// How many times an event's write is tried against slots other processes took.
const MAX_SLOT_ATTEMPTS: usize = 8;

/// Which site an event names.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SiteSelector {
    /// The event's domain list (Plausible's way): every one that is a site.
    Domain,
    /// An Umami website id.
    UmamiWebsite(String),
}

/// What became of an event.
#[derive(Debug)]
#[non_exhaustive]
pub enum IngestResult {
    /// Stored (and handed to aggregation).
    Accepted,
    /// Deliberately not stored, and counted.
    Dropped(DropReason),
    /// No such site.
    UnknownSite,
    /// The event failed validation.
    Invalid(EventError),
    /// Storage failed; the event is not stored.
    Failed(PipelineError),
}

/// Why storing an event failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The table failed.
    #[error(transparent)]
    Model(#[from] model::Error),
    /// Sites could not be read.
    #[error(transparent)]
    Sites(#[from] SitesError),
    /// The aggregator refused (it is stopped).
    #[error(transparent)]
    Aggregate(#[from] crate::aggregate::AggregateError),
    /// Other processes kept taking the session's next slot.
    #[error("the session's next event slot stayed contended after {0} attempts")]
    Contended(usize),
    /// A stored salt does not read back.
    #[error("a stored salt is malformed")]
    BadSalt,
}

/// Counts for `/metrics`.
#[derive(Debug, Default)]
pub struct PipelineCounters {
    /// Events stored.
    pub accepted: AtomicU64,
    /// Events dropped, by [`DropReason::ALL`] position.
    pub dropped: [AtomicU64; 4],
    /// Events refused as invalid.
    pub invalid: AtomicU64,
    /// Events for no known site.
    pub unknown_site: AtomicU64,
    /// Events whose storage failed.
    pub failed: AtomicU64,
}

/// An event to import with its own timestamp.
#[derive(Debug, Clone)]
pub struct ImportEvent {
    /// The event, with `timestamp_ms`, `url`, `name`, `referrer`, `props`, `user_agent` set.
    pub raw: RawEvent,
    /// A stable visitor key from the source system; when absent, `raw.peer_ip` and the
    /// User-Agent identify the visitor.
    pub visitor: Option<String>,
    /// A country to use instead of the one looked up.
    pub country: Option<String>,
}

#[derive(Debug, Clone)]
struct Live {
    day: String,
    visitor_id: String,
    session_id: String,
    next_seq: u32,
    state: PrevState,
    visit: VisitAttrs,
}

type Slot = Arc<tokio::sync::Mutex<Option<Live>>>;

/// The ingestion pipeline. Share it behind an `Arc`.
pub struct Pipeline {
    table: Table,
    sites: Arc<Sites>,
    enricher: Arc<Enricher>,
    aggregator: Arc<Aggregator>,
    limits: Limits,
    /// Salts by UTC day; `None` caches that a past day's salt does not exist (no process
    /// creates a past day's salt, so the answer cannot change).
    salts: Mutex<HashMap<i64, Option<Salt>>>,
    sessions: Mutex<Sessions>,
    counters: PipelineCounters,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("run", &self.aggregator.run_id()).finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

fn day_text(ts_ms: i64) -> String {
    UtcDay::from_unix_ms(ts_ms).to_string()
}

/// Largest number of sessions kept in memory. Any session can be dropped safely — the next
/// event of its visitor finds it in the table — so this bounds memory (a cached session is
/// about 1 KB, so at most 20 MB), trading it for a Query per returning visitor whose session
/// was dropped. 20,000 sessions live at once is a site with some 40,000 visitors an hour;
/// BENCHMARKS.md ("Server memory") has the measurements behind the number.
const MAX_CACHED_SESSIONS: usize = 20_000;

impl Pipeline {
    /// A pipeline writing to `table`.
    pub fn new(table: Table, sites: Arc<Sites>, enricher: Arc<Enricher>, aggregator: Arc<Aggregator>) -> Self {
        Pipeline {
            table,
            sites,
            enricher,
            aggregator,
            limits: Limits::default(),
            salts: Mutex::default(),
            sessions: Mutex::default(),
            counters: PipelineCounters::default(),
        }
    }

    /// The counters for `/metrics`.
    pub fn counters(&self) -> &PipelineCounters {
        &self.counters
    }

    /// The sites this pipeline resolves events against.
    pub fn sites(&self) -> &Arc<Sites> {
        &self.sites
    }

    /// Ingests a live event: validated, enriched, stored and aggregated.
    pub async fn ingest(&self, raw: RawEvent, selector: SiteSelector) -> IngestResult {
        let result = self.ingest_inner(raw, selector, None).await;
        self.count(&result);
        result
    }

    /// Imports an event of `site` with its own timestamp.
    pub async fn import(&self, site: &Site, event: ImportEvent) -> IngestResult {
        let mut raw = event.raw;
        raw.domain = site.domain.clone();
        let result = self.ingest_inner(raw, SiteSelector::Domain, Some((event.visitor, event.country))).await;
        self.count(&result);
        result
    }

    fn count(&self, result: &IngestResult) {
        let c = &self.counters;
        match result {
            IngestResult::Accepted => c.accepted.fetch_add(1, Ordering::Relaxed),
            IngestResult::Dropped(reason) => {
                let i = DropReason::ALL.iter().position(|r| r == reason).unwrap_or(0);
                c.dropped[i].fetch_add(1, Ordering::Relaxed)
            }
            IngestResult::UnknownSite => c.unknown_site.fetch_add(1, Ordering::Relaxed),
            IngestResult::Invalid(_) => c.invalid.fetch_add(1, Ordering::Relaxed),
            IngestResult::Failed(_) => c.failed.fetch_add(1, Ordering::Relaxed),
        };
    }

    async fn ingest_inner(
        &self,
        raw: RawEvent,
        selector: SiteSelector,
        import: Option<(Option<String>, Option<String>)>,
    ) -> IngestResult {
        let event = match Event::parse(raw, &self.limits) {
            Ok(e) => e,
            Err(e) => return IngestResult::Invalid(e),
        };
        let sites = match self.resolve(&event, &selector).await {
            Ok(sites) => sites,
            Err(e) => return IngestResult::Failed(e.into()),
        };
        // An event for several sites (Plausible's roll-ups) is stored for each: stored anywhere
        // is accepted, a failure anywhere is a failure.
        let mut outcome = IngestResult::UnknownSite;
        for site in &sites {
            let result = self.ingest_for(&event, site, import.as_ref()).await;
            outcome = match (outcome, result) {
                (IngestResult::Failed(e), _) | (_, IngestResult::Failed(e)) => IngestResult::Failed(e),
                (IngestResult::Accepted, _) | (_, IngestResult::Accepted) => IngestResult::Accepted,
                (IngestResult::Dropped(first), _) => IngestResult::Dropped(first),
                (_, other) => other,
            };
        }
        outcome
    }

    async fn ingest_for(
        &self,
        event: &Event,
        site: &Site,
        import: Option<&(Option<String>, Option<String>)>,
    ) -> IngestResult {
        let context = SiteContext { domains: &site.domains, excluded_ips: &site.excluded_ips };
        let enriched = match import {
            Some((Some(_), _)) => self.enricher.enrich_import(event, &context),
            _ => self.enricher.enrich(event, &context),
        };
        let mut enrichment = match enriched {
            Ok(e) => e,
            Err(reason) => return IngestResult::Dropped(reason),
        };
        let visitors = match import {
            Some((visitor, country)) => {
                if let Some(code) = country.as_deref().and_then(crate::enrich::CountryCode::parse) {
                    enrichment.country = Some(code);
                }
                let salt = match self.sites.import_salt(site).await {
                    Ok(salt) => salt,
                    Err(e) => return IngestResult::Failed(e.into()),
                };
                vec![import_visitor(&salt, &site.site_id, visitor.as_deref(), enrichment.client_ip, &event.user_agent)]
            }
            None => {
                match self.visitor_ids(&site.site_id, enrichment.client_ip, &event.user_agent, event.timestamp_ms).await
                {
                    Ok(v) => v,
                    Err(e) => return IngestResult::Failed(e),
                }
            }
        };
        match self.store(site, event, &enrichment, &visitors).await {
            Ok(()) => IngestResult::Accepted,
            Err(e) => IngestResult::Failed(e),
        }
    }

    /// The sites an event is for: its Umami website's, or every site among its domains (each
    /// once, in the order sent).
    async fn resolve(&self, event: &Event, selector: &SiteSelector) -> Result<Vec<Site>, SitesError> {
        match selector {
            SiteSelector::UmamiWebsite(uuid) => Ok(self.sites.by_umami_id(uuid).await?.into_iter().collect()),
            SiteSelector::Domain => {
                let mut sites: Vec<Site> = Vec::new();
                for domain in &event.domains {
                    if let Some(site) = self.sites.by_domain(domain.as_str()).await?
                        && !sites.iter().any(|s| s.site_id == site.site_id)
                    {
                        sites.push(site);
                    }
                }
                Ok(sites)
            }
        }
    }

    /// The visitor's ids under the salts to try at `ts`, newest salt first. Today's salt is
    /// created if missing; an older one is only used if it exists.
    async fn visitor_ids(&self, site_id: &str, ip: IpAddr, ua: &str, ts: i64) -> Result<Vec<VisitorId>, PipelineError> {
        let [today, yesterday] = salts_to_try(ts.max(now_ms()));
        let mut ids = vec![visitor_id(&self.salt(today, true).await?.ok_or(PipelineError::BadSalt)?, site_id, ip, ua)];
        if let Some(salt) = self.salt(yesterday, false).await? {
            ids.push(visitor_id(&salt, site_id, ip, ua));
        }
        Ok(ids)
    }

    async fn salt(&self, day: UtcDay, create: bool) -> Result<Option<Salt>, PipelineError> {
        if let Some(cached) = self.salts.lock().ok().and_then(|m| m.get(&day.days()).cloned())
            && (cached.is_some() || !create)
        {
            return Ok(cached);
        }
        let key = item! { "day" => day.to_string() };
        let mut found = self.table.get_with("Salt", key.clone(), true).await?;
        if found.is_none() && create {
            let fresh = Salt::random();
            let input = item! {
                "day" => day.to_string(),
                "salt" => fresh.as_bytes().to_vec(),
                "ttl" => salt_expires_at_ms(day) / 1000,
            };
            match self.table.create("Salt", input).await {
                Ok(r) => found = Some(r),
                Err(e) if e.is_condition_failed() || e.is_already_exists() => {
                    found = self.table.get_with("Salt", key, true).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let Some(record) = found else {
            if let Ok(mut m) = self.salts.lock() {
                m.insert(day.days(), None);
            }
            return Ok(None);
        };
        let salt = Salt::from_bytes(record.bytes("salt").map_err(|_| PipelineError::BadSalt)?)
            .map_err(|_| PipelineError::BadSalt)?;
        if let Ok(mut m) = self.salts.lock() {
            m.retain(|d, _| *d >= day.days() - 3);
            m.insert(day.days(), Some(salt.clone()));
        }
        Ok(Some(salt))
    }

    fn slot(&self, site_id: &str, visitor: &str) -> Slot {
        let mut sessions = match self.sessions.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        if sessions.len() >= MAX_CACHED_SESSIONS {
            make_room(&mut sessions, now_ms());
        }
        sessions.entry((site_id.to_owned(), visitor.to_owned())).or_default().clone()
    }

    /// The visitor's newest session as stored on the partitions of `days`, if it is live at `ts`.
    async fn load_session(
        &self,
        site_id: &str,
        visitor: &str,
        ts: i64,
        days: &[UtcDay],
    ) -> Result<Option<Live>, PipelineError> {
        for &day in days {
            let newest = self
                .table
                .query("Event")
                .key(item! {
                    "site_id" => site_id,
                    "day" => day.to_string(),
                    "shard" => visitor_shard(visitor),
                    "visitor_id" => visitor,
                })
                .descending()
                .limit(1)
                .consistent()
                .first()
                .await?;
            if let Some(record) = newest {
                let e = event_from_record(&record).map_err(PipelineError::Aggregate)?;
                let state = e.next();
                return Ok(live_at(&state, ts).then(|| Live {
                    day: e.day.clone(),
                    visitor_id: e.visitor_id.clone(),
                    session_id: e.session_id.clone(),
                    next_seq: e.seq + 1,
                    state,
                    visit: e.visit.clone(),
                }));
            }
        }
        Ok(None)
    }

    async fn store(
        &self,
        site: &Site,
        event: &Event,
        enrichment: &Enrichment,
        visitors: &[VisitorId],
    ) -> Result<(), PipelineError> {
        let ts = event.timestamp_ms;
        // A visit that began under yesterday's salt continues under its id; otherwise today's.
        let ids: Vec<String> = visitors.iter().map(ToString::to_string).collect();
        let mut chosen = None;
        for id in ids.iter().rev().skip(usize::from(ids.len() < 2)).chain(ids.first()) {
            let slot = self.slot(&site.site_id, id);
            let guard = slot.lock().await;
            let live = guard.as_ref().is_some_and(|l| live_at(&l.state, ts));
            drop(guard);
            if live {
                chosen = Some((id.clone(), slot));
                break;
            }
        }
        let (visitor, slot) = match chosen {
            Some(c) => c,
            None => {
                // Nothing live in memory: ask the table, older salt first. A visit under today's
                // salt began today; one under yesterday's salt began yesterday (new visits always
                // take today's). A single id (an import) may have begun either day.
                let today = UtcDay::from_unix_ms(ts);
                let mut found = None;
                for (i, id) in ids.iter().enumerate().rev() {
                    let days = match (ids.len(), i) {
                        (1, _) => vec![today, today.previous()],
                        (_, 0) => vec![today],
                        _ => vec![today.previous()],
                    };
                    if let Some(live) = self.load_session(&site.site_id, id, ts, &days).await? {
                        found = Some((id.clone(), live));
                        break;
                    }
                }
                let (id, live) = match found {
                    Some((id, live)) => (id, Some(live)),
                    None => (ids[0].clone(), None),
                };
                let slot = self.slot(&site.site_id, &id);
                *slot.lock().await = live;
                (id, slot)
            }
        };
        let mut guard = slot.lock().await;
        for _ in 0..MAX_SLOT_ATTEMPTS {
            let live = match guard.as_ref().filter(|l| live_at(&l.state, ts)) {
                Some(l) => l.clone(),
                None => new_session(&visitor, ts, event, enrichment),
            };
            self.aggregator.register_partition(&site.site_id, &live.day).await?;
            let ticket = self.aggregator.begin();
            let stored = StoredEvent {
                site_id: site.site_id.clone(),
                day: live.day.clone(),
                shard: visitor_shard(&live.visitor_id),
                visitor_id: live.visitor_id.clone(),
                session_id: live.session_id.clone(),
                seq: live.next_seq,
                name: event.name.as_str().to_owned(),
                ts,
                hostname: event.hostname.as_str().to_owned(),
                path: event.pathname.as_str().to_owned(),
                props: event
                    .props
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v.as_str().to_owned()))
                    .collect::<BTreeMap<_, _>>(),
                revenue: event.revenue.as_ref().map(|r| (r.amount.to_string(), r.currency.clone())),
                interactive: event.interactive,
                goals: site
                    .goals
                    .iter()
                    .filter(|g| g.goal.matches(event.name.as_str(), event.pathname.as_str()))
                    .map(|g| g.goal.display_name())
                    .collect(),
                visit: live.visit.clone(),
                prev: live.state.clone(),
                run: ticket.run_id().to_owned(),
                epoch: ticket.epoch(),
                // A day more than the retention: a range of the last N days starts N days ago at
                // midnight in site time, so its first morning is still there to be read.
                ttl: now_ms() / 1000 + (i64::from(site.retention_event_days) + 1) * 86_400,
            };
            match self.table.write("Event", event_item(&stored), PutMode::Create, None).await {
                Ok(()) => {}
                Err(e) if e.is_condition_failed() || e.is_already_exists() => {
                    // Another process wrote this slot: read the session back and try the next one.
                    drop(ticket);
                    let today = UtcDay::from_unix_ms(ts);
                    *guard = self.load_session(&site.site_id, &live.visitor_id, ts, &[today, today.previous()]).await?;
                    if guard.as_ref().is_none_or(|l| l.session_id != live.session_id) && live.next_seq > 0 {
                        *guard = Some(Live { next_seq: live.next_seq + 1, ..live });
                    }
                    continue;
                }
                Err(e) => {
                    // The write may have happened anyway: settle it with a consistent read.
                    let key = item! {
                        "site_id" => stored.site_id.as_str(),
                        "day" => stored.day.as_str(),
                        "shard" => stored.shard,
                        "visitor_id" => stored.visitor_id.as_str(),
                        "session_id" => stored.session_id.as_str(),
                        "seq" => stored.seq,
                    };
                    let mine = self
                        .table
                        .get_with("Event", key, true)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|r| event_from_record(&r).ok())
                        .is_some_and(|s| s.run == stored.run && s.epoch == stored.epoch && s.ts == stored.ts);
                    if !mine {
                        *guard = None;
                        return Err(e.into());
                    }
                }
            }
            ticket.commit(&stored);
            *guard = Some(Live { next_seq: stored.seq + 1, state: stored.next(), ..live });
            return Ok(());
        }
        Err(PipelineError::Contended(MAX_SLOT_ATTEMPTS))
    }
}

type Sessions = HashMap<(String, String), Slot>;

/// Shrinks a full session cache: sessions idle at `now` go first; if most are still live, the
/// older half of them too. A slot in use (locked) stays, since its task holds it.
fn make_room(sessions: &mut Sessions, now: i64) {
    let cutoff = now - SESSION_TIMEOUT_MS;
    let last_ts = |slot: &Slot| slot.try_lock().map(|live| live.as_ref().map(|l| l.state.last_ts)).ok();
    sessions.retain(|_, slot| last_ts(slot).is_none_or(|ts| ts.is_some_and(|ts| ts >= cutoff)));
    if sessions.len() >= MAX_CACHED_SESSIONS * 3 / 4 {
        let mut times: Vec<i64> = sessions.values().filter_map(|s| last_ts(s).flatten()).collect();
        let middle = times.len() / 2;
        if middle > 0 {
            let (_, median, _) = times.select_nth_unstable(middle);
            let median = *median;
            sessions.retain(|_, slot| last_ts(slot).is_none_or(|ts| ts.is_some_and(|ts| ts > median)));
        }
    }
}

/// Whether a session in `state` is still live for an event at `ts`.
fn live_at(state: &PrevState, ts: i64) -> bool {
    !state.is_empty() && (ts - state.last_ts).abs() < SESSION_TIMEOUT_MS
}

fn new_session(visitor: &str, ts: i64, event: &Event, e: &Enrichment) -> Live {
    let utm = &event.query.utm;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let millis = u64::try_from(ts).unwrap_or(0);
    Live {
        day: day_text(ts),
        visitor_id: visitor.to_owned(),
        session_id: ulid::Ulid::from_parts(millis, rand::random()).to_string(),
        next_seq: 0,
        state: PrevState::default(),
        visit: VisitAttrs {
            start_ts: ts,
            entry_page: event.pathname.as_str().to_owned(),
            source: text(&e.source),
            referrer: text(&e.referrer),
            utm_source: text(&utm.source),
            utm_medium: text(&utm.medium),
            utm_campaign: text(&utm.campaign),
            utm_content: text(&utm.content),
            utm_term: text(&utm.term),
            country: e.country.map(|c| c.as_str().to_owned()).unwrap_or_default(),
            device: e.device.as_str().to_owned(),
            browser: e.browser.name.clone(),
            browser_version: text(&e.browser.version),
            os: e.os.name.clone(),
            os_version: text(&e.os.version),
        },
    }
}

/// The visitor id of an imported event: a keyed hash of the site and the source's visitor key
/// (or the client address and User-Agent) under the site's import salt, since past days' salts
/// are gone. The salt is secret, so the id cannot be worked back to an address.
fn import_visitor(salt: &Salt, site_id: &str, visitor: Option<&str>, ip: IpAddr, ua: &str) -> VisitorId {
    match visitor {
        Some(key) => visitor_id(salt, site_id, IpAddr::from([0, 0, 0, 0]), key),
        None => visitor_id(salt, site_id, ip, ua),
    }
}

#[cfg(test)]
mod tests;
