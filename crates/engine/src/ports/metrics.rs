//! Operational metrics: what happened, counted where it happens, named once here and exported by
//! each profile its own way (the embedded profile as Prometheus text on `GET /metrics`).

use switchboard_domain::{ExecutionRecord, LimitName, TenantId, ToolCallRecord};

/// Receives the engine's measurements. Implementations must be cheap and never fail: a metric
/// that cannot be recorded is dropped, never an error for the work itself.
pub trait Metrics: Send + Sync {
    /// An inbound event and how it was routed (`enqueued`, `duplicate`, `no_match`,
    /// `human_owned`, `not_inbound`, `suspended`).
    fn inbound(&self, tenant: &TenantId, outcome: &str);
    /// An execution just committed: its status, latency, model calls (tokens, cost, latency)
    /// and tool calls. A turn paused for an approval commits twice: the pause with the calls made
    /// until then (an `awaiting_approval` execution is not counted as one: it is counted once,
    /// with the status it ends with), and the resumed turn with only the calls it adds
    /// ([`ExecutionRecord::added_since`]).
    fn execution(&self, record: &ExecutionRecord);
    /// A model call that failed (`kind`: `throttled`, `unavailable`, `timeout`, `rejected`,
    /// `unauthorized` …), whether a fallback then answered, the item is retried, or the turn
    /// fails.
    fn model_failed(&self, _model: &str, _kind: &str) {}
    /// A tenant limit refused work: an inbound message, an `invoke`, or a deferred message asked
    /// again (each refusal counts).
    fn limit_hit(&self, _tenant: &TenantId, _limit: LimitName) {}
}

/// Counts nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn inbound(&self, _: &TenantId, _: &str) {}
    fn execution(&self, _: &ExecutionRecord) {}
}

/// Every tool call of an execution (its sub-agents' included) with the labels both profiles count
/// it under: kind (`system`, `webhook`, `sub_agent`) and outcome (a webhook's own outcome —
/// `ok`, `http_error`, `timeout`, `blocked` … —, otherwise `ok` or `error`).
pub fn tool_calls(record: &ExecutionRecord) -> Vec<(&ToolCallRecord, &'static str, &str)> {
    let sub_agents: Vec<&str> = record.children.iter().map(|c| c.tool_use_id.as_str()).collect();
    let own = record.tool_calls.iter().map(|c| labels(c, sub_agents.contains(&c.tool_use_id.as_str())));
    let children = record.children.iter().flat_map(|child| child.tool_calls.iter()).map(|c| labels(c, false));
    own.chain(children).collect()
}

fn labels(call: &ToolCallRecord, sub_agent: bool) -> (&ToolCallRecord, &'static str, &str) {
    let kind = match (&call.webhook, sub_agent) {
        (_, true) => "sub_agent",
        (Some(_), _) => "webhook",
        (None, _) => "system",
    };
    let outcome = match (&call.webhook, call.is_error) {
        (Some(w), _) => w.outcome.as_str(),
        (None, true) => "error",
        (None, false) => "ok",
    };
    (call, kind, outcome)
}
