//! The system tools (`send_message`, the handoffs, `end_conversation`, `trigger_flow`,
//! `set_context`, `get_context`, `recall_details`): their arguments, checked against the tool's
//! schema (typed, unknown fields refused), and their results. What a call does to the session
//! and the outside world is a session move (`crate::moves`); a bad call or a refused move becomes
//! an error result for the model, never a failure of the execution.

use serde::Deserialize;
use serde_json::json;
use switchboard_domain::event::detail_type;
use switchboard_domain::limits::{MAX_MEMORY_KEYS, MAX_MEMORY_VALUE_BYTES};
use switchboard_domain::{Action, AgentId, Priority, SystemTool};

use super::call::ToolOutcome;
use crate::fault::ToolFault;
use crate::moves::{AgentHandoff, RequestedBy, TurnState};
use crate::ports::{Deps, WorkItem};

fn args<T: for<'de> Deserialize<'de>>(tool: SystemTool, input: &serde_json::Value) -> Result<T, ToolOutcome> {
    serde_json::from_value(input.clone()).map_err(|e| ToolOutcome::error(format!("invalid arguments for {tool}: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendMessage {
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HandoffToHuman {
    reason: String,
    #[serde(default)]
    priority: Option<Priority>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HandoffToAgent {
    agent_id: String,
    reason: String,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    context: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndConversation {
    #[serde(default)]
    summary: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TriggerFlow {
    flow_id: String,
    #[serde(default)]
    input: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetContext {
    key: String,
    value: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetContext {
    #[serde(default)]
    key: Option<String>,
}

/// Runs one system tool call. `key` is the call's idempotency key (stable across redeliveries).
pub(crate) async fn run(
    deps: &Deps,
    item: &WorkItem,
    state: &mut TurnState,
    tool: SystemTool,
    input: &serde_json::Value,
    key: &str,
) -> Result<ToolOutcome, ToolFault> {
    let outcome = match tool {
        SystemTool::RecallDetails => super::recall::recall(&state.session, input),
        SystemTool::SendMessage => match args::<SendMessage>(tool, input) {
            Err(e) => e,
            Ok(a) => match state.reply(deps, &a.text, key).await? {
                // Sent before in other words (this work is running again): the model is told
                // what the customer read.
                Ok((message_id, sent)) if sent != a.text => {
                    ToolOutcome::ok(json!({ "messageId": message_id, "textSent": sent }))
                }
                Ok((message_id, _)) => ToolOutcome::ok(json!({ "messageId": message_id })),
                Err(refused) => ToolOutcome::error(refused.to_string()),
            },
        },
        SystemTool::SetContext => match args::<SetContext>(tool, input) {
            Err(e) => e,
            Ok(a) => set_context(state, a),
        },
        SystemTool::GetContext => match args::<GetContext>(tool, input) {
            Err(e) => e,
            Ok(GetContext { key: Some(k) }) => {
                ToolOutcome::ok(json!({ "key": k, "value": state.session.memory.get(&k).cloned() }))
            }
            Ok(GetContext { key: None }) => ToolOutcome::ok(json!({ "memory": state.session.memory })),
        },
        SystemTool::EndConversation => match args::<EndConversation>(tool, input) {
            Err(e) => e,
            Ok(a) => {
                state.end(deps, a.summary, key);
                ToolOutcome::ok(json!({ "ended": true }))
            }
        },
        SystemTool::HandoffToHuman => match args::<HandoffToHuman>(tool, input) {
            Err(e) => e,
            Ok(a) => {
                let priority = a.priority.unwrap_or_default();
                state.hand_off_to_human(deps, &a.reason, priority, switchboard_domain::HandoffCause::Agent, key);
                ToolOutcome::ok(json!({ "handedOff": "human" }))
            }
        },
        SystemTool::HandoffToAgent => match args::<HandoffToAgent>(tool, input) {
            Err(e) => e,
            Ok(a) => match a.agent_id.parse::<AgentId>() {
                Err(_) => ToolOutcome::error(format!("'{}' is not an agent id", a.agent_id)),
                Ok(target) => {
                    let relevant_info = a.context.unwrap_or(serde_json::Value::Null);
                    let (reason, summary, by) = (a.reason, a.summary, RequestedBy::Agent);
                    let handoff = AgentHandoff { target, reason, summary, relevant_info, by };
                    match state.hand_off_to_agent(deps, item, handoff, key).await? {
                        Ok(target) => ToolOutcome::ok(json!({ "handedOff": target })),
                        Err(refused) => ToolOutcome::error(refused.to_string()),
                    }
                }
            },
        },
        SystemTool::TriggerFlow => match args::<TriggerFlow>(tool, input) {
            Err(e) => e,
            Ok(a) if a.flow_id.trim().is_empty() => ToolOutcome::error("flowId must not be empty"),
            Ok(a) => {
                let input = a.input.unwrap_or(serde_json::Value::Null);
                let detail = json!({ "flowId": a.flow_id, "input": input });
                state.announce(key, detail_type::FLOW_TRIGGER_REQUESTED, detail);
                state.did(Action::TriggerFlow { flow_id: a.flow_id });
                ToolOutcome::ok(json!({ "requested": true }))
            }
        },
    };
    Ok(outcome)
}

fn set_context(state: &mut TurnState, a: SetContext) -> ToolOutcome {
    let memory = &mut state.session.memory;
    if a.key.is_empty() || a.key.len() > 64 {
        return ToolOutcome::error("key must be 1 to 64 characters");
    }
    let size = a.value.to_string().len();
    if size > MAX_MEMORY_VALUE_BYTES {
        return ToolOutcome::error(format!("value is {size} bytes of JSON; the limit is {MAX_MEMORY_VALUE_BYTES}"));
    }
    if !memory.contains_key(&a.key) && memory.len() >= MAX_MEMORY_KEYS {
        return ToolOutcome::error(format!("session memory is full ({MAX_MEMORY_KEYS} keys)"));
    }
    memory.insert(a.key.clone(), a.value);
    ToolOutcome::ok(json!({ "stored": a.key }))
}
