//! The kept versions of a configuration record over HTTP: the list (newest first), one version,
//! a diff between two, and a rollback. Versions are written by the engine's `ConfigService` with
//! every write; this module only reads them and asks the service to roll back.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchboard_engine::{ConfigKind, ConfigVersion, ConfigWriteError};

use super::{bad_query, canonical_id, not_found, refused, target, with_etag};
use crate::auth::Writer;
use crate::extract::{JsonBody, Query, Tenant, page_limit};
use crate::problem::Problem;
use crate::state::ApiState;

/// Fields every write changes, left out of a diff.
const SERVER_STAMPS: [&str; 2] = ["/version", "/updatedAt"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VersionsQuery {
    cursor: Option<String>,
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiffQuery {
    to: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RollbackBody {
    version: u64,
}

/// One changed place between two records: absent `before` is an addition, absent `after` a removal.
#[derive(Debug, PartialEq, Serialize)]
pub(crate) struct Change {
    pointer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    before: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after: Option<Value>,
}

/// `GET /tenants/{t}/{kind}/{id}/versions`: newest first; the cursor is the last version read.
/// A record that was deleted still lists its versions.
pub(crate) async fn list(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    Query(q): Query<VersionsQuery>,
    Tenant(t): Tenant,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let limit = page_limit(q.limit)?;
    let before = match q.cursor.as_deref() {
        None => None,
        Some(c) => Some(c.parse::<u64>().map_err(|_| bad_query("/query/cursor", "must be a nextCursor of this list"))?),
    };
    let id = canonical_id(kind, &id).ok_or_else(|| not_found(kind, &id))?;
    let page = state.admin.list_versions(&t, kind, &id, before, limit).await?;
    if page.items.is_empty() && before.is_none() && state.admin.get_config(&t, kind, &id).await?.is_none() {
        return Err(not_found(kind, &id));
    }
    Ok(Json(json!({ "items": page.items, "nextCursor": page.next_cursor })).into_response())
}

/// The version a path segment names; anything but a number cannot exist (404).
async fn version_of(
    state: &ApiState,
    kind: ConfigKind,
    t: &switchboard_domain::TenantId,
    id: &str,
    number: &str,
) -> Result<ConfigVersion, Problem> {
    let id = canonical_id(kind, id).ok_or_else(|| not_found(kind, id))?;
    let missing = || Problem::not_found(format!("no version {number} of {} '{id}'", kind.as_str()));
    let n = number.parse::<u64>().map_err(|_| missing())?;
    state.admin.get_version(t, kind, &id, n).await?.ok_or_else(missing)
}

/// `GET /tenants/{t}/{kind}/{id}/versions/{n}`
pub(crate) async fn get_one(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    Tenant(t): Tenant,
    Path((_, id, n)): Path<(String, String, String)>,
) -> Result<Response, Problem> {
    Ok(Json(version_of(&state, kind, &t, &id, &n).await?).into_response())
}

/// `GET /tenants/{t}/{kind}/{id}/versions/{n}/diff?to=m`: what changed from version `n` to
/// version `m`, as JSON pointers into the record with the values before and after (server
/// stamps, `version` and `updatedAt`, left out).
pub(crate) async fn diff(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    Query(q): Query<DiffQuery>,
    Tenant(t): Tenant,
    Path((_, id, n)): Path<(String, String, String)>,
) -> Result<Response, Problem> {
    let to = q.to.ok_or_else(|| bad_query("/query/to", "name the version to compare with"))?;
    if to.parse::<u64>().is_err() {
        return Err(bad_query("/query/to", "must be a version number"));
    }
    let from = version_of(&state, kind, &t, &id, &n).await?;
    let to = version_of(&state, kind, &t, &id, &to).await?;
    let mut changes = Vec::new();
    changes_between("", &json!(from.record), &json!(to.record), &mut changes);
    changes.retain(|c| !SERVER_STAMPS.contains(&c.pointer.as_str()));
    Ok(Json(json!({ "from": from.version, "to": to.version, "changes": changes })).into_response())
}

/// `POST /tenants/{t}/{kind}/{id}/rollback {"version": n}` with `If-Match`: version `n`'s record
/// written as the next version, checked like any write.
pub(crate) async fn rollback(
    kind: ConfigKind,
    State(state): State<Arc<ApiState>>,
    Writer(by): Writer,
    Tenant(t): Tenant,
    Path((_, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<JsonBody<RollbackBody>, Problem>,
) -> Result<Response, Problem> {
    let (id, expected) = target(kind, &id, &headers)?;
    let JsonBody(RollbackBody { version }) = body?;
    let service = state.config_service().written_by(by);
    match service.rollback(&t, kind, &id, version, Some(expected)).await {
        Ok(record) => Ok(with_etag(StatusCode::OK, &record)),
        // The record exists (checked first), so a missing piece is the version.
        Err(ConfigWriteError::NotFound) if state.admin.get_config(&t, kind, &id).await?.is_some() => {
            let detail = format!("no version {version} of this {}", kind.as_str());
            Err(Problem::invalid(switchboard_domain::ValidationErrors::single("/version", detail)))
        }
        Err(e) => Err(refused(kind, &id, e)),
    }
}

/// Appends to `out` every place where `after` differs from `before`, under `at`. Objects are
/// compared key by key, arrays place by place.
fn changes_between(at: &str, before: &Value, after: &Value, out: &mut Vec<Change>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (b.get(k), a.get(k)) {
                    (Some(x), Some(y)) => changes_between(&here, x, y, out),
                    (x, y) => out.push(Change { pointer: here, before: x.cloned(), after: y.cloned() }),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for i in 0..b.len().max(a.len()) {
                let here = format!("{at}/{i}");
                match (b.get(i), a.get(i)) {
                    (Some(x), Some(y)) => changes_between(&here, x, y, out),
                    (x, y) => out.push(Change { pointer: here, before: x.cloned(), after: y.cloned() }),
                }
            }
        }
        (b, a) if b != a => {
            out.push(Change { pointer: at.to_owned(), before: Some(b.clone()), after: Some(a.clone()) })
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_names_each_changed_added_and_removed_place() {
        let before = json!({"systemPrompt": "Be kind.", "tools": ["a", "b"], "a/b": 1, "same": {"x": 1}});
        let after = json!({"systemPrompt": "Be brief.", "tools": ["a"], "a/b": 2, "same": {"x": 1}, "new": true});
        let mut out = Vec::new();
        changes_between("", &before, &after, &mut out);
        let pointers: Vec<_> = out.iter().map(|c| (c.pointer.as_str(), c.before.clone(), c.after.clone())).collect();
        assert_eq!(
            pointers,
            [
                ("/a~1b", Some(json!(1)), Some(json!(2))),
                ("/new", None, Some(json!(true))),
                ("/systemPrompt", Some(json!("Be kind.")), Some(json!("Be brief."))),
                ("/tools/1", Some(json!("b")), None),
            ]
        );
    }
}
