//! A conversation as the tenant's channel knows it: its messages
//! (`GET …/conversations/{c}/messages`, embedded profile) and the sessions that served it
//! (`…/sessions`). Read-only.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::extract::Tenant;
use crate::problem::Problem;
use crate::state::ApiState;

/// Most messages one answer lists.
const MAX_MESSAGES: usize = 1000;

pub(crate) async fn messages(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, conversation)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let Some(log) = &state.conversations else {
        return Err(Problem::not_found("this deployment keeps no conversation log"));
    };
    let messages = log.messages(&t, &conversation, MAX_MESSAGES).await?;
    Ok(Json(json!({ "conversationId": conversation, "messages": messages })).into_response())
}

pub(crate) async fn sessions(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, conversation)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let sessions = state.sessions.sessions_for_conversation(&t, &conversation).await?;
    Ok(Json(json!({ "conversationId": conversation, "sessions": sessions })).into_response())
}
