//! Tenant webhook tools: the signed call, and the tenant secrets that sign it.

use async_trait::async_trait;
use switchboard_domain::mcp::{ListedTool, McpHandler, McpServer};
use switchboard_domain::{TenantId, WebhookHandler};

/// One call of a tenant's webhook tool. The engine builds the JSON body; the adapter signs it
/// with the tenant secret named by `handler.secret_ref` (the engine never sees the secret),
/// enforces the limits and the address rules, and retries as the handler's policy allows.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRequest {
    pub tenant_id: TenantId,
    pub tool_name: String,
    pub handler: WebhookHandler,
    /// The exact bytes sent and signed.
    pub body: Vec<u8>,
    /// Stable across retries and redeliveries of the same tool call.
    pub idempotency_key: String,
}

/// What the endpoint answered (any status: a 4xx is the tool's answer, for the model to read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResponse {
    pub status: u16,
    pub body: Vec<u8>,
    /// The body was longer than the cap and was cut off.
    pub truncated: bool,
    /// Requests sent, retries included.
    pub attempts: u32,
    /// The host called (for the audit record; never the full URL with its query).
    pub host: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The URL, or the address it resolved to, is not allowed (private, loopback, metadata…).
    #[error("blocked: {0}")]
    Blocked(String),
    #[error("timed out after {attempts} attempt(s)")]
    Timeout { attempts: u32 },
    #[error("could not connect after {attempts} attempt(s): {message}")]
    Connect { message: String, attempts: u32 },
    /// The signing secret is missing or could not be read. The message never holds the secret.
    #[error("secret: {0}")]
    Secret(String),
    #[error("{0}")]
    Invalid(String),
    /// An MCP server answered an HTTP error instead of the protocol's answer (a refused
    /// credential, an overloaded server).
    #[error("the server answered HTTP {status}")]
    Http { status: u16 },
    /// An MCP server answered outside the protocol (not JSON-RPC, an error instead of a result,
    /// a result of the wrong shape).
    #[error("the server broke the MCP protocol: {0}")]
    Protocol(String),
}

/// One `tools/call` of a tool of a tenant's MCP server. The adapter adds the credential named by
/// `handler.secret_ref` (the engine never sees it) and enforces the address rules and the
/// handler's timeout over the whole exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct McpRequest {
    pub tenant_id: TenantId,
    /// The record's name (the one the model called), for logs.
    pub tool_name: String,
    pub handler: McpHandler,
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// The call's idempotency key (stable across redeliveries), as a webhook's; not sent, since
    /// `tools/call` has no such member: it lets a replay find the recorded answer.
    pub idempotency_key: String,
}

/// What a tool of an MCP server answered: its `CallToolResult`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpAnswer {
    /// The result's `content` blocks, as the server sent them.
    pub content: Vec<serde_json::Value>,
    /// The result's `structuredContent`, if any.
    pub structured: Option<serde_json::Value>,
    /// The server said the tool failed (`isError`).
    pub is_error: bool,
    /// Bytes of the result as received.
    pub bytes: usize,
    pub host: String,
}

impl McpAnswer {
    /// An answer the model reads as `output` (what a record keeps of a call), for a replay or an
    /// evaluation that answers from it: a string is one text block, an array the blocks, anything
    /// else the structured content; a tool's error is `{"error", "content"}`.
    pub fn reading(output: &serde_json::Value, is_error: bool, host: &str) -> Self {
        use serde_json::{Value, json};
        let read = if is_error { output.get("content").unwrap_or(output) } else { output };
        let (content, structured) = match read {
            Value::String(text) => (vec![json!({ "type": "text", "text": text })], None),
            Value::Array(blocks) => (blocks.clone(), None),
            other => (vec![json!({ "type": "text", "text": other.to_string() })], Some(other.clone())),
        };
        Self { content, structured, is_error, bytes: output.to_string().len(), host: host.to_owned() }
    }
}

/// Calls tenant webhooks ([`WebhookRequest`]) and the tools of their MCP servers
/// ([`McpRequest`]), under the same address rules.
#[async_trait]
pub trait WebhookCaller: Send + Sync {
    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError>;

    /// Calls one tool of an MCP server.
    async fn call_mcp(&self, _request: &McpRequest) -> Result<McpAnswer, WebhookError> {
        Err(WebhookError::Blocked("MCP tools are not enabled in this runtime".into()))
    }

    /// Lists the tools of `server` (every page of `tools/list`).
    async fn list_mcp(&self, _tenant: &TenantId, _server: &McpServer) -> Result<Vec<ListedTool>, WebhookError> {
        Err(WebhookError::Blocked("MCP tools are not enabled in this runtime".into()))
    }
}

/// The caller of a runtime configured without webhook tools: every call is refused, and the
/// model is told so in the tool result.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoWebhooks;

#[async_trait]
impl WebhookCaller for NoWebhooks {
    async fn call(&self, _request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        Err(WebhookError::Blocked("webhook tools are not enabled in this runtime".into()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secrets: {message}")]
pub struct SecretError {
    pub message: String,
    pub retryable: bool,
}

/// Tenant secrets (Secrets Manager on AWS, a secrets file in the embedded profile).
/// Implementations may cache briefly; values must never be logged.
#[async_trait]
pub trait Secrets: Send + Sync {
    async fn get_secret(&self, tenant: &TenantId, name: &str) -> Result<Option<String>, SecretError>;
}

/// The secrets source of a runtime configured without any: every secret is missing, so a tool
/// that names one is refused (and the model told why) rather than called unsigned.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSecrets;

#[async_trait]
impl Secrets for NoSecrets {
    async fn get_secret(&self, _tenant: &TenantId, _name: &str) -> Result<Option<String>, SecretError> {
        Ok(None)
    }
}
