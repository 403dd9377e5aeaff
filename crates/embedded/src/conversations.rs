//! `LocalConversations`: where the embedded profile delivers replies — the conversation log in
//! SQLite, keyed by idempotency key so that a replayed turn never sends twice — and reads a
//! conversation's history from.

use async_trait::async_trait;
use switchboard_domain::TenantId;
use switchboard_engine::{ConversationError, Conversations, HistoryMessage, Sender, Sent};

use crate::store::SqliteStore;

#[derive(Debug, Clone)]
pub struct LocalConversations {
    store: SqliteStore,
}

impl LocalConversations {
    pub fn new(store: SqliteStore) -> Self {
        Self { store }
    }
}

impl LocalConversations {
    /// Logs an outbound message from `sender` under its idempotency key.
    async fn send(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
        sender: Sender,
    ) -> Result<Sent, ConversationError> {
        let (message_id, duplicate) = self
            .store
            .record_sent(tenant, conversation_id, text, idempotency_key, sender)
            .await
            .map_err(|e| ConversationError { message: e.to_string(), retryable: e.retryable() })?;
        Ok(Sent { message_id, duplicate })
    }
}

#[async_trait]
impl Conversations for LocalConversations {
    async fn send_reply(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        self.send(tenant, conversation_id, text, idempotency_key, Sender::Agent).await
    }

    async fn send_human(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        _operator: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        self.send(tenant, conversation_id, text, idempotency_key, Sender::Human).await
    }

    async fn history(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryMessage>, ConversationError> {
        let logged = self
            .store
            .recent_messages(tenant, conversation_id, limit)
            .await
            .map_err(|e| ConversationError { message: e.to_string(), retryable: e.retryable() })?;
        Ok(logged
            .into_iter()
            .map(|m| HistoryMessage { message_id: m.message_id, sender: m.sender, text: m.text, sent_at: m.created_at })
            .collect())
    }
}
