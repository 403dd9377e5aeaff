//! Handoffs asked for over the internal API: to a human, to another agent, or a human handing the
//! conversation back to an agent. The session's executions keep an audit trail of who moved the
//! conversation and why (`requestedBy: api`, and the `principal` who asked), and the events say
//! who asked too.

use std::time::Instant;

use serde_json::json;
use switchboard_domain::HandoffCause;
use switchboard_domain::limits::MAX_HANDOFF_DEPTH;
use switchboard_domain::{
    Action, AgentId, Approval, ExecutionRecord, ExecutionStatus, OutboundEvent, Priority, Session, SessionId, TenantId,
};

use super::{Decision, Done, Operator, OperatorError};
use crate::limits::Limits;
use crate::moves::{self, AgentHandoff, HumanHandoff, Refused, RequestedBy};

/// Where the conversation should go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoffTo {
    Human(Priority),
    Agent(AgentId),
}

/// What cancelling a conversation's turn did.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnCancelled {
    /// The turn waited for this approval, now cancelled: its resumption, queued in the
    /// conversation's order, runs none of its calls and hands the conversation to a human.
    Paused(Box<Approval>),
    /// No turn waited: the agent's session went to a human at once (a turn running meanwhile
    /// finds its session moved when it commits, and is not committed).
    HandedOff(Box<HandoffDone>),
}

/// What a handoff did.
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffDone {
    pub new_session_id: Option<SessionId>,
    pub execution: ExecutionRecord,
}

impl Operator {
    /// Moves the conversation of `session_id` to `to`, as asked by `principal` (the API's
    /// authenticated caller). A session must be the conversation's active one, or — to hand a
    /// conversation back from a human to an agent — the human-owned one; the handback starts the
    /// agent afresh at handoff depth 0.
    pub async fn hand_off(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        to: HandoffTo,
        reason: &str,
        principal: &str,
    ) -> Result<HandoffDone, OperatorError> {
        let started = Instant::now();
        let mut session = self.newest(tenant, session_id).await?;
        let human_owned = session.is_human_owned();
        if !session.is_active() && !human_owned {
            return Err(OperatorError::NotAllowed(format!("the session is {:?}", session.status).to_lowercase()));
        }
        if let Some(paused) = &session.paused {
            // Its turn, and the messages held behind it, would be left waiting for nobody.
            return Err(OperatorError::NotAllowed(format!(
                "a turn waits for approval {} of its {} call: approve, deny or cancel it first",
                paused.approval.approval_id, paused.approval.tool
            )));
        }
        let source = format!("handoff-{}", ulid::Ulid::generate());
        let mut events = vec![];
        let (action, next) = match to {
            HandoffTo::Human(_) if human_owned => {
                return Err(OperatorError::NotAllowed("a human already owns this conversation".into()));
            }
            HandoffTo::Human(priority) => {
                let handoff = HumanHandoff { reason, priority, cause: HandoffCause::Api };
                (moves::hand_off_to_human(&self.deps, &mut events, &mut session, handoff, &source), None)
            }
            HandoffTo::Agent(target) => {
                self.to_agent(&mut session, &mut events, target, reason, principal, &source).await?
            }
        };
        for event in &mut events {
            event.detail["principal"] = json!(principal);
        }
        let conversation = session.conversation_id.clone();
        let new_session_id = next.as_ref().map(|s| s.session_id);
        let input = json!({ "handoff": { "reason": reason, "requestedBy": "api", "principal": principal } });
        let actions = vec![action];
        let done = Done { source, input, status: ExecutionStatus::HandedOff, actions, events, started };
        let execution = self.commit_with(session, next, done).await?;
        if new_session_id.is_none() {
            // A human owns the conversation now: its session slot is free for another.
            Limits::new(&self.deps).release(tenant, &conversation).await;
        }
        Ok(HandoffDone { new_session_id, execution })
    }

    /// `principal` cancels the turn of the agent's session `session_id` for `reason`: a paused
    /// turn's approval is decided as cancelled (its resumption hands the conversation to a
    /// human), otherwise the session is handed to a human now. A session a human owns, or one
    /// that ended, has no turn to cancel.
    pub async fn cancel_turn(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        reason: &str,
        principal: &str,
    ) -> Result<TurnCancelled, OperatorError> {
        let session = self.newest(tenant, session_id).await?;
        if let Some(paused) = &session.paused {
            let cancel = Decision::Cancel { reason: reason.to_owned() };
            let approval = self.decide(tenant, &paused.approval.approval_id, principal, cancel).await?;
            return Ok(TurnCancelled::Paused(Box::new(approval)));
        }
        if !session.is_active() {
            let status = format!("{:?}", session.status).to_lowercase();
            return Err(OperatorError::NotAllowed(format!("no agent's turn to cancel: the session is {status}")));
        }
        let reason = format!("turn cancelled: {reason}");
        let done = self.hand_off(tenant, session_id, HandoffTo::Human(Priority::Normal), &reason, principal).await?;
        Ok(TurnCancelled::HandedOff(Box::new(done)))
    }

    /// Hands `session` to `target` (back from a human, or on from an agent): the action and the
    /// target's new session.
    async fn to_agent(
        &self,
        session: &mut Session,
        events: &mut Vec<OutboundEvent>,
        target: AgentId,
        reason: &str,
        principal: &str,
        source: &str,
    ) -> Result<(Action, Option<Session>), OperatorError> {
        let requested_by = if session.is_human_owned() { "human operator" } else { "api" };
        let handoff = AgentHandoff {
            target,
            reason: reason.to_owned(),
            summary: None,
            relevant_info: json!({ "requestedBy": requested_by, "principal": principal }),
            by: RequestedBy::Api,
        };
        let next = match moves::prepare_hand_off_to_agent(&self.deps, session, handoff).await? {
            Ok(next) => next,
            Err(refused) => return Err(refused_over_api(refused)),
        };
        let action = moves::complete_hand_off_to_agent(&self.deps, events, session, &next, source);
        Ok((action, Some(next.session)))
    }
}

/// A refused agent handoff as the API words it.
fn refused_over_api(refused: Refused) -> OperatorError {
    match refused {
        Refused::NoActiveAgent(agent) => OperatorError::UnknownAgent(agent),
        Refused::SameAgent => OperatorError::NotAllowed("the agent already owns this conversation".into()),
        Refused::DepthReached => {
            OperatorError::NotAllowed(format!("no further agent handoffs: depth {MAX_HANDOFF_DEPTH} reached"))
        }
        other @ (Refused::EmptyText | Refused::TextTooLong(_)) => OperatorError::NotAllowed(other.to_string()),
    }
}
