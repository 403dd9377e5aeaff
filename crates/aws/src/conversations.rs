//! `ConversationsApi`: the engine's `Conversations` port over the Conversations Service's HTTPS
//! API. A reply is `POST <base>/tenants/{tenantId}/conversations/{id}/messages` with JSON
//! `{"text": …}` (conversation ids are unique only within a tenant, so the tenant is part of the
//! address), an `Idempotency-Key` header `<tenantId>/<key>` (unique across tenants, since the
//! service may keep one key space per caller; it answers a repeated key with the first message) and a
//! SigV4 signature for `execute-api` made with the credentials of the shared SDK config. 5xx,
//! 429, timeouts and connection failures are retried with full-jitter backoff (the shared
//! [`RetryPolicy`]), each attempt re-signed.
//! The history a session starts from is `GET <same URL>?limit=<n>`, signed the same way and
//! retried alike, answered `{"messages": [{"messageId", "sender": "customer" | "agent" | "human",
//! "text", "sentAt"}]}`, the newest `n` oldest first. Nothing else is sent (no attachments).

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use serde::Deserialize;
use switchboard_domain::TenantId;
use switchboard_engine::{ConversationError, Conversations, HistoryMessage, Sent};
use switchboard_https::retry::{RetryPolicy, Retryable};

use crate::sigv4::{self, EXECUTE_API, UnsignedRequest};

/// Limits of one `send_reply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversationsLimits {
    /// Requests in all, retries included.
    pub max_attempts: u32,
    /// Each attempt, connect included.
    pub attempt_timeout: Duration,
    pub connect_timeout: Duration,
    /// The ceiling of the first retry's delay; it doubles each retry, and each delay is drawn
    /// uniformly below its ceiling (full jitter, [`RetryPolicy::backoff`]).
    pub backoff: Duration,
}

impl ConversationsLimits {
    /// The retries of one request on the shared policy. No cap on the delay (the attempts are
    /// few) and no `Retry-After` (the service sends none that is read).
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts.max(1),
            base: self.backoff,
            cap: Duration::MAX,
            max_retry_after: Duration::ZERO,
        }
    }
}

impl Default for ConversationsLimits {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            attempt_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            backoff: Duration::from_millis(200),
        }
    }
}

/// The service's answer to a history read.
#[derive(Debug, Deserialize)]
struct HistoryResponse {
    messages: Vec<HistoryMessage>,
}

/// The service's answer: the message id, and whether the key had been used before.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendResponse {
    message_id: String,
    #[serde(default)]
    duplicate: bool,
}

#[derive(Debug, Clone)]
pub struct ConversationsApi {
    http: reqwest::Client,
    base_url: String,
    region: String,
    credentials: Option<SharedCredentialsProvider>,
    limits: ConversationsLimits,
}

impl ConversationsApi {
    /// A client for the service at `base_url` (for example
    /// `https://abc.execute-api.eu-west-1.amazonaws.com/prod`), signing with the region and
    /// credentials of `config`.
    pub fn new(
        config: &SdkConfig,
        base_url: impl Into<String>,
        limits: ConversationsLimits,
    ) -> Result<Self, ConversationError> {
        let http = switchboard_https::client_builder()
            .map_err(|e| ConversationError { message: e.to_string(), retryable: false })?
            .timeout(limits.attempt_timeout)
            .connect_timeout(limits.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ConversationError { message: format!("build the HTTP client: {e}"), retryable: false })?;
        Ok(Self {
            http,
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            region: config.region().map_or_else(|| "us-east-1".to_owned(), |r| r.to_string()),
            credentials: config.credentials_provider(),
            limits,
        })
    }

    /// The URL a reply to `conversation_id` is posted to (the id percent-encoded as one segment).
    pub fn messages_url(&self, tenant: &TenantId, conversation_id: &str) -> Result<String, ConversationError> {
        let mut url = url::Url::parse(&self.base_url)
            .map_err(|e| ConversationError { message: format!("base URL: {e}"), retryable: false })?;
        url.path_segments_mut()
            .map_err(|()| ConversationError { message: "base URL cannot have a path".into(), retryable: false })?
            .pop_if_empty()
            .extend(["tenants", tenant.as_str(), "conversations", conversation_id, "messages"]);
        Ok(url.to_string())
    }

    /// The SigV4 headers (`host`, `authorization`, `x-amz-date`, and `x-amz-security-token`
    /// with temporary credentials) for one attempt.
    async fn signature(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, ConversationError> {
        let unsigned = |m: String| ConversationError { message: m, retryable: false };
        let provider = self.credentials.as_ref().ok_or_else(|| unsigned("no AWS credentials to sign with".into()))?;
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(|e| ConversationError { message: format!("load AWS credentials: {e}"), retryable: true })?;
        let request = UnsignedRequest { method, url, headers, body };
        sigv4::sign(request, &credentials, &self.region, EXECUTE_API, SystemTime::now())
            .map_err(|e| unsigned(e.to_string()))
    }

    /// Sends one request, signed (`headers` signed and sent), retrying 5xx, 429, timeouts and
    /// connection failures under the limits' [`RetryPolicy`], each attempt signed again; the body
    /// of the 2xx answer.
    async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<u8>, ConversationError> {
        let method = &method;
        let outcome = self.limits.retry_policy().run(|attempt| self.attempt(attempt, method, url, headers, body)).await;
        outcome.map_err(|failed| failed.error)
    }

    /// Attempt number `attempt` of [`Self::request`].
    async fn attempt(
        &self,
        attempt: u32,
        method: &reqwest::Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<u8>, Failed> {
        // The signer adds the host it signed, so the one sent is the same.
        let signed = self.signature(method.as_str(), url, headers, body).await.map_err(Failed::last)?;
        let mut request = self.http.request(method.clone(), url).body(body.to_vec());
        for (name, value) in headers.iter().copied().chain(signed.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(|e| {
            let kind = if e.is_timeout() { "timed out" } else { "failed" };
            tracing::warn!(attempt, %method, kind, "conversations request failed");
            Failed::again(ConversationError { message: format!("{method} {url}: {kind}: {e}"), retryable: true })
        })?;
        let status = response.status();
        if status.is_success() {
            return response.bytes().await.map(|b| b.to_vec()).map_err(|e| {
                Failed::last(ConversationError {
                    message: format!("{method} {url}: reading the answer: {e}"),
                    retryable: true,
                })
            });
        }
        let retryable = status.as_u16() == 429 || status.is_server_error();
        // The body may quote the message: keep it out of the logs, and cap what is kept.
        let detail: String = response.text().await.unwrap_or_default().chars().take(300).collect();
        tracing::warn!(attempt, %method, status = status.as_u16(), retryable, "conversations service refused the request");
        let error = ConversationError { message: format!("{method} {url}: HTTP {status}: {detail}"), retryable };
        Err(if retryable { Failed::again(error) } else { Failed::last(error) })
    }
}

/// A failed attempt, and whether another may be made now. That is not `error.retryable`, which
/// tells the engine whether the whole call may be tried again later: an answer that could not
/// be read, or credentials that could not be loaded, end the call but may succeed later.
struct Failed {
    error: ConversationError,
    again: bool,
}

impl Failed {
    fn again(error: ConversationError) -> Self {
        Self { error, again: true }
    }

    fn last(error: ConversationError) -> Self {
        Self { error, again: false }
    }
}

impl Retryable for Failed {
    fn retryable(&self) -> bool {
        self.again
    }
}

#[async_trait]
impl Conversations for ConversationsApi {
    #[tracing::instrument(skip(self, text, idempotency_key), fields(tenant = %tenant))]
    async fn send_reply(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        self.send(tenant, conversation_id, &serde_json::json!({ "text": text }), idempotency_key).await
    }

    #[tracing::instrument(skip(self, text, operator, idempotency_key), fields(tenant = %tenant))]
    async fn send_human(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        operator: &str,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        let body = serde_json::json!({ "text": text, "sender": "human", "operator": operator });
        self.send(tenant, conversation_id, &body, idempotency_key).await
    }

    #[tracing::instrument(skip(self), fields(tenant = %tenant))]
    async fn history(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryMessage>, ConversationError> {
        let url = format!("{}?limit={limit}", self.messages_url(tenant, conversation_id)?);
        let bytes = self.request(reqwest::Method::GET, &url, &[], b"").await?;
        let answer: HistoryResponse = serde_json::from_slice(&bytes).map_err(|e| ConversationError {
            message: format!("GET {url}: unexpected answer: {e}"),
            retryable: false,
        })?;
        let mut messages = answer.messages;
        // At most what was asked for, the newest.
        messages.drain(..messages.len().saturating_sub(limit));
        Ok(messages)
    }
}

impl ConversationsApi {
    /// Posts one message under the tenant-scoped `idempotency_key`.
    async fn send(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        body: &serde_json::Value,
        idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        let url = self.messages_url(tenant, conversation_id)?;
        let idempotency_key = format!("{tenant}/{idempotency_key}");
        let idempotency_key = idempotency_key.as_str();
        let body = serde_json::to_vec(body)
            .map_err(|e| ConversationError { message: format!("encode the message: {e}"), retryable: false })?;
        // Every header that is sent is signed, the idempotency key included.
        let headers = [("content-type", "application/json"), ("idempotency-key", idempotency_key)];
        let bytes = self.request(reqwest::Method::POST, &url, &headers, &body).await?;
        let answer: SendResponse = serde_json::from_slice(&bytes).map_err(|e| ConversationError {
            message: format!("POST {url}: unexpected answer: {e}"),
            retryable: false,
        })?;
        Ok(Sent { message_id: answer.message_id, duplicate: answer.duplicate })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(again: bool) -> Failed {
        Failed { error: ConversationError { message: "HTTP 503".into(), retryable: true }, again }
    }

    #[test]
    fn a_request_is_tried_three_times_with_waits_under_200_then_400_ms() {
        // given the default limits
        let policy = ConversationsLimits::default().retry_policy();
        // then the full window of each retry is 200 ms, then 400 ms, and the third attempt is the last
        assert_eq!(policy.next_delay(1, &failed(true), 1.0), Some(Duration::from_millis(200)));
        assert_eq!(policy.next_delay(2, &failed(true), 1.0), Some(Duration::from_millis(400)));
        assert_eq!(policy.next_delay(3, &failed(true), 1.0), None);
        // and a failure that ends the call is not tried again, though the engine may retry it later
        assert_eq!(policy.next_delay(1, &failed(false), 1.0), None);
        // and no limits make a request without an attempt
        assert_eq!(
            ConversationsLimits { max_attempts: 0, ..ConversationsLimits::default() }.retry_policy().max_attempts,
            1
        );
    }
}
