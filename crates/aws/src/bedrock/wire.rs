//! The Converse wire mapping: the engine's messages, tool specs and model config as a request's
//! parts, a Converse answer as a [`ModelResponse`], JSON as Smithy documents and back. It sends
//! nothing; the adapter in `bedrock` does.

use std::collections::HashMap;

use aws_sdk_bedrockruntime::operation::converse::ConverseOutput;
use aws_sdk_bedrockruntime::types::{
    CachePointBlock, CachePointType, CitationGeneratedContent, ContentBlock as BContent, ConversationRole,
    ConverseOutput as BOutput, InferenceConfiguration, Message as BMessage, StopReason as BStop, SystemContentBlock,
    Tool, ToolConfiguration, ToolInputSchema, ToolResultBlock, ToolResultContentBlock, ToolResultStatus,
    ToolSpecification, ToolUseBlock,
};
use aws_smithy_types::{Document, Number};
use switchboard_domain::TokenUsage;
use switchboard_domain::message::{ContentBlock, Message, Role};
use switchboard_engine::{ModelError, ModelRequest, ModelResponse, StopReason};

/// A request's fields, built once for Converse and ConverseStream alike (all but the guardrail,
/// whose type differs between the two).
pub(super) struct Parts {
    pub(super) system: Option<Vec<SystemContentBlock>>,
    pub(super) messages: Vec<BMessage>,
    pub(super) tools: Option<ToolConfiguration>,
    pub(super) inference: InferenceConfiguration,
}

pub(super) fn parts(request: &ModelRequest) -> Result<Parts, ModelError> {
    let messages = request.messages.iter().map(to_bedrock_message).collect::<Result<Vec<_>, _>>()?;
    let tools = tool_config(request)?;
    let inference = InferenceConfiguration::builder()
        .max_tokens(i32::try_from(request.config.max_tokens).unwrap_or(i32::MAX))
        .temperature(request.config.temperature)
        .set_top_p(request.config.top_p)
        .set_stop_sequences((!request.config.stop_sequences.is_empty()).then(|| request.config.stop_sequences.clone()))
        .build();
    let mut system = Vec::new();
    if !request.system.trim().is_empty() {
        system.push(SystemContentBlock::Text(request.system.clone()));
        if request.config.prompt_caching {
            system.push(SystemContentBlock::CachePoint(cache_point()?));
        }
    }
    Ok(Parts { system: (!system.is_empty()).then_some(system), messages, tools, inference })
}

/// A prompt-cache checkpoint: everything before it (system prompt, tool definitions) is cached.
fn cache_point() -> Result<CachePointBlock, ModelError> {
    CachePointBlock::builder().r#type(CachePointType::Default).build().map_err(rejected)
}

fn rejected(e: impl std::fmt::Display) -> ModelError {
    ModelError::Rejected(format!("building the Converse request: {e}"))
}

fn to_bedrock_message(m: &Message) -> Result<BMessage, ModelError> {
    let role = match m.role {
        Role::User => ConversationRole::User,
        Role::Assistant => ConversationRole::Assistant,
    };
    let has_other = m.content.iter().any(|b| !matches!(b, ContentBlock::Text { .. }));
    let mut content = Vec::with_capacity(m.content.len());
    for block in &m.content {
        content.push(match block {
            // Converse refuses blank text blocks; beside a tool block one adds nothing.
            ContentBlock::Text { text } if text.trim().is_empty() && has_other => continue,
            ContentBlock::Text { text } => BContent::Text(text.clone()),
            ContentBlock::ToolUse { tool_use_id, name, input } => BContent::ToolUse(
                ToolUseBlock::builder()
                    .tool_use_id(tool_use_id)
                    .name(name)
                    .input(to_document(input))
                    .build()
                    .map_err(rejected)?,
            ),
            ContentBlock::ToolResult { tool_use_id, content, is_error } => BContent::ToolResult(
                ToolResultBlock::builder()
                    .tool_use_id(tool_use_id)
                    .content(tool_result_content(content))
                    .status(if *is_error { ToolResultStatus::Error } else { ToolResultStatus::Success })
                    .build()
                    .map_err(rejected)?,
            ),
        });
    }
    BMessage::builder().role(role).set_content(Some(content)).build().map_err(rejected)
}

/// Text stays text; an object goes as JSON; anything else (array, number, …) as its JSON text,
/// since some models accept only objects in a `json` block.
fn tool_result_content(v: &serde_json::Value) -> ToolResultContentBlock {
    match v {
        serde_json::Value::String(s) => ToolResultContentBlock::Text(s.clone()),
        serde_json::Value::Object(_) => ToolResultContentBlock::Json(to_document(v)),
        other => ToolResultContentBlock::Text(other.to_string()),
    }
}

fn tool_config(request: &ModelRequest) -> Result<Option<ToolConfiguration>, ModelError> {
    if request.tools.is_empty() {
        // Converse refuses an empty tool list.
        return Ok(None);
    }
    let mut tools = Vec::with_capacity(request.tools.len());
    for t in &request.tools {
        let spec = ToolSpecification::builder()
            .name(&t.name)
            .description(&t.description)
            .input_schema(ToolInputSchema::Json(to_document(&t.input_schema)))
            .build()
            .map_err(rejected)?;
        tools.push(Tool::ToolSpec(spec));
    }
    if request.config.prompt_caching {
        tools.push(Tool::CachePoint(cache_point()?));
    }
    ToolConfiguration::builder().set_tools(Some(tools)).build().map(Some).map_err(rejected)
}

/// A content block's kind, for the log of what was dropped.
fn block_kind(b: &BContent) -> &'static str {
    match b {
        BContent::ReasoningContent(_) => "reasoning",
        BContent::Image(_) => "image",
        BContent::Document(_) => "document",
        BContent::Video(_) => "video",
        BContent::GuardContent(_) => "guard_content",
        _ => "other",
    }
}

pub(super) fn from_output(request: &ModelRequest, out: &ConverseOutput) -> Result<ModelResponse, ModelError> {
    let mut content = Vec::new();
    let mut dropped = Vec::new();
    if let Some(BOutput::Message(message)) = out.output() {
        for block in message.content() {
            match block {
                BContent::Text(text) => content.push(ContentBlock::Text { text: text.clone() }),
                BContent::ToolUse(u) => content.push(ContentBlock::ToolUse {
                    tool_use_id: u.tool_use_id().to_owned(),
                    name: u.name().to_owned(),
                    input: from_document(u.input()),
                }),
                // The text of an answer with citations is the answer; the citations (sources
                // of a document the engine never sends) are dropped.
                BContent::CitationsContent(c) => {
                    for part in c.content() {
                        if let CitationGeneratedContent::Text(text) = part {
                            content.push(ContentBlock::Text { text: text.clone() });
                        }
                    }
                }
                // Reasoning is dropped: the engine never asks for it, keeps no reasoning in the
                // transcript, and a reply must not show it to the customer.
                other => dropped.push(block_kind(other)),
            }
        }
    }
    if !dropped.is_empty() {
        tracing::debug!(blocks = ?dropped, "Converse content the engine does not use was dropped");
    }
    let stop_reason = stop_reason(out.stop_reason())?;
    let usage = out.usage().map(token_usage).unwrap_or_default();
    Ok(ModelResponse { content, stop_reason, usage, model: request.model.clone() })
}

pub(super) fn stop_reason(stop: &BStop) -> Result<StopReason, ModelError> {
    Ok(match stop {
        BStop::EndTurn => StopReason::EndTurn,
        BStop::ToolUse => StopReason::ToolUse,
        BStop::MaxTokens | BStop::ModelContextWindowExceeded => StopReason::MaxTokens,
        BStop::StopSequence => StopReason::StopSequence,
        BStop::ContentFiltered | BStop::GuardrailIntervened => StopReason::ContentFiltered,
        BStop::MalformedModelOutput | BStop::MalformedToolUse => {
            return Err(ModelError::Unavailable(format!("the model's output was malformed ({stop})")));
        }
        other => {
            tracing::warn!(stop_reason = %other, "unknown Converse stop reason; treating it as end_turn");
            StopReason::EndTurn
        }
    })
}

/// Converse counts cache reads and writes apart from `inputTokens` already.
pub(super) fn token_usage(u: &aws_sdk_bedrockruntime::types::TokenUsage) -> TokenUsage {
    let count = |n: Option<i32>| n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    TokenUsage {
        input_tokens: count(Some(u.input_tokens())),
        output_tokens: count(Some(u.output_tokens())),
        cache_read_tokens: count(u.cache_read_input_tokens()),
        cache_write_tokens: count(u.cache_write_input_tokens()),
    }
}

/// JSON to a Smithy document. Integers stay integers (non-negative as `PosInt`, negative as
/// `NegInt`); everything else numeric is a float.
pub fn to_document(v: &serde_json::Value) -> Document {
    match v {
        serde_json::Value::Null => Document::Null,
        serde_json::Value::Bool(b) => Document::Bool(*b),
        serde_json::Value::Number(num) => Document::Number(if let Some(u) = num.as_u64() {
            Number::PosInt(u)
        } else if let Some(i) = num.as_i64() {
            Number::NegInt(i)
        } else {
            Number::Float(num.as_f64().unwrap_or(0.0))
        }),
        serde_json::Value::String(s) => Document::String(s.clone()),
        serde_json::Value::Array(a) => Document::Array(a.iter().map(to_document).collect()),
        serde_json::Value::Object(o) => {
            Document::Object(o.iter().map(|(k, v)| (k.clone(), to_document(v))).collect::<HashMap<_, _>>())
        }
    }
}

/// A Smithy document to JSON. A float JSON cannot hold (NaN, infinity) becomes `null`.
pub fn from_document(d: &Document) -> serde_json::Value {
    match d {
        Document::Null => serde_json::Value::Null,
        Document::Bool(b) => serde_json::Value::Bool(*b),
        Document::Number(Number::PosInt(u)) => serde_json::Value::from(*u),
        Document::Number(Number::NegInt(i)) => serde_json::Value::from(*i),
        Document::Number(Number::Float(f)) => {
            serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, serde_json::Value::Number)
        }
        Document::String(s) => serde_json::Value::String(s.clone()),
        Document::Array(a) => serde_json::Value::Array(a.iter().map(from_document).collect()),
        Document::Object(o) => {
            serde_json::Value::Object(o.iter().map(|(k, v)| (k.clone(), from_document(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_round_trip_every_kind_of_json_number() {
        let v = json!({
            "zero": 0, "big": u64::MAX, "negative": -42, "most_negative": i64::MIN, "float": 0.25,
            "exp": 1.5e300, "nested": [{"a": null, "b": true, "c": "x"}, [], {}]
        });
        assert_eq!(from_document(&to_document(&v)), v);
        assert!(matches!(to_document(&json!(-1)), Document::Number(Number::NegInt(-1))));
        assert!(matches!(to_document(&json!(7)), Document::Number(Number::PosInt(7))));
        assert!(matches!(to_document(&json!(7.0)), Document::Number(Number::Float(_))));
    }

    #[test]
    fn non_finite_floats_become_null() {
        assert_eq!(from_document(&Document::Number(Number::Float(f64::NAN))), serde_json::Value::Null);
    }
}
