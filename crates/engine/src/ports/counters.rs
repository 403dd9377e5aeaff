//! Tenant counters: the atomic, windowed counts that tenant limits are enforced with. One count
//! per tenant and window, shared by every process of a profile (SQLite embedded, DynamoDB on
//! AWS), so that no number of workers or Lambda containers admits more than the limit.

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
}
