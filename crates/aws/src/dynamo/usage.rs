//! What a turn's record adds to its tenant's counters, as items of the turn's transaction: the
//! day's usage per agent and model, the hour's executions per status (activity) and a traffic
//! split's variant counts, each on a shard picked by the execution id.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{TransactWriteItem, Update};
use switchboard_domain::limits::USAGE_TTL_DAYS;
use switchboard_domain::{ExecutionRecord, ExecutionStatus, VariantRow};
use switchboard_engine::StoreError;

use super::DynamoStore;
use super::codec::*;
use super::keys::*;
use super::sessions::TxRole;

impl DynamoStore {
    /// What the record adds to its tenant's daily usage (beyond `before`, the same execution as
    /// it paused): one counter update per agent and model, and one to its hour's executions of
    /// its status, on a shard picked by the execution id. An execution counts once, with the
    /// status it ends with: not while it awaits approval.
    pub(super) fn usage_items(
        &self,
        e: &ExecutionRecord,
        before: Option<&ExecutionRecord>,
    ) -> Result<Vec<(TransactWriteItem, TxRole)>, StoreError> {
        let day = e.usage_day();
        let shard = e.execution_id.0.random() % USAGE_SHARDS;
        let ttl = day.and_time(chrono::NaiveTime::MIN).and_utc() + chrono::Duration::days(USAGE_TTL_DAYS);
        let mut out = Vec::new();
        for line in e.usage_lines_after(before) {
            let c = line.counts;
            let update = Update::builder()
                .table_name(&self.names.executions_table)
                .set_key(Some(key(usage_pk(&e.tenant_id), usage_sk(day, line.agent_id, &line.model, shard))))
                .update_expression(
                    "SET #day = :day, #agent = :agent, #model = :model, #ttl = :ttl \
                     ADD #calls :calls, #in :in, #out :out, #read :read, #write :write, #cost :cost, #unpriced :unpriced",
                )
                .set_expression_attribute_names(Some(HashMap::from(
                    [
                        ("#day", "day"),
                        ("#agent", "agentId"),
                        ("#model", "model"),
                        ("#ttl", "expiresAt"),
                        ("#calls", "calls"),
                        ("#in", "inputTokens"),
                        ("#out", "outputTokens"),
                        ("#read", "cacheReadTokens"),
                        ("#write", "cacheWriteTokens"),
                        ("#cost", "costNanos"),
                        ("#unpriced", "unpricedCalls"),
                    ]
                    .map(|(k, v)| (k.to_owned(), v.to_owned())),
                )))
                .set_expression_attribute_values(Some(HashMap::from(
                    [
                        (":day", s(day.to_string())),
                        (":agent", s(line.agent_id.to_string())),
                        (":model", s(line.model.clone())),
                        (":ttl", n(ttl.timestamp())),
                        (":calls", n(c.calls)),
                        (":in", n(c.input_tokens)),
                        (":out", n(c.output_tokens)),
                        (":read", n(c.cache_read_tokens)),
                        (":write", n(c.cache_write_tokens)),
                        (":cost", n(c.cost_usd.map_or(0, |c| c.nanos))),
                        (":unpriced", n(c.unpriced_calls)),
                    ]
                    .map(|(k, v)| (k.to_owned(), v)),
                )))
                .build()
                .map_err(build_err)?;
            out.push((TransactWriteItem::builder().update(update).build(), TxRole::Usage));
        }
        if e.status == ExecutionStatus::AwaitingApproval {
            return Ok(out);
        }
        // and one execution of its status in its hour, on the same shard
        let hour = e.activity_hour();
        let update = Update::builder()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(usage_pk(&e.tenant_id), activity_sk(hour, e.status, shard))))
            .update_expression("SET #hour = :hour, #status = :status, #ttl = :ttl ADD #n :one")
            .expression_attribute_names("#hour", "hour")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#ttl", "expiresAt")
            .expression_attribute_names("#n", "executions")
            .expression_attribute_values(":hour", s(hour.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
            .expression_attribute_values(":status", s(e.status.as_str()))
            .expression_attribute_values(":ttl", n(ttl.timestamp()))
            .expression_attribute_values(":one", n(1))
            .build()
            .map_err(build_err)?;
        out.push((TransactWriteItem::builder().update(update).build(), TxRole::Usage));
        // and, for a session a traffic split assigned, what it adds to its variant's hour
        out.extend(self.split_item(e, hour, shard, ttl)?);
        Ok(out)
    }

    /// What `e` adds to its split variant's counts in its hour, on `shard`, if a traffic split
    /// assigned its session.
    fn split_item(
        &self,
        e: &ExecutionRecord,
        hour: chrono::DateTime<chrono::Utc>,
        shard: u128,
        ttl: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<(TransactWriteItem, TxRole)>, StoreError> {
        let Some(v) = VariantRow::of(e) else { return Ok(None) };
        let update = Update::builder()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(usage_pk(&e.tenant_id), split_sk(hour, v.trigger_id, &v.variant, e.status, shard))))
            .update_expression(
                "SET #hour = :hour, #trigger = :trigger, #variant = :variant, #status = :status, #ttl = :ttl \
                 ADD #n :one, #tokens :tokens, #cost :cost, #unpriced :unpriced, #latency :latency",
            )
            .set_expression_attribute_names(Some(HashMap::from(
                [
                    ("#hour", "hour"),
                    ("#trigger", "triggerId"),
                    ("#variant", "variant"),
                    ("#status", "status"),
                    ("#ttl", "expiresAt"),
                    ("#n", "executions"),
                    ("#tokens", "tokens"),
                    ("#cost", "costNanos"),
                    ("#unpriced", "unpricedCalls"),
                    ("#latency", "latencyMs"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            )))
            .set_expression_attribute_values(Some(HashMap::from(
                [
                    (":hour", s(hour.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))),
                    (":trigger", s(v.trigger_id.to_string())),
                    (":variant", s(v.variant.clone())),
                    (":status", s(e.status.as_str())),
                    (":ttl", n(ttl.timestamp())),
                    (":one", n(1)),
                    (":tokens", n(v.tokens)),
                    (":cost", n(v.cost_usd.nanos)),
                    (":unpriced", n(v.unpriced_calls)),
                    (":latency", n(v.latency_ms)),
                ]
                .map(|(k, v)| (k.to_owned(), v)),
            )))
            .build()
            .map_err(build_err)?;
        Ok(Some((TransactWriteItem::builder().update(update).build(), TxRole::Usage)))
    }
}
