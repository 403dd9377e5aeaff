//! The execution record of a work item: how a blank one starts, what configuration it ran with,
//! how a skipped one reads, and how its actions are shown.

use std::time::Instant;

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde_json::json;
use switchboard_domain::limits::EXECUTION_TTL_DAYS;
use switchboard_domain::recording::{redacted_text, redacted_value};
use switchboard_domain::{
    Action, Agent, Blob, CoalescedMessage, Cost, ErrorKind, ExecutionError, ExecutionId, ExecutionRecord,
    ExecutionStatus, RanWith, Recording, Session, TokenUsage,
};

use crate::model_call::elapsed_ms;
use crate::ports::{Deps, WorkItem};
use crate::tools::Toolbox;

/// A record for `item` in `session` with nothing done yet (status `success` until the turn says
/// otherwise), expiring after the retention period.
pub(crate) fn blank(deps: &Deps, item: &WorkItem, session: &Session, started: Instant) -> ExecutionRecord {
    let input = json!({ "messageId": item.message_id, "text": item.text, "detail": item.detail });
    let mut r = of_request(deps, session, item.source_id.clone(), input, ExecutionStatus::Success, vec![], started);
    r.trigger_id = item.trigger_id;
    r.coalesced = item
        .earlier
        .iter()
        .map(|e| CoalescedMessage { message_id: e.message_id.clone(), source_id: e.source_id.clone() })
        .collect();
    // Every later log line of the execution carries its id (the executor's span declares it).
    tracing::Span::current().record("execution_id", tracing::field::display(r.execution_id));
    r
}

/// The record of something done to a session from outside a turn (a handoff over the API, an
/// operator's claim, reply or end): no model ran, `input` says who asked for what.
pub(crate) fn of_request(
    deps: &Deps,
    session: &Session,
    source_id: String,
    input: serde_json::Value,
    status: ExecutionStatus,
    actions: Vec<Action>,
    started: Instant,
) -> ExecutionRecord {
    let now = deps.clock.now();
    ExecutionRecord {
        tenant_id: session.tenant_id.clone(),
        execution_id: ExecutionId::generate(),
        session_id: session.session_id,
        agent_id: session.agent_id,
        trigger_id: None,
        source_id,
        input,
        status,
        error: None,
        iterations: 0,
        model_calls: vec![],
        tool_calls: vec![],
        actions,
        token_usage: TokenUsage::default(),
        cost_usd: Some(Cost::ZERO),
        price_version: Some(deps.prices.version.clone()),
        ran_with: None,
        latency_ms: elapsed_ms(started),
        created_at: now,
        children: vec![],
        coalesced: vec![],
        coalesced_into: None,
        interrupted_by: None,
        expires_at: now + ChronoDuration::days(EXECUTION_TTL_DAYS),
        hook_calls: vec![],
        approvals: vec![],
        split: session.split.clone(),
    }
}

/// The versions of the configuration `item`'s turn runs with: `agent`'s, the routing trigger's
/// (as routing matched it), and each of the custom tools the turn has.
pub(crate) fn ran_with(item: &WorkItem, agent: &Agent, tools: &Toolbox) -> RanWith {
    let tools = tools.custom.iter().map(|t| (t.tool_id.to_string(), t.version)).collect();
    RanWith { agent: agent.version, trigger: item.trigger_version, tools }
}

/// Takes the recorded content out of `record`'s model calls (its sub-agents' included) for the
/// turn's commit: what `session` does not hold yet, which it holds from `now` on. A session
/// whose oldest held content is as old as the records' retention forgets it all first, so that
/// content is written again before a record could outlive it.
pub(crate) fn take_content(record: &mut ExecutionRecord, session: &mut Session, now: DateTime<Utc>) -> Vec<Blob> {
    let held = &mut session.stored_content;
    held.expire(now, EXECUTION_TTL_DAYS);
    let children = record.children.iter_mut().flat_map(|c| c.model_calls.iter_mut());
    let mut content = Vec::new();
    for call in record.model_calls.iter_mut().chain(children) {
        for blob in std::mem::take(&mut call.content) {
            if !held.holds(&blob.sha256) {
                held.add(&blob.sha256, now);
                content.push(blob);
            }
        }
    }
    content
}

/// `record` as the tenant's `recording` setting keeps it: under `redacted`, the customer's text in
/// its input and every tool call's arguments and result (its sub-agents' included) are replaced
/// by their hashes and lengths, as the model calls' content is.
/// For a record that completes `before` (the same execution, paused for an approval, whose part
/// was redacted already), only what it adds is redacted now, the approvals' arguments included.
pub(crate) fn apply_recording(record: &mut ExecutionRecord, recording: Recording, before: Option<&ExecutionRecord>) {
    if recording != Recording::Redacted {
        return;
    }
    if before.is_none() {
        // The message's text, as the record's input gives it and inside the event's detail.
        for pointer in ["/text", "/detail/message/text"] {
            if let Some(text) = record.input.pointer_mut(pointer)
                && let Some(words) = text.as_str()
            {
                *text = redacted_text(words);
            }
        }
    }
    let (calls, children, approvals) =
        before.map_or((0, 0, 0), |b| (b.tool_calls.len(), b.children.len(), b.approvals.len()));
    let new_children = record.children.iter_mut().skip(children);
    for child in new_children {
        for call in &mut child.tool_calls {
            call.input = redacted_value(&call.input);
            call.output = redacted_value(&call.output);
        }
        child.input = redacted_value(&child.input);
    }
    for call in record.tool_calls.iter_mut().skip(calls) {
        call.input = redacted_value(&call.input);
        call.output = redacted_value(&call.output);
    }
    for approval in record.approvals.iter_mut().skip(approvals) {
        approval.arguments = redacted_value(&approval.arguments);
        approval.edited_arguments = approval.edited_arguments.as_ref().map(redacted_value);
    }
}

/// The record of a message no agent answered, and why.
pub(crate) fn skipped(
    deps: &Deps,
    item: &WorkItem,
    session: &Session,
    reason: &str,
    started: Instant,
) -> ExecutionRecord {
    let mut r = blank(deps, item, session, started);
    r.status = ExecutionStatus::Skipped;
    r.error = Some(ExecutionError::new(ErrorKind::Config, reason));
    r
}

/// The records of the earlier messages of `item`'s burst, which `turn` (its record) answered:
/// status `coalesced`, pointing at it, each with its own message as input.
pub(crate) fn coalesced(
    deps: &Deps,
    item: &WorkItem,
    session: &Session,
    turn: &ExecutionRecord,
) -> Vec<ExecutionRecord> {
    let started = Instant::now();
    item.earlier
        .iter()
        .map(|e| {
            let input = json!({ "messageId": e.message_id, "text": e.text, "detail": e.detail });
            let mut r =
                of_request(deps, session, e.source_id.clone(), input, ExecutionStatus::Coalesced, vec![], started);
            r.trigger_id = e.trigger_id;
            r.coalesced_into = Some(turn.execution_id);
            r.agent_id = turn.agent_id;
            r.session_id = turn.session_id;
            apply_recording(&mut r, e.recording, None);
            r
        })
        .collect()
}

/// Actions of a record, for display.
pub fn describe(action: &Action) -> String {
    match action {
        Action::Reply { text, .. } => format!("reply: {text}"),
        Action::HandoffToHuman { reason, priority, .. } => {
            format!("handoff to human ({}): {reason}", priority.as_str())
        }
        Action::HandoffToAgent { agent_id, reason, .. } => format!("handoff to agent {agent_id}: {reason}"),
        Action::EndConversation { summary } => format!("end: {}", summary.as_deref().unwrap_or("")),
        Action::TriggerFlow { flow_id } => format!("flow requested: {flow_id}"),
    }
}
