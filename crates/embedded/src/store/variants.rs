//! A tenant's traffic-split variants per hour (`variant_hourly`): what a turn's commit adds
//! ([`write_variant`], in its transaction) and what the activity report reads ([`rows`]).

use rusqlite::{Connection, params};
use switchboard_domain::{Cost, ExecutionStatus, TenantId, VariantRow};
use switchboard_engine::StoreError;

use super::sessions::VariantLine;
use super::{SqliteStore, store_err};
use chrono::{DateTime, Utc};

/// A tenant's split variants per hour and status, hours `?2` to `?3`.
pub(crate) const VARIANTS_BETWEEN: &str =
    "SELECT hour, trigger_id, variant, status, executions, tokens, cost_nanos, unpriced_calls, latency_ms
     FROM variant_hourly
     WHERE tenant_id = CAST(?1 AS TEXT) AND hour >= CAST(?2 AS TEXT) AND hour <= CAST(?3 AS TEXT)
     ORDER BY hour, trigger_id, variant, status";

/// Adds one execution's line to its variant's row of `hour` and `status`, inside the turn's unit `c`.
pub(super) fn write_variant(
    c: &Connection,
    tenant: &str,
    hour: &str,
    status: &str,
    (trigger, variant, [executions, tokens, cost, unpriced, latency]): &VariantLine,
) -> rusqlite::Result<()> {
    c.prepare_cached(
        "INSERT INTO variant_hourly (tenant_id, hour, trigger_id, variant, status, executions, tokens,
                                     cost_nanos, unpriced_calls, latency_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (tenant_id, hour, trigger_id, variant, status) DO UPDATE SET
                 executions = executions + excluded.executions,
                 tokens = tokens + excluded.tokens,
                 cost_nanos = cost_nanos + excluded.cost_nanos,
                 unpriced_calls = unpriced_calls + excluded.unpriced_calls,
                 latency_ms = latency_ms + excluded.latency_ms",
    )?
    .execute(params![tenant, hour, trigger, variant, status, executions, tokens, cost, unpriced, latency])?;
    Ok(())
}

/// The tenant's variant rows of the hours `from..=to` (keys as `hour_key` writes them), ordered
/// by hour, trigger, variant, then status in declaration order.
pub(super) async fn rows(
    store: &SqliteStore,
    tenant: &TenantId,
    from: String,
    to: String,
) -> Result<Vec<VariantRow>, StoreError> {
    type Raw = (String, String, String, String, [i64; 5]);
    let t = tenant.to_string();
    let raw: Vec<Raw> = store
        .db
        .call(move |c| {
            let mut stmt = c.prepare_cached(VARIANTS_BETWEEN)?;
            let rows = stmt
                .query_map(params![t, from, to], |r| {
                    let numbers = [r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?];
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, numbers))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
        .map_err(store_err)?;
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut rows = raw
        .into_iter()
        .map(|(hour, trigger, variant, status, [executions, tokens, cost, unpriced, latency])| {
            Ok(VariantRow {
                hour: DateTime::parse_from_rfc3339(&hour)
                    .map_err(|e| StoreError::Corrupt(format!("variant hour {hour}: {e}")))?
                    .with_timezone(&Utc),
                trigger_id: trigger.parse().map_err(|_| StoreError::Corrupt(format!("variant trigger {trigger}")))?,
                variant,
                status: ExecutionStatus::parse(&status)
                    .ok_or_else(|| StoreError::Corrupt(format!("variant status {status}")))?,
                executions: n(executions),
                tokens: n(tokens),
                cost_usd: Cost::from_nanos(n(cost)),
                unpriced_calls: n(unpriced),
                latency_ms: n(latency),
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    rows.sort_by(|a, b| {
        let status = |r: &VariantRow| ExecutionStatus::ALL.iter().position(|s| *s == r.status);
        (a.hour, a.trigger_id, &a.variant, status(a)).cmp(&(b.hour, b.trigger_id, &b.variant, status(b)))
    });
    Ok(rows)
}
