//! The conversation's history at a session's first turn: a trigger that fires on the fifth
//! message of a conversation, or an agent taking a conversation back from a human, should see
//! what was said before — the customer's messages from before any agent joined, and what a human
//! operator wrote. At the first turn of such a session (not one another agent handed on: its
//! handoff carried the conversation) the executor reads the conversation's newest messages (as
//! many as the agent's window holds) from the Conversations port once; when it has any besides
//! the message being answered, they become the session's transcript (as text, in the order they
//! were written), in place of what a handback carried, which they include. A read that fails
//! leaves the transcript as it was, with a log line: a turn never fails for it.

use switchboard_domain::message::{ContentBlock, Message, text_only};
use switchboard_domain::{Agent, Session};
use tracing::{info, warn};

use crate::ports::{Deps, HistoryMessage, Sender, WorkItem};

/// How a human operator's message is marked for the model.
pub(crate) const HUMAN_PREFIX: &str = "[human operator] ";

/// Reads the history if this is the first turn of a session that did not come from another
/// agent (whose handoff carried the conversation), and puts it in the transcript.
pub(super) async fn load(deps: &Deps, item: &WorkItem, agent: &Agent, session: &mut Session) {
    // A fresh session and a conversation a human handed back are at depth 0; an agent's handoff
    // is deeper.
    if session.turn_count > 0 || session.handoff_depth > 0 {
        return;
    }
    let limit = usize::try_from(agent.history.max_messages).unwrap_or(usize::MAX);
    let history = match deps.conversations.history(&item.tenant_id, &item.conversation_id, limit).await {
        Ok(h) => h,
        Err(e) => {
            warn!(error = %e.message, "the conversation's history could not be read; the turn goes on with the session's transcript");
            return;
        }
    };
    let messages = as_transcript(history, item);
    if messages.is_empty() {
        return;
    }
    info!(messages = messages.len(), "the conversation's history opens the session");
    if session.first_message.is_none() {
        // The first customer message as written (neighbours were merged into its turn).
        session.first_message = messages.first().and_then(|m| m.content.first()).and_then(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        });
    }
    session.transcript = messages;
    if let Some(summary) = &mut session.summary {
        summary.covers = 0;
    }
}

/// The history as transcript messages: what came before the message being answered (it is the
/// turn's new message; what came after it is not yet said for this turn — later messages, and a
/// reply an earlier run of this very turn sent), a human operator's messages marked, neighbouring
/// messages of one role merged, and the start moved to the first customer message.
fn as_transcript(history: Vec<HistoryMessage>, item: &WorkItem) -> Vec<Message> {
    let mut history = history;
    if let Some(at) = history.iter().rposition(|m| m.message_id == item.first_message_id()) {
        history.truncate(at);
    }
    let messages = history.into_iter().filter(|m| !m.text.trim().is_empty()).map(|m| match m.sender {
        Sender::Customer => Message::user_text(m.text),
        Sender::Agent => Message::assistant_text(m.text),
        Sender::Human => Message::assistant_text(format!("{HUMAN_PREFIX}{}", m.text)),
    });
    text_only(&messages.collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_domain::message::Role;

    fn item() -> WorkItem {
        serde_json::from_value(serde_json::json!({
            "tenantId": "t-1", "sourceId": "evt-5", "conversationId": "c-1", "messageId": "m-5", "text": "refund please",
            "agentId": "01JD0000SVPP0RT0AGENT00001", "detail": {}
        }))
        .unwrap()
    }

    fn said(id: &str, sender: Sender, text: &str) -> HistoryMessage {
        HistoryMessage { message_id: id.into(), sender, text: text.into(), sent_at: chrono::Utc::now() }
    }

    #[test]
    fn the_history_becomes_a_transcript_without_the_message_being_answered() {
        let history = vec![
            said("m-0", Sender::Agent, "Welcome to Acme!"),
            said("m-1", Sender::Customer, "hi"),
            said("m-2", Sender::Customer, "my parcel is late"),
            said("m-3", Sender::Human, "Let me check."),
            said("m-4", Sender::Customer, "ok"),
            said("m-5", Sender::Customer, "refund please"),
        ];
        let t = as_transcript(history, &item());
        let shown: Vec<(Role, String)> = t.iter().map(|m| (m.role, m.text())).collect();
        assert_eq!(
            shown,
            [
                (Role::User, "hi\nmy parcel is late".to_owned()),
                (Role::Assistant, "[human operator] Let me check.".to_owned()),
                (Role::User, "ok".to_owned()),
            ]
        );
    }

    #[test]
    fn what_came_after_the_message_is_not_its_history() {
        // later messages queued behind it, and the reply a first run of this turn already sent
        let history = vec![
            said("m-4", Sender::Customer, "hi"),
            said("m-5", Sender::Customer, "refund please"),
            said("r-1", Sender::Agent, "Done."),
            said("m-6", Sender::Customer, "hello?"),
        ];
        let t = as_transcript(history, &item());
        let shown: Vec<(Role, String)> = t.iter().map(|m| (m.role, m.text())).collect();
        assert_eq!(shown, [(Role::User, "hi".to_owned())]);
    }

    #[test]
    fn a_history_of_the_message_alone_gives_nothing() {
        assert!(as_transcript(vec![said("m-5", Sender::Customer, "refund please")], &item()).is_empty());
        assert!(as_transcript(vec![], &item()).is_empty());
    }
}
