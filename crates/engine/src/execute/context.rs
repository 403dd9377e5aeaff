//! Context building: the system prompt (agent, handoff context, summary, first message, memory)
//! and the history window the model sees for one turn.

use switchboard_domain::limits::MAX_HANDOFF_DEPTH;
use switchboard_domain::message::{ContentBlock, Message, alternate, history_window};
use switchboard_domain::{Agent, Session};

use crate::tools::Toolbox;

/// The system prompt for `agent` working `session`, whose model sees `window`: the agent's
/// prompt, then the current step's, the loaded skills', what a handing-off agent passed on, the
/// summary of older messages, the customer's first message when the window no longer holds it,
/// the session memory, and a note at the last handoff level.
pub fn system_prompt(agent: &Agent, session: &Session, tools: &Toolbox, window: &[Message]) -> String {
    let mut prompt = agent.system_prompt.trim().to_owned();
    if let Some(step) = &tools.step {
        prompt.push_str(&format!("\n\n## Current step: {}\n{}", step.name, step.system_prompt.trim()));
        if step.is_final {
            prompt.push_str("\nThis is the final step: end the conversation once it is done.");
        }
    }
    for skill in &tools.loaded {
        prompt.push_str(&format!("\n\n## Skill: {}\n{}", skill.name, skill.prompt.trim()));
    }
    if let Some(h) = &session.handoff_context {
        prompt.push_str(&format!(
            "\n\n## Handoff\nAgent {} handed this conversation to you. Reason: {}",
            h.from_agent_id, h.reason
        ));
        if let Some(summary) = &h.summary {
            prompt.push_str("\nSummary so far: ");
            prompt.push_str(summary);
        }
        if !h.relevant_info.is_null() {
            prompt.push_str("\nWhat they passed on: ");
            prompt.push_str(&h.relevant_info.to_string());
        }
    }
    if let Some(summary) = &session.summary {
        prompt.push_str("\n\n## Earlier in this conversation\n");
        prompt.push_str(&summary.text);
    }
    if let Some(first) = &session.first_message
        && !window.iter().flat_map(|m| &m.content).any(|b| matches!(b, ContentBlock::Text { text } if text == first))
    {
        prompt.push_str("\n\n## The customer's first message\n");
        prompt.push_str(first);
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

/// The messages for the model: as much recent history as the agent's window allows (of what no
/// summary covers), then the new message, which is always included; neighbouring turns of one
/// role merged, as providers require.
pub fn messages(agent: &Agent, session: &Session, new_message: &Message) -> Vec<Message> {
    let max_messages = usize::try_from(agent.history.max_messages).unwrap_or(usize::MAX).saturating_sub(1);
    let budget = agent.history.max_tokens.saturating_sub(new_message.estimated_tokens());
    let mut out = history_window(session.unsummarized(), max_messages, budget).to_vec();
    out.push(new_message.clone());
    alternate(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_domain::{AgentId, HandoffContext, SessionId, Skill, SystemTool};

    fn agent() -> Agent {
        serde_json::from_value(serde_json::json!({
            "tenantId": "t-1", "agentId": "01JD0000SVPP0RT0AGENT00001", "name": "A", "systemPrompt": "  Be kind.  ",
            "model": "m", "tools": ["send_message", "handoff_to_agent", "end_conversation"],
            "history": { "maxMessages": 3, "maxTokens": 1000 },
            "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap()
    }

    fn no_tools() -> Toolbox {
        Toolbox {
            owner: crate::tools::Owner::Agent,
            system: vec![SystemTool::SendMessage],
            custom: vec![],
            step: None,
            transitions: vec![],
            skills: vec![],
            loaded: vec![],
            sub_agents: vec![],
            max_result_bytes: None,
        }
    }

    fn session() -> Session {
        Session::start("t-1".parse().unwrap(), "c-1".into(), AgentId::generate(), chrono::Utc::now())
    }

    #[test]
    fn a_fresh_session_gets_the_agent_prompt_alone() {
        assert_eq!(system_prompt(&agent(), &session(), &no_tools(), &[]), "Be kind.");
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
            summary: Some("Wants a refund for order 1234.".into()),
        });
        let p = system_prompt(&agent(), &s, &no_tools(), &[]);
        assert!(p.contains("Summary so far: Wants a refund for order 1234."));
        assert!(p.contains("Reason: billing question"));
        assert!(p.contains(r#"{"topic":"refund"}"#));
        assert!(p.contains(r#"- orderNumber: "1234""#));
    }

    #[test]
    fn the_step_and_loaded_skills_follow_the_agent_prompt_and_the_last_level_is_announced() {
        let mut a = agent();
        a.steps = vec![switchboard_domain::AgentStep {
            step_id: "wrap_up".into(),
            name: "Wrap up".into(),
            system_prompt: "Confirm and say goodbye.".into(),
            tools: vec![],
            transition_tools: vec![],
            is_initial: true,
            is_final: true,
        }];
        let mut tools = no_tools();
        tools.step = a.steps.first().cloned();
        tools.loaded = vec![serde_json::from_value::<Skill>(serde_json::json!({
            "tenantId": "t-1", "skillId": "01JD0000SK1110000000000001", "name": "returns", "description": "Returns",
            "prompt": "Returns take 30 days.", "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap()];
        let mut s = session();
        s.handoff_depth = MAX_HANDOFF_DEPTH;
        let p = system_prompt(&a, &s, &tools, &[]);
        let step_at = p.find("## Current step: Wrap up\nConfirm and say goodbye.").unwrap();
        let skill_at = p.find("## Skill: returns\nReturns take 30 days.").unwrap();
        assert!(p.starts_with("Be kind.") && step_at < skill_at);
        assert!(p.contains("This is the final step"));
        assert!(p.contains("No further agent handoff"));
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
        assert_eq!(window.len(), 1, "customer messages in a row are one turn");
        assert_eq!(window[0].text(), "old 4\nold 5\nnew");
    }

    #[test]
    fn the_summary_replaces_what_it_covers_and_the_first_message_stays_in_the_prompt() {
        let mut s = session();
        for i in 0..4 {
            s.append_transcript([Message::user_text(format!("q{i}")), Message::assistant_text(format!("a{i}"))]);
        }
        s.summary = Some(switchboard_domain::ConversationSummary {
            text: "Asked q0 and q1.".into(),
            covers: 4,
            customer_messages: 2,
            updated_at: chrono::Utc::now(),
        });
        let mut a = agent();
        a.history.max_messages = 20;
        let window = messages(&a, &s, &Message::user_text("q4"));
        let texts: Vec<String> = window.iter().map(Message::text).collect();
        assert_eq!(texts, ["q2", "a2", "q3", "a3", "q4"]);
        let p = system_prompt(&a, &s, &no_tools(), &window);
        assert_eq!(
            p,
            "Be kind.\n\n## Earlier in this conversation\nAsked q0 and q1.\n\n## The customer's first message\nq0"
        );
        // While the window still holds the first message, it is not repeated.
        s.summary = None;
        let window = messages(&a, &s, &Message::user_text("q4"));
        assert_eq!(system_prompt(&a, &s, &no_tools(), &window), "Be kind.");
    }
}
