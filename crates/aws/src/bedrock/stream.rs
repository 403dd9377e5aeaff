//! A ConverseStream answer put back together from its events: text pieces (passed on to the
//! sink as they come), tool uses whose input arrives as JSON text in pieces, the stop reason and
//! the usage. It does not call Bedrock or sort a failed call.

use std::collections::BTreeMap;

use aws_sdk_bedrockruntime::types::{ContentBlockDelta, ContentBlockStart, ConverseStreamOutput, StopReason as BStop};
use switchboard_domain::TokenUsage;
use switchboard_domain::message::ContentBlock;
use switchboard_engine::{ModelError, ModelRequest, ModelResponse, TextSink};

use super::wire::{stop_reason, token_usage};

/// A ConverseStream answer put back together.
#[derive(Debug, Default)]
pub(super) struct Streamed {
    /// By content block index: text, or a tool use with its input's JSON text so far.
    blocks: BTreeMap<i32, StreamedBlock>,
    stop: Option<BStop>,
    usage: Option<TokenUsage>,
}

#[derive(Debug)]
enum StreamedBlock {
    Text(String),
    ToolUse { id: String, name: String, input: String },
}

impl Streamed {
    pub(super) fn read(&mut self, event: ConverseStreamOutput, sink: &dyn TextSink) -> Result<(), ModelError> {
        match event {
            ConverseStreamOutput::ContentBlockStart(e) => {
                if let Some(ContentBlockStart::ToolUse(t)) = e.start() {
                    let block = StreamedBlock::ToolUse {
                        id: t.tool_use_id().to_owned(),
                        name: t.name().to_owned(),
                        input: String::new(),
                    };
                    self.blocks.insert(e.content_block_index(), block);
                }
            }
            ConverseStreamOutput::ContentBlockDelta(e) => match e.delta() {
                Some(ContentBlockDelta::Text(piece)) => {
                    let block = self
                        .blocks
                        .entry(e.content_block_index())
                        .or_insert_with(|| StreamedBlock::Text(String::new()));
                    if let StreamedBlock::Text(text) = block {
                        text.push_str(piece);
                        if !piece.is_empty() {
                            sink.text(piece);
                        }
                    }
                }
                Some(ContentBlockDelta::ToolUse(d)) => match self.blocks.get_mut(&e.content_block_index()) {
                    Some(StreamedBlock::ToolUse { input, .. }) => input.push_str(d.input()),
                    _ => {
                        return Err(ModelError::Unavailable(
                            "bedrock: tool input for a block that is no tool use".into(),
                        ));
                    }
                },
                // Reasoning and citations: dropped, as in a Converse answer.
                _ => {}
            },
            ConverseStreamOutput::MessageStop(e) => self.stop = Some(e.stop_reason().clone()),
            ConverseStreamOutput::Metadata(e) => self.usage = e.usage().map(token_usage),
            _ => {}
        }
        Ok(())
    }

    pub(super) fn finish(self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let Some(stop) = self.stop else {
            return Err(ModelError::Unavailable("bedrock: the stream ended before the answer did".into()));
        };
        let mut content = Vec::with_capacity(self.blocks.len());
        for block in self.blocks.into_values() {
            content.push(match block {
                StreamedBlock::Text(text) if text.is_empty() => continue,
                StreamedBlock::Text(text) => ContentBlock::Text { text },
                StreamedBlock::ToolUse { id, name, input } => {
                    let input = if input.trim().is_empty() { "{}" } else { &input };
                    let input = serde_json::from_str(input).map_err(|e| {
                        ModelError::Unavailable(format!("bedrock: tool use {id} has input that is not JSON: {e}"))
                    })?;
                    ContentBlock::ToolUse { tool_use_id: id, name, input }
                }
            });
        }
        let stop_reason = stop_reason(&stop)?;
        Ok(ModelResponse { content, stop_reason, usage: self.usage.unwrap_or_default(), model: request.model.clone() })
    }
}
