//! Replay: an execution run again from its record, by today's engine, with the recorded model
//! answers and tool results — no model and no webhook is called again, nothing is committed to
//! the tenant's store and nothing reaches the customer. It reports whether the engine takes the
//! same actions (the tool calls it makes, with their arguments; the replies, hand-offs and ends;
//! the number of model calls; the status): the regression test of the engine itself.
//!
//! The run happens in a [`Sandbox`] (a scratch embedded profile): the tenant's agents,
//! tools and skills are copied into it — the executed agent at the version the record names,
//! the others as they are now — with a session seeded as the turn found it: the history its
//! first model call was sent, the step and skills its prompt names, the session's memory as it
//! is now, and the turns and tokens the session's earlier records counted. What it cannot
//! replay is refused with the reason: a record kept without content (`recording: off`), or with
//! the customer's words redacted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{Value, json};
use switchboard_domain::message::Message;
use switchboard_domain::recording::Recording;
use switchboard_domain::{
    Agent, Blob, ExecutionId, ExecutionRecord, ExecutionStatus, Session, SessionStatus, Skill, Tenant, TenantId, Tool,
    WebhookAudit,
};
use switchboard_engine::recorded::{self, CallContent};
use switchboard_engine::{
    ConfigAdmin, ConfigKind, ConfigRecord, ConfigStore, ExecOutcome, ExecutionLog, McpAnswer, McpRequest, Model,
    ModelError, ModelRequest, ModelResponse, SessionStore, SessionWrite, StopReason, StoreError, TurnCommit,
    WebhookCaller, WebhookError, WebhookRequest, WebhookResponse, WorkItem,
};

use crate::sandbox::Sandbox;

/// Everything a replay reads: the record, its calls' content, and the configuration around it.
#[derive(Debug, Clone)]
pub struct ReplayInput {
    pub tenant: Tenant,
    pub record: ExecutionRecord,
    /// `GET …/executions/{e}/model-calls` of the record.
    pub calls: Vec<CallContent>,
    /// The executed agent as the turn ran it (its kept version), or as it is now.
    pub agent: Agent,
    /// The tenant's other agents, tools and skills, as they are now.
    pub agents: Vec<Agent>,
    pub tools: Vec<Tool>,
    pub skills: Vec<Skill>,
    /// The session as it is now, if it is still kept.
    pub session: Option<Session>,
    /// The session's records before this one, oldest first.
    pub earlier: Vec<ExecutionRecord>,
}

/// What an execution did, in the terms replay compares.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Actions {
    pub status: ExecutionStatus,
    pub model_calls: usize,
    /// `{name, input, isError}` of every tool call, its sub-agents' included, in order.
    pub tool_calls: Vec<Value>,
    /// The record's actions without the ids a run mints (message and session ids).
    pub actions: Vec<Value>,
}

/// A replay's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    pub execution_id: String,
    /// Whether today's engine took the same actions.
    pub same: bool,
    /// Each way the replay differed, in words.
    pub differences: Vec<String>,
    pub recorded: Actions,
    pub replayed: Actions,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The record cannot be replayed, and why (for the caller to show as it is).
    #[error("{0}")]
    Unreplayable(String),
    #[error("the replay could not run: {0}")]
    Failed(String),
}

/// What replaying `execution` of `tenant` reads, from a profile's stores (`None`: no such
/// execution). Any profile's stores will do: the replay itself runs in a scratch embedded one.
pub async fn gather(
    config: &dyn ConfigStore,
    admin: &dyn ConfigAdmin,
    sessions: &dyn SessionStore,
    log: &dyn ExecutionLog,
    tenant: &TenantId,
    execution: ExecutionId,
) -> Result<Option<ReplayInput>, StoreError> {
    let Some(record) = log.get_execution(tenant, execution).await? else { return Ok(None) };
    let Some(tenant) = config.get_tenant(tenant).await? else { return Ok(None) };
    let t = &tenant.tenant_id;
    let calls = recorded::model_calls(log, &record).await?;
    let mut all = Vec::new();
    for kind in [ConfigKind::Agent, ConfigKind::Tool, ConfigKind::Skill] {
        let mut cursor: Option<String> = None;
        loop {
            let page = admin.list_config(t, kind, cursor.as_deref(), 100).await?;
            all.extend(page.items);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    let (mut agents, mut tools, mut skills) = (vec![], vec![], vec![]);
    for record in all {
        match record {
            ConfigRecord::Agent(a) => agents.push(a),
            ConfigRecord::Tool(x) => tools.push(x),
            ConfigRecord::Skill(x) => skills.push(x),
            ConfigRecord::Trigger(_) => {}
        }
    }
    let id = record.agent_id.to_string();
    let kept = match record.ran_with.as_ref() {
        Some(w) => admin.get_version(t, ConfigKind::Agent, &id, w.agent).await?,
        None => None,
    };
    let agent = match kept.map(|v| v.record) {
        Some(ConfigRecord::Agent(a)) => Some(a),
        _ => agents.iter().find(|a| a.agent_id == record.agent_id).cloned(),
    };
    let Some(agent) = agent else { return Ok(None) };
    let session = sessions.get_session(t, record.session_id).await?;
    let mut earlier = Vec::new();
    let mut after = None;
    'pages: loop {
        let page = log.list_executions(t, record.session_id, after, 100).await?;
        for e in page.items {
            if e.execution_id == record.execution_id {
                break 'pages;
            }
            earlier.push(e);
        }
        match page.next_cursor.and_then(|c| c.parse().ok()) {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(Some(ReplayInput { tenant, record, calls, agent, agents, tools, skills, session, earlier }))
}

/// Runs `input`'s execution again; see the module docs.
pub async fn replay(input: ReplayInput) -> Result<Replay, ReplayError> {
    replayable(&input)?;
    let model = RecordedModel::new(&input.calls)?;
    let webhooks = RecordedWebhooks::new(&input.record);
    let agent = input.agent.clone();
    let replayed = rerun(&input, agent, Arc::new(model), Arc::new(webhooks)).await?;
    let r = &input.record;
    let (recorded, replayed) = (actions_of(r), actions_of(&replayed));
    let differences = compare(&recorded, &replayed);
    Ok(Replay {
        execution_id: r.execution_id.to_string(),
        same: differences.is_empty(),
        differences,
        recorded,
        replayed,
    })
}

/// What a live run changes from the record: the model that answers (the profile's, called for
/// real), and optionally the agent's configuration and its model reference.
#[derive(Clone)]
pub struct Live {
    pub model: Arc<dyn Model>,
    /// The agent to run instead of the executed one as it is now.
    pub agent: Option<Agent>,
    /// A model reference for the agent instead of its own.
    pub model_ref: Option<String>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").field("model_ref", &self.model_ref).finish_non_exhaustive()
    }
}

/// One side of a live run's comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Side {
    #[serde(flatten)]
    pub actions: Actions,
    /// The models that answered, in call order.
    pub models: Vec<String>,
    pub replies: Vec<String>,
    pub tokens: u64,
    /// `None` when a model had no price.
    pub cost_usd: Option<f64>,
    pub latency_ms: u64,
}

/// A live run's answer: the record and the live run side by side, and how their actions differ.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveReplay {
    pub execution_id: String,
    pub same: bool,
    pub differences: Vec<String>,
    pub recorded: Side,
    pub live: Side,
}

/// Runs `input`'s message again against a real model: the agent as it is now (or `live.agent`,
/// with `live.model_ref`), from the same session state, with tools answered from the record when
/// the live model asks for a call the record has (the same tool and arguments) and refused
/// otherwise; nothing is committed to the tenant's store or sent.
pub async fn replay_live(input: ReplayInput, live: Live) -> Result<LiveReplay, ReplayError> {
    let r = &input.record;
    let now = input.agents.iter().find(|a| a.agent_id == r.agent_id).cloned();
    let mut agent = live.agent.clone().or(now).unwrap_or_else(|| input.agent.clone());
    if agent.agent_id != r.agent_id {
        return Err(ReplayError::Unreplayable(format!(
            "the agent given is {}, not the execution's agent {}",
            agent.agent_id, r.agent_id
        )));
    }
    if let Some(model) = &live.model_ref {
        model.clone_into(&mut agent.model);
    }
    let ran = rerun(&input, agent, live.model.clone(), Arc::new(RecordedWebhooks::new(r).by_call())).await?;
    let (recorded, live) = (side(r), side(&ran));
    let differences = compare(&recorded.actions, &live.actions);
    Ok(LiveReplay {
        execution_id: r.execution_id.to_string(),
        same: differences.is_empty(),
        differences,
        recorded,
        live,
    })
}

fn side(r: &ExecutionRecord) -> Side {
    let replies = r
        .actions
        .iter()
        .filter_map(|a| match a {
            switchboard_domain::Action::Reply { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    let models =
        r.model_calls.iter().chain(r.children.iter().flat_map(|c| c.model_calls.iter())).map(|c| c.model.clone());
    Side {
        actions: actions_of(r),
        models: models.collect(),
        replies,
        tokens: r.token_usage.total(),
        cost_usd: r.cost_usd.map(|c| c.dollars()),
        latency_ms: r.latency_ms,
    }
}

/// Whether `input`'s record can run again (the reason if not); the customer's text if so.
fn replayable(input: &ReplayInput) -> Result<&str, ReplayError> {
    let r = &input.record;
    if r.model_calls.is_empty() {
        return Err(ReplayError::Unreplayable(format!(
            "execution {} made no model call (status {}): there is nothing to replay",
            r.execution_id,
            r.status.as_str()
        )));
    }
    if r.status == switchboard_domain::ExecutionStatus::Interrupted {
        // What stopped it (a newer message in the queue) is not part of the record's turn.
        return Err(ReplayError::Unreplayable(format!(
            "execution {} was interrupted by a newer message before it replied: replay the turn that answered both",
            r.execution_id
        )));
    }
    if input.calls.iter().any(|c| c.request.is_none() || c.response.is_none()) {
        return Err(ReplayError::Unreplayable(
            "the record keeps no model content (the tenant's recording was off when it ran)".into(),
        ));
    }
    if !r.hook_calls.is_empty() {
        // A hook's answer (its change, its stop) is not kept, so the run could not be repeated.
        return Err(ReplayError::Unreplayable(format!(
            "the execution called {} hook(s), whose answers the record does not keep",
            r.hook_calls.len()
        )));
    }
    r.input.get("text").and_then(Value::as_str).ok_or_else(|| {
        ReplayError::Unreplayable("the record's customer text is redacted (or absent): it cannot be sent again".into())
    })
}

/// Runs the record's message again in a sandbox holding the tenant's configuration with `agent`
/// in place of the executed one, answered by `model` and `webhooks`: the new record.
async fn rerun(
    input: &ReplayInput,
    agent: Agent,
    model: Arc<dyn Model>,
    webhooks: Arc<dyn WebhookCaller>,
) -> Result<ExecutionRecord, ReplayError> {
    let r = &input.record;
    let own: Vec<&CallContent> = input.calls.iter().filter(|c| c.sub_agent_call.is_none()).collect();
    let text = replayable(input)?;
    let mut records: Vec<ConfigRecord> = input.tools.iter().cloned().map(ConfigRecord::Tool).collect();
    records.extend(input.skills.iter().cloned().map(ConfigRecord::Skill));
    records.extend(input.agents.iter().filter(|a| a.agent_id != agent.agent_id).cloned().map(ConfigRecord::Agent));
    records.push(ConfigRecord::Agent(agent));
    let sandbox = Sandbox::open(&input.tenant, &records, model, webhooks).await.map_err(ReplayError::Failed)?;
    let fail = |e: switchboard_engine::StoreError| ReplayError::Failed(e.to_string());
    let t = &input.tenant.tenant_id;
    let first = own.first().and_then(|c| c.request.as_ref());
    let session = seed(input, first)?;
    let conversation = session.conversation_id.clone();
    let seed_record = ExecutionRecord { source_id: format!("replay-seed-{}", r.execution_id), ..r.clone() };
    let write = SessionWrite { session, expected_version: None };
    let commit = TurnCommit {
        sessions: vec![write],
        execution: seed_record,
        events: vec![],
        content: vec![],
        resumes: None,
        coalesced: vec![],
    };
    sandbox.embedded.store.commit_turn(&commit).await.map_err(fail)?;
    let item = WorkItem {
        tenant_id: t.clone(),
        source_id: r.source_id.clone(),
        event_id: None,
        conversation_id: conversation,
        message_id: r.input.get("messageId").and_then(Value::as_str).unwrap_or(&r.source_id).to_owned(),
        text: text.to_owned(),
        trigger_id: r.trigger_id,
        trigger_version: r.ran_with.as_ref().and_then(|w| w.trigger),
        variant: r.split.as_ref().map(|s| s.variant.clone()),
        agent_id: r.agent_id,
        continuation: false,
        detail: r.input.get("detail").cloned().unwrap_or(Value::Null),
        refused: None,
        day_tokens: None,
        follow: false,
        resume: None,
        arrived_at: None,
        earlier: vec![],
        recording: Recording::Off,
        close_idle_after: None,
        closes_idle: None,
    };
    // The turn itself: a continuation it queued (a handoff to another agent) is another
    // execution, with its own record.
    let outcome = sandbox.embedded.executor.execute(&item).await.map_err(|e| ReplayError::Failed(e.message.clone()))?;
    match outcome {
        ExecOutcome::Recorded(record) | ExecOutcome::AlreadyRecorded(record) => Ok(*record),
        ExecOutcome::Dropped { reason } => Err(ReplayError::Failed(format!("the turn was dropped: {reason}"))),
        ExecOutcome::Held => Err(ReplayError::Failed("the turn waited behind a paused one".into())),
    }
}

/// The session as the turn found it (see the module docs).
fn seed(
    input: &ReplayInput,
    first: Option<&switchboard_engine::recorded::RequestContent>,
) -> Result<Session, ReplayError> {
    let r = &input.record;
    let conversation = input.session.as_ref().map(|s| s.conversation_id.clone()).unwrap_or_else(|| {
        r.input.pointer("/detail/conversationId").and_then(Value::as_str).unwrap_or("replay").to_owned()
    });
    let mut session = Session::start(r.tenant_id.clone(), conversation, r.agent_id, chrono::Utc::now());
    session.session_id = r.session_id;
    if let Some(now) = &input.session {
        session.memory = now.memory.clone();
        session.channel = now.channel.clone();
        session.handoff_context = now.handoff_context.clone();
        session.handoff_depth = now.handoff_depth;
        session.parent_session_id = now.parent_session_id;
    }
    let counted: Vec<&ExecutionRecord> = input.earlier.iter().filter(|e| !e.model_calls.is_empty()).collect();
    session.turn_count = u32::try_from(counted.len()).unwrap_or(u32::MAX);
    session.tokens_used = counted.iter().map(|e| e.token_usage.total()).sum();
    if let Some(first) = first {
        let mut history = Vec::with_capacity(first.messages.len());
        for part in &first.messages {
            let content = part.content.clone().ok_or_else(|| {
                ReplayError::Unreplayable("a message of the first model call is no longer kept".into())
            })?;
            let message: Message = serde_json::from_value(content).map_err(|_| {
                ReplayError::Unreplayable("the record's messages are redacted: they cannot be sent again".into())
            })?;
            history.push(message);
        }
        // The history the turn started from: what the first call was sent before the message.
        history.pop();
        if !history.is_empty() {
            // Not a first turn, whatever the earlier records say (they may have expired).
            session.turn_count = session.turn_count.max(1);
        }
        session.transcript = history;
        if let Some(Value::String(system)) = &first.system.content {
            // The prompt names the step; the session keeps its id.
            let step = section(system, "## Current step: ");
            session.current_step =
                step.and_then(|name| input.agent.steps.iter().find(|s| s.name == name)).map(|s| s.step_id.clone());
            let loaded: Vec<&str> = system
                .match_indices("\n\n## Skill: ")
                .filter_map(|(i, _)| section(&system[i..], "## Skill: "))
                .collect();
            session.loaded_skills = loaded
                .iter()
                .filter_map(|name| input.skills.iter().find(|s| s.name == *name).map(|s| s.skill_id))
                .collect();
        }
    }
    session.status = SessionStatus::Active;
    Ok(session)
}

/// The rest of the line after `heading` where the prompt has it.
fn section<'a>(prompt: &'a str, heading: &str) -> Option<&'a str> {
    let at = prompt.find(heading)? + heading.len();
    prompt[at..].lines().next().map(str::trim)
}

/// A record's actions in comparable form.
fn actions_of(r: &ExecutionRecord) -> Actions {
    let children = r.children.iter().flat_map(|c| c.tool_calls.iter());
    let tool_calls = r
        .tool_calls
        .iter()
        .chain(children)
        .map(|c| json!({ "name": c.name, "input": c.input, "isError": c.is_error }))
        .collect();
    let actions = r
        .actions
        .iter()
        .map(|a| {
            let mut v = serde_json::to_value(a).unwrap_or(Value::Null);
            if let Some(fields) = v.as_object_mut() {
                fields.remove("messageId");
                fields.remove("sessionId");
            }
            v
        })
        .collect();
    let model_calls = r.model_calls.len() + r.children.iter().map(|c| c.model_calls.len()).sum::<usize>();
    Actions { status: r.status, model_calls, tool_calls, actions }
}

/// How `replayed` differs from `recorded`, in words.
fn compare(recorded: &Actions, replayed: &Actions) -> Vec<String> {
    let mut out = Vec::new();
    if recorded.status != replayed.status {
        out.push(format!("status: recorded {}, replayed {}", recorded.status.as_str(), replayed.status.as_str()));
    }
    if recorded.model_calls != replayed.model_calls {
        out.push(format!("model calls: recorded {}, replayed {}", recorded.model_calls, replayed.model_calls));
    }
    let n = recorded.tool_calls.len().max(replayed.tool_calls.len());
    for i in 0..n {
        match (recorded.tool_calls.get(i), replayed.tool_calls.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => out.push(format!("tool call {}: recorded {a}, replayed {b}", i + 1)),
            (Some(a), None) => out.push(format!("tool call {}: recorded {a}, not made", i + 1)),
            (None, Some(b)) => out.push(format!("tool call {}: not recorded, replayed {b}", i + 1)),
            (None, None) => {}
        }
    }
    let n = recorded.actions.len().max(replayed.actions.len());
    for i in 0..n {
        match (recorded.actions.get(i), replayed.actions.get(i)) {
            (Some(a), Some(b)) if a == b || same_but_its_cause(a, b) => {}
            (a, b) => out.push(format!(
                "action {}: recorded {}, replayed {}",
                i + 1,
                a.map_or("none".into(), Value::to_string),
                b.map_or("none".into(), Value::to_string)
            )),
        }
    }
    out
}

/// Whether `replayed` is `recorded` but for the hand-off's `cause`, which a record written before
/// causes were kept does not have: not a difference of behaviour.
fn same_but_its_cause(recorded: &Value, replayed: &Value) -> bool {
    if recorded.get("cause").is_some() {
        return false;
    }
    let mut without = replayed.clone();
    if let Some(fields) = without.as_object_mut() {
        fields.remove("cause");
    }
    &without == recorded
}

/// One recorded answer, with what identifies the request it answered.
#[derive(Debug, Clone)]
struct Answer {
    response: ModelResponse,
    /// The hashes of the request's system prompt and first message (a sub-agent's run is told
    /// from another's by them).
    system: String,
    first: Option<String>,
}

/// Answers each model call with the record's next answer: the execution's own calls in order,
/// and a sub-agent's run's calls in their order, told apart by the system prompt and task.
struct RecordedModel {
    own: Mutex<std::collections::VecDeque<Answer>>,
    children: Mutex<Vec<std::collections::VecDeque<Answer>>>,
}

impl RecordedModel {
    fn new(calls: &[CallContent]) -> Result<Self, ReplayError> {
        let mut own = std::collections::VecDeque::new();
        let mut children: HashMap<String, std::collections::VecDeque<Answer>> = HashMap::new();
        for call in calls {
            let answer = answer(call)?;
            match &call.sub_agent_call {
                None => own.push_back(answer),
                Some(id) => children.entry(id.clone()).or_default().push_back(answer),
            }
        }
        Ok(Self { own: Mutex::new(own), children: Mutex::new(children.into_values().collect()) })
    }
}

fn answer(call: &CallContent) -> Result<Answer, ReplayError> {
    let missing = || ReplayError::Unreplayable("a model answer of the record is no longer kept".into());
    let (request, response) = (call.request.as_ref().ok_or_else(missing)?, call.response.as_ref().ok_or_else(missing)?);
    let message: Message = serde_json::from_value(response.message.content.clone().ok_or_else(missing)?)
        .map_err(|_| ReplayError::Unreplayable("the record's model answers are redacted".into()))?;
    let stop_reason: StopReason = serde_json::from_value(json!(call.stop_reason))
        .map_err(|_| ReplayError::Failed(format!("an unknown stop reason {}", call.stop_reason)))?;
    Ok(Answer {
        response: ModelResponse { content: message.content, stop_reason, usage: call.usage, model: call.model.clone() },
        system: request.system.sha256.clone(),
        first: request.messages.first().map(|m| m.sha256.clone()),
    })
}

#[async_trait]
impl Model for RecordedModel {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        // Hashed as the recording hashed them.
        let system = Blob::of_system(&request.system, Recording::Full).0.sha256;
        let first = request.messages.first().map(|m| Blob::of_message(m, Recording::Full).0.sha256);
        {
            let mut children = self.children.lock().map_err(|_| ModelError::Unavailable("replay lock".into()))?;
            let run = children.iter_mut().find(|q| q.front().is_some_and(|a| a.system == system && a.first == first));
            if let Some(answer) = run.and_then(|q| q.pop_front()) {
                return Ok(answer.response);
            }
        }
        // A sub-agent's call the record has no answer for failed when it was recorded (a failed
        // call keeps no answer): it fails again, and never takes the execution's own answers.
        if request.system.contains(switchboard_engine::SUB_AGENT_HEADING) {
            return Err(ModelError::Rejected("replay: the record keeps no answer for this sub-agent call".into()));
        }
        let mut own = self.own.lock().map_err(|_| ModelError::Unavailable("replay lock".into()))?;
        own.pop_front().map(|a| a.response).ok_or_else(|| {
            ModelError::Rejected("replay: the engine asked for a model call the record does not have".into())
        })
    }
}

/// Answers each webhook call with the record's result for the same idempotency key (a replay),
/// or for the same tool and arguments (a live run, whose calls are numbered as its model asks).
struct RecordedWebhooks {
    answers: Vec<Recorded>,
    by_call: bool,
}

/// One recorded webhook call: its key, tool and arguments, and what it gave.
struct Recorded {
    key: String,
    tool: String,
    input: Value,
    output: Value,
    audit: WebhookAudit,
}

impl RecordedWebhooks {
    fn new(r: &ExecutionRecord) -> Self {
        let calls = r.tool_calls.iter().chain(r.children.iter().flat_map(|c| c.tool_calls.iter()));
        let answers = calls
            .filter_map(|c| {
                let audit = c.webhook.clone()?;
                let (key, tool, input, output) =
                    (c.idempotency_key.clone(), c.name.clone(), c.input.clone(), c.output.clone());
                Some(Recorded { key, tool, input, output, audit })
            })
            .collect();
        Self { answers, by_call: false }
    }

    /// The same answers, found by tool and arguments instead of by key.
    fn by_call(self) -> Self {
        Self { by_call: true, ..self }
    }

    fn find(&self, request: &WebhookRequest) -> Option<&Recorded> {
        let sent: Value = serde_json::from_slice(&request.body).ok()?;
        self.find_call(&request.tool_name, &request.idempotency_key, sent.get("arguments")?)
    }

    fn find_call(&self, tool: &str, key: &str, arguments: &Value) -> Option<&Recorded> {
        if !self.by_call {
            return self.answers.iter().find(|a| a.key == key);
        }
        self.answers.iter().find(|a| a.tool == tool && &a.input == arguments)
    }
}

#[async_trait]
impl WebhookCaller for RecordedWebhooks {
    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        let Some(Recorded { output, audit, .. }) = self.find(request) else {
            return Err(WebhookError::Blocked(
                "replay: the record has no result for this call (tools are not called again)".into(),
            ));
        };
        let respond = |status: u16, body: &Value| {
            Ok(WebhookResponse {
                status,
                body: body.to_string().into_bytes(),
                truncated: false,
                attempts: audit.attempts,
                host: audit.host.clone(),
            })
        };
        let attempts = audit.attempts;
        match audit.outcome.as_str() {
            "ok" => respond(audit.status.unwrap_or(200), output),
            "http_error" => respond(audit.status.unwrap_or(500), output.get("body").unwrap_or(&Value::Null)),
            "timeout" => Err(WebhookError::Timeout { attempts }),
            "connect_error" => Err(WebhookError::Connect { message: "as recorded".into(), attempts }),
            "secret_error" => Err(WebhookError::Secret("as recorded".into())),
            "invalid_request" => Err(WebhookError::Invalid("as recorded".into())),
            _ => Err(WebhookError::Blocked("as recorded".into())),
        }
    }

    /// A tool of an MCP server answers what the model read of it, or fails as it failed.
    async fn call_mcp(&self, request: &McpRequest) -> Result<McpAnswer, WebhookError> {
        let arguments = Value::Object(request.arguments.clone());
        let Some(Recorded { output, audit, .. }) =
            self.find_call(&request.tool_name, &request.idempotency_key, &arguments)
        else {
            return Err(WebhookError::Blocked(
                "replay: the record has no result for this call (tools are not called again)".into(),
            ));
        };
        let attempts = audit.attempts;
        match audit.outcome.as_str() {
            "ok" => Ok(McpAnswer::reading(output, false, &audit.host)),
            "tool_error" => Ok(McpAnswer::reading(output, true, &audit.host)),
            "http_error" => Err(WebhookError::Http { status: audit.status.unwrap_or(500) }),
            "protocol_error" => Err(WebhookError::Protocol("as recorded".into())),
            "timeout" => Err(WebhookError::Timeout { attempts }),
            "connect_error" => Err(WebhookError::Connect { message: "as recorded".into(), attempts }),
            "secret_error" => Err(WebhookError::Secret("as recorded".into())),
            _ => Err(WebhookError::Blocked("as recorded".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_off_recorded_before_causes_were_kept_is_the_same_as_its_replay_with_one() {
        let old = json!({ "type": "handoff_to_human", "reason": "a person", "priority": "normal" });
        let replayed =
            json!({ "type": "handoff_to_human", "reason": "a person", "priority": "normal", "cause": "agent" });
        assert!(same_but_its_cause(&old, &replayed));
        // a recorded cause is compared like any field, and so is everything else
        let failed =
            json!({ "type": "handoff_to_human", "reason": "a person", "priority": "normal", "cause": "failure" });
        assert!(!same_but_its_cause(&replayed, &failed));
        let other = json!({ "type": "handoff_to_human", "reason": "another", "priority": "normal", "cause": "agent" });
        assert!(!same_but_its_cause(&old, &other));
    }
}
