//! Idle sessions on the AWS profile: a tenant whose limits say `closeIdleSessions` has the
//! session of a customer who went quiet listed on the sessions table's sparse `SessionsIdle`
//! index by the executor's commit; the event-router's scheduled tick queues its close on the
//! conversation's FIFO group, and the agent-executor closes it as abandoned in DynamoDB (its
//! session, its record, its `session.ended` in the event log, its insight read through the
//! operations API), once.

use switchboard_domain::TenantLimits;
use switchboard_engine::{EventLog, IdleSweep};
use switchboard_lambda::event_router::{EventRouter, Handled, Tick};
use switchboard_testkit::ManualClock;

use super::*;

#[tokio::test]
async fn the_routers_tick_queues_the_close_of_a_quiet_customers_session_and_the_executor_abandons_it_once() {
    let mut w = world_with(vec![Reply::text("Hello! How can I help?")], Options::default()).await;
    let clock = ManualClock::new();
    w.wiring = w.wiring.clone().with_clock(clock.clone());
    let t: TenantId = "t-1".parse().unwrap();
    let mut tenant = w.wiring.store.get_tenant(&t).await.unwrap().unwrap();
    tenant.limits = TenantLimits { session_idle_minutes: 30, close_idle_sessions: true, ..TenantLimits::default() };
    assert!(w.wiring.store.update_tenant(&tenant).await.unwrap());
    let opened = switchboard_engine::Clock::now(clock.as_ref());
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    let (_, response) = poll_once(&w).await.expect("the message is queued");
    assert!(response.batch_item_failures.is_empty());
    let router = EventRouter::over(&w.wiring);
    let tick = || event(fixture("eventbridge-scheduled-event.json"));
    // a tick before the customer has been quiet for 30 minutes closes nothing
    clock.advance(chrono::Duration::minutes(29));
    assert_eq!(event_router::dispatch(&router, tick()).await.unwrap(), Handled::Ticked(Tick::default()));
    // when they have been, the tick queues the close, and the executor closes their session
    clock.advance(chrono::Duration::minutes(1));
    let idle = IdleSweep { queued: 1, ..IdleSweep::default() };
    assert_eq!(
        event_router::dispatch(&router, tick()).await.unwrap(),
        Handled::Ticked(Tick { idle, ..Tick::default() })
    );
    let (_, response) = poll_once(&w).await.expect("the close is queued");
    assert!(response.batch_item_failures.is_empty());
    let session = w.wiring.store.latest_session(&t, "c-1").await.unwrap().unwrap();
    assert_eq!(session.status, SessionStatus::Abandoned);
    let source = format!("idle-{}-{}", session.session_id, session.version - 1);
    let close = w.wiring.store.execution_for_source(&t, &source).await.unwrap();
    assert_eq!(close.map(|r| r.status), Some(ExecutionStatus::Abandoned));
    let events = w.wiring.store.events_after(&t, 0, 100).await.unwrap();
    let ended: Vec<_> = events.iter().map(|(_, e)| e).filter(|e| e.detail_type == "session.ended").collect();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].detail["endedBy"], "idle");
    // and the operations API's insights count it, once; the next tick has nothing to close
    let day = opened.date_naive();
    let path = format!("/tenants/t-1/insights?from={day}&to={day}");
    let app = switchboard_api::operations_api(api::state(&w.wiring, None));
    let app = app.map_request(api::strip_stage as fn(lambda_http::Request) -> lambda_http::Request);
    let response = app.oneshot(iam_request("GET", &path, None)).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value =
        serde_json::from_slice(&axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap()).unwrap();
    assert_eq!(
        (body["total"]["conversations"].as_u64(), body["total"]["abandoned"].as_u64()),
        (Some(1), Some(1)),
        "{body}"
    );
    assert_eq!(body["total"]["abandonedRate"], json!(1.0));
    assert_eq!(event_router::dispatch(&router, tick()).await.unwrap(), Handled::Ticked(Tick::default()));
    assert!(poll_once(&w).await.is_none(), "nothing more queued");
}
