//! The operator console's files, compiled into the binary and served at `/console/` without a
//! key (the page asks for one; every API call it makes is authenticated like any other). No
//! CDN, no build step: a page, a stylesheet and three plain ES modules (the console, and the
//! builder's pages and the insights page it imports).

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/console.js");
const BUILDER: &str = include_str!("../console/builder.js");
const INSIGHTS: &str = include_str!("../console/insights.js");
const STYLE: &str = include_str!("../console/console.css");

/// Only this origin's own files and API; no framing, no inline script.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

/// How the page reaches the API, told to it at `/console/config.json`: `signing` is `none` when
/// the browser sends the operator's API key itself (`switchboard serve`), `aws-sigv4` when the
/// server in front of it signs every call (`switchboard console --aws-sigv4`: no key is asked for).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConsoleConfig {
    pub signing: &'static str,
    /// The API the calls go to, when it is not this origin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

/// Adds the console's routes to `app`.
pub fn routes<S: Clone + Send + Sync + 'static>(app: Router<S>, config: ConsoleConfig) -> Router<S> {
    let config = axum::Json(config);
    app.route("/console", get(|| async { Redirect::permanent("/console/") }))
        .route("/console/config.json", get(move || async move { config.clone().into_response() }))
        .route("/console/", get(|| async { file("text/html; charset=utf-8", INDEX) }))
        .route("/console/console.js", get(|| async { file("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/console/builder.js", get(|| async { file("text/javascript; charset=utf-8", BUILDER) }))
        .route("/console/insights.js", get(|| async { file("text/javascript; charset=utf-8", INSIGHTS) }))
        .route("/console/console.css", get(|| async { file("text/css; charset=utf-8", STYLE) }))
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut res = body.into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // A new build's page must not be mixed with an old script.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}
