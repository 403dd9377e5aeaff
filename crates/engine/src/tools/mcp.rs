//! Tools of a tenant's MCP server: the model's arguments checked against the schema the server
//! gave (as for webhooks), then one `tools/call` through the `WebhookCaller` port. What the
//! server answers — a result, the tool's own error, a broken answer — and what stopped the call
//! go back to the model as the tool result and into the record's audit, named.

use serde_json::{Value, json};
use switchboard_domain::mcp::McpHandler;
use switchboard_domain::{Tool, WebhookAudit};
use tracing::info;

use super::call::ToolOutcome;
use super::webhook::{audit, check_arguments, failure, host_of};
use crate::ports::{Deps, McpAnswer, McpRequest, WorkItem};

pub(super) async fn run(
    deps: &Deps,
    item: &WorkItem,
    tool: &Tool,
    handler: &McpHandler,
    input: &Value,
    key: &str,
) -> (ToolOutcome, WebhookAudit) {
    let host = host_of(&handler.url);
    if let Some(refused) = check_arguments(tool, input) {
        return (refused, audit(&host, "invalid_arguments", None, 0, 0, false));
    }
    let arguments = input.as_object().cloned().unwrap_or_default();
    let request = McpRequest {
        tenant_id: item.tenant_id.clone(),
        tool_name: tool.name.clone(),
        handler: handler.clone(),
        arguments,
        idempotency_key: key.to_owned(),
    };
    match deps.webhooks.call_mcp(&request).await {
        Ok(answer) => {
            let outcome = if answer.is_error { "tool_error" } else { "ok" };
            info!(tool = %tool.name, host = %answer.host, outcome, "mcp tool called");
            let output = output(&answer);
            (
                ToolOutcome { output, is_error: answer.is_error },
                audit(&answer.host, outcome, None, 1, answer.bytes, false),
            )
        }
        Err(e) => {
            let (outcome, attempts) = failure(&e);
            info!(tool = %tool.name, %host, outcome, "mcp tool call failed");
            let output = json!({ "error": format!("the tool could not be called: {e}") });
            (ToolOutcome { output, is_error: true }, audit(&host, outcome, None, attempts, 0, false))
        }
    }
}

/// What the model reads of a result: the structured content if the server gave one, else the
/// text of a result that is one text block, else the content blocks; a tool's error says so.
fn output(answer: &McpAnswer) -> Value {
    let texts: Vec<&str> = answer.content.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect();
    let content = match (&answer.structured, texts.as_slice()) {
        (Some(structured), _) if !answer.is_error => structured.clone(),
        (_, [one]) if answer.content.len() == 1 => Value::String((*one).to_owned()),
        _ => Value::Array(answer.content.clone()),
    };
    if answer.is_error { json!({ "error": "the tool reported an error", "content": content }) } else { content }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(content: Value, structured: Option<Value>, is_error: bool) -> McpAnswer {
        let content = content.as_array().cloned().unwrap_or_default();
        McpAnswer { content, structured, is_error, bytes: 0, host: "h".into() }
    }

    #[test]
    fn the_model_reads_structured_content_else_one_text_else_the_blocks() {
        let text = json!([{ "type": "text", "text": "shipped" }]);
        assert_eq!(output(&answer(text.clone(), None, false)), json!("shipped"));
        assert_eq!(
            output(&answer(text.clone(), Some(json!({ "status": "shipped" })), false)),
            json!({ "status": "shipped" })
        );
        let two =
            json!([{ "type": "text", "text": "a" }, { "type": "image", "data": "AA==", "mimeType": "image/png" }]);
        assert_eq!(output(&answer(two.clone(), None, false)), two);
        assert_eq!(
            output(&answer(text, Some(json!({})), true)),
            json!({ "error": "the tool reported an error", "content": "shipped" })
        );
    }

    #[test]
    fn an_answer_made_from_what_the_model_read_reads_the_same() {
        for (read, is_error) in [
            (json!("shipped"), false),
            (json!({ "status": "shipped" }), false),
            (
                json!([{ "type": "text", "text": "a" }, { "type": "image", "data": "AA==", "mimeType": "image/png" }]),
                false,
            ),
            (json!({ "error": "the tool reported an error", "content": "cannot" }), true),
        ] {
            assert_eq!(output(&McpAnswer::reading(&read, is_error, "h")), read);
        }
    }
}
