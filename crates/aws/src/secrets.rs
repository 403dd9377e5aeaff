//! `SecretsManagerSecrets`: tenant secrets (webhook signing keys, …) from AWS Secrets Manager,
//! named `<prefix><tenant>/<name>`, kept in memory for five minutes so that a busy container
//! does not call Secrets Manager on every webhook. Values are never logged; rotation is picked
//! up when the cached entry expires. It does not create or rotate secrets.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_secretsmanager::Client;
use switchboard_domain::TenantId;
use switchboard_engine::{SecretError, Secrets};

use crate::errors::describe;

/// How long a value (or its absence) is served from memory.
pub const SECRET_CACHE_TTL: Duration = Duration::from_secs(300);
/// The default secret-name prefix: `switchboard/<tenant>/<name>`.
pub const DEFAULT_SECRET_PREFIX: &str = "switchboard/";

pub struct SecretsManagerSecrets {
    client: Client,
    prefix: String,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Option<String>)>>,
}

impl std::fmt::Debug for SecretsManagerSecrets {
    // The cache holds secret values: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsManagerSecrets").field("prefix", &self.prefix).field("ttl", &self.ttl).finish()
    }
}

impl SecretsManagerSecrets {
    pub fn new(client: Client) -> Self {
        Self::with_prefix(client, DEFAULT_SECRET_PREFIX)
    }

    /// Secrets read with a Secrets Manager client of its own, made from `config`.
    pub fn from_config(config: &aws_config::SdkConfig) -> Self {
        Self::new(Client::new(config))
    }

    pub fn with_prefix(client: Client, prefix: impl Into<String>) -> Self {
        Self { client, prefix: prefix.into(), ttl: SECRET_CACHE_TTL, cache: Mutex::new(HashMap::new()) }
    }

    /// Overrides the cache lifetime (tests).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The Secrets Manager name of a tenant's secret.
    pub fn secret_id(&self, tenant: &TenantId, name: &str) -> String {
        format!("{}{tenant}/{name}", self.prefix)
    }

    fn cached(&self, id: &str) -> Option<Option<String>> {
        let cache = self.cache.lock().ok()?;
        let (at, value) = cache.get(id)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    fn remember(&self, id: String, value: Option<String>) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(id, (Instant::now(), value));
        }
    }
}

#[async_trait]
impl Secrets for SecretsManagerSecrets {
    async fn get_secret(&self, tenant: &TenantId, name: &str) -> Result<Option<String>, SecretError> {
        let id = self.secret_id(tenant, name);
        if let Some(hit) = self.cached(&id) {
            return Ok(hit);
        }
        let value = match self.client.get_secret_value().secret_id(&id).send().await {
            Ok(out) => out.secret_string().map(str::to_owned),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => None,
            Err(e) => {
                let f = describe("GetSecretValue", &e);
                tracing::warn!(
                    code = f.code.as_deref().unwrap_or("-"),
                    retryable = f.retryable,
                    tenant = %tenant,
                    "secrets manager read failed"
                );
                return Err(SecretError { message: f.message, retryable: f.retryable });
            }
        };
        self.remember(id, value.clone());
        Ok(value)
    }
}

/// The variables held by one secret whose value is a JSON object of names to strings
/// (`{"OPENAI_API_KEY": "sk-…"}`): how a Lambda function gets provider keys without putting them
/// in its environment. Read once per container; the values are never logged.
pub async fn secret_variables(client: &Client, secret_id: &str) -> Result<HashMap<String, String>, String> {
    let out = client.get_secret_value().secret_id(secret_id).send().await.map_err(|e| {
        let f = describe("GetSecretValue", &e);
        format!("reading the secret {secret_id}: {}", f.message)
    })?;
    let text = out.secret_string().ok_or_else(|| format!("the secret {secret_id} holds no string"))?;
    // The value is never echoed: a parse error names only the position.
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).map_err(|e| {
        format!(
            "the secret {secret_id} must be a JSON object of variable names to strings (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    map.into_iter()
        .map(|(name, value)| match value {
            serde_json::Value::String(v) => Ok((name, v)),
            _ => Err(format!("the secret {secret_id}: `{name}` must be a string")),
        })
        .collect()
}
