//! A tenant's API keys over the API (`…/keys`, the tenant's owner or an admin; the embedded
//! profile): issued for a principal in a role, listed, rotated, revoked. The keys themselves are
//! the profile's `Authenticator`; without one (AWS, where callers are IAM principals) every route
//! answers 404 saying so. Built only with the `api-keys` feature (not into the internal-api
//! Lambda, whose key routes answer that 404 without it).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::access::Role;
use switchboard_domain::input::read_value;
use switchboard_domain::{TenantId, ValidationErrors};

use crate::auth::{Authenticator, Caller, KeyGrant, KeyInfo};
use crate::extract::{JsonBody, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

/// The tenant a key route names and the profile's keys; on AWS, where callers are IAM
/// principals, there are no keys to manage.
async fn key_store(state: &ApiState, t: &TenantId) -> Result<Arc<dyn Authenticator>, Problem> {
    let Some(auth) = state.auth.clone() else {
        return Err(super::tenants::keys_elsewhere());
    };
    if !state.config.tenant_exists(t).await? {
        return Err(Problem::not_found(format!("no tenant '{t}'")));
    }
    Ok(auth)
}

/// Longest principal name a key is issued for.
pub const MAX_PRINCIPAL_CHARS: usize = 128;

/// The body of `POST …/keys`: `{principal, role, expiresAt?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NewKey {
    principal: String,
    role: String,
    #[serde(default)]
    expires_at: Option<String>,
}

impl NewKey {
    /// The grant this asks for, or every field at fault. `now` bounds the expiry.
    fn grant(self, now: chrono::DateTime<chrono::Utc>) -> Result<KeyGrant, ValidationErrors> {
        let mut errors = ValidationErrors::default();
        let principal = self.principal.trim();
        let n = principal.chars().count();
        if n == 0 || n > MAX_PRINCIPAL_CHARS || principal.chars().any(char::is_control) {
            errors.push(
                "/principal",
                format!("must be 1 to {MAX_PRINCIPAL_CHARS} characters, no control characters (a person's or a program's name)"),
            );
        }
        let role = match self.role.parse::<Role>() {
            Ok(Role::Admin) => {
                errors.push("/role", "admin keys span every tenant and are not issued per tenant");
                None
            }
            Ok(role) => Some(role),
            Err(e) => {
                errors.push("/role", e);
                None
            }
        };
        let expires_at = match self.expires_at.as_deref().map(chrono::DateTime::parse_from_rfc3339) {
            None => None,
            Some(Ok(at)) if at.with_timezone(&chrono::Utc) > now => Some(at.with_timezone(&chrono::Utc)),
            Some(Ok(_)) => {
                errors.push("/expiresAt", "must be in the future");
                None
            }
            Some(Err(_)) => {
                errors.push("/expiresAt", "must be an RFC 3339 time, such as 2027-01-31T00:00:00Z");
                None
            }
        };
        errors.into_result()?;
        match role {
            Some(role) => Ok(KeyGrant { principal: principal.to_owned(), role, expires_at }),
            None => Err(ValidationErrors::single("/role", "is required")),
        }
    }
}

/// A key's answer when it is made: the key itself, shown this once, beside how it is listed;
/// no cache keeps it.
fn issued(t: &TenantId, key: &str, info: &KeyInfo, status: StatusCode) -> Response {
    let mut body = serde_json::to_value(info).unwrap_or_else(|_| json!({}));
    body["key"] = json!(key);
    let mut res = (status, Json(body)).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/tenants/{t}/keys/{}", info.key_id)) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// `POST /tenants/{t}/keys {principal, role, expiresAt?}` (owner): a new API key for a
/// principal of the tenant, shown in this answer only.
pub(crate) async fn issue_key(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    JsonBody(body): JsonBody<Value>,
) -> Result<Response, Problem> {
    let auth = key_store(&state, &t).await?;
    let new: NewKey = read_value(body, "").map_err(Problem::invalid)?;
    let grant = new.grant(state.executor.deps().clock.now()).map_err(Problem::invalid)?;
    let (key, info) = auth.issue_key(&t, &grant).await?;
    tracing::info!(tenant = %t, key_id = %info.key_id, role = %info.role, by = %caller.principal, "API key issued");
    Ok(issued(&t, &key, &info, StatusCode::CREATED))
}

/// `GET /tenants/{t}/keys` (owner): the tenant's keys by id, never the keys.
pub(crate) async fn list_keys(State(state): State<Arc<ApiState>>, Tenant(t): Tenant) -> Result<Response, Problem> {
    let auth = key_store(&state, &t).await?;
    Ok(Json(json!({ "keys": auth.tenant_keys(&t).await? })).into_response())
}

/// `POST /tenants/{t}/keys/{keyId}/rotate` (owner): a new key for the same principal, role and
/// expiry; the old one stops working in the same step. `201` with the new key, shown once.
pub(crate) async fn rotate_key(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Path((_, key_id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let auth = key_store(&state, &t).await?;
    let Some((key, info)) = auth.rotate_key(&t, &key_id).await? else {
        return Err(Problem::not_found(format!("no key '{key_id}' in tenant '{t}'")));
    };
    tracing::info!(tenant = %t, old_key_id = %key_id, key_id = %info.key_id, by = %caller.principal, "API key rotated");
    Ok(issued(&t, &key, &info, StatusCode::CREATED))
}

/// `DELETE /tenants/{t}/keys/{keyId}` (owner): the key stops working with the next request.
pub(crate) async fn revoke_key(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    Path((_, key_id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let auth = key_store(&state, &t).await?;
    if !auth.revoke_key(&t, &key_id).await? {
        return Err(Problem::not_found(format!("no key '{key_id}' in tenant '{t}'")));
    }
    tracing::info!(tenant = %t, key_id = %key_id, by = %caller.principal, "API key revoked");
    Ok(StatusCode::NO_CONTENT.into_response())
}
