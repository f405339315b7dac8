//! The server's one error type: every failed request ends here and is answered from here.
//!
//! Every handler returns `Result<impl IntoResponse, ServerError>`; the statuses and bodies below
//! are the server's whole vocabulary of refusals. Client errors answer `{"error": …}` (with the
//! `field` at fault on the ingestion routes); internal errors are logged once, here, and
//! answered with a generic 500.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::wire::{ErrorBody, WireError};
use analytics::accounts::AccountsError;
use analytics::event::EventError;
use analytics::sites::SitesError;
use analytics::stats::StatsError;

/// A source of an internal error.
type Source = Box<dyn std::error::Error + Send + Sync>;

/// Why a request failed.
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
    /// An ingestion body is larger than the limit (answered with `"field": "body"`).
    #[error("body is larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A reading or import body is larger than the limit (answered without a `field`).
    #[error("body is larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The caller's credentials are missing or refused: one answer for every refusal, so a caller
    /// learns nothing about which sites, keys or links exist (see [`crate::auth`]).
    #[error(
        "Invalid API key or site ID. Please make sure you're using a valid API key with access to the site you've requested."
    )]
    Unauthorized,
    /// A password or code the caller gave is wrong (401 with its own message).
    #[error("{message}")]
    WrongCredentials {
        /// What was wrong.
        message: String,
    },
    /// The caller may not do this, and is told why.
    #[error("{message}")]
    Forbidden {
        /// Why not.
        message: String,
    },
    /// What the request names does not exist (or the route is not served).
    #[error("{message}")]
    NotFound {
        /// What was not found.
        message: String,
    },
    /// The request conflicts with what exists (a domain or e-mail taken, setup done).
    #[error("{message}")]
    Conflict {
        /// What conflicts.
        message: String,
    },
    /// A JSON route was sent another content type.
    #[error("send the body as application/json")]
    UnsupportedMediaType,
    /// Too many sign-in or unlock attempts: answered with `Retry-After`.
    #[error("too many attempts; try again in {retry_after_secs} s")]
    TooManyRequests {
        /// How long to wait, in whole seconds (at least 1).
        retry_after_secs: u64,
    },
    /// The server is busy: answered 503 with `Retry-After`.
    #[error("{message}")]
    Unavailable {
        /// What is busy.
        message: String,
        /// How long to wait, in seconds.
        retry_after_secs: u64,
    },
    /// An ingestion route failed on Tally's side: `{"error": "internal server error"}`.
    #[error("internal error: {0}")]
    Internal(Source),
    /// A reading, account or settings route failed on Tally's side (the store, sites or
    /// accounts): `{"error": "internal error"}`.
    #[error("internal error: {0}")]
    Backend(Source),
}

impl ServerError {
    /// A 400 saying `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ServerError::BadRequest { message: message.into() }
    }

    /// A 404 saying `message`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ServerError::NotFound { message: message.into() }
    }

    /// A failure of what a reading, account or settings route called, answered with a 500.
    pub fn backend(source: impl Into<Source>) -> Self {
        ServerError::Backend(source.into())
    }

    /// A failure, given as something displayable, of what a reading, account or settings route
    /// called.
    pub fn backend_display(source: impl std::fmt::Display) -> Self {
        ServerError::Backend(source.to_string().into())
    }

    /// The status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ServerError::Wire(_) | ServerError::Event(_) | ServerError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ServerError::PayloadTooLarge { .. } | ServerError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ServerError::Unauthorized | ServerError::WrongCredentials { .. } => StatusCode::UNAUTHORIZED,
            ServerError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ServerError::NotFound { .. } => StatusCode::NOT_FOUND,
            ServerError::Conflict { .. } => StatusCode::CONFLICT,
            ServerError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ServerError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ServerError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ServerError::Internal(_) | ServerError::Backend(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The request field at fault, when one is.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ServerError::Wire(e) => Some(e.field()),
            ServerError::Event(e) => Some(e.field()),
            ServerError::PayloadTooLarge { .. } => Some("body"),
            _ => None,
        }
    }

    /// The JSON body this error is answered with.
    pub fn body(&self) -> ErrorBody {
        let error = match self {
            ServerError::Internal(_) => "internal server error".to_owned(),
            ServerError::Backend(_) => "internal error".to_owned(),
            client => client.to_string(),
        };
        ErrorBody { error, field: self.field() }
    }

    /// The `Retry-After` this error is answered with, if any.
    fn retry_after(&self) -> Option<u64> {
        match self {
            ServerError::TooManyRequests { retry_after_secs } | ServerError::Unavailable { retry_after_secs, .. } => {
                Some(*retry_after_secs)
            }
            _ => None,
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let status = self.status();
        if let ServerError::Internal(source) | ServerError::Backend(source) = &self {
            tracing::error!(error = %source, "request failed");
        }
        let body = self.body();
        let text = serde_json::to_string(&body).unwrap_or_default();
        let mut response = (status, [(header::CONTENT_TYPE, "application/json")], text).into_response();
        if let Some(secs) = self.retry_after() {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The answers to the sites API's errors: invalid settings 400, a taken domain 409, an unknown
/// site or key 404, the rest 500.
impl From<SitesError> for ServerError {
    fn from(e: SitesError) -> Self {
        match e {
            e @ (SitesError::InvalidDomain(_)
            | SitesError::InvalidTimezone(_)
            | SitesError::InvalidRetention { .. }
            | SitesError::InvalidIpRange(_)
            | SitesError::TooManyIpRanges(_)
            | SitesError::Goal(_)
            | SitesError::InvalidFunnel(_)
            | SitesError::InvalidCurrency(_)) => ServerError::bad_request(e.to_string()),
            e @ SitesError::DomainTaken(_) => ServerError::Conflict { message: e.to_string() },
            e @ (SitesError::NoSuchSite(_) | SitesError::NoSuchKey(_)) => ServerError::not_found(e.to_string()),
            e => ServerError::backend(e),
        }
    }
}

/// The answers to the accounts' errors: invalid input 400, a taken e-mail or a done setup 409,
/// an unknown invitation 404, a wrong password 401, a busy password hasher 503 (`Retry-After: 2`),
/// the rest 500.
impl From<AccountsError> for ServerError {
    fn from(e: AccountsError) -> Self {
        match e {
            e @ (AccountsError::InvalidEmail(_) | AccountsError::InvalidPassword) => {
                ServerError::bad_request(e.to_string())
            }
            e @ (AccountsError::EmailTaken(_) | AccountsError::SetupDone) => {
                ServerError::Conflict { message: e.to_string() }
            }
            e @ (AccountsError::InvalidRole(_) | AccountsError::NoPendingTwoFactor | AccountsError::WrongCode) => {
                ServerError::bad_request(e.to_string())
            }
            e @ AccountsError::NoSuchInvitation => ServerError::not_found(e.to_string()),
            e @ AccountsError::WrongPassword(_) => ServerError::WrongCredentials { message: e.to_string() },
            e @ AccountsError::Busy => ServerError::Unavailable { message: e.to_string(), retry_after_secs: 2 },
            e => ServerError::backend(e),
        }
    }
}

/// The answers to the query engine's errors: a query it refuses 400, the rest 500.
impl From<StatsError> for ServerError {
    fn from(e: StatsError) -> Self {
        match e {
            StatsError::Invalid(_) | StatsError::Unsupported(_) | StatsError::TooSlow(_) => {
                ServerError::bad_request(e.to_string())
            }
            e => ServerError::backend(e),
        }
    }
}
