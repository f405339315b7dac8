//! The error type of the typed operations.

use store::{CancellationCode, StoreError};

use crate::key::KeyError;

/// Why a typed operation failed.
///
/// Model errors (a missing attribute, a wrong type, an unknown entity) are found before any
/// request is sent; storage errors are passed through in [`Error::Store`]. Use the
/// predicates rather than matching, since variants may be added.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage engine failed or refused the request.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The schema has no entity of this name.
    #[error("unknown entity `{0}`")]
    UnknownEntity(String),
    /// The entity has no key on this index, or the index does not exist.
    #[error("entity `{entity}` has no key on index `{index}`")]
    UnknownIndex {
        /// The entity.
        entity: String,
        /// The index.
        index: String,
    },
    /// A required attribute is missing.
    #[error("{entity}: required attribute `{attribute}` is missing")]
    MissingAttribute {
        /// The entity.
        entity: String,
        /// The attribute.
        attribute: String,
    },
    /// A field needed to compute a key is missing.
    #[error("{entity}: field `{field}` is needed for the key on `{index}`")]
    MissingKeyField {
        /// The entity.
        entity: String,
        /// The index.
        index: String,
        /// The field.
        field: String,
    },
    /// An attribute has the wrong type.
    #[error("{entity}: attribute `{attribute}` must be {expected}, not {found}")]
    WrongType {
        /// The entity.
        entity: String,
        /// The attribute.
        attribute: String,
        /// Its declared type.
        expected: &'static str,
        /// The type given.
        found: &'static str,
    },
    /// An attribute is not declared (and the entity is not open).
    #[error("{entity}: attribute `{attribute}` is not declared")]
    UndeclaredAttribute {
        /// The entity.
        entity: String,
        /// The attribute.
        attribute: String,
    },
    /// The caller tried to write a key attribute or the entity-type attribute, which the
    /// model layer computes.
    #[error("{entity}: attribute `{attribute}` is computed by the model and cannot be written")]
    ReservedAttribute {
        /// The entity.
        entity: String,
        /// The attribute.
        attribute: String,
    },
    /// A key could not be rendered.
    #[error("{entity}: {source}")]
    Key {
        /// The entity.
        entity: String,
        /// The key error.
        source: KeyError,
    },
    /// An update cannot be applied as asked.
    #[error("{entity}: {reason}")]
    InvalidUpdate {
        /// The entity.
        entity: String,
        /// Why.
        reason: String,
    },
    /// `create` found an item with the same key.
    #[error("{entity}: an item with this key already exists")]
    AlreadyExists {
        /// The entity.
        entity: String,
    },
    /// `replace`, `update` or a conditional delete found no item with this key.
    #[error("{entity}: no item with this key exists")]
    NotFound {
        /// The entity.
        entity: String,
    },
    /// An item read back does not decode as the expected entity or field type.
    #[error("cannot decode {what}: {reason}")]
    Decode {
        /// What was being decoded (`Order.total`).
        what: String,
        /// Why.
        reason: String,
    },
    /// A transaction was cancelled; the items that caused it, with their reasons.
    #[error("transaction cancelled: {}", failures_list(.failures))]
    TransactionCanceled {
        /// One entry per item that caused the cancellation, in request order.
        failures: Vec<ItemFailure>,
    },
    /// Too many items for one request of this kind.
    #[error("{operation}: {count} items, at most {max} allowed")]
    TooManyItems {
        /// The operation.
        operation: &'static str,
        /// Items given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A batch kept returning unprocessed items after every retry.
    #[error("{operation}: {remaining} items still unprocessed after {attempts} attempts")]
    Unprocessed {
        /// The operation.
        operation: &'static str,
        /// Items not done.
        remaining: usize,
        /// Attempts made.
        attempts: u32,
    },
    /// A query or scan cannot be built as asked.
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// The same key appears twice in one batch or transaction, which DynamoDB rejects.
    #[error("{operation}: the same key appears twice")]
    DuplicateKey {
        /// The operation.
        operation: &'static str,
    },
}

/// Why one item of a transaction cancelled it.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemFailure {
    /// The item's position in the request.
    pub index: usize,
    /// The entity the item was written as, so the error names what the caller wrote.
    pub entity: String,
    /// DynamoDB's reason code.
    pub code: CancellationCode,
    /// The message, when there is one.
    pub message: Option<String>,
}

fn failures_list(failures: &[ItemFailure]) -> String {
    failures.iter().map(|f| format!("#{} {} {}", f.index, f.entity, f.code.as_str())).collect::<Vec<_>>().join(", ")
}

impl Error {
    /// Whether a condition failed: a conditional write, `create` on an existing item, or
    /// `replace`/`update` on a missing one.
    pub fn is_condition_failed(&self) -> bool {
        match self {
            Error::AlreadyExists { .. } | Error::NotFound { .. } => true,
            Error::Store(e) => e.is_condition_failed(),
            _ => false,
        }
    }

    /// Whether `create` found the item already there.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::AlreadyExists { .. })
    }

    /// Whether the item (or the table) was not found.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::NotFound { .. } => true,
            Error::Store(e) => e.is_not_found(),
            _ => false,
        }
    }

    /// Whether a transaction was cancelled.
    pub fn is_transaction_canceled(&self) -> bool {
        match self {
            Error::TransactionCanceled { .. } => true,
            Error::Store(e) => e.is_transaction_canceled(),
            _ => false,
        }
    }

    /// Whether the input was invalid: caught by the model before sending, or refused by
    /// the store as a validation error.
    pub fn is_validation(&self) -> bool {
        match self {
            Error::Store(e) => e.is_validation(),
            Error::MissingAttribute { .. }
            | Error::MissingKeyField { .. }
            | Error::WrongType { .. }
            | Error::UndeclaredAttribute { .. }
            | Error::ReservedAttribute { .. }
            | Error::Key { .. }
            | Error::InvalidUpdate { .. }
            | Error::UnknownEntity(_)
            | Error::UnknownIndex { .. }
            | Error::TooManyItems { .. }
            | Error::InvalidQuery(_)
            | Error::DuplicateKey { .. } => true,
            _ => false,
        }
    }

    /// Whether retrying the same operation may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Store(e) => e.is_retryable(),
            Error::Unprocessed { .. } => true,
            _ => false,
        }
    }

    /// The per-item failures of a cancelled transaction.
    pub fn transaction_failures(&self) -> Option<&[ItemFailure]> {
        match self {
            Error::TransactionCanceled { failures } => Some(failures),
            _ => None,
        }
    }

    /// The storage error, if this is one.
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}

/// Result of a typed operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
