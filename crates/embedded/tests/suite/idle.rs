//! Idle sessions on the embedded profile, through the engine turn by turn: a tenant whose limits
//! say `closeIdleSessions` has a conversation its customer left closed as abandoned once the
//! agent has waited `sessionIdleMinutes` on them (its record, its `session.ended`, its insight),
//! and their next message opens another (which reads the conversation's recent messages, as any
//! new session does); a message in time keeps it open; a tenant that keeps
//! idle sessions open has none closed; a close that fails is made by the next sweep, once. The
//! clock is manual and the sweep is called by hand.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use chrono::Duration;
use serde_json::json;
use switchboard_domain::insights::InsightRow;
use switchboard_domain::{ExecutionStatus, SessionStatus, TenantLimits, hour_of};
use switchboard_embedded::{EmbeddedOptions, ScriptedModel};
use switchboard_engine::{Clock, Closed, ConfigAdmin, ConfigStore, ExecutionLog};
use switchboard_testkit::ManualClock;
use switchboard_testkit::faults::{Faults, Kind, Plan};

use crate::common;

const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";
const TRIGGER: &str = "01JD0000TR1GGER0CHAT000001";

/// The common world on a manual clock; its tenant closes idle sessions after 30 minutes when
/// `close` says so. Its port calls go through `faults`.
async fn world(close: bool, faults: Faults) -> (common::World, Arc<ManualClock>) {
    let clock = ManualClock::new();
    let script = json!({ "rules": [ { "when": {}, "then": { "text": "You said: {{userText}}" } } ] });
    let model = Arc::new(ScriptedModel::from_json(&script.to_string()).unwrap());
    let bundle = json!({
        "tenantId": "t-1", "name": "Quiet customers",
        "agents": [{ "agentId": AGENT, "name": "Front", "systemPrompt": "You help.", "model": "test-model",
                     "tools": ["send_message"] }],
        "triggers": [{ "triggerId": TRIGGER, "name": "all", "agentId": AGENT, "eventType": "message.new",
                       "priority": 10, "conditions": {} }]
    });
    let options = EmbeddedOptions { ports: Some(Arc::new(faults)), ..EmbeddedOptions::default() };
    let w = common::World::open(model, clock.clone(), options, &[&bundle.to_string()]).await;
    set_closing(&w, close).await;
    (w, clock)
}

async fn set_closing(w: &common::World, close: bool) {
    let store = &w.embedded.store;
    let mut t = store.get_tenant(&w.tenant).await.unwrap().unwrap();
    t.limits = TenantLimits { session_idle_minutes: 30, close_idle_sessions: close, ..TenantLimits::default() };
    assert!(store.update_tenant(&t).await.unwrap());
}

async fn sweep(w: &common::World) -> Closed {
    w.embedded.close_idle_sessions().await.unwrap()
}

/// The rows added up.
fn added(rows: &[InsightRow]) -> InsightRow {
    let mut total = InsightRow::default();
    for row in rows {
        total.add(row);
    }
    total
}

fn closed(n: usize) -> Closed {
    Closed { closed: n, ..Closed::default() }
}

#[tokio::test]
async fn a_conversation_whose_customer_goes_quiet_closes_as_abandoned_and_their_next_message_opens_another() {
    let (mut w, clock) = world(true, Faults::default()).await;
    let opened = clock.now();
    w.say("c-1", "Where is my order?").await;
    let first = w.session("c-1").await;
    assert_eq!(first.idle.as_ref().map(|i| i.at), Some(opened + Duration::minutes(30)));
    // given the customer answers after 29 minutes, their session is not closed meanwhile
    clock.advance(Duration::minutes(29));
    assert_eq!(sweep(&w).await, Closed::default());
    w.say("c-1", "Still there?").await;
    clock.advance(Duration::minutes(29));
    assert_eq!(sweep(&w).await, Closed::default(), "the second message moved the time on");
    // when they then go quiet for the whole idle time
    clock.advance(Duration::minutes(1));
    let closed_at = clock.now();
    assert_eq!(sweep(&w).await, closed(1));
    // then the session is abandoned, with a record of the close that ran nothing
    let s = w.session("c-1").await;
    assert_eq!((s.session_id, s.status, s.ended_at), (first.session_id, SessionStatus::Abandoned, Some(closed_at)));
    let page = w.embedded.store.list_executions(&w.tenant, s.session_id, None, 10).await.unwrap();
    let close = page.items.last().unwrap();
    assert_eq!(close.status, ExecutionStatus::Abandoned);
    assert_eq!(close.source_id, format!("idle-{}", s.session_id));
    assert_eq!(close.trigger_id.map(|t| t.to_string()).as_deref(), Some(TRIGGER));
    assert!(close.actions.is_empty() && close.model_calls.is_empty());
    // and session.ended says it closed idle
    let events = w.events().await;
    let ended: Vec<_> = events.iter().filter(|e| e.detail_type == "session.ended").collect();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].detail["endedBy"], "idle");
    assert_eq!(ended[0].detail["sessionId"], s.session_id.to_string());
    assert!(ended[0].detail["summary"].is_null());
    // and a second sweep finds nothing to close
    assert_eq!(sweep(&w).await, Closed::default());
    // and the insights count it once, under the agent's version and the trigger
    let rows = w.embedded.store.insights(&w.tenant, hour_of(opened), hour_of(closed_at)).await.unwrap();
    let total = added(&rows);
    assert_eq!((total.counts.conversations, total.counts.abandoned, total.counts.resolved), (1, 1, 0));
    assert_eq!(total.counts.executions, 2, "the two turns; the close ran nothing");
    let row = rows.iter().find(|r| r.counts.abandoned == 1).unwrap();
    let key = row.key.as_ref().unwrap();
    assert_eq!((key.agent_version, key.trigger_id.map(|t| t.to_string())), (1, Some(TRIGGER.to_owned())));
    let figures = total.figures();
    assert_eq!(figures["abandoned"], 1);
    assert_eq!(figures["abandonedRate"], 1.0);
    // when the customer comes back, their message opens a new conversation
    clock.advance(Duration::hours(2));
    w.say("c-1", "I'm back").await;
    let next = w.session("c-1").await;
    assert_ne!(next.session_id, first.session_id);
    assert_eq!((next.status, next.turn_count, next.parent_session_id), (SessionStatus::Active, 1, None));
    // (which, as any new session, reads the conversation's recent messages from its channel)
    assert!(next.transcript.iter().any(|m| m.text().contains("Where is my order")));
    let rows = w.embedded.store.insights(&w.tenant, hour_of(opened), hour_of(clock.now())).await.unwrap();
    assert_eq!(added(&rows).counts.conversations, 2);
}

#[tokio::test]
async fn a_tenant_that_keeps_idle_sessions_open_has_none_closed_and_one_that_stops_closing_takes_them_off() {
    let (mut w, clock) = world(false, Faults::default()).await;
    w.say("c-1", "Hello").await;
    assert_eq!(w.session("c-1").await.idle, None);
    clock.advance(Duration::days(2));
    assert_eq!(sweep(&w).await, Closed::default());
    assert_eq!(w.session("c-1").await.status, SessionStatus::Active);
    // given the tenant starts closing them: a resting session is due from its next turn on
    set_closing(&w, true).await;
    clock.advance(Duration::days(1));
    assert_eq!(sweep(&w).await, Closed::default());
    w.say("c-1", "Hello again").await;
    assert!(w.session("c-1").await.idle.is_some());
    // when it stops before that session is due, the sweep takes it off the list and closes nothing
    set_closing(&w, false).await;
    clock.advance(Duration::minutes(31));
    assert_eq!(sweep(&w).await, Closed { kept: 1, ..Closed::default() });
    let s = w.session("c-1").await;
    assert_eq!((s.status, s.idle), (SessionStatus::Active, None));
    assert_eq!(sweep(&w).await, Closed::default(), "listed no more");
    assert!(w.events().await.iter().all(|e| e.detail_type != "session.ended"));
}

/// The port calls of one close, counted in a world where nothing fails: where the close's commit
/// is among them.
async fn close_commit_call() -> u64 {
    let faults = Faults::default();
    let (mut w, clock) = world(true, faults.clone()).await;
    w.say("c-1", "Hello").await;
    clock.advance(Duration::minutes(30));
    let before = faults.sites().len();
    assert_eq!(sweep(&w).await, closed(1));
    let sites = faults.sites();
    let at = sites[before..].iter().position(|s| *s == "sessions.commit_turn").expect("the close commits");
    u64::try_from(before + at).unwrap()
}

#[tokio::test]
async fn a_close_that_fails_or_times_out_is_made_by_the_next_sweep_once() {
    let at = close_commit_call().await;
    for kind in [Kind::Error, Kind::Timeout] {
        let (mut w, clock) = world(true, Faults::new(Some(Plan { at, kind }))).await;
        w.say("c-1", "Hello").await;
        clock.advance(Duration::minutes(30));
        // when the close's commit fails (or commits and its answer is lost)
        assert_eq!(sweep(&w).await, Closed { failed: 1, ..Closed::default() }, "{kind:?}");
        // then the next sweep closes it, or finds it closed, and it is closed once
        let next = sweep(&w).await;
        let s = w.session("c-1").await;
        assert_eq!(s.status, SessionStatus::Abandoned, "{kind:?}");
        match kind {
            Kind::Error => assert_eq!(next, closed(1)),
            _ => assert_eq!(next, Closed::default(), "the timed-out commit held; nothing listed"),
        }
        let page = w.embedded.store.list_executions(&w.tenant, s.session_id, None, 10).await.unwrap();
        assert_eq!(page.items.iter().filter(|r| r.status == ExecutionStatus::Abandoned).count(), 1, "{kind:?}");
        let rows = w.embedded.store.insights(&w.tenant, hour_of(s.started_at), hour_of(clock.now())).await.unwrap();
        assert_eq!(added(&rows).counts.abandoned, 1, "{kind:?}");
        let ended = w.events().await.into_iter().filter(|e| e.detail_type == "session.ended").count();
        assert_eq!(ended, 1, "{kind:?}");
    }
}
