//! The outbound call of tenant webhook tools ([`HttpWebhookCaller`]): signed, bounded in time and
//! size, retried only when it is safe, and unable to reach private or metadata addresses.
//! It does not build the request body (the engine does) nor judge the answer (the model does).

mod guard;
mod mcp;
mod secrets;
mod signing;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
use switchboard_domain::TenantId;
use switchboard_domain::mcp::{ListedTool, McpServer};
use switchboard_domain::tool::{MAX_TOOL_RETRIES, MAX_TOOL_TIMEOUT_MS, RESERVED_HEADERS};
use switchboard_domain::webhook::IDEMPOTENCY_KEY_HEADER;
use switchboard_engine::ports::{
    McpAnswer, McpRequest, Secrets, WebhookCaller, WebhookError, WebhookRequest, WebhookResponse,
};
use switchboard_https::retry::{RetryPolicy, Retryable};
use url::{Host, Url};

pub use secrets::SECRET_TTL;

/// Most bytes of a response body read; the rest is cut off and reported as truncated.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// Longest wait a `Retry-After` on a 429 can impose, and the cap of the exponential backoff.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(10);

const AGENT: &str = concat!("Switchboard-Webhooks/", env!("CARGO_PKG_VERSION"));

/// Where webhooks may go. The default (both `false`) is the production rule: `https` only and
/// public addresses only. The embedded profile may open both for local development, and must
/// say so explicitly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WebhookPolicy {
    /// Allow `http://` URLs.
    pub allow_http: bool,
    /// Allow loopback, private, link-local, unique-local and shared (CGNAT) addresses. The cloud
    /// metadata addresses, multicast, broadcast and unspecified addresses stay refused.
    pub allow_private: bool,
}

/// The [`WebhookCaller`] over HTTP(S). Build it once per process: it holds the connection pool
/// and the secret cache.
pub struct HttpWebhookCaller {
    client: reqwest::Client,
    policy: WebhookPolicy,
    secrets: secrets::SecretCache,
}

impl std::fmt::Debug for HttpWebhookCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpWebhookCaller").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl HttpWebhookCaller {
    /// A caller that signs with secrets from `secrets` and obeys `policy`.
    pub fn new(policy: WebhookPolicy, secrets: Arc<dyn Secrets>) -> Result<Self, WebhookError> {
        let client = switchboard_https::client_builder()
            .map_err(|e| WebhookError::Invalid(format!("cannot build the webhook client: {e}")))?
            // A proxy would resolve the name itself, out of the guard's reach.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(guard::GuardedResolver { allow_private: policy.allow_private }))
            .connect_timeout(Duration::from_millis(u64::from(MAX_TOOL_TIMEOUT_MS)))
            .user_agent(AGENT)
            .build()
            .map_err(|e| WebhookError::Invalid(format!("cannot build the webhook client: {}", describe(&e))))?;
        Ok(Self { client, policy, secrets: secrets::SecretCache::new(secrets) })
    }

    /// Parses the URL (WHATWG rules: `2130706433`, `0177.0.0.1` and `0x7f.1` all become
    /// `127.0.0.1`) and applies the scheme and IP-literal rules. Names are checked later, by
    /// the resolver, on the addresses actually connected to.
    fn check_url(&self, raw: &str) -> Result<Url, WebhookError> {
        let url = Url::parse(raw).map_err(|e| WebhookError::Invalid(format!("the webhook URL is not valid: {e}")))?;
        match url.scheme() {
            "https" => {}
            "http" if self.policy.allow_http => {}
            "http" => return Err(WebhookError::Blocked("http:// is not allowed; use https://".into())),
            other => return Err(WebhookError::Blocked(format!("the scheme '{other}' is not allowed"))),
        }
        let ip = match url.host() {
            None => return Err(WebhookError::Invalid("the webhook URL has no host".into())),
            Some(Host::Domain(_)) => None,
            Some(Host::Ipv4(v4)) => Some(std::net::IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(std::net::IpAddr::V6(v6)),
        };
        if let Some(ip) = ip
            && let Some(reason) = guard::refusal(ip, self.policy.allow_private)
        {
            return Err(WebhookError::Blocked(format!("{ip} is {reason}")));
        }
        Ok(url)
    }

    /// The headers common to every attempt: the tool's own (reserved names skipped), then ours.
    fn base_headers(request: &WebhookRequest) -> Result<HeaderMap, WebhookError> {
        let mut headers = HeaderMap::new();
        for (name, value) in &request.handler.headers {
            let lower = name.to_ascii_lowercase();
            if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("switchboard-") {
                tracing::warn!(tool = %request.tool_name, header = %name, "skipping a reserved header");
                continue;
            }
            match (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                (Ok(n), Ok(v)) => {
                    headers.insert(n, v);
                }
                _ => tracing::warn!(tool = %request.tool_name, header = %name, "skipping an invalid header"),
            }
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(USER_AGENT, HeaderValue::from_static(AGENT));
        let key = HeaderValue::from_str(&request.idempotency_key)
            .map_err(|_| WebhookError::Invalid("the idempotency key is not a valid header value".into()))?;
        headers.insert(IDEMPOTENCY_KEY_HEADER, key);
        Ok(headers)
    }

    async fn attempt(
        &self,
        url: &Url,
        request: &WebhookRequest,
        headers: &HeaderMap,
        signer: &signing::Signer,
        timeout: Duration,
    ) -> Result<Answer, AttemptError> {
        let mut headers = headers.clone();
        let timestamp = chrono::Utc::now().timestamp();
        signer.stamp(&mut headers, &request.idempotency_key, timestamp, &request.body).map_err(AttemptError::Other)?;
        let mut response = self
            .client
            .post(url.clone())
            .headers(headers)
            .body(request.body.clone())
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| classify(&e))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await.map_err(|e| classify(&e))? {
            let room = MAX_RESPONSE_BYTES - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer { status, body, truncated, retry_after })
    }

    async fn deliver(&self, request: &WebhookRequest, url: &Url, host: &str) -> Result<WebhookResponse, WebhookError> {
        let handler = &request.handler;
        let secret = match &handler.secret_ref {
            Some(name) => Some((name.as_str(), self.secrets.get(&request.tenant_id, name).await?)),
            None => None,
        };
        let signer = &signing::Signer::new(handler.signature, secret)?;
        let headers = &Self::base_headers(request)?;
        let timeout = Duration::from_millis(u64::from(handler.timeout_ms.clamp(1, MAX_TOOL_TIMEOUT_MS)));
        let before_retry = |attempts: u32, delay: Duration, _: &Failed| {
            let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            tracing::debug!(tool = %request.tool_name, host, attempts, delay_ms, "retrying webhook");
        };
        let outcome = retry_policy(&handler.retry_policy)
            .retry()
            .before_retry(&before_retry)
            .run(|attempts| async move {
                let outcome = tokio::time::timeout(timeout, self.attempt(url, request, headers, signer, timeout))
                    .await
                    .unwrap_or(Err(AttemptError::Timeout));
                match outcome {
                    Ok(answer) if answer.status == 429 || answer.status >= 500 => {
                        Err(Failed { attempts, error: AttemptError::Answer(answer) })
                    }
                    Ok(answer) => Ok(answer.response(attempts, host)),
                    Err(error) => Err(Failed { attempts, error }),
                }
            })
            .await;
        let Failed { attempts, error } = match outcome {
            Ok(response) => return Ok(response),
            Err(failed) => failed,
        };
        match error {
            // The last 429 or 5xx is the tool's answer: the model reads it.
            AttemptError::Answer(answer) => Ok(answer.response(attempts, host)),
            AttemptError::Blocked(reason) => Err(WebhookError::Blocked(reason)),
            AttemptError::Timeout => Err(WebhookError::Timeout { attempts }),
            AttemptError::Connect(message) | AttemptError::Other(message) => {
                Err(WebhookError::Connect { message, attempts })
            }
        }
    }
}

/// The tool's configured retries on the shared policy: `max_retries` (capped by
/// [`MAX_TOOL_RETRIES`]) after the first attempt, full-jitter backoff from `backoff_ms` doubling
/// up to [`MAX_RETRY_DELAY`], and a 429's `Retry-After` waited for up to that same bound (the
/// hint is capped where it is read, so that a long one is not a reason to give up).
fn retry_policy(configured: &switchboard_domain::RetryPolicy) -> RetryPolicy {
    RetryPolicy {
        max_attempts: configured.max_retries.min(MAX_TOOL_RETRIES) + 1,
        base: Duration::from_millis(u64::from(configured.backoff_ms)),
        cap: MAX_RETRY_DELAY,
        max_retry_after: MAX_RETRY_DELAY,
    }
}

#[async_trait]
impl WebhookCaller for HttpWebhookCaller {
    async fn call_mcp(&self, request: &McpRequest) -> Result<McpAnswer, WebhookError> {
        self.mcp_call(request).await
    }

    async fn list_mcp(&self, tenant: &TenantId, server: &McpServer) -> Result<Vec<ListedTool>, WebhookError> {
        self.mcp_list(tenant, server).await
    }

    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        let started = Instant::now();
        let url = match self.check_url(&request.handler.url) {
            Ok(url) => url,
            Err(e) => {
                tracing::warn!(tool = %request.tool_name, tenant = %request.tenant_id, error = %e, "webhook refused");
                return Err(e);
            }
        };
        let host = url.host_str().unwrap_or_default().to_owned();
        let result = self.deliver(request, &url, &host).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok(r) => tracing::info!(
                tool = %request.tool_name,
                tenant = %request.tenant_id,
                host = %host,
                status = r.status,
                attempts = r.attempts,
                bytes = r.body.len(),
                truncated = r.truncated,
                latency_ms,
                "webhook called"
            ),
            Err(e) => tracing::warn!(
                tool = %request.tool_name,
                tenant = %request.tenant_id,
                host = %host,
                error = %e,
                latency_ms,
                "webhook call failed"
            ),
        }
        result
    }
}

/// One attempt's answer, before the retry decision.
struct Answer {
    status: u16,
    body: Vec<u8>,
    truncated: bool,
    retry_after: Option<Duration>,
}

impl Answer {
    fn response(self, attempts: u32, host: &str) -> WebhookResponse {
        let Self { status, body, truncated, .. } = self;
        WebhookResponse { status, body, truncated, attempts, host: host.to_owned() }
    }
}

/// The attempt numbered `attempts` failed.
struct Failed {
    attempts: u32,
    error: AttemptError,
}

impl Retryable for Failed {
    fn retryable(&self) -> bool {
        matches!(self.error, AttemptError::Answer(_) | AttemptError::Timeout | AttemptError::Connect(_))
    }

    /// Only a 429's, and never longer than [`MAX_RETRY_DELAY`].
    fn retry_after(&self) -> Option<Duration> {
        match &self.error {
            AttemptError::Answer(answer) if answer.status == 429 => answer.retry_after.map(|d| d.min(MAX_RETRY_DELAY)),
            _ => None,
        }
    }
}

enum AttemptError {
    /// A 429 or a 5xx: retried while attempts remain, then returned as the answer.
    Answer(Answer),
    /// The resolver found only refused addresses: final, never retried.
    Blocked(String),
    Timeout,
    /// No connection was made: safe to retry.
    Connect(String),
    /// Failed after the request may have been sent (reset, broken body): not retried.
    Other(String),
}

fn classify(error: &reqwest::Error) -> AttemptError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(blocked) = e.downcast_ref::<guard::BlockedAddress>() {
            return AttemptError::Blocked(blocked.to_string());
        }
        source = e.source();
    }
    if error.is_timeout() {
        AttemptError::Timeout
    } else if error.is_connect() {
        AttemptError::Connect(describe(error))
    } else {
        AttemptError::Other(describe(error))
    }
}

/// The error and its causes, without the URL (its query may hold tenant data).
fn describe(error: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    text.push_str(if error.is_connect() { "connect error" } else { "request error" });
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, retry_after_secs: u64) -> Failed {
        let retry_after = Some(Duration::from_secs(retry_after_secs));
        Failed {
            attempts: 1,
            error: AttemptError::Answer(Answer { status, body: Vec::new(), truncated: false, retry_after }),
        }
    }

    #[test]
    fn a_tools_retries_map_onto_the_shared_policy_with_its_bounds() {
        // given a tool asking for more retries than allowed
        let policy = retry_policy(&switchboard_domain::RetryPolicy { max_retries: 50, backoff_ms: 100 });
        // then it gets the most allowed
        assert_eq!(policy.max_attempts, MAX_TOOL_RETRIES + 1);
        // and a 429's hint is waited for up to the bound, however long, while a 503's is not read
        assert_eq!(policy.next_delay(1, &answer(429, 2), 0.5), Some(Duration::from_secs(2)));
        assert_eq!(policy.next_delay(1, &answer(429, 3600), 0.5), Some(MAX_RETRY_DELAY));
        assert_eq!(policy.next_delay(1, &answer(503, 2), 0.5), Some(Duration::from_millis(50)));
        // and a connection that may have carried the request is never retried
        let sent = Failed { attempts: 1, error: AttemptError::Other("reset".into()) };
        assert_eq!(policy.next_delay(1, &sent, 0.5), None);
    }
}
