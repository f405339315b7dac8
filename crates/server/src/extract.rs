//! What handlers read from a request besides their state: the peer's address ([`Peer`]), a
//! query string ([`UrlQuery`]), a JSON object body and its string fields, and the body limit.

use std::net::SocketAddr;

use axum::Extension;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, header};
use serde_json::{Map, Value as Json};

use crate::error::ServerError;

/// Largest request body accepted, as the spec sets it.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The peer's address, when the server was started with it (see [`crate::listen`]).
pub(crate) type Peer = Option<Extension<ConnectInfo<SocketAddr>>>;

/// `axum`'s `Query`, answering a query string that does not read (`limit=many`) with a JSON
/// `400` like every other client error here, rather than axum's plain-text one.
pub struct UrlQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for UrlQuery<T> {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ServerError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(UrlQuery(value)),
            Err(rejection) => Err(ServerError::bad_request(rejection.body_text())),
        }
    }
}

/// The body of a JSON POST as an object, or the 400/415 to answer.
pub(crate) fn json_object(headers: &HeaderMap, body: &[u8]) -> Result<Map<String, Json>, ServerError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !content_type.to_ascii_lowercase().starts_with("application/json") {
        return Err(ServerError::UnsupportedMediaType);
    }
    match serde_json::from_slice::<Json>(body) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(_) => Err(ServerError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ServerError::bad_request(format!("the body is not JSON: {e}"))),
    }
}

/// A required string field.
pub(crate) fn field<'a>(map: &'a Map<String, Json>, name: &str) -> Result<&'a str, ServerError> {
    match map.get(name) {
        Some(Json::String(s)) => Ok(s),
        Some(_) => Err(ServerError::bad_request(format!("`{name}` must be a string"))),
        None => Err(ServerError::bad_request(format!("`{name}` is required"))),
    }
}

/// An optional string field (absent, `null` and `""` are `None`).
pub(crate) fn optional_field<'a>(map: &'a Map<String, Json>, name: &str) -> Result<Option<&'a str>, ServerError> {
    match map.get(name) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) if s.is_empty() => Ok(None),
        Some(Json::String(s)) => Ok(Some(s)),
        Some(_) => Err(ServerError::bad_request(format!("`{name}` must be a string"))),
    }
}
