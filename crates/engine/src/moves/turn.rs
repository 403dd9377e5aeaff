//! The moves a turn makes, on the turn's state: what the session becomes, the actions to record,
//! whether the turn is finished. The system tools, a turn's final answer and bookkeeping, and the
//! router call these; each returns what happened or why the move was refused.

use switchboard_domain::{Action, AgentId, HandoffCause, OnFailure, OutboundEvent, Priority, Session};

use super::{AgentHandoff, EndedBy, HumanHandoff, Refused};
use crate::fault::ToolFault;
use crate::ports::{Deps, WorkItem};

/// What a turn has done so far to its session and the outside world.
#[derive(Debug)]
pub(crate) struct TurnState {
    pub session: Session,
    /// A session started by a handoff to another agent, committed with the turn.
    pub new_session: Option<Session>,
    pub actions: Vec<Action>,
    /// The events the turn announces: committed with it, published after (its outbox).
    pub events: Vec<OutboundEvent>,
    pub replies_sent: u32,
    /// Set by a terminal move: the loop stops after the current batch of calls.
    pub finished: bool,
    /// The newer message of the conversation that stopped the turn before its reply, if one did
    /// (see `execute::interrupt`).
    pub interrupted_by: Option<switchboard_domain::CoalescedMessage>,
}

impl TurnState {
    pub fn new(session: Session) -> Self {
        Self {
            session,
            new_session: None,
            actions: vec![],
            events: vec![],
            replies_sent: 0,
            finished: false,
            interrupted_by: None,
        }
    }

    /// Records what a move did; a terminal one (a handoff, an end) finishes the turn.
    pub fn did(&mut self, action: Action) {
        self.replies_sent += u32::from(matches!(action, Action::Reply { .. }));
        self.finished |= action.is_terminal();
        self.actions.push(action);
    }

    /// Replies with `text` under `key`: the sent message's id and its text (another one when
    /// the key had sent before: the words the customer read).
    pub async fn reply(
        &mut self,
        deps: &Deps,
        text: &str,
        key: &str,
    ) -> Result<Result<(String, String), Refused>, ToolFault> {
        let action = match super::reply(deps, &self.session, text, key).await? {
            Ok(action) => action,
            Err(refused) => return Ok(Err(refused)),
        };
        let sent = match &action {
            Action::Reply { text: sent, message_id } => (message_id.clone(), sent.clone()),
            _ => (String::new(), text.to_owned()),
        };
        self.did(action);
        Ok(Ok(sent))
    }

    /// Ends the conversation (the agent's tool, or its `handoffBehavior`).
    pub fn end(&mut self, deps: &Deps, summary: Option<String>, key: &str) {
        let action = super::end(deps, &mut self.events, &mut self.session, summary, EndedBy::Agent, key);
        self.did(action);
    }

    /// Hands the conversation to a human operator, for `cause` (the agent's own choice, or
    /// what its `handoffBehavior` answers).
    pub fn hand_off_to_human(&mut self, deps: &Deps, reason: &str, priority: Priority, cause: HandoffCause, key: &str) {
        let handoff = HumanHandoff { reason, priority, cause };
        let action = super::hand_off_to_human(deps, &mut self.events, &mut self.session, handoff, key);
        self.did(action);
    }

    /// Hands the conversation to a human operator because `principal` asked over the API (a
    /// cancelled turn): the event says who asked.
    pub fn hand_off_to_human_for(&mut self, deps: &Deps, reason: &str, principal: &str, key: &str) {
        let handoff = HumanHandoff { reason, priority: Priority::Normal, cause: HandoffCause::Api };
        let action = super::hand_off_to_human(deps, &mut self.events, &mut self.session, handoff, key);
        if let Some(event) = self.events.last_mut() {
            event.detail["principal"] = serde_json::json!(principal);
        }
        self.did(action);
    }

    /// Announces a `kind` event about the session under `key` (see [`super::announce`]).
    pub fn announce(&mut self, key: &str, kind: &str, extra: serde_json::Value) {
        super::announce(&mut self.events, key, kind, &self.session, extra);
    }

    /// Answers the customer as the agent's `onFailure` says (see [`super::answer_failure`]).
    pub async fn answer_failure(
        &mut self,
        deps: &Deps,
        on_failure: &OnFailure,
        reason: &str,
        key: &str,
    ) -> Result<(), ToolFault> {
        let (events, session) = (&mut self.events, &mut self.session);
        if let Some(action) = super::answer_failure(deps, events, session, on_failure, reason, key).await? {
            self.did(action);
        }
        Ok(())
    }

    /// Hands the conversation to another agent, which answers `item`'s message in its own
    /// session (started with the turn's commit); the target's id.
    pub async fn hand_off_to_agent(
        &mut self,
        deps: &Deps,
        item: &WorkItem,
        handoff: AgentHandoff,
        key: &str,
    ) -> Result<Result<AgentId, Refused>, ToolFault> {
        let next = match super::prepare_hand_off_to_agent(deps, &self.session, handoff).await? {
            Ok(next) => next,
            Err(refused) => return Ok(Err(refused)),
        };
        // The continuation is queued before the turn commits; if the commit never happens, the
        // original item is redelivered first (it heads the group) and queues it again under the
        // same deduplication id.
        let continuation = WorkItem {
            source_id: format!("{}#h{}", base_source(&item.source_id), next.session.handoff_depth),
            agent_id: next.session.agent_id,
            trigger_id: item.trigger_id,
            continuation: true,
            ..item.clone()
        };
        deps.queue.enqueue(&continuation).await?;
        let action = super::complete_hand_off_to_agent(deps, &mut self.events, &mut self.session, &next, key);
        self.did(action);
        let target = next.session.agent_id;
        self.new_session = Some(next.session);
        Ok(Ok(target))
    }
}

/// The message source a continuation's source id descends from (`message-c-1:m-1#h2` →
/// `message-c-1:m-1`).
fn base_source(source_id: &str) -> &str {
    source_id.split_once("#h").map_or(source_id, |(base, _)| base)
}
