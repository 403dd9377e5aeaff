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

type PushSocket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

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
    /// The stack's live push, when it has one: `POST …/events/push` answered here with a
    /// ticket for this WebSocket URL.
    push: Arc<Mutex<Option<PushTickets>>>,
    /// Told of every event log read (`GET …/events?…`) that passed.
    log_reads: Arc<tokio::sync::Notify>,
    /// The signing principal's identity policy, when the test gives it one: each request is then
    /// also checked as IAM checks `execute-api:Invoke` on its ARN.
    policy: Arc<Mutex<Option<Value>>>,
}

/// The stand-in's API id and account in the ARNs it checks policies against.
const API_ID: &str = "standin";
const ACCOUNT: &str = "123456789012";

#[derive(Debug, Default, Clone)]
struct PushTickets {
    url: String,
    issued: Vec<(String, String)>,
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
    let policy = state.policy.lock().unwrap().clone();
    if let Some(policy) = policy {
        let path = rest.split('?').next().unwrap_or(rest);
        let arn = format!("arn:aws:execute-api:{REGION}:{ACCOUNT}:{API_ID}{STAGE}/{}{path}", parts.method);
        if !switchboard_testkit::iam::allows(&policy, &arn) {
            let user = format!("arn:aws:sts::{ACCOUNT}:assumed-role/switchboard-role/tests");
            let message = format!("User: {user} is not authorized to perform: execute-api:Invoke on resource: {arn}");
            return refuse(&state, "AccessDeniedException", &message);
        }
    }
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path_and_query: path_and_query.clone(),
        signed_headers,
    });
    // the internal API's ticket route, as the AWS profile answers it when the stack has a push
    let ticket_for = rest.strip_prefix("/tenants/").and_then(|r| r.strip_suffix("/events/push"));
    if let (true, Some(tenant)) = (parts.method == axum::http::Method::POST, ticket_for)
        && let Some(push) = state.push.lock().unwrap().as_mut()
    {
        let ticket = format!("{:064x}", push.issued.len() + 1);
        push.issued.push((tenant.to_owned(), ticket.clone()));
        let body =
            json!({ "ticket": ticket, "url": push.url, "tenantId": tenant, "expiresAt": "2026-11-26T10:01:00Z" });
        return (StatusCode::CREATED, axum::Json(body)).into_response();
    }
    if parts.method == axum::http::Method::GET && rest.contains("/events?") {
        state.log_reads.notify_one();
    }
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
    push: Arc<Mutex<Option<PushTickets>>>,
    log_reads: Arc<tokio::sync::Notify>,
    policy: Arc<Mutex<Option<Value>>>,
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
            push: Arc::default(),
            log_reads: Arc::default(),
            policy: Arc::default(),
        };
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}{STAGE}", listener.local_addr().unwrap());
        let app = Router::new().fallback(gateway).with_state(state.clone());
        runtime.spawn(async move { axum::serve(listener, app).await });
        let GatewayState { seen, refused, push, log_reads, policy, .. } = state;
        Self { url, seen, refused, push, log_reads, policy, runtime }
    }

    /// Checks every request against the role policy `infra/roles/<role>.json` for `tenant`, as
    /// IAM would for a caller holding it.
    fn holding(&self, role: &str, tenant: &str) {
        let path = common::workspace_root().join(format!("infra/roles/{role}.json"));
        let text = std::fs::read_to_string(path).unwrap();
        let text = text
            .replace("REGION", REGION)
            .replace("ACCOUNT_ID", ACCOUNT)
            .replace("PUSH_API_ID", "standin-push")
            .replace("API_ID", API_ID)
            .replace("STAGE", STAGE.trim_start_matches('/'))
            .replace("TENANT_ID", tenant);
        *self.policy.lock().unwrap() = Some(serde_json::from_str(&text).unwrap());
    }

    /// Gives the stack a live push: a WebSocket API on another free port whose `$connect` is
    /// checked as API Gateway checks an `AWS_IAM` route (the same SigV4 verifier) and then for
    /// a ticket this gateway issued to that tenant. Each accepted connection is handed to the
    /// receiver with its tenant.
    #[allow(clippy::result_large_err)] // tungstenite's handshake callback type
    fn with_push(&self) -> tokio::sync::mpsc::UnboundedReceiver<(String, PushSocket)> {
        use tokio_tungstenite::tungstenite::handshake::server::{
            ErrorResponse, Request as WsRequest, Response as WsResponse,
        };
        let listener = self.runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("ws://{}{STAGE}", listener.local_addr().unwrap());
        *self.push.lock().unwrap() = Some(PushTickets { url, issued: vec![] });
        let (accepted, receiver) = tokio::sync::mpsc::unbounded_channel();
        let (push, refused) = (self.push.clone(), self.refused.clone());
        self.runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (push, refused, accepted) = (push.clone(), refused.clone(), accepted.clone());
                tokio::spawn(async move {
                    let tenant = Arc::new(Mutex::new(String::new()));
                    let check = {
                        let tenant = tenant.clone();
                        move |req: &WsRequest, res: WsResponse| -> Result<WsResponse, ErrorResponse> {
                            let mut builder = axum::http::Request::builder().method(req.method()).uri(req.uri());
                            for (name, value) in req.headers() {
                                builder = builder.header(name, value);
                            }
                            let (parts, ()) = builder.body(()).unwrap().into_parts();
                            let deny = |why: String| {
                                refused.lock().unwrap().push(why.clone());
                                let mut r = ErrorResponse::new(Some(why));
                                *r.status_mut() = axum::http::StatusCode::FORBIDDEN;
                                Err(r)
                            };
                            if let Err((_, message)) = verify(&parts, b"") {
                                return deny(message);
                            }
                            let query: std::collections::HashMap<String, String> = parts
                                .uri
                                .query()
                                .unwrap_or("")
                                .split('&')
                                .filter_map(|kv| kv.split_once('='))
                                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                                .collect();
                            let (Some(t), Some(ticket)) = (query.get("tenant"), query.get("ticket")) else {
                                return deny("no tenant or ticket".into());
                            };
                            let issued = push
                                .lock()
                                .unwrap()
                                .as_ref()
                                .is_some_and(|p| p.issued.contains(&(t.clone(), ticket.clone())));
                            if !issued || parts.uri.path() != STAGE {
                                return deny(format!("ticket {ticket} was not issued for {t}"));
                            }
                            *tenant.lock().unwrap() = t.clone();
                            Ok(res)
                        }
                    };
                    if let Ok(socket) = tokio_tungstenite::accept_hdr_async(tcp, check).await {
                        let tenant = tenant.lock().unwrap().clone();
                        let _ = accepted.send((tenant, socket));
                    }
                });
            }
        });
        receiver
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
fn the_role_policies_let_a_caller_reach_its_groups_of_its_tenant_and_nothing_else() {
    // given a server with two tenants behind the gateway, and a caller holding the viewer policy
    // for acme
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    create_tenant(&data, "acme");
    create_tenant(&data, "other");
    let gateway = Gateway::start(&server.base, &server.admin);
    gateway.holding("viewer", "acme");
    let creds = good_credentials();
    let agent = write(dir.path(), "agent.json", r#"{"name": "Support", "systemPrompt": "You help.", "model": "m"}"#);
    // then it reads acme, and writing or another tenant is refused by IAM with API Gateway's words
    assert!(ok(cli(&gateway, &["agents", "list"], &creds)).starts_with("ID"));
    let err = fails(cli(&gateway, &["agents", "create", "-f", &agent], &creds));
    assert!(err.contains("not authorized to perform: execute-api:Invoke"), "{err}");
    assert!(err.contains("/prod/POST/tenants/acme/agents"), "{err}");
    let other = isolated(&creds)
        .args(["agents", "list", "--aws-sigv4", "--endpoint", &gateway.url, "--tenant", "other"])
        .output()
        .unwrap();
    let other = fails(other);
    assert!(other.contains("not authorized"), "{other}");
    // when the caller holds the builder policy instead, the same write goes through
    gateway.holding("builder", "acme");
    let created = ok(cli(&gateway, &["agents", "create", "-f", &agent], &creds));
    assert!(created.starts_with("created agent "), "{created}");
    // but its keys are not a builder's (nor anyone's on AWS)
    let keys = fails(cli(&gateway, &["keys", "list"], &creds));
    assert!(keys.contains("not authorized"), "{keys}");
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
        Self::start_with(gateway, aws_env, &[])
    }

    fn start_with(gateway: &Gateway, aws_env: &[(&str, &str)], args: &[&str]) -> Self {
        use std::io::{BufRead, BufReader};
        let mut child = isolated(aws_env)
            .args(["console", "--aws-sigv4", "--endpoint", &gateway.url, "--listen", "127.0.0.1:0"])
            .args(args)
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
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(claimed.status(), 200);
        let reply = call(reqwest::Method::POST, &format!("/tenants/acme/sessions/{session}/messages"))
            .header("idempotency-key", "k-1")
            .json(&json!({ "text": "Ann here." }))
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

/// The next SSE event of a streamed body: its `id`, `event` and `data` (JSON); `None` at the end.
async fn next_sse(body: &mut reqwest::Response, buffer: &mut String) -> Option<(String, String, Value)> {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned());
            let Some(data) = field("data:") else { continue }; // a keep-alive comment
            return Some((
                field("id:").unwrap_or_default(),
                field("event:").unwrap_or_default(),
                serde_json::from_str(&data).unwrap(),
            ));
        }
        let chunk = body.chunk().await.ok()??;
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

#[test]
fn the_console_relays_the_stacks_live_push_reading_the_log_after_each_push_and_ends_with_the_socket() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &["--tenant", examples().join("tenant.json").to_str().unwrap()]);
    let gateway = Gateway::start(&server.base, &server.admin);
    let mut sockets = gateway.with_push();
    // (no timed catch-up during the test: every read after the first comes from a push)
    let console = Console::start_with(&gateway, &good_credentials(), &["--catch-up-secs", "3600"]);
    gateway.runtime.block_on(async {
        let http = reqwest::Client::new();
        let mut stream = http
            .get(format!("{}/tenants/acme/events/stream", console.base))
            .header("x-switchboard-console", "1")
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        assert_eq!(stream.headers()["content-type"], "text/event-stream");
        // the console took a ticket for acme, signed, and opened the WebSocket with it, signed
        let (tenant, mut socket) = sockets.recv().await.unwrap();
        assert_eq!(tenant, "acme");
        let issued = gateway.push.lock().unwrap().as_ref().unwrap().issued.clone();
        assert_eq!(issued.len(), 1);
        // it read the log once on opening (nothing there yet)
        gateway.log_reads.notified().await;
        let body = &mut stream;
        let mut buffer = String::new();

        // a conversation handed to a human: the event is in acme's log
        let event = json!({ "id": "e-push", "source": "conversations-service", "detail-type": "message.new",
            "detail": { "tenantId": "acme", "conversationId": "c-push", "messageId": "m-1", "channel": { "platform": "webchat" },
                        "conversation": { "status": "open" }, "message": { "direction": "inbound", "text": "a human please" } } });
        let run = http.post(format!("{}/events?wait=30", server.base)).bearer_auth(&server.admin).json(&event).send().await.unwrap();
        let run: Value = run.json().await.unwrap();
        assert_eq!(run["execution"]["status"], "handed_off", "{run}");
        // the push reaches the console, which reads the log and sends the page the event
        let pushed = json!({ "type": "event", "id": "x", "tenantId": "acme", "detailType": "session.handoff.human", "detail": {} });
        socket.send(Message::text(pushed.to_string())).await.unwrap();
        let (id, name, event) = next_sse(body, &mut buffer).await.unwrap();
        assert_eq!((name.as_str(), event["tenantId"].as_str()), ("session.handoff.human", Some("acme")), "{event}");
        assert_eq!(event["detail"]["conversationId"], "c-push", "{event}");
        let log: Value = http.get(format!("{}/tenants/acme/events", server.base)).bearer_auth(&server.admin).send().await.unwrap().json().await.unwrap();
        assert_eq!(id, log["events"][0]["seq"].to_string(), "the SSE id is the log's sequence number");
        // a second push with nothing new sends nothing; the next event comes once
        socket.send(Message::text(pushed.to_string())).await.unwrap();
        let log_reads = || -> Vec<String> {
            let seen = gateway.seen().into_iter();
            seen.filter(|s| s.path_and_query.contains("/events?")).map(|s| s.path_and_query).collect()
        };
        while log_reads().len() < 3 {
            gateway.log_reads.notified().await;
        }
        let reads = log_reads();
        assert_eq!(reads.len(), 3, "{reads:?}");
        assert!(reads[2].ends_with(&format!("/tenants/acme/events?after={id}&limit=100")), "{reads:?}");
        // the socket closes: the page's stream ends (the page then reconnects)
        socket.close(None).await.unwrap();
        assert!(next_sse(body, &mut buffer).await.is_none());
        assert!(gateway.refused.lock().unwrap().is_empty(), "{:?}", gateway.refused.lock().unwrap());
    });
}
