//! Who is listening for a tenant's live events on AWS: the operator consoles connected to the
//! console-push WebSocket API. Partition `TENANT#<t>#PUSH` in the executions table:
//! `TICKET#<sha-256 of the ticket>` (a ticket the internal API issued, `validUntil`, kept
//! [`TICKET_LIFETIME`]) and `CONN#<connection id>` (a connection opened with one, kept
//! [`CONNECTION_LIFETIME`]). Both carry `expiresAt`, the table's TTL attribute, and readers check
//! the time themselves (TTL deletion is lazy).
//!
//! A ticket is how a connection gets its tenant. The WebSocket's `$connect` is IAM-authorised,
//! but an IAM policy cannot scope it to a tenant (the route has no tenant in its path); the
//! ticket comes from `POST /tenants/{t}/events/push` on the internal API, whose IAM policy is
//! scoped to `/tenants/<t>/*`, and is redeemed once, within a minute, for that tenant only.

use std::time::Duration;

use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use switchboard_domain::TenantId;
use switchboard_engine::StoreError;

use super::DynamoStore;
use super::codec::*;
use super::keys::*;
use super::page::paginate;

/// How long a ticket may wait to be redeemed.
pub const TICKET_LIFETIME: Duration = Duration::from_secs(60);

/// How long a connection is kept: API Gateway closes a WebSocket connection after two hours, and
/// a connection closed earlier is dropped by the first push that meets `410 Gone`.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(2 * 3600 + 300);

fn push_pk(tenant: &TenantId) -> String {
    format!("{}#PUSH", tenant_pk(tenant))
}

fn ticket_sk(ticket: &str) -> String {
    let digest = Sha256::digest(ticket.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("TICKET#{hex}")
}

fn connection_sk(connection_id: &str) -> String {
    format!("CONN#{connection_id}")
}

fn later(now: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX)
}

impl DynamoStore {
    /// A new single-use ticket for `tenant` (32 random bytes, hex; only its hash is stored) and
    /// until when it may be redeemed.
    pub async fn issue_push_ticket(&self, tenant: &TenantId) -> Result<(String, DateTime<Utc>), StoreError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| StoreError::Unavailable { message: format!("random source: {e}"), retryable: true })?;
        let ticket: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let until = later(self.clock.now(), TICKET_LIFETIME);
        let mut item = key(push_pk(tenant), ticket_sk(&ticket));
        item.insert("validUntil".into(), n(until.timestamp_millis()));
        item.insert("expiresAt".into(), n(ttl_seconds(until)));
        self.client
            .put_item()
            .table_name(&self.names.executions_table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| unavailable("PutItem", &e))?;
        Ok((ticket, until))
    }

    /// Redeems `ticket` for `tenant` and keeps `connection_id` as one of the tenant's, in one
    /// transaction; `false` (nothing written) when the ticket is unknown for this tenant, used
    /// or out of date.
    pub async fn open_push_connection(
        &self,
        tenant: &TenantId,
        ticket: &str,
        connection_id: &str,
    ) -> Result<bool, StoreError> {
        let table = &self.names.executions_table;
        let now = self.clock.now();
        let redeem = Delete::builder()
            .table_name(table)
            .set_key(Some(key(push_pk(tenant), ticket_sk(ticket))))
            .condition_expression("attribute_exists(PK) AND validUntil > :now")
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .build()
            .map_err(build_err)?;
        let until = later(now, CONNECTION_LIFETIME);
        let mut item = key(push_pk(tenant), connection_sk(connection_id));
        item.insert("connectionId".into(), s(connection_id));
        item.insert("validUntil".into(), n(until.timestamp_millis()));
        item.insert("expiresAt".into(), n(ttl_seconds(until)));
        let keep = Put::builder().table_name(table).set_item(Some(item)).build().map_err(build_err)?;
        let writes =
            vec![TransactWriteItem::builder().delete(redeem).build(), TransactWriteItem::builder().put(keep).build()];
        transact_conditional(self.client.transact_write_items().set_transact_items(Some(writes)).send().await)
    }

    /// The tenant's open connections (those not out of date), every page of them.
    pub async fn push_connections(&self, tenant: &TenantId) -> Result<Vec<String>, StoreError> {
        let now = n(self.clock.now().timestamp_millis());
        let query = self
            .client
            .query()
            .table_name(&self.names.executions_table)
            .key_condition_expression("PK = :pk AND begins_with(SK, :conn)")
            .filter_expression("validUntil > :now")
            .expression_attribute_values(":pk", s(push_pk(tenant)))
            .expression_attribute_values(":conn", s("CONN#"))
            .expression_attribute_values(":now", now)
            .projection_expression("connectionId");
        let items = paginate(query, None).all().await?;
        Ok(items.iter().filter_map(|i| i.get("connectionId").and_then(|v| v.as_s().ok()).cloned()).collect())
    }

    /// Forgets a connection (closed: its push met `410 Gone`).
    pub async fn close_push_connection(&self, tenant: &TenantId, connection_id: &str) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(push_pk(tenant), connection_sk(connection_id))))
            .send()
            .await
            .map_err(|e| unavailable("DeleteItem", &e))?;
        Ok(())
    }
}
