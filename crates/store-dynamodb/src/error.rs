//! Mapping of the SDK's errors onto the engine-neutral [`StoreError`] kinds.
//!
//! DynamoDB names its errors with a code (`ConditionalCheckFailedException`, …); the mapping goes
//! by that code rather than by the SDK's per-operation enums, so that one table covers every
//! operation and DynamoDB-compatible servers that answer with a code the operation's model does
//! not list (an emulator's `UnknownOperationException`, say) still get a sensible kind.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use store::{CancellationCode, CancellationReason, Item, StoreError};

use crate::convert::item_from_sdk;

/// Maps an SDK error. `special` extracts what only some operations carry (the old item of a
/// failed condition, the reasons of a cancelled transaction) and wins when it returns a kind.
pub(crate) fn map_sdk_error<E>(
    err: SdkError<E, HttpResponse>,
    special: impl FnOnce(&E) -> Option<StoreError>,
) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match err {
        SdkError::ServiceError(ctx) => {
            let e = ctx.err();
            if let Some(kind) = special(e) {
                return kind;
            }
            match e.code() {
                Some(code) if crate::is_unsupported(Some(code)) => unsupported(operation_of::<E>(), code),
                Some(code) => from_code(code, e.message().unwrap_or("")),
                // Not a DynamoDB error document: a proxy's or a crashed server's page.
                None => StoreError::Internal(format!(
                    "DynamoDB answered HTTP {} without an error code",
                    ctx.raw().status().as_u16()
                )),
            }
        }
        SdkError::TimeoutError(_) => StoreError::Internal("DynamoDB did not answer in time (retries exhausted)".into()),
        SdkError::DispatchFailure(_) => {
            StoreError::Internal(format!("could not reach DynamoDB: {}", DisplayErrorContext(&err)))
        }
        // The request could not be built: a value the SDK cannot send, a missing required field.
        SdkError::ConstructionFailure(_) => StoreError::Validation(format!("{}", DisplayErrorContext(&err))),
        other => StoreError::Internal(format!("{}", DisplayErrorContext(&other))),
    }
}

/// The operation an SDK error type belongs to: `TransactWriteItems` for
/// `aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError`. Only for
/// messages: a type name that does not read so gives "an operation".
fn operation_of<E>() -> &'static str {
    let name = std::any::type_name::<E>();
    name.rsplit("::")
        .next()
        .and_then(|last| last.strip_suffix("Error"))
        .filter(|op| !op.is_empty())
        .unwrap_or("an operation")
}

/// An endpoint without `operation` (an emulator answering `UnknownOperationException`): says
/// which operation, and which DynamoDB implementations have it, instead of a bare code.
pub(crate) fn unsupported(operation: &str, code: &str) -> StoreError {
    let transactions = if operation.starts_with("Transact") { " (dynalite, for one, has no transactions)" } else { "" };
    StoreError::Unsupported(format!(
        "the DynamoDB endpoint does not implement {operation} (it answered {code}); Tally needs it: \
         Amazon DynamoDB, DynamoDB Local and moto have it{transactions}. Point --store at one of those."
    ))
}

/// The kind of a DynamoDB error code. Size-limit validation errors are told apart by message,
/// the only place DynamoDB says which limit was hit.
pub(crate) fn from_code(code: &str, message: &str) -> StoreError {
    let message = message.to_string();
    match code {
        "ConditionalCheckFailedException" => StoreError::ConditionalCheckFailed { item: None },
        "TransactionCanceledException" => StoreError::TransactionCanceled { reasons: Vec::new() },
        "ValidationException" | "SerializationException" | "ItemCollectionSizeLimitExceededException" => {
            validation(message)
        }
        "ResourceNotFoundException" => StoreError::ResourceNotFound(message),
        "ResourceInUseException" => StoreError::ResourceInUse(message),
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "RequestLimitExceeded"
        | "LimitExceededException" => StoreError::Throttled(message),
        // A transaction with the same token is still running: retrying later is the remedy.
        "TransactionConflictException" | "TransactionInProgressException" => StoreError::TransactionConflict(message),
        "IdempotentParameterMismatchException" => StoreError::IdempotentParameterMismatch(message),
        "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "MissingAuthenticationTokenException"
        | "IncompleteSignatureException"
        | "ExpiredTokenException"
        | "AccessDeniedException" => StoreError::AccessDenied(format!(
            "DynamoDB refused the request ({code}: {message}); check the AWS credentials (AWS_ACCESS_KEY_ID, \
             AWS_SECRET_ACCESS_KEY, AWS_PROFILE), the region, and that they may use this table"
        )),
        "" => StoreError::Internal(if message.is_empty() { "DynamoDB failed without a code".into() } else { message }),
        other => StoreError::Internal(format!("{other}: {message}")),
    }
}

/// A `ValidationException`, refined to the size-limit kinds when its message names one.
fn validation(message: String) -> StoreError {
    let lower = message.to_ascii_lowercase();
    if lower.contains("item size") && (lower.contains("exceeded") || lower.contains("maximum")) {
        StoreError::ItemTooLarge(message)
    } else if (lower.contains("hashkey") || lower.contains("hash key") || lower.contains("range key"))
        && (lower.contains("size") || lower.contains("exceeded"))
    {
        StoreError::KeyTooLarge(message)
    } else {
        StoreError::Validation(message)
    }
}

/// A failed condition, with the old item when DynamoDB returned it.
pub(crate) fn condition_failed(
    item: Option<&std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>,
) -> StoreError {
    match item.map(item_from_sdk) {
        Some(Ok(item)) => StoreError::ConditionalCheckFailed { item: Some(item) },
        Some(Err(e)) => e,
        None => StoreError::ConditionalCheckFailed { item: None },
    }
}

/// A cancelled transaction, with one reason per item in request order.
pub(crate) fn transaction_canceled(reasons: &[aws_sdk_dynamodb::types::CancellationReason]) -> StoreError {
    let mut out = Vec::with_capacity(reasons.len());
    for r in reasons {
        let code = r.code().unwrap_or("None");
        let item: Option<Item> = match r.item().map(item_from_sdk) {
            Some(Ok(item)) => Some(item),
            Some(Err(e)) => return e,
            None => None,
        };
        let Some(parsed) = CancellationCode::parse(code) else {
            return StoreError::Internal(format!("DynamoDB returned an unknown cancellation code {code:?}"));
        };
        out.push(CancellationReason { code: parsed, message: r.message().map(str::to_string), item });
    }
    StoreError::TransactionCanceled { reasons: out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        assert!(from_code("ConditionalCheckFailedException", "x").is_condition_failed());
        assert!(from_code("ValidationException", "bad").is_validation());
        assert!(matches!(
            from_code("ValidationException", "Item size has exceeded the maximum allowed size"),
            StoreError::ItemTooLarge(_)
        ));
        assert!(matches!(
            from_code(
                "ValidationException",
                "One or more parameter values were invalid: Size of hashkey has exceeded the maximum size limit of 2048 bytes"
            ),
            StoreError::KeyTooLarge(_)
        ));
        assert!(matches!(
            from_code(
                "ValidationException",
                "Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
            ),
            StoreError::KeyTooLarge(_)
        ));
        assert!(from_code("ResourceNotFoundException", "gone").is_not_found());
        assert!(matches!(from_code("ResourceInUseException", ""), StoreError::ResourceInUse(_)));
        for code in ["ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"] {
            assert!(from_code(code, "slow down").is_throttled(), "{code}");
        }
        assert!(matches!(from_code("TransactionConflictException", ""), StoreError::TransactionConflict(_)));
        assert!(matches!(
            from_code("IdempotentParameterMismatchException", ""),
            StoreError::IdempotentParameterMismatch(_)
        ));
        assert!(matches!(from_code("InternalServerError", "boom"), StoreError::Internal(_)));
        let denied = from_code("UnrecognizedClientException", "The security token included in the request is invalid.");
        assert!(denied.is_access_denied() && !denied.is_retryable());
        assert!(denied.to_string().contains("check the AWS credentials"), "{denied}");
        assert!(matches!(from_code("", ""), StoreError::Internal(_)));
    }

    /// Regression: `tally site add` against dynalite printed `internal error:
    /// UnknownOperationException:`, naming neither the operation nor a remedy.
    #[test]
    fn an_unknown_operation_names_itself_and_where_it_exists() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        assert_eq!(operation_of::<TransactWriteItemsError>(), "TransactWriteItems");
        let e = unsupported(operation_of::<TransactWriteItemsError>(), "UnknownOperationException");
        assert!(e.is_unsupported() && !e.is_retryable());
        let text = e.to_string();
        for part in ["TransactWriteItems", "UnknownOperationException", "DynamoDB Local", "moto", "dynalite"] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
        assert!(!text.contains("internal error"), "{text}");
    }

    #[test]
    fn cancellation_reasons_keep_order_codes_and_items() {
        use aws_sdk_dynamodb::types::{AttributeValue as Sdk, CancellationReason as R};
        let reasons = [
            R::builder().code("None").build(),
            R::builder()
                .code("ConditionalCheckFailed")
                .message("The conditional request failed")
                .item("pk", Sdk::S("a".into()))
                .build(),
        ];
        let StoreError::TransactionCanceled { reasons } = transaction_canceled(&reasons) else { panic!("wrong kind") };
        assert_eq!(reasons[0].code, CancellationCode::None);
        assert_eq!(reasons[1].code, CancellationCode::ConditionalCheckFailed);
        assert_eq!(reasons[1].item, Some(store::item! { "pk" => "a" }));
        let unknown = [R::builder().code("Mystery").build()];
        assert!(matches!(transaction_canceled(&unknown), StoreError::Internal(_)));
    }
}
