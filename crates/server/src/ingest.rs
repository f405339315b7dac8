//! The ingestion routes: Plausible's `POST /api/event`, Umami's `POST /api/send` and
//! `POST /api/batch`, with CORS for any origin. Each reads its body with the wire format
//! ([`crate::wire`]) into a [`RawEvent`](analytics::event::RawEvent), hands it to the state's
//! [`Ingest`], and answers as the tracker expects from the [`IngestResult`].

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use analytics::event::RequestHeaders;
use analytics::pipeline::{IngestResult, SiteSelector};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::ServerError;
use crate::extract::{MAX_BODY_BYTES, Peer};
use crate::state::AppState;
pub use crate::state::Ingest;
use crate::wire::sent::Sent;
use crate::wire::umami::{BatchAnswer, BatchRefusal, SendAnswer, SendKind};
use crate::wire::{RequestMeta, json_ok, plausible, umami};

/// Trackers post from any site's pages, without credentials, so any origin may.
pub(crate) async fn allow_any_origin(mut response: Response) -> Response {
    response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    response
}

/// Answers a CORS preflight. Plausible's tracker sends `text/plain` and needs none; Umami's
/// sends `application/json` with `x-umami-cache`, `x-umami-website-id` and `x-umami-hostname`, and
/// any client posting JSON needs one. The headers asked for are allowed: nothing here reads
/// credentials.
pub(crate) async fn preflight(headers: HeaderMap) -> Response {
    let allow_headers = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned().unwrap_or_else(|| {
        HeaderValue::from_static("content-type, x-umami-cache, x-umami-website-id, x-umami-hostname")
    });
    (
        StatusCode::NO_CONTENT,
        [
            (header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("POST, OPTIONS")),
            (header::ACCESS_CONTROL_ALLOW_HEADERS, allow_headers),
            (header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400")),
        ],
    )
        .into_response()
}

/// Reads the request's metadata. Cookies and credentials are never passed on.
fn request_meta(headers: &HeaderMap, peer: Option<SocketAddr>) -> RequestMeta {
    let mut kept = RequestHeaders::new();
    for (name, value) in headers {
        if name == header::COOKIE || name == header::AUTHORIZATION {
            continue;
        }
        if let Ok(value) = value.to_str() {
            kept.push(name.as_str(), value);
        }
    }
    let received_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let mut meta = RequestMeta {
        user_agent: headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned(),
        headers: kept,
        received_ms,
        ..RequestMeta::default()
    };
    if let Some(peer) = peer {
        meta.peer_ip = peer.ip();
    }
    meta
}

fn body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ServerError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServerError::PayloadTooLarge { limit: MAX_BODY_BYTES }
        } else {
            ServerError::BadRequest { message: format!("could not read the body: {rejection}") }
        }
    })
}

/// `POST /api/event`: `202 ok` for stored and dropped events alike, as Plausible answers, so a
/// bot learns nothing from the answer.
pub(crate) async fn plausible_event(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let bytes = body(bytes)?;
    let meta = request_meta(&headers, peer.map(|Extension(ConnectInfo(addr))| addr));
    let raw = plausible::parse(&bytes, meta)?;
    match state.ingest.ingest(raw, SiteSelector::Domain).await {
        IngestResult::Accepted | IngestResult::Dropped(_) | IngestResult::UnknownSite => {
            Ok((StatusCode::ACCEPTED, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "ok").into_response())
        }
        IngestResult::Invalid(error) => Err(error.into()),
        IngestResult::Failed(error) => Err(ServerError::Internal(Box::new(error))),
        _ => Err(ServerError::Internal("unexpected pipeline outcome".into())),
    }
}

/// `POST /api/send`: Umami's answers — `{"cache": token}` when taken, `{"beep":"boop"}` for a
/// dropped event, 400 `Website not found.` for an unknown website.
///
/// The cache token is opaque to the tracker, which sends it back in `x-umami-cache`. Umami's
/// carries a session id; Tally's carries only the website id, because Tally keeps no visitor
/// identifiers on the client, and Tally does not read it back.
pub(crate) async fn umami_send(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let bytes = body(bytes)?;
    let meta = request_meta(&headers, peer.map(|Extension(ConnectInfo(addr))| addr));
    let answer = umami_one(&state, umami::parse(&bytes, meta)?).await?;
    Ok(json_ok(answer))
}

/// One `/api/send` body that was read: its answer, or the error `/api/send` answers with.
async fn umami_one(state: &AppState, send: umami::Send) -> Result<SendAnswer, ServerError> {
    let taken = SendAnswer::taken(&send.website);
    let SendKind::Event(raw) = send.kind else {
        return Ok(taken);
    };
    match state.ingest.ingest(*raw, SiteSelector::UmamiWebsite(send.website)).await {
        IngestResult::Accepted => Ok(taken),
        IngestResult::Dropped(_) => Ok(SendAnswer::dropped()),
        IngestResult::UnknownSite => Err(ServerError::BadRequest { message: "Website not found.".into() }),
        IngestResult::Invalid(error) => Err(error.into()),
        IngestResult::Failed(error) => Err(ServerError::Internal(Box::new(error))),
        _ => Err(ServerError::Internal("unexpected pipeline outcome".into())),
    }
}

/// Largest `/api/batch` body accepted.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Most `/api/send` bodies in one `/api/batch`.
pub const MAX_BATCH_ITEMS: usize = 1000;

/// `POST /api/batch`: a JSON array of `/api/send` bodies, each taken in order as `/api/send`
/// takes it. Answers as Umami does: `{size, processed, errors, details: [{index, response}]}`,
/// where `response` is the error body `/api/send` would have given. Dropped events count as
/// processed, as `/api/send` answers them with 200 too. A body that is not an array, or holds
/// more than [`MAX_BATCH_ITEMS`], is refused whole and nothing is taken.
pub(crate) async fn umami_batch(
    State(state): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let bytes = bytes.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServerError::PayloadTooLarge { limit: MAX_BATCH_BYTES }
        } else {
            ServerError::BadRequest { message: format!("could not read the body: {rejection}") }
        }
    })?;
    let not_an_array =
        |found| crate::wire::WireError::WrongType { field: "body", expected: "an array of /api/send bodies", found };
    let items = match serde_json::from_slice::<Sent<umami::Batch>>(&bytes) {
        Ok(Sent::Value(items)) => items,
        Ok(Sent::Wrong(w)) => return Err(not_an_array(w.found).into()),
        Ok(Sent::Absent | Sent::Null) => return Err(not_an_array("null").into()),
        Err(e) => return Err(crate::wire::WireError::Json(e.to_string()).into()),
    };
    if items.len() > MAX_BATCH_ITEMS {
        return Err(ServerError::BadRequest {
            message: format!("a batch holds at most {MAX_BATCH_ITEMS} events, not {}", items.len()),
        });
    }
    let meta = request_meta(&headers, peer.map(|Extension(ConnectInfo(addr))| addr));
    let mut details = Vec::new();
    let size = items.len();
    for (index, item) in items.into_iter().enumerate() {
        let answer = match umami::parse_item(item, meta.clone()) {
            Ok(send) => umami_one(&state, send).await,
            Err(refused) => Err(refused.into()),
        };
        if let Err(error) = answer {
            if matches!(error, ServerError::Internal(_)) {
                return Err(error);
            }
            details.push(BatchRefusal { index, response: error.body() });
        }
    }
    Ok(json_ok(BatchAnswer::new(size, details)))
}
