//! The routes a load balancer and a scraper ask: `GET /health` (is the store reachable?) and
//! `GET /metrics` (Tally's figures in the Prometheus text format, rendered by
//! [`crate::metrics`]).

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::ServerError;
use crate::state::AppState;

/// How long `/health` waits for its check before it answers unavailable.
pub const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `GET /health`: `200 {"status":"ok"}` when the check passes within [`HEALTH_TIMEOUT`], else
/// `503 {"status":"unavailable"}`, so a load balancer stops sending events to a process that
/// cannot store them. Why is logged, not answered: the store's errors name hosts and tables.
pub(crate) async fn health(State(state): State<AppState>) -> Response {
    let outcome = match &state.health {
        None => Ok(()),
        Some(check) => match tokio::time::timeout(HEALTH_TIMEOUT, check.check()).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {} s", HEALTH_TIMEOUT.as_secs())),
        },
    };
    let (status, body) = match outcome {
        Ok(()) => (StatusCode::OK, r#"{"status":"ok"}"#),
        Err(error) => {
            tracing::warn!(%error, "health check failed");
            (StatusCode::SERVICE_UNAVAILABLE, r#"{"status":"unavailable"}"#)
        }
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `GET /metrics`: the figures of the configured source, or 404 when the server has none. With
/// a token configured ([`AppState::with_metrics_token`]), only a request carrying it as
/// `Authorization: Bearer TOKEN` is answered; any other gets the one 401 of every refusal.
pub(crate) async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ServerError> {
    // A bare 404, as for a route that does not exist.
    let Some(source) = &state.metrics else { return Ok(StatusCode::NOT_FOUND.into_response()) };
    if let Some(token) = &state.metrics_token {
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        if !crate::account::constant_time_eq(sent.as_bytes(), token.as_bytes()) {
            return Err(ServerError::Unauthorized);
        }
    }
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], crate::metrics::render(&source.snapshot()))
        .into_response())
}
