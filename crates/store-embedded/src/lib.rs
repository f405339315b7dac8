//! Tally's embedded storage engine: DynamoDB's data model and semantics in a directory on disk.
//!
//! [`EmbeddedStore`] implements [`store::Store`] on top of [redb](https://docs.rs/redb): tables
//! with partition and sort keys, global and local secondary indexes maintained in the same
//! transaction as the base item, conditional writes, batches, all-or-nothing transactions,
//! `Limit` and the 1 MB page with `LastEvaluatedKey`, TTL deletion in the background, and the
//! consumed capacity DynamoDB would bill for every call. An acknowledged write is durable — its
//! group's record in the write-ahead journal was synced, or its commit was — so it survives
//! `kill -9` and power loss. `DESIGN.md` in this crate explains the
//! on-disk layout and the invariants.
//!
//! ```
//! use std::sync::Arc;
//! use store::{GetItem, KeySchema, PutItem, ScalarType, Store, TableDefinition, item};
//! use store_embedded::EmbeddedStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> store::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path())?);
//! let schema = KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S);
//! store.create_table(TableDefinition::new("tally", schema)).await?;
//! store.put_item(PutItem::new("tally", item! { "pk" => "SITE#1", "sk" => "META", "views" => 3 })).await?;
//! let got = store.get_item(GetItem::new("tally", item! { "pk" => "SITE#1", "sk" => "META" })).await?;
//! assert_eq!(got.item.unwrap()["views"], 3.into());
//! # Ok(())
//! # }
//! ```
//!
//! This crate is not a DynamoDB server (there is no HTTP or JSON here), not shared between
//! processes (one process opens a directory at a time), and not distributed: it is one
//! machine's storage, with DynamoDB's semantics so that the same code runs on DynamoDB later.

#![deny(missing_docs)]

mod backup;
mod capacity;
mod codec;
#[cfg(test)]
mod crash_images;
mod db;
mod effects;
mod expr;
mod journal;
pub mod keys;
mod layout;
mod read;
mod schema;
mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use redb::ReadableTable;
use store::{
    BatchGetItem, BatchGetItemOutput, BatchWriteItem, BatchWriteItemOutput, DeleteItem, GetItem, GetItemOutput,
    PutItem, Query, QueryOutput, Result, Scan, Store, StoreError, TableDefinition, TableDescription, TransactGetItems,
    TransactGetItemsOutput, TransactWriteItems, TransactWriteItemsOutput, UpdateItem, WriteOutput,
};

pub use crate::backup::{BackupSummary, restore};
use crate::db::Shared;
pub use crate::db::{Compactions, Groups};
pub use crate::journal::FILE_NAME as JOURNAL_FILE;
use crate::journal::JournalFile;
use crate::layout::{OpError, internal};
use crate::schema::TableInfo;
pub use crate::writer::{Checkpoint, Compaction};
use crate::writer::{Job, Reply, Swept, Writer};

/// The database file inside the store's directory.
const FILE_NAME: &str = "tally.redb";

/// How an [`EmbeddedStore`] runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// How often the background thread deletes expired items; `None` turns it off
    /// (tests then call [`EmbeddedStore::sweep_expired`]).
    pub ttl_sweep_interval: Option<Duration>,
    /// redb's page cache, in bytes; `None` keeps redb's own default of 1 GiB. The default is
    /// 8 MiB, so that a server stays small: the cache (its write buffer and its read pages) is
    /// what a heap profile of `tally serve` under sustained ingestion found full, and the
    /// operating system's file cache serves the pages it drops. 64 MiB measured no faster than
    /// 16 MiB in `tally bench`, and 8 MiB no slower than 16 MiB in process or over HTTP, while it
    /// held 8 MiB less of the server's peak (BENCHMARKS.md, "sixth session: server memory").
    pub cache_size: Option<usize>,
    /// When writes already durable in the journal are made durable in the database file and
    /// the journal emptied (default: every 2 s of writing, or at 64 MiB of journal).
    pub checkpoint: Checkpoint,
    /// When the database file is compacted at rest, giving back the pages a burst of writes
    /// freed (default: once it grew by 4 MiB and an eighth since the last compaction; while
    /// serving, files up to 512 MiB).
    pub compaction: Compaction,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ttl_sweep_interval: Some(Duration::from_secs(10)),
            cache_size: Some(8 * 1024 * 1024),
            checkpoint: Checkpoint::default(),
            compaction: Compaction::default(),
        }
    }
}

impl Options {
    /// Sets how often expired items are deleted (`None`: never in the background).
    pub fn ttl_sweep_interval(mut self, interval: Option<Duration>) -> Self {
        self.ttl_sweep_interval = interval;
        self
    }

    /// Sets redb's page cache size in bytes.
    pub fn cache_size(mut self, bytes: usize) -> Self {
        self.cache_size = Some(bytes);
        self
    }

    /// Sets when the database file catches up with the journal.
    pub fn checkpoint(mut self, checkpoint: Checkpoint) -> Self {
        self.checkpoint = checkpoint;
        self
    }

    /// Sets when the database file is compacted.
    pub fn compaction(mut self, compaction: Compaction) -> Self {
        self.compaction = compaction;
        self
    }
}

/// DynamoDB in a directory: the embedded [`Store`].
///
/// Writes go through one writer thread that commits them in groups; reads run on the
/// calling task in redb read transactions. Dropping the store waits for queued writes.
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    path: PathBuf,
    writer: Option<mpsc::Sender<Job>>,
    writer_thread: Option<JoinHandle<()>>,
    sweeper_stop: Option<mpsc::Sender<()>>,
    sweeper_thread: Option<JoinHandle<()>>,
    replayed_groups: usize,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in directory `dir` with default [`Options`].
    pub fn open(dir: impl AsRef<Path>) -> Result<EmbeddedStore, StoreError> {
        EmbeddedStore::open_with(dir, Options::default())
    }

    /// Opens (creating if needed) the store in directory `dir`.
    pub fn open_with(dir: impl AsRef<Path>, options: Options) -> Result<EmbeddedStore, StoreError> {
        let dir = dir.as_ref();
        private::create_dir(dir).map_err(|e| internal(format!("cannot create {}: {e}", dir.display())))?;
        let path = dir.join(FILE_NAME);
        let mut builder = redb::Database::builder();
        if let Some(bytes) = options.cache_size {
            builder.set_cache_size(bytes);
        }
        if !path.exists() {
            // A journal without its database belongs to no one: it must not be replayed into a new one.
            match std::fs::remove_file(dir.join(journal::FILE_NAME)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(internal(format!("cannot remove a stale journal in {}: {e}", dir.display()))),
            }
            create_atomically(&builder, dir, &path)?;
        }
        private::restrict(&path).map_err(|e| internal(format!("cannot restrict {}: {e}", path.display())))?;
        let db = builder.create(&path).map_err(|e| match e {
            // The one error a user meets in normal use: name the cause and the way out.
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::ResourceInUse(format!(
                "the embedded store in {} is open in another process (another `tally serve`?): the embedded \
                 engine serves one process at a time; stop the other one, or share a DynamoDB table between \
                 processes",
                dir.display()
            )),
            e => internal(format!("cannot open {}: {e}", path.display())),
        })?;
        let journal = journal::open_file(dir)
            .map_err(|e| internal(format!("cannot open the journal in {}: {e}", dir.display())))?;
        EmbeddedStore::from_database(db, Box::new(journal), dir.to_path_buf(), Some(path), options)
    }

    /// Opens the store on a redb storage backend: the crash-image tests use one that keeps
    /// only what was synced.
    #[cfg(test)]
    pub(crate) fn open_backend(
        backend: impl redb::StorageBackend,
        journal: impl JournalFile,
        options: Options,
    ) -> Result<EmbeddedStore> {
        let db = redb::Database::builder().create_with_backend(backend).map_err(internal)?;
        EmbeddedStore::from_database(db, Box::new(journal), PathBuf::new(), None, options)
    }

    /// The store over `db`, in directory `path`; `file` is the database file, whose bytes on
    /// disk decide when it is compacted.
    fn from_database(
        db: redb::Database,
        journal: Box<dyn JournalFile>,
        path: PathBuf,
        file: Option<PathBuf>,
        options: Options,
    ) -> Result<EmbeddedStore> {
        let tables = load_definitions(&db)?;
        let recovered = journal::recover(&db, journal)?;
        let shared = Arc::new(Shared::new(db, tables));
        let (tx, rx) = mpsc::channel();
        let writer = Writer::new(shared.clone(), recovered.journal, recovered.seq, options.checkpoint)
            .compacting(options.compaction, file);
        let writer_thread = std::thread::Builder::new()
            .name("tally-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| internal(format!("cannot start the writer thread: {e}")))?;
        let mut store = EmbeddedStore {
            shared,
            path,
            writer: Some(tx.clone()),
            writer_thread: Some(writer_thread),
            sweeper_stop: None,
            sweeper_thread: None,
            replayed_groups: recovered.replayed,
        };
        if let Some(interval) = options.ttl_sweep_interval {
            let (stop_tx, stop_rx) = mpsc::channel::<()>();
            let thread = std::thread::Builder::new()
                .name("tally-ttl".into())
                .spawn(move || sweeper(tx, stop_rx, interval))
                .map_err(|e| internal(format!("cannot start the TTL thread: {e}")))?;
            store.sweeper_stop = Some(stop_tx);
            store.sweeper_thread = Some(thread);
        }
        Ok(store)
    }

    /// The directory the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What compacting the database file at rest did since the store opened.
    pub fn compactions(&self) -> Compactions {
        self.shared.compactions()
    }

    /// What the writer's group commits did since the store opened.
    pub fn groups(&self) -> Groups {
        self.shared.groups()
    }

    /// How many committed groups of writes the open replayed from the journal: 0 after a clean
    /// close, more after a crash.
    pub fn replayed_groups(&self) -> usize {
        self.replayed_groups
    }

    /// Deletes every item whose TTL attribute is before `now_epoch_secs`, as the background
    /// thread does, and returns how many it deleted.
    pub async fn sweep_expired(&self, now_epoch_secs: u64) -> Result<usize> {
        let mut deleted = 0;
        loop {
            let swept = self.submit(|reply| Job::Sweep { now: now_epoch_secs, reply }).await?;
            deleted += swept.deleted;
            if !swept.more {
                return Ok(deleted);
            }
        }
    }

    /// Queues the job `job` builds around its reply and waits for the answer.
    async fn submit<T>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Result<T> {
        let (reply, answer) = Reply::channel();
        let writer = self.writer.as_ref().ok_or_else(|| internal("the store is closed"))?;
        writer.send(job(reply)).map_err(|_| internal("the writer thread has stopped"))?;
        answer.await.map_err(|_| internal("the writer thread stopped before answering"))?
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        self.sweeper_stop.take();
        if let Some(t) = self.sweeper_thread.take() {
            let _ = t.join();
        }
        // With every sender gone the writer finishes the queued jobs and exits, closing the file.
        self.writer.take();
        if let Some(t) = self.writer_thread.take() {
            let _ = t.join();
        }
    }
}

/// Creates a new database under a temporary name and renames it into place once its first
/// commit is durable, so that a crash during creation never leaves a file that cannot open.
fn create_atomically(builder: &redb::Builder, dir: &Path, path: &Path) -> Result<()> {
    let creating = dir.join(format!("{FILE_NAME}.creating"));
    let io = |what: &str, e: std::io::Error| internal(format!("cannot {what} {}: {e}", creating.display()));
    match std::fs::remove_file(&creating) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("remove", e)),
    }
    // Created empty and owner-only first, so redb opens a file nobody else could ever read.
    private::create_file(&creating).map_err(|e| io("create", e))?;
    {
        let db =
            builder.create(&creating).map_err(|e| internal(format!("cannot create {}: {e}", creating.display())))?;
        load_definitions(&db)?;
    }
    std::fs::rename(&creating, path).map_err(|e| io("rename", e))?;
    // The rename is durable only once the directory itself is synced.
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io("sync the directory of", e))?;
    Ok(())
}

/// Owner-only files and directories: the store holds salts and password hashes, so on Unix its
/// directory is created `0700` and its files `0600` whatever the umask, and a store made by an
/// older version (`0755`/`0644`) is narrowed when it opens.
pub(crate) mod private {
    use std::path::Path;

    /// Creates `dir` (and missing parents) and makes it owner-only.
    pub fn create_dir(dir: &Path) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        }
        #[cfg(not(unix))]
        std::fs::create_dir_all(dir)
    }

    /// Creates `path` empty, owner-only (it must not exist).
    pub fn create_file(path: &Path) -> std::io::Result<()> {
        options().write(true).create_new(true).open(path).map(drop)
    }

    /// Makes an existing file owner-only.
    pub fn restrict(path: &Path) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            Ok(())
        }
    }

    /// Open options that create files owner-only.
    pub fn options() -> std::fs::OpenOptions {
        let mut options = std::fs::OpenOptions::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        options
    }
}

fn load_definitions(db: &redb::Database) -> std::result::Result<BTreeMap<String, Arc<TableInfo>>, OpError> {
    let txn = db.begin_write()?;
    let mut tables = BTreeMap::new();
    {
        let meta = txn.open_table(layout::META)?;
        for entry in meta.iter()? {
            let (name, bytes) = entry?;
            let def = codec::decode_definition(bytes.value())?;
            tables.insert(name.value().to_string(), Arc::new(TableInfo::new(def)));
        }
        txn.open_table(layout::TTL)?;
        txn.open_table(layout::TOKENS)?;
        txn.open_table(layout::TOKEN_TIMES)?;
    }
    txn.commit()?;
    Ok(tables)
}

/// The background TTL thread: sweeps every `interval` until told to stop.
fn sweeper(writer: mpsc::Sender<Job>, stop: mpsc::Receiver<()>, interval: Duration) {
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let now = writer::now_secs();
        loop {
            let (reply, answer) = Reply::channel();
            if writer.send(Job::Sweep { now, reply }).is_err() {
                return;
            }
            match answer.blocking_recv() {
                Ok(Ok(Swept { more: true, .. })) => continue,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "TTL sweep failed");
                    break;
                }
                _ => break,
            }
        }
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn create_table(&self, definition: TableDefinition) -> Result<TableDescription> {
        self.submit(|reply| Job::CreateTable(definition, reply)).await
    }

    async fn delete_table(&self, name: &str) -> Result<TableDescription> {
        self.submit(|reply| Job::DeleteTable(name.to_string(), reply)).await
    }

    async fn describe_table(&self, name: &str) -> Result<TableDescription> {
        read::describe(&self.shared, name)
    }

    async fn list_tables(&self) -> Result<Vec<String>> {
        Ok(read::list(&self.shared))
    }

    async fn get_item(&self, request: GetItem) -> Result<GetItemOutput> {
        read::get_item(&self.shared, request)
    }

    async fn put_item(&self, request: PutItem) -> Result<WriteOutput> {
        // Expressions are parsed here, on the caller's task, leaving the writer thread only
        // the work that needs the table's state.
        let condition = writer::put_expressions(&request)?;
        self.submit(|reply| Job::Put(request, condition, reply)).await
    }

    async fn update_item(&self, request: UpdateItem) -> Result<WriteOutput> {
        let (update, condition) = writer::update_expressions(&request)?;
        self.submit(|reply| Job::Update(request, update, condition, reply)).await
    }

    async fn delete_item(&self, request: DeleteItem) -> Result<WriteOutput> {
        self.submit(|reply| Job::Delete(request, reply)).await
    }

    async fn query(&self, request: Query) -> Result<QueryOutput> {
        read::query(&self.shared, request)
    }

    async fn scan(&self, request: Scan) -> Result<QueryOutput> {
        read::scan(&self.shared, request)
    }

    async fn batch_get_item(&self, request: BatchGetItem) -> Result<BatchGetItemOutput> {
        read::batch_get(&self.shared, request)
    }

    async fn batch_write_item(&self, request: BatchWriteItem) -> Result<BatchWriteItemOutput> {
        self.submit(|reply| Job::Batch(request, reply)).await
    }

    async fn transact_get_items(&self, request: TransactGetItems) -> Result<TransactGetItemsOutput> {
        read::transact_get(&self.shared, request)
    }

    async fn transact_write_items(&self, request: TransactWriteItems) -> Result<TransactWriteItemsOutput> {
        self.submit(|reply| Job::Transact(request, reply)).await
    }
}
