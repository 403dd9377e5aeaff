//! Why a turn cannot complete now. An [`ExecError`] fails the work item: a retryable one leaves
//! it for redelivery, any other is still retried by the queue until its receive limit and then
//! dead-lettered. A [`ToolFault`] is a tool's side effect that failed for reasons that are not the
//! model's (the conversation system, the bus, the store, the queue): it fails the item too.
//! Mistakes of the model are neither: they go back to it as tool results.

use switchboard_domain::ErrorKind;

use crate::ports::{BusError, ConversationError, QueueError, StoreError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct ExecError {
    pub kind: ErrorKind,
    pub message: String,
    pub retryable: bool,
    /// When to deliver the item again, if not at the queue's own pace: a deferred message
    /// (the tenant's `onLimit` is `defer`) waits until its limit's window reopens.
    pub retry_after: Option<std::time::Duration>,
    /// The turn stopped because its session moved while it ran (an operator cancelled the turn
    /// or handed the conversation on): the executor runs the item again at once, and the run
    /// finds the session as it is now.
    pub(crate) moved: bool,
}

impl ExecError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>, retryable: bool) -> Self {
        Self { kind, message: message.into(), retryable, retry_after: None, moved: false }
    }

    /// The turn's session is no longer as the turn read it (`why`).
    pub(crate) fn moved(why: impl Into<String>) -> Self {
        Self { moved: true, ..Self::new(ErrorKind::Conflict, why, true) }
    }

    /// A message the limits still refuse: deliver it again in `seconds`.
    pub(crate) fn deferred(refusal: &switchboard_domain::Refusal) -> Self {
        Self {
            kind: ErrorKind::Limit,
            message: format!("deferred: {}", refusal.describe()),
            retryable: true,
            retry_after: Some(std::time::Duration::from_secs(refusal.retry_after_seconds)),
            moved: false,
        }
    }

    /// A message that opens a burst its agent coalesces, which is not complete yet: deliver it
    /// again once it is, in `wait` (SQS holds it for whole seconds, rounded up).
    pub(crate) fn gathering(wait: std::time::Duration, messages: usize) -> Self {
        Self {
            kind: ErrorKind::Conflict,
            message: format!("gathering a burst of {messages} message(s): its turn runs in {} ms", wait.as_millis()),
            retryable: true,
            retry_after: Some(wait),
            moved: false,
        }
    }

    /// Whether the item only waits (for a tenant limit's window, or for its burst to complete),
    /// which is not a failure.
    pub fn is_deferral(&self) -> bool {
        self.retryable && self.retry_after.is_some()
    }
}

impl From<StoreError> for ExecError {
    fn from(e: StoreError) -> Self {
        let retryable = e.retryable();
        ExecError::new(ErrorKind::Store, e.to_string(), retryable)
    }
}

impl From<ToolFault> for ExecError {
    fn from(e: ToolFault) -> Self {
        let retryable = e.retryable();
        ExecError::new(ErrorKind::Tool, e.to_string(), retryable)
    }
}

impl From<BusError> for ExecError {
    fn from(e: BusError) -> Self {
        ExecError::new(ErrorKind::Internal, e.to_string(), e.retryable)
    }
}

/// A failure that is not the model's fault and that must fail (and retry) the execution.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolFault {
    #[error(transparent)]
    Conversations(#[from] ConversationError),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl ToolFault {
    pub(crate) fn retryable(&self) -> bool {
        match self {
            ToolFault::Conversations(e) => e.retryable,
            ToolFault::Bus(e) => e.retryable,
            ToolFault::Store(e) => e.retryable(),
            ToolFault::Queue(e) => e.retryable,
        }
    }
}
