//! The ingestion path of one event (DESIGN.md, "The path of one event"): validate, resolve the
//! site, enrich, compute the visitor id under the shared daily salt, find or start the session,
//! write the event in an event block (waiting until the block is durable), and hand it to the
//! aggregator.
//!
//! **Sessions across processes.** A process keeps the sessions it has seen in memory, each behind
//! an async mutex so one process writes a session's events one at a time. How a session is
//! shared with other processes depends on the ingest lease ([`crate::lease`]):
//! - **alone** (this process holds the lease, and no other ingests): memory is the truth. A live
//!   session leaving the cache is packed with others into blocks held in memory (`cold`), and a
//!   visitor's latest event is written to the table (`VisitorSession`) only when those are full,
//!   when the process stops, or when another process starts ingesting;
//! - **shared** (the default, and whenever another process ingests): every event first claims the
//!   session's next slot with a conditional write of the visitor's `VisitorSession` item (its
//!   `version` must be the one this process last saw), so a stale cache is found out by a failed
//!   condition, the session is read back (one GetItem) and the claim tried again;
//! - **held** (shared, by a process that advertised where it is reached,
//!   [`Pipeline::set_handover`]): the claim of a session's first event names this process its
//!   holder, which then appends the visitor's events in memory as alone; other processes hand it
//!   the visitor's events ([`Handover`], [`Pipeline::take_over`]). DESIGN.md, "Held by one
//!   process", has the rules that keep it exact.
//!
//! Either way a cache miss reads the `VisitorSession` item (one GetItem), and every event's
//! [`PrevState`] is the fold of exactly the events before it.
//!
//! **Salts.** Today's salt is created by whichever process needs it first (a conditional put; the
//! loser reads the winner's), so every process computes the same visitor ids.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use store::sync::lock;

use model::Table;
use model::expr::attr;
use store::item;

use crate::aggregate::Aggregator;
use crate::enrich::{DropReason, Enricher, Enrichment, SiteContext};
use crate::event::{Event, EventError, Limits, RawEvent};
use crate::event_store::{BlockWriter, EventStoreError, Written};
use crate::sites::{Site, SiteId, Sites, SitesError};
use crate::stale::StaleRate;
use crate::stored::{PrevState, StoredEvent, Visit, VisitAttrs};
use crate::visitor::{Salt, UtcDay, VisitorId, salt_expires_at_ms, salts_to_try, visitor_id};

mod cold;

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

/// What [`Pipeline::import_all`] did with a batch of imported events.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// Events stored.
    pub imported: u64,
    /// Events dropped as bots or excluded traffic, as live ingestion drops them.
    pub dropped: u64,
    /// Lines refused, in line order, with the reason.
    pub refused: Vec<(usize, String)>,
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
    /// The event's block could not be written.
    #[error(transparent)]
    Events(#[from] EventStoreError),
    /// The visitor's session is held by another process that cannot take the event now: it
    /// stopped beating and is not recovered yet, or it cannot be reached.
    #[error("the process holding the visitor's session cannot take the event: {0}")]
    Holder(String),
    /// This process's heartbeat is too old for it to go on appending to the sessions it holds.
    #[error("this process's heartbeat is too old to append to the sessions it holds")]
    NotLive,
    /// An event handed over by another process was not one event this process can store.
    #[error("a handed-over event was refused: {0}")]
    Handover(String),
    /// An event was handed over without this process's token.
    #[error("a handed-over event did not carry this process's token")]
    WrongToken,
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
    /// Shared, claims of a session this process had cached (`Pipeline::claims`).
    pub claims: AtomicU64,
    /// Of those, claims whose cached session another process had moved on.
    pub stale_claims: AtomicU64,
    /// Of those, claims made after reading the visitor's item first.
    pub claims_read_first: AtomicU64,
    /// Of those, claims the table refused because another process moved the session on first
    /// (each cost a write unit).
    pub refused_claims: AtomicU64,
    /// `VisitorSession` items read because a visitor was missing from memory.
    pub session_lookups: AtomicU64,
    /// Alone, times the memory of visitors written on eviction filled and was forgotten.
    pub evicted_forgotten: Arc<AtomicU64>,
    /// `VisitorSession` items written for live sessions leaving memory (the cache being full):
    /// over HTTP at a high rate, about one a session, and a large part of a request's cost.
    pub evicted_written: Arc<AtomicU64>,
    /// Claims that made this process the holder of a visitor's session.
    pub held_claims: AtomicU64,
    /// Events handed to the process holding their visitor's session (and stored there).
    pub handed_over: AtomicU64,
    /// Events other processes handed to this one, stored here.
    pub taken_over: AtomicU64,
    /// Events that waited for eviction to make room in a session cache past its hard bound.
    pub waited_for_room: AtomicU64,
    /// Alone, live sessions leaving memory packed into blocks in memory instead of written.
    pub evicted_packed: Arc<AtomicU64>,
    /// Alone, visitors missing from the cache whose session was found packed.
    pub packed_found: AtomicU64,
}

/// Who holds a visitor's session, as their `VisitorSession` item names it (`holder`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Holder {
    /// No process: every event claims the next slot.
    #[default]
    None,
    /// This process: memory is the truth, and events append without a claim.
    Me,
    /// Another run: events go to it.
    Other(Arc<str>),
}

/// What became of an event handed to the process holding its visitor's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handed {
    /// Stored there, durably.
    Stored,
    /// That process does not hold the session (any more): read the visitor's item again.
    NotHolder,
}

/// Hands an event to another process (`server` does it over HTTP; `tally bench` in process).
pub trait Handover: Send + Sync {
    /// Sends `payload` ([`Pipeline::take_over`]'s input) to the process at `address`, presenting
    /// `token`. `Err` when the outcome is unknown or a failure.
    fn hand(
        &self,
        address: &str,
        token: &str,
        payload: Vec<u8>,
    ) -> futures::future::BoxFuture<'static, Result<Handed, String>>;
}

/// Hands events to pipelines of this process, by the address each gave
/// [`Pipeline::set_handover`]: for `tally bench`'s two ingesting pipelines and for tests, which
/// run several "processes" in one.
#[derive(Default)]
pub struct LocalHandover {
    pipelines: Mutex<HashMap<String, std::sync::Weak<Pipeline>>>,
}

impl LocalHandover {
    /// Makes `pipeline` reachable at `address`.
    pub fn add(&self, address: &str, pipeline: &Arc<Pipeline>) {
        lock(&self.pipelines).insert(address.to_owned(), Arc::downgrade(pipeline));
    }
}

impl Handover for LocalHandover {
    fn hand(
        &self,
        address: &str,
        token: &str,
        payload: Vec<u8>,
    ) -> futures::future::BoxFuture<'static, Result<Handed, String>> {
        let pipeline = lock(&self.pipelines).get(address).and_then(std::sync::Weak::upgrade);
        let token = token.to_owned();
        Box::pin(async move {
            let Some(pipeline) = pipeline else { return Err("no pipeline at that address".to_owned()) };
            pipeline.take_over(&token, &payload).await.map_err(|e| e.to_string())
        })
    }
}

/// How this process takes part in holding sessions ([`Pipeline::set_handover`]).
struct Peering {
    handover: Arc<dyn Handover>,
    /// The token other processes present with an event they hand over; `None` when this process
    /// advertised no address, so holds no session.
    token: Option<String>,
    /// Whether new claims make this process the holder (cleared when it stops).
    holding: AtomicBool,
}

/// Where an event to store comes from.
enum Source<'a> {
    /// Received here.
    Local(&'a Event, &'a Enrichment),
    /// Handed over by another process, as the first event of a new session (the session's fields
    /// are taken only when it starts one here).
    HandedOver(&'a StoredEvent),
}

impl Source<'_> {
    fn ts(&self) -> i64 {
        match self {
            Source::Local(event, _) => event.timestamp_ms,
            Source::HandedOver(e) => e.ts,
        }
    }
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
    /// The browser, operating system and device the source system recorded, used instead of
    /// what the User-Agent says (Umami keeps these, not the User-Agent).
    pub client: Option<ImportClient>,
}

/// A client as another tool recorded it; an empty field keeps what the User-Agent says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportClient {
    /// A browser family name, such as `Chrome`.
    pub browser: String,
    /// An operating system name, such as `Linux`.
    pub os: String,
    /// A device kind: `desktop` (or `laptop`), `mobile`, `tablet`, `tv`, `console`; anything else is other.
    pub device: String,
}

impl ImportClient {
    fn apply(&self, enrichment: &mut crate::enrich::Enrichment) {
        use crate::enrich::ua::{Browser, DeviceType, Os};
        let client = Arc::make_mut(&mut enrichment.client);
        if !self.browser.trim().is_empty() {
            client.browser = Browser { name: self.browser.trim().to_owned(), version: None };
        }
        if !self.os.trim().is_empty() {
            client.os = Os { name: self.os.trim().to_owned(), version: None };
        }
        if !self.device.trim().is_empty() {
            client.device = match self.device.trim().to_ascii_lowercase().as_str() {
                "desktop" | "laptop" => DeviceType::Desktop,
                "mobile" | "phone" => DeviceType::Mobile,
                "tablet" => DeviceType::Tablet,
                "tv" | "smarttv" => DeviceType::Tv,
                "console" => DeviceType::Console,
                _ => DeviceType::Other,
            };
        }
    }
}

/// A live session in memory: its latest event, what its next event continues and what its
/// `VisitorSession` item holds. The state after it is worked out from it when an event needs
/// it, not kept beside it: a cached session is one event, not an event and a second copy of its
/// counters and exit page (15,000 of them are held under sustained ingestion).
#[derive(Debug, Clone)]
struct Live {
    /// Shared with the block writer while it is queued.
    last: Arc<StoredEvent>,
    /// Whether `last` is durable yet, when it was queued by [`Pipeline::store_alone`] (`None`:
    /// it is).
    written: Option<Arc<Written>>,
}

impl Live {
    /// The session's latest event time: `self.last.next().last_ts`, without building the state.
    fn last_ts(&self) -> i64 {
        let last = &self.last;
        if last.prev.is_empty() { last.ts } else { last.ts.max(last.prev.last_ts) }
    }

    /// Whether the session is still live for an event at `ts`: within 30 minutes of its latest.
    fn live_at(&self, ts: i64) -> bool {
        (ts - self.last_ts()).abs() < SESSION_TIMEOUT_MS
    }
}

/// What a new session's first event starts from.
struct NewSession {
    day: UtcDay,
    session_id: ulid::Ulid,
    visit: Arc<VisitAttrs>,
}

/// A cached session and the version of the visitor's `VisitorSession` item last seen (`None`:
/// none seen; the claim then requires there is none).
#[derive(Debug, Clone, Default)]
struct Cached {
    live: Option<Live>,
    head_version: Option<i64>,
    /// Whether this was just read from the table (not cached from an earlier event): a claim
    /// then has nothing to read first.
    just_read: bool,
    /// Who holds the session, as last seen.
    holder: Holder,
    /// When the item naming this process the holder was written (wall clock, ms): it is kept
    /// [`HELD_TTL_MS`], and claimed again (renewed) once older than [`HOLD_RENEW_MS`], so it never
    /// expires while held (another process would then claim the session as new).
    held_at_ms: i64,
}

/// How far apart two processes' clocks may be, for telling a run's start from a reading of the
/// runs.
const CLOCK_MARGIN_MS: i64 = 60_000;

/// How long a `VisitorSession` item naming a holder is kept.
const HELD_TTL_MS: i64 = 2 * 86_400_000;
/// How old such an item may be before its holder claims the session again, renewing it.
const HOLD_RENEW_MS: i64 = 86_400_000;

type Slot = Arc<tokio::sync::Mutex<Cached>>;

/// How one attempt at storing an event in its session ended.
enum Stored {
    /// Stored, and handed to aggregation.
    Done,
    /// Another process moved the session on; it has been read back.
    Moved,
}

/// The ingestion pipeline. Share it behind an `Arc`.
pub struct Pipeline {
    table: Table,
    sites: Arc<Sites>,
    enricher: Arc<Enricher>,
    aggregator: Arc<Aggregator>,
    limits: Limits,
    /// Salts by UTC day; `None` caches that a past day's salt does not exist (no process
    /// creates a past day's salt, so the answer cannot change).
    salts: Mutex<hashbrown::HashMap<i64, Option<Salt>>>,
    sessions: Arc<Mutex<Sessions>>,
    counters: PipelineCounters,
    writer: Arc<BlockWriter>,
    /// Whether this process ingests alone ([`crate::lease`]); shared until the lease says so.
    alone: AtomicBool,
    /// The newest event time seen, for telling live sessions from idle ones when the events
    /// are imported ones with old times.
    newest_ts: Arc<AtomicI64>,
    /// While an import runs, the oldest time of an event it has still to ingest
    /// ([`Pipeline::hold_sessions_from`]); `i64::MAX` otherwise.
    import_floor: AtomicI64,
    /// While an import runs, the number of cached sessions at which the next sweep of ended
    /// ones runs.
    sweep_at: AtomicUsize,
    /// Whether a task is writing evicted sessions' items.
    evicting: Arc<AtomicBool>,
    /// Told whenever eviction lets sessions go or ends: events waiting for room in a cache past
    /// its hard bound ([`Pipeline::wait_for_room`]) look again.
    room: Arc<tokio::sync::Notify>,
    /// Shared, how often cached sessions were stale at their claims, and so whether a claim
    /// of a cached session reads the visitor's item first. A claim is a conditional write:
    /// when another process moved the session on since this one cached it (a balancer that
    /// sends a visitor's events to either process makes that every other event or so), the
    /// write is refused, which still costs a write unit on DynamoDB, and the item is then read
    /// and the claim made again. Read first, a claim costs a read and one write unit whatever
    /// the cache held ([`StaleRate`] says when that is the cheaper way).
    claims: StaleRate,
    /// How many sessions the cache holds before it makes room (15,000 unless set).
    session_limit: AtomicUsize,
    /// Alone, until when (wall clock, ms) a visitor missing from memory may still have a live
    /// session in the table from before this process held the lease, so must be looked up.
    lookups_until: Arc<AtomicI64>,
    /// Alone, the visitors whose sessions this process wrote to the table on leaving memory
    /// (as [`visitor_hash`]es): they are looked up when they come back. Two visitors sharing a
    /// hash only cost a lookup that was not needed. Bounded ([`Pipeline::evicted_limit`]): past
    /// the bound they are forgotten, and `forgotten_until_ts` says which events must then be
    /// looked up whoever their visitor is.
    evicted: Arc<Mutex<hashbrown::HashSet<u64>>>,
    /// How many visitors `evicted` holds before it is forgotten (200,000 unless set).
    evicted_limit: Arc<AtomicUsize>,
    /// Alone, the latest event time (ms) that could continue the session of a visitor whose
    /// eviction was forgotten: the newest event time when they were forgotten, plus a visit's
    /// timeout. Every such session's latest event is at most that newest time, so an event past
    /// this bound starts a new visit whoever its visitor is, and needs no lookup; an event at or
    /// before it (an import's older events too) is looked up. Before, a process that once
    /// forgot looked every missing visitor up for as long as it ran (BENCHMARKS.md,
    /// "fourteenth session").
    forgotten_until_ts: Arc<AtomicI64>,
    /// How events go to the process holding their visitor's session; unset, none can.
    peering: std::sync::OnceLock<Peering>,
    /// Alone, live sessions that left the cache, packed in memory (`cold`).
    cold: Cold,
}

/// The packed sessions and their bound.
#[derive(Debug, Clone)]
struct Cold {
    sessions: Arc<Mutex<cold::ColdSessions>>,
    max_bytes: Arc<AtomicUsize>,
}

/// How many bytes of packed sessions a process holds before it writes the oldest to the table:
/// about 26,000 sessions at about 160 bytes each (their blocks, rows and index entries).
const MAX_COLD_BYTES: usize = 4 << 20;

/// How many evicted visitors a process remembers before it forgets them, and then looks up every
/// missing visitor of an event within a visit's timeout of the newest event then seen.
const MAX_EVICTED_REMEMBERED: usize = 200_000;

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("run", &self.aggregator.run_id()).finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// Largest number of sessions kept in memory. Any session can be dropped safely — the next
/// event of its visitor finds it in the table — so this bounds memory, trading it for a Query
/// per returning visitor whose session was dropped. A cached session (its latest event, its
/// visit's attributes, its key and map entry) held about 1.4 KB in a heap profile of sustained
/// ingestion, 33 MB for the 24,000 held while eviction was writing, the largest single part of
/// the server's heap (about 850 bytes since: BENCHMARKS.md, "twenty-sixth session"). Alone, live
/// sessions leaving it are packed in memory at about a quarter of that (`cold`), so it holds
/// 15,000 and the packed ones about 26,000 more, in about the memory 20,000 cached took before
/// (BENCHMARKS.md, "twenty-eighth session").
const MAX_CACHED_SESSIONS: usize = 15_000;

impl Pipeline {
    /// A pipeline writing to `table`.
    pub fn new(table: Table, sites: Arc<Sites>, enricher: Arc<Enricher>, aggregator: Arc<Aggregator>) -> Self {
        let flushed = {
            let aggregator = Arc::downgrade(&aggregator);
            Arc::new(move || aggregator.upgrade().map_or(0, |a| a.stats().flushed_epoch))
        };
        let writer = BlockWriter::start(table.clone(), aggregator.run_id(), flushed);
        Pipeline {
            table,
            sites,
            enricher,
            aggregator,
            limits: Limits::default(),
            salts: Mutex::default(),
            sessions: Arc::default(),
            counters: PipelineCounters::default(),
            writer,
            alone: AtomicBool::new(false),
            newest_ts: Arc::new(AtomicI64::new(0)),
            import_floor: AtomicI64::new(i64::MAX),
            sweep_at: AtomicUsize::new(0),
            evicting: Arc::new(AtomicBool::new(false)),
            room: Arc::new(tokio::sync::Notify::new()),
            claims: StaleRate::default(),
            session_limit: AtomicUsize::new(MAX_CACHED_SESSIONS),
            lookups_until: Arc::new(AtomicI64::new(i64::MAX)),
            evicted: Arc::default(),
            evicted_limit: Arc::new(AtomicUsize::new(MAX_EVICTED_REMEMBERED)),
            forgotten_until_ts: Arc::new(AtomicI64::new(i64::MIN)),
            peering: std::sync::OnceLock::new(),
            cold: Cold { sessions: Arc::default(), max_bytes: Arc::new(AtomicUsize::new(MAX_COLD_BYTES)) },
        }
    }

    /// Lets this process hand events to the process holding their visitor's session, and, with
    /// `address` (where other processes reach this one), hold sessions itself: the address and a
    /// token are recorded in this run's item first. Once per pipeline.
    pub async fn set_handover(&self, handover: Arc<dyn Handover>, address: Option<&str>) -> Result<(), PipelineError> {
        let token = match address {
            Some(address) => Some(self.aggregator.advertise(address).await?),
            None => None,
        };
        let holding = AtomicBool::new(token.is_some());
        let _ = self.peering.set(Peering { handover, token, holding });
        Ok(())
    }

    /// Whether new claims make this process the holder of their sessions.
    fn holding(&self) -> bool {
        self.peering.get().is_some_and(|p| p.holding.load(Ordering::SeqCst))
    }

    /// Whether sessions in memory may be the only copy of their state (alone, or holding some).
    fn memory_may_be_truth(&self) -> bool {
        self.is_alone() || self.peering.get().is_some_and(|p| p.token.is_some())
    }

    /// Stops holding sessions, before this process stops: no claim makes it a holder from now on
    /// (an event of a session it held is claimed like any other), every session it holds in
    /// memory is written to its visitor's item, naming no holder (each once its in-flight event
    /// is done), and its run is marked released, so other processes claim the sessions whose
    /// items still name it (those it wrote as they left memory) rather than hand it their
    /// events. Returns how many were written.
    pub async fn release_held(&self) -> Result<usize, PipelineError> {
        let Some(peering) = self.peering.get().filter(|p| p.token.is_some()) else { return Ok(0) };
        peering.holding.store(false, Ordering::SeqCst);
        let slots: Vec<Slot> = lock(&self.sessions).values().cloned().collect();
        let mut written = 0;
        for chunk in slots.chunks(EVICT_CHUNK) {
            let mut held = Vec::new();
            for slot in chunk {
                let mut guard = slot.clone().lock_owned().await;
                if guard.holder != Holder::Me {
                    continue;
                }
                if let Some(w) = guard.live.as_ref().and_then(|l| l.written.clone())
                    && !w.wait().await
                {
                    self.forget(&mut guard).await;
                    continue;
                }
                held.push(guard);
            }
            let mut writes = Vec::new();
            for guard in &held {
                if let Some(live) = guard.live.as_ref() {
                    writes.push(model::BatchWrite::put(
                        "VisitorSession",
                        head_item_for(&live.last, guard.head_version.unwrap_or(0) + 1, None)?,
                    ));
                }
            }
            if !writes.is_empty() {
                self.table.batch_write(writes).await?;
            }
            for guard in &mut held {
                if guard.live.is_some() {
                    guard.head_version = Some(guard.head_version.unwrap_or(0) + 1);
                    written += 1;
                }
                guard.holder = Holder::None;
            }
        }
        self.aggregator.mark_released().await?;
        Ok(written)
    }

    /// Whether small event blocks are merged once flushed (on by default; see
    /// [`crate::event_store`], "Compacting").
    pub fn set_block_compaction(&self, on: bool) {
        self.writer.set_compaction(on);
    }

    /// Merges the small event blocks written so far whose epochs are flushed, now; returns how
    /// many were merged away.
    pub async fn compact_blocks_now(&self) -> Result<usize, EventStoreError> {
        self.writer.compact_now().await
    }

    /// The block writer's counters (blocks, events, bytes written).
    pub fn block_counters(&self) -> &crate::event_store::WriterCounters {
        self.writer.counters()
    }

    /// Tells the session cache that every event still to come is at or after `ts` (an import in
    /// time order: its oldest event not yet stored), or, with `None`, that no import runs. While
    /// it is set, and this process ingests alone, a full cache drops the sessions that ended a
    /// visit's timeout before `ts`, unwritten (no event to come continues them), and keeps every
    /// other: a visitor whose events are ingested later than others' (on another lane) still
    /// continues its visit, however far the newest event ingested is ahead of it. The cache then
    /// holds at most the sessions of the events in flight beyond its limit. For one import at a
    /// time per process (`tally import`).
    pub fn hold_sessions_from(&self, ts: Option<i64>) {
        self.import_floor.store(ts.unwrap_or(i64::MAX), Ordering::SeqCst);
    }

    /// Caps the sessions kept in memory at `limit` instead of 15,000: for a
    /// small machine, and for tests of what happens when the cache is full.
    pub fn set_session_cache_limit(&self, limit: usize) {
        self.session_limit.store(limit.max(2), Ordering::SeqCst);
    }

    /// Caps the visitors remembered as written on eviction at `limit` instead of 200,000: for
    /// tests of what happens when that memory fills.
    pub fn set_evicted_memory_limit(&self, limit: usize) {
        self.evicted_limit.store(limit.max(1), Ordering::SeqCst);
    }

    /// Whether this process ingests alone (see [`Pipeline::set_alone`]).
    pub fn is_alone(&self) -> bool {
        self.alone.load(Ordering::SeqCst)
    }

    /// Starts ingesting alone: sessions are kept in memory only ([`crate::lease`] calls this
    /// once it holds the lease and no other process ingests). Until `lookups_until_ms` (wall
    /// clock) a visitor missing from memory is looked up in the table, since an earlier process
    /// may have left their live session there; after it, only visitors this process itself
    /// wrote there are (a session is live 30 minutes after its latest event, and every session
    /// an earlier process leaves is one live when it left).
    pub fn set_alone(&self, lookups_until_ms: i64) {
        self.lookups_until.store(lookups_until_ms, Ordering::SeqCst);
        self.alone.store(true, Ordering::SeqCst);
        lock(&self.cold.sessions).open();
    }

    /// Caps the bytes of live sessions packed in memory after leaving the cache at `bytes`
    /// instead of 4 MiB (0: none are packed, each is written): for tests.
    pub fn set_packed_session_bytes(&self, bytes: usize) {
        self.cold.max_bytes.store(bytes, Ordering::SeqCst);
    }

    /// How many visitors' sessions are packed in memory, and about how many bytes they hold.
    pub fn packed_sessions(&self) -> (usize, usize) {
        let cold = lock(&self.cold.sessions);
        (cold.len(), cold.bytes())
    }

    /// Whether a visitor missing from memory must be looked up in the table for an event at
    /// `ts`.
    fn must_look_up(&self, site_id: &str, visitor: VisitorId, ts: i64) -> bool {
        if !self.is_alone() || now_ms() <= self.lookups_until.load(Ordering::SeqCst) {
            return true;
        }
        // Under the memory's lock: forgetting it opens the window under the same lock, so a
        // visitor is either still remembered or inside the window.
        let remembered = lock(&self.evicted);
        remembered.contains(&visitor_hash(site_id, visitor)) || ts <= self.forgotten_until_ts.load(Ordering::SeqCst)
    }

    /// Stops ingesting alone, before another process starts: from now on every event claims its
    /// session's slot in the table, and every session in memory is written there first (each
    /// once its in-flight event, if any, is done). Returns how many were written.
    pub async fn share(&self) -> Result<usize, PipelineError> {
        self.alone.store(false, Ordering::SeqCst);
        self.write_heads(None).await
    }

    /// Writes the `VisitorSession` item of every session in memory whose latest event is at
    /// or after `since_ts` (all when `None`), unconditionally: only while no other process
    /// ingests (switching to shared, stopping alone). Returns how many.
    pub async fn write_heads(&self, since_ts: Option<i64>) -> Result<usize, PipelineError> {
        // The packed sessions first, packing closed first: a packed session taken back into the
        // cache meanwhile is written below with the cache's. They stay packed (and found) until
        // written, so a failed write loses none.
        let packed = {
            let mut cold = lock(&self.cold.sessions);
            cold.close();
            cold.to_write(since_ts.unwrap_or(i64::MIN))
        };
        let packed_written = write_unpacked(&self.table, &packed, &self.evicted).await?;
        lock(&self.cold.sessions).clear();
        let slots: Vec<Slot> = lock(&self.sessions).values().cloned().collect();
        // Each session is held until every item is written, once its latest event is durable:
        // an item never names an event that is not stored.
        let mut held = Vec::new();
        for slot in slots {
            let mut guard = slot.lock_owned().await;
            if let Some(written) = guard.live.as_ref().and_then(|l| l.written.clone())
                && !written.wait().await
            {
                // It failed: the session is forgotten, as its task would.
                *guard = Cached::default();
            }
            if guard.live.as_ref().is_some_and(|live| since_ts.is_none_or(|t| live.last.ts >= t)) {
                held.push(guard);
            }
        }
        // The items are built and written a chunk at a time: a process holding a full session
        // cache would otherwise build tens of megabytes of items at once when it stops.
        for chunk in held.chunks_mut(EVICT_CHUNK) {
            let mut writes = Vec::with_capacity(chunk.len());
            for guard in chunk.iter() {
                if let Some(live) = guard.live.as_ref() {
                    let item = head_item_for(&live.last, guard.head_version.unwrap_or(0) + 1, None)?;
                    writes.push(model::BatchWrite::put("VisitorSession", item));
                }
            }
            self.table.batch_write(writes).await?;
            for guard in chunk.iter_mut() {
                guard.head_version = Some(guard.head_version.unwrap_or(0) + 1);
            }
        }
        let written = held.len() + packed_written;
        Ok(written)
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
        let result =
            self.ingest_inner(raw, SiteSelector::Domain, Some((event.visitor, event.country, event.client))).await;
        self.count(&result);
        result
    }

    /// Imports `events` of `site` (each with a caller's label, say its line), `lanes` at a time:
    /// one visitor's events stay in the order given (a visitor's lane is fixed by its key), so
    /// their sessions are as a sequential import makes them, while different visitors' events
    /// share the event blocks being written. Each lane is a task of its own, so the lanes' work
    /// (parsing, enrichment, sessions, deltas) runs on every core. Calls `progress` with the number
    /// done about every 10,000 events. Returns each event's outcome with its label, in no
    /// particular order.
    pub async fn import_many<L: Send + 'static>(
        self: &Arc<Self>,
        site: &Site,
        events: Vec<(L, ImportEvent)>,
        lanes: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Vec<(L, IngestResult)> {
        let lanes = lanes.max(1);
        let total = events.len();
        let mut queues: Vec<Vec<(L, ImportEvent)>> = (0..lanes).map(|_| Vec::new()).collect();
        for (label, event) in events {
            let key = match &event.visitor {
                Some(v) => siphasher::sip::SipHasher13::new().hash(v.as_bytes()),
                None => siphasher::sip::SipHasher13::new()
                    .hash(format!("{}\u{0}{}", event.raw.peer_ip, event.raw.user_agent).as_bytes()),
            };
            queues[(key % lanes as u64) as usize].push((label, event));
        }
        let done = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for queue in queues.into_iter().filter(|q| !q.is_empty()) {
            let (pipeline, site, done) = (self.clone(), site.clone(), done.clone());
            tasks.spawn(async move {
                let mut out = Vec::with_capacity(queue.len());
                for (label, event) in queue {
                    out.push((label, pipeline.import(&site, event).await));
                    done.fetch_add(1, Ordering::Relaxed);
                }
                out
            });
        }
        let mut outcomes = Vec::with_capacity(total);
        let mut ticker = tokio::time::interval(std::time::Duration::from_millis(250));
        let mut reported = 0;
        loop {
            tokio::select! {
                finished = tasks.join_next() => match finished {
                    Some(Ok(out)) => outcomes.extend(out),
                    Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    // Cancelled: only when the runtime shuts down, which ends this import too.
                    Some(Err(_)) => {}
                    None => break,
                },
                _ = ticker.tick() => {
                    let n = done.load(Ordering::Relaxed) as usize;
                    if n >= reported + 10_000 {
                        reported = n;
                        progress(n);
                    }
                }
            }
        }
        outcomes
    }

    /// Imports `events` (each with its line number) as [`Pipeline::import_many`] does, and
    /// counts the outcomes: the one import loop of `POST /api/import` and `tally import`.
    /// Refused lines come back in line order with their reason; an event that could not be
    /// stored stops the count with its line and error (the caller reports it and nothing past
    /// that chunk is acknowledged).
    pub async fn import_all(
        self: &Arc<Self>,
        site: &Site,
        events: Vec<(usize, ImportEvent)>,
        lanes: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<ImportReport, (usize, PipelineError)> {
        let mut outcomes = self.import_many(site, events, lanes, progress).await;
        outcomes.sort_by_key(|(line, _)| *line);
        let mut report = ImportReport::default();
        for (line, outcome) in outcomes {
            match outcome {
                IngestResult::Accepted => report.imported += 1,
                IngestResult::Dropped(_) => report.dropped += 1,
                IngestResult::Invalid(e) => report.refused.push((line, e.to_string())),
                IngestResult::UnknownSite => report.refused.push((line, "unknown site".to_owned())),
                IngestResult::Failed(e) => return Err((line, e)),
            }
        }
        Ok(report)
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
        import: Option<(Option<String>, Option<String>, Option<ImportClient>)>,
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
        import: Option<&(Option<String>, Option<String>, Option<ImportClient>)>,
    ) -> IngestResult {
        let context = SiteContext { domains: &site.domains, excluded_ips: &site.excluded_ips };
        let enriched = match import {
            Some((Some(_), _, _)) => self.enricher.enrich_import(event, &context),
            _ => self.enricher.enrich(event, &context),
        };
        let mut enrichment = match enriched {
            Ok(e) => e,
            Err(reason) => return IngestResult::Dropped(reason),
        };
        let visitors = match import {
            Some((visitor, country, client)) => {
                if let Some(client) = client {
                    client.apply(&mut enrichment);
                }
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
    async fn resolve(&self, event: &Event, selector: &SiteSelector) -> Result<Vec<Arc<Site>>, SitesError> {
        match selector {
            SiteSelector::UmamiWebsite(uuid) => Ok(self.sites.by_umami_id_shared(uuid).await?.into_iter().collect()),
            SiteSelector::Domain => {
                let mut sites: Vec<Arc<Site>> = Vec::new();
                for domain in &event.domains {
                    if let Some(site) = self.sites.by_hostname_shared(domain).await?
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
        if let Some(cached) = lock(&self.salts).get(&day.days()).cloned()
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
            lock(&self.salts).insert(day.days(), None);
            return Ok(None);
        };
        let salt = Salt::from_bytes(record.bytes("salt").map_err(|_| PipelineError::BadSalt)?)
            .map_err(|_| PipelineError::BadSalt)?;
        {
            let mut m = lock(&self.salts);
            m.retain(|d, _| *d >= day.days() - 3);
            m.insert(day.days(), Some(salt.clone()));
        }
        Ok(Some(salt))
    }

    /// Waits while the cache holds a quarter more sessions than its bound and lets them go only
    /// once their items are written (alone, or holding sessions), starting an eviction if none
    /// runs: however slowly the store takes those writes, the cache (and the server's memory)
    /// stays bounded, and ingestion slows to what eviction writes. Before, a slow eviction let
    /// the cache grow by every new visitor meanwhile: at 3.5 k new visitors a second, a stalled
    /// store grew the server by 50 MB in ten seconds (BENCHMARKS.md, "fifteenth session"). The
    /// waiting task holds no session, so eviction never waits on it. An import in time order
    /// never waits: its sessions leave memory as they end, bounded by its events in flight.
    async fn wait_for_room(&self) {
        // Almost always there is room: then the event registers no waiter.
        if self.has_room() {
            return;
        }
        self.counters.waited_for_room.fetch_add(1, Ordering::Relaxed);
        loop {
            // Registered before looking again, so an eviction's notice in between is not missed.
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_room() {
                return;
            }
            // Told when a chunk leaves the cache or the eviction ends; looked at again after a
            // while regardless (an eviction can end having let nothing go: every session it
            // chose had an event still being written).
            let _ = tokio::time::timeout(std::time::Duration::from_millis(50), notified).await;
        }
    }

    /// Whether a new visitor may take a slot now ([`Pipeline::wait_for_room`]); if not, an
    /// eviction runs (started here when none does).
    fn has_room(&self) -> bool {
        let sessions = lock(&self.sessions);
        let importing = self.is_alone() && self.import_floor.load(Ordering::SeqCst) != i64::MAX;
        if sessions.len() < self.hard_session_limit() || importing || !self.memory_may_be_truth() {
            return true;
        }
        self.start_eviction(&sessions);
        false
    }

    /// How many sessions the cache holds.
    pub fn cached_sessions(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// How many sessions the cache may hold while an eviction writes: its bound and a quarter.
    fn hard_session_limit(&self) -> usize {
        let limit = self.session_limit.load(Ordering::Relaxed);
        limit.saturating_add(limit / 4)
    }

    /// Starts a task letting the older half of the cache's sessions (or its idle ones) go, their
    /// items written first, unless one runs.
    fn start_eviction(&self, sessions: &Sessions) {
        let limit = self.session_limit.load(Ordering::Relaxed);
        if !self.evicting.swap(true, Ordering::SeqCst) {
            // The events' clock, not the wall's: a backfill or a replay of past traffic has every
            // session idle by the wall's clock, and would let the live ones go with the dead.
            let clock = now_ms().min(self.newest_ts.load(Ordering::Relaxed));
            let horizon = clock - SESSION_TIMEOUT_MS;
            let chosen: Vec<(SessionKey, Slot)> = eviction_candidates(sessions, clock, limit)
                .into_iter()
                .filter_map(|k| sessions.get(&k).map(|s| (k, s.clone())))
                .collect();
            let (table, evicting, map) = (self.table.clone(), self.evicting.clone(), self.sessions.clone());
            let room = self.room.clone();
            let (remembered, forgotten_until) = (self.evicted.clone(), self.forgotten_until_ts.clone());
            let (newest, remember_at_most) = (self.newest_ts.clone(), self.evicted_limit.clone());
            let forgotten = self.counters.evicted_forgotten.clone();
            let (evicted_written, evicted_packed) =
                (self.counters.evicted_written.clone(), self.counters.evicted_packed.clone());
            let writer = if self.is_alone() {
                Evictor::Alone(self.cold.clone())
            } else {
                Evictor::Holder(self.aggregator.run_id().into())
            };
            tokio::spawn(async move {
                let (written, packed) = evict(&table, &map, chosen, horizon, &writer, &remembered, &room).await;
                evicted_written.fetch_add(written, Ordering::Relaxed);
                evicted_packed.fetch_add(packed, Ordering::Relaxed);
                // Every remembered session ended at an event already counted in `newest` (it is
                // raised before an event is stored, and these were written once stored). Read
                // before the bound, so a bound raised meanwhile is seen whenever a newer time is.
                let until = newest.load(Ordering::SeqCst).saturating_add(SESSION_TIMEOUT_MS);
                let mut set = lock(&remembered);
                if set.len() > remember_at_most.load(Ordering::SeqCst) {
                    // Too many to remember: forget them, and look up every event that could still
                    // continue one of their sessions. The window opens before the memory empties,
                    // under its lock, which `must_look_up` reads it under.
                    forgotten_until.fetch_max(until, Ordering::SeqCst);
                    set.clear();
                    forgotten.fetch_add(1, Ordering::Relaxed);
                }
                drop(set);
                evicting.store(false, Ordering::SeqCst);
                room.notify_waiters();
            });
        }
    }

    fn slot(&self, site_id: &SiteId, visitor: VisitorId) -> Slot {
        let mut sessions = lock(&self.sessions);
        if let Some(slot) = sessions.get(&SessionKeyRef(site_id.as_str(), visitor)) {
            return slot.clone();
        }
        let limit = self.session_limit.load(Ordering::Relaxed);
        let floor = self.import_floor.load(Ordering::SeqCst);
        if sessions.len() >= limit && self.is_alone() && floor != i64::MAX {
            // An import in time order: a session that ended more than a visit's timeout before
            // its oldest event still to come is over for good, and leaves memory unwritten; the
            // others stay, however many (they belong to the events being ingested, bounded by
            // the import's events in flight).
            if sessions.len() >= self.sweep_at.load(Ordering::Relaxed) {
                let bar = floor - SESSION_TIMEOUT_MS;
                sessions.retain(|_, slot| {
                    Arc::strong_count(slot) > 1
                        || slot.try_lock().map_or(true, |c| c.live.as_ref().is_some_and(|l| l.last_ts() >= bar))
                });
                self.sweep_at.store(sessions.len().max(limit) + limit / 2, Ordering::Relaxed);
            }
        } else if sessions.len() >= limit {
            if self.memory_may_be_truth() {
                // Alone, memory is the truth (and holding sessions, it is for those held): a
                // live session leaves it only once its item is written, by a task (the map may
                // pass its bound by what arrives meanwhile, by a quarter at most:
                // `wait_for_room`).
                self.start_eviction(&sessions);
            } else {
                make_room(&mut sessions, now_ms(), limit);
            }
        }
        sessions.entry((site_id.clone(), visitor)).or_default().clone()
    }

    /// The visitor's latest event as the table has it (`VisitorSession`), the item's version,
    /// and who holds the session.
    async fn load_head(
        &self,
        site_id: &str,
        visitor: VisitorId,
    ) -> Result<(Option<StoredEvent>, Option<i64>, Holder, i64), PipelineError> {
        self.counters.session_lookups.fetch_add(1, Ordering::Relaxed);
        let found = self
            .table
            .get_with("VisitorSession", item! { "site_id" => site_id, "visitor_id" => visitor.to_string() }, true)
            .await?;
        let Some(record) = found else { return Ok((None, None, Holder::None, 0)) };
        let version = record.opt_i64("version")?.unwrap_or(0);
        let bytes = record.bytes("last")?;
        let last = crate::block::decode_events(bytes).map_err(EventStoreError::from)?.pop();
        let holder = match record.opt_string("holder")? {
            None => Holder::None,
            Some(run) if run == self.aggregator.run_id() => Holder::Me,
            Some(run) => Holder::Other(Arc::from(run)),
        };
        let held_at = record.opt_i64("ttl")?.map_or(0, |ttl| ttl.saturating_mul(1000) - HELD_TTL_MS);
        Ok((last, Some(version), holder, held_at))
    }

    /// Counts a claim of a cached session in [`PipelineCounters`] (`tally bench` prints them).
    fn count_claim(&self, stale: bool, read_first: bool) {
        let c = &self.counters;
        c.claims.fetch_add(1, Ordering::Relaxed);
        c.stale_claims.fetch_add(u64::from(stale), Ordering::Relaxed);
        c.claims_read_first.fetch_add(u64::from(read_first), Ordering::Relaxed);
    }

    /// The visitor's session as the table has it, if it is live at `ts`.
    async fn load_session(&self, site_id: &str, visitor: VisitorId, ts: i64) -> Result<Cached, PipelineError> {
        let (last, head_version, holder, held_at_ms) = self.load_head(site_id, visitor).await?;
        let live = last.map(|last| Live { last: Arc::new(last), written: None }).filter(|l| l.live_at(ts));
        Ok(Cached { live, head_version, just_read: true, holder, held_at_ms })
    }

    /// Forgets a session whose latest event failed (so did every later one queued after it). The
    /// visitor's next event starts a new visit, as alone: one this process holds has its item
    /// deleted (under the version last written; best effort, like giving a claim back), so that
    /// no process continues it from the older event the item names.
    async fn forget(&self, guard: &mut Cached) {
        if guard.holder == Holder::Me
            && let (Some(version), Some(live)) = (guard.head_version, guard.live.as_ref())
        {
            let key =
                item! { "site_id" => live.last.site_id.as_str(), "visitor_id" => live.last.visitor_id.to_string() };
            let _ = self.table.delete_with("VisitorSession", key, Some(&attr("version").eq(version))).await;
        }
        *guard = Cached::default();
    }

    /// Stores `event` in its visitor's session: finds the session ([`Pipeline::session_slot`]),
    /// then, holding it, claims its next slot where other processes ingest, appends the event to
    /// a block, and hands its deltas to aggregation ([`Pipeline::store_in`]).
    async fn store(
        &self,
        site: &Site,
        event: &Event,
        enrichment: &Enrichment,
        visitors: &[VisitorId],
    ) -> Result<(), PipelineError> {
        let ts = event.timestamp_ms;
        self.newest_ts.fetch_max(ts, Ordering::Relaxed);
        let (visitor, slot) = self.session_slot(site, visitors, ts).await?;
        let mut guard = slot.lock().await;
        if guard.live.as_ref().is_some_and(|l| l.written.as_ref().is_some_and(|w| w.is_failed())) {
            // The session's latest event failed and its task has not forgotten the session yet.
            self.forget(&mut guard).await;
        }
        if self.is_alone() {
            if let Holder::Other(run) = guard.holder.clone() {
                // Read from an item naming a run that held the session: its memory had the newer
                // events, until its run is recovered (which writes them to the item) or it
                // stopped. A dead run is recovered at this process's first heartbeat.
                if !matches!(self.holder_state(&run).await?, HolderState::Gone) {
                    return Err(PipelineError::Holder(format!("run {run} held the session and is not recovered yet")));
                }
                *guard = self.load_session(&site.site_id, visitor, ts).await?;
                guard.holder = Holder::None;
            }
            return self.store_alone(guard, &slot, site, &Source::Local(event, enrichment), visitor).await;
        }
        match self.store_held(guard, &slot, site, &Source::Local(event, enrichment), visitor).await? {
            Handed::Stored => Ok(()),
            // Only a handed-over event is refused for want of holding its session.
            Handed::NotHolder => Err(PipelineError::Contended(MAX_SLOT_ATTEMPTS)),
        }
    }

    /// Stores an event while other processes may ingest: appended without a claim to a session
    /// this process holds, handed to the process holding it ([`Pipeline::set_handover`]), or
    /// stored by a claim of the session's next slot (which makes this process its holder when
    /// it may hold sessions), tried again while other processes move the session on. A
    /// handed-over event is never handed on: [`Handed::NotHolder`] tells its sender to look
    /// again.
    async fn store_held(
        &self,
        mut guard: tokio::sync::MutexGuard<'_, Cached>,
        slot: &Slot,
        site: &Site,
        source: &Source<'_>,
        visitor: VisitorId,
    ) -> Result<Handed, PipelineError> {
        let ts = source.ts();
        for _ in 0..MAX_SLOT_ATTEMPTS {
            match guard.holder.clone() {
                Holder::Me if self.holding() && now_ms() - guard.held_at_ms < HOLD_RENEW_MS => {
                    if !self.aggregator.beat_is_fresh() {
                        return Err(PipelineError::NotLive);
                    }
                    self.store_alone(guard, slot, site, source, visitor).await?;
                    return Ok(Handed::Stored);
                }
                // Held long enough that its item should be renewed, or this process is letting
                // its sessions go: claimed again below (its item is as this process left it).
                Holder::Me => {}
                Holder::Other(run) => match self.holder_state(&run).await? {
                    HolderState::Live { address, token } => {
                        let Source::Local(event, enrichment) = source else { return Ok(Handed::NotHolder) };
                        let Some(peering) = self.peering.get() else {
                            return Err(PipelineError::Holder(format!(
                                "run {run} holds it, and nothing hands events over"
                            )));
                        };
                        drop(guard);
                        let candidate = self.build_event(None, site, event, enrichment, visitor, Arc::from(""), 0);
                        let payload =
                            crate::block::encode(&candidate.site_id, candidate.day, std::slice::from_ref(&candidate))
                                .map_err(EventStoreError::from)?;
                        match peering.handover.hand(&address, &token, payload).await {
                            Ok(Handed::Stored) => {
                                self.counters.handed_over.fetch_add(1, Ordering::Relaxed);
                                return Ok(Handed::Stored);
                            }
                            Ok(Handed::NotHolder) => {
                                guard = slot.lock().await;
                                *guard = self.load_session(&site.site_id, visitor, ts).await?;
                                continue;
                            }
                            Err(e) => {
                                // It may have stopped meanwhile, leaving the session to its item.
                                self.aggregator.refresh_runs().await?;
                                if !matches!(self.holder_state(&run).await?, HolderState::Gone) {
                                    return Err(PipelineError::Holder(format!("run {run} at {address}: {e}")));
                                }
                                guard = slot.lock().await;
                                *guard = self.load_session(&site.site_id, visitor, ts).await?;
                                continue;
                            }
                        }
                    }
                    // Stopped or recovered: its sessions are in their visitors' items.
                    HolderState::Gone => guard.holder = Holder::None,
                    HolderState::Unsettled => {
                        return Err(PipelineError::Holder(format!(
                            "run {run} stopped beating and is not recovered yet"
                        )));
                    }
                },
                Holder::None => {}
            }
            match self.store_in(&mut guard, site, source, visitor).await? {
                Stored::Done => return Ok(Handed::Stored),
                Stored::Moved => continue,
            }
        }
        Err(PipelineError::Contended(MAX_SLOT_ATTEMPTS))
    }

    /// Whether run `run`, named as a session's holder, takes events now: as the last heartbeat
    /// read the runs, and read again (at most once a second) when that does not say. A run is
    /// taken for gone when its item is missing only from a reading made well after it began (its
    /// id is a ULID, so it tells when): a reading older than that may simply predate it.
    async fn holder_state(&self, run: &str) -> Result<HolderState, PipelineError> {
        let dead_after = self.aggregator.dead_after_ms();
        let began =
            ulid::Ulid::from_string(run).map_or(i64::MAX, |u| i64::try_from(u.timestamp_ms()).unwrap_or(i64::MAX));
        let (mut at, mut runs) = self.aggregator.runs(i64::MAX).await?;
        for again in [true, false] {
            let state = match runs.iter().find(|r| *r.run_id == *run) {
                // Its item is gone: it finished long ago.
                None if at > began.saturating_add(CLOCK_MARGIN_MS) => HolderState::Gone,
                None => HolderState::Unsettled,
                Some(r) if r.state == "done" || r.state == "recovered" || r.released => HolderState::Gone,
                Some(r) if r.state == "live" && now_ms() - r.heartbeat_ms <= dead_after => {
                    match (&r.address, &r.token) {
                        (Some(address), Some(token)) => {
                            HolderState::Live { address: address.clone(), token: token.clone() }
                        }
                        _ => HolderState::Unsettled,
                    }
                }
                Some(_) => HolderState::Unsettled,
            };
            if !again || !matches!(state, HolderState::Unsettled) {
                return Ok(state);
            }
            (at, runs) = self.aggregator.runs(1_000).await?;
            // A reading that misses the run, or shows it live without an address, may predate
            // it or its advertising: a run named as a holder had advertised before it claimed.
            let predates = match runs.iter().find(|r| *r.run_id == *run) {
                None => at <= began.saturating_add(CLOCK_MARGIN_MS),
                Some(r) => r.state == "live" && (r.address.is_none() || r.token.is_none()),
            };
            if predates {
                (at, runs) = self.aggregator.refresh_runs().await?;
            }
        }
        Ok(HolderState::Unsettled)
    }

    /// Stores an event another process handed over ([`Handover`]): `token` must be the one this
    /// process advertised, and `payload` one event as [`crate::block::encode`] writes it.
    pub async fn take_over(&self, token: &str, payload: &[u8]) -> Result<Handed, PipelineError> {
        let mine = self.peering.get().and_then(|p| p.token.as_deref());
        if !mine.is_some_and(|mine| constant_time_eq(mine.as_bytes(), token.as_bytes())) {
            return Err(PipelineError::WrongToken);
        }
        let mut events = crate::block::decode_events(payload).map_err(|e| PipelineError::Handover(e.to_string()))?;
        let (Some(candidate), true) = (events.pop(), events.is_empty()) else {
            return Err(PipelineError::Handover("not one event".into()));
        };
        let Some(site) = self.sites.get_shared(candidate.site_id.as_str()).await? else {
            return Err(PipelineError::Handover(format!("no site {}", candidate.site_id)));
        };
        let ts = candidate.ts;
        self.newest_ts.fetch_max(ts, Ordering::Relaxed);
        self.wait_for_room().await;
        let slot = self.slot(&site.site_id, candidate.visitor_id);
        let mut guard = slot.lock().await;
        if guard.live.as_ref().is_some_and(|l| l.written.as_ref().is_some_and(|w| w.is_failed())) {
            self.forget(&mut guard).await;
        }
        if guard.holder != Holder::Me && !self.is_alone() {
            // What this process cached of a session it does not hold may be stale.
            *guard = self.load_session(&site.site_id, candidate.visitor_id, ts).await?;
        }
        let source = Source::HandedOver(&candidate);
        let outcome = if self.is_alone() {
            self.store_alone(guard, &slot, &site, &source, candidate.visitor_id).await.map(|()| Handed::Stored)
        } else {
            self.store_held(guard, &slot, &site, &source, candidate.visitor_id).await
        };
        if matches!(outcome, Ok(Handed::Stored)) {
            self.counters.taken_over.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }

    /// Which of the visitor's ids (today's salt, or yesterday's for a visit that began under it)
    /// the event continues, and that session's slot: a live session in memory first, else the
    /// table's (older salt first), else a new visit under today's id.
    async fn session_slot(&self, site: &Site, ids: &[VisitorId], ts: i64) -> Result<(VisitorId, Slot), PipelineError> {
        self.wait_for_room().await;
        for &id in ids.iter().rev().skip(usize::from(ids.len() < 2)).chain(ids.first()) {
            let slot = self.slot(&site.site_id, id);
            let guard = slot.lock().await;
            let live = guard.live.as_ref().is_some_and(|l| l.live_at(ts));
            drop(guard);
            if live {
                return Ok((id, slot));
            }
        }
        // Nothing live in memory: ask the table, older salt first; a new visit takes today's id.
        let mut found: Option<(VisitorId, Cached)> = None;
        for &id in ids.iter().rev() {
            let packed = lock(&self.cold.sessions).get(&site.site_id, id);
            let cached = if let Some((last, head_version)) = packed {
                self.counters.packed_found.fetch_add(1, Ordering::Relaxed);
                let live = Some(Live { last: Arc::new(last), written: None }).filter(|l| l.live_at(ts));
                Cached { live, head_version, just_read: true, holder: Holder::None, held_at_ms: 0 }
            } else if self.must_look_up(&site.site_id, id, ts) {
                self.load_session(&site.site_id, id, ts).await?
            } else {
                Cached::default()
            };
            if cached.live.is_some() || id == ids[0] {
                let live = cached.live.is_some();
                found = Some((id, cached));
                if live {
                    break;
                }
            }
        }
        let (id, cached) = found.unwrap_or_else(|| (ids[0], Cached::default()));
        let slot = self.slot(&site.site_id, id);
        let mut guard = slot.lock().await;
        // Another task of this process may have filled the slot meanwhile: keep its.
        if guard.live.is_none() {
            *guard = cached;
        }
        drop(guard);
        Ok((id, slot))
    }

    /// Alone (or holding the session), stores the event in the session `guard` holds without
    /// holding it while the block is
    /// written: the event is queued, the session moves on in memory at once, and the session is
    /// let go, so its next event can be prepared (and usually join the same block) meanwhile.
    /// Should the block fail, every later event of the session queued meanwhile fails with it
    /// (the writer sees to that, [`crate::event_store::Written`]), and the session is forgotten.
    async fn store_alone(
        &self,
        mut guard: tokio::sync::MutexGuard<'_, Cached>,
        slot: &Slot,
        site: &Site,
        source: &Source<'_>,
        visitor: VisitorId,
    ) -> Result<(), PipelineError> {
        let (stored, ticket) = self.next_event(&guard, site, source, visitor).await?;
        let after = guard.live.as_ref().and_then(|l| l.written.clone());
        let mine = (stored.session_id, stored.seq);
        let stored = Arc::new(stored);
        let queued = self.writer.queue(stored.clone(), after);
        let (head_version, holder, held_at_ms) = (guard.head_version, guard.holder.clone(), guard.held_at_ms);
        let written = Some(queued.written());
        *guard =
            Cached { live: Some(Live { last: stored, written }), head_version, just_read: false, holder, held_at_ms };
        drop(guard);
        match queued.done().await {
            Ok(stored) => {
                ticket.commit(&stored);
                Ok(())
            }
            Err(e) => {
                drop(ticket);
                // Forget the session unless a later event moved it on (that one fails too, and
                // forgets it then).
                let mut guard = slot.lock().await;
                if guard.live.as_ref().is_some_and(|l| (l.last.session_id, l.last.seq) == mine) {
                    self.forget(&mut guard).await;
                }
                Err(e.into())
            }
        }
    }

    /// The event `source` makes in the session `guard` holds (continuing it, or a new one), with
    /// its aggregation ticket; its partition is registered first.
    async fn next_event(
        &self,
        guard: &Cached,
        site: &Site,
        source: &Source<'_>,
        visitor: VisitorId,
    ) -> Result<(StoredEvent, crate::aggregate::Ticket), PipelineError> {
        let ts = source.ts();
        let live = guard.live.as_ref().filter(|l| l.live_at(ts));
        let day = match (live, source) {
            (Some(l), _) => l.last.day,
            (None, Source::Local(..)) => UtcDay::from_unix_ms(ts),
            (None, Source::HandedOver(e)) => e.day,
        };
        self.aggregator.register_partition(&site.site_id, day).await?;
        let ticket = self.aggregator.begin();
        let stored = match source {
            Source::Local(event, enrichment) => {
                self.build_event(live, site, event, enrichment, visitor, ticket.run(), ticket.epoch())
            }
            Source::HandedOver(e) => {
                let mut stored = (*e).clone();
                if let Some(l) = live {
                    (stored.day, stored.session_id, stored.seq) = (l.last.day, l.last.session_id, l.last.seq + 1);
                    (stored.visit, stored.prev) = (l.last.visit.clone(), l.last.next());
                }
                stored.visitor_id = visitor;
                (stored.run, stored.epoch) = (ticket.run(), ticket.epoch());
                stored
            }
        };
        debug_assert_eq!(stored.day, day);
        Ok((stored, ticket))
    }

    /// The event `event` makes continuing `live`, or starting a new session, stored by `run` in
    /// `epoch`.
    #[allow(clippy::too_many_arguments)]
    fn build_event(
        &self,
        live: Option<&Live>,
        site: &Site,
        event: &Event,
        enrichment: &Enrichment,
        visitor: VisitorId,
        run: Arc<str>,
        epoch: u64,
    ) -> StoredEvent {
        let ts = event.timestamp_ms;
        // The session this event continues, or a new one.
        let fresh;
        let (day, visitor_id, session_id, seq, visit, prev) = match live {
            Some(l) => (l.last.day, l.last.visitor_id, l.last.session_id, l.last.seq + 1, &l.last.visit, l.last.next()),
            None => {
                fresh = new_session(ts, event, enrichment);
                (fresh.day, visitor, fresh.session_id, 0, &fresh.visit, PrevState::default())
            }
        };
        StoredEvent {
            site_id: site.site_id.clone(),
            day,
            visitor_id,
            session_id,
            seq,
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
            visit: visit.clone(),
            prev,
            run,
            epoch,
            // A day more than the retention: a range of the last N days starts N days ago at
            // midnight in site time, so its first morning is still there to be read.
            ttl: now_ms() / 1000 + (i64::from(site.retention_event_days) + 1) * 86_400,
        }
    }

    /// One attempt at storing `event` in the session `guard` holds while other processes ingest:
    /// [`Stored::Moved`] when another process moved the session on (it has been read back; try
    /// again).
    async fn store_in(
        &self,
        guard: &mut Cached,
        site: &Site,
        source: &Source<'_>,
        visitor: VisitorId,
    ) -> Result<Stored, PipelineError> {
        let ts = source.ts();
        // A session this process cached: read the visitor's item first when cached sessions
        // have often been stale lately (`claims`).
        let cached = guard.head_version.is_some() && !guard.just_read;
        let mut read_first = false;
        if cached && self.claims.read_first() {
            read_first = true;
            let current = self.load_session(&site.site_id, visitor, ts).await?;
            let stale = current.head_version != guard.head_version;
            self.claims.record(stale);
            self.count_claim(stale, true);
            if stale {
                *guard = current;
            }
        }
        let (stored, ticket) = self.next_event(guard, site, source, visitor).await?;
        let mut head_version = guard.head_version;
        // Where sessions may be held, the claim makes this process the holder when it may be.
        let hold = self.holding();
        {
            // Claim the session's next slot: the visitor's item must be as this process
            // last saw it.
            let version = head_version.unwrap_or(0) + 1;
            let condition = match head_version {
                Some(v) => attr("version").eq(v),
                None => attr("pk").not_exists(),
            };
            let me = hold.then(|| self.aggregator.run_id());
            match self
                .table
                .write("VisitorSession", head_item_for(&stored, version, me)?, model::PutMode::Put, Some(&condition))
                .await
            {
                Ok(()) => {
                    head_version = Some(version);
                    if hold {
                        self.counters.held_claims.fetch_add(1, Ordering::Relaxed);
                    }
                    if cached && !read_first {
                        self.claims.record(false);
                        self.count_claim(false, false);
                    }
                }
                Err(e) if e.is_condition_failed() => {
                    // Another process moved the session on: read it back and try again.
                    if cached && !read_first {
                        self.claims.record(true);
                        self.count_claim(true, false);
                    }
                    self.counters.refused_claims.fetch_add(u64::from(cached), Ordering::Relaxed);
                    drop(ticket);
                    *guard = self.load_session(&site.site_id, stored.visitor_id, ts).await?;
                    return Ok(Stored::Moved);
                }
                Err(e) => {
                    drop(ticket);
                    *guard = Cached::default();
                    return Err(e.into());
                }
            }
        }
        // The session's previous event may still be on its way (queued while alone).
        let after = guard.live.as_ref().and_then(|l| l.written.clone());
        let stored = match self.writer.queue(Arc::new(stored), after).done().await {
            Ok(stored) => stored,
            Err(e) => {
                // Not stored: give the slot back (the item still names our claim, so a later
                // event reads it back and continues from the state before this event).
                drop(ticket);
                if head_version != guard.head_version
                    && let Some(previous) = guard.live.as_ref()
                {
                    let condition = attr("version").eq(head_version.unwrap_or(0));
                    let next = head_version.unwrap_or(0) + 1;
                    if let Ok(item) = head_item_for(&previous.last, next, None) {
                        let _ = self.table.write("VisitorSession", item, model::PutMode::Put, Some(&condition)).await;
                    }
                }
                *guard = Cached::default();
                return Err(e.into());
            }
        };
        ticket.commit(&stored);
        let (holder, held_at_ms) = if hold { (Holder::Me, now_ms()) } else { (Holder::None, 0) };
        *guard = Cached {
            live: Some(Live { last: stored, written: None }),
            head_version,
            just_read: false,
            holder,
            held_at_ms,
        };
        Ok(Stored::Done)
    }
}

/// The `VisitorSession` item holding `last` (as a one-event block) at `version`, naming the run
/// that holds the session, if one does. Kept two hours: a session ends 30 minutes after its
/// latest event.
pub(crate) fn head_item_for(
    last: &StoredEvent,
    version: i64,
    holder: Option<&str>,
) -> Result<store::Item, EventStoreError> {
    let bytes = crate::block::encode(&last.site_id, last.day, std::slice::from_ref(last))?;
    let mut item = item! {
        "site_id" => last.site_id.as_str(),
        "visitor_id" => last.visitor_id.to_string(),
        "last" => bytes,
        "version" => version,
        "ttl" => (now_ms() + if holder.is_some() { HELD_TTL_MS } else { 2 * 3_600_000 }) / 1000,
    };
    if let Some(run) = holder {
        item.insert("holder".into(), store::AttributeValue::from(run));
    }
    Ok(item)
}

/// Whether two byte strings are equal, in a time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the run holding a session takes events now.
enum HolderState {
    /// It is live, and reached at `address` with `token`.
    Live { address: String, token: String },
    /// It stopped or was recovered: its sessions are in their visitors' items.
    Gone,
    /// It stopped beating and is not recovered yet (or never said where it is reached).
    Unsettled,
}

/// The sessions to drop from a full cache: idle ones, and if most are live, the older half.
/// `now` is the events' clock (the newest event's time, at most the wall's): a session is idle
/// when no event of the traffic as it arrives could continue it.
fn eviction_candidates(sessions: &Sessions, now: i64, limit: usize) -> Vec<SessionKey> {
    let cutoff = now - SESSION_TIMEOUT_MS;
    // A session whose event is in flight is passed by; one with no live visit always goes.
    let mut chosen = Vec::new();
    let mut timed: Vec<(&SessionKey, i64)> = Vec::new();
    for (key, slot) in sessions {
        match slot.try_lock().ok().map(|c| c.live.as_ref().map(Live::last_ts)) {
            None => {}
            Some(None) => chosen.push(key.clone()),
            Some(Some(ts)) => timed.push((key, ts)),
        }
    }
    if timed.iter().filter(|&&(_, ts)| ts >= cutoff).count() >= limit * 3 / 4 {
        // Mostly live: the older half, counted rather than cut at the median time, so sessions
        // whose latest events share one millisecond cannot all stay (the cache would never
        // make room).
        let half = timed.len() / 2;
        if half > 0 {
            timed.select_nth_unstable_by_key(half, |&(_, ts)| ts);
        }
        timed.truncate(half);
    } else {
        timed.retain(|&(_, ts)| ts < cutoff);
    }
    chosen.extend(timed.into_iter().map(|(key, _)| key.clone()));
    chosen
}

/// How many sessions leaving memory are written at a time: each chunk's items are built, written
/// and released before the next, so eviction holds a few hundred items and locks, not half the
/// cache's (about 25 MB at once under sustained load, measured with heaptrack). Writing four
/// chunks at once was tried: the server's peak memory rose by 6–10 MB (BENCHMARKS.md,
/// "fifteenth session").
const EVICT_CHUNK: usize = 250;

/// Lets the chosen sessions go, a chunk at a time: alone, the live ones (at `horizon`) are packed
/// in memory ([`cold`]) while there is room; otherwise their items are written, each session
/// held until its item is, and the visitors whose items were written are remembered in
/// `remembered` (as [`visitor_hash`]es). Each leaves the cache (telling `room`) once packed or
/// written. A chunk whose write fails stays in memory, and so does every later one. Returns how
/// many items it wrote and how many sessions it packed.
async fn evict(
    table: &Table,
    map: &Mutex<Sessions>,
    chosen: Vec<(SessionKey, Slot)>,
    horizon: i64,
    writer: &Evictor,
    remembered: &Mutex<hashbrown::HashSet<u64>>,
    room: &tokio::sync::Notify,
) -> (u64, u64) {
    let (mut written, mut packed) = (0, 0);
    let mut chosen = chosen.into_iter().peekable();
    while chosen.peek().is_some() {
        let chunk: Vec<_> = chosen.by_ref().take(EVICT_CHUNK).collect();
        let Some((w, p)) = evict_chunk(table, map, chunk, horizon, writer, remembered).await else { break };
        (written, packed) = (written + w, packed + p);
        room.notify_waiters();
    }
    (written, packed)
}

/// Which sessions leaving memory are written, and how.
enum Evictor {
    /// Alone: every live one, packed in memory while there is room, else written naming no
    /// holder.
    Alone(Cold),
    /// Shared: those this run holds, naming it.
    Holder(Arc<str>),
}

/// Writes the `VisitorSession` items of sessions taken out of [`cold`] (naming no holder, each
/// at its version plus one), then remembers their visitors in `remembered`. Returns how many.
async fn write_unpacked(
    table: &Table,
    sessions: &[cold::Unpacked],
    remembered: &Mutex<hashbrown::HashSet<u64>>,
) -> Result<usize, PipelineError> {
    for chunk in sessions.chunks(EVICT_CHUNK) {
        let mut writes = Vec::with_capacity(chunk.len());
        for (_, last, version) in chunk {
            writes.push(model::BatchWrite::put("VisitorSession", head_item_for(last, version.unwrap_or(0) + 1, None)?));
        }
        table.batch_write(writes).await?;
        let mut set = lock(remembered);
        for ((site_id, visitor), _, _) in chunk {
            set.insert(visitor_hash(site_id, *visitor));
        }
    }
    Ok(sessions.len())
}

/// Alone, packs `live` (sessions of `held`, by position, with their latest event times) in
/// memory, first writing the oldest packed sessions to the table while the packed bytes are
/// over their bound. Returns the items written, and whether `live` was packed (not when
/// packing is closed, or a write failed).
async fn pack(
    table: &Table,
    cold: &Cold,
    live: &[(cold::Packed, i64)],
    horizon: i64,
    remembered: &Mutex<hashbrown::HashSet<u64>>,
) -> (u64, bool) {
    let mut written = 0;
    loop {
        let max = cold.max_bytes.load(Ordering::Relaxed);
        if max == 0 {
            return (written, false);
        }
        let oldest = lock(&cold.sessions).oldest_over(max, horizon);
        let Some((number, sessions)) = oldest else { break };
        if let Err(e) = write_unpacked(table, &sessions, remembered).await {
            tracing::warn!(error = %e, "writing packed sessions failed; the sessions leaving memory stay in it");
            return (written, false);
        }
        written += sessions.len() as u64;
        lock(&cold.sessions).drop_chunk(number);
    }
    let Some(chunk) = cold::ColdSessions::encode(live) else { return (written, false) };
    (written, lock(&cold.sessions).pack(chunk))
}

/// One chunk of [`evict`]: how many items it wrote and sessions it packed, `None` when its write
/// failed (the sessions stay in memory).
async fn evict_chunk(
    table: &Table,
    map: &Mutex<Sessions>,
    chosen: Vec<(SessionKey, Slot)>,
    horizon: i64,
    writer: &Evictor,
    remembered: &Mutex<hashbrown::HashSet<u64>>,
) -> Option<(u64, u64)> {
    let mut held = Vec::with_capacity(chosen.len());
    let mut writes = Vec::new();
    // Alone, the live sessions to pack, and their positions in `held`.
    let mut live_alone: Vec<(cold::Packed, i64)> = Vec::new();
    let mut live_at: Vec<usize> = Vec::new();
    for (key, slot) in chosen {
        let Ok(guard) = slot.clone().try_lock_owned() else { continue };
        if guard.live.as_ref().is_some_and(|l| l.written.as_ref().is_some_and(|w| !w.is_stored())) {
            // Its latest event is still being written (or failed, and its task forgets it).
            continue;
        }
        // Shared, only the sessions this process holds are written: the table has the others.
        let holder = match writer {
            Evictor::Alone(_) => {
                if let Some(live) = guard.live.as_ref().filter(|l| l.last_ts() >= horizon) {
                    live_at.push(held.len());
                    live_alone.push(((key.clone(), live.last.clone(), guard.head_version), live.last_ts()));
                    held.push((key, slot, guard, Evicted::Packed));
                    continue;
                }
                None
            }
            Evictor::Holder(me) if guard.holder == Holder::Me => Some(&**me),
            Evictor::Holder(_) => {
                held.push((key, slot, guard, Evicted::Dropped));
                continue;
            }
        };
        let evicted = match guard.live.as_ref().filter(|l| l.last_ts() >= horizon) {
            Some(live) => match queue_head_write(&mut writes, live, guard.head_version, holder) {
                Evicted::Kept => continue,
                evicted => evicted,
            },
            None => Evicted::Dropped,
        };
        held.push((key, slot, guard, evicted));
    }
    let mut written = 0;
    let mut packed = 0;
    if let Evictor::Alone(cold) = writer
        && !live_alone.is_empty()
    {
        let (spilled, done) = pack(table, cold, &live_alone, horizon, remembered).await;
        written += spilled;
        if done {
            packed = live_alone.len() as u64;
        } else {
            // Not packed: written as before.
            for &i in &live_at {
                let (_, _, guard, evicted) = &mut held[i];
                let Some(live) = guard.live.as_ref() else { continue };
                *evicted = queue_head_write(&mut writes, live, guard.head_version, None);
            }
        }
    }
    written += writes.len() as u64;
    if !writes.is_empty()
        && let Err(e) = table.batch_write(writes).await
    {
        tracing::warn!(error = %e, "writing sessions leaving memory failed; they stay in memory");
        return None;
    }
    // Shared, every item written names this process the holder.
    let holder_written = matches!(writer, Evictor::Holder(_));
    let mut sessions = lock(map);
    for (key, slot, mut guard, evicted) in held {
        if let Evicted::Kept = evicted {
            continue;
        }
        if let Evicted::Written(version) = evicted {
            guard.head_version = Some(version);
            if holder_written {
                guard.held_at_ms = now_ms();
            }
            // Remembered before it leaves the cache: a visitor is never missing from both, so
            // their next event is looked up (when they were remembered only after every chunk,
            // an event in between started a new visit).
            lock(remembered).insert(visitor_hash(&key.0, key.1));
        }
        drop(guard);
        if sessions.get(&key).is_some_and(|s| Arc::ptr_eq(s, &slot)) && Arc::strong_count(&slot) <= 2 {
            sessions.remove(&key);
        } else if let (Evicted::Packed, Evictor::Alone(cold)) = (evicted, writer) {
            // An event waits on the session, which stays: its packed place is not its latest.
            lock(&cold.sessions).mark_taken(&key.0, key.1);
            continue;
        }
        if let (Evicted::Written(_) | Evicted::Dropped, Evictor::Alone(cold)) = (evicted, writer) {
            // Whatever was packed of it before it came back is older.
            lock(&cold.sessions).forget(&key.0, key.1);
        }
    }
    Some((written, packed))
}

/// Queues the write of a session's `VisitorSession` item at its version plus one, naming
/// `holder`: [`Evicted::Written`] at that version, or [`Evicted::Kept`] when the item cannot be
/// built (the session then stays in memory).
fn queue_head_write(
    writes: &mut Vec<model::BatchWrite>,
    live: &Live,
    head_version: Option<i64>,
    holder: Option<&str>,
) -> Evicted {
    let version = head_version.unwrap_or(0) + 1;
    match head_item_for(&live.last, version, holder) {
        Ok(item) => {
            writes.push(model::BatchWrite::put("VisitorSession", item));
            Evicted::Written(version)
        }
        Err(_) => Evicted::Kept,
    }
}

/// What became of a session chosen to leave memory.
#[derive(Debug, Clone, Copy)]
enum Evicted {
    /// Packed in memory ([`cold`]).
    Packed,
    /// Its item written at this version.
    Written(i64),
    /// Let go unwritten: not live, or shared and not held here.
    Dropped,
    /// Kept in memory (its item could not be built).
    Kept,
}

/// A cached session's key: its site (shared with the site's other sessions and events, not
/// copied) and visitor.
type SessionKey = (SiteId, VisitorId);

type Sessions = hashbrown::HashMap<SessionKey, Slot>;

/// A [`SessionKey`] borrowed, for looking a session up without allocating: it hashes and
/// compares as the owned key does.
#[derive(Hash)]
struct SessionKeyRef<'a>(&'a str, VisitorId);

impl hashbrown::Equivalent<SessionKey> for SessionKeyRef<'_> {
    fn equivalent(&self, key: &SessionKey) -> bool {
        self.0 == key.0.as_str() && self.1 == key.1
    }
}

/// A visitor of a site as 64 bits, for remembering many in little memory (8 bytes each rather
/// than two strings).
fn visitor_hash(site_id: &str, visitor: VisitorId) -> u64 {
    use std::hash::Hasher;
    // Fixed keys: the same visitor hashes the same for the life of the process.
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0x7461_6c6c_7900_0001, 0x6576_6963_7465_6400);
    h.write(site_id.as_bytes());
    h.write_u8(0xff);
    h.write_u64(visitor.as_u64());
    h.finish()
}

/// Shrinks a full session cache: sessions idle at `now` go first; if most are still live, the
/// older half of them too. A slot in use (locked) stays, since its task holds it.
fn make_room(sessions: &mut Sessions, now: i64, limit: usize) {
    let cutoff = now - SESSION_TIMEOUT_MS;
    let last_ts = |slot: &Slot| slot.try_lock().map(|c| c.live.as_ref().map(Live::last_ts)).ok();
    sessions.retain(|_, slot| last_ts(slot).is_none_or(|ts| ts.is_some_and(|ts| ts >= cutoff)));
    if sessions.len() >= limit * 3 / 4 {
        let mut times: Vec<i64> = sessions.values().filter_map(|s| last_ts(s).flatten()).collect();
        let middle = times.len() / 2;
        if middle > 0 {
            let (_, median, _) = times.select_nth_unstable(middle);
            let median = *median;
            sessions.retain(|_, slot| last_ts(slot).is_none_or(|ts| ts.is_some_and(|ts| ts > median)));
        }
    }
}

/// An optional text, empty when absent.
fn text(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}

fn new_session(ts: i64, event: &Event, e: &Enrichment) -> NewSession {
    let utm = &event.query.utm;
    let millis = u64::try_from(ts).unwrap_or(0);
    NewSession {
        day: UtcDay::from_unix_ms(ts),
        session_id: ulid::Ulid::from_parts(millis, rand::random()),
        visit: Arc::new(VisitAttrs::new(
            ts,
            &Visit {
                entry_page: event.pathname.as_str(),
                source: text(&e.source),
                referrer: text(&e.referrer),
                utm_source: text(&utm.source),
                utm_medium: text(&utm.medium),
                utm_campaign: text(&utm.campaign),
                utm_content: text(&utm.content),
                utm_term: text(&utm.term),
                country: e.country.as_ref().map(|c| c.as_str()).unwrap_or_default(),
                device: e.client.device.as_str(),
                browser: &e.client.browser.name,
                browser_version: text(&e.client.browser.version),
                os: &e.client.os.name,
                os_version: text(&e.client.os.version),
                region: text(&e.region),
                city: text(&e.city),
                screen: event.screen_width.map(crate::enrich::screen_class).unwrap_or_default(),
                language: text(&event.language),
            },
        )),
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
