//! What an execution record keeps of its model calls: each call's request (system prompt,
//! messages, tool definitions, configuration) and its answer, as references to content kept
//! once per session under its SHA-256. A conversation's history is the same messages call after
//! call; stored by reference, a turn writes only what is new to the session (its own messages, a
//! changed prompt), so storage grows with the conversation, not with its square.
//!
//! The tenant's [`Recording`] setting chooses what is kept: everything, everything with the
//! customer's words and the tool arguments replaced by their hashes and lengths, or nothing.
//! Nothing here reads a store or a clock: the engine hashes and redacts, the stores keep bytes.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::ids::lower_hex;
use crate::message::{ContentBlock, Message, Role, estimate_tokens};

/// What a tenant's execution records keep of model calls (`Tenant::recording`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recording {
    /// The request and the answer as the model saw and gave them.
    #[default]
    Full,
    /// The same, with the customer's text, the system prompt (which carries memory and summary
    /// of what the customer said), tool arguments and tool results replaced by their SHA-256 and
    /// length. What the agent said stays: it was sent to the customer and is in the record's
    /// actions anyway.
    Redacted,
    /// Nothing of the request or the answer: the model, usage, cost and latency only.
    Off,
}

impl Recording {
    pub const ALL: [Recording; 3] = [Recording::Full, Recording::Redacted, Recording::Off];

    pub fn as_str(self) -> &'static str {
        match self {
            Recording::Full => "full",
            Recording::Redacted => "redacted",
            Recording::Off => "off",
        }
    }

    /// The setting [`as_str`](Self::as_str) spells `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn is_full(&self) -> bool {
        *self == Recording::Full
    }
}

/// A piece of recorded content (a message, a system prompt, a list of tool definitions), kept in
/// its session's content store under `sha256`, the lowercase hex SHA-256 of its bytes (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentRef {
    pub sha256: String,
    /// Length of the stored JSON, in bytes.
    pub bytes: u64,
    /// The content's tokens as the engine estimates them (errs high; the provider's count of the
    /// whole call is the record's `usage`).
    pub tokens: u32,
}

/// What one model call was asked, by reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRequest {
    /// The model asked for first (the record's `model` is the one that answered, after any
    /// fallbacks).
    pub model: String,
    /// A JSON string.
    pub system: ContentRef,
    /// Each a [`Message`] as JSON, in order.
    pub messages: Vec<ContentRef>,
    /// A JSON array of `{name, description, inputSchema}`.
    pub tools: ContentRef,
    /// The inference parameters sent (temperature, max tokens, …; the fallback chain included).
    pub config: Value,
}

/// What one model call answered, by reference; the stop reason and usage are the record's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallResponse {
    /// The assistant [`Message`] as JSON.
    pub message: ContentRef,
}

/// A piece of content to keep: its key and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub sha256: String,
    pub body: Vec<u8>,
}

impl Blob {
    /// `value` as the compact JSON kept (serde's order of fields), keyed by its hash; `tokens`
    /// for its reference. Serialised straight to bytes: no JSON tree is built on the way.
    pub fn of<T: Serialize + ?Sized>(value: &T, tokens: u32) -> (ContentRef, Blob) {
        let body = serde_json::to_vec(value).unwrap_or_default();
        let sha256 = sha256_hex(&body);
        let reference = ContentRef { sha256: sha256.clone(), bytes: body.len() as u64, tokens };
        (reference, Blob { sha256, body })
    }

    /// A message as `recording` keeps it (see [`recorded_message`]).
    pub fn of_message(message: &Message, recording: Recording) -> (ContentRef, Blob) {
        let tokens = message.estimated_tokens();
        match recording {
            Recording::Redacted => Self::of(&recorded_message(message, recording), tokens),
            _ => Self::of(message, tokens),
        }
    }

    /// A system prompt as `recording` keeps it: whole, or redacted (it carries the session's
    /// memory, summary and the customer's first message).
    pub fn of_system(system: &str, recording: Recording) -> (ContentRef, Blob) {
        let tokens = estimate_tokens(system);
        match recording {
            Recording::Redacted => Self::of(&redacted_text(system), tokens),
            _ => Self::of(system, tokens),
        }
    }
}

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    lower_hex(&Sha256::digest(bytes))
}

/// What stands in for `text` when it is redacted: its hash and its length in bytes, so two
/// records can still be compared without either holding the words.
pub fn redacted_text(text: &str) -> Value {
    json!({ "redacted": { "sha256": sha256_hex(text.as_bytes()), "bytes": text.len() } })
}

/// `value` redacted: its JSON text's hash and length.
pub fn redacted_value(value: &Value) -> Value {
    redacted_text(&value.to_string())
}

/// A message as [`Recording`] keeps it: whole, or with the customer's text, tool arguments and
/// tool results redacted (see [`Recording::Redacted`]). The shape of a message stays (roles,
/// block types, tool names and ids) so that a redacted request still reads as a conversation.
pub fn recorded_message(message: &Message, recording: Recording) -> Value {
    let whole = || serde_json::to_value(message).unwrap_or(Value::Null);
    if recording != Recording::Redacted {
        return whole();
    }
    let blocks: Vec<Value> = message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } if message.role == Role::User => {
                json!({ "type": "text", "text": redacted_text(text) })
            }
            ContentBlock::Text { text } => json!({ "type": "text", "text": text }),
            ContentBlock::ToolUse { tool_use_id, name, input } => {
                json!({ "type": "toolUse", "toolUseId": tool_use_id, "name": name, "input": redacted_value(input) })
            }
            ContentBlock::ToolResult { tool_use_id, content, is_error } => json!({
                "type": "toolResult", "toolUseId": tool_use_id, "content": redacted_value(content), "isError": is_error
            }),
        })
        .collect();
    let role = serde_json::to_value(message.role).unwrap_or(Value::Null);
    json!({ "role": role, "content": blocks })
}

/// Content hashes a session knows to be stored for it, so that a turn writes only what is new.
/// Bounded: the oldest are forgotten first (what is forgotten is written again if needed, which
/// is harmless, since content is keyed by its hash). Forgotten whole after a content store's
/// retention so that a reference never outlives what it points at (see `docs/decisions.md`,
/// "What the model saw").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredContent {
    /// When the oldest of `hashes` was written: none is older.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// The first 16 hex digits of each stored hash, oldest first.
    pub hashes: Vec<String>,
}

/// Most hashes [`StoredContent`] remembers: the stored transcript's messages, plus room for the
/// system prompts and tool lists of a few steps.
pub const MAX_STORED_CONTENT_HASHES: usize = crate::limits::MAX_STORED_TRANSCRIPT + 28;

impl StoredContent {
    fn short(sha256: &str) -> &str {
        sha256.get(..16).unwrap_or(sha256)
    }

    /// Whether `sha256` is known to be stored.
    pub fn holds(&self, sha256: &str) -> bool {
        let short = Self::short(sha256);
        self.hashes.iter().any(|h| h == short)
    }

    /// Notes `sha256` as stored at `now`.
    pub fn add(&mut self, sha256: &str, now: chrono::DateTime<chrono::Utc>) {
        if self.holds(sha256) {
            return;
        }
        self.since.get_or_insert(now);
        self.hashes.push(Self::short(sha256).to_owned());
        if self.hashes.len() > MAX_STORED_CONTENT_HASHES {
            let extra = self.hashes.len() - MAX_STORED_CONTENT_HASHES;
            self.hashes.drain(..extra);
        }
    }

    /// Forgets everything when the oldest hash was written more than `days` before `now`: its
    /// content may expire before a record written now would.
    pub fn expire(&mut self, now: chrono::DateTime<chrono::Utc>, days: i64) {
        if self.since.is_some_and(|since| now - since >= chrono::Duration::days(days)) {
            *self = StoredContent::default();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_blob_is_keyed_by_the_hash_of_its_bytes() {
        let (r, b) = Blob::of(&json!({"role": "user"}), 3);
        assert_eq!(b.body, br#"{"role":"user"}"#);
        assert_eq!(r.sha256, sha256_hex(br#"{"role":"user"}"#));
        assert_eq!(r.sha256.len(), 64);
        assert_eq!((r.bytes, r.tokens), (15, 3));
    }

    #[test]
    fn redaction_keeps_the_shape_and_hides_the_customers_words_and_tool_data() {
        let user = Message::user_text("my card is 4111");
        let v = recorded_message(&user, Recording::Redacted);
        assert!(!v.to_string().contains("4111"));
        assert_eq!(v["content"][0]["text"]["redacted"]["bytes"], 15);
        let tool = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text { text: "Looking it up.".into() },
                ContentBlock::ToolUse {
                    tool_use_id: "t1".into(),
                    name: "lookup".into(),
                    input: json!({"card": "4111"}),
                },
            ],
        };
        let v = recorded_message(&tool, Recording::Redacted);
        assert_eq!(v["content"][0]["text"], "Looking it up.");
        assert_eq!(v["content"][1]["name"], "lookup");
        assert!(!v.to_string().contains("4111"));
        assert_eq!(recorded_message(&user, Recording::Full), serde_json::to_value(&user).unwrap());
        let (_, system) = Blob::of_system("remember 4111", Recording::Redacted);
        let system: Value = serde_json::from_slice(&system.body).unwrap();
        assert_eq!(system["redacted"]["bytes"], 13);
    }

    #[test]
    fn stored_content_is_bounded_and_forgotten_after_retention() {
        let now = chrono::Utc::now();
        let mut s = StoredContent::default();
        for i in 0..(MAX_STORED_CONTENT_HASHES + 5) {
            s.add(&sha256_hex(i.to_string().as_bytes()), now);
        }
        assert_eq!(s.hashes.len(), MAX_STORED_CONTENT_HASHES);
        assert!(!s.holds(&sha256_hex(b"0")), "the oldest are forgotten first");
        assert!(s.holds(&sha256_hex((MAX_STORED_CONTENT_HASHES + 4).to_string().as_bytes())));
        s.expire(now + chrono::Duration::days(29), 30);
        assert!(!s.is_empty());
        s.expire(now + chrono::Duration::days(30), 30);
        assert!(s.is_empty() && s.since.is_none());
    }
}
