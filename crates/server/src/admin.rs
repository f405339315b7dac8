//! The sites and settings API, what the dashboard's site picker and settings page use:
//!
//! | route | who | does |
//! |---|---|---|
//! | `GET /api/sites` | anyone signed in, a key, a shared link | the sites the caller may see |
//! | `POST /api/sites {domain, timezone}` | users | adds a site |
//! | `PATCH /api/sites/{site} {timezone, retention_*_days, excluded_ip_ranges}` | users | changes settings |
//! | `DELETE /api/sites/{site}` | users | removes a site |
//! | `POST /api/sites/{site}/domains {domain}`, `DELETE …/domains/{domain}` | users | more domains of a site |
//! | `POST /api/sites/{site}/goals {event_name \| page_path, currency?}` (a currency makes a revenue goal), `DELETE …/goals/{id}` | users | goals |
//! | `POST /api/sites/{site}/funnels {name, steps: [{page} \| {event}]}`, `DELETE …/funnels/{id}` | users | saved funnels |
//! | `GET /api/sites/{site}/segments` | anyone who may read the site's statistics | saved segments: `{segments: [{segment_id, name, filters}]}` |
//! | `POST /api/sites/{site}/segments {name, filters}`, `DELETE …/segments/{id}` | users | saved segments; the Stats API takes `["is", "segment", [id]]` |
//! | `GET, POST {name, scopes} /api/sites/{site}/keys`, `DELETE …/keys/{id}` | users | API keys; a new key is shown once; `scopes` is a list of `stats` (the default), `visitors`, `import`, `admin` |
//! | `GET, POST {name, password, embed} /api/sites/{site}/shares`, `PATCH …/shares/{id} {embed}`, `DELETE …/shares/{id}` | users | shared links; a new link is shown once; `embed` lets other sites frame it |
//!
//! "users" also admits a site API key with the `admin` scope, on its own site only.
//!
//! `{site}` is a site id or domain. Bodies are `application/json`; answers are JSON, errors
//! `{"error": …}`.

use analytics::accounts::AccountsError;
use analytics::sites::{Site, SitesError};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::{Need, Principal, authorize, principal};
use crate::error::ServerError;
use crate::extract::json_body;
use crate::state::{AppState, Reading};
use crate::wire::admin::{
    EMBED_FLAG, EmbedChange, FunnelAdded, GoalAdded, Invited, KeyCreated, KeyList, KeyView, MemberList, MemberRole,
    MemberView, NewCredential, NewFunnel, NewGoal, NewSegment, NewSite, PrincipalView, Removed, Revoked, SegmentList,
    SegmentView, SettingsChange, ShareCreated, ShareEmbed, ShareList, ShareView, SiteList, SiteView,
};
use crate::wire::json_ok;
use crate::wire::stats::BodyFilter;

/// The site named in a settings route's path, if the caller may manage it.
async fn manage(state: &AppState, headers: &HeaderMap, site: &str) -> Result<(Reading, Site), ServerError> {
    authorized(state, headers, site, Need::Manage).await
}

/// The site named in a route's path, if the caller may do `need` on it.
async fn authorized(
    state: &AppState,
    headers: &HeaderMap,
    site: &str,
    need: Need,
) -> Result<(Reading, Site), ServerError> {
    let r = state.reading()?.clone();
    let (_, site) = authorize(&r, headers, Some(site), need).await?;
    Ok((r, site))
}

/// A `201 Created` JSON answer.
fn created(body: impl serde::Serialize) -> Response {
    (StatusCode::CREATED, json_ok(body)).into_response()
}

/// `GET /api/sites`.
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let who = principal(r, &headers).await?;
    let full = matches!(who, Principal::User(_));
    let sites = match (&who, who.site_id()) {
        (_, Some(id)) => r.sites.get(id).await.map_err(ServerError::backend)?.into_iter().collect(),
        // An invited account sees the sites it holds a role on.
        (Principal::User(u), None) if !u.is_instance_admin() => {
            let mut sites = Vec::new();
            for id in r.accounts.sites_of(&u.email).await.map_err(ServerError::backend)? {
                if let Some(site) = r.sites.get(&id).await.map_err(ServerError::backend)? {
                    sites.push(site);
                }
            }
            sites
        }
        (_, None) => r.sites.list().await.map_err(ServerError::backend)?,
    };
    let principal = match &who {
        Principal::User(u) => PrincipalView::User { email: &u.email, instance_admin: u.is_instance_admin() },
        Principal::Key(_) => PrincipalView::Key,
        Principal::Share(s) => PrincipalView::Share { name: &s.name },
    };
    Ok(json_ok(SiteList { sites: sites.iter().map(|s| SiteView::new(s, full)).collect(), principal }))
}

/// `POST /api/sites`.
pub async fn add(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let who = principal(r, &headers).await?;
    // Adding a site is the instance administrators' (an invited account has roles on sites only).
    if !matches!(&who, Principal::User(u) if u.is_instance_admin()) {
        return Err(ServerError::Unauthorized);
    }
    let body: NewSite = json_body(&headers, &body)?;
    let domain = body.domain.required("domain")?;
    let timezone = body.timezone.optional("timezone")?.unwrap_or("UTC");
    let site = r.sites.add(domain, timezone).await?;
    Ok(created(SiteView::new(&site, true)))
}

/// `PATCH /api/sites/{site}`.
pub async fn update(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let changes = json_body::<SettingsChange>(&headers, &body)?.changes()?;
    let site = r.sites.update(&site.site_id, &changes).await?;
    Ok(json_ok(SiteView::new(&site, true)))
}

/// `DELETE /api/sites/{site}`.
pub async fn remove(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
) -> Result<Response, ServerError> {
    let (r, site) = authorized(&state, &headers, &site, Need::Own).await?;
    r.sites.remove(&site.site_id).await?;
    Ok(json_ok(Removed { removed: &site.site_id }))
}

/// `POST /api/sites/{site}/domains`.
pub async fn add_domain(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let body: NewSite = json_body(&headers, &body)?;
    let domain = body.domain.required("domain")?;
    let site = r.sites.add_domain(&site.site_id, domain).await?;
    Ok(created(SiteView::new(&site, true)))
}

/// `DELETE /api/sites/{site}/domains/{domain}`.
pub async fn remove_domain(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, domain)): Path<(String, String)>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let site = r.sites.remove_domain(&site.site_id, &domain).await?;
    Ok(json_ok(SiteView::new(&site, true)))
}

/// `POST /api/sites/{site}/goals`.
pub async fn add_goal(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let body: NewGoal = json_body(&headers, &body)?;
    let (goal, currency) = body.goal()?;
    let g = r.sites.add_goal_with_currency(&site.site_id, goal, currency).await?;
    Ok(created(GoalAdded::new(&g)))
}

/// `DELETE /api/sites/{site}/goals/{goal}`.
pub async fn remove_goal(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, goal)): Path<(String, String)>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    removed(r.sites.remove_goal(&site.site_id, &goal).await, "goal", &goal)
}

/// The answer to removing `id`: what was removed, or 404 when there was no such `what`.
fn removed(result: Result<bool, SitesError>, what: &str, id: &str) -> Result<Response, ServerError> {
    if result? { Ok(json_ok(Removed { removed: id })) } else { Err(ServerError::not_found(format!("no such {what}"))) }
}

/// `POST /api/sites/{site}/funnels`.
pub async fn add_funnel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let body: NewFunnel = json_body(&headers, &body)?;
    let name = body.name.required("name")?;
    let steps = body.steps.goals()?;
    let f = r.sites.add_funnel(&site.site_id, name, steps).await?;
    Ok(created(FunnelAdded { funnel_id: &f.funnel_id, name: &f.name }))
}

/// `GET /api/sites/{site}/segments`.
pub async fn segments(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
) -> Result<Response, ServerError> {
    let (_, site) = authorized(&state, &headers, &site, Need::Stats).await?;
    Ok(json_ok(SegmentList { segments: site.segments.iter().map(SegmentView::new).collect() }))
}

/// `POST /api/sites/{site}/segments {name, filters}`: filters as the Stats API takes them,
/// checked as a query's are; none may name a segment.
pub async fn add_segment(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let body: NewSegment = json_body(&headers, &body)?;
    let name = body.name.required("name")?;
    let filters = body
        .filters
        .plain()?
        .into_iter()
        .map(|f| match f {
            BodyFilter::Filter(f) => Ok(f),
            BodyFilter::Segment { .. } => Err(ServerError::bad_request("a segment cannot name another segment")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if filters.is_empty() {
        return Err(ServerError::bad_request("a segment needs at least one filter"));
    }
    analytics::stats::check_filters(&filters).map_err(|e| ServerError::bad_request(e.to_string()))?;
    let s = r.sites.add_segment(&site.site_id, name, filters).await?;
    Ok(created(SegmentView::new(&s)))
}

/// `DELETE /api/sites/{site}/segments/{segment}`.
pub async fn remove_segment(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, segment)): Path<(String, String)>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    removed(r.sites.remove_segment(&site.site_id, &segment).await, "segment", &segment)
}

/// `DELETE /api/sites/{site}/funnels/{funnel}`.
pub async fn remove_funnel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, funnel)): Path<(String, String)>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    removed(r.sites.remove_funnel(&site.site_id, &funnel).await, "funnel", &funnel)
}

/// `GET /api/sites/{site}/keys`.
pub async fn keys(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let keys = r.sites.keys(&site.site_id).await?;
    Ok(json_ok(KeyList { keys: keys.iter().map(KeyView::new).collect() }))
}

/// `POST /api/sites/{site}/keys`: the new key, shown this once.
pub async fn create_key(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let body: NewCredential = json_body(&headers, &body)?;
    let name = body.name("dashboard")?;
    let scopes = body.scopes()?;
    let (key, info) = r.sites.create_key(&site.site_id, name, &scopes).await?;
    let scopes = info.scopes.iter().map(|s| s.as_str()).collect();
    Ok(created(KeyCreated { key: &key, key_id: &info.key_id, name: &info.name, scopes }))
}

/// `DELETE /api/sites/{site}/keys/{key}`.
pub async fn revoke_key(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, key)): Path<(String, String)>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    r.sites.revoke_key(&site.site_id, &key).await?;
    Ok(json_ok(Revoked { revoked: &key }))
}

/// `GET /api/sites/{site}/shares`.
pub async fn shares(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let list = r.accounts.shares(&site.site_id).await.map_err(ServerError::backend)?;
    Ok(json_ok(ShareList { shares: list.iter().map(ShareView::new).collect() }))
}

/// `POST /api/sites/{site}/shares`: the new link's path, shown this once.
pub async fn create_share(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let body: NewCredential = json_body(&headers, &body)?;
    let name = body.name("shared link")?;
    let password = body.password.optional("password")?;
    let embed = body.embed()?;
    if embed == Some(true) && password.is_some_and(|p| !p.is_empty()) {
        return Err(ServerError::bad_request(NO_EMBED_WITH_PASSWORD));
    }
    let (token, info) = r.accounts.create_share(&site.site_id, name, password).await.map_err(|e| match e {
        e @ AccountsError::InvalidPassword => ServerError::bad_request(e.to_string()),
        e => ServerError::backend(e),
    })?;
    if embed == Some(true) {
        r.accounts.set_share_embed(&site.site_id, &info.share_id, true).await.map_err(ServerError::backend)?;
    }
    Ok(created(ShareCreated {
        share_id: &info.share_id,
        name: &info.name,
        has_password: info.has_password,
        embed: embed == Some(true),
        token: &token,
        path: format!("/share/{token}"),
    }))
}

/// Why a password-protected link cannot be embedded.
const NO_EMBED_WITH_PASSWORD: &str = "a link with a password cannot be embedded: browsers do not send its unlock \
                                      cookie inside another site's frame";

/// A shared link's error: an unknown link 404, the rest 500.
fn share_error(e: AccountsError) -> ServerError {
    match e {
        AccountsError::NoSuchShare(_) => ServerError::not_found("no such shared link"),
        e => ServerError::backend(e),
    }
}

/// `PATCH /api/sites/{site}/shares/{share} {embed}`: lets other sites show the link in a frame,
/// or stops them.
pub async fn update_share(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, share)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let body: EmbedChange = json_body(&headers, &body)?;
    let Some(embed) = body.embed.flag(EMBED_FLAG)? else {
        return Err(ServerError::bad_request("`embed` (true or false) is required"));
    };
    if embed {
        let list = r.accounts.shares(&site.site_id).await.map_err(ServerError::backend)?;
        if list.iter().any(|s| s.share_id == share && s.has_password) {
            return Err(ServerError::bad_request(NO_EMBED_WITH_PASSWORD));
        }
    }
    r.accounts.set_share_embed(&site.site_id, &share, embed).await.map_err(share_error)?;
    Ok(json_ok(ShareEmbed { share_id: &share, embed }))
}

/// `DELETE /api/sites/{site}/shares/{share}`.
pub async fn revoke_share(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, share)): Path<(String, String)>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    r.accounts.revoke_share(&site.site_id, &share).await.map_err(share_error)?;
    Ok(json_ok(Revoked { revoked: &share }))
}

/// `GET /api/sites/{site}/members`: the site's people (owners and admins may look).
pub async fn members(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
) -> Result<Response, ServerError> {
    let (r, site) = manage(&state, &headers, &site).await?;
    let list = r.accounts.members(&site.site_id).await.map_err(ServerError::backend)?;
    Ok(json_ok(MemberList { members: list.iter().map(MemberView::new).collect() }))
}

/// `POST /api/sites/{site}/invitations` `{email, role, visitors}`: an invitation link, shown once.
pub async fn invite(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = authorized(&state, &headers, &site, Need::Own).await?;
    let body: MemberRole = json_body(&headers, &body)?;
    let email = body.email.required("email")?;
    let (role, visitors) = body.role()?;
    let token = r.accounts.invite(&site.site_id, email, role, visitors).await?;
    Ok(created(Invited { link: format!("/invite/{token}"), token: &token, role: role.as_str() }))
}

/// `PUT /api/sites/{site}/members/{email}` `{role, visitors}`: changes a person's role.
pub async fn set_member(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, email)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, site) = authorized(&state, &headers, &site, Need::Own).await?;
    let body: MemberRole = json_body(&headers, &body)?;
    let (role, visitors) = body.role()?;
    r.accounts.set_member(&site.site_id, &email, role, visitors).await.map_err(|e| match e {
        e @ AccountsError::NoSuchUser(_) => ServerError::not_found(e.to_string()),
        e => ServerError::from(e),
    })?;
    Ok(json_ok(MemberView { email: &email, role: role.as_str(), visitors }))
}

/// `DELETE /api/sites/{site}/members/{email}`: takes a person's role away.
pub async fn remove_member(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((site, email)): Path<(String, String)>,
) -> Result<Response, ServerError> {
    let (r, site) = authorized(&state, &headers, &site, Need::Own).await?;
    if !r.accounts.remove_member(&site.site_id, &email).await.map_err(ServerError::backend)? {
        return Err(ServerError::not_found("no such member"));
    }
    Ok(json_ok(Removed { removed: &email }))
}
