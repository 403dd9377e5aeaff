//! The execution record of a work item: how a blank one starts, what configuration it ran with,
//! how a skipped one reads, and how its actions are shown.

use std::time::Instant;

use chrono::Duration as ChronoDuration;
use serde_json::json;
use switchboard_domain::limits::EXECUTION_TTL_DAYS;
use switchboard_domain::{
    Action, Agent, Cost, ErrorKind, ExecutionError, ExecutionId, ExecutionRecord, ExecutionStatus, RanWith, Session,
    TokenUsage,
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
        expires_at: now + ChronoDuration::days(EXECUTION_TTL_DAYS),
    }
}

/// The versions of the configuration `item`'s turn runs with: `agent`'s, the routing trigger's
/// (as routing matched it), and each of the custom tools the turn has.
pub(crate) fn ran_with(item: &WorkItem, agent: &Agent, tools: &Toolbox) -> RanWith {
    let tools = tools.custom.iter().map(|t| (t.tool_id.to_string(), t.version)).collect();
    RanWith { agent: agent.version, trigger: item.trigger_version, tools }
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

/// Actions of a record, for display.
pub fn describe(action: &Action) -> String {
    match action {
        Action::Reply { text, .. } => format!("reply: {text}"),
        Action::HandoffToHuman { reason, priority } => format!("handoff to human ({}): {reason}", priority.as_str()),
        Action::HandoffToAgent { agent_id, reason, .. } => format!("handoff to agent {agent_id}: {reason}"),
        Action::EndConversation { summary } => format!("end: {}", summary.as_deref().unwrap_or("")),
        Action::TriggerFlow { flow_id } => format!("flow requested: {flow_id}"),
    }
}
