//! What a human operator does to a conversation handed to humans (the console's actions): claim
//! it, reply in it, end it. Each is committed like a turn — the session write, conditional on the
//! version read, and a record with status `operator` in one atomic commit — so that two
//! operators cannot both claim a conversation, a retried reply is sent and recorded once (its
//! source is `reply-<Idempotency-Key>`), and the session's executions show who did what.
//! Handing the conversation back to an agent is the API handoff ([`super::handoff`]).

use std::time::Instant;

use serde_json::json;
use switchboard_domain::event::detail_type;
use switchboard_domain::message::Message;
use switchboard_domain::{
    Action, Claim, ExecutionRecord, ExecutionStatus, Session, SessionId, SessionStatus, TenantId,
};

use super::history::HUMAN_PREFIX;
use super::{Executor, record};
use crate::execute::handoff::HandoffError;
use crate::ports::{SessionWrite, StoreError, TurnCommit};
use crate::tools::system::publish;

/// Commits tried before a session that keeps changing is reported as a conflict.
const ATTEMPTS: u32 = 3;

/// What an operator's reply did.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorReply {
    pub message_id: String,
    /// Another request with the same idempotency key recorded the reply: this one sent and
    /// recorded nothing new (of several requests with one key, exactly one answers `false`).
    pub duplicate: bool,
    pub execution: ExecutionRecord,
}

impl Executor {
    /// `operator` claims the conversation of `session_id`, which a human must own. Claiming again
    /// is a no-op for the same operator and refused (`NotAllowed`, naming the holder) for another.
    pub async fn claim(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        operator: &str,
    ) -> Result<Session, HandoffError> {
        for _ in 0..ATTEMPTS {
            let started = Instant::now();
            let mut session = self.human_owned(tenant, session_id).await?;
            match &session.claim {
                Some(c) if c.operator == operator => return Ok(session),
                Some(c) => return Err(claimed_by(c)),
                None => {}
            }
            let now = self.deps().clock.now();
            session.claim = Some(Claim { operator: operator.to_owned(), at: now });
            let source = format!("claim-{}", ulid::Ulid::generate());
            let input = json!({ "operator": { "name": operator, "action": "claim" } });
            match self.commit_operator(session.clone(), source, input, vec![], started).await {
                Ok(_) => {
                    session.version += 1;
                    return Ok(session);
                }
                Err(StoreError::VersionConflict(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(HandoffError::Conflict)
    }

    /// `operator` says `text` in the conversation of `session_id`, which a human must own and
    /// another operator must not have claimed (an unclaimed one is claimed by the reply). Sent
    /// through the Conversations port and added to the session's transcript, once per
    /// `idempotency_key`.
    pub async fn human_reply(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        operator: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<OperatorReply, HandoffError> {
        let deps = self.deps();
        let source = format!("reply-{idempotency_key}");
        for _ in 0..ATTEMPTS {
            let started = Instant::now();
            if let Some(done) = deps.executions.execution_for_source(tenant, &source).await? {
                return Ok(replied(done, true));
            }
            let mut session = self.human_owned(tenant, session_id).await?;
            match &session.claim {
                Some(c) if c.operator != operator => return Err(claimed_by(c)),
                Some(_) => {}
                None => session.claim = Some(Claim { operator: operator.to_owned(), at: deps.clock.now() }),
            }
            // The key is the record's source, so a retry finds the first send (the port keeps
            // it) and the first record (the commit refuses a second one). The answer that
            // committed the record is the one not marked duplicate — not the one whose send came
            // first: two requests with one key may both pass the check above, and the one that
            // sent may lose the commit to the other.
            let sent = deps.conversations.send_human(tenant, &session.conversation_id, text, operator, &source).await;
            let sent = sent.map_err(HandoffError::Send)?;
            session.append_transcript([Message::assistant_text(format!("{HUMAN_PREFIX}{text}"))]);
            let input = json!({ "operator": { "name": operator, "action": "reply" }, "text": text });
            let actions = vec![Action::Reply { text: text.to_owned(), message_id: sent.message_id.clone() }];
            match self.commit_operator(session, source.clone(), input, actions, started).await {
                Ok(execution) => return Ok(replied(execution, false)),
                Err(StoreError::VersionConflict(_) | StoreError::Duplicate(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(HandoffError::Conflict)
    }

    /// `operator` ends the conversation of `session_id`, which a human must own and no other
    /// operator must have claimed; publishes `session.ended`.
    pub async fn end_by_operator(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        operator: &str,
        note: Option<&str>,
    ) -> Result<ExecutionRecord, HandoffError> {
        let deps = self.deps();
        let started = Instant::now();
        let mut session = self.human_owned(tenant, session_id).await?;
        if let Some(c) = session.claim.as_ref().filter(|c| c.operator != operator) {
            return Err(claimed_by(c));
        }
        let source = format!("end-{}", ulid::Ulid::generate());
        session.status = SessionStatus::Completed;
        session.ended_at = Some(deps.clock.now());
        let detail = json!({ "endedBy": "human", "operator": operator, "summary": note });
        publish(deps, &source, detail_type::SESSION_ENDED, &session, detail).await?;
        let input = json!({ "operator": { "name": operator, "action": "end" }, "note": note });
        let actions = vec![Action::EndConversation { summary: note.map(str::to_owned) }];
        // Ending is not retried: a session that changed meanwhile is the operator's to look at.
        Ok(self.commit_operator(session, source, input, actions, started).await?)
    }

    /// The session, if a human owns it and it is the newest of its conversation.
    async fn human_owned(&self, tenant: &TenantId, session_id: SessionId) -> Result<Session, HandoffError> {
        let deps = self.deps();
        let session =
            deps.sessions.get_session(tenant, session_id).await?.ok_or(HandoffError::NoSession(session_id))?;
        if !session.is_human_owned() {
            return Err(HandoffError::NotAllowed("no human owns this conversation".into()));
        }
        let latest = deps.sessions.latest_session(tenant, &session.conversation_id).await?;
        if latest.as_ref().map(|s| s.session_id) != Some(session_id) {
            return Err(HandoffError::NotAllowed("a newer session owns this conversation".into()));
        }
        Ok(session)
    }

    /// Commits `session` (as of the version read) with the operator's record.
    async fn commit_operator(
        &self,
        mut session: Session,
        source: String,
        input: serde_json::Value,
        actions: Vec<Action>,
        started: Instant,
    ) -> Result<ExecutionRecord, StoreError> {
        let deps = self.deps();
        let expected = session.version;
        session.version += 1;
        session.updated_at = deps.clock.now();
        let execution = record::of_request(deps, &session, source, input, ExecutionStatus::Operator, actions, started);
        let sessions = vec![SessionWrite { session, expected_version: Some(expected) }];
        deps.sessions.commit_turn(&TurnCommit { sessions, execution: execution.clone() }).await?;
        Ok(execution)
    }
}

fn claimed_by(c: &Claim) -> HandoffError {
    HandoffError::NotAllowed(format!("claimed by {} at {}", c.operator, c.at.to_rfc3339()))
}

fn replied(execution: ExecutionRecord, duplicate: bool) -> OperatorReply {
    let message_id = execution
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Reply { message_id, .. } => Some(message_id.clone()),
            _ => None,
        })
        .unwrap_or_default();
    OperatorReply { message_id, duplicate, execution }
}
