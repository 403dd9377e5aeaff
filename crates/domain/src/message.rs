//! The transcript as the model sees it: turns of content blocks, with tool calls and their
//! results as blocks of their own (the shape of Bedrock Converse, which other providers map to).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One piece of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolUse {
        tool_use_id: String,
        name: String,
        input: serde_json::Value,
    },
    #[serde(rename_all = "camelCase")]
    ToolResult {
        tool_use_id: String,
        content: serde_json::Value,
        is_error: bool,
    },
}

/// One turn of the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Self { role: Role::User, content: vec![ContentBlock::Text { text: text.into() }] }
    }

    pub fn assistant_text(text: impl Into<String>) -> Self {
        Self { role: Role::Assistant, content: vec![ContentBlock::Text { text: text.into() }] }
    }

    /// The text blocks joined, for display and matching.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }

    /// Whether this turn carries tool results (and so must stay glued to the turn before it).
    /// The tool calls of an assistant message, in order: `(tool use id, tool name, input)`.
    pub fn tool_uses(&self) -> Vec<(String, String, serde_json::Value)> {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { tool_use_id, name, input } => {
                    Some((tool_use_id.clone(), name.clone(), input.clone()))
                }
                _ => None,
            })
            .collect()
    }

    pub fn has_tool_results(&self) -> bool {
        self.content.iter().any(|b| matches!(b, ContentBlock::ToolResult { .. }))
    }

    /// A rough token estimate (about four bytes a token) used for history budgets when no
    /// tokenizer is at hand; deliberately conservative.
    pub fn estimated_tokens(&self) -> u32 {
        let bytes: usize = self
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::Text { text } => text.len(),
                ContentBlock::ToolUse { name, input, .. } => name.len() + input.to_string().len(),
                ContentBlock::ToolResult { content, .. } => content.to_string().len(),
            })
            .sum();
        u32::try_from(bytes / 4 + 4).unwrap_or(u32::MAX)
    }
}

/// Keeps the newest messages of `history` that fit both `max_messages` and `max_tokens`, without
/// ever starting the window on a tool-result turn (its tool call would be cut off) and without
/// starting it on an assistant turn (models expect the window to open with the user).
pub fn history_window(history: &[Message], max_messages: usize, max_tokens: u32) -> &[Message] {
    let mut start = history.len();
    let mut tokens: u32 = 0;
    while start > 0 {
        let candidate = &history[start - 1];
        let next_tokens = tokens.saturating_add(candidate.estimated_tokens());
        if history.len() - (start - 1) > max_messages || next_tokens > max_tokens {
            break;
        }
        tokens = next_tokens;
        start -= 1;
    }
    // Move the start forward until it is a plain user turn.
    while start < history.len() && (history[start].role != Role::User || history[start].has_tool_results()) {
        start += 1;
    }
    &history[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_pair(i: usize) -> [Message; 2] {
        [
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    tool_use_id: format!("t{i}"),
                    name: "get_context".into(),
                    input: serde_json::json!({}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: format!("t{i}"),
                    content: serde_json::json!({"ok": true}),
                    is_error: false,
                }],
            },
        ]
    }

    #[test]
    fn the_window_keeps_the_newest_messages() {
        let history: Vec<Message> = (0..10).map(|i| Message::user_text(format!("m{i}"))).collect();
        let window = history_window(&history, 3, 10_000);
        assert_eq!(window.iter().map(Message::text).collect::<Vec<_>>(), ["m7", "m8", "m9"]);
    }

    #[test]
    fn the_window_never_opens_on_a_tool_result() {
        // given: user, tool call, tool result, assistant reply
        let mut history = vec![Message::user_text("hi")];
        history.extend(tool_pair(1));
        history.push(Message::assistant_text("done"));
        history.push(Message::user_text("again"));
        // when: the window would start on the tool result
        let window = history_window(&history, 3, 10_000);
        // then: it skips forward to the next plain user turn instead
        assert_eq!(window.len(), 1);
        assert_eq!(window[0].text(), "again");
    }

    #[test]
    fn the_window_respects_the_token_budget() {
        let history = vec![Message::user_text("x".repeat(400)), Message::user_text("short")];
        let window = history_window(&history, 10, 20);
        assert_eq!(window.len(), 1);
        assert_eq!(window[0].text(), "short");
    }

    #[test]
    fn an_empty_history_gives_an_empty_window() {
        assert!(history_window(&[], 5, 100).is_empty());
    }
}
