//! Evaluation cases that start from a conversation's history: the case's first message is
//! answered as a later turn of that conversation, the model seeing what came before.

use serde_json::json;
use switchboard_domain::message::{ContentBlock, Role};
use switchboard_domain::{Agent, Tenant};
use switchboard_embedded::eval::{self, Dataset, Setup};
use switchboard_engine::ConfigRecord;

use crate::common::capturing;

fn dataset(cases: serde_json::Value) -> Dataset {
    serde_json::from_value(json!({ "cases": cases })).unwrap()
}

#[tokio::test]
async fn a_case_with_history_is_answered_as_the_conversations_next_turn() {
    let agent: Agent = serde_json::from_value(json!({
        "tenantId": "t-1", "agentId": "01JD0000SVPP0RT0AGENT00001", "name": "Front", "systemPrompt": "Help.",
        "model": "test-model", "tools": ["send_message"],
        "createdAt": "2026-12-01T00:00:00Z", "updatedAt": "2026-12-01T00:00:00Z", "version": 1 }))
    .unwrap();
    let tenant: Tenant = serde_json::from_value(json!({
        "tenantId": "t-1", "name": "Eval", "status": "active", "createdAt": "2026-12-01T00:00:00Z",
        "limits": {} }))
    .unwrap();
    let model = capturing(json!({ "rules": [{ "when": {}, "then": { "text": "Tomorrow." } }] }));
    let setup = Setup {
        tenant,
        records: vec![ConfigRecord::Agent(agent.clone())],
        agent: agent.agent_id,
        model: model.clone(),
        parallel: 2,
    };
    let cases = dataset(json!([{
        "name": "later", "messages": ["And when will it arrive?"], "expect": { "replyContains": "tomorrow" },
        "history": [{ "role": "user", "text": "Where is my order #1234?" },
                    { "role": "assistant", "text": "It has shipped." }] }]));
    assert!(eval::check(&cases).is_empty());
    let results = eval::run(&cases, &setup).await.unwrap();
    assert!(results[0].passed, "{:?}", results[0].failures);
    // the model was sent the history, then the case's message
    let seen = model.seen.lock().unwrap().clone();
    let sent: Vec<(Role, String)> = seen[0]
        .messages
        .iter()
        .map(|m| {
            let text = m.content.iter().filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            });
            (m.role, text.collect::<Vec<_>>().join(" "))
        })
        .collect();
    assert_eq!(
        sent,
        [
            (Role::User, "Where is my order #1234?".to_owned()),
            (Role::Assistant, "It has shipped.".to_owned()),
            (Role::User, "And when will it arrive?".to_owned()),
        ]
    );
    // a history's faults are named by their pointers
    let bad = dataset(json!([{ "name": "x", "messages": ["hi"],
        "history": [{ "role": "assistant", "text": "Hello" }, { "role": "user", "text": " " }] }]));
    let pointers: Vec<String> = eval::check(&bad).into_iter().map(|(at, _)| at).collect();
    assert_eq!(pointers, ["/cases/0/history/1/text", "/cases/0/history/0/role"]);
}
