//! Sessions: one agent's stretch of work on one conversation, with its memory, its bounded
//! transcript and an optimistic-concurrency `version`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, SessionId, SkillId, TenantId};
use crate::limits::{MAX_RECALL_BYTES, MAX_RECALL_TOTAL_BYTES, MAX_STORED_TRANSCRIPT};
use crate::message::{Message, is_customer_turn, text_only};
use crate::recording::StoredContent;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Active,
    HandedOff,
    Completed,
    Failed,
    /// Closed because its customer went quiet: the agent was waiting on them for the tenant's
    /// `sessionIdleMinutes` (when its limits say `closeIdleSessions`). Their next message opens
    /// a new conversation.
    Abandoned,
}

/// Who took the conversation over when a session was handed off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HandoffTarget {
    /// A human operator owns the conversation; agents do not answer it.
    Human,
    #[serde(rename_all = "camelCase")]
    Agent { agent_id: AgentId, session_id: SessionId },
}

/// How urgently a human operator should pick a conversation up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Low,
    #[default]
    Normal,
    High,
    Urgent,
}

impl Priority {
    /// The priority named `s` (`low`, `normal`, `high`, `urgent`).
    pub fn parse(s: &str) -> Option<Self> {
        [Priority::Low, Priority::Normal, Priority::High, Priority::Urgent].into_iter().find(|p| p.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Urgent => "urgent",
        }
    }
}

/// Why a conversation went to a human: what the insights count hand-offs by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoffCause {
    /// The agent asked for a person (`handoff_to_human`, or a router's choice).
    #[default]
    Agent,
    /// The turn failed or timed out, and the agent's `onFailure` hands over.
    Failure,
    /// The agent reached its `maxTurns` and its `handoffBehavior` escalates.
    MaxTurns,
    /// The session's token budget (`maxSessionTokens`) was spent and `handoffBehavior` escalates.
    SessionBudget,
    /// A tenant limit refused the message and the tenant's `onLimit` hands over.
    Limit,
    /// A person asked over the API (a session hand-off, a cancelled turn).
    Api,
}

impl HandoffCause {
    /// Every cause, in declaration order.
    pub const ALL: [HandoffCause; 6] = [
        HandoffCause::Agent,
        HandoffCause::Failure,
        HandoffCause::MaxTurns,
        HandoffCause::SessionBudget,
        HandoffCause::Limit,
        HandoffCause::Api,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HandoffCause::Agent => "agent",
            HandoffCause::Failure => "failure",
            HandoffCause::MaxTurns => "max_turns",
            HandoffCause::SessionBudget => "session_budget",
            HandoffCause::Limit => "limit",
            HandoffCause::Api => "api",
        }
    }
}

/// An operator's claim on a conversation handed to humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// The operator's name as the console gives it.
    pub operator: String,
    pub at: DateTime<Utc>,
}

/// What a handing-off agent tells the next one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandoffContext {
    pub from_agent_id: AgentId,
    pub from_session_id: SessionId,
    pub reason: String,
    #[serde(default)]
    pub relevant_info: serde_json::Value,
    /// The handing-off agent's summary of the conversation so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// What a session's older messages said, folded into prose by a model call once its transcript
/// outgrew the agent's `summarizeAfter` (see `HistoryConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationSummary {
    pub text: String,
    /// How many of the transcript's oldest messages the text covers: the context window is cut
    /// from the messages after them.
    pub covers: u32,
    /// Customer messages folded into the text over the conversation's life.
    pub customer_messages: u32,
    pub updated_at: DateTime<Utc>,
}

/// A tool result the model was shown shortened, kept whole for `recall_details`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredResult {
    /// The tool call's id, which the shortened result names.
    pub handle: String,
    pub tool: String,
    pub content: serde_json::Value,
    pub stored_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub tenant_id: TenantId,
    pub session_id: SessionId,
    pub conversation_id: String,
    pub agent_id: AgentId,
    pub status: SessionStatus,
    pub turn_count: u32,
    #[serde(default)]
    pub memory: BTreeMap<String, serde_json::Value>,
    /// The newest messages of the conversation as the model saw them, bounded by
    /// [`MAX_STORED_TRANSCRIPT`]; the context window is cut from this.
    #[serde(default)]
    pub transcript: Vec<Message>,
    /// The customer's first message in the conversation, kept verbatim: every prompt shows it,
    /// whatever the window and the summary left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_message: Option<String>,
    /// The rolling summary of the older part of the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<ConversationSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<SessionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_off_to: Option<HandoffTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_context: Option<HandoffContext>,
    /// Agent-to-agent handoffs that led to this session (0 for the first agent).
    #[serde(default)]
    pub handoff_depth: u32,
    /// The step of a stepped agent the conversation is in (`None`: the initial step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
    /// Skills loaded with `load_skill`, in load order (a parent before its child).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded_skills: Vec<SkillId>,
    /// Tool results shown shortened, kept whole for `recall_details`, oldest first (bounded by
    /// [`MAX_RECALL_TOTAL_BYTES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recallable: Vec<StoredResult>,
    /// Every model token the session's executions used (its agent's `maxSessionTokens` counts
    /// against it).
    #[serde(default)]
    pub tokens_used: u64,
    /// The channel the conversation came in on (`channel.platform` of the message that started
    /// the session; carried across handoffs). None for a session an `invoke` started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The variant of a trigger's traffic split the conversation was assigned to when this
    /// session (or the one it was handed off from) started; its executions are counted under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<crate::trigger::Assignment>,
    /// How urgently the conversation was handed to a human (while a human owns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_priority: Option<Priority>,
    /// The operator who claimed a conversation a human owns: the one who answers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    /// The recorded content (see [`crate::recording`]) already stored for this session, so that a
    /// turn writes only what is new.
    #[serde(default, skip_serializing_if = "StoredContent::is_empty")]
    pub stored_content: StoredContent,
    /// The turn waiting for a person's approval of a tool call, if one is (see
    /// [`crate::approval`]); the session stays active and holds its conversation's next messages.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::approval::through_json")]
    pub paused: Option<Box<crate::approval::PausedTurn>>,
    /// The work that arrived while a turn was paused, in arrival order: run once it is done.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::approval::through_json")]
    pub held: Vec<crate::approval::HeldMessage>,
    /// The customer's messages whose turns a newer message interrupted before they replied, in
    /// order (their agent's `bursts` is `interrupt`): in the transcript, and answered by the
    /// session's next turn, whose record lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interrupted: Vec<crate::execution::CoalescedMessage>,
    /// Incremented on every write; writes are conditional on the version read.
    pub version: u64,
    pub started_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
    /// When the conversation's first message arrived (the first session's; carried across
    /// hand-offs to agents): what first-response time and time to resolution are measured from.
    /// `None` for a session written before it was kept ([`Session::opened`] falls back to
    /// `started_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at: Option<DateTime<Utc>>,
    /// When the session is closed as abandoned if nothing happens in it before (see
    /// [`Session::rest`]); `None` when its tenant keeps idle sessions open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleClose>,
}

/// When a session waiting on its customer closes as abandoned, and what the close counts under
/// in insights: the trigger and agent version of the turn that left it waiting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdleClose {
    pub at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<crate::ids::TriggerId>,
    /// 0 when no turn of this session's agent ran yet (a session a hand-off just started).
    #[serde(default)]
    pub agent_version: u64,
}

impl Session {
    pub fn start(tenant_id: TenantId, conversation_id: String, agent_id: AgentId, now: DateTime<Utc>) -> Self {
        Self {
            tenant_id,
            session_id: SessionId::generate(),
            conversation_id,
            agent_id,
            status: SessionStatus::Active,
            turn_count: 0,
            memory: BTreeMap::new(),
            transcript: Vec::new(),
            first_message: None,
            summary: None,
            parent_session_id: None,
            handoff_reason: None,
            handed_off_to: None,
            handoff_context: None,
            handoff_depth: 0,
            current_step: None,
            loaded_skills: Vec::new(),
            recallable: Vec::new(),
            tokens_used: 0,
            channel: None,
            handoff_priority: None,
            claim: None,
            split: None,
            stored_content: StoredContent::default(),
            paused: None,
            held: Vec::new(),
            interrupted: Vec::new(),
            version: 0,
            started_at: now,
            updated_at: now,
            ended_at: None,
            opened_at: None,
            idle: None,
        }
    }

    /// When the conversation this session belongs to opened (see [`Session::opened_at`]).
    pub fn opened(&self) -> DateTime<Utc> {
        self.opened_at.unwrap_or(self.started_at)
    }

    /// Sets when the session is closed as abandoned: `close_after` minutes after its last write,
    /// if it is left active and not paused (its agent waits on the customer) and its tenant
    /// closes idle sessions (`close_after` is `Some`), counted under `trigger_id` and
    /// `agent_version`; otherwise never.
    pub fn rest(&mut self, close_after: Option<u32>, trigger_id: Option<crate::ids::TriggerId>, agent_version: u64) {
        self.idle = close_after.filter(|_| self.is_active() && self.paused.is_none()).map(|minutes| IdleClose {
            at: self.updated_at + chrono::Duration::minutes(i64::from(minutes)),
            trigger_id,
            agent_version,
        });
    }

    /// When the session is due to close as abandoned (see [`Session::idle`]), while it is active
    /// and not paused: what the stores index for the idle sweep.
    pub fn idle_due(&self) -> Option<DateTime<Utc>> {
        self.idle.as_ref().filter(|_| self.is_active() && self.paused.is_none()).map(|i| i.at)
    }

    /// Whether the session is due to close as abandoned at `now`.
    pub fn is_idle_at(&self, now: DateTime<Utc>) -> bool {
        self.idle_due().is_some_and(|at| at <= now)
    }

    pub fn is_active(&self) -> bool {
        self.status == SessionStatus::Active
    }

    /// Whether a human operator owns the conversation through this session.
    pub fn is_human_owned(&self) -> bool {
        self.status == SessionStatus::HandedOff && self.handed_off_to == Some(HandoffTarget::Human)
    }

    /// Appends messages and drops the oldest whole exchanges beyond the stored cap, so that the
    /// stored transcript always opens on a plain user turn. The first customer message is kept
    /// aside the first time one comes.
    pub fn append_transcript(&mut self, messages: impl IntoIterator<Item = Message>) {
        let from = self.transcript.len();
        self.transcript.extend(messages);
        if self.first_message.is_none() {
            self.first_message = self.transcript[from..].iter().find(|m| is_customer_turn(m)).map(Message::text);
        }
        if self.transcript.len() > MAX_STORED_TRANSCRIPT {
            let mut cut = self.transcript.len() - MAX_STORED_TRANSCRIPT;
            while cut < self.transcript.len() && !is_customer_turn(&self.transcript[cut]) {
                cut += 1;
            }
            self.transcript.drain(..cut);
            if let Some(summary) = &mut self.summary {
                summary.covers = summary.covers.saturating_sub(u32::try_from(cut).unwrap_or(u32::MAX));
            }
        }
    }

    /// Keeps `content` (the full result of tool call `handle`) for `recall_details`: a result over
    /// [`MAX_RECALL_BYTES`] as the start of its JSON text, and the oldest results dropped while
    /// all of them would pass [`MAX_RECALL_TOTAL_BYTES`].
    pub fn keep_for_recall(&mut self, handle: &str, tool: &str, content: serde_json::Value, now: DateTime<Utc>) {
        let text = content.to_string();
        let content = if text.len() > MAX_RECALL_BYTES {
            let mut end = MAX_RECALL_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            serde_json::Value::String(format!("{}… (cut at {MAX_RECALL_BYTES} bytes)", &text[..end]))
        } else {
            content
        };
        self.recallable.retain(|r| r.handle != handle);
        self.recallable.push(StoredResult {
            handle: handle.to_owned(),
            tool: tool.to_owned(),
            content,
            stored_at: now,
        });
        let size = |r: &StoredResult| r.content.to_string().len();
        let mut total: usize = self.recallable.iter().map(size).sum();
        while total > MAX_RECALL_TOTAL_BYTES && self.recallable.len() > 1 {
            total -= size(&self.recallable.remove(0));
        }
    }

    /// The stored result of tool call `handle`.
    pub fn recalled(&self, handle: &str) -> Option<&StoredResult> {
        self.recallable.iter().find(|r| r.handle == handle)
    }

    /// The messages no summary covers yet: where the context window is cut from.
    pub fn unsummarized(&self) -> &[Message] {
        let covers = self.summary.as_ref().map_or(0, |s| s.covers as usize);
        &self.transcript[covers.min(self.transcript.len())..]
    }

    /// The session another agent (`agent_id`, `handoff_depth` handoffs deep) takes the
    /// conversation over in after a handoff: the memory, the summary, the first message and the recent
    /// conversation as text (the other agent's tools differ) go with it.
    pub fn successor(
        &self,
        agent_id: AgentId,
        handoff_depth: u32,
        context: HandoffContext,
        now: DateTime<Utc>,
    ) -> Session {
        let mut next = Session::start(self.tenant_id.clone(), self.conversation_id.clone(), agent_id, now);
        next.parent_session_id = Some(self.session_id);
        next.handoff_depth = handoff_depth;
        next.handoff_reason = Some(context.reason.clone());
        next.handoff_context = Some(context);
        next.memory = self.memory.clone();
        next.transcript = text_only(self.unsummarized());
        next.first_message = self.first_message.clone();
        next.channel = self.channel.clone();
        next.split = self.split.clone();
        next.opened_at = Some(self.opened());
        next.summary = self.summary.clone().map(|s| ConversationSummary { covers: 0, ..s });
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ContentBlock, Role};

    #[test]
    fn the_stored_transcript_is_bounded_and_opens_on_a_user_turn() {
        let tenant: TenantId = "t-1".parse().unwrap();
        let mut s = Session::start(tenant, "c-1".into(), AgentId::generate(), Utc::now());
        for i in 0..MAX_STORED_TRANSCRIPT {
            s.append_transcript([
                Message::user_text(format!("q{i}")),
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "x".into(),
                        content: serde_json::Value::Null,
                        is_error: false,
                    }],
                },
            ]);
        }
        assert!(s.transcript.len() <= MAX_STORED_TRANSCRIPT);
        assert!(!s.transcript[0].has_tool_results());
        assert_eq!(s.transcript.last().map(Message::has_tool_results), Some(true));
    }

    #[test]
    fn the_first_customer_message_is_kept_and_the_summary_follows_the_cap() {
        let mut s = Session::start("t-1".parse().unwrap(), "c-1".into(), AgentId::generate(), Utc::now());
        s.append_transcript([Message::assistant_text("Welcome")]);
        assert_eq!(s.first_message, None);
        s.append_transcript([Message::user_text("first"), Message::assistant_text("ok")]);
        s.summary = Some(ConversationSummary {
            text: "They said first.".into(),
            covers: 3,
            customer_messages: 1,
            updated_at: Utc::now(),
        });
        for i in 0..MAX_STORED_TRANSCRIPT {
            s.append_transcript([Message::user_text(format!("q{i}"))]);
        }
        assert_eq!(s.first_message.as_deref(), Some("first"));
        assert_eq!(s.summary.as_ref().map(|x| x.covers), Some(0), "the covered messages were dropped first");
        assert_eq!(s.unsummarized().len(), s.transcript.len());
    }

    #[test]
    fn a_successor_session_carries_the_conversation_as_text() {
        let mut s = Session::start("t-1".parse().unwrap(), "c-1".into(), AgentId::generate(), Utc::now());
        s.append_transcript([
            Message::user_text("old"),
            Message::assistant_text("old answer"),
            Message::user_text("where is 1234?"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    tool_use_id: "x".into(),
                    name: "lookup".into(),
                    input: serde_json::json!({}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "x".into(),
                    content: serde_json::json!("ships today"),
                    is_error: false,
                }],
            },
            Message::assistant_text("It ships today."),
        ]);
        s.summary = Some(ConversationSummary {
            text: "Said old.".into(),
            covers: 2,
            customer_messages: 1,
            updated_at: Utc::now(),
        });
        s.memory.insert("order".into(), serde_json::json!("1234"));
        let context = HandoffContext {
            from_agent_id: s.agent_id,
            from_session_id: s.session_id,
            reason: "billing".into(),
            relevant_info: serde_json::Value::Null,
            summary: None,
        };
        let next = s.successor(AgentId::generate(), 1, context, Utc::now());
        let texts: Vec<String> = next.transcript.iter().map(Message::text).collect();
        assert_eq!(texts, ["where is 1234?", "It ships today."]);
        assert_eq!(next.first_message.as_deref(), Some("old"));
        assert_eq!(next.summary.as_ref().map(|x| (x.text.as_str(), x.covers)), Some(("Said old.", 0)));
        assert_eq!((next.parent_session_id, next.handoff_depth), (Some(s.session_id), 1));
        assert_eq!(next.handoff_reason.as_deref(), Some("billing"));
        assert_eq!(next.memory, s.memory);
    }

    #[test]
    fn recallable_results_are_bounded_oldest_first_and_cut_when_huge() {
        let mut s = Session::start("t-1".parse().unwrap(), "c-1".into(), AgentId::generate(), Utc::now());
        let big = serde_json::json!("x".repeat(MAX_RECALL_BYTES / 2));
        for i in 0..5 {
            s.keep_for_recall(&format!("t{i}"), "orders", big.clone(), Utc::now());
        }
        let handles: Vec<&str> = s.recallable.iter().map(|r| r.handle.as_str()).collect();
        assert_eq!(handles, ["t2", "t3", "t4"], "three halves fit in the total, the oldest went first");
        assert!(s.recalled("t0").is_none());
        assert_eq!(s.recalled("t4").map(|r| &r.content), Some(&big));
        s.keep_for_recall("huge", "orders", serde_json::json!("é".repeat(MAX_RECALL_BYTES)), Utc::now());
        let kept = s.recalled("huge").unwrap().content.as_str().unwrap();
        assert!(kept.ends_with(&format!("(cut at {MAX_RECALL_BYTES} bytes)")));
        assert!(kept.len() <= MAX_RECALL_BYTES + 40);
    }
}
