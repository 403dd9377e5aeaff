//! The embedded profile's metrics: the engine's measurements ([`switchboard_engine::Metrics`])
//! as Prometheus counters and histograms, plus the queue's state read at scrape time, rendered
//! as OpenMetrics text for `GET /metrics`.
//!
//! Tenant is a label where the embedded profile's tenant count bounds it (inbound events,
//! executions, tokens, cost); latency histograms are labelled by status or model only.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use switchboard_domain::{ExecutionRecord, ExecutionStatus, LimitName, ModelCallRecord, TenantId};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Inbound {
    tenant: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    tenant: String,
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecutionLabels {
    tenant: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Status {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelFailureLabels {
    model: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Tokens {
    tenant: String,
    model: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CostLabels {
    tenant: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    kind: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueState {
    state: String,
}

fn latency() -> Histogram {
    // 5 ms to about 41 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// The profile's metrics. Cheap to share; every update is a few atomics.
pub struct PrometheusMetrics {
    registry: Registry,
    inbound: Family<Inbound, Counter>,
    limit_hits: Family<LimitLabels, Counter>,
    executions: Family<ExecutionLabels, Counter>,
    execution_seconds: Family<Status, Histogram, fn() -> Histogram>,
    model_calls: Family<ModelLabels, Counter>,
    model_seconds: Family<ModelLabels, Histogram, fn() -> Histogram>,
    model_failures: Family<ModelFailureLabels, Counter>,
    tokens: Family<Tokens, Counter>,
    cost: Family<CostLabels, Counter<f64, AtomicU64>>,
    unpriced: Family<CostLabels, Counter>,
    tools: Family<ToolLabels, Counter>,
    queue: Family<QueueState, Gauge>,
    queue_oldest: Gauge<f64, AtomicU64>,
}

impl std::fmt::Debug for PrometheusMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusMetrics").finish_non_exhaustive()
    }
}

impl Default for PrometheusMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("switchboard");
        let m = PrometheusMetrics {
            inbound: Family::default(),
            limit_hits: Family::default(),
            executions: Family::default(),
            execution_seconds: Family::new_with_constructor(latency),
            model_calls: Family::default(),
            model_seconds: Family::new_with_constructor(latency),
            model_failures: Family::default(),
            tokens: Family::default(),
            cost: Family::default(),
            unpriced: Family::default(),
            tools: Family::default(),
            queue: Family::default(),
            queue_oldest: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register("inbound_events", "Inbound events by tenant and routing outcome", m.inbound.clone());
        registry.register(
            "limit_hits",
            "Work a tenant limit refused (messages, invokes, deferred messages asked again), by tenant and limit",
            m.limit_hits.clone(),
        );
        registry.register("executions", "Committed executions by tenant and status", m.executions.clone());
        registry.register("execution_duration_seconds", "Execution latency by status", m.execution_seconds.clone());
        registry.register("model_calls", "Model calls that answered, by model", m.model_calls.clone());
        registry.register(
            "model_call_duration_seconds",
            "Model call latency (fallbacks included) by model",
            m.model_seconds.clone(),
        );
        registry.register(
            "model_tokens",
            "Tokens by tenant, model and kind (input, output, cache_read, cache_write)",
            m.tokens.clone(),
        );
        registry.register(
            "model_cost_usd",
            "Cost of priced model calls in US dollars by tenant and model",
            m.cost.clone(),
        );
        registry.register(
            "model_unpriced_calls",
            "Model calls without a price by tenant and model",
            m.unpriced.clone(),
        );
        registry.register(
            "model_failures",
            "Model calls that failed, by model and kind (throttled, unavailable, timeout, ...)",
            m.model_failures.clone(),
        );
        registry.register("tool_calls", "Tool calls by kind (system, webhook, sub_agent) and outcome", m.tools.clone());
        registry.register(
            "queue_items",
            "Work items by state (ready, in_flight, delayed, dead), at scrape time",
            m.queue.clone(),
        );
        registry.register(
            "queue_oldest_item_age_seconds",
            "How long the oldest queued work item has waited (0 when empty), at scrape time",
            m.queue_oldest.clone(),
        );
        PrometheusMetrics { registry, ..m }
    }
}

impl PrometheusMetrics {
    /// Sets the queue gauges (read at scrape time) and renders everything as OpenMetrics text.
    pub fn render(&self, queue: Option<crate::queue::QueueStats>, oldest: Option<std::time::Duration>) -> String {
        if let Some(age) = oldest {
            self.queue_oldest.set(age.as_secs_f64());
        }
        if let Some(q) = queue {
            for (state, n) in [("ready", q.ready), ("in_flight", q.in_flight), ("delayed", q.delayed), ("dead", q.dead)]
            {
                self.queue.get_or_create(&QueueState { state: state.into() }).set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    fn model_call(&self, tenant: &str, call: &ModelCallRecord) {
        let model = ModelLabels { model: call.model.clone() };
        self.model_calls.get_or_create(&model).inc();
        self.model_seconds.get_or_create(&model).observe(call.latency_ms as f64 / 1000.0);
        let u = call.usage;
        for (kind, n) in [
            ("input", u.input_tokens),
            ("output", u.output_tokens),
            ("cache_read", u.cache_read_tokens),
            ("cache_write", u.cache_write_tokens),
        ] {
            if n > 0 {
                let labels = Tokens { tenant: tenant.into(), model: call.model.clone(), kind: kind.into() };
                self.tokens.get_or_create(&labels).inc_by(n);
            }
        }
        let labels = CostLabels { tenant: tenant.into(), model: call.model.clone() };
        match call.cost_usd {
            Some(c) => {
                self.cost.get_or_create(&labels).inc_by(c.dollars());
            }
            None => {
                self.unpriced.get_or_create(&labels).inc();
            }
        }
    }
}

fn status_str(record: &ExecutionRecord) -> String {
    serde_json::to_value(record.status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

impl switchboard_engine::Metrics for PrometheusMetrics {
    fn model_failed(&self, model: &str, kind: &str) {
        self.model_failures.get_or_create(&ModelFailureLabels { model: model.into(), kind: kind.into() }).inc();
    }

    fn inbound(&self, tenant: &TenantId, outcome: &str) {
        self.inbound.get_or_create(&Inbound { tenant: tenant.to_string(), outcome: outcome.into() }).inc();
    }

    fn limit_hit(&self, tenant: &TenantId, limit: LimitName) {
        self.limit_hits.get_or_create(&LimitLabels { tenant: tenant.to_string(), limit: limit.as_str().into() }).inc();
    }

    fn execution(&self, record: &ExecutionRecord) {
        let (tenant, status) = (record.tenant_id.to_string(), status_str(record));
        if record.status != ExecutionStatus::AwaitingApproval {
            self.executions.get_or_create(&ExecutionLabels { tenant: tenant.clone(), status: status.clone() }).inc();
            self.execution_seconds.get_or_create(&Status { status }).observe(record.latency_ms as f64 / 1000.0);
        }
        for call in record.model_calls.iter().chain(record.children.iter().flat_map(|c| c.model_calls.iter())) {
            self.model_call(&tenant, call);
        }
        for (_, kind, outcome) in switchboard_engine::tool_calls(record) {
            self.tools.get_or_create(&ToolLabels { kind: kind.into(), outcome: outcome.into() }).inc();
        }
    }
}
