//! Custom tools: a tenant's webhook, called through the `WebhookCaller` port (a tool of the
//! tenant's MCP server is handed to `mcp`). The model's
//! arguments are validated against the tool's schema before any call; every outcome — a bad
//! argument, a refusal, a timeout, an HTTP error — goes back to the model as the tool result and
//! into the execution record's audit, never to the customer and never as a failed execution.

use serde_json::{Value, json};
use switchboard_domain::{Agent, ExecutionId, Session, Tool, ToolHandler, ToolId, TriggerStatus, WebhookAudit};
use tracing::info;

use super::call::ToolOutcome;
use crate::ports::{Deps, ToolSpec, WebhookError, WebhookRequest, WorkItem};

/// Calls `tool` with the model's `input`; `key` is the call's idempotency key.
pub(crate) async fn run(
    deps: &Deps,
    item: &WorkItem,
    session: &Session,
    execution_id: ExecutionId,
    tool: &Tool,
    input: &Value,
    key: &str,
) -> (ToolOutcome, WebhookAudit) {
    let handler = match &tool.handler {
        ToolHandler::Webhook(handler) => handler,
        ToolHandler::Mcp(handler) => return super::mcp::run(deps, item, tool, handler, input, key).await,
    };
    let host = host_of(&handler.url);
    let audit = |outcome: &str, status: Option<u16>, attempts: u32, bytes: usize, truncated: bool| {
        audit(&host, outcome, status, attempts, bytes, truncated)
    };
    if let Some(refused) = check_arguments(tool, input) {
        return (refused, audit("invalid_arguments", None, 0, 0, false));
    }
    let mut body = json!({
        "tool": tool.name,
        "arguments": input,
        "tenantId": item.tenant_id,
        "sessionId": session.session_id,
        "executionId": execution_id,
        "idempotencyKey": key,
    });
    if handler.include_pii
        && let Some(b) = body.as_object_mut()
    {
        b.insert("conversationId".into(), json!(item.conversation_id));
    }
    let request = WebhookRequest {
        tenant_id: item.tenant_id.clone(),
        tool_name: tool.name.clone(),
        handler: handler.clone(),
        body: body.to_string().into_bytes(),
        idempotency_key: key.to_owned(),
    };
    match deps.webhooks.call(&request).await {
        Ok(res) => {
            let parsed: Value = serde_json::from_slice(&res.body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&res.body).into_owned()));
            let ok = (200..300).contains(&res.status) && !res.truncated;
            let outcome = if ok { "ok" } else { "http_error" };
            info!(tool = %tool.name, host = %res.host, status = res.status, attempts = res.attempts, "webhook tool called");
            let output = if res.truncated {
                json!({ "error": "the tool's response was larger than 1 MiB and was cut off", "status": res.status })
            } else if ok {
                parsed
            } else {
                json!({ "error": format!("the tool answered HTTP {}", res.status), "body": parsed })
            };
            let audit = WebhookAudit {
                host: res.host.clone(),
                ..audit(outcome, Some(res.status), res.attempts, res.body.len(), res.truncated)
            };
            (ToolOutcome { output, is_error: !ok }, audit)
        }
        Err(e) => {
            let (outcome, attempts) = failure(&e);
            info!(tool = %tool.name, %host, outcome, "webhook tool call failed");
            let output = json!({ "error": format!("the tool could not be called: {e}") });
            (ToolOutcome { output, is_error: true }, audit(outcome, None, attempts, 0, false))
        }
    }
}

/// The host of an endpoint's URL, for the audit (never the path or query, which may hold data).
pub(super) fn host_of(url: &str) -> String {
    let host = url.split("://").nth(1).and_then(|rest| rest.split(['/', '?', '#']).next()).unwrap_or("");
    host.rsplit('@').next().unwrap_or(host).to_owned()
}

pub(super) fn audit(
    host: &str,
    outcome: &str,
    status: Option<u16>,
    attempts: u32,
    bytes: usize,
    truncated: bool,
) -> WebhookAudit {
    WebhookAudit {
        host: host.to_owned(),
        status,
        attempts,
        response_bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
        truncated,
        outcome: outcome.to_owned(),
    }
}

/// The tool result refusing `input`, if it breaks the tool's schema (compiled once per version).
pub(super) fn check_arguments(tool: &Tool, input: &Value) -> Option<ToolOutcome> {
    let compiled_as = format!("{}#{}", tool.tool_id, tool.version);
    let problems = switchboard_domain::schema::validate_cached(&compiled_as, &tool.parameters, input).err()?;
    let output = json!({ "error": format!("invalid arguments for {}", tool.name), "problems": problems });
    Some(ToolOutcome { output, is_error: true })
}

/// What the model reads when a call could not be made, and the audit's word for it.
pub(super) fn failure(e: &WebhookError) -> (&'static str, u32) {
    match e {
        WebhookError::Blocked(_) => ("blocked", 0),
        WebhookError::Timeout { attempts } => ("timeout", *attempts),
        WebhookError::Connect { attempts, .. } => ("connect_error", *attempts),
        WebhookError::Secret(_) => ("secret_error", 0),
        WebhookError::Invalid(_) => ("invalid_request", 0),
        WebhookError::Http { .. } => ("http_error", 1),
        WebhookError::Protocol(_) => ("protocol_error", 1),
    }
}

/// The active custom tools among `names` (system tool names and custom tool ids, as an agent,
/// step or skill lists them), in that order. An id that no longer names an active tool of the
/// tenant is left out (and logged): the agent runs without it.
pub(crate) async fn load(deps: &Deps, agent: &Agent, names: &[String]) -> Result<Vec<Tool>, crate::ports::StoreError> {
    let mut tools = Vec::new();
    for id in names.iter().filter_map(|t| t.parse::<ToolId>().ok()) {
        match deps.config.get_tool(&agent.tenant_id, id).await? {
            Some(t) if t.status == TriggerStatus::Active => tools.push(t),
            _ => tracing::warn!(agent_id = %agent.agent_id, tool_id = %id, "a listed tool is missing or inactive"),
        }
    }
    Ok(tools)
}

/// What the model is told about a custom tool: its schema with references inlined
/// ([`switchboard_domain::schema::for_model`]).
pub(crate) fn spec(tool: &Tool) -> ToolSpec {
    ToolSpec {
        name: tool.name.clone(),
        description: tool.description.clone(),
        input_schema: switchboard_domain::schema::for_model(&tool.parameters).into_owned(),
    }
}
