//! Bursts on the embedded profile: an agent that coalesces them answers messages that come
//! within its window in one turn that sees them all; without the setting each is its own turn.
//! The queue is worked by hand as the workers do it (a waiting item released with its delay),
//! on a manual clock that moves only when the test says.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_domain::{ExecutionStatus, message::ContentBlock};
use switchboard_embedded::EmbeddedOptions;
use switchboard_engine::intake::source_id;
use switchboard_engine::{ConversationLog, ExecOutcome, ExecutionLog, WorkItem};
use switchboard_testkit::ManualClock;

use crate::common::{World, capturing, record};

const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";

fn bundle(bursts: Option<Value>) -> String {
    let mut agent = json!({ "agentId": AGENT, "name": "Front", "systemPrompt": "Help.", "model": "test-model",
                            "tools": ["send_message"] });
    if let Some(policy) = bursts {
        agent["bursts"] = policy;
    }
    json!({
        "tenantId": "t-1", "name": "Bursts", "agents": [agent],
        "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": AGENT,
                       "eventType": "message.new", "priority": 10, "conditions": {} }]
    })
    .to_string()
}

/// A world on a manual clock whose agent follows `bursts`; the model echoes what it was told.
async fn world(bursts: Option<Value>) -> (World, Arc<ManualClock>, Arc<crate::common::Capturing>) {
    let clock = ManualClock::new();
    let model = capturing(json!({ "rules": [{ "when": {}, "then": { "text": "You said: {{userText}}" } }] }));
    let w = World::open(model.clone(), clock.clone(), EmbeddedOptions::default(), &[&bundle(bursts)]).await;
    (w, clock, model)
}

/// Works every deliverable item as a worker does: acked when done, released with its delay when
/// it waits (and the clock moved on by that delay). What became of each run, in order, and the
/// waits.
async fn work(w: &World, clock: &ManualClock) -> (Vec<ExecOutcome>, Vec<Duration>) {
    let (mut outcomes, mut waits) = (vec![], vec![]);
    while let Some(d) = w.embedded.queue.receive().await.unwrap() {
        let item: WorkItem = serde_json::from_str(&d.body).unwrap();
        match w.embedded.executor.execute(&item).await {
            Ok(outcome) => {
                outcomes.push(outcome);
                assert!(w.embedded.queue.ack(&d.receipt).await.unwrap());
            }
            Err(e) if e.is_deferral() => {
                let wait = e.retry_after.unwrap();
                assert!(w.embedded.queue.release(&d.receipt, wait).await.unwrap());
                clock.advance_std(wait);
                waits.push(wait);
            }
            Err(e) => panic!("{e}"),
        }
    }
    (outcomes, waits)
}

/// How many messages each turn that ran answered, in order (a found record is no turn).
fn turn_sizes(ran: &[ExecOutcome]) -> Vec<usize> {
    ran.iter()
        .filter_map(|r| match r {
            ExecOutcome::Recorded(r) => Some(r.coalesced.len() + 1),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_burst_within_the_window_is_one_turn_and_one_reply_that_sees_every_message_in_order() {
    let (mut w, clock, model) = world(Some(json!({ "mode": "coalesce", "windowSeconds": 2 }))).await;
    // given three messages 900 ms apart, the first tried by a worker as it comes
    let first = w.event("c-1", "hi");
    w.embedded.ingest(&first).await.unwrap();
    let (ran, waits) = {
        // the first delivery waits for the window; nothing else is deliverable meanwhile
        let d = w.embedded.queue.receive().await.unwrap().unwrap();
        let item: WorkItem = serde_json::from_str(&d.body).unwrap();
        let waited = w.embedded.executor.execute(&item).await.unwrap_err();
        assert!(waited.is_deferral(), "{waited:?}");
        assert_eq!(waited.retry_after, Some(Duration::from_secs(2)));
        assert!(w.embedded.queue.release(&d.receipt, Duration::from_secs(2)).await.unwrap());
        clock.advance(chrono::Duration::milliseconds(900));
        let second = w.event("c-1", "I need help");
        w.embedded.ingest(&second).await.unwrap();
        clock.advance(chrono::Duration::milliseconds(900));
        let third = w.event("c-1", "with order 1234");
        w.embedded.ingest(&third).await.unwrap();
        assert!(w.embedded.queue.receive().await.unwrap().is_none(), "the group waits behind its first message");
        clock.advance(chrono::Duration::milliseconds(200));
        let worked = work(&w, &clock).await;
        (worked.0, worked.1)
    };
    // then the burst waited until 2 s after its newest message, and one turn answered it
    assert_eq!(waits, [Duration::from_millis(1_800)], "due at 1.8 s + 2 s = 3.8 s, looked at again at 2 s");
    // (the test double echoes the newest text block of the customer's turn)
    assert_eq!(w.replies("c-1").await, ["You said: with order 1234"], "one reply");
    let calls = model.seen.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one model call");
    let last = calls[0].messages.last().unwrap();
    let texts: Vec<_> = last
        .content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => text.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["hi", "I need help", "with order 1234"], "the messages in order, each as written");
    // the turn is the third message's; the first two are recorded as answered in it, and the
    // queue's later deliveries of them found them recorded
    let turn = record(&ran[0]).clone();
    assert_eq!((turn.status, turn.source_id.as_str()), (ExecutionStatus::Success, "message-c-1:m-3"));
    let named: Vec<_> = turn.coalesced.iter().map(|c| c.message_id.as_str()).collect();
    assert_eq!(named, ["m-1", "m-2"]);
    assert!(matches!(ran[1..], [ExecOutcome::AlreadyRecorded(_), ExecOutcome::AlreadyRecorded(_)]), "{ran:?}");
    let own = w.embedded.store.execution_for_source(&w.tenant, &source_id(&first)).await.unwrap().unwrap();
    assert_eq!((own.status, own.coalesced_into), (ExecutionStatus::Coalesced, Some(turn.execution_id)));
    assert_eq!((own.input["text"].as_str(), own.session_id), (Some("hi"), turn.session_id));
    assert!(own.actions.is_empty() && own.model_calls.is_empty());
    // the session's transcript holds the three as one turn of the customer, then the answer
    let session = w.session("c-1").await;
    assert_eq!(session.turn_count, 1);
    assert_eq!(session.transcript.len(), 2);
    assert_eq!(session.transcript[0].content.len(), 3);
    // and each message is in the conversation's log once
    let log = w.embedded.store.messages(&w.tenant, "c-1", 100).await.unwrap();
    let inbound: Vec<_> = log.iter().filter(|m| m.sender == switchboard_engine::Sender::Customer).collect();
    assert_eq!(inbound.len(), 3);
}

#[tokio::test]
async fn without_the_setting_each_message_of_a_burst_is_its_own_turn() {
    let (mut w, clock, model) = world(None).await;
    for text in ["hi", "I need help", "with order 1234"] {
        let e = w.event("c-1", text);
        w.embedded.ingest(&e).await.unwrap();
        clock.advance(chrono::Duration::milliseconds(900));
    }
    let (ran, waits) = work(&w, &clock).await;
    assert!(waits.is_empty(), "nothing waits");
    assert_eq!(ran.len(), 3);
    assert!(ran.iter().all(|r| record(r).status == ExecutionStatus::Success && record(r).coalesced.is_empty()));
    assert_eq!(w.replies("c-1").await, ["You said: hi", "You said: I need help", "You said: with order 1234"]);
    assert_eq!(model.seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_message_after_the_burst_was_due_opens_the_next_and_a_typist_is_answered_two_windows_in() {
    let (mut w, clock, _) = world(Some(json!({ "mode": "coalesce", "windowSeconds": 2, "maxMessages": 3 }))).await;
    // given a customer who sends a message every 1.5 s, eight of them, before anything is worked
    for n in 0..8 {
        let e = w.event("c-1", &format!("part {n}"));
        w.embedded.ingest(&e).await.unwrap();
        clock.advance(chrono::Duration::milliseconds(1_500));
    }
    // when the queue is worked a while later: every burst is due already
    clock.advance(chrono::Duration::seconds(10));
    let (ran, waits) = work(&w, &clock).await;
    assert!(waits.is_empty(), "{waits:?}");
    // then the bursts are of three (maxMessages), three, and two
    assert_eq!(turn_sizes(&ran), [3, 3, 2]);
    assert_eq!(w.replies("c-1").await.len(), 3);
}

#[tokio::test]
async fn a_burst_is_cut_two_windows_after_its_first_message_and_a_late_message_opens_the_next() {
    let (mut w, clock, _) = world(Some(json!({ "mode": "coalesce", "windowSeconds": 2 }))).await;
    // given messages at 0, 1.5, 3 and 4.5 s, each within the window of the one before, and 10 s
    let mut at = 0;
    for next in [0, 1_500, 3_000, 4_500, 10_000] {
        clock.advance(chrono::Duration::milliseconds(next - at));
        at = next;
        let e = w.event("c-1", &format!("at {next}"));
        w.embedded.ingest(&e).await.unwrap();
    }
    clock.advance(chrono::Duration::seconds(2));
    let (ran, waits) = work(&w, &clock).await;
    assert!(waits.is_empty(), "{waits:?}");
    // then the first burst was due at 4 s (two windows after it opened): 4.5 s opens the next,
    // due at 6.5 s, before 10 s came
    assert_eq!(turn_sizes(&ran), [3, 1, 1]);
}
