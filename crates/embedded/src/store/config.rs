//! Tenant configuration: reads for the engine (tenants, agents and triggers cached until the next
//! write) and conditional writes for the configuration service, each with its kept version.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, params};
use switchboard_domain::TriggerId;
use switchboard_domain::{
    Agent, AgentId, EventType, Recording, Skill, SkillId, Tenant, TenantId, TenantStatus, Tool, ToolId, Trigger,
};
use switchboard_engine::{
    Authorship, ConfigAdmin, ConfigKind, ConfigRecord, ConfigStore, ConfigVersion, DueSchedule, Page, ScheduleStore,
    StoreError,
};

use switchboard_domain::trigger::active_in_order;

use super::versions::{COLUMNS, Keep, Row, keep, read_row, version as kept};
use super::{SqliteStore, from_json, is_constraint, store_err};
use crate::db::atomic;

/// A page of a tenant's records of kind `?2` in id order, after id `?3`, at most `?4`.
pub(crate) const LIST_CONFIG: &str = "SELECT id, body FROM config_records
     WHERE tenant_id = CAST(?1 AS TEXT) AND kind = CAST(?2 AS TEXT) AND id > CAST(?3 AS TEXT)
     ORDER BY id LIMIT CAST(?4 AS INTEGER)";

#[async_trait]
impl ConfigStore for SqliteStore {
    async fn get_tenant(&self, tenant: &TenantId) -> Result<Option<Tenant>, StoreError> {
        if let Some(hit) = self.caches.get(|e| e.tenants.get(tenant).cloned()) {
            return Ok(Some(hit));
        }
        let generation = self.caches.generation();
        let t = tenant.to_string();
        type Row = (String, String, String, Option<String>, Option<String>, Option<String>, Option<String>);
        let row: Option<Row> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached(
                    "SELECT name, status, created_at, limits, recording, calendars, time_zone
                       FROM tenants LEFT JOIN tenant_settings USING (tenant_id)
                                    LEFT JOIN tenant_calendars USING (tenant_id)
                                    LEFT JOIN tenant_zones USING (tenant_id)
                      WHERE tenant_id = ?1",
                )?
                .query_row(params![t], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
                })
                .optional()?)
            })
            .await
            .map_err(store_err)?;
        let found = row
            .map(|(name, status, created, limits, recording, calendars, time_zone)| {
                Ok::<_, StoreError>(Tenant {
                    tenant_id: tenant.clone(),
                    name,
                    status: TenantStatus::parse(&status),
                    created_at: created.parse().map_err(|e| StoreError::Corrupt(format!("tenant createdAt: {e}")))?,
                    limits: limits.as_deref().map(from_json).transpose()?.unwrap_or_default(),
                    // No value: a tenant from before the setting, which has the default.
                    recording: recording.as_deref().and_then(Recording::parse).unwrap_or_default(),
                    calendars: calendars.as_deref().map(from_json).transpose()?.unwrap_or_default(),
                    time_zone,
                })
            })
            .transpose()?;
        if let Some(t) = &found {
            self.caches.fill(generation, |e| {
                e.tenants.insert(tenant.clone(), t.clone());
            });
        }
        Ok(found)
    }

    async fn get_agent(&self, tenant: &TenantId, agent: AgentId) -> Result<Option<Agent>, StoreError> {
        let key = (tenant.clone(), agent);
        if let Some(hit) = self.caches.get(|e| e.agents.get(&key).cloned()) {
            return Ok(Some(hit));
        }
        let generation = self.caches.generation();
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
        let found: Option<Agent> = body.map(|b| from_json(&b)).transpose()?;
        if let Some(a) = &found {
            self.caches.fill(generation, |e| {
                e.agents.insert(key, a.clone());
            });
        }
        Ok(found)
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
        if let Some(hit) = self.caches.get(|e| e.triggers.get(&key).cloned()) {
            return Ok(hit);
        }
        let generation = self.caches.generation();
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
        let triggers = active_in_order(bodies.iter().map(|b| from_json::<Trigger>(b)), event_type)?;
        self.caches.fill(generation, |e| {
            e.triggers.insert(key, Arc::clone(&triggers));
        });
        Ok(triggers)
    }
}

#[async_trait]
impl ConfigAdmin for SqliteStore {
    /// The scheduler ([`crate::Embedded::start_scheduler`]) fires what this store keeps.
    fn fires_schedules(&self) -> bool {
        true
    }

    async fn create_tenant(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        SqliteStore::create_tenant(self, tenant, name).await
    }

    async fn update_tenant(&self, tenant: &Tenant) -> Result<bool, StoreError> {
        let (t, name, status) = (tenant.tenant_id.to_string(), tenant.name.clone(), tenant.status.as_str());
        let limits = serde_json::to_string(&tenant.limits).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let recording = tenant.recording.as_str();
        let calendars = match tenant.calendars.is_empty() {
            true => None,
            false => Some(serde_json::to_string(&tenant.calendars).map_err(|e| StoreError::Corrupt(e.to_string()))?),
        };
        let zone = tenant.time_zone.clone();
        let updated = self
            .db
            .call(move |c| {
                let tx = atomic(c)?;
                let updated = tx
                    .prepare_cached("UPDATE tenants SET name = ?2, status = ?3, limits = ?4 WHERE tenant_id = ?1")?
                    .execute(params![t, name, status, limits])?
                    == 1;
                if updated {
                    tx.prepare_cached(
                        "INSERT INTO tenant_settings (tenant_id, recording) VALUES (?1, ?2)
                             ON CONFLICT (tenant_id) DO UPDATE SET recording = excluded.recording",
                    )?
                    .execute(params![t, recording])?;
                    set_or_clear(&tx, ("tenant_calendars", "calendars"), &t, calendars.as_deref())?;
                    set_or_clear(&tx, ("tenant_zones", "time_zone"), &t, zone.as_deref())?;
                }
                tx.commit()?;
                Ok(updated)
            })
            .await
            .map_err(store_err);
        self.invalidate(&tenant.tenant_id);
        updated
    }

    async fn delete_tenant(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        let t = tenant.to_string();
        let day_tokens = self.day_tokens.clone();
        let result = self
            .db
            .call(move |c| {
                let tx = atomic(c)?;
                for table in [
                    "config_records",
                    "config_versions",
                    "api_keys",
                    "sessions",
                    "executions",
                    "content",
                    "tenant_settings",
                    "tenant_calendars",
                    "tenant_zones",
                    "messages",
                    "events",
                    "usage_daily",
                    "activity_hourly",
                    "variant_hourly",
                    "insight_hourly",
                    "insight_counters",
                    "insight_buckets",
                    "tenant_counters",
                    "session_slots",
                    "session_slot_counts",
                    "schedules",
                ] {
                    tx.prepare_cached(&format!("DELETE FROM {table} WHERE tenant_id = ?1"))?.execute(params![t])?;
                }
                crate::queue::forget_tenant(&tx, &t)?;
                tx.prepare_cached("DELETE FROM tenants WHERE tenant_id = ?1")?.execute(params![t])?;
                tx.commit()?;
                day_tokens.forget(&t);
                Ok(true)
            })
            .await
            .map_err(store_err);
        self.invalidate(tenant);
        result
    }

    async fn put_config(
        &self,
        record: &ConfigRecord,
        expected_version: Option<u64>,
        by: &Authorship,
    ) -> Result<(), StoreError> {
        let tenant = record.tenant_id().clone();
        let (t, kind, id) = (tenant.to_string(), record.kind().as_str(), record.id());
        let version = i64::try_from(record.version()).unwrap_or(i64::MAX);
        let expected = expected_version.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        let body = serde_json::to_string(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let schedule = match record {
            ConfigRecord::Trigger(trigger) => Some(trigger.next_slot_after(by.at)),
            _ => None,
        };
        let by = by.clone();
        let written = self
            .db
            .call(move |c| {
                let tx = atomic(c)?;
                let result = match expected {
                    None => tx
                        .prepare_cached(
                            "INSERT INTO config_records (tenant_id, kind, id, version, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                        )?
                        .execute(params![t, kind, id, version, body]),
                    Some(expected) => tx
                        .prepare_cached(
                            "UPDATE config_records SET version = ?4, body = ?5
                             WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3 AND version = ?6",
                        )?
                        .execute(params![t, kind, id, version, body, expected]),
                };
                let kept = Keep { tenant: &t, kind, id: &id, version, deleted: false, body: &body };
                let result = result.and_then(|n| if n == 1 { keep(&tx, &kept, &by) } else { Ok(0) });
                let result = match (result, &schedule) {
                    (Ok(1), Some(next)) => keep_schedule(&tx, &t, &id, next.as_ref()).map(|()| 1),
                    (other, _) => other,
                };
                match result {
                    Ok(1) => tx.commit().map(|()| true).map_err(Into::into),
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
                let mut stmt = c.prepare_cached(LIST_CONFIG)?;
                let rows = stmt
                    .query_map(params![t, k, after, fetch], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
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
        by: &Authorship,
    ) -> Result<bool, StoreError> {
        let (t, k, id_owned) = (tenant.to_string(), kind.as_str(), id.to_owned());
        let expected = i64::try_from(expected_version).unwrap_or(i64::MAX);
        let by = by.clone();
        let outcome: Option<i64> = self
            .db
            .call(move |c| {
                let tx = atomic(c)?;
                let current: Option<(i64, String)> = tx
                    .prepare_cached(
                        "SELECT version, body FROM config_records WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3",
                    )?
                    .query_row(params![t, k, id_owned], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                if let Some((_, body)) = current.as_ref().filter(|(v, _)| *v == expected) {
                    tx.prepare_cached("DELETE FROM config_records WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3")?
                        .execute(params![t, k, id_owned])?;
                    if k == ConfigKind::Trigger.as_str() {
                        keep_schedule(&tx, &t, &id_owned, None)?;
                    }
                    let version = expected.saturating_add(1);
                    keep(&tx, &Keep { tenant: &t, kind: k, id: &id_owned, version, deleted: true, body }, &by)?;
                    tx.commit()?;
                }
                Ok(current.map(|(v, _)| v))
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

    async fn list_versions(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Page<ConfigVersion>, StoreError> {
        let (t, k, i) = (tenant.to_string(), kind.as_str(), id.to_owned());
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows: Vec<Row> = self
            .db
            .call(move |c| {
                let sql = format!(
                    "{COLUMNS} WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3 AND version < ?4
                     ORDER BY version DESC LIMIT ?5"
                );
                let mut stmt = c.prepare_cached(&sql)?;
                let rows = stmt.query_map(params![t, k, i, before, fetch], read_row)?.collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let items = rows.into_iter().map(|row| kept(kind, id, row)).collect::<Result<Vec<_>, _>>()?;
        Ok(Page::from_overfetch(items, limit, |v| v.version.to_string()))
    }

    async fn get_version(
        &self,
        tenant: &TenantId,
        kind: ConfigKind,
        id: &str,
        version: u64,
    ) -> Result<Option<ConfigVersion>, StoreError> {
        let (t, k, i) = (tenant.to_string(), kind.as_str(), id.to_owned());
        let n = i64::try_from(version).unwrap_or(i64::MAX);
        let row: Option<Row> = self
            .db
            .call(move |c| {
                let sql = format!("{COLUMNS} WHERE tenant_id = ?1 AND kind = ?2 AND id = ?3 AND version = ?4");
                Ok(c.prepare_cached(&sql)?.query_row(params![t, k, i, n], read_row).optional()?)
            })
            .await
            .map_err(store_err)?;
        row.map(|row| kept(kind, id, row)).transpose()
    }
}

/// Keeps the next slot of trigger `id` (its spec and slot), or forgets it (`None`: not an active
/// schedule trigger any more). A write that keeps the spec keeps the slot the trigger is at, so
/// that editing, say, the input does not skip a slot that is due.
fn keep_schedule(
    tx: &rusqlite::Connection,
    tenant: &str,
    id: &str,
    next: Option<&(String, chrono::DateTime<chrono::Utc>)>,
) -> rusqlite::Result<()> {
    match next {
        None => {
            tx.prepare_cached("DELETE FROM schedules WHERE tenant_id = ?1 AND trigger_id = ?2")?
                .execute(params![tenant, id])?;
        }
        Some((spec, at)) => {
            tx.prepare_cached(
                "INSERT INTO schedules (tenant_id, trigger_id, spec, next_slot) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tenant_id, trigger_id) DO UPDATE SET
                     next_slot = CASE WHEN schedules.spec = excluded.spec THEN schedules.next_slot
                                      ELSE excluded.next_slot END,
                     spec = excluded.spec",
            )?
            .execute(params![tenant, id, spec, at.timestamp_millis()])?;
        }
    }
    Ok(())
}

#[async_trait]
impl ScheduleStore for SqliteStore {
    async fn due_schedules(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<DueSchedule>, StoreError> {
        let (now, limit) = (now.timestamp_millis(), i64::try_from(limit).unwrap_or(i64::MAX));
        let rows: Vec<(String, String, i64)> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT tenant_id, trigger_id, next_slot FROM schedules WHERE next_slot <= ?1
                     ORDER BY next_slot LIMIT ?2",
                )?;
                let rows = stmt
                    .query_map(params![now, limit], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        rows.into_iter()
            .map(|(tenant, trigger, slot)| {
                let corrupt = |what: &str| StoreError::Corrupt(format!("schedule of trigger {trigger}: bad {what}"));
                Ok(DueSchedule {
                    tenant_id: tenant.parse().map_err(|_| corrupt("tenant id"))?,
                    trigger_id: trigger.parse().map_err(|_| corrupt("trigger id"))?,
                    slot: DateTime::from_timestamp_millis(slot).ok_or_else(|| corrupt("slot"))?,
                })
            })
            .collect()
    }

    async fn move_slot(
        &self,
        tenant: &TenantId,
        trigger: TriggerId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let (t, id) = (tenant.to_string(), trigger.to_string());
        let (from, to) = (from.timestamp_millis(), to.timestamp_millis());
        self.db
            .call(move |c| {
                Ok(c.prepare_cached(
                    "UPDATE schedules SET next_slot = ?4 WHERE tenant_id = ?1 AND trigger_id = ?2 AND next_slot = ?3",
                )?
                .execute(params![t, id, from, to])?
                    == 1)
            })
            .await
            .map_err(store_err)
    }
}

pub(super) fn decode(kind: ConfigKind, body: &str) -> Result<ConfigRecord, StoreError> {
    Ok(match kind {
        ConfigKind::Agent => ConfigRecord::Agent(from_json(body)?),
        ConfigKind::Trigger => ConfigRecord::Trigger(from_json(body)?),
        ConfigKind::Tool => ConfigRecord::Tool(from_json(body)?),
        ConfigKind::Skill => ConfigRecord::Skill(from_json(body)?),
    })
}

/// Keeps `value` as the tenant's row of a one-setting table (`table`, `column`), or removes the
/// row when there is none (the setting is unset).
fn set_or_clear(
    tx: &rusqlite::Connection,
    (table, column): (&str, &str),
    tenant: &str,
    value: Option<&str>,
) -> rusqlite::Result<usize> {
    match value {
        Some(v) => tx
            .prepare_cached(&format!(
                "INSERT INTO {table} (tenant_id, {column}) VALUES (?1, ?2)
                 ON CONFLICT (tenant_id) DO UPDATE SET {column} = excluded.{column}"
            ))?
            .execute(params![tenant, v]),
        None => tx.prepare_cached(&format!("DELETE FROM {table} WHERE tenant_id = ?1"))?.execute(params![tenant]),
    }
}
