//! The conversation itself: sending replies into it, and the local log the embedded profile
//! keeps in place of the Conversations Service.

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

/// Sends replies into conversations. Must honour `idempotency_key`: a second send with the same
/// key sends nothing and returns the first message's id.
#[async_trait]
pub trait Conversations: Send + Sync {
    async fn send_reply(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError>;
}

/// A message in the local conversation log of the embedded profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedMessage {
    pub message_id: String,
    /// `inbound` (from the customer) or `outbound` (from the agent).
    pub direction: String,
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
