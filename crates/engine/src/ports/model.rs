//! One model call in the Bedrock Converse shape, whatever the provider.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchboard_domain::message::{ContentBlock, Message};
use switchboard_domain::{ModelConfig, TokenUsage};

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
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

/// One model call (Bedrock Converse shape). Adapters retry throttling and 5xx themselves; an
/// error that reaches the engine is final for this attempt.
#[async_trait]
pub trait Model: Send + Sync {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError>;
}

/// A model call that failed after the adapter's own retries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("model throttled: {0}")]
    Throttled(String),
    #[error("model unavailable: {0}")]
    Unavailable(String),
    #[error("model timed out")]
    Timeout,
    /// The request itself is wrong (bad model id, invalid tool schema, …); retrying cannot help.
    #[error("model rejected the request: {0}")]
    Rejected(String),
}

impl ModelError {
    pub fn retryable(&self) -> bool {
        !matches!(self, ModelError::Rejected(_))
    }
}
