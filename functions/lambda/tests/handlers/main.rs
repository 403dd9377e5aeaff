//! The Lambda handlers driven with real event JSON (`tests/fixtures/`) through
//! `LambdaEvent::new(payload, Context::default())`, on the AWS adapters against the moto
//! emulator, a fake Bedrock Converse server and a fake Conversations Service (the harness in
//! `switchboard_testkit::aws`). Ends with one message end to end:
//! `PutEvents` → rule → SQS → router → work queue → executor → reply, DynamoDB, S3 archive and
//! a handoff event on the bus, with the AWS requests of router and executor counted. The
//! executor's faults are driven through a real FIFO queue with the test acting as the Lambda
//! poller (a poison body until the dead-letter queue; Bedrock throttling, then recovery), and
//! its webhook tools call a loopback receiver, signed with a secret read from Secrets Manager, and
//! its MCP tools a server on the official Python SDK (`mcp`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use switchboard_testkit::aws as common;
use switchboard_testkit::by;

use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use common::{FakeBedrock, FakeConversations, Reply, RequestCounter};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use switchboard_aws::{
    AwsClients, AwsNames, AwsSettings, BedrockModel, ConversationsApi, ConversationsLimits, EventBridgeBus, S3Archive,
};
use switchboard_domain::hook::HookOutcome;
use switchboard_domain::{Agent, EventType, ExecutionStatus, SessionStatus, TenantId, Tool, Trigger};
use switchboard_engine::{
    ConfigAdmin, ConfigRecord, ConfigService, ConfigStore, ExecutionLog, Model, ModelError, ModelRequest,
    ModelResponse, RouteOutcome, SessionStore,
};
use switchboard_lambda::executor::ItemResult;
use switchboard_lambda::{FunctionEnv, Wiring, api, archiver, event_router, executor, relay};
use switchboard_models::{RetryPolicy, Retrying};
use switchboard_testkit::webhooks::WebhookReceiver;
use switchboard_webhooks::WebhookPolicy;
use tower::ServiceExt;

const AGENT: &str = "01JDQ8ZJ5V3V7Y9K2M4N6P8R0T";

mod approvals;
mod bursts;
mod faults;
mod idle;
mod mcp;
mod standin;
mod triggers;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn event<T: serde::de::DeserializeOwned>(payload: Value) -> LambdaEvent<T> {
    LambdaEvent::new(serde_json::from_value(payload).unwrap(), Context::default())
}

/// Panics when the conversation mentions `PANIC`; otherwise asks the inner model.
struct PanicOnMarker(Arc<dyn Model>);

#[async_trait]
impl Model for PanicOnMarker {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        if serde_json::to_string(&request.messages).unwrap().contains("PANIC") {
            panic!("scripted panic in the model adapter");
        }
        self.0.converse(request).await
    }
}

/// Every client counting its requests into `counter`.
fn counted_clients(
    sdk: &aws_config::SdkConfig,
    bedrock: aws_sdk_bedrockruntime::Client,
    counter: &RequestCounter,
) -> AwsClients {
    AwsClients {
        dynamodb: aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(sdk).interceptor(counter.clone()).build(),
        ),
        sqs: aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(sdk).interceptor(counter.clone()).build(),
        ),
        bedrock,
        secretsmanager: aws_sdk_secretsmanager::Client::from_conf(
            aws_sdk_secretsmanager::config::Builder::from(sdk).interceptor(counter.clone()).build(),
        ),
    }
}

struct World {
    sdk: aws_config::SdkConfig,
    names: AwsNames,
    /// The work queue's dead-letter queue, when `Options::max_receives` asked for one.
    dead_letters: Option<String>,
    /// The bucket of large recorded content, when `Options::large_content` asked for one.
    pieces: Option<S3Archive>,
    wiring: Wiring,
    bedrock: FakeBedrock,
    conversations: FakeConversations,
    counter: RequestCounter,
}

/// How a test's world differs from the deployed wiring (the default: not at all).
#[derive(Clone, Copy, Default)]
struct Options {
    /// The model panics when the conversation mentions `PANIC`.
    panic_on_marker: bool,
    /// Where webhook tools may connect (loopback receivers need `LOCAL_WEBHOOKS`).
    webhooks: WebhookPolicy,
    /// Model-call retries (the deployed default waits up to seconds between attempts).
    model_retry: RetryPolicy,
    /// A redrive policy on the work queue: the dead-letter queue receives an item after this
    /// many receives.
    max_receives: Option<u32>,
    /// A bucket for recorded content too large for an item, as the deployed executor has.
    large_content: bool,
}

/// Webhooks to a receiver on 127.0.0.1 over plain HTTP: tests only (see `Wiring::with`).
const LOCAL_WEBHOOKS: WebhookPolicy = WebhookPolicy { allow_http: true, allow_private: true };

/// Millisecond backoff between model attempts, so that retry tests take no noticeable time.
fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(4),
        ..RetryPolicy::default()
    }
}

/// Fresh tables and queues, tenant `t-1` with the support agent and a trigger on "help".
async fn world(script: Vec<Reply>, panic_on_marker: bool) -> World {
    world_with(script, Options { panic_on_marker, ..Options::default() }).await
}

async fn world_with(script: Vec<Reply>, options: Options) -> World {
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let mut names = common::provision(&sdk).await;
    let dead_letters = match options.max_receives {
        Some(max) => {
            let (work, dlq) = common::fifo_queue_with_dead_letters(&sdk, max).await;
            names.work_queue_url = work;
            Some(dlq)
        }
        None => None,
    };
    let counter = RequestCounter::default();
    let bedrock = FakeBedrock::start(script).await;
    let conversations = FakeConversations::start(vec![]).await;
    let env = FunctionEnv {
        names: names.clone(),
        archive_bucket: None,
        conversations_url: Some(conversations.base_url.clone()),
        default_model: Some("anthropic.claude-3-haiku-20240307-v1:0".into()),
        s3_path_style: true,
        model_secret: None,
        model_config: None,
    };
    let clients = counted_clients(&sdk, bedrock.client(Some(counter.clone())).await, &counter);
    let adapter: Arc<dyn Model> = Arc::new(BedrockModel::new(clients.bedrock.clone()));
    let model: Arc<dyn Model> = Arc::new(Retrying::new(adapter, options.model_retry));
    let model: Arc<dyn Model> = if options.panic_on_marker { Arc::new(PanicOnMarker(model)) } else { model };
    let api = ConversationsApi::new(&sdk, conversations.base_url.clone(), ConversationsLimits::default()).unwrap();
    let pieces = match options.large_content {
        true => Some(S3Archive::new(S3Archive::client(&sdk, true), common::create_bucket(&sdk).await, "")),
        false => None,
    };
    let mut wiring = Wiring::keeping(clients, &env, Arc::new(api), model, options.webhooks, pieces.clone());
    if let Some(max) = options.max_receives {
        wiring.max_receives = max;
    }
    let tenant: TenantId = "t-1".parse().unwrap();
    wiring.store.create_tenant(&tenant, "Acme").await.unwrap();
    let agent: Agent = serde_json::from_value(json!({
        "tenantId": "t-1", "agentId": AGENT, "name": "Support", "systemPrompt": "Be brief.",
        "model": "anthropic.claude-3-haiku-20240307-v1:0", "tools": ["send_message", "handoff_to_human"],
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    put(&wiring, ConfigRecord::Agent(agent)).await;
    let trigger: Trigger = serde_json::from_value(json!({
        "tenantId": "t-1", "triggerId": "01JDQ8ZJ5V3V7Y9K2M4N6P8R1A", "name": "help", "agentId": AGENT,
        "eventType": "message.new", "priority": 10, "status": "active",
        "conditions": {"all": [{"field": "message.text", "operator": "contains", "value": "help"}]},
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    put(&wiring, ConfigRecord::Trigger(trigger)).await;
    counter.take();
    World { sdk, names, dead_letters, pieces, wiring, bedrock, conversations, counter }
}

/// Writes a record through the configuration service, as the internal API would.
async fn put(wiring: &Wiring, record: ConfigRecord) {
    ConfigService::new(wiring.store.clone(), wiring.store.clone()).upsert_all(&[record]).await.unwrap();
}

fn by_operation(requests: &[String]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for op in requests {
        match out.iter_mut().find(|(o, _)| o == op) {
            Some((_, n)) => *n += 1,
            None => out.push((op.clone(), 1)),
        }
    }
    out
}

// ---- agent-executor --------------------------------------------------------------------------------

#[tokio::test]
async fn a_batch_whose_time_is_up_runs_nothing_and_reports_every_item_for_redelivery() {
    // given an invocation whose deadline (less the margin) has already passed
    let w = world(vec![Reply::text("never sent")], false).await;
    let payload = fixture("sqs-batch-two-groups-and-poison.json");
    let mut context = Context::default();
    context.deadline =
        u64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
            + 5_000;
    // when the executor handles the batch
    let response =
        executor::handle(&w.wiring, LambdaEvent::new(serde_json::from_value(payload).unwrap(), context)).await;
    // then no item ran, and every one is reported so that SQS delivers it again
    assert_eq!(response.batch_item_failures.len(), 4);
    assert_eq!(w.bedrock.calls.load(Ordering::SeqCst), 0);
    assert_eq!(w.conversations.attempts(), 0);
}

#[tokio::test]
async fn a_panic_fails_its_item_and_the_later_items_of_its_group_while_the_other_group_succeeds() {
    // given a batch: group A = [panics, second], group B = [poison body, a good message]
    let w = world(
        vec![
            Reply::tool_use("tu-1", "send_message", json!({"text": "Your order ships tomorrow."})),
            Reply::text("Done."),
        ],
        true,
    )
    .await;
    let payload = fixture("sqs-batch-two-groups-and-poison.json");
    let ids: Vec<String> =
        payload["Records"].as_array().unwrap().iter().map(|r| r["messageId"].as_str().unwrap().to_owned()).collect();

    // when the executor handles it
    let records: SqsEvent = serde_json::from_value(payload.clone()).unwrap();
    let results = executor::run_batch(&w.wiring.executor, records.records, None, 5).await;
    let response = executor::handle(&w.wiring, event(payload)).await;

    // then A's first item failed with the panic and A's second was not run
    assert!(matches!(&results[0].1, ItemResult::Failed(why) if why.contains("panic")), "{results:?}");
    assert_eq!(results[2].1, ItemResult::Skipped);
    // and the poison body failed only itself: B's good message after it succeeded
    assert!(matches!(&results[1].1, ItemResult::Failed(why) if why.contains("not a work item")), "{results:?}");
    assert_eq!(results[3].1, ItemResult::Done);
    // and Lambda is told exactly those three
    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, vec![ids[0].as_str(), ids[1].as_str(), ids[2].as_str()]);
    // and B's reply went out once (the second handling found it recorded), A's items left no record
    let tenant: TenantId = "t-1".parse().unwrap();
    assert_eq!(w.conversations.accepted().len(), 1);
    assert_eq!(w.conversations.accepted()[0].conversation_id, "c-b");
    assert!(w.wiring.store.execution_for_source(&tenant, "evt-b1").await.unwrap().is_some());
    assert!(w.wiring.store.execution_for_source(&tenant, "evt-a1").await.unwrap().is_none());
    assert!(w.wiring.store.execution_for_source(&tenant, "evt-a2").await.unwrap().is_none());
}

// ---- event-router ------------------------------------------------------------------------------------

/// The source id of the work an EventBridge envelope's message causes (its conversation and
/// message ids, whichever event id it came under).
fn source_of(envelope: &Value) -> String {
    switchboard_engine::intake::source_id(&switchboard_domain::InboundEvent::parse(envelope).unwrap())
}

#[tokio::test]
async fn the_router_enqueues_an_eventbridge_message_and_refuses_a_malformed_one() {
    let w = world(vec![], false).await;
    // given the EventBridge envelope of a customer asking for help
    let outcome = event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    // then one work item is queued in the conversation's group, deduplicated on its message
    // (conversation and message ids) within its tenant
    assert!(matches!(outcome, RouteOutcome::Enqueued { duplicate: false, .. }), "{outcome:?}");
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let queued = common::drain_queue(&sqs, &w.names.work_queue_url).await;
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].0, "t-1:c-1");
    let tenant: TenantId = "t-1".parse().unwrap();
    assert_eq!(queued[0].1, switchboard_domain::ids::tenant_scoped_key(&tenant, "message-c-1:m-1"));
    // given an envelope without a tenant
    let mut bad = fixture("eventbridge-message-new.json");
    bad["detail"].as_object_mut().unwrap().remove("tenantId");
    let err = event_router::handle(&w.wiring.intake, event(bad)).await.unwrap_err();
    // then it is an error saying why (EventBridge retries, then dead-letters it)
    assert!(matches!(err, event_router::EventRouterError::Malformed(ref why) if why.contains("tenantId")), "{err}");
    let diagnostic = lambda_runtime::Diagnostic::from(err);
    assert_eq!(diagnostic.error_type, "MalformedEvent");
}

// ---- internal-api ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_trigger_firing_mid_conversation_gives_the_model_what_the_conversations_service_holds() {
    let w = world(vec![Reply::text("Sorry about the kettle."), Reply::text("Hello.")], false).await;
    // given a conversation with three messages before the one that fires the trigger, a human
    // operator's among them (the service has the triggering message too)
    let first = fixture("eventbridge-message-new.json");
    w.conversations.seed(
        "t-1",
        "c-1",
        &[
            ("m-a", "customer", "I bought a kettle"),
            ("m-b", "human", "Which model is it?"),
            ("m-c", "customer", "the blue one, it leaks"),
            ("m-1", "customer", "I need help with my order"),
        ],
    );
    // when the trigger fires and the executor runs the item
    event_router::handle(&w.wiring.intake, event(first.clone())).await.unwrap();
    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    // then the history was read once, and the model saw it in order, the human's message marked
    // and the triggering message not twice
    assert_eq!(w.conversations.history_reads(), 1);
    let messages = w.bedrock.requests()[0].1["messages"].clone();
    assert_eq!(
        messages,
        json!([
            { "role": "user", "content": [{ "text": "I bought a kettle" }] },
            { "role": "assistant", "content": [{ "text": "[human operator] Which model is it?" }] },
            { "role": "user", "content": [{ "text": "the blue one, it leaks" }, { "text": "I need help with my order" }] }
        ])
    );
    // given a history read that fails, on another conversation
    w.conversations.fail_history(&[400]);
    let mut second = first;
    second["id"] = json!("evt-second");
    second["detail"]["conversationId"] = json!("c-2");
    event_router::handle(&w.wiring.intake, event(second)).await.unwrap();
    let (_, response) = poll_once(&w).await.unwrap();
    // then the turn still answered, with the message alone
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(w.conversations.history_reads(), 2);
    assert_eq!(
        w.bedrock.requests()[1].1["messages"],
        json!([{ "role": "user", "content": [{ "text": "I need help with my order" }] }])
    );
    let replies: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(replies, ["Sorry about the kettle.", "Hello."]);
}

#[tokio::test]
async fn two_tenants_numbering_their_events_alike_are_both_answered() {
    let step = |text: &str| Reply::tool_use("tu-1", "send_message", json!({ "text": text }));
    let w =
        world(vec![step("Hello t-1."), Reply::text("Done."), step("Hello t-2."), Reply::text("Done.")], false).await;
    // given a second tenant with the same agent and trigger ids as the first
    let (t1, t2): (TenantId, TenantId) = ("t-1".parse().unwrap(), "t-2".parse().unwrap());
    w.wiring.store.create_tenant(&t2, "Other").await.unwrap();
    let agent = w.wiring.store.get_agent(&t1, AGENT.parse().unwrap()).await.unwrap().unwrap();
    put(&w.wiring, ConfigRecord::Agent(Agent { tenant_id: t2.clone(), ..agent })).await;
    let trigger = w.wiring.store.active_triggers(&t1, EventType::MessageNew).await.unwrap()[0].clone();
    put(&w.wiring, ConfigRecord::Trigger(Trigger { tenant_id: t2.clone(), ..trigger })).await;
    // when both send an event with the same EventBridge id, conversation and message ids, and
    // each sends its message again under a new event id (a PutEvents retried after a timeout)
    let first = fixture("eventbridge-message-new.json");
    let mut second = first.clone();
    second["detail"]["tenantId"] = json!("t-2");
    let resent = |envelope: &Value| {
        let mut again = envelope.clone();
        again["id"] = json!("evt-resent");
        again
    };
    for envelope in [first.clone(), second.clone(), first.clone(), resent(&first), resent(&second)] {
        let outcome = event_router::handle(&w.wiring.intake, event(envelope)).await.unwrap();
        assert!(matches!(outcome, RouteOutcome::Enqueued { .. }), "{outcome:?}");
    }
    // then SQS holds one item per tenant (each tenant's repeats were deduplicated), and each
    // is answered
    let mut handled = 0;
    while let Some((_, response)) = poll_once(&w).await {
        assert!(response.batch_item_failures.is_empty());
        handled += 1;
    }
    assert_eq!(handled, 2);
    let source = source_of(&first);
    // each reply went to its own tenant's conversation, under its own tenant's key
    let replies: Vec<(String, String, String)> =
        w.conversations.accepted().into_iter().map(|r| (r.tenant_id, r.conversation_id, r.text)).collect();
    let conversation = first["detail"]["conversationId"].as_str().unwrap();
    assert_eq!(
        replies,
        [("t-1", conversation, "Hello t-1."), ("t-2", conversation, "Hello t-2.")].map(|(t, c, x)| (
            t.to_owned(),
            c.to_owned(),
            x.to_owned()
        ))
    );
    for t in [&t1, &t2] {
        let record = w.wiring.store.execution_for_source(t, &source).await.unwrap().unwrap();
        assert_eq!((&record.tenant_id, record.status), (t, ExecutionStatus::Success));
    }
}

#[tokio::test]
async fn the_internal_api_answers_an_api_gateway_rest_request() {
    let w = world(vec![], false).await;
    // given an IAM-signed API Gateway proxy request for the agent (stage `prod`)
    let body = serde_json::to_string(&fixture("apigw-rest-get-agent.json")).unwrap();
    let request = lambda_http::request::from_str(&body).unwrap();
    // when the function's app serves it
    let response = api::app(api::state(&w.wiring, None)).oneshot(request).await.unwrap();
    // then the agent comes back from DynamoDB, with no API key asked for
    assert_eq!(response.status(), 200);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let agent: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(agent["agentId"], json!(AGENT));
    assert_eq!(agent["name"], json!("Support"));
}

/// The fixture's API Gateway request for `method path` (with a JSON `body`), signed by its IAM
/// user.
fn iam_request(method: &str, path: &str, body: Option<&Value>) -> lambda_http::Request {
    let mut event = fixture("apigw-rest-get-agent.json");
    event["path"] = json!(path);
    event["httpMethod"] = json!(method);
    event["pathParameters"]["proxy"] = json!(path.trim_start_matches('/'));
    event["requestContext"]["httpMethod"] = json!(method);
    event["requestContext"]["path"] = json!(format!("/prod{path}"));
    if let Some(body) = body {
        event["body"] = json!(body.to_string());
        event["headers"]["Content-Type"] = json!("application/json");
        event["multiValueHeaders"]["Content-Type"] = json!(["application/json"]);
    }
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

#[tokio::test]
async fn the_internal_api_names_the_iam_principal_on_what_it_writes() {
    let w = world(vec![], false).await;
    let user = fixture("apigw-rest-get-agent.json")["requestContext"]["identity"]["userArn"].clone();
    let call = |request| async {
        let response = api::app(api::state(&w.wiring, None)).oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice::<Value>(&bytes).unwrap())
    };
    // given a request API Gateway admitted for an IAM user: the API says who it is
    let (status, me) = call(iam_request("GET", "/tenants/t-1/me", None)).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!((&me["principal"], &me["tenantId"]), (&user, &json!("t-1")));
    // when it writes configuration
    let skill = json!({ "name": "policies", "description": "Store policies.", "prompt": "Returns within 30 days." });
    let (status, created) = call(iam_request("POST", "/tenants/t-1/skills", Some(&skill))).await;
    assert_eq!(status, 201, "{created}");
    // then the kept version names that principal, not a kind of credential
    let path = format!("/tenants/t-1/skills/{}/versions/1", created["skillId"].as_str().unwrap());
    let (status, version) = call(iam_request("GET", &path, None)).await;
    assert_eq!((status, &version["writtenBy"]), (200, &user), "{version}");
}

#[tokio::test]
async fn the_internal_api_says_that_replay_is_not_offered_here() {
    let w = world(vec![], false).await;
    // given a replay request (the Lambda has no scratch engine to run one in)
    let request = lambda_http::http::Request::builder()
        .method("POST")
        .uri("/tenants/t-1/executions/01ARZ3NDEKTSV4RRFFQ69G5FAV/replay")
        .header("content-type", "application/json")
        .body(lambda_http::Body::Text("{}".into()))
        .unwrap();
    let response = api::app(api::state(&w.wiring, None)).oneshot(request).await.unwrap();
    // then it is answered 501, pointing at where replay runs
    assert_eq!(response.status(), 501);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let problem: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("embedded profile"), "{problem}");
}

// ---- archiver ------------------------------------------------------------------------------------------

fn gunzip_lines(bytes: &[u8]) -> Vec<Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes).read_to_string(&mut text).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

async fn object(sdk: &aws_config::SdkConfig, bucket: &str, key: &str) -> Vec<u8> {
    let got = S3Archive::client(sdk, true).get_object().bucket(bucket).key(key).send().await.unwrap();
    got.body.collect().await.unwrap().into_bytes().to_vec()
}

#[tokio::test]
async fn the_archiver_writes_one_gzip_json_lines_object_per_tenant_and_day_and_a_retry_overwrites_it() {
    // given a stream batch: t-1 insert, a pointer item, t-2 insert, t-1 modify, a TTL remove
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let bucket = common::create_bucket(&sdk).await;
    let archive = S3Archive::new(S3Archive::client(&sdk, true), bucket.clone(), "executions/");
    let payload = fixture("dynamodb-stream-executions.json");
    // when the archiver handles it twice (a retried batch)
    let first = archiver::handle(&archive, event::<StreamEvent>(payload.clone())).await.unwrap();
    let second = archiver::handle(&archive, event::<StreamEvent>(payload)).await.unwrap();
    // then one object per (tenant, day), keyed by its first sequence number, the same both times
    assert_eq!(
        first.objects,
        vec![
            "executions/tenant=t-1/date=2026-11-23/111100000000000000000001.parquet".to_owned(),
            "executions/tenant=t-2/date=2026-11-23/111100000000000000000003.parquet".to_owned(),
        ]
    );
    assert_eq!(second, first);
    assert_eq!((first.archived, first.skipped), (3, 2));
    let listed = S3Archive::client(&sdk, true).list_objects_v2().bucket(&bucket).send().await.unwrap();
    assert_eq!(listed.contents().len(), 2);
    // and the t-1 object holds its insert and modify as JSON lines
    let lines = switchboard_domain::archive::read_lines(&object(&sdk, &bucket, &first.objects[0]).await).unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["eventName"], json!("INSERT"));
    assert_eq!(lines[0]["execution"]["executionId"], json!("01JDQA00000000000000000EX1"));
    assert_eq!(lines[1]["eventName"], json!("MODIFY"));
    assert_eq!(lines[1]["execution"]["tokenUsage"]["inputTokens"], json!(31));
}

#[tokio::test]
async fn the_archiver_files_recorded_content_beside_the_records_under_the_day_it_was_stored() {
    // given a stream batch holding one piece of recorded content (as the DynamoDB store writes it)
    // and one execution record
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let bucket = common::create_bucket(&sdk).await;
    let archive = S3Archive::new(S3Archive::client(&sdk, true), bucket.clone(), "executions/");
    let mut payload = fixture("dynamodb-stream-executions.json");
    let stored = chrono::DateTime::parse_from_rfc3339("2026-11-23T07:00:02Z").unwrap().timestamp();
    let expires = stored + switchboard_domain::limits::CONTENT_TTL_DAYS * 86_400;
    let sha = "ab".repeat(32);
    let message = json!({"role": "user", "content": [{"type": "text", "text": "Where is my order?"}]}).to_string();
    let content = json!({
        "eventID": "content-1", "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "Keys": { "PK": {"S": "SESSION#01JDQA0000000000000000SES1"}, "SK": {"S": format!("CONTENT#{sha}")} },
            "SequenceNumber": "111100000000000000000009", "SizeBytes": 200, "StreamViewType": "NEW_AND_OLD_IMAGES",
            "NewImage": {
                "PK": {"S": "SESSION#01JDQA0000000000000000SES1"}, "SK": {"S": format!("CONTENT#{sha}")},
                "tenantId": {"S": "t-1"}, "expiresAt": {"N": expires.to_string()}, "content": {"S": message}
            }
        }
    });
    // and one too large for an item, whose item names its object in the bucket
    let large_sha = "cd".repeat(32);
    let piece = format!("pieces/session=01JDQA0000000000000000SES1/{large_sha}.json");
    let mut large = content.clone();
    large["eventID"] = json!("content-2");
    large["dynamodb"]["SequenceNumber"] = json!("111100000000000000000010");
    for image in ["Keys", "NewImage"] {
        large["dynamodb"][image]["SK"] = json!({"S": format!("CONTENT#{large_sha}")});
    }
    let image = large["dynamodb"]["NewImage"].as_object_mut().unwrap();
    image.remove("content");
    image.insert("s3Key".into(), json!({"S": piece}));
    let records = payload["Records"].as_array_mut().unwrap();
    records.truncate(1);
    records.push(content);
    records.push(large);
    // when the archiver handles it
    let done = archiver::handle(&archive, event::<StreamEvent>(payload)).await.unwrap();
    // then the content has its own folder, filed under its tenant and the day it was stored
    assert_eq!(
        done.objects,
        vec![
            "content/tenant=t-1/date=2026-11-23/111100000000000000000009.jsonl.gz".to_owned(),
            "executions/tenant=t-1/date=2026-11-23/111100000000000000000001.parquet".to_owned(),
        ]
    );
    let lines = gunzip_lines(&object(&sdk, &bucket, &done.objects[0]).await);
    let c = &lines[0]["content"];
    assert_eq!(
        (c["sha256"].as_str(), c["sessionId"].as_str()),
        (Some(sha.as_str()), Some("01JDQA0000000000000000SES1"))
    );
    assert_eq!(c["content"]["content"][0]["text"], "Where is my order?");
    assert_eq!(c["storedAt"], "2026-11-23T07:00:02+00:00");
    // and the large piece's line names its object instead of holding it
    let large = &lines[1]["content"];
    assert_eq!(
        (large["sha256"].as_str(), large["contentKey"].as_str()),
        (Some(large_sha.as_str()), Some(piece.as_str()))
    );
    assert!(large.get("content").is_none(), "{large}");
}

/// A stream record of an execution item holding `record` (as the DynamoDB store writes it).
fn execution_stream_record(event_name: &str, sequence: &str, record: &Value) -> Value {
    let item = json!({
        "PK": format!("SESSION#{}", record["sessionId"].as_str().unwrap()),
        "SK": format!("EXEC#{}#{}", record["createdAt"].as_str().unwrap(), record["executionId"].as_str().unwrap()),
        "tenantId": record["tenantId"], "body": record,
    });
    let image: serde_dynamo::Item = serde_dynamo::to_item(item).unwrap();
    json!({
        "eventID": sequence, "eventName": event_name, "eventVersion": "1.1", "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": { "Keys": {}, "NewImage": serde_json::to_value(image).unwrap(), "SequenceNumber": sequence,
                      "SizeBytes": 900, "StreamViewType": "NEW_IMAGE" }
    })
}

#[tokio::test]
async fn the_archivers_parquet_files_read_in_duckdb_with_the_documented_columns_and_answer_the_example_queries() {
    // given two weeks of executions of two versions of an agent: a handed-off session and a
    // resolved one in the first week, two resolved and a handed-off one in the second (one of
    // them resumed, so archived twice), and another tenant's
    let record = |tenant: &str,
                  id: &str,
                  session: &str,
                  version: u64,
                  status: &str,
                  cost: Option<f64>,
                  tokens: (u64, u64),
                  at: &str| {
        // the second week's conversations came in on WhatsApp, the first week's on the web chat
        let platform = if at < "2026-11-23" { "webchat" } else { "whatsapp" };
        json!({
            "tenantId": tenant, "executionId": format!("01JDQA00000000000000000{id}"),
            "sessionId": format!("01JDQA0000000000000000S{session}"), "agentId": AGENT, "ranWith": {"agent": version},
            "sourceId": format!("evt-{id}"), "status": status,
            "input": {"text": "hi", "detail": {"conversationId": format!("c-{session}"), "channel": {"platform": platform}}}, "iterations": 1, "modelCalls": [{}],
            "toolCalls": [], "actions": [], "tokenUsage": {"inputTokens": tokens.0, "outputTokens": tokens.1},
            "costUsd": cost, "latencyMs": 900, "createdAt": at, "expiresAt": "2027-01-01T00:00:00Z"
        })
    };
    let resumed = record("t-1", "EX4", "S3", 2, "success", Some(0.0035), (300, 40), "2026-11-24T08:00:00Z");
    let mut paused = resumed.clone();
    (paused["status"], paused["costUsd"]) = (json!("paused"), json!(0.003));
    let changes = [
        ("INSERT", record("t-1", "EX1", "S1", 1, "success", Some(0.001), (100, 20), "2026-11-17T10:00:00Z")),
        ("INSERT", record("t-1", "EX2", "S1", 1, "handed_off", Some(0.002), (200, 30), "2026-11-17T10:05:00Z")),
        ("INSERT", record("t-1", "EX3", "S2", 1, "success", Some(0.0015), (150, 25), "2026-11-18T09:00:00Z")),
        ("INSERT", paused),
        ("MODIFY", resumed),
        ("INSERT", record("t-1", "EX5", "S4", 2, "handed_off", None, (50, 10), "2026-11-25T12:00:00Z")),
        ("INSERT", record("t-1", "EX6", "S5", 2, "success", Some(0.002), (100, 10), "2026-11-26T12:00:00Z")),
        ("INSERT", record("t-2", "EX7", "S6", 1, "success", Some(1.0), (999, 99), "2026-11-26T12:00:00Z")),
    ];
    let records: Vec<Value> = changes
        .iter()
        .enumerate()
        .map(|(n, (name, r))| execution_stream_record(name, &format!("5500000000000000000{n:03}"), r))
        .collect();
    // when the archiver writes them, and the bucket's files are copied out as they are laid out
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let bucket = common::create_bucket(&sdk).await;
    let archive = S3Archive::new(S3Archive::client(&sdk, true), bucket.clone(), "executions/");
    let done = archiver::handle(&archive, event::<StreamEvent>(json!({ "Records": records }))).await.unwrap();
    assert_eq!(done.archived, 8);
    let dir = tempfile::tempdir().unwrap();
    for key in &done.objects {
        assert!(key.ends_with(".parquet"), "{key}");
        let path = dir.path().join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, object(&sdk, &bucket, key).await).unwrap();
    }
    // then DuckDB (not our code) reads them with the columns docs/athena.md documents
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(switchboard_testkit::mcp::python())
        .arg(root.join("tests/readers/archive_duckdb.py"))
        .arg(dir.path())
        .arg(root.join("docs/athena.md"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let described: Vec<(String, String)> = answer["describe"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c[0].as_str().unwrap().to_owned(), c[1].as_str().unwrap().to_owned()))
        .collect();
    let text = |names: &[&str]| names.iter().map(|n| (n.to_string(), "VARCHAR".to_owned())).collect::<Vec<_>>();
    let int = |names: &[&str]| names.iter().map(|n| (n.to_string(), "BIGINT".to_owned())).collect::<Vec<_>>();
    let mut expected = text(&[
        "event_name",
        "sequence_number",
        "tenant_id",
        "execution_id",
        "session_id",
        "conversation_id",
        "channel",
        "agent_id",
    ]);
    expected.extend(int(&["agent_version"]));
    expected.extend(text(&["trigger_id", "variant", "status", "error_code"]));
    expected.extend(int(&[
        "iterations",
        "model_calls",
        "tool_calls",
        "tool_failures",
        "input_tokens",
        "output_tokens",
    ]));
    expected.push(("cost_usd".into(), "DOUBLE".into()));
    expected.extend(int(&["latency_ms"]));
    expected.push(("created_at".into(), "TIMESTAMP WITH TIME ZONE".into()));
    expected.extend(text(&["record", "date", "tenant"]));
    assert_eq!(described, expected);
    // and the example queries answer what these records say: per week, sessions, resolved by an
    // agent and the rate; per channel, sessions and those handed to a person; per agent version,
    // executions (each once), tokens and cost
    let rows = |q: usize| -> Vec<Vec<String>> { serde_json::from_value(answer["queries"][q].clone()).unwrap() };
    let row = |cells: &[&str]| cells.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rows(0),
        [row(&["2026-11-16 00:00:00+00:00", "2", "1", "0.5"]), row(&["2026-11-23 00:00:00+00:00", "3", "2", "0.667"])]
    );
    assert_eq!(rows(1), [row(&["webchat", "2", "1"]), row(&["whatsapp", "3", "1"])]);
    assert_eq!(rows(2), [row(&[AGENT, "1", "3", "525", "0.0045"]), row(&[AGENT, "2", "3", "510", "0.0055"])]);
}

#[tokio::test]
async fn the_archiver_deletes_the_object_of_a_removed_piece_but_not_of_one_that_expired() {
    // given two large pieces' objects in the bucket, as the executor's store puts them
    let sdk = AwsSettings::emulator(common::moto().endpoint.clone()).load().await;
    let bucket = common::create_bucket(&sdk).await;
    let archive = S3Archive::new(S3Archive::client(&sdk, true), bucket.clone(), "executions/");
    let pieces = archive.with_prefix("");
    let session = "01JDQA0000000000000000SES1";
    let (deleted, expired) = ("d1".repeat(32), "e1".repeat(32));
    for sha in [&deleted, &expired] {
        pieces.put(&switchboard_aws::piece_key(session, sha), b"{}".to_vec(), "application/json").await.unwrap();
    }
    // and a stream batch removing both items, one by a tenant's deletion and one by its TTL, and
    // an execution record removed by a tenant's deletion
    let removal = |id: &str, sk: String, by_ttl: bool| {
        let mut record = json!({
            "eventID": id, "eventName": "REMOVE", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {
                "Keys": { "PK": {"S": format!("SESSION#{session}")}, "SK": {"S": sk} },
                "SequenceNumber": format!("2222000000000000000000{id}"), "SizeBytes": 90, "StreamViewType": "NEW_IMAGE"
            }
        });
        if by_ttl {
            record["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
        }
        record
    };
    let payload = json!({ "Records": [
        removal("01", format!("CONTENT#{deleted}"), false),
        removal("02", format!("CONTENT#{expired}"), true),
        removal("03", "EXEC#2026-11-23T07:00:00Z#01JDQA0000000000000000EXE1".into(), false),
    ]});
    // when the archiver handles it
    let done = archiver::handle(&archive, event::<StreamEvent>(payload)).await.unwrap();
    // then the deleted item's object is gone, the expired one's is kept for the archive, and
    // nothing was archived
    assert_eq!((done.deleted, done.archived, done.skipped), (1, 0, 2), "{done:?}");
    assert!(done.objects.is_empty());
    assert_eq!(pieces.get(&switchboard_aws::piece_key(session, &deleted)).await.unwrap(), None);
    assert!(pieces.get(&switchboard_aws::piece_key(session, &expired)).await.unwrap().is_some());
    // and a batch removing it again (a retried batch) succeeds
    let again = json!({ "Records": [removal("04", format!("CONTENT#{deleted}"), false)] });
    assert_eq!(archiver::handle(&archive, event::<StreamEvent>(again)).await.unwrap().deleted, 1);
}

// ---- end to end ---------------------------------------------------------------------------------------

async fn queue_with_arn(sqs: &aws_sdk_sqs::Client, name: &str) -> (String, String) {
    let url = sqs.create_queue().queue_name(name).send().await.unwrap().queue_url.unwrap();
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap();
    let arn = attrs.attributes.unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn].clone();
    (url, arn)
}

async fn rule_to_queue(eb: &aws_sdk_eventbridge::Client, bus: &str, name: &str, pattern: Value, arn: &str) {
    eb.put_rule().name(name).event_bus_name(bus).event_pattern(pattern.to_string()).send().await.unwrap();
    let target = aws_sdk_eventbridge::types::Target::builder().id("q").arn(arn).build().unwrap();
    eb.put_targets().rule(name).event_bus_name(bus).targets(target).send().await.unwrap();
}

async fn receive_all(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    let got = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    got.messages.unwrap_or_default()
}

/// The Lambda event source mapping's view of received FIFO messages.
fn as_sqs_event(messages: &[aws_sdk_sqs::types::Message]) -> Value {
    use aws_sdk_sqs::types::MessageSystemAttributeName as A;
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            let attrs = m.attributes.clone().unwrap_or_default();
            json!({
                "messageId": m.message_id, "receiptHandle": m.receipt_handle, "body": m.body,
                "attributes": {
                    "MessageGroupId": attrs.get(&A::MessageGroupId),
                    "MessageDeduplicationId": attrs.get(&A::MessageDeduplicationId),
                    "ApproximateReceiveCount": attrs.get(&A::ApproximateReceiveCount),
                },
                "messageAttributes": {}, "md5OfBody": m.md5_of_body, "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:work.fifo", "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

#[tokio::test]
async fn one_message_end_to_end_through_eventbridge_sqs_router_executor_archiver_and_the_handoff_rule() {
    // given the deployed shape on the emulator: an intake bus with the message.new rule → SQS
    // (standing in for the event-router target), and a rule on Switchboard's bus for human
    // handoffs → SQS; a model that replies and hands off to a human
    let two_tools = Reply::Ok(json!({
        "output": {"message": {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "tu-1", "name": "send_message", "input": {"text": "Connecting you to a person."}}},
            {"toolUse": {"toolUseId": "tu-2", "name": "handoff_to_human", "input": {"reason": "asked for a person", "priority": "high"}}}
        ]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 20, "outputTokens": 9, "totalTokens": 29},
        "metrics": {"latencyMs": 5}
    }));
    let w = world(vec![two_tools, Reply::text("Hello."), Reply::text("Still here.")], false).await;
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let eb = aws_sdk_eventbridge::Client::new(&w.sdk);
    let suffix = ulid::Ulid::generate().to_string().to_lowercase();
    let intake_bus = format!("intake-{suffix}");
    eb.create_event_bus().name(&intake_bus).send().await.unwrap();
    let (intake_url, intake_arn) = queue_with_arn(&sqs, &format!("intake-{suffix}")).await;
    let (handoff_url, handoff_arn) = queue_with_arn(&sqs, &format!("handoffs-{suffix}")).await;
    rule_to_queue(
        &eb,
        &intake_bus,
        &format!("message-new-{suffix}"),
        json!({"source": ["conversations-service"], "detail-type": ["message.new"]}),
        &intake_arn,
    )
    .await;
    rule_to_queue(
        &eb,
        &w.names.event_bus,
        &format!("handoff-{suffix}"),
        json!({"source": ["switchboard"], "detail-type": ["session.handoff.human"]}),
        &handoff_arn,
    )
    .await;

    // when the Conversations Service publishes a new message
    let detail = fixture("eventbridge-message-new.json")["detail"].clone();
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(&intake_bus)
        .source("conversations-service")
        .detail_type("message.new")
        .detail(detail.to_string())
        .build();
    let put = eb.put_events().entries(entry).send().await.unwrap();
    assert_eq!(put.failed_entry_count(), 0);

    // then the rule delivered it, and the router handler enqueues one work item
    let delivered = receive_all(&sqs, &intake_url).await;
    assert_eq!(delivered.len(), 1);
    let envelope: Value = serde_json::from_str(delivered[0].body().unwrap()).unwrap();
    let source = source_of(&envelope);
    w.counter.take();
    let routed = event_router::handle(&w.wiring.intake, event::<EventBridgeEvent>(envelope)).await.unwrap();
    let router_requests = w.counter.take();
    assert!(matches!(routed, RouteOutcome::Enqueued { .. }), "{routed:?}");

    // and the executor handler runs the batch it finds on the work queue, without failures
    let work = receive_all(&sqs, &w.names.work_queue_url).await;
    assert_eq!(work.len(), 1);
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&work))).await;
    let executor_requests = w.counter.take();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    for m in &work {
        sqs.delete_message()
            .queue_url(&w.names.work_queue_url)
            .receipt_handle(m.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
    }

    // then the fake Conversations Service got the reply, signed, with an idempotency key
    let replies = w.conversations.accepted();
    assert_eq!(replies.len(), 1);
    assert_eq!((replies[0].conversation_id.as_str(), replies[0].text.as_str()), ("c-1", "Connecting you to a person."));
    assert!(replies[0].idempotency_key.starts_with(&format!("t-1/{source}/")), "{}", replies[0].idempotency_key);
    assert!(common::is_sigv4_for_execute_api(&replies[0].authorization));
    assert_eq!(w.bedrock.requests().len(), 1);
    // and the session (handed to a human) and the execution are in DynamoDB
    let tenant: TenantId = "t-1".parse().unwrap();
    let session = w.wiring.store.latest_session(&tenant, "c-1").await.unwrap().unwrap();
    assert!(session.is_human_owned(), "{:?}", session.status);
    assert_ne!(session.status, SessionStatus::Active);
    let record = w.wiring.store.execution_for_source(&tenant, &source).await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::HandedOff);

    // and nothing was published yet: the handoff event is in the turn's outbox, which the
    // executions table's stream relays (the archiver function, given those stream records)
    assert!(receive_all(&sqs, &handoff_url).await.is_empty(), "published before the relay");
    let outbox = outbox_stream(&w.sdk, &w.names.executions_table, "t-1").await;
    let bus = EventBridgeBus::from_config(&w.sdk, w.names.event_bus.clone());
    let relayed = relay::handle(&bus, event::<StreamEvent>(outbox.clone())).await;
    assert!(relayed.batch_item_failures.is_empty(), "{:?}", relayed.batch_item_failures);
    assert_eq!(outbox["Records"].as_array().unwrap().len(), 2, "the event and its id marker");

    // and the human handoff event reached the second rule's queue
    let handoffs = receive_all(&sqs, &handoff_url).await;
    assert_eq!(handoffs.len(), 1);
    let handoff: Value = serde_json::from_str(handoffs[0].body().unwrap()).unwrap();
    assert_eq!(handoff["detail-type"], json!("session.handoff.human"));
    assert_eq!(handoff["detail"]["tenantId"], json!("t-1"));

    // and the archiver, given the stream record of that execution item, writes it to S3
    let dynamodb = aws_sdk_dynamodb::Client::new(&w.sdk);
    let items = dynamodb
        .query()
        .table_name(&w.names.executions_table)
        .key_condition_expression("PK = :pk")
        .expression_attribute_values(
            ":pk",
            aws_sdk_dynamodb::types::AttributeValue::S(format!("SESSION#{}", record.session_id)),
        )
        .send()
        .await
        .unwrap();
    let sk = |i: &std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>| {
        i.get("SK").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default()
    };
    let item = items.items().iter().find(|i| sk(i).starts_with("EXEC#")).cloned().unwrap();
    let image = serde_json::to_value(serde_dynamo::Item::from(item)).unwrap();
    // (beside it, the model calls' recorded content, one item a piece, that the record points at)
    let content: Vec<String> = items.items().iter().map(sk).filter(|k| k.starts_with("CONTENT#")).collect();
    let call = &record.model_calls[0].request.as_ref().unwrap().system;
    assert!(content.contains(&format!("CONTENT#{}", call.sha256)), "{content:?}");
    // (the same transaction counted the turn's usage, in an item the archiver leaves alone)
    let usage_items = dynamodb
        .query()
        .table_name(&w.names.executions_table)
        .key_condition_expression("PK = :pk")
        .expression_attribute_values(":pk", aws_sdk_dynamodb::types::AttributeValue::S("TENANT#t-1#USAGE".into()))
        .send()
        .await
        .unwrap();
    // one day's usage, one hour's activity and one insight row
    let sks: Vec<_> = usage_items.items().iter().filter_map(|i| i.get("SK")?.as_s().ok()).collect();
    assert!(
        sks.len() == 3 && sks[0].starts_with("DAY#") && sks[1].starts_with("HOUR#") && sks[2].starts_with("INSIGHT#"),
        "{sks:?}"
    );
    let usage_image = serde_json::to_value(serde_dynamo::Item::from(usage_items.items()[0].clone())).unwrap();
    let stream = json!({"Records": [{
        "eventID": "1", "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {"ApproximateCreationDateTime": 1763881201, "Keys": {}, "NewImage": image,
                     "SequenceNumber": "4200000000000000000001", "SizeBytes": 900, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    }, {
        "eventID": "2", "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {"ApproximateCreationDateTime": 1763881201, "Keys": {}, "NewImage": usage_image,
                     "SequenceNumber": "4200000000000000000002", "SizeBytes": 300, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    }]});
    let bucket = common::create_bucket(&w.sdk).await;
    let archive = S3Archive::new(S3Archive::client(&w.sdk, true), bucket.clone(), "executions/");
    let summary = archiver::handle(&archive, event::<StreamEvent>(stream)).await.unwrap();
    let day = record.created_at.format("%Y-%m-%d").to_string();
    assert_eq!(summary.objects, vec![format!("executions/tenant=t-1/date={day}/4200000000000000000001.parquet")]);
    let lines = switchboard_domain::archive::read_lines(&object(&w.sdk, &bucket, &summary.objects[0]).await).unwrap();
    assert_eq!(lines[0]["execution"]["executionId"], json!(record.execution_id.to_string()));
    assert_eq!(lines.len(), 1, "usage items are not archived");

    // and the internal API reports the turn's usage from DynamoDB
    let request = lambda_http::http::Request::builder()
        .uri(format!("/tenants/t-1/usage?from={day}&to={day}"))
        .body(lambda_http::Body::Empty)
        .unwrap();
    let response = api::app(api::state(&w.wiring, None)).oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let report: Value =
        serde_json::from_slice(&axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap()).unwrap();
    assert_eq!(report["rows"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["total"]["calls"], json!(record.model_calls.len()), "{report}");
    assert_eq!(report["total"]["inputTokens"], json!(record.token_usage.input_tokens), "{report}");
    // and its insights: one conversation opened and answered, on the channel it came in on
    let request = lambda_http::http::Request::builder()
        .uri(format!("/tenants/t-1/insights?from={day}&to={day}&groupBy=agent,channel"))
        .body(lambda_http::Body::Empty)
        .unwrap();
    let response = api::app(api::state(&w.wiring, None)).oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let insights: Value =
        serde_json::from_slice(&axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap()).unwrap();
    let group = &insights["groups"][0];
    assert_eq!(group["by"]["agentId"], json!(record.agent_id), "{insights}");
    assert_eq!(group["by"]["channel"], record.input["detail"]["channel"]["platform"], "{insights}");
    let total = &insights["total"];
    assert_eq!((total["executions"].as_u64(), total["conversations"].as_u64()), (Some(1), Some(1)), "{insights}");
    assert_eq!(total["firstResponseMs"]["count"], 1, "{insights}");
    assert_eq!(total["latencyMs"]["count"], 1, "{insights}");
    assert_eq!(total["tokens"], json!(record.token_usage.total()), "{insights}");

    // the AWS requests this one message cost, on cold containers (router and executor share one
    // store here, so the executor's read of the agent is the router's: a cold executor adds it)
    let cold = (by_operation(&router_requests), by_operation(&executor_requests));
    println!("AWS requests per inbound message, cold: router {:?}; executor {:?}", cold.0, cold.1);
    let ops = |list: &[(&str, usize)]| list.iter().map(|(o, n)| ((*o).to_owned(), *n)).collect::<Vec<_>>();
    assert_eq!(
        cold.0,
        ops(&[
            ("DynamoDB.GetItem", 2),
            ("DynamoDB.Query", 2),
            ("DynamoDB.TransactWriteItems", 1),
            ("SQS.SendMessage", 1)
        ]),
        "tenant and agent read, triggers, the day's usage, one limits transaction, the work item"
    );
    // and warm: a new conversation, then its next message
    let warm_new = route_and_run(&w, "c-2", "help me with a refund").await;
    println!("warm, new conversation: router {:?}; executor {:?}", warm_new.0, warm_new.1);
    assert_eq!(
        warm_new.0,
        ops(&[("DynamoDB.TransactWriteItems", 1), ("SQS.SendMessage", 1)]),
        "one limits transaction (which also asks that no human owns the conversation), the work item"
    );
    assert_eq!(
        warm_new.1,
        ops(&[
            ("DynamoDB.BatchGetItem", 1),
            ("DynamoDB.Query", 1),
            ("Bedrock Runtime.Converse", 1),
            ("DynamoDB.TransactWriteItems", 1)
        ]),
        "the source's record and the active marker, the conversation index, the model, the commit"
    );
    let warm_next = route_and_run(&w, "c-2", "help, anyone?").await;
    println!("warm, the conversation's next message: router {:?}; executor {:?}", warm_next.0, warm_next.1);
    assert_eq!(warm_next.0, warm_new.0, "the slot is renewed in the same one transaction");
    assert_eq!(
        warm_next.1,
        ops(&[
            ("DynamoDB.BatchGetItem", 1),
            ("DynamoDB.GetItem", 2),
            ("Bedrock Runtime.Converse", 1),
            ("DynamoDB.TransactWriteItems", 1)
        ]),
        "the source's record and the active marker, the session, the model, the session's version before the \
         reply (an operator may have taken the conversation meanwhile), the commit"
    );
    assert_eq!(
        w.conversations.accepted().iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
        ["Connecting you to a person.", "Hello.", "Still here."]
    );

    // the conversation the human owns: the limits transaction is refused by its owner marker,
    // which names the human's session; nothing is counted and the message is queued for the
    // human's transcript
    let (owned, router, executor) = route(&w, "c-1", "help, is anyone there?").await;
    assert_eq!(owned, RouteOutcome::HumanOwned { session_id: session.session_id });
    assert_eq!(router, ops(&[("DynamoDB.TransactWriteItems", 1), ("SQS.SendMessage", 1)]), "a human's conversation");
    assert!(executor.iter().all(|(op, _)| !op.starts_with("Bedrock")), "no model call: {executor:?}");
    // and a message that matches no trigger is still found to be the human's: one read of the
    // conversation (no limits asked)
    let (owned, router, _) = route(&w, "c-1", "the blue one").await;
    assert_eq!(owned, RouteOutcome::HumanOwned { session_id: session.session_id });
    assert_eq!(router, ops(&[("DynamoDB.Query", 1), ("SQS.SendMessage", 1)]), "no trigger matched");
    let (nothing, router, _) = route(&w, "c-3", "the blue one").await;
    assert_eq!((nothing, router), (RouteOutcome::NoMatch, ops(&[("DynamoDB.Query", 1)])), "no trigger, no owner");
    let transcript = w.wiring.store.get_session(&tenant, session.session_id).await.unwrap().unwrap().transcript;
    let texts = serde_json::to_string(&transcript).unwrap();
    assert!(texts.contains("help, is anyone there?") && texts.contains("the blue one"), "{texts}");
    assert_eq!(w.bedrock.requests().len(), 3, "the model ran for the three agent turns only");
}

/// The stream records a DynamoDB stream would carry for `tenant`'s event log as it stands: one
/// `INSERT` per item (events and their id markers).
async fn outbox_stream(sdk: &aws_config::SdkConfig, table: &str, tenant: &str) -> Value {
    let items = aws_sdk_dynamodb::Client::new(sdk)
        .query()
        .table_name(table)
        .key_condition_expression("PK = :pk")
        .expression_attribute_values(
            ":pk",
            aws_sdk_dynamodb::types::AttributeValue::S(format!("TENANT#{tenant}#EVENTS")),
        )
        .send()
        .await
        .unwrap();
    let records: Vec<Value> = items
        .items()
        .iter()
        .filter(|i| i.get("SK").and_then(|v| v.as_s().ok()).is_some_and(|sk| sk != "SEQ"))
        .enumerate()
        .map(|(n, item)| {
            let image = serde_json::to_value(serde_dynamo::Item::from(item.clone())).unwrap();
            json!({
                "eventID": n.to_string(), "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {"ApproximateCreationDateTime": 1763881201, "Keys": {}, "NewImage": image,
                             "SequenceNumber": format!("43{n:020}"), "SizeBytes": 300, "StreamViewType": "NEW_AND_OLD_IMAGES"}
            })
        })
        .collect();
    json!({ "Records": records })
}

#[tokio::test]
async fn the_relay_publishes_outbox_events_once_each_and_retries_from_a_failure() {
    // given a turn that handed off to a human (its event committed in the outbox, not published)
    let script = vec![Reply::tool_use("tu-1", "handoff_to_human", json!({"reason": "asked for a person"}))];
    let w = world(script, false).await;
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    assert!(poll_once(&w).await.unwrap().1.batch_item_failures.is_empty());
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let eb = aws_sdk_eventbridge::Client::new(&w.sdk);
    let (capture, arn) = queue_with_arn(&sqs, "relayed").await;
    rule_to_queue(&eb, &w.names.event_bus, "relayed", json!({"source": ["switchboard"]}), &arn).await;
    let outbox = outbox_stream(&w.sdk, &w.names.executions_table, "t-1").await;
    // the id marker is not an event; a record that is not the outbox's is left alone
    let events: Vec<_> = outbox["Records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["dynamodb"]["NewImage"]["outbox"].is_object())
        .collect();
    assert_eq!(events.len(), 1, "{outbox}");
    let records: StreamEvent = serde_json::from_value(outbox.clone()).unwrap();
    assert_eq!(records.records.iter().filter(|r| relay::is_outbox(r)).count(), 1, "how the function routes the batch");
    // when a bus that refuses everything relays the batch, the event's record is the one to retry from
    let broken = EventBridgeBus::from_config(&w.sdk, "no-such-bus".to_owned());
    let failed = relay::handle(&broken, event::<StreamEvent>(outbox.clone())).await;
    let from: Vec<_> = failed.batch_item_failures.iter().map(|f| f.item_identifier.clone().unwrap()).collect();
    assert_eq!(from, [events[0]["dynamodb"]["SequenceNumber"].as_str().unwrap()]);
    // then the retry publishes it, once
    let relayed =
        relay::handle(&EventBridgeBus::from_config(&w.sdk, w.names.event_bus.clone()), event::<StreamEvent>(outbox))
            .await;
    assert!(relayed.batch_item_failures.is_empty());
    let got = receive_all(&sqs, &capture).await;
    assert_eq!(got.len(), 1);
    let body: Value = serde_json::from_str(got[0].body().unwrap()).unwrap();
    assert_eq!(
        (body["detail-type"].as_str(), body["detail"]["reason"].as_str()),
        (Some("session.handoff.human"), Some("asked for a person"))
    );
}

/// Routes an inbound message in `conversation`, expecting it queued for an agent, and runs the
/// work item: the AWS requests of the router and of the executor, by operation.
async fn route_and_run(w: &World, conversation: &str, text: &str) -> (Vec<(String, usize)>, Vec<(String, usize)>) {
    let (routed, router, executor) = route(w, conversation, text).await;
    assert!(matches!(routed, RouteOutcome::Enqueued { duplicate: false, .. }), "{routed:?}");
    (router, executor)
}

/// Routes an inbound message in `conversation` and runs the work item it queued, if any: the
/// outcome and the AWS requests of the router and of the executor, by operation.
async fn route(
    w: &World,
    conversation: &str,
    text: &str,
) -> (RouteOutcome, Vec<(String, usize)>, Vec<(String, usize)>) {
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let mut envelope = fixture("eventbridge-message-new.json");
    let id = ulid::Ulid::generate().to_string();
    envelope["id"] = json!(id);
    envelope["detail"]["conversationId"] = json!(conversation);
    envelope["detail"]["messageId"] = json!(format!("m-{id}"));
    envelope["detail"]["message"]["text"] = json!(text);
    w.counter.take();
    let routed = event_router::handle(&w.wiring.intake, event::<EventBridgeEvent>(envelope)).await.unwrap();
    let router = w.counter.take();
    let work = receive_all(&sqs, &w.names.work_queue_url).await;
    if routed == RouteOutcome::NoMatch {
        assert!(work.is_empty());
        return (routed, by_operation(&router), vec![]);
    }
    assert_eq!(work.len(), 1);
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(&work))).await;
    let executor = w.counter.take();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    for m in &work {
        let receipt = m.receipt_handle().unwrap();
        sqs.delete_message().queue_url(&w.names.work_queue_url).receipt_handle(receipt).send().await.unwrap();
    }
    (routed, by_operation(&router), by_operation(&executor))
}

// ---- the Lambda SQS poller, one message at a time ------------------------------------------------

/// What the SQS event source mapping does, one message per receive (moto redelivers only the
/// last of a group's timed-out batch otherwise): hand the message to the executor handler,
/// delete it if it succeeded, make it visible again at once if it was reported failed. `None`
/// when the queue had nothing to deliver.
/// One work item, if one is deliverable now, with its system attributes.
async fn receive_work(w: &World) -> Option<aws_sdk_sqs::types::Message> {
    receive_up_to(w, 1).await.into_iter().next()
}

/// Up to `max` work items deliverable now (a group's in order), with their system attributes.
async fn receive_up_to(w: &World, max: i32) -> Vec<aws_sdk_sqs::types::Message> {
    let got = aws_sdk_sqs::Client::new(&w.sdk)
        .receive_message()
        .queue_url(&w.names.work_queue_url)
        .max_number_of_messages(max)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .wait_time_seconds(0)
        .send()
        .await
        .unwrap();
    got.messages.unwrap_or_default()
}

async fn poll_once(w: &World) -> Option<(aws_sdk_sqs::types::Message, SqsBatchResponse)> {
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let message = receive_work(w).await?;
    let batch = as_sqs_event(std::slice::from_ref(&message));
    let response = executor::handle(&w.wiring, event::<SqsEvent>(batch)).await;
    let receipt = message.receipt_handle().unwrap();
    let failed = response.batch_item_failures.iter().any(|f| Some(f.item_identifier.as_str()) == message.message_id());
    if failed {
        sqs.change_message_visibility()
            .queue_url(&w.names.work_queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    } else {
        sqs.delete_message().queue_url(&w.names.work_queue_url).receipt_handle(receipt).send().await.unwrap();
    }
    Some((message, response))
}

fn failed_ids(response: &SqsBatchResponse) -> Vec<String> {
    response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect()
}

fn receive_count(message: &aws_sdk_sqs::types::Message) -> String {
    let attrs = message.attributes.clone().unwrap_or_default();
    attrs.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount).cloned().unwrap_or_default()
}

/// Everything logged on this thread while the [`Capturing`] guard lives. The test runtime is
/// single-threaded, so the handlers log on the test's thread. One process-wide subscriber
/// routes each thread's lines to its capture (or nowhere): scoped subscribers
/// (`tracing::subscriber::set_default`) lose events when a parallel test without one registers
/// the same callsite first.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Writes to the current thread's capture, if any.
struct ThreadCapture;

impl std::io::Write for ThreadCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(logs) = &*c.borrow() {
                logs.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Stops the capture on drop.
struct Capturing;

impl Drop for Capturing {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().take());
    }
}

impl Logs {
    fn capture() -> (Self, Capturing) {
        static SUBSCRIBER: std::sync::Once = std::sync::Once::new();
        SUBSCRIBER.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::INFO)
                .with_ansi(false)
                .with_writer(|| ThreadCapture)
                .finish();
            tracing::subscriber::set_global_default(subscriber).unwrap();
        });
        let logs = Logs::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(logs.clone()));
        (logs, Capturing)
    }

    fn lines_with(&self, needle: &str) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
    }
}

// ---- agent-executor: faults ----------------------------------------------------------------------

#[tokio::test]
async fn a_poison_body_fails_alone_on_every_receive_then_sits_in_the_dead_letter_queue_and_its_group_moves_on() {
    let (logs, _guard) = Logs::capture();
    // given a work queue that dead-letters after 2 receives, holding a body that is not a work
    // item, and behind it in the same conversation's group a real message
    let w =
        world_with(vec![Reply::text("Happy to help.")], Options { max_receives: Some(2), ..Options::default() }).await;
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let poison = "{this is not a work item";
    sqs.send_message()
        .queue_url(&w.names.work_queue_url)
        .message_group_id("t-1:c-1")
        .message_deduplication_id("poison-1")
        .message_body(poison)
        .send()
        .await
        .unwrap();
    let routed = event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    assert!(matches!(routed, RouteOutcome::Enqueued { .. }), "{routed:?}");

    // when the poller delivers until the queue has nothing more to give
    let mut deliveries = Vec::new();
    while let Some(delivery) = poll_once(&w).await {
        deliveries.push(delivery);
        assert!(deliveries.len() <= 5, "the poison item was never dead-lettered");
    }

    // then the poison came twice, reported failed each time, and then the real message once
    let bodies: Vec<&str> = deliveries.iter().map(|(m, _)| m.body().unwrap()).collect();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    assert_eq!((bodies[0], bodies[1]), (poison, poison));
    let poison_id = deliveries[0].0.message_id().unwrap().to_owned();
    assert_eq!(deliveries[1].0.message_id(), Some(poison_id.as_str()));
    assert_eq!((receive_count(&deliveries[0].0), receive_count(&deliveries[1].0)), ("1".into(), "2".into()));
    assert_eq!(failed_ids(&deliveries[0].1), vec![poison_id.clone()]);
    assert_eq!(failed_ids(&deliveries[1].1), vec![poison_id.clone()]);
    assert!(deliveries[2].1.batch_item_failures.is_empty(), "{:?}", deliveries[2].1.batch_item_failures);
    assert_eq!(w.conversations.accepted().len(), 1);
    // and the poison is in the dead-letter queue, unchanged, and nowhere else
    let dead = common::drain_queue(&sqs, w.dead_letters.as_deref().unwrap()).await;
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].0.as_str(), dead[0].2.as_str()), ("t-1:c-1", poison));
    // and each failure was logged with the message, its receive count and why
    let lines = logs.lines_with("malformed work item");
    assert_eq!(lines.len(), 2, "{lines:#?}");
    for (line, receives) in lines.iter().zip(["receives=1", "receives=2"]) {
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains(&format!("message_id={poison_id}")), "{line}");
        assert!(line.contains(receives), "{line}");
        assert!(line.contains("reason=body is not a work item: key must be a string"), "{line}");
    }
}

/// The kinds of the events tenant `t-1` has published, oldest first (its event log).
async fn published_kinds(w: &World) -> Vec<String> {
    let (status, log) = api_call(w, "GET", "/tenants/t-1/events", None).await;
    assert_eq!(status, 200, "{log}");
    let events = log["events"].as_array().unwrap();
    events.iter().map(|e| e["event"]["detailType"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_message_whose_last_delivery_fails_is_given_up_to_a_human_instead_of_dead_lettered() {
    // given a work queue that dead-letters after 2 receives and a model throttled every time
    let throttle = Reply::Error(429, "ThrottlingException", "Too many requests, please wait before trying again.");
    let options = Options { max_receives: Some(2), model_retry: fast_retry(1), ..Options::default() };
    let w = world_with(vec![throttle.clone(), throttle], options).await;
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    let tenant: TenantId = "t-1".parse().unwrap();
    let source = "message-c-1:m-1";
    // when the first delivery fails, it is left to SQS
    let (first, response) = poll_once(&w).await.unwrap();
    assert_eq!(failed_ids(&response), vec![first.message_id().unwrap().to_owned()]);
    assert!(w.wiring.store.execution_for_source(&tenant, source).await.unwrap().is_none());
    // when the last one fails too, the item is given up and acknowledged
    let (last, response) = poll_once(&w).await.unwrap();
    assert_eq!(receive_count(&last), "2");
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    // then the failure is recorded, a human has the conversation, and both are announced
    let record = w.wiring.store.execution_for_source(&tenant, source).await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::Failed);
    assert_eq!(record.error.as_ref().unwrap().reason.as_deref(), Some("last-delivery"));
    assert!(record.error.as_ref().unwrap().message.contains("ThrottlingException"), "{:?}", record.error);
    assert_eq!(record.error.as_ref().unwrap().kind, switchboard_domain::ErrorKind::Model, "the failing call's kind");
    let session = w.wiring.store.latest_session(&tenant, "c-1").await.unwrap().unwrap();
    assert_eq!(session.status, SessionStatus::HandedOff);
    assert_eq!(published_kinds(&w).await, ["session.handoff.human", "execution.failed"]);
    assert_eq!(w.conversations.attempts(), 0, "nothing was said in the agent's name");
    // and nothing reached the dead-letter queue
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    assert!(common::drain_queue(&sqs, w.dead_letters.as_deref().unwrap()).await.is_empty());
}

#[tokio::test]
async fn the_dead_letter_consumer_gives_up_an_item_whose_process_died_once_and_leaves_a_malformed_one() {
    // given an item whose last delivery never reported back (the process died): it sits in the
    // dead-letter queue, and the executor is subscribed to that queue
    let mut w = world(vec![Reply::text("never said")], false).await;
    let dead_letters = "arn:aws:sqs:us-east-1:123456789012:switchboard-work-dlq-test.fifo";
    w.wiring.dead_letter_queue_arn = Some(dead_letters.to_owned());
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    let message = receive_work(&w).await.unwrap();
    let mut batch = as_sqs_event(std::slice::from_ref(&message));
    let mut malformed = batch["Records"][0].clone();
    malformed["messageId"] = json!("m-malformed");
    malformed["body"] = json!("{not a work item");
    batch["Records"].as_array_mut().unwrap().push(malformed);
    for record in batch["Records"].as_array_mut().unwrap() {
        record["eventSourceARN"] = json!(dead_letters);
    }
    // when the dead-letter queue's batch arrives
    let response = executor::handle(&w.wiring, event::<SqsEvent>(batch.clone())).await;
    // then the item is given up without running (the model was never called), and only the
    // malformed body is reported failed, to stay in the dead-letter queue
    assert_eq!(failed_ids(&response), ["m-malformed"]);
    assert_eq!(w.bedrock.calls.load(Ordering::SeqCst), 0);
    let tenant: TenantId = "t-1".parse().unwrap();
    let record = w.wiring.store.execution_for_source(&tenant, "message-c-1:m-1").await.unwrap();
    let record = record.unwrap();
    assert_eq!(record.status, ExecutionStatus::Failed);
    assert!(record.error.as_ref().unwrap().message.contains("dead-lettered"), "{:?}", record.error);
    assert_eq!(published_kinds(&w).await, ["session.handoff.human", "execution.failed"]);
    // and the same batch again (SQS delivers at least once) does nothing more
    let response = executor::handle(&w.wiring, event::<SqsEvent>(batch)).await;
    assert_eq!(failed_ids(&response), ["m-malformed"]);
    assert_eq!(published_kinds(&w).await, ["session.handoff.human", "execution.failed"]);
}

#[tokio::test]
async fn persistent_bedrock_throttling_returns_the_item_and_the_recovered_model_replies_exactly_once() {
    let (logs, _guard) = Logs::capture();
    // given a model that throttles every attempt (3) of the first delivery, then answers
    let throttle = Reply::Error(429, "ThrottlingException", "Too many requests, please wait before trying again.");
    let script = vec![throttle.clone(), throttle.clone(), throttle, Reply::text("Happy to help.")];
    let w = world_with(script, Options { model_retry: fast_retry(3), ..Options::default() }).await;
    let envelope = fixture("eventbridge-message-new.json");
    let routed = event_router::handle(&w.wiring.intake, event(envelope.clone())).await.unwrap();
    assert!(matches!(routed, RouteOutcome::Enqueued { .. }), "{routed:?}");
    let tenant: TenantId = "t-1".parse().unwrap();
    let source = source_of(&envelope);

    // when the poller delivers the item
    let (first, response) = poll_once(&w).await.unwrap();
    // then the model was tried three times, the item reported failed (so it stays queued), and
    // nothing reached the customer or the execution log
    assert_eq!(failed_ids(&response), vec![first.message_id().unwrap().to_owned()]);
    assert_eq!(w.bedrock.calls.load(Ordering::SeqCst), 3);
    assert_eq!(w.conversations.attempts(), 0);
    assert!(w.wiring.store.execution_for_source(&tenant, &source).await.unwrap().is_none());
    let failure = logs.lines_with("item failed");
    assert_eq!(failure.len(), 1, "{failure:#?}");
    assert!(failure[0].contains("retryable=true") && failure[0].contains("ThrottlingException"), "{failure:#?}");

    // when it is delivered again, the model having recovered
    let (second, response) = poll_once(&w).await.unwrap();
    assert_eq!(second.message_id(), first.message_id());
    assert_eq!(receive_count(&second), "2");
    // then it succeeds: one model call more, exactly one reply, exactly one execution
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    assert_eq!(w.bedrock.calls.load(Ordering::SeqCst), 4);
    assert_eq!(w.conversations.attempts(), 1);
    let replies = w.conversations.accepted();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].text, "Happy to help.");
    let record = w.wiring.store.execution_for_source(&tenant, &source).await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::Success);
    let executions = w.wiring.store.list_executions(&tenant, record.session_id, None, 100).await.unwrap();
    assert_eq!(executions.items.len(), 1);
    // and the poller deleted it: nothing is left to deliver
    assert!(poll_once(&w).await.is_none());
}

#[tokio::test]
async fn throttling_after_a_reply_went_out_does_not_send_it_twice_on_redelivery() {
    // given a model that replies with send_message, then throttles every attempt (3), and on
    // redelivery gives the same turn again
    let throttle = Reply::Error(429, "ThrottlingException", "Too many requests, please wait before trying again.");
    let reply = Reply::tool_use("tu-1", "send_message", json!({"text": "Your order ships tomorrow."}));
    let script =
        vec![reply.clone(), throttle.clone(), throttle.clone(), throttle, reply, Reply::text("Anything else?")];
    let w = world_with(script, Options { model_retry: fast_retry(3), ..Options::default() }).await;
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    let tenant: TenantId = "t-1".parse().unwrap();

    // when the first delivery fails on the throttled second model call
    let (first, response) = poll_once(&w).await.unwrap();
    assert_eq!(failed_ids(&response), vec![first.message_id().unwrap().to_owned()]);
    // then the reply had already gone out once
    assert_eq!((w.bedrock.calls.load(Ordering::SeqCst), w.conversations.attempts()), (4, 1));
    let key = w.conversations.accepted()[0].idempotency_key.clone();

    // when the redelivery runs the turn again
    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    // then the same reply was sent under the same idempotency key and the service dropped it:
    // the customer got one message; the closing text is not sent after a reply
    assert_eq!((w.bedrock.calls.load(Ordering::SeqCst), w.conversations.attempts()), (6, 2));
    let replies = w.conversations.accepted();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].idempotency_key, key);
    let record = w.wiring.store.execution_for_source(&tenant, "message-c-1:m-1").await.unwrap();
    let record = record.unwrap();
    assert_eq!(format!("t-1/{}", record.tool_calls[0].idempotency_key), key);
    let executions = w.wiring.store.list_executions(&tenant, record.session_id, None, 100).await.unwrap();
    assert_eq!(executions.items.len(), 1);
    assert!(poll_once(&w).await.is_none());
}

// ---- agent-executor: webhook tools on AWS --------------------------------------------------------

const TOOL: &str = "01JDQ8ZJ5V3V7Y9K2M4N6P8R2B";
const SECRET: &str = "whsec-from-secrets-manager-0123456789";

/// The world of `world_with(…, webhooks)`, plus: the tenant's signing secret in Secrets Manager
/// under `switchboard/t-1/<secretRef>` (the name `SecretsManagerSecrets` reads and the
/// agent-executor's IAM policy allows), a webhook tool `lookup_order` at the receiver signed with
/// it, and the agent given that tool. The model calls it, then answers with its result.
async fn webhook_world(webhooks: WebhookPolicy) -> (World, WebhookReceiver) {
    let script = vec![
        Reply::tool_use("tu-1", "lookup_order", json!({"orderId": "1234"})),
        Reply::text("Your order ships Thursday."),
    ];
    let w = world_with(script, Options { webhooks, ..Options::default() }).await;
    let receiver = WebhookReceiver::start("/orders", SECRET).await;
    let secret_ref = tenant_secret(&w).await;
    let tool: Tool = serde_json::from_value(json!({
        "tenantId": "t-1", "toolId": TOOL, "name": "lookup_order", "description": "Finds an order's status",
        "parameters": {"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]},
        "handler": {"type": "webhook", "url": receiver.url, "secretRef": secret_ref, "timeoutMs": 5000,
                    "retryPolicy": {"maxRetries": 0, "backoffMs": 0}},
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    w.wiring.store.put_config(&ConfigRecord::Tool(tool), None, &by()).await.unwrap();
    let agent: Agent = serde_json::from_value(json!({
        "tenantId": "t-1", "agentId": AGENT, "name": "Orders", "systemPrompt": "You look orders up.",
        "model": "anthropic.claude-3-haiku-20240307-v1:0", "tools": ["send_message", TOOL],
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    put(&w.wiring, ConfigRecord::Agent(agent.clone())).await;
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    w.counter.take();
    (w, receiver)
}

/// `SECRET` in Secrets Manager under `switchboard/t-1/<secretRef>`: its `secretRef`.
async fn tenant_secret(w: &World) -> String {
    // Secret names are global on the shared emulator: a fresh secretRef per test.
    let secret_ref = format!("orders-{}", ulid::Ulid::generate().to_string().to_lowercase());
    aws_sdk_secretsmanager::Client::new(&w.sdk)
        .create_secret()
        .name(format!("switchboard/t-1/{secret_ref}"))
        .secret_string(SECRET)
        .send()
        .await
        .unwrap();
    secret_ref
}

#[tokio::test]
async fn a_turn_whose_tool_list_is_too_large_for_an_item_keeps_it_in_s3_and_its_model_calls_read_it_back() {
    // given an agent with thirty tools whose schemas are near the 16 KiB a schema may have (an MCP
    // server's, say), so that the tool list the model is sent is one piece over DynamoDB's item
    // limit, and the executor wired with the bucket for such pieces, as deployed
    let script = vec![Reply::tool_use("tu-1", "send_message", json!({"text": "On its way."})), Reply::text("")];
    let w = world_with(script, Options { large_content: true, ..Options::default() }).await;
    let mut tools = vec![json!("send_message")];
    for i in 0..30 {
        let properties: serde_json::Map<String, Value> = (0..14)
            .map(|p| {
                (format!("field_{p}"), json!({"type": "string", "description": format!("{p} {}", "d".repeat(1000))}))
            })
            .collect();
        let tool_id = format!("01JDQ8ZJ5V3V7Y9K2M4N6P8T{i:02}");
        let tool: Tool = serde_json::from_value(json!({
            "tenantId": "t-1", "toolId": tool_id, "name": format!("lookup_{i}"), "description": "Looks a thing up",
            "parameters": {"type": "object", "properties": properties},
            "handler": {"type": "webhook", "url": "https://tools.example.com/lookup", "secretRef": "orders", "timeoutMs": 5000},
            "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap();
        w.wiring.store.put_config(&ConfigRecord::Tool(tool), None, &by()).await.unwrap();
        tools.push(json!(tool_id));
    }
    let agent: Agent = serde_json::from_value(json!({
        "tenantId": "t-1", "agentId": AGENT, "name": "Support", "systemPrompt": "Be brief.",
        "model": "anthropic.claude-3-haiku-20240307-v1:0", "tools": tools,
        "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
    }))
    .unwrap();
    put(&w.wiring, ConfigRecord::Agent(agent)).await;
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();

    // when the executor handler runs the customer's message
    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);

    // then the tool list is an object in the bucket, under its session and hash
    let tenant: TenantId = "t-1".parse().unwrap();
    let record = w.wiring.store.execution_for_source(&tenant, "message-c-1:m-1").await.unwrap().unwrap();
    let tools_ref = record.model_calls[0].request.as_ref().unwrap().tools.clone();
    assert!(tools_ref.bytes > 380 * 1024, "{tools_ref:?}");
    let object = switchboard_aws::piece_key(&record.session_id.to_string(), &tools_ref.sha256);
    let stored = w.pieces.as_ref().unwrap().get(&object).await.unwrap().expect("the object");
    assert_eq!(stored.len() as u64, tools_ref.bytes);
    // and the model calls read back whole, the tool list as the model was sent it
    let calls = switchboard_engine::recorded::model_calls(w.wiring.store.as_ref(), &record).await.unwrap();
    let tools = calls[0].request.as_ref().unwrap().tools.content.clone().expect("the tool list is kept");
    let names: Vec<&str> = tools.as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names.len(), 31, "{names:?}");
    let sent: Vec<Value> = w.bedrock.requests()[0].1["toolConfig"]["tools"].as_array().unwrap().clone();
    assert_eq!(sent.len(), 31);
}

#[tokio::test]
async fn the_executor_signs_a_webhook_tool_call_with_the_tenants_secret_from_secrets_manager() {
    // given a webhook tool whose receiver listens on loopback (allowed for this test only)
    let (w, receiver) = webhook_world(LOCAL_WEBHOOKS).await;

    // when the executor handler runs the customer's message
    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);

    // then the receiver got one request whose signature verifies with the secret, which the
    // executor read once from Secrets Manager
    let seen = receiver.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].verified, "the signature did not verify with the tenant's secret");
    assert_eq!(seen[0].body["tool"], json!("lookup_order"));
    assert_eq!(seen[0].body["arguments"], json!({"orderId": "1234"}));
    let requests = w.counter.take();
    assert_eq!(requests.iter().filter(|op| op.ends_with("GetSecretValue")).count(), 1, "{requests:?}");
    // and the model got the receiver's answer, and the customer the model's reply
    let second_call = w.bedrock.requests()[1].1.to_string();
    assert!(second_call.contains("shipped") && second_call.contains("Thursday"), "{second_call}");
    let replies = w.conversations.accepted();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].text, "Your order ships Thursday.");
    // and the execution record audits the call under the key the receiver saw, without the secret
    let tenant: TenantId = "t-1".parse().unwrap();
    let record = w.wiring.store.execution_for_source(&tenant, "message-c-1:m-1").await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::Success);
    let call = &record.tool_calls[0];
    assert_eq!((call.name.as_str(), call.is_error), ("lookup_order", false));
    assert_eq!(call.idempotency_key, seen[0].idempotency_key);
    let audit = call.webhook.as_ref().unwrap();
    assert_eq!((audit.host.as_str(), audit.status, audit.outcome.as_str()), ("127.0.0.1", Some(200), "ok"));
    assert!(!serde_json::to_string(&record).unwrap().contains(SECRET));
}

#[tokio::test]
async fn the_executor_calls_an_agents_hook_signed_and_keeps_the_call_in_dynamodb() {
    // given the webhook world, and the agent given a before_tool hook (at a second loopback
    // receiver, signed with the same secret) that changes the order the tool is asked about
    let (w, tool_receiver) = webhook_world(LOCAL_WEBHOOKS).await;
    let hook = WebhookReceiver::answering("/hook", SECRET, |_| json!({ "arguments": { "orderId": "5678" } })).await;
    let tool = w.wiring.store.get_tool(&"t-1".parse().unwrap(), TOOL.parse().unwrap()).await.unwrap().unwrap();
    let switchboard_domain::ToolHandler::Webhook(handler) = &tool.handler else { panic!("a webhook tool") };
    let mut agent: Agent =
        w.wiring.store.get_agent(&"t-1".parse().unwrap(), AGENT.parse().unwrap()).await.unwrap().unwrap();
    agent.hooks = vec![
        serde_json::from_value(json!({
            "at": "before_tool", "tools": ["lookup_order"],
            "handler": { "url": hook.url, "secretRef": handler.secret_ref, "timeoutMs": 5000 }
        }))
        .unwrap(),
    ];
    put(&w.wiring, ConfigRecord::Agent(agent)).await;

    // when the executor handler runs the customer's message
    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);

    // then the hook was asked first, signed with the tenant's secret, and the tool got its change
    let asked = hook.seen();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].verified, "the hook's signature did not verify with the tenant's secret");
    assert_eq!(asked[0].body["toolCall"]["arguments"], json!({"orderId": "1234"}));
    let called = tool_receiver.seen();
    assert_eq!(called.len(), 1);
    assert_eq!(called[0].body["arguments"], json!({"orderId": "5678"}));
    // and the record in DynamoDB keeps the hook's call
    let tenant: TenantId = "t-1".parse().unwrap();
    let record = w.wiring.store.execution_for_source(&tenant, "message-c-1:m-1").await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::Success);
    assert_eq!(record.hook_calls.len(), 1);
    let call = &record.hook_calls[0];
    assert_eq!(
        (call.outcome, call.status, call.tool_use_id.as_deref()),
        (HookOutcome::Changed, Some(200), Some("tu-1"))
    );
}

#[tokio::test]
async fn the_deployed_webhook_policy_refuses_a_loopback_receiver() {
    // given the same tool under the policy deployed functions get (https, public addresses)
    let (w, receiver) = webhook_world(WebhookPolicy::default()).await;

    // when the executor handler runs the message
    let (_, response) = poll_once(&w).await.unwrap();

    // then the call was refused before any secret was read or request sent; the model was told,
    // and the execution still succeeded
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    assert!(receiver.seen().is_empty());
    let requests = w.counter.take();
    assert!(!requests.iter().any(|op| op.ends_with("GetSecretValue")), "{requests:?}");
    let tenant: TenantId = "t-1".parse().unwrap();
    let record = w.wiring.store.execution_for_source(&tenant, "message-c-1:m-1").await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::Success);
    assert!(record.tool_calls[0].is_error);
    assert_eq!(record.tool_calls[0].webhook.as_ref().unwrap().outcome, "blocked");
}

// ---- provider keys from Secrets Manager ------------------------------------------------------------

async fn model_secret(sdk: &aws_config::SdkConfig, value: &str) -> String {
    // Secret names are global on the shared emulator: a fresh one per call.
    let name = format!("switchboard/models-{}", ulid::Ulid::generate().to_string().to_lowercase());
    aws_sdk_secretsmanager::Client::new(sdk).create_secret().name(&name).secret_string(value).send().await.unwrap();
    name
}

fn env_with_secret(names: &AwsNames, secret: Option<String>) -> FunctionEnv {
    FunctionEnv {
        names: names.clone(),
        archive_bucket: None,
        conversations_url: None,
        default_model: None,
        s3_path_style: true,
        model_secret: secret,
        model_config: None,
    }
}

#[tokio::test]
async fn provider_keys_come_from_the_model_secret_before_the_environment() {
    use switchboard_testkit::providers::{FakeProvider, Wire, chat};
    let w = world(vec![], false).await;
    let sm = switchboard_aws::AwsClients::new(&w.sdk);
    let fake = FakeProvider::start(Wire::ChatCompletions, vec![chat::text("hello")]).await;
    let secret = json!({ "OPENAI_API_KEY": "sk-from-secret", "OPENAI_BASE_URL": fake.base_url }).to_string();
    let env = env_with_secret(&w.names, Some(model_secret(&w.sdk, &secret).await));
    // given a process environment holding another key for the same provider
    let process = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-from-environment".to_owned());
    let settings = switchboard_lambda::model_settings(&sm, &env, &process).await.unwrap();
    // when a call goes out, the secret's key is the one sent
    let models = switchboard_models::Models::from_settings(&settings).unwrap();
    let request = ModelRequest {
        model: "openai:gpt-4o-mini".into(),
        system: String::new(),
        messages: vec![switchboard_domain::Message::user_text("hi")],
        tools: vec![],
        config: switchboard_domain::ModelConfig::default(),
        deadline: None,
        recording: switchboard_domain::Recording::Full,
    };
    models.converse(&request).await.unwrap();
    assert_eq!(fake.received()[0].header("authorization"), Some("Bearer sk-from-secret"));
    // and without a secret the environment's key is used
    let plain = switchboard_lambda::model_settings(&sm, &env_with_secret(&w.names, None), &process).await.unwrap();
    assert_eq!(plain.openai.unwrap().api_key.unwrap().expose(), "sk-from-environment");
}

#[tokio::test]
async fn a_model_secret_that_is_missing_or_malformed_stops_the_start_without_showing_its_value() {
    let w = world(vec![], false).await;
    let sm = switchboard_aws::AwsClients::new(&w.sdk);
    let none = |_: &str| None;
    let missing = env_with_secret(&w.names, Some("switchboard/no-such-secret".into()));
    let err = switchboard_lambda::model_settings(&sm, &missing, &none).await.unwrap_err();
    assert!(err.starts_with("SWITCHBOARD_MODEL_SECRET") && err.contains("switchboard/no-such-secret"), "{err}");
    for (value, says) in [
        ("sk-live-not-json", "must be a JSON object"),
        ("[\"sk-live-in-a-list\"]", "must be a JSON object"),
        ("{\"OPENAI_API_KEY\": 42}", "`OPENAI_API_KEY` must be a string"),
    ] {
        let env = env_with_secret(&w.names, Some(model_secret(&w.sdk, value).await));
        let err = switchboard_lambda::model_settings(&sm, &env, &none).await.unwrap_err();
        assert!(err.contains(says), "{err}");
        assert!(!err.contains("sk-live"), "the value leaked: {err}");
    }
}

// ---- tenant bootstrap ----------------------------------------------------------------------------------

async fn api_call(w: &World, method: &str, uri: &str, body: Option<&Value>) -> (u16, Value) {
    let request = lambda_http::http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body.map_or(lambda_http::Body::Empty, |b| lambda_http::Body::Text(b.to_string())))
        .unwrap();
    let response = api::app(api::state(&w.wiring, None)).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_bundle_applied_through_the_internal_api_creates_a_tenant_in_dynamodb_once() {
    let w = world(vec![], false).await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/support/tenant.json");
    let mut bundle: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    bundle["tenantId"] = json!("fresh");
    let agent = bundle["agents"][0]["agentId"].as_str().unwrap().to_owned();
    // before: no such tenant
    assert_eq!(api_call(&w, "GET", "/tenants/fresh/agents", None).await.0, 404);
    // a dry run writes nothing
    let (status, dry) = api_call(&w, "POST", "/tenants/fresh/apply?dryRun=true", Some(&bundle)).await;
    assert_eq!((status, dry["tenantCreated"].clone()), (200, json!(true)), "{dry}");
    assert_eq!(api_call(&w, "GET", "/tenants/fresh/agents", None).await.0, 404);
    // applied: the tenant and its records are in DynamoDB; applied again, nothing changes
    let (status, report) = api_call(&w, "POST", "/tenants/fresh/apply", Some(&bundle)).await;
    assert_eq!(status, 200, "{report}");
    assert!(report["changes"].as_array().unwrap().iter().all(|c| c["change"] == "created"), "{report}");
    let (status, stored) = api_call(&w, "GET", &format!("/tenants/fresh/agents/{agent}"), None).await;
    assert_eq!((status, stored["name"].clone()), (200, bundle["agents"][0]["name"].clone()));
    let (_, again) = api_call(&w, "POST", "/tenants/fresh/apply", Some(&bundle)).await;
    assert_eq!(again["tenantCreated"], json!(false));
    assert!(again["changes"].as_array().unwrap().iter().all(|c| c["change"] == "unchanged"), "{again}");
    // and a tenant made over the API is there for the next call; a second create conflicts
    let body = json!({ "tenantId": "second", "name": "Second" });
    assert_eq!(api_call(&w, "POST", "/tenants", Some(&body)).await.0, 201);
    assert_eq!(api_call(&w, "POST", "/tenants", Some(&body)).await.0, 409);
    assert_eq!(api_call(&w, "GET", "/tenants/second/agents", None).await.0, 200);
    // deleted through the internal API once suspended: nothing of it answers, the other stays
    assert_eq!(api_call(&w, "DELETE", "/tenants/fresh", None).await.0, 409);
    let suspend = json!({ "status": "suspended" });
    assert_eq!(api_call(&w, "PATCH", "/tenants/fresh", Some(&suspend)).await.0, 200);
    assert_eq!(api_call(&w, "DELETE", "/tenants/fresh", None).await.0, 204);
    assert_eq!(api_call(&w, "GET", "/tenants/fresh", None).await.0, 404);
    assert_eq!(api_call(&w, "GET", &format!("/tenants/fresh/agents/{agent}"), None).await.0, 404);
    assert_eq!(api_call(&w, "POST", "/tenants", Some(&json!({ "tenantId": "fresh", "name": "Again" }))).await.0, 201);
    let (_, agents) = api_call(&w, "GET", "/tenants/fresh/agents", None).await;
    assert_eq!(agents["items"], json!([]), "a new tenant of the same id starts empty");
    assert_eq!(api_call(&w, "GET", "/tenants/second", None).await.0, 200);
}

// ---- agents.invoke ------------------------------------------------------------------------------------

async fn invoke_call(state: switchboard_api::ApiState, key: &str) -> (u16, Option<String>, Value) {
    let request = lambda_http::http::Request::builder()
        .method("POST")
        .uri(format!("/tenants/t-1/agents/{AGENT}/invoke"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(lambda_http::Body::Text(json!({ "conversationId": "c-inv", "message": "help me" }).to_string()))
        .unwrap();
    let response = api::app(state).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let location = response.headers().get("location").map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, location, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn invoke_on_aws_waits_for_the_executor_and_answers_like_the_embedded_profile() {
    let script = vec![Reply::tool_use("tu-1", "send_message", json!({"text": "On it."})), Reply::text("")];
    let w = world(script, false).await;
    // the executor function runs the item while the API function waits for its record
    let executor = async {
        loop {
            if let Some(done) = poll_once(&w).await {
                return done;
            }
            tokio::task::yield_now().await;
        }
    };
    let ((status, location, body), (_, batch)) =
        tokio::join!(invoke_call(api::state(&w.wiring, None), "k-1"), executor);
    assert!(batch.batch_item_failures.is_empty());
    assert_eq!((status, location), (200, None), "{body}");
    let keys: Vec<&str> = body.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["actions", "executionId", "sessionId", "status"], "the embedded profile's shape");
    assert_eq!((body["status"].as_str(), body["actions"][0]["type"].as_str()), (Some("success"), Some("reply")));
    assert_eq!(body["actions"][0]["text"], "On it.");
    // the same key again answers the same execution at once, and nothing is queued
    let (status, _, again) = invoke_call(api::state(&w.wiring, None), "k-1").await;
    assert_eq!((status, &again["executionId"]), (200, &body["executionId"]));
    assert!(poll_once(&w).await.is_none_or(|(_, r)| r.batch_item_failures.is_empty()));
    assert_eq!(w.bedrock.requests().len(), 2, "the model ran for one turn only");
}

/// A streamed invoke through the API function's router: status and the stream's events.
async fn invoke_streamed(state: switchboard_api::ApiState, key: &str) -> (u16, Vec<(String, Value)>) {
    let request = lambda_http::http::Request::builder()
        .method("POST")
        .uri(format!("/tenants/t-1/agents/{AGENT}/invoke"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .header("idempotency-key", key)
        .body(lambda_http::Body::Text(json!({ "conversationId": "c-inv", "message": "help me" }).to_string()))
        .unwrap();
    let response = api::app(state).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let events = switchboard_models::sse::SseReader::default().push(&bytes).unwrap();
    (status, events.into_iter().map(|e| (e.event, serde_json::from_str(&e.data).unwrap_or(Value::Null))).collect())
}

#[tokio::test]
async fn a_streamed_invoke_on_aws_follows_the_turn_through_the_turn_log() {
    let script = vec![Reply::tool_use("tu-1", "send_message", json!({"text": "On it."})), Reply::text("")];
    let w = world(script, false).await;
    // the executor function runs the item (writing its events) while the API function streams them
    let executor = async {
        loop {
            if let Some(done) = poll_once(&w).await {
                return done;
            }
            tokio::task::yield_now().await;
        }
    };
    let ((status, events), (_, batch)) = tokio::join!(invoke_streamed(api::state(&w.wiring, None), "k-s"), executor);
    assert!(batch.batch_item_failures.is_empty());
    assert_eq!(status, 200);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    // Bedrock's ConverseStream gives the text beside the tool use a word at a time
    let words = switchboard_testkit::providers::chat::pieces("Let me reply.");
    let mut expected = vec!["execution.started", "model.started"];
    expected.extend(std::iter::repeat_n("text.delta", words.len()));
    expected.extend([
        "model.finished",
        "tool.started",
        "tool.finished",
        "action",
        "model.started",
        "model.finished",
        "execution.finished",
    ]);
    assert_eq!(names, expected, "{events:#?}");
    let text: Vec<&str> =
        events.iter().filter(|(n, _)| n == "text.delta").map(|(_, d)| d["text"].as_str().unwrap()).collect();
    assert_eq!(text, words);
    let record = &events.last().unwrap().1["execution"];
    assert_eq!(events[0].1["executionId"], record["executionId"]);
    let action = events.iter().find(|(n, _)| n == "action").unwrap();
    assert_eq!(action.1["action"], record["actions"][0]);
    assert_eq!(record["actions"][0]["text"], "On it.");
    // the record streamed is the one stored, the same as a plain invoke with the key answers
    let (status, _, plain) = invoke_call(api::state(&w.wiring, None), "k-s").await;
    assert_eq!((status, &plain["executionId"], &plain["actions"]), (200, &record["executionId"], &record["actions"]));
    assert_eq!(w.bedrock.requests().len(), 2, "the model ran for one turn only");
}

#[tokio::test]
async fn a_streamed_invoke_where_turns_cannot_be_followed_is_refused_with_406() {
    let w = world(vec![], false).await;
    let mut state = api::state(&w.wiring, None);
    state.invoker = Arc::new(api::QueueInvoker::new(w.wiring.queue.clone(), w.wiring.store.clone()));
    let (status, events) = invoke_streamed(state, "k-406").await;
    assert_eq!(status, 406);
    assert!(events.is_empty(), "a problem, not a stream");
    assert!(receive_work(&w).await.is_none(), "nothing was queued");
}

#[tokio::test]
async fn the_event_log_on_aws_lists_each_published_event_once_and_only_to_its_tenant() {
    let script = vec![Reply::tool_use("tu-1", "handoff_to_human", json!({"reason": "asked for a person"}))];
    let w = world(script, false).await;
    w.wiring.store.create_tenant(&"t-2".parse().unwrap(), "Other").await.unwrap();
    let executor = async {
        loop {
            if let Some(done) = poll_once(&w).await {
                return done;
            }
            tokio::task::yield_now().await;
        }
    };
    let ((status, _, body), _) = tokio::join!(invoke_call(api::state(&w.wiring, None), "k-ev"), executor);
    assert_eq!((status, body["status"].as_str()), (200, Some("handed_off")), "{body}");
    let (status, log) = api_call(&w, "GET", "/tenants/t-1/events", None).await;
    assert_eq!(status, 200, "{log}");
    let events = log["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 1, "{log}");
    let event = &events[0]["event"];
    assert_eq!(
        (event["detailType"].as_str(), event["tenantId"].as_str()),
        (Some("session.handoff.human"), Some("t-1"))
    );
    assert_eq!(event["detail"]["reason"], "asked for a person");
    // a replayed turn publishes the same event again: it is logged once
    let again: switchboard_domain::OutboundEvent = serde_json::from_value(event.clone()).unwrap();
    assert!(!w.wiring.store.log_event(&again).await.unwrap());
    let (_, log) = api_call(&w, "GET", "/tenants/t-1/events", None).await;
    assert_eq!(log["events"].as_array().unwrap().len(), 1, "{log}");
    // paging: nothing after the last sequence number; another tenant's log is its own
    let seq = events[0]["seq"].as_i64().unwrap();
    let (_, after) = api_call(&w, "GET", &format!("/tenants/t-1/events?after={seq}"), None).await;
    assert_eq!(after["events"], json!([]));
    let (status, other) = api_call(&w, "GET", "/tenants/t-2/events", None).await;
    assert_eq!((status, &other["events"]), (200, &json!([])));
}

#[tokio::test]
async fn the_event_stream_on_aws_replays_the_log_then_polls_it_and_ends_for_a_reconnect() {
    let w = world(vec![], false).await;
    let event = |id: &str| switchboard_domain::OutboundEvent {
        id: id.into(),
        detail_type: "session.handoff.human".into(),
        tenant_id: "t-1".parse().unwrap(),
        detail: json!({ "reason": id }),
    };
    let stream = async |every: Duration, lasting: Duration| {
        let mut state = api::state(&w.wiring, None);
        state.live = Some(Arc::new(api::PolledEvents::new(w.wiring.store.clone()).timed(every, lasting)));
        let request = lambda_http::http::Request::builder()
            .method("GET")
            .uri("/tenants/t-1/events/stream")
            .body(lambda_http::Body::Empty)
            .unwrap();
        let response = api::app(state).oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        response.into_body().into_data_stream()
    };
    let id_of = |e: &switchboard_models::sse::SseEvent| serde_json::from_str::<Value>(&e.data).unwrap()["id"].clone();
    w.wiring.store.log_event(&event("ev-1")).await.unwrap();
    // open: the logged event first, then one published meanwhile, found by reading the log
    let mut body = stream(Duration::from_millis(20), Duration::from_secs(600)).await;
    let mut reader = switchboard_models::sse::SseReader::default();
    let mut events = Vec::new();
    while events.len() < 2 {
        let chunk = futures::StreamExt::next(&mut body).await.expect("the stream ended early").unwrap();
        events.extend(reader.push(&chunk).unwrap());
        if events.len() == 1 {
            w.wiring.store.log_event(&event("ev-2")).await.unwrap();
        }
    }
    assert_eq!(events.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(), ["session.handoff.human"; 2]);
    assert_eq!(events.iter().map(id_of).collect::<Vec<_>>(), [json!("ev-1"), json!("ev-2")]);
    drop(body);
    // its time up, a stream gives what the log holds and ends, for the reader to reconnect
    let mut body = stream(Duration::from_millis(20), Duration::ZERO).await;
    let mut reader = switchboard_models::sse::SseReader::default();
    let mut all = Vec::new();
    while let Some(chunk) = futures::StreamExt::next(&mut body).await {
        all.extend(reader.push(&chunk.unwrap()).unwrap());
    }
    assert_eq!(all.iter().map(id_of).collect::<Vec<_>>(), [json!("ev-1"), json!("ev-2")], "each once, then the end");
}

#[tokio::test]
async fn invoke_past_its_bound_answers_202_with_where_the_execution_will_be() {
    let script = vec![Reply::tool_use("tu-1", "send_message", json!({"text": "Later."})), Reply::text("")];
    let w = world(script, false).await;
    let mut state = api::state(&w.wiring, None);
    state.invoker =
        Arc::new(api::QueueInvoker::new(w.wiring.queue.clone(), w.wiring.store.clone()).with_bound(Duration::ZERO));
    let (status, location, body) = invoke_call(state, "k-2").await;
    assert_eq!(status, 202, "{body}");
    let location = location.unwrap();
    assert_eq!(location, "/tenants/t-1/executions?sourceId=invoke-k-2");
    assert_eq!((body["status"].as_str(), body["location"].as_str()), (Some("queued"), Some(location.as_str())));
    // not there yet
    assert_eq!(api_call(&w, "GET", &location, None).await.0, 404);
    // once the executor has run it, the location answers the record
    poll_once(&w).await.unwrap();
    let (status, record) = api_call(&w, "GET", &location, None).await;
    assert_eq!(
        (status, record["sourceId"].as_str(), record["status"].as_str()),
        (200, Some("invoke-k-2"), Some("success"))
    );
    assert_eq!(api_call(&w, "GET", "/tenants/t-1/executions", None).await.0, 400, "sourceId is required");
}

#[tokio::test]
async fn a_suspended_tenant_is_not_answered_until_it_is_active_again() {
    let w =
        world(vec![Reply::tool_use("tu-1", "send_message", json!({"text": "Back."})), Reply::text("")], false).await;
    let t1: TenantId = "t-1".parse().unwrap();
    // suspended over the internal API
    let (status, tenant) = api_call(&w, "PATCH", "/tenants/t-1", Some(&json!({ "status": "suspended" }))).await;
    assert_eq!((status, tenant["status"].as_str()), (200, Some("suspended")), "{tenant}");
    // the router routes nothing for it
    let outcome = event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    assert_eq!(outcome, RouteOutcome::Suspended);
    assert!(poll_once(&w).await.is_none(), "nothing queued");
    // active again: a router container that read the tenant keeps it for TENANT_CACHE_TTL (so
    // still suspended there); one that starts now answers the next message
    let mut active = w.wiring.store.get_tenant(&t1).await.unwrap().unwrap();
    active.status = switchboard_domain::TenantStatus::Active;
    assert!(w.wiring.store.update_tenant(&active).await.unwrap());
    let warm = event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    assert_eq!(warm, RouteOutcome::Suspended);
    let restarted = w.wiring.restarted();
    let outcome =
        event_router::handle(&restarted.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    assert!(matches!(outcome, RouteOutcome::Enqueued { .. }), "{outcome:?}");
    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
}

// ---- metrics -------------------------------------------------------------------------------------------

/// Checks one line against the Embedded Metric Format: a `_aws` directive naming the namespace,
/// dimension sets whose keys are top-level strings, and metrics whose names are top-level numbers.
fn check_emf(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert!(v["_aws"]["Timestamp"].is_u64(), "{line}");
    let directives = v["_aws"]["CloudWatchMetrics"].as_array().unwrap();
    assert_eq!(directives.len(), 1);
    let d = &directives[0];
    assert_eq!(d["Namespace"], "Switchboard");
    for set in d["Dimensions"].as_array().unwrap() {
        let keys = set.as_array().unwrap();
        assert!(!keys.is_empty() && keys.len() <= 30, "{line}");
        for k in keys {
            assert!(v[k.as_str().unwrap()].is_string(), "dimension {k} is not a top-level string: {line}");
        }
    }
    let metrics = d["Metrics"].as_array().unwrap();
    assert!(!metrics.is_empty() && metrics.len() <= 100);
    for m in metrics {
        let name = m["Name"].as_str().unwrap();
        assert!(v[name].is_number(), "metric {name} has no value: {line}");
        assert!(m["Unit"].is_string());
    }
    v
}

#[tokio::test]
async fn the_functions_count_routing_and_executions_in_embedded_metric_format() {
    let script = vec![Reply::tool_use("tu-1", "send_message", json!({"text": "Hi."})), Reply::text("")];
    let mut w = world(script, false).await;
    let buffer: Arc<Mutex<Vec<u8>>> = Arc::default();
    w.wiring = w.wiring.with_metrics(Arc::new(switchboard_lambda::emf::EmfMetrics::to(buffer.clone())));
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    let (_, response) = poll_once(&w).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    let lines: Vec<Value> = text.lines().map(check_emf).collect();
    // one routing outcome, one execution, one line per model call, one per tool call
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!((lines[0]["Outcome"].as_str(), lines[0]["InboundEvents"].as_f64()), (Some("enqueued"), Some(1.0)));
    assert_eq!(lines[0]["TenantId"], "t-1", "the tenant is a property, not a dimension");
    assert_eq!((lines[1]["Status"].as_str(), lines[1]["Executions"].as_f64()), (Some("success"), Some(1.0)));
    let tool = &lines[4];
    assert_eq!((tool["ToolKind"].as_str(), tool["Outcome"].as_str()), (Some("system"), Some("ok")), "{tool}");
    assert_eq!((tool["ToolCalls"].as_f64(), tool["ToolName"].as_str()), (Some(1.0), Some("send_message")));
    for call in &lines[2..4] {
        assert_eq!(call["Model"], "anthropic.claude-3-haiku-20240307-v1:0", "the adapter as this world wires it");
        assert!(call["InputTokens"].as_f64().unwrap() > 0.0);
        assert!(call["CostUsd"].as_f64().unwrap() > 0.0, "a priced model: {call}");
    }
}

#[tokio::test]
async fn limit_hits_and_model_throttles_are_metrics_an_alarm_can_name() {
    let script = vec![Reply::Error(429, "ThrottlingException", "Too many requests"); 12];
    let mut w = world(script, false).await;
    let buffer: Arc<Mutex<Vec<u8>>> = Arc::default();
    w.wiring = w
        .wiring
        .with_metrics(Arc::new(switchboard_lambda::emf::EmfMetrics::to(buffer.clone())))
        .with_clock(common::ManualClock::new());
    let one = json!({ "limits": { "invocationsPerMinute": 1 } });
    assert_eq!(api_call(&w, "PATCH", "/tenants/t-1", Some(&one)).await.0, 200);
    // the first message runs and its model is throttled to the end; the second is refused
    event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    poll_once(&w).await.unwrap();
    let mut second = fixture("eventbridge-message-new.json");
    second["id"] = json!("refused-event");
    second["detail"]["conversationId"] = json!("c-2");
    assert_eq!(event_router::handle(&w.wiring.intake, event(second)).await.unwrap().as_str(), "rate_limited");
    // an invoke the same limit refuses is a hit too
    let invoke = format!("/tenants/t-1/agents/{}/invoke", AGENT);
    assert_eq!(api_call(&w, "POST", &invoke, Some(&json!({ "conversationId": "c-3" }))).await.0, 429);
    let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    let lines: Vec<Value> = text.lines().map(check_emf).collect();
    let named = |metric: &str| lines.iter().filter(|l| l.get(metric).is_some()).cloned().collect::<Vec<_>>();
    let throttles = named("ModelThrottles");
    assert_eq!(throttles.len(), 1, "{text}");
    assert!(throttles[0]["ModelThrottles"].as_f64().unwrap() >= 1.0);
    let hits = named("LimitHits");
    assert_eq!(hits.len(), 2, "the router's refusal and the invoke's: {text}");
    assert!(hits.iter().all(|h| h["Limit"] == "invocationsPerMinute"), "{text}");
    for line in throttles.iter().chain(&hits) {
        // one dimension, the function's name (what the template's alarms name)
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["FunctionName"]]), "{line}");
        assert_eq!(line["FunctionName"], "local");
    }
    assert_eq!((hits[0]["TenantId"].as_str(), hits[0]["Outcome"].as_str()), (Some("t-1"), Some("rate_limited")));
}

// ---- tenant limits ---------------------------------------------------------------------------------

#[tokio::test]
async fn tenant_limits_refuse_at_the_router_and_at_invoke_from_shared_counters_and_announce_once() {
    let script = vec![Reply::tool_use("tu-1", "send_message", json!({"text": "Hello!"})), Reply::text("")];
    let mut w = world(script, false).await;
    // a clock that stays inside one minute, so the window cannot turn over mid-test
    let clock = common::ManualClock::new();
    w.wiring = w.wiring.with_clock(clock.clone());
    let eb = aws_sdk_eventbridge::Client::new(&w.sdk);
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let (capture, arn) = queue_with_arn(&sqs, "limit-events").await;
    rule_to_queue(&eb, &w.names.event_bus, "limits", json!({"detail-type": ["tenant.limit.reached"]}), &arn).await;

    // out-of-range limits are refused field by field; good ones are stored in DynamoDB
    let bad = json!({ "limits": { "invocationsPerMinute": 0, "onLimit": { "action": "message", "text": "" } } });
    let (status, problem) = api_call(&w, "PATCH", "/tenants/t-1", Some(&bad)).await;
    let pointers: Vec<&str> =
        problem["errors"].as_array().unwrap().iter().filter_map(|e| e["pointer"].as_str()).collect();
    assert_eq!((status, pointers), (400, vec!["/limits/invocationsPerMinute", "/limits/onLimit/text"]), "{problem}");
    let good = json!({ "limits": { "invocationsPerMinute": 1, "onLimit": { "action": "message", "text": "Busy." } } });
    let (status, tenant) = api_call(&w, "PATCH", "/tenants/t-1", Some(&good)).await;
    assert_eq!((status, &tenant["limits"]["invocationsPerMinute"]), (200, &json!(1)), "{tenant}");
    assert_eq!(tenant["limits"]["tokensPerDay"], 1_000_000, "limits not given keep their value");

    // the first message of the minute is answered
    let first = event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    assert!(matches!(first, RouteOutcome::Enqueued { .. }), "{first:?}");
    assert!(poll_once(&w).await.unwrap().1.batch_item_failures.is_empty());
    // the second is recorded as refused and answered with the tenant's message
    let mut second = fixture("eventbridge-message-new.json");
    second["id"] = json!("second-event");
    second["detail"]["messageId"] = json!("m-2");
    second["detail"]["conversationId"] = json!("c-2");
    let routed = event_router::handle(&w.wiring.intake, event(second)).await.unwrap();
    assert_eq!(routed.as_str(), "rate_limited");
    assert!(poll_once(&w).await.unwrap().1.batch_item_failures.is_empty());
    let t1: TenantId = "t-1".parse().unwrap();
    let record = w.wiring.store.execution_for_source(&t1, "message-c-2:m-2").await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::RateLimited);
    assert_eq!(w.bedrock.requests().len(), 2, "the model ran for the first message only");
    let sent: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(sent, ["Hello!", "Busy."]);

    // invoke is refused with 429 and Retry-After, and nothing is queued
    let request = lambda_http::http::Request::builder()
        .method("POST")
        .uri(format!("/tenants/t-1/agents/{AGENT}/invoke"))
        .header("content-type", "application/json")
        .body(lambda_http::Body::Text(json!({ "conversationId": "c-3", "message": "help" }).to_string()))
        .unwrap();
    let response = api::app(api::state(&w.wiring, None)).oneshot(request).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "60");
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let problem: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(problem["type"], "urn:switchboard:problem:rate-limited", "{problem}");
    assert!(poll_once(&w).await.is_none(), "nothing queued");

    // one tenant.limit.reached for the window, however many refusals: logged with its claim,
    // published by the stream's relay (nothing before it)
    assert!(receive_all(&sqs, &capture).await.is_empty(), "published before the relay");
    let outbox = outbox_stream(&w.sdk, &w.names.executions_table, "t-1").await;
    let bus = EventBridgeBus::from_config(&w.sdk, w.names.event_bus.clone());
    assert!(relay::handle(&bus, event::<StreamEvent>(outbox)).await.batch_item_failures.is_empty());
    let announced = receive_all(&sqs, &capture).await;
    assert_eq!(announced.len(), 1);
    let body: Value = serde_json::from_str(announced[0].body().unwrap()).unwrap();
    assert_eq!(
        (&body["detail"]["limit"], &body["detail"]["value"], &body["detail"]["tenantId"]),
        (&json!("invocationsPerMinute"), &json!(1), &json!("t-1")),
        "{body}"
    );

    // the next minute is a new window
    clock.advance(chrono::Duration::minutes(1));
    let mut third = fixture("eventbridge-message-new.json");
    third["id"] = json!("third-event");
    third["detail"]["messageId"] = json!("m-3");
    let routed = event_router::handle(&w.wiring.intake, event(third)).await.unwrap();
    assert!(matches!(routed, RouteOutcome::Enqueued { .. }), "{routed:?}");
}

#[tokio::test]
async fn a_deferred_message_is_held_on_the_queue_until_its_window_then_answered_or_recorded_at_its_last_delivery() {
    let script = vec![
        Reply::tool_use("tu-1", "send_message", json!({"text": "Hello!"})),
        Reply::text(""),
        Reply::tool_use("tu-2", "send_message", json!({"text": "Thanks for waiting."})),
        Reply::text(""),
    ];
    let mut w = world(script, false).await;
    let clock = common::ManualClock::new();
    w.wiring = w.wiring.with_clock(clock.clone());
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let defer = json!({ "limits": { "invocationsPerMinute": 1, "onLimit": { "action": "defer" } } });
    assert_eq!(api_call(&w, "PATCH", "/tenants/t-1", Some(&defer)).await.0, 200);
    let first = event_router::handle(&w.wiring.intake, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    assert!(matches!(first, RouteOutcome::Enqueued { .. }), "{first:?}");
    assert!(poll_once(&w).await.unwrap().1.batch_item_failures.is_empty());
    let mut second = fixture("eventbridge-message-new.json");
    second["id"] = json!("deferred-event");
    second["detail"]["messageId"] = json!("m-2");
    second["detail"]["conversationId"] = json!("c-2");
    assert_eq!(event_router::handle(&w.wiring.intake, event(second)).await.unwrap().as_str(), "rate_limited");

    // the executor finds the minute still used: the item is reported failed and held
    let message = receive_work(&w).await.unwrap();
    let response = executor::handle(&w.wiring, event::<SqsEvent>(as_sqs_event(std::slice::from_ref(&message)))).await;
    assert_eq!(response.batch_item_failures.len(), 1);
    assert!(receive_work(&w).await.is_none(), "held by its visibility, not redelivered at once");
    let t1: TenantId = "t-1".parse().unwrap();
    assert!(w.wiring.store.execution_for_source(&t1, "message-c-2:m-2").await.unwrap().is_none(), "not recorded yet");
    assert_eq!(w.conversations.accepted().len(), 1, "nothing sent while deferred");

    // the window reopens (SQS's hold ends; the test ends it instead of waiting a minute)
    clock.advance(chrono::Duration::minutes(1));
    sqs.change_message_visibility()
        .queue_url(&w.names.work_queue_url)
        .receipt_handle(message.receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let (again, response) = poll_once(&w).await.unwrap();
    assert_eq!(again.message_id(), message.message_id());
    assert!(response.batch_item_failures.is_empty());
    let record = w.wiring.store.execution_for_source(&t1, "message-c-2:m-2").await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::Success);
    let sent: Vec<String> = w.conversations.accepted().into_iter().map(|r| r.text).collect();
    assert_eq!(sent, ["Hello!", "Thanks for waiting."]);

    // a deferred message whose delivery is the queue's last is recorded as refused, not held
    w.wiring.max_receives = 1;
    let mut third = fixture("eventbridge-message-new.json");
    third["id"] = json!("last-event");
    third["detail"]["messageId"] = json!("m-3");
    third["detail"]["conversationId"] = json!("c-3");
    assert_eq!(event_router::handle(&w.wiring.intake, event(third)).await.unwrap().as_str(), "rate_limited");
    assert!(poll_once(&w).await.unwrap().1.batch_item_failures.is_empty());
    let record = w.wiring.store.execution_for_source(&t1, "message-c-3:m-3").await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::RateLimited);
    assert_eq!(w.conversations.accepted().len(), 2, "nothing sent for it");
}

#[tokio::test]
async fn api_keys_are_not_a_thing_on_aws_where_iam_authorises_callers() {
    let w = world(vec![], false).await;
    for (method, path) in
        [("POST", "/tenants/t-1/keys"), ("GET", "/tenants/t-1/keys"), ("DELETE", "/tenants/t-1/keys/0123456789abcdef")]
    {
        let body = (method == "POST").then(|| json!({ "principal": "ann", "role": "operator" }));
        let (status, problem) = api_call(&w, method, path, body.as_ref()).await;
        assert_eq!(status, 404, "{method} {path}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains("IAM"), "{problem}");
    }
}

#[tokio::test]
async fn the_overview_on_aws_says_its_dead_letters_are_not_counted_per_tenant() {
    let w = world(vec![], false).await;
    let (status, body) = api_call(&w, "GET", "/tenants/t-1/activity", None).await;
    assert_eq!(status, 200, "{body}");
    // present and null: the work queue's dead-letter queue is shared, and alarmed on as a whole
    assert_eq!(body.get("deadLetters"), Some(&Value::Null), "{body}");
}

#[tokio::test]
async fn the_deployed_router_needs_only_the_store_the_queue_and_the_bus() {
    let w = world(vec![], false).await;
    // the event-router binary's engine: no model, webhooks, secrets or Conversations client
    let env = FunctionEnv {
        names: w.names.clone(),
        archive_bucket: None,
        conversations_url: None,
        default_model: None,
        s3_path_style: false,
        model_secret: None,
        model_config: None,
    };
    let router = switchboard_lambda::wiring::event_router(&w.sdk, &env);
    let handled = event_router::dispatch(&router, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    assert!(
        matches!(handled, event_router::Handled::Routed(RouteOutcome::Enqueued { duplicate: false, .. })),
        "{handled:?}"
    );
    // the same event again (EventBridge's at-least-once) is dropped by the FIFO queue's dedup
    event_router::dispatch(&router, event(fixture("eventbridge-message-new.json"))).await.unwrap();
    let sqs = aws_sdk_sqs::Client::new(&w.sdk);
    let queued = common::drain_queue(&sqs, &w.names.work_queue_url).await;
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].0, "t-1:c-1");
    // and its schedule's tick sweeps approvals (none waits here) with the same wiring
    let tick = event_router::dispatch(&router, event(fixture("eventbridge-scheduled-event.json"))).await.unwrap();
    assert_eq!(tick, event_router::Handled::Ticked(event_router::Tick::default()));
    assert!(common::drain_queue(&sqs, &w.names.work_queue_url).await.is_empty());
}

#[tokio::test]
async fn the_deployed_internal_api_answers_without_any_model_or_webhook_client() {
    let w = world(vec![], false).await;
    let env = FunctionEnv {
        names: w.names.clone(),
        archive_bucket: None,
        conversations_url: Some(w.conversations.base_url.clone()),
        default_model: None,
        s3_path_style: false,
        model_secret: None,
        model_config: None,
    };
    let wiring = Wiring::api(&w.sdk, &env).unwrap();
    let call = |method: &str, uri: &str, body: Option<Value>| {
        let request = lambda_http::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(body.map_or(lambda_http::Body::Empty, |b| lambda_http::Body::Text(b.to_string())))
            .unwrap();
        let app = api::app(api::state(&wiring, None));
        async move {
            let response = app.oneshot(request).await.unwrap();
            let status = response.status().as_u16();
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    // configuration is read and events are taken in, as with the full wiring
    let (status, agents) = call("GET", "/tenants/t-1/agents", None).await;
    assert_eq!((status, agents["items"][0]["agentId"].as_str()), (200, Some(AGENT)), "{agents}");
    let envelope = fixture("eventbridge-message-new.json");
    let (status, routed) = call("POST", "/events", Some(envelope)).await;
    assert_eq!((status, routed["outcome"].as_str()), (202, Some("enqueued")), "{routed}");
}
