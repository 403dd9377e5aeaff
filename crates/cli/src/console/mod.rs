//! `switchboard console`: the operator console for an API the browser cannot call with a key —
//! the AWS profile's internal API behind API Gateway with IAM auth. It serves the same page as
//! `switchboard serve` on a loopback address and forwards the page's API calls to `--endpoint`,
//! signed with SigV4 by this process (`--aws-sigv4`), so the browser never holds AWS
//! credentials. Without `--aws-sigv4` the calls are forwarded with the page's own API key.
//!
//! Whoever can reach the port acts with the operator's AWS identity, so: it listens on loopback
//! only, answers only requests whose `Host` is that loopback address (no DNS rebinding), and
//! forwards only requests carrying the page's `X-Switchboard-Console` header, which no other
//! web page can send here without a CORS preflight this server never grants.

#[cfg(feature = "aws")]
mod relay;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use switchboard_api::console::{ConsoleConfig, routes};

use crate::shared::Remote;

/// The header the page sends on every API call.
const CONSOLE_HEADER: &str = "x-switchboard-console";
/// The largest request body forwarded (the API's own limit).
const MAX_BODY: usize = 2 * 1024 * 1024;
/// Request headers passed on to the API (besides the signature or the key).
const FORWARDED: [&str; 6] = ["content-type", "if-match", "idempotency-key", "last-event-id", "accept", "x-request-id"];
/// Response headers passed back to the page.
const RETURNED: [&str; 6] = ["content-type", "retry-after", "location", "etag", "x-request-id", "cache-control"];

#[derive(Debug, clap::Args)]
pub struct ConsoleArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Where the console listens: a loopback address (this process signs with your credentials).
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// With the stack's live push: seconds between reads of the event log without a push.
    #[arg(long, default_value_t = 30, hide = true)]
    catch_up_secs: u64,
}

#[derive(Clone)]
struct Proxy {
    upstream: String,
    signer: Option<std::sync::Arc<Signer>>,
    http: reqwest::Client,
    /// The `Host` values this server answers.
    hosts: Vec<String>,
    /// How often the live push relay reads the log without a push.
    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    catch_up: Duration,
}

#[cfg(feature = "aws")]
type Signer = crate::shared::sigv4::Signer;
#[cfg(not(feature = "aws"))]
type Signer = ();

pub async fn run(args: ConsoleArgs) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() {
        bail!("--listen {} is not a loopback address: the console acts with your credentials", args.listen);
    }
    let upstream = args.remote.endpoint().to_owned();
    reqwest::Url::parse(&upstream).with_context(|| format!("--endpoint {upstream} is not a URL"))?;
    let signer = match args.remote.aws_sigv4 {
        #[cfg(feature = "aws")]
        true => Some(std::sync::Arc::new(
            crate::shared::sigv4::Signer::from_default_chain(args.remote.region.as_deref()).await?,
        )),
        #[cfg(not(feature = "aws"))]
        true => bail!("--aws-sigv4 needs a switchboard built with the `aws` feature (on by default)"),
        false => None,
    };
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("--listen {}", args.listen))?;
    let addr = listener.local_addr()?;
    let port = addr.port();
    let hosts = [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")].into();
    let config = ConsoleConfig {
        signing: if signer.is_some() { "aws-sigv4" } else { "none" },
        upstream: Some(upstream.clone()),
    };
    let catch_up = Duration::from_secs(args.catch_up_secs.max(1));
    let state = Proxy { upstream, signer, http: reqwest::Client::new(), hosts, catch_up };
    let app = routes(axum::Router::new(), config)
        .route("/tenants/{tenant}/events/stream", axum::routing::get(events_stream))
        .fallback(forward)
        .with_state(state.clone());
    let app = app.layer(axum::middleware::from_fn_with_state(state, same_host));
    println!("listening on http://{addr}");
    crate::shared::notice(&format!("the console is at http://{addr}/console/ (Ctrl-C stops it)"));
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    crate::shared::http::serve(listener, app, Duration::from_secs(10), stop).await?;
    Ok(())
}

/// Refuses a request for any other host name than this server's loopback address.
async fn same_host(State(p): State<Proxy>, req: Request, next: axum::middleware::Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !p.hosts.iter().any(|h| h == host) {
        return refuse(StatusCode::FORBIDDEN, "this console answers only its own loopback address");
    }
    next.run(req).await
}

/// The page's live events. Signing for a stack with the live push: relayed from its WebSocket
/// (`relay`); otherwise, or when the push cannot be opened, the API's own stream
/// forwarded.
#[cfg_attr(not(feature = "aws"), allow(unused_variables))]
async fn events_stream(
    State(p): State<Proxy>,
    axum::extract::Path(tenant): axum::extract::Path<String>,
    req: Request,
) -> Response {
    #[cfg(feature = "aws")]
    if let Some(signer) = p.signer.clone()
        && req.headers().contains_key(CONSOLE_HEADER)
        && tenant.parse::<switchboard_domain::TenantId>().is_ok()
    {
        let query_after =
            req.uri().query().into_iter().flat_map(|q| q.split('&')).find_map(|kv| kv.strip_prefix("after="));
        let resume = req.headers().get("last-event-id").and_then(|v| v.to_str().ok());
        let after = resume.or(query_after).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let upstream = relay::Upstream { http: p.http.clone(), base: p.upstream.clone(), signer };
        match relay::events(upstream, &tenant, after, p.catch_up).await {
            Ok(Some(stream)) => return stream,
            Ok(None) => {}
            Err(e) => tracing::warn!(error = format!("{e:#}"), "no live push; forwarding the API's polled stream"),
        }
    }
    forward(State(p), req).await
}

/// Forwards one API call of the page to the upstream API, signed, and streams the answer back
/// (the event stream included).
async fn forward(State(p): State<Proxy>, req: Request) -> Response {
    if !req.headers().contains_key(CONSOLE_HEADER) {
        return refuse(StatusCode::FORBIDDEN, "only the console page may call the API through this server");
    }
    let (parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "the request body is over 2 MiB");
    };
    let url = format!("{}{path}", p.upstream);
    let mut headers: Vec<(&str, &str)> =
        FORWARDED.iter().filter_map(|&n| parts.headers.get(n).and_then(|v| v.to_str().ok()).map(|v| (n, v))).collect();
    let auth = match sign(&p, &parts.method, &url, &headers, &body, &parts.headers) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "cannot sign the request");
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "this console cannot sign the request; see its log");
        }
    };
    headers.extend(auth.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut out = p.http.request(parts.method.clone(), &url).body(body);
    for (name, value) in headers {
        let Ok(mut value) = HeaderValue::from_str(value) else { continue };
        value.set_sensitive(matches!(name, "authorization" | "x-amz-security-token"));
        out = out.header(name, value);
    }
    let res = match out.send().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "the API cannot be reached");
            return refuse(StatusCode::BAD_GATEWAY, &format!("cannot reach {} (--endpoint)", p.upstream));
        }
    };
    let mut answer = Response::builder().status(res.status().as_u16());
    for name in RETURNED {
        if let Some(v) = res.headers().get(name).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()) {
            answer = answer.header(name, v);
        }
    }
    let chunks = futures::stream::unfold(Some(res), |res| async move {
        let mut res = res?;
        match res.chunk().await {
            Ok(Some(bytes)) => Some((Ok::<Bytes, reqwest::Error>(bytes), Some(res))),
            Ok(None) => None,
            Err(e) => Some((Err(e), None)),
        }
    });
    answer.body(Body::from_stream(chunks)).unwrap_or_else(|_| refuse(StatusCode::BAD_GATEWAY, "bad answer"))
}

/// The headers that authorise a forwarded call: the SigV4 signature, or the page's own key.
#[cfg_attr(not(feature = "aws"), allow(unused_variables))]
fn sign(
    p: &Proxy,
    method: &axum::http::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    incoming: &HeaderMap,
) -> anyhow::Result<Vec<(String, String)>> {
    match &p.signer {
        #[cfg(feature = "aws")]
        Some(signer) => signer.sign(method.as_str(), url, headers, body),
        #[cfg(not(feature = "aws"))]
        Some(_) => bail!("no signer in this build"),
        None => Ok(incoming
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(|v| vec![("authorization".to_owned(), v.to_owned())])
            .unwrap_or_default()),
    }
}

fn refuse(status: StatusCode, detail: &str) -> Response {
    let body = serde_json::json!({
        "type": "urn:switchboard:problem:console", "title": "Refused by the console", "status": status.as_u16(),
        "detail": detail,
    });
    let mut res = (status, axum::Json(body)).into_response();
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    res
}
