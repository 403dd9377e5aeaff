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

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};
use switchboard_domain::{OutboundEvent, TenantId};
use switchboard_engine::{Admit, Counters, Slot, SlotAndCount, StoreError};

use super::codec::{attr_s, build_err, conditional, transact_conditional, unavailable};
use super::keys::{active_sk, key, n, s, tenant_pk, ttl_seconds};
use super::sessions::{HUMAN, OWNER};
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

/// How many conversations' leases a store remembers taking or renewing (see [`LeaseMemory`]).
const REMEMBERED_LEASES: usize = 10_000;

/// The conversations whose lease this store took or renewed lately, and until when: the guess
/// of which lease write an admission tries first when its caller does not know (event intake
/// on AWS reads no session before admitting). Only a guess: a lease freed elsewhere, or taken by
/// another container, costs one more transaction, never a wrong answer. Bounded: when full,
/// the expired entries go, and if that is not enough, all of them.
#[derive(Debug, Default)]
pub(super) struct LeaseMemory(Mutex<HashMap<(TenantId, String), i64>>);

impl LeaseMemory {
    fn held(&self, t: &TenantId, conversation: &str, now: DateTime<Utc>) -> bool {
        let Ok(leases) = self.0.lock() else { return false };
        // (the key is built only to look up; conversations are short strings)
        leases.get(&(t.clone(), conversation.to_owned())).is_some_and(|until| *until > now.timestamp_millis())
    }

    fn remember(&self, t: &TenantId, conversation: &str, now: DateTime<Utc>, until: DateTime<Utc>) {
        let Ok(mut leases) = self.0.lock() else { return };
        if leases.len() >= REMEMBERED_LEASES {
            let now = now.timestamp_millis();
            leases.retain(|_, until| *until > now);
            if leases.len() >= REMEMBERED_LEASES {
                leases.clear();
            }
        }
        leases.insert((t.clone(), conversation.to_owned()), until.timestamp_millis());
    }

    fn forget(&self, t: &TenantId, conversation: &str) {
        if let Ok(mut leases) = self.0.lock() {
            leases.remove(&(t.clone(), conversation.to_owned()));
        }
    }
}

/// How often a slot transaction that met a concurrent one on the count is tried again.
const SLOT_CONFLICT_RETRIES: u32 = 8;

/// How a slot transaction ended.
enum TxEnd {
    Done,
    /// The condition of the item at this index did not hold (with the item as it was, when the
    /// request asked for it).
    Condition(usize, Option<Item>),
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
        return Ok(TxEnd::Condition(i, reasons[i].item().cloned()));
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

    /// A condition that no human operator owns `conversation` (its owner marker in the sessions
    /// table says `owner` = `human`), returning the marker when it fails.
    fn no_human_owner(&self, t: &TenantId, conversation: &str) -> Result<TransactWriteItem, StoreError> {
        let check = ConditionCheck::builder()
            .table_name(&self.names.sessions_table)
            .set_key(Some(key(tenant_pk(t), active_sk(conversation))))
            .condition_expression("attribute_not_exists(#owner) OR #owner <> :human")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_values(":human", s(HUMAN))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_err)?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
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
                TxEnd::Condition(0, _) => return Ok(None),
                TxEnd::Condition(..) => return Ok(Some(false)),
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
                TxEnd::Condition(..) => return Ok(false),
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

    /// One transaction: the window's `notified` mark, conditional on its absence, and the
    /// announcement in the event log (the outbox, published from the table's stream). A mark
    /// already read is answered without one (a refusal burst asks many times a window).
    async fn first(
        &self,
        tenant: &TenantId,
        window: &str,
        expires: DateTime<Utc>,
        announce: &OutboundEvent,
    ) -> Result<bool, StoreError> {
        let counter = key(counter_pk(tenant), window.to_owned());
        let seen = self
            .client
            .get_item()
            .table_name(&self.names.executions_table)
            .set_key(Some(counter.clone()))
            .projection_expression("notified")
            .send()
            .await
            .map_err(|e| unavailable("GetItem", &e))?;
        if seen.item.is_some_and(|i| i.contains_key("notified")) {
            return Ok(false);
        }
        let mark = Update::builder()
            .table_name(&self.names.executions_table)
            .set_key(Some(counter))
            .update_expression("SET notified = :yes, expiresAt = if_not_exists(expiresAt, :exp)")
            .condition_expression("attribute_not_exists(notified)")
            .expression_attribute_values(":yes", n(1))
            .expression_attribute_values(":exp", n(ttl_seconds(expires)))
            .build()
            .map_err(build_err)?;
        let mut writes = vec![TransactWriteItem::builder().update(mark).build()];
        let (outbox, taken) = self.outbox_items(std::slice::from_ref(announce)).await?;
        writes.extend(outbox);
        let first =
            transact_conditional(self.client.transact_write_items().set_transact_items(Some(writes)).send().await);
        if !matches!(first, Ok(true)) {
            self.burn(taken).await;
        }
        first
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
        self.leases.forget(tenant, conversation);
        self.free_lease(tenant, lease_sk(conversation), None).await.map(|_| ())
    }

    fn sees_human_owner(&self) -> bool {
        true
    }

    /// One `TransactWriteItems` in the usual case: the lease renewed (or taken, with the count
    /// of slots) and the window counted together, or nothing written. With `unless_human`, the
    /// conversation's owner marker is the first item, a condition that no human owns it (the
    /// marker as it was comes back when it fails, naming the human's session). The count comes
    /// last, so that when both limits are reached the sessions cap is the one reported, as when
    /// they are asked one after the other (a cancelled transaction names every item whose
    /// condition failed; the first is taken). Which lease write goes first follows
    /// `likely_held`, or, when the caller does not know, whether this store took or renewed the
    /// conversation's lease lately; a wrong guess costs one more transaction.
    async fn hold_slot_and_take(&self, ask: &SlotAndCount<'_>) -> Result<Admit, StoreError> {
        let t = ask.tenant;
        let mut renew = ask.likely_held.unwrap_or_else(|| self.leases.held(t, ask.conversation, ask.now));
        let mut freed_idle = None::<Option<i64>>;
        for attempt in 1..=SLOT_CONFLICT_RETRIES {
            let mut items = Vec::with_capacity(4);
            if ask.unless_human {
                items.push(self.no_human_owner(t, ask.conversation)?);
            }
            let lease_at = items.len();
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
                (TxEnd::Done, _) => {
                    self.leases.remember(t, ask.conversation, ask.now, ask.until);
                    return Ok(Admit::Counted);
                }
                (TxEnd::Condition(0, marker), _) if ask.unless_human => return human_owner(marker.as_ref()),
                (TxEnd::Condition(i, _), _) if i == count_at => return Ok(Admit::CountFull { took_slot: false }),
                // no lease to renew: take a slot
                (TxEnd::Condition(..), true) => renew = false,
                // the conversation holds a lease after all: renew it
                (TxEnd::Condition(i, _), false) if i == lease_at => renew = true,
                // every slot is held: free the idle ones once, then ask again
                (TxEnd::Condition(..), false) => match freed_idle {
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

/// [`Admit::HumanOwned`] from the owner marker a cancelled admission returned.
fn human_owner(marker: Option<&Item>) -> Result<Admit, StoreError> {
    let marker = marker.ok_or_else(|| StoreError::Corrupt("owner check failed without the marker".into()))?;
    let bad = |what: &str| StoreError::Corrupt(format!("owner marker holds a bad {what}"));
    let session_id = attr_s(marker, "sessionId")?.parse().map_err(|_| bad("session id"))?;
    let agent_id = attr_s(marker, "agentId")?.parse().map_err(|_| bad("agent id"))?;
    Ok(Admit::HumanOwned { session_id, agent_id })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use chrono::Duration as Span;

    use super::*;

    #[test]
    fn the_lease_memory_guesses_held_until_the_lease_lapses_and_stays_bounded() {
        let (t, now) = ("t-1".parse::<TenantId>().unwrap(), DateTime::<Utc>::UNIX_EPOCH + Span::days(20_000));
        let memory = LeaseMemory::default();
        assert!(!memory.held(&t, "c-1", now), "never seen: not held");
        memory.remember(&t, "c-1", now, now + Span::minutes(30));
        assert!(memory.held(&t, "c-1", now + Span::minutes(29)));
        assert!(!memory.held(&t, "c-1", now + Span::minutes(30)), "lapsed");
        assert!(!memory.held(&"t-2".parse().unwrap(), "c-1", now), "another tenant's conversation");
        memory.forget(&t, "c-1");
        assert!(!memory.held(&t, "c-1", now), "released");
        // full: the lapsed leases go first
        for i in 0..REMEMBERED_LEASES {
            let until = if i % 2 == 0 { now } else { now + Span::minutes(30) };
            memory.remember(&t, &format!("c-{i}"), now, until);
        }
        memory.remember(&t, "newest", now, now + Span::minutes(30));
        assert_eq!(memory.0.lock().unwrap().len(), REMEMBERED_LEASES / 2 + 1);
        assert!(memory.held(&t, "c-1", now) && memory.held(&t, "newest", now));
        // and if every lease is live, all of them
        for i in 0..REMEMBERED_LEASES {
            memory.remember(&t, &format!("d-{i}"), now, now + Span::minutes(30));
        }
        assert!(memory.0.lock().unwrap().len() <= REMEMBERED_LEASES);
        assert!(memory.held(&t, &format!("d-{}", REMEMBERED_LEASES - 1), now), "the newest is kept");
    }
}
