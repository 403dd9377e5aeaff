//! The gate and the outer rules around every route: request ids and one log line per request,
//! JSON-only writes (415), the canonical-path rule, body limits and timeouts (413/408, with a
//! bounded drain of a refused body), authentication and the per-tenant rate limit, and the
//! mapping of the framework's own plain-text errors to problem+json. No route logic here.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use switchboard_domain::TenantId;
use switchboard_domain::limits::MAX_EVENT_BYTES;
use tracing::Instrument;

use crate::auth::Caller;
use crate::problem::Problem;
use crate::state::ApiState;

/// One log line per request: method, route, status, latency. Bodies never go to the log. Also
/// the API's outer rules: a body sent with `POST`/`PUT` must be JSON (415 otherwise), and an
/// error the framework produced itself (a body over its limit, say) is turned into problem+json
/// so that every error has the same shape.
pub(crate) async fn log_requests(req: Request, next: Next) -> Response {
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
    let limit = match req.uri().path() {
        "/events" => MAX_EVENT_BYTES,
        // A webhook trigger's body is the agent's text.
        path if path.starts_with("/hooks/") => switchboard_domain::limits::MAX_MESSAGE_TEXT_BYTES,
        _ => MAX_BODY_BYTES,
    };
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

/// Authenticates every request but `/health`, `/ready` and `/openapi.json` (the published
/// contract), refuses a route the caller's role does not admit (403 naming the roles that do;
/// a path of a tenant the caller cannot see is left to answer its 404), then applies the
/// per-tenant rate limit.
pub(crate) async fn authenticate(State(state): State<Arc<ApiState>>, mut req: Request, next: Next) -> Response {
    if matches!(req.uri().path(), "/health" | "/ready" | "/openapi.json") {
        return next.run(req).await;
    }
    if let Some(auth) = &state.auth {
        let key = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let caller = match key {
            None => return Problem::unauthorized().into_response(),
            Some(key) => match auth.authenticate(key).await {
                Ok(Some(caller)) => caller,
                Ok(None) => return Problem::unauthorized().into_response(),
                Err(e) => return Problem::from(e).into_response(),
            },
        };
        req.extensions_mut().insert(caller);
    }
    let caller = req.extensions().get::<Caller>().cloned().unwrap_or_else(|| Caller::iam("iam"));
    let tenant = req.uri().path().strip_prefix("/tenants/").and_then(|rest| rest.split('/').next());
    // Only tenants the caller may see count: a path it cannot see answers 404 anyway, and
    // counting it would let made-up names grow the limiter's table.
    let visible = tenant.and_then(|t| t.parse::<TenantId>().ok()).filter(|t| caller.may_access(t));
    if tenant.is_none() || visible.is_some() {
        let route = req.extensions().get::<MatchedPath>().map_or("", MatchedPath::as_str);
        let group = crate::access::route_group(req.method(), route);
        if !caller.role.may(group) {
            return Problem::forbidden(group, &caller).into_response();
        }
    }
    if let Some(limiter) = &state.limiter
        && let Some(tenant) = visible
        && let Err(retry_after) = limiter.check(tenant.as_str())
    {
        return Problem::rate_limited(retry_after.as_secs().max(1)).into_response();
    }
    next.run(req).await
}
