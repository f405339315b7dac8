//! The one place Tally's ingestion is wired: `serve`, `demo`, `import` and `bench` each build an
//! [`Application`] from a table, its sites and [`Settings`], so they ingest exactly alike — the
//! same enrichment, aggregation, block compaction and ingest lease, started in the same order.
//!
//! The order matters: the enrichment lists load first (a bad configuration fails before any task
//! starts); sites stored before weekly aggregates existed are marked before the aggregator
//! starts (so every event it aggregates includes its week); the lease is taken last, once the
//! pipeline it may switch to ingesting alone exists. [`Application::stop`] undoes it in reverse:
//! the lease is given up (writing the sessions only this process held), then aggregates flushed.
//! Between the two, the pipeline learns how to hand events to the process holding their
//! visitor's session, and, given an address, records it so it holds sessions itself.

use std::sync::Arc;

use analytics::aggregate::{Aggregator, AggregatorConfig};
use analytics::enrich::{Enricher, EnricherConfig, IpRanges};
use analytics::lease::IngestLease;
use analytics::pipeline::{Handover, Pipeline};
use analytics::sites::Sites;
use anyhow::{Context, Result, anyhow};
use model::Table;

use crate::config::Config;

/// How an [`Application`] ingests.
pub struct Settings {
    /// Geography, User-Agents, bots and trusted proxies.
    pub enricher: EnricherConfig,
    /// Flush cadence, and the host and process the aggregator's run records.
    pub aggregator: AggregatorConfig,
    /// Whether small event blocks are merged.
    pub compact_event_blocks: bool,
    /// The host the ingest lease records, so a holder that died on this host is recognised.
    pub host: String,
    /// How events go to the process holding their visitor's session.
    pub handover: Arc<dyn Handover>,
    /// Where other processes reach this one (`http://HOST:PORT`), if they may: then this
    /// process holds sessions too.
    pub advertise: Option<String>,
}

impl Settings {
    /// The settings `tally serve`, `demo` and `import` run with.
    pub fn from_config(config: &Config) -> Result<Settings> {
        let trusted = IpRanges::parse(config.trusted_proxies.iter().map(String::as_str))
            .map_err(|e| anyhow!("trusted proxies: {e}"))?;
        let host = hostname();
        Ok(Settings {
            enricher: EnricherConfig {
                mmdb_path: config.mmdb.clone(),
                country_headers: config.country_headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
                trusted_proxies: trusted,
            },
            aggregator: AggregatorConfig {
                flush_interval: config.flush_interval,
                host: host.clone(),
                pid: std::process::id(),
                ..AggregatorConfig::default()
            },
            compact_event_blocks: config.compact_event_blocks,
            host,
            handover: Arc::new(server::handover::HttpHandover::new()),
            // `tally serve` sets it once it listens.
            advertise: None,
        })
    }
}

/// This machine's host name, or `localhost`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Everything a process ingests with.
pub struct Application {
    /// This process's aggregation run.
    pub aggregator: Arc<Aggregator>,
    /// The ingestion pipeline.
    pub pipeline: Arc<Pipeline>,
    /// This process's hold on the ingest lease (alone, or shared with other processes).
    pub lease: IngestLease,
}

impl Application {
    /// Loads the enrichment lists, marks sites stored before weekly aggregates, starts
    /// aggregation, builds the pipeline and takes (or joins) the ingest lease.
    pub async fn build(table: Table, sites: Arc<Sites>, settings: Settings) -> Result<Application> {
        let enricher = Enricher::new(settings.enricher).context("loading the enrichment lists")?;
        let marked = sites
            .mark_weekly_aggregates(jiff::Timestamp::now().as_millisecond())
            .await
            .context("marking the sites' weekly aggregates")?;
        if marked > 0 {
            tracing::info!(
                sites = marked,
                "weekly aggregates start now for sites stored before them; earlier weeks read as days"
            );
        }
        let aggregator = Aggregator::start(table.clone(), sites.clone(), settings.aggregator)
            .await
            .context("starting aggregation")?;
        let pipeline = Arc::new(Pipeline::new(table.clone(), sites, Arc::new(enricher), aggregator.clone()));
        pipeline.set_block_compaction(settings.compact_event_blocks);
        pipeline
            .set_handover(settings.handover, settings.advertise.as_deref())
            .await
            .context("recording where this process is reached")?;
        let lease = IngestLease::start(
            table.clone(),
            pipeline.clone(),
            aggregator.run_id(),
            &settings.host,
            std::process::id(),
        )
        .await
        .context("taking the ingest lease")?;
        tracing::info!(state = ?lease.state(), "ingest lease");
        Ok(Application { aggregator, pipeline, lease })
    }

    /// Gives the lease up, then flushes and stops aggregation.
    pub async fn stop(self) -> Result<()> {
        self.lease.stop().await.context("giving up the ingest lease")?;
        self.aggregator.shutdown().await.context("flushing aggregates")?;
        Ok(())
    }
}
