//! A test's view of the internal API over real HTTP: a client with one API key whose answers are
//! read as JSON where they are, and one request written byte for byte (no client-side
//! normalisation) for what a well-behaved client would never send. Shared by the in-process API
//! suites and the suites that run the `switchboard` binary.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// What serves the API: anything with a base URL (`http://127.0.0.1:<port>`).
pub trait Base {
    fn base(&self) -> &str;
}

impl Base for str {
    fn base(&self) -> &str {
        self
    }
}

impl Base for String {
    fn base(&self) -> &str {
        self
    }
}

/// An API client with one key; answers read as JSON where they are.
#[derive(Debug)]
pub struct Api {
    pub base: String,
    pub key: String,
    client: reqwest::Client,
}

impl Base for Api {
    fn base(&self) -> &str {
        &self.base
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: reqwest::StatusCode,
    pub body: serde_json::Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Api {
    pub fn new(server: &(impl Base + ?Sized), key: &str) -> Self {
        Api { base: server.base().to_owned(), key: key.to_owned(), client: reqwest::Client::new() }
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = self.client.request(method, format!("{}{path}", self.base)).bearer_auth(&self.key);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.unwrap();
        let (status, headers) = (res.status(), res.headers().clone());
        let text = res.text().await.unwrap();
        let body = if text.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
        };
        Reply { status, body, headers }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(reqwest::Method::GET, path, None, &[]).await
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> Reply {
        self.call(reqwest::Method::POST, path, Some(body), &[]).await
    }
}

/// One HTTP/1.1 request written as is, the connection left open for the server to close; the
/// status code and the body of the answer, or `None` if the server closed the connection without
/// one.
pub fn raw(base: &str, request: &str) -> Option<(u16, String)> {
    let addr = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    // A ceiling against a hung test, not a measurement: every case answers well before it.
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}
