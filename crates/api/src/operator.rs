//! What a human operator does to a conversation handed to humans, over HTTP (the console's
//! actions): `POST /tenants/{t}/sessions/{s}/claim`, `…/messages` (reply as a human, with a
//! required `Idempotency-Key`) and `…/end`. Handing back to an agent is `…/handoff`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::ids::check_external_id;
use switchboard_domain::limits::MAX_MESSAGE_TEXT_BYTES;
use switchboard_domain::{SessionId, TenantId, ValidationErrors};
use switchboard_engine::OperatorError;

use crate::auth::Caller;
use crate::routes::{json_body, known_tenant};
use crate::{ApiState, Problem};

/// Longest operator name.
const MAX_OPERATOR_CHARS: usize = 64;
/// Longest note an operator leaves when ending a conversation.
const MAX_NOTE_CHARS: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimBody {
    operator: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyBody {
    operator: String,
    text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndBody {
    operator: String,
    #[serde(default)]
    note: Option<String>,
}

/// `POST …/claim {operator}`: 200 with the session; 409 when another operator holds it.
pub(crate) async fn claim(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, session_raw)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, Problem> {
    let (t, s) = target(&state, &caller, &tenant_raw, &session_raw).await?;
    let body: ClaimBody = json_body(&body)?;
    let mut errors = ValidationErrors::default();
    check_operator(&body.operator, &mut errors);
    errors.into_result().map_err(Problem::invalid)?;
    let session = state.operator.claim(&t, s, body.operator.trim()).await.map_err(|e| problem(e, s))?;
    Ok(Json(session).into_response())
}

/// `POST …/messages {operator, text}` with `Idempotency-Key`: 201 `{messageId, executionId}`
/// when sent, 200 with `duplicate: true` when that key was sent before.
pub(crate) async fn reply(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, session_raw)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    let (t, s) = target(&state, &caller, &tenant_raw, &session_raw).await?;
    let body: ReplyBody = json_body(&body)?;
    let mut errors = ValidationErrors::default();
    check_operator(&body.operator, &mut errors);
    if body.text.trim().is_empty() || body.text.len() > MAX_MESSAGE_TEXT_BYTES {
        errors.push("/text", format!("must be 1 to {MAX_MESSAGE_TEXT_BYTES} bytes, not only spaces"));
    }
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    match key {
        None => errors.push("/headers/Idempotency-Key", "is required: a retried reply must not be sent twice"),
        Some(k) if check_external_id(k).is_err() => {
            errors.push("/headers/Idempotency-Key", "must be 1 to 63 characters of letters, digits, '-', '_' or '.'");
        }
        Some(_) => {}
    }
    errors.into_result().map_err(Problem::invalid)?;
    let key = key.unwrap_or_default();
    let done = state.operator.reply(&t, s, body.operator.trim(), &body.text, key).await.map_err(|e| problem(e, s))?;
    let status = if done.duplicate { StatusCode::OK } else { StatusCode::CREATED };
    let answer = json!({
        "messageId": done.message_id, "executionId": done.execution.execution_id, "duplicate": done.duplicate,
    });
    Ok((status, Json(answer)).into_response())
}

/// `POST …/end {operator, note?}`: the conversation ends; `session.ended` is published.
pub(crate) async fn end(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, session_raw)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, Problem> {
    let (t, s) = target(&state, &caller, &tenant_raw, &session_raw).await?;
    let body: EndBody = json_body(&body)?;
    let mut errors = ValidationErrors::default();
    check_operator(&body.operator, &mut errors);
    if body.note.as_ref().is_some_and(|n| n.chars().count() > MAX_NOTE_CHARS) {
        errors.push("/note", format!("must be at most {MAX_NOTE_CHARS} characters"));
    }
    errors.into_result().map_err(Problem::invalid)?;
    let note = body.note.as_deref().map(str::trim).filter(|n| !n.is_empty());
    let record = state.operator.end(&t, s, body.operator.trim(), note).await.map_err(|e| problem(e, s))?;
    Ok(Json(json!({ "status": "completed", "executionId": record.execution_id })).into_response())
}

/// The tenant (one the caller may see) and the session of the path.
async fn target(
    state: &ApiState,
    caller: &Caller,
    tenant_raw: &str,
    session_raw: &str,
) -> Result<(TenantId, SessionId), Problem> {
    let t = known_tenant(state, caller, tenant_raw).await?;
    let s = session_raw.parse().map_err(|_| Problem::not_found(format!("no session '{session_raw}'")))?;
    Ok((t, s))
}

fn check_operator(operator: &str, errors: &mut ValidationErrors) {
    let n = operator.trim().chars().count();
    if n == 0 || n > MAX_OPERATOR_CHARS || operator.chars().any(char::is_control) {
        errors.push("/operator", format!("must be 1 to {MAX_OPERATOR_CHARS} characters, no control characters"));
    }
}

/// How a refused or failed operator action answers.
pub(crate) fn problem(e: OperatorError, session: SessionId) -> Problem {
    match e {
        OperatorError::NoSession(_) => Problem::not_found(format!("no session '{session}'")),
        OperatorError::UnknownAgent(a) => Problem::invalid(ValidationErrors::single(
            "/targetAgentId",
            format!("no active agent '{a}' in this tenant"),
        )),
        e @ (OperatorError::NotAllowed(_) | OperatorError::Conflict) => Problem::conflict(e.to_string()),
        OperatorError::Store(e) => e.into(),
        OperatorError::Bus(e) => {
            tracing::error!(error = %e, "event bus failed during an operator action or handoff");
            if e.retryable { Problem::unavailable() } else { Problem::internal() }
        }
        OperatorError::Send(e) => {
            tracing::error!(error = %e, "the operator's message could not be sent");
            if e.retryable { Problem::unavailable() } else { Problem::internal() }
        }
    }
}
