//! Operational metrics: what happened, counted where it happens, named once here and exported by
//! each profile its own way (the embedded profile as Prometheus text on `GET /metrics`).

use switchboard_domain::{ExecutionRecord, TenantId};

/// Receives the engine's measurements. Implementations must be cheap and never fail: a metric
/// that cannot be recorded is dropped, never an error for the work itself.
pub trait Metrics: Send + Sync {
    /// An inbound event and how it was routed (`enqueued`, `duplicate`, `no_match`,
    /// `human_owned`, `not_inbound`, `suspended`).
    fn inbound(&self, tenant: &TenantId, outcome: &str);
    /// An execution just committed: its status, latency, model calls (tokens, cost, latency)
    /// and tool calls.
    fn execution(&self, record: &ExecutionRecord);
    /// A model call that failed (`kind`: `throttled`, `unavailable`, `timeout`, `rejected`,
    /// `unauthorized` …), whether a fallback then answered, the item is retried, or the turn
    /// fails.
    fn model_failed(&self, _model: &str, _kind: &str) {}
}

/// Counts nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn inbound(&self, _: &TenantId, _: &str) {}
    fn execution(&self, _: &ExecutionRecord) {}
}
