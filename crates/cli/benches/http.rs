//! The whole platform over HTTP, as users drive it: the release `switchboard serve` binary, one
//! tenant with the highest accepted limits and the scripted model (a deterministic test double,
//! not an AI) answering with one reply, and `POST /events?wait=30` from `HTTP_BENCH_CLIENTS`
//! (default 4) keep-alive clients, each message in a new conversation (or, with
//! `HTTP_BENCH_MESSAGES_PER_CONVERSATION` = n, each client's messages n to a conversation in
//! turn: a conversation's later turns read and extend its stored session). Measured from outside
//! the server: its CPU (user + system of every thread, `/proc/<pid>/stat`) over the measured
//! messages, its resident memory after them (`VmRSS`, and the peak `VmHWM`, from
//! `/proc/<pid>/status`), throughput and the clients' latencies.
//!
//! Each run starts a fresh server and data directory, sends `HTTP_BENCH_WARMUP` (default 400)
//! messages, then `HTTP_BENCH_MESSAGES` (default 9,600: 10,000 in all, within the tenant's
//! 10,000 session slots, since every conversation keeps its slot), and checks that every answer
//! is a successful execution with the turn's model and tool calls (exit 1 otherwise).
//! `HTTP_BENCH_RUNS` runs (default 3); medians and ranges are printed. The server logs at `HTTP_BENCH_LOG` (default `warn`: one line per request
//! at `info` is part of what is measured otherwise).
//!
//! Three turns: `scripted` (the scripted test double answers with one reply), `bedrock` (the
//! Bedrock Converse adapter, SigV4 and all, against a fake Converse server in this process —
//! its CPU is not the server's, so not counted — that first calls `send_message`, then ends the
//! turn: two model calls and one tool per message) and `openai` (the same turn through the
//! OpenAI-compatible adapter, the same fake answering chat completions). `HTTP_BENCH_TURNS` picks
//! (`scripted,bedrock` by default). `HTTP_BENCH_CLOSE_IDLE=1` has the tenant close idle
//! sessions (`limits.closeIdleSessions`): every turn then sets its session's idle time (the sweep
//! closes none within a run; the idle time is 30 minutes).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_domain::tenant::{MAX_CONCURRENT_SESSIONS, MAX_INVOCATIONS_PER_MINUTE, MAX_TOKENS_PER_DAY};

const REPLY: &str = "Thanks! Order 1234 shipped yesterday and should arrive on Thursday.";

fn var(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The server under test, stopped by its PID when dropped.
struct Server {
    child: Child,
    base: String,
    admin: String,
}

/// What answers the agent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Turn {
    Scripted,
    Bedrock,
    OpenAi,
}

impl Turn {
    fn name(self) -> &'static str {
        match self {
            Turn::Scripted => "scripted, 1 reply",
            Turn::Bedrock => "bedrock, 2 calls + 1 tool",
            Turn::OpenAi => "openai, 2 calls + 1 tool",
        }
    }
}

/// A stateless fake of Bedrock's Converse: a request whose last message carries a tool result
/// gets the turn's end, any other a `send_message` call. The URL to point the runtime at.
async fn fake_converse() -> String {
    async fn converse(axum::Json(body): axum::Json<Value>) -> axum::Json<Value> {
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null);
        let after_tool = last["content"].as_array().is_some_and(|c| c.iter().any(|b| b.get("toolResult").is_some()));
        axum::Json(if after_tool {
            json!({ "output": { "message": { "role": "assistant", "content": [{ "text": "" }] } },
                    "stopReason": "end_turn", "usage": { "inputTokens": 40, "outputTokens": 1, "totalTokens": 41 },
                    "metrics": { "latencyMs": 1 } })
        } else {
            json!({ "output": { "message": { "role": "assistant", "content": [
                        { "toolUse": { "toolUseId": "t-1", "name": "send_message", "input": { "text": REPLY } } } ] } },
                    "stopReason": "tool_use", "usage": { "inputTokens": 30, "outputTokens": 12, "totalTokens": 42 },
                    "metrics": { "latencyMs": 1 } })
        })
    }
    /// The same two answers in the OpenAI chat completions shape.
    async fn completions(axum::Json(body): axum::Json<Value>) -> axum::Json<Value> {
        let last = body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null);
        axum::Json(if last["role"] == "tool" {
            json!({ "id": "c-2", "object": "chat.completion", "model": "gpt-4o-mini",
                    "choices": [{ "index": 0, "message": { "role": "assistant", "content": "" }, "finish_reason": "stop" }],
                    "usage": { "prompt_tokens": 40, "completion_tokens": 1, "total_tokens": 41 } })
        } else {
            let arguments = json!({ "text": REPLY }).to_string();
            json!({ "id": "c-1", "object": "chat.completion", "model": "gpt-4o-mini",
                    "choices": [{ "index": 0, "finish_reason": "tool_calls", "message": { "role": "assistant", "content": null,
                        "tool_calls": [{ "id": "t-1", "type": "function",
                                         "function": { "name": "send_message", "arguments": arguments } }] } }],
                    "usage": { "prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42 } })
        })
    }
    let app = axum::Router::new()
        .route("/model/{model_id}/converse", axum::routing::post(converse))
        .route("/v1/chat/completions", axum::routing::post(completions));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

impl Server {
    fn start(dir: &Path, turn: Turn, bedrock: &str) -> Self {
        let model = match turn {
            Turn::OpenAi => "openai:gpt-4o-mini",
            _ => "bedrock:anthropic.claude-3-haiku-20240307-v1:0",
        };
        let bundle = dir.join("tenant.json");
        let mut limits = json!({ "invocationsPerMinute": MAX_INVOCATIONS_PER_MINUTE, "tokensPerDay": MAX_TOKENS_PER_DAY,
                                 "concurrentSessions": MAX_CONCURRENT_SESSIONS });
        if var("HTTP_BENCH_CLOSE_IDLE", 0) == 1 {
            limits["closeIdleSessions"] = json!(true);
        }
        std::fs::write(
            &bundle,
            json!({
                "tenantId": "bench", "name": "Bench",
                "limits": limits,
                "agents": [{ "agentId": "01JD0000BENCH0AGENT0000001", "name": "Bench", "systemPrompt": "Answer briefly.",
                             "model": model, "tools": ["send_message"],
                             "maxTurns": 100, "maxIterations": 4 }],
                "triggers": [{ "triggerId": "01JD0000BENCH0TR1GGER00001", "name": "all", "agentId": "01JD0000BENCH0AGENT0000001",
                               "eventType": "message.new", "priority": 1, "conditions": {} }]
            })
            .to_string(),
        )
        .unwrap();
        let script = dir.join("script.json");
        std::fs::write(
            &script,
            json!({ "description": "http bench test double", "rules": [ { "then": { "text": REPLY } } ] }).to_string(),
        )
        .unwrap();
        let data = dir.join("data");
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen", "127.0.0.1:0", "--rate-limit", "1000000"])
            .arg("--tenant")
            .arg(&bundle)
            .env_remove("SWITCHBOARD_SCRIPTED_MODEL")
            .env("RUST_LOG", std::env::var("HTTP_BENCH_LOG").unwrap_or_else(|_| "warn".into()));
        match turn {
            Turn::Scripted => {
                command.arg("--scripted-model").arg(&script);
            }
            Turn::Bedrock => {
                // Static credentials and no profile files: nothing is fetched but the fake.
                command
                    .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", bedrock)
                    .env("AWS_REGION", "us-east-1")
                    .env("AWS_ACCESS_KEY_ID", "AKIDBENCH")
                    .env("AWS_SECRET_ACCESS_KEY", "bench-secret")
                    .env("AWS_CONFIG_FILE", dir.join("no-aws-config"))
                    .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("no-aws-credentials"))
                    .env("AWS_EC2_METADATA_DISABLED", "true");
            }
            Turn::OpenAi => {
                command.env("OPENAI_BASE_URL", format!("{bedrock}/v1")).env("OPENAI_API_KEY", "sk-bench");
            }
        }
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let base = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}")).to_owned();
        let admin = std::fs::read_to_string(data.join("admin.key")).unwrap().trim().to_owned();
        Self { child, base, admin }
    }

    fn proc(&self, file: &str) -> String {
        std::fs::read_to_string(format!("/proc/{}/{file}", self.child.id())).unwrap()
    }

    /// User + system CPU of the server so far, all threads.
    fn cpu(&self) -> Duration {
        let stat = self.proc("stat");
        let rest = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
        let fields: Vec<&str> = rest.split(' ').collect();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        // utime and stime, in USER_HZ (100) ticks.
        Duration::from_millis((field(11) + field(12)) * 10)
    }

    /// A `/proc/<pid>/status` figure in kB (`VmRSS`, `VmHWM`).
    fn memory_kb(&self, name: &str) -> u64 {
        let status = self.proc("status");
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_default();
        line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends messages `from..to` from `clients` keep-alive clients, `per_conversation` messages in
/// each conversation (one client's, in turn); the latency of each, and the number of answers
/// that were not a successful execution.
async fn send(server: &Server, turn: Turn, clients: usize, from: usize, to: usize) -> (Vec<Duration>, usize) {
    let per_conversation = var("HTTP_BENCH_MESSAGES_PER_CONVERSATION", 1).max(1);
    // what each answer's execution must show: model calls and tool calls
    let expected = match turn {
        Turn::Scripted => (1, 0),
        Turn::Bedrock | Turn::OpenAi => (2, 1),
    };
    // Collected, so that every client is spawned before the first is awaited.
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (base, admin) = (server.base.clone(), server.admin.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
                let (mut latencies, mut bad) = (Vec::new(), 0);
                for i in (from + c..to).step_by(clients) {
                    // the client's k-th message goes to its conversation k / n
                    let conversation = format!("c-{c}-{}", i / clients / per_conversation);
                    let event = json!({
                        "id": format!("e-{i}"), "source": "conversations-service", "detail-type": "message.new",
                        "detail": { "tenantId": "bench", "conversationId": conversation, "messageId": format!("m-{i}"),
                                    "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
                                    "message": { "direction": "inbound", "text": "Where is my order #1234?" } }
                    });
                    let started = Instant::now();
                    let answer = http
                        .post(format!("{base}/events?wait=30"))
                        .bearer_auth(&admin)
                        .json(&event)
                        .send()
                        .await
                        .unwrap();
                    let body: Value = answer.json().await.unwrap_or(Value::Null);
                    latencies.push(started.elapsed());
                    let e = &body["execution"];
                    let calls = |name: &str| e[name].as_array().map_or(usize::MAX, Vec::len);
                    if e["status"] != "success" || (calls("modelCalls"), calls("toolCalls")) != expected {
                        if bad == 0 {
                            eprintln!("message {i} was not answered: {body}");
                        }
                        bad += 1;
                    }
                }
                (latencies, bad)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut bad = 0;
    for task in tasks {
        let (l, b) = task.await.unwrap();
        all.extend(l);
        bad += b;
    }
    (all, bad)
}

struct Run {
    cpu_per_message: Duration,
    throughput: f64,
    p50: Duration,
    p99: Duration,
    rss_kb: u64,
    hwm_kb: u64,
}

async fn run(turn: Turn, bedrock: &str, clients: usize, warmup: usize, messages: usize) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), turn, bedrock);
    let (_, bad) = send(&server, turn, clients, 0, warmup).await;
    assert_eq!(bad, 0, "warm-up messages were not answered");
    let (cpu, started) = (server.cpu(), Instant::now());
    let (mut latencies, bad) = send(&server, turn, clients, warmup, warmup + messages).await;
    let (elapsed, cpu) = (started.elapsed(), server.cpu() - cpu);
    if bad > 0 {
        eprintln!("{bad} of {messages} messages were not answered with a successful execution");
        std::process::exit(1);
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Run {
        cpu_per_message: cpu / u32::try_from(messages).unwrap(),
        throughput: messages as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        rss_kb: server.memory_kb("VmRSS:"),
        hwm_kb: server.memory_kb("VmHWM:"),
    }
}

fn median_and_range<T: PartialOrd + Copy>(mut values: Vec<T>) -> (T, T, T) {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (values[values.len() / 2], values[0], values[values.len() - 1])
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let (clients, warmup, messages, runs) = (
        var("HTTP_BENCH_CLIENTS", 4),
        var("HTTP_BENCH_WARMUP", 400),
        var("HTTP_BENCH_MESSAGES", 9_600),
        var("HTTP_BENCH_RUNS", 3),
    );
    let turns: Vec<Turn> = std::env::var("HTTP_BENCH_TURNS")
        .unwrap_or_else(|_| "scripted,bedrock".into())
        .split(',')
        .map(|t| match t.trim() {
            "scripted" => Turn::Scripted,
            "bedrock" => Turn::Bedrock,
            "openai" => Turn::OpenAi,
            other => panic!("HTTP_BENCH_TURNS: unknown turn {other:?} (scripted, bedrock, openai)"),
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let bedrock = runtime.block_on(fake_converse());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let show = |name: &str, (m, lo, hi): (f64, f64, f64), unit: &str| {
        println!("  {name:<22} {m:>9.3} {unit} ({lo:.3}–{hi:.3})")
    };
    for turn in turns {
        let results: Vec<Run> = (0..runs)
            .map(|i| {
                let r = runtime.block_on(run(turn, &bedrock, clients, warmup, messages));
                println!(
                    "{} run {}: {:.3} ms CPU/message, {:.0} msg/s, p50 {:.2} ms, p99 {:.2} ms, RSS {:.1} MB (peak {:.1} MB)",
                    turn.name(),
                    i + 1,
                    ms(r.cpu_per_message),
                    r.throughput,
                    ms(r.p50),
                    ms(r.p99),
                    r.rss_kb as f64 / 1024.0,
                    r.hwm_kb as f64 / 1024.0
                );
                r
            })
            .collect();
        println!(
            "\nswitchboard serve over HTTP, {}: {clients} clients, {messages} messages per run after {warmup} of warm-up, {runs} runs; median (range)",
            turn.name()
        );
        show("server CPU / message", median_and_range(results.iter().map(|r| ms(r.cpu_per_message)).collect()), "ms");
        show("throughput", median_and_range(results.iter().map(|r| r.throughput).collect()), "msg/s");
        show("p50 latency", median_and_range(results.iter().map(|r| ms(r.p50)).collect()), "ms");
        show("p99 latency", median_and_range(results.iter().map(|r| ms(r.p99)).collect()), "ms");
        show("RSS after", median_and_range(results.iter().map(|r| r.rss_kb as f64 / 1024.0).collect()), "MB");
        show("peak RSS", median_and_range(results.iter().map(|r| r.hwm_kb as f64 / 1024.0).collect()), "MB");
        println!();
    }
}
