//! Sessions: one agent's stretch of work on one conversation, with its memory, its bounded
//! transcript and an optimistic-concurrency `version`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, SessionId, SkillId, TenantId};
use crate::limits::MAX_STORED_TRANSCRIPT;
use crate::message::{Message, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Active,
    HandedOff,
    Completed,
    Failed,
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
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Urgent => "urgent",
        }
    }
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
    /// Every model token the session's executions used (its agent's `maxSessionTokens` counts
    /// against it).
    #[serde(default)]
    pub tokens_used: u64,
    /// Incremented on every write; writes are conditional on the version read.
    pub version: u64,
    pub started_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
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
            parent_session_id: None,
            handoff_reason: None,
            handed_off_to: None,
            handoff_context: None,
            handoff_depth: 0,
            current_step: None,
            loaded_skills: Vec::new(),
            tokens_used: 0,
            version: 0,
            started_at: now,
            updated_at: now,
            ended_at: None,
        }
    }

    pub fn is_active(&self) -> bool {
        self.status == SessionStatus::Active
    }

    /// Whether a human operator owns the conversation through this session.
    pub fn is_human_owned(&self) -> bool {
        self.status == SessionStatus::HandedOff && self.handed_off_to == Some(HandoffTarget::Human)
    }

    /// Appends messages and drops the oldest whole exchanges beyond the stored cap, so that the
    /// stored transcript always opens on a plain user turn.
    pub fn append_transcript(&mut self, messages: impl IntoIterator<Item = Message>) {
        self.transcript.extend(messages);
        if self.transcript.len() > MAX_STORED_TRANSCRIPT {
            let mut cut = self.transcript.len() - MAX_STORED_TRANSCRIPT;
            while cut < self.transcript.len()
                && (self.transcript[cut].role != Role::User || self.transcript[cut].has_tool_results())
            {
                cut += 1;
            }
            self.transcript.drain(..cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ContentBlock;

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
}
