//! Tools of a tenant's MCP server: what a tool record holds to call one tool of a Model Context
//! Protocol server over its Streamable HTTP transport, and how a server's listing becomes tool
//! records.
//!
//! One tool record stands for one tool of the server. Its `parameters` and `description` are the
//! server's, copied when the tool is imported and again only when it is refreshed: a server that
//! changes a tool's description or schema changes nothing an agent sees until someone refreshes
//! it, and the change is then a new version of the record, with its diff and its rollback.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::validation::ValidationErrors;

/// The header an MCP server's credential goes in unless the tool names another.
pub const DEFAULT_AUTH_HEADER: &str = "Authorization";

/// Longest name of a tool on an MCP server (the protocol sets none; this bounds the record).
pub const MAX_SERVER_TOOL_NAME: usize = 128;

/// Where a tenant's MCP server is and how it is reached: the members an MCP handler shares with
/// a request to list the server's tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServer {
    /// The server's MCP endpoint (Streamable HTTP), e.g. `https://tools.example.com/mcp`.
    pub url: String,
    /// Name of the tenant secret whose value is sent in `authHeader` (e.g. `Bearer …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// The header the secret goes in; `Authorization` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_header: Option<String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u32,
    /// Extra request headers (names outside the reserved set).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

fn default_timeout_ms() -> u32 {
    10_000
}

/// One tool of an MCP server: the server and the tool's name there (which may differ from the
/// record's `name`, the one the model calls).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct McpHandler {
    pub url: String,
    /// The tool's name on the server, sent in `tools/call`.
    pub tool: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_header: Option<String>,
    pub timeout_ms: u32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl McpHandler {
    /// The server this tool is on.
    pub fn server(&self) -> McpServer {
        McpServer {
            url: self.url.clone(),
            secret_ref: self.secret_ref.clone(),
            auth_header: self.auth_header.clone(),
            timeout_ms: self.timeout_ms,
            headers: self.headers.clone(),
        }
    }

    /// The handler for the tool `tool` of `server`.
    pub fn on(server: &McpServer, tool: &str) -> Self {
        Self {
            url: server.url.clone(),
            tool: tool.to_owned(),
            secret_ref: server.secret_ref.clone(),
            auth_header: server.auth_header.clone(),
            timeout_ms: server.timeout_ms,
            headers: server.headers.clone(),
        }
    }

    /// Checks the handler's shape (pointers under `at`), with timeouts up to `max_timeout_ms`.
    pub fn check(&self, errors: &mut ValidationErrors, at: &str, max_timeout_ms: u32) {
        self.server().check(errors, at, max_timeout_ms);
        if self.tool.is_empty()
            || self.tool.chars().count() > MAX_SERVER_TOOL_NAME
            || self.tool.contains(char::is_control)
        {
            errors.push(
                format!("{at}/tool"),
                format!("must be the server's tool name, 1 to {MAX_SERVER_TOOL_NAME} characters"),
            );
        }
    }
}

impl McpServer {
    /// The header the secret is sent in.
    pub fn auth_header(&self) -> &str {
        self.auth_header.as_deref().unwrap_or(DEFAULT_AUTH_HEADER)
    }

    /// Checks the server's members (pointers under `at`). Where the URL may connect to is
    /// checked when it is called, as for webhooks.
    pub fn check(&self, errors: &mut ValidationErrors, at: &str, max_timeout_ms: u32) {
        crate::tool::check_endpoint(errors, at, &self.url, self.timeout_ms, max_timeout_ms);
        crate::tool::check_secret_ref(errors, at, self.secret_ref.as_deref());
        crate::tool::check_headers(errors, at, &self.headers);
        // The transport's own: what it accepts, its session, its protocol version, its resumption.
        for name in self.headers.keys() {
            let lower = name.to_ascii_lowercase();
            if lower == "accept" || lower == "last-event-id" || lower.starts_with("mcp-") {
                errors.push(format!("{at}/headers/{name}"), "is a header of the MCP transport");
            }
        }
        if let Some(name) = &self.auth_header {
            let lower = name.to_ascii_lowercase();
            let token = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if !token || crate::tool::RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("mcp-") {
                errors.push(format!("{at}/authHeader"), "is not a header a credential may be sent in");
            }
        }
    }
}

/// A tool a server listed (`tools/list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedTool {
    /// The tool's name on the server.
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: serde_json::Value,
}

impl ListedTool {
    /// The body that creates this tool of `server` (`POST /tenants/{t}/tools`): named as
    /// [`suggested_name`] makes it, described as the server describes it (by its name if the
    /// server does not), with the server's schema.
    pub fn tool_body(&self, server: &McpServer) -> serde_json::Value {
        let description = match self.description.trim() {
            "" => format!("The tool {} of an MCP server.", self.name),
            described => described.to_owned(),
        };
        let mut handler = serde_json::to_value(McpHandler::on(server, &self.name)).unwrap_or_default();
        handler["type"] = "mcp".into();
        serde_json::json!({
            "name": suggested_name(&self.name),
            "description": description,
            "parameters": self.input_schema,
            "handler": handler,
        })
    }
}

/// A tool name a model provider accepts, made from a server's: letters, digits, `_` and `-`,
/// starting with a letter (`t_` put in front otherwise), at most 64 characters.
pub fn suggested_name(server_name: &str) -> String {
    let mut name: String =
        server_name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        name.insert_str(0, "t_");
    }
    name.truncate(64);
    name
}

/// The members a tool handler object may have, read before its `type` says which it is.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct HandlerMembers {
    url: String,
    #[serde(default)]
    secret_ref: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u32>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    retry_policy: Option<crate::RetryPolicy>,
    #[serde(default)]
    include_pii: Option<bool>,
    #[serde(default)]
    signature: Option<crate::webhook::SignatureScheme>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    auth_header: Option<String>,
}

impl HandlerMembers {
    /// The handler of type `kind` (`webhook` or `mcp`), or what does not belong to it.
    pub(crate) fn into_handler(self, kind: &str) -> Result<crate::ToolHandler, String> {
        let timeout_ms = self.timeout_ms.unwrap_or_else(default_timeout_ms);
        if kind == "mcp" {
            let webhook_only = [
                ("retryPolicy", self.retry_policy.is_some()),
                ("includePii", self.include_pii.is_some()),
                ("signature", self.signature.is_some()),
            ];
            if let Some((name, _)) = webhook_only.iter().find(|(_, set)| *set) {
                return Err(format!("'{name}' belongs to a webhook handler, not an mcp one"));
            }
            let tool = self.tool.ok_or("an mcp handler needs 'tool', the tool's name on the server")?;
            return Ok(crate::ToolHandler::Mcp(McpHandler {
                url: self.url,
                tool,
                secret_ref: self.secret_ref,
                auth_header: self.auth_header,
                timeout_ms,
                headers: self.headers,
            }));
        }
        if let Some(name) = [("tool", self.tool.is_some()), ("authHeader", self.auth_header.is_some())]
            .iter()
            .find_map(|(name, set)| set.then_some(name))
        {
            return Err(format!("'{name}' belongs to an mcp handler, not a webhook one"));
        }
        Ok(crate::ToolHandler::Webhook(crate::WebhookHandler {
            url: self.url,
            secret_ref: self.secret_ref,
            timeout_ms,
            headers: self.headers,
            retry_policy: self.retry_policy.unwrap_or_default(),
            include_pii: self.include_pii.unwrap_or(false),
            signature: self.signature.unwrap_or_default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Tool, ToolHandler};
    use serde_json::json;

    fn tool(handler: serde_json::Value) -> serde_json::Value {
        json!({
            "tenantId": "acme", "toolId": "01JD0000000000000000000T0A", "name": "lookup_order",
            "description": "Finds an order", "parameters": {"type": "object"}, "handler": handler,
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"
        })
    }

    fn read(handler: serde_json::Value) -> Result<Tool, Vec<String>> {
        crate::input::read_value::<Tool>(tool(handler), "")
            .map_err(|e| e.0.into_iter().map(|e| format!("{}: {}", e.pointer, e.detail)).collect())
    }

    #[test]
    fn an_mcp_tool_reads_and_writes_back_equal() {
        let handler = json!({"type": "mcp", "url": "https://tools.example.com/mcp", "tool": "orders.lookup",
                             "secretRef": "mcp-token", "timeoutMs": 3000});
        let read = read(handler.clone()).unwrap();
        let ToolHandler::Mcp(h) = &read.handler else { panic!("an mcp handler: {read:?}") };
        assert_eq!((h.tool.as_str(), h.server().auth_header()), ("orders.lookup", "Authorization"));
        let written = serde_json::to_value(&read).unwrap();
        assert_eq!(written["handler"], handler);
        assert_eq!(serde_json::from_value::<Tool>(written).unwrap(), read);
        assert!(read.validate().is_ok());
    }

    #[test]
    fn members_of_the_other_kind_of_handler_are_refused_by_name() {
        let mixed =
            json!({"type": "mcp", "url": "https://t.example.com/mcp", "tool": "x", "signature": "standard-webhooks"});
        let errors = read(mixed).unwrap_err();
        assert!(
            errors[0].starts_with("/handler: ") && errors[0].contains("'signature' belongs to a webhook"),
            "{errors:?}"
        );
        let missing = read(json!({"type": "mcp", "url": "https://t.example.com/mcp"})).unwrap_err();
        assert!(missing[0].contains("needs 'tool'"), "{missing:?}");
        let webhook = read(json!({"type": "webhook", "url": "https://t.example.com/h", "tool": "x"})).unwrap_err();
        assert!(webhook[0].contains("'tool' belongs to an mcp handler"), "{webhook:?}");
        let unknown = read(json!({"type": "grpc", "url": "https://t.example.com/h"})).unwrap_err();
        assert!(unknown[0].starts_with("/handler/type: ") && unknown[0].contains("mcp"), "{unknown:?}");
    }

    #[test]
    fn an_mcp_handlers_members_are_checked_at_their_pointers() {
        let bad = json!({"type": "mcp", "url": "ftp://t.example.com", "tool": "", "authHeader": "Host", "timeoutMs": 0,
                         "secretRef": " ", "headers": {"Mcp-Session-Id": "s"}});
        let errors = read(bad).unwrap().validate().unwrap_err();
        let mut pointers: Vec<&str> = errors.0.iter().map(|e| e.pointer.as_str()).collect();
        pointers.sort();
        assert_eq!(
            pointers,
            [
                "/handler/authHeader",
                "/handler/headers/Mcp-Session-Id",
                "/handler/secretRef",
                "/handler/timeoutMs",
                "/handler/tool",
                "/handler/url"
            ]
        );
    }

    #[test]
    fn a_servers_tool_name_becomes_one_a_provider_accepts() {
        assert_eq!(suggested_name("orders.lookup"), "orders_lookup");
        assert_eq!(suggested_name("1st/tool"), "t_1st_tool");
        assert_eq!(suggested_name(&"a".repeat(80)).len(), 64);
    }
}
