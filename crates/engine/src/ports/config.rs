//! Tenant configuration: reading it on the hot path (cached by the adapters) and writing it
//! conditionally on its version (the internal API, tenant bundles).

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchboard_domain::{Agent, AgentId, EventType, Skill, SkillId, Tenant, TenantId, Tool, ToolId, Trigger};

use super::{Page, StoreError};

/// Tenant configuration: agents and triggers. Implementations may cache (triggers at most one
/// minute, agents five) and must invalidate on their own writes.
#[async_trait]
pub trait ConfigStore: Send + Sync {
    /// The tenant's record (not cached: a suspension takes effect on the next event).
    async fn get_tenant(&self, tenant: &TenantId) -> Result<Option<Tenant>, StoreError>;
    async fn tenant_exists(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        Ok(self.get_tenant(tenant).await?.is_some())
    }
    async fn get_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError>;
    /// A custom tool of the tenant.
    async fn get_tool(&self, tenant: &TenantId, tool: ToolId) -> Result<Option<Tool>, StoreError>;
    /// A skill of the tenant.
    async fn get_skill(&self, tenant: &TenantId, skill: SkillId) -> Result<Option<Skill>, StoreError>;
    /// Active triggers for `event_type`, already in evaluation order (priority, then id).
    async fn active_triggers(&self, tenant: &TenantId, event_type: EventType) -> Result<Arc<[Trigger]>, StoreError>;
}

/// The kinds of tenant configuration record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigKind {
    Agent,
    Trigger,
    Tool,
    Skill,
}

impl ConfigKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::Agent => "agent",
            ConfigKind::Trigger => "trigger",
            ConfigKind::Tool => "tool",
            ConfigKind::Skill => "skill",
        }
    }
}

/// One tenant configuration record.
// An agent is the largest record by some hundred bytes; records are read one at a time (and
// cached behind `Arc`s where it matters), so boxing every agent would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ConfigRecord {
    Agent(Agent),
    Trigger(Trigger),
    Tool(Tool),
    Skill(Skill),
}

impl ConfigRecord {
    pub fn kind(&self) -> ConfigKind {
        match self {
            ConfigRecord::Agent(_) => ConfigKind::Agent,
            ConfigRecord::Trigger(_) => ConfigKind::Trigger,
            ConfigRecord::Tool(_) => ConfigKind::Tool,
            ConfigRecord::Skill(_) => ConfigKind::Skill,
        }
    }

    pub fn tenant_id(&self) -> &TenantId {
        match self {
            ConfigRecord::Agent(r) => &r.tenant_id,
            ConfigRecord::Trigger(r) => &r.tenant_id,
            ConfigRecord::Tool(r) => &r.tenant_id,
            ConfigRecord::Skill(r) => &r.tenant_id,
        }
    }

    pub fn id(&self) -> String {
        match self {
            ConfigRecord::Agent(r) => r.agent_id.to_string(),
            ConfigRecord::Trigger(r) => r.trigger_id.to_string(),
            ConfigRecord::Tool(r) => r.tool_id.to_string(),
            ConfigRecord::Skill(r) => r.skill_id.to_string(),
        }
    }

    /// The same record at `version`.
    pub fn with_version(mut self, version: u64) -> Self {
        match &mut self {
            ConfigRecord::Agent(r) => r.version = version,
            ConfigRecord::Trigger(r) => r.version = version,
            ConfigRecord::Tool(r) => r.version = version,
            ConfigRecord::Skill(r) => r.version = version,
        }
        self
    }

    /// The record's own rules (`Agent::validate` and the like), with pointers into the record.
    pub fn validate(&self) -> Result<(), switchboard_domain::ValidationErrors> {
        match self {
            ConfigRecord::Agent(r) => r.validate(),
            ConfigRecord::Trigger(r) => r.validate(),
            ConfigRecord::Tool(r) => r.validate(),
            ConfigRecord::Skill(r) => r.validate(),
        }
    }

    pub fn version(&self) -> u64 {
        match self {
            ConfigRecord::Agent(r) => r.version,
            ConfigRecord::Trigger(r) => r.version,
            ConfigRecord::Tool(r) => r.version,
            ConfigRecord::Skill(r) => r.version,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ConfigRecord::Agent(r) => &r.name,
            ConfigRecord::Trigger(r) => &r.name,
            ConfigRecord::Tool(r) => &r.name,
            ConfigRecord::Skill(r) => &r.name,
        }
    }

    pub fn created_at(&self) -> chrono::DateTime<chrono::Utc> {
        match self {
            ConfigRecord::Agent(r) => r.created_at,
            ConfigRecord::Trigger(r) => r.created_at,
            ConfigRecord::Tool(r) => r.created_at,
            ConfigRecord::Skill(r) => r.created_at,
        }
    }

    /// The same record, last updated at `at`.
    pub fn with_updated_at(mut self, at: chrono::DateTime<chrono::Utc>) -> Self {
        match &mut self {
            ConfigRecord::Agent(r) => r.updated_at = at,
            ConfigRecord::Trigger(r) => r.updated_at = at,
            ConfigRecord::Tool(r) => r.updated_at = at,
            ConfigRecord::Skill(r) => r.updated_at = at,
        }
        self
    }

    /// The same record, created at `at` (a replacement keeps the original's creation time).
    pub fn with_created_at(mut self, at: chrono::DateTime<chrono::Utc>) -> Self {
        match &mut self {
            ConfigRecord::Agent(r) => r.created_at = at,
            ConfigRecord::Trigger(r) => r.created_at = at,
            ConfigRecord::Tool(r) => r.created_at = at,
            ConfigRecord::Skill(r) => r.created_at = at,
        }
        self
    }
}

/// Who made a configuration change, and when: kept with the version the change makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorship {
    pub at: chrono::DateTime<chrono::Utc>,
    /// What the writer is known as (the API knows the kind of credential, not a person yet).
    pub by: String,
}

/// One kept version of a configuration record, immutable once written. Every write of a record
/// keeps one (the whole record as stored); a delete keeps one more, marked `deleted`, holding the
/// record as it was when deleted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigVersion {
    pub kind: ConfigKind,
    pub id: String,
    pub version: u64,
    pub written_at: chrono::DateTime<chrono::Utc>,
    pub written_by: String,
    pub deleted: bool,
    pub record: ConfigRecord,
}

/// Writing and listing tenant configuration (the internal API's CRUD). Writes are conditional:
/// `expected_version` `None` creates (the id must be free), `Some(v)` replaces only if the stored
/// version is still `v`. Every write keeps a [`ConfigVersion`] atomically with it: both are
/// written or neither, and a version already kept is never overwritten (the write fails as a
/// conflict instead). Implementations invalidate their own config caches on every write.
#[async_trait]
pub trait ConfigAdmin: Send + Sync {
    /// Creates a tenant; `false` if it already existed.
    async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError>;
    /// Writes the tenant's name and status; `false` when there is no such tenant.
    async fn update_tenant(&self, tenant: &Tenant) -> Result<bool, StoreError>;
    /// Whether this deployment starts schedule triggers' slots (the store keeps their next slot
    /// with each write, and something ticks): a store that does not refuses them, rather than
    /// keep triggers that never fire.
    fn fires_schedules(&self) -> bool {
        false
    }
    /// Writes `record` and keeps it as version `record.version()`, written as `by` says.
    async fn put_config(
        &self,
        record: &ConfigRecord,
        expected_version: Option<u64>,
        by: &Authorship,
    ) -> Result<(), StoreError>;
    async fn get_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
    ) -> Result<Option<ConfigRecord>, StoreError>;
    /// A page of a tenant's records of one kind, in id (creation) order.
    async fn list_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ConfigRecord>, StoreError>;
    /// Removes the tenant and everything kept for it: configuration, API keys, sessions,
    /// executions, usage, limit counters and slots (and, embedded, the conversation log, the
    /// event log and its queued work). Bounded work per call: `false` when it stopped with more
    /// to remove (call again), `true` when nothing is left. The tenant record goes last, so a
    /// deletion that stopped half-way is resumed by calling again.
    async fn delete_tenant(&self, tenant: &TenantId) -> Result<bool, StoreError>;
    /// Deletes if the stored version is `expected_version`, keeping version `expected_version + 1`
    /// marked deleted; `false` if there was no such record.
    async fn delete_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        expected_version: u64,
        by: &Authorship,
    ) -> Result<bool, StoreError>;
    /// A page of the versions kept for a record, newest first, starting below version `before`
    /// (from the newest without one); the next page's cursor is the last version returned.
    /// Versions outlive a deleted record (until the tenant goes).
    async fn list_versions(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Page<ConfigVersion>, StoreError>;
    /// One kept version of a record.
    async fn get_version(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        version: u64,
    ) -> Result<Option<ConfigVersion>, StoreError>;
}
