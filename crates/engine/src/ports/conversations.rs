//! The conversation itself: sending replies into it, reading its recent history (whoever wrote
//! it), and the local log the embedded profile keeps in place of the Conversations Service.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use switchboard_domain::TenantId;

use super::StoreError;

/// A reply as accepted by the conversation system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub message_id: String,
    /// The idempotency key had been used: nothing new was sent.
    pub duplicate: bool,
}

/// Who wrote a message of the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sender {
    Customer,
    /// An agent of Switchboard.
    Agent,
    /// A human operator.
    Human,
}

/// One message of a conversation's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryMessage {
    pub message_id: String,
    pub sender: Sender,
    pub text: String,
    pub sent_at: DateTime<Utc>,
}

/// Sends replies into conversations and reads their history. `send_reply` must honour
/// `idempotency_key`: a second send with the same key sends nothing and returns the first
/// message's id.
#[async_trait]
pub trait Conversations: Send + Sync {
    async fn send_reply(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError>;

    /// Sends a human operator's message (the console's reply), honouring `idempotency_key` as
    /// `send_reply` does; the conversation shows it as `operator`'s, not an agent's.
    async fn send_human(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        operator: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError>;

    /// The conversation's newest `limit` messages, oldest first: the customer's, the agents' and
    /// the human operators', including those from before any agent joined.
    async fn history(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryMessage>, ConversationError>;
}

/// A message in the local conversation log of the embedded profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedMessage {
    pub message_id: String,
    /// `inbound` (from the customer) or `outbound` (from an agent or a human operator).
    pub direction: String,
    pub sender: Sender,
    pub text: String,
    pub created_at: DateTime<Utc>,
}

/// The conversation log the embedded profile keeps in place of the Conversations Service:
/// inbound messages as they arrive, replies as they are sent. (On AWS the conversation lives in
/// the Conversations Service and this port has no adapter.)
#[async_trait]
pub trait ConversationLog: Send + Sync {
    /// Records an inbound message; `false` if that message id was already recorded.
    async fn record_inbound(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        message_id: &str,
        text: &str,
    ) -> Result<bool, StoreError>;
    /// The conversation's messages, oldest first, at most `limit`.
    async fn messages(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<LoggedMessage>, StoreError>;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("conversations: {message}")]
pub struct ConversationError {
    pub message: String,
    pub retryable: bool,
}
