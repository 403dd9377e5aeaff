//! A tenant's MCP servers, for the tools imported from them: `POST /tenants/{t}/tools/discover`
//! lists what a server offers (each tool with the body that would create it, and what would be
//! refused of it), and `POST /tenants/{t}/tools/{id}/refresh` copies a server's current
//! description and schema of one imported tool into a new version of its record, if they changed.
//! Both call the server (through the same caller as a turn, under the same address rules) within
//! the request; neither is cached, since the record is the copy an agent uses. A deployment whose
//! API makes no outbound call (the AWS internal-api) answers both 501.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchboard_domain::input::read_value;
use switchboard_domain::mcp::{ListedTool, McpServer};
use switchboard_domain::tool::MAX_TOOL_TIMEOUT_MS;
use switchboard_domain::{TenantId, ToolHandler, ValidationErrors};
use switchboard_engine::{ConfigKind, ConfigRecord, WebhookError};

use super::config::{build, canonical_id, if_match, not_found, refused};
use crate::auth::Writer;
use crate::extract::{JsonBody, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

/// `POST /tenants/{t}/tools/discover` with an MCP server (`url`, `secretRef`, `authHeader`,
/// `timeoutMs`, `headers`): its tools, each with `tool` (the body that creates it) and `problems`
/// (what creating it as it is would be refused for, at its pointer in that body).
pub(crate) async fn discover(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    JsonBody(body): JsonBody<Value>,
) -> Result<Response, Problem> {
    let server: McpServer = read_value(body, "").map_err(Problem::invalid)?;
    let mut errors = ValidationErrors::default();
    server.check(&mut errors, "", MAX_TOOL_TIMEOUT_MS);
    errors.into_result().map_err(Problem::invalid)?;
    let listed = list(&state, &t, &server).await?;
    let now = chrono::Utc::now().to_rfc3339();
    let tools: Vec<Value> = listed
        .iter()
        .map(|tool| {
            let body = tool.tool_body(&server);
            let id = super::config::new_id(ConfigKind::Tool);
            let problems = match build(ConfigKind::Tool, &t, &id, body.clone(), &now, 1).and_then(|r| r.validate()) {
                Ok(()) => Vec::new(),
                Err(errors) => errors.0,
            };
            json!({ "name": tool.name, "description": tool.description, "inputSchema": tool.input_schema,
                    "tool": body, "problems": problems })
        })
        .collect();
    Ok(Json(json!({ "tools": tools })).into_response())
}

/// The body of a refresh: `{}` (nothing to say yet; a member is refused at its pointer).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefreshBody {}

/// `POST /tenants/{t}/tools/{id}/refresh` (`If-Match` optional): lists the tool's server again
/// and, if the server's description or schema of it changed, writes them as the record's next
/// version. Answers `{changed, tool}`; 409 if the tool is not one of an MCP server or the server
/// no longer lists it.
pub(crate) async fn refresh(
    State(state): State<Arc<ApiState>>,
    Writer(by): Writer,
    Tenant(t): Tenant,
    Path((_, id)): Path<(String, String)>,
    headers: HeaderMap,
    JsonBody(RefreshBody {}): JsonBody<RefreshBody>,
) -> Result<Response, Problem> {
    let kind = ConfigKind::Tool;
    let id = canonical_id(kind, &id).ok_or_else(|| not_found(kind, &id))?;
    let current = state.admin.get_config(&t, kind, &id).await?.ok_or_else(|| not_found(kind, &id))?;
    if let Some(expected) = if_match(&headers)?
        && expected != current.version()
    {
        return Err(Problem::precondition_failed(current.version()));
    }
    let ConfigRecord::Tool(tool) = &current else { return Err(not_found(kind, &id)) };
    let ToolHandler::Mcp(handler) = &tool.handler else {
        return Err(Problem::conflict(format!("the tool '{}' is not a tool of an MCP server", tool.name)));
    };
    let listed = list(&state, &t, &handler.server()).await?;
    let Some(now) = listed.iter().find(|l| l.name == handler.tool) else {
        return Err(Problem::conflict(format!("the server no longer lists the tool '{}'", handler.tool)));
    };
    let description = match now.description.trim() {
        "" => tool.description.clone(),
        described => described.to_owned(),
    };
    if description == tool.description && now.input_schema == tool.parameters {
        return Ok(Json(json!({ "changed": false, "tool": tool })).into_response());
    }
    let mut next = tool.clone();
    next.description = description;
    next.parameters = now.input_schema.clone();
    next.version = current.version() + 1;
    next.updated_at = chrono::Utc::now();
    let record = ConfigRecord::Tool(next);
    record.validate().map_err(Problem::invalid)?;
    state
        .config_service()
        .written_by(by)
        .replace(&record, current.version())
        .await
        .map_err(|e| refused(kind, &id, e))?;
    let mut res = (StatusCode::OK, Json(json!({ "changed": true, "tool": record }))).into_response();
    if let Ok(etag) = format!("\"{}\"", record.version()).parse() {
        res.headers_mut().insert(axum::http::header::ETAG, etag);
    }
    Ok(res)
}

/// The server's tools, or the problem its failure is for the caller.
async fn list(state: &ApiState, tenant: &TenantId, server: &McpServer) -> Result<Vec<ListedTool>, Problem> {
    let Some(caller) = &state.tool_servers else {
        return Err(Problem::not_implemented(
            "this deployment's API calls no tenant's server; `switchboard tools mcp` lists it from your machine",
        ));
    };
    caller.list_mcp(tenant, server).await.map_err(|e| match e {
        WebhookError::Blocked(why) => Problem::unprocessable(format!("the server may not be called: {why}")),
        WebhookError::Secret(why) => Problem::unprocessable(format!("the server's credential: {why}")),
        WebhookError::Timeout { .. } => Problem::gateway_timeout("the MCP server did not answer in time"),
        WebhookError::Http { status: 401 | 403 } => {
            Problem::bad_gateway("the MCP server refused the credential: check the secret named by secretRef")
        }
        other => Problem::bad_gateway(format!("the MCP server could not be listed: {other}")),
    })
}
