//! Webhook tools end to end: a tool created over the API, called by the agent through the real
//! HTTP caller, signed with the tenant's secret from the secrets file, verified by a receiver on
//! a loopback port — and refused when loopback is not explicitly allowed. A Standard Webhooks
//! tool is verified by a receiver built on the scheme's official Python library, and a webhook
//! trigger takes deliveries a sender built on that library signs (`tests/senders/`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use common::{Server, create_tenant, workspace_root};
use reqwest::Client;
use serde_json::{Value, json};
use switchboard_domain::webhook::standard;
use switchboard_testkit::webhooks::WebhookReceiver;

const SECRET: &str = "whsec-test-0123456789";
/// A Standard Webhooks secret: `whsec_` and the base64 of 32 bytes.
const STANDARD_SECRET: &str = "whsec_b3JkZXJzLWhvb2stc3RhbmRhcmQtd2ViaG9va3MtMDE=";

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Sets up tenant `acme` with a webhook tool at `url` (its handler's other members overridden
/// by `handler`), an agent using it and a catch-all trigger.
async fn configure(server: &Server, key: &str, url: &str, handler: Value) {
    let client = Client::new();
    let post =
        |path: &str, body: Value| client.post(format!("{}{path}", server.base)).bearer_auth(key).json(&body).send();
    let mut tool = json!({ "name": "lookup_order", "description": "Finds an order's status",
        "parameters": { "type": "object", "properties": { "orderId": { "type": "string" } }, "required": ["orderId"] },
        "handler": { "type": "webhook", "url": url, "secretRef": "orders", "timeoutMs": 5000,
                     "retryPolicy": { "maxRetries": 0, "backoffMs": 0 } } });
    for (name, value) in handler.as_object().unwrap() {
        tool["handler"][name] = value.clone();
    }
    let tool = post("/tenants/acme/tools", tool).await.unwrap();
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

/// `serve` in `dir` with the scripted model, loopback webhooks allowed, and tenant `acme`'s
/// secret `orders` set to `secret`; and a key of that tenant.
fn serve_with_secret(dir: &Path, secret: &str) -> (Server, String) {
    serve_with_script(dir, secret, &script(dir))
}

/// [`serve_with_secret`] with the scripted model following `script`.
fn serve_with_script(dir: &Path, secret: &str, script: &Path) -> (Server, String) {
    let secrets = dir.join("secrets.json");
    write(&secrets, &format!(r#"{{"acme": {{"orders": "{secret}"}}}}"#));
    let data = dir.join("data");
    let server = Server::start_with_script(
        &data,
        script,
        &["--secrets-file", secrets.to_str().unwrap(), "--allow-private-webhooks"],
    );
    let key = create_tenant(&data, "acme");
    (server, key)
}

#[tokio::test]
async fn an_agents_hook_is_called_signed_over_http_and_redacts_what_the_model_sees() {
    let dir = tempfile::tempdir().unwrap();
    // given a before_model hook that takes e-mail addresses out of the messages
    let receiver = WebhookReceiver::answering("/redact", SECRET, |body| {
        let messages = body["request"]["messages"].to_string().replace("ana@example.com", "[email]");
        json!({ "messages": serde_json::from_str::<Value>(&messages).unwrap() })
    })
    .await;
    // and a model (the scripted test double) that repeats what it was sent
    let script = dir.path().join("echo.json");
    write(&script, r#"{"rules": [{"then": {"text": "You said: {{userText}}"}}]}"#);
    let (server, key) = serve_with_script(dir.path(), SECRET, &script);
    let client = Client::new();
    let post =
        |path: &str, body: Value| client.post(format!("{}{path}", server.base)).bearer_auth(&key).json(&body).send();
    let agent = json!({ "name": "Support", "systemPrompt": "You help.", "model": "m", "tools": ["send_message"],
        "hooks": [{ "at": "before_model", "handler": { "url": receiver.url, "secretRef": "orders", "timeoutMs": 5000 } }] });
    let agent = post("/tenants/acme/agents", agent).await.unwrap().json::<Value>().await.unwrap();
    let trigger = json!({ "name": "all", "agentId": agent["agentId"], "eventType": "message.new", "priority": 1, "conditions": {} });
    assert!(post("/tenants/acme/triggers", trigger).await.unwrap().status().is_success());
    // when the customer writes an address
    let event = json!({ "id": "h-1", "source": "conversations-service", "detail-type": "message.new",
        "detail": { "tenantId": "acme", "conversationId": "c-h", "messageId": "m-h", "channel": {}, "conversation": {},
                    "message": { "direction": "inbound", "text": "my email is ana@example.com" } } });
    let res = post("/events?wait=30", event).await.unwrap().json::<Value>().await.unwrap();
    let execution = &res["execution"];
    // then the model saw it redacted, and the hook got a signed request under the turn's key
    assert_eq!(execution["actions"][0]["text"], "You said: my email is [email]", "{execution}");
    assert_eq!(execution["hookCalls"][0]["outcome"], "changed", "{execution}");
    let seen = receiver.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].verified, "signed with the tenant's secret like a tool");
    assert_eq!(seen[0].idempotency_key, seen[0].body["idempotencyKey"].as_str().unwrap());
    assert_eq!(seen[0].body["hook"], "before_model");
    assert!(seen[0].body.get("conversationId").is_none(), "no personal data unless includePii");
}

#[tokio::test]
async fn the_agent_calls_a_signed_webhook_that_the_receiver_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = WebhookReceiver::start("/hook", SECRET).await;
    let url = receiver.url.clone();
    let (server, key) = serve_with_secret(dir.path(), SECRET);
    configure(&server, &key, &url, json!({})).await;

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
    configure(&server, &key, &url, json!({})).await;

    let execution = ask(&server, &key).await;
    // the agent goes on (the model is told), but nothing left the machine
    assert_eq!(execution["status"], "success", "{execution}");
    assert_eq!(execution["toolCalls"][0]["isError"], true);
    assert_eq!(execution["toolCalls"][0]["webhook"]["outcome"], "blocked");
    assert!(receiver.seen().is_empty());
    drop(receiver);
}

// ---- Standard Webhooks, verified by the official library ----

/// The Python with the official `standardwebhooks` package: `SWITCHBOARD_PYTHON`, else the
/// emulator's venv, where `scripts/test.sh` installs it.
fn python() -> PathBuf {
    let path = std::env::var_os("SWITCHBOARD_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv-emulator/bin/python"));
    assert!(
        path.exists(),
        "no Python at {}: run ./scripts/test.sh, which installs standardwebhooks into .venv-emulator \
         (or set SWITCHBOARD_PYTHON to a python that has standardwebhooks==1.1.0)",
        path.display()
    );
    path
}

/// `tests/receivers/standard_webhooks.py` on a loopback port; killed by its PID when dropped.
struct LibraryReceiver {
    url: String,
    child: Child,
    outcomes: BufReader<ChildStdout>,
}

impl LibraryReceiver {
    fn start(secret: &str, options: &[&str]) -> Self {
        let python = python();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("receivers/standard_webhooks.py");
        let mut child = Command::new(&python)
            .arg(script)
            .arg(secret)
            .args(options)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut outcomes = BufReader::new(child.stdout.take().unwrap());
        let mut port = String::new();
        outcomes.read_line(&mut port).unwrap();
        let port: u16 = port.trim().parse().unwrap_or_else(|_| {
            panic!(
                "the receiver did not start (see its error above): does {} have standardwebhooks? \
                 ./scripts/test.sh installs it",
                python.display()
            )
        });
        Self { url: format!("http://127.0.0.1:{port}/hook"), child, outcomes }
    }

    /// What the receiver made of the next request: printed before it answered.
    fn next_outcome(&mut self) -> Value {
        let mut line = String::new();
        self.outcomes.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("an outcome line, not {line:?}: {e}"))
    }
}

impl Drop for LibraryReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn the_official_library_verifies_every_delivery_of_a_standard_webhooks_tool() {
    // given a receiver that answers the first delivery 503, and a tool that may retry once
    let mut receiver = LibraryReceiver::start(STANDARD_SECRET, &["--unavailable-first"]);
    let dir = tempfile::tempdir().unwrap();
    let (server, key) = serve_with_secret(dir.path(), STANDARD_SECRET);
    let handler = json!({ "signature": "standard-webhooks", "retryPolicy": { "maxRetries": 1, "backoffMs": 0 } });
    configure(&server, &key, &receiver.url, handler).await;

    // when the agent calls the tool
    let execution = ask(&server, &key).await;

    // then the tool result is the receiver's verified answer
    assert_eq!(execution["status"], "success", "{execution}");
    let call = &execution["toolCalls"][0];
    assert_eq!(call["isError"], false, "{call}");
    assert_eq!(call["output"], json!({ "status": "shipped", "eta": "Thursday" }));
    assert_eq!((call["webhook"]["status"].as_u64(), call["webhook"]["attempts"].as_u64()), (Some(200), Some(2)));
    // and the library verified both deliveries, each named by the call's idempotency key
    let id = call["idempotencyKey"].as_str().unwrap();
    for status in [503, 200] {
        let outcome = receiver.next_outcome();
        assert_eq!(outcome["verified"], true, "{outcome}");
        assert_eq!((outcome["id"].as_str(), outcome["status"].as_u64()), (Some(id), Some(status)));
        assert_eq!(outcome["body"]["arguments"], json!({ "orderId": "1234" }));
    }
}

#[tokio::test]
async fn the_official_library_rejects_a_tampered_body_a_stale_timestamp_and_a_wrong_secret() {
    let mut receiver = LibraryReceiver::start(STANDARD_SECRET, &[]);
    let key = standard::Key::from_secret(STANDARD_SECRET).unwrap();
    let wrong = standard::Key::from_secret("whsec_bm90LXRoZS1yZWNlaXZlcnMtc2VjcmV0").unwrap();
    let body = br#"{"tool":"lookup_order","arguments":{"orderId":"1234"}}"#;
    let tampered = br#"{"tool":"lookup_order","arguments":{"orderId":"9999"}}"#;
    let now = chrono::Utc::now().timestamp();
    let client = Client::new();
    /// What is wrong, the key that signs, when, the body sent, and the receiver's status and error.
    type Case<'a> = (&'a str, &'a standard::Key, i64, &'a [u8], u16, &'a str);
    let cases: [Case; 4] = [
        ("signed by us as the caller signs", &key, now, body, 200, ""),
        ("a tampered body", &key, now, tampered, 401, "No matching signature found"),
        ("six minutes old", &key, now - 360, body, 401, "Message timestamp too old"),
        ("a wrong secret", &wrong, now, body, 401, "No matching signature found"),
    ];
    for (case, signer, at, sent, status, error) in cases {
        let signature = standard::sign(signer, "evt-1/0", at, body);
        let response = client
            .post(&receiver.url)
            .header(standard::ID_HEADER, "evt-1/0")
            .header(standard::TIMESTAMP_HEADER, at)
            .header(standard::SIGNATURE_HEADER, signature)
            .header("content-type", "application/json")
            .body(sent.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{case}");
        let outcome = receiver.next_outcome();
        assert_eq!(outcome["verified"], status == 200, "{case}: {outcome}");
        assert_eq!(outcome["error"].as_str().unwrap_or_default(), error, "{case}");
    }
}

// ---- webhook triggers: deliveries signed by the official library ----

/// One delivery sent by `tests/senders/standard_webhooks.py`, signed by the official library:
/// the status and the answer.
fn library_delivery(secret: &str, url: &str, id: &str, body: &str, age_secs: Option<u32>) -> (u16, Value) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("senders/standard_webhooks.py");
    let mut command = Command::new(python());
    command.arg(script).args([secret, url, id, body]);
    if let Some(age) = age_secs {
        command.args(["--age", &age.to_string()]);
    }
    let output = command.stderr(Stdio::inherit()).output().unwrap();
    assert!(output.status.success(), "the sender failed (see its error above)");
    let line: Value = serde_json::from_slice(&output.stdout).unwrap();
    (u16::try_from(line["status"].as_u64().unwrap()).unwrap(), line["body"].clone())
}

#[tokio::test]
async fn a_webhook_trigger_takes_deliveries_the_official_library_signs_and_refuses_a_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("echo.json");
    write(&script, r#"{"rules": [{"then": {"text": "Seen: {{userText}}"}}]}"#);
    let (server, key) = serve_with_script(dir.path(), STANDARD_SECRET, &script);
    let client = Client::new();
    let post =
        |path: &str, body: Value| client.post(format!("{}{path}", server.base)).bearer_auth(&key).json(&body).send();
    let agent = post(
        "/tenants/acme/agents",
        json!({ "name": "Tickets", "systemPrompt": "You triage.", "model": "m", "tools": ["send_message"] }),
    )
    .await
    .unwrap();
    let agent = agent.json::<Value>().await.unwrap()["agentId"].as_str().unwrap().to_owned();
    let trigger = json!({ "name": "crm", "agentId": agent, "eventType": "webhook",
        "webhook": { "secretRef": "orders", "conversationPointer": "/ticket/id" } });
    let trigger = post("/tenants/acme/triggers", trigger).await.unwrap();
    assert_eq!(trigger.status(), 201);
    let trigger = trigger.json::<Value>().await.unwrap()["triggerId"].as_str().unwrap().to_owned();
    let url = format!("{}/hooks/acme/{trigger}?wait=30", server.base);
    let body = r#"{"ticket":{"id":"T-42"},"text":"the printer is on fire"}"#;

    // a delivery the library signed runs the agent on the ticket's conversation
    let (status, first) = library_delivery(STANDARD_SECRET, &url, "msg_2mX9", body, None);
    assert_eq!((status, first["status"].as_str()), (200, Some("success")), "{first}");
    assert_eq!(first["actions"][0]["text"], format!("Seen: {body}"));
    // the library's retry of it (the same id, signed again) answers the first execution
    let (status, again) = library_delivery(STANDARD_SECRET, &url, "msg_2mX9", body, None);
    assert_eq!((status, &again["executionId"]), (200, &first["executionId"]), "{again}");
    // signed six minutes ago, or with another secret: refused
    let (status, stale) = library_delivery(STANDARD_SECRET, &url, "msg_2mXa", body, Some(360));
    assert_eq!((status, stale["type"].as_str()), (401, Some("urn:switchboard:problem:bad-signature")), "{stale}");
    let other = "whsec_bm90LXRoZS1yZWNlaXZlcnMtc2VjcmV0";
    assert_eq!(library_delivery(other, &url, "msg_2mXb", body, None).0, 401);
    let session = client
        .get(format!("{}/tenants/acme/conversations/T-42/sessions", server.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(session["sessions"].as_array().unwrap().len(), 1, "{session}");
}
