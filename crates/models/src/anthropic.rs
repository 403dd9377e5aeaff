//! The Anthropic Messages API with tool use. One attempt per call ([`crate::Retrying`] retries).
//!
//! The engine's transcript is already in this shape (content blocks, tool uses in assistant
//! turns, tool results in user turns); blank text blocks are dropped (the API refuses them) and a
//! turn left empty is skipped. Back: `end_turn`/`tool_use`/`max_tokens`/`stop_sequence`/
//! `refusal` map one to one; `thinking` and `redacted_thinking` blocks are dropped (the engine
//! keeps no reasoning, and they cannot be sent back without their signatures in a later turn
//! that has no tool use anyway); a 529 "overloaded" is unavailable.

use async_trait::async_trait;
use reqwest::header::HeaderName;
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::TokenUsage;
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_engine::{Model, ModelError, ModelRequest, ModelResponse, StopReason, TextSink};

use crate::http::JsonClient;
use crate::{Endpoint, float};

/// The API version sent in `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";

/// One Anthropic Messages endpoint.
#[derive(Debug, Clone)]
pub struct AnthropicMessages {
    client: JsonClient,
    url: String,
}

impl AnthropicMessages {
    /// `endpoint.base_url` is the API root (`https://api.anthropic.com`); calls go to
    /// `<base>/v1/messages` with the key in `x-api-key`.
    pub fn new(endpoint: &Endpoint) -> Result<Self, String> {
        let mut headers = vec![(HeaderName::from_static("anthropic-version"), API_VERSION.to_owned())];
        if let Some(key) = &endpoint.api_key {
            headers.push((HeaderName::from_static("x-api-key"), key.expose().to_owned()));
        }
        let client = JsonClient::new("anthropic", endpoint.timeout, headers)?;
        Ok(Self { client, url: format!("{}/v1/messages", endpoint.base_url.trim_end_matches('/')) })
    }
}

#[async_trait]
impl Model for AnthropicMessages {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = request_body(request);
        let answer: MessagesAnswer = self.client.post(&self.url, &body).await?;
        from_answer(request, answer)
    }

    async fn converse_streaming(
        &self,
        request: &ModelRequest,
        sink: &dyn TextSink,
    ) -> Result<ModelResponse, ModelError> {
        let mut body = request_body(request);
        body["stream"] = json!(true);
        let mut answer = Streamed::default();
        self.client.post_events(&self.url, &body, |event| answer.read(&event.data, sink)).await?;
        from_answer(request, answer.finish()?)
    }
}

/// A streamed answer, put back together event by event into the message the non-streamed API
/// answers: `message_start` holds the message without content, each `content_block_start` a
/// block whose `text_delta`s (or `input_json_delta`s: the tool input's JSON text in pieces,
/// parsed at `content_block_stop`) follow, `message_delta` the stop reason and output tokens,
/// `message_stop` the end. An `error` event breaks the call off (`overloaded_error` mid-stream is
/// the usual one).
#[derive(Debug, Default)]
struct Streamed {
    message: Option<Value>,
    /// Each block's tool input JSON text so far.
    partial: Vec<String>,
    done: bool,
}

/// The most content blocks one streamed answer may hold.
const MAX_STREAMED_BLOCKS: usize = 256;

impl Streamed {
    fn read(&mut self, data: &str, sink: &dyn TextSink) -> Result<bool, ModelError> {
        let malformed = |why: &str| ModelError::Unavailable(format!("anthropic: the answer's stream {why}"));
        let event: Value = serde_json::from_str(data).map_err(|_| malformed("holds an event that is not JSON"))?;
        let index = event["index"].as_u64().and_then(|i| usize::try_from(i).ok());
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let mut message = event["message"].clone();
                message["content"] = json!([]);
                self.message = Some(message);
            }
            "content_block_start" => {
                let content = self.content()?;
                let index = index.filter(|i| *i == content.len() && *i < MAX_STREAMED_BLOCKS);
                if index.is_none() {
                    return Err(malformed("starts a block out of order"));
                }
                content.push(event["content_block"].clone());
                self.partial.push(String::new());
            }
            "content_block_delta" => {
                let i = index.ok_or_else(|| malformed("has a delta without its block"))?;
                let delta = &event["delta"];
                let block = self.content()?.get_mut(i).ok_or_else(|| malformed("has a delta for no block"))?;
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => {
                        let piece = delta["text"].as_str().unwrap_or_default();
                        let text = block["text"].as_str().unwrap_or_default().to_owned() + piece;
                        block["text"] = Value::String(text);
                        if !piece.is_empty() {
                            sink.text(piece);
                        }
                    }
                    "input_json_delta" => {
                        if let Some(p) = self.partial.get_mut(i) {
                            p.push_str(delta["partial_json"].as_str().unwrap_or_default());
                        }
                    }
                    // Thinking and its signature: dropped like the non-streamed blocks are.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let i = index.ok_or_else(|| malformed("stops no block"))?;
                let json = self.partial.get(i).cloned().unwrap_or_default();
                let block = self.content()?.get_mut(i).ok_or_else(|| malformed("stops a block it never started"))?;
                if block["type"] == "tool_use" && !json.trim().is_empty() {
                    block["input"] = serde_json::from_str(&json)
                        .map_err(|e| malformed(&format!("holds tool input that is not JSON: {e}")))?;
                }
            }
            "message_delta" => {
                let message = self.message.as_mut().ok_or_else(|| malformed("changes a message it never started"))?;
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    message["stop_reason"] = json!(reason);
                }
                if let Some(Value::Object(usage)) = event.get("usage") {
                    for (k, v) in usage {
                        if !v.is_null() {
                            message["usage"][k] = v.clone();
                        }
                    }
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(false);
            }
            "error" => {
                let e = &event["error"];
                let kind = e["type"].as_str().unwrap_or("error");
                let message = e["message"].as_str().unwrap_or_default();
                return Err(ModelError::Unavailable(format!("anthropic: the stream broke off: {kind}: {message}")));
            }
            // `ping` and whatever comes later.
            _ => {}
        }
        Ok(true)
    }

    fn content(&mut self) -> Result<&mut Vec<Value>, ModelError> {
        self.message.as_mut().and_then(|m| m["content"].as_array_mut()).ok_or_else(|| {
            ModelError::Unavailable("anthropic: the answer's stream has a block before its message".into())
        })
    }

    fn finish(self) -> Result<MessagesAnswer, ModelError> {
        match self.message {
            Some(message) if self.done => serde_json::from_value(message).map_err(|e| {
                ModelError::Unavailable(format!("anthropic: the streamed answer is not the expected message: {e}"))
            }),
            _ => Err(ModelError::Unavailable("anthropic: the answer's stream ended before the answer did".into())),
        }
    }
}

/// The Messages request for `request`.
pub fn request_body(request: &ModelRequest) -> Value {
    let messages: Vec<Value> = request.messages.iter().filter_map(message).collect();
    let config = &request.config;
    let mut body = json!({
        "model": request.model,
        "max_tokens": config.max_tokens,
        "messages": messages,
        "temperature": float(config.temperature),
    });
    // The prompt is cached up to the breakpoint: tools come first, then the system prompt, so
    // one breakpoint on the system prompt (else on the last tool) caches both.
    let cache = json!({"type": "ephemeral"});
    let has_system = !request.system.trim().is_empty();
    if has_system && config.prompt_caching {
        body["system"] = json!([{"type": "text", "text": request.system, "cache_control": cache}]);
    } else if has_system {
        body["system"] = json!(request.system);
    }
    if let Some(top_p) = config.top_p {
        body["top_p"] = json!(float(top_p));
    }
    if !config.stop_sequences.is_empty() {
        body["stop_sequences"] = json!(config.stop_sequences);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        if config.prompt_caching
            && !has_system
            && let Some(last) = body["tools"].as_array_mut().and_then(|t| t.last_mut())
        {
            last["cache_control"] = cache;
        }
    }
    body
}

fn message(m: &Message) -> Option<Value> {
    let blocks: Vec<Value> = m
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if text.trim().is_empty() => None,
            ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
            ContentBlock::ToolUse { tool_use_id, name, input } => {
                Some(json!({"type": "tool_use", "id": tool_use_id, "name": name, "input": input}))
            }
            ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                let content = match content {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Some(json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}))
            }
        })
        .collect();
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    (!blocks.is_empty()).then(|| json!({"role": role, "content": blocks}))
}

#[derive(Debug, Deserialize)]
struct MessagesAnswer {
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

fn from_answer(request: &ModelRequest, answer: MessagesAnswer) -> Result<ModelResponse, ModelError> {
    let mut content = Vec::with_capacity(answer.content.len());
    for block in answer.content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = block.get("text").and_then(Value::as_str).unwrap_or_default();
                if !text.is_empty() {
                    content.push(ContentBlock::Text { text: text.to_owned() });
                }
            }
            Some("tool_use") => {
                let (Some(id), Some(name)) =
                    (block.get("id").and_then(Value::as_str), block.get("name").and_then(Value::as_str))
                else {
                    return Err(ModelError::Unavailable("anthropic: a tool_use block lacks its id or name".into()));
                };
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                content.push(ContentBlock::ToolUse { tool_use_id: id.to_owned(), name: name.to_owned(), input });
            }
            other => tracing::debug!(block = ?other, "dropping a content block the engine does not use"),
        }
    }
    let stop_reason = match answer.stop_reason.as_deref() {
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("refusal") => StopReason::ContentFiltered,
        Some("end_turn") | None => StopReason::EndTurn,
        Some(other) => {
            tracing::debug!(stop_reason = other, "unknown stop_reason; treating it as a finished turn");
            StopReason::EndTurn
        }
    };
    let usage = answer
        .usage
        .map(|u| TokenUsage {
            // Anthropic counts cache reads and writes apart from `input_tokens` already.
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_input_tokens.unwrap_or(0),
            cache_write_tokens: u.cache_creation_input_tokens.unwrap_or(0),
        })
        .unwrap_or_default();
    let model = answer.model.unwrap_or_else(|| request.model.clone());
    Ok(ModelResponse { content, stop_reason, usage, model })
}
