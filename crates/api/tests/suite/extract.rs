//! The API's extractors through the router, without a socket (`Router::oneshot`): the tenant of
//! the path, the session, JSON bodies and query strings each answer with the API's problem, and
//! in the order the API has always checked them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use switchboard_embedded::api::{api_state, ensure_admin_key};
use switchboard_embedded::{Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::SystemClock;
use tower::ServiceExt;

/// The router over a fresh embedded runtime with tenant `acme`, and the admin key.
async fn app(dir: &std::path::Path) -> (axum::Router, String) {
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[]}"#).unwrap());
    let embedded = Arc::new(Embedded::open(dir, model, Arc::new(SystemClock), EmbeddedOptions::default()).unwrap());
    embedded.store.create_tenant(&"acme".parse().unwrap(), "Acme").await.unwrap();
    ensure_admin_key(&embedded).await.unwrap();
    let admin = std::fs::read_to_string(dir.join("admin.key")).unwrap().trim().to_owned();
    (switchboard_api::routes(api_state(&embedded, 600, Duration::from_secs(10))), admin)
}

async fn send(app: &axum::Router, key: &str, method: &str, path: &str, body: Option<&str>) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path).header(header::AUTHORIZATION, format!("Bearer {key}"));
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned()))).unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_tenant_that_does_not_exist_or_cannot_be_one_is_the_same_404() {
    let dir = tempfile::tempdir().unwrap();
    let (app, admin) = app(dir.path()).await;
    for tenant in ["nobody", "no!body"] {
        let (status, problem) = send(&app, &admin, "GET", &format!("/tenants/{tenant}/agents"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(problem["type"], "urn:switchboard:problem:not-found");
        assert_eq!(problem["detail"], format!("no tenant '{tenant}'"));
    }
    assert_eq!(send(&app, &admin, "GET", "/tenants/acme/agents", None).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_bad_query_is_named_before_the_tenant_is_looked_up() {
    let dir = tempfile::tempdir().unwrap();
    let (app, admin) = app(dir.path()).await;
    let (status, problem) = send(&app, &admin, "GET", "/tenants/nobody/sessions?limit=many", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["errors"], json!([{ "pointer": "/query/limit", "detail": "must be a whole number" }]));
    let (status, problem) = send(&app, &admin, "GET", "/tenants/nobody/sessions?limit=0", None).await;
    assert_eq!(
        (status, problem["detail"].as_str()),
        (StatusCode::BAD_REQUEST, Some("/query/limit must be between 1 and 100"))
    );
    let (_, problem) = send(&app, &admin, "GET", "/tenants/acme/sessions?colour=red", None).await;
    assert_eq!(problem["errors"][0]["pointer"], "/query/colour");
}

#[tokio::test]
async fn a_body_is_read_after_the_tenant_and_the_session_of_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let (app, admin) = app(dir.path()).await;
    // an unknown tenant, then a session id that cannot be one, are told before a bad body
    let (status, problem) = send(&app, &admin, "POST", "/tenants/nobody/sessions/x/claim", Some("{")).await;
    assert_eq!((status, problem["detail"].as_str()), (StatusCode::NOT_FOUND, Some("no tenant 'nobody'")));
    let (status, problem) = send(&app, &admin, "POST", "/tenants/acme/sessions/x/claim", Some("{")).await;
    assert_eq!((status, problem["detail"].as_str()), (StatusCode::NOT_FOUND, Some("no session 'x'")));
    // then the body: not JSON, or of the wrong shape, each named
    let session = "/tenants/acme/sessions/01JD0000000000000000000000/claim";
    let (status, problem) = send(&app, &admin, "POST", session, Some("{")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(problem["detail"].as_str().unwrap().starts_with("the body is not valid JSON"), "{problem}");
    let (_, problem) = send(&app, &admin, "POST", session, Some(r#"{"operator": 7}"#)).await;
    assert_eq!(problem["errors"][0]["pointer"], "/operator");
}
