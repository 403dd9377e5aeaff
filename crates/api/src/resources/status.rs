//! The process's own state: `GET /health` (it answers), `GET /ready` (it can take work) and
//! `GET /metrics` (OpenMetrics text, admin only). Nothing tenant-scoped here.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::problem::Problem;
use crate::state::ApiState;

/// `GET /health`: `200` while the process answers (no key needed).
pub(crate) async fn health() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// `GET /ready`: `200` when the process can take work, else `503` saying why (no key needed,
/// like `/health`, so that a load balancer or container runtime can ask).
pub(crate) async fn ready(State(state): State<Arc<ApiState>>) -> Response {
    let verdict = match &state.ready {
        Some(r) => r.check().await,
        None => Ok(()),
    };
    match verdict {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(why) => Problem::not_ready(why).into_response(),
    }
}

/// `GET /metrics` (admin key): OpenMetrics text for a Prometheus scraper. The labels name tenants,
/// so a tenant key gets `404` like any route it may not see.
pub(crate) async fn metrics(State(state): State<Arc<ApiState>>) -> Response {
    // Only an admin reaches here (`crate::access`).
    let Some(m) = &state.metrics else {
        return Problem::not_found("no such route").into_response();
    };
    let text = m.render().await;
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}
