//! The analytics pipeline behind the ingestion routes: [`PipelineIngest`] maps the wire layer's
//! [`SiteRef`] to the pipeline's site selector and the pipeline's result to an [`IngestOutcome`].

use std::sync::Arc;

use analytics::event::RawEvent;
use analytics::pipeline::{IngestResult, Pipeline, SiteSelector};

use crate::ingest::{Ingest, IngestOutcome, SiteRef};

/// [`Ingest`] by Tally's analytics pipeline.
#[derive(Debug, Clone)]
pub struct PipelineIngest(pub Arc<Pipeline>);

#[async_trait::async_trait]
impl Ingest for PipelineIngest {
    async fn ingest(&self, event: RawEvent, site: SiteRef) -> IngestOutcome {
        let selector = match site {
            SiteRef::Domain => SiteSelector::Domain,
            SiteRef::UmamiWebsite(id) => SiteSelector::UmamiWebsite(id),
        };
        match self.0.ingest(event, selector).await {
            IngestResult::Accepted => IngestOutcome::Accepted,
            IngestResult::Dropped(reason) => IngestOutcome::Dropped(reason),
            IngestResult::UnknownSite => IngestOutcome::UnknownSite,
            IngestResult::Invalid(e) => IngestOutcome::Invalid(e),
            IngestResult::Failed(e) => IngestOutcome::Failed(Box::new(e)),
            _ => IngestOutcome::Failed("unexpected pipeline outcome".into()),
        }
    }
}
