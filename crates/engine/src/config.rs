//! Writing tenant configuration: the one place for its rules, used by the internal API, by tenant
//! bundles, by the command line and by both stores' tests. A tenant is created and changed under
//! the domain's rules for its name and limits. A record is validated, every record it names must exist in
//! the same tenant, a replace or delete names the version it read, and a record another record
//! still refers to cannot be deleted. Every write keeps a version of the record, written by the
//! service's writer (see [`ConfigService::written_by`]); a rollback writes an old version's record
//! as the next version, checked like any write. The stores only store (conditional put and delete
//! by version, kept versions, paged lists); they know none of these rules.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use switchboard_domain::trigger::{EventType, TriggerTest};
use switchboard_domain::{
    Agent, AgentId, AgentStatus, Recording, SystemTool, Tenant, TenantId, TenantStatus, Trigger, ValidationErrors,
    tenant_name,
};

use crate::ports::{
    Authorship, Clock, ConfigAdmin, ConfigKind, ConfigRecord, ConfigStore, ConfigVersion, StoreError, SystemClock,
};

/// Why a configuration write was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigWriteError {
    /// The record is invalid, or names records that do not exist in its tenant (with pointers).
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
    /// No such record (or no such tenant).
    #[error("not found")]
    NotFound,
    /// The stored record is at another version than the one the caller read.
    #[error("the record is at version {current}")]
    VersionMismatch { current: u64 },
    /// Other records still refer to it (described, e.g. `trigger 01J…`).
    #[error("still used by {}", .0.join(", "))]
    InUse(Vec<String>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a change to a tenant names (`PATCH /tenants/{t}`): each field left out stays.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TenantChanges {
    pub name: Option<String>,
    pub status: Option<TenantStatus>,
    /// Only the limits given change.
    pub limits: Option<serde_json::Map<String, serde_json::Value>>,
    /// What execution records keep of model calls: `full`, `redacted` or `off`.
    pub recording: Option<Recording>,
    /// The tenant's business-hours calendars, all of them (a name left out is removed).
    pub calendars: Option<switchboard_domain::calendar::Calendars>,
    /// The zone of what the tenant's triggers and calendars are written without one in, from
    /// now on (what is stored keeps the zone it was stored with).
    pub time_zone: Option<String>,
}

impl TenantChanges {
    /// `tenant` with these changes, each checked: a name that can be one, and the limits given
    /// over the ones it has, every field in range. Needs no store (the API's fuzz checks run it).
    pub fn apply(self, tenant: &mut Tenant) -> Result<(), ValidationErrors> {
        if let Some(name) = self.name {
            let name = tenant_name(&name).map_err(|e| ValidationErrors::single("/name", e.to_string()))?;
            name.clone_into(&mut tenant.name);
        }
        if let Some(status) = self.status {
            tenant.status = status;
        }
        if let Some(recording) = self.recording {
            tenant.recording = recording;
        }
        if let Some(zone) = self.time_zone {
            let mut errors = ValidationErrors::default();
            switchboard_domain::schedule::check_zone(&zone, "/timeZone", &mut errors);
            errors.into_result()?;
            tenant.time_zone = Some(zone);
        }
        if let Some(mut calendars) = self.calendars {
            if let Some(zone) = &tenant.time_zone {
                for calendar in calendars.values_mut() {
                    switchboard_domain::schedule::fill_zone(&mut calendar.time_zone, zone);
                }
            }
            let mut errors = ValidationErrors::default();
            switchboard_domain::calendar::check_calendars(&calendars, "/calendars", &mut errors);
            errors.into_result()?;
            tenant.calendars = calendars;
        }
        if let Some(given) = self.limits {
            let mut merged = match serde_json::to_value(&tenant.limits) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            merged.extend(given);
            tenant.limits = switchboard_domain::input::read_value(serde_json::Value::Object(merged), "/limits")?;
            tenant.limits.validate("/limits")?;
        }
        Ok(())
    }
}

/// Who the service writes as when not told ([`ConfigService::written_by`]): Switchboard itself or a
/// local command.
pub const DEFAULT_WRITER: &str = "system";

/// The configuration service. Cheap to clone.
#[derive(Clone)]
pub struct ConfigService {
    config: Arc<dyn ConfigStore>,
    admin: Arc<dyn ConfigAdmin>,
    clock: Arc<dyn Clock>,
    writer: String,
    /// The calendars triggers are checked against in place of the stored tenant's (a bundle's
    /// that will be set with them).
    calendars: Option<Arc<switchboard_domain::calendar::Calendars>>,
}

impl std::fmt::Debug for ConfigService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigService").finish_non_exhaustive()
    }
}

impl ConfigService {
    pub fn new(config: Arc<dyn ConfigStore>, admin: Arc<dyn ConfigAdmin>) -> Self {
        Self { config, admin, clock: Arc::new(SystemClock), writer: DEFAULT_WRITER.to_owned(), calendars: None }
    }

    /// The same service, checking the calendars triggers name against `calendars` rather than
    /// the tenant's as stored (what a bundle that sets them with its triggers writes).
    pub fn with_calendars(mut self, calendars: switchboard_domain::calendar::Calendars) -> Self {
        self.calendars = Some(Arc::new(calendars));
        self
    }

    /// The same service, keeping `writer` as who wrote each version it writes.
    pub fn written_by(mut self, writer: impl Into<String>) -> Self {
        self.writer = writer.into();
        self
    }

    /// The same service, timing the versions it keeps by `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    fn authorship(&self) -> Authorship {
        Authorship { at: self.clock.now(), by: self.writer.clone() }
    }

    /// Creates tenant `id` named `name` (kept trimmed); `false` when the tenant exists.
    pub async fn create_tenant(&self, id: &TenantId, name: &str) -> Result<bool, ConfigWriteError> {
        let name = tenant_name(name).map_err(|e| ValidationErrors::single("/name", e.to_string()))?;
        Ok(self.admin.create_tenant(id, name).await?)
    }

    /// Applies `changes` to tenant `id` and answers its new record. The limits given are laid over
    /// the current ones and the result read as a whole, so that a change names only what changes.
    pub async fn update_tenant(&self, id: &TenantId, changes: TenantChanges) -> Result<Tenant, ConfigWriteError> {
        let mut tenant = self.config.get_tenant(id).await?.ok_or(ConfigWriteError::NotFound)?;
        let before = tenant.calendars.clone();
        changes.apply(&mut tenant)?;
        // A calendar a trigger names stays until no trigger names it.
        let removed: Vec<&String> = before.keys().filter(|name| !tenant.calendars.contains_key(*name)).collect();
        if !removed.is_empty() {
            let mut errors = ValidationErrors::default();
            for record in self.all_of(id, ConfigKind::Trigger).await? {
                let ConfigRecord::Trigger(t) = record else { continue };
                for (_, name) in t.conditions.calendar_refs() {
                    if removed.contains(&&name) {
                        let why = format!("trigger {} ({}) names it; change the trigger first", t.trigger_id, t.name);
                        errors.push(format!("/calendars/{name}"), why);
                    }
                }
            }
            errors.into_result()?;
        }
        if !self.admin.update_tenant(&tenant).await? {
            return Err(ConfigWriteError::NotFound);
        }
        Ok(tenant)
    }

    /// `record` as it is stored: a trigger written without a time zone takes its tenant's
    /// ([`switchboard_domain::Trigger::fill_zone`]). The tenant is read only for such a trigger.
    pub async fn zoned<'r>(&self, record: &'r ConfigRecord) -> Result<Cow<'r, ConfigRecord>, ConfigWriteError> {
        let ConfigRecord::Trigger(t) = record else { return Ok(Cow::Borrowed(record)) };
        if !t.needs_zone() {
            return Ok(Cow::Borrowed(record));
        }
        let zone = self.config.get_tenant(&t.tenant_id).await?.and_then(|tenant| tenant.time_zone);
        let mut filled = t.clone();
        filled.fill_zone(zone.as_deref());
        Ok(Cow::Owned(ConfigRecord::Trigger(filled)))
    }

    /// Creates `record` (its id must be free; its version is written as given, normally 1),
    /// [zoned](Self::zoned).
    pub async fn create(&self, record: &ConfigRecord) -> Result<(), ConfigWriteError> {
        let record = &*self.zoned(record).await?;
        self.check(record, &[]).await?;
        self.admin.put_config(record, None, &self.authorship()).await.map_err(|e| match e {
            // The tenant is gone, or the id was taken meanwhile.
            StoreError::VersionConflict(_) => ConfigWriteError::NotFound,
            e => e.into(),
        })
    }

    /// Replaces the stored record of `record`'s id if it is still at version `expected`; `record`
    /// carries the next version.
    pub async fn replace(&self, record: &ConfigRecord, expected: u64) -> Result<(), ConfigWriteError> {
        let record = &*self.zoned(record).await?;
        let current = self.current(record.tenant_id(), record.kind(), &record.id()).await?;
        if current.version() != expected {
            return Err(ConfigWriteError::VersionMismatch { current: current.version() });
        }
        self.check(record, &[]).await?;
        self.admin.put_config(record, Some(expected), &self.authorship()).await.map_err(|e| match e {
            StoreError::VersionConflict(_) => ConfigWriteError::VersionMismatch { current: expected },
            e => e.into(),
        })
    }

    /// Deletes a record at version `expected` (the stored version when `None`), unless another
    /// record refers to it.
    pub async fn delete(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        expected: Option<u64>,
    ) -> Result<(), ConfigWriteError> {
        let current = self.current(tenant, kind, id).await?;
        let expected = expected.unwrap_or(current.version());
        if expected != current.version() {
            return Err(ConfigWriteError::VersionMismatch { current: current.version() });
        }
        let users = self.referrers(tenant, kind, id).await?;
        if !users.is_empty() {
            return Err(ConfigWriteError::InUse(users));
        }
        match self.admin.delete_config(tenant, kind, id, expected, &self.authorship()).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ConfigWriteError::NotFound),
            Err(StoreError::VersionConflict(_)) => Err(ConfigWriteError::VersionMismatch { current: expected }),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes a set of records of one tenant together (a tenant bundle), each as the next version
    /// of whatever is stored: loading the same bundle twice is harmless. References may point at
    /// stored records or at records of the set, so the set's order does not matter; everything
    /// is checked before anything is written, and records are written so that what a record names
    /// is written before it (tools, skills, agents, triggers).
    pub async fn upsert_all(&self, records: &[ConfigRecord]) -> Result<(), ConfigWriteError> {
        let zoned = self.zoned_all(records).await?;
        let records = &zoned[..];
        self.check_zoned(records).await?;
        let order = [ConfigKind::Tool, ConfigKind::Skill, ConfigKind::Agent, ConfigKind::Trigger];
        for kind in order {
            for r in records.iter().filter(|r| r.kind() == kind) {
                self.upsert(r).await?;
            }
        }
        Ok(())
    }

    /// What [`ConfigService::upsert_all`] would refuse: every error of every record, each under
    /// `/<kind>/<index>`.
    pub async fn check_all(&self, records: &[ConfigRecord]) -> Result<(), ConfigWriteError> {
        self.check_zoned(&self.zoned_all(records).await?).await
    }

    /// [`ConfigService::check_all`] of records [zoned](Self::zoned) already.
    async fn check_zoned(&self, records: &[ConfigRecord]) -> Result<(), ConfigWriteError> {
        let mut errors = ValidationErrors::default();
        for (i, r) in records.iter().enumerate() {
            if let Err(ConfigWriteError::Invalid(e)) = self.check(r, records).await {
                errors.0.extend(e.0.into_iter().map(|mut f| {
                    f.pointer = format!("/{}/{i}{}", plural(r.kind()), f.pointer);
                    f
                }));
            }
        }
        errors.into_result()?;
        Ok(())
    }

    /// Every one of `records`, [zoned](Self::zoned).
    pub(crate) async fn zoned_all(&self, records: &[ConfigRecord]) -> Result<Vec<ConfigRecord>, ConfigWriteError> {
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(self.zoned(r).await?.into_owned());
        }
        Ok(out)
    }

    /// The store this service reads.
    pub fn config(&self) -> &Arc<dyn ConfigStore> {
        &self.config
    }

    /// The store this service writes.
    pub fn admin(&self) -> &Arc<dyn ConfigAdmin> {
        &self.admin
    }

    /// Writes `record` as the next version of whatever is stored (checked by the caller). A record
    /// deleted and written again continues its kept versions' numbers.
    async fn upsert(&self, record: &ConfigRecord) -> Result<(), ConfigWriteError> {
        let (tenant, kind, id) = (record.tenant_id(), record.kind(), record.id());
        let current = self.admin.get_config(tenant, kind, &id).await?;
        let last = match &current {
            Some(c) => c.version(),
            None => self.admin.list_versions(tenant, kind, &id, None, 1).await?.items.first().map_or(0, |v| v.version),
        };
        let record = record.clone().with_version(last + 1);
        self.admin.put_config(&record, current.map(|c| c.version()), &self.authorship()).await?;
        Ok(())
    }

    /// Writes version `version` of a record as its next version, if the stored record is still at
    /// `expected` (the stored version when `None`), and answers the record written. The old
    /// record is checked like any write: one that names a record deleted since is refused.
    pub async fn rollback(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        version: u64,
        expected: Option<u64>,
    ) -> Result<ConfigRecord, ConfigWriteError> {
        let current = self.current(tenant, kind, id).await?;
        let old = self.version(tenant, kind, id, version).await?;
        if old.deleted {
            return Err(ValidationErrors::single("/version", format!("version {version} is a deletion")).into());
        }
        let expected = expected.unwrap_or(current.version());
        let record = old.record.with_version(expected + 1).with_created_at(current.created_at());
        let record = record.with_updated_at(self.clock.now());
        self.replace(&record, expected).await?;
        Ok(record)
    }

    /// Version `version` of a record (not found when it was never kept).
    pub async fn version(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        version: u64,
    ) -> Result<ConfigVersion, ConfigWriteError> {
        self.admin.get_version(tenant, kind, id, version).await?.ok_or(ConfigWriteError::NotFound)
    }

    async fn current(&self, tenant: &TenantId, kind: ConfigKind, id: &str) -> Result<ConfigRecord, ConfigWriteError> {
        self.admin.get_config(tenant, kind, id).await?.ok_or(ConfigWriteError::NotFound)
    }

    /// Validates `record` and checks that its tenant exists and that every record it names
    /// exists in the same tenant (stored, or among `pending`).
    async fn check(&self, record: &ConfigRecord, pending: &[ConfigRecord]) -> Result<(), ConfigWriteError> {
        let tenant = record.tenant_id();
        if !self.config.tenant_exists(tenant).await? {
            return Err(ValidationErrors::single("/tenantId", format!("no tenant '{tenant}'")).into());
        }
        // References are looked up only in a record that is valid in itself.
        record.validate()?;
        if let ConfigRecord::Trigger(t) = record {
            // Written without a zone, and the tenant has none to take.
            t.missing_zones().into_result()?;
        }
        if let ConfigRecord::Trigger(t) = record
            && t.event_type == switchboard_domain::EventType::Schedule
            && !self.admin.fires_schedules()
        {
            let why = "this deployment does not start schedule triggers yet (the AWS profile); only message.new";
            return Err(ValidationErrors::single("/eventType", why).into());
        }
        let mut errors = ValidationErrors::default();
        if let ConfigRecord::Trigger(t) = record {
            let refs = t.conditions.calendar_refs();
            if !refs.is_empty() {
                let calendars = match &self.calendars {
                    Some(given) => given.as_ref().clone(),
                    None => self.config.get_tenant(tenant).await?.map(|t| t.calendars).unwrap_or_default(),
                };
                for (pointer, name) in refs.into_iter().filter(|(_, name)| !calendars.contains_key(name)) {
                    errors.push(format!("/conditions{pointer}"), format!("no calendar '{name}' in this tenant"));
                }
            }
        }
        for (pointer, kind, id) in references(record) {
            let in_set = pending.iter().any(|p| p.kind() == kind && p.tenant_id() == tenant && p.id() == id);
            if !in_set && self.admin.get_config(tenant, kind, &id).await?.is_none() {
                errors.push(pointer, format!("no {} '{id}' in this tenant", kind.as_str()));
            }
        }
        Ok(errors.into_result()?)
    }

    /// Every record of a kind (for reference scans; tenants hold hundreds, not millions).
    async fn all_of(&self, tenant: &TenantId, kind: ConfigKind) -> Result<Vec<ConfigRecord>, StoreError> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.admin.list_config(tenant, kind, cursor.as_deref(), 100).await?;
            out.extend(page.items);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// The records that refer to `kind`/`id`, described (`trigger 01J…`, `agent 01J… (sub-agent)`).
    pub async fn referrers(&self, tenant: &TenantId, kind: ConfigKind, id: &str) -> Result<Vec<String>, StoreError> {
        let mut found = Vec::new();
        // Triggers name agents; agents name agents, tools and skills; skills name tools and skills.
        let referrer_kinds: &[ConfigKind] = match kind {
            ConfigKind::Agent => &[ConfigKind::Trigger, ConfigKind::Agent],
            ConfigKind::Tool | ConfigKind::Skill => &[ConfigKind::Agent, ConfigKind::Skill],
            ConfigKind::Trigger => &[],
        };
        for &referrer in referrer_kinds {
            for r in self.all_of(tenant, referrer).await? {
                if references(&r).iter().any(|(_, k, i)| *k == kind && i == id) {
                    let what = match (&r, kind) {
                        (ConfigRecord::Agent(_), ConfigKind::Agent) => format!("agent {} (sub-agent)", r.id()),
                        _ => format!("{} {}", r.kind().as_str(), r.id()),
                    };
                    if !found.contains(&what) {
                        found.push(what);
                    }
                }
            }
        }
        Ok(found)
    }
}

/// The records `record` names: `(pointer, kind, id)`. System tools are named by name and always
/// exist; custom tools by id.
fn references(record: &ConfigRecord) -> Vec<(String, ConfigKind, String)> {
    let custom_tools = |list: &[String]| -> Vec<(String, ConfigKind, String)> {
        list.iter()
            .enumerate()
            .filter(|(_, name)| name.parse::<SystemTool>().is_err())
            .map(|(i, id)| (format!("/tools/{i}"), ConfigKind::Tool, id.clone()))
            .collect()
    };
    let mut wanted = Vec::new();
    match record {
        ConfigRecord::Agent(a) => {
            wanted.extend(custom_tools(&a.tools));
            for (i, sub) in a.sub_agents.iter().enumerate() {
                wanted.push((format!("/subAgents/{i}"), ConfigKind::Agent, sub.to_string()));
            }
            for (i, skill) in a.skills.iter().enumerate() {
                wanted.push((format!("/skills/{i}"), ConfigKind::Skill, skill.to_string()));
            }
        }
        ConfigRecord::Trigger(tr) => {
            wanted.push(("/agentId".into(), ConfigKind::Agent, tr.agent_id.to_string()));
            for (i, variant) in tr.split.iter().enumerate() {
                wanted.push((format!("/split/{i}/agentId"), ConfigKind::Agent, variant.agent_id.to_string()));
            }
        }
        ConfigRecord::Tool(_) => {}
        ConfigRecord::Skill(s) => {
            wanted.extend(custom_tools(&s.tools));
            if let Some(parent) = s.parent_skill {
                wanted.push(("/parentSkill".into(), ConfigKind::Skill, parent.to_string()));
            }
        }
    }
    wanted
}

pub(crate) fn plural(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Agent => "agents",
        ConfigKind::Trigger => "triggers",
        ConfigKind::Tool => "tools",
        ConfigKind::Skill => "skills",
    }
}

/// The trigger tester: which trigger routing would pick for an event of `event_type` with
/// `detail`, and why each active trigger did or did not match (the domain's
/// [`test_triggers`](switchboard_domain::trigger::test_triggers)), reading what routing reads: the
/// tenant's active triggers and whether each one's agent is active. It queues nothing.
pub async fn test_triggers(
    config: &dyn ConfigStore,
    tenant: &TenantId,
    event_type: EventType,
    detail: &serde_json::Value,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<TriggerTest, StoreError> {
    let active = config.active_triggers(tenant, event_type).await?;
    let mut agents: HashMap<AgentId, bool> = HashMap::new();
    let mut named: Vec<AgentId> = Vec::with_capacity(active.len());
    for trigger in active.iter() {
        named.push(trigger.agent_id);
        named.extend(trigger.split.iter().map(|v| v.agent_id));
    }
    for agent_id in named {
        if let std::collections::hash_map::Entry::Vacant(slot) = agents.entry(agent_id) {
            let agent = config.get_agent(tenant, agent_id).await?;
            slot.insert(agent.is_some_and(|a| a.status == AgentStatus::Active));
        }
    }
    let calendars = config.get_tenant(tenant).await?.map(|t| t.calendars).unwrap_or_default();
    Ok(switchboard_domain::trigger::test_triggers(&active, event_type, detail, now, &calendars, |agent| {
        agents.get(agent).copied().unwrap_or(false)
    }))
}

/// The active agent `trigger` answers `conversation` with, and the name of the split's variant
/// that chose it: the variant the conversation falls in ([`Trigger::choose`]), or, when that
/// variant's agent is missing or not active, the trigger's own `agentId`
/// ([`Trigger::fallback`]). `None` when neither can answer. Every start reads it: routed
/// messages, schedules, manual runs and webhook deliveries.
pub async fn trigger_agent(
    config: &dyn ConfigStore,
    trigger: &Trigger,
    conversation: &str,
) -> Result<Option<(Agent, Option<String>)>, StoreError> {
    let chosen = trigger.choose(conversation);
    for choice in std::iter::once(chosen).chain(trigger.fallback(&chosen)) {
        if let Some(agent) = config.get_agent(&trigger.tenant_id, choice.agent_id).await?
            && agent.status == AgentStatus::Active
        {
            return Ok(Some((agent, choice.variant_name())));
        }
    }
    Ok(None)
}
