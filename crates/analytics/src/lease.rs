//! The ingest lease: whether one process ingests alone, so it may keep sessions in memory only.
//!
//! One `IngestLease` item names its holder and an expiry the holder renews every
//! [`RENEW_EVERY`]. The protocol, and why it is safe:
//!
//! 1. **Taking it.** A process that finds no lease, an expired one, or one whose holder is a dead
//!    process on this host takes it with a conditional write (the expiry it read must still be
//!    there, so two processes cannot both take it). It keeps the lease's `shared` flag if another
//!    run is live (it must keep serialising through the table with them), else clears it. It
//!    then writes the `VisitorSession` item of every session the previous holder left live
//!    (read from that run's blocks of the last half hour), since those sessions were only in its
//!    memory. Holding an unshared lease, it ingests alone ([`Pipeline::set_alone`]).
//! 2. **Joining.** A process that finds the lease held by a live process sets `shared` and waits
//!    until the holder acknowledges (`shared_ack`), or the lease expires and it can take it. Only
//!    then does it ingest, in shared mode. So no event is ingested by a second process while the
//!    holder still keeps sessions in memory only.
//! 3. **Renewing.** The holder renews with a conditional update (it must still be the holder).
//!    When the renewal shows `shared`, it stops ingesting alone ([`Pipeline::share`]: every later
//!    event claims its slot in the table, and every session in memory is written there once its
//!    in-flight event is done), then sets `shared_ack`. A holder that finds it lost the lease
//!    (it stalled past the expiry) turns shared at once and marks the lease shared.
//! 4. **Stopping.** The holder writes its live sessions and gives the lease up by expiring it
//!    (the item stays, so the next holder knows sessions may have been left in the table, and
//!    looks a visitor missing from its memory up for the half hour such a session can live).
//!
//! Any process that is not alone is shared, which is always correct; alone is only faster.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use model::Table;
use model::expr::{Update, attr};
use store::item;
use tokio::sync::watch;

use crate::aggregate::recovery::list_runs;
use crate::event_store::{self, StoredBlock};
use crate::pipeline::{Pipeline, PipelineError, SESSION_TIMEOUT_MS};
use crate::visitor::{UtcDay, VisitorId};

/// How often the holder renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long a lease lasts without renewal.
pub const LEASE_MS: i64 = 10_000;
/// A run whose heartbeat is older than this is not live (the aggregator's own bound).
const LIVE_RUN_MS: i64 = 60_000;

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// The state of the lease as one process sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// This process holds an unshared lease: it ingests alone.
    Alone,
    /// Other processes ingest too.
    Shared,
}

/// A process's side of the lease: renews it and follows its state.
pub struct IngestLease {
    stop: watch::Sender<bool>,
    state: watch::Receiver<LeaseState>,
    task: tokio::task::JoinHandle<()>,
    table: Table,
    run_id: String,
    pipeline: Arc<Pipeline>,
}

impl std::fmt::Debug for IngestLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestLease").field("state", &*self.state.borrow()).finish_non_exhaustive()
    }
}

struct Seen {
    holder: String,
    host: String,
    pid: i64,
    expires_ms: i64,
    shared: bool,
    shared_ack: bool,
}

async fn read(table: &Table) -> Result<Option<Seen>, PipelineError> {
    let Some(r) = table.get_with("IngestLease", item! {}, true).await? else { return Ok(None) };
    Ok(Some(Seen {
        holder: r.string("holder")?.to_owned(),
        host: r.opt_string("host")?.unwrap_or_default().to_owned(),
        pid: r.opt_i64("pid")?.unwrap_or(0),
        expires_ms: r.opt_i64("expires_ms")?.unwrap_or(0),
        shared: r.opt_bool("shared")?.unwrap_or(false),
        shared_ack: r.opt_bool("shared_ack")?.unwrap_or(false),
    }))
}

/// Whether process `pid` is gone on this host (a holder killed here need not be waited out).
fn dead_here(host: &str, pid: i64, my_host: &str) -> bool {
    host == my_host && pid > 0 && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl IngestLease {
    /// Takes or joins the lease for `pipeline`'s process (run `run_id`, on `host` as `pid`), and
    /// returns once the process may ingest; then renews it in the background.
    pub async fn start(
        table: Table,
        pipeline: Arc<Pipeline>,
        run_id: &str,
        host: &str,
        pid: u32,
    ) -> Result<IngestLease, PipelineError> {
        let state = acquire(&table, &pipeline, run_id, host, pid).await?;
        let (state_tx, state_rx) = watch::channel(state);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(renew_task(
            table.clone(),
            pipeline.clone(),
            run_id.to_owned(),
            host.to_owned(),
            pid,
            state_tx,
            stop_rx,
        ));
        Ok(IngestLease { stop, state: state_rx, task, table, run_id: run_id.to_owned(), pipeline })
    }

    /// This process's state.
    pub fn state(&self) -> LeaseState {
        *self.state.borrow()
    }

    /// Stops renewing; an alone holder writes its live sessions and gives the lease up.
    pub async fn stop(self) -> Result<(), PipelineError> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        if self.pipeline.is_alone() {
            self.pipeline.write_heads(Some(now_ms() - SESSION_TIMEOUT_MS)).await?;
        } else {
            // The sessions it holds are only in its memory too.
            self.pipeline.release_held().await?;
        }
        // Given up by expiring it now; the item stays, so the next holder knows sessions may
        // have been left in the table.
        let mine = attr("holder").eq(self.run_id.as_str());
        match self
            .table
            .update_with("IngestLease", item! {}, Update::new().set("expires_ms", 0), Some(&mine), false)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_condition_failed() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

async fn acquire(
    table: &Table,
    pipeline: &Pipeline,
    run_id: &str,
    host: &str,
    pid: u32,
) -> Result<LeaseState, PipelineError> {
    let deadline = now_ms() + 3 * LEASE_MS;
    let mut marked = false;
    loop {
        let seen = read(table).await?;
        let now = now_ms();
        let free = match &seen {
            None => true,
            Some(s) => s.expires_ms < now || dead_here(&s.host, s.pid, host),
        };
        if free {
            let others_live = list_runs(table)
                .await
                .map_err(|e| PipelineError::Events(event_store::EventStoreError::Write(e.to_string())))?
                .iter()
                .any(|r| r.run_id != run_id && r.state == "live" && now - r.heartbeat_ms < LIVE_RUN_MS);
            let shared = others_live;
            let condition = match &seen {
                None => attr("pk").not_exists(),
                Some(s) => attr("expires_ms").eq(s.expires_ms).and(attr("holder").eq(s.holder.as_str())),
            };
            let lease = item! {
                "holder" => run_id,
                "host" => host,
                "pid" => pid,
                "expires_ms" => now + LEASE_MS,
                "shared" => shared,
                "shared_ack" => shared,
            };
            match table.write("IngestLease", lease, model::PutMode::Put, Some(&condition)).await {
                Ok(()) => {}
                Err(e) if e.is_condition_failed() => continue,
                Err(e) => return Err(e.into()),
            }
            if let Some(previous) = &seen {
                restore_sessions(table, &previous.holder).await?;
            }
            if shared {
                return Ok(LeaseState::Shared);
            }
            // A table that never had a lease has no session left by another process in it;
            // otherwise one may be live for half an hour more (with a minute for clocks).
            let lookups_until =
                if seen.is_none() && !was_released(table).await? { 0 } else { now_ms() + SESSION_TIMEOUT_MS + 60_000 };
            pipeline.set_alone(lookups_until);
            return Ok(LeaseState::Alone);
        }
        let s = seen.expect("not free, so there is a lease");
        if s.holder == run_id {
            return Ok(if s.shared { LeaseState::Shared } else { LeaseState::Alone });
        }
        if s.shared && s.shared_ack {
            return Ok(LeaseState::Shared);
        }
        if !marked {
            let holder = attr("holder").eq(s.holder.as_str());
            match table
                .update_with("IngestLease", item! {}, Update::new().set("shared", true), Some(&holder), false)
                .await
            {
                Ok(_) => marked = true,
                Err(e) if e.is_condition_failed() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        if now > deadline {
            return Err(PipelineError::Events(event_store::EventStoreError::Write(
                "the process holding the ingest lease neither acknowledged another ingesting process nor let the \
                 lease expire"
                    .into(),
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether any `VisitorSession` item may exist: some process ingested here before (a run item
/// exists besides the lease's absence, say after a process that never took a lease).
async fn was_released(table: &Table) -> Result<bool, PipelineError> {
    let runs = list_runs(table)
        .await
        .map_err(|e| PipelineError::Events(event_store::EventStoreError::Write(e.to_string())))?;
    Ok(runs.len() > 1)
}

/// Writes the `VisitorSession` items of the sessions a previous holder (run `run_id`) left live:
/// its blocks of today and yesterday with events in the last half hour, latest event per visitor.
pub(crate) async fn restore_sessions(table: &Table, run_id: &str) -> Result<usize, PipelineError> {
    let runs = list_runs(table)
        .await
        .map_err(|e| PipelineError::Events(event_store::EventStoreError::Write(e.to_string())))?;
    let Some(run) = runs.into_iter().find(|r| r.run_id == run_id) else { return Ok(0) };
    let since = now_ms() - SESSION_TIMEOUT_MS;
    let today = UtcDay::from_unix_ms(now_ms());
    let mut latest: std::collections::HashMap<(crate::sites::SiteId, VisitorId), crate::stored::StoredEvent> =
        std::collections::HashMap::new();
    for &(ref site, day) in &run.partitions {
        if day.days() < today.days() - 1 {
            continue;
        }
        let blocks: Vec<StoredBlock> = event_store::blocks_of_run(table, site, day, run_id, 0).await?;
        for b in blocks.iter().filter(|b| b.ts_range.1 >= since) {
            for e in b.events().map_err(event_store::EventStoreError::from)? {
                let key = (e.site_id.clone(), e.visitor_id);
                if latest.get(&key).is_none_or(|l| (l.session_id, l.seq) < (e.session_id, e.seq)) {
                    latest.insert(key, e);
                }
            }
        }
    }
    // A visitor at a time, many at once: a run that held a busy site's sessions left thousands.
    let restored: Vec<bool> = futures::stream::iter(latest.into_values().filter(|e| e.next().last_ts >= since))
        .map(|e| restore_one(table, run_id, e))
        .buffer_unordered(32)
        .try_collect()
        .await?;
    let written = restored.into_iter().filter(|&w| w).count();
    Ok(written)
}

/// Writes `e`, the latest event of its visitor that run `run_id` stored, to the visitor's item,
/// unless the table has a newer one for the visitor or another run holds the session; only as
/// the item was read. Whether it wrote.
async fn restore_one(table: &Table, run_id: &str, e: crate::stored::StoredEvent) -> Result<bool, PipelineError> {
    let key = item! { "site_id" => e.site_id.as_str(), "visitor_id" => e.visitor_id.to_string() };
    let current = table.get_with("VisitorSession", key, true).await?;
    let (version, skip) = match &current {
        Some(r) => {
            let v = r.opt_i64("version")?.unwrap_or(0);
            let last = crate::block::decode_events(r.bytes("last")?).map_err(event_store::EventStoreError::from)?;
            let newer = last.first().is_some_and(|l| (l.session_id, l.seq) >= (e.session_id, e.seq));
            let held_elsewhere = r.opt_string("holder")?.is_some_and(|o| o != run_id);
            (Some(v), newer || held_elsewhere)
        }
        None => (None, false),
    };
    if skip {
        return Ok(false);
    }
    let condition = match version {
        Some(v) => attr("version").eq(v),
        None => attr("pk").not_exists(),
    };
    let item = crate::pipeline::head_item_for(&e, version.unwrap_or(0) + 1, None)?;
    match table.write("VisitorSession", item, model::PutMode::Put, Some(&condition)).await {
        Ok(()) => Ok(true),
        // Another process moved the session on meanwhile: it has the newer state.
        Err(err) if err.is_condition_failed() => Ok(false),
        Err(err) => Err(err.into()),
    }
}

async fn renew_task(
    table: Table,
    pipeline: Arc<Pipeline>,
    run_id: String,
    host: String,
    pid: u32,
    state: watch::Sender<LeaseState>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(RENEW_EVERY) => {}
        }
        let mine = attr("holder").eq(run_id.as_str());
        let renewed = table
            .update_with(
                "IngestLease",
                item! {},
                Update::new().set("expires_ms", now_ms() + LEASE_MS).set("host", host.as_str()).set("pid", pid),
                Some(&mine),
                false,
            )
            .await;
        match renewed {
            Ok(record) => {
                let shared = record.opt_bool("shared").ok().flatten().unwrap_or(false);
                let acked = record.opt_bool("shared_ack").ok().flatten().unwrap_or(false);
                if shared && !acked {
                    if let Err(e) = pipeline.share().await {
                        tracing::warn!(error = %e, "writing sessions for another ingesting process failed; retrying");
                        continue;
                    }
                    let _ = state.send(LeaseState::Shared);
                    let ack = table
                        .update_with("IngestLease", item! {}, Update::new().set("shared_ack", true), Some(&mine), false)
                        .await;
                    if let Err(e) = ack {
                        tracing::warn!(error = %e, "acknowledging another ingesting process failed");
                    }
                }
            }
            Err(e) if e.is_condition_failed() => {
                // Lost the lease (stalled past its expiry): whoever holds it now must serialise
                // through the table with us.
                if pipeline.is_alone()
                    && let Err(e) = pipeline.share().await
                {
                    tracing::warn!(error = %e, "writing sessions after losing the ingest lease failed");
                }
                let _ = state.send(LeaseState::Shared);
                let _ = table.upsert("IngestLease", item! {}, Update::new().set("shared", true)).await;
            }
            Err(e) => tracing::warn!(error = %e, "renewing the ingest lease failed"),
        }
    }
}
