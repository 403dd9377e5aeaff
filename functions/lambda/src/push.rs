//! console-push: the live push of the operator console on AWS, one function for two sources.
//!
//! - The WebSocket API's `$connect` (API Gateway has checked the caller's SigV4 signature and
//!   `execute-api:Invoke` on the route): the query carries `tenant` and a `ticket` from
//!   `POST /tenants/{t}/events/push`; redeeming it keeps the connection as one of that tenant's
//!   (`200`), anything else refuses the connection (`403`). `$disconnect` is accepted and does
//!   nothing: a closed connection is forgotten by the first push that meets `410 Gone`, or by
//!   its TTL.
//! - The Switchboard bus's `session.*` events: each is posted to its tenant's connections only
//!   ([`ConsolePush::fan_out`]). A push that fails is logged, not retried: the event is in the
//!   tenant's event log, which a console reads after each push and on reconnecting. Only a
//!   failure to read the connections fails the invocation (EventBridge then retries it).

use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::{Value, json};
use switchboard_aws::ConsolePush;
use switchboard_domain::TenantId;

/// Why an invocation failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("not a WebSocket route or a bus event: {0}")]
    Malformed(String),
    #[error("connections could not be read (retryable): {0}")]
    Store(#[from] switchboard_engine::StoreError),
}

impl From<PushError> for lambda_runtime::Diagnostic {
    fn from(e: PushError) -> Self {
        let error_type = match e {
            PushError::Malformed(_) => "MalformedEvent",
            PushError::Store(_) => "StoreUnavailable",
        };
        lambda_runtime::Diagnostic { error_type: error_type.into(), error_message: e.to_string() }
    }
}

/// The function's runtime loop.
pub async fn serve(push: &ConsolePush) -> Result<(), lambda_runtime::Error> {
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let answer = handle(push, event.payload).await;
        crate::wiring::flush_traces().await;
        answer
    }))
    .await
}

/// One invocation: a WebSocket route (answered with a status for API Gateway) or a bus event
/// (answered with what the fan-out did).
pub async fn handle(push: &ConsolePush, payload: Value) -> Result<Value, PushError> {
    if let Some(route) = payload.pointer("/requestContext/eventType").and_then(Value::as_str) {
        return Ok(match route {
            "CONNECT" => connect(push, &payload).await,
            "DISCONNECT" => json!({ "statusCode": 200 }),
            // No other route is configured; a message a console sends is not for us.
            _ => json!({ "statusCode": 400, "body": "this API only pushes" }),
        });
    }
    let (Some(detail_type), Some(detail)) = (payload.get("detail-type").and_then(Value::as_str), payload.get("detail"))
    else {
        return Err(PushError::Malformed("neither requestContext.eventType nor detail-type".into()));
    };
    let Some(tenant) = detail.get("tenantId").and_then(Value::as_str).and_then(|t| t.parse::<TenantId>().ok()) else {
        // Not retried: it will never have a tenant.
        tracing::error!(detail_type, "bus event without a valid tenantId; not pushed");
        return Ok(json!({ "sent": 0, "gone": 0, "failed": 0 }));
    };
    let message = json!({
        "type": "event",
        "id": detail.get("id"),
        "tenantId": tenant,
        "detailType": detail_type,
        "detail": detail,
    });
    let report = push.fan_out(&tenant, &message).await?;
    tracing::info!(%tenant, detail_type, sent = report.sent, gone = report.gone, failed = report.failed, "pushed");
    Ok(json!({ "sent": report.sent, "gone": report.gone, "failed": report.failed }))
}

/// `$connect`: the ticket in the query, redeemed for its tenant.
async fn connect(push: &ConsolePush, payload: &Value) -> Value {
    let refuse = |why: &str| {
        tracing::warn!(reason = why, "connection refused");
        json!({ "statusCode": 403, "body": why })
    };
    let query = |name: &str| payload.pointer(&format!("/queryStringParameters/{name}")).and_then(Value::as_str);
    let Some(connection) = payload.pointer("/requestContext/connectionId").and_then(Value::as_str) else {
        return refuse("no connection id");
    };
    let Some(tenant) = query("tenant").and_then(|t| t.parse::<TenantId>().ok()) else {
        return refuse("the query needs tenant=<tenant id>");
    };
    let Some(ticket) = query("ticket").filter(|t| !t.is_empty() && t.len() <= 128) else {
        return refuse("the query needs ticket=<a ticket from POST /tenants/{t}/events/push>");
    };
    match push.store.open_push_connection(&tenant, ticket, connection).await {
        Ok(true) => {
            tracing::info!(%tenant, connection, "console connected");
            json!({ "statusCode": 200 })
        }
        Ok(false) => refuse("the ticket is unknown for this tenant, used, or out of date"),
        Err(e) => {
            tracing::error!(%tenant, error = %e, "connection not kept");
            json!({ "statusCode": 500, "body": "try again" })
        }
    }
}
