//! Tools: the system tools every agent can be granted, and tenant-defined custom tools.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{TenantId, ToolId};
use crate::limits::MAX_DESCRIPTION_LEN;
use crate::validation::ValidationErrors;

/// Prefix of the tools generated for an agent's step transitions (`transition_to_<stepId>`).
pub const TRANSITION_PREFIX: &str = "transition_to_";

/// Prefix of the tools through which a supervisor calls its sub-agents (`ask_<name>`).
pub const SUB_AGENT_PREFIX: &str = "ask_";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolType {
    System,
    Custom,
}

/// Built-in tools the engine runs itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemTool {
    SendMessage,
    HandoffToHuman,
    HandoffToAgent,
    EndConversation,
    TriggerFlow,
    SetContext,
    GetContext,
    RecallDetails,
}

impl SystemTool {
    pub const ALL: [SystemTool; 8] = [
        SystemTool::SendMessage,
        SystemTool::HandoffToHuman,
        SystemTool::HandoffToAgent,
        SystemTool::EndConversation,
        SystemTool::TriggerFlow,
        SystemTool::SetContext,
        SystemTool::GetContext,
        SystemTool::RecallDetails,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SystemTool::SendMessage => "send_message",
            SystemTool::HandoffToHuman => "handoff_to_human",
            SystemTool::HandoffToAgent => "handoff_to_agent",
            SystemTool::EndConversation => "end_conversation",
            SystemTool::TriggerFlow => "trigger_flow",
            SystemTool::SetContext => "set_context",
            SystemTool::GetContext => "get_context",
            SystemTool::RecallDetails => "recall_details",
        }
    }

    /// Comma-separated names, for error messages.
    pub fn names() -> String {
        Self::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
    }

    pub fn description(self) -> &'static str {
        match self {
            SystemTool::SendMessage => "Send a reply to the customer in this conversation.",
            SystemTool::HandoffToHuman => {
                "Escalate the conversation to a human operator. The agent stops answering it."
            }
            SystemTool::HandoffToAgent => "Transfer the conversation to another agent of this tenant.",
            SystemTool::EndConversation => "Mark the conversation as resolved and end the session.",
            SystemTool::TriggerFlow => "Start an automation flow of the tenant.",
            SystemTool::SetContext => "Remember a fact in session memory for later turns.",
            SystemTool::GetContext => "Read facts from session memory.",
            SystemTool::RecallDetails => {
                "Read the full result of an earlier tool call that was shown shortened, by the handle it gave."
            }
        }
    }

    /// JSON Schema of the arguments, as shown to the model and enforced before running.
    pub fn parameters(self) -> serde_json::Value {
        use serde_json::json;
        match self {
            SystemTool::SendMessage => json!({
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1}},
                "required": ["text"],
                "additionalProperties": false
            }),
            SystemTool::HandoffToHuman => json!({
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "minLength": 1},
                    "priority": {"type": "string", "enum": ["low", "normal", "high", "urgent"]}
                },
                "required": ["reason"],
                "additionalProperties": false
            }),
            SystemTool::HandoffToAgent => json!({
                "type": "object",
                "properties": {
                    "agentId": {"type": "string"},
                    "reason": {"type": "string", "minLength": 1},
                    "summary": {"type": "string", "description": "The conversation so far, for the next agent."},
                    "context": {"type": "object", "description": "Facts the next agent needs."}
                },
                "required": ["agentId", "reason"],
                "additionalProperties": false
            }),
            SystemTool::EndConversation => json!({
                "type": "object",
                "properties": {"summary": {"type": "string"}},
                "additionalProperties": false
            }),
            SystemTool::TriggerFlow => json!({
                "type": "object",
                "properties": {"flowId": {"type": "string", "minLength": 1}, "input": {"type": "object"}},
                "required": ["flowId"],
                "additionalProperties": false
            }),
            SystemTool::SetContext => json!({
                "type": "object",
                "properties": {"key": {"type": "string", "minLength": 1, "maxLength": 64}, "value": {}},
                "required": ["key", "value"],
                "additionalProperties": false
            }),
            SystemTool::GetContext => json!({
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "additionalProperties": false
            }),
            SystemTool::RecallDetails => json!({
                "type": "object",
                "properties": {"handle": {"type": "string", "minLength": 1}},
                "required": ["handle"],
                "additionalProperties": false
            }),
        }
    }

    /// Tools after which the agent loop stops: the conversation left the agent's hands.
    pub fn is_terminal(self) -> bool {
        matches!(self, SystemTool::HandoffToHuman | SystemTool::HandoffToAgent | SystemTool::EndConversation)
    }
}

impl fmt::Display for SystemTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SystemTool {
    type Err = UnknownSystemTool;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SystemTool::ALL.into_iter().find(|t| t.name() == s).ok_or(UnknownSystemTool)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a system tool")]
pub struct UnknownSystemTool;

/// How a custom tool is executed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolHandler {
    Webhook(WebhookHandler),
    /// A tool of the tenant's MCP server ([`crate::mcp`]).
    Mcp(crate::mcp::McpHandler),
}

/// Read as serde's tagged enum would be, but with each member's error at its own pointer.
impl<'de> Deserialize<'de> for ToolHandler {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;

        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = ToolHandler;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ToolHandler, A::Error> {
                let (kind, members): (String, crate::mcp::HandlerMembers) =
                    crate::strict_json::tagged(map, "type", &["webhook", "mcp"])?;
                members.into_handler(&kind).map_err(serde::de::Error::custom)
            }
        }

        d.deserialize_map(Members)
    }
}

/// A tenant's HTTPS endpoint, called with a signed JSON `POST`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookHandler {
    pub url: String,
    /// Name of the tenant secret that signs the request (Secrets Manager / the secrets file).
    /// Without one, requests are sent unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u32,
    /// Extra request headers the tenant wants sent (e.g. an API version). Only names outside
    /// the reserved set are allowed; see [`RESERVED_HEADERS`].
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub retry_policy: RetryPolicy,
    /// Send the conversation id (personal data) in the request body.
    #[serde(default)]
    pub include_pii: bool,
    /// How requests are signed: Switchboard's own scheme unless the tool asks for Standard
    /// Webhooks. Left out when it is the default, so records written before it read back equal.
    #[serde(default, skip_serializing_if = "crate::webhook::SignatureScheme::is_default")]
    pub signature: crate::webhook::SignatureScheme,
}

fn default_timeout_ms() -> u32 {
    10_000
}

impl WebhookHandler {
    /// Checks the handler's shape (its pointers under `at`), with timeouts up to `max_timeout_ms`.
    /// Where the URL may connect to (no private or metadata addresses) is checked when it is
    /// called.
    pub fn check(&self, errors: &mut ValidationErrors, at: &str, max_timeout_ms: u32) {
        check_endpoint(errors, at, &self.url, self.timeout_ms, max_timeout_ms);
        if self.retry_policy.max_retries > MAX_TOOL_RETRIES || self.retry_policy.backoff_ms > 10_000 {
            errors.push(
                format!("{at}/retryPolicy"),
                format!("maxRetries must be at most {MAX_TOOL_RETRIES} and backoffMs at most 10000"),
            );
        }
        check_secret_ref(errors, at, self.secret_ref.as_deref());
        check_headers(errors, at, &self.headers);
    }
}

/// An outbound endpoint's `url` and `timeoutMs` (a webhook's, an MCP server's).
pub(crate) fn check_endpoint(errors: &mut ValidationErrors, at: &str, url: &str, timeout_ms: u32, max_timeout_ms: u32) {
    if !(url.starts_with("https://") || url.starts_with("http://"))
        || url.len() > 2048
        || url.contains(char::is_whitespace)
    {
        errors.push(format!("{at}/url"), "must be an http(s) URL of at most 2048 characters");
    }
    if timeout_ms == 0 || timeout_ms > max_timeout_ms {
        errors.push(format!("{at}/timeoutMs"), format!("must be between 1 and {max_timeout_ms}"));
    }
}

pub(crate) fn check_secret_ref(errors: &mut ValidationErrors, at: &str, secret_ref: Option<&str>) {
    if let Some(r) = secret_ref
        && (r.is_empty() || r.len() > 128 || r.contains(char::is_whitespace))
    {
        errors.push(format!("{at}/secretRef"), "must be a secret name of 1 to 128 characters");
    }
}

/// Extra request headers: names outside [`RESERVED_HEADERS`] and `Switchboard-*`, one-line values.
pub(crate) fn check_headers(
    errors: &mut ValidationErrors,
    at: &str,
    headers: &std::collections::BTreeMap<String, String>,
) {
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let token = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !token || RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("switchboard-") {
            errors.push(format!("{at}/headers/{name}"), "is not a header a tool may set");
        } else if value.contains(['\r', '\n']) || value.len() > 1024 {
            errors.push(format!("{at}/headers/{name}"), "must be one line of at most 1024 bytes");
        }
    }
}

/// Retries of a webhook call: only on connect errors, 429 and 5xx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub backoff_ms: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 2, backoff_ms: 200 }
    }
}

/// Request headers a tool may not set: framing, routing, and the Standard Webhooks headers (any
/// `Switchboard-*` name is refused besides).
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "expect",
    crate::webhook::standard::ID_HEADER,
    crate::webhook::standard::TIMESTAMP_HEADER,
    crate::webhook::standard::SIGNATURE_HEADER,
];

/// Most retries a webhook tool may ask for.
pub const MAX_TOOL_RETRIES: u32 = 5;

/// A tenant-defined tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tool {
    pub tenant_id: TenantId,
    pub tool_id: ToolId,
    #[serde(rename = "type", default = "custom")]
    pub tool_type: ToolType,
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: serde_json::Value,
    #[serde(deserialize_with = "crate::strict_json::object")]
    pub handler: ToolHandler,
    /// When a call waits for a person's approval before it runs ([`crate::approval`]).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::approval::through_json")]
    pub approval: Option<crate::approval::ApprovalPolicy>,
    #[serde(default)]
    pub status: crate::trigger::TriggerStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub version: u64,
}

fn custom() -> ToolType {
    ToolType::Custom
}

/// Longest webhook timeout a tool may ask for.
pub const MAX_TOOL_TIMEOUT_MS: u32 = 30_000;

impl Tool {
    /// Checks the record on its own. The webhook URL is checked for shape here; where it may
    /// connect to (no private or metadata addresses) is checked when it is called.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        if self.tool_type != ToolType::Custom {
            errors.push("/type", "only custom tools can be created; system tools are built in");
        }
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && self.name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic());
        if !name_ok {
            errors.push("/name", "must be 1 to 64 letters, digits, '_' or '-', starting with a letter");
        } else if self.name.parse::<SystemTool>().is_ok()
            || self.name.starts_with(TRANSITION_PREFIX)
            || self.name.starts_with(SUB_AGENT_PREFIX)
            || self.name == LOAD_SKILL
        {
            errors.push("/name", format!("'{}' is reserved for a system tool", self.name));
        }
        if self.description.trim().is_empty() || self.description.chars().count() > MAX_DESCRIPTION_LEN {
            errors.push("/description", format!("must be 1 to {MAX_DESCRIPTION_LEN} characters"));
        }
        check_parameters_schema(&mut errors, &self.parameters);
        match &self.handler {
            ToolHandler::Webhook(h) => h.check(&mut errors, "/handler", MAX_TOOL_TIMEOUT_MS),
            ToolHandler::Mcp(h) => h.check(&mut errors, "/handler", MAX_TOOL_TIMEOUT_MS),
        }
        if let Some(approval) = &self.approval {
            approval.check(&mut errors, "/approval");
        }
        errors.into_result()
    }
}

/// A tool's `parameters` must be an object schema the model providers accept: `type: object`,
/// `properties` an object of schemas, `required` a list of listed property names; at every depth,
/// only the keywords `crate::schema` supports (any other is refused at its pointer).
fn check_parameters_schema(errors: &mut ValidationErrors, schema: &serde_json::Value) {
    let Some(obj) = schema.as_object() else {
        errors.push("/parameters", "must be a JSON Schema object");
        return;
    };
    if obj.get("type").and_then(|t| t.as_str()) != Some("object") {
        errors.push("/parameters/type", "must be \"object\"");
    }
    let props = match obj.get("properties") {
        None => None,
        Some(serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if !v.is_object() && !v.is_boolean() {
                    errors.push(
                        format!("/parameters/properties/{}", k.replace('~', "~0").replace('/', "~1")),
                        "must be a schema (an object)",
                    );
                }
            }
            Some(p)
        }
        Some(_) => {
            errors.push("/parameters/properties", "must be an object");
            None
        }
    };
    match obj.get("required") {
        None => {}
        Some(serde_json::Value::Array(names)) => {
            for (i, n) in names.iter().enumerate() {
                match n.as_str() {
                    Some(name) if props.is_some_and(|p| p.contains_key(name)) => {}
                    _ => errors.push(format!("/parameters/required/{i}"), "must name a property listed in properties"),
                }
            }
        }
        Some(_) => errors.push("/parameters/required", "must be an array of property names"),
    }
    if schema.to_string().len() > 16 * 1024 {
        errors.push("/parameters", "must be at most 16 KiB of JSON");
    }
    let mut deeper = ValidationErrors::default();
    crate::schema::check_supported(schema, "/parameters", &mut deeper);
    // The shallow checks above already reported these pointers.
    for e in deeper.0 {
        if !errors.0.iter().any(|seen| seen.pointer == e.pointer) {
            errors.0.push(e);
        }
    }
}

/// Checks a list of tool references: system tool names or custom tool ids, no repeats.
/// The generated tool through which an agent with skills loads one.
pub const LOAD_SKILL: &str = "load_skill";

pub(crate) fn check_tool_refs(errors: &mut ValidationErrors, pointer: &str, tools: &[String]) {
    let mut seen = std::collections::HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        if !seen.insert(tool) {
            errors.push(format!("{pointer}/{i}"), format!("lists '{tool}' twice"));
        } else if tool.parse::<SystemTool>().is_err() && tool.parse::<ToolId>().is_err() {
            errors.push(
                format!("{pointer}/{i}"),
                format!("'{tool}' is neither a system tool ({}) nor a custom tool id", SystemTool::names()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_tool_names_round_trip() {
        for tool in SystemTool::ALL {
            assert_eq!(tool.name().parse::<SystemTool>(), Ok(tool));
            assert_eq!(serde_json::to_value(tool).ok(), Some(serde_json::json!(tool.name())));
        }
        assert!("rm_rf".parse::<SystemTool>().is_err());
    }

    fn webhook_tool(handler: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "tenantId": "acme", "toolId": "01JD0000000000000000000T0A", "name": "lookup_order",
            "description": "Finds an order", "parameters": {"type": "object"}, "handler": handler,
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z"
        })
    }

    fn read(handler: serde_json::Value) -> Result<Tool, Vec<String>> {
        crate::input::read_value::<Tool>(webhook_tool(handler), "")
            .map_err(|e| e.0.into_iter().map(|e| format!("{}: {}", e.pointer, e.detail)).collect())
    }

    #[test]
    fn a_webhook_tool_signs_with_switchboards_scheme_unless_it_asks_for_standard_webhooks() {
        // given a tool written before the choice existed
        let old = serde_json::json!({"type": "webhook", "url": "https://example.com/hook", "timeoutMs": 5000});
        let tool = read(old).unwrap();
        let ToolHandler::Webhook(h) = &tool.handler else { panic!("a webhook handler") };
        assert_eq!(h.signature, crate::webhook::SignatureScheme::Switchboard);
        // then it is written back without the field
        let written = serde_json::to_value(&tool).unwrap();
        assert!(written["handler"].get("signature").is_none(), "{written}");
        // and a tool asking for Standard Webhooks says so, and reads back equal
        let standard =
            serde_json::json!({"type": "webhook", "url": "https://example.com/hook", "signature": "standard-webhooks"});
        let tool = read(standard).unwrap();
        let ToolHandler::Webhook(h) = &tool.handler else { panic!("a webhook handler") };
        assert_eq!(h.signature, crate::webhook::SignatureScheme::StandardWebhooks);
        let written = serde_json::to_value(&tool).unwrap();
        assert_eq!(written["handler"]["signature"], "standard-webhooks");
        assert_eq!(serde_json::from_value::<Tool>(written).unwrap(), tool);
    }

    #[test]
    fn an_unknown_signature_scheme_and_the_standard_headers_are_refused_at_their_pointers() {
        let bad = serde_json::json!({"type": "webhook", "url": "https://example.com/hook", "signature": "svix"});
        let errors = read(bad).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("/handler/signature: "), "{errors:?}");
        assert!(errors[0].contains("standard-webhooks"), "the known values are named: {errors:?}");
        for name in ["webhook-id", "Webhook-Timestamp", "webhook-signature"] {
            let handler =
                serde_json::json!({"type": "webhook", "url": "https://example.com/hook", "headers": {name: "x"}});
            let errors = read(handler).unwrap().validate().unwrap_err();
            assert_eq!(errors.0[0].pointer, format!("/handler/headers/{name}"));
        }
    }
}
