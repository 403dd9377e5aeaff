//! Sessions, their per-turn commits, and the execution records those commits write.

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use switchboard_domain::insights::{InsightLine, InsightRow, Written};
use switchboard_domain::{
    ActivityRow, AgentId, Blob, ExecutionId, ExecutionRecord, OutboundEvent, Session, SessionId, SessionStatus,
    TenantId, UsageRow, VariantRow,
};

use super::{Page, StoreError};

/// Everything one turn writes, committed atomically: the sessions it changed (each conditional
/// on the version it read, `None` for a new session), the events it announces (the outbox: kept
/// in the profile's event log with the commit, published after it) and its execution record
/// (conditional on
/// no record existing for the same source), and what the record adds to the tenant's daily usage
/// (so a source is counted once). In DynamoDB this is one `TransactWriteItems`.
#[derive(Debug, Clone)]
pub struct TurnCommit {
    pub sessions: Vec<SessionWrite>,
    pub execution: ExecutionRecord,
    /// Kept in the event log by the commit, without repeats by id; published by
    /// [`super::EventBus::relay`] once the commit holds.
    pub events: Vec<OutboundEvent>,
    /// Recorded model content the execution's record points at and its session does not hold
    /// yet (see [`switchboard_domain::recording`]), kept under the record's session for
    /// [`CONTENT_TTL_DAYS`](switchboard_domain::limits::CONTENT_TTL_DAYS) from the commit. Writing
    /// a piece again keeps it no shorter.
    pub content: Vec<Blob>,
    /// The record of the execution this commit completes, as the turn left it when it paused
    /// for an approval (status `awaiting_approval`): the commit replaces that record — refused
    /// as [`StoreError::Duplicate`] unless it still awaits approval — and adds to the usage only
    /// what the new record adds to it. `None` for every other commit.
    pub resumes: Option<Box<ExecutionRecord>>,
    /// The records of the earlier messages of a burst that `execution` answered with its own
    /// (status `coalesced`, each pointing at it): written with it, refused as
    /// [`StoreError::Duplicate`] when one of their sources is recorded already. They count in
    /// no usage or activity: nothing ran for them.
    pub coalesced: Vec<ExecutionRecord>,
}

impl TurnCommit {
    /// The commit of one session's `write` with its record and `events`: no content, and no
    /// record resumed or coalesced.
    pub fn of(write: SessionWrite, execution: ExecutionRecord, events: Vec<OutboundEvent>) -> Self {
        Self { sessions: vec![write], execution, events, content: vec![], resumes: None, coalesced: vec![] }
    }

    /// What the commit adds to its tenant's insights (see [`InsightLine::of`]), written in the
    /// same transaction as the rest.
    pub fn insight(&self) -> Option<InsightLine> {
        let written: Vec<Written<'_>> = self
            .sessions
            .iter()
            .map(|w| Written { session: &w.session, created: w.expected_version.is_none() })
            .collect();
        InsightLine::of(&self.execution, self.resumes.as_deref(), &written)
    }
}

#[derive(Debug, Clone)]
pub struct SessionWrite {
    pub session: Session,
    /// The version read; `None` creates the session.
    pub expected_version: Option<u64>,
}

/// What narrows a tenant-wide list of sessions (nothing: every session).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    pub status: Option<SessionStatus>,
    pub agent_id: Option<AgentId>,
    /// The channel the conversation came in on ([`Session::channel`]).
    pub channel: Option<String>,
    /// The traffic-split variant the conversation was assigned ([`Session::split`]).
    pub variant: Option<String>,
}

/// A session [`SessionStore::idle_sessions`] found due to close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleSession {
    pub tenant_id: TenantId,
    pub session_id: SessionId,
}

/// A customer's message queued in its conversation, as [`SessionStore::note_arrival`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub source_id: String,
    pub message_id: String,
    /// When event intake routed it ([`super::WorkItem::arrived_at`]).
    pub arrived_at: DateTime<Utc>,
}

/// What [`SessionStore::turn_start`] found.
#[derive(Debug, Clone)]
pub enum TurnStart {
    /// The source is already recorded (a redelivery).
    Recorded(Box<ExecutionRecord>),
    /// It is not; the conversation's newest session, whatever its status.
    Latest(Option<Box<Session>>),
}

/// Sessions and their per-turn commits.
#[async_trait]
pub trait SessionStore: Send + Sync {
    async fn get_session(&self, tenant: &TenantId, session: SessionId) -> Result<Option<Session>, StoreError>;
    /// The version `session` is stored at, if it is (strongly consistent): what a running turn
    /// reads before each reply and tool call, to stop once an operator has moved the session.
    /// The default reads the whole session; an adapter that can read the version alone does.
    async fn session_version(&self, tenant: &TenantId, session: SessionId) -> Result<Option<u64>, StoreError> {
        Ok(self.get_session(tenant, session).await?.map(|s| s.version))
    }
    /// The newest session of a conversation, whatever its status.
    async fn latest_session(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Session>, StoreError>;
    /// [`SessionStore::latest_session`] as event intake may see it: possibly a moment behind the
    /// newest commit, and simply the newest session (an adapter may answer from an eventually
    /// consistent index in one read, without preferring an older active session).
    /// Intake only chooses the path with it; the executor decides on the session it reads
    /// strongly (a message routed past a human who just took over is recorded in the human's
    /// session, not answered).
    async fn latest_session_for_routing(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Option<Session>, StoreError> {
        self.latest_session(tenant, conversation_id).await
    }
    /// Every session of a conversation, oldest first (the `SessionsByConversation` index).
    async fn sessions_for_conversation(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Vec<Session>, StoreError>;
    /// The tenant's sessions newest first (by start), narrowed by `filter`, `limit` at a time.
    /// The cursor is the id of the last session of the previous page.
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        filter: SessionFilter,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Page<Session>, StoreError>;
    /// What a turn reads before it runs: the record of `source_id` if there is one (a
    /// redelivery), otherwise the conversation's [`SessionStore::latest_session`]. An adapter
    /// that is also the execution log and can read both in one round trip overrides this (and
    /// reads records itself, not from `log`).
    async fn turn_start(
        &self,
        log: &dyn ExecutionLog,
        tenant: &TenantId,
        source_id: &str,
        conversation_id: &str,
    ) -> Result<TurnStart, StoreError> {
        if let Some(done) = log.execution_for_source(tenant, source_id).await? {
            return Ok(TurnStart::Recorded(Box::new(done)));
        }
        Ok(TurnStart::Latest(self.latest_session(tenant, conversation_id).await?.map(Box::new)))
    }
    /// Writes the turn or nothing. Fails with [`StoreError::VersionConflict`] when a session
    /// changed since it was read (or a second active session would appear for the
    /// conversation), and with [`StoreError::Duplicate`] when the source was already recorded.
    async fn commit_turn(&self, commit: &TurnCommit) -> Result<(), StoreError>;
    /// Writes one session, conditional on the version read ([`StoreError::VersionConflict`] if
    /// it changed), with no execution record: what holding a message behind a paused turn, and
    /// deciding an approval, change.
    async fn write_session(&self, write: &SessionWrite) -> Result<(), StoreError>;
    /// Sessions holding a turn paused for approval ([`Session::paused`]), of `tenant` or of every
    /// tenant, the longest waiting first, at most `limit`.
    async fn sessions_awaiting_approval(
        &self,
        tenant: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<Session>, StoreError>;
    /// Sessions of every tenant due to close as abandoned at `now` ([`Session::idle_due`] at or
    /// before it), the longest idle first, at most `limit`. Possibly a moment behind the newest
    /// commit (an index): the caller reads each session again before closing it.
    async fn idle_sessions(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<IdleSession>, StoreError>;
    /// Notes that `arrival`, a customer's message for an agent whose turns a newer message
    /// interrupts, has just been queued in its conversation, unless a message that arrived
    /// later is noted already: what a running turn of the conversation looks for before it
    /// replies, where its queue hides a group's later messages (SQS FIFO). The default keeps
    /// nothing: a queue that can look into the group ([`super::WorkQueue::queued_behind`], the
    /// embedded one) is asked instead.
    async fn note_arrival(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        arrival: &Arrival,
    ) -> Result<(), StoreError> {
        let _ = (tenant, conversation_id, arrival);
        Ok(())
    }
    /// The conversation's newest arrival that [`SessionStore::note_arrival`] kept (read
    /// strongly consistent).
    async fn newest_arrival(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Arrival>, StoreError> {
        let _ = (tenant, conversation_id);
        Ok(None)
    }
}

/// Reading execution records. Expired records are never returned.
#[async_trait]
pub trait ExecutionLog: Send + Sync {
    async fn execution_for_source(
        &self,
        tenant: &TenantId,
        source_id: &str,
    ) -> Result<Option<ExecutionRecord>, StoreError>;
    async fn get_execution(
        &self,
        tenant: &TenantId,
        execution: ExecutionId,
    ) -> Result<Option<ExecutionRecord>, StoreError>;
    async fn list_executions(
        &self,
        tenant: &TenantId,
        session: SessionId,
        after: Option<ExecutionId>,
        limit: usize,
    ) -> Result<Page<ExecutionRecord>, StoreError>;
    /// The recorded content of `session` under each of `hashes` that is kept (see
    /// [`switchboard_domain::recording`]), in no particular order; what has expired or was never
    /// written is left out.
    async fn content(&self, tenant: &TenantId, session: SessionId, hashes: &[String]) -> Result<Vec<Blob>, StoreError>;
    /// The tenant's model usage on the UTC days `from..=to`, one row per day, agent and model
    /// with calls in it, ordered by day, agent, model. Usage outlives the execution records.
    async fn usage(&self, tenant: &TenantId, from: NaiveDate, to: NaiveDate) -> Result<Vec<UsageRow>, StoreError>;
    /// Every token the tenant's usage counts on the UTC `day` (the sum of
    /// [`UsageCounts::tokens`](switchboard_domain::UsageCounts::tokens) over that day's
    /// [`ExecutionLog::usage`] rows): what the tokens-per-day limit compares. An adapter that
    /// keeps the figure up to date without a read overrides this.
    async fn tokens_on(&self, tenant: &TenantId, day: NaiveDate) -> Result<u64, StoreError> {
        Ok(self.usage(tenant, day, day).await?.iter().map(|r| r.counts.tokens()).sum())
    }
    /// The tenant's executions by status in the UTC hours starting at `from..=to` (both hour
    /// starts), one row per hour and status with executions in it, ordered by hour, then status
    /// in [`ExecutionStatus::ALL`](switchboard_domain::ExecutionStatus::ALL) order.
    /// Counted in the transaction that records each execution; kept as long as usage.
    async fn activity(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<ActivityRow>, StoreError>;
    /// The tenant's traffic-split variants in the UTC hours starting at `from..=to`: one row per
    /// hour, trigger, variant and status with executions in it ([`VariantRow`]), ordered by hour,
    /// trigger, variant, then status as [`activity`](Self::activity) orders them. Counted in the
    /// transaction that records each execution a split's session makes; kept as long as usage.
    async fn variants(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<VariantRow>, StoreError>;
    /// The tenant's insight rows of the UTC hours starting at `from..=to`: one per hour and key
    /// ([`switchboard_domain::insights::InsightKey`]) with something counted, its shards added
    /// up, in no particular order. Counted in the transaction that records each execution
    /// ([`TurnCommit::insight`]); kept as long as usage.
    async fn insights(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<InsightRow>, StoreError>;
}
