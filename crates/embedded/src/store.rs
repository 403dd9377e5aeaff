//! `SqliteStore`: tenants, agents, triggers, sessions, execution records, the local conversation
//! log and the outbound event log, all in the profile's one SQLite file. Records are stored as
//! JSON bodies beside the columns that are queried, mirroring the DynamoDB key design.
//! Referential checks (a trigger's agent belongs to the same tenant) happen on write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{ErrorCode, OptionalExtension, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use switchboard_domain::{
    Agent, AgentId, EventType, ExecutionId, ExecutionRecord, OutboundEvent, Session, SessionId, SessionStatus,
    TenantId, Trigger, TriggerStatus, ValidationErrors,
};
use switchboard_engine::{
    Clock, ConfigStore, ConversationLog, EventLog, ExecutionLog, LoggedMessage, Page, SessionStore, StoreError,
    TurnCommit,
};

use crate::db::{Db, DbError};

pub const SCHEMA: &str = r#"
CREATE TABLE tenants (
    tenant_id  TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;
CREATE TABLE agents (
    tenant_id TEXT NOT NULL REFERENCES tenants (tenant_id),
    agent_id  TEXT NOT NULL,
    status    TEXT NOT NULL,
    body      TEXT NOT NULL,
    PRIMARY KEY (tenant_id, agent_id)
) STRICT;
CREATE TABLE triggers (
    tenant_id  TEXT NOT NULL REFERENCES tenants (tenant_id),
    trigger_id TEXT NOT NULL,
    agent_id   TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (tenant_id, trigger_id),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, agent_id)
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
    idempotency_key TEXT UNIQUE,
    created_at      TEXT NOT NULL,
    UNIQUE (tenant_id, message_id)
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

/// Why a configuration write was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigWriteError {
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
    #[error(transparent)]
    Store(#[from] StoreError),
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

    /// Creates or replaces an agent after validating it.
    pub async fn put_agent(&self, agent: &Agent) -> Result<(), ConfigWriteError> {
        agent.validate()?;
        self.require_tenant(&agent.tenant_id).await?;
        let (t, id, status) = (agent.tenant_id.to_string(), agent.agent_id.to_string(), to_json(&agent.status));
        let body = to_json(agent);
        self.db
            .call(move |c| {
                let (body, status) = (body?, status?);
                c.prepare_cached(
                    "INSERT INTO agents (tenant_id, agent_id, status, body) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (tenant_id, agent_id) DO UPDATE SET status = excluded.status, body = excluded.body",
                )?
                .execute(params![t, id, status, body])?;
                Ok(())
            })
            .await
            .map_err(store_err)?;
        self.invalidate(&agent.tenant_id);
        Ok(())
    }

    /// Creates or replaces a trigger after validating it; its agent must exist in the same tenant.
    pub async fn put_trigger(&self, trigger: &Trigger) -> Result<(), ConfigWriteError> {
        trigger.validate()?;
        self.require_tenant(&trigger.tenant_id).await?;
        if self.get_agent(&trigger.tenant_id, trigger.agent_id).await?.is_none() {
            return Err(ValidationErrors::single(
                "/agentId",
                format!("no agent '{}' in tenant '{}'", trigger.agent_id, trigger.tenant_id),
            )
            .into());
        }
        let (t, id, agent) =
            (trigger.tenant_id.to_string(), trigger.trigger_id.to_string(), trigger.agent_id.to_string());
        let body = to_json(trigger);
        self.db
            .call(move |c| {
                let body = body?;
                c.prepare_cached("INSERT INTO triggers (tenant_id, trigger_id, agent_id, body) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (tenant_id, trigger_id) DO UPDATE SET agent_id = excluded.agent_id, body = excluded.body")?.execute(params![t, id, agent, body])?;
                Ok(())
            })
            .await
            .map_err(store_err)?;
        self.invalidate(&trigger.tenant_id);
        Ok(())
    }

    async fn require_tenant(&self, tenant: &TenantId) -> Result<(), ConfigWriteError> {
        if self.tenant_exists(tenant).await? {
            Ok(())
        } else {
            Err(ValidationErrors::single("/tenantId", format!("no tenant '{tenant}'")).into())
        }
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

    /// Appends an outbound event to the event log; `false` if its id was already logged.
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
                    .prepare_cached("SELECT message_id FROM messages WHERE idempotency_key = ?1")?
                    .query_row(params![key], |r| r.get(0))
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
                Ok(c.prepare_cached("SELECT body FROM agents WHERE tenant_id = ?1 AND agent_id = ?2")?
                    .query_row(params![t, a], |r| r.get(0))
                    .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
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
                let mut stmt = c.prepare_cached("SELECT body FROM triggers WHERE tenant_id = ?1")?;
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
