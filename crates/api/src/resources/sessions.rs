//! Sessions and what people do to them: read one or a page of them (`GET …/sessions[/{s}]`),
//! hand one off to a human or an agent or back (`POST …/{s}/handoff`), and the operator's actions
//! on a conversation handed to humans (the console's): claim, reply as a human (with a required
//! `Idempotency-Key`) and end. The moves themselves are the engine's; this module maps HTTP onto
//! them and their refusals onto problems.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::ids::check_external_id;
use switchboard_domain::limits::MAX_MESSAGE_TEXT_BYTES;
use switchboard_domain::{AgentId, Priority, SessionId, ValidationErrors};
use switchboard_engine::{HandoffTo, OperatorError, TurnCancelled};

use crate::auth::Caller;
use crate::extract::{JsonBody, Query, Session, Tenant, page_limit};
use crate::problem::Problem;
use crate::state::ApiState;

/// `GET /tenants/{t}/sessions/{s}`
pub(crate) async fn get_one(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Session { id, raw }: Session,
) -> Result<Response, Problem> {
    match state.sessions.get_session(&t, id).await? {
        Some(s) => Ok(Json(s).into_response()),
        None => Err(Problem::not_found(format!("no session '{raw}'"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SessionsQuery {
    status: Option<String>,
    agent_id: Option<String>,
    channel: Option<String>,
    variant: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

/// The longest `channel` or `variant` a sessions query takes.
const MAX_FILTER_TEXT: usize = 128;

/// `GET /tenants/{t}/sessions[?status&agentId&channel&variant&cursor&limit]`: the tenant's
/// sessions, newest first (`status=handed_off` lists the conversations handed to a human or
/// another agent).
pub(crate) async fn list(
    State(state): State<Arc<ApiState>>,
    Query(q): Query<SessionsQuery>,
    tenant: Result<Tenant, Problem>,
) -> Result<Response, Problem> {
    let limit = page_limit(q.limit)?;
    let mut errors = ValidationErrors::default();
    let status = match q.status.as_deref() {
        None => None,
        Some(raw) => match serde_json::from_value::<switchboard_domain::SessionStatus>(json!(raw)) {
            Ok(s) => Some(s),
            Err(_) => {
                errors.push("/query/status", "must be one of active, handed_off, completed, failed, abandoned");
                None
            }
        },
    };
    let agent_id = q.agent_id.as_deref().and_then(|raw| {
        let parsed = raw.parse::<switchboard_domain::AgentId>().ok();
        if parsed.is_none() {
            errors.push("/query/agentId", "must be an agent id (a ULID)");
        }
        parsed
    });
    let after = q.cursor.as_deref().and_then(|raw| {
        let parsed = raw.parse::<SessionId>().ok();
        if parsed.is_none() {
            errors.push("/query/cursor", "must be the nextCursor of a previous page");
        }
        parsed
    });
    let mut text = |name: &str, raw: Option<String>| {
        let bad = raw.as_ref().is_some_and(|v| v.is_empty() || v.len() > MAX_FILTER_TEXT);
        if bad {
            errors.push(format!("/query/{name}"), format!("must be 1 to {MAX_FILTER_TEXT} bytes"));
        }
        raw.filter(|_| !bad)
    };
    let (channel, variant) = (text("channel", q.channel), text("variant", q.variant));
    errors.into_result().map_err(Problem::invalid)?;
    let Tenant(t) = tenant?;
    let filter = switchboard_engine::SessionFilter { status, agent_id, channel, variant };
    let page = state.sessions.list_sessions(&t, filter, after, limit).await?;
    Ok(Json(page).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TargetType {
    Agent,
    Human,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HandoffBody {
    target_type: TargetType,
    #[serde(default)]
    target_agent_id: Option<String>,
    reason: String,
    /// Only with `targetType: human`; `normal` when left out.
    #[serde(default)]
    priority: Option<Priority>,
}

impl HandoffBody {
    /// Where the body hands the conversation, or every field at fault.
    pub(crate) fn check(&self) -> Result<HandoffTo, ValidationErrors> {
        let mut errors = ValidationErrors::default();
        if self.reason.trim().is_empty() || self.reason.chars().count() > 1000 {
            errors.push("/reason", "must be 1 to 1000 characters");
        }
        if self.priority.is_some() && matches!(self.target_type, TargetType::Agent) {
            errors.push("/priority", "applies only when targetType is human");
        }
        let to = match (&self.target_type, &self.target_agent_id) {
            (TargetType::Human, None) => Some(HandoffTo::Human(self.priority.unwrap_or_default())),
            (TargetType::Human, Some(_)) => {
                errors.push("/targetAgentId", "must be left out when targetType is human");
                None
            }
            (TargetType::Agent, None) => {
                errors.push("/targetAgentId", "is required when targetType is agent");
                None
            }
            (TargetType::Agent, Some(raw)) => match raw.parse::<AgentId>() {
                Ok(id) => Some(HandoffTo::Agent(id)),
                Err(_) => {
                    errors.push("/targetAgentId", format!("'{raw}' is not an agent id"));
                    None
                }
            },
        };
        errors.into_result()?;
        // Each `None` pushed its error above.
        to.ok_or_else(|| ValidationErrors::single("/targetType", "names no target"))
    }
}

/// `POST /tenants/{t}/sessions/{s}/handoff`: move the conversation to a human or an agent, or
/// hand a human-owned conversation back to an agent, as the signed-in principal. Answers
/// `{newSessionId?, status, executionId}`.
pub(crate) async fn hand_off(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Session { id: session_id, .. }: Session,
    JsonBody(body): JsonBody<HandoffBody>,
) -> Result<Response, Problem> {
    let to = body.check().map_err(Problem::invalid)?;
    let done = state
        .operator
        .hand_off(&t, session_id, to, body.reason.trim(), &caller.principal)
        .await
        .map_err(|e| problem(e, session_id))?;
    Ok(Json(json!({ "newSessionId": done.new_session_id, "status": "handed_off", "executionId": done.execution.execution_id }))
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelBody {
    reason: String,
}

/// `POST …/cancel {reason}`: the agent's turn stops and the conversation goes to a human, as the
/// signed-in principal. A turn paused for an approval answers `202 {status: "cancelling",
/// approval}`: the approval is cancelled, and its resumption (queued in the conversation's
/// order) runs none of the turn's calls and hands the conversation over. Otherwise the session is
/// handed to a human now: `200 {status: "handed_off", executionId}`.
pub(crate) async fn cancel(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Session { id: session_id, .. }: Session,
    JsonBody(body): JsonBody<CancelBody>,
) -> Result<Response, Problem> {
    let reason = body.reason.trim();
    if reason.is_empty() || reason.chars().count() > 1000 {
        return Err(Problem::invalid(ValidationErrors::single("/reason", "must be 1 to 1000 characters")));
    }
    let cancelled = state
        .operator
        .cancel_turn(&t, session_id, reason, &caller.principal)
        .await
        .map_err(|e| problem(e, session_id))?;
    Ok(match cancelled {
        TurnCancelled::Paused(approval) => {
            (StatusCode::ACCEPTED, Json(json!({ "status": "cancelling", "approval": approval }))).into_response()
        }
        TurnCancelled::HandedOff(done) => {
            Json(json!({ "status": "handed_off", "executionId": done.execution.execution_id })).into_response()
        }
    })
}

/// Longest note an operator leaves when ending a conversation.
const MAX_NOTE_CHARS: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimBody {
    #[serde(default)]
    operator: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplyBody {
    #[serde(default)]
    operator: Option<String>,
    text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EndBody {
    #[serde(default)]
    operator: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

impl ClaimBody {
    pub(crate) fn check(&self, caller: &Caller) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        check_operator(self.operator.as_deref(), caller, &mut errors);
        errors.into_result()
    }
}

impl ReplyBody {
    /// The body's fields and the request's `Idempotency-Key` (`key`), every one at fault.
    pub(crate) fn check(&self, caller: &Caller, key: Option<&str>) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        check_operator(self.operator.as_deref(), caller, &mut errors);
        if self.text.trim().is_empty() || self.text.len() > MAX_MESSAGE_TEXT_BYTES {
            errors.push("/text", format!("must be 1 to {MAX_MESSAGE_TEXT_BYTES} bytes, not only spaces"));
        }
        match key {
            None => errors.push("/headers/Idempotency-Key", "is required: a retried reply must not be sent twice"),
            Some(k) if check_external_id(k).is_err() => {
                errors
                    .push("/headers/Idempotency-Key", "must be 1 to 63 characters of letters, digits, '-', '_' or '.'");
            }
            Some(_) => {}
        }
        errors.into_result()
    }
}

impl EndBody {
    pub(crate) fn check(&self, caller: &Caller) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        check_operator(self.operator.as_deref(), caller, &mut errors);
        if self.note.as_ref().is_some_and(|n| n.chars().count() > MAX_NOTE_CHARS) {
            errors.push("/note", format!("must be at most {MAX_NOTE_CHARS} characters"));
        }
        errors.into_result()
    }
}

/// `POST …/claim {}`: 200 with the session, claimed by the signed-in principal; 409 when
/// another operator holds it.
pub(crate) async fn claim(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Session { id: s, .. }: Session,
    JsonBody(body): JsonBody<ClaimBody>,
) -> Result<Response, Problem> {
    body.check(&caller).map_err(Problem::invalid)?;
    let session = state.operator.claim(&t, s, &caller.principal).await.map_err(|e| problem(e, s))?;
    Ok(Json(session).into_response())
}

/// `POST …/messages {text}` with `Idempotency-Key`, sent as the signed-in principal: 201
/// `{messageId, executionId}` when sent, 200 with `duplicate: true` when that key was sent before.
pub(crate) async fn reply(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Session { id: s, .. }: Session,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ReplyBody>,
) -> Result<Response, Problem> {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    body.check(&caller, key).map_err(Problem::invalid)?;
    let key = key.unwrap_or_default();
    let done = state.operator.reply(&t, s, &caller.principal, &body.text, key).await.map_err(|e| problem(e, s))?;
    let status = if done.duplicate { StatusCode::OK } else { StatusCode::CREATED };
    let answer = json!({
        "messageId": done.message_id, "executionId": done.execution.execution_id, "duplicate": done.duplicate,
    });
    Ok((status, Json(answer)).into_response())
}

/// `POST …/end {note?}`: the conversation ends, by the signed-in principal; `session.ended` is
/// published.
pub(crate) async fn end(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Session { id: s, .. }: Session,
    JsonBody(body): JsonBody<EndBody>,
) -> Result<Response, Problem> {
    body.check(&caller).map_err(Problem::invalid)?;
    let note = body.note.as_deref().map(str::trim).filter(|n| !n.is_empty());
    let record = state.operator.end(&t, s, &caller.principal, note).await.map_err(|e| problem(e, s))?;
    Ok(Json(json!({ "status": "completed", "executionId": record.execution_id })).into_response())
}

/// An operator action is recorded as the signed-in principal, never as a typed name: an
/// `operator` in the body (what clients sent before principals) must name that principal.
fn check_operator(operator: Option<&str>, caller: &Caller, errors: &mut ValidationErrors) {
    if let Some(named) = operator
        && named.trim() != caller.principal
    {
        errors.push(
            "/operator",
            format!("is the signed-in principal ('{}'), taken from the API key; leave it out", caller.principal),
        );
    }
}

/// How a refused or failed operator action answers.
fn problem(e: OperatorError, session: SessionId) -> Problem {
    match e {
        OperatorError::NoSession(_) => Problem::not_found(format!("no session '{session}'")),
        OperatorError::UnknownAgent(a) => Problem::invalid(ValidationErrors::single(
            "/targetAgentId",
            format!("no active agent '{a}' in this tenant"),
        )),
        e @ (OperatorError::NotAllowed(_) | OperatorError::Conflict) => Problem::conflict(e.to_string()),
        e @ OperatorError::NoApproval(_) => Problem::not_found(e.to_string()),
        OperatorError::Invalid(errors) => Problem::invalid(errors),
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
