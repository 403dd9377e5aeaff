//! Outbound events: publishing them, and reading back the ones a profile keeps.

use async_trait::async_trait;
use switchboard_domain::{OutboundEvent, TenantId};

use super::StoreError;

/// Publishes events (EventBridge, or the in-process bus). Delivery is at least once; every event
/// carries a stable `id` so consumers can drop repeats. Every event travels in the write of the
/// state change it reports (a turn's commit, [`super::TurnCommit::events`], or a limit's claim:
/// the outbox) and is handed to [`EventBus::relay`] after it.
#[async_trait]
pub trait EventBus: Send + Sync {
    /// Publishes events a commit has just kept in the event log. Never fails the caller: the
    /// commit holds whatever happens here, and what this misses the profile's relay publishes
    /// from the log (on the embedded profile the log is what consumers read, so only live
    /// subscribers are told).
    async fn relay(&self, committed: &[OutboundEvent]);
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

/// Live push to operator consoles (the AWS profile's WebSocket API). A console asks the API for
/// a ticket — the API has checked the caller's access to the tenant — and opens the WebSocket
/// with it; redeeming the ticket binds the connection to that tenant alone.
#[async_trait]
pub trait PushTickets: Send + Sync {
    /// A new single-use ticket for `tenant`'s events.
    async fn issue(&self, tenant: &TenantId) -> Result<PushTicket, StoreError>;
}

/// Where and with what a console connects for a tenant's live events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushTicket {
    pub ticket: String,
    /// The WebSocket URL (`wss://…/<stage>`); the ticket and tenant go in its query.
    pub url: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event bus: {message}")]
pub struct BusError {
    pub message: String,
    pub retryable: bool,
}
