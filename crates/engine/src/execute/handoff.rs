//! Handoffs requested from outside the agent loop (the internal API): to a human, to another
//! agent, or a human handing the conversation back to an agent. Each is committed like a turn —
//! the session writes and an execution record in one atomic commit — so the session history has
//! an audit trail of who moved the conversation and why.

use std::time::Instant;

use serde_json::json;
use switchboard_domain::event::detail_type;
use switchboard_domain::limits::MAX_HANDOFF_DEPTH;
use switchboard_domain::{
    Action, AgentId, AgentStatus, ExecutionRecord, ExecutionStatus, HandoffContext, HandoffTarget, Priority, SessionId,
    SessionStatus, TenantId,
};

use super::{Executor, record};
use crate::ports::{BusError, ConversationError, StoreError};
use crate::ports::{SessionWrite, TurnCommit};
use crate::tools::system::publish;

/// Where the conversation should go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoffTo {
    Human(Priority),
    Agent(AgentId),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandoffError {
    #[error("no session '{0}'")]
    NoSession(SessionId),
    #[error("{0}")]
    NotAllowed(String),
    #[error("no active agent '{0}' in this tenant")]
    UnknownAgent(AgentId),
    #[error("the session changed meanwhile; read it again and retry")]
    Conflict,
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Bus(#[from] BusError),
    /// An operator's message could not be sent into the conversation.
    #[error(transparent)]
    Send(ConversationError),
}

impl From<StoreError> for HandoffError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::VersionConflict(_) | StoreError::Duplicate(_) => HandoffError::Conflict,
            other => HandoffError::Store(other),
        }
    }
}

/// What a handoff did.
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffDone {
    pub new_session_id: Option<SessionId>,
    pub execution: ExecutionRecord,
}

impl Executor {
    /// Moves the conversation of `session_id` to `to`. A session must be the conversation's
    /// active one, or — to hand a conversation back from a human to an agent — the human-owned
    /// one; the handback starts the agent afresh at handoff depth 0.
    pub async fn hand_off(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        to: HandoffTo,
        reason: &str,
    ) -> Result<HandoffDone, HandoffError> {
        let deps = self.deps();
        let started = Instant::now();
        let mut session =
            deps.sessions.get_session(tenant, session_id).await?.ok_or(HandoffError::NoSession(session_id))?;
        let latest = deps.sessions.latest_session(tenant, &session.conversation_id).await?;
        if latest.as_ref().map(|s| s.session_id) != Some(session_id) {
            return Err(HandoffError::NotAllowed("a newer session owns this conversation".into()));
        }
        let human_owned = session.is_human_owned();
        if !session.is_active() && !human_owned {
            return Err(HandoffError::NotAllowed(format!("the session is {:?}", session.status).to_lowercase()));
        }
        let now = deps.clock.now();
        let source_id = format!("handoff-{}", ulid::Ulid::generate());
        let expected = session.version;
        let mut new_session = None;
        let action = match to {
            HandoffTo::Human(_) if human_owned => {
                return Err(HandoffError::NotAllowed("a human already owns this conversation".into()));
            }
            HandoffTo::Human(priority) => {
                session.status = SessionStatus::HandedOff;
                session.handed_off_to = Some(HandoffTarget::Human);
                session.handoff_reason = Some(reason.to_owned());
                session.handoff_priority = Some(priority);
                session.ended_at = Some(now);
                publish(
                    deps,
                    &source_id,
                    detail_type::HANDOFF_HUMAN,
                    &session,
                    json!({
                        "reason": reason, "priority": priority.as_str(), "context": session.memory,
                        "requestedBy": "api",
                    }),
                )
                .await?;
                Action::HandoffToHuman { reason: reason.to_owned(), priority: priority.as_str().into() }
            }
            HandoffTo::Agent(target) => {
                if target == session.agent_id && !human_owned {
                    return Err(HandoffError::NotAllowed("the agent already owns this conversation".into()));
                }
                let depth = if human_owned { 0 } else { session.handoff_depth + 1 };
                if depth > MAX_HANDOFF_DEPTH {
                    return Err(HandoffError::NotAllowed(format!(
                        "no further agent handoffs: depth {MAX_HANDOFF_DEPTH} reached"
                    )));
                }
                match deps.config.get_agent(tenant, target).await? {
                    Some(a) if a.status == AgentStatus::Active => {}
                    _ => return Err(HandoffError::UnknownAgent(target)),
                }
                let context = HandoffContext {
                    from_agent_id: session.agent_id,
                    from_session_id: session.session_id,
                    reason: reason.to_owned(),
                    relevant_info: json!({ "requestedBy": if human_owned { "human operator" } else { "api" } }),
                    summary: None,
                };
                let next = session.handed_on(target, depth, context, now);
                if !human_owned {
                    session.status = SessionStatus::HandedOff;
                    session.ended_at = Some(now);
                }
                session.handed_off_to = Some(HandoffTarget::Agent { agent_id: target, session_id: next.session_id });
                publish(
                    deps,
                    &source_id,
                    detail_type::HANDOFF_AGENT,
                    &session,
                    json!({
                        "toAgentId": target, "toSessionId": next.session_id, "reason": reason, "requestedBy": "api",
                    }),
                )
                .await?;
                let action =
                    Action::HandoffToAgent { agent_id: target, session_id: next.session_id, reason: reason.to_owned() };
                new_session = Some(next);
                action
            }
        };
        session.version += 1;
        session.updated_at = now;
        let input = json!({ "handoff": { "reason": reason, "requestedBy": "api" } });
        let execution =
            record::of_request(deps, &session, source_id, input, ExecutionStatus::HandedOff, vec![action], started);
        let mut sessions = vec![SessionWrite { session, expected_version: Some(expected) }];
        let new_session_id = new_session.as_ref().map(|s| s.session_id);
        if let Some(next) = new_session {
            sessions.push(SessionWrite { session: next, expected_version: None });
        }
        let conversation = sessions[0].session.conversation_id.clone();
        deps.sessions.commit_turn(&TurnCommit { sessions, execution: execution.clone() }).await?;
        if new_session_id.is_none() {
            // A human owns the conversation now: its session slot is free for another.
            crate::limits::Limits::new(deps).release(tenant, &conversation).await;
        }
        Ok(HandoffDone { new_session_id, execution })
    }
}
