//! `switchboard … --aws-sigv4` against a stand-in for API Gateway with `AWS_IAM` auth: a loopback
//! server that checks every request's SigV4 signature on its own (canonical request, string to
//! sign and signing key are computed here with `hmac` and `sha2`, not by the code under test),
//! refuses a bad one with 403 and API Gateway's `{"message"}`, and forwards a good one, stage
//! prefix removed, to a real `switchboard serve` with the admin key, so what the CLI prints is
//! the server's real answer. The CLI gets static credentials through the environment only.
#![cfg(feature = "aws")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, request::Parts};
use axum::response::{IntoResponse, Response};
use common::{Server, bin, create_tenant, examples};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const KEY_ID: &str = "AKIDSWITCHBOARDTEST";
const SECRET: &str = "s3cr3t/for+tests";
const TOKEN: &str = "session-token-for-tests";
const REGION: &str = "eu-west-1";
const STAGE: &str = "/prod";

// ---- SigV4, independently: the steps of AWS's "Create a signed AWS API request" guide ----

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// RFC 3986 encoding: everything but the unreserved characters (and `/` when `keep_slash`).
fn uri_encode(bytes: &[u8], keep_slash: bool) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            b'/' if keep_slash => "/".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let escaped = b.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (b[i], escaped) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (other, _) => {
                out.push(other);
                i += 1;
            }
        }
    }
    out
}

/// The request as SigV4 sees it.
struct Canonical<'a> {
    method: &'a str,
    /// The path as received (already percent-encoded once).
    path: &'a str,
    query: &'a str,
    /// `(lowercase name, value)` of each signed header, in signed-headers order.
    headers: Vec<(String, String)>,
    body: &'a [u8],
}

impl Canonical<'_> {
    fn request(&self) -> String {
        // Not S3: the path is encoded again (so `%` becomes `%25`).
        let path = if self.path.is_empty() { "/".to_owned() } else { uri_encode(self.path.as_bytes(), true) };
        let mut pairs: Vec<(String, String)> = self
            .query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (uri_encode(&percent_decode(k), false), uri_encode(&percent_decode(v), false))
            })
            .collect();
        pairs.sort();
        let query = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
        let headers: String = self.headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let signed = self.headers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(";");
        format!("{}\n{path}\n{query}\n{headers}\n{signed}\n{}", self.method, hex(&Sha256::digest(self.body)))
    }

    fn signature(&self, secret: &str, amz_date: &str, region: &str, service: &str) -> String {
        let date = &amz_date[..8];
        let scope = format!("{date}/{region}/{service}/aws4_request");
        let to_sign = format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex(&Sha256::digest(self.request())));
        let key = [region, service, "aws4_request"]
            .iter()
            .fold(hmac(format!("AWS4{secret}").as_bytes(), date), |key, part| hmac(&key, part));
        hex(&hmac(&key, &to_sign))
    }
}

#[test]
fn the_verifier_itself_reproduces_the_published_get_vanilla_and_form_post_vectors() {
    let vanilla = Canonical {
        method: "GET",
        path: "/",
        query: "",
        headers: vec![
            ("host".into(), "example.amazonaws.com".into()),
            ("x-amz-date".into(), "20150830T123600Z".into()),
        ],
        body: b"",
    };
    let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    assert_eq!(
        vanilla.signature(secret, "20150830T123600Z", "us-east-1", "service"),
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
    let query = Canonical { query: "Param2=value2&Param1=value1", ..vanilla };
    assert_eq!(
        query.signature(secret, "20150830T123600Z", "us-east-1", "service"),
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
    );
    let form = Canonical {
        method: "POST",
        path: "/",
        query: "",
        headers: vec![
            ("content-type".into(), "application/x-www-form-urlencoded".into()),
            ("host".into(), "example.amazonaws.com".into()),
            ("x-amz-date".into(), "20150830T123600Z".into()),
        ],
        body: b"Param1=value1",
    };
    assert_eq!(
        form.signature(secret, "20150830T123600Z", "us-east-1", "service"),
        "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
    );
}

// ---- the gateway ----

/// A request the gateway let through: what was signed.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path_and_query: String,
    signed_headers: String,
}

#[derive(Clone)]
struct GatewayState {
    upstream: String,
    admin: String,
    http: reqwest::Client,
    seen: Arc<Mutex<Vec<Seen>>>,
    refused: Arc<Mutex<Vec<String>>>,
}

/// API Gateway's refusal: 403, its error type header and `{"message"}`.
fn refuse(state: &GatewayState, kind: &str, message: &str) -> Response {
    state.refused.lock().unwrap().push(message.to_owned());
    (
        StatusCode::FORBIDDEN,
        [("content-type", "application/json"), ("x-amzn-errortype", kind)],
        json!({ "message": message }).to_string(),
    )
        .into_response()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Checks what API Gateway checks for `AWS_IAM`: a SigV4 `Authorization` for this key, region and
/// `execute-api`, dated within five minutes, with the session token, and a signature over this
/// exact method, path, query, signed headers and body. Returns the signed headers, or the error
/// type and message API Gateway would answer.
fn verify(parts: &Parts, body: &[u8]) -> Result<String, (&'static str, String)> {
    let missing = || ("MissingAuthenticationTokenException", "Missing Authentication Token".to_owned());
    let auth = header(&parts.headers, "authorization").ok_or_else(missing)?;
    let fields = auth.strip_prefix("AWS4-HMAC-SHA256 ").ok_or_else(missing)?;
    let field = |name: &str| {
        fields.split(", ").find_map(|f| f.strip_prefix(name)).map(str::to_owned).ok_or_else(|| {
            (
                "IncompleteSignatureException",
                format!("Authorization header requires '{}' parameter.", &name[..name.len() - 1]),
            )
        })
    };
    let (credential, signed_headers, signature) =
        (field("Credential=")?, field("SignedHeaders=")?, field("Signature=")?);
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, date, region, service, "aws4_request"] = scope[..] else {
        return Err(("IncompleteSignatureException", format!("bad credential scope {credential}")));
    };
    if key_id != KEY_ID {
        return Err(("UnrecognizedClientException", "The security token included in the request is invalid.".into()));
    }
    if region != REGION || service != "execute-api" {
        return Err(("InvalidSignatureException", format!("Credential should be scoped to {REGION}/execute-api")));
    }
    let amz_date = header(&parts.headers, "x-amz-date").ok_or_else(missing)?;
    let sent = chrono::NaiveDateTime::parse_from_str(amz_date, "%Y%m%dT%H%M%SZ").map_err(|_| missing())?;
    if (chrono::Utc::now().naive_utc() - sent).num_seconds().abs() > 300 || !amz_date.starts_with(date) {
        return Err(("InvalidSignatureException", "Signature expired".into()));
    }
    let names: Vec<&str> = signed_headers.split(';').collect();
    if !names.contains(&"host") || !names.contains(&"x-amz-date") || !names.contains(&"x-amz-security-token") {
        return Err((
            "IncompleteSignatureException",
            format!("host, x-amz-date and the token must be signed: {signed_headers}"),
        ));
    }
    if header(&parts.headers, "x-amz-security-token") != Some(TOKEN) {
        return Err(("UnrecognizedClientException", "The security token included in the request is invalid.".into()));
    }
    let mut headers = Vec::new();
    for name in &names {
        let values: Vec<String> = parts
            .headers
            .get_all(*name)
            .iter()
            .map(|v| v.to_str().unwrap().split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        if values.is_empty() {
            return Err(("IncompleteSignatureException", format!("signed header {name} is not in the request")));
        }
        headers.push(((*name).to_owned(), values.join(",")));
    }
    let canonical = Canonical {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        headers,
        body,
    };
    if canonical.signature(SECRET, amz_date, REGION, "execute-api") != signature {
        return Err((
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. Check your AWS \
             Secret Access Key and signing method. Consult the service documentation for details."
                .into(),
        ));
    }
    Ok(signed_headers)
}

async fn gateway(State(state): State<GatewayState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let signed_headers = match verify(&parts, &body) {
        Ok(s) => s,
        Err((kind, message)) => return refuse(&state, kind, &message),
    };
    let path_and_query = parts.uri.path_and_query().unwrap().as_str().to_owned();
    let Some(rest) = path_and_query.strip_prefix(STAGE) else {
        return refuse(&state, "MissingAuthenticationTokenException", "Missing Authentication Token");
    };
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path_and_query: path_and_query.clone(),
        signed_headers,
    });
    let mut forward =
        state.http.request(parts.method.clone(), format!("{}{rest}", state.upstream)).bearer_auth(&state.admin);
    for name in ["content-type", "if-match", "idempotency-key"] {
        if let Some(v) = parts.headers.get(name) {
            forward = forward.header(name, v);
        }
    }
    let answer = forward.body(body.to_vec()).send().await.unwrap();
    let mut response = Response::builder().status(answer.status());
    for name in ["content-type", "etag", "location"] {
        if let Some(v) = answer.headers().get(name) {
            response = response.header(name, v);
        }
    }
    response.body(axum::body::Body::from(answer.bytes().await.unwrap())).unwrap()
}

/// The gateway on a free loopback port; stopped with its runtime when dropped.
struct Gateway {
    /// The stage URL, as `--endpoint`.
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    refused: Arc<Mutex<Vec<String>>>,
    runtime: tokio::runtime::Runtime,
}

impl Gateway {
    fn start(upstream: &str, admin: &str) -> Self {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let state = GatewayState {
            upstream: upstream.to_owned(),
            admin: admin.to_owned(),
            http: reqwest::Client::new(),
            seen: Arc::default(),
            refused: Arc::default(),
        };
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}{STAGE}", listener.local_addr().unwrap());
        let app = Router::new().fallback(gateway).with_state(state.clone());
        runtime.spawn(async move { axum::serve(listener, app).await });
        Self { url, seen: state.seen, refused: state.refused, runtime }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

// ---- the CLI, with nothing from this machine's AWS setup ----

/// The `switchboard` binary with only the given AWS variables: no profile files, no instance
/// metadata, nothing inherited.
fn isolated(aws_env: &[(&str, &str)]) -> std::process::Command {
    let nowhere = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-aws-dir");
    let mut command = bin();
    command
        .env_clear()
        .env("AWS_CONFIG_FILE", nowhere.join("config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", nowhere.join("credentials"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .envs(aws_env.iter().copied());
    command
}

/// `switchboard <args> --aws-sigv4` with only the given AWS variables (see [`isolated`]).
fn cli(gateway: &Gateway, args: &[&str], aws_env: &[(&str, &str)]) -> Output {
    isolated(aws_env).args(args).args(["--aws-sigv4", "--endpoint", &gateway.url, "--tenant", "acme"]).output().unwrap()
}

fn good_credentials() -> Vec<(&'static str, &'static str)> {
    vec![
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", TOKEN),
        ("AWS_REGION", REGION),
    ]
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn fails(out: Output) -> String {
    assert!(!out.status.success(), "should fail: {}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn a_tenant_is_managed_through_an_iam_authorised_gateway() {
    // given a server with a tenant that has 100 agents already, behind the gateway
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    create_tenant(&data, "acme");
    let gateway = Gateway::start(&server.base, &server.admin);
    gateway.runtime.block_on(async {
        let http = reqwest::Client::new();
        for n in 0..100 {
            let agent = json!({ "name": format!("Seeded {n}"), "systemPrompt": "p", "model": "m" });
            let res = http
                .post(format!("{}/tenants/acme/agents", server.base))
                .bearer_auth(&server.admin)
                .json(&agent)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 201);
        }
    });
    let creds = good_credentials();

    // when an agent is created from a file (a signed POST with a body)
    let file = write(
        dir.path(),
        "agent.json",
        r#"{"name": "Support", "systemPrompt": "You help customers.", "model": "m", "tools": ["send_message"]}"#,
    );
    let created = ok(cli(&gateway, &["agents", "create", "-f", &file], &creds));

    // then the server made it, and the gateway saw the body and its content type signed
    assert!(created.starts_with("created agent "), "{created}");
    let agent = created.split_whitespace().last().unwrap().to_owned();
    let post = gateway.seen().pop().unwrap();
    assert_eq!((post.method.as_str(), post.path_and_query.as_str()), ("POST", "/prod/tenants/acme/agents"));
    assert_eq!(post.signed_headers, "content-type;host;x-amz-date;x-amz-security-token");

    // when all 101 are listed with a filter (signed GETs with query strings, two pages)
    let listed: Value =
        serde_json::from_str(&ok(cli(&gateway, &["agents", "list", "--status", "active", "--json"], &creds))).unwrap();

    // then every page came through, the second with its cursor signed
    assert_eq!(listed.as_array().unwrap().len(), 101);
    assert_eq!(listed[100]["agentId"], agent.as_str());
    let pages: Vec<String> = gateway.seen().iter().skip(1).map(|s| s.path_and_query.clone()).collect();
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert_eq!(pages[0], "/prod/tenants/acme/agents?limit=100&status=active");
    let cursor = listed[99]["agentId"].as_str().unwrap();
    assert_eq!(pages[1], format!("/prod/tenants/acme/agents?limit=100&status=active&cursor={cursor}"));

    // when it is updated (a signed GET for the ETag, then a signed PUT with If-Match), with the
    // region from --region instead of the environment
    let v2 = write(dir.path(), "agent2.yaml", "name: Support v2\nsystemPrompt: You help.\nmodel: m\n");
    let mut creds_no_region = creds.clone();
    creds_no_region.retain(|(k, _)| *k != "AWS_REGION");
    let updated = ok(cli(&gateway, &["agents", "update", &agent, "-f", &v2, "--region", REGION], &creds_no_region));

    // then
    assert_eq!(updated.trim(), format!("updated agent {agent} (version 2)"));
    let put = gateway.seen().pop().unwrap();
    assert_eq!(put.method, "PUT");
    assert_eq!(put.signed_headers, "content-type;host;if-match;x-amz-date;x-amz-security-token");
    let got: Value = serde_json::from_str(&ok(cli(&gateway, &["agents", "get", &agent], &creds))).unwrap();
    assert_eq!(got["name"], "Support v2");
    assert!(gateway.refused.lock().unwrap().is_empty());

    // and an error from the server behind the gateway still names the field at fault
    let bad = write(
        dir.path(),
        "bad.json",
        r#"{"name": "B", "systemPrompt": "p", "model": "m", "modelConfig": {"temperature": 9}}"#,
    );
    let err = fails(cli(&gateway, &["agents", "create", "-f", &bad], &creds));
    assert!(err.contains("/modelConfig/temperature"), "{err}");
}

#[test]
fn a_wrong_secret_key_is_refused_by_the_gateway_and_the_cli_says_why() {
    // given a gateway (nothing behind it is reached) and a secret that is not the caller's
    let gateway = Gateway::start("http://127.0.0.1:9", "unused");
    let mut creds = good_credentials();
    creds.retain(|(k, _)| *k != "AWS_SECRET_ACCESS_KEY");
    creds.push(("AWS_SECRET_ACCESS_KEY", "not-the-secret"));

    // when
    let err = fails(cli(&gateway, &["agents", "list"], &creds));

    // then the signature was checked and refused, and the CLI prints the gateway's message
    assert!(err.contains("403 Forbidden: The request signature we calculated does not match"), "{err}");
    assert_eq!(gateway.refused.lock().unwrap().len(), 1);
    assert!(gateway.seen().is_empty());
}

#[test]
fn without_credentials_or_a_region_the_cli_says_what_is_missing_and_sends_nothing() {
    let gateway = Gateway::start("http://127.0.0.1:9", "unused");

    // no credentials anywhere in the chain
    let err = fails(cli(&gateway, &["agents", "list"], &[("AWS_REGION", REGION)]));
    assert!(err.contains("--aws-sigv4 found no AWS credentials"), "{err}");
    assert!(err.contains("Environment") && err.contains("environment variable not set"), "{err}");

    // credentials but no region
    let mut creds = good_credentials();
    creds.retain(|(k, _)| *k != "AWS_REGION");
    let err = fails(cli(&gateway, &["agents", "list"], &creds));
    assert!(err.contains("--aws-sigv4 needs a region"), "{err}");

    assert!(gateway.seen().is_empty() && gateway.refused.lock().unwrap().is_empty());
}

/// `switchboard console --aws-sigv4` on a free loopback port, with only the given AWS variables;
/// killed by its own PID when dropped.
struct Console {
    child: std::process::Child,
    base: String,
}

impl Console {
    fn start(gateway: &Gateway, aws_env: &[(&str, &str)]) -> Self {
        use std::io::{BufRead, BufReader};
        let mut child = isolated(aws_env)
            .args(["console", "--aws-sigv4", "--endpoint", &gateway.url, "--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let base = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}")).to_owned();
        Self { child, base }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_console_signs_the_pages_calls_and_answers_only_its_own_page() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let gateway = Gateway::start(&server.base, &server.admin);
    let console = Console::start(&gateway, &good_credentials());
    gateway.runtime.block_on(async {
        let http = reqwest::Client::new();
        let page = http.get(format!("{}/console/", console.base)).send().await.unwrap();
        assert_eq!(page.status(), 200);
        assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("default-src 'none'"));
        let config: Value =
            http.get(format!("{}/console/config.json", console.base)).send().await.unwrap().json().await.unwrap();
        assert_eq!(config, json!({ "signing": "aws-sigv4", "upstream": gateway.url }));

        // a conversation waiting for a human, made on the server directly
        let event = json!({ "id": "e-1", "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-1", "messageId": "m-1", "channel": { "platform": "webchat" },
                        "conversation": { "status": "open" }, "message": { "direction": "inbound", "text": "a human please" } } });
        let run: Value = http
            .post(format!("{}/events?wait=30", server.base))
            .bearer_auth(&server.admin)
            .json(&event)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = run["execution"]["sessionId"].as_str().unwrap().to_owned();
        let seen_before = gateway.seen().len();

        // what the page does: signed on the way, answered by the server behind the gateway
        let call = |method: reqwest::Method, path: &str| {
            http.request(method, format!("{}{path}", console.base)).header("x-switchboard-console", "1")
        };
        let list: Value = call(reqwest::Method::GET, "/tenants/acme/sessions?status=handed_off")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(list["items"][0]["sessionId"], session.as_str(), "{list}");
        let claimed = call(reqwest::Method::POST, &format!("/tenants/acme/sessions/{session}/claim"))
            .json(&json!({ "operator": "Ann" }))
            .send()
            .await
            .unwrap();
        assert_eq!(claimed.status(), 200);
        let reply = call(reqwest::Method::POST, &format!("/tenants/acme/sessions/{session}/messages"))
            .header("idempotency-key", "k-1")
            .json(&json!({ "operator": "Ann", "text": "Ann here." }))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 201);
        let seen = gateway.seen();
        let signed: Vec<_> = seen[seen_before..].iter().map(|s| (s.method.as_str(), s.signed_headers.as_str())).collect();
        assert_eq!(signed.len(), 3, "{signed:?}");
        // (what the page sent is signed with it: `accept` too, which every fetch sends)
        assert_eq!(signed[0], ("GET", "accept;host;x-amz-date;x-amz-security-token"));
        assert_eq!(signed[1], ("POST", "accept;content-type;host;x-amz-date;x-amz-security-token"));
        assert_eq!(signed[2], ("POST", "accept;content-type;host;idempotency-key;x-amz-date;x-amz-security-token"));

        // anything but the page is refused before it reaches the gateway
        let bare = http.get(format!("{}/tenants/acme/sessions", console.base)).send().await.unwrap();
        assert_eq!(bare.status(), 403);
        let port = console.base.rsplit(':').next().unwrap();
        let rebound = call(reqwest::Method::GET, "/tenants/acme/sessions")
            .header("host", format!("evil.example:{port}"))
            .send()
            .await
            .unwrap();
        assert_eq!(rebound.status(), 403);
        assert_eq!(gateway.seen().len(), seen_before + 3, "the refused calls never left the console");
    });
}

#[test]
fn the_console_refuses_to_start_without_credentials_or_off_loopback() {
    let gateway = Gateway::start("http://127.0.0.1:9", "unused");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        isolated(env).args(["console", "--aws-sigv4", "--endpoint", &gateway.url]).args(args).output().unwrap()
    };
    let stderr = fails(run(&["--listen", "127.0.0.1:0"], &[("AWS_REGION", REGION)]));
    assert!(stderr.contains("found no AWS credentials"), "{stderr}");
    let stderr = fails(run(&["--listen", "0.0.0.0:0"], &good_credentials()));
    assert!(stderr.contains("not a loopback address"), "{stderr}");
}
