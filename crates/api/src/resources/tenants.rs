//! Tenants themselves: create (`POST /tenants`, admin), read (`GET /tenants/{t}`), change
//! (`PATCH`: name and recording by the owner, status and limits by an admin) and delete a
//! suspended one (`DELETE`, admin); and who the caller is (`GET …/me`). Which role reaches which
//! route is `crate::access`'s; the rules of a tenant write are the engine's configuration service.
//! The tenant's API keys are `keys`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::access::RouteGroup;
use switchboard_domain::input::read_value;
use switchboard_domain::{TenantId, ValidationErrors, tenant_name};
use switchboard_engine::{ConfigWriteError, TenantChanges};

use crate::auth::Caller;
use crate::extract::{JsonBody, Tenant};
use crate::problem::Problem;
use crate::state::ApiState;

/// `POST /tenants` (admin): `{tenantId, name}`; 201, or 409 when the tenant exists.
pub(crate) async fn create(
    State(state): State<Arc<ApiState>>,
    body: Result<JsonBody<Value>, Problem>,
) -> Result<Response, Problem> {
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
pub(crate) async fn delete(State(state): State<Arc<ApiState>>, Tenant(t): Tenant) -> Result<Response, Problem> {
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

/// `PATCH /tenants/{t}`: `{name?, recording?}` (owner), `{status?, limits?}` (admin; limits
/// change field by field). Suspending stops new work for the tenant (inbound messages are
/// recorded, not answered; `invoke` is refused) and keeps its data.
pub(crate) async fn update(
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    caller: Caller,
    body: Result<JsonBody<Value>, Problem>,
) -> Result<Response, Problem> {
    let JsonBody(v) = body?;
    let changes: TenantChanges = read_value(v, "").map_err(Problem::invalid)?;
    if !caller.is_admin() && (changes.status.is_some() || changes.limits.is_some()) {
        // The platform's to set: a tenant does not lift its own suspension or quotas.
        return Err(Problem::admin_only(format!(
            "a tenant's status and limits are changed by an admin; '{}' holds the {} role",
            caller.principal, caller.role
        )));
    }
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

/// `GET /tenants/{t}/me`: who the caller is (principal, role, tenant) and the route groups its
/// role reaches, so that a client (the console) can show who is signed in and offer only what
/// they may do.
pub(crate) async fn me(Tenant(t): Tenant, caller: Caller) -> Response {
    let groups: Vec<&str> =
        RouteGroup::ALL.into_iter().filter(|g| caller.role.may(*g)).map(RouteGroup::as_str).collect();
    Json(json!({
        "principal": caller.principal, "role": caller.role, "tenantId": t,
        "admin": caller.is_admin(), "groups": groups,
    }))
    .into_response()
}

/// The key routes' answer where keys are not managed over the API: on AWS, callers are IAM
/// principals (the internal-api Lambda is built without `keys`).
pub(crate) fn keys_elsewhere() -> Problem {
    Problem::not_found("API keys belong to the embedded profile; on AWS, IAM authorises callers")
}
