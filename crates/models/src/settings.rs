//! Which providers are set up, from the conventional environment variables and, optionally, a
//! model configuration file (`--model-config models.yaml`) that adds aliases and overrides.
//!
//! Environment (what each provider's own tools read):
//! - `OPENAI_API_KEY`, `OPENAI_BASE_URL` (default `https://api.openai.com/v1`): the `openai`
//!   provider is set up when either is set (a local compatible server may need no key).
//! - `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` (default `https://api.anthropic.com`).
//! - `OLLAMA_HOST` (default `127.0.0.1:11434`): `ollama` is always set up; it needs no key.
//! - Bedrock: the AWS SDK's own chain (profile, region, `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`).
//!
//! The file never holds a key, only the name of the variable to read it from:
//!
//! ```yaml
//! timeoutSeconds: 60          # one attempt, default 60
//! maxAttempts: 4              # attempts per call, retries included, default 4
//! breakerFailures: 5          # failed calls in a row that open a model's circuit, default 5
//! breakerCooldownSeconds: 30  # how long an open circuit refuses calls, default 30
//! aliases:
//!   fast: openai:gpt-4o-mini
//!   anthropic.claude-3-sonnet: bedrock:anthropic.claude-3-sonnet-20240229-v1:0
//! providers:
//!   openai: { baseUrl: "https://example.openai.azure.com/openai/v1", apiKeyEnv: AZURE_OPENAI_API_KEY }
//!   anthropic: { apiKeyEnv: ANTHROPIC_API_KEY }
//!   ollama: { baseUrl: "http://gpu-box:11434/v1" }
//! prices:                     # added to (or replacing entries of) the shipped price table
//!   version: acme-2026-11     # recorded with every execution; default `<shipped>+local`
//!   models:                   # dollars per million tokens
//!     openai:my-finetune: { input: 0.3, output: 1.2, cacheRead: 0.15, cacheWrite: 0 }
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use switchboard_domain::{ModelRef, Price, PriceTable};

use crate::{ApiKey, BreakerPolicy, Endpoint, RetryPolicy};

pub(crate) const OPENAI_MISSING: &str = "set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server)";
pub(crate) const ANTHROPIC_MISSING: &str = "set ANTHROPIC_API_KEY";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The providers' settings.
#[derive(Debug, Clone, Default)]
pub struct ModelSettings {
    pub openai: Option<Endpoint>,
    pub anthropic: Option<Endpoint>,
    pub ollama: Option<Endpoint>,
    /// Alias → model reference.
    pub aliases: BTreeMap<String, String>,
    pub retry: RetryPolicy,
    pub breaker: BreakerPolicy,
    /// What calls cost: the shipped table, with the file's `prices` over it.
    pub prices: PriceTable,
}

/// A model configuration that cannot be used; says which setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct SettingsError {
    pub setting: String,
    pub message: String,
}

fn error(setting: impl Into<String>, message: impl Into<String>) -> SettingsError {
    SettingsError { setting: setting.into(), message: message.into() }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    timeout_seconds: Option<u64>,
    max_attempts: Option<u32>,
    breaker_failures: Option<u32>,
    breaker_cooldown_seconds: Option<u64>,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
    #[serde(default)]
    providers: Providers,
    prices: Option<PricesFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PricesFile {
    version: Option<String>,
    #[serde(default)]
    models: BTreeMap<String, Price>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Providers {
    openai: Option<ProviderFile>,
    anthropic: Option<ProviderFile>,
    ollama: Option<ProviderFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderFile {
    base_url: Option<String>,
    api_key_env: Option<String>,
}

impl ModelSettings {
    /// Settings from the environment alone; `env` reads one variable (`std::env::var` in a
    /// binary, a map in tests).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        Self::build(File::default(), env, "")
    }

    /// Settings from the file at `path` over the environment.
    pub fn from_file(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let where_ = path.display().to_string();
        let file = File::read(path).map_err(|e| error(&where_, e))?;
        Self::build(file, env, &format!("{where_}: "))
    }

    fn build(file: File, env: &dyn Fn(&str) -> Option<String>, at: &str) -> Result<Self, SettingsError> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let (timeout, retry, breaker) = file.policies(at)?;
        for (alias, target) in &file.aliases {
            if let Err(why) = ModelRef::parse(target) {
                return Err(error(format!("{at}aliases/{alias}"), why));
            }
            if file.aliases.contains_key(target) {
                return Err(error(format!("{at}aliases/{alias}"), "must name a model, not another alias"));
            }
        }
        let mut prices = PriceTable::builtin();
        if let Some(extra) = file.prices {
            let version = extra.version.unwrap_or_else(|| format!("{}+local", prices.version));
            prices.merge(version, extra.models).map_err(|e| error(format!("{at}prices"), e))?;
        }
        let (openai, anthropic, ollama) = file.providers.endpoints(&env, timeout, at)?;
        Ok(ModelSettings { openai, anthropic, ollama, aliases: file.aliases, retry, breaker, prices })
    }
}

/// The most a model configuration file may hold. Aliases, endpoints and a price table are a few
/// KiB; a file past this is not one, and is not read whole.
const MAX_FILE_BYTES: usize = 1024 * 1024;

/// YAML as a model configuration is read: YAML 1.2's booleans (`no` is a string), one document,
/// and budgets far above any real file that stop a crafted one (deep nesting, an alias bomb)
/// before it costs memory. A mistake names its line and column.
#[cfg(feature = "yaml")]
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_documents: 1,
            max_depth: 16,
            max_nodes: 20_000,
            max_events: 50_000,
            max_anchors: 100,
            max_aliases: 100,
            max_total_scalar_bytes: MAX_FILE_BYTES,
        },
    }
}

/// A model configuration file's text, YAML (JSON included, YAML being its superset).
#[cfg(feature = "yaml")]
fn parse(text: &str) -> Result<File, String> {
    serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|e| e.to_string())
}

/// A model configuration file's text, JSON only: this build has no YAML parser (the Lambda
/// functions leave it out to stay under 5 MB).
#[cfg(not(feature = "yaml"))]
fn parse(text: &str) -> Result<File, String> {
    serde_json::from_str(text).map_err(|e| {
        format!("{e} (this build reads the model configuration as JSON; convert a YAML file, e.g. `yq -o json`)")
    })
}

impl File {
    fn read(path: &Path) -> Result<File, String> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE_BYTES as u64 + 1).read_to_string(&mut text))
            .map_err(|e| e.to_string())?;
        if text.len() > MAX_FILE_BYTES {
            return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
        }
        parse(&text)
    }

    /// The request timeout, the retry policy and the circuit breakers' policy, each setting
    /// within its range.
    fn policies(&self, at: &str) -> Result<(Duration, RetryPolicy, BreakerPolicy), SettingsError> {
        let timeout = match self.timeout_seconds {
            None => DEFAULT_TIMEOUT,
            Some(s @ 1..=900) => Duration::from_secs(s),
            Some(_) => return Err(error(format!("{at}timeoutSeconds"), "must be between 1 and 900")),
        };
        let mut retry = RetryPolicy::default();
        match self.max_attempts {
            None => {}
            Some(n @ 1..=10) => retry.max_attempts = n,
            Some(_) => return Err(error(format!("{at}maxAttempts"), "must be between 1 and 10")),
        }
        let mut breaker = BreakerPolicy::default();
        match self.breaker_failures {
            None => {}
            Some(n @ 1..=1000) => breaker.failures = n,
            Some(_) => return Err(error(format!("{at}breakerFailures"), "must be between 1 and 1000")),
        }
        match self.breaker_cooldown_seconds {
            None => {}
            Some(s @ 1..=3600) => breaker.cooldown = Duration::from_secs(s),
            Some(_) => return Err(error(format!("{at}breakerCooldownSeconds"), "must be between 1 and 3600")),
        }
        Ok((timeout, retry, breaker))
    }
}

/// The OpenAI-compatible, Anthropic and Ollama endpoints.
type Endpoints = (Option<Endpoint>, Option<Endpoint>, Option<Endpoint>);

impl Providers {
    /// Each provider's endpoint from the file's settings over the conventional variables: an
    /// OpenAI-compatible server when a key or a URL is given, Anthropic when a key is, Ollama
    /// always (on its default address unless told otherwise).
    fn endpoints(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        timeout: Duration,
        at: &str,
    ) -> Result<Endpoints, SettingsError> {
        let key = |p: &Option<ProviderFile>, default_var: &str, name: &str| -> Result<Option<ApiKey>, SettingsError> {
            match p.as_ref().and_then(|p| p.api_key_env.as_deref()) {
                Some(var) => env(var).map(ApiKey::new).map(Some).ok_or_else(|| {
                    error(format!("{at}providers/{name}/apiKeyEnv"), format!("the variable {var} is not set"))
                }),
                None => Ok(env(default_var).map(ApiKey::new)),
            }
        };
        let base = |p: &Option<ProviderFile>, var: &str, name: &str| -> Result<Option<String>, SettingsError> {
            let (value, setting) = match p.as_ref().and_then(|p| p.base_url.clone()) {
                Some(url) => (Some(url), format!("{at}providers/{name}/baseUrl")),
                None => (env(var), var.to_owned()),
            };
            value.map(|v| check_url(&v).map_err(|m| error(setting, m))).transpose()
        };

        let openai_key = key(&self.openai, "OPENAI_API_KEY", "openai")?;
        let openai_base = base(&self.openai, "OPENAI_BASE_URL", "openai")?;
        let openai = (openai_key.is_some() || openai_base.is_some()).then(|| Endpoint {
            base_url: openai_base.unwrap_or_else(|| "https://api.openai.com/v1".into()),
            api_key: openai_key,
            timeout,
        });
        let anthropic_key = key(&self.anthropic, "ANTHROPIC_API_KEY", "anthropic")?;
        let anthropic_base = base(&self.anthropic, "ANTHROPIC_BASE_URL", "anthropic")?;
        let anthropic = anthropic_key.map(|k| Endpoint {
            base_url: anthropic_base.unwrap_or_else(|| "https://api.anthropic.com".into()),
            api_key: Some(k),
            timeout,
        });
        let ollama_base = match self.ollama.as_ref().and_then(|p| p.base_url.clone()) {
            Some(url) => check_url(&url).map_err(|m| error(format!("{at}providers/ollama/baseUrl"), m))?,
            None => {
                let host = env("OLLAMA_HOST").unwrap_or_else(|| "127.0.0.1:11434".into());
                let host = if host.contains("://") { host } else { format!("http://{host}") };
                format!("{}/v1", check_url(&host).map_err(|m| error("OLLAMA_HOST", m))?)
            }
        };
        let ollama_key = self.ollama.as_ref().and_then(|p| p.api_key_env.as_deref()).and_then(env).map(ApiKey::new);
        let ollama = Some(Endpoint { base_url: ollama_base, api_key: ollama_key, timeout });
        Ok((openai, anthropic, ollama))
    }
}

/// An http(s) URL without a trailing slash.
fn check_url(value: &str) -> Result<String, String> {
    let url = url::Url::parse(value.trim()).map_err(|e| format!("`{value}` is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("`{value}` must be an http:// or https:// URL"));
    }
    Ok(value.trim().trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn conventional_variables_set_up_the_providers() {
        let s = ModelSettings::from_env(&env(&[])).unwrap();
        assert!(s.openai.is_none() && s.anthropic.is_none());
        assert_eq!(s.ollama.unwrap().base_url, "http://127.0.0.1:11434/v1");

        let s = ModelSettings::from_env(&env(&[
            ("OPENAI_API_KEY", "sk-1"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
            ("OLLAMA_HOST", "0.0.0.0:11434"),
        ]))
        .unwrap();
        let openai = s.openai.unwrap();
        assert_eq!((openai.base_url.as_str(), openai.api_key.unwrap().expose()), ("https://api.openai.com/v1", "sk-1"));
        assert_eq!(s.anthropic.unwrap().base_url, "http://127.0.0.1:9");
        assert_eq!(s.ollama.unwrap().base_url, "http://0.0.0.0:11434/v1");

        let local = ModelSettings::from_env(&env(&[("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")])).unwrap();
        assert!(local.openai.unwrap().api_key.is_none(), "a local server needs no key");
    }

    #[test]
    fn bad_settings_name_the_variable_or_the_field() {
        let e = ModelSettings::from_env(&env(&[("OPENAI_BASE_URL", "api.openai.com")])).unwrap_err();
        assert_eq!(e.setting, "OPENAI_BASE_URL");
        let e = ModelSettings::from_env(&env(&[("OLLAMA_HOST", "ftp://x")])).unwrap_err();
        assert_eq!(e.setting, "OLLAMA_HOST");
    }

    /// The repository's root (the example files and the docs are read from it).
    #[cfg(feature = "yaml")]
    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn the_documented_example_and_the_example_files_load_as_written() {
        // docs/models.md's complete example, with the variables it names
        let doc = std::fs::read_to_string(root().join("docs/models.md")).unwrap();
        let example = doc.split("```yaml\n").nth(1).and_then(|rest| rest.split("```").next()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("models.yaml");
        std::fs::write(&path, example).unwrap();
        let keys = env(&[("AZURE_OPENAI_API_KEY", "k"), ("ANTHROPIC_API_KEY", "k")]);
        let s = ModelSettings::from_file(&path, &keys).unwrap_or_else(|e| panic!("docs/models.md: {e}"));
        assert_eq!(s.aliases["fast"], "openai:gpt-4o-mini");
        // each examples/models/<provider>.yaml sends both of the example tenants' models to its provider
        let models = ["anthropic.claude-3-haiku-20240307-v1:0", "anthropic.claude-3-sonnet-20240229-v1:0"];
        for provider in ["ollama", "openai", "anthropic"] {
            let file = root().join(format!("examples/models/{provider}.yaml"));
            let keys = env(&[("OPENAI_API_KEY", "k"), ("ANTHROPIC_API_KEY", "k")]);
            let s = ModelSettings::from_file(&file, &keys).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for model in models {
                let target = s.aliases.get(model).unwrap_or_else(|| panic!("{provider}.yaml: no alias for {model}"));
                assert!(target.starts_with(&format!("{provider}:")), "{provider}.yaml: {model} → {target}");
            }
        }
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn the_file_adds_aliases_and_reads_keys_from_the_variables_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("models.yaml");
        std::fs::write(
            &path,
            "timeoutSeconds: 5\nmaxAttempts: 2\nbreakerFailures: 2\nbreakerCooldownSeconds: 9\naliases:\n  fast: openai:gpt-4o-mini\n\
             providers:\n  openai: { baseUrl: 'http://127.0.0.1:1/v1', apiKeyEnv: MY_KEY }\n",
        )
        .unwrap();
        let s = ModelSettings::from_file(&path, &env(&[("MY_KEY", "k")])).unwrap();
        let openai = s.openai.unwrap();
        assert_eq!((openai.timeout, openai.api_key.unwrap().expose()), (Duration::from_secs(5), "k"));
        assert_eq!(s.retry.max_attempts, 2);
        assert_eq!(s.breaker, BreakerPolicy { failures: 2, cooldown: Duration::from_secs(9) });
        assert_eq!(s.aliases["fast"], "openai:gpt-4o-mini");

        let e = ModelSettings::from_file(&path, &env(&[])).unwrap_err();
        assert!(e.setting.ends_with("providers/openai/apiKeyEnv") && e.message.contains("MY_KEY"), "{e}");

        std::fs::write(&path, "aliases:\n  fast: gemini:pro\n").unwrap();
        let e = ModelSettings::from_file(&path, &env(&[])).unwrap_err();
        assert!(e.setting.ends_with("aliases/fast") && e.message.contains("unknown provider"), "{e}");
        std::fs::write(&path, "aliases:\n  a: b\n  b: openai:x\n").unwrap();
        assert!(ModelSettings::from_file(&path, &env(&[])).unwrap_err().message.contains("another alias"));
        std::fs::write(&path, "prices:\n  models:\n    openai:tuned: { input: 0.3, output: 1.2 }\n").unwrap();
        let s = ModelSettings::from_file(&path, &env(&[])).unwrap();
        assert_eq!(s.prices.version, format!("{}+local", PriceTable::builtin().version));
        assert_eq!(s.prices.price("openai:tuned").map(|p| p.output), Some(1.2));
        assert!(s.prices.price("openai:gpt-4o-mini").is_some(), "the shipped prices stay");
        std::fs::write(&path, "prices:\n  version: v9\n  models:\n    openai:tuned: { input: -1, output: 1 }\n")
            .unwrap();
        let e = ModelSettings::from_file(&path, &env(&[])).unwrap_err();
        assert!(e.setting.ends_with("prices") && e.message.contains("openai:tuned"), "{e}");
        std::fs::write(&path, "prices:\n  models:\n    openai:tuned: { input: 1, output: 1, cachRead: 1 }\n").unwrap();
        assert!(ModelSettings::from_file(&path, &env(&[])).unwrap_err().message.contains("cachRead"));
        std::fs::write(&path, "colour: blue\n").unwrap();
        assert!(ModelSettings::from_file(&path, &env(&[])).unwrap_err().message.contains("colour"));
    }

    #[test]
    fn a_file_over_a_mib_is_refused_without_being_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("models.yaml");
        std::fs::write(&path, format!("# {}\n", "x".repeat(MAX_FILE_BYTES))).unwrap();
        let e = ModelSettings::from_file(&path, &env(&[])).unwrap_err();
        assert!(e.setting.ends_with("models.yaml") && e.message.contains("larger than 1048576 bytes"), "{e}");
    }

    #[cfg(not(feature = "yaml"))]
    #[test]
    fn without_yaml_a_file_is_read_as_json_and_a_yaml_one_is_refused_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("models.json");
        std::fs::write(&path, r#"{"aliases": {"fast": "openai:gpt-4o-mini"}}"#).unwrap();
        assert_eq!(ModelSettings::from_file(&path, &env(&[])).unwrap().aliases["fast"], "openai:gpt-4o-mini");
        std::fs::write(&path, "aliases:\n  fast: openai:gpt-4o-mini\n").unwrap();
        let e = ModelSettings::from_file(&path, &env(&[])).unwrap_err();
        assert!(e.message.contains("reads the model configuration as JSON"), "{e}");
    }
}
