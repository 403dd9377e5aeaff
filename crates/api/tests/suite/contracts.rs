//! The contracts in `contracts/` against the real server: starts the embedded profile's server
//! (wired as `switchboard serve` wires it) on a loopback port, drives a realistic session over
//! HTTP, and checks every answer against `contracts/openapi.yaml` (route, status, content type, headers, body), every request body the
//! server accepted against the documented request schema, every inbound envelope against
//! `events/message.new.schema.json`, and every published event against its own schema. A route,
//! status, query parameter, field or enum value the contracts do not describe fails the test, and
//! so does a documented operation the server does not serve.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Server, create_tenant, examples};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

/// The base URI the OpenAPI document is validated under; the event schemas' `$id`s sit beside it.
const OPENAPI_URI: &str = "https://example.invalid/switchboard/contracts/openapi.yaml";
const EVENTS_URI: &str = "https://example.invalid/switchboard/contracts/events/";
/// The outbound detail-types the engine publishes today, each with a schema in `contracts/events/`.
const OUTBOUND: [&str; 8] = [
    "approval.requested",
    "approval.resolved",
    "session.handoff.human",
    "session.handoff.agent",
    "session.ended",
    "flow.trigger.requested",
    "execution.failed",
    "tenant.limit.reached",
];
const SUPPORT_AGENT: &str = "01JD0000SVPP0RT0AGENT00001";
const BILLING_AGENT: &str = "01JD0000PAYMENTS0AGENT0002";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// ------------------------------------------------------------------------------------------
// The contracts
// ------------------------------------------------------------------------------------------

/// Serves the contract files to the validator by URI (no network, no file system lookups).
struct ContractFiles(HashMap<String, Value>);

impl jsonschema::Retrieve for ContractFiles {
    fn retrieve(&self, uri: &jsonschema::Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        self.0.get(uri.as_str()).cloned().ok_or_else(|| format!("no contract file {uri}").into())
    }
}

struct Spec {
    /// `openapi.yaml` as JSON.
    doc: Value,
    /// Event schemas by URI (their `$id`).
    files: HashMap<String, Value>,
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

impl Spec {
    fn load() -> Self {
        let dir = repo().join("contracts");
        let yaml = std::fs::read_to_string(dir.join("openapi.yaml")).unwrap();
        let doc: Value = serde_saphyr::from_str_with_options(&yaml, serde_saphyr::options! { strict_booleans: true })
            .expect("openapi.yaml is valid YAML");
        assert_eq!(doc["openapi"].as_str().map(|v| v.starts_with("3.1")), Some(true), "OpenAPI 3.1");
        let mut files = HashMap::new();
        for entry in std::fs::read_dir(dir.join("events")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            assert!(name.ends_with(".schema.json"), "unexpected file {name} in contracts/events");
            let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert_eq!(schema["$id"], json!(format!("{EVENTS_URI}{name}")), "$id of {name}");
            assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema", "{name}");
            if let Err(e) = jsonschema::meta::validate(&schema) {
                panic!("{name} is not a valid JSON Schema: {e}");
            }
            files.insert(format!("{EVENTS_URI}{name}"), schema);
        }
        Self { doc, files, validators: Mutex::new(HashMap::new()) }
    }

    fn event_schema(&self, name: &str) -> &Value {
        self.files.get(&format!("{EVENTS_URI}{name}.schema.json")).unwrap_or_else(|| panic!("no schema for {name}"))
    }

    /// A validator for a schema taken from `openapi.yaml` (its `$ref`s resolve in the document)
    /// or for an event schema.
    fn validator(&self, schema: &Value) -> Arc<jsonschema::Validator> {
        let key = schema.to_string();
        if let Some(v) = self.validators.lock().unwrap().get(&key) {
            return v.clone();
        }
        let root = if schema.get("$id").is_some() {
            schema.clone()
        } else {
            json!({ "$id": OPENAPI_URI, "components": self.doc["components"], "allOf": [schema] })
        };
        let validator = jsonschema::draft202012::options()
            .should_validate_formats(true)
            .with_retriever(ContractFiles(self.files.clone()))
            .build(&root)
            .unwrap_or_else(|e| panic!("schema {schema} does not compile: {e}"));
        let validator = Arc::new(validator);
        self.validators.lock().unwrap().insert(key, validator.clone());
        validator
    }

    fn errors(&self, schema: &Value, instance: &Value) -> Vec<String> {
        self.validator(schema).iter_errors(instance).map(|e| format!("{} at '{}'", e, e.instance_path())).collect()
    }

    fn check(&self, schema: &Value, instance: &Value, what: &str) {
        let errors = self.errors(schema, instance);
        assert!(errors.is_empty(), "{what} does not match its contract:\n  {}\n{instance:#}", errors.join("\n  "));
    }

    /// Follows `$ref`s inside the document (responses, parameters, headers).
    fn deref<'a>(&'a self, mut v: &'a Value) -> &'a Value {
        while let Some(r) = v.get("$ref").and_then(Value::as_str) {
            let pointer = r.strip_prefix('#').unwrap_or_else(|| panic!("external $ref {r} outside a schema"));
            v = self.doc.pointer(pointer).unwrap_or_else(|| panic!("dangling $ref {r}"));
        }
        v
    }

    /// The documented path template a concrete path falls under (the most literal one).
    fn template(&self, path: &str) -> Option<String> {
        let segments: Vec<&str> = path.split('/').collect();
        let mut best: Option<(usize, String)> = None;
        for template in self.doc["paths"].as_object().unwrap().keys() {
            let parts: Vec<&str> = template.split('/').collect();
            if parts.len() != segments.len() {
                continue;
            }
            let mut literal = 0;
            let fits = parts.iter().zip(&segments).all(|(p, s)| {
                if p.starts_with('{') && p.ends_with('}') {
                    !s.is_empty()
                } else {
                    literal += 1;
                    p == s
                }
            });
            if fits && best.as_ref().is_none_or(|(n, _)| literal > *n) {
                best = Some((literal, template.clone()));
            }
        }
        best.map(|(_, t)| t)
    }

    fn operation(&self, method: &Method, template: &str) -> Option<&Value> {
        self.doc["paths"][template].get(method.as_str().to_lowercase())
    }

    /// Every documented (method, path template).
    fn operations(&self) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (template, item) in self.doc["paths"].as_object().unwrap() {
            for method in ["get", "put", "post", "delete", "patch", "head", "options"] {
                if item.get(method).is_some() {
                    out.insert((method.to_uppercase(), template.clone()));
                }
            }
        }
        out
    }

    /// Names of the query parameters an operation documents (path-level ones included).
    fn query_params(&self, template: &str, op: &Value) -> BTreeSet<String> {
        let path_level = self.doc["paths"][template]["parameters"].as_array().cloned().unwrap_or_default();
        let own = op["parameters"].as_array().cloned().unwrap_or_default();
        path_level
            .iter()
            .chain(own.iter())
            .map(|p| self.deref(p))
            .filter(|p| p["in"] == "query")
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    }
}

// ------------------------------------------------------------------------------------------
// The server and a client that checks every exchange
// ------------------------------------------------------------------------------------------

/// The example tenant and its scripted model (a deterministic test double).
/// A Standard Webhooks secret of acme's, `crm`, for its webhook triggers.
const CRM_SECRET: &str = "whsec_Y3JtLWhvb2stc2VjcmV0LWZvci10aGUtY29udHJhY3Q=";

fn example_server(data_dir: &Path) -> Server {
    std::fs::create_dir_all(data_dir).unwrap();
    let secrets = data_dir.join("secrets.json");
    std::fs::write(&secrets, format!(r#"{{"acme": {{"crm": "{CRM_SECRET}"}}}}"#)).unwrap();
    Server::start(
        data_dir,
        &["--tenant", examples().join("tenant.json").to_str().unwrap(), "--secrets-file", secrets.to_str().unwrap()],
    )
}

enum Body {
    None,
    Json(Value),
    Raw(&'static str, Vec<u8>),
}

struct Reply {
    status: StatusCode,
    body: Value,
    headers: reqwest::header::HeaderMap,
}

impl Reply {
    fn pointers(&self) -> Vec<String> {
        self.body["errors"]
            .as_array()
            .map(|a| a.iter().map(|e| e["pointer"].as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    }

    fn str(&self, pointer: &str) -> String {
        self.body
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no {pointer} in {}", self.body))
            .to_owned()
    }
}

/// An HTTP client that validates every exchange against the contracts and remembers which
/// documented operations it exercised.
struct Api<'a> {
    spec: &'a Spec,
    base: String,
    key: Option<String>,
    client: Client,
    /// Shared with the clients made by `with_key`.
    seen: Arc<Mutex<BTreeSet<(String, String)>>>,
}

impl<'a> Api<'a> {
    fn new(spec: &'a Spec, server: &Server, key: Option<&str>) -> Self {
        Api {
            spec,
            base: server.base.clone(),
            key: key.map(str::to_owned),
            client: Client::new(),
            seen: Arc::default(),
        }
    }

    /// A client of another server, remembering what it exercised with this one.
    fn on(&self, server: &Server, key: &str) -> Api<'a> {
        Api { base: server.base.clone(), ..self.with_key(Some(key)) }
    }

    fn with_key(&self, key: Option<&str>) -> Api<'a> {
        Api {
            spec: self.spec,
            base: self.base.clone(),
            key: key.map(str::to_owned),
            client: self.client.clone(),
            seen: self.seen.clone(),
        }
    }

    /// The documented operation for a request; panics on an undocumented route.
    fn operation(&self, method: &Method, path: &str) -> (String, &'a Value) {
        let spec = self.spec;
        let template = spec.template(path).unwrap_or_else(|| panic!("{method} {path}: path not in openapi.yaml"));
        let op = spec
            .operation(method, &template)
            .unwrap_or_else(|| panic!("{method} {path}: {method} {template} not in openapi.yaml"));
        self.seen.lock().unwrap().insert((method.as_str().to_owned(), template.clone()));
        (template, op)
    }

    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: &Body,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = self.client.request(method, format!("{}{path_and_query}", self.base));
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req = match body {
            Body::None => req,
            Body::Json(v) => req.json(v),
            Body::Raw(ctype, bytes) => req.header("content-type", *ctype).body(bytes.clone()),
        };
        req.send().await.unwrap()
    }

    async fn call(&self, method: Method, path_and_query: &str, body: Body, headers: &[(&str, &str)]) -> Reply {
        let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
        let (template, op) = self.operation(&method, path);
        let what = format!("{method} {path_and_query}");
        let res = self.send(method.clone(), path_and_query, &body, headers).await;
        let (status, res_headers) = (res.status(), res.headers().clone());
        let text = res.text().await.unwrap();
        let spec = self.spec;

        // the status is documented for this operation
        let response = op["responses"]
            .get(status.as_str())
            .map(|r| spec.deref(r))
            .unwrap_or_else(|| panic!("{what} answered {status}, not documented for {method} {template}: {text}"));
        // the documented headers are there and well-formed
        for (name, header) in response["headers"].as_object().into_iter().flatten() {
            let header = spec.deref(header);
            let value = res_headers.get(name.as_str()).map(|v| v.to_str().unwrap().to_owned());
            match value {
                None => assert!(header["required"] != true, "{what} ({status}): header {name} is missing"),
                Some(v) => {
                    let schema = spec.deref(&header["schema"]);
                    let typed = if schema.pointer("/type") == Some(&json!("integer")) {
                        json!(v.parse::<i64>().unwrap_or_else(|_| panic!("{what}: header {name}: {v:?}")))
                    } else {
                        json!(v)
                    };
                    spec.check(&header["schema"], &typed, &format!("{what} ({status}) header {name}"));
                }
            }
        }
        // the body has a documented content type and matches its schema
        let body_value = match response.get("content").and_then(Value::as_object) {
            None => {
                assert!(text.is_empty(), "{what} ({status}): no body documented, got {text}");
                Value::Null
            }
            Some(content) => {
                let ctype = res_headers
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().split(';').next().unwrap().trim().to_owned())
                    .unwrap_or_default();
                let media = content.get(&ctype).unwrap_or_else(|| {
                    panic!("{what} ({status}): content type {ctype:?} not documented ({:?})", content.keys())
                });
                let value = if ctype.ends_with("json") {
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what} ({status}): not JSON ({e}): {text}"))
                } else {
                    Value::String(text.clone())
                };
                spec.check(&media["schema"], &value, &format!("{what} ({status}) body"));
                // a stream that ended: each event's data is checked, and the events are the value
                if let Some(data_schema) = media.get("x-sse-data") {
                    let mut events = Vec::new();
                    for frame in text.split("\n\n").filter(|f| f.lines().any(|l| l.starts_with("data:"))) {
                        let line = |field: &str| {
                            frame.lines().find_map(|l| l.strip_prefix(field)).map(|v| v.trim().to_owned())
                        };
                        let data: Value = serde_json::from_str(&line("data:").unwrap()).unwrap();
                        spec.check(data_schema, &data, &format!("{what} ({status}) event"));
                        if let Some(name) = data.get("event") {
                            assert_eq!(
                                line("event:").as_deref(),
                                name.as_str(),
                                "{what}: the event line names the data's event"
                            );
                        }
                        events.push(data);
                    }
                    Value::Array(events)
                } else {
                    value
                }
            }
        };
        // what the server accepted is what the contract documents
        if status.is_success() {
            let documented = spec.query_params(&template, op);
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let name = pair.split('=').next().unwrap();
                assert!(documented.contains(name), "{what}: query parameter {name} not documented");
            }
            if let Body::Json(sent) = &body {
                let schema = &op["requestBody"]["content"]["application/json"]["schema"];
                assert!(!schema.is_null(), "{what}: the server took a body the contract does not document");
                spec.check(schema, sent, &format!("{what} request body"));
            }
        }
        Reply { status, body: body_value, headers: res_headers }
    }

    async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, Body::None, &[]).await
    }

    async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Body::Json(body), &[]).await
    }

    /// Reads `count` events from the SSE stream (the replay of what is logged), checking the
    /// documented content type and each event's `data` against `OutboundEvent`.
    async fn stream(&self, path_and_query: &str, headers: &[(&str, &str)], count: usize) -> Vec<(i64, Value)> {
        let path = path_and_query.split('?').next().unwrap();
        let (template, op) = self.operation(&Method::GET, path);
        let mut res = self.send(Method::GET, path_and_query, &Body::None, headers).await;
        assert_eq!(res.status(), 200, "GET {path_and_query}");
        let ctype = res.headers()["content-type"].to_str().unwrap().to_owned();
        let media = &op["responses"]["200"]["content"]["text/event-stream"];
        assert!(ctype.starts_with("text/event-stream") && media.is_object(), "GET {template}: {ctype}");
        let data_schema = &media["x-sse-data"];
        let mut buffer = String::new();
        let mut events = Vec::new();
        let read = async {
            while events.len() < count {
                let chunk = res.chunk().await.unwrap().expect("the stream ended early");
                buffer.push_str(std::str::from_utf8(&chunk).unwrap());
                while let Some(end) = buffer.find("\n\n") {
                    let frame: String = buffer.drain(..end + 2).collect();
                    let (mut id, mut name, mut data) = (None, None, None);
                    for line in frame.lines() {
                        if let Some(v) = line.strip_prefix("id:") {
                            id = Some(v.trim().parse::<i64>().unwrap());
                        } else if let Some(v) = line.strip_prefix("event:") {
                            name = Some(v.trim().to_owned());
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data = Some(serde_json::from_str::<Value>(v.trim()).unwrap());
                        }
                    }
                    let Some(data) = data else { continue }; // a keep-alive comment
                    self.spec.check(data_schema, &data, &format!("SSE event of {path_and_query}"));
                    assert_eq!(name.as_deref(), data["detailType"].as_str(), "SSE event name is the detail-type");
                    events.push((id.expect("every SSE event has an id"), data));
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read).await.expect("the stream replayed too few events");
        events
    }

    fn seen(&self) -> BTreeSet<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

// ------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------

fn envelope(id: &str, tenant: &str, conversation: &str, text: &str) -> Value {
    json!({
        "version": "0", "id": id, "source": "conversations-service", "detail-type": "message.new",
        "time": "2026-11-23T07:00:00Z",
        "detail": {
            "tenantId": tenant, "conversationId": conversation, "messageId": format!("m-{id}"),
            "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
            "message": { "direction": "inbound", "text": text }
        }
    })
}

/// Posts an inbound envelope and waits for its execution. The envelope must match
/// `message.new.schema.json` (and, being accepted, the OpenAPI request body).
async fn deliver(api: &Api<'_>, event: Value) -> Reply {
    api.spec.check(api.spec.event_schema("message.new"), &event, "inbound envelope");
    let r = api.post("/events?wait=30", event).await;
    assert_eq!(r.status, 202, "{}", r.body);
    r
}

/// Checks every published event of a tenant against its own schema; returns them.
async fn published(api: &Api<'_>, tenant: &str) -> Vec<(i64, Value)> {
    let r = api.get(&format!("/tenants/{tenant}/events?limit=100")).await;
    assert_eq!(r.status, 200);
    let events: Vec<(i64, Value)> =
        r.body["events"].as_array().unwrap().iter().map(|e| (e["seq"].as_i64().unwrap(), e["event"].clone())).collect();
    for (seq, event) in &events {
        let kind = event["detailType"].as_str().unwrap();
        assert!(OUTBOUND.contains(&kind), "event {seq} has a detail-type with no schema: {kind}");
        api.spec.check(api.spec.event_schema(kind), event, &format!("published {kind} (seq {seq})"));
        assert_eq!(event["tenantId"], tenant);
    }
    events
}

fn kinds(events: &[(i64, Value)]) -> BTreeSet<String> {
    events.iter().map(|(_, e)| e["detailType"].as_str().unwrap().to_owned()).collect()
}

// ------------------------------------------------------------------------------------------
// Tests
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_realistic_session_matches_the_openapi_and_event_contracts() {
    let spec = Spec::load();
    let dir = tempfile::tempdir().unwrap();
    let server = example_server(dir.path());
    let api = Api::new(&spec, &server, Some(&server.admin));

    // -- messages: an answer, a human handoff, an agent handoff, an end --------------------
    let r = deliver(&api, envelope("e-order-1", "acme", "c-order", "Where is my order #1234?")).await;
    assert_eq!((r.str("/outcome"), r.str("/execution/status")), ("enqueued".into(), "success".into()));
    let order_session = r.str("/execution/sessionId");
    let order_execution = r.str("/execution/executionId");
    let r = deliver(&api, envelope("e-order-2", "acme", "c-order", "Great, thanks a lot!")).await;
    assert_eq!(r.str("/execution/status"), "ended");

    let r = deliver(&api, envelope("e-human-1", "acme", "c-human", "Can I talk to a human please?")).await;
    assert_eq!(r.str("/execution/status"), "handed_off");
    let r = deliver(&api, envelope("e-human-2", "acme", "c-human", "Hello? Anyone there?")).await;
    assert_eq!(r.str("/outcome"), "human_owned");

    let r = deliver(&api, envelope("e-bill-1", "acme", "c-bill", "I was charged twice for my tent")).await;
    assert_eq!(r.str("/execution/status"), "handed_off");
    // the next message queues behind the billing specialist's continuation, so once it is
    // answered the handoff has run too
    let r = deliver(&api, envelope("e-bill-2", "acme", "c-bill", "Any news on that?")).await;
    assert_eq!((r.str("/execution/agentId"), r.str("/execution/status")), (BILLING_AGENT.into(), "success".into()));

    // a repeat, a message no trigger takes, an outbound echo
    let r = deliver(&api, envelope("e-order-1", "acme", "c-order", "Where is my order #1234?")).await;
    assert_eq!((r.str("/outcome"), r.str("/execution/executionId")), ("duplicate".into(), order_execution.clone()));
    let mut sms = envelope("e-sms-1", "acme", "c-sms", "hello");
    sms["detail"]["channel"]["platform"] = json!("sms");
    assert_eq!(deliver(&api, sms).await.str("/outcome"), "no_match");
    let mut echo = envelope("e-echo-1", "acme", "c-order", "Our reply");
    echo["detail"]["message"]["direction"] = json!("outbound");
    echo["detail"]["extra"] = json!({ "kept": "for trigger conditions" });
    assert_eq!(deliver(&api, echo).await.str("/outcome"), "not_inbound");

    // -- manual invoke ------------------------------------------------------------------------
    let invoke = format!("/tenants/acme/agents/{SUPPORT_AGENT}/invoke");
    let body =
        json!({ "conversationId": "c-invoke", "message": "Where is my order #77?", "metadata": { "source": "crm" } });
    let first = api.call(Method::POST, &invoke, Body::Json(body.clone()), &[("idempotency-key", "crm-1")]).await;
    assert_eq!((first.status, first.str("/status")), (StatusCode::OK, "success".into()));
    let again = api.call(Method::POST, &invoke, Body::Json(body), &[("idempotency-key", "crm-1")]).await;
    assert_eq!(again.str("/executionId"), first.str("/executionId"));
    let by_source = api.get("/tenants/acme/executions?sourceId=invoke-crm-1").await;
    assert_eq!(by_source.str("/executionId"), first.str("/executionId"));
    assert_eq!(api.get("/tenants/acme/executions?sourceId=invoke-nope").await.status, 404);
    assert_eq!(api.post(&invoke, json!({ "conversationId": "c-invoke-2" })).await.status, 200);
    // streamed: the turn's events, each as documented, ending with the record
    let streamed = json!({ "conversationId": "c-invoke-3", "message": "Where is my order #78?" });
    let accept = ("accept", "text/event-stream");
    let events = api.call(Method::POST, &invoke, Body::Json(streamed), &[accept]).await;
    assert_eq!(events.status, StatusCode::OK);
    let names: Vec<&str> = events.body.as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names.first(), Some(&"execution.started"), "{names:?}");
    assert_eq!(names.last(), Some(&"execution.finished"), "{names:?}");
    assert!(names.contains(&"model.finished") && names.contains(&"action"), "{names:?}");
    assert_eq!(api.post(&invoke, json!({ "conversationId": "c-human" })).await.status, 409);
    assert_eq!(api.post(&invoke, json!({ "conversationId": "bad id!" })).await.pointers(), ["/conversationId"]);

    // -- a manual trigger's run and a webhook trigger's delivery -----------------------------------
    // (split between two agents: its runs, their records and the activity report's variants are
    // checked against the contract too)
    let manual = json!({ "name": "by hand", "agentId": SUPPORT_AGENT, "eventType": "manual", "split": [
        { "name": "control", "agentId": SUPPORT_AGENT, "weight": 1 },
        { "name": "billing-desk", "agentId": BILLING_AGENT, "weight": 1 } ] });
    let manual = api.post("/tenants/acme/triggers", manual).await;
    assert_eq!(manual.status, StatusCode::CREATED, "{}", manual.body);
    let run = format!("/tenants/acme/triggers/{}/run", manual.str("/triggerId"));
    let r = api.post(&run, json!({ "input": "Where is my order #79?", "conversationId": "c-run" })).await;
    assert_eq!((r.status, r.str("/status")), (StatusCode::OK, "success".into()), "{}", r.body);
    assert_eq!(api.post(&run, json!({ "input": "" })).await.pointers(), ["/input"]);
    let hook = json!({ "name": "crm", "agentId": SUPPORT_AGENT, "eventType": "webhook",
        "webhook": { "secretRef": "crm", "conversationPointer": "/ticket" } });
    let hook = api.post("/tenants/acme/triggers", hook).await;
    assert_eq!(hook.status, StatusCode::CREATED, "{}", hook.body);
    let hook = format!("/hooks/acme/{}", hook.str("/triggerId"));
    let payload = br#"{"ticket":"c-hook","text":"Where is my order #80?"}"#.to_vec();
    let now = chrono::Utc::now().timestamp();
    let key = switchboard_domain::webhook::standard::Key::from_secret(CRM_SECRET).unwrap();
    let signature = switchboard_domain::webhook::standard::sign(&key, "msg_c1", now, &payload);
    let ts = now.to_string();
    let signed = [("webhook-id", "msg_c1"), ("webhook-timestamp", ts.as_str()), ("webhook-signature", &signature)];
    let queued = api.call(Method::POST, &hook, Body::Raw("application/json", payload.clone()), &signed).await;
    assert_eq!((queued.status, queued.str("/status")), (StatusCode::ACCEPTED, "queued".into()), "{}", queued.body);
    let waited = api
        .call(Method::POST, &format!("{hook}?wait=30"), Body::Raw("application/json", payload.clone()), &signed)
        .await;
    assert_eq!((waited.status, waited.str("/status")), (StatusCode::OK, "success".into()), "{}", waited.body);
    let unsigned = api.call(Method::POST, &hook, Body::Raw("application/json", payload), &[]).await;
    assert_eq!(unsigned.status, StatusCode::UNAUTHORIZED);

    // -- handoffs over the API: back from the human to an agent, then to a human again --------
    let human = api.get("/tenants/acme/conversations/c-human/sessions").await.body["sessions"][0]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let handoff = |s: &str| format!("/tenants/acme/sessions/{s}/handoff");
    // an operator claims it (another cannot), replies once per key, then hands it back; each
    // signs in with a key of their own, and is recorded as its principal
    let operator_key = |name: &'static str| {
        let api = &api;
        async move {
            let r = api.post("/tenants/acme/keys", json!({ "principal": name, "role": "operator" })).await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
            r.str("/key")
        }
    };
    let (alice, bob) =
        (api.with_key(Some(&operator_key("Alice").await)), api.with_key(Some(&operator_key("Bob").await)));
    let me = alice.get("/tenants/acme/me").await;
    assert_eq!((me.str("/principal"), me.str("/role")), ("Alice".into(), "operator".into()));
    let claim = format!("/tenants/acme/sessions/{human}/claim");
    let r = alice.post(&claim, json!({})).await;
    assert_eq!((r.status, r.str("/claim/operator")), (StatusCode::OK, "Alice".into()));
    assert_eq!(bob.post(&claim, json!({})).await.status, 409);
    assert_eq!(bob.post(&claim, json!({ "operator": "Alice" })).await.pointers(), ["/operator"]);
    let say = format!("/tenants/acme/sessions/{human}/messages");
    let reply = json!({ "text": "Alice here, how can I help?" });
    let r = alice.call(Method::POST, &say, Body::Json(reply.clone()), &[("idempotency-key", "op-1")]).await;
    assert_eq!((r.status, &r.body["duplicate"]), (StatusCode::CREATED, &json!(false)), "{}", r.body);
    let again = alice.call(Method::POST, &say, Body::Json(reply.clone()), &[("idempotency-key", "op-1")]).await;
    assert_eq!((again.status, again.str("/messageId")), (StatusCode::OK, r.str("/messageId")));
    assert_eq!(alice.post(&say, reply.clone()).await.pointers(), ["/headers/Idempotency-Key"]);
    let me_too = json!({ "text": "Me too" });
    assert_eq!(bob.call(Method::POST, &say, Body::Json(me_too), &[("idempotency-key", "op-2")]).await.status, 409);
    // an operator does not write configuration
    let refused = bob.call(Method::DELETE, &format!("/tenants/acme/agents/{SUPPORT_AGENT}"), Body::None, &[]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let back = api
        .post(
            &handoff(&human),
            json!({ "targetType": "agent", "targetAgentId": SUPPORT_AGENT, "reason": "Resolved by phone" }),
        )
        .await;
    assert_eq!(back.status, 200, "{}", back.body);
    let agent_session = back.str("/newSessionId");
    let r = api.post(&handoff(&agent_session), json!({ "targetType": "human", "reason": "VIP customer" })).await;
    assert_eq!((r.status, &r.body["newSessionId"]), (StatusCode::OK, &Value::Null));
    let execution = r.str("/executionId");
    let handed = api.get(&format!("/tenants/acme/executions/{execution}")).await;
    assert_eq!(handed.str("/status"), "handed_off");
    // who asked is on the record and on the event: the admin key's principal
    assert_eq!(handed.str("/input/handoff/principal"), "admin");
    let events = published(&api, "acme").await;
    let human = events.iter().rev().find(|(_, e)| e["detailType"] == "session.handoff.human").unwrap();
    assert_eq!(human.1["detail"]["principal"], "admin", "{}", human.1);
    let r = api.post(&handoff(&agent_session), json!({ "targetType": "human", "reason": "again" })).await;
    assert_eq!(r.status, 409);
    let r = api.post(&handoff(&agent_session), json!({ "targetType": "agent", "reason": "x" })).await;
    assert_eq!(r.pointers(), ["/targetAgentId"]);
    let r = api.post(&handoff("01ARZ3NDEKTSV4RRFFQ69G5FAV"), json!({ "targetType": "human", "reason": "x" })).await;
    assert_eq!(r.status, 404);
    // a human owns it: no agent's turn to cancel
    let cancel = format!("/tenants/acme/sessions/{agent_session}/cancel");
    assert_eq!(api.post(&cancel, json!({ "reason": "stop" })).await.status, StatusCode::CONFLICT);
    // the VIP conversation is ended by the operator who has it; then nobody owns it
    let end = format!("/tenants/acme/sessions/{agent_session}/end");
    let r = alice.post(&end, json!({ "operator": "Alice", "note": "Upgraded to priority support" })).await;
    assert_eq!((r.status, r.str("/status")), (StatusCode::OK, "completed".into()), "{}", r.body);
    let ended = api.get(&format!("/tenants/acme/executions/{}", r.str("/executionId"))).await;
    assert_eq!(ended.str("/status"), "operator");
    assert_eq!(alice.post(&end, json!({})).await.status, 409);
    assert_eq!(alice.post(&format!("/tenants/acme/sessions/{agent_session}/claim"), json!({})).await.status, 409);

    // -- tenants: a new one, and a bundle applied to it (then again: nothing changes) ---------
    let r = api.post("/tenants", json!({ "tenantId": "beta", "name": "Beta" })).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(api.get("/tenants/beta").await.str("/status"), "active");
    let r = api.call(Method::PATCH, "/tenants/beta", Body::Json(json!({ "name": "Beta Inc" })), &[]).await;
    assert_eq!(r.str("/name"), "Beta Inc");
    let hours = json!({ "calendars": { "support": { "timeZone": "Europe/Paris",
        "hours": { "MON": ["09:00-12:30", "13:30-18:00"], "SAT": ["10:00-14:00"] },
        "holidays": [{ "date": "2026-12-25", "name": "Christmas" }] } } });
    let r = api.call(Method::PATCH, "/tenants/beta", Body::Json(hours), &[]).await;
    assert_eq!(r.str("/calendars/support/holidays/0/name"), "Christmas", "{}", r.body);
    let bad = json!({ "calendars": { "support": { "timeZone": "Europe/Paris", "hours": { "MON": ["9-5"] } } } });
    assert_eq!(
        api.call(Method::PATCH, "/tenants/beta", Body::Json(bad), &[]).await.pointers(),
        ["/calendars/support/hours/MON/0"]
    );
    // -- its API keys: issued, listed, rotated, revoked ----------------------------------------------
    let r = api.post("/tenants/beta/keys", json!({ "principal": "beta-owner", "role": "owner" })).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let first_id = r.str("/keyId").to_owned();
    assert_eq!(api.get("/tenants/beta/keys").await.body["keys"][0]["keyId"], first_id.as_str());
    let r = api.post(&format!("/tenants/beta/keys/{first_id}/rotate"), json!({})).await;
    assert_eq!((r.status, r.str("/principal")), (StatusCode::CREATED, "beta-owner".into()), "{}", r.body);
    let key_id = r.str("/keyId").to_owned();
    let r = api.call(Method::DELETE, &format!("/tenants/beta/keys/{key_id}"), Body::None, &[]).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(api.call(Method::DELETE, &format!("/tenants/beta/keys/{key_id}"), Body::None, &[]).await.status, 404);
    let mut bundle: Value =
        serde_json::from_str(&std::fs::read_to_string(common::examples().join("tenant.json")).unwrap()).unwrap();
    bundle["tenantId"] = json!("beta");
    let r = api.post("/tenants/beta/apply?dryRun=true", bundle.clone()).await;
    assert_eq!(r.body["changes"][0]["change"], "created", "{}", r.body);
    api.post("/tenants/beta/apply", bundle.clone()).await;
    let r = api.post("/tenants/beta/apply", bundle).await;
    assert!(r.body["changes"].as_array().unwrap().iter().all(|c| c["change"] == "unchanged"), "{}", r.body);
    // -- and deleted: only once suspended, then nothing of it answers -----------------------
    assert_eq!(api.call(Method::DELETE, "/tenants/beta", Body::None, &[]).await.status, 409);
    let r = api.call(Method::PATCH, "/tenants/beta", Body::Json(json!({ "status": "suspended" })), &[]).await;
    assert_eq!(r.str("/status"), "suspended");
    assert_eq!(api.call(Method::DELETE, "/tenants/beta", Body::None, &[]).await.status, 204);
    assert_eq!(api.get("/tenants/beta").await.status, 404);
    assert_eq!(api.call(Method::DELETE, "/tenants/beta", Body::None, &[]).await.status, 404);

    // -- usage: what those turns used, by day, agent and model -------------------------------
    let usage = api.get("/tenants/acme/usage").await;
    assert!(usage.body["total"]["calls"].as_u64().unwrap() > 0, "{}", usage.body);
    assert!(!usage.body["rows"].as_array().unwrap().is_empty());
    assert_eq!(api.get("/tenants/acme/usage?from=2026-02-30").await.pointers(), ["/query/from"]);
    let activity = api.get("/tenants/acme/activity?hours=2").await;
    assert!(activity.body["total"].as_u64().unwrap() > 0, "{}", activity.body);
    assert_eq!(activity.body["variants"][0]["total"], 1, "the manual trigger's one run: {}", activity.body);
    assert_eq!(api.get("/tenants/acme/activity?hours=169").await.pointers(), ["/query/hours"]);
    // -- insights: what the agents achieved, in all and grouped, against the days before --------
    let insights = api.get("/tenants/acme/insights?groupBy=agent,version,variant,channel,day").await;
    assert!(insights.body["total"]["executions"].as_u64().unwrap() > 0, "{}", insights.body);
    assert!(!insights.body["groups"].as_array().unwrap().is_empty(), "{}", insights.body);
    let hours = api.get("/tenants/acme/insights?groupBy=hour&timeZone=Asia/Kolkata").await;
    assert!(hours.body["groups"][0]["by"]["hour"].as_str().unwrap().ends_with("+05:30"), "{}", hours.body);
    for (query, field) in [
        ("groupBy=agent,week", "/query/groupBy"),
        ("from=2026-02-30", "/query/from"),
        ("from=2026-01-01&to=2026-12-01", "/query/from"),
        ("timeZone=Mars/Base", "/query/timeZone"),
        ("to=-262143-01-01", "/query/to"),
        ("to=%2B262142-12-31", "/query/to"),
        ("to=9999-12-31", "/query/to"),
        ("zone=UTC", "/query/zone"),
    ] {
        assert_eq!(api.get(&format!("/tenants/acme/insights?{query}")).await.pointers(), [field], "{query}");
    }

    // -- configuration CRUD -------------------------------------------------------------------
    let tool = api
        .post("/tenants/acme/tools", json!({
            "name": "lookup_order", "description": "Finds an order by number",
            "parameters": { "type": "object", "properties": { "orderId": { "type": "string" } }, "required": ["orderId"] },
            "handler": { "type": "webhook", "url": "https://example.invalid/hooks/order", "timeoutMs": 5000 }
        }))
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let tool_id = tool.str("/toolId");
    let skill = api
        .post("/tenants/acme/skills", json!({
            "name": "orders", "description": "Order lookups", "prompt": "Look orders up by number.", "tools": [tool_id]
        }))
        .await;
    assert_eq!(skill.status, 201);
    let skill_id = skill.str("/skillId");
    let child_skill = api
        .post("/tenants/acme/skills", json!({
            "name": "returns", "description": "Returns", "prompt": "Explain returns.", "parentSkill": skill_id, "status": "inactive"
        }))
        .await;
    assert_eq!(child_skill.status, 201);
    let agent_body = json!({
        "name": "Returns desk", "description": "Handles returns.", "type": "standard",
        "systemPrompt": "You handle returns.", "model": "anthropic.claude-3-haiku",
        "modelConfig": { "temperature": 0.3, "maxTokens": 800, "topP": 0.9, "stopSequences": ["END"] },
        "tools": ["send_message", "trigger_flow", tool_id], "skills": [skill_id],
        "steps": [{ "stepId": "greet", "name": "Greet", "systemPrompt": "Say hello.", "isInitial": true }],
        "maxTurns": 12, "handoffBehavior": "end", "maxIterations": 6,
        "history": { "maxMessages": 10, "maxTokens": 2000 }, "status": "active"
    });
    let agent = api.post("/tenants/acme/agents", agent_body.clone()).await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let agent_id = agent.str("/agentId");
    assert_eq!(agent.headers["location"], format!("/tenants/acme/agents/{agent_id}").as_str());
    let sub = api
        .post(
            "/tenants/acme/agents",
            json!({
                "name": "Supervisor", "systemPrompt": "You supervise.", "model": "m", "type": "supervisor",
                "subAgents": [agent_id], "status": "draft"
            }),
        )
        .await;
    assert_eq!(sub.status, 201);
    let trigger_body = json!({
        "name": "Returns over SMS", "agentId": agent_id, "eventType": "message.new", "priority": 50,
        "status": "inactive",
        "conditions": { "all": [
            { "field": "channel.platform", "operator": "eq", "value": "sms" },
            { "any": [
                { "field": "message.text", "operator": "matches", "value": "return|refund", "caseInsensitive": true },
                { "field": "conversation.tags", "operator": "contains", "value": "returns" },
                { "field": "message.text", "operator": "in", "value": ["RETURN", "REFUND"] },
                { "field": "conversation.priority", "operator": "gte", "value": 3 },
                { "field": "conversation.closedAt", "operator": "not_exists" }
            ] }
        ] }
    });
    let trigger = api.post("/tenants/acme/triggers", trigger_body.clone()).await;
    assert_eq!(trigger.status, 201, "{}", trigger.body);
    let trigger_id = trigger.str("/triggerId");
    let leaf_trigger = api
        .post(
            "/tenants/acme/triggers",
            json!({
                "name": "Leaf at the root", "agentId": agent_id, "eventType": "message.new", "status": "inactive",
                "conditions": { "field": "message.text", "operator": "exists" }
            }),
        )
        .await;
    assert_eq!(leaf_trigger.status, 201, "{}", leaf_trigger.body);

    // reads and lists
    for (kind, id) in [("agents", &agent_id), ("triggers", &trigger_id), ("tools", &tool_id), ("skills", &skill_id)] {
        let r = api.get(&format!("/tenants/acme/{kind}/{id}")).await;
        assert_eq!((r.status, r.headers["etag"].to_str().unwrap()), (StatusCode::OK, "\"1\""), "{kind}");
        let list = api.get(&format!("/tenants/acme/{kind}")).await;
        assert_eq!(list.status, 200);
    }
    let page = api.get("/tenants/acme/agents?limit=1&status=active&type=standard").await;
    let cursor = page.str("/nextCursor");
    api.get(&format!("/tenants/acme/agents?limit=1&cursor={cursor}")).await;
    api.get("/tenants/acme/triggers?status=inactive&limit=5").await;
    api.get("/tenants/acme/skills?status=active").await;
    let tools = api.get("/tenants/acme/tools?status=active").await;
    assert_eq!(tools.body["items"][0]["type"], "system");
    // the trigger tester, on a message and on a detail, and a bad test
    let tested =
        api.post("/tenants/acme/triggers/test", json!({ "message": "where is my order", "channel": "sms" })).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    let detail = json!({ "channel": { "platform": "webchat" }, "message": { "text": "hi" } });
    assert_eq!(api.post("/tenants/acme/triggers/test", json!({ "detail": detail })).await.status, 200);
    assert_eq!(api.post("/tenants/acme/triggers/test", json!({})).await.status, 400);

    // replace with If-Match, delete with and without it
    let path = format!("/tenants/acme/agents/{agent_id}");
    let mut changed = agent_body.clone();
    changed["name"] = json!("Returns desk v2");
    let r = api.call(Method::PUT, &path, Body::Json(changed.clone()), &[("if-match", "\"1\"")]).await;
    assert_eq!((r.status, r.headers["etag"].to_str().unwrap()), (StatusCode::OK, "\"2\""));
    assert_eq!(api.call(Method::PUT, &path, Body::Json(changed.clone()), &[]).await.status, 428);
    assert_eq!(api.call(Method::PUT, &path, Body::Json(changed), &[("if-match", "\"1\"")]).await.status, 412);
    let mut t = trigger_body.clone();
    t["priority"] = json!(60);
    let trigger_path = format!("/tenants/acme/triggers/{trigger_id}");
    assert_eq!(api.call(Method::PUT, &trigger_path, Body::Json(t), &[("if-match", "1")]).await.status, 200);
    let tool_path = format!("/tenants/acme/tools/{tool_id}");
    let mut tb = json!({
        "name": "lookup_order", "description": "Finds an order (v2)", "parameters": { "type": "object" },
        "handler": {
            "type": "webhook", "url": "https://example.invalid/hooks/order2", "timeoutMs": 3000,
            "secretRef": "orders-hook", "headers": { "X-Api-Version": "2" },
            "retryPolicy": { "maxRetries": 3, "backoffMs": 500 }, "includePii": true
        }
    });
    assert_eq!(api.call(Method::PUT, &tool_path, Body::Json(tb.clone()), &[("if-match", "W/\"1\"")]).await.status, 200);
    tb["type"] = json!("custom");
    assert_eq!(api.call(Method::PUT, &tool_path, Body::Json(tb), &[("if-match", "\"2\"")]).await.status, 200);
    let skill_path = format!("/tenants/acme/skills/{skill_id}");
    let sb = json!({ "name": "orders", "description": "Order lookups (v2)", "prompt": "Look orders up.", "tools": ["get_context"] });
    assert_eq!(api.call(Method::PUT, &skill_path, Body::Json(sb), &[("if-match", "\"1\"")]).await.status, 200);

    // each record's kept versions: newest first in pages, one version, a diff, a rollback
    for p in [&path, &trigger_path, &tool_path, &skill_path] {
        let versions = api.get(&format!("{p}/versions?limit=1")).await;
        assert_eq!(versions.status, 200, "{p}: {}", versions.body);
        let newest = versions.body["items"][0]["version"].as_u64().unwrap();
        let rest = api.get(&format!("{p}/versions?limit=1&cursor={}", versions.str("/nextCursor"))).await;
        assert_eq!(rest.body["items"][0]["version"], newest - 1);
        assert_eq!(api.get(&format!("{p}/versions/1")).await.body["writtenBy"], "admin");
        let diff = api.get(&format!("{p}/versions/1/diff?to={newest}")).await;
        assert!(!diff.body["changes"].as_array().unwrap().is_empty(), "{p}: {}", diff.body);
        let etag = format!("\"{newest}\"");
        let back = Body::Json(json!({ "version": 1 }));
        let r = api.call(Method::POST, &format!("{p}/rollback"), back, &[("if-match", &etag)]).await;
        assert_eq!(r.status, 200, "{p}: {}", r.body);
    }

    // what is still used cannot be deleted (409); a stale If-Match is 412; then in order
    assert_eq!(api.call(Method::DELETE, &path, Body::None, &[]).await.status, 409);
    assert_eq!(api.call(Method::DELETE, &tool_path, Body::None, &[]).await.status, 409);
    assert_eq!(api.call(Method::DELETE, &skill_path, Body::None, &[]).await.status, 409);
    assert_eq!(api.call(Method::DELETE, &trigger_path, Body::None, &[("if-match", "\"1\"")]).await.status, 412);
    assert_eq!(api.call(Method::DELETE, &trigger_path, Body::None, &[("if-match", "\"3\"")]).await.status, 204);
    let leaf_path = format!("/tenants/acme/triggers/{}", leaf_trigger.str("/triggerId"));
    assert_eq!(api.call(Method::DELETE, &leaf_path, Body::None, &[]).await.status, 204);
    let sub_path = format!("/tenants/acme/agents/{}", sub.str("/agentId"));
    assert_eq!(api.call(Method::DELETE, &sub_path, Body::None, &[]).await.status, 204);
    assert_eq!(api.call(Method::DELETE, &path, Body::None, &[]).await.status, 204);
    let child_path = format!("/tenants/acme/skills/{}", child_skill.str("/skillId"));
    assert_eq!(api.call(Method::DELETE, &child_path, Body::None, &[]).await.status, 204);
    assert_eq!(api.call(Method::DELETE, &skill_path, Body::None, &[]).await.status, 204);
    assert_eq!(api.call(Method::DELETE, &tool_path, Body::None, &[]).await.status, 204);
    assert_eq!(api.get(&tool_path).await.status, 404);

    // -- conversations, sessions, executions ------------------------------------------------
    for c in ["c-order", "c-human", "c-bill", "c-invoke", "c-nothing"] {
        assert_eq!(api.get(&format!("/tenants/acme/conversations/{c}/messages")).await.status, 200);
    }
    let sessions = api.get("/tenants/acme/conversations/c-bill/sessions").await;
    let list = sessions.body["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 2, "the front-line session and the billing specialist's");
    assert!(list.iter().any(|s| s["handoffContext"]["reason"] == "Billing question" && s["handoffDepth"] == 1));
    api.get("/tenants/acme/conversations/c-human/sessions").await;
    // the tenant-wide list: the handed-off sessions include the human's conversation and the
    // billing handoff's first session; a page of one has a cursor to the next
    let handed = api.get("/tenants/acme/sessions?status=handed_off").await;
    let handed = handed.body["items"].as_array().unwrap().clone();
    assert!(handed.len() >= 2 && handed.iter().all(|s| s["status"] == "handed_off"), "{handed:?}");
    let first = api.get("/tenants/acme/sessions?limit=1").await;
    let cursor = first.str("/nextCursor");
    let next = api.get(&format!("/tenants/acme/sessions?limit=1&cursor={cursor}")).await;
    assert_ne!(next.body["items"][0]["sessionId"], first.body["items"][0]["sessionId"]);
    let billing = api.get(&format!("/tenants/acme/sessions?agentId={BILLING_AGENT}")).await;
    assert!(billing.body["items"].as_array().unwrap().iter().all(|s| s["agentId"] == BILLING_AGENT));
    assert_eq!(api.get("/tenants/acme/sessions?status=waiting").await.status, 400);
    // by channel: every session of the session's own channel, none of a channel nobody used
    let channel = list[0]["channel"].as_str().unwrap().to_owned();
    let by_channel = api.get(&format!("/tenants/acme/sessions?channel={channel}&limit=100")).await;
    let by_channel = by_channel.body["items"].as_array().unwrap().clone();
    assert!(by_channel.iter().all(|s| s["channel"] == channel.as_str()), "{by_channel:?}");
    assert!(by_channel.iter().any(|s| s["sessionId"] == list[0]["sessionId"]));
    let nobody = api.get("/tenants/acme/sessions?channel=carrier-pigeon&variant=b").await;
    assert_eq!(nobody.body["items"], json!([]));
    let long = "v".repeat(129);
    for (query, pointer) in [("channel=", "/query/channel"), (&*format!("variant={long}"), "/query/variant")] {
        let r = api.get(&format!("/tenants/acme/sessions?{query}")).await;
        assert_eq!((r.status.as_u16(), r.str("/errors/0/pointer")), (400, pointer.to_owned()), "{query}");
    }
    // a cursor that no page gave is refused by name, on both lists
    let executions = format!("/tenants/acme/sessions/{order_session}/executions?cursor=SESSION%23x%0AEXEC%23y");
    for bad in ["/tenants/acme/sessions?cursor=not-a-cursor", executions.as_str()] {
        let r = api.get(bad).await;
        assert_eq!((r.status.as_u16(), r.str("/errors/0/pointer")), (400, "/query/cursor".to_owned()), "{bad}");
    }
    for s in list.iter().map(|s| s["sessionId"].as_str().unwrap()).chain([order_session.as_str()]) {
        assert_eq!(api.get(&format!("/tenants/acme/sessions/{s}")).await.status, 200);
        let page = api.get(&format!("/tenants/acme/sessions/{s}/executions?limit=1")).await;
        for e in page.body["items"].as_array().unwrap() {
            let id = e["executionId"].as_str().unwrap();
            assert_eq!(api.get(&format!("/tenants/acme/executions/{id}")).await.status, 200);
            // what each model call was sent and answered, read back whole (recording is `full`)
            let calls = api.get(&format!("/tenants/acme/executions/{id}/model-calls")).await;
            assert_eq!(calls.status, 200, "{}", calls.body);
            let calls = calls.body["calls"].as_array().unwrap().clone();
            assert_eq!(calls.len(), e["modelCalls"].as_array().unwrap().len());
            for call in &calls {
                assert!(call["request"]["system"]["content"].is_string(), "{call:#}");
                let messages = call["request"]["messages"].as_array().unwrap();
                assert!(messages.iter().all(|m| m["content"]["role"].is_string()), "{call:#}");
                assert_eq!(call["response"]["message"]["content"]["role"], "assistant");
            }
            // and run again from its record, today's engine takes the same actions
            if !calls.is_empty() {
                let replay = api.post(&format!("/tenants/acme/executions/{id}/replay"), json!({})).await;
                assert_eq!((replay.status.as_u16(), &replay.body["same"]), (200, &json!(true)), "{}", replay.body);
            }
        }
        if let Some(cursor) = page.body["nextCursor"].as_str() {
            api.get(&format!("/tenants/acme/sessions/{s}/executions?cursor={cursor}")).await;
        }
    }

    // -- errors -----------------------------------------------------------------------------
    let anonymous = api.with_key(None);
    assert_eq!(anonymous.get("/tenants/acme/agents").await.status, 401);
    assert_eq!(anonymous.get("/health").await.status, 200, "health needs no key");
    assert_eq!(anonymous.get("/ready").await.str("/status"), "ready", "readiness needs no key");
    let contract = anonymous.get("/openapi.json").await;
    assert_eq!(contract.body["paths"], spec.doc["paths"], "the contract needs no key and is this one");
    assert_eq!(api.get("/metrics").await.status, 200);
    assert_eq!(api.with_key(Some("sbk_wrong")).post("/events", json!({})).await.status, 401);
    assert_eq!(api.get("/tenants/nobody/agents").await.status, 404);
    assert_eq!(api.get(&format!("/tenants/acme/agents/{}", "01ARZ3NDEKTSV4RRFFQ69G5FAV")).await.status, 404);
    assert_eq!(api.get("/tenants/acme/agents/not-a-ulid").await.status, 404);
    assert_eq!(api.get("/tenants/acme/sessions/01ARZ3NDEKTSV4RRFFQ69G5FAV/executions").await.status, 404);
    assert_eq!(api.get("/tenants/acme/agents?bogus=1").await.status, 400);
    assert_eq!(api.get("/tenants/acme/agents?limit=0").await.pointers(), ["/query/limit"]);
    assert_eq!(api.get("/tenants/acme/events?after=x").await.status, 400);
    let mut bad = agent_body.clone();
    bad["colour"] = json!("red");
    bad["tools"] = json!(["send_message"]);
    bad["skills"] = json!([]);
    assert_eq!(api.post("/tenants/acme/agents", bad).await.status, 400);
    let r = api.call(Method::POST, "/tenants/acme/agents", Body::Raw("application/json", b"{nope".to_vec()), &[]).await;
    assert_eq!(r.pointers(), [""]);
    // Bodies one byte over a limit: the server reads all of them before refusing, so the
    // answer never races the client's upload.
    let huge = vec![b' '; 2 * 1024 * 1024 + 1];
    let r = api.call(Method::POST, "/tenants/acme/agents", Body::Raw("application/json", huge), &[]).await;
    assert_eq!(r.status, 413);
    let r = api
        .call(
            Method::POST,
            "/events",
            Body::Raw("text/plain", envelope("e-x", "acme", "c", "hi").to_string().into()),
            &[],
        )
        .await;
    assert_eq!(r.status, 415);
    let mut big = envelope("e-big", "acme", "c-big", "x");
    big["detail"]["padding"] = json!("");
    let pad = 256 * 1024 + 1 - big.to_string().len();
    big["detail"]["padding"] = json!("y".repeat(pad));
    let big = big.to_string().into_bytes();
    assert_eq!(big.len(), 256 * 1024 + 1);
    assert_eq!(api.call(Method::POST, "/events", Body::Raw("application/json", big), &[]).await.status, 413);
    assert_eq!(api.post("/events?wait=0", envelope("e-w", "acme", "c", "hi")).await.pointers(), ["/query/wait"]);
    let r = api.post("/events", envelope("e-nobody", "nobody", "c", "hi")).await;
    assert_eq!((r.status, r.pointers()), (StatusCode::UNPROCESSABLE_ENTITY, vec!["/detail/tenantId".to_owned()]));

    // the caps of message.new.schema.json are the server's: what one refuses, so does the other
    let schema = spec.event_schema("message.new");
    type Spoil = fn(&mut Value);
    let cases: [(&str, Spoil); 6] = [
        ("/id", |e| e["id"] = json!("e".repeat(64))),
        ("/detail/conversationId", |e| e["detail"]["conversationId"] = json!("c#1")),
        ("/detail/tenantId", |e| e["detail"]["tenantId"] = json!("")),
        ("/detail/message/text", |e| e["detail"]["message"]["text"] = json!("x".repeat(16 * 1024 + 1))),
        ("/detail/message/direction", |e| e["detail"]["message"]["direction"] = json!("sideways")),
        ("/source", |e| e["source"] = json!("elsewhere")),
    ];
    for (pointer, spoil) in cases {
        let mut e = envelope("e-bad", "acme", "c-bad", "hi");
        spoil(&mut e);
        assert!(!spec.errors(schema, &e).is_empty(), "the schema takes what the server refuses at {pointer}");
        assert_eq!(api.post("/events", e).await.pointers(), [pointer]);
    }
    let text = format!("{:<width$}", "Where is my order #1234?", width = 16 * 1024);
    let mut at_cap = envelope(&"e".repeat(63), "acme", &"c".repeat(63), &text);
    at_cap["detail"]["messageId"] = json!("m.1_2-3");
    assert_eq!(deliver(&api, at_cap).await.str("/outcome"), "enqueued");

    // -- events out: the log and the operator stream --------------------------------------
    let events = published(&api, "acme").await;
    assert_eq!(
        kinds(&events),
        ["session.ended", "session.handoff.agent", "session.handoff.human"].map(String::from).into()
    );
    let by_api = events.iter().filter(|(_, e)| e["detail"]["requestedBy"] == "api").count();
    assert_eq!(by_api, 2, "the two handoffs over the API say so");
    let streamed = api.stream("/tenants/acme/events/stream", &[], events.len()).await;
    assert_eq!(streamed, events, "the stream replays the log");
    let first = events[0].0.to_string();
    let resumed =
        api.stream("/tenants/acme/events/stream?after=0", &[("last-event-id", &first)], events.len() - 1).await;
    assert_eq!(resumed, events[1..], "Last-Event-ID resumes after that event");
    api.get(&format!("/tenants/acme/events?after={}&limit=1", events[0].0)).await;
    // the live push is the AWS profile's: here a problem that names the stream instead
    let push = api.post("/tenants/acme/events/push", json!({})).await;
    assert_eq!(push.status, StatusCode::NOT_FOUND);
    assert!(push.body["detail"].as_str().unwrap().contains("/events/stream"), "{}", push.body);

    // -- approvals: none waits in this session (their flow is its own test below) ---------------
    assert_eq!(api.get("/tenants/acme/approvals").await.body["approvals"], json!([]));
    let unknown = "/tenants/acme/approvals/01JD000000000000000000000Z";
    assert_eq!(api.get(unknown).await.status, StatusCode::NOT_FOUND);
    assert_eq!(api.post(&format!("{unknown}/approve"), json!({})).await.status, StatusCode::NOT_FOUND);
    assert_eq!(api.post(&format!("{unknown}/deny"), json!({ "reason": "no" })).await.status, StatusCode::NOT_FOUND);

    // -- tools of an MCP server (on a server that may call loopback, for the SDK's server) ----
    mcp_tools(&api).await;

    // -- every documented operation was exercised, and every one is served -------------------
    let missing: Vec<_> = spec.operations().difference(&api.seen()).cloned().collect();
    assert!(missing.is_empty(), "documented but not exercised: {missing:?}");
}

/// An MCP server's tools discovered, one imported and refreshed, and the refusals, on a server
/// with loopback tools allowed; here, where they are not, the address is refused.
async fn mcp_tools(api: &Api<'_>) {
    use switchboard_testkit::mcp::{OrdersServer, TOKEN};
    let orders = OrdersServer::start();
    let refused = api.post("/tenants/acme/tools/discover", json!({ "url": orders.url })).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", refused.body);
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets.json");
    std::fs::write(&secrets, json!({ "acme": { "mcp": format!("Bearer {TOKEN}") } }).to_string()).unwrap();
    let data = dir.path().join("data");
    let local = Server::start(&data, &["--secrets-file", secrets.to_str().unwrap(), "--allow-private-webhooks"]);
    let api = api.on(&local, &crate::common::create_tenant(&local, "acme"));
    let server = json!({ "url": orders.url, "secretRef": "mcp", "timeoutMs": 5000 });
    let found = api.post("/tenants/acme/tools/discover", server.clone()).await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.body);
    let created = api.post("/tenants/acme/tools", found.body["tools"][0]["tool"].clone()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let refresh = format!("/tenants/acme/tools/{}/refresh", created.str("/toolId"));
    let refreshed = api.post(&refresh, json!({})).await;
    assert_eq!(refreshed.body["changed"], false, "{} {}", refreshed.status, refreshed.body);
    let bad = api.post("/tenants/acme/tools/discover", json!({ "url": orders.url, "timeoutMs": 0 })).await;
    assert_eq!(bad.pointers(), ["/timeoutMs"]);
    let down = api.post("/tenants/acme/tools/discover", json!({ "url": orders.broken_url })).await;
    assert_eq!(down.status, StatusCode::BAD_GATEWAY, "{}", down.body);
}

/// The router's own 404 (`no such route`) and 405 mean the route is not served.
fn is_router_fallback(status: StatusCode, body: &str) -> bool {
    status == StatusCode::METHOD_NOT_ALLOWED || (status == StatusCode::NOT_FOUND && body.contains("no such route"))
}

#[tokio::test]
async fn every_documented_operation_is_served() {
    let spec = Spec::load();
    let dir = tempfile::tempdir().unwrap();
    let server = example_server(dir.path());
    let api = Api::new(&spec, &server, Some(&server.admin));
    let client = Client::new();

    // the detector works: an unknown path and an unknown method hit the router's fallbacks
    let r =
        client.get(format!("{}/tenants/acme/nonsense", server.base)).bearer_auth(&server.admin).send().await.unwrap();
    let (status, text) = (r.status(), r.text().await.unwrap());
    assert!(is_router_fallback(status, &text), "{status} {text}");
    let r = client.delete(format!("{}/health", server.base)).send().await.unwrap();
    let (status, text) = (r.status(), r.text().await.unwrap());
    assert!(is_router_fallback(status, &text), "{status} {text}");

    for (method, template) in spec.operations() {
        let path = concrete(&template, "acme");
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        if path.ends_with("/events/stream") {
            // endless: only the head is read
            let res = client.get(format!("{}{path}", server.base)).bearer_auth(&server.admin).send().await.unwrap();
            assert_eq!(res.status(), 200, "GET {path}");
            continue;
        }
        let body = if matches!(method, Method::POST | Method::PUT) {
            Body::Raw("application/json", b"{}".to_vec())
        } else {
            Body::None
        };
        // answered, and with a documented status and body (checked by `call`)
        let r = api.call(method.clone(), &path, body, &[]).await;
        assert!(!is_router_fallback(r.status, &r.body.to_string()), "{method} {path} is not served: {}", r.body);
    }
}

/// A documented route template made a path of `tenant`: the example's support agent, a probe
/// conversation, and a well-formed ULID for every other id.
fn concrete(template: &str, tenant: &str) -> String {
    template
        .replace("{tenantId}", tenant)
        .replace("{conversationId}", "c-probe")
        .replace("{agentId}", SUPPORT_AGENT)
        .split('/')
        .map(|s| if s.starts_with('{') { "01ARZ3NDEKTSV4RRFFQ69G5FAV" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

/// The role matrix of `docs/roles.md`: which group each documented operation is in, and which
/// roles reach each group, read from the page itself so that it cannot drift from the server.
struct Matrix {
    routes: Vec<(String, String, String)>,
    reaches: HashMap<String, BTreeSet<String>>,
}

impl Matrix {
    fn load() -> Self {
        let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/roles.md")).unwrap();
        let between = |tag: &str| {
            let (open, close) = (format!("<!-- {tag} -->"), format!("<!-- /{tag} -->"));
            let start = page.find(&open).unwrap_or_else(|| panic!("docs/roles.md has no {open}")) + open.len();
            let end = page.find(&close).unwrap_or_else(|| panic!("docs/roles.md has no {close}"));
            page[start..end]
                .lines()
                .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
                .skip(1)
                .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().trim_matches('`').to_owned()).collect())
                .collect::<Vec<Vec<String>>>()
        };
        let roles = ["admin", "owner", "builder", "operator", "viewer"];
        let reaches = between("roles:groups")
            .into_iter()
            .map(|cells| {
                let yes = roles.iter().zip(&cells[2..]).filter(|(_, c)| *c == "yes").map(|(r, _)| (*r).to_owned());
                (cells[0].clone(), yes.collect())
            })
            .collect();
        let routes = between("roles:routes").into_iter().map(|c| (c[0].clone(), c[1].clone(), c[2].clone())).collect();
        Matrix { routes, reaches }
    }
}

#[tokio::test]
async fn every_route_answers_every_role_as_the_matrix_says() {
    use switchboard_domain::access::Role;
    let spec = Spec::load();
    let matrix = Matrix::load();
    // the page names every documented operation, once, and nothing else
    let listed: BTreeSet<(String, String)> = matrix.routes.iter().map(|(m, p, _)| (m.clone(), p.clone())).collect();
    assert_eq!(listed.len(), matrix.routes.len(), "docs/roles.md lists a route twice");
    assert_eq!(listed, spec.operations(), "docs/roles.md and openapi.yaml list different routes");

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--tenant", examples().join("tenant.json").to_str().unwrap(), "--rate-limit", "100000"],
    );
    let api = Api::new(&spec, &server, Some(&server.admin));
    create_tenant(&server, "other");
    let key = |principal: &str, role| common::role_key(&server, "acme", principal, role);
    let revoked = key("revoked", Role::Operator);
    let listed = api.get("/tenants/acme/keys").await.body["keys"].clone();
    let revoked_id = listed.as_array().unwrap().iter().find(|k| k["principal"] == "revoked").unwrap()["keyId"].clone();
    let r = api
        .call(Method::DELETE, &format!("/tenants/acme/keys/{}", revoked_id.as_str().unwrap()), Body::None, &[])
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let expired = common::expired_key(&server, "acme", "expired");
    let callers: Vec<(&str, Option<&str>, String)> = vec![
        ("admin", Some("admin"), server.admin.clone()),
        ("owner", Some("owner"), key("olivia", Role::Owner)),
        ("builder", Some("builder"), key("bea", Role::Builder)),
        ("operator", Some("operator"), key("otto", Role::Operator)),
        ("viewer", Some("viewer"), key("vic", Role::Viewer)),
        ("revoked", None, revoked),
        ("expired", None, expired),
        ("another tenant's owner", Some("owner"), common::tenant_key(&server, "other")),
    ];
    let client = Client::new();
    let mut checked = 0;
    for (method, template, group) in &matrix.routes {
        let path = concrete(template, "acme");
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        for (who, role, key) in &callers {
            let expected = match (group.as_str(), role) {
                ("public", _) => "answered",
                // no key opens it: only a signature does
                ("signed", _) => "401",
                (_, None) => "401",
                _ if *who == "another tenant's owner" && path.starts_with("/tenants/acme") => "as for no tenant",
                (g, Some(role)) if matrix.reaches.get(g).unwrap_or_else(|| panic!("no group {g}")).contains(*role) => {
                    "answered"
                }
                _ => "403",
            };
            let send = |path: String| {
                let (api, client, method, base) = (&api, &client, method.clone(), server.base.clone());
                async move {
                    if path.ends_with("/events/stream") {
                        // endless: only the head is read
                        return client.get(format!("{base}{path}")).bearer_auth(key).send().await.unwrap().status();
                    }
                    let body = if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
                        Body::Raw("application/json", b"{}".to_vec())
                    } else {
                        Body::None
                    };
                    // every answer is also checked against the operation's documented responses
                    api.with_key(Some(key)).call(method, &path, body, &[]).await.status
                }
            };
            let status = send(path.clone()).await;
            let ok = match expected {
                "answered" => !matches!(status.as_u16(), 401 | 403),
                // the same answer as for a tenant that does not exist (a 404, or a bad query
                // named before any tenant is looked up): nothing tells that acme exists
                "as for no tenant" => {
                    let nobody = send(path.replacen("/tenants/acme", "/tenants/nobody-here", 1)).await;
                    status == nobody && matches!(status.as_u16(), 400 | 404)
                }
                code => status.as_str() == code,
            };
            assert!(ok, "{method} {path} as {who}: {status}, the matrix says {expected} (group {group})");
            checked += 1;
        }
    }
    assert_eq!(checked, matrix.routes.len() * callers.len());
}

#[test]
fn the_iam_policy_of_each_role_reaches_exactly_the_routes_the_matrix_gives_it_on_aws() {
    let matrix = Matrix::load();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for role in ["owner", "builder", "operator", "viewer"] {
        let policy: Value =
            serde_json::from_str(&std::fs::read_to_string(root.join(format!("infra/roles/{role}.json"))).unwrap())
                .unwrap();
        for (method, template, group) in &matrix.routes {
            let arn = |tenant: &str| {
                format!("arn:aws:execute-api:REGION:ACCOUNT_ID:API_ID/STAGE/{method}{}", concrete(template, tenant))
            };
            // On AWS a tenant's settings and the platform stay with the admin (an IAM policy
            // cannot tell a `PATCH` of `recording` from one of `limits`), and there are no keys.
            let expected = template.starts_with("/tenants/{tenantId}")
                && !matches!(group.as_str(), "own" | "platform")
                && matrix.reaches[group].contains(role);
            assert_eq!(
                switchboard_testkit::iam::allows(&policy, &arn("TENANT_ID")),
                expected,
                "{role}: {method} {template} ({group})"
            );
            assert!(
                !switchboard_testkit::iam::allows(&policy, &arn("OTHER_TENANT")),
                "{role} reaches another tenant: {method} {template}"
            );
        }
    }
}

#[tokio::test]
async fn an_agent_with_hooks_and_its_records_match_the_contract() {
    let spec = Spec::load();
    let dir = tempfile::tempdir().unwrap();
    let server = example_server(dir.path());
    let api = Api::new(&spec, &server, Some(&server.admin));
    // given an agent whose hooks point at a loopback address, which the webhook guard refuses
    let agent = json!({
        "name": "Hooked", "systemPrompt": "You are the support agent.", "tools": ["send_message"],
        "hooks": [
            { "at": "before_model", "handler": { "url": "https://127.0.0.1:9/redact", "timeoutMs": 2000 } },
            { "at": "before_tool", "tools": ["send_message"], "onError": "stop",
              "handler": { "url": "https://127.0.0.1:9/check", "secretRef": "hooks" } },
            { "at": "turn_end", "handler": { "url": "https://127.0.0.1:9/seen", "signature": "standard-webhooks", "secretRef": "hooks" } }
        ]
    });
    let created = api.post("/tenants/acme/agents", agent.clone()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["hooks"].as_array().unwrap().len(), 3);
    // bad hooks are named at their pointers
    let mut bad = agent.clone();
    bad["hooks"][0]["handler"]["timeoutMs"] = json!(60000);
    bad["hooks"][1]["at"] = json!("before_model");
    let r = api.post("/tenants/acme/agents", bad).await;
    assert_eq!(r.pointers(), ["/hooks/0/handler/timeoutMs", "/hooks/1/tools"], "{}", r.body);
    // when it answers, every hook call is in its record (as the contract says), each failed:
    // the first two went on (onError continue), the before_tool one would have stopped the turn
    let id = created.str("/agentId");
    let r = api.post(&format!("/tenants/acme/agents/{id}/invoke"), json!({ "conversationId": "c-hooked" })).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let record = api.get(&format!("/tenants/acme/executions/{}", r.str("/executionId"))).await;
    let calls = record.body["hookCalls"].as_array().unwrap_or_else(|| panic!("{}", record.body));
    let at: Vec<&str> = calls.iter().map(|c| c["at"].as_str().unwrap()).collect();
    assert_eq!(at.first(), Some(&"before_model"), "{calls:?}");
    assert_eq!(at.last(), Some(&"turn_end"), "{calls:?}");
    assert!(calls.iter().all(|c| c["outcome"] == "failed"), "{calls:?}");
}

#[tokio::test]
async fn an_agents_bursts_and_the_records_of_a_coalesced_burst_match_the_contract() {
    let spec = Spec::load();
    let dir = tempfile::tempdir().unwrap();
    let server = example_server(dir.path());
    let api = Api::new(&spec, &server, Some(&server.admin));
    // an agent that coalesces bursts reads back with the policy's defaults filled in
    let agent = json!({ "name": "Patient", "systemPrompt": "You are the support agent.", "tools": ["send_message"],
                        "bursts": { "mode": "coalesce" } });
    let created = api.post("/tenants/acme/agents", agent.clone()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["bursts"], json!({ "mode": "coalesce", "windowSeconds": 2, "maxMessages": 10 }));
    // the default policy is left out; bounds and unknown modes are refused at their fields
    let mut plain = agent.clone();
    plain["bursts"] = json!({ "mode": "enqueue" });
    let plain = api.post("/tenants/acme/agents", plain).await;
    assert_eq!((plain.status, plain.body.get("bursts")), (StatusCode::CREATED, None), "{}", plain.body);
    let mut bad = agent.clone();
    bad["bursts"] = json!({ "mode": "coalesce", "windowSeconds": 0, "maxMessages": 11 });
    let r = api.post("/tenants/acme/agents", bad).await;
    assert_eq!(r.pointers(), ["/bursts/windowSeconds", "/bursts/maxMessages"], "{}", r.body);
    let mut unknown = agent.clone();
    unknown["bursts"] = json!({ "mode": "reject" });
    let r = api.post("/tenants/acme/agents", unknown).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.to_string().contains("reject"), "{}", r.body);
    let mut interrupt = agent.clone();
    interrupt["bursts"] = json!({ "mode": "interrupt", "maxMessages": 3 });
    let r = api.post("/tenants/acme/agents", interrupt).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["bursts"], json!({ "mode": "interrupt", "windowSeconds": 2, "maxMessages": 3 }));
    // a burst's records, as the engine writes them (`crates/embedded/tests/suite/bursts.rs` runs
    // them): the turn lists the earlier messages, each of which points at it
    let id = created.str("/agentId");
    let r = api.post(&format!("/tenants/acme/agents/{id}/invoke"), json!({ "conversationId": "c-burst" })).await;
    let mut turn = api.get(&format!("/tenants/acme/executions/{}", r.str("/executionId"))).await.body;
    turn["coalesced"] = json!([{ "messageId": "m-1", "sourceId": "message-c-burst:m-1" }]);
    let mut earlier = turn.clone();
    earlier["status"] = json!("coalesced");
    earlier["coalescedInto"] = turn["executionId"].clone();
    earlier.as_object_mut().unwrap().remove("coalesced");
    let schema = json!({ "$ref": "#/components/schemas/ExecutionRecord" });
    spec.check(&schema, &turn, "a burst's turn");
    spec.check(&schema, &earlier, "a coalesced record");
    let as_rust: switchboard_domain::ExecutionRecord = serde_json::from_value(earlier).unwrap();
    assert_eq!(as_rust.status, switchboard_domain::ExecutionStatus::Coalesced);
    // an interrupted turn's record names the message that stopped it (the next turn lists it
    // in `coalesced`, as above), and its session keeps the message until then
    let mut interrupted = turn.clone();
    interrupted["status"] = json!("interrupted");
    interrupted["interruptedBy"] = json!({ "messageId": "m-2", "sourceId": "message-c-burst:m-2" });
    interrupted.as_object_mut().unwrap().remove("coalesced");
    spec.check(&schema, &interrupted, "an interrupted record");
    let as_rust: switchboard_domain::ExecutionRecord = serde_json::from_value(interrupted).unwrap();
    assert_eq!(as_rust.status, switchboard_domain::ExecutionStatus::Interrupted);
    let mut session = api.get(&format!("/tenants/acme/sessions/{}", turn["sessionId"].as_str().unwrap())).await.body;
    session["interrupted"] = json!([{ "messageId": "m-1", "sourceId": "message-c-burst:m-1" }]);
    spec.check(
        &json!({ "$ref": "#/components/schemas/Session" }),
        &session,
        "a session holding an interrupted message",
    );
    let as_rust: switchboard_domain::Session = serde_json::from_value(session).unwrap();
    assert_eq!(as_rust.interrupted.len(), 1);
}

#[tokio::test]
async fn an_approval_its_decision_and_their_events_match_the_contract() {
    let spec = Spec::load();
    let dir = tempfile::tempdir().unwrap();
    let server = example_server(dir.path());
    let api = Api::new(&spec, &server, Some(&server.admin));
    // given an agent whose handoff to a person waits for approval
    let agent = json!({
        "name": "Gated", "systemPrompt": "You are the support agent.", "model": "anthropic.claude-3-haiku-20240307-v1:0",
        "tools": ["send_message", "handoff_to_human"], "approvals": { "handoff_to_human": { "timeoutSeconds": 600 } }
    });
    let created = api.post("/tenants/acme/agents", agent.clone()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["approvals"]["handoff_to_human"]["timeoutSeconds"], 600);
    // bad policies are named at their pointers
    let mut bad = agent.clone();
    bad["approvals"] = json!({ "handoff_to_human": { "timeoutSeconds": 0 }, "end_conversation": {}, "refund": {} });
    let r = api.post("/tenants/acme/agents", bad).await;
    assert_eq!(
        r.pointers(),
        ["/approvals/end_conversation", "/approvals/handoff_to_human/timeoutSeconds", "/approvals/refund"],
        "{}",
        r.body
    );
    // when its turn asks for the handoff, it pauses; the approval is listed as the contract says
    let id = created.str("/agentId");
    let invoke = json!({ "conversationId": "c-gated", "message": "a human please" });
    let r = api.post(&format!("/tenants/acme/agents/{id}/invoke"), invoke).await;
    assert_eq!((r.status, r.body["status"].as_str()), (StatusCode::OK, Some("awaiting_approval")), "{}", r.body);
    let listed = api.get("/tenants/acme/approvals").await;
    let approval = listed.body["approvals"][0].clone();
    assert_eq!((approval["tool"].as_str(), approval["status"].as_str()), (Some("handoff_to_human"), Some("pending")));
    let path = format!("/tenants/acme/approvals/{}", approval["approvalId"].as_str().unwrap());
    assert_eq!(api.get(&path).await.body, approval);
    // edited arguments must meet the tool's schema; a denial needs a reason; unknown ids are 404
    let r = api.post(&format!("{path}/approve"), json!({ "arguments": { "reason": 7 } })).await;
    assert_eq!((r.status, r.pointers()), (StatusCode::BAD_REQUEST, vec!["/arguments/reason".to_owned()]), "{}", r.body);
    let r = api.post(&format!("{path}/deny"), json!({ "reason": "" })).await;
    assert_eq!(r.pointers(), ["/reason"], "{}", r.body);
    let r = api.post(&format!("{path}/deny"), json!({})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    let r = api.post("/tenants/acme/approvals/01JD000000000000000000000Z/approve", json!({})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    // approved with a reason of the approver's: the turn resumes, hands off, and says so
    let arguments = json!({ "reason": "approved: a person takes it from here", "priority": "high" });
    let r = api.post(&format!("{path}/approve"), json!({ "arguments": arguments })).await;
    assert_eq!(
        (r.status, r.body["status"].as_str(), r.body["decidedBy"].as_str()),
        (StatusCode::OK, Some("approved"), Some("admin"))
    );
    let streamed = api.stream("/tenants/acme/events/stream?after=0", &[], 3).await;
    let kinds: Vec<&str> = streamed.iter().map(|(_, e)| e["detailType"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["approval.requested", "approval.resolved", "session.handoff.human"]);
    let events = published(&api, "acme").await;
    assert_eq!(events.len(), 3);
    let record = api.get(&format!("/tenants/acme/executions/{}", approval["executionId"].as_str().unwrap())).await;
    assert_eq!(record.body["status"], "handed_off", "{}", record.body);
    assert_eq!(record.body["approvals"][0]["editedArguments"], arguments);
    // spent: nothing waits any more, and a second decision finds nothing to decide
    assert_eq!(api.get("/tenants/acme/approvals").await.body["approvals"], json!([]));
    assert_eq!(api.get(&path).await.status, StatusCode::NOT_FOUND);
    let r = api.post(&format!("{path}/deny"), json!({ "reason": "changed my mind" })).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);

    // a second gated turn, cancelled by the operator: its call never runs, a person gets it
    let invoke = json!({ "conversationId": "c-cancel", "message": "a human please" });
    let r = api.post(&format!("/tenants/acme/agents/{id}/invoke"), invoke).await;
    assert_eq!(r.body["status"], "awaiting_approval", "{}", r.body);
    let (execution, session) = (r.str("/executionId"), r.str("/sessionId"));
    let cancel = format!("/tenants/acme/sessions/{session}/cancel");
    assert_eq!(api.post(&cancel, json!({ "reason": " " })).await.pointers(), ["/reason"]);
    let r = api.post(&cancel, json!({ "reason": "we take it from here" })).await;
    assert_eq!((r.status, r.str("/status")), (StatusCode::ACCEPTED, "cancelling".into()), "{}", r.body);
    assert_eq!((r.str("/approval/status"), r.str("/approval/decidedBy")), ("cancelled".into(), "admin".into()));
    let streamed = api.stream("/tenants/acme/events/stream?after=0", &[], 6).await;
    let kinds: Vec<&str> = streamed[3..].iter().map(|(_, e)| e["detailType"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["approval.requested", "approval.resolved", "session.handoff.human"]);
    assert_eq!(streamed[4].1["detail"]["status"], "cancelled");
    let record = api.get(&format!("/tenants/acme/executions/{execution}")).await;
    assert_eq!((record.str("/status"), record.str("/approvals/0/status")), ("handed_off".into(), "cancelled".into()));
    let calls = record.body["toolCalls"].as_array().unwrap();
    let gated = calls.iter().find(|c| c["name"] == "handoff_to_human").unwrap();
    assert_eq!((&gated["isError"], &gated["output"]["approval"]), (&json!(true), &json!("cancelled")), "{gated}");
    let handed = api.get(&format!("/tenants/acme/sessions/{session}")).await;
    assert_eq!(handed.str("/status"), "handed_off");
    assert!(handed.str("/handoffReason").contains("we take it from here"), "{}", handed.body);
    // a human owns it now: there is no agent's turn to cancel
    assert_eq!(api.post(&cancel, json!({ "reason": "again" })).await.status, StatusCode::CONFLICT);
    // an agent's session with no paused turn goes to a human at once
    let invoke = json!({ "conversationId": "c-cancel-2", "message": "hello" });
    let r = api.post(&format!("/tenants/acme/agents/{id}/invoke"), invoke).await;
    assert_eq!(r.body["status"], "success", "{}", r.body);
    let cancel = format!("/tenants/acme/sessions/{}/cancel", r.str("/sessionId"));
    let r = api.post(&cancel, json!({ "reason": "a person takes over" })).await;
    assert_eq!((r.status, r.str("/status")), (StatusCode::OK, "handed_off".into()), "{}", r.body);
    let unknown = "/tenants/acme/sessions/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel";
    assert_eq!(api.post(unknown, json!({ "reason": "x" })).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn flow_requests_failures_and_rate_limits_match_their_contracts() {
    let spec = Spec::load();
    let dir = tempfile::tempdir().unwrap();
    // a scripted model (test double) that starts a flow and refuses everything else
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({ "description": "contract test double", "rules": [
            { "when": { "userText": { "contains": "returns flow" } },
              "then": { "toolCalls": [ { "name": "trigger_flow", "input": { "flowId": "returns", "input": { "orderId": "1234" } } } ] } },
            { "when": { "afterTool": "trigger_flow" }, "then": { "text": "I have started your return." } }
        ] })
        .to_string(),
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with_script(&data, &script, &["--rate-limit", "20"]);
    let key = create_tenant(&server, "flows");
    let api = Api::new(&spec, &server, Some(&key));

    let agent = api
        .post(
            "/tenants/flows/agents",
            json!({
                "name": "Flows", "systemPrompt": "You start flows.", "model": "contract-model",
                "tools": ["send_message", "trigger_flow"]
            }),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let agent_id = agent.str("/agentId");
    let trigger = api
        .post(
            "/tenants/flows/triggers",
            json!({ "name": "everything", "agentId": agent_id, "eventType": "message.new" }),
        )
        .await;
    assert_eq!(trigger.status, 201, "{}", trigger.body);

    let r = deliver(&api, envelope("f-1", "flows", "c-flow", "Please start the returns flow")).await;
    assert_eq!(r.str("/execution/status"), "success");
    assert_eq!(r.body["execution"]["actions"][0], json!({ "type": "trigger_flow", "flowId": "returns" }));
    let r = deliver(&api, envelope("f-2", "flows", "c-fail", "Something the script has no rule for")).await;
    assert_eq!((r.str("/execution/status"), r.str("/execution/error/kind")), ("failed".into(), "model".into()));
    let failed = r.str("/execution/executionId");
    assert_eq!(api.get(&format!("/tenants/flows/executions/{failed}")).await.status, 200);

    let events = published(&api, "flows").await;
    // the failed turn's customer went to a human (the agent's default `onFailure`)
    let kinds_now = ["execution.failed", "flow.trigger.requested", "session.handoff.human"];
    assert_eq!(kinds(&events), kinds_now.map(String::from).into());
    let failure = events.iter().find(|(_, e)| e["detailType"] == "execution.failed").unwrap();
    assert_eq!(failure.1["detail"]["executionId"], failed.as_str());
    assert_eq!(failure.1["detail"]["status"], "failed");

    // tenant limits: one invocation a minute (two ran already this minute, or at most one will
    // in the next), so within three messages one is refused, recorded and announced
    let admin = Api::new(&spec, &server, Some(&server.admin));
    let r = admin
        .call(
            Method::PATCH,
            "/tenants/flows",
            Body::Json(
                json!({ "limits": { "invocationsPerMinute": 1, "onLimit": { "action": "message", "text": "Busy." } } }),
            ),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut refused = None;
    for n in 3..6 {
        let r = deliver(&api, envelope(&format!("f-{n}"), "flows", "c-limit", "Please start the returns flow")).await;
        if r.str("/outcome") == "rate_limited" {
            refused = Some(r);
            break;
        }
    }
    let refused = refused.expect("a message over the limit is refused");
    assert_eq!(refused.str("/execution/status"), "rate_limited");
    let invoke = format!("/tenants/flows/agents/{agent_id}/invoke");
    let mut limited = None;
    for n in 0..3 {
        let r = api.post(&invoke, json!({ "conversationId": format!("c-inv{n}") })).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(r);
            break;
        }
    }
    assert!(limited.expect("an invoke over the limit is refused").headers.contains_key("retry-after"));
    let events = published(&api, "flows").await;
    assert!(kinds(&events).contains("tenant.limit.reached"), "{:?}", kinds(&events));

    // a tenant key sees only its own tenant (another tenant's paths are not counted toward its
    // limit); past the rate limit on its own tenant, 429 with Retry-After
    assert_eq!(api.get("/tenants/acme/agents").await.status, 404);
    let mut limited = None;
    for _ in 0..25 {
        let r = api.get("/tenants/flows/agents").await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status, 200);
    }
    let limited = limited.expect("the rate limit answers 429");
    assert!(limited.headers.contains_key("retry-after"));
}

#[tokio::test]
async fn multi_agent_records_and_handoff_priorities_match_their_contracts() {
    let spec = Spec::load();
    let dir = tempfile::tempdir().unwrap();
    // a scripted model (test double) driving a stepped agent with a skill, a supervisor with a
    // sub-agent, and a router whose pick is invalid (so its default takes over)
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({ "description": "contract test double", "rules": [
            { "when": { "afterTool": "transition_to_help" }, "then": { "text": "Moved on." } },
            { "when": { "systemContains": "Current step: Greet" }, "then": { "toolCalls": [
                { "name": "load_skill", "input": { "name": "returns" } },
                { "name": "transition_to_help", "input": { "reason": "asked about returns" } } ] } },
            { "when": { "systemContains": "Working for a supervisor" }, "then": { "text": "Order 77 ships Monday." } },
            { "when": { "afterTool": "ask_helper" }, "then": { "text": "Boss says: {{toolResult}}" } },
            { "when": { "systemContains": "You are the boss" }, "then": { "toolCalls": [
                { "name": "ask_helper", "input": { "task": "When does order 77 ship?", "context": { "order": 77 } } } ] } },
            { "when": { "systemContains": "Agents you can route to" }, "then": { "toolCalls": [
                { "name": "choose_agent", "input": { "agentId": "01JD0000NKN0WN0AGENT000009" } } ] } },
            { "when": { "systemContains": "What your agents answered" }, "then": { "text": "All in one: Monday." } },
            { "when": { "systemContains": "Agents you can ask" }, "then": { "toolCalls": [
                { "name": "choose_agents", "input": { "agentIds": ["01JD0000NKN0WN0AGENT000009"] } } ] } }
        ] })
        .to_string(),
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with_script(&data, &script, &[]);
    let key = create_tenant(&server, "team");
    let api = Api::new(&spec, &server, Some(&key));
    let create = |kind: &'static str, body: Value| {
        let api = &api;
        async move {
            let r = api.post(&format!("/tenants/team/{kind}"), body).await;
            assert_eq!(r.status, 201, "{kind}: {}", r.body);
            r
        }
    };
    let skill = create(
        "skills",
        json!({ "name": "returns", "description": "How returns work", "prompt": "Returns are free for 30 days." }),
    )
    .await
    .str("/skillId");
    let desk = create(
        "agents",
        json!({
            "name": "Desk", "systemPrompt": "You run the desk.", "model": "m", "tools": ["send_message"],
            "skills": [skill],
            "steps": [
                { "stepId": "greet", "name": "Greet", "systemPrompt": "Greet.", "tools": ["send_message"],
                  "transitionTools": ["help"], "isInitial": true },
                { "stepId": "help", "name": "Help", "systemPrompt": "Help.", "isFinal": true }
            ]
        }),
    )
    .await
    .str("/agentId");
    let helper = create(
        "agents",
        json!({ "name": "Helper", "description": "Knows shipping dates.",
                                          "systemPrompt": "You know shipping.", "model": "m" }),
    )
    .await
    .str("/agentId");
    let boss = create(
        "agents",
        json!({ "name": "Boss", "type": "supervisor", "systemPrompt": "You are the boss.",
                                        "model": "m", "tools": ["send_message"], "subAgents": [helper] }),
    )
    .await
    .str("/agentId");
    let router = create(
        "agents",
        json!({ "name": "Front", "type": "router", "systemPrompt": "Route well.",
                                          "model": "m", "subAgents": [desk, boss], "defaultAgentId": desk }),
    )
    .await;
    assert_eq!(router.body["defaultAgentId"], json!(desk));
    let router = router.str("/agentId");
    let fan = create(
        "agents",
        json!({ "name": "Asks around", "type": "router", "systemPrompt": "Ask your agents.", "model": "m",
                "subAgents": [desk, helper], "defaultAgentId": helper, "fanOut": { "maxAgents": 2 } }),
    )
    .await;
    assert_eq!(fan.body["fanOut"], json!({ "maxAgents": 2, "combine": "synthesize" }));
    let fan = fan.str("/agentId");
    for (conversation, agent) in [("c-steps", &desk), ("c-boss", &boss), ("c-route", &router), ("c-fan", &fan)] {
        create(
            "triggers",
            json!({ "name": conversation, "agentId": agent, "eventType": "message.new",
            "conditions": { "all": [ { "field": "conversationId", "operator": "eq", "value": conversation } ] } }),
        )
        .await;
    }
    // a router needs a default that is one of its candidates
    let bad = api
        .post(
            "/tenants/team/agents",
            json!({ "name": "R", "type": "router", "systemPrompt": "p", "model": "m",
                                              "subAgents": [desk], "defaultAgentId": boss }),
        )
        .await;
    assert_eq!(bad.pointers(), ["/defaultAgentId"]);

    // steps and skills: the session shows the current step and the loaded skill
    let r = deliver(&api, envelope("p-1", "team", "c-steps", "How do returns work?")).await;
    assert_eq!(r.str("/execution/status"), "success", "{}", r.body);
    let session_id = r.str("/execution/sessionId");
    let session = api.get(&format!("/tenants/team/sessions/{session_id}")).await;
    assert_eq!((session.str("/currentStep"), session.body["loadedSkills"].clone()), ("help".into(), json!([skill])));

    // supervisor: the execution carries the sub-agent's run as a child
    let r = deliver(&api, envelope("p-2", "team", "c-boss", "When does my order ship?")).await;
    let execution = api.get(&format!("/tenants/team/executions/{}", r.str("/execution/executionId"))).await;
    assert_eq!(execution.status, 200);
    assert_eq!(execution.body["children"][0]["agentId"], json!(helper));
    assert_eq!(execution.str("/children/0/result"), "Order 77 ships Monday.");

    // router: an invalid pick falls back to the default agent, which answers in its own session
    let r = deliver(&api, envelope("p-3", "team", "c-route", "Hello")).await;
    assert_eq!(r.str("/execution/status"), "handed_off");
    let sessions = api.get("/tenants/team/conversations/c-route/sessions").await;
    assert_eq!(sessions.status, 200);

    // a router's fan-out: its picks' runs are children, and the router replies from their answers
    let r = deliver(&api, envelope("p-4", "team", "c-fan", "When does it ship?")).await;
    assert_eq!(r.str("/execution/status"), "success", "{}", r.body);
    let execution = api.get(&format!("/tenants/team/executions/{}", r.str("/execution/executionId"))).await;
    assert_eq!(execution.body["children"][0]["agentId"], json!(helper), "the default, after an invalid pick");
    assert_eq!(execution.str("/actions/0/text"), "All in one: Monday.");
    let standard_fan = api
        .post(
            "/tenants/team/agents",
            json!({ "name": "S", "systemPrompt": "p", "model": "m", "fanOut": { "maxAgents": 2 } }),
        )
        .await;
    assert_eq!(standard_fan.pointers(), ["/fanOut"]);

    // human handoff with a priority; a priority for an agent target is refused with its pointer
    let handoff = format!("/tenants/team/sessions/{session_id}/handoff");
    let wrong = api
        .post(&handoff, json!({ "targetType": "agent", "targetAgentId": boss, "reason": "r", "priority": "high" }))
        .await;
    assert_eq!(wrong.pointers(), ["/priority"]);
    let done =
        api.post(&handoff, json!({ "targetType": "human", "reason": "needs a person", "priority": "urgent" })).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let events = published(&api, "team").await;
    let human = events.iter().find(|(_, e)| e["detailType"] == "session.handoff.human").unwrap();
    assert_eq!(human.1["detail"]["priority"], "urgent");
}
