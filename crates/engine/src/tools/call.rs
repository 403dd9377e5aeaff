//! What a tool call is made of and gives back: the vocabulary shared by the dispatcher and every
//! tool family. The turn state tools change is the session moves' (`crate::moves::TurnState`).

use serde_json::{Value, json};
use switchboard_domain::{ExecutionId, ToolCallRecord};

use crate::ports::{Deps, WorkItem};

/// What a tool call gives back to the model; `is_error` tells it the call did not work.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
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

/// One tool call as the model made it, with the idempotency key the engine gave it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
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
