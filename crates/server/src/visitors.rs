//! The session and visitor routes, for a site's signed-in users and keys with the `visitors`
//! scope: `GET /api/sessions` (the sessions of a UTC day), `GET /api/sessions/{session}` (one
//! session's events), `GET /api/visitors/{visitor}/sessions`, and a visitor's GDPR access and
//! erasure requests: `GET /api/visitors/{visitor}/events` and `DELETE /api/visitors/{visitor}`.

use analytics::period::parse_date;
use analytics::sites::Site;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use crate::auth::{Need, authorize};
use crate::error::ServerError;
use crate::extract::UrlQuery;
use crate::state::{AppState, Reading};
use crate::wire::json_ok;
use crate::wire::visitors::{
    Deleted, SessionEventView, SessionEvents, SessionList, SessionView, VisitorEventView, VisitorEvents,
};

/// The parameters of the session routes.
#[derive(Debug, serde::Deserialize)]
pub struct SessionParams {
    site_id: Option<String>,
    date: Option<String>,
    limit: Option<usize>,
}

/// `{"sessions": [...]}`: the answer of the routes that list sessions.
fn sessions_answer(list: &[analytics::stats::SessionSummary]) -> Result<Response, ServerError> {
    Ok(json_ok(SessionList { sessions: list.iter().map(SessionView::new).collect() }))
}

async fn session_site(
    state: &AppState,
    headers: &HeaderMap,
    p: &SessionParams,
) -> Result<(Reading, Site), ServerError> {
    let r = state.reading()?.clone();
    let name = p.site_id.as_deref().ok_or_else(|| ServerError::bad_request("`site_id` is required"))?;
    let (_, site) = authorize(&r, headers, Some(name), Need::Visitors).await?;
    Ok((r, site))
}

/// The site (authorized) and the UTC day (`date`, today by default) of a session route.
async fn session_day(
    state: &AppState,
    headers: &HeaderMap,
    p: &SessionParams,
) -> Result<(Reading, Site, String), ServerError> {
    let (r, site) = session_site(state, headers, p).await?;
    let day = day_param(p, &site)?;
    Ok((r, site, day))
}

fn day_param(p: &SessionParams, site: &Site) -> Result<String, ServerError> {
    match &p.date {
        Some(d) => parse_date(d).map(|d| d.to_string()).map_err(|e| ServerError::bad_request(format!("`date`: {e}"))),
        None => {
            let _ = site;
            Ok(jiff::Timestamp::now().strftime("%Y-%m-%d").to_string())
        }
    }
}

/// `GET /api/sessions?site_id=&date=&limit=`: the sessions active on a UTC day (today by
/// default), latest activity first; 50 by default, at most 1,000.
pub async fn recent_sessions(
    State(state): State<AppState>,
    headers: HeaderMap,
    UrlQuery(p): UrlQuery<SessionParams>,
) -> Result<Response, ServerError> {
    let (r, site, day) = session_day(&state, &headers, &p).await?;
    sessions_answer(&r.stats.recent_sessions(&site.site_id, &day, p.limit.unwrap_or(50).min(1000)).await?)
}

/// `GET /api/sessions/{session}?site_id=`: one session's events in order.
pub async fn session(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::extract::Path(reference): axum::extract::Path<String>,
    UrlQuery(p): UrlQuery<SessionParams>,
) -> Result<Response, ServerError> {
    let (r, site) = session_site(&state, &headers, &p).await?;
    let events = r.stats.session_events(&site.site_id, &reference).await?;
    if events.is_empty() {
        return Err(ServerError::not_found("no such session"));
    }
    Ok(json_ok(SessionEvents { session: &reference, events: events.iter().map(SessionEventView::new).collect() }))
}

/// `GET /api/visitors/{visitor}/sessions?site_id=&date=`: a visitor's sessions of a UTC day.
pub async fn visitor_sessions(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::extract::Path(visitor): axum::extract::Path<String>,
    UrlQuery(p): UrlQuery<SessionParams>,
) -> Result<Response, ServerError> {
    let (r, site, day) = session_day(&state, &headers, &p).await?;
    sessions_answer(&r.stats.visitor_sessions(&site.site_id, &day, &visitor).await?)
}

/// `GET /api/visitors/{visitor}/events?site_id=&date=`: everything stored about a visitor's
/// sessions of a UTC day, event by event (a GDPR access request; `DELETE` erases it).
pub async fn visitor_export(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::extract::Path(visitor): axum::extract::Path<String>,
    UrlQuery(p): UrlQuery<SessionParams>,
) -> Result<Response, ServerError> {
    let (r, site, day) = session_day(&state, &headers, &p).await?;
    let events = r.stats.visitor_events(&site.site_id, &day, &visitor).await?;
    Ok(json_ok(VisitorEvents {
        visitor_id: visitor.to_ascii_lowercase(),
        date: &day,
        events: events.iter().map(VisitorEventView::new).collect(),
    }))
}

/// `DELETE /api/visitors/{visitor}?site_id=&date=`: erases a visitor's events of a UTC day.
pub async fn delete_visitor(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::extract::Path(visitor): axum::extract::Path<String>,
    UrlQuery(p): UrlQuery<SessionParams>,
) -> Result<Response, ServerError> {
    let (r, site, day) = session_day(&state, &headers, &p).await?;
    let n = r.stats.delete_visitor(&site.site_id, &day, &visitor).await?;
    Ok(json_ok(Deleted { deleted_events: n }))
}
