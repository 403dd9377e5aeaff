//! Tenant configuration over HTTP: agents, triggers, tools and skills, one set of handlers for
//! all four kinds. Create is `POST` (the server assigns the id), replace is `PUT` with `If-Match`
//! (the record's version as its `ETag`), delete refuses while another record refers to the
//! target. Bodies are strict: unknown fields and server-owned fields (ids, tenant, timestamps,
//! version) are refused with a pointer to the field. The rules of the write itself (validation,
//! references within the tenant, versions, deletes of used records) are the engine's
//! `ConfigService`; this module maps HTTP onto it. A whole tenant bundle is applied at once with
//! `POST /tenants/{t}/apply`. Each record's kept versions, their diffs and rollbacks are in
//! `versions`.

pub(crate) mod versions;

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_domain::input::record_from_input;
use switchboard_domain::{
    AgentId, AgentStatus, AgentType, SkillId, SystemTool, TenantId, ToolId, TriggerId, TriggerStatus, ValidationErrors,
};
use switchboard_engine::{Bundle, Clock, ConfigKind, ConfigRecord, ConfigWriteError};

use crate::auth::{Caller, Writer};
use crate::extract::{JsonBody, Query, Tenant, page_limit, parse_json};
use crate::problem::Problem;
use crate::state::ApiState;

/// The URL segment of each kind.
pub(crate) fn segment(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Agent => "agents",
        ConfigKind::Trigger => "triggers",
        ConfigKind::Tool => "tools",
        ConfigKind::Skill => "skills",
    }
}

pub(crate) fn id_field(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Agent => "agentId",
        ConfigKind::Trigger => "triggerId",
        ConfigKind::Tool => "toolId",
        ConfigKind::Skill => "skillId",
    }
}

pub(crate) fn new_id(kind: ConfigKind) -> String {
    match kind {
        ConfigKind::Agent => AgentId::generate().to_string(),
        ConfigKind::Trigger => TriggerId::generate().to_string(),
        ConfigKind::Tool => ToolId::generate().to_string(),
        ConfigKind::Skill => SkillId::generate().to_string(),
    }
}

/// The canonical (upper-case) form of `id` if it has the shape of an id of `kind`; anything else
/// cannot exist (404). ULIDs are case-insensitive, so `01jd…` finds `01JD…`.
pub(crate) fn canonical_id(kind: ConfigKind, id: &str) -> Option<String> {
    match kind {
        ConfigKind::Agent => id.parse::<AgentId>().ok().map(|i| i.to_string()),
        ConfigKind::Trigger => id.parse::<TriggerId>().ok().map(|i| i.to_string()),
        ConfigKind::Tool => id.parse::<ToolId>().ok().map(|i| i.to_string()),
        ConfigKind::Skill => id.parse::<SkillId>().ok().map(|i| i.to_string()),
    }
}

pub(crate) fn not_found(kind: ConfigKind, id: &str) -> Problem {
    Problem::not_found(format!("no {} '{id}'", kind.as_str()))
}

fn etag(version: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

pub(crate) fn with_etag(status: StatusCode, record: &ConfigRecord) -> Response {
    let mut res = (status, Json(record)).into_response();
    res.headers_mut().insert(header::ETAG, etag(record.version()));
    res
}

/// The version an `If-Match` header names (`"3"`, `3` or `W/"3"`).
pub(crate) fn if_match(headers: &HeaderMap) -> Result<Option<u64>, Problem> {
    let Some(raw) = headers.get(header::IF_MATCH) else { return Ok(None) };
    let text = raw.to_str().unwrap_or_default().trim();
    let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
    text.parse::<u64>().map(Some).map_err(|_| {
        Problem::invalid(ValidationErrors::single("/headers/If-Match", "must be the ETag of the record, e.g. \"3\""))
    })
}

/// Parses a body into a record of `kind` with the server-owned fields set (the configuration
/// service validates it).
pub(crate) fn build(
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
pub(crate) fn refused(kind: ConfigKind, id: &str, e: ConfigWriteError) -> Problem {
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

/// `POST /tenants/{t}/{kind}`
pub(crate) async fn create(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    Writer(by): Writer,
    Tenant(t): Tenant,
    JsonBody(body): JsonBody<Value>,
) -> Result<Response, Problem> {
    let id = new_id(kind);
    let record = build(kind, &t, &id, body, &chrono::Utc::now().to_rfc3339(), 1).map_err(Problem::invalid)?;
    // As stored: what was written without a time zone has the tenant's (the answer shows it).
    let service = state.config_service().written_by(by);
    let record = service.zoned(&record).await.map_err(|e| refused(kind, &id, e))?.into_owned();
    service.create(&record).await.map_err(|e| refused(kind, &id, e))?;
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
    Tenant(t): Tenant,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
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
    Query(q): Query<ListQuery>,
    tenant: Result<Tenant, Problem>,
) -> Result<Response, Problem> {
    let limit = page_limit(q.limit)?;
    let Tenant(t) = tenant?;
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

/// The record a write that replaces it names: its canonical id, and the version its required
/// `If-Match` names.
pub(crate) fn target(kind: ConfigKind, id: &str, headers: &HeaderMap) -> Result<(String, u64), Problem> {
    let id = canonical_id(kind, id).ok_or_else(|| not_found(kind, id))?;
    match if_match(headers)? {
        Some(expected) => Ok((id, expected)),
        None => Err(Problem::precondition_required()),
    }
}

pub(crate) fn bad_query(pointer: &str, detail: &str) -> Problem {
    Problem::invalid(ValidationErrors::single(pointer, detail))
}

/// `PUT /tenants/{t}/{kind}/{id}` with `If-Match`.
pub(crate) async fn replace(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    Writer(by): Writer,
    Tenant(t): Tenant,
    Path((_, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<JsonBody<Value>, Problem>,
) -> Result<Response, Problem> {
    let (id, expected) = target(kind, &id, &headers)?;
    let current = state.admin.get_config(&t, kind, &id).await?.ok_or_else(|| not_found(kind, &id))?;
    if current.version() != expected {
        return Err(Problem::precondition_failed(current.version()));
    }
    let created_at = json!(current)["createdAt"].as_str().unwrap_or_default().to_owned();
    // The ETag is checked before the body is read.
    let JsonBody(body) = body?;
    let record = build(kind, &t, &id, body, &created_at, expected + 1).map_err(Problem::invalid)?;
    let service = state.config_service().written_by(by);
    let record = service.zoned(&record).await.map_err(|e| refused(kind, &id, e))?.into_owned();
    service.replace(&record, expected).await.map_err(|e| refused(kind, &id, e))?;
    Ok(with_etag(StatusCode::OK, &record))
}

/// `DELETE /tenants/{t}/{kind}/{id}` (`If-Match` optional); 409 while something refers to it.
pub(crate) async fn delete(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    Writer(by): Writer,
    Tenant(t): Tenant,
    Path((_, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let id = canonical_id(kind, &id).ok_or_else(|| not_found(kind, &id))?;
    let expected = if_match(&headers)?;
    state.config_service().written_by(by).delete(&t, kind, &id, expected).await.map_err(|e| refused(kind, &id, e))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyQuery {
    #[serde(rename = "dryRun")]
    dry_run: Option<bool>,
}

/// `body` as a bundle of tenant `t`, or the problem with it.
pub(crate) fn read_bundle(t: &TenantId, body: &[u8], clock: &dyn Clock) -> Result<Bundle, Problem> {
    let text =
        std::str::from_utf8(body).map_err(|_| Problem::invalid(ValidationErrors::single("", "must be UTF-8 JSON")))?;
    // The wrong tenant is said first, whatever else is wrong with the bundle.
    if let Some(other) = parse_json::<Value>(body)?.get("tenantId").and_then(Value::as_str)
        && other != t.as_str()
    {
        return Err(Problem::invalid(ValidationErrors::single(
            "/tenantId",
            format!("must be '{t}', the tenant of the path"),
        )));
    }
    Bundle::parse(text, clock).map_err(Problem::invalid)
}

/// `POST /tenants/{t}/apply[?dryRun=true]`: a whole tenant bundle (the `--tenant` file format),
/// created or updated record by record, reporting what changed. An admin may apply a bundle of a
/// tenant that does not exist yet, which creates it; a tenant key only its own.
pub(crate) async fn apply(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Writer(by): Writer,
    Path(tenant_raw): Path<String>,
    Query(q): Query<ApplyQuery>,
    body: Bytes,
) -> Result<Response, Problem> {
    let no_tenant = || Problem::not_found(format!("no tenant '{tenant_raw}'"));
    let t: TenantId = tenant_raw.parse().map_err(|_| no_tenant())?;
    if !caller.may_access(&t) {
        return Err(no_tenant());
    }
    let bundle = read_bundle(&t, &body, state.executor.deps().clock.as_ref())?;
    // An owner may change the tenant's settings (its calendars) as with `PATCH /tenants/{t}`.
    let authority = (caller.is_admin(), caller.role == switchboard_domain::access::Role::Owner);
    let service = state.config_service().written_by(by);
    let report = bundle.apply(&service, authority, q.dry_run.unwrap_or(false)).await.map_err(|e| match e {
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
