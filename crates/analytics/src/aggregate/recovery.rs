//! Crash recovery: a dead run's unflushed events, counted once by a live run.
//!
//! A run is dead when its heartbeat is older than `dead_after`, or when it ran on this host and
//! its pid is gone. A live run claims it with a conditional update (`state` and `heartbeat_ms` as
//! read, so two claimers cannot both win and a run that was only slow keeps itself), reads the
//! events it wrote with `epoch > flushed_epoch` from the partitions it listed, and applies them
//! epoch by epoch **with the dead run's id and epochs**. Items an interrupted flush already reached
//! carry `flushes[dead run] >= epoch` and are skipped; the rest get the epoch once. The dead run's
//! `flushed_epoch` advances after each epoch, so a claimer that dies in turn leaves a run (in state
//! `recovering`) that the next claimer resumes where it stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use store::sync::lock;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt, TryStreamExt};
use model::expr::{Update, attr};
use model::{Record, Table};
use store::item;

use super::apply::{self, Accumulator, ItemCache};
use super::{AggregateError, FINISHED_RUN_TTL_S, Shared, now_ms, parse_partition};
use crate::stored::StoredEvent;
use crate::visitor::UtcDay;

/// A `Run` item as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The run's id (a ULID), as the events it ingested carry it in `run`.
    pub run_id: String,
    /// The host it ran on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its last heartbeat, epoch milliseconds.
    pub heartbeat_ms: i64,
    /// The last epoch it (or its recoverer) flushed completely.
    pub flushed_epoch: u64,
    /// `(site, day)` partitions it wrote events to.
    pub partitions: BTreeSet<(String, UtcDay)>,
    /// `live`, `recovering`, `recovered` or `done`.
    pub state: String,
    /// The run that claimed it, if any.
    pub recovered_by: Option<String>,
    /// Where other processes reach it to hand it a visitor's event, if it takes them
    /// ([`super::Aggregator::advertise`]).
    pub address: Option<String>,
    /// What they must present there.
    pub token: Option<String>,
    /// Whether it gave up the sessions it held (it is stopping): their items say the rest.
    pub released: bool,
}

impl RunInfo {
    fn from_record(r: &Record) -> Result<RunInfo, AggregateError> {
        let partitions = match r.get("partitions") {
            Some(_) => r
                .string_set("partitions")?
                .iter()
                .filter_map(|p| parse_partition(p).map(|(s, d)| (s.to_owned(), d)))
                .collect(),
            None => BTreeSet::new(),
        };
        Ok(RunInfo {
            run_id: r.string("run_id")?.to_owned(),
            host: r.opt_string("host")?.unwrap_or_default().to_owned(),
            pid: u32::try_from(r.opt_i64("pid")?.unwrap_or(0)).unwrap_or(0),
            heartbeat_ms: r.opt_i64("heartbeat_ms")?.unwrap_or(0),
            flushed_epoch: u64::try_from(r.opt_i64("flushed_epoch")?.unwrap_or(0)).unwrap_or(0),
            partitions,
            state: r.opt_string("state")?.unwrap_or("live").to_owned(),
            recovered_by: r.opt_string("recovered_by")?.map(str::to_owned),
            address: r.opt_string("address")?.map(str::to_owned),
            token: r.opt_string("token")?.map(str::to_owned),
            released: r.opt_bool("released")?.unwrap_or(false),
        })
    }
}

/// Every run registered on the table.
pub async fn list_runs(table: &Table) -> Result<Vec<RunInfo>, AggregateError> {
    table.query("Run").consistent().all().await?.iter().map(RunInfo::from_record).collect()
}

/// Whether a process with this pid is gone from this host. Without `/proc` nothing can be told,
/// and the heartbeat alone decides.
fn pid_gone(pid: u32) -> bool {
    let proc = std::path::Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

/// Looks for dead runs (and abandoned recoveries), claims and recovers each; returns how many.
pub(crate) fn recover_dead_runs(shared: &Shared) -> BoxFuture<'_, Result<u64, AggregateError>> {
    // Boxed so the spawned heartbeat task's future is `Send` without higher-ranked lifetime
    // trouble from the closures below.
    Box::pin(recover_dead_runs_inner(shared))
}

async fn recover_dead_runs_inner(shared: &Shared) -> Result<u64, AggregateError> {
    let runs = list_runs(&shared.table).await?;
    let now = now_ms();
    let dead_after = i64::try_from(shared.config.dead_after.as_millis()).unwrap_or(i64::MAX);
    let is_dead = |r: &RunInfo| {
        *r.run_id != *shared.run_id
            && (now - r.heartbeat_ms > dead_after || (r.host == shared.config.host && pid_gone(r.pid)))
    };
    let alive: BTreeSet<&str> =
        runs.iter().filter(|r| r.state == "live" && !is_dead(r)).map(|r| r.run_id.as_str()).collect();
    let mut recovered = 0;
    for run in &runs {
        let claimable = match run.state.as_str() {
            "live" => is_dead(run),
            // A recovery whose claimer died is taken over; recovery is idempotent, so resuming it
            // from its `flushed_epoch` counts nothing twice.
            "recovering" => {
                run.recovered_by.as_deref().is_none_or(|by| by != &*shared.run_id && !alive.contains(by))
                    && *run.run_id != *shared.run_id
            }
            _ => false,
        };
        if !claimable {
            continue;
        }
        let mut condition = attr("state").eq(run.state.as_str()).and(attr("heartbeat_ms").eq(run.heartbeat_ms));
        if let Some(by) = &run.recovered_by {
            condition = condition.and(attr("recovered_by").eq(by.as_str()));
        }
        let claim = shared
            .table
            .update_with(
                "Run",
                item! { "run_id" => run.run_id.as_str() },
                Update::new().set("state", "recovering").set("recovered_by", &*shared.run_id),
                Some(&condition),
                false,
            )
            .await;
        match claim {
            Ok(_) => {}
            // Another process claimed it first, or the run beat again: not ours to recover.
            Err(e) if e.is_condition_failed() => continue,
            Err(e) => return Err(e.into()),
        }
        let events = recover_run(shared, run).await?;
        // This process's reading of the runs says so at once, before the beat reads them again:
        // an event of a visitor whose session the run held is continued from now on, not refused.
        {
            let mut kept = store::sync::write(&shared.runs);
            let mut runs = (*kept.1).clone();
            if let Some(r) = runs.iter_mut().find(|r| r.run_id == run.run_id) {
                r.state = "recovered".into();
                kept.1 = Arc::new(runs);
            }
        }
        tracing::info!(run = %run.run_id, by = %shared.run_id, events, "recovered the unflushed events of a stopped run");
        recovered += 1;
        lock(&shared.counts).runs_recovered += 1;
    }
    Ok(recovered)
}

/// Reads the events `run` wrote with `epoch > after` from its listed partitions.
pub(crate) async fn unflushed_events(
    table: &Table,
    run: &RunInfo,
    after: u64,
) -> Result<BTreeMap<u64, Vec<StoredEvent>>, AggregateError> {
    let partitions: Vec<(String, UtcDay)> = run.partitions.iter().cloned().collect();
    let run_id = run.run_id.clone();
    let blocks: Vec<Vec<crate::event_store::StoredBlock>> = stream::iter(partitions)
        .map(|(site, day)| {
            let run_id = run_id.clone();
            async move { crate::event_store::blocks_of_run(table, &site, day, &run_id, after).await }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .map_err(|e| AggregateError::Events(e.to_string()))?;
    let mut by_epoch: BTreeMap<u64, Vec<StoredEvent>> = BTreeMap::new();
    for block in blocks.iter().flatten() {
        let events = block.events().map_err(|e| AggregateError::Events(e.to_string()))?;
        // Only this run's events of the epochs not flushed (a migrated block of an earlier
        // run's events keeps each event's own run and epoch).
        for event in events.into_iter().filter(|e| *e.run == *run.run_id && e.epoch > after) {
            by_epoch.entry(event.epoch).or_default().push(event);
        }
    }
    Ok(by_epoch)
}

/// Aggregates `run`'s unflushed events and marks it recovered; returns how many events it read.
async fn recover_run(shared: &Shared, run: &RunInfo) -> Result<usize, AggregateError> {
    let by_epoch = unflushed_events(&shared.table, run, run.flushed_epoch).await?;
    let read = by_epoch.values().map(Vec::len).sum();
    let sites: BTreeSet<String> = by_epoch.values().flatten().map(|e| e.site_id.to_string()).collect();
    let settings = shared.settings_of(sites).await?;
    let finished = store::sync::read(&shared.finished).clone();
    let mut cache = ItemCache::default();
    let key = || item! { "run_id" => run.run_id.as_str() };
    let ours = attr("recovered_by").eq(&*shared.run_id);
    for (epoch, events) in by_epoch {
        let mut acc = Accumulator::default();
        for event in &events {
            let zone = settings
                .get(event.site_id.as_str())
                .map(|s| s.zone.clone())
                .unwrap_or_else(crate::period::SiteZone::utc);
            apply::accumulate_from(&mut acc, event, &zone, super::minutes_from(&shared.config));
            acc.note_session(event);
        }
        let writer = apply::Writer {
            table: &shared.table,
            run_id: &run.run_id,
            epoch,
            settings: &settings,
            finished: &finished,
            concurrency: shared.config.write_concurrency,
            max_attempts: shared.config.max_attempts,
            leave_weeks_and_months: false,
            stale: None,
            absent: None,
        };
        let outcome = writer.apply(&acc.finish(), &mut cache).await;
        {
            let mut c = lock(&shared.counts);
            c.items_written += outcome.written;
            c.items_skipped += outcome.skipped;
            c.conflicts += outcome.conflicts;
            c.wrong_guesses += outcome.wrong_guesses;
            c.flush_item_errors += outcome.item_errors;
        }
        outcome.result?;
        shared.table.update_with("Run", key(), Update::new().set("flushed_epoch", epoch), Some(&ours), false).await?;
    }
    // The sessions a run that advertised an address held were only in its memory: their latest
    // events go to their visitors' items before the run reads `recovered`, so that other
    // processes then continue those sessions from them. (A run that held the ingest lease alone
    // has its sessions restored by whoever takes the lease next.)
    if run.address.is_some() {
        crate::lease::restore_sessions(&shared.table, &run.run_id)
            .await
            .map_err(|e| AggregateError::Events(e.to_string()))?;
    }
    shared
        .table
        .update_with(
            "Run",
            key(),
            Update::new().set("state", "recovered").set("ttl", now_ms() / 1000 + FINISHED_RUN_TTL_S),
            Some(&ours),
            false,
        )
        .await?;
    Ok(read)
}
