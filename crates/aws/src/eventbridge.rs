//! `EventBridgeBus`: publishes outbound events to EventBridge under the source `switchboard`,
//! one `PutEvents` entry per event, and treats a failed entry as a failed publish (PutEvents
//! answers 200 even when entries fail). It does not retry beyond the SDK's own retries: the
//! relay's batch is retried from the failed record, and consumers drop repeats by the event `id`.

use async_trait::async_trait;
use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use switchboard_domain::OutboundEvent;
use switchboard_domain::event::OUTBOUND_SOURCE;
use switchboard_engine::{BusError, EventBus};

use crate::errors::logged;

/// EventBridge's largest `PutEvents` entry (256 KiB); the emulator accepts more.
pub const MAX_ENTRY_BYTES: usize = 256 * 1024;

/// Entry error codes worth another try.
const RETRYABLE_ENTRY_CODES: &[&str] = &["InternalFailure", "ThrottlingException", "InternalException"];

#[derive(Debug, Clone)]
pub struct EventBridgeBus {
    client: Client,
    bus_name: String,
}

impl EventBridgeBus {
    /// A bus with an EventBridge client of its own, made from `config`.
    pub fn from_config(config: &aws_config::SdkConfig, bus_name: impl Into<String>) -> Self {
        Self::new(Client::new(config), bus_name)
    }

    pub fn new(client: Client, bus_name: impl Into<String>) -> Self {
        Self { client, bus_name: bus_name.into() }
    }
}

/// EventBridge, with the tenant's event log beside it. The engine's events reach the log with
/// the commit that carries them (the outbox, marked `outbox`), and the executions table's stream
/// publishes them (`functions/lambda`'s relay), so [`EventBus::relay`] has nothing to do here.
/// [`EventBus::publish`], for an event no commit carries, logs it in DynamoDB (once per event
/// id), where `GET /tenants/{t}/events` reads it, then publishes it: logged first, so that
/// whoever hears of the event on the bus (the console push, whose consoles then read the log)
/// finds it there; either failing fails the publish (retryably).
#[derive(Debug, Clone)]
pub struct LoggingBus {
    bus: EventBridgeBus,
    log: crate::DynamoStore,
}

impl LoggingBus {
    pub fn new(bus: EventBridgeBus, log: crate::DynamoStore) -> Self {
        Self { bus, log }
    }
}

#[async_trait]
impl EventBus for LoggingBus {
    async fn publish(&self, event: &OutboundEvent) -> Result<(), BusError> {
        self.log
            .log_event(event)
            .await
            .map_err(|e| BusError { message: format!("event log: {e}"), retryable: e.retryable() })?;
        self.bus.publish(event).await
    }

    /// Nothing to do here: the commit logged the events marked `outbox`, and the executions
    /// table's stream publishes them (`functions/lambda`'s `relay`), at least once even if this
    /// process dies now.
    async fn relay(&self, _committed: &[OutboundEvent]) {}
}

/// The `detail` published: the event's own detail with its `id` and `tenantId` added, so that
/// consumers can drop repeats and route by tenant.
pub fn detail_json(event: &OutboundEvent) -> serde_json::Value {
    let mut detail = match &event.detail {
        serde_json::Value::Object(map) => map.clone(),
        serde_json::Value::Null => serde_json::Map::new(),
        other => serde_json::Map::from_iter([("data".to_owned(), other.clone())]),
    };
    detail.insert("id".into(), event.id.clone().into());
    detail.insert("tenantId".into(), event.tenant_id.to_string().into());
    serde_json::Value::Object(detail)
}

#[async_trait]
impl EventBus for EventBridgeBus {
    async fn publish(&self, event: &OutboundEvent) -> Result<(), BusError> {
        let detail = detail_json(event).to_string();
        // The entry size as EventBridge counts it: source, detail-type, detail, bus name.
        let size = OUTBOUND_SOURCE.len() + event.detail_type.len() + detail.len() + self.bus_name.len();
        if size > MAX_ENTRY_BYTES {
            return Err(BusError {
                message: format!("event {} is {size} bytes, more than EventBridge's {MAX_ENTRY_BYTES}", event.id),
                retryable: false,
            });
        }
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus_name)
            .source(OUTBOUND_SOURCE)
            .detail_type(&event.detail_type)
            .detail(detail)
            .build();
        let out = self.client.put_events().entries(entry).send().await.map_err(|e| {
            let f = logged("PutEvents", &e, "eventbridge put failed");
            BusError { message: f.message, retryable: f.retryable }
        })?;
        if out.failed_entry_count() > 0 {
            let failed = out.entries().iter().find(|e| e.error_code().is_some());
            let code = failed.and_then(|e| e.error_code()).unwrap_or("unknown");
            let message = failed.and_then(|e| e.error_message()).unwrap_or("no message");
            tracing::warn!(code, event_id = %event.id, "eventbridge rejected the entry");
            return Err(BusError {
                message: format!("PutEvents: entry for event {} failed: {code}: {message}", event.id),
                retryable: RETRYABLE_ENTRY_CODES.contains(&code),
            });
        }
        Ok(())
    }

    async fn relay(&self, committed: &[OutboundEvent]) {
        for event in committed {
            if let Err(e) = self.publish(event).await {
                tracing::error!(event_id = %event.id, error = %e.message, "a committed event was not published");
            }
        }
    }
}
