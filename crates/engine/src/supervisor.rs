//! The supervisor pattern: a supervisor calls its sub-agents as tools. Each call runs the
//! sub-agent's own loop in an isolated context — its own system prompt and the task and context
//! the supervisor passed, nothing of the conversation — with its webhook tools only: a sub-agent
//! cannot talk to the customer, hand off or end the conversation; the supervisor does that with
//! the answers it gets back. Calls of one model turn run concurrently; each becomes a child
//! execution in the supervisor's record.

use std::time::Instant;

use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_domain::{
    Agent, ChildExecution, ErrorKind, ExecutionError, ExecutionId, ExecutionStatus, Session, TokenUsage, ToolCallRecord,
};

use crate::executor::{ExecError, converse, elapsed_ms};
use crate::ports::{Deps, ModelRequest, WorkItem};
use crate::system_tools::ToolOutcome;
use crate::webhook_tools;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Task {
    task: String,
    #[serde(default)]
    context: Option<serde_json::Map<String, Value>>,
}

/// One sub-agent call as the supervisor's loop made it.
pub(crate) struct SubAgentCall<'a> {
    pub tool_use_id: String,
    pub agent: &'a Agent,
    pub input: Value,
    /// The call's idempotency key; the sub-agent's own tool calls extend it.
    pub key: String,
}

/// Runs one sub-agent to its final answer. A retryable model failure fails the whole item (it
/// is redelivered, as for the supervisor's own calls); anything else is an error result for the
/// supervisor, recorded in the child.
pub(crate) async fn run(
    deps: &Deps,
    item: &WorkItem,
    session: &Session,
    execution_id: ExecutionId,
    call: SubAgentCall<'_>,
) -> Result<(ToolOutcome, Option<ChildExecution>), ExecError> {
    let started = Instant::now();
    let sub = call.agent;
    let task = match serde_json::from_value::<Task>(call.input.clone()) {
        Ok(t) if !t.task.trim().is_empty() => t,
        Ok(_) => return Ok((error("task must not be empty"), None)),
        Err(e) => return Ok((error(format!("invalid arguments: {e}")), None)),
    };
    let mut child = ChildExecution {
        tool_use_id: call.tool_use_id,
        agent_id: sub.agent_id,
        status: ExecutionStatus::MaxIterations,
        input: call.input,
        result: None,
        error: None,
        iterations: 0,
        model_calls: vec![],
        tool_calls: vec![],
        token_usage: TokenUsage::default(),
        latency_ms: 0,
    };
    let mut text = task.task;
    if let Some(context) = task.context.filter(|c| !c.is_empty()) {
        text.push_str("\n\nContext: ");
        text.push_str(&Value::Object(context).to_string());
    }
    let custom = webhook_tools::load(deps, sub, &sub.tools).await?;
    let mut request = ModelRequest {
        model: sub.model.clone(),
        system: format!(
            "{}\n\n## Working for a supervisor\nAnother agent asked you for this. Answer with the result only; \
             you are not talking to the customer.",
            sub.system_prompt.trim()
        ),
        messages: vec![Message::user_text(text)],
        tools: custom.iter().map(webhook_tools::spec).collect(),
        config: sub.model_config.clone(),
    };
    let mut calls = 0usize;
    while child.iterations < sub.max_iterations {
        child.iterations += 1;
        let assistant = match converse(deps, &request, &mut child.token_usage, &mut child.model_calls).await? {
            Ok(message) => message,
            Err(e) => {
                child.status = ExecutionStatus::Failed;
                child.error = Some(e);
                break;
            }
        };
        let uses = assistant.tool_uses();
        let answer = assistant.text();
        request.messages.push(assistant);
        if uses.is_empty() {
            child.status = ExecutionStatus::Success;
            child.result = Some(answer);
            break;
        }
        let mut results = Vec::with_capacity(uses.len());
        for (tool_use_id, name, input) in uses {
            let key = format!("{}/{calls}", call.key);
            calls += 1;
            let call_started = Instant::now();
            let (outcome, webhook) = match custom.iter().find(|t| t.name == name) {
                Some(tool) => {
                    let (o, audit) = webhook_tools::run(deps, item, session, execution_id, tool, &input, &key).await;
                    (o, Some(audit))
                }
                None => (error(format!("tool '{name}' is not available to a sub-agent")), None),
            };
            child.tool_calls.push(ToolCallRecord {
                tool_use_id: tool_use_id.clone(),
                name,
                input,
                output: outcome.output.clone(),
                is_error: outcome.is_error,
                idempotency_key: key,
                latency_ms: elapsed_ms(call_started),
                webhook,
            });
            results.push(ContentBlock::ToolResult { tool_use_id, content: outcome.output, is_error: outcome.is_error });
        }
        request.messages.push(Message { role: Role::User, content: results });
    }
    if child.status == ExecutionStatus::MaxIterations {
        child.error = Some(ExecutionError {
            kind: ErrorKind::Model,
            message: format!("no final answer after {} model calls", sub.max_iterations),
            retryable: false,
        });
    }
    child.latency_ms = elapsed_ms(started);
    let outcome = match (&child.result, &child.error) {
        (Some(result), _) => ToolOutcome { output: json!({ "agent": sub.name, "result": result }), is_error: false },
        (None, Some(e)) => error(format!("the {} agent did not finish: {}", sub.name, e.message)),
        (None, None) => error(format!("the {} agent gave no answer", sub.name)),
    };
    Ok((outcome, Some(child)))
}

fn error(message: impl Into<String>) -> ToolOutcome {
    ToolOutcome { output: json!({ "error": message.into() }), is_error: true }
}
