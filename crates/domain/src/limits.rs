//! Documented caps on what Switchboard accepts. Inputs beyond them are refused with a 4xx naming
//! the field, never truncated silently. The numbers keep one DynamoDB item under 400 KB and one
//! EventBridge event under 256 KB.

/// Longest id minted by another system (tenant, conversation, message, event). 63 keeps
/// `<tenant>:<conversation>` within SQS's 128-character `MessageGroupId`.
pub const MAX_EXTERNAL_ID_LEN: usize = 63;
/// Largest inbound message text, in bytes of UTF-8.
pub const MAX_MESSAGE_TEXT_BYTES: usize = 16 * 1024;
/// Largest inbound event body, in bytes (EventBridge's own cap).
pub const MAX_EVENT_BYTES: usize = 256 * 1024;
/// Largest reply the agent may send in one `send_message`, in bytes.
pub const MAX_REPLY_TEXT_BYTES: usize = 16 * 1024;
/// Longest system prompt, in bytes.
pub const MAX_PROMPT_BYTES: usize = 32 * 1024;
/// Longest name (agents, triggers, tools, skills).
pub const MAX_NAME_LEN: usize = 128;
/// Longest description.
pub const MAX_DESCRIPTION_LEN: usize = 2048;
/// Most keys in one session's memory, and the largest value, in bytes of JSON.
pub const MAX_MEMORY_KEYS: usize = 64;
pub const MAX_MEMORY_VALUE_BYTES: usize = 4 * 1024;
/// Messages kept in a session's stored transcript; older ones are dropped whole
/// (a tool call is never separated from its result).
pub const MAX_STORED_TRANSCRIPT: usize = 100;
/// Largest tool result a session keeps for `recall_details`, in bytes of JSON; a longer one is
/// kept as the start of its JSON text.
pub const MAX_RECALL_BYTES: usize = 64 * 1024;
/// All the tool results one session keeps for `recall_details`, in bytes of JSON; the oldest go
/// first. Keeps a session item well under DynamoDB's 400 KB.
pub const MAX_RECALL_TOTAL_BYTES: usize = 128 * 1024;
/// Ceiling on an agent's `maxIterations` and `maxTurns`.
pub const MAX_ITERATIONS_CEILING: u32 = 50;
pub const MAX_TURNS_CEILING: u32 = 1000;
/// Agent-to-agent handoffs a conversation may go through; at this depth only
/// `handoff_to_human` and `end_conversation` remain.
pub const MAX_HANDOFF_DEPTH: u32 = 3;
/// Execution records live this long in the primary store before they expire.
pub const EXECUTION_TTL_DAYS: i64 = 30;
/// Recorded model content (prompts, messages, answers) lives this long after it was written: twice
/// the records' retention, since a record may point at content an earlier turn of its session
/// wrote (a session writes again what it wrote more than [`EXECUTION_TTL_DAYS`] ago).
pub const CONTENT_TTL_DAYS: i64 = 2 * EXECUTION_TTL_DAYS;
/// How long daily usage (tokens and cost per day, agent and model) is kept: a year and a month,
/// so that a year-on-year comparison is possible.
pub const USAGE_TTL_DAYS: i64 = 400;
