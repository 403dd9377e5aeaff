//! Tools: the system tools every agent can be granted, and tenant-defined custom tools.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ids::{TenantId, ToolId};

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
}

impl SystemTool {
    pub const ALL: [SystemTool; 7] = [
        SystemTool::SendMessage,
        SystemTool::HandoffToHuman,
        SystemTool::HandoffToAgent,
        SystemTool::EndConversation,
        SystemTool::TriggerFlow,
        SystemTool::SetContext,
        SystemTool::GetContext,
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
                    "context": {"type": "object"}
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolHandler {
    #[serde(rename_all = "camelCase")]
    Webhook { url: String, timeout_ms: u32 },
}

/// A tenant-defined tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tool {
    pub tenant_id: TenantId,
    pub tool_id: ToolId,
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
    pub handler: ToolHandler,
    #[serde(default)]
    pub status: crate::trigger::TriggerStatus,
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
}
