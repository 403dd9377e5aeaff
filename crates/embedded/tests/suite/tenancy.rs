//! Two tenants that choose the same ids (event ids, message ids, conversation ids) never touch
//! each other's work: a property over random interleavings of their events, against the real
//! embedded adapters (SQLite store and queue, local conversation log, event log) with the
//! scripted model — a deterministic test double, not an AI.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use switchboard_domain::{InboundEvent, TenantId};
use switchboard_embedded::{EmbeddedOptions, ScriptedModel};
use switchboard_engine::{ConversationLog, SystemClock};

use crate::common;
use common::World;

const TENANTS: [&str; 2] = ["ta", "tb"];
const CONVERSATIONS: [&str; 2] = ["c-0", "c-1"];

/// Echoes the customer, and hands the conversation to a human when asked.
const SCRIPT: &str = r#"{ "rules": [
    { "when": { "userText": { "contains": "human" } },
      "then": { "toolCalls": [ { "name": "handoff_to_human", "input": { "reason": "asked for a person" } } ] } },
    { "then": { "text": "{{userText}}, said the agent" } }
] }"#;

/// One inbound message as a tenant's channel numbers it: every id drawn from a small pool, so
/// that the two tenants (and a tenant with itself) collide often.
#[derive(Debug, Clone)]
struct Msg {
    event: u8,
    message: u8,
    conversation: usize,
    human: bool,
}

fn msg() -> impl Strategy<Value = Msg> {
    (0u8..4, 0u8..3, 0usize..2, proptest::bool::weighted(0.15)).prop_map(|(event, message, conversation, human)| Msg {
        event,
        message,
        conversation,
        human,
    })
}

fn inbound(tenant: &str, m: &Msg) -> InboundEvent {
    let text = if m.human { format!("{tenant} wants a human") } else { format!("{tenant} says {}", m.event) };
    InboundEvent::parse(&json!({
        "id": format!("evt-{}", m.event), "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": tenant, "conversationId": CONVERSATIONS[m.conversation],
                    "messageId": format!("m-{}", m.message), "channel": {"platform": "webchat"},
                    "conversation": {"status": "open"}, "message": {"direction": "inbound", "text": text} }
    }))
    .unwrap()
}

/// Everything a tenant can observe of its conversations: each conversation's log (direction and
/// text), its sessions' statuses, and its outbound events (id and detail-type).
type View = Vec<String>;

/// A world with one echoing agent in each of `tenants`.
async fn world(tenants: &[&str]) -> World {
    let model = Arc::new(ScriptedModel::from_json(SCRIPT).unwrap());
    let bundles: Vec<String> = tenants
        .iter()
        .map(|t| {
            json!({ "tenantId": t, "name": format!("Tenant {t}"),
                "agents": [{ "agentId": "01JD0000SVPP0RT0AGENT00001", "name": "Echo", "systemPrompt": "Echo.",
                             "model": "test-model", "tools": ["send_message", "handoff_to_human"] }],
                "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all",
                               "agentId": "01JD0000SVPP0RT0AGENT00001", "eventType": "message.new" }] })
            .to_string()
        })
        .collect();
    let bundles: Vec<&str> = bundles.iter().map(String::as_str).collect();
    World::open(model, Arc::new(SystemClock), EmbeddedOptions::default(), &bundles).await
}

/// Ingests one message and runs every queued item, as the workers would.
async fn say(w: &World, tenant: &str, m: &Msg) {
    w.deliver(&inbound(tenant, m)).await;
}

async fn view(w: &World, tenant: &str) -> View {
    let t: TenantId = tenant.parse().unwrap();
    let store = &w.embedded.store;
    let mut view = vec![];
    for c in CONVERSATIONS {
        for m in store.messages(&t, c, 1000).await.unwrap() {
            view.push(format!("{c} {} {}: {}", m.direction, m.message_id.starts_with("reply-"), m.text));
        }
        for s in switchboard_engine::SessionStore::sessions_for_conversation(store, &t, c).await.unwrap() {
            view.push(format!("{c} session {:?}", s.status));
        }
    }
    for (_, e) in store.events(&t, 0, 1000).await.unwrap() {
        view.push(format!("event {} {}", e.id, e.detail_type));
    }
    view
}

/// Runs one interleaving of both tenants' messages in one world, and each tenant alone in a
/// world of its own; returns (together, alone) views per tenant.
async fn run(a: &[Msg], b: &[Msg], order: &[bool]) -> (Vec<View>, Vec<View>) {
    let together = world(&TENANTS).await;
    let (mut ia, mut ib) = (a.iter(), b.iter());
    for &take_a in order {
        let next = if take_a { ia.next().map(|m| (TENANTS[0], m)) } else { ib.next().map(|m| (TENANTS[1], m)) };
        if let Some((t, m)) = next {
            say(&together, t, m).await;
        }
    }
    for m in ia {
        say(&together, TENANTS[0], m).await;
    }
    for m in ib {
        say(&together, TENANTS[1], m).await;
    }
    let mut alone = vec![];
    for (t, msgs) in [(TENANTS[0], a), (TENANTS[1], b)] {
        let w = world(&[t]).await;
        for m in msgs {
            say(&w, t, m).await;
        }
        alone.push(view(&w, t).await);
    }
    (vec![view(&together, TENANTS[0]).await, view(&together, TENANTS[1]).await], alone)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn each_tenant_sees_what_it_would_see_alone(
        a in proptest::collection::vec(msg(), 1..7),
        b in proptest::collection::vec(msg(), 1..7),
        order in proptest::collection::vec(any::<bool>(), 0..14),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (together, alone) = rt.block_on(run(&a, &b, &order));
        prop_assert_eq!(&together, &alone);
        // and each tenant's view holds only its own messages
        for (i, view) in together.iter().enumerate() {
            let other = TENANTS[1 - i];
            prop_assert!(view.iter().all(|line| !line.contains(&format!("{other} "))), "{:?}", view);
        }
    }
}

#[tokio::test]
async fn the_same_event_id_in_two_tenants_is_answered_in_both() {
    // the first case the property above finds when dedup ids are not scoped, as a plain story
    let w = world(&TENANTS).await;
    let m = Msg { event: 1, message: 1, conversation: 0, human: false };
    say(&w, "ta", &m).await;
    say(&w, "tb", &m).await;
    for t in TENANTS {
        let view = view(&w, t).await;
        assert!(view.contains(&format!("c-0 outbound true: {t} says 1, said the agent")), "{view:?}");
    }
}
