//! Tally's HTTP server: the only crate that knows HTTP and JSON. It holds the ingestion wire
//! layer — Plausible's `POST /api/event` and Umami's `POST /api/send` and `/api/batch`, read
//! exactly as their official trackers send them, with CORS ([`ingest`], [`wire`]) — Tally's
//! tracker, the Stats API and realtime ([`stats`]), sessions and visitors ([`visitors`]),
//! accounts and shared links ([`auth`], [`account`]), the sites and settings API ([`admin`]),
//! the embedded dashboard ([`dashboard`]), `/health` and `/metrics` ([`probes`]). [`routes`]
//! wires them; [`state`] is what they share; every failure is a [`ServerError`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use server::{AppState, Ingest};
//! use analytics::event::RawEvent;
//! use analytics::pipeline::{IngestResult, SiteSelector};
//!
//! struct Discard;
//!
//! #[async_trait::async_trait]
//! impl Ingest for Discard {
//!     async fn ingest(&self, _event: RawEvent, _site: SiteSelector) -> IngestResult {
//!         IngestResult::Accepted
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
pub mod attempts;
pub mod auth;
pub mod dashboard;
pub mod error;
pub mod export;
pub mod extract;
#[doc(hidden)]
pub mod fuzz;
pub mod handover;
pub mod ingest;
pub mod listen;
pub mod metrics;
pub mod probes;
pub mod routes;
pub mod state;
pub mod stats;
pub mod tracker;
pub mod visitors;
pub mod wire;

pub use error::ServerError;
pub use extract::MAX_BODY_BYTES;
pub use routes::{metrics_router, router};
pub use state::{AppState, HealthCheck, Ingest, Reading};

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
