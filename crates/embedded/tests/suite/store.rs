//! The SQLite store on its own: expiry, paging, the one-active-session rule, and the dead-letter
//! path of a work item that can never be parsed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;
use switchboard_testkit::by;

use chrono::{DateTime, Utc};
use serde_json::json;
use switchboard_domain::{
    AgentId, ExecutionId, ExecutionRecord, ExecutionStatus, Session, SessionId, TenantId, TokenUsage,
};
use switchboard_embedded::queue::QueueConfig;
use switchboard_embedded::{Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{
    Clock, ConversationLog, ExecutionLog, Sender, SessionStore, SessionWrite, StoreError, TurnCommit,
};
use switchboard_testkit::ManualClock;

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
        cost_usd: None,
        price_version: None,
        ran_with: None,
        latency_ms: 1,
        created_at: now,
        children: vec![],
        coalesced: vec![],
        coalesced_into: None,
        interrupted_by: None,
        expires_at: now + chrono::Duration::days(30),
        hook_calls: vec![],
        approvals: vec![],
        split: None,
    }
}

fn clock() -> Arc<ManualClock> {
    ManualClock::new()
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
            events: vec![],
            sessions: vec![SessionWrite { session: s.clone(), expected_version: None }],
            execution: r.clone(),
            content: vec![],
            resumes: None,
            coalesced: vec![],
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
                events: vec![],
                sessions: vec![SessionWrite { session: next.clone(), expected_version: expected }],
                execution: record(&t, s.session_id, &format!("evt-{i}"), clock.now()),
                content: vec![],
                resumes: None,
                coalesced: vec![],
            })
            .await
            .unwrap();
        s = next;
        clock.advance(chrono::Duration::milliseconds(2));
    }
    let first = e.store.list_executions(&t, s.session_id, None, 2).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let after =
        |page: &switchboard_engine::Page<ExecutionRecord>| page.next_cursor.as_deref().map(|c| c.parse().unwrap());
    let second = e.store.list_executions(&t, s.session_id, after(&first), 2).await.unwrap();
    let third = e.store.list_executions(&t, s.session_id, after(&second), 2).await.unwrap();
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
            events: vec![],
            sessions: vec![SessionWrite { session: s.clone(), expected_version: None }],
            execution: record(&t, s.session_id, "evt-1", clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap();
    // a write based on a version that is no longer current
    let mut stale = s.clone();
    stale.version = 7;
    let err = e
        .store
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![SessionWrite { session: stale, expected_version: Some(3) }],
            execution: record(&t, s.session_id, "evt-2", clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)));
    // a second active session for the same conversation
    let twin = Session::start(t.clone(), "c-1".into(), AgentId::generate(), clock.now());
    let err = e
        .store
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![SessionWrite { session: twin.clone(), expected_version: None }],
            execution: record(&t, twin.session_id, "evt-3", clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
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
            events: vec![],
            sessions: vec![SessionWrite { session: again, expected_version: Some(0) }],
            execution: record(&t, s.session_id, "evt-1", clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
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
    let (id_a, dup_a) = e.store.record_sent(&a, "c-1", "hello A", "evt-1/0", Sender::Agent).await.unwrap();
    let (id_b, dup_b) = e.store.record_sent(&b, "c-1", "hello B", "evt-1/0", Sender::Agent).await.unwrap();
    assert!(!dup_a && !dup_b, "neither is a repeat");
    assert_ne!(id_a, id_b);
    // and within one tenant the key still deduplicates
    let (again, dup) = e.store.record_sent(&a, "c-1", "hello A", "evt-1/0", Sender::Agent).await.unwrap();
    assert!(dup);
    assert_eq!(again, id_a);
    let texts: Vec<_> = e.store.messages(&b, "c-1", 10).await.unwrap().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["hello B"]);
}

#[tokio::test]
async fn a_message_id_is_unique_per_conversation_not_per_tenant() {
    let (e, _dir) = open(clock(), 5);
    let t: TenantId = "t-a".parse().unwrap();
    // the same message id arrives in two conversations of one tenant
    assert!(e.store.record_inbound(&t, "c-1", "m-1", "first conversation").await.unwrap());
    assert!(e.store.record_inbound(&t, "c-2", "m-1", "second conversation").await.unwrap());
    // and a repeat within a conversation is recognised
    assert!(!e.store.record_inbound(&t, "c-2", "m-1", "second conversation").await.unwrap());
    for (conversation, text) in [("c-1", "first conversation"), ("c-2", "second conversation")] {
        let texts: Vec<_> = e.store.messages(&t, conversation, 10).await.unwrap().into_iter().map(|m| m.text).collect();
        assert_eq!(texts, [text], "{conversation}");
    }
}

#[tokio::test]
async fn an_outbound_event_id_is_unique_per_tenant() {
    let (e, _dir) = open(clock(), 5);
    let (a, b): (TenantId, TenantId) = ("t-a".parse().unwrap(), "t-b".parse().unwrap());
    let event = |t: &TenantId| switchboard_domain::OutboundEvent {
        id: "evt-1/0/session.handoff.human".into(),
        detail_type: "session.handoff.human".into(),
        tenant_id: t.clone(),
        detail: json!({ "reason": format!("for {t}") }),
    };
    // the same id logged by two tenants: both are kept, each in its tenant's log
    assert!(e.store.log_event(&event(&a)).await.unwrap().is_some());
    assert!(e.store.log_event(&event(&b)).await.unwrap().is_some());
    // a replayed publish within a tenant is not logged twice
    assert!(e.store.log_event(&event(&a)).await.unwrap().is_none());
    for t in [&a, &b] {
        let got: Vec<_> = e.store.events(t, 0, 10).await.unwrap().into_iter().map(|(_, ev)| ev).collect();
        assert_eq!(got, [event(t)]);
    }
}

/// A data directory written by the schema before tenant-scoped client ids (user_version 2) opens,
/// keeps its rows and event sequence numbers, and then takes ids that used to collide.
#[tokio::test]
async fn a_database_of_the_previous_schema_migrates_forward() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join(switchboard_embedded::runtime::DB_FILE);
    {
        let conn = rusqlite::Connection::open(&db_path).unwrap();
        conn.execute_batch(PREVIOUS_STORE_SCHEMA).unwrap();
        conn.execute_batch(switchboard_embedded::schema::queue::SCHEMA).unwrap();
        conn.execute_batch(
            "INSERT INTO messages (tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at)
                 VALUES ('t-a', 'c-1', 'm-1', 'inbound', 'old question', NULL, '2026-11-01T00:00:00+00:00'),
                        ('t-a', 'c-1', 'reply-1', 'outbound', 'old answer', 'evt-1/0', '2026-11-01T00:00:01+00:00');
             INSERT INTO events (seq, event_id, tenant_id, detail_type, body, created_at)
                 VALUES (41, 'evt-1/0/session.ended', 't-a', 'session.ended',
                         '{\"id\":\"evt-1/0/session.ended\",\"detailType\":\"session.ended\",\"tenantId\":\"t-a\",\"detail\":{}}',
                         '2026-11-01T00:00:02+00:00');
             PRAGMA user_version = 2;",
        )
        .unwrap();
    }
    // when the current build opens it
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[{"then":{"text":"x"}}]}"#).unwrap());
    let e = Embedded::open(dir.path(), model, clock(), EmbeddedOptions::default()).unwrap();
    let t: TenantId = "t-a".parse().unwrap();
    // then the old rows are there
    let texts: Vec<_> = e.store.messages(&t, "c-1", 10).await.unwrap().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["old question", "old answer"]);
    let events = e.store.events(&t, 0, 10).await.unwrap();
    assert_eq!(
        events.iter().map(|(seq, ev)| (*seq, ev.id.as_str())).collect::<Vec<_>>(),
        [(41, "evt-1/0/session.ended")]
    );
    // the reply's idempotency key still deduplicates
    let (_, duplicate) = e.store.record_sent(&t, "c-1", "old answer", "evt-1/0", Sender::Agent).await.unwrap();
    assert!(duplicate);
    // ids that collided under the old constraints are now accepted
    assert!(e.store.record_inbound(&t, "c-2", "m-1", "same id, other conversation").await.unwrap());
    let other: TenantId = "t-b".parse().unwrap();
    let reused = switchboard_domain::OutboundEvent {
        id: "evt-1/0/session.ended".into(),
        detail_type: "session.ended".into(),
        tenant_id: other.clone(),
        detail: json!({}),
    };
    let seq = e.store.log_event(&reused).await.unwrap().unwrap();
    assert!(seq > 41, "sequence numbers continue after the migrated ones: {seq}");
    // and the database is at the current version
    let conn = rusqlite::Connection::open(&db_path).unwrap();
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, i64::try_from(switchboard_embedded::schema::MIGRATIONS.len()).unwrap());
}

/// The store's tables as the first schema step released them (the queue's step 2 is unchanged
/// and applied from the crate): what a user's existing data directory holds.
const PREVIOUS_STORE_SCHEMA: &str = r#"
CREATE TABLE tenants (tenant_id TEXT PRIMARY KEY, name TEXT NOT NULL, created_at TEXT NOT NULL) STRICT;
CREATE TABLE config_records (
    tenant_id TEXT NOT NULL REFERENCES tenants (tenant_id), kind TEXT NOT NULL, id TEXT NOT NULL,
    version INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (tenant_id, kind, id)) STRICT;
CREATE TABLE api_keys (key_hash TEXT PRIMARY KEY, tenant_id TEXT REFERENCES tenants (tenant_id), created_at TEXT NOT NULL) STRICT;
CREATE TABLE sessions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT NOT NULL, session_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL,
    UNIQUE (tenant_id, session_id)) STRICT;
CREATE INDEX sessions_by_conversation ON sessions (tenant_id, conversation_id, seq);
CREATE UNIQUE INDEX one_active_session ON sessions (tenant_id, conversation_id) WHERE status = 'active';
CREATE TABLE executions (
    tenant_id TEXT NOT NULL, execution_id TEXT NOT NULL, session_id TEXT NOT NULL, source_id TEXT NOT NULL,
    expires_at INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (tenant_id, execution_id)) STRICT;
CREATE UNIQUE INDEX executions_by_source ON executions (tenant_id, source_id);
CREATE INDEX executions_by_session ON executions (tenant_id, session_id, execution_id);
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL, direction TEXT NOT NULL, text TEXT NOT NULL, idempotency_key TEXT,
    created_at TEXT NOT NULL, UNIQUE (tenant_id, message_id), UNIQUE (tenant_id, idempotency_key)) STRICT;
CREATE INDEX messages_by_conversation ON messages (tenant_id, conversation_id, seq);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL,
    detail_type TEXT NOT NULL, body TEXT NOT NULL, created_at TEXT NOT NULL) STRICT;
CREATE INDEX events_by_tenant ON events (tenant_id, seq);
"#;

#[tokio::test]
async fn the_log_tells_who_wrote_each_message_and_an_echoed_reply_is_not_a_humans() {
    let (e, _dir) = open(clock(), 5);
    let t: TenantId = "t-1".parse().unwrap();
    assert!(e.store.record_inbound(&t, "c-1", "m-1", "hi").await.unwrap());
    let (reply_id, _) =
        e.store.record_sent(&t, "c-1", "Hello! How can I help?", "evt-1/0", Sender::Agent).await.unwrap();
    assert!(e.store.record_human(&t, "c-1", "m-2", "I am Sam from support.").await.unwrap());
    // the service echoing the agent's reply, under its own id or the reply's: not logged again
    assert!(!e.store.record_human(&t, "c-1", "svc-9", "Hello! How can I help?").await.unwrap());
    assert!(!e.store.record_human(&t, "c-1", &reply_id, "Hello! How can I help?").await.unwrap());
    assert!(e.store.record_inbound(&t, "c-1", "m-3", "thanks").await.unwrap());
    let who: Vec<(Sender, String)> =
        e.store.messages(&t, "c-1", 10).await.unwrap().into_iter().map(|m| (m.sender, m.text)).collect();
    assert_eq!(
        who,
        [
            (Sender::Customer, "hi".to_owned()),
            (Sender::Agent, "Hello! How can I help?".to_owned()),
            (Sender::Human, "I am Sam from support.".to_owned()),
            (Sender::Customer, "thanks".to_owned()),
        ]
    );
    // the newest two, oldest first
    let recent: Vec<String> =
        e.store.recent_messages(&t, "c-1", 2).await.unwrap().into_iter().map(|m| m.text).collect();
    assert_eq!(recent, ["I am Sam from support.", "thanks"]);
}

#[tokio::test]
async fn tenants_and_agents_are_read_from_memory_until_a_write_changes_them() {
    use switchboard_domain::TenantStatus;
    use switchboard_engine::{Bundle, ConfigAdmin, ConfigKind, ConfigStore};
    let clock = clock();
    let (e, dir) = open(clock.clone(), 5);
    let agent: AgentId = "01JD0000CACHE0AGENT0000001".parse().unwrap();
    let bundle = json!({
        "tenantId": "t-1", "name": "One",
        "agents": [{ "agentId": agent.to_string(), "name": "A", "systemPrompt": "p", "model": "scripted:x" }]
    });
    Bundle::parse(&bundle.to_string(), clock.as_ref()).unwrap().install(&e.store).await.unwrap();
    let t: TenantId = "t-1".parse().unwrap();
    let first = (e.store.get_tenant(&t).await.unwrap().unwrap(), e.store.get_agent(&t, agent).await.unwrap().unwrap());
    let calls = e.store.db_calls();
    for _ in 0..3 {
        assert_eq!(e.store.get_tenant(&t).await.unwrap().as_ref(), Some(&first.0));
        assert_eq!(e.store.get_agent(&t, agent).await.unwrap().as_ref(), Some(&first.1));
    }
    assert_eq!(e.store.db_calls(), calls, "served from memory");
    // a write through the store is seen by the next read
    let suspended = switchboard_domain::Tenant { status: TenantStatus::Suspended, ..first.0.clone() };
    assert!(e.store.update_tenant(&suspended).await.unwrap());
    assert_eq!(e.store.get_tenant(&t).await.unwrap().unwrap().status, TenantStatus::Suspended);
    assert!(e.store.delete_config(&t, ConfigKind::Agent, &agent.to_string(), first.1.version, &by()).await.unwrap());
    assert_eq!(e.store.get_agent(&t, agent).await.unwrap(), None);
    // what does not exist is not remembered: a tenant another process creates is found at once
    let other: TenantId = "t-2".parse().unwrap();
    assert_eq!(e.store.get_tenant(&other).await.unwrap(), None);
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[]}"#).unwrap());
    let second = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    assert!(second.store.create_tenant(&other, "Two").await.unwrap());
    assert_eq!(e.store.get_tenant(&other).await.unwrap().unwrap().name, "Two");
}

#[tokio::test]
async fn api_keys_are_read_from_memory_and_a_revoked_or_deleted_tenants_key_is_not() {
    use switchboard_domain::access::Role;
    use switchboard_embedded::store::NewKey;
    use switchboard_engine::{ConfigAdmin, ConfigStore};
    let clock = clock();
    let (e, dir) = open(clock.clone(), 5);
    let (t1, t2): (TenantId, TenantId) = ("t-1".parse().unwrap(), "t-2".parse().unwrap());
    for t in [&t1, &t2] {
        assert!(e.store.create_tenant(t, "T").await.unwrap());
    }
    let (k1, k2, admin, d) = ("a".repeat(64), "b".repeat(64), "c".repeat(64), "d".repeat(64));
    let new = |key_hash, tenant, principal, role| NewKey { key_hash, tenant, principal, role, expires_at: None };
    e.store.add_api_key(new(&k1, Some(&t1), "alice", Role::Operator)).await.unwrap();
    e.store.add_api_key(new(&k2, Some(&t2), "bob", Role::Viewer)).await.unwrap();
    e.store.add_api_key(new(&admin, None, "admin", Role::Admin)).await.unwrap();
    let expected = [
        (&k1, Some(t1.clone()), "alice", Role::Operator),
        (&k2, Some(t2.clone()), "bob", Role::Viewer),
        (&admin, None, "admin", Role::Admin),
    ];
    for (k, owner, principal, role) in expected {
        let key = e.store.api_key(k).await.unwrap().unwrap();
        assert_eq!((key.tenant, key.principal.as_str(), key.role), (owner, principal, role));
    }
    let calls = e.store.db_calls();
    assert_eq!(e.store.api_key(&k1).await.unwrap().unwrap().principal, "alice");
    assert!(e.store.api_key(&admin).await.unwrap().unwrap().tenant.is_none());
    assert_eq!(e.store.db_calls(), calls, "served from memory");
    // an unknown key is looked up every time: another process may add it
    assert_eq!(e.store.api_key(&d).await.unwrap(), None);
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[]}"#).unwrap());
    let second = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    second.store.add_api_key(new(&d, Some(&t2), "carol", Role::Builder)).await.unwrap();
    assert_eq!(e.store.api_key(&d).await.unwrap().unwrap().tenant, Some(t2.clone()));
    // revoked: gone at once, and only that tenant's keys are looked up again
    assert!(e.store.revoke_api_key(&t1, &k1[..16]).await.unwrap());
    assert_eq!(e.store.api_key(&k1).await.unwrap(), None);
    // a tenant deleted with its keys: its keys are gone at once
    assert!(
        e.store
            .update_tenant(&switchboard_domain::Tenant {
                status: switchboard_domain::TenantStatus::Suspended,
                ..e.store.get_tenant(&t2).await.unwrap().unwrap()
            })
            .await
            .unwrap()
    );
    assert!(e.store.delete_tenant(&t2).await.unwrap());
    assert_eq!(e.store.api_key(&k2).await.unwrap(), None);
    assert!(e.store.api_key(&admin).await.unwrap().is_some());
}

#[tokio::test]
async fn a_keys_use_is_written_at_most_once_a_minute_and_a_rotation_replaces_it_in_one_step() {
    use switchboard_domain::access::Role;
    use switchboard_embedded::store::NewKey;
    let clock = clock();
    let (e, _dir) = open(clock.clone(), 5);
    let t: TenantId = "t-1".parse().unwrap();
    assert!(e.store.create_tenant(&t, "T").await.unwrap());
    let expires = clock.now() + chrono::Duration::days(30);
    let (old, new) = ("e".repeat(64), "f".repeat(64));
    let key =
        NewKey { key_hash: &old, tenant: Some(&t), principal: "alice", role: Role::Builder, expires_at: Some(expires) };
    e.store.add_api_key(key).await.unwrap();
    // given a key used now
    let stored = e.store.api_key(&old).await.unwrap().unwrap();
    e.store.note_key_use(&stored, clock.now()).await.unwrap();
    let used = e.store.api_key(&old).await.unwrap().unwrap();
    assert_eq!(used.last_used_at, Some(clock.now()));
    // when it is used again within the minute, nothing is written
    let commits = e.store.db_commits();
    clock.advance(chrono::Duration::seconds(59));
    e.store.note_key_use(&used, clock.now()).await.unwrap();
    assert_eq!(e.store.db_commits(), commits, "no write within the minute");
    // and a minute on, it is
    clock.advance(chrono::Duration::seconds(1));
    e.store.note_key_use(&used, clock.now()).await.unwrap();
    assert_eq!(e.store.tenant_api_keys(&t).await.unwrap()[0].last_used_at, Some(clock.now()));
    // a rotation keeps the grant and ends the old key in the same step
    let rotated = e.store.rotate_api_key(&t, &old[..16], &new).await.unwrap().unwrap();
    assert_eq!((rotated.principal.as_str(), rotated.role, rotated.expires_at), ("alice", Role::Builder, Some(expires)));
    assert_eq!(rotated.last_used_at, None);
    assert_eq!(e.store.api_key(&old).await.unwrap(), None);
    assert_eq!(e.store.api_key(&new).await.unwrap().unwrap().principal, "alice");
    assert_eq!(e.store.tenant_api_keys(&t).await.unwrap().len(), 1);
    // a key the tenant does not have is not rotated
    assert_eq!(e.store.rotate_api_key(&t, &"0".repeat(16), &"1".repeat(64)).await.unwrap(), None);
}

/// The activity step fills its counts from the execution records a data directory already has,
/// in the hour and with the status each record was written with.
#[tokio::test]
async fn activity_is_filled_from_the_kept_records_when_its_step_is_applied() {
    let clock = clock();
    let (e, dir) = open(clock.clone(), 5);
    let t: TenantId = "t-1".parse().unwrap();
    let h = switchboard_domain::hour_of(clock.now());
    let mut s = Session::start(t.clone(), "c-1".into(), AgentId::generate(), clock.now());
    let statuses = [(0, ExecutionStatus::Success), (59, ExecutionStatus::Success), (61, ExecutionStatus::Failed)];
    for (i, (minute, status)) in statuses.into_iter().enumerate() {
        let mut r = record(&t, s.session_id, &format!("evt-{i}"), h + chrono::Duration::minutes(minute));
        r.status = status;
        let expected_version = (i > 0).then_some(s.version);
        if i > 0 {
            s.version += 1;
        }
        e.store
            .commit_turn(&TurnCommit {
                events: vec![],
                sessions: vec![SessionWrite { session: s.clone(), expected_version }],
                execution: r,
                content: vec![],
                resumes: None,
                coalesced: vec![],
            })
            .await
            .unwrap();
    }
    let before = e.store.activity(&t, h, h + chrono::Duration::hours(1)).await.unwrap();
    drop(e);
    // as if the data directory predated the step
    let db_path = dir.path().join(switchboard_embedded::runtime::DB_FILE);
    let conn = rusqlite::Connection::open(&db_path).unwrap();
    let step = step_of(switchboard_embedded::schema::store::ACTIVITY);
    conn.execute_batch(&format!("DROP TABLE activity_hourly; PRAGMA user_version = {step};")).unwrap();
    drop(conn);
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[{"then":{"text":"x"}}]}"#).unwrap());
    let e = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    let after = e.store.activity(&t, h, h + chrono::Duration::hours(1)).await.unwrap();
    let shape: Vec<_> = after.iter().map(|r| (r.hour, r.status, r.executions)).collect();
    assert_eq!(shape, [(h, ExecutionStatus::Success, 2), (h + chrono::Duration::hours(1), ExecutionStatus::Failed, 1)]);
    assert_eq!(after, before, "the same counts as kept at commit");
}

/// The `user_version` of a data directory that predates `step` (the steps after it are
/// written so that applying them again is harmless).
fn step_of(step: &str) -> i64 {
    let steps = switchboard_embedded::schema::MIGRATIONS;
    i64::try_from(steps.iter().position(|s| *s == step).unwrap()).unwrap()
}

/// The held slots a tenant's kept count says, and the slots it holds.
fn slot_counts(dir: &std::path::Path, tenant: &str) -> (i64, i64) {
    use rusqlite::OptionalExtension as _;
    let conn = rusqlite::Connection::open(dir.join(switchboard_embedded::runtime::DB_FILE)).unwrap();
    let kept: Option<i64> = conn
        .query_row("SELECT held FROM session_slot_counts WHERE tenant_id = ?1", [tenant], |r| r.get(0))
        .optional()
        .unwrap();
    let rows: i64 =
        conn.query_row("SELECT count(*) FROM session_slots WHERE tenant_id = ?1", [tenant], |r| r.get(0)).unwrap();
    (kept.unwrap_or(0), rows)
}

#[tokio::test]
async fn the_held_slot_count_follows_every_take_and_release_and_is_filled_when_its_step_is_applied() {
    use switchboard_engine::{ConfigAdmin, Counters, Slot};
    let clock = clock();
    let (e, dir) = open(clock.clone(), 5);
    let (t1, t2): (TenantId, TenantId) = ("t-1".parse().unwrap(), "t-2".parse().unwrap());
    for t in [&t1, &t2] {
        assert!(e.store.create_tenant(t, "T").await.unwrap());
    }
    let now = clock.now();
    let until = now + chrono::Duration::minutes(1);
    for i in 0..3 {
        assert_eq!(e.store.hold_slot(&t1, &format!("c-{i}"), 3, now, until).await.unwrap(), Slot::Held { new: true });
    }
    assert_eq!(e.store.hold_slot(&t2, "c-0", 3, now, until).await.unwrap(), Slot::Held { new: true });
    // a renewal and a refusal take nothing
    assert_eq!(e.store.hold_slot(&t1, "c-0", 3, now, until).await.unwrap(), Slot::Held { new: false });
    assert_eq!(e.store.hold_slot(&t1, "c-3", 3, now, until).await.unwrap(), Slot::Full { frees_at: until });
    assert_eq!((slot_counts(dir.path(), "t-1"), slot_counts(dir.path(), "t-2")), ((3, 3), (1, 1)));
    e.store.release_slot(&t1, "c-1").await.unwrap();
    assert_eq!(slot_counts(dir.path(), "t-1"), (2, 2));
    // every slot held and expired: they are freed for the new one
    clock.advance(chrono::Duration::minutes(2));
    let (now, until) = (clock.now(), clock.now() + chrono::Duration::minutes(1));
    assert_eq!(e.store.hold_slot(&t1, "c-4", 2, now, until).await.unwrap(), Slot::Held { new: true });
    assert_eq!(slot_counts(dir.path(), "t-1"), (1, 1));
    assert!(e.store.delete_tenant(&t2).await.unwrap());
    assert_eq!(slot_counts(dir.path(), "t-2"), (0, 0));
    drop(e);

    // a data directory from before the count: filled from the slots held when the step applies
    let conn = rusqlite::Connection::open(dir.path().join(switchboard_embedded::runtime::DB_FILE)).unwrap();
    conn.execute_batch(&format!(
        "DROP TRIGGER session_slot_taken; DROP TRIGGER session_slot_freed; DROP TABLE session_slot_counts;
         INSERT INTO session_slots VALUES ('t-1', 'c-5', 0), ('t-3', 'c-0', 0);
         PRAGMA user_version = {};",
        step_of(switchboard_embedded::schema::store::SLOT_COUNTS)
    ))
    .unwrap();
    drop(conn);
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[{"then":{"text":"x"}}]}"#).unwrap());
    let e = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    assert_eq!((slot_counts(dir.path(), "t-1"), slot_counts(dir.path(), "t-3")), ((2, 2), (1, 1)));
    // and kept from then on
    e.store.release_slot(&t1, "c-5").await.unwrap();
    assert_eq!(slot_counts(dir.path(), "t-1"), (1, 1));
}

/// A data directory from before the leaner conversation log (schema step 12) keeps its messages,
/// their order, senders and reply keys; new messages come after them.
#[tokio::test]
async fn the_conversation_log_is_rebuilt_leaner_with_its_messages() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join(switchboard_embedded::runtime::DB_FILE);
    let step = step_of(switchboard_embedded::schema::store::LEANER_MESSAGES);
    {
        let conn = rusqlite::Connection::open(&db_path).unwrap();
        for s in &switchboard_embedded::schema::MIGRATIONS[..usize::try_from(step).unwrap()] {
            conn.execute_batch(s).unwrap();
        }
        conn.execute_batch(&format!(
            "INSERT INTO messages (seq, tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at, sender)
                 VALUES (7, 't-a', 'c-1', 'm-1', 'inbound', 'question', NULL, '2026-11-01T00:00:00+00:00', NULL),
                        (8, 't-a', 'c-1', 'reply-1', 'outbound', 'answer', 'evt-1/0', '2026-11-01T00:00:01+00:00', NULL),
                        (9, 't-a', 'c-1', 'human-1', 'outbound', 'a person here', 'op-1', '2026-11-01T00:00:02+00:00', 'human');
             PRAGMA user_version = {step};"
        ))
        .unwrap();
        let counter: i64 =
            conn.query_row("SELECT seq FROM sqlite_sequence WHERE name = 'messages'", [], |r| r.get(0)).unwrap();
        assert_eq!(counter, 9, "the old table kept its counter");
    }
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[{"then":{"text":"x"}}]}"#).unwrap());
    let e = Embedded::open(dir.path(), model, clock(), EmbeddedOptions::default()).unwrap();
    let t: TenantId = "t-a".parse().unwrap();
    let log = |e: &Embedded| {
        let store = e.store.clone();
        let t = t.clone();
        async move {
            store.messages(&t, "c-1", 10).await.unwrap().into_iter().map(|m| (m.text, m.sender)).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        log(&e).await,
        [
            ("question".to_owned(), Sender::Customer),
            ("answer".to_owned(), Sender::Agent),
            ("a person here".to_owned(), Sender::Human)
        ]
    );
    // a reply's key still deduplicates; an inbound message has none, and two of them do not collide
    let (_, duplicate) = e.store.record_sent(&t, "c-1", "answer", "evt-1/0", Sender::Agent).await.unwrap();
    assert!(duplicate);
    assert!(e.store.record_inbound(&t, "c-1", "m-2", "another question").await.unwrap());
    let (_, duplicate) = e.store.record_sent(&t, "c-1", "another answer", "evt-2/0", Sender::Agent).await.unwrap();
    assert!(!duplicate);
    assert_eq!(log(&e).await.len(), 5);
    assert_eq!(
        log(&e).await[3..],
        [("another question".to_owned(), Sender::Customer), ("another answer".to_owned(), Sender::Agent)]
    );
    // the new rows come after the old ones, and no counter row is kept for the log any more
    let conn = rusqlite::Connection::open(&db_path).unwrap();
    let seqs: Vec<i64> = conn
        .prepare("SELECT seq FROM messages ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(seqs[..3], [7, 8, 9]);
    assert!(seqs[3] > 9 && seqs[4] > seqs[3], "{seqs:?}");
    let counters: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_sequence WHERE name = 'messages'", [], |r| r.get(0)).unwrap();
    assert_eq!(counters, 0);
    // and a reply's key is found through its (partial) index, not by scanning the tenant's log
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT message_id FROM messages WHERE tenant_id = ?1 AND idempotency_key = ?2",
            ["t-a", "evt-1/0"],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("messages_by_idempotency_key"), "{plan}");
}

/// A data directory from before the sessions' plain row numbers (schema step 13) keeps its
/// sessions and which of a conversation's is the newest; a new session comes after them, and the
/// one-active-session rule still holds.
#[tokio::test]
async fn the_sessions_are_rebuilt_without_a_counter_row_and_keep_their_order() {
    use switchboard_domain::SessionStatus;
    let clock = clock();
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join(switchboard_embedded::runtime::DB_FILE);
    let step = step_of(switchboard_embedded::schema::store::LEANER_SESSIONS);
    let t: TenantId = "t-a".parse().unwrap();
    let session = |conversation: &str, status: SessionStatus| {
        let mut s = Session::start(t.clone(), conversation.into(), AgentId::generate(), clock.now());
        s.status = status;
        s
    };
    // c-1: an older and a newer completed session, stored in that order; c-2: an active one
    let (older, newer, other) = (
        session("c-1", SessionStatus::Completed),
        session("c-1", SessionStatus::Completed),
        session("c-2", SessionStatus::Active),
    );
    {
        let conn = rusqlite::Connection::open(&db_path).unwrap();
        for s in &switchboard_embedded::schema::MIGRATIONS[..usize::try_from(step).unwrap()] {
            conn.execute_batch(s).unwrap();
        }
        for (seq, s, status) in [(4, &older, "completed"), (5, &newer, "completed"), (6, &other, "active")] {
            conn.execute(
                "INSERT INTO sessions (seq, tenant_id, session_id, conversation_id, status, version, body)
                 VALUES (?1, 't-a', ?2, ?3, ?4, 0, ?5)",
                rusqlite::params![
                    seq,
                    s.session_id.to_string(),
                    s.conversation_id,
                    status,
                    serde_json::to_string(s).unwrap()
                ],
            )
            .unwrap();
        }
        conn.execute_batch(&format!("PRAGMA user_version = {step};")).unwrap();
        let counter: i64 =
            conn.query_row("SELECT seq FROM sqlite_sequence WHERE name = 'sessions'", [], |r| r.get(0)).unwrap();
        assert_eq!(counter, 6, "the old table kept its counter");
    }
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[{"then":{"text":"x"}}]}"#).unwrap());
    let e = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    let ids = |sessions: Vec<Session>| sessions.into_iter().map(|s| s.session_id).collect::<Vec<_>>();
    assert_eq!(ids(e.store.sessions_for_conversation(&t, "c-1").await.unwrap()), [older.session_id, newer.session_id]);
    assert_eq!(e.store.latest_session(&t, "c-1").await.unwrap().unwrap().session_id, newer.session_id);
    assert_eq!(e.store.latest_session(&t, "c-2").await.unwrap().unwrap().session_id, other.session_id);
    // a new session of c-1 is its newest from then on
    let next = session("c-1", SessionStatus::Active);
    e.store
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![SessionWrite { session: next.clone(), expected_version: None }],
            execution: record(&t, next.session_id, "evt-1", clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap();
    assert_eq!(
        ids(e.store.sessions_for_conversation(&t, "c-1").await.unwrap()),
        [older.session_id, newer.session_id, next.session_id]
    );
    assert_eq!(e.store.latest_session(&t, "c-1").await.unwrap().unwrap().session_id, next.session_id);
    // a second active session of c-2 is still refused by the rebuilt index
    let twin = session("c-2", SessionStatus::Active);
    let err = e
        .store
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![SessionWrite { session: twin.clone(), expected_version: None }],
            execution: record(&t, twin.session_id, "evt-2", clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)), "{err:?}");
    // the new row is numbered above the old ones, and no counter row is kept for sessions any more
    let conn = rusqlite::Connection::open(&db_path).unwrap();
    let seq: i64 = conn
        .query_row("SELECT seq FROM sessions WHERE session_id = ?1", [next.session_id.to_string()], |r| r.get(0))
        .unwrap();
    assert!(seq > 6, "{seq}");
    let counters: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_sequence WHERE name = 'sessions'", [], |r| r.get(0)).unwrap();
    assert_eq!(counters, 0);
}

/// Keys made before principals keep what they could do: the admin key is the principal `admin`
/// with the admin role, a tenant's key its owner, named after its id.
#[tokio::test]
async fn keys_from_before_principals_keep_their_reach_when_the_step_is_applied() {
    use switchboard_domain::access::Role;
    let clock = clock();
    let (e, dir) = open(clock.clone(), 5);
    let t: TenantId = "t-1".parse().unwrap();
    assert!(e.store.create_tenant(&t, "T").await.unwrap());
    drop(e);
    // as if the data directory predated the step: the old table and its rows
    let db_path = dir.path().join(switchboard_embedded::runtime::DB_FILE);
    let conn = rusqlite::Connection::open(&db_path).unwrap();
    let step = step_of(switchboard_embedded::schema::store::API_KEY_GRANTS);
    let (tenant_key, admin_key) = ("a".repeat(64), "b".repeat(64));
    conn.execute_batch(&format!(
        "DROP TABLE api_keys;
         CREATE TABLE api_keys (key_hash TEXT PRIMARY KEY, tenant_id TEXT REFERENCES tenants (tenant_id),
                                created_at TEXT NOT NULL) STRICT;
         INSERT INTO api_keys VALUES ('{tenant_key}', 't-1', '2026-01-01T00:00:00+00:00'),
                                     ('{admin_key}', NULL, '2026-01-01T00:00:00+00:00');
         -- what the later steps added that replaying them would add again (step 23's column)
         DROP INDEX sessions_by_idle;
         ALTER TABLE sessions DROP COLUMN idle_ms;
         PRAGMA user_version = {step};"
    ))
    .unwrap();
    drop(conn);
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[]}"#).unwrap());
    let e = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    let owner = e.store.api_key(&tenant_key).await.unwrap().unwrap();
    assert_eq!((owner.tenant, owner.principal.as_str(), owner.role), (Some(t), "key aaaaaaaaaaaaaaaa", Role::Owner));
    assert_eq!((owner.expires_at, owner.last_used_at), (None, None));
    let admin = e.store.api_key(&admin_key).await.unwrap().unwrap();
    assert_eq!((admin.tenant, admin.principal.as_str(), admin.role), (None, "admin", Role::Admin));
    assert!(e.store.has_admin_key().await.unwrap());
}
