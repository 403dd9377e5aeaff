//! HTTP errors as RFC 9457 `application/problem+json`: a stable `type`, a human `detail`, and for
//! bad input the JSON pointer of every offending field. Internal details never reach the body;
//! they are logged.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use switchboard_domain::{FieldError, ValidationErrors};
use switchboard_engine::{RouteError, StoreError};

/// A problem the API answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: StatusCode,
    /// Stable identifier of the kind of problem; clients branch on it.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    pub errors: Vec<FieldError>,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(skip_serializing_if = "<[FieldError]>::is_empty")]
    errors: &'a [FieldError],
}

impl Problem {
    fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Self { status, kind, title, detail: detail.into(), errors: vec![], retry_after: None }
    }

    pub fn invalid(errors: ValidationErrors) -> Self {
        let detail = match errors.0.as_slice() {
            [one] => format!("{} {}", if one.pointer.is_empty() { "the body" } else { &one.pointer }, one.detail),
            many => format!("{} fields are invalid", many.len()),
        };
        Self { errors: errors.0, ..Self::new(StatusCode::BAD_REQUEST, "invalid-input", "Invalid input", detail) }
    }

    pub fn unknown_tenant(pointer: &str, tenant: &str) -> Self {
        let detail = format!("no tenant '{tenant}'");
        Self {
            errors: vec![FieldError { pointer: pointer.to_owned(), detail: detail.clone() }],
            ..Self::new(StatusCode::UNPROCESSABLE_ENTITY, "unknown-tenant", "Unknown tenant", detail)
        }
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Payload too large",
            format!("the body is larger than {limit} bytes"),
        )
    }

    /// 408: the body did not arrive in time.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request-timeout",
            "Request timeout",
            format!("the request body did not arrive within {} s", limit.as_secs_f64()),
        )
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "send the body as application/json",
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "this route does not take that method",
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            "send an API key as 'Authorization: Bearer <key>'",
        )
    }

    /// 401 for a webhook delivery that could not be verified, whatever the reason (logged).
    pub fn bad_signature() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "bad-signature",
            "Unauthorized",
            "the request's Standard Webhooks signature (webhook-id, webhook-timestamp, webhook-signature) could not be verified",
        )
    }

    /// 403: the caller's role does not admit the route's group.
    pub fn forbidden(group: switchboard_domain::access::RouteGroup, caller: &crate::auth::Caller) -> Self {
        let detail = format!(
            "this needs the {} role ({} routes); '{}' holds the {} role",
            group.needs(),
            group.as_str(),
            caller.principal,
            caller.role
        );
        Self::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
    }

    /// 403 for a change of fields only an admin makes (a tenant's status and limits).
    pub fn admin_only(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
    }

    /// 406: the response cannot be given in a type the `Accept` header allows.
    pub fn not_acceptable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_ACCEPTABLE, "not-acceptable", "Not acceptable", detail)
    }

    /// 422: the request is well formed but what it names cannot be done (an execution that
    /// cannot be replayed, say).
    pub fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", "Cannot be done", detail)
    }

    /// 501: this deployment does not offer the route.
    pub fn not_implemented(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, "not-implemented", "Not offered here", detail)
    }

    /// 502: a server of the tenant's that this request called answered wrongly or not at all.
    pub fn bad_gateway(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, "upstream-failed", "The tenant's server failed", detail)
    }

    /// 504: a server of the tenant's that this request called did not answer in time.
    pub fn gateway_timeout(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, "upstream-timeout", "The tenant's server timed out", detail)
    }

    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", "Conflict", detail)
    }

    pub fn precondition_required() -> Self {
        Self::new(
            StatusCode::PRECONDITION_REQUIRED,
            "precondition-required",
            "Precondition required",
            "send If-Match with the record's ETag so that a concurrent change is not overwritten",
        )
    }

    pub fn precondition_failed(current: u64) -> Self {
        Self::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition-failed",
            "Precondition failed",
            format!("the record changed; its current ETag is \"{current}\": read it again and retry"),
        )
    }

    /// 429; the response carries `Retry-After` with `retry_after_secs`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self {
            retry_after: Some(retry_after_secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate-limited",
                "Too many requests",
                format!("this tenant's request limit is reached; retry in {retry_after_secs} s"),
            )
        }
    }

    /// 429 for work a tenant limit refused, naming the limit; `Retry-After` is when its window
    /// reopens (for the sessions cap, when the first idle slot frees).
    pub fn tenant_limit(refusal: &switchboard_domain::Refusal) -> Self {
        let (kind, title) = match refusal.limit {
            switchboard_domain::LimitName::InvocationsPerMinute => ("rate-limited", "Too many requests"),
            switchboard_domain::LimitName::TokensPerDay => ("budget-exceeded", "Token budget exceeded"),
            switchboard_domain::LimitName::ConcurrentSessions => ("rate-limited", "Too many concurrent sessions"),
        };
        Self {
            retry_after: Some(refusal.retry_after_seconds),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, kind, title, refusal.describe())
        }
    }

    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Service unavailable",
            "a backing store is unavailable; retry later",
        )
    }

    /// `GET /ready` when the process cannot take work (starting, draining, store not writable).
    pub fn not_ready(why: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "not-ready", "Not ready", why)
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "something went wrong on our side; it has been logged",
        )
    }
}

impl Problem {
    fn body(&self) -> Body<'_> {
        Body {
            kind: format!("urn:switchboard:problem:{}", self.kind),
            title: self.title,
            status: self.status.as_u16(),
            detail: &self.detail,
            errors: &self.errors,
        }
    }

    /// The problem's body as JSON (where it goes inside another body, such as a stream's event).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.body()).unwrap_or_default()
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let json = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut res = (self.status, json).into_response();
        let headers = res.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if self.kind == "unauthorized" {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

impl From<StoreError> for Problem {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store error while serving a request");
        if e.retryable() { Problem::unavailable() } else { Problem::internal() }
    }
}

impl From<RouteError> for Problem {
    fn from(e: RouteError) -> Self {
        match e {
            RouteError::UnknownTenant(t) => Problem::unknown_tenant("/detail/tenantId", t.as_str()),
            RouteError::Store(s) => s.into(),
            RouteError::Queue(q) => {
                tracing::error!(error = %q, "queue error while routing");
                if q.retryable { Problem::unavailable() } else { Problem::internal() }
            }
        }
    }
}
