//! The write-ahead journal: how a group commit becomes durable with one sequential append.
//!
//! A group's changes to redb are recorded as physical effects — "put these bytes at this key
//! of this redb table", "remove this key" — while the group is applied (`crate::effects`
//! records them, and replays them on recovery). Before the group's
//! redb transaction commits, the effects are appended to `tally.journal` as one record and the
//! file is synced; the redb transaction then commits *without* an fsync (`Durability::None`),
//! so its pages stay in redb's write buffer instead of being written at random places of the
//! file on every group. Every so often (a checkpoint) a group commits with
//! `Durability::Immediate`, which writes everything out, and the journal starts over.
//!
//! **Starting over reuses the file.** After a checkpoint the next record is written at offset 0
//! over the old ones, while writes keep coming; once the writer is idle, or the store closes, the
//! file is cut to nothing ([`Journal::cut`]). Syncing a write into blocks the file already has
//! changes no file-system metadata, so it costs one data write, where an append also commits the
//! new size and blocks (BENCHMARKS.md has both). The records left behind are harmless: every one
//! was written before the checkpoint, so its sequence is at or below the one the database holds
//! and recovery skips it; and the new records run from offset 0 with consecutive sequences, so
//! reading stops where they end (the next bytes are a torn record, the middle of an old one, or
//! an old whole record, skipped for its sequence).
//!
//! Each redb commit also stores the group's sequence number (`sys/journal`), so after a crash
//! the database reopens at its last durable commit, knows which sequence that was, and replays
//! the journal records after it, in order. A record is
//! `magic ‖ payload length ‖ CRC-32 of (sequence ‖ payload) ‖ sequence ‖ payload`; reading
//! stops at the first record that is incomplete or fails its checksum, which can only be a
//! record whose sync never returned, so its callers were never answered.
//!
//! Why physical effects and not the operations: replaying operations would re-evaluate
//! conditions and updates, which depend on the time (idempotency tokens) and must reproduce
//! exactly what the first run decided. Effects are what was decided, so replay is a plain copy.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use redb::{ReadableTable, WriteTransaction};

use crate::effects::{Open, replay};
use crate::layout::{APPLIED, APPLIED_KEY, OpError};

/// The journal's file name in the store's directory.
pub const FILE_NAME: &str = "tally.journal";

const MAGIC: [u8; 4] = *b"TJR1";
/// A record's bytes before its payload.
pub(crate) const HEADER: usize = 4 + 4 + 4 + 8;

/// A file the journal lives in: the real file, or a simulated disk in tests.
pub trait JournalFile: Send + 'static {
    /// The whole contents.
    fn read_all(&mut self) -> io::Result<Vec<u8>>;
    /// Writes `bytes` at `offset`.
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Makes every write so far durable.
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts or extends the file to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

impl JournalFile for File {
    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let len = self.metadata()?.len();
        let mut bytes = vec![0; usize::try_from(len).map_err(io::Error::other)?];
        self.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.write_all_at(bytes, offset)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}

/// Opens (creating if needed) the journal file of a store directory.
pub fn open_file(dir: &Path) -> io::Result<File> {
    let path = dir.join(FILE_NAME);
    let file = crate::private::options().read(true).write(true).create(true).truncate(false).open(&path)?;
    crate::private::restrict(&path)?;
    Ok(file)
}

/// The journal: an append position in a [`JournalFile`].
pub struct Journal {
    file: Box<dyn JournalFile>,
    len: u64,
    /// The file's size: the most any checkpoint interval wrote since it was last cut.
    file_len: u64,
}

impl Journal {
    /// A journal over `file`, whose size is `file_len`, appending after `len` bytes.
    fn new(file: Box<dyn JournalFile>, len: u64, file_len: u64) -> Journal {
        Journal { file, len, file_len }
    }

    /// The file's size.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Bytes written since the last [`Journal::restart`].
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Appends one record and syncs it; the group is durable once this returns `Ok`.
    pub fn append(&mut self, seq: u64, effects: &[u8]) -> io::Result<()> {
        let mut record = Vec::with_capacity(HEADER + effects.len());
        record.extend_from_slice(&MAGIC);
        record.extend_from_slice(&u32::try_from(effects.len()).map_err(io::Error::other)?.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&seq.to_le_bytes());
        crc.update(effects);
        record.extend_from_slice(&crc.finalize().to_le_bytes());
        record.extend_from_slice(&seq.to_le_bytes());
        record.extend_from_slice(effects);
        self.file.write_at(self.len, &record)?;
        self.file.sync()?;
        self.len += record.len() as u64;
        self.file_len = self.file_len.max(self.len);
        Ok(())
    }

    /// Starts over with an empty file: called, like [`Journal::restart`], once a durable redb
    /// commit holds every record so far, when the writer has nothing to write (idle, or
    /// closing). Reusing the file keeps a busy writer's syncs cheap, but the file stays at the
    /// busiest interval's size; cutting it gives that space back once the load falls. Nothing
    /// needs syncing: a cut lost in a crash leaves old records, which recovery skips by their
    /// sequence, as it does after a restart.
    pub fn cut(&mut self) -> io::Result<()> {
        self.len = 0;
        if self.file_len > 0 {
            self.file.set_len(0)?;
            self.file_len = 0;
        }
        Ok(())
    }

    /// Starts over at the beginning of the file: called once a durable redb commit holds every
    /// record so far. Nothing is written; the old records stay until overwritten, and recovery
    /// skips them by their sequence (see the module's documentation).
    pub fn restart(&mut self) {
        self.len = 0;
    }
}

/// The records of a journal's bytes, in order, up to the first that is incomplete or corrupt.
pub fn records(bytes: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= HEADER && rest[..4] == MAGIC {
        let len = u32::from_le_bytes(rest[4..8].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(rest[8..12].try_into().unwrap_or_default());
        let seq_bytes = &rest[12..20];
        let Some(payload) = rest.get(HEADER..HEADER + len) else { break };
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(seq_bytes);
        hasher.update(payload);
        if hasher.finalize() != crc {
            break;
        }
        out.push((u64::from_le_bytes(seq_bytes.try_into().unwrap_or_default()), payload));
        rest = &rest[HEADER + len..];
    }
    out
}

/// The sequence number of the last group in the database, as seen by `txn`.
pub fn applied(txn: &WriteTransaction) -> Result<u64, OpError> {
    Ok(txn.open_table(APPLIED)?.get(APPLIED_KEY)?.map(|v| v.value()).unwrap_or(0))
}

/// Records `seq` as the last group in the database, in the same transaction as its effects.
pub fn set_applied(txn: &WriteTransaction, seq: u64) -> Result<(), OpError> {
    txn.open_table(APPLIED)?.insert(APPLIED_KEY, seq)?;
    Ok(())
}

/// What [`recover`] found.
pub struct Recovered {
    /// The journal, ready for the next record (at the start of the file).
    pub journal: Journal,
    /// The sequence number of the last group in the database.
    pub seq: u64,
    /// How many groups were replayed (0 after a clean close).
    pub replayed: usize,
}

/// Brings the database up to date with the journal after an open: replays every record after
/// the last durable group and commits durably, so the journal can start over.
pub fn recover(db: &redb::Database, mut file: Box<dyn JournalFile>) -> Result<Recovered, OpError> {
    let io = |what: &str, e: io::Error| OpError::Fatal(format!("journal: cannot {what}: {e}"));
    let bytes = file.read_all().map_err(|e| io("read the journal", e))?;
    let mut txn = db.begin_write()?;
    txn.set_durability(redb::Durability::Immediate)?;
    let mut seq = applied(&txn)?;
    let mut replayed = 0usize;
    let open = Open::new(&txn);
    for (record_seq, payload) in records(&bytes) {
        if record_seq <= seq {
            continue;
        }
        if record_seq != seq + 1 {
            return Err(OpError::Fatal(format!(
                "journal: record {record_seq} follows group {seq}; the groups between are missing"
            )));
        }
        replay(&open, payload)?;
        seq = record_seq;
        replayed += 1;
    }
    drop(open);
    set_applied(&txn, seq)?;
    txn.commit()?;
    if replayed > 0 {
        tracing::info!(groups = replayed, "replayed the journal after an unclean shutdown");
    }
    Ok(Recovered { journal: Journal::new(file, 0, bytes.len() as u64), seq, replayed })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mem(Vec<u8>);

    impl JournalFile for Mem {
        fn read_all(&mut self) -> io::Result<Vec<u8>> {
            Ok(self.0.clone())
        }
        fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
            let end = offset as usize + bytes.len();
            if self.0.len() < end {
                self.0.resize(end, 0);
            }
            self.0[offset as usize..end].copy_from_slice(bytes);
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.0.resize(usize::try_from(len).map_err(io::Error::other)?, 0);
            Ok(())
        }
    }

    /// A database whose last durable group is `seq`.
    fn database_at(dir: &Path, seq: u64) -> redb::Database {
        let db = redb::Database::create(dir.join("t.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        set_applied(&txn, seq).unwrap();
        txn.commit().unwrap();
        db
    }

    /// A record payload of `len` (≥ 5) bytes: one removal of an absent TTL key.
    fn effects(len: usize) -> Vec<u8> {
        crate::effects::ttl_removal(&vec![b'k'; len - 5])
    }

    /// The journal's bytes after one checkpoint interval wrote records `1..=5`, a checkpoint
    /// restarted it, and the next interval wrote `6` (`sixth` bytes of payload) and maybe `7`.
    fn reused(sixth: usize, seventh: bool) -> Vec<u8> {
        let mut journal = Journal::new(Box::new(Mem(Vec::new())), 0, 0);
        for seq in 1..=5 {
            journal.append(seq, &effects(10 * seq as usize)).unwrap();
        }
        journal.restart();
        journal.append(6, &effects(sixth)).unwrap();
        if seventh {
            journal.append(7, b"").unwrap();
        }
        journal.file.read_all().unwrap()
    }

    #[test]
    fn a_reused_journal_replays_only_the_records_after_the_checkpoint() {
        // Record 6 ends inside old record 2, or, with a 10-byte payload, exactly where old record
        // 2 begins: then whole old records follow it, and are skipped for their sequence.
        for (sixth, seventh, last) in [(25, true, 7), (25, false, 6), (10, false, 6), (10, true, 7)] {
            let dir = tempfile::tempdir().unwrap();
            let bytes = reused(sixth, seventh);
            if sixth == 10 && !seventh {
                let seqs: Vec<u64> = records(&bytes).into_iter().map(|(s, _)| s).collect();
                assert_eq!(seqs, [6, 2, 3, 4, 5], "old whole records follow the new one");
            }
            let db = database_at(dir.path(), 5);
            let recovered = recover(&db, Box::new(Mem(bytes.clone()))).map_err(|e| format!("{e:?}")).unwrap();
            assert_eq!((recovered.seq, recovered.replayed), (last, (last - 5) as usize), "{sixth} {seventh}");
            // Reopened after the checkpoint of the same records: nothing is replayed twice.
            drop(db);
            let db = redb::Database::open(dir.path().join("t.redb")).unwrap();
            let again = recover(&db, Box::new(Mem(bytes))).map_err(|e| format!("{e:?}")).unwrap();
            assert_eq!((again.seq, again.replayed), (last, 0));
        }
    }

    #[test]
    fn records_stop_at_the_first_torn_or_corrupt_one() {
        let mut journal = Journal::new(Box::new(Mem(Vec::new())), 0, 0);
        journal.append(1, b"one").unwrap();
        journal.append(2, b"").unwrap();
        journal.append(3, b"three").unwrap();
        let mut bytes = journal.file.read_all().unwrap();
        let got: Vec<(u64, Vec<u8>)> = records(&bytes).into_iter().map(|(s, p)| (s, p.to_vec())).collect();
        assert_eq!(got, vec![(1, b"one".to_vec()), (2, vec![]), (3, b"three".to_vec())]);
        // A torn tail drops only the last record.
        assert_eq!(records(&bytes[..bytes.len() - 1]).len(), 2);
        // A flipped bit in the second record hides it and everything after it.
        bytes[HEADER + 3 + HEADER - 1] ^= 1;
        assert_eq!(records(&bytes).len(), 1);
        // Zeros (a lost write before a kept one) are not a record.
        assert!(records(&[0u8; 64]).is_empty());
    }
}
