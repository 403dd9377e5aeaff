//! The adapter contract suite: one set of behaviours, run against the embedded adapters
//! (SQLite store and queue) and the AWS adapters (DynamoDB and SQS on the moto emulator), so
//! that the two profiles cannot drift. Each behaviour is a plain async function over a
//! [`Subject`]; the `contract!` macro runs every one on both.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use switchboard_testkit::aws as common;
use switchboard_testkit::by;

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use switchboard_aws::{AwsClients, AwsSettings, DynamoStore, S3Archive, SqsWorkQueue};
use switchboard_domain::OutboundEvent;
use switchboard_domain::{
    Agent, AgentId, Approval, ApprovalStatus, Assignment, Blob, ChildExecution, CoalescedMessage, Cost, EventType,
    ExecutionId, ExecutionRecord, ExecutionStatus, HandoffTarget, ModelCallRecord, OnLimit, PausedTurn, Recording,
    Session, SessionId, SessionStatus, Tenant, TenantId, TenantLimits, TenantStatus, TokenUsage, Trigger, TriggerId,
    UsageCounts, hour_of,
};
use switchboard_embedded::{Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::EventLog;
use switchboard_engine::{
    Clock, ConfigAdmin, ConfigKind, ConfigRecord, ConfigService, ConfigStore, ConfigWriteError, Counters, ExecutionLog,
    SessionFilter, SessionStore, SessionWrite, Slot, StoreError, TurnCommit, WorkItem, WorkQueue,
};

use common::ManualClock;

mod idle;
use idle::idle_sessions_are_listed_when_due_until_written_otherwise_and_close_once;
mod insights;
use insights::a_week_of_traffic_gives_the_insights_the_figures_computed_from_it;

// ---- the subject under test -----------------------------------------------------------------------

/// Reads the queue back as its consumer would: `(group id, dedup id, body)`, oldest first.
#[async_trait]
trait QueueProbe: Send + Sync {
    async fn drain(&self) -> Vec<(String, String, String)>;
}

struct Subject {
    clock: Arc<ManualClock>,
    config: Arc<dyn ConfigStore>,
    config_admin: Arc<dyn ConfigAdmin>,
    sessions: Arc<dyn SessionStore>,
    executions: Arc<dyn ExecutionLog>,
    queue: Arc<dyn WorkQueue>,
    /// Configuration writes with their rules, over this subject's stores (as the API makes them).
    service: ConfigService,
    probe: Arc<dyn QueueProbe>,
    /// Tenant counters as two processes (Lambda containers on AWS) see them.
    counters: [Arc<dyn Counters>; 2],
    /// Whether `delete_tenant` works in bounded calls here (DynamoDB, with a small budget).
    bounded_deletes: bool,
    /// Whether the session store keeps each conversation's newest arrival (DynamoDB: SQS cannot
    /// show a running turn its group's later messages; the embedded queue can).
    notes_arrivals: bool,
    /// Where schedule triggers' next slots are kept and claimed.
    schedules: Arc<dyn switchboard_engine::ScheduleStore>,
    /// Writing an event into the tenant's event log on its own (a turn's are written by its
    /// commit), and reading the log back.
    log: Arc<dyn LogEvent>,
    events: Arc<dyn EventLog>,
    _keep: Box<dyn Any + Send + Sync>,
}

/// Logs one event, as each profile's store does.
#[async_trait]
trait LogEvent: Send + Sync {
    async fn log(&self, event: &OutboundEvent);
}

#[async_trait]
impl LogEvent for DynamoStore {
    async fn log(&self, event: &OutboundEvent) {
        self.log_event(event).await.unwrap();
    }
}

#[async_trait]
impl LogEvent for switchboard_embedded::SqliteStore {
    async fn log(&self, event: &OutboundEvent) {
        self.log_event(event).await.unwrap();
    }
}

#[async_trait]
impl QueueProbe for switchboard_embedded::SqliteWorkQueue {
    async fn drain(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        while let Some(d) = self.receive().await.unwrap() {
            self.ack(&d.receipt).await.unwrap();
            out.push((d.group_id, d.dedup_id, d.body));
        }
        out
    }
}

#[derive(Debug)]
struct SqsProbe(aws_sdk_sqs::Client, String);

#[async_trait]
impl QueueProbe for SqsProbe {
    async fn drain(&self) -> Vec<(String, String, String)> {
        common::drain_queue(&self.0, &self.1).await
    }
}

async fn embedded() -> Subject {
    let clock = ManualClock::new();
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[{"then":{"text":"x"}}]}"#).unwrap());
    let e = Embedded::open(dir.path(), model, clock.clone(), EmbeddedOptions::default()).unwrap();
    let store = Arc::new(e.store.clone());
    let queue = Arc::new(e.queue.clone());
    Subject {
        clock: clock.clone(),
        config: store.clone(),
        config_admin: store.clone(),
        sessions: store.clone(),
        executions: store.clone(),
        queue: queue.clone(),
        service: ConfigService::new(store.clone(), store.clone()).with_clock(clock.clone()),
        probe: queue,
        // One process holds the database: a second handle shares its connection.
        counters: [store.clone(), Arc::new(e.store.clone())],
        bounded_deletes: false,
        notes_arrivals: false,
        schedules: store.clone(),
        log: store.clone(),
        events: store.clone(),
        _keep: Box::new((dir, e)),
    }
}

async fn aws() -> Subject {
    let clock = ManualClock::new();
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let names = common::provision(&sdk).await;
    let clients = AwsClients::new(&sdk);
    // A small deletion budget, so that deleting a tenant takes several calls here; large pieces of
    // recorded content in a bucket, as the deployed executor and API keep them.
    let bucket = S3Archive::new(S3Archive::client(&sdk, true), common::create_bucket(&sdk).await, "");
    let store = Arc::new(
        DynamoStore::new(clients.dynamodb.clone(), names.clone(), clock.clone())
            .with_delete_budget(25)
            .with_large_content(&bucket),
    );
    let store_for_schedules = store.clone();
    Subject {
        clock: clock.clone(),
        config: store.clone(),
        config_admin: store.clone(),
        sessions: store.clone(),
        executions: store.clone(),
        queue: Arc::new(SqsWorkQueue::new(clients.sqs.clone(), names.work_queue_url.clone())),
        service: ConfigService::new(store.clone(), store.clone()).with_clock(clock.clone()),
        probe: Arc::new(SqsProbe(clients.sqs, names.work_queue_url.clone())),
        // A second container: its own SDK client and store over the same tables.
        log: store.clone(),
        events: store.clone(),
        counters: [store, {
            let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
            Arc::new(DynamoStore::new(AwsClients::new(&sdk).dynamodb, names, clock.clone()))
        }],
        bounded_deletes: true,
        notes_arrivals: true,
        schedules: store_for_schedules,
        _keep: Box::new(()),
    }
}

macro_rules! contract {
    ($($behaviour:ident),* $(,)?) => {
        mod embedded_profile {
            $(#[tokio::test] async fn $behaviour() { super::$behaviour(&super::embedded().await).await; })*
        }
        mod aws_profile {
            $(#[tokio::test] async fn $behaviour() { super::$behaviour(&super::aws().await).await; })*
        }
    };
}

contract!(
    a_week_of_traffic_gives_the_insights_the_figures_computed_from_it,
    idle_sessions_are_listed_when_due_until_written_otherwise_and_close_once,
    a_turn_creates_then_updates_a_session,
    a_sessions_version_reads_alone_as_stored_and_none_for_another_tenant,
    a_stale_version_conflicts_and_writes_nothing,
    a_second_active_session_conflicts_but_a_handoff_commits,
    a_recorded_source_is_a_duplicate_and_writes_nothing,
    latest_session_is_the_active_one_else_the_newest,
    sessions_of_a_conversation_come_oldest_first,
    routing_sees_the_conversations_newest_session_and_who_owns_it,
    executions_page_with_a_cursor_across_pages,
    expired_executions_are_never_returned,
    another_tenants_ids_return_nothing,
    triggers_come_active_and_in_evaluation_order,
    the_queue_groups_by_conversation_and_deduplicates,
    two_tenants_equal_source_ids_are_both_queued,
    the_same_message_under_a_new_event_id_is_queued_once_per_tenant,
    config_writes_are_conditional_on_version_and_list_in_pages,
    every_config_write_keeps_a_version_with_it_newest_first,
    skills_read_back_by_id_only_in_their_tenant,
    the_config_service_keeps_references_within_the_tenant,
    a_schedule_triggers_slot_is_kept_with_it_and_claimed_once,
    usage_adds_up_per_day_agent_and_model_once_per_source,
    activity_counts_executions_per_hour_and_status_once_per_source,
    split_variants_add_up_per_hour_trigger_variant_and_status_once_per_source,
    a_bursts_earlier_messages_are_recorded_with_its_turn_once_and_counted_nowhere,
    a_tenant_reads_back_and_its_name_and_status_change,
    counters_admit_exactly_the_limit_across_processes,
    session_slots_stay_within_the_limit_across_processes,
    a_slot_and_a_count_are_asked_together_and_a_refused_count_takes_no_slot,
    an_admission_counts_nothing_for_a_conversation_a_human_owns,
    sessions_list_newest_first_narrowed_and_paged,
    deleting_a_tenant_removes_everything_it_kept_and_nothing_of_another,
    the_event_log_keeps_each_event_once_in_order_and_per_tenant,
    a_turns_events_are_logged_with_its_commit_and_not_without_it,
    recorded_content_is_kept_per_session_expires_and_goes_with_the_tenant,
    paused_turns_are_listed_longest_waiting_first_by_tenant_or_all_until_written_without,
    a_resumed_execution_replaces_its_paused_record_once_and_counts_only_what_it_adds,
    a_conversations_newest_arrival_is_kept_where_its_queue_cannot_show_it,
);

async fn a_conversations_newest_arrival_is_kept_where_its_queue_cannot_show_it(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    x.config_admin.create_tenant(&t, "Tenant").await.unwrap();
    let now = x.clock.now();
    let arrival = |id: &str, ms: i64| switchboard_engine::Arrival {
        source_id: format!("message-c-1:{id}"),
        message_id: id.into(),
        arrived_at: now + Duration::milliseconds(ms),
    };
    // given two messages noted in the order they came, and a late note of an earlier one
    for noted in [arrival("m-2", 10), arrival("m-3", 20), arrival("m-1", 0)] {
        x.sessions.note_arrival(&t, "c-1", &noted).await.unwrap();
    }
    let newest = x.sessions.newest_arrival(&t, "c-1").await.unwrap();
    if !x.notes_arrivals {
        // the embedded profile's running turn reads its queue instead: nothing is kept
        assert_eq!(newest, None);
        return;
    }
    // then the newest arrival is kept, whatever order the notes came in
    assert_eq!(newest, Some(arrival("m-3", 20)));
    // and only for its conversation of its tenant
    assert_eq!(x.sessions.newest_arrival(&t, "c-2").await.unwrap(), None);
    assert_eq!(x.sessions.newest_arrival(&other, "c-1").await.unwrap(), None);
    // and it goes with the tenant
    while !x.config_admin.delete_tenant(&t).await.unwrap() {}
    assert_eq!(x.sessions.newest_arrival(&t, "c-1").await.unwrap(), None);
}

// ---- fixtures ------------------------------------------------------------------------------------------

/// `s` with its turn paused for an approval of `tool`, requested at `at`.
fn paused(s: &Session, source: &str, execution: ExecutionId, at: DateTime<Utc>) -> Session {
    let mut s = s.clone();
    let arguments = json!({"amount": 250});
    s.paused = Some(Box::new(PausedTurn {
        approval: Approval {
            approval_id: ulid::Ulid::generate().to_string(),
            execution_id: execution,
            session_id: s.session_id,
            conversation_id: s.conversation_id.clone(),
            agent_id: s.agent_id,
            tool_use_id: "tu-1".into(),
            tool: "refund".into(),
            arguments_sha256: "0".repeat(64),
            arguments,
            requested_at: at,
            expires_at: at + Duration::days(1),
            status: ApprovalStatus::Pending,
            decided_by: None,
            decided_at: None,
            reason: None,
            edited_arguments: None,
        },
        source_id: source.into(),
        state: json!({"opaque": true}),
    }));
    s
}

/// A first turn of a new session that pauses at `at` (its record `awaiting_approval`).
fn pausing(t: &TenantId, conversation: &str, source: &str, at: DateTime<Utc>) -> (Session, TurnCommit) {
    let mut commit = create(&start(t, conversation, at), source, at);
    commit.execution.status = ExecutionStatus::AwaitingApproval;
    let session = paused(&commit.sessions[0].session, source, commit.execution.execution_id, at);
    commit.sessions[0].session = session.clone();
    (session, commit)
}

/// A trigger written straight to the store, past the configuration service: the suite stores
/// triggers of other event types (which the service refuses) to prove the store never returns
/// them for message.new.
async fn raw_trigger(x: &Subject, t: &Trigger) {
    let first_version = Trigger { version: 1, ..t.clone() };
    x.config_admin.put_config(&ConfigRecord::Trigger(first_version), None, &by()).await.unwrap();
}

fn tenant(s: &str) -> TenantId {
    s.parse().unwrap()
}

fn agent(t: &TenantId) -> Agent {
    serde_json::from_value(json!({
        "tenantId": t, "agentId": AgentId::generate(), "name": "Support", "systemPrompt": "Be kind.",
        "model": "m", "tools": ["send_message"], "modelConfig": {"temperature": 0.3, "maxTokens": 300},
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap()
}

fn trigger(t: &TenantId, a: AgentId, id: TriggerId, priority: i32, event: &str, status: &str) -> Trigger {
    serde_json::from_value(json!({
        "tenantId": t, "triggerId": id, "name": format!("p{priority}"), "agentId": a, "eventType": event,
        "priority": priority, "status": status,
        "conditions": {"all": [{"field": "message.text", "operator": "contains", "value": "help"}]},
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap()
}

/// An execution id minted from `at`, so that id order is time order (as in production).
fn execution_id(at: DateTime<Utc>) -> ExecutionId {
    ExecutionId(ulid::Ulid::from_parts(u64::try_from(at.timestamp_millis()).unwrap(), rand_bits()))
}

fn rand_bits() -> u128 {
    ulid::Ulid::generate().random()
}

fn record(s: &Session, source: &str, now: DateTime<Utc>) -> ExecutionRecord {
    ExecutionRecord {
        tenant_id: s.tenant_id.clone(),
        execution_id: execution_id(now),
        session_id: s.session_id,
        agent_id: s.agent_id,
        trigger_id: None,
        source_id: source.into(),
        input: json!({"text": "hello", "n": 3, "ratio": 0.5, "neg": -7, "nested": {"list": [1, "two", null]}}),
        status: ExecutionStatus::Success,
        error: None,
        iterations: 1,
        model_calls: vec![],
        tool_calls: vec![],
        actions: vec![],
        token_usage: TokenUsage::new(10, 5),
        cost_usd: None,
        price_version: None,
        ran_with: None,
        latency_ms: 12,
        created_at: now,
        children: vec![],
        coalesced: vec![],
        coalesced_into: None,
        interrupted_by: None,
        expires_at: now + Duration::days(30),
        hook_calls: vec![],
        approvals: vec![],
        // as the engine records it: the session's split
        split: s.split.clone(),
    }
}

fn start(t: &TenantId, conversation: &str, now: DateTime<Utc>) -> Session {
    Session::start(t.clone(), conversation.into(), AgentId::generate(), now)
}

fn create(s: &Session, source: &str, now: DateTime<Utc>) -> TurnCommit {
    TurnCommit {
        events: vec![],
        sessions: vec![SessionWrite { session: s.clone(), expected_version: None }],
        execution: record(s, source, now),
        content: vec![],
        resumes: None,
        coalesced: vec![],
    }
}

/// The next version of `s`, as the executor writes it.
fn bump(s: &Session, now: DateTime<Utc>) -> Session {
    let mut next = s.clone();
    next.version += 1;
    next.turn_count += 1;
    next.updated_at = now;
    next.memory.insert("k".into(), json!({"v": next.version}));
    next
}

fn update(s: &Session, source: &str, now: DateTime<Utc>) -> (Session, TurnCommit) {
    let next = bump(s, now);
    let commit = TurnCommit {
        events: vec![],
        sessions: vec![SessionWrite { session: next.clone(), expected_version: Some(s.version) }],
        execution: record(&next, source, now),
        content: vec![],
        resumes: None,
        coalesced: vec![],
    };
    (next, commit)
}

fn ids(sessions: &[Session]) -> Vec<SessionId> {
    sessions.iter().map(|s| s.session_id).collect()
}

// ---- behaviours -------------------------------------------------------------------------------------------

async fn a_turn_creates_then_updates_a_session(x: &Subject) {
    // given a new session committed with its first execution
    let t = tenant("t-1");
    let now = x.clock.now();
    let s = start(&t, "c-1", now);
    let first = create(&s, "evt-1", now);
    x.sessions.commit_turn(&first).await.unwrap();
    assert_eq!(x.sessions.get_session(&t, s.session_id).await.unwrap(), Some(s.clone()));
    assert_eq!(x.executions.execution_for_source(&t, "evt-1").await.unwrap(), Some(first.execution.clone()));
    // when the next turn updates it on the version it read
    x.clock.advance(Duration::seconds(5));
    let (next, second) = update(&s, "evt-2", x.clock.now());
    x.sessions.commit_turn(&second).await.unwrap();
    // then both are stored exactly as written
    assert_eq!(x.sessions.get_session(&t, s.session_id).await.unwrap(), Some(next));
    assert_eq!(
        x.executions.get_execution(&t, second.execution.execution_id).await.unwrap(),
        Some(second.execution.clone())
    );
}

async fn a_sessions_version_reads_alone_as_stored_and_none_for_another_tenant(x: &Subject) {
    let t = tenant("t-1");
    let now = x.clock.now();
    let s = start(&t, "c-1", now);
    assert_eq!(x.sessions.session_version(&t, s.session_id).await.unwrap(), None, "not stored yet");
    x.sessions.commit_turn(&create(&s, "evt-1", now)).await.unwrap();
    let stored = x.sessions.get_session(&t, s.session_id).await.unwrap().unwrap().version;
    assert_eq!(x.sessions.session_version(&t, s.session_id).await.unwrap(), Some(stored));
    let (next, commit) = update(&s, "evt-2", now);
    x.sessions.commit_turn(&commit).await.unwrap();
    assert_eq!(x.sessions.session_version(&t, s.session_id).await.unwrap(), Some(next.version));
    assert_ne!(next.version, stored, "the version a running turn compares moved on");
    assert_eq!(x.sessions.session_version(&tenant("t-2"), s.session_id).await.unwrap(), None);
}

async fn a_stale_version_conflicts_and_writes_nothing(x: &Subject) {
    let t = tenant("t-1");
    let now = x.clock.now();
    let s = start(&t, "c-1", now);
    x.sessions.commit_turn(&create(&s, "evt-1", now)).await.unwrap();
    let (v1, commit) = update(&s, "evt-2", now);
    x.sessions.commit_turn(&commit).await.unwrap();
    // when a turn that read version 0 commits after version 1 was written
    let (_, stale) = update(&s, "evt-3", now);
    let err = x.sessions.commit_turn(&stale).await.unwrap_err();
    // then it conflicts, and neither the session nor the execution was written
    assert!(matches!(err, StoreError::VersionConflict(_)), "{err:?}");
    assert_eq!(x.sessions.get_session(&t, s.session_id).await.unwrap(), Some(v1));
    assert_eq!(x.executions.execution_for_source(&t, "evt-3").await.unwrap(), None);
    assert_eq!(x.executions.get_execution(&t, stale.execution.execution_id).await.unwrap(), None);
}

async fn a_second_active_session_conflicts_but_a_handoff_commits(x: &Subject) {
    let t = tenant("t-1");
    let now = x.clock.now();
    let first = start(&t, "c-1", now);
    x.sessions.commit_turn(&create(&first, "evt-1", now)).await.unwrap();
    // when a second active session starts in the same conversation
    x.clock.advance(Duration::seconds(1));
    let rival = start(&t, "c-1", x.clock.now());
    let err = x.sessions.commit_turn(&create(&rival, "evt-2", x.clock.now())).await.unwrap_err();
    // then it loses like a stale write, and nothing of it is stored
    assert!(matches!(err, StoreError::VersionConflict(_)), "{err:?}");
    assert_eq!(x.sessions.get_session(&t, rival.session_id).await.unwrap(), None);
    assert_eq!(x.executions.execution_for_source(&t, "evt-2").await.unwrap(), None);
    // but a handoff (the active session ends, its successor starts) commits in one turn
    let mut handed = bump(&first, x.clock.now());
    handed.status = SessionStatus::HandedOff;
    let mut next = start(&t, "c-1", x.clock.now());
    next.parent_session_id = Some(first.session_id);
    next.handoff_depth = 1;
    x.sessions
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![
                SessionWrite { session: handed.clone(), expected_version: Some(first.version) },
                SessionWrite { session: next.clone(), expected_version: None },
            ],
            execution: record(&handed, "evt-3", x.clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap();
    assert_eq!(x.sessions.latest_session(&t, "c-1").await.unwrap(), Some(next.clone()));
    // and once that one completes, a new active session may start again
    let mut done = bump(&next, x.clock.now());
    done.status = SessionStatus::Completed;
    x.sessions
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![SessionWrite { session: done.clone(), expected_version: Some(next.version) }],
            execution: record(&done, "evt-4", x.clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap();
    x.clock.advance(Duration::seconds(1));
    let again = start(&t, "c-1", x.clock.now());
    x.sessions.commit_turn(&create(&again, "evt-5", x.clock.now())).await.unwrap();
    assert_eq!(x.sessions.latest_session(&t, "c-1").await.unwrap(), Some(again));
}

async fn a_recorded_source_is_a_duplicate_and_writes_nothing(x: &Subject) {
    let t = tenant("t-1");
    let now = x.clock.now();
    let s = start(&t, "c-1", now);
    let first = create(&s, "evt-1", now);
    x.sessions.commit_turn(&first).await.unwrap();
    // when another turn (here in another conversation) records the same source
    let other = start(&t, "c-2", now);
    let err = x.sessions.commit_turn(&create(&other, "evt-1", now)).await.unwrap_err();
    // then it is a duplicate, and its session was not written
    assert!(matches!(err, StoreError::Duplicate(_)), "{err:?}");
    assert_eq!(x.sessions.get_session(&t, other.session_id).await.unwrap(), None);
    assert_eq!(x.sessions.latest_session(&t, "c-2").await.unwrap(), None);
    assert_eq!(x.executions.execution_for_source(&t, "evt-1").await.unwrap(), Some(first.execution));
    // and the same source in another tenant is another source
    let t2 = tenant("t-2");
    x.sessions.commit_turn(&create(&start(&t2, "c-1", now), "evt-1", now)).await.unwrap();
}

fn call(model: &str, input: u64, output: u64, cost_nanos: Option<u64>) -> ModelCallRecord {
    ModelCallRecord {
        model: model.into(),
        stop_reason: "end_turn".into(),
        usage: TokenUsage::new(input, output),
        cost_usd: cost_nanos.map(Cost::from_nanos),
        latency_ms: 1,
        fallback_from: vec![],
        purpose: None,
        request: None,
        response: None,
        content: vec![],
    }
}

/// A turn of `s` that called `calls`, and a sub-agent `child` that called `child_calls`.
fn costly(
    s: &Session,
    source: &str,
    now: DateTime<Utc>,
    calls: Vec<ModelCallRecord>,
    child: Option<(AgentId, Vec<ModelCallRecord>)>,
) -> TurnCommit {
    let mut commit = create(s, source, now);
    commit.execution.model_calls = calls;
    if let Some((agent_id, model_calls)) = child {
        commit.execution.children.push(ChildExecution {
            tool_use_id: "tu-1".into(),
            agent_id,
            status: ExecutionStatus::Success,
            input: json!({}),
            result: None,
            error: None,
            iterations: 1,
            model_calls,
            tool_calls: vec![],
            token_usage: TokenUsage::default(),
            latency_ms: 1,
        });
    }
    commit
}

async fn usage_adds_up_per_day_agent_and_model_once_per_source(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    let day1 = x.clock.now();
    let today = day1.date_naive();
    let s = start(&t, "c-1", day1);
    let helper = AgentId::generate();
    // a turn with two priced calls, an unpriced one, and a sub-agent's priced call
    let calls = vec![
        call("openai:gpt-4o-mini", 100, 10, Some(21)),
        call("openai:gpt-4o-mini", 50, 5, Some(10)),
        call("scripted:demo", 7, 3, None),
    ];
    let first = costly(&s, "evt-1", day1, calls, Some((helper, vec![call("openai:gpt-4o-mini", 1, 1, Some(1))])));
    x.sessions.commit_turn(&first).await.unwrap();
    // the same source again (a redelivery racing the first) is not counted
    let again =
        costly(&start(&t, "c-2", day1), "evt-1", day1, vec![call("openai:gpt-4o-mini", 999, 999, Some(999))], None);
    assert!(matches!(x.sessions.commit_turn(&again).await, Err(StoreError::Duplicate(_))));
    // a second turn the same day adds to the same rows
    let (s2, mut second) = update(&s, "evt-2", day1);
    second.execution.model_calls = vec![call("openai:gpt-4o-mini", 10, 1, Some(3))];
    x.sessions.commit_turn(&second).await.unwrap();
    // another tenant's usage, and the next day's
    x.sessions
        .commit_turn(&costly(
            &start(&other, "c-1", day1),
            "evt-1",
            day1,
            vec![call("openai:gpt-4o-mini", 5, 5, Some(5))],
            None,
        ))
        .await
        .unwrap();
    let day2 = day1 + Duration::days(1);
    let (_, mut third) = update(&s2, "evt-3", day2);
    third.execution.created_at = day2;
    third.execution.model_calls = vec![call("scripted:demo", 1, 1, None)];
    x.sessions.commit_turn(&third).await.unwrap();

    let rows = x.executions.usage(&t, today, today).await.unwrap();
    let shape: Vec<_> = rows.iter().map(|r| (r.day, r.agent_id, r.model.as_str(), r.counts)).collect();
    let mine = first.execution.agent_id;
    let priced = |calls, input_tokens, output_tokens, nanos| UsageCounts {
        calls,
        input_tokens,
        output_tokens,
        cost_usd: Some(Cost::from_nanos(nanos)),
        ..UsageCounts::default()
    };
    let unpriced =
        UsageCounts { calls: 1, input_tokens: 7, output_tokens: 3, unpriced_calls: 1, ..UsageCounts::default() };
    let mut expected = vec![
        (today, mine, "openai:gpt-4o-mini", priced(3, 160, 16, 34)),
        (today, mine, "scripted:demo", unpriced),
        (today, helper, "openai:gpt-4o-mini", priced(1, 1, 1, 1)),
    ];
    expected.sort_by_key(|(d, a, m, _)| (*d, a.to_string(), m.to_string()));
    assert_eq!(shape, expected);
    // a range spans days; the other tenant's usage never shows
    let both = x.executions.usage(&t, today, today + Duration::days(1)).await.unwrap();
    assert_eq!(both.len(), 4);
    let last = both.last().unwrap();
    assert_eq!(
        (last.day, last.model.as_str(), last.counts.cost_usd, last.counts.unpriced_calls),
        (today + Duration::days(1), "scripted:demo", None, 1)
    );
    assert!(x.executions.usage(&t, today + Duration::days(2), today + Duration::days(9)).await.unwrap().is_empty());
    let theirs = x.executions.usage(&other, today, today + Duration::days(1)).await.unwrap();
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].counts, priced(1, 5, 5, 5));
}

async fn activity_counts_executions_per_hour_and_status_once_per_source(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    let h = hour_of(x.clock.now());
    let at = |hour: DateTime<Utc>, minute: i64, status: ExecutionStatus, mut c: TurnCommit| {
        c.execution.created_at = hour + Duration::minutes(minute);
        c.execution.status = status;
        c
    };
    let s = start(&t, "c-1", h);
    x.sessions.commit_turn(&at(h, 1, ExecutionStatus::Success, create(&s, "evt-1", h))).await.unwrap();
    // a redelivery of the same source is not counted, whatever status it would have had
    let again = at(h, 2, ExecutionStatus::Failed, create(&start(&t, "c-2", h), "evt-1", h));
    assert!(matches!(x.sessions.commit_turn(&again).await, Err(StoreError::Duplicate(_))));
    let (s, second) = update(&s, "evt-2", h);
    x.sessions.commit_turn(&at(h, 59, ExecutionStatus::HandedOff, second)).await.unwrap();
    let (s, third) = update(&s, "evt-3", h);
    x.sessions.commit_turn(&at(h, 30, ExecutionStatus::Success, third)).await.unwrap();
    // the next hour, and another tenant in the first
    let next = h + Duration::hours(1);
    let (_, fourth) = update(&s, "evt-4", next);
    x.sessions.commit_turn(&at(next, 0, ExecutionStatus::Failed, fourth)).await.unwrap();
    x.sessions
        .commit_turn(&at(h, 5, ExecutionStatus::Success, create(&start(&other, "c-1", h), "evt-1", h)))
        .await
        .unwrap();

    let shape = |rows: Vec<switchboard_domain::ActivityRow>| -> Vec<_> {
        rows.into_iter().map(|r| (r.hour, r.status, r.executions)).collect()
    };
    assert_eq!(
        shape(x.executions.activity(&t, h, h).await.unwrap()),
        vec![(h, ExecutionStatus::Success, 2), (h, ExecutionStatus::HandedOff, 1)],
        "by hour, then status in declaration order"
    );
    assert_eq!(
        shape(x.executions.activity(&t, h - Duration::hours(5), next).await.unwrap()),
        vec![(h, ExecutionStatus::Success, 2), (h, ExecutionStatus::HandedOff, 1), (next, ExecutionStatus::Failed, 1)]
    );
    assert!(x.executions.activity(&t, next + Duration::hours(1), next + Duration::hours(9)).await.unwrap().is_empty());
    assert_eq!(shape(x.executions.activity(&other, h, next).await.unwrap()), vec![(h, ExecutionStatus::Success, 1)]);
}

async fn a_bursts_earlier_messages_are_recorded_with_its_turn_once_and_counted_nowhere(x: &Subject) {
    let t = tenant("t-burst");
    let h = hour_of(x.clock.now());
    let s = start(&t, "c-1", h);
    // a turn of the third message that answers the first two with it
    let coalesce = |commit: &mut TurnCommit, earlier: &[&str]| {
        for source in earlier {
            commit
                .execution
                .coalesced
                .push(CoalescedMessage { message_id: (*source).into(), source_id: (*source).into() });
            let mut own = record(&s, source, h);
            own.status = ExecutionStatus::Coalesced;
            own.coalesced_into = Some(commit.execution.execution_id);
            own.token_usage = TokenUsage::default();
            commit.coalesced.push(own);
        }
    };
    let mut turn = create(&s, "m-3", h);
    coalesce(&mut turn, &["m-1", "m-2"]);
    x.sessions.commit_turn(&turn).await.unwrap();
    let id = turn.execution.execution_id;
    for source in ["m-1", "m-2"] {
        let own = x.executions.execution_for_source(&t, source).await.unwrap().unwrap();
        assert_eq!(
            (own.status, own.coalesced_into, own.session_id),
            (ExecutionStatus::Coalesced, Some(id), s.session_id)
        );
    }
    let read = x.executions.get_execution(&t, id).await.unwrap().unwrap();
    assert_eq!(read.coalesced.iter().map(|c| c.source_id.as_str()).collect::<Vec<_>>(), ["m-1", "m-2"]);
    // a turn that would record one of them again is refused whole: its own source stays free
    let (_, mut again) = update(&s, "m-4", h);
    coalesce(&mut again, &["m-2"]);
    assert!(matches!(x.sessions.commit_turn(&again).await, Err(StoreError::Duplicate(_))));
    assert!(x.executions.execution_for_source(&t, "m-4").await.unwrap().is_none());
    // the session lists all three records; only the turn counts in the activity
    let listed = x.executions.list_executions(&t, s.session_id, None, 10).await.unwrap();
    assert_eq!(listed.items.len(), 3);
    let activity = x.executions.activity(&t, h, h).await.unwrap();
    assert_eq!(activity.iter().map(|r| (r.status, r.executions)).collect::<Vec<_>>(), [(ExecutionStatus::Success, 1)]);
}

async fn split_variants_add_up_per_hour_trigger_variant_and_status_once_per_source(x: &Subject) {
    let (t, other) = (tenant("t-split"), tenant("t-other"));
    let h = hour_of(x.clock.now());
    let (first, second) = (TriggerId::generate(), TriggerId::generate());
    let assigned = |t: &TenantId, conversation: &str, trigger: TriggerId, variant: &str| {
        let mut s = start(t, conversation, h);
        s.split = Some(Assignment { trigger_id: trigger, variant: variant.into() });
        s
    };
    let turn = |s: &Session, source: &str, minute: i64, status: ExecutionStatus, latency: u64, cost: Option<u64>| {
        let mut c = costly(s, source, h, vec![call("m", 10, 5, cost)], None);
        c.execution.created_at = h + Duration::minutes(minute);
        c.execution.status = status;
        c.execution.latency_ms = latency;
        c
    };
    // the control of the first trigger: two executions of one session, one handed off
    let control = assigned(&t, "c-1", first, "control");
    x.sessions.commit_turn(&turn(&control, "evt-1", 1, ExecutionStatus::Success, 100, Some(3))).await.unwrap();
    let (_, mut handed) = update(&control, "evt-2", h);
    handed.execution.status = ExecutionStatus::HandedOff;
    handed.execution.latency_ms = 300;
    handed.execution.model_calls = vec![call("m", 20, 10, Some(7))];
    x.sessions.commit_turn(&handed).await.unwrap();
    // a redelivery of a recorded source adds nothing
    let again = turn(&assigned(&t, "c-9", first, "control"), "evt-1", 2, ExecutionStatus::Failed, 1, Some(1));
    assert!(matches!(x.sessions.commit_turn(&again).await, Err(StoreError::Duplicate(_))));
    // the candidate: one success with an unpriced call, one failure in the next hour
    let candidate = assigned(&t, "c-2", first, "candidate");
    x.sessions.commit_turn(&turn(&candidate, "evt-3", 3, ExecutionStatus::Success, 50, None)).await.unwrap();
    let next = h + Duration::hours(1);
    let late = turn(&assigned(&t, "c-3", first, "candidate"), "evt-4", 62, ExecutionStatus::Failed, 10, Some(2));
    x.sessions.commit_turn(&late).await.unwrap();
    // another trigger's split, a session no split assigned, another tenant's split
    x.sessions
        .commit_turn(&turn(&assigned(&t, "c-4", second, "a"), "evt-5", 4, ExecutionStatus::Ended, 5, Some(1)))
        .await
        .unwrap();
    x.sessions
        .commit_turn(&turn(&start(&t, "c-5", h), "evt-6", 5, ExecutionStatus::Success, 5, Some(1)))
        .await
        .unwrap();
    x.sessions
        .commit_turn(&turn(
            &assigned(&other, "c-1", first, "control"),
            "evt-1",
            6,
            ExecutionStatus::Success,
            9,
            Some(9),
        ))
        .await
        .unwrap();
    // one awaiting approval is not counted (its resumption is)
    let waiting =
        turn(&assigned(&t, "c-6", first, "control"), "evt-7", 7, ExecutionStatus::AwaitingApproval, 1, Some(1));
    x.sessions.commit_turn(&waiting).await.unwrap();

    let shape = |rows: Vec<switchboard_domain::VariantRow>| -> Vec<_> {
        rows.into_iter()
            .map(|r| {
                (
                    r.hour,
                    r.trigger_id,
                    r.variant,
                    r.status,
                    r.executions,
                    r.tokens,
                    r.cost_usd.nanos,
                    r.unpriced_calls,
                    r.latency_ms,
                )
            })
            .collect()
    };
    let mut in_h = vec![
        (h, first, "candidate".to_owned(), ExecutionStatus::Success, 1, 15, 0, 1, 50),
        (h, first, "control".to_owned(), ExecutionStatus::Success, 1, 15, 3, 0, 100),
        (h, first, "control".to_owned(), ExecutionStatus::HandedOff, 1, 30, 7, 0, 300),
        (h, second, "a".to_owned(), ExecutionStatus::Ended, 1, 15, 1, 0, 5),
    ];
    in_h.sort_by_key(|r| (r.1, r.2.clone()));
    assert_eq!(shape(x.executions.variants(&t, h, h).await.unwrap()), in_h, "by hour, trigger, variant, status");
    let both = shape(x.executions.variants(&t, h - Duration::hours(3), next).await.unwrap());
    assert_eq!(both.len(), 5);
    assert_eq!(both[4], (next, first, "candidate".to_owned(), ExecutionStatus::Failed, 1, 15, 2, 0, 10));
    assert!(x.executions.variants(&t, next + Duration::hours(1), next + Duration::hours(5)).await.unwrap().is_empty());
    assert_eq!(
        shape(x.executions.variants(&other, h, next).await.unwrap()),
        vec![(h, first, "control".to_owned(), ExecutionStatus::Success, 1, 15, 9, 0, 9)]
    );
}

async fn a_tenant_reads_back_and_its_name_and_status_change(x: &Subject) {
    let (a, b) = (tenant("t-a"), tenant("t-b"));
    assert_eq!(x.config.get_tenant(&a).await.unwrap(), None);
    assert!(x.config_admin.create_tenant(&a, "Acme").await.unwrap());
    assert!(x.config_admin.create_tenant(&b, "Beta").await.unwrap());
    let stored = x.config.get_tenant(&a).await.unwrap().unwrap();
    assert_eq!((stored.name.as_str(), stored.status), ("Acme", TenantStatus::Active));
    assert!(x.config.tenant_exists(&a).await.unwrap());
    assert_eq!(stored.limits, TenantLimits::default());
    let limits = TenantLimits {
        invocations_per_minute: 5,
        tokens_per_day: 123,
        concurrent_sessions: 7,
        session_idle_minutes: 9,
        close_idle_sessions: true,
        on_limit: OnLimit::Message { text: "Busy".into() },
    };
    assert_eq!(stored.recording, Recording::Full, "the default");
    let changed = Tenant {
        name: "Acme Corp".into(),
        status: TenantStatus::Suspended,
        limits,
        recording: Recording::Redacted,
        ..stored.clone()
    };
    assert!(x.config_admin.update_tenant(&changed).await.unwrap());
    assert_eq!(x.config.get_tenant(&a).await.unwrap(), Some(changed.clone()));
    // its business-hours calendars read back as written, and can be removed again
    let calendars: switchboard_domain::calendar::Calendars = serde_json::from_value(json!({ "support": {
        "timeZone": "Europe/Paris", "hours": { "MON": ["09:00-12:30", "13:30-18:00"] },
        "holidays": [{ "date": "2026-12-25", "name": "Christmas" }] } }))
    .unwrap();
    let with_calendars = Tenant { calendars, ..changed.clone() };
    assert!(x.config_admin.update_tenant(&with_calendars).await.unwrap());
    assert_eq!(x.config.get_tenant(&a).await.unwrap(), Some(with_calendars));
    assert!(x.config_admin.update_tenant(&changed).await.unwrap());
    assert_eq!(x.config.get_tenant(&a).await.unwrap().unwrap().calendars, Default::default());
    // its time zone reads back as written, and can be removed again
    assert_eq!(stored.time_zone, None, "none until set");
    let zoned = Tenant { time_zone: Some("America/New_York".into()), ..changed.clone() };
    assert!(x.config_admin.update_tenant(&zoned).await.unwrap());
    assert_eq!(x.config.get_tenant(&a).await.unwrap(), Some(zoned));
    assert!(x.config_admin.update_tenant(&changed).await.unwrap());
    assert_eq!(x.config.get_tenant(&a).await.unwrap().unwrap().time_zone, None);
    // the other tenant is untouched, and a tenant that does not exist is not created by an update
    assert_eq!(x.config.get_tenant(&b).await.unwrap().unwrap().status, TenantStatus::Active);
    let ghost = Tenant { tenant_id: tenant("t-ghost"), ..stored };
    assert!(!x.config_admin.update_tenant(&ghost).await.unwrap());
    assert_eq!(x.config.get_tenant(&tenant("t-ghost")).await.unwrap(), None);
}

async fn counters_admit_exactly_the_limit_across_processes(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    let expires = x.clock.now() + Duration::minutes(2);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24 {
        let (c, t) = (x.counters[i % 2].clone(), t.clone());
        tasks.spawn(async move { c.take(&t, "MIN#2026-11-23T07:00", 7, expires).await.unwrap() });
    }
    assert_eq!(tasks.join_all().await.into_iter().filter(|a| *a).count(), 7);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..6 {
        let (c, t) = (x.counters[i % 2].clone(), t.clone());
        let e = outbound(&t, "limit-07:00");
        tasks.spawn(async move { c.first(&t, "MIN#2026-11-23T07:00", expires, &e).await.unwrap() });
    }
    assert_eq!(tasks.join_all().await.into_iter().filter(|f| *f).count(), 1, "one caller is first");
    // and the first one's announcement is in the event log, once, with its claim
    let logged = x.events.events_after(&t, 0, 10).await.unwrap();
    assert_eq!(logged.iter().map(|(_, e)| e.id.as_str()).collect::<Vec<_>>(), ["limit-07:00"]);
    // a window is counted on its own, per tenant; `first` works on a window never taken from
    assert!(x.counters[1].take(&t, "MIN#2026-11-23T07:01", 7, expires).await.unwrap());
    assert!(x.counters[0].take(&other, "MIN#2026-11-23T07:00", 7, expires).await.unwrap());
    let day = outbound(&t, "limit-day");
    assert!(x.counters[0].first(&t, "DAY#2026-11-23", expires, &day).await.unwrap());
    assert!(!x.counters[1].first(&t, "DAY#2026-11-23", expires, &day).await.unwrap());
    assert_eq!(x.events.events_after(&t, 0, 10).await.unwrap().len(), 2);
}

/// Every page of a tenant-wide session list, walked with its cursors.
/// Slots asked for by `conversations`, alternating between the two processes: which were new.
/// One after another, because the emulator's transactions are not isolated from each other (a
/// cancelled one restores a snapshot of the whole table, undoing concurrent writes); DynamoDB's
/// are. The embedded store is tested with parallel callers in `crates/embedded/tests/suite/limits.rs`.
async fn take_slots(
    x: &Subject,
    t: &TenantId,
    conversations: std::ops::Range<usize>,
    now: DateTime<Utc>,
) -> Vec<usize> {
    let until = now + Duration::minutes(30);
    let mut taken = Vec::new();
    for i in conversations {
        if x.counters[i % 2].hold_slot(t, &format!("c-{i}"), 5, now, until).await.unwrap() == (Slot::Held { new: true })
        {
            taken.push(i);
        }
    }
    taken
}

async fn session_slots_stay_within_the_limit_across_processes(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    let now = x.clock.now();
    let until = now + Duration::minutes(30);
    let taken = take_slots(x, &t, 0..12, now).await;
    assert_eq!(taken.len(), 5, "{taken:?}");
    let (holder, outsider) = (taken[0], (0..12).find(|i| !taken.contains(i)).unwrap());
    // A holder renews; an outsider is told when the first slot may free; another tenant has its own.
    let renew_until = until + Duration::minutes(1);
    let renewed = x.counters[1].hold_slot(&t, &format!("c-{holder}"), 5, now, renew_until).await.unwrap();
    assert_eq!(renewed, Slot::Held { new: false });
    let full = x.counters[0].hold_slot(&t, &format!("c-{outsider}"), 5, now, until).await.unwrap();
    assert_eq!(full, Slot::Full { frees_at: until });
    assert_eq!(x.counters[0].hold_slot(&other, "c-0", 5, now, until).await.unwrap(), Slot::Held { new: true });
    // A released slot is taken once; releasing what is not held changes nothing.
    x.counters[0].release_slot(&t, &format!("c-{holder}")).await.unwrap();
    x.counters[1].release_slot(&t, &format!("c-{holder}")).await.unwrap();
    x.counters[1].release_slot(&t, "never-held").await.unwrap();
    assert_eq!(take_slots(x, &t, 20..30, now).await.len(), 1);
    // 30 minutes on, the four untouched slots and the new one are idle: they free for newcomers,
    // exactly five of them, whichever process frees them.
    let later = until;
    let taken = take_slots(x, &t, 40..52, later).await;
    assert_eq!(taken.len(), 5, "{taken:?}");
    let full = x.counters[1].hold_slot(&t, "c-99", 5, later, later + Duration::minutes(30)).await.unwrap();
    assert_eq!(full, Slot::Full { frees_at: later + Duration::minutes(30) });
}

async fn a_slot_and_a_count_are_asked_together_and_a_refused_count_takes_no_slot(x: &Subject) {
    use switchboard_engine::{Admit, SlotAndCount};
    let t = tenant("t-1");
    let now = x.clock.now();
    let until = now + Duration::minutes(30);
    let ask = |conversation, window, likely_held| SlotAndCount {
        tenant: &t,
        conversation,
        sessions: 2,
        now,
        until,
        window,
        limit: 1,
        expires: now + Duration::minutes(2),
        likely_held: Some(likely_held),
        unless_human: false,
    };
    // a new conversation, guessed right and guessed wrong
    assert_eq!(x.counters[0].hold_slot_and_take(&ask("c-1", "MIN#a", false)).await.unwrap(), Admit::Counted);
    // the window is full: c-2 takes no slot
    let full = x.counters[1].hold_slot_and_take(&ask("c-2", "MIN#a", true)).await.unwrap();
    assert_eq!(full, Admit::CountFull { took_slot: false });
    // so c-3 takes the second slot (the wrong guess costs nothing but a round trip), and c-4
    // finds both held
    assert_eq!(x.counters[1].hold_slot_and_take(&ask("c-3", "MIN#b", true)).await.unwrap(), Admit::Counted);
    let sessions_full = x.counters[0].hold_slot_and_take(&ask("c-4", "MIN#c", false)).await.unwrap();
    assert_eq!(sessions_full, Admit::SessionsFull { frees_at: until });
    // both limits reached at once: the sessions cap is the one reported
    let both = x.counters[0].hold_slot_and_take(&ask("c-4", "MIN#a", true)).await.unwrap();
    assert_eq!(both, Admit::SessionsFull { frees_at: until });
    // a holder renews whichever way it is guessed, and meeting a full window keeps its slot
    assert_eq!(x.counters[1].hold_slot_and_take(&ask("c-1", "MIN#c", false)).await.unwrap(), Admit::Counted);
    let kept = x.counters[0].hold_slot_and_take(&ask("c-1", "MIN#c", true)).await.unwrap();
    assert_eq!(kept, Admit::CountFull { took_slot: false });
    assert_eq!(x.counters[1].hold_slot(&t, "c-1", 2, now, until).await.unwrap(), Slot::Held { new: false });
    // a count refused in one window took nothing from another, and an idle slot frees for a newcomer
    let later = until + Duration::seconds(1);
    let newcomer = SlotAndCount { now: later, until: later + Duration::minutes(30), ..ask("c-5", "MIN#d", false) };
    assert_eq!(x.counters[0].hold_slot_and_take(&newcomer).await.unwrap(), Admit::Counted);
}

async fn an_admission_counts_nothing_for_a_conversation_a_human_owns(x: &Subject) {
    use switchboard_engine::{Admit, SlotAndCount};
    let t = tenant("t-1");
    let now = x.clock.now();
    let ask = |conversation, window| SlotAndCount {
        tenant: &t,
        conversation,
        sessions: 10,
        now,
        until: now + Duration::minutes(30),
        window,
        limit: 2,
        expires: now + Duration::minutes(2),
        // the caller has not read the conversation (event intake): the adapter guesses
        likely_held: None,
        unless_human: true,
    };
    assert!(x.counters.iter().all(|c| c.sees_human_owner()));
    // an agent's conversation is admitted
    let active = start(&t, "c-1", now);
    x.sessions.commit_turn(&create(&active, "evt-1", now)).await.unwrap();
    assert_eq!(x.counters[0].hold_slot_and_take(&ask("c-1", "MIN#a")).await.unwrap(), Admit::Counted);
    // handed to a human: refused for the owner, in any process, and nothing is counted
    let mut human = bump(&active, now);
    human.status = SessionStatus::HandedOff;
    human.handed_off_to = Some(HandoffTarget::Human);
    let to_human = TurnCommit {
        events: vec![],
        sessions: vec![SessionWrite { session: human.clone(), expected_version: Some(active.version) }],
        execution: record(&active, "evt-2", now),
        content: vec![],
        resumes: None,
        coalesced: vec![],
    };
    x.sessions.commit_turn(&to_human).await.unwrap();
    let owner = Admit::HumanOwned { session_id: active.session_id, agent_id: active.agent_id };
    for counters in &x.counters {
        assert_eq!(counters.hold_slot_and_take(&ask("c-1", "MIN#a")).await.unwrap(), owner);
    }
    // the human's session is the conversation's latest, as the executor reads it
    assert_eq!(x.sessions.latest_session(&t, "c-1").await.unwrap(), Some(human.clone()));
    // (the window took one count so far: one more fits, then it is full)
    assert_eq!(x.counters[1].hold_slot_and_take(&ask("c-2", "MIN#a")).await.unwrap(), Admit::Counted);
    assert_eq!(
        x.counters[1].hold_slot_and_take(&ask("c-3", "MIN#a")).await.unwrap(),
        Admit::CountFull { took_slot: false }
    );
    // not asked, the owner is not read: counted as before
    let blind = SlotAndCount { unless_human: false, ..ask("c-1", "MIN#b") };
    assert_eq!(x.counters[0].hold_slot_and_take(&blind).await.unwrap(), Admit::Counted);
    // another tenant's conversation of the same id is its own
    let other = tenant("t-2");
    let theirs = SlotAndCount { tenant: &other, ..ask("c-1", "MIN#a") };
    assert_eq!(x.counters[0].hold_slot_and_take(&theirs).await.unwrap(), Admit::Counted);
    // handed back to an agent: admitted again (the wrong guess of the lease costs nothing)
    let mut back = bump(&human, now);
    let mut next = start(&t, "c-1", now);
    next.parent_session_id = Some(human.session_id);
    back.handed_off_to = Some(HandoffTarget::Agent { agent_id: next.agent_id, session_id: next.session_id });
    x.sessions
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![
                SessionWrite { session: back, expected_version: Some(human.version) },
                SessionWrite { session: next.clone(), expected_version: None },
            ],
            execution: record(&human, "evt-3", now),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap();
    for counters in &x.counters {
        assert_eq!(counters.hold_slot_and_take(&ask("c-1", "MIN#c")).await.unwrap(), Admit::Counted);
    }
    assert_eq!(x.sessions.latest_session(&t, "c-1").await.unwrap(), Some(next));
    // and a human's conversation that ended is nobody's
    let mut ended = start(&t, "c-4", now);
    ended.status = SessionStatus::HandedOff;
    ended.handed_off_to = Some(HandoffTarget::Human);
    x.sessions.commit_turn(&create(&ended, "evt-4", now)).await.unwrap();
    let owner = Admit::HumanOwned { session_id: ended.session_id, agent_id: ended.agent_id };
    assert_eq!(x.counters[1].hold_slot_and_take(&ask("c-4", "MIN#d")).await.unwrap(), owner);
    let mut closed = bump(&ended, now);
    closed.status = SessionStatus::Completed;
    x.sessions
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![SessionWrite { session: closed, expected_version: Some(ended.version) }],
            execution: record(&ended, "evt-5", now),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap();
    assert_eq!(x.counters[1].hold_slot_and_take(&ask("c-4", "MIN#d")).await.unwrap(), Admit::Counted);
}

async fn walk(x: &Subject, t: &TenantId, filter: SessionFilter, limit: usize) -> Vec<SessionId> {
    let (mut seen, mut after) = (vec![], None);
    loop {
        let page = x.sessions.list_sessions(t, filter.clone(), after, limit).await.unwrap();
        assert!(page.items.len() <= limit);
        seen.extend(ids(&page.items));
        match page.next_cursor {
            Some(c) => after = Some(c.parse().unwrap()),
            None => return seen,
        }
    }
}

async fn sessions_list_newest_first_narrowed_and_paged(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    let now = x.clock.now();
    let (a, b) = (AgentId::generate(), AgentId::generate());
    let mut all = vec![];
    let trigger = TriggerId::generate();
    for i in 0..7 {
        let mut s = start(&t, &format!("c-{i}"), now);
        s.agent_id = if i % 2 == 0 { a } else { b };
        if i % 3 == 0 {
            s.status = SessionStatus::HandedOff;
        }
        s.channel = Some(if i < 4 { "webchat" } else { "whatsapp" }.to_owned());
        let variant = if i % 2 == 0 { "control" } else { "candidate" };
        s.split = Some(Assignment { trigger_id: trigger, variant: variant.into() });
        x.sessions.commit_turn(&create(&s, &format!("evt-{i}"), now)).await.unwrap();
        all.push(s);
    }
    let mut theirs = start(&other, "c-0", now);
    theirs.agent_id = a;
    x.sessions.commit_turn(&create(&theirs, "evt-0", now)).await.unwrap();
    all.sort_by_key(|s| std::cmp::Reverse(s.session_id));
    // newest first, in pages of 3, the other tenant's never among them
    assert_eq!(walk(x, &t, SessionFilter::default(), 3).await, ids(&all));
    assert_eq!(walk(x, &t, SessionFilter::default(), 50).await, ids(&all));
    // narrowed by status and agent, across pages of one (the store filters after reading)
    let filter =
        SessionFilter { status: Some(SessionStatus::HandedOff), agent_id: Some(a), ..SessionFilter::default() };
    let expected: Vec<SessionId> =
        all.iter().filter(|s| s.status == SessionStatus::HandedOff && s.agent_id == a).map(|s| s.session_id).collect();
    assert_eq!(expected.len(), 2);
    assert_eq!(walk(x, &t, filter, 1).await, expected);
    let active_b = SessionFilter { status: Some(SessionStatus::Active), agent_id: Some(b), ..SessionFilter::default() };
    assert_eq!(walk(x, &t, active_b, 1).await.len(), 2, "sessions 1 and 5");
    // and by channel and split variant, alone and together
    let by = |channel: Option<&str>, variant: Option<&str>| SessionFilter {
        channel: channel.map(str::to_owned),
        variant: variant.map(str::to_owned),
        ..SessionFilter::default()
    };
    let want = |f: &dyn Fn(usize) -> bool| -> Vec<SessionId> {
        let mut v: Vec<(usize, SessionId)> =
            all.iter().map(|s| (s.conversation_id[2..].parse().unwrap(), s.session_id)).collect();
        v.retain(|(i, _)| f(*i));
        let mut ids: Vec<SessionId> = v.into_iter().map(|(_, id)| id).collect();
        ids.sort_by_key(|id| std::cmp::Reverse(*id));
        ids
    };
    assert_eq!(walk(x, &t, by(Some("whatsapp"), None), 2).await, want(&|i| i >= 4));
    assert_eq!(walk(x, &t, by(None, Some("candidate")), 2).await, want(&|i| i % 2 == 1));
    assert_eq!(walk(x, &t, by(Some("webchat"), Some("control")), 1).await, want(&|i| i < 4 && i % 2 == 0));
    assert_eq!(walk(x, &t, by(Some("sms"), None), 5).await, vec![]);
    assert_eq!(walk(x, &other, SessionFilter::default(), 10).await, vec![theirs.session_id]);
}

async fn latest_session_is_the_active_one_else_the_newest(x: &Subject) {
    let t = tenant("t-1");
    assert_eq!(x.sessions.latest_session(&t, "c-1").await.unwrap(), None);
    let active = start(&t, "c-1", x.clock.now());
    x.sessions.commit_turn(&create(&active, "evt-1", x.clock.now())).await.unwrap();
    // given a newer session that is not active
    x.clock.advance(Duration::minutes(1));
    let mut newer = start(&t, "c-1", x.clock.now());
    newer.status = SessionStatus::Failed;
    x.sessions.commit_turn(&create(&newer, "evt-2", x.clock.now())).await.unwrap();
    // then the active one wins
    assert_eq!(x.sessions.latest_session(&t, "c-1").await.unwrap(), Some(active.clone()));
    // and once none is active, the newest does
    let mut ended = bump(&active, x.clock.now());
    ended.status = SessionStatus::Completed;
    x.sessions
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![SessionWrite { session: ended, expected_version: Some(active.version) }],
            execution: record(&active, "evt-3", x.clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap();
    assert_eq!(x.sessions.latest_session(&t, "c-1").await.unwrap(), Some(newer));
}

async fn routing_sees_the_conversations_newest_session_and_who_owns_it(x: &Subject) {
    let t = tenant("t-1");
    assert_eq!(x.sessions.latest_session_for_routing(&t, "c-1").await.unwrap(), None);
    let active = start(&t, "c-1", x.clock.now());
    x.sessions.commit_turn(&create(&active, "evt-1", x.clock.now())).await.unwrap();
    let seen = x.sessions.latest_session_for_routing(&t, "c-1").await.unwrap();
    assert_eq!(seen.as_ref().map(|s| (s.session_id, s.is_active())), Some((active.session_id, true)));
    // handed to a human: routing sees who owns the conversation now; another tenant sees nothing
    let mut human = bump(&active, x.clock.now());
    human.status = SessionStatus::HandedOff;
    human.handed_off_to = Some(HandoffTarget::Human);
    x.sessions
        .commit_turn(&TurnCommit {
            events: vec![],
            sessions: vec![SessionWrite { session: human, expected_version: Some(active.version) }],
            execution: record(&active, "evt-2", x.clock.now()),
            content: vec![],
            resumes: None,
            coalesced: vec![],
        })
        .await
        .unwrap();
    let seen = x.sessions.latest_session_for_routing(&t, "c-1").await.unwrap().unwrap();
    assert!(seen.is_human_owned(), "{:?}", seen.status);
    assert_eq!(x.sessions.latest_session_for_routing(&tenant("t-2"), "c-1").await.unwrap(), None);
}

async fn sessions_of_a_conversation_come_oldest_first(x: &Subject) {
    let t = tenant("t-1");
    let mut written = Vec::new();
    for i in 0..4 {
        let mut s = start(&t, "c-1", x.clock.now());
        if i < 3 {
            s.status = SessionStatus::Completed;
        }
        x.sessions.commit_turn(&create(&s, &format!("evt-{i}"), x.clock.now())).await.unwrap();
        written.push(s);
        x.clock.advance(Duration::seconds(30));
    }
    x.sessions.commit_turn(&create(&start(&t, "c-2", x.clock.now()), "evt-x", x.clock.now())).await.unwrap();
    let got = x.sessions.sessions_for_conversation(&t, "c-1").await.unwrap();
    assert_eq!(ids(&got), ids(&written));
    assert_eq!(got, written);
    assert!(x.sessions.sessions_for_conversation(&t, "c-9").await.unwrap().is_empty());
}

async fn executions_page_with_a_cursor_across_pages(x: &Subject) {
    let t = tenant("t-1");
    let mut s = start(&t, "c-1", x.clock.now());
    x.sessions.commit_turn(&create(&s, "evt-0", x.clock.now())).await.unwrap();
    let mut expected = vec![x.executions.execution_for_source(&t, "evt-0").await.unwrap().unwrap()];
    for i in 1..5 {
        x.clock.advance(Duration::seconds(1));
        let (next, commit) = update(&s, &format!("evt-{i}"), x.clock.now());
        x.sessions.commit_turn(&commit).await.unwrap();
        expected.push(commit.execution);
        s = next;
    }
    // when listing two at a time
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let after = cursor.as_deref().map(|c| c.parse().unwrap());
        let page = x.executions.list_executions(&t, s.session_id, after, 2).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        seen.extend(page.items);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(pages < 10, "paging does not end");
    }
    // then every record comes once, oldest first, in three pages
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);
    // and a page that holds the rest exactly has no cursor
    let all = x.executions.list_executions(&t, s.session_id, None, 5).await.unwrap();
    assert_eq!((all.items.len(), all.next_cursor), (5, None));
}

async fn expired_executions_are_never_returned(x: &Subject) {
    let t = tenant("t-1");
    let now = x.clock.now();
    let s = start(&t, "c-1", now);
    let mut commit = create(&s, "evt-old", now);
    commit.execution.expires_at = now + Duration::milliseconds(1500);
    x.sessions.commit_turn(&commit).await.unwrap();
    let (_, mut fresh) = update(&s, "evt-new", now + Duration::seconds(1));
    fresh.execution.expires_at = now + Duration::days(30);
    x.sessions.commit_turn(&fresh).await.unwrap();
    assert_eq!(x.executions.list_executions(&t, s.session_id, None, 10).await.unwrap().items.len(), 2);
    // when the clock passes the first record's expiry (by less than a second)
    x.clock.advance(Duration::milliseconds(1600));
    // then it is gone from every read, and the live one stays
    assert_eq!(x.executions.execution_for_source(&t, "evt-old").await.unwrap(), None);
    assert_eq!(x.executions.get_execution(&t, commit.execution.execution_id).await.unwrap(), None);
    let page = x.executions.list_executions(&t, s.session_id, None, 10).await.unwrap();
    assert_eq!(page.items, vec![fresh.execution.clone()]);
    assert_eq!(x.executions.execution_for_source(&t, "evt-new").await.unwrap(), Some(fresh.execution));
}

async fn another_tenants_ids_return_nothing(x: &Subject) {
    let (a, b) = (tenant("t-a"), tenant("t-b"));
    x.config_admin.create_tenant(&a, "Tenant").await.unwrap();
    x.config_admin.create_tenant(&b, "Tenant").await.unwrap();
    let agent_a = agent(&a);
    x.service.upsert_all(&[ConfigRecord::Agent(agent_a.clone())]).await.unwrap();
    raw_trigger(x, &trigger(&a, agent_a.agent_id, TriggerId::generate(), 1, "message.new", "active")).await;
    let s = start(&a, "c-1", x.clock.now());
    let commit = create(&s, "evt-1", x.clock.now());
    x.sessions.commit_turn(&commit).await.unwrap();
    // tenant b asks for tenant a's ids
    assert_eq!(x.sessions.get_session(&b, s.session_id).await.unwrap(), None);
    assert_eq!(x.sessions.latest_session(&b, "c-1").await.unwrap(), None);
    assert!(x.sessions.sessions_for_conversation(&b, "c-1").await.unwrap().is_empty());
    assert_eq!(x.executions.execution_for_source(&b, "evt-1").await.unwrap(), None);
    assert_eq!(x.executions.get_execution(&b, commit.execution.execution_id).await.unwrap(), None);
    assert!(x.executions.list_executions(&b, s.session_id, None, 10).await.unwrap().items.is_empty());
    assert_eq!(x.config.get_agent(&b, agent_a.agent_id).await.unwrap(), None);
    assert!(x.config.active_triggers(&b, EventType::MessageNew).await.unwrap().is_empty());
    // while tenant a sees its own
    let stored = Agent { version: 1, ..agent_a.clone() };
    assert_eq!(x.config.get_agent(&a, agent_a.agent_id).await.unwrap(), Some(stored));
    assert_eq!(x.config.active_triggers(&a, EventType::MessageNew).await.unwrap().len(), 1);
}

async fn triggers_come_active_and_in_evaluation_order(x: &Subject) {
    let t = tenant("t-1");
    assert!(!x.config.tenant_exists(&t).await.unwrap());
    x.config_admin.create_tenant(&t, "Tenant").await.unwrap();
    assert!(x.config.tenant_exists(&t).await.unwrap());
    let a = agent(&t);
    x.service.upsert_all(&[ConfigRecord::Agent(a.clone())]).await.unwrap();
    let mut tids: Vec<TriggerId> = (0..6).map(|_| TriggerId::generate()).collect();
    tids.sort();
    let written = [
        trigger(&t, a.agent_id, tids[0], 5, "message.new", "active"),
        trigger(&t, a.agent_id, tids[1], 1, "message.new", "active"),
        trigger(&t, a.agent_id, tids[2], 5, "message.new", "active"),
        trigger(&t, a.agent_id, tids[3], 3, "message.new", "inactive"),
        trigger(&t, a.agent_id, tids[4], 0, "schedule", "active"),
        trigger(&t, a.agent_id, tids[5], -2, "message.new", "active"),
    ];
    for tr in written.iter().rev() {
        raw_trigger(x, tr).await;
    }
    let got = x.config.active_triggers(&t, EventType::MessageNew).await.unwrap();
    let order: Vec<TriggerId> = got.iter().map(|t| t.trigger_id).collect();
    assert_eq!(order, vec![tids[5], tids[1], tids[0], tids[2]]);
    // stored as written, at version 1
    assert_eq!(got[0], Trigger { version: 1, ..written[5].clone() });
    let schedule = x.config.active_triggers(&t, EventType::Schedule).await.unwrap();
    assert_eq!(schedule.len(), 1);
}

fn work_item(t: &str, conversation: &str, source: &str) -> WorkItem {
    WorkItem {
        tenant_id: tenant(t),
        source_id: source.into(),
        event_id: None,
        conversation_id: conversation.into(),
        message_id: format!("m-{source}"),
        text: "hello".into(),
        trigger_id: Some(TriggerId::generate()),
        trigger_version: None,
        variant: None,
        agent_id: AgentId::generate(),
        continuation: false,
        detail: json!({"message": {"text": "hello", "n": 1.5}}),
        refused: None,
        day_tokens: None,
        follow: false,
        resume: None,
        arrived_at: None,
        earlier: vec![],
        recording: Default::default(),
        close_idle_after: None,
        closes_idle: None,
    }
}

async fn the_queue_groups_by_conversation_and_deduplicates(x: &Subject) {
    let item = |conversation: &str, source: &str| work_item("t-1", conversation, source);
    let (a1, b1, a2) = (item("c-a", "evt-1"), item("c-b", "evt-2"), item("c-a", "evt-3"));
    x.queue.enqueue(&a1).await.unwrap();
    x.queue.enqueue(&b1).await.unwrap();
    // a repeat of the first event (its dedup id) adds nothing
    x.queue.enqueue(&a1).await.unwrap();
    x.queue.enqueue(&a2).await.unwrap();
    let got = x.probe.drain().await;
    let mut seen: Vec<(String, String, WorkItem)> =
        got.into_iter().map(|(g, d, body)| (g, d, serde_json::from_str(&body).unwrap())).collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    // within a group, enqueue order holds
    let group_a: Vec<&WorkItem> = seen.iter().filter(|(g, ..)| *g == a1.group_id()).map(|(.., i)| i).collect();
    assert_eq!(group_a, vec![&a1, &a2]);
    // the deduplication id is the tenant-scoped hash of the source id
    seen.sort_by(|x, y| x.2.source_id.cmp(&y.2.source_id));
    assert_eq!(seen[0], ("t-1:c-a".to_owned(), a1.dedup_id(), a1.clone()));
    assert_eq!(seen[1], ("t-1:c-b".to_owned(), b1.dedup_id(), b1));
    assert_eq!(seen[2], ("t-1:c-a".to_owned(), a2.dedup_id(), a2));
}

async fn two_tenants_equal_source_ids_are_both_queued(x: &Subject) {
    // given two tenants that number their events the same way, in same-named conversations
    let (a, b) = (work_item("t-a", "c-1", "evt-1"), work_item("t-b", "c-1", "evt-1"));
    assert_ne!(a.dedup_id(), b.dedup_id());
    // when both enqueue, and each repeats its own event
    for item in [&a, &b, &a, &b] {
        x.queue.enqueue(item).await.unwrap();
    }
    // then each tenant's item is queued exactly once, in its own group
    let mut seen: Vec<(String, WorkItem)> =
        x.probe.drain().await.into_iter().map(|(g, _, body)| (g, serde_json::from_str(&body).unwrap())).collect();
    seen.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(seen, vec![("t-a:c-1".to_owned(), a), ("t-b:c-1".to_owned(), b)]);
}

async fn the_same_message_under_a_new_event_id_is_queued_once_per_tenant(x: &Subject) {
    // given two tenants whose agents answer "help", routed by event intake over this profile's
    // stores and queue
    let intake = switchboard_engine::Intake::new(x.config.clone(), x.sessions.clone(), x.queue.clone());
    for t in [tenant("t-a"), tenant("t-b")] {
        x.config_admin.create_tenant(&t, "Tenant").await.unwrap();
        let a = agent(&t);
        x.service.upsert_all(&[ConfigRecord::Agent(a.clone())]).await.unwrap();
        raw_trigger(x, &trigger(&t, a.agent_id, TriggerId::generate(), 1, "message.new", "active")).await;
    }
    let event = |t: &str, id: &str| {
        switchboard_domain::InboundEvent::parse(&json!({
            "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": t, "conversationId": "c-1", "messageId": "m-1", "channel": {},
                        "conversation": {}, "message": { "direction": "inbound", "text": "help" } }
        }))
        .unwrap()
    };
    // when each sends one message under two event ids (a retried PutEvents), the same ids in
    // both tenants, all before anything is received (the emulator forgets a dedup id once its
    // message is received; SQS keeps it five minutes)
    for (t, id) in [("t-a", "evt-1"), ("t-a", "evt-2"), ("t-b", "evt-1"), ("t-b", "evt-2")] {
        let outcome = intake.route(&event(t, id)).await.unwrap();
        assert!(matches!(outcome, switchboard_engine::RouteOutcome::Enqueued { .. }), "{outcome:?}");
    }
    // then each tenant's message is queued once, under the message's source id
    let mut seen: Vec<(String, String, WorkItem)> =
        x.probe.drain().await.into_iter().map(|(g, d, body)| (g, d, serde_json::from_str(&body).unwrap())).collect();
    seen.sort_by(|x, y| x.0.cmp(&y.0));
    let got: Vec<(&str, &str, Option<&str>)> =
        seen.iter().map(|(g, _, i)| (g.as_str(), i.source_id.as_str(), i.event_id.as_deref())).collect();
    assert_eq!(got, [("t-a:c-1", "message-c-1:m-1", Some("evt-1")), ("t-b:c-1", "message-c-1:m-1", Some("evt-1"))]);
    assert_ne!(seen[0].1, seen[1].1, "the deduplication id is scoped by tenant");
}

async fn config_writes_are_conditional_on_version_and_list_in_pages(x: &Subject) {
    let t = tenant("t-1");
    let a = agent(&t);
    let rec = |a: &Agent, v: u64| {
        let mut a = a.clone();
        a.version = v;
        ConfigRecord::Agent(a)
    };
    // a tenant that does not exist takes no records
    let err = x.config_admin.put_config(&rec(&a, 1), None, &by()).await.unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)), "{err:?}");
    assert!(x.config_admin.create_tenant(&t, "Tenant").await.unwrap());
    assert!(!x.config_admin.create_tenant(&t, "Again").await.unwrap());
    // create once; a second create of the same id conflicts
    x.config_admin.put_config(&rec(&a, 1), None, &by()).await.unwrap();
    let err = x.config_admin.put_config(&rec(&a, 1), None, &by()).await.unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)), "{err:?}");
    // replace on the version read; a stale replace conflicts
    x.config_admin.put_config(&rec(&a, 2), Some(1), &by()).await.unwrap();
    let err = x.config_admin.put_config(&rec(&a, 3), Some(1), &by()).await.unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)), "{err:?}");
    let id = a.agent_id.to_string();
    assert_eq!(x.config_admin.get_config(&t, ConfigKind::Agent, &id).await.unwrap(), Some(rec(&a, 2)));
    assert_eq!(
        x.config.get_agent(&t, a.agent_id).await.unwrap(),
        Some(match rec(&a, 2) {
            ConfigRecord::Agent(a) => a,
            _ => unreachable!(),
        })
    );
    // the bundle path writes the next version whatever is stored
    x.service.upsert_all(&[ConfigRecord::Agent(a.clone())]).await.unwrap();
    assert_eq!(x.config_admin.get_config(&t, ConfigKind::Agent, &id).await.unwrap(), Some(rec(&a, 3)));
    // lists come in id order, in pages
    let mut more: Vec<Agent> = (0..4).map(|_| agent(&t)).collect();
    for m in &more {
        x.config_admin.put_config(&rec(m, 1), None, &by()).await.unwrap();
    }
    more.push(match rec(&a, 3) {
        ConfigRecord::Agent(a) => a,
        _ => unreachable!(),
    });
    more.sort_by_key(|m| m.agent_id);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = x.config_admin.list_config(&t, ConfigKind::Agent, cursor.as_deref(), 2).await.unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items.into_iter().map(|r| match r {
            ConfigRecord::Agent(a) => a.agent_id,
            other => panic!("{other:?}"),
        }));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, more.iter().map(|m| m.agent_id).collect::<Vec<_>>());
    assert!(x.config_admin.list_config(&t, ConfigKind::Trigger, None, 10).await.unwrap().items.is_empty());
    // deletes are conditional too
    let err = x.config_admin.delete_config(&t, ConfigKind::Agent, &id, 1, &by()).await.unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)), "{err:?}");
    assert!(x.config_admin.delete_config(&t, ConfigKind::Agent, &id, 3, &by()).await.unwrap());
    assert!(!x.config_admin.delete_config(&t, ConfigKind::Agent, &id, 3, &by()).await.unwrap());
    assert_eq!(x.config_admin.get_config(&t, ConfigKind::Agent, &id).await.unwrap(), None);
    assert_eq!(x.config.get_agent(&t, a.agent_id).await.unwrap(), None);
}

async fn every_config_write_keeps_a_version_with_it_newest_first(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    for t in [&t, &other] {
        assert!(x.config_admin.create_tenant(t, "Tenant").await.unwrap());
    }
    // given an agent created, then replaced twice by the service
    let mut a = Agent { version: 1, ..agent(&t) };
    let id = a.agent_id.to_string();
    let service = x.service.clone().written_by("tenant key");
    service.create(&ConfigRecord::Agent(a.clone())).await.unwrap();
    for (v, prompt) in [(2, "Be brief."), (3, "Be formal.")] {
        a.system_prompt = prompt.into();
        a.version = v;
        service.replace(&ConfigRecord::Agent(a.clone()), v - 1).await.unwrap();
    }
    // then each write kept its whole record, who wrote it and when
    let third = x.config_admin.get_version(&t, ConfigKind::Agent, &id, 3).await.unwrap().unwrap();
    assert_eq!((third.version, third.deleted, third.written_by.as_str()), (3, false, "tenant key"));
    assert_eq!(third.record, ConfigRecord::Agent(a.clone()));
    let first = x.config_admin.get_version(&t, ConfigKind::Agent, &id, 1).await.unwrap().unwrap();
    assert!(matches!(&first.record, ConfigRecord::Agent(r) if r.system_prompt == "Be kind."));
    assert_eq!(x.config_admin.get_version(&t, ConfigKind::Agent, &id, 4).await.unwrap(), None);
    assert_eq!(x.config_admin.get_version(&other, ConfigKind::Agent, &id, 1).await.unwrap(), None, "per tenant");
    // and they list newest first, in pages
    let page = x.config_admin.list_versions(&t, ConfigKind::Agent, &id, None, 2).await.unwrap();
    assert_eq!(page.items.iter().map(|v| v.version).collect::<Vec<_>>(), [3, 2]);
    assert_eq!(page.next_cursor.as_deref(), Some("2"));
    let rest = x.config_admin.list_versions(&t, ConfigKind::Agent, &id, Some(2), 2).await.unwrap();
    assert_eq!((rest.items.iter().map(|v| v.version).collect::<Vec<_>>(), rest.next_cursor), (vec![1], None));
    // a write refused on its version keeps nothing
    a.version = 4;
    let stale = x.config_admin.put_config(&ConfigRecord::Agent(a.clone()), Some(2), &by()).await.unwrap_err();
    assert!(matches!(stale, StoreError::VersionConflict(_)), "{stale:?}");
    assert_eq!(x.config_admin.get_version(&t, ConfigKind::Agent, &id, 4).await.unwrap(), None);
    // a kept version is never overwritten: a write that would, writes nothing
    let twin = Agent { agent_id: a.agent_id, version: 1, ..agent(&t) };
    x.service.delete(&t, ConfigKind::Agent, &id, None).await.unwrap();
    let taken = x.config_admin.put_config(&ConfigRecord::Agent(twin), None, &by()).await.unwrap_err();
    assert!(matches!(taken, StoreError::VersionConflict(_)), "{taken:?}");
    assert_eq!(x.config_admin.get_config(&t, ConfigKind::Agent, &id).await.unwrap(), None);
    // a delete keeps a version marking it, with the record as it was
    let gone = x.config_admin.get_version(&t, ConfigKind::Agent, &id, 4).await.unwrap().unwrap();
    assert!(gone.deleted);
    assert_eq!(gone.record, ConfigRecord::Agent(Agent { version: 3, ..a.clone() }));
    // and the same id written again by a bundle goes on from there
    x.service.upsert_all(&[ConfigRecord::Agent(a.clone())]).await.unwrap();
    let again = x.config_admin.get_config(&t, ConfigKind::Agent, &id).await.unwrap().unwrap();
    assert_eq!(again.version(), 5);
    let newest = x.config_admin.list_versions(&t, ConfigKind::Agent, &id, None, 1).await.unwrap();
    assert_eq!((newest.items[0].version, newest.items[0].written_by.as_str()), (5, "system"));
}

async fn skills_read_back_by_id_only_in_their_tenant(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    for t in [&t, &other] {
        assert!(x.config_admin.create_tenant(t, "Tenant").await.unwrap());
    }
    let skill: switchboard_domain::Skill = serde_json::from_value(json!({
        "tenantId": t, "skillId": switchboard_domain::SkillId::generate(), "name": "returns",
        "description": "How returns work", "prompt": "Returns are free.", "tools": ["trigger_flow"],
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z", "version": 1
    }))
    .unwrap();
    x.config_admin.put_config(&ConfigRecord::Skill(skill.clone()), None, &by()).await.unwrap();
    assert_eq!(x.config.get_skill(&t, skill.skill_id).await.unwrap(), Some(skill.clone()));
    assert_eq!(x.config.get_skill(&other, skill.skill_id).await.unwrap(), None);
    assert_eq!(x.config.get_skill(&t, switchboard_domain::SkillId::generate()).await.unwrap(), None);
}

/// AWS only: a container serves agents, tools and skills from memory for five minutes, so a
/// write made by another container shows once that time has passed (its own writes at once).
#[tokio::test]
async fn another_containers_config_writes_show_after_the_cache_ttl() {
    let clock = ManualClock::new();
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let names = common::provision(&sdk).await;
    let clients = AwsClients::new(&sdk);
    let reader = DynamoStore::new(clients.dynamodb.clone(), names.clone(), clock.clone());
    let writer = DynamoStore::new(clients.dynamodb.clone(), names, clock.clone());
    let t = tenant("t-1");
    assert!(writer.create_tenant(&t, "Tenant").await.unwrap());
    let mut skill: switchboard_domain::Skill = serde_json::from_value(json!({
        "tenantId": t, "skillId": switchboard_domain::SkillId::generate(), "name": "returns",
        "description": "How returns work", "prompt": "Returns are free.",
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z", "version": 1
    }))
    .unwrap();
    // a miss is remembered too
    assert_eq!(reader.get_skill(&t, skill.skill_id).await.unwrap(), None);
    writer.put_config(&ConfigRecord::Skill(skill.clone()), None, &by()).await.unwrap();
    assert_eq!(reader.get_skill(&t, skill.skill_id).await.unwrap(), None, "served from memory");
    clock.advance(chrono::Duration::minutes(5));
    assert_eq!(reader.get_skill(&t, skill.skill_id).await.unwrap(), Some(skill.clone()));
    skill.prompt = "Returns cost 5 EUR.".into();
    skill.version = 2;
    writer.put_config(&ConfigRecord::Skill(skill.clone()), Some(1), &by()).await.unwrap();
    assert_eq!(reader.get_skill(&t, skill.skill_id).await.unwrap().unwrap().version, 1);
    assert_eq!(writer.get_skill(&t, skill.skill_id).await.unwrap().unwrap().version, 2, "own writes at once");
}

/// Both stores keep an active schedule trigger's next slot with the trigger: due once its time
/// has come, handed to one claimant only, kept across a write that keeps the schedule, renewed
/// by one that changes it, and gone with the trigger's activity, the trigger and the tenant.
async fn a_schedule_triggers_slot_is_kept_with_it_and_claimed_once(x: &Subject) {
    let t = tenant("t-1");
    x.config_admin.create_tenant(&t, "Tenant").await.unwrap();
    assert!(x.config_admin.fires_schedules());
    let a = agent(&t);
    x.service.create(&ConfigRecord::Agent(a.clone())).await.unwrap();
    let mut on_schedule = trigger(&t, a.agent_id, TriggerId::generate(), 1, "schedule", "active");
    on_schedule.conditions = switchboard_domain::Conditions::always();
    on_schedule.schedule = Some(serde_json::from_value(json!({ "expression": "rate(1 hour)", "input": "x" })).unwrap());
    on_schedule.version = 1;
    x.service.create(&ConfigRecord::Trigger(on_schedule.clone())).await.unwrap();
    let id = on_schedule.trigger_id;
    let kept = x.config_admin.get_config(&t, ConfigKind::Trigger, &id.to_string()).await.unwrap();
    // written without a zone, for a tenant without one: stored in UTC
    on_schedule.schedule.as_mut().unwrap().time_zone = "UTC".into();
    assert_eq!(kept, Some(ConfigRecord::Trigger(on_schedule.clone())), "the record is as written, in UTC");
    let hour = Duration::hours(1);
    let (_, slot) = on_schedule.next_slot_after(x.clock.now()).unwrap();
    let due = |at: DateTime<Utc>| {
        let schedules = x.schedules.clone();
        async move { schedules.due_schedules(at, 10).await.unwrap() }
    };
    // not due before its time; due at it
    assert_eq!(due(slot - Duration::milliseconds(1)).await, []);
    let expected = switchboard_engine::DueSchedule { tenant_id: t.clone(), trigger_id: id, slot };
    assert_eq!(due(slot).await, std::slice::from_ref(&expected));
    // one claimant owns the slot; a second claim of it fails
    assert!(x.schedules.move_slot(&t, id, slot, slot + hour).await.unwrap());
    assert!(!x.schedules.move_slot(&t, id, slot, slot + hour).await.unwrap(), "claimed twice");
    assert_eq!(due(slot).await, []);
    assert_eq!(due(slot + hour).await, [switchboard_engine::DueSchedule { slot: slot + hour, ..expected.clone() }]);
    // a write that keeps expression and zone keeps the moved slot; one that changes them renews it
    let mut edited = on_schedule.clone();
    edited.schedule.as_mut().unwrap().input = "y".into();
    edited.version = 2;
    x.service.replace(&ConfigRecord::Trigger(edited.clone()), 1).await.unwrap();
    assert_eq!(due(slot + hour).await, [switchboard_engine::DueSchedule { slot: slot + hour, ..expected.clone() }]);
    edited.schedule.as_mut().unwrap().expression = "rate(2 hours)".into();
    edited.version = 3;
    x.service.replace(&ConfigRecord::Trigger(edited.clone()), 2).await.unwrap();
    let (_, renewed) = edited.next_slot_after(x.clock.now()).unwrap();
    assert_eq!(due(renewed + hour * 24).await, [switchboard_engine::DueSchedule { slot: renewed, ..expected.clone() }]);
    // inactive: no slot; active again: a slot from now; deleted: none
    edited.status = switchboard_domain::TriggerStatus::Inactive;
    edited.version = 4;
    x.service.replace(&ConfigRecord::Trigger(edited.clone()), 3).await.unwrap();
    assert_eq!(due(renewed + hour * 24).await, []);
    assert!(!x.schedules.move_slot(&t, id, renewed, renewed + hour).await.unwrap(), "no slot to claim");
    edited.status = switchboard_domain::TriggerStatus::Active;
    edited.version = 5;
    x.service.replace(&ConfigRecord::Trigger(edited.clone()), 4).await.unwrap();
    assert_eq!(due(renewed + hour * 24).await.len(), 1);
    x.service.delete(&t, ConfigKind::Trigger, &id.to_string(), None).await.unwrap();
    assert_eq!(due(renewed + hour * 24).await, []);
    // and a tenant's deletion takes its schedules with it
    let mut again = on_schedule.clone();
    again.trigger_id = TriggerId::generate();
    x.service.create(&ConfigRecord::Trigger(again)).await.unwrap();
    assert_eq!(due(renewed + hour * 24).await.len(), 1);
    while !x.config_admin.delete_tenant(&t).await.unwrap() {}
    assert_eq!(due(renewed + hour * 24).await, []);
}

async fn the_config_service_keeps_references_within_the_tenant(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    x.config_admin.create_tenant(&t, "Tenant").await.unwrap();
    x.config_admin.create_tenant(&other, "Other").await.unwrap();
    // given a supervisor listed before its sub-agent, and a trigger on the supervisor
    let sub = agent(&t);
    let mut boss = agent(&t);
    boss.agent_type = switchboard_domain::AgentType::Supervisor;
    boss.sub_agents = vec![sub.agent_id];
    let on_boss = trigger(&t, boss.agent_id, TriggerId::generate(), 1, "message.new", "active");
    let set =
        [ConfigRecord::Trigger(on_boss.clone()), ConfigRecord::Agent(boss.clone()), ConfigRecord::Agent(sub.clone())];
    // when they are written together, in that order, then each names the others
    x.service.upsert_all(&set).await.unwrap();
    assert!(x.config.get_agent(&t, boss.agent_id).await.unwrap().is_some());
    // and writing the set again makes each the next version
    x.service.upsert_all(&set).await.unwrap();
    let stored = x.config_admin.get_config(&t, ConfigKind::Agent, &sub.agent_id.to_string()).await.unwrap();
    assert_eq!(stored.map(|r| r.version()), Some(2));
    // a record naming another tenant's agent is refused with a pointer, and nothing is written
    let stray = trigger(&other, sub.agent_id, TriggerId::generate(), 1, "message.new", "active");
    match x.service.upsert_all(&[ConfigRecord::Trigger(stray.clone())]).await {
        Err(ConfigWriteError::Invalid(e)) => assert_eq!(e.0[0].pointer, "/triggers/0/agentId"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let kept = x.config_admin.get_config(&other, ConfigKind::Trigger, &stray.trigger_id.to_string()).await.unwrap();
    assert_eq!(kept, None);
    // a used agent cannot be deleted: the trigger and the supervisor are named
    let sub_id = sub.agent_id.to_string();
    match x.service.delete(&t, ConfigKind::Agent, &sub_id, None).await {
        Err(ConfigWriteError::InUse(users)) => assert_eq!(users, [format!("agent {} (sub-agent)", boss.agent_id)]),
        other => panic!("expected in use, got {other:?}"),
    }
    // a stale version is refused with the current one
    let boss_id = boss.agent_id.to_string();
    match x.service.delete(&t, ConfigKind::Agent, &boss_id, Some(1)).await {
        Err(ConfigWriteError::VersionMismatch { current }) => assert_eq!(current, 2),
        other => panic!("expected a version mismatch, got {other:?}"),
    }
    // deleting from the top down works: trigger, supervisor, then the sub-agent
    x.service.delete(&t, ConfigKind::Trigger, &on_boss.trigger_id.to_string(), None).await.unwrap();
    x.service.delete(&t, ConfigKind::Agent, &boss_id, Some(2)).await.unwrap();
    x.service.delete(&t, ConfigKind::Agent, &sub_id, None).await.unwrap();
    assert!(matches!(x.service.delete(&t, ConfigKind::Agent, &sub_id, None).await, Err(ConfigWriteError::NotFound)));
}

async fn deleting_a_tenant_removes_everything_it_kept_and_nothing_of_another(x: &Subject) {
    let (gone, kept) = (tenant("t-gone"), tenant("t-kept"));
    let now = x.clock.now();
    let today = now.date_naive();
    let expires = now + Duration::minutes(2);
    let mut last = Vec::new();
    let mut agent_ids = Vec::new();
    for t in [&gone, &kept] {
        assert!(x.config_admin.create_tenant(t, "Tenant").await.unwrap());
        let a = agent(t);
        x.service.create(&ConfigRecord::Agent(a.clone())).await.unwrap();
        agent_ids.push(a.agent_id.to_string());
        raw_trigger(x, &trigger(t, a.agent_id, TriggerId::generate(), 10, "message.new", "active")).await;
        // sessions with executions, usage, a split's counts, a limit window and a slot
        let mut sessions = Vec::new();
        for i in 0..6 {
            let mut s = start(t, &format!("c-{i}"), now);
            s.split = Some(Assignment { trigger_id: TriggerId::generate(), variant: "v".into() });
            let mut commit = costly(&s, &format!("evt-{i}"), now, vec![call("m", 10, 5, Some(3))], None);
            commit.content = vec![Blob::of(&json!(format!("prompt {i}")), 2).1];
            x.sessions.commit_turn(&commit).await.unwrap();
            sessions.push(s);
        }
        assert!(x.counters[0].take(t, "MIN#2026-11-23T07:00", 1, expires).await.unwrap());
        assert_eq!(x.counters[0].hold_slot(t, "c-0", 5, now, expires).await.unwrap(), Slot::Held { new: true });
        x.log.log(&outbound(t, "ev-1")).await;
        last.push(sessions.pop().unwrap());
    }
    let agents_of = |t: &TenantId| {
        let admin = x.config_admin.clone();
        let t = t.clone();
        async move { admin.list_config(&t, ConfigKind::Agent, None, 10).await.unwrap().items.len() }
    };

    // deleted, in one call or several
    let mut calls = 0;
    while !x.config_admin.delete_tenant(&gone).await.unwrap() {
        calls += 1;
        assert!(calls < 100, "a deletion must finish");
    }
    assert!(calls > 0 || !x.bounded_deletes, "a bounded deletion takes several calls here");

    // then nothing of it is left
    assert_eq!(x.config.get_tenant(&gone).await.unwrap(), None);
    assert!(!x.config.tenant_exists(&gone).await.unwrap());
    assert_eq!(agents_of(&gone).await, 0);
    let versions = x.config_admin.list_versions(&gone, ConfigKind::Agent, &agent_ids[0], None, 10).await.unwrap();
    assert!(versions.items.is_empty(), "its kept versions");
    assert!(x.config.active_triggers(&gone, EventType::MessageNew).await.unwrap().is_empty());
    assert_eq!(x.sessions.get_session(&gone, last[0].session_id).await.unwrap(), None);
    assert_eq!(x.sessions.latest_session(&gone, "c-5").await.unwrap(), None);
    assert!(x.sessions.list_sessions(&gone, SessionFilter::default(), None, 10).await.unwrap().items.is_empty());
    assert_eq!(x.executions.execution_for_source(&gone, "evt-5").await.unwrap(), None);
    let prompt = Blob::of(&json!("prompt 5"), 2).1.sha256;
    assert!(x.executions.content(&gone, last[0].session_id, std::slice::from_ref(&prompt)).await.unwrap().is_empty());
    assert!(x.executions.usage(&gone, today, today).await.unwrap().is_empty());
    let (day_start, day_end) = (hour_of(now) - Duration::days(2), hour_of(now) + Duration::days(2));
    assert!(x.executions.activity(&gone, day_start, day_end).await.unwrap().is_empty(), "its activity");
    assert!(x.executions.variants(&gone, day_start, day_end).await.unwrap().is_empty(), "its split counts");
    assert!(x.events.events_after(&gone, 0, 10).await.unwrap().is_empty(), "its event log");
    // its counters start afresh: the window's one admission and the slot are free again
    assert!(x.counters[1].take(&gone, "MIN#2026-11-23T07:00", 1, expires).await.unwrap());
    assert_eq!(x.counters[1].hold_slot(&gone, "c-9", 1, now, expires).await.unwrap(), Slot::Held { new: true });
    // and the id may be used again, from nothing
    assert!(x.config_admin.create_tenant(&gone, "Again").await.unwrap());
    assert_eq!(agents_of(&gone).await, 0);

    // the other tenant keeps everything
    assert!(x.config.tenant_exists(&kept).await.unwrap());
    assert_eq!(agents_of(&kept).await, 1);
    let versions = x.config_admin.list_versions(&kept, ConfigKind::Agent, &agent_ids[1], None, 10).await.unwrap();
    assert_eq!(versions.items.len(), 1, "its kept versions");
    assert!(x.sessions.get_session(&kept, last[1].session_id).await.unwrap().is_some());
    assert!(x.executions.execution_for_source(&kept, "evt-5").await.unwrap().is_some());
    assert_eq!(x.executions.content(&kept, last[1].session_id, &[prompt]).await.unwrap().len(), 1, "its content");
    assert_eq!(x.executions.usage(&kept, today, today).await.unwrap().iter().map(|r| r.counts.calls).sum::<u64>(), 6);
    let kept_activity = x.executions.activity(&kept, day_start, day_end).await.unwrap();
    assert_eq!(kept_activity.iter().map(|r| r.executions).sum::<u64>(), 6, "its activity: {kept_activity:?}");
    assert_eq!(x.executions.variants(&kept, day_start, day_end).await.unwrap().len(), 6, "its split counts");
    assert!(!x.counters[1].take(&kept, "MIN#2026-11-23T07:00", 1, expires).await.unwrap(), "its window is still used");
    assert_eq!(x.sessions.list_sessions(&kept, SessionFilter::default(), None, 10).await.unwrap().items.len(), 6);
    assert_eq!(x.events.events_after(&kept, 0, 10).await.unwrap().len(), 1);
}

async fn recorded_content_is_kept_per_session_expires_and_goes_with_the_tenant(x: &Subject) {
    let (t, other) = (tenant("t-content"), tenant("t-other"));
    let now = x.clock.now();
    let blob = |text: &str| Blob::of(&json!({ "role": "user", "content": [{ "type": "text", "text": text }] }), 3).1;
    let (hello, bye, big) = (blob("hello"), blob("bye"), blob(&"y".repeat(200_000)));
    // (a tool's answer of up to 1 MiB: over DynamoDB's item limit)
    let huge = blob(&"z".repeat(600_000));
    // given a turn that keeps two pieces, and a later one that keeps one of them again and a large one
    let s = start(&t, "c-1", now);
    let mut first = create(&s, "evt-1", now);
    first.content = vec![hello.clone(), bye.clone()];
    x.sessions.commit_turn(&first).await.unwrap();
    let (s2, mut second) = update(&s, "evt-2", now);
    second.content = vec![hello.clone(), big.clone(), huge.clone()];
    x.sessions.commit_turn(&second).await.unwrap();
    // then each reads back whole under its session, and a hash never written is left out
    let wanted = [hello.sha256.clone(), bye.sha256.clone(), big.sha256.clone(), huge.sha256.clone(), "0".repeat(64)];
    let mut found = x.executions.content(&t, s2.session_id, &wanted).await.unwrap();
    found.sort_by(|a, b| a.sha256.cmp(&b.sha256));
    let mut expected = vec![hello.clone(), bye.clone(), big.clone(), huge.clone()];
    expected.sort_by(|a, b| a.sha256.cmp(&b.sha256));
    assert_eq!(found, expected);
    // not under another session, nor for another tenant with the same session id
    assert!(x.executions.content(&t, SessionId::generate(), &wanted).await.unwrap().is_empty());
    assert!(x.executions.content(&other, s.session_id, &wanted).await.unwrap().is_empty());
    // a commit that is refused (a stale version) may leave content behind, never a record
    let mut stale = create(&s, "evt-3", now);
    stale.content = vec![blob("orphan")];
    assert!(x.sessions.commit_turn(&stale).await.is_err());
    assert_eq!(x.executions.execution_for_source(&t, "evt-3").await.unwrap(), None);
    // a turn with more pieces than one transaction holds keeps them all
    let many: Vec<Blob> = (0..150).map(|i| blob(&format!("piece {i}"))).collect();
    let (_, mut long) = update(&s2, "evt-4", now);
    long.content = many.clone();
    x.sessions.commit_turn(&long).await.unwrap();
    let hashes: Vec<String> = many.iter().map(|b| b.sha256.clone()).collect();
    assert_eq!(x.executions.content(&t, s.session_id, &hashes).await.unwrap().len(), 150);
    // after the content's retention nothing reads back
    x.clock.advance(Duration::days(switchboard_domain::limits::CONTENT_TTL_DAYS) + Duration::minutes(1));
    assert!(x.executions.content(&t, s.session_id, &wanted).await.unwrap().is_empty());
}

fn outbound(t: &TenantId, id: &str) -> OutboundEvent {
    OutboundEvent {
        id: id.into(),
        detail_type: "session.handoff.human".into(),
        tenant_id: t.clone(),
        detail: json!({ "sessionId": SessionId::generate(), "reason": format!("{id} of {t}") }),
    }
}

async fn the_event_log_keeps_each_event_once_in_order_and_per_tenant(x: &Subject) {
    let (a, b) = (tenant("t-a"), tenant("t-b"));
    for t in [&a, &b] {
        assert!(x.config_admin.create_tenant(t, "Tenant").await.unwrap());
    }
    // the same ids in both tenants, and a replayed publication of one
    for id in ["e-1", "e-2", "e-1", "e-3"] {
        x.log.log(&outbound(&a, id)).await;
    }
    x.log.log(&outbound(&b, "e-1")).await;
    let logged = x.events.events_after(&a, 0, 10).await.unwrap();
    let ids: Vec<&str> = logged.iter().map(|(_, e)| e.id.as_str()).collect();
    assert_eq!(ids, ["e-1", "e-2", "e-3"], "once each, in publication order");
    assert!(logged.windows(2).all(|w| w[0].0 < w[1].0), "sequence numbers rise");
    assert!(logged.iter().all(|(_, e)| e.tenant_id == a && e.detail["reason"].as_str().unwrap().ends_with("of t-a")));
    // paged by the last sequence number seen
    let first = x.events.events_after(&a, 0, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    let rest = x.events.events_after(&a, first[0].0, 10).await.unwrap();
    assert_eq!(rest.iter().map(|(_, e)| e.id.as_str()).collect::<Vec<_>>(), ["e-2", "e-3"]);
    assert!(x.events.events_after(&a, logged[2].0, 10).await.unwrap().is_empty());
    // the other tenant's log holds its own event only
    let theirs = x.events.events_after(&b, 0, 10).await.unwrap();
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].1.detail["reason"], "e-1 of t-b");
}

async fn a_turns_events_are_logged_with_its_commit_and_not_without_it(x: &Subject) {
    let t = tenant("t-1");
    let now = x.clock.now();
    x.log.log(&outbound(&t, "before")).await;
    // a turn that commits keeps its events in the log, after what was there, in its order
    let mut first = create(&start(&t, "c-1", now), "evt-1", now);
    first.events = vec![outbound(&t, "t1-a"), outbound(&t, "t1-b")];
    x.sessions.commit_turn(&first).await.unwrap();
    let logged = x.events.events_after(&t, 0, 10).await.unwrap();
    let ids: Vec<&str> = logged.iter().map(|(_, e)| e.id.as_str()).collect();
    assert_eq!(ids, ["before", "t1-a", "t1-b"]);
    assert!(logged.windows(2).all(|w| w[0].0 < w[1].0), "sequence numbers rise");
    assert_eq!(logged[1].1, first.events[0], "the event as announced");
    // a turn whose commit is refused (its source is recorded already) logs none of its events
    let mut refused = create(&start(&t, "c-2", now), "evt-1", now);
    refused.events = vec![outbound(&t, "never")];
    let err = x.sessions.commit_turn(&refused).await.unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(_)), "{err:?}");
    // and one that loses a version race neither
    let mut stale = create(&start(&t, "c-3", now), "evt-3", now);
    x.sessions.commit_turn(&stale).await.unwrap();
    stale.execution.source_id = "evt-4".into();
    stale.execution.execution_id = switchboard_domain::ExecutionId::generate();
    stale.sessions[0].expected_version = Some(41);
    stale.events = vec![outbound(&t, "never-either")];
    let err = x.sessions.commit_turn(&stale).await.unwrap_err();
    assert!(matches!(err, StoreError::VersionConflict(_)), "{err:?}");
    let after = x.events.events_after(&t, 0, 10).await.unwrap();
    assert_eq!(after.len(), 3, "{after:?}");
    // the next event logged comes after the turn's
    x.log.log(&outbound(&t, "later")).await;
    let last = x.events.events_after(&t, logged[2].0, 10).await.unwrap();
    assert_eq!(last.iter().map(|(_, e)| e.id.as_str()).collect::<Vec<_>>(), ["later"]);
}

/// On AWS a piece of recorded content over DynamoDB's item limit is an object in S3 that its item
/// names: read back whole and checked against its hash, left out by a store with no bucket; a
/// commit whose object cannot be written fails and records nothing. (The archiver deletes the
/// object when a tenant's deletion removes the item: `functions/lambda/tests/handlers`.)
#[tokio::test]
async fn a_piece_too_large_for_an_item_is_an_object_in_s3_that_its_item_names() {
    let clock = ManualClock::new();
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let names = common::provision(&sdk).await;
    let dynamodb = AwsClients::new(&sdk).dynamodb;
    let bucket = S3Archive::new(S3Archive::client(&sdk, true), common::create_bucket(&sdk).await, "");
    let store = DynamoStore::new(dynamodb.clone(), names.clone(), clock.clone()).with_large_content(&bucket);
    let t = tenant("t-1");
    assert!(store.create_tenant(&t, "Acme").await.unwrap());
    let now = clock.now();
    let blob =
        |text: &str| Blob::of(&json!({ "role": "user", "content": [{ "type": "tool_result", "text": text }] }), 3).1;
    let (small, huge) = (blob("hello"), blob(&"z".repeat(700_000)));
    // given a turn that records a piece over the item limit beside a small one
    let s = start(&t, "c-1", now);
    let mut turn = create(&s, "evt-1", now);
    turn.content = vec![small.clone(), huge.clone()];
    store.commit_turn(&turn).await.unwrap();
    // then its item names the object and holds no content, and the object holds the piece
    use aws_sdk_dynamodb::types::AttributeValue as A;
    let item = dynamodb
        .get_item()
        .table_name(&names.executions_table)
        .key("PK", A::S(format!("SESSION#{}", s.session_id)))
        .key("SK", A::S(format!("CONTENT#{}", huge.sha256)))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let object = format!("pieces/session={}/{}.json", s.session_id, huge.sha256);
    assert_eq!(item.get("s3Key").and_then(|v| v.as_s().ok()), Some(&object));
    assert!(!item.contains_key("content"));
    assert_eq!(bucket.get(&object).await.unwrap().as_deref(), Some(huge.body.as_slice()));
    // and it reads back whole with the small one
    let wanted = [small.sha256.clone(), huge.sha256.clone()];
    assert_eq!(store.content(&t, s.session_id, &wanted).await.unwrap().len(), 2);
    // a function given no bucket reads it as no longer kept (and the small one still)
    let unbucketed = DynamoStore::new(dynamodb.clone(), names.clone(), clock.clone());
    assert_eq!(unbucketed.content(&t, s.session_id, &wanted).await.unwrap(), vec![small.clone()]);
    // an object that is not what its hash says is not given out
    bucket.put(&object, b"{\"tampered\":true}".to_vec(), "application/json").await.unwrap();
    assert_eq!(store.content(&t, s.session_id, &wanted).await.unwrap(), vec![small.clone()]);
    bucket.put(&object, huge.body.clone(), "application/json").await.unwrap();
    // a commit whose object cannot be written (no such bucket) fails and records nothing
    let missing = S3Archive::new(S3Archive::client(&sdk, true), "no-such-bucket-here", "");
    let broken = DynamoStore::new(dynamodb.clone(), names.clone(), clock.clone()).with_large_content(&missing);
    let (_, mut later) = update(&s, "evt-2", now);
    later.content = vec![blob(&"w".repeat(500_000))];
    let err = broken.commit_turn(&later).await.unwrap_err();
    assert!(matches!(&err, StoreError::Unavailable { message, .. } if message.contains("PutObject")), "{err:?}");
    assert_eq!(store.execution_for_source(&t, "evt-2").await.unwrap(), None);
    // the object is what the archiver is given to delete when the item goes
    assert_eq!(switchboard_aws::piece_key(&s.session_id.to_string(), &huge.sha256), object);
    while !store.delete_tenant(&t).await.unwrap() {}
    assert!(store.content(&t, s.session_id, &wanted).await.unwrap().is_empty());
}

/// On AWS a writer takes its events' numbers before the transaction that writes them, so writers
/// commit out of order: a reader must not move past a number a writer still holds (it would
/// never see that event), nor wait for ever on one no write will fill.
#[tokio::test]
async fn an_event_reader_waits_for_a_number_a_writer_still_holds_and_passes_a_burned_one() {
    let clock = ManualClock::new();
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let names = common::provision(&sdk).await;
    let dynamodb = AwsClients::new(&sdk).dynamodb;
    let store = DynamoStore::new(dynamodb.clone(), names.clone(), clock.clone());
    let t = tenant("t-1");
    let ids = |read: &[(i64, OutboundEvent)]| read.iter().map(|(_, e)| e.id.clone()).collect::<Vec<_>>();
    assert!(store.log_event(&outbound(&t, "first")).await.unwrap());
    let first = store.events_after(&t, 0, 10).await.unwrap();
    assert_eq!(ids(&first), ["first"]);
    // given a writer that has taken the next number and not committed yet
    use aws_sdk_dynamodb::types::AttributeValue as A;
    dynamodb
        .update_item()
        .table_name(&names.executions_table)
        .key("PK", A::S("TENANT#t-1#EVENTS".into()))
        .key("SK", A::S("SEQ".into()))
        .update_expression("ADD #n :one")
        .expression_attribute_names("#n", "n")
        .expression_attribute_values(":one", A::N("1".into()))
        .send()
        .await
        .unwrap();
    // and an event logged after it
    assert!(store.log_event(&outbound(&t, "second")).await.unwrap());
    // then a reader past the first does not move on yet: the held number may still be written
    assert_eq!(ids(&store.events_after(&t, first[0].0, 10).await.unwrap()), Vec::<String>::new());
    // and once the settle time has passed the number counts as unused
    clock.advance(switchboard_aws::EVENT_SETTLE + Duration::seconds(1));
    let second = store.events_after(&t, first[0].0, 10).await.unwrap();
    assert_eq!(ids(&second), ["second"]);
    // a number taken by a write that did not commit (an event logged again) is marked burned, and
    // the reader passes it at once
    assert!(!store.log_event(&outbound(&t, "second")).await.unwrap());
    assert!(store.log_event(&outbound(&t, "third")).await.unwrap());
    assert_eq!(ids(&store.events_after(&t, second[0].0, 10).await.unwrap()), ["third"]);
}

async fn paused_turns_are_listed_longest_waiting_first_by_tenant_or_all_until_written_without(x: &Subject) {
    let (t, other) = (tenant("t-1"), tenant("t-2"));
    let now = x.clock.now();
    // three paused turns, asked for in this order: t-1's second, t-2's, t-1's first
    let (late, c1) = pausing(&t, "c-1", "evt-1", now + Duration::minutes(3));
    let (early, c2) = pausing(&t, "c-2", "evt-2", now + Duration::minutes(1));
    let (theirs, c3) = pausing(&other, "c-1", "evt-1", now + Duration::minutes(2));
    for c in [&c1, &c2, &c3] {
        x.sessions.commit_turn(c).await.unwrap();
    }
    // and a session that is not paused
    x.sessions.commit_turn(&create(&start(&t, "c-3", now), "evt-3", now)).await.unwrap();

    let listed = |tenant: Option<TenantId>, limit| {
        let sessions = x.sessions.clone();
        async move { ids(&sessions.sessions_awaiting_approval(tenant.as_ref(), limit).await.unwrap()) }
    };
    assert_eq!(listed(Some(t.clone()), 10).await, vec![early.session_id, late.session_id]);
    assert_eq!(listed(Some(t.clone()), 1).await, vec![early.session_id]);
    assert_eq!(listed(Some(other.clone()), 10).await, vec![theirs.session_id]);
    assert_eq!(listed(None, 10).await, vec![early.session_id, theirs.session_id, late.session_id]);
    assert_eq!(listed(None, 2).await, vec![early.session_id, theirs.session_id]);
    let read = x.sessions.sessions_awaiting_approval(Some(&t), 10).await.unwrap();
    assert_eq!(read[0].paused, early.paused, "the paused turn reads back whole");

    // written without its pause (decided, then resumed), a session leaves the list
    let mut resumed = early.clone();
    resumed.paused = None;
    resumed.version += 1;
    x.sessions.write_session(&SessionWrite { session: resumed, expected_version: Some(early.version) }).await.unwrap();
    assert_eq!(listed(Some(t.clone()), 10).await, vec![late.session_id]);
    assert_eq!(listed(None, 10).await, vec![theirs.session_id, late.session_id]);
    assert!(listed(Some(tenant("t-3")), 10).await.is_empty());
}

async fn a_resumed_execution_replaces_its_paused_record_once_and_counts_only_what_it_adds(x: &Subject) {
    let t = tenant("t-1");
    let now = x.clock.now();
    let today = now.date_naive();
    let (session, mut pause) = pausing(&t, "c-1", "evt-1", now);
    pause.execution.model_calls = vec![call("openai:gpt-4o-mini", 100, 10, Some(20))];
    x.sessions.commit_turn(&pause).await.unwrap();
    let before = pause.execution.clone();
    let mine = before.agent_id;
    let usage = |x: &Subject| {
        let executions = x.executions.clone();
        let t = t.clone();
        async move {
            let rows = executions.usage(&t, today, today).await.unwrap();
            rows.into_iter().map(|r| (r.model, r.counts.calls, r.counts.input_tokens)).collect::<Vec<_>>()
        }
    };
    let activity = |x: &Subject| {
        let executions = x.executions.clone();
        let t = t.clone();
        async move {
            let rows = executions.activity(&t, hour_of(now), hour_of(now)).await.unwrap();
            rows.into_iter().map(|r| (r.status, r.executions)).collect::<Vec<_>>()
        }
    };
    let insights = |x: &Subject| {
        let executions = x.executions.clone();
        let t = t.clone();
        async move {
            let rows = executions.insights(&t, hour_of(now), hour_of(now)).await.unwrap();
            let total = switchboard_domain::insights::Report::of(&rows, &[], &jiff::tz::TimeZone::UTC).total;
            let latencies =
                total.sketches.get(&switchboard_domain::insights::Measure::Latency).map_or(0, |s| s.count());
            (total.counts.conversations, total.counts.executions, total.counts.tokens, latencies)
        }
    };
    // paused: its model call is counted, the execution is not (it has not ended)
    assert_eq!(usage(x).await, vec![("openai:gpt-4o-mini".to_owned(), 1, 100)]);
    assert!(activity(x).await.is_empty());
    assert_eq!(insights(x).await, (1, 0, 110, 0), "the conversation and the call, not the execution yet");
    // a turn that paused before doing anything counts nothing, and commits all the same
    let (_, empty) = pausing(&t, "c-2", "evt-2", now);
    x.sessions.commit_turn(&empty).await.unwrap();
    assert_eq!(insights(x).await, (2, 0, 110, 0), "its conversation opened");

    // resumed: the same execution, one more call, its status at the end
    let mut done = before.clone();
    done.status = ExecutionStatus::Success;
    done.model_calls.push(call("openai:gpt-4o-mini", 30, 5, Some(7)));
    let mut next = session.clone();
    next.paused = None;
    next.version += 1;
    let resume = TurnCommit {
        events: vec![],
        sessions: vec![SessionWrite { session: next.clone(), expected_version: Some(session.version) }],
        execution: done.clone(),
        content: vec![],
        resumes: Some(Box::new(before.clone())),
        coalesced: vec![],
    };
    x.sessions.commit_turn(&resume).await.unwrap();
    let read = x.executions.get_execution(&t, before.execution_id).await.unwrap().unwrap();
    assert_eq!((read.status, read.model_calls.len()), (ExecutionStatus::Success, 2));
    let by_source = x.executions.execution_for_source(&t, "evt-1").await.unwrap().unwrap();
    assert_eq!(by_source.execution_id, before.execution_id, "the source still leads to it");
    assert_eq!(usage(x).await, vec![("openai:gpt-4o-mini".to_owned(), 2, 130)]);
    assert_eq!(activity(x).await, vec![(ExecutionStatus::Success, 1)]);
    assert_eq!(insights(x).await, (2, 1, 145, 1), "the execution once, with the call it added");
    assert_eq!(read.agent_id, mine);

    // a second resumption of it (a redelivered resume item) is refused and counts nothing
    let mut again = resume.clone();
    again.sessions[0] = SessionWrite {
        session: Session { version: next.version + 1, ..next.clone() },
        expected_version: Some(next.version),
    };
    assert!(matches!(x.sessions.commit_turn(&again).await, Err(StoreError::Duplicate(_))));
    assert_eq!(usage(x).await, vec![("openai:gpt-4o-mini".to_owned(), 2, 130)]);
    assert_eq!(activity(x).await, vec![(ExecutionStatus::Success, 1)]);
    assert_eq!(insights(x).await, (2, 1, 145, 1));
    assert_eq!(x.sessions.get_session(&t, session.session_id).await.unwrap().unwrap().version, next.version);

    // a later turn that pauses before doing anything has nothing to count, and commits all the same
    let third = start(&t, "c-3", now);
    x.sessions.commit_turn(&create(&third, "evt-3", now)).await.unwrap();
    assert_eq!(insights(x).await, (3, 2, 145, 2));
    let (next, mut idle) = update(&third, "evt-4", now);
    idle.execution.status = ExecutionStatus::AwaitingApproval;
    idle.sessions[0].session = paused(&next, "evt-4", idle.execution.execution_id, now);
    x.sessions.commit_turn(&idle).await.unwrap();
    assert_eq!(insights(x).await, (3, 2, 145, 2));
}
