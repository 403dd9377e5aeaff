//! `DynamoStore`: tenant configuration (`ConfigStore`, `ConfigAdmin`), sessions and execution
//! records in DynamoDB, with the same semantics as the embedded `SqliteStore` (the adapter
//! contract suite runs both). Records are stored whole under `body` (via `serde_dynamo`) beside
//! the key and condition attributes. One file per concern: `keys` (the layout below), `codec`
//! (items ⇄ records, errors), `page` (reading a query page after page), `config`, `sessions`
//! (turn commits), `usage` (what a commit adds to the usage counters), `insights`, `idle` (the
//! sessions due to close when idle), `executions`, `versions` (kept configuration versions).
//! It does not create tables (the SAM template and the test harness do) and does not archive.
//! `standin` is apart: the optional Conversations Service stand-in's message log, in a table of
//! its own (layout in its module).
//!
//! # Layout (see `docs/decisions.md`, "AWS profile: data layout")
//!
//! | table | PK | SK | other attributes |
//! |---|---|---|---|
//! | config | `TENANT#<t>` | `TENANT` | `name`, `createdAt` |
//! | config | `TENANT#<t>` | `AGENT#` / `TOOL#` / `SKILL#<ulid>` | `kind`, `version`, `body` |
//! | config | `TENANT#<t>` | `TRIGGER#<ulid>` | the same, and `agentId`, `eventType`, `status`; an active schedule trigger's `scheduleSpec`, `nextSlot`, `dueShard` |
//! | config | `TENANT#<t>` | `VERSION#<KIND>#<ulid>#<version, 20 digits>` | `version`, `writtenAt`, `writtenBy`, `deleted`, `body` (kept versions, never updated) |
//! | sessions | `TENANT#<t>` | `SESSION#<ulid>` | `conversationKey`, `startKey`, `status`, `version`, `body`; while a turn is paused for an approval, `awaitingTenant` and `awaitingSince`; while it is due to close when idle, `idleShard` and `idleAt` |
//! | sessions | `TENANT#<t>` | `ACTIVE#<conversation>` | `sessionId` (the one active session, or the one a human operator owns: then `owner` = `human`, `agentId`) |
//! | executions | `SESSION#<ulid>` | `EXEC#<time>#<ulid>` | `tenantId`, `expiresAt`, `body` |
//! | executions | `SESSION#<ulid>` | `CONTENT#<sha-256>` | `tenantId`, `expiresAt`, `content` or, for a piece over the item limit, `s3Key` (recorded model content, `content`) |
//! | executions | `TENANT#<t>` | `SOURCE#<source id>` / `EXECID#<ulid>` | `executionPk`, `executionSk`, `expiresAt` |
//! | executions | `TENANT#<t>` | `TURN#<source>#<run>#<page>` | `events`, `end`, `expiresAt` (a followed turn's events, `turns`) |
//! | executions | `TENANT#<t>#EVENTS` | `SEQ` / `EVENT#<seq>` / `EVENTID#<id>` | the counter `n`; `body`, `expiresAt`; `seq` (the event log, `event_log`) |
//! | executions | `TENANT#<t>#USAGE` | `DAY#<day>#<agent>#<model>#<shard>` | the day's counts, `expiresAt` |
//! | executions | `TENANT#<t>#USAGE` | `HOUR#<YYYY-MM-DDTHH>#<status>#<shard>` | `hour`, `status`, `executions`, `expiresAt` (activity) |
//! | executions | `TENANT#<t>#USAGE` | `SPLIT#<YYYY-MM-DDTHH>#<trigger>#<variant>#<status>#<shard>` | `hour`, `triggerId`, `variant`, `status`, `executions`, `tokens`, `costNanos`, `unpricedCalls`, `latencyMs`, `expiresAt` (a traffic split's variants) |
//! | executions | `TENANT#<t>#USAGE` | `INSIGHT#<YYYY-MM-DDTHH>#<agent>#<version>#<trigger>#<variant>#<channel>#<shard>` | `hour`, `agentId`, `agentVersion`, `triggerId`, `variant`, `channel`, the counters, the sketches' buckets (`lat_<n>`, `frt_<n>`, `ttr_<n>`), `expiresAt` (insights, `insights`) |
//! | executions | `TENANT#<t>#LIMIT` | `MIN#<minute>` / `DAY#<day>` | `count`, `notified`, `expiresAt` (tenant limits) |
//! | executions | `TENANT#<t>#PUSH` | `TICKET#<sha-256>` / `CONN#<connection id>` | `validUntil`, `connectionId`, `expiresAt` (live push, `push`) |
//!
//! GSI `SessionsByConversation` on the sessions table: partition `conversationKey`
//! (`TENANT#<t>#CONV#<conversation>`), sort `startKey` (`<startedAt>#<handoff depth>#<ulid>`).
//! GSI `SessionsAwaitingApproval` on the sessions table, sparse: partition `awaitingTenant` (the
//! tenant id), sort `awaitingSince` (the approval's `requestedAt`, epoch milliseconds); only a
//! session whose turn is paused for an approval has the two, so the index holds those alone.
//! GSI `SessionsIdle` on the sessions table, sparse, keys only: partition `idleShard`
//! (`IDLE#<0..15>`), sort `idleAt` (millisecond UTC text); only an active session waiting on its
//! customer, of a tenant that closes idle sessions, has them (`idle`).
//! GSI `SchedulesDue` on the config table, sparse: partition `dueShard` (one value, `DUE`), sort
//! `nextSlot` (millisecond UTC text); only an active schedule trigger's item has them, beside
//! `scheduleSpec` (`schedules`).
//! `expiresAt` is the executions table's TTL attribute (epoch seconds, rounded up); reads check
//! the record's own `expiresAt` against the clock, because TTL deletion is lazy (and the emulator
//! never deletes).

mod arrivals;
mod codec;
mod config;
mod content;
pub use content::piece_key;
mod counters;
mod erase;
mod event_log;
pub use event_log::SETTLE as EVENT_SETTLE;
mod executions;
mod idle;
pub use idle::SESSIONS_IDLE;
mod insights;
mod keys;
mod page;
mod push;
mod schedules;
pub use schedules::SCHEDULES_DUE;
mod sessions;
mod standin;
mod turns;
mod usage;
mod versions;

pub use standin::{DynamoMessageLog, Recorded, STANDIN_RETENTION};
pub use turns::{TurnLog, TurnPages};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use switchboard_domain::{Agent, AgentId, EventType, TenantId, Trigger};
use switchboard_engine::{Clock, ConfigKind, ConfigRecord, StoreError};

use crate::sdk::AwsNames;
use codec::unavailable;
use keys::{key, s, tenant_pk};
use page::paginate;

/// The name of the sessions table's conversation index.
pub const SESSIONS_BY_CONVERSATION: &str = "SessionsByConversation";
/// The name of the sessions table's sparse index of sessions paused for an approval.
pub const SESSIONS_AWAITING_APPROVAL: &str = "SessionsAwaitingApproval";
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
    /// Whose session slot this store took or renewed lately (a guess; see `counters`).
    leases: Arc<counters::LeaseMemory>,
    /// Items one `delete_tenant` call removes at most.
    delete_budget: usize,
    /// Where recorded content too large for an item is kept (`content`), when configured.
    pieces: Option<Arc<dyn crate::s3::Objects>>,
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
            leases: Arc::default(),
            delete_budget: erase::DELETES_PER_CALL,
            pieces: None,
        }
    }

    /// Keeps recorded content too large for a DynamoDB item in `bucket`, at [`piece_key`] (the
    /// archive's prefix is replaced). Without it such a piece is left out and reads back as no
    /// longer kept.
    pub fn with_large_content(mut self, bucket: &crate::S3Archive) -> Self {
        self.pieces = Some(Arc::new(bucket.with_prefix("")));
        self
    }

    /// A store with a DynamoDB client of its own, made from `config`.
    pub fn from_config(config: &aws_config::SdkConfig, names: AwsNames, clock: Arc<dyn Clock>) -> Self {
        Self::new(Client::new(config), names, clock)
    }

    /// At most `items` deleted per `delete_tenant` call (the default keeps a call well inside
    /// API Gateway's 29 s; tests make it small to walk a deletion over several calls).
    pub fn with_delete_budget(mut self, items: usize) -> Self {
        self.delete_budget = items.max(25);
        self
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
        let query = self
            .client
            .query()
            .table_name(table)
            .key_condition_expression("PK = :pk AND begins_with(SK, :prefix)")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":prefix", s(prefix))
            .consistent_read(true);
        paginate(query, None).all().await
    }

    /// Creates a tenant; `false` if it already existed.
    pub async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        let mut item = key(tenant_pk(tenant), "TENANT".into());
        item.insert("name".into(), s(name));
        item.insert("createdAt".into(), s(self.clock.now().to_rfc3339()));
        let result = self
            .client
            .put_item()
            .table_name(&self.names.config_table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await;
        codec::conditional("PutItem", result)
    }
}
