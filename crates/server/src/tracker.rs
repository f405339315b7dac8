//! Tally's own tracker, `GET /js/script.js` (also `/js/tally.js`): a hand-written script embedded
//! in the binary, served with an ETag so browsers revalidate it cheaply. It posts Plausible-shaped
//! `text/plain` bodies to `/api/event`, so it needs no CORS preflight; see the script's header for
//! its options.

use axum::http::{HeaderMap, header};
use axum::response::Response;

use crate::dashboard::{Asset, asset_with};

/// The script as served.
pub const SCRIPT: &str = include_str!("../assets/script.js");

static SCRIPT_ASSET: Asset = Asset::new(SCRIPT);

/// `GET /js/script.js`: the script, or `304` when the browser's copy is current.
pub async fn script(headers: HeaderMap) -> Response {
    asset_with(
        &headers,
        &SCRIPT_ASSET,
        "application/javascript; charset=utf-8",
        &[(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")],
    )
}
