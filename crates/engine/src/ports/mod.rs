//! The ports: narrow traits the engine needs from the outside world, a file per port family with
//! its error type. Each has an AWS adapter and an embedded adapter; the engine sees only these
//! traits and domain types, never an SDK type.

mod clock;
mod config;
mod conversations;
mod counters;
mod events;
mod metrics;
mod model;
mod progress;
mod queue;
mod schedules;
mod sessions;
mod store;
mod webhooks;

use std::sync::Arc;

use switchboard_domain::PriceTable;

pub use clock::{Clock, SystemClock};
pub use config::{Authorship, ConfigAdmin, ConfigKind, ConfigRecord, ConfigStore, ConfigVersion};
pub use conversations::{
    ConversationError, ConversationLog, Conversations, HistoryMessage, LoggedMessage, Sender, Sent,
};
pub use counters::{Admit, Counters, NoCounters, Slot, SlotAndCount};
pub use events::{BusError, EventBus, EventLog, PushTicket, PushTickets};
pub use metrics::{Metrics, NoMetrics, tool_calls};
pub use model::{Model, ModelError, ModelRequest, ModelResponse, StopReason, TextSink, ToolSpec};
pub use progress::{Follower, Progress, TurnEvent};
pub use queue::{CountAndEnqueue, DayTokens, Enqueued, QueueError, WorkItem, WorkQueue};
pub use schedules::{DueSchedule, ScheduleStore};
pub use sessions::{
    Arrival, ExecutionLog, IdleSession, SessionFilter, SessionStore, SessionWrite, TurnCommit, TurnStart,
};
pub use store::{Page, StoreError};
pub use webhooks::{
    McpAnswer, McpRequest, NoSecrets, NoWebhooks, SecretError, Secrets, WebhookCaller, WebhookError, WebhookRequest,
    WebhookResponse,
};

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
    /// What model calls cost; each call's record carries its cost at this table.
    pub prices: Arc<PriceTable>,
    /// Where inbound outcomes and committed executions are counted ([`NoMetrics`] for none).
    pub metrics: Arc<dyn Metrics>,
    /// The windowed counts tenant limits are enforced with.
    pub counters: Arc<dyn Counters>,
}

impl std::fmt::Debug for Deps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deps").finish_non_exhaustive()
    }
}

/// Wraps the ports of a [`Deps`] before the engine is built over them — what a test puts between
/// the engine and the adapters (fault injection), given to a profile's assembly
/// (`EmbeddedOptions::ports`, `Wiring::layered`).
pub trait PortLayer: Send + Sync {
    /// `deps` with its ports wrapped.
    fn deps(&self, deps: Deps) -> Deps;

    /// A queue the profile hands the engine beside `deps` (the embedded intake's), wrapped alike.
    fn queue(&self, queue: Arc<dyn WorkQueue>) -> Arc<dyn WorkQueue>;
}
