//! A model answer's tool calls as one batch: run in order, each under its key, until a call
//! that must wait for a person pauses the turn there (the batch kept for its resumption), a
//! hook stops it, or all have run and their results go back to the model; and the resumption of
//! a paused turn, which runs the rest of its batch — or, cancelled by an operator, none of it.

use std::time::Instant;

use serde_json::json;
use switchboard_domain::event::detail_type;
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_domain::{
    Agent, Approval, ApprovalPolicy, ApprovalStatus, ErrorKind, ExecutionRecord, ExecutionStatus, Session, SystemTool,
};

use super::{Loop, Turn, first_request};
use crate::execute::{context, pause};
use crate::fault::ExecError;
use crate::moves::TurnState;
use crate::ports::{Deps, WorkItem};
use crate::tools::{CallContext, Called, Resolved, ToolCall, ToolOutcome, Toolbox};

/// Resumes the turn that paused in `session` for an approval now decided: the decided call runs
/// (or its denial is its result), then the rest of the paused batch, then the loop goes on, all
/// in the paused execution, whose record so far is `paused_record`.
pub(in crate::execute) async fn resume(
    deps: &Deps,
    item: &WorkItem,
    mut session: Session,
    agent: &Agent,
    paused_record: ExecutionRecord,
    started: Instant,
    deadline: Option<Instant>,
) -> Result<Turn, ExecError> {
    let Some(paused) = session.paused.take() else {
        return Err(ExecError::new(ErrorKind::Internal, "no paused turn to resume", false));
    };
    let snapshot = pause::Snapshot::read(paused.state)?;
    let tools = Toolbox::build(deps, agent, &session).await?;
    let Some(user) = snapshot.new_messages.first().cloned() else {
        return Err(ExecError::new(ErrorKind::Internal, "the paused turn holds no message", false));
    };
    let mut messages = context::messages(agent, &session, &user);
    messages.extend(snapshot.new_messages.iter().skip(1).cloned());
    let request = first_request(item, agent, &session, &tools, messages, deadline);
    let mut record = paused_record;
    let latency_before_ms = record.latency_ms;
    let approval = paused.approval;
    record.approvals.push(approval.clone());
    let mut state = TurnState::new(session);
    state.replies_sent = snapshot.replies_sent;
    state.announce(&snapshot.waiting.key, detail_type::APPROVAL_RESOLVED, pause::resolved_event(&approval));
    let mut run = Loop {
        cx: CallContext { deps, item, execution_id: record.execution_id, deadline },
        agent,
        tools,
        request,
        state,
        record,
        new_messages: snapshot.new_messages,
        calls: snapshot.calls,
        status: ExecutionStatus::MaxIterations,
        failure: None,
        follower: None,
        paused: None,
        latency_before_ms,
    };
    let mut pending = std::collections::VecDeque::from(snapshot.rest);
    pending.push_front((snapshot.waiting, None));
    let batch = Batch {
        pending,
        results: snapshot.results,
        stored: snapshot.stored,
        reconfigure: snapshot.reconfigure,
        decided: Some(approval.clone()),
    };
    if approval.status == ApprovalStatus::Cancelled {
        run.cancel(batch, &approval);
    } else {
        run.run_batch(batch).await?;
        run.go().await?;
    }
    run.finish(started).await
}

/// The calls of one model answer still to run, and the results of those that ran.
pub(super) struct Batch {
    pub pending: std::collections::VecDeque<(ToolCall, Option<ToolOutcome>)>,
    /// What the model reads of the calls that ran, and what the transcript keeps.
    pub results: Vec<ContentBlock>,
    pub stored: Vec<ContentBlock>,
    /// A call changed the agent's tools (a transition, a loaded skill).
    pub reconfigure: bool,
    /// For a resumed batch: the decision on its first call, which waited for it (its
    /// `before_tool` hooks already ran).
    pub decided: Option<switchboard_domain::Approval>,
}

impl Loop<'_> {
    /// Runs the calls of one model turn, each under its key in call order, and feeds the results
    /// back. Sub-agent calls only read the session, so they run first and concurrently; the other
    /// tools run one by one, in order.
    pub(super) async fn run_tools(&mut self, uses: Vec<(String, String, serde_json::Value)>) -> Result<(), ExecError> {
        let calls = self.keyed(uses);
        // A sub-agent call starts with the others' batch, before any other tool runs.
        for call in calls.iter().filter(|c| matches!(self.tools.resolve(&c.name), Resolved::SubAgent(_))) {
            self.announce_tool(call);
        }
        let answers = self.ask_sub_agents(&calls).await?;
        let n = calls.len();
        let batch = Batch {
            pending: calls.into_iter().zip(answers).collect(),
            results: Vec::with_capacity(n),
            stored: Vec::with_capacity(n),
            reconfigure: false,
            decided: None,
        };
        self.run_batch(batch).await
    }

    /// Runs what is left of a batch, in order; a call that must wait for approval pauses the
    /// turn there (the batch is kept for its resumption).
    async fn run_batch(&mut self, mut batch: Batch) -> Result<(), ExecError> {
        let hooked = !self.agent.hooks.is_empty();
        let mut stopped = None;
        while let Some((mut call, answered)) = batch.pending.pop_front() {
            let hooks_apply = hooked && answered.is_none();
            let decided = batch.decided.take();
            if decided.is_none() {
                if hooks_apply && let Some(reason) = self.before_tool(&mut call).await {
                    stopped = Some((reason, Some(call)));
                    break;
                }
                if answered.is_none()
                    && !self.state.finished
                    && let Some((policy, schema)) = self.tools.approval_for(self.agent, &call.name, &call.input)
                {
                    self.pause(call, &policy, schema, batch);
                    return Ok(());
                }
            }
            let called = match decided {
                Some(approval) if approval.status != ApprovalStatus::Approved => pause::refused(call, &approval),
                decided => {
                    if let Some(edited) = decided.and_then(|a| a.edited_arguments) {
                        call.input = edited;
                    }
                    if answered.is_none() {
                        let replies =
                            matches!(self.tools.resolve(&call.name), Resolved::System(SystemTool::SendMessage));
                        if replies && self.interrupted().await? {
                            // Nothing of this answer goes on: the turn drops it (see `finish`).
                            return Ok(());
                        }
                        self.check_still_ours().await?;
                        self.announce_tool(&call);
                    }
                    let shown = hooks_apply.then(|| call.clone());
                    let actions_before = self.state.actions.len();
                    let mut called = self.tools.call(self.cx, &mut self.state, call, answered).await?;
                    self.announce_finished(&called, actions_before);
                    if let Some(shown) = &shown
                        && let Some(reason) = self.after_tool(shown, &mut called).await
                    {
                        stopped = Some((reason, None));
                    }
                    called
                }
            };
            batch.reconfigure |= called.reconfigure;
            let (result, kept) = self.keep(called);
            batch.results.push(result);
            batch.stored.push(kept);
            if stopped.is_some() {
                break;
            }
        }
        self.close_batch(batch, stopped).await
    }

    /// Feeds a batch's results back once its calls ran (or a hook stopped it: the calls not run
    /// say why).
    async fn close_batch(
        &mut self,
        batch: Batch,
        stopped: Option<(String, Option<ToolCall>)>,
    ) -> Result<(), ExecError> {
        let Batch { pending, mut results, mut stored, reconfigure, .. } = batch;
        let stopped_by_hook = stopped.is_some();
        if let Some((reason, unrun)) = stopped {
            // Every call the model made gets a result, so that the transcript never holds a tool
            // call without one (a provider refuses that): the ones not run say why.
            let not_run = json!({ "error": format!("not run: {reason}") });
            for call in unrun.into_iter().chain(pending.into_iter().map(|(call, _)| call)) {
                let block = ContentBlock::ToolResult {
                    tool_use_id: call.tool_use_id,
                    content: not_run.clone(),
                    is_error: true,
                };
                results.push(block.clone());
                stored.push(block);
            }
            self.stop_by_hook(reason);
        }
        self.request.messages.push(Message { role: Role::User, content: results });
        self.new_messages.push(Message { role: Role::User, content: stored });
        if stopped_by_hook {
            return Ok(());
        }
        if self.state.finished {
            self.status = ExecutionStatus::Success;
        } else if reconfigure {
            // A transition or a loaded skill: the next model call already sees the new set.
            self.tools = Toolbox::build(self.cx.deps, self.agent, &self.state.session).await?;
            let window = &self.request.messages;
            self.request.system = context::system_prompt(self.agent, &self.state.session, &self.tools, window);
            self.request.tools = self.tools.specs();
        }
        Ok(())
    }

    /// `call` must wait for a person: the turn pauses before it, keeping `batch` (the calls after
    /// it, the results before it) and the turn's messages for its resumption, and announces
    /// `approval.requested`.
    fn pause(&mut self, call: ToolCall, policy: &ApprovalPolicy, schema: Option<serde_json::Value>, batch: Batch) {
        let deps = self.cx.deps;
        let session = &self.state.session;
        let approval = pause::request(deps, session, self.agent.agent_id, self.cx.execution_id, &call, policy);
        self.state.announce(&call.key, detail_type::APPROVAL_REQUESTED, pause::requested_event(&approval));
        let snapshot = pause::Snapshot {
            item: self.cx.item.clone(),
            new_messages: std::mem::take(&mut self.new_messages),
            results: batch.results,
            stored: batch.stored,
            waiting: call,
            rest: batch.pending.into_iter().collect(),
            calls: self.calls,
            reconfigure: batch.reconfigure,
            replies_sent: self.state.replies_sent,
            schema,
        };
        self.paused = Some(pause::Pause { approval, snapshot });
        self.status = ExecutionStatus::AwaitingApproval;
    }

    /// An operator cancelled the paused turn (`approval`): none of the batch's calls runs —
    /// each gets the cancellation as its result, so that the transcript holds no call without
    /// one — no model is asked again, and the conversation goes to a human.
    fn cancel(&mut self, batch: Batch, approval: &Approval) {
        let Batch { pending, mut results, mut stored, .. } = batch;
        for (call, _) in pending {
            let (result, kept) = self.keep(pause::refused(call, approval));
            results.push(result);
            stored.push(kept);
        }
        self.request.messages.push(Message { role: Role::User, content: results });
        self.new_messages.push(Message { role: Role::User, content: stored });
        let by = approval.decided_by.as_deref().unwrap_or("an operator");
        let reason = format!("turn cancelled by {by}: {}", approval.reason.as_deref().unwrap_or("no reason given"));
        let key = format!("{}/cancelled", self.cx.item.source_id);
        let before = self.state.actions.len();
        self.state.hand_off_to_human_for(self.cx.deps, &reason, by, &key);
        self.announce_actions(before);
        self.status = ExecutionStatus::Success;
    }

    /// The model's tool calls of one answer, each given its idempotency key `<source>/<n>` in call
    /// order.
    fn keyed(&mut self, uses: Vec<(String, String, serde_json::Value)>) -> Vec<ToolCall> {
        let source = &self.cx.item.source_id;
        let calls: Vec<ToolCall> = uses
            .into_iter()
            .enumerate()
            .map(|(i, (tool_use_id, name, input))| ToolCall {
                tool_use_id,
                name,
                input,
                key: format!("{source}/{}", self.calls + i),
            })
            .collect();
        self.calls += calls.len();
        calls
    }

    /// Records a finished call; its result as the model reads it and as the transcript keeps it.
    fn keep(&mut self, called: Called) -> (ContentBlock, ContentBlock) {
        let result = |content| ContentBlock::ToolResult {
            tool_use_id: called.record.tool_use_id.clone(),
            content,
            is_error: called.outcome.is_error,
        };
        let kept = result(called.stored.unwrap_or_else(|| called.outcome.output.clone()));
        let read = result(called.outcome.output);
        let mut done = called.record;
        done.after_model_call = u32::try_from(self.record.model_calls.len()).unwrap_or(u32::MAX);
        self.record.tool_calls.push(done);
        (read, kept)
    }
}
