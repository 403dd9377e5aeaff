//! The example tenant's order lookup on AWS (`POST /example/orders`): the webhook behind the
//! `order_status` tool of `examples/aws/tenant.json`, answering as the local example receiver
//! (`switchboard example-receiver`) does. API Gateway lets anyone call it, so it checks
//! Switchboard's signature (`switchboard_domain::webhook::verify`, `contracts/webhooks.md`) with
//! the example tenant's secret `switchboard/<tenant>/orders`, the only secret its role may read.
//! Its answer depends only on the order id, so a repeated call (one idempotency key, several
//! attempts) gets the first answer again without anything being kept. An example, not a pattern
//! for storing orders.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchboard_domain::TenantId;
use switchboard_domain::webhook;
use switchboard_engine::{Clock, Secrets};

use super::StandIn;

/// The `secretRef` of the example's order tool.
pub const SECRET_REF: &str = "orders";

/// The example tenant and where its signing secret is read.
#[derive(Clone)]
pub struct Orders {
    pub tenant: TenantId,
    pub secrets: Arc<dyn Secrets>,
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Orders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orders").field("tenant", &self.tenant).finish_non_exhaustive()
    }
}

fn refused(status: StatusCode, why: &str) -> Response {
    (status, Json(json!({ "error": why }))).into_response()
}

/// `POST /example/orders`: a signed tool call of the example tenant → the order's status.
pub async fn lookup(State(standin): State<Arc<StandIn>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(orders) = &standin.orders else {
        return refused(StatusCode::NOT_FOUND, "this stand-in serves no example order lookup");
    };
    let secret = match orders.secrets.get_secret(&orders.tenant, SECRET_REF).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            tracing::warn!(tenant = %orders.tenant, "the example's signing secret does not exist");
            return refused(StatusCode::SERVICE_UNAVAILABLE, "the example tenant's signing secret is not set");
        }
        Err(e) => {
            tracing::error!(tenant = %orders.tenant, error = %e.message, "the example's signing secret could not be read");
            return refused(StatusCode::SERVICE_UNAVAILABLE, "the signing secret could not be read");
        }
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let now = orders.clock.now().timestamp();
    let (timestamp, signature) = (header(webhook::TIMESTAMP_HEADER), header(webhook::SIGNATURE_HEADER));
    if let Err(e) = webhook::verify(secret.as_bytes(), timestamp, signature, &body, now) {
        tracing::warn!(reason = %e, "example order lookup refused: bad signature");
        return refused(StatusCode::UNAUTHORIZED, &format!("bad signature: {e}"));
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if request["tenantId"].as_str() != Some(orders.tenant.as_str()) {
        return refused(StatusCode::FORBIDDEN, "this order lookup is the example tenant's only");
    }
    let order = request["arguments"]["orderId"].as_str().unwrap_or("unknown");
    Json(json!({ "orderId": order, "status": "shipped", "shippedOn": "yesterday", "eta": "Thursday" })).into_response()
}
