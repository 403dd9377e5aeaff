//! Insights over real HTTP against the embedded profile, from turns the engine really ran: an
//! agent that reaches its `maxTurns` hands over (cause `max_turns`), a turn the model cannot
//! answer fails and `onFailure` hands over (cause `failure`), a conversation that only talks
//! stays open; the route's figures per agent equal what the executions the API answered say, and
//! bad queries name the parameter at fault.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::common::{Api, Server, create_tenant};

fn serve(dir: &std::path::Path) -> (Server, Api) {
    let script = dir.join("script.json");
    // a test double: it answers what it has a rule for and fails (no rule) on anything else
    let rules = json!({ "description": "insights test double", "rules": [
        { "when": { "userText": { "matches": "hello|fine" } }, "then": { "text": "Glad to hear it." } }
    ] });
    std::fs::write(&script, rules.to_string()).unwrap();
    let server = Server::start_with_script(&dir.join("data"), &script, &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    (server, api)
}

async fn agent(api: &Api, name: &str, extra: Value) -> String {
    let mut body = json!({ "name": name, "systemPrompt": "You help.", "model": "m", "tools": ["send_message"] });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let r = api.post("/tenants/acme/agents", body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["agentId"].as_str().unwrap().to_owned()
}

async fn invoke(api: &Api, agent: &str, conversation: &str, message: &str) -> Value {
    let path = format!("/tenants/acme/agents/{agent}/invoke");
    let r = api.post(&path, json!({ "conversationId": conversation, "message": message })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[tokio::test]
async fn the_insights_of_real_turns_count_each_hand_off_by_its_cause_as_the_executions_say() {
    // given an agent that escalates after one turn and one that hands over when it fails
    let dir = tempfile::tempdir().unwrap();
    let (_server, api) = serve(dir.path());
    let brief = agent(&api, "Brief", json!({ "maxTurns": 1, "handoffBehavior": "escalate" })).await;
    let careful = agent(&api, "Careful", json!({})).await;

    // when they answer four conversations
    let answers = [
        (brief.clone(), invoke(&api, &brief, "b-1", "hello").await),
        (careful.clone(), invoke(&api, &careful, "c-1", "hello").await),
        (careful.clone(), invoke(&api, &careful, "c-1", "I am fine").await),
        (careful.clone(), invoke(&api, &careful, "c-2", "what is the meaning of this?").await),
    ];

    // then each agent's figures are what its executions say
    let mut expected: BTreeMap<String, BTreeMap<&str, u64>> = BTreeMap::new();
    for (agent, e) in &answers {
        let figures = expected.entry(agent.clone()).or_default();
        *figures.entry("executions").or_default() += 1;
        let failed = e["status"] == "failed";
        *figures.entry("failedExecutions").or_default() += u64::from(failed);
        for action in e["actions"].as_array().unwrap() {
            if action["type"] == "handoff_to_human" {
                *figures.entry("handedToHuman").or_default() += 1;
                let cause = action["cause"].as_str().unwrap_or_else(|| panic!("a cause: {action}"));
                *figures.entry(if cause == "max_turns" { "maxTurns" } else { cause }).or_default() += 1;
            }
        }
    }
    assert_eq!(expected[&brief].get("maxTurns"), Some(&1), "the brief agent escalated at its turn limit");
    assert_eq!(expected[&careful].get("failure"), Some(&1), "the careful agent handed its failed turn over");
    let report = api.get("/tenants/acme/insights?groupBy=agent").await;
    assert_eq!(report.status, 200, "{}", report.body);
    let groups = report.body["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{}", report.body);
    for g in groups {
        let agent = g["by"]["agentId"].as_str().unwrap();
        let want = &expected[agent];
        let n = |k: &str| want.get(k).copied().unwrap_or(0);
        assert_eq!(g["executions"], n("executions"), "{agent}: {g}");
        assert_eq!(g["failedExecutions"], n("failedExecutions"), "{agent}: {g}");
        assert_eq!(g["handedToHuman"], n("handedToHuman"), "{agent}: {g}");
        assert_eq!(g["handoffReasons"]["max_turns"], n("maxTurns"), "{agent}: {g}");
        assert_eq!(g["handoffReasons"]["failure"], n("failure"), "{agent}: {g}");
        assert_eq!(g["resolved"], 0, "nobody ended a conversation: {g}");
    }
    // one conversation for the brief agent, two for the careful one; the failed first turn
    // never answered, so two first responses in all
    let total = &report.body["total"];
    assert_eq!((total["conversations"].as_u64(), total["firstResponseMs"]["count"].as_u64()), (Some(3), Some(2)));
    assert_eq!(total["latencyMs"]["count"], 4, "{total}");
    assert_eq!(total["resolutionRate"], 0.0, "two outcomes, both hand-offs: {total}");
    // and another tenant reads none of it
    let other = Api::new(&_server, &create_tenant(&_server, "globex"));
    let theirs = other.get("/tenants/globex/insights?groupBy=agent").await;
    assert_eq!((theirs.body["total"]["executions"].as_u64(), theirs.body["groups"].clone()), (Some(0), json!([])));
    assert_eq!(other.get("/tenants/acme/insights").await.status, 404, "nor acme's");
}
