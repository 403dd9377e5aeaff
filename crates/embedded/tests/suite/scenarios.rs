//! Engine scenarios: the router and executor against the real embedded adapters (SQLite store,
//! SQLite queue, local conversation log, in-process bus) with the scripted model — a
//! deterministic test double. Items are drained by hand, so every step is deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_domain::message::ContentBlock;
use switchboard_domain::{ExecutionStatus, InboundEvent, Session, SessionId, SessionStatus, TenantId};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::intake::source_id;
use switchboard_engine::{
    ConversationLog, Deps, ExecOutcome, ExecutionLog, Executor, Model, ModelError, ModelRequest, ModelResponse,
    Operator, RouteError, RouteOutcome, SessionStore, SessionWrite, StoreError, SystemClock, TurnCommit, WorkItem,
};

use crate::common;
use common::{World, record};

const FRONT: &str = "01JD0000SVPP0RT0AGENT00001";
const BILLING: &str = "01JD0000PAYMENTS0AGENT0002";
const THIRD: &str = "01JD0000THR1RD0AGENT000003";
const FOURTH: &str = "01JD0000F0VRTH0AGENT000004";

fn agent(id: &str, name: &str, prompt: &str, extra: Value) -> Value {
    let mut a = json!({
        "agentId": id, "name": name, "systemPrompt": prompt, "model": "test-model",
        "tools": ["send_message", "set_context", "get_context", "handoff_to_human", "handoff_to_agent", "end_conversation"],
        "maxTurns": 10, "maxIterations": 4
    });
    if let (Some(a), Value::Object(extra)) = (a.as_object_mut(), extra) {
        a.extend(extra);
    }
    a
}

fn bundle(agents: Vec<Value>, triggers: Vec<Value>) -> String {
    json!({ "tenantId": "t-1", "name": "Test tenant", "agents": agents, "triggers": triggers }).to_string()
}

fn trigger(id: &str, agent: &str, priority: i32, conditions: Value) -> Value {
    json!({ "triggerId": id, "name": format!("trigger {id}"), "agentId": agent, "eventType": "message.new",
            "priority": priority, "conditions": conditions })
}

fn default_bundle(front_extra: Value) -> String {
    bundle(
        vec![
            agent(FRONT, "Front", "You are the front agent.", front_extra),
            agent(BILLING, "Billing", "You are the billing agent.", json!({})),
        ],
        vec![trigger("01JD0000TR1GGER0CHAT000001", FRONT, 10, json!({}))],
    )
}

fn says(text: &str) -> Value {
    json!({ "rules": [ { "then": { "text": text } } ] })
}

#[tokio::test]
async fn it_answers_a_plain_message_with_a_reply() {
    // given an agent whose model answers with plain text
    let mut w = World::new(&default_bundle(json!({})), says("Hello from the test double")).await;
    // when a customer writes
    let (routed, outcomes) = w.say("c-1", "hi").await;
    // then the text is sent as a reply and one successful execution is recorded
    assert!(matches!(routed, RouteOutcome::Enqueued { duplicate: false, .. }));
    assert_eq!(w.replies("c-1").await, ["Hello from the test double"]);
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    assert_eq!((r.iterations, r.tool_calls.len()), (1, 0));
    assert!(r.token_usage.input_tokens > 0 && r.token_usage.output_tokens > 0);
    assert_eq!(w.session("c-1").await.turn_count, 1);
}

#[tokio::test]
async fn closing_waits_for_the_database_and_says_when_another_handle_keeps_it_open() {
    let mut w = World::new(&default_bundle(json!({})), says("Hello")).await;
    w.say("c-1", "hi").await;
    let wal = w.dir.path().join("switchboard.db-wal");
    assert!(wal.exists(), "the log holds the conversation");
    let World { embedded, dir, .. } = w;
    // while a store handle is still held (a request being answered), the database stays open
    let held = embedded.store.clone();
    let closed = held.closed();
    assert!(!Arc::new(embedded).close(std::time::Duration::ZERO).await);
    assert!(wal.exists());
    // and once it is let go, it closes: the log is copied into the file and deleted
    drop(held);
    closed.await;
    assert!(!wal.exists(), "{} left behind", wal.display());
    // with the conversation in the file
    let reopened = Embedded::open(
        dir.path(),
        Arc::new(ScriptedModel::from_json(&says("x").to_string()).unwrap()),
        Arc::new(SystemClock),
        EmbeddedOptions::default(),
    )
    .unwrap();
    let log = reopened.store.messages(&"t-1".parse().unwrap(), "c-1", 10).await.unwrap();
    assert_eq!(log.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), ["hi", "Hello"]);
    // alone, a handle closes within the time it is given
    assert!(Arc::new(reopened).close(std::time::Duration::from_secs(60)).await);
    assert!(!wal.exists());
}

#[tokio::test]
async fn it_runs_tools_and_feeds_their_results_back() {
    let script = json!({ "rules": [
        { "when": { "afterTool": "set_context" }, "then": { "text": "Noted your order." } },
        { "then": { "toolCalls": [ { "name": "set_context", "input": { "key": "order", "value": "1234" } } ] } }
    ] });
    let mut w = World::new(&default_bundle(json!({})), script).await;
    let (_, outcomes) = w.say("c-1", "order 1234 please").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    assert_eq!(r.iterations, 2);
    assert_eq!(r.tool_calls[0].name, "set_context");
    assert!(!r.tool_calls[0].is_error);
    assert_eq!(w.session("c-1").await.memory.get("order"), Some(&json!("1234")));
    assert_eq!(w.replies("c-1").await, ["Noted your order."]);
    // the next turn sees the memory in its system prompt and the earlier exchange in its history
    let (_, outcomes) = w.say("c-1", "thanks").await;
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::Success);
    let s = w.session("c-1").await;
    assert_eq!(s.turn_count, 2);
    assert!(s.transcript.len() >= 5, "transcript keeps both turns: {:?}", s.transcript.len());
}

#[tokio::test]
async fn it_stops_at_max_iterations_without_replying() {
    // given a model that never stops calling tools
    let script = json!({ "rules": [ { "then": { "toolCalls": [ { "name": "get_context", "input": {} } ] } } ] });
    let mut w = World::new(&default_bundle(json!({ "maxIterations": 3 })), script).await;
    let (_, outcomes) = w.say("c-1", "loop forever").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::MaxIterations);
    assert_eq!(r.iterations, 3);
    assert_eq!(r.tool_calls.len(), 3);
    assert!(r.error.is_some());
    assert!(w.replies("c-1").await.is_empty());
    // the customer is not left unanswered: the agent's `onFailure` (by default) calls a human
    let s = w.session("c-1").await;
    assert_eq!(s.status, SessionStatus::HandedOff);
    assert!(s.handoff_reason.as_deref().unwrap().contains("max_iterations"), "{:?}", s.handoff_reason);
}

#[tokio::test]
async fn it_hands_off_to_a_human_and_stops_routing_the_conversation() {
    let script = json!({ "rules": [
        { "then": { "toolCalls": [
            { "name": "send_message", "input": { "text": "Connecting you." } },
            { "name": "handoff_to_human", "input": { "reason": "asked for a person", "priority": "high" } }
        ] } }
    ] });
    let mut w = World::new(&default_bundle(json!({})), script).await;
    let (_, outcomes) = w.say("c-1", "a human please").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::HandedOff);
    let s = w.session("c-1").await;
    assert!(s.is_human_owned());
    let events = w.events().await;
    let handoff = events.iter().find(|e| e.detail_type == "session.handoff.human").unwrap();
    assert_eq!(handoff.detail["reason"], "asked for a person");
    assert_eq!(handoff.detail["priority"], "high");
    assert_eq!(handoff.detail["sessionId"], json!(s.session_id));
    // when the customer writes again
    let (routed, outcomes) = w.say("c-1", "hello?").await;
    // then no agent is asked: the human owns the conversation; the message is recorded
    assert_eq!(routed, RouteOutcome::HumanOwned { session_id: s.session_id });
    assert_eq!(outcomes.len(), 1);
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::Skipped);
    assert_eq!(w.session("c-1").await.transcript.last().map(|m| m.text()), Some("hello?".to_owned()));
    assert_eq!(w.replies("c-1").await, ["Connecting you."]);
}

#[tokio::test]
async fn a_message_no_trigger_matches_still_reaches_the_humans_transcript() {
    let script = json!({ "rules": [
        { "then": { "toolCalls": [ { "name": "handoff_to_human", "input": { "reason": "asked" } } ] } }
    ] });
    let only_help = trigger(
        "01JD0000TR1GGER0CHAT000001",
        FRONT,
        10,
        json!({
            "all": [{ "field": "message.text", "operator": "contains", "value": "help" }]
        }),
    );
    let mut w = World::new(&bundle(vec![agent(FRONT, "Front", "You help.", json!({}))], vec![only_help]), script).await;
    w.say("c-1", "help, a person please").await;
    let s = w.session("c-1").await;
    assert!(s.is_human_owned());
    // a message no trigger matches: the human owns the conversation, so it is queued and recorded
    let (routed, outcomes) = w.say("c-1", "thanks, waiting").await;
    assert_eq!(routed, RouteOutcome::HumanOwned { session_id: s.session_id });
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::Skipped);
    assert_eq!(w.session("c-1").await.transcript.last().map(|m| m.text()), Some("thanks, waiting".to_owned()));
    // the same words in a conversation nobody owns match nothing and are not queued
    let (routed, outcomes) = w.say("c-2", "thanks, waiting").await;
    assert_eq!((routed, outcomes.len()), (RouteOutcome::NoMatch, 0));
}

#[tokio::test]
async fn an_item_queued_before_a_human_took_over_is_skipped_with_a_record() {
    let script = json!({ "rules": [
        { "when": { "userText": { "contains": "human" } }, "then": { "toolCalls": [
            { "name": "handoff_to_human", "input": { "reason": "asked" } } ] } },
        { "then": { "text": "should never be sent" } }
    ] });
    let mut w = World::new(&default_bundle(json!({})), script).await;
    // given two messages routed before either runs
    let first = w.event("c-1", "human please");
    let second = w.event("c-1", "are you there");
    w.embedded.ingest(&first).await.unwrap();
    w.embedded.ingest(&second).await.unwrap();
    // when both run in order
    let executor = w.embedded.executor.clone();
    let outcomes = w.drain(&executor).await;
    // then the second is skipped: nothing is sent into a human-owned conversation
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::HandedOff);
    assert_eq!(record(&outcomes[1]).status, ExecutionStatus::Skipped);
    assert!(w.replies("c-1").await.is_empty());
}

/// The work item routing makes of `e` (conversation c-1, text "hi") for the front-line agent; a
/// hand-off continuation when `continuation`.
fn front_item(w: &World, e: &InboundEvent, continuation: bool) -> WorkItem {
    WorkItem {
        tenant_id: w.tenant.clone(),
        source_id: switchboard_engine::intake::source_id(e),
        event_id: Some(e.id.clone()),
        conversation_id: "c-1".into(),
        message_id: e.detail.message_id.clone(),
        text: "hi".into(),
        trigger_id: None,
        trigger_version: None,
        variant: None,
        agent_id: FRONT.parse().unwrap(),
        continuation,
        detail: e.raw_detail.clone(),
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

#[tokio::test]
async fn a_redelivered_event_yields_one_reply_and_one_record() {
    let mut w = World::new(&default_bundle(json!({})), says("only once")).await;
    let e = w.event("c-1", "hi");
    // the same event arrives twice (EventBridge delivers at least once)
    w.embedded.ingest(&e).await.unwrap();
    let again = w.embedded.ingest(&e).await.unwrap();
    assert!(matches!(again, RouteOutcome::Enqueued { duplicate: true, .. }));
    let executor = w.embedded.executor.clone();
    let outcomes = w.drain(&executor).await;
    assert_eq!(outcomes.len(), 1);
    // and the same work item is executed again, as after a redelivery
    let item = front_item(&w, &e, false);
    let replay = executor.execute(&item).await.unwrap();
    assert!(matches!(replay, ExecOutcome::AlreadyRecorded(_)));
    assert_eq!(w.replies("c-1").await, ["only once"]);
    let s = w.session("c-1").await;
    let page = w.embedded.store.list_executions(&w.tenant, s.session_id, None, 10).await.unwrap();
    assert_eq!(page.items.len(), 1);
}

/// A session store that fails or races the first commit, then behaves.
struct Flaky {
    inner: Arc<dyn SessionStore>,
    mode: Mode,
    commits: AtomicU32,
    /// What the racing operator reply of [`Mode::SameReplyCommitsFirst`] answered.
    raced: std::sync::Mutex<Option<switchboard_engine::OperatorReply>>,
}

enum Mode {
    /// The process "dies" after the side effects and before the commit.
    CrashBeforeCommit,
    /// Someone else writes the session between read and commit.
    ConcurrentWrite,
    /// An operator's reply is sent, and before it commits the same reply (same idempotency key,
    /// as a double click sends it) runs whole through this executor and commits first.
    SameReplyCommitsFirst(Box<Operator>),
}

#[async_trait]
impl SessionStore for Flaky {
    async fn get_session(&self, t: &TenantId, s: SessionId) -> Result<Option<Session>, StoreError> {
        self.inner.get_session(t, s).await
    }
    async fn latest_session(&self, t: &TenantId, c: &str) -> Result<Option<Session>, StoreError> {
        self.inner.latest_session(t, c).await
    }
    async fn sessions_for_conversation(&self, t: &TenantId, c: &str) -> Result<Vec<Session>, StoreError> {
        self.inner.sessions_for_conversation(t, c).await
    }
    async fn list_sessions(
        &self,
        t: &TenantId,
        f: switchboard_engine::SessionFilter,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<switchboard_engine::Page<Session>, StoreError> {
        self.inner.list_sessions(t, f, after, limit).await
    }
    async fn write_session(&self, write: &SessionWrite) -> Result<(), StoreError> {
        self.inner.write_session(write).await
    }
    async fn sessions_awaiting_approval(&self, t: Option<&TenantId>, limit: usize) -> Result<Vec<Session>, StoreError> {
        self.inner.sessions_awaiting_approval(t, limit).await
    }
    async fn idle_sessions(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<Vec<switchboard_engine::IdleSession>, StoreError> {
        self.inner.idle_sessions(now, limit).await
    }
    async fn commit_turn(&self, commit: &TurnCommit) -> Result<(), StoreError> {
        if self.commits.fetch_add(1, Ordering::SeqCst) == 0 {
            match &self.mode {
                Mode::CrashBeforeCommit => {
                    return Err(StoreError::Unavailable { message: "simulated crash".into(), retryable: true });
                }
                Mode::ConcurrentWrite => {
                    // an operator's write lands first, bumping the version
                    let w = &commit.sessions[0];
                    let mut current =
                        self.inner.get_session(&w.session.tenant_id, w.session.session_id).await?.unwrap();
                    let expected = current.version;
                    current.version += 1;
                    current.memory.insert("operatorNote".into(), json!("vip"));
                    let mut marker = commit.execution.clone();
                    marker.execution_id = switchboard_domain::ExecutionId::generate();
                    marker.source_id = "operator-write".into();
                    self.inner
                        .commit_turn(&TurnCommit {
                            events: vec![],
                            sessions: vec![SessionWrite { session: current, expected_version: Some(expected) }],
                            execution: marker,
                            content: vec![],
                            resumes: None,
                            coalesced: vec![],
                        })
                        .await?;
                }
                Mode::SameReplyCommitsFirst(racer) => {
                    let (e, s) = (&commit.execution, &commit.sessions[0].session);
                    let operator = e.input["operator"]["name"].as_str().unwrap();
                    let text = e.input["text"].as_str().unwrap();
                    let key = e.source_id.strip_prefix("reply-").unwrap();
                    let raced = racer.reply(&e.tenant_id, s.session_id, operator, text, key).await.unwrap();
                    *self.raced.lock().unwrap() = Some(raced);
                }
            }
        }
        self.inner.commit_turn(commit).await
    }
}

fn flaky_executor(w: &World, mode: Mode) -> Executor {
    Executor::new(flaky(w, mode).0)
}

/// The world's ports with a [`Flaky`] session store.
fn flaky(w: &World, mode: Mode) -> (Deps, Arc<Flaky>) {
    let deps = w.embedded.executor.deps().clone();
    let flaky =
        Arc::new(Flaky { inner: deps.sessions.clone(), mode, commits: AtomicU32::new(0), raced: Default::default() });
    let sessions: Arc<dyn SessionStore> = flaky.clone();
    (Deps { sessions, ..deps }, flaky)
}

#[tokio::test]
async fn of_two_replies_with_one_key_the_one_that_commits_is_not_the_duplicate() {
    let mut w = World::new(&default_bundle(json!({ "maxTurns": 1 })), says("ok")).await;
    w.say("c-1", "one").await;
    let session = w.session("c-1").await;
    assert!(session.is_human_owned());
    // the first request sends, then loses the commit to a second request with the same key
    let (deps, flaky) = flaky(&w, Mode::SameReplyCommitsFirst(Box::new(w.embedded.operator.clone())));
    let first = Operator::new(deps).reply(&w.tenant, session.session_id, "Ann", "On it.", "click-1").await.unwrap();
    let second = flaky.raced.lock().unwrap().take().unwrap();
    // one message was sent, one reply recorded, and exactly one answer says it did that
    assert_eq!((first.duplicate, second.duplicate), (true, false));
    assert_eq!(first.message_id, second.message_id);
    assert_eq!(first.execution.execution_id, second.execution.execution_id);
    let log = w.embedded.store.messages(&w.tenant, "c-1", 100).await.unwrap();
    assert_eq!(log.iter().filter(|m| m.text == "On it.").count(), 1);
    let page = w.embedded.store.list_executions(&w.tenant, session.session_id, None, 100).await.unwrap();
    assert_eq!(page.items.iter().filter(|e| e.source_id == "reply-click-1").count(), 1);
}

#[tokio::test]
async fn a_crash_after_replying_does_not_reply_twice_on_redelivery() {
    let mut w = World::new(&default_bundle(json!({})), says("exactly once")).await;
    w.say("c-1", "first").await; // the session exists, so the next turn updates it
    let executor = flaky_executor(&w, Mode::CrashBeforeCommit);
    let e = w.event("c-1", "second");
    w.embedded.ingest(&e).await.unwrap();
    // when the first attempt dies before committing
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    let err = executor.execute(&item).await.unwrap_err();
    assert!(err.retryable);
    // and the item is delivered again
    let outcome = executor.execute(&item).await.unwrap();
    // then the reply went out once, and one record exists for the message
    assert_eq!(record(&outcome).status, ExecutionStatus::Success);
    assert_eq!(w.replies("c-1").await, ["exactly once", "exactly once"]);
    let dup = w.embedded.store.execution_for_source(&w.tenant, &source_id(&e)).await.unwrap();
    assert!(dup.is_some());
    assert_eq!(w.session("c-1").await.turn_count, 2);
}

#[tokio::test]
async fn an_api_handoff_that_loses_its_commit_announces_nothing() {
    // given a conversation with an agent, and a store where someone else writes the session
    // between the handoff's read and its commit
    let mut w = World::new(&default_bundle(json!({})), says("hello")).await;
    w.say("c-1", "hi").await;
    let session = w.session("c-1").await;
    let before = w.events().await.len();
    let (deps, _) = flaky(&w, Mode::ConcurrentWrite);
    // when the API hands the conversation to a human
    let to = switchboard_engine::HandoffTo::Human(switchboard_domain::Priority::High);
    let refused =
        Operator::new(deps).hand_off(&w.tenant, session.session_id, to.clone(), "customer asked", "ops").await;
    // then the handoff did not happen, and no event says it did
    assert!(refused.is_err(), "{refused:?}");
    assert!(w.session("c-1").await.is_active());
    assert_eq!(w.events().await.len(), before, "{:?}", w.events().await);
    // and a handoff that commits is announced once, after its commit
    w.embedded.operator.hand_off(&w.tenant, session.session_id, to, "customer asked", "ops").await.unwrap();
    let kinds: Vec<String> = w.events().await.into_iter().skip(before).map(|e| e.detail_type).collect();
    assert_eq!(kinds, ["session.handoff.human"]);
}

#[tokio::test]
async fn a_turn_that_dies_before_its_commit_has_announced_nothing() {
    // given an agent that hands every conversation to a human, and an attempt that dies before
    // its commit
    let script = json!({ "rules": [ { "then": { "toolCalls": [
        { "name": "handoff_to_human", "input": { "reason": "wants a person" } } ] } } ] });
    let mut w = World::new(&default_bundle(json!({})), script).await;
    let executor = flaky_executor(&w, Mode::CrashBeforeCommit);
    let e = w.event("c-1", "a person please");
    w.embedded.ingest(&e).await.unwrap();
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    assert!(executor.execute(&item).await.unwrap_err().retryable);
    // then nothing is announced for the handoff that did not happen
    assert!(w.events().await.is_empty(), "{:?}", w.events().await);
    // and the redelivery that commits announces it once
    assert_eq!(record(&executor.execute(&item).await.unwrap()).status, ExecutionStatus::HandedOff);
    let kinds: Vec<String> = w.events().await.into_iter().map(|e| e.detail_type).collect();
    assert_eq!(kinds, ["session.handoff.human"]);
}

#[tokio::test]
async fn a_version_conflict_is_retried_on_the_fresh_session() {
    let mut w = World::new(&default_bundle(json!({})), says("retried")).await;
    w.say("c-1", "first").await;
    let executor = flaky_executor(&w, Mode::ConcurrentWrite);
    let (_, outcomes) = w.say_with(&executor, "c-1", "second").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    // the turn was re-run on top of the operator's write: nothing of it is lost
    let s = w.session("c-1").await;
    assert_eq!(s.memory.get("operatorNote"), Some(&json!("vip")));
    assert_eq!(s.turn_count, 2);
    // and the reply was sent once (the second run reused the first run's idempotency key)
    assert_eq!(w.replies("c-1").await, ["retried", "retried"]);
}

/// Words its answer differently on every call, as a real model may: "answer 1", "answer 2", …
struct Rewording(AtomicU32);

#[async_trait]
impl Model for Rewording {
    async fn converse(&self, _request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(ModelResponse {
            content: vec![ContentBlock::Text { text: format!("answer {n}") }],
            stop_reason: switchboard_engine::StopReason::EndTurn,
            usage: switchboard_domain::TokenUsage::default(),
            model: "rewording-test-double".into(),
        })
    }
}

#[tokio::test]
async fn a_turn_run_again_after_a_version_conflict_records_the_words_the_customer_read() {
    let mut w = World::with_model(&default_bundle(json!({})), Arc::new(Rewording(AtomicU32::new(0)))).await;
    w.say("c-1", "first").await;
    // given a turn that sends "answer 2", then loses its commit to an operator's write
    let executor = flaky_executor(&w, Mode::ConcurrentWrite);
    let (_, outcomes) = w.say_with(&executor, "c-1", "second").await;
    // when it runs again, its model words the reply "answer 3", under the key already used
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    assert_eq!(r.model_calls.len(), 1, "the record is the second run's");
    // then nothing new is sent, and the record and the transcript say what the customer read
    assert_eq!(w.replies("c-1").await, ["answer 1", "answer 2"]);
    let replies: Vec<&str> = r
        .actions
        .iter()
        .filter_map(|a| match a {
            switchboard_domain::Action::Reply { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(replies, ["answer 2"]);
    let transcript = w.session("c-1").await.transcript;
    assert_eq!(transcript.last().map(|m| m.text()), Some("answer 2".to_owned()));
}

#[tokio::test]
async fn reaching_max_turns_escalates_to_a_human() {
    let mut w = World::new(&default_bundle(json!({ "maxTurns": 2 })), says("ok")).await;
    w.say("c-1", "one").await;
    let (_, outcomes) = w.say("c-1", "two").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::HandedOff);
    assert!(w.session("c-1").await.is_human_owned());
    let events = w.events().await;
    let e = events.iter().find(|e| e.detail_type == "session.handoff.human").unwrap();
    assert!(e.detail["reason"].as_str().unwrap().contains("2 turns"));
}

#[tokio::test]
async fn reaching_max_turns_ends_the_session_when_configured_to() {
    let mut w = World::new(&default_bundle(json!({ "maxTurns": 1, "handoffBehavior": "end" })), says("bye")).await;
    let (_, outcomes) = w.say("c-1", "one").await;
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::Ended);
    assert_eq!(w.session("c-1").await.status, SessionStatus::Completed);
    assert!(w.events().await.iter().any(|e| e.detail_type == "session.ended"));
    // a new message starts a new session
    let (_, outcomes) = w.say("c-1", "hello again").await;
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::Ended);
    let sessions = w.embedded.store.sessions_for_conversation(&w.tenant, "c-1").await.unwrap();
    assert_eq!(sessions.len(), 2);
}

#[tokio::test]
async fn it_hands_off_to_another_agent_who_answers_the_same_message() {
    let script = json!({ "rules": [
        { "when": { "systemContains": "billing agent" }, "then": { "text": "Billing here." } },
        { "then": { "toolCalls": [ { "name": "handoff_to_agent",
            "input": { "agentId": BILLING, "reason": "billing", "context": { "topic": "refund" } } } ] } }
    ] });
    let mut w = World::new(&default_bundle(json!({})), script).await;
    let (_, outcomes) = w.say("c-1", "refund please").await;
    assert_eq!(outcomes.len(), 2, "the handoff queues a continuation for the billing agent");
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::HandedOff);
    let second = record(&outcomes[1]);
    assert_eq!(second.status, ExecutionStatus::Success);
    assert_eq!(second.agent_id.to_string(), BILLING);
    assert!(second.source_id.ends_with("#h1"));
    assert_eq!(w.replies("c-1").await, ["Billing here."]);
    let s = w.session("c-1").await;
    assert_eq!(s.agent_id.to_string(), BILLING);
    assert_eq!(s.handoff_depth, 1);
    assert!(s.parent_session_id.is_some());
    assert_eq!(s.handoff_context.as_ref().unwrap().relevant_info, json!({ "topic": "refund" }));
    assert!(w.events().await.iter().any(|e| e.detail_type == "session.handoff.agent"));
}

#[tokio::test]
async fn handoffs_stop_at_depth_three() {
    // given four agents that each hand off to the next
    let chain = |from: &str, to: &str| {
        json!({ "when": { "systemContains": from }, "then": { "toolCalls": [ { "name": "handoff_to_agent",
            "input": { "agentId": to, "reason": "next" } } ] } })
    };
    let script = json!({ "rules": [
        { "when": { "afterTool": "handoff_to_agent" }, "then": { "text": "I cannot hand this on." } },
        chain("agent A", BILLING), chain("agent B", THIRD), chain("agent C", FOURTH), chain("agent D", FRONT)
    ] });
    let agents = vec![
        agent(FRONT, "A", "You are agent A.", json!({})),
        agent(BILLING, "B", "You are agent B.", json!({})),
        agent(THIRD, "C", "You are agent C.", json!({})),
        agent(FOURTH, "D", "You are agent D.", json!({})),
    ];
    let mut w =
        World::new(&bundle(agents, vec![trigger("01JD0000TR1GGER0CHAT000001", FRONT, 1, json!({}))]), script).await;
    let (_, outcomes) = w.say("c-1", "go").await;
    // then A→B→C→D happen, and D (depth 3) is refused the handoff tool
    assert_eq!(outcomes.len(), 4);
    let last = record(&outcomes[3]);
    assert_eq!(last.agent_id.to_string(), FOURTH);
    assert!(last.tool_calls[0].is_error);
    assert!(last.tool_calls[0].output["error"].as_str().unwrap().contains("not available"));
    assert_eq!(w.session("c-1").await.handoff_depth, 3);
    assert_eq!(w.replies("c-1").await, ["I cannot hand this on."]);
}

#[tokio::test]
async fn a_tool_the_agent_was_not_given_is_refused_to_the_model() {
    let script = json!({ "rules": [
        { "when": { "afterTool": "end_conversation" }, "then": { "text": "I could not end it." } },
        { "then": { "toolCalls": [ { "name": "end_conversation", "input": {} } ] } }
    ] });
    let mut w = World::new(&default_bundle(json!({ "tools": ["send_message"] })), script).await;
    let (_, outcomes) = w.say("c-1", "end it").await;
    let r = record(&outcomes[0]);
    assert!(r.tool_calls[0].is_error);
    assert!(w.session("c-1").await.is_active());
    assert_eq!(w.replies("c-1").await, ["I could not end it."]);
}

#[tokio::test]
async fn bad_tool_arguments_go_back_to_the_model_as_an_error() {
    let script = json!({ "rules": [
        { "when": { "afterTool": "set_context" }, "then": { "text": "Sorry." } },
        { "then": { "toolCalls": [ { "name": "set_context", "input": { "key": "k", "colour": "red" } } ] } }
    ] });
    let mut w = World::new(&default_bundle(json!({})), script).await;
    let (_, outcomes) = w.say("c-1", "x").await;
    let r = record(&outcomes[0]);
    assert!(r.tool_calls[0].is_error);
    assert!(r.tool_calls[0].output["error"].as_str().unwrap().contains("invalid arguments"));
    assert!(w.session("c-1").await.memory.is_empty());
}

#[tokio::test]
async fn a_model_that_rejects_the_request_fails_the_execution_with_a_record_and_an_event() {
    // no rule matches: the scripted model rejects the request, like a model refusing it
    let script = json!({ "rules": [ { "when": { "userText": { "equals": "never" } }, "then": { "text": "x" } } ] });
    let mut w = World::new(&default_bundle(json!({})), script).await;
    let (_, outcomes) = w.say("c-1", "hello").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Failed);
    assert_eq!(r.error.as_ref().unwrap().kind, switchboard_domain::ErrorKind::Model);
    assert!(w.replies("c-1").await.is_empty());
    // the customer goes to a human (the default `onFailure`), then the failure is announced
    let s = w.session("c-1").await;
    assert_eq!(s.status, SessionStatus::HandedOff);
    assert!(s.handoff_reason.as_deref().unwrap().starts_with("the agent could not answer (failed)"));
    let events = w.events().await;
    let kinds: Vec<&str> = events.iter().map(|e| e.detail_type.as_str()).collect();
    assert_eq!(kinds, ["session.handoff.human", "execution.failed"]);
    assert_eq!(events[1].detail["status"], "failed");
    assert_eq!(events[1].detail["executionId"], r.execution_id.to_string());
    assert_eq!(r.actions.len(), 1, "the handoff is the record's action: {:?}", r.actions);
}

/// The agent of the default bundle, failing every turn (its scripted model rejects everything),
/// with `on_failure` as its `onFailure`.
async fn failing_world(on_failure: Value) -> World {
    let script = json!({ "rules": [ { "when": { "userText": { "equals": "never" } }, "then": { "text": "x" } } ] });
    World::new(&default_bundle(json!({ "onFailure": on_failure })), script).await
}

#[tokio::test]
async fn on_failure_message_answers_once_and_keeps_the_agent_and_none_says_nothing() {
    let sorry = "Sorry, something went wrong on our side. Please write again.";
    let mut w = failing_world(json!({ "action": "message", "text": sorry })).await;
    let e = w.event("c-1", "hello");
    let (_, outcomes) = w.deliver(&e).await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Failed);
    assert_eq!(w.replies("c-1").await, [sorry]);
    assert!(w.session("c-1").await.is_active(), "the agent keeps the conversation");
    assert_eq!(w.session("c-1").await.transcript.last().unwrap().text(), sorry);
    // the same item again (a redelivery) is recorded already: nothing more is sent
    let (_, again) = w.deliver(&e).await;
    assert!(again.iter().all(|o| matches!(o, ExecOutcome::AlreadyRecorded(_))), "{again:?}");
    assert_eq!(w.replies("c-1").await, [sorry]);
    // a second failure answers the second message once more
    w.say("c-1", "hello?").await;
    assert_eq!(w.replies("c-1").await, [sorry, sorry]);

    let mut w = failing_world(json!({ "action": "none" })).await;
    let (_, outcomes) = w.say("c-1", "hello").await;
    assert_eq!(record(&outcomes[0]).status, ExecutionStatus::Failed);
    assert!(w.replies("c-1").await.is_empty());
    assert!(w.session("c-1").await.is_active());
    let kinds: Vec<String> = w.events().await.into_iter().map(|e| e.detail_type).collect();
    assert_eq!(kinds, ["execution.failed"], "the failure is still announced");
}

#[tokio::test]
async fn an_item_that_fails_its_last_delivery_is_given_up_to_a_human_once() {
    use switchboard_embedded::queue::{Delivery, QueueConfig};
    // given a model chain that is down: every delivery fails retryably
    let all_down = json!({"model": "down", "modelConfig": {"fallbackModels": ["slow"]}});
    let mut w = World::with_model(&default_bundle(all_down), outages("never")).await;
    let e = w.event("c-1", "hi");
    w.embedded.ingest(&e).await.unwrap();
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let last = QueueConfig::default().max_receives;
    // an earlier delivery fails and is left to the queue
    let early = Delivery { receive_count: last - 1, ..d.clone() };
    assert!(w.embedded.item_handler().handle(&early).await.is_err());
    assert!(w.embedded.store.execution_for_source(&w.tenant, &source_id(&e)).await.unwrap().is_none());
    assert!(w.sessions("c-1").await.is_empty(), "nothing committed yet");
    // when its last delivery fails too
    let final_delivery = Delivery { receive_count: last, ..d };
    w.embedded.item_handler().handle(&final_delivery).await.expect("given up, not dead-lettered");
    // then the failure is recorded, a human has the conversation with the message, and it is announced
    let r = w.embedded.store.execution_for_source(&w.tenant, &source_id(&e)).await.unwrap().unwrap();
    assert_eq!(r.status, ExecutionStatus::Failed);
    let error = r.error.as_ref().unwrap();
    assert_eq!(error.reason.as_deref(), Some(switchboard_engine::execute::LAST_DELIVERY));
    assert!(error.message.contains("its last delivery failed"), "{}", error.message);
    let s = w.session("c-1").await;
    assert_eq!(s.status, SessionStatus::HandedOff);
    assert_eq!(s.transcript.last().unwrap().text(), "hi", "the human sees the message");
    let kinds: Vec<String> = w.events().await.into_iter().map(|e| e.detail_type).collect();
    assert_eq!(kinds, ["session.handoff.human", "execution.failed"]);
    // and giving it up again (a crash before the acknowledgement) finds the record
    let item: WorkItem = serde_json::from_str(&final_delivery.body).unwrap();
    let again = w.embedded.executor.give_up(&item, switchboard_domain::ErrorKind::Model, "down").await.unwrap();
    assert!(matches!(again, ExecOutcome::AlreadyRecorded(_)), "{again:?}");
    assert_eq!(w.events().await.len(), 2);
}

/// Fails the models named `down` (unavailable), `slow` (timeout) and `refusing` (rejected); any
/// other model is the scripted test double.
struct Outages {
    scripted: ScriptedModel,
    tried: std::sync::Mutex<Vec<String>>,
}

#[async_trait]
impl Model for Outages {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.tried.lock().unwrap().push(request.model.clone());
        match request.model.as_str() {
            "down" => Err(ModelError::Unavailable("503 overloaded".into())),
            "slow" => Err(ModelError::Timeout),
            "refusing" => Err(ModelError::Rejected("400 bad tool schema".into())),
            _ => self.scripted.converse(request).await,
        }
    }
}

fn outages(text: &str) -> Arc<Outages> {
    let scripted = ScriptedModel::from_json(&says(text).to_string()).unwrap();
    Arc::new(Outages { scripted, tried: std::sync::Mutex::new(vec![]) })
}

#[tokio::test]
async fn an_outage_falls_back_down_the_chain_and_the_record_says_which_model_answered() {
    // given an agent whose model and first fallback are down
    let chain = json!({"model": "down", "modelConfig": {"fallbackModels": ["slow", "backup", "spare"]}});
    let model = outages("Answered by the backup");
    let mut w = World::with_model(&default_bundle(chain), model.clone()).await;
    // when a customer writes
    let (_, outcomes) = w.say("c-1", "hi").await;
    // then the backup answers, and the record keeps each failure in order
    assert_eq!(w.replies("c-1").await, ["Answered by the backup"]);
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    let call = &r.model_calls[0];
    assert_eq!(call.model, switchboard_embedded::SCRIPTED_MODEL_ID);
    let failed: Vec<(&str, &str)> = call.fallback_from.iter().map(|f| (f.model.as_str(), f.error.as_str())).collect();
    assert_eq!(failed, [("down", "unavailable"), ("slow", "timeout")]);
    assert!(call.fallback_from[0].message.contains("503 overloaded"));
    assert_eq!(*model.tried.lock().unwrap(), ["down", "slow", "backup"], "the spare was not needed");
}

#[tokio::test]
async fn a_refused_request_does_not_fall_back_and_an_exhausted_chain_is_retried_later() {
    // a refusal ends the execution at once: the next model would refuse it too
    let refusing = json!({"model": "refusing", "modelConfig": {"fallbackModels": ["backup"]}});
    let model = outages("never");
    let mut w = World::with_model(&default_bundle(refusing), model.clone()).await;
    let (_, outcomes) = w.say("c-1", "hi").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Failed);
    assert_eq!(r.error.as_ref().unwrap().reason.as_deref(), Some("rejected"), "the record tells a refusal apart");
    assert_eq!(*model.tried.lock().unwrap(), ["refusing"]);

    // when every model of the chain is down, the item fails retryably (it is delivered again)
    let all_down = json!({"model": "down", "modelConfig": {"fallbackModels": ["slow"]}});
    let model = outages("never");
    let mut w = World::with_model(&default_bundle(all_down), model.clone()).await;
    let e = w.event("c-2", "hi");
    w.embedded.ingest(&e).await.unwrap();
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    let err = w.embedded.executor.execute(&item).await.unwrap_err();
    assert!(err.retryable, "{err:?}");
    assert_eq!(*model.tried.lock().unwrap(), ["down", "slow"]);
    assert!(w.replies("c-2").await.is_empty());
}

#[tokio::test]
async fn a_fallback_chain_naming_the_model_twice_or_an_unknown_provider_is_refused() {
    let bad = json!({"model": "down", "modelConfig": {"fallbackModels": ["gemini:pro", "down"]}});
    let err = Bundle::parse(&default_bundle(bad), &SystemClock).unwrap_err().to_string();
    assert!(err.contains("/modelConfig/fallbackModels/0") && err.contains("unknown provider"), "{err}");
    assert!(err.contains("/modelConfig/fallbackModels/1") && err.contains("already in the chain"), "{err}");
}

#[tokio::test]
async fn a_turn_whose_budget_is_spent_calls_no_model_and_is_recorded_as_timeout() {
    // given an executor whose budget is already spent when the turn starts
    let mut w = World::new(&default_bundle(json!({})), says("never sent")).await;
    let executor = w.embedded.executor.clone().with_budget(Some(std::time::Duration::ZERO));
    let (_, outcomes) = w.say_with(&executor, "c-1", "hi").await;
    // then no model is called, the turn is recorded as a timeout, and nothing is sent
    let r = record(&outcomes[0]);
    assert_eq!((r.status, r.iterations, r.model_calls.len()), (ExecutionStatus::Timeout, 0, 0));
    assert!(r.error.as_ref().unwrap().message.contains("deadline"));
    assert_eq!(r.error.as_ref().unwrap().reason.as_deref(), Some("deadline"));
    assert!(w.replies("c-1").await.is_empty());
    // and the customer is handed to a human, the record keeping its status, and it is announced
    assert_eq!(w.session("c-1").await.status, SessionStatus::HandedOff);
    let events = w.events().await;
    let failed = events.iter().find(|e| e.detail_type == "execution.failed").expect("execution.failed");
    assert_eq!(
        (failed.detail["status"].as_str(), failed.detail["executionId"].as_str()),
        (Some("timeout"), Some(r.execution_id.to_string().as_str()))
    );
}

/// Asks for `send_message` first, then never answers again.
struct StallsAfterReplying(AtomicU32);

#[async_trait]
impl Model for StallsAfterReplying {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        if self.0.fetch_add(1, Ordering::SeqCst) > 0 {
            std::future::pending::<()>().await;
        }
        Ok(ModelResponse {
            content: vec![switchboard_domain::ContentBlock::ToolUse {
                tool_use_id: "tu-1".into(),
                name: "send_message".into(),
                input: json!({"text": "Looking into it."}),
            }],
            stop_reason: switchboard_engine::StopReason::ToolUse,
            usage: switchboard_domain::TokenUsage::new(5, 5),
            model: request.model.clone(),
        })
    }
}

#[tokio::test]
async fn a_model_call_cut_off_by_the_deadline_ends_the_turn_as_timeout_with_nothing_sent_twice() {
    // given a model that replies, then hangs (behind the retry layer every provider has)
    let stalls: Arc<dyn Model> = Arc::new(StallsAfterReplying(AtomicU32::new(0)));
    let model = Arc::new(switchboard_models::Retrying::new(stalls, switchboard_models::RetryPolicy::default()));
    let mut w = World::with_model(&default_bundle(json!({})), model).await;
    let executor = w.embedded.executor.clone().with_budget(Some(std::time::Duration::from_millis(300)));
    // when the turn runs past its budget during the second model call
    let e = w.event("c-1", "hi");
    w.embedded.ingest(&e).await.unwrap();
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    let outcome = executor.execute(&item).await.unwrap();
    // then it is recorded as a timeout, with the reply already sent: the customer was answered,
    // so `onFailure` leaves the agent on the conversation; the timeout is announced
    let r = record(&outcome);
    assert_eq!((r.status, r.iterations), (ExecutionStatus::Timeout, 2));
    assert_eq!(w.replies("c-1").await, ["Looking into it."]);
    assert!(w.session("c-1").await.is_active());
    let kinds: Vec<String> = w.events().await.into_iter().map(|e| e.detail_type).collect();
    assert_eq!(kinds, ["execution.failed"]);
    // and running the same item again (a redelivery) sends nothing more
    assert!(matches!(executor.execute(&item).await.unwrap(), ExecOutcome::AlreadyRecorded(_)));
    assert_eq!(w.replies("c-1").await, ["Looking into it."]);
}

#[tokio::test]
async fn triggers_are_tried_in_priority_order_and_the_first_match_wins() {
    let agents = vec![agent(FRONT, "Front", "front", json!({})), agent(BILLING, "Billing", "billing", json!({}))];
    let triggers = vec![
        trigger("01JD0000TR1GGER0CHAT000001", FRONT, 50, json!({})),
        trigger(
            "01JD0000TR1GGER0PAY0000002",
            BILLING,
            5,
            json!({ "all": [ { "field": "message.text", "operator": "contains", "value": "invoice", "caseInsensitive": true } ] }),
        ),
    ];
    let mut w = World::new(&bundle(agents, triggers), says("ok")).await;
    let (a, _) = w.say("c-1", "Where is my INVOICE?").await;
    let (b, _) = w.say("c-2", "hello").await;
    assert!(matches!(a, RouteOutcome::Enqueued { agent_id, .. } if agent_id.to_string() == BILLING));
    assert!(matches!(b, RouteOutcome::Enqueued { agent_id, .. } if agent_id.to_string() == FRONT));
}

#[tokio::test]
async fn no_matching_trigger_means_no_work() {
    let agents = vec![agent(FRONT, "Front", "front", json!({}))];
    let triggers = vec![trigger(
        "01JD0000TR1GGER0CHAT000001",
        FRONT,
        1,
        json!({ "all": [ { "field": "channel.platform", "operator": "eq", "value": "whatsapp" } ] }),
    )];
    let mut w = World::new(&bundle(agents, triggers), says("ok")).await;
    let (routed, outcomes) = w.say("c-1", "hi").await;
    assert_eq!(routed, RouteOutcome::NoMatch);
    assert!(outcomes.is_empty());
    // the message is in the conversation log all the same (logged on its own: nothing was queued)
    let log = w.embedded.store.messages(&w.tenant, "c-1", 10).await.unwrap();
    let logged: Vec<_> = log.iter().map(|m| (m.direction.as_str(), m.text.as_str())).collect();
    assert_eq!(logged, [("inbound", "hi")]);
}

#[tokio::test]
async fn a_trigger_whose_agent_is_inactive_is_skipped_for_the_next_one() {
    let agents = vec![
        agent(FRONT, "Front", "front", json!({ "status": "inactive" })),
        agent(BILLING, "Billing", "billing", json!({})),
    ];
    let triggers = vec![
        trigger("01JD0000TR1GGER0CHAT000001", FRONT, 1, json!({})),
        trigger("01JD0000TR1GGER0PAY0000002", BILLING, 2, json!({})),
    ];
    let mut w = World::new(&bundle(agents, triggers), says("ok")).await;
    let (routed, _) = w.say("c-1", "hi").await;
    assert!(matches!(routed, RouteOutcome::Enqueued { agent_id, .. } if agent_id.to_string() == BILLING));
}

#[tokio::test]
async fn outbound_messages_and_unknown_tenants_are_not_routed() {
    let w = World::new(&default_bundle(json!({})), says("ok")).await;
    let mut outbound = json!({
        "id": "evt-out", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "t-1", "conversationId": "c-1", "messageId": "m-out",
                    "channel": {}, "conversation": {}, "message": {"direction": "outbound", "text": "our reply"} }
    });
    let e = InboundEvent::parse(&outbound).unwrap();
    assert_eq!(w.embedded.ingest(&e).await.unwrap(), RouteOutcome::NotInbound);
    outbound["detail"]["tenantId"] = json!("nobody");
    let e = InboundEvent::parse(&outbound).unwrap();
    assert!(matches!(w.embedded.ingest(&e).await, Err(RouteError::UnknownTenant(_))));
    // nothing was stored for the unknown tenant
    let nobody: TenantId = "nobody".parse().unwrap();
    assert!(w.embedded.store.messages(&nobody, "c-1", 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_bundle_with_a_trigger_naming_a_missing_agent_is_refused_with_its_pointer() {
    let bad = bundle(
        vec![agent(FRONT, "Front", "front", json!({}))],
        vec![trigger("01JD0000TR1GGER0CHAT000001", BILLING, 1, json!({}))],
    );
    let err = Bundle::parse(&bad, &SystemClock).unwrap_err();
    assert_eq!(err.0[0].pointer, "/triggers/0/agentId");
    let bad_condition = bundle(
        vec![agent(FRONT, "Front", "front", json!({}))],
        vec![trigger(
            "01JD0000TR1GGER0CHAT000001",
            FRONT,
            1,
            json!({ "all": [ { "field": "x", "operator": "resembles", "value": 1 } ] }),
        )],
    );
    let missing_tool =
        bundle(vec![agent(FRONT, "Front", "front", json!({ "tools": ["send_message", LOOKUP] }))], vec![]);
    assert_eq!(Bundle::parse(&missing_tool, &SystemClock).unwrap_err().0[0].pointer, "/agents/0/tools/1");
    let err = Bundle::parse(&bad_condition, &SystemClock).unwrap_err();
    assert!(err.0[0].pointer.starts_with("/triggers/0/conditions"), "{err}");
}

/// A webhook caller that records requests and answers from a script (the real HTTP caller is
/// tested on its own against a loopback receiver).
struct RecordingWebhooks {
    calls: std::sync::Mutex<Vec<switchboard_engine::WebhookRequest>>,
    answer: Result<switchboard_engine::WebhookResponse, switchboard_engine::WebhookError>,
}

#[async_trait]
impl switchboard_engine::WebhookCaller for RecordingWebhooks {
    async fn call(
        &self,
        request: &switchboard_engine::WebhookRequest,
    ) -> Result<switchboard_engine::WebhookResponse, switchboard_engine::WebhookError> {
        self.calls.lock().unwrap().push(request.clone());
        self.answer.clone()
    }
}

const LOOKUP: &str = "01JD0000H00KS000000000000A";

async fn world_with_webhook(
    answer: Result<switchboard_engine::WebhookResponse, switchboard_engine::WebhookError>,
    arguments: Value,
) -> (World, Arc<RecordingWebhooks>) {
    let script = json!({ "rules": [
        { "when": { "afterTool": "lookup_order" }, "then": { "text": "Checked your order." } },
        { "then": { "toolCalls": [ { "name": "lookup_order", "input": arguments } ] } }
    ] });
    world_with_webhook_script(answer, script).await
}

/// A world whose agent has the webhook tool `lookup_order`, answered by `answer`, and whose model
/// follows `script`.
async fn world_with_webhook_script(
    answer: Result<switchboard_engine::WebhookResponse, switchboard_engine::WebhookError>,
    script: Value,
) -> (World, Arc<RecordingWebhooks>) {
    let hooks = Arc::new(RecordingWebhooks { calls: Default::default(), answer });
    let model = Arc::new(ScriptedModel::from_json(&script.to_string()).unwrap());
    let options = EmbeddedOptions { webhooks: hooks.clone(), ..EmbeddedOptions::default() };
    let tool = json!({
        "toolId": LOOKUP, "name": "lookup_order", "description": "Looks an order up",
        "parameters": { "type": "object", "properties": { "orderId": { "type": "string" } }, "required": ["orderId"],
                        "additionalProperties": false },
        "handler": { "type": "webhook", "url": "https://hooks.example.com/orders?sig=x", "secretRef": "orders" }
    });
    let mut b: Value = serde_json::from_str(&default_bundle(json!({ "tools": ["send_message", LOOKUP] }))).unwrap();
    b["tools"] = json!([tool]);
    (World::open(model, Arc::new(SystemClock), options, &[&b.to_string()]).await, hooks)
}

fn http(status: u16, body: &str) -> switchboard_engine::WebhookResponse {
    switchboard_engine::WebhookResponse {
        status,
        body: body.as_bytes().to_vec(),
        truncated: false,
        attempts: 1,
        host: "hooks.example.com".into(),
    }
}

#[tokio::test]
async fn a_large_webhook_result_reaches_the_model_shortened_and_recall_details_reads_it_whole() {
    // given an order system that answers 50 orders with long notes (about 27 KB of JSON, over
    // the default 8 KiB), and a model that looks up, then asks for the whole result
    let full = json!({ "customer": "Ana", "orders": (0..50).map(|i| json!({ "id": i, "note": "n".repeat(500) })).collect::<Vec<_>>() });
    let script = json!({ "rules": [
        { "when": { "afterTool": "recall_details" }, "then": { "text": "Read it all: {{userText}}" } },
        { "when": { "afterTool": "lookup_order" }, "then": { "toolCalls": [ { "name": "recall_details",
            "input": { "handle": "scripted-1-0" } } ] } },
        { "when": { "userText": { "contains": "again" } }, "then": { "toolCalls": [ { "name": "recall_details",
            "input": { "handle": "scripted-1-0" } } ] } },
        { "when": { "userText": { "contains": "unknown" } }, "then": { "toolCalls": [ { "name": "recall_details",
            "input": { "handle": "nope" } } ] } },
        { "then": { "toolCalls": [ { "name": "lookup_order", "input": { "orderId": "123" } } ] } }
    ] });
    let (mut w, _hooks) = world_with_webhook_script(Ok(http(200, &full.to_string())), script).await;
    let (_, outcomes) = w.say("c-1", "my orders?").await;
    let r = record(&outcomes[0]);
    assert_eq!(r.status, ExecutionStatus::Success);
    // then the model was shown (and the record keeps) the shortened form with its handle
    let shown = &r.tool_calls[0].output;
    assert_eq!(shown["shortened"], json!(true));
    assert_eq!(shown["handle"], json!("scripted-1-0"));
    assert_eq!(shown["fullBytes"], json!(full.to_string().len()));
    assert_eq!(shown["preview"]["orders"].as_array().unwrap().len(), 4);
    assert!(shown.to_string().len() <= 8 * 1024);
    // and recall_details, offered once a result was kept (the agent does not list it), read it whole
    assert_eq!(r.tool_calls[1].name, "recall_details");
    assert!(!r.tool_calls[1].is_error);
    assert_eq!(r.tool_calls[1].output["result"], full);
    assert_eq!(r.tool_calls[1].output["tool"], json!("lookup_order"));
    // the session keeps the full result once, and its transcript a note in place of the recall
    let s = w.embedded.store.latest_session(&w.tenant, "c-1").await.unwrap().unwrap();
    assert_eq!(s.recalled("scripted-1-0").map(|x| &x.content), Some(&full));
    let stored: Vec<&Value> = s
        .transcript
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0]["shortened"], json!(true));
    assert_eq!(stored[1]["recalled"], json!("scripted-1-0"));
    // a later turn of the same session can read it again; an unknown handle is a tool error
    let (_, outcomes) = w.say("c-1", "show it again").await;
    let again = record(&outcomes[0]);
    assert_eq!(again.tool_calls[0].output["result"], full);
    let (_, outcomes) = w.say("c-1", "an unknown one").await;
    let unknown = &record(&outcomes[0]).tool_calls[0];
    assert!(unknown.is_error);
    assert_eq!(unknown.output["error"], json!("no stored result 'nope' in this session (stored: scripted-1-0)"));
}

#[tokio::test]
async fn it_calls_a_webhook_tool_and_feeds_its_answer_back() {
    let (mut w, hooks) =
        world_with_webhook(Ok(http(200, r#"{"status":"shipped"}"#)), json!({ "orderId": "123" })).await;
    let (_, outcomes) = w.say("c-1", "where is 123?").await;
    let r = record(&outcomes[0]);
    // then the tool was called once, signed by the adapter, with a body that says what and why
    let calls = hooks.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    let body: Value = serde_json::from_slice(&calls[0].body).unwrap();
    assert_eq!(body["tool"], "lookup_order");
    assert_eq!(body["arguments"], json!({ "orderId": "123" }));
    assert_eq!(body["idempotencyKey"], calls[0].idempotency_key.as_str());
    assert_eq!(body["executionId"], json!(r.execution_id));
    assert!(body.get("conversationId").is_none(), "no personal data unless the tool opts in");
    assert_eq!(calls[0].handler.secret_ref.as_deref(), Some("orders"));
    // and its answer went back to the model, and into the audit
    let call = &r.tool_calls[0];
    assert_eq!((call.is_error, call.output.clone()), (false, json!({ "status": "shipped" })));
    assert_eq!(call.idempotency_key, calls[0].idempotency_key);
    let audit = call.webhook.as_ref().unwrap();
    assert_eq!((audit.host.as_str(), audit.status, audit.outcome.as_str()), ("hooks.example.com", Some(200), "ok"));
    assert_eq!(w.replies("c-1").await, ["Checked your order."]);
}

#[tokio::test]
async fn arguments_that_break_the_tools_schema_never_reach_the_webhook() {
    let (mut w, hooks) = world_with_webhook(Ok(http(200, "{}")), json!({ "orderId": 123, "admin": true })).await;
    let (_, outcomes) = w.say("c-1", "x").await;
    let call = &record(&outcomes[0]).tool_calls[0];
    assert!(hooks.calls.lock().unwrap().is_empty());
    assert!(call.is_error);
    assert_eq!(call.output["problems"], json!(["/admin: is not allowed", "/orderId: value is not of type \"string\""]));
    assert_eq!(call.webhook.as_ref().unwrap().outcome, "invalid_arguments");
}

#[tokio::test]
async fn a_failing_webhook_is_an_error_for_the_model_not_a_failed_execution() {
    for (answer, outcome) in [
        (Err(switchboard_engine::WebhookError::Timeout { attempts: 3 }), "timeout"),
        (Err(switchboard_engine::WebhookError::Blocked("private address".into())), "blocked"),
        (Ok(http(503, "busy")), "http_error"),
    ] {
        let (mut w, _) = world_with_webhook(answer, json!({ "orderId": "1" })).await;
        let (_, outcomes) = w.say("c-1", "x").await;
        let r = record(&outcomes[0]);
        assert_eq!(r.status, ExecutionStatus::Success, "{outcome}");
        assert!(r.tool_calls[0].is_error);
        assert_eq!(r.tool_calls[0].webhook.as_ref().unwrap().outcome, outcome);
        assert_eq!(w.replies("c-1").await, ["Checked your order."]);
    }
}

#[tokio::test]
async fn a_redelivered_item_calls_the_webhook_again_with_the_same_idempotency_key() {
    let (mut w, hooks) = world_with_webhook(Ok(http(200, "{}")), json!({ "orderId": "1" })).await;
    w.say("c-1", "first").await;
    let executor = flaky_executor(&w, Mode::CrashBeforeCommit);
    let e = w.event("c-1", "second");
    w.embedded.ingest(&e).await.unwrap();
    let d = w.embedded.queue.receive().await.unwrap().unwrap();
    let item: WorkItem = serde_json::from_str(&d.body).unwrap();
    assert!(executor.execute(&item).await.is_err());
    executor.execute(&item).await.unwrap();
    let keys: Vec<_> = hooks.calls.lock().unwrap().iter().map(|c| c.idempotency_key.clone()).collect();
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[1], keys[2], "the receiver can drop the repeat");
    assert_ne!(keys[0], keys[1]);
}

#[tokio::test]
async fn ready_means_the_workers_run_and_the_database_takes_writes() {
    use tower::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[{"then":{"text":"x"}}]}"#).unwrap());
    let embedded =
        Arc::new(Embedded::open(dir.path(), model, Arc::new(SystemClock), EmbeddedOptions::default()).unwrap());
    let app =
        switchboard_api::routes(switchboard_embedded::api::api_state(&embedded, 60, std::time::Duration::from_secs(5)));
    let ready = async |app: &axum::Router| {
        let request = axum::http::Request::get("/ready").body(axum::body::Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    // before the workers start (no key needed: a container runtime asks)
    let (status, body) = ready(&app).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not-ready") && body.contains("workers"), "{body}");
    // a database that does not take writes (after the busy timeout)
    let blocker = rusqlite_lock(dir.path());
    let (status, body) = ready(&app).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("does not take writes"), "{body}");
    drop(blocker);
    embedded.start_workers();
    assert_eq!(ready(&app).await, (200, r#"{"status":"ready"}"#.to_owned()));
    // draining
    embedded.shutdown().await;
    assert_eq!(ready(&app).await.0, 503);
}

/// Another connection holding the database's write lock (as a stuck process would).
fn rusqlite_lock(dir: &std::path::Path) -> rusqlite::Connection {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "db"))
        .unwrap();
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.execute_batch("BEGIN EXCLUSIVE;").unwrap();
    conn
}

#[tokio::test]
async fn a_waiter_whose_source_completes_without_a_record_looks_again_and_waits_for_the_next() {
    use switchboard_embedded::queue::Delivery;
    use switchboard_embedded::runtime::Queued;
    let mut w = World::new(&default_bundle(json!({})), json!({"rules": [{"then": {"text": "hello"}}]})).await;
    let e = w.event("c-1", "hi");
    let completions = w.embedded.subscribe_completions();
    let source = source_id(&e);
    let mut waiter = std::pin::pin!(w.embedded.wait_for_execution(
        completions,
        &w.tenant,
        &source,
        Queued::Now,
        std::time::Duration::from_secs(30)
    ));
    assert!(futures::poll!(&mut waiter).is_pending());
    // An item of the same source that the executor drops (a hand-off continuation whose session
    // is not active) completes without a record: the waiter must not answer "no record".
    let item = front_item(&w, &e, true);
    let delivery = Delivery {
        receipt: "1.r".into(),
        group_id: "c-1".into(),
        dedup_id: "d-1".into(),
        body: serde_json::to_string(&item).unwrap(),
        receive_count: 1,
        enqueued_at: chrono::Utc::now(),
    };
    w.embedded.item_handler().handle(&delivery).await.unwrap();
    assert!(futures::poll!(&mut waiter).is_pending(), "a completion without a record ended the wait");
    // The message itself, queued and run: its record ends the wait.
    w.embedded.start_workers();
    let (record, outcome) = tokio::join!(waiter, w.embedded.ingest(&e));
    assert!(matches!(outcome.unwrap(), RouteOutcome::Enqueued { duplicate: false, .. }));
    let record = record.unwrap().expect("the wait ended without the record");
    assert_eq!(record.source_id, source_id(&e));
    assert_eq!(record.status, ExecutionStatus::Success);
    w.embedded.shutdown().await;
}

#[tokio::test]
async fn a_caller_waiting_for_its_message_gets_the_record_as_stored_and_a_repeat_finds_it() {
    use switchboard_engine::Ingest;
    let wait = std::time::Duration::from_secs(30);
    let mut w = World::new(&default_bundle(json!({})), json!({"rules": [{"then": {"text": "hello"}}]})).await;
    w.embedded.start_workers();
    let e = w.event("c-1", "hi");
    // queued now: the record comes with the item's completion
    let (outcome, record) = w.embedded.ingest_and_wait(&e, wait).await.unwrap();
    assert!(matches!(outcome, RouteOutcome::Enqueued { duplicate: false, .. }), "{outcome:?}");
    let stored = w.embedded.store.execution_for_source(&w.tenant, &source_id(&e)).await.unwrap().unwrap();
    assert_eq!(record.as_ref(), Some(&stored), "the completion's record is the one stored");
    assert_eq!(stored.status, ExecutionStatus::Success);
    // the same event again: nothing is queued and no completion comes, so the record is read
    let (outcome, again) = w.embedded.ingest_and_wait(&e, wait).await.unwrap();
    assert!(matches!(outcome, RouteOutcome::Enqueued { duplicate: true, .. }), "{outcome:?}");
    assert_eq!(again, Some(stored.clone()));
    // the same message under a new event id: the same, the first one's execution
    let (outcome, resent) = w.embedded.ingest_and_wait(&resent(&e, "evt-resent"), wait).await.unwrap();
    assert!(matches!(outcome, RouteOutcome::Enqueued { duplicate: true, .. }), "{outcome:?}");
    assert_eq!(resent, Some(stored));
    assert_eq!(w.replies("c-1").await, ["hello"]);
    w.embedded.shutdown().await;
}

/// The message `e` carries, sent again under event id `id` (a producer's `PutEvents` retried
/// after a timeout gets a new id).
fn resent(e: &InboundEvent, id: &str) -> InboundEvent {
    InboundEvent { id: id.into(), ..e.clone() }
}

#[tokio::test]
async fn the_same_message_under_a_new_event_id_is_answered_once() {
    // given a customer's message, answered
    let mut w = World::new(&default_bundle(json!({})), says("on its way")).await;
    let e = w.event("c-1", "where is my order?");
    let (first, outcomes) = w.deliver(&e).await;
    assert!(matches!(first, RouteOutcome::Enqueued { duplicate: false, .. }), "{first:?}");
    let answered = record(&outcomes[0]).clone();
    // when the producer sends it again under a new event id
    let (outcome, again) = w.deliver(&resent(&e, "evt-resent")).await;
    // then it is a duplicate: nothing queued or run, one reply, one execution, logged once
    assert!(matches!(outcome, RouteOutcome::Enqueued { duplicate: true, .. }), "{outcome:?}");
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(w.replies("c-1").await, ["on its way"]);
    let session = w.session("c-1").await;
    let page = w.embedded.store.list_executions(&w.tenant, session.session_id, None, 10).await.unwrap();
    assert_eq!(answered.source_id, source_id(&e));
    assert_eq!(page.items, [answered]);
    let log = w.embedded.store.messages(&w.tenant, "c-1", 100).await.unwrap();
    assert_eq!(log.iter().filter(|m| m.text == "where is my order?").count(), 1);
    assert_eq!(session.turn_count, 1);
}

#[tokio::test]
async fn a_message_sent_again_after_the_queues_window_is_queued_but_not_answered_twice() {
    // given a message answered, and the queue's deduplication window (5 minutes) gone by
    let clock = switchboard_testkit::ManualClock::new();
    let model = Arc::new(ScriptedModel::from_json(&says("on its way").to_string()).unwrap());
    let bundle = default_bundle(json!({}));
    let mut w = World::open(model, clock.clone(), EmbeddedOptions::default(), &[&bundle]).await;
    let e = w.event("c-1", "where is my order?");
    let (_, outcomes) = w.deliver(&e).await;
    let answered = record(&outcomes[0]).clone();
    clock.advance(chrono::Duration::minutes(6));
    // when the producer sends it again under a new event id
    let (outcome, again) = w.deliver(&resent(&e, "evt-late")).await;
    // then the queue takes it (its window is over), and the executor finds the message's record
    assert!(matches!(outcome, RouteOutcome::Enqueued { duplicate: false, .. }), "{outcome:?}");
    assert!(matches!(&again[..], [ExecOutcome::AlreadyRecorded(r)] if **r == answered), "{again:?}");
    assert_eq!(w.replies("c-1").await, ["on its way"]);
}

/// Answers nobody until `n` calls have come (then as the scripted test double), and every call
/// after those at once. Not a barrier: a turn that outlasts the queue's visibility timeout on a
/// loaded machine is delivered again, and the second delivery's call must not leave another call
/// waiting for ever on a barrier's next round.
struct Gathering {
    n: usize,
    arrived: AtomicU32,
    gathered: tokio::sync::watch::Sender<bool>,
    scripted: ScriptedModel,
}

#[async_trait]
impl Model for Gathering {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let mut all_in = self.gathered.subscribe();
        if usize::try_from(self.arrived.fetch_add(1, Ordering::SeqCst) + 1).unwrap() >= self.n {
            self.gathered.send_replace(true);
        }
        all_in.wait_for(|gathered| *gathered).await.unwrap();
        self.scripted.converse(request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_pool_waits_on_as_many_models_at_once_as_it_has_workers() {
    use switchboard_engine::Ingest;
    // given a model that answers nobody until every default worker is waiting on it
    let n = usize::from(switchboard_embedded::DEFAULT_WORKERS);
    let scripted = ScriptedModel::from_json(&says("on its way").to_string()).unwrap();
    let gathered = tokio::sync::watch::Sender::new(false);
    let model = Arc::new(Gathering { n, arrived: AtomicU32::new(0), gathered, scripted });
    let mut w = World::with_model(&default_bundle(json!({})), model).await;
    w.embedded.start_workers();
    // when as many conversations write at once (a smaller pool would leave them all waiting,
    // and each wait would end without its record)
    let events: Vec<InboundEvent> = (0..n).map(|i| w.event(&format!("c-{i}"), "where is it?")).collect();
    let wait = std::time::Duration::from_secs(60);
    let answers = futures::future::join_all(events.iter().map(|e| w.embedded.ingest_and_wait(e, wait))).await;
    // then every turn ran, all of them at the same time
    for (e, answer) in events.iter().zip(answers) {
        let (outcome, record) = answer.unwrap();
        assert!(matches!(outcome, RouteOutcome::Enqueued { duplicate: false, .. }), "{outcome:?}");
        let record = record.unwrap_or_else(|| panic!("{}: no record within the wait", e.id));
        assert_eq!(record.status, ExecutionStatus::Success);
    }
    w.embedded.shutdown().await;
}
