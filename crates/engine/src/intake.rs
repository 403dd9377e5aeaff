//! Event intake: decides whether an inbound message goes to an agent, and to which (the tenant's
//! triggers in priority order), then enqueues one work item in the conversation's FIFO group. It
//! runs no agent and sends nothing. (Not to be confused with the router *pattern*, an agent that
//! picks another agent: `crate::patterns::router`.)

use std::sync::Arc;

use switchboard_domain::event::Direction;
use switchboard_domain::trigger::first_match;
use switchboard_domain::{AgentId, AgentStatus, EventType, InboundEvent, SessionId, TenantId, TriggerId};
use tracing::{debug, info, warn};

use crate::ports::{ConfigStore, Enqueued, SessionStore, WorkItem, WorkQueue};
use crate::ports::{QueueError, StoreError};

/// What the router did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteOutcome {
    /// A work item is queued (or was already, if `duplicate`).
    Enqueued { trigger_id: TriggerId, agent_id: AgentId, duplicate: bool },
    /// No active trigger matched.
    NoMatch,
    /// A human operator owns the conversation; agents stay out of it.
    HumanOwned { session_id: SessionId },
    /// An outbound message (for example the agent's own reply echoed back): never routed.
    NotInbound,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("unknown tenant '{0}'")]
    UnknownTenant(TenantId),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl RouteError {
    pub fn retryable(&self) -> bool {
        match self {
            RouteError::UnknownTenant(_) => false,
            RouteError::Store(e) => e.retryable(),
            RouteError::Queue(e) => e.retryable,
        }
    }
}

#[derive(Clone)]
pub struct Intake {
    config: Arc<dyn ConfigStore>,
    sessions: Arc<dyn SessionStore>,
    queue: Arc<dyn WorkQueue>,
}

impl std::fmt::Debug for Intake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intake").finish_non_exhaustive()
    }
}

impl Intake {
    pub fn new(config: Arc<dyn ConfigStore>, sessions: Arc<dyn SessionStore>, queue: Arc<dyn WorkQueue>) -> Self {
        Self { config, sessions, queue }
    }

    /// Routes one event. Safe to call again with the same event: the queue deduplicates on the
    /// event id and the executor records each source once.
    pub async fn route(&self, event: &InboundEvent) -> Result<RouteOutcome, RouteError> {
        let d = &event.detail;
        if !self.config.tenant_exists(&d.tenant_id).await? {
            return Err(RouteError::UnknownTenant(d.tenant_id.clone()));
        }
        self.route_known_tenant(event).await
    }

    /// [`Intake::route`] for a caller that has just checked that the tenant exists.
    #[tracing::instrument(skip_all, fields(event_id = %event.id, tenant = %event.detail.tenant_id))]
    pub async fn route_known_tenant(&self, event: &InboundEvent) -> Result<RouteOutcome, RouteError> {
        let d = &event.detail;
        if d.direction != Direction::Inbound {
            debug!(conversation_id = %d.conversation_id, "outbound message; not routed");
            return Ok(RouteOutcome::NotInbound);
        }
        if let Some(latest) = self.sessions.latest_session(&d.tenant_id, &d.conversation_id).await?
            && latest.is_human_owned()
        {
            // No trigger is consulted and no agent will answer; the item still goes through the
            // conversation's queue group so that the message joins the session transcript in
            // order (an agent the conversation is handed back to sees it) with a skip record.
            debug!(session_id = %latest.session_id, "conversation owned by a human; recorded, not answered");
            let queued = self.queue.enqueue(&work_item(event, latest.agent_id, None)).await?;
            if queued == Enqueued::Duplicate {
                info!(conversation_id = %d.conversation_id, "event already queued; the repeat is dropped");
            }
            return Ok(RouteOutcome::HumanOwned { session_id: latest.session_id });
        }
        let triggers = self.config.active_triggers(&d.tenant_id, EventType::MessageNew).await?;
        let mut remaining: &[_] = &triggers;
        while let Some(trigger) = first_match(remaining, EventType::MessageNew, &event.raw_detail) {
            let position = remaining.iter().position(|t| t.trigger_id == trigger.trigger_id).unwrap_or(0);
            remaining = &remaining[position + 1..];
            match self.config.get_agent(&d.tenant_id, trigger.agent_id).await? {
                Some(agent) if agent.status == AgentStatus::Active => {
                    let item = work_item(event, agent.agent_id, Some(trigger.trigger_id));
                    let outcome = self.queue.enqueue(&item).await?;
                    if outcome == Enqueued::Duplicate {
                        info!(conversation_id = %d.conversation_id, "event already queued; the repeat is dropped");
                    }
                    return Ok(RouteOutcome::Enqueued {
                        trigger_id: trigger.trigger_id,
                        agent_id: agent.agent_id,
                        duplicate: outcome == Enqueued::Duplicate,
                    });
                }
                // A trigger pointing at a missing or inactive agent is skipped, not fatal: the
                // next trigger in priority order may still answer.
                _ => {
                    warn!(trigger_id = %trigger.trigger_id, agent_id = %trigger.agent_id, "trigger's agent is missing or not active; skipped")
                }
            }
        }
        info!(conversation_id = %d.conversation_id, triggers = triggers.len(), "no active trigger matched; not answered");
        Ok(RouteOutcome::NoMatch)
    }
}

/// The work item for `event`, answered by `agent`.
fn work_item(event: &InboundEvent, agent: AgentId, trigger: Option<TriggerId>) -> WorkItem {
    let d = &event.detail;
    WorkItem {
        tenant_id: d.tenant_id.clone(),
        source_id: event.id.clone(),
        conversation_id: d.conversation_id.clone(),
        message_id: d.message_id.clone(),
        text: d.text.clone(),
        trigger_id: trigger,
        agent_id: agent,
        continuation: false,
        detail: event.raw_detail.clone(),
    }
}
