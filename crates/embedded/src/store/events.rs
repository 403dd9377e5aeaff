//! The outbound event log, which the operator stream replays.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use switchboard_domain::{OutboundEvent, TenantId};
use switchboard_engine::{EventLog, StoreError};

use super::{SqliteStore, from_json, store_err, to_json};

/// Logs an event (`?1` id, `?2` tenant, `?3` detail type, `?4` body, `?5` when) unless the tenant
/// has logged that id already: a replayed turn announcing again is not logged twice. Used alone
/// and inside the transactions of the outbox (a turn's commit, a limit's first refusal).
pub(crate) const LOG_EVENT: &str =
    "INSERT OR IGNORE INTO events (event_id, tenant_id, detail_type, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)";

/// A tenant's events after sequence number `?2`, oldest first, at most `?3`.
pub(crate) const EVENTS_AFTER: &str =
    "SELECT seq, body FROM events WHERE tenant_id = CAST(?1 AS TEXT) AND seq > CAST(?2 AS INTEGER)
     ORDER BY seq LIMIT CAST(?3 AS INTEGER)";

#[async_trait]
impl EventLog for SqliteStore {
    async fn events_after(
        &self,
        tenant: &TenantId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, OutboundEvent)>, StoreError> {
        self.events(tenant, after, limit).await
    }
}

impl SqliteStore {
    /// Appends an outbound event to the event log; `None` if the tenant had logged that event id
    /// already (a replayed turn publishing again), which is logged here with tenant and id.
    pub async fn log_event(&self, event: &OutboundEvent) -> Result<Option<i64>, StoreError> {
        let (id, t, kind, now) =
            (event.id.clone(), event.tenant_id.to_string(), event.detail_type.clone(), self.clock.now().to_rfc3339());
        let body = to_json(event);
        self.db
            .call(move |c| {
                let body = body?;
                let n = c.prepare_cached(LOG_EVENT)?.execute(params![id, t, kind, body, now])?;
                Ok((n > 0).then(|| c.last_insert_rowid()))
            })
            .await
            .map_err(store_err)
            .inspect(|seq| {
                if seq.is_none() {
                    tracing::info!(tenant = %event.tenant_id, event_id = %event.id, detail_type = %event.detail_type,
                        "event already logged for this tenant; the repeat is not logged or streamed again");
                }
            })
    }

    /// The sequence number of `tenant`'s event `id`, if it is logged.
    pub async fn event_seq(&self, tenant: &TenantId, id: &str) -> Result<Option<i64>, StoreError> {
        let (t, id) = (tenant.to_string(), id.to_owned());
        self.db
            .call(move |c| {
                let mut stmt = c.prepare_cached("SELECT seq FROM events WHERE tenant_id = ?1 AND event_id = ?2")?;
                Ok(stmt.query_row(params![t, id], |r| r.get(0)).optional()?)
            })
            .await
            .map_err(store_err)
    }

    /// A tenant's events after sequence number `after`, oldest first (`EVENTS_AFTER`).
    pub async fn events(
        &self,
        tenant: &TenantId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, OutboundEvent)>, StoreError> {
        let t = tenant.to_string();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<(i64, String)> = self
            .db
            .call(move |c| {
                let mut stmt = c.prepare_cached(EVENTS_AFTER)?;
                let rows =
                    stmt.query_map(params![t, after, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_err)?;
        rows.into_iter().map(|(seq, b)| Ok((seq, from_json(&b)?))).collect()
    }
}
