//! Rolling summaries (`history.summarizeAfter`): before a turn, once the session's transcript
//! holds more customer messages beyond its summary than the agent allows, the older ones — all
//! but the newest half — are folded into the summary by one model call (the agent's model, or
//! `history.summaryModel`). The fold always ends before a customer message, so it never splits a
//! tool call from its result. The call is recorded in the turn's execution (`purpose: summary`)
//! and its tokens count like any other; a summary that cannot be written (the call fails, the
//! input budget would not allow it) leaves the session as it was, and the turn goes on with the
//! window it has.

use std::time::Instant;

use switchboard_domain::message::{ContentBlock, Message, Role, cut_chars, is_customer_turn};
use switchboard_domain::{
    Agent, ConversationSummary, ExecutionError, ExecutionRecord, ModelConfig, Recording, Session,
};
use tracing::{info, warn};

use crate::fault::ExecError;
use crate::model_call::converse;
use crate::ports::{Deps, ModelRequest};

/// What the summarising model is told.
pub(crate) const SUMMARY_PROMPT: &str = "You keep the running summary of a customer conversation for the agent that \
continues it. Rewrite the summary so far to take in the newer messages: who the customer is, what they asked for, \
what was done, found or promised (tool results that matter included), and what is still open. Plain prose, at most \
200 words, no greeting. Answer with the summary alone.";

/// The longest summary kept, in characters; a longer answer is cut.
const MAX_SUMMARY_CHARS: usize = 4000;
/// Each folded message is shown to the summariser up to this many characters.
const MAX_RENDERED_CHARS: usize = 1000;
/// The output asked of the summary call.
const SUMMARY_MAX_TOKENS: u32 = 600;

/// Where the transcript's unsummarised part should be cut, if it holds more customer messages
/// than `summarize_after`: the index (in `unsummarized`) of the first message that stays, always
/// a customer message.
pub(crate) fn fold_point(unsummarized: &[Message], summarize_after: u32) -> Option<usize> {
    if summarize_after == 0 {
        return None;
    }
    let customers: Vec<usize> =
        unsummarized.iter().enumerate().filter(|(_, m)| is_customer_turn(m)).map(|(i, _)| i).collect();
    let limit = usize::try_from(summarize_after).unwrap_or(usize::MAX);
    if customers.len() <= limit {
        return None;
    }
    let keep = limit.div_ceil(2).max(1);
    customers.get(customers.len() - keep).copied().filter(|&at| at > 0)
}

/// Folds the session's older messages into its summary if the agent's `summarizeAfter` asks for
/// it; the call goes into `record`. `fits` says whether a call of so many estimated input tokens
/// is within the agent's budgets.
pub(super) async fn refresh(
    deps: &Deps,
    agent: &Agent,
    session: &mut Session,
    record: &mut ExecutionRecord,
    deadline: Option<Instant>,
    recording: Recording,
    fits: impl Fn(&ExecutionRecord, u64) -> bool,
) {
    let Some(cut) = fold_point(session.unsummarized(), agent.history.summarize_after) else { return };
    let folded = &session.unsummarized()[..cut];
    let previous = session.summary.as_ref().map(|s| s.text.as_str());
    let request = request(agent, previous, folded, deadline, recording);
    if !fits(record, request.estimated_input_tokens()) {
        warn!("the summary call would pass the agent's token budget; older messages stay unsummarised");
        return;
    }
    let calls_before = record.model_calls.len();
    let answer = converse(deps, &request, &mut record.token_usage, &mut record.model_calls, None).await;
    for call in &mut record.model_calls[calls_before..] {
        call.purpose = Some("summary".into());
    }
    let text = match answer {
        Ok(Ok(message)) => message.text(),
        Ok(Err(ExecutionError { message, .. })) | Err(ExecError { message, .. }) => {
            warn!(error = %message, "the summary call failed; older messages stay unsummarised");
            return;
        }
    };
    let text = cut_chars(text.trim(), MAX_SUMMARY_CHARS);
    if text.is_empty() {
        warn!("the summary call answered no text; older messages stay unsummarised");
        return;
    }
    let customers = u32::try_from(folded.iter().filter(|m| is_customer_turn(m)).count()).unwrap_or(u32::MAX);
    let (covers, before) = session.summary.as_ref().map_or((0, 0), |s| (s.covers, s.customer_messages));
    session.summary = Some(ConversationSummary {
        text,
        covers: covers + u32::try_from(cut).unwrap_or(u32::MAX),
        customer_messages: before.saturating_add(customers),
        updated_at: deps.clock.now(),
    });
    info!(folded_messages = cut, "older messages folded into the session's summary");
}

/// The summary call: the previous summary and the messages to fold, as text (no tool blocks, so
/// no tool configuration is needed).
fn request(
    agent: &Agent,
    previous: Option<&str>,
    folded: &[Message],
    deadline: Option<Instant>,
    recording: Recording,
) -> ModelRequest {
    let mut text = format!("Summary so far:\n{}\n\nNewer messages:\n", previous.unwrap_or("(none yet)"));
    for message in folded {
        for line in render(message) {
            text.push_str(&cut_chars(&line, MAX_RENDERED_CHARS));
            text.push('\n');
        }
    }
    text.push_str("\nWrite the updated summary.");
    let own_model = agent.history.summary_model.is_empty();
    let config = ModelConfig {
        temperature: 0.0,
        max_tokens: SUMMARY_MAX_TOKENS,
        fallback_models: if own_model { agent.model_config.fallback_models.clone() } else { vec![] },
        guardrail: if own_model { agent.model_config.guardrail.clone() } else { None },
        ..ModelConfig::default()
    };
    ModelRequest {
        model: if own_model { agent.model.clone() } else { agent.history.summary_model.clone() },
        system: SUMMARY_PROMPT.to_owned(),
        messages: vec![Message::user_text(text)],
        tools: vec![],
        config,
        deadline,
        recording,
    }
}

/// One line per block: who said what, which tool was called with what, what it answered.
fn render(message: &Message) -> Vec<String> {
    message
        .content
        .iter()
        .map(|block| match (message.role, block) {
            (Role::User, ContentBlock::Text { text }) => format!("Customer: {text}"),
            (Role::Assistant, ContentBlock::Text { text }) => format!("Agent: {text}"),
            (_, ContentBlock::ToolUse { name, input, .. }) => format!("Agent called {name} with {input}"),
            (_, ContentBlock::ToolResult { content, is_error, .. }) => {
                let what = if *is_error { "Tool error" } else { "Tool result" };
                let content = content.as_str().map_or_else(|| content.to_string(), str::to_owned);
                format!("{what}: {content}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation(customers: usize) -> Vec<Message> {
        let mut out = Vec::new();
        for i in 0..customers {
            out.push(Message::user_text(format!("q{i}")));
            out.push(Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    tool_use_id: format!("t{i}"),
                    name: "lookup".into(),
                    input: serde_json::json!({}),
                }],
            });
            out.push(Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: format!("t{i}"),
                    content: serde_json::json!("found"),
                    is_error: false,
                }],
            });
            out.push(Message::assistant_text(format!("a{i}")));
        }
        out
    }

    #[test]
    fn nothing_is_folded_up_to_the_limit_or_when_summaries_are_off() {
        assert_eq!(fold_point(&conversation(4), 4), None);
        assert_eq!(fold_point(&conversation(40), 0), None);
        assert_eq!(fold_point(&[], 1), None);
    }

    #[test]
    fn past_the_limit_all_but_the_newest_half_is_folded_at_a_customer_message() {
        let messages = conversation(5);
        // 5 customer messages > 4: keep the newest 2, fold the first 3 exchanges (12 messages).
        assert_eq!(fold_point(&messages, 4), Some(12));
        assert_eq!(messages[12].text(), "q3");
        // An odd limit keeps the larger half.
        assert_eq!(fold_point(&conversation(4), 3), Some(8));
        assert_eq!(fold_point(&conversation(3), 1), Some(8));
    }

    #[test]
    fn the_summary_request_renders_who_said_what_without_tool_blocks() {
        let agent: Agent = serde_json::from_value(serde_json::json!({
            "tenantId": "t-1", "agentId": "01JD0000SVPP0RT0AGENT00001", "name": "A", "systemPrompt": "Help.",
            "model": "bedrock:m", "history": { "summaryModel": "openai:small" },
            "createdAt": "2026-11-23T00:00:00Z", "updatedAt": "2026-11-23T00:00:00Z"
        }))
        .unwrap();
        let r = request(&agent, Some("Asked about q0."), &conversation(1), None, Recording::Full);
        assert_eq!(r.model, "openai:small");
        assert!(r.tools.is_empty() && r.messages.len() == 1);
        assert_eq!(
            r.messages[0].text(),
            "Summary so far:\nAsked about q0.\n\nNewer messages:\nCustomer: q0\nAgent called lookup with {}\n\
             Tool result: found\nAgent: a0\n\nWrite the updated summary."
        );
    }
}
