//! Approvals of risky tool calls on the embedded profile: a refund over 100 pauses its turn
//! (`awaiting_approval`, `approval.requested`) until an operator decides; approved with an edited
//! amount, the webhook receives that amount once and the turn goes on in the same execution;
//! denied, the model reads the reason and the webhook is never called; undecided, the approval
//! expires as a denial; a message meanwhile waits behind the paused turn and is answered after
//! it, in order; a restart while paused loses nothing. The refund tool answers from a script
//! (the webhook port; its HTTP caller is tested against loopback receivers elsewhere).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_domain::event::detail_type;
use switchboard_domain::message::ContentBlock;
use switchboard_domain::{ApprovalStatus, ExecutionStatus};
use switchboard_embedded::{Embedded, EmbeddedOptions};
use switchboard_engine::{
    Decision, ExecOutcome, ExecutionLog, OperatorError, WebhookCaller, WebhookError, WebhookRequest, WebhookResponse,
};
use switchboard_testkit::ManualClock;

use crate::common::{Capturing, World, capturing, record};

const FRONT: &str = "01JD0000FR0NT0AGENT0000001";
const REFUND: &str = "01JD0000APPR0VA1REFVND000A";

/// Answers every refund with `{"refunded": true}` and keeps each request's arguments.
#[derive(Default)]
struct Refunds(Mutex<Vec<Value>>);

impl Refunds {
    fn calls(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }
}

#[async_trait]
impl WebhookCaller for Refunds {
    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        self.0.lock().unwrap().push(body["arguments"].clone());
        Ok(WebhookResponse {
            status: 200,
            body: br#"{"refunded":true}"#.to_vec(),
            truncated: false,
            attempts: 1,
            host: "orders.example.com".into(),
        })
    }
}

/// A model that asks for a refund of `amount` when the customer says "refund", answers after
/// the tool, and otherwise says hello.
fn script(amount: f64) -> Value {
    json!({ "rules": [
        { "when": { "afterTool": "refund" }, "then": { "text": "Done with the refund." } },
        { "when": { "userText": { "contains": "refund" } },
          "then": { "toolCalls": [ { "name": "refund", "input": { "orderId": "1234", "amount": amount } } ] } },
        { "then": { "text": "Still here: {{userText}}" } }
    ] })
}

fn bundle() -> String {
    json!({
        "tenantId": "t-1", "name": "Test tenant",
        "tools": [{
            "toolId": REFUND, "name": "refund", "description": "Refunds an order",
            "parameters": { "type": "object", "properties": { "orderId": { "type": "string" }, "amount": { "type": "number", "maximum": 500 } },
                            "required": ["orderId", "amount"], "additionalProperties": false },
            "handler": { "type": "webhook", "url": "https://orders.example.com/refunds", "secretRef": "orders" },
            "approval": { "when": { "field": "amount", "operator": "gt", "value": 100 }, "timeoutSeconds": 3600 }
        }],
        "agents": [{
            "agentId": FRONT, "name": "Front", "systemPrompt": "You are the front agent.", "model": "test-model",
            "tools": ["send_message", REFUND], "maxIterations": 4
        }],
        "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": FRONT,
                       "eventType": "message.new", "priority": 1, "conditions": {} }]
    })
    .to_string()
}

struct Setup {
    w: World,
    refunds: Arc<Refunds>,
    model: Arc<Capturing>,
    clock: Arc<ManualClock>,
}

async fn setup(amount: f64) -> Setup {
    let refunds = Arc::new(Refunds::default());
    let model = capturing(script(amount));
    let clock = ManualClock::new();
    let options = EmbeddedOptions { webhooks: refunds.clone(), ..EmbeddedOptions::default() };
    let w = World::open(model.clone(), clock.clone(), options, &[&bundle()]).await;
    Setup { w, refunds, model, clock }
}

/// The approval the conversation's turn waits for.
async fn waiting(w: &World) -> switchboard_domain::Approval {
    let approvals = w.embedded.operator.approvals(&w.tenant).await.unwrap();
    assert_eq!(approvals.len(), 1, "one approval waits: {approvals:?}");
    approvals.into_iter().next().unwrap()
}

/// The tool results the model was last sent.
fn last_tool_results(model: &Capturing) -> Vec<Value> {
    let seen = model.seen.lock().unwrap();
    let last = seen.last().unwrap();
    last.messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

fn kinds(events: &[switchboard_domain::OutboundEvent]) -> Vec<&str> {
    events.iter().map(|e| e.detail_type.as_str()).collect()
}

#[tokio::test]
async fn a_refund_over_the_limit_waits_and_runs_once_with_the_amount_the_operator_approved() {
    let Setup { mut w, refunds, model, .. } = setup(250.0).await;
    // when the model asks to refund 250
    let (_, outcomes) = w.say("c-1", "please refund order 1234").await;
    // then the turn pauses before the call: nothing is refunded, nothing said yet
    let paused = record(&outcomes[0]).clone();
    assert_eq!(paused.status, ExecutionStatus::AwaitingApproval);
    assert!(refunds.calls().is_empty());
    assert!(w.replies("c-1").await.is_empty());
    let session = w.session("c-1").await;
    assert!(session.is_active() && session.paused.is_some());
    assert_eq!(session.turn_count, 0, "the turn is not over");
    // the approval is held by the server, bound to the call, and announced
    let approval = waiting(&w).await;
    assert_eq!((approval.tool.as_str(), approval.status), ("refund", ApprovalStatus::Pending));
    assert_eq!(approval.arguments, json!({ "orderId": "1234", "amount": 250.0 }));
    assert_eq!(approval.arguments_sha256, switchboard_domain::approval::arguments_sha256(&approval.arguments));
    assert_eq!(approval.execution_id, paused.execution_id);
    assert_eq!((approval.expires_at - approval.requested_at).num_seconds(), 3600);
    let requested = w.events().await;
    let requested: Vec<_> = requested.iter().filter(|e| e.detail_type == detail_type::APPROVAL_REQUESTED).collect();
    assert_eq!(requested.len(), 1);
    assert_eq!(requested[0].detail["approvalId"], approval.approval_id);
    assert_eq!(requested[0].detail["arguments"]["amount"], 250.0);
    // when an operator approves it with the amount edited down to 80
    let decision = Decision::Approve { arguments: Some(json!({ "orderId": "1234", "amount": 80 })) };
    let decided = w.embedded.operator.decide(&w.tenant, &approval.approval_id, "alice", decision).await.unwrap();
    assert_eq!((decided.status, decided.decided_by.as_deref()), (ApprovalStatus::Approved, Some("alice")));
    let outcomes = w.drain(&w.embedded.executor).await;
    // then the webhook receives the edited amount, once, and the turn ends in the same execution
    assert_eq!(refunds.calls(), [json!({ "orderId": "1234", "amount": 80 })]);
    let done = record(&outcomes[0]);
    assert_eq!((done.execution_id, done.status), (paused.execution_id, ExecutionStatus::Success));
    assert_eq!(done.approvals.len(), 1);
    assert_eq!(done.approvals[0].edited_arguments, Some(json!({ "orderId": "1234", "amount": 80 })));
    assert_eq!(done.tool_calls.len(), 1);
    assert_eq!(done.tool_calls[0].input["amount"], 80);
    assert_eq!(done.model_calls.len(), 2, "the call before the pause and the one after");
    assert_eq!(w.replies("c-1").await, ["Done with the refund."]);
    assert_eq!(last_tool_results(&model), [json!({ "refunded": true })]);
    // the record in the store is the completed one, under the message's source
    let stored = w.embedded.store.execution_for_source(&w.tenant, &paused.source_id).await.unwrap().unwrap();
    assert_eq!(stored.status, ExecutionStatus::Success);
    // the session goes on: one turn, the call and its result in the transcript, nothing paused
    let session = w.session("c-1").await;
    assert!(session.paused.is_none() && session.held.is_empty());
    assert_eq!(session.turn_count, 1);
    let results =
        session.transcript.iter().flat_map(|m| &m.content).filter(|b| matches!(b, ContentBlock::ToolResult { .. }));
    assert_eq!(results.count(), 1);
    let events = w.events().await;
    assert_eq!(kinds(&events), [detail_type::APPROVAL_REQUESTED, detail_type::APPROVAL_RESOLVED]);
    assert_eq!(events[1].detail["status"], "approved");
    assert_eq!(events[1].detail["decidedBy"], "alice");
    // the model calls are counted once: the day's usage holds both, not three
    let day = paused.usage_day();
    let usage = w.embedded.store.usage(&w.tenant, day, day).await.unwrap();
    assert_eq!(usage.iter().map(|u| u.counts.calls).sum::<u64>(), 2);
    let hours = w.embedded.store.activity(&w.tenant, paused.activity_hour(), paused.activity_hour()).await.unwrap();
    let counted: Vec<_> = hours.iter().map(|h| (h.status, h.executions)).collect();
    assert_eq!(counted, [(ExecutionStatus::Success, 1)], "the execution is counted once, as it ended");
    // and so do the metrics: one execution, as it ended, and each model call once
    let text = w.embedded.metrics.render(None, None);
    let sum = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    assert_eq!(sum("switchboard_model_calls_total"), 2.0, "{text}");
    assert_eq!(sum("switchboard_executions_total"), 1.0, "{text}");
    assert!(!text.contains("awaiting_approval"), "{text}");
    // the approval is spent: deciding it again finds nothing waiting, and the queue is empty
    let again = Decision::Approve { arguments: None };
    let spent = w.embedded.operator.decide(&w.tenant, &approval.approval_id, "alice", again).await;
    assert!(matches!(spent, Err(OperatorError::NoApproval(_))), "{spent:?}");
    assert!(w.drain(&w.embedded.executor).await.is_empty());
}

#[tokio::test]
async fn a_denial_is_fed_to_the_model_and_the_tool_never_runs() {
    let Setup { mut w, refunds, model, .. } = setup(250.0).await;
    w.say("c-1", "refund it").await;
    let approval = waiting(&w).await;
    let deny = Decision::Deny { reason: "over the customer's order value".into() };
    w.embedded.operator.decide(&w.tenant, &approval.approval_id, "bob", deny).await.unwrap();
    let outcomes = w.drain(&w.embedded.executor).await;
    assert!(refunds.calls().is_empty(), "a denied call never runs");
    let done = record(&outcomes[0]);
    assert_eq!(done.status, ExecutionStatus::Success);
    assert!(done.tool_calls[0].is_error);
    let results = last_tool_results(&model);
    assert_eq!(results.len(), 1, "the call has exactly one result");
    assert_eq!(results[0]["approval"], "denied");
    assert!(results[0]["error"].as_str().unwrap().contains("denied by bob: over the customer's order value"));
    assert_eq!(w.replies("c-1").await, ["Done with the refund."]);
    assert_eq!(done.approvals[0].status, ApprovalStatus::Denied);
}

#[tokio::test]
async fn a_refund_under_the_limit_runs_without_waiting() {
    let Setup { mut w, refunds, .. } = setup(40.0).await;
    let (_, outcomes) = w.say("c-1", "refund 40 please").await;
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::Success);
    assert_eq!(refunds.calls(), [json!({ "orderId": "1234", "amount": 40.0 })]);
    assert!(w.embedded.operator.approvals(&w.tenant).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_message_during_the_pause_is_answered_after_the_paused_turn_in_order() {
    let Setup { mut w, refunds, .. } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    // a second message while the turn waits: held, not answered
    let (_, outcomes) = w.say("c-1", "are you there?").await;
    assert!(matches!(outcomes[..], [ExecOutcome::Held]), "{outcomes:?}");
    let (_, outcomes) = w.say("c-1", "hello?").await;
    assert!(matches!(outcomes[..], [ExecOutcome::Held]), "{outcomes:?}");
    assert!(w.replies("c-1").await.is_empty());
    assert_eq!(w.session("c-1").await.held.len(), 2);
    // approved as asked: the paused turn ends first, then the held messages, in the order they came
    let approval = waiting(&w).await;
    let approve = Decision::Approve { arguments: None };
    w.embedded.operator.decide(&w.tenant, &approval.approval_id, "alice", approve).await.unwrap();
    w.drain(&w.embedded.executor).await;
    assert_eq!(refunds.calls().len(), 1);
    assert_eq!(w.replies("c-1").await, ["Done with the refund.", "Still here: are you there?", "Still here: hello?"]);
    let session = w.session("c-1").await;
    assert!(session.held.is_empty() && session.paused.is_none());
    assert_eq!(session.turn_count, 3);
    // each held message has its own record, after the paused one
    let executions = w.embedded.store.list_executions(&w.tenant, session.session_id, None, 10).await.unwrap();
    assert_eq!(executions.items.len(), 3);
    assert!(executions.items.iter().all(|e| e.status == ExecutionStatus::Success));
}

#[tokio::test]
async fn a_paused_turn_survives_a_restart() {
    let Setup { mut w, refunds, model, clock } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    let approval = waiting(&w).await;
    // the process goes away while the turn waits, and comes back on the same data
    let options = EmbeddedOptions { webhooks: refunds.clone(), ..EmbeddedOptions::default() };
    let reopened = Embedded::open(w.dir.path(), model.clone(), clock.clone(), options).unwrap();
    drop(std::mem::replace(&mut w.embedded, reopened));
    // the approval is still there, and deciding it resumes the turn
    assert_eq!(waiting(&w).await.approval_id, approval.approval_id);
    let approve = Decision::Approve { arguments: None };
    w.embedded.operator.decide(&w.tenant, &approval.approval_id, "alice", approve).await.unwrap();
    let outcomes = w.drain(&w.embedded.executor).await;
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::Success);
    assert_eq!(refunds.calls(), [json!({ "orderId": "1234", "amount": 250.0 })]);
}

#[tokio::test]
async fn a_decision_whose_resumption_was_lost_is_queued_again_by_the_sweep() {
    let Setup { mut w, refunds, clock, .. } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    let approval = waiting(&w).await;
    let approve = Decision::Approve { arguments: None };
    w.embedded.operator.decide(&w.tenant, &approval.approval_id, "alice", approve).await.unwrap();
    // the queued resumption is lost (taken, and gone as a dead letter would be)
    let lost = w.embedded.queue.receive().await.unwrap().unwrap();
    assert!(lost.body.contains(&approval.approval_id));
    assert!(w.embedded.queue.ack(&lost.receipt).await.unwrap());
    // a sweep within the grace leaves it; one after queues it again (past the queue's
    // deduplication window, which would take it for the first)
    assert_eq!(w.embedded.sweep_approvals().await.unwrap().requeued, 0);
    clock.advance(chrono::Duration::minutes(6));
    assert_eq!(w.embedded.sweep_approvals().await.unwrap().requeued, 1);
    w.drain(&w.embedded.executor).await;
    assert_eq!(refunds.calls().len(), 1);
    assert!(w.session("c-1").await.paused.is_none());
}

#[tokio::test]
async fn an_approval_nobody_decides_expires_as_a_denial() {
    let Setup { mut w, refunds, model, clock } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    let approval = waiting(&w).await;
    // an hour later (the tool's timeout), the sweep expires it and the turn resumes
    clock.advance(chrono::Duration::seconds(3599));
    assert_eq!(w.embedded.sweep_approvals().await.unwrap().expired, 0);
    clock.advance(chrono::Duration::seconds(1));
    assert_eq!(w.embedded.sweep_approvals().await.unwrap().expired, 1);
    let outcomes = w.drain(&w.embedded.executor).await;
    assert!(refunds.calls().is_empty());
    let done = record(&outcomes[0]);
    assert_eq!(done.approvals[0].status, ApprovalStatus::Expired);
    assert_eq!(done.approvals[0].decided_by.as_deref(), Some("system"));
    assert_eq!(last_tool_results(&model)[0]["approval"], "expired");
    // an operator arriving late finds nothing waiting
    let late =
        w.embedded.operator.decide(&w.tenant, &approval.approval_id, "alice", Decision::Approve { arguments: None });
    assert!(matches!(late.await, Err(OperatorError::NoApproval(_))));
}

#[tokio::test]
async fn a_late_decision_expires_the_approval_instead() {
    let Setup { mut w, refunds, clock, .. } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    let approval = waiting(&w).await;
    clock.advance(chrono::Duration::hours(2));
    // before any sweep: the approve comes too late and is refused, and the call counts as denied
    let late =
        w.embedded.operator.decide(&w.tenant, &approval.approval_id, "alice", Decision::Approve { arguments: None });
    let Err(OperatorError::NotAllowed(why)) = late.await else { panic!("a late approval is refused") };
    assert!(why.contains("expired"), "{why}");
    w.drain(&w.embedded.executor).await;
    assert!(refunds.calls().is_empty());
    assert_eq!(w.replies("c-1").await, ["Done with the refund."]);
}

#[tokio::test]
async fn a_decision_is_checked_and_given_once() {
    let Setup { mut w, refunds, clock, .. } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    let approval = waiting(&w).await;
    let operator = &w.embedded.operator;
    let decide = |who: &'static str, d: Decision| operator.decide(&w.tenant, &approval.approval_id, who, d);
    // edited arguments must meet the tool's schema, at their pointer
    let over = Decision::Approve { arguments: Some(json!({ "orderId": "1234", "amount": 900 })) };
    let Err(OperatorError::Invalid(errors)) = decide("alice", over).await else { panic!("over the maximum") };
    assert_eq!(errors.0[0].pointer, "/arguments/amount");
    let extra = Decision::Approve { arguments: Some(json!({ "orderId": "1234", "amount": 5, "to": "me" })) };
    assert!(matches!(decide("alice", extra).await, Err(OperatorError::Invalid(_))));
    let not_object = Decision::Approve { arguments: Some(json!([1])) };
    let Err(OperatorError::Invalid(errors)) = decide("alice", not_object).await else { panic!("an array") };
    assert_eq!(errors.0[0].pointer, "/arguments");
    // a denial needs a reason
    let Err(OperatorError::Invalid(errors)) = decide("alice", Decision::Deny { reason: " ".into() }).await else {
        panic!("a blank reason")
    };
    assert_eq!(errors.0[0].pointer, "/reason");
    // an unknown id, or another tenant's, finds nothing
    let unknown =
        operator.decide(&w.tenant, "01JD000000000000000000000Z", "alice", Decision::Approve { arguments: None });
    assert!(matches!(unknown.await, Err(OperatorError::NoApproval(_))));
    let other: switchboard_domain::TenantId = "t-2".parse().unwrap();
    let elsewhere = operator.decide(&other, &approval.approval_id, "mallory", Decision::Approve { arguments: None });
    assert!(matches!(elsewhere.await, Err(OperatorError::NoApproval(_))));
    // nothing refused was kept: still pending
    assert_eq!(waiting(&w).await.status, ApprovalStatus::Pending);
    // one decision wins; the same one again is answered alike, another is refused
    decide("alice", Decision::Deny { reason: "no".into() }).await.unwrap();
    let same = decide("alice", Decision::Deny { reason: "no".into() }).await.unwrap();
    assert_eq!(same.status, ApprovalStatus::Denied);
    let Err(OperatorError::NotAllowed(why)) = decide("bob", Decision::Approve { arguments: None }).await else {
        panic!("decided already")
    };
    assert!(why.contains("already denied by alice"), "{why}");
    clock.advance(chrono::Duration::seconds(1));
    w.drain(&w.embedded.executor).await;
    assert!(refunds.calls().is_empty());
}

#[tokio::test]
async fn a_system_tool_can_wait_for_approval_through_its_agent() {
    let refunds = Arc::new(Refunds::default());
    let script = json!({ "rules": [
        { "when": { "afterTool": "handoff_to_human" }, "then": { "text": "ok" } },
        { "then": { "toolCalls": [ { "name": "handoff_to_human", "input": { "reason": "angry customer" } } ] } }
    ] });
    let model = capturing(script);
    let mut bundle: Value = serde_json::from_str(&bundle()).unwrap();
    bundle["agents"][0]["tools"] = json!(["send_message", "handoff_to_human"]);
    bundle["agents"][0]["approvals"] = json!({ "handoff_to_human": {} });
    let options = EmbeddedOptions { webhooks: refunds, ..EmbeddedOptions::default() };
    let mut w = World::open(model, ManualClock::new(), options, &[&bundle.to_string()]).await;
    let (_, outcomes) = w.say("c-1", "I want a person").await;
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::AwaitingApproval);
    let approval = waiting(&w).await;
    assert_eq!(approval.tool, "handoff_to_human");
    w.embedded
        .operator
        .decide(&w.tenant, &approval.approval_id, "alice", Decision::Approve { arguments: None })
        .await
        .unwrap();
    let outcomes = w.drain(&w.embedded.executor).await;
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::HandedOff);
    assert!(w.session("c-1").await.is_human_owned());
}

#[tokio::test]
async fn messages_a_failure_left_held_run_before_the_next_one() {
    let Setup { mut w, .. } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    w.say("c-1", "first, held").await;
    // the paused turn resumed, but the process stopped before the held message ran: the
    // session holds it with no turn paused
    let approval = waiting(&w).await;
    let approve = Decision::Approve { arguments: None };
    w.embedded.operator.decide(&w.tenant, &approval.approval_id, "alice", approve).await.unwrap();
    let resume = w.embedded.queue.receive().await.unwrap().unwrap();
    let mut item: switchboard_engine::WorkItem = serde_json::from_str(&resume.body).unwrap();
    // (run without its held messages: an executor that is told of none, as after a crash)
    let mut session = w.session("c-1").await;
    let held = std::mem::take(&mut session.held);
    let expected = session.version;
    session.version += 1;
    let write = switchboard_engine::SessionWrite { session, expected_version: Some(expected) };
    switchboard_engine::SessionStore::write_session(&w.embedded.store, &write).await.unwrap();
    item.follow = false;
    w.embedded.executor.execute(&item).await.unwrap();
    assert!(w.embedded.queue.ack(&resume.receipt).await.unwrap());
    let mut session = w.session("c-1").await;
    let expected = session.version;
    session.held = held;
    session.version += 1;
    let write = switchboard_engine::SessionWrite { session, expected_version: Some(expected) };
    switchboard_engine::SessionStore::write_session(&w.embedded.store, &write).await.unwrap();
    assert_eq!(w.replies("c-1").await, ["Done with the refund."]);
    // when the next message comes, the one left held is answered first, then it
    let (_, outcomes) = w.say("c-1", "second").await;
    assert!(matches!(outcomes[..], [ExecOutcome::Held]), "{outcomes:?}");
    assert_eq!(w.replies("c-1").await, ["Done with the refund.", "Still here: first, held", "Still here: second"]);
    assert!(w.session("c-1").await.held.is_empty());
}

#[tokio::test]
async fn a_conversation_whose_turn_waits_is_not_handed_off_until_the_approval_is_decided() {
    let Setup { mut w, refunds, .. } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    let approval = waiting(&w).await;
    let session = w.session("c-1").await;
    let to = switchboard_engine::HandoffTo::Human(switchboard_domain::Priority::High);
    let refused = w.embedded.operator.hand_off(&w.tenant, session.session_id, to.clone(), "take it", "bob").await;
    let Err(OperatorError::NotAllowed(why)) = refused else { panic!("a paused turn's session is not handed off") };
    assert!(why.contains(&approval.approval_id) && why.contains("refund"), "{why}");
    // decided, resumed: then it may go
    let deny = Decision::Deny { reason: "a person will look".into() };
    w.embedded.operator.decide(&w.tenant, &approval.approval_id, "bob", deny).await.unwrap();
    w.drain(&w.embedded.executor).await;
    w.embedded.operator.hand_off(&w.tenant, session.session_id, to, "take it", "bob").await.unwrap();
    assert!(w.session("c-1").await.is_human_owned());
    assert!(refunds.calls().is_empty());
}

#[tokio::test]
async fn an_operator_cancels_a_paused_turn_and_a_person_gets_the_conversation_with_what_was_held() {
    let Setup { mut w, refunds, model, .. } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    let (_, outcomes) = w.say("c-1", "are you there?").await;
    assert!(matches!(outcomes[..], [ExecOutcome::Held]), "{outcomes:?}");
    let approval = waiting(&w).await;
    let session = w.session("c-1").await;
    let calls_before = model.seen.lock().unwrap().len();
    // when an operator cancels the turn
    let cancel = w.embedded.operator.cancel_turn(&w.tenant, session.session_id, "a person handles refunds", "carol");
    let switchboard_engine::TurnCancelled::Paused(cancelled) = cancel.await.unwrap() else {
        panic!("a paused turn is cancelled through its approval")
    };
    assert_eq!((cancelled.status, cancelled.decided_by.as_deref()), (ApprovalStatus::Cancelled, Some("carol")));
    let outcomes = w.drain(&w.embedded.executor).await;
    // then the call never runs, no model is asked again, and nothing is said to the customer
    assert!(refunds.calls().is_empty());
    assert_eq!(model.seen.lock().unwrap().len(), calls_before, "no model call after the cancellation");
    assert!(w.replies("c-1").await.is_empty());
    // the paused execution ends handed off, its call answered by the cancellation
    let done = record(&outcomes[0]);
    assert_eq!((done.execution_id, done.status), (approval.execution_id, ExecutionStatus::HandedOff));
    assert_eq!(done.approvals[0].status, ApprovalStatus::Cancelled);
    assert!(done.tool_calls[0].is_error && done.tool_calls[0].output["approval"] == "cancelled");
    // a person owns the conversation, with the reason; the transcript holds the call's result
    let session = w.session("c-1").await;
    assert!(session.is_human_owned() && session.paused.is_none() && session.held.is_empty());
    let reason = session.handoff_reason.as_deref().unwrap();
    assert!(reason.contains("carol") && reason.contains("a person handles refunds"), "{reason}");
    let results =
        session.transcript.iter().flat_map(|m| &m.content).filter(|b| matches!(b, ContentBlock::ToolResult { .. }));
    assert_eq!(results.count(), 1);
    // the held message went through to the person, not to the agent: recorded as skipped
    let executions = w.embedded.store.list_executions(&w.tenant, session.session_id, None, 10).await.unwrap();
    let statuses: Vec<_> = executions.items.iter().map(|e| e.status).collect();
    assert_eq!(statuses, [ExecutionStatus::HandedOff, ExecutionStatus::Skipped]);
    let events = w.events().await;
    let resolved = events.iter().find(|e| e.detail_type == detail_type::APPROVAL_RESOLVED).unwrap();
    assert_eq!(resolved.detail["status"], "cancelled");
    let handoff = events.iter().find(|e| e.detail_type == detail_type::HANDOFF_HUMAN).unwrap();
    assert_eq!((&handoff.detail["requestedBy"], &handoff.detail["principal"]), (&json!("api"), &json!("carol")));
    // and there is no agent's turn left to cancel
    let again = w.embedded.operator.cancel_turn(&w.tenant, session.session_id, "again", "carol").await;
    assert!(matches!(again, Err(OperatorError::NotAllowed(_))), "{again:?}");
}

#[tokio::test]
async fn cancelling_an_agents_turn_that_does_not_wait_hands_the_conversation_over_at_once() {
    let Setup { mut w, .. } = setup(40.0).await;
    w.say("c-1", "hello").await;
    let session = w.session("c-1").await;
    let cancel = w.embedded.operator.cancel_turn(&w.tenant, session.session_id, "a person takes over", "carol");
    let switchboard_engine::TurnCancelled::HandedOff(done) = cancel.await.unwrap() else {
        panic!("nothing waited: the session is handed over")
    };
    assert_eq!(done.execution.status, ExecutionStatus::HandedOff);
    assert!(w.session("c-1").await.is_human_owned());
    // a blank reason is refused at its field, like a denial's
    let approval = setup(250.0).await;
    let mut w2 = approval.w;
    w2.say("c-2", "refund order 1234").await;
    let paused = w2.session("c-2").await;
    let blank = w2.embedded.operator.cancel_turn(&w2.tenant, paused.session_id, " ", "carol").await;
    let Err(OperatorError::Invalid(errors)) = blank else { panic!("a blank reason is refused: {blank:?}") };
    assert_eq!(errors.0[0].pointer, "/reason");
    assert_eq!(waiting(&w2).await.status, ApprovalStatus::Pending, "nothing decided");
}

#[tokio::test]
async fn a_conversation_holds_at_most_fifty_messages_behind_a_paused_turn() {
    let Setup { mut w, .. } = setup(250.0).await;
    w.say("c-1", "refund order 1234").await;
    // fifty already wait
    let mut session = w.session("c-1").await;
    let expected = session.version;
    session.held = (0..switchboard_domain::approval::MAX_HELD_MESSAGES)
        .map(|i| switchboard_domain::HeldMessage { source_id: format!("held-{i}"), item: json!({}) })
        .collect();
    session.version += 1;
    let write = switchboard_engine::SessionWrite { session, expected_version: Some(expected) };
    switchboard_engine::SessionStore::write_session(&w.embedded.store, &write).await.unwrap();
    // the next is refused to its queue, to come again, and nothing is held for it
    let event = w.event("c-1", "one too many");
    w.embedded.ingest(&event).await.unwrap();
    let delivery = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: switchboard_engine::WorkItem = serde_json::from_str(&delivery.body).unwrap();
    let refused = w.embedded.executor.execute(&item).await.unwrap_err();
    assert!(refused.retryable && refused.message.contains("50 messages"), "{refused:?}");
    assert_eq!(w.session("c-1").await.held.len(), 50);
}

/// The scripted model, which holds its next answer once told to: it says when a call has come
/// in, and answers when the test lets it (the test acts while the turn waits on the model).
struct Holding {
    inner: Arc<Capturing>,
    hold: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[async_trait]
impl switchboard_engine::Model for Holding {
    async fn converse(
        &self,
        request: &switchboard_engine::ModelRequest,
    ) -> Result<switchboard_engine::ModelResponse, switchboard_engine::ModelError> {
        if self.hold.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
        self.inner.converse(request).await
    }
}

#[tokio::test]
async fn a_turn_running_when_its_conversation_is_cancelled_says_and_does_nothing_more() {
    let refunds = Arc::new(Refunds::default());
    let model = Arc::new(Holding {
        inner: capturing(script(40.0)),
        hold: false.into(),
        entered: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let options = EmbeddedOptions { webhooks: refunds.clone(), ..EmbeddedOptions::default() };
    let mut w = World::open(model.clone(), ManualClock::new(), options, &[&bundle()]).await;
    for conversation in ["c-tool", "c-text"] {
        w.say(conversation, "hello").await;
    }
    assert_eq!(w.replies("c-tool").await, ["Still here: hello"]);
    // each conversation's next turn is running, its model call not answered yet, when an
    // operator cancels the turn: the model then asks for a refund in one, answers in the other
    for (conversation, text) in [("c-tool", "refund 40 please"), ("c-text", "how are you")] {
        let session = w.session(conversation).await;
        let event = w.event(conversation, text);
        w.embedded.ingest(&event).await.unwrap();
        let queued = w.embedded.queue.receive().await.unwrap().unwrap();
        let item: switchboard_engine::WorkItem = serde_json::from_str(&queued.body).unwrap();
        model.hold.store(true, std::sync::atomic::Ordering::SeqCst);
        let executor = w.embedded.executor.clone();
        let turn = tokio::spawn(async move { executor.execute(&item).await });
        model.entered.notified().await;
        let cancel = w.embedded.operator.cancel_turn(&w.tenant, session.session_id, "a person takes it", "carol");
        assert!(matches!(cancel.await.unwrap(), switchboard_engine::TurnCancelled::HandedOff(_)));
        model.release.notify_one();
        // then the turn stops before its tool call or reply, and runs again into the person's
        // conversation: recorded as skipped, nothing said, nothing refunded
        let outcome = turn.await.unwrap().unwrap();
        assert_eq!(record(&outcome).status, ExecutionStatus::Skipped, "{conversation}");
        assert!(w.embedded.queue.ack(&queued.receipt).await.unwrap());
        assert_eq!(w.replies(conversation).await, ["Still here: hello"], "{conversation}");
        assert!(w.session(conversation).await.is_human_owned());
    }
    assert!(refunds.calls().is_empty(), "the refund asked for after the cancellation never ran");
}
