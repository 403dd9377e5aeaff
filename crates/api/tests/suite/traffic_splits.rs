//! Traffic splits over real HTTP against the embedded profile: a trigger naming two agents with
//! weights answers each conversation with one of them, the same one for every message of it,
//! records and counts each variant apart (the activity report's figures equal what the
//! executions say), keeps a running conversation on its variant when the weights change, falls
//! back to the trigger's agent when a variant's agent is not active, and refuses a bad split at
//! its field (another tenant's agent included).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::{Value, json};
use switchboard_domain::Trigger;

use crate::common::{Api, Server, create_tenant, pointers};

fn message(conversation: &str, message: &str) -> Value {
    json!({ "id": format!("e-{conversation}-{message}"), "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "acme", "conversationId": conversation, "messageId": message, "channel": {},
                    "conversation": {}, "message": { "direction": "inbound", "text": "Hello" } } })
}

/// Sends `message` of `conversation` and waits for its execution.
async fn answered(api: &Api, conversation: &str, message_id: &str) -> Value {
    let r = api.post("/events?wait=30", message(conversation, message_id)).await;
    assert_eq!(r.body["outcome"], "enqueued", "{}", r.body);
    r.body["execution"].clone()
}

/// What the scripted model (a test double) answered: it answers by the prompt it sees.
fn reply(execution: &Value) -> &str {
    execution["actions"][0]["text"].as_str().unwrap_or_else(|| panic!("no reply: {execution}"))
}

fn serve(dir: &std::path::Path) -> (Server, Api) {
    let script = dir.join("script.json");
    let rules = json!({ "description": "traffic split test double", "rules": [
        { "when": { "systemContains": "Prompt A" }, "then": { "text": "answered by A" } },
        { "when": { "systemContains": "Prompt B" }, "then": { "text": "answered by B" } }
    ] });
    std::fs::write(&script, rules.to_string()).unwrap();
    let server = Server::start_with_script(&dir.join("data"), &script, &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    (server, api)
}

async fn agent(api: &Api, prompt: &str) -> String {
    let body = json!({ "name": prompt, "systemPrompt": format!("{prompt}."), "model": "m", "tools": ["send_message"] });
    let r = api.post("/tenants/acme/agents", body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["agentId"].as_str().unwrap().to_owned()
}

/// The trigger's body with `weights` for the control (`a`) and the candidate (`b`).
fn split_body(a: &str, b: &str, weights: (u32, u32)) -> Value {
    json!({ "name": "all", "agentId": a, "eventType": "message.new", "split": [
        { "name": "control", "agentId": a, "weight": weights.0 },
        { "name": "candidate", "agentId": b, "weight": weights.1 },
    ] })
}

#[tokio::test]
async fn a_split_answers_each_conversation_with_its_variant_every_time_and_counts_the_variants_apart() {
    // given two agents with two prompts and a trigger that splits between them half and half
    let dir = tempfile::tempdir().unwrap();
    let (_server, api) = serve(dir.path());
    let (a, b) = (agent(&api, "Prompt A").await, agent(&api, "Prompt B").await);
    let created = api.post("/tenants/acme/triggers", split_body(&a, &b, (50, 50))).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let trigger_id = created.body["triggerId"].as_str().unwrap().to_owned();
    assert_eq!(created.body["split"][1], json!({ "name": "candidate", "agentId": b, "weight": 50 }));

    // when 25 conversations send two messages each (within the tenant's 60 a minute)
    let mut by_variant: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut expected: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for i in 0..25 {
        let conversation = format!("c-{i}");
        let first = answered(&api, &conversation, "m-1").await;
        let variant = first["split"]["variant"].as_str().unwrap_or_else(|| panic!("{first}")).to_owned();
        assert_eq!(first["split"]["triggerId"], json!(trigger_id));
        let (agent_id, text) = if variant == "control" { (&a, "answered by A") } else { (&b, "answered by B") };
        assert_eq!((first["agentId"].as_str().unwrap(), reply(&first)), (agent_id.as_str(), text), "{first}");
        // then every message of a conversation is answered by its variant
        let second = answered(&api, &conversation, "m-2").await;
        assert_eq!((&second["split"], &second["agentId"]), (&first["split"], &first["agentId"]));
        for e in [&first, &second] {
            let sums = expected.entry(variant.clone()).or_default();
            sums.0 += 1;
            sums.1 += ["inputTokens", "outputTokens"].iter().map(|k| e["tokenUsage"][k].as_u64().unwrap()).sum::<u64>();
            sums.2 += e["latencyMs"].as_u64().unwrap();
        }
        by_variant.entry(variant).or_default().push(conversation);
    }
    assert_eq!(
        by_variant.keys().collect::<Vec<_>>(),
        ["candidate", "control"],
        "both variants answered: {by_variant:?}"
    );
    // and the route's choice is the trigger's own (the domain's tests check its distribution)
    let trigger: Trigger =
        serde_json::from_value(api.get(&format!("/tenants/acme/triggers/{trigger_id}")).await.body).unwrap();
    for (variant, conversations) in &by_variant {
        for c in conversations {
            assert_eq!(trigger.choose(c).variant_name().as_deref(), Some(variant.as_str()), "{c}");
        }
    }
    // and the session keeps its variant
    let session_of = |e: &Value| format!("/tenants/acme/sessions/{}", e["sessionId"].as_str().unwrap());
    let sample = answered(&api, &by_variant["candidate"][0], "m-3").await;
    assert_eq!(api.get(&session_of(&sample)).await.body["split"], sample["split"]);
    expected.get_mut("candidate").unwrap().0 += 1;
    let s = expected.get_mut("candidate").unwrap();
    s.1 += ["inputTokens", "outputTokens"].iter().map(|k| sample["tokenUsage"][k].as_u64().unwrap()).sum::<u64>();
    s.2 += sample["latencyMs"].as_u64().unwrap();

    // then the activity report counts each variant apart, as the executions add up
    let report = api.get("/tenants/acme/activity?hours=2").await;
    let variants = report.body["variants"].as_array().unwrap();
    let seen: BTreeMap<String, (u64, u64, u64)> = variants
        .iter()
        .map(|v| {
            assert_eq!(v["triggerId"], json!(trigger_id));
            assert_eq!(v["executions"]["success"], v["total"], "{v}");
            let total = v["total"].as_u64().unwrap();
            (
                v["variant"].as_str().unwrap().to_owned(),
                (total, v["tokens"].as_u64().unwrap(), v["meanLatencyMs"].as_u64().unwrap()),
            )
        })
        .collect();
    let mean = expected.iter().map(|(k, (n, tokens, latency))| (k.clone(), (*n, *tokens, latency / n))).collect();
    assert_eq!(seen, mean);
    assert_eq!(report.body["total"].as_u64().unwrap(), 51, "every execution is in the totals too");
}

#[tokio::test]
async fn a_running_conversation_keeps_its_variant_when_the_weights_change_and_an_inactive_variant_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, api) = serve(dir.path());
    let (a, b) = (agent(&api, "Prompt A").await, agent(&api, "Prompt B").await);
    let created = api.post("/tenants/acme/triggers", split_body(&a, &b, (1, 1))).await;
    let path = format!("/tenants/acme/triggers/{}", created.body["triggerId"].as_str().unwrap());
    let trigger: Trigger = serde_json::from_value(created.body.clone()).unwrap();
    let candidates: Vec<String> = (0..200)
        .map(|i| format!("c-{i}"))
        .filter(|c| trigger.choose(c).variant_name().as_deref() == Some("candidate"))
        .take(3)
        .collect();
    // given a conversation answered by the candidate
    let started = answered(&api, &candidates[0], "m-1").await;
    assert_eq!(reply(&started), "answered by B");
    // and the tester says which variant a conversation would get
    let tested =
        api.post("/tenants/acme/triggers/test", json!({ "detail": message(&candidates[1], "m-1")["detail"] })).await;
    assert_eq!(
        (tested.body["variant"].clone(), tested.body["agentId"].clone()),
        (json!("candidate"), json!(b)),
        "{}",
        tested.body
    );

    // when the candidate is rolled back to weight 0
    let mut body = split_body(&a, &b, (1, 0));
    body["name"] = json!("all");
    let put = api.call(Method::PUT, &path, Some(body), &[("if-match", "\"1\"")]).await;
    assert_eq!(put.status, 200, "{}", put.body);
    // then the running conversation stays with the candidate's agent and variant
    let next = answered(&api, &candidates[0], "m-2").await;
    assert_eq!((reply(&next), &next["split"]["variant"]), ("answered by B", &json!("candidate")));
    // and a new conversation that fell in the candidate's range goes to the control
    let moved = answered(&api, &candidates[1], "m-1").await;
    assert_eq!((reply(&moved), &moved["split"]["variant"]), ("answered by A", &json!("control")));

    // when the candidate's weight is back but its agent is inactive
    let mut body = split_body(&a, &b, (1, 1));
    body["name"] = json!("all");
    assert_eq!(api.call(Method::PUT, &path, Some(body), &[("if-match", "\"2\"")]).await.status, 200);
    let current = api.get(&format!("/tenants/acme/agents/{b}")).await;
    let mut inactive = current.body.clone();
    inactive["status"] = json!("inactive");
    for server_set in ["tenantId", "agentId", "createdAt", "updatedAt", "version"] {
        inactive.as_object_mut().unwrap().remove(server_set);
    }
    let put =
        api.call(Method::PUT, &format!("/tenants/acme/agents/{b}"), Some(inactive), &[("if-match", "\"1\"")]).await;
    assert_eq!(put.status, 200, "{}", put.body);
    // then its conversations are answered by the trigger's agent, counted as the control
    let fell_back = answered(&api, &candidates[2], "m-1").await;
    assert_eq!((reply(&fell_back), &fell_back["split"]["variant"]), ("answered by A", &json!("control")));
}

#[tokio::test]
async fn a_bad_split_is_refused_at_its_field_and_another_tenants_agent_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let (server, api) = serve(dir.path());
    let (a, b) = (agent(&api, "Prompt A").await, agent(&api, "Prompt B").await);
    let globex = Api::new(&server, &create_tenant(&server, "globex"));
    let body = json!({ "name": "G", "systemPrompt": "G.", "model": "m", "tools": ["send_message"] });
    let theirs = globex.post("/tenants/globex/agents", body).await.body["agentId"].as_str().unwrap().to_owned();

    let refused = |body: Value| {
        let api = &api;
        async move {
            let r = api.post("/tenants/acme/triggers", body).await;
            assert_eq!(r.status, 400, "{}", r.body);
            pointers(&r)
        }
    };
    // another tenant's agent, as a variant: not one of acme's
    assert_eq!(refused(split_body(&a, &theirs, (1, 1))).await, ["/split/1/agentId"]);
    // an agent that does not exist
    assert_eq!(refused(split_body(&a, "01JD0000000000000000000000", (1, 1))).await, ["/split/1/agentId"]);
    // weights, names, the trigger's own agent
    assert_eq!(refused(split_body(&a, &b, (1, 10_001))).await, ["/split/1/weight"]);
    assert_eq!(refused(split_body(&a, &b, (0, 0))).await, ["/split"]);
    let mut named = split_body(&a, &b, (1, 1));
    named["split"][1]["name"] = json!("Control Group");
    assert_eq!(refused(named).await, ["/split/1/name"]);
    let mut outside = split_body(&a, &b, (1, 1));
    outside["agentId"] = json!(theirs);
    let pointers = refused(outside).await;
    assert!(pointers.contains(&"/agentId".to_owned()), "{pointers:?}");
    let mut extra = split_body(&a, &b, (1, 1));
    extra["split"][0]["share"] = json!(3);
    let r = api.post("/tenants/acme/triggers", extra).await;
    assert_eq!(r.status, 400, "{}", r.body);
    // and nothing was written
    assert_eq!(api.get("/tenants/acme/triggers").await.body["items"], json!([]));
    // while globex's own activity report holds no variants of acme's
    assert_eq!(globex.get("/tenants/globex/activity").await.body["variants"], json!([]));
}
