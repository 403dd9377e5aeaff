//! Kept versions of configuration records over real HTTP: each write kept with who wrote it,
//! listed newest first, compared, and rolled back, the next message answered by the old prompt
//! and its execution naming the versions it ran with; a rollback is checked like any write.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{Api, Server, create_tenant, pointers};
use reqwest::Method;
use serde_json::{Value, json};

/// What the agent answers a manual invoke on `conversation`.
async fn answer(api: &Api, agent: &str, conversation: &str) -> Value {
    let r = api.post(&format!("/tenants/acme/agents/{agent}/invoke"), json!({ "conversationId": conversation })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["actions"][0]["text"].clone()
}

#[tokio::test]
async fn a_rollback_makes_the_next_message_answered_by_the_old_prompt() {
    // given a scripted model (test double) that answers by the prompt it sees
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    let rules = json!({ "description": "versions test double", "rules": [
        { "when": { "systemContains": "Prompt one" }, "then": { "text": "answered by prompt one" } },
        { "when": { "systemContains": "Prompt two" }, "then": { "text": "answered by prompt two" } }
    ] });
    std::fs::write(&script, rules.to_string()).unwrap();
    let server = Server::start_with_script(&dir.path().join("data"), &script, &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    let body =
        |prompt: &str| json!({ "name": "Desk", "systemPrompt": prompt, "model": "m", "tools": ["send_message"] });
    let agent =
        api.post("/tenants/acme/agents", body("Prompt one.")).await.body["agentId"].as_str().unwrap().to_owned();
    let path = format!("/tenants/acme/agents/{agent}");
    assert_eq!(answer(&api, &agent, "c-1").await, "answered by prompt one");

    // when its prompt changes, the next message is answered by the new prompt
    let r = api.call(Method::PUT, &path, Some(body("Prompt two.")), &[("if-match", "\"1\"")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(answer(&api, &agent, "c-2").await, "answered by prompt two");
    let diff = api.get(&format!("{path}/versions/1/diff?to=2")).await;
    assert_eq!(
        diff.body,
        json!({ "from": 1, "to": 2, "changes": [
            { "pointer": "/systemPrompt", "before": "Prompt one.", "after": "Prompt two." } ] })
    );

    // and after a rollback to version 1, by the old prompt again
    let back = Some(json!({ "version": 1 }));
    assert_eq!(api.call(Method::POST, &format!("{path}/rollback"), back.clone(), &[]).await.status, 428);
    let stale = api.call(Method::POST, &format!("{path}/rollback"), back.clone(), &[("if-match", "\"1\"")]).await;
    assert_eq!(stale.status, 412);
    let r = api.call(Method::POST, &format!("{path}/rollback"), back, &[("if-match", "\"2\"")]).await;
    assert_eq!((r.status.as_u16(), r.headers["etag"].to_str().unwrap()), (200, "\"3\""), "{}", r.body);
    assert_eq!((r.body["systemPrompt"].clone(), r.body["version"].clone()), (json!("Prompt one."), json!(3)));
    assert_eq!(answer(&api, &agent, "c-3").await, "answered by prompt one");

    // and each execution says which versions it ran with: a routed message its trigger's too
    let invoked = api.post(&format!("/tenants/acme/agents/{agent}/invoke"), json!({ "conversationId": "c-4" })).await;
    let record = api.get(&format!("/tenants/acme/executions/{}", invoked.body["executionId"].as_str().unwrap())).await;
    assert_eq!(record.body["ranWith"], json!({ "agent": 3 }), "{}", record.body);
    let on_all = json!({ "name": "all", "agentId": agent, "eventType": "message.new" });
    assert_eq!(api.post("/tenants/acme/triggers", on_all).await.status, 201);
    let event = json!({ "id": "e-1", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "acme", "conversationId": "c-5", "messageId": "m-1", "channel": {},
                    "conversation": {}, "message": { "direction": "inbound", "text": "Hi" } } });
    let routed = api.post("/events?wait=30", event).await;
    assert_eq!(routed.body["execution"]["ranWith"], json!({ "agent": 3, "trigger": 1 }), "{}", routed.body);

    // then the history holds every write, newest first, each with who wrote it
    let versions = api.get(&format!("{path}/versions")).await;
    let items = versions.body["items"].as_array().unwrap();
    let seen: Vec<_> = items.iter().map(|v| (v["version"].clone(), v["record"]["systemPrompt"].clone())).collect();
    assert_eq!(
        seen,
        [(json!(3), json!("Prompt one.")), (json!(2), json!("Prompt two.")), (json!(1), json!("Prompt one."))]
    );
    assert!(items.iter().all(|v| v["writtenBy"] == "owner" && v["deleted"] == false), "{items:?}");
    assert_eq!(api.get(&format!("{path}/versions/2")).await.body["record"]["systemPrompt"], "Prompt two.");
    assert_eq!(api.get(&format!("{path}/versions/9")).await.status, 404);
    assert_eq!(api.get(&format!("{path}/versions?cursor=x")).await.status, 400);
    assert_eq!(api.get(&format!("{path}/versions/1/diff")).await.status, 400);
}

#[tokio::test]
async fn a_rollback_is_checked_like_a_write_and_a_deleted_record_keeps_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    // given an agent that used a tool in version 1 and no longer does, and the tool deleted
    let tool = api
        .post(
            "/tenants/acme/tools",
            json!({ "name": "lookup", "description": "d", "parameters": { "type": "object" },
            "handler": { "type": "webhook", "url": "https://example.invalid/hook", "secretRef": "s" } }),
        )
        .await;
    let tool_id = tool.body["toolId"].as_str().unwrap().to_owned();
    let with_tool = json!({ "name": "Desk", "systemPrompt": "p", "model": "m", "tools": ["send_message", tool_id] });
    let agent = api.post("/tenants/acme/agents", with_tool.clone()).await.body["agentId"].as_str().unwrap().to_owned();
    let path = format!("/tenants/acme/agents/{agent}");
    let run = api.post(&format!("{path}/invoke"), json!({ "conversationId": "c-1" })).await;
    let record = api.get(&format!("/tenants/acme/executions/{}", run.body["executionId"].as_str().unwrap())).await;
    assert_eq!(record.body["ranWith"], json!({ "agent": 1, "tools": { tool_id.clone(): 1 } }), "{}", record.body);
    let mut without = with_tool;
    without["tools"] = json!(["send_message"]);
    assert_eq!(api.call(Method::PUT, &path, Some(without), &[("if-match", "\"1\"")]).await.status, 200);
    let tool_path = format!("/tenants/acme/tools/{tool_id}");
    assert_eq!(api.call(Method::DELETE, &tool_path, None, &[]).await.status, 204);

    // when the agent is rolled back to the version that named the tool, it is refused at the tool
    let r =
        api.call(Method::POST, &format!("{path}/rollback"), Some(json!({ "version": 1 })), &[("if-match", "2")]).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/tools/1".to_owned()]), "{}", r.body);
    assert_eq!(api.get(&path).await.body["version"], 2, "nothing written");
    // and a version never kept is named as such
    let r =
        api.call(Method::POST, &format!("{path}/rollback"), Some(json!({ "version": 7 })), &[("if-match", "2")]).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/version".to_owned()]));

    // the deleted tool keeps its history, the last version marking the delete
    let versions = api.get(&format!("{tool_path}/versions")).await;
    assert_eq!(versions.status, 200, "{}", versions.body);
    let marks: Vec<_> = versions.body["items"].as_array().unwrap().iter().map(|v| v["deleted"].clone()).collect();
    assert_eq!(marks, [json!(true), json!(false)]);
    let r = api
        .call(Method::POST, &format!("{tool_path}/rollback"), Some(json!({ "version": 1 })), &[("if-match", "1")])
        .await;
    assert_eq!(r.status, 404, "a deleted record is created again, not rolled back");
}
