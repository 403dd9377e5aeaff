//! `switchboard demo`: the example tenant from `examples/support/`, run offline on a fresh
//! temporary data directory with the scripted model (a deterministic test double, not an AI).
//! The example order system (a webhook receiver that verifies signatures) runs in-process.
//! Three conversations: an order question answered (through the signed webhook) and closed, a customer who asks for a person
//! (human handoff; their next message is left to the human), and a billing question handed to a
//! specialist agent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde_json::json;
use switchboard_domain::{ExecutionRecord, InboundEvent, OutboundEvent, TenantId, ToolHandler};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::executor::describe;
use switchboard_engine::{
    ConversationLog, ExecutionLog, RouteOutcome, SecretError, Secrets, SessionStore, SystemClock,
};
use switchboard_webhooks::{HttpWebhookCaller, WebhookPolicy};

const TENANT_BUNDLE: &str = include_str!("../../../examples/support/tenant.json");
const SCRIPT: &str = include_str!("../../../examples/support/script.json");
const SECRETS: &str = include_str!("../../../examples/support/secrets.json");

/// The example secrets file, in memory.
struct ExampleSecrets(serde_json::Value);

#[async_trait::async_trait]
impl Secrets for ExampleSecrets {
    async fn get_secret(&self, tenant: &TenantId, name: &str) -> Result<Option<String>, SecretError> {
        Ok(self.0[tenant.as_str()][name].as_str().map(str::to_owned))
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the data in this directory instead of a temporary one (inspect it with `serve`).
    #[arg(long, value_name = "DIR")]
    keep_data: Option<PathBuf>,
}

/// The inbound messages, in rounds: each round is fed at once, then run to completion.
const ROUNDS: &[&[(&str, &str, &str)]] = &[
    &[
        ("conv-order-1001", "webchat", "Hi there"),
        ("conv-human-2002", "facebook", "This is the third time I write, I want to talk to a human"),
        ("conv-billing-3003", "instagram", "I was charged twice for my last order"),
    ],
    &[("conv-order-1001", "webchat", "Where is my order #1234?"), ("conv-human-2002", "facebook", "Hello? Anyone?")],
    &[("conv-order-1001", "webchat", "Great, thank you!")],
];

fn event(n: usize, conversation: &str, platform: &str, text: &str) -> serde_json::Value {
    json!({
        "version": "0",
        "id": format!("demo-evt-{n:04}"),
        "source": "conversations-service",
        "detail-type": "message.new",
        "time": chrono::Utc::now().to_rfc3339(),
        "detail": {
            "tenantId": "acme",
            "conversationId": conversation,
            "messageId": format!("demo-msg-{n:04}"),
            "channel": { "platform": platform },
            "conversation": { "status": "open" },
            "message": { "direction": "inbound", "text": text }
        }
    })
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let temp = tempfile::tempdir().context("creating a temporary data directory")?;
    let data_dir = args.keep_data.clone().unwrap_or_else(|| temp.path().to_owned());
    let model = Arc::new(ScriptedModel::from_json(SCRIPT).context("examples/support/script.json")?);
    // The example order system runs on this machine, so the demo allows webhook calls to
    // loopback, as `serve --allow-private-webhooks` would; signatures are checked all the same.
    let secrets: serde_json::Value = serde_json::from_str(SECRETS).context("examples/support/secrets.json")?;
    let receiver = crate::receiver::start(
        "127.0.0.1:0".parse()?,
        secrets["acme"]["orders"].as_str().unwrap_or_default().to_owned(),
    )
    .await?;
    let policy = WebhookPolicy { allow_http: true, allow_private: true };
    let webhooks = Arc::new(
        HttpWebhookCaller::new(policy, Arc::new(ExampleSecrets(secrets))).map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let options = EmbeddedOptions { webhooks, ..EmbeddedOptions::default() };
    let embedded = Arc::new(
        Embedded::open(&data_dir, model, Arc::new(SystemClock), options).context("opening the data directory")?,
    );
    let mut bundle =
        Bundle::parse(TENANT_BUNDLE, &SystemClock).map_err(|e| anyhow::anyhow!("examples/support/tenant.json: {e}"))?;
    // Point the order-status tool at the receiver's port.
    for tool in &mut bundle.tools {
        let ToolHandler::Webhook(h) = &mut tool.handler;
        h.url = receiver.url.clone();
    }
    bundle.install(&embedded.store).await.context("installing the example tenant")?;
    let mut events = embedded.bus.subscribe();
    embedded.start_workers();

    println!("Switchboard demo: embedded profile, SQLite in {}", data_dir.display());
    println!(
        "Tenant '{}' ({}): {} agents, {} trigger(s)",
        bundle.tenant_id,
        bundle.name,
        bundle.agents.len(),
        bundle.triggers.len()
    );
    println!("Model: SCRIPTED TEST DOUBLE (deterministic rules from examples/support/script.json; not an AI)");
    println!("Order system (example webhook receiver, verifies signatures): {}\n", receiver.url);

    let mut n = 0;
    let mut routing = Vec::new();
    for round in ROUNDS {
        for (conversation, platform, text) in *round {
            n += 1;
            let parsed = InboundEvent::parse(&event(n, conversation, platform, text))
                .map_err(|e| anyhow::anyhow!("demo event {n}: {e}"))?;
            let outcome = embedded.ingest(&parsed).await.context("routing a demo event")?;
            routing.push((conversation.to_string(), text.to_string(), outcome));
        }
        embedded.queue.wait_idle().await.context("waiting for the queue")?;
    }
    embedded.shutdown().await;

    let mut published: Vec<OutboundEvent> = Vec::new();
    while let Ok((_, e)) = events.try_recv() {
        published.push(e);
    }
    let tenant = bundle.tenant_id.clone();
    let agent_names: BTreeMap<_, _> = bundle.agents.iter().map(|a| (a.agent_id, a.name.clone())).collect();
    let mut conversations: Vec<&str> = Vec::new();
    for round in ROUNDS {
        for (c, _, _) in *round {
            if !conversations.contains(c) {
                conversations.push(c);
            }
        }
    }
    let mut totals = (0usize, 0usize);
    for conversation in conversations {
        println!("━━ Conversation {conversation}");
        for m in embedded.store.messages(&tenant, conversation, 100).await? {
            let who = if m.direction == "inbound" { "customer" } else { "agent   " };
            println!("   {who} › {}", m.text);
        }
        for (c, text, outcome) in &routing {
            if c == conversation && matches!(outcome, RouteOutcome::HumanOwned { .. }) {
                println!("   (not routed: a human operator owns this conversation — \"{text}\" waits for them)");
            }
        }
        for session in embedded.store.sessions_for_conversation(&tenant, conversation).await? {
            let agent = agent_names.get(&session.agent_id).map_or("?", String::as_str);
            println!(
                "   session {} · agent \"{agent}\" · {:?} · {} turn(s){}",
                session.session_id,
                session.status,
                session.turn_count,
                if session.memory.is_empty() { String::new() } else { format!(" · memory {}", json!(session.memory)) }
            );
            let page = embedded.store.list_executions(&tenant, session.session_id, None, 100).await?;
            for record in &page.items {
                totals.0 += 1;
                totals.1 += record.tool_calls.len();
                print_execution(record);
            }
        }
        for e in published.iter().filter(|e| e.detail["conversationId"] == conversation) {
            print_event(e);
        }
        println!();
    }
    let stats = embedded.queue.stats().await?;
    println!(
        "{n} inbound messages, {} executions, {} tool calls, {} events published; queue: {} ready, {} dead-lettered",
        totals.0,
        totals.1,
        published.len(),
        stats.ready,
        stats.dead
    );
    let tally = &receiver.tally;
    println!(
        "Order system: verified {} signed webhook call(s), rejected {}",
        tally.verified.load(std::sync::atomic::Ordering::Relaxed),
        tally.rejected.load(std::sync::atomic::Ordering::Relaxed)
    );
    if let Some(dir) = &args.keep_data {
        println!(
            "Data kept in {} — try: switchboard serve --data-dir {} --scripted-model examples/support/script.json",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

fn print_execution(r: &ExecutionRecord) {
    println!(
        "     execution {} · {:?} · {} iteration(s) · {} tool call(s) [{}] · {} tokens ({} in / {} out) · {} ms",
        r.execution_id,
        r.status,
        r.iterations,
        r.tool_calls.len(),
        r.tool_calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
        r.token_usage.total(),
        r.token_usage.input_tokens,
        r.token_usage.output_tokens,
        r.latency_ms
    );
    for call in &r.tool_calls {
        if let Some(w) = &call.webhook {
            println!(
                "       ↔ webhook {} → {} · HTTP {} · {} attempt(s) · {}",
                call.name,
                w.host,
                w.status.map_or("-".to_owned(), |s| s.to_string()),
                w.attempts,
                w.outcome
            );
        }
    }
    for a in &r.actions {
        println!("       → {}", describe(a));
    }
    if let Some(e) = &r.error {
        println!("       ! {:?}: {}", e.kind, e.message);
    }
}

fn print_event(e: &OutboundEvent) {
    let d = &e.detail;
    match e.detail_type.as_str() {
        "session.handoff.human" => println!(
            "   ⚑ event {} · reason \"{}\" · priority {} · context {}",
            e.detail_type,
            d["reason"].as_str().unwrap_or(""),
            d["priority"].as_str().unwrap_or(""),
            d["context"]
        ),
        _ => println!("   ⚑ event {} · {}", e.detail_type, d),
    }
}
