//! Following a turn while it runs: what a streamed `agents.invoke` shows. The executor asks the
//! profile's [`Progress`] for a [`Follower`] of the item it is about to run; nobody following
//! (the usual case) costs nothing — no events are built, and models are called without
//! streaming.
//!
//! The events, their names and fields are a contract (`contracts/invoke-stream.md`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use switchboard_domain::{Action, AgentId, ExecutionId, SessionId, TokenUsage};

use super::WorkItem;

/// One thing that happened during a turn, in the order it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum TurnEvent {
    /// The turn began (again, if a second one comes: the session changed under the first, whose
    /// events are void; side effects it made are not repeated).
    #[serde(rename = "execution.started", rename_all = "camelCase")]
    ExecutionStarted { execution_id: ExecutionId, session_id: SessionId, agent_id: AgentId, conversation_id: String },
    /// The agent's model call `index` (its place in the record's `modelCalls`) began.
    #[serde(rename = "model.started", rename_all = "camelCase")]
    ModelStarted { index: usize, model: String },
    /// Text the model wrote, as it wrote it (whole, once the answer is in, for a provider that
    /// does not stream).
    #[serde(rename = "text.delta", rename_all = "camelCase")]
    TextDelta { index: usize, text: String },
    /// An attempt failed and is being made again: the call's text so far is void.
    #[serde(rename = "model.retried", rename_all = "camelCase")]
    ModelRetried { index: usize, model: String, error: String },
    /// The model failed for good (a fallback model, if any, starts next with the same index).
    #[serde(rename = "model.failed", rename_all = "camelCase")]
    ModelFailed { index: usize, model: String, error: String },
    #[serde(rename = "model.finished", rename_all = "camelCase")]
    ModelFinished { index: usize, model: String, stop_reason: String, usage: TokenUsage, latency_ms: u64 },
    #[serde(rename = "tool.started", rename_all = "camelCase")]
    ToolStarted { tool_use_id: String, name: String },
    /// `outcome` is the webhook's (`ok`, `http_error`, `timeout`, …) for a webhook tool.
    #[serde(rename = "tool.finished", rename_all = "camelCase")]
    ToolFinished {
        tool_use_id: String,
        name: String,
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<String>,
        latency_ms: u64,
    },
    /// An effect on the outside world, as the record's `actions` will hold it: a reply sent, a
    /// handoff, the conversation ended, a flow triggered.
    #[serde(rename = "action")]
    Action { action: Action },
}

impl TurnEvent {
    /// The event's name (its `event` field).
    pub fn name(&self) -> &'static str {
        match self {
            Self::ExecutionStarted { .. } => "execution.started",
            Self::ModelStarted { .. } => "model.started",
            Self::TextDelta { .. } => "text.delta",
            Self::ModelRetried { .. } => "model.retried",
            Self::ModelFailed { .. } => "model.failed",
            Self::ModelFinished { .. } => "model.finished",
            Self::ToolStarted { .. } => "tool.started",
            Self::ToolFinished { .. } => "tool.finished",
            Self::Action { .. } => "action",
        }
    }
}

/// Where one turn's events go. Sending never blocks and never fails the turn: a follower that
/// went away (a client that disconnected) just stops receiving.
#[derive(Clone)]
pub struct Follower(Arc<dyn Fn(TurnEvent) + Send + Sync>);

impl Follower {
    pub fn new(send: impl Fn(TurnEvent) + Send + Sync + 'static) -> Self {
        Self(Arc::new(send))
    }

    pub fn send(&self, event: TurnEvent) {
        (self.0)(event);
    }
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Follower")
    }
}

/// Who follows which turn.
pub trait Progress: Send + Sync {
    /// The follower of `item`'s turn, if anyone follows it.
    fn follower(&self, item: &WorkItem) -> Option<Follower>;
}
