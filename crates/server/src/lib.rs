//! Tally's HTTP server: the only crate that knows HTTP and JSON. It holds the ingestion wire
//! layer — Plausible's `POST /api/event` and Umami's `POST /api/send` and `/api/batch`, read
//! exactly as their official trackers send them, with CORS — Tally's tracker, the Stats API,
//! realtime and sessions ([`stats`]), accounts and shared links ([`auth`], [`account`]), the
//! sites and settings API ([`admin`]), the embedded dashboard ([`dashboard`]), `/health` and
//! `/metrics`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use server::{AppState, Ingest, IngestOutcome, SiteRef};
//! use analytics::event::RawEvent;
//!
//! struct Discard;
//!
//! #[async_trait::async_trait]
//! impl Ingest for Discard {
//!     async fn ingest(&self, _event: RawEvent, _site: SiteRef) -> IngestOutcome {
//!         IngestOutcome::Accepted
//!     }
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8000").await?;
//! server::serve(listener, server::router(AppState::new(Arc::new(Discard)))).await
//! # }
//! ```
//!
//! What it is not: not the analytics pipeline (validation, enrichment, storage and aggregation
//! belong to the `analytics` crate, reached through the [`Ingest`] trait) and not `tally serve`
//! (configuration, the store and the pipeline are wired in the `tally` binary).

#![deny(missing_docs)]

pub mod account;
pub mod admin;
pub mod auth;
pub mod dashboard;
pub mod error;
pub mod export;
#[doc(hidden)]
pub mod fuzz;
pub mod ingest;
pub mod listen;
pub mod metrics;
pub mod pipeline;
pub mod routes;
pub mod stats;
pub mod tracker;
pub mod wire;

pub use error::ServerError;
pub use ingest::{Ingest, IngestOutcome, SiteRef};
pub use routes::{AppState, HealthCheck, MAX_BODY_BYTES, metrics_router, router};

/// Serves `app` on `listener` with the default [`listen::Limits`] until the process ends,
/// giving handlers the peer's address.
pub async fn serve(listener: tokio::net::TcpListener, app: axum::Router) -> std::io::Result<()> {
    listen::serve_limited(listener, app, listen::Limits::default(), std::future::pending()).await
}

/// Serves `app` on `listener` within `limits` until `signal` completes, then stops accepting
/// connections and returns once the requests in flight are answered, so every acknowledged event
/// has been handed to the pipeline before the caller flushes it.
pub async fn serve_with_shutdown(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: listen::Limits,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listen::serve_limited(listener, app, limits, signal).await
}
