//! Sessions and their per-turn commits (one transaction: the sessions, the record, its usage,
//! activity and insight rows); the records are read in `executions`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use switchboard_domain::limits::CONTENT_TTL_DAYS;
use switchboard_domain::{ExecutionRecord, ExecutionStatus, Session, SessionId, TenantId, VariantRow};
use switchboard_engine::{
    ExecutionLog, IdleSession, Page, SessionFilter, SessionStore, SessionWrite, StoreError, TurnCommit, TurnStart,
};

use super::{SqliteStore, from_json, is_constraint, status_str, store_err};
use crate::db::atomic;
use crate::queue::SettleOnCommit;

/// The conversation's active session if there is one, else its newest (JSON).
fn latest_session_body(c: &Connection, tenant: &str, conversation: &str) -> rusqlite::Result<Option<String>> {
    c.prepare_cached(LATEST_SESSION)?.query_row(params![tenant, conversation], |r| r.get(0)).optional()
}

/// The conversation's active session, else its newest. Parameters cast (see
/// `crate::db`, "Plans that stay").
pub(crate) const LATEST_SESSION: &str = "SELECT body FROM sessions
     WHERE tenant_id = CAST(?1 AS TEXT) AND conversation_id = CAST(?2 AS TEXT)
     ORDER BY (status = 'active') DESC, seq DESC LIMIT 1";

/// Sessions due to close as abandoned at `?1` (epoch milliseconds), the longest idle first, at
/// most `?2`: from the partial index `sessions_by_idle` (schema step 23).
pub(crate) const IDLE_DUE: &str = "SELECT tenant_id, session_id FROM sessions
     WHERE idle_ms IS NOT NULL AND idle_ms <= CAST(?1 AS INTEGER)
     ORDER BY idle_ms LIMIT CAST(?2 AS INTEGER)";

/// A page of a tenant's sessions, newest first: before session `?2` when given, of status `?3` and
/// agent `?4` when given, at most `?5`.
pub(crate) const LIST_SESSIONS: &str = "SELECT body FROM sessions
     WHERE tenant_id = CAST(?1 AS TEXT)
       AND (CAST(?2 AS TEXT) IS NULL OR session_id < CAST(?2 AS TEXT))
       AND (CAST(?3 AS TEXT) IS NULL OR status = CAST(?3 AS TEXT))
       AND (CAST(?4 AS TEXT) IS NULL OR json_extract(body, '$.agentId') = CAST(?4 AS TEXT))
       AND (CAST(?6 AS TEXT) IS NULL OR json_extract(body, '$.channel') = CAST(?6 AS TEXT))
       AND (CAST(?7 AS TEXT) IS NULL OR json_extract(body, '$.split.variant') = CAST(?7 AS TEXT))
     ORDER BY session_id DESC LIMIT CAST(?5 AS INTEGER)";

/// The unexpired record of `source` (JSON).
pub(super) fn record_for_source(
    c: &Connection,
    tenant: &str,
    source: &str,
    now_ms: i64,
) -> rusqlite::Result<Option<String>> {
    c.prepare_cached("SELECT body FROM executions WHERE tenant_id = ?1 AND source_id = ?2 AND expires_at > ?3")?
        .query_row(params![tenant, source, now_ms], |r| r.get(0))
        .optional()
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        filter: SessionFilter,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Page<Session>, StoreError> {
        let t = tenant.to_string();
        let before = after.map(|s| s.to_string());
        let status = filter.status.map(status_str);
        let agent = filter.agent_id.map(|a| a.to_string());
        let (channel, variant) = (filter.channel, filter.variant);
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let bodies: Vec<String> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(LIST_SESSIONS)?;
                let rows = stmt
                    .query_map(params![t, before, status, agent, fetch, channel, variant], |r| r.get(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let sessions: Vec<Session> = bodies.iter().map(|b| from_json(b)).collect::<Result<_, _>>()?;
        Ok(Page::from_overfetch(sessions, limit, |s| s.session_id.to_string()))
    }

    async fn get_session(&self, tenant: &TenantId, session: SessionId) -> Result<Option<Session>, StoreError> {
        let (t, s) = (tenant.to_string(), session.to_string());
        let body: Option<String> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached("SELECT body FROM sessions WHERE tenant_id = ?1 AND session_id = ?2")?
                    .query_row(params![t, s], |r| r.get(0))
                    .optional()?)
            })
            .await
            .map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    /// The `version` column alone: no session body is read or parsed.
    async fn session_version(&self, tenant: &TenantId, session: SessionId) -> Result<Option<u64>, StoreError> {
        let (t, s) = (tenant.to_string(), session.to_string());
        let version: Option<i64> = self
            .db
            .call(move |c| {
                Ok(c.prepare_cached("SELECT version FROM sessions WHERE tenant_id = ?1 AND session_id = ?2")?
                    .query_row(params![t, s], |r| r.get(0))
                    .optional()?)
            })
            .await
            .map_err(store_err)?;
        Ok(version.map(|v| u64::try_from(v).unwrap_or_default()))
    }

    async fn sessions_for_conversation(
        &self,
        tenant: &TenantId,
        conversation_id: &str,
    ) -> Result<Vec<Session>, StoreError> {
        self.all_sessions(tenant, conversation_id).await
    }

    async fn latest_session(&self, tenant: &TenantId, conversation_id: &str) -> Result<Option<Session>, StoreError> {
        let (t, conv) = (tenant.to_string(), conversation_id.to_owned());
        let body: Option<String> =
            self.db.call(move |c| Ok(latest_session_body(c, &t, &conv)?)).await.map_err(store_err)?;
        body.map(|b| from_json(&b)).transpose()
    }

    /// Both reads in one call on the database thread.
    async fn turn_start(
        &self,
        _log: &dyn ExecutionLog,
        tenant: &TenantId,
        source_id: &str,
        conversation_id: &str,
    ) -> Result<TurnStart, StoreError> {
        let (t, source, conv) = (tenant.to_string(), source_id.to_owned(), conversation_id.to_owned());
        let now = self.clock.now().timestamp_millis();
        let (record, latest): (Option<String>, Option<String>) = self
            .db
            .call(move |c| match record_for_source(c, &t, &source, now)? {
                Some(record) => Ok((Some(record), None)),
                None => Ok((None, latest_session_body(c, &t, &conv)?)),
            })
            .await
            .map_err(store_err)?;
        match record {
            Some(done) => Ok(TurnStart::Recorded(Box::new(from_json(&done)?))),
            None => Ok(TurnStart::Latest(latest.map(|b| from_json(&b).map(Box::new)).transpose()?)),
        }
    }

    async fn commit_turn(&self, commit: &TurnCommit) -> Result<(), StoreError> {
        let rows = TurnRows::encode(commit, self.clock.now())?;
        let day_tokens = self.day_tokens.clone();
        // A worker's item is acked (and its next one received) in this same call, once the
        // turn's writes are kept.
        let settle = SettleOnCommit::current();
        self.db
            .call(move |c| {
                let tx = atomic(c)?;
                if let Err(refused) = rows.write(&tx)? {
                    return Ok(Err(refused));
                }
                tx.commit()?;
                day_tokens.add(&rows.execution.0, &rows.day, rows.tokens);
                if let Some(settle) = &settle {
                    settle.run(c);
                }
                Ok(Ok(()))
            })
            .await
            .map_err(store_err)?
    }

    async fn write_session(&self, write: &SessionWrite) -> Result<(), StoreError> {
        let row = session_row(write)?;
        self.db
            .call(move |c| {
                let tx = atomic(c)?;
                if let Err(refused) = write_session(&tx, &row)? {
                    return Ok(Err(refused));
                }
                tx.commit()?;
                Ok(Ok(()))
            })
            .await
            .map_err(store_err)?
    }

    async fn sessions_awaiting_approval(
        &self,
        tenant: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<Session>, StoreError> {
        let t = tenant.map(ToString::to_string);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let bodies: Vec<String> = self
            .db
            .call(move |c| {
                // Paused sessions are active; the active ones are few beside the rest.
                let mut stmt = c.prepare_cached(
                    "SELECT body FROM sessions
                      WHERE status = 'active' AND (?1 IS NULL OR tenant_id = ?1)
                        AND json_extract(body, '$.paused') IS NOT NULL
                      ORDER BY json_extract(body, '$.paused.approval.requestedAt'), session_id
                      LIMIT ?2",
                )?;
                let rows = stmt.query_map(params![t, limit], |r| r.get(0))?.collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        bodies.iter().map(|b| from_json(b)).collect()
    }

    async fn idle_sessions(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<IdleSession>, StoreError> {
        let now = now.timestamp_millis();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<(String, String)> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(IDLE_DUE)?;
                let rows = stmt
                    .query_map(params![now, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        let corrupt = |what: &str| StoreError::Corrupt(format!("an idle session with a bad {what}"));
        rows.into_iter()
            .map(|(t, s)| {
                Ok(IdleSession {
                    tenant_id: t.parse().map_err(|_| corrupt("tenant id"))?,
                    session_id: s.parse().map_err(|_| corrupt("session id"))?,
                })
            })
            .collect()
    }
}

/// A session write as its row.
fn session_row(w: &SessionWrite) -> Result<SessionRow, StoreError> {
    let s = &w.session;
    let body = serde_json::to_string(s).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok((
        s.tenant_id.to_string(),
        s.session_id.to_string(),
        s.conversation_id.clone(),
        status_str(s.status),
        i64::try_from(s.version).unwrap_or(i64::MAX),
        w.expected_version.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
        body,
        s.updated_at.timestamp_millis(),
        s.idle_due().map(|at| at.timestamp_millis()),
    ))
}

/// A session row: tenant, session, conversation, status, version, the version it must have
/// had (`None`: a new session), body, `updatedAt` (epoch ms).
type SessionRow = (String, String, String, &'static str, i64, Option<i64>, String, i64, Option<i64>);
/// An execution row: tenant, execution, session, source, expiry (ms), body.
type ExecutionRow = (String, String, String, String, i64, String);
/// A usage line: agent, model, and its numbers in `usage_daily`'s column order.
type UsageLine = (String, String, [i64; 7]);
/// What an execution adds to its split variant's hour: trigger, variant, and executions, tokens,
/// cost (nanos), unpriced calls and latency (ms), in `variant_hourly`'s column order.
pub(super) type VariantLine = (String, String, [i64; 5]);
/// An event-log row: event, tenant, detail type, body, when.
type EventRow = (String, String, String, String, String);

/// A turn's rows, encoded before the database call so that the call on the database thread
/// only writes.
struct TurnRows {
    sessions: Vec<SessionRow>,
    execution: ExecutionRow,
    /// A burst's earlier messages' records ([`TurnCommit::coalesced`]), counted in no usage.
    coalesced: Vec<ExecutionRow>,
    /// The execution's record replaces its paused one (see [`TurnCommit::resumes`]).
    resumes: bool,
    day: String,
    hour: String,
    status: &'static str,
    usage: Vec<UsageLine>,
    tokens: u64,
    variant: Option<VariantLine>,
    insight: Option<switchboard_domain::insights::InsightLine>,
    /// The turn's outbox, written to the event log with it.
    events: Vec<EventRow>,
    /// Recorded model content new to the session: hash, body, and when it expires (ms).
    content: Vec<(String, Vec<u8>)>,
    content_expires: i64,
}

impl TurnRows {
    fn encode(commit: &TurnCommit, now: DateTime<Utc>) -> Result<Self, StoreError> {
        let sessions = commit.sessions.iter().map(session_row).collect::<Result<Vec<_>, _>>()?;
        let e = &commit.execution;
        let execution = execution_row(e)?;
        let coalesced = commit.coalesced.iter().map(execution_row).collect::<Result<_, _>>()?;
        let lines = e.usage_lines_after(commit.resumes.as_deref());
        let tokens: u64 = lines.iter().map(|l| l.counts.tokens()).sum();
        let usage = lines
            .into_iter()
            .map(|l| {
                let c = l.counts;
                let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                let cost = c.cost_usd.map_or(0, |c| c.nanos);
                let numbers = [
                    c.calls,
                    c.input_tokens,
                    c.output_tokens,
                    c.cache_read_tokens,
                    c.cache_write_tokens,
                    cost,
                    c.unpriced_calls,
                ];
                (l.agent_id.to_string(), l.model, numbers.map(n))
            })
            .collect();
        let (day, hour, status) = (e.usage_day().to_string(), hour_key(e.activity_hour()), e.status.as_str());
        let at = now.to_rfc3339();
        let events = commit
            .events
            .iter()
            .map(|ev| {
                let body = serde_json::to_string(ev).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Ok((ev.id.clone(), ev.tenant_id.to_string(), ev.detail_type.clone(), body, at.clone()))
            })
            .collect::<Result<_, StoreError>>()?;
        let content = commit.content.iter().map(|b| (b.sha256.clone(), b.body.clone())).collect();
        let content_expires = (now + chrono::Duration::days(CONTENT_TTL_DAYS)).timestamp_millis();
        let resumes = commit.resumes.is_some();
        let variant = VariantRow::of(e).map(|v| {
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let numbers = [v.executions, v.tokens, v.cost_usd.nanos, v.unpriced_calls, v.latency_ms];
            (v.trigger_id.to_string(), v.variant, numbers.map(n))
        });
        Ok(Self {
            sessions,
            execution,
            coalesced,
            resumes,
            day,
            hour,
            status,
            usage,
            tokens,
            variant,
            insight: commit.insight(),
            events,
            content,
            content_expires,
        })
    }

    /// Writes the turn inside the call's unit `c`; `Ok(Err(_))` is a write the store refuses
    /// (a version conflict, a source already recorded), which rolls the unit back.
    fn write(&self, c: &Connection) -> rusqlite::Result<Result<(), StoreError>> {
        for session in &self.sessions {
            if let Err(refused) = write_session(c, session)? {
                return Ok(Err(refused));
            }
        }
        let (t, id, sid, source, expires, body) = &self.execution;
        if self.resumes {
            let replaced = c
                .prepare_cached(
                    "UPDATE executions SET expires_at = ?4, body = ?5
                      WHERE tenant_id = ?1 AND execution_id = ?2 AND source_id = ?3
                        AND json_extract(body, '$.status') = 'awaiting_approval'",
                )?
                .execute(params![t, id, source, expires, body])?;
            if replaced != 1 {
                return Ok(Err(StoreError::Duplicate(format!("execution {id} no longer awaits approval"))));
            }
        } else if let Err(refused) = insert_execution(c, &self.execution)? {
            return Ok(Err(refused));
        }
        for row in &self.coalesced {
            if let Err(refused) = insert_execution(c, row)? {
                return Ok(Err(refused));
            }
        }
        for (agent, model, [calls, input, output, read, write, cost, unpriced]) in &self.usage {
            c.prepare_cached(
                "INSERT INTO usage_daily (tenant_id, day, agent_id, model, calls, input_tokens, output_tokens,
                                                  cache_read_tokens, cache_write_tokens, cost_nanos, unpriced_calls)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                         ON CONFLICT (tenant_id, day, agent_id, model) DO UPDATE SET
                             calls = calls + excluded.calls,
                             input_tokens = input_tokens + excluded.input_tokens,
                             output_tokens = output_tokens + excluded.output_tokens,
                             cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
                             cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
                             cost_nanos = cost_nanos + excluded.cost_nanos,
                             unpriced_calls = unpriced_calls + excluded.unpriced_calls",
            )?
            .execute(params![t, self.day, agent, model, calls, input, output, read, write, cost, unpriced])?;
        }
        // An execution counts once, with the status it ends with: not while it awaits approval.
        if self.status != ExecutionStatus::AwaitingApproval.as_str() {
            c.prepare_cached(
                "INSERT INTO activity_hourly (tenant_id, hour, status, executions) VALUES (?1, ?2, ?3, 1)
                     ON CONFLICT (tenant_id, hour, status) DO UPDATE SET executions = executions + 1",
            )?
            .execute(params![t, self.hour, self.status])?;
        }
        if let Some(line) = &self.variant {
            super::variants::write_variant(c, t, &self.hour, self.status, line)?;
        }
        if let Some(line) = &self.insight {
            super::insights::write_insight(c, t, line)?;
        }
        for (id, tenant, kind, body, at) in &self.events {
            c.prepare_cached(super::events::LOG_EVENT)?.execute(params![id, tenant, kind, body, at])?;
        }
        for (sha256, body) in &self.content {
            // Written again (rare: the session had forgotten it), it is replaced whole, so that it
            // moves to the end of the table's order, where retention looks for it.
            c.prepare_cached(
                "INSERT OR REPLACE INTO content (tenant_id, session_id, sha256, expires_at, body)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![t, sid, sha256, self.content_expires, body])?;
        }
        Ok(Ok(()))
    }
}

/// The `executions` row of `e`.
fn execution_row(e: &ExecutionRecord) -> Result<ExecutionRow, StoreError> {
    Ok((
        e.tenant_id.to_string(),
        e.execution_id.to_string(),
        e.session_id.to_string(),
        e.source_id.clone(),
        e.expires_at.timestamp_millis(),
        serde_json::to_string(e).map_err(|e| StoreError::Corrupt(e.to_string()))?,
    ))
}

/// Records a new execution; `Ok(Err(_))` when its source is recorded already.
fn insert_execution(
    c: &Connection,
    (t, id, sid, source, expires, body): &ExecutionRow,
) -> rusqlite::Result<Result<(), StoreError>> {
    match c
        .prepare_cached(
            "INSERT INTO executions (tenant_id, execution_id, session_id, source_id, expires_at, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![t, id, sid, source, expires, body])
    {
        Ok(_) => Ok(Ok(())),
        Err(e) if is_constraint(&e) => Ok(Err(StoreError::Duplicate(format!("source {source} already recorded")))),
        Err(e) => Err(e),
    }
}

/// Inserts a new session or updates one at the version it was read at.
fn write_session(c: &Connection, row: &SessionRow) -> rusqlite::Result<Result<(), StoreError>> {
    let (t, sid, conv, status, version, expected, body, updated, idle) = row;
    let changed = match expected {
        None => c
            .prepare_cached(
                "INSERT INTO sessions (tenant_id, session_id, conversation_id, status, version, body, updated_ms, idle_ms)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![t, sid, conv, status, version, body, updated, idle]),
        Some(expected) => c
            .prepare_cached(
                "UPDATE sessions SET status = ?3, version = ?4, body = ?5, updated_ms = ?7, idle_ms = ?8
                             WHERE tenant_id = ?1 AND session_id = ?2 AND version = ?6",
            )?
            .execute(params![t, sid, status, version, body, expected, updated, idle]),
    };
    match changed {
        Ok(1) => Ok(Ok(())),
        Ok(_) => Ok(Err(StoreError::VersionConflict(format!("session {sid} changed")))),
        Err(e) if is_constraint(&e) => {
            Ok(Err(StoreError::VersionConflict(format!("conversation {conv} already has another active session"))))
        }
        Err(e) => Err(e),
    }
}

/// How an activity row's hour is stored: sortable text, `YYYY-MM-DDTHH:00:00Z`.
pub(super) fn hour_key(hour: DateTime<Utc>) -> String {
    switchboard_domain::hour_of(hour).format("%Y-%m-%dT%H:00:00Z").to_string()
}

impl SqliteStore {
    async fn all_sessions(&self, tenant: &TenantId, conversation_id: &str) -> Result<Vec<Session>, StoreError> {
        let (t, c) = (tenant.to_string(), conversation_id.to_owned());
        let bodies: Vec<String> = self
            .db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT body FROM sessions WHERE tenant_id = CAST(?1 AS TEXT) AND conversation_id = CAST(?2 AS TEXT)
                     ORDER BY seq",
                )?;
                let rows = stmt.query_map(params![t, c], |r| r.get(0))?.collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        bodies.iter().map(|b| from_json(b)).collect()
    }
}
