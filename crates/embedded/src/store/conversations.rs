//! The local conversation log: inbound messages as they arrive, replies under their
//! idempotency keys, and other outbound messages (a human operator's, posted as outbound
//! `message.new` events). Who wrote a message follows from how it was logged: inbound is the
//! customer, outbound with an idempotency key an agent, outbound without one a human; a message an
//! operator sent from the console has an idempotency key and says `sender = 'human'`.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use switchboard_domain::TenantId;
use switchboard_engine::{ConversationLog, LoggedMessage, Sender, StoreError};

use super::{SqliteStore, store_err};
use crate::db::{DbError, atomic};

/// The columns of a logged message, with its sender derived (see the module docs).
macro_rules! message_columns {
    () => {
        "message_id, direction, text, created_at, COALESCE(sender,
         CASE WHEN direction = 'inbound' THEN 'customer' WHEN idempotency_key IS NULL THEN 'human' ELSE 'agent' END)"
    };
}

/// A conversation's first messages, oldest first (tenant, conversation, how many). The parameters
/// are cast, the limit too (see `crate::db`, "Plans that stay").
pub(crate) const OLDEST_MESSAGES: &str = concat!(
    "SELECT ",
    message_columns!(),
    " FROM messages WHERE tenant_id = CAST(?1 AS TEXT) AND conversation_id = CAST(?2 AS TEXT)
     ORDER BY seq ASC LIMIT CAST(?3 AS INTEGER)"
);

/// A conversation's last messages, newest first; read for every turn's history.
pub(crate) const NEWEST_MESSAGES: &str = concat!(
    "SELECT ",
    message_columns!(),
    " FROM messages WHERE tenant_id = CAST(?1 AS TEXT) AND conversation_id = CAST(?2 AS TEXT)
     ORDER BY seq DESC LIMIT CAST(?3 AS INTEGER)"
);

type Row = (String, String, String, String, String);

fn logged((message_id, direction, text, at, sender): Row) -> Result<LoggedMessage, StoreError> {
    let created_at = chrono::DateTime::parse_from_rfc3339(&at)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?
        .with_timezone(&chrono::Utc);
    let sender = match sender.as_str() {
        "customer" => Sender::Customer,
        "agent" => Sender::Agent,
        _ => Sender::Human,
    };
    Ok(LoggedMessage { message_id, direction, sender, text, created_at })
}

impl SqliteStore {
    /// Records an outbound message that no agent sent (a human operator's, from an outbound
    /// `message.new` event); `false` if it was not logged: that message id is there already, or
    /// it is an agent's reply echoed back (the text of one of the conversation's replies).
    pub async fn record_human(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        message_id: &str,
        text: &str,
    ) -> Result<bool, StoreError> {
        // An agent's reply echoed back under another id is not a human's message either.
        const SQL: &str =
            "INSERT OR IGNORE INTO messages (tenant_id, conversation_id, message_id, direction, text, created_at)
             SELECT ?1, ?2, ?3, 'outbound', ?4, ?5 WHERE NOT EXISTS (SELECT 1 FROM messages
               WHERE tenant_id = ?1 AND conversation_id = ?2 AND idempotency_key IS NOT NULL AND text = ?4)";
        self.log_message(SQL, tenant, conversation_id, message_id, text).await
    }

    /// Runs `sql`, an insert into the log taking (tenant, conversation, message id, text, now);
    /// whether a row was added.
    async fn log_message(
        &self,
        sql: &'static str,
        tenant: &TenantId,
        conversation_id: &str,
        message_id: &str,
        text: &str,
    ) -> Result<bool, StoreError> {
        let write = self.log_write(sql, tenant, conversation_id, message_id, text);
        self.db.call(move |conn| write(conn)).await.map_err(store_err)
    }

    /// [`SqliteStore::log_message`] as a write to run inside a database call.
    fn log_write(
        &self,
        sql: &'static str,
        tenant: &TenantId,
        conversation_id: &str,
        message_id: &str,
        text: &str,
    ) -> impl FnOnce(&rusqlite::Connection) -> Result<bool, DbError> + Send + 'static {
        let (t, c, m, text, now) = (
            tenant.to_string(),
            conversation_id.to_owned(),
            message_id.to_owned(),
            text.to_owned(),
            self.clock.now().to_rfc3339(),
        );
        move |conn| Ok(conn.prepare_cached(sql)?.execute(params![t, c, m, text, now])? > 0)
    }

    /// The conversation's newest `limit` messages, oldest first.
    pub async fn recent_messages(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<LoggedMessage>, StoreError> {
        let mut newest_first = self.select_messages(tenant, conversation_id, limit, NEWEST_MESSAGES).await?;
        newest_first.reverse();
        Ok(newest_first)
    }

    /// The conversation's first `limit` messages as `sql` orders them ([`OLDEST_MESSAGES`] or
    /// [`NEWEST_MESSAGES`]).
    async fn select_messages(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
        sql: &'static str,
    ) -> Result<Vec<LoggedMessage>, StoreError> {
        let (t, c) = (tenant.to_string(), conversation_id.to_owned());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<Row> = self
            .db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(sql)?;
                let rows = stmt
                    .query_map(params![t, c, limit], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        rows.into_iter().map(logged).collect()
    }

    /// Records an outbound message (an agent's reply, or a human operator's sent from the
    /// console) under its idempotency key; returns its message id and whether the key had been
    /// used already.
    pub async fn record_sent(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        text: &str,
        idempotency_key: &str,
        sender: Sender,
    ) -> Result<(String, bool), StoreError> {
        let human = sender == Sender::Human;
        let (t, conv, text, key, now) = (
            tenant.to_string(),
            conversation_id.to_owned(),
            text.to_owned(),
            idempotency_key.to_owned(),
            self.clock.now().to_rfc3339(),
        );
        let message_id = format!("{}-{}", if human { "human" } else { "reply" }, ulid::Ulid::generate());
        self.db
            .call(move |c| {
                let tx = atomic(c)?;
                let existing: Option<String> = tx
                    .prepare_cached("SELECT message_id FROM messages WHERE tenant_id = ?1 AND idempotency_key = ?2")?
                    .query_row(params![t, key], |r| r.get(0))
                    .optional()?;
                if let Some(id) = existing {
                    return Ok((id, true));
                }
                tx.prepare_cached("INSERT INTO messages (tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at, sender)
                     VALUES (?1, ?2, ?3, 'outbound', ?4, ?5, ?6, ?7)")?
                    .execute(params![t, conv, message_id, text, key, now, human.then_some("human")])?;
                tx.commit()?;
                Ok((message_id, false))
            })
            .await
            .map_err(store_err)
    }
}

/// Logs an inbound message unless its id is there already.
const INBOUND: &str =
    "INSERT OR IGNORE INTO messages (tenant_id, conversation_id, message_id, direction, text, created_at)
     VALUES (?1, ?2, ?3, 'inbound', ?4, ?5)";

impl SqliteStore {
    /// [`ConversationLog::record_inbound`] as a write to run inside another database call (the
    /// embedded intake makes it with the enqueue: see `crate::runtime`); whether a row was added.
    pub(crate) fn inbound_write(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        message_id: &str,
        text: &str,
    ) -> impl FnOnce(&rusqlite::Connection) -> Result<bool, DbError> + Send + 'static {
        self.log_write(INBOUND, tenant, conversation_id, message_id, text)
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
        self.log_message(INBOUND, tenant, conversation_id, message_id, text).await
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        limit: usize,
    ) -> Result<Vec<LoggedMessage>, StoreError> {
        self.select_messages(tenant, conversation_id, limit, OLDEST_MESSAGES).await
    }
}
