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
        Self { status, kind, title, detail: detail.into(), errors: vec![] }
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

    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Service unavailable",
            "a backing store is unavailable; retry later",
        )
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

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = Body {
            kind: format!("urn:switchboard:problem:{}", self.kind),
            title: self.title,
            status: self.status.as_u16(),
            detail: &self.detail,
            errors: &self.errors,
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut res = (self.status, json).into_response();
        res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
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
