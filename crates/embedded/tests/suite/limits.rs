//! Tenant limits on the embedded profile: invocations per minute and tokens per day enforced at
//! intake against the SQLite counters and usage, what a refused message becomes (its record, the
//! tenant's `onLimit` answer, one `tenant.limit.reached` per window), the concurrent-sessions cap
//! (slots held per conversation, freed when a session ends or goes idle), and counts and slots
//! that stay exact under concurrency. The clock is manual; items are drained by hand.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use serde_json::json;
use switchboard_domain::event::detail_type;
use switchboard_domain::{ExecutionRecord, ExecutionStatus, LimitName, OnLimit, OutboundEvent, TenantId, TenantLimits};
use switchboard_embedded::{EmbeddedOptions, ScriptedModel};
use switchboard_engine::{
    Attempt, Clock, ConfigAdmin, ConfigStore, ConversationLog, Counters, ExecOutcome, ExecutionLog, LoggedMessage,
    Model, ModelError, ModelRequest, ModelResponse, RouteError, RouteOutcome, SessionStore, Slot, WorkItem,
};

/// The scripted model, keeping the output cap (`maxTokens`) each call asked for.
struct Recording {
    inner: Arc<ScriptedModel>,
    caps: Arc<Mutex<Vec<u32>>>,
}

#[async_trait]
impl Model for Recording {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.caps.lock().unwrap().push(request.config.max_tokens);
        self.inner.converse(request).await
    }
}
use switchboard_testkit::ManualClock;

use crate::common;

const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";

/// The common world on a manual clock, its one tenant under the limits a story sets.
struct World {
    base: common::World,
    clock: Arc<ManualClock>,
}

impl std::ops::Deref for World {
    type Target = common::World;
    fn deref(&self) -> &common::World {
        &self.base
    }
}

impl std::ops::DerefMut for World {
    fn deref_mut(&mut self) -> &mut common::World {
        &mut self.base
    }
}

impl World {
    async fn new(limits: TenantLimits) -> Self {
        let script = json!({ "rules": [ { "when": {}, "then": { "text": "You said: {{userText}}" } } ] });
        Self::with_agent(limits, json!({}), script, None).await
    }

    /// A world whose agent has `extra` fields, answered by `script` (through `recorder`, which
    /// keeps the output cap of every model call, when given).
    async fn with_agent(
        limits: TenantLimits,
        extra: serde_json::Value,
        script: serde_json::Value,
        recorder: Option<Arc<Mutex<Vec<u32>>>>,
    ) -> Self {
        let clock = ManualClock::new();
        let scripted = Arc::new(ScriptedModel::from_json(&script.to_string()).unwrap());
        let model: Arc<dyn Model> = match recorder {
            Some(caps) => Arc::new(Recording { inner: scripted, caps }),
            None => scripted,
        };
        let mut agent = json!({ "agentId": AGENT, "name": "Front", "systemPrompt": "You help.", "model": "test-model",
                                "tools": ["send_message", "set_context"], "maxTurns": 50, "maxIterations": 4 });
        agent.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let bundle = json!({
            "tenantId": "t-1", "name": "Limited tenant",
            "agents": [agent],
            "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": AGENT,
                           "eventType": "message.new", "priority": 10, "conditions": {} }]
        });
        let base = common::World::open(model, clock.clone(), EmbeddedOptions::default(), &[&bundle.to_string()]).await;
        let store = &base.embedded.store;
        let mut t = store.get_tenant(&base.tenant).await.unwrap().unwrap();
        t.limits = limits;
        assert!(store.update_tenant(&t).await.unwrap());
        Self { base, clock }
    }

    /// Routes a message and runs what it queued; the record of the message.
    async fn say(&mut self, conversation: &str, text: &str) -> (RouteOutcome, Option<ExecutionRecord>) {
        let (outcome, outcomes) = self.base.say(conversation, text).await;
        let mut records =
            outcomes.into_iter().filter_map(|o| if let ExecOutcome::Recorded(r) = o { Some(*r) } else { None });
        (outcome, records.next_back())
    }

    async fn limit_events(&self) -> Vec<OutboundEvent> {
        let all = self.events().await;
        all.into_iter().filter(|e| e.detail_type == detail_type::TENANT_LIMIT_REACHED).collect()
    }
}

fn limits(per_minute: u32, tokens: u64, on_limit: OnLimit) -> TenantLimits {
    TenantLimits { invocations_per_minute: per_minute, tokens_per_day: tokens, on_limit, ..TenantLimits::default() }
}

fn sessions_cap(sessions: u32, per_minute: u32) -> TenantLimits {
    TenantLimits {
        concurrent_sessions: sessions,
        invocations_per_minute: per_minute,
        on_limit: OnLimit::Message { text: "All our agents are busy.".into() },
        ..TenantLimits::default()
    }
}

/// An agent that ends the conversation when told "bye" and echoes anything else.
fn ending_script() -> serde_json::Value {
    json!({ "rules": [
        { "when": { "userText": { "contains": "bye" } },
          "then": { "toolCalls": [ { "name": "end_conversation", "input": { "summary": "done" } } ] } },
        { "when": {}, "then": { "text": "You said: {{userText}}" } } ] })
}

#[tokio::test]
async fn the_minute_limit_refuses_the_fourth_message_answers_it_as_configured_and_reopens() {
    let busy = OnLimit::Message { text: "We are busy; a person will get back to you.".into() };
    let mut w = World::new(limits(3, 1_000_000, busy)).await;
    for i in 1..=3 {
        let (outcome, record) = w.say(&format!("c-{i}"), "hello").await;
        assert!(matches!(outcome, RouteOutcome::Enqueued { .. }), "message {i}: {outcome:?}");
        assert_eq!(record.unwrap().status, ExecutionStatus::Success);
    }
    // The fourth and fifth in the same minute: recorded as refused, not run.
    for i in 4..=5 {
        let (outcome, record) = w.say(&format!("c-{i}"), "anyone there?").await;
        assert_eq!(outcome.as_str(), "rate_limited");
        let record = record.unwrap();
        assert_eq!(record.status, ExecutionStatus::RateLimited);
        assert!(record.model_calls.is_empty(), "no model call for a refused message");
        let error = record.error.unwrap();
        assert_eq!(error.reason.as_deref(), Some("invocationsPerMinute"));
        assert!(error.message.contains("invocationsPerMinute (3)"), "{}", error.message);
        assert_eq!(w.replies(&format!("c-{i}")).await, ["We are busy; a person will get back to you."]);
    }
    // The refused message is in the session: the agent sees it once the window reopens.
    let session = w.embedded.store.latest_session(&w.tenant, "c-4").await.unwrap().unwrap();
    assert!(session.is_active());
    let texts: Vec<String> = session.transcript.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["anyone there?", "We are busy; a person will get back to you."]);

    let events = w.limit_events().await;
    assert_eq!(events.len(), 1, "announced once per window: {events:?}");
    assert_eq!(events[0].detail["limit"], "invocationsPerMinute");
    assert_eq!(events[0].detail["value"], 3);
    assert_eq!(events[0].detail["window"], "MIN#2026-11-23T07:00");
    assert_eq!(events[0].detail["retryAfterSeconds"], 60);

    w.clock.advance(chrono::Duration::seconds(60));
    let (outcome, record) = w.say("c-4", "still there?").await;
    assert!(matches!(outcome, RouteOutcome::Enqueued { .. }));
    assert_eq!(record.unwrap().status, ExecutionStatus::Success);
    assert_eq!(w.replies("c-4").await.last().unwrap(), "You said: still there?");
}

#[tokio::test]
async fn a_queued_message_is_logged_in_the_enqueues_database_call_and_once_when_it_comes_again() {
    let mut w = World::new(limits(3, 1_000_000, OnLimit::Nothing)).await;
    let inbound = |log: Vec<LoggedMessage>| -> Vec<String> {
        log.into_iter().filter(|m| m.direction == "inbound").map(|m| m.text).collect()
    };
    // a routed message, once the tenant, its triggers, agent and day's tokens are in memory: the
    // admission's counts, the log and the enqueue in one database call
    let first = w.event("c-0", "warming up");
    w.embedded.ingest(&first).await.unwrap();
    let e = w.event("c-1", "hello");
    let calls = w.embedded.store.db_calls();
    assert!(matches!(w.embedded.ingest(&e).await.unwrap(), RouteOutcome::Enqueued { duplicate: false, .. }));
    assert_eq!(w.embedded.store.db_calls() - calls, 1, "counts, log and enqueue together");
    assert_eq!(inbound(w.embedded.store.messages(&w.tenant, "c-1", 10).await.unwrap()), ["hello"]);
    // the same event again: queued and logged once, and not counted again
    assert!(matches!(w.embedded.ingest(&e).await.unwrap(), RouteOutcome::Enqueued { duplicate: true, .. }));
    assert_eq!(inbound(w.embedded.store.messages(&w.tenant, "c-1", 10).await.unwrap()), ["hello"]);
    let third = w.event("c-2", "the third of the minute");
    assert!(matches!(w.embedded.ingest(&third).await.unwrap(), RouteOutcome::Enqueued { duplicate: false, .. }));
    // a refused message is queued (to be recorded as refused) and logged the same way
    let refused = w.event("c-3", "anyone?");
    assert_eq!(w.embedded.ingest(&refused).await.unwrap().as_str(), "rate_limited");
    assert_eq!(inbound(w.embedded.store.messages(&w.tenant, "c-3", 10).await.unwrap()), ["anyone?"]);
    // and a repeated refused event is found queued (as refused: its record says so), not counted
    // or refused again
    let again = w.embedded.ingest(&refused).await.unwrap();
    assert!(matches!(again, RouteOutcome::Enqueued { duplicate: true, .. }), "{again:?}");
    assert_eq!(inbound(w.embedded.store.messages(&w.tenant, "c-3", 10).await.unwrap()), ["anyone?"]);
}

#[tokio::test]
async fn a_message_whose_enqueue_fails_keeps_no_count_and_no_session_slot() {
    let mut w = World::new(limits(3, 1_000_000, OnLimit::Nothing)).await;
    let warm = w.event("c-0", "warming up");
    w.embedded.ingest(&warm).await.unwrap();
    // the queue's table refuses every new item (what a full disk or a broken file would do to the
    // enqueue, after the counts were taken in the same transaction)
    let file = w.dir.path().join("switchboard.db");
    let raw = rusqlite::Connection::open(&file).unwrap();
    raw.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
    raw.execute_batch(
        "CREATE TRIGGER refuse_items BEFORE INSERT ON queue_items BEGIN SELECT RAISE(ABORT, 'no room'); END;",
    )
    .unwrap();
    let counted = |raw: &rusqlite::Connection| -> (i64, i64) {
        let count = raw.query_row(
            "SELECT coalesce(sum(count), 0) FROM tenant_counters WHERE window_key LIKE 'MIN#%'",
            [],
            |r| r.get(0),
        );
        let slots = raw.query_row("SELECT count(*) FROM session_slots WHERE conversation_id = 'c-1'", [], |r| r.get(0));
        (count.unwrap(), slots.unwrap())
    };
    assert_eq!(counted(&raw), (1, 0));
    let e = w.event("c-1", "hello");
    let failed = w.embedded.ingest(&e).await;
    assert!(matches!(failed, Err(RouteError::Queue(ref q)) if q.message.contains("no room")), "{failed:?}");
    // then nothing of the message is kept: no count, no slot, no line in the log
    assert_eq!(counted(&raw), (1, 0));
    assert!(w.embedded.store.messages(&w.tenant, "c-1", 10).await.unwrap().is_empty());
    // and once the queue takes items again, the same event is admitted, counted once
    raw.execute_batch("DROP TRIGGER refuse_items").unwrap();
    assert!(matches!(w.embedded.ingest(&e).await.unwrap(), RouteOutcome::Enqueued { duplicate: false, .. }));
    assert_eq!(counted(&raw), (2, 1));
}

#[tokio::test]
async fn a_redelivered_refusal_is_not_answered_twice() {
    let mut w = World::new(limits(1, 1_000_000, OnLimit::Message { text: "Busy.".into() })).await;
    w.say("c-1", "first").await;
    let e = w.event("c-2", "second");
    assert_eq!(w.embedded.ingest(&e).await.unwrap().as_str(), "rate_limited");
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    assert_eq!(item.refused.as_ref().map(|r| r.limit), Some(LimitName::InvocationsPerMinute));
    assert!(matches!(w.embedded.executor.execute(&item).await.unwrap(), ExecOutcome::Recorded(_)));
    assert!(matches!(w.embedded.executor.execute(&item).await.unwrap(), ExecOutcome::AlreadyRecorded(_)));
    assert_eq!(w.replies("c-2").await, ["Busy."]);
}

#[tokio::test]
async fn tokens_per_day_refuse_once_the_days_usage_reaches_them_until_the_next_utc_day() {
    let mut w = World::new(limits(60, 1_000_000, OnLimit::Nothing)).await;
    let (_, record) = w.say("c-1", "a first question").await;
    let used = record.unwrap().token_usage.total();
    // The day's limit lowered to exactly what the day has used.
    let mut t = w.embedded.store.get_tenant(&w.tenant).await.unwrap().unwrap();
    t.limits.tokens_per_day = used;
    assert!(w.embedded.store.update_tenant(&t).await.unwrap());
    let (outcome, record) = w.say("c-1", "and another").await;
    assert_eq!(outcome.as_str(), "budget_exceeded");
    let record = record.unwrap();
    assert_eq!(record.status, ExecutionStatus::BudgetExceeded);
    assert_eq!(record.error.unwrap().reason.as_deref(), Some("tokensPerDay"));
    assert!(record.actions.is_empty(), "onLimit none sends nothing");
    assert_eq!(w.replies("c-1").await.len(), 1);
    w.say("c-2", "one more").await;
    let events = w.limit_events().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].detail["limit"], "tokensPerDay");
    // 07:00 UTC: the day reopens in 17 hours.
    assert_eq!(events[0].detail["retryAfterSeconds"], 17 * 3600);

    w.clock.advance(chrono::Duration::hours(17));
    let (outcome, _) = w.say("c-1", "good morning").await;
    assert!(matches!(outcome, RouteOutcome::Enqueued { .. }), "{outcome:?}");
}

#[tokio::test]
async fn a_conversation_a_human_owns_is_not_refused_for_the_agents_tokens() {
    let mut w = World::new(limits(60, 1_000_000, OnLimit::HandoffToHuman)).await;
    let (_, record) = w.say("c-1", "a first question").await;
    let mut t = w.embedded.store.get_tenant(&w.tenant).await.unwrap().unwrap();
    t.limits.tokens_per_day = record.unwrap().token_usage.total();
    assert!(w.embedded.store.update_tenant(&t).await.unwrap());
    // the day's tokens are spent: refused, and onLimit hands the conversation to a human
    let (outcome, _) = w.say("c-1", "and another").await;
    assert_eq!(outcome.as_str(), "budget_exceeded");
    assert!(w.embedded.store.latest_session(&w.tenant, "c-1").await.unwrap().unwrap().is_human_owned());
    // the human's conversation is the human's, whatever the agents' budget says
    let (outcome, record) = w.say("c-1", "is anyone there?").await;
    assert!(matches!(outcome, RouteOutcome::HumanOwned { .. }), "{outcome:?}");
    assert_eq!(record.unwrap().status, ExecutionStatus::Skipped);
    // while another conversation is still refused
    let (outcome, _) = w.say("c-2", "hello").await;
    assert_eq!(outcome.as_str(), "budget_exceeded");
}

#[tokio::test]
async fn the_days_tokens_kept_in_memory_equal_the_usage_rows_at_every_commit() {
    use switchboard_engine::ConfigAdmin;
    let mut w = World::new(limits(60, 1_000_000, OnLimit::Nothing)).await;
    let (store, t) = (w.embedded.store.clone(), w.tenant.clone());
    let day = w.clock.now().date_naive();
    let from_rows =
        || async { store.usage(&t, day, day).await.unwrap().iter().map(|r| r.counts.tokens()).sum::<u64>() };
    assert_eq!(store.tokens_on(&t, day).await.unwrap(), 0);
    for i in 0..3 {
        w.say(&format!("c-{i}"), "a question").await;
        let calls = store.db_calls();
        let kept = store.tokens_on(&t, day).await.unwrap();
        assert_eq!(store.db_calls(), calls, "answered from memory");
        assert!(kept > 0);
        assert_eq!(kept, from_rows().await, "after commit {i}");
    }
    // the next day starts from its own rows; a deleted tenant has none
    let tomorrow = day.succ_opt().unwrap();
    assert_eq!(store.tokens_on(&t, tomorrow).await.unwrap(), 0);
    assert!(store.delete_tenant(&t).await.unwrap());
    assert_eq!(store.tokens_on(&t, day).await.unwrap(), 0);
}

#[tokio::test]
async fn a_day_usage_cache_reads_the_days_tokens_once_per_ttl_and_is_late_by_at_most_that() {
    use switchboard_engine::{Admission, Limits};
    let mut w = World::new(limits(60, 1_000_000, OnLimit::Nothing)).await;
    let deps = w.embedded.executor.deps().clone();
    let cached = Limits::new(&deps).with_day_usage_cache(std::time::Duration::from_secs(3600));
    let tenant = w.embedded.store.get_tenant(&w.tenant).await.unwrap().unwrap();
    let admitted = |a: &Admission| matches!(a, Admission::Admitted(_));
    let calls = w.embedded.store.db_calls();
    assert!(admitted(&cached.admit(&tenant, "c-1", Some(false), false).await.unwrap()));
    let first = w.embedded.store.db_calls() - calls;
    assert!(admitted(&cached.admit(&tenant, "c-1", Some(true), false).await.unwrap()));
    assert_eq!(w.embedded.store.db_calls() - calls - first, first - 1, "the second admission reads no usage");
    // the day's tokens reach the limit: a fresh read refuses, the cached figure admits until it expires
    let (_, record) = w.say("c-1", "a first question").await;
    let mut tenant = tenant;
    tenant.limits.tokens_per_day = record.unwrap().token_usage.total();
    assert!(
        admitted(&cached.admit(&tenant, "c-1", Some(true), false).await.unwrap()),
        "within the TTL: the usage as last read"
    );
    let refused = Limits::new(&deps)
        .with_day_usage_cache(std::time::Duration::ZERO)
        .admit(&tenant, "c-1", Some(true), false)
        .await;
    assert!(matches!(refused.unwrap(), Admission::Refused(r) if r.limit == LimitName::TokensPerDay));
    // the next UTC day is a new entry
    w.clock.advance(chrono::Duration::hours(17));
    let calls = w.embedded.store.db_calls();
    assert!(admitted(&cached.admit(&tenant, "c-1", Some(true), false).await.unwrap()));
    assert_eq!(w.embedded.store.db_calls() - calls, first, "a new day is read");
}

#[tokio::test]
async fn on_limit_hands_the_conversation_to_a_human_who_then_owns_it() {
    let mut w = World::new(limits(1, 1_000_000, OnLimit::HandoffToHuman)).await;
    w.say("c-1", "hello").await;
    let (_, record) = w.say("c-1", "hello again").await;
    let record = record.unwrap();
    assert_eq!(record.status, ExecutionStatus::RateLimited);
    let session = w.embedded.store.latest_session(&w.tenant, "c-1").await.unwrap().unwrap();
    assert!(session.is_human_owned());
    let all = w.embedded.store.events(&w.tenant, 0, 100).await.unwrap();
    let handoffs: Vec<_> = all.iter().filter(|(_, e)| e.detail_type == detail_type::HANDOFF_HUMAN).collect();
    assert_eq!(handoffs.len(), 1);
    assert!(handoffs[0].1.detail["reason"].as_str().unwrap().contains("invocationsPerMinute"));
    // A human owns it now: the next message is not an invocation and is not refused.
    let (outcome, _) = w.say("c-1", "third").await;
    assert!(matches!(outcome, RouteOutcome::HumanOwned { .. }), "{outcome:?}");
}

#[tokio::test]
async fn concurrent_takes_never_admit_more_than_the_limit_and_one_caller_is_first() {
    let w = World::new(TenantLimits::default()).await;
    let store = Arc::new(w.embedded.store.clone());
    let expires = switchboard_engine::Clock::now(w.clock.as_ref()) + chrono::Duration::seconds(120);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let (store, tenant) = (store.clone(), w.tenant.clone());
        tasks.spawn(async move { store.take(&tenant, "MIN#x", 7, expires).await.unwrap() });
    }
    let admitted = tasks.join_all().await.into_iter().filter(|a| *a).count();
    assert_eq!(admitted, 7);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let (store, tenant) = (store.clone(), w.tenant.clone());
        let announce = OutboundEvent {
            id: "t-1/limit/MIN#x".into(),
            detail_type: "tenant.limit.reached".into(),
            tenant_id: tenant.clone(),
            detail: json!({}),
        };
        tasks.spawn(async move { store.first(&tenant, "MIN#x", expires, &announce).await.unwrap() });
    }
    assert_eq!(tasks.join_all().await.into_iter().filter(|f| *f).count(), 1);
    // Another tenant's window of the same name is its own.
    let other: TenantId = "t-2".parse().unwrap();
    assert!(store.take(&other, "MIN#x", 7, expires).await.unwrap());
}

// ---- an agent's token budgets ---------------------------------------------------------------------

/// A model that never stops calling a tool with a long argument: only a budget ends its turns.
fn looping_script() -> serde_json::Value {
    json!({ "rules": [ { "when": {}, "then": { "toolCalls": [ { "name": "set_context",
        "input": { "key": "notes", "value": "a long note that the model keeps writing again and again" } } ] } } ] })
}

#[tokio::test]
async fn a_per_execution_input_budget_stops_a_tool_loop_before_the_call_that_would_pass_it() {
    // (`onFailure: none`: the agent keeps the conversation after a turn its budget stopped)
    let budget =
        json!({ "maxIterations": 10, "tokenBudget": { "maxInputTokens": 400 }, "onFailure": { "action": "none" } });
    let mut w = World::with_agent(TenantLimits::default(), budget, looping_script(), None).await;
    let (_, record) = w.say("c-1", "hello").await;
    let record = record.unwrap();
    assert_eq!(record.status, ExecutionStatus::BudgetExceeded);
    let error = record.error.unwrap();
    assert_eq!((error.kind, error.reason.as_deref()), (switchboard_domain::ErrorKind::Limit, Some("maxInputTokens")));
    // some calls ran, fewer than maxIterations, and their input stayed within the budget
    let calls = record.model_calls.len();
    assert!((1..10).contains(&calls), "{calls} model calls");
    assert!(record.token_usage.input_tokens <= 400, "{:?}", record.token_usage);
    assert_eq!(record.tool_calls.len(), calls, "every call's tool ran and was recorded");
    // the session goes on: the next message has a fresh execution budget
    let session = w.embedded.store.latest_session(&w.tenant, "c-1").await.unwrap().unwrap();
    assert!(session.is_active());
    assert_eq!(session.tokens_used, record.token_usage.total());
}

#[tokio::test]
async fn the_tenants_tokens_per_day_reached_mid_turn_stop_the_turn_before_the_call_that_would_pass_them() {
    // Measure one model call of the loop first, on a tenant without a day limit to speak of.
    let agent = json!({ "maxIterations": 10, "onFailure": { "action": "none" } });
    let mut probe = World::with_agent(TenantLimits::default(), agent.clone(), looping_script(), None).await;
    let (_, record) = probe.say("c-1", "hello").await;
    let record = record.unwrap();
    assert_eq!(record.status, ExecutionStatus::MaxIterations);
    let per_call = record.model_calls[0].usage.total();
    let whole_turn = record.token_usage.total();
    // A day that leaves room for three calls but not for ten.
    let day = per_call * 3 + per_call / 2;
    assert!(whole_turn > day, "the loop ({whole_turn} tokens) must pass the day's {day}");
    let mut w = World::with_agent(limits(60, day, OnLimit::Nothing), agent, looping_script(), None).await;
    let (outcome, record) = w.say("c-1", "hello").await;
    assert!(matches!(outcome, RouteOutcome::Enqueued { .. }), "admitted with the whole day left: {outcome:?}");
    let record = record.unwrap();
    assert_eq!(record.status, ExecutionStatus::BudgetExceeded);
    let error = record.error.unwrap();
    assert_eq!((error.kind, error.reason.as_deref()), (switchboard_domain::ErrorKind::Limit, Some("tokensPerDay")));
    let calls = record.model_calls.len();
    assert!((1..10).contains(&calls), "{calls} model calls");
    assert!(record.token_usage.total() <= day, "{} tokens used of {day}", record.token_usage.total());
    assert_eq!(record.tool_calls.len(), calls, "the calls made kept their tools' effects");
    // The next message is admitted on what the day has left, which is less than its first call.
    let (_, next) = w.say("c-1", "again").await;
    let next = next.unwrap();
    assert_eq!(next.status, ExecutionStatus::BudgetExceeded);
    assert!(next.model_calls.is_empty(), "{:?}", next.model_calls);
    let today = w.clock.now().date_naive();
    let usage = w.embedded.store.usage(&w.tenant, today, today).await.unwrap();
    let total: u64 = usage.iter().map(|r| r.counts.tokens()).sum();
    assert_eq!(total, record.token_usage.total(), "the day's usage is the first turn's");
}

#[tokio::test]
async fn the_output_budget_caps_each_call_and_stops_the_turn_once_spent() {
    let caps = Arc::new(Mutex::new(vec![]));
    let budget =
        json!({ "maxIterations": 10, "modelConfig": { "maxTokens": 1000 }, "tokenBudget": { "maxOutputTokens": 60 } });
    let mut w = World::with_agent(TenantLimits::default(), budget, looping_script(), Some(caps.clone())).await;
    let (_, record) = w.say("c-1", "hello").await;
    let record = record.unwrap();
    assert_eq!(record.status, ExecutionStatus::BudgetExceeded);
    assert_eq!(record.error.unwrap().reason.as_deref(), Some("maxOutputTokens"));
    let caps = caps.lock().unwrap().clone();
    // the first call may ask for the whole budget, each later one only for what is left
    assert_eq!(caps[0], 60);
    let mut spent = 0;
    for (call, cap) in record.model_calls.iter().zip(&caps) {
        assert_eq!(u64::from(*cap), 60 - spent, "{caps:?}");
        spent += call.usage.output_tokens;
    }
    assert!(spent >= 60);
}

#[tokio::test]
async fn a_spent_session_budget_hands_the_conversation_on_as_max_turns_would() {
    let script = json!({ "rules": [ { "when": {}, "then": { "text": "You said: {{userText}}" } } ] });
    let budget = json!({ "handoffBehavior": "escalate", "tokenBudget": { "maxSessionTokens": 150 } });
    let mut w = World::with_agent(TenantLimits::default(), budget, script, None).await;
    let mut turns = 0;
    let record = loop {
        turns += 1;
        assert!(turns < 20, "the session budget never ran out");
        let (_, record) = w.say("c-1", "tell me more about my order please").await;
        let record = record.unwrap();
        if record.status != ExecutionStatus::Success {
            break record;
        }
    };
    assert!(turns > 1, "the first turns fit the budget");
    assert_eq!(record.status, ExecutionStatus::BudgetExceeded);
    assert_eq!(record.error.as_ref().unwrap().reason.as_deref(), Some("maxSessionTokens"));
    assert!(record.model_calls.is_empty(), "the call that would pass the budget is not made");
    let session = w.embedded.store.latest_session(&w.tenant, "c-1").await.unwrap().unwrap();
    assert!(session.is_human_owned(), "escalated to a human");
    assert!(session.tokens_used <= 150, "{}", session.tokens_used);
    let events = w.embedded.store.events(&w.tenant, 0, 100).await.unwrap();
    let handoff = events.iter().find(|(_, e)| e.detail_type == detail_type::HANDOFF_HUMAN).unwrap();
    assert!(handoff.1.id.ends_with("/session-budget/session.handoff.human"), "{}", handoff.1.id);
}

// ---- concurrent sessions ---------------------------------------------------------------------------

#[tokio::test]
async fn the_sessions_cap_refuses_a_new_conversation_until_one_ends_or_goes_idle() {
    let tools = json!({ "tools": ["send_message", "end_conversation"] });
    let mut w = World::with_agent(sessions_cap(2, 60), tools, ending_script(), None).await;
    for c in ["c-1", "c-2"] {
        assert!(matches!(w.say(c, "hello").await.0, RouteOutcome::Enqueued { .. }));
    }
    // A third conversation finds both slots held: refused, answered as configured, announced.
    let (outcome, record) = w.say("c-3", "hello?").await;
    assert_eq!(outcome.as_str(), "rate_limited");
    let record = record.unwrap();
    assert_eq!(record.status, ExecutionStatus::RateLimited);
    assert!(record.model_calls.is_empty());
    assert_eq!(record.error.unwrap().reason.as_deref(), Some("concurrentSessions"));
    assert_eq!(w.replies("c-3").await, ["All our agents are busy."]);
    let events = w.limit_events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].detail["limit"], "concurrentSessions");
    assert_eq!(events[0].detail["value"], 2);
    // the first slot goes idle 30 minutes after its last message
    assert_eq!(events[0].detail["retryAfterSeconds"], 30 * 60);
    // Conversations that hold a slot go on.
    assert!(matches!(w.say("c-1", "more").await.0, RouteOutcome::Enqueued { .. }));
    // c-1 ends: its slot is free and c-3 is answered.
    let (_, record) = w.say("c-1", "bye").await;
    assert_eq!(record.unwrap().status, ExecutionStatus::Ended);
    let (outcome, record) = w.say("c-3", "hello again").await;
    assert!(matches!(outcome, RouteOutcome::Enqueued { .. }), "{outcome:?}");
    assert_eq!(record.unwrap().status, ExecutionStatus::Success);
    // Both slots held again (c-2, c-3); after 29 minutes c-2 is not idle yet, c-3 renewed.
    w.clock.advance(chrono::Duration::minutes(29));
    assert!(matches!(w.say("c-3", "still here").await.0, RouteOutcome::Enqueued { .. }));
    assert_eq!(w.say("c-4", "hi").await.0.as_str(), "rate_limited");
    // A minute later c-2 has been idle for 30: c-4 takes its slot, and c-2 must queue for one.
    w.clock.advance(chrono::Duration::minutes(1));
    assert!(matches!(w.say("c-4", "hi").await.0, RouteOutcome::Enqueued { .. }));
    let (outcome, record) = w.say("c-2", "back again").await;
    assert_eq!(outcome.as_str(), "rate_limited");
    assert_eq!(record.unwrap().error.unwrap().reason.as_deref(), Some("concurrentSessions"));
    // c-2's session is still the same one: a slot is about load, not about the conversation.
    let session = w.embedded.store.latest_session(&w.tenant, "c-2").await.unwrap().unwrap();
    assert!(session.is_active());
}

#[tokio::test]
async fn a_message_the_minute_limit_refuses_keeps_no_new_slot() {
    let tools = json!({ "tools": ["send_message", "end_conversation"] });
    let mut w = World::with_agent(sessions_cap(1, 1), tools, ending_script(), None).await;
    assert!(matches!(w.say("c-1", "bye").await.0, RouteOutcome::Enqueued { .. }));
    // c-1 ended and freed its slot; c-2 is refused by the minute, and must not keep the slot.
    let (_, record) = w.say("c-2", "hello").await;
    assert_eq!(record.unwrap().error.unwrap().reason.as_deref(), Some("invocationsPerMinute"));
    w.clock.advance(chrono::Duration::seconds(60));
    let (outcome, _) = w.say("c-3", "hello").await;
    assert!(matches!(outcome, RouteOutcome::Enqueued { .. }), "the slot was kept by a refused message: {outcome:?}");
}

#[tokio::test]
async fn a_handoff_to_a_human_frees_the_slot() {
    let mut w = World::new(sessions_cap(1, 60)).await;
    w.say("c-1", "hello").await;
    assert_eq!(w.say("c-2", "hello").await.0.as_str(), "rate_limited");
    let session = w.embedded.store.latest_session(&w.tenant, "c-1").await.unwrap().unwrap();
    let to = switchboard_engine::HandoffTo::Human(switchboard_domain::Priority::Normal);
    w.embedded.operator.hand_off(&w.tenant, session.session_id, to, "customer asked", "ops").await.unwrap();
    assert!(matches!(w.say("c-2", "hello").await.0, RouteOutcome::Enqueued { .. }));
}

#[tokio::test]
async fn a_hundred_open_sessions_fill_the_default_cap_exactly_under_concurrency() {
    let w = World::new(TenantLimits::default()).await;
    let store = Arc::new(w.embedded.store.clone());
    let now = switchboard_engine::Clock::now(w.clock.as_ref());
    let until = now + chrono::Duration::minutes(30);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..130 {
        let (store, tenant) = (store.clone(), w.tenant.clone());
        tasks.spawn(async move { (i, store.hold_slot(&tenant, &format!("c-{i}"), 100, now, until).await.unwrap()) });
    }
    // by conversation number (tasks end in any order)
    let mut held = tasks.join_all().await;
    held.sort_by_key(|(i, _)| *i);
    let held: Vec<Slot> = held.into_iter().map(|(_, s)| s).collect();
    let taken = held.iter().filter(|s| matches!(s, Slot::Held { new: true })).count();
    assert_eq!(taken, 100, "{held:?}");
    assert!(held.iter().all(|s| matches!(s, Slot::Held { new: true }) || *s == Slot::Full { frees_at: until }));
    // Through the pipeline: every conversation that holds a slot is answered, the 101st is not.
    let mut w = w;
    let insider = held.iter().position(|s| *s == Slot::Held { new: true }).unwrap();
    let outsider = held.iter().position(|s| *s != Slot::Held { new: true }).unwrap();
    assert!(matches!(w.say(&format!("c-{insider}"), "hello").await.0, RouteOutcome::Enqueued { .. }));
    let (outcome, record) = w.say(&format!("c-{outsider}"), "hello").await;
    assert_eq!(outcome.as_str(), "rate_limited");
    assert_eq!(record.unwrap().error.unwrap().reason.as_deref(), Some("concurrentSessions"));
    // Freed slots are taken again exactly once each.
    for i in 0..10 {
        store.release_slot(&w.tenant, &format!("c-{i}")).await.unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for i in 200..240 {
        let (store, tenant) = (store.clone(), w.tenant.clone());
        tasks.spawn(async move { store.hold_slot(&tenant, &format!("c-{i}"), 100, now, until).await.unwrap() });
    }
    let retaken = tasks.join_all().await.into_iter().filter(|s| matches!(s, Slot::Held { new: true })).count();
    let released_held = (0..10).filter(|i| held[*i] == Slot::Held { new: true }).count();
    assert_eq!(retaken, released_held);
}

#[tokio::test]
async fn a_slot_and_a_count_are_asked_in_one_call_and_a_refused_count_takes_no_slot() {
    use switchboard_engine::{Admit, SlotAndCount};
    let w = World::new(TenantLimits::default()).await;
    let store = w.embedded.store.clone();
    let now = switchboard_engine::Clock::now(w.clock.as_ref());
    let until = now + chrono::Duration::minutes(30);
    let ask = |conversation, window| SlotAndCount {
        tenant: &w.tenant,
        conversation,
        sessions: 2,
        now,
        until,
        window,
        limit: 1,
        expires: now + chrono::Duration::minutes(2),
        likely_held: Some(false),
        unless_human: false,
    };
    let calls = store.db_calls();
    assert_eq!(store.hold_slot_and_take(&ask("c-1", "MIN#a")).await.unwrap(), Admit::Counted);
    assert_eq!(store.db_calls(), calls + 1, "one database call");
    // the window is full: c-2's new slot is given back in the same step
    assert_eq!(store.hold_slot_and_take(&ask("c-2", "MIN#a")).await.unwrap(), Admit::CountFull { took_slot: false });
    // c-2 holds nothing: c-3 takes the second slot, and c-4 finds both held
    assert_eq!(store.hold_slot_and_take(&ask("c-3", "MIN#b")).await.unwrap(), Admit::Counted);
    assert_eq!(store.hold_slot_and_take(&ask("c-4", "MIN#c")).await.unwrap(), Admit::SessionsFull { frees_at: until });
    // a conversation that holds its slot and meets a full window keeps the slot it had
    assert_eq!(store.hold_slot_and_take(&ask("c-1", "MIN#b")).await.unwrap(), Admit::CountFull { took_slot: false });
    assert_eq!(store.hold_slot(&w.tenant, "c-1", 2, now, until).await.unwrap(), Slot::Held { new: false });
}

// ---- deferral --------------------------------------------------------------------------------------

#[tokio::test]
async fn a_deferred_message_holds_its_conversation_until_the_window_reopens_then_runs_in_order() {
    let mut w = World::new(limits(1, 1_000_000, OnLimit::Defer)).await;
    w.say("c-1", "first").await;
    for text in ["are you there?", "hello??"] {
        let e = w.event("c-2", text);
        assert_eq!(w.embedded.ingest(&e).await.unwrap().as_str(), "rate_limited");
    }
    let attempt = |d: &switchboard_embedded::queue::Delivery| Some(Attempt { number: d.receive_count, of: 5 });
    // Each c-2 message is tried, deferred to the next minute, then run; the second waits
    // behind the first the whole time.
    for (answered, expected) in ["You said: are you there?", "You said: hello??"].into_iter().enumerate() {
        let d = w.embedded.queue.receive().await.unwrap().unwrap();
        let item: WorkItem = serde_json::from_str(&d.body).unwrap();
        assert!(item.text.ends_with(expected.trim_start_matches("You said: ")), "{} out of order", item.text);
        let calls = w.embedded.store.db_calls();
        let err = w.embedded.executor.execute_attempt(&item, None, attempt(&d)).await.unwrap_err();
        assert!(err.is_deferral(), "{err:?}");
        assert_eq!(err.retry_after, Some(std::time::Duration::from_secs(60)));
        if answered == 0 {
            // before its window reopens, the answer is known: the only call is the record lookup
            assert_eq!(w.embedded.store.db_calls() - calls, 1, "no counter is asked again");
        }
        assert!(w.embedded.queue.release(&d.receipt, err.retry_after.unwrap()).await.unwrap());
        assert!(w.embedded.queue.receive().await.unwrap().is_none(), "the conversation is held while it waits");
        assert_eq!(w.replies("c-2").await.len(), answered, "nothing is sent while deferred");
        w.clock.advance(chrono::Duration::seconds(60));
        let d = w.embedded.queue.receive().await.unwrap().unwrap();
        assert_eq!(d.receive_count, 2);
        let item: WorkItem = serde_json::from_str(&d.body).unwrap();
        let ExecOutcome::Recorded(record) =
            w.embedded.executor.execute_attempt(&item, None, attempt(&d)).await.unwrap()
        else {
            panic!("not recorded");
        };
        assert_eq!(record.status, ExecutionStatus::Success);
        assert!(w.embedded.queue.ack(&d.receipt).await.unwrap());
        assert_eq!(w.replies("c-2").await.last().map(String::as_str), Some(expected));
    }
    // one announcement per minute that refused something: intake's, and the minute the second
    // message waited through while the first used it
    let windows: Vec<_> = w.limit_events().await.into_iter().map(|e| e.detail["window"].clone()).collect();
    assert_eq!(windows, [json!("MIN#2026-11-23T07:00"), json!("MIN#2026-11-23T07:01")]);
}

#[tokio::test]
async fn a_deferred_message_still_refused_at_its_last_delivery_is_recorded_not_answered() {
    let mut w = World::new(limits(1, 1_000_000, OnLimit::Defer)).await;
    w.say("c-1", "first").await;
    let e = w.event("c-2", "hello?");
    w.embedded.ingest(&e).await.unwrap();
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    let last = Some(Attempt { number: 5, of: 5 });
    let ExecOutcome::Recorded(record) = w.embedded.executor.execute_attempt(&item, None, last).await.unwrap() else {
        panic!("not recorded");
    };
    assert_eq!(record.status, ExecutionStatus::RateLimited);
    assert_eq!(record.error.unwrap().reason.as_deref(), Some("invocationsPerMinute"));
    assert!(record.actions.is_empty() && record.model_calls.is_empty());
    assert!(w.replies("c-2").await.is_empty());
    // and the message is in the session for when the conversation goes on
    let session = w.embedded.store.latest_session(&w.tenant, "c-2").await.unwrap().unwrap();
    assert_eq!(session.transcript.iter().map(|m| m.text()).collect::<Vec<_>>(), ["hello?"]);
}

#[tokio::test]
async fn the_workers_hold_a_deferred_item_until_its_window_reopens() {
    let mut w = World::new(limits(1, 1_000_000, OnLimit::Defer)).await;
    w.say("c-1", "first").await;
    let e = w.event("c-2", "hello?");
    w.embedded.ingest(&e).await.unwrap();
    let handler = w.embedded.item_handler();
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let failure = handler.handle(&d).await.unwrap_err();
    assert_eq!(failure.retry_after, Some(std::time::Duration::from_secs(60)), "{}", failure.message);
    assert!(failure.message.starts_with("deferred: "), "{}", failure.message);
    // the fifth delivery is the queue's last (its default receive limit): recorded, not deferred
    let mut last = d.clone();
    last.receive_count = 5;
    handler.handle(&last).await.unwrap();
    let source = switchboard_engine::intake::source_id(&e);
    let record = w.embedded.store.execution_for_source(&w.tenant, &source).await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::RateLimited);
}
