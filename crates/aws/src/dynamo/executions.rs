//! Execution records: by source, by id (pointer items) and by session, expired ones hidden.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use switchboard_domain::{
    ActivityRow, AgentId, Blob, Cost, ExecutionId, ExecutionRecord, ExecutionStatus, SessionId, TenantId, TriggerId,
    UsageCounts, UsageRow, VariantRow,
};
use switchboard_engine::{ExecutionLog, Page, StoreError};

use super::codec::*;
use super::keys::*;
use super::page::paginate;
use super::{DynamoStore, Item};

impl DynamoStore {
    /// The execution a pointer item (`SOURCE#…` or `EXECID#…`) leads to, if it has not expired.
    pub(super) async fn execution_by_pointer(
        &self,
        tenant: &TenantId,
        sk: String,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let table = &self.names.executions_table;
        match self.get_item(table, key(tenant_pk(tenant), sk), "GetItem").await? {
            Some(pointer) => self.execution_at_pointer(tenant, &pointer).await,
            None => Ok(None),
        }
    }

    /// The live record a `SOURCE#` / `EXECID#` pointer item leads to.
    pub(super) async fn execution_at_pointer(
        &self,
        tenant: &TenantId,
        pointer: &Item,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let table = &self.names.executions_table;
        let target = key(attr_s(pointer, "executionPk")?.to_owned(), attr_s(pointer, "executionSk")?.to_owned());
        let Some(item) = self.get_item(table, target, "GetItem").await? else {
            return Ok(None);
        };
        let record: ExecutionRecord = decode(&item)?;
        let live = record.tenant_id == *tenant && record.expires_at > self.clock.now();
        Ok(live.then_some(record))
    }
}

#[async_trait]
impl ExecutionLog for DynamoStore {
    async fn execution_for_source(
        &self,
        tenant: &TenantId,
        source_id: &str,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        self.execution_by_pointer(tenant, source_sk(source_id)).await
    }

    async fn get_execution(
        &self,
        tenant: &TenantId,
        execution: ExecutionId,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        self.execution_by_pointer(tenant, execution_id_sk(execution)).await
    }

    /// Oldest first. The cursor is the last returned item's key; a page is filled across
    /// DynamoDB pages when the tenant/expiry filter drops items.
    async fn list_executions(
        &self,
        tenant: &TenantId,
        session: SessionId,
        after: Option<ExecutionId>,
        limit: usize,
    ) -> Result<Page<ExecutionRecord>, StoreError> {
        let now = self.clock.now();
        let pk = execution_pk(session);
        // The sort key follows from the execution id (its time and itself).
        let start = after.map(|a| key(pk.clone(), execution_sk(a)));
        let query = self
            .client
            .query()
            .table_name(&self.names.executions_table)
            .key_condition_expression("PK = :pk AND begins_with(SK, :exec)")
            // Coarse filter on the TTL attribute; the exact check is on the record below.
            .filter_expression("tenantId = :t AND expiresAt > :now")
            .expression_attribute_values(":pk", s(pk.clone()))
            .expression_attribute_values(":exec", s("EXEC#"))
            .expression_attribute_values(":t", s(tenant.to_string()))
            .expression_attribute_values(":now", n(now.timestamp()))
            .consistent_read(true);
        let found = paginate(query, start)
            .take(limit.saturating_add(1), |item| {
                let record: ExecutionRecord = decode(&item)?;
                Ok((record.expires_at > now).then_some(record))
            })
            .await?;
        Ok(Page::from_overfetch(found, limit, |record| record.execution_id.to_string()))
    }

    async fn content(&self, tenant: &TenantId, session: SessionId, hashes: &[String]) -> Result<Vec<Blob>, StoreError> {
        self.read_content(tenant, session, hashes).await
    }

    /// Sums the shards of each day, agent and model.
    async fn usage(&self, tenant: &TenantId, from: NaiveDate, to: NaiveDate) -> Result<Vec<UsageRow>, StoreError> {
        let mut rows: BTreeMap<(NaiveDate, String, String), (UsageCounts, u64)> = BTreeMap::new();
        // `~` sorts after every character of an agent id, a model and a shard.
        for item in self.usage_partition(tenant, format!("DAY#{from}#"), format!("DAY#{to}#~")).await? {
            let day: NaiveDate =
                attr_s(&item, "day")?.parse().map_err(|e| StoreError::Corrupt(format!("usage item day: {e}")))?;
            let number = |name: &str| -> Result<u64, StoreError> {
                match item.get(name) {
                    None => Ok(0),
                    Some(v) => v
                        .as_n()
                        .ok()
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| StoreError::Corrupt(format!("usage item {name} is not a count"))),
                }
            };
            let counts = UsageCounts {
                calls: number("calls")?,
                input_tokens: number("inputTokens")?,
                output_tokens: number("outputTokens")?,
                cache_read_tokens: number("cacheReadTokens")?,
                cache_write_tokens: number("cacheWriteTokens")?,
                cost_usd: None,
                unpriced_calls: number("unpricedCalls")?,
            };
            let k = (day, attr_s(&item, "agentId")?.to_owned(), attr_s(&item, "model")?.to_owned());
            let (sum, nanos) = rows.entry(k).or_default();
            sum.add(&counts);
            *nanos = nanos.saturating_add(number("costNanos")?);
        }
        rows.into_iter()
            .map(|((day, agent, model), (mut counts, nanos))| {
                counts.cost_usd = (counts.calls > counts.unpriced_calls).then(|| Cost::from_nanos(nanos));
                let agent_id: AgentId =
                    agent.parse().map_err(|e| StoreError::Corrupt(format!("usage item agent {agent}: {e}")))?;
                Ok(UsageRow { day, agent_id, model, counts })
            })
            .collect()
    }

    /// Sums the shards of each hour and status.
    async fn activity(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<ActivityRow>, StoreError> {
        let mut rows: BTreeMap<(DateTime<Utc>, usize), u64> = BTreeMap::new();
        let (from, to) = (from.format("%Y-%m-%dT%H"), to.format("%Y-%m-%dT%H"));
        // `~` sorts after every character of a status and a shard.
        for item in self.usage_partition(tenant, format!("HOUR#{from}#"), format!("HOUR#{to}#~")).await? {
            let hour = attr_s(&item, "hour")?;
            let hour = DateTime::parse_from_rfc3339(hour)
                .map_err(|e| StoreError::Corrupt(format!("activity item hour {hour}: {e}")))?
                .with_timezone(&Utc);
            let status = attr_s(&item, "status")?;
            let status = ExecutionStatus::ALL
                .iter()
                .position(|s| s.as_str() == status)
                .ok_or_else(|| StoreError::Corrupt(format!("activity item status {status}")))?;
            let executions = item
                .get("executions")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| StoreError::Corrupt("activity item executions is not a count".into()))?;
            let sum = rows.entry((hour, status)).or_default();
            *sum = sum.saturating_add(executions);
        }
        Ok(rows
            .into_iter()
            .map(|((hour, status), executions)| ActivityRow { hour, status: ExecutionStatus::ALL[status], executions })
            .collect())
    }

    /// Sums the shards of each hour, trigger, variant and status.
    async fn variants(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<VariantRow>, StoreError> {
        let mut rows: BTreeMap<(DateTime<Utc>, TriggerId, String, usize), VariantRow> = BTreeMap::new();
        let (from, to) = (from.format("%Y-%m-%dT%H"), to.format("%Y-%m-%dT%H"));
        for item in self.usage_partition(tenant, format!("SPLIT#{from}#"), format!("SPLIT#{to}#~")).await? {
            let corrupt = |what: &str| StoreError::Corrupt(format!("split item {what}"));
            let hour = attr_s(&item, "hour")?;
            let hour = DateTime::parse_from_rfc3339(hour)
                .map_err(|e| corrupt(&format!("hour {hour}: {e}")))?
                .with_timezone(&Utc);
            let trigger = attr_s(&item, "triggerId")?;
            let trigger_id: TriggerId = trigger.parse().map_err(|_| corrupt(&format!("trigger {trigger}")))?;
            let variant = attr_s(&item, "variant")?.to_owned();
            let status = attr_s(&item, "status")?;
            let position = ExecutionStatus::ALL
                .iter()
                .position(|s| s.as_str() == status)
                .ok_or_else(|| corrupt(&format!("status {status}")))?;
            let count = |name: &str| {
                item.get(name)
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse::<u64>().ok())
                    .ok_or_else(|| corrupt(&format!("{name} is not a count")))
            };
            let (executions, tokens, cost, unpriced, latency) = (
                count("executions")?,
                count("tokens")?,
                count("costNanos")?,
                count("unpricedCalls")?,
                count("latencyMs")?,
            );
            let row = rows.entry((hour, trigger_id, variant.clone(), position)).or_insert_with(|| VariantRow {
                hour,
                trigger_id,
                variant,
                status: ExecutionStatus::ALL[position],
                executions: 0,
                tokens: 0,
                cost_usd: Cost::ZERO,
                unpriced_calls: 0,
                latency_ms: 0,
            });
            row.executions = row.executions.saturating_add(executions);
            row.tokens = row.tokens.saturating_add(tokens);
            row.cost_usd = row.cost_usd.saturating_add(Cost::from_nanos(cost));
            row.unpriced_calls = row.unpriced_calls.saturating_add(unpriced);
            row.latency_ms = row.latency_ms.saturating_add(latency);
        }
        Ok(rows.into_values().collect())
    }

    async fn insights(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<switchboard_domain::insights::InsightRow>, StoreError> {
        self.insight_rows(tenant, from, to).await
    }
}

impl DynamoStore {
    /// Every item of the tenant's usage partition (daily usage and hourly activity) whose sort
    /// key is in `from..=to`, reading page after page.
    pub(super) async fn usage_partition(
        &self,
        tenant: &TenantId,
        from: String,
        to: String,
    ) -> Result<Vec<Item>, StoreError> {
        let query = self
            .client
            .query()
            .table_name(&self.names.executions_table)
            .key_condition_expression("PK = :pk AND SK BETWEEN :from AND :to")
            .expression_attribute_values(":pk", s(usage_pk(tenant)))
            .expression_attribute_values(":from", s(from))
            .expression_attribute_values(":to", s(to))
            .consistent_read(true);
        paginate(query, None).all().await
    }
}
