//! `tally demo` and `tally serve --demo`: a demo site filled with months of realistic synthetic
//! traffic (`analytics::synth`: daily and weekly rhythm, referrers and UTM campaigns, countries,
//! devices, goals, bounces), so a new user sees a full dashboard within a minute.
//!
//! The traffic goes through the real ingestion pipeline as an import (explicit timestamps, the
//! country the generator chose), so the demo's figures are made exactly as real ones are. The
//! progress bar is `indicatif`'s, the maintained progress-bar crate of the Rust ecosystem (ETA
//! and rate included, and it draws nothing when standard error is not a terminal).
//!
//! The site is filled once, when it is created; running the demo again leaves it as it is.
//! `serve --demo` also keeps a trickle of live visits going, so the realtime panel moves.

use std::sync::Arc;
use std::time::Duration;

use analytics::aggregate::Aggregator;
use analytics::goal::Goal;
use analytics::pipeline::{ImportEvent, IngestResult, Pipeline};
use analytics::sites::{Site, Sites};
use analytics::synth::{COUNTRY_HEADER, EVENT_NAMES, SIGNUP_PAGE, Synth, SynthConfig};
use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

/// The demo site's domain.
pub const DEMO_DOMAIN: &str = "demo.tally.example";

const DAY_MS: i64 = 86_400_000;

/// How much traffic the demo makes.
#[derive(Debug, Clone, Copy)]
pub struct DemoOptions {
    /// Days of history, ending now.
    pub days: u32,
    /// Average events per day.
    pub events_per_day: f64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions { days: 180, events_per_day: 1000.0 }
    }
}

/// What the import of one synthetic event needs: its country as the generator chose it, and
/// its address and browser as the visitor.
fn as_import(raw: analytics::event::RawEvent) -> ImportEvent {
    let country = raw.headers.get(COUNTRY_HEADER).map(str::to_owned);
    ImportEvent { raw, visitor: None, country, client: None }
}

/// The demo site, created and filled unless it exists. Returns it and whether it was filled now.
pub async fn fill(
    sites: &Sites,
    pipeline: &Arc<Pipeline>,
    aggregator: &Aggregator,
    options: DemoOptions,
) -> Result<(Site, bool)> {
    if let Some(site) = sites.by_domain(DEMO_DOMAIN).await? {
        eprintln!("demo: {DEMO_DOMAIN} exists already; its traffic is kept as it is");
        return Ok((site, false));
    }
    let site = sites.add(DEMO_DOMAIN, "Europe/Berlin").await.context("adding the demo site")?;
    // Signups are a revenue goal: the synthetic pro signups pay in its currency.
    sites.add_goal_with_currency(&site.site_id, Goal::event(EVENT_NAMES[0])?, Some(analytics::synth::CURRENCY)).await?;
    for goal in [Goal::event(EVENT_NAMES[1])?, Goal::page(SIGNUP_PAGE)?] {
        sites.add_goal(&site.site_id, goal).await?;
    }
    let funnel =
        vec![Goal::page("/")?, Goal::page("/pricing")?, Goal::page(SIGNUP_PAGE)?, Goal::event(EVENT_NAMES[0])?];
    sites.add_funnel(&site.site_id, "From the home page to a signup", funnel).await?;
    let now = jiff::Timestamp::now().as_millisecond();
    let start = now - now.rem_euclid(DAY_MS) - i64::from(options.days) * DAY_MS;
    let config = SynthConfig::new(7, vec![DEMO_DOMAIN.to_owned()], start, options.days + 1, options.events_per_day);
    let expected = (options.events_per_day * f64::from(options.days)).max(1.0) as u64;
    let bar = ProgressBar::new(expected).with_style(
        ProgressStyle::with_template("demo: {bar:40} {pos}/{len} events, {per_sec}, {eta} left")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let events = Arc::new(std::sync::Mutex::new(Synth::new(config).take_while(move |e| e.timestamp_ms <= now)));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (events, pipeline, site, bar) = (events.clone(), pipeline.clone(), site.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            let mut accepted = 0u64;
            loop {
                let next = store::sync::lock(&events).next();
                let Some(raw) = next else { break };
                match pipeline.import(&site, as_import(raw)).await {
                    IngestResult::Accepted => accepted += 1,
                    IngestResult::Failed(e) => return Err(anyhow::anyhow!("storing a demo event failed: {e}")),
                    other => tracing::debug!(outcome = ?other, "a demo event was not taken"),
                }
                bar.inc(1);
            }
            Ok::<_, anyhow::Error>(accepted)
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await??;
    }
    bar.finish_and_clear();
    aggregator.flush_now().await.context("counting the demo traffic")?;
    if accepted == 0 {
        bail!("no demo event was accepted");
    }
    eprintln!("demo: {accepted} events over {} days for {DEMO_DOMAIN}", options.days);
    Ok((site, true))
}

/// Live visits to the demo site, about one event a second, until the task is aborted.
pub fn trickle(site: Site, pipeline: Arc<Pipeline>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let now = jiff::Timestamp::now().as_millisecond();
        let day = now - now.rem_euclid(DAY_MS);
        // A busy day's events, replayed one by one with the current time.
        let mut events = Synth::new(SynthConfig::new(now as u64, vec![DEMO_DOMAIN.to_owned()], day, 365, 20_000.0));
        let mut tick = tokio::time::interval(Duration::from_millis(1_000));
        loop {
            tick.tick().await;
            let Some(mut raw) = events.next() else { break };
            raw.timestamp_ms = jiff::Timestamp::now().as_millisecond();
            if let IngestResult::Failed(e) = pipeline.import(&site, as_import(raw)).await {
                tracing::warn!(error = %e, "a live demo event failed");
            }
        }
    })
}
