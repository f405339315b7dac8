//! Exactly-once aggregation: acknowledged events become aggregate items, counted once, whatever
//! crashes, retries or concurrent processes happen (see `crates/analytics/DESIGN.md`, "Exactly
//! once").
//!
//! An [`Aggregator`] is one process's **run**: a ULID registered as a `Run` item with a heartbeat,
//! the `(site, day)` partitions it writes events to and the last epoch it flushed. Ingestion takes
//! a [`Ticket`] in the current **epoch** before writing an event (the event carries the run and the
//! epoch), and commits the stored event to the ticket once the write is durable, or drops the
//! ticket when it definitely failed. Every `flush_interval` the current epoch is closed (new tickets
//! go to the next one), the flush waits until every ticket of the closed epoch is settled, and
//! writes each touched aggregate item once with `flushes[run] = epoch` and `version + 1` under the
//! condition that the version is the one read: an item that already has this epoch is skipped, so
//! a flush retried after a failure never counts twice.
//!
//! A run that dies (heartbeat older than `dead_after`, or its pid gone on this host) is claimed by
//! a live one, which reads the dead run's unflushed events back from the partitions it listed and
//! applies them with the dead run's id and epochs ([`recovery`]). `rebuild` recomputes a site's
//! aggregates from its raw events and compares or replaces them.
//!
//! ```no_run
//! # async fn demo(table: model::Table, sites: std::sync::Arc<dyn analytics::aggregate::SiteSettingsSource>,
//! #               event: analytics::stored::StoredEvent) -> Result<(), analytics::aggregate::AggregateError> {
//! use analytics::aggregate::{Aggregator, AggregatorConfig};
//!
//! let aggregator = Aggregator::start(table, sites, AggregatorConfig::default()).await?;
//! aggregator.register_partition(&event.site_id, event.day).await?;
//! let ticket = aggregator.begin();
//! // … write the event with `run = ticket.run()` and `epoch = ticket.epoch()` …
//! ticket.commit(&event);
//! aggregator.shutdown().await?;
//! # Ok(()) }
//! ```

mod apply;
mod codec;
mod deltas;
pub mod rebuild;
pub mod recovery;
pub mod session_log;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use store::sync::{lock, read, write};

use async_trait::async_trait;
use model::Table;
use model::expr::{Update, attr};
use store::{AttributeValue, item};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub(crate) use self::codec::StoredAggregate;
pub use self::codec::{event_from_record, event_item};
pub use self::deltas::{Delta, bucket_label, deltas, for_each_delta, for_each_delta_of_periods, period_keeps};
pub use self::rebuild::{Difference, RebuildMode, RebuildRange, RebuildReport, rebuild};

use self::apply::ItemCache;
pub use self::apply::{Accumulated, Accumulator, Pending, Visitors};
use crate::period::{PeriodError, SiteZone};
use crate::sketch::SketchError;
use crate::stored::StoredEvent;
use crate::visitor::UtcDay;

/// What went wrong while aggregating, recovering or rebuilding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AggregateError {
    /// The table refused or failed an operation.
    #[error("aggregate storage: {0}")]
    Model(#[from] model::Error),
    /// An instant or date outside the supported range, or a bad zone.
    #[error(transparent)]
    Period(#[from] PeriodError),
    /// A stored visitor sketch could not be read.
    #[error("stored visitor sketch: {0}")]
    Sketch(#[from] SketchError),
    /// A stored item does not have the shape Tally writes.
    #[error("cannot read a stored {what}: {reason}")]
    Decode {
        /// The entity.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The site settings could not be loaded.
    #[error("site settings: {0}")]
    Sites(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An aggregate item kept changing under optimistic writes; the flush is retried later.
    #[error("aggregate item {key} kept changing after {attempts} attempts")]
    Contended {
        /// The item, as `site/period/dimension/bucket/value`.
        key: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The aggregator was shut down.
    #[error("the aggregator is shut down")]
    Stopped,
    /// Event blocks could not be read.
    #[error("event blocks: {0}")]
    Events(String),
}

impl AggregateError {
    /// Whether this failure of one item can never go away by trying again: the request was
    /// refused by validation (a key or item too large, a malformed value), or a stored item does
    /// not read back. A flush logs and counts such an item and goes on without it; any other
    /// failure is taken as transient and the epoch is flushed again later.
    pub fn is_permanent(&self) -> bool {
        match self {
            AggregateError::Model(e) => e.is_validation(),
            AggregateError::Decode { .. } | AggregateError::Sketch(_) => true,
            _ => false,
        }
    }

    /// Whether trying again later may succeed: a transient storage failure or a contended item.
    pub fn is_retryable(&self) -> bool {
        match self {
            AggregateError::Model(e) => e.is_retryable(),
            AggregateError::Contended { .. } => true,
            AggregateError::Events(_) => true,
            _ => false,
        }
    }

    /// Wraps an error of a [`SiteSettingsSource`].
    pub fn sites(e: impl std::error::Error + Send + Sync + 'static) -> AggregateError {
        AggregateError::Sites(Box::new(e))
    }
}

/// What aggregation needs to know of a site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteSettings {
    /// The site's time zone: hour, day, week and month buckets are in site time.
    pub zone: SiteZone,
    /// Days raw events are kept.
    pub retention_event_days: u32,
    /// Days hourly aggregates are kept.
    pub retention_hourly_days: u32,
    /// Days daily aggregates are kept.
    pub retention_daily_days: u32,
    /// From which instant the site's weekly aggregates are complete ([`crate::sites::Site::weeks_from_ms`]).
    pub weeks_from_ms: i64,
}

impl SiteSettings {
    /// The settings of a site that is no longer known: UTC and the default retention, so its
    /// events are still counted (and a rebuild counts them the same way).
    pub fn fallback() -> SiteSettings {
        SiteSettings {
            zone: SiteZone::utc(),
            retention_event_days: 730,
            retention_hourly_days: 90,
            retention_daily_days: 730,
            weeks_from_ms: 0,
        }
    }
}

/// Where site settings come from (the `sites` module, cached; a map in tests).
#[async_trait]
pub trait SiteSettingsSource: Send + Sync + 'static {
    /// The settings of `site_id`, or `None` when there is no such site.
    async fn site_settings(&self, site_id: &str) -> Result<Option<SiteSettings>, AggregateError>;
}

/// How an [`Aggregator`] runs.
#[derive(Debug, Clone)]
pub struct AggregatorConfig {
    /// How often the current epoch is closed and flushed: dashboards lag ingestion by about
    /// this plus one flush. 3 s by default, which keeps that lag well under the spec's 10 s
    /// (`tally bench` prints the largest it saw) while an item is rewritten at most every 3 s.
    pub flush_interval: Duration,
    /// How often the run's heartbeat is written (and dead runs looked for).
    pub heartbeat_interval: Duration,
    /// How old a heartbeat must be for its run to count as dead.
    pub dead_after: Duration,
    /// This machine's name, to tell a dead local pid from a live remote one.
    pub host: String,
    /// This process's id.
    pub pid: u32,
    /// Aggregate writes in flight at once during a flush. 128: a flush's time is most of the
    /// dashboards' lag, and on the embedded engine more writes in flight share each journal
    /// sync (200 k bench events, 3 s flushes: largest lag 9.5–11.3 s at 32, 7.0–7.1 s at 128).
    pub write_concurrency: usize,
    /// Attempts per aggregate item when other runs write it at the same time.
    pub max_attempts: u32,
    /// Aggregate items whose version and sketch are kept in memory between flushes, at most.
    pub cache_items: usize,
    /// The memory those cached items may hold, about, in bytes.
    pub cache_bytes: usize,
    /// How old an event may be (by its own time, against the clock when it is committed) and
    /// still be counted in minute buckets. Realtime reads the last half hour and minute items
    /// expire two hours after their last write, so older events (a backfill, a replayed batch)
    /// would only write items nobody reads.
    pub minute_items_for: Duration,
    /// Whether the periodic flush may leave an epoch's week and month items to the next flush
    /// (they then hold two epochs' deltas, written once). They are the sums of the days, their
    /// busy items hold dense sketches (about 8 KB, nine write units a rewrite), and under load
    /// they were as many write units as the days: writing them every other flush halves that.
    /// They lag the days by one flush at most; a flush with no newer epoch writes them alone, and
    /// [`Aggregator::flush_now`] and shutdown write everything.
    pub defer_weeks_and_months: bool,
    /// How far behind ingestion deferred weeks and months may fall, by the flush's own estimate:
    /// an epoch defers them only while its oldest event's age, plus the time until the next flush
    /// ends (the last interval between flushes and the last flush's length), stays within it.
    /// 8 s, under the spec's 10 s: when a slow disk or a busy machine lengthens the flushes,
    /// epochs stop deferring and the lag is what it was without.
    pub weeks_and_months_lag: Duration,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        AggregatorConfig {
            flush_interval: Duration::from_secs(3),
            heartbeat_interval: Duration::from_secs(5),
            dead_after: Duration::from_secs(30),
            host,
            pid: std::process::id(),
            write_concurrency: 128,
            max_attempts: 16,
            cache_items: 200_000,
            cache_bytes: 32 * 1024 * 1024,
            minute_items_for: Duration::from_secs(3600),
            defer_weeks_and_months: true,
            weeks_and_months_lag: Duration::from_secs(8),
        }
    }
}

/// A snapshot of an aggregator's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AggregatorStats {
    /// The epoch new tickets go to.
    pub current_epoch: u64,
    /// Committed events not yet flushed, or whose week and month deltas wait for the next flush.
    pub pending_events: u64,
    /// Tickets taken and not yet settled.
    pub open_tickets: u64,
    /// Age of the oldest committed event not yet flushed, its weeks and months included,
    /// milliseconds (0 when none).
    pub flush_lag_ms: u64,
    /// Epochs flushed since start.
    pub epochs_flushed: u64,
    /// Aggregate items written since start.
    pub items_written: u64,
    /// Aggregate items skipped because they already had the epoch.
    pub items_skipped: u64,
    /// Optimistic write conflicts (another run wrote the item first) retried.
    pub conflicts: u64,
    /// Items missing from the cache, created without a read, that the table refused because
    /// they existed: each was read and written again.
    pub wrong_guesses: u64,
    /// Flushes that failed (and will be retried).
    pub flush_errors: u64,
    /// Aggregate (or session log) items a flush could not write and will not retry, because
    /// the failure was permanent ([`AggregateError::is_permanent`]); each is logged with its key.
    pub flush_item_errors: u64,
    /// Write units consumed by the last successful flush (aggregate items and the run item).
    pub last_flush_write_units: f64,
    /// Read units consumed by the last successful flush: zero in a steady state where no other
    /// process writes the same items, since every touched item's version and sketch are cached.
    pub last_flush_read_units: f64,
    /// Write units consumed by every flush since start.
    pub flush_write_units: f64,
    /// Read units consumed by every flush since start.
    pub flush_read_units: f64,
    /// Dead runs this aggregator recovered.
    pub runs_recovered: u64,
    /// The last epoch whose flush is recorded in the run's item (recovery reads only later ones).
    pub flushed_epoch: u64,
}

/// One epoch's accumulator and its open tickets.
#[derive(Default)]
struct EpochSlot {
    open: u64,
    closed: bool,
    /// The epoch's deltas, in a few accumulators so that events committed at once on several
    /// threads are summed side by side; merged when the epoch is frozen.
    shards: Arc<Shards>,
    /// Committed events of sites whose zone was not cached yet; folded in before the flush.
    unzoned: Vec<StoredEvent>,
    /// The accumulator, frozen once the epoch is closed and settled; dropped once flushed.
    frozen: Option<Arc<Accumulated>>,
    /// Decided when frozen: its flush leaves the week and month items to the next one.
    defers: bool,
    events: u64,
    oldest_ms: Option<i64>,
}

/// How many accumulators an epoch spreads its commits over: more than the threads that commit.
const SHARDS: usize = 4;

/// An epoch's accumulators ([`EpochSlot::shards`]).
#[derive(Default)]
struct Shards([Mutex<Accumulator>; SHARDS]);

impl Shards {
    /// The first accumulator no other thread holds (or the first, waited for, if all are held).
    fn lock_one(&self) -> std::sync::MutexGuard<'_, Accumulator> {
        for shard in &self.0 {
            match shard.try_lock() {
                Ok(guard) => return guard,
                // A poisoned accumulator is used as it is, as `lock` uses every lock.
                Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
        }
        lock(&self.0[0])
    }

    /// Everything the accumulators hold, in one, leaving them empty.
    fn take(&self) -> Accumulator {
        let mut all = Accumulator::default();
        for shard in &self.0 {
            all.absorb(std::mem::take(&mut *lock(shard)));
        }
        all
    }
}

/// What one flush hands the next: the cached items, and week and month deltas left unwritten.
#[derive(Default)]
struct FlushState {
    cache: ItemCache,
    carried: Option<Carried>,
    /// When the last flush began, and how long it took: how long deferred items would wait.
    last_start: Option<std::time::Instant>,
    last_took: Duration,
}

/// The week and month items of a flushed epoch whose flush left them unwritten
/// ([`AggregatorConfig::defer_weeks_and_months`]).
///
/// Invariant: they hold exactly the week and month deltas of epoch `epoch` (and of no other), and
/// the run's `flushed_epoch` is below `epoch` until they are written, so recovery reads that
/// epoch's events again should the process die: its other items carry the epoch in their
/// `flushes` mark and are skipped, these get it once. They are written either inside the next
/// epoch (added to its accumulator before it is frozen, so under that epoch's mark), or alone
/// under `epoch`; once a write alone was tried, only alone, and before any later epoch, since a
/// later epoch's mark on one of these items would make the retry skip it.
struct Carried {
    items: Accumulated,
    epoch: u64,
    events: u64,
    oldest_ms: Option<i64>,
    tried_alone: bool,
}

#[derive(Default)]
struct Epochs {
    current: u64,
    slots: BTreeMap<u64, EpochSlot>,
}

#[derive(Default)]
struct Counts {
    epochs_flushed: u64,
    items_written: u64,
    items_skipped: u64,
    conflicts: u64,
    wrong_guesses: u64,
    flush_errors: u64,
    flush_item_errors: u64,
    last_flush_write_units: f64,
    last_flush_read_units: f64,
    flush_write_units: f64,
    flush_read_units: f64,
    runs_recovered: u64,
    flushed_epoch: u64,
    /// The events and the oldest commit time of the deltas carried to the next flush.
    carried_events: u64,
    carried_oldest_ms: Option<i64>,
}

pub(crate) struct Shared {
    table: Table,
    sites: Arc<dyn SiteSettingsSource>,
    config: AggregatorConfig,
    run_id: Arc<str>,
    epochs: Mutex<Epochs>,
    settled: Notify,
    settings: RwLock<hashbrown::HashMap<String, SiteSettings>>,
    partitions: Mutex<hashbrown::HashMap<String, hashbrown::HashSet<UtcDay>>>,
    /// Held for the whole of a flush: the flushes of one run are strictly sequential.
    flush: tokio::sync::Mutex<FlushState>,
    /// Runs whose `Run` item says `done` or `recovered`: their `flushes` entries can go.
    finished: RwLock<BTreeSet<String>>,
    counts: Mutex<Counts>,
    stopped: AtomicBool,
    /// Every run as the last heartbeat (or [`Aggregator::refresh_runs`]) read them, and when.
    runs: RwLock<(i64, Arc<Vec<recovery::RunInfo>>)>,
    /// How often cached aggregate items were stale at their writes: other runs write the same
    /// items, so past a point each flush reads its items first rather than have its writes
    /// refused ([`crate::stale`]).
    stale: crate::stale::StaleRate,
    /// How often aggregate items missing from the cache were in the table, per period: while
    /// seldom, a flush creates such items (minutes' and hours') without reading them
    /// first ([`crate::stale`]).
    absent: [crate::stale::StaleRate; crate::stored::Period::ALL.len()],
    /// When the last heartbeat that the table accepted began (wall clock, ms): while it is
    /// recent, no other process can have taken this run for dead.
    beat_ok_ms: std::sync::atomic::AtomicI64,
}

/// One process's aggregation run. Share it as `Arc<Aggregator>`.
pub struct Aggregator {
    shared: Arc<Shared>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").field("run_id", &self.shared.run_id).finish_non_exhaustive()
    }
}

/// A slot in an epoch, taken before an event is written. [`Ticket::commit`] hands the stored
/// event's deltas in; dropping the ticket without committing says the write failed.
pub struct Ticket {
    shared: Arc<Shared>,
    epoch: u64,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket").field("run_id", &self.shared.run_id).field("epoch", &self.epoch).finish()
    }
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// The oldest event time (ms) counted in minute buckets now.
fn minutes_from(config: &AggregatorConfig) -> i64 {
    let window = i64::try_from(config.minute_items_for.as_millis()).unwrap_or(i64::MAX);
    now_ms().saturating_sub(window)
}

/// The `Run` item's encoding of a `(site, day)` partition. Site ids are ULIDs and days
/// `YYYY-MM-DD`, so neither holds a space.
pub(crate) fn partition_text(site_id: &str, day: UtcDay) -> String {
    format!("{site_id} {day}")
}

/// The inverse of [`partition_text`].
pub(crate) fn parse_partition(text: &str) -> Option<(&str, UtcDay)> {
    let (site, day) = text.rsplit_once(' ')?;
    Some((site, UtcDay::parse(day)?))
}

/// Seconds a finished run's item is kept (for the record, and so `flushes` entries can be
/// dropped), before the table's TTL removes it.
const FINISHED_RUN_TTL_S: i64 = 7 * 86_400;

impl Ticket {
    /// The epoch the event must be written with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The run the event must be written with, shared by every event of the run.
    pub fn run(&self) -> Arc<str> {
        self.shared.run_id.clone()
    }

    /// Hands in the event as stored: its deltas join this ticket's epoch.
    pub fn commit(self, event: &StoredEvent) {
        let zone = read(&self.shared.settings).get(event.site_id.as_str()).map(|s| s.zone.clone());
        let minutes_from = minutes_from(&self.shared.config);
        let shards = {
            let mut epochs = lock(&self.shared.epochs);
            let Some(slot) = epochs.slots.get_mut(&self.epoch) else { return };
            if zone.is_none() {
                slot.unzoned.push(event.clone());
            }
            slot.events += 1;
            slot.oldest_ms.get_or_insert_with(now_ms);
            slot.shards.clone()
        };
        // The deltas go straight into one of the epoch's maps under its own lock: looking a key
        // up there allocates nothing, where collecting them apart first and merging costs twice
        // as much. The epochs' lock is not held meanwhile, so other threads begin, commit and
        // settle their tickets alongside. The ticket is still open, so the epoch is not frozen
        // before this is in.
        let mut acc = shards.lock_one();
        if let Some(zone) = &zone {
            apply::accumulate_from(&mut acc, event, zone, minutes_from);
        }
        acc.note_session(event);
        // Drop settles the slot, after `acc` and `shards` are gone.
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(slot) = lock(&self.shared.epochs).slots.get_mut(&self.epoch) {
            slot.open = slot.open.saturating_sub(1);
        }
        self.shared.settled.notify_waiters();
    }
}

impl Aggregator {
    /// Registers a new run on `table` and starts its flush and heartbeat tasks (on the current
    /// tokio runtime). Dead runs are looked for at once and on every heartbeat.
    pub async fn start(
        table: Table,
        sites: Arc<dyn SiteSettingsSource>,
        config: AggregatorConfig,
    ) -> Result<Arc<Aggregator>, AggregateError> {
        let started_ms = now_ms();
        let record = table
            .create(
                "Run",
                item! {
                    "host" => config.host.as_str(),
                    "pid" => config.pid,
                    "heartbeat_ms" => started_ms,
                    "flushed_epoch" => 0,
                    "state" => "live",
                },
            )
            .await?;
        let run_id = Arc::from(record.string("run_id")?);
        let shared = Arc::new(Shared {
            table,
            sites,
            config,
            run_id,
            epochs: Mutex::new(Epochs { current: 1, slots: BTreeMap::new() }),
            settled: Notify::new(),
            settings: RwLock::default(),
            partitions: Mutex::default(),
            flush: tokio::sync::Mutex::new(FlushState::default()),
            finished: RwLock::default(),
            counts: Mutex::default(),
            stopped: AtomicBool::new(false),
            runs: RwLock::new((0, Arc::default())),
            stale: crate::stale::StaleRate::default(),
            absent: Default::default(),
            beat_ok_ms: std::sync::atomic::AtomicI64::new(started_ms),
        });
        let (stop, _) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(flush_task(Arc::downgrade(&shared), stop.subscribe())),
            tokio::spawn(heartbeat_task(Arc::downgrade(&shared), stop.subscribe())),
        ];
        Ok(Arc::new(Aggregator { shared, tasks: Mutex::new(tasks), stop }))
    }

    /// This run's id.
    pub fn run_id(&self) -> &str {
        &self.shared.run_id
    }

    /// Records in this run's item the address other processes reach this one at, and a token
    /// they must present there (returned): what forwarding a visitor's event to the process
    /// holding their session needs ([`crate::pipeline`], "Sessions held by one process").
    pub async fn advertise(&self, address: &str) -> Result<String, AggregateError> {
        let mut secret = [0u8; 24];
        rand::fill(&mut secret);
        let token: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        self.shared
            .table
            .update_with(
                "Run",
                item! { "run_id" => &*self.shared.run_id },
                Update::new().set("address", address).set("token", token.as_str()),
                Some(&attr("state").eq("live")),
                false,
            )
            .await?;
        self.refresh_runs().await?;
        Ok(token)
    }

    /// Records that this run holds no session any more (it wrote those it held to their items):
    /// the others then claim its visitors' sessions rather than hand it their events.
    pub async fn mark_released(&self) -> Result<(), AggregateError> {
        self.shared
            .table
            .update("Run", item! { "run_id" => &*self.shared.run_id }, Update::new().set("released", true))
            .await?;
        Ok(())
    }

    /// Every run as last read, read again if that was more than `max_age_ms` ago, with when
    /// it was read (wall clock, ms).
    pub async fn runs(&self, max_age_ms: i64) -> Result<(i64, Arc<Vec<recovery::RunInfo>>), AggregateError> {
        let (at, runs) = read(&self.shared.runs).clone();
        if now_ms() - at <= max_age_ms {
            return Ok((at, runs));
        }
        self.refresh_runs().await
    }

    /// Reads every run again.
    pub async fn refresh_runs(&self) -> Result<(i64, Arc<Vec<recovery::RunInfo>>), AggregateError> {
        let at = now_ms();
        let runs = Arc::new(recovery::list_runs(&self.shared.table).await?);
        let mut kept = write(&self.shared.runs);
        if kept.0 < at {
            *kept = (at, runs.clone());
        }
        Ok((at, runs))
    }

    /// Whether this run's heartbeat is recent enough that no other process can take it for
    /// dead before an event begun now is stored: the last accepted beat began less than half
    /// of `dead_after` ago. A process may append to the sessions it holds only while it is.
    pub fn beat_is_fresh(&self) -> bool {
        let half = i64::try_from(self.shared.config.dead_after.as_millis() / 2).unwrap_or(i64::MAX);
        now_ms() - self.shared.beat_ok_ms.load(Ordering::SeqCst) < half
    }

    /// How long a run's heartbeat may be old before it counts as dead, in ms.
    pub fn dead_after_ms(&self) -> i64 {
        i64::try_from(self.shared.config.dead_after.as_millis()).unwrap_or(i64::MAX)
    }

    /// Takes a slot in the current epoch, before writing an event. Tickets taken after
    /// [`Aggregator::shutdown`] are never flushed; the run's events stay findable for a rebuild.
    pub fn begin(&self) -> Ticket {
        let epoch = {
            let mut epochs = lock(&self.shared.epochs);
            let epoch = epochs.current;
            epochs.slots.entry(epoch).or_default().open += 1;
            epoch
        };
        Ticket { shared: self.shared.clone(), epoch }
    }

    /// Records durably that this run writes events to `(site_id, day)`, before its first write
    /// there, so recovery can find them; cached after. Also loads the site's settings.
    pub async fn register_partition(&self, site_id: &str, day: UtcDay) -> Result<(), AggregateError> {
        if self.shared.stopped.load(Ordering::SeqCst) {
            return Err(AggregateError::Stopped);
        }
        if lock(&self.shared.partitions).get(site_id).is_some_and(|days| days.contains(&day)) {
            return Ok(());
        }
        let partition = AttributeValue::Ss(BTreeSet::from([partition_text(site_id, day)]));
        self.shared
            .table
            .update("Run", item! { "run_id" => &*self.shared.run_id }, Update::new().add("partitions", partition))
            .await?;
        lock(&self.shared.partitions).entry(site_id.to_owned()).or_default().insert(day);
        self.shared.settings_of(BTreeSet::from([site_id.to_owned()])).await?;
        Ok(())
    }

    /// Closes the current epoch (if it has tickets) and flushes every closed epoch, oldest first.
    /// Fails with [`AggregateError::Stopped`] after [`Aggregator::shutdown`] or `abort`.
    pub async fn flush_now(&self) -> Result<(), AggregateError> {
        if self.shared.stopped.load(Ordering::SeqCst) {
            return Err(AggregateError::Stopped);
        }
        self.shared.flush_now(false).await
    }

    /// The flush the flush task runs every `flush_interval`: [`Aggregator::flush_now`], except
    /// that the last epoch's week and month items may be left to the next flush
    /// ([`AggregatorConfig::defer_weeks_and_months`]). For tests.
    #[doc(hidden)]
    pub async fn flush_tick(&self) -> Result<(), AggregateError> {
        if self.shared.stopped.load(Ordering::SeqCst) {
            return Err(AggregateError::Stopped);
        }
        self.shared.flush_now(self.shared.config.defer_weeks_and_months).await
    }

    /// Stops the tasks, flushes what is left, and marks the run `done`. If the final flush fails
    /// the run stays `live` without a heartbeat, so another process recovers its events once it
    /// counts as dead. A second call (or one after `abort`) does nothing.
    pub async fn shutdown(&self) -> Result<(), AggregateError> {
        if self.shared.stopped.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        for task in tasks {
            let _ = task.await;
        }
        self.shared.flush_now(false).await?;
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared
            .table
            .update(
                "Run",
                item! { "run_id" => &*self.shared.run_id },
                Update::new()
                    .set("state", "done")
                    .set("heartbeat_ms", now_ms())
                    .set("ttl", now_ms() / 1000 + FINISHED_RUN_TTL_S),
            )
            .await?;
        Ok(())
    }

    /// Stops the tasks without flushing or marking the run, as if the process were killed; the
    /// run's unflushed events are left to recovery. For tests.
    #[doc(hidden)]
    pub fn abort(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        lock(&self.tasks).iter().for_each(JoinHandle::abort);
    }

    /// Looks for dead runs now and recovers them; returns how many. (The heartbeat task does this
    /// on its own; tests call it to avoid waiting.)
    #[doc(hidden)]
    pub async fn recover_now(&self) -> Result<u64, AggregateError> {
        recovery::recover_dead_runs(&self.shared).await
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AggregatorStats {
        let mut stats = AggregatorStats::default();
        {
            let epochs = lock(&self.shared.epochs);
            stats.current_epoch = epochs.current;
            let now = now_ms();
            for slot in epochs.slots.values() {
                stats.pending_events += slot.events;
                stats.open_tickets += slot.open;
                if let Some(t) = slot.oldest_ms {
                    stats.flush_lag_ms = stats.flush_lag_ms.max((now - t).max(0) as u64);
                }
            }
        }
        {
            let c = lock(&self.shared.counts);
            stats.epochs_flushed = c.epochs_flushed;
            stats.items_written = c.items_written;
            stats.items_skipped = c.items_skipped;
            stats.conflicts = c.conflicts;
            stats.wrong_guesses = c.wrong_guesses;
            stats.flush_errors = c.flush_errors;
            stats.flush_item_errors = c.flush_item_errors;
            stats.last_flush_write_units = c.last_flush_write_units;
            stats.last_flush_read_units = c.last_flush_read_units;
            stats.flush_write_units = c.flush_write_units;
            stats.flush_read_units = c.flush_read_units;
            stats.runs_recovered = c.runs_recovered;
            stats.flushed_epoch = c.flushed_epoch;
            // Events whose week and month deltas wait for the next flush are not flushed yet.
            stats.pending_events += c.carried_events;
            if let Some(t) = c.carried_oldest_ms {
                stats.flush_lag_ms = stats.flush_lag_ms.max((now_ms() - t).max(0) as u64);
            }
        }
        stats
    }
}

impl Drop for Aggregator {
    fn drop(&mut self) {
        // Tasks hold only a weak reference and stop on their own; stopping them here makes it prompt.
        let _ = self.stop.send(true);
    }
}

impl Shared {
    /// The settings of these sites, from the cache or the source (unknown sites get
    /// [`SiteSettings::fallback`]).
    async fn settings_of(&self, sites: BTreeSet<String>) -> Result<HashMap<String, SiteSettings>, AggregateError> {
        let mut out = HashMap::new();
        for site in sites {
            let cached = read(&self.settings).get(&site).cloned();
            let settings = match cached {
                Some(s) => s,
                None => {
                    let s = self.sites.site_settings(&site).await?.unwrap_or_else(SiteSettings::fallback);
                    write(&self.settings).insert(site.clone(), s.clone());
                    s
                }
            };
            out.insert(site, settings);
        }
        Ok(out)
    }

    /// Waits until every ticket of `epoch` is settled.
    async fn settle(&self, epoch: u64) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let open = lock(&self.epochs).slots.get(&epoch).map_or(0, |s| s.open);
            if open == 0 {
                return;
            }
            // A ticket settled between the check and the wait still wakes us: `enable` came first.
            // The timeout is a guard only: a settled ticket always notifies.
            let _ = tokio::time::timeout(Duration::from_millis(250), notified).await;
        }
    }

    /// Freezes the accumulator of a closed, settled epoch (folding in events whose zone was not
    /// cached at commit, and the week and month deltas `carried` from the flush before). The
    /// frozen accumulator stays in its slot until the epoch is flushed, so a failed or abandoned
    /// flush loses nothing. Returns it and whether its flush leaves weeks and months to the next
    /// (decided once: `defer`, unless it took carried deltas, which wait one flush at most).
    async fn freeze(
        &self,
        epoch: u64,
        defer: Option<Duration>,
        carried: &mut Option<Carried>,
    ) -> Result<Option<(Arc<Accumulated>, bool)>, AggregateError> {
        let unzoned_sites: BTreeSet<String> = match lock(&self.epochs).slots.get(&epoch) {
            Some(slot) if slot.frozen.is_some() => return Ok(slot.frozen.clone().map(|f| (f, slot.defers))),
            Some(slot) => slot.unzoned.iter().map(|e| e.site_id.to_string()).collect(),
            None => return Ok(None),
        };
        let settings = self.settings_of(unzoned_sites).await?;
        let (shards, unzoned) = {
            let mut epochs = lock(&self.epochs);
            let Some(slot) = epochs.slots.get_mut(&epoch) else { return Ok(None) };
            (slot.shards.clone(), std::mem::take(&mut slot.unzoned))
        };
        // The epoch is settled: no ticket of it commits any more, so its accumulators are merged
        // and finished without holding up the tickets of the next one. Nothing below awaits, and
        // flushes run one at a time, so the result reaches the slot before anything else looks.
        let mut acc = shards.take();
        for event in unzoned {
            let zone = settings.get(event.site_id.as_str()).map_or_else(SiteZone::utc, |s| s.zone.clone());
            apply::accumulate_from(&mut acc, &event, &zone, minutes_from(&self.config));
        }
        // Deltas carried from the flush before join this epoch and are written under its mark
        // (never those whose write alone was tried: `Carried`).
        let taken = carried.take_if(|c| !c.tried_alone);
        let defers = taken.is_none() && carried.is_none() && defer.is_some_and(|wait| self.may_defer(epoch, wait));
        let (carried_events, carried_oldest) = match taken {
            Some(c) => {
                self.count_carried(0, None);
                acc.absorb(c.items.into_accumulator());
                (c.events, c.oldest_ms)
            }
            None => (0, None),
        };
        let frozen = Arc::new(acc.finish());
        let mut epochs = lock(&self.epochs);
        let Some(slot) = epochs.slots.get_mut(&epoch) else { return Ok(None) };
        slot.frozen = Some(frozen.clone());
        slot.defers = defers;
        slot.events += carried_events;
        slot.oldest_ms = slot.oldest_ms.into_iter().chain(carried_oldest).min();
        Ok(Some((frozen, defers)))
    }

    /// Records what is carried to the next flush, for [`Aggregator::stats`].
    fn count_carried(&self, events: u64, oldest_ms: Option<i64>) {
        let mut counts = lock(&self.counts);
        counts.carried_events = events;
        counts.carried_oldest_ms = oldest_ms;
    }

    /// Whether epoch `epoch` may leave its weeks and months to a flush that ends `wait` from now:
    /// only if its oldest event would then still be within `weeks_and_months_lag`.
    fn may_defer(&self, epoch: u64, wait: Duration) -> bool {
        let oldest = lock(&self.epochs).slots.get(&epoch).and_then(|s| s.oldest_ms);
        let age = Duration::from_millis(oldest.map_or(0, |t| u64::try_from(now_ms() - t).unwrap_or(0)));
        age + wait <= self.config.weeks_and_months_lag
    }

    /// Closes the current epoch and flushes every closed one, oldest first. With `defer`, the
    /// last epoch's week and month items may be left to the next flush (see
    /// [`AggregatorConfig::weeks_and_months_lag`]); without, nothing is left.
    async fn flush_now(&self, defer: bool) -> Result<(), AggregateError> {
        let mut state = self.flush.lock().await;
        let started = std::time::Instant::now();
        // Deferred items would wait about one more interval and one more flush like the last.
        let wait = state.last_start.map_or(Duration::ZERO, |t| started - t) + state.last_took;
        state.last_start = Some(started);
        let defer = defer.then_some(wait);
        {
            let mut epochs = lock(&self.epochs);
            let current = epochs.current;
            if epochs.slots.get(&current).is_some_and(|s| s.open > 0 || s.events > 0) {
                if let Some(slot) = epochs.slots.get_mut(&current) {
                    slot.closed = true;
                }
                epochs.current += 1;
            }
        }
        // Carried items whose write alone failed go first, before a later epoch touches them.
        if state.carried.as_ref().is_some_and(|c| c.tried_alone) {
            self.flush_carried(&mut state).await?;
        }
        let mut deferred_now = false;
        loop {
            let next = lock(&self.epochs).slots.iter().find(|(_, s)| s.closed).map(|(k, _)| *k);
            let Some(epoch) = next else { break };
            match self.flush_epoch(epoch, defer, &mut state).await {
                Ok(()) => {
                    let slot = lock(&self.epochs).slots.remove(&epoch);
                    if let Some(slot) = slot
                        && slot.defers
                        && let Some(frozen) = slot.frozen
                    {
                        let items = Accumulated::weeks_and_months(frozen);
                        // Nothing else was carried: an epoch defers only when nothing waited.
                        debug_assert!(state.carried.is_none());
                        self.count_carried(slot.events, slot.oldest_ms);
                        state.carried = Some(Carried {
                            items,
                            epoch,
                            events: slot.events,
                            oldest_ms: slot.oldest_ms,
                            tried_alone: false,
                        });
                        deferred_now = true;
                    }
                }
                Err(e) => {
                    {
                        let mut c = lock(&self.counts);
                        c.flush_errors += 1;
                    }
                    // Never swallowed: the epoch is kept and retried, and the cause is logged.
                    tracing::warn!(run = %self.run_id, epoch, error = %e, "flushing an epoch failed; it will be retried");
                    return Err(e);
                }
            }
        }
        // Carried items wait one flush at most: with no later epoch to take them, they go alone.
        if state.carried.is_some() && !(defer.is_some() && deferred_now) {
            self.flush_carried(&mut state).await?;
        }
        state.last_took = started.elapsed();
        Ok(())
    }

    async fn flush_epoch(
        &self,
        epoch: u64,
        defer: Option<Duration>,
        state: &mut FlushState,
    ) -> Result<(), AggregateError> {
        self.settle(epoch).await;
        let Some((acc, defers)) = self.freeze(epoch, defer, &mut state.carried).await? else { return Ok(()) };
        self.write_items(&acc, epoch, defers, &mut state.cache).await?;
        lock(&self.counts).epochs_flushed += 1;
        Ok(())
    }

    /// Writes carried week and month items alone, under the epoch they hold. On failure they
    /// stay carried, to be written alone again before anything later.
    async fn flush_carried(&self, state: &mut FlushState) -> Result<(), AggregateError> {
        let Some(mut carried) = state.carried.take() else { return Ok(()) };
        carried.tried_alone = true;
        match self.write_items(&carried.items, carried.epoch, false, &mut state.cache).await {
            Ok(()) => {
                self.count_carried(0, None);
                Ok(())
            }
            Err(e) => {
                lock(&self.counts).flush_errors += 1;
                tracing::warn!(run = %self.run_id, epoch = carried.epoch, error = %e,
                    "writing an epoch's weeks and months failed; they will be retried");
                state.carried = Some(carried);
                Err(e)
            }
        }
    }

    /// Writes an epoch's items under its mark (leaving weeks and months out when `defers`) and,
    /// when nothing of it or before it is left unwritten, records the epoch as the run's flushed.
    async fn write_items(
        &self,
        acc: &Accumulated,
        epoch: u64,
        defers: bool,
        cache: &mut ItemCache,
    ) -> Result<(), AggregateError> {
        let table = self.table.metered();
        let settings = self.settings_of(acc.keys().map(|k| k.site_id.to_owned()).collect()).await?;
        let finished = read(&self.finished).clone();
        let writer = apply::Writer {
            table: &table,
            run_id: &self.run_id,
            epoch,
            settings: &settings,
            finished: &finished,
            concurrency: self.config.write_concurrency,
            max_attempts: self.config.max_attempts,
            leave_weeks_and_months: defers,
            stale: Some(&self.stale),
            absent: Some(&self.absent),
        };
        let outcome = writer.apply(acc, cache).await;
        {
            let mut c = lock(&self.counts);
            c.items_written += outcome.written;
            c.items_skipped += outcome.skipped;
            c.conflicts += outcome.conflicts;
            c.wrong_guesses += outcome.wrong_guesses;
            c.flush_item_errors += outcome.item_errors;
        }
        outcome.result?;
        cache.trim(epoch, self.config.cache_items, self.config.cache_bytes);
        // Recovery reads the epochs after `flushed_epoch` again: an epoch whose weeks and months
        // wait is not recorded, so a crash before they are written loses none of them.
        if !defers {
            table
                .update(
                    "Run",
                    item! { "run_id" => &*self.run_id },
                    Update::new().set("flushed_epoch", epoch).set("heartbeat_ms", now_ms()),
                )
                .await?;
        }
        let units = table.capacity();
        {
            let mut c = lock(&self.counts);
            if !defers {
                c.flushed_epoch = c.flushed_epoch.max(epoch);
            }
            c.last_flush_write_units = units.write_units;
            c.last_flush_read_units = units.read_units;
            c.flush_write_units += units.write_units;
            c.flush_read_units += units.read_units;
        }
        Ok(())
    }

    /// Writes the heartbeat, refreshes the set of finished runs and the cached site settings.
    async fn heartbeat(&self) -> Result<(), AggregateError> {
        // A run another process has claimed (it looked dead) fails this condition; the rest of the
        // beat still runs, and the error is returned at the end.
        let began = now_ms();
        let beat = self
            .table
            .update_with(
                "Run",
                item! { "run_id" => &*self.run_id },
                Update::new().set("heartbeat_ms", now_ms()),
                Some(&attr("state").eq("live")),
                false,
            )
            .await;
        if beat.is_ok() {
            self.beat_ok_ms.fetch_max(began, Ordering::SeqCst);
        }
        let read_at = now_ms();
        let runs = recovery::list_runs(&self.table).await?;
        *write(&self.runs) = (read_at, Arc::new(runs.clone()));
        let finished: BTreeSet<String> =
            runs.iter().filter(|r| r.state == "done" || r.state == "recovered").map(|r| r.run_id.clone()).collect();
        *write(&self.finished) = finished;
        // Settings change rarely (a zone edit, a retention change); reloading them here keeps the
        // cache fresh without a lookup per event.
        let sites: Vec<String> = read(&self.settings).keys().cloned().collect();
        for site in sites {
            if let Some(s) = self.sites.site_settings(&site).await? {
                write(&self.settings).insert(site, s);
            }
        }
        beat.map(|_| ()).map_err(AggregateError::from)
    }
}

impl Shared {
    /// One heartbeat and a look for dead runs. Errors here are transient storage errors: they
    /// are logged, and the next beat tries again.
    async fn beat(&self) {
        if let Err(e) = self.heartbeat().await {
            tracing::warn!(run = %self.run_id, error = %e, "the run's heartbeat failed; retried on the next beat");
        }
        // What it recovers reads so at once in this process's reading of the runs (the recovery
        // marks it there), so a session its run held is continued without another reading.
        if let Err(e) = recovery::recover_dead_runs(self).await {
            tracing::warn!(run = %self.run_id, error = %e, "recovering dead runs failed; retried on the next beat")
        }
    }
}

async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => !*stop.borrow(),
        _ = stop.changed() => false,
    }
}

async fn flush_task(shared: Weak<Shared>, mut stop: watch::Receiver<bool>) {
    let interval = match shared.upgrade() {
        Some(s) => s.config.flush_interval,
        None => return,
    };
    while sleep_or_stop(interval, &mut stop).await {
        let Some(shared) = shared.upgrade() else { return };
        // A failed flush keeps its epoch and is retried on the next tick; `flush_now` has
        // logged and counted it.
        let _ = shared.flush_now(shared.config.defer_weeks_and_months).await;
    }
}

async fn heartbeat_task(shared: Weak<Shared>, mut stop: watch::Receiver<bool>) {
    // The first beat runs at once: it loads the set of finished runs (whose flush marks the
    // flushes drop) and recovers runs that died while no process was watching.
    let interval = match shared.upgrade() {
        Some(s) => {
            s.beat().await;
            s.config.heartbeat_interval
        }
        None => return,
    };
    while sleep_or_stop(interval, &mut stop).await {
        let Some(shared) = shared.upgrade() else { return };
        shared.beat().await;
    }
}
