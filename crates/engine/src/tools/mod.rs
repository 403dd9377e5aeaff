//! The tools one model call is offered, what a called name resolves to, and the one dispatcher
//! ([`Toolbox::call`]) that runs a call, for an agent's loop and a sub-agent's alike. Each tool
//! family answers in its own file: `system` (send, hand off, end, flows, memory), `webhook` (the
//! tenant's signed tools), `mcp` (tools of the tenant's MCP servers), `skills` (`load_skill`), `steps` (`transition_to_<step>`); sub-agents
//! (`ask_<name>`) are run by the supervisor pattern, whose answers the dispatcher records.
//!
//! Besides the system tools and the tenant's webhook tools, the engine generates tools for the
//! multi-agent patterns: `transition_to_<stepId>` for each edge of the current step, `load_skill` for an
//! agent with skills (plus the tools of the skills it loaded), and `ask_<name>` for each of a
//! supervisor's sub-agents. The toolbox is rebuilt whenever a call changes it (a transition, a
//! loaded skill), so the next model call in the same turn sees the new set.

mod call;
mod mcp;
pub(crate) mod recall;
pub(crate) mod skills;
pub(crate) mod steps;
pub(crate) mod system;
pub(crate) mod webhook;

use std::time::Instant;

use serde_json::{Value, json};
use switchboard_domain::agent::transition_tool_name;
use switchboard_domain::limits::MAX_HANDOFF_DEPTH;
use switchboard_domain::tool::LOAD_SKILL;
use switchboard_domain::{
    Agent, AgentStatus, AgentStep, AgentType, Session, Skill, SystemTool, Tool, ToolCallRecord, TriggerStatus,
};
use tracing::Instrument;

pub(crate) use call::{CallContext, Called, ToolCall, ToolOutcome};

use crate::fault::ExecError;
use crate::model_call::elapsed_ms;
use crate::moves::TurnState;
use crate::ports::{Deps, StoreError, ToolSpec};

/// Whose toolbox it is; only the wording of a refusal differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Agent,
    SubAgent,
}

/// What a tool name the model called stands for.
pub(crate) enum Resolved<'a> {
    System(SystemTool),
    Custom(&'a Tool),
    /// A declared edge of the current step, to this step.
    Transition(&'a AgentStep),
    LoadSkill,
    SubAgent(&'a Agent),
    /// `transition_to_…` along an edge the current step does not declare.
    RefusedTransition(String),
    Unknown,
}

#[derive(Debug, Clone)]
pub(crate) struct Toolbox {
    pub owner: Owner,
    pub system: Vec<SystemTool>,
    pub custom: Vec<Tool>,
    /// The step the session is in, for stepped agents.
    pub step: Option<AgentStep>,
    /// The steps the current one may move to.
    pub transitions: Vec<AgentStep>,
    /// The agent's active skills, loadable by name.
    pub skills: Vec<Skill>,
    /// Skills the session has loaded, in load order.
    pub loaded: Vec<Skill>,
    /// A supervisor's active sub-agents with the tool name each is called by.
    pub sub_agents: Vec<(String, Agent)>,
    /// Webhook and sub-agent results longer than this reach the model shortened (see `recall`);
    /// `None`: shown whole (a sub-agent's own calls).
    pub max_result_bytes: Option<usize>,
}

impl Toolbox {
    /// The tools `agent` has in `session` right now.
    pub async fn build(deps: &Deps, agent: &Agent, session: &Session) -> Result<Self, StoreError> {
        let tenant = &agent.tenant_id;
        let step = agent.step(session.current_step.as_deref()).cloned();
        let mut names: Vec<String> = match &step {
            Some(s) => s.tools.clone(),
            None => agent.tools.clone(),
        };
        // A final step may always end the conversation: that is what makes it final.
        if step.as_ref().is_some_and(|s| s.is_final) {
            names.push(SystemTool::EndConversation.name().to_owned());
        }
        let mut loaded = Vec::new();
        for id in &session.loaded_skills {
            match deps.config.get_skill(tenant, *id).await? {
                Some(s) if s.status == TriggerStatus::Active => {
                    names.extend(s.tools.iter().cloned());
                    loaded.push(s);
                }
                _ => tracing::warn!(skill_id = %id, "a loaded skill is missing or inactive; its tools are withheld"),
            }
        }
        let mut unique = std::collections::HashSet::new();
        names.retain(|n| unique.insert(n.clone()));

        // A session holding shortened results can always read them whole.
        let recall = !session.recallable.is_empty();
        let system = SystemTool::ALL
            .into_iter()
            .filter(|t| names.iter().any(|n| n == t.name()) || (recall && *t == SystemTool::RecallDetails))
            .filter(|t| !(session.handoff_depth >= MAX_HANDOFF_DEPTH && *t == SystemTool::HandoffToAgent))
            .collect();
        let custom = webhook::load(deps, agent, &names).await?;
        let transitions = step
            .iter()
            .flat_map(|s| &s.transition_tools)
            .filter_map(|id| agent.steps.iter().find(|s| &s.step_id == id).cloned())
            .collect();
        let mut skills = Vec::new();
        for id in &agent.skills {
            match deps.config.get_skill(tenant, *id).await? {
                Some(s) if s.status == TriggerStatus::Active => skills.push(s),
                _ => {
                    tracing::warn!(agent_id = %agent.agent_id, skill_id = %id, "a listed skill is missing or inactive")
                }
            }
        }
        let mut sub_agents: Vec<(String, Agent)> = Vec::new();
        if agent.agent_type == AgentType::Supervisor {
            for id in &agent.sub_agents {
                match deps.config.get_agent(tenant, *id).await? {
                    Some(a) if a.status == AgentStatus::Active => {
                        let base = a.as_sub_agent_tool_name();
                        let mut name = base.clone();
                        let mut n = 2;
                        while sub_agents.iter().any(|(taken, _)| *taken == name) {
                            let suffix = format!("_{n}");
                            name = format!("{}{suffix}", &base[..base.len().min(64 - suffix.len())]);
                            n += 1;
                        }
                        sub_agents.push((name, a));
                    }
                    _ => {
                        tracing::warn!(agent_id = %agent.agent_id, sub_agent = %id, "a sub-agent is missing or inactive")
                    }
                }
            }
        }
        let max_result_bytes = Some(agent.history.max_tool_result_bytes as usize);
        Ok(Self {
            owner: Owner::Agent,
            system,
            custom,
            step,
            transitions,
            skills,
            loaded,
            sub_agents,
            max_result_bytes,
        })
    }

    /// A sub-agent's tools: its own webhook tools and nothing else. It cannot talk to the customer,
    /// hand off or end the conversation; the supervisor does that with the answers it gets back.
    pub async fn for_sub_agent(deps: &Deps, sub: &Agent) -> Result<Self, StoreError> {
        Ok(Self {
            owner: Owner::SubAgent,
            system: vec![],
            custom: webhook::load(deps, sub, &sub.tools).await?,
            step: None,
            transitions: vec![],
            skills: vec![],
            loaded: vec![],
            sub_agents: vec![],
            max_result_bytes: None,
        })
    }

    /// Runs one call. `answered` is a sub-agent's answer when the call was one (sub-agents run
    /// before the other calls of their model turn, concurrently; see the supervisor pattern).
    /// Once the conversation has left the agent in this turn, every later call is refused.
    ///
    /// Its span is OpenTelemetry's GenAI `execute_tool <name>`, with `error.type` when the tool
    /// answered an error.
    pub async fn call(
        &self,
        cx: CallContext<'_>,
        state: &mut TurnState,
        call: ToolCall,
        answered: Option<ToolOutcome>,
    ) -> Result<Called, ExecError> {
        let resolved = self.resolve(&call.name);
        let kind = match resolved {
            Resolved::Custom(_) => "function",
            Resolved::SubAgent(_) => "agent",
            _ => "extension",
        };
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %format!("execute_tool {}", call.name),
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.tool_use_id,
            gen_ai.tool.type = kind,
            error.type = tracing::field::Empty,
        );
        let called = self.call_resolved(cx, state, call, resolved, answered).instrument(span.clone()).await;
        if let Ok(c) = &called
            && c.outcome.is_error
        {
            span.record("error.type", "tool_error");
            span.record("otel.status_code", "ERROR");
        }
        called
    }

    /// [`Toolbox::call`] once `call.name` is resolved (in its span).
    async fn call_resolved(
        &self,
        cx: CallContext<'_>,
        state: &mut TurnState,
        call: ToolCall,
        resolved: Resolved<'_>,
        answered: Option<ToolOutcome>,
    ) -> Result<Called, ExecError> {
        let started = Instant::now();
        let ToolCall { tool_use_id, name, input, key } = call;
        let mut webhook_audit = None;
        let mut reconfigure = false;
        let mut stored = None;
        let may_shorten = matches!(resolved, Resolved::Custom(_) | Resolved::SubAgent(_));
        let mut outcome = match resolved {
            _ if state.finished => ToolOutcome::error("the conversation already left this agent in this turn"),
            Resolved::System(tool) => {
                let outcome = system::run(cx.deps, cx.item, state, tool, &input, &key).await?;
                if tool == SystemTool::RecallDetails && !outcome.is_error {
                    stored = outcome.output["handle"].as_str().map(recall::stored_note);
                }
                outcome
            }
            Resolved::Custom(tool) => {
                let (outcome, audit) =
                    webhook::run(cx.deps, cx.item, &state.session, cx.execution_id, tool, &input, &key).await;
                webhook_audit = Some(audit);
                outcome
            }
            Resolved::SubAgent(_) => answered.unwrap_or_else(|| ToolOutcome::error("the sub-agent did not run")),
            Resolved::Transition(step) => {
                reconfigure = true;
                steps::transition(&mut state.session, step)
            }
            Resolved::LoadSkill => {
                let outcome = skills::load_skill(cx.deps, &self.skills, &mut state.session, &input).await?;
                reconfigure = !outcome.is_error;
                outcome
            }
            Resolved::RefusedTransition(why) => ToolOutcome::error(why),
            Resolved::Unknown => ToolOutcome::error(match self.owner {
                Owner::Agent => format!("tool '{name}' is not available to this agent"),
                Owner::SubAgent => format!("tool '{name}' is not available to a sub-agent"),
            }),
        };
        if may_shorten
            && let Some(max) = self.max_result_bytes
            && let Some(short) = recall::shorten(&outcome.output, max, &tool_use_id)
        {
            let full = std::mem::replace(&mut outcome.output, short);
            state.session.keep_for_recall(&tool_use_id, &name, full, cx.deps.clock.now());
            reconfigure |= !self.system.contains(&SystemTool::RecallDetails);
        }
        let record = ToolCallRecord {
            tool_use_id,
            name,
            input,
            output: outcome.output.clone(),
            is_error: outcome.is_error,
            idempotency_key: key,
            latency_ms: elapsed_ms(started),
            after_model_call: 0,
            webhook: webhook_audit,
        };
        Ok(Called { outcome, record, reconfigure, stored })
    }

    /// The tool specs for the model, in a stable order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self
            .system
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                input_schema: t.parameters(),
            })
            .collect();
        specs.extend(self.custom.iter().map(webhook::spec));
        specs.extend(self.transitions.iter().map(|s| ToolSpec {
            name: transition_tool_name(&s.step_id),
            description: format!("Move the conversation to the step '{}' when this step's work is done.", s.name),
            input_schema: json!({
                "type": "object",
                "properties": { "reason": { "type": "string", "description": "Why the conversation moves on." } },
                "additionalProperties": false
            }),
        }));
        if !self.skills.is_empty() {
            let mut description = String::from(
                "Load a skill: its instructions and tools stay available for the rest of the conversation. Skills:",
            );
            for s in &self.skills {
                description.push_str(&format!("\n- {}: {}", s.name, s.description));
            }
            let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
            specs.push(ToolSpec {
                name: LOAD_SKILL.to_owned(),
                description,
                input_schema: json!({
                    "type": "object",
                    "properties": { "name": { "type": "string", "enum": names } },
                    "required": ["name"],
                    "additionalProperties": false
                }),
            });
        }
        specs.extend(self.sub_agents.iter().map(|(name, a)| ToolSpec {
            name: name.clone(),
            description: if a.description.trim().is_empty() {
                format!("Ask the {} agent to do a task and return its answer.", a.name)
            } else {
                a.description.clone()
            },
            input_schema: sub_agent_schema(),
        }));
        specs
    }

    /// The approval policy a call of `name` with `arguments` waits under, if it must wait: a
    /// tenant's tool's own, or the agent's for a system tool.
    pub fn approval_for(
        &self,
        agent: &Agent,
        name: &str,
        arguments: &Value,
    ) -> Option<(switchboard_domain::ApprovalPolicy, Option<Value>)> {
        let (policy, schema) = match self.resolve(name) {
            Resolved::Custom(tool) => (tool.approval.as_ref()?, Some(tool.parameters.clone())),
            Resolved::System(tool) => (agent.approvals.get(tool.name())?, Some(tool.parameters())),
            _ => return None,
        };
        policy.applies(arguments).then(|| (policy.clone(), schema))
    }

    pub fn resolve(&self, name: &str) -> Resolved<'_> {
        if let Ok(t) = name.parse::<SystemTool>() {
            return if self.system.contains(&t) { Resolved::System(t) } else { Resolved::Unknown };
        }
        if let Some(t) = self.custom.iter().find(|t| t.name == name) {
            return Resolved::Custom(t);
        }
        if let Some(target) = name.strip_prefix(switchboard_domain::agent::TRANSITION_PREFIX) {
            if let Some(s) = self.transitions.iter().find(|s| s.step_id == target) {
                return Resolved::Transition(s);
            }
            let from = self.step.as_ref().map_or("(none)", |s| s.step_id.as_str());
            return Resolved::RefusedTransition(format!(
                "the step '{from}' cannot move to '{target}'; allowed: {}",
                if self.transitions.is_empty() {
                    "none".to_owned()
                } else {
                    self.transitions.iter().map(|s| s.step_id.as_str()).collect::<Vec<_>>().join(", ")
                }
            ));
        }
        if name == LOAD_SKILL && !self.skills.is_empty() {
            return Resolved::LoadSkill;
        }
        if let Some((_, a)) = self.sub_agents.iter().find(|(n, _)| n == name) {
            return Resolved::SubAgent(a);
        }
        Resolved::Unknown
    }
}

/// What a supervisor passes to a sub-agent.
pub(crate) fn sub_agent_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "task": { "type": "string", "description": "What the sub-agent should do, self-contained." },
            "context": { "type": "object", "description": "Facts the sub-agent needs; it sees nothing else." }
        },
        "required": ["task"],
        "additionalProperties": false
    })
}
