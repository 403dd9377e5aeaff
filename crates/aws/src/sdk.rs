//! One SDK configuration per process (or Lambda container) and the clients derived from it,
//! with operation and attempt timeouts on every client; plus [`AwsNames`], the table, queue and
//! bus names the adapters use. It does not create any AWS resource.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

/// Where the adapters' resources live. Lambda functions fill it from their environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsNames {
    /// Agents, triggers and tenant markers (`PK=TENANT#<id>`).
    pub config_table: String,
    /// Sessions, their `SessionsByConversation` index and active-session markers.
    pub sessions_table: String,
    /// Execution records (TTL on `expiresAt`) and their source and id pointers.
    pub executions_table: String,
    /// The FIFO work queue's URL.
    pub work_queue_url: String,
    /// The EventBridge bus outbound events go to.
    pub event_bus: String,
}

impl AwsNames {
    /// Reads `SWITCHBOARD_CONFIG_TABLE`, `SWITCHBOARD_SESSIONS_TABLE`,
    /// `SWITCHBOARD_EXECUTIONS_TABLE`, `SWITCHBOARD_WORK_QUEUE_URL` and `SWITCHBOARD_EVENT_BUS`
    /// (the last defaults to `default`). The error names the first missing variable.
    pub fn from_env() -> Result<Self, String> {
        let var = |name: &str| std::env::var(name).map_err(|_| format!("environment variable {name} is not set"));
        Ok(Self {
            config_table: var("SWITCHBOARD_CONFIG_TABLE")?,
            sessions_table: var("SWITCHBOARD_SESSIONS_TABLE")?,
            executions_table: var("SWITCHBOARD_EXECUTIONS_TABLE")?,
            work_queue_url: var("SWITCHBOARD_WORK_QUEUE_URL")?,
            event_bus: var("SWITCHBOARD_EVENT_BUS").unwrap_or_else(|_| "default".to_owned()),
        })
    }
}

/// Time limits of one client: the whole operation (retries included) and each attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub operation: Duration,
    pub attempt: Duration,
    pub connect: Duration,
}

impl Timeouts {
    /// Storage, queue and bus calls: short, because a Lambda invocation waits on them.
    pub const DATA: Timeouts = Timeouts {
        operation: Duration::from_secs(10),
        attempt: Duration::from_secs(3),
        connect: Duration::from_secs(2),
    };
    /// One model call: a long answer takes tens of seconds.
    pub const MODEL: Timeouts = Timeouts {
        operation: Duration::from_secs(120),
        attempt: Duration::from_secs(60),
        connect: Duration::from_secs(3),
    };

    fn config(self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .operation_timeout(self.operation)
            .operation_attempt_timeout(self.attempt)
            .connect_timeout(self.connect)
            .build()
    }
}

/// How to load the SDK configuration. The default is the real AWS: region and credentials from
/// the environment (the Lambda role). Tests point `endpoint_url` at the emulator and give static
/// credentials.
#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    /// `(access key id, secret access key)`; `None` uses the default credential chain.
    pub static_credentials: Option<(String, String)>,
}

impl AwsSettings {
    /// Settings for a local emulator at `endpoint_url` (moto's defaults: `us-east-1`, `test`).
    pub fn emulator(endpoint_url: impl Into<String>) -> Self {
        Self {
            region: Some("us-east-1".to_owned()),
            endpoint_url: Some(endpoint_url.into()),
            static_credentials: Some(("test".to_owned(), "test".to_owned())),
        }
    }

    /// Loads the SDK configuration once; derive every client from it with [`AwsClients`].
    /// Data-plane timeouts and the SDK's standard retry (3 attempts) are the defaults.
    pub async fn load(&self) -> SdkConfig {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .timeout_config(Timeouts::DATA.config())
            .retry_config(RetryConfig::standard().with_max_attempts(3));
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url.clone());
        }
        if let Some((key, secret)) = &self.static_credentials {
            loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                key.clone(),
                secret.clone(),
                None,
                None,
                "switchboard-static",
            ));
        }
        loader.load().await
    }
}

/// Every client the adapters use, derived from one [`SdkConfig`]. Clients are cheap to clone.
#[derive(Debug, Clone)]
pub struct AwsClients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    /// Model timeouts, and no SDK retry: `switchboard_models::Retrying` retries every provider
    /// with one backoff, so that the attempts are counted in one place.
    pub bedrock: aws_sdk_bedrockruntime::Client,
    /// Tenant secrets that sign webhook tool calls ([`crate::SecretsManagerSecrets`]).
    pub secretsmanager: aws_sdk_secretsmanager::Client,
}

impl AwsClients {
    pub fn new(config: &SdkConfig) -> Self {
        let bedrock = aws_sdk_bedrockruntime::config::Builder::from(config)
            .timeout_config(Timeouts::MODEL.config())
            .retry_config(RetryConfig::disabled())
            .build();
        Self {
            dynamodb: aws_sdk_dynamodb::Client::new(config),
            sqs: aws_sdk_sqs::Client::new(config),
            bedrock: aws_sdk_bedrockruntime::Client::from_conf(bedrock),
            secretsmanager: aws_sdk_secretsmanager::Client::new(config),
        }
    }
}
