//! The executor: runs one work item to completion — finds or starts the session, runs the agent
//! loop, performs tool side effects under idempotency keys, and commits the session together
//! with the execution record. Redelivering the same item is harmless: a recorded source is never
//! run again, and a side effect repeated by a replay carries the key it had the first time.

use std::time::Instant;

use chrono::Duration as ChronoDuration;
use serde_json::json;
use switchboard_domain::event::detail_type;
use switchboard_domain::limits::EXECUTION_TTL_DAYS;
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_domain::{
    Action, Agent, AgentStatus, ErrorKind, ExecutionError, ExecutionId, ExecutionRecord, ExecutionStatus,
    HandoffBehavior, ModelCallRecord, Session, SessionStatus, SystemTool, TokenUsage, ToolCallRecord,
};
use tracing::{info, warn};

use crate::context;
use crate::error::StoreError;
use crate::ports::{Deps, ModelRequest, SessionWrite, ToolSpec, TurnCommit, WorkItem};
use crate::system_tools::{self, ToolFault, TurnState};
use crate::webhook_tools;

/// How often a turn is re-run after losing a session version race before giving up (and
/// leaving the item to be redelivered).
const MAX_COMMIT_ATTEMPTS: u32 = 3;

/// Why an item could not be completed now. Retryable failures leave the item for redelivery;
/// the others are still retried by the queue until its receive limit, then dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct ExecError {
    pub kind: ErrorKind,
    pub message: String,
    pub retryable: bool,
}

impl ExecError {
    fn new(kind: ErrorKind, message: impl Into<String>, retryable: bool) -> Self {
        Self { kind, message: message.into(), retryable }
    }
}

impl From<StoreError> for ExecError {
    fn from(e: StoreError) -> Self {
        let retryable = e.retryable();
        ExecError::new(ErrorKind::Store, e.to_string(), retryable)
    }
}

impl From<ToolFault> for ExecError {
    fn from(e: ToolFault) -> Self {
        let retryable = e.retryable();
        ExecError::new(ErrorKind::Tool, e.to_string(), retryable)
    }
}

/// What became of an item.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecOutcome {
    /// The item ran (or was skipped with a record saying why).
    Recorded(Box<ExecutionRecord>),
    /// The source had already been recorded: nothing was done again.
    AlreadyRecorded(Box<ExecutionRecord>),
    /// A handoff continuation whose target session is no longer active: dropped.
    Dropped { reason: String },
}

#[derive(Debug, Clone)]
pub struct Executor {
    deps: Deps,
}

impl Executor {
    pub fn new(deps: Deps) -> Self {
        Self { deps }
    }

    pub fn deps(&self) -> &Deps {
        &self.deps
    }

    /// Runs `item`. See the module docs for the once-only guarantees.
    #[tracing::instrument(skip_all, fields(tenant = %item.tenant_id, source = %item.source_id))]
    pub async fn execute(&self, item: &WorkItem) -> Result<ExecOutcome, ExecError> {
        let deps = &self.deps;
        if let Some(done) = deps.executions.execution_for_source(&item.tenant_id, &item.source_id).await? {
            return Ok(ExecOutcome::AlreadyRecorded(Box::new(done)));
        }
        let mut last_conflict = String::new();
        for attempt in 1..=MAX_COMMIT_ATTEMPTS {
            let started = Instant::now();
            let prepared = self.prepare(item).await?;
            let (commit, record) = match prepared {
                Prepared::Drop(reason) => return Ok(ExecOutcome::Dropped { reason }),
                Prepared::Skip(session, reason) => {
                    let record = self.skipped_record(item, &session, &reason, started);
                    (TurnCommit { sessions: vec![], execution: record.clone() }, record)
                }
                Prepared::Run { session, agent, is_new } => {
                    let expected = (!is_new).then_some(session.version);
                    let turn = self.run_turn(item, *session, &agent, started).await?;
                    let mut sessions = vec![SessionWrite { session: turn.session, expected_version: expected }];
                    if let Some(next) = turn.new_session {
                        sessions.push(SessionWrite { session: next, expected_version: None });
                    }
                    (TurnCommit { sessions, execution: turn.record.clone() }, turn.record)
                }
            };
            match deps.sessions.commit_turn(&commit).await {
                Ok(()) => {
                    info!(
                        execution_id = %record.execution_id, status = ?record.status,
                        iterations = record.iterations, tokens = record.token_usage.total(),
                        latency_ms = record.latency_ms, "execution recorded"
                    );
                    return Ok(ExecOutcome::Recorded(Box::new(record)));
                }
                Err(StoreError::VersionConflict(m)) => {
                    warn!(attempt, conflict = %m, "session changed while the turn ran; running it again");
                    last_conflict = m;
                }
                Err(StoreError::Duplicate(_)) => {
                    // Another worker recorded the same source meanwhile.
                    if let Some(done) = deps.executions.execution_for_source(&item.tenant_id, &item.source_id).await? {
                        return Ok(ExecOutcome::AlreadyRecorded(Box::new(done)));
                    }
                    return Err(ExecError::new(ErrorKind::Store, "duplicate source without a record", true));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ExecError::new(
            ErrorKind::Conflict,
            format!("session kept changing during {MAX_COMMIT_ATTEMPTS} attempts: {last_conflict}"),
            true,
        ))
    }

    async fn prepare(&self, item: &WorkItem) -> Result<Prepared, ExecError> {
        let deps = &self.deps;
        let now = deps.clock.now();
        let latest = deps.sessions.latest_session(&item.tenant_id, &item.conversation_id).await?;
        let mut is_new = false;
        let session = match latest {
            Some(s) if s.is_human_owned() => {
                return Ok(Prepared::Skip(s, "a human operator owns the conversation".into()));
            }
            Some(s) if s.is_active() => {
                if item.continuation && s.agent_id != item.agent_id {
                    return Ok(Prepared::Drop(format!("handoff target {} is no longer active", item.agent_id)));
                }
                s
            }
            _ if item.continuation => {
                return Ok(Prepared::Drop("the handed-off session is no longer active".into()));
            }
            _ => {
                is_new = true;
                Session::start(item.tenant_id.clone(), item.conversation_id.clone(), item.agent_id, now)
            }
        };
        match deps.config.get_agent(&item.tenant_id, session.agent_id).await? {
            Some(agent) if agent.status == AgentStatus::Active => {
                Ok(Prepared::Run { session: Box::new(session), agent, is_new })
            }
            _ => Err(ExecError::new(
                ErrorKind::Config,
                format!("agent {} of session {} is missing or not active", session.agent_id, session.session_id),
                false,
            )),
        }
    }

    fn skipped_record(&self, item: &WorkItem, session: &Session, reason: &str, started: Instant) -> ExecutionRecord {
        let mut r = self.blank_record(item, session, started);
        r.status = ExecutionStatus::Skipped;
        r.error = Some(ExecutionError { kind: ErrorKind::Config, message: reason.to_owned(), retryable: false });
        r
    }

    fn blank_record(&self, item: &WorkItem, session: &Session, started: Instant) -> ExecutionRecord {
        let now = self.deps.clock.now();
        ExecutionRecord {
            tenant_id: item.tenant_id.clone(),
            execution_id: ExecutionId::generate(),
            session_id: session.session_id,
            agent_id: session.agent_id,
            trigger_id: item.trigger_id,
            source_id: item.source_id.clone(),
            input: json!({ "messageId": item.message_id, "text": item.text, "detail": item.detail }),
            status: ExecutionStatus::Success,
            error: None,
            iterations: 0,
            model_calls: vec![],
            tool_calls: vec![],
            actions: vec![],
            token_usage: TokenUsage::default(),
            latency_ms: elapsed_ms(started),
            created_at: now,
            expires_at: now + ChronoDuration::days(EXECUTION_TTL_DAYS),
        }
    }

    /// The agent loop for one inbound message.
    async fn run_turn(
        &self,
        item: &WorkItem,
        session: Session,
        agent: &Agent,
        started: Instant,
    ) -> Result<Turn, ExecError> {
        let deps = &self.deps;
        let mut record = self.blank_record(item, &session, started);
        let user = Message::user_text(item.text.clone());
        let tools = context::allowed_tools(agent, &session);
        let custom = webhook_tools::load(deps, agent).await?;
        let mut specs = context::tool_specs(&tools);
        specs.extend(custom.iter().map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.parameters.clone(),
        }));
        let mut request = ModelRequest {
            model: agent.model.clone(),
            system: context::system_prompt(agent, &session),
            messages: context::messages(agent, &session, &user),
            tools: specs,
            config: agent.model_config.clone(),
        };
        let mut state = TurnState { session, new_session: None, actions: vec![], replies_sent: 0, finished: false };
        let mut new_messages = vec![user];
        let mut calls: usize = 0;
        let mut status = ExecutionStatus::MaxIterations;
        let mut failure = None;

        while record.iterations < agent.max_iterations {
            record.iterations += 1;
            let call_started = Instant::now();
            let response = match deps.model.converse(&request).await {
                Ok(r) => r,
                Err(e) if e.retryable() => return Err(ExecError::new(ErrorKind::Model, e.to_string(), true)),
                Err(e) => {
                    status = ExecutionStatus::Failed;
                    failure = Some(ExecutionError { kind: ErrorKind::Model, message: e.to_string(), retryable: false });
                    break;
                }
            };
            record.token_usage.add(response.usage);
            record.model_calls.push(ModelCallRecord {
                model: response.model.clone(),
                stop_reason: serde_json::to_value(response.stop_reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                usage: response.usage,
                latency_ms: elapsed_ms(call_started),
            });
            let assistant = Message { role: Role::Assistant, content: response.content };
            let uses: Vec<(String, String, serde_json::Value)> = assistant
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { tool_use_id, name, input } => {
                        Some((tool_use_id.clone(), name.clone(), input.clone()))
                    }
                    _ => None,
                })
                .collect();
            let final_text = assistant.text();
            request.messages.push(assistant.clone());
            new_messages.push(assistant);

            if uses.is_empty() {
                // A final answer. It is the reply unless the agent already replied with the tool.
                if state.replies_sent == 0 && !final_text.trim().is_empty() {
                    let key = format!("{}/{calls}", item.source_id);
                    let outcome = system_tools::send_reply(deps, item, &mut state, &final_text, &key).await?;
                    if outcome.is_error {
                        warn!(error = %outcome.output, "final answer could not be sent");
                        status = ExecutionStatus::Failed;
                        failure = Some(ExecutionError {
                            kind: ErrorKind::Tool,
                            message: outcome.output.to_string(),
                            retryable: false,
                        });
                        break;
                    }
                }
                status = ExecutionStatus::Success;
                break;
            }

            let mut results = Vec::with_capacity(uses.len());
            for (tool_use_id, name, input) in uses {
                let key = format!("{}/{calls}", item.source_id);
                calls += 1;
                let call_started = Instant::now();
                let mut webhook = None;
                let outcome = match name.parse::<SystemTool>() {
                    Ok(tool) if tools.contains(&tool) && !state.finished => {
                        system_tools::run(deps, item, &mut state, tool, &input, &key).await?
                    }
                    _ if state.finished => system_tools::ToolOutcome {
                        output: json!({"error": "the conversation already left this agent in this turn"}),
                        is_error: true,
                    },
                    Err(_) if custom.iter().any(|t| t.name == name) => {
                        let tool = custom
                            .iter()
                            .find(|t| t.name == name)
                            .ok_or_else(|| ExecError::new(ErrorKind::Internal, "custom tool vanished", false))?;
                        let (outcome, audit) =
                            webhook_tools::run(deps, item, &state.session, record.execution_id, tool, &input, &key)
                                .await;
                        webhook = Some(audit);
                        outcome
                    }
                    _ => system_tools::ToolOutcome {
                        output: json!({"error": format!("tool '{name}' is not available to this agent")}),
                        is_error: true,
                    },
                };
                record.tool_calls.push(ToolCallRecord {
                    tool_use_id: tool_use_id.clone(),
                    name,
                    input,
                    output: outcome.output.clone(),
                    is_error: outcome.is_error,
                    idempotency_key: key,
                    latency_ms: elapsed_ms(call_started),
                    webhook,
                });
                results.push(ContentBlock::ToolResult {
                    tool_use_id,
                    content: outcome.output,
                    is_error: outcome.is_error,
                });
            }
            let tool_turn = Message { role: Role::User, content: results };
            request.messages.push(tool_turn.clone());
            new_messages.push(tool_turn);
            if state.finished {
                status = ExecutionStatus::Success;
                break;
            }
        }

        state.session.append_transcript(new_messages);
        state.session.turn_count += 1;
        if state.session.is_active() && status != ExecutionStatus::Failed && state.session.turn_count >= agent.max_turns
        {
            let key = format!("{}/max-turns", item.source_id);
            let reason = format!("the agent reached its limit of {} turns", agent.max_turns);
            match agent.handoff_behavior {
                HandoffBehavior::Escalate => {
                    system_tools::handoff_to_human(deps, &mut state, &reason, "normal", &key).await?;
                }
                HandoffBehavior::End => system_tools::end_session(deps, &mut state, Some(reason), &key).await?,
            }
        }
        record.status = match (status, state.session.status) {
            (ExecutionStatus::Failed, _) => ExecutionStatus::Failed,
            (_, SessionStatus::HandedOff) => ExecutionStatus::HandedOff,
            (_, SessionStatus::Completed) => ExecutionStatus::Ended,
            (s, _) => s,
        };
        record.error = failure;
        if record.status == ExecutionStatus::MaxIterations {
            record.error = Some(ExecutionError {
                kind: ErrorKind::Model,
                message: format!("no final answer after {} model calls", agent.max_iterations),
                retryable: false,
            });
        }
        if record.status == ExecutionStatus::Failed {
            let key = format!("{}/failed", item.source_id);
            let message = record.error.as_ref().map(|e| e.message.clone()).unwrap_or_default();
            system_tools::publish(
                deps,
                &key,
                detail_type::EXECUTION_FAILED,
                &state.session,
                json!({
                    "executionId": record.execution_id, "error": message,
                }),
            )
            .await
            .map_err(|e| ExecError::new(ErrorKind::Internal, e.to_string(), e.retryable))?;
        }
        record.actions = std::mem::take(&mut state.actions);
        record.session_id = state.session.session_id;
        record.latency_ms = elapsed_ms(started);
        state.session.updated_at = deps.clock.now();
        state.session.version += 1;
        Ok(Turn { session: state.session, new_session: state.new_session, record })
    }
}

enum Prepared {
    Run { session: Box<Session>, agent: Agent, is_new: bool },
    Skip(Session, String),
    Drop(String),
}

struct Turn {
    session: Session,
    new_session: Option<Session>,
    record: ExecutionRecord,
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Actions of a record, for display.
pub fn describe(action: &Action) -> String {
    match action {
        Action::Reply { text, .. } => format!("reply: {text}"),
        Action::HandoffToHuman { reason, priority } => format!("handoff to human ({priority}): {reason}"),
        Action::HandoffToAgent { agent_id, reason, .. } => format!("handoff to agent {agent_id}: {reason}"),
        Action::EndConversation { summary } => format!("end: {}", summary.as_deref().unwrap_or("")),
        Action::TriggerFlow { flow_id } => format!("flow requested: {flow_id}"),
    }
}
