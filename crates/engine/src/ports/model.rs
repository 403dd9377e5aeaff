//! One model call in the Bedrock Converse shape, whatever the provider.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchboard_domain::message::{ContentBlock, Message};
use switchboard_domain::{ModelConfig, Recording, TokenUsage};

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub config: ModelConfig,
    /// The execution's deadline: no attempt may outlast it, and no retry starts that would.
    #[serde(skip)]
    pub deadline: Option<Instant>,
    /// What the call's record keeps of it (the tenant's setting).
    #[serde(skip)]
    pub recording: Recording,
}

impl ModelRequest {
    /// Whether the execution's deadline has passed.
    pub fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The request's input tokens, estimated on the high side (system prompt, messages and tool
    /// definitions; see [`switchboard_domain::message::estimate_tokens`]).
    pub fn estimated_input_tokens(&self) -> u64 {
        use switchboard_domain::message::estimate_tokens;
        let messages: u64 = self.messages.iter().map(|m| u64::from(m.estimated_tokens())).sum();
        let tools: u64 = self
            .tools
            .iter()
            .map(|t| {
                u64::from(estimate_tokens(&t.name))
                    + u64::from(estimate_tokens(&t.description))
                    + u64::from(estimate_tokens(&t.input_schema.to_string()))
            })
            .sum();
        u64::from(estimate_tokens(&self.system)) + messages + tools
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    ContentFiltered,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    pub usage: TokenUsage,
    /// The model that answered (a fallback may differ from the one asked for).
    pub model: String,
}

/// One model call (Bedrock Converse shape): one attempt. Retries, backoff and `Retry-After` are
/// the same for every provider and live in `switchboard_models::Retrying`, which wraps adapters.
#[async_trait]
pub trait Model: Send + Sync {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError>;

    /// [`Model::converse`], with the answer's text handed to `sink` as the model writes it. An
    /// adapter whose provider streams overrides it; this one hands each text block over whole
    /// once the answer is in. The response is the same either way.
    async fn converse_streaming(
        &self,
        request: &ModelRequest,
        sink: &dyn TextSink,
    ) -> Result<ModelResponse, ModelError> {
        let response = self.converse(request).await?;
        for block in &response.content {
            if let ContentBlock::Text { text } = block
                && !text.is_empty()
            {
                sink.text(text);
            }
        }
        Ok(response)
    }
}

/// Where a streamed model call's text goes.
pub trait TextSink: Send + Sync {
    /// The next piece of the answer's text.
    fn text(&self, delta: &str);
    /// The attempt failed with `error` and another is about to be made: the text so far is void.
    fn restart(&self, error: &ModelError);
}

/// Why a model call failed, sorted so that callers can tell what another attempt (or another
/// model) may change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Too many requests or tokens: later may work; `retry_after` is the provider's hint.
    #[error("model throttled: {message}")]
    Throttled { message: String, retry_after: Option<Duration> },
    /// 5xx, overloaded, connection failed, malformed output: later or elsewhere may work.
    #[error("model unavailable: {0}")]
    Unavailable(String),
    #[error("model timed out")]
    Timeout,
    /// The request itself is wrong (bad model id, invalid tool schema, …); retrying cannot help.
    #[error("model rejected the request: {0}")]
    Rejected(String),
    /// The credentials were refused or are missing; retrying cannot help.
    #[error("model refused the credentials: {0}")]
    Unauthorized(String),
}

impl ModelError {
    pub fn throttled(message: impl Into<String>) -> Self {
        ModelError::Throttled { message: message.into(), retry_after: None }
    }

    /// A short name for records: `throttled`, `unavailable`, `timeout`, `rejected`,
    /// `unauthorized`.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::Throttled { .. } => "throttled",
            ModelError::Unavailable(_) => "unavailable",
            ModelError::Timeout => "timeout",
            ModelError::Rejected(_) => "rejected",
            ModelError::Unauthorized(_) => "unauthorized",
        }
    }

    /// Whether another model of the agent's fallback chain should be tried: the same failures
    /// that may pass with time (a refused request or key would be refused by the next model too,
    /// or is a setup mistake to fix, not to hide).
    pub fn falls_back(&self) -> bool {
        self.retryable()
    }

    /// Whether the same call may succeed later.
    pub fn retryable(&self) -> bool {
        matches!(self, ModelError::Throttled { .. } | ModelError::Unavailable(_) | ModelError::Timeout)
    }
}
