//! Which model answers `serve`'s agents: the scripted test double, or the providers from a
//! settings file or the environment, and a check at start that each loaded agent's model is one
//! of them. It does not call a model.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use switchboard_domain::{ModelRef, PriceTable};
use switchboard_embedded::{Bundle, ScriptedModel};
use switchboard_engine::Model;
use switchboard_models::{DefaultModel, ModelSettings, Models};

use super::ServeArgs;

/// The model every agent calls: the scripted test double when `--scripted-model` is given,
/// otherwise the providers from `--model-config` or the environment (returned too, to check
/// agents' references at start), and the price table (the shipped one with the file's prices).
pub fn models(args: &ServeArgs) -> anyhow::Result<(Arc<dyn Model>, Option<Models>, PriceTable)> {
    if let Some(default) = &args.default_model
        && let Err(why) = ModelRef::parse(default)
    {
        bail!("--default-model {default}: {why}");
    }
    let with_default =
        |model: Arc<dyn Model>| -> Arc<dyn Model> { Arc::new(DefaultModel::new(model, args.default_model.clone())) };
    if let Some(script) = &args.scripted_model {
        let scripted = ScriptedModel::from_file(script).with_context(|| "--scripted-model".to_string())?;
        return Ok((with_default(Arc::new(scripted)), None, PriceTable::builtin()));
    }
    let (models, prices) = providers(args.model_config.as_deref())?;
    Ok((with_default(Arc::new(models.clone())), Some(models), prices))
}

/// The model providers from `model_config` (`--model-config`) or else the environment, Bedrock
/// among them when built with AWS, and the price table with the file's prices.
pub fn providers(model_config: Option<&Path>) -> anyhow::Result<(Models, PriceTable)> {
    let env = |name: &str| std::env::var(name).ok();
    let settings = match model_config {
        Some(path) => ModelSettings::from_file(path, &env).context("--model-config")?,
        None => ModelSettings::from_env(&env)?,
    };
    let models = Models::from_settings(&settings).map_err(anyhow::Error::msg)?;
    #[cfg(feature = "aws")]
    let models =
        models.with_provider(switchboard_domain::Provider::Bedrock, Arc::new(super::bedrock::LazyBedrock::default()));
    Ok((models, settings.prices))
}

/// Refuses a bundle with an agent whose model (or, naming none, the default model) no provider
/// answers: said at start, not at the first message.
pub fn check_agents(
    bundle: &Bundle,
    models: &Models,
    default_model: Option<&String>,
    path: &Path,
) -> anyhow::Result<()> {
    for agent in &bundle.agents {
        let model = match (agent.model.as_str(), default_model) {
            ("", Some(default)) => default.as_str(),
            ("", None) => bail!(
                "--tenant {}: agent {} ({}) names no model and no default model is set (--default-model)",
                path.display(),
                agent.agent_id,
                agent.name
            ),
            (model, _) => model,
        };
        models.check(model).map_err(|why| {
            anyhow::anyhow!("--tenant {}: agent {} ({}): {why}", path.display(), agent.agent_id, agent.name)
        })?;
    }
    Ok(())
}
