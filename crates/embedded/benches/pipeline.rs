//! Measures the embedded pipeline end to end — ingest (conversation log + routing + SQLite queue),
//! queue workers, executor with the scripted model, reply and execution record — on a fresh
//! SQLite file: throughput, per-message latency (ingest → execution recorded), and checks that
//! every conversation got exactly one reply per message, in order.
//!
//! Sizes: `PIPELINE_CONVERSATIONS` (default 1000) × `PIPELINE_MESSAGES` (default 10), fed in
//! rounds (round r sends message r of every conversation) without waiting between rounds.
//! `PIPELINE_WORKERS` (default 4) sets the worker count. `PIPELINE_INGESTERS` (default 1) tasks
//! feed the messages, each a share of the conversations (every conversation's messages from one
//! task, in order): with one, the rate is bound by one ingest's latency; with several, as when
//! many channels deliver at once, by the pipeline. `PIPELINE_PHASED=1` ingests everything
//! before starting the workers, to time ingest and execution apart (latencies then include the
//! wait in the queue).
//!
//! Also printed: the process's CPU time per message (user + system, all threads, from the first
//! ingest until the queue is idle), the database calls per message (a round trip to the
//! database thread, or run on the caller's thread while the database is quiet: how many is
//! printed too), and the commits and WAL pages written per message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_domain::limits::MAX_TURNS_CEILING;
use switchboard_domain::{ExecutionStatus, InboundEvent, TenantId};
use switchboard_embedded::runtime::Completion;
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{ConversationLog, ExecutionLog, SystemClock};
use tokio::sync::{broadcast, oneshot};

mod support;
use support::cpu;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TENANT: &str = "bench";
const AGENT: &str = "01JD0000BENCH0AGENT0000001";
const TRIGGER: &str = "01JD0000BENCH0TR1GGER00001";

fn main() {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot build the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run()) {
        eprintln!("pipeline bench FAILED: {e}");
        std::process::exit(1);
    }
}

fn env_size(name: &str, default: usize) -> Result<usize, BoxError> {
    match std::env::var(name) {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{name} must be a positive integer, got '{v}'").into()),
        },
        Err(_) => Ok(default),
    }
}

fn bundle() -> String {
    json!({
        "tenantId": TENANT,
        "name": "Benchmark tenant",
        "limits": support::highest_limits(),
        "agents": [{
            "agentId": AGENT, "name": "Echo", "systemPrompt": "You repeat what the customer says.",
            "model": "bench-model", "tools": ["send_message"],
            "maxTurns": MAX_TURNS_CEILING, "maxIterations": 2
        }],
        "triggers": [{
            "triggerId": TRIGGER, "name": "Everything", "agentId": AGENT, "eventType": "message.new",
            "priority": 10, "conditions": {}
        }]
    })
    .to_string()
}

fn event(conversation: usize, message: usize) -> Result<InboundEvent, BoxError> {
    InboundEvent::parse(&json!({
        "version": "0",
        "id": format!("evt-{conversation}-{message}"),
        "source": "conversations-service",
        "detail-type": "message.new",
        "time": "2025-01-15T10:32:07Z",
        "detail": {
            "tenantId": TENANT,
            "conversationId": format!("conv-{conversation}"),
            "messageId": format!("conv-{conversation}-msg-{message}"),
            "channel": { "platform": "webchat" },
            "conversation": { "status": "open" },
            "message": { "direction": "inbound", "text": format!("conv-{conversation} msg-{message}") }
        }
    }))
    .map_err(|e| format!("bench event {conversation}/{message} is invalid: {e}").into())
}

/// What the completion listener saw.
#[derive(Default)]
struct Seen {
    done_at: HashMap<String, Instant>,
    /// Completions lost because the broadcast channel (capacity 1024) overflowed.
    lagged: u64,
}

fn note(seen: &mut Seen, c: Completion) {
    seen.done_at.entry(c.source_id).or_insert_with(Instant::now);
}

/// Drains completions until `stop` fires, then takes whatever is still buffered.
async fn listen(mut rx: broadcast::Receiver<Completion>, mut stop: oneshot::Receiver<()>) -> Seen {
    let mut seen = Seen::default();
    loop {
        tokio::select! {
            biased;
            r = rx.recv() => match r {
                Ok(c) => note(&mut seen, c),
                Err(broadcast::error::RecvError::Lagged(n)) => seen.lagged += n,
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = &mut stop => {
                loop {
                    match rx.try_recv() {
                        Ok(c) => note(&mut seen, c),
                        Err(broadcast::error::TryRecvError::Lagged(n)) => seen.lagged += n,
                        Err(_) => break,
                    }
                }
                break;
            }
        }
    }
    seen
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn run() -> Result<(), BoxError> {
    let conversations = env_size("PIPELINE_CONVERSATIONS", 1000)?;
    let messages = env_size("PIPELINE_MESSAGES", 10)?;
    if messages > MAX_TURNS_CEILING as usize {
        return Err(format!("PIPELINE_MESSAGES must be at most {MAX_TURNS_CEILING} (the agent's maxTurns)").into());
    }
    let workers = env_size("PIPELINE_WORKERS", 4)?;
    let ingesters = env_size("PIPELINE_INGESTERS", 1)?.clamp(1, conversations.max(1));
    let phased = std::env::var("PIPELINE_PHASED").is_ok_and(|v| v == "1");
    let total = conversations * messages;

    let dir = tempfile::tempdir()?;
    let model = ScriptedModel::from_json(r#"{ "rules": [ { "then": { "text": "echo: {{userText}}" } } ] }"#)?;
    let options = EmbeddedOptions { workers, ..EmbeddedOptions::default() };
    let embedded = Arc::new(Embedded::open(dir.path(), Arc::new(model), Arc::new(SystemClock), options)?);
    Bundle::parse(&bundle(), &SystemClock).map_err(|e| format!("bench bundle: {e}"))?.install(&embedded.store).await?;
    let tenant: TenantId = TENANT.parse()?;

    // Built before the clock starts: the bench measures the pipeline, not JSON building. Each
    // ingester's events in rounds (message r of each of its conversations, then r + 1).
    let mut feeds: Vec<Vec<InboundEvent>> = vec![Vec::with_capacity(total / ingesters + messages); ingesters];
    for m in 0..messages {
        for c in 0..conversations {
            feeds[c % ingesters].push(event(c, m)?);
        }
    }

    let (stop_tx, stop_rx) = oneshot::channel();
    let listener = tokio::spawn(listen(embedded.subscribe_completions(), stop_rx));
    if !phased {
        embedded.start_workers();
    }

    let mut ingested_at: HashMap<String, Instant> = HashMap::with_capacity(total);
    let (cpu0, calls0, written0) = (cpu(), db_calls(&embedded), embedded.store.db_commits());
    let started = Instant::now();
    let tasks: Vec<_> = feeds
        .into_iter()
        .map(|feed| {
            let embedded = Arc::clone(&embedded);
            tokio::spawn(async move {
                let mut at = Vec::with_capacity(feed.len());
                for e in feed {
                    at.push((switchboard_engine::intake::source_id(&e), Instant::now()));
                    embedded.ingest(&e).await?;
                }
                Ok::<_, BoxError>(at)
            })
        })
        .collect();
    for task in tasks {
        ingested_at.extend(task.await??);
    }
    let ingest_time = started.elapsed();
    if phased {
        embedded.start_workers();
    }
    embedded.queue.wait_idle().await?;
    let wall = started.elapsed();
    let (cpu_used, calls) = (cpu().saturating_sub(cpu0), db_calls(&embedded));
    let (calls, inline) = (calls.0 - calls0.0, calls.1 - calls0.1);
    let written = embedded.store.db_commits();
    let (commits, frames) = (written.0 - written0.0, written.1 - written0.1);
    let _ = stop_tx.send(());
    let seen = listener.await?;
    embedded.shutdown().await;

    // Latency per message whose completion was observed.
    let mut latencies: Vec<Duration> = ingested_at
        .iter()
        .filter_map(|(id, at)| seen.done_at.get(id).map(|done| done.saturating_duration_since(*at)))
        .collect();
    latencies.sort();

    // Verification: every conversation's replies are exactly "echo: conv-N msg-0" … in order,
    // every source has one successful execution, and nothing was dead-lettered.
    let mut failures = Vec::new();
    for c in 0..conversations {
        let conversation = format!("conv-{c}");
        let log = embedded.store.messages(&tenant, &conversation, messages * 4 + 16).await?;
        let replies: Vec<String> = log.into_iter().filter(|m| m.direction == "outbound").map(|m| m.text).collect();
        let expected: Vec<String> = (0..messages).map(|m| format!("echo: conv-{c} msg-{m}")).collect();
        if replies != expected {
            failures.push(format!(
                "{conversation}: expected {} replies in order, got {}: {:?}",
                expected.len(),
                replies.len(),
                replies
            ));
        }
    }
    let mut missing_executions = 0usize;
    for id in ingested_at.keys() {
        match embedded.store.execution_for_source(&tenant, id).await? {
            Some(r) if r.status == ExecutionStatus::Success => {}
            Some(r) => failures.push(format!("{id}: execution status {:?}: {:?}", r.status, r.error)),
            None => missing_executions += 1,
        }
    }
    if missing_executions > 0 {
        failures.push(format!("{missing_executions} source(s) have no execution record"));
    }
    let dead = embedded.queue.stats().await?.dead;
    if dead > 0 {
        failures.push(format!("{dead} item(s) dead-lettered"));
    }
    if seen.done_at.len() as u64 + seen.lagged < total as u64 {
        failures.push(format!(
            "only {} completions observed (+{} lagged) for {total} messages",
            seen.done_at.len(),
            seen.lagged
        ));
    }

    let rate = total as f64 / wall.as_secs_f64();
    println!();
    println!("| metric | value |");
    println!("|---|---|");
    println!("| conversations × messages | {conversations} × {messages} |");
    println!("| total messages | {total} |");
    println!("| workers | {workers}{} |", if phased { " (started after ingest)" } else { "" });
    println!("| ingesting tasks | {ingesters} |");
    println!(
        "| ingest phase | {:.2} s ({:.0} msg/s) |",
        ingest_time.as_secs_f64(),
        total as f64 / ingest_time.as_secs_f64()
    );
    println!("| wall time (first ingest → queue idle) | {:.2} s |", wall.as_secs_f64());
    let drain = wall.saturating_sub(ingest_time);
    println!("| drain after last ingest | {:.2} s |", drain.as_secs_f64());
    println!("| throughput | {rate:.0} msg/s |");
    println!("| CPU per message (process, all threads) | {:.3} ms |", cpu_used.as_secs_f64() * 1000.0 / total as f64);
    println!(
        "| database calls per message (on the caller's thread) | {:.1} ({:.1}) |",
        calls as f64 / total as f64,
        inline as f64 / total as f64
    );
    println!(
        "| commits / WAL pages written per message | {:.2} / {:.1} |",
        commits as f64 / total as f64,
        frames as f64 / total as f64
    );
    println!("| latency p50 | {} |", ms(percentile(&latencies, 50.0)));
    println!("| latency p90 | {} |", ms(percentile(&latencies, 90.0)));
    println!("| latency p99 | {} |", ms(percentile(&latencies, 99.0)));
    println!("| latency max | {} |", ms(latencies.last().copied().unwrap_or_default()));
    println!("| latency samples | {} (lagged completions: {}) |", latencies.len(), seen.lagged);
    println!("| order and count verified | {} |", if failures.is_empty() { "yes" } else { "NO" });
    println!();

    if failures.is_empty() {
        Ok(())
    } else {
        // The first and the last ten: order failures come before record failures.
        for (i, f) in failures.iter().enumerate() {
            if i < 10 || i + 10 >= failures.len() {
                eprintln!("violation: {f}");
            }
        }
        Err(format!("{} violation(s) of per-conversation order or count", failures.len()).into())
    }
}

/// Database calls so far, and those of them that ran on their caller's thread.
fn db_calls(embedded: &Embedded) -> (u64, u64) {
    (embedded.store.db_calls(), embedded.store.db_calls_on_callers_thread())
}
