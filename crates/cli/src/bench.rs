//! `tally bench`: whole-system figures — ingestion in process and over HTTP, write units per
//! event, read units and latency of a dashboard — on the embedded engine in a temporary directory.
//!
//! The traffic is `analytics::synth`'s: a realistic month of visits to three sites. The figures
//! are what the spec's targets are about; `--output FILE` writes the per-event and per-dashboard
//! costs as JSON for `tally capacity --from-bench FILE`.

pub mod load;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use analytics::aggregate::{Aggregator, AggregatorConfig};
use analytics::enrich::{EnricherConfig, IpRanges};
use analytics::pipeline::{IngestResult, Pipeline, SiteSelector};
use analytics::sites::Sites;
use analytics::stats::{Metric, Query, Stats};
use analytics::synth::{Synth, SynthConfig};
use anyhow::{Context, Result, bail};
use model::Table;
use store::Store;

use crate::capacity::Costs;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Events to ingest.
    pub events: u64,
    /// Also measure ingestion over HTTP.
    pub http: bool,
    /// Concurrent ingestions (tasks in process, connections over HTTP).
    pub concurrency: usize,
    /// Dashboard repetitions for the latency percentiles.
    pub dashboards: usize,
    /// Also time each dashboard query alone.
    pub per_query: bool,
    /// Where to write the costs as JSON.
    pub output: Option<std::path::PathBuf>,
    /// How often aggregates are flushed (the configuration's `flush_interval`, as `serve` uses).
    pub flush_interval: Duration,
    /// Whether small event blocks are merged (the configuration's `compact_event_blocks`).
    pub compact_event_blocks: bool,
    /// Ingesting processes sharing the table: 1, or 2 to measure the shared path.
    pub ingesters: usize,
    /// Days the synthetic traffic spans, ending yesterday; at 365 or more the questions no
    /// aggregate holds are also asked over the last 12 months.
    pub days: u32,
    /// Where the bench's store lives and is kept (`--keep-store DIR`), instead of a temporary
    /// directory. A directory an earlier `--keep-store` run filled is reused: nothing is ingested and
    /// only the queries are timed, so a large store is generated once and read many times.
    pub store: Option<std::path::PathBuf>,
}

const DOMAINS: [&str; 3] = ["bench.example", "docs.bench.example", "shop.bench.example"];

struct Setup {
    /// The temporary directory the store is in, removed when the bench ends; `None` with
    /// `--keep-store DIR`, which is kept.
    _temp: Option<tempfile::TempDir>,
    /// The store's directory.
    dir: std::path::PathBuf,
    /// The store itself, for what its engine reports (compactions) and to see it close.
    engine: Arc<store_embedded::EmbeddedStore>,
    /// Whether the store was filled by an earlier `--keep-store` run: nothing is ingested.
    reused: bool,
    table: Table,
    sites: Arc<Sites>,
    aggregator: Arc<Aggregator>,
    pipeline: Arc<Pipeline>,
    /// Holds the ingest lease: the bench ingests alone, as one `tally serve` does.
    _lease: analytics::lease::IngestLease,
    /// With `--ingesters 2`, a second process's pipeline on the same table: both then ingest in
    /// shared mode, as two `tally serve` processes on one DynamoDB table do.
    second: Option<Ingester>,
}

/// What one ingesting process holds: its aggregator, its pipeline and its hold on the lease.
struct Ingester {
    aggregator: Arc<Aggregator>,
    pipeline: Arc<Pipeline>,
    _lease: analytics::lease::IngestLease,
}

async fn setup(flush_interval: Duration, compact: bool) -> Result<Setup> {
    setup_ingesters(flush_interval, compact, 1, None).await
}

async fn setup_ingesters(
    flush_interval: Duration,
    compact: bool,
    ingesters: usize,
    store_dir: Option<&std::path::Path>,
) -> Result<Setup> {
    let (temp, dir) = match store_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            (None, dir.to_path_buf())
        }
        None => {
            let temp = tempfile::tempdir().context("a temporary directory")?;
            let dir = temp.path().to_path_buf();
            (Some(temp), dir)
        }
    };
    let engine = Arc::new(
        store_embedded::EmbeddedStore::open(&dir).with_context(|| format!("opening the store at {}", dir.display()))?,
    );
    let store: Arc<dyn Store> = engine.clone();
    let table = Table::new(store, analytics::schema::tally_schema(analytics::schema::TABLE_NAME)).metered();
    let reused = match table.create_table().await {
        Ok(_) => false,
        Err(model::Error::Store(store::StoreError::ResourceInUse(_))) => true,
        Err(e) => return Err(e.into()),
    };
    let sites = Arc::new(Sites::new(table.clone()));
    if reused && sites.by_domain(DOMAINS[0]).await?.is_none() {
        bail!("{} holds a store that `tally bench --keep-store` did not fill", dir.display());
    }
    for domain in DOMAINS.iter().filter(|_| !reused) {
        let site = sites.add(domain, "Europe/Berlin").await?;
        let signup = analytics::goal::Goal::event("Signup")?;
        sites.add_goal_with_currency(&site.site_id, signup, Some(analytics::synth::CURRENCY)).await?;
        sites.add_goal(&site.site_id, analytics::goal::Goal::page("/pricing")?).await?;
    }
    // Events go between the bench's ingesting "processes" in process, each reached at its name.
    let handover = Arc::new(analytics::pipeline::LocalHandover::default());
    let first = ingester(&table, sites.clone(), flush_interval, compact, "bench", &handover).await?;
    let second = match ingesters {
        0 | 1 => None,
        2 => {
            // Its own site cache, aggregator (a run of its own) and pipeline: everything a
            // second process would hold. Joining the lease makes both shared.
            let sites = Arc::new(Sites::new(table.clone()));
            Some(ingester(&table, sites, flush_interval, compact, "bench-second", &handover).await?)
        }
        n => bail!("--ingesters {n}: the bench runs one or two"),
    };
    Ok(Setup {
        _temp: temp,
        dir,
        engine,
        reused,
        table,
        sites,
        aggregator: first.aggregator,
        pipeline: first.pipeline,
        _lease: first._lease,
        second,
    })
}

async fn ingester(
    table: &Table,
    sites: Arc<Sites>,
    flush_interval: Duration,
    compact: bool,
    host: &str,
    handover: &Arc<analytics::pipeline::LocalHandover>,
) -> Result<Ingester> {
    // Built as `tally serve` builds it, with the bench's enrichment (countries from a header).
    let settings = crate::app::Settings {
        enricher: EnricherConfig {
            mmdb_path: None,
            country_headers: vec![analytics::synth::COUNTRY_HEADER.to_owned()],
            trusted_proxies: IpRanges::parse(["127.0.0.1/32", "::1/128"]).map_err(|e| anyhow::anyhow!("{e}"))?,
        },
        aggregator: AggregatorConfig { flush_interval, ..AggregatorConfig::default() },
        compact_event_blocks: compact,
        host: host.to_owned(),
        handover: handover.clone(),
        // As `tally serve --advertise-host` does: it holds sessions, and the other hands it
        // their events.
        advertise: Some(host.to_owned()),
    };
    let app = crate::app::Application::build(table.clone(), sites, settings).await?;
    handover.add(host, &app.pipeline);
    Ok(Ingester { aggregator: app.aggregator, pipeline: app.pipeline, _lease: app.lease })
}

fn synth(events: u64, days: u32) -> Synth {
    let now = jiff::Timestamp::now().as_millisecond();
    let days = days.max(1);
    let start = now - now.rem_euclid(86_400_000) - i64::from(days) * 86_400_000;
    let per_day = events as f64 / f64::from(days);
    Synth::new(SynthConfig::new(42, DOMAINS.iter().map(|d| (*d).to_owned()).collect(), start, days, per_day))
}

/// The questions no aggregate holds, over `range` (named `span` in the output): a filtered breakdown (one country's
/// sources), the same with a regular expression, and a four-step funnel, each timed alone
/// (median of 5 of wall time and of the process's CPU time), read from the event blocks. Then
/// the scan rate: the range's events per CPU second of the filtered breakdown, next to a plain
/// loop counting the same country over the same columns decoded beforehand (the limit).
async fn raw_queries(
    stats: &Arc<Stats>,
    table: &Table,
    site: &analytics::sites::Site,
    range: analytics::period::DateRange,
    span: &str,
) -> Result<()> {
    use analytics::stats::{Filter, FilterOp};
    let filter =
        |op, dimension: &str, value: &str| Filter::new(op, dimension, vec![value.into()]).expect("a filter dimension");
    let metrics = vec![Metric::Visitors, Metric::Pageviews];
    let sources = |f: Filter| {
        Query::new(site.site_id.clone(), metrics.clone(), range, vec!["visit:source".into()], vec![f], vec![], 100, 0)
    };
    let cases = [
        ("filtered breakdown (country is DE, by source)", sources(filter(FilterOp::Is, "visit:country", "DE"))?),
        (
            "filtered breakdown (page matches ^/docs, by source)",
            sources(filter(FilterOp::Matches, "event:page", "^/docs"))?,
        ),
    ];
    let mut breakdown_cpu = Duration::ZERO;
    for (n, (name, q)) in cases.iter().enumerate() {
        let (wall, cpu) = timed(5, || stats.query(q)).await?;
        if n == 0 {
            breakdown_cpu = cpu;
        }
        println!("  {name}, {span}: {:.1} ms, {:.1} ms CPU (medians of 5)", ms(wall), ms(cpu));
    }
    let steps = vec![
        analytics::goal::Goal::page("/")?,
        analytics::goal::Goal::page("/pricing")?,
        analytics::goal::Goal::page("/docs*")?,
        analytics::goal::Goal::event("Signup")?,
    ];
    let (wall, cpu) = timed(5, || stats.funnel(&site.site_id, &range, &steps)).await?;
    println!("  4-step funnel, {span}: {:.1} ms, {:.1} ms CPU (medians of 5)", ms(wall), ms(cpu));

    // The scan rate against the plain loop over the same decoded columns.
    use analytics::block::{Col, Cols};
    let (start, end) = site.zone.bounds_ms(&range)?;
    let first = analytics::visitor::UtcDay::from_unix_ms(start).previous();
    let last = analytics::visitor::UtcDay::from_unix_ms(end - 1);
    let mut decoded = Vec::new();
    for d in first.days()..=last.days() {
        let day = analytics::visitor::UtcDay::from_days(d);
        for b in analytics::event_store::blocks_of_day(table, &site.site_id, day).await? {
            decoded.push(b.read(Cols::NONE.with(Col::Ts).with(Col::Session).with(Col::VisitCountry))?);
        }
    }
    let events: usize = decoded.iter().map(|b| b.len).sum();
    let t = Instant::now();
    let mut counted = 0u64;
    for _ in 0..10 {
        for b in &decoded {
            let country = b.visit_col(Col::VisitCountry).context("the country column")?;
            let de: Vec<bool> = country.values().map(|v| v == "DE").collect();
            for (i, &s) in b.session.iter().enumerate() {
                counted += u64::from(de[country.rows[s as usize] as usize] && (start..end).contains(&b.ts[i]));
            }
        }
    }
    let plain = t.elapsed() / 10;
    std::hint::black_box(counted);
    println!(
        "  scan rate: {:.1} M events per CPU second through the engine (the filtered breakdown over the {events} \
         events of the partitions read); a plain loop counting the same country over the same columns, decoded \
         beforehand: {:.0} M events/s on one core",
        events as f64 / breakdown_cpu.as_secs_f64().max(1e-9) / 1e6,
        events as f64 / plain.as_secs_f64().max(1e-9) / 1e6
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs `f` `runs` times; the medians of its wall time and of the process's CPU time.
async fn timed<T, E, F>(runs: usize, f: impl Fn() -> F) -> Result<(Duration, Duration)>
where
    F: std::future::Future<Output = std::result::Result<T, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (t, cpu) = (Instant::now(), threads_cpu());
        f().await?;
        walls.push(t.elapsed());
        cpus.push(threads_cpu().saturating_sub(cpu));
    }
    walls.sort();
    cpus.sort();
    Ok((walls[runs / 2], cpus[runs / 2]))
}

/// CPU time of the process's threads alive now (`/proc/self/task/*/schedstat`, nanoseconds);
/// zero off Linux.
fn threads_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Duration::ZERO };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
        .sum();
    Duration::from_nanos(ns)
}

/// Every item's count and size (DynamoDB's item size) by entity, largest first.
async fn item_bytes_by_entity(table: &model::Table) -> Result<(Vec<(String, (u64, u64))>, AggregateWrites)> {
    use futures::StreamExt;
    let mut sizes: std::collections::HashMap<String, (u64, u64)> = std::collections::HashMap::new();
    let mut aggregates = AggregateWrites::default();
    let mut pages = table.scan().pages();
    while let Some(page) = pages.next().await {
        for record in page?.records {
            let entry = sizes.entry(record.entity().to_owned()).or_default();
            let size = store::item_size(record.item()) as u64;
            entry.0 += 1;
            entry.1 += size;
            if record.entity() == "Aggregate" {
                aggregates.add(&record, size);
            }
        }
    }
    let mut sizes: Vec<_> = sizes.into_iter().collect();
    sizes.sort_by_key(|(_, (_, bytes))| std::cmp::Reverse(*bytes));
    Ok((sizes, aggregates))
}

/// Where aggregates' write units went, per period: items, their writes (each item's version
/// counts its writes) and the units those writes would cost at the item's final size, an upper
/// bound (an item grows as it is written), with the share of units spent on items over 1 KB.
#[derive(Default)]
struct AggregateWrites {
    by_period: std::collections::BTreeMap<String, PeriodWrites>,
}

/// One period's share of [`AggregateWrites`].
#[derive(Default)]
struct PeriodWrites {
    items: u64,
    writes: u64,
    units: u64,
    /// Units of the items over one write unit.
    units_on_big_items: u64,
}

impl AggregateWrites {
    fn add(&mut self, record: &model::Record, size: u64) {
        let period = record.string("period").unwrap_or("?").to_owned();
        let writes = record.opt_i64("version").ok().flatten().unwrap_or(1).max(1) as u64;
        let unit = store::limits::WRITE_UNIT_BYTES as u64;
        let units = writes * size.div_ceil(unit).max(1);
        let p = self.by_period.entry(period).or_default();
        p.items += 1;
        p.writes += writes;
        p.units += units;
        if size > unit {
            p.units_on_big_items += units;
        }
    }

    fn line(&self, events: u64) -> String {
        self.by_period
            .iter()
            .map(|(period, p)| {
                format!(
                    "{period} {} items, {} writes, {:.3} units per event ({:.0} % on items over 1 KB)",
                    p.items,
                    p.writes,
                    p.units as f64 / events as f64,
                    100.0 * p.units_on_big_items as f64 / p.units.max(1) as f64
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Bytes the files under `dir` take on disk (their allocated blocks), or `None` off Unix.
fn allocated_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let meta = entry.metadata().ok()?;
        total += if meta.is_dir() { allocated_bytes(&entry.path())? } else { meta.blocks() * 512 };
    }
    Some(total)
}

/// Each file's allocated bytes under `dir` (subdirectories' files named by their path), the
/// largest first: where the disk figure goes (the database, the journal).
fn files_allocated(dir: &std::path::Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                let name = entry.path().strip_prefix(dir).map_or_else(|_| entry.path(), |p| p.to_path_buf());
                out.push((name.display().to_string(), meta.blocks() * 512));
            }
        }
    }
    out.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
    out
}

/// Prints the disk figure of the store in `dir`: allocated bytes, per accepted event, by file.
fn print_disk(label: &str, dir: &std::path::Path, accepted: u64) {
    if let Some(bytes) = allocated_bytes(dir) {
        println!(
            "{label}: {:.1} MB allocated, {:.0} bytes per event, everything included ({})",
            bytes as f64 / 1e6,
            bytes as f64 / accepted as f64,
            files_allocated(dir)
                .iter()
                .map(|(name, bytes)| format!("{name} {:.1} MB", *bytes as f64 / 1e6))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

fn rate(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// CPU seconds this process has used, user and system, from `/proc/self/stat` (Linux reports
/// them in ticks of 1/100 s to user space); `None` elsewhere. Events per second move with how
/// busy the machine is; CPU per event moves much less, so the bench prints both.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// The bench's CPU line for `count` units of work done in `elapsed` since `before` (a
/// [`process_cpu_seconds`] reading): CPU per unit and the cores busy; `None` without `/proc`.
fn cpu_line(label: &str, unit: &str, before: Option<f64>, count: u64, elapsed: Duration) -> Option<String> {
    let cpu = process_cpu_seconds()? - before?;
    Some(format!(
        "{label}: {:.0} µs per {unit} ({:.2} cores busy)",
        cpu * 1e6 / count.max(1) as f64,
        cpu / elapsed.as_secs_f64().max(1e-9)
    ))
}

/// What the engine's group commits did between two readings of [`store_embedded::Groups`], over
/// `elapsed` and `count` events: how many groups, how many events each held, and how long the
/// journal's syncs took. With one write in flight per task, the groups follow one another no
/// faster than the disk syncs, so the sync time says how far the disk set the run's pace, and
/// the events per group how many each sync served.
fn groups_line(before: store_embedded::Groups, after: store_embedded::Groups, count: u64, elapsed: Duration) -> String {
    let groups = after.count.saturating_sub(before.count);
    let operations = after.operations.saturating_sub(before.operations);
    let syncs = after.journal_syncs.saturating_sub(before.journal_syncs);
    let sync_time = after.journal_time.saturating_sub(before.journal_time);
    let busy = after.busy.saturating_sub(before.busy);
    format!(
        "engine: {groups} group commits ({:.0} a second; {:.1} writes and {:.1} events each), the journal's write \
         and sync {:.2} ms on average, the writer busy {:.0} % of the time",
        rate(groups, elapsed),
        operations as f64 / groups.max(1) as f64,
        count as f64 / groups.max(1) as f64,
        sync_time.as_secs_f64() * 1000.0 / syncs.max(1) as f64,
        busy.as_secs_f64() * 100.0 / elapsed.as_secs_f64().max(1e-9)
    )
}

/// What sessions leaving a full cache cost: the visitors' items written for live ones, and the
/// items read again for visitors no longer in memory, per event or request (`unit`).
fn sessions_line(pipelines: &[&Pipeline], count: u64, unit: &str) -> String {
    let sum = |f: fn(&analytics::pipeline::PipelineCounters) -> u64| -> u64 {
        pipelines.iter().map(|p| f(p.counters())).sum()
    };
    let written = sum(|c| c.evicted_written.load(Ordering::Relaxed));
    let packed = sum(|c| c.evicted_packed.load(Ordering::Relaxed));
    let found = sum(|c| c.packed_found.load(Ordering::Relaxed));
    let lookups = sum(|c| c.session_lookups.load(Ordering::Relaxed));
    let (held, bytes) = pipelines.iter().map(|p| p.packed_sessions()).fold((0, 0), |(n, b), (pn, pb)| (n + pn, b + pb));
    let per = |n: u64| n as f64 / count.max(1) as f64;
    format!(
        "sessions leaving memory: {written} written to their visitors' items while live ({:.3} per {unit}), \
         {packed} packed in memory ({:.3} per {unit}; {held} held at the end, {:.0} bytes each), \
         {found} found packed ({:.3} per {unit}), {lookups} items read for visitors not in memory ({:.3} per {unit})",
        per(written),
        per(packed),
        bytes as f64 / held.max(1) as f64,
        per(found),
        per(lookups)
    )
}

/// Runs the bench and prints its figures: ingestion in process, a dashboard's latency and read
/// units, optionally ingestion over HTTP, and the costs as JSON if asked.
pub async fn run(options: &BenchOptions) -> Result<()> {
    let mut s = setup_ingesters(
        options.flush_interval,
        options.compact_event_blocks,
        options.ingesters,
        options.store.as_deref(),
    )
    .await?;
    let ingested = if s.reused {
        if options.output.is_some() {
            bail!("--output needs ingestion measured, and the store in {} was filled earlier", s.dir.display());
        }
        eprintln!(
            "tally bench: the store in {} was filled earlier; nothing is ingested, only its queries are timed",
            s.dir.display()
        );
        None
    } else {
        eprintln!(
            "tally bench: {} synthetic events, {} at a time, {} ingesting process(es)",
            options.events,
            options.concurrency,
            options.ingesters.max(1)
        );
        let ingested = ingest_in_process(&s, options).await?;
        print_ingestion(&s, &ingested).await?;
        Some(ingested)
    };

    // A dashboard: a 30-day overview with its daily series and six breakdowns.
    // The queries read through a meter of their own: the aggregator's and the lease's background
    // work on the same table would otherwise add to a dashboard's read units now and then.
    let queries_table = s.table.metered();
    let stats = Arc::new(Stats::new(queries_table.clone(), s.sites.clone()));
    let site = s.sites.by_domain(DOMAINS[0]).await?.context("the bench site")?;
    let today = site.zone.date_of(jiff::Timestamp::now().as_millisecond())?;
    let range = analytics::period::RangeSpec::ThirtyDays.resolve(today, None)?;
    let queries = dashboard_queries(&site, range)?;
    if options.per_query {
        time_each_query(&stats, &site, range, &queries).await?;
    }
    let read_per_dashboard = time_dashboards(&stats, &queries_table, &s, &site, today, &queries, options).await?;

    if options.http {
        ingest_over_http(options).await?;
    }
    s.aggregator.shutdown().await?;

    if let (Some(path), Some(ingested)) = (&options.output, &ingested) {
        write_costs(path, options, ingested, read_per_dashboard)?;
    }
    if let Some(ingested) = &ingested {
        // What a user finds once the store closed: the close checkpoints, cuts the journal and
        // compacts a file that grew since its last compaction (store-embedded's DESIGN.md).
        let (temp, dir) = (s._temp.take(), s.dir.clone());
        // The store has closed once its file opens again: the last reference may go on another
        // task, whose thread then checkpoints and compacts. The new open and close add a commit.
        let waited = Instant::now();
        drop((stats, queries_table, s));
        let closed = loop {
            match store_embedded::EmbeddedStore::open(&dir) {
                Ok(again) => break Ok(again),
                Err(store::StoreError::ResourceInUse(_)) if waited.elapsed() < Duration::from_secs(600) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => break Err(e),
            }
        };
        match closed {
            Ok(again) => {
                let label = format!(
                    "disk after the store closed (closing took {:.2} s, its last checkpoint and compaction included)",
                    waited.elapsed().as_secs_f64()
                );
                drop(again);
                print_disk(&label, &dir, ingested.accepted);
            }
            Err(e) => println!("disk after the store closed: not measured ({e})"),
        }
        drop(temp);
    }
    Ok(())
}

/// What ingesting the synthetic events in process measured.
struct Ingested {
    /// Events generated.
    total: u64,
    /// Events the pipelines accepted.
    accepted: u64,
    /// Events they dropped (bots).
    dropped: u64,
    /// From the first event to the last one ingested.
    ingest_elapsed: Duration,
    /// The same, and the final flush.
    all_elapsed: Duration,
    /// The CPU line of ingestion ([`cpu_line`]).
    cpu: Option<String>,
    /// The engine's group commits while ingesting ([`groups_line`]).
    groups: String,
    /// What sessions leaving memory cost while ingesting ([`sessions_line`]).
    sessions: String,
    /// The largest flush lag sampled while ingesting, in ms.
    max_lag_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Units the table's meter saw while ingesting: raw events, runs, salts, session and site
    /// lookups (flushes measure theirs on a meter of their own, in `aggregation`).
    capacity: model::Capacity,
    /// Small event blocks merged after ingesting.
    compacted: usize,
    /// Whether small blocks were merged (`compact_event_blocks`), which the write units include.
    merging: bool,
    /// The aggregators' counters once everything was flushed (both ingesters' with two).
    aggregation: analytics::aggregate::AggregatorStats,
}

impl Ingested {
    /// Write units per accepted event: the table's and the flushes'.
    fn write_per_event(&self) -> f64 {
        (self.capacity.write_units + self.aggregation.flush_write_units) / self.accepted as f64
    }

    /// Read units per accepted event: the table's and the flushes'.
    fn read_per_event(&self) -> f64 {
        (self.capacity.read_units + self.aggregation.flush_read_units) / self.accepted as f64
    }
}

/// Ingests the synthetic events through the pipelines directly, drawn from one generator by
/// `options.concurrency` tasks, sampling how far dashboards lag, then flushes (and compacts, as a
/// running server would have). Fails when no event was accepted.
async fn ingest_in_process(s: &Setup, options: &BenchOptions) -> Result<Ingested> {
    // In process: the pipeline directly, events drawn from one generator by many tasks.
    let events: Vec<_> = synth(options.events, options.days).take(options.events as usize).collect();
    let total = events.len() as u64;
    let queue = Arc::new(std::sync::Mutex::new(events.into_iter()));
    s.table.reset_capacity();
    let started = Instant::now();
    let cpu_before = process_cpu_seconds();
    let groups_before = s.engine.groups();
    // How far dashboards lag ingestion: the age of the oldest committed event not yet in the
    // aggregates, sampled every 100 ms while events go in (the spec allows 10 s).
    let max_lag_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (aggregator, max_lag_ms) = (s.aggregator.clone(), max_lag_ms.clone());
        tokio::spawn(async move {
            loop {
                max_lag_ms.fetch_max(aggregator.stats().flush_lag_ms, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    for n in 0..options.concurrency.max(1) {
        // With two ingesters, every other task sends to the second: a load balancer in front
        // of two processes, so one visitor's events reach both.
        let pipeline = match &s.second {
            Some(second) if n % 2 == 1 => second.pipeline.clone(),
            _ => s.pipeline.clone(),
        };
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            let (mut accepted, mut other) = (0u64, 0u64);
            loop {
                let next = store::sync::lock(&queue).next();
                let Some(event) = next else { break };
                match pipeline.ingest(event, SiteSelector::Domain).await {
                    IngestResult::Accepted => accepted += 1,
                    IngestResult::Failed(e) => return Err(anyhow::anyhow!("ingestion failed: {e}")),
                    _ => other += 1,
                }
                if (accepted + other) % 50_000 == 0 {
                    eprintln!("… {} events", accepted + other);
                }
            }
            Ok::<_, anyhow::Error>((accepted, other))
        }));
    }
    let (mut accepted, mut dropped) = (0, 0);
    for t in tasks {
        let (a, d) = t.await??;
        accepted += a;
        dropped += d;
    }
    let ingest_elapsed = started.elapsed();
    let cpu = cpu_line("CPU while ingesting", "event", cpu_before, accepted, ingest_elapsed);
    let groups = groups_line(groups_before, s.engine.groups(), accepted, ingest_elapsed);
    let mut pipelines = vec![&*s.pipeline];
    if let Some(second) = &s.second {
        pipelines.push(&*second.pipeline);
    }
    let sessions = sessions_line(&pipelines, accepted, "event");
    sampler.abort();
    s.aggregator.flush_now().await?;
    if let Some(second) = &s.second {
        second.aggregator.flush_now().await?;
    }
    let all_elapsed = started.elapsed();
    let ingest_capacity = s.table.reset_capacity();
    // As a running server's would be by now: the small blocks merged (when compaction is on).
    // Not counted in the write units above, which include the merges made while ingesting.
    let compacted = if options.compact_event_blocks { s.pipeline.compact_blocks_now().await? } else { 0 };
    s.table.reset_capacity();
    if accepted == 0 {
        bail!("no event was accepted");
    }
    let mut aggregation = s.aggregator.stats();
    if let Some(second) = &s.second {
        let b = second.aggregator.stats();
        aggregation.flush_write_units += b.flush_write_units;
        aggregation.flush_read_units += b.flush_read_units;
        aggregation.items_written += b.items_written;
        aggregation.epochs_flushed += b.epochs_flushed;
        aggregation.conflicts += b.conflicts;
        aggregation.wrong_guesses += b.wrong_guesses;
    }
    Ok(Ingested {
        total,
        accepted,
        dropped,
        ingest_elapsed,
        all_elapsed,
        cpu,
        groups,
        sessions,
        max_lag_ms,
        capacity: ingest_capacity,
        compacted,
        merging: options.compact_event_blocks,
        aggregation,
    })
}

/// Prints what ingestion measured: rates, CPU, write and read units per event, aggregation, the
/// dashboard lag, event blocks, disk and item sizes.
async fn print_ingestion(s: &Setup, ingested: &Ingested) -> Result<()> {
    let Ingested { total, accepted, dropped, ingest_elapsed, all_elapsed, compacted, .. } = *ingested;
    let (ingest_capacity, a) = (&ingested.capacity, &ingested.aggregation);
    let (write_per_event, read_per_event) = (ingested.write_per_event(), ingested.read_per_event());
    println!("events: {total} generated, {accepted} accepted, {dropped} dropped (bots)");
    println!(
        "in process: {:.0} events/s ingested ({:.2} s), {:.0} events/s including the final flush",
        rate(accepted, ingest_elapsed),
        ingest_elapsed.as_secs_f64(),
        rate(accepted, all_elapsed)
    );
    if let Some(line) = &ingested.cpu {
        println!("{line}");
    }
    println!("{}", ingested.groups);
    println!("{}", ingested.sessions);
    println!(
        "write units per event: {write_per_event:.3} ({:.3} raw events, runs and salts; {:.3} aggregates; {})",
        ingest_capacity.write_units / accepted as f64,
        a.flush_write_units / accepted as f64,
        if ingested.merging {
            "small blocks merged, the embedded engine's default: `--compact-event-blocks false` measures DynamoDB's"
        } else {
            "small blocks not merged, DynamoDB's default"
        }
    );
    println!(
        "aggregation: {} flushes, {} aggregate items written, {:.1} events per item written, {} writes refused \
         (another process wrote the item first), {} items created unread refused (they existed)",
        a.epochs_flushed,
        a.items_written,
        accepted as f64 / a.items_written.max(1) as f64,
        a.conflicts,
        a.wrong_guesses
    );
    println!(
        "dashboard lag behind ingestion: at most {:.1} s (oldest unflushed event, sampled every 100 ms)",
        ingested.max_lag_ms.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1000.0
    );
    println!(
        "read units per event: {read_per_event:.3} ({:.3} session and salt lookups missing the cache and compaction's \
         reads of small blocks, {:.3} aggregate items read by flushes)",
        (read_per_event - a.flush_read_units / accepted as f64).max(0.0),
        a.flush_read_units / accepted as f64
    );
    if let Some(second) = &s.second {
        // Shared, each event claims its session's next slot; a cached session another process
        // moved on costs a refused claim, unless the claim reads first (`stale::StaleRate`).
        let claims = |f: fn(&analytics::pipeline::PipelineCounters) -> &std::sync::atomic::AtomicU64| {
            f(s.pipeline.counters()).load(Ordering::Relaxed) + f(second.pipeline.counters()).load(Ordering::Relaxed)
        };
        let n = claims(|c| &c.claims);
        let share = |k: u64| k as f64 * 100.0 / n.max(1) as f64;
        println!(
            "session claims of cached sessions: {n}, {:.0} % stale (moved on by the other process), {:.0} % read \
             first, {:.0} % refused",
            share(claims(|c| &c.stale_claims)),
            share(claims(|c| &c.claims_read_first)),
            share(claims(|c| &c.refused_claims))
        );
        println!(
            "sessions held by one process: {} claims made a holder, {} events handed to the holder ({:.0} % of \
             events)",
            claims(|c| &c.held_claims),
            claims(|c| &c.handed_over),
            claims(|c| &c.handed_over) as f64 * 100.0 / accepted.max(1) as f64
        );
    }
    let blocks = s.pipeline.block_counters();
    let seconds = s.second.as_ref().map(|second| second.pipeline.block_counters());
    let sum = |f: fn(&analytics::event_store::WriterCounters) -> &std::sync::atomic::AtomicU64| {
        f(blocks).load(Ordering::Relaxed) + seconds.map_or(0, |c| f(c).load(Ordering::Relaxed))
    };
    let (n_blocks, block_bytes) = (sum(|c| &c.blocks), sum(|c| &c.bytes));
    println!(
        "event blocks: {n_blocks} written in {} rounds, {:.0} events and {:.1} KB each, {:.1} bytes per event \
         encoded; {} merged away; {} events held back for the next block to end a block on a write unit; {:.2} \
         encodings per block",
        sum(|c| &c.rounds),
        sum(|c| &c.events) as f64 / n_blocks.max(1) as f64,
        block_bytes as f64 / n_blocks.max(1) as f64 / 1024.0,
        block_bytes as f64 / accepted as f64,
        sum(|c| &c.compacted).max(compacted as u64),
        sum(|c| &c.held),
        sum(|c| &c.encodings) as f64 / n_blocks.max(1) as f64
    );
    let while_ingesting = s.engine.compactions();
    print_disk(
        &format!(
            "disk ({} compaction(s) of the database while ingesting, the longest pause {:.0} ms)",
            while_ingesting.count,
            while_ingesting.longest_pause.as_secs_f64() * 1000.0
        ),
        &s.dir,
        accepted,
    );
    // Once ingestion stops the engine's writer goes idle, checkpoints and cuts its journal
    // (store-embedded's DESIGN.md, "The journal"): the store at rest, as a server whose load
    // fell keeps it. Only the aggregator's heartbeat writes meanwhile.
    // At that rest point the writer also compacts the database file, which grew while ingesting
    // (DESIGN.md, "Compaction at rest"): wait for that too.
    // The engine compacts a new store's file once it takes 4 MiB (a small bench's never is), and
    // while serving only up to 512 MiB: a larger file waits for the close.
    let engine = store_embedded::Compaction::default();
    let bytes = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(s.dir.join("tally.redb")).map_or(0, |m| m.blocks() * 512)
    };
    let compacts = engine.growth.is_some_and(|growth| bytes > growth + (1 << 20)) && bytes <= engine.serving_max;
    let journal = s.dir.join(store_embedded::JOURNAL_FILE);
    let waited = Instant::now();
    while (std::fs::metadata(&journal).map_or(0, |m| m.len()) > 1 << 20
        || (compacts && s.engine.compactions().count == while_ingesting.count))
        && waited.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let compactions = s.engine.compactions();
    let label = match compactions.last_bytes.filter(|_| compactions.count > while_ingesting.count) {
        Some((before, after)) => format!(
            "disk at rest (the journal cut and the database compacted once the writer went quiet: {:.1} to {:.1} MB, \
             readers and writers paused {:.0} ms)",
            before as f64 / 1e6,
            after as f64 / 1e6,
            compactions.last_pause.as_secs_f64() * 1000.0,
        ),
        None if compacts => {
            "disk at rest (the journal cut once the writer went idle; not compacted within a minute)".to_string()
        }
        None if bytes > engine.serving_max => "disk at rest (the journal cut once the writer went idle; a file \
                                               this large is compacted when the store closes)"
            .to_string(),
        None => "disk at rest (the journal cut once the writer went idle; too small to compact)".to_string(),
    };
    print_disk(&label, &s.dir, accepted);
    let (by_entity, aggregate_writes) = item_bytes_by_entity(&s.table).await?;
    let logical: u64 = by_entity.iter().map(|(_, (_, b))| b).sum();
    println!(
        "items: {:.0} bytes per event as DynamoDB sizes them ({}), the rest is the engine's pages, indexes and journal",
        logical as f64 / accepted as f64,
        by_entity
            .iter()
            .map(|(entity, (n, b))| format!("{entity} {n} items {:.0} B/event", *b as f64 / accepted as f64))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "aggregate writes at their items' final sizes (an upper bound of their units): {}",
        aggregate_writes.line(accepted)
    );
    Ok(())
}

/// The dashboard's queries over `range`: the overview, its daily series and six breakdowns.
fn dashboard_queries(site: &analytics::sites::Site, range: analytics::period::DateRange) -> Result<Vec<Query>> {
    let overview = [
        Metric::Visitors,
        Metric::Visits,
        Metric::Pageviews,
        Metric::ViewsPerVisit,
        Metric::BounceRate,
        Metric::VisitDuration,
    ];
    let mut queries = vec![
        query_by(site, &overview, range, None, 10_000)?,
        query_by(site, &[Metric::Visitors, Metric::Pageviews], range, Some("time:day"), 10_000)?,
    ];
    for dimension in ["event:page", "visit:source", "visit:country", "visit:device", "visit:browser", "visit:os"] {
        queries.push(query_by(site, &[Metric::Visitors], range, Some(dimension), 10)?);
    }
    Ok(queries)
}

/// A query of `site`'s `metrics` over `range`, by `dimension` (none: the totals), unfiltered,
/// at most `limit` rows.
fn query_by(
    site: &analytics::sites::Site,
    metrics: &[Metric],
    range: analytics::period::DateRange,
    dimension: Option<&str>,
    limit: usize,
) -> Result<Query> {
    let dimensions = dimension.map(String::from).into_iter().collect();
    Ok(Query::new(site.site_id.clone(), metrics.to_vec(), range, dimensions, vec![], vec![], limit, 0)?)
}

/// Times every panel tab of the dashboard alone (mean of 20), and the goals panel's revenue.
async fn time_each_query(
    stats: &Arc<Stats>,
    site: &analytics::sites::Site,
    range: analytics::period::DateRange,
    queries: &[Query],
) -> Result<()> {
    // Every panel tab of the dashboard, not only the six the dashboard opens with: each is
    // read from aggregates (budget 50 ms at 1 M events).
    let mut tabs = queries.to_vec();
    for dimension in [
        "visit:entry_page",
        "visit:exit_page",
        "visit:referrer",
        "visit:utm_source",
        "visit:utm_medium",
        "visit:utm_campaign",
        "visit:region",
        "visit:city",
        "visit:browser_version",
        "visit:os_version",
        "visit:screen",
        "visit:language",
        "event:goal",
        "event:name",
    ] {
        tabs.push(query_by(site, &[Metric::Visitors], range, Some(dimension), 10)?);
    }
    // The Locations map asks for every country.
    tabs.push(query_by(site, &[Metric::Visitors, Metric::Visits], range, Some("visit:country"), 300)?);
    for q in &tabs {
        let t = Instant::now();
        for _ in 0..20 {
            stats.query(q).await?;
        }
        let name = q.dimensions.first().map_or("overview".into(), |d| d.name());
        let name = if q.limit == 300 { "visit:country (map, every country)" } else { &name };
        println!("  query {name}: {:.2} ms alone (mean of 20)", t.elapsed().as_secs_f64() * 1000.0 / 20.0);
    }
    // The goals panel's revenue is read from event blocks (budget 200 ms at 1 M events).
    let goals: Vec<analytics::stats::RevenueGoal> = site
        .goals
        .iter()
        .filter_map(|g| {
            Some(analytics::stats::RevenueGoal { goal: g.goal.display_name(), currency: g.currency.clone()? })
        })
        .collect();
    let (wall, cpu) = timed(5, || stats.revenue(&site.site_id, &range, &[], &goals)).await?;
    let revenue = stats.revenue(&site.site_id, &range, &[], &goals).await?;
    let total = revenue.first().map(|r| format!("{} {} over {} events", r.total, r.currency, r.events));
    println!(
        "  goals revenue (blocks), 30 days: {:.1} ms, {:.1} ms CPU (medians of 5); {}",
        ms(wall),
        ms(cpu),
        total.unwrap_or_default()
    );
    Ok(())
}

/// Times `options.dashboards` dashboards (the queries going out together, as the dashboard page
/// sends them), asks the questions no aggregate holds ([`raw_queries`]) over 30 days and, with a
/// year of traffic, over 12 months, prints the latency percentiles and returns the read units per
/// dashboard.
async fn time_dashboards(
    stats: &Arc<Stats>,
    queries_table: &Table,
    s: &Setup,
    site: &analytics::sites::Site,
    today: jiff::civil::Date,
    queries: &[Query],
    options: &BenchOptions,
) -> Result<f64> {
    let range = analytics::period::RangeSpec::ThirtyDays.resolve(today, None)?;
    let mut latencies = Vec::new();
    // The figure is the queries' own reads, through `queries_table`'s meter: the site's settings
    // are read through the sites' table (cached for a few seconds, and as many of the queries as
    // miss the cache at once read it), and the aggregator's and the lease's background work
    // through the bench's; either would make the read units vary from run to run.
    queries_table.reset_capacity();
    let cpu_before = threads_cpu();
    for _ in 0..options.dashboards.max(1) {
        // As the dashboard page does, the queries go out together and the dashboard is shown
        // when the last answer is in.
        let t = Instant::now();
        let answers = queries.iter().map(|q| {
            let (stats, q) = (stats.clone(), q.clone());
            tokio::spawn(async move { stats.query(&q).await })
        });
        for answer in futures::future::try_join_all(answers).await? {
            answer?;
        }
        latencies.push(t.elapsed());
    }
    let dashboard_cpu = threads_cpu().saturating_sub(cpu_before) / latencies.len() as u32;
    let dashboard_capacity = queries_table.reset_capacity();
    raw_queries(stats, &s.table, site, range, "30 days").await?;
    if options.days >= 365 {
        let year = analytics::period::RangeSpec::TwelveMonths.resolve(today, None)?;
        raw_queries(stats, &s.table, site, year, "12 months").await?;
    }
    let read_per_dashboard = dashboard_capacity.read_units / options.dashboards.max(1) as f64;
    println!(
        "dashboard (30-day overview, daily series, six breakdowns): p50 {:.2} ms, p99 {:.2} ms, {read_per_dashboard:.1} read units",
        load::percentile(&latencies, 50.0).as_secs_f64() * 1000.0,
        load::percentile(&latencies, 99.0).as_secs_f64() * 1000.0,
    );
    // The first dashboard of a process reads a cold engine cache and builds what is made once
    // (the sketches' tables); with few dashboards it weighs on the percentiles, so it is shown
    // apart, with the CPU a dashboard took on average (which moves less than wall time with load).
    let later = &latencies[1.min(latencies.len() - 1)..];
    println!(
        "  the first dashboard {:.2} ms, the later ones p50 {:.2} ms; {:.2} ms of CPU per dashboard",
        ms(latencies[0]),
        ms(load::percentile(later, 50.0)),
        ms(dashboard_cpu)
    );
    Ok(read_per_dashboard)
}

/// Ingests the synthetic events again, into a store of their own, over HTTP through Tally's
/// router with keep-alive connections, and prints the rate and CPU.
async fn ingest_over_http(options: &BenchOptions) -> Result<()> {
    let h = setup(options.flush_interval, options.compact_event_blocks).await?;
    let state = server::AppState::new(h.pipeline.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(server::serve(listener, server::router(state)));
    let requests: Vec<_> = synth(options.events, options.days)
        .take(options.events as usize)
        .map(|e| load::plausible_request(&e))
        .collect();
    let progress: Arc<dyn Fn(u64) + Send + Sync> = Arc::new(|n| eprintln!("… {n} requests"));
    let cpu_before = process_cpu_seconds();
    let groups_before = h.engine.groups();
    let result = load::post_all(addr, requests, options.concurrency, progress).await?;
    let groups = groups_line(groups_before, h.engine.groups(), result.accepted, result.elapsed);
    let sessions = sessions_line(&[&*h.pipeline], result.accepted, "request");
    let cpu = cpu_line(
        "CPU over HTTP, the load generator's included",
        "request",
        cpu_before,
        result.accepted,
        result.elapsed,
    );
    println!(
        "over HTTP (keep-alive, {} connections): {:.0} requests/s ({} in {:.2} s)",
        options.concurrency,
        rate(result.accepted, result.elapsed),
        result.accepted,
        result.elapsed.as_secs_f64()
    );
    if let Some(line) = cpu {
        println!("{line}");
    }
    println!("{groups}");
    println!("{sessions}");
    h.aggregator.shutdown().await?;
    Ok(())
}

/// `tally bench --against ADDR`: posts `traffic` to the server at `addr` over `connections`
/// keep-alive connections for `duration`, printing the requests per second of every 10 s and of
/// the whole run, and the load's own CPU per request (the server's is the server's to tell).
pub async fn against(
    addr: std::net::SocketAddr,
    traffic: load::Traffic,
    connections: usize,
    duration: Duration,
) -> Result<()> {
    eprintln!(
        "tally bench: posting to {addr} for {} s over {connections} connections, {} User-Agent(s)",
        duration.as_secs(),
        traffic.user_agents.len()
    );
    let every: Arc<dyn Fn(Duration, u64) + Send + Sync> =
        Arc::new(|at, n| println!("{:>4} s: {:.0} requests/s", at.as_secs_f64().round(), n as f64 / 10.0));
    let cpu_before = process_cpu_seconds();
    let result = load::post_for(addr, Arc::new(traffic), connections, duration, every).await?;
    println!(
        "over HTTP (keep-alive, {connections} connections): {:.0} requests/s ({} in {:.2} s)",
        rate(result.accepted, result.elapsed),
        result.accepted,
        result.elapsed.as_secs_f64()
    );
    if let Some(line) = cpu_line("CPU of the load alone", "request", cpu_before, result.accepted, result.elapsed) {
        println!("{line}");
    }
    Ok(())
}

/// Writes the measured costs to `path` as JSON, for `tally capacity --from-bench`.
fn write_costs(
    path: &std::path::Path,
    options: &BenchOptions,
    ingested: &Ingested,
    read_per_dashboard: f64,
) -> Result<()> {
    let (accepted, a) = (ingested.accepted, &ingested.aggregation);
    let costs = Costs {
        source: String::new(),
        write_units_per_event: ingested.write_per_event(),
        read_units_per_event: ingested.read_per_event(),
        read_units_per_dashboard: read_per_dashboard,
        raw_bytes_per_event: 700.0,
        aggregate_bytes_per_site_day: 400_000.0,
        // The synthetic traffic spreads over the bench's sites.
        events_per_site_flush: Some(accepted as f64 / a.epochs_flushed.max(1) as f64 / DOMAINS.len() as f64),
        flush_interval_s: Some(options.flush_interval.as_secs_f64()),
        write_units_per_aggregate_item: Some(a.flush_write_units / a.items_written.max(1) as f64),
    };
    std::fs::write(path, serde_json::to_string_pretty(&costs)?)?;
    eprintln!("costs written to {}", path.display());
    Ok(())
}
