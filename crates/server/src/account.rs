//! Signing in and out, the first-run setup, and opening shared links.
//!
//! - `GET /api/auth`: `{signed_in, email, csrf, setup_required}` for the page to decide what to
//!   show; `csrf` is the token every cookie-signed-in request must send in `X-Tally-CSRF`.
//! - `POST /api/login {email, password}` sets the login cookie; `POST /api/logout` ends it.
//! - `POST /api/setup {token, email, password}` creates the first account, once, with the token
//!   of the setup link `tally serve` prints while no account exists.
//! - `GET /api/share/{token}`: the site a shared link shows and whether it needs a password;
//!   `POST /api/share/{token}/unlock {password}` sets the cookie that unlocks it.
//!
//! Every POST here takes `application/json` only: a form on another site cannot send that
//! without a CORS preflight, which these routes do not answer, so none can be forged.

use analytics::accounts::{AccountsError, LOGIN_LIFETIME, SHARE_UNLOCK_LIFETIME};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value as Json, json};

use crate::auth::{self, SESSION_COOKIE, SHARE_COOKIE, csrf_token, error, internal, set_cookie};
use crate::routes::AppState;
use crate::stats::{bad, json_ok, reading};

/// The body of a JSON POST as an object, or the 400/415 to answer.
pub(crate) fn json_object(headers: &HeaderMap, body: &[u8]) -> Result<Map<String, Json>, Response> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !content_type.to_ascii_lowercase().starts_with("application/json") {
        return Err(error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send the body as application/json"));
    }
    match serde_json::from_slice::<Json>(body) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(_) => Err(bad("the body must be a JSON object")),
        Err(e) => Err(bad(format!("the body is not JSON: {e}"))),
    }
}

/// A required string field.
pub(crate) fn field<'a>(map: &'a Map<String, Json>, name: &str) -> Result<&'a str, Response> {
    match map.get(name) {
        Some(Json::String(s)) => Ok(s),
        Some(_) => Err(bad(format!("`{name}` must be a string"))),
        None => Err(bad(format!("`{name}` is required"))),
    }
}

/// An optional string field (absent, `null` and `""` are `None`).
pub(crate) fn optional_field<'a>(map: &'a Map<String, Json>, name: &str) -> Result<Option<&'a str>, Response> {
    match map.get(name) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) if s.is_empty() => Ok(None),
        Some(Json::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(format!("`{name}` must be a string"))),
    }
}

fn accounts_error(e: AccountsError) -> Response {
    match e {
        e @ (AccountsError::InvalidEmail(_) | AccountsError::InvalidPassword) => bad(e.to_string()),
        e @ AccountsError::EmailTaken(_) => error(StatusCode::CONFLICT, e.to_string()),
        e => internal(e),
    }
}

fn signed_in(headers: &HeaderMap, token: &str, email: &str) -> Response {
    let cookie = set_cookie(headers, SESSION_COOKIE, Some(token), LOGIN_LIFETIME.as_secs());
    (
        [(header::SET_COOKIE, cookie), (header::CONTENT_TYPE, "application/json".to_owned())],
        json!({ "signed_in": true, "email": email, "csrf": csrf_token(token) }).to_string(),
    )
        .into_response()
}

/// `GET /api/auth`.
pub async fn state(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let r = match reading(&state) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let user = match auth::cookie(&headers, SESSION_COOKIE) {
        Some(token) => match r.accounts.session(token).await {
            Ok(user) => user.map(|u| (u, csrf_token(token))),
            Err(e) => return internal(e),
        },
        None => None,
    };
    let setup_required = match r.accounts.has_users().await {
        Ok(has) => !has,
        Err(e) => return internal(e),
    };
    match user {
        Some((u, csrf)) => {
            json_ok(json!({ "signed_in": true, "email": u.email, "csrf": csrf, "setup_required": false }))
        }
        None => json_ok(json!({ "signed_in": false, "setup_required": setup_required })),
    }
}

/// `POST /api/login`.
pub async fn login(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let r = match reading(&state) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let map = match json_object(&headers, &body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let (email, password) = match (field(&map, "email"), field(&map, "password")) {
        (Ok(e), Ok(p)) => (e, p),
        (Err(resp), _) | (_, Err(resp)) => return resp,
    };
    match r.accounts.login(email, password).await {
        Ok(Some((token, user))) => {
            tracing::info!(email = %user.email, "signed in");
            signed_in(&headers, &token, &user.email)
        }
        Ok(None) => {
            tracing::warn!("a sign-in failed");
            error(StatusCode::UNAUTHORIZED, "wrong e-mail or password")
        }
        Err(e) => accounts_error(e),
    }
}

/// `POST /api/logout`.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let r = match reading(&state) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    if let Some(token) = auth::cookie(&headers, SESSION_COOKIE) {
        let sent = headers.get(auth::CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if sent != csrf_token(token) {
            return error(StatusCode::FORBIDDEN, "missing or wrong X-Tally-CSRF header");
        }
        if let Err(e) = r.accounts.logout(token).await {
            return internal(e);
        }
    }
    let cookie = set_cookie(&headers, SESSION_COOKIE, None, 0);
    ([(header::SET_COOKIE, cookie), (header::CONTENT_TYPE, "application/json".to_owned())], r#"{"signed_in":false}"#)
        .into_response()
}

/// `POST /api/setup`.
pub async fn setup(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let r = match reading(&state) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let map = match json_object(&headers, &body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let (token, email, password) = match (field(&map, "token"), field(&map, "email"), field(&map, "password")) {
        (Ok(t), Ok(e), Ok(p)) => (t, e, p),
        (Err(resp), _, _) | (_, Err(resp), _) | (_, _, Err(resp)) => return resp,
    };
    let expected = r.setup_token.as_deref().unwrap_or_default();
    if expected.is_empty() || !constant_time_eq(token.as_bytes(), expected.as_bytes()) {
        return error(StatusCode::FORBIDDEN, "this setup link is not valid; use the one `tally serve` printed");
    }
    match r.accounts.has_users().await {
        Ok(true) => return error(StatusCode::CONFLICT, "an account exists already; sign in instead"),
        Ok(false) => {}
        Err(e) => return internal(e),
    }
    if let Err(e) = r.accounts.add_user(email, password).await {
        return accounts_error(e);
    }
    match r.accounts.login(email, password).await {
        Ok(Some((token, user))) => {
            tracing::info!(email = %user.email, "first account created");
            signed_in(&headers, &token, &user.email)
        }
        Ok(None) => internal("a new account could not sign in"),
        Err(e) => accounts_error(e),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `GET /api/share/{token}`.
pub async fn share(State(state): State<AppState>, headers: HeaderMap, Path(token): Path<String>) -> Response {
    let r = match reading(&state) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let share = match r.accounts.share(&token).await {
        Ok(Some(s)) => s,
        Ok(None) => return error(StatusCode::NOT_FOUND, "this shared link does not exist or was revoked"),
        Err(e) => return internal(e),
    };
    let site = match r.sites.get(&share.site_id).await {
        Ok(Some(s)) => s,
        Ok(None) => return error(StatusCode::NOT_FOUND, "this shared link does not exist or was revoked"),
        Err(e) => return internal(e),
    };
    let unlocked = !share.has_password
        || match auth::cookie(&headers, SHARE_COOKIE) {
            Some(grant) => r.accounts.share_unlocked(grant, &share.share_id).await.unwrap_or(false),
            None => false,
        };
    json_ok(json!({
        "site_id": site.site_id,
        "domain": site.domain,
        "timezone": site.zone.name(),
        "name": share.name,
        "password_required": share.has_password,
        "unlocked": unlocked,
    }))
}

/// `POST /api/share/{token}/unlock`.
pub async fn unlock(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Bytes,
) -> Response {
    let r = match reading(&state) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let map = match json_object(&headers, &body) {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let password = match field(&map, "password") {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    match r.accounts.unlock_share(&token, password).await {
        Ok(Some(grant)) => {
            let cookie = set_cookie(&headers, SHARE_COOKIE, Some(&grant), SHARE_UNLOCK_LIFETIME.as_secs());
            (
                [(header::SET_COOKIE, cookie), (header::CONTENT_TYPE, "application/json".to_owned())],
                r#"{"unlocked":true}"#,
            )
                .into_response()
        }
        Ok(None) => error(StatusCode::UNAUTHORIZED, "wrong password"),
        Err(e) => accounts_error(e),
    }
}
