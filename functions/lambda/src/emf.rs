//! The engine's metrics as CloudWatch Embedded Metric Format: one JSON object per line on
//! stdout, which CloudWatch Logs turns into metrics in the `Switchboard` namespace. Dimensions are
//! bounded (routing outcome, execution status, model); the tenant and agent ids go along as
//! plain properties, so Logs Insights can break a metric down by tenant without a metric per
//! tenant.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use switchboard_domain::{ExecutionRecord, ExecutionStatus, LimitName, TenantId};
use switchboard_engine::Metrics;

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "Switchboard";

/// Where EMF lines go: stdout in a function, a buffer in tests.
type Sink = Arc<Mutex<dyn Write + Send>>;

/// Writes EMF lines.
#[derive(Clone)]
pub struct EmfMetrics {
    sink: Sink,
    /// The function's name (`AWS_LAMBDA_FUNCTION_NAME`): the one dimension of the alarm metrics
    /// (`LimitHits`, `ModelThrottles`), so an alarm can name it.
    function: String,
}

impl std::fmt::Debug for EmfMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmfMetrics").finish_non_exhaustive()
    }
}

impl EmfMetrics {
    pub fn stdout() -> Self {
        Self::to(Arc::new(Mutex::new(std::io::stdout())))
    }

    /// Lines into `sink` (tests).
    pub fn to(sink: Arc<Mutex<dyn Write + Send>>) -> Self {
        let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "local".to_owned());
        Self { sink, function }
    }

    /// One EMF object: `metrics` are `(name, unit, value)`, `dimensions` both a dimension set
    /// and top-level members, `properties` top-level members only.
    fn emit(&self, dimensions: &[(&str, String)], metrics: &[(&str, &str, f64)], properties: &[(&str, Value)]) {
        let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let mut line = json!({
            "_aws": {
                "Timestamp": u64::try_from(millis).unwrap_or(u64::MAX),
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [dimensions.iter().map(|(k, _)| *k).collect::<Vec<_>>()],
                    "Metrics": metrics.iter().map(|(name, unit, _)| json!({ "Name": name, "Unit": unit })).collect::<Vec<_>>(),
                }]
            }
        });
        for (k, v) in dimensions {
            line[*k] = json!(v);
        }
        for (name, _, value) in metrics {
            line[*name] = json!(value);
        }
        for (k, v) in properties {
            line[*k] = v.clone();
        }
        if let Ok(mut out) = self.sink.lock() {
            // A metric that cannot be written is dropped; the work it measures goes on.
            let _ = writeln!(out, "{line}");
        }
    }
}

impl Metrics for EmfMetrics {
    fn model_failed(&self, model: &str, kind: &str) {
        if kind == "throttled" {
            // By function only, for one alarm over every model.
            let props = [("Model", json!(model))];
            self.emit(&[("FunctionName", self.function.clone())], &[("ModelThrottles", "Count", 1.0)], &props);
        }
    }

    fn inbound(&self, tenant: &TenantId, outcome: &str) {
        self.emit(
            &[("Outcome", outcome.to_owned())],
            &[("InboundEvents", "Count", 1.0)],
            &[("TenantId", json!(tenant))],
        );
    }

    fn limit_hit(&self, tenant: &TenantId, limit: LimitName) {
        // By function only, for one alarm over every tenant and limit.
        let outcome = match limit {
            LimitName::TokensPerDay => "budget_exceeded",
            LimitName::InvocationsPerMinute | LimitName::ConcurrentSessions => "rate_limited",
        };
        let props = [("TenantId", json!(tenant)), ("Outcome", json!(outcome)), ("Limit", json!(limit.as_str()))];
        self.emit(&[("FunctionName", self.function.clone())], &[("LimitHits", "Count", 1.0)], &props);
    }

    fn execution(&self, record: &ExecutionRecord) {
        let status =
            serde_json::to_value(record.status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        let ids = [
            ("TenantId", json!(record.tenant_id)),
            ("AgentId", json!(record.agent_id)),
            ("ExecutionId", json!(record.execution_id)),
        ];
        if record.status != ExecutionStatus::AwaitingApproval {
            self.emit(
                &[("Status", status)],
                &[("Executions", "Count", 1.0), ("ExecutionLatency", "Milliseconds", record.latency_ms as f64)],
                &ids,
            );
        }
        let calls = record.model_calls.iter().chain(record.children.iter().flat_map(|c| c.model_calls.iter()));
        for call in calls {
            let u = call.usage;
            let mut metrics = vec![
                ("ModelCalls", "Count", 1.0),
                ("ModelLatency", "Milliseconds", call.latency_ms as f64),
                ("InputTokens", "Count", u.input_tokens as f64),
                ("OutputTokens", "Count", u.output_tokens as f64),
                ("CacheReadTokens", "Count", u.cache_read_tokens as f64),
                ("CacheWriteTokens", "Count", u.cache_write_tokens as f64),
            ];
            match call.cost_usd {
                Some(c) => metrics.push(("CostUsd", "None", c.dollars())),
                None => metrics.push(("UnpricedCalls", "Count", 1.0)),
            }
            self.emit(&[("Model", call.model.clone())], &metrics, &ids);
        }
        // Tool and webhook calls by kind and outcome (the tool's name, which tenants choose, is a
        // property).
        for (call, kind, outcome) in switchboard_engine::tool_calls(record) {
            let mut props = ids.to_vec();
            props.push(("ToolName", json!(call.name)));
            self.emit(
                &[("ToolKind", kind.to_owned()), ("Outcome", outcome.to_owned())],
                &[("ToolCalls", "Count", 1.0), ("ToolLatency", "Milliseconds", call.latency_ms as f64)],
                &props,
            );
        }
    }
}
