//! The API's extractors: the tenant and the session of the path, a JSON body and a query string,
//! each read before the handler runs and each refused with the API's problem+json. They do not authorise anything
//! beyond the tenant segment, and they read only what the request gate has already buffered.
//!
//! A handler that must report another error first (a bad query before an unknown tenant, an
//! unknown agent before a bad body, as the API always has) takes `Result<Tenant, Problem>` or
//! `Result<JsonBody<T>, Problem>` and applies `?` where that check was.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;
use switchboard_domain::input::read_value;
use switchboard_domain::{SessionId, TenantId, ValidationErrors};

use crate::auth::Caller;
use crate::problem::Problem;
use crate::state::ApiState;

/// Largest page a list returns.
const MAX_PAGE: usize = 100;

/// The tenant of the path (`{tenant}`), one the caller may see and that exists. Anything else is
/// the same 404 either way, so that tenants cannot be discovered.
#[derive(Debug, Clone)]
pub(crate) struct Tenant(pub TenantId);

impl FromRequestParts<Arc<ApiState>> for Tenant {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<ApiState>) -> Result<Self, Problem> {
        let raw = path_param(parts, state, "tenant").await?;
        let caller = Caller::from_request_parts(parts, state).await?;
        let no_tenant = || Problem::not_found(format!("no tenant '{raw}'"));
        let t: TenantId = raw.parse().map_err(|_| no_tenant())?;
        if !caller.may_access(&t) {
            return Err(no_tenant());
        }
        if state.config.tenant_exists(&t).await? { Ok(Tenant(t)) } else { Err(no_tenant()) }
    }
}

/// The session of the path (`{session}`), and the segment as written for messages that quote it;
/// an id that cannot be one is a 404 like an unknown one.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub id: SessionId,
    pub raw: String,
}

impl FromRequestParts<Arc<ApiState>> for Session {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<ApiState>) -> Result<Self, Problem> {
        let raw = path_param(parts, state, "session").await?;
        match raw.parse() {
            Ok(id) => Ok(Session { id, raw }),
            Err(_) => Err(Problem::not_found(format!("no session '{raw}'"))),
        }
    }
}

/// One named segment of the matched route, as written (the gate refuses percent-encoding).
async fn path_param(parts: &mut Parts, state: &Arc<ApiState>, name: &str) -> Result<String, Problem> {
    // Only a route without the segment gets here empty-handed: a wiring mistake, not the caller's.
    let params = RawPathParams::from_request_parts(parts, state).await.map_err(|_| Problem::internal())?;
    params.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_owned()).ok_or_else(Problem::internal)
}

/// A JSON body read as `T`, or a 400 naming the field at fault. The gate has already refused a
/// body that is not `application/json` (415) or too large (413).
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<ApiState>> for JsonBody<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &Arc<ApiState>) -> Result<Self, Problem> {
        let bytes = Bytes::from_request(req, state).await.map_err(|_| could_not_read())?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// `bytes` as `T` (a struct only from a JSON object: [`read_value`]), or a problem naming the
/// field at fault.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    let value: Value = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(bytes))
        .map_err(|e| Problem::invalid(switchboard_domain::input::shape_error("", e)))?;
    read_value(value, "").map_err(Problem::invalid)
}

fn could_not_read() -> Problem {
    Problem::invalid(ValidationErrors::single("", "could not be read"))
}

/// A query string read as `T`, parsed here rather than by axum's `Query` so that a bad one is a
/// problem+json naming the parameter at fault (`/query/limit: must be a whole number`).
#[derive(Debug)]
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Problem> {
        let raw = parts.uri.query().unwrap_or_default();
        let form = serde_urlencoded::Deserializer::new(form_urlencoded::parse(raw.as_bytes()));
        serde_path_to_error::deserialize(form)
            .map(Query)
            .map_err(|e| Problem::invalid(switchboard_domain::input::query_error(e)))
    }
}

/// The page size a list was asked for (`?limit=`), 50 when left out.
pub(crate) fn page_limit(limit: Option<usize>) -> Result<usize, Problem> {
    match limit {
        None => Ok(50),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => {
            Err(Problem::invalid(ValidationErrors::single("/query/limit", format!("must be between 1 and {MAX_PAGE}"))))
        }
    }
}
