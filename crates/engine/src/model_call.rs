//! One model-call step, the same for an agent's loop and a sub-agent's: call the model, count
//! its tokens, record the call, and sort its failure. A retryable failure fails the work item (it
//! is redelivered); any other comes back as the error the execution records.

use std::time::Instant;

use switchboard_domain::message::{Message, Role};
use switchboard_domain::{ErrorKind, ExecutionError, ModelCallRecord, TokenUsage};

use crate::fault::ExecError;
use crate::ports::{Deps, ModelRequest, ModelResponse};

/// Calls the model with `request`, adding its usage to `usage` and its record to `calls`; the
/// answer as an assistant message.
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
