//! What a profile's runtime offers the internal API, beside the ports it gives the engine:
//! taking in an inbound event, running an agent on demand, and a live feed of published events.
//! The embedded profile implements them on `Embedded` (it can wait for an execution in-process);
//! on AWS, [`Intake`] takes events in and the executor is another Lambda, so nothing waits.

use std::time::Duration;

use async_trait::async_trait;
use switchboard_domain::{ExecutionRecord, InboundEvent, OutboundEvent};

use crate::intake::{Intake, RouteError, RouteOutcome};
use crate::ports::WorkItem;

/// Takes in an inbound event (the embedded profile logs the message, then routes it).
#[async_trait]
pub trait Ingest: Send + Sync {
    async fn ingest(&self, event: &InboundEvent) -> Result<RouteOutcome, RouteError>;

    /// Ingests, then waits at most `wait` for the execution of the event's message (for a repeat
    /// of a message, under any event id, the first one's). Profiles that cannot observe
    /// completion (AWS: the executor is another Lambda) just ingest.
    async fn ingest_and_wait(
        &self,
        event: &InboundEvent,
        wait: Duration,
    ) -> Result<(RouteOutcome, Option<ExecutionRecord>), RouteError> {
        let _ = wait;
        Ok((self.ingest(event).await?, None))
    }
}

/// Event intake alone: routes the event (AWS, where the conversation log is not ours).
#[async_trait]
impl Ingest for Intake {
    async fn ingest(&self, event: &InboundEvent) -> Result<RouteOutcome, RouteError> {
        self.route(event).await
    }
}

/// Runs an agent on a conversation on demand (`agents/{id}/invoke`), through the same engine and
/// per-conversation ordering as inbound messages, and waits for the execution.
#[async_trait]
pub trait Invoker: Send + Sync {
    /// `None` when `wait` passed before the execution was recorded.
    async fn invoke(&self, item: WorkItem, wait: Duration) -> Result<Option<ExecutionRecord>, RouteError>;

    /// Whether [`Invoker::invoke_following`] can follow the turn as it runs here.
    fn follows_turns(&self) -> bool {
        false
    }

    /// [`Invoker::invoke`], with the turn's events sent to `follower` as they happen (when
    /// [`Invoker::follows_turns`]; else none are).
    async fn invoke_following(
        &self,
        item: WorkItem,
        wait: Duration,
        follower: crate::ports::Follower,
    ) -> Result<Option<ExecutionRecord>, RouteError> {
        let _ = follower;
        self.invoke(item, wait).await
    }
}

/// Events as they are published, with their event-log sequence numbers (embedded profile).
pub type LiveEvents = futures::stream::BoxStream<'static, (i64, OutboundEvent)>;

/// Opens a live feed of every tenant's published events; the reader filters by tenant.
pub trait EventFeed: Send + Sync {
    /// Events from now on for a reader of `tenant`'s events that has seen up to `after`; a feed
    /// may give other tenants' events and ones at or before `after` too (the reader filters),
    /// and may end (the reader reconnects with the last sequence number it saw).
    fn subscribe(&self, tenant: &switchboard_domain::TenantId, after: i64) -> LiveEvents;
}
