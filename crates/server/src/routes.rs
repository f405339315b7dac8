//! The router, and only the router: every route wired to its handler, with its body limit.
//! Ingestion (`/api/event`, `/api/send`, `/api/batch`, [`crate::ingest`]) answers CORS for any
//! origin; the reading, visitor, account, settings and dashboard routes live in their modules.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::extract::MAX_BODY_BYTES;
use crate::ingest::{MAX_BATCH_BYTES, allow_any_origin, plausible_event, preflight, umami_batch, umami_send};
use crate::probes::health;
use crate::state::AppState;

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
        .route("/metrics", get(crate::probes::metrics))
        .route("/api/v2/query", post(crate::stats::query).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/funnel", post(crate::stats::funnel).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/export", post(crate::export::export).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/properties", post(crate::stats::property_keys).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/journeys", post(crate::stats::journeys).layer(DefaultBodyLimit::max(MAX_BODY_BYTES)))
        .route("/api/realtime", get(crate::stats::realtime))
        .route("/api/v1/stats/realtime/visitors", get(crate::stats::realtime_visitors))
        .route("/api/sessions", get(crate::visitors::recent_sessions))
        .route("/api/sessions/{session}", get(crate::visitors::session))
        .route("/api/visitors/{visitor}/sessions", get(crate::visitors::visitor_sessions))
        .route("/api/visitors/{visitor}/events", get(crate::visitors::visitor_export))
        .route("/api/visitors/{visitor}", axum::routing::delete(crate::visitors::delete_visitor))
        .route("/api/import", post(crate::stats::import).layer(DefaultBodyLimit::max(crate::stats::MAX_IMPORT_BYTES)))
        .route(
            "/internal/handover",
            post(crate::handover::take).layer(DefaultBodyLimit::max(crate::handover::MAX_HANDOVER_BYTES)),
        )
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
    Router::new().route("/health", get(health)).route("/metrics", get(crate::probes::metrics)).with_state(state)
}
