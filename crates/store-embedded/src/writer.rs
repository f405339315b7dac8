//! The single writer thread: group commit of every write operation.
//!
//! Callers send a [`Job`] down a channel and wait for its answer. The writer takes the first
//! job, drains whatever else is queued, applies each operation in turn inside one redb write
//! transaction, makes the group durable — one synced record of its effects in the journal
//! (`crate::journal`), then a redb commit without an fsync; or, at a checkpoint, a durable redb
//! commit — and only then answers every caller (DESIGN.md, "The journal"). Each operation
//! validates and checks its conditions before it writes anything, so an operation that fails
//! leaves nothing behind and the others in the group are unaffected. If redb itself fails (or
//! an operation panics), the whole transaction is dropped and the group's operations are
//! retried one transaction each, so one bad operation cannot take its neighbours down.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redb::{Durability, ReadableTable, ReadableTableMetadata};
use store::limits::{IDEMPOTENCY_WINDOW_SECS, MAX_BATCH_WRITE, MAX_TRANSACT_BYTES, MAX_TRANSACT_ITEMS};
use store::{
    BatchWriteItem, BatchWriteItemOutput, CancellationCode, CancellationReason, ConditionCheck, DeleteItem, Item,
    PutItem, ReturnValues, StoreError, TableDefinition, TableDescription, TableStatus, TransactWrite,
    TransactWriteItems, TransactWriteItemsOutput, UpdateItem, WriteOutput, WriteRequest, item_size,
};
use tokio::sync::oneshot;

use crate::capacity::{Kind, PerTable, Units, read_units, write_units};
use crate::codec;
use crate::db::{Compacted, Shared, load, replace_item, store_item};
use crate::effects::{On, Tx};
use crate::expr::{Condition, ExprContext, Projection, Update};
use crate::journal::{self, Journal};
use crate::layout::{self, META, OpError, TOKEN_TIMES, TOKENS, bytes_table};
use crate::schema::{self, TableInfo};

/// Most operations applied in one group commit; bounds the transaction and the latency of
/// the first caller in the group.
const MAX_GROUP: usize = 512;
/// Most expired items one sweep operation deletes, so a sweep never holds the writer long.
pub const SWEEP_BATCH: usize = 1000;

/// A write operation for the writer thread, with the [`Reply`] its typed answer goes to.
pub enum Job {
    /// `CreateTable`.
    CreateTable(TableDefinition, Reply<TableDescription>),
    /// `DeleteTable`.
    DeleteTable(String, Reply<TableDescription>),
    /// `PutItem`, with its condition already parsed by the caller ([`put_expressions`]).
    Put(PutItem, Option<Condition>, Reply<WriteOutput>),
    /// `UpdateItem`, with its expressions already parsed by the caller ([`update_expressions`]).
    Update(UpdateItem, Update, Option<Condition>, Reply<WriteOutput>),
    /// `DeleteItem`.
    Delete(DeleteItem, Reply<WriteOutput>),
    /// `BatchWriteItem`.
    Batch(BatchWriteItem, Reply<BatchWriteItemOutput>),
    /// `TransactWriteItems`.
    Transact(TransactWriteItems, Reply<TransactWriteItemsOutput>),
    /// Deletes items that expired before `now` (epoch seconds).
    Sweep {
        /// The time to sweep at.
        now: u64,
        /// Where the count goes.
        reply: Reply<Swept>,
    },
}

/// What one sweep did.
#[derive(Debug)]
pub struct Swept {
    /// Items deleted.
    pub deleted: usize,
    /// Whether the sweep stopped at its batch size, so more may be due.
    pub more: bool,
}

/// The caller waiting for a job's answer, and that answer while the job's group has yet to
/// commit.
pub struct Reply<T> {
    to: oneshot::Sender<Result<T, StoreError>>,
    held: Option<Result<T, StoreError>>,
}

impl<T> Reply<T> {
    /// A reply and the receiver its answer arrives on.
    pub fn channel() -> (Reply<T>, oneshot::Receiver<Result<T, StoreError>>) {
        let (to, answer) = oneshot::channel();
        (Reply { to, held: None }, answer)
    }

    /// Keeps the operation's result until its group commits; a storage failure is handed back
    /// instead, to abort the group.
    fn hold(&mut self, result: Result<T, OpError>) -> Result<(), String> {
        self.held = Some(match result {
            Ok(answer) => Ok(answer),
            Err(OpError::Store(e)) => Err(e),
            Err(OpError::Fatal(e)) => return Err(e),
        });
        Ok(())
    }

    /// Answers with the result held (the group committed).
    fn send(self) {
        if let Some(result) = self.held {
            let _ = self.to.send(result);
        }
    }

    /// Answers with `error` whatever was held (the group failed).
    fn fail(self, error: StoreError) {
        let _ = self.to.send(Err(error));
    }
}

impl Job {
    /// Whether the job creates or deletes a table (which the journal does not record).
    fn changes_schema(&self) -> bool {
        matches!(self, Job::CreateTable(..) | Job::DeleteTable(..))
    }

    /// Answers the caller with the result held (the job's group committed).
    fn answer(self) {
        match self {
            Job::CreateTable(_, reply) | Job::DeleteTable(_, reply) => reply.send(),
            Job::Put(.., reply) | Job::Update(.., reply) | Job::Delete(_, reply) => reply.send(),
            Job::Batch(_, reply) => reply.send(),
            Job::Transact(_, reply) => reply.send(),
            Job::Sweep { reply, .. } => reply.send(),
        }
    }

    /// Answers the caller with `error` (the job's group failed).
    fn fail(self, error: StoreError) {
        match self {
            Job::CreateTable(_, reply) | Job::DeleteTable(_, reply) => reply.fail(error),
            Job::Put(.., reply) | Job::Update(.., reply) | Job::Delete(_, reply) => reply.fail(error),
            Job::Batch(_, reply) => reply.fail(error),
            Job::Transact(_, reply) => reply.fail(error),
            Job::Sweep { reply, .. } => reply.fail(error),
        }
    }
}

/// The writer's state.
pub struct Writer {
    shared: Arc<Shared>,
    /// Table definitions as of the open transaction (ahead of `shared` until the commit).
    defs: BTreeMap<String, Arc<TableInfo>>,
    defs_changed: bool,
    journal: Journal,
    /// The sequence number of the last group committed.
    seq: u64,
    checkpoint: Checkpoint,
    last_checkpoint: Instant,
    /// When a group last committed a change.
    last_commit: Instant,
    /// Set when the journal could not be written or emptied: from then on every write fails
    /// until the store is reopened (which replays what the journal holds).
    failed: Option<String>,
    compaction: Compaction,
    /// The database file, whose bytes on disk decide when to compact (`None`: a test backend,
    /// compacted whenever something was written since).
    file: Option<PathBuf>,
    /// The file's bytes on disk after the last compaction, or at the open.
    compacted_bytes: Option<u64>,
    /// Whether a group committed since the last compaction.
    written_since_compaction: bool,
    /// Set at a rest point (a second checkpoint in a row after a quiet interval, an idle
    /// checkpoint): the writer considers compacting before it takes the next job.
    compaction_due: bool,
    /// Checkpoints in a row whose interval wrote little.
    quiet_checkpoints: u32,
    /// After readers kept the database busy, compaction waits until then.
    compaction_retry: Instant,
}

/// When the writer makes a group's commit durable in redb itself and empties the journal.
#[derive(Clone, Copy, Debug)]
pub struct Checkpoint {
    /// At least this often while writes arrive.
    pub interval: Duration,
    /// Or once the journal holds this many bytes.
    pub journal_bytes: u64,
    /// After this long without a write, the writer checkpoints and cuts the journal file to
    /// nothing ([`crate::journal::Journal::cut`]): a busy writer reuses the file, which keeps
    /// its syncs cheap, and a store whose load fell gives the space back.
    pub idle: Duration,
}

impl Default for Checkpoint {
    fn default() -> Self {
        Checkpoint { interval: Duration::from_secs(2), journal_bytes: 64 << 20, idle: Duration::from_secs(2) }
    }
}

/// A journal file smaller than this is never cut at a checkpoint (only when idle or closing).
const CUT_FROM: u64 = 1 << 20;

/// When the writer compacts the database file (DESIGN.md, "Compaction at rest"): at a rest point
/// — the second checkpoint in a row after an interval that wrote little, the idle checkpoint, the
/// close — once the file takes at least `growth` bytes on disk more than after the last
/// compaction (or the open), and at least an eighth more.
#[derive(Clone, Copy, Debug)]
pub struct Compaction {
    /// The least growth worth a compaction; `None` never compacts.
    pub growth: Option<u64>,
    /// While the store serves, a file larger than this is left for the close: readers and
    /// writers wait while it is compacted, and the pause grows with the file (0.4–0.75 s for
    /// 250 MB, 4.2 s for 2.3 GB).
    pub serving_max: u64,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction { growth: Some(4 << 20), serving_max: 512 << 20 }
    }
}

/// How long a compaction waits for read transactions begun before it to end.
const COMPACTION_DRAIN: Duration = Duration::from_millis(100);
/// After a read transaction outlived that wait (a backup), compaction waits this long to try again.
const COMPACTION_RETRY: Duration = Duration::from_secs(60);

/// The bytes `file` takes on disk (its allocated blocks), `None` if it cannot be read.
fn disk_bytes(file: &std::path::Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(file).ok().map(|m| m.blocks() * 512)
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Writer {
    /// A writer over the shared state, appending to `journal` after group `seq`.
    pub fn new(shared: Arc<Shared>, journal: Journal, seq: u64, checkpoint: Checkpoint) -> Self {
        let defs = store::sync::read(&shared.tables).clone();
        Writer {
            shared,
            defs,
            defs_changed: false,
            journal,
            seq,
            checkpoint,
            last_checkpoint: Instant::now(),
            last_commit: Instant::now(),
            failed: None,
            compaction: Compaction { growth: None, ..Compaction::default() },
            file: None,
            compacted_bytes: None,
            written_since_compaction: false,
            compaction_due: false,
            quiet_checkpoints: 0,
            compaction_retry: Instant::now(),
        }
    }

    /// Compacts the database (at `file`, if on one) as `compaction` says.
    pub fn compacting(mut self, compaction: Compaction, file: Option<PathBuf>) -> Self {
        self.compaction = compaction;
        self.compacted_bytes = file.as_deref().and_then(disk_bytes);
        self.file = file;
        self
    }

    /// Runs until every sender is gone, then checkpoints and cuts the journal. Idle for
    /// [`Checkpoint::idle`] with a journal to empty, it does the same and waits on.
    pub fn run(mut self, rx: Receiver<Job>) {
        loop {
            if std::mem::take(&mut self.compaction_due) {
                self.compact(true);
            }
            let first = if self.failed.is_none() && self.journal.file_len() > 0 {
                // Idle means no commit for a while; jobs that change nothing (reads, sweeps with
                // nothing to delete, failed conditions) do not count.
                let quiet = self.last_commit.elapsed();
                if quiet >= self.checkpoint.idle {
                    self.rest("an idle checkpoint failed; the journal is kept");
                    continue;
                }
                match rx.recv_timeout(self.checkpoint.idle - quiet) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            };
            let mut jobs = vec![first];
            while jobs.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            self.run_group(jobs);
        }
        self.rest("the last checkpoint failed; the journal will be replayed on the next open");
        self.compact(false);
    }

    /// With nothing to write: checkpoints if the journal holds records, then cuts its file.
    /// A failure is logged and changes nothing else: a failed checkpoint committed nothing and
    /// leaves the journal's records to replay (the next idle moment tries again), and a failure
    /// to cut after a checkpoint only keeps the file's size.
    fn rest(&mut self, failure: &str) {
        // Whatever happens, the next try is one idle period away.
        self.last_commit = Instant::now();
        if self.failed.is_some() {
            return;
        }
        if self.journal.len() > 0
            && let Err(e) = self.checkpoint_now()
        {
            tracing::error!(error = %e, "{failure}");
            return;
        }
        if let Err(e) = self.journal.cut() {
            tracing::warn!(error = %e, "cutting the emptied journal file failed; it keeps its size");
        }
        self.compaction_due = true;
    }

    /// At a rest point, with the journal empty (everything committed is durable in the file):
    /// compacts the database file if it grew enough since the last compaction (see
    /// [`Compaction`]); `serving` leaves files over [`Compaction::serving_max`] for the close.
    /// redb's compaction commits durably, in two phases, and changes no item and not
    /// `sys/journal`, so a crash during it leaves the last checkpoint or a later one, every one
    /// naming the writer's last group, and the journal replays nothing it holds.
    fn compact(&mut self, serving: bool) {
        let Some(growth) = self.compaction.growth else {
            return;
        };
        if self.failed.is_some()
            || self.journal.len() > 0
            || !self.written_since_compaction
            || (serving && Instant::now() < self.compaction_retry)
        {
            return;
        }
        let before = self.file.as_deref().and_then(disk_bytes);
        if let (Some(now), Some(base)) = (before, self.compacted_bytes)
            && (now < base + growth.max(base / 8) || (serving && now > self.compaction.serving_max))
        {
            return;
        }
        match self.shared.compact(COMPACTION_DRAIN) {
            Ok(Compacted::Done(pause)) => {
                let after = self.file.as_deref().and_then(disk_bytes);
                self.compacted_bytes = after;
                self.written_since_compaction = false;
                self.shared.record_compaction(pause, before, after);
                tracing::info!(
                    pause_ms = pause.as_millis() as u64,
                    before = before.unwrap_or(0),
                    after = after.unwrap_or(0),
                    "compacted the database file"
                );
            }
            Ok(Compacted::ReadersBusy) => {
                self.compaction_retry = Instant::now() + COMPACTION_RETRY;
                tracing::debug!("a read transaction kept the database busy; compaction waits");
            }
            Err(e) => {
                // The journal was empty: everything acknowledged is durable, and the writer goes
                // on. If redb refuses further writes (a failed commit), each group fails and is
                // never acknowledged, until a reopen repairs the file.
                self.compaction_retry = Instant::now() + COMPACTION_RETRY;
                tracing::error!(error = %e, "compacting the database file failed");
            }
        }
    }

    fn run_group(&mut self, mut jobs: Vec<Job>) {
        match self.try_group(&mut jobs) {
            Ok(()) => {
                for job in jobs {
                    job.answer();
                }
            }
            Err(fatal) => {
                self.reset_defs();
                if jobs.len() == 1 {
                    for job in jobs {
                        tracing::error!(error = %fatal, "write failed");
                        job.fail(StoreError::Internal(fatal.clone()));
                    }
                } else {
                    // Isolate the failing operation: every other one still gets applied.
                    for job in jobs {
                        self.run_group(vec![job]);
                    }
                }
            }
        }
    }

    fn reset_defs(&mut self) {
        self.defs = store::sync::read(&self.shared.tables).clone();
        self.defs_changed = false;
    }

    fn checkpoint_due(&self) -> bool {
        self.last_checkpoint.elapsed() >= self.checkpoint.interval
            || self.journal.len() >= self.checkpoint.journal_bytes
    }

    /// Makes everything committed so far durable in redb and starts the journal over.
    fn checkpoint_now(&mut self) -> Result<(), String> {
        let mut txn = self.shared.begin_write().map_err(|e| e.to_string())?;
        txn.set_durability(Durability::Immediate).map_err(|e| e.to_string())?;
        journal::set_applied(&txn, self.seq).map_err(fatal_text)?;
        txn.commit().map_err(|e| e.to_string())?;
        self.emptied();
        Ok(())
    }

    /// After a durable commit: the journal's records are all in redb now, so it starts over; and
    /// if the interval just ended wrote a small part of what the file holds (the load fell; a
    /// lease renewed every second is still a little load), the file is cut too.
    fn emptied(&mut self) {
        self.last_checkpoint = Instant::now();
        let written = self.journal.len();
        let held = self.journal.file_len();
        self.journal.restart();
        if held > CUT_FROM.max(4 * written)
            && let Err(e) = self.journal.cut()
        {
            tracing::warn!(error = %e, "cutting the emptied journal file failed; it keeps its size");
        }
        // Two intervals in a row wrote little of what the file held (or of a small file): the
        // load fell and stayed low, a rest point. One such interval in the middle of a busy
        // spell (a slow moment) is not.
        if 4 * written < held.max(CUT_FROM) {
            self.quiet_checkpoints = self.quiet_checkpoints.saturating_add(1);
            self.compaction_due = self.quiet_checkpoints >= 2;
        } else {
            self.quiet_checkpoints = 0;
        }
    }

    /// Applies the jobs in one transaction and commits it, each job holding its answer until
    /// then; `Err` means nothing was committed.
    ///
    /// The group is made durable either by a journal record (synced before redb commits
    /// without an fsync) or, at a checkpoint and for table creation and deletion (which the
    /// journal does not record), by a durable redb commit.
    fn try_group(&mut self, jobs: &mut [Job]) -> Result<(), String> {
        if let Some(failed) = &self.failed {
            return Err(format!("the store must be reopened after an earlier failure: {failed}"));
        }
        let started = Instant::now();
        let schema_change = jobs.iter().any(Job::changes_schema);
        let durable = schema_change || self.checkpoint_due();
        let mut txn = self.shared.begin_write().map_err(|e| e.to_string())?;
        txn.set_durability(if durable { Durability::Immediate } else { Durability::None })
            .map_err(|e| e.to_string())?;
        let tx = Tx::new(&txn);
        for job in jobs.iter_mut() {
            let outcome = catch_unwind(AssertUnwindSafe(|| self.apply(&tx, job)));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(fatal)) => return Err(fatal),
                Err(panic) => {
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "panic".to_string());
                    return Err(format!("operation panicked: {message}"));
                }
            }
        }
        let effects = tx.into_effects();
        if !durable && effects.is_empty() {
            // Nothing was written (every operation failed its condition): nothing to commit.
            return Ok(());
        }
        let seq = self.seq + 1;
        journal::set_applied(&txn, seq).map_err(fatal_text)?;
        let mut journal_time = None;
        if !durable {
            let appending = Instant::now();
            if let Err(e) = self.journal.append(seq, &effects) {
                // The record may or may not be on disk: refuse every write until a reopen settles it.
                let message = format!("cannot write the journal: {e}");
                self.failed = Some(message.clone());
                return Err(message);
            }
            journal_time = Some(appending.elapsed());
        }
        let committed = txn.commit();
        if let Err(e) = committed {
            let message = e.to_string();
            if !durable {
                // The journal holds the group: a reopen replays it, so no later group may follow it.
                self.failed = Some(message.clone());
            }
            return Err(message);
        }
        self.seq = seq;
        self.last_commit = Instant::now();
        self.shared.record_group(jobs.len(), started.elapsed(), journal_time);
        self.written_since_compaction = true;
        if self.defs_changed {
            let mut tables = store::sync::write(&self.shared.tables);
            *tables = self.defs.clone();
            self.defs_changed = false;
        }
        if durable {
            self.emptied();
        }
        Ok(())
    }

    fn info(&self, table: &str) -> Result<Arc<TableInfo>, StoreError> {
        self.defs.get(table).cloned().ok_or_else(|| StoreError::ResourceNotFound("Requested resource not found".into()))
    }

    /// Applies one job, holding its answer in its [`Reply`]; `Err` is a storage failure that
    /// aborts the group.
    fn apply(&mut self, txn: &Tx, job: &mut Job) -> Result<(), String> {
        match job {
            Job::CreateTable(def, reply) => reply.hold(self.create_table(txn, def)),
            Job::DeleteTable(name, reply) => reply.hold(self.delete_table(txn, name)),
            Job::Put(req, condition, reply) => {
                let parsed = self.plan_put(req, condition.as_ref().map(Held::Borrowed));
                reply.hold(parsed.map_err(OpError::from).and_then(|parsed| self.single(txn, parsed)))
            }
            Job::Update(req, update, condition, reply) => {
                let parsed = self.plan_update(req, Held::Borrowed(update), condition.as_ref().map(Held::Borrowed));
                reply.hold(parsed.map_err(OpError::from).and_then(|parsed| self.single(txn, parsed)))
            }
            Job::Delete(req, reply) => {
                let parsed = self.parse_delete(req);
                reply.hold(parsed.map_err(OpError::from).and_then(|parsed| self.single(txn, parsed)))
            }
            Job::Batch(req, reply) => reply.hold(self.batch(txn, req)),
            Job::Transact(req, reply) => reply.hold(self.transact(txn, req)),
            Job::Sweep { now, reply } => reply.hold(self.sweep(txn, *now)),
        }
    }

    fn create_table(&mut self, txn: &Tx, def: &TableDefinition) -> Result<TableDescription, OpError> {
        schema::check_definition(def)?;
        if self.defs.contains_key(&def.name) {
            return Err(StoreError::ResourceInUse(format!("Table already exists: {}", def.name)).into());
        }
        let info = TableInfo::new(def.clone());
        txn.tables().close()?;
        let txn = txn.txn();
        txn.open_table(META)?.insert(def.name.as_str(), codec::encode_definition(def).as_slice())?;
        txn.open_table(bytes_table(&info.redb_name))?;
        for index in &info.indexes {
            txn.open_table(bytes_table(&index.redb_name))?;
        }
        self.defs.insert(def.name.clone(), Arc::new(info));
        self.defs_changed = true;
        Ok(TableDescription { definition: def.clone(), status: TableStatus::Active, item_count: 0, size_bytes: 0 })
    }

    fn delete_table(&mut self, txn: &Tx, name: &str) -> Result<TableDescription, OpError> {
        let info = self.defs.get(name).cloned().ok_or_else(|| {
            StoreError::ResourceNotFound(format!("Requested resource not found: Table: {name} not found"))
        })?;
        txn.tables().close()?;
        let txn = txn.txn();
        let (item_count, size_bytes) = {
            let base = txn.open_table(bytes_table(&info.redb_name))?;
            (base.len()?, base.stats()?.stored_bytes())
        };
        txn.open_table(META)?.remove(name)?;
        txn.delete_table(bytes_table(&info.redb_name))?;
        for index in &info.indexes {
            txn.delete_table(bytes_table(&index.redb_name))?;
        }
        // The table's TTL entries stay behind; a sweep drops entries whose item is gone.
        self.defs.remove(name);
        self.defs_changed = true;
        Ok(TableDescription { definition: info.def.clone(), status: TableStatus::Deleting, item_count, size_bytes })
    }

    fn target(&self, table: &str, key: &Item) -> Result<Target, StoreError> {
        let info = self.info(table)?;
        info.check_key(key)?;
        let bytes = info.base_key(key);
        Ok(Target { info, key: bytes, key_item: key.clone() })
    }

    fn parse_put<'r>(&self, req: &'r PutItem) -> Result<Parsed<'r>, StoreError> {
        self.plan_put(req, put_expressions(req)?.map(Held::Owned))
    }

    fn plan_put<'r>(&self, req: &'r PutItem, condition: Option<Held<'r, Condition>>) -> Result<Parsed<'r>, StoreError> {
        let info = self.info(&req.table)?;
        info.check_put(&req.item)?;
        let key_item = info.key_of(&req.item);
        let key = info.base_key(&req.item);
        Ok(Parsed {
            target: Target { info, key, key_item },
            condition,
            action: Action::Put(&req.item),
            return_values: req.return_values,
            return_old_on_failure: req.return_old_on_condition_failure,
        })
    }

    fn parse_update(&self, req: &UpdateItem) -> Result<Parsed<'static>, StoreError> {
        let (update, condition) = update_expressions(req)?;
        self.plan_update(req, Held::Owned(update), condition.map(Held::Owned))
    }

    fn plan_update<'r>(
        &self,
        req: &UpdateItem,
        update: Held<'r, Update>,
        condition: Option<Held<'r, Condition>>,
    ) -> Result<Parsed<'r>, StoreError> {
        let target = self.target(&req.table, &req.key)?;
        let written = update.top_level_attributes();
        let paths = update.updated_paths();
        for name in target.info.primary_key_names() {
            if written.contains(name) {
                return Err(StoreError::validation(format!(
                    "One or more parameter values were invalid: Cannot update attribute {name}. This attribute is part of the key"
                )));
            }
        }
        Ok(Parsed {
            target,
            condition,
            action: Action::Update(update, paths),
            return_values: req.return_values,
            return_old_on_failure: req.return_old_on_condition_failure,
        })
    }

    fn parse_delete(&self, req: &DeleteItem) -> Result<Parsed<'static>, StoreError> {
        let mut ctx = ExprContext::new(&req.attrs);
        let condition = parse_condition(req.condition.as_deref(), &mut ctx)?;
        ctx.finish()?;
        check_single_return(req.return_values)?;
        Ok(Parsed {
            target: self.target(&req.table, &req.key)?,
            condition: condition.map(Held::Owned),
            action: Action::Delete,
            return_values: req.return_values,
            return_old_on_failure: req.return_old_on_condition_failure,
        })
    }

    fn parse_check(&self, req: &ConditionCheck) -> Result<Parsed<'static>, StoreError> {
        let mut ctx = ExprContext::new(&req.attrs);
        let condition = Condition::parse(&req.condition, &mut ctx)?;
        ctx.finish()?;
        Ok(Parsed {
            target: self.target(&req.table, &req.key)?,
            condition: Some(Held::Owned(condition)),
            action: Action::Check,
            return_values: ReturnValues::None,
            return_old_on_failure: req.return_old_on_condition_failure,
        })
    }

    /// Checks the condition and computes the new item, writing nothing.
    fn evaluate<'p>(&self, txn: &Tx, parsed: &Parsed<'p>) -> Result<Planned<'p>, OpError> {
        let target = &parsed.target;
        let old = load(txn, &target.info, &target.key)?;
        if let Some(condition) = &parsed.condition
            && !condition.evaluate(old.as_ref())?
        {
            return Err(StoreError::ConditionalCheckFailed {
                item: if parsed.return_old_on_failure { old } else { None },
            }
            .into());
        }
        let new = match &parsed.action {
            // The request's own item: written from where it is, not copied.
            Action::Put(item) => Some(Cow::Borrowed(*item)),
            Action::Delete => None,
            Action::Check => old.clone().map(Cow::Owned),
            Action::Update(update, _) => {
                let mut item = old.clone().unwrap_or_else(|| target.key_item.clone());
                update.apply(&mut item)?;
                target.info.check_item(&item, "Item size to update has exceeded the maximum allowed size")?;
                Some(Cow::Owned(item))
            }
        };
        Ok(Planned { old, new })
    }

    fn single(&self, txn: &Tx, parsed: Parsed) -> Result<WriteOutput, OpError> {
        let target = &parsed.target;
        let (planned, units) = match (&parsed.condition, &parsed.action) {
            // Without a condition a put or delete needs no look first: the base table's
            // insert or remove hands back the item it replaced.
            (None, Action::Put(item)) => {
                let (old, units) = replace_item(txn, &target.info, &target.key, Some(item))?;
                // A put returns at most the old item (`check_single_return`), so the new one is not kept.
                (Planned { old, new: None }, units)
            }
            (None, Action::Delete) => {
                let (old, units) = replace_item(txn, &target.info, &target.key, None)?;
                (Planned { old, new: None }, units)
            }
            _ => {
                let planned = self.evaluate(txn, &parsed)?;
                let units = store_item(txn, &target.info, &target.key, planned.old.as_ref(), planned.new.as_deref())?;
                (planned, units)
            }
        };
        let attributes = match (&parsed.action, parsed.return_values) {
            (_, ReturnValues::None) => None,
            (_, ReturnValues::AllOld) => planned.old,
            (_, ReturnValues::AllNew) => planned.new.map(Cow::into_owned),
            (Action::Update(_, paths), ReturnValues::UpdatedOld) => updated(planned.old.as_ref(), paths),
            (Action::Update(_, paths), ReturnValues::UpdatedNew) => updated(planned.new.as_deref(), paths),
            _ => None,
        };
        Ok(WriteOutput { attributes, consumed_capacity: units.consumed(&target.info.def.name, Kind::Write) })
    }

    fn batch(&self, txn: &Tx, req: &BatchWriteItem) -> Result<BatchWriteItemOutput, OpError> {
        let total: usize = req.requests.values().map(Vec::len).sum();
        if total > MAX_BATCH_WRITE {
            return Err(StoreError::validation("Too many items requested for the BatchWriteItem call").into());
        }
        if total == 0 || req.requests.values().any(Vec::is_empty) {
            return Err(StoreError::validation(
                "1 validation error detected: Value null at 'requestItems' failed to satisfy constraint: Member must have length greater than or equal to 1",
            )
            .into());
        }
        let mut writes = Vec::with_capacity(total);
        for (table, requests) in &req.requests {
            let info = self.info(table)?;
            let mut seen = BTreeSet::new();
            for request in requests {
                let (key, new) = match request {
                    WriteRequest::Put(item) => {
                        info.check_put(item)?;
                        (info.base_key(item), Some(item))
                    }
                    WriteRequest::Delete(key) => {
                        info.check_key(key)?;
                        (info.base_key(key), None)
                    }
                };
                if !seen.insert(key.clone()) {
                    return Err(StoreError::validation("Provided list of item keys contains duplicates").into());
                }
                writes.push((info.clone(), key, new));
            }
        }
        let mut per_table = PerTable::default();
        for (info, key, new) in writes {
            let (_, units) = replace_item(txn, &info, &key, new)?;
            per_table.add(&info.def.name, &units);
        }
        Ok(BatchWriteItemOutput {
            unprocessed_items: BTreeMap::new(),
            consumed_capacity: per_table.consumed(Kind::Write),
        })
    }

    fn transact(&self, txn: &Tx, req: &TransactWriteItems) -> Result<TransactWriteItemsOutput, OpError> {
        if req.items.is_empty() || req.items.len() > MAX_TRANSACT_ITEMS {
            return Err(StoreError::validation(format!(
                "1 validation error detected: Value at 'transactItems' failed to satisfy constraint: Member must have length less than or equal to {MAX_TRANSACT_ITEMS} and greater than or equal to 1"
            ))
            .into());
        }
        let mut parsed = Vec::with_capacity(req.items.len());
        let mut seen = BTreeSet::new();
        let mut bytes = 0usize;
        for item in &req.items {
            let p = match item {
                TransactWrite::Put(r) => {
                    bytes += item_size(&r.item);
                    self.parse_put(r)?
                }
                TransactWrite::Update(r) => self.parse_update(r)?,
                TransactWrite::Delete(r) => self.parse_delete(r)?,
                TransactWrite::ConditionCheck(r) => self.parse_check(r)?,
            };
            if !seen.insert((p.target.info.def.name.clone(), p.target.key.clone())) {
                return Err(StoreError::validation(
                    "Transaction request cannot include multiple operations on one item",
                )
                .into());
            }
            parsed.push(p);
        }
        if bytes > MAX_TRANSACT_BYTES {
            return Err(StoreError::validation("Transaction request cannot be larger than 4 MB").into());
        }
        let now = now_secs();
        let fingerprint = req.client_request_token.as_ref().map(|_| fingerprint(&format!("{:?}", req.items)));
        if let (Some(token), Some(fp)) = (&req.client_request_token, fingerprint)
            && let Some((time, seen_fp)) = token_entry(txn, token)?
            && now.saturating_sub(time) < IDEMPOTENCY_WINDOW_SECS
        {
            if seen_fp != fp {
                return Err(StoreError::IdempotentParameterMismatch(
                    "Request with the same client token was made with different parameters".into(),
                )
                .into());
            }
            // A repeat: answer success again without writing, billing the reads of the items.
            let mut per_table = PerTable::default();
            for p in &parsed {
                let size = load(txn, &p.target.info, &p.target.key)?.as_ref().map_or(0, item_size);
                per_table.add(&p.target.info.def.name, &Units::table(read_units(size, true)));
            }
            return Ok(TransactWriteItemsOutput { consumed_capacity: per_table.consumed(Kind::Read) });
        }
        let mut plans = Vec::with_capacity(parsed.len());
        let mut reasons = Vec::with_capacity(parsed.len());
        let mut failed = false;
        for p in &parsed {
            match self.evaluate(txn, p) {
                Ok(plan) => {
                    reasons.push(CancellationReason::new(CancellationCode::None));
                    plans.push(Some(plan));
                }
                Err(OpError::Store(e)) => {
                    failed = true;
                    reasons.push(reason_for(e));
                    plans.push(None);
                }
                Err(fatal) => return Err(fatal),
            }
        }
        if failed {
            return Err(StoreError::TransactionCanceled { reasons }.into());
        }
        let mut per_table = PerTable::default();
        for (p, plan) in parsed.iter().zip(plans.into_iter().flatten()) {
            let units = if matches!(p.action, Action::Check) {
                Units::table(write_units(plan.old.as_ref().map_or(0, item_size)))
            } else {
                store_item(txn, &p.target.info, &p.target.key, plan.old.as_ref(), plan.new.as_deref())?
            };
            per_table.add(&p.target.info.def.name, &units.scaled(2.0));
        }
        if let (Some(token), Some(fp)) = (&req.client_request_token, fingerprint) {
            record_token(txn, token, now, fp)?;
        }
        Ok(TransactWriteItemsOutput { consumed_capacity: per_table.consumed(Kind::Write) })
    }

    fn sweep(&self, txn: &Tx, now: u64) -> Result<Swept, OpError> {
        // DynamoDB ignores expiry times more than five years in the past.
        let oldest = now.saturating_sub(5 * 365 * 24 * 3600);
        let due: Vec<Vec<u8>> = txn.tables().ttl(|ttl| {
            let lo = oldest.to_be_bytes();
            let hi = now.to_be_bytes();
            let mut due = Vec::new();
            for entry in ttl.range::<&[u8]>(lo.as_slice()..hi.as_slice())? {
                let (k, _) = entry?;
                due.push(k.value().to_vec());
                if due.len() >= SWEEP_BATCH {
                    break;
                }
            }
            Ok(due)
        })?;
        let more = due.len() >= SWEEP_BATCH;
        let mut deleted = 0;
        for k in due {
            let Some((expiry, table, key)) = layout::parse_ttl_key(&k) else {
                txn.remove(On::Ttl, &k, false)?;
                continue;
            };
            let info = self.defs.get(&table);
            let item = match info {
                Some(info) => load(txn, info, key)?,
                None => None,
            };
            match (info, item) {
                (Some(info), Some(item)) if info.expiry(&item) == Some(expiry) => {
                    store_item(txn, info, key, Some(&item), None)?;
                    deleted += 1;
                }
                _ => {
                    // A stale entry: its table or item is gone, or the item's expiry changed.
                    txn.remove(On::Ttl, &k, false)?;
                }
            }
        }
        purge_tokens(txn, now)?;
        Ok(Swept { deleted, more })
    }
}

/// The item a write addresses.
struct Target {
    info: Arc<TableInfo>,
    key: Vec<u8>,
    key_item: Item,
}

/// A parsed expression: parsed by the caller and borrowed from the queued operation, or parsed
/// by the writer (inside transactions) and owned.
enum Held<'r, T> {
    Owned(T),
    Borrowed(&'r T),
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Held::Owned(t) => t,
            Held::Borrowed(t) => t,
        }
    }
}

enum Action<'r> {
    Put(&'r Item),
    /// The update and the paths it touches (for `UPDATED_OLD` and `UPDATED_NEW`).
    Update(Held<'r, Update>, Projection),
    Delete,
    Check,
}

/// A validated write, ready to be evaluated against the current item.
struct Parsed<'r> {
    target: Target,
    condition: Option<Held<'r, Condition>>,
    action: Action<'r>,
    return_values: ReturnValues,
    return_old_on_failure: bool,
}

/// The item before and after a write.
struct Planned<'p> {
    old: Option<Item>,
    /// Borrowed from the request for a put.
    new: Option<Cow<'p, Item>>,
}

fn fatal_text(e: OpError) -> String {
    match e {
        OpError::Store(e) => e.to_string(),
        OpError::Fatal(e) => e,
    }
}

/// A put's condition, parsed and checked against its placeholders. Needs nothing but the
/// request, so the caller does it before queueing for the writer.
pub fn put_expressions(req: &PutItem) -> Result<Option<Condition>, StoreError> {
    let mut ctx = ExprContext::new(&req.attrs);
    let condition = parse_condition(req.condition.as_deref(), &mut ctx)?;
    ctx.finish()?;
    check_single_return(req.return_values)?;
    Ok(condition)
}

/// An update's update expression and condition, parsed and checked like [`put_expressions`].
pub fn update_expressions(req: &UpdateItem) -> Result<(Update, Option<Condition>), StoreError> {
    let mut ctx = ExprContext::new(&req.attrs);
    let update = Update::parse(&req.update, &mut ctx)?;
    let condition = parse_condition(req.condition.as_deref(), &mut ctx)?;
    ctx.finish()?;
    Ok((update, condition))
}

fn parse_condition(text: Option<&str>, ctx: &mut ExprContext<'_>) -> Result<Option<Condition>, StoreError> {
    text.map(|t| Condition::parse(t, ctx)).transpose()
}

fn check_single_return(rv: ReturnValues) -> Result<(), StoreError> {
    match rv {
        ReturnValues::None | ReturnValues::AllOld => Ok(()),
        _ => Err(StoreError::validation("ReturnValues can only be ALL_OLD or NONE")),
    }
}

/// The touched paths of an item, or nothing when none of them is there.
fn updated(item: Option<&Item>, paths: &Projection) -> Option<Item> {
    let out = paths.apply(item?);
    (!out.is_empty()).then_some(out)
}

fn reason_for(e: StoreError) -> CancellationReason {
    match e {
        StoreError::ConditionalCheckFailed { item } => CancellationReason {
            code: CancellationCode::ConditionalCheckFailed,
            message: Some("The conditional request failed".into()),
            item,
        },
        other => {
            CancellationReason { code: CancellationCode::ValidationError, message: Some(other.to_string()), item: None }
        }
    }
}

/// FNV-1a: a stable fingerprint of a request for idempotency checks.
fn fingerprint(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn token_entry(txn: &Tx, token: &str) -> Result<Option<(u64, u64)>, OpError> {
    let table = txn.txn().open_table(TOKENS)?;
    let Some(v) = table.get(token)? else {
        return Ok(None);
    };
    let v = v.value();
    if v.len() != 16 {
        return Ok(None);
    }
    let time = u64::from_be_bytes(v[..8].try_into().unwrap_or([0; 8]));
    let fp = u64::from_be_bytes(v[8..].try_into().unwrap_or([0; 8]));
    Ok(Some((time, fp)))
}

fn record_token(txn: &Tx, token: &str, now: u64, fp: u64) -> Result<(), OpError> {
    if let Some((old_time, _)) = token_entry(txn, token)? {
        txn.remove(On::TokenTimes, &token_time_key(old_time, token), false)?;
    }
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&now.to_be_bytes());
    value[8..].copy_from_slice(&fp.to_be_bytes());
    txn.put(On::Tokens, token.as_bytes(), value.as_slice(), false)?;
    txn.put(On::TokenTimes, &token_time_key(now, token), &[], false)?;
    Ok(())
}

fn token_time_key(time: u64, token: &str) -> Vec<u8> {
    let mut k = time.to_be_bytes().to_vec();
    k.extend_from_slice(token.as_bytes());
    k
}

/// Forgets tokens older than the idempotency window, a bounded number at a time.
fn purge_tokens(txn: &Tx, now: u64) -> Result<(), OpError> {
    let cutoff = now.saturating_sub(IDEMPOTENCY_WINDOW_SECS).to_be_bytes();
    let old: Vec<Vec<u8>> = {
        let times = txn.txn().open_table(TOKEN_TIMES)?;
        let mut old = Vec::new();
        for entry in times.range::<&[u8]>(..cutoff.as_slice())? {
            old.push(entry?.0.value().to_vec());
            if old.len() >= SWEEP_BATCH {
                break;
            }
        }
        old
    };
    for k in old {
        txn.remove(On::TokenTimes, &k, false)?;
        if std::str::from_utf8(&k[8..]).is_ok() {
            txn.remove(On::Tokens, &k[8..], false)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::{GetItem, KeySchema, ScalarType, item};

    fn job<T>(op: impl FnOnce(Reply<T>) -> Job) -> (Job, oneshot::Receiver<Result<T, StoreError>>) {
        let (reply, rx) = Reply::channel();
        (op(reply), rx)
    }

    fn answer<T>(mut rx: oneshot::Receiver<Result<T, StoreError>>) -> Result<T, StoreError> {
        rx.try_recv().expect("answered")
    }

    fn new_writer(dir: &std::path::Path) -> (Writer, Arc<Shared>) {
        let db = redb::Database::create(dir.join("t.redb")).unwrap();
        let file = journal::open_file(dir).unwrap();
        let recovered = journal::recover(&db, Box::new(file)).map_err(fatal_text).unwrap();
        let shared = Arc::new(Shared::new(db, Default::default()));
        (Writer::new(shared.clone(), recovered.journal, recovered.seq, Checkpoint::default()), shared)
    }

    /// A group keeps the tables it writes open until it commits; a table written, deleted,
    /// created again and written within one group must still end up exactly as if each
    /// operation had been a group of its own, and so must a sweep among the writes.
    #[test]
    fn one_group_may_write_delete_recreate_and_sweep_a_table() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, shared) = new_writer(dir.path());
        let def = TableDefinition::new("tbl", KeySchema::hash("pk", ScalarType::S)).ttl("ttl");
        let (create, rx) = job(|r| Job::CreateTable(def.clone(), r));
        writer.run_group(vec![create]);
        assert!(answer(rx).is_ok());

        let put =
            |pk: &str, ttl: u64| job(|r| Job::Put(PutItem::new("tbl", item! { "pk" => pk, "ttl" => ttl }), None, r));
        let (old, rx_old) = put("old", 1_000);
        let (delete, rx_delete) = job(|r| Job::DeleteTable("tbl".into(), r));
        let (again, rx_again) = job(|r| Job::CreateTable(def, r));
        let (expired, rx_expired) = put("expired", 1_000);
        let (kept, rx_kept) = put("kept", 5_000);
        let (sweep, rx_sweep) = job(|reply| Job::Sweep { now: 2_000, reply });
        let (late, rx_late) = put("late", 5_000);
        let before = writer.seq;
        writer.run_group(vec![old, delete, again, expired, kept, sweep, late]);
        assert_eq!(writer.seq, before + 1, "the group committed as one transaction, not job by job");
        assert!(answer(rx_old).is_ok());
        assert!(answer(rx_delete).is_ok());
        assert!(answer(rx_again).is_ok());
        assert!(answer(rx_expired).is_ok());
        assert!(answer(rx_kept).is_ok());
        assert!(answer(rx_late).is_ok());
        assert!(matches!(answer(rx_sweep), Ok(Swept { deleted: 1, more: false })));
        let present = |pk: &str| {
            crate::read::get_item(&shared, GetItem::new("tbl", item! { "pk" => pk })).unwrap().item.is_some()
        };
        assert_eq!(
            ["old", "expired", "kept", "late"].map(present),
            [false, false, true, true],
            "old went with its table, expired with the sweep"
        );
    }

    /// One operation failing inside redb (here: a corrupt stored item) aborts the group's
    /// transaction; the group is then replayed one job at a time, so its neighbours still land.
    #[test]
    fn a_fatal_job_does_not_take_its_group_down() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("t.redb")).unwrap();
        let file = journal::open_file(dir.path()).unwrap();
        let recovered = journal::recover(&db, Box::new(file)).map_err(fatal_text).unwrap();
        let shared = Arc::new(Shared::new(db, Default::default()));
        let mut writer = Writer::new(shared.clone(), recovered.journal, recovered.seq, Checkpoint::default());
        let def = TableDefinition::new("tbl", KeySchema::hash("pk", ScalarType::S));
        let (create, rx) = job(|r| Job::CreateTable(def, r));
        writer.run_group(vec![create]);
        assert!(answer(rx).is_ok());

        // Corrupt one stored item behind the engine's back.
        let info = shared.table("tbl").unwrap();
        let txn = shared.begin_write().unwrap();
        txn.open_table(bytes_table(&info.redb_name))
            .unwrap()
            .insert(info.base_key(&item! { "pk" => "bad" }).as_slice(), [9u8, 9, 9].as_slice())
            .unwrap();
        txn.commit().unwrap();

        let put = |pk: &str| job(|r| Job::Put(PutItem::new("tbl", item! { "pk" => pk }), None, r));
        let (a, rx_a) = put("a");
        let update = UpdateItem::new("tbl", item! { "pk" => "bad" }, "SET x = :x").value(":x", 1);
        let (expr, condition) = update_expressions(&update).unwrap();
        let (bad, rx_bad) = job(|r| Job::Update(update, expr, condition, r));
        let (b, rx_b) = put("b");
        writer.run_group(vec![a, bad, b]);
        assert!(answer(rx_a).is_ok());
        assert!(matches!(answer(rx_bad), Err(StoreError::Internal(_))));
        assert!(answer(rx_b).is_ok());
        for pk in ["a", "b"] {
            let got = crate::read::get_item(&shared, GetItem::new("tbl", item! { "pk" => pk })).unwrap();
            assert!(got.item.is_some(), "{pk} was lost with the failed group");
        }
    }
}
