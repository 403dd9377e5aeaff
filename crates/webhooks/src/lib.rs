//! The outbound call of tenant webhook tools ([`HttpWebhookCaller`]): signed, bounded in time and
//! size, retried only when it is safe, and unable to reach private or metadata addresses.
//! It does not build the request body (the engine does) nor judge the answer (the model does).

mod guard;
mod secrets;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
use switchboard_domain::tool::{MAX_TOOL_RETRIES, MAX_TOOL_TIMEOUT_MS, RESERVED_HEADERS};
use switchboard_domain::webhook::{IDEMPOTENCY_KEY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
use switchboard_engine::ports::{Secrets, WebhookCaller, WebhookError, WebhookRequest, WebhookResponse};
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
        secret: Option<&secrets::SecretValue>,
        timeout: Duration,
    ) -> Result<Answer, AttemptError> {
        let mut headers = headers.clone();
        let timestamp = chrono::Utc::now().timestamp();
        headers.insert(TIMESTAMP_HEADER, HeaderValue::from(timestamp));
        if let Some(secret) = secret {
            let mut value = HeaderValue::from_str(&sign(secret.expose(), timestamp, &request.body))
                .map_err(|_| AttemptError::Other("cannot encode the signature".into()))?;
            value.set_sensitive(true);
            headers.insert(SIGNATURE_HEADER, value);
        }
        let mut response = self
            .client
            .post(url.clone())
            .headers(headers)
            .body(request.body.clone())
            .timeout(timeout)
            .send()
            .await
            .map_err(classify)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await.map_err(classify)? {
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
            Some(name) => Some(self.secrets.get(&request.tenant_id, name).await?),
            None => None,
        };
        let headers = Self::base_headers(request)?;
        let timeout = Duration::from_millis(u64::from(handler.timeout_ms.clamp(1, MAX_TOOL_TIMEOUT_MS)));
        let max_attempts = handler.retry_policy.max_retries.min(MAX_TOOL_RETRIES) + 1;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let last = attempts >= max_attempts;
            let outcome = tokio::time::timeout(timeout, self.attempt(url, request, &headers, secret.as_ref(), timeout))
                .await
                .unwrap_or(Err(AttemptError::Timeout));
            let delay = match outcome {
                Ok(answer) => {
                    let retryable = answer.status == 429 || answer.status >= 500;
                    if !retryable || last {
                        return Ok(WebhookResponse {
                            status: answer.status,
                            body: answer.body,
                            truncated: answer.truncated,
                            attempts,
                            host: host.to_owned(),
                        });
                    }
                    match answer.retry_after {
                        Some(wait) if answer.status == 429 => wait.min(MAX_RETRY_DELAY),
                        _ => backoff(handler.retry_policy.backoff_ms, attempts),
                    }
                }
                Err(AttemptError::Blocked(reason)) => return Err(WebhookError::Blocked(reason)),
                Err(AttemptError::Other(message)) => return Err(WebhookError::Connect { message, attempts }),
                Err(AttemptError::Timeout) if last => return Err(WebhookError::Timeout { attempts }),
                Err(AttemptError::Connect(message)) if last => return Err(WebhookError::Connect { message, attempts }),
                Err(AttemptError::Timeout | AttemptError::Connect(_)) => {
                    backoff(handler.retry_policy.backoff_ms, attempts)
                }
            };
            tracing::debug!(tool = %request.tool_name, host, attempts, delay_ms = delay.as_millis() as u64, "retrying webhook");
            tokio::time::sleep(delay).await;
        }
    }
}

#[async_trait]
impl WebhookCaller for HttpWebhookCaller {
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

enum AttemptError {
    /// The resolver found only refused addresses: final, never retried.
    Blocked(String),
    Timeout,
    /// No connection was made: safe to retry.
    Connect(String),
    /// Failed after the request may have been sent (reset, broken body): not retried.
    Other(String),
}

fn classify(error: reqwest::Error) -> AttemptError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&error);
    while let Some(e) = source {
        if let Some(blocked) = e.downcast_ref::<guard::BlockedAddress>() {
            return AttemptError::Blocked(blocked.to_string());
        }
        source = e.source();
    }
    if error.is_timeout() {
        AttemptError::Timeout
    } else if error.is_connect() {
        AttemptError::Connect(describe(&error))
    } else {
        AttemptError::Other(describe(&error))
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

/// Exponential backoff with full jitter: a uniform wait in `[0, base·2^(n-1)]`, capped.
fn backoff(base_ms: u32, attempts: u32) -> Duration {
    let ceiling = u64::from(base_ms)
        .saturating_mul(1u64 << attempts.saturating_sub(1).min(20))
        .min(MAX_RETRY_DELAY.as_millis() as u64);
    Duration::from_millis(fastrand::u64(0..=ceiling))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn backoff_grows_and_stays_under_the_cap() {
        for attempts in 1..=6 {
            let ceiling = (100u64 << (attempts - 1)).min(10_000);
            for _ in 0..50 {
                assert!(backoff(100, attempts).as_millis() as u64 <= ceiling);
            }
        }
        assert!(backoff(10_000, 30) <= MAX_RETRY_DELAY);
        assert_eq!(backoff(0, 3), Duration::ZERO);
    }
}
