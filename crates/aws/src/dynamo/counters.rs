//! Tenant counters in DynamoDB: one item per tenant and window in the executions table
//! (`TENANT#<t>#LIMIT`, `<window>`), changed by conditional `UpdateItem`s, so that every Lambda
//! container shares one exact count. Items expire through the table's TTL (`expiresAt`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_domain::TenantId;
use switchboard_engine::{Counters, StoreError};

use super::DynamoStore;
use super::codec::conditional;
use super::keys::{key, n, ttl_seconds};

fn counter_pk(t: &TenantId) -> String {
    format!("TENANT#{t}#LIMIT")
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
}
