//! Signing in and out, the first-run setup, and opening shared links.
//!
//! - `GET /api/auth`: `{signed_in, email, csrf, setup_required}` for the page to decide what to
//!   show; `csrf` is the token every cookie-signed-in request must send in `X-Tally-CSRF`.
//! - `POST /api/login {email, password}` sets the login cookie; `POST /api/logout` ends it;
//!   `POST /api/logout/everywhere` ends every login of the signed-in account, this one included;
//!   `POST /api/password {current_password, new_password}` changes its password, which ends them
//!   too, and signs this browser in again.
//! - `POST /api/setup {token, email, password}` creates the first account, once, with the token
//!   of the setup link `tally serve` prints while no account exists.
//! - `GET /api/share/{token}`: the site a shared link shows and whether it needs a password;
//!   `POST /api/share/{token}/unlock {password}` sets the cookie that unlocks it.
//!
//! Every POST here takes `application/json` only: a form on another site cannot send that
//! without a CORS preflight, which these routes do not answer, so none can be forged.
//!
//! Sign-in and unlock attempts are limited ([`crate::attempts::Attempts`]): per client address (the address as
//! [`crate::auth::client_addr`] finds it behind trusted proxies; IPv6 by /64) and per account
//! or shared link, each to a burst of N and then N a minute; past it, `429` with `Retry-After`.
//! Every failed or refused attempt is logged as one line a fail2ban filter can match before any
//! text the client chose:
//!
//! ```text
//! WARN server::account: authentication failure; client=203.0.113.7 kind=login account="x@example.com"
//! WARN server::account: authentication throttled; client=203.0.113.7 kind=unlock account="01J…"
//! ```

use std::time::Duration;

use analytics::accounts::{AccountsError, LOGIN_LIFETIME, SHARE_UNLOCK_LIFETIME};
use analytics::two_factor::Login;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::auth::{self, SESSION_COOKIE, SHARE_COOKIE, csrf_token, set_cookie};
use crate::error::ServerError;
use crate::extract::{Peer, json_body};
use crate::state::AppState;
use crate::wire::accounts::{
    AuthView, CodeRequired, Credentials, PasswordChange, SharedSite, TwoFactorSetup, TwoFactorState,
};
use crate::wire::json_ok;
use crate::wire::sent::Sent;

/// What a client sent as the account, made safe for one log line: at most 254 characters,
/// printed with `{:?}` (quoted, control characters escaped) after the address.
fn loggable(account: &str) -> String {
    account.chars().take(254).collect()
}

/// `429` with `Retry-After`.
fn throttled(wait: Duration) -> ServerError {
    ServerError::TooManyRequests { retry_after_secs: wait.as_secs().max(1) }
}

fn signed_in(secure: bool, token: &str, email: &str) -> Response {
    let cookie = set_cookie(secure, SESSION_COOKIE, Some(token), LOGIN_LIFETIME.as_secs());
    (
        [(header::SET_COOKIE, cookie), (header::CONTENT_TYPE, "application/json".to_owned())],
        serde_json::to_string(&AuthView {
            signed_in: true,
            email: Some(email),
            csrf: Some(csrf_token(token)),
            setup_required: None,
        })
        .unwrap_or_default(),
    )
        .into_response()
}

/// `GET /api/auth`.
pub async fn state(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let user = match auth::cookie(&headers, SESSION_COOKIE) {
        Some(token) => r.accounts.session(token).await.map_err(ServerError::backend)?.map(|u| (u, csrf_token(token))),
        None => None,
    };
    let setup_required = !r.accounts.has_users().await.map_err(ServerError::backend)?;
    Ok(match user {
        Some((u, csrf)) => {
            json_ok(AuthView { signed_in: true, email: Some(&u.email), csrf: Some(csrf), setup_required: Some(false) })
        }
        None => json_ok(AuthView { signed_in: false, email: None, csrf: None, setup_required: Some(setup_required) }),
    })
}

/// `POST /api/login`.
pub async fn login(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let body: Credentials = json_body(&headers, &body)?;
    let (email, password) = (body.email.required("email")?, body.password.required("password")?);
    let client = auth::client_addr(&state, &headers, peer);
    if let Err(wait) = state.attempts.check(client, email) {
        tracing::warn!("authentication throttled; client={client} kind=login account={:?}", loggable(email));
        return Err(throttled(wait));
    }
    let code = body.code.optional("code")?;
    match r.accounts.login_with_code(email, password, code).await? {
        Login::SignedIn(token, user) => {
            tracing::info!(email = %user.email, %client, "signed in");
            Ok(signed_in(auth::is_https(&state, &headers, peer), &token, &user.email))
        }
        // The password was right: the page asks for the code (the attempt still counted).
        Login::CodeRequired => Ok((
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_string(&CodeRequired::ANSWER).unwrap_or_default(),
        )
            .into_response()),
        _ => {
            tracing::warn!("authentication failure; client={client} kind=login account={:?}", loggable(email));
            Err(ServerError::WrongCredentials { message: "wrong e-mail, password or code".into() })
        }
    }
}

/// The signed-in account of a request, or the 401.
async fn signed_in_user(
    r: &crate::state::Reading,
    headers: &HeaderMap,
) -> Result<analytics::accounts::User, ServerError> {
    match auth::principal(r, headers).await? {
        auth::Principal::User(user) => Ok(user),
        _ => Err(ServerError::Unauthorized),
    }
}

/// A signed-in account's attempt at a two-factor change: the account, the required string
/// field `name` of the JSON body (which `field` picks) and the client's address, once the
/// attempt is within the limits.
async fn signed_in_attempt<'a>(
    state: &'a AppState,
    peer: Peer,
    headers: &HeaderMap,
    body: &[u8],
    name: &str,
    field: fn(&Credentials) -> &Sent<String>,
) -> Result<(&'a crate::state::Reading, analytics::accounts::User, String, std::net::IpAddr), ServerError> {
    let r = state.reading()?;
    let user = signed_in_user(r, headers).await?;
    let body: Credentials = json_body(headers, body)?;
    let value = field(&body).required(name)?.to_owned();
    let client = auth::client_addr(state, headers, peer);
    state.attempts.check(client, &user.email).map_err(throttled)?;
    Ok((r, user, value, client))
}

/// `POST /api/2fa/setup`: a new secret for the signed-in account's authenticator app, pending
/// until confirmed.
pub async fn two_factor_setup(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let user = signed_in_user(r, &headers).await?;
    let (secret, url) = r.accounts.totp_begin(&user.email).await?;
    Ok(json_ok(TwoFactorSetup { secret: &secret, otpauth_url: &url }))
}

/// `POST /api/2fa/enable` `{code}`: confirms the pending secret; answers the recovery codes, once.
pub async fn two_factor_enable(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, user, code, client) = signed_in_attempt(&state, peer, &headers, &body, "code", |b| &b.code).await?;
    let codes = r.accounts.totp_enable(&user.email, &code).await?;
    tracing::info!(email = %user.email, %client, "two-factor sign-in turned on");
    Ok(json_ok(TwoFactorState { enabled: true, recovery_codes: Some(&codes) }))
}

/// `POST /api/2fa/disable` `{password}`: turns two-factor sign-in off, given the password.
pub async fn two_factor_disable(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ServerError> {
    let (r, user, password, client) =
        signed_in_attempt(&state, peer, &headers, &body, "password", |b| &b.password).await?;
    if !r.accounts.password_matches(&user.email, &password).await? {
        tracing::warn!("authentication failure; client={client} kind=password account={:?}", loggable(&user.email));
        return Err(ServerError::WrongCredentials { message: "the password is wrong".into() });
    }
    r.accounts.totp_disable(&user.email).await?;
    Ok(json_ok(TwoFactorState { enabled: false, recovery_codes: None }))
}

/// `POST /api/logout`.
pub async fn logout(State(state): State<AppState>, peer: Peer, headers: HeaderMap) -> Result<Response, ServerError> {
    let r = state.reading()?;
    if let Some(token) = auth::cookie(&headers, SESSION_COOKIE) {
        let sent = headers.get(auth::CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if sent != csrf_token(token) {
            return Err(ServerError::Unauthorized);
        }
        r.accounts.logout(token).await.map_err(ServerError::backend)?;
    }
    Ok(signed_out(auth::is_https(&state, &headers, peer)))
}

fn signed_out(secure: bool) -> Response {
    let cookie = set_cookie(secure, SESSION_COOKIE, None, 0);
    ([(header::SET_COOKIE, cookie), (header::CONTENT_TYPE, "application/json".to_owned())], r#"{"signed_in":false}"#)
        .into_response()
}

/// `POST /api/logout/everywhere`: ends every login of the signed-in account (cookie and CSRF
/// header), on every browser, this one included.
pub async fn logout_everywhere(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let user = signed_in_user(r, &headers).await?;
    r.accounts.sign_out_everywhere(&user.email).await?;
    tracing::info!(email = %user.email, "signed out everywhere");
    Ok(signed_out(auth::is_https(&state, &headers, peer)))
}

/// `POST /api/password {current_password, new_password}`: changes the signed-in account's
/// password, which ends its logins everywhere, and signs this browser in again (a new cookie and
/// CSRF token). The current password is checked under the same limits as a sign-in.
pub async fn change_password(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let user = signed_in_user(r, &headers).await?;
    let body: PasswordChange = json_body(&headers, &body)?;
    let (current, new) =
        (body.current_password.required("current_password")?, body.new_password.required("new_password")?);
    let client = auth::client_addr(&state, &headers, peer);
    if let Err(wait) = state.attempts.check(client, &user.email) {
        tracing::warn!("authentication throttled; client={client} kind=password account={:?}", loggable(&user.email));
        return Err(throttled(wait));
    }
    if r.accounts.login(&user.email, current).await?.is_none() {
        tracing::warn!("authentication failure; client={client} kind=password account={:?}", loggable(&user.email));
        return Err(ServerError::WrongCredentials { message: "the current password is wrong".into() });
    }
    r.accounts.set_password(&user.email, new).await?;
    tracing::info!(email = %user.email, %client, "password changed; signed out everywhere");
    let Some((token, user)) = r.accounts.login(&user.email, new).await? else {
        return Err(ServerError::backend("an account could not sign in with its new password"));
    };
    Ok(signed_in(auth::is_https(&state, &headers, peer), &token, &user.email))
}

/// `POST /api/setup`.
pub async fn setup(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let body: Credentials = json_body(&headers, &body)?;
    let (token, email, password) =
        (body.token.required("token")?, body.email.required("email")?, body.password.required("password")?);
    let expected = r.setup_token.as_deref().unwrap_or_default();
    if expected.is_empty() || !constant_time_eq(token.as_bytes(), expected.as_bytes()) {
        let client = auth::client_addr(&state, &headers, peer);
        tracing::warn!("authentication failure; client={client} kind=setup account={:?}", loggable(email));
        return Err(ServerError::Forbidden {
            message: "this setup link is not valid; use the one `tally serve` printed".into(),
        });
    }
    r.accounts.add_first_user(email, password).await?;
    let Some((token, user)) = r.accounts.login(email, password).await? else {
        return Err(ServerError::backend("a new account could not sign in"));
    };
    tracing::info!(email = %user.email, "first account created");
    Ok(signed_in(auth::is_https(&state, &headers, peer), &token, &user.email))
}

/// Whether `a` equals `b`, in a time that does not depend on where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The answer to a shared link that does not exist (or no longer shows a site).
fn no_such_link() -> ServerError {
    ServerError::not_found("this shared link does not exist or was revoked")
}

/// `GET /api/share/{token}`.
pub async fn share(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let share = r.accounts.share(&token).await.map_err(ServerError::backend)?.ok_or_else(no_such_link)?;
    let site = r.sites.get(&share.site_id).await.map_err(ServerError::backend)?.ok_or_else(no_such_link)?;
    let unlocked = !share.has_password
        || match auth::cookie(&headers, SHARE_COOKIE) {
            Some(grant) => r.accounts.share_unlocked(grant, &share.share_id).await.unwrap_or(false),
            None => false,
        };
    Ok(json_ok(SharedSite::new(&site, &share, unlocked)))
}

/// `POST /api/share/{token}/unlock`.
pub async fn unlock(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let body: Credentials = json_body(&headers, &body)?;
    let password = body.password.required("password")?;
    let client = auth::client_addr(&state, &headers, peer);
    // The link's account key is a digest of its token, so the limiter never holds a live token.
    let link = format!("share:{}", auth::csrf_token(&token));
    if let Err(wait) = state.attempts.check(client, &link) {
        tracing::warn!("authentication throttled; client={client} kind=unlock account={link:?}");
        return Err(throttled(wait));
    }
    let Some(grant) = r.accounts.unlock_share(&token, password).await? else {
        tracing::warn!("authentication failure; client={client} kind=unlock account={link:?}");
        return Err(ServerError::WrongCredentials { message: "wrong password".into() });
    };
    let secure = auth::is_https(&state, &headers, peer);
    let cookie = set_cookie(secure, SHARE_COOKIE, Some(&grant), SHARE_UNLOCK_LIFETIME.as_secs());
    Ok(([(header::SET_COOKIE, cookie), (header::CONTENT_TYPE, "application/json".to_owned())], r#"{"unlocked":true}"#)
        .into_response())
}

/// The page of an invitation link: a plain form (no script), posted back to the same address.
fn invitation_page(status: StatusCode, message: &str, form: Option<(&str, &str)>) -> Response {
    let escape = |t: &str| t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    let form = form.map_or(String::new(), |(email, token)| {
        format!(
            "<form method=\"post\" action=\"/invite/{}\"><p>Account: <b>{}</b></p>\
             <label>Password (a new one, or this account's if it exists) \
             <input type=\"password\" name=\"password\" minlength=\"10\" required autocomplete=\"new-password\"></label> \
             <button type=\"submit\">Accept</button></form>",
            escape(token),
            escape(email)
        )
    });
    let body = format!(
        "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>Tally invitation</title>\
         <body style=\"font-family:system-ui;max-width:32rem;margin:4rem auto\"><h1>Tally</h1><p>{}</p>{form}</body></html>",
        escape(message)
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// What an invitation page says of an invitation that cannot be used.
const INVITATION_GONE: &str = "This invitation is not valid: used, expired or revoked.";

/// `GET /invite/{token}`: the invitation's form, or why it cannot be used.
pub async fn invitation(State(state): State<AppState>, Path(token): Path<String>) -> Result<Response, ServerError> {
    let r = state.reading()?;
    Ok(match r.accounts.invitation(&token).await.map_err(ServerError::backend)? {
        Some((_, email)) => {
            invitation_page(StatusCode::OK, "You are invited to a site's analytics.", Some((&email, &token)))
        }
        None => invitation_page(StatusCode::NOT_FOUND, INVITATION_GONE, None),
    })
}

/// `POST /invite/{token}` (a form with `password`): accepts the invitation, then sends the
/// browser to sign in. Limited like sign-ins, per address and per invitation.
pub async fn accept_invitation(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Bytes,
) -> Result<Response, ServerError> {
    let r = state.reading()?;
    let password = url::form_urlencoded::parse(&body).find(|(k, _)| k == "password").map(|(_, v)| v.into_owned());
    let Some(password) = password else {
        return Ok(invitation_page(StatusCode::BAD_REQUEST, "The form needs a password.", None));
    };
    let client = auth::client_addr(&state, &headers, peer);
    let limited: String = token.chars().take(64).collect();
    if let Err(wait) = state.attempts.check(client, &limited) {
        tracing::warn!("authentication throttled; client={client} kind=invitation account=\"\"");
        return Err(throttled(wait));
    }
    match r.accounts.accept_invitation(&token, &password).await {
        Ok((user, site)) => {
            tracing::info!(email = %user.email, site = %site, %client, "invitation accepted");
            Ok((StatusCode::SEE_OTHER, [(header::LOCATION, "/login")], "").into_response())
        }
        Err(e @ (AccountsError::InvalidPassword | AccountsError::WrongPassword(_))) => {
            tracing::warn!("authentication failure; client={client} kind=invitation account=\"\"");
            let email = r.accounts.invitation(&token).await.ok().flatten().map(|(_, e)| e).unwrap_or_default();
            Ok(invitation_page(StatusCode::BAD_REQUEST, &e.to_string(), Some((&email, &token))))
        }
        Err(AccountsError::NoSuchInvitation) => Ok(invitation_page(StatusCode::NOT_FOUND, INVITATION_GONE, None)),
        Err(e) => Err(e.into()),
    }
}
