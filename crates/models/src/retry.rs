//! Retries for every provider: throttling, 5xx and timeouts are tried again with exponential
//! backoff and full jitter, waiting at least the provider's `Retry-After` when it gives one (and
//! giving up at once when that is longer than the policy allows). Adapters make one attempt each;
//! [`Retrying`] wraps them, so that every attempt is counted once and behaves the same whatever
//! the wire protocol.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use switchboard_engine::{Model, ModelError, ModelRequest, ModelResponse, TextSink};

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The ceiling of the first retry's delay; it doubles with every retry.
    pub base: Duration,
    /// The largest ceiling.
    pub cap: Duration,
    /// The longest `Retry-After` worth waiting for; a longer hint ends the call at once (the turn
    /// has a budget, and a fallback model may answer now).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base: Duration::from_millis(250),
            cap: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `retry` (0 for the first): "full jitter", a uniformly
    /// random point in `[0, min(cap, base * 2^retry))` where `unit` is uniform in `[0, 1)`.
    /// Spreading retries over the whole window keeps throttled callers from retrying in step.
    pub fn backoff(&self, retry: u32, unit: f64) -> Duration {
        let ceiling = self.base.saturating_mul(2u32.saturating_pow(retry.min(31))).min(self.cap);
        ceiling.mul_f64(unit.clamp(0.0, 1.0))
    }

    /// What to do after attempt number `retry` (0 for the first) failed with `error`: wait this
    /// long and try again, or give up (`None`).
    pub fn next_delay(&self, retry: u32, error: &ModelError, unit: f64) -> Option<Duration> {
        if !error.retryable() || retry.saturating_add(1) >= self.max_attempts {
            return None;
        }
        let jitter = self.backoff(retry, unit);
        match error {
            ModelError::Throttled { retry_after: Some(hint), .. } if *hint > self.max_retry_after => None,
            ModelError::Throttled { retry_after: Some(hint), .. } => Some(jitter.max(*hint)),
            _ => Some(jitter),
        }
    }
}

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
    /// Attempts until one answers or the policy gives up; a streamed call's sink hears of each
    /// retry before it starts.
    async fn attempts(&self, request: &ModelRequest, sink: Option<&dyn TextSink>) -> Result<ModelResponse, ModelError> {
        let mut retry = 0;
        loop {
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
            let error = match outcome {
                Ok(response) => return Ok(response),
                Err(e) => e,
            };
            let delay = self.policy.next_delay(retry, &error, fastrand::f64());
            // No retry that would start past the execution's deadline.
            let delay = delay.filter(|d| request.deadline.is_none_or(|end| Instant::now() + *d < end));
            let Some(delay) = delay else {
                tracing::warn!(model = %request.model, attempts = retry + 1, %error, "model call failed");
                return Err(error);
            };
            tracing::info!(
                model = %request.model, retry, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), %error,
                "retrying model call"
            );
            if let Some(sink) = sink {
                sink.restart(&error);
            }
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(300),
            max_retry_after: Duration::from_secs(5),
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_is_spread_by_the_jitter() {
        let p = policy();
        assert_eq!(p.backoff(0, 0.999_999).as_millis(), 99);
        assert_eq!(p.backoff(1, 0.5), Duration::from_millis(100));
        assert_eq!(p.backoff(5, 1.0), Duration::from_millis(300));
        assert_eq!(p.backoff(0, 0.0), Duration::ZERO);
        assert_eq!(p.backoff(60, 0.5), Duration::from_millis(150), "capped, however many retries");
        assert!(p.backoff(1, 7.0) <= Duration::from_millis(200), "never beyond the ceiling, even for a bad unit");
    }

    #[test]
    fn only_retryable_errors_are_retried_and_only_while_attempts_remain() {
        let p = policy();
        assert!(p.next_delay(0, &ModelError::Unavailable("503".into()), 0.5).is_some());
        assert!(p.next_delay(0, &ModelError::Timeout, 0.5).is_some());
        assert_eq!(p.next_delay(2, &ModelError::Timeout, 0.5), None, "the third attempt was the last");
        assert_eq!(p.next_delay(0, &ModelError::Rejected("400".into()), 0.5), None);
        assert_eq!(p.next_delay(0, &ModelError::Unauthorized("401".into()), 0.5), None);
    }

    #[test]
    fn retry_after_is_waited_for_unless_it_is_longer_than_the_policy_allows() {
        let p = policy();
        let hint = |s| ModelError::Throttled { message: "429".into(), retry_after: Some(Duration::from_secs(s)) };
        assert_eq!(p.next_delay(0, &hint(2), 0.5), Some(Duration::from_secs(2)));
        assert_eq!(p.next_delay(0, &hint(6), 0.5), None);
        let no_hint = ModelError::throttled("429");
        assert_eq!(p.next_delay(0, &no_hint, 0.5), Some(Duration::from_millis(50)));
    }
}
