//! The execution log of the SQLite store: records by source, id and session, and the usage,
//! activity, split and insights reports (their rows are written by the turn's commit, in
//! `sessions`).

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use rusqlite::{OptionalExtension, params};
use switchboard_domain::{
    ActivityRow, Blob, Cost, ExecutionId, ExecutionRecord, ExecutionStatus, SessionId, TenantId, UsageCounts, UsageRow,
    VariantRow,
};
use switchboard_engine::{ExecutionLog, Page, StoreError};

use super::sessions::{hour_key, record_for_source};
use super::{SqliteStore, from_json, store_err};

/// A page of a session's unexpired execution records, oldest first: after execution `?3`, at most `?5`.
pub(crate) const LIST_EXECUTIONS: &str = "SELECT execution_id, body FROM executions
     WHERE tenant_id = CAST(?1 AS TEXT) AND session_id = CAST(?2 AS TEXT) AND execution_id > CAST(?3 AS TEXT)
       AND expires_at > CAST(?4 AS INTEGER)
     ORDER BY execution_id LIMIT CAST(?5 AS INTEGER)";

/// A tenant's executions per hour and status, hours `?2` to `?3` (keys as `hour_key` writes them).
pub(crate) const ACTIVITY_BETWEEN: &str = "SELECT hour, status, executions FROM activity_hourly
     WHERE tenant_id = CAST(?1 AS TEXT) AND hour >= CAST(?2 AS TEXT) AND hour <= CAST(?3 AS TEXT)
     ORDER BY hour, status";

/// A tenant's usage per day, agent and model, days `?2` to `?3` (`YYYY-MM-DD`).
pub(crate) const USAGE_BETWEEN: &str =
    "SELECT day, agent_id, model, calls, input_tokens, output_tokens, cache_read_tokens,
            cache_write_tokens, cost_nanos, unpriced_calls
     FROM usage_daily
     WHERE tenant_id = CAST(?1 AS TEXT) AND day >= CAST(?2 AS TEXT) AND day <= CAST(?3 AS TEXT)
     ORDER BY day, agent_id, model";

#[async_trait]
impl ExecutionLog for SqliteStore {
    async fn execution_for_source(
        &self,
        tenant: &TenantId,
        source_id: &str,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let (t, s, now) = (tenant.to_string(), source_id.to_owned(), self.clock.now().timestamp_millis());
        let body: Option<String> =
            self.db.call(move |c| Ok(record_for_source(c, &t, &s, now)?)).await.map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    async fn get_execution(
        &self,
        tenant: &TenantId,
        execution: ExecutionId,
    ) -> Result<Option<ExecutionRecord>, StoreError> {
        let (t, e, now) = (tenant.to_string(), execution.to_string(), self.clock.now().timestamp_millis());
        let body: Option<String> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached(
                    "SELECT body FROM executions WHERE tenant_id = ?1 AND execution_id = ?2 AND expires_at > ?3",
                )?
                .query_row(params![t, e, now], |r| r.get(0))
                .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    async fn list_executions(
        &self,
        tenant: &TenantId,
        session: SessionId,
        after: Option<ExecutionId>,
        limit: usize,
    ) -> Result<Page<ExecutionRecord>, StoreError> {
        let (t, s, now) = (tenant.to_string(), session.to_string(), self.clock.now().timestamp_millis());
        let after = after.map(|a| a.to_string()).unwrap_or_default();
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows: Vec<(String, String)> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(LIST_EXECUTIONS)?;
                let rows = stmt
                    .query_map(params![t, s, after, now, fetch], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let more = rows.len() > limit;
        let mut items = Vec::with_capacity(rows.len().min(limit));
        let mut last = None;
        for (id, body) in rows.into_iter().take(limit) {
            items.push(from_json(&body)?);
            last = Some(id);
        }
        Ok(Page { items, next_cursor: if more { last } else { None } })
    }

    async fn content(&self, tenant: &TenantId, session: SessionId, hashes: &[String]) -> Result<Vec<Blob>, StoreError> {
        let (t, s, now) = (tenant.to_string(), session.to_string(), self.clock.now().timestamp_millis());
        let hashes = hashes.to_vec();
        self.db
            .call(move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT body FROM content WHERE tenant_id = ?1 AND session_id = ?2 AND sha256 = ?3 AND expires_at > ?4",
                )?;
                let mut found = Vec::with_capacity(hashes.len());
                for sha256 in hashes {
                    if let Some(body) = stmt.query_row(params![t, s, sha256, now], |r| r.get(0)).optional()? {
                        found.push(Blob { sha256, body });
                    }
                }
                Ok(found)
            })
            .await
            .map_err(store_err)
    }

    async fn usage(&self, tenant: &TenantId, from: NaiveDate, to: NaiveDate) -> Result<Vec<UsageRow>, StoreError> {
        self.usage_rows(tenant, from, to).await
    }

    /// From memory once read (see `DayTokens`): the limit check costs no database call.
    async fn tokens_on(&self, tenant: &TenantId, day: NaiveDate) -> Result<u64, StoreError> {
        let (t, day) = (tenant.to_string(), day.to_string());
        if let Some(tokens) = self.day_tokens.get(&t, &day) {
            return Ok(tokens);
        }
        let day_tokens = self.day_tokens.clone();
        self.db
            .call(move |c| {
                let tokens: i64 = c
                    .prepare_cached(
                        "SELECT coalesce(sum(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0)
                         FROM usage_daily WHERE tenant_id = ?1 AND day = ?2",
                    )?
                    .query_row(params![t, day], |r| r.get(0))?;
                let tokens = u64::try_from(tokens).unwrap_or(0);
                day_tokens.fill(&t, &day, tokens);
                Ok(tokens)
            })
            .await
            .map_err(store_err)
    }

    async fn activity(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<ActivityRow>, StoreError> {
        let (t, from, to) = (tenant.to_string(), hour_key(from), hour_key(to));
        let raw: Vec<(String, String, i64)> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(ACTIVITY_BETWEEN)?;
                let rows = stmt
                    .query_map(params![t, from, to], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let mut rows = raw
            .into_iter()
            .map(|(hour, status, n)| {
                Ok(ActivityRow {
                    hour: DateTime::parse_from_rfc3339(&hour)
                        .map_err(|e| StoreError::Corrupt(format!("activity hour {hour}: {e}")))?
                        .with_timezone(&Utc),
                    status: ExecutionStatus::parse(&status)
                        .ok_or_else(|| StoreError::Corrupt(format!("activity status {status}")))?,
                    executions: u64::try_from(n).unwrap_or(0),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        // by hour, then by status in declaration order (not alphabetical)
        rows.sort_by_key(|r| (r.hour, ExecutionStatus::ALL.iter().position(|s| *s == r.status)));
        Ok(rows)
    }

    async fn variants(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<VariantRow>, StoreError> {
        super::variants::rows(self, tenant, hour_key(from), hour_key(to)).await
    }

    async fn insights(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<switchboard_domain::insights::InsightRow>, StoreError> {
        super::insights::rows(self, tenant, from, to).await
    }
}

impl SqliteStore {
    async fn usage_rows(&self, tenant: &TenantId, from: NaiveDate, to: NaiveDate) -> Result<Vec<UsageRow>, StoreError> {
        let (t, from, to) = (tenant.to_string(), from.to_string(), to.to_string());
        type Raw = (String, String, String, [i64; 7]);
        let raw: Vec<Raw> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(USAGE_BETWEEN)?;
                let rows = stmt
                    .query_map(params![t, from, to], |r| {
                        let mut n = [0i64; 7];
                        for (i, slot) in n.iter_mut().enumerate() {
                            *slot = r.get(3 + i)?;
                        }
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, n))
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        raw.into_iter()
            .map(|(day, agent, model, n)| {
                let u = |i: usize| u64::try_from(n[i]).unwrap_or(0);
                let counts = UsageCounts {
                    calls: u(0),
                    input_tokens: u(1),
                    output_tokens: u(2),
                    cache_read_tokens: u(3),
                    cache_write_tokens: u(4),
                    cost_usd: (u(0) > u(6)).then(|| Cost::from_nanos(u(5))),
                    unpriced_calls: u(6),
                };
                Ok(UsageRow {
                    day: day.parse().map_err(|e| StoreError::Corrupt(format!("usage day {day}: {e}")))?,
                    agent_id: agent.parse().map_err(|e| StoreError::Corrupt(format!("usage agent {agent}: {e}")))?,
                    model,
                    counts,
                })
            })
            .collect()
    }
}
