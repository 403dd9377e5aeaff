//! Deleting a tenant from DynamoDB: every partition that holds its data, in a bounded amount of
//! work per call (a Lambda behind API Gateway has under 30 s), so a large tenant is deleted over
//! several calls. Order: each session's executions then the session, the conversation markers,
//! the tenant's execution pointers, usage, event log, limit counters and slots, its configuration
//! and its kept versions, and the tenant marker last — so a deletion that stopped half-way is
//! found and resumed by the next call. Items are read a page at a time (keys only) and deleted 25 at a time (`BatchWriteItem`;
//! unprocessed items are sent again a few times before the call gives up with more to do).

use aws_sdk_dynamodb::types::{DeleteRequest, WriteRequest};
use switchboard_domain::TenantId;
use switchboard_engine::StoreError;

use super::codec::{batch_write, unavailable};
use super::keys::{key, s, tenant_pk, usage_pk};
use super::{DynamoStore, Item};

/// Items deleted per call before it answers "more to do" (see `DynamoStore::with_delete_budget`).
pub(super) const DELETES_PER_CALL: usize = 2_000;

/// What is left to delete this call.
struct Budget(usize);

impl DynamoStore {
    pub(super) async fn erase_tenant(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        let mut budget = Budget(self.delete_budget);
        let (sessions, executions, config) =
            (self.names.sessions_table.clone(), self.names.executions_table.clone(), self.names.config_table.clone());
        let pk = tenant_pk(tenant);
        // Sessions, each after its executions.
        loop {
            let page = self.key_page(&sessions, &pk, "SESSION#").await?;
            if page.is_empty() {
                break;
            }
            for item in page {
                let Some(session) = sk_of(&item).and_then(|sk| sk.strip_prefix("SESSION#")).map(str::to_owned) else {
                    continue;
                };
                if !self.erase_partition(&executions, &format!("SESSION#{session}"), "", &mut budget).await? {
                    return Ok(false);
                }
                if !self.delete_keys(&sessions, vec![item], &mut budget).await? {
                    return Ok(false);
                }
            }
        }
        let partitions = [
            (&sessions, pk.clone(), ""),
            (&executions, pk.clone(), ""),
            (&executions, usage_pk(tenant), ""),
            (&executions, format!("{pk}#EVENTS"), ""),
            (&executions, format!("{pk}#LIMIT"), ""),
            (&executions, format!("{pk}#SLOT"), ""),
            (&executions, format!("{pk}#ARRIVAL"), ""),
            (&executions, format!("{pk}#PUSH"), ""),
            (&config, pk.clone(), "AGENT#"),
            (&config, pk.clone(), "TRIGGER#"),
            (&config, pk.clone(), "TOOL#"),
            (&config, pk.clone(), "SKILL#"),
            (&config, pk.clone(), "VERSION#"),
        ];
        for (table, partition, prefix) in partitions {
            if !self.erase_partition(table, &partition, prefix, &mut budget).await? {
                return Ok(false);
            }
        }
        self.delete_keys(&config, vec![key(pk, "TENANT".into())], &mut budget).await
    }

    /// Deletes every item of `pk` whose sort key starts with `prefix`; `false` when the budget
    /// ran out first.
    async fn erase_partition(
        &self,
        table: &str,
        pk: &str,
        prefix: &str,
        budget: &mut Budget,
    ) -> Result<bool, StoreError> {
        loop {
            let page = self.key_page(table, pk, prefix).await?;
            if page.is_empty() {
                return Ok(true);
            }
            if !self.delete_keys(table, page, budget).await? {
                return Ok(false);
            }
        }
    }

    /// The keys of the first page (at most 100) of `pk`'s items under `prefix`. Deleted items do
    /// not come back, so the first page is always the next one.
    async fn key_page(&self, table: &str, pk: &str, prefix: &str) -> Result<Vec<Item>, StoreError> {
        // (DynamoDB refuses an empty string in a key condition: no prefix is no condition.)
        let query = self.client.query().table_name(table).expression_attribute_values(":pk", s(pk));
        let query = match prefix {
            "" => query.key_condition_expression("PK = :pk"),
            p => query
                .key_condition_expression("PK = :pk AND begins_with(SK, :prefix)")
                .expression_attribute_values(":prefix", s(p)),
        };
        let out = query
            .projection_expression("PK, SK")
            .consistent_read(true)
            .limit(100)
            .send()
            .await
            .map_err(|e| unavailable("Query", &e))?;
        Ok(out.items.unwrap_or_default())
    }

    /// Deletes `keys` 25 at a time; `false` when the budget ran out or DynamoDB kept some back.
    async fn delete_keys(&self, table: &str, keys: Vec<Item>, budget: &mut Budget) -> Result<bool, StoreError> {
        for chunk in keys.chunks(25) {
            if budget.0 < chunk.len() {
                return Ok(false);
            }
            let requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|k| {
                    let delete =
                        DeleteRequest::builder().set_key(Some(k.clone())).build().map_err(super::codec::build_err)?;
                    Ok(WriteRequest::builder().delete_request(delete).build())
                })
                .collect::<Result<_, StoreError>>()?;
            if !batch_write(&self.client, table, requests).await? {
                return Ok(false);
            }
            budget.0 -= chunk.len();
        }
        Ok(true)
    }
}

fn sk_of(item: &Item) -> Option<&str> {
    item.get("SK").and_then(|v| v.as_s().ok()).map(String::as_str)
}
