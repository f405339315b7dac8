//! Measures the two candidate key-value stores for the embedded engine, redb 4 and fjall 3,
//! on an ingestion-like workload, so that the engine's backend is chosen by measurement.
//!
//! The bench depends on the two stores only, never on the engine's own code, so it measures the
//! stores and not our use of them. Items look like Tally's raw events: a base-table key
//! `SITE#<n>#SHARD#<k>` + a ULID-like sort key, a value of about 300 bytes, and one GSI entry
//! keyed `SITE#<n>` + timestamp (keys-only projection: the GSI key ends with the base key).
//!
//! Workloads, each on a fresh temporary directory per backend, the two backends one after the
//! other so that both meet the same machine:
//! - `put_batch_25`: 25 items per atomic, durable commit (base table and GSI together);
//! - `put_group_1000`: 40 such batches (1000 items) per durable commit, as group commit does;
//! - `put_batch_25_read_first`: `put_batch_25` inside a read-your-writes transaction that first
//!   reads each item's current version, as conditional writes and index maintenance do (fjall
//!   needs its transactional database for that, `SingleWriterTxDatabase`);
//! - `range_fwd_100` / `range_rev_100`: 100 consecutive items of one partition, from 100k items;
//! - `get`: one point read, from the same 100k items.
//!
//! Besides criterion's figures it prints the write workloads measured again with the backends
//! interleaved (a steadier ratio on a shared disk), a sustained run of 1M items with the process's
//! CPU time per item (background flushes and compactions included), and on-disk sizes.
//!
//! Durability is the same on both sides: an acknowledged commit is on disk (redb
//! `Durability::Immediate`, one `fdatasync` per commit; fjall's journal persisted with
//! `PersistMode::SyncAll`, one `fsync` per commit).
//! Run with `cargo bench -p store-embedded --bench backend_choice`; it takes about two minutes.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use fjall::{KeyspaceCreateOptions, PersistMode, Readable};
use redb::{Durability, ReadableDatabase, ReadableTable, TableDefinition};

/// Items per batch write, as DynamoDB's `BatchWriteItem` allows.
const BATCH: u64 = 25;
/// Batches per durable commit under group commit.
const GROUP: u64 = 40;
/// Items in the store the reads run against.
const FILLED: u64 = 100_000;
/// Distinct partition keys (10 sites × 10 shards), so each holds 1000 items of `FILLED`.
const PARTITIONS: u64 = 100;
/// Items read per range query.
const PAGE: usize = 100;

const REDB_BASE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("base");
const REDB_GSI: TableDefinition<&[u8], &[u8]> = TableDefinition::new("gsi1");

/// One event as the engine would store it: encoded keys and an encoded item.
struct Item {
    base_key: Vec<u8>,
    gsi_key: Vec<u8>,
    value: Vec<u8>,
}

/// A fixed-seed generator, so both backends get the same keys and values.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The millisecond timestamp of item `i`: one item per millisecond, so ids increase with `i`.
fn timestamp_ms(i: u64) -> u64 {
    1_763_800_000_000 + i
}

/// A ULID-like id: 48-bit timestamp and 80 random bits in Crockford base32, 26 characters.
fn ulid_like(i: u64) -> [u8; 26] {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let random = (u128::from(splitmix(i)) << 16) | u128::from(splitmix(!i) as u16);
    let bits = (u128::from(timestamp_ms(i)) << 80) | random;
    let mut out = [0u8; 26];
    for (n, byte) in out.iter_mut().enumerate() {
        let shift = 125 - 5 * n as u32;
        *byte = ALPHABET[((bits >> shift) & 31) as usize];
    }
    out
}

/// The partition key of partition `p`, followed by the separator the engine puts before the sort key.
fn partition_prefix(p: u64) -> Vec<u8> {
    let mut key = format!("SITE#{}#SHARD#{}", p / 10, p % 10).into_bytes();
    key.push(0);
    key
}

/// The first key after every key of partition `p`.
fn partition_end(p: u64) -> Vec<u8> {
    let mut key = partition_prefix(p);
    *key.last_mut().expect("prefix is not empty") = 1;
    key
}

fn base_key(i: u64) -> Vec<u8> {
    let mut key = partition_prefix(i % PARTITIONS);
    key.extend_from_slice(&ulid_like(i));
    key
}

fn item(i: u64) -> Item {
    let p = i % PARTITIONS;
    let base_key = base_key(i);
    let mut gsi_key = format!("SITE#{}", p / 10).into_bytes();
    gsi_key.push(0);
    gsi_key.extend_from_slice(&timestamp_ms(i).to_be_bytes());
    gsi_key.extend_from_slice(&base_key);
    let h = splitmix(i ^ 0xA5A5);
    let mut value = format!(
        "{{\"type\":\"pageview\",\"site\":{site},\"ts\":{ts},\"visitor\":\"{h:016x}\",\
         \"session\":\"{s:016x}\",\"url\":\"https://example.com/blog/post-{post}\",\
         \"referrer\":\"https://news.ycombinator.com/\",\"browser\":\"Firefox 132\",\
         \"os\":\"Linux\",\"device\":\"desktop\",\"country\":\"DE\",\"utm_source\":\"hn\",\
         \"screen\":\"1920x1080\",\"ttl\":{ttl}",
        site = p / 10,
        ts = timestamp_ms(i),
        s = h.rotate_left(17),
        post = h % 500,
        ttl = timestamp_ms(i) / 1000 + 90 * 86_400,
    )
    .into_bytes();
    value.resize(299, b' ');
    value.push(b'}');
    Item { base_key, gsi_key, value }
}

fn items(from: u64, count: u64) -> Vec<Item> {
    (from..from + count).map(item).collect()
}

/// The two stores behind one small interface, each used the way the engine would use it.
trait Backend {
    const NAME: &'static str;
    fn open(dir: &Path) -> Self;
    /// Writes `items` (base table and GSI) in one atomic commit that is durable on return.
    fn commit(&self, items: Vec<Item>);
    /// Reads the first (or, in reverse, the last) `PAGE` items of `lo..hi`; returns how many it read.
    fn range(&self, lo: &[u8], hi: &[u8], reverse: bool) -> usize;
    fn get(&self, key: &[u8]) -> usize;
    /// Brings the store to its steady state for reads, once filled.
    fn settle(&self) {}
    /// Waits until background work (flushes, compactions) caused by earlier writes is done.
    fn quiesce(&self) {}
    /// What the store's files hold, beyond their total size.
    fn disk_detail(&self) -> String {
        String::new()
    }
}

struct Redb(redb::Database);

impl Backend for Redb {
    const NAME: &'static str = "redb";

    fn open(dir: &Path) -> Self {
        let db = redb::Database::create(dir.join("tally.redb")).expect("create redb");
        let txn = db.begin_write().expect("begin");
        txn.open_table(REDB_BASE).expect("base table");
        txn.open_table(REDB_GSI).expect("gsi table");
        txn.commit().expect("commit");
        Self(db)
    }

    fn commit(&self, items: Vec<Item>) {
        let mut txn = self.0.begin_write().expect("begin");
        txn.set_durability(Durability::Immediate).expect("durability");
        {
            let mut base = txn.open_table(REDB_BASE).expect("base table");
            let mut gsi = txn.open_table(REDB_GSI).expect("gsi table");
            for item in &items {
                base.insert(item.base_key.as_slice(), item.value.as_slice()).expect("insert");
                gsi.insert(item.gsi_key.as_slice(), &[][..]).expect("insert");
            }
        }
        txn.commit().expect("commit");
    }

    fn range(&self, lo: &[u8], hi: &[u8], reverse: bool) -> usize {
        let txn = self.0.begin_read().expect("begin");
        let table = txn.open_table(REDB_BASE).expect("base table");
        let range = table.range::<&[u8]>(lo..hi).expect("range");
        let sum = |acc: usize, entry: redb::Result<_>| {
            let (k, v): (redb::AccessGuard<&[u8]>, redb::AccessGuard<&[u8]>) = entry.expect("entry");
            black_box((k.value(), v.value()));
            acc + 1
        };
        if reverse { range.rev().take(PAGE).fold(0, sum) } else { range.take(PAGE).fold(0, sum) }
    }

    fn get(&self, key: &[u8]) -> usize {
        let txn = self.0.begin_read().expect("begin");
        let table = txn.open_table(REDB_BASE).expect("base table");
        let value = table.get(key).expect("get").expect("present");
        value.value().len()
    }
}

struct Fjall {
    db: fjall::Database,
    base: fjall::Keyspace,
    gsi: fjall::Keyspace,
}

impl Backend for Fjall {
    const NAME: &'static str = "fjall";

    fn open(dir: &Path) -> Self {
        let db = fjall::Database::builder(dir).open().expect("open fjall");
        let base = db.keyspace("base", KeyspaceCreateOptions::default).expect("base keyspace");
        let gsi = db.keyspace("gsi1", KeyspaceCreateOptions::default).expect("gsi keyspace");
        Self { db, base, gsi }
    }

    fn commit(&self, items: Vec<Item>) {
        // One batch across both keyspaces is atomic; SyncAll fsyncs the journal before returning,
        // which is what "acknowledged means on disk" needs (the default only writes to the OS).
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        for item in items {
            batch.insert(&self.base, item.base_key, item.value);
            batch.insert(&self.gsi, item.gsi_key, Vec::new());
        }
        batch.commit().expect("commit");
    }

    fn range(&self, lo: &[u8], hi: &[u8], reverse: bool) -> usize {
        let range = self.base.range(lo..hi);
        let sum = |acc: usize, guard: fjall::Guard| {
            let (k, v) = guard.into_inner().expect("entry");
            black_box((k, v));
            acc + 1
        };
        if reverse { range.rev().take(PAGE).fold(0, sum) } else { range.take(PAGE).fold(0, sum) }
    }

    fn get(&self, key: &[u8]) -> usize {
        self.base.get(key).expect("get").expect("present").len()
    }

    fn settle(&self) {
        // A store that has run a while holds most items in on-disk tables, not in the memtable:
        // flush both so the reads measure that state (the block cache stays warm, as redb's does).
        self.base.rotate_memtable_and_wait().expect("flush base");
        self.gsi.rotate_memtable_and_wait().expect("flush gsi");
    }

    fn quiesce(&self) {
        // Hidden, "experimental" fjall counters: acceptable in a bench, which only needs to know
        // when the background work its writes caused has finished.
        std::thread::sleep(Duration::from_millis(50));
        while self.db.outstanding_flushes() > 0
            || self.db.active_compactions() > 0
            || self.base.sealed_memtable_count() > 0
            || self.gsi.sealed_memtable_count() > 0
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn disk_detail(&self) -> String {
        let journal = self.db.journal_disk_space().expect("journal size");
        let tables = self.base.disk_space() + self.gsi.disk_space();
        format!(" (journal {:.1} MiB, tables {:.1} MiB)", mib(journal), mib(tables))
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// CPU time of the whole process, background threads included, where Linux tells it.
///
/// fjall flushes and compacts on background threads, which wall-clock throughput does not show
/// but which a 2-core server pays for; this is how the bench makes that cost visible.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields 14 and 15 of proc(5), utime and stime, in clock ticks of (practically always) 1/100 s.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

impl Redb {
    /// Like [`Backend::commit`], but reads each item's current version inside the write
    /// transaction first, as the engine must to drop a replaced item's stale index entries.
    fn commit_checked(&self, items: Vec<Item>) {
        let mut txn = self.0.begin_write().expect("begin");
        txn.set_durability(Durability::Immediate).expect("durability");
        {
            let mut base = txn.open_table(REDB_BASE).expect("base table");
            let mut gsi = txn.open_table(REDB_GSI).expect("gsi table");
            for item in &items {
                assert!(base.get(item.base_key.as_slice()).expect("get").is_none());
                base.insert(item.base_key.as_slice(), item.value.as_slice()).expect("insert");
                gsi.insert(item.gsi_key.as_slice(), &[][..]).expect("insert");
            }
        }
        txn.commit().expect("commit");
    }
}

/// fjall's single-writer transactional database: what the engine would need from fjall, since a
/// plain batch cannot read its own writes, and conditional writes and index maintenance read
/// inside the transaction.
struct FjallTx {
    db: fjall::SingleWriterTxDatabase,
    base: fjall::SingleWriterTxKeyspace,
    gsi: fjall::SingleWriterTxKeyspace,
}

impl FjallTx {
    fn open(dir: &Path) -> Self {
        let db = fjall::SingleWriterTxDatabase::builder(dir).open().expect("open fjall");
        let base = db.keyspace("base", KeyspaceCreateOptions::default).expect("base keyspace");
        let gsi = db.keyspace("gsi1", KeyspaceCreateOptions::default).expect("gsi keyspace");
        Self { db, base, gsi }
    }

    /// The same as [`Redb::commit_checked`].
    fn commit_checked(&self, items: Vec<Item>) {
        let mut tx = self.db.write_tx().durability(Some(PersistMode::SyncAll));
        for item in items {
            assert!(tx.get(&self.base, &item.base_key).expect("get").is_none());
            tx.insert(&self.base, item.base_key, item.value);
            tx.insert(&self.gsi, item.gsi_key, Vec::new());
        }
        tx.commit().expect("commit");
    }
}

/// Bytes under `path`, files only: their length, and the blocks allocated to them (which is less
/// for a file that was extended without being written, as a preallocated journal is).
fn disk_size(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).expect("metadata");
    if meta.is_file() {
        return (meta.len(), meta.blocks() * 512);
    }
    std::fs::read_dir(path)
        .expect("read dir")
        .map(|entry| disk_size(&entry.expect("dir entry").path()))
        .fold((0, 0), |(len, alloc), (l, a)| (len + l, alloc + a))
}

/// Criterion settings that keep the whole run near a minute on a shared 2-core machine.
fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
}

/// The write workloads, each backend right after the other so that both see the same machine.
fn writes(c: &mut Criterion) {
    for (name, per_commit) in WRITES {
        let mut group = c.benchmark_group(name);
        configure(&mut group);
        group.throughput(Throughput::Elements(per_commit));
        write_bench(&mut group, "redb", Redb::open, |s, items| s.commit(items), per_commit);
        write_bench(&mut group, "fjall", Fjall::open, |s, items| s.commit(items), per_commit);
        group.finish();
    }
    let mut group = c.benchmark_group(CHECKED);
    configure(&mut group);
    group.throughput(Throughput::Elements(BATCH));
    write_bench(&mut group, "redb", Redb::open, Redb::commit_checked, BATCH);
    write_bench(&mut group, "fjall-tx", FjallTx::open, FjallTx::commit_checked, BATCH);
    group.finish();
}

const WRITES: [(&str, u64); 2] = [("put_batch_25", BATCH), ("put_group_1000", BATCH * GROUP)];
const CHECKED: &str = "put_batch_25_read_first";

fn write_bench<S>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    open: impl Fn(&Path) -> S,
    commit: impl Fn(&S, Vec<Item>),
    per_commit: u64,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(dir.path());
    let mut next = 0;
    group.bench_function(name, |b| {
        b.iter_batched(
            || {
                next += per_commit;
                items(next - per_commit, per_commit)
            },
            |batch| commit(&store, batch),
            BatchSize::PerIteration,
        )
    });
}

/// The write workloads again, the two backends interleaved commit by commit.
///
/// A durable commit waits for the disk, which other processes on a shared machine also use, so
/// the criterion figures above drift between runs. Alternating the backends round by round gives
/// both the same disk, and their ratio holds steadier than either figure.
fn paired_writes(_: &mut Criterion) {
    for (name, per_commit) in WRITES {
        paired(name, per_commit, (Redb::open, Redb::commit), (Fjall::open, Fjall::commit));
    }
    paired(CHECKED, BATCH, (Redb::open, Redb::commit_checked), (FjallTx::open, FjallTx::commit_checked));
}

type Writer<S> = (fn(&Path) -> S, fn(&S, Vec<Item>));

fn paired<R, F>(name: &str, per_commit: u64, redb: Writer<R>, fjall: Writer<F>) {
    let (redb_dir, fjall_dir) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    let (redb_store, fjall_store) = (redb.0(redb_dir.path()), fjall.0(fjall_dir.path()));
    let commits_per_round = (1000 / per_commit).max(1);
    let (mut redb_time, mut fjall_time) = (Duration::ZERO, Duration::ZERO);
    let mut rounds = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        let from = rounds * commits_per_round * per_commit;
        let timed = |commit: &dyn Fn(Vec<Item>)| {
            let batches: Vec<Vec<Item>> =
                (0..commits_per_round).map(|n| items(from + n * per_commit, per_commit)).collect();
            let start = Instant::now();
            batches.into_iter().for_each(commit);
            start.elapsed()
        };
        // Each goes first every other round, so neither always pays for the other's writeback.
        if rounds % 2 == 0 {
            redb_time += timed(&|batch| redb.1(&redb_store, batch));
            fjall_time += timed(&|batch| fjall.1(&fjall_store, batch));
        } else {
            fjall_time += timed(&|batch| fjall.1(&fjall_store, batch));
            redb_time += timed(&|batch| redb.1(&redb_store, batch));
        }
        rounds += 1;
    }
    let written = rounds * commits_per_round * per_commit;
    let (redb_rate, fjall_rate) = (written as f64 / redb_time.as_secs_f64(), written as f64 / fjall_time.as_secs_f64());
    println!(
        "paired {name}: redb {redb_rate:.0} items/s, fjall {fjall_rate:.0} items/s, \
         fjall/redb {:.2}x ({written} items each)",
        fjall_rate / redb_rate,
    );
}

/// Items written by the sustained-ingestion measurement: enough for fjall to flush and compact.
const SUSTAINED: u64 = 1_000_000;

/// Sustained ingestion by group commits of 1000, one backend at a time, with the process's CPU time.
///
/// Wall-clock throughput hides fjall's background flushes and compactions, which run on other
/// threads; on a 2-core server they compete with request handling. CPU per item counts them (the
/// run waits for them to finish), which is the figure that matters when ingestion saturates the cores.
fn sustained(_: &mut Criterion) {
    sustained_run::<Redb>();
    sustained_run::<Fjall>();
}

fn sustained_run<B: Backend>() {
    let per_commit = BATCH * GROUP;
    // Generating items costs CPU too; measure it alone and take it out.
    let generation = process_cpu().map(|before| {
        for from in (0..SUSTAINED).step_by(per_commit as usize) {
            black_box(items(from, per_commit));
        }
        process_cpu().expect("cpu time") - before
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let store = B::open(dir.path());
    let cpu_before = process_cpu();
    let mut committing = Duration::ZERO;
    let start = Instant::now();
    for from in (0..SUSTAINED).step_by(per_commit as usize) {
        let batch = items(from, per_commit);
        let commit = Instant::now();
        store.commit(batch);
        committing += commit.elapsed();
    }
    let wall = start.elapsed();
    store.quiesce();
    let quiet = start.elapsed();
    let cpu = match (cpu_before, process_cpu(), generation) {
        (Some(before), Some(after), Some(generation)) => format!(
            "{:.1} µs CPU/item",
            (after - before).saturating_sub(generation).as_secs_f64() * 1e6 / SUSTAINED as f64
        ),
        _ => "CPU time unknown".to_owned(),
    };
    let size = disk_size(dir.path());
    println!(
        "sustained {}: {SUSTAINED} items in {wall:.2?}, {:.0} items/s while committing; background \
         work done at {quiet:.2?}; {cpu} background work included; on disk {:.0} MiB ({:.0} MiB allocated)",
        B::NAME,
        SUSTAINED as f64 / committing.as_secs_f64(),
        mib(size.0),
        mib(size.1),
    );
}

/// Fills a fresh store with `FILLED` items by group commits of 1000 and reports time, CPU and size.
fn fill<B: Backend>() -> (B, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = B::open(dir.path());
    let mut all_items = items(0, FILLED).into_iter();
    let cpu_before = process_cpu();
    let start = Instant::now();
    for _ in 0..FILLED / (BATCH * GROUP) {
        store.commit(all_items.by_ref().take((BATCH * GROUP) as usize).collect());
    }
    let fill = start.elapsed();
    store.settle();
    let settled = start.elapsed();
    let size = disk_size(dir.path());
    let cpu = match (cpu_before, process_cpu()) {
        (Some(before), Some(after)) => {
            format!("{:.1} µs CPU/item", (after - before).as_secs_f64() * 1e6 / FILLED as f64)
        }
        _ => "CPU time unknown".to_owned(),
    };
    println!(
        "{}: filled {FILLED} items in {fill:.2?} ({:.0} items/s); {settled:.2?} and {cpu} with the \
         flush; on disk: {:.1} MiB ({:.1} MiB allocated){}",
        B::NAME,
        FILLED as f64 / fill.as_secs_f64(),
        mib(size.0),
        mib(size.1),
        store.disk_detail(),
    );
    (store, dir)
}

/// The read workloads, against 100k items, each backend right after the other.
fn reads(c: &mut Criterion) {
    let (redb, _redb_dir) = fill::<Redb>();
    let (fjall, _fjall_dir) = fill::<Fjall>();
    for (name, reverse) in [("range_fwd_100", false), ("range_rev_100", true)] {
        let mut group = c.benchmark_group(name);
        configure(&mut group);
        group.throughput(Throughput::Elements(PAGE as u64));
        range_bench(&mut group, &redb, reverse);
        range_bench(&mut group, &fjall, reverse);
        group.finish();
    }
    let mut group = c.benchmark_group("get");
    configure(&mut group);
    group.throughput(Throughput::Elements(1));
    get_bench(&mut group, &redb);
    get_bench(&mut group, &fjall);
    group.finish();
}

/// Picks numbers below a bound from a fixed seed, so both backends read the same keys.
fn picker() -> impl FnMut(u64) -> u64 {
    let mut state = 1;
    move |bound| {
        state = splitmix(state);
        state % bound
    }
}

fn range_bench<B: Backend>(group: &mut BenchmarkGroup<'_, WallTime>, store: &B, reverse: bool) {
    let mut pick = picker();
    let per_partition = FILLED / PARTITIONS;
    group.bench_function(B::NAME, |b| {
        b.iter_batched(
            || {
                // A page that lies wholly inside one partition; `offset` is its last item's.
                let p = pick(PARTITIONS);
                let offset = pick(per_partition - PAGE as u64) + PAGE as u64 - 1;
                if reverse {
                    let mut hi = base_key(p + offset * PARTITIONS);
                    hi.push(0);
                    (partition_prefix(p), hi)
                } else {
                    (base_key(p + (offset + 1 - PAGE as u64) * PARTITIONS), partition_end(p))
                }
            },
            |(lo, hi)| assert_eq!(store.range(&lo, &hi, reverse), PAGE),
            BatchSize::SmallInput,
        )
    });
}

fn get_bench<B: Backend>(group: &mut BenchmarkGroup<'_, WallTime>, store: &B) {
    let mut pick = picker();
    group.bench_function(B::NAME, |b| {
        b.iter_batched(|| base_key(pick(FILLED)), |key| black_box(store.get(&key)), BatchSize::SmallInput)
    });
}

criterion_group!(benches, writes, paired_writes, sustained, reads);
criterion_main!(benches);
