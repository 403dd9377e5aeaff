//! `DynamoStore`: tenant configuration (`ConfigStore`, `ConfigAdmin`), sessions and execution
//! records in DynamoDB, with the same semantics as the embedded `SqliteStore` (the adapter
//! contract suite runs both). Records
//! are stored whole under `body` (via `serde_dynamo`) beside the key and condition attributes.
//! It does not create tables (the SAM template and the test harness do) and does not archive.
//!
//! # Layout (see `docs/decisions.md`, "AWS profile: data layout")
//!
//! | table | PK | SK | other attributes |
//! |---|---|---|---|
//! | config | `TENANT#<t>` | `TENANT` | `name`, `createdAt` |
//! | config | `TENANT#<t>` | `AGENT#` / `TOOL#` / `SKILL#<ulid>` | `kind`, `version`, `body` |
//! | config | `TENANT#<t>` | `TRIGGER#<ulid>` | the same, and `agentId`, `eventType`, `status` |
//! | sessions | `TENANT#<t>` | `SESSION#<ulid>` | `conversationKey`, `startKey`, `status`, `version`, `body` |
//! | sessions | `TENANT#<t>` | `ACTIVE#<conversation>` | `sessionId` (the one active session) |
//! | executions | `SESSION#<ulid>` | `EXEC#<time>#<ulid>` | `tenantId`, `expiresAt`, `body` |
//! | executions | `TENANT#<t>` | `SOURCE#<source id>` / `EXECID#<ulid>` | `executionPk`, `executionSk`, `expiresAt` |
//!
//! GSI `SessionsByConversation` on the sessions table: partition `conversationKey`
//! (`TENANT#<t>#CONV#<conversation>`), sort `startKey` (`<startedAt>#<handoff depth>#<ulid>`).
//! `expiresAt` is the executions table's TTL attribute (epoch seconds, rounded up); reads check
//! the record's own `expiresAt` against the clock, because TTL deletion is lazy (and the emulator
//! never deletes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem};
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use switchboard_domain::{
    Agent, AgentId, EventType, ExecutionId, ExecutionRecord, Session, SessionId, SessionStatus, Skill, SkillId,
    TenantId, Tool, ToolId, Trigger, TriggerStatus,
};
use switchboard_engine::{
    Clock, ConfigAdmin, ConfigKind, ConfigRecord, ConfigStore, ExecutionLog, Page, SessionStore, StoreError, TurnCommit,
};

use crate::config::AwsNames;
use crate::errors::describe;

/// The name of the sessions table's conversation index.
pub const SESSIONS_BY_CONVERSATION: &str = "SessionsByConversation";
/// How long active triggers are served from memory.
const TRIGGER_TTL: ChronoDuration = ChronoDuration::seconds(60);
/// How long an agent, a tool or a skill is served from memory.
const AGENT_TTL: ChronoDuration = ChronoDuration::minutes(5);

type Item = HashMap<String, AttributeValue>;

type TriggerCache = HashMap<(TenantId, EventType), (DateTime<Utc>, Arc<[Trigger]>)>;
type AgentCache = HashMap<(TenantId, AgentId), (DateTime<Utc>, Agent)>;
/// Tools and skills by kind and id; a miss is cached too (an agent may list a deleted tool).
type RecordCache = HashMap<(TenantId, ConfigKind, String), (DateTime<Utc>, Option<ConfigRecord>)>;

/// The AWS store. Cheap to clone; clones share the caches.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    names: Arc<AwsNames>,
    clock: Arc<dyn Clock>,
    triggers: Arc<Mutex<TriggerCache>>,
    agents: Arc<Mutex<AgentCache>>,
    records: Arc<Mutex<RecordCache>>,
}

// ---- keys -------------------------------------------------------------------------------------

fn tenant_pk(t: &TenantId) -> String {
    format!("TENANT#{t}")
}

fn config_prefix(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Agent => "AGENT#",
        ConfigKind::Trigger => "TRIGGER#",
        ConfigKind::Tool => "TOOL#",
        ConfigKind::Skill => "SKILL#",
    }
}

fn config_sk(kind: ConfigKind, id: &str) -> String {
    format!("{}{id}", config_prefix(kind))
}

fn session_sk(s: SessionId) -> String {
    format!("SESSION#{s}")
}

fn active_sk(conversation_id: &str) -> String {
    format!("ACTIVE#{conversation_id}")
}

fn conversation_key(t: &TenantId, conversation_id: &str) -> String {
    format!("TENANT#{t}#CONV#{conversation_id}")
}

/// Millisecond UTC time that sorts as text.
fn sortable(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Sessions of a conversation sort by start; a handed-to session started in the same
/// millisecond as its parent still sorts after it (depth), then by id.
fn start_key(s: &Session) -> String {
    format!("{}#{:03}#{}", sortable(s.started_at), s.handoff_depth, s.session_id)
}

fn execution_pk(s: SessionId) -> String {
    format!("SESSION#{s}")
}

/// The timestamp is the id's own (its creation time), so records sort exactly as their ids do,
/// which is the order the embedded store lists them in.
fn execution_sk(e: ExecutionId) -> String {
    let ms = i64::try_from(e.0.timestamp_ms()).unwrap_or(i64::MAX);
    let at = DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC);
    format!("EXEC#{}#{e}", sortable(at))
}

fn source_sk(source_id: &str) -> String {
    format!("SOURCE#{source_id}")
}

fn execution_id_sk(e: ExecutionId) -> String {
    format!("EXECID#{e}")
}

/// TTL value: epoch seconds, rounded up so that DynamoDB never deletes a record before it expires.
fn ttl_seconds(t: DateTime<Utc>) -> i64 {
    let s = t.timestamp();
    if t.timestamp_subsec_nanos() > 0 { s.saturating_add(1) } else { s }
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn key(pk: String, sk: String) -> Item {
    HashMap::from([("PK".to_owned(), s(pk)), ("SK".to_owned(), s(sk))])
}

// ---- encoding -----------------------------------------------------------------------------------

fn encode<T: Serialize>(v: &T) -> Result<AttributeValue, StoreError> {
    serde_dynamo::to_attribute_value(v).map_err(|e| StoreError::Corrupt(format!("encode: {e}")))
}

fn decode<T: DeserializeOwned>(item: &Item) -> Result<T, StoreError> {
    let body = item.get("body").cloned().ok_or_else(|| StoreError::Corrupt("item has no body".into()))?;
    serde_dynamo::from_attribute_value(body).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn attr_s<'a>(item: &'a Item, name: &str) -> Result<&'a str, StoreError> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .ok_or_else(|| StoreError::Corrupt(format!("item has no string '{name}'")))
}

fn decode_config(kind: ConfigKind, item: &Item) -> Result<ConfigRecord, StoreError> {
    Ok(match kind {
        ConfigKind::Agent => ConfigRecord::Agent(decode(item)?),
        ConfigKind::Trigger => ConfigRecord::Trigger(decode(item)?),
        ConfigKind::Tool => ConfigRecord::Tool(decode(item)?),
        ConfigKind::Skill => ConfigRecord::Skill(decode(item)?),
    })
}

fn status_str(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Active => "active",
        SessionStatus::HandedOff => "handed_off",
        SessionStatus::Completed => "completed",
        SessionStatus::Failed => "failed",
    }
}

fn unavailable<E>(operation: &str, err: &SdkError<E>) -> StoreError
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let f = describe(operation, err);
    tracing::warn!(operation, code = f.code.as_deref().unwrap_or("-"), retryable = f.retryable, "dynamodb call failed");
    StoreError::Unavailable { message: f.message, retryable: f.retryable }
}

fn build_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable { message: format!("building a request: {e}"), retryable: false }
}

/// Encodes a `Query` position (the last item's key) as an opaque cursor: `<PK>\n<SK>`.
fn cursor_of(item: &Item) -> Result<String, StoreError> {
    Ok(format!("{}\n{}", attr_s(item, "PK")?, attr_s(item, "SK")?))
}

/// What one item of a turn's transaction is, to explain a cancellation.
#[derive(Debug, Clone)]
enum TxRole {
    Session(SessionId),
    ActivePut(String),
    ActiveDelete,
    Execution(String),
}

impl DynamoStore {
    pub fn new(client: Client, names: AwsNames, clock: Arc<dyn Clock>) -> Self {
        Self {
            client,
            names: Arc::new(names),
            clock,
            triggers: Arc::default(),
            agents: Arc::default(),
            records: Arc::default(),
        }
    }

    pub fn names(&self) -> &AwsNames {
        &self.names
    }

    fn invalidate(&self, tenant: &TenantId) {
        if let Ok(mut cache) = self.triggers.lock() {
            cache.retain(|(t, _), _| t != tenant);
        }
        if let Ok(mut cache) = self.agents.lock() {
            cache.retain(|(t, _), _| t != tenant);
        }
        if let Ok(mut cache) = self.records.lock() {
            cache.retain(|(t, _, _), _| t != tenant);
        }
    }

    /// A tool or skill, served from memory for [`AGENT_TTL`].
    async fn cached_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: String,
    ) -> Result<Option<ConfigRecord>, StoreError> {
        let now = self.clock.now();
        let k = (tenant.clone(), kind, id);
        if let Some((_, hit)) =
            self.records.lock().ok().and_then(|c| c.get(&k).filter(|(at, _)| now - *at < AGENT_TTL).cloned())
        {
            return Ok(hit);
        }
        let found = self.get_config(tenant, kind, &k.2).await?;
        if let Ok(mut cache) = self.records.lock() {
            cache.insert(k, (now, found.clone()));
        }
        Ok(found)
    }

    async fn get_item(&self, table: &str, key: Item, operation: &str) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable(operation, &e))?;
        Ok(out.item)
    }

    /// Every item of a partition whose sort key starts with `prefix`, page by page.
    async fn query_prefix(&self, table: &str, pk: &str, prefix: &str) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(table)
                .key_condition_expression("PK = :pk AND begins_with(SK, :prefix)")
                .expression_attribute_values(":pk", s(pk))
                .expression_attribute_values(":prefix", s(prefix))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("Query", &e))?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(items),
            }
        }
    }

    /// Creates a tenant; `false` if it already existed.
    pub async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        let mut item = key(tenant_pk(tenant), "TENANT".into());
        item.insert("name".into(), s(name));
        item.insert("createdAt".into(), s(self.clock.now().to_rfc3339()));
        match self
            .client
            .put_item()
            .table_name(&self.names.config_table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => Ok(false),
            Err(e) => Err(unavailable("PutItem", &e)),
        }
    }

    async fn fetch_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError> {
        let sk = config_sk(ConfigKind::Agent, &agent.to_string());
        let item = self.get_item(&self.names.config_table, key(tenant_pk(tenant), sk), "GetItem").await?;
        item.as_ref().map(decode).transpose()
    }

    /// The execution a pointer item (`SOURCE#…` or `EXECID#…`) leads to, if it has not expired.
    async fn execution_by_pointer(&self, tenant: &TenantId, sk: String) -> Result<Option<ExecutionRecord>, StoreError> {
        let table = &self.names.executions_table;
        let Some(pointer) = self.get_item(table, key(tenant_pk(tenant), sk), "GetItem").await? else {
            return Ok(None);
        };
        let target = key(attr_s(&pointer, "executionPk")?.to_owned(), attr_s(&pointer, "executionSk")?.to_owned());
        let Some(item) = self.get_item(table, target, "GetItem").await? else {
            return Ok(None);
        };
        let record: ExecutionRecord = decode(&item)?;
        let live = record.tenant_id == *tenant && record.expires_at > self.clock.now();
        Ok(live.then_some(record))
    }

    /// The transaction items that keep the conversation's active-session marker true after the
    /// commit. Sessions written in the commit are conditional on their version, so the marker may
    /// be taken over from any of them; a marker held by another session is never overwritten.
    fn active_marker_items(&self, commit: &TurnCommit) -> Result<Vec<(TransactWriteItem, TxRole)>, StoreError> {
        let mut by_conversation: Vec<((TenantId, String), Vec<&Session>)> = Vec::new();
        for w in &commit.sessions {
            let k = (w.session.tenant_id.clone(), w.session.conversation_id.clone());
            match by_conversation.iter_mut().find(|(c, _)| *c == k) {
                Some((_, v)) => v.push(&w.session),
                None => by_conversation.push((k, vec![&w.session])),
            }
        }
        let mut items = Vec::new();
        for ((tenant, conversation), sessions) in by_conversation {
            let active: Vec<&&Session> = sessions.iter().filter(|s| s.is_active()).collect();
            if active.len() > 1 {
                return Err(StoreError::VersionConflict(format!(
                    "conversation {conversation} already has another active session"
                )));
            }
            let mut values: HashMap<String, AttributeValue> = HashMap::new();
            let mut names = Vec::with_capacity(sessions.len());
            for (i, session) in sessions.iter().enumerate() {
                values.insert(format!(":w{i}"), s(session.session_id.to_string()));
                names.push(format!(":w{i}"));
            }
            let condition = format!("attribute_not_exists(PK) OR sessionId IN ({})", names.join(", "));
            let table = &self.names.sessions_table;
            if let Some(session) = active.first() {
                let mut item = key(tenant_pk(&tenant), active_sk(&conversation));
                item.insert("sessionId".into(), s(session.session_id.to_string()));
                let put = Put::builder()
                    .table_name(table)
                    .set_item(Some(item))
                    .condition_expression(condition)
                    .set_expression_attribute_values(Some(values))
                    .build()
                    .map_err(build_err)?;
                items.push((TransactWriteItem::builder().put(put).build(), TxRole::ActivePut(conversation)));
            } else {
                let delete = Delete::builder()
                    .table_name(table)
                    .set_key(Some(key(tenant_pk(&tenant), active_sk(&conversation))))
                    .condition_expression(condition)
                    .set_expression_attribute_values(Some(values))
                    .build()
                    .map_err(build_err)?;
                items.push((TransactWriteItem::builder().delete(delete).build(), TxRole::ActiveDelete));
            }
        }
        Ok(items)
    }

    fn session_item(&self, session: &Session, expected: Option<u64>) -> Result<TransactWriteItem, StoreError> {
        let mut item = key(tenant_pk(&session.tenant_id), session_sk(session.session_id));
        item.insert("conversationKey".into(), s(conversation_key(&session.tenant_id, &session.conversation_id)));
        item.insert("startKey".into(), s(start_key(session)));
        item.insert("status".into(), s(status_str(session.status)));
        item.insert("version".into(), n(session.version));
        item.insert("body".into(), encode(session)?);
        let put = Put::builder().table_name(&self.names.sessions_table).set_item(Some(item));
        let put = match expected {
            None => put.condition_expression("attribute_not_exists(PK)"),
            Some(v) => put.condition_expression("version = :expected").expression_attribute_values(":expected", n(v)),
        };
        Ok(TransactWriteItem::builder().put(put.build().map_err(build_err)?).build())
    }

    fn execution_items(&self, e: &ExecutionRecord) -> Result<Vec<(TransactWriteItem, TxRole)>, StoreError> {
        let table = &self.names.executions_table;
        let (pk, sk) = (execution_pk(e.session_id), execution_sk(e.execution_id));
        let ttl = n(ttl_seconds(e.expires_at));
        let mut record = key(pk.clone(), sk.clone());
        record.insert("tenantId".into(), s(e.tenant_id.to_string()));
        record.insert("expiresAt".into(), ttl.clone());
        record.insert("body".into(), encode(e)?);
        let pointer = |sk_of_pointer: String| {
            let mut item = key(tenant_pk(&e.tenant_id), sk_of_pointer);
            item.insert("executionPk".into(), s(pk.clone()));
            item.insert("executionSk".into(), s(sk.clone()));
            item.insert("expiresAt".into(), ttl.clone());
            item
        };
        let mut out = Vec::with_capacity(3);
        for item in [record, pointer(source_sk(&e.source_id)), pointer(execution_id_sk(e.execution_id))] {
            let put = Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(PK)")
                .build()
                .map_err(build_err)?;
            out.push((TransactWriteItem::builder().put(put).build(), TxRole::Execution(e.source_id.clone())));
        }
        Ok(out)
    }

    /// Maps a cancelled transaction to the store error the embedded store would have given: the
    /// first failed condition in write order decides. `Ok(true)` means only the active marker's
    /// delete failed (another session holds it, which this commit must leave alone): retry
    /// without it.
    fn explain_cancellation(roles: &[TxRole], err: &SdkError<TransactWriteItemsError>) -> Result<bool, StoreError> {
        let Some(TransactWriteItemsError::TransactionCanceledException(tce)) = err.as_service_error() else {
            return Err(unavailable("TransactWriteItems", err));
        };
        let reasons = tce.cancellation_reasons();
        let failed = |code: &str| {
            reasons
                .iter()
                .zip(roles)
                .filter(move |(r, _)| r.code() == Some(code))
                .map(|(_, role)| role.clone())
                .collect::<Vec<_>>()
        };
        let conditions = failed("ConditionalCheckFailed");
        if !conditions.is_empty() && conditions.iter().all(|r| matches!(r, TxRole::ActiveDelete)) {
            return Ok(true);
        }
        if let Some(role) = conditions.iter().find(|r| !matches!(r, TxRole::ActiveDelete)) {
            return Err(match role {
                TxRole::Session(id) => StoreError::VersionConflict(format!("session {id} changed")),
                TxRole::ActivePut(conv) => {
                    StoreError::VersionConflict(format!("conversation {conv} already has another active session"))
                }
                TxRole::Execution(source) => StoreError::Duplicate(format!("source {source} already recorded")),
                TxRole::ActiveDelete => StoreError::VersionConflict("active session changed".into()),
            });
        }
        if !failed("TransactionConflict").is_empty() {
            return Err(StoreError::VersionConflict("a concurrent transaction wrote the same session".into()));
        }
        Err(unavailable("TransactWriteItems", err))
    }
}

#[async_trait]
impl ConfigAdmin for DynamoStore {
    async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        DynamoStore::create_tenant(self, tenant, name).await
    }

    /// One `TransactWriteItems`: the tenant must exist (a condition check on its marker) and the
    /// record must be new (`expected_version` `None`) or still at `expected_version`.
    async fn put_config(&self, record: &ConfigRecord, expected_version: Option<u64>) -> Result<(), StoreError> {
        let tenant = record.tenant_id().clone();
        let table = &self.names.config_table;
        let mut item = key(tenant_pk(&tenant), config_sk(record.kind(), &record.id()));
        item.insert("kind".into(), s(record.kind().as_str()));
        item.insert("version".into(), n(record.version()));
        item.insert("body".into(), encode(record)?);
        if let ConfigRecord::Trigger(t) = record {
            item.insert("agentId".into(), s(t.agent_id.to_string()));
            item.insert("eventType".into(), encode(&t.event_type)?);
            item.insert("status".into(), encode(&t.status)?);
        }
        let put = Put::builder().table_name(table).set_item(Some(item));
        let put = match expected_version {
            None => put.condition_expression("attribute_not_exists(PK)"),
            Some(v) => put.condition_expression("version = :expected").expression_attribute_values(":expected", n(v)),
        };
        let tenant_exists = ConditionCheck::builder()
            .table_name(table)
            .set_key(Some(key(tenant_pk(&tenant), "TENANT".into())))
            .condition_expression("attribute_exists(PK)")
            .build()
            .map_err(build_err)?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().condition_check(tenant_exists).build())
            .transact_items(TransactWriteItem::builder().put(put.build().map_err(build_err)?).build())
            .send()
            .await;
        self.invalidate(&tenant);
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                let conditions_failed = matches!(
                    e.as_service_error(),
                    Some(TransactWriteItemsError::TransactionCanceledException(tce))
                        if tce.cancellation_reasons().iter().any(|r| r.code() == Some("ConditionalCheckFailed"))
                );
                if conditions_failed {
                    Err(StoreError::VersionConflict(format!(
                        "{} {} changed or already exists",
                        record.kind().as_str(),
                        record.id()
                    )))
                } else {
                    Err(unavailable("TransactWriteItems", &e))
                }
            }
        }
    }

    async fn get_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
    ) -> Result<Option<ConfigRecord>, StoreError> {
        let item =
            self.get_item(&self.names.config_table, key(tenant_pk(tenant), config_sk(kind, id)), "GetItem").await?;
        item.as_ref().map(|i| decode_config(kind, i)).transpose()
    }

    /// In id order; the cursor is the last returned id, as in the embedded store.
    async fn list_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ConfigRecord>, StoreError> {
        let pk = tenant_pk(tenant);
        let mut start = cursor.map(|c| key(pk.clone(), config_sk(kind, c)));
        let want = limit.saturating_add(1);
        let mut found: Vec<ConfigRecord> = Vec::new();
        while found.len() < want {
            let out = self
                .client
                .query()
                .table_name(&self.names.config_table)
                .key_condition_expression("PK = :pk AND begins_with(SK, :prefix)")
                .expression_attribute_values(":pk", s(pk.clone()))
                .expression_attribute_values(":prefix", s(config_prefix(kind)))
                .consistent_read(true)
                .limit(i32::try_from(want - found.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("Query", &e))?;
            for item in out.items.unwrap_or_default() {
                found.push(decode_config(kind, &item)?);
            }
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        let more = found.len() > limit;
        found.truncate(limit);
        let next_cursor = if more { found.last().map(ConfigRecord::id) } else { None };
        Ok(Page { items: found, next_cursor })
    }

    async fn delete_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.names.config_table)
            .set_key(Some(key(tenant_pk(tenant), config_sk(kind, id))))
            .condition_expression("attribute_exists(PK) AND version = :expected")
            .expression_attribute_values(":expected", n(expected_version))
            .send()
            .await;
        self.invalidate(tenant);
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => {
                // Missing, or at another version: tell which.
                match self.get_config(tenant, kind, id).await? {
                    None => Ok(false),
                    Some(_) => Err(StoreError::VersionConflict(format!("{} {id} changed", kind.as_str()))),
                }
            }
            Err(e) => Err(unavailable("DeleteItem", &e)),
        }
    }
}

#[async_trait]
impl ConfigStore for DynamoStore {
    async fn tenant_exists(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        let item = self.get_item(&self.names.config_table, key(tenant_pk(tenant), "TENANT".into()), "GetItem").await?;
        Ok(item.is_some())
    }

    async fn get_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError> {
        let now = self.clock.now();
        let k = (tenant.clone(), agent);
        if let Some(hit) =
            self.agents.lock().ok().and_then(|c| c.get(&k).filter(|(at, _)| now - *at < AGENT_TTL).cloned())
        {
            return Ok(Some(hit.1));
        }
        let found = self.fetch_agent(tenant, agent).await?;
        if let (Some(a), Ok(mut cache)) = (&found, self.agents.lock()) {
            cache.insert(k, (now, a.clone()));
        }
        Ok(found)
    }

    async fn get_tool(&self, tenant: &TenantId, tool: ToolId) -> Result<Option<Tool>, StoreError> {
        match self.cached_config(tenant, ConfigKind::Tool, tool.to_string()).await? {
            Some(ConfigRecord::Tool(t)) => Ok(Some(t)),
            _ => Ok(None),
        }
    }

    async fn get_skill(&self, tenant: &TenantId, skill: SkillId) -> Result<Option<Skill>, StoreError> {
        match self.cached_config(tenant, ConfigKind::Skill, skill.to_string()).await? {
            Some(ConfigRecord::Skill(s)) => Ok(Some(s)),
            _ => Ok(None),
        }
    }

    async fn active_triggers(&self, tenant: &TenantId, event_type: EventType) -> Result<Arc<[Trigger]>, StoreError> {
        let now = self.clock.now();
        let k = (tenant.clone(), event_type);
        if let Some(hit) =
            self.triggers.lock().ok().and_then(|c| c.get(&k).filter(|(at, _)| now - *at < TRIGGER_TTL).cloned())
        {
            return Ok(hit.1);
        }
        let items = self.query_prefix(&self.names.config_table, &tenant_pk(tenant), "TRIGGER#").await?;
        let mut triggers = Vec::with_capacity(items.len());
        for item in &items {
            let trigger: Trigger = decode(item)?;
            if trigger.status == TriggerStatus::Active && trigger.event_type == event_type {
                triggers.push(trigger);
            }
        }
        switchboard_domain::trigger::sort_for_evaluation(&mut triggers);
        let triggers: Arc<[Trigger]> = triggers.into();
        if let Ok(mut cache) = self.triggers.lock() {
            cache.insert(k, (now, Arc::clone(&triggers)));
        }
        Ok(triggers)
    }
}

#[async_trait]
impl SessionStore for DynamoStore {
    async fn get_session(&self, tenant: &TenantId, session: SessionId) -> Result<Option<Session>, StoreError> {
        let item =
            self.get_item(&self.names.sessions_table, key(tenant_pk(tenant), session_sk(session)), "GetItem").await?;
        item.as_ref().map(decode).transpose()
    }

    /// The active session if there is one (by its marker, strongly consistent), else the newest.
    async fn latest_session(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Session>, StoreError> {
        let table = &self.names.sessions_table;
        if let Some(marker) =
            self.get_item(table, key(tenant_pk(tenant), active_sk(conversation_id)), "GetItem").await?
        {
            let id: SessionId = attr_s(&marker, "sessionId")?
                .parse()
                .map_err(|_| StoreError::Corrupt("active marker holds a bad session id".into()))?;
            if let Some(session) = self.get_session(tenant, id).await?
                && session.is_active()
            {
                return Ok(Some(session));
            }
        }
        let out = self
            .client
            .query()
            .table_name(table)
            .index_name(SESSIONS_BY_CONVERSATION)
            .key_condition_expression("conversationKey = :c")
            .expression_attribute_values(":c", s(conversation_key(tenant, conversation_id)))
            .scan_index_forward(false)
            .limit(1)
            .send()
            .await
            .map_err(|e| unavailable("Query", &e))?;
        out.items.unwrap_or_default().first().map(decode).transpose()
    }

    async fn sessions_for_conversation(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Vec<Session>, StoreError> {
        let mut sessions = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.names.sessions_table)
                .index_name(SESSIONS_BY_CONVERSATION)
                .key_condition_expression("conversationKey = :c")
                .expression_attribute_values(":c", s(conversation_key(tenant, conversation_id)))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("Query", &e))?;
            for item in out.items.unwrap_or_default() {
                sessions.push(decode(&item)?);
            }
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(sessions),
            }
        }
    }

    /// One `TransactWriteItems`: the session puts (each conditional on the version read or on not
    /// existing), the active-session marker, the execution record and its source and id pointers
    /// (each conditional on not existing).
    async fn commit_turn(&self, commit: &TurnCommit) -> Result<(), StoreError> {
        let mut items: Vec<(TransactWriteItem, TxRole)> = Vec::new();
        for w in &commit.sessions {
            items.push((self.session_item(&w.session, w.expected_version)?, TxRole::Session(w.session.session_id)));
        }
        items.extend(self.active_marker_items(commit)?);
        items.extend(self.execution_items(&commit.execution)?);
        loop {
            let (writes, roles): (Vec<_>, Vec<_>) = items.iter().cloned().unzip();
            match self.client.transact_write_items().set_transact_items(Some(writes)).send().await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    if Self::explain_cancellation(&roles, &e)? {
                        items.retain(|(_, role)| !matches!(role, TxRole::ActiveDelete));
                    }
                }
            }
        }
    }
}

#[async_trait]
impl ExecutionLog for DynamoStore {
    async fn execution_for_source(
        &self,
        tenant: &TenantId,
        source_id: &str,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        self.execution_by_pointer(tenant, source_sk(source_id)).await
    }

    async fn get_execution(
        &self,
        tenant: &TenantId,
        execution: ExecutionId,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        self.execution_by_pointer(tenant, execution_id_sk(execution)).await
    }

    /// Oldest first. The cursor is the last returned item's key; a page is filled across
    /// DynamoDB pages when the tenant/expiry filter drops items.
    async fn list_executions(
        &self,
        tenant: &TenantId,
        session: SessionId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ExecutionRecord>, StoreError> {
        let now = self.clock.now();
        let pk = execution_pk(session);
        let mut start = match cursor {
            Some(c) => {
                let (cpk, csk) =
                    c.split_once('\n').ok_or_else(|| StoreError::Corrupt("not a cursor of this list".into()))?;
                if cpk != pk {
                    return Err(StoreError::Corrupt("not a cursor of this list".into()));
                }
                Some(key(cpk.to_owned(), csk.to_owned()))
            }
            None => None,
        };
        let want = limit.saturating_add(1);
        let mut found: Vec<(ExecutionRecord, Item)> = Vec::new();
        while found.len() < want {
            let out = self
                .client
                .query()
                .table_name(&self.names.executions_table)
                .key_condition_expression("PK = :pk AND begins_with(SK, :exec)")
                // Coarse filter on the TTL attribute; the exact check is on the record below.
                .filter_expression("tenantId = :t AND expiresAt > :now")
                .expression_attribute_values(":pk", s(pk.clone()))
                .expression_attribute_values(":exec", s("EXEC#"))
                .expression_attribute_values(":t", s(tenant.to_string()))
                .expression_attribute_values(":now", n(now.timestamp()))
                .consistent_read(true)
                .limit(i32::try_from(want - found.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("Query", &e))?;
            for item in out.items.unwrap_or_default() {
                let record: ExecutionRecord = decode(&item)?;
                if record.expires_at > now && found.len() < want {
                    found.push((record, item));
                }
            }
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        let more = found.len() > limit;
        found.truncate(limit);
        let next_cursor = match (more, found.last()) {
            (true, Some((_, item))) => Some(cursor_of(item)?),
            _ => None,
        };
        Ok(Page { items: found.into_iter().map(|(r, _)| r).collect(), next_cursor })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up_so_nothing_is_deleted_early() {
        let t: DateTime<Utc> = "2026-11-23T07:00:00.250Z".parse().unwrap_or_default();
        assert_eq!(ttl_seconds(t), t.timestamp() + 1);
        let whole: DateTime<Utc> = "2026-11-23T07:00:00Z".parse().unwrap_or_default();
        assert_eq!(ttl_seconds(whole), whole.timestamp());
    }

    #[test]
    fn execution_keys_sort_like_their_ids() {
        let a = ExecutionId(ulid::Ulid::from_parts(1_000, 99));
        let b = ExecutionId(ulid::Ulid::from_parts(1_001, 1));
        assert!(a < b);
        assert!(execution_sk(a) < execution_sk(b));
        assert!(execution_sk(a).starts_with("EXEC#1970-01-01T00:00:01.000Z#"));
    }
}
