//! `switchboard serve` answering through each real model adapter, no scripted model: the example
//! tenant's agents name `openai:…`, `anthropic:…` or `bedrock:…`, the provider's usual
//! environment variables point at a local fake of its wire protocol, and one customer message
//! goes in over HTTP. Start-up refuses an agent whose provider has no settings, naming the
//! variable; the API refuses an unknown provider with its pointer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::{Server, examples};
use serde_json::{Value, json};
use switchboard_domain::Recording;
use switchboard_engine::ModelRequest;
#[cfg(feature = "aws")]
use switchboard_testkit::providers::converse;
use switchboard_testkit::providers::{FakeProvider, Wire, chat, messages};

const REPLY: &str = "Order 1234 shipped yesterday.";

/// The example tenant with every agent's model set to `model` (left out when empty), written
/// into `dir`.
fn tenant_with_model(dir: &Path, model: &str) -> PathBuf {
    let mut tenant: Value =
        serde_json::from_str(&std::fs::read_to_string(examples().join("tenant.json")).unwrap()).unwrap();
    for agent in tenant["agents"].as_array_mut().unwrap() {
        if model.is_empty() {
            agent.as_object_mut().unwrap().remove("model");
        } else {
            agent["model"] = json!(model);
        }
    }
    let path = dir.join("tenant.json");
    std::fs::write(&path, tenant.to_string()).unwrap();
    path
}

fn event(id: &str) -> Value {
    json!({
        "version": "0", "id": id, "source": "conversations-service", "detail-type": "message.new",
        "detail": {
            "tenantId": "acme", "conversationId": format!("c-{id}"), "messageId": format!("msg-{id}"),
            "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
            "message": { "direction": "inbound", "text": "Where is my order #1234?" }
        }
    })
}

/// What one answered message left: its record, the conversation's texts, its model calls with
/// their recorded content (`GET …/model-calls`), every byte of the data directory's files, and
/// what the server logged at `debug`.
struct Answered {
    execution: Value,
    texts: Vec<String>,
    calls: Vec<Value>,
    stored: Vec<u8>,
    log: String,
}

/// Starts the server with `env`, sends one message and returns what it left.
async fn answer_one_message(model: &str, env: &[(&str, &str)]) -> Answered {
    let dir = tempfile::tempdir().unwrap();
    let tenant = tenant_with_model(dir.path(), model);
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let server = Server::start_logging(&data, &["--tenant", tenant.to_str().unwrap()], env, &log);
    let client = reqwest::Client::new();
    let res = client
        .post(format!("{}/events?wait=30", server.base))
        .bearer_auth(&server.admin)
        .json(&event("m-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 202);
    let body: Value = res.json().await.unwrap();
    let get = async |path: &str| -> Value {
        let res = client.get(format!("{}{path}", server.base)).bearer_auth(&server.admin).send().await.unwrap();
        res.json().await.unwrap()
    };
    let convo = get("/tenants/acme/conversations/c-m-1/messages").await;
    let texts = convo["messages"].as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap().to_owned()).collect();
    let execution = body["execution"].clone();
    // whatever the provider, the tenant's usage report counts exactly this execution's calls
    let usage = get("/tenants/acme/usage").await;
    let calls = execution["modelCalls"].as_array().map_or(0, Vec::len);
    assert_eq!(usage["total"]["calls"], json!(calls), "{usage}");
    assert_eq!(usage["total"]["costUsd"], execution["costUsd"], "{usage}");
    let input: u64 = execution["modelCalls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["usage"]["inputTokens"].as_u64().unwrap())
        .sum();
    assert_eq!(usage["total"]["inputTokens"], json!(input), "{usage}");
    let recorded =
        get(&format!("/tenants/acme/executions/{}/model-calls", execution["executionId"].as_str().unwrap())).await;
    let calls = recorded["calls"].as_array().cloned().unwrap_or_default();
    let mut stored = Vec::new();
    for file in std::fs::read_dir(&data).unwrap() {
        let path = file.unwrap().path();
        if path.is_file() {
            stored.extend(std::fs::read(&path).unwrap());
        }
    }
    drop(server);
    let log = std::fs::read_to_string(&log).unwrap();
    Answered { execution, texts, calls, stored, log }
}

/// A recorded call's request, as the engine sent it to the adapter (the provider's own model id).
fn recorded_request(call: &Value) -> ModelRequest {
    let r = &call["request"];
    let content = |part: &Value| part["content"].clone();
    let model = r["model"].as_str().unwrap();
    ModelRequest {
        model: model.split_once(':').map_or(model, |(_, id)| id).to_owned(),
        system: content(&r["system"]).as_str().unwrap().to_owned(),
        messages: r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| serde_json::from_value(content(m)).unwrap())
            .collect(),
        tools: serde_json::from_value(content(&r["tools"])).unwrap(),
        config: serde_json::from_value(r["config"].clone()).unwrap(),
        deadline: None,
        recording: Recording::Full,
    }
}

/// Each recorded request, encoded again by the adapter's own encoder, is the body the fake
/// received; each recorded answer is the assistant turn the next request carried; and the
/// provider's key is nowhere in the records or the data directory.
fn assert_recorded_as_received(a: &Answered, fake: &FakeProvider, encode: fn(&ModelRequest) -> Value, key: &str) {
    let received = fake.received();
    assert_eq!(a.calls.len(), received.len());
    for (call, got) in a.calls.iter().zip(&received) {
        assert_eq!(encode(&recorded_request(call)), got.body, "the recorded request is what the provider received");
    }
    let answer = a.calls[0]["response"]["message"]["content"].clone();
    let next = recorded_request(&a.calls[1]);
    assert_eq!(serde_json::to_value(&next.messages[1]).unwrap(), answer, "the answer, as the next call sent it back");
    assert_no_key(a, key);
}

fn assert_no_key(a: &Answered, key: &str) {
    assert!(a.log.contains("DEBUG"), "the server logged at debug: {}", a.log);
    for (what, text) in
        [("record", a.execution.to_string()), ("model calls", json!(a.calls).to_string()), ("log", a.log.clone())]
    {
        assert!(!text.contains(key), "the provider key is in the {what}");
    }
    let key = key.as_bytes();
    assert!(!a.stored.windows(key.len()).any(|w| w == key), "the provider key is in the data directory");
}

/// The execution's cost at `input`/`output`/`cache_read` dollars per million tokens, and each
/// call's cost in its record.
fn assert_cost(execution: &Value, input: f64, output: f64, cache_read: f64) {
    let mut total = 0u64;
    for call in execution["modelCalls"].as_array().unwrap() {
        let u = &call["usage"];
        let tokens = |k: &str| u[k].as_u64().unwrap_or(0) as f64;
        let nanos = (tokens("inputTokens") * input * 1000.0
            + tokens("outputTokens") * output * 1000.0
            + tokens("cacheReadTokens") * cache_read * 1000.0)
            .round() as u64;
        assert!(nanos > 0, "{call}");
        assert_eq!(call["costUsd"].as_f64(), Some(nanos as f64 / 1e9), "{call}");
        total += nanos;
    }
    assert_eq!(execution["costUsd"].as_f64(), Some(total as f64 / 1e9), "{execution}");
    assert!(execution["priceVersion"].is_string(), "{execution}");
}

/// The fake asked for `send_message`, then ended the turn: the reply reached the conversation.
fn assert_answered(execution: &Value, texts: &[String], answered_by: &str, fake: &FakeProvider) {
    assert_eq!(execution["status"], "success", "{execution}");
    assert_eq!(texts, ["Where is my order #1234?", REPLY]);
    let calls = execution["modelCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{execution}");
    assert_eq!(calls[0]["model"], answered_by);
    let received = fake.received();
    assert_eq!(received.len(), 2);
    assert!(received[1].body.to_string().contains("send_message"), "the tool result went back");
}

#[tokio::test]
async fn an_openai_agent_is_answered_through_chat_completions() {
    let args = json!({"text": REPLY}).to_string();
    let fake = FakeProvider::start(
        Wire::ChatCompletions,
        vec![chat::tool_calls(&[("call_1", "send_message", &args)]), chat::text("")],
    )
    .await;
    let answered =
        answer_one_message("openai:gpt-4o-mini", &[("OPENAI_API_KEY", "sk-test"), ("OPENAI_BASE_URL", &fake.base_url)])
            .await;
    let (execution, texts) = (answered.execution.clone(), answered.texts.clone());
    assert_answered(&execution, &texts, "openai:gpt-4o-mini-2024-07-18", &fake);
    // a dated snapshot is priced as its model
    assert_cost(&execution, 0.15, 0.6, 0.075);
    assert_eq!(fake.received()[0].header("authorization"), Some("Bearer sk-test"));
    assert_recorded_as_received(&answered, &fake, switchboard_models::wire::chat_completions, "sk-test");
}

#[tokio::test]
async fn an_anthropic_agent_is_answered_through_messages() {
    let fake = FakeProvider::start(
        Wire::Messages,
        vec![messages::tool_uses(&[("toolu_1", "send_message", json!({"text": REPLY}))]), messages::text("Done.")],
    )
    .await;
    let answered = answer_one_message(
        "anthropic:claude-3-5-haiku-latest",
        &[("ANTHROPIC_API_KEY", "sk-ant-test"), ("ANTHROPIC_BASE_URL", &fake.base_url)],
    )
    .await;
    let (execution, texts) = (answered.execution.clone(), answered.texts.clone());
    // "Done." is the model's closing text, not a send_message: only the tool reaches the customer
    assert_answered(&execution, &texts, "anthropic:claude-3-5-haiku-20241022", &fake);
    assert_cost(&execution, 0.8, 4.0, 0.08);
    assert_eq!(fake.received()[0].header("x-api-key"), Some("sk-ant-test"));
    assert_recorded_as_received(&answered, &fake, switchboard_models::wire::messages, "sk-ant-test");
}

#[cfg(feature = "aws")]
#[tokio::test]
async fn a_bedrock_agent_is_answered_through_converse_with_the_sdk_endpoint_variable() {
    let fake = FakeProvider::start(
        Wire::Converse,
        vec![converse::tool_use("tu-1", "send_message", json!({"text": REPLY})), converse::text("")],
    )
    .await;
    let none = "/nonexistent/switchboard-test";
    let answered = answer_one_message(
        "bedrock:anthropic.claude-3-haiku-20240307-v1:0",
        &[
            ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", &fake.base_url),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            ("AWS_CONFIG_FILE", none),
            ("AWS_SHARED_CREDENTIALS_FILE", none),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    )
    .await;
    let (execution, texts) = (answered.execution.clone(), answered.texts.clone());
    assert_answered(&execution, &texts, "bedrock:anthropic.claude-3-haiku-20240307-v1:0", &fake);
    assert_cost(&execution, 0.25, 1.25, 0.0);
    assert_eq!(fake.received()[0].path, "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse");
    // the SDK writes the body: each recorded request reads as the Converse request received
    for (call, got) in answered.calls.iter().zip(fake.received()) {
        let sent = recorded_request(call);
        assert_eq!(got.body["system"][0]["text"], json!(sent.system));
        let messages = got.body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), sent.messages.len());
        for (wire, recorded) in messages.iter().zip(&sent.messages) {
            assert_eq!(wire["role"], json!(recorded.role));
            let text: Vec<&str> =
                wire["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
            assert_eq!(text.join("\n"), recorded.text());
        }
        let names: Vec<&str> = got.body["toolConfig"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["toolSpec"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, sent.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>());
        assert_eq!(got.body["inferenceConfig"]["maxTokens"], json!(sent.config.max_tokens));
    }
    assert_no_key(&answered, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
}

/// Runs `switchboard serve` with the tenant using `model` and no provider variables; returns its
/// stderr, expecting it to refuse to start.
fn refused_with(model: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let tenant = tenant_with_model(dir.path(), model);
    let data = dir.path().join("data");
    let mut args = vec!["--data-dir".as_ref(), data.as_os_str(), "--tenant".as_ref(), tenant.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    common::serve_refuses(&args)
}

#[test]
fn a_missing_api_key_is_a_start_up_error_naming_the_variable() {
    let stderr = refused_with("openai:gpt-4o-mini", &[]);
    assert!(stderr.contains("OPENAI_API_KEY") && stderr.contains("tenant.json"), "{stderr}");
    let stderr = refused_with("anthropic:claude-3-5-haiku-latest", &[]);
    assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
}

#[test]
fn an_unknown_provider_in_a_bundle_is_refused_with_its_pointer() {
    let stderr = refused_with("gemini:pro", &[]);
    assert!(stderr.contains("/agents/0/model") && stderr.contains("unknown provider `gemini`"), "{stderr}");
}

#[test]
fn a_bad_model_config_file_names_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("models.yaml");
    std::fs::write(&config, "aliases:\n  fast: gemini:pro\n").unwrap();
    let stderr = refused_with("fast", &["--model-config", config.to_str().unwrap()]);
    assert!(stderr.contains("--model-config") && stderr.contains("aliases/fast"), "{stderr}");
}

#[tokio::test]
async fn an_alias_from_the_model_config_reaches_its_provider() {
    let args = json!({"text": REPLY}).to_string();
    let fake = FakeProvider::start(
        Wire::ChatCompletions,
        vec![chat::tool_calls(&[("call_1", "send_message", &args)]), chat::text("")],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("models.yaml");
    std::fs::write(
        &config,
        format!(
            "aliases:\n  anthropic.claude-3-haiku: ollama:llama3.1\nproviders:\n  ollama: {{ baseUrl: '{}' }}\n",
            fake.base_url
        ),
    )
    .unwrap();
    let answered =
        answer_one_message("anthropic.claude-3-haiku", &[("SWITCHBOARD_MODEL_CONFIG", config.to_str().unwrap())]).await;
    let (execution, texts) = (answered.execution.clone(), answered.texts.clone());
    assert_answered(&execution, &texts, "ollama:gpt-4o-mini-2024-07-18", &fake);
    assert_eq!(fake.received()[0].body["model"], "llama3.1");
    assert_eq!(fake.received()[0].header("authorization"), None, "ollama needs no key");
}

#[tokio::test]
async fn the_api_refuses_an_agent_naming_an_unknown_provider() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    common::create_tenant(dir.path(), "t-models");
    let res = reqwest::Client::new()
        .post(format!("{}/tenants/t-models/agents", server.base))
        .bearer_auth(&server.admin)
        .json(&json!({"name": "A", "systemPrompt": "p", "model": "gemini:pro"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 400);
    let problem: Value = res.json().await.unwrap();
    assert_eq!(problem["errors"][0]["pointer"], "/model", "{problem}");
    assert!(problem["errors"][0].to_string().contains("unknown provider `gemini`"), "{problem}");
}

#[tokio::test]
async fn an_agent_that_names_no_model_is_answered_by_the_default_model() {
    let args = json!({"text": REPLY}).to_string();
    let fake = FakeProvider::start(
        Wire::ChatCompletions,
        vec![chat::tool_calls(&[("call_1", "send_message", &args)]), chat::text("")],
    )
    .await;
    let answered = answer_one_message(
        "",
        &[
            ("SWITCHBOARD_DEFAULT_MODEL_ID", "openai:gpt-4o-mini"),
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_BASE_URL", &fake.base_url),
        ],
    )
    .await;
    let (execution, texts) = (answered.execution.clone(), answered.texts.clone());
    assert_answered(&execution, &texts, "openai:gpt-4o-mini-2024-07-18", &fake);
    // a dated snapshot is priced as its model
    assert_cost(&execution, 0.15, 0.6, 0.075);
    assert_eq!(fake.received()[0].body["model"], "gpt-4o-mini");
}

#[test]
fn an_agent_that_names_no_model_needs_a_default_model() {
    let stderr = refused_with("", &[]);
    assert!(stderr.contains("names no model") && stderr.contains("--default-model"), "{stderr}");
    let stderr = refused_with("", &["--default-model", "gemini:pro"]);
    assert!(stderr.contains("--default-model gemini:pro") && stderr.contains("unknown provider"), "{stderr}");
}

// ---- agents.invoke, streamed -------------------------------------------------------------------

const SUPPORT: &str = "01JD0000SVPP0RT0AGENT00001";

/// `switchboard serve` with the example tenant on `openai:gpt-4o-mini`, pointed at `fake`.
fn openai_server(dir: &Path, fake: &FakeProvider) -> common::Server {
    let tenant = tenant_with_model(dir, "openai:gpt-4o-mini");
    common::Server::start_with_env(
        &dir.join("data"),
        &["--tenant", tenant.to_str().unwrap()],
        &[("OPENAI_API_KEY", "sk-test"), ("OPENAI_BASE_URL", &fake.base_url)],
    )
}

/// POSTs an invoke asking for the stream; the response, its headers read.
async fn invoke_streamed(server: &common::Server, conversation: &str, key: &str) -> reqwest::Response {
    invoke(server, conversation, key, "text/event-stream").await
}

/// POSTs an invoke of the support agent with `key`, accepting `accept`.
async fn invoke(server: &common::Server, conversation: &str, key: &str, accept: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/tenants/acme/agents/{SUPPORT}/invoke", server.base))
        .bearer_auth(&server.admin)
        .header("accept", accept)
        .header("idempotency-key", key)
        .json(&json!({ "conversationId": conversation, "message": "Where is my order #1234?" }))
        .send()
        .await
        .unwrap()
}

/// Every event of a stream that ends by itself: `(event line, data)`.
async fn read_events(res: reqwest::Response) -> Vec<(String, Value)> {
    let mut reader = switchboard_models::sse::SseReader::default();
    let body = res.bytes().await.unwrap();
    let events = reader.push(&body).unwrap();
    events.into_iter().map(|e| (e.event, serde_json::from_str(&e.data).unwrap())).collect()
}

#[tokio::test]
async fn a_streamed_invoke_shows_the_turn_as_it_happens_and_ends_with_its_record() {
    let fake = FakeProvider::start(
        Wire::ChatCompletions,
        vec![chat::tool_calls(&[("call_1", "set_context", r#"{"key":"order","value":"1234"}"#)]), chat::text(REPLY)],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = openai_server(dir.path(), &fake);
    let res = invoke_streamed(&server, "c-stream", "k-stream").await;
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let events = read_events(res).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let words = chat::pieces(REPLY);
    let mut expected =
        vec!["execution.started", "model.started", "model.finished", "tool.started", "tool.finished", "model.started"];
    expected.extend(std::iter::repeat_n("text.delta", words.len()));
    expected.extend(["model.finished", "action", "execution.finished"]);
    assert_eq!(names, expected, "{events:#?}");
    for (name, data) in &events {
        assert_eq!(data["event"], json!(name), "the data names its event");
    }
    let data = |i: usize| &events[i].1;
    let execution = &data(events.len() - 1)["execution"];
    // the stream's ids, calls and tools are the record's
    assert_eq!(data(0)["executionId"], execution["executionId"]);
    assert_eq!(data(0)["sessionId"], execution["sessionId"]);
    assert_eq!((data(1)["index"].clone(), data(1)["model"].clone()), (json!(0), json!("openai:gpt-4o-mini")));
    assert_eq!(data(2)["usage"], execution["modelCalls"][0]["usage"]);
    assert_eq!(data(2)["stopReason"], "tool_use");
    assert_eq!((data(3)["name"].clone(), data(3)["toolUseId"].clone()), (json!("set_context"), json!("call_1")));
    assert_eq!(
        (data(4)["isError"].clone(), data(4)["latencyMs"].clone()),
        (json!(false), execution["toolCalls"][0]["latencyMs"].clone())
    );
    assert_eq!(data(5)["index"], 1);
    // the text came a word at a time and makes the reply that was recorded and sent
    let streamed: String =
        events.iter().filter(|(n, _)| n == "text.delta").map(|(_, d)| d["text"].as_str().unwrap()).collect();
    let pieces: Vec<String> =
        events.iter().filter(|(n, _)| n == "text.delta").map(|(_, d)| d["text"].as_str().unwrap().to_owned()).collect();
    assert_eq!(pieces, words);
    assert_eq!(streamed, REPLY);
    let action = &data(events.len() - 2)["action"];
    assert_eq!((action["type"].clone(), action["text"].clone()), (json!("reply"), json!(REPLY)));
    assert_eq!(execution["actions"], json!([action]));
    assert_eq!(execution["status"], "success");
    assert_eq!(fake.received().len(), 2);
    assert!(fake.received().iter().all(|r| r.body["stream"] == true), "both calls streamed");
    // a retry with the same key answers with the recorded execution and runs nothing again
    let again = read_events(invoke_streamed(&server, "c-stream", "k-stream").await).await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].0, "execution.finished");
    assert_eq!(&again[0].1["execution"], execution);
    assert_eq!(fake.received().len(), 2);
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_neither_stops_nor_repeats_the_turn() {
    let fake = FakeProvider::start(
        Wire::ChatCompletions,
        vec![chat::tool_calls(&[("call_1", "send_message", &json!({"text": REPLY}).to_string())]), chat::text("")],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = openai_server(dir.path(), &fake);
    let mut res = invoke_streamed(&server, "c-leave", "k-leave").await;
    assert_eq!(res.status(), 200);
    let mut reader = switchboard_models::sse::SseReader::default();
    let first = loop {
        let chunk = res.chunk().await.unwrap().expect("the stream ended before its first event");
        if let Some(e) = reader.push(&chunk).unwrap().into_iter().next() {
            break e;
        }
    };
    assert_eq!(first.event, "execution.started");
    drop(res);
    // the same call again, not streamed: it waits for the one execution and answers with it
    let client = reqwest::Client::new();
    let answer: Value = invoke(&server, "c-leave", "k-leave", "application/json").await.json().await.unwrap();
    let started: Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(answer["executionId"], started["executionId"], "{answer}");
    assert_eq!(answer["status"], "success", "{answer}");
    let messages: Value = client
        .get(format!("{}/tenants/acme/conversations/c-leave/messages", server.base))
        .bearer_auth(&server.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let texts: Vec<&str> =
        messages["messages"].as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(texts, [REPLY], "sent once");
    assert_eq!(fake.received().len(), 2, "the model was called for one turn only");
}

#[tokio::test]
async fn init_writes_a_tenant_that_serve_answers_through_the_chosen_provider() {
    // given what `init --provider openai` writes, and the provider's fake
    let dir = tempfile::tempdir().unwrap();
    let out = common::bin().args(["init", "--provider", "openai", "--dir"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let args = json!({"text": REPLY}).to_string();
    let fake = FakeProvider::start(
        Wire::ChatCompletions,
        vec![chat::tool_calls(&[("call_1", "send_message", &args)]), chat::text("")],
    )
    .await;
    // when serve starts on those files and a customer writes
    let (tenant, models) = (dir.path().join("tenant.json"), dir.path().join("models.yaml"));
    let server = Server::start_with_env(
        &dir.path().join("data"),
        &["--tenant", tenant.to_str().unwrap(), "--model-config", models.to_str().unwrap()],
        &[("OPENAI_API_KEY", "sk-test"), ("OPENAI_BASE_URL", &fake.base_url)],
    );
    let mut message = event("init-1");
    message["detail"]["tenantId"] = json!("my-tenant");
    let res = reqwest::Client::new()
        .post(format!("{}/events?wait=30", server.base))
        .bearer_auth(&server.admin)
        .json(&message)
        .send()
        .await
        .unwrap();
    let body: Value = res.json().await.unwrap();
    // then the assistant answered through the OpenAI adapter, on the model init chose
    let execution = &body["execution"];
    assert_eq!(execution["status"], "success", "{body}");
    assert_eq!(execution["actions"][0]["text"], REPLY, "{execution}");
    assert_eq!(fake.received()[0].body["model"], "gpt-4o-mini");
}
