//! The ports: narrow traits the engine needs from the outside world. Each has an AWS adapter and
//! an embedded adapter; the engine sees only these traits and domain types, never an SDK type.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use switchboard_domain::message::{ContentBlock, Message};
use switchboard_domain::{
    Agent, AgentId, EventType, ExecutionId, ExecutionRecord, ModelConfig, OutboundEvent, Session, SessionId, Skill,
    SkillId, TenantId, TokenUsage, Tool, ToolId, Trigger, TriggerId, WebhookHandler,
};

use crate::error::{BusError, ConversationError, ModelError, QueueError, StoreError};

/// Wall-clock time, injectable so that tests control expiry and timestamps.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Tenant configuration: agents and triggers. Implementations may cache (triggers at most one
/// minute, agents five) and must invalidate on their own writes.
#[async_trait]
pub trait ConfigStore: Send + Sync {
    async fn tenant_exists(&self, tenant: &TenantId) -> Result<bool, StoreError>;
    async fn get_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError>;
    /// A custom tool of the tenant.
    async fn get_tool(&self, tenant: &TenantId, tool: ToolId) -> Result<Option<Tool>, StoreError>;
    /// A skill of the tenant.
    async fn get_skill(&self, tenant: &TenantId, skill: SkillId) -> Result<Option<Skill>, StoreError>;
    /// Active triggers for `event_type`, already in evaluation order (priority, then id).
    async fn active_triggers(&self, tenant: &TenantId, event_type: EventType) -> Result<Arc<[Trigger]>, StoreError>;
}

/// The kinds of tenant configuration record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigKind {
    Agent,
    Trigger,
    Tool,
    Skill,
}

impl ConfigKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::Agent => "agent",
            ConfigKind::Trigger => "trigger",
            ConfigKind::Tool => "tool",
            ConfigKind::Skill => "skill",
        }
    }
}

/// One tenant configuration record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ConfigRecord {
    Agent(Agent),
    Trigger(Trigger),
    Tool(Tool),
    Skill(Skill),
}

impl ConfigRecord {
    pub fn kind(&self) -> ConfigKind {
        match self {
            ConfigRecord::Agent(_) => ConfigKind::Agent,
            ConfigRecord::Trigger(_) => ConfigKind::Trigger,
            ConfigRecord::Tool(_) => ConfigKind::Tool,
            ConfigRecord::Skill(_) => ConfigKind::Skill,
        }
    }

    pub fn tenant_id(&self) -> &TenantId {
        match self {
            ConfigRecord::Agent(r) => &r.tenant_id,
            ConfigRecord::Trigger(r) => &r.tenant_id,
            ConfigRecord::Tool(r) => &r.tenant_id,
            ConfigRecord::Skill(r) => &r.tenant_id,
        }
    }

    pub fn id(&self) -> String {
        match self {
            ConfigRecord::Agent(r) => r.agent_id.to_string(),
            ConfigRecord::Trigger(r) => r.trigger_id.to_string(),
            ConfigRecord::Tool(r) => r.tool_id.to_string(),
            ConfigRecord::Skill(r) => r.skill_id.to_string(),
        }
    }

    pub fn version(&self) -> u64 {
        match self {
            ConfigRecord::Agent(r) => r.version,
            ConfigRecord::Trigger(r) => r.version,
            ConfigRecord::Tool(r) => r.version,
            ConfigRecord::Skill(r) => r.version,
        }
    }
}

/// Writing and listing tenant configuration (the internal API's CRUD). Writes are conditional:
/// `expected_version` `None` creates (the id must be free), `Some(v)` replaces only if the stored
/// version is still `v`. Implementations invalidate their own config caches on every write.
#[async_trait]
pub trait ConfigAdmin: Send + Sync {
    /// Creates a tenant; `false` if it already existed.
    async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError>;
    async fn put_config(&self, record: &ConfigRecord, expected_version: Option<u64>) -> Result<(), StoreError>;
    async fn get_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
    ) -> Result<Option<ConfigRecord>, StoreError>;
    /// A page of a tenant's records of one kind, in id (creation) order.
    async fn list_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ConfigRecord>, StoreError>;
    /// Deletes if the stored version is `expected_version`; `false` if there was no such record.
    async fn delete_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        expected_version: u64,
    ) -> Result<bool, StoreError>;
}

/// Everything one turn writes, committed atomically: the sessions it changed (each conditional
/// on the version it read, `None` for a new session) and its execution record (conditional on
/// no record existing for the same source). In DynamoDB this is one `TransactWriteItems`.
#[derive(Debug, Clone)]
pub struct TurnCommit {
    pub sessions: Vec<SessionWrite>,
    pub execution: ExecutionRecord,
}

#[derive(Debug, Clone)]
pub struct SessionWrite {
    pub session: Session,
    /// The version read; `None` creates the session.
    pub expected_version: Option<u64>,
}

/// Sessions and their per-turn commits.
#[async_trait]
pub trait SessionStore: Send + Sync {
    async fn get_session(&self, tenant: &TenantId, session: SessionId) -> Result<Option<Session>, StoreError>;
    /// The newest session of a conversation, whatever its status.
    async fn latest_session(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Session>, StoreError>;
    /// Every session of a conversation, oldest first (the `SessionsByConversation` index).
    async fn sessions_for_conversation(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Vec<Session>, StoreError>;
    /// Writes the turn or nothing. Fails with [`StoreError::VersionConflict`] when a session
    /// changed since it was read (or a second active session would appear for the
    /// conversation), and with [`StoreError::Duplicate`] when the source was already recorded.
    async fn commit_turn(&self, commit: &TurnCommit) -> Result<(), StoreError>;
}

/// A page of results and the cursor of the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    pub items: Vec<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
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
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ExecutionRecord>, StoreError>;
}

/// A unit of agent work: one inbound message for one conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkItem {
    pub tenant_id: TenantId,
    /// Idempotency root of everything this item causes: the event id, plus `#h<n>` when the
    /// item continues a conversation handed to another agent.
    pub source_id: String,
    pub conversation_id: String,
    pub message_id: String,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<TriggerId>,
    /// The agent the trigger chose; an active session of the conversation takes precedence.
    pub agent_id: AgentId,
    /// Set when the item continues a handoff: run only if this agent's session is active.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continuation: bool,
    /// The event detail, for the execution record's input.
    pub detail: serde_json::Value,
}

impl WorkItem {
    /// The FIFO group: one conversation of one tenant.
    pub fn group_id(&self) -> String {
        format!("{}:{}", self.tenant_id, self.conversation_id)
    }

    /// The queue's deduplication id: the source id within its tenant, hashed so that it fits
    /// SQS's `MessageDeduplicationId` (the deduplication scope of a FIFO queue is the whole queue,
    /// so a bare event id would let one tenant's event silence another's).
    pub fn dedup_id(&self) -> String {
        switchboard_domain::ids::tenant_scoped_key(&self.tenant_id, &self.source_id)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    Queued,
    /// The deduplication id was seen within the queue's deduplication window.
    Duplicate,
}

/// Where the router puts work. Consuming is profile-specific (Lambda event source mapping on AWS,
/// a worker pool in the embedded profile), so it is not part of the port.
#[async_trait]
pub trait WorkQueue: Send + Sync {
    /// Enqueues `item` in its conversation's group ([`WorkItem::group_id`]), deduplicated on
    /// [`WorkItem::dedup_id`] (its source id, scoped by its tenant).
    async fn enqueue(&self, item: &WorkItem) -> Result<Enqueued, QueueError>;
}

/// Publishes events (EventBridge, or the in-process bus). Delivery is at least once; every event
/// carries a stable `id` so consumers can drop repeats.
#[async_trait]
pub trait EventBus: Send + Sync {
    async fn publish(&self, event: &OutboundEvent) -> Result<(), BusError>;
}

/// A reply as accepted by the conversation system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub message_id: String,
    /// The idempotency key had been used: nothing new was sent.
    pub duplicate: bool,
}

/// Sends replies into conversations. Must honour `idempotency_key`: a second send with the same
/// key sends nothing and returns the first message's id.
#[async_trait]
pub trait Conversations: Send + Sync {
    async fn send_reply(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError>;
}

/// A message in the local conversation log of the embedded profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedMessage {
    pub message_id: String,
    /// `inbound` (from the customer) or `outbound` (from the agent).
    pub direction: String,
    pub text: String,
    pub created_at: DateTime<Utc>,
}

/// The conversation log the embedded profile keeps in place of the Conversations Service:
/// inbound messages as they arrive, replies as they are sent. (On AWS the conversation lives in
/// the Conversations Service and this port has no adapter.)
#[async_trait]
pub trait ConversationLog: Send + Sync {
    /// Records an inbound message; `false` if that message id was already recorded.
    async fn record_inbound(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        message_id: &str,
        text: &str,
    ) -> Result<bool, StoreError>;
    /// The conversation's messages, oldest first, at most `limit`.
    async fn messages(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<LoggedMessage>, StoreError>;
}

/// Reading back published events. The embedded profile keeps them in its event log (the
/// operator stream replays from it); on AWS, EventBridge delivers them and there is no reader.
#[async_trait]
pub trait EventLog: Send + Sync {
    /// A tenant's events with a sequence number above `after`, oldest first.
    async fn events_after(
        &self,
        tenant: &TenantId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, OutboundEvent)>, StoreError>;
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub config: ModelConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    ContentFiltered,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    pub usage: TokenUsage,
    /// The model that answered (a fallback may differ from the one asked for).
    pub model: String,
}

/// One model call (Bedrock Converse shape). Adapters retry throttling and 5xx themselves; an
/// error that reaches the engine is final for this attempt.
#[async_trait]
pub trait Model: Send + Sync {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError>;
}

/// One call of a tenant's webhook tool. The engine builds the JSON body; the adapter signs it
/// with the tenant secret named by `handler.secret_ref` (the engine never sees the secret),
/// enforces the limits and the address rules, and retries as the handler's policy allows.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRequest {
    pub tenant_id: TenantId,
    pub tool_name: String,
    pub handler: WebhookHandler,
    /// The exact bytes sent and signed.
    pub body: Vec<u8>,
    /// Stable across retries and redeliveries of the same tool call.
    pub idempotency_key: String,
}

/// What the endpoint answered (any status: a 4xx is the tool's answer, for the model to read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResponse {
    pub status: u16,
    pub body: Vec<u8>,
    /// The body was longer than the cap and was cut off.
    pub truncated: bool,
    /// Requests sent, retries included.
    pub attempts: u32,
    /// The host called (for the audit record; never the full URL with its query).
    pub host: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The URL, or the address it resolved to, is not allowed (private, loopback, metadata…).
    #[error("blocked: {0}")]
    Blocked(String),
    #[error("timed out after {attempts} attempt(s)")]
    Timeout { attempts: u32 },
    #[error("could not connect after {attempts} attempt(s): {message}")]
    Connect { message: String, attempts: u32 },
    /// The signing secret is missing or could not be read. The message never holds the secret.
    #[error("secret: {0}")]
    Secret(String),
    #[error("{0}")]
    Invalid(String),
}

/// Calls tenant webhooks. See [`WebhookRequest`].
#[async_trait]
pub trait WebhookCaller: Send + Sync {
    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError>;
}

/// The caller of a runtime configured without webhook tools: every call is refused, and the
/// model is told so in the tool result.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoWebhooks;

#[async_trait]
impl WebhookCaller for NoWebhooks {
    async fn call(&self, _request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        Err(WebhookError::Blocked("webhook tools are not enabled in this runtime".into()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secrets: {message}")]
pub struct SecretError {
    pub message: String,
    pub retryable: bool,
}

/// Tenant secrets (Secrets Manager on AWS, a secrets file in the embedded profile).
/// Implementations may cache briefly; values must never be logged.
#[async_trait]
pub trait Secrets: Send + Sync {
    async fn get_secret(&self, tenant: &TenantId, name: &str) -> Result<Option<String>, SecretError>;
}

/// Everything the engine needs, built once per process (or Lambda container).
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<dyn ConfigStore>,
    pub sessions: Arc<dyn SessionStore>,
    pub executions: Arc<dyn ExecutionLog>,
    pub queue: Arc<dyn WorkQueue>,
    pub bus: Arc<dyn EventBus>,
    pub conversations: Arc<dyn Conversations>,
    pub model: Arc<dyn Model>,
    pub webhooks: Arc<dyn WebhookCaller>,
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Deps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deps").finish_non_exhaustive()
    }
}
