//! `tally serve` and the commands that work on a running installation's data: sites, goals, keys,
//! imports and rebuilds. Each opens the configured store, builds the library objects it needs and
//! calls them; nothing here decides anything about analytics.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use analytics::accounts::Accounts;
use analytics::aggregate::{RebuildMode, RebuildRange};
use analytics::enrich::{DropReason, IpRanges};
use analytics::goal::Goal;
use analytics::sites::{Scope, Site, SiteChanges, Sites};
use analytics::stats::Stats;
use anyhow::{Context, Result, anyhow, bail};
use model::Table;
use server::Reading;
use server::metrics::MetricsSnapshot;
use server::wire::import::Format;

use crate::app::{Application, Settings};
use crate::config::Config;
use crate::demo::DemoOptions;

/// Runs the server until SIGTERM or Ctrl-C, then stops taking requests, flushes and exits.
pub async fn serve(config: &Config, demo: Option<DemoOptions>) -> Result<()> {
    let (table, _, engine) = crate::store::open_engine(config).await?;
    // On the embedded engine, `tally backup` reaches this process through a socket beside the store.
    let control = match (&engine, &config.store) {
        (Some(engine), crate::config::StoreSpec::Embedded(dir)) => {
            match crate::backup::serve_control(engine.clone(), dir) {
                Ok(task) => Some((task, dir.join(crate::backup::SOCKET))),
                // A path too long for a Unix socket, say: serving matters more than online backups.
                Err(e) => {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        "no control socket: `tally backup` needs the server stopped"
                    );
                    None
                }
            }
        }
        _ => None,
    };
    drop(engine);
    let metered = table.metered();
    let sites = Arc::new(Sites::new(metered.clone()));
    // Bound before the pipeline is built: other processes hand events to the port it listens on.
    let shutdown = shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let mut settings = Settings::from_config(config)?;
    settings.advertise = config.advertise_host.as_ref().map(|host| format!("http://{host}:{}", addr.port()));
    let Application { aggregator, pipeline, lease, .. } =
        Application::build(metered.clone(), sites.clone(), settings).await?;
    let stats = Arc::new(Stats::new(metered.clone(), sites.clone()));
    let notifier = (!config.notify.is_empty())
        .then(|| crate::notify::spawn(config.notify.clone(), metered.clone(), sites.clone(), stats.clone()));
    let accounts = Arc::new(Accounts::new(metered.clone()));
    let demo = match demo {
        Some(options) => {
            let (site, _) = crate::demo::fill(&sites, &pipeline, &aggregator, options).await?;
            // A fresh read-only link each start: links are kept only as hashes, so the last
            // one cannot be printed again.
            for old in accounts.shares(&site.site_id).await? {
                if old.name == "demo" && !old.revoked {
                    accounts.revoke_share(&site.site_id, &old.share_id).await?;
                }
            }
            let (token, _) = accounts.create_share(&site.site_id, "demo", None).await?;
            Some((crate::demo::trickle(site, pipeline.clone()), token))
        }
        None => None,
    };
    let setup_token = first_run_token(&accounts).await?;
    let reading = Arc::new(Reading {
        stats,
        sites: sites.clone(),
        pipeline: pipeline.clone(),
        accounts,
        setup_token: setup_token.clone(),
    });
    let metrics_pipeline = pipeline.clone();
    let releasing = pipeline.clone();
    let metrics_aggregator = aggregator.clone();
    let metrics_table = metered.clone();
    let metrics = move || {
        let c = metrics_pipeline.counters();
        let a = metrics_aggregator.stats();
        let capacity = metrics_table.capacity();
        let mut dropped: Vec<(String, u64)> = DropReason::ALL
            .iter()
            .zip(&c.dropped)
            .map(|(r, n)| (r.as_str().to_owned(), n.load(Ordering::Relaxed)))
            .collect();
        dropped.push(("unknown_site".to_owned(), c.unknown_site.load(Ordering::Relaxed)));
        MetricsSnapshot {
            events_accepted: c.accepted.load(Ordering::Relaxed),
            events_dropped: dropped,
            events_invalid: c.invalid.load(Ordering::Relaxed),
            flush_lag_seconds: a.flush_lag_ms as f64 / 1000.0,
            pending_events: a.pending_events,
            flush_errors: a.flush_errors,
            flush_item_errors: a.flush_item_errors,
            store_write_units: capacity.write_units + a.flush_write_units,
            store_read_units: capacity.read_units + a.flush_read_units,
            events_handed_over: c.handed_over.load(Ordering::Relaxed),
            events_taken_over: c.taken_over.load(Ordering::Relaxed),
            runs_recovered: a.runs_recovered,
            cached_sessions: metrics_pipeline.cached_sessions() as u64,
            session_lookups: c.session_lookups.load(Ordering::Relaxed),
            events_waited_for_room: c.waited_for_room.load(Ordering::Relaxed),
            sessions_evicted_written: c.evicted_written.load(Ordering::Relaxed),
            sessions_evicted_packed: c.evicted_packed.load(Ordering::Relaxed),
            packed_sessions: metrics_pipeline.packed_sessions().0 as u64,
        }
    };
    let trusted = IpRanges::parse(config.trusted_proxies.iter().map(String::as_str))
        .map_err(|e| anyhow!("trusted proxies: {e}"))?;
    let state = server::AppState::new(pipeline)
        .with_reading(reading)
        .with_health(Arc::new(StoreHealth(sites.clone())))
        .with_trusted_proxies(trusted)
        .with_attempts_per_minute(config.auth_attempts_per_minute);
    // `/metrics` is served where it was asked for: behind its token, on an address of its own,
    // or both; with neither, not at all, as it tells about every site.
    let mut metrics_state = state.clone().with_metrics(Arc::new(metrics));
    if let Some(token) = &config.metrics_token {
        metrics_state = metrics_state.with_metrics_token(token);
    }
    let (state, metrics_server) = match config.metrics_listen {
        Some(metrics_addr) => {
            let metrics_listener = tokio::net::TcpListener::bind(metrics_addr)
                .await
                .with_context(|| format!("listening on {metrics_addr} for /metrics"))?;
            let bound = metrics_listener.local_addr()?;
            (state, Some((bound, tokio::spawn(server::serve(metrics_listener, server::metrics_router(metrics_state))))))
        }
        None if config.metrics_token.is_some() => (metrics_state, None),
        None => {
            tracing::info!("/metrics is off: set metrics_token or metrics_listen to serve it");
            (state, None)
        }
    };
    tracing::info!(run = aggregator.run_id(), store = %config.store, "listening on http://{addr}");
    tracing::info!("dashboard: http://{addr}/");
    if let Some((bound, _)) = &metrics_server {
        tracing::info!("metrics: http://{bound}/metrics");
    }
    if let Some((_, token)) = &demo {
        tracing::info!("demo dashboard (read-only, no sign-in): http://{addr}/share/{token}");
    }
    if let Some(token) = &setup_token {
        tracing::warn!("no account yet: create the admin account at http://{addr}/setup?token={token}");
    }
    // On a signal, the sessions this process holds are written to their items before it stops
    // taking requests: the events of their visitors that still reach it are then claimed like any
    // other, and the other processes claim them rather than hand them to a process going away.
    let shutdown = async move {
        shutdown.await;
        if let Err(e) = releasing.release_held().await {
            tracing::warn!(error = %e, "writing the sessions this process holds failed; they are written again on stopping");
        }
    };
    server::serve_with_shutdown(listener, server::router(state), config.limits.clone(), shutdown).await?;
    if let Some((_, task)) = metrics_server {
        task.abort();
    }
    if let Some((live, _)) = demo {
        live.abort();
    }
    if let Some((task, socket)) = control {
        task.abort();
        let _ = std::fs::remove_file(socket);
    }
    if let Some(task) = notifier {
        task.abort();
    }
    tracing::info!("stopping: flushing aggregates");
    lease.stop().await.context("giving up the ingest lease")?;
    aggregator.shutdown().await.context("flushing aggregates at shutdown")?;
    tracing::info!("stopped");
    Ok(())
}

/// `tally demo`: the demo site, filled unless it exists.
pub async fn demo(config: &Config, options: DemoOptions) -> Result<()> {
    let table = crate::store::open(config).await?;
    let sites = Arc::new(Sites::new(table.clone()));
    let app = Application::build(table, sites.clone(), Settings::from_config(config)?).await?;
    let (site, filled) = crate::demo::fill(&sites, &app.pipeline, &app.aggregator, options).await?;
    app.stop().await?;
    println!("site id: {}", site.site_id);
    println!("domain: {}", site.domain);
    if filled {
        eprintln!("run `tally serve` and open the dashboard, or `tally serve --demo` for a link without sign-in");
    }
    Ok(())
}

/// The one-time token of the setup link, while no account exists.
async fn first_run_token(accounts: &Accounts) -> Result<Option<String>> {
    if accounts.has_users().await.context("reading accounts")? {
        return Ok(None);
    }
    let mut secret = [0u8; 16];
    rand::fill(&mut secret);
    Ok(Some(secret.iter().map(|b| format!("{b:02x}")).collect()))
}

/// Installs the SIGINT and SIGTERM handlers now and returns the future they complete: a signal
/// that comes as soon as "listening on" is logged must stop the server gracefully, and a handler
/// installed only when the server first polls it would leave the default action (exit at once,
/// unflushed) for that moment.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

pub(crate) async fn site_named(sites: &Sites, name: &str) -> Result<Site> {
    sites.resolve(name).await?.ok_or_else(|| anyhow!("no site {name:?} (give its domain or id)"))
}

/// The dates `--from` and `--to` name in the site's time zone: by default from the raw-event
/// retention ago to today.
pub(crate) fn site_days(
    site: &Site,
    from: Option<&str>,
    to: Option<&str>,
) -> Result<(jiff::civil::Date, jiff::civil::Date)> {
    let today = site.zone.date_of(jiff::Timestamp::now().as_millisecond())?;
    let first = match from {
        Some(d) => analytics::period::parse_date(d)?,
        None => today.checked_sub(jiff::Span::new().days(i64::from(site.retention_event_days)))?,
    };
    let last = match to {
        Some(d) => analytics::period::parse_date(d)?,
        None => today,
    };
    Ok((first, last))
}

/// `tally site add`.
pub async fn site_add(config: &Config, domain: &str, timezone: &str) -> Result<()> {
    let sites = Sites::new(crate::store::open(config).await?);
    let site = sites.add(domain, timezone).await?;
    println!("site id: {}", site.site_id);
    println!("domain: {}", site.domain);
    println!("timezone: {}", site.zone.name());
    println!("umami website id: {}", site.umami_id);
    Ok(())
}

/// `/health` of `tally serve`: the store answers a read.
struct StoreHealth(Arc<Sites>);

#[async_trait::async_trait]
impl server::HealthCheck for StoreHealth {
    async fn check(&self) -> Result<(), String> {
        self.0.ping().await.map_err(|e| format!("the store does not answer: {e}"))
    }
}

/// `tally site list`.
pub async fn site_list(config: &Config) -> Result<()> {
    let sites = Sites::new(crate::store::open(config).await?);
    for site in sites.list().await? {
        println!(
            "{}\t{}\t{}\t{}\t{}",
            site.site_id,
            site.domain,
            site.zone.name(),
            site.umami_id,
            site.excluded_ips.texts().join(",")
        );
    }
    Ok(())
}

/// `tally site update`.
pub async fn site_update(config: &Config, name: &str, changes: &SiteChanges) -> Result<()> {
    let sites = Sites::new(crate::store::open(config).await?);
    let site = site_named(&sites, name).await?;
    let site = sites.update(&site.site_id, changes).await?;
    println!("site: {} ({})", site.domain, site.site_id);
    println!("timezone: {}", site.zone.name());
    println!(
        "retention: raw events {} days, hourly {} days, daily {} days",
        site.retention_event_days, site.retention_hourly_days, site.retention_daily_days
    );
    println!("excluded addresses: {}", site.excluded_ips.texts().join(", "));
    Ok(())
}

/// `tally site remove`.
pub async fn site_remove(config: &Config, name: &str) -> Result<()> {
    let sites = Sites::new(crate::store::open(config).await?);
    let site = site_named(&sites, name).await?;
    sites.remove(&site.site_id).await?;
    println!("removed site {} ({}); its events and aggregates expire by their TTLs", site.domain, site.site_id);
    Ok(())
}

/// `tally goal add`.
pub async fn goal_add(
    config: &Config,
    site: &str,
    page: Option<&str>,
    event: Option<&str>,
    currency: Option<&str>,
) -> Result<()> {
    let goal = match (page, event) {
        (Some(p), None) => Goal::page(p)?,
        (None, Some(e)) => Goal::event(e)?,
        _ => bail!("give exactly one of --page PATTERN or --event NAME"),
    };
    let sites = Sites::new(crate::store::open(config).await?);
    let site = site_named(&sites, site).await?;
    let added = sites.add_goal_with_currency(&site.site_id, goal, currency).await?;
    println!("goal id: {}", added.goal_id);
    println!("goal: {}", added.goal.display_name());
    if let Some(c) = &added.currency {
        println!("revenue in: {c}");
    }
    Ok(())
}

/// `tally key create`.
pub async fn key_create(config: &Config, site: &str, name: &str, scopes: &[String]) -> Result<()> {
    let scopes = scopes
        .iter()
        .map(|s| {
            Scope::parse(s)
                .ok_or_else(|| anyhow!("unknown scope {s:?}: the scopes are stats, visitors, import and admin"))
        })
        .collect::<Result<Vec<_>>>()?;
    let sites = Sites::new(crate::store::open(config).await?);
    let site = site_named(&sites, site).await?;
    let (key, info) = sites.create_key(&site.site_id, name, &scopes).await?;
    println!("key id: {}", info.key_id);
    println!("scopes: {}", scope_list(&info.scopes));
    println!("key: {key}");
    eprintln!("the key is shown once; Tally keeps only its SHA-256");
    Ok(())
}

fn scope_list(scopes: &[Scope]) -> String {
    scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
}

/// `tally key list`: one key a line, `ID<TAB>SCOPES<TAB>STATE<TAB>NAME`. A key stored before keys
/// had scopes shows `legacy` in its state: it keeps what every key could do then.
pub async fn key_list(config: &Config, site: &str) -> Result<()> {
    let sites = Sites::new(crate::store::open(config).await?);
    let site = site_named(&sites, site).await?;
    for key in sites.keys(&site.site_id).await? {
        let state = match (key.revoked, key.legacy) {
            (true, _) => "revoked",
            (false, true) => "active (legacy: made before scopes; re-issue it with the scopes it needs)",
            (false, false) => "active",
        };
        println!("{}\t{}\t{}\t{}", key.key_id, scope_list(&key.scopes), state, key.name);
    }
    Ok(())
}

/// `tally key revoke`.
pub async fn key_revoke(config: &Config, site: &str, key_id: &str) -> Result<()> {
    let sites = Sites::new(crate::store::open(config).await?);
    let site = site_named(&sites, site).await?;
    sites.revoke_key(&site.site_id, key_id).await?;
    println!("revoked key {key_id}");
    Ok(())
}

/// `tally import FILE`: NDJSON or CSV events with timestamps, through the ingestion pipeline,
/// in time order (the whole file is read first, on every core: `import_events`; about 1 KB of
/// memory per event); or, with
/// `--umami-postgres`, Umami's events read from its database.
pub async fn import(config: &Config, file: Option<&Path>, site: &str, options: &ImportOptions) -> Result<()> {
    let table = crate::store::open(config).await?;
    let sites = Arc::new(Sites::new(table.clone()));
    let site = site_named(&sites, site).await?;
    // What to read: NDJSON (or CSV) bytes, the import id of each line read from another tool's
    // own event id, and the file's id and name (none for a database).
    let (format, readable, ids, file_record) = match (file, options.umami_postgres.as_deref()) {
        (Some(_), Some(_)) => bail!("give either a file or --umami-postgres, not both"),
        (None, None) => bail!("give a file to import, or --umami-postgres URL"),
        (None, Some(url)) => {
            let rows = crate::umami_pg::read(url, options.umami_website.as_deref(), &site).await?;
            (Format::Ndjson, rows.ndjson, rows.ids, None)
        }
        (Some(file), None) => {
            let kind = crate::history::detect(file, options.format.as_deref())?;
            let body = match kind {
                crate::history::Kind::Plausible => {
                    return crate::history::import_plausible(
                        &table,
                        &site,
                        file,
                        &options.source,
                        options.cutover.as_deref(),
                    )
                    .await;
                }
                _ => std::fs::read(file).with_context(|| format!("reading {}", file.display()))?,
            };
            // An import id per file (the SHA-256 of its bytes) and per line (`import_lines`).
            let file_id = crate::history::file_id(&body);
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let record = Some((file_id, name));
            match kind {
                crate::history::Kind::Umami => {
                    eprintln!("… {}: Umami website_event rows", file.display());
                    let rows = crate::history::umami_to_ndjson(&body, &site)
                        .map_err(|e| anyhow!("{}: {e:#}", file.display()))?;
                    (Format::Ndjson, rows.ndjson, rows.ids, record)
                }
                crate::history::Kind::Events(format) => (format, body, Default::default(), record),
                crate::history::Kind::Plausible => unreachable!("returned above"),
            }
        }
    };
    let what = file.map(|f| f.display().to_string()).unwrap_or_else(|| "the Umami database".to_owned());
    let reading = std::time::Instant::now();
    let (parsed, line_ids) =
        crate::import_events::read(&readable, format, &site).map_err(|e| anyhow!("{what}: {e}"))?;
    drop(readable);
    let parsed = parsed.in_time_order();
    eprintln!("… {} events read in {:.1} s", parsed.events.len(), reading.elapsed().as_secs_f64());
    if let Some((file_id, name)) = &file_record {
        println!("import id: {file_id}");
        if crate::history::begin_events_file(&table, &site, file_id, name, options.force).await? {
            println!("already imported: yes (nothing changed)");
            println!("imported: 0");
            println!("skipped (imported before): 0");
            println!("dropped: 0");
            println!("refused: 0");
            return Ok(());
        }
    }
    let id_of = |line: usize| ids.get(&line).copied().unwrap_or_else(|| line_ids[line - 1]);
    let mut ledger = crate::import_lines::Ledger::load(&table, &site).await?;
    let known = ledger.len();
    let lines: Vec<(usize, crate::import_lines::LineId, analytics::pipeline::ImportEvent)> =
        parsed.events.into_iter().map(|(line, event)| (line, id_of(line), event)).collect();
    let refs: Vec<_> = lines.iter().map(|(_, id, e)| (*id, e)).collect();
    ledger.resolve_pending(&table, &site, &refs).await?;
    drop(refs);
    // Lines imported before, and a line repeated within the source, are skipped.
    let mut seen = std::collections::HashSet::new();
    let (mut fresh, mut skipped) = (Vec::with_capacity(lines.len()), 0u64);
    for (line, id, event) in lines {
        if ledger.is_done(&id) || !seen.insert(id) {
            skipped += 1;
        } else {
            fresh.push((line, id, event));
        }
    }
    drop(seen);
    if known > 0 {
        eprintln!("… {known} lines imported into the site before; {skipped} of these are among them and skipped");
    }
    let app = Application::build(table.clone(), sites, Settings::from_config(config)?).await?;
    let (aggregator, pipeline) = (app.aggregator.clone(), app.pipeline.clone());
    let mut refused = parsed.errors;
    let total = fresh.len();
    let started = std::time::Instant::now();
    let progress = |done: usize| {
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-3);
        let eta = (total - done.min(total)) as f64 / rate.max(1.0);
        eprintln!("… {done} of {total} events, {rate:.0} events/s, about {eta:.0} s left");
    };
    // In chunks, each recorded as pending (with this run's id) before it is ingested and as done
    // after, a few at once: a crash leaves those in doubt, which the next import settles from the
    // store.
    let run_id = aggregator.run_id().to_owned();
    let report = crate::import_events::ingest(&pipeline, &table, &site, &run_id, fresh, &progress).await?;
    let (imported, dropped) = (report.imported, report.dropped);
    for (line, reason) in report.refused {
        refused.push(line, reason);
    }
    eprintln!("{total} events in {:.1} s", started.elapsed().as_secs_f64());
    app.stop().await?;
    for (line, error) in refused.reported() {
        eprintln!("line {line}: {error}");
    }
    if refused.omitted() > 0 {
        eprintln!("… and {} more refused lines", refused.omitted());
    }
    if let Some((file_id, name)) = &file_record {
        crate::history::finish_events_file(&table, &site, file_id, name, total as u64, imported).await?;
    }
    println!("imported: {imported}");
    println!("skipped (imported before): {skipped}");
    println!("dropped: {dropped}");
    println!("refused: {}", refused.total());
    Ok(())
}

/// How `tally import` reads its file.
pub struct ImportOptions {
    /// `--format`: ndjson, csv, umami or plausible [default: found from the file].
    pub format: Option<String>,
    /// `--source`: the tool imported history came from (plausible or ga).
    pub source: String,
    /// `--cutover`: the first day of the site's own data, for its first history import.
    pub cutover: Option<String>,
    /// `--force`: read an events file again although it was imported whole (lines imported
    /// before are still skipped).
    pub force: bool,
    /// `--umami-postgres`: read Umami's events from its PostgreSQL database at this URL.
    pub umami_postgres: Option<String>,
    /// `--umami-website`: the Umami website to read [default: the only one, or the one whose
    /// domain is the site's].
    pub umami_website: Option<String>,
}

/// `tally aggregate --rebuild`.
pub async fn rebuild(config: &Config, site: &str, from: Option<&str>, to: Option<&str>, verify: bool) -> Result<bool> {
    let table: Table = crate::store::open(config).await?;
    let sites = Arc::new(Sites::new(table.clone()));
    let site = site_named(&sites, site).await?;
    let (first, last) = site_days(&site, from, to)?;
    let today = site.zone.date_of(jiff::Timestamp::now().as_millisecond())?;
    let mode = if verify { RebuildMode::Verify } else { RebuildMode::Replace };
    let progress = |n: u64| {
        if n.is_multiple_of(50_000) && n > 0 {
            eprintln!("… {n} events read");
        }
    };
    // Raw events expire their retention after they were stored, so every event from this date on
    // (a day of margin for the zone) is still there: weeks and months straddling the range's ends
    // that start from it are rebuilt whole.
    let events_from = today.checked_sub(jiff::Span::new().days(i64::from(site.retention_event_days) - 1))?;
    let range = RebuildRange::new(first, last).events_from(events_from);
    let report = analytics::aggregate::rebuild(&table, sites.as_ref(), &site.site_id, range, mode, &progress).await?;
    println!("site: {} ({})", site.domain, site.site_id);
    println!("mode: {}", if verify { "verify" } else { "replace" });
    println!("range: {first} to {last}");
    println!("events read: {}", report.events_read);
    println!("items compared: {}", report.items_compared);
    println!(
        "weeks and months across the range's ends: {} rebuilt whole, {} left as they are (they start before {events_from}, the oldest events kept)",
        report.straddling_rebuilt, report.straddling_left
    );
    println!("differences: {}", report.differences.len());
    for d in report.differences.iter().take(20) {
        println!("  {d:?}");
    }
    if !verify {
        println!("items written: {}", report.items_written);
        println!("items deleted: {}", report.items_deleted);
    }
    Ok(!verify || report.differences.is_empty())
}

/// `tally report`: a site's report for its last complete week or month, sent now (to `to`, or
/// to the recipients its `[[reports]]` entry names).
pub async fn report(config: &Config, site: &str, every: &str, to: &[String]) -> Result<()> {
    let every = analytics::report::Every::parse(every).ok_or_else(|| anyhow!("--every must be week or month"))?;
    let smtp = config.notify.smtp.as_ref().ok_or_else(|| anyhow!("no [smtp] table in the configuration file"))?;
    let table = crate::store::open(config).await?;
    let sites = Arc::new(Sites::new(table.clone()));
    let site = site_named(&sites, site).await?;
    let recipients: Vec<String> = if to.is_empty() {
        config
            .notify
            .reports
            .iter()
            .filter(|r| r.site == site.domain || r.site == site.site_id)
            .flat_map(|r| r.to.clone())
            .collect()
    } else {
        to.to_vec()
    };
    if recipients.is_empty() {
        bail!("nobody to send it to: give --to, or a [[reports]] entry for {}", site.domain);
    }
    let stats = Stats::new(table, sites.clone());
    let today = site.zone.date_of(jiff::Timestamp::now().as_millisecond())?;
    let report = analytics::report::Report::build(&stats, &site, every, today).await?;
    crate::notify::send_report(smtp, &recipients, &report).await?;
    println!("sent: {}", report.subject());
    println!("to: {}", recipients.join(", "));
    Ok(())
}
