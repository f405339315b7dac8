//! The shared storage workload (`store::workload`) against dynalite and the embedded engine in
//! one run, operation by operation, so that `BENCHMARKS.md` can state the embedded engine's
//! throughput as a multiple of dynalite's (the spec asks for at least 20×).
//!
//! Run with `cargo xtask bench -p store-dynamodb --bench engines` (which starts dynalite), or
//! `cargo xtask emulators cargo bench -p store-dynamodb --bench engines`. Without
//! `TALLY_DYNALITE_ENDPOINT` only the embedded engine is measured, after a loud notice.
//!
//! Each benchmark measures with `iter_custom`, so that besides criterion's report the bench
//! keeps its own count of operations and time per engine and operation, and prints the
//! embedded÷dynalite ratio of throughputs at the end.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use store::{Store, workload};
use store_dynamodb::{DynamoDbStore, Options};
use store_embedded::EmbeddedStore;
use tokio::runtime::Runtime;

/// The allocator the `tally` binary runs the engine with (its `main.rs` says why), so the bench
/// measures the engine as Tally runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TABLE: &str = "bench";
/// Items in each table before the reads are measured (as in the embedded engine's bench).
const FILLED: u64 = 20_000;

/// One engine under measurement.
struct Engine {
    name: &'static str,
    store: Arc<dyn Store>,
    /// The next unused item id, so that writes insert rather than overwrite.
    next: AtomicU64,
}

/// (operation, engine) → (elements processed, time taken), summed over every measured batch.
type Tally = Mutex<BTreeMap<(&'static str, &'static str), (u64, Duration)>>;

fn engines(runtime: &Runtime, dir: &std::path::Path) -> Vec<Engine> {
    let mut engines = Vec::new();
    let embedded: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir).expect("open the embedded engine"));
    engines.push(Engine { name: "embedded", store: embedded, next: AtomicU64::new(FILLED) });
    match std::env::var("TALLY_DYNALITE_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => {
            let store = runtime.block_on(DynamoDbStore::connect(Options::emulator(endpoint))).expect("connect");
            engines.push(Engine { name: "dynalite", store: Arc::new(store), next: AtomicU64::new(FILLED) });
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!!! dynalite bench DID NOT RUN: TALLY_DYNALITE_ENDPOINT is not set. Run \
                 `cargo xtask bench -p store-dynamodb --bench engines` to start dynalite. !!!!!\n"
            );
        }
    }
    for engine in &engines {
        let started = Instant::now();
        runtime.block_on(async {
            // A leftover table from an interrupted run against a long-lived dynalite.
            let _ = engine.store.delete_table(TABLE).await;
            workload::create(engine.store.as_ref(), TABLE).await.expect("create the bench table");
            workload::fill(engine.store.as_ref(), TABLE, FILLED).await.expect("fill the bench table");
        });
        eprintln!("{}: {FILLED} items written in {:.1?}", engine.name, started.elapsed());
    }
    engines
}

/// Runs `op` `iters` times on `engine`, adds the elements and time to `tally`, returns the time.
fn measure<F>(
    tally: &Tally,
    op: &'static str,
    engine: &Engine,
    elements: u64,
    iters: u64,
    runtime: &Runtime,
    mut run: F,
) -> Duration
where
    F: FnMut(&Engine) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>,
{
    let started = Instant::now();
    for _ in 0..iters {
        runtime.block_on(run(engine));
    }
    let elapsed = started.elapsed();
    let mut tally = tally.lock().unwrap();
    let entry = tally.entry((op, engine.name)).or_default();
    entry.0 += elements * iters;
    entry.1 += elapsed;
    elapsed
}

fn bench(c: &mut Criterion, runtime: &Runtime, engines: &[Engine], tally: &Tally) {
    let page = u64::from(workload::PAGE);
    let mut group = c.benchmark_group("put_single");
    group.sample_size(10).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(1));
    for engine in engines {
        group.bench_with_input(BenchmarkId::from_parameter(engine.name), engine, |b, e| {
            b.iter_custom(|iters| {
                measure(tally, "put_single", e, 1, iters, runtime, |e| {
                    Box::pin(async move {
                        let i = e.next.fetch_add(1, Ordering::Relaxed);
                        workload::put(e.store.as_ref(), TABLE, i).await.expect("put");
                    })
                })
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("put_concurrent_64");
    group.sample_size(10).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(workload::CONCURRENT));
    for engine in engines {
        group.bench_with_input(BenchmarkId::from_parameter(engine.name), engine, |b, e| {
            b.iter_custom(|iters| {
                measure(tally, "put_concurrent_64", e, workload::CONCURRENT, iters, runtime, |e| {
                    Box::pin(async move {
                        let first = e.next.fetch_add(workload::CONCURRENT, Ordering::Relaxed);
                        workload::concurrent_puts(e.store.as_ref(), TABLE, first).await.expect("puts");
                    })
                })
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("batch_write_25");
    group.sample_size(10).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(25));
    for engine in engines {
        group.bench_with_input(BenchmarkId::from_parameter(engine.name), engine, |b, e| {
            b.iter_custom(|iters| {
                measure(tally, "batch_write_25", e, 25, iters, runtime, |e| {
                    Box::pin(async move {
                        let first = e.next.fetch_add(25, Ordering::Relaxed);
                        workload::batch_write(e.store.as_ref(), TABLE, first).await.expect("batch write");
                    })
                })
            })
        });
    }
    group.finish();

    for (op, gsi) in [("query_page_100", false), ("gsi_query_page_100", true)] {
        let mut group = c.benchmark_group(op);
        group.sample_size(10).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
        group.throughput(Throughput::Elements(page));
        for engine in engines {
            let partition = AtomicU64::new(0);
            group.bench_with_input(BenchmarkId::from_parameter(engine.name), engine, |b, e| {
                b.iter_custom(|iters| {
                    measure(tally, op, e, page, iters, runtime, |e| {
                        let p = partition.fetch_add(1, Ordering::Relaxed);
                        Box::pin(async move {
                            let n = if gsi {
                                workload::gsi_query_page(e.store.as_ref(), TABLE, p).await
                            } else {
                                workload::query_page(e.store.as_ref(), TABLE, p).await
                            };
                            assert_eq!(n.expect("query"), workload::PAGE as usize);
                        })
                    })
                })
            });
        }
        group.finish();
    }
}

/// Prints items/s per engine and operation, and the embedded÷dynalite ratio.
fn report(tally: &Tally) {
    let tally = tally.lock().unwrap();
    let rate = |op, engine| tally.get(&(op, engine)).map(|(n, t): &(u64, Duration)| *n as f64 / t.as_secs_f64());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\nitems/s over every measured iteration (warm-up included), and the ratio:");
    let _ = writeln!(out, "| operation | embedded | dynalite | embedded ÷ dynalite |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for op in ["put_single", "put_concurrent_64", "batch_write_25", "query_page_100", "gsi_query_page_100"] {
        let (e, d) = (rate(op, "embedded"), rate(op, "dynalite"));
        let show = |r: Option<f64>| r.map_or("—".to_string(), |r| format!("{r:.0}"));
        let ratio = match (e, d) {
            (Some(e), Some(d)) => format!("{:.1}×", e / d),
            _ => "—".to_string(),
        };
        let _ = writeln!(out, "| `{op}` | {} | {} | {ratio} |", show(e), show(d));
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engines = engines(&runtime, dir.path());
    let tally = Tally::default();
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion, &runtime, &engines, &tally);
    criterion.final_summary();
    report(&tally);
    for engine in &engines {
        // Leave a long-lived dynalite as it was found.
        let _ = runtime.block_on(engine.store.delete_table(TABLE));
    }
}
