//! `InProcessBus`: the embedded profile's event bus. The event log in SQLite is the outbox: a
//! turn's events are written to it in the turn's own transaction (dropping repeats by id, so a
//! replayed turn does not announce twice) and broadcast to live subscribers such as the operator
//! stream once it has committed (`relay`).

use async_trait::async_trait;
use switchboard_domain::OutboundEvent;
use switchboard_engine::{EventBus, EventFeed, LiveEvents};
use tokio::sync::broadcast;

use crate::store::SqliteStore;

/// Live subscribers that fall this far behind miss events (they can re-read the log).
const CHANNEL_CAPACITY: usize = 1024;

#[derive(Debug, Clone)]
pub struct InProcessBus {
    store: SqliteStore,
    live: broadcast::Sender<(i64, OutboundEvent)>,
}

impl InProcessBus {
    pub fn new(store: SqliteStore) -> Self {
        let (live, _) = broadcast::channel(CHANNEL_CAPACITY);
        Self { store, live }
    }

    /// Events published from now on, with their log sequence numbers.
    pub fn subscribe(&self) -> broadcast::Receiver<(i64, OutboundEvent)> {
        self.live.subscribe()
    }

    /// The same as a stream. A subscriber that falls behind skips what it missed (the event log
    /// still has it) rather than stalling publishers.
    pub fn live_stream(&self) -> futures::stream::BoxStream<'static, (i64, OutboundEvent)> {
        let rx = self.live.subscribe();
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(item) => return Some((item, rx)),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "live event subscriber fell behind");
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }))
    }
}

#[async_trait]
impl EventBus for InProcessBus {
    /// The events are in the log already (the commit wrote them): live subscribers are told,
    /// with their sequence numbers. A subscriber that misses them reads them from the log.
    async fn relay(&self, committed: &[OutboundEvent]) {
        for event in committed {
            match self.store.event_seq(&event.tenant_id, &event.id).await {
                Ok(Some(seq)) => {
                    let _ = self.live.send((seq, event.clone()));
                }
                Ok(None) => tracing::warn!(event_id = %event.id, "a committed event is not in the log"),
                Err(e) => tracing::warn!(event_id = %event.id, error = %e, "a committed event was not streamed live"),
            }
        }
    }
}

impl EventFeed for InProcessBus {
    /// Every tenant's events as they are published; never ends.
    fn subscribe(&self, _tenant: &switchboard_domain::TenantId, _after: i64) -> LiveEvents {
        self.live_stream()
    }
}
