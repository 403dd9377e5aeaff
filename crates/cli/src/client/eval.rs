//! `switchboard eval DATASET`: every case of an evaluation dataset run through the engine on this
//! machine, in scratch profiles (nothing is sent, committed or called outside them: see
//! `switchboard_embedded::eval`), against an agent from a running server (`--agent ID`) or from
//! a tenant bundle (`--bundle FILE`), with the agent's own model, another (`--model REF`), or the
//! scripted test double (`--scripted-model FILE`). Prints a line per case, writes a JUnit report
//! on request, and fails (exit 1) when a case fails, so that a prompt change can be gated in CI.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use switchboard_domain::{Agent, AgentId, ModelRef, Skill, Tenant, Tool};
use switchboard_embedded::ScriptedModel;
use switchboard_embedded::eval::{self, CaseResult, Dataset, Setup};
use switchboard_engine::{Bundle, ConfigRecord, Model, SystemClock};

use super::api::{Api, read_record, tenant};
use super::output::print_value;
use crate::shared::Remote;
use crate::shared::remote::Format;

/// Arguments of `switchboard eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The dataset: JSON or YAML (see docs/running.md, "See what the model saw, replay it, evaluate a change")
    #[arg(required_unless_present = "from_executions")]
    pub dataset: Option<PathBuf>,
    /// Instead of running a dataset, print one built from the tenant's recent executions on the
    /// server: each one's message as a case, expecting what it did (its hand-off or not, its first
    /// tool call)
    #[arg(long, conflicts_with_all = ["bundle", "junit", "scripted_model", "model"])]
    pub from_executions: bool,
    /// With --from-executions: only executions of this status (`handed_off`, `success`, …)
    #[arg(long, requires = "from_executions")]
    pub status: Option<String>,
    /// With --from-executions: only executions of the last N days
    #[arg(long, default_value_t = 7, requires = "from_executions", value_parser = clap::value_parser!(u32).range(1..=400))]
    pub days: u32,
    /// With --from-executions: at most this many cases, newest first
    #[arg(long, default_value_t = 50, requires = "from_executions", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// The agent the cases talk to (default: the dataset's `agent`, else the bundle's first)
    #[arg(long)]
    pub agent: Option<String>,
    /// Take the tenant's agents, tools and skills from this bundle instead of a running server
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// Answer with this model instead of the agent's own (`provider:model` or an alias)
    #[arg(long, value_name = "REF", conflicts_with = "scripted_model")]
    pub model: Option<String>,
    /// Answer with the scripted test double from this file (not an AI)
    #[arg(long, value_name = "FILE")]
    pub scripted_model: Option<PathBuf>,
    /// The model providers' settings (as `serve --model-config`)
    #[arg(long, value_name = "FILE", env = "SWITCHBOARD_MODEL_CONFIG")]
    pub model_config: Option<PathBuf>,
    /// Cases run at once
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
    /// Also write the results as JUnit XML to this file
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// `switchboard eval`: see the module docs.
pub async fn run(args: EvalArgs) -> anyhow::Result<()> {
    if args.from_executions {
        return from_executions(&args).await;
    }
    let Some(path) = args.dataset.as_deref() else { bail!("a DATASET file is needed (or --from-executions)") };
    let dataset = read_dataset(path)?;
    let (tenant, agents, tools, skills) = match &args.bundle {
        Some(path) => from_bundle(path)?,
        None => from_server(&args.remote).await?,
    };
    let chosen = match args.agent.as_deref() {
        Some(raw) => Some(raw.parse::<AgentId>().map_err(|_| anyhow::anyhow!("--agent {raw}: not an agent id"))?),
        None => dataset.agent,
    };
    let agent = match chosen {
        Some(id) => agents.iter().find(|a| a.agent_id == id).with_context(|| format!("no agent {id} in the tenant"))?,
        None => agents.first().context("the tenant has no agent to evaluate")?,
    };
    let mut agent = agent.clone();
    if let Some(model) = &args.model {
        ModelRef::parse(model).map_err(|why| anyhow::anyhow!("--model {model}: {why}"))?;
        model.clone_into(&mut agent.model);
    }
    let model: Arc<dyn Model> = match &args.scripted_model {
        Some(path) => Arc::new(ScriptedModel::from_file(path).context("--scripted-model")?),
        None => Arc::new(crate::server::models::providers(args.model_config.as_deref())?.0),
    };
    let mut records: Vec<ConfigRecord> = tools.into_iter().map(ConfigRecord::Tool).collect();
    records.extend(skills.into_iter().map(ConfigRecord::Skill));
    records.extend(agents.into_iter().filter(|a| a.agent_id != agent.agent_id).map(ConfigRecord::Agent));
    let id = agent.agent_id;
    records.push(ConfigRecord::Agent(agent));
    let setup = Setup { tenant, records, agent: id, model, parallel: usize::from(args.parallel) };
    let results = eval::run(&dataset, &setup).await.map_err(anyhow::Error::msg)?;
    let suite = path.file_stem().and_then(|s| s.to_str()).unwrap_or("eval").to_owned();
    if let Some(path) = &args.junit {
        std::fs::write(path, eval::junit(&suite, &results)).with_context(|| format!("--junit {}", path.display()))?;
    }
    let failed = results.iter().filter(|r| !r.passed).count();
    match args.remote.format() {
        Format::Table | Format::Wide => println!("{}", table(&results)),
        format => {
            print_value(&json!({ "passed": results.len() - failed, "failed": failed, "cases": results }), format)?
        }
    }
    if failed > 0 {
        bail!("{failed} of {} cases failed", results.len());
    }
    Ok(())
}

/// The dataset at `path`, every fault named by its pointer.
fn read_dataset(path: &Path) -> anyhow::Result<Dataset> {
    let what = || format!("dataset {}", path.display());
    let value = read_record(path).with_context(what)?;
    let dataset: Dataset = switchboard_domain::input::read_value(value, "").map_err(|errors| {
        let lines: Vec<String> = errors.0.iter().map(|e| format!("{}: {}", e.pointer, e.detail)).collect();
        anyhow::anyhow!("{}: {}", what(), lines.join("; "))
    })?;
    let faults = eval::check(&dataset);
    if !faults.is_empty() {
        let lines: Vec<String> = faults.iter().map(|(at, why)| format!("{at}: {why}")).collect();
        bail!("{}: {}", what(), lines.join("; "));
    }
    Ok(dataset)
}

pub(super) type Config = (Tenant, Vec<Agent>, Vec<Tool>, Vec<Skill>);

fn from_bundle(path: &Path) -> anyhow::Result<Config> {
    let text = read_record(path).with_context(|| format!("--bundle {}", path.display()))?.to_string();
    let bundle = Bundle::parse(&text, &SystemClock).map_err(|errors| {
        let lines: Vec<String> = errors.0.iter().map(|e| format!("{}: {}", e.pointer, e.detail)).collect();
        anyhow::anyhow!("--bundle {}: {}", path.display(), lines.join("; "))
    })?;
    let tenant = Tenant {
        tenant_id: bundle.tenant_id.clone(),
        name: bundle.name.clone(),
        status: switchboard_domain::TenantStatus::Active,
        created_at: chrono::Utc::now(),
        limits: bundle.limits.clone().unwrap_or_default(),
        recording: switchboard_domain::Recording::Off,
        calendars: Default::default(),
        time_zone: None,
    };
    Ok((tenant, bundle.agents, bundle.tools, bundle.skills))
}

async fn from_server(remote: &Remote) -> anyhow::Result<Config> {
    let api = Api::new(remote).await?;
    tenant_config(&api, tenant(remote)?).await
}

/// Tenant `t`'s record and its agents, tools and skills as they are now, read over the API.
pub(super) async fn tenant_config(api: &Api, t: &str) -> anyhow::Result<Config> {
    let (record, _) = api.call(reqwest::Method::GET, &format!("/tenants/{t}"), None, None).await?;
    let tenant: Tenant = serde_json::from_value(record).context("the tenant's record")?;
    let list = async |kind: &str| -> anyhow::Result<Vec<Value>> {
        api.all_pages(&format!("/tenants/{t}/{kind}?limit=100")).await
    };
    let read = |kind: &str, items: Vec<Value>| -> anyhow::Result<Vec<Value>> {
        // System tools are listed beside the tenant's own; only the tenant's are records.
        Ok(items.into_iter().filter(|v| kind != "tools" || v.get("toolId").is_some()).collect())
    };
    let agents = read("agents", list("agents").await?)?;
    let tools = read("tools", list("tools").await?)?;
    let skills = read("skills", list("skills").await?)?;
    let agents: Vec<Agent> =
        agents.into_iter().map(serde_json::from_value).collect::<Result<_, _>>().context("agents")?;
    let tools: Vec<Tool> = tools.into_iter().map(serde_json::from_value).collect::<Result<_, _>>().context("tools")?;
    let skills: Vec<Skill> =
        skills.into_iter().map(serde_json::from_value).collect::<Result<_, _>>().context("skills")?;
    Ok((tenant, agents, tools, skills))
}

/// `--from-executions`: a dataset from the tenant's recent executions (newest sessions first),
/// printed as JSON (or YAML with `-o yaml`), ready to edit and run.
async fn from_executions(args: &EvalArgs) -> anyhow::Result<()> {
    let remote = &args.remote;
    if let Some(status) = &args.status
        && switchboard_domain::ExecutionStatus::parse(status).is_none()
    {
        bail!("--status {status}: not an execution status (success, handed_off, ended, failed, …)");
    }
    let api = Api::new(remote).await?;
    let t = tenant(remote)?;
    let since = chrono::Utc::now() - chrono::Duration::days(i64::from(args.days));
    let agent = match &args.agent {
        Some(raw) => Some(raw.parse::<AgentId>().map_err(|_| anyhow::anyhow!("--agent {raw}: not an agent id"))?),
        None => None,
    };
    let query = agent.map_or(String::new(), |a| format!("&agentId={a}"));
    let sessions = api.all_pages(&format!("/tenants/{t}/sessions?limit=100{query}")).await?;
    let mut cases = Vec::new();
    'sessions: for session in &sessions {
        let Some(id) = session["sessionId"].as_str() else { continue };
        let records = api.all_pages(&format!("/tenants/{t}/sessions/{id}/executions?limit=100")).await?;
        for r in records.iter().rev() {
            let created = r["createdAt"].as_str().and_then(|c| c.parse::<chrono::DateTime<chrono::Utc>>().ok());
            let fits = created.is_some_and(|c| c >= since)
                && args.status.as_deref().is_none_or(|s| r["status"] == s)
                && r["modelCalls"].as_array().is_some_and(|c| !c.is_empty());
            // A redacted record's text is not words to send again.
            let Some(text) = r["input"]["text"].as_str().filter(|_| fits) else { continue };
            let history = history_of(&api, t, r).await?;
            cases.push(case_of(session, r, text, history));
            if cases.len() >= args.limit as usize {
                break 'sessions;
            }
        }
    }
    let mut dataset = json!({ "cases": cases });
    if let Some(a) = agent {
        dataset["agent"] = json!(a);
    }
    let format = match remote.format() {
        Format::Yaml => Format::Yaml,
        _ => Format::Json,
    };
    print_value(&dataset, format)
}

/// The conversation a recorded execution started from: the text of what its first model call
/// was sent before the customer's message, oldest first (tool calls and results left out, as a
/// handoff passes a conversation on). None when its content is not kept, or is redacted.
async fn history_of(api: &Api, t: &str, r: &Value) -> anyhow::Result<Vec<Value>> {
    let Some(id) = r["executionId"].as_str() else { return Ok(vec![]) };
    let (calls, _) =
        api.call(reqwest::Method::GET, &format!("/tenants/{t}/executions/{id}/model-calls"), None, None).await?;
    let own = calls["calls"].as_array().into_iter().flatten().find(|c| c.get("subAgentCall").is_none());
    let Some(messages) = own.and_then(|c| c["request"]["messages"].as_array()) else { return Ok(vec![]) };
    let mut history: Vec<Value> = messages
        .iter()
        .filter_map(|part| {
            let m = &part["content"];
            let text: Vec<&str> = m["content"]
                .as_array()?
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect();
            (!text.is_empty()).then(|| json!({ "role": m["role"], "text": text.join("\n") }))
        })
        .collect();
    // The last is the message the case sends again.
    history.pop();
    Ok(history)
}

/// A case from one recorded execution: the conversation it started from, its message, expecting
/// its hand-off (or none) and its first tool call with the same arguments.
fn case_of(session: &Value, r: &Value, text: &str, history: Vec<Value>) -> Value {
    let actions = r["actions"].as_array().cloned().unwrap_or_default();
    let handed_off =
        actions.iter().any(|a| matches!(a["type"].as_str(), Some("handoff_to_human" | "handoff_to_agent")));
    let mut expect = json!({ "handoff": handed_off });
    if let Some(call) = r["toolCalls"].as_array().and_then(|c| c.first()) {
        expect["toolCalled"] = json!({ "name": call["name"], "arguments": call["input"] });
    }
    let mut case = json!({
        "name": format!("{} · execution {}", session["conversationId"].as_str().unwrap_or("?"), r["executionId"].as_str().unwrap_or("?")),
        "messages": [text],
        "expect": expect,
    });
    if !history.is_empty() {
        case["history"] = Value::Array(history);
    }
    case
}

/// A line per case, then the count.
fn table(results: &[CaseResult]) -> String {
    let mut out = Vec::with_capacity(results.len() + 1);
    for r in results {
        let tools: Vec<&str> = r.tool_calls.iter().filter_map(|c| c["name"].as_str()).collect();
        let calls =
            if r.model_calls == 1 { "1 model call".to_owned() } else { format!("{} model calls", r.model_calls) };
        let about = format!("{calls}, tools [{}], {} tokens", tools.join(", "), r.tokens);
        if r.passed {
            out.push(format!("✓ {}  ({about})", r.name));
        } else {
            out.push(format!("✗ {}  ({about})", r.name));
            out.extend(r.failures.iter().map(|f| format!("    {f}")));
        }
    }
    let passed = results.iter().filter(|r| r.passed).count();
    out.push(format!("{passed} of {} cases passed", results.len()));
    out.join("\n")
}
