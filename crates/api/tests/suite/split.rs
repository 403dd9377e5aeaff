//! The API's parts on AWS (`configuration_api`, `operations_api`, and `hooks_api` for webhook
//! triggers' deliveries) and the API Gateway that
//! sends each request to one of them (`template.yaml`, `InternalApi`): every route of the contract,
//! resolved through the gateway's resources as API Gateway resolves a path (its most specific
//! resource, no falling back to a greedy parent), reaches the half that serves it, and only that
//! half serves it. A route added to the API but not to the gateway, or put in the wrong half,
//! fails here rather than answering 403 "Missing Authentication Token" after a deploy.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, header};
use serde_json::Value;
use switchboard_embedded::api::{api_state, ensure_admin_key};
use switchboard_embedded::{Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::SystemClock;
use tower::ServiceExt;

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A resource of the REST API: the function its `ANY` method integrates, and its children by
/// path part (`sessions`, `{tenant}`, `{proxy+}`).
#[derive(Default, Debug)]
struct Resource {
    function: Option<String>,
    children: BTreeMap<String, Resource>,
}

impl Resource {
    /// The gateway's resources from the template's OpenAPI body: each path's function is the one
    /// its integration's URI names (`…/functions/${InternalApiFunction.Arn}/…`).
    fn from_template(template: &str) -> Resource {
        let mut root = Resource::default();
        let body = template.split("\n  InternalApi:\n").nth(1).expect("the template has InternalApi");
        let paths = body.split("\n        paths:\n").nth(1).expect("InternalApi has paths");
        let paths = paths.split("\n        components:").next().unwrap();
        let mut current: Option<String> = None;
        for line in paths.lines() {
            if let Some(path) = line.strip_prefix("          /").and_then(|l| l.strip_suffix(':')) {
                current = Some(path.to_owned());
            } else if let Some(uri) = line.trim().strip_prefix("uri: ") {
                let function = uri.split("/functions/${").nth(1).and_then(|f| f.split(".Arn}").next());
                let (Some(path), Some(function)) = (current.take(), function) else {
                    panic!("an integration without its path or function: {line}")
                };
                let mut node = &mut root;
                for part in path.split('/').filter(|p| !p.is_empty()) {
                    node = node.children.entry(part.to_owned()).or_default();
                }
                assert!(node.function.is_none(), "/{path} is integrated twice");
                node.function = Some(function.to_owned());
            }
        }
        root
    }

    /// The function API Gateway invokes for `path`: at each part the static child, else a
    /// `{variable}`, else a greedy `{proxy+}` takes the rest; `None` where the resource reached
    /// has no method (API Gateway's 403 "Missing Authentication Token").
    fn resolve(&self, path: &str) -> Option<&str> {
        let mut node = self;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if let Some(child) = node.children.get(part) {
                node = child;
            } else if let Some(child) = node.child_where(|k| !k.ends_with("+}")) {
                node = child;
            } else {
                return node.child_where(|k| k.ends_with("+}"))?.function.as_deref();
            }
        }
        node.function.as_deref()
    }

    fn child_where(&self, pick: impl Fn(&str) -> bool) -> Option<&Resource> {
        self.children.iter().find(|(k, _)| k.starts_with('{') && pick(k)).map(|(_, c)| c)
    }
}

/// Every operation of `contracts/openapi.yaml`, as (method, template).
fn contract_operations() -> Vec<(String, String)> {
    let doc: Value = serde_saphyr::from_str_with_options(
        &repo_file("contracts/openapi.yaml"),
        serde_saphyr::options! { strict_booleans: true },
    )
    .unwrap();
    let mut out = Vec::new();
    for (template, item) in doc["paths"].as_object().unwrap() {
        for method in ["get", "put", "post", "delete", "patch"] {
            if item.get(method).is_some() {
                out.push((method.to_uppercase(), template.clone()));
            }
        }
    }
    out
}

/// Whether `app` routes `method path` to a handler: anything but the router's own "no such
/// route" 404 or its 405.
async fn serves(app: &axum::Router, key: &str, method: &str, path: &str) -> bool {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    match res.status().as_u16() {
        405 => false,
        404 => {
            let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await.unwrap();
            let problem: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            problem["detail"] != "no such route"
        }
        _ => true,
    }
}

#[tokio::test]
async fn every_route_of_the_contract_reaches_through_the_gateway_the_half_that_serves_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::from_json(r#"{"rules":[]}"#).unwrap());
    let embedded =
        Arc::new(Embedded::open(dir.path(), model, Arc::new(SystemClock), EmbeddedOptions::default()).unwrap());
    embedded.store.create_tenant(&"acme".parse().unwrap(), "Acme").await.unwrap();
    ensure_admin_key(&embedded).await.unwrap();
    let key = std::fs::read_to_string(dir.path().join("admin.key")).unwrap().trim().to_owned();
    let state = || api_state(&embedded, 600, Duration::from_secs(10));
    let halves = [
        ("InternalApiFunction", switchboard_api::configuration_api(state())),
        ("OperationsApiFunction", switchboard_api::operations_api(state())),
        ("WebhookIntakeFunction", switchboard_api::hooks_api(state())),
    ];
    let whole = switchboard_api::routes(state());
    let gateway = Resource::from_template(&repo_file("template.yaml"));

    let operations = contract_operations();
    assert!(operations.len() > 60, "the contract's operations were read: {}", operations.len());
    let mut reached = BTreeMap::<&str, usize>::new();
    for (method, template) in &operations {
        // A concrete path: the tenant exists, every other id is one (most are not found).
        let path: String = template
            .split('/')
            .map(|part| match part {
                "{tenantId}" => "acme",
                "{version}" => "1",
                p if p.starts_with('{') => "x1",
                p => p,
            })
            .collect::<Vec<_>>()
            .join("/");
        let function = gateway
            .resolve(&path)
            .unwrap_or_else(|| panic!("{method} {template}: no method of the gateway reaches it"));
        assert!(serves(&whole, &key, method, &path).await, "{method} {template}: `routes` does not serve it");
        for (name, half) in &halves {
            let served = serves(half, &key, method, &path).await;
            if *name == function {
                assert!(served, "{method} {template}: the gateway sends it to {name}, whose half does not serve it");
            } else {
                assert!(!served, "{method} {template}: {name} serves it too, but the gateway sends it to {function}");
            }
        }
        assert!(halves.iter().any(|(n, _)| *n == function), "{method} {template}: {function} is not a half of the API");
        *reached.entry(function).or_default() += 1;
    }
    // Every function is in use.
    assert_eq!(reached.len(), 3, "{reached:?}");
}

#[test]
fn the_gateway_resolves_the_most_specific_resource_and_never_falls_back() {
    let gateway = Resource::from_template(
        r#"
  InternalApi:
      DefinitionBody:
        paths:
          /{proxy+}:
                uri: !Sub "…/functions/${A.Arn}/response-streaming-invocations"
          /tenants/{tenant}/sessions:
                uri: !Sub "…/functions/${B.Arn}/response-streaming-invocations"
        components:
"#,
    );
    assert_eq!(gateway.resolve("/health"), Some("A"));
    assert_eq!(gateway.resolve("/tenants/acme/sessions"), Some("B"));
    // `/tenants` and `/tenants/acme` exist on the way to `sessions` without a method: API Gateway
    // answers there itself, it does not try `/{proxy+}`.
    assert_eq!(gateway.resolve("/tenants"), None);
    assert_eq!(gateway.resolve("/tenants/acme"), None);
    assert_eq!(gateway.resolve("/tenants/acme/sessions/s1"), None);
}
