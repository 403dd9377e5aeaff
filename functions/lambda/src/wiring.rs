//! What every function does once per container: [`run_with`] (the whole `main`), its
//! environment ([`FunctionEnv`]) and the adapters built from one shared SDK config ([`Wiring`],
//! the AWS twin of the embedded profile's `Embedded::open`). Nothing here is per request.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use aws_config::SdkConfig;
use switchboard_aws::{
    AwsClients, AwsNames, AwsSettings, BedrockModel, ConversationsApi, ConversationsLimits, DynamoStore,
    EventBridgeBus, S3Archive, SecretsManagerSecrets, SqsWorkQueue, StreamRelay, TurnLog,
};
use switchboard_domain::{PriceTable, Provider, TenantId};
use switchboard_engine::{
    ConversationError, Conversations, Deps, Engine, Executor, HistoryMessage, Intake, Limits, McpAnswer, McpRequest,
    Model, PortLayer, Secrets, Sent, SystemClock, WebhookCaller, WebhookError, WebhookRequest, WebhookResponse,
};
use switchboard_models::{DefaultModel, ModelSettings, Models};
use switchboard_webhooks::{HttpWebhookCaller, WebhookPolicy};

use crate::event_router::EventRouter;

/// `SWITCHBOARD_INIT_ONLY=1` makes a binary exit right after building its clients (used to
/// measure start-up; see `docs/benchmarks.md`).
pub const INIT_ONLY_VAR: &str = "SWITCHBOARD_INIT_ONLY";

/// A function's configuration, from its environment (set by `template.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionEnv {
    pub names: AwsNames,
    /// `SWITCHBOARD_ARCHIVE_BUCKET`: the archiver's bucket, and where the executor keeps and the
    /// operations-api reads recorded content too large for a DynamoDB item.
    pub archive_bucket: Option<String>,
    /// `SWITCHBOARD_CONVERSATIONS_URL`: the Conversations Service API (executor, internal-api).
    pub conversations_url: Option<String>,
    /// `SWITCHBOARD_DEFAULT_MODEL_ID`: used when a request names no model.
    pub default_model: Option<String>,
    /// `SWITCHBOARD_S3_PATH_STYLE=1` for emulators.
    pub s3_path_style: bool,
    /// `SWITCHBOARD_MODEL_SECRET`: a Secrets Manager secret (name or ARN) whose value is a JSON
    /// object of provider variables (`{"OPENAI_API_KEY": "sk-…"}`), read once per container and
    /// taking precedence over the environment (executor).
    pub model_secret: Option<String>,
    /// `SWITCHBOARD_MODEL_CONFIG`: a model configuration file in the package or a layer
    /// (aliases, base URLs, prices; the format of `switchboard serve --model-config`).
    pub model_config: Option<std::path::PathBuf>,
}

impl FunctionEnv {
    /// Reads the table, queue and bus names ([`AwsNames::from_env`]) and the optional settings.
    pub fn from_env() -> Result<Self, String> {
        let opt = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Ok(Self {
            names: AwsNames::from_env()?,
            archive_bucket: opt("SWITCHBOARD_ARCHIVE_BUCKET"),
            conversations_url: opt("SWITCHBOARD_CONVERSATIONS_URL"),
            default_model: opt("SWITCHBOARD_DEFAULT_MODEL_ID"),
            s3_path_style: opt("SWITCHBOARD_S3_PATH_STYLE").is_some_and(|v| v == "1" || v == "true"),
            model_secret: opt("SWITCHBOARD_MODEL_SECRET"),
            model_config: opt("SWITCHBOARD_MODEL_CONFIG").map(Into::into),
        })
    }

    /// The bucket of recorded content too large for a DynamoDB item (`archive_bucket`'s, under
    /// `pieces/`), when this function is given one.
    pub fn large_content(&self, sdk: &SdkConfig) -> Option<S3Archive> {
        let bucket = self.archive_bucket.clone()?;
        Some(S3Archive::new(S3Archive::client(sdk, self.s3_path_style), bucket, ""))
    }

    /// console-push: the executions table (`SWITCHBOARD_EXECUTIONS_TABLE`, where connections
    /// are kept) and the WebSocket API's management endpoint (`SWITCHBOARD_PUSH_ENDPOINT`,
    /// `https://<api id>.execute-api.<region>.amazonaws.com/<stage>`).
    pub fn push_from_env(sdk: &SdkConfig) -> Result<switchboard_aws::ConsolePush, String> {
        let names = AwsNames::from_env()?;
        let endpoint = std::env::var("SWITCHBOARD_PUSH_ENDPOINT")
            .map_err(|_| "environment variable SWITCHBOARD_PUSH_ENDPOINT is not set".to_owned())?;
        let store = Arc::new(DynamoStore::from_config(sdk, names, Arc::new(SystemClock)));
        Ok(switchboard_aws::ConsolePush { store, management: switchboard_aws::ManagementApi::new(sdk, &endpoint)? })
    }

    /// The stream consumer: the archive's bucket (`SWITCHBOARD_ARCHIVE_BUCKET`) and the bus the
    /// outbox's events go to (`SWITCHBOARD_EVENT_BUS`).
    pub fn streams_from_env(sdk: &SdkConfig) -> Result<crate::archiver::Streams, String> {
        let archive = Self::archive_from_env(sdk)?;
        let names = AwsNames::from_env()?;
        Ok(crate::archiver::Streams { archive, outbox: EventBridgeBus::from_config(sdk, names.event_bus) })
    }

    /// The archiver needs only the bucket (`SWITCHBOARD_ARCHIVE_BUCKET`), not the tables.
    pub fn archive_from_env(sdk: &SdkConfig) -> Result<S3Archive, String> {
        let bucket = std::env::var("SWITCHBOARD_ARCHIVE_BUCKET")
            .map_err(|_| "environment variable SWITCHBOARD_ARCHIVE_BUCKET is not set".to_owned())?;
        let path_style = std::env::var("SWITCHBOARD_S3_PATH_STYLE").is_ok_and(|v| v == "1" || v == "true");
        Ok(S3Archive::new(
            S3Archive::client(sdk, path_style),
            bucket,
            switchboard_domain::archive::ArchiveKind::Executions.prefix(),
        ))
    }
}

/// The SDK config of a Lambda container: region and credentials from the function's role,
/// data-plane timeouts and standard retries ([`AwsSettings::load`]). `AWS_ENDPOINT_URL`, when
/// set, points every client at an emulator.
pub async fn load_sdk_config() -> SdkConfig {
    AwsSettings::default().load().await
}

/// A Lambda function's whole `main`: tracing (`AWS_LAMBDA_LOG_FORMAT=JSON` honoured), the SDK
/// config loaded once ([`load_sdk_config`]), the function's state built once from it by `setup`
/// (clients and adapters, reused by every invocation), then `serve` — the Lambda runtime's loop
/// — with a reference to that state. A `setup` error ends the process before the first
/// invocation, so Lambda reports an init failure naming it. With `SWITCHBOARD_INIT_ONLY=1` it
/// returns once the state is built (start-up measurements, `docs/benchmarks.md`).
pub async fn run_with<S>(
    setup: impl AsyncFnOnce(&SdkConfig) -> Result<S, String>,
    serve: impl AsyncFnOnce(&S) -> Result<(), lambda_runtime::Error>,
) -> Result<(), lambda_runtime::Error> {
    init_tracing()?;
    let sdk = load_sdk_config().await;
    let state = setup(&sdk).await?;
    if init_only() {
        return Ok(());
    }
    // Boxed: the runtime's future nests deeply enough that one more layer of async fn would
    // exceed the compiler's layout query depth in the binaries.
    Box::pin(serve(&state)).await
}

/// The container's traces, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces variant) is set.
static TRACES: std::sync::OnceLock<switchboard_telemetry::Traces> = std::sync::OnceLock::new();

/// Logs in the Lambda runtime's formats (`AWS_LAMBDA_LOG_FORMAT=json`: one JSON object per
/// event, its fields flattened; else text), filtered by [`log_filter`], plus the engine's spans
/// over OTLP when an endpoint is configured (on Lambda, typically the ADOT collector extension on
/// `http://localhost:4318`).
fn init_tracing() -> Result<(), String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let traces = switchboard_telemetry::Traces::from_env("switchboard", |v| std::env::var(v).ok())?;
    let (filter, refused) =
        log_filter(std::env::var("AWS_LAMBDA_LOG_LEVEL").ok().as_deref(), std::env::var("RUST_LOG").ok().as_deref());
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let logs = match json {
        true => tracing_subscriber::fmt::layer().json().flatten_event(true).without_time().boxed(),
        false => tracing_subscriber::fmt::layer().without_time().with_ansi(false).boxed(),
    };
    let spans = traces.as_ref().map(switchboard_telemetry::Traces::layer);
    tracing_subscriber::registry().with(filter).with(logs).with(spans).init();
    if let Some(spec) = refused {
        tracing::warn!(filter = %spec, "log filter not understood; logging at info");
    }
    if let Some(traces) = traces {
        let _ = TRACES.set(traces);
    }
    Ok(())
}

/// The log filter: `AWS_LAMBDA_LOG_LEVEL` (the level Lambda's logging controls set), else
/// `RUST_LOG`, else info. Either is a level or `target=level` directives, comma-separated
/// (`info,switchboard_engine=debug`); `RUST_LOG`'s span and field filters are not understood (a
/// plain target filter needs no regular-expression engine in every function). A value that does
/// not parse is returned beside an info filter, to be logged.
fn log_filter(
    lambda_level: Option<&str>,
    rust_log: Option<&str>,
) -> (tracing_subscriber::filter::Targets, Option<String>) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    let info = || Targets::new().with_default(LevelFilter::INFO);
    match lambda_level.or(rust_log).map(str::trim).filter(|s| !s.is_empty()) {
        None => (info(), None),
        Some(spec) => match spec.parse::<Targets>() {
            Ok(filter) => (filter, None),
            Err(_) => (info(), Some(spec.to_owned())),
        },
    }
}

/// Sends the invocation's spans before it returns (a frozen container sends nothing). A no-op
/// without traces.
pub async fn flush_traces() {
    if let Some(traces) = TRACES.get() {
        let traces = traces.clone();
        // The exporter's client blocks; keep it off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || traces.flush()).await;
    }
}

/// The model providers' settings of a function: the variables of `env.model_secret` (if set)
/// over the process environment `process`, and `env.model_config`'s file (if set) over both.
pub async fn model_settings(
    clients: &AwsClients,
    env: &FunctionEnv,
    process: &dyn Fn(&str) -> Option<String>,
) -> Result<ModelSettings, String> {
    let from_secret = match &env.model_secret {
        Some(id) => switchboard_aws::secret_variables(&clients.secretsmanager, id)
            .await
            .map_err(|e| format!("SWITCHBOARD_MODEL_SECRET: {e}"))?,
        None => std::collections::HashMap::new(),
    };
    let lookup = |name: &str| from_secret.get(name).cloned().or_else(|| process(name));
    match &env.model_config {
        Some(path) => ModelSettings::from_file(path, &lookup).map_err(|e| format!("SWITCHBOARD_MODEL_CONFIG: {e}")),
        None => ModelSettings::from_env(&lookup).map_err(|e| e.to_string()),
    }
}

/// Whether the binary should stop once its clients are built.
pub fn init_only() -> bool {
    std::env::var(INIT_ONLY_VAR).is_ok_and(|v| v == "1")
}

/// The Conversations port when no service URL is configured: every send fails (not retryable),
/// so the item ends in the DLQ rather than pretending a reply went out.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoConversations;

#[async_trait]
impl Conversations for NoConversations {
    async fn send_reply(
        &self,
        _tenant: &TenantId,
        _conversation_id: &str,
        _text: &str,
        _idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        Err(ConversationError {
            message: "SWITCHBOARD_CONVERSATIONS_URL is not set: this function cannot send replies".into(),
            retryable: false,
        })
    }

    async fn send_human(
        &self,
        _tenant: &TenantId,
        _conversation_id: &str,
        _text: &str,
        _operator: &str,
        _idempotency_key: &str,
    ) -> Result<Sent, ConversationError> {
        Err(ConversationError {
            message: "SWITCHBOARD_CONVERSATIONS_URL is not set: this function cannot send messages".into(),
            retryable: false,
        })
    }

    async fn history(
        &self,
        _tenant: &TenantId,
        _conversation_id: &str,
        _limit: usize,
    ) -> Result<Vec<HistoryMessage>, ConversationError> {
        Err(ConversationError {
            message: "SWITCHBOARD_CONVERSATIONS_URL is not set: this function cannot read conversations".into(),
            retryable: false,
        })
    }
}

/// The webhook caller of a container, built on the first webhook call. Building its HTTPS client
/// reads and parses the system's CA bundle (rustls-platform-verifier does it eagerly; ~45 ms in
/// a debug build), which the event-router and internal-api never need, nor does an executor
/// container whose tenants have no webhook tools.
pub struct LazyWebhooks {
    policy: WebhookPolicy,
    secrets: Arc<dyn Secrets>,
    caller: OnceLock<Result<HttpWebhookCaller, WebhookError>>,
}

impl std::fmt::Debug for LazyWebhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyWebhooks")
            .field("policy", &self.policy)
            .field("built", &self.caller.get().is_some())
            .finish_non_exhaustive()
    }
}

impl LazyWebhooks {
    pub fn new(policy: WebhookPolicy, secrets: Arc<dyn Secrets>) -> Self {
        Self { policy, secrets, caller: OnceLock::new() }
    }
}

impl LazyWebhooks {
    fn caller(&self) -> Result<&HttpWebhookCaller, WebhookError> {
        let caller = self.caller.get_or_init(|| {
            HttpWebhookCaller::new(self.policy, self.secrets.clone()).inspect_err(|e| {
                // Kept for the container's life: every webhook tool call answers with it.
                tracing::error!(error = %e, "the webhook client could not be built");
            })
        });
        caller.as_ref().map_err(Clone::clone)
    }
}

#[async_trait]
impl WebhookCaller for LazyWebhooks {
    async fn call(&self, request: &WebhookRequest) -> Result<WebhookResponse, WebhookError> {
        self.caller()?.call(request).await
    }

    async fn call_mcp(&self, request: &McpRequest) -> Result<McpAnswer, WebhookError> {
        self.caller()?.call_mcp(request).await
    }

    async fn list_mcp(
        &self,
        tenant: &switchboard_domain::TenantId,
        server: &switchboard_domain::mcp::McpServer,
    ) -> Result<Vec<switchboard_domain::mcp::ListedTool>, WebhookError> {
        self.caller()?.list_mcp(tenant, server).await
    }
}

/// The model of a function that runs no agent (the event-router): every call is refused. Built
/// instead of the providers, so that none of them is linked into that function's binary.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoModel;

#[async_trait]
impl Model for NoModel {
    async fn converse(
        &self,
        _request: &switchboard_engine::ModelRequest,
    ) -> Result<switchboard_engine::ModelResponse, switchboard_engine::ModelError> {
        Err(switchboard_engine::ModelError::Rejected("this function runs no model".into()))
    }
}

/// The event-router's engine: the store, the work queue and the bus, with the same caches and
/// limits as the full [`Wiring`] ([`Wiring::assemble`]): the intake, and the operator its
/// schedule sweeps approvals with. It runs no agent, so it builds no model provider, webhook
/// caller, Secrets Manager or Bedrock client, nor Conversations client — and because nothing on
/// its path names them, none is linked into the event-router binary.
pub fn event_router(sdk: &SdkConfig, env: &FunctionEnv) -> EventRouter {
    let parts = Parts::from_config(sdk, env);
    let wiring = Wiring::assemble(
        parts,
        env,
        Arc::new(NoConversations),
        Arc::new(NoModel),
        Arc::new(switchboard_engine::NoWebhooks),
    );
    EventRouter::over(&wiring)
}

/// [`event_router`] from the function's environment ([`FunctionEnv::from_env`]).
pub async fn event_router_from_env(sdk: &SdkConfig) -> Result<EventRouter, String> {
    Ok(event_router(sdk, &FunctionEnv::from_env()?))
}

/// The clients every function's engine needs: the store and the work queue (its events are
/// published from the table's stream, not by the engine).
struct Parts {
    store: DynamoStore,
    queue: SqsWorkQueue,
}

impl Parts {
    /// Each with a client of its own from `sdk` (the clients of [`AwsClients::new`], made alone).
    fn from_config(sdk: &SdkConfig, env: &FunctionEnv) -> Self {
        Self {
            store: DynamoStore::from_config(sdk, env.names.clone(), Arc::new(SystemClock)),
            queue: SqsWorkQueue::from_config(sdk, env.names.work_queue_url.clone()),
        }
    }

    /// The store keeping recorded content too large for an item in `bucket`, if one is given.
    fn keeping(mut self, bucket: Option<S3Archive>) -> Self {
        if let Some(bucket) = bucket {
            self.store = self.store.with_large_content(&bucket);
        }
        self
    }
}

/// The engine wired to the AWS adapters, built once per container from one SDK config.
#[derive(Clone)]
pub struct Wiring {
    pub store: Arc<DynamoStore>,
    pub queue: Arc<SqsWorkQueue>,
    pub deps: Deps,
    pub intake: Intake,
    pub executor: Executor,
    /// Followed turns' events (streamed invokes): the executor writes them, the API reads them.
    pub turns: TurnLog,
    /// The work queue's `maxReceiveCount` (`SWITCHBOARD_WORK_MAX_RECEIVES`, default
    /// [`DEFAULT_MAX_RECEIVES`]): a deferred message still refused at that delivery is recorded
    /// as refused instead of going to the dead-letter queue.
    pub max_receives: u32,
    /// The work queue's dead-letter queue (`SWITCHBOARD_WORK_DEAD_LETTER_QUEUE_ARN`): a batch
    /// from it is given up item by item instead of run (see [`crate::executor::handle`]).
    pub dead_letter_queue_arn: Option<String>,
    /// Tenant secrets, for the API's verification of webhook triggers' deliveries: Secrets
    /// Manager where the function needs them ([`Wiring::hooks_from_env`]), none elsewhere.
    pub secrets: Arc<dyn Secrets>,
}

impl std::fmt::Debug for Wiring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wiring")
            .field("store", &self.store)
            .field("queue", &self.queue)
            .field("max_receives", &self.max_receives)
            .field("dead_letter_queue_arn", &self.dead_letter_queue_arn)
            .finish_non_exhaustive()
    }
}

/// The template's `maxReceiveCount` for the work queue.
pub const DEFAULT_MAX_RECEIVES: u32 = 5;

impl Wiring {
    /// The deployed wiring: clients from `sdk`; the Conversations client signs with the same
    /// credentials; webhook tools obey the production policy (`https` only, public addresses
    /// only: [`WebhookPolicy::default`]).
    pub async fn new(sdk: &SdkConfig, env: &FunctionEnv) -> Result<Self, String> {
        let clients = AwsClients::new(sdk);
        let conversations: Arc<dyn Conversations> = match &env.conversations_url {
            Some(url) => Arc::new(
                ConversationsApi::new(sdk, url.clone(), ConversationsLimits::default()).map_err(|e| e.to_string())?,
            ),
            None => Arc::new(NoConversations),
        };
        // Bedrock by default; OpenAI-compatible and Anthropic endpoints when their variables are
        // set (the same settings as `switchboard serve`), every provider behind one retry policy.
        let settings = model_settings(&clients, env, &|name| std::env::var(name).ok()).await?;
        let model = Models::from_settings(&settings)?
            .with_provider(Provider::Bedrock, Arc::new(BedrockModel::new(clients.bedrock.clone())));
        let prices = settings.prices;
        let large_content = env.large_content(sdk);
        let mut wiring =
            Self::keeping(clients, env, conversations, Arc::new(model), WebhookPolicy::default(), large_content)
                .priced(prices);
        if let Some(n) = std::env::var("SWITCHBOARD_WORK_MAX_RECEIVES").ok().and_then(|v| v.trim().parse().ok()) {
            wiring.max_receives = n;
        }
        wiring.dead_letter_queue_arn =
            std::env::var("SWITCHBOARD_WORK_DEAD_LETTER_QUEUE_ARN").ok().filter(|v| !v.trim().is_empty());
        Ok(wiring)
    }

    /// [`Wiring::new`] from the function's environment ([`FunctionEnv::from_env`]).
    pub async fn from_env(sdk: &SdkConfig) -> Result<Self, String> {
        Self::new(sdk, &FunctionEnv::from_env()?).await
    }

    /// The internal-api's wiring: everything but the agents' means — the API records handoffs
    /// and operator actions and enqueues invocations, and runs no turn itself, so no model
    /// provider, Bedrock or Secrets Manager client, or webhook caller is built (or linked into
    /// its binary). The Conversations client is, for operators' replies.
    pub fn api(sdk: &SdkConfig, env: &FunctionEnv) -> Result<Self, String> {
        Self::api_over(Parts::from_config(sdk, env), sdk, env)
    }

    fn api_over(parts: Parts, sdk: &SdkConfig, env: &FunctionEnv) -> Result<Self, String> {
        let conversations: Arc<dyn Conversations> = match &env.conversations_url {
            Some(url) => Arc::new(
                ConversationsApi::new(sdk, url.clone(), ConversationsLimits::default()).map_err(|e| e.to_string())?,
            ),
            None => Arc::new(NoConversations),
        };
        Ok(Self::assemble(parts, env, conversations, Arc::new(NoModel), Arc::new(switchboard_engine::NoWebhooks)))
    }

    /// [`Wiring::api`] from the function's environment (the internal-api).
    pub async fn api_from_env(sdk: &SdkConfig) -> Result<Self, String> {
        Self::api(sdk, &FunctionEnv::from_env()?)
    }

    /// The operations-api's wiring: [`Wiring::api`] reading the large pieces of recorded content
    /// (model calls, replay) from the archive's bucket when it is set. Only this API function
    /// links the S3 client: the internal-api has no route that reads content, and the large
    /// pieces of a deleted tenant are deleted by the archiver.
    pub async fn operations_from_env(sdk: &SdkConfig) -> Result<Self, String> {
        let env = FunctionEnv::from_env()?;
        let parts = Parts::from_config(sdk, &env).keeping(env.large_content(sdk));
        Self::api_over(parts, sdk, &env)
    }

    /// The webhook-intake's wiring: [`Wiring::api`], and the tenants' secrets in Secrets Manager
    /// (`switchboard/<tenant>/<secretRef>`), which verify webhook triggers' deliveries. Only
    /// this function's binary links the Secrets Manager client beside the executor's.
    pub async fn hooks_from_env(sdk: &SdkConfig) -> Result<Self, String> {
        let wiring = Self::api(sdk, &FunctionEnv::from_env()?)?;
        Ok(wiring.with_secrets(Arc::new(SecretsManagerSecrets::from_config(sdk))))
    }

    /// The same wiring verifying webhook triggers' deliveries with `secrets`.
    pub fn with_secrets(mut self, secrets: Arc<dyn Secrets>) -> Self {
        self.secrets = secrets;
        self
    }

    /// Wiring with explicit clients, Conversations adapter, model and webhook policy (tests,
    /// benchmarks). Webhook tools are signed with the tenant's secret from Secrets Manager
    /// (`switchboard/<tenant>/<secretRef>`, read through `clients.secretsmanager`).
    ///
    /// `webhooks` is the only way to let webhook tools reach `http://` or private addresses, and
    /// it exists for tests whose receiver listens on loopback. Deployed functions always get the
    /// default from [`Wiring::new`]; no environment variable opens it, so no configuration
    /// mistake can point a tenant's webhook at the VPC or the metadata service.
    pub fn with(
        clients: AwsClients,
        env: &FunctionEnv,
        conversations: Arc<dyn Conversations>,
        model: Arc<dyn Model>,
        webhooks: WebhookPolicy,
    ) -> Self {
        Self::keeping(clients, env, conversations, model, webhooks, None)
    }

    /// [`Wiring::with`], keeping recorded content too large for a DynamoDB item in
    /// `large_content` (the deployed executor's: [`FunctionEnv::large_content`]).
    pub fn keeping(
        clients: AwsClients,
        env: &FunctionEnv,
        conversations: Arc<dyn Conversations>,
        model: Arc<dyn Model>,
        webhooks: WebhookPolicy,
        large_content: Option<S3Archive>,
    ) -> Self {
        let secrets = Arc::new(SecretsManagerSecrets::new(clients.secretsmanager.clone()));
        let parts = Parts {
            store: DynamoStore::new(clients.dynamodb.clone(), env.names.clone(), Arc::new(SystemClock)),
            queue: SqsWorkQueue::new(clients.sqs.clone(), env.names.work_queue_url.clone()),
        }
        .keeping(large_content);
        Self::assemble(parts, env, conversations, model, Arc::new(LazyWebhooks::new(webhooks, secrets.clone())))
            .with_secrets(secrets)
    }

    /// The engine over `parts` and the given agents' means.
    fn assemble(
        parts: Parts,
        env: &FunctionEnv,
        conversations: Arc<dyn Conversations>,
        model: Arc<dyn Model>,
        webhooks: Arc<dyn WebhookCaller>,
    ) -> Self {
        let clock = Arc::new(SystemClock);
        let store = Arc::new(parts.store);
        let queue = Arc::new(parts.queue);
        let model: Arc<dyn Model> = Arc::new(DefaultModel::new(model, env.default_model.clone()));
        let deps = Deps {
            config: store.clone(),
            sessions: store.clone(),
            executions: store.clone(),
            queue: queue.clone(),
            bus: Arc::new(StreamRelay),
            conversations,
            model,
            webhooks,
            clock,
            prices: Arc::new(PriceTable::builtin()),
            // CloudWatch Embedded Metric Format lines on stdout.
            metrics: Arc::new(crate::emf::EmfMetrics::stdout()),
            counters: store.clone(),
        };
        let (intake, executor) = engine(&deps);
        let turns = TurnLog::new(&store);
        let executor = executor.with_progress(Arc::new(turns.clone()));
        Self {
            store,
            queue,
            executor,
            deps,
            intake,
            turns,
            max_receives: DEFAULT_MAX_RECEIVES,
            dead_letter_queue_arn: None,
            secrets: Arc::new(switchboard_engine::NoSecrets),
        }
    }

    /// The same wiring with model calls priced at `prices` instead of the shipped table.
    pub fn priced(self, prices: PriceTable) -> Self {
        self.rebuilt(|deps| deps.prices = Arc::new(prices))
    }

    /// The same wiring counting into `metrics` instead of EMF on stdout (tests).
    pub fn with_metrics(self, metrics: Arc<dyn switchboard_engine::Metrics>) -> Self {
        self.rebuilt(|deps| deps.metrics = metrics)
    }

    /// The same wiring reading the time from `clock` for tenant-limit windows and records
    /// (tests: a window that does not turn over mid-test).
    pub fn with_clock(self, clock: Arc<dyn switchboard_engine::Clock>) -> Self {
        self.rebuilt(|deps| deps.clock = clock)
    }

    /// The engine as a newly started container has it: no tenant or day's usage kept yet
    /// (tests; the store's own caches are shared with `self`).
    pub fn restarted(&self) -> Self {
        self.clone().rebuilt(|_| {})
    }

    /// The engine over this wiring's ports as `layer` wraps them (fault injection in tests).
    /// `deps` keeps the ports unwrapped, so that layering again starts from them.
    pub fn layered(&self, layer: &dyn PortLayer) -> Self {
        let (intake, executor) = engine(&layer.deps(self.deps.clone()));
        Self { intake, executor: executor.with_progress(Arc::new(self.turns.clone())), ..self.clone() }
    }

    fn rebuilt(mut self, change: impl FnOnce(&mut Deps)) -> Self {
        change(&mut self.deps);
        let (intake, executor) = engine(&self.deps);
        (self.intake, self.executor) = (intake, executor.with_progress(Arc::new(self.turns.clone())));
        self
    }
}

/// How long a warm container routes with the tenant (status, limits) it read: a suspension or a
/// limit changed through the API takes effect within this on every container. Triggers are
/// kept 60 s and agents five minutes (`switchboard_aws::dynamo`).
pub const TENANT_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a warm container admits with the tokens a tenant used today as it last read them:
/// a tenant that reaches its tokens per day is refused within this.
pub const DAY_USAGE_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// The engine over `deps`, its intake keeping tenants for [`TENANT_CACHE_TTL`] and their day's
/// usage for [`DAY_USAGE_CACHE_TTL`].
fn engine(deps: &Deps) -> (Intake, Executor) {
    let Engine { intake, executor, .. } = Engine::new(deps.clone());
    let limits = Limits::new(deps).with_day_usage_cache(DAY_USAGE_CACHE_TTL);
    (intake.with_tenant_cache(TENANT_CACHE_TTL).with_limits(limits), executor)
}

#[cfg(test)]
mod log_filter_tests {
    #![allow(clippy::unwrap_used)]
    use tracing_subscriber::filter::LevelFilter;

    use super::log_filter;

    fn level(filter: &tracing_subscriber::filter::Targets, target: &str) -> Option<LevelFilter> {
        Some(filter.iter().find(|(t, _)| *t == target).map_or(filter.default_level()?, |(_, l)| l))
    }

    #[test]
    fn lambdas_level_wins_then_rust_log_then_info() {
        let (f, refused) = log_filter(Some("DEBUG"), Some("error"));
        assert_eq!((f.default_level(), refused), (Some(LevelFilter::DEBUG), None));
        let (f, _) = log_filter(None, Some("warn,switchboard_engine=trace"));
        assert_eq!(f.default_level(), Some(LevelFilter::WARN));
        assert_eq!(level(&f, "switchboard_engine"), Some(LevelFilter::TRACE));
        for nothing in [None, Some(""), Some("  ")] {
            let (f, refused) = log_filter(nothing, None);
            assert_eq!((f.default_level(), refused), (Some(LevelFilter::INFO), None));
        }
    }

    #[test]
    fn a_filter_it_cannot_read_logs_at_info_and_is_reported() {
        let (f, refused) = log_filter(None, Some("warn,switchboard=verbose"));
        assert_eq!(f.default_level(), Some(LevelFilter::INFO));
        assert_eq!(refused.as_deref(), Some("warn,switchboard=verbose"));
        let (f, refused) = log_filter(Some("debug=debug=debug"), None);
        assert_eq!((f.default_level(), refused.as_deref()), (Some(LevelFilter::INFO), Some("debug=debug=debug")));
    }
}
