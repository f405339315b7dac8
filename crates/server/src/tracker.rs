//! Tally's own tracker, `GET /js/script.js` (also `/js/tally.js`): a hand-written script embedded
//! in the binary, served with an ETag so browsers revalidate it cheaply. It posts Plausible-shaped
//! `text/plain` bodies to `/api/event`, so it needs no CORS preflight. Its options and extensions
//! (tagged events, form submissions, 404 pages, path exclusions, manual page views) are documented
//! in `docs/tracker.md`.
//!
//! The file is written to be read, with comments and indentation; what is served is that file with
//! whole-line comments and leading blanks removed, at compile time (`minify`), which keeps it
//! within the spec's 2 KB gzipped without a JavaScript tool chain in the build. The script is
//! written so that this is safe: no comment shares a line with code, and no string spans lines.

use axum::http::{HeaderMap, header};
use axum::response::Response;

use crate::dashboard::{Asset, asset_with};

/// The script as written.
pub const SOURCE: &str = include_str!("../assets/script.js");

const STRIPPED: ([u8; SOURCE.len()], usize) = minify(SOURCE.as_bytes());

/// The served script's bytes, exactly as many as `minify` kept.
const MINIFIED: [u8; STRIPPED.1] = {
    let mut out = [0u8; STRIPPED.1];
    let mut i = 0;
    while i < out.len() {
        out[i] = STRIPPED.0[i];
        i += 1;
    }
    out
};

/// The script as served: `SOURCE` without its comment lines and indentation.
pub const SCRIPT: &str = match core::str::from_utf8(&MINIFIED) {
    Ok(script) => script,
    Err(_) => panic!("the minified tracker is not UTF-8"),
};

/// `source` with every line's leading blanks removed and without empty lines, lines that start
/// with `//`, and lines that are a whole `/* … */` comment; the other lines are kept whole, each on
/// a line of its own, so automatic semicolon insertion reads them as before.
const fn minify<const N: usize>(source: &[u8]) -> ([u8; N], usize) {
    let mut out = [0u8; N];
    let (mut len, mut i) = (0, 0);
    while i < source.len() {
        let mut start = i;
        while start < source.len() && (source[start] == b' ' || source[start] == b'\t') {
            start += 1;
        }
        let mut end = start;
        while end < source.len() && source[end] != b'\n' {
            end += 1;
        }
        let line = source.split_at(end).0.split_at(start).1;
        let comment = (line.len() >= 2 && line[0] == b'/' && line[1] == b'/')
            || (line.len() >= 4
                && line[0] == b'/'
                && line[1] == b'*'
                && line[line.len() - 2] == b'*'
                && line[line.len() - 1] == b'/');
        if !line.is_empty() && !comment {
            let mut j = 0;
            while j < line.len() {
                out[len] = line[j];
                len += 1;
                j += 1;
            }
            out[len] = b'\n';
            len += 1;
        }
        i = end + 1;
    }
    (out, len)
}

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
