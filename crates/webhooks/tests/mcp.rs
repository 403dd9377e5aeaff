#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The caller against a tenant's MCP server built on the official Python SDK (`mcp`), over the
//! Streamable HTTP transport on a loopback port: the listing with the schemas Pydantic writes,
//! a call, the tool's own error, a slow tool, a server that is down or breaks the protocol, a
//! wrong credential, and the production policy's refusal of a private address.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_domain::TenantId;
use switchboard_domain::mcp::{McpHandler, McpServer};
use switchboard_engine::ports::{McpRequest, SecretError, Secrets, WebhookCaller, WebhookError};
use switchboard_testkit::mcp::{OrdersServer, TOKEN};
use switchboard_webhooks::{HttpWebhookCaller, WebhookPolicy};

const LOCAL: WebhookPolicy = WebhookPolicy { allow_http: true, allow_private: true };

struct MapSecrets(HashMap<String, String>);

#[async_trait]
impl Secrets for MapSecrets {
    async fn get_secret(&self, _tenant: &TenantId, name: &str) -> Result<Option<String>, SecretError> {
        Ok(self.0.get(name).cloned())
    }
}

fn caller(policy: WebhookPolicy) -> HttpWebhookCaller {
    let secrets = HashMap::from([
        ("mcp".to_owned(), format!("Bearer {TOKEN}")),
        ("stale".to_owned(), "Bearer not-the-token".to_owned()),
    ]);
    HttpWebhookCaller::new(policy, Arc::new(MapSecrets(secrets))).unwrap()
}

fn server(url: &str, secret: &str, timeout_ms: u32) -> McpServer {
    McpServer {
        url: url.to_owned(),
        secret_ref: Some(secret.to_owned()),
        auth_header: None,
        timeout_ms,
        headers: Default::default(),
    }
}

fn call(server: &McpServer, tool: &str, arguments: Value) -> McpRequest {
    McpRequest {
        tenant_id: "acme".parse().unwrap(),
        tool_name: tool.to_owned(),
        handler: McpHandler::on(server, tool),
        arguments: arguments.as_object().cloned().unwrap(),
        idempotency_key: "k-1".into(),
    }
}

#[tokio::test]
async fn the_servers_tools_are_listed_with_the_schemas_pydantic_wrote_and_a_tool_is_called() {
    let mut orders = OrdersServer::start();
    let caller = caller(LOCAL);
    let server = server(&orders.url, "mcp", 10_000);

    let listed = caller.list_mcp(&"acme".parse().unwrap(), &server).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["lookup_order", "cancel_order", "slow_lookup"]);
    let lookup = &listed[0];
    assert_eq!(lookup.description, "Finds an order's status.");
    let schema = lookup.input_schema.to_string();
    assert!(schema.contains("$defs") && schema.contains("$ref") && schema.contains("anyOf"), "{schema}");
    // the schema is one Switchboard accepts, and enforces
    let mut errors = switchboard_domain::ValidationErrors::default();
    switchboard_domain::schema::check_supported(&lookup.input_schema, "/parameters", &mut errors);
    assert!(errors.is_empty(), "{errors}");
    let bad = switchboard_domain::schema::validate(
        &lookup.input_schema,
        &json!({ "order": { "id": "12", "channel": "fax" } }),
    );
    let at: Vec<String> = bad.unwrap_err().iter().map(|e| e.split(':').next().unwrap().to_owned()).collect();
    assert_eq!(at, ["/order/channel", "/order/id"]);

    let answer = caller.call_mcp(&call(&server, "lookup_order", json!({ "order": { "id": "1234" } }))).await.unwrap();
    assert!(!answer.is_error);
    assert_eq!(answer.structured, Some(json!({ "status": "shipped", "order": "1234" })));
    assert_eq!(answer.host, "127.0.0.1");
    assert_eq!(orders.next_call(), json!({ "tool": "lookup_order", "arguments": { "order": { "id": "1234" } } }));
}

#[tokio::test]
async fn the_tools_own_error_is_an_answer_and_a_slow_tool_times_out() {
    let mut orders = OrdersServer::start();
    let caller = caller(LOCAL);
    let server = server(&orders.url, "mcp", 10_000);
    let failed = caller.call_mcp(&call(&server, "cancel_order", json!({ "order_id": "1234" }))).await.unwrap();
    assert!(failed.is_error);
    assert!(failed.content[0]["text"].as_str().unwrap().contains("cannot be cancelled"), "{:?}", failed.content);
    assert_eq!(orders.next_call()["tool"], "cancel_order");

    let impatient = server_with_timeout(&server, 700);
    let slow = caller.call_mcp(&call(&impatient, "slow_lookup", json!({ "order_id": "1234" }))).await;
    assert_eq!(slow.unwrap_err(), WebhookError::Timeout { attempts: 1 });
}

fn server_with_timeout(server: &McpServer, timeout_ms: u32) -> McpServer {
    McpServer { timeout_ms, ..server.clone() }
}

#[tokio::test]
async fn a_server_that_is_down_broken_or_refuses_the_credential_is_named_and_the_credential_never_shown() {
    let orders = OrdersServer::start();
    let caller = caller(LOCAL);
    let args = json!({ "order": { "id": "1234" } });

    // a port nothing listens on
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let e = caller.call_mcp(&call(&server(&down, "mcp", 5_000), "lookup_order", args.clone())).await.unwrap_err();
    assert!(matches!(e, WebhookError::Connect { .. }), "{e:?}");

    // an endpoint that answers outside the protocol
    let e = caller.call_mcp(&call(&server(&orders.broken_url, "mcp", 5_000), "lookup_order", args.clone())).await;
    assert!(matches!(e, Err(WebhookError::Protocol(_))), "{e:?}");

    // a credential the server refuses
    let e =
        caller.call_mcp(&call(&server(&orders.url, "stale", 5_000), "lookup_order", args.clone())).await.unwrap_err();
    assert_eq!(e, WebhookError::Http { status: 401 });
    for shown in [e.to_string(), format!("{e:?}")] {
        assert!(!shown.contains("not-the-token") && !shown.contains(TOKEN), "{shown}");
    }

    // a secret that does not exist
    let e = caller.call_mcp(&call(&server(&orders.url, "missing", 5_000), "lookup_order", args)).await.unwrap_err();
    assert!(matches!(e, WebhookError::Secret(_)), "{e:?}");
}

#[tokio::test]
async fn the_production_policy_refuses_a_server_on_a_private_address_before_connecting() {
    let mut orders = OrdersServer::start();
    let production = caller(WebhookPolicy { allow_http: true, allow_private: false });
    let server = server(&orders.url, "mcp", 5_000);
    let e = production.list_mcp(&"acme".parse().unwrap(), &server).await.unwrap_err();
    assert!(matches!(&e, WebhookError::Blocked(why) if why.contains("loopback")), "{e:?}");
    let by_name = McpServer { url: orders.url.replace("127.0.0.1", "localhost"), ..server.clone() };
    let e = production.call_mcp(&call(&by_name, "lookup_order", json!({}))).await.unwrap_err();
    assert!(matches!(&e, WebhookError::Blocked(why) if why.contains("loopback")), "{e:?}");
    // and nothing reached the server: the next call it sees is this one, allowed
    caller(LOCAL).call_mcp(&call(&server, "lookup_order", json!({ "order": { "id": "0001" } }))).await.unwrap();
    assert_eq!(orders.next_call()["arguments"]["order"]["id"], "0001");
}
