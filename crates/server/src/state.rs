//! What every handler shares: [`AppState`], with the reading half of Tally ([`Reading`]), and
//! the seams the `tally` binary fills — where events go ([`Ingest`]; the analytics pipeline is
//! one), what `/health` asks ([`HealthCheck`]) and where `/metrics` reads
//! ([`crate::metrics::MetricsSource`]).

use std::sync::Arc;

use analytics::event::RawEvent;
use analytics::pipeline::{IngestResult, Pipeline, SiteSelector};
use analytics::sites::Sites;
use analytics::stats::Stats;

use crate::error::ServerError;

/// Takes events in: the server reads a request into a [`RawEvent`] and hands it over; the
/// analytics pipeline validates, enriches and stores it, and its [`IngestResult`] decides the
/// answer each wire format gives. [`Pipeline`] is one; tests record what they receive.
#[async_trait::async_trait]
pub trait Ingest: Send + Sync + 'static {
    /// Validates, enriches and stores `event` for `site`.
    async fn ingest(&self, event: RawEvent, site: SiteSelector) -> IngestResult;
}

#[async_trait::async_trait]
impl Ingest for Pipeline {
    async fn ingest(&self, event: RawEvent, site: SiteSelector) -> IngestResult {
        Pipeline::ingest(self, event, site).await
    }
}

/// What the reading routes need.
#[derive(Debug, Clone)]
pub struct Reading {
    /// Queries.
    pub stats: Arc<Stats>,
    /// Sites and keys.
    pub sites: Arc<Sites>,
    /// The pipeline, for imports.
    pub pipeline: Arc<Pipeline>,
    /// Accounts, logins and shared links.
    pub accounts: Arc<analytics::accounts::Accounts>,
    /// The one-time token of the first-run setup link, while no account exists.
    pub setup_token: Option<String>,
}

/// What every handler shares: one reference to its [`Shared`] parts.
///
/// axum clones the state for every request (the router hands each handler its own, and the
/// `State` extractor clones it again), and drops each clone when the request is done. With one
/// reference that is one atomic count changed each time, where the parts counted one by one were
/// seven: on cache lines that every core serving requests takes in turn.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`AppState`].
#[derive(Clone)]
pub struct Shared {
    /// Where events go.
    pub ingest: Arc<dyn Ingest>,
    /// Where `/metrics` reads its figures; `None` answers 404.
    pub metrics: Option<Arc<dyn crate::metrics::MetricsSource>>,
    /// The Stats API, realtime and import; `None` answers 404.
    pub reading: Option<Arc<Reading>>,
    /// What `/health` asks before it answers ok; `None` answers ok while the process serves.
    pub health: Option<Arc<dyn HealthCheck>>,
    /// The token `/metrics` asks for, if any.
    pub metrics_token: Option<Arc<str>>,
    /// Proxies whose forwarding headers (client address, protocol) are believed.
    pub trusted_proxies: Arc<analytics::enrich::IpRanges>,
    /// The sign-in and unlock rate limits.
    pub attempts: Arc<crate::attempts::Attempts>,
}

/// A check of what the server needs beyond itself (the store), for `/health`.
#[async_trait::async_trait]
pub trait HealthCheck: Send + Sync {
    /// `Err` with what is wrong when the server cannot do its work (logged, never answered).
    async fn check(&self) -> Result<(), String>;
}

impl AppState {
    /// State around `ingest`.
    pub fn new(ingest: Arc<dyn Ingest>) -> Self {
        AppState(Arc::new(Shared {
            ingest,
            metrics: None,
            reading: None,
            health: None,
            metrics_token: None,
            trusted_proxies: Arc::new(analytics::enrich::IpRanges::new()),
            attempts: Arc::new(crate::attempts::Attempts::new(crate::attempts::DEFAULT_ATTEMPTS_PER_MINUTE)),
        }))
    }

    /// The parts, to set one while the server is being built (copied first if already shared).
    fn parts(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }

    /// Asks every `/metrics` request for `token` as `Authorization: Bearer TOKEN`.
    pub fn with_metrics_token(mut self, token: &str) -> Self {
        self.parts().metrics_token = Some(Arc::from(token));
        self
    }

    /// Believes the forwarding headers of these proxies (the client's address for rate limits
    /// and logs; HTTPS for `Secure` cookies).
    pub fn with_trusted_proxies(mut self, proxies: analytics::enrich::IpRanges) -> Self {
        self.parts().trusted_proxies = Arc::new(proxies);
        self
    }

    /// Allows `per_minute` sign-in and unlock attempts a minute per client and per account.
    pub fn with_attempts_per_minute(mut self, per_minute: u32) -> Self {
        self.parts().attempts = Arc::new(crate::attempts::Attempts::new(per_minute));
        self
    }

    /// Serves the Stats API, realtime and import from `reading`.
    pub fn with_reading(mut self, reading: Arc<Reading>) -> Self {
        self.parts().reading = Some(reading);
        self
    }

    /// Answers `/health` from `check`.
    pub fn with_health(mut self, check: Arc<dyn HealthCheck>) -> Self {
        self.parts().health = Some(check);
        self
    }

    /// Serves `/metrics` from `source`.
    pub fn with_metrics(mut self, source: Arc<dyn crate::metrics::MetricsSource>) -> Self {
        self.parts().metrics = Some(source);
        self
    }

    /// The reading half, or the 404 of a server that has none.
    pub(crate) fn reading(&self) -> Result<&Reading, ServerError> {
        self.reading.as_deref().ok_or_else(|| ServerError::not_found("not found"))
    }
}
