//! Measures trigger routing for one inbound `message.new` event against 10, 100 and 1,000 active
//! triggers (`sort_for_evaluation` once, then `first_match` per event, or the triggers compiled
//! into a `TriggerIndex` once and its `first_match` per event), with no trigger matching (every
//! trigger evaluated) and with only the last trigger matching; plus `Conditions::parse` of
//! one realistic condition tree and `InboundEvent::parse_bytes` of a typical 1 KB envelope; and a
//! tool's arguments checked against its JSON Schema (`arguments`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use divan::{Bencher, black_box};
use serde_json::{Value, json};
use switchboard_domain::trigger::{TriggerIndex, first_match, sort_for_evaluation};
use switchboard_domain::{Conditions, EventType, InboundEvent, Trigger};

const SIZES: &[usize] = &[10, 100, 1000];
const AGENT: &str = "01JD0000SVPP0RT0AGENT00001";

fn main() {
    divan::main();
}

/// The EventBridge envelope every routing bench uses (about 1 KB serialized).
fn envelope() -> Value {
    json!({
        "version": "0",
        "id": "4f1c2a7e-8b3d-4e5f-9a6b-1c2d3e4f5a6b",
        "detail-type": "message.new",
        "source": "conversations-service",
        "account": "123456789012",
        "time": "2025-01-15T10:32:07Z",
        "region": "eu-west-1",
        "resources": [],
        "detail": {
            "tenantId": "acme",
            "conversationId": "conv-8f2d1c0b9a7e4d3c",
            "messageId": "msg-01JD3K7Q9XG5W2V8N4M6P0R1T3",
            "channel": { "platform": "webchat", "channelId": "web-eu-main", "locale": "en-GB" },
            "conversation": {
                "status": "open",
                "createdAt": "2025-01-15T10:30:41Z",
                "assignee": null,
                "tags": ["orders", "returning-customer"],
                "messageCount": 3
            },
            "customer": {
                "customerId": "cust-0042-7781",
                "tier": "gold",
                "lifetimeValue": 1240.5,
                "ordersCount": 7,
                "country": "GB"
            },
            "message": {
                "direction": "inbound",
                "text": "Hi there, I ordered a two-person tent last week (order #1234) and the tracking page \
                         still says 'label created'. Could you tell me where my order is and when it will arrive? \
                         I need it before Saturday for a camping trip. Thanks!",
                "sentAt": "2025-01-15T10:32:06Z",
                "attachments": []
            }
        }
    })
}

fn detail() -> Value {
    envelope()["detail"].clone()
}

/// A condition tree that does not match `detail()`; `i` varies literals so that no two triggers
/// are identical. Each shape fails at a different depth, as a tenant's real rules would.
fn non_matching(i: usize) -> Value {
    match i % 5 {
        // Fails on the first leaf (platform).
        0 => json!({ "all": [
            { "field": "channel.platform", "operator": "in", "value": ["whatsapp", "sms", "email"] },
            { "field": "conversation.status", "operator": "eq", "value": "open" }
        ] }),
        // Status passes; the case-insensitive substring search fails.
        1 => json!({ "all": [
            { "field": "conversation.status", "operator": "eq", "value": "open" },
            { "field": "message.text", "operator": "contains", "value": format!("Refund Request {i}"), "caseInsensitive": true }
        ] }),
        // Platform passes; the case-insensitive regex fails.
        2 => json!({ "all": [
            { "field": "channel.platform", "operator": "in", "value": ["webchat", "facebook", "instagram"] },
            { "field": "message.text", "operator": "matches", "value": format!(r"\b(cancel|unsubscribe)\s+order\s+#?{i}\b"), "caseInsensitive": true }
        ] }),
        // Platform and status pass; the numeric threshold fails.
        3 => json!({ "all": [
            { "field": "channel.platform", "operator": "in", "value": ["webchat", "facebook"] },
            { "field": "conversation.status", "operator": "eq", "value": "open" },
            { "field": "customer.lifetimeValue", "operator": "gt", "value": 5000 + i }
        ] }),
        // A nested `any` where no member holds.
        _ => json!({ "all": [
            { "field": "message.direction", "operator": "eq", "value": "inbound" },
            { "any": [
                { "field": "customer.tier", "operator": "eq", "value": "platinum", "caseInsensitive": true },
                { "field": "message.text", "operator": "contains", "value": format!("VIP-{i}"), "caseInsensitive": true },
                { "field": "conversation.messageCount", "operator": "gt", "value": 50 }
            ] }
        ] }),
    }
}

/// The condition tree of the one trigger that matches `detail()`.
fn matching() -> Value {
    json!({ "all": [
        { "field": "channel.platform", "operator": "in", "value": ["webchat", "facebook", "instagram"] },
        { "field": "conversation.status", "operator": "eq", "value": "open" },
        { "field": "message.text", "operator": "matches", "value": r"where\s+(is\s+)?my\s+order", "caseInsensitive": true },
        { "any": [
            { "field": "customer.lifetimeValue", "operator": "gt", "value": 1000 },
            { "field": "message.text", "operator": "contains", "value": "URGENT", "caseInsensitive": true }
        ] }
    ] })
}

fn trigger(name: String, priority: i32, conditions: Value) -> Trigger {
    let at = "2025-01-01T09:00:00Z";
    serde_json::from_value(json!({
        "tenantId": "acme",
        "triggerId": ulid::Ulid::generate().to_string(),
        "name": name,
        "agentId": AGENT,
        "eventType": "message.new",
        "conditions": conditions,
        "priority": priority,
        "status": "active",
        "createdAt": at,
        "updatedAt": at,
    }))
    .unwrap()
}

/// `n` active triggers in evaluation order; when `last_matches`, only the last one matches.
fn triggers(n: usize, last_matches: bool) -> Vec<Trigger> {
    let mut all: Vec<Trigger> =
        (0..n).map(|i| trigger(format!("rule {i}"), i32::try_from(i % 50).unwrap(), non_matching(i))).collect();
    if last_matches {
        // The highest priority number sorts last.
        all.pop();
        all.push(trigger("order status".to_owned(), 1000, matching()));
    }
    sort_for_evaluation(&mut all);
    let d = detail();
    let hit = first_match(&all, EventType::MessageNew, &d);
    if last_matches {
        assert_eq!(hit.map(|t| t.trigger_id), all.last().map(|t| t.trigger_id));
    } else {
        assert!(hit.is_none());
    }
    all
}

/// No trigger matches: every condition tree is evaluated (the worst case).
#[divan::bench(args = SIZES)]
fn route_no_match(bencher: Bencher, n: usize) {
    let sorted = triggers(n, false);
    let d = detail();
    bencher.bench_local(|| first_match(black_box(&sorted), EventType::MessageNew, black_box(&d)).is_some());
}

/// Only the last trigger in evaluation order matches.
#[divan::bench(args = SIZES)]
fn route_last_matches(bencher: Bencher, n: usize) {
    let sorted = triggers(n, true);
    let d = detail();
    bencher.bench_local(|| first_match(black_box(&sorted), EventType::MessageNew, black_box(&d)).is_some());
}

/// The same triggers compiled into a [`TriggerIndex`] (what routing does, once per trigger-cache
/// fill): no trigger matches.
#[divan::bench(args = SIZES)]
fn indexed_no_match(bencher: Bencher, n: usize) {
    let index = TriggerIndex::new(&triggers(n, false), EventType::MessageNew);
    let d = detail();
    assert!(index.first_match(&d, 0).is_none());
    bencher.bench_local(|| black_box(&index).first_match(black_box(&d), 0).is_some());
}

/// Compiled: only the last trigger in evaluation order matches.
#[divan::bench(args = SIZES)]
fn indexed_last_matches(bencher: Bencher, n: usize) {
    let index = TriggerIndex::new(&triggers(n, true), EventType::MessageNew);
    let d = detail();
    assert_eq!(index.first_match(&d, 0).map(|(p, _)| p), Some(n - 1));
    bencher.bench_local(|| black_box(&index).first_match(black_box(&d), 0).is_some());
}

/// Compiling a tenant's triggers into a [`TriggerIndex`].
#[divan::bench(args = SIZES)]
fn build_index(bencher: Bencher, n: usize) {
    let sorted = triggers(n, true);
    bencher.bench_local(|| TriggerIndex::new(black_box(&sorted), EventType::MessageNew));
}

/// One non-matching condition tree of each shape used above, evaluated alone (what each kind of
/// trigger costs in the no-match walk).
#[divan::bench(args = ["0_platform_in", "1_status_eq_contains_ci", "2_platform_in_matches_ci", "3_in_eq_gt", "4_eq_any_nested"])]
fn evaluate_shape(bencher: Bencher, shape: &str) {
    let i = shape[..1].parse::<usize>().unwrap() + 995;
    let conditions = Conditions::parse(&non_matching(i)).unwrap();
    let d = detail();
    assert!(!conditions.matches(&d));
    bencher.bench_local(|| black_box(&conditions).matches(black_box(&d)));
}

/// Sorting a tenant's triggers into evaluation order (done once per trigger-cache fill).
#[divan::bench(args = SIZES)]
fn sort_triggers(bencher: Bencher, n: usize) {
    let mut unsorted = triggers(n, true);
    unsorted.reverse();
    bencher.with_inputs(|| unsorted.clone()).bench_local_refs(|t| sort_for_evaluation(t));
}

/// A realistic condition tree: two regexes (case-insensitive), case-insensitive literals, a
/// numeric bound and a nested group.
fn realistic_tree() -> Value {
    json!({
        "all": [
            { "field": "message.direction", "operator": "eq", "value": "inbound" },
            { "field": "channel.platform", "operator": "in", "value": ["webchat", "facebook", "instagram"] },
            { "field": "conversation.status", "operator": "neq", "value": "closed" }
        ],
        "any": [
            { "field": "message.text", "operator": "matches", "value": r"\b(where|track(ing)?)\b.*\border\b", "caseInsensitive": true },
            { "field": "message.text", "operator": "contains", "value": "Delivery", "caseInsensitive": true },
            { "all": [
                { "field": "customer.lifetimeValue", "operator": "gt", "value": 1000 },
                { "field": "message.text", "operator": "matches", "value": r"#?\d{4,}", "caseInsensitive": true }
            ] }
        ]
    })
}

/// Parsing and compiling `realistic_tree()`.
#[divan::bench]
fn parse_conditions(bencher: Bencher) {
    let tree = realistic_tree();
    assert!(Conditions::parse(&tree).unwrap().matches(&detail()));
    bencher.bench_local(|| Conditions::parse(black_box(&tree)).is_ok());
}

/// The same tree with its two `matches` leaves turned into `contains`: what regex compilation
/// adds to `parse_conditions`.
#[divan::bench]
fn parse_conditions_without_regex(bencher: Bencher) {
    let text = realistic_tree().to_string().replace(r#""operator":"matches""#, r#""operator":"contains""#);
    let tree: Value = serde_json::from_str(&text).unwrap();
    assert!(!tree.to_string().contains("matches"));
    assert!(Conditions::parse(&tree).is_ok());
    bencher.bench_local(|| Conditions::parse(black_box(&tree)).is_ok());
}

/// Parsing a typical 1 KB EventBridge envelope from bytes.
#[divan::bench]
fn parse_event_1kb(bencher: Bencher) {
    let body = serde_json::to_vec(&envelope()).unwrap();
    assert!((900..=1200).contains(&body.len()), "envelope is {} bytes", body.len());
    assert!(InboundEvent::parse_bytes(&body).is_ok());
    bencher
        .counter(divan::counter::BytesCount::of_slice(&body))
        .bench_local(|| InboundEvent::parse_bytes(black_box(&body)).is_ok());
}

/// A tool's arguments checked against its schema before a call, as the engine does it: the
/// schema compiled once per tool version and kept (`validate_cached`), for the example tenant's
/// one-field schema and for a Pydantic one with `$defs`/`$ref` and `anyOf`; and the compile
/// itself, paid once per tool version and process.
mod arguments {
    use super::*;
    use switchboard_domain::schema::{validate, validate_cached};

    fn simple() -> Value {
        json!({ "type": "object", "properties": { "orderId": { "type": "string", "pattern": "^[0-9]+$" } },
                "required": ["orderId"] })
    }

    fn generated() -> Value {
        json!({
            "$defs": { "OrderRef": { "type": "object", "required": ["id"],
                "properties": { "id": { "type": "string", "pattern": "^[0-9]{4}$" },
                                "channel": { "anyOf": [{ "enum": ["web", "phone"], "type": "string" }, { "type": "null" }] } } } },
            "type": "object", "properties": { "order": { "$ref": "#/$defs/OrderRef" } }, "required": ["order"]
        })
    }

    #[divan::bench]
    fn simple_kept(b: Bencher) {
        let (schema, args) = (simple(), json!({ "orderId": "1234" }));
        b.bench(|| validate_cached("bench-simple#1", black_box(&schema), black_box(&args)).is_ok());
    }

    #[divan::bench]
    fn generated_kept(b: Bencher) {
        let (schema, args) = (generated(), json!({ "order": { "id": "1234", "channel": "web" } }));
        b.bench(|| validate_cached("bench-generated#1", black_box(&schema), black_box(&args)).is_ok());
    }

    #[divan::bench]
    fn generated_compiled_each_time(b: Bencher) {
        let (schema, args) = (generated(), json!({ "order": { "id": "1234", "channel": "web" } }));
        b.bench(|| validate(black_box(&schema), black_box(&args)).is_ok());
    }
}
