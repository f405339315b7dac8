//! What handlers read from a request besides their state: the peer's address ([`Peer`]), a
//! query string ([`UrlQuery`]), a JSON object body read into its wire type, the checks of its
//! string and flag fields, and the body limit.

use std::net::SocketAddr;

use axum::Extension;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use crate::error::ServerError;
use crate::wire::sent::{Object, Sent};

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

/// The body of a JSON POST read as `T` (a body of [`Sent`] fields, which always reads), or the
/// 400/415 to answer when it is not a JSON object.
pub(crate) fn json_body<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, ServerError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !content_type.to_ascii_lowercase().starts_with("application/json") {
        return Err(ServerError::UnsupportedMediaType);
    }
    object_body(body)
}

/// `body` read as `T`, or the 400 saying it is not a JSON object.
pub(crate) fn object_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ServerError> {
    match serde_json::from_slice::<Sent<Object<T>>>(body) {
        Ok(Sent::Value(Object(body))) => Ok(body),
        Ok(_) => Err(ServerError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ServerError::bad_request(format!("the body is not JSON: {e}"))),
    }
}

/// The checks of a string field, with the messages every JSON route gives.
impl Sent<String> {
    /// A required string.
    pub(crate) fn required(&self, name: &str) -> Result<&str, ServerError> {
        match self {
            Sent::Value(s) => Ok(s),
            Sent::Absent => Err(ServerError::bad_request(format!("`{name}` is required"))),
            Sent::Null | Sent::Wrong(_) => Err(ServerError::bad_request(format!("`{name}` must be a string"))),
        }
    }

    /// An optional string: absent, `null` and `""` are `None`.
    pub(crate) fn optional(&self, name: &str) -> Result<Option<&str>, ServerError> {
        let text = self.checked(|_| ServerError::bad_request(format!("`{name}` must be a string")))?;
        Ok(text.map(String::as_str).filter(|s| !s.is_empty()))
    }
}

/// The check of an optional flag: absent and `null` are `None`; `message` refuses anything but
/// `true` and `false`.
impl Sent<bool> {
    pub(crate) fn flag(&self, message: &'static str) -> Result<Option<bool>, ServerError> {
        self.checked(|_| ServerError::bad_request(message)).map(Option::<&bool>::copied)
    }
}
