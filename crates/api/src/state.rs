//! What the routes need from a profile: its ports and settings ([`ApiState`]) and the few
//! read-only views a profile may add (readiness, metrics, dead letters). No route logic here.

use std::sync::Arc;
use std::time::Duration;

use switchboard_engine::{
    ConfigAdmin, ConfigService, ConfigStore, ConversationLog, EventFeed, EventLog, ExecutionLog, Executor, Ingest,
    Invoker, Operator, Secrets, SessionStore,
};

use crate::auth::{Authenticator, RateLimiter};

/// What the routes need.
#[derive(Clone)]
pub struct ApiState {
    pub ingest: Arc<dyn Ingest>,
    pub invoker: Arc<dyn Invoker>,
    /// The engine, for what runs synchronously in the request (its ports' clock and prices).
    pub executor: Executor,
    /// Operators' actions and handoffs over the API, run in the request.
    pub operator: Operator,
    pub config: Arc<dyn ConfigStore>,
    pub admin: Arc<dyn ConfigAdmin>,
    pub sessions: Arc<dyn SessionStore>,
    pub executions: Arc<dyn ExecutionLog>,
    /// Present in the embedded profile only.
    pub conversations: Option<Arc<dyn ConversationLog>>,
    /// Present in the embedded profile only.
    pub events: Option<Arc<dyn EventLog>>,
    /// Present in the embedded profile only.
    pub live: Option<Arc<dyn EventFeed>>,
    /// Tickets for the live push (AWS profile, when the stack has its WebSocket API).
    pub push: Option<Arc<dyn switchboard_engine::PushTickets>>,
    /// API-key authentication (embedded). `None` behind API Gateway's IAM auth.
    pub auth: Option<Arc<dyn Authenticator>>,
    /// Per-tenant request rate limit.
    pub limiter: Option<Arc<RateLimiter>>,
    /// How long a request body may take to arrive once its headers have (408 after that).
    pub body_timeout: Duration,
    /// What `GET /ready` checks (embedded: the database takes writes and the workers run).
    /// `None`: ready whenever the process answers (a Lambda function).
    pub ready: Option<Arc<dyn Readiness>>,
    /// What `GET /metrics` renders (embedded). `None`: no such route (Lambda logs EMF instead).
    pub metrics: Option<Arc<dyn MetricsText>>,
    /// Dead letters per tenant (embedded). `None`: not countable per tenant (AWS: one shared
    /// dead-letter queue).
    pub dead_letters: Option<Arc<dyn DeadLetters>>,
    /// Replays executions (embedded: in a scratch engine beside the store). `None`: this
    /// deployment does not (a Lambda function has no scratch engine).
    pub replayer: Option<Arc<dyn Replayer>>,
    /// Tenant secrets, for verifying webhook triggers' deliveries.
    pub secrets: Arc<dyn Secrets>,
    /// What lists tenants' MCP servers for `…/tools/discover` and `…/tools/{id}/refresh`
    /// (embedded: the caller the turns use). `None`: this deployment's API calls no tenant's
    /// server (the AWS internal-api, which links no outbound caller); those routes answer 501.
    pub tool_servers: Option<Arc<dyn switchboard_engine::WebhookCaller>>,
}

/// Runs an execution again from its record (`POST …/executions/{e}/replay`).
#[async_trait::async_trait]
pub trait Replayer: Send + Sync {
    /// The replay's report; `Ok(None)` when the tenant has no such execution.
    async fn replay(
        &self,
        tenant: &switchboard_domain::TenantId,
        execution: switchboard_domain::ExecutionId,
        options: ReplayOptions,
    ) -> Result<Option<serde_json::Value>, ReplayRefused>;
}

/// How to run it again: from the record (the default), or `live` against the deployment's
/// model, with the agent's current configuration changed by `agent` (fields laid over it) and its
/// model by `model`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReplayOptions {
    #[serde(default)]
    pub live: bool,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub agent: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Why a replay did not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayRefused {
    /// The record cannot be replayed (no content kept, words redacted, nothing to replay).
    #[error("{0}")]
    Unreplayable(String),
    /// The options are wrong, each field named.
    #[error("invalid replay options")]
    Invalid(switchboard_domain::ValidationErrors),
    #[error(transparent)]
    Store(#[from] switchboard_engine::StoreError),
    /// The scratch engine could not run it.
    #[error("{0}")]
    Failed(String),
}

/// The process's metrics as OpenMetrics text, for `GET /metrics`.
#[async_trait::async_trait]
pub trait MetricsText: Send + Sync {
    async fn render(&self) -> String;
}

/// A tenant's work items in the dead letters, for the overview (`GET …/activity`).
#[async_trait::async_trait]
pub trait DeadLetters: Send + Sync {
    async fn count(&self, tenant: &switchboard_domain::TenantId) -> Result<u64, switchboard_engine::StoreError>;
}

/// Whether the process can do its work now, for `GET /ready`.
#[async_trait::async_trait]
pub trait Readiness: Send + Sync {
    /// `Err` says what is not ready.
    async fn check(&self) -> Result<(), String>;
}

/// The default for [`ApiState::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

impl ApiState {
    /// The configuration service over this state's stores.
    pub fn config_service(&self) -> ConfigService {
        ConfigService::new(self.config.clone(), self.admin.clone())
    }
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").finish_non_exhaustive()
    }
}
