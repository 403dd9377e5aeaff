//! The example tenant's order system: a tiny webhook receiver that verifies Switchboard's
//! signature (`switchboard_domain::webhook::verify`), drops repeated idempotency keys, and
//! answers order-status lookups. `switchboard demo` runs it in-process; `switchboard
//! example-receiver` runs it on its own beside `serve --tenant examples/support/tenant.json`.
//! It is an example for tenants writing their own receiver, not part of the platform.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use clap::Args;
use serde_json::{Value, json};
use switchboard_domain::webhook;

#[derive(Debug, Args)]
pub struct ReceiverArgs {
    #[arg(long, default_value = "127.0.0.1:8088")]
    listen: SocketAddr,
    /// The secrets file the server signs with; the receiver reads the same secret from it.
    #[arg(long, default_value = "examples/support/secrets.json")]
    secrets_file: PathBuf,
    #[arg(long, default_value = "acme")]
    tenant: String,
    #[arg(long, default_value = "orders")]
    secret_ref: String,
}

/// Counters a caller can read while the receiver runs.
#[derive(Debug, Default)]
pub struct Tally {
    pub verified: AtomicU32,
    pub rejected: AtomicU32,
    pub repeats: AtomicU32,
}

/// A running receiver.
#[derive(Debug)]
pub struct Receiver {
    pub url: String,
    pub tally: Arc<Tally>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the receiver on `listen` (port 0 picks a free one), checking signatures with `secret`.
pub async fn start(listen: SocketAddr, secret: String) -> anyhow::Result<Receiver> {
    let tally = Arc::new(Tally::default());
    // Answers by idempotency key, so a retried call gets the first answer again.
    let answered: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let (t, secret) = (Arc::clone(&tally), Arc::new(secret));
    let app = Router::new().route(
        "/orders",
        post(move |headers: HeaderMap, body: Bytes| {
            let (tally, secret, answered) = (Arc::clone(&t), Arc::clone(&secret), Arc::clone(&answered));
            async move { handle(&tally, &secret, &answered, &headers, &body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("--listen {listen}"))?;
    let url = format!("http://{}/orders", listener.local_addr()?);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "example receiver stopped");
        }
    });
    Ok(Receiver { url, tally, task })
}

fn handle(
    tally: &Tally,
    secret: &str,
    answered: &Mutex<HashMap<String, Value>>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let now = chrono::Utc::now().timestamp();
    let checked = webhook::verify(
        secret.as_bytes(),
        header(webhook::TIMESTAMP_HEADER),
        header(webhook::SIGNATURE_HEADER),
        body,
        now,
    );
    if let Err(e) = checked {
        tally.rejected.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::UNAUTHORIZED, Json(json!({ "error": format!("bad signature: {e:?}") }))).into_response();
    }
    tally.verified.fetch_add(1, Ordering::Relaxed);
    let key = header(webhook::IDEMPOTENCY_KEY_HEADER).to_owned();
    let Ok(mut answered) = answered.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if let Some(first) = answered.get(&key) {
        tally.repeats.fetch_add(1, Ordering::Relaxed);
        return Json(first.clone()).into_response();
    }
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let order = request["arguments"]["orderId"].as_str().unwrap_or("unknown").to_owned();
    let answer = json!({ "orderId": order, "status": "shipped", "shippedOn": "yesterday", "eta": "Thursday" });
    answered.insert(key, answer.clone());
    Json(answer).into_response()
}

/// `switchboard example-receiver`: runs until Ctrl-C.
pub async fn run(args: ReceiverArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.secrets_file)
        .with_context(|| format!("--secrets-file {}", args.secrets_file.display()))?;
    let table: Value =
        serde_json::from_str(&text).with_context(|| format!("--secrets-file {}", args.secrets_file.display()))?;
    let secret = table[&args.tenant][&args.secret_ref]
        .as_str()
        .with_context(|| format!("--secrets-file has no secret '{}' for tenant '{}'", args.secret_ref, args.tenant))?
        .to_owned();
    let receiver = start(args.listen, secret).await?;
    println!("example order system listening on {}", receiver.url);
    let _ = tokio::signal::ctrl_c().await;
    let t = &receiver.tally;
    println!(
        "verified {} signed call(s), rejected {}, {} repeat(s)",
        t.verified.load(Ordering::Relaxed),
        t.rejected.load(Ordering::Relaxed),
        t.repeats.load(Ordering::Relaxed)
    );
    Ok(())
}
