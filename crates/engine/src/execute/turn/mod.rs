//! One agent turn for one inbound message: a router agent's classification, then the loop of
//! model calls and tool calls until a final answer, a terminal tool, a failure or
//! `maxIterations`, then the turn's bookkeeping (transcript, `maxTurns`, status, the
//! `execution.failed` event). Tool calls go through the toolbox's one dispatcher; a supervisor's
//! sub-agent calls of one model turn run first, concurrently.

use std::time::Instant;

use serde_json::json;
use switchboard_domain::HandoffCause;
use switchboard_domain::event::detail_type;
use switchboard_domain::hook::HookPoint;
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_domain::{
    Agent, AgentType, ErrorKind, ExecutionError, ExecutionRecord, ExecutionStatus, HandoffBehavior, OutboundEvent,
    Priority, Session, SessionStatus,
};
use tracing::warn;

mod batch;

pub(in crate::execute) use batch::resume;

use super::{context, history, interrupt, pause, record, summary};
use crate::fault::ExecError;
use crate::hooks::{self, Point};
use crate::model_call::{converse, elapsed_ms};
use crate::moves::TurnState;
use crate::patterns::{router, supervisor};
use crate::ports::{Deps, Follower, ModelRequest, TurnEvent, WorkItem};
use crate::tools::{CallContext, Called, Resolved, ToolCall, ToolOutcome, Toolbox};

/// The reason a spent `maxSessionTokens` gives (the record's `error.reason`).
const SESSION_BUDGET: &str = "maxSessionTokens";

/// The reason the tenant's `tokensPerDay` gives when it is reached mid-turn.
const DAY_BUDGET: &str = "tokensPerDay";

/// What a turn leaves to commit.
pub(super) struct Turn {
    pub session: Session,
    pub new_session: Option<Session>,
    /// What the turn announces (committed with it).
    pub events: Vec<OutboundEvent>,
    pub record: ExecutionRecord,
}

/// Runs the turn of `agent` in `session` for `item`.
pub(super) async fn run(
    deps: &Deps,
    item: &WorkItem,
    mut session: Session,
    agent: &Agent,
    started: Instant,
    deadline: Option<Instant>,
    follower: Option<&Follower>,
) -> Result<Turn, ExecError> {
    let mut record = record::blank(deps, item, &session, started);
    if let Some(f) = follower {
        f.send(TurnEvent::ExecutionStarted {
            execution_id: record.execution_id,
            session_id: session.session_id,
            agent_id: agent.agent_id,
            conversation_id: item.conversation_id.clone(),
        });
    }
    history::load(deps, item, agent, &mut session).await;
    let session_tokens = session.tokens_used;
    let fits = |r: &ExecutionRecord, next: u64| spent_budget(agent, r, session_tokens, next).is_none();
    summary::refresh(deps, agent, &mut session, &mut record, deadline, item.recording, fits).await;
    let user = item.user_message();
    let tools = Toolbox::build(deps, agent, &session).await?;
    record.ran_with = Some(record::ran_with(item, agent, &tools));
    let messages = context::messages(agent, &session, &user);
    let request = first_request(item, agent, &session, &tools, messages, deadline);
    let mut run = Loop {
        cx: CallContext { deps, item, execution_id: record.execution_id, deadline },
        agent,
        tools,
        request,
        state: TurnState::new(session),
        record,
        new_messages: vec![user],
        calls: 0,
        status: ExecutionStatus::MaxIterations,
        failure: None,
        follower,
        paused: None,
        latency_before_ms: 0,
    };
    if agent.agent_type == AgentType::Router {
        let routed =
            router::route(run.cx, agent, &mut run.state, &mut run.record, run.request.messages.clone()).await?;
        (run.status, run.failure) = (routed.status, routed.failure);
        run.new_messages.extend(routed.said);
    }
    run.go().await?;
    run.finish(started).await
}

/// The turn's first model request (or a resumed turn's next): `messages` with the agent's
/// prompt, tools and configuration.
fn first_request(
    item: &WorkItem,
    agent: &Agent,
    session: &Session,
    tools: &Toolbox,
    messages: Vec<Message>,
    deadline: Option<Instant>,
) -> ModelRequest {
    ModelRequest {
        model: agent.model.clone(),
        system: context::system_prompt(agent, session, tools, &messages),
        messages,
        tools: tools.specs(),
        config: agent.model_config.clone(),
        deadline,
        recording: item.recording,
    }
}

/// The agent's token budget a model call of about `next` input tokens would pass, given what the
/// execution (`record`) and the session before it (`session_tokens`) used: its name and why.
fn spent_budget(
    agent: &Agent,
    record: &ExecutionRecord,
    session_tokens: u64,
    next: u64,
) -> Option<(&'static str, String)> {
    let budget = &agent.token_budget;
    let used = record.token_usage;
    let input = used.input_tokens + used.cache_read_tokens + used.cache_write_tokens;
    let session = session_tokens + used.total();
    if let Some(max) = budget.max_input_tokens
        && input + next > max
    {
        Some((
            "maxInputTokens",
            format!(
                "the next model call (about {next} input tokens, {input} used) would pass the agent's {max} input tokens per execution"
            ),
        ))
    } else if let Some(max) = budget.max_output_tokens
        && used.output_tokens >= max
    {
        Some(("maxOutputTokens", format!("the agent's {max} output tokens per execution are spent")))
    } else if let Some(max) = budget.max_session_tokens
        && session + next > max
    {
        Some((
            SESSION_BUDGET,
            format!(
                "the next model call (about {next} input tokens) would pass the agent's {max} tokens per session ({session} used)"
            ),
        ))
    } else {
        None
    }
}

/// Where the loop stands.
struct Loop<'a> {
    cx: CallContext<'a>,
    agent: &'a Agent,
    tools: Toolbox,
    request: ModelRequest,
    state: TurnState,
    record: ExecutionRecord,
    /// What this turn adds to the session's transcript.
    new_messages: Vec<Message>,
    /// Tool calls so far: the `<n>` of each call's idempotency key `<source>/<n>`.
    calls: usize,
    /// `MaxIterations` while the loop goes on.
    status: ExecutionStatus,
    failure: Option<ExecutionError>,
    /// Who follows the turn as it runs, if anyone.
    follower: Option<&'a Follower>,
    /// Set when a tool call waits for approval: the turn pauses here.
    paused: Option<pause::Pause>,
    /// What the execution took before it paused, for a resumed turn (0 otherwise).
    latency_before_ms: u64,
}

impl Loop<'_> {
    /// Where the agent's hooks for `at` are called from (at a tool point, for `tool`: its name
    /// and call id).
    fn point<'p>(&self, at: HookPoint, tool: Option<(&'p str, &'p str)>) -> Point<'p>
    where
        Self: 'p,
    {
        Point { cx: self.cx, agent: self.agent, at, tool, after_model_call: self.record.model_calls.len() }
    }

    /// A hook stopped the turn (or failed with `onError: stop`): it ends failed, and the agent's
    /// `onFailure` answers the customer.
    fn stop_by_hook(&mut self, reason: String) {
        warn!(reason = %reason, "a hook stopped the turn");
        self.fail(ExecutionError::new(ErrorKind::Hook, reason).with_reason("hook"));
    }

    /// The loop of model calls until a final answer, a terminal tool, a failure, a pause for
    /// approval or `maxIterations`.
    async fn go(&mut self) -> Result<(), ExecError> {
        while self.status == ExecutionStatus::MaxIterations
            && !self.state.finished
            && self.record.iterations < self.agent.max_iterations
        {
            if self.request.past_deadline() {
                self.time_out("the execution deadline came before a final answer");
                break;
            }
            if self.over_budget() {
                break;
            }
            self.step().await?;
        }
        Ok(())
    }

    /// One model call, then its tool calls or its final answer.
    async fn step(&mut self) -> Result<(), ExecError> {
        self.record.iterations += 1;
        if !self.agent.hooks.is_empty() {
            let point = self.point(HookPoint::BeforeModel, None);
            if let Some(reason) = hooks::run(&point, &mut self.record.hook_calls, &mut self.request).await {
                self.stop_by_hook(reason);
                return Ok(());
            }
        }
        let deps = self.cx.deps;
        let (usage, calls) = (&mut self.record.token_usage, &mut self.record.model_calls);
        let answer = converse(deps, &self.request, usage, calls, self.follower).await;
        let mut assistant = match answer {
            Ok(Ok(message)) => message,
            // Past the deadline, whatever failed: the turn stops here, recorded, so that a
            // redelivery does not run (and send) it again.
            Err(ExecError { message, .. }) | Ok(Err(ExecutionError { message, .. }))
                if self.request.past_deadline() =>
            {
                self.time_out(&format!("the execution deadline came during a model call ({message})"));
                return Ok(());
            }
            Ok(Err(e)) => {
                self.fail(e);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if !self.agent.hooks.is_empty() {
            let point = self.point(HookPoint::AfterModel, None);
            let answer = &mut hooks::Answer(&mut assistant);
            if let Some(reason) = hooks::run(&point, &mut self.record.hook_calls, answer).await {
                // The answer is dropped whole: none of its tool calls runs or stays unanswered.
                self.stop_by_hook(reason);
                return Ok(());
            }
        }
        let uses = assistant.tool_uses();
        let text = assistant.text();
        self.request.messages.push(assistant.clone());
        self.new_messages.push(assistant);
        if uses.is_empty() { self.final_answer(&text).await } else { self.run_tools(uses).await }
    }

    /// Whether the agent's token budgets leave room for the next model call (estimated input
    /// before it is made); if not, the turn stops with `budget_exceeded` naming the budget. If
    /// so, the call asks for no more output than the execution's output budget has left.
    fn over_budget(&mut self) -> bool {
        let budget = &self.agent.token_budget;
        let day = self.cx.item.day_tokens;
        if budget.is_unlimited() && day.is_none() {
            return false;
        }
        let next = self.request.estimated_input_tokens();
        let spent = self.record.token_usage.total();
        if let Some(day) = day
            && day.would_pass(self.cx.deps.clock.now().date_naive(), spent, next)
        {
            warn!(budget = DAY_BUDGET, "the tenant's tokens per day would be passed; the turn stops");
            self.status = ExecutionStatus::BudgetExceeded;
            let why = format!(
                "the next model call (about {next} input tokens, {spent} used by this turn) would pass the tenant's tokens per day ({} were left when the message was admitted)",
                day.left
            );
            self.failure = Some(ExecutionError::new(ErrorKind::Limit, why).with_reason(DAY_BUDGET));
            return true;
        }
        if let Some((reason, why)) = spent_budget(self.agent, &self.record, self.state.session.tokens_used, next) {
            warn!(budget = reason, "token budget reached; the turn stops");
            self.status = ExecutionStatus::BudgetExceeded;
            self.failure = Some(ExecutionError::new(ErrorKind::Limit, why).with_reason(reason));
            return true;
        }
        if let Some(max) = budget.max_output_tokens {
            let left = u32::try_from(max - self.record.token_usage.output_tokens).unwrap_or(u32::MAX);
            self.request.config.max_tokens = self.agent.model_config.max_tokens.min(left);
        }
        false
    }

    fn time_out(&mut self, why: &str) {
        warn!(reason = why, "execution timed out");
        self.status = ExecutionStatus::Timeout;
        self.failure = Some(ExecutionError::new(ErrorKind::Model, why).with_reason("deadline"));
    }

    fn fail(&mut self, error: ExecutionError) {
        self.status = ExecutionStatus::Failed;
        self.failure = Some(error);
    }

    /// Stops the turn if its session is no longer as the turn read it: an operator cancelled the
    /// turn or handed the conversation on while the model was asked. Read before each reply and
    /// tool call, so that nothing more is said or done once a person has the conversation; the
    /// executor then runs the item again, which finds the session moved. A session this turn
    /// starts (version 0, not stored yet) cannot have been moved, and is not read.
    async fn check_still_ours(&self) -> Result<(), ExecError> {
        let session = &self.state.session;
        if session.version == 0 {
            return Ok(());
        }
        let stored = self.cx.deps.sessions.session_version(&session.tenant_id, session.session_id).await?;
        match stored {
            Some(v) if v == session.version => Ok(()),
            _ => Err(ExecError::moved(format!(
                "session {} moved while its turn ran (version {} read, {stored:?} now)",
                session.session_id, session.version
            ))),
        }
    }

    /// Whether a newer message of the conversation stops the turn before the reply it would
    /// send now (the agent interrupts, see [`interrupt`]): then it says and does nothing more.
    async fn interrupted(&mut self) -> Result<bool, ExecError> {
        if self.state.replies_sent > 0 || self.state.new_session.is_some() {
            return Ok(false);
        }
        let (cx, session) = (self.cx, &self.state.session);
        let Some(by) = interrupt::newer(cx.deps, cx.item, self.agent, session, None).await? else {
            return Ok(false);
        };
        tracing::info!(by = %by.message_id, "a newer message is queued: the turn stops before its reply");
        self.state.interrupted_by = Some(by);
        self.state.finished = true;
        self.status = ExecutionStatus::Interrupted;
        Ok(true)
    }

    /// A final answer is the reply, unless the agent already replied with the tool.
    async fn final_answer(&mut self, text: &str) -> Result<(), ExecError> {
        if self.state.replies_sent == 0 && !text.trim().is_empty() {
            if self.interrupted().await? {
                return Ok(());
            }
            self.check_still_ours().await?;
            let key = format!("{}/{}", self.cx.item.source_id, self.calls);
            let before = self.state.actions.len();
            let replied = self.state.reply(self.cx.deps, text, &key).await?;
            self.announce_actions(before);
            if let Ok((_, sent)) = &replied
                && sent != text
            {
                // Sent before in other words (this work is running again): the transcript
                // keeps what the customer read.
                self.reword_final_answer(sent);
            }
            if let Err(refused) = replied {
                warn!(error = %refused, "final answer could not be sent");
                // Worded as the tool's error result would be.
                let message = json!({ "error": refused.to_string() }).to_string();
                self.fail(ExecutionError::new(ErrorKind::Tool, message));
                return Ok(());
            }
        }
        self.status = ExecutionStatus::Success;
        Ok(())
    }

    /// Puts `sent` in place of the text of this turn's newest assistant message (its final
    /// answer).
    fn reword_final_answer(&mut self, sent: &str) {
        let newest = self.new_messages.iter_mut().rev().find(|m| m.role == Role::Assistant);
        if let Some(message) = newest {
            message.content.retain(|b| !matches!(b, ContentBlock::Text { .. }));
            message.content.insert(0, ContentBlock::Text { text: sent.to_owned() });
        }
    }

    /// The agent's `before_tool` hooks for `call`, which may change its arguments; `Some(reason)`
    /// when one stopped the turn.
    async fn before_tool(&mut self, call: &mut ToolCall) -> Option<String> {
        let (name, id) = (call.name.clone(), call.tool_use_id.clone());
        let point = self.point(HookPoint::BeforeTool, Some((&name, &id)));
        hooks::run(&point, &mut self.record.hook_calls, call).await
    }

    /// The agent's `after_tool` hooks for the call `shown`, which may change the result the model
    /// reads (and the transcript keeps); `Some(reason)` when one stopped the turn.
    async fn after_tool(&mut self, shown: &ToolCall, called: &mut Called) -> Option<String> {
        let point = self.point(HookPoint::AfterTool, Some((&shown.name, &shown.tool_use_id)));
        let is_error = called.outcome.is_error;
        let mut ran = hooks::Ran { call: shown, output: &mut called.outcome.output, is_error, changed: false };
        let stopped = hooks::run(&point, &mut self.record.hook_calls, &mut ran).await;
        if ran.changed {
            called.stored = None;
        }
        stopped
    }

    /// Tells the follower, if any, that a call finished, and of the actions it took (from
    /// `actions_before`).
    fn announce_finished(&self, called: &Called, actions_before: usize) {
        if let Some(f) = self.follower {
            let r = &called.record;
            f.send(TurnEvent::ToolFinished {
                tool_use_id: r.tool_use_id.clone(),
                name: r.name.clone(),
                is_error: r.is_error,
                outcome: r.webhook.as_ref().map(|w| w.outcome.clone()),
                latency_ms: r.latency_ms,
            });
            self.announce_actions(actions_before);
        }
    }

    /// Tells the follower, if any, that `call` starts.
    fn announce_tool(&self, call: &ToolCall) {
        if let Some(f) = self.follower {
            f.send(TurnEvent::ToolStarted { tool_use_id: call.tool_use_id.clone(), name: call.name.clone() });
        }
    }

    /// Tells the follower, if any, of the turn's actions from `from` on.
    fn announce_actions(&self, from: usize) {
        if let Some(f) = self.follower {
            for action in self.state.actions.iter().skip(from) {
                f.send(TurnEvent::Action { action: action.clone() });
            }
        }
    }

    /// Runs the sub-agent calls among `calls` concurrently; their answers, in call order (`None`
    /// for the other calls). Each child that ran is recorded and its tokens counted, even if its
    /// answer is then discarded because a terminal tool came first.
    async fn ask_sub_agents(&mut self, calls: &[ToolCall]) -> Result<Vec<Option<ToolOutcome>>, ExecError> {
        let (cx, tools, session) = (self.cx, &self.tools, &self.state.session);
        let runs = calls.iter().map(|call| async move {
            match tools.resolve(&call.name) {
                Resolved::SubAgent(agent) => Some(supervisor::run(cx, session, agent, call).await),
                _ => None,
            }
        });
        let mut answers = Vec::with_capacity(calls.len());
        for ran in futures::future::join_all(runs).await {
            let Some(ran) = ran else {
                answers.push(None);
                continue;
            };
            let (outcome, child) = ran?;
            if let Some(child) = child {
                self.record.token_usage.add(child.token_usage);
                self.record.children.push(child);
            }
            answers.push(Some(outcome));
        }
        Ok(answers)
    }

    /// The turn's bookkeeping once the loop has stopped.
    async fn finish(mut self, started: Instant) -> Result<Turn, ExecError> {
        let deps = self.cx.deps;
        if let Some(paused) = self.paused.take() {
            return self.pause_turn(paused, started);
        }
        let interrupted = self.state.interrupted_by.is_some();
        if interrupted && self.new_messages.last().is_some_and(|m| m.role == Role::Assistant) {
            // The answer that would have replied: the next turn answers in its place.
            self.new_messages.pop();
        }
        let s = &mut self.state.session;
        s.append_transcript(std::mem::take(&mut self.new_messages));
        s.tokens_used += self.record.token_usage.total();
        if interrupted {
            // Not a turn of the conversation yet: its message waits for the next one's answer.
            s.interrupted.push(interrupt::own_message(self.cx.item));
        } else {
            s.turn_count += 1;
            self.record.coalesced.append(&mut s.interrupted);
        }
        // The agent's `maxSessionTokens` stopped the turn: its `handoffBehavior` applies.
        let session_budget_spent = self.failure.as_ref().and_then(|f| f.reason.as_deref()) == Some(SESSION_BUDGET);
        if s.is_active() && session_budget_spent {
            let reason = format!("the agent's budget of tokens per session is spent ({} used)", s.tokens_used);
            self.apply_handoff_behavior(reason, HandoffCause::SessionBudget);
        } else if s.is_active()
            && !matches!(self.status, ExecutionStatus::Failed | ExecutionStatus::Interrupted)
            && s.turn_count >= self.agent.max_turns
        {
            let reason = format!("the agent reached its limit of {} turns", self.agent.max_turns);
            self.apply_handoff_behavior(reason, HandoffCause::MaxTurns);
        }
        if self.status == ExecutionStatus::MaxIterations {
            let why = format!("no final answer after {} model calls", self.agent.max_iterations);
            self.failure = Some(ExecutionError::new(ErrorKind::Model, why));
        }
        // Stopped short with the customer unanswered and the agent still on the conversation
        // (an interrupted turn's customer is answered by the next turn).
        if !matches!(self.status, ExecutionStatus::Success | ExecutionStatus::Interrupted)
            && self.state.replies_sent == 0
            && self.state.session.is_active()
        {
            self.answer_failure().await?;
        }
        let record = &mut self.record;
        // A turn that stopped short keeps its status; the session's fate is in its actions.
        record.status = match (self.status, self.state.session.status) {
            (ExecutionStatus::Success, SessionStatus::HandedOff) => ExecutionStatus::HandedOff,
            (ExecutionStatus::Success, SessionStatus::Completed) => ExecutionStatus::Ended,
            (s, _) => s,
        };
        record.error = self.failure.take();
        record.interrupted_by = self.state.interrupted_by.take();
        if matches!(record.status, ExecutionStatus::Failed | ExecutionStatus::Timeout) {
            let key = format!("{}/failed", self.cx.item.source_id);
            self.state.announce(&key, detail_type::EXECUTION_FAILED, failed_event(record));
        }
        record.actions.append(&mut self.state.actions);
        record.session_id = self.state.session.session_id;
        if !self.agent.hooks.is_empty() {
            // Observed only: the turn is decided (a stop or a failure is recorded, not obeyed).
            let point = Point {
                cx: self.cx,
                agent: self.agent,
                at: HookPoint::TurnEnd,
                tool: None,
                after_model_call: record.model_calls.len(),
            };
            let turn = json!({ "status": record.status, "actions": record.actions, "error": record.error });
            hooks::run(&point, &mut record.hook_calls, &mut hooks::Ended(turn)).await;
        }
        record.cost_usd = record.total_cost();
        record.latency_ms = self.latency_before_ms + elapsed_ms(started);
        self.state.session.updated_at = deps.clock.now();
        self.state.session.version += 1;
        let state = self.state;
        Ok(Turn { session: state.session, new_session: state.new_session, events: state.events, record: self.record })
    }

    /// The turn's bookkeeping when it pauses for an approval: the session keeps the paused turn
    /// (its transcript, turn count and tokens are counted once it is done) and the record so far
    /// is `awaiting_approval`.
    fn pause_turn(mut self, paused: pause::Pause, started: Instant) -> Result<Turn, ExecError> {
        let record = &mut self.record;
        record.status = ExecutionStatus::AwaitingApproval;
        record.error = None;
        record.actions.append(&mut self.state.actions);
        record.session_id = self.state.session.session_id;
        record.cost_usd = record.total_cost();
        record.latency_ms = self.latency_before_ms + elapsed_ms(started);
        let session = &mut self.state.session;
        session.paused = Some(Box::new(paused.into_paused_turn(&self.cx.item.source_id)?));
        session.updated_at = self.cx.deps.clock.now();
        session.version += 1;
        let state = self.state;
        Ok(Turn { session: state.session, new_session: state.new_session, events: state.events, record: self.record })
    }

    /// The turn stopped short of answering: the agent's `onFailure` answers the customer.
    async fn answer_failure(&mut self) -> Result<(), ExecError> {
        let why = self.failure.as_ref().map_or("", |f| f.message.as_str());
        let reason = format!("the agent could not answer ({}): {why}", self.status.as_str());
        let key = format!("{}/on-failure", self.cx.item.source_id);
        let before = self.state.actions.len();
        self.state.answer_failure(self.cx.deps, &self.agent.on_failure, &reason, &key).await?;
        self.announce_actions(before);
        Ok(())
    }

    /// `maxTurns` reached or the session's token budget spent: the agent's `handoffBehavior`
    /// decides.
    fn apply_handoff_behavior(&mut self, reason: String, cause: HandoffCause) {
        let (deps, agent) = (self.cx.deps, self.agent);
        // `<source>/max-turns`, `<source>/session-budget`: the keys these moves always had
        let key = format!("{}/{}", self.cx.item.source_id, cause.as_str().replace('_', "-"));
        let before = self.state.actions.len();
        match agent.handoff_behavior {
            HandoffBehavior::Escalate => self.state.hand_off_to_human(deps, &reason, Priority::Normal, cause, &key),
            HandoffBehavior::End => self.state.end(deps, Some(reason), &key),
        }
        self.announce_actions(before);
    }
}

/// The detail of `execution.failed` for a record that ended `failed` or `timeout` (besides the
/// session's ids).
pub(super) fn failed_event(record: &ExecutionRecord) -> serde_json::Value {
    let message = record.error.as_ref().map(|e| e.message.clone()).unwrap_or_default();
    json!({ "executionId": record.execution_id, "status": record.status.as_str(), "error": message })
}
