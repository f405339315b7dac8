//! Raw events on the table, as event blocks ([`crate::block`]): the block writer that ingestion
//! waits on, the readers every other path uses (queries, sessions, rebuilds, recovery, export),
//! erasure by visitor, and the migration of the per-event items an earlier Tally wrote.
//!
//! **Writing.** Ingestion hands each event to the [`BlockWriter`] and waits. The writer takes
//! every event waiting when it is free, groups them by (site, UTC day of the session's start),
//! and writes one `EventBlock` item per group (more when a group would pass [`MAX_BLOCK_BYTES`]),
//! all at once; each event's wait ends when its block is durable. This is a group commit: one
//! writer, no timer, so a lone event is written at once, and under load a block holds what
//! arrived during the previous write, and what the tasks ready when it ended then queued (the
//! writer yields once before it cuts a round). While small blocks are not merged (DynamoDB's
//! default, where write units are the bill), a block that would start a write unit it fills only
//! in part ends on the previous unit's boundary instead, holding its newest events back to lead
//! the partition's next block ([`fit`]). A block's key names its run and a number the run never
//! reuses, and it is written create-only, so a retried write that already happened is recognised
//! (the condition fails on our own block) rather than written twice.
//!
//! **Sessions in flight.** Alone, ingestion does not hold a session while its event is written
//! ([`BlockWriter::queue`]): the session's next event may be queued before the previous one is
//! durable. It carries that one's [`Written`], and fails, unwritten, if that one failed; a
//! session's events are of one partition, whose blocks are written one after another.
//!
//! **Reading.** Every block of a (site, day) is one Query (`EB#{site}#{day}`); a reader decodes
//! only the columns it needs. A session's events are all in the partition of its start day.
//!
//! **Erasing.** A visitor's events leave by rewriting each block of their start day that holds
//! them, without their rows, under the block's `version` (a block left empty is deleted).
//!
//! **Compacting.** Under load a block holds what arrived during one write, often a few events.
//! A run's small blocks of a partition whose epochs are all flushed (so recovery never reads them
//! again) are merged into one block, in one transaction that writes the merged block (naming the
//! blocks it `replaces`) and deletes each of them under its `version`: an erasure meanwhile
//! cancels it, and it is tried again later. The writer remembers the small blocks it left in each
//! partition, with their epochs, and a round reads the run's blocks from the first of those
//! whose epochs are flushed to the last: not the merged blocks of the rounds before, nor blocks
//! still waiting for a flush. The blocks are merged column by column ([`block::merge`]). Readers
//! drop a block another block of the same run replaces, so even an engine whose Query is not
//! isolated from transactions (DynamoDB) never counts an event twice.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use store::sync::lock;

use futures::{StreamExt, TryStreamExt, stream};
use model::expr::{Update, attr};
use model::{PutMode, Record, Table};
use smallvec::SmallVec;
use store::{AttributeValue, item};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::block::{self, Block, BlockError, Cols};
use crate::sites::SiteId;
use crate::stored::{StoredEvent, VisitAttrs};
use crate::visitor::{UtcDay, VisitorId};

/// The encoded size a block is cut at, well within DynamoDB's 400 KB item limit (the rest of the
/// item is a few hundred bytes). One event is at most about 75 KB (the validation limits), so a
/// block that holds one more event than this bound still fits.
pub const MAX_BLOCK_BYTES: usize = 256 * 1024;

/// The most events in one block: bounds what one block costs to decode.
pub const MAX_BLOCK_EVENTS: usize = 8192;

/// How many block Queries a reader keeps in flight.
pub const PARALLEL_READS: usize = 16;

/// Why raw events could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventStoreError {
    /// The table failed.
    #[error(transparent)]
    Model(#[from] model::Error),
    /// A block is damaged or an event cannot be encoded.
    #[error(transparent)]
    Block(#[from] BlockError),
    /// The block writer is gone (the process is stopping).
    #[error("the event block writer has stopped")]
    Stopped,
    /// The block holding the event could not be written.
    #[error("writing an event block failed: {0}")]
    Write(String),
}

impl EventStoreError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            EventStoreError::Model(e) => e.is_retryable(),
            EventStoreError::Write(_) => true,
            _ => false,
        }
    }
}

struct Pending {
    /// Shared with the session that made it, which keeps it as its latest event.
    event: Arc<StoredEvent>,
    /// Gets the event back once its block is durable, or why not.
    done: oneshot::Sender<Result<Arc<StoredEvent>, String>>,
    /// Settled when the block is durable or the event failed.
    written: Settle,
    /// The previous event of the same session, when it was queued before this one was durable:
    /// if it fails, this one fails too (its state was computed from it).
    after: Option<Arc<Written>>,
    /// Whether a block already held this event back ([`fit`]): it is not held back again.
    held: bool,
}

impl Pending {
    /// Settles the event: its block is durable (no error), or it is not stored, and why.
    fn finish(self, error: Option<&str>) {
        let Pending { event, done, written, after: _, held: _ } = self;
        written.0.settle(error.is_none());
        let _ = done.send(match error {
            None => Ok(event),
            Some(e) => Err(e.to_owned()),
        });
    }

    /// Whether the session's previous event failed, so this one must too.
    fn orphaned(&self) -> bool {
        self.after.as_ref().is_some_and(|w| w.is_failed())
    }
}

/// Whether an event queued for the writer is stored yet: pending, stored, or failed. A session's
/// next event may be computed from its previous one while that one is still being written
/// ([`BlockWriter::queue`]); this is how it learns the outcome, and how whoever writes a
/// session's `VisitorSession` item waits for its latest event first.
#[derive(Debug, Default)]
pub struct Written {
    state: std::sync::atomic::AtomicU8,
    settled: Notify,
}

const WRITTEN_PENDING: u8 = 0;
const WRITTEN_STORED: u8 = 1;
const WRITTEN_FAILED: u8 = 2;

impl Written {
    fn settle(&self, stored: bool) {
        let state = if stored { WRITTEN_STORED } else { WRITTEN_FAILED };
        if self.state.compare_exchange(WRITTEN_PENDING, state, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.settled.notify_waiters();
        }
    }

    /// Whether the event is durable.
    pub fn is_stored(&self) -> bool {
        self.state.load(Ordering::Acquire) == WRITTEN_STORED
    }

    /// Whether the event will never be stored.
    pub fn is_failed(&self) -> bool {
        self.state.load(Ordering::Acquire) == WRITTEN_FAILED
    }

    /// Waits until the event is settled; whether it is stored.
    pub async fn wait(&self) -> bool {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            match self.state.load(Ordering::Acquire) {
                WRITTEN_STORED => return true,
                WRITTEN_FAILED => return false,
                _ => settled.await,
            }
        }
    }
}

/// Settles its [`Written`] as failed if dropped unsettled (the writer stopped), so nobody waits
/// for it forever.
struct Settle(Arc<Written>);

impl Drop for Settle {
    fn drop(&mut self) {
        self.0.settle(false);
    }
}

/// An event handed to the writer ([`BlockWriter::queue`]): wait for it with [`Queued::done`].
#[derive(Debug)]
pub struct Queued {
    written: Arc<Written>,
    wait: Result<oneshot::Receiver<Result<Arc<StoredEvent>, String>>, EventStoreError>,
}

impl Queued {
    /// The event's outcome as the writer settles it, for the session's next event.
    pub fn written(&self) -> Arc<Written> {
        self.written.clone()
    }

    /// The event back once its block is durable, or why it is not stored.
    pub async fn done(self) -> Result<Arc<StoredEvent>, EventStoreError> {
        match self.wait?.await {
            Ok(Ok(event)) => Ok(event),
            Ok(Err(e)) => Err(EventStoreError::Write(e)),
            Err(_) => Err(EventStoreError::Stopped),
        }
    }
}

/// Writes events in blocks: see the module documentation.
pub struct BlockWriter {
    tx: mpsc::UnboundedSender<Pending>,
    counters: Arc<WriterCounters>,
    shared: Arc<Shared>,
    flushed: FlushedEpoch,
}

impl std::fmt::Debug for BlockWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockWriter").field("run_id", &self.shared.run_id).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("run_id", &self.run_id).finish_non_exhaustive()
    }
}

/// A block smaller than this (encoded) is merged with its partition's other small blocks.
pub const SMALL_BLOCK_BYTES: usize = 32 * 1024;

/// How many small blocks a partition gathers before they are merged: enough that the merged
/// block is not small itself (a busy writer's blocks are about 1 KB), so an event is merged once.
pub const COMPACT_FROM: usize = 64;

/// How often the writer looks for partitions to compact.
const COMPACT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The epoch up to which this run's flushes are recorded: blocks of those epochs only are merged.
pub type FlushedEpoch = Arc<dyn Fn() -> u64 + Send + Sync>;

/// What the writer shares with its compaction task.
struct Shared {
    table: Table,
    run_id: String,
    next_block: AtomicU64,
    /// What blocks encode to lately, for [`fit`].
    sizes: SizeModel,
    /// The small blocks this run wrote per partition and has not merged away (merged blocks
    /// that are small themselves included), by number, with their newest event's epoch: what
    /// [`compact_known`] reads.
    small: std::sync::Mutex<HashMap<(SiteId, UtcDay), BTreeMap<u64, u64>>>,
    counters: Arc<WriterCounters>,
    /// Whether small blocks are merged ([`BlockWriter::set_compaction`]); while they are not, a
    /// block may hold events back to end on a write unit ([`fit`]).
    compact: std::sync::atomic::AtomicBool,
}

/// What the block writer has done, for `/metrics` and `tally bench`.
#[derive(Debug, Default)]
pub struct WriterCounters {
    /// Blocks written.
    pub blocks: AtomicU64,
    /// Events in them.
    pub events: AtomicU64,
    /// Encoded bytes written.
    pub bytes: AtomicU64,
    /// Block writes that failed (their events were not acknowledged).
    pub failures: AtomicU64,
    /// Small blocks merged into larger ones.
    pub compacted: AtomicU64,
    /// Events a block held back to end on a write unit's boundary (each once at most).
    pub held: AtomicU64,
    /// Blocks encoded by the writer, those [`fit`] encoded again to cut them included.
    pub encodings: AtomicU64,
    /// Rounds of the writer: each writes the blocks of the events queued since the last.
    pub rounds: AtomicU64,
}

impl BlockWriter {
    /// Starts the writer task for `run_id` on the current tokio runtime, and its compaction task,
    /// which merges small blocks of the epochs `flushed` says are flushed.
    pub fn start(table: Table, run_id: &str, flushed: FlushedEpoch) -> Arc<BlockWriter> {
        let (tx, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(WriterCounters::default());
        let shared = Arc::new(Shared {
            table,
            run_id: run_id.to_owned(),
            next_block: AtomicU64::new(0),
            sizes: SizeModel::default(),
            small: std::sync::Mutex::default(),
            counters: counters.clone(),
            compact: std::sync::atomic::AtomicBool::new(true),
        });
        tokio::spawn(write_task(shared.clone(), rx));
        tokio::spawn(compact_task(Arc::downgrade(&shared), flushed.clone()));
        Arc::new(BlockWriter { tx, counters, shared, flushed })
    }

    /// Merges the small blocks of every partition written to, now, as far as their epochs are
    /// flushed (the background task does it once a partition has gathered enough). Returns how
    /// many blocks were merged away.
    pub async fn compact_now(&self) -> Result<usize, EventStoreError> {
        let partitions: Vec<(SiteId, UtcDay)> = lock(&self.shared.small).keys().cloned().collect();
        let mut merged = 0;
        for (site, day) in partitions {
            let next = || self.shared.next_block.fetch_add(1, Ordering::Relaxed);
            let shared = &self.shared;
            merged += compact_known(shared, &site, day, (self.flushed)(), &next).await?;
        }
        self.counters.compacted.fetch_add(merged as u64, Ordering::Relaxed);
        Ok(merged)
    }

    /// Whether small blocks are merged (on by default). Blocks end on a write unit ([`fit`])
    /// only while they are not: a small block that compaction merges away is stored for a few
    /// minutes, so ending it on a unit saves a part of a unit once (twice where deletes are
    /// billed by size), and costs a second encoding and a round's wait for the events it holds
    /// back (BENCHMARKS.md, "twenty-sixth session": with compaction, 12 % fewer blocks and 41 %
    /// fewer encodings without it).
    pub fn set_compaction(&self, on: bool) {
        self.shared.compact.store(on, Ordering::Relaxed);
    }

    /// Hands `event` to the writer now and returns at once: [`Queued::done`] waits until its
    /// block is durable. `after` is the outcome of the session's previous event if that one may not be
    /// durable yet: should it fail, `event` fails too, and is never stored without it (both
    /// are of one partition, so they share a block or are written in queue order).
    pub fn queue(&self, event: Arc<StoredEvent>, after: Option<Arc<Written>>) -> Queued {
        let (done, wait) = oneshot::channel();
        let written = Arc::new(Written::default());
        let after = after.filter(|w| !w.is_stored());
        let sent = self.tx.send(Pending { event, done, written: Settle(written.clone()), after, held: false });
        Queued { written, wait: sent.map(|()| wait).map_err(|_| EventStoreError::Stopped) }
    }

    /// The writer's counters.
    pub fn counters(&self) -> &WriterCounters {
        &self.counters
    }
}

async fn write_task(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    // Events the last round held back so its blocks ended on a write unit's boundary: written
    // this round, first in their partitions, and never held back again.
    let mut held: Vec<Pending> = Vec::new();
    let mut open = true;
    loop {
        let mut batch = std::mem::take(&mut held);
        if batch.is_empty() {
            match rx.recv().await {
                Some(p) => batch.push(p),
                None => return,
            }
        } else if open {
            // Only events held back so far: they would make a small block of their own (a
            // whole write unit for a part of one) while the clients just answered prepare their
            // next events, so they wait a moment for the first of those.
            match tokio::time::timeout(HELD_WAIT, rx.recv()).await {
                Ok(Some(p)) => batch.push(p),
                Ok(None) => open = false,
                Err(_) => {}
            }
        }
        // What else is waiting, then, once the runtime has run the tasks ready meanwhile (the
        // clients just answered, preparing their next events), what they queued: under load a
        // round takes them too rather than leaving them for a round of their own, so blocks
        // hold more events and the store takes fewer writes. Alone, the yield comes straight back.
        drain(&mut rx, &mut batch, &mut open);
        if open && batch.len() < MAX_BLOCK_EVENTS * 4 {
            tokio::task::yield_now().await;
            drain(&mut rx, &mut batch, &mut open);
        }
        // Group by partition, keeping arrival order within each.
        let mut groups: Vec<((SiteId, UtcDay), Vec<Pending>)> = Vec::new();
        let mut index: HashMap<(SiteId, UtcDay), usize> = HashMap::new();
        for p in batch {
            let key = (p.event.site_id.clone(), p.event.day);
            let i = *index.entry(key.clone()).or_insert_with(|| {
                groups.push((key, Vec::new()));
                groups.len() - 1
            });
            groups[i].1.push(p);
        }
        // Partitions are written at once; a partition's blocks one after another, so an event
        // whose session's previous event failed in an earlier block fails before its own. Only
        // a partition's last block may hold events back, and only while more may come.
        // Every partition's first block is encoded before any is written ([`prepare_chunk`]).
        shared.counters.rounds.fetch_add(1, Ordering::Relaxed);
        let shared = &shared;
        let fits = open && !shared.compact.load(Ordering::Relaxed);
        let writes: Vec<_> = groups
            .into_iter()
            .map(|((site, day), pending)| {
                let mut chunks = cut(pending).into_iter();
                let last = chunks.len().saturating_sub(1);
                let first = chunks.next().map(|chunk| prepare_chunk(shared, &site, day, chunk, fits && last == 0));
                async move {
                    let mut back = store_chunk(shared, &site, day, first.flatten()).await;
                    for (i, chunk) in chunks.enumerate() {
                        back.extend(write_chunk(shared, &site, day, chunk, fits && i + 1 == last).await);
                    }
                    back
                }
            })
            .collect();
        let back = futures::future::join_all(writes).await;
        held = back.into_iter().flatten().collect();
        shared.counters.held.fetch_add(held.len() as u64, Ordering::Relaxed);
    }
}

/// Takes what `rx` holds now into `batch`, up to the most a round takes; clears `open` once the
/// senders are gone.
fn drain(rx: &mut mpsc::UnboundedReceiver<Pending>, batch: &mut Vec<Pending>, open: &mut bool) {
    while *open && batch.len() < MAX_BLOCK_EVENTS * 4 {
        match rx.try_recv() {
            Ok(p) => batch.push(p),
            Err(mpsc::error::TryRecvError::Empty) => break,
            Err(mpsc::error::TryRecvError::Disconnected) => *open = false,
        }
    }
}

/// How long events held back wait for new ones to share their block before they are written
/// alone: a few writes' time at most (BENCHMARKS.md, "seventh session").
const HELD_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Writes one block of `(site, day)` and settles its events, failing first those whose
/// session's previous event failed. With `may_hold`, the block may end before its last events
/// (never one held back before) so that its item ends on a write unit's boundary ([`fit`]);
/// those are returned, to lead the partition's next block.
async fn write_chunk(shared: &Shared, site: &SiteId, day: UtcDay, chunk: Vec<Pending>, may_hold: bool) -> Vec<Pending> {
    let prepared = prepare_chunk(shared, site, day, chunk, may_hold);
    store_chunk(shared, site, day, prepared).await
}

/// What settles one pending event once its block is written: its answer, its shared outcome and
/// the outcome it depends on.
type Settles = (oneshot::Sender<Result<Arc<StoredEvent>, String>>, Settle, Option<Arc<Written>>);

/// A chunk's block, encoded and not yet written: its number, its events (with what settles
/// each), its bytes or why it has none, and the events held back for the partition's next block.
struct Prepared {
    number: u64,
    events: Vec<Arc<StoredEvent>>,
    rest: Vec<Settles>,
    encoded: Result<Vec<u8>, BlockError>,
    later: Vec<Pending>,
}

/// [`write_chunk`]'s work before the write: fails the orphans and encodes the block. A round
/// prepares the first block of every partition before it writes any, so that their writes reach
/// the store together and share one group commit, where writing each as soon as it was encoded
/// had the engine commit (and sync) the first alone while the others were still being encoded.
fn prepare_chunk(shared: &Shared, site: &SiteId, day: UtcDay, chunk: Vec<Pending>, may_hold: bool) -> Option<Prepared> {
    let mut pending = Vec::with_capacity(chunk.len());
    for p in chunk {
        // In queue order, so a failure passes down a session's chain of events.
        if p.orphaned() {
            p.finish(Some("the session's previous event was not stored"));
        } else {
            pending.push(p);
        }
    }
    if pending.is_empty() {
        return None;
    }
    let number = shared.next_block.fetch_add(1, Ordering::Relaxed);
    // Events held back once lead the chunk; the rest may be held back now.
    let keep = if may_hold { pending.iter().take_while(|p| p.held).count().max(1) } else { pending.len() };
    let (mut events, mut rest): (Vec<Arc<StoredEvent>>, Vec<_>) =
        pending.into_iter().map(|p| (p.event, (p.done, p.written, p.after))).unzip();
    let encoded = fit(shared, number, site, day, &events, keep);
    let later: Vec<Pending> = match &encoded {
        Ok((n, _)) => events
            .split_off(*n)
            .into_iter()
            .zip(rest.split_off(*n))
            .map(|(event, (done, written, after))| Pending { event, done, written, after, held: true })
            .collect(),
        Err(_) => Vec::new(),
    };
    Some(Prepared { number, events, rest, encoded: encoded.map(|(_, data)| data), later })
}

/// [`write_chunk`]'s write: stores the prepared block, settles its events and returns those held
/// back.
async fn store_chunk(shared: &Shared, site: &SiteId, day: UtcDay, prepared: Option<Prepared>) -> Vec<Pending> {
    let Some(Prepared { number, events, rest, encoded, later }) = prepared else { return Vec::new() };
    let result = match encoded {
        Ok(data) => write_block(&shared.table, (&shared.run_id, number), site, day, &events, data).await,
        Err(e) => Err(e.into()),
    };
    let counters = &shared.counters;
    match &result {
        Ok(bytes) => {
            counters.blocks.fetch_add(1, Ordering::Relaxed);
            counters.events.fetch_add(events.len() as u64, Ordering::Relaxed);
            counters.bytes.fetch_add(*bytes as u64, Ordering::Relaxed);
            if *bytes < SMALL_BLOCK_BYTES {
                let max_epoch = events.iter().map(|e| e.epoch).max().unwrap_or(0);
                lock(&shared.small).entry((site.clone(), day)).or_default().insert(number, max_epoch);
            }
        }
        Err(e) => {
            counters.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(site = %site, day = %day, error = %e, "writing an event block failed");
        }
    }
    let error = result.err().map(|e| e.to_string());
    for (event, (done, written, after)) in events.into_iter().zip(rest) {
        Pending { event, done, written, after, held: false }.finish(error.as_deref());
    }
    later
}

/// Encodes the block of the first `n` of `events`, `n` at least `keep`: all of them, unless
/// the item they make would start a write unit it fills only in part, and fewer of them end it
/// on or just under the previous unit's boundary. Write units are billed per started KB, and a
/// busy writer's blocks are a KB or two, so rounding up cost about a third of their units; the
/// events left out lead the partition's next block, which is written as soon as this one is.
///
/// Where to cut is predicted from what the events should encode to ([`SizeModel`], learned
/// from the blocks encoded before): a block the prediction is sure passes a boundary by less than
/// half a unit is cut without being encoded whole first, and one encoded whole is cut where the
/// prediction, corrected by what it missed for these events, says. A cut taken on a prediction
/// alone must end on or within half a unit under the boundary; otherwise the block is encoded
/// whole and decided exactly.
fn fit(
    shared: &Shared,
    number: u64,
    site: &str,
    day: UtcDay,
    events: &[Arc<StoredEvent>],
    keep: usize,
) -> Result<(usize, Vec<u8>), BlockError> {
    let approx: SmallVec<[usize; 64]> = events.iter().map(|e| approx_size(e)).collect();
    let encode = |n: usize| -> Result<Vec<u8>, BlockError> {
        let data = block::encode(site, day, &events[..n])?;
        shared.counters.encodings.fetch_add(1, Ordering::Relaxed);
        shared.sizes.learn(approx[..n].iter().sum(), data.len());
        Ok(data)
    };
    let all = events.len();
    let unit = store::limits::WRITE_UNIT_BYTES;
    if keep >= all {
        return Ok((all, encode(all)?));
    }
    let key = (shared.run_id.as_str(), number);
    let Ok(item) = shared.table.build_item("EventBlock", block_item(key, site, day, events, Vec::new(), 0, &[])) else {
        return Ok((all, encode(all)?));
    };
    // The item around the data. A prefix's count, times and epoch may take a few bytes more
    // or less than all events' (a number's size is its significant digits), never `SLACK` more
    // or less: a prefix's item is within `SLACK` on either side of `overhead + SLACK + data`.
    const SLACK: usize = 16;
    let overhead = store::item_size(&item);
    let predicted = shared.sizes.predict(approx.iter().copied());
    // The most events (at least `keep`, not all) whose predicted size, off by `missed`, fits.
    let longest = |prefixes: &[usize], missed: isize, bound: usize| {
        let fits = |p: &usize| overhead + SLACK + p.saturating_add_signed(missed) <= bound;
        prefixes.iter().take_while(|p| fits(p)).count().clamp(keep, all - 1)
    };
    // Sure enough from the prediction alone that the block passes a unit's boundary, by less
    // than half a unit (the line misses by about 150 bytes, hence the margins): cut it without
    // encoding it whole first.
    if let Some(prefixes) = &predicted {
        let whole = overhead + prefixes[all - 1];
        let bound = whole / unit * unit;
        if bound > 0 && (unit / 8..unit * 3 / 8).contains(&(whole - bound)) {
            let n = longest(prefixes, 0, bound);
            let prefix = encode(n)?;
            let size = overhead + SLACK + prefix.len();
            // The whole again, from the prefix as it came out: cutting must have been needed.
            let whole = size + prefixes[all - 1].saturating_sub(prefixes[n - 1]);
            if size <= bound && bound - size < unit / 2 - 2 * SLACK && whole > bound {
                return Ok((n, prefix));
            }
        }
    }
    let data = encode(all)?;
    let whole = overhead + data.len();
    let bound = whole / unit * unit;
    // Cut only a block that fills under half of its last unit: past that, holding back half a
    // unit of events to save the rest of one is not worth a second encoding.
    if bound == 0 || whole - bound >= unit / 2 {
        return Ok((all, data));
    }
    // Where to cut: the prediction (else the bytes per event), corrected by what it missed for
    // these very events, then by what each try missed.
    let prefixes = predicted.unwrap_or_else(|| (1..=all).map(|n| n * data.len() / all).collect());
    let mut missed = data.len() as isize - prefixes[all - 1] as isize;
    let mut tried = Vec::new();
    for _ in 0..4 {
        let n = longest(&prefixes, missed, bound);
        if tried.contains(&n) {
            break;
        }
        tried.push(n);
        let prefix = encode(n)?;
        let size = overhead + SLACK + prefix.len();
        // Ending within half a unit under the boundary, unless no fewer events may be taken.
        if size <= bound && (bound - size < unit / 2 - 2 * SLACK || n == keep) {
            return Ok((n, prefix));
        }
        if n == keep && size > bound {
            break;
        }
        missed = prefix.len() as isize - prefixes[n - 1] as isize;
    }
    Ok((all, data))
}

/// What a block of events encodes to, predicted from their [`approx_size`]s: a least-squares
/// line through the blocks encoded lately (a fixed part, the header and each column's frame, and
/// a part per byte), each older block weighing [`SizeModel::DECAY`] as much as the next. Blocks
/// of one writer's traffic compress alike: over `tally bench` the line misses a block's size by
/// about 150 bytes (one standard deviation), close enough to guess where to cut.
#[derive(Debug, Default)]
struct SizeModel(std::sync::Mutex<Sums>);

/// Decayed sums of the blocks seen: their weight, sizes, encoded sizes, and the squares and
/// products a least-squares line needs.
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    weight: f64,
    approx: f64,
    encoded: f64,
    approx_sq: f64,
    product: f64,
}

impl SizeModel {
    const DECAY: f64 = 0.95;

    /// Takes in that events of `approx` bytes (by [`approx_size`]) encoded to `encoded` bytes.
    fn learn(&self, approx: usize, encoded: usize) {
        let (x, y) = (approx as f64, encoded as f64);
        let mut s = lock(&self.0);
        let d = Self::DECAY;
        *s = Sums {
            weight: s.weight * d + 1.0,
            approx: s.approx * d + x,
            encoded: s.encoded * d + y,
            approx_sq: s.approx_sq * d + x * x,
            product: s.product * d + x * y,
        };
    }

    /// The line: the fixed part and the part per approximate byte; `None` before two blocks.
    fn line(&self) -> Option<(f64, f64)> {
        let s = *lock(&self.0);
        if s.weight < 1.5 || s.approx <= 0.0 {
            return None;
        }
        let (mean_x, mean_y) = (s.approx / s.weight, s.encoded / s.weight);
        let variance = s.approx_sq / s.weight - mean_x * mean_x;
        let slope = (s.product / s.weight - mean_x * mean_y) / variance;
        let fixed = mean_y - slope * mean_x;
        // Blocks all alike in size, or a line through nonsense: a plain ratio instead.
        Some(if variance > 1.0 && slope > 0.0 && fixed >= 0.0 { (fixed, slope) } else { (0.0, mean_y / mean_x) })
    }

    /// The predicted encoded size of every prefix of events whose sizes are `approx`: the
    /// first event alone, the first two, … all of them; `None` before anything was learned.
    fn predict(&self, approx: impl Iterator<Item = usize>) -> Option<Vec<usize>> {
        let (fixed, slope) = self.line()?;
        Some(
            approx
                .scan(0usize, |sum, a| {
                    *sum = sum.saturating_add(a);
                    Some((fixed + slope * *sum as f64).round() as usize)
                })
                .collect(),
        )
    }
}

/// Records what a compaction of `partition` did: `gone` (merged away, or no longer there) leave
/// its small blocks, `added` (merged blocks that are small themselves, with their epochs) join
/// them; a partition with none left is forgotten. Blocks written meanwhile stay.
fn update_small(shared: &Shared, partition: (SiteId, UtcDay), gone: &[u64], added: &[(u64, u64)]) {
    let mut small = lock(&shared.small);
    let blocks = small.entry(partition.clone()).or_default();
    gone.iter().for_each(|n| {
        blocks.remove(n);
    });
    blocks.extend(added.iter().copied());
    if blocks.is_empty() {
        small.remove(&partition);
    }
}

/// How many of `blocks` (small blocks by number, with their epochs) are of epochs up to `flushed`.
fn mergeable(blocks: &BTreeMap<u64, u64>, flushed: u64) -> usize {
    blocks.values().filter(|&&epoch| epoch <= flushed).count()
}

/// Every [`COMPACT_EVERY`], merges the small blocks of the partitions that gathered
/// [`COMPACT_FROM`] of them; stops when the writer is gone.
async fn compact_task(shared: std::sync::Weak<Shared>, flushed: FlushedEpoch) {
    loop {
        tokio::time::sleep(COMPACT_EVERY).await;
        let Some(shared) = shared.upgrade() else { return };
        if !shared.compact.load(Ordering::Relaxed) {
            continue;
        }
        let flushed_epoch = flushed();
        let due: Vec<(SiteId, UtcDay)> = lock(&shared.small)
            .iter()
            .filter(|(_, blocks)| mergeable(blocks, flushed_epoch) >= COMPACT_FROM)
            .map(|(k, _)| k.clone())
            .collect();
        for (site, day) in due {
            let next = || shared.next_block.fetch_add(1, Ordering::Relaxed);
            match compact_known(&shared, &site, day, flushed(), &next).await {
                Ok(merged) => {
                    shared.counters.compacted.fetch_add(merged as u64, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!(site = %site, day = %day, error = %e, "compacting event blocks failed"),
            }
        }
    }
}

/// Merges the small blocks `run_id` wrote to `(site, day)` whose events are all of epochs up to
/// `flushed`, a transaction per merged block (see the module documentation), numbering merged
/// blocks with `next`. Returns how many blocks were merged away. A transaction cancelled by a
/// concurrent erasure is left for a later call.
pub async fn compact_partition(
    table: &Table,
    site: &str,
    day: UtcDay,
    run_id: &str,
    flushed: u64,
    next: &(dyn Fn() -> u64 + Sync),
) -> Result<usize, EventStoreError> {
    // Every small block of the run in the partition.
    let small = small_blocks(table, site, day, run_id, (0, u64::MAX)).await?;
    Ok(merge(table, site, day, run_id, small, flushed, next).await?.replaced.len())
}

/// Merges the small blocks the writer of `shared` knows it left in `(site, day)` whose epochs
/// are flushed (see [`compact_partition`]); returns how many were merged away. Only the blocks
/// numbered from the first of those to the last are read: not the merged blocks of earlier
/// rounds, numbered before them (a busy day's grow by hundreds of megabytes), nor the blocks of
/// epochs not flushed yet, numbered after them (a round would read them again and again while
/// a flush is under way).
async fn compact_known(
    shared: &Shared,
    site: &SiteId,
    day: UtcDay,
    flushed: u64,
    next: &(dyn Fn() -> u64 + Sync),
) -> Result<usize, EventStoreError> {
    let partition = (site.clone(), day);
    let known: BTreeSet<u64> = match lock(&shared.small).get(&partition) {
        Some(blocks) => blocks.iter().filter(|(_, epoch)| **epoch <= flushed).map(|(n, _)| *n).collect(),
        None => return Ok(0),
    };
    let (Some(&first), Some(&last)) = (known.first(), known.last()) else { return Ok(0) };
    if first == last {
        return Ok(0); // one block merges with nothing
    }
    let found = small_blocks(&shared.table, site, day, &shared.run_id, (first, last)).await?;
    // Blocks in the range this round does not merge (of epochs not flushed yet, or written
    // after `known` was taken) are left for a later round.
    let small: Vec<StoredBlock> = found.into_iter().filter(|b| known.contains(&b.number)).collect();
    // Known but not found: erased whole (or no longer small), so no longer to be merged.
    let present: BTreeSet<u64> = small.iter().map(|b| b.number).collect();
    let mut gone: Vec<u64> = known.difference(&present).copied().collect();
    let merged = merge(&shared.table, site, day, &shared.run_id, small, flushed, next).await?;
    gone.extend(&merged.replaced);
    update_small(shared, partition, &gone, &merged.small);
    Ok(merged.replaced.len())
}

/// The small blocks `run_id` wrote to `(site, day)` numbered `from` to `to`.
async fn small_blocks(
    table: &Table,
    site: &str,
    day: UtcDay,
    run_id: &str,
    (from, to): (u64, u64),
) -> Result<Vec<StoredBlock>, EventStoreError> {
    // Only the small blocks come back, though the engine reads the others in the range too (a
    // filter does not reduce what a query reads). A merge is never seen half done here: only
    // this run's compaction merges its blocks, one round at a time, and it reads after its last
    // transaction is committed.
    let run = item! { "run_id" => run_id };
    let bound = |n: u64| (n != 0 && n != u64::MAX).then(|| item! { "run_id" => run_id, "block" => n });
    let records = table
        .query("EventBlock")
        .key(item! { "site_id" => site, "day" => day.to_string() })
        .between(bound(from).unwrap_or_else(|| run.clone()), bound(to).unwrap_or(run))
        .filter(attr("data").size().lt(SMALL_BLOCK_BYTES as i64))
        .consistent()
        .all()
        .await?;
    records.into_iter().map(StoredBlock::from_owned_record).collect()
}

/// What [`merge`] did.
struct Merged {
    /// The blocks merged away.
    replaced: Vec<u64>,
    /// The merged blocks that are small themselves (merged again later), with their epochs.
    small: Vec<(u64, u64)>,
}

/// Merges those of `small` whose events are all of epochs up to `flushed`, in number order, as
/// many to a block as fit one block and one transaction; numbers merged blocks with `next`.
async fn merge(
    table: &Table,
    site: &str,
    day: UtcDay,
    run_id: &str,
    small: Vec<StoredBlock>,
    flushed: u64,
    next: &(dyn Fn() -> u64 + Sync),
) -> Result<Merged, EventStoreError> {
    let mut small: Vec<StoredBlock> = small.into_iter().filter(|b| b.max_epoch <= flushed).collect();
    small.sort_by_key(|b| b.number);
    let mut out = Merged { replaced: Vec::new(), small: Vec::new() };
    let mut at = 0;
    // The block that did not fit the last group, read whole, and its size: it leads the next.
    let mut carried: Option<(Block, usize)> = None;
    while at < small.len() {
        // As many as fit one block and one transaction (the merged block and the deletes).
        let mut group: Vec<&StoredBlock> = Vec::new();
        let mut read: Vec<Block> = Vec::new();
        let (mut events, mut bytes) = (0, 0);
        while at < small.len() && group.len() < store::limits::MAX_TRANSACT_ITEMS - 1 {
            let b = &small[at];
            let (these, size) = match carried.take() {
                Some(c) => c,
                None => {
                    let these = block::read(&b.data, Cols::ALL)?;
                    let size: usize = (0..these.len).map(|r| approx_row_size(&these, r)).sum();
                    (these, size)
                }
            };
            if !group.is_empty() && (events + these.len > MAX_BLOCK_EVENTS || bytes + size > MAX_BLOCK_BYTES) {
                carried = Some((these, size));
                break;
            }
            bytes += size;
            events += these.len;
            read.push(these);
            group.push(b);
            at += 1;
        }
        if group.len() < 2 {
            continue;
        }
        let number = next();
        let replaces: Vec<u64> = group.iter().map(|b| b.number).collect();
        // Column by column, as the block of the events would encode (`block::merge`).
        let data = block::merge(site, day, &read)?;
        let merged_is_small = data.len() < SMALL_BLOCK_BYTES;
        let head = Head::of_blocks(&read);
        let max_epoch = head.max_epoch;
        drop(read);
        let mut writes = vec![model::TxWrite::create(
            "EventBlock",
            head_item((run_id, number), site, day, head, data, 0, &replaces),
        )];
        for b in &group {
            let key = item! { "site_id" => site, "day" => day.to_string(), "run_id" => run_id, "block" => b.number };
            writes.push(model::TxWrite::delete("EventBlock", key).condition(attr("version").eq(b.version)));
        }
        match table.transact_write(writes).await {
            Ok(_) => {
                out.replaced.extend(replaces);
                if merged_is_small {
                    out.small.push((number, max_epoch));
                }
            }
            // An erasure (or another compaction) got there first: leave these for later.
            Err(e) if e.is_condition_failed() || e.is_transaction_canceled() || e.is_retryable() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Splits one partition's events into blocks of at most [`MAX_BLOCK_EVENTS`] events and about
/// [`MAX_BLOCK_BYTES`] of text.
fn cut(pending: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut out: Vec<Vec<Pending>> = vec![Vec::new()];
    let mut bytes = 0;
    for p in pending {
        let size = approx_size(&p.event);
        let current = out.last_mut().expect("never empty");
        if !current.is_empty() && (current.len() >= MAX_BLOCK_EVENTS || bytes + size > MAX_BLOCK_BYTES) {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        out.last_mut().expect("never empty").push(p);
    }
    out
}

/// An upper bound of what an event adds to a block before compression.
pub fn approx_size(e: &StoredEvent) -> usize {
    // `approx_row_size` must stay equal to this for a block's rows.
    let visit = e.visit.texts_len() + 2 * VisitAttrs::TEXTS;
    96 + e.name.len()
        + e.hostname.len()
        + e.path.len()
        + e.prev.exit_page.len()
        + e.run.len()
        + e.props.iter().map(|(k, v)| k.len() + v.len() + 8).sum::<usize>()
        + e.goals.iter().map(|g| g.len() + 4).sum::<usize>()
        + e.revenue.as_ref().map_or(0, |(a, c)| a.len() + c.len() + 4)
        + visit
}

/// [`approx_size`] of row `r` of `b` (read whole), without making the event.
fn approx_row_size(b: &Block, r: usize) -> usize {
    let s = b.session[r] as usize;
    let visit: usize = b.visit.iter().map(|d| d.get(s).len()).sum::<usize>() + 2 * VisitAttrs::TEXTS;
    96 + b.name.get(r).len()
        + b.hostname.get(r).len()
        + b.path.get(r).len()
        + b.prev_exit.get(r).len()
        + b.run.get(r).len()
        + b.props.row(r).map(|(k, v)| k.len() + v.len() + 8).sum::<usize>()
        + b.goals.row(r).map(|(g, _)| g.len() + 4).sum::<usize>()
        + b.revenue[r].as_ref().map_or(0, |(a, c)| a.len() + c.len() + 4)
        + visit
}

/// Writes one block of `events`, encoded as `data` (create-only under its unique key); returns
/// its encoded size. A failed condition means an earlier attempt of this same write succeeded.
async fn write_block<E: Borrow<StoredEvent>>(
    table: &Table,
    (run_id, number): (&str, u64),
    site: &str,
    day: UtcDay,
    events: &[E],
    data: Vec<u8>,
) -> Result<usize, EventStoreError> {
    let len = data.len();
    let item = block_item((run_id, number), site, day, events, data, 0, &[]);
    match table.write("EventBlock", item, PutMode::Create, None).await {
        Ok(()) => Ok(len),
        Err(e) if e.is_condition_failed() || e.is_already_exists() => Ok(len),
        Err(e) => Err(e.into()),
    }
}

fn block_item<E: Borrow<StoredEvent>>(
    key: (&str, u64),
    site: &str,
    day: UtcDay,
    events: &[E],
    data: Vec<u8>,
    version: i64,
    replaces: &[u64],
) -> store::Item {
    let events = || events.iter().map(Borrow::borrow);
    let head = Head {
        count: events().count(),
        first_ts: events().map(|e: &StoredEvent| e.ts).min().unwrap_or(0),
        last_ts: events().map(|e| e.ts).max().unwrap_or(0),
        max_epoch: events().map(|e| e.epoch).max().unwrap_or(0),
        ttl: events().map(|e| e.ttl).max().unwrap_or(0),
    };
    head_item(key, site, day, head, data, version, replaces)
}

/// What a block's item says of its events besides their bytes.
struct Head {
    count: usize,
    first_ts: i64,
    last_ts: i64,
    max_epoch: u64,
    ttl: i64,
}

impl Head {
    /// The head of the block merging `blocks` (read whole).
    fn of_blocks(blocks: &[Block]) -> Head {
        let all = || blocks.iter();
        Head {
            count: all().map(|b| b.len).sum(),
            first_ts: all().flat_map(|b| b.ts.iter().copied()).min().unwrap_or(0),
            last_ts: all().flat_map(|b| b.ts.iter().copied()).max().unwrap_or(0),
            max_epoch: all().flat_map(|b| b.epoch.iter().copied()).max().unwrap_or(0),
            ttl: all().flat_map(|b| b.ttl.iter().copied()).max().unwrap_or(0),
        }
    }
}

/// The `EventBlock` item of a block with `head` and `data`.
fn head_item(
    (run_id, number): (&str, u64),
    site: &str,
    day: UtcDay,
    head: Head,
    data: Vec<u8>,
    version: i64,
    replaces: &[u64],
) -> store::Item {
    let Head { count, first_ts, last_ts, max_epoch, ttl } = head;
    let mut item = item! {
        "site_id" => site,
        "day" => day.to_string(),
        "run_id" => run_id,
        "block" => number,
        "events" => count,
        "first_ts" => first_ts,
        "last_ts" => last_ts,
        "max_epoch" => max_epoch,
        "data" => data,
        "version" => version,
        "ttl" => ttl,
    };
    if !replaces.is_empty() {
        let set = replaces.iter().map(|n| store::Number::from(*n)).collect();
        item.insert("replaces".to_owned(), AttributeValue::Ns(set));
    }
    item
}

/// A stored block: its key fields and its bytes.
#[derive(Debug, Clone)]
pub struct StoredBlock {
    /// The run that wrote it.
    pub run_id: String,
    /// Its number within the run.
    pub number: u64,
    /// Its newest event's epoch.
    pub max_epoch: u64,
    /// Its first and last event times.
    pub ts_range: (i64, i64),
    /// The encoded block.
    pub data: Vec<u8>,
    /// Its version (rewrites by erasure).
    pub version: i64,
    /// The blocks of its run it replaces (a merged block).
    pub replaces: Vec<u64>,
}

impl StoredBlock {
    fn from_record(r: &Record) -> Result<StoredBlock, EventStoreError> {
        Ok(StoredBlock { data: r.bytes("data")?.to_vec(), ..StoredBlock::head_of(r)? })
    }

    /// The block of `r`, its data moved out of the record rather than copied (blocks are the
    /// bulk of what a scan reads).
    fn from_owned_record(r: Record) -> Result<StoredBlock, EventStoreError> {
        let head = StoredBlock::head_of(&r)?;
        r.bytes("data")?;
        match r.into_item().remove("data") {
            Some(AttributeValue::B(data)) => Ok(StoredBlock { data, ..head }),
            _ => Err(EventStoreError::Block(BlockError::Corrupt("block data"))),
        }
    }

    /// Everything but the data.
    fn head_of(r: &Record) -> Result<StoredBlock, EventStoreError> {
        Ok(StoredBlock {
            run_id: r.string("run_id")?.to_owned(),
            number: u64::try_from(r.opt_i64("block")?.unwrap_or(0)).unwrap_or(0),
            max_epoch: u64::try_from(r.opt_i64("max_epoch")?.unwrap_or(0)).unwrap_or(0),
            ts_range: (r.opt_i64("first_ts")?.unwrap_or(i64::MIN), r.opt_i64("last_ts")?.unwrap_or(i64::MAX)),
            data: Vec::new(),
            version: r.opt_i64("version")?.unwrap_or(0),
            replaces: match r.get("replaces") {
                Some(AttributeValue::Ns(set)) => set.iter().filter_map(|n| n.to_i64()).map(|n| n as u64).collect(),
                _ => Vec::new(),
            },
        })
    }

    /// Every event, whole.
    pub fn events(&self) -> Result<Vec<StoredEvent>, BlockError> {
        block::decode_events(&self.data)
    }

    /// The columns `cols`.
    pub fn read(&self, cols: Cols) -> Result<Block, BlockError> {
        block::read(&self.data, cols)
    }
}

/// Every block of `site`'s sessions that started on UTC day `day`.
pub async fn blocks_of_day(table: &Table, site: &str, day: UtcDay) -> Result<Vec<StoredBlock>, EventStoreError> {
    let day = day.to_string();
    let records =
        table.query("EventBlock").key(item! { "site_id" => site, "day" => day.as_str() }).consistent().all().await?;
    Ok(without_replaced(records.into_iter().map(StoredBlock::from_owned_record).collect::<Result<_, _>>()?))
}

/// The blocks no other block of the list replaces: a merged block's originals may still be
/// there, or be read, while the merge's transaction commits.
fn without_replaced(blocks: Vec<StoredBlock>) -> Vec<StoredBlock> {
    // A merged block names every block it replaced (tens each, long gone from the table), so
    // each name is looked up among the blocks read (a day has a few dozen), not gathered.
    let mut gone = vec![false; blocks.len()];
    {
        let at: hashbrown::HashMap<(&str, u64), usize> =
            blocks.iter().enumerate().map(|(i, b)| ((b.run_id.as_str(), b.number), i)).collect();
        for b in &blocks {
            for n in &b.replaces {
                if let Some(&i) = at.get(&(b.run_id.as_str(), *n)) {
                    gone[i] = true;
                }
            }
        }
    }
    if !gone.contains(&true) {
        return blocks;
    }
    blocks.into_iter().zip(gone).filter_map(|(b, gone)| (!gone).then_some(b)).collect()
}

/// The blocks of the days `first..=last`, a day's blocks at a time, [`PARALLEL_READS`] days
/// in flight, in day order when `ordered`.
pub fn blocks_of_days<'a>(
    table: &'a Table,
    site: &'a str,
    first: UtcDay,
    last: UtcDay,
    ordered: bool,
) -> futures::stream::BoxStream<'a, Result<(UtcDay, Vec<StoredBlock>), EventStoreError>> {
    let reads = stream::iter(first.days()..=last.days()).map(move |d| async move {
        let day = UtcDay::from_days(d);
        Ok((day, blocks_of_day(table, site, day).await?))
    });
    if ordered { reads.buffered(PARALLEL_READS).boxed() } else { reads.buffer_unordered(PARALLEL_READS).boxed() }
}

/// The events of every block of `site` and `day`, in block order.
pub async fn events_of_day(table: &Table, site: &str, day: UtcDay) -> Result<Vec<StoredEvent>, EventStoreError> {
    let mut out = Vec::new();
    for b in blocks_of_day(table, site, day).await? {
        out.extend(b.events()?);
    }
    Ok(out)
}

/// The blocks `run_id` wrote to `(site, day)` with an event of an epoch after `after`.
pub async fn blocks_of_run(
    table: &Table,
    site: &str,
    day: UtcDay,
    run_id: &str,
    after: u64,
) -> Result<Vec<StoredBlock>, EventStoreError> {
    let records = table
        .query("EventBlock")
        .key(item! { "site_id" => site, "day" => day.to_string(), "run_id" => run_id })
        .consistent()
        .all()
        .await?;
    let blocks = without_replaced(records.into_iter().map(StoredBlock::from_owned_record).collect::<Result<_, _>>()?);
    Ok(blocks.into_iter().filter(|b| b.max_epoch > after).collect())
}

/// Puts events in order of (visitor, session, seq): a session's events together and in order.
pub fn sort_sessions(events: &mut [StoredEvent]) {
    events.sort_by(|a, b| (&a.visitor_id, &a.session_id, a.seq).cmp(&(&b.visitor_id, &b.session_id, b.seq)));
}

/// Removes every event of `visitor` from the blocks of `site` and `day` (their sessions' start
/// day); returns how many. Each block holding them is rewritten without them under its version,
/// and read again if another rewrite got there first.
pub async fn erase_visitor(
    table: &Table,
    site: &str,
    day: UtcDay,
    visitor: VisitorId,
) -> Result<usize, EventStoreError> {
    let mut erased = 0;
    for _attempt in 0..8 {
        let blocks = blocks_of_day(table, site, day).await?;
        let mut conflict = false;
        for b in blocks {
            let events = b.events()?;
            let kept: Vec<StoredEvent> = events.iter().filter(|e| e.visitor_id != visitor).cloned().collect();
            if kept.len() == events.len() {
                continue;
            }
            let key = item! {
                "site_id" => site,
                "day" => day.to_string(),
                "run_id" => b.run_id.as_str(),
                "block" => b.number,
            };
            let same = attr("version").eq(b.version);
            let result = if kept.is_empty() {
                table.delete_with("EventBlock", key, Some(&same)).await.map(|_| ())
            } else {
                let data = block::encode(site, day, &kept)?;
                let update = Update::new()
                    .set("data", AttributeValue::B(data))
                    .set("events", kept.len())
                    .set("version", b.version + 1);
                table.update_with("EventBlock", key, update, Some(&same), false).await.map(|_| ())
            };
            match result {
                Ok(()) => erased += events.len() - kept.len(),
                Err(e) if e.is_condition_failed() => conflict = true,
                Err(e) => return Err(e.into()),
            }
        }
        if !conflict {
            return Ok(erased);
        }
    }
    Err(EventStoreError::Write("the visitor's blocks kept changing while they were erased".into()))
}

/// Block numbers of migrated events start here, clear of any number a run writes itself.
const MIGRATED_FROM: u64 = 1_000_000_000;

/// Converts the per-event items an earlier Tally wrote (`Event`, one item per event) into
/// blocks, unless the table says it was done (`StoreFormat`), then says so. Returns how many
/// events were converted. Run before any process ingests or recovers (`tally serve` does it on
/// start; `tally migrate` on demand).
///
/// Safe to interrupt and run again: each (site, day, run)'s items are read, written as blocks
/// under that run's id, numbered from `MIGRATED_FROM` in key order, create-only, and only
/// then deleted. A rerun after a partial delete finds the blocks already there (the same keys,
/// holding every event), so it only finishes the deletes. Keeping each event's run and epoch
/// means a dead run's unflushed events are still found by recovery (`blocks_of_run`).
pub async fn ensure_blocks(table: &Table, progress: &dyn Fn(u64)) -> Result<u64, EventStoreError> {
    let marker = item! { "format" => "event-blocks" };
    if table.get_with("StoreFormat", marker.clone(), true).await?.is_some() {
        return Ok(0);
    }
    let converted = migrate_event_items(table, progress).await?;
    table.put("StoreFormat", item! { "format" => "event-blocks", "version" => 1 }).await?;
    Ok(converted)
}

async fn migrate_event_items(table: &Table, progress: &dyn Fn(u64)) -> Result<u64, EventStoreError> {
    let mut converted = 0u64;
    type Part = (SiteId, UtcDay, Arc<str>);
    let mut partitions: HashMap<Part, Vec<(StoredEvent, store::Item)>> = HashMap::new();
    let mut scan = table.scan().entity("Event").consistent().pages();
    while let Some(page) = scan.next().await {
        for record in page?.records {
            let e = crate::aggregate::event_from_record(&record).map_err(|e| EventStoreError::Write(e.to_string()))?;
            // The item's own shard, not one worked out again: the key must be the one it has.
            let shard = record.opt_i64("shard").map_err(|e| EventStoreError::Write(e.to_string()))?.unwrap_or(0);
            let key = item! {
                "site_id" => e.site_id.as_str(),
                "day" => e.day.to_string(),
                "shard" => shard,
                "visitor_id" => e.visitor_id.to_string(),
                "session_id" => e.session_id.to_string(),
                "seq" => e.seq,
            };
            partitions.entry((e.site_id.clone(), e.day, e.run.clone())).or_default().push((e, key));
        }
    }
    let mut parts: Vec<_> = partitions.into_iter().collect();
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    for ((site, day, run), mut pairs) in parts {
        pairs.sort_by(|(a, _), (b, _)| {
            (&a.visitor_id, &a.session_id, a.seq).cmp(&(&b.visitor_id, &b.session_id, b.seq))
        });
        let (events, keys): (Vec<StoredEvent>, Vec<store::Item>) = pairs.into_iter().unzip();
        let mut number = MIGRATED_FROM;
        let mut at = 0;
        while at < events.len() {
            let mut end = at;
            let mut bytes = 0;
            while end < events.len()
                && end - at < MAX_BLOCK_EVENTS
                && bytes + approx_size(&events[end]) <= MAX_BLOCK_BYTES
            {
                bytes += approx_size(&events[end]);
                end += 1;
            }
            let end = end.max(at + 1);
            let these = &events[at..end];
            write_block(table, (&run, number), &site, day, these, block::encode(&site, day, these)?).await?;
            number += 1;
            at = end;
        }
        stream::iter(keys)
            .map(|key| async move { table.delete("Event", key).await.map(|_| ()) })
            .buffer_unordered(PARALLEL_READS)
            .try_collect::<Vec<()>>()
            .await?;
        converted += events.len() as u64;
        progress(converted);
    }
    Ok(converted)
}

/// Block numbers for [`store_events`], clear of a run's own and of migrated ones.
static STORED_DIRECTLY: AtomicU64 = AtomicU64::new(500_000_000);

/// Writes `events` as blocks at once, one per (site, day, run), numbered apart from what the
/// block writer uses: for tools and tests that store events without a pipeline.
pub async fn store_events(table: &Table, events: &[StoredEvent]) -> Result<(), EventStoreError> {
    let mut groups: std::collections::BTreeMap<(&str, UtcDay, &str), Vec<StoredEvent>> = Default::default();
    for e in events {
        groups.entry((&e.site_id, e.day, &e.run)).or_default().push(e.clone());
    }
    for ((site, day, run), events) in groups {
        let number = STORED_DIRECTLY.fetch_add(1, Ordering::Relaxed);
        write_block(table, (run, number), site, day, &events, block::encode(site, day, &events)?).await?;
    }
    Ok(())
}

/// Every stored event of the table, block by block (a Scan): for exports of everything and tests.
pub async fn scan_events(table: &Table) -> Result<Vec<StoredEvent>, EventStoreError> {
    let mut out = Vec::new();
    let mut pages = table.scan().entity("EventBlock").consistent().pages();
    while let Some(page) = pages.next().await {
        for r in page?.records {
            out.extend(StoredBlock::from_record(&r)?.events()?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn stored(run: &str, number: u64, replaces: &[u64]) -> StoredBlock {
        StoredBlock {
            run_id: run.into(),
            number,
            max_epoch: 1,
            ts_range: (0, 0),
            data: Vec::new(),
            version: 0,
            replaces: replaces.to_vec(),
        }
    }

    /// A reader that sees a merged block and blocks it replaced (a Query whose pages straddled
    /// the merge) keeps the merged one only; a block of another run with a replaced number stays.
    #[test]
    fn a_merged_block_hides_the_blocks_it_replaced_of_its_own_run() {
        let blocks = vec![
            stored("A", 1, &[]),
            stored("A", 2, &[]),
            stored("A", 3, &[]),
            stored("A", 9, &[1, 2, 5, 6]),
            stored("B", 1, &[]),
            stored("B", 7, &[4]),
        ];
        let kept: Vec<(String, u64)> = without_replaced(blocks).into_iter().map(|b| (b.run_id, b.number)).collect();
        assert_eq!(kept, [("A".into(), 3), ("A".into(), 9), ("B".into(), 1), ("B".into(), 7)]);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// A compaction sizes its groups from blocks read whole as ingestion sizes events: the
        /// same bytes for every row.
        #[test]
        fn a_rows_approximate_size_is_its_events(events in crate::block::tests::events()) {
            let day = crate::block::tests::day("2026-11-22");
            let b = block::read(&block::encode("site-1", day, &events).expect("encodes"), Cols::ALL).expect("reads");
            let rows: Vec<usize> = (0..b.len).map(|r| approx_row_size(&b, r)).collect();
            prop_assert_eq!(rows, events.iter().map(approx_size).collect::<Vec<_>>());
        }

        /// Whatever the size model learned before, right or absurd, a block takes at least the
        /// events it must keep, holds exactly the first ones it says, and, cut, ends within half
        /// a write unit under a boundary (unless it holds only those it must keep).
        #[test]
        fn a_block_is_cut_on_a_write_unit_whatever_the_model_predicts(
            events in crate::block::tests::events().prop_filter("some events", |e| !e.is_empty()),
            learned in prop::collection::vec((1usize..200_000, 1usize..200_000), 0..6),
            keep in 1usize..40,
        ) {
            let table = Table::new(Arc::new(crate::aggregate::tests::NoStore), crate::schema::tally_schema("tally"));
            let shared = Shared {
                table,
                run_id: "01JDB3Y5C8M9V7T2X4K6P0QWER".to_owned(),
                next_block: AtomicU64::new(0),
                sizes: SizeModel::default(),
                small: std::sync::Mutex::default(),
                counters: Arc::default(),
                compact: std::sync::atomic::AtomicBool::new(false),
            };
            learned.iter().for_each(|&(approx, encoded)| shared.sizes.learn(approx, encoded));
            let day = crate::block::tests::day("2026-11-22");
            let events: Vec<Arc<StoredEvent>> = events.into_iter().map(Arc::new).collect();
            let keep = keep.min(events.len());
            let (n, data) = fit(&shared, 7, "site-1", day, &events, keep).expect("encodes");
            prop_assert!(keep <= n && n <= events.len());
            let decoded = block::decode_events(&data).expect("decodes");
            let expected: Vec<StoredEvent> = events[..n].iter().map(|e| (**e).clone()).collect();
            prop_assert_eq!(decoded, expected);
            if n < events.len() && n > keep {
                let item = block_item(("01JDB3Y5C8M9V7T2X4K6P0QWER", 7), "site-1", day, &events[..n], data, 0, &[]);
                let size = store::item_size(&shared.table.build_item("EventBlock", item).expect("an item"));
                let unit = store::limits::WRITE_UNIT_BYTES;
                prop_assert!(size.is_multiple_of(unit) || size % unit >= unit / 2, "{size} bytes");
            }
        }
    }

    /// The model finds a line its blocks lie on, falls back to a ratio when every block is the
    /// same size, and follows a change in the traffic, the newer blocks weighing more.
    #[test]
    fn the_size_model_predicts_from_the_blocks_it_saw() {
        let model = SizeModel::default();
        assert_eq!(model.predict([100].into_iter()), None, "nothing seen");
        model.learn(4000, 1300);
        assert_eq!(model.predict([100].into_iter()), None, "one block is no line");
        for approx in [1000, 7000, 3000, 5000, 2000] {
            model.learn(approx, 300 + approx / 4);
        }
        let (fixed, slope) = model.line().expect("a line");
        assert!((fixed - 300.0).abs() < 1.0 && (slope - 0.25).abs() < 1e-3, "{fixed} {slope}");
        assert_eq!(model.predict([2000, 2000, 4000].into_iter()), Some(vec![800, 1300, 2300]));

        let alike = SizeModel::default();
        (0..5).for_each(|_| alike.learn(2000, 500));
        assert_eq!(alike.predict([1000, 1000].into_iter()), Some(vec![250, 500]), "a plain ratio");

        // The traffic changes: 100 blocks later the older line has all but faded.
        for i in 0..100 {
            let approx = 1000 + 500 * (i % 8);
            model.learn(approx, 100 + approx / 2);
        }
        let predicted = model.predict([6000].into_iter()).expect("a line")[0];
        assert!((predicted as i64 - 3100).abs() < 30, "{predicted}");
    }
}
