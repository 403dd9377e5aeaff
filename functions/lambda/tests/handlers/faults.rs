//! A fault at any port call, on the AWS profile: DynamoDB and SQS on the emulator, the
//! Conversations Service fake over HTTP, behind `switchboard_testkit::faults` (an error, a lost
//! answer after the call took effect, or a crash right after it). The test is EventBridge (which
//! re-sends an event whose delivery to the router failed, under the same id) and the SQS event
//! source mapping (a failed item visible again at once; a crashed container's item visible again
//! as when its timeout ends); the router and executor are the functions' handlers, with a new
//! container's wiring after a crash. The redrive policy sends an item to the dead-letter queue
//! after 3 receives, and the executor gives an item up at its last one. Then the embedded suite's
//! guarantees hold here too: nothing lost, no reply twice or unrecorded, no event in the outbox
//! (the rows the stream relays) whose change did not commit, every message answered or with a
//! person.
//!
//! Fewer cases than on the embedded profile, as each AWS call crosses HTTP to the emulator: the
//! sweep crashes the process right after each call of one mix and fails each call in one of the
//! other two ways in turn; `SWITCHBOARD_FAULT_CASES` (32 by default) random mixes, and
//! `SWITCHBOARD_FAULT_SEED` runs one.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use switchboard_domain::{OutboundEvent, TenantId};
use switchboard_engine::{
    ConfigRecord, Deps, EventLog, HandoffTo, Operator, PortLayer, SessionStore, WebhookCaller, WorkQueue,
};
use switchboard_testkit::faults::{self, Clerk, Faults, Kind, Move, OrderDesk, Plan, Replies, Said};

use super::*;

const ORDER_TOOL: &str = "01JD0000H00KS000000000000A";

/// Cases run at once (the emulator answers requests in parallel).
const CONCURRENT_CASES: usize = 6;

/// The property's model and order desk in place of the world's, then the faults.
struct Layer {
    faults: Faults,
    desk: Arc<OrderDesk>,
}

impl PortLayer for Layer {
    fn deps(&self, deps: Deps) -> Deps {
        let webhooks: Arc<dyn WebhookCaller> = self.desk.clone();
        self.faults.deps(Deps { model: Arc::new(Clerk), webhooks, ..deps })
    }

    fn queue(&self, queue: Arc<dyn WorkQueue>) -> Arc<dyn WorkQueue> {
        self.faults.queue(queue)
    }
}

struct Run {
    w: World,
    desk: Arc<OrderDesk>,
    wiring: Wiring,
    /// The internal API's operator service, over the same ports as the functions.
    operator: Operator,
    /// The event log the faults' relay check reads.
    log: Arc<dyn EventLog>,
    faults: Faults,
    planned: Faults,
    relayed: Vec<OutboundEvent>,
    early: Vec<String>,
}

impl Run {
    async fn start(plan: Option<Plan>) -> Self {
        let w = world_with(vec![], Options { max_receives: Some(3), ..Options::default() }).await;
        let mut tool = faults::order_tool(ORDER_TOOL);
        tool["tenantId"] = json!("t-1");
        tool["createdAt"] = json!("2026-11-23T00:00:00Z");
        tool["updatedAt"] = json!("2026-11-23T00:00:00Z");
        let tool: switchboard_domain::Tool = serde_json::from_value(tool).unwrap();
        put(&w.wiring, ConfigRecord::Tool(tool)).await;
        let agent: switchboard_domain::Agent = serde_json::from_value(json!({
            "tenantId": "t-1", "agentId": AGENT, "name": "Support", "systemPrompt": "Help.",
            "model": "anthropic.claude-3-haiku-20240307-v1:0",
            "tools": ["send_message", "set_context", "handoff_to_human", ORDER_TOOL],
            "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap();
        put(&w.wiring, ConfigRecord::Agent(agent)).await;
        let all: Trigger = serde_json::from_value(json!({
            "tenantId": "t-1", "triggerId": "01JDQ8ZJ5V3V7Y9K2M4N6P8R1B", "name": "all", "agentId": AGENT,
            "eventType": "message.new", "priority": 1, "status": "active", "conditions": {},
            "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap();
        put(&w.wiring, ConfigRecord::Trigger(all)).await;
        let tenant: TenantId = "t-1".parse().unwrap();
        let mut acme = w.wiring.store.get_tenant(&tenant).await.unwrap().unwrap();
        acme.limits = serde_json::from_value(json!({
            "invocationsPerMinute": 4, "onLimit": { "action": "message", "text": "We are busy; one moment." }
        }))
        .unwrap();
        assert!(w.wiring.store.update_tenant(&acme).await.unwrap());
        let desk = Arc::new(OrderDesk::default());
        let log: Arc<dyn EventLog> = w.wiring.store.clone();
        let faults = Faults::new(plan).reading(&log);
        let layer = Layer { faults: faults.clone(), desk: desk.clone() };
        let (wiring, operator) = (w.wiring.layered(&layer), Operator::new(layer.deps(w.wiring.deps.clone())));
        Self { w, desk, wiring, operator, log, planned: faults.clone(), faults, relayed: vec![], early: vec![] }
    }

    /// A new container (new clients' caches, no fault planned) over the same tables and queue.
    fn restart(&mut self) {
        self.relayed.extend(self.faults.relayed());
        self.early.extend(self.faults.published_early());
        self.faults = Faults::new(None).reading(&self.log);
        let layer = Layer { faults: self.faults.clone(), desk: self.desk.clone() };
        let fresh = self.w.wiring.restarted();
        self.operator = Operator::new(layer.deps(fresh.deps.clone()));
        self.wiring = fresh.layered(&layer);
    }

    /// An operator's move in `conversation`, if a person has it, as the API's client makes it:
    /// again (with the same idempotency key) after a failure, until it is done or refused. The
    /// key of a reply that was made.
    async fn operate(&mut self, conversation: &str, what: Move, n: usize) -> Option<String> {
        let tenant: TenantId = "t-1".parse().unwrap();
        let key = format!("op-{n}");
        for _ in 0..3 {
            let latest = self.w.wiring.store.latest_session(&tenant, conversation).await.unwrap();
            let session = latest.filter(|s| s.is_human_owned())?;
            let done = match what {
                Move::OperatorReplies => {
                    let reply = self.operator.reply(&tenant, session.session_id, "Ann", "Ann here.", &key).await;
                    reply.map(|_| Some(key.clone())).map_err(|e| e.to_string())
                }
                _ => {
                    let back = HandoffTo::Agent(AGENT.parse().unwrap());
                    let handed = self.operator.hand_off(&tenant, session.session_id, back, "back to you", "ops").await;
                    handed.map(|_| None).map_err(|e| e.to_string())
                }
            };
            if self.faults.crashed() {
                self.restart();
            } else if let Ok(made) = done {
                return made;
            }
        }
        panic!("the operator's {what:?} in {conversation} never went through");
    }

    /// EventBridge's delivery to the router: again, same event, until it is taken.
    async fn send(&mut self, envelope: &Value) {
        for _ in 0..3 {
            let taken = event_router::handle(&self.wiring.intake, event::<EventBridgeEvent>(envelope.clone())).await;
            if self.faults.crashed() {
                self.restart();
            } else if taken.is_ok() {
                return;
            }
        }
        panic!("event {} was never taken in", envelope["id"]);
    }

    /// The event source mapping, one message at a time, until nothing is visible.
    async fn work(&mut self) {
        let sqs = aws_sdk_sqs::Client::new(&self.w.sdk);
        let url = self.w.names.work_queue_url.clone();
        while let Some(message) = receive_work(&self.w).await {
            let response =
                executor::handle(&self.wiring, event::<SqsEvent>(as_sqs_event(std::slice::from_ref(&message)))).await;
            let receipt = message.receipt_handle().unwrap();
            let crashed = self.faults.crashed();
            if crashed {
                self.restart();
            }
            if crashed || !response.batch_item_failures.is_empty() {
                // Visible again: at once after a reported failure, and after a crash as when its
                // visibility timeout ends.
                let visible = sqs.change_message_visibility().queue_url(&url).receipt_handle(receipt);
                visible.visibility_timeout(0).send().await.unwrap();
            } else {
                sqs.delete_message().queue_url(&url).receipt_handle(receipt).send().await.unwrap();
            }
        }
    }

    /// Plays every step of `mix`: the customers' messages' sources, and the keys of the
    /// operators' replies.
    async fn play(&mut self, mix: &[Said]) -> (Vec<(String, String)>, Vec<String>) {
        let (mut sources, mut replies) = (vec![], vec![]);
        for (n, said) in mix.iter().enumerate() {
            match said.text() {
                Some(text) => {
                    let mut envelope = fixture("eventbridge-message-new.json");
                    envelope["id"] = json!(format!("evt-{n}"));
                    envelope["detail"]["conversationId"] = json!(said.conversation);
                    envelope["detail"]["messageId"] = json!(format!("m-{n}"));
                    envelope["detail"]["message"]["text"] = json!(text);
                    self.send(&envelope).await;
                    sources.push((said.conversation.clone(), format!("message-{}:m-{n}", said.conversation)));
                }
                None => replies.extend(self.operate(&said.conversation, said.what, n).await),
            }
            if said.drain {
                self.work().await;
            }
        }
        self.work().await;
        (sources, replies)
    }

    /// What must hold once everything was worked (the embedded suite's `check`, read from the
    /// AWS profile's stores and the Conversations fake).
    async fn check(&self, (sources, operator_replies): &(Vec<(String, String)>, Vec<String>)) -> Result<(), String> {
        let mut relayed = self.relayed.clone();
        relayed.extend(self.faults.relayed());
        let mut early = self.early.clone();
        early.extend(self.faults.published_early());
        if let Some(e) = early.first() {
            return Err(format!("published before its change committed: {e}"));
        }
        let store = self.w.wiring.store.as_ref();
        let tenant: TenantId = "t-1".parse().unwrap();
        let mut replies = Replies::default();
        for (_, source) in sources {
            let record = replies.record(store, &tenant, source).await?;
            faults::answered_or_with_person(&record, store).await?;
        }
        for key in operator_replies {
            replies.record(store, &tenant, &format!("reply-{key}")).await?;
        }
        // The fake numbers what it accepts out-1, out-2, …, each key once.
        for (n, reply) in self.w.conversations.accepted().iter().enumerate() {
            replies.sent(&format!("out-{}", n + 1), &reply.text)?;
        }
        replies.all_sent()?;
        let outbox = store.events_after(&tenant, 0, 1000).await.unwrap();
        faults::log_holds(&outbox, &relayed, store, store, store).await
    }
}

/// Plays `mix` with `plan` on fresh tables and queues: the port calls made, or the failure.
async fn case(mix: &[Said], plan: Option<Plan>) -> Result<u64, String> {
    let mut run = Run::start(plan).await;
    let played = run.play(mix).await;
    let (calls, fired) = (run.planned.calls(), run.planned.fired());
    run.check(&played).await.map(|()| calls).map_err(|e| format!("{plan:?} (fired at {fired:?}): {e}"))
}

fn said(conversation: &str, text: &'static str, drain: bool) -> Said {
    Said { conversation: conversation.into(), what: Move::Says(text), drain }
}

#[tokio::test]
async fn every_call_of_a_conversation_mix_may_fail_on_aws_and_no_message_is_lost_or_answered_twice() {
    let mix = [
        said("c-1", faults::TEXTS[1], false),
        said("c-2", faults::TEXTS[3], true),
        said("c-2", faults::TEXTS[0], true),
        Said { conversation: "c-2".into(), what: Move::OperatorReplies, drain: true },
        Said { conversation: "c-2".into(), what: Move::HandsBack, drain: true },
    ];
    let calls = case(&mix, None).await.unwrap();
    assert!(calls > 20, "the mix makes {calls} port calls");
    // A crash right after each call, and an error or a lost answer in turn (the embedded suite
    // tries all three at every call; here each case costs the emulator's time).
    let plans = (0..calls).flat_map(|at| {
        let other = if at % 2 == 0 { Kind::Error } else { Kind::Timeout };
        [Plan { at, kind: Kind::Crash }, Plan { at, kind: other }]
    });
    let failures: Vec<String> = futures::stream::iter(plans)
        .map(|plan| case(&mix, Some(plan)))
        .buffer_unordered(CONCURRENT_CASES)
        .filter_map(|result| async move { result.err() })
        .collect()
        .await;
    faults::assert_none_failed(&failures, usize::try_from(calls * 2).unwrap());
}

#[tokio::test]
async fn random_conversations_with_a_fault_at_a_random_call_on_aws_lose_and_repeat_nothing() {
    let seeds = faults::seeds(32);
    let failures: Vec<String> = futures::stream::iter(seeds.clone())
        .map(|seed| faults::seeded_case(seed, |mix, plan| async move { case(&mix, plan).await }))
        .buffer_unordered(CONCURRENT_CASES)
        .filter_map(|failure| async move { failure })
        .collect()
        .await;
    faults::assert_none_failed(&failures, seeds.len());
}
