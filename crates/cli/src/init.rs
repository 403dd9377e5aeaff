//! `switchboard init`: a starting tenant and model configuration in a directory, ready for
//! `serve` — one assistant agent on a chosen provider (its model named once, as the alias
//! `assistant` in `models.yaml`), answering every message of the tenant. It writes files only:
//! no server, no network.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Provider {
    /// A local Ollama server (no key).
    Ollama,
    /// OpenAI, or any OpenAI-compatible endpoint (`OPENAI_API_KEY`, `OPENAI_BASE_URL`).
    Openai,
    /// Anthropic (`ANTHROPIC_API_KEY`).
    Anthropic,
    /// Amazon Bedrock (AWS credentials and model access in the region).
    Bedrock,
}

impl Provider {
    /// The model the assistant starts on, and the variable that must be set to call it.
    fn model_and_key(self) -> (&'static str, Option<&'static str>) {
        match self {
            Self::Ollama => ("ollama:llama3.1", None),
            Self::Openai => ("openai:gpt-4o-mini", Some("OPENAI_API_KEY")),
            Self::Anthropic => ("anthropic:claude-3-5-haiku-latest", Some("ANTHROPIC_API_KEY")),
            Self::Bedrock => ("bedrock:anthropic.claude-3-haiku-20240307-v1:0", None),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Which provider answers the assistant.
    #[arg(long, value_enum, default_value = "ollama")]
    provider: Provider,
    /// Where to write `tenant.json` and `models.yaml` (made if missing; existing files are
    /// never overwritten).
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// The tenant's id.
    #[arg(long, value_name = "ID", default_value = "my-tenant")]
    tenant: String,
}

/// The agent's id in the tenant written (any ULID would do; a fixed one keeps re-runs alike).
const ASSISTANT: &str = "01JD0000ASS1STANT000000001";

pub fn run(args: &InitArgs) -> anyhow::Result<()> {
    args.tenant
        .parse::<switchboard_domain::TenantId>()
        .map_err(|why| anyhow::anyhow!("--tenant {}: {why}", args.tenant))?;
    let (model, key) = args.provider.model_and_key();
    let tenant_path = args.dir.join("tenant.json");
    let models_path = args.dir.join("models.yaml");
    for path in [&tenant_path, &models_path] {
        if path.exists() {
            bail!("{} exists already; init writes new files only (remove it, or choose --dir)", path.display());
        }
    }
    std::fs::create_dir_all(&args.dir).with_context(|| format!("--dir {}", args.dir.display()))?;
    write(&tenant_path, &format!("{:#}\n", tenant(&args.tenant)))?;
    write(&models_path, &models(model, key))?;
    println!("wrote {} and {}", tenant_path.display(), models_path.display());
    if let Some(key) = key.filter(|k| std::env::var_os(k).is_none()) {
        println!("set {key} before starting the server (it is not set here)");
    }
    println!(
        "start it:  switchboard serve --tenant {} --model-config {}",
        tenant_path.display(),
        models_path.display()
    );
    println!("then send a message: README, \"Quick start\", or docs/running.md");
    Ok(())
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// One assistant on the model `assistant` (resolved by `models.yaml`), answering everything.
fn tenant(id: &str) -> serde_json::Value {
    json!({
        "tenantId": id,
        "name": id,
        "agents": [{
            "agentId": ASSISTANT,
            "name": "Assistant",
            "description": "Answers every customer message; hands the conversation to a person when asked.",
            "systemPrompt": "You are a helpful, brief customer support assistant. Answer with send_message. If the customer asks for a person, hand the conversation to a human.",
            "model": "assistant",
            "tools": ["send_message", "set_context", "get_context", "handoff_to_human", "end_conversation"]
        }],
        "triggers": [{
            "triggerId": "01JD0000ASS1STANTTR1GGER01",
            "name": "every message",
            "agentId": ASSISTANT,
            "eventType": "message.new",
            "priority": 10,
            "conditions": {}
        }]
    })
}

fn models(model: &str, key: Option<&str>) -> String {
    let key_line = key.map_or_else(String::new, |k| format!("# The key is read from {k} (never written here).\n"));
    format!(
        "# Model configuration for `switchboard serve --model-config` (docs/models.md).\n\
         {key_line}\
         aliases:\n  assistant: \"{model}\"   # the tenant's agents name `assistant`: change the model here\n"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn each_provider_writes_a_tenant_the_bundle_reader_takes_and_models_the_settings_reader_takes() {
        for provider in [Provider::Ollama, Provider::Openai, Provider::Anthropic, Provider::Bedrock] {
            let dir = tempfile::tempdir().unwrap();
            let args = InitArgs { provider, dir: dir.path().join("new"), tenant: "acme".into() };
            run(&args).unwrap();
            let text = std::fs::read_to_string(args.dir.join("tenant.json")).unwrap();
            let bundle = switchboard_embedded::Bundle::parse(&text, &switchboard_engine::SystemClock).unwrap();
            assert_eq!((bundle.agents.len(), bundle.triggers.len()), (1, 1));
            let env = |name: &str| (name.ends_with("_API_KEY")).then(|| "k".to_owned());
            let settings = switchboard_models::ModelSettings::from_file(&args.dir.join("models.yaml"), &env).unwrap();
            assert_eq!(settings.aliases["assistant"], provider.model_and_key().0);
            // a second run leaves what the first wrote
            let again = run(&args).unwrap_err().to_string();
            assert!(again.contains("exists already"), "{again}");
        }
    }
}
