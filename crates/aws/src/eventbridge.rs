//! `EventBridgeBus`: publishes outbound events to EventBridge under the source `switchboard`,
//! one `PutEvents` entry per event, and treats a failed entry as a failed publish (PutEvents
//! answers 200 even when entries fail). It does not retry beyond the SDK's own retries: the
//! relay's batch is retried from the failed record, and consumers drop repeats by the event `id`.
//! It also puts `message.new` as the Conversations Service would, for the service's stand-in.

use async_trait::async_trait;
use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use switchboard_domain::OutboundEvent;
use switchboard_domain::event::{INBOUND_SOURCE, MESSAGE_NEW, OUTBOUND_SOURCE};
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

/// The AWS profile's bus as the engine sees it: the engine's events reach the tenant's event log
/// with the write that carries them (the outbox, marked `outbox`), and the executions table's
/// stream publishes them to EventBridge (`functions/lambda`'s relay, through
/// [`EventBridgeBus::publish`]), at least once even if this process dies after its commit. So
/// [`EventBus::relay`] has nothing left to do here.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamRelay;

#[async_trait]
impl EventBus for StreamRelay {
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

impl EventBridgeBus {
    /// Publishes `event` as one `PutEvents` entry.
    pub async fn publish(&self, event: &OutboundEvent) -> Result<(), BusError> {
        self.put(OUTBOUND_SOURCE, &event.detail_type, detail_json(event).to_string(), &event.id).await
    }

    /// Puts a customer's message on the bus as the Conversations Service does: source
    /// `conversations-service`, detail-type `message.new`, `detail` as given
    /// (`contracts/events/message.new.schema.json`; the stand-in's, which Switchboard's rule
    /// routes to the event-router). `message_id` only names the entry in logs and errors.
    pub async fn put_message_new(&self, detail: &serde_json::Value, message_id: &str) -> Result<(), BusError> {
        self.put(INBOUND_SOURCE, MESSAGE_NEW, detail.to_string(), message_id).await
    }

    /// One `PutEvents` entry on this bus; `id` names it in logs and errors.
    async fn put(&self, source: &str, detail_type: &str, detail: String, id: &str) -> Result<(), BusError> {
        // The entry size as EventBridge counts it: source, detail-type, detail, bus name.
        let size = source.len() + detail_type.len() + detail.len() + self.bus_name.len();
        if size > MAX_ENTRY_BYTES {
            return Err(BusError {
                message: format!("event {id} is {size} bytes, more than EventBridge's {MAX_ENTRY_BYTES}"),
                retryable: false,
            });
        }
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus_name)
            .source(source)
            .detail_type(detail_type)
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
            tracing::warn!(code, event_id = %id, "eventbridge rejected the entry");
            return Err(BusError {
                message: format!("PutEvents: entry for event {id} failed: {code}: {message}"),
                retryable: RETRYABLE_ENTRY_CODES.contains(&code),
            });
        }
        Ok(())
    }
}
