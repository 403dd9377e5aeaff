//! Schedule triggers on the embedded profile: a slot runs once however many processes tick over
//! one data directory, and once after a restart across it; a slot found late runs once
//! (`run_once`) or not at all (`skip`); the input reaches the agent on the schedule's
//! conversation (or one of its own per run); a bad schedule is refused with its pointer. And
//! time conditions: routing by a tenant's local business hours, across a change of offset.

use std::sync::Arc;

use serde_json::json;
use switchboard_domain::{ExecutionStatus, TenantId, Trigger};
use switchboard_embedded::{Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::intake::Fired;
use switchboard_engine::{ConfigRecord, ConfigService, ConfigWriteError, ConversationLog, ExecutionLog};
use switchboard_testkit::ManualClock;

use crate::common::{World, record};

const AGENT: &str = "01JD0000SCHED0AGENT0000001";
const TRIGGER: &str = "01JD0000SCHED0TR1GGER00001";

fn bundle() -> String {
    json!({
        "tenantId": "t-1", "name": "Test tenant",
        "agents": [{ "agentId": AGENT, "name": "Digest", "systemPrompt": "You post the digest.",
                     "model": "test-model", "tools": ["send_message"], "maxIterations": 2 }]
    })
    .to_string()
}

fn model() -> Arc<ScriptedModel> {
    let script = json!({ "rules": [{ "then": { "text": "Digest done for: {{userText}}" } }] });
    Arc::new(ScriptedModel::from_json(&script.to_string()).unwrap())
}

/// The schedule trigger of the tests, with `schedule` laid over its defaults.
fn trigger(tenant: &TenantId, schedule: serde_json::Value, clock: &ManualClock) -> ConfigRecord {
    use switchboard_engine::Clock as _;
    let now = clock.now();
    let t: Trigger = serde_json::from_value(json!({
        "tenantId": tenant, "triggerId": TRIGGER, "name": "digest", "agentId": AGENT,
        "eventType": "schedule", "schedule": schedule, "createdAt": now, "updatedAt": now, "version": 1
    }))
    .unwrap();
    ConfigRecord::Trigger(t)
}

fn service(e: &Embedded, clock: &Arc<ManualClock>) -> ConfigService {
    let store = Arc::new(e.store.clone());
    ConfigService::new(store.clone(), store).with_clock(clock.clone())
}

/// Opens another process's handle on the same data directory.
fn another(w: &World, clock: &Arc<ManualClock>) -> Embedded {
    Embedded::open(w.dir.path(), model(), clock.clone(), EmbeddedOptions::default()).unwrap()
}

fn queued(f: Fired) -> usize {
    assert_eq!(f.failed, 0, "{f:?}");
    f.queued
}

#[tokio::test]
async fn a_slot_runs_once_with_two_processes_ticking_and_once_after_a_restart_across_it() {
    // 2026-11-23T07:00Z; 09:00 in Paris is 08:00Z in November
    let clock = ManualClock::new();
    let w = World::open(model(), clock.clone(), EmbeddedOptions::default(), &[&bundle()]).await;
    let schedule = json!({ "expression": "0 9 * * *", "timeZone": "Europe/Paris",
                           "conversationId": "digest", "input": "post the digest" });
    service(&w.embedded, &clock).create(&trigger(&w.tenant, schedule, &clock)).await.unwrap();
    let other = another(&w, &clock);
    // before the slot, neither process fires anything
    clock.advance(chrono::Duration::minutes(59));
    assert_eq!(queued(w.embedded.fire_schedules().await.unwrap()), 0);
    assert_eq!(queued(other.fire_schedules().await.unwrap()), 0);
    // at the slot both tick, and one of them runs it
    clock.advance(chrono::Duration::seconds(70));
    let (a, b) = tokio::join!(w.embedded.fire_schedules(), other.fire_schedules());
    assert_eq!(queued(a.unwrap()) + queued(b.unwrap()), 1);
    assert_eq!(queued(w.embedded.fire_schedules().await.unwrap()) + queued(other.fire_schedules().await.unwrap()), 0);
    let outcomes = w.drain(&w.embedded.executor).await;
    assert_eq!(outcomes.len(), 1);
    let first = record(&outcomes[0]);
    assert_eq!(first.status, ExecutionStatus::Success);
    assert_eq!(first.source_id, format!("schedule-{TRIGGER}-20261123T0800Z"));
    assert_eq!(first.ran_with.as_ref().and_then(|r| r.trigger), Some(1));
    assert_eq!(w.replies("digest").await, ["Digest done for: post the digest"]);
    // the schedule's input is the agent's to read, not a customer's message in the log
    let log = w.embedded.store.messages(&w.tenant, "digest", 10).await.unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    // a restart across the next slot: both processes go, a new one starts two minutes after it
    drop(other);
    w.embedded.shutdown().await;
    clock.advance(chrono::Duration::days(1) + chrono::Duration::minutes(2));
    let restarted = another(&w, &clock);
    assert_eq!(queued(restarted.fire_schedules().await.unwrap()), 1);
    assert_eq!(queued(restarted.fire_schedules().await.unwrap()), 0);
    // down for three days: the missed slots run once, then the schedule follows the clock
    clock.advance(chrono::Duration::days(3));
    assert_eq!(queued(restarted.fire_schedules().await.unwrap()), 1);
    assert_eq!(queued(restarted.fire_schedules().await.unwrap()), 0);
    let mut runs = vec![];
    while let Some(d) = restarted.queue.receive().await.unwrap() {
        let item: switchboard_engine::WorkItem = serde_json::from_str(&d.body).unwrap();
        restarted.executor.execute(&item).await.unwrap();
        assert!(restarted.queue.ack(&d.receipt).await.unwrap());
        runs.push(item.source_id);
    }
    assert_eq!(runs, [format!("schedule-{TRIGGER}-20261124T0800Z"), format!("schedule-{TRIGGER}-20261125T0800Z")]);
    for day in ["23", "24", "25"] {
        let source = format!("schedule-{TRIGGER}-202611{day}T0800Z");
        let done = restarted.store.execution_for_source(&w.tenant, &source).await.unwrap();
        assert_eq!(done.map(|r| r.status), Some(ExecutionStatus::Success), "{source}");
    }
    assert_eq!(w.replies("digest").await.len(), 3, "one reply per run");
}

#[tokio::test]
async fn a_late_slot_is_skipped_when_the_schedule_says_so_and_each_run_can_have_its_own_conversation() {
    let clock = ManualClock::new();
    let w = World::open(model(), clock.clone(), EmbeddedOptions::default(), &[&bundle()]).await;
    let schedule = json!({ "expression": "rate(1 hour)", "input": "hourly check", "missed": "skip" });
    service(&w.embedded, &clock).create(&trigger(&w.tenant, schedule, &clock)).await.unwrap();
    // found ten minutes late (the grace is five): skipped, and the next slot is on time
    clock.advance(chrono::Duration::minutes(70));
    let fired = w.embedded.fire_schedules().await.unwrap();
    assert_eq!((fired.queued, fired.skipped), (0, 1));
    clock.advance(chrono::Duration::minutes(51));
    assert_eq!(queued(w.embedded.fire_schedules().await.unwrap()), 1);
    let outcomes = w.drain(&w.embedded.executor).await;
    let run = record(&outcomes[0]);
    // no conversationId: the run's own
    let conversation = format!("schedule-{TRIGGER}-20261123T0900Z");
    assert_eq!(w.replies(&conversation).await, ["Digest done for: hourly check"]);
    assert_eq!(run.input["text"], "hourly check");
    assert_eq!(run.input["detail"]["schedule"]["expression"], "rate(1 hour)");
}

#[tokio::test]
async fn a_bad_schedule_is_refused_with_its_pointer_and_an_inactive_trigger_does_not_fire() {
    let clock = ManualClock::new();
    let w = World::open(model(), clock.clone(), EmbeddedOptions::default(), &[&bundle()]).await;
    let config = service(&w.embedded, &clock);
    let refused = |e: ConfigWriteError| match e {
        ConfigWriteError::Invalid(v) => v.0.into_iter().map(|f| (f.pointer, f.detail)).collect::<Vec<_>>(),
        other => panic!("not a validation error: {other:?}"),
    };
    let bad = json!({ "expression": "0 25 * * *", "timeZone": "Mars/Olympus", "input": "x" });
    let faults = refused(config.create(&trigger(&w.tenant, bad, &clock)).await.unwrap_err());
    assert_eq!(
        faults,
        [
            ("/schedule/expression".to_owned(), "hour field: 25 is out of range 0-23".to_owned()),
            ("/schedule/timeZone".to_owned(), "unknown time zone \"Mars/Olympus\"".to_owned()),
        ]
    );
    let ConfigRecord::Trigger(mut t) =
        trigger(&w.tenant, json!({ "expression": "rate(5 minutes)", "input": "x" }), &clock)
    else {
        unreachable!()
    };
    t.schedule = None;
    let faults = refused(config.create(&ConfigRecord::Trigger(t.clone())).await.unwrap_err());
    assert_eq!(faults[0].0, "/schedule");
    t.event_type = switchboard_domain::EventType::Webhook;
    assert_eq!(refused(config.create(&ConfigRecord::Trigger(t)).await.unwrap_err())[0].0, "/webhook");
    // written inactive, it keeps no slot
    let ConfigRecord::Trigger(mut t) =
        trigger(&w.tenant, json!({ "expression": "rate(5 minutes)", "input": "x" }), &clock)
    else {
        unreachable!()
    };
    t.status = switchboard_domain::TriggerStatus::Inactive;
    config.create(&ConfigRecord::Trigger(t.clone())).await.unwrap();
    clock.advance(chrono::Duration::minutes(6));
    assert_eq!(w.embedded.fire_schedules().await.unwrap(), Fired::default());
    // made active, it fires from the next slot on; deleted, it fires no more
    t.status = switchboard_domain::TriggerStatus::Active;
    t.version = 2;
    config.replace(&ConfigRecord::Trigger(t), 1).await.unwrap();
    clock.advance(chrono::Duration::minutes(5));
    assert_eq!(queued(w.embedded.fire_schedules().await.unwrap()), 1);
    config.delete(&w.tenant, switchboard_engine::ConfigKind::Trigger, TRIGGER, None).await.unwrap();
    clock.advance(chrono::Duration::minutes(5));
    assert_eq!(w.embedded.fire_schedules().await.unwrap(), Fired::default());
}

/// Two agents: one for business hours in New York, one for the rest of the time.
fn hours_bundle() -> String {
    json!({
        "tenantId": "t-1", "name": "Test tenant",
        "agents": [
            { "agentId": AGENT, "name": "Day desk", "systemPrompt": "You answer by day.", "model": "test-model",
              "tools": ["send_message"], "maxIterations": 2 },
            { "agentId": "01JD0000N1GHT0AGENT0000001", "name": "Night desk", "systemPrompt": "You answer by night.",
              "model": "test-model", "tools": ["send_message"], "maxIterations": 2 }
        ],
        "triggers": [
            { "triggerId": "01JD0000N1GHT0TR1GGER00001", "name": "after hours", "agentId": "01JD0000N1GHT0AGENT0000001",
              "eventType": "message.new", "priority": 1,
              "conditions": { "time": { "timeZone": "America/New_York", "weekdays": ["MON", "TUE", "WED", "THU", "FRI"],
                                        "from": "09:00", "to": "17:00", "outside": true } } },
            { "triggerId": TRIGGER, "name": "by day", "agentId": AGENT, "eventType": "message.new", "priority": 2 }
        ]
    })
    .to_string()
}

#[tokio::test]
async fn a_time_condition_routes_by_the_tenants_local_hours_across_a_change_to_summer_time() {
    // 2026-11-23T07:00Z, a Monday: 02:00 in New York
    let clock = ManualClock::new();
    let mut w = World::open(model(), clock.clone(), EmbeddedOptions::default(), &[&hours_bundle()]).await;
    let answered_by = |outcomes: &[switchboard_engine::ExecOutcome]| record(&outcomes[0]).agent_id.to_string();
    let (_, night) = w.say("c-1", "hello at two in the morning").await;
    assert_eq!(answered_by(&night), "01JD0000N1GHT0AGENT0000001");
    // 14:30Z is 09:30 in New York in November: business hours
    clock.advance(chrono::Duration::minutes(450));
    let (_, day) = w.say("c-2", "hello at half past nine").await;
    assert_eq!(answered_by(&day), AGENT);
    // 13:30Z is 08:30 on Friday 2027-03-12 (before the change on the 14th), 09:30 on Monday the 15th
    let until = |at: &str| chrono::DateTime::parse_from_rfc3339(at).unwrap().with_timezone(&chrono::Utc);
    use switchboard_engine::Clock as _;
    clock.advance(until("2027-03-12T13:30:00Z") - clock.now());
    let (_, before) = w.say("c-3", "hello before the change").await;
    assert_eq!(answered_by(&before), "01JD0000N1GHT0AGENT0000001", "08:30 EST is before hours");
    clock.advance(until("2027-03-15T13:30:00Z") - clock.now());
    let (_, after) = w.say("c-4", "hello after the change").await;
    assert_eq!(answered_by(&after), AGENT, "09:30 EDT is within hours");
}
