//! Executions, the record of each turn: a session's executions as pages
//! (`GET …/sessions/{s}/executions`), one by id (`GET …/executions/{e}`) with its model calls'
//! content (`…/executions/{e}/model-calls`), and the one that
//! answered a source (`GET …/executions?sourceId=`), where a `202` from invoke says to look.
//! Read-only.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::{ExecutionId, SessionId, ValidationErrors};
use switchboard_engine::recorded;

use crate::extract::{JsonBody, Query, Tenant, page_limit};
use crate::problem::Problem;
use crate::state::{ApiState, ReplayOptions, ReplayRefused};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    cursor: Option<String>,
    limit: Option<usize>,
}

/// `GET /tenants/{t}/sessions/{s}/executions[?cursor&limit]`
pub(crate) async fn list(
    State(state): State<Arc<ApiState>>,
    Query(q): Query<PageQuery>,
    tenant: Result<Tenant, Problem>,
    Path((_, session)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let limit = page_limit(q.limit)?;
    let after = match q.cursor.as_deref().map(str::parse::<ExecutionId>) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            let why = "must be the nextCursor of a previous page";
            return Err(Problem::invalid(ValidationErrors::single("/query/cursor", why)));
        }
    };
    let Tenant(t) = tenant?;
    let id: SessionId = session.parse().map_err(|_| Problem::not_found(format!("no session '{session}'")))?;
    if state.sessions.get_session(&t, id).await?.is_none() {
        return Err(Problem::not_found(format!("no session '{session}'")));
    }
    let page = state.executions.list_executions(&t, id, after, limit).await?;
    Ok(Json(page).into_response())
}

/// `GET /tenants/{t}/executions/{e}`
pub(crate) async fn get_one(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, execution)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let id: ExecutionId = execution.parse().map_err(|_| Problem::not_found(format!("no execution '{execution}'")))?;
    match state.executions.get_execution(&t, id).await? {
        Some(e) => Ok(Json(e).into_response()),
        None => Err(Problem::not_found(format!("no execution '{execution}'"))),
    }
}

/// `GET /tenants/{t}/executions/{e}/model-calls`: each model call of the execution with what it
/// was sent and what it answered, read from the session's recorded content (a part no longer
/// kept has `content: null`; a call recorded with `recording: off` has no request or response).
pub(crate) async fn model_calls(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, execution)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let no_execution = || Problem::not_found(format!("no execution '{execution}'"));
    let id: ExecutionId = execution.parse().map_err(|_| no_execution())?;
    let record = state.executions.get_execution(&t, id).await?.ok_or_else(no_execution)?;
    let calls = recorded::model_calls(state.executions.as_ref(), &record).await?;
    Ok(Json(json!({ "executionId": record.execution_id, "sessionId": record.session_id, "calls": calls }))
        .into_response())
}

/// `POST /tenants/{t}/executions/{e}/replay`: the execution run again by today's engine from its
/// record (its model answers and tool results; nothing called, committed or sent), and whether
/// it took the same actions; with `live`, the same message against the deployment's model and
/// the agent as it is now (changed by `agent` and `model`), the two side by side. `422` when the record cannot be replayed; `501` where the
/// deployment has no scratch engine (AWS: run `switchboard replay` against the embedded profile).
pub(crate) async fn replay(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, execution)): Path<(String, String)>,
    body: Result<JsonBody<serde_json::Value>, Problem>,
) -> Result<Response, Problem> {
    let no_execution = || Problem::not_found(format!("no execution '{execution}'"));
    let id: ExecutionId = execution.parse().map_err(|_| no_execution())?;
    let JsonBody(body) = body?;
    let options: ReplayOptions = switchboard_domain::input::read_value(body, "").map_err(Problem::invalid)?;
    if !options.live && (options.model.is_some() || options.agent.is_some()) {
        let why = "is for a live run only (with \"live\": true)";
        let at = if options.model.is_some() { "/model" } else { "/agent" };
        return Err(Problem::invalid(switchboard_domain::ValidationErrors::single(at, why)));
    }
    if let Some(model) = &options.model
        && let Err(why) = switchboard_domain::ModelRef::parse(model)
    {
        return Err(Problem::invalid(switchboard_domain::ValidationErrors::single("/model", why.to_string())));
    }
    let Some(replayer) = &state.replayer else {
        return Err(Problem::not_implemented(
            "this deployment does not replay executions: replay runs in the embedded profile (switchboard serve)",
        ));
    };
    match replayer.replay(&t, id, options).await {
        Ok(Some(report)) => Ok(Json(report).into_response()),
        Ok(None) => Err(no_execution()),
        Err(ReplayRefused::Unreplayable(why)) => Err(Problem::unprocessable(why)),
        Err(ReplayRefused::Invalid(errors)) => Err(Problem::invalid(errors)),
        Err(ReplayRefused::Store(e)) => Err(e.into()),
        Err(ReplayRefused::Failed(why)) => {
            tracing::warn!(execution = %id, reason = %why, "replay failed");
            Err(Problem::internal())
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct BySourceQuery {
    source_id: Option<String>,
}

/// `GET /tenants/{t}/executions?sourceId=…`: the execution that answered a source (a message's
/// `message-<conversation>:<message>`, as `POST /events` answers it, or `invoke-<Idempotency-Key>`),
/// where a `202` from `invoke` says to look.
pub(crate) async fn by_source(
    State(state): State<Arc<ApiState>>,
    Query(q): Query<BySourceQuery>,
    tenant: Result<Tenant, Problem>,
) -> Result<Response, Problem> {
    let Some(source) = q.source_id.filter(|s| !s.is_empty() && s.len() <= 200) else {
        return Err(Problem::invalid(ValidationErrors::single(
            "/query/sourceId",
            "required: the source id to look up",
        )));
    };
    let Tenant(t) = tenant?;
    match state.executions.execution_for_source(&t, &source).await? {
        Some(e) => Ok(Json(e).into_response()),
        None => Err(Problem::not_found(format!("no execution for source '{source}' (yet)"))),
    }
}
