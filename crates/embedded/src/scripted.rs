//! `ScriptedModel`: a deterministic TEST DOUBLE for the model port — not an AI. It answers from
//! rules in a JSON file: the first rule whose `when` matches the latest turn decides the reply
//! (text and/or tool calls). Tests and the offline demo use it so that every run is repeatable;
//! everything it produces is labelled with the model id [`SCRIPTED_MODEL_ID`].
//!
//! ```json
//! { "rules": [
//!   { "when": { "userText": { "contains": "human" } },
//!     "then": { "toolCalls": [ { "name": "handoff_to_human", "input": { "reason": "asked for a person" } } ] } },
//!   { "when": { "afterTool": "set_context" }, "then": { "text": "Noted." } },
//!   { "when": {}, "then": { "text": "You said: {{userText}}" } }
//! ] }
//! ```
//!
//! `when` keys (all optional, all must hold): `userText` (`equals` / `contains` / `matches`,
//! case-insensitive) on the newest user text; `afterTool` (the newest turn is a result of that
//! tool); `model` (the agent's model id equals); `systemContains` (the system prompt contains).
//! An empty `when` always matches. In `text`, `{{userText}}` is the newest user text and
//! `{{toolResult}}` the newest tool result(s). No matching rule is an error (`Rejected`), like a model
//! refusing a request.

use std::path::Path;

use async_trait::async_trait;
use regex::Regex;
use serde::Deserialize;
use switchboard_domain::TokenUsage;
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_engine::{Model, ModelError, ModelRequest, ModelResponse, StopReason};

/// The model id on every response of the scripted model.
pub const SCRIPTED_MODEL_ID: &str = "scripted-test-double";

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read script {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("script {path} is not valid: {source}")]
    Parse { path: String, source: serde_json::Error },
    #[error("script rule {rule}: bad regex: {source}")]
    Regex { rule: usize, source: regex::Error },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    rules: Vec<RuleSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    #[serde(default)]
    when: WhenSpec,
    then: Then,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WhenSpec {
    #[serde(default)]
    user_text: Option<TextMatch>,
    #[serde(default)]
    after_tool: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    system_contains: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TextMatch {
    #[serde(default)]
    equals: Option<String>,
    #[serde(default)]
    contains: Option<String>,
    #[serde(default)]
    matches: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Then {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallSpec {
    name: String,
    #[serde(default = "empty_object")]
    input: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

#[derive(Debug, Clone)]
struct Rule {
    when: WhenSpec,
    regex: Option<Regex>,
    then: Then,
}

/// The scripted test double. See the module docs.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    rules: Vec<Rule>,
}

impl ScriptedModel {
    pub fn from_file(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ScriptError::Read { path: path.display().to_string(), source })?;
        Self::from_json(&text).map_err(|e| match e {
            ScriptError::Parse { source, .. } => ScriptError::Parse { path: path.display().to_string(), source },
            other => other,
        })
    }

    pub fn from_json(text: &str) -> Result<Self, ScriptError> {
        let script: Script =
            serde_json::from_str(text).map_err(|source| ScriptError::Parse { path: "<inline>".into(), source })?;
        let mut rules = Vec::with_capacity(script.rules.len());
        for (i, spec) in script.rules.into_iter().enumerate() {
            let regex = match spec.when.user_text.as_ref().and_then(|t| t.matches.as_deref()) {
                Some(p) => Some(
                    regex::RegexBuilder::new(p)
                        .case_insensitive(true)
                        .build()
                        .map_err(|source| ScriptError::Regex { rule: i, source })?,
                ),
                None => None,
            };
            rules.push(Rule { when: spec.when, regex, then: spec.then });
        }
        Ok(Self { rules })
    }
}

/// The newest user text in the conversation and, if the newest turn is a tool result, the name
/// of the tool it answers.
fn latest(messages: &[Message]) -> (String, Option<String>) {
    // The newest customer text block: customer messages in a row arrive merged into one turn.
    let user_text = messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| m.content.iter().rev())
        .find_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default();
    // A tool result merged with customer messages that followed it is not "after the tool".
    let after_tool = messages.last().filter(|m| m.has_tool_results() && m.text().is_empty()).and_then(|last| {
        let id = last.content.iter().rev().find_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })?;
        messages.iter().rev().flat_map(|m| m.content.iter()).find_map(|b| match b {
            ContentBlock::ToolUse { tool_use_id, name, .. } if tool_use_id == id => Some(name.clone()),
            _ => None,
        })
    });
    (user_text, after_tool)
}

/// The newest tool result, as text (a JSON string as is, anything else as compact JSON);
/// several results of one turn are joined with "; ".
fn tool_result(messages: &[Message]) -> String {
    let Some(last) = messages.last().filter(|m| m.has_tool_results()) else { return String::new() };
    let parts: Vec<String> = last
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content: serde_json::Value::String(s), .. } => Some(s.clone()),
            ContentBlock::ToolResult { content, .. } => Some(content.to_string()),
            _ => None,
        })
        .collect();
    parts.join("; ")
}

impl Rule {
    fn matches(&self, request: &ModelRequest, user_text: &str, after_tool: Option<&str>) -> bool {
        let w = &self.when;
        if let Some(t) = &w.user_text {
            let lower = user_text.to_lowercase();
            if t.equals.as_ref().is_some_and(|e| e.to_lowercase() != lower) {
                return false;
            }
            if t.contains.as_ref().is_some_and(|c| !lower.contains(&c.to_lowercase())) {
                return false;
            }
            if self.regex.as_ref().is_some_and(|r| !r.is_match(user_text)) {
                return false;
            }
            // A rule about user text does not answer a tool result.
            if after_tool.is_some() {
                return false;
            }
        }
        if let Some(tool) = &w.after_tool
            && after_tool != Some(tool.as_str())
        {
            return false;
        }
        if w.model.as_ref().is_some_and(|m| m != &request.model) {
            return false;
        }
        if w.system_contains.as_ref().is_some_and(|s| !request.system.contains(s.as_str())) {
            return false;
        }
        true
    }
}

#[async_trait]
impl Model for ScriptedModel {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let (user_text, after_tool) = latest(&request.messages);
        let Some(rule) = self.rules.iter().find(|r| r.matches(request, &user_text, after_tool.as_deref())) else {
            return Err(ModelError::Rejected(format!(
                "scripted model: no rule matches the latest turn (user text {:?}, after tool {:?})",
                user_text, after_tool
            )));
        };
        let mut content = Vec::new();
        if let Some(text) = &rule.then.text {
            content.push(ContentBlock::Text {
                text: text
                    .replace("{{userText}}", &user_text)
                    .replace("{{toolResult}}", &tool_result(&request.messages)),
            });
        }
        // Tool-use ids are derived from the position in the conversation, so a replay produces
        // the same ids.
        let turn = request.messages.len();
        for (i, call) in rule.then.tool_calls.iter().enumerate() {
            content.push(ContentBlock::ToolUse {
                tool_use_id: format!("scripted-{turn}-{i}"),
                name: call.name.clone(),
                input: call.input.clone(),
            });
        }
        let stop_reason = if rule.then.tool_calls.is_empty() { StopReason::EndTurn } else { StopReason::ToolUse };
        let input_tokens: u32 = request.messages.iter().map(Message::estimated_tokens).sum::<u32>()
            + u32::try_from(request.system.len() / 4).unwrap_or(u32::MAX);
        let output_tokens = Message { role: Role::Assistant, content: content.clone() }.estimated_tokens();
        Ok(ModelResponse {
            content,
            stop_reason,
            usage: TokenUsage::new(input_tokens.into(), output_tokens.into()),
            model: SCRIPTED_MODEL_ID.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_domain::ModelConfig;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system: "You are a test agent.".into(),
            messages,
            tools: vec![],
            config: ModelConfig::default(),
            deadline: None,
            recording: switchboard_domain::Recording::Full,
        }
    }

    #[tokio::test]
    async fn the_first_matching_rule_answers_and_says_it_is_scripted() {
        let m = ScriptedModel::from_json(
            r#"{"rules":[{"when":{"userText":{"contains":"HELLO"}},"then":{"text":"hi {{userText}}"}},{"then":{"text":"fallback"}}]}"#,
        )
        .unwrap();
        let r = m.converse(&request(vec![Message::user_text("well hello")])).await.unwrap();
        assert_eq!(r.content, vec![ContentBlock::Text { text: "hi well hello".into() }]);
        assert_eq!(r.model, SCRIPTED_MODEL_ID);
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        let r = m.converse(&request(vec![Message::user_text("bye")])).await.unwrap();
        assert_eq!(r.content, vec![ContentBlock::Text { text: "fallback".into() }]);
    }

    #[tokio::test]
    async fn after_tool_matches_the_tool_whose_result_is_newest() {
        let m = ScriptedModel::from_json(
            r#"{"rules":[{"when":{"afterTool":"get_context"},"then":{"text":"got it"}},
                         {"then":{"toolCalls":[{"name":"get_context"}]}}]}"#,
        )
        .unwrap();
        let first = m.converse(&request(vec![Message::user_text("x")])).await.unwrap();
        assert_eq!(first.stop_reason, StopReason::ToolUse);
        let Some(ContentBlock::ToolUse { tool_use_id, .. }) = first.content.first().cloned() else { panic!() };
        let result = Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult { tool_use_id, content: serde_json::json!({}), is_error: false }],
        };
        let second = m
            .converse(&request(vec![
                Message::user_text("x"),
                Message { role: Role::Assistant, content: first.content },
                result,
            ]))
            .await
            .unwrap();
        assert_eq!(second.content, vec![ContentBlock::Text { text: "got it".into() }]);
    }

    #[tokio::test]
    async fn no_matching_rule_is_a_rejection_not_a_panic() {
        let m = ScriptedModel::from_json(r#"{"rules":[{"when":{"model":"other"},"then":{"text":"x"}}]}"#).unwrap();
        let err = m.converse(&request(vec![Message::user_text("x")])).await.unwrap_err();
        assert!(matches!(err, ModelError::Rejected(_)));
        assert!(!err.retryable());
    }

    #[test]
    fn a_broken_script_is_refused_with_the_reason() {
        assert!(matches!(ScriptedModel::from_json("{"), Err(ScriptError::Parse { .. })));
        assert!(matches!(
            ScriptedModel::from_json(r#"{"rules":[{"when":{"userText":{"matches":"("}},"then":{}}]}"#),
            Err(ScriptError::Regex { rule: 0, .. })
        ));
        assert!(matches!(
            ScriptedModel::from_json(r#"{"rules":[{"then":{},"oops":1}]}"#),
            Err(ScriptError::Parse { .. })
        ));
        assert!(matches!(
            ScriptedModel::from_file(std::path::Path::new("/nonexistent/script.json")),
            Err(ScriptError::Read { .. })
        ));
    }
}
