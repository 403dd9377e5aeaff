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
