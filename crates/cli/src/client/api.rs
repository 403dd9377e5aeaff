//! The client's HTTP side: one request to the internal API, authorised with an API key or signed
//! with SigV4, an API error rendered for a person, every page of a list, and a request body read
//! from a file. What a command does with the answer is its own file's.

use std::path::Path;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::shared::Remote;

/// A failed call, rendered for a person.
pub fn problem_message(status: StatusCode, body: &Value) -> String {
    // API Gateway's own refusals (signature, IAM policy, throttling) are `{"message": …}`.
    let detail = body["detail"].as_str().or(body["message"].as_str()).or(body.as_str()).unwrap_or("");
    let mut out = format!(
        "{} {}: {detail}",
        status.as_u16(),
        body["title"].as_str().unwrap_or(status.canonical_reason().unwrap_or("error")),
    );
    if let Some(errors) = body["errors"].as_array() {
        for e in errors {
            let pointer = e["pointer"].as_str().filter(|p| !p.is_empty()).unwrap_or("(body)");
            out.push_str(&format!("\n  {pointer}: {}", e["detail"].as_str().unwrap_or("")));
        }
    }
    out
}

/// How requests prove who sends them.
#[derive(Debug)]
pub enum Auth {
    /// `Authorization: Bearer <key>`, for `switchboard serve`.
    ApiKey(String),
    /// SigV4 for `execute-api`, for API Gateway with `AWS_IAM` auth.
    #[cfg(feature = "aws")]
    SigV4(crate::shared::sigv4::Signer),
}

impl Auth {
    pub async fn new(remote: &Remote) -> anyhow::Result<Self> {
        if remote.aws_sigv4 {
            #[cfg(feature = "aws")]
            return Ok(Self::SigV4(crate::shared::sigv4::Signer::from_default_chain(remote.region.as_deref()).await?));
            #[cfg(not(feature = "aws"))]
            bail!(
                "--aws-sigv4 needs a switchboard built with the `aws` feature (on by default); \
                 this one was built without it"
            );
        }
        match remote.api_key.clone() {
            Some(key) => Ok(Self::ApiKey(key)),
            None => bail!(
                "--api-key (or SWITCHBOARD_API_KEY) is required: an admin key from <data-dir>/admin.key or a tenant key \
                 (or --aws-sigv4 for an API Gateway with IAM auth)"
            ),
        }
    }

    /// The headers to add to a request that also sends `headers`.
    #[cfg_attr(not(feature = "aws"), allow(unused_variables))]
    fn headers(
        &self,
        method: &Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> anyhow::Result<Vec<(String, String)>> {
        match self {
            Self::ApiKey(key) => Ok(vec![("authorization".to_owned(), format!("Bearer {key}"))]),
            #[cfg(feature = "aws")]
            Self::SigV4(signer) => signer.sign(method.as_str(), url, headers, body),
        }
    }
}

pub struct Api {
    base: String,
    auth: Auth,
    http: reqwest::Client,
}

impl Api {
    pub async fn new(remote: &Remote) -> anyhow::Result<Self> {
        let auth = Auth::new(remote).await?;
        Ok(Self { base: remote.endpoint().to_owned(), auth, http: reqwest::Client::new() })
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> anyhow::Result<(Value, Option<String>)> {
        let extra: Vec<(&str, &str)> = if_match.map(|tag| ("if-match", tag)).into_iter().collect();
        let res = self.send(method, path, body, &extra).await?;
        let etag = res.headers().get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok((answer(res).await?, etag))
    }

    /// Sends one request, signed or with the key, with `extra` headers; the response as it is.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<reqwest::Response> {
        // The URL as it will be sent (parsed once, so the signed string is the sent one) and the
        // body's exact bytes: a signature covers both.
        let url = reqwest::Url::parse(&format!("{}{path}", self.base))
            .with_context(|| format!("--endpoint {} is not a URL", self.base))?;
        let body = body.map(serde_json::to_vec).transpose()?;
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        headers.extend_from_slice(extra);
        let auth = self.auth.headers(&method, url.as_str(), &headers, body.as_deref().unwrap_or_default())?;
        let mut req = self.http.request(method, url);
        for (name, value) in headers.iter().copied().chain(auth.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            let mut value = reqwest::header::HeaderValue::from_str(value)?;
            // Kept out of debug output, as `bearer_auth` does.
            value.set_sensitive(matches!(name, "authorization" | "x-amz-security-token"));
            req = req.header(name, value);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        req.send().await.with_context(|| format!("cannot reach {} (--endpoint)", self.base))
    }
}

impl Api {
    /// Every item of a paged list, following `nextCursor`; `path` already has a query string.
    pub async fn all_pages(&self, path: &str) -> anyhow::Result<Vec<Value>> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page_path = match &cursor {
                Some(c) => format!("{path}&cursor={}", query_value(c)),
                None => path.to_owned(),
            };
            let (page, _) = self.call(Method::GET, &page_path, None, None).await?;
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => return Ok(items),
            }
        }
    }
}

/// `value` percent-encoded for a query string: everything but the unreserved characters, so a
/// SigV4 canonical query (which decodes and re-encodes) reads the same bytes as were sent.
pub fn query_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The most a `-f` file may hold. The API takes bodies of at most 2 MiB; YAML's comments and
/// indentation get twice that.
const MAX_RECORD_BYTES: usize = 4 * 1024 * 1024;

/// YAML as a record or bundle is read: YAML 1.2's scalars, as JSON sees them (`no` and `0123`
/// stay strings), one document, and budgets that no record reaches (tool schemas nest at most 16
/// levels) but that stop a crafted file (deep nesting, an alias bomb) before it costs memory.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_documents: 1,
            max_depth: 48,
            max_nodes: 200_000,
            max_events: 500_000,
            max_anchors: 1_000,
            max_aliases: 1_000,
            max_total_scalar_bytes: MAX_RECORD_BYTES,
        },
    }
}

/// Reads a record from a `.json`, `.yaml` or `.yml` file, or from standard input for `-`
/// (JSON when it starts with `{` or `[`, else YAML).
pub fn read_record(path: &Path) -> anyhow::Result<Value> {
    use std::io::Read;
    let stdin = path.as_os_str() == "-";
    let mut text = String::new();
    let read = if stdin {
        std::io::stdin().take(MAX_RECORD_BYTES as u64 + 1).read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_RECORD_BYTES as u64 + 1).read_to_string(&mut text))
    };
    read.with_context(|| format!("-f {}", path.display()))?;
    if text.len() > MAX_RECORD_BYTES {
        bail!("-f {}: larger than {MAX_RECORD_BYTES} bytes", path.display());
    }
    let is_yaml = if stdin {
        !text.trim_start().starts_with(['{', '['])
    } else {
        matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
    };
    if is_yaml {
        serde_saphyr::from_str_with_options(&text, yaml_options())
            .with_context(|| format!("-f {}: not valid YAML", path.display()))
    } else {
        serde_json::from_str(&text).with_context(|| format!("-f {}: not valid JSON", path.display()))
    }
}

/// A response's JSON body, or its problem as the error when it is not a success.
pub async fn answer(res: reqwest::Response) -> anyhow::Result<Value> {
    let status = res.status();
    let text = res.text().await?;
    let value = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    if !status.is_success() {
        bail!("{}", problem_message(status, &value));
    }
    Ok(value)
}

pub fn tenant(remote: &Remote) -> anyhow::Result<&str> {
    remote.tenant.as_deref().context("--tenant (or SWITCHBOARD_TENANT) is required")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn yaml_file(dir: &Path, text: &str) -> std::path::PathBuf {
        let path = dir.join("record.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_yaml_record_reads_as_its_json_would() {
        let dir = tempfile::tempdir().unwrap();
        let path = yaml_file(dir.path(), "name: Support\nenabled: true\nanswer: no\ncode: 0123\nmaxTurns: 8\n");
        let record = read_record(&path).unwrap();
        assert_eq!(record, json!({"name": "Support", "enabled": true, "answer": "no", "code": "0123", "maxTurns": 8}));
    }

    #[test]
    fn an_alias_bomb_is_refused_naming_its_line() {
        // given nine levels of ten aliases each: a billion strings once expanded
        let dir = tempfile::tempdir().unwrap();
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            bomb.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", ")));
        }
        let e = format!("{:#}", read_record(&yaml_file(dir.path(), &bomb)).unwrap_err());
        assert!(e.contains("not valid YAML") && e.contains("budget") && e.contains("line"), "{e}");
    }
}
