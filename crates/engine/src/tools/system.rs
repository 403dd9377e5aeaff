//! The system tools (`send_message`, the handoffs, `end_conversation`, `trigger_flow`,
//! `set_context`, `get_context`): what they do to the session and the outside world. Arguments are checked
//! against the tool's schema (typed, unknown fields refused); a bad call becomes an error result
//! for the model, never a failure of the execution.

use serde::Deserialize;
use serde_json::json;
use switchboard_domain::event::detail_type;
use switchboard_domain::limits::{MAX_HANDOFF_DEPTH, MAX_MEMORY_KEYS, MAX_MEMORY_VALUE_BYTES, MAX_REPLY_TEXT_BYTES};
use switchboard_domain::{
    Action, AgentId, AgentStatus, HandoffContext, HandoffTarget, OutboundEvent, Priority, Session, SessionStatus,
    SystemTool,
};

use super::call::{ToolOutcome, TurnState};
use crate::fault::ToolFault;
use crate::ports::{BusError, Deps, WorkItem};

fn error(message: impl Into<String>) -> ToolOutcome {
    ToolOutcome { output: json!({ "error": message.into() }), is_error: true }
}

fn ok(output: serde_json::Value) -> ToolOutcome {
    ToolOutcome { output, is_error: false }
}

fn args<T: for<'de> Deserialize<'de>>(tool: SystemTool, input: &serde_json::Value) -> Result<T, ToolOutcome> {
    serde_json::from_value(input.clone()).map_err(|e| error(format!("invalid arguments for {tool}: {e}")))
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
            Ok(a) => send_reply(deps, item, state, &a.text, key).await?,
        },
        SystemTool::SetContext => match args::<SetContext>(tool, input) {
            Err(e) => e,
            Ok(a) => set_context(state, a),
        },
        SystemTool::GetContext => match args::<GetContext>(tool, input) {
            Err(e) => e,
            Ok(GetContext { key: Some(k) }) => ok(json!({ "key": k, "value": state.session.memory.get(&k).cloned() })),
            Ok(GetContext { key: None }) => ok(json!({ "memory": state.session.memory })),
        },
        SystemTool::EndConversation => match args::<EndConversation>(tool, input) {
            Err(e) => e,
            Ok(a) => {
                end_session(deps, state, a.summary, key).await?;
                ok(json!({ "ended": true }))
            }
        },
        SystemTool::HandoffToHuman => match args::<HandoffToHuman>(tool, input) {
            Err(e) => e,
            Ok(a) => {
                let priority = a.priority.unwrap_or(Priority::Normal).as_str();
                handoff_to_human(deps, state, &a.reason, priority, key).await?;
                ok(json!({ "handedOff": "human" }))
            }
        },
        SystemTool::HandoffToAgent => match args::<HandoffToAgent>(tool, input) {
            Err(e) => e,
            Ok(a) => match a.agent_id.parse::<AgentId>() {
                Err(_) => error(format!("'{}' is not an agent id", a.agent_id)),
                Ok(target) => {
                    let handoff = AgentHandoff { target, reason: a.reason, summary: a.summary, context: a.context };
                    handoff_to_agent(deps, item, state, handoff, key).await?
                }
            },
        },
        SystemTool::TriggerFlow => match args::<TriggerFlow>(tool, input) {
            Err(e) => e,
            Ok(a) if a.flow_id.trim().is_empty() => error("flowId must not be empty"),
            Ok(a) => {
                let s = &state.session;
                publish(
                    deps,
                    key,
                    detail_type::FLOW_TRIGGER_REQUESTED,
                    s,
                    json!({
                        "flowId": a.flow_id, "input": a.input.unwrap_or(serde_json::Value::Null),
                    }),
                )
                .await?;
                state.actions.push(Action::TriggerFlow { flow_id: a.flow_id });
                ok(json!({ "requested": true }))
            }
        },
    };
    Ok(outcome)
}

/// Sends a reply unless it was already sent under `key` (a redelivered item).
pub(crate) async fn send_reply(
    deps: &Deps,
    item: &WorkItem,
    state: &mut TurnState,
    text: &str,
    key: &str,
) -> Result<ToolOutcome, ToolFault> {
    if text.trim().is_empty() {
        return Ok(error("text must not be empty"));
    }
    if text.len() > MAX_REPLY_TEXT_BYTES {
        return Ok(error(format!("text is {} bytes; the limit is {MAX_REPLY_TEXT_BYTES}", text.len())));
    }
    let sent = deps.conversations.send_reply(&item.tenant_id, &item.conversation_id, text, key).await?;
    state.replies_sent += 1;
    state.actions.push(Action::Reply { text: text.to_owned(), message_id: sent.message_id.clone() });
    Ok(ok(json!({ "messageId": sent.message_id })))
}

fn set_context(state: &mut TurnState, a: SetContext) -> ToolOutcome {
    let memory = &mut state.session.memory;
    if a.key.is_empty() || a.key.len() > 64 {
        return error("key must be 1 to 64 characters");
    }
    let size = a.value.to_string().len();
    if size > MAX_MEMORY_VALUE_BYTES {
        return error(format!("value is {size} bytes of JSON; the limit is {MAX_MEMORY_VALUE_BYTES}"));
    }
    if !memory.contains_key(&a.key) && memory.len() >= MAX_MEMORY_KEYS {
        return error(format!("session memory is full ({MAX_MEMORY_KEYS} keys)"));
    }
    memory.insert(a.key.clone(), a.value);
    ok(json!({ "stored": a.key }))
}

pub(crate) async fn publish(
    deps: &Deps,
    id: &str,
    kind: &str,
    session: &Session,
    extra: serde_json::Value,
) -> Result<(), BusError> {
    let mut detail = json!({
        "tenantId": session.tenant_id,
        "sessionId": session.session_id,
        "conversationId": session.conversation_id,
        "agentId": session.agent_id,
    });
    if let (Some(d), serde_json::Value::Object(extra)) = (detail.as_object_mut(), extra) {
        d.extend(extra);
    }
    let event = OutboundEvent {
        // Prefixed with the tenant (which holds no '/'), so that the id is unique across tenants
        // although the source ids it derives from are unique only within one.
        id: format!("{}/{id}/{kind}", session.tenant_id),
        detail_type: kind.to_owned(),
        tenant_id: session.tenant_id.clone(),
        detail,
    };
    deps.bus.publish(&event).await
}

pub(crate) async fn end_session(
    deps: &Deps,
    state: &mut TurnState,
    summary: Option<String>,
    key: &str,
) -> Result<(), ToolFault> {
    let now = deps.clock.now();
    let s = &mut state.session;
    s.status = SessionStatus::Completed;
    s.ended_at = Some(now);
    publish(deps, key, detail_type::SESSION_ENDED, s, json!({ "summary": summary })).await?;
    state.actions.push(Action::EndConversation { summary });
    state.finished = true;
    Ok(())
}

pub(crate) async fn handoff_to_human(
    deps: &Deps,
    state: &mut TurnState,
    reason: &str,
    priority: &str,
    key: &str,
) -> Result<(), ToolFault> {
    let action = hand_to_human(deps, &mut state.session, reason, priority, key).await?;
    state.actions.push(action);
    state.finished = true;
    Ok(())
}

/// Hands `session` to a human operator and publishes `session.handoff.human` under `key`; the
/// action to record.
pub(crate) async fn hand_to_human(
    deps: &Deps,
    session: &mut Session,
    reason: &str,
    priority: &str,
    key: &str,
) -> Result<Action, BusError> {
    session.status = SessionStatus::HandedOff;
    session.handed_off_to = Some(HandoffTarget::Human);
    session.handoff_reason = Some(reason.to_owned());
    session.handoff_priority = Some(Priority::parse(priority).unwrap_or_default());
    session.ended_at = Some(deps.clock.now());
    let extra = json!({ "reason": reason, "priority": priority, "context": session.memory });
    publish(deps, key, detail_type::HANDOFF_HUMAN, session, extra).await?;
    Ok(Action::HandoffToHuman { reason: reason.to_owned(), priority: priority.to_owned() })
}

/// An agent-to-agent handoff from inside a turn (the tool, or a router's pick).
pub(crate) struct AgentHandoff {
    pub target: AgentId,
    pub reason: String,
    pub summary: Option<String>,
    pub context: Option<serde_json::Value>,
}

/// Starts the target's session (committed with the turn), queues the continuation that lets it
/// answer the same message, and hands the current session off.
pub(crate) async fn handoff_to_agent(
    deps: &Deps,
    item: &WorkItem,
    state: &mut TurnState,
    a: AgentHandoff,
    key: &str,
) -> Result<ToolOutcome, ToolFault> {
    let from = &state.session;
    if from.handoff_depth >= MAX_HANDOFF_DEPTH {
        return Ok(error(format!(
            "no further handoffs: depth {MAX_HANDOFF_DEPTH} reached; hand off to a human or end"
        )));
    }
    let target_id = a.target;
    if target_id == from.agent_id {
        return Ok(error("cannot hand off to the agent that is already answering"));
    }
    let target = match deps.config.get_agent(&from.tenant_id, target_id).await? {
        Some(t) if t.status == AgentStatus::Active => t,
        _ => return Ok(error(format!("no active agent '{target_id}' in this tenant"))),
    };
    let now = deps.clock.now();
    let context = HandoffContext {
        from_agent_id: from.agent_id,
        from_session_id: from.session_id,
        reason: a.reason.clone(),
        relevant_info: a.context.unwrap_or(serde_json::Value::Null),
        summary: a.summary,
    };
    let next = from.handed_on(target.agent_id, from.handoff_depth + 1, context, now);

    // The continuation is queued before the turn commits; if the commit never happens, the
    // original item is redelivered first (it heads the group) and queues it again under the same
    // deduplication id.
    let continuation = WorkItem {
        source_id: format!("{}#h{}", base_source(&item.source_id), next.handoff_depth),
        agent_id: target.agent_id,
        trigger_id: item.trigger_id,
        continuation: true,
        ..item.clone()
    };
    deps.queue.enqueue(&continuation).await.map_err(|e| ToolFault::Queue(e.message, e.retryable))?;

    let s = &mut state.session;
    s.status = SessionStatus::HandedOff;
    s.handed_off_to = Some(HandoffTarget::Agent { agent_id: target.agent_id, session_id: next.session_id });
    s.ended_at = Some(now);
    publish(
        deps,
        key,
        detail_type::HANDOFF_AGENT,
        s,
        json!({
            "toAgentId": target.agent_id, "toSessionId": next.session_id, "reason": a.reason,
        }),
    )
    .await?;
    state.actions.push(Action::HandoffToAgent {
        agent_id: target.agent_id,
        session_id: next.session_id,
        reason: a.reason,
    });
    state.new_session = Some(next);
    state.finished = true;
    Ok(ok(json!({ "handedOff": target.agent_id })))
}

/// The event id a source id descends from (`evt-1#h2` → `evt-1`).
fn base_source(source_id: &str) -> &str {
    source_id.split_once("#h").map_or(source_id, |(base, _)| base)
}
