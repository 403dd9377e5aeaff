//! Errors at the ports, classified by whether trying again can help.

/// A store failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A conditional write lost: someone else wrote first. Re-read and retry.
    #[error("version conflict: {0}")]
    VersionConflict(String),
    /// The record (e.g. the execution for this source) already exists.
    #[error("already recorded: {0}")]
    Duplicate(String),
    /// A stored record could not be read back (corrupt or from an incompatible version).
    #[error("corrupt record: {0}")]
    Corrupt(String),
    #[error("store unavailable: {message}")]
    Unavailable { message: String, retryable: bool },
}

impl StoreError {
    pub fn retryable(&self) -> bool {
        match self {
            StoreError::VersionConflict(_) => true,
            StoreError::Duplicate(_) | StoreError::Corrupt(_) => false,
            StoreError::Unavailable { retryable, .. } => *retryable,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("queue: {message}")]
pub struct QueueError {
    pub message: String,
    pub retryable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event bus: {message}")]
pub struct BusError {
    pub message: String,
    pub retryable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("conversations: {message}")]
pub struct ConversationError {
    pub message: String,
    pub retryable: bool,
}

/// A model call that failed after the adapter's own retries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("model throttled: {0}")]
    Throttled(String),
    #[error("model unavailable: {0}")]
    Unavailable(String),
    #[error("model timed out")]
    Timeout,
    /// The request itself is wrong (bad model id, invalid tool schema, …); retrying cannot help.
    #[error("model rejected the request: {0}")]
    Rejected(String),
}

impl ModelError {
    pub fn retryable(&self) -> bool {
        !matches!(self, ModelError::Rejected(_))
    }
}
