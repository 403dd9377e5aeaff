//! Approval of risky tool calls: a tool (a tenant's webhook tool, or a system tool through its
//! agent) may require a person's approval before it runs — always, or when its arguments meet a
//! condition written in the trigger condition language (`amount gt 100`). The turn pauses before
//! the call; the session keeps the paused turn ([`PausedTurn`]) and the messages that arrive
//! meanwhile ([`HeldMessage`]); an operator approves (possibly with edited arguments) or denies;
//! the turn resumes on the same execution. The shapes and their checks; the pausing and resuming
//! are the engine's.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::condition::Conditions;
use crate::validation::ValidationErrors;
use crate::{AgentId, ExecutionId, SessionId};

/// How long an approval waits for a person when its policy does not say: a day.
pub const DEFAULT_APPROVAL_TIMEOUT_SECONDS: u32 = 86_400;

/// The longest wait a policy may ask for: a week.
pub const MAX_APPROVAL_TIMEOUT_SECONDS: u32 = 7 * 86_400;

/// Longest reason an operator may give for a denial.
pub const MAX_DENIAL_REASON_CHARS: usize = 1_000;

/// When a tool's call waits for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalPolicy {
    /// A condition on the call's arguments (the trigger condition language, whose fields are
    /// paths into the arguments object); absent: every call waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Conditions>,
    /// How long the call waits before it counts as denied.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u32,
}

fn default_timeout() -> u32 {
    DEFAULT_APPROVAL_TIMEOUT_SECONDS
}

impl ApprovalPolicy {
    /// Whether a call with `arguments` waits for a person.
    pub fn applies(&self, arguments: &serde_json::Value) -> bool {
        self.when.as_ref().is_none_or(|c| c.matches(arguments))
    }

    pub fn check(&self, errors: &mut ValidationErrors, at: &str) {
        if !(1..=MAX_APPROVAL_TIMEOUT_SECONDS).contains(&self.timeout_seconds) {
            errors.push(
                format!("{at}/timeoutSeconds"),
                format!("must be 1 to {MAX_APPROVAL_TIMEOUT_SECONDS} seconds (a week)"),
            );
        }
    }
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a person.
    Pending,
    /// Approved: the call runs (with the edited arguments, if any).
    Approved,
    /// Denied with a reason: the model is told, the tool never runs.
    Denied,
    /// Nobody decided within the policy's timeout: a denial.
    Expired,
    /// An operator cancelled the paused turn: the call never runs, no model is asked again, and
    /// the conversation goes to a human.
    Cancelled,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
}

/// One tool call waiting for (or given) a person's decision. Held by the server: the only thing
/// a client sends back is its id and the decision, and the decision applies to exactly this call
/// (its execution, its tool call id and the hash of its arguments).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub approval_id: String,
    pub execution_id: ExecutionId,
    pub session_id: SessionId,
    pub conversation_id: String,
    pub agent_id: AgentId,
    pub tool_use_id: String,
    pub tool: String,
    /// The arguments the model asked for (after any `before_tool` hook).
    pub arguments: serde_json::Value,
    /// SHA-256 (hex) of `arguments` as compact JSON.
    pub arguments_sha256: String,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub status: ApprovalStatus,
    /// The principal who decided (`system` for an expiry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<DateTime<Utc>>,
    /// Why it was denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The arguments the call runs with instead, when the approver edited them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_arguments: Option<serde_json::Value>,
}

impl Approval {
    pub fn is_pending(&self) -> bool {
        self.status == ApprovalStatus::Pending
    }

    /// Whether it has waited past its expiry at `now` without a decision.
    pub fn is_overdue(&self, now: DateTime<Utc>) -> bool {
        self.is_pending() && now >= self.expires_at
    }

    /// What the model reads as the call's result when the call does not run (denied, expired or
    /// cancelled); a cancelled turn's other calls read the same.
    pub fn refusal(&self) -> serde_json::Value {
        let by = self.decided_by.as_deref().unwrap_or("an operator");
        match self.status {
            ApprovalStatus::Expired => serde_json::json!({
                "error": format!("not run: nobody approved this call before {}", self.expires_at.to_rfc3339()),
                "approval": "expired",
            }),
            ApprovalStatus::Cancelled => serde_json::json!({
                "error": format!(
                    "not run: the turn was cancelled by {by} and the conversation handed to a person: {}",
                    self.reason.as_deref().unwrap_or("no reason given")
                ),
                "approval": "cancelled",
            }),
            _ => serde_json::json!({
                "error": format!("not run: denied by {by}: {}", self.reason.as_deref().unwrap_or("no reason given")),
                "approval": "denied",
            }),
        }
    }
}

/// The SHA-256 (hex) an approval binds arguments with.
pub fn arguments_sha256(arguments: &serde_json::Value) -> String {
    crate::recording::sha256_hex(arguments.to_string().as_bytes())
}

/// A turn paused before a tool call that waits for approval, kept in its session until it
/// resumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PausedTurn {
    pub approval: Approval,
    /// The source of the work item whose turn paused (its execution record's).
    pub source_id: String,
    /// The engine's state of the turn (its messages so far, the calls still to run, the record
    /// so far); opaque here.
    pub state: serde_json::Value,
}

/// A piece of work that arrived while its conversation's turn was paused, kept in the session
/// in arrival order and run once the paused turn is done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldMessage {
    pub source_id: String,
    /// The queued work item, as the engine wrote it; opaque here.
    pub item: serde_json::Value,
}

/// Most pieces of work a paused conversation holds; the next is refused (and redelivered by its
/// queue).
pub const MAX_HELD_MESSAGES: usize = 50;

/// `#[serde(with = "crate::approval::through_json")]` for the approval fields of sessions,
/// records, agents and tools: the field's own (de)serialisation is made once, through a JSON
/// value, whatever the outer format (JSON to a client, DynamoDB attribute values to the store),
/// so that the Lambda functions carry one copy of it rather than one per format. The wire form
/// is the same.
pub mod through_json {
    use serde::de::{DeserializeOwned, Error as _};
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
        serde_json::to_value(value).map_err(S::Error::custom)?.serialize(serializer)
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        serde_json::from_value(value).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: serde_json::Value) -> ApprovalPolicy {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_policy_without_a_condition_applies_to_every_call_and_waits_a_day() {
        let p = policy(serde_json::json!({}));
        assert!(p.applies(&serde_json::json!({})));
        assert_eq!(p.timeout_seconds, DEFAULT_APPROVAL_TIMEOUT_SECONDS);
    }

    #[test]
    fn a_condition_reads_the_arguments() {
        let p = policy(serde_json::json!({ "when": { "field": "amount", "operator": "gt", "value": 100 } }));
        assert!(p.applies(&serde_json::json!({ "amount": 250 })));
        assert!(!p.applies(&serde_json::json!({ "amount": 40 })));
        assert!(!p.applies(&serde_json::json!({})), "a missing field matches nothing");
    }

    #[test]
    fn a_timeout_outside_a_second_to_a_week_is_refused_at_its_pointer() {
        for bad in [0, MAX_APPROVAL_TIMEOUT_SECONDS + 1] {
            let mut errors = ValidationErrors::default();
            policy(serde_json::json!({ "timeoutSeconds": bad })).check(&mut errors, "/approval");
            assert_eq!(errors.0[0].pointer, "/approval/timeoutSeconds");
        }
        let bad = serde_json::from_value::<ApprovalPolicy>(serde_json::json!({ "when": { "field": "a" } }));
        assert!(bad.is_err(), "a condition is parsed as a trigger's is");
        assert!(serde_json::from_value::<ApprovalPolicy>(serde_json::json!({ "whenever": true })).is_err());
    }
}
