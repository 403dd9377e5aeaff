//! How SDK failures are described and classified: the error code and message always (never a
//! bare "service error"), and whether trying again can help. No mapping to port errors here;
//! each adapter does that.

use aws_sdk_dynamodb::error::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// Error codes that mean "too fast" or "try again" on any AWS service.
const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
    "TooManyRequestsException",
    "RequestThrottled",
    "RequestThrottledException",
    "LimitExceededException",
    "TransactionConflictException",
    "TransactionInProgressException",
    "InternalServerError",
    "InternalServerException",
    "InternalFailure",
    "InternalError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
];

/// A failed SDK call, described and classified.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// `<operation>: <code>: <message>` with the SDK's full error context.
    pub message: String,
    pub code: Option<String>,
    pub retryable: bool,
}

/// Describes a failed call of `operation`. Throttling, 5xx, timeouts and connection failures
/// are retryable; everything else (validation, access, missing resources) is not.
pub(crate) fn describe<E>(operation: &str, err: &SdkError<E>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = err.as_service_error().and_then(|e| e.code()).map(str::to_owned);
    let status = err.raw_response().map(|r| r.status().as_u16());
    let retryable = match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        SdkError::ServiceError(_) => {
            code.as_deref().is_some_and(|c| RETRYABLE_CODES.contains(&c))
                || status.is_some_and(|s| s == 429 || s >= 500)
        }
        _ => false,
    };
    Failure { message: format!("{operation}: {}", DisplayErrorContext(err)), code, retryable }
}

/// Describes a failed call of `operation` and logs it as `what` with its code and whether it is
/// retryable (the full message, which may hold request details, goes only into the error).
pub(crate) fn logged<E>(operation: &str, err: &SdkError<E>, what: &str) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let f = describe(operation, err);
    tracing::warn!(operation, code = f.code.as_deref().unwrap_or("-"), retryable = f.retryable, "{what}");
    f
}
