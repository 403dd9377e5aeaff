//! Agents: who answers, with which prompt, model, tools and limits. Validation here covers what
//! can be checked on the record alone; references to other records (tools, agents, skills of the
//! same tenant) are checked by whoever stores it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, SkillId, TenantId};
use crate::limits::{MAX_DESCRIPTION_LEN, MAX_ITERATIONS_CEILING, MAX_PROMPT_BYTES, MAX_TURNS_CEILING};
use crate::tool::SystemTool;
pub use crate::tool::{SUB_AGENT_PREFIX, TRANSITION_PREFIX};
use crate::validation::{ValidationErrors, check_name, check_reply_text};

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

/// A router's fan-out: its classification picks up to `max_agents` of its sub-agents, each
/// answers the customer's message at once in its own context (a child execution, as a
/// supervisor's sub-agent does), and the router answers the customer from what came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FanOut {
    /// How many agents one message may go to: 2 to [`MAX_FAN_OUT`].
    pub max_agents: u32,
    #[serde(default)]
    pub combine: Combine,
}

/// Agents a router's fan-out may send one message to.
pub const MAX_FAN_OUT: u32 = 5;

/// How a fan-out's answers become the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// One more call of the router's model writes one reply from every answer that came back.
    #[default]
    Synthesize,
    /// The answer of the first agent, in the router's order of preference, that gave one; no
    /// further model call.
    FirstSuccess,
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

/// What the customer gets when a turn ends without answering them and without handing the
/// conversation on: the turn failed or timed out, the fallback models all failed, it ran out of
/// model calls or token budget, or its work item's last delivery failed. A turn that already
/// replied is not answered again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum OnFailure {
    /// The conversation goes to a human operator (`session.handoff.human`, the failure as
    /// reason).
    #[default]
    HandoffToHuman,
    /// A fixed reply, sent once per message; the session stays with the agent.
    Message { text: String },
    /// Nothing: the failure is recorded (and `execution.failed` published), not answered.
    #[serde(rename = "none")]
    Nothing,
}

/// Inference parameters passed to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(default = "default_temperature", serialize_with = "short_f32::one")]
    pub temperature: f32,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "short_f32::maybe")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Models tried in order when the agent's own is throttled, unavailable, timed out or behind
    /// an open circuit (never after a refused request, which the next model would refuse too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<String>,
    /// Ask the provider to cache the system prompt and the tool definitions between calls
    /// (Bedrock `cachePoint`, Anthropic `cache_control`); OpenAI caches long prompts by itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prompt_caching: bool,
    /// A Bedrock guardrail applied to every call of the agent (Bedrock models only: another
    /// provider refuses a call that carries one rather than answer unguarded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guardrail: Option<GuardrailConfig>,
}

/// f32 settings written as the decimal they were given (`0.2`, not the f32's exact value widened,
/// `0.20000000298023224`): the shortest decimal that reads back as the same f32.
mod short_f32 {
    use serde::Serializer;

    /// Read back with serde_json's own float reader (which every function has), not `str::parse`
    /// (another float reader in every function's zip).
    fn widened(v: f32) -> f64 {
        serde_json::from_str(&v.to_string()).unwrap_or(f64::from(v))
    }

    pub(super) fn one<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(widened(*v))
    }

    pub(super) fn maybe<S: Serializer>(v: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(&widened(*v)),
            None => s.serialize_none(),
        }
    }
}

/// Which Bedrock guardrail checks an agent's calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GuardrailConfig {
    /// The guardrail's id or ARN.
    pub id: String,
    /// A version number, or `DRAFT`.
    pub version: String,
    /// Return the guardrail's assessment trace with each answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trace: bool,
}

/// A guardrail's id and version as Bedrock accepts them, on a chain of Bedrock models only (a
/// plain id may be an alias to another provider: that provider refuses the call at run time).
fn check_guardrail<'a>(errors: &mut ValidationErrors, g: &GuardrailConfig, chain: impl Iterator<Item = &'a String>) {
    let id_chars = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    // arn:aws[-partition]:bedrock:<region>:<account>:guardrail/<id>
    let arn = |s: &str| {
        let parts: Vec<&str> = s.split(':').collect();
        matches!(parts.as_slice(), ["arn", partition, "bedrock", region, account, resource]
            if (*partition == "aws" || partition.starts_with("aws-"))
                && !region.is_empty() && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())
                && resource.strip_prefix("guardrail/").is_some_and(id_chars))
    };
    let version_ok = g.version == "DRAFT"
        || (!g.version.starts_with('0')
            && (1..=8).contains(&g.version.len())
            && g.version.bytes().all(|b| b.is_ascii_digit()));
    if g.id.len() > 2048 || !(id_chars(&g.id) || arn(&g.id)) {
        errors.push("/modelConfig/guardrail/id", "must be a Bedrock guardrail id or ARN");
    }
    if !version_ok {
        errors.push("/modelConfig/guardrail/version", "must be a version number or DRAFT");
    }
    for model in chain {
        if let Ok(crate::ModelRef::Qualified { provider, .. }) = crate::ModelRef::parse(model)
            && provider != crate::Provider::Bedrock
        {
            errors.push(
                "/modelConfig/guardrail",
                format!("only Bedrock models apply guardrails, and `{model}` is {provider}"),
            );
            break;
        }
    }
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
            fallback_models: vec![],
            prompt_caching: false,
            guardrail: None,
        }
    }
}

/// Token budgets of an agent's work; each unset one is no limit. Checked before every model
/// call of a turn with the call's estimated input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenBudget {
    /// Input tokens (fresh and cached) of all model calls of one execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<u64>,
    /// Output tokens of all model calls of one execution; each call asks for at most what is left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Every token of every execution of one session; when it is spent, the agent's
    /// `handoffBehavior` applies, as at `maxTurns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session_tokens: Option<u64>,
}

/// Highest accepted value of a [`TokenBudget`] limit.
pub const MAX_TOKEN_BUDGET: u64 = 1_000_000_000;

impl TokenBudget {
    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
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
    /// Customer messages the transcript may hold beyond the summary before the older ones are
    /// folded into it by a model call (the newest half of them stay word for word); 0: never.
    #[serde(default = "default_summarize_after")]
    pub summarize_after: u32,
    /// The model that writes summaries (a cheaper one, say); empty: the agent's own model and
    /// fallbacks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary_model: String,
    /// A webhook tool's or sub-agent's result longer than this (bytes of JSON) reaches the model
    /// shortened, with a handle that `recall_details` reads in full.
    #[serde(default = "default_max_tool_result_bytes")]
    pub max_tool_result_bytes: u32,
}

/// Accepted range of `maxToolResultBytes`.
pub const TOOL_RESULT_BYTES_RANGE: std::ops::RangeInclusive<u32> = 512..=65_536;

/// Highest accepted `summarizeAfter`: the stored transcript (100 messages) must still hold what
/// is to be folded.
pub const MAX_SUMMARIZE_AFTER: u32 = 30;

fn default_max_messages() -> u32 {
    20
}
fn default_history_tokens() -> u32 {
    4000
}
fn default_summarize_after() -> u32 {
    10
}
fn default_max_tool_result_bytes() -> u32 {
    8 * 1024
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            max_messages: default_max_messages(),
            max_tokens: default_history_tokens(),
            summarize_after: default_summarize_after(),
            summary_model: String::new(),
            max_tool_result_bytes: default_max_tool_result_bytes(),
        }
    }
}

/// One step of a `standard` agent using the handoff pattern. The model sees the step's prompt
/// and tools, and one generated tool per edge (`transition_to_<stepId>`), so it can only move
/// along the edges declared here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentStep {
    pub step_id: String,
    pub name: String,
    pub system_prompt: String,
    /// Tools offered in this step, drawn from the agent's `tools`.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The steps this step may move to (step ids).
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
    /// Model reference: `provider:model` or a plain id (an alias, else a Bedrock model id); see
    /// [`crate::ModelRef`]. Empty (or left out): the profile's default model.
    #[serde(default)]
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
    /// A router's fallback when the classification names no valid candidate; one of `subAgents`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_agent_id: Option<AgentId>,
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    #[serde(default)]
    pub handoff_behavior: HandoffBehavior,
    #[serde(default, deserialize_with = "crate::strict_json::object")]
    pub on_failure: OnFailure,
    /// Model calls allowed in one execution before it stops with `max_iterations`.
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    #[serde(default)]
    pub history: HistoryConfig,
    #[serde(default, skip_serializing_if = "TokenBudget::is_unlimited")]
    pub token_budget: TokenBudget,
    /// Webhooks called at points of each turn ([`crate::hook`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<crate::hook::Hook>,
    /// System tools whose calls wait for a person's approval, by name (a tenant's tool says so
    /// on itself).
    #[serde(
        default,
        skip_serializing_if = "std::collections::BTreeMap::is_empty",
        with = "crate::approval::through_json"
    )]
    pub approvals: std::collections::BTreeMap<String, crate::approval::ApprovalPolicy>,
    /// A router that sends the message to several of its agents at once and answers from their
    /// answers, instead of handing the conversation to one ([`FanOut`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOut>,
    /// What the agent's turns do with messages that arrive close together ([`crate::burst`]):
    /// each its own turn (the default), or a burst answered in one.
    #[serde(default, skip_serializing_if = "crate::burst::Bursts::is_enqueue")]
    pub bursts: crate::burst::Bursts,
    #[serde(default)]
    pub status: AgentStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Bumped on every update; the API's `ETag`, checked against `If-Match`.
    #[serde(default)]
    pub version: u64,
}

/// Fallback models an agent may list.
pub const MAX_FALLBACK_MODELS: usize = 3;

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
        if !self.model.is_empty()
            && let Err(why) = crate::ModelRef::parse(&self.model)
        {
            errors.push("/model", why);
        }
        self.check_model_config(&mut errors);
        if self.max_iterations == 0 || self.max_iterations > MAX_ITERATIONS_CEILING {
            errors.push("/maxIterations", format!("must be between 1 and {MAX_ITERATIONS_CEILING}"));
        }
        if self.max_turns == 0 || self.max_turns > MAX_TURNS_CEILING {
            errors.push("/maxTurns", format!("must be between 1 and {MAX_TURNS_CEILING}"));
        }
        self.check_history(&mut errors);
        self.check_token_budget(&mut errors);
        if let OnFailure::Message { text } = &self.on_failure {
            check_reply_text(&mut errors, "/onFailure/text", text);
        }
        crate::tool::check_tool_refs(&mut errors, "/tools", &self.tools);
        self.check_sub_agents(&mut errors);
        self.check_pattern(&mut errors);
        check_steps(&mut errors, &self.steps, &self.tools);
        crate::hook::check_hooks(&mut errors, &self.hooks);
        self.bursts.validate_into(&mut errors);
        for (name, policy) in &self.approvals {
            let at = format!("/approvals/{}", name.replace('~', "~0").replace('/', "~1"));
            match name.parse::<crate::SystemTool>() {
                Ok(tool) if self.tools.iter().any(|t| t == tool.name()) => policy.check(&mut errors, &at),
                Ok(_) => errors.push(at, "the agent does not have this system tool in its tools"),
                Err(_) => errors.push(at, "must name a system tool (a tenant's tool sets its own approval)"),
            }
        }
        errors.into_result()
    }

    /// `modelConfig`: the fallback chain (valid, no model twice), the guardrail for every model
    /// of the chain, and the sampling ranges.
    fn check_model_config(&self, errors: &mut ValidationErrors) {
        let mc = &self.model_config;
        if mc.fallback_models.len() > MAX_FALLBACK_MODELS {
            errors.push("/modelConfig/fallbackModels", format!("must hold at most {MAX_FALLBACK_MODELS} models"));
        }
        for (i, fallback) in mc.fallback_models.iter().enumerate() {
            let pointer = format!("/modelConfig/fallbackModels/{i}");
            if let Err(why) = crate::ModelRef::parse(fallback) {
                errors.push(pointer, why);
            } else if *fallback == self.model || mc.fallback_models[..i].contains(fallback) {
                errors.push(pointer, "must name a model not already in the chain");
            }
        }
        if let Some(g) = &mc.guardrail {
            check_guardrail(errors, g, std::iter::once(&self.model).chain(&mc.fallback_models));
        }
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
    }

    /// `history`: the window's sizes, when to summarize and with which model.
    fn check_history(&self, errors: &mut ValidationErrors) {
        let history = &self.history;
        if history.max_messages == 0 {
            errors.push("/history/maxMessages", "must be at least 1");
        }
        if history.max_tokens < 100 {
            errors.push("/history/maxTokens", "must be at least 100");
        }
        if history.summarize_after > MAX_SUMMARIZE_AFTER {
            errors.push("/history/summarizeAfter", format!("must be between 0 (never) and {MAX_SUMMARIZE_AFTER}"));
        }
        if !TOOL_RESULT_BYTES_RANGE.contains(&history.max_tool_result_bytes) {
            errors.push(
                "/history/maxToolResultBytes",
                format!("must be between {} and {}", TOOL_RESULT_BYTES_RANGE.start(), TOOL_RESULT_BYTES_RANGE.end()),
            );
        }
        if !history.summary_model.is_empty()
            && let Err(why) = crate::ModelRef::parse(&history.summary_model)
        {
            errors.push("/history/summaryModel", why);
        }
    }

    /// `tokenBudget`: each limit that is set is within range.
    fn check_token_budget(&self, errors: &mut ValidationErrors) {
        let budget = &self.token_budget;
        for (name, value) in [
            ("maxInputTokens", budget.max_input_tokens),
            ("maxOutputTokens", budget.max_output_tokens),
            ("maxSessionTokens", budget.max_session_tokens),
        ] {
            if value.is_some_and(|v| !(1..=MAX_TOKEN_BUDGET).contains(&v)) {
                errors.push(format!("/tokenBudget/{name}"), format!("must be between 1 and {MAX_TOKEN_BUDGET}"));
            }
        }
    }

    /// `subAgents`: never the agent itself, never one twice.
    fn check_sub_agents(&self, errors: &mut ValidationErrors) {
        let mut seen = std::collections::HashSet::new();
        for (i, sub) in self.sub_agents.iter().enumerate() {
            if *sub == self.agent_id {
                errors.push(format!("/subAgents/{i}"), "an agent cannot be its own sub-agent");
            } else if !seen.insert(sub) {
                errors.push(format!("/subAgents/{i}"), format!("lists '{sub}' twice"));
            }
        }
    }

    /// What each agent type needs: a supervisor delegates to `subAgents`; a router picks among
    /// `subAgents` and falls back to `defaultAgentId`; steps belong to standard agents.
    fn check_pattern(&self, errors: &mut ValidationErrors) {
        match self.agent_type {
            AgentType::Standard => {
                if !self.sub_agents.is_empty() {
                    errors.push("/subAgents", "only supervisor and router agents have sub-agents");
                }
            }
            AgentType::Supervisor | AgentType::Router => {
                if self.sub_agents.is_empty() {
                    errors.push("/subAgents", "a supervisor or router needs at least one sub-agent");
                }
                if !self.steps.is_empty() {
                    errors.push("/steps", "only standard agents have steps");
                }
            }
        }
        match (self.agent_type, self.default_agent_id) {
            (AgentType::Router, None) => {
                errors.push("/defaultAgentId", "a router needs a default agent for when its pick is invalid")
            }
            (AgentType::Router, Some(d)) if !self.sub_agents.contains(&d) => {
                errors.push("/defaultAgentId", "must be one of subAgents")
            }
            (AgentType::Standard | AgentType::Supervisor, Some(_)) => {
                errors.push("/defaultAgentId", "only router agents have a default agent")
            }
            _ => {}
        }
        match (&self.fan_out, self.agent_type) {
            (Some(f), AgentType::Router) if !(2..=MAX_FAN_OUT).contains(&f.max_agents) => {
                errors.push("/fanOut/maxAgents", format!("must be 2 to {MAX_FAN_OUT}"));
            }
            (Some(_), AgentType::Standard | AgentType::Supervisor) => {
                errors.push("/fanOut", "only a router fans a message out to its agents");
            }
            _ => {}
        }
    }

    /// Whether the agent may call the named system tool.
    pub fn allows(&self, tool: SystemTool) -> bool {
        self.tools.iter().any(|t| t == tool.name())
    }

    /// The step the session is in: `current`, or the initial step when none is recorded (or the
    /// recorded one no longer exists after an edit). `None` for agents without steps.
    pub fn step(&self, current: Option<&str>) -> Option<&AgentStep> {
        current
            .and_then(|id| self.steps.iter().find(|s| s.step_id == id))
            .or_else(|| self.steps.iter().find(|s| s.is_initial))
    }
}

/// The name of the generated tool that moves to `step_id`.
pub fn transition_tool_name(step_id: &str) -> String {
    format!("{TRANSITION_PREFIX}{step_id}")
}

/// Longest step id: keeps `transition_to_<stepId>` within the 64 characters tool names allow.
pub const MAX_STEP_ID_LEN: usize = 64 - TRANSITION_PREFIX.len();

/// A step graph must have ids usable in tool names, exactly one initial step, edges only to
/// known steps, every step reachable from the initial one, and tools drawn from the agent's.
fn check_steps(errors: &mut ValidationErrors, steps: &[AgentStep], agent_tools: &[String]) {
    if steps.is_empty() {
        return;
    }
    let ids: std::collections::HashSet<&str> = steps.iter().map(|s| s.step_id.as_str()).collect();
    let mut seen = std::collections::HashSet::new();
    for (i, step) in steps.iter().enumerate() {
        let at = format!("/steps/{i}");
        let id = &step.step_id;
        if id.is_empty()
            || id.len() > MAX_STEP_ID_LEN
            || !id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            errors.push(format!("{at}/stepId"), format!("must be 1 to {MAX_STEP_ID_LEN} of a-z, 0-9, '_'"));
        } else if !seen.insert(id.as_str()) {
            errors.push(format!("{at}/stepId"), format!("'{id}' is used by two steps"));
        }
        check_name(errors, &format!("{at}/name"), &step.name);
        if step.system_prompt.trim().is_empty() || step.system_prompt.len() > MAX_PROMPT_BYTES {
            errors.push(format!("{at}/systemPrompt"), format!("must be 1 to {MAX_PROMPT_BYTES} bytes, not blank"));
        }
        crate::tool::check_tool_refs(errors, &format!("{at}/tools"), &step.tools);
        for (j, tool) in step.tools.iter().enumerate() {
            if !agent_tools.contains(tool) {
                errors.push(format!("{at}/tools/{j}"), format!("'{tool}' is not one of the agent's tools"));
            } else if tool == SystemTool::EndConversation.name() && !step.is_final {
                errors.push(format!("{at}/tools/{j}"), "only a final step may end the conversation");
            }
        }
        let mut targets = std::collections::HashSet::new();
        for (j, target) in step.transition_tools.iter().enumerate() {
            if !ids.contains(target.as_str()) {
                errors.push(format!("{at}/transitionTools/{j}"), format!("no step '{target}'"));
            } else if target == id {
                errors.push(format!("{at}/transitionTools/{j}"), "a step cannot transition to itself");
            } else if !targets.insert(target) {
                errors.push(format!("{at}/transitionTools/{j}"), format!("lists '{target}' twice"));
            }
        }
    }
    let initial: Vec<usize> = steps.iter().enumerate().filter(|(_, s)| s.is_initial).map(|(i, _)| i).collect();
    match initial.as_slice() {
        [] => errors.push("/steps", "exactly one step must have isInitial: true; none has"),
        [start] => {
            let mut reached = std::collections::HashSet::from([steps[*start].step_id.as_str()]);
            let mut todo = vec![&steps[*start]];
            while let Some(step) = todo.pop() {
                for target in &step.transition_tools {
                    if let Some(next) = steps.iter().find(|s| &s.step_id == target)
                        && reached.insert(next.step_id.as_str())
                    {
                        todo.push(next);
                    }
                }
            }
            for (i, step) in steps.iter().enumerate() {
                if !reached.contains(step.step_id.as_str()) {
                    errors.push(
                        format!("/steps/{i}"),
                        format!("step '{}' cannot be reached from the initial step", step.step_id),
                    );
                }
            }
        }
        [_, rest @ ..] => {
            for i in rest {
                errors.push(format!("/steps/{i}/isInitial"), "only one step may be the initial step");
            }
        }
    }
}

impl Agent {
    /// The name under which a supervisor sees `self` as a tool: `ask_` and the name in
    /// lower-case letters, digits and '_' (at most 64 characters).
    pub fn as_sub_agent_tool_name(&self) -> String {
        sub_agent_tool_name(&self.name)
    }
}

/// `ask_` + `name` folded to `[a-z0-9_]`, runs of anything else as one '_', cut to 64.
pub fn sub_agent_tool_name(name: &str) -> String {
    let mut out = String::from(SUB_AGENT_PREFIX);
    for c in name.trim().chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    let mut out: String = out.trim_end_matches('_').chars().take(64).collect();
    if out.len() == SUB_AGENT_PREFIX.len() - 1 {
        out.push_str("_agent");
    }
    out
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
    fn a_temperature_reads_back_as_the_decimal_it_was_written_as() {
        let mut a = agent();
        a.model_config.temperature = 0.2;
        a.model_config.top_p = Some(0.9);
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(
            (&json["modelConfig"]["temperature"], &json["modelConfig"]["topP"]),
            (&serde_json::json!(0.2), &serde_json::json!(0.9))
        );
        let back: Agent = serde_json::from_value(json).unwrap();
        assert_eq!(back.model_config, a.model_config, "the same f32s");
    }

    #[test]
    fn on_failure_defaults_to_a_human_and_its_message_is_checked() {
        assert_eq!(agent().on_failure, OnFailure::HandoffToHuman);
        let parse = |v| serde_json::from_value::<OnFailure>(v);
        assert_eq!(parse(serde_json::json!({"action": "none"})).unwrap(), OnFailure::Nothing);
        assert_eq!(
            parse(serde_json::json!({"action": "message", "text": "Sorry"})).unwrap(),
            OnFailure::Message { text: "Sorry".into() }
        );
        assert!(parse(serde_json::json!({"action": "retry"})).is_err());
        let mut a = agent();
        a.on_failure = OnFailure::Message { text: "  ".into() };
        let errors = a.validate().unwrap_err().0;
        assert_eq!(errors.iter().map(|e| e.pointer.as_str()).collect::<Vec<_>>(), ["/onFailure/text"]);
    }

    #[test]
    fn every_bad_field_is_named() {
        let mut a = agent();
        a.name = " ".into();
        a.model_config.temperature = 1.5;
        a.max_iterations = 0;
        a.token_budget = TokenBudget {
            max_input_tokens: Some(0),
            max_output_tokens: Some(5),
            max_session_tokens: Some(MAX_TOKEN_BUDGET + 1),
        };
        a.tools = vec!["send_message".into(), "rm_rf".into(), "send_message".into()];
        let pointers: Vec<_> = a.validate().unwrap_err().0.into_iter().map(|e| e.pointer).collect();
        assert_eq!(
            pointers,
            [
                "/name",
                "/modelConfig/temperature",
                "/maxIterations",
                "/tokenBudget/maxInputTokens",
                "/tokenBudget/maxSessionTokens",
                "/tools/1",
                "/tools/2"
            ]
        );
    }

    fn step(id: &str, to: &[&str]) -> AgentStep {
        AgentStep {
            step_id: id.into(),
            name: id.into(),
            system_prompt: format!("Do {id}."),
            tools: vec![],
            transition_tools: to.iter().map(|t| (*t).to_owned()).collect(),
            is_initial: false,
            is_final: false,
        }
    }

    fn pointers(a: &Agent) -> Vec<String> {
        a.validate().err().map(|e| e.0.into_iter().map(|e| e.pointer).collect()).unwrap_or_default()
    }

    #[test]
    fn a_guardrail_needs_a_bedrock_id_a_version_and_a_bedrock_chain() {
        let guard = |id: &str, version: &str| GuardrailConfig { id: id.into(), version: version.into(), trace: false };
        let mut a = agent();
        a.model_config.prompt_caching = true;
        for (id, version) in [
            ("gr1abc2def", "1"),
            ("gr1abc2def", "DRAFT"),
            ("arn:aws:bedrock:us-east-1:123456789012:guardrail/gr1abc2def", "12345678"),
            ("arn:aws-us-gov:bedrock:us-gov-west-1:123456789012:guardrail/x1", "2"),
        ] {
            a.model_config.guardrail = Some(guard(id, version));
            assert_eq!(pointers(&a), Vec::<String>::new(), "{id} {version}");
        }
        for (id, version, at) in [
            ("Gr1", "1", "/modelConfig/guardrail/id"),
            ("", "1", "/modelConfig/guardrail/id"),
            ("arn:aws:bedrock:us-east-1:1234:guardrail/x", "1", "/modelConfig/guardrail/id"),
            ("arn:aws:s3:us-east-1:123456789012:guardrail/x", "1", "/modelConfig/guardrail/id"),
            ("gr1", "0", "/modelConfig/guardrail/version"),
            ("gr1", "draft", "/modelConfig/guardrail/version"),
            ("gr1", "123456789", "/modelConfig/guardrail/version"),
        ] {
            a.model_config.guardrail = Some(guard(id, version));
            assert_eq!(pointers(&a), [at], "{id} {version}");
        }
        // another provider anywhere in the chain would answer unguarded
        a.model_config.guardrail = Some(guard("gr1", "1"));
        a.model_config.fallback_models = vec!["bedrock:amazon.nova-lite-v1:0".into(), "openai:gpt-4o-mini".into()];
        assert_eq!(pointers(&a), ["/modelConfig/guardrail"]);
        // and the fields round-trip in camelCase
        let json = serde_json::to_value(&a.model_config).unwrap();
        assert_eq!(
            (json["promptCaching"].clone(), json["guardrail"]["id"].clone()),
            (serde_json::json!(true), serde_json::json!("gr1"))
        );
    }

    #[test]
    fn a_step_graph_needs_one_initial_step_known_targets_and_reachable_steps() {
        let mut a = agent();
        a.tools = vec!["send_message".into(), "end_conversation".into()];
        a.steps = vec![step("greet", &["collect"]), step("collect", &["done"]), step("done", &[])];
        a.steps[0].is_initial = true;
        a.steps[2].is_final = true;
        a.steps[2].tools = vec!["end_conversation".into()];
        assert!(a.validate().is_ok(), "{:?}", a.validate());

        let mut b = a.clone();
        b.steps[0].is_initial = false;
        assert_eq!(pointers(&b), ["/steps"], "no initial step");
        let mut b = a.clone();
        b.steps[1].transition_tools = vec!["nowhere".into()];
        assert_eq!(pointers(&b), ["/steps/1/transitionTools/0", "/steps/2"], "unknown target; 'done' now unreachable");
        let mut b = a.clone();
        b.steps[1].tools = vec!["end_conversation".into(), "trigger_flow".into()];
        assert_eq!(pointers(&b), ["/steps/1/tools/0", "/steps/1/tools/1"], "not final; not an agent tool");
        let mut b = a.clone();
        b.steps[1].step_id = "Collect Info".into();
        b.steps[2].is_initial = true;
        assert!(pointers(&b).contains(&"/steps/1/stepId".to_owned()));
        assert!(pointers(&b).contains(&"/steps/2/isInitial".to_owned()));
    }

    #[test]
    fn each_agent_type_gets_what_its_pattern_needs() {
        let sub = AgentId::generate();
        let mut router = agent();
        router.agent_type = AgentType::Router;
        assert_eq!(pointers(&router), ["/subAgents", "/defaultAgentId"]);
        router.sub_agents = vec![sub];
        router.default_agent_id = Some(AgentId::generate());
        assert_eq!(pointers(&router), ["/defaultAgentId"], "the default must be a candidate");
        router.default_agent_id = Some(sub);
        assert!(router.validate().is_ok());
        let mut standard = agent();
        standard.sub_agents = vec![sub];
        standard.default_agent_id = Some(sub);
        assert_eq!(pointers(&standard), ["/subAgents", "/defaultAgentId"]);
    }

    #[test]
    fn an_agent_may_leave_its_model_to_the_default_but_not_name_an_unknown_provider() {
        let mut a = agent();
        a.model = String::new();
        assert!(a.validate().is_ok());
        a.model = "gemini:pro".into();
        let e = a.validate().unwrap_err();
        assert_eq!(e.0[0].pointer, "/model");
    }

    #[test]
    fn sub_agent_tool_names_are_safe_for_every_model() {
        assert_eq!(sub_agent_tool_name("Billing Desk (EU)"), "ask_billing_desk_eu");
        assert_eq!(sub_agent_tool_name("  ***  "), "ask_agent");
        assert_eq!(sub_agent_tool_name(&"x".repeat(100)).len(), 64);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let mut v = serde_json::to_value(agent()).unwrap();
        v["colour"] = serde_json::json!("red");
        assert!(serde_json::from_value::<Agent>(v).is_err());
    }
}
