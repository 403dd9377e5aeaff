//! API keys: the SHA-256 of each key (never the key), the principal who holds it, its role, its
//! expiry and when it was last used. Keys are read from memory once known (`Caches`); a key's use
//! is written at most once a minute, so authenticating a request costs no write.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Row, params};
use switchboard_domain::TenantId;
use switchboard_domain::access::Role;
use switchboard_engine::StoreError;

use super::{SqliteStore, store_err};
use crate::db::atomic;

/// An API key as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    pub key_hash: String,
    /// `None`: an admin key, for every tenant.
    pub tenant: Option<TenantId>,
    pub principal: String,
    pub role: Role,
    pub created_at: String,
    pub expires_at: Option<DateTime<Utc>>,
    /// To the minute (see [`SqliteStore::note_key_use`]).
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A key to store.
#[derive(Debug, Clone, Copy)]
pub struct NewKey<'a> {
    pub key_hash: &'a str,
    pub tenant: Option<&'a TenantId>,
    pub principal: &'a str,
    pub role: Role,
    pub expires_at: Option<DateTime<Utc>>,
}

/// How long a key's recorded last use may lag behind its real one.
pub const LAST_USE_GRAIN: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

const KEY_COLUMNS: &str = "key_hash, tenant_id, principal, role, created_at, expires_at, last_used_at";

/// A tenant's keys, oldest first.
pub(super) const TENANT_KEYS: &str = "SELECT key_hash, tenant_id, principal, role, created_at, expires_at, \
     last_used_at FROM api_keys WHERE tenant_id = CAST(?1 AS TEXT) ORDER BY created_at, key_hash";

fn time(v: Option<String>) -> Option<DateTime<Utc>> {
    v.and_then(|s| DateTime::parse_from_rfc3339(&s).ok()).map(|t| t.with_timezone(&Utc))
}

fn stored_key(r: &Row<'_>) -> rusqlite::Result<StoredKey> {
    let tenant: Option<String> = r.get(1)?;
    let role: String = r.get(3)?;
    Ok(StoredKey {
        key_hash: r.get(0)?,
        tenant: tenant.and_then(|t| t.parse().ok()),
        principal: r.get(2)?,
        // A role this build does not know grants nothing more than reading.
        role: role.parse().unwrap_or(Role::Viewer),
        created_at: r.get(4)?,
        expires_at: time(r.get(5)?),
        last_used_at: time(r.get(6)?),
    })
}

impl SqliteStore {
    /// Stores a key (its hash and grant).
    pub async fn add_api_key(&self, key: NewKey<'_>) -> Result<(), StoreError> {
        let row = (
            key.key_hash.to_owned(),
            key.tenant.map(ToString::to_string),
            key.principal.to_owned(),
            key.role.as_str(),
            self.clock.now().to_rfc3339(),
            key.expires_at.map(|t| t.to_rfc3339()),
        );
        self.db
            .call(move |c| {
                c.prepare_cached(
                    "INSERT INTO api_keys (key_hash, tenant_id, principal, role, created_at, expires_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![row.0, row.1, row.2, row.3, row.4, row.5])?;
                Ok(())
            })
            .await
            .map_err(store_err)
    }

    /// The key whose hash is `key_hash`, expired or not; `None` for no such key. Known keys are
    /// read from memory; an unknown one is looked up every time (another process may add it).
    pub async fn api_key(&self, key_hash: &str) -> Result<Option<StoredKey>, StoreError> {
        if let Some(key) = self.caches.get(|e| e.keys.get(key_hash).cloned()) {
            return Ok(Some(key));
        }
        let generation = self.caches.generation();
        let h = key_hash.to_owned();
        let key = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = ?1"))?
                    .query_row(params![h], stored_key)
                    .optional()?)
            })
            .await
            .map_err(store_err)?;
        if let Some(key) = &key {
            self.caches.fill(generation, |e| {
                e.keys.insert(key.key_hash.clone(), key.clone());
            });
        }
        Ok(key)
    }

    /// Notes that the key was used `at`, when its recorded last use is older than
    /// [`LAST_USE_GRAIN`]: at most one write a minute per key.
    pub async fn note_key_use(&self, key: &StoredKey, at: DateTime<Utc>) -> Result<(), StoreError> {
        if key.last_used_at.is_some_and(|last| at - last < LAST_USE_GRAIN) {
            return Ok(());
        }
        if let Ok(mut e) = self.caches.entries.lock()
            && let Some(known) = e.keys.get_mut(&key.key_hash)
        {
            known.last_used_at = Some(at);
        }
        let (h, when) = (key.key_hash.clone(), at.to_rfc3339());
        self.db
            .call(move |c| {
                c.prepare_cached("UPDATE api_keys SET last_used_at = ?2 WHERE key_hash = ?1")?
                    .execute(params![h, when])?;
                Ok(())
            })
            .await
            .map_err(store_err)
    }

    /// A tenant's keys, oldest first.
    pub async fn tenant_api_keys(&self, tenant: &TenantId) -> Result<Vec<StoredKey>, StoreError> {
        let t = tenant.to_string();
        self.db
            .call(move |c| {
                let mut stmt = c.prepare_cached(TENANT_KEYS)?;
                let rows = stmt.query_map(params![t], stored_key)?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .map_err(store_err)
    }

    /// Deletes the tenant's key whose hash starts with `hash_prefix`: whether one was deleted.
    pub async fn revoke_api_key(&self, tenant: &TenantId, hash_prefix: &str) -> Result<bool, StoreError> {
        let (t, prefix) = (tenant.to_string(), hash_prefix.to_owned());
        let revoked = self
            .db
            .call(move |c| {
                let n = c
                    .prepare_cached("DELETE FROM api_keys WHERE tenant_id = ?1 AND substr(key_hash, 1, ?3) = ?2")?
                    .execute(params![t, prefix, i64::try_from(prefix.len()).unwrap_or(0)])?;
                Ok(n > 0)
            })
            .await
            .map_err(store_err);
        // The tenant's known keys are forgotten (the revoked one among them), whatever the answer.
        self.invalidate(tenant);
        revoked
    }

    /// Replaces the tenant's key whose hash starts with `hash_prefix` by `new_hash` with the same
    /// principal, role and expiry, in one transaction; the new key as stored, or `None` when the
    /// tenant has no such key.
    pub async fn rotate_api_key(
        &self,
        tenant: &TenantId,
        hash_prefix: &str,
        new_hash: &str,
    ) -> Result<Option<StoredKey>, StoreError> {
        let (t, prefix, new, now) =
            (tenant.to_string(), hash_prefix.to_owned(), new_hash.to_owned(), self.clock.now().to_rfc3339());
        let rotated = self
            .db
            .call(move |c| {
                let tx = atomic(c)?;
                let len = i64::try_from(prefix.len()).unwrap_or(0);
                let old = tx
                    .prepare_cached(&format!(
                        "SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant_id = ?1 AND substr(key_hash, 1, ?3) = ?2"
                    ))?
                    .query_row(params![t, prefix, len], stored_key)
                    .optional()?;
                let Some(old) = old else { return Ok(None) };
                tx.prepare_cached(
                    "INSERT INTO api_keys (key_hash, tenant_id, principal, role, created_at, expires_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    new,
                    t,
                    old.principal,
                    old.role.as_str(),
                    now,
                    old.expires_at.map(|e| e.to_rfc3339())
                ])?;
                tx.prepare_cached("DELETE FROM api_keys WHERE key_hash = ?1")?.execute(params![old.key_hash])?;
                tx.commit()?;
                Ok(Some(StoredKey { key_hash: new, created_at: now, last_used_at: None, ..old }))
            })
            .await
            .map_err(store_err);
        self.invalidate(tenant);
        rotated
    }

    /// Whether any admin key exists.
    pub async fn has_admin_key(&self) -> Result<bool, StoreError> {
        self.db
            .call(|c| Ok(c.prepare_cached("SELECT 1 FROM api_keys WHERE tenant_id IS NULL")?.exists([])?))
            .await
            .map_err(store_err)
    }
}
