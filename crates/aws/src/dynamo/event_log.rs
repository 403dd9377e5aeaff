//! The tenant's event log on AWS: every outbound event, as `GET /tenants/{t}/events` lists it
//! (the operator console reads it), and the outbox the stream's relay publishes on EventBridge.
//! Partition `TENANT#<t>#EVENTS` in the executions table: `SEQ` the tenant's counter,
//! `EVENT#<seq>` each event (`body`, `at` in ms, `expiresAt`), `EVENTID#<id>` marking an event id
//! as logged. Kept as long as execution records.
//!
//! A writer takes its sequence numbers (an `UpdateItem` on `SEQ`), then writes its events in the
//! transaction of the change they report; so writers can commit out of their numbers' order, and
//! a transaction that fails leaves its numbers unused. A reader after `n` must not move past a
//! number a writer still holds, or it never sees that event: [`EventLog::events_after`] stops
//! before a missing number while the event after it is younger than [`SETTLE`], and a writer
//! whose transaction failed marks its numbers burned (`burned`, no body) so that readers pass
//! them at once. A missing number older than [`SETTLE`] (its writer died between the two calls)
//! is passed over.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Put, ReturnValue, TransactWriteItem};
use switchboard_domain::limits::EXECUTION_TTL_DAYS;
use switchboard_domain::{OutboundEvent, TenantId};
use switchboard_engine::{EventLog, StoreError};

use super::codec::*;
use super::keys::*;
use super::page::{Keep, paginate};
use super::{DynamoStore, Item};

/// How long a reader waits for a writer to commit an event under a number it took, past which
/// the number counts as unused. A writer commits within one transaction's time of taking it.
pub const SETTLE: chrono::Duration = chrono::Duration::seconds(10);

/// Sequence numbers a writer took, to mark burned if what was to carry them does not commit.
#[derive(Debug, Clone)]
pub(super) struct Taken {
    tenant: TenantId,
    seqs: std::ops::RangeInclusive<i64>,
}

/// Where a tenant's events are.
fn events_pk(tenant: &TenantId) -> String {
    format!("{}#EVENTS", tenant_pk(tenant))
}

/// Sequence numbers sort as text at this width (an `i64` has at most 19 digits).
fn event_sk(seq: i64) -> String {
    format!("EVENT#{seq:019}")
}

impl DynamoStore {
    /// The writes that keep `events` (a turn's outbox, all of one tenant) in the event log, for
    /// the turn's transaction: each event under a sequence number taken now, and its id marker;
    /// and the numbers taken, for [`DynamoStore::burn`] if the transaction fails. Unconditional:
    /// a turn's event ids derive from its source, which is committed once.
    pub(super) async fn outbox_items(
        &self,
        events: &[OutboundEvent],
    ) -> Result<(Vec<TransactWriteItem>, Option<Taken>), StoreError> {
        let Some(first) = events.first() else { return Ok((vec![], None)) };
        let last = self.take_seqs(&first.tenant_id, events.len()).await?;
        let now = self.clock.now();
        let ttl = n(ttl_seconds(now + chrono::Duration::days(EXECUTION_TTL_DAYS)));
        let mut writes = Vec::with_capacity(events.len() * 2);
        let first_seq = last - i64::try_from(events.len()).unwrap_or(i64::MAX) + 1;
        for (seq, event) in (first_seq..).zip(events) {
            let pk = events_pk(&event.tenant_id);
            let mut marker = key(pk.clone(), format!("EVENTID#{}", event.id));
            marker.insert("seq".into(), n(seq));
            marker.insert("expiresAt".into(), ttl.clone());
            let mut item: Item = key(pk, event_sk(seq));
            item.insert("body".into(), encode(event)?);
            item.insert("at".into(), n(now.timestamp_millis()));
            item.insert("expiresAt".into(), ttl.clone());
            // The stream's relay publishes what carries this (functions/lambda's `relay`).
            item.insert("outbox".into(), AttributeValue::Bool(true));
            for item in [marker, item] {
                let put = Put::builder()
                    .table_name(&self.names.executions_table)
                    .set_item(Some(item))
                    .build()
                    .map_err(build_err)?;
                writes.push(TransactWriteItem::builder().put(put).build());
            }
        }
        Ok((writes, Some(Taken { tenant: first.tenant_id.clone(), seqs: first_seq..=last })))
    }

    /// Marks the numbers in `taken` burned, after what was to carry them did not commit, so
    /// that readers pass them without waiting ([`SETTLE`]). Each mark only where no event is
    /// (a transaction whose failure was only reported may have committed after all). Best
    /// effort: a number left unmarked is passed over after [`SETTLE`].
    pub(super) async fn burn(&self, taken: Option<Taken>) {
        let Some(Taken { tenant, seqs }) = taken else { return };
        let ttl = n(ttl_seconds(self.clock.now() + SETTLE * 6));
        for seq in seqs {
            let mut item: Item = key(events_pk(&tenant), event_sk(seq));
            item.insert("burned".into(), AttributeValue::Bool(true));
            item.insert("expiresAt".into(), ttl.clone());
            let marked = self
                .client
                .put_item()
                .table_name(&self.names.executions_table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(PK)")
                .send()
                .await;
            if let Err(e) = conditional("PutItem", marked) {
                tracing::warn!(tenant = %tenant, seq, error = %e, "could not mark an event number burned; readers pass it after the settle time");
            }
        }
    }

    /// Takes `count` sequence numbers of `tenant`'s event log: the last of them.
    async fn take_seqs(&self, tenant: &TenantId, count: usize) -> Result<i64, StoreError> {
        let counted = self
            .client
            .update_item()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(events_pk(tenant), "SEQ".into())))
            .update_expression("ADD #n :count")
            .expression_attribute_names("#n", "n")
            .expression_attribute_values(":count", n(i64::try_from(count).unwrap_or(i64::MAX)))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| unavailable("UpdateItem", &e))?;
        counted
            .attributes
            .as_ref()
            .and_then(|a| a.get("n"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| StoreError::Corrupt("the event counter has no number".into()))
    }

    /// Logs `event` under the tenant's next sequence number, unless its id is logged already;
    /// `true` when it was logged now.
    pub async fn log_event(&self, event: &OutboundEvent) -> Result<bool, StoreError> {
        let table = &self.names.executions_table;
        let pk = events_pk(&event.tenant_id);
        let seq = self.take_seqs(&event.tenant_id, 1).await?;
        let ttl = n(ttl_seconds(self.clock.now() + chrono::Duration::days(EXECUTION_TTL_DAYS)));
        let mut marker = key(pk.clone(), format!("EVENTID#{}", event.id));
        marker.insert("seq".into(), n(seq));
        marker.insert("expiresAt".into(), ttl.clone());
        let mut item: Item = key(pk, event_sk(seq));
        item.insert("body".into(), encode(event)?);
        item.insert("at".into(), n(self.clock.now().timestamp_millis()));
        item.insert("expiresAt".into(), ttl);
        let put = |item: Item, condition: Option<&str>| -> Result<TransactWriteItem, StoreError> {
            let put = Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .set_condition_expression(condition.map(str::to_owned))
                .build()
                .map_err(build_err)?;
            Ok(TransactWriteItem::builder().put(put).build())
        };
        let writes = vec![put(marker, Some("attribute_not_exists(PK)"))?, put(item, None)?];
        let logged =
            transact_conditional(self.client.transact_write_items().set_transact_items(Some(writes)).send().await);
        if !matches!(logged, Ok(true)) {
            self.burn(Some(Taken { tenant: event.tenant_id.clone(), seqs: seq..=seq })).await;
        }
        logged
    }
}

#[async_trait]
impl EventLog for DynamoStore {
    async fn events_after(
        &self,
        tenant: &TenantId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, OutboundEvent)>, StoreError> {
        let now = self.clock.now();
        let query = self
            .client
            .query()
            .table_name(&self.names.executions_table)
            .key_condition_expression("PK = :pk AND SK BETWEEN :from AND :to")
            // Strong: a console reads right after a push tells it of an event just logged.
            .consistent_read(true)
            .expression_attribute_values(":pk", s(events_pk(tenant)))
            .expression_attribute_values(":from", s(event_sk(after.saturating_add(1).max(0))))
            .expression_attribute_values(":to", s("EVENT#~"));
        // Each number in turn from `after`: a missing one the next event is younger than SETTLE
        // after may still be committed, so nothing from it on is read yet.
        let mut next = after.saturating_add(1).max(0);
        let settled = (now - SETTLE).timestamp_millis();
        paginate(query, None)
            .take_until(limit, |item| {
                let Some(seq) = attr_s(&item, "SK")?.strip_prefix("EVENT#").and_then(|v| v.parse::<i64>().ok()) else {
                    return Ok(Keep::Skip);
                };
                let number =
                    |name: &str| item.get(name).and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<i64>().ok());
                if seq > next && number("at").is_some_and(|at| at > settled) {
                    return Ok(Keep::Stop);
                }
                next = seq.saturating_add(1);
                if item.contains_key("burned") || number("expiresAt").is_some_and(|t| t <= now.timestamp()) {
                    return Ok(Keep::Skip);
                }
                let event: OutboundEvent = decode(&item)?;
                Ok(if event.tenant_id == *tenant { Keep::Item((seq, event)) } else { Keep::Skip })
            })
            .await
    }
}
