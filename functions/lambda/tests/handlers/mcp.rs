//! Tools of a tenant's MCP server on the AWS profile: the executor handler calls a tool of a
//! server built on the official Python SDK (over Streamable HTTP on loopback, allowed for these
//! tests only), its credential read from Secrets Manager, the arguments checked against the
//! schema Pydantic wrote; a server that is down is a tool error for the model, and the record in
//! DynamoDB says which.

use switchboard_engine::WebhookCaller;
use switchboard_testkit::mcp::{OrdersServer, TOKEN};

use super::*;

/// The world with tool `TOOL` the server's `lookup_order` (its listed schema and description)
/// at `url`, its credential in Secrets Manager, granted to the agent; the customer's message
/// routed. The model calls it with `order`, then answers.
async fn mcp_world(orders: &OrdersServer, url: &str, order: Value) -> World {
    let script = vec![
        Reply::tool_use("tu-1", "lookup_order", json!({ "order": order })),
        Reply::text("Your order has shipped."),
    ];
    let w = world_with(script, Options { webhooks: LOCAL_WEBHOOKS, ..Options::default() }).await;
    let secret_ref = format!("mcp-{}", ulid::Ulid::generate().to_string().to_lowercase());
    aws_sdk_secretsmanager::Client::new(&w.sdk)
        .create_secret()
        .name(format!("switchboard/t-1/{secret_ref}"))
        .secret_string(format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    let server = switchboard_domain::mcp::McpServer {
        url: orders.url.clone(),
        secret_ref: Some(secret_ref),
        auth_header: None,
        timeout_ms: 5000,
        headers: Default::default(),
    };
    // The tool as `tools mcp add` makes it, from what the server lists.
    let caller = switchboard_webhooks::HttpWebhookCaller::new(LOCAL_WEBHOOKS, w.wiring.secrets.clone()).unwrap();
    let listed = caller.list_mcp(&"t-1".parse().unwrap(), &server).await.unwrap();
    let mut body = listed.iter().find(|t| t.name == "lookup_order").unwrap().tool_body(&server);
    body["handler"]["url"] = json!(url);
    for (k, v) in [("tenantId", json!("t-1")), ("toolId", json!(TOOL)), ("createdAt", json!("2026-11-23T00:00:00Z"))] {
        body[k] = v;
    }
    body["updatedAt"] = json!("2026-11-23T00:00:00Z");
    let tool: Tool = serde_json::from_value(body).unwrap();
    tool.validate().unwrap();
    w.wiring.store.put_config(&ConfigRecord::Tool(tool), None, &by()).await.unwrap();
    let agent: Agent = serde_json::from_value(json!({
        "tenantId": "t-1", "agentId": AGENT, "name": "Orders", "systemPrompt": "You look orders up.",
        "model": "anthropic.claude-3-haiku-20240307-v1:0", "tools": ["send_message", TOOL],
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    put(&w.wiring, ConfigRecord::Agent(agent)).await;
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    w
}

async fn the_record(w: &World) -> switchboard_domain::ExecutionRecord {
    let tenant: TenantId = "t-1".parse().unwrap();
    w.wiring.store.execution_for_source(&tenant, "message-c-1:m-1").await.unwrap().unwrap()
}

#[tokio::test]
async fn the_executor_calls_a_tool_of_the_tenants_mcp_server_with_its_credential_from_secrets_manager() {
    let mut orders = OrdersServer::start();
    let w = mcp_world(&orders, &orders.url.clone(), json!({ "id": "1234", "channel": "phone" })).await;

    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);

    // the server was called with the model's arguments, and the model read its structured result
    assert_eq!(
        orders.next_call(),
        json!({ "tool": "lookup_order", "arguments": { "order": { "id": "1234", "channel": "phone" } } })
    );
    let second_call = w.bedrock.requests()[1].1.to_string();
    assert!(second_call.contains("shipped"), "{second_call}");
    assert_eq!(w.conversations.accepted()[0].text, "Your order has shipped.");
    let record = the_record(&w).await;
    let call = &record.tool_calls[0];
    assert_eq!((call.is_error, &call.output), (false, &json!({ "status": "shipped", "order": "1234" })));
    assert_eq!(call.webhook.as_ref().unwrap().outcome, "ok");
    assert!(!serde_json::to_string(&record).unwrap().contains(TOKEN), "no credential in the record");
}

#[tokio::test]
async fn arguments_that_break_the_servers_schema_and_a_server_that_is_down_are_tool_errors_named_in_the_record() {
    let orders = OrdersServer::start();
    // an id the server's pattern refuses: never sent
    let w = mcp_world(&orders, &orders.url.clone(), json!({ "id": "12" })).await;
    poll_once(&w).await.unwrap();
    let call = &the_record(&w).await.tool_calls[0];
    assert_eq!((call.is_error, call.webhook.as_ref().unwrap().outcome.as_str()), (true, "invalid_arguments"));
    assert!(call.output["problems"][0].as_str().unwrap().starts_with("/order/id: "), "{}", call.output);

    // a server that is not there
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let w = mcp_world(&orders, &down, json!({ "id": "1234" })).await;
    poll_once(&w).await.unwrap();
    let record = the_record(&w).await;
    assert_eq!(record.status, ExecutionStatus::Success, "a tool's failure is the model's to read");
    let call = &record.tool_calls[0];
    assert_eq!((call.is_error, call.webhook.as_ref().unwrap().outcome.as_str()), (true, "connect_error"));
    assert!(call.output["error"].as_str().unwrap().contains("could not be called"), "{}", call.output);
}
