//! Turns started by a trigger rather than a message: a manual trigger's run over the API and a
//! webhook trigger's signed delivery, over real HTTP against the embedded profile. (The official
//! Standard Webhooks library signs deliveries in `tests/webhooks.rs`; here the domain's signer,
//! whose vectors the contract checks, signs them.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use reqwest::Method;
use serde_json::{Value, json};
use switchboard_domain::webhook::standard;

use crate::common::{Api, Reply, Server, create_tenant, pointers};

/// Answers with what it was given: a test double.
const ECHO: &str = r#"{ "rules": [ { "then": { "text": "Got: {{userText}}" } } ] }"#;
/// Tenant `acme`'s secret `crm`: `whsec_` and the base64 of 32 bytes.
const SECRET: &str = "whsec_Y3JtLWhvb2stc2VjcmV0LWZvci10aGUtdHJpZ2dlci0wMQ==";

/// Tenant `globex`'s secret `crm`: the same name, its own value.
const GLOBEX_SECRET: &str = "whsec_Z2xvYmV4LWhvb2stc2VjcmV0LWZvci10aGUtdHJpZ2dlcg==";

/// `serve` with the echo model and acme's secrets file; acme's key.
fn serve(dir: &std::path::Path) -> (Server, Api) {
    let script = dir.join("echo.json");
    std::fs::write(&script, ECHO).unwrap();
    let secrets = dir.join("secrets.json");
    std::fs::write(
        &secrets,
        format!(
            r#"{{"acme": {{"crm": "{SECRET}", "not-standard": "plain-text"}}, "globex": {{"crm": "{GLOBEX_SECRET}"}}}}"#
        ),
    )
    .unwrap();
    let server = Server::start_with_script(&dir.join("data"), &script, &["--secrets-file", secrets.to_str().unwrap()]);
    let key = create_tenant(&server, "acme");
    let api = Api::new(&server, &key);
    (server, api)
}

async fn created(api: &Api, path: &str, body: Value) -> String {
    let r = api.post(path, body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let field = if path.ends_with("/agents") { "agentId" } else { "triggerId" };
    r.body[field].as_str().unwrap().to_owned()
}

/// Writes the record at `path` (whose own id is `id_field`) back with `status: inactive`, as a
/// client would: the fields the server sets left out, its ETag as `If-Match`.
async fn make_inactive(api: &Api, path: &str, id_field: &str) {
    let current = api.get(path).await;
    let mut inactive = current.body.clone();
    inactive["status"] = json!("inactive");
    for server_set in ["tenantId", id_field, "createdAt", "updatedAt", "version"] {
        inactive.as_object_mut().unwrap().remove(server_set);
    }
    let version = current.headers["etag"].to_str().unwrap().to_owned();
    let put = api.call(Method::PUT, path, Some(inactive), &[("if-match", &version)]).await;
    assert_eq!(put.status, 200, "{}", put.body);
}

async fn echo_agent(api: &Api) -> String {
    created(
        api,
        "/tenants/acme/agents",
        json!({ "name": "Echo", "systemPrompt": "Echo.", "model": "m", "tools": ["send_message"] }),
    )
    .await
}

#[tokio::test]
async fn a_manual_trigger_runs_by_hand_under_the_rules_of_an_invoke() {
    let dir = tempfile::tempdir().unwrap();
    let (server, api) = serve(dir.path());
    let agent = echo_agent(&api).await;
    let manual = created(
        &api,
        "/tenants/acme/triggers",
        json!({ "name": "refunds by hand", "agentId": agent, "eventType": "manual",
                "conditions": { "field": "input", "operator": "contains", "value": "refund" } }),
    )
    .await;
    let run = format!("/tenants/acme/triggers/{manual}/run");

    // it runs the agent with the input, and the record names the trigger
    let r = api.post(&run, json!({ "input": "refund order 7", "conversationId": "c-7" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["actions"][0]["text"], "Got: refund order 7", "{}", r.body);
    let execution = api.get(&format!("/tenants/acme/executions/{}", r.body["executionId"].as_str().unwrap())).await;
    assert_eq!(execution.body["triggerId"], manual.as_str(), "{}", execution.body);
    assert!(execution.body["sourceId"].as_str().unwrap().starts_with(&format!("manual-{manual}-")));
    assert_eq!(execution.body["ranWith"]["trigger"], 1, "{}", execution.body);
    // without a conversation, a run has one of its own
    let r = api.post(&run, json!({ "input": "another refund" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = api.get(&format!("/tenants/acme/sessions/{}", r.body["sessionId"].as_str().unwrap())).await;
    assert!(session.body["conversationId"].as_str().unwrap().starts_with("manual-"), "{}", session.body);

    // a retry with the same key answers as the first run did, and runs nothing
    let keyed = |input: &str| {
        let body = Some(json!({ "input": input, "conversationId": "c-key" }));
        api.call(Method::POST, &run, body, &[("idempotency-key", "run-1")])
    };
    let first = keyed("refund once").await;
    let again = keyed("refund once").await;
    assert_eq!((first.status.as_u16(), again.status.as_u16()), (200, 200), "{}", again.body);
    assert_eq!(first.body["executionId"], again.body["executionId"]);
    let session = first.body["sessionId"].as_str().unwrap().to_owned();
    let runs = api.get(&format!("/tenants/acme/sessions/{session}/executions")).await;
    assert_eq!(runs.body["items"].as_array().unwrap().len(), 1, "{}", runs.body);

    // conditions that do not hold refuse the run; so do other kinds of trigger and bad bodies
    let r = api.post(&run, json!({ "input": "hello" })).await;
    assert_eq!((r.status.as_u16(), r.body["type"].as_str()), (409, Some("urn:switchboard:problem:conflict")));
    assert!(r.body["detail"].as_str().unwrap().contains("conditions"), "{}", r.body);
    let message =
        created(&api, "/tenants/acme/triggers", json!({ "name": "all", "agentId": agent, "eventType": "message.new" }))
            .await;
    let r = api.post(&format!("/tenants/acme/triggers/{message}/run"), json!({ "input": "refund" })).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("not a manual trigger"), "{}", r.body);
    let r = api.post("/tenants/acme/triggers/01JD000000000000000000000Z/run", json!({ "input": "refund" })).await;
    assert_eq!(r.status, 404);
    let r = api.post(&run, json!({ "input": " ", "conversationId": "not ok" })).await;
    assert_eq!((r.status.as_u16(), pointers(&r)), (400, vec!["/input".to_owned(), "/conversationId".to_owned()]));
    let r = api.post(&run, json!({ "input": "refund", "extra": 1 })).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = api.call(Method::POST, &run, Some(json!({ "input": "refund" })), &[("idempotency-key", "no spaces")]).await;
    assert_eq!(pointers(&r), ["/headers/Idempotency-Key"]);
    // a person owning the conversation stops it, as for an invoke
    let handed = json!({ "targetType": "human", "reason": "a person takes it" });
    let handed = api.post(&format!("/tenants/acme/sessions/{session}/handoff"), handed).await;
    assert_eq!(handed.status, 200, "{}", handed.body);
    let r = api.post(&run, json!({ "input": "refund", "conversationId": "c-key" })).await;
    assert_eq!(r.status, 409, "{}", r.body);

    // made inactive, it does not run
    make_inactive(&api, &format!("/tenants/acme/triggers/{manual}"), "triggerId").await;
    let r = api.post(&run, json!({ "input": "refund" })).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("not active"), "{}", r.body);
    drop(server);
}

#[tokio::test]
async fn a_manual_run_counts_against_the_tenants_limits() {
    let dir = tempfile::tempdir().unwrap();
    let (server, api) = serve(dir.path());
    let agent = echo_agent(&api).await;
    let manual =
        created(&api, "/tenants/acme/triggers", json!({ "name": "m", "agentId": agent, "eventType": "manual" })).await;
    let admin = Api::new(&server, &server.admin);
    let r =
        admin.call(Method::PATCH, "/tenants/acme", Some(json!({ "limits": { "invocationsPerMinute": 1 } })), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // of three quick runs at least two fall in one minute (wherever the minute turns)
    let mut limited = None;
    for n in 0..3 {
        let r = api
            .post(
                &format!("/tenants/acme/triggers/{manual}/run"),
                json!({ "input": "go", "conversationId": format!("c-{n}") }),
            )
            .await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = limited.expect("a second run within a minute is refused");
    assert_eq!(r.body["type"], "urn:switchboard:problem:rate-limited", "{}", r.body);
    assert!(r.headers.contains_key("retry-after"));
    drop(server);
}

/// A delivery of `body` as message `id`, signed at `timestamp` with `secret`.
async fn deliver(
    server: &Server,
    path: &str,
    secret: &str,
    id: &str,
    timestamp: i64,
    body: &str,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let key = standard::Key::from_secret(secret).unwrap();
    let signature = standard::sign(&key, id, timestamp, body.as_bytes());
    send(
        server,
        path,
        &[("webhook-id", id), ("webhook-timestamp", &timestamp.to_string()), ("webhook-signature", &signature)],
        body,
    )
    .await
}

async fn send(
    server: &Server,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut request =
        reqwest::Client::new().post(format!("{}{path}", server.base)).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let res = request.body(body.to_owned()).send().await.unwrap();
    let (status, headers) = (res.status().as_u16(), res.headers().clone());
    (status, res.json().await.unwrap_or(Value::Null), headers)
}

#[tokio::test]
async fn a_webhook_trigger_takes_only_signed_fresh_unrepeated_deliveries() {
    let dir = tempfile::tempdir().unwrap();
    let (server, api) = serve(dir.path());
    let agent = echo_agent(&api).await;
    let hook = created(
        &api,
        "/tenants/acme/triggers",
        json!({ "name": "crm tickets", "agentId": agent, "eventType": "webhook",
                "webhook": { "secretRef": "crm", "conversationPointer": "/ticket/id" },
                "conditions": { "field": "webhook.body.ticket.priority", "operator": "eq", "value": "high" } }),
    )
    .await;
    let message =
        created(&api, "/tenants/acme/triggers", json!({ "name": "all", "agentId": agent, "eventType": "message.new" }))
            .await;
    let path = format!("/hooks/acme/{hook}");
    let now = chrono::Utc::now().timestamp();
    let body = r#"{"ticket":{"id":"T-100","priority":"high","subject":"Printer on fire"}}"#;

    // a signed delivery is queued at once; waited for, its execution is the answer
    let (status, queued, headers) = deliver(&server, &path, SECRET, "msg_001", now, body).await;
    assert_eq!(status, 202, "{queued}");
    assert_eq!(queued["sourceId"], format!("webhook-{hook}-msg_001"));
    assert!(headers["location"].to_str().unwrap().contains("sourceId=webhook-"));
    let (status, done, _) = deliver(&server, &format!("{path}?wait=30"), SECRET, "msg_002", now, body).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["actions"][0]["text"], format!("Got: {body}"), "the body is the agent's text: {done}");
    let execution = api.get(&format!("/tenants/acme/executions/{}", done["executionId"].as_str().unwrap())).await;
    assert_eq!(execution.body["triggerId"], hook.as_str());
    assert_eq!(execution.body["input"]["detail"]["webhook"]["body"]["ticket"]["id"], "T-100", "{}", execution.body);
    // the ticket names the conversation
    let session = api.get(&format!("/tenants/acme/sessions/{}", done["sessionId"].as_str().unwrap())).await;
    assert_eq!(session.body["conversationId"], "T-100");

    // a repeat (the same webhook-id, signed again later) answers as the first did, runs nothing
    let (status, repeat, _) = deliver(&server, &format!("{path}?wait=30"), SECRET, "msg_002", now + 10, body).await;
    assert_eq!((status, &repeat["executionId"]), (200, &done["executionId"]), "{repeat}");
    let runs = api.get(&format!("/tenants/acme/sessions/{}/executions", done["sessionId"].as_str().unwrap())).await;
    let sources: Vec<&str> =
        runs.body["items"].as_array().unwrap().iter().map(|e| e["sourceId"].as_str().unwrap()).collect();
    assert_eq!(sources.iter().filter(|s| s.ends_with("msg_002")).count(), 1, "{sources:?}");

    // conditions that do not hold: 200, ignored (a sender would retry anything else)
    let low = r#"{"ticket":{"id":"T-101","priority":"low"}}"#;
    let (status, ignored, _) = deliver(&server, &path, SECRET, "msg_003", now, low).await;
    assert_eq!((status, ignored["status"].as_str()), (200, Some("ignored")), "{ignored}");

    // every delivery that cannot be verified gets the same 401, which tells a stranger nothing
    let bad_signature = |r: &(u16, Value, reqwest::header::HeaderMap)| {
        r.0 == 401 && r.1["type"] == "urn:switchboard:problem:bad-signature" && !r.2.contains_key("www-authenticate")
    };
    let other = "whsec_b3RoZXItc2VjcmV0LW9mLWFub3RoZXItc2VuZGVyLTAx";
    let tampered = body.replace("high", "HIGH");
    for (what, reply) in [
        ("another secret", deliver(&server, &path, other, "msg_010", now, body).await),
        ("a stale timestamp", deliver(&server, &path, SECRET, "msg_011", now - 600, body).await),
        ("a timestamp from the future", deliver(&server, &path, SECRET, "msg_012", now + 600, body).await),
        ("no headers", send(&server, &path, &[], body).await),
        (
            "an unknown trigger",
            deliver(&server, "/hooks/acme/01JD000000000000000000000Z", SECRET, "m", now, body).await,
        ),
        ("an unknown tenant", deliver(&server, &format!("/hooks/nobody/{hook}"), SECRET, "m", now, body).await),
        ("a malformed trigger id", deliver(&server, "/hooks/acme/not-an-id", SECRET, "m", now, body).await),
        (
            "a trigger of another kind",
            deliver(&server, &format!("/hooks/acme/{message}"), SECRET, "m", now, body).await,
        ),
    ] {
        assert!(bad_signature(&reply), "{what}: {reply:?}");
    }
    // a body changed after signing
    let key = standard::Key::from_secret(SECRET).unwrap();
    let signature = standard::sign(&key, "msg_013", now, body.as_bytes());
    let ts = now.to_string();
    let reply = send(
        &server,
        &path,
        &[("webhook-id", "msg_013"), ("webhook-timestamp", &ts), ("webhook-signature", &signature)],
        &tampered,
    )
    .await;
    assert!(bad_signature(&reply), "tampered: {reply:?}");
    // an API key opens nothing here
    let keyed = api.call(Method::POST, &path, Some(json!({ "ticket": {} })), &[]).await;
    assert_eq!(keyed.status, 401);
    // a trigger whose secret is not a Standard Webhooks one verifies nothing
    let plain = created(
        &api,
        "/tenants/acme/triggers",
        json!({ "name": "plain", "agentId": agent, "eventType": "webhook", "webhook": { "secretRef": "not-standard" } }),
    )
    .await;
    assert!(bad_signature(&deliver(&server, &format!("/hooks/acme/{plain}"), SECRET, "m", now, body).await));

    // verified but unusable: not JSON, a webhook-id that cannot name a record, a bad wait
    let (status, problem, _) = deliver(&server, &path, SECRET, "msg_020", now, "not json").await;
    assert_eq!(status, 400, "{problem}");
    let (status, problem, _) = deliver(&server, &path, SECRET, "msg 021", now, body).await;
    assert_eq!((status, problem["errors"][0]["pointer"].as_str()), (400, Some("/headers/webhook-id")), "{problem}");
    let (status, problem, _) = deliver(&server, &format!("{path}?wait=999"), SECRET, "msg_022", now, body).await;
    assert_eq!((status, problem["errors"][0]["pointer"].as_str()), (400, Some("/query/wait")), "{problem}");
    // a body over the text limit
    let big = format!(r#"{{"ticket":{{"id":"T-9","priority":"high","x":"{}"}}}}"#, "x".repeat(17 * 1024));
    let (status, problem, _) = deliver(&server, &path, SECRET, "msg_023", now, &big).await;
    assert_eq!((status, problem["type"].as_str()), (413, Some("urn:switchboard:problem:payload-too-large")));

    // nothing the refused deliveries sent ran: two executions in all (msg_001 and msg_002)
    let (status, first, _) = deliver(&server, &format!("{path}?wait=30"), SECRET, "msg_001", now, body).await;
    assert_eq!(status, 200, "the first delivery ran: {first}");
    let runs = api.get(&format!("/tenants/acme/sessions/{}/executions", done["sessionId"].as_str().unwrap())).await;
    assert_eq!(runs.body["items"].as_array().unwrap().len(), 2, "{}", runs.body);
    drop(server);
}

#[tokio::test]
async fn another_tenants_secret_opens_none_of_a_tenants_hooks_and_ids_chosen_alike_stay_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (server, acme) = serve(dir.path());
    let globex = Api::new(&server, &create_tenant(&server, "globex"));
    let webhook = |agent: &str| json!({ "name": "crm", "agentId": agent, "eventType": "webhook", "webhook": { "secretRef": "crm" } });
    let acme_agent = echo_agent(&acme).await;
    let acme_hook = created(&acme, "/tenants/acme/triggers", webhook(&acme_agent)).await;
    let globex_agent = created(
        &globex,
        "/tenants/globex/agents",
        json!({ "name": "Echo", "systemPrompt": "Echo.", "model": "m", "tools": ["send_message"] }),
    )
    .await;
    let globex_hook = created(&globex, "/tenants/globex/triggers", webhook(&globex_agent)).await;
    let now = chrono::Utc::now().timestamp();
    let body = r#"{"ticket":{"id":"same"}}"#;
    // globex's secret, on acme's hook under either tenant's path: the same 401 as any stranger
    for path in [format!("/hooks/acme/{acme_hook}"), format!("/hooks/globex/{acme_hook}")] {
        let (status, problem, _) = deliver(&server, &path, GLOBEX_SECRET, "msg_same", now, body).await;
        assert_eq!((status, problem["type"].as_str()), (401, Some("urn:switchboard:problem:bad-signature")), "{path}");
    }
    // acme's hook under globex's path, signed with acme's secret: no such trigger there
    let (status, _, _) = deliver(&server, &format!("/hooks/globex/{acme_hook}"), SECRET, "msg_same", now, body).await;
    assert_eq!(status, 401);
    // the same webhook-id, and the same idempotency key, in both tenants: two runs, one each
    let (status, a, _) =
        deliver(&server, &format!("/hooks/acme/{acme_hook}?wait=30"), SECRET, "msg_same", now, body).await;
    assert_eq!(status, 200, "{a}");
    let (status, g, _) =
        deliver(&server, &format!("/hooks/globex/{globex_hook}?wait=30"), GLOBEX_SECRET, "msg_same", now, body).await;
    assert_eq!(status, 200, "{g}");
    assert_ne!(a["executionId"], g["executionId"]);
    assert_eq!(
        globex.get(&format!("/tenants/globex/executions/{}", a["executionId"].as_str().unwrap())).await.status,
        404
    );
    let manual = |agent: &str| json!({ "name": "m", "agentId": agent, "eventType": "manual" });
    let acme_manual = created(&acme, "/tenants/acme/triggers", manual(&acme_agent)).await;
    let globex_manual = created(&globex, "/tenants/globex/triggers", manual(&globex_agent)).await;
    let a = run(&acme, format!("/tenants/acme/triggers/{acme_manual}/run")).await;
    let g = run(&globex, format!("/tenants/globex/triggers/{globex_manual}/run")).await;
    assert_eq!((a.status.as_u16(), g.status.as_u16()), (200, 200), "{} {}", a.body, g.body);
    assert_ne!(a.body["executionId"], g.body["executionId"]);
    // and globex cannot run acme's manual trigger under either path
    for path in
        [format!("/tenants/acme/triggers/{acme_manual}/run"), format!("/tenants/globex/triggers/{acme_manual}/run")]
    {
        assert_eq!(run(&globex, path.clone()).await.status, 404, "{path}");
    }
    drop(server);
}

/// A manual run on conversation `shared` with idempotency key `k-1`.
async fn run(api: &Api, path: String) -> Reply {
    let body = Some(json!({ "input": "hello", "conversationId": "shared" }));
    api.call(Method::POST, &path, body, &[("idempotency-key", "k-1")]).await
}

#[tokio::test]
async fn an_inactive_agent_refuses_a_run_and_a_delivery_and_an_unreadable_secret_is_unavailable_not_a_401() {
    let dir = tempfile::tempdir().unwrap();
    let (server, api) = serve(dir.path());
    let agent = echo_agent(&api).await;
    let manual =
        created(&api, "/tenants/acme/triggers", json!({ "name": "m", "agentId": agent, "eventType": "manual" })).await;
    let hook = created(
        &api,
        "/tenants/acme/triggers",
        json!({ "name": "w", "agentId": agent, "eventType": "webhook", "webhook": { "secretRef": "crm" } }),
    )
    .await;
    let now = chrono::Utc::now().timestamp();
    let body = r#"{"ticket":{"id":"T-1"}}"#;
    let path = format!("/hooks/acme/{hook}");
    // the secrets file cannot be read: the delivery is not refused as forged, it is unavailable
    // (the sender retries), and nothing is queued
    let secrets = dir.path().join("secrets.json");
    let kept = std::fs::read_to_string(&secrets).unwrap();
    std::fs::remove_file(&secrets).unwrap();
    let (status, problem, _) = deliver(&server, &path, SECRET, "msg_1", now, body).await;
    assert_eq!((status, problem["type"].as_str()), (503, Some("urn:switchboard:problem:unavailable")), "{problem}");
    std::fs::write(&secrets, kept).unwrap();
    // the agent made inactive: a run and a verified delivery are refused with 409
    make_inactive(&api, &format!("/tenants/acme/agents/{agent}"), "agentId").await;
    let r = api.post(&format!("/tenants/acme/triggers/{manual}/run"), json!({ "input": "go" })).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("not active"), "{}", r.body);
    let (status, problem, _) = deliver(&server, &path, SECRET, "msg_2", now, body).await;
    assert_eq!(status, 409, "{problem}");
    let sessions = api.get("/tenants/acme/sessions").await;
    assert_eq!(sessions.body["items"], json!([]), "nothing ran: {}", sessions.body);
    drop(server);
}
