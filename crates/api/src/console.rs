//! The operator console's files, compiled into the binary and served at `/console/` without a
//! key (the page asks for one; every API call it makes is authenticated like any other). No
//! CDN, no build step: a page, a stylesheet and one plain ES module.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/console.js");
const STYLE: &str = include_str!("../console/console.css");

/// Only this origin's own files and API; no framing, no inline script.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

pub(crate) fn routes<S: Clone + Send + Sync + 'static>(app: Router<S>) -> Router<S> {
    app.route("/console", get(|| async { Redirect::permanent("/console/") }))
        .route("/console/", get(|| async { file("text/html; charset=utf-8", INDEX) }))
        .route("/console/console.js", get(|| async { file("text/javascript; charset=utf-8", SCRIPT) }))
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
