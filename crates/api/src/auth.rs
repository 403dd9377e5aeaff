//! Who is calling, and may they touch this tenant. The embedded profile authenticates API keys
//! (`Authorization: Bearer <key>`; the store keeps only their SHA-256); on AWS, API Gateway's IAM
//! auth and path-scoped policies do it before the request reaches the Lambda, which then runs
//! without an authenticator (the check itself runs in `middleware`). A caller that may not see a tenant gets the same 404 as for a
//! tenant that does not exist, so tenants cannot be discovered.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use switchboard_domain::TenantId;
use switchboard_engine::StoreError;

use crate::problem::Problem;

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// May act on every tenant (the embedded admin key, or any caller IAM let through on AWS).
    Admin,
    /// May act on this tenant only.
    Tenant(TenantId),
}

impl Caller {
    pub fn may_access(&self, tenant: &TenantId) -> bool {
        match self {
            Caller::Admin => true,
            Caller::Tenant(t) => t == tenant,
        }
    }
}

/// A tenant's API key as listed: its id (the first 16 hex digits of the key's SHA-256), never
/// the key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    pub key_id: String,
    pub created_at: String,
}

/// Resolves API keys to callers, and keeps tenants' keys (the embedded profile; on AWS callers
/// are IAM principals and there are no keys).
#[async_trait]
pub trait Authenticator: Send + Sync {
    /// `None` for an unknown key.
    async fn authenticate(&self, key: &str) -> Result<Option<Caller>, StoreError>;
    /// A new key for `tenant`: the key itself (shown this once) and how it is listed.
    async fn issue_key(&self, tenant: &TenantId) -> Result<(String, KeyInfo), StoreError>;
    /// The tenant's keys, oldest first.
    async fn tenant_keys(&self, tenant: &TenantId) -> Result<Vec<KeyInfo>, StoreError>;
    /// Revokes the tenant's key `key_id` at once: `false` if the tenant has no such key.
    async fn revoke_key(&self, tenant: &TenantId, key_id: &str) -> Result<bool, StoreError>;
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Without an authenticator (AWS behind IAM) every request that arrives was allowed in.
        Ok(parts.extensions.get::<Caller>().cloned().unwrap_or(Caller::Admin))
    }
}

/// Who a configuration write is kept as written by: the kind of credential the request came
/// with (`admin key`, `tenant key`), or `iam` when no authenticator runs (AWS, where API
/// Gateway's IAM auth admitted the caller). There is no authenticated person yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Writer(pub &'static str);

impl<S: Send + Sync> FromRequestParts<S> for Writer {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Writer(match parts.extensions.get::<Caller>() {
            Some(Caller::Admin) => "admin key",
            Some(Caller::Tenant(_)) => "tenant key",
            None => "iam",
        }))
    }
}

/// Per-tenant requests per minute, as a sliding window of request times.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: usize,
    windows: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl RateLimiter {
    pub fn new(per_minute: usize) -> Self {
        Self { per_minute: per_minute.max(1), windows: Mutex::new(HashMap::new()) }
    }

    /// Counts a request for `tenant`, or says how long until one is allowed.
    pub fn check(&self, tenant: &str) -> Result<(), Duration> {
        self.check_at(tenant, Instant::now())
    }

    pub(crate) fn check_at(&self, tenant: &str, now: Instant) -> Result<(), Duration> {
        const WINDOW: Duration = Duration::from_secs(60);
        let Ok(mut windows) = self.windows.lock() else { return Ok(()) };
        let window = windows.entry(tenant.to_owned()).or_default();
        while window.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
            window.pop_front();
        }
        if window.len() >= self.per_minute {
            let oldest = window.front().copied().unwrap_or(now);
            return Err(WINDOW.saturating_sub(now.duration_since(oldest)));
        }
        window.push_back(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_slides() {
        let limiter = RateLimiter::new(2);
        let start = Instant::now();
        assert!(limiter.check_at("t", start).is_ok());
        assert!(limiter.check_at("t", start + Duration::from_secs(10)).is_ok());
        // a third request within the minute waits until the first one leaves the window
        assert_eq!(limiter.check_at("t", start + Duration::from_secs(20)), Err(Duration::from_secs(40)));
        // another tenant is not affected
        assert!(limiter.check_at("u", start + Duration::from_secs(20)).is_ok());
        assert!(limiter.check_at("t", start + Duration::from_secs(60)).is_ok());
    }
}
