//! The newest customer message queued in each conversation whose agent interrupts its turns
//! (see `switchboard_engine::SessionStore::note_arrival`): `TENANT#<t>#ARRIVAL`, one item per
//! conversation (`SK` = its id) in the executions table, with `sourceId`, `messageId`,
//! `arrivedAt` (epoch milliseconds) and `expiresAt` (the table's TTL, a day on). Event intake puts
//! it after the message is queued, conditional on no later arrival being noted; a running turn
//! reads it (strongly consistent) before it replies. SQS hides a FIFO group's later messages
//! while one is in flight, so this note is how that turn learns of them.

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use switchboard_domain::TenantId;
use switchboard_engine::{Arrival, StoreError};

use super::DynamoStore;
use super::codec::{attr_s, conditional};
use super::keys::{key, n, s, ttl_seconds};

/// How long a note is kept: far longer than a message waits in the queue for its turn.
const KEPT: ChronoDuration = ChronoDuration::days(1);

pub(super) fn arrivals_pk(t: &TenantId) -> String {
    format!("TENANT#{t}#ARRIVAL")
}

impl DynamoStore {
    /// One conditional `PutItem`; a later arrival already noted is left as it is.
    pub(super) async fn put_arrival(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
        arrival: &Arrival,
    ) -> Result<(), StoreError> {
        let at = arrival.arrived_at.timestamp_millis();
        let mut item = key(arrivals_pk(tenant), conversation_id.to_owned());
        item.insert("sourceId".into(), s(arrival.source_id.clone()));
        item.insert("messageId".into(), s(arrival.message_id.clone()));
        item.insert("arrivedAt".into(), n(at));
        item.insert("expiresAt".into(), n(ttl_seconds(arrival.arrived_at + KEPT)));
        let put = self
            .client
            .put_item()
            .table_name(&self.names.executions_table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(PK) OR arrivedAt < :at")
            .expression_attribute_values(":at", n(at))
            .send()
            .await;
        conditional("PutItem", put).map(|_| ())
    }

    /// A strongly consistent `GetItem` of the conversation's note.
    pub(super) async fn get_arrival(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Option<Arrival>, StoreError> {
        let table = &self.names.executions_table;
        let item = self.get_item(table, key(arrivals_pk(tenant), conversation_id.to_owned()), "GetItem").await?;
        let Some(item) = item else { return Ok(None) };
        let corrupt =
            || StoreError::Corrupt(format!("the arrival noted for conversation {conversation_id} has no time"));
        let millis = item.get("arrivedAt").and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<i64>().ok());
        let arrived_at = millis.and_then(DateTime::<Utc>::from_timestamp_millis).ok_or_else(corrupt)?;
        Ok(Some(Arrival {
            source_id: attr_s(&item, "sourceId")?.to_owned(),
            message_id: attr_s(&item, "messageId")?.to_owned(),
            arrived_at,
        }))
    }
}
