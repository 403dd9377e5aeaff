//! Tenant bundles: one JSON file holding a tenant with its tools, skills, agents and triggers,
//! loaded in one go (the demo's example tenant, `switchboard serve --tenant FILE`, and
//! `POST /tenants/{t}/apply` behind `switchboard apply`, on either profile). Everything is
//! validated before anything is written; errors carry a JSON pointer into the file.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchboard_domain::calendar::{Calendars, check_calendars};
use switchboard_domain::input::record_with_defaults;
use switchboard_domain::{Agent, Skill, TenantId, TenantLimits, Tool, ToolId, Trigger, ValidationErrors};

use crate::config::plural;
use crate::ports::{Clock, ConfigAdmin, ConfigRecord, ConfigStore};
use crate::{ConfigService, ConfigWriteError, TenantChanges};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BundleFile {
    tenant_id: TenantId,
    name: String,
    #[serde(default)]
    limits: Option<TenantLimits>,
    #[serde(default)]
    calendars: Option<Calendars>,
    #[serde(default)]
    agents: Vec<Value>,
    #[serde(default)]
    triggers: Vec<Value>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    skills: Vec<Value>,
}

/// A parsed and validated bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub tenant_id: TenantId,
    pub name: String,
    /// The tenant's limits, when the file sets them (what it leaves out takes the defaults).
    /// Only an admin may change them.
    pub limits: Option<TenantLimits>,
    /// The tenant's business-hours calendars, all of them, when the file sets them (a name
    /// left out is removed). Only an owner or an admin may change them.
    pub calendars: Option<Calendars>,
    pub agents: Vec<Agent>,
    pub triggers: Vec<Trigger>,
    /// Custom (webhook) tools; agents name them by id.
    pub tools: Vec<Tool>,
    /// Skills agents load on demand; agents name them by id.
    pub skills: Vec<Skill>,
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {errors}")]
    Invalid { path: String, errors: ValidationErrors },
    #[error("{path}: {source}")]
    Store { path: String, source: ConfigWriteError },
}

/// Fills in what a bundle may leave out (tenant, timestamps), then deserializes with the path of
/// the first bad field.
fn record<T: for<'de> Deserialize<'de>>(
    v: Value,
    tenant: &TenantId,
    now: &str,
    pointer: &str,
    errors: &mut ValidationErrors,
) -> Option<T> {
    let defaults = [("tenantId", json!(tenant)), ("createdAt", json!(now)), ("updatedAt", json!(now))];
    match record_with_defaults(v, &defaults, pointer) {
        Ok(t) => Some(t),
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    }
}

/// Adds a record's own validation errors under the record's pointer in the file.
fn nest(errors: &mut ValidationErrors, pointer: &str, result: Result<(), ValidationErrors>) {
    if let Err(e) = result {
        errors.0.extend(e.0.into_iter().map(|mut f| {
            f.pointer = format!("{pointer}{}", f.pointer);
            f
        }));
    }
}

/// Reads a bundle's records, collecting every error with its pointer in the file.
struct Reader<'a> {
    tenant: &'a TenantId,
    now: &'a str,
    errors: &'a mut ValidationErrors,
}

impl Reader<'_> {
    /// The records of `section` that parse, each checked by `check` (given its pointer).
    fn records<T: for<'de> Deserialize<'de>>(
        &mut self,
        section: &str,
        values: Vec<Value>,
        check: impl Fn(&T, &str, &mut ValidationErrors),
    ) -> Vec<T> {
        let mut records = Vec::with_capacity(values.len());
        for (i, v) in values.into_iter().enumerate() {
            let pointer = format!("/{section}/{i}");
            if let Some(r) = record::<T>(v, self.tenant, self.now, &pointer, self.errors) {
                check(&r, &pointer, self.errors);
                records.push(r);
            }
        }
        records
    }
}

/// What the bundle's skills and agents name must be in the bundle: tools, parent skills,
/// skills, sub-agents.
fn check_references(agents: &[Agent], tools: &[Tool], skills: &[Skill], errors: &mut ValidationErrors) {
    let missing_tools = |errors: &mut ValidationErrors, pointer: &str, names: &[String]| {
        for (j, t) in names.iter().enumerate() {
            if let Ok(id) = t.parse::<ToolId>()
                && !tools.iter().any(|tool| tool.tool_id == id)
            {
                errors.push(format!("{pointer}/tools/{j}"), format!("no tool '{id}' in this bundle"));
            }
        }
    };
    for (i, skill) in skills.iter().enumerate() {
        missing_tools(errors, &format!("/skills/{i}"), &skill.tools);
        if let Some(parent) = skill.parent_skill
            && !skills.iter().any(|s| s.skill_id == parent)
        {
            errors.push(format!("/skills/{i}/parentSkill"), format!("no skill '{parent}' in this bundle"));
        }
    }
    for (i, agent) in agents.iter().enumerate() {
        missing_tools(errors, &format!("/agents/{i}"), &agent.tools);
        for (j, id) in agent.skills.iter().enumerate() {
            if !skills.iter().any(|s| s.skill_id == *id) {
                errors.push(format!("/agents/{i}/skills/{j}"), format!("no skill '{id}' in this bundle"));
            }
        }
        for (j, id) in agent.sub_agents.iter().enumerate() {
            if !agents.iter().any(|a| a.agent_id == *id) {
                errors.push(format!("/agents/{i}/subAgents/{j}"), format!("no agent '{id}' in this bundle"));
            }
        }
    }
}

impl Bundle {
    pub fn parse(text: &str, clock: &dyn Clock) -> Result<Self, ValidationErrors> {
        let file: BundleFile = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text))
            .map_err(|e| switchboard_domain::input::shape_error("", e))?;
        let now = clock.now().to_rfc3339();
        let mut errors = ValidationErrors::default();
        if let Some(Err(e)) = file.limits.as_ref().map(|l| l.validate("/limits")) {
            errors.0.extend(e.0);
        }
        if let Some(calendars) = &file.calendars {
            check_calendars(calendars, "/calendars", &mut errors);
        }
        let tenant = &file.tenant_id;
        let mut read = Reader { tenant, now: &now, errors: &mut errors };
        let agents: Vec<Agent> = read.records("agents", file.agents, |agent: &Agent, pointer, errors| {
            if agent.tenant_id != *tenant {
                errors.push(format!("{pointer}/tenantId"), "must be the bundle's tenant");
            }
            nest(errors, pointer, agent.validate());
        });
        let tools: Vec<Tool> = read.records("tools", file.tools, |tool: &Tool, pointer, errors| {
            nest(errors, pointer, tool.validate());
        });
        let skills: Vec<Skill> = read.records("skills", file.skills, |skill: &Skill, pointer, errors| {
            nest(errors, pointer, skill.validate());
        });
        check_references(&agents, &tools, &skills, read.errors);
        let mut triggers = Vec::new();
        for (i, v) in file.triggers.into_iter().enumerate() {
            let pointer = format!("/triggers/{i}");
            if let Err(e) = switchboard_domain::trigger::check_conditions(&v, &pointer) {
                read.errors.0.extend(e.0);
                continue;
            }
            if let Some(trigger) = record::<Trigger>(v, tenant, &now, &pointer, read.errors) {
                let errors = &mut *read.errors;
                if trigger.tenant_id != *tenant {
                    errors.push(format!("{pointer}/tenantId"), "must be the bundle's tenant");
                }
                if !agents.iter().any(|a| a.agent_id == trigger.agent_id) {
                    errors
                        .push(format!("{pointer}/agentId"), format!("no agent '{}' in this bundle", trigger.agent_id));
                }
                nest(errors, &pointer, trigger.validate());
                // Named calendars are the bundle's when it sets them (else the tenant's, checked
                // when the trigger is written).
                if let Some(calendars) = &file.calendars {
                    for (at, name) in trigger.conditions.calendar_refs() {
                        if !calendars.contains_key(&name) {
                            errors.push(
                                format!("{pointer}/conditions{at}"),
                                format!("no calendar '{name}' in this bundle"),
                            );
                        }
                    }
                }
                triggers.push(trigger);
            }
        }
        errors.into_result()?;
        Ok(Self {
            tenant_id: file.tenant_id,
            name: file.name,
            limits: file.limits,
            calendars: file.calendars,
            agents,
            triggers,
            tools,
            skills,
        })
    }

    pub fn from_file(path: &Path, clock: &dyn Clock) -> Result<Self, BundleError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| BundleError::Read { path: path.display().to_string(), source })?;
        Self::parse(&text, clock).map_err(|errors| BundleError::Invalid { path: path.display().to_string(), errors })
    }

    /// Creates the tenant if needed and sets its limits when the bundle has them, then writes
    /// every record through the configuration service (upserts: loading the same bundle twice is
    /// harmless).
    pub async fn install<S>(&self, store: &S) -> Result<(), ConfigWriteError>
    where
        S: ConfigStore + ConfigAdmin + Clone + 'static,
    {
        store.create_tenant(&self.tenant_id, &self.name).await?;
        if let Some(limits) = &self.limits {
            set_limits(store, store, &self.tenant_id, limits).await?;
        }
        let store = Arc::new(store.clone());
        let service = ConfigService::new(store.clone(), store);
        if let Some(calendars) = &self.calendars {
            set_calendars(&service, &self.tenant_id, calendars).await?;
        }
        service.upsert_all(&self.records()).await
    }

    /// Brings the tenant to what the bundle says: creates it when `create_tenant` allows and it
    /// does not exist, then creates or replaces each record that differs from what is stored
    /// (versions and timestamps aside; a replaced record keeps its `createdAt`). With `dry_run`,
    /// says what would change and writes nothing. Records stored but not in the bundle are left
    /// alone (a bundle adds and updates; it never deletes). `admin` may create the tenant and
    /// change its limits; anyone else applying limits that differ from the stored ones is
    /// refused at `/limits`, and nothing is written. Its calendars, set before its records are
    /// (its triggers may name them), change for an admin or an owner (`settings`) only, as with
    /// `PATCH /tenants/{t}`: refused at `/calendars` for anyone else, and when a stored trigger
    /// names one the bundle removes.
    pub async fn apply(
        &self,
        service: &ConfigService,
        (admin, settings): (bool, bool),
        dry_run: bool,
    ) -> Result<ApplyReport, ConfigWriteError> {
        let stored = service.config().get_tenant(&self.tenant_id).await?;
        let exists = stored.is_some();
        if !exists && !admin {
            return Err(ConfigWriteError::NotFound);
        }
        let limits = setting_change(
            self.limits.as_ref(),
            stored.as_ref().map(|t| &t.limits),
            &TenantLimits::default(),
            admin,
            ("/limits", "only an admin may change a tenant's limits"),
        )?;
        let calendars = setting_change(
            self.calendars.as_ref(),
            stored.as_ref().map(|t| &t.calendars),
            &Calendars::default(),
            admin || settings,
            ("/calendars", "only an owner or an admin may change a tenant's calendars"),
        )?;
        // The records are checked against the calendars the tenant will have.
        let service = match (&self.calendars, calendars) {
            (Some(wanted), Some(Change::Updated)) => &service.clone().with_calendars(wanted.clone()),
            _ => service,
        };
        let (changes, writes) = self.compare(service, exists).await?;
        if dry_run {
            // What the write would refuse, refused now (references, the records' own rules).
            if exists {
                service.check_all(&writes).await?;
            }
        } else {
            if !exists {
                service.admin().create_tenant(&self.tenant_id, &self.name).await?;
            }
            if let (Some(Change::Updated), Some(wanted)) = (limits, &self.limits) {
                set_limits(service.config().as_ref(), service.admin().as_ref(), &self.tenant_id, wanted).await?;
            }
            if let (Some(Change::Updated), Some(wanted)) = (calendars, &self.calendars) {
                set_calendars(service, &self.tenant_id, wanted).await?;
            }
            service.upsert_all(&writes).await?;
        }
        Ok(ApplyReport {
            tenant_id: self.tenant_id.clone(),
            dry_run,
            tenant_created: !exists,
            limits,
            calendars,
            changes,
        })
    }

    /// What applying the bundle's records would change, record by record, and the records to
    /// write for it (a replaced one keeping its `createdAt`); all new when the tenant does not
    /// `exist` yet.
    async fn compare(
        &self,
        service: &ConfigService,
        exists: bool,
    ) -> Result<(Vec<ApplyChange>, Vec<ConfigRecord>), ConfigWriteError> {
        let mut changes = Vec::new();
        let mut writes = Vec::new();
        // Compared as they would be stored (a trigger without a time zone takes the tenant's).
        for record in service.zoned_all(&self.records()).await? {
            let current = match exists {
                true => service.admin().get_config(&self.tenant_id, record.kind(), &record.id()).await?,
                false => None,
            };
            let change = match &current {
                None => Change::Created,
                Some(c) if comparable(c) == comparable(&record) => Change::Unchanged,
                Some(_) => Change::Updated,
            };
            changes.push(ApplyChange {
                kind: plural(record.kind()),
                id: record.id(),
                name: record.name().to_owned(),
                change,
            });
            if change != Change::Unchanged {
                writes.push(match current {
                    Some(c) => record.with_created_at(c.created_at()),
                    None => record,
                });
            }
        }
        Ok((changes, writes))
    }

    /// The bundle's records.
    pub fn records(&self) -> Vec<ConfigRecord> {
        let tools = self.tools.iter().cloned().map(ConfigRecord::Tool);
        let skills = self.skills.iter().cloned().map(ConfigRecord::Skill);
        let agents = self.agents.iter().cloned().map(ConfigRecord::Agent);
        let triggers = self.triggers.iter().cloned().map(ConfigRecord::Trigger);
        tools.chain(skills).chain(agents).chain(triggers).collect()
    }
}

/// What applying a bundle does to one of the tenant's settings: nothing when the bundle leaves
/// it out; unchanged when it is what the tenant has (`stored`, or `default` for a tenant the
/// apply creates); else updated, if the caller is `allowed` to, and refused at `pointer` with
/// `why` if not.
fn setting_change<T: PartialEq>(
    wanted: Option<&T>,
    stored: Option<&T>,
    default: &T,
    allowed: bool,
    (pointer, why): (&str, &str),
) -> Result<Option<Change>, ConfigWriteError> {
    let Some(wanted) = wanted else { return Ok(None) };
    if wanted == stored.unwrap_or(default) {
        Ok(Some(Change::Unchanged))
    } else if allowed {
        Ok(Some(Change::Updated))
    } else {
        Err(ConfigWriteError::Invalid(ValidationErrors::single(pointer, why)))
    }
}

/// Sets a tenant's calendars, all of them, as `PATCH /tenants/{t}` does (refusing to remove one
/// a stored trigger names).
async fn set_calendars(
    service: &ConfigService,
    tenant: &TenantId,
    calendars: &Calendars,
) -> Result<(), ConfigWriteError> {
    let changes = TenantChanges { calendars: Some(calendars.clone()), ..TenantChanges::default() };
    service.update_tenant(tenant, changes).await.map(|_| ())
}

/// Sets a stored tenant's limits.
async fn set_limits(
    config: &dyn ConfigStore,
    admin: &dyn ConfigAdmin,
    tenant: &TenantId,
    limits: &TenantLimits,
) -> Result<(), ConfigWriteError> {
    let Some(mut t) = config.get_tenant(tenant).await? else {
        return Err(ConfigWriteError::NotFound);
    };
    t.limits = limits.clone();
    match admin.update_tenant(&t).await? {
        true => Ok(()),
        false => Err(ConfigWriteError::NotFound),
    }
}

/// A record as stored, without what every write changes (version, timestamps).
fn comparable(record: &ConfigRecord) -> Value {
    let mut v = serde_json::to_value(record).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        for field in ["version", "createdAt", "updatedAt"] {
            o.remove(field);
        }
    }
    v
}

/// What `apply` did (or, in a dry run, would do) to one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Created,
    Updated,
    Unchanged,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyChange {
    /// `tools`, `skills`, `agents` or `triggers`.
    pub kind: &'static str,
    pub id: String,
    pub name: String,
    pub change: Change,
}

/// The outcome of applying a bundle, in write order (tools, skills, agents, triggers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    pub tenant_id: TenantId,
    pub dry_run: bool,
    pub tenant_created: bool,
    /// What became of the tenant's limits, when the bundle sets them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<Change>,
    /// What became of the tenant's calendars, when the bundle sets them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calendars: Option<Change>,
    pub changes: Vec<ApplyChange>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::SystemClock;

    fn refused(text: &str) -> Vec<(String, String)> {
        let errors = Bundle::parse(text, &SystemClock).expect_err("the bundle is refused");
        errors.0.into_iter().map(|e| (e.pointer, e.detail)).collect()
    }

    #[test]
    fn a_file_of_the_wrong_shape_names_the_field_at_fault() {
        assert_eq!(refused(r#"{"tenantId": "acme"}"#), [("/name".to_owned(), "is required".to_owned())]);
        let unknown = refused(r#"{"tenantId": "acme", "name": "A", "agent": []}"#);
        assert_eq!(unknown[0].0, "/agent");
        assert!(unknown[0].1.contains("known fields: tenantId, name, limits, calendars, agents"), "{unknown:?}");
        assert_eq!(refused("[]"), [(String::new(), "must be a JSON object".to_owned())]);
        assert_eq!(
            refused(r#"{"tenantId": "acme", "name": 7}"#),
            [("/name".to_owned(), "must be a string, not integer 7".to_owned())]
        );
        let value = refused(
            "{\n  \"tenantId\": \"acme\",\n  \"name\": \"A\",\n  \"limits\": {\"invocationsPerMinute\": -1}\n}",
        );
        assert_eq!(value[0].0, "/limits/invocationsPerMinute");
        assert_eq!(value[0].1, "must be a whole number from 0 to 4294967295, not integer -1");
        let other = refused("{\n  \"tenantId\": \"acme\",\n  \"name\": \"A\",\n  \"name\": \"B\"\n}");
        assert!(other[0].1.ends_with("at line 4 column 8"), "{other:?}");
    }

    #[test]
    fn a_bundles_calendars_are_checked_and_its_triggers_may_name_only_them() {
        let bundle = |calendars: serde_json::Value, calendar: &str| {
            json!({ "tenantId": "acme", "name": "A", "calendars": calendars,
                "agents": [{ "agentId": "01JD0000SVPP0RT0AGENT00001", "name": "Desk", "systemPrompt": "Help." }],
                "triggers": [{ "triggerId": "01JD0000TR1GGER0CHAT000001", "name": "t", "agentId": "01JD0000SVPP0RT0AGENT00001",
                               "eventType": "message.new", "conditions": { "time": { "calendar": calendar } } }] })
            .to_string()
        };
        let desk = json!({ "desk": { "timeZone": "Europe/Paris", "hours": { "MON": ["09:00-17:00"] } } });
        let read = Bundle::parse(&bundle(desk.clone(), "desk"), &SystemClock).unwrap();
        assert_eq!(read.calendars.unwrap()["desk"].time_zone, "Europe/Paris");
        assert_eq!(
            refused(&bundle(desk, "night")),
            [("/triggers/0/conditions/time/calendar".to_owned(), "no calendar 'night' in this bundle".to_owned())]
        );
        let bad = json!({ "desk": { "timeZone": "Mars/Base" } });
        assert_eq!(refused(&bundle(bad, "desk"))[0].0, "/calendars/desk/timeZone");
    }
}
