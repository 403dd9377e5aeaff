//! Interrupted turns on the embedded profile: for an agent whose `bursts` is `interrupt`, a turn
//! that finds a newer message of its conversation queued — as it starts, or before the reply it
//! would send — stops there, says nothing, and the newer message's turn answers both. A message
//! arrives "during" a turn through a gate in the model: its first call waits until the test has
//! ingested the next message.

use std::sync::Arc;

use serde_json::{Value, json};
use switchboard_domain::message::ContentBlock;
use switchboard_domain::{ExecutionStatus, InboundEvent};
use switchboard_embedded::{EmbeddedOptions, replay};
use switchboard_engine::intake::source_id;
use switchboard_engine::ports::{ModelError, ModelRequest, ModelResponse};
use switchboard_engine::{ExecOutcome, ExecutionLog, Model, WorkItem};
use switchboard_testkit::ManualClock;
use tokio::sync::oneshot;

use crate::common::{Capturing, World, capturing, record};

const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";

fn bundle(bursts: Value) -> String {
    json!({
        "tenantId": "t-1", "name": "Interrupts",
        "agents": [{ "agentId": AGENT, "name": "Front", "systemPrompt": "Help.", "model": "test-model",
                     "tools": ["send_message", "set_context"], "bursts": bursts }],
        "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": AGENT,
                       "eventType": "message.new", "priority": 10, "conditions": {} }]
    })
    .to_string()
}

/// The model's script: an order number is remembered, then confirmed with the reply tool; any
/// other message is echoed as a final answer.
fn script() -> Value {
    json!({ "rules": [
        { "when": { "userText": { "contains": "order" } },
          "then": { "toolCalls": [{ "name": "set_context", "input": { "key": "order", "value": "1234" } }] } },
        { "when": { "afterTool": "set_context" },
          "then": { "toolCalls": [{ "name": "send_message", "input": { "text": "Noted your order." } }] } },
        { "when": {}, "then": { "text": "You said: {{userText}}" } }
    ] })
}

/// The scripted test double behind a gate: its first call tells the test it has begun, then
/// waits until the test lets it go on (or has dropped its side of the gate).
struct Gated {
    inner: Arc<Capturing>,
    gate: tokio::sync::Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

#[async_trait::async_trait]
impl Model for Gated {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let gate = self.gate.lock().await.take();
        if let Some((entered, proceed)) = gate {
            // A test that dropped its side of the gate lets every call through.
            let _ = entered.send(());
            let _ = proceed.await;
        }
        self.inner.converse(request).await
    }
}

/// The test's side of the gate: told when the first model call has begun; lets it go on.
struct Gate {
    entered: oneshot::Receiver<()>,
    proceed: oneshot::Sender<()>,
}

async fn world(bursts: Value) -> (World, Arc<Capturing>, Gate) {
    let (entered_tx, entered) = oneshot::channel();
    let (proceed, proceed_rx) = oneshot::channel();
    let model = capturing(script());
    let gated = Arc::new(Gated { inner: model.clone(), gate: tokio::sync::Mutex::new(Some((entered_tx, proceed_rx))) });
    let w = World::open(gated, ManualClock::new(), EmbeddedOptions::default(), &[&bundle(bursts)]).await;
    (w, model, Gate { entered, proceed })
}

/// Runs the conversation's first queued item while `next` arrives during its first model call;
/// what became of it (acknowledged).
async fn run_while_arriving(w: &World, gate: Gate, next: &InboundEvent) -> ExecOutcome {
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    let arrive = async {
        gate.entered.await.unwrap();
        w.embedded.ingest(next).await.unwrap();
        gate.proceed.send(()).unwrap();
    };
    let (outcome, ()) = tokio::join!(w.embedded.executor.execute(&item), arrive);
    assert!(w.embedded.queue.ack(&d.receipt).await.unwrap());
    outcome.unwrap()
}

/// The text blocks of the newest message a model call was sent.
fn last_texts(request: &ModelRequest) -> Vec<String> {
    let last = request.messages.last().unwrap();
    last.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_message_that_arrives_during_a_turn_stops_it_before_its_reply_and_one_turn_answers_both() {
    let (mut w, model, gate) = world(json!({ "mode": "interrupt" })).await;
    let first = w.event("c-1", "hi");
    w.embedded.ingest(&first).await.unwrap();
    let second = w.event("c-1", "are you there?");
    // when the second message arrives while the first one's model call runs
    let stopped = run_while_arriving(&w, gate, &second).await;
    // then the first turn said nothing and says why
    let stopped = record(&stopped).clone();
    assert_eq!(stopped.status, ExecutionStatus::Interrupted);
    assert_eq!(stopped.interrupted_by.as_ref().map(|b| b.message_id.as_str()), Some("m-2"));
    assert_eq!((stopped.model_calls.len(), stopped.actions.len()), (1, 0), "its model call is kept, no reply");
    assert!(w.replies("c-1").await.is_empty());
    let session = w.session("c-1").await;
    assert_eq!((session.turn_count, session.interrupted.len()), (0, 1), "its message waits for the next turn");
    // and the second message's turn answers both, once, seeing both messages in order
    let ran = w.drain(&w.embedded.executor).await;
    assert_eq!(ran.len(), 1);
    let turn = record(&ran[0]);
    assert_eq!((turn.status, turn.source_id.as_str()), (ExecutionStatus::Success, "message-c-1:m-2"));
    let answered: Vec<_> = turn.coalesced.iter().map(|c| c.message_id.as_str()).collect();
    assert_eq!(answered, ["m-1"]);
    assert_eq!(w.replies("c-1").await, ["You said: are you there?"], "one reply");
    let calls = model.seen.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(last_texts(&calls[1]), ["hi", "are you there?"], "one customer turn of both messages");
    let session = w.session("c-1").await;
    assert_eq!((session.turn_count, session.interrupted.len()), (1, 0));
    let own = w.embedded.store.execution_for_source(&w.tenant, &source_id(&first)).await.unwrap().unwrap();
    assert_eq!(own.execution_id, stopped.execution_id, "the first message keeps its own record");
    // and the turn that answered both replays the same; the interrupted one is refused, saying why
    let (store, tenant) = (&w.embedded.store, &w.tenant);
    let replay = |id| async move {
        let input = replay::gather(store, store, store, store, tenant, id).await.unwrap().unwrap();
        replay::replay(input).await
    };
    assert!(replay(turn.execution_id).await.unwrap().same, "the answering turn replays the same");
    let refused = replay(stopped.execution_id).await.unwrap_err();
    assert!(matches!(&refused, replay::ReplayError::Unreplayable(why) if why.contains("interrupted")), "{refused:?}");
}

#[tokio::test]
async fn a_turn_stopped_before_its_reply_tool_keeps_what_its_tools_did() {
    let (mut w, model, gate) = world(json!({ "mode": "interrupt" })).await;
    let first = w.event("c-1", "my order is 1234");
    w.embedded.ingest(&first).await.unwrap();
    let second = w.event("c-1", "are you there?");
    let stopped = run_while_arriving(&w, gate, &second).await;
    // then the turn remembered the order, and stopped at the reply tool without sending it
    let stopped = record(&stopped).clone();
    assert_eq!(stopped.status, ExecutionStatus::Interrupted);
    let tools: Vec<_> = stopped.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(tools, ["set_context"], "the reply tool never ran");
    assert_eq!(stopped.model_calls.len(), 2);
    let session = w.session("c-1").await;
    assert_eq!(session.memory.get("order"), Some(&json!("1234")), "its side effect is kept");
    // and no model call's answer that would have replied stays in the transcript
    let last = session.transcript.last().unwrap();
    assert!(last.content.iter().all(|b| matches!(b, ContentBlock::ToolResult { .. })), "{last:?}");
    let ran = w.drain(&w.embedded.executor).await;
    assert_eq!(record(&ran[0]).coalesced.len(), 1);
    assert_eq!(w.replies("c-1").await, ["You said: are you there?"]);
    let calls = model.seen.lock().unwrap().clone();
    // (a past turn's tool calls are not in the model's window, its customer's text is)
    assert_eq!(last_texts(&calls[2]), ["my order is 1234", "are you there?"], "both messages in one turn");
}

#[tokio::test]
async fn messages_queued_before_a_turn_starts_are_answered_by_the_last_within_max_messages() {
    let (mut w, model, gate) = world(json!({ "mode": "interrupt", "maxMessages": 2 })).await;
    drop(gate);
    for text in ["hi", "I need help", "with my order"] {
        let e = w.event("c-1", text);
        w.embedded.ingest(&e).await.unwrap();
    }
    // when the queue is worked, the first turn is interrupted as it starts, by the second
    let ran = w.drain(&w.embedded.executor).await;
    let statuses: Vec<_> = ran.iter().map(|r| record(r).status).collect();
    assert_eq!(statuses, [ExecutionStatus::Interrupted, ExecutionStatus::Success, ExecutionStatus::Success]);
    assert!(record(&ran[0]).model_calls.is_empty(), "nothing ran for it");
    // and a turn answers at most two messages, so the second is not interrupted by the third
    let sizes: Vec<_> = ran[1..].iter().map(|r| record(r).coalesced.len() + 1).collect();
    assert_eq!(sizes, [2, 1]);
    assert_eq!(w.replies("c-1").await.len(), 2);
    assert_eq!(model.seen.lock().unwrap().len(), 4, "one call for the second turn, three for the third");
}

#[tokio::test]
async fn without_the_setting_a_message_that_arrives_during_a_turn_waits_for_its_own() {
    let (mut w, _, gate) = world(json!({ "mode": "enqueue" })).await;
    let first = w.event("c-1", "hi");
    w.embedded.ingest(&first).await.unwrap();
    let second = w.event("c-1", "are you there?");
    let done = run_while_arriving(&w, gate, &second).await;
    assert_eq!(record(&done).status, ExecutionStatus::Success);
    w.drain(&w.embedded.executor).await;
    assert_eq!(w.replies("c-1").await, ["You said: hi", "You said: are you there?"]);
}
