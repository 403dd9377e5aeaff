//! Schedule triggers' next slots on DynamoDB: attributes of the trigger's own item in the config
//! table (`scheduleSpec`, `nextSlot`, and `dueShard` for the index), written in the trigger's
//! write and gone with the item, and the sparse GSI `SchedulesDue` (partition `dueShard`, sort
//! `nextSlot`) that only active schedule triggers are in. A tick queries the index for slots at
//! or before now and claims each with a conditional `UpdateItem` on `nextSlot` (the main table:
//! strongly consistent, so two ticks never both claim one slot, however stale the index).

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::builders::UpdateBuilder;
use chrono::{DateTime, Utc};
use switchboard_domain::{TenantId, Trigger, TriggerId};
use switchboard_engine::{ConfigKind, DueSchedule, ScheduleStore, StoreError};

use super::codec::{attr_s, build_err, conditional, unavailable};
use super::keys::{config_sk, key, s, sortable, tenant_pk};
use super::{DynamoStore, Item};

/// The config table's sparse index of active schedule triggers by next slot.
pub const SCHEDULES_DUE: &str = "SchedulesDue";
/// The one partition of [`SCHEDULES_DUE`]. A tick reads it whole, oldest slot first; one
/// partition serves some thousand reads a second, far past one tick a minute.
const DUE_SHARD: &str = "DUE";

/// The attributes of a trigger item that hold its schedule, beside the record's body.
pub(super) const SPEC: &str = "scheduleSpec";
pub(super) const NEXT_SLOT: &str = "nextSlot";
pub(super) const SHARD: &str = "dueShard";

/// How a trigger's write treats its slot: `None` for a trigger that keeps none (not an active
/// schedule trigger); else its spec, and the slot to write (`None`: keep the one stored, since
/// the spec did not change).
pub(super) type SlotWrite = Option<(String, Option<DateTime<Utc>>)>;

impl DynamoStore {
    /// What the write of `trigger` at `at` does to its slot, reading the stored one when the spec
    /// may be unchanged (an update of an active schedule trigger).
    pub(super) async fn slot_write(
        &self,
        trigger: &Trigger,
        at: DateTime<Utc>,
        updating: bool,
    ) -> Result<SlotWrite, StoreError> {
        let Some((spec, next)) = trigger.next_slot_after(at) else { return Ok(None) };
        if updating {
            let k = key(tenant_pk(&trigger.tenant_id), config_sk(ConfigKind::Trigger, &trigger.trigger_id.to_string()));
            let stored = self.get_item(&self.names.config_table, k, "GetItem").await?;
            let same = stored
                .as_ref()
                .is_some_and(|i| i.get(SPEC).and_then(|v| v.as_s().ok()) == Some(&spec) && i.contains_key(NEXT_SLOT));
            if same {
                return Ok(Some((spec, None)));
            }
        }
        Ok(Some((spec, Some(next))))
    }
}

/// The trigger item's write as an `Update` of every attribute: the record's (`fields`) and its
/// slot's. A slot kept as it is (the spec unchanged) is not written, so a tick that moves it
/// meanwhile is not undone.
pub(super) fn trigger_update(table: &str, mut fields: Item, slot: &SlotWrite) -> Result<UpdateBuilder, StoreError> {
    let pk = fields.remove("PK").ok_or_else(|| build_err("a trigger item without PK"))?;
    let sk = fields.remove("SK").ok_or_else(|| build_err("a trigger item without SK"))?;
    let mut names = Vec::new();
    let mut values: Vec<(String, AttributeValue)> = Vec::new();
    let mut sets = Vec::new();
    for (i, (name, value)) in fields.into_iter().enumerate() {
        sets.push(format!("#f{i} = :f{i}"));
        names.push((format!("#f{i}"), name));
        values.push((format!(":f{i}"), value));
    }
    let mut removes = Vec::new();
    names.extend([("#spec".to_owned(), SPEC.to_owned()), ("#shard".into(), SHARD.into())]);
    match slot {
        None => {
            removes.extend(["#spec", "#next", "#shard"]);
            names.push(("#next".into(), NEXT_SLOT.into()));
        }
        Some((spec, next)) => {
            sets.push("#spec = :spec, #shard = :shard".to_owned());
            values.push((":spec".into(), s(spec.clone())));
            values.push((":shard".into(), s(DUE_SHARD)));
            if let Some(next) = next {
                sets.push("#next = :next".to_owned());
                values.push((":next".into(), s(sortable(*next))));
                names.push(("#next".into(), NEXT_SLOT.into()));
            }
        }
    }
    let mut expression = format!("SET {}", sets.join(", "));
    if !removes.is_empty() {
        expression.push_str(&format!(" REMOVE {}", removes.join(", ")));
    }
    let mut update = aws_sdk_dynamodb::types::Update::builder()
        .table_name(table)
        .set_key(Some(key_of(pk, sk)))
        .update_expression(expression);
    for (placeholder, name) in names {
        update = update.expression_attribute_names(placeholder, name);
    }
    for (placeholder, value) in values {
        update = update.expression_attribute_values(placeholder, value);
    }
    Ok(update)
}

fn key_of(pk: AttributeValue, sk: AttributeValue) -> Item {
    Item::from([("PK".to_owned(), pk), ("SK".to_owned(), sk)])
}

#[async_trait]
impl ScheduleStore for DynamoStore {
    /// One query of the index (eventually consistent: a slot just moved may still be listed, and
    /// its claim then fails), oldest slot first.
    async fn due_schedules(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<DueSchedule>, StoreError> {
        let mut due = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.names.config_table)
                .index_name(SCHEDULES_DUE)
                .key_condition_expression("#shard = :shard AND #next <= :now")
                .expression_attribute_names("#shard", SHARD)
                .expression_attribute_names("#next", NEXT_SLOT)
                .expression_attribute_values(":shard", s(DUE_SHARD))
                .expression_attribute_values(":now", s(sortable(now)))
                .limit(i32::try_from(limit.saturating_sub(due.len())).unwrap_or(i32::MAX).max(1))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("Query", &e))?;
            for item in out.items.unwrap_or_default() {
                due.push(due_schedule(&item)?);
            }
            match out.last_evaluated_key {
                Some(k) if due.len() < limit => start = Some(k),
                _ => return Ok(due),
            }
        }
    }

    async fn move_slot(
        &self,
        tenant: &TenantId,
        trigger: TriggerId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.names.config_table)
            .set_key(Some(key(tenant_pk(tenant), config_sk(ConfigKind::Trigger, &trigger.to_string()))))
            .update_expression("SET #next = :to")
            .condition_expression("#next = :from")
            .expression_attribute_names("#next", NEXT_SLOT)
            .expression_attribute_values(":from", s(sortable(from)))
            .expression_attribute_values(":to", s(sortable(to)))
            .send()
            .await;
        conditional("UpdateItem", result)
    }
}

/// A due slot from an index item: the tenant and trigger from the table's keys.
fn due_schedule(item: &Item) -> Result<DueSchedule, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("a schedule item with a bad {what}"));
    let tenant = attr_s(item, "PK")?.strip_prefix("TENANT#").ok_or_else(|| corrupt("PK"))?;
    let trigger = attr_s(item, "SK")?.strip_prefix("TRIGGER#").ok_or_else(|| corrupt("SK"))?;
    let slot = DateTime::parse_from_rfc3339(attr_s(item, NEXT_SLOT)?).map_err(|_| corrupt(NEXT_SLOT))?;
    Ok(DueSchedule {
        tenant_id: tenant.parse().map_err(|_| corrupt("tenant id"))?,
        trigger_id: trigger.parse().map_err(|_| corrupt("trigger id"))?,
        slot: slot.with_timezone(&Utc),
    })
}
