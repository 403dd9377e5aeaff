//! Session moves: the verbs that speak in a conversation or change who has it — reply, announce
//! an event, end, hand off to a human, hand off to an agent. Each changes the session it is given
//! and returns a typed outcome (the action to record, or why the move is refused); none commits.
//! Events are not published here: a move adds them to the caller's outbox (`events`), which is
//! committed with the session and published after the commit, so that no event tells of a change
//! that did not happen.
//! Outside a turn (refused messages, the operator service) they are called on a session; inside
//! one through [`TurnState`] (`turn`), which records their actions. Only the tool layer turns an
//! outcome into a tool result.

mod turn;

pub(crate) use turn::TurnState;

use serde_json::{Value, json};
use switchboard_domain::HandoffCause;
use switchboard_domain::event::detail_type;
use switchboard_domain::limits::{MAX_HANDOFF_DEPTH, MAX_REPLY_TEXT_BYTES};
use switchboard_domain::message::Message;
use switchboard_domain::{
    Action, AgentId, AgentStatus, HandoffContext, HandoffTarget, OnFailure, OutboundEvent, Priority, Session,
    SessionStatus,
};

use crate::fault::ToolFault;
use crate::ports::{ConversationError, Deps, StoreError};

/// Why a move was not made. The session is unchanged; the caller words it for its audience
/// (a tool result for the model, a problem for an API client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("text must not be empty")]
    EmptyText,
    #[error("text is {0} bytes; the limit is {MAX_REPLY_TEXT_BYTES}")]
    TextTooLong(usize),
    /// The conversation has been handed from agent to agent [`MAX_HANDOFF_DEPTH`] times.
    #[error("no further handoffs: depth {MAX_HANDOFF_DEPTH} reached; hand off to a human or end")]
    DepthReached,
    #[error("cannot hand off to the agent that is already answering")]
    SameAgent,
    #[error("no active agent '{0}' in this tenant")]
    NoActiveAgent(AgentId),
}

/// Sends `text` into the session's conversation under idempotency key `key` (a repeated key
/// sends nothing new), unless it is empty or too long.
pub(crate) async fn reply(
    deps: &Deps,
    session: &Session,
    text: &str,
    key: &str,
) -> Result<Result<Action, Refused>, ConversationError> {
    if text.trim().is_empty() {
        return Ok(Err(Refused::EmptyText));
    }
    if text.len() > MAX_REPLY_TEXT_BYTES {
        return Ok(Err(Refused::TextTooLong(text.len())));
    }
    send(deps, session, text, key).await.map(Ok)
}

/// [`reply`] for a text already checked where it was configured (a tenant's `onLimit` message).
/// When the key was used before, nothing new is sent and the action holds the text that was
/// ([`sent_before`]).
pub(crate) async fn send(deps: &Deps, session: &Session, text: &str, key: &str) -> Result<Action, ConversationError> {
    let sent = deps.conversations.send_reply(&session.tenant_id, &session.conversation_id, text, key).await?;
    let text = if sent.duplicate { sent_before(deps, session, &sent.message_id, text).await } else { text.to_owned() };
    Ok(Action::Reply { text, message_id: sent.message_id })
}

/// How far back in the conversation [`sent_before`] looks for the message first sent.
const SENT_BEFORE_LOOKBACK: usize = 50;

/// The text of `message_id`, sent before under the key `text` was just sent with: what the
/// customer read. A run of the same work again — a redelivery after a crash, a turn run again
/// after a version conflict — asks the model again, which may word the reply differently; the
/// record and the transcript must say what was sent. Read from the conversation's newest
/// messages; if it is not found there (or the read fails), `text` is kept and the gap logged.
async fn sent_before(deps: &Deps, session: &Session, message_id: &str, text: &str) -> String {
    let history = deps.conversations.history(&session.tenant_id, &session.conversation_id, SENT_BEFORE_LOOKBACK).await;
    match history.as_ref().map(|h| h.iter().find(|m| m.message_id == message_id)) {
        Ok(Some(first)) => {
            if first.text != text {
                tracing::info!(
                    message_id,
                    "this reply was sent before in other words; the record keeps the words sent"
                );
            }
            first.text.clone()
        }
        Ok(None) => {
            tracing::warn!(
                message_id,
                "a reply sent before is not among the conversation's newest messages; recording this run's words"
            );
            text.to_owned()
        }
        Err(e) => {
            tracing::warn!(message_id, error = %e, "could not read which words a reply sent before had; recording this run's words");
            text.to_owned()
        }
    }
}

/// Adds to `events` a `kind` event about `session` — its ids, plus the fields of `extra` — under
/// an id derived from `key`, so that a repeated move announces the same event id.
pub(crate) fn announce(events: &mut Vec<OutboundEvent>, key: &str, kind: &str, session: &Session, extra: Value) {
    let mut detail = json!({
        "tenantId": session.tenant_id,
        "sessionId": session.session_id,
        "conversationId": session.conversation_id,
        "agentId": session.agent_id,
    });
    if let (Some(d), Value::Object(extra)) = (detail.as_object_mut(), extra) {
        d.extend(extra);
    }
    let event = OutboundEvent {
        // Prefixed with the tenant (which holds no '/'), so that the id is unique across tenants
        // although the source ids it derives from are unique only within one.
        id: format!("{}/{key}/{kind}", session.tenant_id),
        detail_type: kind.to_owned(),
        tenant_id: session.tenant_id.clone(),
        detail,
    };
    events.push(event);
}

/// Who ended a conversation, as `session.ended` tells it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum EndedBy<'a> {
    /// The agent (its tool, or its `handoffBehavior`).
    Agent,
    /// A human operator, by name.
    Operator(&'a str),
}

/// Ends the session and announces `session.ended` under `key`.
pub(crate) fn end(
    deps: &Deps,
    events: &mut Vec<OutboundEvent>,
    session: &mut Session,
    summary: Option<String>,
    by: EndedBy<'_>,
    key: &str,
) -> Action {
    session.status = SessionStatus::Completed;
    session.ended_at = Some(deps.clock.now());
    let detail = match by {
        EndedBy::Agent => json!({ "summary": summary }),
        EndedBy::Operator(operator) => json!({ "endedBy": "human", "operator": operator, "summary": summary }),
    };
    announce(events, key, detail_type::SESSION_ENDED, session, detail);
    Action::EndConversation { summary }
}

/// Closes a session whose customer went quiet ([`SessionStatus::Abandoned`]; its `idle` is kept,
/// to say when it was due and what it counts under) and announces `session.ended`
/// (`endedBy: idle`) under `key`.
pub(crate) fn abandon(deps: &Deps, events: &mut Vec<OutboundEvent>, session: &mut Session, key: &str) {
    session.status = SessionStatus::Abandoned;
    session.ended_at = Some(deps.clock.now());
    announce(events, key, detail_type::SESSION_ENDED, session, json!({ "summary": null, "endedBy": "idle" }));
}

/// Who asked for a handoff, when it was not the agent itself: events and the next agent's
/// handoff context say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestedBy {
    /// The agent, or the engine on its behalf (limits, `handoffBehavior`, the router).
    Agent,
    /// A client of the internal API.
    Api,
}

/// Hands the session to a human operator and announces `session.handoff.human` under `key`
/// (with the session's memory as context).
pub(crate) fn hand_off_to_human(
    deps: &Deps,
    events: &mut Vec<OutboundEvent>,
    session: &mut Session,
    handoff: HumanHandoff<'_>,
    key: &str,
) -> Action {
    let HumanHandoff { reason, priority, cause } = handoff;
    session.status = SessionStatus::HandedOff;
    session.handed_off_to = Some(HandoffTarget::Human);
    session.handoff_reason = Some(reason.to_owned());
    session.handoff_priority = Some(priority);
    session.ended_at = Some(deps.clock.now());
    let mut detail = json!({ "reason": reason, "priority": priority, "context": session.memory });
    if cause == HandoffCause::Api {
        detail["requestedBy"] = json!("api");
    }
    announce(events, key, detail_type::HANDOFF_HUMAN, session, detail);
    Action::HandoffToHuman { reason: reason.to_owned(), priority, cause: Some(cause) }
}

/// A handoff to a human operator, as asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HumanHandoff<'a> {
    pub reason: &'a str,
    pub priority: Priority,
    /// Why: the agent asked, its turn failed, a limit, a person over the API (the event says
    /// `requestedBy: api` for the last).
    pub cause: HandoffCause,
}

/// Answers a customer whose message was not answered, as the agent's `onFailure` says: a human
/// gets the conversation (`reason` as the handoff's), a fixed reply is sent (and joins the
/// transcript), or nothing. Under `key`, so a repeat sends and announces the same once. The
/// action, unless the setting is to do nothing.
pub(crate) async fn answer_failure(
    deps: &Deps,
    events: &mut Vec<OutboundEvent>,
    session: &mut Session,
    on_failure: &OnFailure,
    reason: &str,
    key: &str,
) -> Result<Option<Action>, ToolFault> {
    match on_failure {
        OnFailure::Nothing => Ok(None),
        OnFailure::Message { text } => {
            let action = send(deps, session, text, key).await?;
            session.append_transcript([Message::assistant_text(text.clone())]);
            Ok(Some(action))
        }
        OnFailure::HandoffToHuman => {
            let handoff = HumanHandoff { reason, priority: Priority::Normal, cause: HandoffCause::Failure };
            Ok(Some(hand_off_to_human(deps, events, session, handoff, key)))
        }
    }
}

/// A handoff to another agent, as asked for.
#[derive(Debug, Clone)]
pub(crate) struct AgentHandoff {
    pub target: AgentId,
    pub reason: String,
    pub summary: Option<String>,
    /// What the next agent is told besides the reason (its handoff context's `relevantInfo`).
    pub relevant_info: Value,
    pub by: RequestedBy,
}

/// A handoff to another agent that passed its checks: the session the target takes the
/// conversation over in, not yet started (see [`complete_hand_off_to_agent`]).
#[derive(Debug)]
pub(crate) struct NextSession {
    pub session: Session,
    reason: String,
    by: RequestedBy,
}

/// Checks a handoff of `session` to another agent — depth, target, the target active — and
/// prepares the target's session. A session a human owns is handed back: the agent starts
/// afresh at depth 0 and may be the one that had it before.
pub(crate) async fn prepare_hand_off_to_agent(
    deps: &Deps,
    session: &Session,
    handoff: AgentHandoff,
) -> Result<Result<NextSession, Refused>, StoreError> {
    let human_owned = session.is_human_owned();
    if !human_owned && session.handoff_depth >= MAX_HANDOFF_DEPTH {
        return Ok(Err(Refused::DepthReached));
    }
    if !human_owned && handoff.target == session.agent_id {
        return Ok(Err(Refused::SameAgent));
    }
    match deps.config.get_agent(&session.tenant_id, handoff.target).await? {
        Some(a) if a.status == AgentStatus::Active => {}
        _ => return Ok(Err(Refused::NoActiveAgent(handoff.target))),
    }
    let depth = if human_owned { 0 } else { session.handoff_depth + 1 };
    let context = HandoffContext {
        from_agent_id: session.agent_id,
        from_session_id: session.session_id,
        reason: handoff.reason.clone(),
        relevant_info: handoff.relevant_info,
        summary: handoff.summary,
    };
    let next = session.successor(handoff.target, depth, context, deps.clock.now());
    Ok(Ok(NextSession { session: next, reason: handoff.reason, by: handoff.by }))
}

/// Marks `session` handed off to `next`'s agent and announces `session.handoff.agent` under
/// `key`. A human-owned session stays with its status (the human's part of the conversation
/// ended when it was handed to them).
pub(crate) fn complete_hand_off_to_agent(
    deps: &Deps,
    events: &mut Vec<OutboundEvent>,
    session: &mut Session,
    next: &NextSession,
    key: &str,
) -> Action {
    let (agent_id, session_id) = (next.session.agent_id, next.session.session_id);
    if !session.is_human_owned() {
        session.status = SessionStatus::HandedOff;
        session.ended_at = Some(deps.clock.now());
    }
    session.handed_off_to = Some(HandoffTarget::Agent { agent_id, session_id });
    let mut detail = json!({ "toAgentId": agent_id, "toSessionId": session_id, "reason": next.reason });
    if next.by == RequestedBy::Api {
        detail["requestedBy"] = json!("api");
    }
    announce(events, key, detail_type::HANDOFF_AGENT, session, detail);
    Action::HandoffToAgent { agent_id, session_id, reason: next.reason.clone() }
}
