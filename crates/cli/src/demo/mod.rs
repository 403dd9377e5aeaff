//! `switchboard demo`: one example tenant from `examples/<name>/`, run offline on a fresh
//! temporary data directory with the scripted model (a deterministic test double, not an AI).
//! Each example is a bundle (`tenant.json`), the model's rules (`script.json`) and the inbound
//! messages in rounds (`conversation.json`), embedded in the binary so it runs from anywhere.
//! `support` (the default) also runs the example order system, a webhook receiver that verifies
//! signatures; the others show one multi-agent pattern each (steps, skills, supervisor, router).

mod print;
pub mod receiver;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::{InboundEvent, OutboundEvent, TenantId, ToolHandler};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::{
    ConversationLog, ExecutionLog, RouteOutcome, SecretError, Secrets, SessionStore, SystemClock,
};
use switchboard_webhooks::{HttpWebhookCaller, WebhookPolicy};

use crate::shared::CLOSE_TIMEOUT;
use print::{Names, print_agent, print_event, print_execution, print_session};

/// The examples `--example` accepts; each is a directory under `examples/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExampleName {
    /// Front-line support with a webhook tool, a human handoff and an agent handoff.
    Support,
    /// A returns desk that moves through steps: greet → collect order → confirm (final).
    Steps,
    /// An FAQ assistant that loads skills (shipping, returns with its parent policies) on demand.
    Skills,
    /// A concierge that asks a billing and a shipping specialist in one turn.
    Supervisor,
    /// A front door that routes to billing, technical support or the default team.
    Router,
    /// A front desk that asks orders, the warehouse and returns at once (router fan-out) and
    /// answers from what they say; the returns desk fails and the others' answers still count.
    FanOut,
}

/// One example's files, embedded at build time.
struct Example {
    name: &'static str,
    tenant: &'static str,
    script: &'static str,
    conversation: &'static str,
    /// The secrets file its webhook tools sign with, for examples that have webhook tools.
    secrets: Option<&'static str>,
}

macro_rules! example {
    ($name:literal, $secrets:expr) => {
        Example {
            name: $name,
            tenant: include_str!(concat!("../../../../examples/", $name, "/tenant.json")),
            script: include_str!(concat!("../../../../examples/", $name, "/script.json")),
            conversation: include_str!(concat!("../../../../examples/", $name, "/conversation.json")),
            secrets: $secrets,
        }
    };
}

impl ExampleName {
    fn files(self) -> Example {
        match self {
            Self::Support => example!("support", Some(include_str!("../../../../examples/support/secrets.json"))),
            Self::Steps => example!("steps", None),
            Self::Skills => example!("skills", None),
            Self::Supervisor => example!("supervisor", None),
            Self::Router => example!("router", None),
            Self::FanOut => example!("fan-out", None),
        }
    }

    /// What the example shows: its doc comment above, as `--help` lists it.
    fn about(self) -> String {
        self.to_possible_value().and_then(|v| v.get_help().map(ToString::to_string)).unwrap_or_default()
    }
}

/// `conversation.json`: the inbound messages, in rounds. A round is routed at once (its
/// messages may run in parallel); the next round starts when the queue is empty.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Conversation {
    rounds: Vec<Vec<Inbound>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Inbound {
    conversation_id: String,
    platform: String,
    text: String,
}

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
    /// Which example tenant to run (a directory under `examples/`).
    #[arg(long, value_enum, value_name = "NAME", default_value = "support")]
    example: ExampleName,
    /// Keep the data in this directory instead of a temporary one (inspect it with `serve`).
    #[arg(long, value_name = "DIR")]
    keep_data: Option<PathBuf>,
    /// Answer with a real model instead of the scripted test double: a model reference every
    /// agent of the example then uses (`openai:gpt-4o-mini`, `anthropic:claude-3-5-haiku-latest`,
    /// `ollama:llama3.1`, a Bedrock model id), from the providers' usual environment variables
    /// or `--model-config` (docs/models.md). Its answers vary from run to run.
    #[arg(long, value_name = "REF")]
    model: Option<String>,
    /// The model configuration file for `--model`'s provider (aliases, endpoints, keys' variables).
    #[arg(long, value_name = "FILE", requires = "model")]
    model_config: Option<PathBuf>,
}

fn event(example: &str, n: usize, tenant: &TenantId, m: &Inbound) -> serde_json::Value {
    // Ids carry the example's name, so two examples run into one `--keep-data` directory do not
    // look like repeats of each other to the queue's deduplication.
    json!({
        "version": "0",
        "id": format!("demo-{example}-evt-{n:04}"),
        "source": "conversations-service",
        "detail-type": "message.new",
        "time": chrono::Utc::now().to_rfc3339(),
        "detail": {
            "tenantId": tenant,
            "conversationId": m.conversation_id,
            "messageId": format!("demo-{example}-msg-{n:04}"),
            "channel": { "platform": m.platform },
            "conversation": { "status": "open" },
            "message": { "direction": "inbound", "text": m.text }
        }
    })
}

/// The model that answers, and the line that says which: the example's scripted test double,
/// or `--model` for every agent of `bundle` (priced in `options`).
fn model(
    args: &DemoArgs,
    example: &Example,
    dir: &str,
    bundle: &mut Bundle,
    options: &mut EmbeddedOptions,
) -> anyhow::Result<(Arc<dyn switchboard_engine::Model>, String)> {
    let Some(reference) = &args.model else {
        let scripted = ScriptedModel::from_json(example.script).with_context(|| format!("{dir}/script.json"))?;
        let line = format!("SCRIPTED TEST DOUBLE (deterministic rules from {dir}/script.json; not an AI)");
        return Ok((Arc::new(scripted), line));
    };
    let (models, prices) = crate::server::models::providers(args.model_config.as_deref())?;
    models.check(reference).map_err(|why| anyhow::anyhow!("--model {reference}: {why}"))?;
    for agent in &mut bundle.agents {
        reference.clone_into(&mut agent.model);
    }
    options.prices = Arc::new(prices);
    Ok((Arc::new(models), format!("{reference} for every agent (a real model: its answers vary from run to run)")))
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let example = args.example.files();
    let dir = format!("examples/{}", example.name);
    let temp = tempfile::tempdir().context("creating a temporary data directory")?;
    let data_dir = args.keep_data.clone().unwrap_or_else(|| temp.path().to_owned());
    let conversation: Conversation =
        serde_json::from_str(example.conversation).with_context(|| format!("{dir}/conversation.json"))?;
    let mut bundle =
        Bundle::parse(example.tenant, &SystemClock).map_err(|e| anyhow::anyhow!("{dir}/tenant.json: {e}"))?;
    let mut options = EmbeddedOptions::default();
    let (model, model_line) = model(&args, &example, &dir, &mut bundle, &mut options)?;
    let receiver = order_system(&example, &dir, &mut bundle, &mut options).await?;
    let embedded = Arc::new(
        Embedded::open(&data_dir, model, Arc::new(SystemClock), options).context("opening the data directory")?,
    );
    bundle.install(&embedded.store).await.context("installing the example tenant")?;
    let mut events = embedded.bus.subscribe();
    embedded.start_workers();

    let names = Names {
        agents: bundle.agents.iter().map(|a| (a.agent_id, a.clone())).collect(),
        skills: bundle.skills.iter().map(|s| (s.skill_id, s.name.clone())).collect(),
    };
    println!("Switchboard demo: embedded profile, SQLite in {}", data_dir.display());
    println!("Example '{}' ({dir}/): {}", example.name, args.example.about());
    print_tenant(&bundle, &names);
    println!("Model: {model_line}");
    if let Some(r) = &receiver {
        println!("Order system (example webhook receiver, verifies signatures): {}", r.url);
    }
    println!();

    let routing = route(&embedded, &example, &dir, &bundle.tenant_id, &conversation).await?;
    embedded.shutdown().await;
    let mut published: Vec<OutboundEvent> = Vec::new();
    while let Ok((_, e)) = events.try_recv() {
        published.push(e);
    }
    let totals = report(&embedded, &bundle.tenant_id, &conversation, &routing, &published, &names).await?;
    let stats = embedded.queue.stats().await?;
    println!(
        "{} inbound messages, {} executions, {} tool calls, {} events published; queue: {} ready, {} dead-lettered",
        routing.len(),
        totals.0,
        totals.1,
        published.len(),
        stats.ready,
        stats.dead
    );
    if let Some(r) = &receiver {
        println!(
            "Order system: verified {} signed webhook call(s), rejected {}",
            r.tally.verified.load(std::sync::atomic::Ordering::Relaxed),
            r.tally.rejected.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    close(embedded).await;
    if let Some(keep) = &args.keep_data {
        println!(
            "Data kept in {} — try: switchboard serve --data-dir {} --scripted-model {dir}/script.json",
            keep.display(),
            keep.display()
        );
    }
    Ok(())
}

/// An example with webhook tools gets the example order system on this machine, so the demo
/// allows webhook calls to loopback, as `serve --allow-private-webhooks` would; signatures are
/// checked all the same. The tools are pointed at it; `None` for an example without tools.
async fn order_system(
    example: &Example,
    dir: &str,
    bundle: &mut Bundle,
    options: &mut EmbeddedOptions,
) -> anyhow::Result<Option<receiver::Receiver>> {
    let Some(tool) = bundle.tools.first() else {
        return Ok(None);
    };
    let ToolHandler::Webhook(handler) = &tool.handler else {
        anyhow::bail!("{dir}: the example's first tool is not a webhook");
    };
    let secrets: serde_json::Value =
        serde_json::from_str(example.secrets.unwrap_or("{}")).with_context(|| format!("{dir}/secrets.json"))?;
    let secret = handler
        .secret_ref
        .as_deref()
        .and_then(|name| secrets[bundle.tenant_id.as_str()][name].as_str())
        .unwrap_or_default()
        .to_owned();
    let receiver = receiver::start("127.0.0.1:0".parse()?, secret).await?;
    let policy = WebhookPolicy { allow_http: true, allow_private: true };
    options.webhooks = Arc::new(
        HttpWebhookCaller::new(policy, Arc::new(ExampleSecrets(secrets))).map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    // Point the webhook tools at the receiver's port.
    for tool in &mut bundle.tools {
        if let ToolHandler::Webhook(h) = &mut tool.handler {
            h.url = receiver.url.clone();
        }
    }
    Ok(Some(receiver))
}

/// The tenant's line and one line per agent.
fn print_tenant(bundle: &Bundle, names: &Names) {
    println!(
        "Tenant '{}' ({}): {} agent(s), {} trigger(s){}",
        bundle.tenant_id,
        bundle.name,
        bundle.agents.len(),
        bundle.triggers.len(),
        if bundle.skills.is_empty() { String::new() } else { format!(", {} skill(s)", bundle.skills.len()) }
    );
    for agent in &bundle.agents {
        print_agent(agent, names);
    }
}

/// What routing did with one inbound message: (conversation, text, outcome).
type Routed<'a> = (&'a str, &'a str, RouteOutcome);

/// Routes the conversation's rounds, one round at a time, each until the queue is empty.
async fn route<'a>(
    embedded: &Embedded,
    example: &Example,
    dir: &str,
    tenant: &TenantId,
    conversation: &'a Conversation,
) -> anyhow::Result<Vec<Routed<'a>>> {
    let mut n = 0;
    let mut routing = Vec::new();
    for round in &conversation.rounds {
        for m in round {
            n += 1;
            let parsed = InboundEvent::parse(&event(example.name, n, tenant, m))
                .map_err(|e| anyhow::anyhow!("{dir}/conversation.json, message {n}: {e}"))?;
            let outcome = embedded.ingest(&parsed).await.context("routing a demo event")?;
            routing.push((m.conversation_id.as_str(), m.text.as_str(), outcome));
        }
        embedded.queue.wait_idle().await.context("waiting for the queue")?;
    }
    Ok(routing)
}

/// Prints each conversation (in order of first message): its transcript, its sessions with
/// their executions, and the events it published. Returns (executions, tool calls).
async fn report(
    embedded: &Embedded,
    tenant: &TenantId,
    conversation: &Conversation,
    routing: &[Routed<'_>],
    published: &[OutboundEvent],
    names: &Names,
) -> anyhow::Result<(usize, usize)> {
    let mut conversations: Vec<&str> = Vec::new();
    for m in conversation.rounds.iter().flatten() {
        if !conversations.contains(&m.conversation_id.as_str()) {
            conversations.push(&m.conversation_id);
        }
    }
    let mut totals = (0usize, 0usize);
    for conversation in conversations {
        println!("━━ Conversation {conversation}");
        for m in embedded.store.messages(tenant, conversation, 100).await? {
            let who = match m.sender {
                switchboard_engine::Sender::Customer => "customer",
                switchboard_engine::Sender::Agent => "agent   ",
                switchboard_engine::Sender::Human => "human   ",
            };
            println!("   {who} › {}", m.text);
        }
        for (c, text, outcome) in routing {
            if *c == conversation && matches!(outcome, RouteOutcome::HumanOwned { .. }) {
                println!(
                    "   (a human operator owns this conversation: \"{text}\" joins their session's transcript, \
                     recorded as a skipped execution; no agent answers it)"
                );
            }
        }
        for session in embedded.store.sessions_for_conversation(tenant, conversation).await? {
            print_session(&session, names);
            let page = embedded.store.list_executions(tenant, session.session_id, None, 100).await?;
            for record in &page.items {
                totals.0 += 1;
                totals.1 += record.tool_calls.len();
                print_execution(record, names);
            }
        }
        for e in published.iter().filter(|e| e.detail["conversationId"] == conversation) {
            print_event(e);
        }
        println!();
    }
    Ok(totals)
}

/// Closed before the process exits: the log copied into the database file and deleted, so a
/// kept directory is one file that `serve` opens without replaying anything.
async fn close(embedded: Arc<Embedded>) {
    if !embedded.close(CLOSE_TIMEOUT).await {
        tracing::warn!(
            "the database was still in use {} s after the demo; its log is replayed when next opened",
            CLOSE_TIMEOUT.as_secs()
        );
    }
}
