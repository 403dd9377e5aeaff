//! Model providers behind the engine's `Model` port, and the registry that picks one per call.
//!
//! - [`OpenAiChat`]: any OpenAI-compatible Chat Completions endpoint (`openai:`, `ollama:`).
//! - [`AnthropicMessages`]: the Anthropic Messages API (`anthropic:`).
//! - Bedrock Converse (`bedrock:` and plain ids) lives in `switchboard-aws`, and the scripted
//!   test double in `switchboard-embedded`; a profile registers them with
//!   [`Models::with_provider`].
//!
//! Every provider makes one attempt per call and is wrapped in the same [`Retrying`]; [`Models`]
//! resolves aliases and `provider:model` references ([`switchboard_domain::ModelRef`]) and says
//! which variable is missing when a provider has no settings.

mod anthropic;
mod breaker;
mod http;
mod openai;
mod retry;
mod settings;
pub mod sse;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_domain::{ModelRef, Provider};
use switchboard_engine::{Clock, Model, ModelError, ModelRequest, ModelResponse, SystemClock, TextSink};

use crate::breaker::Breakers;

/// The JSON body each HTTP adapter sends for a request: what a recorded request, encoded again,
/// is compared with (the wire, for tests and tools that show what a provider received).
pub mod wire {
    pub use crate::anthropic::request_body as messages;
    pub use crate::openai::request_body as chat_completions;
}

pub use anthropic::AnthropicMessages;
pub use breaker::BreakerPolicy;
pub use openai::OpenAiChat;
pub use retry::{RetryPolicy, Retrying};
pub use settings::{ModelSettings, SettingsError};

/// An API key: shown by `Debug` as `<redacted>`, read only through [`ApiKey::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where one HTTP provider answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    /// The whole of one attempt: connect, send, wait, read.
    pub timeout: Duration,
}

/// An `f32` setting as the decimal a person wrote (0.7, not 0.699999988079071).
pub(crate) fn float(x: f32) -> f64 {
    (f64::from(x) * 1e6).round() / 1e6
}

/// The models a profile can call: one adapter per provider, each wrapped in [`Retrying`],
/// aliases, and a circuit breaker per `provider:model`. Implements `Model` by resolving the
/// request's reference.
#[derive(Clone)]
pub struct Models {
    providers: BTreeMap<Provider, Arc<dyn Model>>,
    /// For a provider with no settings: what to set.
    missing: BTreeMap<Provider, String>,
    aliases: BTreeMap<String, String>,
    retry: RetryPolicy,
    breakers: Arc<Breakers>,
}

impl Default for Models {
    fn default() -> Self {
        Self {
            providers: BTreeMap::new(),
            missing: BTreeMap::new(),
            aliases: BTreeMap::new(),
            retry: RetryPolicy::default(),
            breakers: Arc::new(Breakers::new(BreakerPolicy::default(), Arc::new(SystemClock))),
        }
    }
}

impl std::fmt::Debug for Models {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Models")
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .field("missing", &self.missing)
            .field("aliases", &self.aliases)
            .finish_non_exhaustive()
    }
}

impl Models {
    /// The HTTP providers `settings` configure; Bedrock and the scripted model are added by the
    /// profile ([`Models::with_provider`]).
    pub fn from_settings(settings: &ModelSettings) -> Result<Self, String> {
        let mut models = Models {
            aliases: settings.aliases.clone(),
            retry: settings.retry,
            breakers: Arc::new(Breakers::new(settings.breaker, Arc::new(SystemClock))),
            ..Models::default()
        };
        match &settings.openai {
            Some(endpoint) => {
                models = models.with_provider(Provider::OpenAi, Arc::new(OpenAiChat::new("openai", endpoint)?))
            }
            None => models = models.without(Provider::OpenAi, settings::OPENAI_MISSING),
        }
        match &settings.anthropic {
            Some(endpoint) => {
                models = models.with_provider(Provider::Anthropic, Arc::new(AnthropicMessages::new(endpoint)?))
            }
            None => models = models.without(Provider::Anthropic, settings::ANTHROPIC_MISSING),
        }
        if let Some(endpoint) = &settings.ollama {
            models = models.with_provider(Provider::Ollama, Arc::new(OpenAiChat::new("ollama", endpoint)?));
        }
        Ok(models
            .without(Provider::Bedrock, "this build has no Bedrock client (the CLI's `aws` feature)")
            .without(Provider::Scripted, "start with --scripted-model FILE to use the scripted test double"))
    }

    /// The clock the circuit breakers read (tests move it by hand). Keeps the breaker policy;
    /// circuits start closed.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.breakers = Arc::new(Breakers::new(self.breakers.policy(), clock));
        self
    }

    /// Adds (or replaces) the adapter for `provider`, wrapped in this registry's retry policy.
    pub fn with_provider(mut self, provider: Provider, model: Arc<dyn Model>) -> Self {
        self.missing.remove(&provider);
        self.providers.insert(provider, Arc::new(Retrying::new(model, self.retry)));
        self
    }

    fn without(mut self, provider: Provider, hint: &str) -> Self {
        if !self.providers.contains_key(&provider) {
            self.missing.insert(provider, hint.to_owned());
        }
        self
    }

    /// The provider and its model id for `reference` (aliases resolved, a plain id is Bedrock).
    pub fn resolve<'a>(&'a self, reference: &'a str) -> Result<(Provider, &'a str), String> {
        let reference = self.aliases.get(reference).map_or(reference, String::as_str);
        match ModelRef::parse(reference).map_err(|why| format!("model `{reference}` {why}"))? {
            ModelRef::Qualified { provider, model } => Ok((provider, model)),
            ModelRef::Plain(model) => Ok((Provider::Bedrock, model)),
        }
    }

    /// Whether `reference` can be called here; if not, what to set.
    pub fn check(&self, reference: &str) -> Result<(), String> {
        let (provider, _) = self.resolve(reference)?;
        match self.missing.get(&provider) {
            Some(hint) => Err(format!("model `{reference}` needs the {provider} provider: {hint}")),
            None if self.providers.contains_key(&provider) => Ok(()),
            None => Err(format!("model `{reference}` needs the {provider} provider, which is not configured")),
        }
    }
}

#[async_trait]
impl Model for Models {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.dispatch(request, None).await
    }

    async fn converse_streaming(
        &self,
        request: &ModelRequest,
        sink: &dyn TextSink,
    ) -> Result<ModelResponse, ModelError> {
        self.dispatch(request, Some(sink)).await
    }
}

impl Models {
    /// The call, to the provider `request.model` names, through its circuit breaker.
    async fn dispatch(&self, request: &ModelRequest, sink: Option<&dyn TextSink>) -> Result<ModelResponse, ModelError> {
        let (provider, model) = self.resolve(&request.model).map_err(ModelError::Rejected)?;
        let Some(adapter) = self.providers.get(&provider) else {
            return Err(ModelError::Unauthorized(self.check(&request.model).err().unwrap_or_default()));
        };
        if request.config.guardrail.is_some() && !matches!(provider, Provider::Bedrock | Provider::Scripted) {
            // Answering without the guardrail the agent asked for would be worse than not at all.
            return Err(ModelError::Rejected(format!(
                "the agent's guardrail applies to Bedrock models only, and `{}` is {provider}",
                request.model
            )));
        }
        let key = format!("{provider}:{model}");
        self.breakers.admit(&key)?;
        let mut call = request.clone();
        model.clone_into(&mut call.model);
        let result = match sink {
            Some(sink) => adapter.converse_streaming(&call, sink).await,
            None => adapter.converse(&call).await,
        };
        // A call cut off by the execution's deadline says nothing about the model.
        if !(matches!(result, Err(ModelError::Timeout)) && request.past_deadline()) {
            self.breakers.record(&key, result.as_ref().map(|_| ()));
        }
        let mut response = result?;
        response.model = format!("{provider}:{}", response.model);
        Ok(response)
    }
}

/// Fills in the profile's default model (`DefaultModelId`) when an agent names none.
#[derive(Clone)]
pub struct DefaultModel {
    inner: Arc<dyn Model>,
    default: Option<String>,
}

impl std::fmt::Debug for DefaultModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultModel").field("default", &self.default).finish_non_exhaustive()
    }
}

impl DefaultModel {
    pub fn new(inner: Arc<dyn Model>, default: Option<String>) -> Self {
        Self { inner, default }
    }
}

#[async_trait]
impl Model for DefaultModel {
    async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        match self.with_default(request)? {
            Some(request) => self.inner.converse(&request).await,
            None => self.inner.converse(request).await,
        }
    }

    async fn converse_streaming(
        &self,
        request: &ModelRequest,
        sink: &dyn TextSink,
    ) -> Result<ModelResponse, ModelError> {
        match self.with_default(request)? {
            Some(request) => self.inner.converse_streaming(&request, sink).await,
            None => self.inner.converse_streaming(request, sink).await,
        }
    }
}

impl DefaultModel {
    /// `request` with the default model, when it names none (`None`: it names one).
    fn with_default(&self, request: &ModelRequest) -> Result<Option<ModelRequest>, ModelError> {
        if !request.model.trim().is_empty() {
            return Ok(None);
        }
        let Some(default) = &self.default else {
            return Err(ModelError::Rejected(
                "the agent names no model and no default model is set (--default-model or SWITCHBOARD_DEFAULT_MODEL_ID)"
                    .into(),
            ));
        };
        let mut request = request.clone();
        default.clone_into(&mut request.model);
        Ok(Some(request))
    }
}

#[cfg(test)]
mod tests {
    use switchboard_domain::ModelConfig;
    use switchboard_domain::message::Message;
    use switchboard_engine::StopReason;

    use super::*;

    /// Answers with the model it was asked for.
    struct Echo;

    #[async_trait]
    impl Model for Echo {
        async fn converse(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
            Ok(ModelResponse {
                content: vec![],
                stop_reason: StopReason::EndTurn,
                usage: Default::default(),
                model: request.model.clone(),
            })
        }
    }

    fn request(model: &str) -> ModelRequest {
        ModelRequest {
            model: model.into(),
            system: String::new(),
            messages: vec![Message::user_text("hi")],
            tools: vec![],
            config: ModelConfig::default(),
            deadline: None,
            recording: switchboard_domain::Recording::Full,
        }
    }

    #[tokio::test]
    async fn the_default_model_answers_only_agents_that_name_none() {
        let with = DefaultModel::new(Arc::new(Echo), Some("ollama:llama3.1".into()));
        assert_eq!(with.converse(&request("")).await.unwrap().model, "ollama:llama3.1");
        assert_eq!(with.converse(&request("openai:x")).await.unwrap().model, "openai:x");
        let without = DefaultModel::new(Arc::new(Echo), None);
        let err = without.converse(&request("")).await.unwrap_err();
        assert!(matches!(&err, ModelError::Rejected(m) if m.contains("--default-model")), "{err:?}");
    }

    #[tokio::test]
    async fn a_guardrail_is_never_dropped_on_the_way_to_another_provider() {
        let models = Models::default()
            .with_provider(Provider::OpenAi, Arc::new(Echo))
            .with_provider(Provider::Bedrock, Arc::new(Echo));
        let mut guarded = request("openai:gpt-4o-mini");
        guarded.config.guardrail =
            Some(switchboard_domain::GuardrailConfig { id: "gr1".into(), version: "1".into(), trace: false });
        let err = models.converse(&guarded).await.unwrap_err();
        assert!(matches!(&err, ModelError::Rejected(m) if m.contains("Bedrock models only")), "{err:?}");
        assert!(!err.falls_back(), "the next model would refuse it too");
        guarded.model = "anthropic.claude-3-haiku-20240307-v1:0".into();
        assert_eq!(models.converse(&guarded).await.unwrap().model, "bedrock:anthropic.claude-3-haiku-20240307-v1:0");
    }
}
