//! The OpenAI-compatible Chat Completions API with tool calls: OpenAI itself, Azure OpenAI's v1
//! endpoint, Ollama, vLLM, LM Studio, llama.cpp's server, OpenRouter. One attempt per call
//! ([`crate::Retrying`] retries).
//!
//! Mapping from the engine's Converse-shaped transcript: the system prompt is the first
//! `system` message; an assistant turn's text is its `content` and its tool uses its
//! `tool_calls` (arguments as JSON text); each tool result becomes a `tool` message, before any
//! text of the same user turn. Back: `finish_reason` `stop`/`tool_calls`/`length`/
//! `content_filter` map to end turn / tool use / max tokens / content filtered, a `refusal` is
//! content filtered with its text, and tool-call arguments that are not a JSON object make the
//! answer malformed (unavailable, so that another attempt is made).

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderName};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::TokenUsage;
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_engine::{Model, ModelError, ModelRequest, ModelResponse, StopReason, TextSink};

use crate::http::JsonClient;
use crate::{Endpoint, float};

/// One OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiChat {
    client: JsonClient,
    url: String,
}

impl OpenAiChat {
    /// `endpoint.base_url` is the API root holding `/chat/completions` (`https://api.openai.com/v1`,
    /// `http://127.0.0.1:11434/v1`); the key, if any, is sent as a bearer token.
    pub fn new(provider: &'static str, endpoint: &Endpoint) -> Result<Self, String> {
        let headers: Vec<(HeaderName, String)> =
            endpoint.api_key.iter().map(|k| (AUTHORIZATION, format!("Bearer {}", k.expose()))).collect();
        let client = JsonClient::new(provider, endpoint.timeout, headers)?;
        Ok(Self { client, url: format!("{}/chat/completions", endpoint.base_url.trim_end_matches('/')) })
    }
}

#[async_trait]
impl Model for OpenAiChat {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = request_body(request);
        let answer: ChatCompletion = self.client.post(&self.url, &body).await?;
        from_answer(request, answer)
    }

    async fn converse_streaming(
        &self,
        request: &ModelRequest,
        sink: &dyn TextSink,
    ) -> Result<ModelResponse, ModelError> {
        let mut body = request_body(request);
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let mut answer = Streamed::default();
        self.client.post_events(&self.url, &body, |event| answer.read(&event.data, sink)).await?;
        from_answer(request, answer.finish()?)
    }
}

/// A streamed answer, put together chunk by chunk: text and refusal as they come, tool calls by
/// their index (id and name in the first piece, the arguments' text in pieces), the finish
/// reason from the last choice chunk and the usage from the chunk after it
/// (`stream_options.include_usage`). It ends with `data: [DONE]`.
#[derive(Debug, Default)]
struct Streamed {
    content: String,
    refusal: String,
    calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
    done: bool,
}

#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// The most tool calls one streamed answer may hold (an index past it is malformed).
const MAX_STREAMED_CALLS: usize = 128;

impl Streamed {
    /// Reads one event's data; `false` once the stream said it is done.
    fn read(&mut self, data: &str, sink: &dyn TextSink) -> Result<bool, ModelError> {
        let malformed = |why: String| ModelError::Unavailable(format!("openai: the answer's stream {why}"));
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(false);
        }
        let chunk: Chunk =
            serde_json::from_str(data).map_err(|e| malformed(format!("holds a chunk that is not JSON: {e}")))?;
        if let Some(error) = chunk.error {
            let message = error["message"].as_str().unwrap_or("an error");
            return Err(ModelError::Unavailable(format!("openai: the stream broke off: {message}")));
        }
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        for choice in chunk.choices {
            if choice.finish_reason.is_some() {
                self.finish_reason = choice.finish_reason;
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                sink.text(&text);
                self.content.push_str(&text);
            }
            if let Some(refusal) = delta.refusal {
                self.refusal.push_str(&refusal);
            }
            for piece in delta.tool_calls {
                if piece.index >= MAX_STREAMED_CALLS {
                    return Err(malformed(format!("names tool call {} (at most {MAX_STREAMED_CALLS})", piece.index)));
                }
                while self.calls.len() <= piece.index {
                    let function = FunctionCall { name: String::new(), arguments: String::new() };
                    self.calls.push(ToolCall { id: String::new(), function });
                }
                let call = &mut self.calls[piece.index];
                if let Some(id) = piece.id {
                    call.id = id;
                }
                if let Some(f) = piece.function {
                    if let Some(name) = f.name {
                        call.function.name.push_str(&name);
                    }
                    if let Some(arguments) = f.arguments {
                        call.function.arguments.push_str(&arguments);
                    }
                }
            }
        }
        Ok(true)
    }

    /// The answer as the non-streamed API would have given it.
    fn finish(self) -> Result<ChatCompletion, ModelError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ModelError::Unavailable("openai: the answer's stream ended before the answer did".into()));
        }
        if let Some(call) = self.calls.iter().find(|c| c.id.is_empty() || c.function.name.is_empty()) {
            return Err(ModelError::Unavailable(format!(
                "openai: a streamed tool call came without its id or name ({:?})",
                call.function.name
            )));
        }
        let message =
            AnswerMessage { content: Some(self.content), refusal: Some(self.refusal), tool_calls: self.calls };
        Ok(ChatCompletion {
            choices: vec![Choice { message, finish_reason: self.finish_reason }],
            usage: self.usage,
            model: self.model,
        })
    }
}

/// The Chat Completions request for `request`.
pub fn request_body(request: &ModelRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.trim().is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for m in &request.messages {
        push_message(&mut messages, m);
    }
    let config = &request.config;
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "max_tokens": config.max_tokens,
        "temperature": float(config.temperature),
    });
    if let Some(top_p) = config.top_p {
        body["top_p"] = json!(float(top_p));
    }
    if !config.stop_sequences.is_empty() {
        body["stop"] = json!(config.stop_sequences);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                }})
            })
            .collect();
    }
    body
}

fn push_message(out: &mut Vec<Value>, m: &Message) {
    let text = joined_text(&m.content);
    match m.role {
        Role::Assistant => {
            let calls: Vec<Value> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { tool_use_id, name, input } => Some(json!({
                        "id": tool_use_id, "type": "function",
                        "function": {"name": name, "arguments": input.to_string()},
                    })),
                    _ => None,
                })
                .collect();
            let mut message = json!({"role": "assistant", "content": (!text.is_empty()).then_some(text)});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            out.push(message);
        }
        Role::User => {
            for block in &m.content {
                if let ContentBlock::ToolResult { tool_use_id, content, is_error } = block {
                    let content = match content {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    // No error flag in this API: say it in the text.
                    let content = if *is_error { format!("Error: {content}") } else { content };
                    out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
                }
            }
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
        }
    }
}

/// Non-blank text blocks joined by blank lines.
fn joined_text(content: &[ContentBlock]) -> String {
    let texts: Vec<&str> = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n\n")
}

#[derive(Debug, Deserialize)]
struct ChatCompletion {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    message: AnswerMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct AnswerMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
}

#[derive(Debug, Deserialize)]
struct ToolCall {
    id: String,
    function: FunctionCall,
}

#[derive(Debug, Deserialize)]
struct FunctionCall {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Debug, Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

fn from_answer(request: &ModelRequest, answer: ChatCompletion) -> Result<ModelResponse, ModelError> {
    let usage = answer
        .usage
        .map(|u| {
            // OpenAI's prompt tokens include the cached ones; the record counts them apart.
            let cached = u.prompt_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0).min(u.prompt_tokens);
            TokenUsage {
                input_tokens: u.prompt_tokens - cached,
                output_tokens: u.completion_tokens,
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            }
        })
        .unwrap_or_default();
    let Some(choice) = answer.choices.into_iter().next() else {
        return Err(ModelError::Unavailable("openai: the answer holds no choices".into()));
    };
    let message = choice.message;
    let mut content = Vec::new();
    if let Some(refusal) = message.refusal.filter(|r| !r.trim().is_empty()) {
        content.push(ContentBlock::Text { text: refusal });
        let model = answer.model.unwrap_or_else(|| request.model.clone());
        return Ok(ModelResponse { content, stop_reason: StopReason::ContentFiltered, usage, model });
    }
    if let Some(text) = message.content.filter(|t| !t.is_empty()) {
        content.push(ContentBlock::Text { text });
    }
    for call in message.tool_calls {
        let arguments = if call.function.arguments.trim().is_empty() { "{}" } else { &call.function.arguments };
        let input: Value = serde_json::from_str(arguments).map_err(|e| {
            ModelError::Unavailable(format!("openai: tool call {} has arguments that are not JSON: {e}", call.id))
        })?;
        if !input.is_object() {
            return Err(ModelError::Unavailable(format!(
                "openai: tool call {} has arguments that are not a JSON object",
                call.id
            )));
        }
        content.push(ContentBlock::ToolUse { tool_use_id: call.id, name: call.function.name, input });
    }
    let has_tool_use = content.iter().any(|b| matches!(b, ContentBlock::ToolUse { .. }));
    let stop_reason = match choice.finish_reason.as_deref() {
        // Some servers say "stop" even when they return tool calls; the calls decide.
        _ if has_tool_use => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFiltered,
        Some("stop" | "eos" | "end_turn") | None => StopReason::EndTurn,
        Some(other) => {
            tracing::debug!(finish_reason = other, "unknown finish_reason; treating it as a finished turn");
            StopReason::EndTurn
        }
    };
    let model = answer.model.unwrap_or_else(|| request.model.clone());
    Ok(ModelResponse { content, stop_reason, usage, model })
}
