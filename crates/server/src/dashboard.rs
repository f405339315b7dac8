//! The dashboard: one HTML page, a script and a stylesheet, embedded in the binary and served by
//! `tally serve` — no separate front-end server and no build step. The page routes itself on the
//! browser's path: `/` (the dashboard), `/login`, `/setup`, `/settings` and `/share/{token}`. It
//! reads only the public API, so anything it shows a script with a key can get too.
//!
//! Assets are served with a strong ETag (so browsers revalidate cheaply) and the page with a
//! Content-Security-Policy that allows only this origin's script and style, and no framing
//! (`frame-ancestors 'none'` and `X-Frame-Options: DENY`) — except a shared link its owner made
//! embeddable, which any site may frame (`frame-ancestors *`, no `X-Frame-Options`); the page
//! then takes `?embed=true` (no header) and `&theme=light|dark`.

use std::sync::OnceLock;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

/// The page.
pub const INDEX: &str = include_str!("../assets/dashboard/index.html");
/// The page's script.
pub const APP_JS: &str = include_str!("../assets/dashboard/app.js");
/// The page's stylesheet.
pub const APP_CSS: &str = include_str!("../assets/dashboard/app.css");
/// The world map's country outlines (`cargo xtask world-map` writes it from Natural Earth's data).
pub const WORLD_JS: &str = include_str!("../assets/dashboard/world.js");

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The policy of a shared link its owner let other sites frame.
const CSP_EMBEDDABLE: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' \
                              data:; connect-src 'self'; frame-ancestors *; base-uri 'none'; form-action 'self'";

/// The dashboard's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(page))
        .route("/login", get(page))
        .route("/setup", get(page))
        .route("/settings", get(page))
        .route("/share/{token}", get(share_page))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route(
            "/assets/app.js",
            get(|h: HeaderMap| async move { asset(&h, &APP_JS_ASSET, "application/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/app.css",
            get(|h: HeaderMap| async move { asset(&h, &APP_CSS_ASSET, "text/css; charset=utf-8") }),
        )
        .route(
            "/assets/world.js",
            get(|h: HeaderMap| async move { asset(&h, &WORLD_JS_ASSET, "application/javascript; charset=utf-8") }),
        )
}

async fn page() -> Response {
    page_with(false)
}

/// A shared link's page: framable only when the link is live and its owner made it embeddable.
async fn share_page(
    axum::extract::State(state): axum::extract::State<AppState>,
    axum::extract::Path(token): axum::extract::Path<String>,
) -> Response {
    let embeddable = match state.reading.as_deref() {
        Some(r) => r.accounts.share(&token).await.ok().flatten().is_some_and(|s| s.embed),
        None => false,
    };
    page_with(embeddable)
}

fn page_with(embeddable: bool) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, if embeddable { CSP_EMBEDDABLE } else { CSP }),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "same-origin"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX,
    )
        .into_response();
    if !embeddable {
        response.headers_mut().insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    response
}

/// A static text asset and its ETag, computed once.
pub struct Asset {
    body: &'static str,
    tag: OnceLock<String>,
}

impl Asset {
    /// An asset with `body`.
    pub const fn new(body: &'static str) -> Self {
        Asset { body, tag: OnceLock::new() }
    }

    /// A strong ETag: FNV-1a of the bytes.
    pub fn etag(&self) -> &str {
        self.tag.get_or_init(|| {
            let h = self
                .body
                .bytes()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
            format!("\"{h:016x}\"")
        })
    }

    /// The body.
    pub fn body(&self) -> &'static str {
        self.body
    }
}

static APP_JS_ASSET: Asset = Asset::new(APP_JS);
static APP_CSS_ASSET: Asset = Asset::new(APP_CSS);
static WORLD_JS_ASSET: Asset = Asset::new(WORLD_JS);

/// Answers `asset` as `content_type`, or `304` when the browser's copy (`If-None-Match`) is
/// current. `extra` headers are added to both.
pub fn asset_with(
    headers: &HeaderMap,
    asset: &Asset,
    content_type: &'static str,
    extra: &[(header::HeaderName, &'static str)],
) -> Response {
    let tag = asset.etag();
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let mut response = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { asset.body().into_response() };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600, must-revalidate"));
    for (name, value) in extra {
        h.insert(name.clone(), HeaderValue::from_static(value));
    }
    if !fresh {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}

fn asset(headers: &HeaderMap, asset: &Asset, content_type: &'static str) -> Response {
    asset_with(headers, asset, content_type, &[])
}
