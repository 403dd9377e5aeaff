//! An agent's hooks on the embedded profile: a PII-redaction hook changes what the model is sent
//! (seen at the model), a blocking hook stops the turn before a refund runs, a hook that times
//! out follows its `onError`, and the other points change a tool's result and the answer's text
//! or observe the turn's end. Hooks and the refund tool answer from a script here (the webhook
//! port is the one tools use; its HTTP caller is tested on its own against loopback receivers).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_domain::hook::{HookOutcome, HookPoint};
use switchboard_domain::message::ContentBlock;
use switchboard_domain::{ErrorKind, ExecutionStatus, SessionStatus};
use switchboard_embedded::EmbeddedOptions;
use switchboard_engine::{SystemClock, WebhookCaller, WebhookError, WebhookRequest, WebhookResponse};

use crate::common::{Capturing, World, capturing, record};

const FRONT: &str = "01JD0000FR0NT0AGENT0000001";
const REFUND: &str = "01JD0000H00KS00REFVND0000A";

/// Answers every webhook (tools and hooks alike) by its name — `refund`, `hook:before_model`,
/// … — and keeps each request.
struct Scripted {
    answers: Vec<(&'static str, Result<WebhookResponse, WebhookError>)>,
    seen: Mutex<Vec<WebhookRequest>>,
}

impl Scripted {
    fn calls(&self, name: &str) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|r| r.tool_name == name).map(|r| serde_json::from_slice(&r.body).unwrap()).collect()
    }
}

#[async_trait]
impl WebhookCaller for Scripted {
    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        self.seen.lock().unwrap().push(request.clone());
        let answer = self.answers.iter().find(|(name, _)| *name == request.tool_name).map(|(_, a)| a.clone());
        answer.unwrap_or_else(|| Ok(http(200, "{}")))
    }
}

fn http(status: u16, body: &str) -> WebhookResponse {
    WebhookResponse {
        status,
        body: body.as_bytes().to_vec(),
        truncated: false,
        attempts: 1,
        host: "hooks.example.com".into(),
    }
}

/// The texts of every message the model was sent, call by call.
fn texts_sent(model: &Capturing) -> Vec<String> {
    let requests = model.seen.lock().unwrap();
    requests
        .iter()
        .flat_map(|r| &r.messages)
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// A world whose agent may call the `refund` webhook tool and has `hooks`, answered by
/// `answers`, with a model following `script`.
async fn world(
    hooks: Value,
    answers: Vec<(&'static str, Result<WebhookResponse, WebhookError>)>,
    script: Value,
) -> (World, Arc<Scripted>, Arc<Capturing>) {
    let webhooks = Arc::new(Scripted { answers, seen: Mutex::default() });
    let model = capturing(script);
    let options = EmbeddedOptions { webhooks: webhooks.clone(), ..EmbeddedOptions::default() };
    let bundle = json!({
        "tenantId": "t-1", "name": "Test tenant",
        "tools": [{
            "toolId": REFUND, "name": "refund", "description": "Refunds an order",
            "parameters": { "type": "object", "properties": { "orderId": { "type": "string" }, "amount": { "type": "number" } },
                            "required": ["orderId", "amount"], "additionalProperties": false },
            "handler": { "type": "webhook", "url": "https://orders.example.com/refunds", "secretRef": "orders" }
        }],
        "agents": [{
            "agentId": FRONT, "name": "Front", "systemPrompt": "You are the front agent.", "model": "test-model",
            "tools": ["send_message", "handoff_to_human", REFUND], "maxIterations": 4, "hooks": hooks
        }],
        "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": FRONT,
                       "eventType": "message.new", "priority": 1, "conditions": {} }]
    });
    let w = World::open(model.clone(), Arc::new(SystemClock), options, &[&bundle.to_string()]).await;
    (w, webhooks, model)
}

fn hook(at: &str, extra: Value) -> Value {
    let mut h =
        json!({ "at": at, "handler": { "url": format!("https://hooks.example.com/{at}"), "secretRef": "hooks" } });
    if let (Some(h), Value::Object(extra)) = (h.as_object_mut(), extra) {
        h.extend(extra);
    }
    h
}

/// A model that asks for a refund, then says it is done.
fn refunds(amount: f64) -> Value {
    json!({ "rules": [
        { "when": { "afterTool": "refund" }, "then": { "text": "Your refund is on its way." } },
        { "then": { "toolCalls": [ { "name": "refund", "input": { "orderId": "1234", "amount": amount } } ] } }
    ] })
}

#[tokio::test]
async fn a_redaction_hook_changes_what_the_model_is_sent() {
    // given a before_model hook that replaces the customer's e-mail address before the model sees it
    let redacted = json!({ "messages": [ { "role": "user", "content": [ { "type": "text", "text": "My address is [email]" } ] } ] });
    let answers = vec![("hook:before_model", Ok(http(200, &redacted.to_string())))];
    let script = json!({ "rules": [ { "then": { "text": "Thanks, noted." } } ] });
    let (mut w, hooks, model) = world(json!([hook("before_model", json!({}))]), answers, script).await;
    // when the customer writes it
    let (_, outcomes) = w.say("c-1", "My address is ana@example.com").await;
    // then the model never saw the address, and the record says the hook changed the request
    let sent = texts_sent(&model);
    assert_eq!(sent, ["My address is [email]"]);
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    assert_eq!(r.hook_calls.len(), 1);
    assert_eq!((r.hook_calls[0].at, r.hook_calls[0].outcome), (HookPoint::BeforeModel, HookOutcome::Changed));
    // the hook was shown the request as it was, under the turn's stable key
    let call = &hooks.calls("hook:before_model")[0];
    assert_eq!(call["hook"], "before_model");
    assert!(call["request"]["messages"].to_string().contains("ana@example.com"));
    assert_eq!(call["idempotencyKey"], format!("{}/hook/0", r.source_id));
    assert_eq!(w.replies("c-1").await, ["Thanks, noted."]);
    // a replay could not repeat what the hook answered (the record does not keep it): refused
    let store = &w.embedded.store;
    let input = switchboard_embedded::replay::gather(store, store, store, store, &w.tenant, r.execution_id)
        .await
        .unwrap()
        .unwrap();
    let refused = switchboard_embedded::replay::replay(input).await.unwrap_err();
    assert!(
        matches!(&refused, switchboard_embedded::replay::ReplayError::Unreplayable(why) if why.contains("hook")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_blocking_hook_stops_the_turn_before_the_refund_runs() {
    // given a before_tool hook on refunds that blocks one over 100
    let stop = json!({ "action": "stop", "reason": "refunds over 100 need a person" });
    let answers = vec![("hook:before_tool", Ok(http(200, &stop.to_string())))];
    let hooks_config = json!([hook("before_tool", json!({ "tools": ["refund"] }))]);
    let (mut w, hooks, _) = world(hooks_config, answers, refunds(250.0)).await;
    // when the model asks for a refund of 250
    let (_, outcomes) = w.say("c-1", "Refund order 1234 please").await;
    // then the refund webhook is never called, the turn stops with the hook's reason, and the
    // agent's onFailure (the default: a person) takes the conversation
    assert!(hooks.calls("refund").is_empty());
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Failed);
    let error = r.error.as_ref().unwrap();
    assert_eq!((error.kind, error.reason.as_deref()), (ErrorKind::Hook, Some("hook")));
    assert!(error.message.contains("refunds over 100 need a person"), "{}", error.message);
    assert_eq!(r.hook_calls[0].outcome, HookOutcome::Stopped);
    assert_eq!(
        r.hook_calls[0].tool_use_id.as_deref(),
        hooks.calls("hook:before_tool")[0]["toolCall"]["toolUseId"].as_str()
    );
    assert_eq!(hooks.calls("hook:before_tool")[0]["toolCall"]["arguments"]["amount"], json!(250.0));
    let s = w.session("c-1").await;
    assert_eq!(s.status, SessionStatus::HandedOff);
    // and the transcript answers the tool call it did not run, so the next model call is valid
    let results: Vec<&Value> = s
        .transcript
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1);
    assert!(results[0]["error"].as_str().unwrap().starts_with("not run:"), "{}", results[0]);
}

#[tokio::test]
async fn a_hook_changes_the_arguments_and_the_refund_receives_the_change_once() {
    // given a before_tool hook that caps refunds at 100
    let capped = json!({ "arguments": { "orderId": "1234", "amount": 100 } });
    let answers = vec![
        ("hook:before_tool", Ok(http(200, &capped.to_string()))),
        ("refund", Ok(http(200, r#"{"refunded":100}"#))),
    ];
    let (mut w, hooks, _) = world(json!([hook("before_tool", json!({}))]), answers, refunds(250.0)).await;
    let (_, outcomes) = w.say("c-1", "Refund order 1234 please").await;
    // then the tool got the hook's arguments, once, and the turn went on
    let sent = hooks.calls("refund");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["arguments"], json!({ "orderId": "1234", "amount": 100 }));
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    assert_eq!(r.hook_calls[0].outcome, HookOutcome::Changed);
}

#[tokio::test]
async fn a_hook_that_times_out_follows_its_on_error() {
    let timeout = || Err(WebhookError::Timeout { attempts: 3 });
    // given a before_model hook that never answers in time: with onError continue (the default)
    let (mut w, _, model) =
        world(json!([hook("before_model", json!({}))]), vec![("hook:before_model", timeout())], refunds(10.0)).await;
    let (_, outcomes) = w.say("c-1", "Refund order 1234 please").await;
    // the turn goes on as if it had said continue, and the record says it failed
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    assert!(r.hook_calls.iter().all(|h| h.outcome == HookOutcome::Failed), "{:?}", r.hook_calls);
    assert!(r.hook_calls[0].detail.as_deref().unwrap().contains("could not be called"), "{:?}", r.hook_calls);
    assert!(!model.seen.lock().unwrap().is_empty());
    // with onError stop, the turn stops before the model is called
    let stop = hook("before_model", json!({ "onError": "stop" }));
    let (mut w, _, model) = world(json!([stop]), vec![("hook:before_model", timeout())], refunds(10.0)).await;
    let (_, outcomes) = w.say("c-1", "Refund order 1234 please").await;
    let r = record(&outcomes[0]);
    assert_eq!((r.status, r.error.as_ref().unwrap().kind), (ExecutionStatus::Failed, ErrorKind::Hook));
    assert!(r.error.as_ref().unwrap().message.contains("onError is stop"), "{:?}", r.error);
    assert!(model.seen.lock().unwrap().is_empty(), "no model call after the stop");
    assert_eq!(w.session("c-1").await.status, SessionStatus::HandedOff);
}

#[tokio::test]
async fn hooks_change_a_tools_result_and_the_answers_text_and_observe_the_turns_end() {
    // given hooks after the tool (hiding an internal field), after the model (adding a
    // sign-off) and at the turn's end (observing)
    let answers = vec![
        ("refund", Ok(http(200, r#"{"refunded":10,"internalNote":"do not show"}"#))),
        ("hook:after_tool", Ok(http(200, r#"{"result":{"refunded":10}}"#))),
        ("hook:after_model", Ok(http(200, ""))),
        ("hook:turn_end", Ok(http(200, r#"{"action":"stop","reason":"too late"}"#))),
    ];
    let config = json!([hook("after_tool", json!({})), hook("after_model", json!({})), hook("turn_end", json!({}))]);
    let (mut w, hooks, model) = world(config, answers, refunds(10.0)).await;
    let (_, outcomes) = w.say("c-1", "Refund order 1234 please").await;
    // then the model read the changed result, and the record kept what the tool answered
    let requests = model.seen.lock().unwrap().clone();
    let read = requests[1].messages.last().unwrap().content[0].clone();
    let ContentBlock::ToolResult { content, .. } = read else { panic!("{read:?}") };
    assert_eq!(content, json!({ "refunded": 10 }));
    let r = record(&outcomes[0]);
    assert_eq!(r.tool_calls[0].output["internalNote"], "do not show");
    // after_model ran for both answers and changed nothing (an empty answer)
    let after_model: Vec<_> = r.hook_calls.iter().filter(|h| h.at == HookPoint::AfterModel).collect();
    assert_eq!(after_model.len(), 2);
    assert!(after_model.iter().all(|h| h.outcome == HookOutcome::Continued));
    // turn_end saw the decided turn; its stop is recorded as a failure, not obeyed
    let ended = &hooks.calls("hook:turn_end")[0];
    assert_eq!(ended["turn"]["status"], "success");
    assert_eq!(ended["turn"]["actions"][0]["type"], "reply");
    let end = r.hook_calls.last().unwrap();
    assert_eq!((end.at, end.outcome), (HookPoint::TurnEnd, HookOutcome::Failed));
    assert_eq!(r.status, ExecutionStatus::Success);
    assert_eq!(w.replies("c-1").await, ["Your refund is on its way."]);
}

#[tokio::test]
async fn an_after_model_hook_rewords_the_reply_and_a_change_it_may_not_make_follows_on_error() {
    let reworded = json!({ "text": "Your refund is on its way. — Acme" });
    let (mut w, _, _) = world(
        json!([hook("after_model", json!({}))]),
        vec![("hook:after_model", Ok(http(200, &reworded.to_string())))],
        json!({ "rules": [ { "then": { "text": "Your refund is on its way." } } ] }),
    )
    .await;
    w.say("c-1", "Where is my refund?").await;
    assert_eq!(w.replies("c-1").await, ["Your refund is on its way. — Acme"]);
    // a before_model hook that drops a message is refused: the model is sent the request as it was
    let dropped = json!({ "messages": [] });
    let (mut w, _, model) = world(
        json!([hook("before_model", json!({}))]),
        vec![("hook:before_model", Ok(http(200, &dropped.to_string())))],
        json!({ "rules": [ { "then": { "text": "Hello." } } ] }),
    )
    .await;
    let (_, outcomes) = w.say("c-1", "Hi there").await;
    assert_eq!(texts_sent(&model), ["Hi there"]);
    let r = record(&outcomes[0]);
    assert_eq!(r.hook_calls[0].outcome, HookOutcome::Failed);
    assert!(r.hook_calls[0].detail.as_deref().unwrap().contains("must keep all 1 messages"), "{:?}", r.hook_calls);
}
