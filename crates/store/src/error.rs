//! Error kinds shared by every engine, named and shaped as DynamoDB's.

use crate::value::Item;

/// Why a storage operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A condition expression evaluated to false (`ConditionalCheckFailedException`).
    #[error("The conditional request failed")]
    ConditionalCheckFailed {
        /// The existing item, when `ReturnValuesOnConditionCheckFailure=ALL_OLD` was asked for.
        item: Option<Item>,
    },
    /// A transaction was cancelled (`TransactionCanceledException`), with one reason per item in request order.
    #[error("Transaction cancelled, please refer cancellation reasons for specific reasons [{}]", reasons_list(.reasons))]
    TransactionCanceled {
        /// One reason per item, `None` code for items that did not cause the cancellation.
        reasons: Vec<CancellationReason>,
    },
    /// The request is invalid (`ValidationException`), with DynamoDB's message.
    #[error("{0}")]
    Validation(String),
    /// An item exceeds 400 KB (a `ValidationException` in DynamoDB).
    #[error("{0}")]
    ItemTooLarge(String),
    /// A key attribute exceeds its size limit (a `ValidationException` in DynamoDB).
    #[error("{0}")]
    KeyTooLarge(String),
    /// The table or index does not exist (`ResourceNotFoundException`).
    #[error("{0}")]
    ResourceNotFound(String),
    /// The table already exists or is busy (`ResourceInUseException`).
    #[error("{0}")]
    ResourceInUse(String),
    /// Throughput or request rate exceeded (`ProvisionedThroughputExceededException`, `ThrottlingException`).
    #[error("{0}")]
    Throttled(String),
    /// Another transaction touched the same item (`TransactionConflictException`).
    #[error("{0}")]
    TransactionConflict(String),
    /// A client request token was reused with different parameters (`IdempotentParameterMismatchException`).
    #[error("{0}")]
    IdempotentParameterMismatch(String),
    /// The endpoint does not implement an operation (an emulator's `UnknownOperationException`),
    /// with a message naming the operation and where it is available. Retrying cannot help.
    #[error("{0}")]
    Unsupported(String),
    /// The endpoint refused the credentials or the permissions (`UnrecognizedClientException`,
    /// `AccessDeniedException`, …), with a message saying what to check. Retrying cannot help.
    #[error("{0}")]
    AccessDenied(String),
    /// The engine failed: I/O, corruption, a lost connection. Retrying may help.
    #[error("internal error: {0}")]
    Internal(String),
}

fn reasons_list(reasons: &[CancellationReason]) -> String {
    reasons.iter().map(|r| r.code.as_str()).collect::<Vec<_>>().join(", ")
}

impl StoreError {
    /// A validation error with `message`.
    pub fn validation(message: impl Into<String>) -> Self {
        StoreError::Validation(message.into())
    }

    /// Whether a condition check failed.
    pub fn is_condition_failed(&self) -> bool {
        matches!(self, StoreError::ConditionalCheckFailed { .. })
    }

    /// Whether a transaction was cancelled.
    pub fn is_transaction_canceled(&self) -> bool {
        matches!(self, StoreError::TransactionCanceled { .. })
    }

    /// Whether the request was invalid (including size limits).
    pub fn is_validation(&self) -> bool {
        matches!(self, StoreError::Validation(_) | StoreError::ItemTooLarge(_) | StoreError::KeyTooLarge(_))
    }

    /// Whether the table or index was not found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::ResourceNotFound(_))
    }

    /// Whether the endpoint does not implement the operation.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, StoreError::Unsupported(_))
    }

    /// Whether the endpoint refused the credentials or permissions.
    pub fn is_access_denied(&self) -> bool {
        matches!(self, StoreError::AccessDenied(_))
    }

    /// Whether the request was throttled.
    pub fn is_throttled(&self) -> bool {
        matches!(self, StoreError::Throttled(_))
    }

    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Throttled(_) | StoreError::TransactionConflict(_) | StoreError::Internal(_))
    }

    /// The cancellation reasons of a cancelled transaction.
    pub fn cancellation_reasons(&self) -> Option<&[CancellationReason]> {
        match self {
            StoreError::TransactionCanceled { reasons } => Some(reasons),
            _ => None,
        }
    }
}

/// Why one item of a transaction did or did not cancel it.
#[derive(Debug, Clone, PartialEq)]
pub struct CancellationReason {
    /// The reason's code.
    pub code: CancellationCode,
    /// A message, when there is one.
    pub message: Option<String>,
    /// The existing item, when asked for on condition failure.
    pub item: Option<Item>,
}

impl CancellationReason {
    /// A reason with no message and no item.
    pub fn new(code: CancellationCode) -> Self {
        CancellationReason { code, message: None, item: None }
    }
}

/// The code of a [`CancellationReason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancellationCode {
    /// This item did not cause the cancellation.
    None,
    /// Its condition failed.
    ConditionalCheckFailed,
    /// It was invalid (for example, an item too large or an arithmetic error).
    ValidationError,
    /// Another transaction is touching it.
    TransactionConflict,
    /// Throughput exceeded.
    ProvisionedThroughputExceeded,
    /// Request rate too high.
    ThrottlingError,
    /// Item collection over 10 GB.
    ItemCollectionSizeLimitExceeded,
}

impl CancellationCode {
    /// DynamoDB's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CancellationCode::None => "None",
            CancellationCode::ConditionalCheckFailed => "ConditionalCheckFailed",
            CancellationCode::ValidationError => "ValidationError",
            CancellationCode::TransactionConflict => "TransactionConflict",
            CancellationCode::ProvisionedThroughputExceeded => "ProvisionedThroughputExceeded",
            CancellationCode::ThrottlingError => "ThrottlingError",
            CancellationCode::ItemCollectionSizeLimitExceeded => "ItemCollectionSizeLimitExceeded",
        }
    }

    /// Parses DynamoDB's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "None" => CancellationCode::None,
            "ConditionalCheckFailed" => CancellationCode::ConditionalCheckFailed,
            "ValidationError" => CancellationCode::ValidationError,
            "TransactionConflict" => CancellationCode::TransactionConflict,
            "ProvisionedThroughputExceeded" => CancellationCode::ProvisionedThroughputExceeded,
            "ThrottlingError" => CancellationCode::ThrottlingError,
            "ItemCollectionSizeLimitExceeded" => CancellationCode::ItemCollectionSizeLimitExceeded,
            _ => return None,
        })
    }
}

/// Result of a storage operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
