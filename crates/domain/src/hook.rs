//! Lifecycle hooks: a tenant's webhooks an agent calls at defined points of a turn — before and
//! after each model call, before and after each tool call, and at the turn's end — each able to
//! observe, to change what goes on (the model's messages, a tool's arguments or result, the
//! answer's text) or to stop the turn with a reason. The shapes and their checks; the calls are
//! the engine's (`switchboard_engine::hooks`).

use serde::{Deserialize, Serialize};

use crate::WebhookHandler;
use crate::validation::ValidationErrors;
use crate::webhook::SignatureScheme;

/// Where in a turn a hook is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookPoint {
    /// Before each model call, with the system prompt and the messages; may change either.
    BeforeModel,
    /// After each model answer; may change its text.
    AfterModel,
    /// Before each tool call, with the tool's name and arguments; may change the arguments.
    BeforeTool,
    /// After each tool call, with its result; may change the result the model reads.
    AfterTool,
    /// Once the turn is decided, with its status and actions; observes only.
    TurnEnd,
}

impl HookPoint {
    pub fn as_str(self) -> &'static str {
        match self {
            HookPoint::BeforeModel => "before_model",
            HookPoint::AfterModel => "after_model",
            HookPoint::BeforeTool => "before_tool",
            HookPoint::AfterTool => "after_tool",
            HookPoint::TurnEnd => "turn_end",
        }
    }

    fn about_tools(self) -> bool {
        matches!(self, HookPoint::BeforeTool | HookPoint::AfterTool)
    }
}

/// What a hook that cannot be called, or answers what cannot be used, means for the turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookOnError {
    /// The turn goes on as if the hook had answered "continue" (the default).
    #[default]
    Continue,
    /// The turn stops, as a failed one: the agent's `onFailure` answers the customer.
    Stop,
}

/// One hook of an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hook {
    pub at: HookPoint,
    /// Where it is called and how: a webhook like a tool's (signed, bounded, fenced).
    pub handler: WebhookHandler,
    #[serde(default)]
    pub on_error: HookOnError,
    /// For `before_tool` and `after_tool`: the tools (by name) it is called for; empty, every
    /// tool the dispatcher runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

impl Hook {
    /// Whether this hook is called at `at` (for the tool `tool`, at a tool point).
    pub fn applies(&self, at: HookPoint, tool: Option<&str>) -> bool {
        self.at == at && (self.tools.is_empty() || tool.is_some_and(|t| self.tools.iter().any(|n| n == t)))
    }
}

/// Most hooks an agent may have.
pub const MAX_HOOKS: usize = 8;

/// Longest a hook may take: it holds the turn up at every call.
pub const MAX_HOOK_TIMEOUT_MS: u32 = 10_000;

/// Checks an agent's hooks, each fault at its pointer under `/hooks`.
pub fn check_hooks(errors: &mut ValidationErrors, hooks: &[Hook]) {
    if hooks.len() > MAX_HOOKS {
        errors.push("/hooks", format!("at most {MAX_HOOKS} hooks"));
    }
    for (i, hook) in hooks.iter().enumerate() {
        let at = format!("/hooks/{i}");
        hook.handler.check(errors, &format!("{at}/handler"), MAX_HOOK_TIMEOUT_MS);
        if !hook.tools.is_empty() && !hook.at.about_tools() {
            errors.push(format!("{at}/tools"), "only before_tool and after_tool hooks name tools");
        }
        if hook.handler.signature != SignatureScheme::default() && hook.handler.secret_ref.is_none() {
            errors.push(format!("{at}/handler/secretRef"), "a signature scheme needs a secret to sign with");
        }
    }
}

/// What a hook did, as the execution record keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookOutcome {
    /// Answered "continue", changing nothing.
    Continued,
    /// Answered a change, which was applied.
    Changed,
    /// Answered "stop": the turn stopped with its reason.
    Stopped,
    /// Could not be called, or answered what could not be used; `onError` decided the rest.
    Failed,
}

/// One call of a hook, in the execution record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookCall {
    pub at: HookPoint,
    /// The host called (never the full URL).
    pub host: String,
    /// The HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub outcome: HookOutcome,
    /// A stop's reason, or why the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// At a tool point: the tool call's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    pub latency_ms: u64,
    /// How many model calls the execution had made when the hook ran.
    #[serde(default)]
    pub after_model_call: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(json: serde_json::Value) -> Result<Hook, serde_json::Error> {
        serde_json::from_value(json)
    }

    #[test]
    fn a_tool_hook_applies_to_the_tools_it_names_or_to_all() {
        let all =
            hook(serde_json::json!({ "at": "before_tool", "handler": { "url": "https://h.example/x" } })).unwrap();
        assert!(
            all.applies(HookPoint::BeforeTool, Some("refund")) && !all.applies(HookPoint::AfterTool, Some("refund"))
        );
        let refunds = Hook { tools: vec!["refund".into()], ..all };
        assert!(refunds.applies(HookPoint::BeforeTool, Some("refund")));
        assert!(!refunds.applies(HookPoint::BeforeTool, Some("lookup")));
    }

    #[test]
    fn bad_hooks_are_named_at_their_pointers() {
        let bad = hook(serde_json::json!({
            "at": "before_model", "tools": ["refund"],
            "handler": { "url": "ftp://h.example", "timeoutMs": 60000 }
        }))
        .unwrap();
        let mut errors = ValidationErrors::default();
        check_hooks(&mut errors, &[bad]);
        let pointers: Vec<&str> = errors.0.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/hooks/0/handler/url", "/hooks/0/handler/timeoutMs", "/hooks/0/tools"]);
        assert!(hook(serde_json::json!({ "at": "whenever", "handler": {} })).is_err());
    }
}
