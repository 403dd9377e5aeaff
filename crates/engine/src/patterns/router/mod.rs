//! The router pattern: a `router` agent answers nothing itself. One classification call picks
//! which of its candidates (`subAgents`) should take the conversation — the model must call
//! `choose_agent` with one of the listed ids — and the conversation is handed to that agent,
//! which answers the same message in its own session. An invalid pick (no call, an id that is
//! not a candidate, a refused request) falls back to the router's `defaultAgentId`.
//!
//! A router with `fanOut` instead picks up to `maxAgents` candidates (`choose_agents`, best
//! first); each answers the customer's message at once in its own context, as a supervisor's
//! sub-agent does (a child execution each), and the router replies from what came back: one
//! more call of its model writes one reply from every answer (`synthesize`), or the first
//! answer in its order of preference is sent as it is (`first_success`). An agent that fails is
//! recorded as such and the others' answers are kept; when none answers, the turn fails (and
//! the agent's `onFailure` answers the customer).

use std::time::Instant;

use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::message::{ContentBlock, Message};
use switchboard_domain::{
    Agent, AgentId, AgentStatus, ErrorKind, ExecutionError, ExecutionRecord, ExecutionStatus, ToolCallRecord,
};

use crate::fault::ExecError;
use crate::model_call::{converse, elapsed_ms};
use crate::moves::{AgentHandoff, RequestedBy, TurnState};
use crate::ports::{ModelRequest, ToolSpec};
use crate::tools::CallContext;

/// How a router's turn ended: its status, its error if it failed, and what it said to the
/// customer itself (a fan-out's reply), for the session's transcript.
pub(crate) struct Routed {
    pub status: ExecutionStatus,
    pub failure: Option<ExecutionError>,
    pub said: Option<Message>,
}

impl Routed {
    fn failed(kind: ErrorKind, message: &str) -> Self {
        Routed { status: ExecutionStatus::Failed, failure: Some(ExecutionError::new(kind, message)), said: None }
    }
}

/// A router agent's whole turn: classify, then hand the conversation to the pick (or the
/// default), or, with a fan-out, ask several and reply from their answers.
pub(crate) async fn route(
    cx: CallContext<'_>,
    router: &Agent,
    state: &mut TurnState,
    record: &mut ExecutionRecord,
    messages: Vec<Message>,
) -> Result<Routed, ExecError> {
    let key = format!("{}/route", cx.item.source_id);
    if let Some(fan) = &router.fan_out {
        return fan_out::run(cx, router, fan, state, record, messages, &key).await;
    }
    let pick = classify(cx, router, messages, record, &key).await?;
    let Some(target) = pick.target else {
        return Ok(Routed::failed(
            ErrorKind::Config,
            "the router has no valid pick and its default agent is not active",
        ));
    };
    let relevant_info = pick.fallback.map_or(Value::Null, |why| json!({ "routerFallback": why }));
    let handoff = AgentHandoff { target, reason: pick.reason, summary: None, relevant_info, by: RequestedBy::Agent };
    Ok(match state.hand_off_to_agent(cx.deps, cx.item, handoff, &key).await? {
        Ok(_) => Routed { status: ExecutionStatus::Success, failure: None, said: None },
        // Worded as the handoff tool's error result would be.
        Err(refused) => Routed::failed(ErrorKind::Config, &json!({ "error": refused.to_string() }).to_string()),
    })
}

mod fan_out;

/// The one tool of the classification call.
pub(crate) const CHOOSE_AGENT: &str = "choose_agent";

/// The router's decision.
pub(crate) struct Pick {
    /// `None` when neither the pick nor the default agent can take the conversation.
    pub target: Option<AgentId>,
    pub reason: String,
    /// Why the model's pick was not used, when the default was.
    pub fallback: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Choice {
    agent_id: String,
    #[serde(default)]
    reason: Option<String>,
}

/// Makes the classification call for `messages` (the history window and the new message) and
/// records it — model call and `choose_agent` call — in `record`.
async fn classify(
    cx: CallContext<'_>,
    router: &Agent,
    messages: Vec<Message>,
    record: &mut ExecutionRecord,
    key: &str,
) -> Result<Pick, ExecError> {
    let candidates = candidates(cx, router).await?;
    let request = classification_request(cx, router, &candidates, messages);
    let started = Instant::now();
    record.iterations = 1;
    // The same model-call step as every turn: fallbacks, the deadline, the call's record.
    let answer = converse(cx.deps, &request, &mut record.token_usage, &mut record.model_calls, None).await?;
    let (tool_use_id, input, verdict) = match answer {
        Err(e) => (String::new(), Value::Null, Err(format!("the classification call failed: {}", e.message))),
        Ok(message) => read_choice(&message, &candidates),
    };
    let default = router.default_agent_id.filter(|d| candidates.iter().any(|a| a.agent_id == *d));
    let pick = match verdict {
        Ok((target, reason)) => Pick { target: Some(target), reason, fallback: None },
        Err(why) => {
            tracing::info!(router = %router.agent_id, %why, "router pick invalid; using the default agent");
            Pick { target: default, reason: format!("router fallback: {why}"), fallback: Some(why) }
        }
    };
    let output = match (&pick.target, &pick.fallback) {
        (Some(t), None) => json!({ "agentId": t }),
        (Some(t), Some(why)) => json!({ "agentId": t, "fallback": why }),
        (None, _) => json!({ "error": "no valid pick and the default agent is not active" }),
    };
    record.tool_calls.push(ToolCallRecord {
        tool_use_id,
        name: CHOOSE_AGENT.to_owned(),
        input,
        is_error: pick.fallback.is_some(),
        output,
        idempotency_key: key.to_owned(),
        latency_ms: elapsed_ms(started),
        after_model_call: u32::try_from(record.model_calls.len()).unwrap_or(u32::MAX),
        webhook: None,
    });
    Ok(pick)
}

/// The router's sub-agents that are active, in its order.
pub(super) async fn candidates(cx: CallContext<'_>, router: &Agent) -> Result<Vec<Agent>, ExecError> {
    let mut candidates = Vec::new();
    for id in &router.sub_agents {
        if let Some(a) = cx.deps.config.get_agent(&router.tenant_id, *id).await?
            && a.status == AgentStatus::Active
        {
            candidates.push(a);
        }
    }
    Ok(candidates)
}

/// The classification call: the router's prompt with the candidates listed, and `choose_agent`
/// as its one tool, the candidates' ids its only allowed values.
fn classification_request(
    cx: CallContext<'_>,
    router: &Agent,
    candidates: &[Agent],
    messages: Vec<Message>,
) -> ModelRequest {
    let mut system = router.system_prompt.trim().to_owned();
    system.push_str("\n\n## Agents you can route to\n");
    for a in candidates {
        let about = if a.description.trim().is_empty() { a.name.as_str() } else { a.description.as_str() };
        system.push_str(&format!("- {} ({}): {about}\n", a.agent_id, a.name));
    }
    system.push_str(&format!("Call {CHOOSE_AGENT} with the id of the agent that should answer this conversation."));
    let ids: Vec<String> = candidates.iter().map(|a| a.agent_id.to_string()).collect();
    ModelRequest {
        model: router.model.clone(),
        system,
        messages,
        deadline: cx.deadline,
        tools: vec![ToolSpec {
            name: CHOOSE_AGENT.to_owned(),
            description: "Pick the agent that should take this conversation.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "agentId": { "type": "string", "enum": ids },
                    "reason": { "type": "string" }
                },
                "required": ["agentId"],
                "additionalProperties": false
            }),
        }],
        config: router.model_config.clone(),
        recording: cx.item.recording,
    }
}

/// The id and input of the model's call of `tool` in `message`, if it made one.
fn tool_call(message: &Message, tool: &str) -> Option<(String, Value)> {
    message.content.iter().find_map(|b| match b {
        ContentBlock::ToolUse { tool_use_id, name, input } if name == tool => {
            Some((tool_use_id.clone(), input.clone()))
        }
        _ => None,
    })
}

/// The model's `choose_agent` call in `message` — its id and input — and the candidate it
/// picked with the reason, or why the pick cannot be used.
fn read_choice(message: &Message, candidates: &[Agent]) -> (String, Value, Result<(AgentId, String), String>) {
    let Some((id, input)) = tool_call(message, CHOOSE_AGENT) else {
        return (String::new(), Value::Null, Err(format!("the model did not call {CHOOSE_AGENT}")));
    };
    let verdict = match serde_json::from_value::<Choice>(input.clone()) {
        Err(e) => Err(format!("invalid {CHOOSE_AGENT} arguments: {e}")),
        Ok(c) => match candidates.iter().find(|a| a.agent_id.to_string() == c.agent_id) {
            Some(a) => Ok((a.agent_id, c.reason.unwrap_or_else(|| format!("routed to {}", a.name)))),
            None => Err(format!("'{}' is not one of the candidates", c.agent_id)),
        },
    };
    (id, input, verdict)
}
