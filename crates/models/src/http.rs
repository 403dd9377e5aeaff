//! What the HTTP providers share: one JSON POST per attempt with a per-call timeout, the API key
//! in a header marked sensitive (never in a log line or an error), and one way of sorting a
//! failed response into a [`ModelError`]: 401/403 unauthorized, 429 throttled (with its
//! `Retry-After`), 408/5xx/529 unavailable, any other 4xx rejected. The provider's own error
//! code and message go into the error; its body is cut to a few hundred characters.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::de::DeserializeOwned;
use switchboard_engine::ModelError;

use crate::sse::{SseEvent, SseReader};

/// The most of a provider's error text kept in a [`ModelError`].
const MAX_ERROR_TEXT: usize = 400;

/// An HTTP client for one provider.
#[derive(Debug, Clone)]
pub(crate) struct JsonClient {
    client: reqwest::Client,
    provider: &'static str,
    headers: HeaderMap,
}

impl JsonClient {
    /// `headers` (the provider's key and version) are sent with every call, all marked sensitive
    /// so that no log or debug output of the request shows them.
    pub(crate) fn new(
        provider: &'static str,
        timeout: Duration,
        headers: Vec<(HeaderName, String)>,
    ) -> Result<Self, String> {
        let client = switchboard_https::client_builder()
            .map_err(|e| format!("{provider}: {e}"))?
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("{provider}: building the HTTP client: {e}"))?;
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| format!("{provider}: the {name} header holds bad characters"))?;
            value.set_sensitive(true);
            map.insert(name, value);
        }
        Ok(Self { client, provider, headers: map })
    }

    /// POSTs `body` to `url` and decodes the answer as `T`.
    pub(crate) async fn post<T: DeserializeOwned>(&self, url: &str, body: &serde_json::Value) -> Result<T, ModelError> {
        let response = self
            .client
            .post(url)
            .headers(self.headers.clone())
            .json(body)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = response.bytes().await.map_err(|e| self.transport(e))?;
        if !status.is_success() {
            return Err(self.failure(status.as_u16(), &bytes, retry_after));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            ModelError::Unavailable(format!("{}: the answer is not the expected JSON: {e}", self.provider))
        })
    }

    /// POSTs `body` to `url` and hands each server-sent event of the answer to `on_event` as it
    /// arrives, until the body ends or `on_event` answers `false` (the provider's last event).
    pub(crate) async fn post_events(
        &self,
        url: &str,
        body: &serde_json::Value,
        mut on_event: impl FnMut(SseEvent) -> Result<bool, ModelError> + Send,
    ) -> Result<(), ModelError> {
        let mut response = self
            .client
            .post(url)
            .headers(self.headers.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(body)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let bytes = response.bytes().await.map_err(|e| self.transport(e))?;
            return Err(self.failure(status.as_u16(), &bytes, retry_after));
        }
        let mut reader = SseReader::default();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(e))? {
            let events = reader.push(&chunk).map_err(|why| {
                ModelError::Unavailable(format!("{}: the answer's event stream holds {why}", self.provider))
            })?;
            for event in events {
                if !on_event(event)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn transport(&self, e: reqwest::Error) -> ModelError {
        if e.is_timeout() {
            ModelError::Timeout
        } else {
            // No URL in the text: a base URL may carry credentials.
            ModelError::Unavailable(format!("{}: {}", self.provider, e.without_url()))
        }
    }

    fn failure(&self, status: u16, body: &[u8], retry_after: Option<Duration>) -> ModelError {
        let text = format!("{} {status}: {}", self.provider, error_text(body));
        tracing::warn!(provider = self.provider, status, error = %text, "model provider refused the call");
        match status {
            401 | 403 => ModelError::Unauthorized(text),
            429 => ModelError::Throttled { message: text, retry_after },
            408 | 409 | 425 => ModelError::Unavailable(text),
            s if s >= 500 => ModelError::Unavailable(text),
            _ => ModelError::Rejected(text),
        }
    }
}

/// `error.code`/`error.type` and `error.message` from an OpenAI- or Anthropic-shaped error body;
/// else the body itself, cut short.
fn error_text(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let text = match error {
        Some(serde_json::Value::Object(e)) => {
            let code = ["code", "type"].iter().find_map(|k| e.get(*k).and_then(serde_json::Value::as_str));
            let message = e.get("message").and_then(serde_json::Value::as_str).unwrap_or("");
            match code {
                Some(code) => format!("{code}: {message}"),
                None => message.to_owned(),
            }
        }
        Some(serde_json::Value::String(s)) => s.clone(),
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    cut(text.trim(), MAX_ERROR_TEXT)
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The provider's wait hint: `retry-after-ms` (OpenAI), else `Retry-After` in seconds. An HTTP
/// date is not read (no provider in use sends one); it counts as no hint.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok().filter(|v| *v >= 0.0);
    if let Some(ms) = number("retry-after-ms") {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    number("retry-after").and_then(|s| Duration::try_from_secs_f64(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_of_both_shapes_give_their_code_and_message() {
        let openai = br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
        assert_eq!(error_text(openai), "rate_limit_exceeded: Rate limit reached");
        let anthropic = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(error_text(anthropic), "overloaded_error: Overloaded");
        assert_eq!(error_text(b"upstream connect error"), "upstream connect error");
        assert_eq!(error_text(&[b'x'; 1000]).chars().count(), MAX_ERROR_TEXT + 1);
    }

    #[test]
    fn retry_after_reads_milliseconds_first_then_seconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut date = HeaderMap::new();
        date.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2026 07:28:00 GMT"));
        assert_eq!(retry_after(&date), None);
        date.insert("retry-after", HeaderValue::from_static("-1"));
        assert_eq!(retry_after(&date), None);
    }
}
