//! Context building: the system prompt (agent, handoff context, memory) and the history window
//! the model sees for one turn.

use switchboard_domain::limits::MAX_HANDOFF_DEPTH;
use switchboard_domain::message::{Message, history_window};
use switchboard_domain::{Agent, Session, SystemTool};

use crate::ports::ToolSpec;

/// The system prompt for `agent` working `session`.
pub fn system_prompt(agent: &Agent, session: &Session) -> String {
    let mut prompt = agent.system_prompt.trim().to_owned();
    if let Some(h) = &session.handoff_context {
        prompt.push_str("\n\n## Handoff\nThis conversation was handed to you by another agent. Reason: ");
        prompt.push_str(&h.reason);
        if !h.relevant_info.is_null() {
            prompt.push_str("\nWhat they passed on: ");
            prompt.push_str(&h.relevant_info.to_string());
        }
    }
    if !session.memory.is_empty() {
        prompt.push_str("\n\n## Remembered in this session");
        for (k, v) in &session.memory {
            prompt.push_str(&format!("\n- {k}: {v}"));
        }
    }
    if session.handoff_depth >= MAX_HANDOFF_DEPTH {
        prompt.push_str(
            "\n\n## Last handoff level\nNo further agent handoff is possible: resolve the request or hand it to a human.",
        );
    }
    prompt
}

/// The system tools this agent may call in this session. Handoff to another agent is withheld
/// at the last handoff level (see docs/decisions.md).
pub fn allowed_tools(agent: &Agent, session: &Session) -> Vec<SystemTool> {
    SystemTool::ALL
        .into_iter()
        .filter(|t| agent.allows(*t))
        .filter(|t| !(session.handoff_depth >= MAX_HANDOFF_DEPTH && *t == SystemTool::HandoffToAgent))
        .collect()
}

pub fn tool_specs(tools: &[SystemTool]) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name().to_owned(),
            description: t.description().to_owned(),
            input_schema: t.parameters(),
        })
        .collect()
}

/// The messages for the model: as much recent history as the agent's window allows, then the
/// new message, which is always included.
pub fn messages(agent: &Agent, session: &Session, new_message: &Message) -> Vec<Message> {
    let max_messages = usize::try_from(agent.history.max_messages).unwrap_or(usize::MAX).saturating_sub(1);
    let budget = agent.history.max_tokens.saturating_sub(new_message.estimated_tokens());
    let mut out = history_window(&session.transcript, max_messages, budget).to_vec();
    out.push(new_message.clone());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_domain::{AgentId, HandoffContext, SessionId};

    fn agent() -> Agent {
        serde_json::from_value(serde_json::json!({
            "tenantId": "t-1", "agentId": "01JD0000SVPP0RT0AGENT00001", "name": "A", "systemPrompt": "  Be kind.  ",
            "model": "m", "tools": ["send_message", "handoff_to_agent", "end_conversation"],
            "history": { "maxMessages": 3, "maxTokens": 1000 },
            "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap()
    }

    fn session() -> Session {
        Session::start("t-1".parse().unwrap(), "c-1".into(), AgentId::generate(), chrono::Utc::now())
    }

    #[test]
    fn a_fresh_session_gets_the_agent_prompt_alone() {
        assert_eq!(system_prompt(&agent(), &session()), "Be kind.");
    }

    #[test]
    fn memory_and_handoff_context_are_added_to_the_prompt() {
        let mut s = session();
        s.memory.insert("orderNumber".into(), serde_json::json!("1234"));
        s.handoff_context = Some(HandoffContext {
            from_agent_id: AgentId::generate(),
            from_session_id: SessionId::generate(),
            reason: "billing question".into(),
            relevant_info: serde_json::json!({ "topic": "refund" }),
        });
        let p = system_prompt(&agent(), &s);
        assert!(p.contains("Reason: billing question"));
        assert!(p.contains(r#"{"topic":"refund"}"#));
        assert!(p.contains(r#"- orderNumber: "1234""#));
    }

    #[test]
    fn only_granted_tools_are_offered_and_agent_handoff_is_withheld_at_the_last_level() {
        let mut s = session();
        assert_eq!(
            allowed_tools(&agent(), &s),
            [SystemTool::SendMessage, SystemTool::HandoffToAgent, SystemTool::EndConversation]
        );
        s.handoff_depth = MAX_HANDOFF_DEPTH;
        assert_eq!(allowed_tools(&agent(), &s), [SystemTool::SendMessage, SystemTool::EndConversation]);
        assert!(system_prompt(&agent(), &s).contains("No further agent handoff"));
    }

    #[test]
    fn the_new_message_is_always_in_the_window_even_when_it_alone_exceeds_the_budget() {
        let mut s = session();
        s.append_transcript((0..6).map(|i| Message::user_text(format!("old {i}"))));
        let huge = Message::user_text("x".repeat(10_000));
        let window = messages(&agent(), &s, &huge);
        assert_eq!(window.last(), Some(&huge));
        assert_eq!(window.len(), 1, "no room left for history");
        let small = Message::user_text("new");
        let window = messages(&agent(), &s, &small);
        assert_eq!(window.len(), 3, "maxMessages counts the new message");
    }
}
