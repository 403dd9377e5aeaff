//! What a tool call is made of and gives back, and the turn state tools change: the vocabulary
//! shared by the dispatcher and every tool family.

use serde_json::{Value, json};
use switchboard_domain::{Action, ExecutionId, Session, ToolCallRecord};

use crate::ports::{Deps, WorkItem};

/// What a tool call gives back to the model; `is_error` tells it the call did not work.
#[derive(Debug)]
pub(crate) struct ToolOutcome {
    pub output: Value,
    pub is_error: bool,
}

impl ToolOutcome {
    pub fn ok(output: Value) -> Self {
        Self { output, is_error: false }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Self { output: json!({ "error": message.into() }), is_error: true }
    }
}

/// State the tools change during one turn.
#[derive(Debug)]
pub(crate) struct TurnState {
    pub session: Session,
    /// A session created by `handoff_to_agent`, committed with the turn.
    pub new_session: Option<Session>,
    pub actions: Vec<Action>,
    pub replies_sent: u32,
    /// Set by a terminal tool: the loop stops after the current batch of calls.
    pub finished: bool,
}

impl TurnState {
    pub fn new(session: Session) -> Self {
        Self { session, new_session: None, actions: vec![], replies_sent: 0, finished: false }
    }
}

/// One tool call as the model made it, with the idempotency key the engine gave it.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub tool_use_id: String,
    pub name: String,
    pub input: Value,
    pub key: String,
}

/// Where a call runs: the work item and the execution it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallContext<'a> {
    pub deps: &'a Deps,
    pub item: &'a WorkItem,
    pub execution_id: ExecutionId,
    /// When the execution must stop (see `Executor::execute_by`).
    pub deadline: Option<std::time::Instant>,
}

/// What the dispatcher did with a call.
#[derive(Debug)]
pub(crate) struct Called {
    pub outcome: ToolOutcome,
    pub record: ToolCallRecord,
    /// The call changed the toolbox (a step transition, a loaded skill, a first result kept for
    /// `recall_details`): rebuild it before the next model call.
    pub reconfigure: bool,
    /// What the stored transcript keeps instead of the output the model was shown (a
    /// `recall_details` result).
    pub stored: Option<Value>,
}
