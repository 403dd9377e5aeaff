//! What the model saw, on the embedded profile: every model call's request and answer in the
//! record, by reference to content kept once per session (so a long conversation does not write
//! its history again on every turn), read back as the model received it; the tenant's
//! `recording` setting (`full`, `redacted`, `off`); and content going with the tenant.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_domain::{ExecutionRecord, Recording, Tenant};
use switchboard_embedded::ScriptedModel;
use switchboard_engine::recorded::{self, CallContent};
use switchboard_engine::{ConfigAdmin, ConfigStore};

use crate::common::{World, capturing, record};

const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";

fn bundle(history: Value) -> String {
    json!({ "tenantId": "t-1", "name": "Test tenant",
        "agents": [ { "agentId": AGENT, "name": "Front", "systemPrompt": "You are the front agent.",
            "model": "test-model", "tools": ["send_message", "set_context", "get_context"],
            "maxTurns": 1000, "maxIterations": 4, "history": history } ],
        "triggers": [ { "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": AGENT,
            "eventType": "message.new", "priority": 10, "conditions": {} } ] })
    .to_string()
}

/// A memory write, then a reply that quotes the customer.
fn order_script() -> Value {
    json!({ "rules": [
        { "when": { "afterTool": "set_context" }, "then": { "text": "Noted: {{userText}}" } },
        { "then": { "toolCalls": [ { "name": "set_context", "input": { "key": "card", "value": "4111-secret" } } ] } }
    ] })
}

async fn set_recording(w: &World, recording: Recording) {
    let mut tenant: Tenant = w.embedded.store.get_tenant(&w.tenant).await.unwrap().unwrap();
    tenant.recording = recording;
    assert!(w.embedded.store.update_tenant(&tenant).await.unwrap());
}

async fn calls(w: &World, r: &ExecutionRecord) -> Vec<CallContent> {
    recorded::model_calls(&w.embedded.store, r).await.unwrap()
}

fn db(w: &World) -> rusqlite::Connection {
    rusqlite::Connection::open(w.dir.path().join("switchboard.db")).unwrap()
}

/// Bytes of recorded content kept for the tenant.
fn content_bytes(w: &World) -> u64 {
    db(w).query_row("SELECT coalesce(sum(length(body)), 0) FROM content", [], |r| r.get::<_, i64>(0)).unwrap() as u64
}

#[tokio::test]
async fn every_model_call_records_the_request_the_model_received_and_its_answer() {
    // given an agent that writes memory, then answers
    let model = capturing(order_script());
    let mut w = World::with_model(&bundle(json!({})), model.clone()).await;
    // when a customer writes
    let (_, outcomes) = w.say("c-1", "my card is 4111-secret").await;
    let r = record(&outcomes[0]);
    // then each of the two calls reads back exactly as the model port received it
    let seen = model.seen.lock().unwrap().clone();
    let calls = calls(&w, r).await;
    assert_eq!((seen.len(), calls.len(), r.model_calls.len()), (2, 2, 2));
    for (call, sent) in calls.iter().zip(&seen) {
        let request = call.request.as_ref().unwrap();
        assert_eq!(request.model, sent.model);
        assert_eq!(request.system.content, Some(json!(sent.system)));
        let messages: Vec<Value> = request.messages.iter().map(|m| m.content.clone().unwrap()).collect();
        assert_eq!(messages, serde_json::to_value(&sent.messages).unwrap().as_array().unwrap().clone());
        assert_eq!(request.tools.content, Some(serde_json::to_value(&sent.tools).unwrap()));
        assert_eq!(
            serde_json::from_value::<switchboard_domain::ModelConfig>(request.config.clone()).unwrap(),
            sent.config
        );
        assert!(request.messages.iter().all(|m| m.tokens > 0 && m.bytes > 0));
    }
    // and the answers are the model's: a tool call with its arguments, then the text
    let first = calls[0].response.as_ref().unwrap().message.content.clone().unwrap();
    assert_eq!(first["content"][0]["name"], "set_context");
    assert_eq!(first["content"][0]["input"]["value"], "4111-secret");
    let second = calls[1].response.as_ref().unwrap().message.content.clone().unwrap();
    assert_eq!(second["content"][0]["text"], "Noted: my card is 4111-secret");
    // the second call was sent the first call's answer and the tool's result after the question
    let history = &calls[1].request.as_ref().unwrap().messages;
    assert_eq!(history.len(), 3);
    assert_eq!(history[1].content, Some(first));
    assert_eq!(history[2].content.as_ref().unwrap()["content"][0]["type"], "toolResult");
    // and the system prompt and tools, the same for both calls, are kept once
    let (a, b) = (calls[0].request.as_ref().unwrap(), calls[1].request.as_ref().unwrap());
    assert_eq!((&a.system.sha256, &a.tools.sha256), (&b.system.sha256, &b.tools.sha256));
    let rows: i64 = db(&w).query_row("SELECT count(*) FROM content", [], |r| r.get(0)).unwrap();
    // system, tools, the question, the tool call, the tool result, the reply
    assert_eq!(rows, 6);
}

#[tokio::test]
async fn storage_per_turn_is_bounded_by_what_is_new_over_a_fifty_turn_conversation() {
    // given a window that holds the whole conversation, and messages of about 400 bytes
    let history = json!({ "maxMessages": 200, "maxTokens": 1000000, "summarizeAfter": 0 });
    let mut w =
        World::new(&bundle(history), json!({ "rules": [ { "then": { "text": "Got it: {{userText}}" } } ] })).await;
    let filler = "x".repeat(380);
    let (mut last_request_bytes, mut written) = (0u64, vec![]);
    for turn in 1..=50 {
        let before = content_bytes(&w);
        let text = format!("question {turn:02} {filler}");
        let (_, outcomes) = w.say("c-long", &text).await;
        let r = record(&outcomes[0]).clone();
        let new_content = content_bytes(&w) - before;
        let record_bytes = serde_json::to_string(&r).unwrap().len() as u64;
        // what this turn adds to the conversation: the question and the answer, as JSON
        let new_messages = (json!({"role": "user", "content": [{"type": "text", "text": text}]}).to_string().len()
            + json!({"role": "assistant", "content": [{"type": "text", "text": format!("Got it: {text}")}]})
                .to_string()
                .len()) as u64;
        let request = calls(&w, &r).await.remove(0).request.unwrap();
        last_request_bytes =
            request.system.bytes + request.tools.bytes + request.messages.iter().map(|m| m.bytes).sum::<u64>();
        if turn > 1 {
            // then content written is the turn's own messages, nothing of the history again
            assert_eq!(new_content, new_messages, "turn {turn}");
        }
        written.push(new_content + record_bytes);
    }
    // and the record's references grow with the window only (here ~100 messages at turn 50)
    let growth = written[49] - written[1];
    assert!(growth < 100 * 120, "references per message stay small: {growth} bytes more at turn 50 than at turn 2");
    // while the request sent at turn 50 is far larger than what that turn wrote
    assert!(last_request_bytes > 3 * written[49], "{last_request_bytes} vs {}", written[49]);
    let total: u64 = written.iter().sum();
    assert!(total < 50 * (written[49] + 1), "linear in the turns");
}

#[tokio::test]
async fn redacted_recording_keeps_the_shape_and_none_of_the_customers_words_or_tool_data() {
    // given a tenant that records redacted
    let mut w = World::with_model(&bundle(json!({})), capturing(order_script())).await;
    set_recording(&w, Recording::Redacted).await;
    // when a customer gives a card number that the agent writes to memory
    let (_, outcomes) = w.say("c-1", "my card is 4111-secret").await;
    let r = record(&outcomes[0]);
    // then neither the record nor the kept content holds it (the reply sent to the customer
    // quotes it, and stays in the record's actions: it was sent)
    let mut stored = serde_json::to_value(r).unwrap();
    stored["actions"] = json!([]);
    assert!(!stored.to_string().contains("4111"), "{stored:#}");
    let bodies: Vec<String> = {
        let conn = db(&w);
        let mut stmt = conn.prepare("SELECT body FROM content").unwrap();
        stmt.query_map([], |row| row.get::<_, Vec<u8>>(0))
            .unwrap()
            .map(|b| String::from_utf8(b.unwrap()).unwrap())
            .collect()
    };
    let secret_holders: Vec<&String> = bodies.iter().filter(|b| b.contains("4111")).collect();
    // only the model's own answer quotes it, as the reply did
    assert_eq!(secret_holders.len(), 1, "{secret_holders:?}");
    assert!(secret_holders[0].contains("\"role\":\"assistant\""));
    // and a redacted part says how long it was and what it hashes to
    let calls = calls(&w, r).await;
    let question = calls[0].request.as_ref().unwrap().messages[0].content.clone().unwrap();
    assert_eq!(question["content"][0]["text"]["redacted"]["bytes"], "my card is 4111-secret".len());
    assert!(calls[0].request.as_ref().unwrap().system.content.as_ref().unwrap()["redacted"]["sha256"].is_string());
    let call = calls[0].response.as_ref().unwrap().message.content.clone().unwrap();
    assert_eq!(call["content"][0]["name"], "set_context", "tool names stay");
    assert!(call["content"][0]["input"]["redacted"].is_object());
    assert!(r.tool_calls[0].input["redacted"].is_object() && r.input["text"]["redacted"].is_object());
}

#[tokio::test]
async fn recording_off_keeps_usage_and_nothing_of_the_conversation() {
    let mut w = World::with_model(&bundle(json!({})), capturing(order_script())).await;
    set_recording(&w, Recording::Off).await;
    let (_, outcomes) = w.say("c-1", "my card is 4111-secret").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.model_calls.len(), 2);
    assert!(r.model_calls.iter().all(|c| c.request.is_none() && c.response.is_none() && c.usage.input_tokens > 0));
    assert_eq!(content_bytes(&w), 0);
    assert!(calls(&w, r).await.iter().all(|c| c.request.is_none() && c.response.is_none()));
    // and the session keeps no bookkeeping of content
    assert!(w.session("c-1").await.stored_content.is_empty());
}

#[tokio::test]
async fn a_second_session_of_the_conversation_stores_its_own_content_and_a_tenant_takes_it_along() {
    let mut w = World::new(&bundle(json!({})), json!({ "rules": [ { "then": { "text": "Hi" } } ] })).await;
    let (_, first) = w.say("c-1", "hello").await;
    let (_, second) = w.say("c-2", "hello").await;
    // the same prompt in two sessions is kept for each (a session reads only its own)
    let (a, b) = (record(&first[0]), record(&second[0]));
    let sessions: BTreeSet<String> = {
        let conn = db(&w);
        let mut stmt = conn.prepare("SELECT DISTINCT session_id FROM content").unwrap();
        stmt.query_map([], |row| row.get::<_, String>(0)).unwrap().map(Result::unwrap).collect()
    };
    assert_eq!(sessions, BTreeSet::from([a.session_id.to_string(), b.session_id.to_string()]));
    assert!(calls(&w, b).await[0].request.as_ref().unwrap().system.content.is_some());
    // a record read under another session finds none of it
    let mut foreign = b.clone();
    foreign.session_id = switchboard_domain::SessionId::generate();
    assert!(calls(&w, &foreign).await[0].request.as_ref().unwrap().system.content.is_none());
    // and deleting the tenant deletes its content
    let mut tenant = w.embedded.store.get_tenant(&w.tenant).await.unwrap().unwrap();
    tenant.status = switchboard_domain::TenantStatus::Suspended;
    w.embedded.store.update_tenant(&tenant).await.unwrap();
    assert!(w.embedded.store.delete_tenant(&w.tenant).await.unwrap());
    assert_eq!(content_bytes(&w), 0);
}

// ---- replay ---------------------------------------------------------------------------------------

fn example(name: &str, file: &str) -> String {
    std::fs::read_to_string(format!("{}/../../examples/{name}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Runs example `name`'s conversation (its rounds, each drained) on the scripted model; every
/// execution that made a model call, in order.
async fn run_example(name: &str) -> (World, Vec<ExecutionRecord>) {
    let script = ScriptedModel::from_json(&example(name, "script.json")).unwrap();
    let mut w = World::with_model(&example(name, "tenant.json"), Arc::new(script)).await;
    let conversation: Value = serde_json::from_str(&example(name, "conversation.json")).unwrap();
    let mut records = Vec::new();
    for round in conversation["rounds"].as_array().unwrap() {
        for m in round.as_array().unwrap() {
            let e = w.event(m["conversationId"].as_str().unwrap(), m["text"].as_str().unwrap());
            w.embedded.ingest(&e).await.unwrap();
        }
        for outcome in w.drain(&w.embedded.executor.clone()).await {
            if let switchboard_engine::ExecOutcome::Recorded(r) = outcome
                && !r.model_calls.is_empty()
            {
                records.push(*r);
            }
        }
    }
    (w, records)
}

async fn replay_of(w: &World, r: &ExecutionRecord) -> switchboard_embedded::replay::Replay {
    let store = &w.embedded.store;
    let input = switchboard_embedded::replay::gather(store, store, store, store, &w.tenant, r.execution_id)
        .await
        .unwrap()
        .unwrap();
    switchboard_embedded::replay::replay(input).await.unwrap()
}

#[tokio::test]
async fn every_execution_of_the_demo_and_the_pattern_examples_replays_with_the_same_actions() {
    for name in ["support", "steps", "skills", "supervisor", "router", "fan-out"] {
        let (w, records) = run_example(name).await;
        assert!(!records.is_empty(), "{name} ran");
        for r in &records {
            let replay = replay_of(&w, r).await;
            assert!(replay.same, "{name}, execution {}: {:#?}", r.execution_id, replay.differences);
            assert_eq!(
                replay.recorded.model_calls,
                r.model_calls.len() + r.children.iter().map(|c| c.model_calls.len()).sum::<usize>()
            );
        }
    }
}

#[tokio::test]
async fn a_replay_calls_no_model_and_no_webhook_and_sends_nothing() {
    // given an execution that called a tool and replied
    let model = capturing(order_script());
    let mut w = World::with_model(&bundle(json!({})), model.clone()).await;
    let (_, outcomes) = w.say("c-1", "my card is 4111-secret").await;
    let r = record(&outcomes[0]).clone();
    let calls = model.seen.lock().unwrap().len();
    let (replies, rows) = (w.replies("c-1").await, count(&w, "executions"));
    // when it is replayed
    let replay = replay_of(&w, &r).await;
    // then it took the same actions, without asking the model, and nothing new is kept or sent
    assert!(replay.same, "{:#?}", replay.differences);
    assert_eq!(replay.replayed.tool_calls[0]["name"], "set_context");
    assert_eq!(replay.replayed.actions[0]["text"], "Noted: my card is 4111-secret");
    assert_eq!(model.seen.lock().unwrap().len(), calls, "no model call");
    assert_eq!(w.replies("c-1").await, replies, "no reply sent");
    assert_eq!(count(&w, "executions"), rows, "no record written");
}

fn count(w: &World, table: &str) -> i64 {
    db(w).query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_change_in_what_the_engine_does_is_reported_as_a_difference() {
    // given an execution whose agent wrote memory with set_context
    let (w, records) = run_example("support").await;
    let store = &w.embedded.store;
    let r = records.iter().find(|r| r.tool_calls.iter().any(|c| c.name == "set_context")).expect("a memory write");
    let mut input = switchboard_embedded::replay::gather(store, store, store, store, &w.tenant, r.execution_id)
        .await
        .unwrap()
        .unwrap();
    // when the engine no longer lets the agent call it (its tools no longer hold set_context)
    input.agent.tools.retain(|t| t != "set_context");
    let replay = switchboard_embedded::replay::replay(input).await.unwrap();
    // then the replay says so: the call is refused where it ran
    assert!(!replay.same);
    assert!(
        replay.differences.iter().any(|d| d.contains("tool call") && d.contains("\"isError\":true")),
        "{:#?}",
        replay.differences
    );
}

#[tokio::test]
async fn a_record_without_content_or_with_redacted_words_is_not_replayed_and_says_why() {
    for (recording, why) in [(Recording::Off, "recording was off"), (Recording::Redacted, "redacted")] {
        let mut w = World::with_model(&bundle(json!({})), capturing(order_script())).await;
        set_recording(&w, recording).await;
        let (_, outcomes) = w.say("c-1", "hello").await;
        let r = record(&outcomes[0]);
        let store = &w.embedded.store;
        let input = switchboard_embedded::replay::gather(store, store, store, store, &w.tenant, r.execution_id)
            .await
            .unwrap()
            .unwrap();
        let refused = switchboard_embedded::replay::replay(input).await.unwrap_err();
        assert!(refused.to_string().contains(why), "{refused}");
    }
}

/// The order system: every lookup answers shipped, and is counted.
#[derive(Default)]
struct OrderSystem(std::sync::atomic::AtomicUsize);

#[async_trait]
impl switchboard_engine::WebhookCaller for OrderSystem {
    async fn call(
        &self,
        _: &switchboard_engine::WebhookRequest,
    ) -> Result<switchboard_engine::WebhookResponse, switchboard_engine::WebhookError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(switchboard_engine::WebhookResponse {
            status: 200,
            body: br#"{"status":"shipped"}"#.to_vec(),
            truncated: false,
            attempts: 1,
            host: "orders.example".into(),
        })
    }
}

#[tokio::test]
async fn a_live_run_asks_the_model_again_and_shows_both_sides_answering_tools_from_the_record() {
    // given the support example's order lookup (set_context, then the order_status webhook, which
    // answered "shipped")
    let script = ScriptedModel::from_json(&example("support", "script.json")).unwrap();
    let orders = Arc::new(OrderSystem::default());
    let options = switchboard_embedded::EmbeddedOptions { webhooks: orders.clone(), ..Default::default() };
    let clock = Arc::new(switchboard_engine::SystemClock);
    let mut w = World::open(Arc::new(script), clock, options, &[&example("support", "tenant.json")]).await;
    let (_, outcomes) = w.say("c-1", "Where is my order #1234?").await;
    let r = record(&outcomes[0]).clone();
    assert!(r.tool_calls.iter().any(|c| c.name == "order_status" && !c.is_error), "{:?}", r.tool_calls);
    let store = &w.embedded.store;
    let gather = || switchboard_embedded::replay::gather(store, store, store, store, &w.tenant, r.execution_id);
    // when it runs live against a model that looks the order up, then another one, then hands the
    // customer to a person
    let model = capturing(json!({ "rules": [
        { "when": { "afterTool": "order_status" }, "then": { "toolCalls": [
            { "name": "order_status", "input": { "orderId": "9999" } },
            { "name": "handoff_to_human", "input": { "reason": "the parcel is late", "priority": "high" } } ] } },
        { "then": { "toolCalls": [ { "name": "order_status", "input": { "orderId": "1234" } } ] } }
    ] }));
    let live = switchboard_embedded::replay::Live { model: model.clone(), agent: None, model_ref: None };
    let report = switchboard_embedded::replay::replay_live(gather().await.unwrap().unwrap(), live).await.unwrap();
    // then the model was asked; the lookup the record has was answered from it, the other refused
    assert_eq!(model.seen.lock().unwrap().len(), 2);
    let calls = &report.live.actions.tool_calls;
    assert_eq!(calls[0], json!({ "name": "order_status", "input": { "orderId": "1234" }, "isError": false }));
    assert_eq!(calls[1], json!({ "name": "order_status", "input": { "orderId": "9999" }, "isError": true }));
    // and the two runs are side by side, with how they differ
    assert!(!report.same);
    assert_eq!(report.live.actions.actions[0]["type"], "handoff_to_human");
    assert_eq!(report.recorded.replies, ["Thanks! Order 1234 shipped yesterday and should arrive on Thursday."]);
    assert!(report.live.replies.is_empty() && report.live.tokens > 0);
    assert!(
        report.differences.iter().any(|d| d.starts_with("status: recorded success, replayed handed_off")),
        "{:#?}",
        report.differences
    );
    // a live run with another prompt and model reference changes what the model was sent
    let changed = w.embedded.store.get_agent(&w.tenant, r.agent_id).await.unwrap().unwrap();
    let agent = switchboard_domain::Agent { system_prompt: "You are terse.".into(), ..changed };
    let live = switchboard_embedded::replay::Live {
        model: model.clone(),
        agent: Some(agent),
        model_ref: Some("other-model".into()),
    };
    switchboard_embedded::replay::replay_live(gather().await.unwrap().unwrap(), live).await.unwrap();
    let seen = model.seen.lock().unwrap().clone();
    assert!(seen[2].system.starts_with("You are terse.") && seen[2].model == "other-model", "{}", seen[2].system);
    // and the order system was called once, by the turn itself: no live run called it
    assert_eq!(orders.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(w.replies("c-1").await.len(), 1, "and nothing more was sent");
}
