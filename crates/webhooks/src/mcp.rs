//! Tools of a tenant's MCP server, over the protocol's Streamable HTTP transport through its
//! official Rust SDK (`rmcp`), on the webhook caller's own HTTP client: the same SSRF guard at
//! connect time, no proxy, no redirects, the same trust store.
//!
//! Each call is one session — `initialize`, then `tools/call` (or every page of `tools/list`),
//! then the session is dropped — all within the tool's timeout. Nothing is kept between calls, so
//! a Lambda container frozen between invocations holds no session a server may have expired. The
//! credential named by `secretRef` goes in the handler's auth header; it is never logged, and
//! the errors reported never quote a request.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{ClientInitializeError, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::transport::{DynamicTransportError, StreamableHttpClientTransport};
use serde_json::Value;
use switchboard_domain::TenantId;
use switchboard_domain::mcp::{ListedTool, McpServer};
use switchboard_domain::tool::{MAX_TOOL_TIMEOUT_MS, RESERVED_HEADERS};
use switchboard_engine::ports::{McpAnswer, McpRequest, WebhookError};

use crate::{AttemptError, HttpWebhookCaller, MAX_RESPONSE_BYTES, classify, guard};

type Session = RunningService<RoleClient, ()>;

impl HttpWebhookCaller {
    /// `tools/call` of `request`'s tool, within its timeout.
    pub(crate) async fn mcp_call(&self, request: &McpRequest) -> Result<McpAnswer, WebhookError> {
        let server = request.handler.server();
        let host = self.check_url(&server.url)?.host_str().unwrap_or_default().to_owned();
        let exchange = async {
            let session = self.open(&request.tenant_id, &server).await?;
            let params =
                CallToolRequestParams::new(request.handler.tool.clone()).with_arguments(request.arguments.clone());
            let result = session.call_tool(params).await.map_err(|e| failure(&e))?;
            drop(session);
            let bytes = serde_json::to_vec(&result).map(|b| b.len()).unwrap_or(0);
            let Value::Object(mut result) =
                serde_json::to_value(&result).map_err(|e| WebhookError::Protocol(e.to_string()))?
            else {
                return Err(WebhookError::Protocol("the result is not an object".into()));
            };
            let content = match result.remove("content") {
                Some(Value::Array(blocks)) => blocks,
                _ => Vec::new(),
            };
            let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
            let structured = result.remove("structuredContent").filter(|v| !v.is_null());
            Ok(McpAnswer { content, structured, is_error, bytes, host: host.clone() })
        };
        let answer = within(server.timeout_ms, exchange).await;
        match &answer {
            Ok(a) => {
                tracing::info!(tool = %request.tool_name, tenant = %request.tenant_id, %host, is_error = a.is_error, bytes = a.bytes, "mcp tool called")
            }
            Err(e) => {
                tracing::warn!(tool = %request.tool_name, tenant = %request.tenant_id, %host, error = %e, "mcp tool call failed")
            }
        }
        answer
    }

    /// Every tool `server` lists, within its timeout.
    pub(crate) async fn mcp_list(
        &self,
        tenant: &TenantId,
        server: &McpServer,
    ) -> Result<Vec<ListedTool>, WebhookError> {
        self.check_url(&server.url)?;
        let listing = async {
            let session = self.open(tenant, server).await?;
            let tools = session.list_all_tools().await.map_err(|e| failure(&e))?;
            drop(session);
            Ok(tools
                .into_iter()
                .map(|t| ListedTool {
                    name: t.name.into_owned(),
                    description: t.description.map(|d| d.into_owned()).unwrap_or_default(),
                    input_schema: Value::Object((*t.input_schema).clone()),
                })
                .collect())
        };
        within(server.timeout_ms, listing).await
    }

    /// An initialised session with `server`.
    async fn open(&self, tenant: &TenantId, server: &McpServer) -> Result<Session, WebhookError> {
        let mut headers = HashMap::new();
        for (name, value) in &server.headers {
            let lower = name.to_ascii_lowercase();
            if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("switchboard-") {
                continue;
            }
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                headers.insert(n, v);
            }
        }
        if let Some(name) = &server.secret_ref {
            let secret = self.secrets.get(tenant, name).await?;
            let value = HeaderValue::from_bytes(secret.expose())
                .map_err(|_| WebhookError::Secret(format!("the secret '{name}' is not a valid header value")))?;
            let header = HeaderName::from_bytes(server.auth_header().as_bytes())
                .map_err(|_| WebhookError::Invalid("the auth header is not a header name".into()))?;
            headers.insert(header, value);
        }
        let config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str())
            .custom_headers(headers)
            .max_json_response_size(MAX_RESPONSE_BYTES)
            .max_sse_event_size(MAX_RESPONSE_BYTES)
            .reinit_on_expired_session(false);
        let transport = StreamableHttpClientTransport::with_client(self.client.clone(), config);
        ().serve(transport).await.map_err(|e| failure(&e))
    }
}

/// `exchange` within `timeout_ms` (capped as a webhook's is); a call cut off is a timeout.
async fn within<T>(
    timeout_ms: u32,
    exchange: impl Future<Output = Result<T, WebhookError>>,
) -> Result<T, WebhookError> {
    let timeout = Duration::from_millis(u64::from(timeout_ms.clamp(1, MAX_TOOL_TIMEOUT_MS)));
    tokio::time::timeout(timeout, exchange).await.unwrap_or(Err(WebhookError::Timeout { attempts: 1 }))
}

/// What stopped an exchange: the guard, the network, or the server's answer. Never quotes a
/// request (the SDK's errors name the URL, whose query may hold a tenant's data).
fn failure(error: &(dyn std::error::Error + 'static)) -> WebhookError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(transport) = transport_error(e) {
            return from_transport(transport);
        }
        if let Some(blocked) = e.downcast_ref::<guard::BlockedAddress>() {
            return WebhookError::Blocked(blocked.to_string());
        }
        source = e.source();
    }
    WebhookError::Protocol(chain(error))
}

type TransportError = StreamableHttpError<reqwest::Error>;

/// The HTTP transport's error inside one of the SDK's (which do not all give it as a source).
fn transport_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a TransportError> {
    let dynamic = match e.downcast_ref::<ClientInitializeError>() {
        Some(ClientInitializeError::TransportError { error, .. }) => Some(error),
        _ => e.downcast_ref::<DynamicTransportError>(),
    };
    match dynamic {
        Some(d) => d.error.downcast_ref::<TransportError>(),
        None => e.downcast_ref::<TransportError>(),
    }
}

fn from_transport(error: &TransportError) -> WebhookError {
    match error {
        StreamableHttpError::Client(http) => match classify(http) {
            AttemptError::Blocked(reason) => WebhookError::Blocked(reason),
            AttemptError::Timeout => WebhookError::Timeout { attempts: 1 },
            // Refused, reset or cut off: the network's failure, not the server's answer.
            AttemptError::Connect(message) | AttemptError::Other(message) => {
                WebhookError::Connect { message, attempts: 1 }
            }
            AttemptError::Answer(_) => WebhookError::Protocol("an unexpected answer".into()),
        },
        StreamableHttpError::HttpStatus(status) => WebhookError::Http { status: status.status },
        StreamableHttpError::AuthRequired(_) => WebhookError::Http { status: 401 },
        StreamableHttpError::InsufficientScope(_) => WebhookError::Http { status: 403 },
        // What the SDK reports of any other HTTP error: `HTTP 401 Unauthorized: <body>`.
        StreamableHttpError::UnexpectedServerResponse(text) => match http_status(text) {
            Some(status) => WebhookError::Http { status },
            None => WebhookError::Protocol(text.to_string()),
        },
        other => WebhookError::Protocol(other.to_string()),
    }
}

/// The status of an `HTTP <status> …` description.
fn http_status(text: &str) -> Option<u16> {
    let status = text.strip_prefix("HTTP ")?.split([' ', ':']).next()?.parse().ok()?;
    (400..600).contains(&status).then_some(status)
}

/// An error and its causes, one after the other.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}
