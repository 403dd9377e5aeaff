//! Webhook tools end to end: a tool created over the API, called by the agent through the real
//! HTTP caller, signed with the tenant's secret from the secrets file, verified by a receiver on
//! a loopback port — and refused when loopback is not explicitly allowed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{Server, create_tenant};
use reqwest::Client;
use serde_json::{Value, json};
use switchboard_testkit::webhooks::WebhookReceiver;

const SECRET: &str = "whsec-test-0123456789";

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Sets up tenant `acme` with a webhook tool at `url`, an agent using it and a catch-all trigger.
async fn configure(server: &Server, key: &str, url: &str) {
    let client = Client::new();
    let post =
        |path: &str, body: Value| client.post(format!("{}{path}", server.base)).bearer_auth(key).json(&body).send();
    let tool = post(
        "/tenants/acme/tools",
        json!({ "name": "lookup_order", "description": "Finds an order's status",
                "parameters": { "type": "object", "properties": { "orderId": { "type": "string" } }, "required": ["orderId"] },
                "handler": { "type": "webhook", "url": url, "secretRef": "orders", "timeoutMs": 5000,
                             "retryPolicy": { "maxRetries": 0, "backoffMs": 0 } } }),
    )
    .await
    .unwrap();
    assert_eq!(tool.status(), 201);
    let tool_id = tool.json::<Value>().await.unwrap()["toolId"].as_str().unwrap().to_owned();
    let agent = post(
        "/tenants/acme/agents",
        json!({ "name": "Orders", "systemPrompt": "You look orders up.", "model": "m", "tools": ["send_message", tool_id] }),
    )
    .await
    .unwrap();
    let agent_id = agent.json::<Value>().await.unwrap()["agentId"].as_str().unwrap().to_owned();
    let trigger =
        post("/tenants/acme/triggers", json!({ "name": "all", "agentId": agent_id, "eventType": "message.new" }))
            .await
            .unwrap();
    assert_eq!(trigger.status(), 201);
}

async fn ask(server: &Server, key: &str) -> Value {
    let event = json!({ "id": "w-1", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "acme", "conversationId": "c-w", "messageId": "m-w", "channel": {}, "conversation": {},
                    "message": { "direction": "inbound", "text": "where is my order 1234?" } } });
    let res = Client::new()
        .post(format!("{}/events?wait=30", server.base))
        .bearer_auth(key)
        .json(&event)
        .send()
        .await
        .unwrap();
    res.json::<Value>().await.unwrap()["execution"].clone()
}

fn script(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("script.json");
    write(
        &path,
        r#"{"rules": [
            {"when": {"afterTool": "lookup_order"}, "then": {"text": "Your order ships Thursday."}},
            {"then": {"toolCalls": [{"name": "lookup_order", "input": {"orderId": "1234"}}]}}
        ]}"#,
    );
    path
}

#[tokio::test]
async fn the_agent_calls_a_signed_webhook_that_the_receiver_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = WebhookReceiver::start("/hook", SECRET).await;
    let url = receiver.url.clone();
    let secrets = dir.path().join("secrets.json");
    write(&secrets, &format!(r#"{{"acme": {{"orders": "{SECRET}"}}}}"#));
    let data = dir.path().join("data");
    let server = Server::start_with_script(
        &data,
        &script(dir.path()),
        &["--secrets-file", secrets.to_str().unwrap(), "--allow-private-webhooks"],
    );
    let key = create_tenant(&data, "acme");
    configure(&server, &key, &url).await;

    let execution = ask(&server, &key).await;
    assert_eq!(execution["status"], "success", "{execution}");
    let call = &execution["toolCalls"][0];
    assert_eq!((call["name"].as_str(), call["isError"].as_bool()), (Some("lookup_order"), Some(false)));
    assert_eq!(call["output"], json!({ "status": "shipped", "eta": "Thursday" }));
    assert_eq!(call["webhook"]["outcome"], "ok");
    assert_eq!(call["webhook"]["status"], 200);
    assert_eq!(execution["actions"][0]["text"], "Your order ships Thursday.");
    let seen = receiver.seen();
    assert_eq!(seen.len(), 1);
    let (verified, key_header, body) = (seen[0].verified, &seen[0].idempotency_key, &seen[0].body);
    assert!(verified, "the signature checks out with the tenant's secret");
    assert_eq!(key_header, call["idempotencyKey"].as_str().unwrap());
    assert_eq!(body["arguments"], json!({ "orderId": "1234" }));
    assert!(body.get("conversationId").is_none());
    // the secret is nowhere in what the API shows
    assert!(!execution.to_string().contains(SECRET));
    drop(receiver);
}

#[tokio::test]
async fn a_loopback_webhook_is_refused_unless_local_development_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = WebhookReceiver::start("/hook", SECRET).await;
    let url = receiver.url.clone();
    let data = dir.path().join("data");
    let server = Server::start_with_script(&data, &script(dir.path()), &[]);
    let key = create_tenant(&data, "acme");
    configure(&server, &key, &url).await;

    let execution = ask(&server, &key).await;
    // the agent goes on (the model is told), but nothing left the machine
    assert_eq!(execution["status"], "success", "{execution}");
    assert_eq!(execution["toolCalls"][0]["isError"], true);
    assert_eq!(execution["toolCalls"][0]["webhook"]["outcome"], "blocked");
    assert!(receiver.seen().is_empty());
    drop(receiver);
}
