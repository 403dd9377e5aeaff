//! Agents: who answers, with which prompt, model, tools and limits. Validation here covers what
//! can be checked on the record alone; references to other records (tools, agents, skills of the
//! same tenant) are checked by whoever stores it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, SkillId, TenantId};
use crate::limits::{MAX_DESCRIPTION_LEN, MAX_ITERATIONS_CEILING, MAX_NAME_LEN, MAX_PROMPT_BYTES, MAX_TURNS_CEILING};
use crate::tool::SystemTool;
use crate::validation::ValidationErrors;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AgentType {
    #[default]
    Standard,
    Supervisor,
    Router,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    #[default]
    Active,
    Inactive,
    Draft,
}

/// What happens when a session reaches the agent's `maxTurns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HandoffBehavior {
    /// Hand the conversation to a human operator.
    #[default]
    Escalate,
    /// Close the conversation.
    End,
}

/// Inference parameters passed to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(default = "default_temperature")]
    pub temperature: f32,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
}

fn default_temperature() -> f32 {
    0.7
}
fn default_max_tokens() -> u32 {
    1024
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            temperature: default_temperature(),
            max_tokens: default_max_tokens(),
            top_p: None,
            stop_sequences: vec![],
        }
    }
}

/// How much of the conversation goes into the model's context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistoryConfig {
    #[serde(default = "default_max_messages")]
    pub max_messages: u32,
    #[serde(default = "default_history_tokens")]
    pub max_tokens: u32,
}

fn default_max_messages() -> u32 {
    20
}
fn default_history_tokens() -> u32 {
    4000
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self { max_messages: default_max_messages(), max_tokens: default_history_tokens() }
    }
}

/// One step of a `standard` agent using the handoff pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentStep {
    pub step_id: String,
    pub name: String,
    pub system_prompt: String,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub transition_tools: Vec<String>,
    #[serde(default)]
    pub is_initial: bool,
    #[serde(default)]
    pub is_final: bool,
}

/// An agent as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Agent {
    pub tenant_id: TenantId,
    pub agent_id: AgentId,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(rename = "type", default)]
    pub agent_type: AgentType,
    pub system_prompt: String,
    /// Model identifier, e.g. a Bedrock model id.
    pub model: String,
    #[serde(default)]
    pub model_config: ModelConfig,
    /// Tools the agent may call: system tool names or custom tool ids.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub sub_agents: Vec<AgentId>,
    #[serde(default)]
    pub skills: Vec<SkillId>,
    #[serde(default)]
    pub steps: Vec<AgentStep>,
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    #[serde(default)]
    pub handoff_behavior: HandoffBehavior,
    /// Model calls allowed in one execution before it stops with `max_iterations`.
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    #[serde(default)]
    pub history: HistoryConfig,
    #[serde(default)]
    pub status: AgentStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Bumped on every update; the API's `ETag`, checked against `If-Match`.
    #[serde(default)]
    pub version: u64,
}

fn default_max_turns() -> u32 {
    10
}
fn default_max_iterations() -> u32 {
    5
}

impl Agent {
    /// Checks the record on its own. Pointers are relative to the agent object.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errors = ValidationErrors::default();
        check_name(&mut errors, "/name", &self.name);
        if self.description.chars().count() > MAX_DESCRIPTION_LEN {
            errors.push("/description", format!("must be at most {MAX_DESCRIPTION_LEN} characters"));
        }
        if self.system_prompt.trim().is_empty() {
            errors.push("/systemPrompt", "must not be empty");
        } else if self.system_prompt.len() > MAX_PROMPT_BYTES {
            errors.push("/systemPrompt", format!("must be at most {MAX_PROMPT_BYTES} bytes"));
        }
        if self.model.trim().is_empty() || self.model.len() > 256 {
            errors.push("/model", "must be a model identifier of 1 to 256 characters");
        }
        let mc = &self.model_config;
        if !(0.0..=1.0).contains(&mc.temperature) {
            errors.push("/modelConfig/temperature", "must be between 0 and 1");
        }
        if mc.max_tokens == 0 || mc.max_tokens > 200_000 {
            errors.push("/modelConfig/maxTokens", "must be between 1 and 200000");
        }
        if let Some(p) = mc.top_p
            && !(0.0..=1.0).contains(&p)
        {
            errors.push("/modelConfig/topP", "must be between 0 and 1");
        }
        if self.max_iterations == 0 || self.max_iterations > MAX_ITERATIONS_CEILING {
            errors.push("/maxIterations", format!("must be between 1 and {MAX_ITERATIONS_CEILING}"));
        }
        if self.max_turns == 0 || self.max_turns > MAX_TURNS_CEILING {
            errors.push("/maxTurns", format!("must be between 1 and {MAX_TURNS_CEILING}"));
        }
        if self.history.max_messages == 0 {
            errors.push("/history/maxMessages", "must be at least 1");
        }
        if self.history.max_tokens < 100 {
            errors.push("/history/maxTokens", "must be at least 100");
        }
        crate::tool::check_tool_refs(&mut errors, "/tools", &self.tools);
        for (i, sub) in self.sub_agents.iter().enumerate() {
            if *sub == self.agent_id {
                errors.push(format!("/subAgents/{i}"), "an agent cannot be its own sub-agent");
            }
        }
        errors.into_result()
    }

    /// Whether the agent may call the named system tool.
    pub fn allows(&self, tool: SystemTool) -> bool {
        self.tools.iter().any(|t| t == tool.name())
    }
}

pub(crate) fn check_name(errors: &mut ValidationErrors, pointer: &str, name: &str) {
    let len = name.chars().count();
    if name.trim().is_empty() || len > MAX_NAME_LEN {
        errors.push(pointer, format!("must be 1 to {MAX_NAME_LEN} characters, not blank"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> Agent {
        serde_json::from_value(serde_json::json!({
            "tenantId": "t-1", "agentId": "01JD0000SVPP0RT0AGENT00001", "name": "A", "systemPrompt": "p",
            "model": "m", "tools": ["send_message"], "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap()
    }

    #[test]
    fn defaults_follow_the_brief() {
        let a = agent();
        assert_eq!(
            (a.max_turns, a.handoff_behavior, a.agent_type, a.status),
            (10, HandoffBehavior::Escalate, AgentType::Standard, AgentStatus::Active)
        );
        assert_eq!((a.model_config.temperature, a.model_config.max_tokens), (0.7, 1024));
        assert_eq!((a.history.max_messages, a.history.max_tokens), (20, 4000));
        assert!(a.validate().is_ok());
    }

    #[test]
    fn every_bad_field_is_named() {
        let mut a = agent();
        a.name = " ".into();
        a.model_config.temperature = 1.5;
        a.max_iterations = 0;
        a.tools = vec!["send_message".into(), "rm_rf".into(), "send_message".into()];
        let pointers: Vec<_> = a.validate().unwrap_err().0.into_iter().map(|e| e.pointer).collect();
        assert_eq!(pointers, ["/name", "/modelConfig/temperature", "/maxIterations", "/tools/1", "/tools/2"]);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let mut v = serde_json::to_value(agent()).unwrap();
        v["colour"] = serde_json::json!("red");
        assert!(serde_json::from_value::<Agent>(v).is_err());
    }
}
