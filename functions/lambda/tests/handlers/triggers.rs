//! Manual, webhook and schedule triggers on the AWS profile: the webhook-intake function's router
//! verifies a webhook trigger's delivery with the tenant's secret from Secrets Manager (the emulator),
//! queues it on the conversation's FIFO group (a repeated `webhook-id` is not queued again), and
//! the executor function answers it; a manual trigger's run waits for the executor as an invoke
//! does; the event-router's tick fires a schedule's slot once, however many routers tick. Requests
//! go through the API's router as the functions serve it.

use switchboard_domain::AgentId;
use switchboard_domain::webhook::standard;

use super::*;

/// A Standard Webhooks secret: `whsec_` and the base64 of 32 bytes.
const SECRET: &str = "whsec_Y3JtLWhvb2stc2VjcmV0LW9uLXRoZS1hd3MtcHJvZmlsZQ==";

/// A request through the API function's router: status and JSON body.
async fn send(w: &World, uri: &str, headers: &[(&str, String)], body: &str) -> (u16, Value) {
    let mut request =
        lambda_http::http::Request::builder().method("POST").uri(uri).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = request.body(lambda_http::Body::Text(body.to_owned())).unwrap();
    // A delivery through webhook-intake's router (`/hooks` alone), anything else the whole API's.
    let state = api::state(&w.wiring, None);
    let response = if uri.starts_with("/hooks/") {
        switchboard_api::hooks_api(state).oneshot(request).await.unwrap()
    } else {
        api::app(state).oneshot(request).await.unwrap()
    };
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The Standard Webhooks headers of `body` sent as message `id` now, signed with `secret`.
fn signed(secret: &str, id: &str, body: &str) -> Vec<(&'static str, String)> {
    let now = chrono::Utc::now().timestamp();
    let signature = standard::sign(&standard::Key::from_secret(secret).unwrap(), id, now, body.as_bytes());
    vec![("webhook-id", id.to_owned()), ("webhook-timestamp", now.to_string()), ("webhook-signature", signature)]
}

#[tokio::test]
async fn a_webhook_delivery_on_aws_is_verified_with_secrets_manager_queued_once_and_answered() {
    let script = vec![Reply::tool_use("tu-1", "send_message", json!({"text": "Ticket seen."})), Reply::text("")];
    let w = world(script, false).await;
    // Secret names are global on the shared emulator: a fresh one per test.
    let secret_ref = format!("crm-{}", ulid::Ulid::generate().to_string().to_lowercase());
    aws_sdk_secretsmanager::Client::new(&w.sdk)
        .create_secret()
        .name(format!("switchboard/t-1/{secret_ref}"))
        .secret_string(SECRET)
        .send()
        .await
        .unwrap();
    let trigger = json!({ "name": "crm", "agentId": AGENT, "eventType": "webhook",
        "webhook": { "secretRef": secret_ref, "conversationPointer": "/ticket" } });
    let (status, trigger) = api_call(&w, "POST", "/tenants/t-1/triggers", Some(&trigger)).await;
    assert_eq!(status, 201, "{trigger}");
    let hook = format!("/hooks/t-1/{}", trigger["triggerId"].as_str().unwrap());
    let body = r#"{"ticket":"T-7","text":"help, the printer is on fire"}"#;

    // a signed delivery is queued on the ticket's conversation group; its repeat is not queued
    let (status, queued) = send(&w, &hook, &signed(SECRET, "msg_aws_1", body), body).await;
    assert_eq!((status, queued["status"].as_str()), (202, Some("queued")), "{queued}");
    let (status, _) = send(&w, &hook, &signed(SECRET, "msg_aws_1", body), body).await;
    assert_eq!(status, 202);
    let message = receive_work(&w).await.expect("the delivery is queued");
    let group =
        message.attributes().and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId));
    assert_eq!(group.map(String::as_str), Some("t-1:T-7"));
    // (received, so invisible: put back for the executor)
    aws_sdk_sqs::Client::new(&w.sdk)
        .change_message_visibility()
        .queue_url(&w.names.work_queue_url)
        .receipt_handle(message.receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let (_, batch) = poll_once(&w).await.unwrap();
    assert!(batch.batch_item_failures.is_empty());
    assert!(receive_work(&w).await.is_none(), "the repeat was not queued");
    // the executor answered it, recorded with the trigger; a repeat now answers that execution
    let source = format!("/tenants/t-1/executions?sourceId={}", queued["sourceId"].as_str().unwrap());
    let (status, record) = api_call(&w, "GET", &source, None).await;
    assert_eq!((status, record["triggerId"].as_str()), (200, trigger["triggerId"].as_str()), "{record}");
    assert_eq!(record["actions"][0]["text"], "Ticket seen.");
    let (status, repeat) = send(&w, &hook, &signed(SECRET, "msg_aws_1", body), body).await;
    assert_eq!((status, &repeat["executionId"]), (200, &record["executionId"]), "{repeat}");

    // another secret, or none: the same 401, and nothing is queued
    let other = "whsec_b3RoZXItc2VjcmV0LW9mLWFub3RoZXItc2VuZGVyLTAx";
    let (status, problem) = send(&w, &hook, &signed(other, "msg_aws_2", body), body).await;
    assert_eq!((status, problem["type"].as_str()), (401, Some("urn:switchboard:problem:bad-signature")));
    assert_eq!(send(&w, &hook, &[], body).await.0, 401);
    assert!(receive_work(&w).await.is_none());
    assert_eq!(w.bedrock.requests().len(), 2, "one turn only");
}

#[tokio::test]
async fn a_manual_run_on_aws_waits_for_the_executor_like_an_invoke() {
    let script = vec![Reply::tool_use("tu-1", "send_message", json!({"text": "Done by hand."})), Reply::text("")];
    let w = world(script, false).await;
    let trigger = json!({ "name": "by hand", "agentId": AGENT, "eventType": "manual" });
    let (status, trigger) = api_call(&w, "POST", "/tenants/t-1/triggers", Some(&trigger)).await;
    assert_eq!(status, 201, "{trigger}");
    let run = format!("/tenants/t-1/triggers/{}/run", trigger["triggerId"].as_str().unwrap());
    let executor = async {
        loop {
            if let Some(done) = poll_once(&w).await {
                return done;
            }
            tokio::task::yield_now().await;
        }
    };
    let body = json!({ "input": "help with order 9", "conversationId": "c-run" }).to_string();
    let key = [("idempotency-key", "run-1".to_owned())];
    let ((status, answer), (_, batch)) = tokio::join!(send(&w, &run, &key, &body), executor);
    assert!(batch.batch_item_failures.is_empty());
    assert_eq!((status, answer["actions"][0]["text"].as_str()), (200, Some("Done by hand.")), "{answer}");
    let (_, record) =
        api_call(&w, "GET", &format!("/tenants/t-1/executions/{}", answer["executionId"].as_str().unwrap()), None)
            .await;
    assert_eq!(record["triggerId"], trigger["triggerId"]);
    assert_eq!(record["sourceId"], format!("manual-{}-run-1", trigger["triggerId"].as_str().unwrap()));
    // a message trigger is not run by hand
    let message = format!("/tenants/t-1/triggers/{}/run", "01JDQ8ZJ5V3V7Y9K2M4N6P8R1A");
    assert_eq!(send(&w, &message, &[], &body).await.0, 409);
}

#[tokio::test]
async fn a_schedule_fires_once_per_slot_however_many_event_routers_tick_and_after_a_restart() {
    let answer = |text: &str| vec![Reply::tool_use("tu-1", "send_message", json!({ "text": text })), Reply::text("")];
    let script = [answer("Here is the morning digest."), answer("Here is the digest, late.")].concat();
    let w = world(script, false).await;
    // the engine on a manual clock, and a schedule trigger written through the configuration service
    let clock = switchboard_testkit::ManualClock::new();
    let wiring = w.wiring.clone().with_clock(clock.clone());
    let trigger: Trigger = serde_json::from_value(json!({
        "tenantId": "t-1", "triggerId": "01JDQ8ZJ5V3V7Y9K2M4N6P8S0H", "name": "digest", "agentId": AGENT,
        "eventType": "schedule", "version": 1,
        "schedule": { "expression": "0 * * * *", "timeZone": "Europe/Paris", "conversationId": "digest",
                      "input": "Post the digest." },
        "createdAt": "2026-11-23T07:00:00Z", "updatedAt": "2026-11-23T07:00:00Z"
    }))
    .unwrap();
    ConfigService::new(wiring.store.clone(), wiring.store.clone())
        .with_clock(clock.clone())
        .create(&ConfigRecord::Trigger(trigger.clone()))
        .await
        .unwrap();
    let tick = || event(fixture("eventbridge-scheduled-event.json"));
    let fired = |handled: event_router::Handled| match handled {
        event_router::Handled::Ticked(t) => t.fired,
        other => panic!("a tick, not {other:?}"),
    };
    let (a, b) = (event_router::EventRouter::over(&wiring), event_router::EventRouter::over(&wiring.restarted()));
    // before the slot, nothing is due
    assert!(!fired(event_router::dispatch(&a, tick()).await.unwrap()).any());
    // at 09:00 in Paris (08:00Z), two routers tick at once: one of them queues the slot
    clock.advance(chrono::Duration::hours(1));
    let (one, two) = tokio::join!(event_router::dispatch(&a, tick()), event_router::dispatch(&b, tick()));
    let (one, two) = (fired(one.unwrap()), fired(two.unwrap()));
    assert_eq!((one.queued + two.queued, one.failed + two.failed), (1, 0), "{one:?} {two:?}");
    assert!(!fired(event_router::dispatch(&a, tick()).await.unwrap()).any(), "the slot is spent");
    let (_, batch) = poll_once(&w).await.unwrap();
    assert!(batch.batch_item_failures.is_empty());
    let source = format!("/tenants/t-1/executions?sourceId=schedule-{}-20261123T0800Z", trigger.trigger_id);
    let (status, record) = api_call(&w, "GET", &source, None).await;
    assert_eq!((status, record["triggerId"].as_str()), (200, Some("01JDQ8ZJ5V3V7Y9K2M4N6P8S0H")), "{record}");
    assert_eq!(record["actions"][0]["text"], "Here is the morning digest.");

    // the routers are gone for three hours; a new container's first tick runs the missed slots
    // once (the schedule's `missed: run_once`), and the next ones follow the clock
    clock.advance(chrono::Duration::hours(3));
    let c = event_router::EventRouter::over(&wiring.restarted());
    assert_eq!(fired(event_router::dispatch(&c, tick()).await.unwrap()).queued, 1);
    assert!(!fired(event_router::dispatch(&c, tick()).await.unwrap()).any());
    let (_, batch) = poll_once(&w).await.unwrap();
    assert!(batch.batch_item_failures.is_empty());
    assert!(receive_work(&w).await.is_none(), "one run for the three missed slots");
    assert_eq!(w.bedrock.requests().len(), 4, "two turns in all");
}

#[tokio::test]
async fn a_tick_whose_schedules_cannot_be_read_is_an_error_and_the_next_tick_reads_them() {
    let w = world(vec![], false).await;
    // the router's store over a config table that is not there: its schedules cannot be read
    let names = switchboard_aws::AwsNames { config_table: "no-such-config-table".into(), ..w.names.clone() };
    let broken = switchboard_aws::DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&w.sdk),
        names,
        Arc::new(switchboard_engine::SystemClock),
    );
    let router = event_router::EventRouter { store: Arc::new(broken), ..event_router::EventRouter::over(&w.wiring) };
    let tick = event_router::dispatch(&router, event(fixture("eventbridge-scheduled-event.json"))).await;
    match tick {
        Err(event_router::EventRouterError::Schedules(e)) => {
            assert!(e.to_string().contains("Query"), "the failed call is named: {e}")
        }
        other => panic!("expected the schedules' error, got {other:?}"),
    }
    // the same tick over the real table succeeds
    let working = event_router::EventRouter::over(&w.wiring);
    let ok = event_router::dispatch(&working, event(fixture("eventbridge-scheduled-event.json"))).await;
    assert_eq!(ok.unwrap(), event_router::Handled::Ticked(event_router::Tick::default()));
}

#[tokio::test]
async fn a_split_triggers_variant_travels_through_sqs_to_the_record_and_is_counted_in_dynamodb() {
    let step = |text: &str| Reply::tool_use("tu-1", "send_message", json!({ "text": text }));
    let w = world(vec![step("From the candidate."), Reply::text("")], false).await;
    // given the tenant's trigger split between its agent and a candidate that takes every
    // conversation (the control's weight is 0: the choice does not depend on the hash)
    let t: TenantId = "t-1".parse().unwrap();
    let control = w.wiring.store.get_agent(&t, AGENT.parse().unwrap()).await.unwrap().unwrap();
    let candidate = Agent { agent_id: AgentId::generate(), name: "Candidate".into(), ..control.clone() };
    put(&w.wiring, ConfigRecord::Agent(candidate.clone())).await;
    let trigger = w.wiring.store.active_triggers(&t, EventType::MessageNew).await.unwrap()[0].clone();
    let split = serde_json::from_value(json!([
        { "name": "control", "agentId": control.agent_id, "weight": 0 },
        { "name": "candidate", "agentId": candidate.agent_id, "weight": 1 },
    ]))
    .unwrap();
    put(&w.wiring, ConfigRecord::Trigger(Trigger { split, ..trigger.clone() })).await;

    // when a message is routed and its item executed from SQS
    let envelope = fixture("eventbridge-message-new.json");
    let outcome = event_router::handle(&w.wiring.intake, event(envelope.clone())).await.unwrap();
    assert!(
        matches!(outcome, RouteOutcome::Enqueued { agent_id, .. } if agent_id == candidate.agent_id),
        "{outcome:?}"
    );
    let (_, response) = poll_once(&w).await.expect("the item");
    assert!(response.batch_item_failures.is_empty());

    // then the candidate answered, its record and session carry the variant, and DynamoDB
    // counts it under the variant
    let record = w.wiring.store.execution_for_source(&t, &source_of(&envelope)).await.unwrap().unwrap();
    let assigned = Some(switchboard_domain::Assignment { trigger_id: trigger.trigger_id, variant: "candidate".into() });
    assert_eq!((record.agent_id, &record.split), (candidate.agent_id, &assigned));
    let session = w.wiring.store.get_session(&t, record.session_id).await.unwrap().unwrap();
    assert_eq!(session.split, assigned);
    let hour = switchboard_domain::hour_of(record.created_at);
    let rows = w.wiring.store.variants(&t, hour, hour).await.unwrap();
    let shape: Vec<_> = rows.iter().map(|r| (r.variant.as_str(), r.status, r.executions, r.tokens)).collect();
    assert_eq!(shape, [("candidate", ExecutionStatus::Success, 1, record.token_usage.total())]);
}
