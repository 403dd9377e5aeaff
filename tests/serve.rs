//! End to end over real HTTP: starts the `switchboard serve` binary on a free loopback port with
//! the example tenant and the scripted model (a test double), drives it like a client would, and
//! stops it. Waiting uses `POST /events?wait=`, which returns when the execution is recorded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{Api, Server, create_tenant, examples, raw, serve_refuses};
use serde_json::{Value, json};

/// The example tenant and its scripted model (a deterministic test double), plus `extra` flags.
fn start(data_dir: &Path, extra: &[&str]) -> Server {
    let tenant = examples().join("tenant.json");
    let mut args = vec!["--tenant", tenant.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(data_dir, &args)
}

/// A client that sends the admin key.
fn client(server: &Server) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {}", server.admin).parse().unwrap());
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}

fn at(server: &Server, path: &str) -> String {
    format!("{}{path}", server.base)
}

fn event(id: &str, tenant: &str, conversation: &str, text: &str) -> Value {
    json!({
        "version": "0", "id": id, "source": "conversations-service", "detail-type": "message.new",
        "detail": {
            "tenantId": tenant, "conversationId": conversation, "messageId": format!("msg-{id}"),
            "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
            "message": { "direction": "inbound", "text": text }
        }
    })
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Value, String) {
    let res = client.post(url).json(body).send().await.unwrap();
    let status = res.status().as_u16();
    let ctype = res.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, res.json().await.unwrap(), ctype)
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let res = client.get(url).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

#[tokio::test]
async fn a_message_posted_over_http_is_answered_and_readable() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let client = client(&server);

    // when a customer's message arrives as an EventBridge envelope
    let (status, body, _) =
        post(&client, &at(&server, "/events?wait=30"), &event("e-1", "acme", "c-1", "Where is my order #1234?")).await;
    // then it is accepted, routed, and (waiting for it) executed
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["outcome"], "enqueued");
    assert_eq!(body["execution"]["status"], "success");
    let session_id = body["execution"]["sessionId"].as_str().unwrap().to_owned();

    // and the conversation shows the customer's message and the reply
    let (status, convo) = get(&client, &at(&server, "/tenants/acme/conversations/c-1/messages")).await;
    assert_eq!(status, 200);
    let texts: Vec<_> = convo["messages"].as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(
        texts,
        ["Where is my order #1234?", "Thanks! Order 1234 shipped yesterday and should arrive on Thursday."]
    );

    // and the session and its executions can be read
    let (status, session) = get(&client, &at(&server, &format!("/tenants/acme/sessions/{session_id}"))).await;
    assert_eq!(status, 200);
    assert_eq!(session["memory"]["orderNumber"], "1234");
    let (_, page) = get(&client, &at(&server, &format!("/tenants/acme/sessions/{session_id}/executions"))).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let execution_id = page["items"][0]["executionId"].as_str().unwrap();
    let (status, one) = get(&client, &at(&server, &format!("/tenants/acme/executions/{execution_id}"))).await;
    assert_eq!(status, 200);
    assert_eq!(one["toolCalls"][0]["name"], "set_context");

    // the same event again changes nothing
    let (status, again, _) =
        post(&client, &at(&server, "/events?wait=30"), &event("e-1", "acme", "c-1", "Where is my order #1234?")).await;
    assert_eq!(status, 202);
    assert_eq!(again["outcome"], "duplicate");
    let (_, convo) = get(&client, &at(&server, "/tenants/acme/conversations/c-1/messages")).await;
    assert_eq!(convo["messages"].as_array().unwrap().len(), 2);

    // another tenant's path never shows acme's records
    let (status, problem) = get(&client, &at(&server, &format!("/tenants/other/sessions/{session_id}"))).await;
    assert_eq!(status, 404);
    assert_eq!(problem["type"], "urn:switchboard:problem:not-found");
}

#[tokio::test]
async fn a_human_handoff_is_published_and_the_conversation_is_left_to_the_human() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let client = client(&server);
    let (_, body, _) =
        post(&client, &at(&server, "/events?wait=30"), &event("h-1", "acme", "c-h", "I want a human now")).await;
    assert_eq!(body["execution"]["status"], "handed_off");
    let (status, events) = get(&client, &at(&server, "/tenants/acme/events")).await;
    assert_eq!(status, 200);
    let handoff = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"]["detailType"] == "session.handoff.human")
        .unwrap();
    assert_eq!(handoff["event"]["detail"]["conversationId"], "c-h");
    assert_eq!(handoff["event"]["detail"]["priority"], "high");
    let (status, next, _) = post(&client, &at(&server, "/events"), &event("h-2", "acme", "c-h", "hello?")).await;
    assert_eq!(status, 202);
    assert_eq!(next["outcome"], "human_owned");
}

#[tokio::test]
async fn bad_input_gets_problem_json_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let client = client(&server);
    let url = at(&server, "/events");

    // malformed JSON
    let res = client.post(&url).header("content-type", "application/json").body("{not json").send().await.unwrap();
    assert_eq!(res.status().as_u16(), 400);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let p: Value = res.json().await.unwrap();
    assert_eq!(p["type"], "urn:switchboard:problem:invalid-input");
    assert_eq!(p["errors"][0]["pointer"], "");
    // the summary reads as a sentence about the body
    assert!(p["detail"].as_str().unwrap().starts_with("the body is not valid JSON: "), "{p}");

    // a JSON value that is not an event
    let (status, p, _) = post(&client, &url, &json!([1, 2])).await;
    assert_eq!(status, 400);
    assert_eq!(p["detail"], "the body must be a JSON object (an EventBridge event)");

    // a missing field and a wrong type, both named
    let mut bad = event("b-1", "acme", "c-b", "hi");
    bad["detail"].as_object_mut().unwrap().remove("conversationId");
    bad["detail"]["message"]["text"] = json!(42);
    let (status, p, ctype) = post(&client, &url, &bad).await;
    assert_eq!((status, ctype.as_str()), (400, "application/problem+json"));
    let pointers: Vec<_> = p["errors"].as_array().unwrap().iter().map(|e| e["pointer"].as_str().unwrap()).collect();
    assert_eq!(pointers, ["/detail/conversationId", "/detail/message/text"]);

    // text over the documented cap
    let (status, p, _) = post(&client, &url, &event("b-2", "acme", "c-b", &"x".repeat(16 * 1024 + 1))).await;
    assert_eq!(status, 400);
    assert_eq!(p["errors"][0]["pointer"], "/detail/message/text");

    // an unknown tenant
    let (status, p, _) = post(&client, &url, &event("b-3", "nobody", "c-b", "hi")).await;
    assert_eq!(status, 422);
    assert_eq!(p["errors"][0]["pointer"], "/detail/tenantId");

    // not JSON at all, too large, a bad query, an unknown route, a wrong method
    let res = client.post(&url).header("content-type", "text/plain").body("hi").send().await.unwrap();
    assert_eq!(res.status().as_u16(), 415);
    let res =
        client.post(&url).header("content-type", "application/json").body(vec![b' '; 300 * 1024]).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 413);
    let (status, p, _) = post(&client, &at(&server, "/events?wait=999"), &event("b-4", "acme", "c-b", "hi")).await;
    assert_eq!((status, p["errors"][0]["pointer"].as_str()), (400, Some("/query/wait")));
    let (status, p) = get(&client, &at(&server, "/nope")).await;
    assert_eq!((status, p["type"].as_str()), (404, Some("urn:switchboard:problem:not-found")));
    let res = client.delete(&url).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 405);
    assert_eq!(res.headers()["content-type"], "application/problem+json");

    // and none of it stored anything
    let (_, convo) = get(&client, &at(&server, "/tenants/acme/conversations/c-b/messages")).await;
    assert_eq!(convo["messages"].as_array().unwrap().len(), 0);
    // the server is still up
    let (status, _) = get(&client, &at(&server, "/health")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_message_survives_the_process_being_killed() {
    // given a server that accepted a message
    let dir = tempfile::tempdir().unwrap();
    let first = start(dir.path(), &["--visibility-timeout", "1"]);
    let client = client(&first);
    let (status, _, _) = post(&client, &at(&first, "/events"), &event("k-1", "acme", "c-k", "Hi there")).await;
    assert_eq!(status, 202);
    // when the process is killed at once (the item may be queued, in flight or done)
    drop(first);
    // then a restarted server on the same data directory finishes it, exactly once
    let second = start(dir.path(), &["--visibility-timeout", "1"]);
    let (status, again, _) =
        post(&client, &at(&second, "/events?wait=30"), &event("k-1", "acme", "c-k", "Hi there")).await;
    assert_eq!(status, 202);
    assert_eq!(again["execution"]["status"], "success", "{again}");
    let (_, convo) = get(&client, &at(&second, "/tenants/acme/conversations/c-k/messages")).await;
    let outbound = convo["messages"].as_array().unwrap().iter().filter(|m| m["direction"] == "outbound").count();
    assert_eq!(outbound, 1);
}

#[tokio::test]
async fn sigterm_drains_the_work_in_hand_and_a_restart_finishes_the_rest_exactly_once() {
    // given a ready server with a backlog of messages (two workers)
    let dir = tempfile::tempdir().unwrap();
    let mut first = start(dir.path(), &[]);
    let anonymous = reqwest::Client::new();
    let res = anonymous.get(at(&first, "/ready")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200, "ready, and no key needed");
    let client = client(&first);
    let n = 12;
    let message = |i: usize| event(&format!("s-{i}"), "acme", &format!("c-s{i}"), "Hi there");
    for i in 0..n {
        assert_eq!(post(&client, &at(&first, "/events"), &message(i)).await.0, 202);
    }
    // when it is told to stop mid-load (some items done, one in hand, the rest queued)
    let status = first.terminate();
    // then it exits cleanly after committing what it had in hand
    assert!(status.success(), "{status:?}");
    // and after closing its database: the log copied into the file and deleted, nothing for the
    // next start to replay
    for suffix in ["-wal", "-shm"] {
        let left = dir.path().join(format!("switchboard.db{suffix}"));
        assert!(!left.exists(), "{} left behind", left.display());
    }
    // and a restart finishes every message, none twice
    let second = start(dir.path(), &[]);
    for i in 0..n {
        let (_, answer, _) = post(&client, &at(&second, "/events?wait=30"), &message(i)).await;
        assert_eq!(answer["execution"]["status"], "success", "{i}: {answer}");
    }
    for i in 0..n {
        let (_, convo) = get(&client, &at(&second, &format!("/tenants/acme/conversations/c-s{i}/messages"))).await;
        let outbound = convo["messages"].as_array().unwrap().iter().filter(|m| m["direction"] == "outbound").count();
        assert_eq!(outbound, 1, "conversation c-s{i}: {convo}");
    }
}

/// Reads a streaming response until `needle` has arrived; the timeout only guards against a hang.
async fn read_until(res: &mut reqwest::Response, needle: &str) -> String {
    let mut seen = String::new();
    let read = async {
        while !seen.contains(needle) {
            match res.chunk().await.unwrap() {
                Some(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
                None => break,
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), read).await.expect("stream stalled");
    seen
}

#[tokio::test]
async fn an_operator_stream_receives_the_human_handoff_live_and_on_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let client = client(&server);
    // given an operator UI connected to the tenant's stream
    let mut live = client.get(at(&server, "/tenants/acme/events/stream")).send().await.unwrap();
    assert_eq!(live.status().as_u16(), 200);
    assert_eq!(live.headers()["content-type"], "text/event-stream");
    // when a customer asks for a person
    let (_, body, _) =
        post(&client, &at(&server, "/events?wait=30"), &event("s-1", "acme", "c-s", "a human please")).await;
    assert_eq!(body["execution"]["status"], "handed_off");
    // then the handoff arrives on the stream, named and with its detail
    let seen = read_until(&mut live, "\"conversationId\":\"c-s\"").await;
    assert!(seen.contains("event: session.handoff.human"), "{seen}");
    drop(live);
    // and a reconnecting client gets it again from the log
    let mut again =
        client.get(at(&server, "/tenants/acme/events/stream")).header("last-event-id", "0").send().await.unwrap();
    let replay = read_until(&mut again, "session.handoff.human").await;
    assert!(replay.contains("id: 1"), "{replay}");
    // while another tenant's stream is refused
    let res = client.get(at(&server, "/tenants/nobody/events/stream")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 404);
}

#[test]
fn serve_with_a_broken_tenant_file_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("tenant.json");
    std::fs::write(
        &bad,
        r#"{"tenantId":"t","name":"T","agents":[{"agentId":"not-a-ulid","name":"a","systemPrompt":"p","model":"m"}]}"#,
    )
    .unwrap();
    let data = dir.path().join("data");
    let script = examples().join("script.json");
    let stderr = serve_refuses(&[
        "--data-dir".as_ref(),
        data.as_os_str(),
        "--tenant".as_ref(),
        bad.as_os_str(),
        "--scripted-model".as_ref(),
        script.as_os_str(),
    ]);
    assert!(stderr.contains("/agents/0/agentId"), "{stderr}");
}

#[test]
fn serve_with_a_data_dir_that_is_a_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let script = examples().join("script.json");
    let stderr =
        serve_refuses(&["--data-dir".as_ref(), file.as_os_str(), "--scripted-model".as_ref(), script.as_os_str()]);
    assert!(stderr.contains("--data-dir") && stderr.contains("not-a-dir"), "{stderr}");
}

#[test]
fn serve_refuses_a_turn_timeout_that_is_not_under_the_visibility_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let script = examples().join("script.json");
    let stderr = serve_refuses(&[
        "--data-dir".as_ref(),
        dir.path().as_os_str(),
        "--scripted-model".as_ref(),
        script.as_os_str(),
        "--visibility-timeout".as_ref(),
        "60".as_ref(),
        "--turn-timeout".as_ref(),
        "60".as_ref(),
    ]);
    assert!(stderr.contains("--turn-timeout 60 must be under --visibility-timeout 60"), "{stderr}");
}

#[tokio::test]
async fn json_logs_carry_the_request_id_and_the_execution_id_but_never_the_message() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::bin()
        .args(["serve", "--log-format", "json", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--tenant", examples().join("tenant.json").to_str().unwrap()])
        .args(["--scripted-model", examples().join("script.json").to_str().unwrap()])
        .env("RUST_LOG", "info")
        .env_remove("SWITCHBOARD_LOG_FORMAT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap().to_owned();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let admin = std::fs::read_to_string(dir.path().join("admin.key")).unwrap().trim().to_owned();
    let client = reqwest::Client::new();
    // a request id the caller chose is echoed; one is made when there is none (or a bad one)
    let text = "Where is my order #4417, the red one?";
    let res = client
        .post(format!("{base}/events?wait=30"))
        .bearer_auth(&admin)
        .header("x-request-id", "req-42")
        .json(&event("j-1", "acme", "c-j", text))
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-request-id"], "req-42");
    let answer: Value = res.json().await.unwrap();
    let execution = answer["execution"]["executionId"].as_str().unwrap().to_owned();
    for sent in [None, Some("bad id with spaces")] {
        let mut req = client.get(format!("{base}/health"));
        if let Some(v) = sent {
            req = req.header("x-request-id", v);
        }
        let made = req.send().await.unwrap().headers()["x-request-id"].to_str().unwrap().to_owned();
        assert_eq!(made.len(), 26, "a ULID: {made}");
    }
    // every stderr line is one JSON object; the request's line has its id, the execution's
    // lines theirs, and the customer's words appear on none
    let (mut saw_request, mut saw_execution) = (false, false);
    while !(saw_request && saw_execution) {
        let l = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("log lines stopped before both ids showed");
        let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(!l.contains("order #4417"), "message text in an info log: {l}");
        saw_request |= v["span"]["request_id"] == "req-42" && v["path"] == "/events" && v["status"] == 202;
        saw_execution |= v["span"]["execution_id"] == execution.as_str() && v["message"] == "execution recorded";
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn metrics_count_what_happened_in_prometheus_text_for_the_admin_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let client = client(&server);
    // three answered messages, one that matches no trigger, one repeat
    for i in 0..3 {
        let (_, r, _) = post(
            &client,
            &at(&server, "/events?wait=30"),
            &event(&format!("m-{i}"), "acme", &format!("c-m{i}"), "Hi there"),
        )
        .await;
        assert_eq!(r["execution"]["status"], "success", "{r}");
    }
    post(&client, &at(&server, "/events?wait=30"), &event("m-0", "acme", "c-m0", "Hi there")).await;
    // the order-status webhook, whose receiver is a private address this server refuses
    let (_, r, _) =
        post(&client, &at(&server, "/events?wait=30"), &event("m-w", "acme", "c-mw", "Where is my order #1234?")).await;
    let webhook = r["execution"]["toolCalls"].as_array().unwrap().iter().find(|c| c["webhook"].is_object()).cloned();
    let webhook_outcome = webhook.unwrap_or_else(|| panic!("a webhook call: {r}"))["webhook"]["outcome"].clone();
    let mut quiet = event("m-x", "acme", "c-mx", "Hi there");
    quiet["detail"]["channel"]["platform"] = json!("fax");
    post(&client, &at(&server, "/events"), &quiet).await;
    let res = client.get(at(&server, "/metrics")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    let text = res.text().await.unwrap();
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap_or_else(|e| panic!("not Prometheus text ({e}): {text}"));
    let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    assert_eq!(
        value("switchboard_inbound_events_total", &[("tenant", "acme"), ("outcome", "enqueued")]),
        4.0,
        "{text}"
    );
    assert_eq!(value("switchboard_inbound_events_total", &[("outcome", "duplicate")]), 1.0, "{text}");
    assert_eq!(value("switchboard_inbound_events_total", &[("outcome", "no_match")]), 1.0, "{text}");
    assert_eq!(value("switchboard_executions_total", &[("tenant", "acme"), ("status", "success")]), 4.0, "{text}");
    // tool calls by kind and outcome: a webhook's own outcome, the system tools' ok
    let outcome = webhook_outcome.as_str().unwrap();
    assert_eq!(value("switchboard_tool_calls_total", &[("kind", "webhook"), ("outcome", outcome)]), 1.0, "{text}");
    assert!(value("switchboard_tool_calls_total", &[("kind", "system"), ("outcome", "ok")]) >= 1.0, "{text}");
    assert!(value("switchboard_model_calls_total", &[]) >= 3.0, "{text}");
    assert!(value("switchboard_model_tokens_total", &[("tenant", "acme"), ("kind", "input")]) > 0.0, "{text}");
    assert!(
        value("switchboard_model_unpriced_calls_total", &[("tenant", "acme")]) >= 3.0,
        "the scripted double has no price: {text}"
    );
    assert_eq!(value("switchboard_queue_items", &[("state", "ready")]), 0.0, "{text}");
    assert_eq!(value("switchboard_queue_oldest_item_age_seconds", &[]), 0.0, "nothing waits: {text}");
    assert!(text.contains("# TYPE switchboard_queue_oldest_item_age_seconds gauge"), "{text}");
    assert!(text.contains("switchboard_execution_duration_seconds_bucket"), "{text}");
    // a tenant's owner (its labels name every tenant) does not see it: the admin's route
    let tenant = common::create_tenant(dir.path(), "other");
    let res = reqwest::Client::new().get(at(&server, "/metrics")).bearer_auth(tenant).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 403);
}

/// The binary's relative relocations are packed (`crates/cli/build.rs`) where this host's glibc
/// reads the format: the loader reads ~10 KB of them at every start instead of ~960 KB, which
/// stayed resident. On an older glibc the binary must not need it (it would not start).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_binary_packs_its_relative_relocations_where_glibc_reads_them() {
    let getconf = std::process::Command::new("getconf").arg("GNU_LIBC_VERSION").output().unwrap();
    let version = String::from_utf8(getconf.stdout).unwrap();
    let (major, minor) = version.trim().trim_start_matches("glibc ").split_once('.').unwrap();
    let minor = minor.split('.').next().unwrap();
    let reads_relr = (major.parse::<u32>().unwrap(), minor.parse::<u32>().unwrap()) >= (2, 36);
    let binary = std::fs::read(common::switchboard()).unwrap();
    let needs_relr = binary.windows(b"GLIBC_ABI_DT_RELR".len()).any(|w| w == b"GLIBC_ABI_DT_RELR");
    assert_eq!(needs_relr, reads_relr, "{version}: linked with -z pack-relative-relocs = {needs_relr}");
}

// Oversized and slow requests: answered at once, after the read timeout, or cut off when the
// headers never finish (the binary's own server loop). The rest of the cross-tenant corpus is in
// `crates/api/tests/suite/tenancy.rs`.

#[tokio::test]
async fn an_oversized_or_slow_request_is_answered_at_once_or_after_the_read_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--read-timeout", "1"]);
    let ta = Api::new(&server, &create_tenant(&dir.path().join("data"), "ta"));
    let head = |path: &str, length: u64| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
            ta.key
        )
    };
    // a body announced far over the limit: 413 without waiting for it (a 408 would mean the
    // server waited for the body)
    for path in ["/tenants/ta/agents", "/events"] {
        let (status, body) = raw(&server.base, &format!("{}{{}}", head(path, 999_999_999))).unwrap();
        assert_eq!(status, 413, "{path}: {body}");
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(problem["type"], "urn:switchboard:problem:payload-too-large");
    }
    // a body that stops arriving: 408 once the read timeout has passed
    let (status, body) = raw(&server.base, &format!("{}{{}}", head("/tenants/ta/agents", 10))).unwrap();
    assert_eq!(status, 408, "{body}");
    let problem: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["type"], "urn:switchboard:problem:request-timeout");
    // headers that never finish: the connection is closed
    let answer = raw(&server.base, "GET /health HTTP/1.1\r\nHost: localhost\r\n");
    assert!(answer.as_ref().is_none_or(|(status, _)| *status == 408), "{answer:?}");
    // and nothing was created by any of it
    assert_eq!(ta.get("/tenants/ta/agents").await.body["items"], json!([]));
}

#[test]
fn text_logs_into_a_pipe_carry_no_colour_codes() {
    // given a server logging text (the default) at info into a pipe, not a terminal
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--scripted-model", examples().join("script.json").to_str().unwrap()])
        .env("RUST_LOG", "info")
        .env_remove("SWITCHBOARD_LOG_FORMAT")
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert!(line.starts_with("listening on "), "{line}");
    // when it is stopped (it logs its shutdown)
    let sent = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    // then its log lines are there, without an escape code
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SIGTERM: stopping"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "colour codes in a pipe: {stderr:?}");
}
