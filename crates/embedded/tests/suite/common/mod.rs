//! The world the embedded scenario suites run in: the real embedded adapters (SQLite store and
//! queue, local conversation log, event log) in a fresh data directory, tenants installed from
//! bundles, messages sent as channel events and queued items drained by hand so that every step
//! is deterministic. It never starts the workers; a suite that needs more wraps it.
// Each suite is its own crate and uses a different part of the harness.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::{Value, json};
use switchboard_domain::{ExecutionRecord, InboundEvent, OutboundEvent, Session, TenantId};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{
    Clock, ConversationLog, ExecOutcome, Executor, Model, RouteOutcome, SessionStore, SystemClock, WorkItem,
};

pub struct World {
    pub embedded: Embedded,
    /// The tenant of the first bundle installed: the one the suite's questions are about.
    pub tenant: TenantId,
    pub dir: tempfile::TempDir,
    /// Numbers the events and messages `event` makes.
    n: u32,
}

impl World {
    /// A world whose one tenant is `bundle_json`, answered by the scripted model's `script`.
    pub async fn new(bundle_json: &str, script: Value) -> Self {
        Self::with_model(bundle_json, Arc::new(ScriptedModel::from_json(&script.to_string()).unwrap())).await
    }

    /// A world whose one tenant is `bundle_json`, answered by `model`.
    pub async fn with_model(bundle_json: &str, model: Arc<dyn Model>) -> Self {
        Self::open(model, Arc::new(SystemClock), EmbeddedOptions::default(), &[bundle_json]).await
    }

    /// Opens the embedded profile in a fresh directory on `clock` and installs every bundle.
    pub async fn open(
        model: Arc<dyn Model>,
        clock: Arc<dyn Clock>,
        options: EmbeddedOptions,
        bundles: &[&str],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let embedded = Embedded::open(dir.path(), model, Arc::clone(&clock), options).unwrap();
        let mut tenant = None;
        for text in bundles {
            let bundle = Bundle::parse(text, clock.as_ref()).unwrap();
            tenant.get_or_insert_with(|| bundle.tenant_id.clone());
            bundle.install(&embedded.store).await.unwrap();
        }
        Self { embedded, tenant: tenant.expect("a world has at least one tenant"), dir, n: 0 }
    }

    /// The next customer message in `conversation`, with fresh event and message ids.
    pub fn event(&mut self, conversation: &str, text: &str) -> InboundEvent {
        self.message(conversation, "inbound", text)
    }

    /// The next `message.new` of the tenant in `conversation`; `direction` "outbound" is a
    /// human operator writing, which is never routed.
    pub fn message(&mut self, conversation: &str, direction: &str, text: &str) -> InboundEvent {
        self.n += 1;
        InboundEvent::parse(&json!({
            "id": format!("evt-{}", self.n), "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": self.tenant, "conversationId": conversation, "messageId": format!("m-{}", self.n),
                        "channel": {"platform": "webchat"}, "conversation": {"status": "open"},
                        "message": {"direction": direction, "text": text} }
        }))
        .unwrap()
    }

    /// Sends a message and runs every queued item to completion with `executor`.
    pub async fn say_with(
        &mut self,
        executor: &Executor,
        conversation: &str,
        text: &str,
    ) -> (RouteOutcome, Vec<ExecOutcome>) {
        let e = self.event(conversation, text);
        let outcome = self.embedded.ingest(&e).await.unwrap();
        (outcome, self.drain(executor).await)
    }

    /// Sends a message and runs every queued item as the workers would.
    pub async fn say(&mut self, conversation: &str, text: &str) -> (RouteOutcome, Vec<ExecOutcome>) {
        let executor = self.embedded.executor.clone();
        self.say_with(&executor, conversation, text).await
    }

    /// Ingests `event` as it is and runs every queued item as the workers would.
    pub async fn deliver(&self, event: &InboundEvent) -> (RouteOutcome, Vec<ExecOutcome>) {
        let outcome = self.embedded.ingest(event).await.unwrap();
        (outcome, self.drain(&self.embedded.executor).await)
    }

    /// Runs every queued item with `executor`, acknowledging each, in queue order.
    pub async fn drain(&self, executor: &Executor) -> Vec<ExecOutcome> {
        let mut outcomes = vec![];
        while let Some(d) = self.embedded.queue.receive().await.unwrap() {
            let item: WorkItem = serde_json::from_str(&d.body).unwrap();
            outcomes.push(executor.execute(&item).await.unwrap());
            assert!(self.embedded.queue.ack(&d.receipt).await.unwrap());
        }
        outcomes
    }

    /// What the agents said in `conversation`, oldest first.
    pub async fn replies(&self, conversation: &str) -> Vec<String> {
        let log = self.embedded.store.messages(&self.tenant, conversation, 100).await.unwrap();
        log.into_iter().filter(|m| m.sender == switchboard_engine::Sender::Agent).map(|m| m.text).collect()
    }

    /// The tenant's outbound events, oldest first.
    pub async fn events(&self) -> Vec<OutboundEvent> {
        self.embedded.store.events(&self.tenant, 0, 100).await.unwrap().into_iter().map(|(_, e)| e).collect()
    }

    /// The conversation's latest session.
    pub async fn session(&self, conversation: &str) -> Session {
        self.embedded.store.latest_session(&self.tenant, conversation).await.unwrap().unwrap()
    }

    /// Every session of the conversation.
    pub async fn sessions(&self, conversation: &str) -> Vec<Session> {
        self.embedded.store.sessions_for_conversation(&self.tenant, conversation).await.unwrap()
    }
}

/// Keeps every request the engine sent, and answers as the scripted test double.
pub struct Capturing {
    pub scripted: ScriptedModel,
    pub seen: std::sync::Mutex<Vec<switchboard_engine::ports::ModelRequest>>,
}

#[async_trait::async_trait]
impl Model for Capturing {
    async fn converse(
        &self,
        request: &switchboard_engine::ports::ModelRequest,
    ) -> Result<switchboard_engine::ports::ModelResponse, switchboard_engine::ports::ModelError> {
        self.seen.lock().unwrap().push(request.clone());
        self.scripted.converse(request).await
    }
}

/// The scripted test double following `script`, keeping what it is sent.
pub fn capturing(script: Value) -> Arc<Capturing> {
    Arc::new(Capturing {
        scripted: ScriptedModel::from_json(&script.to_string()).unwrap(),
        seen: std::sync::Mutex::default(),
    })
}

/// The record an execution wrote, new or found.
pub fn record(outcome: &ExecOutcome) -> &ExecutionRecord {
    match outcome {
        ExecOutcome::Recorded(r) | ExecOutcome::AlreadyRecorded(r) => r,
        other => panic!("expected a record, got {other:?}"),
    }
}
