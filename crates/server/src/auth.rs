//! Who is asking, and what they may do: every route that is not ingestion resolves its caller
//! to a [`Principal`] and checks it against the site and the [`Need`] of the route.
//!
//! | caller | sent as | sites | may |
//! |---|---|---|---|
//! | a site API key | `Authorization: Bearer tly_…` | its site | what its scopes allow: `stats` (the default), `visitors`, `import`, `admin` (everything on its site) |
//! | a signed-in instance administrator | cookie `tally_session` plus header `X-Tally-CSRF` | every site | everything |
//! | a signed-in invited user | the same | the sites it holds a role on | its role there: `viewer` reads statistics (and visitors' sessions when granted), `admin` also imports and manages settings, goals, keys and links, `owner` also manages people and deletes the site |
//! | a shared link | header `X-Tally-Share: TOKEN` (plus cookie `tally_share` when it has a password) | its site | read statistics |
//!
//! A cookie alone never authorizes anything: a request signed in by cookie must also carry the
//! CSRF token, which only a page of this origin can read (`GET /api/auth`), and the cookies are
//! `HttpOnly`, `SameSite=Strict`, and `Secure` when the request came over HTTPS — which Tally,
//! serving plain HTTP, believes only from a trusted proxy's `X-Forwarded-Proto` or `Forwarded`.
//! Every refusal — no credentials, a wrong, revoked or other site's key, a key without the
//! route's scope, a cookie without its CSRF header, an expired login, a locked or revoked shared
//! link, a shared link on a route it may not use — answers the one 401 of
//! [`ServerError::Unauthorized`], so a caller learns nothing about which sites, keys or links exist.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use analytics::accounts::{Role, ShareInfo, User};
use analytics::event::RequestHeaders;
use analytics::sites::{ApiKeyInfo, Scope, Site};
use axum::Extension;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

use crate::error::ServerError;
use crate::state::{AppState, Reading};

/// The login cookie.
pub const SESSION_COOKIE: &str = "tally_session";
/// The cookie of an unlocked, password-protected shared link.
pub const SHARE_COOKIE: &str = "tally_share";
/// The header carrying the CSRF token of a cookie-signed-in request.
pub const CSRF_HEADER: &str = "x-tally-csrf";
/// The header carrying a shared link's token.
pub const SHARE_HEADER: &str = "x-tally-share";

/// Who made a request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Principal {
    /// A site API key.
    Key(ApiKeyInfo),
    /// A signed-in user (an admin of every site).
    User(User),
    /// A shared link, read-only on its site.
    Share(ShareInfo),
}

/// What a route does, so what its caller must be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Need {
    /// Reads statistics: the Stats API and realtime. Shared links may; keys with `stats`.
    Stats,
    /// Reads, exports or erases visitors' sessions. Users, and keys with `visitors`.
    Visitors,
    /// Imports events. Users, and keys with `import`.
    Import,
    /// Changes a site's settings, goals, keys or links. Owners and admins, and keys with `admin`
    /// on their site.
    Manage,
    /// Manages a site's people (invitations, roles) or deletes it. Owners (and instance
    /// administrators), and keys with `admin` on their site.
    Own,
}

impl Need {
    /// The key scope a route with this need asks for.
    pub fn scope(self) -> Scope {
        match self {
            Need::Stats => Scope::Stats,
            Need::Visitors => Scope::Visitors,
            Need::Import => Scope::Import,
            Need::Manage | Need::Own => Scope::Admin,
        }
    }
}

impl Principal {
    /// The one site this caller is limited to, if it is limited to one.
    pub fn site_id(&self) -> Option<&str> {
        match self {
            Principal::Key(k) => Some(&k.site_id),
            Principal::Share(s) => Some(&s.site_id),
            Principal::User(_) => None,
        }
    }

    /// Whether this caller may do `need` (on its own site, for keys and links; an invited
    /// user's role is checked per site by [`authorize`]).
    pub fn may(&self, need: Need) -> bool {
        match self {
            Principal::User(_) => true,
            Principal::Key(key) => key.allows(need.scope()),
            Principal::Share(_) => need == Need::Stats,
        }
    }
}

/// The value of cookie `name`, if the request has it.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// The CSRF token that goes with login token `session`: derived from it, so it needs no storage,
/// and unguessable without the cookie, which scripts cannot read.
pub fn csrf_token(session: &str) -> String {
    let digest = Sha256::digest(format!("tally-csrf:{session}").as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The peer's address, or `0.0.0.0` when the server was not given it.
fn peer_ip(peer: Option<Extension<ConnectInfo<SocketAddr>>>) -> IpAddr {
    peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |Extension(ConnectInfo(addr))| {
        analytics::enrich::ip::canonical(addr.ip())
    })
}

/// The client's address as the server determines it: the peer's, or what a trusted proxy
/// forwards (`X-Forwarded-For`, `CF-Connecting-IP`, `X-Real-IP`), as ingestion reads it.
pub fn client_addr(state: &AppState, headers: &HeaderMap, peer: Option<Extension<ConnectInfo<SocketAddr>>>) -> IpAddr {
    let peer = peer_ip(peer);
    if !state.trusted_proxies.contains(peer) {
        return peer;
    }
    let forwarded: RequestHeaders = ["x-forwarded-for", "cf-connecting-ip", "x-real-ip"]
        .iter()
        .flat_map(|name| headers.get_all(*name).iter().filter_map(move |v| Some((*name, v.to_str().ok()?))))
        .collect();
    analytics::enrich::client_ip(peer, &forwarded, &state.trusted_proxies)
}

/// Whether the request came over HTTPS, so cookies are marked `Secure`: Tally serves plain
/// HTTP, so only a trusted proxy (`trusted_proxies`) can say so, with `X-Forwarded-Proto` or
/// `Forwarded: proto=https`; the same headers from anyone else are ignored.
pub fn is_https(state: &AppState, headers: &HeaderMap, peer: Option<Extension<ConnectInfo<SocketAddr>>>) -> bool {
    if !state.trusted_proxies.contains(peer_ip(peer)) {
        return false;
    }
    let proto = headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let forwarded = headers.get("forwarded").and_then(|v| v.to_str().ok()).unwrap_or_default();
    proto.trim().eq_ignore_ascii_case("https") || forwarded.to_ascii_lowercase().contains("proto=https")
}

/// A `Set-Cookie` value for `name`, `Secure` when `secure`; `None` clears it.
pub fn set_cookie(secure: bool, name: &str, value: Option<&str>, max_age_secs: u64) -> String {
    let secure = if secure { "; Secure" } else { "" };
    match value {
        Some(v) => format!("{name}={v}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"),
        None => format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    }
}

/// The caller of a request, or why it is refused.
pub async fn principal(r: &Reading, headers: &HeaderMap) -> Result<Principal, ServerError> {
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        let bearer = auth
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(ServerError::Unauthorized)?;
        let key = r.sites.authenticate(bearer).await.map_err(ServerError::backend)?.ok_or(ServerError::Unauthorized)?;
        return Ok(Principal::Key(key));
    }
    if let Some(token) = headers.get(SHARE_HEADER) {
        let token = token.to_str().map_err(|_| ServerError::Unauthorized)?;
        let share = r.accounts.share(token).await.map_err(ServerError::backend)?.ok_or(ServerError::Unauthorized)?;
        if share.has_password {
            // A locked link is refused like any other: `GET /api/share/{token}` tells the page
            // that it needs its password.
            let grant = cookie(headers, SHARE_COOKIE).unwrap_or_default();
            if !r.accounts.share_unlocked(grant, &share.share_id).await.map_err(ServerError::backend)? {
                return Err(ServerError::Unauthorized);
            }
        }
        return Ok(Principal::Share(share));
    }
    if let Some(session) = cookie(headers, SESSION_COOKIE) {
        let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if sent != csrf_token(session) {
            return Err(ServerError::Unauthorized);
        }
        let user = r.accounts.session(session).await.map_err(ServerError::backend)?.ok_or(ServerError::Unauthorized)?;
        return Ok(Principal::User(user));
    }
    Err(ServerError::Unauthorized)
}

/// The caller, if it may do `need` on `site` (a domain or id). With no `site`, the one site the
/// caller is limited to; a user must then name one.
pub async fn authorize(
    r: &Reading,
    headers: &HeaderMap,
    site: Option<&str>,
    need: Need,
) -> Result<(Principal, Site), ServerError> {
    let who = principal(r, headers).await?;
    if !who.may(need) {
        return Err(ServerError::Unauthorized);
    }
    let site = match (site, who.site_id()) {
        (Some(name), limited) => {
            let named = r.sites.resolve(name).await.map_err(ServerError::backend)?.ok_or(ServerError::Unauthorized)?;
            if limited.is_some_and(|id| id != named.site_id) {
                return Err(ServerError::Unauthorized);
            }
            named
        }
        (None, Some(id)) => r.sites.get(id).await.map_err(ServerError::backend)?.ok_or(ServerError::Unauthorized)?,
        (None, None) => return Err(ServerError::bad_request("`site_id` is required")),
    };
    if let Principal::User(user) = &who
        && !user.is_instance_admin()
    {
        let member = r.accounts.membership(&site.site_id, &user.email).await.map_err(ServerError::backend)?;
        if !member.is_some_and(|m| role_allows(m.role, m.visitors, need)) {
            return Err(ServerError::Unauthorized);
        }
    }
    Ok((who, site))
}

/// Whether a site role (with or without the grant to read visitors' sessions) allows `need`.
pub fn role_allows(role: Role, visitors: bool, need: Need) -> bool {
    match need {
        Need::Stats => true,
        Need::Visitors => role >= Role::Admin || visitors,
        Need::Import | Need::Manage => role >= Role::Admin,
        Need::Own => role == Role::Owner,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; tally_session=abc ; b=2"));
        h.append(header::COOKIE, HeaderValue::from_static("tally_share=def"));
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, SHARE_COOKIE), Some("def"));
        assert_eq!(cookie(&h, "tally"), None);
    }

    #[test]
    fn cookies_are_secure_only_behind_a_trusted_https_proxy() {
        let plain = set_cookie(false, SESSION_COOKIE, Some("t"), 60);
        assert_eq!(plain, "tally_session=t; Path=/; HttpOnly; SameSite=Strict; Max-Age=60");
        assert!(set_cookie(true, SESSION_COOKIE, None, 0).ends_with("Max-Age=0; Secure"));

        let state = AppState::new(std::sync::Arc::new(Nothing))
            .with_trusted_proxies(analytics::enrich::IpRanges::parse(["10.0.0.0/8"]).unwrap());
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let from = |ip: &str| Some(Extension(ConnectInfo(SocketAddr::new(ip.parse().unwrap(), 1234))));
        assert!(is_https(&state, &h, from("10.1.2.3")), "a trusted proxy says HTTPS");
        assert!(!is_https(&state, &h, from("203.0.113.9")), "anyone else is not believed");
        assert!(!is_https(&state, &h, None));
        h.insert("x-forwarded-for", HeaderValue::from_static("198.51.100.4"));
        assert_eq!(client_addr(&state, &h, from("10.1.2.3")).to_string(), "198.51.100.4");
        assert_eq!(client_addr(&state, &h, from("203.0.113.9")).to_string(), "203.0.113.9");
    }

    struct Nothing;

    #[async_trait::async_trait]
    impl crate::Ingest for Nothing {
        async fn ingest(
            &self,
            _: analytics::event::RawEvent,
            _: analytics::pipeline::SiteSelector,
        ) -> analytics::pipeline::IngestResult {
            analytics::pipeline::IngestResult::Accepted
        }
    }

    #[test]
    fn csrf_tokens_differ_per_session() {
        assert_ne!(csrf_token("a"), csrf_token("b"));
        assert_eq!(csrf_token("a"), csrf_token("a"));
        assert_eq!(csrf_token("a").len(), 32);
    }
}
