//! Tools of a tenant's MCP server over the API, against a server built on the official Python
//! SDK: its tools discovered with the bodies that create them, one imported and called by an
//! agent's turn (arguments checked against the schema Pydantic wrote before the server sees
//! them), refreshed when the copy differs from the server's, and the failures named.

use serde_json::{Value, json};
use switchboard_testkit::mcp::{OrdersServer, TOKEN};

use crate::common::{Api, Server, create_tenant, pointers};

/// A server with local tools allowed, tenant `acme` with the MCP token as its secret `mcp`, and
/// a scripted model that looks an order up (a bad id when the customer says "bad").
fn start(dir: &std::path::Path) -> (Server, String) {
    let secrets = dir.join("secrets.json");
    std::fs::write(&secrets, json!({ "acme": { "mcp": format!("Bearer {TOKEN}") } }).to_string()).unwrap();
    let script = dir.join("script.json");
    let rules = json!({ "rules": [
        { "when": { "afterTool": "lookup_order" }, "then": { "text": "Your order has shipped." } },
        { "when": { "userText": { "matches": "bad" } },
          "then": { "toolCalls": [{ "name": "lookup_order", "input": { "order": { "id": "12" } } }] } },
        { "then": { "toolCalls": [{ "name": "lookup_order", "input": { "order": { "id": "1234", "channel": "web" } } }] } }
    ] });
    std::fs::write(&script, rules.to_string()).unwrap();
    let data = dir.join("data");
    let server = Server::start_with_script(
        &data,
        &script,
        &["--secrets-file", secrets.to_str().unwrap(), "--allow-private-webhooks"],
    );
    let key = create_tenant(&server, "acme");
    (server, key)
}

fn server_body(url: &str) -> Value {
    json!({ "url": url, "secretRef": "mcp", "timeoutMs": 5000 })
}

#[tokio::test]
async fn an_mcp_servers_tool_is_discovered_imported_called_by_a_turn_and_refreshed() {
    let mut orders = OrdersServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (server, key) = start(dir.path());
    let api = Api::new(&server, &key);

    // the server's tools, each with the body that creates it
    let found = api.post("/tenants/acme/tools/discover", server_body(&orders.url)).await;
    assert_eq!(found.status, 200, "{}", found.body);
    let tools = found.body["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["lookup_order", "cancel_order", "slow_lookup"]);
    assert!(tools.iter().all(|t| t["problems"] == json!([])), "{tools:?}");
    let lookup = &tools[0]["tool"];
    assert_eq!(
        lookup["handler"],
        json!({ "type": "mcp", "url": orders.url, "tool": "lookup_order", "secretRef": "mcp", "timeoutMs": 5000 })
    );
    assert!(lookup["parameters"].to_string().contains("$ref"), "{lookup}");

    // imported, and granted to an agent
    let created = api.post("/tenants/acme/tools", lookup.clone()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let tool_id = created.body["toolId"].as_str().unwrap().to_owned();
    let agent = api
        .post(
            "/tenants/acme/agents",
            json!({ "name": "Orders", "systemPrompt": "You look orders up.", "model": "m",
                                              "tools": ["send_message", tool_id] }),
        )
        .await;
    let agent_id = agent.body["agentId"].as_str().unwrap().to_owned();

    // a turn calls it: the server's structured result is what the model read
    let invoke = format!("/tenants/acme/agents/{agent_id}/invoke");
    let turn = record(&api, &invoke, "c-1", "Where is my order?").await;
    assert_eq!(turn["status"], "success", "{turn}");
    let call = &turn["toolCalls"][0];
    assert_eq!((call["name"].as_str(), call["isError"].as_bool()), (Some("lookup_order"), Some(false)), "{call}");
    assert_eq!(call["output"], json!({ "status": "shipped", "order": "1234" }));
    assert_eq!(
        (call["webhook"]["outcome"].as_str(), call["webhook"]["host"].as_str()),
        (Some("ok"), Some("127.0.0.1"))
    );
    assert_eq!(
        orders.next_call(),
        json!({ "tool": "lookup_order", "arguments": { "order": { "id": "1234", "channel": "web" } } })
    );
    assert!(!turn.to_string().contains(TOKEN), "the credential is in no record");
    // and replayed from the record, the MCP server is not called again and the actions are the same
    let replayed = api
        .post(&format!("/tenants/acme/executions/{}/replay", turn["executionId"].as_str().unwrap()), json!({}))
        .await;
    assert_eq!(replayed.body["same"], true, "{}", replayed.body);

    // arguments that break the server's schema are refused before the server sees them
    let bad = record(&api, &invoke, "c-2", "a bad one").await;
    let call = &bad["toolCalls"][0];
    assert_eq!(
        (call["isError"].as_bool(), call["webhook"]["outcome"].as_str()),
        (Some(true), Some("invalid_arguments"))
    );
    assert!(call["output"]["problems"][0].as_str().unwrap().starts_with("/order/id: "), "{call}");

    // refreshed: unchanged while the copy is the server's
    let refresh = format!("/tenants/acme/tools/{tool_id}/refresh");
    let same = api.post(&refresh, json!({})).await;
    assert_eq!((same.status.as_u16(), &same.body["changed"]), (200, &json!(false)), "{}", same.body);
    // a copy that drifted from the server's is put back, as the record's next version
    let mut drifted = created.body.clone();
    for owned in ["tenantId", "toolId", "createdAt", "updatedAt", "version", "type", "status"] {
        drifted.as_object_mut().unwrap().remove(owned);
    }
    drifted["description"] = json!("An old description.");
    let put = api
        .call(
            axum::http::Method::PUT,
            &format!("/tenants/acme/tools/{tool_id}"),
            Some(drifted),
            &[("if-match", "\"1\"")],
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.body);
    let changed = api.post(&refresh, json!({})).await;
    assert_eq!(changed.body["changed"], true, "{}", changed.body);
    assert_eq!(
        (changed.body["tool"]["description"].as_str(), changed.body["tool"]["version"].as_u64()),
        (Some("Finds an order's status."), Some(3))
    );
    let versions = api.get(&format!("/tenants/acme/tools/{tool_id}/versions")).await;
    assert_eq!(versions.body["items"].as_array().unwrap().len(), 3, "{}", versions.body);
}

/// The execution record of an invoke of the agent at `invoke` in `conversation`.
async fn record(api: &Api, invoke: &str, conversation: &str, message: &str) -> Value {
    let turn = api.post(invoke, json!({ "conversationId": conversation, "message": message })).await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let id = turn.body["executionId"].as_str().unwrap();
    api.get(&format!("/tenants/acme/executions/{id}")).await.body
}

#[tokio::test]
async fn discovery_names_a_bad_body_a_server_down_or_broken_and_a_tool_that_is_not_one_of_a_server() {
    let orders = OrdersServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (server, key) = start(dir.path());
    let api = Api::new(&server, &key);
    let discover = "/tenants/acme/tools/discover";

    let bad = api.post(discover, json!({ "url": "ftp://x", "secretRef": "mcp", "extra": 1 })).await;
    assert_eq!((bad.status.as_u16(), pointers(&bad)), (400, vec!["/extra".to_owned()]), "{}", bad.body);
    let bad = api.post(discover, json!({ "url": "ftp://x", "timeoutMs": 0 })).await;
    assert_eq!(pointers(&bad), ["/url", "/timeoutMs"], "{}", bad.body);

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let r = api.post(discover, server_body(&down)).await;
    assert_eq!(
        (r.status.as_u16(), r.body["type"].as_str()),
        (502, Some("urn:switchboard:problem:upstream-failed")),
        "{}",
        r.body
    );
    let r = api.post(discover, server_body(&orders.broken_url)).await;
    assert_eq!(r.status, 502, "{}", r.body);
    let r = api.post(discover, json!({ "url": orders.url, "secretRef": "missing" })).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let r = api.post(discover, json!({ "url": orders.url })).await;
    assert_eq!(r.status, 502, "the server refuses a call without its token: {}", r.body);
    assert!(!r.body.to_string().contains(TOKEN));

    let webhook = api
        .post(
            "/tenants/acme/tools",
            json!({ "name": "hook", "description": "A webhook", "parameters": { "type": "object" },
                                            "handler": { "type": "webhook", "url": "https://example.com/h" } }),
        )
        .await;
    let id = webhook.body["toolId"].as_str().unwrap();
    let r = api.post(&format!("/tenants/acme/tools/{id}/refresh"), json!({})).await;
    assert_eq!(r.status, 409, "{}", r.body);
}

#[tokio::test]
async fn without_the_development_flag_a_server_on_a_private_address_is_refused() {
    let orders = OrdersServer::start();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let api = Api::new(&server, &create_tenant(&server, "acme"));
    let r = api.post("/tenants/acme/tools/discover", json!({ "url": orders.url.replace("http:", "https:") })).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("loopback"), "{}", r.body);
}
