//! The embedded profile's side of the HTTP API: API keys checked against their hashes in SQLite,
//! the admin key written once to the data directory, and the [`ApiState`] that puts the
//! profile's store, queue, bus and invoker behind the routes. `functions/lambda` does the same for
//! the AWS profile.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_api::{ApiState, Authenticator, Caller, KeyGrant, KeyInfo, MetricsText, RateLimiter, Readiness};
use switchboard_domain::TenantId;
use switchboard_domain::access::Role;
use switchboard_engine::StoreError;

use crate::keys::{generate_api_key, hash_api_key};
use crate::store::{NewKey, StoredKey};
use crate::{Embedded, SqliteStore};

/// The admin key file inside the data directory.
pub const ADMIN_KEY_FILE: &str = "admin.key";

/// API keys checked against their hashes in the store, each held by a principal with a role;
/// expiry is checked against the store's clock.
#[derive(Debug)]
pub struct StoreKeys(pub SqliteStore);

#[async_trait]
impl Authenticator for StoreKeys {
    async fn authenticate(&self, key: &str) -> Result<Option<Caller>, StoreError> {
        let Some(stored) = self.0.api_key(&hash_api_key(key)).await? else { return Ok(None) };
        let now = self.0.clock().now();
        if stored.expires_at.is_some_and(|at| at <= now) {
            return Ok(None);
        }
        self.0.note_key_use(&stored, now).await?;
        Ok(Some(match stored.tenant {
            None => Caller::admin(stored.principal),
            Some(t) => Caller::member(t, stored.principal, stored.role),
        }))
    }

    async fn issue_key(&self, tenant: &TenantId, grant: &KeyGrant) -> Result<(String, KeyInfo), StoreError> {
        let key = new_key()?;
        let hash = hash_api_key(&key);
        let new = NewKey {
            key_hash: &hash,
            tenant: Some(tenant),
            principal: &grant.principal,
            role: grant.role,
            expires_at: grant.expires_at,
        };
        self.0.add_api_key(new).await?;
        let stored = self.0.api_key(&hash).await?;
        let info = stored.map(key_info).ok_or_else(|| StoreError::Corrupt("an issued key is not stored".into()))?;
        Ok((key, info))
    }

    async fn tenant_keys(&self, tenant: &TenantId) -> Result<Vec<KeyInfo>, StoreError> {
        Ok(self.0.tenant_api_keys(tenant).await?.into_iter().map(key_info).collect())
    }

    async fn revoke_key(&self, tenant: &TenantId, key_id: &str) -> Result<bool, StoreError> {
        let Some(id) = key_id_of(key_id) else { return Ok(false) };
        self.0.revoke_api_key(tenant, &id).await
    }

    async fn rotate_key(&self, tenant: &TenantId, key_id: &str) -> Result<Option<(String, KeyInfo)>, StoreError> {
        let Some(id) = key_id_of(key_id) else { return Ok(None) };
        let key = new_key()?;
        let rotated = self.0.rotate_api_key(tenant, &id, &hash_api_key(&key)).await?;
        Ok(rotated.map(|stored| (key, key_info(stored))))
    }
}

/// Hex digits of a key's hash that name it.
const KEY_ID_LEN: usize = 16;

/// A key id as the store matches it, or `None` when it cannot be one.
fn key_id_of(key_id: &str) -> Option<String> {
    let well_formed = key_id.len() == KEY_ID_LEN && key_id.bytes().all(|b| b.is_ascii_hexdigit());
    well_formed.then(|| key_id.to_ascii_lowercase())
}

fn new_key() -> Result<String, StoreError> {
    generate_api_key().map_err(|e| StoreError::Unavailable { message: e.to_string(), retryable: true })
}

fn key_info(key: StoredKey) -> KeyInfo {
    KeyInfo {
        key_id: key.key_hash.chars().take(KEY_ID_LEN).collect(),
        principal: key.principal,
        role: key.role,
        created_at: key.created_at,
        expires_at: key.expires_at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        last_used_at: key.last_used_at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
    }
}

/// The routes' view of one embedded runtime: every port from the profile, API keys from the
/// store, `requests_per_minute` per tenant, and `body_timeout` for a client to send its body.
pub fn api_state(embedded: &Arc<Embedded>, requests_per_minute: usize, body_timeout: Duration) -> ApiState {
    let store = Arc::new(embedded.store.clone());
    ApiState {
        ingest: embedded.clone(),
        invoker: embedded.clone(),
        executor: embedded.executor.clone(),
        operator: embedded.operator.clone(),
        admin: store.clone(),
        auth: Some(Arc::new(StoreKeys(embedded.store.clone()))),
        limiter: Some(Arc::new(RateLimiter::new(requests_per_minute))),
        config: store.clone(),
        sessions: store.clone(),
        executions: store.clone(),
        conversations: Some(store.clone()),
        events: Some(store),
        live: Some(Arc::new(embedded.bus.clone())),
        push: None,
        body_timeout,
        ready: Some(embedded.clone()),
        metrics: Some(embedded.clone()),
        dead_letters: Some(Arc::new(embedded.queue.clone())),
        replayer: Some(Arc::new(StoreReplayer {
            store: embedded.store.clone(),
            model: embedded.executor.deps().model.clone(),
        })),
        secrets: embedded.secrets(),
        tool_servers: Some(embedded.executor.deps().webhooks.clone()),
    }
}

/// Replays an execution of the store in a scratch engine ([`crate::replay`]); a live run asks the
/// profile's own model.
struct StoreReplayer {
    store: crate::store::SqliteStore,
    model: Arc<dyn switchboard_engine::Model>,
}

#[async_trait]
impl switchboard_api::Replayer for StoreReplayer {
    async fn replay(
        &self,
        tenant: &switchboard_domain::TenantId,
        execution: switchboard_domain::ExecutionId,
        options: switchboard_api::ReplayOptions,
    ) -> Result<Option<serde_json::Value>, switchboard_api::ReplayRefused> {
        use crate::replay::{Live, ReplayError, replay, replay_live};
        use switchboard_api::ReplayRefused;
        let s = &self.store;
        let Some(input) = crate::replay::gather(s, s, s, s, tenant, execution).await? else { return Ok(None) };
        let refused = |e: ReplayError| match e {
            ReplayError::Unreplayable(why) => ReplayRefused::Unreplayable(why),
            ReplayError::Failed(why) => ReplayRefused::Failed(why),
        };
        let report = if options.live {
            let agent = match options.agent {
                None => None,
                Some(fields) => Some(changed_agent(&input, fields).map_err(ReplayRefused::Invalid)?),
            };
            let live = Live { model: self.model.clone(), agent, model_ref: options.model };
            serde_json::to_value(replay_live(input, live).await.map_err(refused)?)
        } else {
            serde_json::to_value(replay(input).await.map_err(refused)?)
        };
        report.map(Some).map_err(|e| ReplayRefused::Failed(e.to_string()))
    }
}

/// The execution's agent as it is now with `fields` laid over it, checked as a write would be
/// (each fault under `/agent`).
fn changed_agent(
    input: &crate::replay::ReplayInput,
    fields: serde_json::Map<String, serde_json::Value>,
) -> Result<switchboard_domain::Agent, switchboard_domain::ValidationErrors> {
    use switchboard_domain::ValidationErrors;
    let now = input.agents.iter().find(|a| a.agent_id == input.record.agent_id).unwrap_or(&input.agent);
    let mut merged = match serde_json::to_value(now) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => return Err(ValidationErrors::single("/agent", "the agent could not be read")),
    };
    for fixed in ["agentId", "tenantId"] {
        if fields.contains_key(fixed) {
            return Err(ValidationErrors::single(format!("/agent/{fixed}"), "cannot be changed"));
        }
    }
    merged.extend(fields);
    let agent: switchboard_domain::Agent =
        switchboard_domain::input::read_value(serde_json::Value::Object(merged), "/agent")?;
    agent.validate().map_err(|e| {
        let mut prefixed = ValidationErrors::default();
        for f in e.0 {
            prefixed.push(format!("/agent{}", f.pointer), f.detail);
        }
        prefixed
    })?;
    Ok(agent)
}

/// The tenant's items in the queue's dead letters.
#[async_trait]
impl switchboard_api::DeadLetters for crate::queue::SqliteWorkQueue {
    async fn count(&self, tenant: &switchboard_domain::TenantId) -> Result<u64, switchboard_engine::StoreError> {
        self.dead_letters_of(tenant)
            .await
            .map_err(|e| switchboard_engine::StoreError::Unavailable { message: e.to_string(), retryable: true })
    }
}

/// The engine's counters and the queue's state, read now.
#[async_trait]
impl MetricsText for Embedded {
    async fn render(&self) -> String {
        let queue = match self.queue.stats().await {
            Ok(q) => Some(q),
            Err(e) => {
                tracing::warn!(error = %e, "queue stats unavailable for /metrics");
                None
            }
        };
        let oldest = self.queue.oldest_item_age().await.ok();
        self.metrics.render(queue, oldest)
    }
}

/// Ready when the workers run and the database takes a write lock.
#[async_trait]
impl Readiness for Embedded {
    async fn check(&self) -> Result<(), String> {
        self.store.check_writable().await.map_err(|e| format!("the database does not take writes: {e}"))?;
        if !self.workers_running() {
            return Err("the workers are not running (starting or draining)".into());
        }
        Ok(())
    }
}

/// Why an admin key could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AdminKeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("generating a key: {0}")]
    Random(String),
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Makes sure an admin key exists. A new one is written to `<data-dir>/admin.key` (mode 0600),
/// the only place it is ever shown, and its path returned; `None` when a key already existed.
pub async fn ensure_admin_key(embedded: &Embedded) -> Result<Option<PathBuf>, AdminKeyError> {
    if embedded.store.has_admin_key().await? {
        return Ok(None);
    }
    let key = generate_api_key().map_err(|e| AdminKeyError::Random(e.to_string()))?;
    let path = embedded.data_dir.join(ADMIN_KEY_FILE);
    write_secret(&path, &key).map_err(|source| AdminKeyError::Write { path: path.clone(), source })?;
    let hash = hash_api_key(&key);
    let admin = NewKey { key_hash: &hash, tenant: None, principal: "admin", role: Role::Admin, expires_at: None };
    embedded.store.add_api_key(admin).await?;
    Ok(Some(path))
}

fn write_secret(path: &std::path::Path, secret: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    writeln!(file, "{secret}")
}
