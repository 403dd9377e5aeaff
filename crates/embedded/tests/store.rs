//! The SQLite store on its own: expiry, paging, the one-active-session rule, and the dead-letter
//! path of a work item that can never be parsed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use switchboard_domain::{
    AgentId, ExecutionId, ExecutionRecord, ExecutionStatus, Session, SessionId, TenantId, TokenUsage,
};
use switchboard_embedded::queue::QueueConfig;
use switchboard_embedded::{Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{Clock, ConversationLog, ExecutionLog, SessionStore, SessionWrite, StoreError, TurnCommit};

#[derive(Debug)]
struct ManualClock(Mutex<DateTime<Utc>>);

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

impl ManualClock {
    fn advance(&self, by: chrono::Duration) {
        *self.0.lock().unwrap() += by;
    }
}

fn open(clock: Arc<ManualClock>, max_receives: u32) -> (Embedded, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[{"then":{"text":"x"}}]}"#).unwrap());
    let options = EmbeddedOptions {
        queue: QueueConfig { max_receives, visibility_timeout: Duration::from_secs(30), ..QueueConfig::default() },
        ..EmbeddedOptions::default()
    };
    (Embedded::open(dir.path(), model, clock, options).unwrap(), dir)
}

fn record(tenant: &TenantId, session: SessionId, source: &str, now: DateTime<Utc>) -> ExecutionRecord {
    ExecutionRecord {
        tenant_id: tenant.clone(),
        execution_id: ExecutionId::generate(),
        session_id: session,
        agent_id: AgentId::generate(),
        trigger_id: None,
        source_id: source.into(),
        input: json!({}),
        status: ExecutionStatus::Success,
        error: None,
        iterations: 1,
        model_calls: vec![],
        tool_calls: vec![],
        actions: vec![],
        token_usage: TokenUsage::default(),
        latency_ms: 1,
        created_at: now,
        children: vec![],
        expires_at: now + chrono::Duration::days(30),
    }
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock(Mutex::new("2026-11-23T07:00:00Z".parse().unwrap())))
}

#[tokio::test]
async fn expired_execution_records_are_never_returned() {
    let clock = clock();
    let (e, _dir) = open(clock.clone(), 5);
    let t: TenantId = "t-1".parse().unwrap();
    let s = Session::start(t.clone(), "c-1".into(), AgentId::generate(), clock.now());
    let r = record(&t, s.session_id, "evt-1", clock.now());
    e.store
        .commit_turn(&TurnCommit {
            sessions: vec![SessionWrite { session: s.clone(), expected_version: None }],
            execution: r.clone(),
        })
        .await
        .unwrap();
    assert!(e.store.get_execution(&t, r.execution_id).await.unwrap().is_some());
    clock.advance(chrono::Duration::days(31));
    assert!(e.store.get_execution(&t, r.execution_id).await.unwrap().is_none());
    assert!(e.store.execution_for_source(&t, "evt-1").await.unwrap().is_none());
    assert!(e.store.list_executions(&t, s.session_id, None, 10).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn executions_are_listed_in_pages_with_a_cursor() {
    let clock = clock();
    let (e, _dir) = open(clock.clone(), 5);
    let t: TenantId = "t-1".parse().unwrap();
    let mut s = Session::start(t.clone(), "c-1".into(), AgentId::generate(), clock.now());
    for i in 0..5 {
        let expected = if i == 0 { None } else { Some(s.version) };
        let mut next = s.clone();
        next.version += 1;
        e.store
            .commit_turn(&TurnCommit {
                sessions: vec![SessionWrite { session: next.clone(), expected_version: expected }],
                execution: record(&t, s.session_id, &format!("evt-{i}"), clock.now()),
            })
            .await
            .unwrap();
        s = next;
        clock.advance(chrono::Duration::milliseconds(2));
    }
    let first = e.store.list_executions(&t, s.session_id, None, 2).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let second = e.store.list_executions(&t, s.session_id, first.next_cursor.as_deref(), 2).await.unwrap();
    let third = e.store.list_executions(&t, s.session_id, second.next_cursor.as_deref(), 2).await.unwrap();
    assert_eq!((second.items.len(), third.items.len()), (2, 1));
    assert!(third.next_cursor.is_none());
    let mut ids: Vec<_> = [first.items, second.items, third.items].concat().into_iter().map(|r| r.source_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "no record repeated or skipped across pages");
    // another tenant sees none of it
    let other: TenantId = "t-2".parse().unwrap();
    assert!(e.store.list_executions(&other, s.session_id, None, 10).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn a_stale_write_and_a_second_active_session_are_conflicts_and_change_nothing() {
    let clock = clock();
    let (e, _dir) = open(clock.clone(), 5);
    let t: TenantId = "t-1".parse().unwrap();
    let s = Session::start(t.clone(), "c-1".into(), AgentId::generate(), clock.now());
    e.store
        .commit_turn(&TurnCommit {
            sessions: vec![SessionWrite { session: s.clone(), expected_version: None }],
            execution: record(&t, s.session_id, "evt-1", clock.now()),
        })
        .await
        .unwrap();
    // a write based on a version that is no longer current
    let mut stale = s.clone();
    stale.version = 7;
    let err = e
        .store
        .commit_turn(&TurnCommit {
            sessions: vec![SessionWrite { session: stale, expected_version: Some(3) }],
            execution: record(&t, s.session_id, "evt-2", clock.now()),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)));
    // a second active session for the same conversation
    let twin = Session::start(t.clone(), "c-1".into(), AgentId::generate(), clock.now());
    let err = e
        .store
        .commit_turn(&TurnCommit {
            sessions: vec![SessionWrite { session: twin.clone(), expected_version: None }],
            execution: record(&t, twin.session_id, "evt-3", clock.now()),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)));
    // neither failed commit left its execution record behind
    assert!(e.store.execution_for_source(&t, "evt-2").await.unwrap().is_none());
    assert!(e.store.execution_for_source(&t, "evt-3").await.unwrap().is_none());
    // the same source twice is a duplicate
    let mut again = s.clone();
    again.version = 1;
    let err = e
        .store
        .commit_turn(&TurnCommit {
            sessions: vec![SessionWrite { session: again, expected_version: Some(0) }],
            execution: record(&t, s.session_id, "evt-1", clock.now()),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(_)));
    assert_eq!(e.store.get_session(&t, s.session_id).await.unwrap().unwrap().version, 0, "rolled back");
}

#[tokio::test]
async fn a_work_item_that_cannot_be_parsed_ends_in_the_dead_letters() {
    let clock = clock();
    let (e, _dir) = open(clock.clone(), 2);
    e.queue.enqueue_raw("t-1:c-1", "bad-1", "{ not a work item").await.unwrap();
    e.queue.enqueue_raw("t-1:c-1", "bad-2", r#"{"tenantId":"t-1"}"#).await.unwrap();
    let handler = e.item_handler();
    // every delivery fails and is handed back at once, until the receive limit
    let mut failures = 0;
    while let Some(d) = e.queue.receive().await.unwrap() {
        let err = handler.handle(&d).await.unwrap_err();
        assert!(err.message.starts_with("malformed work item"), "{}", err.message);
        failures += 1;
        assert!(e.queue.release(&d.receipt, Duration::ZERO).await.unwrap());
    }
    assert_eq!(failures, 4, "two deliveries each");
    let dead = e.queue.dead_letters(10).await.unwrap();
    assert_eq!(dead.iter().map(|d| d.dedup_id.as_str()).collect::<Vec<_>>(), ["bad-1", "bad-2"]);
    assert_eq!(e.queue.stats().await.unwrap().dead, 2);
}

#[tokio::test]
async fn two_tenants_with_the_same_event_id_both_get_their_reply() {
    let clock = clock();
    let (e, _dir) = open(clock.clone(), 5);
    let (a, b): (TenantId, TenantId) = ("t-a".parse().unwrap(), "t-b".parse().unwrap());
    // the same idempotency key (derived from the same event id) in two tenants
    let (id_a, dup_a) = e.store.record_reply(&a, "c-1", "hello A", "evt-1/0").await.unwrap();
    let (id_b, dup_b) = e.store.record_reply(&b, "c-1", "hello B", "evt-1/0").await.unwrap();
    assert!(!dup_a && !dup_b, "neither is a repeat");
    assert_ne!(id_a, id_b);
    // and within one tenant the key still deduplicates
    let (again, dup) = e.store.record_reply(&a, "c-1", "hello A", "evt-1/0").await.unwrap();
    assert!(dup);
    assert_eq!(again, id_a);
    let texts: Vec<_> = e.store.messages(&b, "c-1", 10).await.unwrap().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["hello B"]);
}
