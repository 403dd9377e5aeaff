//! Tenants themselves: create (`POST /tenants`, admin), read (`GET /tenants/{t}`), change
//! (`PATCH`, admin: name, status, limits) and delete a suspended one (`DELETE`, admin), and the
//! tenant's API keys (`…/keys`, admin, embedded profile). The rules of a tenant write are the
//! engine's configuration service; the keys are the profile's authenticator.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::input::read_value;
use switchboard_domain::{TenantId, ValidationErrors, tenant_name};
use switchboard_engine::{ConfigWriteError, TenantChanges};

use crate::auth::{Authenticator, Caller};
use crate::extract::{JsonBody, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

/// `POST /tenants` (admin): `{tenantId, name}`; 201, or 409 when the tenant exists.
pub(crate) async fn create(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    body: Result<JsonBody<Value>, Problem>,
) -> Result<Response, Problem> {
    if caller != Caller::Admin {
        // A tenant key cannot tell which tenants exist, nor make one.
        return Err(Problem::not_found("no such route"));
    }
    let JsonBody(v) = body?;
    let (tenant, name) = new_tenant(v).map_err(Problem::invalid)?;
    let created = state.config_service().create_tenant(&tenant, &name).await.map_err(|e| refused(&tenant, e))?;
    if !created {
        return Err(Problem::conflict(format!("tenant '{tenant}' already exists")));
    }
    let mut res = (StatusCode::CREATED, Json(json!({ "tenantId": tenant, "name": name }))).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/tenants/{tenant}")) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(res)
}

/// The body of `POST /tenants`: `{tenantId, name}`, the name trimmed, or every field at fault.
pub(crate) fn new_tenant(body: Value) -> Result<(TenantId, String), ValidationErrors> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct NewTenant {
        tenant_id: String,
        name: String,
    }
    let new: NewTenant = read_value(body, "")?;
    let mut errors = ValidationErrors::default();
    let tenant = new.tenant_id.parse::<TenantId>().map_err(|e| errors.push("/tenantId", e.to_string())).ok();
    let name = tenant_name(&new.name).map_err(|e| errors.push("/name", e.to_string())).ok();
    errors.into_result()?;
    match (tenant, name) {
        (Some(tenant), Some(name)) => Ok((tenant, name.to_owned())),
        // Each `None` pushed its error above.
        _ => Err(ValidationErrors::single("", "is not a tenant")),
    }
}

/// `GET /tenants/{t}`: the tenant's record (its own key or an admin).
pub(crate) async fn get_one(State(state): State<Arc<ApiState>>, Tenant(t): Tenant) -> Result<Response, Problem> {
    match state.config.get_tenant(&t).await? {
        Some(tenant) => Ok(Json(tenant).into_response()),
        None => Err(Problem::not_found(format!("no tenant '{t}'"))),
    }
}

/// `DELETE /tenants/{t}` (admin): removes a suspended tenant and everything kept for it. `204`
/// when nothing is left; `202 {status: deleting}` when the store stopped with more to remove
/// (a large tenant on DynamoDB): call again. `409` while the tenant is not suspended, so that
/// nothing new runs for it meanwhile and a live tenant is never deleted by one mistaken call.
pub(crate) async fn delete(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
) -> Result<Response, Problem> {
    if caller != Caller::Admin {
        return Err(Problem::not_found("no such route"));
    }
    let Some(tenant) = state.config.get_tenant(&t).await? else {
        return Err(Problem::not_found(format!("no tenant '{t}'")));
    };
    if tenant.status != switchboard_domain::TenantStatus::Suspended {
        return Err(Problem::conflict(format!(
            "tenant {t} is {}: suspend it first (PATCH /tenants/{t} {{\"status\": \"suspended\"}})",
            tenant.status.as_str()
        )));
    }
    if state.admin.delete_tenant(&t).await? {
        tracing::info!(tenant = %t, "tenant deleted");
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        tracing::info!(tenant = %t, "tenant partly deleted; more to do");
        Ok((StatusCode::ACCEPTED, Json(json!({ "status": "deleting", "tenantId": t }))).into_response())
    }
}

/// `PATCH /tenants/{t}` (admin): `{name?, status?, limits?}` (limits change field by field);
/// suspending stops new work for the tenant
/// (inbound messages are recorded, not answered; `invoke` is refused) and keeps its data.
pub(crate) async fn update(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    body: Result<JsonBody<Value>, Problem>,
) -> Result<Response, Problem> {
    if caller != Caller::Admin {
        return Err(Problem::not_found("no such route"));
    }
    let JsonBody(v) = body?;
    let changes: TenantChanges = read_value(v, "").map_err(Problem::invalid)?;
    let tenant = state.config_service().update_tenant(&t, changes).await.map_err(|e| refused(&t, e))?;
    tracing::info!(tenant = %t, status = tenant.status.as_str(), "tenant updated");
    Ok(Json(tenant).into_response())
}

/// The API's answer to a refused write of tenant `t`.
fn refused(t: &TenantId, e: ConfigWriteError) -> Problem {
    match e {
        ConfigWriteError::Invalid(errors) => Problem::invalid(errors),
        ConfigWriteError::NotFound => Problem::not_found(format!("no tenant '{t}'")),
        ConfigWriteError::Store(e) => e.into(),
        // Tenants have no versions and nothing refers to them.
        ConfigWriteError::VersionMismatch { .. } | ConfigWriteError::InUse(_) => Problem::internal(),
    }
}

/// The tenant a key route names, for an admin on a profile with API keys. A tenant key gets
/// the 404 an unknown tenant gets (it may not manage keys, not even its own); on AWS, where
/// callers are IAM principals, there are no keys to manage.
async fn key_admin(
    state: &ApiState,
    caller: &Caller,
    tenant_raw: &str,
) -> Result<(TenantId, Arc<dyn Authenticator>), Problem> {
    let no_tenant = || Problem::not_found(format!("no tenant '{tenant_raw}'"));
    let t: TenantId = tenant_raw.parse().map_err(|_| no_tenant())?;
    if *caller != Caller::Admin {
        return Err(no_tenant());
    }
    let Some(auth) = state.auth.clone() else {
        return Err(Problem::not_found("API keys belong to the embedded profile; on AWS, IAM authorises callers"));
    };
    if !state.config.tenant_exists(&t).await? {
        return Err(no_tenant());
    }
    Ok((t, auth))
}

/// `POST /tenants/{t}/keys` (admin): a new API key for the tenant, shown in this answer only.
pub(crate) async fn issue_key(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
) -> Result<Response, Problem> {
    let (t, auth) = key_admin(&state, &caller, &tenant_raw).await?;
    let (key, info) = auth.issue_key(&t).await?;
    tracing::info!(tenant = %t, key_id = %info.key_id, "API key issued");
    let body = json!({ "keyId": info.key_id, "key": key, "createdAt": info.created_at });
    let mut res = (StatusCode::CREATED, Json(body)).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/tenants/{t}/keys/{}", info.key_id)) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    // The body holds a secret: no cache keeps it.
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(res)
}

/// `GET /tenants/{t}/keys` (admin): the tenant's keys by id, never the keys.
pub(crate) async fn list_keys(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
) -> Result<Response, Problem> {
    let (t, auth) = key_admin(&state, &caller, &tenant_raw).await?;
    Ok(Json(json!({ "keys": auth.tenant_keys(&t).await? })).into_response())
}

/// `DELETE /tenants/{t}/keys/{keyId}` (admin): the key stops working with the next request.
pub(crate) async fn revoke_key(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, key_id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let (t, auth) = key_admin(&state, &caller, &tenant_raw).await?;
    if !auth.revoke_key(&t, &key_id).await? {
        return Err(Problem::not_found(format!("no key '{key_id}' in tenant '{t}'")));
    }
    tracing::info!(tenant = %t, key_id = %key_id, "API key revoked");
    Ok(StatusCode::NO_CONTENT.into_response())
}
