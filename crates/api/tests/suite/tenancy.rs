//! The cross-tenant corpus, client-chosen ids: two tenants on one server that use the same event
//! ids, message ids (sent again under new event ids too), idempotency keys and conversation ids
//! each get their full, independent results; every spelling of a tenant path is counted as that tenant or refused. (The route
//! corpus — another tenant's server-made ids on every route — is in `api.rs`; oversized and slow
//! requests, which need the binary's server loop, in `tests/serve.rs`.) Raw TCP
//! where an HTTP client would normalise the request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{Api, Server, create_tenant, raw};
use serde_json::{Value, json};

/// Echoes the customer, and hands the conversation to a human when asked: a test double.
const SCRIPT: &str = r#"{ "rules": [
    { "when": { "userText": { "contains": "human" } },
      "then": { "toolCalls": [ { "name": "handoff_to_human", "input": { "reason": "asked for a person" } } ] } },
    { "then": { "text": "{{userText}}, said the agent" } }
] }"#;

/// A tenant with its own key.
struct Tenant {
    id: &'static str,
    api: Api,
}

impl Tenant {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let r = self.api.call(method, path, body, headers).await;
        (r.status.as_u16(), r.body)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None, &[]).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body), &[]).await
    }

    /// An echo agent behind a catch-all trigger; returns the agent id.
    async fn with_echo_agent(&self) -> String {
        let (status, agent) = self
            .post(
                &format!("/tenants/{}/agents", self.id),
                json!({ "name": "Echo", "systemPrompt": "Echo.", "model": "test-model",
                        "tools": ["send_message", "handoff_to_human"] }),
            )
            .await;
        assert_eq!(status, 201, "{agent}");
        let id = agent["agentId"].as_str().unwrap().to_owned();
        let (status, t) = self
            .post(
                &format!("/tenants/{}/triggers", self.id),
                json!({ "name": "all", "agentId": id, "eventType": "message.new" }),
            )
            .await;
        assert_eq!(status, 201, "{t}");
        id
    }

    fn event(&self, id: &str, conversation: &str, message: &str, text: &str) -> Value {
        json!({ "id": id, "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": self.id, "conversationId": conversation, "messageId": message,
                        "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                        "message": { "direction": "inbound", "text": text } } })
    }

    /// `(direction, text)` of every message in a conversation.
    async fn log(&self, conversation: &str) -> Vec<(String, String)> {
        let (_, body) = self.get(&format!("/tenants/{}/conversations/{conversation}/messages", self.id)).await;
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["direction"].as_str().unwrap().to_owned(), m["text"].as_str().unwrap().to_owned()))
            .collect()
    }
}

fn start(dir: &std::path::Path, extra: &[&str]) -> Server {
    let script = dir.join("script.json");
    std::fs::write(&script, SCRIPT).unwrap();
    Server::start_with_script(&dir.join("data"), &script, extra)
}

fn tenant(server: &Server, id: &'static str) -> Tenant {
    Tenant { id, api: Api::new(server, &create_tenant(server, id)) }
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_owned(), b.to_owned())
}

#[tokio::test]
async fn two_tenants_with_the_same_client_ids_each_get_their_full_results() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let (ta, tb) = (tenant(&server, "ta"), tenant(&server, "tb"));
    let (agent_a, agent_b) = (ta.with_echo_agent().await, tb.with_echo_agent().await);

    // the same event id, message id and conversation id from both tenants
    for t in [&ta, &tb] {
        let (status, r) =
            t.post("/events?wait=30", t.event("evt-1", "c-1", "m-1", &format!("hello from {}", t.id))).await;
        assert_eq!((status, r["outcome"].as_str()), (202, Some("enqueued")), "{}: {r}", t.id);
        assert_eq!(r["execution"]["status"], "success", "{}: {r}", t.id);
    }
    // both send the same message again under a new event id, the same in both: each tenant's
    // repeat is answered with that tenant's first execution, and nothing runs again
    let mut firsts = vec![];
    for t in [&ta, &tb] {
        let (status, r) =
            t.post("/events?wait=30", t.event("evt-1b", "c-1", "m-1", &format!("hello from {}", t.id))).await;
        assert_eq!((status, r["outcome"].as_str()), (202, Some("duplicate")), "{}: {r}", t.id);
        assert_eq!(
            (r["execution"]["tenantId"].as_str(), r["sourceId"].as_str()),
            (Some(t.id), Some("message-c-1:m-1"))
        );
        firsts.push(r["execution"]["executionId"].clone());
    }
    assert_ne!(firsts[0], firsts[1]);
    for t in [&ta, &tb] {
        let hello = format!("hello from {}", t.id);
        assert_eq!(
            t.log("c-1").await,
            [pair("inbound", &hello), pair("outbound", &format!("{hello}, said the agent"))]
        );
    }

    // the same message id in a second conversation of one tenant is a message of its own
    let (_, r) = ta.post("/events?wait=30", ta.event("evt-2", "c-2", "m-1", "second conversation")).await;
    assert_eq!(r["execution"]["status"], "success", "{r}");
    assert_eq!(
        ta.log("c-2").await,
        [pair("inbound", "second conversation"), pair("outbound", "second conversation, said the agent")]
    );

    // the same Idempotency-Key on invoke runs in both tenants, and still deduplicates within one
    let mut executions = vec![];
    for (t, agent) in [(&ta, &agent_a), (&tb, &agent_b)] {
        let path = format!("/tenants/{}/agents/{agent}/invoke", t.id);
        let body = json!({ "conversationId": "c-3", "message": format!("invoked for {}", t.id) });
        let (status, r) = t.call(reqwest::Method::POST, &path, Some(body.clone()), &[("idempotency-key", "k1")]).await;
        assert_eq!((status, r["status"].as_str()), (200, Some("success")), "{}: {r}", t.id);
        let (_, again) = t.call(reqwest::Method::POST, &path, Some(body), &[("idempotency-key", "k1")]).await;
        assert_eq!(again["executionId"], r["executionId"]);
        assert_eq!(t.log("c-3").await, [pair("outbound", &format!("invoked for {}, said the agent", t.id))]);
        executions.push(r["executionId"].clone());
    }
    assert_ne!(executions[0], executions[1]);

    // both tenants stream an invoke with the same key at once: each stream is its own turn
    let streamed = async |t: &Tenant, agent: &str| -> (u16, Value) {
        let path = format!("/tenants/{}/agents/{agent}/invoke", t.id);
        let body = json!({ "conversationId": "c-5", "message": format!("streamed for {}", t.id) });
        let headers = [("idempotency-key", "k2"), ("accept", "text/event-stream")];
        t.call(reqwest::Method::POST, &path, Some(body), &headers).await
    };
    let (a, b) = tokio::join!(streamed(&ta, &agent_a), streamed(&tb, &agent_b));
    for (t, (status, body)) in [(&ta, a), (&tb, b)] {
        assert_eq!(status, 200, "{}: {body}", t.id);
        let text = body.as_str().unwrap();
        let events = switchboard_models::sse::SseReader::default().push(text.as_bytes()).unwrap();
        let data: Vec<Value> = events.iter().map(|e| serde_json::from_str(&e.data).unwrap()).collect();
        let delta: String =
            data.iter().filter(|d| d["event"] == "text.delta").map(|d| d["text"].as_str().unwrap()).collect();
        assert_eq!(delta, format!("streamed for {}, said the agent", t.id));
        let record = &data.last().unwrap()["execution"];
        assert_eq!((record["tenantId"].as_str(), record["sourceId"].as_str()), (Some(t.id), Some("invoke-k2")));
    }

    // the same event id handing a conversation to a human: both tenants' operators are told
    for t in [&ta, &tb] {
        let (_, r) = t.post("/events?wait=30", t.event("evt-h", "c-4", "m-h", "a human please")).await;
        assert_eq!(r["execution"]["status"], "handed_off", "{}: {r}", t.id);
    }
    let mut ids = vec![];
    for t in [&ta, &tb] {
        let (_, body) = t.get(&format!("/tenants/{}/events", t.id)).await;
        let handoffs: Vec<&Value> = body["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event"]["detailType"] == "session.handoff.human")
            .collect();
        assert_eq!(handoffs.len(), 1, "{}: {body}", t.id);
        let event = &handoffs[0]["event"];
        assert_eq!(event["tenantId"], t.id);
        assert_eq!(event["detail"]["conversationId"], "c-4");
        ids.push(event["id"].as_str().unwrap().to_owned());
    }
    assert_ne!(ids[0], ids[1], "outbound event ids are unique across tenants");
    assert!(ids[0].starts_with("ta/") && ids[1].starts_with("tb/"), "{ids:?}");

    // and each tenant's insights count its own conversations alone, the repeats not at all: ta
    // opened c-1 to c-5, tb all but c-2; one of each went to a person
    for (t, conversations) in [(&ta, 5), (&tb, 4)] {
        let (status, r) = t.get(&format!("/tenants/{}/insights", t.id)).await;
        assert_eq!(status, 200, "{}: {r}", t.id);
        let total = &r["total"];
        assert_eq!(
            (total["conversations"].as_u64(), total["executions"].as_u64(), total["handedToHuman"].as_u64()),
            (Some(conversations), Some(conversations), Some(1)),
            "{}: {total}",
            t.id
        );
    }
}

fn get(path: &str, key: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn the_rate_limit_counts_every_spelling_of_a_tenant_path_or_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &["--rate-limit", "5"]);
    let ta = tenant(&server, "ta");
    let tb = tenant(&server, "tb");
    let admin = Tenant { id: "ta", api: Api::new(&server, &server.admin) };
    let spellings = [
        "/tenants/%74%61/agents",
        "/tenants/t%61/agents",
        "/tenants/%74a/agents",
        "/tenants/t%2561/agents",
        "/tenants/./ta/agents",
        "/tenants/tb/../ta/agents",
        "/tenants/ta/./agents",
        "/tenants/ta/agents/..",
    ];
    // a write through an encoded path is refused, naming the path, and creates nothing
    let body = r#"{"name":"Sneaky","systemPrompt":"x","model":"m","tools":["send_message"]}"#;
    let post = format!(
        "POST /tenants/%74%61/agents HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        ta.api.key,
        body.len()
    );
    let (status, problem) = raw(&server.base, &post).unwrap();
    assert_eq!(status, 400, "{problem}");
    let problem: Value = serde_json::from_str(&problem).unwrap();
    assert_eq!(problem["errors"][0]["pointer"], "/path");
    // the admin sees no agent in ta (and the admin's calls count against ta too)
    assert_eq!(admin.get("/tenants/ta/agents").await.1["items"], json!([]));
    // up to the limit, the canonical path answers; every other spelling is refused, never served
    for _ in 0..4 {
        assert_eq!(ta.get("/tenants/ta/agents").await.0, 200);
    }
    for path in spellings {
        let (status, body) = raw(&server.base, &get(path, &ta.api.key)).unwrap();
        assert!(matches!(status, 400 | 404), "{path} → {status} {body}");
    }
    // over the limit, no spelling gets through either
    assert_eq!(ta.get("/tenants/ta/agents").await.0, 429);
    for path in spellings {
        let (status, body) = raw(&server.base, &get(path, &ta.api.key)).unwrap();
        assert_ne!(status, 200, "{path} → {status} {body}");
    }
    let (status, _) = raw(&server.base, &get("/tenants/ta/agents", &ta.api.key)).unwrap();
    assert_eq!(status, 429);
    // and another tenant's budget is its own
    assert_eq!(tb.get("/tenants/tb/agents").await.0, 200);
}
