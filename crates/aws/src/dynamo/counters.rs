//! Tenant counters in DynamoDB: one item per tenant and window in the executions table
//! (`TENANT#<t>#LIMIT`, `<window>`), changed by conditional `UpdateItem`s, so that every Lambda
//! container shares one exact count. Items expire through the table's TTL (`expiresAt`).
//!
//! Session slots: `TENANT#<t>#SLOT` holds one item per conversation with a slot (`CONV#<id>`,
//! `heldUntil` in epoch milliseconds — deliberately not the TTL attribute, since a lease DynamoDB
//! deleted by itself would never be subtracted) and the count of them (`COUNT`, `open`). Taking a
//! slot is one transaction that adds to the count under the limit and puts the lease; freeing one
//! deletes the lease and subtracts in one transaction, conditional on the lease as read. So
//! `open` always equals the number of leases, and never passes the limit. Idle leases are freed
//! only when the slots are all held (a `Query` of the tenant's leases, at most the limit).

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem, Update};
use chrono::{DateTime, Utc};
use switchboard_domain::TenantId;
use switchboard_engine::{Admit, Counters, Slot, SlotAndCount, StoreError};

use super::codec::{build_err, conditional, unavailable};
use super::keys::{key, n, ttl_seconds};
use super::{DynamoStore, Item};

fn counter_pk(t: &TenantId) -> String {
    format!("TENANT#{t}#LIMIT")
}

fn slots_pk(t: &TenantId) -> String {
    format!("TENANT#{t}#SLOT")
}

const SLOT_COUNT_SK: &str = "COUNT";
const LEASE_PREFIX: &str = "CONV#";

fn lease_sk(conversation: &str) -> String {
    format!("{LEASE_PREFIX}{conversation}")
}

/// How often a slot transaction that met a concurrent one on the count is tried again.
const SLOT_CONFLICT_RETRIES: u32 = 8;

/// How a slot transaction ended.
enum TxEnd {
    Done,
    /// The condition of the item at this index did not hold.
    Condition(usize),
    /// Another transaction wrote one of its items at the same time.
    Conflict,
}

fn tx_end(result: Result<impl Sized, SdkError<TransactWriteItemsError>>) -> Result<TxEnd, StoreError> {
    let err = match result {
        Ok(_) => return Ok(TxEnd::Done),
        Err(e) => e,
    };
    let Some(TransactWriteItemsError::TransactionCanceledException(tce)) = err.as_service_error() else {
        return Err(unavailable("TransactWriteItems", &err));
    };
    let reasons = tce.cancellation_reasons();
    if let Some(i) = reasons.iter().position(|r| r.code() == Some("ConditionalCheckFailed")) {
        return Ok(TxEnd::Condition(i));
    }
    if reasons.iter().any(|r| r.code() == Some("TransactionConflict")) {
        return Ok(TxEnd::Conflict);
    }
    Err(unavailable("TransactWriteItems", &err))
}

impl DynamoStore {
    /// The count's change by `by`, in a slot transaction (conditional when taking).
    fn slot_count(&self, t: &TenantId, by: i64, limit: Option<u64>) -> Result<TransactWriteItem, StoreError> {
        let mut u = Update::builder()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(slots_pk(t), SLOT_COUNT_SK.to_owned())))
            .update_expression("ADD #open :by")
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":by", n(by));
        if let Some(limit) = limit {
            u = u
                .condition_expression("attribute_not_exists(#open) OR #open < :limit")
                .expression_attribute_values(":limit", n(limit));
        }
        Ok(TransactWriteItem::builder().update(u.build().map_err(build_err)?).build())
    }

    /// The conversation's lease held until `until`, put only if it holds none (in a slot
    /// transaction, beside the count of slots).
    fn new_lease(
        &self,
        t: &TenantId,
        conversation: &str,
        until: DateTime<Utc>,
    ) -> Result<TransactWriteItem, StoreError> {
        let mut lease: Item = key(slots_pk(t), lease_sk(conversation));
        lease.insert("heldUntil".into(), n(until.timestamp_millis()));
        let put = Put::builder()
            .table_name(&self.names.executions_table)
            .set_item(Some(lease))
            .condition_expression("attribute_not_exists(PK)")
            .build()
            .map_err(build_err)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// Takes a free slot for `conversation`: `Some(true)` taken, `Some(false)` the conversation
    /// already holds one, `None` every slot is held.
    async fn take_slot(
        &self,
        t: &TenantId,
        conversation: &str,
        limit: u64,
        until: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError> {
        for attempt in 1..=SLOT_CONFLICT_RETRIES {
            let items = vec![self.slot_count(t, 1, Some(limit))?, self.new_lease(t, conversation, until)?];
            let sent = self.client.transact_write_items().set_transact_items(Some(items)).send().await;
            match tx_end(sent)? {
                TxEnd::Done => return Ok(Some(true)),
                TxEnd::Condition(0) => return Ok(None),
                TxEnd::Condition(_) => return Ok(Some(false)),
                TxEnd::Conflict => pause(attempt).await,
            }
        }
        Err(StoreError::Unavailable { message: "session slots kept meeting concurrent writes".into(), retryable: true })
    }

    /// Frees the lease `sk` if it still reads `held_until` (`None`: whatever it reads): `true`
    /// when this call freed it.
    async fn free_lease(&self, t: &TenantId, sk: String, held_until: Option<&str>) -> Result<bool, StoreError> {
        for attempt in 1..=SLOT_CONFLICT_RETRIES {
            let mut delete =
                Delete::builder().table_name(&self.names.executions_table).set_key(Some(key(slots_pk(t), sk.clone())));
            delete = match held_until {
                Some(v) => delete
                    .condition_expression("heldUntil = :seen")
                    .expression_attribute_values(":seen", aws_sdk_dynamodb::types::AttributeValue::N(v.to_owned())),
                None => delete.condition_expression("attribute_exists(PK)"),
            };
            let items = vec![
                TransactWriteItem::builder().delete(delete.build().map_err(build_err)?).build(),
                self.slot_count(t, -1, None)?,
            ];
            let sent = self.client.transact_write_items().set_transact_items(Some(items)).send().await;
            match tx_end(sent)? {
                TxEnd::Done => return Ok(true),
                TxEnd::Condition(_) => return Ok(false),
                TxEnd::Conflict => pause(attempt).await,
            }
        }
        Err(StoreError::Unavailable { message: "session slots kept meeting concurrent writes".into(), retryable: true })
    }

    /// Frees every lease idle at `now` (unless a concurrent call does): when the first of the
    /// others may come free.
    async fn free_idle(&self, t: &TenantId, now: DateTime<Utc>) -> Result<Option<i64>, StoreError> {
        let now_ms = now.timestamp_millis();
        let mut first = None::<i64>;
        for item in self.query_prefix(&self.names.executions_table, &slots_pk(t), LEASE_PREFIX).await? {
            let (Some(sk), Some(raw)) =
                (item.get("SK").and_then(|v| v.as_s().ok()), item.get("heldUntil").and_then(|v| v.as_n().ok()))
            else {
                continue;
            };
            let held_until: i64 = raw.parse().unwrap_or(0);
            if held_until > now_ms || !self.free_lease(t, sk.clone(), Some(raw)).await? {
                first = Some(first.map_or(held_until, |f| f.min(held_until)));
            }
        }
        Ok(first)
    }
}

/// A short random pause before trying a transaction that met another one again.
async fn pause(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(fastrand::u64(2..=10 * u64::from(attempt)))).await;
}

#[async_trait]
impl Counters for DynamoStore {
    async fn take(
        &self,
        tenant: &TenantId,
        window: &str,
        limit: u64,
        expires: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(counter_pk(tenant), window.to_owned())))
            .update_expression("ADD #count :one SET expiresAt = :exp")
            .condition_expression("attribute_not_exists(#count) OR #count < :limit")
            .expression_attribute_names("#count", "count")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":limit", n(limit))
            .expression_attribute_values(":exp", n(ttl_seconds(expires)))
            .send()
            .await;
        conditional("UpdateItem", result)
    }

    async fn first(&self, tenant: &TenantId, window: &str, expires: DateTime<Utc>) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(counter_pk(tenant), window.to_owned())))
            .update_expression("SET notified = :yes, expiresAt = if_not_exists(expiresAt, :exp)")
            .condition_expression("attribute_not_exists(notified)")
            .expression_attribute_values(":yes", n(1))
            .expression_attribute_values(":exp", n(ttl_seconds(expires)))
            .send()
            .await;
        conditional("UpdateItem", result)
    }

    async fn hold_slot(
        &self,
        tenant: &TenantId,
        conversation: &str,
        limit: u64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Slot, StoreError> {
        let renewed = self
            .client
            .update_item()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(slots_pk(tenant), lease_sk(conversation))))
            .update_expression("SET heldUntil = :until")
            .condition_expression("attribute_exists(PK)")
            .expression_attribute_values(":until", n(until.timestamp_millis()))
            .send()
            .await;
        if conditional("UpdateItem", renewed)? {
            return Ok(Slot::Held { new: false });
        }
        // Full: idle leases are freed (by this call or a concurrent one) and the slot is asked for
        // once more; if others took what came free first, the slots are full.
        let mut first = None;
        for freed_idle in [false, true] {
            if let Some(new) = self.take_slot(tenant, conversation, limit, until).await? {
                return Ok(Slot::Held { new });
            }
            if !freed_idle {
                first = self.free_idle(tenant, now).await?;
            }
        }
        Ok(Slot::Full { frees_at: first.and_then(DateTime::from_timestamp_millis).unwrap_or(now) })
    }

    async fn release_slot(&self, tenant: &TenantId, conversation: &str) -> Result<(), StoreError> {
        self.free_lease(tenant, lease_sk(conversation), None).await.map(|_| ())
    }

    /// One `TransactWriteItems` in the usual case: the lease renewed (or taken, with the count
    /// of slots) and the window counted together, or nothing written. The count comes last, so
    /// that when both limits are reached the sessions cap is the one reported, as when they are
    /// asked one after the other (a cancelled transaction names every item whose condition
    /// failed; the first is taken). Which lease write goes first follows
    /// `likely_held`; a wrong guess costs one more transaction.
    async fn hold_slot_and_take(&self, ask: &SlotAndCount<'_>) -> Result<Admit, StoreError> {
        let t = ask.tenant;
        let mut renew = ask.likely_held;
        let mut freed_idle = None::<Option<i64>>;
        for attempt in 1..=SLOT_CONFLICT_RETRIES {
            let mut items = Vec::with_capacity(3);
            if renew {
                let u = Update::builder()
                    .table_name(&self.names.executions_table)
                    .set_key(Some(key(slots_pk(t), lease_sk(ask.conversation))))
                    .update_expression("SET heldUntil = :until")
                    .condition_expression("attribute_exists(PK)")
                    .expression_attribute_values(":until", n(ask.until.timestamp_millis()));
                items.push(TransactWriteItem::builder().update(u.build().map_err(build_err)?).build());
            } else {
                items.push(self.new_lease(t, ask.conversation, ask.until)?);
                items.push(self.slot_count(t, 1, Some(ask.sessions))?);
            }
            let count = Update::builder()
                .table_name(&self.names.executions_table)
                .set_key(Some(key(counter_pk(t), ask.window.to_owned())))
                .update_expression("ADD #count :one SET expiresAt = :exp")
                .condition_expression("attribute_not_exists(#count) OR #count < :limit")
                .expression_attribute_names("#count", "count")
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":limit", n(ask.limit))
                .expression_attribute_values(":exp", n(ttl_seconds(ask.expires)));
            items.push(TransactWriteItem::builder().update(count.build().map_err(build_err)?).build());
            let count_at = items.len() - 1;
            let sent = self.client.transact_write_items().set_transact_items(Some(items)).send().await;
            match (tx_end(sent)?, renew) {
                (TxEnd::Done, _) => return Ok(Admit::Counted),
                (TxEnd::Condition(i), _) if i == count_at => return Ok(Admit::CountFull { took_slot: false }),
                // no lease to renew: take a slot
                (TxEnd::Condition(_), true) => renew = false,
                // the conversation holds a lease after all: renew it
                (TxEnd::Condition(0), false) => renew = true,
                // every slot is held: free the idle ones once, then ask again
                (TxEnd::Condition(_), false) => match freed_idle {
                    None => freed_idle = Some(self.free_idle(t, ask.now).await?),
                    Some(first) => {
                        let frees_at = first.and_then(DateTime::from_timestamp_millis).unwrap_or(ask.now);
                        return Ok(Admit::SessionsFull { frees_at });
                    }
                },
                (TxEnd::Conflict, _) => pause(attempt).await,
            }
        }
        Err(StoreError::Unavailable { message: "session slots kept meeting concurrent writes".into(), retryable: true })
    }
}
