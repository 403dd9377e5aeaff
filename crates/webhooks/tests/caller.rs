#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The webhook caller against a real axum receiver on a loopback port (local-development policy)
//! and against the SSRF corpus (production policy).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use switchboard_domain::webhook::{IDEMPOTENCY_KEY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, standard, verify};
use switchboard_domain::{RetryPolicy, SignatureScheme, TenantId, WebhookHandler};
use switchboard_engine::ports::{SecretError, Secrets, WebhookCaller, WebhookError, WebhookRequest};
use switchboard_webhooks::{HttpWebhookCaller, MAX_RESPONSE_BYTES, WebhookPolicy};

const SECRET: &str = "whsec_the-secret-value-9f3a";
/// A Standard Webhooks secret: `whsec_` and the base64 of 24 bytes.
const STANDARD_SECRET: &str = "whsec_c3RhbmRhcmQtd2ViaG9va3Mta2V5LTAx";
const LOCAL: WebhookPolicy = WebhookPolicy { allow_http: true, allow_private: true };

// ---- secrets ----

#[derive(Default)]
struct MapSecrets {
    values: HashMap<String, String>,
    reads: AtomicUsize,
}

#[async_trait]
impl Secrets for MapSecrets {
    async fn get_secret(&self, _tenant: &TenantId, name: &str) -> Result<Option<String>, SecretError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(self.values.get(name).cloned())
    }
}

fn secrets() -> Arc<MapSecrets> {
    let values =
        HashMap::from([("hook".to_owned(), SECRET.to_owned()), ("standard".to_owned(), STANDARD_SECRET.to_owned())]);
    Arc::new(MapSecrets { values, ..Default::default() })
}

// ---- the receiver ----

/// What the receiver saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    idempotency_key: Option<String>,
    signature: Option<String>,
    /// `Some(true)` when a signature was present and verified, in either scheme.
    verified: Option<bool>,
    /// `webhook-id`, sent for Standard Webhooks.
    webhook_id: Option<String>,
    /// Any `Switchboard-Timestamp` and `webhook-timestamp`.
    timestamps: (Option<String>, Option<String>),
    custom_header: Option<String>,
    body: Vec<u8>,
}

/// Statuses with an optional Retry-After.
type Script = VecDeque<(u16, Option<&'static str>)>;

#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Statuses (and a Retry-After) to answer in turn; 200 when empty.
    script: Arc<Mutex<Script>>,
    redirect_target_hits: Arc<AtomicUsize>,
}

async fn hook(State(rx): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let now = chrono::Utc::now().timestamp();
    let (webhook_id, timestamps) = (get(standard::ID_HEADER), (get(TIMESTAMP_HEADER), get(standard::TIMESTAMP_HEADER)));
    let (signature, verified) = match (get(SIGNATURE_HEADER), get(standard::SIGNATURE_HEADER)) {
        (Some(sig), _) => {
            let ts = timestamps.0.clone().unwrap_or_default();
            (Some(sig.clone()), Some(verify(SECRET.as_bytes(), &ts, &sig, &body, now).is_ok()))
        }
        (None, Some(sig)) => {
            let (key, id) =
                (standard::Key::from_secret(STANDARD_SECRET).unwrap(), webhook_id.clone().unwrap_or_default());
            let ts = timestamps.1.clone().unwrap_or_default();
            (Some(sig.clone()), Some(standard::verify(&key, &id, &ts, &sig, &body, now).is_ok()))
        }
        (None, None) => (None, None),
    };
    rx.seen.lock().unwrap().push(Seen {
        idempotency_key: get(IDEMPOTENCY_KEY_HEADER),
        signature,
        verified,
        webhook_id,
        timestamps,
        custom_header: get("x-api-version"),
        body: body.to_vec(),
    });
    let (status, retry_after) = rx.script.lock().unwrap().pop_front().unwrap_or((200, None));
    let mut response = (StatusCode::from_u16(status).unwrap(), "{\"ok\":true}").into_response();
    if let Some(after) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, after.parse().unwrap());
    }
    response
}

async fn never() -> &'static str {
    std::future::pending::<()>().await;
    "unreachable"
}

async fn oversize() -> Vec<u8> {
    vec![b'x'; MAX_RESPONSE_BYTES * 2 + 17]
}

async fn redirect() -> Response {
    (StatusCode::FOUND, [(header::LOCATION, "/target")]).into_response()
}

async fn target(State(rx): State<Receiver>) -> &'static str {
    rx.redirect_target_hits.fetch_add(1, Ordering::SeqCst);
    "followed"
}

/// A receiver on 127.0.0.1, port 0; stopped when dropped.
struct Server {
    base: String,
    rx: Receiver,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start() -> Server {
    let rx = Receiver::default();
    let app = Router::new()
        .route("/hook", post(hook))
        .route("/slow", post(never))
        .route("/big", post(oversize))
        .route("/redirect", post(redirect))
        .route("/target", any(target))
        .with_state(rx.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Server { base, rx, task }
}

fn request(url: &str, secret_ref: Option<&str>) -> WebhookRequest {
    WebhookRequest {
        tenant_id: "t-acme".parse().unwrap(),
        tool_name: "lookup_order".into(),
        handler: WebhookHandler {
            url: url.into(),
            secret_ref: secret_ref.map(str::to_owned),
            timeout_ms: 5_000,
            headers: BTreeMap::from([
                ("X-Api-Version".to_owned(), "2024-06".to_owned()),
                ("Host".to_owned(), "evil.example".to_owned()),
            ]),
            retry_policy: RetryPolicy { max_retries: 2, backoff_ms: 1 },
            include_pii: false,
            signature: SignatureScheme::Switchboard,
        },
        body: br#"{"tool":"lookup_order","arguments":{"orderId":"A-1"},"idempotencyKey":"exec-1#call-1"}"#.to_vec(),
        idempotency_key: "exec-1#call-1".into(),
    }
}

fn caller(policy: WebhookPolicy) -> (HttpWebhookCaller, Arc<MapSecrets>) {
    let s = secrets();
    (HttpWebhookCaller::new(policy, s.clone()).unwrap(), s)
}

// ---- delivery ----

#[tokio::test]
async fn it_sends_a_signed_request_the_receiver_verifies() {
    let server = start().await;
    let (caller, _) = caller(LOCAL);
    let req = request(&format!("{}/hook?order=A-1", server.base), Some("hook"));

    let response = caller.call(&req).await.unwrap();

    assert_eq!(response.status, 200);
    assert_eq!(response.attempts, 1);
    assert_eq!(response.host, "127.0.0.1");
    assert!(!response.truncated);
    assert_eq!(response.body, b"{\"ok\":true}");
    let seen = server.rx.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].verified, Some(true));
    assert_eq!(seen[0].idempotency_key.as_deref(), Some("exec-1#call-1"));
    assert_eq!(seen[0].custom_header.as_deref(), Some("2024-06"));
    assert_eq!(seen[0].body, req.body);
    // the default scheme is Switchboard's alone
    assert_eq!((seen[0].webhook_id.as_deref(), seen[0].timestamps.1.as_deref()), (None, None));
}

#[tokio::test]
async fn it_sends_unsigned_requests_when_the_tool_has_no_secret() {
    let server = start().await;
    let (caller, secrets) = caller(LOCAL);

    let response = caller.call(&request(&format!("{}/hook", server.base), None)).await.unwrap();

    assert_eq!(response.status, 200);
    let seen = server.rx.seen.lock().unwrap().clone();
    assert_eq!(seen[0].signature, None);
    assert_eq!(seen[0].idempotency_key.as_deref(), Some("exec-1#call-1"));
    assert_eq!(secrets.reads.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_missing_secret_fails_without_calling_and_without_the_value() {
    let server = start().await;
    let (caller, _) = caller(LOCAL);

    let err = caller.call(&request(&format!("{}/hook", server.base), Some("nope"))).await.unwrap_err();

    assert!(matches!(&err, WebhookError::Secret(m) if m.contains("nope") && !m.contains(SECRET)), "{err:?}");
    assert!(server.rx.seen.lock().unwrap().is_empty());
}

/// A request to a Standard Webhooks tool signing with the secret `secret_ref`.
fn standard_request(url: &str, secret_ref: Option<&str>) -> WebhookRequest {
    let mut req = request(url, secret_ref);
    req.handler.signature = SignatureScheme::StandardWebhooks;
    req
}

#[tokio::test]
async fn a_standard_webhooks_tool_is_signed_in_that_scheme_on_every_attempt() {
    let server = start().await;
    server.rx.script.lock().unwrap().extend([(503, None)]);
    let (caller, _) = caller(LOCAL);
    // a tool that also tries to set the scheme's headers itself
    let mut req = standard_request(&format!("{}/hook", server.base), Some("standard"));
    req.handler.headers.insert("Webhook-Id".into(), "forged".into());

    let response = caller.call(&req).await.unwrap();

    assert_eq!((response.status, response.attempts), (200, 2));
    let seen = server.rx.seen.lock().unwrap().clone();
    for attempt in &seen {
        // the id is the idempotency key, kept in its own header too, and each attempt verifies
        assert_eq!(attempt.webhook_id.as_deref(), Some("exec-1#call-1"));
        assert_eq!(attempt.idempotency_key.as_deref(), Some("exec-1#call-1"));
        assert_eq!(attempt.verified, Some(true), "{attempt:?}");
        assert!(attempt.signature.as_deref().unwrap().starts_with("v1,"));
        // and Switchboard's own timestamp is not sent beside the scheme's
        assert!(attempt.timestamps.0.is_none() && attempt.timestamps.1.is_some(), "{attempt:?}");
        assert_eq!(attempt.custom_header.as_deref(), Some("2024-06"));
    }
}

#[tokio::test]
async fn a_standard_webhooks_tool_without_a_secret_sends_the_id_and_timestamp_unsigned() {
    let server = start().await;
    let (caller, _) = caller(LOCAL);

    caller.call(&standard_request(&format!("{}/hook", server.base), None)).await.unwrap();

    let seen = server.rx.seen.lock().unwrap().clone();
    assert_eq!((seen[0].webhook_id.as_deref(), seen[0].signature.as_deref()), (Some("exec-1#call-1"), None));
    assert!(seen[0].timestamps.1.is_some());
}

#[tokio::test]
async fn a_secret_that_is_not_a_standard_webhooks_secret_is_a_tool_error_before_any_call() {
    let server = start().await;
    let (caller, _) = caller(LOCAL);

    // `hook` holds a secret with '-' in it: not base64
    let err = caller.call(&standard_request(&format!("{}/hook", server.base), Some("hook"))).await.unwrap_err();

    let WebhookError::Secret(message) = &err else { panic!("a secret error: {err:?}") };
    assert!(message.contains("'hook'") && message.contains("whsec_"), "{message}");
    assert!(!message.contains(SECRET), "{message}");
    assert!(server.rx.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn it_reads_each_secret_once_within_the_cache_lifetime() {
    let server = start().await;
    let (caller, secrets) = caller(LOCAL);
    let req = request(&format!("{}/hook", server.base), Some("hook"));

    caller.call(&req).await.unwrap();
    caller.call(&req).await.unwrap();

    assert_eq!(secrets.reads.load(Ordering::SeqCst), 1);
    assert!(server.rx.seen.lock().unwrap().iter().all(|s| s.verified == Some(true)));
}

#[tokio::test]
async fn it_retries_a_503_with_the_same_idempotency_key() {
    let server = start().await;
    server.rx.script.lock().unwrap().extend([(503, None)]);
    let (caller, _) = caller(LOCAL);

    let response = caller.call(&request(&format!("{}/hook", server.base), Some("hook"))).await.unwrap();

    assert_eq!(response.status, 200);
    assert_eq!(response.attempts, 2);
    let seen = server.rx.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.idempotency_key.as_deref() == Some("exec-1#call-1")));
    assert!(seen.iter().all(|s| s.verified == Some(true)));
    assert_eq!(seen[0].body, seen[1].body);
}

#[tokio::test]
async fn it_retries_a_429_honouring_retry_after() {
    let server = start().await;
    server.rx.script.lock().unwrap().extend([(429, Some("0")), (429, Some("0"))]);
    let (caller, _) = caller(LOCAL);

    let response = caller.call(&request(&format!("{}/hook", server.base), Some("hook"))).await.unwrap();

    assert_eq!(response.status, 200);
    assert_eq!(response.attempts, 3);
    let seen = server.rx.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|s| s.idempotency_key.as_deref() == Some("exec-1#call-1")));
}

#[tokio::test]
async fn it_returns_the_last_5xx_once_retries_are_spent() {
    let server = start().await;
    server.rx.script.lock().unwrap().extend([(500, None), (502, None), (503, None), (200, None)]);
    let (caller, _) = caller(LOCAL);

    let response = caller.call(&request(&format!("{}/hook", server.base), Some("hook"))).await.unwrap();

    assert_eq!((response.status, response.attempts), (503, 3));
}

#[tokio::test]
async fn it_does_not_retry_a_4xx() {
    let server = start().await;
    server.rx.script.lock().unwrap().extend([(404, None)]);
    let (caller, _) = caller(LOCAL);

    let response = caller.call(&request(&format!("{}/hook", server.base), Some("hook"))).await.unwrap();

    assert_eq!((response.status, response.attempts), (404, 1));
}

#[tokio::test]
async fn it_times_out_a_receiver_that_never_answers() {
    let server = start().await;
    let (caller, _) = caller(LOCAL);
    let mut req = request(&format!("{}/slow", server.base), Some("hook"));
    req.handler.timeout_ms = 200;
    req.handler.retry_policy = RetryPolicy { max_retries: 1, backoff_ms: 1 };

    let err = caller.call(&req).await.unwrap_err();

    assert_eq!(err, WebhookError::Timeout { attempts: 2 });
}

#[tokio::test]
async fn it_reports_a_connect_error_after_retrying() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (caller, _) = caller(LOCAL);

    let err = caller.call(&request(&format!("http://{addr}/hook"), None)).await.unwrap_err();

    assert!(matches!(&err, WebhookError::Connect { attempts: 3, message } if !message.contains("/hook")), "{err:?}");
}

#[tokio::test]
async fn it_cuts_an_oversize_body_at_one_mebibyte() {
    let server = start().await;
    let (caller, _) = caller(LOCAL);

    let response = caller.call(&request(&format!("{}/big", server.base), None)).await.unwrap();

    assert_eq!(response.status, 200);
    assert!(response.truncated);
    assert_eq!(response.body.len(), MAX_RESPONSE_BYTES);
}

#[tokio::test]
async fn it_returns_a_redirect_without_following_it() {
    let server = start().await;
    let (caller, _) = caller(LOCAL);

    let response = caller.call(&request(&format!("{}/redirect", server.base), None)).await.unwrap();

    assert_eq!(response.status, 302);
    assert_eq!(response.attempts, 1);
    assert_eq!(server.rx.redirect_target_hits.load(Ordering::SeqCst), 0);
}

// ---- the SSRF guard ----

const CORPUS: &[&str] = &[
    "https://10.0.0.1/hook",
    "https://127.0.0.1/hook",
    "https://[::1]/hook",
    "https://169.254.169.254/latest/meta-data/",
    "https://[fd00::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://[::ffff:169.254.169.254]/hook",
    "https://[fd00:ec2::254]/hook",
    "https://2130706433/hook",
    "https://0177.0.0.1/hook",
    "https://0x7f.1/hook",
    "https://100.64.0.1/hook",
    "https://0.0.0.0/hook",
    "https://localhost/hook",
];

#[tokio::test]
async fn the_default_policy_refuses_the_ssrf_corpus() {
    let (caller, _) = caller(WebhookPolicy::default());
    for url in CORPUS {
        let err = caller.call(&request(url, None)).await.unwrap_err();
        assert!(matches!(&err, WebhookError::Blocked(r) if !r.contains("http://")), "{url}: {err:?}");
    }
}

#[tokio::test]
async fn allowing_http_alone_still_refuses_the_corpus() {
    let (caller, _) = caller(WebhookPolicy { allow_http: true, allow_private: false });
    for url in CORPUS {
        let url = url.replacen("https://", "http://", 1);
        let err = caller.call(&request(&url, None)).await.unwrap_err();
        assert!(matches!(err, WebhookError::Blocked(_)), "{url}: {err:?}");
    }
}

#[tokio::test]
async fn the_default_policy_refuses_plain_http() {
    let (caller, _) = caller(WebhookPolicy::default());

    let err = caller.call(&request("http://example.com/hook", None)).await.unwrap_err();

    assert!(matches!(&err, WebhookError::Blocked(r) if r.contains("http://")), "{err:?}");
}

#[tokio::test]
async fn a_private_receiver_is_refused_at_connect_time_without_a_request() {
    let server = start().await;
    let (caller, _) = caller(WebhookPolicy { allow_http: true, allow_private: false });
    let port = server.base.rsplit(':').next().unwrap();

    let err = caller.call(&request(&format!("http://localhost:{port}/hook"), None)).await.unwrap_err();

    assert!(matches!(err, WebhookError::Blocked(_)), "{err:?}");
    assert!(server.rx.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn local_development_never_opens_the_metadata_address() {
    let (caller, _) = caller(LOCAL);
    for url in ["http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://[::ffff:a9fe:a9fe]/"] {
        let err = caller.call(&request(url, None)).await.unwrap_err();
        assert!(matches!(err, WebhookError::Blocked(_)), "{url}: {err:?}");
    }
}

// ---- logs ----

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn logs_never_hold_the_secret_the_signature_the_body_or_the_query() {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The test runtime is single-threaded: the caller, the receiver and reqwest's connection
    // tasks all log through this thread's default subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = start().await;
    let (caller, _) = caller(LOCAL);
    let ok = caller.call(&request(&format!("{}/hook?token=query-secret", server.base), Some("hook"))).await.unwrap();
    server.rx.script.lock().unwrap().extend([(503, None), (503, None), (503, None)]);
    let failed =
        caller.call(&request(&format!("{}/hook?token=query-secret", server.base), Some("hook"))).await.unwrap();
    let mut slow = request(&format!("{}/slow?token=query-secret", server.base), Some("hook"));
    slow.handler.timeout_ms = 100;
    slow.handler.retry_policy.max_retries = 0;
    let timed_out = caller.call(&slow).await.unwrap_err();
    let missing = caller.call(&request(&format!("{}/hook", server.base), Some("nope"))).await.unwrap_err();

    assert_eq!(ok.status, 200);
    assert_eq!(failed.status, 503);
    assert_eq!(timed_out, WebhookError::Timeout { attempts: 1 });
    assert!(matches!(missing, WebhookError::Secret(_)));
    let signatures: Vec<String> = server.rx.seen.lock().unwrap().iter().filter_map(|s| s.signature.clone()).collect();
    assert_eq!(signatures.len(), 4);
    let logs = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("webhook called") && logs.contains("webhook call failed"), "{logs}");
    assert!(logs.contains("lookup_order") && logs.contains("127.0.0.1"), "{logs}");
    assert!(!logs.contains(SECRET), "{logs}");
    for signature in &signatures {
        let hex = signature.trim_start_matches("v1=");
        assert!(!logs.contains(hex), "{logs}");
    }
    assert!(!logs.contains("query-secret"), "{logs}");
    assert!(!logs.contains("orderId"), "{logs}");
}
