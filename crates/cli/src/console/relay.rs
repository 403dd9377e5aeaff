//! The console's live events on AWS, from the stack's push WebSocket: `switchboard console
//! --aws-sigv4` answers the page's `GET /tenants/{t}/events/stream` itself. It asks the internal
//! API for a ticket (`POST /tenants/{t}/events/push`, signed: the caller's IAM policy decides
//! the tenant), opens `<url>?tenant=<t>&ticket=<ticket>` with the `$connect` request signed, and
//! then reads the tenant's event log (`GET /tenants/{t}/events?after=<last>`, signed) once at the
//! start, after every push, and every 30 s (the hidden `--catch-up-secs`) in case a push was
//! lost, sending the page each event once, in log order, with its sequence number as the SSE
//! id — exactly what the API's own stream sends. When the WebSocket closes (API Gateway ends connections after two
//! hours, or ten idle minutes) the page's stream ends and the page reconnects with
//! `Last-Event-ID`, which takes a new ticket. A stack without the push (`404` for the ticket)
//! gets the API's polled stream forwarded instead.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::shared::sigv4::Signer;

/// Events read per log page.
const PAGE: usize = 100;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The stack's API and who signs for it.
#[derive(Clone)]
pub struct Upstream {
    pub http: reqwest::Client,
    pub base: String,
    pub signer: std::sync::Arc<Signer>,
}

impl Upstream {
    /// One signed call; the status and the JSON body (`Null` when there is none).
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> anyhow::Result<(u16, Value)> {
        let url = format!("{}{path}", self.base);
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let mut headers = vec![("accept", "application/json")];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        let signed = self.signer.sign(method.as_str(), &url, &headers, &bytes)?;
        let mut request = self.http.request(method.clone(), &url).body(bytes);
        for (name, value) in headers.iter().copied().chain(signed.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            request = request.header(name, value);
        }
        let res = request.send().await.with_context(|| format!("{method} {url}"))?;
        let status = res.status().as_u16();
        let body = res.bytes().await.with_context(|| format!("{method} {url}: reading the answer"))?;
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    }
}

/// The page's event stream from the push, or `None` when the stack has no push (the caller then
/// forwards the request to the API's polled stream).
pub async fn events(
    upstream: Upstream,
    tenant: &str,
    after: i64,
    catch_up: Duration,
) -> anyhow::Result<Option<Response>> {
    let (status, body) = upstream
        .call(reqwest::Method::POST, &format!("/tenants/{tenant}/events/push"), Some(&serde_json::json!({})))
        .await?;
    match status {
        201 => {}
        // No push in this stack (or no such tenant: the forwarded stream answers that).
        404 => return Ok(None),
        _ => bail!("POST /tenants/{tenant}/events/push answered {status}: {body}"),
    }
    let (Some(url), Some(ticket)) = (body["url"].as_str(), body["ticket"].as_str()) else {
        bail!("the ticket answer has no url or ticket: {body}");
    };
    let socket = connect(&upstream.signer, url, tenant, ticket).await?;
    let state = Relay {
        upstream,
        tenant: tenant.to_owned(),
        last: after,
        pending: VecDeque::new(),
        socket,
        read_now: true,
        tick: tokio::time::interval_at(tokio::time::Instant::now() + catch_up, catch_up),
    };
    let stream = futures::stream::unfold(state, |mut relay| async move {
        let (seq, event) = relay.next().await?;
        let name = event["detailType"].as_str().unwrap_or("message").to_owned();
        let sse = Event::default().id(seq.to_string()).event(name).json_data(&event);
        Some((sse, relay))
    });
    Ok(Some(Sse::new(stream).keep_alive(KeepAlive::default()).into_response()))
}

/// Opens the push WebSocket for `tenant` with `ticket`, the `$connect` request signed for
/// `execute-api` as API Gateway's `AWS_IAM` route wants it.
async fn connect(signer: &Signer, url: &str, tenant: &str, ticket: &str) -> anyhow::Result<Socket> {
    let mut ws = reqwest::Url::parse(url).with_context(|| format!("push URL {url:?}"))?;
    ws.query_pairs_mut().append_pair("tenant", tenant).append_pair("ticket", ticket);
    // Signed as the HTTP request the upgrade is.
    let mut http = ws.clone();
    let scheme = match ws.scheme() {
        "wss" => "https",
        "ws" => "http",
        other => bail!("push URL {url:?} is not ws:// or wss:// ({other})"),
    };
    http.set_scheme(scheme).map_err(|()| anyhow::anyhow!("push URL {url:?}"))?;
    let signed = signer.sign("GET", http.as_str(), &[], b"")?;
    let mut request = ws.as_str().into_client_request().context("push URL")?;
    for (name, value) in signed {
        let name = axum::http::HeaderName::from_bytes(name.as_bytes())?;
        request.headers_mut().insert(name, value.parse()?);
    }
    let (socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .with_context(|| format!("opening the push WebSocket {}", ws.host_str().unwrap_or(url)))?;
    Ok(socket)
}

struct Relay {
    upstream: Upstream,
    tenant: String,
    /// The last sequence number sent to the page.
    last: i64,
    pending: VecDeque<(i64, Value)>,
    socket: Socket,
    /// Read the log before waiting again (at the start, and after a push).
    read_now: bool,
    tick: tokio::time::Interval,
}

impl Relay {
    /// The next event for the page; `None` once the WebSocket has closed.
    async fn next(&mut self) -> Option<(i64, Value)> {
        loop {
            if let Some(next) = self.pending.pop_front() {
                return Some(next);
            }
            if std::mem::take(&mut self.read_now) {
                self.read_log().await;
                continue;
            }
            tokio::select! {
                message = self.socket.next() => match message {
                    Some(Ok(Message::Text(_) | Message::Binary(_))) => self.read_now = true,
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(Message::Close(_))) | None => return None,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "the push WebSocket failed; the page reconnects");
                        return None;
                    }
                },
                _ = self.tick.tick() => self.read_now = true,
            }
        }
    }

    /// The log after the last event sent, every page of it. A failed read is logged and tried
    /// again at the next push or tick.
    async fn read_log(&mut self) {
        loop {
            let path = format!("/tenants/{}/events?after={}&limit={PAGE}", self.tenant, self.last);
            let events = match self.upstream.call(reqwest::Method::GET, &path, None).await {
                Ok((200, body)) => body["events"].as_array().cloned().unwrap_or_default(),
                Ok((status, body)) => {
                    tracing::warn!(status, %body, "reading the event log failed");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading the event log failed");
                    return;
                }
            };
            let count = events.len();
            for item in events {
                let Some(seq) = item["seq"].as_i64().filter(|s| *s > self.last) else { continue };
                self.last = seq;
                self.pending.push_back((seq, item["event"].clone()));
            }
            if count < PAGE {
                return;
            }
        }
    }
}
