//! Who is asking, and what they may do: every route that is not ingestion resolves its caller
//! to a [`Principal`] and checks it against the site and the [`Need`] of the route.
//!
//! | caller | sent as | sites | may |
//! |---|---|---|---|
//! | a site API key | `Authorization: Bearer tly_…` | its site | everything on its site |
//! | a signed-in user | cookie `tally_session` plus header `X-Tally-CSRF` | every site | everything |
//! | a shared link | header `X-Tally-Share: TOKEN` (plus cookie `tally_share` when it has a password) | its site | read statistics |
//!
//! A cookie alone never authorizes anything: a request signed in by cookie must also carry the
//! CSRF token, which only a page of this origin can read (`GET /api/auth`), and the cookies are
//! `HttpOnly`, `SameSite=Strict`, and `Secure` when the request came over HTTPS. Every refusal
//! answers the same 401, so a caller learns nothing about which sites, keys or links exist.

use analytics::accounts::{ShareInfo, User};
use analytics::sites::{ApiKeyInfo, Site};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::stats::Reading;

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
pub enum Need {
    /// Reads statistics: the Stats API and realtime. Shared links may.
    Stats,
    /// Reads or erases visitors' sessions, or imports events. Keys and users may.
    Visitors,
    /// Changes a site's settings, goals, keys or links. Users only.
    Manage,
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

    fn may(&self, need: Need) -> bool {
        match self {
            Principal::User(_) => true,
            Principal::Key(_) => need != Need::Manage,
            Principal::Share(_) => need == Need::Stats,
        }
    }
}

/// A JSON error answer.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], json!({ "error": message.into() }).to_string())
        .into_response()
}

/// The one answer to every refused request.
pub(crate) fn unauthorized() -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "Invalid API key or site ID. Please make sure you're using a valid API key with access to the site you've requested.",
    )
}

/// Logs an internal failure and answers a bare 500.
pub(crate) fn internal(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "request failed");
    error(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
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

/// Whether the request came over HTTPS (directly or through a proxy that says so), so cookies
/// are marked `Secure`.
pub fn is_https(headers: &HeaderMap) -> bool {
    let proto = headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let forwarded = headers.get("forwarded").and_then(|v| v.to_str().ok()).unwrap_or_default();
    proto.eq_ignore_ascii_case("https") || forwarded.to_ascii_lowercase().contains("proto=https")
}

/// A `Set-Cookie` value for `name`; `None` clears it.
pub fn set_cookie(headers: &HeaderMap, name: &str, value: Option<&str>, max_age_secs: u64) -> String {
    let secure = if is_https(headers) { "; Secure" } else { "" };
    match value {
        Some(v) => format!("{name}={v}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"),
        None => format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    }
}

/// The caller of a request, or the 401 to answer.
pub async fn principal(r: &Reading, headers: &HeaderMap) -> Result<Principal, Response> {
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        let bearer =
            auth.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim).ok_or_else(unauthorized)?;
        let key = r.sites.authenticate(bearer).await.map_err(internal)?.ok_or_else(unauthorized)?;
        return Ok(Principal::Key(key));
    }
    if let Some(token) = headers.get(SHARE_HEADER) {
        let token = token.to_str().map_err(|_| unauthorized())?;
        let share = r.accounts.share(token).await.map_err(internal)?.ok_or_else(unauthorized)?;
        if share.has_password {
            let grant = cookie(headers, SHARE_COOKIE).unwrap_or_default();
            if !r.accounts.share_unlocked(grant, &share.share_id).await.map_err(internal)? {
                return Err(password_required());
            }
        }
        return Ok(Principal::Share(share));
    }
    if let Some(session) = cookie(headers, SESSION_COOKIE) {
        let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if sent != csrf_token(session) {
            return Err(error(StatusCode::FORBIDDEN, "missing or wrong X-Tally-CSRF header"));
        }
        let user = r.accounts.session(session).await.map_err(internal)?.ok_or_else(unauthorized)?;
        return Ok(Principal::User(user));
    }
    Err(unauthorized())
}

/// The 401 of a password-protected shared link that was not unlocked.
fn password_required() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "error": "this shared link needs its password", "password_required": true }).to_string(),
    )
        .into_response()
}

/// The caller, if it may do `need` on `site` (a domain or id). With no `site`, the one site the
/// caller is limited to; a user must then name one.
pub async fn authorize(
    r: &Reading,
    headers: &HeaderMap,
    site: Option<&str>,
    need: Need,
) -> Result<(Principal, Site), Response> {
    let who = principal(r, headers).await?;
    if !who.may(need) {
        return Err(unauthorized());
    }
    let site = match (site, who.site_id()) {
        (Some(name), limited) => {
            let named = r.sites.resolve(name).await.map_err(internal)?.ok_or_else(unauthorized)?;
            if limited.is_some_and(|id| id != named.site_id) {
                return Err(unauthorized());
            }
            named
        }
        (None, Some(id)) => r.sites.get(id).await.map_err(internal)?.ok_or_else(unauthorized)?,
        (None, None) => return Err(error(StatusCode::BAD_REQUEST, "`site_id` is required")),
    };
    Ok((who, site))
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
    fn cookies_are_secure_only_behind_https() {
        let mut h = HeaderMap::new();
        let plain = set_cookie(&h, SESSION_COOKIE, Some("t"), 60);
        assert_eq!(plain, "tally_session=t; Path=/; HttpOnly; SameSite=Strict; Max-Age=60");
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(set_cookie(&h, SESSION_COOKIE, None, 0).ends_with("Max-Age=0; Secure"));
    }

    #[test]
    fn csrf_tokens_differ_per_session() {
        assert_ne!(csrf_token("a"), csrf_token("b"));
        assert_eq!(csrf_token("a"), csrf_token("a"));
        assert_eq!(csrf_token("a").len(), 32);
    }
}
