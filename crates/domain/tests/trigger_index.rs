//! The trigger index answers exactly what evaluating every trigger in order answers, on generated
//! triggers and events (every operator, case-insensitive leaves, nested groups, text in mixed
//! case and beyond ASCII, arrays where text is expected, numbers at and around the bounds), and
//! a store's selection of the triggers it routes on; and the trigger tester answers what routing
//! does, agents that may not answer included.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};
use switchboard_domain::condition::{Atom, Conditions, Requirement};
use switchboard_domain::trigger::{
    EventType, Outcome, Trigger, TriggerIndex, TriggerStatus, active_in_order, first_match, sort_for_evaluation,
    test_triggers,
};
use switchboard_domain::{AgentId, TriggerId};

const FIELDS: [&str; 5] = ["channel.platform", "conversation.status", "message.text", "tags.0", "customer.score"];
const TEXTS: [&str; 8] = ["web", "sms", "open", "Web", "WEB chat", "wéb", "ÉCOLE", "where is my order"];
const NEEDLES: [&str; 6] = ["web", "e", "ORDER", "éc", "is my", "sms"];
const PATTERNS: [&str; 4] = ["^w", r"my\s+order", "[0-9]", "É"];

fn arb_text() -> impl Strategy<Value = Value> + Clone {
    prop::sample::select(TEXTS.to_vec()).prop_map(|t| json!(t))
}

fn arb_value() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        6 => arb_text(),
        2 => prop::sample::select(vec![0.0, 1.0, 2.5, 10.0, -3.0]).prop_map(|n| json!(n)),
        1 => Just(json!(1)),
        1 => Just(Value::Null),
        3 => prop::collection::vec(arb_text(), 0..3).prop_map(Value::Array),
    ]
}

fn arb_leaf() -> impl Strategy<Value = Value> + Clone {
    (
        prop::sample::select(FIELDS.to_vec()),
        prop::sample::select(vec![
            "eq",
            "neq",
            "in",
            "not_in",
            "contains",
            "not_contains",
            "matches",
            "gt",
            "gte",
            "lt",
            "lte",
            "exists",
            "not_exists",
            "starts_with",
        ]),
        arb_value(),
        prop::collection::vec(prop_oneof![4 => arb_text(), 1 => Just(json!(1))], 1..4),
        prop::sample::select(NEEDLES.to_vec()),
        prop::sample::select(PATTERNS.to_vec()),
        prop::sample::select(vec![0.0, 1.0, 2.5, 10.0]),
        any::<bool>(),
    )
        .prop_map(|(field, operator, value, options, needle, pattern, bound, ci)| match operator {
            "in" | "not_in" => json!({"field": field, "operator": operator, "value": options, "caseInsensitive": ci}),
            "exists" | "not_exists" => json!({"field": field, "operator": operator}),
            "contains" | "not_contains" | "starts_with" => {
                json!({"field": field, "operator": operator, "value": needle, "caseInsensitive": ci})
            }
            "matches" => json!({"field": field, "operator": "matches", "value": pattern, "caseInsensitive": ci}),
            "gt" | "gte" | "lt" | "lte" => json!({"field": field, "operator": operator, "value": bound}),
            _ => json!({"field": field, "operator": operator, "value": value, "caseInsensitive": ci}),
        })
}

fn arb_group(leaf: impl Strategy<Value = Value> + Clone) -> impl Strategy<Value = Value> + Clone {
    (prop::collection::vec(leaf.clone(), 0..4), prop::option::of(prop::collection::vec(leaf, 0..3))).prop_map(
        |(all, any)| match any {
            Some(any) => json!({"all": all, "any": any}),
            None => json!({"all": all}),
        },
    )
}

fn arb_conditions() -> impl Strategy<Value = Value> {
    let nested = prop_oneof![3 => arb_leaf(), 1 => arb_group(arb_leaf())];
    prop_oneof![
        1 => Just(json!({})),
        2 => arb_leaf(),
        4 => arb_group(arb_leaf()),
        3 => arb_group(nested),
    ]
}

/// A `message.new` trigger with these conditions.
fn trigger(conditions: &Value, priority: i32, status: TriggerStatus) -> Trigger {
    let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    Trigger {
        tenant_id: "t".parse().unwrap(),
        trigger_id: TriggerId::generate(),
        name: "t".into(),
        agent_id: AgentId::generate(),
        event_type: EventType::MessageNew,
        conditions: Conditions::parse(conditions).unwrap(),
        priority,
        status,
        schedule: None,
        webhook: None,
        split: vec![],
        created_at: at,
        updated_at: at,
        version: 1,
    }
}

fn arb_trigger() -> impl Strategy<Value = Trigger> {
    (arb_conditions(), 0..4i32, prop::bool::weighted(0.9)).prop_map(|(conditions, priority, active)| {
        trigger(&conditions, priority, if active { TriggerStatus::Active } else { TriggerStatus::Inactive })
    })
}

fn arb_event() -> impl Strategy<Value = Value> {
    (prop::collection::vec(prop::option::of(arb_value()), 5)).prop_map(|values| {
        let mut detail = json!({"channel": {}, "conversation": {}, "message": {}, "customer": {}});
        let slots =
            [("channel", "platform"), ("conversation", "status"), ("message", "text"), ("", ""), ("customer", "score")];
        for (i, v) in values.into_iter().enumerate() {
            let Some(v) = v else { continue };
            match slots[i] {
                ("", _) => detail["tags"] = json!([v]),
                (object, key) => detail[object][key] = v,
            }
        }
        detail
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(768))]

    #[test]
    fn the_index_finds_the_same_first_match_as_evaluating_every_trigger(
        triggers in prop::collection::vec(arb_trigger(), 0..24),
        events in prop::collection::vec(arb_event(), 1..8),
    ) {
        let mut sorted = triggers.clone();
        sort_for_evaluation(&mut sorted);
        let index = TriggerIndex::new(&sorted, EventType::MessageNew);
        let active: Vec<&Trigger> = sorted.iter().filter(|t| t.status == TriggerStatus::Active).collect();
        prop_assert_eq!(index.triggers().len(), active.len());
        for event in &events {
            // from every position, as routing resumes after a trigger whose agent is inactive
            for from in 0..=index.triggers().len() {
                let naive = first_match(&index.triggers()[from..], EventType::MessageNew, event)
                    .map(|t| t.trigger_id);
                let indexed = index.first_match(event, from);
                prop_assert_eq!(indexed.map(|(_, t)| t.trigger_id), naive, "event {}", event);
                if let Some((p, t)) = indexed {
                    prop_assert!(p >= from);
                    prop_assert_eq!(index.triggers()[p].trigger_id, t.trigger_id);
                }
            }
        }
    }

    #[test]
    fn the_tester_picks_what_routing_picks_and_explains_each_trigger_before_it(
        triggers in prop::collection::vec(arb_trigger(), 0..24),
        events in prop::collection::vec(arb_event(), 1..8),
        inactive_agents in prop::collection::vec(any::<bool>(), 24),
    ) {
        let active = active_in_order(triggers.iter().cloned().map(Ok::<_, ()>), EventType::MessageNew).unwrap();
        let index = TriggerIndex::new(&active, EventType::MessageNew);
        let agent_active = |agent: &AgentId| {
            let position = active.iter().position(|t| t.agent_id == *agent).unwrap();
            !inactive_agents[position]
        };
        for event in &events {
            // routing: the first indexed match whose agent may answer, resuming after one that may not
            let mut from = 0;
            let routed = loop {
                match index.first_match(event, from) {
                    Some((p, t)) if agent_active(&t.agent_id) => break Some((p, t.trigger_id)),
                    Some((p, _)) => from = p + 1,
                    None => break None,
                }
            };
            let tested = test_triggers(&active, EventType::MessageNew, event, chrono::Utc::now(), &Default::default(), agent_active);
            prop_assert_eq!(tested.matched, routed.map(|(_, id)| id), "event {}", event);
            prop_assert_eq!(tested.triggers.len(), active.len());
            for (position, considered) in tested.triggers.iter().enumerate() {
                let held = active[position].conditions.matches(event);
                prop_assert_eq!(considered.conditions["held"].as_bool(), Some(held));
                let expected = match routed {
                    Some((p, _)) if position > p => Outcome::NotReached,
                    Some((p, _)) if position == p => Outcome::Matched,
                    _ if !held => Outcome::NoMatch,
                    _ => Outcome::AgentNotActive,
                };
                prop_assert_eq!(considered.outcome, expected);
            }
        }
    }
}

#[test]
fn what_a_tree_requires_is_read_from_its_all_chain_and_its_any_groups_of_leaves() {
    let requirements = |c: Value| Conditions::parse(&c).unwrap().requirements();
    let got = requirements(json!({"all": [
        {"field": "channel.platform", "operator": "in", "value": ["web", "sms", "web"]},
        {"field": "message.text", "operator": "contains", "value": "Refund", "caseInsensitive": true},
        {"field": "customer.score", "operator": "gte", "value": 3},
        {"all": [{"field": "message.text", "operator": "matches", "value": "^hi"}]},
        {"field": "conversation.status", "operator": "neq", "value": "closed"}
    ], "any": [
        {"field": "customer.tier", "operator": "eq", "value": "Gold", "caseInsensitive": true},
        {"field": "customer.score", "operator": "lt", "value": 1}
    ]}));
    let kinds: Vec<String> = got
        .iter()
        .map(|r| match r {
            Requirement::Atom(Atom::OneOf { values, .. }) => format!("one of {values:?}"),
            Requirement::Atom(Atom::Contains { needle, case_insensitive, .. }) => {
                format!("contains {needle} {case_insensitive}")
            }
            Requirement::Atom(Atom::Matches { pattern, .. }) => format!("matches {pattern}"),
            Requirement::Atom(Atom::Above { bound, inclusive, .. }) => format!("above {bound} {inclusive}"),
            Requirement::Atom(Atom::Below { bound, inclusive, .. }) => format!("below {bound} {inclusive}"),
            Requirement::AnyOf(atoms) => format!("any of {}", atoms.len()),
        })
        .collect();
    // duplicates dropped, the literal lowercased, the negation not indexed
    assert_eq!(kinds, ["one of [\"sms\", \"web\"]", "contains refund true", "above 3 true", "matches ^hi", "any of 2"]);
    // not indexable: an `any` holding a group, mixed `in` values, the empty needle, text bounds
    for c in [
        json!({"any": [{"field": "a", "operator": "eq", "value": "x"}, {"all": []}]}),
        json!({"field": "a", "operator": "in", "value": ["x", 1]}),
        json!({"field": "a", "operator": "contains", "value": ""}),
        json!({"field": "a", "operator": "gt", "value": "2026-01-01"}),
        json!({"field": "a", "operator": "not_exists"}),
    ] {
        assert!(requirements(c.clone()).is_empty(), "{c}");
    }
}

#[test]
fn a_trigger_whose_indexed_requirements_fail_is_not_evaluated_and_an_empty_any_never_matches() {
    let trigger = |conditions: Value, priority: i32| trigger(&conditions, priority, TriggerStatus::Active);
    let mut triggers = vec![
        trigger(json!({"any": []}), 1),
        trigger(
            json!({"field": "message.text", "operator": "contains", "value": "REFUND", "caseInsensitive": true}),
            2,
        ),
        trigger(json!({}), 3),
    ];
    triggers.push(trigger(json!({"field": "conversation.tags", "operator": "contains", "value": "vip"}), 0));
    sort_for_evaluation(&mut triggers);
    let index = TriggerIndex::new(&triggers, EventType::MessageNew);
    // `contains` on an array is membership, which the index leaves to evaluation
    let vip = json!({"conversation": {"tags": ["new", "vip"]}, "message": {"text": "hi"}});
    assert_eq!(index.first_match(&vip, 0).map(|(_, t)| t.priority), Some(0));
    let triggers: Vec<Trigger> = triggers.into_iter().filter(|t| t.priority > 0).collect();
    let index = TriggerIndex::new(&triggers, EventType::MessageNew);
    let refund = json!({"message": {"text": "I want a Refund"}});
    assert_eq!(index.first_match(&refund, 0).map(|(p, _)| p), Some(1));
    assert_eq!(index.first_match(&json!({"message": {"text": "hello"}}), 0).map(|(p, _)| p), Some(2));
    assert_eq!(index.first_match(&refund, 2).map(|(p, _)| p), Some(2));
    assert_eq!(index.first_match(&refund, 3), None);
}

#[test]
fn a_stores_selection_keeps_the_active_triggers_of_the_event_type_in_evaluation_order() {
    // given a tenant's triggers in the order a store reads them: an inactive one, one of another
    // event type, and three active ones out of priority order (two tied)
    let mut schedule = trigger(&json!({}), 0, TriggerStatus::Active);
    schedule.event_type = EventType::Schedule;
    let records = vec![
        trigger(&json!({}), 9, TriggerStatus::Active),
        trigger(&json!({}), 1, TriggerStatus::Inactive),
        schedule,
        trigger(&json!({}), 5, TriggerStatus::Active),
        trigger(&json!({}), 5, TriggerStatus::Active),
    ];
    let mut expected = vec![records[3].clone(), records[4].clone(), records[0].clone()];
    sort_for_evaluation(&mut expected);
    // when the active message.new triggers are selected
    let selected = active_in_order(records.into_iter().map(Ok::<_, String>), EventType::MessageNew).unwrap();
    // then only those remain, by priority and then by id
    assert_eq!(&selected[..], &expected[..]);
    assert_eq!(selected.iter().map(|t| t.priority).collect::<Vec<_>>(), [5, 5, 9]);
    // and a record that cannot be read stops the selection with its error
    let broken = vec![Ok(trigger(&json!({}), 1, TriggerStatus::Active)), Err("corrupt body".to_owned())];
    assert_eq!(active_in_order(broken, EventType::MessageNew).unwrap_err(), "corrupt body");
}
