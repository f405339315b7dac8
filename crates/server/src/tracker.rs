//! Tally's own tracker, `GET /js/script.js` (also `/js/tally.js`): a hand-written script embedded
//! in the binary, served with an ETag so browsers revalidate it cheaply. It posts Plausible-shaped
//! `text/plain` bodies to `/api/event`, so it needs no CORS preflight; see the script's header for
//! its options.

use std::sync::OnceLock;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The script as served.
pub const SCRIPT: &str = include_str!("../assets/script.js");

/// A strong ETag of the script: FNV-1a of its bytes, computed once.
fn etag() -> &'static str {
    static ETAG: OnceLock<String> = OnceLock::new();
    ETAG.get_or_init(|| {
        let h = SCRIPT.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        format!("\"{h:016x}\"")
    })
}

/// `GET /js/script.js`: the script, or `304` when the browser's copy is current.
pub async fn script(headers: HeaderMap) -> Response {
    let tag = etag();
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let common = [
        (header::ETAG, HeaderValue::from_static(tag)),
        (header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600, must-revalidate")),
        (header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*")),
    ];
    if fresh {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    let mut response = (common, SCRIPT).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/javascript; charset=utf-8"));
    response
}
