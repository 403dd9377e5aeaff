//! `switchboard demo`: one example tenant from `examples/<name>/`, run offline on a fresh
//! temporary data directory with the scripted model (a deterministic test double, not an AI).
//! Each example is a bundle (`tenant.json`), the model's rules (`script.json`) and the inbound
//! messages in rounds (`conversation.json`), embedded in the binary so it runs from anywhere.
//! `support` (the default) also runs the example order system, a webhook receiver that verifies
//! signatures; the others show one multi-agent pattern each (steps, skills, supervisor, router).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde::Deserialize;
use serde_json::json;
use switchboard_domain::{
    Action, Agent, AgentId, AgentType, ExecutionRecord, ExecutionStatus, InboundEvent, OutboundEvent, Session, SkillId,
    TenantId, ToolHandler,
};
use switchboard_embedded::{Bundle, Embedded, EmbeddedOptions, ScriptedModel};
use switchboard_engine::execute::describe;
use switchboard_engine::{
    ConversationLog, ExecutionLog, RouteOutcome, SecretError, Secrets, SessionStore, SystemClock,
};
use switchboard_webhooks::{HttpWebhookCaller, WebhookPolicy};

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
            tenant: include_str!(concat!("../../../examples/", $name, "/tenant.json")),
            script: include_str!(concat!("../../../examples/", $name, "/script.json")),
            conversation: include_str!(concat!("../../../examples/", $name, "/conversation.json")),
            secrets: $secrets,
        }
    };
}

impl ExampleName {
    fn files(self) -> Example {
        match self {
            Self::Support => example!("support", Some(include_str!("../../../examples/support/secrets.json"))),
            Self::Steps => example!("steps", None),
            Self::Skills => example!("skills", None),
            Self::Supervisor => example!("supervisor", None),
            Self::Router => example!("router", None),
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

/// Names to print instead of ids.
struct Names {
    agents: BTreeMap<AgentId, Agent>,
    skills: BTreeMap<SkillId, String>,
}

impl Names {
    fn agent(&self, id: &AgentId) -> String {
        self.agents.get(id).map_or_else(|| id.to_string(), |a| a.name.clone())
    }
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let example = args.example.files();
    let dir = format!("examples/{}", example.name);
    let temp = tempfile::tempdir().context("creating a temporary data directory")?;
    let data_dir = args.keep_data.clone().unwrap_or_else(|| temp.path().to_owned());
    let model = Arc::new(ScriptedModel::from_json(example.script).with_context(|| format!("{dir}/script.json"))?);
    let conversation: Conversation =
        serde_json::from_str(example.conversation).with_context(|| format!("{dir}/conversation.json"))?;
    let mut bundle =
        Bundle::parse(example.tenant, &SystemClock).map_err(|e| anyhow::anyhow!("{dir}/tenant.json: {e}"))?;

    // An example with webhook tools gets the example order system on this machine, so the demo
    // allows webhook calls to loopback, as `serve --allow-private-webhooks` would; signatures are
    // checked all the same.
    let mut options = EmbeddedOptions::default();
    let receiver = match bundle.tools.first() {
        None => None,
        Some(tool) => {
            let ToolHandler::Webhook(handler) = &tool.handler;
            let secrets: serde_json::Value =
                serde_json::from_str(example.secrets.unwrap_or("{}")).with_context(|| format!("{dir}/secrets.json"))?;
            let secret = handler
                .secret_ref
                .as_deref()
                .and_then(|name| secrets[bundle.tenant_id.as_str()][name].as_str())
                .unwrap_or_default()
                .to_owned();
            let receiver = crate::receiver::start("127.0.0.1:0".parse()?, secret).await?;
            let policy = WebhookPolicy { allow_http: true, allow_private: true };
            options.webhooks = Arc::new(
                HttpWebhookCaller::new(policy, Arc::new(ExampleSecrets(secrets)))
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            );
            // Point the webhook tools at the receiver's port.
            for tool in &mut bundle.tools {
                let ToolHandler::Webhook(h) = &mut tool.handler;
                h.url = receiver.url.clone();
            }
            Some(receiver)
        }
    };
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
    println!(
        "Tenant '{}' ({}): {} agent(s), {} trigger(s){}",
        bundle.tenant_id,
        bundle.name,
        bundle.agents.len(),
        bundle.triggers.len(),
        if bundle.skills.is_empty() { String::new() } else { format!(", {} skill(s)", bundle.skills.len()) }
    );
    for agent in &bundle.agents {
        print_agent(agent, &names);
    }
    println!("Model: SCRIPTED TEST DOUBLE (deterministic rules from {dir}/script.json; not an AI)");
    if let Some(r) = &receiver {
        println!("Order system (example webhook receiver, verifies signatures): {}", r.url);
    }
    println!();

    let tenant = bundle.tenant_id.clone();
    let mut n = 0;
    let mut routing = Vec::new();
    for round in &conversation.rounds {
        for m in round {
            n += 1;
            let parsed = InboundEvent::parse(&event(example.name, n, &tenant, m))
                .map_err(|e| anyhow::anyhow!("{dir}/conversation.json, message {n}: {e}"))?;
            let outcome = embedded.ingest(&parsed).await.context("routing a demo event")?;
            routing.push((m.conversation_id.as_str(), m.text.as_str(), outcome));
        }
        embedded.queue.wait_idle().await.context("waiting for the queue")?;
    }
    embedded.shutdown().await;

    let mut published: Vec<OutboundEvent> = Vec::new();
    while let Ok((_, e)) = events.try_recv() {
        published.push(e);
    }
    let mut conversations: Vec<&str> = Vec::new();
    for m in conversation.rounds.iter().flatten() {
        if !conversations.contains(&m.conversation_id.as_str()) {
            conversations.push(&m.conversation_id);
        }
    }
    let mut totals = (0usize, 0usize);
    for conversation in conversations {
        println!("━━ Conversation {conversation}");
        for m in embedded.store.messages(&tenant, conversation, 100).await? {
            let who = match m.sender {
                switchboard_engine::Sender::Customer => "customer",
                switchboard_engine::Sender::Agent => "agent   ",
                switchboard_engine::Sender::Human => "human   ",
            };
            println!("   {who} › {}", m.text);
        }
        for (c, text, outcome) in &routing {
            if *c == conversation && matches!(outcome, RouteOutcome::HumanOwned { .. }) {
                println!(
                    "   (a human operator owns this conversation: \"{text}\" joins their session's transcript, \
                     recorded as a skipped execution; no agent answers it)"
                );
            }
        }
        for session in embedded.store.sessions_for_conversation(&tenant, conversation).await? {
            print_session(&session, &names);
            let page = embedded.store.list_executions(&tenant, session.session_id, None, 100).await?;
            for record in &page.items {
                totals.0 += 1;
                totals.1 += record.tool_calls.len();
                print_execution(record, &names);
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
    if let Some(r) = &receiver {
        println!(
            "Order system: verified {} signed webhook call(s), rejected {}",
            r.tally.verified.load(std::sync::atomic::Ordering::Relaxed),
            r.tally.rejected.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    // Closed before the process exits: the log copied into the database file and deleted, so a
    // kept directory is one file that `serve` opens without replaying anything.
    let close = crate::serve::CLOSE_TIMEOUT;
    if !embedded.close(close).await {
        tracing::warn!(
            "the database was still in use {} s after the demo; its log is replayed when next opened",
            close.as_secs()
        );
    }
    if let Some(keep) = &args.keep_data {
        println!(
            "Data kept in {} — try: switchboard serve --data-dir {} --scripted-model {dir}/script.json",
            keep.display(),
            keep.display()
        );
    }
    Ok(())
}

/// One line per agent: its pattern and what it is made of.
fn print_agent(a: &Agent, names: &Names) {
    let agents = |ids: &[AgentId]| ids.iter().map(|id| names.agent(id)).collect::<Vec<_>>().join(", ");
    let shape = match a.agent_type {
        AgentType::Supervisor => format!("supervisor · sub-agents: {}", agents(&a.sub_agents)),
        AgentType::Router => format!(
            "router · candidates: {} · default: {}",
            agents(&a.sub_agents),
            a.default_agent_id.map_or_else(|| "-".to_owned(), |d| names.agent(&d))
        ),
        _ if !a.steps.is_empty() => {
            let steps: Vec<String> = a
                .steps
                .iter()
                .map(|s| {
                    let mut line = s.step_id.clone();
                    if s.is_initial {
                        line.push_str(" (initial)");
                    }
                    if s.is_final {
                        line.push_str(" (final)");
                    }
                    if !s.transition_tools.is_empty() {
                        line.push_str(&format!(" → {}", s.transition_tools.join(" | ")));
                    }
                    line
                })
                .collect();
            format!("steps: {}", steps.join(" · "))
        }
        _ if !a.skills.is_empty() => {
            let skills: Vec<&str> = a.skills.iter().filter_map(|id| names.skills.get(id).map(String::as_str)).collect();
            format!("skills it may load: {}", skills.join(", "))
        }
        _ => "standard".to_owned(),
    };
    println!("  agent \"{}\" · {shape}", a.name);
}

fn print_session(s: &Session, names: &Names) {
    let mut extra = String::new();
    // A stepped agent's session without `currentStep` is in the initial step.
    if let Some(step) = names.agents.get(&s.agent_id).and_then(|a| a.step(s.current_step.as_deref())) {
        extra.push_str(&format!(" · step {} (\"{}\")", step.step_id, step.name));
    }
    if !s.loaded_skills.is_empty() {
        let loaded: Vec<String> =
            s.loaded_skills.iter().map(|id| names.skills.get(id).cloned().unwrap_or_else(|| id.to_string())).collect();
        extra.push_str(&format!(" · skills loaded: {}", loaded.join(", ")));
    }
    if !s.memory.is_empty() {
        extra.push_str(&format!(" · memory {}", json!(s.memory)));
    }
    println!(
        "   session {} · agent \"{}\" · {:?} · {} turn(s){extra}",
        s.session_id,
        names.agent(&s.agent_id),
        s.status,
        s.turn_count
    );
}

fn print_execution(r: &ExecutionRecord, names: &Names) {
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
        } else if call.name == "choose_agent" {
            print_router_pick(call, names);
        } else if call.is_error {
            let why = call.output["error"].as_str().map_or_else(|| call.output.to_string(), str::to_owned);
            println!("       ✗ {} refused: {why}", call.name);
        } else if call.name.starts_with("transition_to_") {
            println!(
                "       ⇒ moved to step {} (\"{}\")",
                call.output["step"].as_str().unwrap_or("?"),
                call.output["name"].as_str().unwrap_or("?")
            );
        } else if call.name == "load_skill" {
            let asked = call.input["name"].as_str().unwrap_or("?");
            let loaded: Vec<&str> =
                call.output["loaded"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
            match loaded.as_slice() {
                [] => println!("       ⇒ load_skill \"{asked}\": already loaded"),
                [one] => println!("       ⇒ load_skill \"{asked}\" loaded: {one}"),
                _ => println!("       ⇒ load_skill \"{asked}\" loaded: {} (parent first)", loaded.join(", ")),
            }
        }
    }
    for child in &r.children {
        let outcome = match (&child.result, &child.error) {
            (_, Some(e)) => format!("error: {}", e.message),
            (Some(result), None) => format!("result \"{result}\""),
            (None, None) => "no result".to_owned(),
        };
        println!(
            "       ⤷ sub-agent \"{}\" · {:?} · {} iteration(s) · {} tokens · {outcome}",
            names.agent(&child.agent_id),
            child.status,
            child.iterations,
            child.token_usage.total()
        );
    }
    for a in &r.actions {
        match a {
            Action::HandoffToAgent { agent_id, reason, .. } => {
                println!("       → handoff to agent \"{}\": {reason}", names.agent(agent_id));
            }
            _ => println!("       → {}", describe(a)),
        }
    }
    match &r.error {
        // A skip is not a failure: the record says why nothing ran.
        Some(e) if r.status == ExecutionStatus::Skipped => println!("       – skipped: {}", e.message),
        Some(e) => println!("       ! {:?}: {}", e.kind, e.message),
        None => {}
    }
}

/// The router's decision: the agent it chose, or the default it fell back to and why.
fn print_router_pick(call: &switchboard_domain::ToolCallRecord, names: &Names) {
    let target = call.output["agentId"].as_str().and_then(|id| id.parse::<AgentId>().ok());
    let Some(target) = target else {
        println!("       ⇢ router: no agent could take it: {}", call.output);
        return;
    };
    match call.output["fallback"].as_str() {
        None => println!(
            "       ⇢ router picked \"{}\" · reason \"{}\"",
            names.agent(&target),
            call.input["reason"].as_str().unwrap_or("")
        ),
        Some(why) => println!(
            "       ⇢ router pick invalid ({why}) → fallback to the default agent \"{}\"",
            names.agent(&target)
        ),
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
