//! The internal HTTP API as an axum `Router`, mounted by `switchboard serve` (and, on AWS, by the
//! internal-api Lambda). Tenant-scoped routes live under `/tenants/{tenantId}/…` so that a
//! gateway policy can scope a caller to its tenants; every lookup is keyed by the tenant of the
//! path, so another tenant's ids answer 404.
//!
//! Every request passes one gate before routing (`routes::read_request`): its path must be in
//! canonical form (no percent-encoding, no dot segments), so that authorisation, the rate limiter
//! and the handlers read the same tenant; an announced oversize body is refused at once and a
//! body must arrive within [`ApiState::body_timeout`].

pub mod auth;
mod config;
pub mod problem;
mod routes;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_domain::{ExecutionRecord, InboundEvent, OutboundEvent};
use switchboard_engine::{
    ConfigAdmin, ConfigService, ConfigStore, ConversationLog, EventLog, ExecutionLog, Executor, RouteError,
    RouteOutcome, SessionStore, WorkItem,
};

pub use auth::{Authenticator, Caller, RateLimiter};
pub use problem::Problem;
pub use routes::router;

/// Takes in an inbound event (the embedded profile logs the message, then routes it).
#[async_trait]
pub trait Ingest: Send + Sync {
    async fn ingest(&self, event: &InboundEvent) -> Result<RouteOutcome, RouteError>;

    /// Ingests, then waits at most `wait` for the execution the event caused. Profiles that
    /// cannot observe completion (AWS: the executor is another Lambda) just ingest.
    async fn ingest_and_wait(
        &self,
        event: &InboundEvent,
        wait: Duration,
    ) -> Result<(RouteOutcome, Option<ExecutionRecord>), RouteError> {
        let _ = wait;
        Ok((self.ingest(event).await?, None))
    }
}

/// Events as they are published, with their event-log sequence numbers (embedded profile).
pub type LiveEvents = futures::stream::BoxStream<'static, (i64, OutboundEvent)>;

/// Opens a live feed of every tenant's published events; the route filters by tenant.
pub trait EventFeed: Send + Sync {
    fn subscribe(&self) -> LiveEvents;
}

/// Runs an agent on a conversation on demand (`agents/{id}/invoke`), through the same engine and
/// per-conversation ordering as inbound messages, and waits for the execution.
#[async_trait]
pub trait Invoker: Send + Sync {
    /// `None` when `wait` passed before the execution was recorded.
    async fn invoke(&self, item: WorkItem, wait: Duration) -> Result<Option<ExecutionRecord>, RouteError>;
}

/// What the routes need.
#[derive(Clone)]
pub struct ApiState {
    pub ingest: Arc<dyn Ingest>,
    pub invoker: Arc<dyn Invoker>,
    /// The engine, for operations that run synchronously in the request (session handoff).
    pub executor: Executor,
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
    /// API-key authentication (embedded). `None` behind API Gateway's IAM auth.
    pub auth: Option<Arc<dyn Authenticator>>,
    /// Per-tenant request rate limit.
    pub limiter: Option<Arc<RateLimiter>>,
    /// How long a request body may take to arrive once its headers have (408 after that).
    pub body_timeout: Duration,
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
