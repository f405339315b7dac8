//! The seam between the HTTP layer and the analytics pipeline: the server reads a request into a
//! [`RawEvent`] and hands it to an [`Ingest`]; the pipeline validates, enriches and stores it,
//! and its [`IngestOutcome`] decides the answer each wire format gives.

use analytics::enrich::DropReason;
use analytics::event::{EventError, RawEvent};

/// Which site an event is for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SiteRef {
    /// The domain(s) in [`RawEvent::domain`] (Plausible's way).
    Domain,
    /// An Umami website id (a UUID); [`RawEvent::domain`] then holds the page's host.
    UmamiWebsite(String),
}

/// What became of an event.
#[derive(Debug)]
#[non_exhaustive]
pub enum IngestOutcome {
    /// Stored.
    Accepted,
    /// Deliberately not stored (a bot, an excluded address), and counted.
    Dropped(DropReason),
    /// No site has this domain or website id.
    UnknownSite,
    /// The event failed validation.
    Invalid(EventError),
    /// The pipeline could not store it (the store is down, say); answered with a 500.
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// Takes events in. The analytics pipeline implements it; tests record what they receive.
#[async_trait::async_trait]
pub trait Ingest: Send + Sync + 'static {
    /// Validates, enriches and stores `event` for `site`.
    async fn ingest(&self, event: RawEvent, site: SiteRef) -> IngestOutcome;
}
