//! `switchboard demo --example <name>`, run as the real binary: each example tenant runs offline
//! with the scripted model (a deterministic test double) and prints what its pattern did. The
//! demo drains the queue between rounds, so the output is the same on every run; the tests
//! assert its key lines, never timings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Output;

fn demo(args: &[&str]) -> Output {
    // Run from a directory without `examples/`: the example files are built into the binary.
    let elsewhere = tempfile::tempdir().unwrap();
    common::bin().arg("demo").args(args).current_dir(elsewhere.path()).output().unwrap()
}

/// Runs an example that must succeed; returns its stdout.
fn run_example(name: &str) -> String {
    let out = demo(&["--example", name]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("SCRIPTED TEST DOUBLE"), "{stdout}");
    assert!(stdout.contains(&format!("deterministic rules from examples/{name}/script.json")), "{stdout}");
    assert!(stdout.contains("queue: 0 ready, 0 dead-lettered"), "{stdout}");
    stdout
}

#[test]
fn a_kept_data_directory_is_left_closed() {
    let kept = tempfile::tempdir().unwrap();
    let data = kept.path().join("data");
    let out = demo(&["--example", "support", "--keep-data", data.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("Data kept in {}", data.display())), "{stdout}");
    // the database closed before the demo exited: one file, its log copied in and deleted
    assert!(data.join("switchboard.db").exists());
    for suffix in ["-wal", "-shm"] {
        let left = data.join(format!("switchboard.db{suffix}"));
        assert!(!left.exists(), "{} left behind", left.display());
    }
}

/// Asserts that `lines` occur in `stdout` in this order.
fn in_order(stdout: &str, lines: &[&str]) {
    let mut from = 0;
    for line in lines {
        match stdout[from..].find(line) {
            Some(at) => from += at + line.len(),
            None => panic!("{line:?} missing (or out of order) in:\n{stdout}"),
        }
    }
}

#[test]
fn the_default_support_example_shows_replies_a_webhook_and_both_handoffs() {
    // given no --example, when the demo runs
    let out = demo(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // then it is the support example, answered through the signed webhook
    assert!(stdout.contains("Example 'support'"), "{stdout}");
    assert!(stdout.contains("SCRIPTED TEST DOUBLE"));
    assert!(stdout.contains("agent    › Thanks! Order 1234 shipped yesterday"));
    assert!(stdout.contains("↔ webhook order_status") && stdout.contains("HTTP 200"), "{stdout}");
    assert!(stdout.contains("verified 1 signed webhook call(s), rejected 0"), "{stdout}");
    // and the human-owned conversation records the next message without an agent answering it
    in_order(&stdout, &["━━ Conversation conv-human-2002", "event session.handoff.human"]);
    assert!(
        stdout.contains(
            "a human operator owns this conversation: \"Hello? Anyone?\" joins their session's transcript, \
             recorded as a skipped execution; no agent answers it"
        ),
        "{stdout}"
    );
    in_order(&stdout, &["· Skipped · 0 iteration(s)", "– skipped: a human operator owns the conversation"]);
    // and the billing question is handed to the specialist
    assert!(stdout.contains("→ handoff to agent \"Billing specialist\": Billing question"), "{stdout}");
    assert!(stdout.contains("event session.handoff.agent"));
    assert!(stdout.contains("0 dead-lettered"));
}

#[test]
fn the_steps_example_moves_along_declared_edges_only_and_ends_in_the_final_step() {
    let stdout = run_example("steps");
    assert!(
        stdout.contains("steps: greet (initial) → collect_order · collect_order → confirm · confirm (final)"),
        "{stdout}"
    );
    // the return that goes all the way: greet → collect_order → confirm, which ends it
    in_order(
        &stdout,
        &[
            "━━ Conversation conv-return-4101",
            "· Completed · 2 turn(s) · step confirm (\"Confirm\") · memory {\"orderNumber\":\"5521\"}",
            "[transition_to_collect_order]",
            "⇒ moved to step collect_order (\"Collect order\")",
            "· Ended · 3 iteration(s) · 4 tool call(s) [set_context, transition_to_confirm, send_message, end_conversation]",
            "⇒ moved to step confirm (\"Confirm\")",
            "→ end: Return booked for order 5521",
            "event session.ended",
        ],
    );
    // the customer who wants to skip ahead: the undeclared edge is refused, the agent stays on track
    in_order(
        &stdout,
        &[
            "━━ Conversation conv-return-4102",
            "· Active · 1 turn(s) · step collect_order (\"Collect order\")",
            "✗ transition_to_confirm refused: the step 'greet' cannot move to 'confirm'; allowed: collect_order",
            "⇒ moved to step collect_order",
            "→ reply: Happy to help with that return. What's your order number?",
        ],
    );
}

#[test]
fn the_skills_example_loads_skills_on_demand_parents_first() {
    let stdout = run_example("skills");
    assert!(stdout.contains("agent \"FAQ assistant\" · skills it may load: shipping, returns"), "{stdout}");
    in_order(
        &stdout,
        &[
            "━━ Conversation conv-faq-5101",
            "· skills loaded: shipping",
            "⇒ load_skill \"shipping\" loaded: shipping",
            "→ reply: Standard shipping to Canada takes 5-7 business days",
        ],
    );
    in_order(
        &stdout,
        &[
            "━━ Conversation conv-faq-5102",
            "· 2 turn(s) · skills loaded: policies, returns",
            "⇒ load_skill \"returns\" loaded: policies, returns (parent first)",
            "→ reply: Yes: sale items",
            // the next turn starts with both loaded and uses the tool the returns skill adds
            "[trigger_flow]",
            "→ flow requested: return-label",
            "event flow.trigger.requested",
        ],
    );
}

#[test]
fn the_supervisor_example_asks_two_specialists_in_one_turn_and_records_them_as_children() {
    let stdout = run_example("supervisor");
    assert!(stdout.contains("agent \"Concierge\" · supervisor · sub-agents: Billing, Shipping"), "{stdout}");
    in_order(
        &stdout,
        &[
            "━━ Conversation conv-concierge-6101",
            "[ask_billing, ask_shipping]",
            "⤷ sub-agent \"Billing\" · Success · 1 iteration(s) · ",
            "result \"Order 5521 was charged 89.00 USD twice on May 3; I refunded the duplicate",
            "⤷ sub-agent \"Shipping\" · Success · 1 iteration(s) · ",
            "result \"Order 5521 left the warehouse on Monday with UPS and is due on Thursday.\"",
            "→ reply: Sorry about both!",
            "→ end: Duplicate charge refunded; delivery date given",
        ],
    );
    // one session: the specialists never take the conversation
    assert_eq!(stdout.matches("   session ").count(), 1, "{stdout}");
    assert_eq!(stdout.matches("⤷ sub-agent").count(), 2, "{stdout}");
}

#[test]
fn the_fan_out_example_asks_three_agents_at_once_and_answers_from_the_two_that_answered() {
    let stdout = run_example("fan-out");
    assert!(
        stdout.contains(
            "router · asks up to 3 at once, synthesizes their answers · candidates: Orders, Warehouse, Returns"
        ),
        "{stdout}"
    );
    in_order(
        &stdout,
        &[
            "━━ Conversation conv-ask-8101",
            "⇢ router asks \"Orders\", \"Warehouse\", \"Returns\" at once",
            "⤷ sub-agent \"Orders\" · Success",
            "⤷ sub-agent \"Warehouse\" · Success",
            // one failing branch: recorded, and the others' answers still make the reply
            "⤷ sub-agent \"Returns\" · Failed",
            "→ reply: Your tent (order 4411) left our warehouse this morning and arrives Thursday",
        ],
    );
    // the router answered itself: one session, one execution, nothing handed off
    assert_eq!(stdout.matches("   session ").count(), 1, "{stdout}");
    assert!(!stdout.contains("handoff"), "{stdout}");
}

#[test]
fn the_router_example_routes_each_conversation_and_falls_back_to_the_default_on_an_invalid_pick() {
    let stdout = run_example("router");
    assert!(
        stdout
            .contains("router · candidates: Billing support, Technical support, General help · default: General help"),
        "{stdout}"
    );
    in_order(
        &stdout,
        &[
            "━━ Conversation conv-door-7101",
            "⇢ router picked \"Billing support\" · reason \"invoice question\"",
            "→ handoff to agent \"Billing support\"",
            "agent \"Billing support\" · Completed · 2 turn(s)",
            // the follow-up goes straight to billing: one router execution only
            "→ reply: You're welcome!",
            "━━ Conversation conv-door-7102",
        ],
    );
    let billing =
        &stdout[stdout.find("conv-door-7101").unwrap()..stdout.find("━━ Conversation conv-door-7102").unwrap()];
    assert_eq!(billing.matches("[choose_agent]").count(), 1, "{billing}");
    in_order(
        &stdout,
        &["━━ Conversation conv-door-7102", "⇢ router picked \"Technical support\" · reason \"the app crashes\""],
    );
    in_order(
        &stdout,
        &[
            "━━ Conversation conv-door-7103",
            "⇢ router pick invalid ('01JD0000ST0RES0AGENT000009' is not one of the candidates) \
             → fallback to the default agent \"General help\"",
            "agent \"General help\" · Active",
            "→ reply: Hi! We don't have a store in Lyon yet",
        ],
    );
}

#[test]
fn an_unknown_example_is_refused_with_the_list_of_examples() {
    let out = demo(&["--example", "nope"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(2), "a usage error, not a crash: {stderr}");
    assert!(stderr.contains("invalid value 'nope' for '--example <NAME>'"), "{stderr}");
    assert!(stderr.contains("[possible values: support, steps, skills, supervisor, router, fan-out]"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn the_runtime_threads_can_be_set_and_a_count_that_is_not_one_or_more_is_refused() {
    // One thread runs the whole demo.
    let out = demo(&["--threads", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("━━ Conversation"));
    let elsewhere = tempfile::tempdir().unwrap();
    for (flag, env, shown) in [
        (Some("0"), None, "invalid value '0' for '--threads <N>'"),
        (Some("two"), None, "invalid value 'two' for '--threads <N>'"),
        (None, Some("-1"), "invalid value '-1' for '--threads <N>'"),
    ] {
        let mut command = common::bin();
        command.arg("demo").current_dir(elsewhere.path());
        if let Some(n) = flag {
            command.args(["--threads", n]);
        }
        if let Some(n) = env {
            command.env("SWITCHBOARD_THREADS", n);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "a usage error, not a crash: {stderr}");
        assert!(stderr.contains(shown), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[tokio::test]
async fn the_demo_runs_on_a_real_model_given_by_reference_and_says_which_variable_is_missing() {
    use switchboard_testkit::providers::{FakeProvider, Wire, chat};
    // given a Chat Completions provider (a fake of the wire protocol) that answers in words
    let fake =
        FakeProvider::start(Wire::ChatCompletions, (0..200).map(|_| chat::text("Happy to help.")).collect()).await;
    let elsewhere = tempfile::tempdir().unwrap();
    let (here, base) = (elsewhere.path().to_owned(), fake.base_url.clone());
    let run = move |env: Vec<(&'static str, String)>| {
        let mut command = common::bin();
        command.args(["demo", "--model", "openai:gpt-4o-mini"]).current_dir(&here);
        for name in common::MODEL_VARIABLES {
            command.env_remove(name);
        }
        command.envs(env).output().unwrap()
    };
    // when the demo runs with --model and the provider's variables (off the runtime's thread:
    // the fake answers on it)
    let again = run.clone();
    let env = vec![("OPENAI_API_KEY", "sk-test".into()), ("OPENAI_BASE_URL", base)];
    let out = tokio::task::spawn_blocking(move || run(env)).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // then every agent was answered by that model, and the output says it is a real model
    assert!(stdout.contains("Model: openai:gpt-4o-mini for every agent (a real model"), "{stdout}");
    assert!(!stdout.contains("SCRIPTED TEST DOUBLE"), "{stdout}");
    assert!(stdout.contains("Happy to help."), "{stdout}");
    let received = fake.received();
    assert!(!received.is_empty());
    assert!(received.iter().all(|r| r.body["model"] == "gpt-4o-mini"), "{:?}", received[0].body);
    // and without the key it stops before anything runs, naming the variable
    let out = tokio::task::spawn_blocking(move || again(vec![])).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("OPENAI_API_KEY"), "{stderr}");
}
