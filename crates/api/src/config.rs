//! Tenant configuration over HTTP: agents, triggers, tools and skills, one set of handlers for
//! all four kinds. Create is `POST` (the server assigns the id), replace is `PUT` with `If-Match`
//! (the record's version as its `ETag`), delete refuses while another record refers to the
//! target. Bodies are strict: unknown fields and server-owned fields (ids, tenant, timestamps,
//! version) are refused with a pointer to the field. The rules of the write itself (validation,
//! references within the tenant, versions, deletes of used records) are the engine's
//! `ConfigService`; this module maps HTTP onto it.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::input::record_from_input;
use switchboard_domain::{
    AgentId, AgentStatus, AgentType, SkillId, SystemTool, TenantId, ToolId, TriggerId, TriggerStatus, ValidationErrors,
};
use switchboard_engine::{Bundle, ConfigKind, ConfigRecord, ConfigWriteError};

use crate::auth::Caller;
use crate::routes::{known_tenant, page_limit, query};
use crate::{ApiState, Problem};

/// The URL segment of each kind.
pub(crate) fn segment(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Agent => "agents",
        ConfigKind::Trigger => "triggers",
        ConfigKind::Tool => "tools",
        ConfigKind::Skill => "skills",
    }
}

fn id_field(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Agent => "agentId",
        ConfigKind::Trigger => "triggerId",
        ConfigKind::Tool => "toolId",
        ConfigKind::Skill => "skillId",
    }
}

fn new_id(kind: ConfigKind) -> String {
    match kind {
        ConfigKind::Agent => AgentId::generate().to_string(),
        ConfigKind::Trigger => TriggerId::generate().to_string(),
        ConfigKind::Tool => ToolId::generate().to_string(),
        ConfigKind::Skill => SkillId::generate().to_string(),
    }
}

/// The canonical (upper-case) form of `id` if it has the shape of an id of `kind`; anything else
/// cannot exist (404). ULIDs are case-insensitive, so `01jd…` finds `01JD…`.
fn canonical_id(kind: ConfigKind, id: &str) -> Option<String> {
    match kind {
        ConfigKind::Agent => id.parse::<AgentId>().ok().map(|i| i.to_string()),
        ConfigKind::Trigger => id.parse::<TriggerId>().ok().map(|i| i.to_string()),
        ConfigKind::Tool => id.parse::<ToolId>().ok().map(|i| i.to_string()),
        ConfigKind::Skill => id.parse::<SkillId>().ok().map(|i| i.to_string()),
    }
}

fn not_found(kind: ConfigKind, id: &str) -> Problem {
    Problem::not_found(format!("no {} '{id}'", kind.as_str()))
}

fn etag(version: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

fn with_etag(status: StatusCode, record: &ConfigRecord) -> Response {
    let mut res = (status, Json(record)).into_response();
    res.headers_mut().insert(header::ETAG, etag(record.version()));
    res
}

/// The version an `If-Match` header names (`"3"`, `3` or `W/"3"`).
fn if_match(headers: &HeaderMap) -> Result<Option<u64>, Problem> {
    let Some(raw) = headers.get(header::IF_MATCH) else { return Ok(None) };
    let text = raw.to_str().unwrap_or_default().trim();
    let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
    text.parse::<u64>().map(Some).map_err(|_| {
        Problem::invalid(ValidationErrors::single("/headers/If-Match", "must be the ETag of the record, e.g. \"3\""))
    })
}

/// Parses a body into a record of `kind` with the server-owned fields set (the configuration
/// service validates it).
fn build(
    kind: ConfigKind,
    tenant: &TenantId,
    id: &str,
    body: Value,
    created_at: &str,
    version: u64,
) -> Result<ConfigRecord, ValidationErrors> {
    let now = chrono::Utc::now().to_rfc3339();
    let server = [
        ("tenantId", json!(tenant)),
        (id_field(kind), json!(id)),
        ("createdAt", json!(created_at)),
        ("updatedAt", json!(now)),
        ("version", json!(version)),
    ];
    if kind == ConfigKind::Trigger {
        switchboard_domain::trigger::check_conditions(&body, "")?;
    }
    Ok(match kind {
        ConfigKind::Agent => ConfigRecord::Agent(record_from_input(body, &server, "")?),
        ConfigKind::Trigger => ConfigRecord::Trigger(record_from_input(body, &server, "")?),
        ConfigKind::Tool => ConfigRecord::Tool(record_from_input(body, &server, "")?),
        ConfigKind::Skill => ConfigRecord::Skill(record_from_input(body, &server, "")?),
    })
}

/// The API's answer to a refused write of `kind`/`id`.
fn refused(kind: ConfigKind, id: &str, e: ConfigWriteError) -> Problem {
    match e {
        ConfigWriteError::Invalid(errors) => Problem::invalid(errors),
        ConfigWriteError::NotFound => not_found(kind, id),
        ConfigWriteError::VersionMismatch { current } => Problem::precondition_failed(current),
        ConfigWriteError::InUse(users) => {
            Problem::conflict(format!("{} {id} is still used by {}", kind.as_str(), users.join(", ")))
        }
        ConfigWriteError::Store(e) => e.into(),
    }
}

/// A body of the wrong shape, as a `400` naming the field at fault under `base`.
fn shape_error(base: &str, e: serde_path_to_error::Error<serde_json::Error>) -> Problem {
    Problem::invalid(switchboard_domain::input::shape_error(base, e))
}

pub(crate) fn body_json(bytes: &[u8]) -> Result<Value, Problem> {
    serde_json::from_slice(bytes).map_err(|e| Problem::invalid(switchboard_domain::input::not_json(&e)))
}

/// `POST /tenants/{t}/{kind}`
pub(crate) async fn create(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let id = new_id(kind);
    let record =
        build(kind, &t, &id, body_json(&body)?, &chrono::Utc::now().to_rfc3339(), 1).map_err(Problem::invalid)?;
    state.config_service().create(&record).await.map_err(|e| refused(kind, &id, e))?;
    let mut res = with_etag(StatusCode::CREATED, &record);
    if let Ok(loc) = HeaderValue::from_str(&format!("/tenants/{t}/{}/{id}", segment(kind))) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(res)
}

/// `GET /tenants/{t}/{kind}/{id}`
pub(crate) async fn get_one(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let id = canonical_id(kind, &id).ok_or_else(|| not_found(kind, &id))?;
    match state.admin.get_config(&t, kind, &id).await? {
        Some(r) => Ok(with_etag(StatusCode::OK, &r)),
        None => Err(not_found(kind, &id)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    cursor: Option<String>,
    limit: Option<usize>,
    status: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `GET /tenants/{t}/{kind}`: a page in creation order. `status` (and for agents `type`) filter
/// the page, so a filtered page may hold fewer than `limit` items; follow `nextCursor` to the end.
/// The tool list opens with the built-in system tools (read-only) on its first page.
pub(crate) async fn list(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    q: RawQuery,
) -> Result<Response, Problem> {
    let q = query::<ListQuery>(q)?;
    let limit = page_limit(q.limit)?;
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let status_filter = match (&q.status, kind) {
        (None, _) => None,
        (Some(s), ConfigKind::Agent) => Some(
            serde_json::from_value::<AgentStatus>(json!(s))
                .map(|s| json!(s))
                .map_err(|_| bad_query("/query/status", "must be active, inactive or draft"))?,
        ),
        (Some(s), _) => Some(
            serde_json::from_value::<TriggerStatus>(json!(s))
                .map(|s| json!(s))
                .map_err(|_| bad_query("/query/status", "must be active or inactive"))?,
        ),
    };
    let type_filter = match (&q.kind, kind) {
        (None, _) => None,
        (Some(k), ConfigKind::Agent) => Some(
            serde_json::from_value::<AgentType>(json!(k))
                .map(|k| json!(k))
                .map_err(|_| bad_query("/query/type", "must be standard, supervisor or router"))?,
        ),
        (Some(_), _) => return Err(bad_query("/query/type", "only agents can be filtered by type")),
    };
    let page = state.admin.list_config(&t, kind, q.cursor.as_deref(), limit).await?;
    let mut items: Vec<Value> = Vec::new();
    if kind == ConfigKind::Tool && q.cursor.is_none() && q.status.as_deref().is_none_or(|s| s == "active") {
        items.extend(SystemTool::ALL.iter().map(|t| {
            json!({ "type": "system", "name": t.name(), "description": t.description(), "parameters": t.parameters() })
        }));
    }
    for r in page.items {
        let v = json!(r);
        if status_filter.as_ref().is_some_and(|s| v["status"] != *s)
            || type_filter.as_ref().is_some_and(|k| v["type"] != *k)
        {
            continue;
        }
        items.push(v);
    }
    Ok(Json(json!({ "items": items, "nextCursor": page.next_cursor })).into_response())
}

fn bad_query(pointer: &str, detail: &str) -> Problem {
    Problem::invalid(ValidationErrors::single(pointer, detail))
}

/// `PUT /tenants/{t}/{kind}/{id}` with `If-Match`.
pub(crate) async fn replace(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let id = canonical_id(kind, &id).ok_or_else(|| not_found(kind, &id))?;
    let Some(expected) = if_match(&headers)? else {
        return Err(Problem::precondition_required());
    };
    let current = state.admin.get_config(&t, kind, &id).await?.ok_or_else(|| not_found(kind, &id))?;
    if current.version() != expected {
        return Err(Problem::precondition_failed(current.version()));
    }
    let created_at = json!(current)["createdAt"].as_str().unwrap_or_default().to_owned();
    let record = build(kind, &t, &id, body_json(&body)?, &created_at, expected + 1).map_err(Problem::invalid)?;
    state.config_service().replace(&record, expected).await.map_err(|e| refused(kind, &id, e))?;
    Ok(with_etag(StatusCode::OK, &record))
}

/// `DELETE /tenants/{t}/{kind}/{id}` (`If-Match` optional); 409 while something refers to it.
pub(crate) async fn delete(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let id = canonical_id(kind, &id).ok_or_else(|| not_found(kind, &id))?;
    let expected = if_match(&headers)?;
    state.config_service().delete(&t, kind, &id, expected).await.map_err(|e| refused(kind, &id, e))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyQuery {
    #[serde(rename = "dryRun")]
    dry_run: Option<bool>,
}

/// `POST /tenants` (admin): `{tenantId, name}`; 201, or 409 when the tenant exists.
pub(crate) async fn create_tenant(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<Response, Problem> {
    if caller != Caller::Admin {
        // A tenant key cannot tell which tenants exist, nor make one.
        return Err(Problem::not_found("no such route"));
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct NewTenant {
        tenant_id: String,
        name: String,
    }
    let v = body_json(&body)?;
    let new: NewTenant = serde_path_to_error::deserialize(v).map_err(|e| shape_error("", e))?;
    let mut errors = ValidationErrors::default();
    let tenant = new.tenant_id.parse::<TenantId>().map_err(|e| errors.push("/tenantId", e.to_string())).ok();
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > switchboard_domain::limits::MAX_NAME_LEN {
        errors.push("/name", format!("must be 1 to {} characters", switchboard_domain::limits::MAX_NAME_LEN));
    }
    errors.into_result().map_err(Problem::invalid)?;
    let Some(tenant) = tenant else { return Err(Problem::internal()) };
    if !state.admin.create_tenant(&tenant, name).await? {
        return Err(Problem::conflict(format!("tenant '{tenant}' already exists")));
    }
    let mut res = (StatusCode::CREATED, Json(json!({ "tenantId": tenant, "name": name }))).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/tenants/{tenant}")) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(res)
}

/// `POST /tenants/{t}/apply[?dryRun=true]`: a whole tenant bundle (the `--tenant` file format),
/// created or updated record by record, reporting what changed. An admin may apply a bundle of a
/// tenant that does not exist yet, which creates it; a tenant key only its own.
pub(crate) async fn apply(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    q: RawQuery,
    body: axum::body::Bytes,
) -> Result<Response, Problem> {
    let q = crate::routes::query::<ApplyQuery>(q)?;
    let no_tenant = || Problem::not_found(format!("no tenant '{tenant_raw}'"));
    let t: TenantId = tenant_raw.parse().map_err(|_| no_tenant())?;
    if !caller.may_access(&t) {
        return Err(no_tenant());
    }
    let text =
        std::str::from_utf8(&body).map_err(|_| Problem::invalid(ValidationErrors::single("", "must be UTF-8 JSON")))?;
    // The wrong tenant is said first, whatever else is wrong with the bundle.
    if let Some(other) = body_json(&body)?.get("tenantId").and_then(Value::as_str)
        && other != t.as_str()
    {
        return Err(Problem::invalid(ValidationErrors::single(
            "/tenantId",
            format!("must be '{t}', the tenant of the path"),
        )));
    }
    let bundle = Bundle::parse(text, state.executor.deps().clock.as_ref()).map_err(Problem::invalid)?;
    let admin = caller == Caller::Admin;
    let report =
        bundle.apply(&state.config_service(), admin, q.dry_run.unwrap_or(false)).await.map_err(|e| match e {
            ConfigWriteError::NotFound => no_tenant(),
            ConfigWriteError::Invalid(errors) => Problem::invalid(errors),
            ConfigWriteError::VersionMismatch { .. } => {
                Problem::conflict("a record changed while the bundle was applied; apply it again")
            }
            ConfigWriteError::InUse(users) => Problem::conflict(format!("still used by {}", users.join(", "))),
            ConfigWriteError::Store(e) => e.into(),
        })?;
    Ok(Json(report).into_response())
}

/// `GET /tenants/{t}`: the tenant's record (its own key or an admin).
pub(crate) async fn get_tenant(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    match state.config.get_tenant(&t).await? {
        Some(tenant) => Ok(Json(tenant).into_response()),
        None => Err(Problem::not_found(format!("no tenant '{tenant_raw}'"))),
    }
}

/// `DELETE /tenants/{t}` (admin): removes a suspended tenant and everything kept for it. `204`
/// when nothing is left; `202 {status: deleting}` when the store stopped with more to remove
/// (a large tenant on DynamoDB): call again. `409` while the tenant is not suspended, so that
/// nothing new runs for it meanwhile and a live tenant is never deleted by one mistaken call.
pub(crate) async fn delete_tenant(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    if caller != Caller::Admin {
        return Err(Problem::not_found("no such route"));
    }
    let Some(tenant) = state.config.get_tenant(&t).await? else {
        return Err(Problem::not_found(format!("no tenant '{tenant_raw}'")));
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
pub(crate) async fn update_tenant(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    if caller != Caller::Admin {
        return Err(Problem::not_found("no such route"));
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Changes {
        name: Option<String>,
        status: Option<switchboard_domain::TenantStatus>,
        /// Only the limits given change: laid over the current ones, then read as a whole.
        limits: Option<serde_json::Map<String, serde_json::Value>>,
    }
    let changes: Changes = serde_path_to_error::deserialize(body_json(&body)?).map_err(|e| shape_error("", e))?;
    let Some(mut tenant) = state.config.get_tenant(&t).await? else {
        return Err(Problem::not_found(format!("no tenant '{tenant_raw}'")));
    };
    if let Some(name) = changes.name {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > switchboard_domain::limits::MAX_NAME_LEN {
            return Err(Problem::invalid(ValidationErrors::single(
                "/name",
                format!("must be 1 to {} characters", switchboard_domain::limits::MAX_NAME_LEN),
            )));
        }
        name.clone_into(&mut tenant.name);
    }
    if let Some(status) = changes.status {
        tenant.status = status;
    }
    if let Some(given) = changes.limits {
        let mut merged = match serde_json::to_value(&tenant.limits) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        merged.extend(given);
        tenant.limits = serde_path_to_error::deserialize(serde_json::Value::Object(merged))
            .map_err(|e| shape_error("/limits", e))?;
        tenant.limits.validate("/limits").map_err(Problem::invalid)?;
    }
    if !state.admin.update_tenant(&tenant).await? {
        return Err(Problem::not_found(format!("no tenant '{tenant_raw}'")));
    }
    tracing::info!(tenant = %t, status = tenant.status.as_str(), "tenant updated");
    Ok(Json(tenant).into_response())
}

/// The tenant a key route names, for an admin on a profile with API keys. A tenant key gets
/// the 404 an unknown tenant gets (it may not manage keys, not even its own); on AWS, where
/// callers are IAM principals, there are no keys to manage.
async fn key_admin(
    state: &ApiState,
    caller: &Caller,
    tenant_raw: &str,
) -> Result<(TenantId, std::sync::Arc<dyn crate::Authenticator>), Problem> {
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
