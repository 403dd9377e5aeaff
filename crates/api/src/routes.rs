//! Route handlers. Each parses its path and body itself so that every failure is a problem+json
//! naming the field at fault.

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::limits::{MAX_EVENT_BYTES, USAGE_TTL_DAYS};
use switchboard_domain::{ExecutionId, InboundEvent, Priority, SessionId, TenantId, UsageCounts, ValidationErrors};
use switchboard_engine::{Admission, ConfigKind, Limits, RouteOutcome, WorkItem};

use crate::auth::Caller;
use crate::config;
use crate::{ApiState, Problem};

/// Largest page a list returns.
const MAX_PAGE: usize = 100;

pub fn router(state: ApiState) -> Router {
    // Shared, not copied: axum clones the state for every extractor of every request.
    let state = Arc::new(state);
    let mut app = Router::new();
    for kind in [ConfigKind::Agent, ConfigKind::Trigger, ConfigKind::Tool, ConfigKind::Skill] {
        let seg = config::segment(kind);
        app = app
            .route(
                &format!("/tenants/{{tenant}}/{seg}"),
                get(move |s: State<Arc<ApiState>>, c: Caller, p: Path<String>, q| config::list(kind, s, c, p, q)).post(
                    move |s: State<Arc<ApiState>>, c: Caller, p: Path<String>, b: Bytes| {
                        config::create(kind, s, c, p, b)
                    },
                ),
            )
            .route(
                &format!("/tenants/{{tenant}}/{seg}/{{id}}"),
                get(move |s: State<Arc<ApiState>>, c: Caller, p: Path<(String, String)>| {
                    config::get_one(kind, s, c, p)
                })
                .put(move |s: State<Arc<ApiState>>, c: Caller, p: Path<(String, String)>, h: HeaderMap, b: Bytes| {
                    config::replace(kind, s, c, p, h, b)
                })
                .delete(
                    move |s: State<Arc<ApiState>>, c: Caller, p: Path<(String, String)>, h: HeaderMap| {
                        config::delete(kind, s, c, p, h)
                    },
                ),
            );
    }
    let app = app
        .route("/health", get(|| async { Json(json!({ "status": "ok" })) }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/events", post(post_event))
        .route("/tenants/{tenant}/conversations/{conversation}/messages", get(conversation_messages))
        .route("/tenants/{tenant}/conversations/{conversation}/sessions", get(conversation_sessions))
        .route("/tenants/{tenant}/sessions", get(list_sessions))
        .route("/tenants/{tenant}/sessions/{session}", get(get_session))
        .route("/tenants/{tenant}/sessions/{session}/executions", get(list_executions))
        .route("/tenants/{tenant}/executions", get(execution_by_source))
        .route("/tenants/{tenant}/executions/{execution}", get(get_execution))
        .route("/tenants/{tenant}/usage", get(usage))
        .route("/tenants/{tenant}/activity", get(activity))
        .route("/tenants", post(config::create_tenant))
        .route("/tenants/{tenant}", get(config::get_tenant).patch(config::update_tenant).delete(config::delete_tenant))
        .route("/tenants/{tenant}/apply", post(config::apply))
        .route("/tenants/{tenant}/keys", post(config::issue_key).get(config::list_keys))
        .route("/tenants/{tenant}/keys/{key}", delete(config::revoke_key))
        .route("/tenants/{tenant}/events", get(list_events))
        .route("/tenants/{tenant}/events/stream", get(stream_events))
        .route("/tenants/{tenant}/events/push", post(push_ticket))
        .fallback(|| async { Problem::not_found("no such route") })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
        .route("/tenants/{tenant}/agents/{id}/invoke", post(invoke))
        .route("/tenants/{tenant}/sessions/{session}/handoff", post(handoff))
        .route("/tenants/{tenant}/sessions/{session}/claim", post(crate::operator::claim))
        .route("/tenants/{tenant}/sessions/{session}/messages", post(crate::operator::reply))
        .route("/tenants/{tenant}/sessions/{session}/end", post(crate::operator::end))
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::auth::authenticate));
    let direct = crate::console::ConsoleConfig { signing: "none", upstream: None };
    crate::console::routes(app, direct)
        .layer(middleware::from_fn_with_state(state.clone(), read_request))
        .layer(middleware::from_fn(log_requests))
        .with_state(state)
}

/// One log line per request: method, route, status, latency. Bodies never go to the log. Also
/// the API's outer rules: a body sent with `POST`/`PUT` must be JSON (415 otherwise), and an
/// error the framework produced itself (a body over its limit, say) is turned into problem+json
/// so that every error has the same shape.
async fn log_requests(req: Request, next: Next) -> Response {
    let request_id = request_id(req.headers());
    let span = tracing::info_span!("request", request_id = %request_id);
    let mut res = log_request(req, next).instrument(span).await;
    if let Ok(v) = header::HeaderValue::from_str(&request_id) {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    res
}

/// The header a request id travels in, both ways.
const REQUEST_ID: &str = "x-request-id";

/// The caller's `X-Request-Id` when it is a sane token (1 to 128 of letters, digits, `-`, `_`,
/// `.`, `:`), so that a proxy's id ties its logs to ours; otherwise a new ULID.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            (1..=128).contains(&v.len())
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
        })
        .map_or_else(|| ulid::Ulid::generate().to_string(), str::to_owned)
}

async fn log_request(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let started = Instant::now();
    let writes = matches!(method, axum::http::Method::POST | axum::http::Method::PUT | axum::http::Method::PATCH);
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")));
    let res = if writes && !json { Problem::unsupported_media_type().into_response() } else { next.run(req).await };
    let res = as_problem(res);
    let status = res.status().as_u16();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if status >= 500 {
        tracing::error!(%method, %path, status, latency_ms = ms, "request failed");
    } else {
        tracing::info!(%method, %path, status, latency_ms = ms, "request");
    }
    res
}

/// Rewrites a plain-text error response from the framework into problem+json.
fn as_problem(res: Response) -> Response {
    let status = res.status();
    let is_problem = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/problem+json"));
    if !status.is_client_error() && !status.is_server_error() || is_problem {
        return res;
    }
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => Problem::too_large(MAX_BODY_BYTES).into_response(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Problem::unsupported_media_type().into_response(),
        StatusCode::METHOD_NOT_ALLOWED => Problem::method_not_allowed().into_response(),
        s if s.is_server_error() => Problem::internal().into_response(),
        _ => Problem::invalid(switchboard_domain::ValidationErrors::single("", "could not be read")).into_response(),
    }
}

/// The framework's own body limit for the routes that take a JSON body (events have their own).
const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// The gate in front of every route.
///
/// 1. The path must be canonical: no percent-encoded octet and no `.`/`..` segment. Every id in
///    this API is made of letters, digits, `-`, `_` and `.`, which never need encoding, so no
///    well-formed request is refused; and since nothing is decoded, the tenant segment that
///    authorisation and the rate limiter read is byte for byte the one the handlers read
///    (`/tenants/%74%61/…` would otherwise be counted as nobody and served as `ta`).
/// 2. A body announced larger than the route's limit is refused with 413 before any of it is
///    read (it is then drained for a bounded time so that the answer reaches a client still
///    uploading); a body that does not arrive within the state's `body_timeout` gets 408. The body is
///    read here, once, so handlers never wait on the network.
pub(crate) async fn read_request(State(state): State<Arc<ApiState>>, req: Request, next: Next) -> Response {
    if let Err(problem) = canonical_path(req.uri().path()) {
        return problem.into_response();
    }
    let limit = if req.uri().path() == "/events" { MAX_EVENT_BYTES } else { MAX_BODY_BYTES };
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (parts, body) = req.into_parts();
    if announced.is_some_and(|n| n > limit as u64) {
        drain_in_background(body, state.body_timeout);
        return Problem::too_large(limit).into_response();
    }
    let bytes = match tokio::time::timeout(state.body_timeout, read_body(body, limit)).await {
        Err(_) => return Problem::body_timeout(state.body_timeout).into_response(),
        Ok(Err(BodyError::TooLarge(rest))) => {
            drain_in_background(rest, state.body_timeout);
            return Problem::too_large(limit).into_response();
        }
        Ok(Err(BodyError::Broken)) => {
            return Problem::invalid(switchboard_domain::ValidationErrors::single("", "could not be read"))
                .into_response();
        }
        Ok(Ok(bytes)) => bytes,
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

enum BodyError {
    /// Over the limit; the rest of the body, still unread.
    TooLarge(axum::body::Body),
    /// The connection failed while the body was read.
    Broken,
}

/// Reads a whole body of at most `limit` bytes.
async fn read_body(mut body: axum::body::Body, limit: usize) -> Result<Bytes, BodyError> {
    use http_body_util::BodyExt;
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| BodyError::Broken)?.into_data() else { continue };
        if buf.len() + data.len() > limit {
            return Err(BodyError::TooLarge(body));
        }
        buf.extend_from_slice(&data);
    }
    Ok(Bytes::from(buf))
}

/// Most bytes of a refused body read and thrown away after the answer.
const DRAIN_BYTES: usize = 8 * 1024 * 1024;

/// Keeps reading a refused body, for at most `timeout` and [`DRAIN_BYTES`], while the answer goes
/// out. A connection closed with unread data makes the kernel reset it, and the reset can destroy
/// the answer before the client reads it; draining for a bounded time (a "lingering close") lets
/// a client that is still uploading see its 413.
fn drain_in_background(mut body: axum::body::Body, timeout: std::time::Duration) {
    use http_body_util::BodyExt;
    tokio::spawn(async move {
        let drain = async {
            let mut seen = 0usize;
            while let Some(Ok(frame)) = body.frame().await {
                seen += frame.data_ref().map_or(0, |d| d.len());
                if seen > DRAIN_BYTES {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, drain).await;
    });
}

/// Refuses a path that is not in canonical form (see [`read_request`]).
pub(crate) fn canonical_path(path: &str) -> Result<(), Problem> {
    let bad = |detail: &str| {
        Err(Problem::invalid(switchboard_domain::ValidationErrors::single("/path", format!("{detail}: {path}"))))
    };
    if path.contains('%') {
        return bad("percent-encoded characters are not accepted in the path (ids never need them)");
    }
    if path.split('/').any(|segment| segment == "." || segment == "..") {
        return bad("'.' and '..' segments are not accepted in the path");
    }
    Ok(())
}

/// The tenant of the path, if the caller may see it and it exists; otherwise the same 404 either
/// way, so that tenants cannot be discovered.
pub(crate) async fn known_tenant(state: &ApiState, caller: &Caller, raw: &str) -> Result<TenantId, Problem> {
    let no_tenant = || Problem::not_found(format!("no tenant '{raw}'"));
    let t: TenantId = raw.parse().map_err(|_| no_tenant())?;
    if !caller.may_access(&t) {
        return Err(no_tenant());
    }
    if state.config.tenant_exists(&t).await? { Ok(t) } else { Err(no_tenant()) }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PostEventQuery {
    /// Seconds to wait for the resulting execution (embedded profile), 1 to 60.
    wait: Option<u64>,
}

/// Longest `?wait=` accepted.
const MAX_WAIT_SECS: u64 = 60;

async fn post_event(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    q: RawQuery,
    bytes: Bytes,
) -> Result<Response, Problem> {
    let q = query::<PostEventQuery>(q)?;
    let wait = match q.wait {
        None => None,
        Some(s) if (1..=MAX_WAIT_SECS).contains(&s) => Some(std::time::Duration::from_secs(s)),
        Some(_) => {
            return Err(Problem::invalid(switchboard_domain::ValidationErrors::single(
                "/query/wait",
                format!("must be between 1 and {MAX_WAIT_SECS} seconds"),
            )));
        }
    };
    // `log_requests` has refused a body that is not JSON and `read_request` one over the limit.
    let event = InboundEvent::parse_bytes(&bytes).map_err(Problem::invalid)?;
    if !caller.may_access(&event.detail.tenant_id) {
        return Err(Problem::unknown_tenant("/detail/tenantId", event.detail.tenant_id.as_str()));
    }
    let (outcome, execution) = match wait {
        Some(w) => state.ingest.ingest_and_wait(&event, w).await?,
        None => (state.ingest.ingest(&event).await?, None),
    };
    let mut body = json!({ "eventId": event.id, "outcome": outcome.as_str() });
    match outcome {
        RouteOutcome::Enqueued { trigger_id, agent_id, .. } => {
            body["triggerId"] = json!(trigger_id);
            body["agentId"] = json!(agent_id);
        }
        RouteOutcome::HumanOwned { session_id } => body["sessionId"] = json!(session_id),
        RouteOutcome::Limited { agent_id, limit, .. } => {
            body["agentId"] = json!(agent_id);
            body["limit"] = json!(limit);
        }
        RouteOutcome::NoMatch | RouteOutcome::NotInbound | RouteOutcome::Suspended => {}
    }
    if let (Some(e), Some(obj)) = (execution, body.as_object_mut()) {
        obj.insert("execution".into(), json!(e));
    }
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    cursor: Option<String>,
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<i64>,
    limit: Option<usize>,
}

pub(crate) fn page_limit(limit: Option<usize>) -> Result<usize, Problem> {
    match limit {
        None => Ok(50),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(Problem::invalid(switchboard_domain::ValidationErrors::single(
            "/query/limit",
            format!("must be between 1 and {MAX_PAGE}"),
        ))),
    }
}

/// Query strings are parsed here rather than by axum's `Query`, so that a bad one is a
/// problem+json naming the parameter at fault (`/query/limit: must be a whole number`).
pub(crate) fn query<T: for<'de> Deserialize<'de>>(RawQuery(raw): RawQuery) -> Result<T, Problem> {
    let raw = raw.unwrap_or_default();
    let form = serde_urlencoded::Deserializer::new(form_urlencoded::parse(raw.as_bytes()));
    serde_path_to_error::deserialize(form).map_err(|e| Problem::invalid(switchboard_domain::input::query_error(e)))
}

/// A JSON body as `T`, or a problem+json naming the field at fault.
pub(crate) fn json_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Problem> {
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(body))
        .map_err(|e| Problem::invalid(switchboard_domain::input::shape_error("", e)))
}

async fn conversation_messages(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, conversation)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let Some(log) = &state.conversations else {
        return Err(Problem::not_found("this deployment keeps no conversation log"));
    };
    let messages = log.messages(&t, &conversation, 1000).await?;
    Ok(Json(json!({ "conversationId": conversation, "messages": messages })).into_response())
}

async fn conversation_sessions(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, conversation)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let sessions = state.sessions.sessions_for_conversation(&t, &conversation).await?;
    Ok(Json(json!({ "conversationId": conversation, "sessions": sessions })).into_response())
}

async fn get_session(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, session)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let id: SessionId = session.parse().map_err(|_| Problem::not_found(format!("no session '{session}'")))?;
    match state.sessions.get_session(&t, id).await? {
        Some(s) => Ok(Json(s).into_response()),
        None => Err(Problem::not_found(format!("no session '{session}'"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SessionsQuery {
    status: Option<String>,
    agent_id: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

/// `GET /tenants/{t}/sessions[?status&agentId&cursor&limit]`: the tenant's sessions, newest
/// first (`status=handed_off` lists the conversations handed to a human or another agent).
async fn list_sessions(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    q: RawQuery,
) -> Result<Response, Problem> {
    let q = query::<SessionsQuery>(q)?;
    let limit = page_limit(q.limit)?;
    let mut errors = ValidationErrors::default();
    let status = match q.status.as_deref() {
        None => None,
        Some(raw) => match serde_json::from_value::<switchboard_domain::SessionStatus>(json!(raw)) {
            Ok(s) => Some(s),
            Err(_) => {
                errors.push("/query/status", "must be one of active, handed_off, completed, failed");
                None
            }
        },
    };
    let agent_id = q.agent_id.as_deref().and_then(|raw| {
        let parsed = raw.parse::<switchboard_domain::AgentId>().ok();
        if parsed.is_none() {
            errors.push("/query/agentId", "must be an agent id (a ULID)");
        }
        parsed
    });
    let after = q.cursor.as_deref().and_then(|raw| {
        let parsed = raw.parse::<SessionId>().ok();
        if parsed.is_none() {
            errors.push("/query/cursor", "must be the nextCursor of a previous page");
        }
        parsed
    });
    errors.into_result().map_err(Problem::invalid)?;
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let filter = switchboard_engine::SessionFilter { status, agent_id };
    let page = state.sessions.list_sessions(&t, filter, after, limit).await?;
    Ok(Json(page).into_response())
}

async fn list_executions(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, session)): Path<(String, String)>,
    q: RawQuery,
) -> Result<Response, Problem> {
    let q = query::<PageQuery>(q)?;
    let limit = page_limit(q.limit)?;
    let after = match q.cursor.as_deref().map(str::parse::<switchboard_domain::ExecutionId>) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            let why = "must be the nextCursor of a previous page";
            return Err(Problem::invalid(switchboard_domain::ValidationErrors::single("/query/cursor", why)));
        }
    };
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let id: SessionId = session.parse().map_err(|_| Problem::not_found(format!("no session '{session}'")))?;
    if state.sessions.get_session(&t, id).await?.is_none() {
        return Err(Problem::not_found(format!("no session '{session}'")));
    }
    let page = state.executions.list_executions(&t, id, after, limit).await?;
    Ok(Json(page).into_response())
}

async fn get_execution(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, execution)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let id: ExecutionId = execution.parse().map_err(|_| Problem::not_found(format!("no execution '{execution}'")))?;
    match state.executions.get_execution(&t, id).await? {
        Some(e) => Ok(Json(e).into_response()),
        None => Err(Problem::not_found(format!("no execution '{execution}'"))),
    }
}

/// `GET /ready`: `200` when the process can take work, else `503` saying why (no key needed,
/// like `/health`, so that a load balancer or container runtime can ask).
async fn ready(State(state): State<Arc<ApiState>>) -> Response {
    let verdict = match &state.ready {
        Some(r) => r.check().await,
        None => Ok(()),
    };
    match verdict {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(why) => Problem::not_ready(why).into_response(),
    }
}

/// `GET /metrics` (admin key): OpenMetrics text for a Prometheus scraper. The labels name tenants,
/// so a tenant key gets `404` like any route it may not see.
async fn metrics(State(state): State<Arc<ApiState>>, caller: Caller) -> Response {
    let (Caller::Admin, Some(m)) = (caller, &state.metrics) else {
        return Problem::not_found("no such route").into_response();
    };
    let text = m.render().await;
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
}

/// Days a usage report spans by default (ending today, UTC).
const USAGE_DEFAULT_DAYS: i64 = 30;

/// Tokens and cost of the UTC days `from..=to` (default: the last 30 days), by day, agent and
/// model, with a total per day and for the range.
async fn usage(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    q: RawQuery,
) -> Result<Response, Problem> {
    let q = query::<UsageQuery>(q)?;
    let day = |field: &str, raw: &Option<String>| -> Result<Option<NaiveDate>, Problem> {
        raw.as_deref()
            .map(|v| {
                NaiveDate::parse_from_str(v, "%Y-%m-%d").map_err(|_| {
                    Problem::invalid(ValidationErrors::single(format!("/query/{field}"), "must be a date, YYYY-MM-DD"))
                })
            })
            .transpose()
    };
    let today = state.executor.deps().clock.now().date_naive();
    let to = day("to", &q.to)?.unwrap_or(today);
    let from = day("from", &q.from)?.unwrap_or(to - chrono::Duration::days(USAGE_DEFAULT_DAYS - 1));
    if from > to {
        return Err(Problem::invalid(ValidationErrors::single("/query/from", "must not be after `to`")));
    }
    if (to - from).num_days() >= USAGE_TTL_DAYS {
        return Err(Problem::invalid(ValidationErrors::single(
            "/query/from",
            format!("a report spans at most {USAGE_TTL_DAYS} days (usage is kept that long)"),
        )));
    }
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let rows = state.executions.usage(&t, from, to).await?;
    let mut total = UsageCounts::default();
    let mut by_day: Vec<(NaiveDate, UsageCounts)> = Vec::new();
    for row in &rows {
        total.add(&row.counts);
        match by_day.last_mut() {
            Some((d, counts)) if *d == row.day => counts.add(&row.counts),
            _ => by_day.push((row.day, row.counts)),
        }
    }
    let by_day: Vec<serde_json::Value> = by_day
        .into_iter()
        .map(|(d, counts)| {
            let mut v = serde_json::to_value(counts).unwrap_or_default();
            v["day"] = json!(d);
            v
        })
        .collect();
    Ok(Json(json!({
        "tenantId": t,
        "from": from,
        "to": to,
        "currency": "USD",
        "priceVersion": state.executor.deps().prices.version,
        "rows": rows,
        "byDay": by_day,
        "total": total,
    }))
    .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivityQuery {
    hours: Option<String>,
}

/// Hours an activity report spans at most (a week).
const ACTIVITY_MAX_HOURS: i64 = 168;

/// The tenant's executions by status in each of the last `hours` UTC hours (default 24), the
/// current hour last and every hour listed, with the totals of the span.
async fn activity(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    q: RawQuery,
) -> Result<Response, Problem> {
    let q = query::<ActivityQuery>(q)?;
    let hours = match q.hours.as_deref() {
        None => 24,
        Some(raw) => raw.parse::<i64>().ok().filter(|h| (1..=ACTIVITY_MAX_HOURS).contains(h)).ok_or_else(|| {
            Problem::invalid(ValidationErrors::single(
                "/query/hours",
                format!("must be a whole number of hours from 1 to {ACTIVITY_MAX_HOURS}"),
            ))
        })?,
    };
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let to = switchboard_domain::hour_of(state.executor.deps().clock.now());
    let from = to - chrono::Duration::hours(hours - 1);
    let rows = state.executions.activity(&t, from, to).await?;
    let mut total = serde_json::Map::new();
    let by_hour: Vec<serde_json::Value> = (0..hours)
        .map(|i| {
            let hour = from + chrono::Duration::hours(i);
            let mut executions = serde_json::Map::new();
            let mut sum = 0u64;
            for r in rows.iter().filter(|r| r.hour == hour) {
                executions.insert(r.status.as_str().to_owned(), json!(r.executions));
                let t = total.entry(r.status.as_str()).or_insert(json!(0u64));
                *t = json!(t.as_u64().unwrap_or(0) + r.executions);
                sum += r.executions;
            }
            json!({ "hour": hour, "executions": executions, "total": sum })
        })
        .collect();
    let sum: u64 = rows.iter().map(|r| r.executions).sum();
    let dead_letters = match &state.dead_letters {
        Some(d) => Some(d.count(&t).await?),
        None => None,
    };
    Ok(Json(json!({
        "tenantId": t,
        "from": from,
        "to": to,
        "byHour": by_hour,
        "executions": total,
        "total": sum,
        "deadLetters": dead_letters,
    }))
    .into_response())
}

async fn list_events(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    q: RawQuery,
) -> Result<Response, Problem> {
    let q = query::<EventsQuery>(q)?;
    let limit = page_limit(q.limit)?;
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let Some(log) = &state.events else {
        return Err(Problem::not_found("this deployment keeps no event log; subscribe to EventBridge"));
    };
    let events = log.events_after(&t, q.after.unwrap_or(0), limit).await?;
    let items: Vec<_> = events.into_iter().map(|(seq, e)| json!({ "seq": seq, "event": e })).collect();
    Ok(Json(json!({ "events": items })).into_response())
}

/// Server-Sent Events for an operator UI: first the tenant's logged events after `after` (or the
/// `Last-Event-ID` a reconnecting browser sends), then live ones as they are published. Each SSE
/// event carries the log sequence number as its id and the detail-type as its event name.
async fn stream_events(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    headers: axum::http::HeaderMap,
    q: RawQuery,
) -> Result<Response, Problem> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures::StreamExt;

    let q = query::<EventsQuery>(q)?;
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let (Some(log), Some(live)) = (&state.events, &state.live) else {
        return Err(Problem::not_found("this deployment has no event stream; subscribe to EventBridge"));
    };
    let last_seen = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<i64>().ok());
    let after = last_seen.or(q.after).unwrap_or(0);
    // Subscribe before reading the log so nothing published in between is missed; the live
    // part then skips what the replay already sent.
    let live = live.subscribe(&t, after);
    let replay = log.events_after(&t, after, MAX_REPLAY).await?;
    let replayed_up_to = replay.last().map_or(after, |(seq, _)| *seq);
    let tenant = t.clone();
    let live = live.filter(move |(seq, e)| futures::future::ready(*seq > replayed_up_to && e.tenant_id == tenant));
    let stream = futures::stream::iter(replay)
        .chain(live)
        .map(|(seq, e)| Event::default().id(seq.to_string()).event(e.detail_type.clone()).json_data(&e));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// `POST /tenants/{t}/events/push`: a single-use ticket (valid a minute) to open the live push
/// WebSocket for this tenant (AWS profile). 404 where there is none: the embedded profile
/// streams over `GET …/events/stream` instead.
async fn push_ticket(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
) -> Result<Response, Problem> {
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let Some(push) = &state.push else {
        return Err(Problem::not_found(format!(
            "this deployment has no live push; read GET /tenants/{tenant_raw}/events/stream"
        )));
    };
    let ticket = push.issue(&t).await?;
    let body = json!({ "ticket": ticket.ticket, "url": ticket.url, "tenantId": t, "expiresAt": ticket.expires_at });
    let mut res = (StatusCode::CREATED, Json(body)).into_response();
    res.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    Ok(res)
}

/// Most logged events one stream replays before going live.
const MAX_REPLAY: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct InvokeBody {
    conversation_id: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// How long an invoke waits for its execution.
const INVOKE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `POST /tenants/{t}/agents/{id}/invoke`: runs the agent on a conversation now, in the
/// conversation's turn (it queues behind messages already waiting), and answers with the
/// execution. An `Idempotency-Key` header makes a retried call return the first result.
async fn invoke(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, agent_raw)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    use switchboard_domain::limits::MAX_MESSAGE_TEXT_BYTES;
    use switchboard_domain::{AgentId, AgentStatus, ValidationErrors, ids::check_external_id};

    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let no_agent = || Problem::not_found(format!("no agent '{agent_raw}'"));
    let agent_id: AgentId = agent_raw.parse().map_err(|_| no_agent())?;
    let agent = state.config.get_agent(&t, agent_id).await?.ok_or_else(no_agent)?;
    let body: InvokeBody = json_body(&body)?;
    let mut errors = ValidationErrors::default();
    if let Err(e) = check_external_id(&body.conversation_id) {
        errors.push("/conversationId", e.to_string());
    }
    if body.message.as_ref().is_some_and(|m| m.len() > MAX_MESSAGE_TEXT_BYTES) {
        errors.push("/message", format!("must be at most {MAX_MESSAGE_TEXT_BYTES} bytes"));
    }
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(k) = &key
        && check_external_id(k).is_err()
    {
        errors.push("/headers/Idempotency-Key", "must be 1 to 63 characters of letters, digits, '-', '_' or '.'");
    }
    errors.into_result().map_err(Problem::invalid)?;
    let streamed = wants_event_stream(&headers);
    if streamed && !state.invoker.follows_turns() {
        return Err(Problem::not_acceptable(
            "this deployment cannot stream a turn yet; call without 'Accept: text/event-stream' for the execution",
        ));
    }
    let tenant = state.config.get_tenant(&t).await?.ok_or_else(|| Problem::not_found(format!("no tenant '{t}'")))?;
    if tenant.status == switchboard_domain::TenantStatus::Suspended {
        return Err(Problem::conflict(format!("tenant {t} is suspended")));
    }
    if agent.status != AgentStatus::Active {
        return Err(Problem::conflict(format!("agent {agent_id} is not active")));
    }
    let latest = state.sessions.latest_session(&t, &body.conversation_id).await?;
    let agent_session = latest.as_ref().is_some_and(|s| s.is_active());
    if let Some(s) = latest {
        if s.is_human_owned() {
            return Err(Problem::conflict("a human operator owns this conversation; hand it back first"));
        }
        if s.is_active() && s.agent_id != agent_id {
            return Err(Problem::conflict(format!(
                "the conversation is with agent {} (session {}); hand it off first",
                s.agent_id, s.session_id
            )));
        }
    }
    let retried = key.is_some();
    let source_id = format!("invoke-{}", key.unwrap_or_else(|| ulid::Ulid::generate().to_string()));
    // A retry of a call that already ran answers as the first did, limits or not; anything new
    // is counted against the tenant's limits first (a refused call runs nothing and may be
    // retried with the same key after `Retry-After`).
    let done = match retried {
        true => state.executions.execution_for_source(&t, &source_id).await?,
        false => None,
    };
    let day_tokens = match done {
        Some(_) => None,
        None => match Limits::new(state.executor.deps())
            .admit(&tenant, &body.conversation_id, Some(agent_session), true)
            .await?
        {
            Admission::Admitted(day) => Some(day),
            // taken over between the read above and the count
            Admission::HumanOwned { .. } => {
                return Err(Problem::conflict("a human operator owns this conversation; hand it back first"));
            }
            Admission::Refused(refusal) => {
                tracing::info!(tenant = %t, limit = refusal.limit.as_str(), "invoke refused by a tenant limit");
                return Err(Problem::tenant_limit(&refusal));
            }
        },
    };
    let text = body.message.unwrap_or_else(|| "[invoked without a message]".to_owned());
    let item = WorkItem {
        tenant_id: t,
        source_id: source_id.clone(),
        conversation_id: body.conversation_id.clone(),
        message_id: source_id.clone(),
        text,
        trigger_id: None,
        agent_id,
        continuation: false,
        detail: json!({ "invoke": true, "metadata": body.metadata }),
        refused: None,
        day_tokens,
        follow: streamed,
    };
    if streamed {
        return Ok(stream_invoke(&state, item, done, &tenant_raw));
    }
    let recorded = match done {
        Some(r) => Some(r),
        None => state.invoker.invoke(item, INVOKE_WAIT).await?,
    };
    match recorded {
        Some(r) => Ok(Json(json!({
            "sessionId": r.session_id, "executionId": r.execution_id, "status": r.status, "actions": r.actions,
        }))
        .into_response()),
        None => {
            // Where the execution will be, once recorded: the same on both profiles.
            let location = format!("/tenants/{tenant_raw}/executions?sourceId={source_id}");
            let mut res = (
                StatusCode::ACCEPTED,
                Json(json!({ "sourceId": source_id, "status": "queued", "location": location })),
            )
                .into_response();
            if let Ok(v) = header::HeaderValue::from_str(&location) {
                res.headers_mut().insert(header::LOCATION, v);
            }
            Ok(res)
        }
    }
}

/// Whether the caller asked for a stream of the turn (`Accept: text/event-stream`).
fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream")))
}

/// What a streamed invoke's body carries, in order: the turn's events, then how it ended.
enum Streamed {
    Turn(switchboard_engine::TurnEvent),
    End(Result<Option<Box<switchboard_domain::ExecutionRecord>>, Problem>),
}

/// A streamed invoke (`contracts/invoke-stream.md`): the turn's events as server-sent events
/// while it runs, then `execution.finished` with the record (or `execution.pending` with where
/// to find it once the wait has passed, or `error` with a problem), and the stream ends. The
/// turn runs in the conversation's queue, not in this request: a client that goes away does not
/// stop or repeat it. A retried call whose execution is recorded (`done`) gets only the end.
fn stream_invoke(
    state: &ApiState,
    item: WorkItem,
    done: Option<switchboard_domain::ExecutionRecord>,
    tenant_raw: &str,
) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures::StreamExt;
    use switchboard_engine::Follower;

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Streamed>();
    let location = format!("/tenants/{tenant_raw}/executions?sourceId={}", item.source_id);
    let source_id = item.source_id.clone();
    match done {
        Some(record) => {
            let _ = tx.send(Streamed::End(Ok(Some(Box::new(record)))));
        }
        None => {
            let invoker = state.invoker.clone();
            let turn = tx.clone();
            let follower = Follower::new(move |event| {
                // Nobody reading any more (the client went away) is fine.
                let _ = turn.send(Streamed::Turn(event));
            });
            tokio::spawn(async move {
                let ended = invoker
                    .invoke_following(item, INVOKE_WAIT, follower)
                    .await
                    .map(|r| r.map(Box::new))
                    .map_err(Problem::from);
                let _ = tx.send(Streamed::End(ended));
            });
        }
    }
    let events = futures::stream::unfold(Some(rx), move |rx| {
        let (location, source_id) = (location.clone(), source_id.clone());
        async move {
            let mut rx = rx?;
            let event = match rx.recv().await? {
                Streamed::Turn(e) => return Some((Event::default().event(e.name()).json_data(&e), Some(rx))),
                Streamed::End(Ok(Some(record))) => Event::default()
                    .event("execution.finished")
                    .json_data(json!({ "event": "execution.finished", "execution": record })),
                Streamed::End(Ok(None)) => Event::default().event("execution.pending").json_data(json!({
                    "event": "execution.pending", "sourceId": source_id, "location": location,
                })),
                Streamed::End(Err(problem)) => {
                    Event::default().event("error").json_data(json!({ "event": "error", "problem": problem.to_json() }))
                }
            };
            Some((event, None))
        }
    });
    Sse::new(events.map(|e| e.map_err(std::io::Error::other))).keep_alive(KeepAlive::default()).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BySourceQuery {
    source_id: Option<String>,
}

/// `GET /tenants/{t}/executions?sourceId=…`: the execution that answered a source (an event id,
/// or `invoke-<Idempotency-Key>`), where a `202` from `invoke` says to look.
async fn execution_by_source(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(tenant_raw): Path<String>,
    q: RawQuery,
) -> Result<Response, Problem> {
    let q = query::<BySourceQuery>(q)?;
    let Some(source) = q.source_id.filter(|s| !s.is_empty() && s.len() <= 200) else {
        return Err(Problem::invalid(ValidationErrors::single(
            "/query/sourceId",
            "required: the source id to look up",
        )));
    };
    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    match state.executions.execution_for_source(&t, &source).await? {
        Some(e) => Ok(Json(e).into_response()),
        None => Err(Problem::not_found(format!("no execution for source '{source}' (yet)"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TargetType {
    Agent,
    Human,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HandoffBody {
    target_type: TargetType,
    #[serde(default)]
    target_agent_id: Option<String>,
    reason: String,
    /// Only with `targetType: human`; `normal` when left out.
    #[serde(default)]
    priority: Option<Priority>,
}

/// `POST /tenants/{t}/sessions/{s}/handoff`: move the conversation to a human or an agent, or
/// hand a human-owned conversation back to an agent. Answers `{newSessionId?, status, executionId}`.
async fn handoff(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((tenant_raw, session)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, Problem> {
    use switchboard_domain::{AgentId, SessionId, ValidationErrors};
    use switchboard_engine::HandoffTo;

    let t = known_tenant(&state, &caller, &tenant_raw).await?;
    let no_session = || Problem::not_found(format!("no session '{session}'"));
    let session_id: SessionId = session.parse().map_err(|_| no_session())?;
    let body: HandoffBody = json_body(&body)?;
    let mut errors = ValidationErrors::default();
    if body.reason.trim().is_empty() || body.reason.chars().count() > 1000 {
        errors.push("/reason", "must be 1 to 1000 characters");
    }
    if body.priority.is_some() && matches!(body.target_type, TargetType::Agent) {
        errors.push("/priority", "applies only when targetType is human");
    }
    let to = match (body.target_type, body.target_agent_id) {
        (TargetType::Human, None) => Some(HandoffTo::Human(body.priority.unwrap_or_default())),
        (TargetType::Human, Some(_)) => {
            errors.push("/targetAgentId", "must be left out when targetType is human");
            None
        }
        (TargetType::Agent, None) => {
            errors.push("/targetAgentId", "is required when targetType is agent");
            None
        }
        (TargetType::Agent, Some(raw)) => match raw.parse::<AgentId>() {
            Ok(id) => Some(HandoffTo::Agent(id)),
            Err(_) => {
                errors.push("/targetAgentId", format!("'{raw}' is not an agent id"));
                None
            }
        },
    };
    errors.into_result().map_err(Problem::invalid)?;
    let Some(to) = to else { return Err(Problem::internal()) };
    let done = state
        .operator
        .hand_off(&t, session_id, to, body.reason.trim())
        .await
        .map_err(|e| crate::operator::problem(e, session_id))?;
    Ok(Json(json!({ "newSessionId": done.new_session_id, "status": "handed_off", "executionId": done.execution.execution_id }))
        .into_response())
}
