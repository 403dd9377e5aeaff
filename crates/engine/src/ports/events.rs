//! Outbound events: publishing them, and reading back the ones a profile keeps.

use async_trait::async_trait;
use switchboard_domain::{OutboundEvent, TenantId};

use super::StoreError;

/// Publishes events (EventBridge, or the in-process bus). Delivery is at least once; every event
/// carries a stable `id` so consumers can drop repeats.
#[async_trait]
pub trait EventBus: Send + Sync {
    async fn publish(&self, event: &OutboundEvent) -> Result<(), BusError>;
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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event bus: {message}")]
pub struct BusError {
    pub message: String,
    pub retryable: bool,
}
