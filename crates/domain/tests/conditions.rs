//! Stories for trigger conditions: what tenants can write, what it matches, and how mistakes are
//! reported. Not a test of routing itself; only the condition language is exercised here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use serde_json::{Value, json};
use switchboard_domain::condition::{
    ConditionError, Conditions, MAX_CONDITION_DEPTH, MAX_CONDITION_NODES, MAX_PATTERN_NESTING,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn conditions(value: Value) -> Conditions {
    Conditions::parse(&value).unwrap_or_else(|err| panic!("expected {value} to parse: {err}"))
}

fn rejection(value: Value) -> ConditionError {
    match Conditions::parse(&value) {
        Ok(_) => panic!("expected {value} to be rejected"),
        Err(err) => err,
    }
}

fn leaf(field: &str, operator: &str, value: Value) -> Value {
    json!({ "field": field, "operator": operator, "value": value })
}

fn leaf_ci(field: &str, operator: &str, value: Value) -> Value {
    json!({ "field": field, "operator": operator, "value": value, "caseInsensitive": true })
}

fn bare_leaf(field: &str, operator: &str) -> Value {
    json!({ "field": field, "operator": operator })
}

/// Whether a single-leaf condition matches a detail whose `f` field holds `actual`.
fn leaf_matches(condition: Value, actual: Value) -> bool {
    conditions(condition).matches(&json!({ "f": actual }))
}

fn brief_example() -> Value {
    json!({
        "all": [
            { "field": "channel.platform", "operator": "in", "value": ["facebook", "instagram"] },
            { "field": "conversation.status", "operator": "eq", "value": "open" },
            { "field": "message.direction", "operator": "eq", "value": "inbound" }
        ],
        "any": [
            { "field": "message.text", "operator": "contains", "value": "help" },
            { "field": "message.text", "operator": "contains", "value": "support" }
        ]
    })
}

fn instagram_event(text: &str) -> Value {
    json!({
        "channel": { "platform": "instagram" },
        "conversation": { "status": "open" },
        "message": { "direction": "inbound", "text": text }
    })
}

/// One valid leaf per operator, each with a value it accepts.
fn one_leaf_per_operator() -> Vec<(&'static str, Value)> {
    vec![
        ("eq", leaf("f", "eq", json!("x"))),
        ("neq", leaf("f", "neq", json!("x"))),
        ("in", leaf("f", "in", json!(["x", 1, true]))),
        ("not_in", leaf("f", "not_in", json!(["x", 1, true]))),
        ("contains", leaf("f", "contains", json!("x"))),
        ("not_contains", leaf("f", "not_contains", json!("x"))),
        ("starts_with", leaf("f", "starts_with", json!("x"))),
        ("ends_with", leaf("f", "ends_with", json!("x"))),
        ("matches", leaf("f", "matches", json!("x"))),
        ("gt", leaf("f", "gt", json!(1))),
        ("gte", leaf("f", "gte", json!(1))),
        ("lt", leaf("f", "lt", json!(1))),
        ("lte", leaf("f", "lte", json!(1))),
        ("exists", bare_leaf("f", "exists")),
        ("not_exists", bare_leaf("f", "not_exists")),
    ]
}

// ---------------------------------------------------------------------------------------------
// The brief's example
// ---------------------------------------------------------------------------------------------

#[test]
fn it_matches_an_open_inbound_instagram_message_asking_for_help() {
    // Given the support trigger from the product brief
    let trigger = conditions(brief_example());
    // When an open Instagram conversation receives "I need help"
    // Then the trigger fires
    assert!(trigger.matches(&instagram_event("I need help")));
}

#[test]
fn it_also_matches_the_brief_example_when_the_message_asks_for_support() {
    let trigger = conditions(brief_example());
    assert!(trigger.matches(&instagram_event("where is support?")));
}

#[test]
fn it_does_not_match_the_brief_example_when_the_message_just_says_hello() {
    let trigger = conditions(brief_example());
    // The `all` half holds, but no member of `any` does.
    assert!(!trigger.matches(&instagram_event("hello")));
}

#[test]
fn it_does_not_match_the_brief_example_on_another_platform() {
    let trigger = conditions(brief_example());
    let mut event = instagram_event("I need help");
    event["channel"]["platform"] = json!("whatsapp");
    assert!(!trigger.matches(&event));
}

#[test]
fn it_does_not_match_the_brief_example_for_an_outbound_message() {
    let trigger = conditions(brief_example());
    let mut event = instagram_event("I need help");
    event["message"]["direction"] = json!("outbound");
    assert!(!trigger.matches(&event));
}

// ---------------------------------------------------------------------------------------------
// Groups
// ---------------------------------------------------------------------------------------------

#[test]
fn it_matches_every_event_with_an_empty_condition_object() {
    let everything = conditions(json!({}));
    assert!(everything.matches(&json!({})));
    assert!(everything.matches(&instagram_event("anything")));
    assert!(everything.matches(&json!(null)));
}

#[test]
fn it_offers_always_as_the_empty_condition_object() {
    let always = Conditions::always();
    assert_eq!(always.as_json(), &json!({}));
    assert_eq!(always, conditions(json!({})));
    assert!(always.matches(&instagram_event("anything")));
}

#[test]
fn it_treats_an_empty_all_as_vacuously_true() {
    assert!(conditions(json!({ "all": [] })).matches(&json!({})));
}

#[test]
fn it_treats_an_empty_any_as_matching_nothing() {
    // Standard logic: "at least one of no conditions" can never be satisfied.
    assert!(!conditions(json!({ "any": [] })).matches(&json!({})));
    assert!(!conditions(json!({ "all": [], "any": [] })).matches(&json!({ "f": 1 })));
}

#[test]
fn it_requires_both_all_and_any_to_hold() {
    let trigger = conditions(json!({
        "all": [leaf("a", "eq", json!(1))],
        "any": [leaf("b", "eq", json!(2)), leaf("c", "eq", json!(3))]
    }));
    assert!(trigger.matches(&json!({ "a": 1, "b": 2 })));
    assert!(trigger.matches(&json!({ "a": 1, "c": 3 })));
    assert!(!trigger.matches(&json!({ "a": 1 })), "no member of any holds");
    assert!(!trigger.matches(&json!({ "a": 0, "b": 2 })), "all fails");
}

#[test]
fn it_requires_every_member_of_all() {
    let trigger = conditions(json!({
        "all": [leaf("a", "eq", json!(1)), leaf("b", "eq", json!(2))]
    }));
    assert!(trigger.matches(&json!({ "a": 1, "b": 2 })));
    assert!(!trigger.matches(&json!({ "a": 1, "b": 3 })));
}

#[test]
fn it_evaluates_nested_groups() {
    // Given: platform is facebook AND (vip customer OR (text mentions refund AND not a bot))
    let trigger = conditions(json!({
        "all": [
            leaf("channel.platform", "eq", json!("facebook")),
            { "any": [
                leaf("contact.tier", "eq", json!("vip")),
                { "all": [
                    leaf("message.text", "contains", json!("refund")),
                    leaf("contact.isBot", "neq", json!(true))
                ] }
            ] }
        ]
    }));
    let event = |tier: &str, text: &str, bot: bool| {
        json!({
            "channel": { "platform": "facebook" },
            "contact": { "tier": tier, "isBot": bot },
            "message": { "text": text }
        })
    };
    assert!(trigger.matches(&event("vip", "hi", true)));
    assert!(trigger.matches(&event("basic", "I want a refund", false)));
    assert!(!trigger.matches(&event("basic", "I want a refund", true)));
    assert!(!trigger.matches(&event("basic", "hi", false)));
}

#[test]
fn it_accepts_a_single_leaf_at_the_root_as_shorthand() {
    let trigger = conditions(leaf("message.text", "contains", json!("help")));
    assert!(trigger.matches(&json!({ "message": { "text": "help me" } })));
    assert!(!trigger.matches(&json!({ "message": { "text": "hi" } })));
}

// ---------------------------------------------------------------------------------------------
// Field paths
// ---------------------------------------------------------------------------------------------

#[test]
fn it_indexes_arrays_with_numeric_path_segments() {
    let first_tag = conditions(leaf("conversation.tags.0", "eq", json!("urgent")));
    assert!(first_tag.matches(&json!({ "conversation": { "tags": ["urgent", "billing"] } })));
    assert!(!first_tag.matches(&json!({ "conversation": { "tags": ["billing", "urgent"] } })));
}

#[test]
fn it_indexes_into_objects_inside_arrays() {
    let trigger = conditions(leaf("message.attachments.1.type", "eq", json!("image")));
    let detail = json!({ "message": { "attachments": [{ "type": "file" }, { "type": "image" }] } });
    assert!(trigger.matches(&detail));
}

#[test]
fn it_treats_a_numeric_segment_as_a_key_on_objects() {
    let trigger = conditions(leaf("scores.0", "eq", json!(7)));
    assert!(trigger.matches(&json!({ "scores": { "0": 7 } })));
}

#[test]
fn it_treats_an_out_of_range_index_as_a_missing_field() {
    let trigger = conditions(bare_leaf("tags.5", "not_exists"));
    assert!(trigger.matches(&json!({ "tags": ["a"] })));
}

#[test]
fn it_does_not_index_arrays_with_non_numeric_segments() {
    assert!(conditions(bare_leaf("tags.first", "not_exists")).matches(&json!({ "tags": ["a"] })));
    assert!(conditions(bare_leaf("tags.-1", "not_exists")).matches(&json!({ "tags": ["a"] })));
    assert!(conditions(bare_leaf("tags.+0", "not_exists")).matches(&json!({ "tags": ["a"] })));
}

#[test]
fn it_treats_a_path_through_a_scalar_as_missing() {
    let trigger = conditions(bare_leaf("message.text.length", "not_exists"));
    assert!(trigger.matches(&json!({ "message": { "text": "hi" } })));
}

#[test]
fn it_can_match_a_key_with_spaces_or_unicode() {
    let trigger = conditions(leaf("custom.plan name.état", "eq", json!("pro")));
    assert!(trigger.matches(&json!({ "custom": { "plan name": { "état": "pro" } } })));
}

#[test]
fn it_accepts_sixteen_path_segments() {
    let path = vec!["a"; 16].join(".");
    let mut detail = json!("deep");
    for _ in 0..16 {
        detail = json!({ "a": detail });
    }
    assert!(conditions(leaf(&path, "eq", json!("deep"))).matches(&detail));
}

// ---------------------------------------------------------------------------------------------
// Operators, one story each
// ---------------------------------------------------------------------------------------------

#[test]
fn eq_matches_equal_strings_only() {
    assert!(leaf_matches(leaf("f", "eq", json!("open")), json!("open")));
    assert!(!leaf_matches(leaf("f", "eq", json!("open")), json!("closed")));
    assert!(!leaf_matches(leaf("f", "eq", json!("open")), json!("Open")));
}

#[test]
fn eq_compares_numbers_numerically() {
    assert!(leaf_matches(leaf("f", "eq", json!(1)), json!(1.0)));
    assert!(leaf_matches(leaf("f", "eq", json!(-2.5)), json!(-2.5)));
    assert!(!leaf_matches(leaf("f", "eq", json!(1)), json!(2)));
    assert!(!leaf_matches(leaf("f", "eq", json!(1)), json!("1")));
}

#[test]
fn eq_compares_booleans() {
    assert!(leaf_matches(leaf("f", "eq", json!(true)), json!(true)));
    assert!(!leaf_matches(leaf("f", "eq", json!(true)), json!(false)));
}

#[test]
fn eq_null_matches_an_explicit_null_but_not_a_missing_field() {
    let is_null = conditions(leaf("assignee", "eq", json!(null)));
    assert!(is_null.matches(&json!({ "assignee": null })));
    assert!(!is_null.matches(&json!({})));
    assert!(!is_null.matches(&json!({ "assignee": "bob" })));
}

#[test]
fn eq_compares_arrays_and_objects_structurally() {
    assert!(leaf_matches(leaf("f", "eq", json!([1, "a"])), json!([1.0, "a"])));
    assert!(!leaf_matches(leaf("f", "eq", json!([1, "a"])), json!(["a", 1])));
    assert!(leaf_matches(leaf("f", "eq", json!({ "k": [true] })), json!({ "k": [true] })));
    assert!(!leaf_matches(leaf("f", "eq", json!({ "k": 1 })), json!({ "k": 1, "extra": 2 })));
}

#[test]
fn neq_is_true_for_a_different_present_value() {
    assert!(leaf_matches(leaf("f", "neq", json!("closed")), json!("open")));
    assert!(!leaf_matches(leaf("f", "neq", json!("open")), json!("open")));
    assert!(!leaf_matches(leaf("f", "neq", json!(1)), json!(1.0)));
}

#[test]
fn neq_treats_a_value_of_another_type_as_different() {
    assert!(leaf_matches(leaf("f", "neq", json!("1")), json!(1)));
    assert!(leaf_matches(leaf("f", "neq", json!("bot")), json!(null)));
}

#[test]
fn in_matches_any_listed_scalar() {
    let listed = leaf("f", "in", json!(["facebook", 7, false]));
    assert!(leaf_matches(listed.clone(), json!("facebook")));
    assert!(leaf_matches(listed.clone(), json!(7.0)));
    assert!(leaf_matches(listed.clone(), json!(false)));
    assert!(!leaf_matches(listed.clone(), json!("whatsapp")));
    assert!(!leaf_matches(listed.clone(), json!("7")));
    assert!(!leaf_matches(listed, json!(["facebook"])));
}

#[test]
fn not_in_matches_a_present_value_outside_the_list() {
    let unlisted = leaf("f", "not_in", json!(["spam", "test"]));
    assert!(leaf_matches(unlisted.clone(), json!("sales")));
    assert!(!leaf_matches(unlisted.clone(), json!("spam")));
    assert!(leaf_matches(unlisted, json!(null)), "null is present and not listed");
}

#[test]
fn contains_finds_a_substring_in_text() {
    assert!(leaf_matches(leaf("f", "contains", json!("help")), json!("I need help!")));
    assert!(!leaf_matches(leaf("f", "contains", json!("help")), json!("hello")));
    assert!(!leaf_matches(leaf("f", "contains", json!("HELP")), json!("help")));
}

#[test]
fn contains_finds_a_member_of_an_array() {
    assert!(leaf_matches(leaf("f", "contains", json!("vip")), json!(["new", "vip"])));
    assert!(leaf_matches(leaf("f", "contains", json!(3)), json!([1, 2, 3.0])));
    assert!(leaf_matches(leaf("f", "contains", json!(true)), json!([false, true])));
    assert!(!leaf_matches(leaf("f", "contains", json!("vip")), json!(["vipx", "v"])));
    assert!(!leaf_matches(leaf("f", "contains", json!("vip")), json!([])));
}

#[test]
fn contains_with_an_empty_string_matches_any_text() {
    assert!(leaf_matches(leaf("f", "contains", json!("")), json!("")));
    assert!(leaf_matches(leaf_ci("f", "contains", json!("")), json!("ABC")));
}

#[test]
fn not_contains_matches_text_or_arrays_without_the_value() {
    assert!(leaf_matches(leaf("f", "not_contains", json!("spam")), json!("hello")));
    assert!(!leaf_matches(leaf("f", "not_contains", json!("spam")), json!("buy spam")));
    assert!(leaf_matches(leaf("f", "not_contains", json!("bot")), json!(["vip"])));
    assert!(!leaf_matches(leaf("f", "not_contains", json!("bot")), json!(["bot"])));
}

#[test]
fn starts_with_checks_the_prefix() {
    assert!(leaf_matches(leaf("f", "starts_with", json!("/start")), json!("/start now")));
    assert!(!leaf_matches(leaf("f", "starts_with", json!("/start")), json!("now /start")));
    assert!(!leaf_matches(leaf("f", "starts_with", json!("/start")), json!("/st")));
}

#[test]
fn ends_with_checks_the_suffix() {
    assert!(leaf_matches(leaf("f", "ends_with", json!("?")), json!("can you help?")));
    assert!(!leaf_matches(leaf("f", "ends_with", json!("?")), json!("help!")));
    assert!(!leaf_matches(leaf("f", "ends_with", json!("long suffix")), json!("fix")));
}

#[test]
fn matches_runs_the_regex_anywhere_in_the_text() {
    let order_number = leaf("f", "matches", json!(r"order #\d{5}\b"));
    assert!(leaf_matches(order_number.clone(), json!("where is order #12345?")));
    assert!(!leaf_matches(order_number, json!("where is order #12?")));
    assert!(leaf_matches(leaf("f", "matches", json!("^hi$")), json!("hi")));
    assert!(!leaf_matches(leaf("f", "matches", json!("^hi$")), json!("hi there")));
}

#[test]
fn matches_can_be_case_insensitive() {
    assert!(leaf_matches(leaf_ci("f", "matches", json!("^refund")), json!("REFUND please")));
    assert!(!leaf_matches(leaf("f", "matches", json!("^refund")), json!("REFUND please")));
}

#[test]
fn gt_gte_lt_lte_compare_numbers() {
    assert!(leaf_matches(leaf("f", "gt", json!(3)), json!(3.5)));
    assert!(!leaf_matches(leaf("f", "gt", json!(3)), json!(3)));
    assert!(leaf_matches(leaf("f", "gte", json!(3)), json!(3.0)));
    assert!(!leaf_matches(leaf("f", "gte", json!(3)), json!(2)));
    assert!(leaf_matches(leaf("f", "lt", json!(0)), json!(-1)));
    assert!(!leaf_matches(leaf("f", "lt", json!(0)), json!(0)));
    assert!(leaf_matches(leaf("f", "lte", json!(0)), json!(0)));
    assert!(!leaf_matches(leaf("f", "lte", json!(0)), json!(0.1)));
}

#[test]
fn gt_gte_lt_lte_compare_iso_timestamps_as_strings() {
    let after = leaf("f", "gt", json!("2024-05-01T00:00:00Z"));
    assert!(leaf_matches(after.clone(), json!("2024-05-01T09:30:00Z")));
    assert!(!leaf_matches(after, json!("2024-04-30T23:59:59Z")));
    assert!(leaf_matches(leaf("f", "gte", json!("b")), json!("b")));
    assert!(leaf_matches(leaf("f", "lt", json!("b")), json!("a")));
    assert!(!leaf_matches(leaf("f", "lte", json!("b")), json!("c")));
}

#[test]
fn exists_is_true_for_any_present_value_including_null() {
    let exists = bare_leaf("f", "exists");
    assert!(leaf_matches(exists.clone(), json!("x")));
    assert!(leaf_matches(exists.clone(), json!(null)));
    assert!(leaf_matches(exists.clone(), json!(false)));
    assert!(!conditions(exists).matches(&json!({})));
}

#[test]
fn not_exists_is_true_only_when_the_path_does_not_resolve() {
    let absent = bare_leaf("f", "not_exists");
    assert!(conditions(absent.clone()).matches(&json!({})));
    assert!(conditions(absent.clone()).matches(&json!("not an object")));
    assert!(!leaf_matches(absent.clone(), json!(null)));
    assert!(!leaf_matches(absent, json!(0)));
}

#[test]
fn exists_and_not_exists_accept_an_explicit_null_value() {
    assert!(leaf_matches(leaf("f", "exists", json!(null)), json!(1)));
    assert!(conditions(leaf("f", "not_exists", json!(null))).matches(&json!({})));
}

// ---------------------------------------------------------------------------------------------
// Missing fields and type mismatches
// ---------------------------------------------------------------------------------------------

#[test]
fn it_never_fires_on_a_missing_field_except_for_not_exists() {
    // Given one leaf per operator on the field "f"
    for (operator, condition) in one_leaf_per_operator() {
        let trigger = conditions(condition);
        // When the event has no "f" at all (or is not even an object)
        for detail in [json!({}), json!({ "g": "x" }), json!(null), json!(["x"])] {
            // Then only not_exists fires, so negated operators stay silent too
            assert_eq!(trigger.matches(&detail), operator == "not_exists", "{operator} on {detail}");
        }
    }
}

#[test]
fn negated_operators_do_not_fire_on_a_missing_field() {
    let detail = json!({ "message": {} });
    for condition in [
        leaf("message.text", "neq", json!("hello")),
        leaf("message.text", "not_in", json!(["hello"])),
        leaf("message.text", "not_contains", json!("spam")),
    ] {
        assert!(!conditions(condition).matches(&detail));
    }
}

#[test]
fn it_treats_type_mismatches_as_non_matches() {
    let cases = [
        (leaf("f", "gt", json!(10)), json!("20")),
        (leaf("f", "lt", json!("b")), json!(1)),
        (leaf("f", "gte", json!(1)), json!(true)),
        (leaf("f", "lte", json!(1)), json!(null)),
        (leaf("f", "gt", json!(1)), json!([2])),
        (leaf("f", "starts_with", json!("1")), json!(12)),
        (leaf("f", "ends_with", json!("e")), json!(true)),
        (leaf("f", "starts_with", json!("a")), json!(["abc"])),
        (leaf("f", "matches", json!(".*")), json!(5)),
        (leaf("f", "matches", json!(".*")), json!(null)),
        (leaf("f", "matches", json!(".*")), json!({ "a": "b" })),
        (leaf("f", "contains", json!("a")), json!(12)),
        (leaf("f", "contains", json!(1)), json!("123")),
        (leaf("f", "contains", json!("a")), json!({ "a": 1 })),
        (leaf("f", "in", json!(["a"])), json!({ "a": 1 })),
        (leaf("f", "eq", json!("true")), json!(true)),
    ];
    for (condition, actual) in cases {
        assert!(!leaf_matches(condition.clone(), actual.clone()), "{condition} should not match {actual}");
    }
}

#[test]
fn not_contains_is_false_when_containment_makes_no_sense() {
    // A number field is neither text nor a list, so "does not contain" cannot be asserted.
    assert!(!leaf_matches(leaf("f", "not_contains", json!("a")), json!(12)));
    assert!(!leaf_matches(leaf("f", "not_contains", json!("a")), json!(null)));
    assert!(!leaf_matches(leaf("f", "not_contains", json!(1)), json!("abc")));
}

// ---------------------------------------------------------------------------------------------
// Case-insensitivity and Unicode
// ---------------------------------------------------------------------------------------------

#[test]
fn case_insensitive_applies_to_every_text_operator() {
    assert!(leaf_matches(leaf_ci("f", "eq", json!("OPEN")), json!("open")));
    assert!(!leaf_matches(leaf_ci("f", "neq", json!("OPEN")), json!("Open")));
    assert!(leaf_matches(leaf_ci("f", "in", json!(["Facebook", 1])), json!("FACEBOOK")));
    assert!(!leaf_matches(leaf_ci("f", "not_in", json!(["Spam"])), json!("sPaM")));
    assert!(leaf_matches(leaf_ci("f", "contains", json!("Help")), json!("HELP ME")));
    assert!(leaf_matches(leaf_ci("f", "contains", json!("Vip")), json!(["VIP"])));
    assert!(!leaf_matches(leaf_ci("f", "not_contains", json!("Help")), json!("hElP")));
    assert!(leaf_matches(leaf_ci("f", "starts_with", json!("/Start")), json!("/START x")));
    assert!(leaf_matches(leaf_ci("f", "ends_with", json!("THANKS")), json!("ok thanks")));
}

#[test]
fn case_insensitive_eq_applies_inside_structured_values() {
    assert!(leaf_matches(leaf_ci("f", "eq", json!(["A", { "k": "B" }])), json!(["a", { "k": "b" }])));
    // Object keys are names, not text, so they still match exactly.
    assert!(!leaf_matches(leaf_ci("f", "eq", json!({ "K": 1 })), json!({ "k": 1 })));
}

#[test]
fn case_insensitive_handles_accented_letters() {
    assert!(leaf_matches(leaf_ci("f", "eq", json!("ÉCOLE")), json!("école")));
    assert!(leaf_matches(leaf_ci("f", "eq", json!("école")), json!("ÉCOLE")));
    assert!(!leaf_matches(leaf("f", "eq", json!("ÉCOLE")), json!("école")));
    assert!(leaf_matches(leaf_ci("f", "contains", json!("über")), json!("FRAGE ÜBER RECHNUNG")));
    assert!(leaf_matches(leaf_ci("f", "matches", json!("^école$")), json!("ÉCOLE")));
}

#[test]
fn case_insensitive_follows_to_lowercase_for_sharp_s() {
    // to_lowercase never expands ß/SS: "STRASSE" and "straße" stay different...
    assert!(!leaf_matches(leaf_ci("f", "eq", json!("straße")), json!("STRASSE")));
    // ...while the capital sharp s (U+1E9E) lowercases to ß.
    assert!(leaf_matches(leaf_ci("f", "eq", json!("straße")), json!("STRA\u{1E9E}E")));
}

#[test]
fn case_insensitive_follows_to_lowercase_for_turkish_i() {
    // "İ" (dotted capital I) lowercases to "i" + combining dot, so it is not plain "i".
    assert!(!leaf_matches(leaf_ci("f", "eq", json!("istanbul")), json!("İSTANBUL")));
    assert!(leaf_matches(leaf_ci("f", "eq", json!("i\u{307}stanbul")), json!("İSTANBUL")));
    // "I" lowercases to "i", never to the dotless "ı".
    assert!(!leaf_matches(leaf_ci("f", "eq", json!("ısparta")), json!("ISPARTA")));
    assert!(leaf_matches(leaf_ci("f", "eq", json!("ısparta")), json!("ıSPARTA")));
}

#[test]
fn case_insensitive_follows_to_lowercase_for_the_kelvin_sign() {
    // The Kelvin sign (U+212A) lowercases to ASCII "k", in the condition and in the event alike.
    assert!(leaf_matches(leaf_ci("f", "eq", json!("\u{212A}ELVIN")), json!("Kelvin")));
    assert!(leaf_matches(leaf_ci("f", "eq", json!("kelvin")), json!("\u{212A}elvin")));
}

#[test]
fn case_insensitive_follows_to_lowercase_for_greek_final_sigma() {
    assert!(leaf_matches(leaf_ci("f", "eq", json!("ΟΔΟΣ")), json!("οδος")));
    assert!(leaf_matches(leaf_ci("f", "eq", json!("οδος")), json!("ΟΔΟΣ")));
}

#[test]
fn it_finds_emoji_as_substrings_prefixes_and_suffixes() {
    assert!(leaf_matches(leaf("f", "contains", json!("🔥")), json!("this is 🔥 hot")));
    assert!(!leaf_matches(leaf("f", "contains", json!("🔥")), json!("this is cold")));
    assert!(leaf_matches(leaf("f", "starts_with", json!("👋")), json!("👋 hi")));
    let family = "👨\u{200D}👩\u{200D}👧";
    assert!(leaf_matches(leaf("f", "ends_with", json!(family)), json!(format!("we are {family}"))));
    assert!(leaf_matches(leaf_ci("f", "contains", json!("HÉ 🔥")), json!("oh hé 🔥!")));
    assert!(leaf_matches(leaf("f", "matches", json!("^.$")), json!("🔥")));
}

// ---------------------------------------------------------------------------------------------
// Parse errors, each with its exact pointer
// ---------------------------------------------------------------------------------------------

#[test]
fn it_rejects_an_unknown_operator_with_its_pointer() {
    let err = rejection(json!({
        "all": [
            leaf("a", "eq", json!(1)),
            { "any": [leaf("b", "equals", json!(1))] }
        ]
    }));
    assert_eq!(err.pointer, "/all/1/any/0/operator");
    assert!(err.message.contains("\"equals\""), "{}", err.message);
    // The message lists what would have been valid.
    for valid in ["eq", "not_in", "starts_with", "matches", "lte", "not_exists"] {
        assert!(err.message.contains(valid), "{}", err.message);
    }
}

#[test]
fn it_rejects_a_non_string_or_missing_operator() {
    assert_eq!(rejection(json!({ "field": "a", "operator": 3 })).pointer, "/operator");
    assert_eq!(rejection(json!({ "all": [{ "field": "a", "value": 3 }] })).pointer, "/all/0/operator");
}

#[test]
fn it_rejects_a_bad_regex_with_its_pointer() {
    let err = rejection(json!({ "any": [leaf("message.text", "matches", json!("(unclosed"))] }));
    assert_eq!(err.pointer, "/any/0/value");
    assert!(err.message.contains("invalid regular expression"), "{}", err.message);
}

#[test]
fn it_rejects_a_regex_pattern_longer_than_1024_bytes() {
    assert!(Conditions::parse(&leaf("f", "matches", json!("a".repeat(1024)))).is_ok());
    let err = rejection(leaf("f", "matches", json!("a".repeat(1025))));
    assert_eq!(err.pointer, "/value");
    assert!(err.message.contains("1024"), "{}", err.message);
}

#[test]
fn it_rejects_a_regex_that_compiles_too_large() {
    // Short to write, but Unicode \w repeated this often compiles far beyond the size budget.
    let err = rejection(leaf("f", "matches", json!(r"(\w{100}){100}")));
    assert_eq!(err.pointer, "/value");
    assert!(err.message.contains("invalid regular expression"), "{}", err.message);
}

#[test]
fn it_rejects_a_regex_nested_deeper_than_the_limit_rather_than_overflow_the_stack() {
    // Given a pattern whose repetitions nest 200 deep (fuzzing found one: the regex crate's own
    // limit is 250, and compiling it overflowed this 2 MB test thread in a debug build)
    let deep = format!("a{}", "*".repeat(200));
    // when it is parsed, then it is refused at its pointer, as any bad pattern is
    let err = rejection(leaf("f", "matches", json!(deep)));
    assert_eq!(err.pointer, "/value");
    assert!(err.message.contains("maximum number of nested"), "{}", err.message);
    // and a pattern at the limit still compiles
    let limit = usize::try_from(MAX_PATTERN_NESTING).unwrap();
    assert!(Conditions::parse(&leaf("f", "matches", json!(format!("a{}", "*".repeat(limit))))).is_ok());
    assert!(Conditions::parse(&leaf("f", "matches", json!(format!("a{}", "*".repeat(limit + 1))))).is_err());
}

#[test]
fn it_rejects_a_missing_value_for_eq_and_neq() {
    let err = rejection(json!({ "all": [bare_leaf("a", "eq")] }));
    assert_eq!(err.pointer, "/all/0/value");
    assert_eq!(rejection(bare_leaf("a", "neq")).pointer, "/value");
}

#[test]
fn it_rejects_in_and_not_in_without_a_non_empty_array_of_scalars() {
    for (value, pointer) in [
        (json!("facebook"), "/all/0/value"),
        (json!([]), "/all/0/value"),
        (json!(null), "/all/0/value"),
        (json!(["a", ["b"]]), "/all/0/value/1"),
        (json!([{ "a": 1 }]), "/all/0/value/0"),
        (json!(["a", null]), "/all/0/value/1"),
    ] {
        for operator in ["in", "not_in"] {
            let err = rejection(json!({ "all": [leaf("a", operator, value.clone())] }));
            assert_eq!(err.pointer, pointer, "{operator} {value}");
        }
    }
    let err = rejection(json!({ "all": [bare_leaf("a", "in")] }));
    assert_eq!(err.pointer, "/all/0/value");
}

#[test]
fn it_rejects_contains_and_not_contains_without_a_scalar() {
    for operator in ["contains", "not_contains"] {
        for value in [json!(["a"]), json!({ "a": 1 }), json!(null)] {
            assert_eq!(rejection(leaf("f", operator, value)).pointer, "/value");
        }
        assert_eq!(rejection(bare_leaf("f", operator)).pointer, "/value");
    }
}

#[test]
fn it_rejects_starts_with_and_ends_with_without_a_string() {
    for operator in ["starts_with", "ends_with"] {
        for value in [json!(1), json!(true), json!(["a"]), json!(null)] {
            let err = rejection(json!({ "any": [{}, leaf("f", operator, value)] }));
            assert_eq!(err.pointer, "/any/1/value");
        }
        assert_eq!(rejection(bare_leaf("f", operator)).pointer, "/value");
    }
}

#[test]
fn it_rejects_matches_without_a_string_pattern() {
    for value in [json!(1), json!(["a"]), json!(null)] {
        assert_eq!(rejection(leaf("f", "matches", value)).pointer, "/value");
    }
    assert_eq!(rejection(bare_leaf("f", "matches")).pointer, "/value");
}

#[test]
fn it_rejects_ordering_operators_without_a_number_or_string() {
    for operator in ["gt", "gte", "lt", "lte"] {
        for value in [json!(true), json!(null), json!([1]), json!({ "n": 1 })] {
            assert_eq!(rejection(leaf("f", operator, value)).pointer, "/value");
        }
        assert_eq!(rejection(bare_leaf("f", operator)).pointer, "/value");
    }
}

#[test]
fn it_rejects_a_value_on_exists_and_not_exists() {
    for operator in ["exists", "not_exists"] {
        let err = rejection(json!({ "all": [{ "all": [leaf("f", operator, json!(true))] }] }));
        assert_eq!(err.pointer, "/all/0/all/0/value");
        assert!(err.message.contains("takes no value"), "{}", err.message);
    }
}

#[test]
fn it_rejects_an_unknown_key_in_a_leaf_naming_it() {
    let err = rejection(json!({ "all": [{ "field": "a", "operator": "exists", "negate": true }] }));
    assert_eq!(err.pointer, "/all/0/negate");
    assert!(err.message.contains("\"negate\""), "{}", err.message);
}

#[test]
fn it_rejects_an_unknown_key_in_a_group_naming_it() {
    let err = rejection(json!({ "all": [], "none": [] }));
    assert_eq!(err.pointer, "/none");
    assert!(err.message.contains("\"none\""), "{}", err.message);
}

#[test]
fn it_rejects_leaf_keys_without_field_or_operator_as_unknown_group_keys() {
    let err = rejection(json!({ "any": [{ "value": "x" }] }));
    assert_eq!(err.pointer, "/any/0/value");
}

#[test]
fn it_rejects_a_node_mixing_group_and_leaf_keys() {
    let err = rejection(json!({ "all": [{ "field": "a", "operator": "exists", "any": [] }] }));
    assert_eq!(err.pointer, "/all/0/any");
    assert!(err.message.contains("\"any\""), "{}", err.message);
}

#[test]
fn it_escapes_unknown_keys_in_the_pointer() {
    let err = rejection(json!({ "a/b~c": 1 }));
    assert_eq!(err.pointer, "/a~1b~0c");
}

#[test]
fn it_rejects_non_object_nodes() {
    for root in [json!([]), json!("all"), json!(null), json!(1), json!(true)] {
        assert_eq!(rejection(root).pointer, "");
    }
    assert_eq!(rejection(json!({ "all": [{}, "x"] })).pointer, "/all/1");
    assert_eq!(rejection(json!({ "any": [[leaf("a", "eq", json!(1))]] })).pointer, "/any/0");
}

#[test]
fn it_rejects_all_or_any_that_is_not_an_array() {
    assert_eq!(rejection(json!({ "all": leaf("a", "eq", json!(1)) })).pointer, "/all");
    assert_eq!(rejection(json!({ "all": [{ "any": null }] })).pointer, "/all/0/any");
}

#[test]
fn it_rejects_a_non_boolean_case_insensitive() {
    for flag in [json!("true"), json!(1), json!(null)] {
        let err = rejection(json!({
            "all": [{ "field": "a", "operator": "eq", "value": "x", "caseInsensitive": flag }]
        }));
        assert_eq!(err.pointer, "/all/0/caseInsensitive");
    }
}

#[test]
fn it_rejects_an_empty_field_path() {
    let err = rejection(json!({ "all": [leaf("", "eq", json!(1))] }));
    assert_eq!(err.pointer, "/all/0/field");
}

#[test]
fn it_rejects_a_field_path_with_an_empty_segment() {
    for path in ["a..b", ".a", "a.", "."] {
        assert_eq!(rejection(leaf(path, "eq", json!(1))).pointer, "/field", "{path}");
    }
}

#[test]
fn it_rejects_a_field_path_with_more_than_sixteen_segments() {
    let err = rejection(leaf(&vec!["a"; 17].join("."), "exists", json!(null)));
    assert_eq!(err.pointer, "/field");
    assert!(err.message.contains("16"), "{}", err.message);
}

#[test]
fn it_rejects_a_missing_or_non_string_field() {
    assert_eq!(rejection(json!({ "operator": "exists" })).pointer, "/field");
    assert_eq!(rejection(json!({ "field": ["a"], "operator": "exists" })).pointer, "/field");
}

/// `levels` groups, each holding the next in `all`, around one leaf.
fn nested(levels: usize) -> Value {
    let mut node = bare_leaf("a", "exists");
    for _ in 0..levels {
        node = json!({ "all": [node] });
    }
    node
}

#[test]
fn it_accepts_conditions_nested_exactly_to_the_depth_limit() {
    // The root counts as depth 1, so the leaf below MAX - 1 groups sits at MAX.
    let trigger = conditions(nested(MAX_CONDITION_DEPTH - 1));
    assert!(trigger.matches(&json!({ "a": 1 })));
    assert!(!trigger.matches(&json!({})));
}

#[test]
fn it_rejects_conditions_nested_too_deeply_at_the_node_that_exceeds() {
    let err = rejection(nested(MAX_CONDITION_DEPTH));
    assert_eq!(err.pointer, "/all/0".repeat(MAX_CONDITION_DEPTH));
    assert!(err.message.contains(&MAX_CONDITION_DEPTH.to_string()), "{}", err.message);
}

#[test]
fn it_accepts_exactly_the_maximum_number_of_nodes() {
    // The root group plus MAX - 1 leaves.
    let leaves = vec![bare_leaf("a", "exists"); MAX_CONDITION_NODES - 1];
    assert!(Conditions::parse(&json!({ "all": leaves })).is_ok());
}

#[test]
fn it_rejects_too_many_nodes_at_the_first_node_over_the_limit() {
    let leaves = vec![bare_leaf("a", "exists"); MAX_CONDITION_NODES];
    let err = rejection(json!({ "all": leaves }));
    assert_eq!(err.pointer, format!("/all/{}", MAX_CONDITION_NODES - 1));
    assert!(err.message.contains(&MAX_CONDITION_NODES.to_string()), "{}", err.message);
}

#[test]
fn it_counts_nodes_across_all_and_any_and_nested_groups() {
    let half = vec![bare_leaf("a", "exists"); MAX_CONDITION_NODES / 2];
    // Root + nested group + 128 leaves in all + 128 in any = 258 nodes.
    let err = rejection(json!({ "all": [{ "all": half.clone() }], "any": half }));
    assert_eq!(err.pointer, format!("/any/{}", MAX_CONDITION_NODES / 2 - 2));
}

#[test]
fn it_publishes_the_documented_limits() {
    assert_eq!(MAX_CONDITION_DEPTH, 8);
    assert_eq!(MAX_CONDITION_NODES, 256);
}

#[test]
fn it_displays_errors_as_pointer_then_message() {
    let err = rejection(json!({ "all": [leaf("a", "nope", json!(1))] }));
    assert!(err.to_string().starts_with("/all/0/operator: unknown operator"));
    // The root pointer is "" but is shown as "/" so the location is never blank.
    let root = rejection(json!([]));
    assert_eq!(root.pointer, "");
    assert!(root.to_string().starts_with("/: "), "{root}");
}

#[test]
fn it_reports_the_first_error_in_document_order() {
    let err = rejection(json!({
        "all": [leaf("a", "eq", json!(1)), leaf("b", "bogus", json!(1))],
        "any": [leaf("", "eq", json!(1))]
    }));
    assert_eq!(err.pointer, "/all/1/operator");
}

#[test]
fn it_accepts_case_insensitive_on_operators_that_ignore_it() {
    assert!(leaf_matches(leaf_ci("f", "gt", json!("B")), json!("a")), "byte order: 'a' > 'B'");
    assert!(
        conditions(json!({ "field": "f", "operator": "exists", "caseInsensitive": false })).matches(&json!({ "f": 1 }))
    );
}

// ---------------------------------------------------------------------------------------------
// Serde
// ---------------------------------------------------------------------------------------------

#[test]
fn it_serializes_back_to_the_original_json() {
    let original = brief_example();
    let trigger = conditions(original.clone());
    assert_eq!(serde_json::to_value(&trigger).unwrap(), original);
    assert_eq!(trigger.as_json(), &original);
    let text = serde_json::to_string(&trigger).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), original);
}

#[test]
fn it_round_trips_through_serde() {
    let trigger = conditions(brief_example());
    let text = serde_json::to_string(&trigger).unwrap();
    let back: Conditions = serde_json::from_str(&text).unwrap();
    assert_eq!(back, trigger);
    assert!(back.matches(&instagram_event("I need help")));
    assert!(!back.matches(&instagram_event("hello")));
}

#[test]
fn it_fails_to_deserialize_invalid_conditions_with_the_pointer_in_the_message() {
    let text = r#"{"all":[{"field":"a","operator":"eq","value":1},{"field":"b","operator":"like","value":"x"}]}"#;
    let err = serde_json::from_str::<Conditions>(text).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("/all/1/operator"), "{message}");
    assert!(message.contains("unknown operator"), "{message}");
}

#[test]
fn it_deserializes_as_a_field_of_a_larger_document() {
    #[derive(serde::Deserialize)]
    struct Trigger {
        conditions: Conditions,
    }
    let trigger: Trigger = serde_json::from_value(json!({ "conditions": brief_example() })).unwrap();
    assert_eq!(trigger.conditions.as_json(), &brief_example());

    let bad = serde_json::from_value::<Trigger>(json!({ "conditions": { "all": "x" } }));
    assert!(bad.err().unwrap().to_string().contains("/all"));
}

#[test]
fn it_compares_conditions_by_their_json() {
    assert_eq!(conditions(brief_example()), conditions(brief_example()));
    assert_ne!(conditions(json!({})), conditions(json!({ "all": [] })));
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// Strings that often mean something to the parser, mixed with arbitrary ones.
fn interesting_string() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "all",
            "any",
            "field",
            "operator",
            "value",
            "caseInsensitive",
            "eq",
            "neq",
            "in",
            "not_in",
            "contains",
            "not_contains",
            "starts_with",
            "ends_with",
            "matches",
            "gt",
            "gte",
            "lt",
            "lte",
            "exists",
            "not_exists",
            "a",
            "a.b",
            "a.0",
            "",
            ".",
            "a..b",
            "(",
            "[",
            "\\",
            "^.*$",
            "(?i)x",
            "ÉCOLE",
            "İ",
            "🔥",
        ])
        .prop_map(String::from),
        any::<String>(),
    ]
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        interesting_string().prop_map(Value::from),
    ];
    scalar.prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(interesting_string(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Details shaped like events: objects with keys the generated paths use.
fn arbitrary_detail() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec!["a", "b", "c", "0", "1", "text"]).prop_map(String::from);
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-100i64..100).prop_map(Value::from),
        (-100f64..100.0).prop_map(Value::from),
        interesting_string().prop_map(Value::from),
        "[a-cA-C]{0,4}".prop_map(Value::from),
    ];
    let value = scalar.prop_recursive(4, 48, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..5)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    });
    prop_oneof![
        1 => value.clone(),
        4 => prop::collection::btree_map(
            prop::sample::select(vec!["a", "b", "c", "0"]).prop_map(String::from),
            value,
            0..4,
        )
        .prop_map(|map| Value::Object(map.into_iter().collect())),
    ]
}

fn arbitrary_path() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "a.b", "a.0", "a.1.b", "b.text", "c.a.0", "0"]).prop_map(String::from)
}

fn arbitrary_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::from),
        (-100i64..100).prop_map(Value::from),
        (-100f64..100.0).prop_map(Value::from),
        "[a-cA-C]{0,4}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ]
}

/// `(operator, value)` pairs every one of which parses.
fn valid_test() -> impl Strategy<Value = (&'static str, Option<Value>)> {
    let regex = prop::sample::select(vec!["^a", "help|support", r"\d+", "(?i)école", ".*", ""]);
    let bound = prop_oneof![(-100i64..100).prop_map(Value::from), "[a-c]{0,3}".prop_map(Value::from)];
    let options = prop::collection::vec(arbitrary_scalar(), 1..4).prop_map(Value::Array);
    prop_oneof![
        (prop::sample::select(vec!["eq", "neq"]), arbitrary_detail()).prop_map(|(op, v)| (op, Some(v))),
        (prop::sample::select(vec!["in", "not_in"]), options).prop_map(|(op, v)| (op, Some(v))),
        (prop::sample::select(vec!["contains", "not_contains"]), arbitrary_scalar()).prop_map(|(op, v)| (op, Some(v))),
        (prop::sample::select(vec!["starts_with", "ends_with"]), "[a-cA-Cé🔥]{0,3}")
            .prop_map(|(op, v)| (op, Some(Value::from(v)))),
        regex.prop_map(|r| ("matches", Some(Value::from(r)))),
        (prop::sample::select(vec!["gt", "gte", "lt", "lte"]), bound).prop_map(|(op, v)| (op, Some(v))),
        prop::sample::select(vec!["exists", "not_exists"]).prop_map(|op| (op, None)),
    ]
}

fn valid_leaf() -> impl Strategy<Value = Value> {
    (arbitrary_path(), valid_test(), any::<bool>()).prop_map(|(field, (operator, value), ci)| {
        let mut node = json!({ "field": field, "operator": operator, "caseInsensitive": ci });
        if let Some(value) = value {
            node["value"] = value;
        }
        node
    })
}

fn valid_conditions() -> impl Strategy<Value = Value> {
    // At most 3 levels of groups with at most 5 children each stays well inside both limits.
    valid_leaf().prop_recursive(3, 40, 5, |inner| {
        (
            prop::option::of(prop::collection::vec(inner.clone(), 0..3)),
            prop::option::of(prop::collection::vec(inner, 0..3)),
        )
            .prop_map(|(all, any)| {
                let mut group = serde_json::Map::new();
                if let Some(all) = all {
                    group.insert("all".into(), Value::Array(all));
                }
                if let Some(any) = any {
                    group.insert("any".into(), Value::Array(any));
                }
                Value::Object(group)
            })
    })
}

fn leaf_with(field: &str, operator: &str, value: Option<&Value>, ci: bool) -> Conditions {
    let mut node = json!({ "field": field, "operator": operator, "caseInsensitive": ci });
    if let Some(value) = value {
        node["value"] = value.clone();
    }
    conditions(node)
}

proptest! {
    #[test]
    fn parse_never_panics_on_arbitrary_json(value in arbitrary_json()) {
        // Whatever a tenant sends, parsing answers with conditions or an error, and an accepted
        // tree always serializes back to what was sent.
        if let Ok(parsed) = Conditions::parse(&value) {
            prop_assert_eq!(parsed.as_json(), &value);
        }
    }

    #[test]
    fn parse_never_panics_on_arbitrary_leaf_shaped_objects(
        field in prop_oneof![arbitrary_path(), interesting_string()],
        operator in interesting_string(),
        value in prop::option::of(arbitrary_json()),
        ci in prop::option::of(arbitrary_json()),
    ) {
        let mut node = json!({ "field": field, "operator": operator });
        if let Some(value) = value {
            node["value"] = value;
        }
        if let Some(ci) = ci {
            node["caseInsensitive"] = ci;
        }
        let _ = Conditions::parse(&node);
    }

    #[test]
    fn valid_conditions_parse_and_never_panic_when_matched(
        value in valid_conditions(),
        details in prop::collection::vec(arbitrary_detail(), 1..8),
    ) {
        let parsed = Conditions::parse(&value);
        prop_assert!(parsed.is_ok(), "{value} rejected: {:?}", parsed.err());
        let parsed = parsed.unwrap();
        for detail in &details {
            let _ = parsed.matches(detail);
        }
        prop_assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
    }

    #[test]
    fn not_exists_is_the_negation_of_exists(
        field in arbitrary_path(),
        ci in any::<bool>(),
        detail in arbitrary_detail(),
    ) {
        let exists = leaf_with(&field, "exists", None, ci);
        let not_exists = leaf_with(&field, "not_exists", None, ci);
        prop_assert_ne!(exists.matches(&detail), not_exists.matches(&detail));
    }

    #[test]
    fn neq_is_the_negation_of_eq_on_a_present_string(
        actual in prop_oneof!["[a-cA-C]{0,3}", any::<String>()],
        expected in prop_oneof!["[a-cA-C]{0,3}", any::<String>()],
        ci in any::<bool>(),
    ) {
        let detail = json!({ "a": { "b": actual } });
        let value = Value::from(expected);
        let eq = leaf_with("a.b", "eq", Some(&value), ci);
        let neq = leaf_with("a.b", "neq", Some(&value), ci);
        prop_assert_ne!(eq.matches(&detail), neq.matches(&detail));
    }

    #[test]
    fn negated_operators_are_exact_negations_on_present_values(
        actual in arbitrary_detail(),
        value in arbitrary_detail(),
        options in prop::collection::vec(arbitrary_scalar(), 1..4),
        ci in any::<bool>(),
    ) {
        // eq/neq and in/not_in are defined for every present value, whatever its type.
        let detail = json!({ "a": actual });
        let eq = leaf_with("a", "eq", Some(&value), ci);
        let neq = leaf_with("a", "neq", Some(&value), ci);
        prop_assert_ne!(eq.matches(&detail), neq.matches(&detail));
        let options = Value::Array(options);
        let is_in = leaf_with("a", "in", Some(&options), ci);
        let not_in = leaf_with("a", "not_in", Some(&options), ci);
        prop_assert_ne!(is_in.matches(&detail), not_in.matches(&detail));
    }

    #[test]
    fn case_insensitive_text_operators_agree_with_lowercasing_both_sides(
        // Pure ASCII and mixed alphabets exercise both the allocation-free and the general path.
        actual in prop_oneof!["[a-cA-C ]{0,6}", "[a-cA-CéÉßİıK\u{212A}🔥 ]{0,6}", any::<String>()],
        needle in prop_oneof!["[a-cA-C]{0,3}", "[a-cA-CéÉßİıK\u{212A}🔥 ]{0,3}", any::<String>()],
    ) {
        let lower_actual = actual.to_lowercase();
        let lower_needle = needle.to_lowercase();
        let detail = json!({ "a": actual });
        let value = Value::from(needle);
        let check = |operator: &str, expected: bool| {
            leaf_with("a", operator, Some(&value), true).matches(&detail) == expected
        };
        prop_assert!(check("eq", lower_actual == lower_needle));
        prop_assert!(check("contains", lower_actual.contains(&lower_needle)));
        prop_assert!(check("starts_with", lower_actual.starts_with(&lower_needle)));
        prop_assert!(check("ends_with", lower_actual.ends_with(&lower_needle)));
    }
}
