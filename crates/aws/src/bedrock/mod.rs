//! `BedrockModel`: one attempt at a model call through the Bedrock Converse API, and the sorting
//! of a failure into a [`ModelError`]. The mapping of the engine's messages, tool specs and
//! model config to Converse and back is `wire`'s; putting a streamed answer back together is
//! `stream`'s. Retries are `switchboard_models::Retrying`'s, the same for every provider (the
//! client's own SDK retry is off, so every attempt is counted once).

mod stream;
mod wire;

pub use wire::{from_document, to_document};

use async_trait::async_trait;
use aws_sdk_bedrockruntime::Client;
use aws_sdk_bedrockruntime::config::http::HttpResponse;
use aws_sdk_bedrockruntime::error::SdkError;
use aws_sdk_bedrockruntime::operation::converse::ConverseError;
use aws_sdk_bedrockruntime::operation::converse_stream::ConverseStreamError;
use aws_sdk_bedrockruntime::types::error::ConverseStreamOutputError;
use aws_sdk_bedrockruntime::types::{GuardrailConfiguration, GuardrailStreamConfiguration, GuardrailTrace};
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::event_stream::RawMessage;
use switchboard_engine::{Model, ModelError, ModelRequest, ModelResponse, TextSink};

use stream::Streamed;
use wire::{Parts, from_output};

#[derive(Debug, Clone)]
pub struct BedrockModel {
    client: Client,
}

impl BedrockModel {
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// Sets every field of a request on `$call`, a Converse or a ConverseStream fluent builder: the
/// SDK gives the two the same setters but no common trait, so a new request field is added
/// here once. `$guardrail` is the guardrail configuration type the builder takes (the stream's
/// is a type of its own, with the same setters).
macro_rules! converse_request {
    ($call:expr, $guardrail:ident, $request:expr) => {{
        let request: &ModelRequest = $request;
        let Parts { system, messages, tools, inference } = wire::parts(request)?;
        let guardrail = request.config.guardrail.as_ref().map(|g| {
            $guardrail::builder()
                .guardrail_identifier(&g.id)
                .guardrail_version(&g.version)
                .trace(if g.trace { GuardrailTrace::Enabled } else { GuardrailTrace::Disabled })
                .build()
        });
        $call
            .model_id(&request.model)
            .set_system(system)
            .set_messages(Some(messages))
            .set_tool_config(tools)
            .set_guardrail_config(guardrail)
            .inference_config(inference)
    }};
}

#[async_trait]
impl Model for BedrockModel {
    #[tracing::instrument(skip_all, fields(model = %request.model))]
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let call = converse_request!(self.client.converse(), GuardrailConfiguration, request);
        match call.send().await {
            Ok(out) => from_output(request, &out),
            Err(e) => Err(classify(&e)),
        }
    }

    /// ConverseStream: the text goes to `sink` as it comes; the answer is put back together
    /// from the content blocks' starts and deltas (a tool use's input arrives as JSON text in
    /// pieces), the stop event and the metadata event's usage. An error event mid-stream is
    /// sorted like the call's own errors.
    #[tracing::instrument(skip_all, fields(model = %request.model))]
    async fn converse_streaming(
        &self,
        request: &ModelRequest,
        sink: &dyn TextSink,
    ) -> Result<ModelResponse, ModelError> {
        let call = converse_request!(self.client.converse_stream(), GuardrailStreamConfiguration, request);
        let mut out = call.send().await.map_err(|e| classify_stream(&e))?;
        let mut answer = Streamed::default();
        while let Some(event) = out.stream.recv().await.map_err(|e| classify_stream_event(&e))? {
            answer.read(event, sink)?;
        }
        answer.finish(request)
    }
}

/// ConverseStream's refusals before the stream, sorted as Converse's are.
fn classify_stream(err: &SdkError<ConverseStreamError, HttpResponse>) -> ModelError {
    let text = DisplayErrorContext(err).to_string();
    match err {
        SdkError::ServiceError(service) => match service.err() {
            ConverseStreamError::ThrottlingException(_) => ModelError::throttled(text),
            ConverseStreamError::ServiceUnavailableException(_)
            | ConverseStreamError::InternalServerException(_)
            | ConverseStreamError::ModelNotReadyException(_)
            | ConverseStreamError::ModelStreamErrorException(_) => ModelError::Unavailable(text),
            ConverseStreamError::ModelTimeoutException(_) => ModelError::Timeout,
            ConverseStreamError::AccessDeniedException(_) => ModelError::Unauthorized(text),
            ConverseStreamError::ValidationException(_)
            | ConverseStreamError::ResourceNotFoundException(_)
            | ConverseStreamError::ModelErrorException(_) => ModelError::Rejected(text),
            _ => by_status(service.raw().status().as_u16(), text),
        },
        _ => by_transport(err, text),
    }
}

/// An error event in the middle of a ConverseStream answer.
fn classify_stream_event(err: &SdkError<ConverseStreamOutputError, RawMessage>) -> ModelError {
    let text = DisplayErrorContext(err).to_string();
    match err {
        SdkError::ServiceError(service) => match service.err() {
            ConverseStreamOutputError::ThrottlingException(_) => ModelError::throttled(text),
            ConverseStreamOutputError::ValidationException(_) => ModelError::Rejected(text),
            _ => ModelError::Unavailable(text),
        },
        SdkError::TimeoutError(_) => ModelError::Timeout,
        SdkError::DispatchFailure(d) if d.is_timeout() => ModelError::Timeout,
        _ => ModelError::Unavailable(text),
    }
}

/// A call that failed before the service answered (or with an answer that could not be read),
/// the same for Converse and ConverseStream.
fn by_transport<E, R>(err: &SdkError<E, R>, text: String) -> ModelError {
    match err {
        SdkError::TimeoutError(_) => ModelError::Timeout,
        SdkError::DispatchFailure(d) if d.is_timeout() => ModelError::Timeout,
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => ModelError::Unavailable(text),
        _ => ModelError::Rejected(text),
    }
}

fn by_status(status: u16, text: String) -> ModelError {
    match status {
        429 => ModelError::throttled(text),
        401 | 403 => ModelError::Unauthorized(text),
        s if s >= 500 => ModelError::Unavailable(text),
        _ => ModelError::Rejected(text),
    }
}

fn classify(err: &SdkError<ConverseError>) -> ModelError {
    let text = DisplayErrorContext(err).to_string();
    match err {
        SdkError::ServiceError(service) => match service.err() {
            ConverseError::ThrottlingException(_) => ModelError::throttled(text),
            ConverseError::ServiceUnavailableException(_)
            | ConverseError::InternalServerException(_)
            | ConverseError::ModelNotReadyException(_) => ModelError::Unavailable(text),
            ConverseError::ModelTimeoutException(_) => ModelError::Timeout,
            ConverseError::AccessDeniedException(_) => ModelError::Unauthorized(text),
            ConverseError::ValidationException(_) | ConverseError::ResourceNotFoundException(_) => {
                ModelError::Rejected(text)
            }
            // The model failed on this input; another model may not.
            ConverseError::ModelErrorException(_) => ModelError::Rejected(text),
            _ => by_status(service.raw().status().as_u16(), text),
        },
        _ => by_transport(err, text),
    }
}
