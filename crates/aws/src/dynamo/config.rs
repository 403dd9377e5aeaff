//! Tenant configuration: cached reads for the engine, conditional writes for the configuration
//! service.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{ConditionCheck, Delete, Put, TransactWriteItem};
use switchboard_domain::{
    Agent, AgentId, EventType, Skill, SkillId, Tenant, TenantId, TenantStatus, Tool, ToolId, Trigger,
};
use switchboard_engine::{
    Authorship, ConfigAdmin, ConfigKind, ConfigRecord, ConfigStore, ConfigVersion, Page, StoreError,
};

use super::codec::*;
use super::keys::*;
use super::page::paginate;
use super::versions;
use super::{AGENT_TTL, DynamoStore, TRIGGER_TTL, schedules};

impl DynamoStore {
    /// A tool or skill, served from memory for [`AGENT_TTL`].
    pub(super) async fn cached_config(
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

    async fn fetch_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError> {
        let sk = config_sk(ConfigKind::Agent, &agent.to_string());
        let item = self.get_item(&self.names.config_table, key(tenant_pk(tenant), sk), "GetItem").await?;
        item.as_ref().map(decode).transpose()
    }
}

#[async_trait]
impl ConfigAdmin for DynamoStore {
    /// The event-router's scheduled tick fires what this store keeps (`SchedulesDue`).
    fn fires_schedules(&self) -> bool {
        true
    }

    async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        DynamoStore::create_tenant(self, tenant, name).await
    }

    async fn delete_tenant(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        let done = self.erase_tenant(tenant).await;
        self.invalidate(tenant);
        done
    }

    async fn update_tenant(&self, tenant: &Tenant) -> Result<bool, StoreError> {
        let set = "SET #name = :name, #status = :status, #limits = :limits, #recording = :recording, \
                   #calendars = :calendars";
        let update = self
            .client
            .update_item()
            .table_name(&self.names.config_table)
            .set_key(Some(key(tenant_pk(&tenant.tenant_id), "TENANT".into())))
            .expression_attribute_names("#zone", "timeZone");
        let update = match &tenant.time_zone {
            Some(zone) => update
                .update_expression(format!("{set}, #zone = :zone"))
                .expression_attribute_values(":zone", s(zone.clone())),
            None => update.update_expression(format!("{set} REMOVE #zone")),
        };
        let result = update
            .condition_expression("attribute_exists(PK)")
            .expression_attribute_names("#calendars", "calendars")
            .expression_attribute_values(
                ":calendars",
                s(serde_json::to_string(&tenant.calendars).map_err(|e| StoreError::Corrupt(e.to_string()))?),
            )
            .expression_attribute_names("#name", "name")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#limits", "limits")
            .expression_attribute_names("#recording", "recording")
            .expression_attribute_values(":recording", s(tenant.recording.as_str()))
            .expression_attribute_values(
                ":limits",
                s(serde_json::to_string(&tenant.limits).map_err(|e| StoreError::Corrupt(e.to_string()))?),
            )
            .expression_attribute_values(":name", s(tenant.name.clone()))
            .expression_attribute_values(":status", s(tenant.status.as_str()))
            .send()
            .await;
        conditional("UpdateItem", result)
    }

    /// One `TransactWriteItems`: the tenant must exist (a condition check on its marker), the
    /// record must be new (`expected_version` `None`) or still at `expected_version`, and its
    /// version must not be kept yet.
    async fn put_config(
        &self,
        record: &ConfigRecord,
        expected_version: Option<u64>,
        by: &Authorship,
    ) -> Result<(), StoreError> {
        let tenant = record.tenant_id().clone();
        let table = &self.names.config_table;
        let mut item = key(tenant_pk(&tenant), config_sk(record.kind(), &record.id()));
        item.insert("kind".into(), s(record.kind().as_str()));
        item.insert("version".into(), n(record.version()));
        item.insert("body".into(), encode(record)?);
        let write = match record {
            // A trigger's item also holds its schedule's next slot: an update of every attribute,
            // so that a slot kept (the schedule unchanged) is not overwritten.
            ConfigRecord::Trigger(t) => {
                item.insert("agentId".into(), s(t.agent_id.to_string()));
                item.insert("eventType".into(), encode(&t.event_type)?);
                item.insert("status".into(), encode(&t.status)?);
                let slot = self.slot_write(t, by.at, expected_version.is_some()).await?;
                let update = schedules::trigger_update(table, item, &slot)?;
                let update = match expected_version {
                    None => update.condition_expression("attribute_not_exists(PK)"),
                    Some(v) => update
                        .condition_expression("version = :expected")
                        .expression_attribute_values(":expected", n(v)),
                };
                TransactWriteItem::builder().update(update.build().map_err(build_err)?).build()
            }
            _ => {
                let put = Put::builder().table_name(table).set_item(Some(item));
                let put = match expected_version {
                    None => put.condition_expression("attribute_not_exists(PK)"),
                    Some(v) => {
                        put.condition_expression("version = :expected").expression_attribute_values(":expected", n(v))
                    }
                };
                TransactWriteItem::builder().put(put.build().map_err(build_err)?).build()
            }
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
            .transact_items(write)
            .transact_items(
                TransactWriteItem::builder().put(versions::keep(table, record, record.version(), false, by)?).build(),
            )
            .send()
            .await;
        self.invalidate(&tenant);
        let what = format!("{} {} changed or already exists", record.kind().as_str(), record.id());
        settled(result, what)
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
        let start = cursor.map(|c| key(pk.clone(), config_sk(kind, c)));
        let query = self
            .client
            .query()
            .table_name(&self.names.config_table)
            .key_condition_expression("PK = :pk AND begins_with(SK, :prefix)")
            .expression_attribute_values(":pk", s(pk.clone()))
            .expression_attribute_values(":prefix", s(config_prefix(kind)))
            .consistent_read(true);
        let found =
            paginate(query, start).take(limit.saturating_add(1), |item| decode_config(kind, &item).map(Some)).await?;
        Ok(Page::from_overfetch(found, limit, ConfigRecord::id))
    }

    /// One `TransactWriteItems`: the delete, on condition that the record is still at
    /// `expected_version`, and the version marking it deleted.
    async fn delete_config(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        expected_version: u64,
        by: &Authorship,
    ) -> Result<bool, StoreError> {
        let Some(current) = self.get_config(tenant, kind, id).await? else { return Ok(false) };
        let table = &self.names.config_table;
        let delete = Delete::builder()
            .table_name(table)
            .set_key(Some(key(tenant_pk(tenant), config_sk(kind, id))))
            .condition_expression("version = :expected")
            .expression_attribute_values(":expected", n(expected_version))
            .build()
            .map_err(build_err)?;
        let tombstone = versions::keep(table, &current, expected_version.saturating_add(1), true, by)?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().delete(delete).build())
            .transact_items(TransactWriteItem::builder().put(tombstone).build())
            .send()
            .await;
        self.invalidate(tenant);
        settled(result, format!("{} {id} changed", kind.as_str()))?;
        Ok(true)
    }

    async fn list_versions(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Page<ConfigVersion>, StoreError> {
        let pk = tenant_pk(tenant);
        let start = before.map(|b| key(pk.clone(), versions::version_sk(kind, id, b)));
        let query = self
            .client
            .query()
            .table_name(&self.names.config_table)
            .key_condition_expression("PK = :pk AND begins_with(SK, :prefix)")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":prefix", s(versions::prefix(kind, id)))
            .scan_index_forward(false)
            .consistent_read(true);
        let found = paginate(query, start)
            .take(limit.saturating_add(1), |item| versions::version(kind, id, &item).map(Some))
            .await?;
        Ok(Page::from_overfetch(found, limit, |v| v.version.to_string()))
    }

    async fn get_version(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        version: u64,
    ) -> Result<Option<ConfigVersion>, StoreError> {
        let k = key(tenant_pk(tenant), versions::version_sk(kind, id, version));
        let item = self.get_item(&self.names.config_table, k, "GetItem").await?;
        item.map(|i| versions::version(kind, id, &i)).transpose()
    }
}

/// A conditional `TransactWriteItems`' answer: a failed condition is a version conflict (`what`).
fn settled<T>(
    result: Result<T, aws_sdk_dynamodb::error::SdkError<TransactWriteItemsError>>,
    what: String,
) -> Result<(), StoreError> {
    match result {
        Ok(_) => Ok(()),
        Err(e) => {
            let conditions_failed = matches!(
                e.as_service_error(),
                Some(TransactWriteItemsError::TransactionCanceledException(tce))
                    if tce.cancellation_reasons().iter().any(|r| r.code() == Some("ConditionalCheckFailed"))
            );
            if conditions_failed {
                Err(StoreError::VersionConflict(what))
            } else {
                Err(unavailable("TransactWriteItems", &e))
            }
        }
    }
}

#[async_trait]
impl ConfigStore for DynamoStore {
    async fn get_tenant(&self, tenant: &TenantId) -> Result<Option<Tenant>, StoreError> {
        let item = self.get_item(&self.names.config_table, key(tenant_pk(tenant), "TENANT".into()), "GetItem").await?;
        item.map(|item| {
            Ok(Tenant {
                tenant_id: tenant.clone(),
                name: attr_s(&item, "name")?.to_owned(),
                // A marker written before statuses existed has none: active.
                status: item
                    .get("status")
                    .and_then(|v| v.as_s().ok())
                    .map_or(TenantStatus::Active, |s| TenantStatus::parse(s)),
                created_at: attr_s(&item, "createdAt")?
                    .parse()
                    .map_err(|e| StoreError::Corrupt(format!("tenant createdAt: {e}")))?,
                // JSON; a marker without limits has the defaults.
                limits: match item.get("limits").and_then(|v| v.as_s().ok()) {
                    Some(json) => {
                        serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("tenant limits: {e}")))?
                    }
                    None => Default::default(),
                },
                // A marker written before the setting has none: the default.
                recording: item
                    .get("recording")
                    .and_then(|v| v.as_s().ok())
                    .and_then(|r| switchboard_domain::Recording::parse(r))
                    .unwrap_or_default(),
                // JSON, absent until set.
                calendars: match item.get("calendars").and_then(|v| v.as_s().ok()) {
                    Some(json) => {
                        serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("tenant calendars: {e}")))?
                    }
                    None => Default::default(),
                },
                time_zone: item.get("timeZone").and_then(|v| v.as_s().ok()).cloned(),
            })
        })
        .transpose()
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
        let triggers = switchboard_domain::trigger::active_in_order(items.iter().map(decode::<Trigger>), event_type)?;
        if let Ok(mut cache) = self.triggers.lock() {
            cache.insert(k, (now, Arc::clone(&triggers)));
        }
        Ok(triggers)
    }
}
