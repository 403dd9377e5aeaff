//! Tenant counters: the atomic, windowed counts that tenant limits are enforced with. One count
//! per tenant and window, shared by every process of a profile (SQLite embedded, DynamoDB on
//! AWS), so that no number of workers or Lambda containers admits more than the limit. Also the
//! tenant's session slots: one per conversation an agent is answering, leased until idle.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_domain::TenantId;

use super::StoreError;

#[async_trait]
pub trait Counters: Send + Sync {
    /// Adds one to the tenant's count of `window` unless it has already reached `limit`: `true`
    /// when counted. Concurrent callers never take more than `limit` between them. The count
    /// may be forgotten after `expires`.
    async fn take(
        &self,
        tenant: &TenantId,
        window: &str,
        limit: u64,
        expires: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// `true` for exactly one caller per tenant and `window`, whoever asks first (the one that
    /// announces that a limit was reached).
    async fn first(&self, tenant: &TenantId, window: &str, expires: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Holds one of the tenant's `limit` session slots for `conversation` until `until`. A
    /// conversation that holds one (even past its `until`, while no one has taken it) keeps it
    /// and it is renewed; otherwise it takes a free one, freeing first the slots whose `until`
    /// has passed `now`. Concurrent callers never hold more than `limit` between them.
    async fn hold_slot(
        &self,
        tenant: &TenantId,
        conversation: &str,
        limit: u64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Slot, StoreError>;

    /// Frees the conversation's slot, if it holds one.
    async fn release_slot(&self, tenant: &TenantId, conversation: &str) -> Result<(), StoreError>;
}

/// What [`Counters::hold_slot`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The conversation holds a slot; `new` when it was just taken (not renewed).
    Held { new: bool },
    /// Every slot is held; the first may come free at `frees_at`, unless it is renewed.
    Full { frees_at: DateTime<Utc> },
}

/// No counting at all: everything is admitted (tests of other parts of the engine).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCounters;

#[async_trait]
impl Counters for NoCounters {
    async fn take(&self, _: &TenantId, _: &str, _: u64, _: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn first(&self, _: &TenantId, _: &str, _: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn hold_slot(
        &self,
        _: &TenantId,
        _: &str,
        _: u64,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> Result<Slot, StoreError> {
        Ok(Slot::Held { new: false })
    }

    async fn release_slot(&self, _: &TenantId, _: &str) -> Result<(), StoreError> {
        Ok(())
    }
}
