//! A turn paused before a tool call that waits for a person's approval: what the session keeps
//! of it (the turn's messages so far, the calls of the paused batch, the results of those that
//! ran), the approval it asks for, and what a decision makes of the waiting call. The turn itself
//! pauses and resumes in `turn`; the executor holds the conversation's next messages meanwhile.

use serde::{Deserialize, Serialize};
use serde_json::json;
use switchboard_domain::approval::arguments_sha256;
use switchboard_domain::message::{ContentBlock, Message};
use switchboard_domain::{
    AgentId, Approval, ApprovalPolicy, ApprovalStatus, ErrorKind, ExecutionId, PausedTurn, Session, ToolCallRecord,
};

use crate::fault::ExecError;
use crate::ports::{Deps, WorkItem};
use crate::tools::{Called, ToolCall, ToolOutcome};

/// The turn's state at the pause, kept in the session as [`PausedTurn::state`].
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Snapshot {
    /// The work item whose turn paused: what its resumption is made of.
    pub item: WorkItem,
    /// What the turn adds to the transcript so far: the customer's message first, the answer
    /// holding the paused batch's calls last.
    pub new_messages: Vec<Message>,
    /// The batch's results so far, as the model reads them and as the transcript keeps them.
    pub results: Vec<ContentBlock>,
    pub stored: Vec<ContentBlock>,
    /// The call that waits (its `before_tool` hooks ran).
    pub waiting: ToolCall,
    /// The batch's calls after it, with a sub-agent's answer where the call was one.
    pub rest: Vec<(ToolCall, Option<ToolOutcome>)>,
    /// Tool calls keyed so far in the turn.
    pub calls: usize,
    pub reconfigure: bool,
    pub replies_sent: u32,
    /// The waiting tool's parameters, which edited arguments must meet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
}

impl Snapshot {
    pub(crate) fn read(state: serde_json::Value) -> Result<Self, ExecError> {
        serde_json::from_value(state).map_err(|e| {
            ExecError::new(ErrorKind::Internal, format!("the paused turn's state cannot be read: {e}"), false)
        })
    }
}

/// A turn pausing: the approval it asks for and its state.
pub(super) struct Pause {
    pub approval: Approval,
    pub snapshot: Snapshot,
}

impl Pause {
    pub fn into_paused_turn(self, source_id: &str) -> Result<PausedTurn, ExecError> {
        let state = serde_json::to_value(&self.snapshot).map_err(|e| {
            ExecError::new(ErrorKind::Internal, format!("the paused turn's state cannot be written: {e}"), false)
        })?;
        Ok(PausedTurn { approval: self.approval, source_id: source_id.to_owned(), state })
    }
}

/// The approval `call` waits for under `policy`.
pub(super) fn request(
    deps: &Deps,
    session: &Session,
    agent_id: AgentId,
    execution_id: ExecutionId,
    call: &ToolCall,
    policy: &ApprovalPolicy,
) -> Approval {
    let now = deps.clock.now();
    Approval {
        approval_id: ulid::Ulid::generate().to_string(),
        execution_id,
        session_id: session.session_id,
        conversation_id: session.conversation_id.clone(),
        agent_id,
        tool_use_id: call.tool_use_id.clone(),
        tool: call.name.clone(),
        arguments: call.input.clone(),
        arguments_sha256: arguments_sha256(&call.input),
        requested_at: now,
        expires_at: now + chrono::Duration::seconds(i64::from(policy.timeout_seconds)),
        status: ApprovalStatus::Pending,
        decided_by: None,
        decided_at: None,
        reason: None,
        edited_arguments: None,
    }
}

/// The detail of `approval.requested` (besides the session's ids).
pub(super) fn requested_event(a: &Approval) -> serde_json::Value {
    json!({
        "approvalId": a.approval_id,
        "executionId": a.execution_id,
        "toolUseId": a.tool_use_id,
        "tool": a.tool,
        "arguments": a.arguments,
        "expiresAt": a.expires_at,
    })
}

/// The detail of `approval.resolved` (besides the session's ids).
pub(super) fn resolved_event(a: &Approval) -> serde_json::Value {
    let mut detail = json!({
        "approvalId": a.approval_id,
        "executionId": a.execution_id,
        "toolUseId": a.tool_use_id,
        "tool": a.tool,
        "status": a.status,
        "decidedBy": a.decided_by,
        "decidedAt": a.decided_at,
    });
    if let Some(reason) = &a.reason {
        detail["reason"] = json!(reason);
    }
    if a.edited_arguments.is_some() {
        detail["edited"] = json!(true);
    }
    detail
}

/// The waiting call, denied or expired: the tool never runs, and the model reads why.
pub(super) fn refused(call: ToolCall, approval: &Approval) -> Called {
    let outcome = ToolOutcome { output: approval.refusal(), is_error: true };
    let record = ToolCallRecord {
        tool_use_id: call.tool_use_id,
        name: call.name,
        input: call.input,
        output: outcome.output.clone(),
        is_error: true,
        idempotency_key: call.key,
        latency_ms: 0,
        after_model_call: 0,
        webhook: None,
    };
    Called { outcome, record, reconfigure: false, stored: None }
}
