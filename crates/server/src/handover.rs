//! Visitors' events handed between `tally serve` processes sharing a table: to the process
//! holding the visitor's session (analytics' `pipeline`, "Sessions held by one process"), as
//! `POST /internal/handover` with the token that process recorded in its run's item.
//!
//! The request's body is one event as an event block encodes it; the answer is `204` once the
//! event is durable there, `409` when that process does not hold the session (the sender reads
//! the visitor's item again), `403` for a wrong token, `400` for a body that is not one event,
//! and `503` when it could not store the event. The sender answers its client only after this
//! answer, so an event is acknowledged only once durable, wherever it was stored.
//!
//! The client is hyper's (already this crate's HTTP stack): HTTP/1.1 with pooled keep-alive
//! connections, since a process hands over many small requests to the same few peers.

use std::time::Duration;

use analytics::pipeline::{Handed, Handover, PipelineError};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::state::AppState;

/// The header carrying the receiving process's token.
pub const TOKEN_HEADER: &str = "x-tally-handover-token";

/// The largest body taken: one event, whose fields ingestion bounds well below this.
pub const MAX_HANDOVER_BYTES: usize = 256 * 1024;

/// How long a sender waits for the holder's answer. The outcome is then unknown, and the
/// sender's client gets an error (the event may have been stored: never acknowledged twice,
/// possibly counted once without an acknowledgement, as any write whose answer was lost).
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// Hands events over HTTP.
#[derive(Clone)]
pub struct HttpHandover {
    client: Client<HttpConnector, Body>,
}

impl HttpHandover {
    /// A client with its own connection pool.
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(3)));
        HttpHandover { client: Client::builder(TokioExecutor::new()).build(connector) }
    }
}

impl Default for HttpHandover {
    fn default() -> Self {
        HttpHandover::new()
    }
}

impl Handover for HttpHandover {
    fn hand(&self, address: &str, token: &str, payload: Vec<u8>) -> BoxFuture<'static, Result<Handed, String>> {
        let request = Request::post(format!("{}/internal/handover", address.trim_end_matches('/')))
            .header(TOKEN_HEADER, token)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Body::from(payload));
        let client = self.client.clone();
        Box::pin(async move {
            let request = request.map_err(|e| format!("building the request: {e}"))?;
            let response = tokio::time::timeout(HANDOVER_TIMEOUT, client.request(request))
                .await
                .map_err(|_| format!("no answer within {} s", HANDOVER_TIMEOUT.as_secs()))?
                .map_err(|e| e.to_string())?;
            match response.status() {
                StatusCode::NO_CONTENT => Ok(Handed::Stored),
                StatusCode::CONFLICT => Ok(Handed::NotHolder),
                status => {
                    let body = axum::body::to_bytes(Body::new(response.into_body()), 4096).await.unwrap_or_default();
                    Err(format!("{status}: {}", String::from_utf8_lossy(&body)))
                }
            }
        })
    }
}

/// `POST /internal/handover`: stores an event another process handed over.
pub(crate) async fn take(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(reading) = &state.reading else { return StatusCode::NOT_FOUND.into_response() };
    let token = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    match reading.pipeline.take_over(token, &body).await {
        Ok(Handed::Stored) => StatusCode::NO_CONTENT.into_response(),
        Ok(Handed::NotHolder) => (StatusCode::CONFLICT, "this process does not hold the session").into_response(),
        Err(PipelineError::WrongToken) => (StatusCode::FORBIDDEN, "not this process's token").into_response(),
        Err(PipelineError::Handover(why)) => (StatusCode::BAD_REQUEST, why).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "storing a handed-over event failed");
            (StatusCode::SERVICE_UNAVAILABLE, "the event could not be stored").into_response()
        }
    }
}
