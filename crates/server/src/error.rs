//! The server's one error type: every failed request ends here and is answered from here.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::wire::WireError;
use analytics::event::EventError;

/// Why a request failed. Client errors answer with a JSON body saying what is wrong; internal
/// errors are logged once, here, and answered with a generic 500.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The body could not be read as the wire format.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The event failed validation.
    #[error(transparent)]
    Event(#[from] EventError),
    /// A client error with its own message.
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
    },
    /// The body is larger than the limit.
    #[error("body is larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// Something failed on Tally's side.
    #[error("internal error: {0}")]
    Internal(Box<dyn std::error::Error + Send + Sync>),
}

impl ServerError {
    /// The status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ServerError::Wire(_) | ServerError::Event(_) | ServerError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ServerError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ServerError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The request field at fault, when one is.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ServerError::Wire(e) => Some(e.field()),
            ServerError::Event(e) => Some(e.field()),
            ServerError::PayloadTooLarge { .. } => Some("body"),
            ServerError::BadRequest { .. } | ServerError::Internal(_) => None,
        }
    }
}

impl ServerError {
    /// The JSON body this error is answered with.
    pub fn body(&self) -> serde_json::Value {
        match self {
            ServerError::Internal(_) => serde_json::json!({ "error": "internal server error" }),
            client => match client.field() {
                Some(field) => serde_json::json!({ "error": client.to_string(), "field": field }),
                None => serde_json::json!({ "error": client.to_string() }),
            },
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let status = self.status();
        if let ServerError::Internal(source) = &self {
            tracing::error!(error = %source, "request failed");
        }
        let body = self.body();
        (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
    }
}
