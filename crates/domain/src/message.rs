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
        let tokens: u32 = self
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::Text { text } => estimate_tokens(text),
                ContentBlock::ToolUse { name, input, .. } => {
                    estimate_tokens(name) + estimate_tokens(&input.to_string())
                }
                ContentBlock::ToolResult { content, .. } => estimate_tokens(&content.to_string()),
            })
            .fold(0, u32::saturating_add);
        tokens.saturating_add(4)
    }
}

/// A token estimate of `text` that errs high rather than low: ASCII at four bytes a token (English
/// prose and JSON run at about that), every other character a token and a half (tokenizers spend
/// one to three tokens on a CJK character or an emoji, where four bytes a token would count
/// under one).
pub fn estimate_tokens(text: &str) -> u32 {
    let (ascii, other) =
        text.chars().fold((0usize, 0usize), |(a, o), c| if c.is_ascii() { (a + 1, o) } else { (a, o + 1) });
    u32::try_from(ascii.div_ceil(4) + (other * 3).div_ceil(2)).unwrap_or(u32::MAX)
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
    while start < history.len() && !is_customer_turn(&history[start]) {
        start += 1;
    }
    &history[start..]
}

/// `text` cut to its first `max_chars` characters, marked with `…` when cut.
pub fn cut_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Whether `message` is a customer's message (a plain user turn, not tool results).
pub fn is_customer_turn(message: &Message) -> bool {
    message.role == Role::User && !message.has_tool_results()
}

/// Merges neighbouring messages of the same role into one, so that roles alternate as providers
/// require (Bedrock refuses two user turns in a row). Two customer messages in a row happen when
/// messages arrive while a human owns the conversation or a limit refused them.
pub fn alternate(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for message in messages {
        match out.last_mut() {
            Some(last) if last.role == message.role => last.content.extend(message.content),
            _ => out.push(message),
        }
    }
    out
}

/// The conversation in `messages` as text alone: tool calls and results dropped, empty turns
/// dropped, neighbouring turns of one role merged. What another agent is given at a handoff: its
/// tools differ, and a provider refuses tool blocks for tools it was not offered.
pub fn text_only(messages: &[Message]) -> Vec<Message> {
    let kept = messages.iter().filter_map(|m| {
        let content: Vec<ContentBlock> = m
            .content
            .iter()
            .filter(|b| matches!(b, ContentBlock::Text { text } if !text.trim().is_empty()))
            .cloned()
            .collect();
        (!content.is_empty()).then_some(Message { role: m.role, content })
    });
    let mut out = alternate(kept.collect());
    // A window opens on the customer.
    let first_user = out.iter().position(|m| m.role == Role::User).unwrap_or(out.len());
    out.drain(..first_user);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_estimates_do_not_undercount_cjk_or_emoji() {
        // English: about four characters a token.
        assert_eq!(estimate_tokens("Where is my order?"), 5);
        // Japanese and Chinese: tokenizers spend about a token or more per character; bytes / 4
        // would have said 0.75.
        let ja = "注文した商品がまだ届きません"; // 14 characters, 42 bytes
        assert_eq!(estimate_tokens(ja), 21);
        assert!(estimate_tokens(ja) as usize >= ja.chars().count());
        // An emoji is one to three tokens; four bytes would have said one.
        assert_eq!(estimate_tokens("🙂🙂"), 3);
        assert_eq!(estimate_tokens(""), 0);
    }

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

    #[test]
    fn text_is_cut_on_a_character_boundary() {
        assert_eq!(cut_chars("注文した商品", 2), "注文…");
        assert_eq!(cut_chars("short", 10), "short");
    }

    #[test]
    fn neighbouring_turns_of_one_role_are_merged() {
        let mut history = vec![Message::user_text("hi")];
        history.extend(tool_pair(1));
        history.push(Message::user_text("still there?"));
        history.push(Message::user_text("hello?"));
        let merged = alternate(history);
        let roles: Vec<Role> = merged.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
        assert_eq!(merged[2].content.len(), 3, "the tool result, then both customer messages");
        assert_eq!(merged[2].text(), "still there?\nhello?");
    }

    #[test]
    fn text_only_drops_tool_blocks_and_opens_on_the_customer() {
        let mut history = vec![Message::assistant_text("Welcome!"), Message::user_text("where is 1234?")];
        history.extend(tool_pair(1));
        history.push(Message::assistant_text("It ships today."));
        let plain = text_only(&history);
        let texts: Vec<(Role, String)> = plain.iter().map(|m| (m.role, m.text())).collect();
        assert_eq!(texts, [(Role::User, "where is 1234?".into()), (Role::Assistant, "It ships today.".into())]);
    }
}
