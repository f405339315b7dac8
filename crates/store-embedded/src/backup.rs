//! Backups: a consistent copy of a store taken while it serves, and bringing one back.
//!
//! A backup is one redb file, `tally.redb`, in a directory of its own. It is written from a
//! single redb read transaction, which sees the last commit and nothing after it. Every write
//! the store acknowledged before the backup began had committed by then (the writer answers
//! only after its group's commit, `DESIGN.md` invariant 4), so the copy holds each one, and no
//! group by halves: a group is one commit. The writer is not paused; it keeps committing while
//! the copy is read, and redb keeps the snapshot's pages alive until the read ends (the live file
//! may grow by what is written meanwhile, and shrinks back as later commits reuse the pages).
//!
//! The copy needs no journal: it is a durable redb database whose `sys/journal` names the last
//! group it holds, so opening it replays nothing. It is written as `tally.redb.creating` and
//! renamed once its commit is durable, so an interrupted backup never leaves a `tally.redb`.

use std::path::Path;

use redb::{ReadableDatabase, ReadableTable, TableHandle};
use store::{Result, StoreError};

use crate::layout::{self, OpError, internal};
use crate::private;
use crate::{FILE_NAME, load_definitions};

/// Entries copied per redb write transaction of the copy, so that a large store is not held
/// in one transaction's memory. Only the last commit is durable; the file is renamed after it.
const CHUNK: u64 = 50_000;

/// What a backup or a restore copied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupSummary {
    /// The DynamoDB tables in the copy.
    pub tables: usize,
    /// Entries copied: items, index entries and the engine's own bookkeeping.
    pub entries: u64,
    /// The size of the copy's database file, in bytes.
    pub bytes: u64,
}

/// Checks that `dir` can take a new copy: it must not exist, or be an empty directory.
fn check_empty_target(dir: &Path, what: &str) -> Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(StoreError::Validation(format!(
                    "{what} directory {} is not empty: give a new or empty directory",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(StoreError::Validation(format!("{} is a file, not a directory", dir.display())))
        }
        Err(e) => Err(internal(format!("cannot read {}: {e}", dir.display()))),
    }
}

/// Copies every redb table of `snapshot` into a new database at `path`.
fn copy_tables(snapshot: &redb::ReadTransaction, path: &Path) -> std::result::Result<BackupSummary, OpError> {
    private::create_file(path).map_err(|e| OpError::Fatal(format!("cannot create {}: {e}", path.display())))?;
    let target = redb::Database::builder()
        .create(path)
        .map_err(|e| OpError::Fatal(format!("cannot create {}: {e}", path.display())))?;
    let mut summary = BackupSummary::default();
    let mut txn = target.begin_write()?;
    txn.set_durability(redb::Durability::None)?;
    let mut in_txn = 0u64;
    let names: Vec<String> = snapshot.list_tables()?.map(|h| h.name().to_owned()).collect();
    for name in names {
        // Each kind of redb table has its own key and value types; the names say which.
        macro_rules! copy {
            ($def:expr) => {{
                let source = snapshot.open_table($def)?;
                let mut rows = source.iter()?;
                loop {
                    let mut written = 0u64;
                    {
                        let mut dest = txn.open_table($def)?;
                        for row in rows.by_ref() {
                            let (k, v) = row?;
                            dest.insert(k.value(), v.value())?;
                            written += 1;
                            if in_txn + written >= CHUNK {
                                break;
                            }
                        }
                    }
                    summary.entries += written;
                    in_txn += written;
                    if in_txn < CHUNK {
                        break;
                    }
                    txn.commit()?;
                    txn = target.begin_write()?;
                    txn.set_durability(redb::Durability::None)?;
                    in_txn = 0;
                }
            }};
        }
        if name == layout::META.name() {
            copy!(layout::META);
        } else if name == layout::TTL.name() {
            copy!(layout::TTL);
        } else if name == layout::TOKENS.name() {
            copy!(layout::TOKENS);
        } else if name == layout::TOKEN_TIMES.name() {
            copy!(layout::TOKEN_TIMES);
        } else if name == layout::APPLIED.name() {
            copy!(layout::APPLIED);
        } else if name.starts_with("t/") || name.starts_with("i/") {
            if name.starts_with("t/") {
                summary.tables += 1;
            }
            copy!(layout::bytes_table(&name));
        } else {
            return Err(OpError::Fatal(format!("the store holds a redb table this version does not know: {name}")));
        }
    }
    txn.set_durability(redb::Durability::Immediate)?;
    txn.commit()?;
    drop(target);
    summary.bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(summary)
}

/// Renames `creating` to `FILE_NAME` in `dir` and makes the rename durable.
fn put_in_place(creating: &Path, dir: &Path) -> Result<()> {
    let path = dir.join(FILE_NAME);
    std::fs::rename(creating, &path)
        .map_err(|e| internal(format!("cannot rename {} to {}: {e}", creating.display(), path.display())))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| internal(format!("cannot sync the directory {}: {e}", dir.display())))
}

impl crate::EmbeddedStore {
    /// Writes a consistent copy of the store into `dir` (a new or empty directory) while the
    /// store keeps serving: every write acknowledged before the call is in the copy, and every
    /// group commit is in it whole or not at all. Blocking; run it off the async executor.
    pub fn backup(&self, dir: &Path) -> Result<BackupSummary> {
        check_empty_target(dir, "the backup")?;
        // The snapshot comes first: whatever was acknowledged before this call has committed.
        let snapshot = self.shared.begin_read().map_err(internal)?;
        private::create_dir(dir).map_err(|e| internal(format!("cannot create {}: {e}", dir.display())))?;
        let creating = dir.join(format!("{FILE_NAME}.creating"));
        let summary = copy_tables(&snapshot, &creating).map_err(|e| {
            let _ = std::fs::remove_file(&creating);
            StoreError::from(e)
        })?;
        drop(snapshot);
        put_in_place(&creating, dir)?;
        Ok(summary)
    }
}

/// Brings the backup in `backup` (a directory [`EmbeddedStore::backup`](crate::EmbeddedStore::backup)
/// wrote) back as the store in `target`, which must not hold a store (a new or empty directory).
///
/// The backup is checked before anything is written to `target`: a file that is not a Tally
/// backup, or a damaged one, is refused. The copy is written under a temporary name, verified
/// by opening it, and renamed into place, so an interrupted restore leaves no store behind.
/// The backup itself is only read.
pub fn restore(backup: &Path, target: &Path) -> Result<BackupSummary> {
    let source = backup.join(FILE_NAME);
    if !source.is_file() {
        return Err(StoreError::Validation(format!(
            "{} is not a Tally backup: it has no {FILE_NAME}",
            backup.display()
        )));
    }
    check_empty_target(target, "the restore")?;
    let original = redb::ReadOnlyDatabase::open(&source)
        .map_err(|e| StoreError::Validation(format!("{} is not a readable Tally backup: {e}", source.display())))?;
    let snapshot = original.begin_read().map_err(internal)?;
    let has_definitions = snapshot.list_tables().map_err(internal)?.any(|h| h.name() == layout::META.name());
    if !has_definitions {
        return Err(StoreError::Validation(format!(
            "{} is a redb file but not a Tally store (no table definitions)",
            source.display()
        )));
    }
    private::create_dir(target).map_err(|e| internal(format!("cannot create {}: {e}", target.display())))?;
    let creating = target.join(format!("{FILE_NAME}.creating"));
    let result = copy_tables(&snapshot, &creating).map_err(StoreError::from).and_then(|summary| {
        // Every definition must decode before the copy becomes a store.
        let db = redb::Database::builder()
            .create(&creating)
            .map_err(|e| internal(format!("cannot reopen {}: {e}", creating.display())))?;
        load_definitions(&db)?;
        Ok(summary)
    });
    let summary = match result {
        Ok(summary) => summary,
        Err(e) => {
            let _ = std::fs::remove_file(&creating);
            return Err(e);
        }
    };
    put_in_place(&creating, target)?;
    Ok(summary)
}
