//! A tenant's webhook endpoint for tests, on 127.0.0.1: it checks every request's
//! `Switchboard-Signature` with the tenant's secret (`switchboard_domain::webhook::verify`, the
//! code a tenant is told to mirror), keeps what it saw, and answers an order status. It neither
//! refuses a bad signature nor drops a repeated idempotency key: the tests assert on what it saw.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use switchboard_domain::webhook;

/// What the receiver saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The signature verified with the receiver's secret, at the time it arrived.
    pub verified: bool,
    /// `Switchboard-Idempotency-Key` (empty when missing).
    pub idempotency_key: String,
    /// The body as JSON (`Null` when it is not).
    pub body: Value,
}

/// A running receiver; its server task stops when it is dropped.
#[derive(Debug)]
pub struct WebhookReceiver {
    /// Where the tool should call: `http://127.0.0.1:<port><path>`.
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl WebhookReceiver {
    /// Listens on a free loopback port at `path`, verifying with `secret`; every request is
    /// answered `{"status": "shipped", "eta": "Thursday"}`.
    pub async fn start(path: &str, secret: &str) -> Self {
        Self::answering(path, secret, |_| json!({ "status": "shipped", "eta": "Thursday" })).await
    }

    /// [`WebhookReceiver::start`], answering each request with `answer` of its JSON body (a
    /// hook's receiver, say).
    pub async fn answering(path: &str, secret: &str, answer: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Self {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (log, secret, answer) = (seen.clone(), Arc::new(secret.to_owned()), Arc::new(answer));
        let app = axum::Router::new().route(
            path,
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let (log, secret, answer) = (log.clone(), secret.clone(), answer.clone());
                async move {
                    let seen = check(&secret, &headers, &body);
                    let answered = answer(&seen.body);
                    log.lock().unwrap().push(seen);
                    axum::Json(answered)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{path}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, seen, task }
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn check(secret: &str, headers: &HeaderMap, body: &[u8]) -> Seen {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let now = chrono::Utc::now().timestamp();
    let verified =
        webhook::verify(secret.as_bytes(), &h(webhook::TIMESTAMP_HEADER), &h(webhook::SIGNATURE_HEADER), body, now)
            .is_ok();
    Seen {
        verified,
        idempotency_key: h(webhook::IDEMPOTENCY_KEY_HEADER),
        body: serde_json::from_slice(body).unwrap_or(Value::Null),
    }
}
