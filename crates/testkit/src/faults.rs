//! Fault injection at the engine's ports. [`Faults`], a [`PortLayer`], puts every port of a [`Deps`] the
//! engine calls out through (store, sessions, executions, counters, queue, bus, Conversations,
//! model, webhooks) behind a wrapper that numbers the calls and makes the one its [`Plan`] names
//! fail in one of three ways ([`Kind`]):
//!
//! - **error**: the call is not made; the caller gets the port's retryable error.
//! - **timeout**: the call is made and takes effect, then the caller gets a retryable error, as
//!   when a response is lost: the caller cannot tell that it worked.
//! - **crash**: the call is made and takes effect, then the process dies: this call and every
//!   later one through the same [`Faults`] fail, and the harness is expected to drop what it
//!   runs and start again over the same stores ([`Faults::crashed`] tells it to).
//!
//! The wrappers forward every method, the ones a trait gives a default body too, so an adapter's
//! own version of those (one database call instead of two) is what runs. A fault-free run's
//! [`Faults::sites`] lists the calls in order, which a failure report quotes.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use switchboard_domain::{
    ActivityRow, Agent, AgentId, Blob, EventType, ExecutionId, ExecutionRecord, OutboundEvent, Session, SessionId,
    Skill, SkillId, Tenant, TenantId, Tool, ToolId, Trigger, UsageRow, VariantRow,
};
use switchboard_engine::{
    Admit, Arrival, ConfigStore, ConversationError, Conversations, CountAndEnqueue, Counters, Deps, Enqueued, EventBus,
    EventLog, ExecutionLog, HistoryMessage, IdleSession, Model, ModelError, ModelRequest, ModelResponse, Page,
    PortLayer, QueueError, Sent, SessionFilter, SessionStore, SessionWrite, Slot, SlotAndCount, StoreError, TextSink,
    TurnCommit, TurnStart, WebhookCaller, WebhookError, WebhookRequest, WebhookResponse, WorkItem, WorkQueue,
};

/// How the planned call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Error,
    Timeout,
    Crash,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Error, Kind::Timeout, Kind::Crash];
}

/// Which call fails (numbered from 0 in the order the ports see them) and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub at: u64,
    pub kind: Kind,
}

/// The fault injected, as the failing call reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injected {
    Error,
    Timeout,
    /// The process is down: this call, or one after the crash.
    Crashed,
}

/// What the wrapper does with one call.
enum Step {
    Run,
    Fail(Injected),
    RunThenFail(Injected),
}

/// The plan and the count of one process's port calls: a handle shared by every wrapper it
/// made (clones share it).
#[derive(Clone, Default)]
pub struct Faults(Arc<State>);

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").field("plan", &self.0.plan).field("calls", &self.calls()).finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    plan: Option<Plan>,
    calls: AtomicU64,
    crashed: AtomicBool,
    sites: Mutex<Vec<&'static str>>,
    fired: Mutex<Option<&'static str>>,
    relayed: Mutex<Vec<OutboundEvent>>,
    /// Events relayed before the change they report was in the store.
    early: Mutex<Vec<String>>,
    /// Where the process's events are logged, for [`committed`]'s check at relay time (not
    /// kept alive by the faults: a profile closing its store need not wait for them).
    log: Mutex<Option<std::sync::Weak<dyn EventLog>>>,
}

impl Faults {
    /// Faults that fail the call `plan` names, or none.
    pub fn new(plan: Option<Plan>) -> Self {
        Self(Arc::new(State { plan, ..State::default() }))
    }

    /// These faults, whose relay check also finds each event in `log` (the outbox rows), for
    /// as long as the caller keeps `log`: what [`committed`] asks of an event that reports no
    /// session or execution (a limit reached).
    pub fn reading(self, log: &Arc<dyn EventLog>) -> Self {
        *self.0.log.lock().unwrap() = Some(Arc::downgrade(log));
        self
    }

    /// The port calls made so far.
    pub fn calls(&self) -> u64 {
        self.0.calls.load(Ordering::SeqCst)
    }

    /// Every call's site (`port.method`), in order.
    pub fn sites(&self) -> Vec<&'static str> {
        self.0.sites.lock().unwrap().clone()
    }

    /// The site of the planned fault, once it has been injected.
    pub fn fired(&self) -> Option<&'static str> {
        *self.0.fired.lock().unwrap()
    }

    /// Every event handed to the bus's relay (published), in order.
    pub fn relayed(&self) -> Vec<OutboundEvent> {
        self.0.relayed.lock().unwrap().clone()
    }

    /// Events handed to the relay whose change was not in the store yet ([`committed`], asked
    /// at the moment of the relay): each a description.
    pub fn published_early(&self) -> Vec<String> {
        self.0.early.lock().unwrap().clone()
    }

    /// Whether a crash was injected: the process is down.
    pub fn crashed(&self) -> bool {
        self.0.crashed.load(Ordering::SeqCst)
    }

    fn faulty<P: ?Sized>(&self, inner: Arc<P>) -> Faulty<P> {
        Faulty { inner, faults: self.clone() }
    }

    fn step(&self, site: &'static str) -> Step {
        if self.crashed() {
            return Step::Fail(Injected::Crashed);
        }
        let n = self.0.calls.fetch_add(1, Ordering::SeqCst);
        self.0.sites.lock().unwrap().push(site);
        let Some(plan) = self.0.plan.filter(|p| p.at == n) else { return Step::Run };
        *self.0.fired.lock().unwrap() = Some(site);
        match plan.kind {
            Kind::Error => Step::Fail(Injected::Error),
            Kind::Timeout => Step::RunThenFail(Injected::Timeout),
            Kind::Crash => {
                self.0.crashed.store(true, Ordering::SeqCst);
                Step::RunThenFail(Injected::Crashed)
            }
        }
    }

    /// Runs `call` as the plan says, turning an injected fault into the port's error.
    async fn around<T, E>(
        &self,
        site: &'static str,
        error: impl FnOnce(String) -> E,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let injected = match self.step(site) {
            Step::Run => return call.await,
            Step::Fail(injected) => injected,
            Step::RunThenFail(injected) => {
                // Took effect; its answer is lost.
                let _ = call.await;
                injected
            }
        };
        Err(error(format!("injected fault at {site}: {injected:?}")))
    }
}

impl PortLayer for Faults {
    /// `deps` with every port the engine calls out through behind this plan.
    fn deps(&self, deps: Deps) -> Deps {
        let bus = CheckedBus {
            bus: self.faulty(deps.bus),
            sessions: Arc::clone(&deps.sessions),
            executions: Arc::clone(&deps.executions),
        };
        Deps {
            config: Arc::new(self.faulty(deps.config)),
            sessions: Arc::new(self.faulty(deps.sessions)),
            executions: Arc::new(self.faulty(deps.executions)),
            queue: Arc::new(self.faulty(deps.queue)),
            bus: Arc::new(bus),
            conversations: Arc::new(self.faulty(deps.conversations)),
            model: Arc::new(self.faulty(deps.model)),
            webhooks: Arc::new(self.faulty(deps.webhooks)),
            counters: Arc::new(self.faulty(deps.counters)),
            ..deps
        }
    }

    fn queue(&self, queue: Arc<dyn WorkQueue>) -> Arc<dyn WorkQueue> {
        Arc::new(self.faulty(queue))
    }
}

/// One port behind [`Faults`].
struct Faulty<P: ?Sized> {
    inner: Arc<P>,
    faults: Faults,
}

fn store(message: String) -> StoreError {
    StoreError::Unavailable { message, retryable: true }
}

fn queue(message: String) -> QueueError {
    QueueError { message, retryable: true }
}

fn conversation(message: String) -> ConversationError {
    ConversationError { message, retryable: true }
}

#[async_trait]
impl ConfigStore for Faulty<dyn ConfigStore> {
    async fn get_tenant(&self, tenant: &TenantId) -> Result<Option<Tenant>, StoreError> {
        self.faults.around("config.get_tenant", store, self.inner.get_tenant(tenant)).await
    }
    async fn tenant_exists(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        self.faults.around("config.tenant_exists", store, self.inner.tenant_exists(tenant)).await
    }
    async fn get_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError> {
        self.faults.around("config.get_agent", store, self.inner.get_agent(tenant, agent)).await
    }
    async fn get_tool(&self, tenant: &TenantId, tool: ToolId) -> Result<Option<Tool>, StoreError> {
        self.faults.around("config.get_tool", store, self.inner.get_tool(tenant, tool)).await
    }
    async fn get_skill(&self, tenant: &TenantId, skill: SkillId) -> Result<Option<Skill>, StoreError> {
        self.faults.around("config.get_skill", store, self.inner.get_skill(tenant, skill)).await
    }
    async fn active_triggers(&self, tenant: &TenantId, event_type: EventType) -> Result<Arc<[Trigger]>, StoreError> {
        let call = self.inner.active_triggers(tenant, event_type);
        self.faults.around("config.active_triggers", store, call).await
    }
}

#[async_trait]
impl SessionStore for Faulty<dyn SessionStore> {
    async fn get_session(&self, tenant: &TenantId, session: SessionId) -> Result<Option<Session>, StoreError> {
        self.faults.around("sessions.get_session", store, self.inner.get_session(tenant, session)).await
    }
    async fn latest_session(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Session>, StoreError> {
        let call = self.inner.latest_session(tenant, conversation_id);
        self.faults.around("sessions.latest_session", store, call).await
    }
    async fn latest_session_for_routing(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Option<Session>, StoreError> {
        let call = self.inner.latest_session_for_routing(tenant, conversation_id);
        self.faults.around("sessions.latest_session_for_routing", store, call).await
    }
    async fn sessions_for_conversation(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Vec<Session>, StoreError> {
        let call = self.inner.sessions_for_conversation(tenant, conversation_id);
        self.faults.around("sessions.sessions_for_conversation", store, call).await
    }
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        filter: SessionFilter,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Page<Session>, StoreError> {
        let call = self.inner.list_sessions(tenant, filter, after, limit);
        self.faults.around("sessions.list_sessions", store, call).await
    }
    async fn turn_start(
        &self,
        log: &dyn ExecutionLog,
        tenant: &TenantId,
        source_id: &str,
        conversation_id: &str,
    ) -> Result<TurnStart, StoreError> {
        let call = self.inner.turn_start(log, tenant, source_id, conversation_id);
        self.faults.around("sessions.turn_start", store, call).await
    }
    async fn commit_turn(&self, commit: &TurnCommit) -> Result<(), StoreError> {
        self.faults.around("sessions.commit_turn", store, self.inner.commit_turn(commit)).await
    }
    async fn write_session(&self, write: &SessionWrite) -> Result<(), StoreError> {
        self.faults.around("sessions.write_session", store, self.inner.write_session(write)).await
    }
    async fn sessions_awaiting_approval(
        &self,
        tenant: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<Session>, StoreError> {
        let call = self.inner.sessions_awaiting_approval(tenant, limit);
        self.faults.around("sessions.sessions_awaiting_approval", store, call).await
    }
    async fn idle_sessions(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<IdleSession>, StoreError> {
        self.faults.around("sessions.idle_sessions", store, self.inner.idle_sessions(now, limit)).await
    }
    async fn note_arrival(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        arrival: &Arrival,
    ) -> Result<(), StoreError> {
        let call = self.inner.note_arrival(tenant, conversation_id, arrival);
        self.faults.around("sessions.note_arrival", store, call).await
    }
    async fn newest_arrival(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Arrival>, StoreError> {
        let call = self.inner.newest_arrival(tenant, conversation_id);
        self.faults.around("sessions.newest_arrival", store, call).await
    }
}

#[async_trait]
impl ExecutionLog for Faulty<dyn ExecutionLog> {
    async fn execution_for_source(
        &self,
        tenant: &TenantId,
        source_id: &str,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let call = self.inner.execution_for_source(tenant, source_id);
        self.faults.around("executions.execution_for_source", store, call).await
    }
    async fn get_execution(
        &self,
        tenant: &TenantId,
        execution: ExecutionId,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let call = self.inner.get_execution(tenant, execution);
        self.faults.around("executions.get_execution", store, call).await
    }
    async fn list_executions(
        &self,
        tenant: &TenantId,
        session: SessionId,
        after: Option<ExecutionId>,
        limit: usize,
    ) -> Result<Page<ExecutionRecord>, StoreError> {
        let call = self.inner.list_executions(tenant, session, after, limit);
        self.faults.around("executions.list_executions", store, call).await
    }
    async fn content(&self, tenant: &TenantId, session: SessionId, hashes: &[String]) -> Result<Vec<Blob>, StoreError> {
        self.faults.around("executions.content", store, self.inner.content(tenant, session, hashes)).await
    }
    async fn usage(&self, tenant: &TenantId, from: NaiveDate, to: NaiveDate) -> Result<Vec<UsageRow>, StoreError> {
        self.faults.around("executions.usage", store, self.inner.usage(tenant, from, to)).await
    }
    async fn tokens_on(&self, tenant: &TenantId, day: NaiveDate) -> Result<u64, StoreError> {
        self.faults.around("executions.tokens_on", store, self.inner.tokens_on(tenant, day)).await
    }
    async fn activity(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<ActivityRow>, StoreError> {
        self.faults.around("executions.activity", store, self.inner.activity(tenant, from, to)).await
    }
    async fn variants(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<VariantRow>, StoreError> {
        self.faults.around("executions.variants", store, self.inner.variants(tenant, from, to)).await
    }
    async fn insights(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<switchboard_domain::insights::InsightRow>, StoreError> {
        self.faults.around("executions.insights", store, self.inner.insights(tenant, from, to)).await
    }
}

#[async_trait]
impl Counters for Faulty<dyn Counters> {
    async fn take(
        &self,
        tenant: &TenantId,
        window: &str,
        limit: u64,
        expires: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let call = self.inner.take(tenant, window, limit, expires);
        self.faults.around("counters.take", store, call).await
    }
    async fn first(
        &self,
        tenant: &TenantId,
        window: &str,
        expires: DateTime<Utc>,
        announce: &OutboundEvent,
    ) -> Result<bool, StoreError> {
        let call = self.inner.first(tenant, window, expires, announce);
        self.faults.around("counters.first", store, call).await
    }
    async fn hold_slot(
        &self,
        tenant: &TenantId,
        conversation: &str,
        limit: u64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Slot, StoreError> {
        let call = self.inner.hold_slot(tenant, conversation, limit, now, until);
        self.faults.around("counters.hold_slot", store, call).await
    }
    async fn release_slot(&self, tenant: &TenantId, conversation: &str) -> Result<(), StoreError> {
        let call = self.inner.release_slot(tenant, conversation);
        self.faults.around("counters.release_slot", store, call).await
    }
    fn sees_human_owner(&self) -> bool {
        self.inner.sees_human_owner()
    }
    async fn hold_slot_and_take(&self, ask: &SlotAndCount<'_>) -> Result<Admit, StoreError> {
        let call = self.inner.hold_slot_and_take(ask);
        self.faults.around("counters.hold_slot_and_take", store, call).await
    }
}

#[async_trait]
impl WorkQueue for Faulty<dyn WorkQueue> {
    async fn queued_behind(&self, item: &WorkItem, max: usize) -> Result<Vec<WorkItem>, QueueError> {
        self.faults.around("queue.queued_behind", queue, self.inner.queued_behind(item, max)).await
    }
    async fn enqueue(&self, item: &WorkItem) -> Result<Enqueued, QueueError> {
        self.faults.around("queue.enqueue", queue, self.inner.enqueue(item)).await
    }
    async fn count_and_enqueue(
        &self,
        counters: &dyn Counters,
        ask: &SlotAndCount<'_>,
        item: &WorkItem,
    ) -> Result<CountAndEnqueue, QueueError> {
        let call = self.inner.count_and_enqueue(counters, ask, item);
        self.faults.around("queue.count_and_enqueue", queue, call).await
    }
}

#[async_trait]
impl EventBus for Faulty<dyn EventBus> {
    /// A relay cannot fail its caller: an injected error or crash is a relay that never
    /// happened (the events stay in the log it reads).
    async fn relay(&self, committed: &[OutboundEvent]) {
        let call = async {
            self.faults.0.relayed.lock().unwrap().extend_from_slice(committed);
            self.inner.relay(committed).await;
            Ok::<(), String>(())
        };
        let _ = self.faults.around("bus.relay", |message| message, call).await;
    }
}

/// The bus behind the plan, which also asks the store, as each event is relayed, whether the
/// change it reports is there ([`Faults::published_early`]).
struct CheckedBus {
    bus: Faulty<dyn EventBus>,
    sessions: Arc<dyn SessionStore>,
    executions: Arc<dyn ExecutionLog>,
}

#[async_trait]
impl EventBus for CheckedBus {
    async fn relay(&self, committed: &[OutboundEvent]) {
        let log = self.bus.faults.0.log.lock().unwrap().as_ref().and_then(std::sync::Weak::upgrade);
        for event in committed {
            let (sessions, executions) = (self.sessions.as_ref(), self.executions.as_ref());
            if let Err(e) = self::committed(event, sessions, executions, log.as_deref()).await {
                self.bus.faults.0.early.lock().unwrap().push(e);
            }
        }
        self.bus.relay(committed).await;
    }
}

/// Whether the change `event` reports is in the store: the event itself among the outbox rows
/// of `log` (when given: they are written in the change's transaction), its execution recorded
/// (`execution.*`), its session there with the status it announces (a hand-off to a person, an
/// end). `Err` says what is missing.
pub async fn committed(
    event: &OutboundEvent,
    sessions: &dyn SessionStore,
    executions: &dyn ExecutionLog,
    log: Option<&dyn EventLog>,
) -> Result<(), String> {
    use switchboard_domain::SessionStatus;
    let missing = |what: &str| Err(format!("event {} ({}): {what}", event.id, event.detail_type));
    if let Some(log) = log {
        match log.events_after(&event.tenant_id, 0, 10_000).await {
            Ok(logged) if logged.iter().any(|(_, e)| e.id == event.id) => {}
            Ok(_) => return missing("not among the logged events"),
            Err(e) => return missing(&format!("the log failed: {e}")),
        }
    }
    let id = |field: &str| event.detail[field].as_str().map(str::to_owned);
    if event.detail_type.starts_with("execution.") {
        let Some(Ok(execution)) = id("executionId").map(|i| i.parse()) else { return missing("no executionId") };
        return match executions.get_execution(&event.tenant_id, execution).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => missing("its execution is not recorded"),
            Err(e) => missing(&format!("the store failed: {e}")),
        };
    }
    // A limit reached is about the tenant: the log is its store.
    let Some(session) = id("sessionId") else {
        return if log.is_some() { Ok(()) } else { missing("no sessionId, and no log to look in") };
    };
    let Ok(session) = session.parse() else { return missing("a sessionId that is not one") };
    let status = match sessions.get_session(&event.tenant_id, session).await {
        Ok(Some(s)) => s.status,
        Ok(None) => return missing("its session is not stored"),
        Err(e) => return missing(&format!("the store failed: {e}")),
    };
    let wanted: &[SessionStatus] = match event.detail_type.as_str() {
        "session.handoff.human" => &[SessionStatus::HandedOff],
        // An agent or a person ended it, or its customer went quiet.
        "session.ended" => &[SessionStatus::Completed, SessionStatus::Abandoned],
        _ => &[],
    };
    if wanted.is_empty() || wanted.contains(&status) {
        Ok(())
    } else {
        missing(&format!("its session is {status:?}, not {wanted:?}"))
    }
}

/// The replies a property has seen: held by records, then sent. Each reply id is held by one
/// record and sent once, and the two sets match.
#[derive(Debug, Default)]
pub struct Replies(std::collections::HashSet<String>);

impl Replies {
    /// The record of `source`, its replies counted; `Err` when it is lost or holds a reply
    /// another record holds.
    pub async fn record(
        &mut self,
        executions: &dyn ExecutionLog,
        tenant: &TenantId,
        source: &str,
    ) -> Result<ExecutionRecord, String> {
        let Some(record) = executions.execution_for_source(tenant, source).await.map_err(|e| e.to_string())? else {
            return Err(format!("{source} was lost: no execution record"));
        };
        if record.status == switchboard_domain::ExecutionStatus::Interrupted {
            // Answered by a later turn of its session, whose record names it.
            let page =
                executions.list_executions(tenant, record.session_id, None, 100).await.map_err(|e| e.to_string())?;
            let answering: Vec<_> =
                page.items.into_iter().filter(|r| r.coalesced.iter().any(|c| c.source_id == source)).collect();
            return match <[ExecutionRecord; 1]>::try_from(answering) {
                Ok([turn]) => Ok(turn),
                Err(v) if v.is_empty() => Err(format!("{source} was interrupted and no later turn answered it")),
                Err(v) => Err(format!("{source} was interrupted and answered by {} turns", v.len())),
            };
        }
        if record.status == switchboard_domain::ExecutionStatus::Coalesced {
            // Answered in the turn of its burst, whose replies count with that turn's own source.
            let Some(into) = record.coalesced_into else { return Err(format!("{source} is coalesced into nothing")) };
            let turn = executions.get_execution(tenant, into).await.map_err(|e| e.to_string())?;
            return match turn {
                Some(turn) if turn.coalesced.iter().any(|c| c.source_id == source) => Ok(turn),
                _ => Err(format!("{source} is coalesced into {into}, whose turn does not name it")),
            };
        }
        for id in record.actions.iter().filter_map(switchboard_domain::Action::message_id) {
            if !self.0.insert(id.to_owned()) {
                return Err(format!("reply {id} is held by two records"));
            }
        }
        Ok(record)
    }

    /// A reply that was sent (`text` for the report): `Err` when no record holds it, or it was
    /// sent twice.
    pub fn sent(&mut self, id: &str, text: &str) -> Result<(), String> {
        if self.0.remove(id) { Ok(()) } else { Err(format!("reply {id} ({text:?}) sent twice, or held by no record")) }
    }

    /// `Err` when a reply some record holds was never sent.
    pub fn all_sent(&self) -> Result<(), String> {
        if self.0.is_empty() { Ok(()) } else { Err(format!("replies recorded but never sent: {:?}", self.0)) }
    }
}

/// Whether a customer's message, recorded as `record`, was answered or is a person's: a reply,
/// a hand-off to a person by its turn, or a person had the conversation when it came (it was
/// skipped, or refused by a limit without a word, in a session a person was given and may have
/// handed back: the property's mixes hand nothing from agent to agent).
pub async fn answered_or_with_person(record: &ExecutionRecord, sessions: &dyn SessionStore) -> Result<(), String> {
    use switchboard_domain::{Action, ExecutionStatus, SessionStatus};
    let answered = record.actions.iter().any(|a| matches!(a, Action::Reply { .. } | Action::HandoffToHuman { .. }));
    let session = sessions.get_session(&record.tenant_id, record.session_id).await.map_err(|e| e.to_string())?;
    let with_person = record.status == ExecutionStatus::Skipped
        || (record.actions.is_empty() && session.is_some_and(|s| s.status == SessionStatus::HandedOff));
    if answered || with_person {
        Ok(())
    } else {
        Err(format!("{} ({:?}) was neither answered nor handed to a person", record.source_id, record.status))
    }
}

/// What the event log of a played mix must hold: each event once, each one's change in the
/// store ([`committed`]), and every event handed to the bus (`relayed`) among them.
pub async fn log_holds(
    logged: &[(i64, OutboundEvent)],
    relayed: &[OutboundEvent],
    sessions: &dyn SessionStore,
    executions: &dyn ExecutionLog,
    log: &dyn EventLog,
) -> Result<(), String> {
    let mut ids = std::collections::HashSet::new();
    for (_, event) in logged {
        if !ids.insert(&event.id) {
            return Err(format!("event {} logged twice", event.id));
        }
        committed(event, sessions, executions, Some(log)).await?;
    }
    match relayed.iter().find(|e| !ids.contains(&e.id)) {
        Some(e) => Err(format!("event {} ({}) was handed to the bus but is not in the log", e.id, e.detail_type)),
        None => Ok(()),
    }
}

#[async_trait]
impl Conversations for Faulty<dyn Conversations> {
    async fn send_reply(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        let call = self.inner.send_reply(tenant, conversation_id, text, idempotency_key);
        self.faults.around("conversations.send_reply", conversation, call).await
    }
    async fn send_human(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        operator: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        let call = self.inner.send_human(tenant, conversation_id, text, operator, idempotency_key);
        self.faults.around("conversations.send_human", conversation, call).await
    }
    async fn history(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryMessage>, ConversationError> {
        let call = self.inner.history(tenant, conversation_id, limit);
        self.faults.around("conversations.history", conversation, call).await
    }
}

#[async_trait]
impl Model for Faulty<dyn Model> {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.faults.around("model.converse", ModelError::Unavailable, self.inner.converse(request)).await
    }
    async fn converse_streaming(
        &self,
        request: &ModelRequest,
        sink: &dyn TextSink,
    ) -> Result<ModelResponse, ModelError> {
        let call = self.inner.converse_streaming(request, sink);
        self.faults.around("model.converse_streaming", ModelError::Unavailable, call).await
    }
}

#[async_trait]
impl WebhookCaller for Faulty<dyn WebhookCaller> {
    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        let error = |message| WebhookError::Connect { message, attempts: 1 };
        self.faults.around("webhooks.call", error, self.inner.call(request)).await
    }

    async fn call_mcp(
        &self,
        request: &switchboard_engine::McpRequest,
    ) -> Result<switchboard_engine::McpAnswer, WebhookError> {
        let error = |message| WebhookError::Connect { message, attempts: 1 };
        self.faults.around("webhooks.call_mcp", error, self.inner.call_mcp(request)).await
    }
}

// ---- the property's world: generated conversations, a model and a webhook that answer them ----

/// A small deterministic generator (SplitMix64): a property's cases come from seeds, which a
/// failure prints, so that any case can be run again alone.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The seeds a random property runs: `SWITCHBOARD_FAULT_SEED` alone when set, otherwise
/// `SWITCHBOARD_FAULT_CASES` of them (`cases` when unset), from 0.
pub fn seeds(cases: u64) -> Vec<u64> {
    let number = |name: &str| std::env::var(name).ok().map(|v| v.parse::<u64>().expect(name));
    match number("SWITCHBOARD_FAULT_SEED") {
        Some(seed) => vec![seed],
        None => (0..number("SWITCHBOARD_FAULT_CASES").unwrap_or(cases)).collect(),
    }
}

/// One random case of a property: the mix `seed` draws, run once without a fault (by `case`,
/// which answers the port calls it made, or what broke) and once with a fault at a call it draws
/// below that count, in a way it draws. What broke, with the seed and the mix; `None` when all
/// held (or the mix made no port call: operators' moves only, where no person has a
/// conversation).
pub async fn seeded_case<F, Fut>(seed: u64, case: F) -> Option<String>
where
    F: Fn(Vec<Said>, Option<Plan>) -> Fut,
    Fut: Future<Output = Result<u64, String>>,
{
    let mut rng = Rng::new(seed);
    let mix = conversations(&mut rng);
    let calls = match case(mix.clone(), None).await {
        Ok(calls) => calls,
        Err(e) => return Some(format!("seed {seed} ({mix:?}), no fault: {e}")),
    };
    if calls == 0 {
        return None;
    }
    let kind = Kind::ALL[usize::try_from(rng.below(3)).unwrap_or_default()];
    let plan = Plan { at: rng.below(calls), kind };
    case(mix.clone(), Some(plan)).await.err().map(|e| format!("seed {seed} ({mix:?}): {e}"))
}

/// Fails with every case that broke (see [`seeded_case`]), saying how to run one again.
pub fn assert_none_failed(failures: &[String], of: usize) {
    assert!(
        failures.is_empty(),
        "{} of {of} cases failed (SWITCHBOARD_FAULT_SEED=<seed> runs a random one again):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// What a customer may write, and what [`Clerk`] does with it: answer in words, look an order
/// up through the tenant's webhook, remember something in session memory, or hand the
/// conversation to a person.
pub const TEXTS: [&str; 4] = ["hello", "where is order 1234", "remember my name", "a human please"];

/// One step of a generated mix in one conversation, and whether the queue is worked right after
/// it (or what it queued waits behind the next steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub conversation: String,
    pub what: Move,
    pub drain: bool,
}

/// Who does what in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// The customer writes one of [`TEXTS`].
    Says(&'static str),
    /// The operator who has the conversation (if a person has it) writes to the customer.
    OperatorReplies,
    /// The operator hands the conversation back to the agent (if a person has it).
    HandsBack,
}

impl Said {
    /// The customer's text, if the step is the customer's.
    pub fn text(&self) -> Option<&'static str> {
        match self.what {
            Move::Says(text) => Some(text),
            _ => None,
        }
    }
}

/// Two to seven steps over one to three conversations: mostly customers' messages (a hand-off
/// asked for in about one in six), and now and then an operator's reply or hand-back, which
/// does something only where a person has the conversation.
pub fn conversations(rng: &mut Rng) -> Vec<Said> {
    let n = 2 + rng.below(6);
    let conversations = 1 + rng.below(3);
    (0..n)
        .map(|i| {
            let what = match rng.below(8) {
                0 => Move::Says(TEXTS[3]),
                1 => Move::Says(TEXTS[1]),
                2 => Move::Says(TEXTS[2]),
                3 => Move::OperatorReplies,
                4 => Move::HandsBack,
                _ => Move::Says(TEXTS[0]),
            };
            Said {
                conversation: format!("c-{}", rng.below(conversations)),
                what,
                drain: i + 1 == n || rng.below(2) == 0,
            }
        })
        .collect()
}

/// The webhook tool [`Clerk`] calls, by name.
pub const ORDER_TOOL: &str = "lookup_order";

/// The property's model: a TEST DOUBLE, not an AI. It answers by the newest turn of the
/// conversation as [`TEXTS`] says, and after a tool's result in words; its tool-use ids depend
/// only on the transcript, so that a re-run asks the same.
#[derive(Debug, Default)]
pub struct Clerk;

#[async_trait]
impl Model for Clerk {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        use switchboard_domain::message::ContentBlock;
        use switchboard_engine::StopReason;
        let newest = request.messages.last().map(|m| m.content.as_slice()).unwrap_or_default();
        let after_tool = newest.iter().any(|b| matches!(b, ContentBlock::ToolResult { .. }));
        let said = newest
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<String>();
        let id = format!("tu-{}", request.messages.len());
        let tool = |name: &str, input| ContentBlock::ToolUse { tool_use_id: id.clone(), name: name.into(), input };
        let (block, stop) = if after_tool {
            (ContentBlock::Text { text: "Done.".into() }, StopReason::EndTurn)
        } else if said.contains("human") {
            (tool("handoff_to_human", serde_json::json!({ "reason": "asked for a person" })), StopReason::ToolUse)
        } else if said.contains("order") {
            (tool(ORDER_TOOL, serde_json::json!({ "orderId": "1234" })), StopReason::ToolUse)
        } else if said.contains("remember") {
            (tool("set_context", serde_json::json!({ "key": "name", "value": "Ada" })), StopReason::ToolUse)
        } else {
            (ContentBlock::Text { text: format!("You said: {said}") }, StopReason::EndTurn)
        };
        Ok(ModelResponse {
            content: vec![block],
            stop_reason: stop,
            usage: switchboard_domain::TokenUsage { input_tokens: 10, output_tokens: 5, ..Default::default() },
            model: "fault-clerk-test-double".into(),
        })
    }
}

/// The tenant's order desk behind [`ORDER_TOOL`]: answers every call, counting them.
#[derive(Debug, Default)]
pub struct OrderDesk {
    calls: AtomicU64,
}

impl OrderDesk {
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl WebhookCaller for OrderDesk {
    async fn call(&self, _request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(WebhookResponse {
            status: 200,
            body: br#"{"status":"shipped"}"#.to_vec(),
            truncated: false,
            attempts: 1,
            host: "orders.example.com".into(),
        })
    }
}

/// The tool record of [`ORDER_TOOL`] (id `tool_id`), as a bundle or the API writes it.
pub fn order_tool(tool_id: &str) -> serde_json::Value {
    serde_json::json!({
        "toolId": tool_id, "name": ORDER_TOOL, "description": "Looks an order up",
        "parameters": { "type": "object", "properties": { "orderId": { "type": "string" } }, "required": ["orderId"],
                        "additionalProperties": false },
        "handler": { "type": "webhook", "url": "https://orders.example.com/lookup", "secretRef": "orders" }
    })
}
