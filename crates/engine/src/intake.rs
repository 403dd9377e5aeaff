//! Event intake: decides whether an inbound message goes to an agent, and to which (the tenant's
//! triggers in priority order), then enqueues one work item in the conversation's FIFO group. It
//! runs no agent and sends nothing. (Not to be confused with the router *pattern*, an agent that
//! picks another agent: `crate::patterns::router`.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchboard_domain::burst::BurstMode;
use switchboard_domain::event::Direction;
use switchboard_domain::trigger::TriggerIndex;
use switchboard_domain::{
    AgentId, EventType, InboundEvent, LimitName, Recording, Refusal, Session, SessionId, Tenant, TenantId,
    TenantStatus, Trigger, TriggerId,
};
use tracing::{debug, info, warn};

mod schedules;
pub use schedules::{Fired, SLOTS_PER_TICK};

use crate::limits::{Admission, AdmitStep, Limits};
use crate::ports::{
    Arrival, ConfigStore, CountAndEnqueue, Enqueued, Metrics, NoMetrics, SessionStore, WorkItem, WorkQueue,
};
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
    /// The tenant is suspended: nothing runs for it.
    Suspended,
    /// A tenant limit refused the message: it is queued to be recorded as refused (and answered
    /// as the tenant's `onLimit` says), not run.
    Limited { agent_id: AgentId, limit: LimitName, duplicate: bool },
}

impl RouteOutcome {
    /// The outcome as the API and the metrics name it.
    pub fn as_str(&self) -> &'static str {
        match self {
            RouteOutcome::Enqueued { duplicate: false, .. } => "enqueued",
            RouteOutcome::Enqueued { duplicate: true, .. } => "duplicate",
            RouteOutcome::NoMatch => "no_match",
            RouteOutcome::HumanOwned { .. } => "human_owned",
            RouteOutcome::NotInbound => "not_inbound",
            RouteOutcome::Suspended => "suspended",
            RouteOutcome::Limited {
                limit: LimitName::InvocationsPerMinute | LimitName::ConcurrentSessions, ..
            } => "rate_limited",
            RouteOutcome::Limited { limit: LimitName::TokensPerDay, .. } => "budget_exceeded",
        }
    }
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
    metrics: Arc<dyn Metrics>,
    limits: Option<Limits>,
    tenants: Option<Arc<TenantCache>>,
    indexes: Arc<Indexes>,
    /// The moment triggers' time conditions are judged at.
    clock: Arc<dyn crate::ports::Clock>,
}

/// Each tenant's triggers compiled for routing, rebuilt when the store hands out a new list
/// (its trigger cache refilled).
#[derive(Default)]
struct Indexes(Mutex<HashMap<(TenantId, EventType), Compiled>>);

/// A trigger list as the store handed it out, and its index.
type Compiled = (Arc<[Trigger]>, Arc<TriggerIndex>);

impl Indexes {
    fn get(&self, tenant: &TenantId, event_type: EventType, triggers: &Arc<[Trigger]>) -> Arc<TriggerIndex> {
        let key = (tenant.clone(), event_type);
        if let Ok(map) = self.0.lock()
            && let Some((list, index)) = map.get(&key)
            && Arc::ptr_eq(list, triggers)
        {
            return Arc::clone(index);
        }
        let index = Arc::new(TriggerIndex::new(triggers, event_type));
        if let Ok(mut map) = self.0.lock() {
            map.insert(key, (Arc::clone(triggers), Arc::clone(&index)));
        }
        index
    }
}

/// Tenants [`Intake::route`] read, kept for a while (an unknown tenant is never kept).
struct TenantCache {
    ttl: Duration,
    entries: Mutex<HashMap<TenantId, (Instant, Tenant)>>,
}

impl std::fmt::Debug for Intake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intake").finish_non_exhaustive()
    }
}

impl Intake {
    pub fn new(config: Arc<dyn ConfigStore>, sessions: Arc<dyn SessionStore>, queue: Arc<dyn WorkQueue>) -> Self {
        let indexes = Arc::default();
        let clock = Arc::new(crate::ports::SystemClock);
        Self { config, sessions, queue, metrics: Arc::new(NoMetrics), limits: None, tenants: None, indexes, clock }
    }

    /// Judges triggers' time conditions by `clock` (the system clock without).
    pub fn with_clock(mut self, clock: Arc<dyn crate::ports::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Serves each tenant [`Intake::route`] reads from memory for `ttl` (its status and limits
    /// included): a read saved per message at the price of changes showing up to `ttl` late.
    pub fn with_tenant_cache(mut self, ttl: Duration) -> Self {
        self.tenants = Some(Arc::new(TenantCache { ttl, entries: Mutex::default() }));
        self
    }

    async fn tenant(&self, tenant: &TenantId) -> Result<Option<Tenant>, StoreError> {
        let Some(cache) = &self.tenants else {
            return self.config.get_tenant(tenant).await;
        };
        let fresh = |(at, _): &&(Instant, Tenant)| at.elapsed() < cache.ttl;
        if let Some((_, hit)) = cache.entries.lock().ok().and_then(|e| e.get(tenant).filter(fresh).cloned()) {
            return Ok(Some(hit));
        }
        let found = self.config.get_tenant(tenant).await?;
        if let (Some(t), Ok(mut entries)) = (&found, cache.entries.lock()) {
            entries.insert(tenant.clone(), (Instant::now(), t.clone()));
        }
        Ok(found)
    }

    /// Enforces the tenants' limits on every message an agent would answer (without: none).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Counts every routing outcome in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Counts an outcome decided outside [`Intake::route`] (the embedded profile's suspended
    /// tenants).
    pub fn count(&self, tenant: &TenantId, outcome: &RouteOutcome) {
        self.metrics.inbound(tenant, outcome.as_str());
    }

    /// Routes one event. Safe to call again with the same message, under the same event id or
    /// another: its work's source id is the message's ([`source_id`]), on which the queue
    /// deduplicates and the executor records once.
    pub async fn route(&self, event: &InboundEvent) -> Result<RouteOutcome, RouteError> {
        let d = &event.detail;
        match self.tenant(&d.tenant_id).await? {
            None => Err(RouteError::UnknownTenant(d.tenant_id.clone())),
            Some(t) if t.status == TenantStatus::Suspended => {
                info!(tenant = %d.tenant_id, event_id = %event.id, "tenant suspended; the message is not answered");
                self.count(&d.tenant_id, &RouteOutcome::Suspended);
                Ok(RouteOutcome::Suspended)
            }
            Some(t) => self.route_known_tenant(event, &t).await,
        }
    }

    /// [`Intake::route`] for a caller that has just read the event's tenant.
    pub async fn route_known_tenant(&self, event: &InboundEvent, tenant: &Tenant) -> Result<RouteOutcome, RouteError> {
        let outcome = self.decide(event, tenant).await?;
        self.count(&event.detail.tenant_id, &outcome);
        Ok(outcome)
    }

    #[tracing::instrument(skip_all, fields(event_id = %event.id, tenant = %event.detail.tenant_id))]
    async fn decide(&self, event: &InboundEvent, tenant: &Tenant) -> Result<RouteOutcome, RouteError> {
        let d = &event.detail;
        if d.direction != Direction::Inbound {
            debug!(conversation_id = %d.conversation_id, "outbound message; not routed");
            return Ok(RouteOutcome::NotInbound);
        }
        // An edit is answered only when a trigger listens for edits: read nothing else until one
        // does (most tenants have none, and the original message was answered already).
        let event_type = event.event_type();
        if event_type == EventType::MessageUpdated
            && self.config.active_triggers(&d.tenant_id, event_type).await?.is_empty()
        {
            debug!(conversation_id = %d.conversation_id, "an edited message, and no trigger listens for edits");
            return Ok(RouteOutcome::NoMatch);
        }
        // Who owns the conversation is read first, unless the limits read it in the same step
        // as the session slot and the count (the AWS profile: a condition in the limits
        // transaction); then it is read here only when no admission asks it.
        let in_admission = self.limits.as_ref().is_some_and(Limits::sees_human_owner);
        let latest = match in_admission {
            true => None,
            false => Some(self.sessions.latest_session_for_routing(&d.tenant_id, &d.conversation_id).await?),
        };
        if let Some(Some(latest)) = &latest
            && latest.is_human_owned()
        {
            return self.to_human(event, latest.session_id, latest.agent_id).await;
        }
        let likely_held = latest.as_ref().map(|l| l.as_ref().is_some_and(|s| s.is_active()));
        let triggers = self.config.active_triggers(&d.tenant_id, event_type).await?;
        let index = self.indexes.get(&d.tenant_id, event_type, &triggers);
        let (mut from, now) = (0, self.clock.now());
        while let Some((position, trigger)) = index.first_match_in(&event.raw_detail, from, now, &tenant.calendars) {
            from = position + 1;
            match crate::config::trigger_agent(self.config.as_ref(), trigger, &d.conversation_id).await? {
                Some((agent, variant)) => {
                    let item = WorkItem {
                        recording: tenant.recording,
                        close_idle_after: tenant.limits.close_idle_after(),
                        variant,
                        // What a burst is gathered by, for an agent that coalesces them.
                        arrived_at: Some(now),
                        ..work_item(event, agent.agent_id, Some(trigger), None)
                    };
                    let arrival = (agent.bursts.mode == BurstMode::Interrupt).then(|| Arrival {
                        source_id: item.source_id.clone(),
                        message_id: item.message_id.clone(),
                        arrived_at: now,
                    });
                    let outcome = self.admit_and_enqueue(event, tenant, item, trigger.trigger_id, likely_held).await?;
                    if let Some(arrival) = arrival {
                        self.note_arrival(event, &outcome, &arrival).await;
                    }
                    return Ok(outcome);
                }
                // A trigger pointing at a missing or inactive agent is skipped, not fatal: the
                // next trigger in priority order may still answer.
                None => {
                    warn!(trigger_id = %trigger.trigger_id, agent_id = %trigger.agent_id, "trigger's agent is missing or not active; skipped")
                }
            }
        }
        if in_admission && let Some(human) = self.human_owner(event).await? {
            return self.to_human(event, human.session_id, human.agent_id).await;
        }
        info!(conversation_id = %d.conversation_id, triggers = triggers.len(), "no active trigger matched; not answered");
        Ok(RouteOutcome::NoMatch)
    }

    /// Queues `item` (a message the trigger's agent will answer), admitted by the tenant's limits
    /// if it has them: counted and queued in one step where the queue can, refused with a record
    /// otherwise (its place in the conversation kept), or queued for the human who owns the
    /// conversation.
    async fn admit_and_enqueue(
        &self,
        event: &InboundEvent,
        tenant: &Tenant,
        mut item: WorkItem,
        trigger_id: TriggerId,
        likely_held: Option<bool>,
    ) -> Result<RouteOutcome, RouteError> {
        let d = &event.detail;
        let agent_id = item.agent_id;
        let duplicate = |outcome: Enqueued| {
            let repeat = outcome == Enqueued::Duplicate;
            if repeat {
                info!(conversation_id = %d.conversation_id, message_id = %d.message_id,
                    "message already queued; the repeat is dropped");
            }
            repeat
        };
        let enqueued = |outcome| RouteOutcome::Enqueued { trigger_id, agent_id, duplicate: duplicate(outcome) };
        let Some(limits) = &self.limits else {
            return Ok(enqueued(self.queue.enqueue(&item).await?));
        };
        let admission = match limits.prepare(tenant, &d.conversation_id, likely_held, true).await? {
            AdmitStep::Decided(admission) => admission,
            AdmitStep::Count(counting) => {
                item.day_tokens = Some(counting.day_tokens());
                match self.queue.count_and_enqueue(limits.counters(), &counting.ask(), &item).await? {
                    CountAndEnqueue::Enqueued(outcome) => return Ok(enqueued(outcome)),
                    CountAndEnqueue::NotCounted(admit) => {
                        item.day_tokens = None;
                        limits.conclude(tenant, &counting, admit).await?
                    }
                }
            }
        };
        let refused = match admission {
            // Not from `conclude` after `NotCounted`; kept whole all the same.
            Admission::Admitted(day) => {
                return Ok(enqueued(self.queue.enqueue(&WorkItem { day_tokens: Some(day), ..item }).await?));
            }
            Admission::HumanOwned { session_id, agent_id } => return self.to_human(event, session_id, agent_id).await,
            Admission::Refused(r) => r,
        };
        // The day's tokens are checked before the owner is read: a human's conversation is not
        // refused for the agents' budget.
        if limits.sees_human_owner()
            && refused.limit == LimitName::TokensPerDay
            && let Some(human) = self.human_owner(event).await?
        {
            return self.to_human(event, human.session_id, human.agent_id).await;
        }
        let limit = refused.limit;
        let outcome = self.queue.enqueue(&WorkItem { refused: Some(refused), ..item }).await?;
        info!(conversation_id = %d.conversation_id, limit = limit.as_str(), "a tenant limit refused the message; recorded, not run");
        Ok(RouteOutcome::Limited { agent_id, limit, duplicate: duplicate(outcome) })
    }

    /// Notes `arrival`, just queued for an agent that interrupts, where a running turn of its
    /// conversation looks for it ([`SessionStore::note_arrival`]). Only after the message is
    /// queued, and never failing the route: a note that is missing only lets a turn reply as it
    /// would without the policy.
    async fn note_arrival(&self, event: &InboundEvent, outcome: &RouteOutcome, arrival: &Arrival) {
        if !matches!(outcome, RouteOutcome::Enqueued { duplicate: false, .. }) {
            return;
        }
        let d = &event.detail;
        if let Err(e) = self.sessions.note_arrival(&d.tenant_id, &d.conversation_id, arrival).await {
            warn!(conversation_id = %d.conversation_id, error = %e,
                "the message's arrival could not be noted; a running turn will not be interrupted by it");
        }
    }

    /// The conversation's newest session, if a human operator owns it.
    async fn human_owner(&self, event: &InboundEvent) -> Result<Option<Session>, StoreError> {
        let d = &event.detail;
        let latest = self.sessions.latest_session_for_routing(&d.tenant_id, &d.conversation_id).await?;
        Ok(latest.filter(Session::is_human_owned))
    }

    /// Queues `event` for the conversation a human operator owns through `session_id`. No
    /// trigger is consulted and no agent will answer; the item still goes through the
    /// conversation's queue group so that the message joins the session transcript in order (an
    /// agent the conversation is handed back to sees it) with a skip record.
    async fn to_human(
        &self,
        event: &InboundEvent,
        session_id: SessionId,
        agent_id: AgentId,
    ) -> Result<RouteOutcome, RouteError> {
        let d = &event.detail;
        debug!(session_id = %session_id, "conversation owned by a human; recorded, not answered");
        let queued = self.queue.enqueue(&work_item(event, agent_id, None, None)).await?;
        if queued == Enqueued::Duplicate {
            info!(conversation_id = %d.conversation_id, message_id = %d.message_id,
                "message already queued; the repeat is dropped");
        }
        Ok(RouteOutcome::HumanOwned { session_id })
    }
}

/// The source id of the work a `message.new` event causes: the message within its conversation,
/// `message-<conversation>:<message>`, not the event id. A producer that sends one message again
/// under a new event id (a `PutEvents` retry after a timeout gets a new id) sends the same
/// source, so the queue's deduplication id, the executor's once-per-source record and the
/// idempotency keys of the replies all find the first; a repeat of the event itself carries the
/// same message and is a repeat too. Unambiguous: a conversation id has no `:` (it is an external
/// id, like the message id), and no other source (`invoke-…`, `reply-…`, a bare event id queued
/// before this scheme) starts with `message-` and has a `:`. Scoped by tenant wherever it is
/// used, like every source id.
pub fn source_id(event: &InboundEvent) -> String {
    let d = &event.detail;
    match event.event_type() {
        // An edit is work of its own, once per text the message was edited to: a redelivery of
        // the same edit is the same work, a second edit is new. (`edit-` is no other source's
        // prefix.)
        EventType::MessageUpdated => {
            let text = switchboard_domain::recording::sha256_hex(d.text.as_bytes());
            format!("edit-{}:{}:{}", d.conversation_id, d.message_id, &text[..16])
        }
        _ => format!("message-{}:{}", d.conversation_id, d.message_id),
    }
}

/// The work item for `event`, answered by `agent`.
fn work_item(event: &InboundEvent, agent: AgentId, trigger: Option<&Trigger>, refused: Option<Refusal>) -> WorkItem {
    let d = &event.detail;
    WorkItem {
        tenant_id: d.tenant_id.clone(),
        source_id: source_id(event),
        event_id: Some(event.id.clone()),
        conversation_id: d.conversation_id.clone(),
        message_id: d.message_id.clone(),
        text: d.text.clone(),
        trigger_id: trigger.map(|t| t.trigger_id),
        trigger_version: trigger.map(|t| t.version),
        variant: None,
        agent_id: agent,
        continuation: false,
        detail: event.raw_detail.clone(),
        refused,
        day_tokens: None,
        follow: false,
        resume: None,
        arrived_at: None,
        earlier: vec![],
        recording: Recording::default(),
        close_idle_after: None,
        closes_idle: None,
    }
}

#[cfg(test)]
mod tests {
    //! Event intake against in-memory ports: which trigger answers, what is queued, what is
    //! refused. (Whole turns are tested against the embedded adapters in `crates/embedded/tests`.)

    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use serde_json::json;
    use switchboard_domain::{
        Agent, AgentId, HandoffTarget, Session, SessionId, SessionStatus, Skill, SkillId, Tool, ToolId, Trigger,
    };

    use super::*;
    use crate::ports::{SessionStore, TurnCommit};

    const FRONT: &str = "01JD0000SVPP0RT0AGENT00001";
    const OFF_DUTY: &str = "01JD0000PAYMENTS0AGENT0002";

    #[derive(Default)]
    struct World {
        tenants: Vec<TenantId>,
        agents: Vec<Agent>,
        triggers: Vec<Trigger>,
        latest: Option<Session>,
        queued: Mutex<Vec<WorkItem>>,
        dedup: Mutex<HashSet<String>>,
        tenant_reads: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl ConfigStore for World {
        async fn get_tenant(&self, tenant: &TenantId) -> Result<Option<switchboard_domain::Tenant>, StoreError> {
            self.tenant_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(self.tenants.contains(tenant).then(|| switchboard_domain::Tenant {
                tenant_id: tenant.clone(),
                name: "T".into(),
                status: Default::default(),
                created_at: chrono::DateTime::UNIX_EPOCH,
                limits: Default::default(),
                recording: Default::default(),
                calendars: Default::default(),
                time_zone: None,
            }))
        }
        async fn get_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError> {
            Ok(self.agents.iter().find(|a| a.tenant_id == *tenant && a.agent_id == agent).cloned())
        }
        async fn get_tool(&self, _: &TenantId, _: ToolId) -> Result<Option<Tool>, StoreError> {
            Ok(None)
        }
        async fn get_skill(&self, _: &TenantId, _: SkillId) -> Result<Option<Skill>, StoreError> {
            Ok(None)
        }
        async fn active_triggers(&self, tenant: &TenantId, kind: EventType) -> Result<Arc<[Trigger]>, StoreError> {
            Ok(self.triggers.iter().filter(|t| t.tenant_id == *tenant && t.event_type == kind).cloned().collect())
        }
    }

    #[async_trait]
    impl SessionStore for World {
        async fn get_session(&self, _: &TenantId, _: SessionId) -> Result<Option<Session>, StoreError> {
            Ok(None)
        }
        async fn latest_session(&self, tenant: &TenantId, conversation: &str) -> Result<Option<Session>, StoreError> {
            Ok(self.latest.clone().filter(|s| s.tenant_id == *tenant && s.conversation_id == conversation))
        }
        async fn sessions_for_conversation(&self, _: &TenantId, _: &str) -> Result<Vec<Session>, StoreError> {
            Ok(vec![])
        }
        async fn list_sessions(
            &self,
            _: &TenantId,
            _: crate::ports::SessionFilter,
            _: Option<SessionId>,
            _: usize,
        ) -> Result<crate::ports::Page<Session>, StoreError> {
            Ok(crate::ports::Page { items: vec![], next_cursor: None })
        }
        async fn commit_turn(&self, _: &TurnCommit) -> Result<(), StoreError> {
            Ok(())
        }
        async fn write_session(&self, _: &crate::ports::SessionWrite) -> Result<(), StoreError> {
            Ok(())
        }
        async fn sessions_awaiting_approval(&self, _: Option<&TenantId>, _: usize) -> Result<Vec<Session>, StoreError> {
            Ok(vec![])
        }
        async fn idle_sessions(
            &self,
            _: chrono::DateTime<chrono::Utc>,
            _: usize,
        ) -> Result<Vec<crate::ports::IdleSession>, StoreError> {
            Ok(vec![])
        }
    }

    #[async_trait]
    impl WorkQueue for World {
        async fn enqueue(&self, item: &WorkItem) -> Result<Enqueued, QueueError> {
            if !self.dedup.lock().unwrap().insert(item.dedup_id()) {
                return Ok(Enqueued::Duplicate);
            }
            self.queued.lock().unwrap().push(item.clone());
            Ok(Enqueued::Queued)
        }
    }

    fn agent(tenant: &str, id: &str, status: &str) -> Agent {
        serde_json::from_value(json!({
            "tenantId": tenant, "agentId": id, "name": "A", "systemPrompt": "p", "model": "m", "status": status,
            "tools": ["send_message"], "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap()
    }

    fn trigger(tenant: &str, agent: &str, priority: i32, contains: &str) -> Trigger {
        serde_json::from_value(json!({
            "tenantId": tenant, "triggerId": TriggerId::generate(), "name": "t", "agentId": agent,
            "eventType": "message.new", "priority": priority, "status": "active",
            "conditions": {"all": [{"field": "message.text", "operator": "contains", "value": contains}]},
            "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap()
    }

    /// Event `id` of `tenant` carrying message `m-<id>` of conversation c-1.
    fn event(tenant: &str, id: &str, direction: &str, text: &str) -> InboundEvent {
        message_event(tenant, id, &format!("m-{id}"), direction, text)
    }

    fn message_event(tenant: &str, id: &str, message: &str, direction: &str, text: &str) -> InboundEvent {
        InboundEvent::parse(&json!({
            "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": tenant, "conversationId": "c-1", "messageId": message,
                        "channel": {}, "conversation": {}, "message": { "direction": direction, "text": text } }
        }))
        .unwrap()
    }

    /// Tenants `ta` and `tb`, each with a front agent answering "help" and, first in priority, a
    /// trigger on "help" pointing at an inactive agent.
    fn world() -> World {
        let mut w = World { tenants: vec!["ta".parse().unwrap(), "tb".parse().unwrap()], ..World::default() };
        for t in ["ta", "tb"] {
            w.agents.push(agent(t, FRONT, "active"));
            w.agents.push(agent(t, OFF_DUTY, "inactive"));
            w.triggers.push(trigger(t, OFF_DUTY, 1, "help"));
            w.triggers.push(trigger(t, FRONT, 5, "help"));
        }
        w
    }

    fn intake(w: &Arc<World>) -> Intake {
        Intake::new(w.clone(), w.clone(), w.clone())
    }

    #[tokio::test]
    async fn the_first_matching_trigger_with_an_active_agent_answers() {
        let w = Arc::new(world());
        let outcome = intake(&w).route(&event("ta", "e-1", "inbound", "help please")).await.unwrap();
        // the inactive agent's trigger comes first and is skipped
        assert!(
            matches!(outcome, RouteOutcome::Enqueued { agent_id, duplicate: false, .. } if agent_id.to_string() == FRONT)
        );
        let queued = w.queued.lock().unwrap().clone();
        assert_eq!(queued.len(), 1);
        assert_eq!((queued[0].source_id.as_str(), queued[0].group_id().as_str()), ("message-c-1:m-e-1", "ta:c-1"));
        assert_eq!(queued[0].event_id.as_deref(), Some("e-1"));
    }

    fn edit(id: &str, message: &str, text: &str) -> InboundEvent {
        let mut e = message_event("ta", id, message, "inbound", text);
        e.detail_type = switchboard_domain::event::MESSAGE_UPDATED.into();
        e
    }

    #[tokio::test]
    async fn an_edit_is_answered_only_by_a_trigger_that_listens_for_edits_once_per_text() {
        // given the message.new triggers on "help" and no trigger on edits
        let plain = Arc::new(world());
        // an edited message that says "help" is not answered by them, and nothing is queued
        assert_eq!(intake(&plain).route(&edit("e-1", "m-1", "help, order 1234")).await.unwrap(), RouteOutcome::NoMatch);
        assert!(plain.queued.lock().unwrap().is_empty());
        // when a trigger listens for edits
        let mut w = world();
        let mut on_edits = trigger("ta", FRONT, 10, "order");
        on_edits.event_type = EventType::MessageUpdated;
        w.triggers.push(on_edits);
        let w = Arc::new(w);
        let i = intake(&w);
        // then an edit it matches is queued under its own source, with the new text
        let outcome = i.route(&edit("e-2", "m-1", "help, order 1234")).await.unwrap();
        assert!(matches!(outcome, RouteOutcome::Enqueued { duplicate: false, .. }), "{outcome:?}");
        // the same edit again (a redelivery under another event id) is a duplicate, another edit is new
        let again = i.route(&edit("e-3", "m-1", "help, order 1234")).await.unwrap();
        assert!(matches!(again, RouteOutcome::Enqueued { duplicate: true, .. }), "{again:?}");
        let second = i.route(&edit("e-4", "m-1", "help, order 1235")).await.unwrap();
        assert!(matches!(second, RouteOutcome::Enqueued { duplicate: false, .. }), "{second:?}");
        // and a new message is still answered by the message.new triggers alone
        assert_eq!(i.route(&event("ta", "e-5", "inbound", "an order")).await.unwrap(), RouteOutcome::NoMatch);
        let queued = w.queued.lock().unwrap().clone();
        let seen: Vec<(&str, &str)> = queued.iter().map(|q| (q.source_id.as_str(), q.text.as_str())).collect();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[0].0.starts_with("edit-c-1:m-1:") && seen[0].0.len() == "edit-c-1:m-1:".len() + 16, "{seen:?}");
        assert_ne!(seen[0].0, seen[1].0);
        assert_eq!((seen[0].1, seen[1].1), ("help, order 1234", "help, order 1235"));
        assert_ne!(seen[0].0, source_id(&event("ta", "e-1", "inbound", "x")), "not the message's own source");
    }

    #[tokio::test]
    async fn nothing_is_queued_for_an_unknown_tenant_an_outbound_message_or_no_match() {
        let w = Arc::new(world());
        let i = intake(&w);
        assert!(matches!(i.route(&event("tz", "e-1", "inbound", "help")).await, Err(RouteError::UnknownTenant(_))));
        assert_eq!(i.route(&event("ta", "e-2", "outbound", "help")).await.unwrap(), RouteOutcome::NotInbound);
        assert_eq!(i.route(&event("ta", "e-3", "inbound", "hello")).await.unwrap(), RouteOutcome::NoMatch);
        assert!(w.queued.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_tenant_cache_reads_a_known_tenant_once_per_ttl_and_an_unknown_one_every_time() {
        let reads = |w: &World| w.tenant_reads.load(std::sync::atomic::Ordering::Relaxed);
        let w = Arc::new(world());
        let cached = intake(&w).with_tenant_cache(Duration::from_secs(3600));
        for (i, t) in ["ta", "ta", "tb", "ta"].into_iter().enumerate() {
            let outcome = cached.route(&event(t, &format!("e-{i}"), "inbound", "help")).await.unwrap();
            assert!(matches!(outcome, RouteOutcome::Enqueued { .. }), "{outcome:?}");
        }
        assert_eq!(reads(&w), 2, "ta and tb read once each");
        for _ in 0..2 {
            let unknown = cached.route(&event("tz", "e-9", "inbound", "help")).await;
            assert!(matches!(unknown, Err(RouteError::UnknownTenant(_))));
        }
        assert_eq!(reads(&w), 4, "an unknown tenant is asked for every time (it may be created any moment)");
        // a clone shares the cache; a TTL of zero keeps nothing
        cached.clone().route(&event("tb", "e-10", "inbound", "help")).await.unwrap();
        assert_eq!(reads(&w), 4);
        let uncached = intake(&w).with_tenant_cache(Duration::ZERO);
        uncached.route(&event("ta", "e-11", "inbound", "help")).await.unwrap();
        uncached.route(&event("ta", "e-12", "inbound", "help")).await.unwrap();
        assert_eq!(reads(&w), 6);
    }

    #[tokio::test]
    async fn a_repeat_is_a_duplicate_in_its_tenant_only() {
        let w = Arc::new(world());
        let i = intake(&w);
        let first = i.route(&event("ta", "e-1", "inbound", "help")).await.unwrap();
        let again = i.route(&event("ta", "e-1", "inbound", "help")).await.unwrap();
        let other = i.route(&event("tb", "e-1", "inbound", "help")).await.unwrap();
        assert!(matches!(first, RouteOutcome::Enqueued { duplicate: false, .. }));
        assert!(matches!(again, RouteOutcome::Enqueued { duplicate: true, .. }));
        assert!(matches!(other, RouteOutcome::Enqueued { duplicate: false, .. }));
        let tenants: Vec<String> = w.queued.lock().unwrap().iter().map(|q| q.tenant_id.to_string()).collect();
        assert_eq!(tenants, ["ta", "tb"]);
    }

    #[tokio::test]
    async fn the_same_message_under_a_new_event_id_is_a_duplicate_in_its_tenant_only() {
        // given a message taken in once
        let w = Arc::new(world());
        let i = intake(&w);
        let first = i.route(&message_event("ta", "e-1", "m-1", "inbound", "help")).await.unwrap();
        // when a producer sends it again under a new event id (a retried PutEvents), and another
        // tenant sends the same conversation and message ids
        let resent = i.route(&message_event("ta", "e-2", "m-1", "inbound", "help")).await.unwrap();
        let other = i.route(&message_event("tb", "e-2", "m-1", "inbound", "help")).await.unwrap();
        // then the resent one is a duplicate, the other tenant's is its own message
        assert!(matches!(first, RouteOutcome::Enqueued { duplicate: false, .. }));
        assert!(matches!(resent, RouteOutcome::Enqueued { duplicate: true, .. }), "{resent:?}");
        assert!(matches!(other, RouteOutcome::Enqueued { duplicate: false, .. }));
        let queued: Vec<_> = w.queued.lock().unwrap().iter().map(|q| (q.tenant_id.to_string(), q.dedup_id())).collect();
        assert_eq!(queued.len(), 2);
        assert_eq!(queued[0].0, "ta");
        assert_eq!(queued[1].0, "tb");
        assert_ne!(queued[0].1, queued[1].1, "the dedup id is scoped by tenant");
        // and another message of the conversation under a new event id is not a repeat
        let next = i.route(&message_event("ta", "e-3", "m-2", "inbound", "help")).await.unwrap();
        assert!(matches!(next, RouteOutcome::Enqueued { duplicate: false, .. }));
    }

    #[tokio::test]
    async fn a_repeated_message_for_a_human_is_queued_once() {
        let mut w = world();
        let mut s = Session::start("ta".parse().unwrap(), "c-1".into(), FRONT.parse().unwrap(), chrono::Utc::now());
        s.status = SessionStatus::HandedOff;
        s.handed_off_to = Some(HandoffTarget::Human);
        w.latest = Some(s);
        let w = Arc::new(w);
        for id in ["e-1", "e-2"] {
            intake(&w).route(&message_event("ta", id, "m-1", "inbound", "help")).await.unwrap();
        }
        assert_eq!(w.queued.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_messages_source_id_is_unambiguous() {
        // '-' may occur in both ids; the ':' between them cannot occur in a conversation id
        let a = source_id(&message_event("ta", "e-1", "b-c", "inbound", "x"));
        assert_eq!(a, "message-c-1:b-c");
        let mut other = message_event("ta", "e-1", "c", "inbound", "x");
        other.detail.conversation_id = "c-1-b".into();
        assert_ne!(source_id(&other), a);
    }

    #[tokio::test]
    async fn a_human_owned_conversation_is_queued_for_its_transcript_without_a_trigger() {
        let mut w = world();
        let mut s = Session::start("ta".parse().unwrap(), "c-1".into(), FRONT.parse().unwrap(), chrono::Utc::now());
        s.status = SessionStatus::HandedOff;
        s.handed_off_to = Some(HandoffTarget::Human);
        w.latest = Some(s.clone());
        let w = Arc::new(w);
        let outcome = intake(&w).route(&event("ta", "e-1", "inbound", "help")).await.unwrap();
        assert_eq!(outcome, RouteOutcome::HumanOwned { session_id: s.session_id });
        let queued = w.queued.lock().unwrap().clone();
        assert_eq!((queued.len(), queued[0].trigger_id, queued[0].agent_id), (1, None, s.agent_id));
    }
}
