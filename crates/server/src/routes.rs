//! The router: ingestion routes for the Plausible and Umami trackers (`/api/event`, `/api/send`,
//! `/api/batch`), with CORS, `/health`, and the reading, account and dashboard routes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use analytics::event::RequestHeaders;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};

use crate::error::ServerError;
use crate::ingest::{Ingest, IngestOutcome, SiteRef};
use crate::wire::umami::SendKind;
use crate::wire::{RequestMeta, plausible, umami};

/// Largest request body accepted, as the spec sets it.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Where events go.
    pub ingest: Arc<dyn Ingest>,
    /// Where `/metrics` reads its figures; `None` answers 404.
    pub metrics: Option<Arc<dyn crate::metrics::MetricsSource>>,
    /// The Stats API, realtime and import; `None` answers 404.
    pub reading: Option<Arc<crate::stats::Reading>>,
    /// What `/health` asks before it answers ok; `None` answers ok while the process serves.
    pub health: Option<Arc<dyn HealthCheck>>,
    /// The token `/metrics` asks for, if any.
    pub metrics_token: Option<Arc<str>>,
    /// Proxies whose forwarding headers (client address, protocol) are believed.
    pub trusted_proxies: Arc<analytics::enrich::IpRanges>,
    /// The sign-in and unlock rate limits.
    pub attempts: Arc<crate::account::Attempts>,
}

/// A check of what the server needs beyond itself (the store), for `/health`.
#[async_trait::async_trait]
pub trait HealthCheck: Send + Sync {
    /// `Err` with what is wrong when the server cannot do its work (logged, never answered).
    async fn check(&self) -> Result<(), String>;
}

/// How long `/health` waits for its check before it answers unavailable.
pub const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl AppState {
    /// State around `ingest`.
    pub fn new(ingest: Arc<dyn Ingest>) -> Self {
        AppState {
            ingest,
            metrics: None,
            reading: None,
            health: None,
            metrics_token: None,
            trusted_proxies: Arc::new(analytics::enrich::IpRanges::new()),
            attempts: Arc::new(crate::account::Attempts::new(crate::account::DEFAULT_ATTEMPTS_PER_MINUTE)),
        }
    }

    /// Asks every `/metrics` request for `token` as `Authorization: Bearer TOKEN`.
    pub fn with_metrics_token(mut self, token: &str) -> Self {
        self.metrics_token = Some(Arc::from(token));
        self
    }

    /// Believes the forwarding headers of these proxies (the client's address for rate limits
    /// and logs; HTTPS for `Secure` cookies).
    pub fn with_trusted_proxies(mut self, proxies: analytics::enrich::IpRanges) -> Self {
        self.trusted_proxies = Arc::new(proxies);
        self
    }

    /// Allows `per_minute` sign-in and unlock attempts a minute per client and per account.
    pub fn with_attempts_per_minute(mut self, per_minute: u32) -> Self {
        self.attempts = Arc::new(crate::account::Attempts::new(per_minute));
        self
    }

    /// Serves the Stats API, realtime and import from `reading`.
    pub fn with_reading(mut self, reading: Arc<crate::stats::Reading>) -> Self {
        self.reading = Some(reading);
        self
    }

    /// Answers `/health` from `check`.
    pub fn with_health(mut self, check: Arc<dyn HealthCheck>) -> Self {
        self.health = Some(check);
        self
    }

    /// Serves `/metrics` from `source`.
    pub fn with_metrics(mut self, source: Arc<dyn crate::metrics::MetricsSource>) -> Self {
        self.metrics = Some(source);
        self
    }
}

/// Tally's routes. Serve them with [`crate::serve`] (or with connect info of type
/// `SocketAddr`), so handlers see the peer's address.
pub fn router(state: AppState) -> Router {
    let ingestion = Router::new()
        .route("/api/event", post(plausible_event).options(preflight))
        .route("/api/send", post(umami_send).options(preflight))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .route("/api/batch", post(umami_batch).options(preflight).layer(DefaultBodyLimit::max(MAX_BATCH_BYTES)))
        .layer(axum::middleware::map_response(allow_any_origin));
    Router::new()
        .merge(ingestion)
        .route("/health", get(health))
        .route("/js/script.js", get(crate::tracker::script))
        .route("/js/tally.js", get(crate::tracker::script))
        .route("/metrics", get(crate::metrics::handler))
        .route("/api/v2/query", post(crate::stats::query).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/funnel", post(crate::stats::funnel).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/export", post(crate::export::export).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/properties", post(crate::stats::property_keys).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/journeys", post(crate::stats::journeys).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/realtime", get(crate::stats::realtime))
        .route("/api/v1/stats/realtime/visitors", get(crate::stats::realtime_visitors))
        .route("/api/sessions", get(crate::stats::recent_sessions))
        .route("/api/sessions/{session}", get(crate::stats::session))
        .route("/api/visitors/{visitor}/sessions", get(crate::stats::visitor_sessions))
        .route("/api/visitors/{visitor}/events", get(crate::stats::visitor_export))
        .route("/api/visitors/{visitor}", axum::routing::delete(crate::stats::delete_visitor))
        .route("/api/import", post(crate::stats::import).layer(DefaultBodyLimit::max(crate::stats::MAX_IMPORT_BYTES)))
        .merge(accounts_and_settings())
        .merge(crate::dashboard::routes())
        .with_state(state)
}

/// Signing in, shared links, and the sites and settings API (see [`crate::account`] and
/// [`crate::admin`]); small JSON bodies only.
fn accounts_and_settings() -> Router<AppState> {
    use crate::{account, admin};
    use axum::routing::{delete, patch};
    Router::new()
        .route("/api/auth", get(account::state))
        .route("/api/login", post(account::login))
        .route("/api/logout", post(account::logout))
        .route("/api/logout/everywhere", post(account::logout_everywhere))
        .route("/api/password", post(account::change_password))
        .route("/api/2fa/setup", post(account::two_factor_setup))
        .route("/api/2fa/enable", post(account::two_factor_enable))
        .route("/api/2fa/disable", post(account::two_factor_disable))
        .route("/api/setup", post(account::setup))
        .route("/api/share/{token}", get(account::share))
        .route("/api/share/{token}/unlock", post(account::unlock))
        .route("/api/sites", get(admin::list).post(admin::add))
        .route("/api/sites/{site}", patch(admin::update).delete(admin::remove))
        .route("/api/sites/{site}/domains", post(admin::add_domain))
        .route("/api/sites/{site}/domains/{domain}", delete(admin::remove_domain))
        .route("/api/sites/{site}/goals", post(admin::add_goal))
        .route("/api/sites/{site}/goals/{goal}", delete(admin::remove_goal))
        .route("/api/sites/{site}/funnels", post(admin::add_funnel))
        .route("/api/sites/{site}/funnels/{funnel}", delete(admin::remove_funnel))
        .route("/api/sites/{site}/segments", get(admin::segments).post(admin::add_segment))
        .route("/api/sites/{site}/segments/{segment}", delete(admin::remove_segment))
        .route("/api/sites/{site}/keys", get(admin::keys).post(admin::create_key))
        .route("/api/sites/{site}/keys/{key}", delete(admin::revoke_key))
        .route("/api/sites/{site}/shares", get(admin::shares).post(admin::create_share))
        .route("/api/sites/{site}/shares/{share}", delete(admin::revoke_share).patch(admin::update_share))
        .route("/api/sites/{site}/members", get(admin::members))
        .route("/api/sites/{site}/members/{email}", axum::routing::put(admin::set_member).delete(admin::remove_member))
        .route("/api/sites/{site}/invitations", post(admin::invite))
        .route("/invite/{token}", get(account::invitation).post(account::accept_invitation))
        .layer(DefaultBodyLimit::max(16 * 1024))
}

/// `/metrics` and `/health` alone, for a listen address of their own (a private interface a
/// scraper reaches); the main router then leaves `/metrics` out.
pub fn metrics_router(state: AppState) -> Router {
    Router::new().route("/health", get(health)).route("/metrics", get(crate::metrics::handler)).with_state(state)
}

/// `GET /health`: `200 {"status":"ok"}` when the check passes within [`HEALTH_TIMEOUT`], else
/// `503 {"status":"unavailable"}`, so a load balancer stops sending events to a process that
/// cannot store them. Why is logged, not answered: the store's errors name hosts and tables.
async fn health(State(state): State<AppState>) -> Response {
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

/// Trackers post from any site's pages, without credentials, so any origin may.
async fn allow_any_origin(mut response: Response) -> Response {
    response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    response
}

/// Answers a CORS preflight. Plausible's tracker sends `text/plain` and needs none; Umami's
/// sends `application/json` with `x-umami-cache`, `x-umami-website-id` and `x-umami-hostname`, and
/// any client posting JSON needs one. The headers asked for are allowed: nothing here reads
/// credentials.
async fn preflight(headers: HeaderMap) -> Response {
    let allow_headers = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned().unwrap_or_else(|| {
        HeaderValue::from_static("content-type, x-umami-cache, x-umami-website-id, x-umami-hostname")
    });
    (
        StatusCode::NO_CONTENT,
        [
            (header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("POST, OPTIONS")),
            (header::ACCESS_CONTROL_ALLOW_HEADERS, allow_headers),
            (header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400")),
        ],
    )
        .into_response()
}

/// Reads the request's metadata. Cookies and credentials are never passed on.
fn request_meta(headers: &HeaderMap, peer: Option<SocketAddr>) -> RequestMeta {
    let mut kept = RequestHeaders::new();
    for (name, value) in headers {
        if name == header::COOKIE || name == header::AUTHORIZATION {
            continue;
        }
        if let Ok(value) = value.to_str() {
            kept.push(name.as_str(), value);
        }
    }
    let received_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let mut meta = RequestMeta {
        user_agent: headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned(),
        headers: kept,
        received_ms,
        ..RequestMeta::default()
    };
    if let Some(peer) = peer {
        meta.peer_ip = peer.ip();
    }
    meta
}

fn body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ServerError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServerError::PayloadTooLarge { limit: MAX_BODY_BYTES }
        } else {
            ServerError::BadRequest { message: format!("could not read the body: {rejection}") }
        }
    })
}

/// The peer's address, when the server was started with it (see [`crate::listen`]).
pub(crate) type Peer = Option<Extension<ConnectInfo<SocketAddr>>>;

/// `POST /api/event`: `202 ok` for stored and dropped events alike, as Plausible answers, so a
/// bot learns nothing from the answer.
async fn plausible_event(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let bytes = body(bytes)?;
    let meta = request_meta(&headers, peer.map(|Extension(ConnectInfo(addr))| addr));
    let raw = plausible::parse(&bytes, meta)?;
    match state.ingest.ingest(raw, SiteRef::Domain).await {
        IngestOutcome::Accepted | IngestOutcome::Dropped(_) | IngestOutcome::UnknownSite => {
            Ok((StatusCode::ACCEPTED, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "ok").into_response())
        }
        IngestOutcome::Invalid(error) => Err(error.into()),
        IngestOutcome::Failed(error) => Err(ServerError::Internal(error)),
    }
}

/// `POST /api/send`: Umami's answers — `{"cache": token}` when taken, `{"beep":"boop"}` for a
/// dropped event, 400 `Website not found.` for an unknown website.
///
/// The cache token is opaque to the tracker, which sends it back in `x-umami-cache`. Umami's
/// carries a session id; Tally's carries only the website id, because Tally keeps no visitor
/// identifiers on the client, and Tally does not read it back.
async fn umami_send(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let bytes = body(bytes)?;
    let meta = request_meta(&headers, peer.map(|Extension(ConnectInfo(addr))| addr));
    let answer = umami_one(&state, &bytes, meta).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], answer.to_string()).into_response())
}

/// One `/api/send` body: its JSON answer, or the error `/api/send` answers with.
async fn umami_one(state: &AppState, bytes: &[u8], meta: RequestMeta) -> Result<serde_json::Value, ServerError> {
    let send = umami::parse(bytes, meta)?;
    let cache = serde_json::json!({ "cache": format!("tally.{}", send.website) });
    let SendKind::Event(raw) = send.kind else {
        return Ok(cache);
    };
    match state.ingest.ingest(*raw, SiteRef::UmamiWebsite(send.website)).await {
        IngestOutcome::Accepted => Ok(cache),
        IngestOutcome::Dropped(_) => Ok(serde_json::json!({ "beep": "boop" })),
        IngestOutcome::UnknownSite => Err(ServerError::BadRequest { message: "Website not found.".into() }),
        IngestOutcome::Invalid(error) => Err(error.into()),
        IngestOutcome::Failed(error) => Err(ServerError::Internal(error)),
    }
}

/// Largest `/api/batch` body accepted.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Most `/api/send` bodies in one `/api/batch`.
pub const MAX_BATCH_ITEMS: usize = 1000;

/// `POST /api/batch`: a JSON array of `/api/send` bodies, each taken in order as `/api/send`
/// takes it. Answers as Umami does: `{size, processed, errors, details: [{index, response}]}`,
/// where `response` is the error body `/api/send` would have given. Dropped events count as
/// processed, as `/api/send` answers them with 200 too. A body that is not an array, or holds
/// more than [`MAX_BATCH_ITEMS`], is refused whole and nothing is taken.
async fn umami_batch(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let bytes = bytes.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServerError::PayloadTooLarge { limit: MAX_BATCH_BYTES }
        } else {
            ServerError::BadRequest { message: format!("could not read the body: {rejection}") }
        }
    })?;
    let items = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Array(items)) => items,
        Ok(other) => {
            return Err(crate::wire::WireError::WrongType {
                field: "body",
                expected: "an array of /api/send bodies",
                found: crate::wire::json_type(&other),
            }
            .into());
        }
        Err(e) => return Err(crate::wire::WireError::Json(e.to_string()).into()),
    };
    if items.len() > MAX_BATCH_ITEMS {
        return Err(ServerError::BadRequest {
            message: format!("a batch holds at most {MAX_BATCH_ITEMS} events, not {}", items.len()),
        });
    }
    let meta = request_meta(&headers, peer.map(|Extension(ConnectInfo(addr))| addr));
    let mut details = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let one = serde_json::to_vec(item).unwrap_or_default();
        if let Err(error) = umami_one(&state, &one, meta.clone()).await {
            if matches!(error, ServerError::Internal(_)) {
                return Err(error);
            }
            details.push(serde_json::json!({ "index": index, "response": error.body() }));
        }
    }
    let answer = serde_json::json!({
        "size": items.len(),
        "processed": items.len() - details.len(),
        "errors": details.len(),
        "details": details,
    });
    Ok(([(header::CONTENT_TYPE, "application/json")], answer.to_string()).into_response())
}
