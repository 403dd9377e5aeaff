//! CPU per message of the agent loop through each real model adapter against a local fake of its
//! wire protocol, on the embedded profile (SQLite store and queue): ingest one message and wait
//! for its completion from the worker pool `serve` runs (a worker takes the item, runs the turn
//! and commits it with the acknowledgement) — one message at a time, on one runtime thread.
//!
//! Two turns: `1 call` (the model answers with text, which is sent as the reply) and `2 calls +
//! tool` (the model calls `send_message`, then ends the turn). Adapters: the scripted test double
//! (no HTTP: the baseline), `openai:` (Chat Completions), `anthropic:` (Messages), `bedrock:`
//! (Converse through the AWS SDK, SigV4-signed). Each goes through the registry every profile
//! uses (`Models` → retry layer → adapter).
//!
//! The fake server runs in a child process (this bench binary started again with
//! `MODELS_BENCH_FAKE` set), so CPU — the bench process's user + system time from
//! `/proc/self/stat` — is the platform's alone: the client side of each call (building, signing,
//! sending the request, parsing the answer) and everything around it, not the fake's accepting
//! and answering. The baseline row has no server. Runs:
//! `MODELS_BENCH_RUNS` (default 5) of `MODELS_BENCH_MESSAGES` (default 1,000) each, measured after
//! `MODELS_BENCH_WARMUP` (default 400) on the same database, so that the write-ahead log has
//! started over once and the measured messages pay what a server that has run a while pays (its
//! checkpoints included), not the growth of a new log file; each run's database is closed, its
//! log copied and deleted, before the next run starts. The median and
//! the range of per-run figures are printed; `MODELS_BENCH_ONLY` (e.g. `bedrock`) runs the
//! adapters whose name starts with it.
//!
//! `MODELS_BENCH_EVICT_KIB` (default 0: off) makes the calls-alone loop write one byte in every
//! 64 of a buffer that large after each call, its own CPU measured without calls and taken off:
//! what a call costs when something else has used the CPU's caches in between, as a turn's
//! database work does (docs/benchmarks.md, "The Bedrock call inside a turn"). It also gives the
//! scripted model's calls such a walk (its CPU taken off the same way): what the pipeline's own
//! work costs around a model call that costs nothing but the caches it leaves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_domain::Message;
use switchboard_domain::execution::ExecutionStatus;
use switchboard_domain::limits::MAX_TURNS_CEILING;
use switchboard_domain::{InboundEvent, ModelConfig, Provider};
use switchboard_embedded::runtime::{DB_FILE, Queued};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{Model, ModelRequest, SystemClock, ToolSpec};
use switchboard_models::{ModelSettings, Models};
use switchboard_testkit::providers::{Answer, FakeProvider, Wire, chat, converse, messages};

mod support;
use support::cpu;

const TENANT: &str = "bench";
const AGENT: &str = "01JD0000BENCH0AGENT0000001";
const TRIGGER: &str = "01JD0000BENCH0TR1GGER00001";
const REPLY: &str = "Thanks! Order 1234 shipped yesterday and should arrive on Thursday.";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Turn {
    OneCall,
    ToolThenAnswer,
}

impl Turn {
    fn calls(self) -> usize {
        if self == Turn::OneCall { 1 } else { 2 }
    }
}

#[derive(Clone, Copy, Debug)]
enum Adapter {
    Scripted,
    OpenAi,
    Anthropic,
    Bedrock,
}

const ADAPTERS: [Adapter; 4] = [Adapter::Scripted, Adapter::OpenAi, Adapter::Anthropic, Adapter::Bedrock];
const TURNS: [Turn; 2] = [Turn::OneCall, Turn::ToolThenAnswer];

impl Adapter {
    fn name(self) -> &'static str {
        match self {
            Adapter::Scripted => "scripted (no HTTP)",
            Adapter::OpenAi => "openai",
            Adapter::Anthropic => "anthropic",
            Adapter::Bedrock => "bedrock",
        }
    }

    fn model(self) -> &'static str {
        match self {
            Adapter::Scripted => "scripted:bench",
            Adapter::OpenAi => "openai:gpt-4o-mini",
            Adapter::Anthropic => "anthropic:claude-3-5-haiku-latest",
            Adapter::Bedrock => "bedrock:anthropic.claude-3-haiku-20240307-v1:0",
        }
    }

    fn wire(self) -> Option<Wire> {
        match self {
            Adapter::Scripted => None,
            Adapter::OpenAi => Some(Wire::ChatCompletions),
            Adapter::Anthropic => Some(Wire::Messages),
            Adapter::Bedrock => Some(Wire::Converse),
        }
    }

    /// The fake's answers for one message.
    fn answers(self, turn: Turn) -> Vec<Answer> {
        let args = json!({"text": REPLY});
        match (self, turn) {
            (Adapter::OpenAi, Turn::OneCall) => vec![chat::text(REPLY)],
            (Adapter::OpenAi, Turn::ToolThenAnswer) => {
                vec![chat::tool_calls(&[("call_1", "send_message", &args.to_string())]), chat::text("")]
            }
            (Adapter::Anthropic, Turn::OneCall) => vec![messages::text(REPLY)],
            (Adapter::Anthropic, Turn::ToolThenAnswer) => {
                vec![messages::tool_uses(&[("toolu_1", "send_message", args)]), messages::text("Done.")]
            }
            (Adapter::Bedrock, Turn::OneCall) => vec![converse::text(REPLY)],
            (Adapter::Bedrock, Turn::ToolThenAnswer) => {
                vec![converse::tool_use("tu-1", "send_message", args), converse::text("")]
            }
            (Adapter::Scripted, _) => vec![],
        }
    }
}

fn scripted(turn: Turn) -> ScriptedModel {
    let rules = match turn {
        Turn::OneCall => json!({"rules": [{"then": {"text": REPLY}}]}),
        Turn::ToolThenAnswer => json!({"rules": [
            {"when": {"afterTool": "send_message"}, "then": {"text": ""}},
            {"then": {"toolCalls": [{"name": "send_message", "input": {"text": REPLY}}]}}
        ]}),
    };
    ScriptedModel::from_json(&rules.to_string()).unwrap()
}

/// The scripted model, each call followed by a walk over `buffer` (one byte in every 64), as a
/// real adapter's call leaves the CPU's caches to whatever comes after it.
struct Evicting {
    inner: ScriptedModel,
    buffer: std::sync::Mutex<Vec<u8>>,
}

#[async_trait::async_trait]
impl Model for Evicting {
    async fn converse(
        &self,
        request: &ModelRequest,
    ) -> Result<switchboard_engine::ModelResponse, switchboard_engine::ModelError> {
        let response = self.inner.converse(request).await;
        walk(&mut self.buffer.lock().unwrap(), request.messages.len());
        response
    }
}

/// Writes one byte in every 64 of `buffer`.
fn walk(buffer: &mut [u8], round: usize) {
    for i in (0..buffer.len()).step_by(64) {
        buffer[i] = buffer[i].wrapping_add(round as u8);
    }
}

/// CPU of one [`walk`] over `bytes`, from a thousand back to back.
fn walk_cpu(bytes: usize) -> Duration {
    let mut buffer = vec![0u8; bytes];
    let cpu0 = cpu();
    for round in 0..1000 {
        walk(&mut buffer, round);
    }
    std::hint::black_box(&buffer);
    (cpu() - cpu0) / 1000
}

/// The fake provider in a child process: this binary again, with `MODELS_BENCH_FAKE` naming the
/// adapter, the turn and the messages to script. It prints its base URL, serves until its stdin
/// closes, then prints how many requests it received.
struct FakeChild {
    child: Child,
    stdout: BufReader<ChildStdout>,
    base_url: String,
}

impl FakeChild {
    fn start(adapter: Adapter, turn: Turn, messages: usize) -> Self {
        let spec = format!("{adapter:?}:{turn:?}:{messages}");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("MODELS_BENCH_FAKE", spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut base_url = String::new();
        stdout.read_line(&mut base_url).unwrap();
        assert!(base_url.starts_with("http://"), "the fake did not start: {base_url:?}");
        Self { child, stdout, base_url: base_url.trim().to_owned() }
    }

    /// Stops the fake; the requests it received.
    fn finish(mut self) -> usize {
        drop(self.child.stdin.take());
        let mut count = String::new();
        self.stdout.read_line(&mut count).unwrap();
        assert!(self.child.wait().unwrap().success());
        count.trim().parse().unwrap()
    }
}

/// The child's side of [`FakeChild`].
fn serve_fake(spec: &str) {
    let parts: Vec<&str> = spec.split(':').collect();
    let adapter = ADAPTERS.into_iter().find(|a| format!("{a:?}") == parts[0]).unwrap();
    let turn = TURNS.into_iter().find(|t| format!("{t:?}") == parts[1]).unwrap();
    let messages: usize = parts[2].parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let script: Vec<Answer> = (0..messages).flat_map(|_| adapter.answers(turn)).collect();
    let fake = rt.block_on(FakeProvider::start(adapter.wire().unwrap(), script));
    println!("{}", fake.base_url);
    std::io::stdout().flush().unwrap();
    // Serves on a thread of its own while this one waits for the bench to close stdin.
    let server = std::thread::spawn(move || rt.block_on(std::future::pending::<()>()));
    std::io::copy(&mut std::io::stdin(), &mut std::io::sink()).unwrap();
    println!("{}", fake.received().len());
    std::io::stdout().flush().unwrap();
    drop(server);
    std::process::exit(0);
}

async fn model(adapter: Adapter, turn: Turn, messages: usize, evict: usize) -> (Arc<dyn Model>, Option<FakeChild>) {
    if adapter.wire().is_none() {
        if evict > 0 {
            return (
                Arc::new(Evicting { inner: scripted(turn), buffer: std::sync::Mutex::new(vec![0u8; evict]) }),
                None,
            );
        }
        return (Arc::new(scripted(turn)), None);
    }
    let fake = FakeChild::start(adapter, turn, messages);
    let vars = [
        ("OPENAI_API_KEY", "sk-bench".to_owned()),
        ("OPENAI_BASE_URL", fake.base_url.clone()),
        ("ANTHROPIC_API_KEY", "sk-ant-bench".to_owned()),
        ("ANTHROPIC_BASE_URL", fake.base_url.clone()),
    ];
    let settings =
        ModelSettings::from_env(&|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())).unwrap();
    let mut models = Models::from_settings(&settings).unwrap();
    if let Adapter::Bedrock = adapter {
        let sdk = switchboard_aws::AwsSettings::emulator(fake.base_url.clone()).load().await;
        let bedrock = switchboard_aws::BedrockModel::new(switchboard_aws::AwsClients::new(&sdk).bedrock);
        models = models.with_provider(Provider::Bedrock, Arc::new(bedrock));
    }
    (Arc::new(models), Some(fake))
}

fn bundle(model: &str) -> String {
    json!({
        "tenantId": TENANT, "name": "Benchmark tenant",
        "limits": support::highest_limits(),
        "agents": [{
            "agentId": AGENT, "name": "Support", "systemPrompt": "You answer customers about their orders.",
            "model": model, "tools": ["send_message"], "maxTurns": MAX_TURNS_CEILING, "maxIterations": 3
        }],
        "triggers": [{ "triggerId": TRIGGER, "name": "Everything", "agentId": AGENT, "eventType": "message.new",
                       "priority": 10, "conditions": {} }]
    })
    .to_string()
}

fn event(n: usize) -> InboundEvent {
    InboundEvent::parse(&json!({
        "version": "0", "id": format!("evt-{n}"), "source": "conversations-service", "detail-type": "message.new",
        "detail": {
            "tenantId": TENANT, "conversationId": format!("conv-{n}"), "messageId": format!("msg-{n}"),
            "channel": { "platform": "webchat" }, "conversation": { "status": "open" },
            "message": { "direction": "inbound", "text": "Where is my order #1234? It was due on Monday." }
        }
    }))
    .unwrap()
}

/// Message `n`, on a conversation of its own: ingested, then waited for (as `POST /events?wait`
/// waits) until a worker has committed its execution record, which must hold the turn's model
/// calls.
async fn one(embedded: &Embedded, turn: Turn, n: usize) {
    let event = event(n);
    let completions = embedded.subscribe_completions();
    embedded.ingest(&event).await.unwrap();
    let tenant = &event.detail.tenant_id;
    let waited = embedded.wait_for_execution(completions, tenant, &event.id, Queued::Now, Duration::from_secs(30));
    let Some(record) = waited.await.unwrap() else { panic!("message {n} was not run within 30 s") };
    assert_eq!(record.status, ExecutionStatus::Success, "{}", serde_json::to_string(&record).unwrap());
    assert_eq!(record.model_calls.len(), turn.calls(), "{}", serde_json::to_string(&record).unwrap());
}

/// One run: `messages` messages, each on its own conversation; CPU and wall time per message.
async fn run(
    adapter: Adapter,
    turn: Turn,
    warmup: usize,
    messages: usize,
    evict: usize,
) -> (Duration, Duration, String) {
    let dir = tempfile::tempdir().unwrap();
    let (model, fake) = model(adapter, turn, warmup + messages, evict).await;
    // The scripted model's walks (see `Evicting`) are not the pipeline's CPU.
    let walks = match adapter.wire() {
        None if evict > 0 => walk_cpu(evict) * u32::try_from(messages * turn.calls()).unwrap(),
        _ => Duration::ZERO,
    };
    let embedded = Embedded::open(dir.path(), model, Arc::new(SystemClock), EmbeddedOptions::default()).unwrap();
    Bundle::parse(&bundle(adapter.model()), &SystemClock).unwrap().install(&embedded.store).await.unwrap();
    // The workers `serve` runs: each turn's commit acknowledges its item, and a message arriving
    // while a worker waits is handed to it.
    embedded.start_workers();
    for n in 0..warmup {
        one(&embedded, turn, n).await;
    }
    let (cpu0, wall0, calls0, written0) =
        (cpu(), Instant::now(), embedded.store.db_calls(), embedded.store.db_commits());
    for n in warmup..warmup + messages {
        one(&embedded, turn, n).await;
    }
    let (cpu1, wall1, calls1, written1) =
        (cpu(), Instant::now(), embedded.store.db_calls(), embedded.store.db_commits());
    let each = |n: u64| format!("{:.1}", n as f64 / messages as f64);
    let database =
        format!("{} / {} / {}", each(calls1 - calls0), each(written1.0 - written0.0), each(written1.1 - written0.1));
    // The database closes (the log copied into the file and deleted) before the next run starts,
    // so that its close is not counted there.
    assert!(Arc::new(embedded).close(Duration::from_secs(30)).await, "the database did not close within 30 s");
    assert!(!dir.path().join(format!("{DB_FILE}-wal")).exists(), "the closed database left its log");
    if let Some(fake) = fake {
        assert_eq!(fake.finish(), (warmup + messages) * turn.calls());
    }
    let per = |d: Duration| d / u32::try_from(messages).unwrap();
    (per((cpu1 - cpu0).saturating_sub(walks)), per(wall1 - wall0), database)
}

/// The adapter's own share: `messages` model calls alone (a system prompt, one customer message,
/// the `send_message` tool; a text answer), no pipeline around them. CPU per call; with
/// `evict` bytes, each call followed by a walk over a buffer that large (its CPU not counted).
async fn calls_alone(adapter: Adapter, messages: usize, evict: usize) -> Duration {
    let (model, fake) = model(adapter, Turn::OneCall, messages, 0).await;
    let request = ModelRequest {
        model: adapter.model().to_owned(),
        system: "You answer customers about their orders.".to_owned(),
        messages: vec![Message::user_text("Where is my order #1234? It was due on Monday.")],
        tools: vec![ToolSpec {
            name: "send_message".to_owned(),
            description: "Sends a message to the customer.".to_owned(),
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        }],
        config: ModelConfig::default(),
        deadline: None,
        recording: switchboard_domain::Recording::Full,
    };
    let mut buffer = vec![0u8; evict];
    let walks = walk_cpu(evict) * u32::try_from(messages).unwrap();
    let cpu0 = cpu();
    for round in 0..messages {
        let response = model.converse(&request).await.unwrap();
        assert_eq!(response.content.len(), 1);
        walk(&mut buffer, round);
    }
    let used = (cpu() - cpu0).saturating_sub(walks);
    std::hint::black_box(&buffer);
    if let Some(fake) = fake {
        assert_eq!(fake.finish(), messages);
    }
    used / u32::try_from(messages).unwrap()
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(default)
}

fn main() {
    if let Ok(spec) = std::env::var("MODELS_BENCH_FAKE") {
        return serve_fake(&spec);
    }
    let runs = env("MODELS_BENCH_RUNS", 5);
    let evict = std::env::var("MODELS_BENCH_EVICT_KIB").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(0) * 1024;
    let messages = env("MODELS_BENCH_MESSAGES", 1000);
    // 0 allowed: a new database's first messages.
    let warmup = std::env::var("MODELS_BENCH_WARMUP").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    // One worker thread for the loop (the fake serves from its own process).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    println!(
        "{runs} runs of {messages} messages after {warmup} of warm-up; CPU and wall time per message: median (lowest–highest run)"
    );
    println!("| adapter | turn | CPU / message | wall / message | database calls / commits / WAL pages per message |");
    println!("|---|---|---|---|---|");
    // `MODELS_BENCH_ONLY=bedrock` (for one) runs the adapters whose name starts with it.
    let only = std::env::var("MODELS_BENCH_ONLY").unwrap_or_default();
    for adapter in ADAPTERS.into_iter().filter(|a| a.name().starts_with(only.as_str())) {
        for turn in TURNS {
            let (mut cpus, mut walls, mut database) = (vec![], vec![], String::new());
            for _ in 0..runs {
                let (c, w, d) = rt.block_on(run(adapter, turn, warmup, messages, evict));
                cpus.push(c);
                walls.push(w);
                database = d;
            }
            let (c, cl, ch) = median(cpus);
            let (w, wl, wh) = median(walls);
            let name = if turn == Turn::OneCall { "1 call" } else { "2 calls + tool" };
            let adapter_name = match adapter.wire() {
                None if evict > 0 => format!("{}, each call followed by a {} KiB walk", adapter.name(), evict / 1024),
                _ => adapter.name().to_owned(),
            };
            println!(
                "| {adapter_name} | {name} | {} ({}–{}) | {} ({}–{}) | {database} (last run) |",
                us(c),
                us(cl),
                us(ch),
                us(w),
                us(wl),
                us(wh)
            );
        }
    }
    println!();
    let after = if evict > 0 {
        format!(", each followed by a walk over {} KiB (its CPU not counted)", evict / 1024)
    } else {
        String::new()
    };
    println!("The model call alone (no pipeline{after}): CPU per call, median (lowest–highest run)");
    println!("| adapter | CPU / call |");
    println!("|---|---|");
    for adapter in ADAPTERS.into_iter().filter(|a| a.wire().is_some() && a.name().starts_with(only.as_str())) {
        // Ten times the calls: a call alone is a few CPU ticks' worth per hundred.
        let mut cpus: Vec<Duration> =
            (0..runs).map(|_| rt.block_on(calls_alone(adapter, 10 * messages, evict))).collect();
        cpus.sort();
        let (c, cl, ch) = (cpus[cpus.len() / 2], cpus[0], cpus[cpus.len() - 1]);
        println!("| {} | {} ({}–{}) |", adapter.name(), us(c), us(cl), us(ch));
    }
}
