//! A tenant's insights per hour (`insight_hourly`, the counters added later in
//! `insight_counters`, and the sketches' buckets in `insight_buckets`): what a turn's commit adds ([`write_insight`], in its transaction) and what
//! the insights report reads ([`rows`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};
use switchboard_domain::TenantId;
use switchboard_domain::insights::{InsightCounts, InsightKey, InsightLine, InsightRow, Measure};
use switchboard_engine::StoreError;

use super::sessions::hour_key;
use super::{SqliteStore, store_err};

/// The counters that are `insight_hourly`'s columns (step 22), in [`InsightCounts::NAMES`]
/// order; the later ones are rows of `insight_counters` (step 23).
const HOURLY_COLUMNS: usize = 17;

/// A row's columns as read: its key and the counters that are columns.
type Counted = (KeyColumns, [i64; HOURLY_COLUMNS]);
/// A later counter of a row: its key, the counter's name, its count.
type Counter = (KeyColumns, String, i64);
/// A bucket of a row's sketch: its key, the measure, the bucket, its count.
type Bucket = (KeyColumns, String, i32, i64);

/// The row's key columns after the tenant: hour, agent, version, trigger, variant, channel
/// (`''` for none).
type KeyColumns = (String, String, i64, String, String, String);

fn key_columns(k: &InsightKey) -> KeyColumns {
    (
        hour_key(k.hour),
        k.agent_id.to_string(),
        i64::try_from(k.agent_version).unwrap_or(i64::MAX),
        k.trigger_id.map(|t| t.to_string()).unwrap_or_default(),
        k.variant.clone().unwrap_or_default(),
        k.channel.clone().unwrap_or_default(),
    )
}

/// Adds `line` to its row and its durations to their buckets, inside the turn's unit `c`.
pub(super) fn write_insight(c: &Connection, tenant: &str, line: &InsightLine) -> rusqlite::Result<()> {
    if line.counts == InsightCounts::default() && line.buckets.is_empty() {
        // (a turn paused before it did anything: nothing to count yet, no row to add)
        return Ok(());
    }
    let (hour, agent, version, trigger, variant, channel) = key_columns(&line.key);
    let v = line.counts.values().map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    c.prepare_cached(
        "INSERT INTO insight_hourly (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel,
             executions, failed, tool_calls, tool_failures, tokens, cost_nanos, unpriced_calls, conversations,
             first_responses, resolved, to_agent, to_human_agent, to_human_failure, to_human_max_turns,
             to_human_session_budget, to_human_limit, to_human_api)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21,
                 ?22, ?23, ?24)
         ON CONFLICT (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel) DO UPDATE SET
             executions = executions + excluded.executions,
             failed = failed + excluded.failed,
             tool_calls = tool_calls + excluded.tool_calls,
             tool_failures = tool_failures + excluded.tool_failures,
             tokens = tokens + excluded.tokens,
             cost_nanos = cost_nanos + excluded.cost_nanos,
             unpriced_calls = unpriced_calls + excluded.unpriced_calls,
             conversations = conversations + excluded.conversations,
             first_responses = first_responses + excluded.first_responses,
             resolved = resolved + excluded.resolved,
             to_agent = to_agent + excluded.to_agent,
             to_human_agent = to_human_agent + excluded.to_human_agent,
             to_human_failure = to_human_failure + excluded.to_human_failure,
             to_human_max_turns = to_human_max_turns + excluded.to_human_max_turns,
             to_human_session_budget = to_human_session_budget + excluded.to_human_session_budget,
             to_human_limit = to_human_limit + excluded.to_human_limit,
             to_human_api = to_human_api + excluded.to_human_api",
    )?
    .execute(params![
        tenant, hour, agent, version, trigger, variant, channel, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8],
        v[9], v[10], v[11], v[12], v[13], v[14], v[15], v[16]
    ])?;
    // The counters added after the table's columns: a row each, when not zero.
    for (name, n) in InsightCounts::NAMES.iter().zip(v).skip(HOURLY_COLUMNS).filter(|(_, n)| *n != 0) {
        c.prepare_cached(
            "INSERT INTO insight_counters (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel,
                                           counter, n)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel, counter)
             DO UPDATE SET n = n + excluded.n",
        )?
        .execute(params![tenant, hour, agent, version, trigger, variant, channel, name, n])?;
    }
    for (measure, bucket) in &line.buckets {
        c.prepare_cached(
            "INSERT INTO insight_buckets (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel,
                                          measure, bucket, count)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1)
             ON CONFLICT (tenant_id, hour, agent_id, agent_version, trigger_id, variant, channel, measure, bucket)
             DO UPDATE SET count = count + 1",
        )?
        .execute(params![tenant, hour, agent, version, trigger, variant, channel, measure.short(), bucket])?;
    }
    Ok(())
}

/// The tenant's insight rows of the hours `from..=to`, with their sketches.
pub(super) async fn rows(
    store: &SqliteStore,
    tenant: &TenantId,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<InsightRow>, StoreError> {
    let (t, from, to) = (tenant.to_string(), hour_key(from), hour_key(to));
    let (counted, buckets, counters): (Vec<Counted>, Vec<Bucket>, Vec<Counter>) = store
        .db
        .call(move |c| {
            let key = |r: &rusqlite::Row<'_>| -> rusqlite::Result<KeyColumns> {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
            };
            let mut stmt = c.prepare_cached(
                "SELECT hour, agent_id, agent_version, trigger_id, variant, channel,
                        executions, failed, tool_calls, tool_failures, tokens, cost_nanos, unpriced_calls,
                        conversations, first_responses, resolved, to_agent, to_human_agent, to_human_failure,
                        to_human_max_turns, to_human_session_budget, to_human_limit, to_human_api
                 FROM insight_hourly
                 WHERE tenant_id = CAST(?1 AS TEXT) AND hour >= CAST(?2 AS TEXT) AND hour <= CAST(?3 AS TEXT)",
            )?;
            let counted = stmt
                .query_map(params![t, from, to], |r| {
                    let mut n = [0i64; HOURLY_COLUMNS];
                    for (i, slot) in n.iter_mut().enumerate() {
                        *slot = r.get(6 + i)?;
                    }
                    Ok((key(r)?, n))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let mut stmt = c.prepare_cached(
                "SELECT hour, agent_id, agent_version, trigger_id, variant, channel, measure, bucket, count
                 FROM insight_buckets
                 WHERE tenant_id = CAST(?1 AS TEXT) AND hour >= CAST(?2 AS TEXT) AND hour <= CAST(?3 AS TEXT)",
            )?;
            let buckets = stmt
                .query_map(params![t, from, to], |r| Ok((key(r)?, r.get(6)?, r.get(7)?, r.get(8)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            let mut stmt = c.prepare_cached(
                "SELECT hour, agent_id, agent_version, trigger_id, variant, channel, counter, n
                 FROM insight_counters
                 WHERE tenant_id = CAST(?1 AS TEXT) AND hour >= CAST(?2 AS TEXT) AND hour <= CAST(?3 AS TEXT)",
            )?;
            let counters = stmt
                .query_map(params![t, from, to], |r| Ok((key(r)?, r.get(6)?, r.get(7)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok((counted, buckets, counters))
        })
        .await
        .map_err(store_err)?;
    assemble(counted, buckets, counters)
}

/// The rows read, with their later counters and their sketches' buckets.
fn assemble(
    counted: Vec<Counted>,
    buckets: Vec<Bucket>,
    counters: Vec<Counter>,
) -> Result<Vec<InsightRow>, StoreError> {
    let mut rows: BTreeMap<KeyColumns, InsightRow> = BTreeMap::new();
    for (columns, n) in counted {
        let key = decode_key(&columns)?;
        let mut values = [0; InsightCounts::NAMES.len()];
        for (slot, v) in values.iter_mut().zip(n) {
            *slot = u64::try_from(v).unwrap_or(0);
        }
        rows.insert(
            columns,
            InsightRow { key: Some(key), counts: InsightCounts::from_values(values), ..InsightRow::default() },
        );
    }
    for (columns, counter, n) in counters {
        let i = InsightCounts::NAMES.iter().position(|name| *name == counter);
        let (Some(i), Some(row)) = (i, rows.get_mut(&columns)) else {
            return Err(StoreError::Corrupt(format!("an insight counter {counter} without its row")));
        };
        let mut values = row.counts.values();
        values[i] = values[i].saturating_add(u64::try_from(n).unwrap_or(0));
        row.counts = InsightCounts::from_values(values);
    }
    for (columns, measure, bucket, count) in buckets {
        let measure = Measure::parse_short(&measure)
            .ok_or_else(|| StoreError::Corrupt(format!("insight bucket measure {measure}")))?;
        let Some(row) = rows.get_mut(&columns) else {
            return Err(StoreError::Corrupt("an insight bucket without its row".into()));
        };
        row.sketches.entry(measure).or_default().add_bucket(bucket, u64::try_from(count).unwrap_or(0));
    }
    Ok(rows.into_values().collect())
}

fn decode_key((hour, agent, version, trigger, variant, channel): &KeyColumns) -> Result<InsightKey, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("insight row {what}"));
    let text = |s: &String| (!s.is_empty()).then(|| s.clone());
    Ok(InsightKey {
        hour: DateTime::parse_from_rfc3339(hour).map_err(|_| corrupt("hour"))?.with_timezone(&Utc),
        agent_id: agent.parse().map_err(|_| corrupt("agent"))?,
        agent_version: u64::try_from(*version).unwrap_or(0),
        trigger_id: text(trigger).map(|t| t.parse()).transpose().map_err(|_| corrupt("trigger"))?,
        variant: text(variant),
        channel: text(channel),
    })
}
