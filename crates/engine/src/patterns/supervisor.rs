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
use switchboard_domain::{Agent, ChildExecution, ErrorKind, ExecutionError, ExecutionStatus, Session, TokenUsage};

use crate::fault::ExecError;
use crate::model_call::{converse, elapsed_ms};
use crate::moves::TurnState;
use crate::ports::ModelRequest;
use crate::tools::{CallContext, ToolCall, ToolOutcome, Toolbox};

/// The heading every sub-agent's system prompt carries (a supervisor's sub-agents, a router's
/// fan-out picks): how a request is known to be a sub-agent's (a replay answers it from the
/// sub-agent's recorded run only).
pub const SUB_AGENT_HEADING: &str = "## Working for a supervisor";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Task {
    task: String,
    #[serde(default)]
    context: Option<serde_json::Map<String, Value>>,
}

/// Runs one sub-agent to its final answer. A retryable model failure fails the whole item (it
/// is redelivered, as for the supervisor's own calls); anything else is an error result for the
/// supervisor, recorded in the child.
/// `call.key` is the call's idempotency key; the sub-agent's own tool calls extend it.
pub(crate) async fn run(
    cx: CallContext<'_>,
    session: &Session,
    sub: &Agent,
    call: &ToolCall,
) -> Result<(ToolOutcome, Option<ChildExecution>), ExecError> {
    let started = Instant::now();
    let task = match serde_json::from_value::<Task>(call.input.clone()) {
        Ok(t) if !t.task.trim().is_empty() => t,
        Ok(_) => return Ok((ToolOutcome::error("task must not be empty"), None)),
        Err(e) => return Ok((ToolOutcome::error(format!("invalid arguments: {e}")), None)),
    };
    let mut child = ChildExecution {
        tool_use_id: call.tool_use_id.clone(),
        agent_id: sub.agent_id,
        status: ExecutionStatus::MaxIterations,
        input: call.input.clone(),
        result: None,
        error: None,
        iterations: 0,
        model_calls: vec![],
        tool_calls: vec![],
        token_usage: TokenUsage::default(),
        latency_ms: 0,
    };
    let tools = Toolbox::for_sub_agent(cx.deps, sub).await?;
    let mut request = request(cx, sub, task, &tools);
    // The sub-agent only reads the session (its tools are webhooks): a scratch copy.
    let mut scratch = TurnState::new(session.clone());
    let mut calls = 0usize;
    while child.iterations < sub.max_iterations {
        child.iterations += 1;
        let answer = converse(cx.deps, &request, &mut child.token_usage, &mut child.model_calls, None).await?;
        let assistant = match answer {
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
            let called = tools.call(cx, &mut scratch, ToolCall { tool_use_id, name, input, key }, None).await?;
            results.push(ContentBlock::ToolResult {
                tool_use_id: called.record.tool_use_id.clone(),
                content: called.outcome.output,
                is_error: called.outcome.is_error,
            });
            let mut done = called.record;
            done.after_model_call = u32::try_from(child.model_calls.len()).unwrap_or(u32::MAX);
            child.tool_calls.push(done);
        }
        request.messages.push(Message { role: Role::User, content: results });
    }
    Ok(finish(child, sub, started))
}

/// The sub-agent's first model call: its own prompt, told it works for a supervisor, and the
/// task with the context the supervisor passed — nothing of the conversation.
fn request(cx: CallContext<'_>, sub: &Agent, task: Task, tools: &Toolbox) -> ModelRequest {
    let mut text = task.task;
    if let Some(context) = task.context.filter(|c| !c.is_empty()) {
        text.push_str("\n\nContext: ");
        text.push_str(&Value::Object(context).to_string());
    }
    ModelRequest {
        model: sub.model.clone(),
        system: format!(
            "{}\n\n{SUB_AGENT_HEADING}\nAnother agent asked you for this. Answer with the result only; \
             you are not talking to the customer.",
            sub.system_prompt.trim()
        ),
        messages: vec![Message::user_text(text)],
        tools: tools.specs(),
        config: sub.model_config.clone(),
        deadline: cx.deadline,
        recording: cx.item.recording,
    }
}

/// The child's record once its loop has stopped, and what the supervisor is told.
fn finish(mut child: ChildExecution, sub: &Agent, started: Instant) -> (ToolOutcome, Option<ChildExecution>) {
    if child.status == ExecutionStatus::MaxIterations {
        child.error = Some(ExecutionError::new(
            ErrorKind::Model,
            format!("no final answer after {} model calls", sub.max_iterations),
        ));
    }
    child.latency_ms = elapsed_ms(started);
    let outcome = match (&child.result, &child.error) {
        (Some(result), _) => ToolOutcome::ok(json!({ "agent": sub.name, "result": result })),
        (None, Some(e)) => ToolOutcome::error(format!("the {} agent did not finish: {}", sub.name, e.message)),
        (None, None) => ToolOutcome::error(format!("the {} agent gave no answer", sub.name)),
    };
    (outcome, Some(child))
}
