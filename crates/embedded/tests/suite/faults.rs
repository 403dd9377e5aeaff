//! A fault at any port call, on the embedded profile: the SQLite store and queue, the local
//! conversation log and event log, behind `switchboard_testkit::faults` (an error, a lost answer
//! after the call took effect, or a crash right after it, which the harness answers by closing
//! the profile and opening it again over the same data directory, as a restarted `serve` would).
//! Producers re-send an event whose intake failed, the queue delivers an item again that was not
//! acknowledged, and the workers' handler gives an item up at its last delivery — the profile's
//! own, not a copy. Then, whatever failed:
//!
//! - no message is lost: each has its execution record, and an inbound log entry, once;
//! - no reply is sent twice, an agent's or an operator's, and every reply sent is one a record
//!   holds (and the other way);
//! - every event in the log reports a change that committed (its session, execution, status);
//! - every message was answered (by the agent, or as the tenant's `onLimit` says: the mixes run
//!   into a limit of 4 messages a minute), or a person had or has its conversation.
//!
//! The mixes have operators too, replying and handing conversations back, as a client of the
//! API would: again with the same idempotency key after a failure.
//!
//! `every_call_…` fails each call of one fixed mix in each of the three ways; `random_…` draws
//! mixes and failure points from seeds (`SWITCHBOARD_FAULT_CASES` cases, 150 by default;
//! `SWITCHBOARD_FAULT_SEED` runs one), printing the seed of a failing case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchboard_domain::{ExecutionRecord, ExecutionStatus, InboundEvent, OutboundEvent, TenantId};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, QueueConfig};
use switchboard_engine::intake::source_id;
use switchboard_engine::{ConversationLog, EventLog, ExecutionLog, HandoffTo, Sender, SessionFilter, SessionStore};
use switchboard_testkit::ManualClock;
use switchboard_testkit::faults::{self, Clerk, Faults, Kind, Move, OrderDesk, Plan, Replies, Said};

const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";
const ORDER_TOOL: &str = "01JD0000H00KS000000000000A";
const VISIBILITY: Duration = Duration::from_secs(30);

/// The tenant: one agent, whose turns coalesce bursts when `bursts` says so.
fn bundle(bursts: Option<serde_json::Value>) -> String {
    let mut bundle = json!({
        "tenantId": "t-1", "name": "Faults",
        // Tight enough that a mix's later messages are refused and answered as onLimit says.
        "limits": { "invocationsPerMinute": 4, "onLimit": { "action": "message", "text": "We are busy; one moment." } },
        "agents": [{ "agentId": AGENT, "name": "Front", "systemPrompt": "Help.", "model": "test-model",
                     "tools": ["send_message", "set_context", "handoff_to_human", ORDER_TOOL] }],
        "tools": [faults::order_tool(ORDER_TOOL)],
        "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": AGENT,
                       "eventType": "message.new", "priority": 10, "conditions": {} }]
    });
    if let Some(policy) = bursts {
        bundle["agents"][0]["bursts"] = policy;
    }
    bundle.to_string()
}

/// The profile over one data directory, opened again after each crash.
struct Run {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    desk: Arc<OrderDesk>,
    embedded: Option<Arc<Embedded>>,
    /// The running process's faults: the planned ones until a crash, then none.
    faults: Faults,
    /// The first process's, which the plan was for.
    planned: Faults,
    /// Every process's events handed to the bus, to check against the log, and the ones handed
    /// to it before their change was in the store.
    relayed: Vec<OutboundEvent>,
    early: Vec<String>,
    /// The running profile's event log, as its faults' relay check reads it.
    log: Option<Arc<dyn EventLog>>,
}

impl Run {
    async fn start(plan: Option<Plan>, bursts: Option<serde_json::Value>) -> Self {
        let mut run = Self {
            dir: tempfile::tempdir().unwrap(),
            clock: ManualClock::new(),
            desk: Arc::new(OrderDesk::default()),
            embedded: None,
            faults: Faults::new(plan),
            planned: Faults::new(None),
            relayed: vec![],
            early: vec![],
            log: None,
        };
        run.planned = run.faults.clone();
        run.run_profile();
        // Set-up, not under test: straight to the store.
        Bundle::parse(&bundle(bursts), run.clock.as_ref()).unwrap().install(&run.embedded().store).await.unwrap();
        run
    }

    fn open(&self) -> Embedded {
        let options = EmbeddedOptions {
            webhooks: self.desk.clone(),
            queue: QueueConfig { visibility_timeout: VISIBILITY, max_receives: 3, ..QueueConfig::default() },
            ports: Some(Arc::new(self.faults.clone())),
            ..EmbeddedOptions::default()
        };
        Embedded::open(self.dir.path(), Arc::new(Clerk), self.clock.clone(), options).unwrap()
    }

    /// Opens the profile for the running faults, whose relay check then finds each event among
    /// the logged ones (for as long as the profile runs).
    fn run_profile(&mut self) {
        let embedded = self.open();
        let log: Arc<dyn EventLog> = Arc::new(embedded.store.clone());
        let _ = self.faults.clone().reading(&log);
        self.log = Some(log);
        self.embedded = Some(Arc::new(embedded));
    }

    fn embedded(&self) -> Arc<Embedded> {
        Arc::clone(self.embedded.as_ref().unwrap())
    }

    /// What a crash leaves: the process gone (its database closed as a kill would leave it:
    /// committed or not), and one started again later, past the visibility timeout of whatever
    /// it held, with no fault planned.
    async fn restart(&mut self) {
        let old = self.embedded.take().unwrap();
        self.log = None;
        assert!(old.close(Duration::from_secs(30)).await, "the crashed profile's database did not close");
        self.clock.advance_std(VISIBILITY + Duration::from_secs(1));
        self.relayed.extend(self.faults.relayed());
        self.early.extend(self.faults.published_early());
        self.faults = Faults::new(None);
        self.run_profile();
    }

    /// Takes `event` in as a producer does: sent again (same event id) until it is taken.
    async fn send(&mut self, event: &InboundEvent) {
        for _ in 0..3 {
            let taken = self.embedded().ingest(event).await;
            if self.faults.crashed() {
                self.restart().await;
            } else if taken.is_ok() {
                return;
            }
        }
        panic!("event {} was never taken in", event.id);
    }

    /// Works the queue until nothing is deliverable, as a worker does: ack on success, release
    /// at once on failure; after a crash, nothing (the item comes back after its timeout). An
    /// item that waits (a burst being gathered) is released with its delay, and the clock moves
    /// on by it.
    async fn work(&mut self) {
        loop {
            let embedded = self.embedded();
            let Some(delivery) = embedded.queue.receive().await.unwrap() else { return };
            let handled = embedded.item_handler().handle(&delivery).await;
            if self.faults.crashed() {
                drop(embedded);
                self.restart().await;
                continue;
            }
            match handled {
                Ok(()) => assert!(embedded.queue.ack(&delivery.receipt).await.unwrap()),
                Err(failure) => {
                    let wait = failure.retry_after.unwrap_or_default();
                    assert!(embedded.queue.release(&delivery.receipt, wait).await.unwrap());
                    self.clock.advance_std(wait);
                }
            }
        }
    }

    /// An operator's move in `conversation`, if a person has it, as a client makes it: again
    /// (with the same idempotency key) after a failure, until it is done or refused. The key of
    /// a reply that was made.
    async fn operate(&mut self, conversation: &str, what: Move, n: usize) -> Option<String> {
        let tenant: TenantId = "t-1".parse().unwrap();
        let key = format!("op-{n}");
        for _ in 0..3 {
            let embedded = self.embedded();
            let latest = embedded.store.latest_session(&tenant, conversation).await.unwrap();
            let session = latest.filter(|s| s.is_human_owned())?;
            let done = match what {
                Move::OperatorReplies => {
                    let reply = embedded.operator.reply(&tenant, session.session_id, "Ann", "Ann here.", &key).await;
                    reply.map(|_| Some(key.clone())).map_err(|e| e.to_string())
                }
                _ => {
                    let back = HandoffTo::Agent(AGENT.parse().unwrap());
                    let handed =
                        embedded.operator.hand_off(&tenant, session.session_id, back, "back to you", "ops").await;
                    handed.map(|_| None).map_err(|e| e.to_string())
                }
            };
            drop(embedded);
            if self.faults.crashed() {
                self.restart().await;
            } else if let Ok(made) = done {
                return made;
            }
        }
        panic!("the operator's {what:?} in {conversation} never went through");
    }

    /// Plays every step of `mix`, working the queue where the mix says: the customers' events,
    /// and the keys of the operators' replies.
    async fn play(&mut self, mix: &[Said]) -> (Vec<InboundEvent>, Vec<String>) {
        let (mut events, mut replies) = (vec![], vec![]);
        for (n, said) in mix.iter().enumerate() {
            match said.text() {
                Some(text) => {
                    let event = InboundEvent::parse(&json!({
                        "id": format!("evt-{n}"), "source": "conversations-service", "detail-type": "message.new",
                        "detail": { "tenantId": "t-1", "conversationId": said.conversation, "messageId": format!("m-{n}"),
                                    "channel": {"platform": "webchat"}, "conversation": {"status": "open"},
                                    "message": {"direction": "inbound", "text": text} }
                    }))
                    .unwrap();
                    self.send(&event).await;
                    events.push(event);
                }
                None => replies.extend(self.operate(&said.conversation, said.what, n).await),
            }
            if said.drain {
                self.work().await;
            }
        }
        self.work().await;
        (events, replies)
    }
}

/// What must hold once everything was worked, whatever failed on the way.
async fn check(
    embedded: &Embedded,
    (events, operator_replies): (&[InboundEvent], &[String]),
    relayed: &[OutboundEvent],
    early: &[String],
) -> Result<(), String> {
    if let Some(e) = early.first() {
        return Err(format!("published before its change committed: {e}"));
    }
    let store = &embedded.store;
    let tenant: TenantId = "t-1".parse().unwrap();
    let mut replies = Replies::default();
    let mut by_conversation: HashMap<&str, usize> = HashMap::new();
    for event in events {
        *by_conversation.entry(event.detail.conversation_id.as_str()).or_default() += 1;
        let record = replies.record(store, &tenant, &source_id(event)).await?;
        faults::answered_or_with_person(&record, store).await?;
    }
    for key in operator_replies {
        replies.record(store, &tenant, &format!("reply-{key}")).await?;
    }
    let conversations: HashSet<String> = store
        .list_sessions(&tenant, SessionFilter::default(), None, 100)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.conversation_id)
        .collect();
    for conversation in &conversations {
        by_conversation.entry(conversation.as_str()).or_default();
    }
    for (conversation, sent) in by_conversation {
        let log = store.messages(&tenant, conversation, 1000).await.unwrap();
        let inbound: Vec<_> = log.iter().filter(|m| m.sender == Sender::Customer).map(|m| &m.message_id).collect();
        if inbound.len() != sent || inbound.iter().collect::<HashSet<_>>().len() != sent {
            return Err(format!("{conversation}: {sent} messages sent, inbound log holds {inbound:?}"));
        }
        for reply in log.iter().filter(|m| m.sender != Sender::Customer) {
            replies.sent(&reply.message_id, &reply.text).map_err(|e| format!("{conversation}: {e}"))?;
        }
    }
    replies.all_sent()?;
    let logged = store.events(&tenant, 0, 1000).await.unwrap();
    faults::log_holds(&logged, relayed, store, store, store).await
}

/// Plays `mix` with `plan`; the failure, if any, with what was injected where.
async fn case(mix: &[Said], plan: Option<Plan>) -> Result<u64, String> {
    case_with(mix, plan, None).await.map(|(calls, _)| calls)
}

/// [`case`] for an agent whose turns follow the `bursts` policy; beside the calls, how many
/// messages were answered in the turn of another (`coalesced`, or `interrupted`).
async fn case_with(
    mix: &[Said],
    plan: Option<Plan>,
    bursts: Option<serde_json::Value>,
) -> Result<(u64, usize), String> {
    let mut run = Run::start(plan, bursts).await;
    let played = run.play(mix).await;
    let calls = run.planned.calls();
    let fired = run.planned.fired();
    let embedded = run.embedded();
    let mut relayed = run.relayed.clone();
    relayed.extend(run.faults.relayed());
    let mut early = run.early.clone();
    early.extend(run.faults.published_early());
    let checked = check(&embedded, (&played.0, &played.1), &relayed, &early).await;
    let tenant: TenantId = "t-1".parse().unwrap();
    let mut coalesced = 0;
    for event in &played.0 {
        let record = embedded.store.execution_for_source(&tenant, &source_id(event)).await.unwrap();
        let later = |r: ExecutionRecord| matches!(r.status, ExecutionStatus::Coalesced | ExecutionStatus::Interrupted);
        coalesced += usize::from(record.is_some_and(later));
    }
    drop(embedded);
    run.log = None;
    assert!(run.embedded.take().unwrap().close(Duration::from_secs(30)).await);
    checked.map(|()| (calls, coalesced)).map_err(|e| format!("{plan:?} (fired at {fired:?}): {e}"))
}

fn said(conversation: &str, text: &'static str, drain: bool) -> Said {
    Said { conversation: conversation.into(), what: Move::Says(text), drain }
}

fn operator(conversation: &str, what: Move) -> Said {
    Said { conversation: conversation.into(), what, drain: true }
}

#[tokio::test]
async fn every_call_of_a_conversation_mix_may_fail_and_no_message_is_lost_or_answered_twice() {
    // given a mix of every kind of message over two conversations, one of them handed off
    let mix = [
        said("c-1", faults::TEXTS[0], true),
        said("c-1", faults::TEXTS[1], false),
        said("c-2", faults::TEXTS[2], true),
        said("c-2", faults::TEXTS[3], true),
        said("c-2", faults::TEXTS[0], true),
        operator("c-2", Move::OperatorReplies),
        operator("c-2", Move::HandsBack),
        said("c-2", faults::TEXTS[0], true),
    ];
    let calls = case(&mix, None).await.unwrap();
    assert!(calls > 20, "the mix makes {calls} port calls");
    // when each call in turn fails in each way, then everything holds
    every_call_fails(&mix, calls, None).await;
}

/// Plays `mix` (whose run makes `calls` port calls) once per call and way to fail it there, for
/// an agent following `bursts`: every run must hold.
async fn every_call_fails(mix: &[Said], calls: u64, bursts: Option<serde_json::Value>) {
    let mut failures = vec![];
    for at in 0..calls {
        for kind in Kind::ALL {
            if let Err(e) = case_with(mix, Some(Plan { at, kind }), bursts.clone()).await {
                failures.push(e);
            }
        }
    }
    faults::assert_none_failed(&failures, usize::try_from(calls * 3).unwrap());
}

#[tokio::test]
async fn random_conversations_with_a_fault_at_a_random_call_lose_and_repeat_nothing() {
    let seeds = faults::seeds(150);
    let mut failures = vec![];
    for &seed in &seeds {
        failures.extend(faults::seeded_case(seed, |mix, plan| async move { case(&mix, plan).await }).await);
    }
    faults::assert_none_failed(&failures, seeds.len());
}

/// Three messages of one conversation queued at once, a lone message of another, then one more
/// that the tenant's limit of four a minute refuses: what the burst policies are tried on.
fn mix_of_three() -> [Said; 5] {
    [
        said("c-1", faults::TEXTS[0], false),
        said("c-1", faults::TEXTS[1], false),
        said("c-1", faults::TEXTS[2], true),
        said("c-2", faults::TEXTS[3], false),
        said("c-1", faults::TEXTS[0], true),
    ]
}

/// [`mix_of_three`] for an agent whose `bursts` is `policy`: without a fault, the first two
/// messages are answered in the turn of the third; with each call in turn failing in each way,
/// everything still holds.
async fn every_call_of_the_mix_of_three_fails(policy: serde_json::Value) {
    let mix = mix_of_three();
    let (calls, later) = case_with(&mix, None, Some(policy.clone())).await.unwrap();
    assert!(calls > 20, "the mix makes {calls} port calls");
    assert_eq!(later, 2, "messages answered in the turn of a later one");
    every_call_fails(&mix, calls, Some(policy)).await;
}

#[tokio::test]
async fn every_call_of_a_mix_of_bursts_may_fail_and_no_message_is_lost_or_answered_twice() {
    // an agent that coalesces bursts: the first two are gathered into the third's turn
    every_call_of_the_mix_of_three_fails(json!({ "mode": "coalesce", "windowSeconds": 2 })).await;
}

#[tokio::test]
async fn every_call_of_a_mix_of_interrupted_turns_may_fail_and_no_message_is_lost_or_answered_twice() {
    // an agent whose turns a newer message interrupts: the first two turns stop, the third answers
    every_call_of_the_mix_of_three_fails(json!({ "mode": "interrupt" })).await;
}
