//! The console push on AWS: tickets from the internal API, the WebSocket API's `$connect` as
//! API Gateway invokes the console-push function, and the bus's session events posted to the
//! tenant's connections through a local fake of API Gateway's management endpoint
//! (`POST /<stage>/@connections/<id>`), with the tables in the moto emulator.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_aws::{AwsClients, AwsSettings, ConsolePush, DynamoStore, ManagementApi};
use switchboard_domain::TenantId;
use switchboard_engine::{Model, ModelError, ModelRequest, ModelResponse};
use switchboard_lambda::{FunctionEnv, Wiring, api, push};
use switchboard_testkit::ManualClock;
use switchboard_testkit::aws as common;
use switchboard_webhooks::WebhookPolicy;
use tower::ServiceExt;

/// What the fake management endpoint was sent, per connection.
#[derive(Debug, Default)]
struct Posted {
    bodies: HashMap<String, Vec<Value>>,
    unsigned: usize,
}

/// API Gateway's management endpoint for stage `prod`: connections in `gone` answer 410, in
/// `broken` 500, the others 200 (each body kept, if the request is signed for `execute-api`).
struct FakeManagement {
    endpoint: String,
    posted: Arc<Mutex<Posted>>,
}

impl FakeManagement {
    async fn start(gone: &[&str], broken: &[&str]) -> Self {
        use axum::extract::{Path, State};
        use axum::http::{HeaderMap, StatusCode};

        type Shared = (Arc<Mutex<Posted>>, Arc<HashSet<String>>, Arc<HashSet<String>>);
        async fn post(
            State((posted, gone, broken)): State<Shared>,
            Path(id): Path<String>,
            headers: HeaderMap,
            body: axum::body::Bytes,
        ) -> StatusCode {
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
            let mut p = posted.lock().unwrap();
            if !auth.starts_with("AWS4-HMAC-SHA256 Credential=") || !auth.contains("/execute-api/aws4_request") {
                p.unsigned += 1;
                return StatusCode::FORBIDDEN;
            }
            if gone.contains(&id) {
                return StatusCode::GONE;
            }
            if broken.contains(&id) {
                return StatusCode::INTERNAL_SERVER_ERROR;
            }
            p.bodies.entry(id).or_default().push(serde_json::from_slice(&body).unwrap());
            StatusCode::OK
        }
        let posted = Arc::new(Mutex::new(Posted::default()));
        let set = |ids: &[&str]| Arc::new(ids.iter().map(|s| (*s).to_owned()).collect::<HashSet<_>>());
        let app = axum::Router::new().route("/prod/@connections/{id}", axum::routing::post(post)).with_state((
            posted.clone(),
            set(gone),
            set(broken),
        ));
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let endpoint = format!("http://{}/prod", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { endpoint, posted }
    }

    fn bodies(&self, connection: &str) -> Vec<Value> {
        self.posted.lock().unwrap().bodies.get(connection).cloned().unwrap_or_default()
    }
}

/// No model: nothing here runs an agent.
struct NoModel;

#[async_trait]
impl Model for NoModel {
    async fn converse(&self, _: &ModelRequest) -> Result<ModelResponse, ModelError> {
        Err(ModelError::Rejected("no model in these tests".into()))
    }
}

struct World {
    wiring: Wiring,
    push: ConsolePush,
    clock: Arc<ManualClock>,
    management: FakeManagement,
}

async fn world(gone: &[&str], broken: &[&str]) -> World {
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let names = common::provision(&sdk).await;
    let env = FunctionEnv {
        names: names.clone(),
        archive_bucket: None,
        conversations_url: None,
        default_model: None,
        s3_path_style: true,
        model_secret: None,
        model_config: None,
    };
    let wiring = Wiring::with(
        AwsClients::new(&sdk),
        &env,
        Arc::new(switchboard_lambda::wiring::NoConversations),
        Arc::new(NoModel),
        WebhookPolicy::default(),
    );
    for (t, name) in [("acme", "Acme"), ("other", "Other")] {
        wiring.store.create_tenant(&t.parse().unwrap(), name).await.unwrap();
    }
    let clock = ManualClock::new();
    let store = Arc::new(DynamoStore::from_config(&sdk, names, clock.clone()));
    let management = FakeManagement::start(gone, broken).await;
    let push = ConsolePush { store, management: ManagementApi::new(&sdk, &management.endpoint).unwrap() };
    World { wiring, push, clock, management }
}

fn tenant(t: &str) -> TenantId {
    t.parse().unwrap()
}

/// `$connect` as API Gateway sends it to the function.
fn connect_event(connection: &str, query: Value) -> Value {
    json!({
        "headers": { "Host": "abc123.execute-api.eu-west-1.amazonaws.com" },
        "queryStringParameters": query,
        "requestContext": {
            "routeKey": "$connect", "eventType": "CONNECT", "connectionId": connection,
            "stage": "prod", "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
            "identity": { "userArn": "arn:aws:iam::123456789012:user/ann" }
        },
        "isBase64Encoded": false
    })
}

/// A session event as the Switchboard bus delivers it to the function's rule.
fn bus_event(tenant: &str, detail_type: &str, id: &str) -> Value {
    json!({
        "version": "0", "id": "6f1c0d5e-0000-4000-8000-000000000001", "detail-type": detail_type,
        "source": "switchboard", "account": "123456789012", "time": "2026-11-26T09:00:00Z",
        "region": "eu-west-1", "resources": [],
        "detail": { "id": id, "tenantId": tenant, "sessionId": "01JDQ8ZJ5V3V7Y9K2M4N6P8R0T", "reason": "asked for a person" }
    })
}

async fn connect(w: &World, connection: &str, query: Value) -> u16 {
    let answer = push::handle(&w.push, connect_event(connection, query)).await.unwrap();
    u16::try_from(answer["statusCode"].as_u64().unwrap()).unwrap()
}

async fn ticket(w: &World, t: &str) -> String {
    w.push.store.issue_push_ticket(&tenant(t)).await.unwrap().0
}

#[tokio::test]
async fn the_internal_api_issues_a_ticket_for_the_tenant_in_its_path_and_none_without_a_push_api() {
    let w = world(&[], &[]).await;
    let call = |state: switchboard_api::ApiState, uri: &'static str| async move {
        let request = lambda_http::http::Request::builder()
            .method("POST")
            .uri(uri)
            .header("content-type", "application/json")
            .body(lambda_http::Body::Text("{}".into()))
            .unwrap();
        let response = api::app(state).oneshot(request).await.unwrap();
        let (status, headers) = (response.status().as_u16(), response.headers().clone());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, headers, serde_json::from_slice::<Value>(&bytes).unwrap())
    };
    // a stack without the WebSocket API: 404, naming the stream to read instead
    let (status, _, body) = call(api::state(&w.wiring, None), "/tenants/acme/events/push").await;
    assert_eq!(status, 404, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("/tenants/acme/events/stream"), "{body}");
    // with it: a ticket for acme, not cached, that opens a connection for acme only
    let url = "wss://abc123.execute-api.eu-west-1.amazonaws.com/prod";
    let state = || {
        let mut s = api::state(&w.wiring, None);
        s.push = api::push_tickets(&w.wiring, |name| (name == "SWITCHBOARD_PUSH_URL").then(|| url.to_owned()));
        s
    };
    let (status, headers, body) = call(state(), "/tenants/acme/events/push").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!((body["url"].as_str(), body["tenantId"].as_str()), (Some(url), Some("acme")));
    let issued = body["ticket"].as_str().unwrap().to_owned();
    assert_eq!(issued.len(), 64, "32 random bytes in hex");
    // (the ticket was stored by the wiring's store, read here through the push function's)
    assert_eq!(connect(&w, "c-other", json!({ "tenant": "other", "ticket": issued })).await, 403);
    assert_eq!(connect(&w, "c-acme", json!({ "tenant": "acme", "ticket": issued })).await, 200);
    assert_eq!(w.push.store.push_connections(&tenant("acme")).await.unwrap(), ["c-acme"]);
    assert!(w.push.store.push_connections(&tenant("other")).await.unwrap().is_empty());
    // an unknown tenant gets no ticket
    let (status, _, _) = call(state(), "/tenants/nobody/events/push").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_ticket_opens_one_connection_for_its_tenant_within_a_minute_and_nothing_else() {
    let w = world(&[], &[]).await;
    // missing or malformed queries are refused before any lookup
    assert_eq!(connect(&w, "c-0", Value::Null).await, 403);
    assert_eq!(connect(&w, "c-0", json!({ "tenant": "acme" })).await, 403);
    assert_eq!(connect(&w, "c-0", json!({ "tenant": "not a tenant!", "ticket": "x" })).await, 403);
    assert_eq!(connect(&w, "c-0", json!({ "tenant": "acme", "ticket": "x".repeat(129) })).await, 403);
    assert_eq!(connect(&w, "c-0", json!({ "tenant": "acme", "ticket": "guessed" })).await, 403);
    // another tenant's ticket opens nothing, and does not burn the ticket
    let t = ticket(&w, "acme").await;
    assert_eq!(connect(&w, "c-1", json!({ "tenant": "other", "ticket": t })).await, 403);
    assert_eq!(connect(&w, "c-1", json!({ "tenant": "acme", "ticket": t })).await, 200);
    // used once only
    assert_eq!(connect(&w, "c-2", json!({ "tenant": "acme", "ticket": t })).await, 403);
    // a minute old: out of date
    let late = ticket(&w, "acme").await;
    w.clock.advance(chrono::Duration::seconds(61));
    assert_eq!(connect(&w, "c-3", json!({ "tenant": "acme", "ticket": late })).await, 403);
    assert_eq!(w.push.store.push_connections(&tenant("acme")).await.unwrap(), ["c-1"]);
    // a connection is kept as long as API Gateway keeps it open (two hours), no longer
    w.clock.advance(chrono::Duration::minutes(130));
    assert!(w.push.store.push_connections(&tenant("acme")).await.unwrap().is_empty());
    // $disconnect is accepted; a message a console sends is not for this API
    let mut bye = connect_event("c-1", Value::Null);
    bye["requestContext"]["eventType"] = json!("DISCONNECT");
    assert_eq!(push::handle(&w.push, bye).await.unwrap()["statusCode"], 200);
    let mut said = connect_event("c-1", Value::Null);
    said["requestContext"]["eventType"] = json!("MESSAGE");
    assert_eq!(push::handle(&w.push, said).await.unwrap()["statusCode"], 400);
}

#[tokio::test]
async fn session_events_reach_their_tenants_consoles_only_closed_ones_are_forgotten_and_failures_lose_nothing() {
    let w = world(&["acme-closed"], &["acme-broken"]).await;
    for (t, connection) in [("acme", "acme-1"), ("acme", "acme-closed"), ("acme", "acme-broken"), ("other", "other-1")]
    {
        let ticket = ticket(&w, t).await;
        assert_eq!(connect(&w, connection, json!({ "tenant": t, "ticket": ticket })).await, 200);
    }
    // the event is in the log, as a commit writes it (the stream's relay publishes it)
    let event: switchboard_domain::OutboundEvent = serde_json::from_value(json!({
        "id": "evt-handoff-1", "detailType": "session.handoff.human", "tenantId": "acme",
        "detail": { "sessionId": "01JDQ8ZJ5V3V7Y9K2M4N6P8R0T", "reason": "asked for a person" }
    }))
    .unwrap();
    assert!(w.wiring.store.log_event(&event).await.unwrap());
    // when the bus delivers it to the function
    let report = push::handle(&w.push, bus_event("acme", "session.handoff.human", "evt-handoff-1")).await.unwrap();
    // then acme's open console has it, the other tenant's has nothing
    assert_eq!(report, json!({ "sent": 1, "gone": 1, "failed": 1 }));
    let got = w.management.bodies("acme-1");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0]["type"].as_str(), got[0]["detailType"].as_str(), got[0]["id"].as_str(), got[0]["tenantId"].as_str()),
        (Some("event"), Some("session.handoff.human"), Some("evt-handoff-1"), Some("acme"))
    );
    assert!(w.management.bodies("other-1").is_empty());
    assert_eq!(w.management.posted.lock().unwrap().unsigned, 0, "every post is signed");
    // the closed connection is forgotten; the one that failed is kept for the next event
    let mut left = w.push.store.push_connections(&tenant("acme")).await.unwrap();
    left.sort();
    assert_eq!(left, ["acme-1", "acme-broken"]);
    // and the event the broken connection missed is in acme's event log, where a console reads it
    let (status, log) = {
        let request =
            lambda_http::http::Request::builder().uri("/tenants/acme/events").body(lambda_http::Body::Empty).unwrap();
        let response = api::app(api::state(&w.wiring, None)).oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice::<Value>(&bytes).unwrap())
    };
    assert_eq!(status, 200);
    let ids: Vec<_> = log["events"].as_array().unwrap().iter().map(|e| e["event"]["id"].clone()).collect();
    assert_eq!(ids, [json!("evt-handoff-1")]);
    // the other tenant's event goes to its console alone
    let report = push::handle(&w.push, bus_event("other", "session.ended", "evt-end-1")).await.unwrap();
    assert_eq!(report, json!({ "sent": 1, "gone": 0, "failed": 0 }));
    assert_eq!(w.management.bodies("acme-1").len(), 1);
    assert_eq!(w.management.bodies("other-1")[0]["detailType"], "session.ended");
}

#[tokio::test]
async fn an_event_without_a_tenant_is_dropped_and_one_that_is_neither_route_nor_event_fails() {
    let w = world(&[], &[]).await;
    let mut event = bus_event("acme", "session.ended", "evt-1");
    event["detail"]["tenantId"] = json!("../acme");
    assert_eq!(push::handle(&w.push, event).await.unwrap(), json!({ "sent": 0, "gone": 0, "failed": 0 }));
    let err = push::handle(&w.push, json!({ "hello": "world" })).await.unwrap_err();
    assert!(err.to_string().contains("not a WebSocket route or a bus event"), "{err}");
}
