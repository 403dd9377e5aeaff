//! Approvals of risky tool calls on the AWS profile: the executor pauses a refund over 100
//! (the paused turn in the session item in DynamoDB, on the sparse `SessionsAwaitingApproval`
//! index), the operations-api function lists and decides it for the IAM principal API Gateway
//! admitted, the decision queues the turn's resumption on the conversation's FIFO group, and the
//! executor resumes it on the same execution — the webhook (a loopback receiver, signed with the
//! tenant's secret from Secrets Manager) runs once with the amount approved, or never when the
//! call is denied. The event-router's scheduled tick expires an undecided approval and queues
//! again a resumption that was lost. A message arriving meanwhile is held and answered after the
//! paused turn, in order.

use std::sync::Arc;

use serde_json::{Value, json};
use switchboard_domain::ApprovalStatus;
use switchboard_engine::{Decision, Deps, Enqueued, Operator, OperatorError, QueueError, Swept, WorkItem, WorkQueue};
use switchboard_lambda::event_router::{EventRouter, Handled, Tick};
use switchboard_testkit::ManualClock;

use super::*;

const REFUND: &str = "01JD0000APPR0VA1REFVND000A";

/// The model's first answer: refund 250 on order 1234.
fn refund_250() -> Reply {
    Reply::tool_use("tu-1", "refund", json!({ "orderId": "1234", "amount": 250 }))
}

/// The world of [`world_with`] with webhooks to loopback, the engine's time from a manual clock,
/// and a refund tool at a receiver answering `{"refunded": true}`, signed with the tenant's
/// secret; calls over 100 wait an hour for a person. The agent is given it, and the customer's
/// first message ("I need help with my order", conversation `c-1`) is routed.
async fn refund_world(script: Vec<Reply>) -> (World, WebhookReceiver, Arc<ManualClock>) {
    let mut w = world_with(script, Options { webhooks: LOCAL_WEBHOOKS, ..Options::default() }).await;
    let clock = ManualClock::new();
    w.wiring = w.wiring.clone().with_clock(clock.clone());
    let receiver = WebhookReceiver::answering("/refunds", SECRET, |_| json!({ "refunded": true })).await;
    let secret_ref = tenant_secret(&w).await;
    let tool: Tool = serde_json::from_value(json!({
        "tenantId": "t-1", "toolId": REFUND, "name": "refund", "description": "Refunds an order",
        "parameters": { "type": "object", "required": ["orderId", "amount"], "additionalProperties": false,
                        "properties": { "orderId": { "type": "string" }, "amount": { "type": "number", "maximum": 500 } } },
        "handler": { "type": "webhook", "url": receiver.url, "secretRef": secret_ref, "timeoutMs": 5000,
                     "retryPolicy": { "maxRetries": 0, "backoffMs": 0 } },
        "approval": { "when": { "field": "amount", "operator": "gt", "value": 100 }, "timeoutSeconds": 3600 },
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    put(&w.wiring, ConfigRecord::Tool(tool)).await;
    let agent: Agent = serde_json::from_value(json!({
        "tenantId": "t-1", "agentId": AGENT, "name": "Refunds", "systemPrompt": "You refund orders.",
        "model": "anthropic.claude-3-haiku-20240307-v1:0", "tools": ["send_message", REFUND],
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    put(&w.wiring, ConfigRecord::Agent(agent)).await;
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    (w, receiver, clock)
}

/// The IAM user of the API Gateway fixture: who decides.
fn operator_arn() -> Value {
    fixture("apigw-rest-get-agent.json")["requestContext"]["identity"]["userArn"].clone()
}

/// `method path` as API Gateway hands it to the operations-api function (its half of the API
/// only), signed by the fixture's IAM user.
async fn ops_call(w: &World, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let app = switchboard_api::operations_api(api::state(&w.wiring, None));
    let app = app.map_request(api::strip_stage as fn(lambda_http::Request) -> lambda_http::Request);
    let response = app.oneshot(iam_request(method, path, body)).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Runs the next work item; it must succeed.
async fn run_next(w: &World) {
    let (_, response) = poll_once(w).await.expect("a work item is queued");
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
}

/// The one approval the tenant's paused turn waits for, from the operations API.
async fn waiting(w: &World) -> Value {
    let (status, list) = ops_call(w, "GET", "/tenants/t-1/approvals", None).await;
    assert_eq!(status, 200, "{list}");
    let approvals = list["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{list}");
    approvals[0].clone()
}

fn tenant() -> TenantId {
    "t-1".parse().unwrap()
}

async fn record_of(w: &World, source: &str) -> switchboard_domain::ExecutionRecord {
    w.wiring.store.execution_for_source(&tenant(), source).await.unwrap().unwrap()
}

/// A work queue SQS cannot be reached at.
struct Unreachable;

#[async_trait]
impl WorkQueue for Unreachable {
    async fn enqueue(&self, _item: &WorkItem) -> Result<Enqueued, QueueError> {
        Err(QueueError { message: "SendMessage: connection reset".into(), retryable: true })
    }
}

/// What the model was last sent, as JSON text.
fn last_request(w: &World) -> String {
    w.bedrock.requests().last().unwrap().1.to_string()
}

#[tokio::test]
async fn a_refund_over_the_limit_waits_in_dynamodb_and_runs_once_with_the_amount_an_iam_operator_approved() {
    let script = vec![refund_250(), Reply::text("Done with the refund.")];
    let (mut w, refunds, _clock) = refund_world(script).await;
    let metrics: Arc<Mutex<Vec<u8>>> = Arc::default();
    w.wiring = w.wiring.clone().with_metrics(Arc::new(switchboard_lambda::emf::EmfMetrics::to(metrics.clone())));

    // when the executor runs the customer's message, the model asking to refund 250
    run_next(&w).await;

    // then the turn waits before the call: nothing refunded or said, the record says why
    assert!(refunds.seen().is_empty());
    assert!(w.conversations.accepted().is_empty());
    let paused = record_of(&w, "message-c-1:m-1").await;
    assert_eq!(paused.status, ExecutionStatus::AwaitingApproval);
    // and the operations API lists the approval from the sessions' index, bound to the call
    let approval = waiting(&w).await;
    assert_eq!((&approval["tool"], &approval["status"]), (&json!("refund"), &json!("pending")));
    assert_eq!(approval["arguments"], json!({ "orderId": "1234", "amount": 250 }));
    assert_eq!(approval["executionId"], json!(paused.execution_id.to_string()));
    let id = approval["approvalId"].as_str().unwrap().to_owned();

    // when the IAM operator approves it with the amount edited down to 80
    let edited = json!({ "arguments": { "orderId": "1234", "amount": 80 } });
    let (status, decided) = ops_call(&w, "POST", &format!("/tenants/t-1/approvals/{id}/approve"), Some(&edited)).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!((&decided["status"], &decided["decidedBy"]), (&json!("approved"), &operator_arn()));
    // an edit outside the tool's schema would have been refused at its field
    let over = json!({ "arguments": { "orderId": "1234", "amount": 900 } });
    let (status, problem) = ops_call(&w, "POST", &format!("/tenants/t-1/approvals/{id}/approve"), Some(&over)).await;
    assert_eq!(status, 409, "decided already: {problem}");

    // then the resumption is on the conversation's queue, and the executor runs it: the webhook
    // receives the approved amount, once, signed; the customer gets the model's answer
    run_next(&w).await;
    let seen = refunds.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].verified, "the refund's signature did not verify");
    assert_eq!(seen[0].body["arguments"], json!({ "orderId": "1234", "amount": 80 }));
    assert!(last_request(&w).contains("refunded"), "the model reads the refund's result");
    let sent: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(sent, ["Done with the refund."]);
    // on the same execution, which says who approved what
    let done = record_of(&w, "message-c-1:m-1").await;
    assert_eq!((done.execution_id, done.status), (paused.execution_id, ExecutionStatus::Success));
    assert_eq!(done.approvals.len(), 1);
    assert_eq!(done.approvals[0].status, ApprovalStatus::Approved);
    assert_eq!(Some(json!(done.approvals[0].decided_by)), Some(operator_arn()));
    assert_eq!(done.tool_calls.len(), 1);
    assert_eq!(done.tool_calls[0].input["amount"], 80);
    assert_eq!(done.model_calls.len(), 2, "the call before the pause and the one after");
    // counted once: two model calls in the day's usage, one execution in its hour
    let day = paused.usage_day();
    let usage = w.wiring.store.usage(&tenant(), day, day).await.unwrap();
    assert_eq!(usage.iter().map(|u| u.counts.calls).sum::<u64>(), 2);
    let hour = paused.activity_hour();
    let hours = w.wiring.store.activity(&tenant(), hour, hour).await.unwrap();
    let counted: Vec<_> = hours.iter().map(|h| (h.status, h.executions)).collect();
    assert_eq!(counted, [(ExecutionStatus::Success, 1)]);
    // and so are the metrics: one execution as it ended, each model call once
    let text = String::from_utf8(metrics.lock().unwrap().clone()).unwrap();
    let lines: Vec<Value> = text.lines().map(check_emf).collect();
    let executions: Vec<_> = lines.iter().filter(|l| l.get("Executions").is_some()).map(|l| &l["Status"]).collect();
    assert_eq!(executions, [&json!("success")], "{text}");
    let calls: f64 = lines.iter().filter_map(|l| l["ModelCalls"].as_f64()).sum();
    assert_eq!(calls, 2.0, "{text}");
    // both events are in the tenant's log
    let kinds = published_kinds(&w).await;
    for kind in ["approval.requested", "approval.resolved"] {
        assert_eq!(kinds.iter().filter(|k| *k == kind).count(), 1, "{kind} once: {kinds:?}");
    }
    // and the approval is spent: nothing waits, deciding it again finds nothing, the queue is empty
    let (_, list) = ops_call(&w, "GET", "/tenants/t-1/approvals", None).await;
    assert_eq!(list["approvals"], json!([]));
    let (status, _) = ops_call(&w, "POST", &format!("/tenants/t-1/approvals/{id}/approve"), Some(&json!({}))).await;
    assert_eq!(status, 404);
    assert!(poll_once(&w).await.is_none());
}

#[tokio::test]
async fn a_denial_on_aws_is_fed_to_the_model_and_a_message_meanwhile_is_answered_after_it_in_order() {
    let script = vec![refund_250(), Reply::text("I could not refund it."), Reply::text("You are welcome.")];
    let (mut w, refunds, _clock) = refund_world(script).await;
    run_next(&w).await;
    let id = waiting(&w).await["approvalId"].as_str().unwrap().to_owned();

    // when the customer writes again while the turn waits
    let (routed, _, _) = route(&w, "c-1", "thanks for the help").await;
    assert!(matches!(routed, RouteOutcome::Enqueued { .. }), "{routed:?}");
    // then the executor holds it in the session (its queue item done): nothing is answered yet
    let session = w.wiring.store.latest_session(&tenant(), "c-1").await.unwrap().unwrap();
    assert_eq!((session.paused.is_some(), session.held.len()), (true, 1));
    assert!(w.conversations.accepted().is_empty());
    assert_eq!(w.bedrock.requests().len(), 1, "the model is not asked about it yet");

    // when the operator denies the refund, and a new container takes the resumption
    let deny = json!({ "reason": "over the order's value" });
    let (status, decided) = ops_call(&w, "POST", &format!("/tenants/t-1/approvals/{id}/deny"), Some(&deny)).await;
    assert_eq!((status, &decided["status"]), (200, &json!("denied")), "{decided}");
    w.wiring = w.wiring.restarted();
    run_next(&w).await;

    // then the webhook never ran, the model read the denial and its reason, and both messages
    // are answered in the order they came
    assert!(refunds.seen().is_empty());
    let requests = w.bedrock.requests();
    assert_eq!(requests.len(), 3);
    let after_denial = requests[1].1.to_string();
    assert!(after_denial.contains("denied") && after_denial.contains("over the order's value"), "{after_denial}");
    assert!(requests[2].1.to_string().contains("thanks for the help"));
    let sent: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(sent, ["I could not refund it.", "You are welcome."]);
    let paused = record_of(&w, "message-c-1:m-1").await;
    assert_eq!((paused.status, paused.approvals[0].status), (ExecutionStatus::Success, ApprovalStatus::Denied));
    assert!(paused.tool_calls[0].is_error);
    let session = w.wiring.store.latest_session(&tenant(), "c-1").await.unwrap().unwrap();
    assert!(session.paused.is_none() && session.held.is_empty());
    let records = w.wiring.store.list_executions(&tenant(), session.session_id, None, 10).await.unwrap();
    let statuses: Vec<_> = records.items.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [ExecutionStatus::Success; 2], "one record each");
    assert!(poll_once(&w).await.is_none());
}

#[tokio::test]
async fn the_routers_tick_expires_an_undecided_approval_and_queues_again_a_lost_resumption() {
    let script = vec![refund_250(), Reply::text("Nobody approved the refund."), refund_250(), Reply::text("Done.")];
    let (w, refunds, clock) = refund_world(script).await;
    run_next(&w).await;
    // the event-router over the same ports and clock, and its schedule's tick
    let router = EventRouter::over(&w.wiring);
    let tick = || event(fixture("eventbridge-scheduled-event.json"));

    // a tick within the approval's hour does nothing
    clock.advance(chrono::Duration::minutes(59));
    assert_eq!(event_router::dispatch(&router, tick()).await.unwrap(), Handled::Ticked(Tick::default()));
    assert!(poll_once(&w).await.is_none());

    // when nobody decides within the hour, the next tick expires it, as a denial by `system`
    clock.advance(chrono::Duration::minutes(2));
    let swept = event_router::dispatch(&router, tick()).await.unwrap();
    assert_eq!(swept, Handled::Ticked(Tick { swept: Swept { expired: 1, requeued: 0 }, ..Tick::default() }));
    run_next(&w).await;
    assert!(refunds.seen().is_empty());
    assert!(w.bedrock.requests()[1].1.to_string().contains("expired"));
    let expired = record_of(&w, "message-c-1:m-1").await;
    assert_eq!(expired.status, ExecutionStatus::Success);
    assert_eq!(
        (expired.approvals[0].status, expired.approvals[0].decided_by.as_deref()),
        (ApprovalStatus::Expired, Some("system"))
    );
    let sent: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(sent, ["Nobody approved the refund."]);

    // when another refund is approved but SQS refuses its resumption: the decision is kept
    route(&w, "c-1", "help: refund it after all").await;
    let id = waiting(&w).await["approvalId"].as_str().unwrap().to_owned();
    let cut_off = Operator::new(Deps { queue: Arc::new(Unreachable), ..w.wiring.deps.clone() });
    let decided = cut_off.decide(&tenant(), &id, "alice", Decision::Approve { arguments: None }).await;
    assert!(matches!(&decided, Err(OperatorError::Store(e)) if e.retryable()), "{decided:?}");
    assert!(poll_once(&w).await.is_none(), "nothing queued");
    assert_eq!(waiting(&w).await["status"], json!("approved"), "decided, about to resume");
    // then a tick within a minute of the decision leaves it be, and the next one queues it again
    assert_eq!(event_router::dispatch(&router, tick()).await.unwrap(), Handled::Ticked(Tick::default()));
    clock.advance(chrono::Duration::seconds(61));
    let swept = event_router::dispatch(&router, tick()).await.unwrap();
    assert_eq!(swept, Handled::Ticked(Tick { swept: Swept { expired: 0, requeued: 1 }, ..Tick::default() }));
    run_next(&w).await;
    assert_eq!(refunds.seen().len(), 1, "the approved refund ran, once");
    let sent: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(sent, ["Nobody approved the refund.", "Done."]);
    assert_eq!(event_router::dispatch(&router, tick()).await.unwrap(), Handled::Ticked(Tick::default()));
}

#[tokio::test]
async fn an_iam_operator_cancels_a_paused_turn_on_aws_and_a_person_gets_the_conversation() {
    let (w, refunds, _clock) = refund_world(vec![refund_250()]).await;
    run_next(&w).await;
    let session = w.wiring.store.latest_session(&tenant(), "c-1").await.unwrap().unwrap();
    // when the operator cancels the turn through the operations-api
    let path = format!("/tenants/t-1/sessions/{}/cancel", session.session_id);
    let (status, answer) = ops_call(&w, "POST", &path, Some(&json!({ "reason": "a person handles refunds" }))).await;
    assert_eq!((status, &answer["status"]), (202, &json!("cancelling")), "{answer}");
    assert_eq!(answer["approval"]["decidedBy"], operator_arn());
    // then the resumption runs none of the turn's calls and asks no model again
    run_next(&w).await;
    assert!(refunds.seen().is_empty());
    assert_eq!(w.bedrock.requests().len(), 1);
    assert!(w.conversations.accepted().is_empty());
    let record = record_of(&w, "message-c-1:m-1").await;
    assert_eq!((record.status, record.approvals[0].status), (ExecutionStatus::HandedOff, ApprovalStatus::Cancelled));
    // and a person owns the conversation, which the handoff event announces
    let session = w.wiring.store.latest_session(&tenant(), "c-1").await.unwrap().unwrap();
    assert!(session.is_human_owned() && session.paused.is_none());
    let kinds = published_kinds(&w).await;
    assert_eq!(kinds, ["approval.requested", "approval.resolved", "session.handoff.human"]);
    let (status, _) = ops_call(&w, "POST", &path, Some(&json!({ "reason": "again" }))).await;
    assert_eq!(status, 409, "no agent's turn is left to cancel");
}
