//! Tenant counters in SQLite: one row per tenant and window, changed by single upserts (SQLite
//! runs one writer at a time, so a count never passes its limit). A tenant's expired rows are
//! deleted as its new ones are written. Session slots are rows of `session_slots`, taken and
//! freed in one transaction each (the only connection serialises them).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::params;
use switchboard_domain::TenantId;
use switchboard_engine::{Counters, Slot, StoreError};

use super::{SqliteStore, store_err};
use crate::db::atomic;

#[async_trait]
impl Counters for SqliteStore {
    async fn take(
        &self,
        tenant: &TenantId,
        window: &str,
        limit: u64,
        expires: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let (t, w, now) = (tenant.to_string(), window.to_owned(), self.clock.now().timestamp_millis());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let expires = expires.timestamp_millis();
        self.db
            .call(move |c| {
                let tx = atomic(c)?;
                tx.prepare_cached("DELETE FROM tenant_counters WHERE tenant_id = ?1 AND expires_ms < ?2")?
                    .execute(params![t, now])?;
                // Inserting counts 1 (every limit is at least 1); an existing row counts on only
                // while under the limit. No row changed: the limit is reached.
                let changed = tx
                    .prepare_cached(
                        "INSERT INTO tenant_counters (tenant_id, window_key, count, notified, expires_ms)
                         VALUES (?1, ?2, 1, 0, ?3)
                         ON CONFLICT (tenant_id, window_key) DO UPDATE SET count = count + 1 WHERE count < ?4",
                    )?
                    .execute(params![t, w, expires, limit])?;
                tx.commit()?;
                Ok(changed == 1)
            })
            .await
            .map_err(store_err)
    }

    async fn first(&self, tenant: &TenantId, window: &str, expires: DateTime<Utc>) -> Result<bool, StoreError> {
        let (t, w, expires) = (tenant.to_string(), window.to_owned(), expires.timestamp_millis());
        self.db
            .call(move |c| {
                let changed = c
                    .prepare_cached(
                        "INSERT INTO tenant_counters (tenant_id, window_key, count, notified, expires_ms)
                         VALUES (?1, ?2, 0, 1, ?3)
                         ON CONFLICT (tenant_id, window_key) DO UPDATE SET notified = 1 WHERE notified = 0",
                    )?
                    .execute(params![t, w, expires])?;
                Ok(changed == 1)
            })
            .await
            .map_err(store_err)
    }

    async fn hold_slot(
        &self,
        tenant: &TenantId,
        conversation: &str,
        limit: u64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Slot, StoreError> {
        let (t, conv) = (tenant.to_string(), conversation.to_string());
        let (now, until) = (now.timestamp_millis(), until.timestamp_millis());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (slot, frees_at) = self
            .db
            .call(move |c| {
                let tx = atomic(c)?;
                let renewed = tx
                    .prepare_cached(
                        "UPDATE session_slots SET held_until_ms = ?3 WHERE tenant_id = ?1 AND conversation_id = ?2",
                    )?
                    .execute(params![t, conv, until])?;
                if renewed == 1 {
                    tx.commit()?;
                    return Ok((Some(false), None));
                }
                let count = |tx: &rusqlite::Connection| -> rusqlite::Result<i64> {
                    tx.prepare_cached("SELECT count(*) FROM session_slots WHERE tenant_id = ?1")?
                        .query_row(params![t], |r| r.get(0))
                };
                let mut held = count(&tx)?;
                if held >= limit {
                    tx.prepare_cached("DELETE FROM session_slots WHERE tenant_id = ?1 AND held_until_ms <= ?2")?
                        .execute(params![t, now])?;
                    held = count(&tx)?;
                }
                if held >= limit {
                    let first: Option<i64> = tx
                        .prepare_cached("SELECT min(held_until_ms) FROM session_slots WHERE tenant_id = ?1")?
                        .query_row(params![t], |r| r.get(0))?;
                    return Ok((None, first));
                }
                tx.prepare_cached(
                    "INSERT INTO session_slots (tenant_id, conversation_id, held_until_ms) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![t, conv, until])?;
                tx.commit()?;
                Ok((Some(true), None))
            })
            .await
            .map_err(store_err)?;
        Ok(match slot {
            Some(new) => Slot::Held { new },
            None => Slot::Full {
                frees_at: frees_at.and_then(DateTime::from_timestamp_millis).unwrap_or_else(|| self.clock.now()),
            },
        })
    }

    async fn release_slot(&self, tenant: &TenantId, conversation: &str) -> Result<(), StoreError> {
        let (t, conv) = (tenant.to_string(), conversation.to_string());
        self.db
            .call(move |c| {
                c.prepare_cached("DELETE FROM session_slots WHERE tenant_id = ?1 AND conversation_id = ?2")?
                    .execute(params![t, conv])?;
                Ok(())
            })
            .await
            .map_err(store_err)
    }
}
