//! A circuit breaker per `provider:model`. After `failures` calls in a row fail in a way that may
//! pass with time (throttled, unavailable, timeout — each after its retries), the circuit opens:
//! calls fail at once for `cooldown`, so that a fallback model answers without waiting on an
//! outage. Then one call goes through as a probe (half-open); its success closes the circuit, its
//! failure opens it for another cooldown. A refused request or key is an answer from a working
//! service: it closes the circuit too. A probe whose call never ends (its turn was cut off) no
//! longer blocks after a cooldown: another probe is let through.
//!
//! Only failing models hold an entry, so a tenant naming many models costs nothing until they
//! fail. Transitions are logged at WARN (opened) and INFO (half-open, closed).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use switchboard_engine::{Clock, ModelError};

/// When a circuit opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Failed calls in a row that open the circuit.
    pub failures: u32,
    /// How long an open circuit refuses calls before a probe.
    pub cooldown: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self { failures: 5, cooldown: Duration::from_secs(30) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: DateTime<Utc> },
    HalfOpen { since: DateTime<Utc> },
}

/// The circuits of one registry.
pub(crate) struct Breakers {
    policy: BreakerPolicy,
    clock: Arc<dyn Clock>,
    states: Mutex<HashMap<String, State>>,
}

impl std::fmt::Debug for Breakers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breakers").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl Breakers {
    pub(crate) fn new(policy: BreakerPolicy, clock: Arc<dyn Clock>) -> Self {
        Self { policy, clock, states: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn policy(&self) -> BreakerPolicy {
        self.policy
    }

    fn cooldown(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.policy.cooldown).unwrap_or(chrono::Duration::MAX)
    }

    /// May a call to `key` go out now? An open circuit answers `Unavailable` at once.
    pub(crate) fn admit(&self, key: &str) -> Result<(), ModelError> {
        let now = self.clock.now();
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = states.get_mut(key) else { return Ok(()) };
        match *state {
            State::Closed { .. } => Ok(()),
            State::Open { until } if now < until => {
                Err(ModelError::Unavailable(format!("circuit open for {key} until {}", until.to_rfc3339())))
            }
            State::HalfOpen { since } if now < since + self.cooldown() => {
                Err(ModelError::Unavailable(format!("circuit half-open for {key}: a probe call is under way")))
            }
            State::Open { .. } | State::HalfOpen { .. } => {
                tracing::info!(model = key, "circuit half-open: one probe call goes through");
                *state = State::HalfOpen { since: now };
                Ok(())
            }
        }
    }

    /// Records how a call that [`admit`](Self::admit) let through ended.
    pub(crate) fn record(&self, key: &str, outcome: Result<(), &ModelError>) {
        let counts = matches!(outcome, Err(e) if e.retryable());
        let now = self.clock.now();
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        if !counts {
            if let Some(State::HalfOpen { .. } | State::Open { .. }) = states.remove(key) {
                tracing::info!(model = key, "circuit closed: the model answers again");
            }
            return;
        }
        let state = states.entry(key.to_owned()).or_insert(State::Closed { failures: 0 });
        match *state {
            State::Closed { failures } if failures + 1 < self.policy.failures => {
                *state = State::Closed { failures: failures + 1 };
            }
            State::Closed { .. } | State::HalfOpen { .. } => {
                let until = now + self.cooldown();
                tracing::warn!(model = key, until = %until.to_rfc3339(), failures = self.policy.failures, "circuit opened");
                *state = State::Open { until };
            }
            // a call admitted before the circuit opened: the circuit stays as it is
            State::Open { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use switchboard_testkit::ManualClock;

    use super::*;

    fn breakers(clock: &Arc<ManualClock>) -> Breakers {
        let clock: Arc<dyn Clock> = clock.clone();
        Breakers::new(BreakerPolicy { failures: 3, cooldown: Duration::from_secs(30) }, clock)
    }

    const DOWN: ModelError = ModelError::Timeout;

    #[test]
    fn it_opens_after_consecutive_failures_only() {
        let clock = ManualClock::new();
        let b = breakers(&clock);
        for _ in 0..2 {
            b.admit("openai:m").unwrap();
            b.record("openai:m", Err(&DOWN));
        }
        // a success in between starts the count again
        b.record("openai:m", Ok(()));
        for _ in 0..2 {
            b.admit("openai:m").unwrap();
            b.record("openai:m", Err(&DOWN));
        }
        b.admit("openai:m").unwrap();
        // a refused request is an answer: it does not count
        b.record("openai:m", Err(&ModelError::Rejected("400".into())));
        b.admit("openai:m").unwrap();
        for _ in 0..3 {
            b.record("openai:m", Err(&DOWN));
        }
        let err = b.admit("openai:m").unwrap_err();
        assert!(matches!(&err, ModelError::Unavailable(m) if m.contains("circuit open")), "{err:?}");
        assert!(err.falls_back(), "an open circuit sends the turn to the next model");
        b.admit("anthropic:other").unwrap();
    }

    #[test]
    fn after_the_cooldown_one_probe_goes_through_and_its_outcome_decides() {
        let clock = ManualClock::new();
        let b = breakers(&clock);
        for _ in 0..3 {
            b.record("k", Err(&DOWN));
        }
        assert!(b.admit("k").is_err());
        clock.advance(chrono::Duration::seconds(30));
        b.admit("k").unwrap();
        assert!(b.admit("k").unwrap_err().to_string().contains("probe"), "one probe at a time");
        // the probe fails: open for another cooldown
        b.record("k", Err(&DOWN));
        clock.advance(chrono::Duration::seconds(29));
        assert!(b.admit("k").is_err());
        clock.advance(chrono::Duration::seconds(1));
        b.admit("k").unwrap();
        // the probe succeeds: closed, and no entry kept
        b.record("k", Ok(()));
        b.admit("k").unwrap();
        b.admit("k").unwrap();
        assert!(b.states.lock().unwrap().is_empty());
    }

    #[test]
    fn a_probe_that_never_ends_does_not_block_the_circuit_forever() {
        let clock = ManualClock::new();
        let b = breakers(&clock);
        for _ in 0..3 {
            b.record("k", Err(&DOWN));
        }
        clock.advance(chrono::Duration::seconds(30));
        b.admit("k").unwrap(); // this probe's turn is cut off: no record ever comes
        clock.advance(chrono::Duration::seconds(30));
        b.admit("k").unwrap();
    }
}
