//! Retries for every provider: throttling, 5xx and timeouts are tried again under the shared
//! [`RetryPolicy`] (exponential backoff with full jitter, waiting at least the provider's
//! `Retry-After`, and giving up at once when that is longer than the policy allows). Adapters
//! make one attempt each; [`Retrying`] wraps them, so that every attempt is counted once and
//! behaves the same whatever the wire protocol.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_engine::{Model, ModelError, ModelRequest, ModelResponse, TextSink};
use switchboard_https::retry::Retryable;

pub use switchboard_https::retry::RetryPolicy;

/// A model whose failed attempts are retried by a [`RetryPolicy`].
#[derive(Clone)]
pub struct Retrying {
    inner: Arc<dyn Model>,
    policy: RetryPolicy,
}

impl std::fmt::Debug for Retrying {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrying").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl Retrying {
    pub fn new(inner: Arc<dyn Model>, policy: RetryPolicy) -> Self {
        Self { inner, policy }
    }
}

#[async_trait]
impl Model for Retrying {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.attempts(request, None).await
    }

    async fn converse_streaming(
        &self,
        request: &ModelRequest,
        sink: &dyn TextSink,
    ) -> Result<ModelResponse, ModelError> {
        self.attempts(request, Some(sink)).await
    }
}

impl Retrying {
    /// Attempts until one answers or the policy gives up; no retry starts past the execution's
    /// deadline, and a streamed call's sink hears of each retry before it starts.
    async fn attempts(&self, request: &ModelRequest, sink: Option<&dyn TextSink>) -> Result<ModelResponse, ModelError> {
        let before_retry = |attempt: u32, delay: Duration, failed: &Failed| {
            let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            tracing::info!(model = %request.model, attempt, delay_ms, error = %failed.0, "retrying model call");
            if let Some(sink) = sink {
                sink.restart(&failed.0);
            }
        };
        let mut attempts = 0;
        let outcome = self
            .policy
            .retry()
            .deadline(request.deadline)
            .before_retry(&before_retry)
            .run(|number| {
                attempts = number;
                self.attempt(request, sink)
            })
            .await;
        outcome.map_err(|Failed(error)| {
            tracing::warn!(model = %request.model, attempts, %error, "model call failed");
            error
        })
    }

    /// One attempt, cut off at the execution's deadline.
    async fn attempt(&self, request: &ModelRequest, sink: Option<&dyn TextSink>) -> Result<ModelResponse, Failed> {
        let attempt = match sink {
            Some(sink) => self.inner.converse_streaming(request, sink),
            None => self.inner.converse(request),
        };
        let outcome = match request.deadline {
            Some(deadline) => {
                tokio::time::timeout_at(deadline.into(), attempt).await.unwrap_or(Err(ModelError::Timeout))
            }
            None => attempt.await,
        };
        outcome.map_err(Failed)
    }
}

/// A failed attempt, sorted for the policy: what the error says, and a throttle's hint.
struct Failed(ModelError);

impl Retryable for Failed {
    fn retryable(&self) -> bool {
        self.0.retryable()
    }

    fn retry_after(&self) -> Option<Duration> {
        match &self.0 {
            ModelError::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_errors_are_sorted_for_the_policy_by_their_kind_and_hint() {
        let p = RetryPolicy { max_retry_after: Duration::from_secs(5), ..RetryPolicy::default() };
        let delay = |error: ModelError| p.next_delay(1, &Failed(error), 0.5);
        assert_eq!(delay(ModelError::Unavailable("503".into())), Some(Duration::from_millis(125)));
        assert_eq!(delay(ModelError::Timeout), Some(Duration::from_millis(125)));
        assert_eq!(delay(ModelError::Rejected("400".into())), None);
        assert_eq!(delay(ModelError::Unauthorized("401".into())), None);
        let hint = |s| ModelError::Throttled { message: "429".into(), retry_after: Some(Duration::from_secs(s)) };
        assert_eq!(delay(hint(2)), Some(Duration::from_secs(2)));
        assert_eq!(delay(hint(6)), None, "a hint longer than the policy allows ends the call");
        assert_eq!(delay(ModelError::throttled("429")), Some(Duration::from_millis(125)));
    }
}
