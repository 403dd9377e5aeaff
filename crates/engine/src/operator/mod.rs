//! The operator service: what people do to a conversation from outside the agent loop — an
//! operator claims a conversation handed to humans, replies in it, ends it; an API client hands
//! a conversation to a human or an agent, or back from a human to an agent (`handoff`). Each is
//! committed like a turn — the session write, conditional on the version read, and a record in
//! one atomic commit — so that two operators cannot both claim a conversation, a retried reply is
//! sent and recorded once (its source is `reply-<Idempotency-Key>`), and the session's executions
//! show who did what. The moves themselves are the session moves' (`crate::moves`).

mod approvals;
mod handoff;
mod idle;

use std::time::Instant;

use serde_json::json;
use switchboard_domain::message::Message;
use switchboard_domain::{
    Action, AgentId, Claim, ExecutionRecord, ExecutionStatus, OutboundEvent, Session, SessionId, TenantId,
};

pub use approvals::{Decision, EXPIRY_PRINCIPAL, MAX_LISTED_APPROVALS, REQUEUE_AFTER, Swept};
pub use handoff::{HandoffDone, HandoffTo, TurnCancelled};
pub use idle::{IDLE_PER_TICK, IdleSweep};

use crate::execute::history::HUMAN_PREFIX;
use crate::execute::record;
use crate::moves::{self, EndedBy};
use crate::ports::{BusError, ConversationError, Deps, SessionWrite, StoreError, TurnCommit};

/// Commits tried before a session that keeps changing is reported as a conflict.
const ATTEMPTS: u32 = 3;

/// Why an operator's action or an API handoff was not done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorError {
    #[error("no session '{0}'")]
    NoSession(SessionId),
    #[error("{0}")]
    NotAllowed(String),
    #[error("no approval '{0}' is waiting")]
    NoApproval(String),
    /// What the request sent is not valid (the field at fault, as a JSON pointer).
    #[error("{0}")]
    Invalid(switchboard_domain::ValidationErrors),
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

impl From<StoreError> for OperatorError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::VersionConflict(_) | StoreError::Duplicate(_) => OperatorError::Conflict,
            other => OperatorError::Store(other),
        }
    }
}

/// What an operator's reply did.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorReply {
    pub message_id: String,
    /// Another request with the same idempotency key recorded the reply: this one sent and
    /// recorded nothing new (of several requests with one key, exactly one answers `false`).
    pub duplicate: bool,
    pub execution: ExecutionRecord,
}

/// Claims, operators' replies and ends, and handoffs over the API, on one set of ports.
#[derive(Debug, Clone)]
pub struct Operator {
    deps: Deps,
}

impl Operator {
    pub fn new(deps: Deps) -> Self {
        Self { deps }
    }

    /// `operator` claims the conversation of `session_id`, which a human must own. Claiming again
    /// is a no-op for the same operator and refused (`NotAllowed`, naming the holder) for another.
    pub async fn claim(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        operator: &str,
    ) -> Result<Session, OperatorError> {
        for _ in 0..ATTEMPTS {
            let started = Instant::now();
            let mut session = self.human_owned(tenant, session_id).await?;
            match &session.claim {
                Some(c) if c.operator == operator => return Ok(session),
                Some(c) => return Err(claimed_by(c)),
                None => {}
            }
            session.claim = Some(Claim { operator: operator.to_owned(), at: self.deps.clock.now() });
            let source = format!("claim-{}", ulid::Ulid::generate());
            let input = json!({ "operator": { "name": operator, "action": "claim" } });
            match self.commit(session.clone(), source, input, (vec![], vec![]), started).await {
                Ok(_) => {
                    session.version += 1;
                    return Ok(session);
                }
                Err(StoreError::VersionConflict(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(OperatorError::Conflict)
    }

    /// `operator` says `text` in the conversation of `session_id`, which a human must own and
    /// another operator must not have claimed (an unclaimed one is claimed by the reply). Sent
    /// through the Conversations port and added to the session's transcript, once per
    /// `idempotency_key`.
    pub async fn reply(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        operator: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<OperatorReply, OperatorError> {
        let deps = &self.deps;
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
            let sent = sent.map_err(OperatorError::Send)?;
            session.append_transcript([Message::assistant_text(format!("{HUMAN_PREFIX}{text}"))]);
            let input = json!({ "operator": { "name": operator, "action": "reply" }, "text": text });
            let actions = vec![Action::Reply { text: text.to_owned(), message_id: sent.message_id.clone() }];
            match self.commit(session, source.clone(), input, (actions, vec![]), started).await {
                Ok(execution) => return Ok(replied(execution, false)),
                Err(StoreError::VersionConflict(_) | StoreError::Duplicate(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(OperatorError::Conflict)
    }

    /// `operator` ends the conversation of `session_id`, which a human must own and no other
    /// operator must have claimed; publishes `session.ended`.
    pub async fn end(
        &self,
        tenant: &TenantId,
        session_id: SessionId,
        operator: &str,
        note: Option<&str>,
    ) -> Result<ExecutionRecord, OperatorError> {
        let started = Instant::now();
        let mut session = self.human_owned(tenant, session_id).await?;
        if let Some(c) = session.claim.as_ref().filter(|c| c.operator != operator) {
            return Err(claimed_by(c));
        }
        let source = format!("end-{}", ulid::Ulid::generate());
        let summary = note.map(str::to_owned);
        let mut events = vec![];
        let action = moves::end(&self.deps, &mut events, &mut session, summary, EndedBy::Operator(operator), &source);
        let input = json!({ "operator": { "name": operator, "action": "end" }, "note": note });
        // Ending is not retried: a session that changed meanwhile is the operator's to look at.
        Ok(self.commit(session, source, input, (vec![action], events), started).await?)
    }

    /// The session, if a human owns it and it is the newest of its conversation.
    async fn human_owned(&self, tenant: &TenantId, session_id: SessionId) -> Result<Session, OperatorError> {
        let session = self.newest(tenant, session_id).await?;
        if !session.is_human_owned() {
            return Err(OperatorError::NotAllowed("no human owns this conversation".into()));
        }
        Ok(session)
    }

    /// The session, if it is the newest of its conversation.
    async fn newest(&self, tenant: &TenantId, session_id: SessionId) -> Result<Session, OperatorError> {
        let sessions = &self.deps.sessions;
        let session = sessions.get_session(tenant, session_id).await?.ok_or(OperatorError::NoSession(session_id))?;
        let latest = sessions.latest_session(tenant, &session.conversation_id).await?;
        if latest.as_ref().map(|s| s.session_id) != Some(session_id) {
            return Err(OperatorError::NotAllowed("a newer session owns this conversation".into()));
        }
        Ok(session)
    }

    /// Commits `session` (as of the version read) with an operator's record of `done`: what
    /// was done and announced.
    async fn commit(
        &self,
        session: Session,
        source: String,
        input: serde_json::Value,
        done: (Vec<Action>, Vec<OutboundEvent>),
        started: Instant,
    ) -> Result<ExecutionRecord, StoreError> {
        let (actions, events) = done;
        let done = Done { source, input, status: ExecutionStatus::Operator, actions, events, started };
        self.commit_with(session, None, done).await
    }

    /// Commits `session` (as of the version read), and `next` if a handoff started it, with the
    /// record of what was done.
    async fn commit_with(
        &self,
        mut session: Session,
        next: Option<Session>,
        done: Done,
    ) -> Result<ExecutionRecord, StoreError> {
        let deps = &self.deps;
        let expected = session.version;
        session.version += 1;
        session.updated_at = deps.clock.now();
        let Done { source, input, status, actions, events, started } = done;
        let execution = record::of_request(deps, &session, source, input, status, actions, started);
        let mut sessions = vec![SessionWrite { session, expected_version: Some(expected) }];
        sessions.extend(next.map(|next| SessionWrite { session: next, expected_version: None }));
        let commit = TurnCommit { sessions, execution, events, content: vec![], resumes: None, coalesced: vec![] };
        deps.sessions.commit_turn(&commit).await?;
        deps.bus.relay(&commit.events).await;
        Ok(commit.execution)
    }
}

/// What a commit records: the source it is done once for, who asked for what, the outcome.
struct Done {
    source: String,
    input: serde_json::Value,
    status: ExecutionStatus,
    actions: Vec<Action>,
    /// What the commit announces.
    events: Vec<OutboundEvent>,
    started: Instant,
}

fn claimed_by(c: &Claim) -> OperatorError {
    OperatorError::NotAllowed(format!("claimed by {} at {}", c.operator, c.at.to_rfc3339()))
}

fn replied(execution: ExecutionRecord, duplicate: bool) -> OperatorReply {
    let message_id = execution.actions.iter().find_map(Action::message_id).unwrap_or_default().to_owned();
    OperatorReply { message_id, duplicate, execution }
}
