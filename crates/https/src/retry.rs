//! One retry policy for every outbound client (model providers, webhooks, the Conversations
//! Service): how many attempts, how long to wait between them, and the one loop that runs them.
//! It does not decide what is worth retrying (each client's failure says so through
//! [`Retryable`]) nor time an attempt out (the client bounds its own attempts).

use std::future::Future;
use std::time::{Duration, Instant};

/// A failed attempt, as the client that made it sorts it.
pub trait Retryable {
    /// Whether another attempt may succeed: throttling, 5xx, timeouts, connections not made.
    fn retryable(&self) -> bool;

    /// The server's `Retry-After`, as the client reads it (a client may cap it first).
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (the first is made even when this is 0).
    pub max_attempts: u32,
    /// The ceiling of the first retry's delay; it doubles with every retry.
    pub base: Duration,
    /// The largest ceiling.
    pub cap: Duration,
    /// The longest `Retry-After` worth waiting for; a longer hint ends the call at once (a
    /// caller has a budget, and something else, such as a fallback model, may answer now).
    pub max_retry_after: Duration,
}

/// The model providers' policy: four attempts, 250 ms doubling to 8 s, hints up to 20 s.
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
        // Not `mul_f64`, which panics where rounding carries a huge ceiling past `Duration::MAX`.
        let unit = if unit.is_nan() { 0.0 } else { unit.clamp(0.0, 1.0) };
        Duration::try_from_secs_f64(ceiling.as_secs_f64() * unit).map_or(ceiling, |d| d.min(ceiling))
    }

    /// What to do after attempt number `attempt` (1 for the first) failed with `error`: wait
    /// this long and try again, or give up (`None`). Only a retryable failure is tried again,
    /// while attempts remain; the wait is the [`backoff`](Self::backoff), or the failure's
    /// `Retry-After` when that is longer, and a hint longer than `max_retry_after` gives up.
    pub fn next_delay(&self, attempt: u32, error: &impl Retryable, unit: f64) -> Option<Duration> {
        if !error.retryable() || attempt >= self.max_attempts {
            return None;
        }
        let jitter = self.backoff(attempt.saturating_sub(1), unit);
        match error.retry_after() {
            Some(hint) if hint > self.max_retry_after => None,
            Some(hint) => Some(jitter.max(hint)),
            None => Some(jitter),
        }
    }

    /// The attempts of one call under this policy, to be given a deadline or a hook first.
    pub fn retry<'a, E>(&self) -> Retry<'a, E> {
        Retry { policy: *self, deadline: None, unit: fastrand::f64, before_retry: None }
    }

    /// Calls `attempt` with the attempt's number (1 for the first) until it succeeds or the
    /// policy gives up, sleeping between attempts; the last failure is returned as it is.
    pub async fn run<T, E, F, Fut>(&self, attempt: F) -> Result<T, E>
    where
        E: Retryable,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.retry().run(attempt).await
    }
}

/// What a hook hears before a retry: the number of the attempt that failed, the wait before
/// the next one, and the failure.
pub type BeforeRetry<'a, E> = &'a (dyn Fn(u32, Duration, &E) + Sync);

/// One call's attempts under a [`RetryPolicy`], with what a caller may add: a deadline no retry
/// starts after, a hook before each retry, and the source of the jitter.
pub struct Retry<'a, E> {
    policy: RetryPolicy,
    deadline: Option<Instant>,
    unit: fn() -> f64,
    before_retry: Option<BeforeRetry<'a, E>>,
}

impl<E> std::fmt::Debug for Retry<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retry").field("policy", &self.policy).field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl<'a, E: Retryable> Retry<'a, E> {
    /// No retry is started whose wait would end at or after `deadline`.
    pub fn deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Called before each wait (to log, or to tell a listener that the text so far is void).
    pub fn before_retry(mut self, hook: BeforeRetry<'a, E>) -> Self {
        self.before_retry = Some(hook);
        self
    }

    /// Where the jitter's `unit` comes from (uniform in `[0, 1)`; `fastrand` unless a test
    /// fixes it).
    pub fn jitter(mut self, unit: fn() -> f64) -> Self {
        self.unit = unit;
        self
    }

    /// [`RetryPolicy::run`], with the deadline and the hook.
    pub async fn run<T, F, Fut>(self, mut attempt: F) -> Result<T, E>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut number = 1;
        loop {
            let error = match attempt(number).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let delay = self.policy.next_delay(number, &error, (self.unit)());
            let delay = delay
                .filter(|d| self.deadline.is_none_or(|end| Instant::now().checked_add(*d).is_some_and(|at| at < end)));
            let Some(delay) = delay else {
                return Err(error);
            };
            if let Some(hook) = self.before_retry {
                hook(number, delay, &error);
            }
            tokio::time::sleep(delay).await;
            number += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::sync::Mutex;

    use super::*;

    /// A failure with its retryability and hint.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Failure {
        retryable: bool,
        retry_after: Option<Duration>,
    }

    impl Retryable for Failure {
        fn retryable(&self) -> bool {
            self.retryable
        }

        fn retry_after(&self) -> Option<Duration> {
            self.retry_after
        }
    }

    const PASSING: Failure = Failure { retryable: true, retry_after: None };
    const FINAL: Failure = Failure { retryable: false, retry_after: None };

    fn hinted(ms: u64) -> Failure {
        Failure { retryable: true, retry_after: Some(Duration::from_millis(ms)) }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(300),
            max_retry_after: Duration::from_secs(5),
        }
    }

    /// A policy that waits nothing unless a hint says so, for the loop's tests.
    fn quick(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            base: Duration::ZERO,
            cap: Duration::ZERO,
            max_retry_after: Duration::from_millis(5),
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
        let unbounded = RetryPolicy { base: Duration::MAX, cap: Duration::MAX, ..p };
        assert_eq!(unbounded.backoff(40, 1.0), Duration::MAX, "saturates rather than overflowing");
        assert_eq!(p.backoff(0, f64::NAN), Duration::ZERO);
    }

    #[test]
    fn only_retryable_failures_are_retried_and_only_while_attempts_remain() {
        let p = policy();
        assert_eq!(p.next_delay(1, &PASSING, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(p.next_delay(2, &PASSING, 0.5), Some(Duration::from_millis(100)), "the second retry's window");
        assert_eq!(p.next_delay(3, &PASSING, 0.5), None, "the third attempt was the last");
        assert_eq!(p.next_delay(1, &FINAL, 0.5), None);
        let one = RetryPolicy { max_attempts: 0, ..p };
        assert_eq!(one.next_delay(1, &PASSING, 0.5), None, "no attempts left after the first");
    }

    #[test]
    fn retry_after_is_waited_for_unless_it_is_longer_than_the_policy_allows() {
        let p = policy();
        assert_eq!(p.next_delay(1, &hinted(2_000), 0.5), Some(Duration::from_secs(2)));
        assert_eq!(p.next_delay(1, &hinted(5_000), 0.5), Some(Duration::from_secs(5)), "the longest allowed");
        assert_eq!(p.next_delay(1, &hinted(6_000), 0.5), None);
        assert_eq!(p.next_delay(1, &hinted(10), 0.5), Some(Duration::from_millis(50)), "at least the backoff");
        assert_eq!(p.next_delay(3, &hinted(10), 0.5), None, "a hint adds no attempt");
    }

    /// Runs `policy` over `script`'s outcomes in turn; the numbers the attempts were given.
    async fn attempts(retry: Retry<'_, Failure>, script: &[Result<u32, Failure>]) -> (Result<u32, Failure>, Vec<u32>) {
        let mut numbers = Vec::new();
        let outcome = retry
            .run(|number| {
                numbers.push(number);
                let outcome = script[numbers.len() - 1];
                async move { outcome }
            })
            .await;
        (outcome, numbers)
    }

    #[tokio::test]
    async fn it_tries_again_until_an_attempt_succeeds() {
        let (outcome, numbers) = attempts(quick(3).retry(), &[Err(PASSING), Err(hinted(1)), Ok(7)]).await;
        assert_eq!(outcome, Ok(7));
        assert_eq!(numbers, [1, 2, 3]);
    }

    #[tokio::test]
    async fn it_returns_the_last_failure_once_the_attempts_are_spent() {
        let last = Failure { retryable: true, retry_after: Some(Duration::ZERO) };
        let (outcome, numbers) = attempts(quick(2).retry(), &[Err(PASSING), Err(last), Ok(7)]).await;
        assert_eq!(outcome, Err(last));
        assert_eq!(numbers, [1, 2]);
    }

    #[tokio::test]
    async fn it_gives_up_at_once_on_a_final_failure_or_a_hint_too_long() {
        let (outcome, numbers) = attempts(quick(3).retry(), &[Err(FINAL), Ok(7)]).await;
        assert_eq!((outcome, numbers), (Err(FINAL), vec![1]));
        let (outcome, numbers) = attempts(quick(3).retry(), &[Err(hinted(6)), Ok(7)]).await;
        assert_eq!((outcome, numbers), (Err(hinted(6)), vec![1]));
    }

    #[tokio::test]
    async fn it_starts_no_retry_that_would_end_past_the_deadline() {
        let retry = quick(3).retry().deadline(Some(Instant::now()));
        let (outcome, numbers) = attempts(retry, &[Err(PASSING), Ok(7)]).await;
        assert_eq!((outcome, numbers), (Err(PASSING), vec![1]));
    }

    #[tokio::test]
    async fn the_hook_hears_each_retry_with_its_wait() {
        let heard = Mutex::new(Vec::new());
        let hook = |number: u32, delay: Duration, error: &Failure| heard.lock().unwrap().push((number, delay, *error));
        let windowed = RetryPolicy { base: Duration::from_millis(2), cap: Duration::from_millis(4), ..quick(3) };
        let retry = windowed.retry().jitter(|| 0.5).before_retry(&hook);

        let (outcome, _) = attempts(retry, &[Err(PASSING), Err(hinted(5)), Ok(7)]).await;

        assert_eq!(outcome, Ok(7));
        let heard = heard.into_inner().unwrap();
        assert_eq!(
            heard,
            [(1, Duration::from_millis(1), PASSING), (2, Duration::from_millis(5), hinted(5))],
            "half of each window, or the hint when it is longer"
        );
    }
}
