//! Approvals of risky tool calls (`…/approvals`): the calls paused turns wait on, listed for
//! the tenant's operators; approved (optionally with edited arguments, checked against the
//! tool's schema) or denied with a reason, by the signed-in principal. The decision resumes the
//! turn through the conversation's queue, on both profiles (on AWS the operations-api function
//! serves these routes; the event-router's schedule expires the overdue ones).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_engine::{Decision, OperatorError};

use crate::auth::Caller;
use crate::extract::{JsonBody, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

/// `GET …/approvals`: the approvals waiting, the longest waiting first.
pub(crate) async fn list(State(state): State<Arc<ApiState>>, Tenant(t): Tenant) -> Result<Response, Problem> {
    let approvals = state.operator.approvals(&t).await.map_err(problem)?;
    Ok(Json(json!({ "approvals": approvals })).into_response())
}

/// `GET …/approvals/{approval}`.
pub(crate) async fn get_one(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let approval = state.operator.approval(&t, &id).await.map_err(problem)?;
    Ok(Json(approval).into_response())
}

/// The body of `POST …/approve`: `{arguments?}`, the arguments to run the call with instead.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ApproveBody {
    #[serde(default)]
    arguments: Option<Value>,
}

/// The body of `POST …/deny`: `{reason}`, which the model reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DenyBody {
    reason: String,
}

/// `POST …/approvals/{approval}/approve {arguments?}`: 200 with the decided approval; 409 when it
/// was decided otherwise or has expired; 404 when no paused turn waits for it.
pub(crate) async fn approve(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Path((_, id)): Path<(String, String)>,
    JsonBody(body): JsonBody<ApproveBody>,
) -> Result<Response, Problem> {
    let decision = Decision::Approve { arguments: body.arguments };
    let approval = state.operator.decide(&t, &id, &caller.principal, decision).await.map_err(problem)?;
    Ok(Json(approval).into_response())
}

/// `POST …/approvals/{approval}/deny {reason}`: as approve, the call never runs.
pub(crate) async fn deny(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Path((_, id)): Path<(String, String)>,
    JsonBody(body): JsonBody<DenyBody>,
) -> Result<Response, Problem> {
    let decision = Decision::Deny { reason: body.reason };
    let approval = state.operator.decide(&t, &id, &caller.principal, decision).await.map_err(problem)?;
    Ok(Json(approval).into_response())
}

fn problem(e: OperatorError) -> Problem {
    match e {
        e @ (OperatorError::NoApproval(_) | OperatorError::NoSession(_)) => Problem::not_found(e.to_string()),
        OperatorError::Invalid(errors) => Problem::invalid(errors),
        e @ (OperatorError::NotAllowed(_) | OperatorError::Conflict) => Problem::conflict(e.to_string()),
        OperatorError::Store(e) => e.into(),
        other => {
            tracing::error!(error = %other, "an approval could not be decided");
            Problem::internal()
        }
    }
}
