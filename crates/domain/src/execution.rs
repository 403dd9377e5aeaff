//! Execution records: what one run of the agent loop saw, did and cost. Every run leaves one,
//! whatever its outcome, with an explicit status and, on failure, an error kind.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::cost::Cost;
pub use crate::cost::TokenUsage;
use crate::ids::{AgentId, ExecutionId, SessionId, TenantId, TriggerId};
use crate::recording::{Blob, CallRequest, CallResponse};
use crate::session::{HandoffCause, Priority};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// The agent answered (or chose to say nothing) and the session goes on.
    Success,
    /// The agent handed the conversation to a human or another agent.
    HandedOff,
    /// The agent ended the conversation.
    Ended,
    /// The loop ran out of model calls before a final answer.
    MaxIterations,
    /// A token budget would have been exceeded (a tenant's tokens per day refused the message).
    BudgetExceeded,
    /// The tenant's invocations-per-minute limit refused the message: nothing ran.
    RateLimited,
    Timeout,
    Failed,
    /// Nothing ran: the conversation is owned by a human, or the session is closed.
    Skipped,
    /// A human operator acted on a conversation they own (claimed it, replied, ended it); no
    /// agent ran. Kept as an execution so that the session's history shows who did what.
    Operator,
    /// The turn is paused before a tool call that waits for a person's approval; it resumes on
    /// this execution once decided (see [`crate::approval`]).
    AwaitingApproval,
    /// The message was answered with the messages of its burst, in the turn of another
    /// execution (`coalescedInto`); nothing ran for it alone (see [`crate::burst`]).
    Coalesced,
    /// The turn stopped before its reply because a newer message of the conversation was
    /// queued (`interruptedBy`; its agent's `bursts` is `interrupt`): what it did is kept, it
    /// said nothing, and the conversation's next turn answers its message with its own.
    Interrupted,
    /// No agent ran: the session was closed because its customer went quiet (the session's
    /// status is `abandoned`).
    Abandoned,
}

impl ExecutionStatus {
    /// Every status, in declaration order.
    pub const ALL: [ExecutionStatus; 14] = [
        Self::Success,
        Self::HandedOff,
        Self::Ended,
        Self::MaxIterations,
        Self::BudgetExceeded,
        Self::RateLimited,
        Self::Timeout,
        Self::Failed,
        Self::Skipped,
        Self::Operator,
        Self::AwaitingApproval,
        Self::Coalesced,
        Self::Interrupted,
        Self::Abandoned,
    ];

    /// The status as the API spells it (`handed_off`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::HandedOff => "handed_off",
            Self::Ended => "ended",
            Self::MaxIterations => "max_iterations",
            Self::BudgetExceeded => "budget_exceeded",
            Self::RateLimited => "rate_limited",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Operator => "operator",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Coalesced => "coalesced",
            Self::Interrupted => "interrupted",
            Self::Abandoned => "abandoned",
        }
    }

    /// The status [`as_str`](Self::as_str) spells `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }
}

/// Why an execution failed, coarse enough to alert on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Model,
    Tool,
    Store,
    Config,
    Conflict,
    /// A tenant limit refused the work (`reason` names the limit).
    Limit,
    /// One of the agent's hooks stopped the turn, or failed with `onError: stop`.
    Hook,
    Internal,
}

/// A message a turn answered beside its own ([`ExecutionRecord::coalesced`]), or the one that
/// interrupted a turn ([`ExecutionRecord::interrupted_by`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoalescedMessage {
    pub message_id: String,
    /// Its own execution record's source.
    pub source_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionError {
    pub kind: ErrorKind,
    pub message: String,
    pub retryable: bool,
    /// For a model failure, which one: `unauthorized`, `throttled`, `rejected`, `timeout`,
    /// `unavailable`, or `deadline` (the execution's own time ran out); for kind `limit`, the
    /// tenant limit (`invocationsPerMinute`, `tokensPerDay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ExecutionError {
    /// A failure that another delivery would not change (`retryable` false).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), retryable: false, reason: None }
    }

    pub fn with_reason(mut self, reason: &str) -> Self {
        self.reason = Some(reason.to_owned());
        self
    }
}

/// One tool call the model asked for, and what came of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    pub tool_use_id: String,
    pub name: String,
    pub input: serde_json::Value,
    pub output: serde_json::Value,
    pub is_error: bool,
    /// Key that makes the call's side effect happen at most once.
    pub idempotency_key: String,
    pub latency_ms: u64,
    /// How many model calls of the execution came before it: the call that asked for it is
    /// `modelCalls[afterModelCall - 1]` (0 for a call no model call of this record asked for).
    #[serde(default)]
    pub after_model_call: u32,
    /// For webhook tools: what the call did (never the secret or the bodies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookAudit>,
}

/// The audit of one webhook tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAudit {
    pub host: String,
    /// HTTP status of the last attempt, if any response came back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub attempts: u32,
    pub response_bytes: u64,
    pub truncated: bool,
    /// `ok`, `http_error`, `invalid_arguments`, `blocked`, `timeout`, `connect_error`, `secret_error`.
    pub outcome: String,
}

/// An effect on the outside world that the execution caused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    #[serde(rename_all = "camelCase")]
    Reply { text: String, message_id: String },
    #[serde(rename_all = "camelCase")]
    HandoffToHuman {
        reason: String,
        priority: Priority,
        /// Why it was handed over; absent in a record written before causes were kept (read as
        /// the agent's own choice).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<HandoffCause>,
    },
    #[serde(rename_all = "camelCase")]
    HandoffToAgent { agent_id: AgentId, session_id: SessionId, reason: String },
    #[serde(rename_all = "camelCase")]
    EndConversation { summary: Option<String> },
    #[serde(rename_all = "camelCase")]
    TriggerFlow { flow_id: String },
}

impl Action {
    /// The id of the message a reply sent.
    pub fn message_id(&self) -> Option<&str> {
        match self {
            Action::Reply { message_id, .. } => Some(message_id),
            _ => None,
        }
    }

    /// Whether the conversation leaves the agent with this action (a handoff, an end).
    pub fn is_terminal(&self) -> bool {
        matches!(self, Action::HandoffToHuman { .. } | Action::HandoffToAgent { .. } | Action::EndConversation { .. })
    }
}

/// One model call: which model answered, how, at what cost, and (by reference) what it was sent
/// and what it said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCallRecord {
    /// The model that answered (`provider:id` as the provider named it).
    pub model: String,
    pub stop_reason: String,
    pub usage: TokenUsage,
    /// What the call cost at the execution's price table; `null` when the table has no price
    /// for the model.
    #[serde(default)]
    pub cost_usd: Option<Cost>,
    /// From the first model tried to the answer, fallbacks included.
    pub latency_ms: u64,
    /// The models tried before this one answered, in order, and why each failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_from: Vec<ModelFailure>,
    /// Why the call was made when it was not the agent's own turn: `summary` (folding older
    /// messages into the session's summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// What the model was sent, by reference to the session's content (absent when the tenant's
    /// `recording` is `off`, or for a record written before requests were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<CallRequest>,
    /// What the model answered, by reference (absent as `request` is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<CallResponse>,
    /// The bytes `request` and `response` point at, from the call until the turn's commit takes
    /// them into the session's content store; never part of the record itself.
    #[serde(skip)]
    pub content: Vec<Blob>,
}

/// A model of the fallback chain that did not answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelFailure {
    /// The reference as the agent names it.
    pub model: String,
    /// `throttled`, `unavailable` or `timeout`.
    pub error: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionRecord {
    pub tenant_id: TenantId,
    pub execution_id: ExecutionId,
    pub session_id: SessionId,
    pub agent_id: AgentId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<TriggerId>,
    /// The traffic-split variant of the session's conversation, if a split assigned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<crate::trigger::Assignment>,
    /// The inbound event (or manual invocation) this run answers; unique per tenant.
    pub source_id: String,
    pub input: serde_json::Value,
    pub status: ExecutionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ExecutionError>,
    pub iterations: u32,
    pub model_calls: Vec<ModelCallRecord>,
    pub tool_calls: Vec<ToolCallRecord>,
    /// The agent's hooks called in this execution, in call order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hook_calls: Vec<crate::hook::HookCall>,
    /// The approvals its tool calls waited for, decided, in the order asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::approval::through_json")]
    pub approvals: Vec<crate::approval::Approval>,
    pub actions: Vec<Action>,
    /// Everything this execution used, its sub-agents' calls included.
    pub token_usage: TokenUsage,
    /// What every model call cost, sub-agents included; `null` when any of them has no price.
    #[serde(default)]
    pub cost_usd: Option<Cost>,
    /// The price table the costs were taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_version: Option<String>,
    /// The versions of the configuration the turn ran with; `None` for a record written without
    /// a turn, or before versions were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_with: Option<RanWith>,
    pub latency_ms: u64,
    /// A supervisor's sub-agent runs, one per call, in call order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildExecution>,
    /// The earlier messages this turn answered with its own, in order: those of its burst
    /// (their records say `coalesced`) or of the turns a newer message interrupted (their
    /// records say `interrupted`); empty for a turn of one message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coalesced: Vec<CoalescedMessage>,
    /// For an `interrupted` record: the newer message of the conversation that stopped the turn
    /// before its reply (the conversation's next turn answers both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<CoalescedMessage>,
    /// For a `coalesced` record: the execution whose turn answered the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesced_into: Option<ExecutionId>,
    pub created_at: DateTime<Utc>,
    /// After this the record may be deleted from the primary store; readers ignore expired ones.
    pub expires_at: DateTime<Utc>,
}

/// The versions of the configuration an execution ran with, so that an answer can be traced to the
/// prompt, routing and tools that gave it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RanWith {
    pub agent: u64,
    /// The trigger routing matched; `None` for an invoke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<u64>,
    /// Each custom tool the agent had, by id.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tools: std::collections::BTreeMap<String, u64>,
}

/// One sub-agent run requested by a supervisor: its own loop in its own context, recorded inside
/// the supervisor's execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildExecution {
    /// The supervisor's tool call this run answered.
    pub tool_use_id: String,
    pub agent_id: AgentId,
    /// `success`, `max_iterations` or `failed`.
    pub status: ExecutionStatus,
    /// What the supervisor passed: the task and any context.
    pub input: serde_json::Value,
    /// The sub-agent's final answer, returned to the supervisor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ExecutionError>,
    pub iterations: u32,
    pub model_calls: Vec<ModelCallRecord>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub token_usage: TokenUsage,
    pub latency_ms: u64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_status_is_spelled_as_serde_spells_it_and_read_back() {
        for status in ExecutionStatus::ALL {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
            assert_eq!(ExecutionStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(ExecutionStatus::parse("succeeded"), None);
    }
}
