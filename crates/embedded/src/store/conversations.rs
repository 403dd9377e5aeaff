//! The local conversation log: inbound messages as they arrive, replies under their
//! idempotency keys.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use switchboard_domain::TenantId;
use switchboard_engine::{ConversationLog, LoggedMessage, StoreError};

use super::{SqliteStore, store_err};

impl SqliteStore {
    /// Records an outbound reply under its idempotency key; returns its message id and whether
    /// the key had been used already.
    pub async fn record_reply(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<(String, bool), StoreError> {
        let (t, conv, text, key, now) = (
            tenant.to_string(),
            conversation_id.to_owned(),
            text.to_owned(),
            idempotency_key.to_owned(),
            self.clock.now().to_rfc3339(),
        );
        let message_id = format!("reply-{}", ulid::Ulid::generate());
        self.db
            .call(move |c| {
                let tx = c.transaction()?;
                let existing: Option<String> = tx
                    .prepare_cached("SELECT message_id FROM messages WHERE tenant_id = ?1 AND idempotency_key = ?2")?
                    .query_row(params![t, key], |r| r.get(0))
                    .optional()?;
                if let Some(id) = existing {
                    return Ok((id, true));
                }
                tx.prepare_cached("INSERT INTO messages (tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at)
                     VALUES (?1, ?2, ?3, 'outbound', ?4, ?5, ?6)")?.execute(params![t, conv, message_id, text, key, now])?;
                tx.commit()?;
                Ok((message_id, false))
            })
            .await
            .map_err(store_err)
    }
}

#[async_trait]
impl ConversationLog for SqliteStore {
    async fn record_inbound(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        message_id: &str,
        text: &str,
    ) -> Result<bool, StoreError> {
        let (t, c, m, text, now) = (
            tenant.to_string(),
            conversation_id.to_owned(),
            message_id.to_owned(),
            text.to_owned(),
            self.clock.now().to_rfc3339(),
        );
        self.db
            .call(move |conn| {
                Ok(conn.prepare_cached("INSERT OR IGNORE INTO messages (tenant_id, conversation_id, message_id, direction, text, created_at)
                     VALUES (?1, ?2, ?3, 'inbound', ?4, ?5)")?.execute(params![t, c, m, text, now])? > 0)
            })
            .await
            .map_err(store_err)
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<LoggedMessage>, StoreError> {
        let (t, c) = (tenant.to_string(), conversation_id.to_owned());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<(String, String, String, String)> = self
            .db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT message_id, direction, text, created_at FROM messages
                     WHERE tenant_id = ?1 AND conversation_id = ?2 ORDER BY seq LIMIT ?3",
                )?;
                let rows = stmt
                    .query_map(params![t, c, limit], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        rows.into_iter()
            .map(|(message_id, direction, text, at)| {
                let created_at = chrono::DateTime::parse_from_rfc3339(&at)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?
                    .with_timezone(&chrono::Utc);
                Ok(LoggedMessage { message_id, direction, text, created_at })
            })
            .collect()
    }
}
