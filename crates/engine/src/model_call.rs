//! One model-call step, the same for an agent's loop and a sub-agent's: call the model, count
//! its tokens, record the call, and sort its failure. A retryable failure fails the work item (it
//! is redelivered); any other comes back as the error the execution records.

use std::time::Instant;

use switchboard_domain::message::{Message, Role, estimate_tokens};
use switchboard_domain::{
    Blob, CallRequest, CallResponse, ContentRef, ErrorKind, ExecutionError, ModelCallRecord, ModelFailure, Recording,
    TokenUsage,
};
use tracing::Instrument;

use crate::fault::ExecError;
use crate::ports::{Deps, Follower, ModelError, ModelRequest, ModelResponse, TextSink, TurnEvent};

/// Calls the model with `request`, then each of its fallback models in turn while the failure is
/// one that another model may not have (throttled, unavailable, timeout); adds the answer's usage
/// to `usage` and its record (with the models that failed before it) to `calls`; the answer as
/// an assistant message.
///
/// With a `follower`, the call is streamed: it hears the call start, its text as the model writes
/// it, retries, failures and the finished call (see [`TurnEvent`]).
pub(crate) async fn converse(
    deps: &Deps,
    request: &ModelRequest,
    usage: &mut TokenUsage,
    calls: &mut Vec<ModelCallRecord>,
    follower: Option<&Follower>,
) -> Result<Result<Message, ExecutionError>, ExecError> {
    let started = Instant::now();
    let fallbacks = &request.config.fallback_models;
    let mut failures: Vec<ModelFailure> = Vec::new();
    let mut fallback_request;
    let mut current = request;
    let index = calls.len();
    loop {
        let span = chat_span(&current.model);
        let answer = match follower {
            None => deps.model.converse(current).instrument(span.clone()).await,
            Some(follower) => {
                let model = current.model.clone();
                follower.send(TurnEvent::ModelStarted { index, model: model.clone() });
                let sink = Streamed { follower, index, model };
                deps.model.converse_streaming(current, &sink).instrument(span.clone()).await
            }
        };
        record_answer(&span, &answer);
        let error = match answer {
            Ok(response) => {
                usage.add(response.usage);
                let mut record = model_call_record(deps, &response, started);
                record.fallback_from = failures;
                let answer = Message { role: Role::Assistant, content: response.content };
                capture(&mut record, request, &answer);
                if let Some(follower) = follower {
                    follower.send(TurnEvent::ModelFinished {
                        index,
                        model: record.model.clone(),
                        stop_reason: record.stop_reason.clone(),
                        usage: record.usage,
                        latency_ms: record.latency_ms,
                    });
                }
                calls.push(record);
                return Ok(Ok(answer));
            }
            Err(e) => e,
        };
        if let Some(follower) = follower {
            follower.send(TurnEvent::ModelFailed { index, model: current.model.clone(), error: error.to_string() });
        }
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

/// A streamed call's text, on its way to the follower.
struct Streamed<'a> {
    follower: &'a Follower,
    index: usize,
    model: String,
}

impl TextSink for Streamed<'_> {
    fn text(&self, delta: &str) {
        self.follower.send(TurnEvent::TextDelta { index: self.index, text: delta.to_owned() });
    }

    fn restart(&self, error: &ModelError) {
        let (index, model) = (self.index, self.model.clone());
        self.follower.send(TurnEvent::ModelRetried { index, model, error: error.to_string() });
    }
}

/// The span of one model call (each model of a fallback chain gets its own), named and
/// attributed as OpenTelemetry's GenAI conventions say: `chat <model>`, `gen_ai.request.model`,
/// `gen_ai.provider.name` (the reference's provider; a bare id is Bedrock's), and once answered
/// the usage and finish reason, or `error.type`.
fn chat_span(model: &str) -> tracing::Span {
    let provider = match model.split_once(':') {
        Some((provider, _)) => provider,
        None => "aws.bedrock",
    };
    tracing::info_span!(
        "chat",
        otel.name = %format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

fn record_answer(span: &tracing::Span, answer: &Result<ModelResponse, ModelError>) {
    match answer {
        Ok(r) => {
            span.record("gen_ai.response.model", r.model.as_str());
            // As i64: OpenTelemetry has no unsigned integers (a u64 would become a string).
            let input = r.usage.input_tokens + r.usage.cache_read_tokens + r.usage.cache_write_tokens;
            span.record("gen_ai.usage.input_tokens", i64::try_from(input).unwrap_or(i64::MAX));
            span.record("gen_ai.usage.output_tokens", i64::try_from(r.usage.output_tokens).unwrap_or(i64::MAX));
            let reason = serde_json::to_value(r.stop_reason).ok().and_then(|v| v.as_str().map(str::to_owned));
            span.record("gen_ai.response.finish_reasons", reason.unwrap_or_default().as_str());
        }
        Err(e) => {
            span.record("error.type", e.kind());
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// Puts what `request` sent and `answer` said into `record`, as the request's recording setting
/// keeps them: references in the record, the bytes beside it until the turn's commit stores
/// them (see [`switchboard_domain::recording`]).
fn capture(record: &mut ModelCallRecord, request: &ModelRequest, answer: &Message) {
    let recording = request.recording;
    if recording == Recording::Off {
        return;
    }
    let mut content = Vec::with_capacity(request.messages.len() + 3);
    let mut keep = |(reference, blob): (ContentRef, Blob)| {
        content.push(blob);
        reference
    };
    let system = keep(Blob::of_system(&request.system, recording));
    let messages = request.messages.iter().map(|m| keep(Blob::of_message(m, recording))).collect();
    let (mut tools, blob) = Blob::of(&request.tools, 0);
    tools.tokens = estimate_tokens(&String::from_utf8_lossy(&blob.body));
    let tools = keep((tools, blob));
    let message = keep(Blob::of_message(answer, recording));
    record.request = Some(CallRequest {
        model: request.model.clone(),
        system,
        messages,
        tools,
        // Through its text, so that an `f32` reads as written (0.2, not 0.20000000298023224).
        config: serde_json::to_string(&request.config)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default(),
    });
    record.response = Some(CallResponse { message });
    record.content = content;
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
        request: None,
        response: None,
        content: vec![],
    }
}

pub(crate) fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}
