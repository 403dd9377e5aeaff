//! Test harness for the AWS adapters: one moto server per test binary, fresh tables and queues
//! per test (unique names, so tests share the server), a manual clock, a fake Bedrock Converse
//! server and an SDK interceptor that counts requests.
//!
//! moto's lifetime: it runs under a tiny Python watchdog whose stdin is a pipe held by this
//! process. When the test binary exits for any reason (even a crash or SIGKILL) the pipe closes,
//! the watchdog reads EOF and terminates moto. Nothing outlives `cargo test`.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use switchboard_aws::AwsNames;
use switchboard_aws::dynamo::{SESSIONS_AWAITING_APPROVAL, SESSIONS_BY_CONVERSATION};

pub use crate::ManualClock;

// ---- moto -----------------------------------------------------------------------------------------

/// Runs moto's server (what `moto_server` runs) with one difference: DynamoDB requests are
/// served one at a time. DynamoDB applies each write, condition and transaction atomically;
/// moto checks a condition and applies the write in separate Python steps, so two threads can
/// both pass `count < limit`. The adapters' guarantees (exactly the limit admitted, one caller
/// first) rest on DynamoDB's atomicity, so the emulator must give it. SQS and S3 stay threaded
/// (a long-polling receive must not hold up a send).
const LAUNCHER: &str = "import os, sys, threading
os.environ.setdefault('MOTO_PORT', sys.argv[2])
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()
def serve(environ, start_response):
    if environ.get('HTTP_X_AMZ_TARGET', '').startswith('DynamoDB_'):
        with lock:
            return list(app(environ, start_response))
    return app(environ, start_response)
run_simple(sys.argv[1], int(sys.argv[2]), serve, threaded=True, request_handler=MotoRequestHandler)
";

/// Terminates moto when this process's end closes the watchdog's stdin.
const WATCHDOG: &str = "import subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    sys.stdin.buffer.read()
finally:
    p.terminate()
    try:
        p.wait(5)
    except Exception:
        p.kill()
";

#[derive(Debug)]
pub struct Moto {
    pub endpoint: String,
    /// Held so the watchdog's stdin stays open until the process ends.
    _watchdog: Mutex<Child>,
}

static MOTO: OnceLock<Moto> = OnceLock::new();

fn moto_path() -> PathBuf {
    match std::env::var_os("SWITCHBOARD_MOTO_SERVER") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-emulator/bin/moto_server"),
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// `GET /moto-api/` answers once the server is up.
fn moto_ready(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// The binary's moto server, started on first use.
pub fn moto() -> &'static Moto {
    MOTO.get_or_init(|| {
        let server = moto_path();
        assert!(
            server.exists(),
            "moto server not found at {}: run ./scripts/test.sh, which installs it into .venv-emulator \
             (or set SWITCHBOARD_MOTO_SERVER to a moto_server executable)",
            server.display()
        );
        let python = server.parent().map(|d| d.join("python3")).filter(|p| p.exists()).unwrap_or("python3".into());
        let port = free_port();
        let child = Command::new(&python)
            .arg("-c")
            .arg(WATCHDOG)
            .arg(&python)
            .args(["-c", LAUNCHER, "127.0.0.1", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the moto watchdog");
        // Waiting for a process to start (not for work): bounded at 60 s.
        let mut ready = false;
        for _ in 0..600 {
            if moto_ready(port) {
                ready = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(ready, "moto did not answer on 127.0.0.1:{port} within 60 s");
        Moto { endpoint: format!("http://127.0.0.1:{port}"), _watchdog: Mutex::new(child) }
    })
}

// ---- resources ------------------------------------------------------------------------------------

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", ulid::Ulid::generate().to_string().to_lowercase())
}

fn attr(name: &str) -> AttributeDefinition {
    AttributeDefinition::builder().attribute_name(name).attribute_type(ScalarAttributeType::S).build().unwrap()
}

fn key(name: &str, kind: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder().attribute_name(name).key_type(kind).build().unwrap()
}

/// Creates a table keyed `PK` + `SK` (strings), as every table of the stack is, with `gsi` if any
/// (keyed by two string attributes).
pub async fn create_table(client: &aws_sdk_dynamodb::Client, name: &str, gsi: Option<GlobalSecondaryIndex>) {
    let mut req = table_request(client, name);
    if let Some(gsi) = gsi {
        for k in gsi.key_schema() {
            req = req.attribute_definitions(attr(k.attribute_name()));
        }
        req = req.global_secondary_indexes(gsi);
    }
    req.send().await.unwrap();
}

fn table_request(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder {
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("PK"))
        .attribute_definitions(attr("SK"))
        .key_schema(key("PK", KeyType::Hash))
        .key_schema(key("SK", KeyType::Range))
}

/// The sessions table as the template makes it: `SessionsByConversation`, and the sparse
/// `SessionsAwaitingApproval` (its sort key a number) and `SessionsIdle` (keys only).
async fn create_sessions_table(client: &aws_sdk_dynamodb::Client, name: &str) {
    let index = |name: &str, hash: &str, range: &str| {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .key_schema(key(hash, KeyType::Hash))
            .key_schema(key(range, KeyType::Range))
            .projection(Projection::builder().projection_type(ProjectionType::All).build())
            .build()
            .unwrap()
    };
    let since =
        AttributeDefinition::builder().attribute_name("awaitingSince").attribute_type(ScalarAttributeType::N).build();
    let idle = GlobalSecondaryIndex::builder()
        .index_name(switchboard_aws::dynamo::SESSIONS_IDLE)
        .key_schema(key("idleShard", KeyType::Hash))
        .key_schema(key("idleAt", KeyType::Range))
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .unwrap();
    table_request(client, name)
        .attribute_definitions(attr("conversationKey"))
        .attribute_definitions(attr("startKey"))
        .attribute_definitions(attr("awaitingTenant"))
        .attribute_definitions(since.unwrap())
        .attribute_definitions(attr("idleShard"))
        .attribute_definitions(attr("idleAt"))
        .global_secondary_indexes(index(SESSIONS_BY_CONVERSATION, "conversationKey", "startKey"))
        .global_secondary_indexes(index(SESSIONS_AWAITING_APPROVAL, "awaitingTenant", "awaitingSince"))
        .global_secondary_indexes(idle)
        .send()
        .await
        .unwrap();
}

/// The config table's sparse `SchedulesDue` index, as the template makes it.
fn schedules_due() -> GlobalSecondaryIndex {
    GlobalSecondaryIndex::builder()
        .index_name(switchboard_aws::dynamo::SCHEDULES_DUE)
        .key_schema(key("dueShard", KeyType::Hash))
        .key_schema(key("nextSlot", KeyType::Range))
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .unwrap()
}

/// Creates the three tables (keys, GSI and TTL as the template will), a FIFO queue and an event
/// bus, all with fresh names.
pub async fn provision(config: &aws_config::SdkConfig) -> AwsNames {
    let dynamodb = aws_sdk_dynamodb::Client::new(config);
    let names = AwsNames {
        config_table: unique("config"),
        sessions_table: unique("sessions"),
        executions_table: unique("executions"),
        work_queue_url: String::new(),
        event_bus: unique("bus"),
    };
    create_table(&dynamodb, &names.config_table, Some(schedules_due())).await;
    create_sessions_table(&dynamodb, &names.sessions_table).await;
    create_table(&dynamodb, &names.executions_table, None).await;
    dynamodb
        .update_time_to_live()
        .table_name(&names.executions_table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder().attribute_name("expiresAt").enabled(true).build().unwrap(),
        )
        .send()
        .await
        .unwrap();
    let sqs = aws_sdk_sqs::Client::new(config);
    let queue = sqs
        .create_queue()
        .queue_name(format!("{}.fifo", unique("work")))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap();
    let eventbridge = aws_sdk_eventbridge::Client::new(config);
    eventbridge.create_event_bus().name(&names.event_bus).send().await.unwrap();
    AwsNames { work_queue_url: queue.queue_url.unwrap(), ..names }
}

/// A fresh FIFO work queue whose redrive policy moves an item to a fresh FIFO dead-letter queue
/// after `max_receives` receives, as the template's `WorkQueue` does (after 5): `(work queue
/// URL, dead-letter queue URL)`.
pub async fn fifo_queue_with_dead_letters(config: &aws_config::SdkConfig, max_receives: u32) -> (String, String) {
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let sqs = aws_sdk_sqs::Client::new(config);
    let fifo = |name: String| sqs.create_queue().queue_name(name).attributes(Q::FifoQueue, "true");
    let dlq = fifo(format!("{}.fifo", unique("work-dlq"))).send().await.unwrap().queue_url.unwrap();
    let attrs = sqs.get_queue_attributes().queue_url(&dlq).attribute_names(Q::QueueArn).send().await.unwrap();
    let dlq_arn = attrs.attributes.unwrap()[&Q::QueueArn].clone();
    let redrive = serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receives });
    let work = fifo(format!("{}.fifo", unique("work")))
        .attributes(Q::RedrivePolicy, redrive.to_string())
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    (work, dlq)
}

/// Receives and deletes every message in the queue: `(group id, dedup id, body)`.
pub async fn drain_queue(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<(String, String, String)> {
    use aws_sdk_sqs::types::MessageSystemAttributeName as A;
    let mut out = Vec::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(A::All)
            .wait_time_seconds(0)
            .send()
            .await
            .unwrap();
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            let attrs = m.attributes.clone().unwrap_or_default();
            out.push((
                attrs.get(&A::MessageGroupId).cloned().unwrap_or_default(),
                attrs.get(&A::MessageDeduplicationId).cloned().unwrap_or_default(),
                m.body.clone().unwrap_or_default(),
            ));
            sqs.delete_message().queue_url(url).receipt_handle(m.receipt_handle.unwrap()).send().await.unwrap();
        }
    }
}

// ---- request counting ---------------------------------------------------------------------------

/// Counts every HTTP attempt an SDK client makes, by `Service.Operation` (and prints each one's
/// body, cut short, when `SWITCHBOARD_TEST_PRINT_REQUESTS` is set).
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<Mutex<Vec<String>>>);

impl RequestCounter {
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg.load::<Metadata>().map_or("?".to_owned(), |m| format!("{}.{}", m.service(), m.name()));
        // Which items a request touches, when looking for requests to save.
        if std::env::var_os("SWITCHBOARD_TEST_PRINT_REQUESTS").is_some() {
            let body = context.request().body().bytes().map(String::from_utf8_lossy);
            eprintln!("{op} {}", body.as_deref().unwrap_or("(streamed body)").chars().take(400).collect::<String>());
        }
        self.0.lock().unwrap().push(op);
        Ok(())
    }
}

// ---- fake Bedrock Converse ---------------------------------------------------------------------------

/// One scripted answer of the fake Converse server.
#[derive(Debug, Clone)]
pub enum Reply {
    Ok(serde_json::Value),
    /// HTTP status, `x-amzn-errortype`, message.
    Error(u16, &'static str, &'static str),
    /// ConverseStream only: these event frames as they are (a stream cut short, an error event).
    Frames(Vec<u8>),
}

impl Reply {
    pub fn text(text: &str) -> Self {
        Reply::Ok(crate::providers::converse::text_body(text))
    }

    pub fn tool_use(id: &str, name: &str, input: serde_json::Value) -> Self {
        Reply::Ok(serde_json::json!({
            "output": {"message": {"role": "assistant", "content": [
                {"text": "Let me reply."},
                {"toolUse": {"toolUseId": id, "name": name, "input": input}}
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 20, "outputTokens": 9, "totalTokens": 29},
            "metrics": {"latencyMs": 5}
        }))
    }
}

#[derive(Debug, Default)]
struct FakeState {
    script: VecDeque<Reply>,
    /// `(model id, request body)` of every call received.
    requests: Vec<(String, serde_json::Value)>,
}

/// A Converse endpoint on 127.0.0.1 answering from a script; the server task ends with the test's
/// runtime.
#[derive(Debug, Clone)]
pub struct FakeBedrock {
    pub endpoint: String,
    state: Arc<Mutex<FakeState>>,
    pub calls: Arc<AtomicUsize>,
}

impl FakeBedrock {
    pub async fn start(script: Vec<Reply>) -> Self {
        use axum::extract::{Path, State};
        use axum::http::{HeaderName, HeaderValue, StatusCode};
        use axum::response::{IntoResponse, Response};

        type Shared = (Arc<Mutex<FakeState>>, Arc<AtomicUsize>);
        async fn converse(
            State((state, calls)): State<Shared>,
            Path(model_id): Path<String>,
            body: axum::body::Bytes,
        ) -> Response {
            calls.fetch_add(1, Ordering::SeqCst);
            let json: serde_json::Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => return (StatusCode::BAD_REQUEST, format!("not JSON: {e}")).into_response(),
            };
            let next = {
                let mut s = state.lock().unwrap();
                s.requests.push((model_id, json));
                s.script.pop_front()
            };
            match next {
                Some(Reply::Ok(v)) => axum::Json(v).into_response(),
                Some(Reply::Error(status, kind, message)) => {
                    let mut r =
                        (StatusCode::from_u16(status).unwrap(), axum::Json(serde_json::json!({ "message": message })))
                            .into_response();
                    r.headers_mut().insert(HeaderName::from_static("x-amzn-errortype"), HeaderValue::from_static(kind));
                    r
                }
                Some(Reply::Frames(frames)) => {
                    ([("content-type", "application/vnd.amazon.eventstream")], frames).into_response()
                }
                None => (StatusCode::INTERNAL_SERVER_ERROR, "script exhausted").into_response(),
            }
        }

        /// The same answers as ConverseStream sends them (`application/vnd.amazon.eventstream`).
        async fn converse_stream(shared: State<Shared>, model_id: Path<String>, body: axum::body::Bytes) -> Response {
            let answer = converse(shared, model_id, body).await;
            let is_frames =
                answer.headers().get("content-type").is_some_and(|v| v == "application/vnd.amazon.eventstream");
            if !answer.status().is_success() || is_frames {
                return answer;
            }
            let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
            let output: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let frames = converse_stream_frames(&output);
            ([("content-type", "application/vnd.amazon.eventstream")], frames).into_response()
        }

        let state = Arc::new(Mutex::new(FakeState { script: script.into(), requests: vec![] }));
        let calls = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new()
            .route("/model/{model_id}/converse", axum::routing::post(converse))
            .route("/model/{model_id}/converse-stream", axum::routing::post(converse_stream))
            .with_state((Arc::clone(&state), Arc::clone(&calls)));
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { endpoint, state, calls }
    }

    pub fn requests(&self) -> Vec<(String, serde_json::Value)> {
        self.state.lock().unwrap().requests.clone()
    }

    /// A Bedrock client pointed at this server: static test credentials, no SDK retry.
    pub async fn client(&self, counter: Option<RequestCounter>) -> aws_sdk_bedrockruntime::Client {
        let sdk = switchboard_aws::AwsSettings::emulator(self.endpoint.clone()).load().await;
        let mut conf = switchboard_aws::AwsClients::new(&sdk).bedrock.config().to_builder();
        if let Some(counter) = counter {
            conf = conf.interceptor(counter);
        }
        aws_sdk_bedrockruntime::Client::from_conf(conf.build())
    }
}

/// A Converse answer as ConverseStream's event frames: `messageStart`, each content block (text
/// in [`crate::providers::chat::pieces`], a tool use's start then its input's JSON text in two
/// halves), `messageStop` with the stop reason, `metadata` with the usage.
pub fn converse_stream_frames(output: &serde_json::Value) -> Vec<u8> {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    use serde_json::json;

    let mut out = Vec::new();
    let mut frame = |event: &str, payload: serde_json::Value| {
        let message = Message::new(payload.to_string().into_bytes())
            .add_header(Header::new(":event-type", HeaderValue::String(event.to_owned().into())))
            .add_header(Header::new(":content-type", HeaderValue::String("application/json".into())))
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())));
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
    };
    frame("messageStart", json!({"role": "assistant"}));
    let content = output["output"]["message"]["content"].as_array().cloned().unwrap_or_default();
    for (i, block) in content.iter().enumerate() {
        if let Some(text) = block["text"].as_str() {
            for piece in crate::providers::chat::pieces(text) {
                frame("contentBlockDelta", json!({"contentBlockIndex": i, "delta": {"text": piece}}));
            }
        } else if let Some(tool) = block.get("toolUse") {
            let start = json!({"toolUse": {"toolUseId": tool["toolUseId"], "name": tool["name"]}});
            frame("contentBlockStart", json!({"contentBlockIndex": i, "start": start}));
            let input = tool["input"].to_string();
            let half = input.char_indices().nth(input.chars().count() / 2).map_or(input.len(), |(at, _)| at);
            for part in [&input[..half], &input[half..]] {
                frame("contentBlockDelta", json!({"contentBlockIndex": i, "delta": {"toolUse": {"input": part}}}));
            }
        }
        frame("contentBlockStop", json!({"contentBlockIndex": i}));
    }
    frame("messageStop", json!({"stopReason": output["stopReason"]}));
    frame("metadata", json!({"usage": output["usage"], "metrics": output["metrics"]}));
    out
}

// ---- fake Conversations Service ------------------------------------------------------------------

/// One reply as the fake Conversations Service received it.
#[derive(Debug, Clone)]
pub struct ReceivedReply {
    pub tenant_id: String,
    pub conversation_id: String,
    pub text: String,
    pub idempotency_key: String,
    pub authorization: String,
    pub amz_date: String,
}

#[derive(Debug, Default)]
struct ConversationsState {
    /// Statuses to answer replies with before accepting (e.g. `[503, 429]`).
    failures: VecDeque<u16>,
    /// Every reply request that reached the server, failed ones included.
    attempts: usize,
    accepted: Vec<ReceivedReply>,
    by_key: std::collections::HashMap<String, String>,
    /// Each conversation's messages (`(tenant, conversation)` → messages in the order written):
    /// those seeded, then each accepted reply as the agent's.
    conversations: std::collections::HashMap<(String, String), Vec<serde_json::Value>>,
    /// History reads that reached the server (not in `attempts`).
    history_reads: usize,
    /// Statuses to answer history reads with first.
    history_failures: VecDeque<u16>,
}

/// `POST /tenants/{tenantId}/conversations/{id}/messages` on 127.0.0.1: refuses a request without a SigV4
/// `Authorization` for `execute-api` or without an `Idempotency-Key` (400), answers scripted
/// failures first, then `201 {"messageId"}`, or `200 {"messageId", "duplicate": true}` for a key
/// it has seen. `GET` on the same path (`?limit=n`, signed, else 400) answers the conversation's
/// newest `n` messages, oldest first — those [`FakeConversations::seed`]ed, then the replies it
/// took — or first the failures [`FakeConversations::fail_history`] scripted.
#[derive(Debug, Clone)]
pub struct FakeConversations {
    pub base_url: String,
    state: Arc<Mutex<ConversationsState>>,
}

/// `AWS4-HMAC-SHA256 Credential=<key>/<yyyymmdd>/<region>/execute-api/aws4_request,
/// SignedHeaders=…;idempotency-key;…, Signature=<64 hex>`.
pub fn is_sigv4_for_execute_api(authorization: &str) -> bool {
    let Some(rest) = authorization.strip_prefix("AWS4-HMAC-SHA256 Credential=") else { return false };
    let mut parts = rest.split(", ");
    let (Some(credential), Some(signed), Some(signature)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let signed_ok = signed
        .strip_prefix("SignedHeaders=")
        .is_some_and(|h| h.split(';').any(|x| x == "idempotency-key") && h.split(';').any(|x| x == "host"));
    let signature_ok =
        signature.strip_prefix("Signature=").is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()));
    scope.len() == 5
        && scope[1].len() == 8
        && scope[3] == "execute-api"
        && scope[4] == "aws4_request"
        && signed_ok
        && signature_ok
}

impl FakeConversations {
    pub async fn start(failures: Vec<u16>) -> Self {
        use axum::extract::{Path, State};
        use axum::http::{HeaderMap, StatusCode};
        use axum::response::{IntoResponse, Response};

        async fn post(
            State(state): State<Arc<Mutex<ConversationsState>>>,
            Path((tenant_id, conversation_id)): Path<(String, String)>,
            headers: HeaderMap,
            body: axum::body::Bytes,
        ) -> Response {
            let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            let mut s = state.lock().unwrap();
            s.attempts += 1;
            let authorization = header("authorization");
            let idempotency_key = header("idempotency-key");
            if !is_sigv4_for_execute_api(&authorization)
                || idempotency_key.is_empty()
                || header("x-amz-date").is_empty()
            {
                return (StatusCode::BAD_REQUEST, "missing signature or idempotency key").into_response();
            }
            if let Some(status) = s.failures.pop_front() {
                return (StatusCode::from_u16(status).unwrap(), "scripted failure").into_response();
            }
            let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body) else {
                return (StatusCode::BAD_REQUEST, "not JSON").into_response();
            };
            let Some(text) = json.get("text").and_then(|t| t.as_str()) else {
                return (StatusCode::BAD_REQUEST, "no text").into_response();
            };
            if let Some(id) = s.by_key.get(&idempotency_key) {
                return axum::Json(serde_json::json!({"messageId": id, "duplicate": true})).into_response();
            }
            let id = format!("out-{}", s.by_key.len() + 1);
            s.by_key.insert(idempotency_key.clone(), id.clone());
            let said = serde_json::json!({ "messageId": id, "sender": "agent", "text": text, "sentAt": "2026-11-25T00:00:00Z" });
            s.conversations.entry((tenant_id.clone(), conversation_id.clone())).or_default().push(said);
            s.accepted.push(ReceivedReply {
                tenant_id,
                conversation_id,
                text: text.to_owned(),
                idempotency_key,
                authorization,
                amz_date: header("x-amz-date"),
            });
            (StatusCode::CREATED, axum::Json(serde_json::json!({"messageId": id}))).into_response()
        }

        async fn get(
            State(state): State<Arc<Mutex<ConversationsState>>>,
            Path((tenant_id, conversation_id)): Path<(String, String)>,
            axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
            headers: HeaderMap,
        ) -> Response {
            let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            let mut s = state.lock().unwrap();
            s.history_reads += 1;
            let authorization = header("authorization");
            let signed = authorization.starts_with("AWS4-HMAC-SHA256 Credential=")
                && authorization.contains("/execute-api/aws4_request")
                && !header("x-amz-date").is_empty();
            let Some(limit) = query.get("limit").and_then(|l| l.parse::<usize>().ok()) else {
                return (StatusCode::BAD_REQUEST, "limit is required").into_response();
            };
            if !signed {
                return (StatusCode::BAD_REQUEST, "missing signature").into_response();
            }
            if let Some(status) = s.history_failures.pop_front() {
                return (StatusCode::from_u16(status).unwrap(), "scripted failure").into_response();
            }
            let all = s.conversations.get(&(tenant_id, conversation_id)).cloned().unwrap_or_default();
            let newest = all[all.len().saturating_sub(limit)..].to_vec();
            axum::Json(serde_json::json!({ "messages": newest })).into_response()
        }

        let state = Arc::new(Mutex::new(ConversationsState { failures: failures.into(), ..Default::default() }));
        let app = axum::Router::new()
            .route(
                "/prod/tenants/{tenant_id}/conversations/{conversation_id}/messages",
                axum::routing::post(post).get(get),
            )
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let base_url = format!("http://{}/prod", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { base_url, state }
    }

    pub fn accepted(&self) -> Vec<ReceivedReply> {
        self.state.lock().unwrap().accepted.clone()
    }

    /// Adds messages to a conversation, as the service would have them before Switchboard
    /// answers: `(message id, sender, text)`, sender `customer`, `agent` or `human`.
    pub fn seed(&self, tenant: &str, conversation: &str, messages: &[(&str, &str, &str)]) {
        let mut s = self.state.lock().unwrap();
        let log = s.conversations.entry((tenant.to_owned(), conversation.to_owned())).or_default();
        for (id, sender, text) in messages {
            log.push(serde_json::json!({ "messageId": id, "sender": sender, "text": text, "sentAt": "2026-11-25T00:00:00Z" }));
        }
    }

    /// Answers the next history reads with these statuses.
    pub fn fail_history(&self, statuses: &[u16]) {
        self.state.lock().unwrap().history_failures.extend(statuses);
    }

    /// History reads that reached the server.
    pub fn history_reads(&self) -> usize {
        self.state.lock().unwrap().history_reads
    }

    pub fn attempts(&self) -> usize {
        self.state.lock().unwrap().attempts
    }
}

/// Creates an S3 bucket with a fresh name.
pub async fn create_bucket(config: &aws_config::SdkConfig) -> String {
    let bucket = unique("archive");
    let s3 = switchboard_aws::S3Archive::client(config, true);
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    bucket
}
