//! `SqliteStore`: tenants, agents, triggers, sessions, execution records, the local conversation
//! log and the outbound event log, all in the profile's one SQLite file. Records are stored as
//! JSON bodies beside the columns that are queried, mirroring the DynamoDB key design.
//! The rules of configuration writes (validation, references, deletes of used records) are the
//! engine's `ConfigService`; this store only stores, conditionally on versions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{ErrorCode, OptionalExtension, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use switchboard_domain::{
    Agent, AgentId, EventType, ExecutionId, ExecutionRecord, OutboundEvent, Session, SessionId, SessionStatus, Skill,
    SkillId, TenantId, Tool, ToolId, Trigger, TriggerStatus,
};
use switchboard_engine::{
    Clock, ConfigAdmin, ConfigKind, ConfigRecord, ConfigStore, ConversationLog, EventLog, ExecutionLog, LoggedMessage,
    Page, SessionStore, StoreError, TurnCommit,
};

use crate::db::{Db, DbError};

pub const SCHEMA: &str = r#"
CREATE TABLE tenants (
    tenant_id  TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;
-- Agents, triggers, tools and skills: one row per record, the record as JSON. `version` is the
-- optimistic-concurrency token (the API's ETag).
CREATE TABLE config_records (
    tenant_id TEXT NOT NULL REFERENCES tenants (tenant_id),
    kind      TEXT NOT NULL,
    id        TEXT NOT NULL,
    version   INTEGER NOT NULL,
    body      TEXT NOT NULL,
    PRIMARY KEY (tenant_id, kind, id)
) STRICT;
-- Embedded API keys: only a SHA-256 of each key is kept. A NULL tenant is an admin key.
CREATE TABLE api_keys (
    key_hash   TEXT PRIMARY KEY,
    tenant_id  TEXT REFERENCES tenants (tenant_id),
    created_at TEXT NOT NULL
) STRICT;
CREATE TABLE sessions (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    status          TEXT NOT NULL,
    version         INTEGER NOT NULL,
    body            TEXT NOT NULL,
    UNIQUE (tenant_id, session_id)
) STRICT;
CREATE INDEX sessions_by_conversation ON sessions (tenant_id, conversation_id, seq);
-- At most one active session per conversation: a second concurrent start loses like a stale write.
CREATE UNIQUE INDEX one_active_session ON sessions (tenant_id, conversation_id) WHERE status = 'active';
CREATE TABLE executions (
    tenant_id    TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    source_id    TEXT NOT NULL,
    expires_at   INTEGER NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (tenant_id, execution_id)
) STRICT;
CREATE UNIQUE INDEX executions_by_source ON executions (tenant_id, source_id);
CREATE INDEX executions_by_session ON executions (tenant_id, session_id, execution_id);
CREATE TABLE messages (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    direction       TEXT NOT NULL,
    text            TEXT NOT NULL,
    idempotency_key TEXT,
    created_at      TEXT NOT NULL,
    UNIQUE (tenant_id, message_id),
    -- Per tenant: two tenants may well see the same event id.
    UNIQUE (tenant_id, idempotency_key)
) STRICT;
CREATE INDEX messages_by_conversation ON messages (tenant_id, conversation_id, seq);
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT NOT NULL UNIQUE,
    tenant_id   TEXT NOT NULL,
    detail_type TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL
) STRICT;
CREATE INDEX events_by_tenant ON events (tenant_id, seq);
"#;

/// Schema step 3: ids a client chooses are unique only where the brief's model says so. Message
/// ids per conversation (two conversations of a tenant may both have a message `m-1`), outbound
/// event ids per tenant. SQLite cannot drop a table constraint, so both tables are rebuilt with
/// their rows and sequence numbers (the event stream's `Last-Event-ID` stays valid).
pub const SCOPE_CLIENT_IDS: &str = r#"
CREATE TABLE messages_v3 (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    direction       TEXT NOT NULL,
    text            TEXT NOT NULL,
    idempotency_key TEXT,
    created_at      TEXT NOT NULL,
    UNIQUE (tenant_id, conversation_id, message_id),
    -- Reply keys derive from tenant-scoped source ids.
    UNIQUE (tenant_id, idempotency_key)
) STRICT;
INSERT INTO messages_v3 (seq, tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at)
    SELECT seq, tenant_id, conversation_id, message_id, direction, text, idempotency_key, created_at FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v3 RENAME TO messages;
CREATE INDEX messages_by_conversation ON messages (tenant_id, conversation_id, seq);
CREATE TABLE events_v3 (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT NOT NULL,
    tenant_id   TEXT NOT NULL,
    detail_type TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (tenant_id, event_id)
) STRICT;
INSERT INTO events_v3 (seq, event_id, tenant_id, detail_type, body, created_at)
    SELECT seq, event_id, tenant_id, detail_type, body, created_at FROM events;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
CREATE INDEX events_by_tenant ON events (tenant_id, seq);
"#;

/// Maps database failures onto the engine's store errors.
fn store_err(e: DbError) -> StoreError {
    let retryable = e.retryable();
    StoreError::Unavailable { message: e.to_string(), retryable }
}

fn to_json<T: Serialize>(v: &T) -> Result<String, DbError> {
    serde_json::to_string(v).map_err(|e| DbError::Task(format!("encode: {e}")))
}

fn from_json<T: DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ConstraintViolation)
}

fn status_str(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Active => "active",
        SessionStatus::HandedOff => "handed_off",
        SessionStatus::Completed => "completed",
        SessionStatus::Failed => "failed",
    }
}

/// Active triggers per tenant and event type, sorted for evaluation.
type TriggerCache = HashMap<(TenantId, EventType), Arc<[Trigger]>>;

/// The embedded store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    db: Db,
    clock: Arc<dyn Clock>,
    /// Active triggers per tenant and event type, sorted; dropped on every trigger or agent write.
    trigger_cache: Arc<Mutex<TriggerCache>>,
}

impl SqliteStore {
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock, trigger_cache: Arc::default() }
    }

    fn invalidate(&self, tenant: &TenantId) {
        if let Ok(mut cache) = self.trigger_cache.lock() {
            cache.retain(|(t, _), _| t != tenant);
        }
    }

    /// Creates a tenant; `false` if it already existed.
    pub async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        let (t, n, now) = (tenant.to_string(), name.to_owned(), self.clock.now().to_rfc3339());
        self.db
            .call(move |c| {
                Ok(c.prepare_cached("INSERT OR IGNORE INTO tenants (tenant_id, name, created_at) VALUES (?1, ?2, ?3)")?
                    .execute(params![t, n, now])?
                    > 0)
            })
            .await
            .map_err(store_err)
    }

    /// Stores the SHA-256 of an API key for `tenant` (`None`: an admin key).
    pub async fn add_api_key(&self, key_hash: &str, tenant: Option<&TenantId>) -> Result<(), StoreError> {
        let (h, t, now) = (key_hash.to_owned(), tenant.map(ToString::to_string), self.clock.now().to_rfc3339());
        self.db
            .call(move |c| {
                c.prepare_cached("INSERT INTO api_keys (key_hash, tenant_id, created_at) VALUES (?1, ?2, ?3)")?
                    .execute(params![h, t, now])?;
                Ok(())
            })
            .await
            .map_err(store_err)
    }

    /// Whom a key hash belongs to: `Some(None)` an admin, `Some(Some(t))` tenant `t`, `None` nobody.
    pub async fn api_key_owner(&self, key_hash: &str) -> Result<Option<Option<TenantId>>, StoreError> {
        let h = key_hash.to_owned();
        let row: Option<Option<String>> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached("SELECT tenant_id FROM api_keys WHERE key_hash = ?1")?
                    .query_row(params![h], |r| r.get(0))
                    .optional()?)
            })
            .await
            .map_err(store_err)?;
        Ok(row.map(|t| t.and_then(|t| t.parse().ok())))
    }

    /// Whether any admin key exists.
    pub async fn has_admin_key(&self) -> Result<bool, StoreError> {
        self.db
            .call(|c| Ok(c.prepare_cached("SELECT 1 FROM api_keys WHERE tenant_id IS NULL")?.exists([])?))
            .await
            .map_err(store_err)
    }
}

#[async_trait]
impl EventLog for SqliteStore {
    async fn events_after(
        &self,
        tenant: &TenantId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, OutboundEvent)>, StoreError> {
        self.events(tenant, after, limit).await
    }
}

impl SqliteStore {
    async fn all_sessions(&self, tenant: &TenantId, conversation_id: &str) -> Result<Vec<Session>, StoreError> {
        let (t, c) = (tenant.to_string(), conversation_id.to_owned());
        let bodies: Vec<String> = self
            .db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT body FROM sessions WHERE tenant_id = ?1 AND conversation_id = ?2 ORDER BY seq",
                )?;
                let rows = stmt.query_map(params![t, c], |r| r.get(0))?.collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        bodies.iter().map(|b| from_json(b)).collect()
    }

    /// Appends an outbound event to the event log; `None` if the tenant had logged that event id
    /// already (a replayed turn publishing again), which is logged here with tenant and id.
    pub async fn log_event(&self, event: &OutboundEvent) -> Result<Option<i64>, StoreError> {
        let (id, t, kind, now) =
            (event.id.clone(), event.tenant_id.to_string(), event.detail_type.clone(), self.clock.now().to_rfc3339());
        let body = to_json(event);
        self.db
            .call(move |c| {
                let body = body?;
                let n = c.prepare_cached("INSERT OR IGNORE INTO events (event_id, tenant_id, detail_type, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")?.execute(params![id, t, kind, body, now])?;
                Ok((n > 0).then(|| c.last_insert_rowid()))
            })
            .await
            .map_err(store_err)
            .inspect(|seq| {
                if seq.is_none() {
                    tracing::info!(tenant = %event.tenant_id, event_id = %event.id, detail_type = %event.detail_type,
                        "event already logged for this tenant; the repeat is not logged or streamed again");
                }
            })
    }

    /// A tenant's events after sequence number `after`, oldest first.
    pub async fn events(
        &self,
        tenant: &TenantId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, OutboundEvent)>, StoreError> {
        let t = tenant.to_string();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<(i64, String)> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT seq, body FROM events WHERE tenant_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )?;
                let rows =
                    stmt.query_map(params![t, after, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        rows.into_iter().map(|(seq, b)| Ok((seq, from_json(&b)?))).collect()
    }

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
impl ConfigStore for SqliteStore {
    async fn tenant_exists(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        let t = tenant.to_string();
        self.db
            .call(move |c| Ok(c.prepare_cached("SELECT 1 FROM tenants WHERE tenant_id = ?1")?.exists(params![t])?))
            .await
            .map_err(store_err)
    }

    async fn get_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError> {
        let (t, a) = (tenant.to_string(), agent.to_string());
        let body: Option<String> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached(
                    "SELECT body FROM config_records WHERE tenant_id = ?1 AND kind = 'agent' AND id = ?2",
                )?
                .query_row(params![t, a], |r| r.get(0))
                .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    async fn get_tool(&self, tenant: &TenantId, tool: ToolId) -> Result<Option<Tool>, StoreError> {
        match self.get_config(tenant, ConfigKind::Tool, &tool.to_string()).await? {
            Some(ConfigRecord::Tool(t)) => Ok(Some(t)),
            _ => Ok(None),
        }
    }

    async fn get_skill(&self, tenant: &TenantId, skill: SkillId) -> Result<Option<Skill>, StoreError> {
        match self.get_config(tenant, ConfigKind::Skill, &skill.to_string()).await? {
            Some(ConfigRecord::Skill(s)) => Ok(Some(s)),
            _ => Ok(None),
        }
    }

    async fn active_triggers(&self, tenant: &TenantId, event_type: EventType) -> Result<Arc<[Trigger]>, StoreError> {
        let key = (tenant.clone(), event_type);
        if let Some(hit) = self.trigger_cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(hit);
        }
        let t = tenant.to_string();
        let bodies: Vec<String> = self
            .db
            .call(move |c| {
                let mut stmt =
                    c.prepare_cached("SELECT body FROM config_records WHERE tenant_id = ?1 AND kind = 'trigger'")?;
                let rows = stmt.query_map(params![t], |r| r.get(0))?.collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let mut triggers = Vec::with_capacity(bodies.len());
        for b in &bodies {
            let trigger: Trigger = from_json(b)?;
            if trigger.status == TriggerStatus::Active && trigger.event_type == event_type {
                triggers.push(trigger);
            }
        }
        switchboard_domain::trigger::sort_for_evaluation(&mut triggers);
        let triggers: Arc<[Trigger]> = triggers.into();
        if let Ok(mut cache) = self.trigger_cache.lock() {
            cache.insert(key, Arc::clone(&triggers));
        }
        Ok(triggers)
    }
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn get_session(&self, tenant: &TenantId, session: SessionId) -> Result<Option<Session>, StoreError> {
        let (t, s) = (tenant.to_string(), session.to_string());
        let body: Option<String> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached("SELECT body FROM sessions WHERE tenant_id = ?1 AND session_id = ?2")?
                    .query_row(params![t, s], |r| r.get(0))
                    .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    async fn sessions_for_conversation(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Vec<Session>, StoreError> {
        self.all_sessions(tenant, conversation_id).await
    }

    async fn latest_session(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Session>, StoreError> {
        let (t, conv) = (tenant.to_string(), conversation_id.to_owned());
        let body: Option<String> = self
            .db
            .call(move |c| {
                // The active session if there is one, else the newest.
                Ok(c.prepare_cached(
                    "SELECT body FROM sessions WHERE tenant_id = ?1 AND conversation_id = ?2
                     ORDER BY (status = 'active') DESC, seq DESC LIMIT 1",
                )?
                .query_row(params![t, conv], |r| r.get(0))
                .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    async fn commit_turn(&self, commit: &TurnCommit) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(commit.sessions.len());
        for w in &commit.sessions {
            let s = &w.session;
            let body = serde_json::to_string(s).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            writes.push((
                s.tenant_id.to_string(),
                s.session_id.to_string(),
                s.conversation_id.clone(),
                status_str(s.status),
                i64::try_from(s.version).unwrap_or(i64::MAX),
                w.expected_version.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
                body,
            ));
        }
        let e = &commit.execution;
        let exec = (
            e.tenant_id.to_string(),
            e.execution_id.to_string(),
            e.session_id.to_string(),
            e.source_id.clone(),
            e.expires_at.timestamp_millis(),
            serde_json::to_string(e).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        );
        self.db
            .call(move |c| {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                for (t, sid, conv, status, version, expected, body) in &writes {
                    let changed = match expected {
                        None => tx
                            .prepare_cached(
                                "INSERT INTO sessions (tenant_id, session_id, conversation_id, status, version, body)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                            )?
                            .execute(params![t, sid, conv, status, version, body]),
                        Some(expected) => tx
                            .prepare_cached(
                                "UPDATE sessions SET status = ?3, version = ?4, body = ?5
                             WHERE tenant_id = ?1 AND session_id = ?2 AND version = ?6",
                            )?
                            .execute(params![t, sid, status, version, body, expected]),
                    };
                    match changed {
                        Ok(1) => {}
                        Ok(_) => return Ok(Err(StoreError::VersionConflict(format!("session {sid} changed")))),
                        Err(e) if is_constraint(&e) => {
                            return Ok(Err(StoreError::VersionConflict(format!(
                                "conversation {conv} already has another active session"
                            ))));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                let (t, id, sid, source, expires, body) = &exec;
                match tx
                    .prepare_cached(
                        "INSERT INTO executions (tenant_id, execution_id, session_id, source_id, expires_at, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?
                    .execute(params![t, id, sid, source, expires, body])
                {
                    Ok(_) => {}
                    Err(e) if is_constraint(&e) => {
                        return Ok(Err(StoreError::Duplicate(format!("source {source} already recorded"))));
                    }
                    Err(e) => return Err(e.into()),
                }
                tx.commit()?;
                Ok(Ok(()))
            })
            .await
            .map_err(store_err)?
    }
}

#[async_trait]
impl ExecutionLog for SqliteStore {
    async fn execution_for_source(
        &self,
        tenant: &TenantId,
        source_id: &str,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let (t, s, now) = (tenant.to_string(), source_id.to_owned(), self.clock.now().timestamp_millis());
        let body: Option<String> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached(
                    "SELECT body FROM executions WHERE tenant_id = ?1 AND source_id = ?2 AND expires_at > ?3",
                )?
                .query_row(params![t, s, now], |r| r.get(0))
                .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    async fn get_execution(
        &self,
        tenant: &TenantId,
        execution: ExecutionId,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let (t, e, now) = (tenant.to_string(), execution.to_string(), self.clock.now().timestamp_millis());
        let body: Option<String> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached(
                    "SELECT body FROM executions WHERE tenant_id = ?1 AND execution_id = ?2 AND expires_at > ?3",
                )?
                .query_row(params![t, e, now], |r| r.get(0))
                .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    async fn list_executions(
        &self,
        tenant: &TenantId,
        session: SessionId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ExecutionRecord>, StoreError> {
        let (t, s, now) = (tenant.to_string(), session.to_string(), self.clock.now().timestamp_millis());
        let after = cursor.unwrap_or("").to_owned();
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows: Vec<(String, String)> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT execution_id, body FROM executions
                     WHERE tenant_id = ?1 AND session_id = ?2 AND execution_id > ?3 AND expires_at > ?4
                     ORDER BY execution_id LIMIT ?5",
                )?;
                let rows = stmt
                    .query_map(params![t, s, after, now, fetch], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let more = rows.len() > limit;
        let mut items = Vec::with_capacity(rows.len().min(limit));
        let mut last = None;
        for (id, body) in rows.into_iter().take(limit) {
            items.push(from_json(&body)?);
            last = Some(id);
        }
        Ok(Page { items, next_cursor: if more { last } else { None } })
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

fn decode(kind: ConfigKind, body: &str) -> Result<ConfigRecord, StoreError> {
    Ok(match kind {
        ConfigKind::Agent => ConfigRecord::Agent(from_json(body)?),
        ConfigKind::Trigger => ConfigRecord::Trigger(from_json(body)?),
        ConfigKind::Tool => ConfigRecord::Tool(from_json(body)?),
        ConfigKind::Skill => ConfigRecord::Skill(from_json(body)?),
    })
}

#[async_trait]
impl ConfigAdmin for SqliteStore {
    async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        SqliteStore::create_tenant(self, tenant, name).await
    }

    async fn put_config(&self, record: &ConfigRecord, expected_version: Option<u64>) -> Result<(), StoreError> {
        let tenant = record.tenant_id().clone();
        let (t, kind, id) = (tenant.to_string(), record.kind().as_str(), record.id());
        let version = i64::try_from(record.version()).unwrap_or(i64::MAX);
        let expected = expected_version.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        let body = serde_json::to_string(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let written = self
            .db
            .call(move |c| {
                let result = match expected {
                    None => c
                        .prepare_cached(
                            "INSERT INTO config_records (tenant_id, kind, id, version, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                        )?
                        .execute(params![t, kind, id, version, body]),
                    Some(expected) => c
                        .prepare_cached(
                            "UPDATE config_records SET version = ?4, body = ?5
                             WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3 AND version = ?6",
                        )?
                        .execute(params![t, kind, id, version, body, expected]),
                };
                match result {
                    Ok(1) => Ok(true),
                    Ok(_) => Ok(false),
                    Err(e) if is_constraint(&e) => Ok(false),
                    Err(e) => Err(e.into()),
                }
            })
            .await
            .map_err(store_err)?;
        self.invalidate(&tenant);
        if written {
            Ok(())
        } else {
            Err(StoreError::VersionConflict(format!(
                "{} {} changed or already exists",
                record.kind().as_str(),
                record.id()
            )))
        }
    }

    async fn get_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
    ) -> Result<Option<ConfigRecord>, StoreError> {
        let (t, k, id) = (tenant.to_string(), kind.as_str(), id.to_owned());
        let body: Option<String> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached("SELECT body FROM config_records WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3")?
                    .query_row(params![t, k, id], |r| r.get(0))
                    .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| decode(kind, &b)).transpose()
    }

    async fn list_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ConfigRecord>, StoreError> {
        let (t, k, after) = (tenant.to_string(), kind.as_str(), cursor.unwrap_or("").to_owned());
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows: Vec<(String, String)> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT id, body FROM config_records WHERE tenant_id = ?1 AND kind = ?2 AND id > ?3 ORDER BY id LIMIT ?4",
                )?;
                let rows =
                    stmt.query_map(params![t, k, after, fetch], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let more = rows.len() > limit;
        let mut items = Vec::with_capacity(rows.len().min(limit));
        let mut last = None;
        for (id, body) in rows.into_iter().take(limit) {
            items.push(decode(kind, &body)?);
            last = Some(id);
        }
        Ok(Page { items, next_cursor: if more { last } else { None } })
    }

    async fn delete_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let (t, k, id_owned) = (tenant.to_string(), kind.as_str(), id.to_owned());
        let expected = i64::try_from(expected_version).unwrap_or(i64::MAX);
        let outcome: Option<i64> = self
            .db
            .call(move |c| {
                let tx = c.transaction()?;
                let current: Option<i64> = tx
                    .prepare_cached(
                        "SELECT version FROM config_records WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3",
                    )?
                    .query_row(params![t, k, id_owned], |r| r.get(0))
                    .optional()?;
                if current == Some(expected) {
                    tx.prepare_cached("DELETE FROM config_records WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3")?
                        .execute(params![t, k, id_owned])?;
                    tx.commit()?;
                }
                Ok(current)
            })
            .await
            .map_err(store_err)?;
        self.invalidate(tenant);
        match outcome {
            None => Ok(false),
            Some(v) if v == expected => Ok(true),
            Some(_) => Err(StoreError::VersionConflict(format!("{} {id} changed", kind.as_str()))),
        }
    }
}
