//! Criterion benches of the embedded engine on the shared storage workload
//! (`store::workload`): a single put, 64 concurrent puts, a 25-item batch write, a 100-item query page on the
//! table and on a GSI. Every write is durable before it returns.
//!
//! Run with `cargo bench -p store-embedded --bench engine`. The DynamoDB engine's bench runs
//! the same workload against dynalite and this engine in one run, for the ratio.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use store::Store;
use store::workload;
use store_embedded::EmbeddedStore;

/// The allocator the `tally` binary runs the engine with (its `main.rs` says why), so the bench
/// measures the engine as Tally runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TABLE: &str = "bench";
/// Items in the table before the reads are measured.
const FILLED: u64 = 20_000;

fn engine(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    runtime.block_on(async {
        workload::create(store.as_ref(), TABLE).await.unwrap();
        workload::fill(store.as_ref(), TABLE, FILLED).await.unwrap();
    });
    // New items get ids above the filled range, so writes insert rather than overwrite.
    let next = AtomicU64::new(FILLED);

    let mut group = c.benchmark_group("embedded");
    group.sample_size(20).measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));

    group.throughput(Throughput::Elements(1));
    group.bench_function("put_single", |b| {
        b.iter(|| {
            let i = next.fetch_add(1, Ordering::Relaxed);
            runtime.block_on(workload::put(store.as_ref(), TABLE, i)).unwrap()
        })
    });

    group.throughput(Throughput::Elements(workload::CONCURRENT));
    group.bench_function("put_concurrent_64", |b| {
        b.iter(|| {
            let first = next.fetch_add(workload::CONCURRENT, Ordering::Relaxed);
            runtime.block_on(workload::concurrent_puts(store.as_ref(), TABLE, first)).unwrap()
        })
    });

    group.throughput(Throughput::Elements(25));
    group.bench_function("batch_write_25", |b| {
        b.iter(|| {
            let first = next.fetch_add(25, Ordering::Relaxed);
            runtime.block_on(workload::batch_write(store.as_ref(), TABLE, first)).unwrap()
        })
    });

    group.throughput(Throughput::Elements(u64::from(workload::PAGE)));
    let mut partition = 0;
    group.bench_function("query_page_100", |b| {
        b.iter(|| {
            partition += 1;
            let n = runtime.block_on(workload::query_page(store.as_ref(), TABLE, partition)).unwrap();
            assert_eq!(n, workload::PAGE as usize);
        })
    });
    group.bench_function("gsi_query_page_100", |b| {
        b.iter(|| {
            partition += 1;
            let n = runtime.block_on(workload::gsi_query_page(store.as_ref(), TABLE, partition)).unwrap();
            assert_eq!(n, workload::PAGE as usize);
        })
    });
    group.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
