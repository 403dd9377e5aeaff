//! Properties of event parsing and history truncation over generated inputs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use serde_json::{Value, json};
use switchboard_domain::InboundEvent;
use switchboard_domain::message::{ContentBlock, Message, Role, alternate, history_window, is_customer_turn};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("id".to_owned()),
                    Just("source".to_owned()),
                    Just("detail-type".to_owned()),
                    Just("detail".to_owned()),
                    Just("tenantId".to_owned()),
                    Just("message".to_owned()),
                    Just("text".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A transcript as the executor writes it: customer messages, answers, and tool calls each
/// followed by its result, with distinct tool-use ids; texts of any length and script.
fn arb_transcript() -> impl Strategy<Value = Vec<Message>> {
    prop::collection::vec((0u8..4, "[a-zé注🙂 ]{0,120}"), 0..40).prop_map(|parts| {
        let mut history = Vec::new();
        for (i, (kind, text)) in parts.into_iter().enumerate() {
            match kind {
                0 => history.push(Message::user_text(text)),
                1 => history.push(Message::assistant_text(text)),
                _ => {
                    let id = format!("t{i}");
                    history.push(Message {
                        role: Role::Assistant,
                        content: vec![ContentBlock::ToolUse {
                            tool_use_id: id.clone(),
                            name: "lookup".into(),
                            input: json!({ "q": text }),
                        }],
                    });
                    history.push(Message {
                        role: Role::User,
                        content: vec![ContentBlock::ToolResult {
                            tool_use_id: id,
                            content: json!(text),
                            is_error: false,
                        }],
                    });
                }
            }
        }
        history
    })
}

/// A message of a random kind: user text, assistant text, assistant tool call, tool result.
fn arb_message() -> impl Strategy<Value = Message> {
    (0u8..4, ".{0,40}").prop_map(|(kind, text)| match kind {
        0 => Message::user_text(text),
        1 => Message::assistant_text(text),
        2 => Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                tool_use_id: "t".into(),
                name: "get_context".into(),
                input: json!({}),
            }],
        },
        _ => Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult { tool_use_id: "t".into(), content: json!(text), is_error: false }],
        },
    })
}

proptest! {
    #[test]
    fn parsing_any_json_never_panics_and_errors_always_name_a_field(v in arb_json()) {
        if let Err(errors) = InboundEvent::parse(&v) {
            prop_assert!(!errors.0.is_empty());
            for e in &errors.0 {
                prop_assert!(e.pointer.is_empty() || e.pointer.starts_with('/'));
                prop_assert!(!e.detail.is_empty());
            }
        }
    }

    #[test]
    fn parsing_any_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = InboundEvent::parse_bytes(&bytes);
    }

    #[test]
    fn the_history_window_is_a_bounded_suffix_that_opens_on_a_user_turn(
        history in prop::collection::vec(arb_message(), 0..40),
        max_messages in 0usize..25,
        max_tokens in 0u32..400,
    ) {
        let window = history_window(&history, max_messages, max_tokens);
        // a suffix of the history
        prop_assert!(history.ends_with(window));
        // within both budgets
        prop_assert!(window.len() <= max_messages);
        prop_assert!(window.iter().map(Message::estimated_tokens).sum::<u32>() <= max_tokens);
        // never opening on an assistant turn or a tool result (whose call would be cut off)
        if let Some(first) = window.first() {
            prop_assert_eq!(first.role, Role::User);
            prop_assert!(!first.has_tool_results());
        }
    }

    /// Under any budget, however tiny, a tool result in the window always has the call it answers
    /// right before it, and the window merged for a provider alternates roles.
    #[test]
    fn the_history_window_never_splits_a_tool_call_from_its_result(
        history in arb_transcript(),
        max_messages in 0usize..12,
        max_tokens in 0u32..300,
    ) {
        let window = history_window(&history, max_messages, max_tokens);
        prop_assert!(history.ends_with(window));
        if let Some(first) = window.first() {
            prop_assert!(is_customer_turn(first));
        }
        for (i, m) in window.iter().enumerate() {
            for block in &m.content {
                if let ContentBlock::ToolResult { tool_use_id, .. } = block {
                    let called = i > 0 && window[i - 1].tool_uses().iter().any(|(id, _, _)| id == tool_use_id);
                    prop_assert!(called, "result {} without its call", tool_use_id);
                }
            }
        }
        let merged = alternate(window.to_vec());
        prop_assert!(merged.windows(2).all(|w| w[0].role != w[1].role));
        prop_assert_eq!(merged.iter().map(|m| m.content.len()).sum::<usize>(), window.iter().map(|m| m.content.len()).sum::<usize>());
    }
}

/// The fuzz targets' corpus (`fuzz/corpus/`) and the crashes kept from them
/// (`fuzz/regressions/`), replayed through the targets' own checks on every test run, so that
/// what the fuzzer once found stays found without the nightly toolchain.
mod fuzz_corpus {
    use std::path::{Path, PathBuf};

    use switchboard_domain::fuzzing::{self, Broken};

    /// Every input kept for `target` (an empty or missing corpus fails).
    fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        fuzzing::kept_inputs(&fuzz, target).unwrap()
    }

    fn replay(target: &str, check: fn(&[u8]) -> Result<(), Broken>) {
        for (path, bytes) in inputs(target) {
            match std::panic::catch_unwind(|| check(&bytes)) {
                Ok(Ok(())) => {}
                Ok(Err(broken)) => panic!("{}: {broken}", path.display()),
                Err(_) => panic!("{}: the check panicked (message above)", path.display()),
            }
        }
    }

    #[test]
    fn every_kept_event_input_parses_without_panic_and_round_trips() {
        replay("event", fuzzing::event);
    }

    #[test]
    fn every_kept_condition_input_parses_and_evaluates_as_the_index_does() {
        replay("condition", fuzzing::condition);
    }
}
