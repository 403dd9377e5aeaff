//! The OTLP exporter against a loopback collector: off without an endpoint, and with one the
//! spans arrive as OTLP/HTTP protobuf posts on `/v1/traces`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use switchboard_telemetry::Traces;
use tracing_subscriber::layer::SubscriberExt;

#[test]
fn without_an_endpoint_nothing_is_exported_and_with_one_spans_reach_the_collector() {
    // off: no variable, or an empty one
    assert!(Traces::from_env("svc", |_| None).unwrap().is_none());
    assert!(Traces::from_env("svc", |v| (v == "OTEL_EXPORTER_OTLP_ENDPOINT").then(String::new)).unwrap().is_none());

    // on: a loopback collector takes OTLP/HTTP protobuf posts
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let received: Arc<Mutex<Vec<(String, String, usize)>>> = Arc::default();
    let seen = received.clone();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let seen = seen.clone();
        async move {
            let path = req.uri().path().to_owned();
            let kind = req.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
            let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap();
            seen.lock().unwrap().push((path, kind, body.len()));
            ""
        }
    });
    runtime.spawn(async move { axum::serve(listener, app).await });
    let variables = HashMap::from([("OTEL_EXPORTER_OTLP_ENDPOINT", format!("{endpoint}/"))]);
    let traces = Traces::from_env("switchboard-test", |v| variables.get(v).cloned()).unwrap().unwrap();
    let subscriber = tracing_subscriber::registry().with(traces.layer());
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("invoke_agent", gen_ai.operation.name = "invoke_agent");
        let _in = span.enter();
        tracing::info_span!("chat", gen_ai.request.model = "m").in_scope(|| {});
    });
    traces.shutdown();
    let posts = received.lock().unwrap().clone();
    assert!(!posts.is_empty(), "the collector got the spans");
    assert!(
        posts.iter().all(|(path, kind, len)| path == "/v1/traces" && kind == "application/x-protobuf" && *len > 0),
        "{posts:?}"
    );
}
