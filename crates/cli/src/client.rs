//! `switchboard agents|triggers|tools|skills|sessions|executions …`: the internal API from the
//! command line, against a running server (`--endpoint`, with an API key) or the AWS profile's
//! internal API behind API Gateway (`--aws-sigv4`). Input from `-f file.json|yaml`, output as a
//! table or `--json`; an API error is shown with every field at fault, and the exit status is
//! non-zero.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Where and as whom to call.
#[derive(Debug, Args)]
pub struct Remote {
    /// Base URL of a `switchboard serve`, or of an API Gateway stage with --aws-sigv4.
    #[arg(long, env = "SWITCHBOARD_ENDPOINT", default_value = "http://127.0.0.1:8080", global = true)]
    endpoint: String,
    /// API key (an admin key or the tenant's key).
    #[arg(long, env = "SWITCHBOARD_API_KEY", hide_env_values = true, global = true)]
    api_key: Option<String>,
    /// Sign requests with SigV4 for API Gateway (`AWS_IAM` auth) instead of sending an API key;
    /// credentials from the default AWS chain.
    #[arg(
        long,
        env = "SWITCHBOARD_AWS_SIGV4",
        global = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    aws_sigv4: bool,
    /// Region to sign for with --aws-sigv4 (default: AWS_REGION, then the AWS profile's).
    #[arg(long, global = true)]
    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    region: Option<String>,
    /// Tenant to act on.
    #[arg(long, short = 't', env = "SWITCHBOARD_TENANT", global = true)]
    tenant: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

impl Remote {
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn aws_sigv4(&self) -> bool {
        self.aws_sigv4
    }

    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }
}

#[derive(Debug, Subcommand)]
pub enum ConfigVerb {
    /// List records (all pages).
    List {
        #[arg(long)]
        status: Option<String>,
        /// Agents only: standard, supervisor or router.
        #[arg(long = "type")]
        kind: Option<String>,
    },
    /// Show one record.
    Get { id: String },
    /// Create a record from a JSON or YAML file.
    Create {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Replace a record with a JSON or YAML file (reads its ETag first, then sends If-Match).
    Update {
        id: String,
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Delete a record.
    Delete { id: String },
    /// Agents only: run the agent on a conversation now and show what it did.
    Invoke {
        id: String,
        #[arg(long)]
        conversation: String,
        #[arg(long)]
        message: Option<String>,
        /// Print the turn as it happens (model calls, the reply as it is written, tool calls,
        /// actions); with --json, each event as a line of JSON.
        #[arg(long)]
        stream: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Target {
    Human,
    Agent,
}

/// `switchboard keys …` (admin, embedded profile).
#[derive(Debug, Subcommand)]
pub enum KeyVerb {
    /// Issue a new API key for the tenant and print it (shown once).
    Issue,
    /// The tenant's keys by id (never the keys).
    List,
    /// Revoke a key at once.
    Revoke { key_id: String },
}

/// What `switchboard tenants show|suspend|reactivate|delete` does over the API.
#[derive(Debug, Clone, Copy)]
pub enum TenantVerb {
    Show,
    Suspend,
    Reactivate,
    Delete,
}

#[derive(Debug, Subcommand)]
pub enum SessionVerb {
    Get {
        id: String,
    },
    /// The sessions of a conversation, oldest first; without `--conversation`, the tenant's
    /// sessions newest first (`--status handed_off` for the conversations handed on).
    List {
        #[arg(long)]
        conversation: Option<String>,
        /// active, handed_off, completed or failed.
        #[arg(long, conflicts_with = "conversation")]
        status: Option<String>,
        /// Only this agent's sessions.
        #[arg(long, conflicts_with = "conversation")]
        agent: Option<String>,
        /// At most this many (1 to 100).
        #[arg(long, default_value_t = 50, conflicts_with = "conversation")]
        limit: u32,
    },
    /// Hand the conversation to a human or an agent (or back from a human to an agent).
    Handoff {
        id: String,
        #[arg(long, value_enum)]
        to: Target,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        reason: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ExecutionVerb {
    Get {
        id: String,
    },
    /// The executions of a session.
    List {
        #[arg(long)]
        session: String,
    },
}

/// The days of a usage report (UTC, `YYYY-MM-DD`; the server's defaults when left out).
#[derive(Debug, Args)]
pub struct UsageRange {
    /// First day (default: 29 days before `--to`).
    #[arg(long)]
    pub from: Option<String>,
    /// Last day, included (default: today).
    #[arg(long)]
    pub to: Option<String>,
}

/// `switchboard apply`'s own arguments.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A tenant bundle (JSON or YAML): the tenant with its tools, skills, agents and triggers,
    /// as `switchboard serve --tenant` reads it.
    #[arg(long, short = 'f')]
    pub file: PathBuf,
    /// Say what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A failed call, rendered for a person.
fn problem_message(status: StatusCode, body: &Value) -> String {
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
enum Auth {
    /// `Authorization: Bearer <key>`, for `switchboard serve`.
    ApiKey(String),
    /// SigV4 for `execute-api`, for API Gateway with `AWS_IAM` auth.
    #[cfg(feature = "aws")]
    SigV4(crate::aws::Signer),
}

impl Auth {
    async fn new(remote: &Remote) -> anyhow::Result<Self> {
        if remote.aws_sigv4 {
            #[cfg(feature = "aws")]
            return Ok(Self::SigV4(crate::aws::Signer::from_default_chain(remote.region.as_deref()).await?));
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

struct Api {
    base: String,
    auth: Auth,
    http: reqwest::Client,
}

impl Api {
    async fn new(remote: &Remote) -> anyhow::Result<Self> {
        let auth = Auth::new(remote).await?;
        Ok(Self { base: remote.endpoint.trim_end_matches('/').to_owned(), auth, http: reqwest::Client::new() })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> anyhow::Result<(Value, Option<String>)> {
        let extra: Vec<(&str, &str)> = if_match.map(|tag| ("if-match", tag)).into_iter().collect();
        let res = self.send(method, path, body, &extra).await?;
        let status = res.status();
        let etag = res.headers().get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = res.text().await?;
        let value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        if !status.is_success() {
            bail!("{}", problem_message(status, &value));
        }
        Ok((value, etag))
    }

    /// Sends one request, signed or with the key, with `extra` headers; the response as it is.
    async fn send(
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
    async fn all_pages(&self, path: &str) -> anyhow::Result<Vec<Value>> {
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
fn query_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Reads a record from a `.json`, `.yaml` or `.yml` file.
fn read_record(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("-f {}", path.display()))?;
    let is_yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    if is_yaml {
        serde_norway::from_str(&text).with_context(|| format!("-f {}: not valid YAML", path.display()))
    } else {
        serde_json::from_str(&text).with_context(|| format!("-f {}: not valid JSON", path.display()))
    }
}

fn tenant(remote: &Remote) -> anyhow::Result<&str> {
    remote.tenant.as_deref().context("--tenant (or SWITCHBOARD_TENANT) is required")
}

/// Columns for a table of `segment` records: (header, JSON field).
fn columns(segment: &str) -> &'static [(&'static str, &'static str)] {
    match segment {
        "agents" => &[("ID", "agentId"), ("NAME", "name"), ("TYPE", "type"), ("STATUS", "status"), ("MODEL", "model")],
        "triggers" => &[
            ("ID", "triggerId"),
            ("NAME", "name"),
            ("AGENT", "agentId"),
            ("PRIORITY", "priority"),
            ("STATUS", "status"),
        ],
        "tools" => &[("ID", "toolId"), ("NAME", "name"), ("TYPE", "type"), ("DESCRIPTION", "description")],
        "skills" => &[("ID", "skillId"), ("NAME", "name"), ("STATUS", "status"), ("DESCRIPTION", "description")],
        "keys" => &[("ID", "keyId"), ("CREATED", "createdAt")],
        "sessions" => &[
            ("ID", "sessionId"),
            ("AGENT", "agentId"),
            ("STATUS", "status"),
            ("TURNS", "turnCount"),
            ("STARTED", "startedAt"),
        ],
        "usage" => &[
            ("DAY", "day"),
            ("AGENT", "agentId"),
            ("MODEL", "model"),
            ("CALLS", "calls"),
            ("INPUT", "inputTokens"),
            ("OUTPUT", "outputTokens"),
            ("CACHED", "cacheReadTokens"),
            ("COST USD", "costUsd"),
        ],
        _ => &[
            ("ID", "executionId"),
            ("STATUS", "status"),
            ("ITERATIONS", "iterations"),
            ("TOKENS", "tokenUsage"),
            ("LATENCY MS", "latencyMs"),
        ],
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        // A table's cell: cut at 60 characters, and said to be cut.
        Value::String(s) if s.chars().nth(60).is_some() => s.chars().take(59).chain(['…']).collect(),
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("inputTokens") => {
            format!("{}", o["inputTokens"].as_u64().unwrap_or(0) + o["outputTokens"].as_u64().unwrap_or(0))
        }
        other => other.to_string(),
    }
}

fn print_table(segment: &str, items: &[Value]) {
    let cols = columns(segment);
    let rows: Vec<Vec<String>> = items.iter().map(|i| cols.iter().map(|(_, f)| cell(&i[*f])).collect()).collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(c, (h, _))| rows.iter().map(|r| r[c].chars().count()).chain([h.len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<String>| {
        cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_owned()
    };
    println!("{}", line(cols.iter().map(|(h, _)| (*h).to_owned()).collect()));
    for r in rows {
        println!("{}", line(r));
    }
}

fn print_value(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// `switchboard agents|triggers|tools|skills <verb>`
pub async fn config(segment: &str, remote: &Remote, verb: ConfigVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let base = format!("/tenants/{}/{segment}", tenant(remote)?);
    match verb {
        ConfigVerb::List { status, kind } => {
            let mut query = vec!["limit=100".to_owned()];
            query.extend(status.as_deref().map(|s| format!("status={}", query_value(s))));
            query.extend(kind.as_deref().map(|k| format!("type={}", query_value(k))));
            let items = api.all_pages(&format!("{base}?{}", query.join("&"))).await?;
            if remote.json {
                print_value(&json!(items))
            } else {
                print_table(segment, &items);
                Ok(())
            }
        }
        ConfigVerb::Get { id } => print_value(&api.call(Method::GET, &format!("{base}/{id}"), None, None).await?.0),
        ConfigVerb::Create { file } => {
            let (created, _) = api.call(Method::POST, &base, Some(&read_record(&file)?), None).await?;
            if remote.json {
                print_value(&created)
            } else {
                let id = columns(segment)[0].1;
                println!("created {} {}", segment.trim_end_matches('s'), cell(&created[id]));
                Ok(())
            }
        }
        ConfigVerb::Update { id, file } => {
            let record = read_record(&file)?;
            let (_, etag) = api.call(Method::GET, &format!("{base}/{id}"), None, None).await?;
            let (updated, etag) =
                api.call(Method::PUT, &format!("{base}/{id}"), Some(&record), etag.as_deref()).await?;
            if remote.json {
                print_value(&updated)
            } else {
                println!(
                    "updated {} {id} (version {})",
                    segment.trim_end_matches('s'),
                    etag.unwrap_or_default().trim_matches('"')
                );
                Ok(())
            }
        }
        ConfigVerb::Delete { id } => {
            api.call(Method::DELETE, &format!("{base}/{id}"), None, None).await?;
            println!("deleted {} {id}", segment.trim_end_matches('s'));
            Ok(())
        }
        ConfigVerb::Invoke { id, conversation, message, stream } => {
            if segment != "agents" {
                bail!("invoke works on agents only");
            }
            let body = json!({ "conversationId": conversation, "message": message });
            if stream {
                return stream_invoke(&api, &format!("{base}/{id}/invoke"), &body, remote.json).await;
            }
            let (result, _) = api.call(Method::POST, &format!("{base}/{id}/invoke"), Some(&body), None).await?;
            if remote.json {
                print_value(&result)
            } else {
                println!(
                    "session {} · execution {} · {}",
                    cell(&result["sessionId"]),
                    cell(&result["executionId"]),
                    cell(&result["status"])
                );
                for a in result["actions"].as_array().cloned().unwrap_or_default() {
                    println!("{}", action_line(&a));
                }
                Ok(())
            }
        }
    }
}

/// `agents invoke --stream`: prints the turn's events as they come (`contracts/invoke-stream.md`),
/// or each event's JSON on a line of its own with `json`. Fails on an `error` event.
async fn stream_invoke(api: &Api, path: &str, body: &Value, json: bool) -> anyhow::Result<()> {
    use std::io::Write;
    use switchboard_models::sse::SseReader;

    let mut res = api.send(Method::POST, path, Some(body), &[("accept", "text/event-stream")]).await?;
    let status = res.status();
    if !status.is_success() {
        let text = res.text().await?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        bail!("{}", problem_message(status, &value));
    }
    let mut reader = SseReader::default();
    let mut out = std::io::stdout().lock();
    // Whether the line under way holds streamed text (ended before the next line).
    let mut in_text = false;
    while let Some(chunk) = res.chunk().await.context("the stream broke off")? {
        for event in reader.push(&chunk).map_err(|why| anyhow::anyhow!("the stream holds {why}"))? {
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data.clone()));
            if json {
                writeln!(out, "{data}")?;
            } else {
                if in_text && event.event != "text.delta" {
                    writeln!(out)?;
                    in_text = false;
                }
                match event.event.as_str() {
                    "text.delta" => {
                        if !in_text {
                            write!(out, "  … ")?;
                            in_text = true;
                        }
                        write!(out, "{}", data["text"].as_str().unwrap_or_default())?;
                    }
                    name => {
                        if let Some(line) = describe_event(name, &data) {
                            writeln!(out, "{line}")?;
                        }
                    }
                }
            }
            out.flush()?;
            match event.event.as_str() {
                "error" => bail!("{}", data["problem"]["detail"].as_str().unwrap_or("the invoke failed")),
                "execution.finished" | "execution.pending" => return Ok(()),
                _ => {}
            }
        }
    }
    bail!("the stream ended before the execution did; look it up with `executions` by its source")
}

/// One line for an action of a turn, its reply or reason whole: it is what the turn did.
fn action_line(a: &Value) -> String {
    let what = a.get("text").or_else(|| a.get("reason")).and_then(Value::as_str).unwrap_or("-");
    format!("  → {} {what}", cell(&a["type"]))
}

/// One line for a streamed invoke's event (none for the ones not worth a line).
fn describe_event(name: &str, data: &Value) -> Option<String> {
    Some(match name {
        "execution.started" => {
            format!("execution {} · session {}", cell(&data["executionId"]), cell(&data["sessionId"]))
        }
        "model.started" => format!("  model {} …", cell(&data["model"])),
        "model.finished" => format!(
            "  model {} · {} in / {} out tokens · {} ms · {}",
            cell(&data["model"]),
            cell(&data["usage"]["inputTokens"]),
            cell(&data["usage"]["outputTokens"]),
            cell(&data["latencyMs"]),
            cell(&data["stopReason"])
        ),
        "model.retried" => format!("  model {} failed, retrying: {}", cell(&data["model"]), cell(&data["error"])),
        "model.failed" => format!("  model {} failed: {}", cell(&data["model"]), cell(&data["error"])),
        "tool.started" => format!("  tool {} …", cell(&data["name"])),
        "tool.finished" => format!(
            "  tool {} · {} · {} ms",
            cell(&data["name"]),
            if data["isError"] == true { "error" } else { "ok" },
            cell(&data["latencyMs"])
        ),
        "action" => action_line(&data["action"]),
        "execution.finished" => {
            let e = &data["execution"];
            format!(
                "session {} · execution {} · {}",
                cell(&e["sessionId"]),
                cell(&e["executionId"]),
                cell(&e["status"])
            )
        }
        "execution.pending" => format!("still running; the execution will be at {}", cell(&data["location"])),
        _ => return None,
    })
}

/// `switchboard sessions <verb>`
pub async fn sessions(remote: &Remote, verb: SessionVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    match verb {
        SessionVerb::Get { id } => {
            print_value(&api.call(Method::GET, &format!("/tenants/{t}/sessions/{id}"), None, None).await?.0)
        }
        SessionVerb::List { conversation, status, agent, limit } => {
            let (path, field) = match conversation {
                Some(c) => (format!("/tenants/{t}/conversations/{c}/sessions"), "sessions"),
                None => {
                    let mut query = vec![format!("limit={limit}")];
                    if let Some(s) = &status {
                        query.push(format!("status={}", query_value(s)));
                    }
                    if let Some(a) = &agent {
                        query.push(format!("agentId={}", query_value(a)));
                    }
                    (format!("/tenants/{t}/sessions?{}", query.join("&")), "items")
                }
            };
            let (v, _) = api.call(Method::GET, &path, None, None).await?;
            let items = v[field].as_array().cloned().unwrap_or_default();
            if remote.json {
                print_value(&json!(items))
            } else {
                print_table("sessions", &items);
                Ok(())
            }
        }
        SessionVerb::Handoff { id, to, agent, reason } => {
            let body = match to {
                Target::Human => json!({ "targetType": "human", "reason": reason }),
                Target::Agent => json!({ "targetType": "agent", "targetAgentId": agent, "reason": reason }),
            };
            let (v, _) =
                api.call(Method::POST, &format!("/tenants/{t}/sessions/{id}/handoff"), Some(&body), None).await?;
            if remote.json {
                print_value(&v)
            } else {
                match v["newSessionId"].as_str() {
                    Some(s) => println!("handed off; new session {s}"),
                    None => println!("handed off to a human"),
                }
                Ok(())
            }
        }
    }
}

/// `switchboard executions <verb>`
pub async fn executions(remote: &Remote, verb: ExecutionVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    match verb {
        ExecutionVerb::Get { id } => {
            print_value(&api.call(Method::GET, &format!("/tenants/{t}/executions/{id}"), None, None).await?.0)
        }
        ExecutionVerb::List { session } => {
            let items = api.all_pages(&format!("/tenants/{t}/sessions/{session}/executions?limit=100")).await?;
            if remote.json {
                print_value(&json!(items))
            } else {
                print_table("executions", &items);
                Ok(())
            }
        }
    }
}

/// A tenant's record over the API (admin): shown, suspended, reactivated, or deleted — a
/// deletion is asked for again while the store answers that more is left (`202`).
pub async fn tenant_record(remote: &Remote, id: &str, verb: TenantVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let path = format!("/tenants/{}", query_value(id));
    let status = |s: &str| json!({ "status": s });
    let shown = match verb {
        TenantVerb::Show => api.call(Method::GET, &path, None, None).await?.0,
        TenantVerb::Suspend => api.call(Method::PATCH, &path, Some(&status("suspended")), None).await?.0,
        TenantVerb::Reactivate => api.call(Method::PATCH, &path, Some(&status("active")), None).await?.0,
        TenantVerb::Delete => {
            let mut calls = 0;
            while api.call(Method::DELETE, &path, None, None).await?.0["status"] == "deleting" {
                calls += 1;
                eprintln!("deleting tenant '{id}': more is left after call {calls}, going on");
            }
            println!("deleted tenant {id}");
            return Ok(());
        }
    };
    if remote.json {
        return print_value(&shown);
    }
    println!(
        "tenant {}: {} ({})",
        shown["tenantId"].as_str().unwrap_or(id),
        shown["name"].as_str().unwrap_or_default(),
        shown["status"].as_str().unwrap_or_default()
    );
    Ok(())
}

/// `switchboard keys`: issue, list and revoke a tenant's API keys.
pub async fn keys(remote: &Remote, verb: KeyVerb) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let base = format!("/tenants/{t}/keys");
    match verb {
        KeyVerb::Issue => {
            let issued = api.call(Method::POST, &base, Some(&json!({})), None).await?.0;
            if remote.json {
                return print_value(&issued);
            }
            println!("{}", issued["key"].as_str().unwrap_or_default());
            eprintln!(
                "API key {} for tenant '{t}' (shown once; send it as 'Authorization: Bearer <key>')",
                issued["keyId"].as_str().unwrap_or_default()
            );
        }
        KeyVerb::List => {
            let listed = api.call(Method::GET, &base, None, None).await?.0;
            if remote.json {
                return print_value(&listed);
            }
            print_table("keys", listed["keys"].as_array().map_or(&[][..], Vec::as_slice));
        }
        KeyVerb::Revoke { key_id } => {
            api.call(Method::DELETE, &format!("{base}/{}", query_value(&key_id)), None, None).await?;
            println!("revoked key {key_id}");
        }
    }
    Ok(())
}

/// `switchboard usage`: one line per day, agent and model, then the total. A cost of `-` means
/// no price is known for the model (not that it was free).
pub async fn usage(remote: &Remote, range: UsageRange) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let mut query = Vec::new();
    if let Some(from) = &range.from {
        query.push(format!("from={}", query_value(from)));
    }
    if let Some(to) = &range.to {
        query.push(format!("to={}", query_value(to)));
    }
    let path = format!("/tenants/{t}/usage?{}", query.join("&"));
    let report = api.call(Method::GET, &path, None, None).await?.0;
    if remote.json {
        return print_value(&report);
    }
    let dollars = |v: &Value| v.as_f64().map_or_else(|| json!("-"), |d| json!(format!("{d:.6}")));
    let mut rows: Vec<Value> = report["rows"].as_array().cloned().unwrap_or_default();
    let mut total = report["total"].clone();
    total["day"] = json!("total");
    rows.push(total);
    for row in &mut rows {
        row["costUsd"] = dollars(&row["costUsd"]);
    }
    println!("{} to {} (prices: {})", cell(&report["from"]), cell(&report["to"]), cell(&report["priceVersion"]));
    print_table("usage", &rows);
    let unpriced = report["total"]["unpricedCalls"].as_u64().unwrap_or(0);
    if unpriced > 0 {
        println!("{unpriced} call(s) of models without a price are not in the cost");
    }
    Ok(())
}

/// `switchboard activity`: executions per UTC hour and status, the hours with any.
pub async fn activity(remote: &Remote, hours: u16) -> anyhow::Result<()> {
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let report = api.call(Method::GET, &format!("/tenants/{t}/activity?hours={hours}"), None, None).await?.0;
    if remote.json {
        return print_value(&report);
    }
    println!("{} to {} (UTC hours)", cell(&report["from"]), cell(&report["to"]));
    let by_status = |v: &Value| -> String {
        v.as_object()
            .map(|m| m.iter().map(|(status, n)| format!("{status}={n}")).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    println!("{:<20}  {:>10}  BY STATUS", "HOUR", "EXECUTIONS");
    for h in report["byHour"].as_array().into_iter().flatten().filter(|h| h["total"].as_u64() > Some(0)) {
        println!("{:<20}  {:>10}  {}", cell(&h["hour"]), cell(&h["total"]), by_status(&h["executions"]));
    }
    println!("{:<20}  {:>10}  {}", "total", cell(&report["total"]), by_status(&report["executions"]));
    Ok(())
}

/// `switchboard apply -f tenant.json`: creates or updates every record of the bundle (and, with
/// an admin key or IAM on AWS, the tenant), printing what changed.
pub async fn apply(remote: &Remote, args: ApplyArgs) -> anyhow::Result<()> {
    let bundle = read_record(&args.file)?;
    let Some(t) = bundle.get("tenantId").and_then(Value::as_str).map(str::to_owned) else {
        bail!("-f {}: the bundle has no tenantId", args.file.display());
    };
    if let Some(flag) = &remote.tenant
        && *flag != t
    {
        bail!("--tenant {flag} does not match the bundle's tenantId {t}");
    }
    let api = Api::new(remote).await?;
    let dry = if args.dry_run { "?dryRun=true" } else { "" };
    let report =
        api.call(Method::POST, &format!("/tenants/{}/apply{dry}", query_value(&t)), Some(&bundle), None).await?.0;
    if remote.json {
        return print_value(&report);
    }
    let verb = |created: &str, done: &str| if args.dry_run { format!("would be {created}") } else { done.to_owned() };
    if report["tenantCreated"] == json!(true) {
        println!("tenant {t}: {}", verb("created", "created"));
    }
    if report["limits"] == json!("updated") {
        println!("{:<18} tenant {t} limits", verb("updated", "updated"));
    }
    let mut counts = [0usize; 3];
    for c in report["changes"].as_array().into_iter().flatten() {
        let change = c["change"].as_str().unwrap_or("");
        let slot = match change {
            "created" => 0,
            "updated" => 1,
            _ => 2,
        };
        counts[slot] += 1;
        if slot < 2 {
            let kind = c["kind"].as_str().unwrap_or("").trim_end_matches('s');
            println!("{:<18} {kind} {} ({})", verb(change, change), cell(&c["id"]), cell(&c["name"]));
        }
    }
    let [created, updated, unchanged] = counts;
    let tail = if args.dry_run { " (dry run: nothing written)" } else { "" };
    println!("{created} created, {updated} updated, {unchanged} unchanged{tail}");
    Ok(())
}

/// Arguments of `switchboard ready`: only where the server is; `/ready` needs no key.
#[derive(Debug, Args)]
pub struct ReadyArgs {
    /// Base URL of the server to ask
    #[arg(long, env = "SWITCHBOARD_ENDPOINT", default_value = "http://127.0.0.1:8080")]
    endpoint: String,
    /// Seconds to wait for the answer before calling the server not ready
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    timeout: u64,
}

/// `GET /ready` once: success when the server answers 200 (database writable, workers running),
/// an error naming the reason otherwise. What a container's health check or a script runs.
pub async fn ready(args: ReadyArgs) -> anyhow::Result<()> {
    let base = args.endpoint.trim_end_matches('/');
    let url = reqwest::Url::parse(&format!("{base}/ready"))
        .with_context(|| format!("--endpoint {} is not a URL", args.endpoint))?;
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(args.timeout)).build()?;
    let res = http.get(url).send().await.with_context(|| format!("cannot reach {base} (--endpoint)"))?;
    let status = res.status();
    let text = res.text().await.unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if !status.is_success() {
        bail!("not ready: {}", problem_message(status, &value));
    }
    println!("ready");
    Ok(())
}
