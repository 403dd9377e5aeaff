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
    Action, Agent, AgentStatus, AgentType, ErrorKind, ExecutionError, ExecutionId, ExecutionRecord, ExecutionStatus,
    HandoffBehavior, ModelCallRecord, Session, SessionStatus, TokenUsage, ToolCallRecord,
};
use tracing::{info, warn};

use crate::context;
use crate::ports::StoreError;
use crate::ports::{Deps, ModelRequest, ModelResponse, SessionWrite, TurnCommit, WorkItem};
use crate::router_agent;
use crate::supervisor::{self, SubAgentCall};
use crate::system_tools::{self, AgentHandoff, ToolFault, ToolOutcome, TurnState};
use crate::toolbox::{self, Resolved, Toolbox};
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
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>, retryable: bool) -> Self {
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
            info!(execution_id = %done.execution_id, "source already recorded (a redelivery); nothing is done again");
            return Ok(ExecOutcome::AlreadyRecorded(Box::new(done)));
        }
        let mut last_conflict = String::new();
        for attempt in 1..=MAX_COMMIT_ATTEMPTS {
            let started = Instant::now();
            let prepared = self.prepare(item).await?;
            let (commit, record) = match prepared {
                Prepared::Drop(reason) => return Ok(ExecOutcome::Dropped { reason }),
                Prepared::Skip(mut session, reason) => {
                    // The human operator owns the conversation: no agent answers, but the message
                    // joins the session's transcript, so an agent it is handed back to sees it.
                    let record = self.skipped_record(item, &session, &reason, started);
                    let expected = session.version;
                    session.append_transcript([Message::user_text(item.text.clone())]);
                    session.version += 1;
                    session.updated_at = deps.clock.now();
                    let write = SessionWrite { session, expected_version: Some(expected) };
                    (TurnCommit { sessions: vec![write], execution: record.clone() }, record)
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
            children: vec![],
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
        let mut tools = Toolbox::build(deps, agent, &session).await?;
        let mut request = ModelRequest {
            model: agent.model.clone(),
            system: context::system_prompt(agent, &session, &tools),
            messages: context::messages(agent, &session, &user),
            tools: tools.specs(),
            config: agent.model_config.clone(),
        };
        let mut state = TurnState { session, new_session: None, actions: vec![], replies_sent: 0, finished: false };
        let mut new_messages = vec![user];
        let mut calls: usize = 0;
        let mut status = ExecutionStatus::MaxIterations;
        let mut failure = None;

        if agent.agent_type == AgentType::Router {
            let key = format!("{}/route", item.source_id);
            let pick = router_agent::classify(deps, agent, request.messages.clone(), &mut record, &key).await?;
            let target = pick.target;
            let outcome = match target {
                Some(target) => {
                    let context = pick.fallback.map(|why| json!({ "routerFallback": why }));
                    let handoff = AgentHandoff { target, reason: pick.reason, summary: None, context };
                    Some(system_tools::handoff_to_agent(deps, item, &mut state, handoff, &key).await?)
                }
                None => None,
            };
            match outcome {
                Some(o) if !o.is_error => status = ExecutionStatus::Success,
                other => {
                    status = ExecutionStatus::Failed;
                    let message = other.map_or_else(
                        || "the router has no valid pick and its default agent is not active".to_owned(),
                        |o| o.output.to_string(),
                    );
                    failure = Some(ExecutionError { kind: ErrorKind::Config, message, retryable: false });
                }
            }
        }

        while !state.finished && status == ExecutionStatus::MaxIterations && record.iterations < agent.max_iterations {
            record.iterations += 1;
            let assistant = match converse(deps, &request, &mut record.token_usage, &mut record.model_calls).await? {
                Ok(message) => message,
                Err(e) => {
                    status = ExecutionStatus::Failed;
                    failure = Some(e);
                    break;
                }
            };
            let uses = assistant.tool_uses();
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

            // Every call gets its key in call order. Sub-agent calls only read the session, so
            // they run first and concurrently; the other tools run one by one, in order.
            let keyed: Vec<(String, String, serde_json::Value, String)> = uses
                .into_iter()
                .map(|(id, name, input)| {
                    let key = format!("{}/{calls}", item.source_id);
                    calls += 1;
                    (id, name, input, key)
                })
                .collect();
            let sub_calls = keyed.iter().filter_map(|(id, name, input, key)| match tools.resolve(name) {
                Resolved::SubAgent(agent) if !state.finished => Some(supervisor::run(
                    deps,
                    item,
                    &state.session,
                    record.execution_id,
                    SubAgentCall { tool_use_id: id.clone(), agent, input: input.clone(), key: key.clone() },
                )),
                _ => None,
            });
            let mut sub_results = futures::future::join_all(sub_calls).await.into_iter();
            let mut results = Vec::with_capacity(keyed.len());
            let mut reconfigure = false;
            for (tool_use_id, name, input, key) in keyed {
                let call_started = Instant::now();
                let mut webhook = None;
                let resolved = tools.resolve(&name);
                // Sub-agent results come in call order; take this call's even if it is discarded.
                let sub_result = match resolved {
                    Resolved::SubAgent(_) => Some(sub_results.next().ok_or_else(|| {
                        ExecError::new(ErrorKind::Internal, "a sub-agent result is missing", false)
                    })??),
                    _ => None,
                };
                // A child that ran is recorded (and its tokens counted) even if its answer is
                // discarded because a terminal tool came first.
                let sub_outcome = sub_result.map(|(outcome, child)| {
                    if let Some(child) = child {
                        record.token_usage.add(child.token_usage);
                        record.children.push(child);
                    }
                    outcome
                });
                let outcome = match resolved {
                    _ if state.finished => ToolOutcome {
                        output: json!({"error": "the conversation already left this agent in this turn"}),
                        is_error: true,
                    },
                    Resolved::System(tool) => system_tools::run(deps, item, &mut state, tool, &input, &key).await?,
                    Resolved::Custom(tool) => {
                        let (outcome, audit) =
                            webhook_tools::run(deps, item, &state.session, record.execution_id, tool, &input, &key)
                                .await;
                        webhook = Some(audit);
                        outcome
                    }
                    Resolved::SubAgent(_) => sub_outcome.unwrap_or_else(|| ToolOutcome {
                        output: json!({"error": "the sub-agent did not run"}),
                        is_error: true,
                    }),
                    Resolved::Transition(step) => {
                        let from = state.session.current_step.clone();
                        state.session.current_step = Some(step.step_id.clone());
                        reconfigure = true;
                        info!(from = ?from, to = %step.step_id, "step transition");
                        ToolOutcome { output: json!({ "step": step.step_id, "name": step.name }), is_error: false }
                    }
                    Resolved::LoadSkill => {
                        let outcome = toolbox::load_skill(deps, &tools, &mut state.session, &input).await?;
                        reconfigure |= !outcome.is_error;
                        outcome
                    }
                    Resolved::RefusedTransition(why) => ToolOutcome { output: json!({ "error": why }), is_error: true },
                    Resolved::Unknown => ToolOutcome {
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
            if reconfigure {
                tools = Toolbox::build(deps, agent, &state.session).await?;
                request.system = context::system_prompt(agent, &state.session, &tools);
                request.tools = tools.specs();
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

/// One model call, counted into `usage` and recorded in `calls`; the answer as an assistant
/// message. A retryable failure fails the item (it is redelivered); any other comes back as the
/// error to record.
pub(crate) async fn converse(
    deps: &Deps,
    request: &ModelRequest,
    usage: &mut TokenUsage,
    calls: &mut Vec<ModelCallRecord>,
) -> Result<Result<Message, ExecutionError>, ExecError> {
    let started = Instant::now();
    match deps.model.converse(request).await {
        Ok(response) => {
            usage.add(response.usage);
            calls.push(model_call_record(&response, started));
            Ok(Ok(Message { role: Role::Assistant, content: response.content }))
        }
        Err(e) if e.retryable() => Err(ExecError::new(ErrorKind::Model, e.to_string(), true)),
        Err(e) => Ok(Err(ExecutionError { kind: ErrorKind::Model, message: e.to_string(), retryable: false })),
    }
}

/// The record of one model call.
pub(crate) fn model_call_record(response: &ModelResponse, started: Instant) -> ModelCallRecord {
    ModelCallRecord {
        model: response.model.clone(),
        stop_reason: serde_json::to_value(response.stop_reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        usage: response.usage,
        latency_ms: elapsed_ms(started),
    }
}

pub(crate) fn elapsed_ms(since: Instant) -> u64 {
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
