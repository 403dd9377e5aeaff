//! Oversized and slow requests against `switchboard serve`: answered at once, after the read
//! timeout, or cut off when the headers never finish (the binary's own server loop). The rest
//! of the cross-tenant corpus is in `crates/api/tests/tenancy.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Api, Server, create_tenant};
use serde_json::{Value, json};

/// One HTTP/1.1 request written as is (no client-side normalisation), the connection left open
/// for the server to close; the status code and the body of the answer, or `None` if the server
/// closed the connection without one.
fn raw(base: &str, request: &str) -> Option<(u16, String)> {
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

#[tokio::test]
async fn an_oversized_or_slow_request_is_answered_at_once_or_after_the_read_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--read-timeout", "1"]);
    let ta = Api::new(&server, &create_tenant(&dir.path().join("data"), "ta"));
    let head = |path: &str, length: u64| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
            ta.key
        )
    };
    // a body announced far over the limit: 413 without waiting for it (a 408 would mean the
    // server waited for the body)
    for path in ["/tenants/ta/agents", "/events"] {
        let (status, body) = raw(&server.base, &format!("{}{{}}", head(path, 999_999_999))).unwrap();
        assert_eq!(status, 413, "{path}: {body}");
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(problem["type"], "urn:switchboard:problem:payload-too-large");
    }
    // a body that stops arriving: 408 once the read timeout has passed
    let (status, body) = raw(&server.base, &format!("{}{{}}", head("/tenants/ta/agents", 10))).unwrap();
    assert_eq!(status, 408, "{body}");
    let problem: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["type"], "urn:switchboard:problem:request-timeout");
    // headers that never finish: the connection is closed
    let answer = raw(&server.base, "GET /health HTTP/1.1\r\nHost: localhost\r\n");
    assert!(answer.as_ref().is_none_or(|(status, _)| *status == 408), "{answer:?}");
    // and nothing was created by any of it
    assert_eq!(ta.get("/tenants/ta/agents").await.body["items"], json!([]));
}
