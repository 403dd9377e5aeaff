//! Who is calling, in which role, and may they touch this tenant. The embedded profile
//! authenticates API keys (`Authorization: Bearer <key>`; the store keeps only their SHA-256),
//! each held by a named principal with a role; on AWS, API Gateway's IAM auth and policies per
//! route group do it before the request reaches the Lambda, which takes the caller's IAM
//! principal from the request context as its name. A caller that may not see a tenant gets the
//! same 404 as for a tenant that does not exist, so tenants cannot be discovered; a caller whose
//! role does not admit a route gets 403 naming the roles that do (checked in `middleware`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use chrono::{DateTime, Utc};
use switchboard_domain::TenantId;
use switchboard_domain::access::Role;
use switchboard_engine::StoreError;

use crate::problem::Problem;

/// The authenticated caller of a request: a named principal with a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Who: the key's principal (`alice@example.com`), or the IAM principal's ARN on AWS. It is
    /// what records name as the writer of a change and the operator of an action.
    pub principal: String,
    pub role: Role,
    /// The tenant the principal belongs to; `None` for an admin, who spans every tenant.
    pub tenant: Option<TenantId>,
}

impl Caller {
    /// An admin of every tenant.
    pub fn admin(principal: impl Into<String>) -> Self {
        Self { principal: principal.into(), role: Role::Admin, tenant: None }
    }

    /// A principal of `tenant` in `role`.
    pub fn member(tenant: TenantId, principal: impl Into<String>, role: Role) -> Self {
        Self { principal: principal.into(), role, tenant: Some(tenant) }
    }

    /// A caller API Gateway's IAM auth let in (AWS): its IAM policy already decided which
    /// routes and tenants it reaches, so the function admits it to every route it arrives at.
    pub fn iam(principal: impl Into<String>) -> Self {
        Self::admin(principal)
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    pub fn may_access(&self, tenant: &TenantId) -> bool {
        self.is_admin() || self.tenant.as_ref() == Some(tenant)
    }
}

/// What a new API key grants: the principal who holds it, its role and when it stops working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGrant {
    pub principal: String,
    pub role: Role,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A tenant's API key as listed: its id (the first 16 hex digits of the key's SHA-256), never
/// the key; whose it is, in which role; when it was made, when it expires and when it was last
/// used (to the minute).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    pub key_id: String,
    pub principal: String,
    pub role: Role,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub last_used_at: Option<String>,
}

/// Resolves API keys to callers, and keeps tenants' keys (the embedded profile; on AWS callers
/// are IAM principals and there are no keys).
#[async_trait]
pub trait Authenticator: Send + Sync {
    /// `None` for a key that is unknown, revoked or past its expiry. Notes the key's use.
    async fn authenticate(&self, key: &str) -> Result<Option<Caller>, StoreError>;
    /// A new key for `tenant`: the key itself (shown this once) and how it is listed.
    async fn issue_key(&self, tenant: &TenantId, grant: &KeyGrant) -> Result<(String, KeyInfo), StoreError>;
    /// The tenant's keys, oldest first.
    async fn tenant_keys(&self, tenant: &TenantId) -> Result<Vec<KeyInfo>, StoreError>;
    /// Revokes the tenant's key `key_id` at once: `false` if the tenant has no such key.
    async fn revoke_key(&self, tenant: &TenantId, key_id: &str) -> Result<bool, StoreError>;
    /// Replaces the tenant's key `key_id` by a new one with the same grant, in one step: the old
    /// key stops working as the new one starts. `None` if the tenant has no such key.
    async fn rotate_key(&self, tenant: &TenantId, key_id: &str) -> Result<Option<(String, KeyInfo)>, StoreError>;
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Without an authenticator (AWS behind IAM) every request that arrives was allowed in;
        // the Lambda names the caller from the request context when it has one.
        Ok(parts.extensions.get::<Caller>().cloned().unwrap_or_else(|| Caller::iam("iam")))
    }
}

/// Who a configuration write is kept as written by, and who an operator action is recorded
/// as: the authenticated principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Writer {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Writer(Caller::from_request_parts(parts, state).await?.principal))
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
