//! Tenants: who owns agents, triggers, tools, skills, sessions and executions. A suspended
//! tenant keeps its configuration and records, but nothing new runs for it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::execution::ExecutionStatus;
use crate::ids::TenantId;
use crate::limits::MAX_NAME_LEN;
use crate::recording::Recording;
use crate::validation::{ValidationErrors, check_reply_text};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantStatus {
    #[default]
    Active,
    /// Inbound messages are recorded but not answered, and `invoke` is refused.
    Suspended,
}

impl TenantStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TenantStatus::Active => "active",
            TenantStatus::Suspended => "suspended",
        }
    }

    /// The stored form back; anything unknown reads as active (the column's default).
    pub fn parse(s: &str) -> Self {
        if s == "suspended" { TenantStatus::Suspended } else { TenantStatus::Active }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    pub tenant_id: TenantId,
    pub name: String,
    pub status: TenantStatus,
    pub created_at: DateTime<Utc>,
    /// Cost and load limits (the defaults unless changed).
    #[serde(default)]
    pub limits: TenantLimits,
    /// What execution records keep of model calls (`full` unless changed).
    #[serde(default)]
    pub recording: Recording,
    /// Named business-hours calendars its triggers' time conditions may name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub calendars: crate::calendar::Calendars,
    /// The IANA time zone that a schedule trigger, a time condition or a calendar written
    /// without one is stored with (a schedule's is UTC when this is unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// A tenant's display name as it is kept: trimmed, 1 to [`MAX_NAME_LEN`] characters. The one rule
/// for it, whoever creates or renames a tenant.
pub fn tenant_name(raw: &str) -> Result<&str, TenantNameError> {
    let name = raw.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_LEN { Err(TenantNameError) } else { Ok(name) }
}

/// A tenant name that breaks [`tenant_name`]'s rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {MAX_NAME_LEN} characters")]
pub struct TenantNameError;

/// Default of [`TenantLimits::invocations_per_minute`] (the brief's table).
pub const DEFAULT_INVOCATIONS_PER_MINUTE: u32 = 60;
/// Default of [`TenantLimits::tokens_per_day`]: ten times the brief's table (100,000); a tenant's
/// limits set their own.
pub const DEFAULT_TOKENS_PER_DAY: u64 = 1_000_000;
/// Highest accepted invocations-per-minute limit.
pub const MAX_INVOCATIONS_PER_MINUTE: u32 = 1_000_000;
/// Highest accepted tokens-per-day limit.
pub const MAX_TOKENS_PER_DAY: u64 = 1_000_000_000_000;
/// Default of [`TenantLimits::concurrent_sessions`] (the table; the brief says 10).
pub const DEFAULT_CONCURRENT_SESSIONS: u32 = 100;
/// Highest accepted concurrent-sessions limit: freeing idle slots reads every held one, so the
/// number stays small enough to read in one or two pages.
pub const MAX_CONCURRENT_SESSIONS: u32 = 10_000;
/// Default of [`TenantLimits::session_idle_minutes`].
pub const DEFAULT_SESSION_IDLE_MINUTES: u32 = 30;
/// Highest accepted idle time (a day).
pub const MAX_SESSION_IDLE_MINUTES: u32 = 1_440;

/// A tenant's cost and load limits, checked where work enters (event intake and `invoke`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantLimits {
    /// Agent executions started per UTC minute (inbound messages answered and `invoke` calls).
    #[serde(default = "default_invocations")]
    pub invocations_per_minute: u32,
    /// Model tokens (input, output and prompt-cache) per UTC day, across every agent.
    #[serde(default = "default_tokens")]
    pub tokens_per_day: u64,
    /// Conversations an agent may be answering at once. A conversation holds one of these
    /// slots from its first admitted message until its session ends, goes to a human, or has
    /// been idle for `session_idle_minutes`.
    #[serde(default = "default_concurrent_sessions")]
    pub concurrent_sessions: u32,
    /// Minutes without an admitted message after which a conversation's slot may be taken by
    /// another (the session itself stays open, its customer asked for a slot again, unless
    /// `close_idle_sessions`).
    #[serde(default = "default_idle_minutes")]
    pub session_idle_minutes: u32,
    /// Whether a session whose agent has waited on its customer for `session_idle_minutes` is
    /// closed as `abandoned` (counted in insights; the customer's next message opens a new
    /// conversation: a new session, which reads the conversation's recent messages as any new
    /// session does, without the old one's memory, skills or step). Off by default: the session
    /// stays open however long the customer takes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close_idle_sessions: bool,
    /// What the customer gets when their message is not answered because of a limit.
    #[serde(default, deserialize_with = "crate::strict_json::object")]
    pub on_limit: OnLimit,
}

fn default_invocations() -> u32 {
    DEFAULT_INVOCATIONS_PER_MINUTE
}

fn default_tokens() -> u64 {
    DEFAULT_TOKENS_PER_DAY
}

fn default_concurrent_sessions() -> u32 {
    DEFAULT_CONCURRENT_SESSIONS
}

fn default_idle_minutes() -> u32 {
    DEFAULT_SESSION_IDLE_MINUTES
}

impl Default for TenantLimits {
    fn default() -> Self {
        Self {
            invocations_per_minute: DEFAULT_INVOCATIONS_PER_MINUTE,
            tokens_per_day: DEFAULT_TOKENS_PER_DAY,
            concurrent_sessions: DEFAULT_CONCURRENT_SESSIONS,
            session_idle_minutes: DEFAULT_SESSION_IDLE_MINUTES,
            close_idle_sessions: false,
            on_limit: OnLimit::default(),
        }
    }
}

impl TenantLimits {
    /// After how many idle minutes a session is closed as abandoned, if the tenant closes them.
    pub fn close_idle_after(&self) -> Option<u32> {
        self.close_idle_sessions.then_some(self.session_idle_minutes)
    }

    /// Every field out of range, by JSON pointer under `base` (for example `/limits`).
    pub fn validate(&self, base: &str) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        if !(1..=MAX_INVOCATIONS_PER_MINUTE).contains(&self.invocations_per_minute) {
            errors.push(format!("{base}/invocationsPerMinute"), format!("must be 1 to {MAX_INVOCATIONS_PER_MINUTE}"));
        }
        if !(1..=MAX_TOKENS_PER_DAY).contains(&self.tokens_per_day) {
            errors.push(format!("{base}/tokensPerDay"), format!("must be 1 to {MAX_TOKENS_PER_DAY}"));
        }
        if !(1..=MAX_CONCURRENT_SESSIONS).contains(&self.concurrent_sessions) {
            errors.push(format!("{base}/concurrentSessions"), format!("must be 1 to {MAX_CONCURRENT_SESSIONS}"));
        }
        if !(1..=MAX_SESSION_IDLE_MINUTES).contains(&self.session_idle_minutes) {
            errors.push(format!("{base}/sessionIdleMinutes"), format!("must be 1 to {MAX_SESSION_IDLE_MINUTES}"));
        }
        if let OnLimit::Message { text } = &self.on_limit {
            check_reply_text(&mut errors, &format!("{base}/onLimit/text"), text);
        }
        errors.into_result()
    }
}

/// What the customer gets when a limit stops their message from being answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum OnLimit {
    /// Nothing: the message is recorded, not answered.
    #[default]
    #[serde(rename = "none")]
    Nothing,
    /// A fixed reply, sent once per message.
    Message { text: String },
    /// The conversation goes to a human operator (`session.handoff.human`).
    HandoffToHuman,
    /// The message waits in its conversation's queue (and the conversation's later messages
    /// behind it) until the limit's window reopens, then runs if the limits admit it then.
    /// Bounded by the work queue's receive limit: a message still refused at its last delivery
    /// is recorded as refused and gets nothing.
    Defer,
}

/// A limit of [`TenantLimits`], as records, events and problems name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LimitName {
    InvocationsPerMinute,
    TokensPerDay,
    ConcurrentSessions,
}

impl LimitName {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitName::InvocationsPerMinute => "invocationsPerMinute",
            LimitName::TokensPerDay => "tokensPerDay",
            LimitName::ConcurrentSessions => "concurrentSessions",
        }
    }

    /// The status of an execution this limit refused: `rate_limited` for a rate or the
    /// sessions cap, `budget_exceeded` for a token budget.
    pub fn status(self) -> ExecutionStatus {
        match self {
            LimitName::InvocationsPerMinute | LimitName::ConcurrentSessions => ExecutionStatus::RateLimited,
            LimitName::TokensPerDay => ExecutionStatus::BudgetExceeded,
        }
    }
}

/// A limit that refused a piece of work, carried with it to where it is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    pub limit: LimitName,
    /// The limit's value when it refused.
    pub value: u64,
    /// Seconds until the limit's window reopens.
    pub retry_after_seconds: u64,
    pub on_limit: OnLimit,
    /// When the window reopens: a deferred message is not asked again before then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reopens_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Refusal {
    pub fn describe(&self) -> String {
        format!(
            "tenant limit {} ({}) reached; try again in {} s",
            self.limit.as_str(),
            self.value,
            self.retry_after_seconds
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_tenant_name_is_kept_trimmed_and_must_not_be_blank_or_too_long() {
        assert_eq!(tenant_name("  Acme Inc. "), Ok("Acme Inc."));
        assert_eq!(tenant_name("   "), Err(TenantNameError));
        assert_eq!(tenant_name(&"é".repeat(MAX_NAME_LEN)), Ok("é".repeat(MAX_NAME_LEN).as_str()));
        assert_eq!(tenant_name(&"x".repeat(MAX_NAME_LEN + 1)), Err(TenantNameError));
        assert_eq!(TenantNameError.to_string(), "must be 1 to 128 characters");
    }

    #[test]
    fn limits_default_to_the_briefs_table_and_read_partially() {
        let l: TenantLimits = serde_json::from_value(json!({"tokensPerDay": 5})).unwrap();
        assert_eq!(l.invocations_per_minute, 60);
        assert_eq!(l.tokens_per_day, 5);
        assert_eq!((l.concurrent_sessions, l.session_idle_minutes), (100, 30));
        assert_eq!(l.on_limit, OnLimit::Nothing);
        assert_eq!(serde_json::to_value(TenantLimits::default()).unwrap()["onLimit"], json!({"action": "none"}));
        let m: OnLimit = serde_json::from_value(json!({"action": "message", "text": "busy"})).unwrap();
        assert_eq!(m, OnLimit::Message { text: "busy".into() });
        assert!(serde_json::from_value::<OnLimit>(json!({"action": "shout"})).is_err());
        assert_eq!(serde_json::from_value::<OnLimit>(json!({"action": "defer"})).unwrap(), OnLimit::Defer);
        assert!(serde_json::from_value::<TenantLimits>(json!({"perHour": 1})).is_err());
    }

    #[test]
    fn out_of_range_limits_are_named() {
        let bad = TenantLimits {
            invocations_per_minute: 0,
            tokens_per_day: MAX_TOKENS_PER_DAY + 1,
            concurrent_sessions: MAX_CONCURRENT_SESSIONS + 1,
            session_idle_minutes: 0,
            close_idle_sessions: true,
            on_limit: OnLimit::Message { text: " ".into() },
        };
        let pointers: Vec<String> = bad.validate("/limits").unwrap_err().0.into_iter().map(|f| f.pointer).collect();
        assert_eq!(
            pointers,
            [
                "/limits/invocationsPerMinute",
                "/limits/tokensPerDay",
                "/limits/concurrentSessions",
                "/limits/sessionIdleMinutes",
                "/limits/onLimit/text"
            ]
        );
        assert!(TenantLimits::default().validate("/limits").is_ok());
    }
}
