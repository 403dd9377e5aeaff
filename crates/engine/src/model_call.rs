//! One model-call step, the same for an agent's loop and a sub-agent's: call the model, count
//! its tokens, record the call, and sort its failure. A retryable failure fails the work item (it
//! is redelivered); any other comes back as the error the execution records.

use std::time::Instant;

use switchboard_domain::message::{Message, Role};
use switchboard_domain::{ErrorKind, ExecutionError, ModelCallRecord, ModelFailure, TokenUsage};

use crate::fault::ExecError;
use crate::ports::{Deps, ModelRequest, ModelResponse};

/// Calls the model with `request`, then each of its fallback models in turn while the failure is
/// one that another model may not have (throttled, unavailable, timeout); adds the answer's usage
/// to `usage` and its record (with the models that failed before it) to `calls`; the answer as
/// an assistant message.
pub(crate) async fn converse(
    deps: &Deps,
    request: &ModelRequest,
    usage: &mut TokenUsage,
    calls: &mut Vec<ModelCallRecord>,
) -> Result<Result<Message, ExecutionError>, ExecError> {
    let started = Instant::now();
    let fallbacks = &request.config.fallback_models;
    let mut failures: Vec<ModelFailure> = Vec::new();
    let mut fallback_request;
    let mut current = request;
    loop {
        let error = match deps.model.converse(current).await {
            Ok(response) => {
                usage.add(response.usage);
                let mut record = model_call_record(deps, &response, started);
                record.fallback_from = failures;
                calls.push(record);
                return Ok(Ok(Message { role: Role::Assistant, content: response.content }));
            }
            Err(e) => e,
        };
        deps.metrics.model_failed(&current.model, error.kind());
        let next = fallbacks.get(failures.len());
        match next {
            Some(next) if error.falls_back() && !current.past_deadline() => {
                tracing::warn!(model = %current.model, fallback = %next, error = %error, "model failed; trying the next one");
                failures.push(ModelFailure {
                    model: current.model.clone(),
                    error: error.kind().to_owned(),
                    message: error.to_string(),
                });
                fallback_request = current.clone();
                next.clone_into(&mut fallback_request.model);
                current = &fallback_request;
            }
            _ if error.retryable() => return Err(ExecError::new(ErrorKind::Model, error.to_string(), true)),
            _ => {
                return Ok(Err(ExecutionError::new(ErrorKind::Model, error.to_string()).with_reason(error.kind())));
            }
        }
    }
}

/// The record of one model call, priced at the profile's table.
pub(crate) fn model_call_record(deps: &Deps, response: &ModelResponse, started: Instant) -> ModelCallRecord {
    ModelCallRecord {
        cost_usd: deps.prices.cost(&response.model, &response.usage),
        model: response.model.clone(),
        stop_reason: serde_json::to_value(response.stop_reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        usage: response.usage,
        latency_ms: elapsed_ms(started),
        fallback_from: vec![],
        purpose: None,
    }
}

pub(crate) fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}
