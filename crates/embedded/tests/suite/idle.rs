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
use switchboard_engine::{Clock, ConfigAdmin, ConfigStore, ExecOutcome, ExecutionLog, IdleSweep, WorkItem};
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

/// One sweep, and the closes it queued run (with what the conversations queued before them).
async fn sweep(w: &common::World) -> (IdleSweep, Vec<ExecOutcome>) {
    let swept = w.embedded.close_idle_sessions().await.unwrap();
    (swept, w.drain(&w.embedded.executor).await)
}

/// The rows added up.
fn added(rows: &[InsightRow]) -> InsightRow {
    let mut total = InsightRow::default();
    for row in rows {
        total.add(row);
    }
    total
}

fn queued(n: usize) -> IdleSweep {
    IdleSweep { queued: n, ..IdleSweep::default() }
}

/// What the sweep queued and what running it recorded: the closes' records.
fn closes(outcomes: &[ExecOutcome]) -> Vec<ExecutionStatus> {
    outcomes.iter().filter_map(|o| if let ExecOutcome::Recorded(r) = o { Some(r.status) } else { None }).collect()
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
    assert_eq!(sweep(&w).await.0, IdleSweep::default());
    w.say("c-1", "Still there?").await;
    clock.advance(Duration::minutes(29));
    assert_eq!(sweep(&w).await.0, IdleSweep::default(), "the second message moved the time on");
    // when they then go quiet for the whole idle time
    clock.advance(Duration::minutes(1));
    let closed_at = clock.now();
    let (swept, ran) = sweep(&w).await;
    assert_eq!((swept, closes(&ran)), (queued(1), vec![ExecutionStatus::Abandoned]));
    // then the session is abandoned, with a record of the close that ran nothing
    let s = w.session("c-1").await;
    assert_eq!((s.session_id, s.status, s.ended_at), (first.session_id, SessionStatus::Abandoned, Some(closed_at)));
    let page = w.embedded.store.list_executions(&w.tenant, s.session_id, None, 10).await.unwrap();
    let close = page.items.last().unwrap();
    assert_eq!(close.status, ExecutionStatus::Abandoned);
    assert_eq!(close.source_id, format!("idle-{}-{}", s.session_id, s.version - 1));
    assert_eq!(close.trigger_id.map(|t| t.to_string()).as_deref(), Some(TRIGGER));
    assert!(close.actions.is_empty() && close.model_calls.is_empty());
    // and session.ended says it closed idle
    let events = w.events().await;
    let ended: Vec<_> = events.iter().filter(|e| e.detail_type == "session.ended").collect();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].detail["endedBy"], "idle");
    assert_eq!(ended[0].detail["sessionId"], s.session_id.to_string());
    assert!(ended[0].detail["summary"].is_null());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contracts/events/session.ended.schema.json");
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let recorded = serde_json::to_value(ended[0]).unwrap();
    assert_eq!(switchboard_domain::schema::validate(&schema, &recorded), Ok(()), "{recorded}");
    // and a second sweep finds nothing to close
    assert_eq!(sweep(&w).await, (IdleSweep::default(), vec![]));
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
async fn a_message_queued_before_the_close_is_answered_first_and_keeps_the_session_open() {
    let (mut w, clock) = world(true, Faults::default()).await;
    w.say("c-1", "Hello").await;
    clock.advance(Duration::minutes(30));
    // given the customer's message is queued, not yet run, when the session's time comes
    let event = w.event("c-1", "Sorry, I was away");
    w.embedded.ingest(&event).await.unwrap();
    // when the sweep queues the close behind it and the conversation's items run in order
    let (swept, ran) = sweep(&w).await;
    assert_eq!(swept, queued(1));
    // then the message is answered, and the close finds the session no longer idle
    assert_eq!(closes(&ran), vec![ExecutionStatus::Success]);
    assert!(matches!(&ran[1], ExecOutcome::Dropped { reason } if reason.contains("no longer idle")), "{ran:?}");
    let s = w.session("c-1").await;
    assert_eq!((s.status, s.turn_count), (SessionStatus::Active, 2));
    assert_eq!(s.idle.map(|i| i.at), Some(clock.now() + Duration::minutes(30)));
    assert!(w.events().await.iter().all(|e| e.detail_type != "session.ended"));
    // and the next idle time closes it, as a new item (its source names the version)
    clock.advance(Duration::minutes(30));
    let (swept, ran) = sweep(&w).await;
    assert_eq!((swept, closes(&ran)), (queued(1), vec![ExecutionStatus::Abandoned]));
}

#[tokio::test]
async fn a_tenant_that_keeps_idle_sessions_open_has_none_closed_and_one_that_stops_closing_takes_them_off() {
    let (mut w, clock) = world(false, Faults::default()).await;
    w.say("c-1", "Hello").await;
    assert_eq!(w.session("c-1").await.idle, None);
    clock.advance(Duration::days(2));
    assert_eq!(sweep(&w).await, (IdleSweep::default(), vec![]));
    assert_eq!(w.session("c-1").await.status, SessionStatus::Active);
    // given the tenant starts closing them: a resting session is due from its next turn on
    set_closing(&w, true).await;
    clock.advance(Duration::days(1));
    assert_eq!(sweep(&w).await, (IdleSweep::default(), vec![]));
    w.say("c-1", "Hello again").await;
    assert!(w.session("c-1").await.idle.is_some());
    // when it stops before that session is due, the sweep takes it off the list and closes nothing
    set_closing(&w, false).await;
    clock.advance(Duration::minutes(31));
    assert_eq!(sweep(&w).await, (IdleSweep { kept: 1, ..IdleSweep::default() }, vec![]));
    let s = w.session("c-1").await;
    assert_eq!((s.status, s.idle), (SessionStatus::Active, None));
    assert_eq!(sweep(&w).await, (IdleSweep::default(), vec![]), "listed no more");
    assert!(w.events().await.iter().all(|e| e.detail_type != "session.ended"));
}

/// The port call (counted from 0, in a world where nothing fails) at which the sweep queues the
/// close, and the one at which the close commits.
async fn close_calls() -> (u64, u64) {
    let faults = Faults::default();
    let (mut w, clock) = world(true, faults.clone()).await;
    w.say("c-1", "Hello").await;
    clock.advance(Duration::minutes(30));
    let before = faults.sites().len();
    assert_eq!(sweep(&w).await.0, queued(1));
    let sites = faults.sites();
    let at = |site: &str| {
        let i = sites[before..].iter().position(|s| *s == site).unwrap_or_else(|| panic!("{site}: {sites:?}"));
        u64::try_from(before + i).unwrap()
    };
    (at("queue.enqueue"), at("sessions.commit_turn"))
}

#[tokio::test]
async fn a_close_that_could_not_be_queued_or_committed_is_made_later_once() {
    let (enqueue, commit) = close_calls().await;
    // the sweep could not queue it: counted, and the next sweep does
    let (mut w, clock) = world(true, Faults::new(Some(Plan { at: enqueue, kind: Kind::Error }))).await;
    w.say("c-1", "Hello").await;
    clock.advance(Duration::minutes(30));
    assert_eq!(sweep(&w).await, (IdleSweep { failed: 1, ..IdleSweep::default() }, vec![]));
    assert_eq!(w.session("c-1").await.status, SessionStatus::Active);
    let (swept, ran) = sweep(&w).await;
    assert_eq!((swept, closes(&ran)), (queued(1), vec![ExecutionStatus::Abandoned]));
    // the close's commit failed (or committed and its answer was lost): the item runs again
    for kind in [Kind::Error, Kind::Timeout] {
        let (mut w, clock) = world(true, Faults::new(Some(Plan { at: commit, kind }))).await;
        w.say("c-1", "Hello").await;
        clock.advance(Duration::minutes(30));
        assert_eq!(w.embedded.close_idle_sessions().await.unwrap(), queued(1), "{kind:?}");
        let d = w.embedded.queue.receive().await.unwrap().unwrap();
        let item: WorkItem = serde_json::from_str(&d.body).unwrap();
        assert!(w.embedded.executor.execute(&item).await.is_err(), "{kind:?}");
        // as the queue redelivers it
        let again = w.embedded.executor.execute(&item).await.unwrap();
        assert!(w.embedded.queue.ack(&d.receipt).await.unwrap());
        let s = w.session("c-1").await;
        assert_eq!(s.status, SessionStatus::Abandoned, "{kind:?}");
        match kind {
            Kind::Error => assert!(matches!(again, ExecOutcome::Recorded(_)), "{again:?}"),
            _ => assert!(matches!(again, ExecOutcome::AlreadyRecorded(_)), "the timed-out commit held: {again:?}"),
        }
        let page = w.embedded.store.list_executions(&w.tenant, s.session_id, None, 10).await.unwrap();
        assert_eq!(page.items.iter().filter(|r| r.status == ExecutionStatus::Abandoned).count(), 1, "{kind:?}");
        let rows = w.embedded.store.insights(&w.tenant, hour_of(s.started_at), hour_of(clock.now())).await.unwrap();
        assert_eq!(added(&rows).counts.abandoned, 1, "{kind:?}");
        let ended = w.events().await.into_iter().filter(|e| e.detail_type == "session.ended").count();
        assert_eq!(ended, 1, "{kind:?}");
        assert_eq!(w.embedded.close_idle_sessions().await.unwrap(), IdleSweep::default(), "{kind:?}");
    }
}
