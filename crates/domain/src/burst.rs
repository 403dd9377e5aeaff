//! Bursts ("double texting"): customers write "hi", "I need help", "with order 1234" within
//! seconds. An agent's `bursts` policy says what its turns do with messages that come close
//! together: `enqueue` (the default) answers each in its own turn, in order; `coalesce` waits a
//! short window after a message and answers every message of the burst in one turn that sees
//! them all, in order; `interrupt` waits for nothing, but a turn that finds a newer message of
//! its conversation queued, when it starts or before it would reply, stops there and leaves its
//! message to the next turn, which answers both (the executor's `interrupt` module).
//!
//! Which messages make one burst is a pure function of their arrival times ([`gather`]), so a
//! turn run again after a crash gathers the same ones: a message joins while it arrives before
//! the burst is due, and the burst is due a window after its newest message, but never later
//! than two windows after its first (a customer who keeps typing is still answered).
//!
//! The first message waits on the queue (each wait is a delivery, which SQS counts against the
//! queue's `maxReceiveCount`): until the burst is due, and from its third delivery on until the
//! burst closes, two windows after its first message ([`Gathered::wait_until`]). So a burst
//! waits at most three times, and its turn runs by its close.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::validation::ValidationErrors;

/// The longest window a tenant may set, in seconds.
pub const MAX_WINDOW_SECONDS: u32 = 30;

/// The most messages one turn answers (an SQS batch holds at most ten).
pub const MAX_BURST_MESSAGES: u32 = 10;

/// An agent's policy for messages that arrive close together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bursts {
    #[serde(default)]
    pub mode: BurstMode,
    /// How long a burst stays open after its newest message: 1 to [`MAX_WINDOW_SECONDS`].
    #[serde(default = "default_window")]
    pub window_seconds: u32,
    /// The most messages one turn answers: 2 to [`MAX_BURST_MESSAGES`]; the next one opens a
    /// new burst.
    #[serde(default = "default_max_messages")]
    pub max_messages: u32,
}

fn default_window() -> u32 {
    2
}

fn default_max_messages() -> u32 {
    MAX_BURST_MESSAGES
}

impl Default for Bursts {
    fn default() -> Self {
        Self { mode: BurstMode::Enqueue, window_seconds: default_window(), max_messages: default_max_messages() }
    }
}

/// What an agent does with a message that arrives while earlier ones wait or run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BurstMode {
    /// Each message is its own turn, in the order they came.
    #[default]
    Enqueue,
    /// The messages of a burst are answered together, in one turn.
    Coalesce,
    /// A turn that has not replied yet stops when a newer message of its conversation is
    /// queued; the newer message's turn answers both. `maxMessages` bounds how many one turn
    /// answers; `windowSeconds` is not used.
    Interrupt,
}

impl Bursts {
    /// Whether this is the default policy (left out when an agent is written out).
    pub fn is_enqueue(&self) -> bool {
        *self == Self::default()
    }

    /// The policy's faults, under `/bursts`.
    pub fn validate_into(&self, errors: &mut ValidationErrors) {
        if !(1..=MAX_WINDOW_SECONDS).contains(&self.window_seconds) {
            errors.push("/bursts/windowSeconds", format!("must be 1 to {MAX_WINDOW_SECONDS}"));
        }
        if !(2..=MAX_BURST_MESSAGES).contains(&self.max_messages) {
            errors.push("/bursts/maxMessages", format!("must be 2 to {MAX_BURST_MESSAGES}"));
        }
    }

    fn window(&self) -> Duration {
        Duration::seconds(i64::from(self.window_seconds))
    }
}

/// The burst a message opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gathered {
    /// How many of the messages, from the first, belong to the burst (at least 1).
    pub members: usize,
    /// When the burst is complete and its turn may run.
    pub due: DateTime<Utc>,
    /// When the first message came (none when unknown).
    pub opened: Option<DateTime<Utc>>,
    /// Its window.
    pub window: Duration,
}

impl Gathered {
    /// Until when the first message waits, looked at `now` on its `delivery` (1 for the first,
    /// as the queue counts them; unknown counts as the first): nothing once the burst is due;
    /// until then, to `due`, or from the third delivery on to the burst's close, two windows
    /// after its opening, so that the next delivery runs it.
    pub fn wait_until(&self, now: DateTime<Utc>, delivery: Option<u32>) -> Option<DateTime<Utc>> {
        let opened = self.opened?;
        if now >= self.due {
            None
        } else if delivery.unwrap_or(1) < 3 {
            Some(self.due)
        } else {
            Some(opened + self.window + self.window)
        }
    }
}

/// The burst that the first of `arrivals` opens, given when it and the messages queued behind
/// it (in their queue order) arrived: a message without a known arrival (queued before this was
/// kept) ends the burst, as does one that arrived once it was due or past `max_messages`.
pub fn gather(policy: &Bursts, arrivals: &[Option<DateTime<Utc>>]) -> Gathered {
    let window = policy.window();
    let Some(Some(first)) = arrivals.first().copied() else {
        return Gathered { members: 1, due: DateTime::<Utc>::MIN_UTC, opened: None, window };
    };
    let latest = first + window + window;
    let mut due = first + window;
    let mut members = 1;
    let max = usize::try_from(policy.max_messages).unwrap_or(usize::MAX);
    for arrived in &arrivals[1..] {
        match arrived {
            Some(at) if members < max && *at < due => {
                members += 1;
                due = (*at + window).min(latest);
            }
            _ => break,
        }
    }
    Gathered { members, due, opened: Some(first), window }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms)
    }

    fn coalesce(window_seconds: u32, max_messages: u32) -> Bursts {
        Bursts { mode: BurstMode::Coalesce, window_seconds, max_messages }
    }

    #[test]
    fn messages_within_the_window_of_the_one_before_join_and_the_burst_is_due_a_window_after_the_newest() {
        let gathered = gather(&coalesce(2, 10), &[at(0), at(900), at(2_500), at(5_000)]);
        // 900 < 2000, 2500 < 2900, but 5000 >= 4500: the fourth opens the next burst
        assert_eq!((gathered.members, gathered.due), (3, at(4_000).unwrap()));
    }

    #[test]
    fn a_customer_who_keeps_typing_is_answered_two_windows_after_the_first_message() {
        let arrivals: Vec<_> = (0..8).map(|i| at(i * 700)).collect();
        let gathered = gather(&coalesce(2, 10), &arrivals);
        // due moves to 2700, 3400, 4000 (capped): the message at 4200 is not in it
        assert_eq!((gathered.members, gathered.due), (6, at(4_000).unwrap()));
    }

    #[test]
    fn a_burst_holds_at_most_max_messages_and_an_unknown_arrival_ends_it() {
        let arrivals: Vec<_> = (0..5).map(|i| at(i * 10)).collect();
        assert_eq!(gather(&coalesce(2, 3), &arrivals).members, 3);
        assert_eq!(gather(&coalesce(2, 10), &[at(0), None, at(20)]).members, 1);
        // a first message of unknown arrival is due at once, alone
        let unknown = gather(&coalesce(2, 10), &[None, at(0)]);
        assert_eq!((unknown.members, unknown.wait_until(at(0).unwrap(), Some(1))), (1, None));
        assert_eq!(gather(&coalesce(2, 10), &[]).members, 1);
    }

    #[test]
    fn gathering_again_with_more_messages_behind_keeps_the_same_burst() {
        // what a turn run again after a crash sees: more has arrived since, after it was due
        let first = gather(&coalesce(2, 10), &[at(0), at(1_000)]);
        let again = gather(&coalesce(2, 10), &[at(0), at(1_000), at(3_000), at(3_100)]);
        assert_eq!(first, again);
    }

    #[test]
    fn a_look_waits_until_due_from_the_third_delivery_until_the_close_and_none_once_due() {
        let policy = coalesce(2, 10);
        // looked at as it came: until a window after it
        assert_eq!(gather(&policy, &[at(0)]).wait_until(at(10).unwrap(), Some(1)), at(2_000));
        // looked at again at 2 s with a message from 1.8 s: until due at 3.8 s; on a third
        // delivery, until the close at 4 s, so that the fourth runs it
        let again = gather(&policy, &[at(0), at(1_800)]);
        assert_eq!(again.wait_until(at(2_000).unwrap(), Some(2)), at(3_800));
        assert_eq!(again.wait_until(at(2_000).unwrap(), None), at(3_800));
        assert_eq!(again.wait_until(at(3_000).unwrap(), Some(3)), at(4_000));
        assert_eq!(again.wait_until(at(3_800).unwrap(), Some(9)), None);
        // a burst that is due at once does not wait
        assert_eq!(gather(&policy, &[at(0), at(500)]).wait_until(at(9_000).unwrap(), Some(1)), None);
    }

    #[test]
    fn the_policy_is_bounded_and_written_out_only_when_set() {
        let mut errors = ValidationErrors::default();
        coalesce(0, 1).validate_into(&mut errors);
        coalesce(31, 11).validate_into(&mut errors);
        let pointers: Vec<_> = errors.0.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            ["/bursts/windowSeconds", "/bursts/maxMessages", "/bursts/windowSeconds", "/bursts/maxMessages"]
        );
        let read: Bursts = serde_json::from_value(serde_json::json!({ "mode": "coalesce" })).unwrap();
        assert_eq!(read, coalesce(2, 10));
        assert!(Bursts::default().is_enqueue() && !read.is_enqueue());
        let interrupt: Bursts = serde_json::from_value(serde_json::json!({ "mode": "interrupt" })).unwrap();
        assert_eq!((interrupt.mode, interrupt.max_messages), (BurstMode::Interrupt, 10));
        let refused = serde_json::from_value::<Bursts>(serde_json::json!({ "mode": "reject" }));
        assert!(refused.unwrap_err().to_string().contains("unknown variant `reject`"));
    }
}
