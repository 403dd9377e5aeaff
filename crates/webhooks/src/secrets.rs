//! A short-lived in-memory cache of tenant signing secrets in front of the `Secrets` port. It
//! caches values only (a missing secret is asked for again) and never prints one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use switchboard_domain::TenantId;
use switchboard_engine::ports::{Secrets, WebhookError};

/// How long a secret value is reused before the port is asked again (rotation takes effect
/// within this time).
pub const SECRET_TTL: Duration = Duration::from_secs(5 * 60);

/// A secret value. Its `Debug` is redacted so that it cannot reach a log by accident.
#[derive(Clone)]
pub(crate) struct SecretValue(Arc<str>);

impl SecretValue {
    pub(crate) fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

type Entries = HashMap<(TenantId, String), (Instant, SecretValue)>;

pub(crate) struct SecretCache {
    source: Arc<dyn Secrets>,
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for SecretCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretCache").finish_non_exhaustive()
    }
}

impl SecretCache {
    pub(crate) fn new(source: Arc<dyn Secrets>) -> Self {
        Self { source, entries: Mutex::new(HashMap::new()) }
    }

    /// The secret `name` of `tenant`. Errors name the secret, never its value.
    pub(crate) async fn get(&self, tenant: &TenantId, name: &str) -> Result<SecretValue, WebhookError> {
        let key = (tenant.clone(), name.to_owned());
        {
            let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((at, value)) = entries.get(&key)
                && at.elapsed() < SECRET_TTL
            {
                return Ok(value.clone());
            }
        }
        let value = match self.source.get_secret(tenant, name).await {
            Ok(Some(v)) => SecretValue(Arc::from(v)),
            Ok(None) => return Err(WebhookError::Secret(format!("secret '{name}' is not set for this tenant"))),
            Err(e) => return Err(WebhookError::Secret(format!("secret '{name}' could not be read: {}", e.message))),
        };
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, (at, _)| at.elapsed() < SECRET_TTL);
        entries.insert(key, (Instant::now(), value.clone()));
        Ok(value)
    }
}
